//! `stripeguard events`: print the durable event log without taking the array; `--follow`
//! watches it, `--exec` runs a command per new event.
//!
//! Which events a hook runs for: those logged after the command started, unless `--from-start`
//! (every event in the log, or since `--since`); with `--cursor FILE`, those after the last one
//! it ran for in an earlier run (the file holds the array's uuid and the next event's number,
//! `UUID NUMBER\n`, replaced atomically after each hook), so a watcher restarted by its service manager neither
//! misses the events logged while it was down nor runs a hook twice.

use crate::cmd::shared::ago;
use crate::exit;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_engine::{read_log_of, LoggedEvent};
use stripeguard_ops::open_member_paths;

#[derive(Args)]
pub struct EventsArgs {
    /// The array's member files or block devices (read without taking the array: works while
    /// another process holds it).
    #[arg(required_unless_present = "array")]
    members: Vec<PathBuf>,
    /// The array by name or uuid instead of its members (found as `scan` finds them).
    #[arg(long, value_name = "NAME|UUID", conflicts_with = "members")]
    array: Option<String>,
    /// Only events newer than this: Unix seconds, or an age such as 90s, 10m, 2h, 3d.
    #[arg(long)]
    since: Option<String>,
    /// Keep watching and print new events as they are logged (every second).
    #[arg(long)]
    follow: bool,
    /// Run this shell command for each new event (logged after the command started, or after
    /// the --cursor), with SG_ARRAY_UUID, SG_ARRAY_NAME, SG_MEMBER_PATH (the path given for the event's member)
    /// and SG_EVENT_{NUMBER,TIME_MS,KIND,ACTION,STRIPE,MEMBER,POSITION,ROLE,EVIDENCE} in its
    /// environment, names as in --json (as ZFS's event daemon does). A hook still running
    /// after 120 s (STRIPEGUARD_HOOK_TIMEOUT) is killed with its process group, and the next
    /// event goes on.
    #[arg(long)]
    exec: Option<String>,
    /// With --exec: run the hook for the events already in the log too (or those since --since).
    #[arg(long, requires = "exec")]
    from_start: bool,
    /// With --exec: keep the last event the hook ran for in FILE, and go on after it when run
    /// again (events logged meanwhile included; a hook cut off by a crash runs again).
    #[arg(long, value_name = "FILE", requires = "exec")]
    cursor: Option<PathBuf>,
    /// Print JSON: one array of events (`[]` when none); one object per line with --follow.
    #[arg(long)]
    json: bool,
}

/// The saved position of `--cursor FILE`: the array's uuid and the first event number no hook
/// has run for yet; `None` when the file does not exist yet.
pub(crate) fn read_cursor(path: &std::path::Path, uuid: &str) -> Result<Option<u64>> {
    use std::io::Read;
    let mut text = String::new();
    match std::fs::File::open(path) {
        // A cursor is one short line: read no more than that (`--cursor /dev/zero`).
        Ok(f) => {
            f.take(256)
                .read_to_string(&mut text)
                .with_context(|| format!("reading the cursor {}", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading the cursor {}", path.display())),
    }
    // An empty file (made with `touch`) holds no position yet.
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut words = text.split_whitespace();
    let (Some(saved), Some(number), None) = (words.next(), words.next(), words.next()) else {
        bail!(
            "the cursor {} is not a stripeguard event cursor (expected: UUID NUMBER)",
            path.display()
        );
    };
    if saved != uuid {
        bail!(
            "the cursor {} belongs to array {saved}, not to this one ({uuid}); give another file",
            path.display()
        );
    }
    let n = number.parse().with_context(|| {
        format!(
            "the cursor {}: {number:?} is not an event number",
            path.display()
        )
    })?;
    Ok(Some(n))
}

/// Replace the cursor file atomically (a crash leaves the old position or the new one).
pub(crate) fn write_cursor(path: &std::path::Path, uuid: &str, number: u64) -> Result<()> {
    let tmp = path.with_extension("tmp-stripeguard");
    std::fs::write(&tmp, format!("{uuid} {number}\n"))
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("writing --cursor {}", path.display()))
}

/// `--since`: Unix seconds, or an age (`90s`, `10m`, `2h`, `3d`), as Unix milliseconds.
fn since_ms(s: &str) -> Result<u64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("--since {s:?}: give Unix seconds or an age like 10m"))?;
    let secs = match unit {
        "" => return Ok(n.saturating_mul(1000)),
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => bail!("--since {s:?}: unknown unit {unit:?} (s, m, h or d)"),
    };
    Ok(now.saturating_sub(secs.saturating_mul(1000)))
}

