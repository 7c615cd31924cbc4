//! A holder's events as log lines (issue 35 §4): each event, as it is recorded, one line on
//! standard error and one message to syslog (`/dev/log`, or the datagram socket named by
//! `STRIPEGUARD_SYSLOG_SOCKET`; nothing when neither is there). The syslog message is RFC 3164's
//! `<PRI>TAG[PID]: TEXT` without a timestamp (the local daemon, rsyslog or journald, stamps it);
//! facility daemon, severity by what happened: `err` for a member failure or an unrecoverable
//! stripe, `warning` for silent corruption found or repaired, `notice` for state changes and
//! resyncs. The socket is non-blocking: a syslog that does not read never stalls the array (the
//! listener runs with the event log locked), it loses lines instead.

use std::sync::Arc;
use stripeguard_engine::{Array, Event, EventAction, EventKind, EventRole};

/// Log every event of `array` from now on as `tag`'s lines (`tag`: `stripeguard serve`).
pub fn log_events(array: &Array, tag: &'static str) {
    let k = usize::from(array.superblock().data_chunks);
    let names: Vec<String> = array.health().into_iter().map(|h| h.name).collect();
    let syslog = Syslog::open();
    array.set_event_listener(Arc::new(move |e: &Event| {
        let line = line_of(e, k, names.get(e.member).map(String::as_str));
        eprintln!("{tag}: {line}");
        if let Some(s) = &syslog {
            s.send(severity(e), tag, &line);
        }
    }));
}

/// A refusal that no member records (a split brain: the engine writes nothing to an array it
/// refuses to assemble), as one syslog message at severity err: `KIND: WHY`. Standard error
/// has it already, as the command's error.
pub fn log_refusal(kind: &str, why: &str) {
    syslog(3, "stripeguard", &format!("{kind}: {why}"));
}

/// One syslog message at `severity` (3 err, 4 warning, 5 notice) under `tag`; nothing when
/// there is no syslog.
pub fn syslog(severity: u8, tag: &str, line: &str) {
    if let Some(s) = Syslog::open() {
        s.send(severity, tag, line);
    }
}

/// One event in words: what, where, the evidence, what was done.
pub fn line_of(e: &Event, data_chunks: usize, member_name: Option<&str>) -> String {
    // The array's own state changes need no place: `scrub-finished: ...`.
    let array_wide = e.role == EventRole::Stripe && e.kind.is_state_change();
    let at = stripeguard_engine::event_place(
        e.kind,
        e.role,
        e.stripe,
        e.member,
        e.position,
        data_chunks,
        member_name,
    );
    // Evidence is stored text: control characters in it are shown, not obeyed.
    let evidence: String = e
        .evidence
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if array_wide {
        format!("{}: {evidence} [{}]", e.kind, e.action)
    } else {
        format!("{} {at}: {evidence} [{}]", e.kind, e.action)
    }
}

/// Syslog severity: 3 err, 4 warning, 5 notice.
fn severity(e: &Event) -> u8 {
    match (e.kind, e.action) {
        (
            EventKind::MemberFailed | EventKind::Unrecoverable | EventKind::ResyncUnrecoverable,
            _,
        )
        | (_, EventAction::Unrecoverable) => 3,
        (_, EventAction::Notice | EventAction::Resynced) => 5,
        _ => 4,
    }
}

/// The local syslog's datagram socket.
struct Syslog {
    sock: std::os::unix::net::UnixDatagram,
    path: std::path::PathBuf,
    pid: u32,
}

impl Syslog {
    fn open() -> Option<Syslog> {
        let path = std::env::var_os("STRIPEGUARD_SYSLOG_SOCKET")
            .map_or_else(|| std::path::PathBuf::from("/dev/log"), Into::into);
        if !path.exists() {
            return None;
        }
        let sock = std::os::unix::net::UnixDatagram::unbound().ok()?;
        sock.set_nonblocking(true).ok()?;
        Some(Syslog {
            sock,
            path,
            pid: std::process::id(),
        })
    }

    fn send(&self, severity: u8, tag: &str, line: &str) {
        const DAEMON: u8 = 3;
        let tag = tag.replace(' ', "-");
        let msg = format!("<{}>{tag}[{}]: {line}", DAEMON * 8 + severity, self.pid);
        let _ = self.sock.send_to(msg.as_bytes(), &self.path);
    }
}
