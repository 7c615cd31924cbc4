//! What more than one array command uses: the member list and its assembly, and the printing of
//! counters, events and ages.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use stripeguard_engine::{Array, AssembleOptions, Counters};
use stripeguard_ops::assemble_paths_with;

#[derive(Args)]
pub struct MembersArgs {
    /// The array's member files, block devices or NBD URIs (given out of order, they are put
    /// in the order their superblocks say, with a note).
    #[arg(required_unless_present = "array")]
    pub(crate) members: Vec<PathBuf>,
    /// The array by name or uuid instead of its members: they are found by scanning the
    /// configuration file's `devices` globs and member URIs (default: every block device;
    /// `stripeguard scan` shows what is found). The file is /etc/stripeguard/stripeguard.conf,
    /// or STRIPEGUARD_CONFIG.
    #[arg(long, value_name = "NAME|UUID", conflicts_with = "members")]
    pub(crate) array: Option<String>,
    /// Open members with O_DIRECT (reads reach the device, not the page cache).
    #[arg(long)]
    pub(crate) direct: bool,
    /// Refuse at once when another process may hold the array, instead of waiting for it (a
    /// holder on another host whose heartbeat looks stale is otherwise watched for two of its
    /// heartbeat intervals, at most 2 minutes; `status` otherwise gives a holder that is
    /// starting up 5 s to answer).
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// When more members are stale than the array survives, bring back the freshest stale
    /// ones (highest event count), every read verified against the integrity metadata (what
    /// cannot be verified is refused), for an array that cannot be assembled otherwise (md's
    /// --assemble --force). Read-only (`status`, `read`, `serve --read-only`) unless
    /// --writable is given too.
    #[arg(long)]
    pub(crate) force_assemble: bool,
    /// With --force-assemble, for a command that writes (`replace`, `serve`, `write`, `scrub`):
    /// record the members brought back as current and resync every stripe at once, listing
    /// what cannot be verified as untrusted (refused on read until overwritten). Permanent: a
    /// wrong choice of members cannot be undone, so copy the data off read-only first.
    #[arg(long, requires = "force_assemble")]
    pub(crate) writable: bool,
}

impl MembersArgs {
    /// The configuration file's settings for the array given by `--array`, if any.
    pub(crate) fn configured(&self) -> Option<stripeguard_ops::config::ArrayConf> {
        let key = self.array.as_ref()?;
        let (_, cfg) = stripeguard_ops::config::Config::load(None).ok()?;
        cfg.array(key).map(|(_, a)| a.clone())
    }

    /// Fill in the member list: found by scanning for `--array` (with `wait`, waiting up to the
    /// configuration's `wait` for members not there yet, as at boot), or the list given put
    /// in index order.
    pub(crate) fn resolve(&mut self, wait: bool) -> Result<()> {
        resolve_members(&mut self.members, self.array.as_deref(), wait)
    }
}

