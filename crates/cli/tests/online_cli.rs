//! Scrub and check online (issue 35 §3, §4): `scrub`, `scrub --check-only` and `status --check`
//! on an array `serve` holds ask the holder, which scrubs while it goes on serving (fio's verify
//! job running through it the while), logs every event as a line on stderr and a syslog message
//! (to a fake `/dev/log`: this machine has none), and saves its position when it stops, so the
//! next scrub resumes. On the landed main before this, each of these was refused while `serve`
//! held the array.

mod common;
#[macro_use]
mod nbd_common;

use common::{err_of, ok, sg};
use nbd_common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn with<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MEMBERS);
    v.extend(extra);
    v
}

/// `serve` on the array in `dir`, its syslog going to `syslog` when given.
fn serve(dir: &Path, syslog: Option<&Path>) -> Served {
    let sock = dir.join("sg.sock");
    let stderr = dir.join("serve.err");
    let mut c = Command::new(env!("CARGO_BIN_EXE_stripeguard"));
    c.args(with("serve", &["--socket"]))
        .arg(&sock)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap());
    if let Some(s) = syslog {
        c.env("STRIPEGUARD_SYSLOG_SOCKET", s);
    }
    let child = c.spawn().expect("start the server");
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        child,
        uri: format!("nbd+unix:///stripeguard?socket={}", sock.display()),
        stderr,
    }
}

/// Flip a byte of data unit `unit` of `member` (FORMAT.md §2: data area at 128 KiB for members
/// under 256 MiB; a unit is a 64 KiB chunk and its 512-byte appendix).
fn flip(dir: &Path, member: &str, unit: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(member))
        .unwrap();
    let at = 128 * 1024 + unit * (64 * 1024 + 512) + 777;
    let mut b = [0u8; 1];
    f.read_at(&mut b, at).unwrap();
    b[0] ^= 0x21;
    f.write_at(&b, at).unwrap();
}

/// fio's write bandwidth from its report ("WRITE: bw=12.3MiB/s ..."), for the log.
fn write_bw(out: &str) -> String {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("WRITE: bw="))
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_else(|| "?".into())
}

#[test]
fn an_online_scrub_repairs_while_fio_verifies_and_every_event_is_logged() {
    need!("fio");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "48M");
    // Damage far past what fio writes (its jobs cover the first 24 MiB): only the scrub meets it.
    // Those stripes get data first: a zero stripe's units are never read (FORMAT.md §2.7).
    std::fs::write(d.join("B"), vec![0x5au8; 6 * 64 * 1024]).unwrap();
    for stripe in [200u64, 230] {
        let at = (stripe * 6 * 64 * 1024).to_string();
        ok(&sg(&with("write", &["-i", "B", "--offset", &at]), d));
    }
    flip(d, "m2", 200);
    flip(d, "m5", 230);
    let log = d.join("log.sock");
    let syslog = std::os::unix::net::UnixDatagram::bind(&log).unwrap();
    syslog.set_nonblocking(true).unwrap();
    let s = serve(d, Some(&log));

    let alone = run(fio_job(&s.uri, false).current_dir(d));
    let alone_bw = write_bw(&String::from_utf8_lossy(&alone.stdout));

    let scrub = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with("scrub", &["--json"]))
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let during = fio_job(&s.uri, false)
        .arg("--randseed=7")
        .current_dir(d)
        .output()
        .unwrap();
    assert!(
        during.status.success(),
        "fio verify failed while the holder scrubbed:\n{}",
        String::from_utf8_lossy(&during.stdout)
    );
    let during_bw = write_bw(&String::from_utf8_lossy(&during.stdout));
    let scrubbed = scrub.wait_with_output().unwrap();
    eprintln!(
        "fio 4 KiB random write + verify: {alone_bw} alone, {during_bw} with the online scrub"
    );
    let v: serde_json::Value = serde_json::from_slice(&scrubbed.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&scrubbed.stderr)));
    assert_eq!(scrubbed.status.code(), Some(1), "found and repaired: {v}");
    assert_eq!(v["via_holder"], true, "{v}");
    assert!(v["scrub"]["repaired"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(v["scrub"]["unrecoverable"], 0, "{v}");

    // A check now finds nothing; status --check asks the holder too.
    // (Exit 1: the holder has found damage in its lifetime, the two units repaired above.)
    let st = sg(&with("status", &["--check"]), d);
    assert_eq!(st.status.code(), Some(1), "{}", err_of(&st));
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(
        text.contains("check (by the holder, while serving): checked")
            && text.contains("while serving: 0 unit(s) found wrong"),
        "{text}"
    );

    let (status, _, err) = s.stop();
    assert!(status.code().is_some_and(|c| c <= 1), "{err}");
    assert!(
        err.contains("stripeguard serve: scrub-finished: scrub of stripes 0 to"),
        "{err}"
    );
    assert!(err.contains("[repaired]"), "{err}");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = syslog.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    // Facility daemon: warning (28) for a repair, notice (29) for the scrub's state changes.
    assert!(
        got.iter()
            .any(|m| m.starts_with("<28>stripeguard-serve[") && m.contains("[repaired]")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|m| m.starts_with("<29>stripeguard-serve[") && m.contains("scrub-started")),
        "{got:?}"
    );
    // The durable log has them too.
    let ev: Vec<serde_json::Value> =
        serde_json::from_str(&ok(&sg(&with("events", &["--json"]), d))).unwrap();
    for kind in ["scrub-started", "scrub-finished"] {
        assert!(ev.iter().any(|e| e["kind"] == kind), "{kind} not logged");
    }
}

#[test]
fn a_scrub_stopped_with_its_holder_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "48M");
    // Data to read: a zero stripe (FORMAT.md §2.7) costs the rate nothing.
    std::fs::write(d.join("A"), vec![0x5au8; 32 << 20]).unwrap();
    ok(&sg(&with("write", &["-i", "A"]), d));
    let s = serve(d, None);
    // Slow enough to be stopped midway: 4 MB/s of member reads.
    let scrub = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with("scrub", &["--rate", "4"]))
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
    let out = scrub.wait_with_output().unwrap();
    assert!(!out.status.success(), "the scrub cannot have finished");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("interrupted at stripe") || text.contains("the holder stopped"),
        "{text}"
    );
    let st = ok_or(&sg(&with("status", &[]), d));
    assert!(st.contains("scrub interrupted at stripe"), "{st}");
    let again = ok_or(&sg(&with("scrub", &[]), d));
    let at: u64 = again
        .lines()
        .find_map(|l| l.strip_prefix("resumed an interrupted scrub at stripe "))
        .unwrap_or_else(|| panic!("{again}"))
        .trim()
        .parse()
        .unwrap();
    assert!(at > 0, "{again}");
}

/// The standard output of a run that exited 0 or 1 (a state worth attention is not a failure).
fn ok_or(out: &std::process::Output) -> String {
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", err_of(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
