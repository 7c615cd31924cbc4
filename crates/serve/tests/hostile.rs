//! The server against clients that break the protocol: random and truncated bytes in the
//! handshake and in transmission, huge lengths, requests past the end, unknown commands and
//! flags. Every one gets the protocol's error or a closed connection; none panics the server;
//! and a well-behaved client connected at the same time is served throughout.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use proptest::prelude::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stripeguard_nbd::proto::{self, Request};
use stripeguard_serve::{Export, ExportError, Listener, Server, ServerConfig};

const SIZE: u64 = 1 << 20;

/// A memory image; offsets at or past `bad_from` fail as an unrecoverable stripe would.
struct Mem {
    bytes: Mutex<Vec<u8>>,
    bad_from: u64,
}

impl Export for Mem {
    fn size_bytes(&self) -> u64 {
        SIZE
    }
    fn writable(&self) -> bool {
        true
    }
    fn block_sizes(&self) -> (u32, u32) {
        (512, 4096)
    }
    fn description(&self) -> String {
        "memory".into()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        if offset + buf.len() as u64 > self.bad_from {
            return Err(ExportError {
                errno: proto::EIO,
                message: "unrecoverable".into(),
            });
        }
        let b = self.bytes.lock().unwrap();
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        let mut b = self.bytes.lock().unwrap();
        b[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, _: bool) -> Result<(), ExportError> {
        let mut b = self.bytes.lock().unwrap();
        b[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

struct Running {
    path: PathBuf,
    stats: Arc<stripeguard_serve::Stats>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the server thread panicked");
        }
    }
}

/// Panics anywhere in the process (a worker or connection thread of the server included).
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn start(bad_from: u64) -> Running {
    start_with(bad_from, 64)
}

fn start_with(bad_from: u64, max_connections: usize) -> Running {
    start_config(bad_from, max_connections, Duration::from_secs(30))
}

fn start_config(bad_from: u64, max_connections: usize, handshake: Duration) -> Running {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::Relaxed);
            default(info);
        }));
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = Listener::Unix(
        std::os::unix::net::UnixListener::bind(&path).unwrap(),
        path.clone(),
    );
    let export = Arc::new(Mem {
        bytes: Mutex::new(vec![0u8; SIZE as usize]),
        bad_from,
    });
    let server = Server::new(
        export,
        ServerConfig {
            export_name: "e".into(),
            log: false,
            max_connections,
            handshake_timeout: handshake,
            ..ServerConfig::default()
        },
    );
    let stats = server.stats();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    // Stopping is hurried at once: these tests stop with clients connected.
    let thread = std::thread::spawn(move || server.run(listener, &s2, &s2).unwrap());
    Running {
        path,
        stats,
        stop,
        thread: Some(thread),
        _dir: dir,
    }
}

fn connect(path: &PathBuf) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).unwrap();
    b
}

/// Send an option and return (reply type, data) of its one reply.
fn option(s: &mut UnixStream, opt: u32, data: &[u8]) -> (u32, Vec<u8>) {
    let mut m = proto::IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    s.write_all(&m).unwrap();
    read_reply(s, opt)
}

fn read_reply(s: &mut UnixStream, opt: u32) -> (u32, Vec<u8>) {
    let h = read_n(s, 20);
    assert_eq!(proto::be64(&h[0..8]), proto::REPLY_MAGIC);
    assert_eq!(proto::be32(&h[8..12]), opt);
    let len = proto::be32(&h[16..20]) as usize;
    (proto::be32(&h[12..16]), read_n(s, len))
}

/// A client through GO, ready for transmission.
fn go(path: &PathBuf) -> UnixStream {
    let mut s = hello(path);
    send_go(&mut s);
    s
}

/// A client past the greeting, in option haggling.
fn hello(path: &PathBuf) -> UnixStream {
    let mut s = connect(path);
    let hello = read_n(&mut s, 18);
    assert_eq!(&hello[0..8], b"NBDMAGIC");
    assert_eq!(&hello[8..16], b"IHAVEOPT");
    s.write_all(&(proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES).to_be_bytes())
        .unwrap();
    s
}

