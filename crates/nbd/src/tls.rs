//! TLS for NBD, both ends (FORMAT.md §4 "TLS"): credentials read as nbdkit, qemu and libnbd lay
//! them out in a directory (`ca-cert.pem`, and `server-cert.pem` + `server-key.pem` or
//! `client-cert.pem` + `client-key.pem`), X.509 with client certificates through rustls (ring),
//! and the pump that carries a session after its handshake.
//!
//! Why a pump: the server reads requests on one thread and writes replies from another, and the
//! client likewise, each on a clone of one socket; a TLS session cannot be cloned. So once the
//! handshake is done, a thread owns the session and the raw socket and relays plaintext through
//! a unix socket pair whose other end the protocol code uses like any socket. The pump never
//! blocks one direction while the other waits (a peer that does not read stalls only its own
//! pump), and holds at most a bounded amount of plaintext either way.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Plaintext held by a pump in either direction before it stops reading that side.
const PUMP_BUFFER: usize = 1 << 20;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in `dir/name`; an error names the file.
fn certs(dir: &Path, name: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let p = dir.join(name);
    let v: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&p)
        .map_err(|e| format!("{}: {e}", p.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", p.display()))?;
    if v.is_empty() {
        return Err(format!("{}: no certificate in it", p.display()));
    }
    Ok(v)
}

fn key(dir: &Path, name: &str) -> Result<PrivateKeyDer<'static>, String> {
    let p = dir.join(name);
    PrivateKeyDer::from_pem_file(&p).map_err(|e| format!("{}: {e}", p.display()))
}

fn roots(dir: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(dir, "ca-cert.pem")? {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", dir.join("ca-cert.pem").display()))?;
    }
    Ok(roots)
}

/// A server's settings from `dir`: clients must present a certificate chaining to
/// `ca-cert.pem`; the server presents `server-cert.pem` with `server-key.pem`.
pub fn server_config(dir: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(dir)?),
        provider(),
    )
    .build()
    .map_err(|e| {
        format!(
            "client verification with {}: {e}",
            dir.join("ca-cert.pem").display()
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(dir, "server-cert.pem")?, key(dir, "server-key.pem")?)
        .map_err(|e| format!("{}: server-cert.pem and server-key.pem: {e}", dir.display()))?;
    Ok(Arc::new(config))
}

/// A client's settings from `dir`: the server's certificate must chain to `ca-cert.pem`; the
/// client presents `client-cert.pem` with `client-key.pem`.
pub fn client_config(dir: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(dir)?)
        .with_client_auth_cert(certs(dir, "client-cert.pem")?, key(dir, "client-key.pem")?)
        .map_err(|e| format!("{}: client-cert.pem and client-key.pem: {e}", dir.display()))?;
    Ok(Arc::new(config))
}

/// Why a session ended in a TLS error (an alert from the peer, a record that does not
/// decrypt), once it has: a client whose certificate the server refuses learns it only after
/// its own side of the handshake is done, as an alert the pump receives.
pub type SessionError = Arc<std::sync::OnceLock<String>>;

/// Run `conn`'s handshake on `raw` (blocking, within its timeouts) and hand the session to a
/// pump thread; returns the local end of the plaintext pair and where the pump leaves a TLS
/// error.
pub fn start<T>(mut conn: rustls::Connection, mut raw: T) -> io::Result<(UnixStream, SessionError)>
where
    T: Read + Write + AsFd + Send + 'static,
{
    while conn.is_handshaking() {
        conn.complete_io(&mut raw)?;
    }
    // The pump bounds what it buffers itself (it reads the plaintext side only when the session
    // has nothing left to send), so rustls's own limit would only cut writes short.
    conn.set_buffer_limit(None);
    let (local, theirs) = UnixStream::pair()?;
    rustix::io::ioctl_fionbio(&raw, true).map_err(io::Error::from)?;
    theirs.set_nonblocking(true)?;
    let error = SessionError::default();
    let slot = Arc::clone(&error);
    std::thread::Builder::new()
        .name("nbd-tls".into())
        .spawn(move || pump(conn, raw, theirs, &slot))?;
    Ok((local, error))
}

/// Relay between the TLS session on `raw` and the plaintext pair end `local` until both sides
/// are done (or either fails).
fn pump<T: Read + Write + AsFd>(
    mut conn: rustls::Connection,
    mut raw: T,
    mut local: UnixStream,
    error: &std::sync::OnceLock<String>,
) {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut to_local: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    // The TLS peer (the other end of `raw`) has nothing more to send; our plaintext end
    // (`local`) has nothing more to send. (The pump serves both the server and the client
    // side: "peer" and "local" name the ends, not the roles.)
    let (mut peer_done, mut local_done) = (false, false);
    loop {
        // What can be done without waiting. Plaintext rustls already holds first: records that
        // came in with the end of the handshake (the client's first option often does) were
        // decrypted then, and no poll of the socket would ever announce them again.
        while !peer_done && to_local.len() < PUMP_BUFFER {
            match conn.reader().read(&mut buf) {
                Ok(0) => peer_done = true,
                Ok(n) => to_local.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => peer_done = true,
            }
        }
        while conn.wants_write() {
            match conn.write_tls(&mut raw) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
        while !to_local.is_empty() {
            match local.write(&to_local) {
                Ok(n) => {
                    to_local.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
        if peer_done && to_local.is_empty() {
            let _ = local.shutdown(std::net::Shutdown::Write);
        }
        if local_done && !conn.wants_write() {
            return;
        }
        if peer_done && local_done {
            return;
        }
        let want_raw_in = !peer_done && to_local.len() < PUMP_BUFFER;
        let want_local_in = !local_done && !conn.wants_write();
        let mut raw_flags = PollFlags::empty();
        if want_raw_in {
            raw_flags |= PollFlags::IN;
        }
        if conn.wants_write() {
            raw_flags |= PollFlags::OUT;
        }
        let mut local_flags = PollFlags::empty();
        if want_local_in {
            local_flags |= PollFlags::IN;
        }
        if !to_local.is_empty() {
            local_flags |= PollFlags::OUT;
        }
        // Only a side something is wanted of is polled: a hang-up is reported whatever was
        // asked, and a closed side polled for nothing would wake this loop at once, for ever.
        let mut fds = Vec::with_capacity(2);
        if !raw_flags.is_empty() {
            fds.push(PollFd::new(&raw, raw_flags));
        }
        if !local_flags.is_empty() {
            fds.push(PollFd::new(&local, local_flags));
        }
        if fds.is_empty() || poll(&mut fds, None).is_err() {
            return;
        }
        let mut ready = fds.iter().map(PollFd::revents);
        let raw_ready = if raw_flags.is_empty() {
            PollFlags::empty()
        } else {
            ready.next().unwrap_or_else(PollFlags::empty)
        };
        let local_ready = if local_flags.is_empty() {
            PollFlags::empty()
        } else {
            ready.next().unwrap_or_else(PollFlags::empty)
        };
        drop(ready);
        drop(fds);
        if want_raw_in && raw_ready.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            match conn.read_tls(&mut raw) {
                Ok(0) => peer_done = true,
                Ok(_) => {
                    if let Err(e) = conn.process_new_packets() {
                        let _ = error.set(e.to_string());
                        // (The alert rustls queued goes out best effort.)
                        let _ = conn.write_tls(&mut raw);
                        return;
                    }
                    // (Its plaintext is taken at the top of the loop.)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if want_local_in && local_ready.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
        {
            match local.read(&mut buf) {
                Ok(0) => {
                    local_done = true;
                    conn.send_close_notify();
                }
                Ok(n) => {
                    if conn.writer().write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}
