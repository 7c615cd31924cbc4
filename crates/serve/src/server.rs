//! The server: an accept loop, a thread per connection that reads requests, and one fixed pool
//! of workers shared by every connection that executes them and sends each reply as soon as it
//! is done (out of order, matched by cookie).
//!
//! Why threads and not an async runtime: every request ends in the engine, whose reads and
//! writes are blocking calls on files; an async server would hand each one to a blocking pool
//! anyway. Requests in flight are bounded per connection (count and bytes) so a client that
//! pipelines without reading its replies cannot grow the server's memory.
//!
//! Shutdown (SIGTERM / SIGINT set the `stop` flag): stop accepting (the listener is closed, so a
//! new client is refused rather than left waiting), say who is still connected, and go on
//! serving them until they all disconnect, `stop_timeout` passes, or `hurry` is set (a second
//! SIGTERM, `stripeguard stop --force`) — a filesystem whose client is still flushing its
//! journal gets to finish, as md refuses to stop an array in use. Then shut the read side of
//! every connection, let the requests already read finish and be answered (a client that does
//! not read its replies is cut off after 10 s), and return; the caller flushes and closes the
//! array.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use stripeguard_nbd::proto::{self, ExportInfo, Handshake, Request};

/// What the server serves: one block device. The engine's array implements it
/// ([`crate::ArrayExport`]); tests use a memory image.
pub trait Export: Send + Sync + 'static {
    fn size_bytes(&self) -> u64;
    fn writable(&self) -> bool;
    /// Smallest addressable unit and the size at which requests are efficient (powers of two).
    fn block_sizes(&self) -> (u32, u32);
    fn description(&self) -> String;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError>;
    /// Make every completed write durable.
    fn flush(&self) -> Result<(), ExportError>;
    /// Make `len` bytes at `offset` read back as zeros; `may_trim`: they may become a hole
    /// (TRIM, or WRITE_ZEROES without NO_HOLE).
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<(), ExportError>;
    /// Whether zeroing `len` bytes at `offset` is faster than writing them (NBD's FAST_ZERO:
    /// when not, such a request fails at once with ENOTSUP).
    fn fast_zero(&self, _offset: u64, _len: u64, _may_trim: bool) -> bool {
        false
    }
    /// Whether all `len > 0` bytes at `offset` are known to read as zeros without reading them
    /// (a READ is then answered with one `OFFSET_HOLE` chunk). By default nothing is.
    fn is_hole(&self, _offset: u64, _len: u64) -> bool {
        false
    }
    /// Extents of `len > 0` bytes at `offset` for meta context `context` (one of
    /// `ExportInfo::meta_contexts`): (length, flags), consecutive from `offset`, covering at
    /// least one byte. By default all of it in one extent with no flag (`base:allocation`:
    /// allocated, contents unknown).
    fn block_status(
        &self,
        _context: &str,
        _offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u32)>, ExportError> {
        Ok(vec![(len, 0)])
    }
}

/// A failed request: the NBD error to answer and a message for the server's log.
#[derive(Debug)]
pub struct ExportError {
    pub errno: u32,
    pub message: String,
}

/// Counters a running server keeps (shown by `status` over the control socket).
#[derive(Default, Debug)]
pub struct Stats {
    pub connections_now: AtomicU64,
    pub connections_total: AtomicU64,
    pub connections_refused: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub flushes: AtomicU64,
    pub zeroes: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub errors: AtomicU64,
    pub protocol_violations: AtomicU64,
    /// How long requests took, by command ([`LATENCY_COMMANDS`]): from the request read
    /// (payload included) to its reply handed to the connection's writer, so the wait for a
    /// worker counts.
    pub latency: [Latency; LATENCY_COMMANDS.len()],
    /// The log's rate limit on failed requests: the second being counted, lines in it, lines
    /// left out (a client sending bad requests as fast as it can must not fill the log).
    log_second: AtomicU64,
    log_lines: AtomicU64,
    log_dropped: AtomicU64,
}

/// Failed requests logged per second at most; the rest are counted and said once a second.
const LOG_LINES_PER_SECOND: u64 = 20;

/// The commands whose latency is kept, in the order of [`Stats::latency`].
pub const LATENCY_COMMANDS: [&str; 5] = ["read", "write", "flush", "trim", "write_zeroes"];