fn send_go(s: &mut UnixStream) {
    let mut d = 1u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"e");
    d.extend_from_slice(&0u16.to_be_bytes());
    let mut m = proto::IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&proto::OPT_GO.to_be_bytes());
    m.extend_from_slice(&(d.len() as u32).to_be_bytes());
    m.extend_from_slice(&d);
    s.write_all(&m).unwrap();
    loop {
        let (kind, _) = read_reply(s, proto::OPT_GO);
        if kind == proto::REP_ACK {
            return;
        }
        assert_eq!(kind, proto::REP_INFO);
    }
}

/// The next structured reply chunk: (flags, type, cookie, payload).
fn chunk(s: &mut UnixStream) -> (u16, u16, u64, Vec<u8>) {
    let h = read_n(s, 20);
    assert_eq!(proto::be32(&h[0..4]), proto::STRUCTURED_REPLY_MAGIC);
    let len = proto::be32(&h[16..20]) as usize;
    (
        proto::be16(&h[4..6]),
        proto::be16(&h[6..8]),
        proto::be64(&h[8..16]),
        read_n(s, len),
    )
}

/// A meta-context option's data: export name and queries.
fn meta(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// (reply type, context id, name) of every reply to a meta-context option, its ACK last.
fn meta_replies(s: &mut UnixStream, opt: u32, data: &[u8]) -> Vec<(u32, u32, String)> {
    let (mut kind, mut d) = option(s, opt, data);
    let mut out = Vec::new();
    loop {
        let (id, name) = if kind == proto::REP_META_CONTEXT {
            (
                proto::be32(&d[0..4]),
                String::from_utf8_lossy(&d[4..]).into_owned(),
            )
        } else {
            (0, String::from_utf8_lossy(&d).into_owned())
        };
        out.push((kind, id, name));
        if kind != proto::REP_META_CONTEXT {
            return out;
        }
        (kind, d) = read_reply(s, opt);
    }
}

fn request(s: &mut UnixStream, kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) {
    let r = Request {
        flags,
        kind,
        cookie,
        offset,
        length,
    };
    s.write_all(&r.encode()).unwrap();
}

/// (error, cookie) of the next simple reply.
fn reply(s: &mut UnixStream) -> (u32, u64) {
    let h = read_n(s, 16);
    assert_eq!(proto::be32(&h[0..4]), proto::SIMPLE_REPLY_MAGIC);
    (proto::be32(&h[4..8]), proto::be64(&h[8..16]))
}

/// A full write-then-read round trip on a good connection.
fn round_trip(s: &mut UnixStream, at: u64, fill: u8) {
    let data = vec![fill; 4096];
    request(s, proto::CMD_WRITE, 0, 7, at, 4096);
    s.write_all(&data).unwrap();
    assert_eq!(reply(s), (0, 7));
    request(s, proto::CMD_READ, 0, 8, at, 4096);
    assert_eq!(reply(s), (0, 8));
    assert_eq!(read_n(s, 4096), data);
}

#[test]
fn options_get_the_protocols_answers() {
    let r = start(SIZE);
    let mut s = connect(&r.path);
    read_n(&mut s, 18);
    s.write_all(&proto::CLIENT_FIXED_NEWSTYLE.to_be_bytes())
        .unwrap();
    assert_eq!(option(&mut s, 99, b"").0, proto::REP_ERR_UNSUP);
    assert_eq!(
        option(&mut s, proto::OPT_STARTTLS, b"").0,
        proto::REP_ERR_POLICY
    );
    assert_eq!(
        option(&mut s, proto::OPT_LIST, b"x").0,
        proto::REP_ERR_INVALID
    );
    let (kind, data) = option(&mut s, proto::OPT_LIST, b"");
    assert_eq!(kind, proto::REP_SERVER);
    assert_eq!(&data[4..], b"e");
    assert_eq!(read_reply(&mut s, proto::OPT_LIST).0, proto::REP_ACK);
    // INFO for a name that is not the export; then a malformed INFO.
    let mut d = 3u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"nop");
    d.extend_from_slice(&0u16.to_be_bytes());
    assert_eq!(
        option(&mut s, proto::OPT_INFO, &d).0,
        proto::REP_ERR_UNKNOWN
    );
    assert_eq!(
        option(&mut s, proto::OPT_INFO, &[0, 0, 0, 9, 1]).0,
        proto::REP_ERR_INVALID
    );
    assert_eq!(option(&mut s, proto::OPT_ABORT, b"").0, proto::REP_ACK);
}