/// Fill in a member list: found by scanning for `array` (a name or uuid; with `wait`, waiting
/// up to the configuration's `wait` for members not there yet, as at boot), or the list given
/// put in index order.
pub(crate) fn resolve_members(
    members: &mut Vec<PathBuf>,
    array: Option<&str>,
    wait: bool,
) -> Result<()> {
    let Some(key) = array else {
        let (ordered, note) = stripeguard_ops::order_members(members);
        if let Some(n) = note {
            eprintln!("stripeguard: note: {n}");
            *members = ordered;
        }
        return Ok(());
    };
    let (_, cfg) = stripeguard_ops::config::Config::load(None).map_err(anyhow::Error::msg)?;
    let patience = wait
        .then(|| cfg.array(key).and_then(|(_, a)| a.wait.clone()))
        .flatten()
        .and_then(|w| stripeguard_ops::config::parse_duration(&w))
        .unwrap_or_default();
    let started = std::time::Instant::now();
    let mut said = false;
    let found = loop {
        let found = stripeguard_ops::find_array(key, &cfg);
        let complete = matches!(&found, Ok(f) if f.health() == "complete");
        if complete || started.elapsed() >= patience {
            break found?;
        }
        if !said {
            eprintln!(
                "stripeguard: waiting up to {} s for the members of {key} not found yet",
                patience.as_secs()
            );
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    eprintln!(
        "stripeguard: array {} ({}): {}",
        found.name,
        found.uuid,
        found
            .member_paths()
            .iter()
            .map(|p| stripeguard_ops::display_member(p))
            .collect::<Vec<_>>()
            .join(" ")
    );
    *members = found.member_paths();
    Ok(())
}

/// A forced assembly is read-only unless `--writable` says otherwise, and `--writable` means
/// nothing to a command that does not write.
pub(crate) fn check_forced(a: &MembersArgs, writable: bool) -> Result<()> {
    if a.force_assemble && writable && !a.writable {
        anyhow::bail!(
            "--force-assemble is read-only unless --writable is given too: this command writes, and a writable forced assembly records the stale members it brings back as current for good (every stripe is then resynced, what cannot be verified listed untrusted); copy the data off first with `read --force-assemble` or `serve --read-only --force-assemble`"
        );
    }
    if a.writable && !writable {
        anyhow::bail!(
            "--writable makes a forced assembly permanent, but this command only reads: leave it out, or give it to a command that writes (replace, serve, scrub, write)"
        );
    }
    Ok(())
}

/// Assemble the array read-only as `status` does (it prints members out itself), forced when
/// asked.
/// The caller checks the flags first ([`check_forced`]).
pub(crate) fn assemble_quietly(a: &MembersArgs) -> Result<Array, stripeguard_engine::EngineError> {
    let opts = AssembleOptions {
        writable: false,
        force: a.force_assemble,
        ..AssembleOptions::default()
    };
    let array = assemble_paths_with(&a.members, a.direct, &opts)?;
    for e in array.events() {
        if e.kind == stripeguard_engine::EventKind::ForcedAssembly {
            eprintln!("stripeguard: FORCED ASSEMBLY: {}", e.evidence);
        }
    }
    Ok(array)
}

/// Where a command that changes the array runs: here, on the array it assembled, or in the
/// process on this host that holds it and answers its control socket (a running `serve`).
pub(crate) enum Held {
    Here(Box<Array>),
    ByHolder([u8; 16]),
}

/// [`assemble`]; when that fails because a process holding the array answers its control
/// socket, [`Held::ByHolder`] with the array's uuid, else the assembly's error.
pub(crate) fn assemble_or_holder(a: &MembersArgs, writable: bool) -> Result<Held> {
    match assemble(a, writable) {
        Ok(array) => Ok(Held::Here(Box::new(array))),
        Err(e) => match stripeguard_ops::peek_uuid(&a.members)
            .filter(|u| stripeguard_ops::ask_holder(u).is_ok())
        {
            Some(uuid) => Ok(Held::ByHolder(uuid)),
            None => Err(e),
        },
    }
}

/// Assemble the array on the members given, warning on stderr of each member out of it.
pub(crate) fn assemble(a: &MembersArgs, writable: bool) -> Result<Array> {
    check_forced(a, writable)?;
    let opts = AssembleOptions {
        writable,
        no_wait: a.no_wait,
        force: a.force_assemble,
        ..AssembleOptions::default()
    };
    let array = assemble_paths_with(&a.members, a.direct, &opts)?;
    for e in array.events() {
        if e.kind == stripeguard_engine::EventKind::ForcedAssembly {
            eprintln!("stripeguard: FORCED ASSEMBLY: {}", e.evidence);
        }
    }
    for h in array.health() {
        if let Some(why) = &h.failed {
            eprintln!(
                "stripeguard: WARNING: member {} ({}) is out of the array: {why}; running DEGRADED{}",
                h.index,
                h.name,
                if writable {
                    " — the other members' superblocks now record it as gone, so it will not be taken back as current; replace it"
                } else {
                    ""
                }
            );
        }
    }
    Ok(array)
}

/// The counters as JSON.
pub(super) fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::to_value(c).expect("serializable")
}

/// Events shown in human output (all of them are in `--json`).
const EVENTS_SHOWN: usize = 20;

/// Print the first events: to stderr for read/write (whose stdout may carry data), to stdout
/// for status.
pub(super) fn print_events(array: &Array, to_stdout: bool) {
    let events = array.events();
    let k = array.superblock().data_chunks as usize;
    let names: Vec<String> = array.health().into_iter().map(|h| h.name).collect();
    // The same finding met again (a stripe read twice) is one line with a count.
    let mut distinct: Vec<(String, usize)> = Vec::new();
    for e in &events {
        let line = format!(
            "  {}: {} — {} [{}]",
            stripeguard_engine::event_place(
                e.kind,
                e.role,
                e.stripe,
                e.member,
                e.position,
                k,
                names
                    .get(e.member)
                    .map(String::as_str)
                    .filter(|_| e.role == stripeguard_engine::EventRole::Member),
            ),
            e.kind,
            e.evidence,
            e.action
        );
        match distinct.iter_mut().find(|(l, _)| *l == line) {
            Some((_, n)) => *n += 1,
            None => distinct.push((line, 1)),
        }
    }
    let mut lines = Vec::new();
    if distinct.len() > EVENTS_SHOWN {
        lines.push(format!(
            "  (first {EVENTS_SHOWN} of {} events; --json lists them all)",
            events.len()
        ));
    }
    for (l, n) in distinct.into_iter().take(EVENTS_SHOWN) {
        lines.push(if n > 1 { format!("{l} (x{n})") } else { l });
    }
    for l in lines {
        if to_stdout {
            println!("{l}");
        } else {
            eprintln!("{l}");
        }
    }
}

/// A Unix time as an age (`90 s ago`, `12 min ago`, `3 h ago`, `2 days ago`).
pub(super) fn ago(t: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(t);
    let s = now.saturating_sub(t);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

/// How long a hook (`--exec`) or the mail program may run before it is killed: one that hangs
/// (a mail server that does not answer) must not stop the events behind it. 120 s, or
/// `STRIPEGUARD_HOOK_TIMEOUT` seconds.
fn hook_limit() -> std::time::Duration {
    let secs = match std::env::var("STRIPEGUARD_HOOK_TIMEOUT") {
        Err(_) => 120,
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                eprintln!(
                    "stripeguard: warning: STRIPEGUARD_HOOK_TIMEOUT={v:?} is not a whole number of seconds above 0; using 120"
                );
                120
            }
        },
    };
    std::time::Duration::from_secs(secs)
}

