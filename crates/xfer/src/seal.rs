//! The sealed session (FORMAT.md §5): with a shared key, the hellos are followed by a Noise
//! `NNpsk0_25519_ChaChaPoly_BLAKE2s` handshake (the `snow` crate) whose pre-shared key is
//! derived from the key file, with both hellos as the prologue. Both ends prove the key (the
//! sender's first message and the receiver's answer are each keyed by it), the session keys are
//! ephemeral (forward secrecy), and every later byte travels in sealed records: `u16 length`,
//! then a ChaCha20-Poly1305 message of at most 65,535 bytes, nonces counted per direction. A
//! record that does not open ends the session; nothing from it is used.

use crate::proto::ProtoError;
use std::io::{self, Read, Write};
use std::sync::Arc;

const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s";
const PROLOGUE: &[u8] = b"stripeguard xfer v2";
/// Largest Noise message, and the plaintext one carries.
const MAX_MSG: usize = 65535;
const MAX_PLAIN: usize = MAX_MSG - 16;

/// A key file's contents: at least 32 bytes (`stripeguard keygen` writes 64 hex digits of 32
/// random bytes). A passphrase would invite an offline dictionary attack on one recorded
/// handshake, so short files are refused.
pub fn key_from_file(contents: &[u8]) -> Result<[u8; 32], String> {
    if contents.len() < 32 {
        return Err(format!(
            "a key file needs at least 32 bytes ({} here); make one with `stripeguard keygen FILE`",
            contents.len()
        ));
    }
    Ok(blake3::derive_key("stripeguard xfer psk v2", contents))
}

/// A new key file's contents: 32 random bytes from the kernel, as 64 hex digits and a newline.
pub fn new_key_text() -> io::Result<String> {
    let mut k = [0u8; 32];
    getrandom::fill(&mut k).map_err(|e| io::Error::other(e.to_string()))?;
    let mut s = crate::proto::hex(&k);
    s.push('\n');
    Ok(s)
}

fn noise_err(e: snow::Error) -> ProtoError {
    ProtoError::Local(format!("the key handshake: {e}"))
}

