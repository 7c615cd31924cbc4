//! systemd's notify protocol (sd_notify(3)) for `serve` run as a `Type=notify` unit (issue 36
//! §3): one datagram of `KEY=VALUE` lines to the unix socket `NOTIFY_SOCKET` names (a path, or
//! `@name` in the abstract namespace). Without `NOTIFY_SOCKET` (not under systemd) nothing is
//! sent. Messages used:
//! - `EXTEND_TIMEOUT_USEC=N` with a `STATUS=` line, every few seconds while the array is
//!   assembled (a resync without a readable intent record covers every stripe and can outlast
//!   systemd's start timeout);
//! - `READY=1` with the export's address, once it serves;
//! - `STOPPING=1` when a stop begins (clients are drained first).

use std::os::unix::net::UnixDatagram;

/// The unit's notify socket, when there is one.
pub struct Notifier {
    sock: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`; `None` when unset, or unusable (said once on standard error: a
    /// `Type=notify` unit whose messages go nowhere times out at start, and this line is the
    /// clue in its journal).
    pub fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let made = Self::at(&path);
        if let Err(why) = &made {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "stripeguard: NOTIFY_SOCKET={} is unusable ({why}): systemd is not told of readiness",
                    path.to_string_lossy()
                )
            });
        }
        made.ok()
    }

    fn at(path: &std::ffi::OsStr) -> Result<Notifier, String> {
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path).to_vec();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .map_err(|e| e.to_string())?
            }
            None if !bytes.starts_with(b"/") => {
                return Err("neither an absolute path nor @name".into())
            }
            None => {
                std::os::unix::net::SocketAddr::from_pathname(path).map_err(|e| e.to_string())?
            }
        };
        let sock = UnixDatagram::unbound().map_err(|e| e.to_string())?;
        Ok(Notifier { sock, addr })
    }

    /// Send `state` (`KEY=VALUE` lines). Best effort: systemd not listening is not an error
    /// of the array's.
    pub fn send(&self, state: &str) {
        let _ = self.sock.send_to_addr(state.as_bytes(), &self.addr);
    }
}

/// Notify once, from a fresh socket (for the odd message).
pub fn notify(state: &str) {
    if let Some(n) = Notifier::from_env() {
        n.send(state);
    }
}