/// Structured replies (FORMAT.md §4): negotiated, every READ is one OFFSET_DATA chunk and every
/// error a chunk with its message; meta contexts are listed and selected as the protocol says,
/// and BLOCK_STATUS answers one chunk per selected context, the last one final.
#[test]
fn structured_replies_meta_contexts_and_block_status() {
    let r = start(SIZE / 2);
    // SET before STRUCTURED_REPLY is refused; LIST is answered.
    let mut s = hello(&r.path);
    let set = meta("e", &[proto::CONTEXT_ALLOCATION]);
    assert_eq!(
        meta_replies(&mut s, proto::OPT_SET_META_CONTEXT, &set)[0].0,
        proto::REP_ERR_INVALID
    );
    assert_eq!(
        option(&mut s, proto::OPT_STRUCTURED_REPLY, b"x").0,
        proto::REP_ERR_INVALID
    );
    assert_eq!(
        option(&mut s, proto::OPT_STRUCTURED_REPLY, b"").0,
        proto::REP_ACK
    );
    let every = meta_replies(&mut s, proto::OPT_LIST_META_CONTEXT, &meta("", &[]));
    assert_eq!(
        every,
        [
            (proto::REP_META_CONTEXT, 0, proto::CONTEXT_ALLOCATION.into()),
            (proto::REP_META_CONTEXT, 0, proto::CONTEXT_INTEGRITY.into()),
            (proto::REP_ACK, 0, String::new()),
        ]
    );
    let base = meta_replies(&mut s, proto::OPT_LIST_META_CONTEXT, &meta("e", &["base:"]));
    assert_eq!(base.len(), 2, "{base:?}");
    assert_eq!(base[0].2, proto::CONTEXT_ALLOCATION);
    // Another export's name; a malformed request; unknown queries are ignored.
    let other = meta_replies(
        &mut s,
        proto::OPT_SET_META_CONTEXT,
        &meta("nop", &["base:allocation"]),
    );
    assert_eq!(other[0].0, proto::REP_ERR_UNKNOWN);
    let mut bad = meta("e", &["base:allocation"]);
    bad[8] = 9;
    assert_eq!(
        meta_replies(&mut s, proto::OPT_SET_META_CONTEXT, &bad)[0].0,
        proto::REP_ERR_INVALID
    );
    let both = meta_replies(
        &mut s,
        proto::OPT_SET_META_CONTEXT,
        &meta(
            "e",
            &[
                "x-foo:bar",
                proto::CONTEXT_INTEGRITY,
                "base:",
                proto::CONTEXT_ALLOCATION,
            ],
        ),
    );
    assert_eq!(both.len(), 3, "{both:?}");
    let ids: Vec<u32> = both[..2].iter().map(|b| b.1).collect();
    assert!(ids.iter().all(|&i| i != 0) && ids[0] != ids[1], "{both:?}");
    send_go(&mut s);

    // A READ: one final OFFSET_DATA chunk at the request's offset.
    round_trip_structured(&mut s, 8192, 0x3C);
    // Errors are chunks with a message: an unrecoverable READ, a huge READ (EINVAL, and
    // EOVERFLOW with DF), an unknown command.
    request(&mut s, proto::CMD_READ, 0, 21, SIZE / 2, 4096);
    let (flags, kind, cookie, p) = chunk(&mut s);
    assert_eq!(
        (flags, kind, cookie),
        (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_ERROR, 21)
    );
    assert_eq!(proto::be32(&p[0..4]), proto::EIO);
    let msg_len = proto::be16(&p[4..6]) as usize;
    assert_eq!(&p[6..6 + msg_len], b"unrecoverable");
    request(&mut s, proto::CMD_READ, 0, 22, 0, u32::MAX);
    assert_eq!(proto::be32(&chunk(&mut s).3[0..4]), proto::EINVAL);
    request(&mut s, proto::CMD_READ, proto::CMD_FLAG_DF, 23, 0, u32::MAX);
    assert_eq!(proto::be32(&chunk(&mut s).3[0..4]), proto::EOVERFLOW);
    request(&mut s, proto::CMD_READ, proto::CMD_FLAG_DF, 24, 0, 4096);
    let (_, kind, _, p) = chunk(&mut s);
    assert_eq!((kind, p.len()), (proto::REPLY_TYPE_OFFSET_DATA, 8 + 4096));
    // BLOCK_STATUS: a chunk per context, the final one last; REQ_ONE: one extent, no longer
    // than asked; past the end: EINVAL.
    request(&mut s, proto::CMD_BLOCK_STATUS, 0, 25, 4096, 65536);
    let mut seen = Vec::new();
    loop {
        let (flags, kind, cookie, p) = chunk(&mut s);
        assert_eq!((kind, cookie), (proto::REPLY_TYPE_BLOCK_STATUS, 25));
        let id = proto::be32(&p[0..4]);
        let extents: Vec<(u32, u32)> = p[4..]
            .chunks_exact(8)
            .map(|e| (proto::be32(&e[0..4]), proto::be32(&e[4..8])))
            .collect();
        assert_eq!(extents, [(65536, 0)]);
        seen.push(id);
        if flags & proto::REPLY_FLAG_DONE != 0 {
            break;
        }
    }
    seen.sort_unstable();
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(seen, want);
    request(
        &mut s,
        proto::CMD_BLOCK_STATUS,
        proto::CMD_FLAG_REQ_ONE,
        26,
        0,
        512,
    );
    for _ in 0..2 {
        let p = chunk(&mut s).3;
        assert_eq!(p.len(), 12);
        assert_eq!(proto::be32(&p[4..8]), 512);
    }
    request(&mut s, proto::CMD_BLOCK_STATUS, 0, 27, SIZE - 512, 4096);
    assert_eq!(proto::be32(&chunk(&mut s).3[0..4]), proto::EINVAL);
    // CACHE reads (and is answered simply); FAST_ZERO fails fast with ENOTSUP and zeroes
    // nothing; a plain WRITE_ZEROES zeroes.
    request(&mut s, proto::CMD_CACHE, 0, 28, 0, 65536);
    assert_eq!(reply(&mut s), (0, 28));
    request(
        &mut s,
        proto::CMD_WRITE_ZEROES,
        proto::CMD_FLAG_FAST_ZERO,
        29,
        8192,
        4096,
    );
    assert_eq!(proto::be32(&chunk(&mut s).3[0..4]), proto::ENOTSUP);
    request(&mut s, proto::CMD_READ, 0, 30, 8192, 4096);
    assert_eq!(chunk(&mut s).3[8..], [0x3C; 4096]);
    assert_eq!(r.stats.protocol_violations.load(Ordering::Relaxed), 0);

    // Without structured replies: no DF, no BLOCK_STATUS.
    let mut plain = go(&r.path);
    request(&mut plain, proto::CMD_READ, proto::CMD_FLAG_DF, 31, 0, 512);
    assert_eq!(reply(&mut plain), (proto::EINVAL, 31));
    request(&mut plain, proto::CMD_BLOCK_STATUS, 0, 32, 0, 512);
    assert_eq!(reply(&mut plain), (proto::EINVAL, 32));
    round_trip(&mut plain, 0, 0x11);
}