/// Run `sh -c` with `cmd` as configured by `setup`, feeding `input` on its standard input, and
/// wait for it at most [`hook_limit`]; past that, its whole process group is killed (a shell's
/// children too) and the error says so.
pub(crate) fn run_bounded(
    cmd: &str,
    input: Option<&[u8]>,
    setup: impl FnOnce(&mut std::process::Command),
) -> std::io::Result<std::process::ExitStatus> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd).process_group(0);
    if input.is_some() {
        c.stdin(std::process::Stdio::piped());
    }
    setup(&mut c);
    let mut child = c.spawn()?;
    let pgid = i32::try_from(child.id()).unwrap_or(0);
    RUNNING_HOOK.store(pgid, std::sync::atomic::Ordering::SeqCst);
    let _clear = ClearOnDrop;
    if let (Some(mut i), Some(bytes)) = (child.stdin.take(), input) {
        let _ = i.write_all(bytes);
    }
    let t = std::time::Instant::now();
    let limit = hook_limit();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if t.elapsed() > limit {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("killed after {} s", limit.as_secs()),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The process group of the hook running now (0: none), for [`hooks_die_with_us`].
static RUNNING_HOOK: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

struct ClearOnDrop;

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        RUNNING_HOOK.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

/// On SIGINT or SIGTERM, end the hook running now (its whole process group: it runs in one of
/// its own, so a terminal's Ctrl-C does not reach it) and exit as the signal would
/// (128 + its number). Without this a hook outlives a stopped monitor (`events --follow
/// --exec`, `monitor`).
pub(crate) fn hooks_die_with_us() {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let pg = RUNNING_HOOK.load(std::sync::atomic::Ordering::SeqCst);
            if let Some(pid) = rustix::process::Pid::from_raw(pg) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
            }
            std::process::exit(128 + sig);
        }
    });
}
