//! `stripeguard monitor` (issue 36 §3, as `mdadm --monitor` and ZFS's zed): follows the event
//! log of every array it can find — the configuration file's and what a scan finds, held or
//! not — and for each new event logs a line (stderr and syslog), runs the array's hook (the
//! configuration's `hook`, or `--exec`) with the same variables as `events --exec` plus
//! SG_ARRAY_NAME, and mails it when `--mail` says where. Its position per array is kept in a
//! cursor file (`--cursor-dir`, one `UUID.cursor` each, the format of `events --cursor`), so a
//! restart runs nothing twice and misses nothing. `--oneshot` makes one pass and exits with a
//! status (0 every array complete and no event needing attention, 1 otherwise): for cron.

use crate::cmd::events::{read_cursor, run_hook, write_cursor};
use crate::exit;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_engine::{read_log_of, EventKind, LoggedEvent};
use stripeguard_ops::config::Config;

#[derive(Args)]
pub struct MonitorArgs {
    /// Where the per-array positions are kept (made if missing).
    #[arg(long, default_value = "/var/lib/stripeguard")]
    cursor_dir: PathBuf,
    /// A hook for arrays whose configuration names none (a shell command, as `events --exec`).
    #[arg(long)]
    exec: Option<String>,
    /// Mail each event to this address through --mail-program (as `mdadm --monitor --mail`);
    /// an event the mail program fails for is tried again at the next pass (its hook too).
    #[arg(long)]
    mail: Option<String>,
    /// The program that sends mail: it reads the message, headers first, on its standard input.
    #[arg(long, default_value = "sendmail -t")]
    mail_program: String,
    /// Check once and exit: 0 every array complete with no event needing attention, 1 otherwise.
    #[arg(long)]
    oneshot: bool,
    /// Seconds between passes.
    #[arg(long, default_value_t = 2)]
    interval: u64,
}

pub fn run(a: MonitorArgs) -> Result<ExitCode> {
    // A mail program or hook that exits without reading its input must not kill the monitor
    // (the write fails instead, and is said).
    crate::sigpipe::ignore();
    super::shared::hooks_die_with_us();
    std::fs::create_dir_all(&a.cursor_dir)
        .with_context(|| format!("cannot make --cursor-dir {}", a.cursor_dir.display()))?;
    // Each array's health as last said: a change is news (a member gone from an idle array,
    // and its return), the same health pass after pass is not.
    let mut said: std::collections::HashMap<String, String> = Default::default();
    loop {
        let attention = pass(&a, &mut said)?;
        if a.oneshot {
            return Ok(ExitCode::from(if attention {
                exit::FOUND
            } else {
                exit::OK
            }));
        }
        std::thread::sleep(std::time::Duration::from_secs(a.interval.max(1)));
    }
}

