//! From an outside attack on the holder's control socket and online scrub (issue 35): a slow
//! online scrub does not keep `serve` from stopping; a peer that trickles bytes without a
//! newline does not hold the other clients of the control socket nor the stop; an unknown
//! request gets valid JSON; a user who may only read the members can still look at them.

mod common;

use common::{err_of, ok, sg};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MS: [&str; 4] = ["m0", "m1", "m2", "m3"];

fn with<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MS);
    v.extend(extra);
    v
}

struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(d: &Path) -> Serving {
    let sock = d.join("s.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with("serve", &["--socket"]))
        .arg(&sock)
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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
    Serving(child)
}

/// SIGTERM, and whether it exited within `limit` (its status then).
fn term_within(s: &mut Serving, limit: Duration) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill")
        .args(["-TERM", &s.0.id().to_string()])
        .status();
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(st) = s.0.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn array() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(&sg(
        &with("create", &["--size", "8M", "--chunk", "4K"]),
        dir.path(),
    ));
    dir
}

/// The holder's control socket: the one `stripeguard` names in /run/stripeguard or the
/// temporary directory (FORMAT.md §3), found by the array's uuid.
fn control_socket(d: &Path) -> PathBuf {
    let st = ok(&sg(&with("status", &["--json"]), d));
    let uuid = serde_json::from_str::<serde_json::Value>(&st).unwrap()["live"]["pid"].clone();
    assert!(uuid.is_number(), "{st}");
    let x: serde_json::Value =
        serde_json::from_str(&ok(&sg(&["examine", "m0", "--json"], d))).unwrap();
    let name = format!("stripeguard-{}.sock", x[0]["array_uuid"].as_str().unwrap());
    [PathBuf::from("/run/stripeguard"), std::env::temp_dir()]
        .into_iter()
        .map(|dir| dir.join(&name))
        .find(|p| p.exists())
        .expect("the control socket")
}

#[test]
fn a_slow_online_scrub_does_not_keep_serve_from_stopping() {
    let dir = array();
    let d = dir.path();
    // Stripes with data to read: a zero stripe (FORMAT.md §2.7) costs the rate nothing.
    std::fs::write(d.join("A"), vec![0x5au8; 1 << 20]).unwrap();
    ok(&sg(&with("write", &["-i", "A"]), d));
    let mut s = serve(d);
    let scrub = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with("scrub", &["--rate", "0.001"]))
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _scrub = Serving(scrub);
    std::thread::sleep(Duration::from_millis(1500));
    let st = term_within(&mut s, Duration::from_secs(20)).expect("serve hung behind the scrub");
    assert!(st.success());
    let text = ok(&sg(&with("status", &[]), d));
    assert!(text.contains("scrub interrupted at stripe"), "{text}");
}

#[test]
fn a_trickling_peer_holds_neither_status_nor_the_stop() {
    let dir = array();
    let d = dir.path();
    let mut s = serve(d);
    let sock = control_socket(d);
    // One byte every 300 ms, never a newline, for as long as the test runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let Ok(mut c) = UnixStream::connect(&sock) else {
                return;
            };
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if c.write_all(b"s").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    ok(&sg(&with("status", &["--no-wait"]), d));
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "status waited {:?}",
        t.elapsed()
    );
    let st =
        term_within(&mut s, Duration::from_secs(20)).expect("the trickling peer held the stop");
    assert!(st.success());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = trickle.join();
}

#[test]
fn an_unknown_request_gets_valid_json() {
    let dir = array();
    let d = dir.path();
    let _s = serve(d);
    let sock = control_socket(d);
    for req in [&b"garbage \"quoted\"\n"[..], b"\n", b"stop --forcex\n"] {
        let mut c = UnixStream::connect(&sock).unwrap();
        c.write_all(req).unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(reply.trim()).unwrap_or_else(|e| panic!("{e}: {reply:?}"));
        assert!(v["error"].is_string(), "{v}");
    }
}

#[test]
fn a_user_who_may_only_read_the_members_can_look() {
    if !rustix::process::geteuid().is_root() || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIP: needs root and setpriv to run as another user");
        return;
    }
    let dir = array();
    let d = dir.path();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for m in MS {
        std::fs::set_permissions(d.join(m), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_stripeguard"))
            .args(args)
            .current_dir(d)
            .output()
            .unwrap()
    };
    for cmd in [
        with("status", &[]),
        with("events", &[]),
        vec!["examine", "m0"],
    ] {
        let out = as_nobody(&cmd);
        assert!(out.status.success(), "{cmd:?}: {}", err_of(&out));
    }
}
