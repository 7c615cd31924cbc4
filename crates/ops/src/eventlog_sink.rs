//! A holder's events as log lines (issue 35 §4): each event, as it is recorded, one line on
//! standard error and one message to syslog (`/dev/log`, or the datagram socket named by
//! `STRIPEGUARD_SYSLOG_SOCKET`; nothing when neither is there). The syslog message is RFC 3164's
//! `<PRI>TAG[PID]: TEXT` without a timestamp (the local daemon, rsyslog or journald, stamps it);
//! facility daemon, severity by what happened: `err` for a member failure or an unrecoverable
//! stripe, `warning` for silent corruption found or repaired, `notice` for state changes and
//! resyncs. The socket is non-blocking: a syslog that does not read never stalls the array (the
//! listener runs with the event log locked), it loses lines instead.

use std::sync::Arc;
use stripeguard_engine::{unit_label, Array, Event, EventAction, EventKind};

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

/// One event in words: what, where, the evidence, what was done.
pub fn line_of(e: &Event, data_chunks: usize, member_name: Option<&str>) -> String {
    let member = match member_name {
        Some(n) => format!("member {} ({n})", e.member),
        None => format!("member {}", e.member),
    };
    let at = match e.kind {
        k if is_state_change(k) => String::new(),
        _ => format!(
            " stripe {} {member} ({})",
            e.stripe,
            unit_label(e.role, e.position, data_chunks)
        ),
    };
    // Evidence is stored text: control characters in it are shown, not obeyed.
    let evidence: String = e
        .evidence
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    format!("{}{at}: {evidence} [{}]", e.kind, e.action)
}

fn is_state_change(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::ReplaceStarted
            | EventKind::ReplaceFinished
            | EventKind::ReplaceInterrupted
            | EventKind::ScrubStarted
            | EventKind::ScrubFinished
            | EventKind::ResyncFinished
            | EventKind::MemberReturned
            | EventKind::ForcedAssembly
    )
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