/// One look at every array: new events handled, whether anything needs attention.
fn pass(a: &MonitorArgs, said: &mut std::collections::HashMap<String, String>) -> Result<bool> {
    let (_, cfg) = Config::load(None).map_err(anyhow::Error::msg)?;
    let found = stripeguard_ops::scan(&stripeguard_ops::candidates(&[], &cfg), &cfg);
    let mut attention = false;
    // Health that changed since the last pass (or is not complete at the first) is a line on
    // stderr and in syslog: err when it needs attention, notice when it is complete again.
    let mut tell = |uuid: String, health: String, line: String| {
        if said.get(&uuid) == Some(&health) || (!said.contains_key(&uuid) && health == "complete") {
            said.insert(uuid, health);
            return;
        }
        let severity = if health == "complete" { 5 } else { 3 };
        eprintln!("stripeguard monitor: {line}");
        stripeguard_ops::syslog(severity, "stripeguard monitor", &line);
        said.insert(uuid, health);
    };
    // A configured array none of whose members is found is news too.
    for (n, u) in stripeguard_ops::configured_missing(
        &cfg,
        &found.iter().map(|f| f.uuid_bytes()).collect::<Vec<_>>(),
    ) {
        let hex = stripeguard_format::hex(&u);
        let line = format!("{n}: no member of array {hex} found among the configured devices");
        tell(hex, "missing".into(), line);
        attention = true;
    }
    if share_spares(a, &cfg, &found) {
        attention = true;
    }
    for f in &found {
        let health = f.health();
        if health != "complete" {
            attention = true;
        }
        let shown = if f.name.is_empty() {
            &f.uuid[..8]
        } else {
            &f.name
        };
        let line = if health == "complete" {
            format!(
                "{shown}: complete again ({}/{} members)",
                f.current(),
                f.members
            )
        } else {
            let gone: Vec<String> = f
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.as_ref().is_none_or(|m| m.standing != "current"))
                .map(|(i, s)| match s {
                    None => format!("member {i} not found"),
                    Some(m) => format!("member {i} {} ({})", m.path.display(), m.standing),
                })
                .collect();
            format!(
                "{shown}: {health}, {}/{} members: {}",
                f.current(),
                f.members,
                gone.join("; ")
            )
        };
        tell(f.uuid.clone(), health.to_string(), line);
        let name = if f.name.is_empty() {
            f.uuid[..8].to_string()
        } else {
            f.name.clone()
        };
        let paths = f.member_paths();
        let members = stripeguard_ops::open_member_paths(&paths, false);
        let log = match read_log_of(&members) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("stripeguard monitor: {name}: cannot read its event log: {e}");
                attention = true;
                continue;
            }
        };
        let cursor = a.cursor_dir.join(format!("{}.cursor", f.uuid));
        let next_new = log.entries.last().map_or(0, |e| e.number.saturating_add(1));
        // A cursor that cannot be read is this array's problem, said and counted, not a
        // reason to stop watching every other array.
        let from = match read_cursor(&cursor, &f.uuid) {
            Ok(Some(from)) => from,
            Ok(None) => {
                // First sight of this array: its old events are history, not news.
                write_cursor(&cursor, &f.uuid, next_new)?;
                continue;
            }
            Err(e) => {
                eprintln!(
                    "stripeguard monitor: {name}: its position {} cannot be used ({e:#}); remove the file to start again from the newest event",
                    cursor.display()
                );
                attention = true;
                continue;
            }
        };
        // The configuration's entry for this array: by its uuid, else by the name it goes by.
        let conf = cfg
            .name_of(&f.uuid_bytes())
            .and_then(|n| cfg.array(n))
            .or_else(|| cfg.array(&name));
        let hook = conf
            .and_then(|(_, c)| c.hook.clone())
            .or_else(|| a.exec.clone());
        // Events the ring overwrote before this pass saw them (the monitor was stopped, or
        // the array logged faster than it polls): said, as they can no longer be reported.
        if let Some(oldest) = log.entries.first().map(|e| e.number) {
            if from < oldest {
                let lost = oldest - from;
                let line = format!(
                    "{name}: {lost} event(s) were overwritten in the event log's ring (of {}) before this monitor saw them: `stripeguard status` counts what the log still holds",
                    log.capacity
                );
                eprintln!("stripeguard monitor: {line}");
                stripeguard_ops::syslog(4, "stripeguard monitor", &line);
                attention = true;
            }
        }
        for e in log.entries.iter().filter(|e| e.number >= from) {
            if needs_attention(e) {
                attention = true;
            }
            let line = format!(
                "{name}: {} {}: {} [{}]",
                e.kind,
                stripeguard_engine::event_place(
                    e.kind,
                    e.role,
                    e.stripe,
                    e.member as usize,
                    e.position as usize,
                    log.data_chunks,
                    None
                ),
                stripeguard_xfer::proto::printable(e.evidence.as_bytes()),
                e.action
            );
            eprintln!("stripeguard monitor: {line}");
            stripeguard_ops::syslog(severity(e), "stripeguard monitor", &line);
            // (A slot the scan did not find has no path to give.)
            let path = paths
                .get(e.member as usize)
                .filter(|_| e.role != stripeguard_engine::EventRole::Stripe)
                .filter(|p| !std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).contains(&0));
            if let Some(cmd) = &hook {
                run_hook(cmd, e, &f.uuid, &name, path, false)?;
            }
            // A mail that could not be handed over is tried again at the next pass, from this
            // event (its hook then runs again too: at least once, never skipped).
            if let Some(to) = &a.mail {
                if !mail(&a.mail_program, to, &name, &f.uuid, &line) {
                    eprintln!(
                        "stripeguard monitor: {name}: event #{} is tried again at the next pass",
                        e.number
                    );
                    attention = true;
                    break;
                }
            }
            // After the hook: a crash before this runs it again, never skips it.
            write_cursor(&cursor, &f.uuid, e.number.saturating_add(1))?;
        }
    }
    Ok(attention)
}

