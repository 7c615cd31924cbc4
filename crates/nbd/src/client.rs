//! An NBD client that is a [`Disk`]: an array member served by another host (qemu-nbd, nbdkit,
//! `stripeguard serve`, nbd-server), named by its URI — `nbd://host[:port]/export` or
//! `nbd+unix:///export?socket=PATH`.
//!
//! One connection per member carries many requests at once: callers (the engine issues a
//! plan's units from several threads) send under a writer lock and wait for their own reply by
//! cookie; whichever waiting caller finds nobody reading the socket reads replies itself and
//! hands the others theirs (no reader thread: at queue depth 1 a reply reaches its caller
//! without a thread hand-off, which on a busy machine cost milliseconds; a reply wakes its own
//! caller only). The engine sends a stripe's requests to every member before it waits for any
//! answer ([`Pipelined`], through `stripeguard_disk::batch`), and the client acknowledges
//! replies at once (TCP_QUICKACK: delayed acknowledgements stalled 64 KiB replies by 4–7 ms
//! when the caller turned to other members between requests). A dropped connection is reopened with backoff
//! and the requests it carried are sent again (reads and writes of whole ranges are
//! idempotent); a request that cannot complete within the member's timeout (default 10 s,
//! `?timeout=SECONDS` in the URI or `STRIPEGUARD_NBD_TIMEOUT`) fails with
//! [`DiskError::Failed`], which the engine takes as the member failing — the array goes on
//! degraded instead of hanging. An error the server answers (EIO and the like) is returned at
//! once as a medium error of that range: the engine repairs it from the other members.
//!
//! Remote members cannot be locked with `flock`; [`Disk::try_lock`] succeeds and the owner
//! record (FORMAT.md §2.2) keeps a second host from assembling the same members.

use crate::proto::{self, Request};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use stripeguard_disk::{Disk, DiskError, IoBuf, Pipelined, Ticket};

/// Whether a member name is an NBD URI rather than a path.
pub fn is_uri(name: &str) -> bool {
    ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"]
        .iter()
        .any(|s| name.starts_with(s))
}

/// Where an export is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub address: Address,
    pub export: String,
    pub timeout: Duration,
    /// `nbds://`: TLS with the credentials in this directory (`ca-cert.pem`, `client-cert.pem`,
    /// `client-key.pem`, as libnbd and qemu lay them out).
    pub tls: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(String),
    Unix(PathBuf),
}

/// Parse `nbd://host[:port][/export][?timeout=S]` or `nbd+unix:///export?socket=PATH`; with
/// `nbds` for `nbd`, TLS, whose credentials `tls-certificates=DIR` names (libnbd's spelling).
pub fn parse_uri(uri: &str) -> Result<Target, String> {
    let bad = |why: &str| {
        format!(
            "{uri}: {why} (expected nbd[s]://HOST[:PORT]/EXPORT or nbd[s]+unix:///EXPORT?socket=PATH, with ?tls-certificates=DIR for nbds)"
        )
    };
    let secure = uri.starts_with("nbds");
    let plain = if secure {
        uri.replacen("nbds", "nbd", 1)
    } else {
        uri.to_string()
    };
    let (rest, unix) = if let Some(r) = plain.strip_prefix("nbd://") {
        (r, false)
    } else if let Some(r) = plain.strip_prefix("nbd+unix://") {
        (r, true)
    } else {
        return Err(bad("not an NBD URI"));
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let (authority, export) = match path.split_once('/') {
        Some((a, e)) => (a, e.to_string()),
        None => (path, String::new()),
    };
    let mut socket = None;
    let mut tls = None;
    let mut timeout = std::env::var("STRIPEGUARD_NBD_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(10.0);
    for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("socket", v)) => socket = Some(PathBuf::from(v)),
            Some(("tls-certificates", v)) if secure => tls = Some(PathBuf::from(v)),
            Some(("timeout", v)) => {
                timeout = v
                    .parse::<f64>()
                    .ok()
                    .filter(|t| *t > 0.0 && *t < 86_400.0)
                    .ok_or_else(|| bad("timeout must be a number of seconds"))?
            }
            _ => return Err(bad(&format!("unknown parameter {kv:?}"))),
        }
    }
    if secure && tls.is_none() {
        return Err(bad(
            "nbds needs ?tls-certificates=DIR (ca-cert.pem, client-cert.pem, client-key.pem)",
        ));
    }
    let address = if unix {
        if !authority.is_empty() {
            return Err(bad("nbd+unix takes no host"));
        }
        Address::Unix(socket.ok_or_else(|| bad("nbd+unix needs ?socket=PATH"))?)
    } else {
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if socket.is_some() {
            return Err(bad("socket= belongs to nbd+unix URIs"));
        }
        let hostport = if authority.starts_with('[') {
            if authority.contains("]:") {
                authority.to_string()
            } else {
                format!("{authority}:10809")
            }
        } else if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:10809")
        };
        Address::Tcp(hostport)
    };
    Ok(Target {
        address,
        export,
        timeout: Duration::from_secs_f64(timeout),
        tls,
    })
}

enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A TLS session's plaintext end (its pump owns the socket: crate::tls).
    Tls(UnixStream),
}

impl std::os::fd::AsFd for Conn {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Conn::Tcp(s) => s.as_fd(),
            Conn::Unix(s) | Conn::Tls(s) => s.as_fd(),
        }
    }
}

impl Conn {
    fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
            Conn::Tls(s) => Conn::Tls(s.try_clone()?),
        })
    }
    fn shutdown(&self) {
        let _ = match self {
            Conn::Tcp(s) => s.shutdown(Shutdown::Both),
            Conn::Unix(s) | Conn::Tls(s) => s.shutdown(Shutdown::Both),
        };
    }
    /// Acknowledge what arrives at once (TCP_QUICKACK, which the kernel clears again by
    /// itself). Without it, a connection the caller turns away from between its requests (a
    /// stripe's units go to every member in turn) looks interactive to the kernel, which then
    /// holds its acknowledgements back to ride on the next request — while the server waits
    /// for them to send the rest of a 64 KiB reply: 4–7 ms stalls, measured.
    fn ack_quickly(&self) {
        if let Conn::Tcp(s) = self {
            let _ = rustix::net::sockopt::set_tcp_quickack(s, true);
        }
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(t),
            Conn::Unix(s) | Conn::Tls(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(b),
            Conn::Unix(s) | Conn::Tls(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(b),
            Conn::Unix(s) | Conn::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The receiving side of a connection: replies read through a buffer (a small reply's
/// header and data in one system call), the socket's timeout set only when it drifts from
/// the reader's deadline.
struct Reader {
    conn: io::BufReader<Conn>,
    /// When a read blocked from now on would time out, as last set on the socket.
    times_out: Option<Instant>,
}

/// How far the socket's timeout may be from a reader's deadline before it is set again.
const TIMEOUT_SLACK: Duration = Duration::from_millis(100);

impl Reader {
    fn new(conn: Conn) -> Reader {
        Reader {
            conn: io::BufReader::with_capacity(64 << 10, conn),
            times_out: None,
        }
    }

    /// Fill `buf`, giving up (an error) about when `deadline` passes.
    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
        if self.conn.buffer().len() < buf.len() {
            // About to wait on the socket.
            let near = self
                .times_out
                .is_some_and(|t| t <= deadline + TIMEOUT_SLACK && t + TIMEOUT_SLACK >= deadline);
            if !near {
                let now = Instant::now();
                let left = deadline
                    .saturating_duration_since(now)
                    .max(Duration::from_millis(1));
                self.conn.get_ref().set_read_timeout(Some(left))?;
                self.times_out = Some(now + left);
            }
            self.conn.get_ref().ack_quickly();
        }
        self.conn.read_exact(buf)
    }
}

/// What a reply brings back to the caller waiting for it.
type Outcome = Result<Vec<u8>, Failure>;

#[derive(Debug)]
enum Failure {
    /// The server answered with this NBD error.
    Nbd(u32),
    /// The connection went away before the reply.
    Lost(String),
}

/// Requests in flight on one connection.
#[derive(Default)]
struct Flight {
    /// Cookie -> bytes its reply carries (READ) for requests not answered yet.
    pending: HashMap<u64, usize>,
    /// Replies read by another caller, waiting for theirs to pick up.
    answered: HashMap<u64, Outcome>,
    /// Some caller is reading the socket (there is no reader thread: the caller whose request
    /// is outstanding reads replies itself, so at queue depth 1 a reply reaches its caller
    /// without a thread hand-off).
    reading: bool,
    /// Callers asleep until their reply is read or the socket needs a reader, each woken on
    /// its own (a reply wakes its caller alone, not every caller of the connection: at queue
    /// depth 32 waking them all cost more than the replies).
    asleep: HashMap<u64, Arc<Condvar>>,
    dead: Option<String>,
}

impl Flight {
    /// Wake one sleeping caller to read the socket (the reader is leaving it).
    fn wake_a_reader(&self) {
        if let Some(cv) = self.asleep.values().next() {
            cv.notify_one();
        }
    }

    fn wake_all(&self) {
        for cv in self.asleep.values() {
            cv.notify_one();
        }
    }
}

/// One open connection.
struct Session {
    writer: Mutex<Conn>,
    reader: Mutex<Reader>,
    flight: Mutex<Flight>,
    control: Conn,
    flags: u16,
}

impl Session {
    fn is_dead(&self) -> bool {
        self.flight.lock().expect("lock").dead.is_some()
    }

    fn kill(&self, why: &str) {
        let mut f = self.flight.lock().expect("lock");
        if f.dead.is_none() {
            f.dead = Some(why.to_string());
            self.control.shutdown();
        }
        f.wake_all();
    }

    /// Wait for `cookie`'s reply until `deadline`, reading the socket when nobody else is.
    fn wait(&self, cookie: u64, deadline: Instant) -> Option<Outcome> {
        let mut f = self.flight.lock().expect("lock");
        let mut me: Option<Arc<Condvar>> = None;
        loop {
            if let Some(o) = f.answered.remove(&cookie) {
                f.asleep.remove(&cookie);
                if !f.reading {
                    // Woken to read, perhaps, but answered already: pass the socket on.
                    f.wake_a_reader();
                }
                return Some(o);
            }
            if let Some(why) = f.dead.clone() {
                f.pending.remove(&cookie);
                f.asleep.remove(&cookie);
                return Some(Err(Failure::Lost(why)));
            }
            if !f.reading {
                f.reading = true;
                f.asleep.remove(&cookie);
                drop(f);
                let got = self.read_one(deadline);
                f = self.flight.lock().expect("lock");
                f.reading = false;
                match got {
                    Ok((c, o)) => {
                        f.pending.remove(&c);
                        f.answered.insert(c, o);
                        if c == cookie {
                            // Leaving the socket: someone else reads from here on.
                            f.wake_a_reader();
                        } else if let Some(cv) = f.asleep.get(&c) {
                            cv.notify_one();
                        }
                    }
                    Err(why) => {
                        if f.dead.is_none() {
                            f.dead = Some(why);
                            self.control.shutdown();
                        }
                        f.wake_all();
                    }
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                f.pending.remove(&cookie);
                f.asleep.remove(&cookie);
                if !f.reading {
                    f.wake_a_reader();
                }
                return None;
            }
            let cv = Arc::clone(me.get_or_insert_with(|| Arc::new(Condvar::new())));
            f.asleep.insert(cookie, Arc::clone(&cv));
            f = cv.wait_timeout(f, left).expect("lock").0;
        }
    }

    /// Read one reply: (cookie, outcome), or why the connection cannot go on.
    fn read_one(&self, deadline: Instant) -> Result<(u64, Outcome), String> {
        let mut r = self.reader.lock().expect("lock");
        let mut h = [0u8; 16];
        r.read_exact(&mut h, deadline)
            .map_err(|e| format!("connection lost: {e}"))?;
        if proto::be32(&h[0..4]) != proto::SIMPLE_REPLY_MAGIC {
            return Err("the server sent a reply with a wrong magic number".into());
        }
        let error = proto::be32(&h[4..8]);
        let cookie = proto::be64(&h[8..16]);
        let Some(read_len) = self
            .flight
            .lock()
            .expect("lock")
            .pending
            .get(&cookie)
            .copied()
        else {
            return Err(format!(
                "the server answered cookie {cookie}, which was not asked"
            ));
        };
        if error != 0 {
            return Ok((cookie, Err(Failure::Nbd(error))));
        }
        let mut data = vec![0u8; read_len];
        r.read_exact(&mut data, deadline)
            .map_err(|e| format!("connection lost in a reply: {e}"))?;
        Ok((cookie, Ok(data)))
    }
}

/// An NBD export used as a member.
pub struct NbdDisk {
    uri: String,
    target: Target,
    size: u64,
    session: Mutex<Option<Arc<Session>>>,
    cookie: AtomicU64,
}

impl std::fmt::Debug for NbdDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdDisk").field("uri", &self.uri).finish()
    }
}

/// The largest payload one request carries (longer I/O is split).
const MAX_REQUEST: u32 = 4 << 20;

/// The length of the next request of an I/O with `left` bytes still to move.
fn next_request(left: usize) -> u32 {
    u32::try_from(left).map_or(MAX_REQUEST, |n| n.min(MAX_REQUEST))
}

impl NbdDisk {
    /// Connect to `uri` (within its timeout) and learn the export's size.
    pub fn open(uri: &str) -> Result<NbdDisk, DiskError> {
        let target = parse_uri(uri).map_err(|why| DiskError::Failed {
            name: uri.to_string(),
            why,
        })?;
        let mut disk = NbdDisk {
            uri: uri.to_string(),
            target,
            size: 0,
            session: Mutex::new(None),
            cookie: AtomicU64::new(1),
        };
        let deadline = Instant::now() + disk.target.timeout;
        let (session, size) = disk.connect_until(deadline)?;
        *disk.session.lock().expect("lock") = Some(session);
        disk.size = size;
        Ok(disk)
    }

    fn failed(&self, why: impl Into<String>) -> DiskError {
        DiskError::Failed {
            name: self.uri.clone(),
            why: why.into(),
        }
    }

    /// Connect, retrying with backoff until `deadline`.
    fn connect_until(&self, deadline: Instant) -> Result<(Arc<Session>, u64), DiskError> {
        let mut backoff = Duration::from_millis(20);
        loop {
            match self.connect_once(deadline) {
                Ok(x) => return Ok(x),
                Err(ConnectError::Refused(why)) => return Err(self.failed(why)),
                Err(ConnectError::Transient(why)) => {
                    let now = Instant::now();
                    if now + backoff >= deadline {
                        return Err(self.failed(format!(
                            "server unreachable for {:.1} s: {why}",
                            self.target.timeout.as_secs_f64()
                        )));
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    fn connect_once(&self, deadline: Instant) -> Result<(Arc<Session>, u64), ConnectError> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        let mut conn = match &self.target.address {
            Address::Tcp(hp) => {
                let addr = hp
                    .to_socket_addrs()
                    .map_err(|e| ConnectError::Transient(format!("resolving {hp}: {e}")))?
                    .next()
                    .ok_or_else(|| ConnectError::Refused(format!("{hp} resolves to nothing")))?;
                let s = TcpStream::connect_timeout(&addr, left)
                    .map_err(|e| ConnectError::Transient(format!("connecting to {hp}: {e}")))?;
                let _ = s.set_nodelay(true);
                Conn::Tcp(s)
            }
            Address::Unix(p) => Conn::Unix(UnixStream::connect(p).map_err(|e| {
                ConnectError::Transient(format!("connecting to {}: {e}", p.display()))
            })?),
        };
        conn.set_read_timeout(Some(left))
            .map_err(|e| ConnectError::Transient(e.to_string()))?;
        let (size, flags) = client_handshake(&mut conn, &self.target)?;
        conn.set_read_timeout(None)
            .map_err(|e| ConnectError::Transient(e.to_string()))?;
        let t = |e: io::Error| ConnectError::Transient(e.to_string());
        let session = Arc::new(Session {
            writer: Mutex::new(conn.try_clone().map_err(t)?),
            control: conn.try_clone().map_err(t)?,
            reader: Mutex::new(Reader::new(conn)),
            flight: Mutex::new(Flight::default()),
            flags,
        });
        Ok((session, size))
    }

    /// The live session, reconnecting if the last one died.
    fn session(&self, deadline: Instant) -> Result<Arc<Session>, DiskError> {
        let mut s = self.session.lock().expect("lock");
        if let Some(cur) = s.as_ref() {
            if !cur.is_dead() {
                return Ok(Arc::clone(cur));
            }
        }
        let (fresh, size) = self.connect_until(deadline)?;
        if size != self.size {
            return Err(self.failed(format!(
                "the export came back with {size} bytes instead of {}",
                self.size
            )));
        }
        *s = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// One request, resent over fresh connections until it is answered or the timeout passes.
    fn request(
        &self,
        op: &'static str,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Result<Vec<u8>, DiskError> {
        let deadline = Instant::now() + self.target.timeout;
        loop {
            let (session, cookie) =
                self.send_one(kind, flags, offset, length, payload, deadline)?;
            let got = session.wait(cookie, deadline);
            if let Some(data) = self.answer(op, kind, offset, length, &session, got, deadline)? {
                return Ok(data);
            }
        }
    }

    /// Send one request on the live session (reconnecting if it died): the session and the
    /// cookie its answer will carry. A failed send kills the session, so the wait for the
    /// answer says the connection was lost.
    fn send_one(
        &self,
        kind: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<(Arc<Session>, u64), DiskError> {
        let session = self.session(deadline)?;
        let cookie = self.cookie.fetch_add(1, Ordering::Relaxed);
        let read_len = if kind == proto::CMD_READ {
            length as usize
        } else {
            0
        };
        session
            .flight
            .lock()
            .expect("lock")
            .pending
            .insert(cookie, read_len);
        let header = Request {
            flags,
            kind,
            cookie,
            offset,
            length,
        }
        .encode();
        let sent = {
            let mut w = session.writer.lock().expect("lock");
            if payload.is_empty() {
                w.write_all(&header)
            } else {
                // One write: header and payload in one segment where it fits.
                let mut m = Vec::with_capacity(header.len() + payload.len());
                m.extend_from_slice(&header);
                m.extend_from_slice(payload);
                w.write_all(&m)
            }
        };
        if let Err(e) = sent {
            session.kill(&format!("sending: {e}"));
        }
        Ok((session, cookie))
    }

    /// What a request's wait brought: its data (empty but for READ), `None` when the
    /// connection was lost in time to send it again, or the error the caller gets.
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        op: &'static str,
        kind: u16,
        offset: u64,
        length: u32,
        session: &Session,
        got: Option<Outcome>,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, DiskError> {
        match got {
            Some(Ok(data)) => Ok(Some(data)),
            // A range the server cannot read: the engine rebuilds it from the others.
            Some(Err(Failure::Nbd(_))) if kind == proto::CMD_READ => Err(DiskError::Medium {
                name: self.uri.clone(),
                offset,
            }),
            Some(Err(Failure::Nbd(errno))) => Err(DiskError::Io {
                name: self.uri.clone(),
                op,
                offset,
                len: length as usize,
                source: io::Error::other(format!("the NBD server answered error {errno}")),
            }),
            Some(Err(Failure::Lost(_))) if Instant::now() < deadline => Ok(None),
            Some(Err(Failure::Lost(why))) => Err(self.failed(why)),
            None => {
                // No answer in time: this connection is not to be trusted any more.
                session.kill("timed out");
                Err(self.failed(format!(
                    "no answer to a {op} within {:.1} s",
                    self.target.timeout.as_secs_f64()
                )))
            }
        }
    }

    fn check(&self, op: &'static str, offset: u64, len: usize) -> Result<(), DiskError> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(DiskError::OutOfRange {
                name: self.uri.clone(),
                op,
                offset,
                len,
                size: self.size,
            }),
        }
    }
}

enum ConnectError {
    /// Worth retrying (the server is not there yet).
    Transient(String),
    /// It answered, and the answer will not change (no such export, not fixed newstyle).
    Refused(String),
}

/// The client side of the fixed-newstyle handshake: GO with the export's name.
fn client_handshake(c: &mut Conn, target: &Target) -> Result<(u64, u16), ConnectError> {
    let export = target.export.as_str();
    let io = |e: io::Error| ConnectError::Transient(format!("handshake: {e}"));
    let mut hello = [0u8; 18];
    c.read_exact(&mut hello).map_err(io)?;
    if proto::be64(&hello[0..8]) != proto::NBDMAGIC || proto::be64(&hello[8..16]) != proto::IHAVEOPT
    {
        return Err(ConnectError::Refused(
            "not a newstyle NBD server (old-style servers are not supported)".into(),
        ));
    }
    let server = proto::be16(&hello[16..18]);
    if server & proto::FLAG_FIXED_NEWSTYLE == 0 {
        return Err(ConnectError::Refused(
            "the server does not speak fixed newstyle".into(),
        ));
    }
    let mut flags = proto::CLIENT_FIXED_NEWSTYLE;
    if server & proto::FLAG_NO_ZEROES != 0 {
        flags |= proto::CLIENT_NO_ZEROES;
    }
    let mut m = flags.to_be_bytes().to_vec();
    let mut session_error: Option<crate::tls::SessionError> = None;
    if let Some(dir) = &target.tls {
        // STARTTLS first; the rest of the haggling (and transmission) inside TLS.
        m.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&proto::OPT_STARTTLS.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        c.write_all(&m).map_err(io)?;
        m.clear();
        let mut h = [0u8; 20];
        c.read_exact(&mut h).map_err(io)?;
        let kind = proto::be32(&h[12..16]);
        let len = proto::be32(&h[16..20]).min(proto::MAX_OPTION_BYTES);
        let mut data = vec![0u8; len as usize];
        c.read_exact(&mut data).map_err(io)?;
        if proto::be64(&h[0..8]) != proto::REPLY_MAGIC || kind != proto::REP_ACK {
            return Err(ConnectError::Refused(format!(
                "the server refused STARTTLS: {} (reply {kind:#x})",
                String::from_utf8_lossy(&data)
            )));
        }
        let config = crate::tls::client_config(dir).map_err(ConnectError::Refused)?;
        let host = match &target.address {
            Address::Tcp(hp) => hp
                .rsplit_once(':')
                .map_or(hp.as_str(), |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            Address::Unix(_) => "localhost".to_string(),
        };
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| ConnectError::Refused(format!("{host:?} as a TLS server name: {e}")))?;
        let session = rustls::ClientConnection::new(config, name)
            .map_err(|e| ConnectError::Refused(format!("TLS: {e}")))?;
        let raw = std::mem::replace(c, Conn::Tls(UnixStream::pair().map_err(io)?.0));
        let (plain, tls_error) = crate::tls::start(rustls::Connection::Client(session), raw)
            .map_err(|e| ConnectError::Refused(format!("TLS handshake: {e}")))?;
        *c = Conn::Tls(plain);
        session_error = Some(tls_error);
    }
    // After TLS: a connection the server ends right away most often means it refused this
    // client's certificate, which the session's alert says.
    let after = |e: io::Error| {
        match (session_error.as_ref(), e.kind()) {
        (Some(s), _) if s.get().is_some() => ConnectError::Refused(format!(
            "TLS: {} (does the server's CA sign this client's client-cert.pem?)",
            s.get().map_or("", String::as_str)
        )),
        (Some(_), io::ErrorKind::UnexpectedEof) => ConnectError::Refused(
            "the server closed the connection right after the TLS handshake: it most likely refused this client's certificate (does its CA sign client-cert.pem?)".into(),
        ),
        _ => io(e),
    }
    };
    let too_long = |_| ConnectError::Refused(format!("an export name of {} bytes", export.len()));
    let mut d = u32::try_from(export.len())
        .map_err(too_long)?
        .to_be_bytes()
        .to_vec();
    d.extend_from_slice(export.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    m.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&proto::OPT_GO.to_be_bytes());
    m.extend_from_slice(&u32::try_from(d.len()).map_err(too_long)?.to_be_bytes());
    m.extend_from_slice(&d);
    c.write_all(&m).map_err(after)?;
    let mut info = None;
    loop {
        let mut h = [0u8; 20];
        c.read_exact(&mut h).map_err(after)?;
        if proto::be64(&h[0..8]) != proto::REPLY_MAGIC {
            return Err(ConnectError::Refused(
                "an option reply with a wrong magic number".into(),
            ));
        }
        let kind = proto::be32(&h[12..16]);
        let len = proto::be32(&h[16..20]);
        if len > proto::MAX_OPTION_BYTES {
            return Err(ConnectError::Refused(format!(
                "an option reply of {len} bytes"
            )));
        }
        let mut data = vec![0u8; len as usize];
        c.read_exact(&mut data).map_err(io)?;
        match kind {
            proto::REP_INFO
                if data.len() >= 12 && proto::be16(&data[0..2]) == proto::INFO_EXPORT =>
            {
                info = Some((proto::be64(&data[2..10]), proto::be16(&data[10..12])));
            }
            proto::REP_INFO => {}
            proto::REP_ACK => {
                return info.ok_or_else(|| {
                    ConnectError::Refused("GO succeeded without the export's size".into())
                });
            }
            k if k & (1 << 31) != 0 => {
                let msg = String::from_utf8_lossy(&data).into_owned();
                let why = format!("the server refused export {export:?}: {msg} (reply {k:#x})");
                // "Shutting down" is worth another try; a missing export is not.
                return Err(if k == proto::REP_ERR_SHUTDOWN {
                    ConnectError::Transient(why)
                } else {
                    ConnectError::Refused(why)
                });
            }
            k => {
                return Err(ConnectError::Refused(format!(
                    "an unexpected option reply {k}"
                )))
            }
        }
    }
}

impl Disk for NbdDisk {
    fn name(&self) -> &str {
        &self.uri
    }

    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.check("read", offset, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            let n = next_request(buf.len() - done);
            let at = offset + done as u64;
            let data = self.request("read", proto::CMD_READ, 0, at, n, &[])?;
            buf[done..done + n as usize].copy_from_slice(&data);
            done += n as usize;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.check("write", offset, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            let n = next_request(buf.len() - done);
            let at = offset + done as u64;
            let part = &buf[done..done + n as usize];
            self.request("write", proto::CMD_WRITE, 0, at, n, part)?;
            done += n as usize;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DiskError> {
        let flags = self
            .session
            .lock()
            .expect("lock")
            .as_ref()
            .map(|s| s.flags)
            .unwrap_or(0);
        if flags & proto::TFLAG_SEND_FLUSH == 0 && flags & proto::TFLAG_HAS_FLAGS != 0 {
            // The server says it has nothing to flush (it writes through).
            return Ok(());
        }
        self.request("flush", proto::CMD_FLUSH, 0, 0, 0, &[])
            .map(|_| ())
    }

    fn prefers_parallel(&self) -> bool {
        true
    }

    fn shared_across_hosts(&self) -> bool {
        true
    }

    fn pipelined(&self) -> Option<&dyn Pipelined> {
        Some(self)
    }
}

/// The requests of one pipelined I/O (longer I/O goes as several), each with the session it
/// went out on and its cookie, or the error sending it met.
struct Sent {
    offset: u64,
    deadline: Instant,
    parts: Vec<Result<(Arc<Session>, u64), DiskError>>,
}

impl Pipelined for NbdDisk {
    fn send(&self, offset: u64, len: usize, data: Option<&[u8]>) -> Result<Ticket, DiskError> {
        let (op, kind) = match data {
            Some(_) => ("write", proto::CMD_WRITE),
            None => ("read", proto::CMD_READ),
        };
        self.check(op, offset, len)?;
        let deadline = Instant::now() + self.target.timeout;
        let mut parts = Vec::new();
        let mut done = 0;
        while done < len {
            let n = next_request(len - done);
            let payload = data.map_or(&[][..], |d| &d[done..done + n as usize]);
            parts.push(self.send_one(kind, 0, offset + done as u64, n, payload, deadline));
            done += n as usize;
        }
        Ok(Ticket(Box::new(Sent {
            offset,
            deadline,
            parts,
        })))
    }

    fn complete(&self, ticket: Ticket, mut buf: IoBuf<'_>) -> Result<(), DiskError> {
        let sent = ticket
            .0
            .downcast::<Sent>()
            .map_err(|_| self.failed("completing a request this disk did not send"))?;
        let (op, kind, len) = match &buf {
            IoBuf::From(b) => ("write", proto::CMD_WRITE, b.len()),
            IoBuf::Into(b) => ("read", proto::CMD_READ, b.len()),
        };
        let mut result = Ok(());
        let mut done = 0;
        // Every part is waited for (its answer must come off the connection); the first error
        // is the I/O's.
        for part in sent.parts {
            let n = next_request(len - done);
            let at = sent.offset + done as u64;
            let range = done..done + n as usize;
            done += n as usize;
            let got = part.and_then(|(session, cookie)| {
                let got = session.wait(cookie, sent.deadline);
                match self.answer(op, kind, at, n, &session, got, sent.deadline)? {
                    Some(data) => Ok(data),
                    // The connection was lost with time left: sent again on a fresh one.
                    None => match &buf {
                        IoBuf::From(b) => self.request(op, kind, 0, at, n, &b[range.clone()]),
                        IoBuf::Into(_) => self.request(op, kind, 0, at, n, &[]),
                    },
                }
            });
            match (got, &mut buf) {
                (Ok(data), IoBuf::Into(b)) => b[range].copy_from_slice(&data),
                (Ok(_), IoBuf::From(_)) => {}
                (Err(e), _) => {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }
}

impl Drop for NbdDisk {
    fn drop(&mut self) {
        if let Some(s) = self.session.lock().expect("lock").take() {
            let disc = Request {
                flags: 0,
                kind: proto::CMD_DISC,
                cookie: 0,
                offset: 0,
                length: 0,
            }
            .encode();
            let _ = s.writer.lock().expect("lock").write_all(&disc);
            s.kill("closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_and_bad_ones_say_why() {
        let t = parse_uri("nbd://10.0.0.2:10810/m3?timeout=2.5").unwrap();
        assert_eq!(t.address, Address::Tcp("10.0.0.2:10810".into()));
        assert_eq!(t.export, "m3");
        assert_eq!(t.timeout, Duration::from_millis(2500));
        let t = parse_uri("nbd://host").unwrap();
        assert_eq!(t.address, Address::Tcp("host:10809".into()));
        assert_eq!(t.export, "");
        let t = parse_uri("nbd+unix:///e?socket=/run/x.sock").unwrap();
        assert_eq!(t.address, Address::Unix("/run/x.sock".into()));
        assert_eq!(t.tls, None);
        // nbds: TLS, with libnbd's credentials parameter (required).
        let t = parse_uri("nbds://h:10810/e?tls-certificates=/etc/pki/c").unwrap();
        assert_eq!(t.address, Address::Tcp("h:10810".into()));
        assert_eq!(t.tls, Some("/etc/pki/c".into()));
        let t = parse_uri("nbds+unix:///e?socket=/s&tls-certificates=c").unwrap();
        assert_eq!(t.address, Address::Unix("/s".into()));
        assert!(is_uri("nbds://h") && is_uri("nbds+unix:///e"));
        for bad in [
            "nbds://h/e",
            "nbd://h/e?tls-certificates=c",
            "nbd+unix:///e",
            "nbd://",
            "nbd://h/e?socket=/x",
            "nbd://h/e?timeout=-1",
            "nbd://h/e?color=red",
            "http://h/e",
        ] {
            assert!(parse_uri(bad).is_err(), "{bad}");
        }
    }
}