/// Upper bounds of the latency buckets in microseconds (a last bucket takes everything above):
/// 50 µs (a cached read) to 10 s (a request stuck behind a member's timeout).
pub const LATENCY_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// One command's latency histogram: a count per bucket (not cumulative) and the sum.
#[derive(Default, Debug)]
pub struct Latency {
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Latency {
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let i = LATENCY_BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The count in each bucket (the last: above every bound) and the sum in microseconds.
    pub fn snapshot(&self) -> (Vec<u64>, u64) {
        (
            self.buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            self.sum_us.load(Ordering::Relaxed),
        )
    }
}

impl Stats {
    /// Whether one more failed request may be a line of the log now; a new second first says
    /// how many the last one left out.
    fn may_log(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let was = self.log_second.load(Ordering::Relaxed);
        if was != now
            && self
                .log_second
                .compare_exchange(was, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.log_lines.store(0, Ordering::Relaxed);
            let dropped = self.log_dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                eprintln!(
                    "stripeguard serve: {dropped} more failed request(s) not logged (at most {LOG_LINES_PER_SECOND} a second)"
                );
            }
        }
        if self.log_lines.fetch_add(1, Ordering::Relaxed) < LOG_LINES_PER_SECOND {
            true
        } else {
            self.log_dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("connections_now", g(&self.connections_now)),
            ("connections_total", g(&self.connections_total)),
            ("connections_refused", g(&self.connections_refused)),
            ("reads", g(&self.reads)),
            ("writes", g(&self.writes)),
            ("flushes", g(&self.flushes)),
            ("zeroes", g(&self.zeroes)),
            ("bytes_read", g(&self.bytes_read)),
            ("bytes_written", g(&self.bytes_written)),
            ("errors", g(&self.errors)),
            ("protocol_violations", g(&self.protocol_violations)),
        ]
    }
}

/// Settings of one server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub export_name: String,
    pub read_only: bool,
    pub max_connections: usize,
    /// Worker threads shared by all connections.
    pub workers: usize,
    /// Requests in flight per connection, and their payload bytes.
    pub max_inflight: usize,
    pub max_inflight_bytes: u64,
    /// Print a line per connection and per failed request to stderr.
    pub log: bool,
    /// How long a stop waits for connected clients to leave.
    pub stop_timeout: Duration,
    /// TLS required of every client (X.509 with client certificates); `None`: plaintext.
    pub tls: Option<crate::tls::TlsConfig>,
    /// How long a client's whole handshake may take.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export_name: String::new(),
            read_only: false,
            max_connections: 16,
            workers: 8,
            max_inflight: 128,
            max_inflight_bytes: 128 << 20,
            log: true,
            stop_timeout: Duration::from_secs(60),
            tls: None,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// A connected client.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A client on TLS: the local end of the plaintext pair its pump relays (crate::tls), and
    /// who it is.
    Tls(UnixStream, String),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tls(s, who) => Stream::Tls(s.try_clone()?, who.clone()),
        })
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) | Stream::Tls(s, _) => s.shutdown(how),
        };
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) | Stream::Tls(s, _) => s.set_write_timeout(t),
        }
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) | Stream::Tls(s, _) => s.set_read_timeout(t),
        }
    }
    fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "tcp peer".into()),
            Stream::Unix(s) => match rustix::net::sockopt::socket_peercred(s) {
                Ok(c) => format!("unix socket peer (pid {})", c.pid.as_raw_nonzero()),
                Err(_) => "unix socket peer".into(),
            },
            Stream::Tls(_, who) => who.clone(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) | Stream::Tls(s, _) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) | Stream::Tls(s, _) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) | Stream::Tls(s, _) => s.flush(),
        }
    }
}

/// Where the server listens.
pub enum Listener {
    Tcp(TcpListener),
    /// The socket file is removed when the server stops.
    Unix(UnixListener, PathBuf),
}