/// Spare groups (FORMAT.md §2.11): an array of a group that has had a member out for its spare
/// delay (as this monitor has seen, kept in `UUID.degraded` beside the cursors) and lists no
/// spare found gets one from a complete array of its group. Whether a move failed.
fn share_spares(a: &MonitorArgs, cfg: &Config, found: &[stripeguard_ops::FoundArray]) -> bool {
    let group_of = |f: &stripeguard_ops::FoundArray| {
        cfg.name_of(&f.uuid_bytes())
            .and_then(|n| cfg.array(n))
            .or_else(|| cfg.array(&f.name))
            .and_then(|(_, c)| c.spare_group.clone())
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut failed = false;
    let mut given: Vec<String> = Vec::new();
    for taker in found {
        let since_file = a.cursor_dir.join(format!("{}.degraded", taker.uuid));
        if taker.health() == "complete" {
            let _ = std::fs::remove_file(&since_file);
            continue;
        }
        let since = match std::fs::read_to_string(&since_file)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            Some(t) => t,
            None => {
                let _ = std::fs::write(&since_file, format!("{now}\n"));
                now
            }
        };
        let Some(group) = group_of(taker) else {
            continue;
        };
        if taker.spares.iter().any(|s| s.listed)
            || now.saturating_sub(since) < u64::from(taker.spare_delay_seconds)
        {
            continue;
        }
        let giver = found.iter().find_map(|g| {
            (g.uuid != taker.uuid
                && g.health() == "complete"
                && group_of(g).as_deref() == Some(group.as_str()))
            .then(|| {
                g.spares
                    .iter()
                    .find(|s| s.listed && !given.contains(&s.uuid))
                    .map(|s| (g, s))
            })
            .flatten()
        });
        let Some((giver, spare)) = giver else {
            continue;
        };
        given.push(spare.uuid.clone());
        let line = match stripeguard_ops::spares::move_spare(giver, spare, taker) {
            Ok(()) => format!(
                "spare group {group}: hot spare {} moved from array {} to array {}, which has a member out",
                spare.path.display(),
                giver.uuid,
                taker.uuid
            ),
            Err(e) => {
                failed = true;
                format!(
                    "spare group {group}: hot spare {} could not move from array {} to array {}: {e}",
                    spare.path.display(),
                    giver.uuid,
                    taker.uuid
                )
            }
        };
        eprintln!("stripeguard monitor: {line}");
        stripeguard_ops::syslog(if failed { 3 } else { 5 }, "stripeguard monitor", &line);
    }
    failed
}

/// Whether an event means something is wrong now (a member gone, data refused).
fn needs_attention(e: &LoggedEvent) -> bool {
    matches!(
        e.kind,
        EventKind::MemberFailed
            | EventKind::Unrecoverable
            | EventKind::ResyncUnrecoverable
            | EventKind::Untrusted
            | EventKind::ForcedAssembly
    )
}

fn severity(e: &LoggedEvent) -> u8 {
    if needs_attention(e) {
        3
    } else if e.action.as_str() == "notice" || e.action.as_str() == "resynced" {
        5
    } else {
        4
    }
}

/// Hand one message to the mail program; a failure is said, not fatal. Whether it took it.
fn mail(program: &str, to: &str, name: &str, uuid: &str, line: &str) -> bool {
    let msg = format!(
        "To: {to}\nSubject: stripeguard: {name}: {}\n\nArray {name} ({uuid}) on {}:\n\n{line}\n",
        line.split(':').nth(1).unwrap_or("event").trim(),
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    );
    // A mail program that hangs does not stop the monitor: it is killed after a while.
    let sent = super::shared::run_bounded(program, Some(msg.as_bytes()), |_| {});
    match sent {
        Ok(s) if s.success() => true,
        Ok(s) => {
            eprintln!("stripeguard monitor: --mail-program {program:?} exited with {s}");
            false
        }
        Err(e) => {
            eprintln!("stripeguard monitor: cannot run --mail-program {program:?}: {e}");
            false
        }
    }
}