pub fn run(mut a: EventsArgs) -> Result<ExitCode> {
    crate::cmd::shared::resolve_members(&mut a.members, a.array.as_deref(), false)?;
    let since = a.since.as_deref().map(since_ms).transpose()?.unwrap_or(0);
    let members = open_member_paths(&a.members, false);
    if a.exec.is_some() {
        super::shared::hooks_die_with_us();
    }
    let first = read_log_of(&members)?;
    let uuid = stripeguard_format::hex(&first.array_uuid);
    let name = first.name.clone();
    // The last event number a hook must not run for (None: every event since `since`).
    let saved = match &a.cursor {
        Some(c) => read_cursor(c, &uuid)?,
        None => None,
    };
    // The first event number a hook runs for.
    let mut hook_from = saved.unwrap_or(if a.from_start || a.since.is_some() {
        0
    } else {
        first
            .entries
            .last()
            .map_or(0, |e| e.number.saturating_add(1))
    });
    let next = first
        .entries
        .last()
        .map_or(0, |e| e.number.saturating_add(1));
    if saved.is_some_and(|n| n > next) {
        eprintln!(
            "stripeguard: warning: the cursor is at event {}, past the log's last ({}): events before it are not run; is it this array's cursor from another copy of its members?",
            saved.unwrap_or_default(),
            next
        );
    }
    if let (Some(n), Some(oldest)) = (saved, first.entries.first()) {
        if n < oldest.number {
            eprintln!(
                "stripeguard: warning: {} event(s) after the cursor were overwritten in the log's ring before a hook ran for them",
                oldest.number - n
            );
        }
    }
    // A new cursor starts where this run starts, so that a restart before the first hook
    // still picks up from here.
    if let (Some(c), None) = (&a.cursor, saved) {
        write_cursor(c, &uuid, hook_from)?;
    }
    if a.json && !a.follow {
        let listed: Vec<&LoggedEvent> = first
            .entries
            .iter()
            .filter(|e| e.time_unix_ms >= since)
            .collect();
        println!("{}", serde_json::to_string(&listed)?);
    }
    let mut seen: Option<u64> = None;
    let mut log = first;
    loop {
        let fresh: Vec<&LoggedEvent> = log
            .entries
            .iter()
            .filter(|e| e.time_unix_ms >= since && seen.is_none_or(|n| e.number > n))
            .collect();
        if seen.is_none() && !a.json && !a.follow {
            println!(
                "{} event(s) in the log (ring of {}; {} older ones overwritten)",
                log.entries.len(),
                log.capacity,
                log.dropped
            );
            if log.not_understood > 0 {
                println!(
                    "{} entry(ies) written by a newer build hold codes this one does not know (skipped)",
                    log.not_understood
                );
            }
        }
        for e in &fresh {
            if a.json {
                if a.follow {
                    println!("{}", serde_json::to_string(e)?);
                }
            } else {
                println!(
                    "#{:<6} {} {}: {} — {} [{}]",
                    e.number,
                    ago(e.time_unix_ms / 1000),
                    stripeguard_engine::event_place(
                        e.kind,
                        e.role,
                        e.stripe,
                        e.member as usize,
                        e.position as usize,
                        log.data_chunks,
                        a.members
                            .get(e.member as usize)
                            .and_then(|p| p.to_str())
                            .filter(|_| e.role == stripeguard_engine::EventRole::Member),
                    ),
                    e.kind,
                    // Evidence is stored text: terminal escapes in it are shown, not obeyed.
                    stripeguard_xfer::proto::printable(e.evidence.as_bytes()),
                    e.action
                );
            }
            if let Some(cmd) = a.exec.as_ref().filter(|_| e.number >= hook_from) {
                // The member's path only for an event about a member or one of its units.
                let about_member = !matches!(e.role, stripeguard_engine::EventRole::Stripe);
                let path = a.members.get(e.member as usize).filter(|_| about_member);
                run_hook(cmd, e, &uuid, &name, path, a.json)?;
                hook_from = e.number.saturating_add(1);
                if let Some(c) = &a.cursor {
                    write_cursor(c, &uuid, hook_from)?;
                }
            }
        }
        if let Some(last) = log.entries.last() {
            seen = Some(seen.map_or(last.number, |s| s.max(last.number)));
        }
        if !a.follow {
            break;
        }
        std::io::stdout().flush().ok();
        std::thread::sleep(std::time::Duration::from_secs(1));
        if reader_gone() {
            // `events --follow | head -1`: nothing more is written until the next event, so
            // no SIGPIPE would end it; the closed pipe does, as it ends `tail -f`.
            break;
        }
        log = read_log_of(&members)?;
    }
    Ok(ExitCode::from(exit::OK))
}

/// Run `--exec`'s command for one event.
pub(crate) fn run_hook(
    cmd: &str,
    e: &LoggedEvent,
    uuid: &str,
    name: &str,
    member_path: Option<&PathBuf>,
    stdout_to_stderr: bool,
) -> Result<()> {
    let status = super::shared::run_bounded(cmd, None, |c| {
        if stdout_to_stderr {
            // (Standard output holds JSON: a hook's words go beside it, not into it.)
            c.stdout(std::process::Stdio::from(std::io::stderr()));
        }
        c.env("SG_ARRAY_UUID", uuid)
            .env("SG_ARRAY_NAME", name)
            .env(
                "SG_MEMBER_PATH",
                member_path
                    .map(|p| p.as_os_str().to_owned())
                    .unwrap_or_default(),
            )
            .env("SG_EVENT_NUMBER", e.number.to_string())
            .env("SG_EVENT_TIME_MS", e.time_unix_ms.to_string())
            .env("SG_EVENT_KIND", e.kind.as_str())
            .env("SG_EVENT_ACTION", e.action.as_str())
            .env("SG_EVENT_STRIPE", e.stripe.to_string())
            .env("SG_EVENT_MEMBER", e.member.to_string())
            .env("SG_EVENT_POSITION", e.position.to_string())
            .env("SG_EVENT_ROLE", e.role.as_str())
            .env("SG_EVENT_EVIDENCE", &e.evidence);
    });
    let status = match status {
        Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {
            eprintln!(
                "stripeguard: warning: --exec for event #{} {err}; going on with the next event",
                e.number
            );
            return Ok(());
        }
        other => other.with_context(|| format!("running --exec {cmd:?}"))?,
    };
    if !status.success() {
        eprintln!(
            "stripeguard: warning: --exec for event #{} exited with {status}",
            e.number
        );
    }
    Ok(())
}

/// Whether standard output is a pipe or socket whose reader has gone (poll says POLLERR or
/// POLLHUP on the write end).
fn reader_gone() -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let out = std::io::stdout();
    let mut fds = [PollFd::new(&out, PollFlags::OUT)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&now)).is_ok()
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}
