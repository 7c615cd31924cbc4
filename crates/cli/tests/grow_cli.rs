//! `stripeguard grow` (issue 38 §1, FORMAT.md §2 "Growing the array"): members extended (or
//! replaced by bigger ones), the array grows here or in the process serving it while fio
//! verifies through it; NBD clients see the new size when they connect again, a connected one
//! keeps the size it was given; refusals name what is wrong.

mod common;
#[macro_use]
mod nbd_common;

use common::{err_of, ok, sg};
use nbd_common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn with<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MEMBERS);
    v.extend(extra);
    v
}

fn extend(dir: &Path, size: u64) {
    for m in MEMBERS {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(m))
            .unwrap();
        f.set_len(size).unwrap();
    }
}

fn capacity(dir: &Path) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&sg(&with("status", &["--json"]), dir))).unwrap();
    v["capacity_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no capacity_bytes in {v}"))
}

#[test]
fn grow_keeps_the_data_reads_the_new_stripes_as_zeros_and_refuses_what_it_cannot_do() {
    for zero_stripes in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut args = with(
            "create",
            &["--size", "24M", "--scheme", "hybrid-seq", "--chunk", "64K"],
        );
        if !zero_stripes {
            args.push("--no-zero-stripes");
        }
        ok(&sg(&args, d));
        let before = capacity(d);
        let data: Vec<u8> = (0..before)
            .map(|i| ((i * 7 + i / 4096) % 251).to_le_bytes()[0])
            .collect();
        std::fs::write(d.join("data"), &data).unwrap();
        ok(&sg(&with("write", &["-i", "data"]), d));
        // Nothing to grow yet: said, not an error.
        let same = ok(&sg(&with("grow", &[]), d));
        assert!(same.contains("nothing to grow"), "{same}");
        // A member with no room names itself.
        extend(d, 48 << 20);
        std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("m5"))
            .unwrap()
            .set_len(24 << 20)
            .unwrap();
        let e = sg(&with("grow", &["--size", "200M"]), d);
        assert_eq!(e.status.code(), Some(2));
        assert!(err_of(&e).contains("m5 holds 25165824"), "{}", err_of(&e));
        extend(d, 48 << 20);
        let e = sg(&with("grow", &["--size", "1M"]), d);
        assert_eq!(e.status.code(), Some(2));
        assert!(err_of(&e).contains("does not shrink"), "{}", err_of(&e));

        let grown = ok(&sg(&with("grow", &["--json"]), d));
        let v: serde_json::Value = serde_json::from_str(&grown).unwrap();
        assert_eq!(v["as_zero_stripes"], zero_stripes, "{v}");
        let after = capacity(d);
        assert!(after > 2 * before - (6 << 20), "{before} -> {after}");
        assert_eq!(v["capacity_bytes"], after, "{v}");
        let out = sg(&with("read", &[]), d);
        ok(&out);
        let all = out.stdout;
        assert_eq!(all.len() as u64, after);
        assert!(all[..data.len()] == data[..], "the data changed");
        assert!(
            all[data.len()..].iter().all(|&b| b == 0),
            "the new stripes do not read as zeros"
        );
        let scrub = sg(&with("scrub", &[]), d);
        assert_eq!(scrub.status.code(), Some(0), "{}", ok(&scrub));
        let events = ok(&sg(&with("events", &[]), d));
        assert!(events.contains("grown — grown from"), "{events}");

        // A member out: refused, naming it, and nothing written (back, it is current).
        std::fs::rename(d.join("m3"), d.join("m3.away")).unwrap();
        extend_but(d, 64 << 20, "m3");
        let e = sg(&with("grow", &[]), d);
        assert_eq!(e.status.code(), Some(2));
        assert!(err_of(&e).contains("member 3 (m3)"), "{}", err_of(&e));
        std::fs::rename(d.join("m3.away"), d.join("m3")).unwrap();
        let st = sg(&with("status", &[]), d);
        assert_eq!(st.status.code(), Some(0), "{}", ok(&st));
    }
}

fn extend_but(dir: &Path, size: u64, skip: &str) {
    for m in MEMBERS.iter().filter(|&&m| m != skip) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(m))
            .unwrap()
            .set_len(size)
            .unwrap();
    }
}

#[test]
fn a_served_array_grows_while_fio_verifies_and_clients_see_it_when_they_reconnect() {
    need!("fio", "nbdinfo");
    if !have_libnbd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "48M");
    let s = serve_with(d, &MEMBERS);
    let size = |uri: &str| -> u64 {
        let out = run(Command::new("nbdinfo").args(["--size", uri]));
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let before = size(&s.uri);
    // A client connected before the grow: it keeps the size it was given, and its writes and
    // reads go on.
    let script = r#"
import nbd, sys, time
h = nbd.NBD(); h.connect_uri(sys.argv[1])
print(h.get_size(), flush=True)
sys.stdin.readline()
h.pwrite(b"\x42" * 4096, 4096); assert h.pread(4096, 4096) == b"\x42" * 4096
print(h.get_size(), flush=True)
"#;
    let mut early = Command::new(python())
        .args(["-c", script, &s.uri])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut early_out = std::io::BufReader::new(early.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut early_out, &mut line).unwrap();
    assert_eq!(line.trim().parse::<u64>().unwrap(), before);

    extend(d, 96 << 20);
    let fio = fio_job(&s.uri, false)
        .current_dir(d)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let grow = sg(&with("grow", &[]), d);
    let fio = fio.wait_with_output().unwrap();
    assert!(
        fio.status.success(),
        "fio verify failed across the grow:\n{}",
        String::from_utf8_lossy(&fio.stdout)
    );
    let said = ok(&grow);
    assert!(
        said.contains("grown from") && said.contains("when they connect again"),
        "{said}"
    );
    let after = size(&s.uri);
    assert!(after > before + (200 << 20), "{before} -> {after}");
    {
        use std::io::Write;
        writeln!(early.stdin.take().unwrap()).unwrap();
    }
    line.clear();
    std::io::BufRead::read_line(&mut early_out, &mut line).unwrap();
    assert_eq!(
        line.trim().parse::<u64>().unwrap(),
        before,
        "a connected client keeps its size"
    );
    assert!(early.wait().unwrap().success());

    // A new client writes past the old end and reads it back; so does the array offline.
    let tail = r#"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
at = int(sys.argv[2])
assert h.pread(65536, at) == bytes(65536)
h.pwrite(b"\x5a" * 65536, at); h.flush()
assert h.pread(65536, at) == b"\x5a" * 65536
"#;
    let at = (after - (1 << 20)).to_string();
    run(Command::new(python()).args(["-c", tail, &s.uri, &at]));
    let (status, _, stderr) = s.stop();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("grown: grown from"), "{stderr}");
    let out = sg(&with("read", &["--offset", &at, "--length", "65536"]), d);
    ok(&out);
    assert!(out.stdout.iter().all(|&b| b == 0x5a));
}
