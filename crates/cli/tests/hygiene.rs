//! Bad input and misleading output, as a new user met them (issue 17 §1): each case failed on
//! the code before its fix.

mod common;

use common::{err_of, ok, sg};
use std::path::Path;
use std::process::Command;

fn create(d: &Path, names: &[&str], extra: &[&str]) {
    let mut args = vec!["create"];
    args.extend(names);
    args.extend(["--size", "300K", "--chunk", "4K"]);
    args.extend(extra);
    ok(&sg(&args, d));
}

fn cmd<'a>(verb: &'a str, names: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![verb];
    args.extend(names);
    args.extend(extra);
    args
}

#[test]
fn numbers_are_checked_with_the_users_own_number() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = sg(
        &[
            "create",
            "a",
            "b",
            "c",
            "--size",
            "1M",
            "--sector",
            "4294967808",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(err_of(&out).contains("4294967808"), "{}", err_of(&out));
    assert!(!d.join("a").exists());
    let ms = ["m0", "m1", "m2"];
    create(d, &ms, &[]);
    let out = sg(&cmd("read", &ms, &["--length", "18446744073709551615"]), d);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "streamed bytes before failing");
    assert!(
        err_of(&out).contains("18446744073709551615"),
        "{}",
        err_of(&out)
    );
    let out = sg(
        &cmd(
            "read",
            &ms,
            &["--offset", "18446744073709551615", "--length", "2"],
        ),
        d,
    );
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
    // Decimal sizes, as the paper's Table III writes them.
    ok(&sg(&["choose", "--avg-write", "7.04K"], d));
    let out = sg(&["create", "x", "y", "--size", "0.3K"], d);
    assert!(err_of(&out).contains("whole number"), "{}", err_of(&out));
}

#[test]
fn assembly_names_the_foreign_and_the_missing_member_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3", "m4", "m5"];
    let os = ["o0", "o1", "o2", "o3", "o4", "o5"];
    create(d, &ms, &[]);
    create(d, &os, &[]);
    // Five of one array and one of another: the foreign one is named.
    let out = sg(&["status", "m0", "m1", "o2", "m3", "m4"], d);
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert!(e.contains("o2 belongs to another array"), "{e}");
    // A missing member: its path once.
    std::fs::remove_file(d.join("m5")).unwrap();
    let out = sg(&cmd("status", &ms, &[]), d);
    let all = format!("{}{}", err_of(&out), String::from_utf8_lossy(&out.stdout));
    let line = all.lines().find(|l| l.contains("m5")).unwrap_or_default();
    assert_eq!(line.matches("m5").count(), 1, "{all}");
}

#[test]
fn status_says_what_the_check_found() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create(d, &ms, &["--scheme", "hybrid1"]);
    // Stripes 0..=3 hold data (a zero stripe's units are never read, FORMAT.md §2.7).
    std::fs::write(d.join("A"), vec![0x5au8; 4 * 8192]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "A"]), d));
    let out = sg(
        &cmd("inject", &["m1"], &["--fault", "bit-rot", "--chunk", "3"]),
        d,
    );
    let first = ok(&out);
    let second = ok(&sg(
        &cmd("inject", &["m1"], &["--fault", "bit-rot", "--chunk", "3"]),
        d,
    ));
    // A fresh seed each time: the second flip does not undo the first.
    let seed = |s: &str| s.rsplit("seed ").next().unwrap().to_string();
    assert_ne!(seed(&first), seed(&second), "{first} {second}");
    let out = sg(&cmd("status", &ms, &["--check"]), d);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let state = text.lines().find(|l| l.contains("state:")).unwrap();
    assert!(state.contains("DAMAGED"), "{text}");
}

