//! TLS for the NBD server (FORMAT.md §4 "TLS"): X.509 with client certificates. NBD has no
//! authentication of its own, so a server certificate alone would encrypt but let anyone in; a
//! client must present a certificate that chains to the configured CA. The credentials, the
//! handshake and the pump that carries a session are `stripeguard_nbd::tls`, shared with the
//! client of remote members. A pre-shared key (qemu's `tls-creds-psk`, nbdkit's `--tls-psk`)
//! is not offered: rustls has no external PSK.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;

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
    /// From a credentials directory laid out as nbdkit's `--tls-certificates` and qemu's
    /// `tls-creds-x509` expect (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`). Errors
    /// name the file and what is wrong with it.
    pub fn from_dir(dir: &Path) -> Result<TlsConfig, String> {
        Ok(TlsConfig {
            config: stripeguard_nbd::tls::server_config(dir)?,
        })
    }

    /// Run the TLS handshake on `raw` and return the plaintext end of its pump.
    pub(crate) fn accept<T>(&self, raw: T) -> io::Result<UnixStream>
    where
        T: Read + Write + AsFd + Send + 'static,
    {
        let conn =
            rustls::ServerConnection::new(Arc::clone(&self.config)).map_err(io::Error::other)?;
        stripeguard_nbd::tls::start(rustls::Connection::Server(conn), raw).map(|(plain, _)| plain)
    }
}