/// A write and a read back with structured replies on.
fn round_trip_structured(s: &mut UnixStream, at: u64, fill: u8) {
    request(s, proto::CMD_WRITE, 0, 19, at, 4096);
    s.write_all(&[fill; 4096]).unwrap();
    assert_eq!(reply(s), (0, 19));
    request(s, proto::CMD_READ, 0, 20, at, 4096);
    let (flags, kind, cookie, p) = chunk(s);
    assert_eq!(
        (flags, kind, cookie),
        (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_OFFSET_DATA, 20)
    );
    assert_eq!(proto::be64(&p[0..8]), at);
    assert_eq!(p[8..], [fill; 4096]);
}

/// The edge cases where this server differed from qemu-nbd and nbdkit (issue 37 §5): a long
/// option is answered ERR_INVALID and the haggling goes on; an export name with a NUL is
/// ERR_INVALID; a client that leaves mid-handshake is no protocol violation; a full server
/// says why it refuses.
#[test]
fn edge_cases_answer_as_the_reference_servers_do() {
    let r = start_with(SIZE, 1);
    let mut s = hello(&r.path);
    let (kind, msg) = option(&mut s, proto::OPT_INFO, &vec![0u8; 20_000]);
    assert_eq!(kind, proto::REP_ERR_INVALID);
    assert!(String::from_utf8_lossy(&msg).contains("20000 bytes"));
    let mut d = 3u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"e\0x");
    d.extend_from_slice(&0u16.to_be_bytes());
    assert_eq!(option(&mut s, proto::OPT_GO, &d).0, proto::REP_ERR_INVALID);
    // Gone in the middle of an option.
    let mut m = proto::IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&proto::OPT_GO.to_be_bytes());
    m.extend_from_slice(&100u32.to_be_bytes());
    s.write_all(&m).unwrap();
    drop(s);
    // The one slot is free again once the server has seen it go; then a second client finds
    // the server full and is told so.
    let held = loop {
        let mut s = hello(&r.path);
        let mut d = 1u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"e");
        d.extend_from_slice(&0u16.to_be_bytes());
        let (kind, _) = option(&mut s, proto::OPT_INFO, &d);
        if kind == proto::REP_INFO {
            while read_reply(&mut s, proto::OPT_INFO).0 != proto::REP_ACK {}
            send_go(&mut s);
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut full = hello(&r.path);
    let (kind, msg) = option(&mut full, proto::OPT_LIST, b"");
    assert_eq!(kind, proto::REP_ERR_POLICY);
    assert!(String::from_utf8_lossy(&msg).contains("full"), "{msg:?}");
    assert_eq!(option(&mut full, proto::OPT_ABORT, b"").0, proto::REP_ACK);
    drop(held);
    // A client that asks and closes without reading the answer just leaves, too.
    for _ in 0..3 {
        let mut s = hello(&r.path);
        let mut m = proto::IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&proto::OPT_LIST.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        s.write_all(&m).unwrap();
        drop(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.stats.protocol_violations.load(Ordering::Relaxed), 0);
}

/// The handshake has one deadline for all of it: a client that trickles an option a byte at a
/// time (each read well within the read timeout) is cut off when it passes, and a READ of
/// nothing with structured replies on is one final NONE chunk (OFFSET_DATA needs a byte).
#[test]
fn a_trickled_handshake_meets_its_deadline_and_an_empty_read_is_none() {
    let r = start_config(SIZE, 64, Duration::from_secs(1));
    let mut s = hello(&r.path);
    let t = std::time::Instant::now();
    let mut m = proto::IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&proto::OPT_LIST.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    let mut cut = false;
    for b in m.iter().cycle().take(200) {
        if s.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut probe = [0u8; 1];
        s.set_nonblocking(true).unwrap();
        let r = s.read(&mut probe);
        s.set_nonblocking(false).unwrap();
        if matches!(r, Ok(0)) {
            cut = true;
            break;
        }
    }
    assert!(cut, "a trickling client was never cut off");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    let mut s = hello(&r.path);
    assert_eq!(
        option(&mut s, proto::OPT_STRUCTURED_REPLY, b"").0,
        proto::REP_ACK
    );
    send_go(&mut s);
    request(&mut s, proto::CMD_READ, 0, 41, 0, 0);
    let (flags, kind, cookie, p) = chunk(&mut s);
    assert_eq!(
        (flags, kind, cookie, p.len()),
        (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_NONE, 41, 0)
    );
    round_trip_structured(&mut s, 0, 0x22);
}

#[test]
fn bad_requests_get_errors_and_the_connection_goes_on() {
    let r = start(SIZE / 2);
    let mut s = go(&r.path);
    // Past the end: READ is EINVAL, WRITE ENOSPC (its payload is consumed), TRIM EINVAL,
    // WRITE_ZEROES ENOSPC; an offset whose end overflows u64 likewise.
    request(&mut s, proto::CMD_READ, 0, 1, SIZE - 100, 4096);
    assert_eq!(reply(&mut s), (proto::EINVAL, 1));
    request(&mut s, proto::CMD_WRITE, 0, 2, SIZE, 512);
    s.write_all(&[0xAB; 512]).unwrap();
    assert_eq!(reply(&mut s), (proto::ENOSPC, 2));
    request(&mut s, proto::CMD_TRIM, 0, 3, u64::MAX - 10, 4096);
    assert_eq!(reply(&mut s), (proto::EINVAL, 3));
    request(&mut s, proto::CMD_WRITE_ZEROES, 0, 4, SIZE, 1);
    assert_eq!(reply(&mut s), (proto::ENOSPC, 4));
    // Unknown command, unknown flag, a flag not valid on the command, a huge READ.
    request(&mut s, 77, 0, 5, 0, 0);
    assert_eq!(reply(&mut s), (proto::EINVAL, 5));
    request(&mut s, proto::CMD_READ, 1 << 9, 6, 0, 512);
    assert_eq!(reply(&mut s), (proto::EINVAL, 6));
    request(&mut s, proto::CMD_READ, proto::CMD_FLAG_NO_HOLE, 7, 0, 512);
    assert_eq!(reply(&mut s), (proto::EINVAL, 7));
    // (EINVAL, as the protocol says without DF: not EOVERFLOW, which it keeps for DF.)
    request(&mut s, proto::CMD_READ, 0, 8, 0, u32::MAX);
    assert_eq!(reply(&mut s), (proto::EINVAL, 8));
    // An unrecoverable region is EIO for that request only.
    request(&mut s, proto::CMD_READ, 0, 9, SIZE / 2, 4096);
    assert_eq!(reply(&mut s), (proto::EIO, 9));
    round_trip(&mut s, 4096, 0x5A);
    // WRITE_ZEROES then READ: zeros.
    request(
        &mut s,
        proto::CMD_WRITE_ZEROES,
        proto::CMD_FLAG_FUA,
        10,
        4096,
        4096,
    );
    assert_eq!(reply(&mut s), (0, 10));
    request(&mut s, proto::CMD_READ, 0, 11, 4096, 4096);
    assert_eq!(reply(&mut s), (0, 11));
    assert_eq!(read_n(&mut s, 4096), vec![0u8; 4096]);
    // A WRITE over the maximum payload is a hard disconnect.
    request(
        &mut s,
        proto::CMD_WRITE,
        0,
        12,
        0,
        proto::MAX_PAYLOAD_BYTES + 1,
    );
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap_or(0), 0, "the connection is closed");
}