#[test]
fn a_failed_read_leaves_no_output_file_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create(d, &ms, &["--scheme", "hybrid1"]);
    std::fs::write(d.join("in"), vec![9u8; 100_000]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "in"]), d));
    // Two units of stripe 2 overwritten: beyond RAID-5's one.
    for m in ["m0", "m1"] {
        ok(&sg(
            &cmd("inject", &[m], &["--fault", "overwrite", "--chunk", "2"]),
            d,
        ));
    }
    let out = sg(&cmd("read", &ms, &["--length", "100000", "-o", "back"]), d);
    assert_eq!(out.status.code(), Some(3), "{}", err_of(&out));
    assert!(!d.join("back").exists(), "a failed read left a file");
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");
    let out = sg(
        &cmd(
            "read",
            &ms,
            &["--length", "100000", "-o", "back", "--keep-partial"],
        ),
        d,
    );
    assert_eq!(out.status.code(), Some(3));
    let kept = std::fs::read(d.join("back")).unwrap();
    assert_eq!(
        kept.len(),
        2 * 2 * 4096,
        "the two stripes before the bad one"
    );
    assert!(kept.iter().all(|&b| b == 9));
}

#[test]
fn demo_dir_keeps_the_members_and_figures_fail_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["demo", "--dir", "kept"], d));
    let cases = std::fs::read_dir(d.join("kept")).unwrap().count();
    assert!(cases >= 45, "{cases} case directories kept");
    assert!(d.join("kept/hybrid1-bit-rot/member0.img").exists());
    let out = sg(
        &["sim", "--figure", "tau", "--out", "/nonexistent/x.png"],
        d,
    );
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("/nonexistent/x.png") && !e.contains("Os {"),
        "{e}"
    );
    let help = ok(&sg(&["--help"], d));
    assert!(!help.contains("transfer"), "{help}");
    assert!(help.contains("Exit status"), "{help}");
}

#[test]
fn a_second_writer_is_refused_naming_the_first() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create(d, &ms, &[]);
    // The first writer holds the array while its standard input stays open.
    let mut first = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("write", &ms, &[]))
        .current_dir(d)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id().to_string();
    // Wait until the first holds its locks (a second writer started earlier would take the
    // array first and the first would be the one refused).
    let locked = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split_whitespace().nth(4) == Some(pid.as_str()))
            .count()
            >= ms.len()
    });
    assert!(locked, "the first writer never took its locks");
    let out = sg(&cmd("write", &ms, &["-i", "/dev/null"]), d);
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert!(e.contains("in use by process") && e.contains(&pid), "{e}");
    assert!(e.contains("stripeguard write"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    // status does not take the array from its holder: the holder answers it, live.
    let live = ok(&sg(&cmd("status", &ms, &[]), d));
    assert!(live.contains(&format!("in use by process {pid}")), "{live}");
    assert!(live.contains("live:"), "{live}");
    // Readers repair what they find, so they are writers too; injecting needs a stopped array.
    assert_eq!(
        sg(&cmd("read", &ms, &["--length", "1"]), d).status.code(),
        Some(2)
    );
    let inj = sg(&cmd("inject", &["m1"], &["--fault", "bit-rot"]), d);
    assert!(err_of(&inj).contains("in use"), "{}", err_of(&inj));
    first.stdin.take().unwrap().write_all(&[1u8; 5000]).unwrap();
    let done = first.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    // Released at exit: the next writer gets the array.
    ok(&sg(&cmd("write", &ms, &["-i", "/dev/null"]), d));
}

#[test]
fn an_interrupted_scrub_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    let mut args = vec!["create"];
    args.extend(ms);
    args.extend(["--size", "8M", "--chunk", "4K"]);
    ok(&sg(&args, d));
    // Data in (nearly) every stripe: a zero stripe (FORMAT.md §2.7) costs the rate nothing.
    std::fs::write(d.join("A"), vec![0x5au8; 20_000_000]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "A"]), d));
    // A slow scrub (2 MB/s over ~33 MB of units), killed (-9) after it wrote a checkpoint.
    let mut slow = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("scrub", &ms, &["--rate", "2"]))
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first checkpoint record (FORMAT.md §2.3: two slots at byte 12288).
    let written = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = std::fs::read(d.join("m0")).unwrap();
        b[12288..12296] == *b"SGCHKPT\0" || b[14336..14344] == *b"SGCHKPT\0"
    });
    assert!(written, "no checkpoint within 20 s");
    slow.kill().unwrap();
    slow.wait().unwrap();
    let interrupted = ok(&sg(&cmd("status", &ms, &[]), d));
    let scan = interrupted.lines().find(|l| l.contains("scan:")).unwrap();
    assert!(scan.contains("interrupted at stripe"), "{interrupted}");
    let at: u64 = scan
        .split("stripe ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(at > 0, "{scan}");
    let resumed = ok(&sg(&cmd("scrub", &ms, &[]), d));
    assert!(
        resumed.contains(&format!("resumed an interrupted scrub at stripe {at}")),
        "{resumed}"
    );
    let after = ok(&sg(&cmd("status", &ms, &[]), d));
    assert!(after.contains("scrub finished"), "{after}");
    // --restart starts over.
    let again = ok(&sg(&cmd("scrub", &ms, &["--restart"]), d));
    assert!(!again.contains("resumed"), "{again}");
}

