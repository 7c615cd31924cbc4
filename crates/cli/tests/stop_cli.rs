//! `serve` stops under its clients only when told to (issue 35 §5): SIGTERM stops accepting,
//! says who is connected and serves them until they leave (`--stop-timeout`, default 60 s); a
//! second SIGTERM skips the wait; `stripeguard stop` refuses while clients are connected unless
//! `--force`. Every way ends with the array closed clean. On the landed main before this,
//! SIGTERM cut connected clients off at once (an ext4 journal's last writes were lost when the
//! teardown ran slightly out of order).

mod common;

use common::{err_of, ok, sg};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MS: [&str; 4] = ["m0", "m1", "m2", "m3"];

struct Serving {
    child: Child,
    sock: PathBuf,
    err: PathBuf,
}

impl Serving {
    fn start(d: &Path, extra: &[&str]) -> Serving {
        let sock = d.join("s.sock");
        let err = d.join("serve.err");
        let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .arg("serve")
            .args(MS)
            .arg("--socket")
            .arg(&sock)
            .args(extra)
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "serve did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Serving { child, sock, err }
    }
    fn term(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
    /// Wait for it to exit within `limit`; its status.
    fn exited(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
    /// Wait until its stderr says `what`.
    fn says(&self, what: &str) {
        let t = Instant::now();
        while !self.stderr().contains(what) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "never said {what:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn array() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["create"];
    args.extend(MS);
    args.extend(["--size", "4M", "--chunk", "4K"]);
    ok(&sg(&args, dir.path()));
    dir
}

#[test]
fn sigterm_serves_the_connected_clients_until_they_leave() {
    let dir = array();
    let mut s = Serving::start(dir.path(), &[]);
    let client = UnixStream::connect(&s.sock).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.term();
    s.says("1 client(s) still connected (unix socket peer (pid ");
    // Still serving the one connected; a new client is refused.
    assert!(
        s.exited(Duration::from_millis(1500)).is_none(),
        "stopped under its client"
    );
    assert!(
        UnixStream::connect(&s.sock).is_err(),
        "a new client was let in while stopping"
    );
    drop(client);
    let status = s
        .exited(Duration::from_secs(20))
        .expect("did not stop once the client left");
    assert!(status.success(), "{}", s.stderr());
    assert!(s.stderr().contains("closed clean"), "{}", s.stderr());
}

#[test]
fn a_second_sigterm_and_the_stop_timeout_end_the_wait_still_clean() {
    let dir = array();
    let mut s = Serving::start(dir.path(), &[]);
    let _client = UnixStream::connect(&s.sock).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.term();
    s.says("still connected");
    s.term();
    let status = s
        .exited(Duration::from_secs(20))
        .expect("a second SIGTERM did not stop it");
    assert!(status.success(), "{}", s.stderr());
    assert!(s
        .stderr()
        .contains("stopping now with 1 client(s) still connected (asked again)"));
    assert!(s.stderr().contains("closed clean"), "{}", s.stderr());
    drop(s);

    let mut s = Serving::start(dir.path(), &["--stop-timeout", "1"]);
    let _client = UnixStream::connect(&s.sock).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.term();
    let status = s
        .exited(Duration::from_secs(20))
        .expect("--stop-timeout did not end the wait");
    assert!(status.success(), "{}", s.stderr());
    assert!(
        s.stderr().contains("(--stop-timeout passed)"),
        "{}",
        s.stderr()
    );
}

#[test]
fn stop_refuses_while_clients_are_connected_unless_forced() {
    let dir = array();
    let d = dir.path();
    let mut s = Serving::start(d, &[]);
    let client = UnixStream::connect(&s.sock).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut stop = vec!["stop"];
    stop.extend(MS);
    let out = sg(&stop, d);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err_of(&out).contains("1 client(s) connected"),
        "{}",
        err_of(&out)
    );
    assert!(s.exited(Duration::from_millis(300)).is_none());
    stop.push("--force");
    ok(&sg(&stop, d));
    let status = s
        .exited(Duration::from_secs(20))
        .expect("stop --force did not stop it");
    assert!(status.success(), "{}", s.stderr());
    drop(client);
    // Nobody connected: a plain stop stops it.
    let mut s = Serving::start(d, &[]);
    stop.pop();
    ok(&sg(&stop, d));
    assert!(s
        .exited(Duration::from_secs(20))
        .is_some_and(|st| st.success()));
    let mut status = vec!["status"];
    status.extend(MS);
    assert!(ok(&sg(&status, d)).contains("state: clean"));
}

/// From an outside attack: a client still in its handshake when the stop begins is refused with
/// NBD_REP_ERR_SHUTDOWN (FORMAT.md §4), not let in while the server drains.
#[test]
fn a_handshake_that_ends_during_the_stop_is_refused() {
    use std::io::{Read, Write};
    let dir = array();
    let mut s = Serving::start(dir.path(), &[]);
    let mut c = UnixStream::connect(&s.sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut greeting = [0u8; 18];
    c.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    c.write_all(&3u32.to_be_bytes()).unwrap(); // FIXED_NEWSTYLE | NO_ZEROES
    s.term();
    s.says("still connected");
    // NBD_OPT_GO for the default export, no info requests.
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes());
    opt.extend_from_slice(&6u32.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    opt.extend_from_slice(&0u16.to_be_bytes());
    c.write_all(&opt).unwrap();
    let mut reply = [0u8; 20];
    c.read_exact(&mut reply).unwrap();
    let kind = u32::from_be_bytes(reply[12..16].try_into().unwrap());
    assert_eq!(kind, (1 << 31) + 7, "not NBD_REP_ERR_SHUTDOWN: {reply:?}");
    drop(c);
    let status = s
        .exited(Duration::from_secs(20))
        .expect("did not stop once the client left");
    assert!(status.success(), "{}", s.stderr());
}