#[test]
fn many_requests_in_flight_are_all_answered_by_cookie() {
    let r = start(SIZE);
    let mut s = go(&r.path);
    let n = 200u64;
    for i in 0..n {
        request(&mut s, proto::CMD_WRITE, 0, 1000 + i, i * 4096 % SIZE, 4096);
        s.write_all(&[i as u8; 4096]).unwrap();
    }
    let mut seen: Vec<u64> = (0..n)
        .map(|_| reply(&mut s))
        .map(|(e, c)| {
            assert_eq!(e, 0);
            c
        })
        .collect();
    seen.sort();
    assert_eq!(seen, (1000..1000 + n).collect::<Vec<_>>());
    request(&mut s, proto::CMD_FLUSH, 0, 1, 0, 0);
    assert_eq!(reply(&mut s), (0, 1));
    request(&mut s, proto::CMD_DISC, 0, 2, 0, 0);
}

/// Feed `bytes` to a fresh connection (after `prefix`), then close; the server must not die.
fn feed(path: &PathBuf, prefix: &[u8], bytes: &[u8]) {
    let Ok(mut s) = UnixStream::connect(path) else {
        return;
    };
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let _ = s.write_all(prefix);
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
}

fn go_prefix() -> Vec<u8> {
    let mut m = (proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    let mut d = 0u32.to_be_bytes().to_vec();
    d.extend_from_slice(&0u16.to_be_bytes());
    m.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&proto::OPT_GO.to_be_bytes());
    m.extend_from_slice(&(d.len() as u32).to_be_bytes());
    m.extend_from_slice(&d);
    m
}