#[test]
fn replace_rebuilds_a_stale_member_and_refuses_what_it_should() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    create(d, &ms, &["--scheme", "hybrid1"]);
    std::fs::write(d.join("a"), vec![1u8; 200_000]).unwrap();
    std::fs::write(d.join("b"), vec![2u8; 200_000]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "a"]), d));
    std::fs::rename(d.join("m2"), d.join("m2.away")).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "b"]), d));
    std::fs::rename(d.join("m2.away"), d.join("m2")).unwrap();
    // Healthy members stay unless forced; a device too small is refused; nothing changes.
    let out = sg(&cmd("replace", &ms, &["--member", "1", "--with", "n1"]), d);
    assert_eq!(out.status.code(), Some(2));
    assert!(err_of(&out).contains("healthy"), "{}", err_of(&out));
    std::fs::write(d.join("tiny"), vec![0u8; 4096]).unwrap();
    let out = sg(
        &cmd("replace", &ms, &["--member", "2", "--with", "tiny"]),
        d,
    );
    assert!(err_of(&out).contains("too small"), "{}", err_of(&out));
    // The stale member is rebuilt onto a new file; the array is whole again.
    let out = ok(&sg(
        &cmd("replace", &ms, &["--member", "2", "--with", "n2"]),
        d,
    ));
    assert!(out.contains("rebuilt member 2"), "{out}");
    let now = ["m0", "m1", "n2", "m3"];
    let st = sg(&cmd("status", &now, &["--check"]), d);
    assert_eq!(
        st.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    let back = sg(&cmd("read", &now, &["--length", "200000"]), d);
    assert!(back.stdout.iter().all(|&x| x == 2));
}

#[test]
fn events_survive_the_process_and_drive_an_exec_hook() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    create(d, &ms, &[]);
    std::fs::write(d.join("a"), vec![5u8; 200_000]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "a"]), d));
    assert!(ok(&sg(&cmd("events", &ms, &[]), d)).contains("0 event(s)"));
    ok(&sg(
        &cmd("inject", &["m1"], &["--fault", "bit-rot", "--chunk", "4"]),
        d,
    ));
    assert_eq!(sg(&cmd("scrub", &ms, &[]), d).status.code(), Some(1));
    // A later process reads what the scrub found, with its evidence, from the members.
    let out = ok(&sg(&cmd("events", &ms, &["--json"]), d));
    let all: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ev = all
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "repaired")
        .unwrap();
    assert_eq!(ev["kind"], "checksum", "{out}");
    assert_eq!(ev["stripe"], 4);
    assert_eq!(ev["member"], 1);
    assert_eq!(ev["action"], "repaired");
    let hook = ok(&sg(
        &cmd(
            "events",
            &ms,
            &[
                "--since",
                "1h",
                "--exec",
                "echo hook:$SG_EVENT_KIND:$SG_EVENT_MEMBER",
            ],
        ),
        d,
    ));
    assert!(hook.contains("hook:checksum:1"), "{hook}");
    let status = ok(&sg(&cmd("status", &ms, &[]), d));
    let row = status.lines().find(|l| l.contains("member   1")).unwrap();
    assert!(row.split_whitespace().any(|w| w == "1"), "{status}");
}

