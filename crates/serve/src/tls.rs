//! TLS for the NBD server (FORMAT.md §4 "TLS"), through rustls: X.509 with client certificates.
//! NBD has no authentication of its own, so a server certificate alone would encrypt but let
//! anyone in; a client must present a certificate that chains to the configured CA.
//!
//! Credentials are a directory laid out as nbdkit's `--tls-certificates` and qemu's
//! `tls-creds-x509` expect: `ca-cert.pem` (the CA clients' certificates must chain to),
//! `server-cert.pem` (the server's chain) and `server-key.pem`. A pre-shared key (qemu's
//! `tls-creds-psk`, nbdkit's `--tls-psk`) is not offered: rustls has no external PSK.
//!
//! The server's connection code reads requests on one thread and writes replies from another,
//! on clones of one socket; a TLS session cannot be cloned. So once the handshake is done, a
//! pump thread owns the session and the client's socket and relays plaintext through a unix
//! socket pair whose other end the connection code uses like any client socket. The pump never
//! blocks on one direction while the other waits (a client that does not read its replies
//! stalls only its own pump), and holds at most a bounded amount of plaintext either way.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

/// Plaintext held by a pump in either direction before it stops reading that side.
const PUMP_BUFFER: usize = 1 << 20;

/// The server's TLS settings.
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig { .. }")
    }
}

impl TlsConfig {
    /// From a credentials directory (above). Errors name the file and what is wrong with it.
    pub fn from_dir(dir: &Path) -> Result<TlsConfig, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let file = |name: &str| dir.join(name);
        let certs = |name: &str| -> Result<Vec<CertificateDer<'static>>, String> {
            let p = file(name);
            let v: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", p.display()))?;
            if v.is_empty() {
                return Err(format!("{}: no certificate in it", p.display()));
            }
            Ok(v)
        };
        let ca = certs("ca-cert.pem")?;
        let chain = certs("server-cert.pem")?;
        let key_path = file("server-key.pem");
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| format!("{}: {e}", key_path.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for c in ca {
            roots
                .add(c)
                .map_err(|e| format!("{}: {e}", file("ca-cert.pem").display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| {
            format!(
                "client verification with {}: {e}",
                file("ca-cert.pem").display()
            )
        })?;
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| {
                format!(
                    "{} and {}: {e}",
                    file("server-cert.pem").display(),
                    key_path.display()
                )
            })?;
        Ok(TlsConfig {
            config: Arc::new(config),
        })
    }

    /// Run the TLS handshake on `raw` (blocking, within its read timeout) and hand the session
    /// to a pump thread; returns the local end of the plaintext pair.
    pub(crate) fn accept<T>(&self, mut raw: T) -> io::Result<UnixStream>
    where
        T: Read + Write + AsFd + Send + 'static,
    {
        let mut conn =
            rustls::ServerConnection::new(Arc::clone(&self.config)).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut raw)?;
        }
        // The pump bounds what it buffers itself (it reads the server's side only when the
        // session has nothing left to send), so rustls's own limit would only cut writes short.
        conn.set_buffer_limit(None);
        let (local, theirs) = UnixStream::pair()?;
        set_nonblocking(&raw)?;
        theirs.set_nonblocking(true)?;
        std::thread::Builder::new()
            .name("nbd-tls".into())
            .spawn(move || pump(conn, raw, theirs))?;
        Ok(local)
    }
}

fn set_nonblocking(fd: &impl AsFd) -> io::Result<()> {
    rustix::io::ioctl_fionbio(fd, true).map_err(io::Error::from)
}

/// Relay between the TLS session on `raw` and the plaintext pair end `local` until both sides
/// are done (or either fails).
fn pump<T: Read + Write + AsFd>(
    mut conn: rustls::ServerConnection,
    mut raw: T,
    mut local: UnixStream,
) {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut to_local: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let (mut client_done, mut server_done) = (false, false);
    loop {
        // What can be done without waiting. Plaintext rustls already holds first: records that
        // came in with the end of the handshake (the client's first option often does) were
        // decrypted then, and no poll of the socket would ever announce them again.
        while !client_done && to_local.len() < PUMP_BUFFER {
            match conn.reader().read(&mut buf) {
                Ok(0) => client_done = true,
                Ok(n) => to_local.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => client_done = true,
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
        if client_done && to_local.is_empty() {
            let _ = local.shutdown(std::net::Shutdown::Write);
        }
        if server_done && !conn.wants_write() {
            return;
        }
        if client_done && server_done {
            return;
        }
        let want_raw_in = !client_done && to_local.len() < PUMP_BUFFER;
        let want_local_in = !server_done && !conn.wants_write();
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
        let mut fds = [
            PollFd::new(&raw, raw_flags),
            PollFd::new(&local, local_flags),
        ];
        if poll(&mut fds, None).is_err() {
            return;
        }
        let (raw_ready, local_ready) = (fds[0].revents(), fds[1].revents());
        if want_raw_in && raw_ready.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            match conn.read_tls(&mut raw) {
                Ok(0) => client_done = true,
                Ok(_) => {
                    if conn.process_new_packets().is_err() {
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
                    server_done = true;
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