/// Requests built from random fields (mostly valid magic), possibly truncated.
fn arb_requests() -> impl Strategy<Value = Vec<u8>> {
    let one = (
        any::<bool>(),
        0u16..10,
        any::<u16>(),
        prop_oneof![0u64..SIZE * 2, any::<u64>()],
        prop_oneof![0u32..70_000, any::<u32>()],
        0usize..600,
    )
        .prop_map(|(good_magic, kind, flags, offset, length, extra)| {
            let mut b = Request {
                flags: flags & 0x3f,
                kind,
                cookie: 9,
                offset,
                length,
            }
            .encode()
            .to_vec();
            if !good_magic {
                b[0] ^= 0x40;
            }
            b.extend(std::iter::repeat_n(0x11u8, extra));
            b
        });
    (prop::collection::vec(one, 0..6), any::<usize>()).prop_map(|(v, cut)| {
        let all: Vec<u8> = v.concat();
        let keep = if all.is_empty() {
            0
        } else {
            cut % (all.len() + 1)
        };
        all[..keep].to_vec()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn random_handshakes_and_requests_never_hurt_the_server(
        raw in prop::collection::vec(any::<u8>(), 0..200),
        reqs in arb_requests(),
    ) {
        let r = start(SIZE);
        let mut good = go(&r.path);
        feed(&r.path, b"", &raw);
        feed(&r.path, &go_prefix(), &reqs);
        // The well-behaved client, connected all along, is still served.
        round_trip(&mut good, 8192, 0xC3);
        prop_assert_eq!(PANICS.load(Ordering::Relaxed), 0, "a server thread panicked");
    }
}

/// A client that pipelines 400 reads of 512 KiB and never reads the replies: far more reply
/// bytes than the socket buffers hold, from every worker at once. The requests are written from
/// a thread of their own, because the server rightly stops reading them once the connection's
/// in-flight bound is reached, and whether the rest fit in the socket's send buffer depends on
/// the kernel (on CI's they did not, and the test itself blocked until the reply timeout).
fn flood(greedy: UnixStream) -> UnixStream {
    let mut w = greedy.try_clone().unwrap();
    std::thread::spawn(move || {
        for i in 0..400u64 {
            let r = Request {
                flags: 0,
                kind: proto::CMD_READ,
                cookie: i,
                offset: 0,
                length: 512 * 1024,
            };
            if w.write_all(&r.encode()).is_err() {
                return; // the server closed the connection: that is its right
            }
        }
    });
    greedy
}

/// A client that pipelines reads and never reads the replies stalls only itself: a client
/// connected beside it is served all along.
#[test]
fn a_client_that_does_not_read_its_replies_stalls_only_itself() {
    let r = start(SIZE);
    let greedy = flood(go(&r.path));
    std::thread::sleep(Duration::from_millis(300));
    let mut good = go(&r.path);
    for i in 0..20 {
        round_trip(&mut good, 4096 * i, i as u8);
    }
    let _ = greedy.shutdown(std::net::Shutdown::Both);
    assert_eq!(PANICS.load(Ordering::Relaxed), 0);
}

/// Stopping the server (SIGTERM) while a client is not reading its replies: the stop completes
/// after the grace period instead of waiting for the reply timeout (outside attack: it never
/// completed).
#[test]
fn a_stop_completes_while_a_client_is_not_reading_its_replies() {
    let mut r = start(SIZE);
    let greedy = flood(go(&r.path));
    std::thread::sleep(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    r.stop.store(true, Ordering::Relaxed);
    let t = r.thread.take().unwrap();
    while !t.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the server did not stop with a client holding its replies"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.join().unwrap();
    let _ = greedy.shutdown(std::net::Shutdown::Both);
    assert_eq!(PANICS.load(Ordering::Relaxed), 0);
}