#[test]
fn a_version_1_member_is_refused_by_name_and_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A version-1 superblock (FORMAT.md before version 2: 512 bytes at 0 and 4096).
    let mut b = vec![0u8; 1 << 20];
    b[0..8].copy_from_slice(b"SGARRAY\0");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&512u32.to_le_bytes());
    for m in ["v0", "v1", "v2"] {
        std::fs::write(d.join(m), &b).unwrap();
    }
    let out = sg(&["status", "v0", "v1", "v2"], d);
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert!(e.contains("version 1") && e.contains("recreate"), "{e}");
    let out = sg(&["create", "v0", "v1", "v2"], d);
    assert!(err_of(&out).contains("--force"), "{}", err_of(&out));
}

#[test]
fn without_local_locks_the_owner_record_refuses_a_second_process() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create(d, &ms, &[]);
    // As on a filesystem whose locks do not cross hosts: only the owner record guards.
    let mut first = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("write", &ms, &[]))
        .current_dir(d)
        .env("STRIPEGUARD_NO_LOCAL_LOCKS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = first.id().to_string();
    // Wait for its owner record (FORMAT.md §2.2: slots at 8192 and 10240, pid at +28).
    let held = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = std::fs::read(d.join("m0")).unwrap();
        [8192usize, 10240].iter().any(|&s| {
            b[s..s + 8] == *b"SGOWNER\0"
                && b[s + 24] == 1
                && u32::from_le_bytes(b[s + 28..s + 32].try_into().unwrap()).to_string() == pid
        })
    });
    assert!(held, "the first writer never wrote its owner record");
    let out = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("write", &ms, &["-i", "/dev/null"]))
        .current_dir(d)
        .env("STRIPEGUARD_NO_LOCAL_LOCKS", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert!(
        e.contains(&format!("in use by process {pid}")) && e.contains("owner record"),
        "{e}"
    );
    first.stdin.take().unwrap().write_all(&[3u8; 1000]).unwrap();
    assert!(first.wait().unwrap().success());
    // Closed cleanly: free for the next.
    let out = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("write", &ms, &["-i", "/dev/null"]))
        .current_dir(d)
        .env("STRIPEGUARD_NO_LOCAL_LOCKS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err_of(&out));
}

/// The same member given twice is named as such (it used to say "in use by another process":
/// the command's own second lock).
#[test]
fn a_member_given_twice_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, &["m0", "m1", "m2"], &[]);
    for args in [
        cmd("status", &["m0", "m1", "./m1"], &[]),
        cmd("create", &["n0", "n1", "n1"], &["--size", "4M"]),
    ] {
        let out = sg(&args, d);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            err_of(&out).contains("are the same file or device"),
            "{}",
            err_of(&out)
        );
    }
    assert!(!d.join("n0").exists() && !d.join("n1").exists());
}

/// Outside attack: after `replace` put a new device into a slot, the device it superseded,
/// given back, was taken as current (its event count looked fine) and bare RAID returned its
/// old bytes. Its older device number now marks it superseded: out of the array, named.
#[test]
fn a_device_a_replace_superseded_is_not_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    create(d, &ms, &["--scheme", "none"]);
    std::fs::write(d.join("a"), vec![1u8; 60_000]).unwrap();
    std::fs::write(d.join("b"), vec![2u8; 60_000]).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "a"]), d));
    std::fs::rename(d.join("m1"), d.join("m1.gone")).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "b"]), d));
    ok(&sg(
        &cmd("replace", &ms, &["--member", "1", "--with", "m1new"]),
        d,
    ));
    std::fs::rename(d.join("m1.gone"), d.join("m1")).unwrap();
    let out = sg(&cmd("read", &ms, &["--length", "60000", "-o", "back"]), d);
    ok(&out);
    assert!(err_of(&out).contains("superseded"), "{}", err_of(&out));
    assert_eq!(std::fs::read(d.join("back")).unwrap(), vec![2u8; 60_000]);
}