impl Listener {
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Unix(l, _) => l.set_nonblocking(on),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of worker threads fed by one queue.
struct Pool {
    tx: Option<mpsc::Sender<Job>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn new(n: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..n.max(1))
            .map(|i| {
                let rx = Arc::clone(&rx);
                std::thread::Builder::new()
                    .name(format!("nbd-worker-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().expect("lock").recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        Pool {
            tx: Some(tx),
            threads,
        }
    }

    fn submit(&self, job: Job) {
        self.tx
            .as_ref()
            .expect("pool open")
            .send(job)
            .expect("workers alive");
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Requests of one connection in flight: a count and their payload bytes, bounded.
struct InFlight {
    state: Mutex<(usize, u64)>,
    changed: Condvar,
}

impl InFlight {
    fn acquire(&self, bytes: u64, max_count: usize, max_bytes: u64) {
        let mut s = self.state.lock().expect("lock");
        // One request larger than the byte bound still runs, alone.
        while s.0 > 0 && (s.0 >= max_count || s.1 + bytes > max_bytes) {
            s = self.changed.wait(s).expect("lock");
        }
        s.0 += 1;
        s.1 += bytes;
    }
    fn release(&self, bytes: u64) {
        let mut s = self.state.lock().expect("lock");
        s.0 -= 1;
        s.1 -= bytes;
        self.changed.notify_all();
    }
    fn wait_idle(&self) {
        let mut s = self.state.lock().expect("lock");
        while s.0 > 0 {
            s = self.changed.wait(s).expect("lock");
        }
    }
}

/// A server for one export.
pub struct Server {
    export: Arc<dyn Export>,
    config: ServerConfig,
    stats: Arc<Stats>,
}

impl Server {
    pub fn new(export: Arc<dyn Export>, config: ServerConfig) -> Server {
        Server {
            export,
            config,
            stats: Arc::new(Stats::default()),
        }
    }

    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// What GO tells a client.
    pub fn export_info(&self) -> ExportInfo {
        let e = &self.export;
        let read_only = self.config.read_only || !e.writable();
        let mut flags = proto::TFLAG_HAS_FLAGS | proto::TFLAG_SEND_FLUSH | proto::TFLAG_SEND_FUA;
        // A FLUSH on any connection makes every completed write durable (it flushes every
        // member), which is what multi-conn asks.
        flags |= proto::TFLAG_CAN_MULTI_CONN;
        // DF: a READ is always one content chunk. CACHE: a read that verifies and keeps
        // nothing but the engine's caches.
        flags |= proto::TFLAG_SEND_DF | proto::TFLAG_SEND_CACHE;
        if read_only {
            flags |= proto::TFLAG_READ_ONLY;
        } else {
            flags |= proto::TFLAG_SEND_TRIM
                | proto::TFLAG_SEND_WRITE_ZEROES
                | proto::TFLAG_SEND_FAST_ZERO;
        }
        let (min_block, preferred_block) = e.block_sizes();
        ExportInfo {
            name: self.config.export_name.clone(),
            description: e.description(),
            size_bytes: e.size_bytes(),
            flags,
            min_block,
            preferred_block,
            max_payload: proto::MAX_PAYLOAD_BYTES,
            meta_contexts: vec![proto::CONTEXT_ALLOCATION, proto::CONTEXT_INTEGRITY],
        }
    }

    /// Serve until `stop` is set; then serve the clients still connected until they leave (at
    /// most `stop_timeout`, less if `hurry` is set), finish what was read, answer it, and return.
    pub fn run(&self, listener: Listener, stop: &AtomicBool, hurry: &AtomicBool) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let pool = Arc::new(Pool::new(self.config.workers));
        let open: Arc<Mutex<HashMap<u64, (Stream, String)>>> = Arc::default();
        let mut handles = Vec::new();
        let mut next_id = 0u64;
        let stop_now = Arc::new(AtomicBool::new(false));
        // Set when the stop begins: a client still in its handshake is refused with
        // ERR_SHUTDOWN (FORMAT.md §4); the ones already transmitting are served on.
        let draining = Arc::new(AtomicBool::new(false));
        let refusing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        while !stop.load(Ordering::Relaxed) {
            let stream = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                    handles.retain(|h: &std::thread::JoinHandle<()>| !h.is_finished());
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.log(format_args!("accept failed: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            // Sockets accepted from a non-blocking listener may inherit the mode on some
            // platforms; the connection threads want blocking reads.
            if let Stream::Tcp(s) = &stream {
                let _ = s.set_nonblocking(false);
            }
            if let Stream::Unix(s) = &stream {
                let _ = s.set_nonblocking(false);
            }
            // Per connection: an array grown meanwhile (`stripeguard grow`) is offered at its
            // new size to clients that connect from now on (NBD has no resize notification;
            // a connected client keeps the size it was given).
            let info = Arc::new(self.export_info());
            let now = self.stats.connections_now.load(Ordering::Relaxed);
            if now >= self.config.max_connections as u64 {
                self.stats
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                self.log(format_args!(
                    "refused {}: already {now} connections (--max-connections {})",
                    stream.peer(),
                    self.config.max_connections
                ));
                // The client is told why (every option answered NBD_REP_ERR_POLICY with the
                // reason, as a full server should), on a thread of its own for at most 5 s;
                // past a few such at once, refused clients are simply closed.
                if refusing.load(Ordering::Relaxed) < 4 {
                    refusing.fetch_add(1, Ordering::Relaxed);
                    let (refusing, info) = (Arc::clone(&refusing), Arc::clone(&info));
                    let why = format!(
                        "this server is full: {now} clients are connected (--max-connections {}); try again later",
                        self.config.max_connections
                    );
                    let _ =
                        std::thread::Builder::new()
                            .name("nbd-refuse".into())
                            .spawn(move || {
                                let mut stream = stream;
                                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                                let _ = proto::handshake(
                                    &mut stream,
                                    &info,
                                    &|| {
                                        Some(proto::Refusal {
                                            reply: proto::REP_ERR_POLICY,
                                            message: why.clone(),
                                        })
                                    },
                                    None,
                                );
                                stream.shutdown(Shutdown::Both);
                                refusing.fetch_sub(1, Ordering::Relaxed);
                            });
                } else {
                    stream.shutdown(Shutdown::Both);
                }
                continue;
            }
            let id = next_id;
            next_id += 1;
            if let Ok(c) = stream.try_clone() {
                open.lock().expect("lock").insert(id, (c, stream.peer()));
            }
            self.stats.connections_now.fetch_add(1, Ordering::Relaxed);
            self.stats.connections_total.fetch_add(1, Ordering::Relaxed);
            let ctx = Conn {
                export: Arc::clone(&self.export),
                info: Arc::clone(&info),
                pool: Arc::clone(&pool),
                stats: Arc::clone(&self.stats),
                config: self.config.clone(),
                stopping: Arc::clone(&stop_now),
                draining: Arc::clone(&draining),
            };
            let open = Arc::clone(&open);
            let h = std::thread::Builder::new()
                .name(format!("nbd-conn-{id}"))
                .spawn(move || {
                    let peer = stream.peer();
                    let r = ctx.run(stream);
                    if ctx.config.log {
                        match r {
                            Ok(()) => eprintln!("stripeguard serve: {peer} disconnected"),
                            Err(why) => eprintln!("stripeguard serve: {peer} dropped: {why}"),
                        }
                    }
                    open.lock().expect("lock").remove(&id);
                    ctx.stats.connections_now.fetch_sub(1, Ordering::Relaxed);
                })?;
            handles.push(h);
        }
        // No new clients; the connected ones are served until they leave.
        drop(listener);
        draining.store(true, Ordering::Relaxed);
        self.drain(&handles, &open, hurry);
        // Stop reading from every client; requests already read are finished and answered.
        stop_now.store(true, Ordering::Relaxed);
        for (s, _) in open.lock().expect("lock").values() {
            s.shutdown(Shutdown::Read);
        }
        // A client that does not read its replies would hold the stop for the reply timeout:
        // after a grace period its socket is closed (its requests still finish in the engine;
        // only their replies, which it was not reading, are lost).
        // A hurried stop (a second SIGTERM, `stop --force`) waits for nobody, now or during it.
        let grace = std::time::Instant::now() + Duration::from_secs(10);
        while handles.iter().any(|h| !h.is_finished())
            && std::time::Instant::now() < grace
            && !hurry.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        for (s, _) in open.lock().expect("lock").values() {
            s.shutdown(Shutdown::Both);
        }
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    }

    /// Wait for the connected clients to disconnect: at most `stop_timeout`, until `hurry`.
    fn drain(
        &self,
        handles: &[std::thread::JoinHandle<()>],
        open: &Mutex<HashMap<u64, (Stream, String)>>,
        hurry: &AtomicBool,
    ) {
        let connected = || handles.iter().filter(|h| !h.is_finished()).count();
        if connected() == 0 || hurry.load(Ordering::Relaxed) {
            return;
        }
        let peers: Vec<String> = open
            .lock()
            .expect("lock")
            .values()
            .map(|(_, p)| p.clone())
            .collect();
        let limit = self.config.stop_timeout;
        self.log(format_args!(
            "stopping: no new connections; {} client(s) still connected ({}): serving them until they disconnect, at most {} s (--stop-timeout); another SIGTERM stops now",
            connected(),
            peers.join(", "),
            limit.as_secs()
        ));
        let deadline = std::time::Instant::now() + limit;
        while connected() > 0
            && std::time::Instant::now() < deadline
            && !hurry.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = connected();
        if left > 0 {
            self.log(format_args!(
                "stopping now with {left} client(s) still connected ({})",
                if hurry.load(Ordering::Relaxed) {
                    "asked again"
                } else {
                    "--stop-timeout passed"
                }
            ));
        }
    }

    fn log(&self, args: std::fmt::Arguments) {
        if self.config.log {
            eprintln!("stripeguard serve: {args}");
        }
    }
}

/// One connection's share of the server.
struct Conn {
    export: Arc<dyn Export>,
    info: Arc<ExportInfo>,
    pool: Arc<Pool>,
    stats: Arc<Stats>,
    config: ServerConfig,
    stopping: Arc<AtomicBool>,
    /// The server is stopping: no handshake completes any more.
    draining: Arc<AtomicBool>,
}

impl Conn {
    fn run(&self, mut stream: Stream) -> Result<(), String> {
        // A client that connects and says nothing does not hold a slot for ever.
        let _ = stream.set_read_timeout(Some(self.config.handshake_timeout));
        let stopping = Arc::clone(&self.stopping);
        let draining = Arc::clone(&self.draining);
        let tls = self.config.tls.clone();
        let upgrade = move |s: &mut Stream| -> io::Result<()> {
            let Some(tls) = &tls else {
                return Err(io::Error::other("no TLS configured"));
            };
            let who = format!("{} (TLS)", s.peer());
            let placeholder = Stream::Tls(UnixStream::pair()?.0, String::new());
            // A failed TLS handshake (no certificate, another CA's) is a refusal, not a
            // protocol violation: said as such (PermissionDenied) below.
            let refused =
                |e: io::Error| io::Error::new(io::ErrorKind::PermissionDenied, format!("TLS: {e}"));
            let plain = match std::mem::replace(s, placeholder) {
                Stream::Tcp(t) => tls.accept(t).map_err(refused)?,
                Stream::Unix(u) => tls.accept(u).map_err(refused)?,
                Stream::Tls(..) => return Err(io::Error::other("TLS is already on")),
            };
            *s = Stream::Tls(plain, who);
            Ok(())
        };
        // The whole handshake gets 30 s, however slowly its bytes trickle in (the read timeout
        // alone restarts with every byte, and a TLS session's plaintext end has none): past
        // that the connection is shut, which ends the handshake's next read.
        let (handshook, watch) = mpsc::channel::<()>();
        let limit = self.config.handshake_timeout;
        if let Ok(raw) = stream.try_clone() {
            let _ = std::thread::Builder::new()
                .name("nbd-handshake-deadline".into())
                .spawn(move || {
                    if let Err(mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(limit) {
                        raw.shutdown(Shutdown::Both);
                    }
                });
        }
        let neg = proto::handshake(
            &mut stream,
            &self.info,
            &move || {
                (stopping.load(Ordering::Relaxed) || draining.load(Ordering::Relaxed)).then(|| {
                    proto::Refusal {
                        reply: proto::REP_ERR_SHUTDOWN,
                        message: "the server is shutting down".into(),
                    }
                })
            },
            self.config
                .tls
                .as_ref()
                .map(|_| &upgrade as &dyn Fn(&mut Stream) -> io::Result<()>),
        );
        drop(handshook);
        let neg = match neg {
            Ok(Handshake::Go(neg)) => Arc::new(neg),
            Ok(Handshake::Aborted) => return Ok(()),
            // Not a violation: a client may go at any time (a probe, a refused option), and the
            // socket says so in more ways than an end of stream.
            Err(proto::HandshakeError::Left) => return Ok(()),
            Err(proto::HandshakeError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::NotConnected
                ) =>
            {
                return Ok(())
            }
            Err(proto::HandshakeError::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(format!("refused: {e}"));
            }
            Err(e) => {
                self.stats
                    .protocol_violations
                    .fetch_add(1, Ordering::Relaxed);
                return Err(format!("handshake: {e}"));
            }
        };
        let _ = stream.set_read_timeout(None);
        if self.config.log {
            eprintln!(
                "stripeguard serve: {} connected to export {:?} ({} bytes{})",
                stream.peer(),
                self.info.name,
                self.info.size_bytes,
                if self.info.flags & proto::TFLAG_READ_ONLY != 0 {
                    ", read-only"
                } else {
                    ""
                }
            );
        }
        let inflight = Arc::new(InFlight {
            state: Mutex::new((0, 0)),
            changed: Condvar::new(),
        });
        // Replies go out from a thread of this connection, so a client that does not read its
        // replies stalls only itself: the workers hand replies over and go on serving others,
        // and this connection stops being read once its in-flight bound is reached (a request
        // counts until its reply is written).
        let (tx, rx) = mpsc::channel::<(Vec<u8>, Option<u64>)>();
        let mut out = stream.try_clone().map_err(|e| format!("socket: {e}"))?;
        let _ = out.set_write_timeout(Some(Duration::from_secs(120)));
        let done = Arc::clone(&inflight);
        // Set once a reply cannot be written (the client is gone): reads still queued for it
        // are not done (their replies would go nowhere), writes still are.
        let gone = Arc::new(AtomicBool::new(false));
        let gone_w = Arc::clone(&gone);
        let writer = std::thread::Builder::new()
            .name("nbd-reply".into())
            .spawn(move || {
                let mut broken = false;
                for (bytes, held) in rx {
                    if !broken && out.write_all(&bytes).is_err() {
                        // Gone, or not reading for two minutes: drop it.
                        broken = true;
                        gone_w.store(true, Ordering::Relaxed);
                        out.shutdown(Shutdown::Both);
                    }
                    if let Some(b) = held {
                        done.release(b);
                    }
                }
            })
            .map_err(|e| format!("thread: {e}"))?;
        let result = self.requests(&mut stream, &tx, &inflight, &neg, &gone);
        // Answer everything already read before the connection goes.
        inflight.wait_idle();
        drop(tx);
        let _ = writer.join();
        stream.shutdown(Shutdown::Both);
        result
    }

    fn requests(
        &self,
        stream: &mut Stream,
        replies: &mpsc::Sender<(Vec<u8>, Option<u64>)>,
        inflight: &Arc<InFlight>,
        neg: &Arc<proto::Negotiated>,
        gone: &Arc<AtomicBool>,
    ) -> Result<(), String> {
        loop {
            let mut h = [0u8; Request::BYTES];
            match read_full(stream, &mut h) {
                Ok(true) => {}
                Ok(false) => return Ok(()), // the client closed (or the server is stopping)
                Err(e) => return Err(format!("reading a request: {e}")),
            }
            let Some(req) = Request::parse(&h) else {
                self.violation();
                return Err("a request with a wrong magic number (hard disconnect)".into());
            };
            if req.kind == proto::CMD_DISC {
                return Ok(());
            }
            let mut payload = Vec::new();
            if req.kind == proto::CMD_WRITE {
                if req.length > proto::MAX_PAYLOAD_BYTES {
                    self.violation();
                    return Err(format!(
                        "a WRITE of {} bytes (the maximum payload is {}; hard disconnect)",
                        req.length,
                        proto::MAX_PAYLOAD_BYTES
                    ));
                }
                payload = vec![0u8; req.length as usize];
                match read_full(stream, &mut payload) {
                    Ok(true) => {}
                    Ok(false) => return Err("the client closed in the middle of a WRITE".into()),
                    Err(e) => return Err(format!("reading a WRITE payload: {e}")),
                }
            }
            if self.stopping.load(Ordering::Relaxed) {
                let reply = error_reply(
                    neg,
                    req.cookie,
                    proto::ESHUTDOWN,
                    "the server is shutting down",
                );
                let _ = replies.send((reply, None));
                continue;
            }
            let bytes = if req.kind == proto::CMD_READ || req.kind == proto::CMD_WRITE {
                u64::from(req.length)
            } else {
                0
            };
            inflight.acquire(
                bytes,
                self.config.max_inflight,
                self.config.max_inflight_bytes,
            );
            let export = Arc::clone(&self.export);
            let stats = Arc::clone(&self.stats);
            let replies = replies.clone();
            let info = Arc::clone(&self.info);
            let log = self.config.log;
            let neg = Arc::clone(neg);
            let gone = Arc::clone(gone);
            let read_at = std::time::Instant::now();
            self.pool.submit(Box::new(move || {
                let only_answers = matches!(
                    req.kind,
                    proto::CMD_READ | proto::CMD_CACHE | proto::CMD_BLOCK_STATUS
                );
                if only_answers && gone.load(Ordering::Relaxed) {
                    // Its reply would go nowhere: the request only ends its count.
                    let _ = replies.send((Vec::new(), Some(bytes)));
                    return;
                }
                let reply = execute(&*export, &info, &neg, &stats, req, &payload, log);
                drop(payload);
                let slot = match req.kind {
                    proto::CMD_READ => Some(0),
                    proto::CMD_WRITE => Some(1),
                    proto::CMD_FLUSH => Some(2),
                    proto::CMD_TRIM => Some(3),
                    proto::CMD_WRITE_ZEROES => Some(4),
                    _ => None,
                };
                if let Some(l) = slot {
                    stats.latency[l].record(read_at.elapsed());
                }
                // The connection's reply thread writes it and ends the request's count.
                let _ = replies.send((reply, Some(bytes)));
            }));
        }
    }

    fn violation(&self) {
        self.stats
            .protocol_violations
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Fill `buf`; `Ok(false)` on a clean end of stream before the first byte.
fn read_full(s: &mut Stream, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// An error reply: a structured error chunk with the message when structured replies were
/// negotiated (the protocol's preference: the client can show why), else a simple reply.
fn error_reply(neg: &proto::Negotiated, cookie: u64, errno: u32, message: &str) -> Vec<u8> {
    if neg.structured {
        proto::error_chunk(cookie, errno, message)
    } else {
        proto::simple_reply(errno, cookie).to_vec()
    }
}

/// Execute one request and return the whole reply (header, and data for a successful READ).
fn execute(
    export: &dyn Export,
    info: &ExportInfo,
    neg: &proto::Negotiated,
    stats: &Stats,
    req: Request,
    payload: &[u8],
    log: bool,
) -> Vec<u8> {
    let size = info.size_bytes;
    let read_only = info.flags & proto::TFLAG_READ_ONLY != 0;
    let end = req.offset.checked_add(u64::from(req.length));
    let in_range = end.is_some_and(|e| e <= size);
    // Flags the protocol allows on each command (FUA on all of them).
    let allowed = proto::CMD_FLAG_FUA
        | match req.kind {
            proto::CMD_WRITE_ZEROES => proto::CMD_FLAG_NO_HOLE | proto::CMD_FLAG_FAST_ZERO,
            proto::CMD_READ if neg.structured => proto::CMD_FLAG_DF,
            proto::CMD_BLOCK_STATUS => proto::CMD_FLAG_REQ_ONE,
            _ => 0,
        };
    let fua = req.flags & proto::CMD_FLAG_FUA != 0;
    let outcome: Result<Vec<u8>, ExportError> = if req.flags & !allowed != 0 {
        Err(errno(
            proto::EINVAL,
            &format!(
                "command flags {:#x} are not valid here",
                req.flags & !allowed
            ),
        ))
    } else {
        match req.kind {
            proto::CMD_READ => {
                if req.length > proto::MAX_PAYLOAD_BYTES {
                    // (With DF the protocol's word for "too long to send in one piece".)
                    let e = if req.flags & proto::CMD_FLAG_DF != 0 {
                        proto::EOVERFLOW
                    } else {
                        proto::EINVAL
                    };
                    Err(errno(e, "READ longer than the maximum payload (32 MiB)"))
                } else if !in_range {
                    Err(errno(proto::EINVAL, "READ beyond the end of the export"))
                } else if req.length == 0 && neg.structured {
                    // Nothing to cover: no content chunk (OFFSET_DATA needs a byte), just the
                    // final NONE.
                    Ok(proto::chunk_header(
                        proto::REPLY_FLAG_DONE,
                        proto::REPLY_TYPE_NONE,
                        req.cookie,
                        0,
                    )
                    .to_vec())
                } else if neg.structured
                    && req.flags & proto::CMD_FLAG_DF == 0
                    && export.is_hole(req.offset, u64::from(req.length))
                {
                    // All of it reads as zeros without a read (zero stripes): one final hole
                    // chunk, u64 offset and u32 length, instead of the zeros. (With DF the
                    // zeros are sent as data: one data chunk always holds.)
                    stats.reads.fetch_add(1, Ordering::Relaxed);
                    stats
                        .bytes_read
                        .fetch_add(u64::from(req.length), Ordering::Relaxed);
                    let mut r = proto::chunk_header(
                        proto::REPLY_FLAG_DONE,
                        proto::REPLY_TYPE_OFFSET_HOLE,
                        req.cookie,
                        12,
                    )
                    .to_vec();
                    r.extend_from_slice(&req.offset.to_be_bytes());
                    r.extend_from_slice(&req.length.to_be_bytes());
                    Ok(r)
                } else {
                    // One content chunk (so DF always holds), or the simple reply.
                    let head = if neg.structured { 28 } else { 16 };
                    let mut r = vec![0u8; head + req.length as usize];
                    export.read(req.offset, &mut r[head..]).map(|()| {
                        stats.reads.fetch_add(1, Ordering::Relaxed);
                        stats
                            .bytes_read
                            .fetch_add(u64::from(req.length), Ordering::Relaxed);
                        if neg.structured {
                            r[..20].copy_from_slice(&proto::chunk_header(
                                proto::REPLY_FLAG_DONE,
                                proto::REPLY_TYPE_OFFSET_DATA,
                                req.cookie,
                                8 + req.length,
                            ));
                            r[20..28].copy_from_slice(&req.offset.to_be_bytes());
                        } else {
                            r[..16].copy_from_slice(&proto::simple_reply(0, req.cookie));
                        }
                        r
                    })
                }
            }
            proto::CMD_WRITE => {
                if read_only {
                    Err(errno(proto::EPERM, "WRITE to a read-only export"))
                } else if !in_range {
                    Err(errno(proto::ENOSPC, "WRITE beyond the end of the export"))
                } else {
                    export
                        .write(req.offset, payload)
                        .and_then(|()| if fua { export.flush() } else { Ok(()) })
                        .map(|()| {
                            stats.writes.fetch_add(1, Ordering::Relaxed);
                            stats
                                .bytes_written
                                .fetch_add(u64::from(req.length), Ordering::Relaxed);
                            Vec::new()
                        })
                }
            }
            proto::CMD_FLUSH => export.flush().map(|()| {
                stats.flushes.fetch_add(1, Ordering::Relaxed);
                Vec::new()
            }),
            proto::CMD_TRIM | proto::CMD_WRITE_ZEROES => {
                let may_trim =
                    req.kind == proto::CMD_TRIM || req.flags & proto::CMD_FLAG_NO_HOLE == 0;
                if read_only {
                    Err(errno(
                        proto::EPERM,
                        "TRIM/WRITE_ZEROES on a read-only export",
                    ))
                } else if !in_range {
                    let e = if req.kind == proto::CMD_TRIM {
                        proto::EINVAL
                    } else {
                        proto::ENOSPC
                    };
                    Err(errno(e, "TRIM/WRITE_ZEROES beyond the end of the export"))
                } else if req.flags & proto::CMD_FLAG_FAST_ZERO != 0
                    && !export.fast_zero(req.offset, u64::from(req.length), may_trim)
                {
                    // Asked to fail rather than be as slow as a WRITE (qemu-img then skips its
                    // pre-zeroing pass).
                    Err(errno(
                        proto::ENOTSUP,
                        "zeroing this range would be as slow as writing it",
                    ))
                } else {
                    export
                        .write_zeroes(req.offset, u64::from(req.length), may_trim)
                        .and_then(|()| if fua { export.flush() } else { Ok(()) })
                        .map(|()| {
                            stats.zeroes.fetch_add(1, Ordering::Relaxed);
                            Vec::new()
                        })
                }
            }
            proto::CMD_CACHE => {
                if !in_range {
                    Err(errno(proto::EINVAL, "CACHE beyond the end of the export"))
                } else {
                    // Read and verified now, so the reads that follow find the stripes checked
                    // and their appendices cached; the bytes are not sent.
                    let mut buf = vec![0u8; (1usize << 20).min(req.length as usize)];
                    let mut at = req.offset;
                    let end = req.offset + u64::from(req.length);
                    let mut r = Ok(());
                    while at < end && r.is_ok() {
                        let n = usize::try_from(end - at).map_or(buf.len(), |n| n.min(buf.len()));
                        r = export.read(at, &mut buf[..n]);
                        at += n as u64;
                    }
                    r.map(|()| Vec::new())
                }
            }
            proto::CMD_BLOCK_STATUS => {
                if !neg.structured || neg.contexts.is_empty() {
                    Err(errno(
                        proto::EINVAL,
                        "BLOCK_STATUS without a meta context selected",
                    ))
                } else if req.length == 0 || !in_range {
                    Err(errno(
                        proto::EINVAL,
                        "BLOCK_STATUS of nothing, or beyond the end of the export",
                    ))
                } else {
                    block_status(export, info, neg, req)
                }
            }
            _ => Err(errno(proto::EINVAL, "unknown command")),
        }
    };
    match outcome {
        Ok(r) if r.is_empty() => proto::simple_reply(0, req.cookie).to_vec(),
        Ok(r) => r,
        Err(e) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            if log && stats.may_log() {
                eprintln!(
                    "stripeguard serve: {} of {} bytes at {} failed, answered errno {}: {}",
                    command_name(req.kind),
                    req.length,
                    req.offset,
                    e.errno,
                    e.message
                );
            }
            // A READ is never answered with a simple reply once structured replies are on.
            error_reply(neg, req.cookie, e.errno, &e.message)
        }
    }
}

/// A BLOCK_STATUS reply: one chunk per selected context, the last one final. Extents come
/// from the export, cut to what a descriptor holds (whole minimum blocks under 4 GiB) and to
/// 2^20 per chunk; with REQ_ONE, one extent no longer than the request.
fn block_status(
    export: &dyn Export,
    info: &ExportInfo,
    neg: &proto::Negotiated,
    req: Request,
) -> Result<Vec<u8>, ExportError> {
    let max = u32::MAX / info.min_block.max(1) * info.min_block.max(1);
    let mut out = Vec::new();
    for (i, (id, name)) in neg.contexts.iter().enumerate() {
        let extents = export.block_status(name, req.offset, u64::from(req.length))?;
        let mut desc: Vec<(u32, u32)> = Vec::new();
        for (mut len, flags) in extents {
            while len > 0 && desc.len() < 1 << 20 {
                let n = u32::try_from(len).map_or(max, |l| l.min(max));
                desc.push((n, flags));
                len -= u64::from(n);
            }
        }
        if req.flags & proto::CMD_FLAG_REQ_ONE != 0 {
            desc.truncate(1);
        }
        if desc.is_empty() {
            return Err(errno(proto::EIO, "the export reported no extent"));
        }
        let done = i + 1 == neg.contexts.len();
        out.extend(proto::block_status_chunk(req.cookie, done, *id, &desc));
    }
    Ok(out)
}

fn errno(errno: u32, message: &str) -> ExportError {
    ExportError {
        errno,
        message: message.to_string(),
    }
}

fn command_name(kind: u16) -> String {
    match kind {
        proto::CMD_READ => "READ".into(),
        proto::CMD_WRITE => "WRITE".into(),
        proto::CMD_FLUSH => "FLUSH".into(),
        proto::CMD_TRIM => "TRIM".into(),
        proto::CMD_WRITE_ZEROES => "WRITE_ZEROES".into(),
        proto::CMD_CACHE => "CACHE".into(),
        proto::CMD_BLOCK_STATUS => "BLOCK_STATUS".into(),
        k => format!("command {k}"),
    }
}