fn write_msg(w: &mut impl Write, m: &[u8]) -> io::Result<()> {
    let len =
        u16::try_from(m.len()).map_err(|_| io::Error::other("a handshake message over 64 KiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(m)?;
    w.flush()
}

fn read_msg(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut l = [0u8; 2];
    r.read_exact(&mut l)?;
    let mut m = vec![0u8; usize::from(u16::from_le_bytes(l))];
    r.read_exact(&mut m)?;
    Ok(m)
}

fn builder<'a>(key: &'a [u8; 32], prologue: &'a [u8]) -> Result<snow::Builder<'a>, ProtoError> {
    snow::Builder::new(PATTERN.parse().map_err(noise_err)?)
        .psk(0, key)
        .map_err(noise_err)?
        .prologue(prologue)
        .map_err(noise_err)
}

fn prologue(sender_hello: &[u8; 10], receiver_hello: &[u8; 10]) -> Vec<u8> {
    let mut p = PROLOGUE.to_vec();
    p.extend_from_slice(sender_hello);
    p.extend_from_slice(receiver_hello);
    p
}

/// The sending end of the handshake (Noise initiator).
pub fn initiate<R: Read, W: Write>(
    mut r: R,
    mut w: W,
    key: &[u8; 32],
    sender_hello: &[u8; 10],
    receiver_hello: &[u8; 10],
) -> Result<(SealedReader<R>, SealedWriter<W>), ProtoError> {
    let p = prologue(sender_hello, receiver_hello);
    let mut hs = builder(key, &p)?.build_initiator().map_err(noise_err)?;
    let mut buf = vec![0u8; MAX_MSG];
    let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
    write_msg(&mut w, &buf[..n])?;
    let m = read_msg(&mut r).map_err(|_| {
        ProtoError::Auth(
            "the receiver closed during the key handshake: its key differs from --key-file (or it refused)".into(),
        )
    })?;
    hs.read_message(&m, &mut buf).map_err(|_| {
        ProtoError::Auth(
            "the receiver did not prove the key: its key differs from --key-file".into(),
        )
    })?;
    split(hs, r, w)
}

/// The receiving end of the handshake (Noise responder).
pub fn respond<R: Read, W: Write>(
    mut r: R,
    mut w: W,
    key: &[u8; 32],
    sender_hello: &[u8; 10],
    receiver_hello: &[u8; 10],
) -> Result<(SealedReader<R>, SealedWriter<W>), ProtoError> {
    let p = prologue(sender_hello, receiver_hello);
    let mut hs = builder(key, &p)?.build_responder().map_err(noise_err)?;
    let mut buf = vec![0u8; MAX_MSG];
    let m = read_msg(&mut r)?;
    hs.read_message(&m, &mut buf).map_err(|_| {
        ProtoError::Auth("the sender does not hold the key (wrong or missing --key-file)".into())
    })?;
    let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
    write_msg(&mut w, &buf[..n])?;
    split(hs, r, w)
}

fn split<R, W>(
    hs: snow::HandshakeState,
    r: R,
    w: W,
) -> Result<(SealedReader<R>, SealedWriter<W>), ProtoError> {
    let st = Arc::new(hs.into_stateless_transport_mode().map_err(noise_err)?);
    Ok((
        SealedReader {
            inner: r,
            st: Arc::clone(&st),
            nonce: 0,
            plain: Vec::new(),
            pos: 0,
            wire: vec![0u8; MAX_MSG],
        },
        SealedWriter {
            inner: w,
            st,
            nonce: 0,
            plain: Vec::with_capacity(MAX_PLAIN),
            wire: vec![0u8; MAX_MSG + 2],
        },
    ))
}

/// Opens the peer's sealed records.
pub struct SealedReader<R> {
    inner: R,
    st: Arc<snow::StatelessTransportState>,
    nonce: u64,
    plain: Vec<u8>,
    pos: usize,
    wire: Vec<u8>,
}

impl<R: Read> SealedReader<R> {
    /// Bytes already opened and not yet read.
    pub fn buffered(&self) -> usize {
        self.plain.len() - self.pos
    }
}

impl<R: Read> Read for SealedReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.plain.len() {
            let mut l = [0u8; 2];
            // A clean end of stream between records is an end of stream.
            let mut got = 0;
            while got < 2 {
                match self.inner.read(&mut l[got..]) {
                    Ok(0) if got == 0 => return Ok(0),
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let n = usize::from(u16::from_le_bytes(l));
            self.inner.read_exact(&mut self.wire[..n])?;
            self.plain.resize(MAX_MSG, 0);
            let k = self
                .st
                .read_message(self.nonce, &self.wire[..n], &mut self.plain)
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a sealed record did not open (changed on the way, or not from the key holder)",
                    )
                })?;
            self.nonce += 1;
            self.plain.truncate(k);
            self.pos = 0;
        }
        let n = out.len().min(self.plain.len() - self.pos);
        out[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Seals this side's bytes into records (a record goes out when full or on `flush`).
pub struct SealedWriter<W> {
    inner: W,
    st: Arc<snow::StatelessTransportState>,
    nonce: u64,
    plain: Vec<u8>,
    wire: Vec<u8>,
}

impl<W: Write> SealedWriter<W> {
    fn emit(&mut self) -> io::Result<()> {
        if self.plain.is_empty() {
            return Ok(());
        }
        let n = self
            .st
            .write_message(self.nonce, &self.plain, &mut self.wire[2..])
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.nonce += 1;
        let len = u16::try_from(n).map_err(|_| io::Error::other("a sealed message over 64 KiB"))?;
        self.wire[..2].copy_from_slice(&len.to_le_bytes());
        self.inner.write_all(&self.wire[..n + 2])?;
        self.plain.clear();
        Ok(())
    }
}

impl<W: Write> Write for SealedWriter<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = b.len().min(MAX_PLAIN - self.plain.len());
        self.plain.extend_from_slice(&b[..n]);
        if self.plain.len() == MAX_PLAIN {
            self.emit()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.emit()?;
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(ks: [u8; 32], kr: [u8; 32]) -> (Result<(), ProtoError>, Result<Vec<u8>, ProtoError>) {
        let (a, b) = UnixStream::pair().unwrap();
        let hs = crate::proto::hello_bytes(1);
        let hr = crate::proto::hello_bytes(1);
        let t = std::thread::spawn(move || -> Result<Vec<u8>, ProtoError> {
            let (mut r, _w) = respond(b.try_clone().unwrap(), b, &kr, &hs, &hr)?;
            let mut got = Vec::new();
            r.read_to_end(&mut got)?;
            Ok(got)
        });
        let s = (|| {
            let (_r, mut w) = initiate(a.try_clone().unwrap(), a, &ks, &hs, &hr)?;
            let data: Vec<u8> = (0..200_000u32)
                .map(|i| u8::try_from(i % 256).unwrap())
                .collect();
            w.write_all(&data)?;
            w.flush()?;
            Ok(())
        })();
        (s, t.join().unwrap())
    }

    #[test]
    fn the_same_key_opens_a_session_and_bytes_arrive_whole() {
        let (s, r) = pair([1; 32], [1; 32]);
        s.unwrap();
        let got = r.unwrap();
        assert_eq!(got.len(), 200_000);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &b)| usize::from(b) == i % 256));
    }

    #[test]
    fn different_keys_fail_on_both_ends() {
        let (s, r) = pair([1; 32], [2; 32]);
        assert!(matches!(s, Err(ProtoError::Auth(_))), "{s:?}");
        assert!(matches!(r, Err(ProtoError::Auth(_))), "{r:?}");
    }

    #[test]
    fn a_changed_record_does_not_open() {
        let hs = crate::proto::hello_bytes(1);
        let (a, b) = UnixStream::pair().unwrap();
        let (c, d) = UnixStream::pair().unwrap();
        let k = [3; 32];
        let t = std::thread::spawn(move || respond(b.try_clone().unwrap(), b, &k, &hs, &hs));
        // The initiator talks to `c`; we relay the handshake to `a`/`b` and flip a bit after.
        let (_ir, mut iw) = {
            let relay_in = c.try_clone().unwrap();
            let mut ra = a.try_clone().unwrap();
            let mut ca = c.try_clone().unwrap();
            let mut aa = a.try_clone().unwrap();
            let j = std::thread::spawn(move || {
                let m1 = read_msg(&mut &relay_in).unwrap();
                write_msg(&mut aa, &m1).unwrap();
                let m2 = read_msg(&mut ra).unwrap();
                write_msg(&mut ca, &m2).unwrap();
            });
            let x = initiate(d.try_clone().unwrap(), d, &k, &hs, &hs).unwrap();
            j.join().unwrap();
            x
        };
        let (mut rr, _rw) = t.join().unwrap().unwrap();
        iw.write_all(b"hello").unwrap();
        iw.flush().unwrap();
        let mut rec = read_msg(&mut &c).unwrap();
        rec[3] ^= 1;
        write_msg(&mut &a, &rec).unwrap();
        let mut buf = [0u8; 5];
        assert!(rr.read(&mut buf).is_err());
    }

    #[test]
    fn short_key_files_are_refused() {
        assert!(key_from_file(b"secret").is_err());
        assert!(key_from_file(&[0u8; 31]).is_err());
        let k = new_key_text().unwrap();
        assert_eq!(k.len(), 65);
        assert!(key_from_file(k.as_bytes()).is_ok());
    }
}
