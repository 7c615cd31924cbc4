//! `stripeguard list`: every array on this host in one view (issue 36 §2, as `/proc/mdstat` or
//! `zpool status -x`). Arrays a process holds answer live over their control sockets (states,
//! and the progress of a replace or scrub it runs); the others are found by scanning the
//! configured candidates (FORMAT.md §3 for the socket, `scan` for the rest). A control socket
//! nobody listens on any more (its holder was killed) is removed, not listed.

use crate::config::Config;
use crate::{ask_holder, LiveStatus};
use std::path::PathBuf;

/// One array on this host.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Listed {
    pub name: String,
    pub uuid: String,
    /// The holder's process id and command line; `None`: not held.
    pub holder: Option<(u32, String)>,
    /// Its states (`clean`, `degraded`, `rebuilding`, `scrubbing`, `untrusted`, …); for an
    /// array not held, its scan health (`complete`, `degraded`, `incomplete`) and state.
    pub states: Vec<String>,
    /// A replace or scrub under way: what, how far, and the estimated time left.
    pub progress: Option<String>,
    /// Its members, by index.
    pub members: Vec<String>,
    /// Whether it needs attention (anything but clean and complete).
    pub attention: bool,
}

/// Every array: the held ones first (by their sockets), then the others the scan finds.
/// Returns the stale control sockets removed too.
pub fn list(cfg: &Config) -> (Vec<Listed>, Vec<PathBuf>) {
    let mut out: Vec<Listed> = Vec::new();
    let mut removed = Vec::new();
    for (uuid, path) in sockets() {
        match ask_holder(&uuid) {
            Ok(live) => out.push(held(&live, &uuid)),
            Err(_) => {
                // Refused: nothing listens (the holder is gone). Anything else (it accepted
                // but did not answer) is a holder in trouble: listed, not removed.
                let refused = std::os::unix::net::UnixStream::connect(&path)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
                if refused && std::fs::remove_file(&path).is_ok() {
                    removed.push(path);
                } else if !refused {
                    out.push(Listed {
                        name: String::new(),
                        uuid: stripeguard_format::hex(&uuid),
                        holder: None,
                        states: vec!["not-answering".into()],
                        progress: None,
                        members: vec![],
                        attention: true,
                    });
                }
            }
        }
    }
    let cands = crate::candidates(&[], cfg);
    for f in crate::scan(&cands, cfg) {
        if out.iter().any(|l| l.uuid == f.uuid) {
            continue;
        }
        let health = f.health();
        out.push(Listed {
            name: f.name.clone(),
            uuid: f.uuid.clone(),
            holder: None,
            states: vec![health.to_string(), f.state.clone()],
            progress: None,
            members: f
                .member_paths()
                .iter()
                .map(|p| crate::display_member(p))
                .collect(),
            attention: health != "complete" || f.state != "clean",
        });
    }
    // Configured arrays of which no member was found: gone, not healthy.
    let known: Vec<[u8; 16]> = out
        .iter()
        .filter_map(|l| crate::config::parse_uuid(&l.uuid))
        .collect();
    for (name, u) in crate::configured_missing(cfg, &known) {
        out.push(Listed {
            name,
            uuid: stripeguard_format::hex(&u),
            holder: None,
            states: vec!["missing".into()],
            progress: None,
            members: vec![],
            attention: true,
        });
    }
    for l in &mut out {
        if l.name.is_empty() {
            if let Some(u) = crate::config::parse_uuid(&l.uuid) {
                l.name = cfg.name_of(&u).unwrap_or_default().to_string();
            }
        }
    }
    (out, removed)
}

/// What a holder says, as a line of the list.
fn held(live: &LiveStatus, uuid: &[u8; 16]) -> Listed {
    let states: Vec<String> = live.states().iter().map(|s| s.to_string()).collect();
    let progress = match (&live.replace, &live.scrub) {
        (Some(r), _) if r.running => Some(format!(
            "replace of member {} onto {}: {}",
            r.member,
            r.target,
            percent(r.done, r.total)
        )),
        (_, Some(s)) if s.running => Some(format!(
            "{}: {}",
            if s.check_only { "check" } else { "scrub" },
            percent(s.done, s.total)
        )),
        _ => None,
    };
    Listed {
        name: live.name.clone(),
        uuid: stripeguard_format::hex(uuid),
        holder: Some((live.pid, live.command.clone())),
        attention: states.iter().any(|s| s != "clean"),
        states,
        progress,
        members: live.members.clone(),
    }
}

fn percent(done: u64, total: u64) -> String {
    // (A total of 0: the operation has not counted its stripes yet.)
    if total == 0 {
        return "starting".into();
    }
    format!(
        "{done} of {total} stripes ({:.0} %)",
        done as f64 * 100.0 / total as f64
    )
}

/// Every control socket in the places holders make them: `(uuid, path)`.
fn sockets() -> Vec<([u8; 16], PathBuf)> {
    let mut out = Vec::new();
    for dir in [PathBuf::from(crate::CONTROL_DIR), std::env::temp_dir()] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let uuid = name
                .strip_prefix("stripeguard-")
                .and_then(|r| r.strip_suffix(".sock"))
                .and_then(crate::config::parse_uuid);
            if let Some(u) = uuid {
                if !out.iter().any(|(v, _)| *v == u) {
                    out.push((u, e.path()));
                }
            }
        }
    }
    out
}
