//! `stripeguard events`: print the durable event log without taking the array; `--follow`
//! watches it, `--exec` runs a command per new event.

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
    #[arg(required = true)]
    members: Vec<PathBuf>,
    /// Only events newer than this: Unix seconds, or an age such as 90s, 10m, 2h, 3d.
    #[arg(long)]
    since: Option<String>,
    /// Keep watching and print new events as they are logged (every second).
    #[arg(long)]
    follow: bool,
    /// Run this shell command for each new event, with SG_EVENT_{NUMBER,TIME_MS,KIND,ACTION,
    /// STRIPE,MEMBER,POSITION,ROLE,EVIDENCE} in its environment (as ZFS's event daemon does).
    #[arg(long)]
    exec: Option<String>,
    /// Print JSON (one object per line with --follow).
    #[arg(long)]
    json: bool,
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

pub fn run(a: EventsArgs) -> Result<ExitCode> {
    let since = a.since.as_deref().map(since_ms).transpose()?.unwrap_or(0);
    let members = open_member_paths(&a.members, false);
    let mut seen: Option<u64> = None;
    loop {
        let log = read_log_of(&members)?;
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
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!(
                    "#{:<6} {} stripe {} member {} ({}): {} — {} [{:?}]",
                    e.number,
                    ago(e.time_unix_ms / 1000),
                    e.stripe,
                    e.member,
                    stripeguard_engine::unit_label(e.role, e.position as usize, log.data_chunks),
                    e.kind,
                    // Evidence is stored text: terminal escapes in it are shown, not obeyed.
                    stripeguard_xfer::proto::printable(e.evidence.as_bytes()),
                    e.action
                );
            }
            if let Some(cmd) = &a.exec {
                let status = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .env("SG_EVENT_NUMBER", e.number.to_string())
                    .env("SG_EVENT_TIME_MS", e.time_unix_ms.to_string())
                    .env("SG_EVENT_KIND", e.kind.as_str())
                    .env("SG_EVENT_ACTION", format!("{:?}", e.action))
                    .env("SG_EVENT_STRIPE", e.stripe.to_string())
                    .env("SG_EVENT_MEMBER", e.member.to_string())
                    .env("SG_EVENT_POSITION", e.position.to_string())
                    .env("SG_EVENT_ROLE", e.role.as_str())
                    .env("SG_EVENT_EVIDENCE", &e.evidence)
                    .status()
                    .with_context(|| format!("running --exec {cmd:?}"))?;
                if !status.success() {
                    eprintln!(
                        "stripeguard: warning: --exec for event #{} exited with {status}",
                        e.number
                    );
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
    }
    Ok(ExitCode::from(exit::OK))
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
