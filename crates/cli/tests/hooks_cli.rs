//! Event hooks an operator can rely on (issue 35 §4): `events --exec` runs for new events only
//! unless asked (`--from-start`, `--since`), a `--cursor FILE` carries its position across
//! restarts (events logged while the watcher was down run once, none run twice), the hook sees
//! the array's uuid, the member's path and the JSON's action names, and `events --json` is one
//! JSON array (`[]` when empty). On the landed main before this, a restarted watcher reran the
//! hook for every old event and the hook saw `RebuiltDegraded`-style names.

mod common;

use common::{err_of, ok, sg};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MS: [&str; 4] = ["m0", "m1", "m2", "m3"];

fn args<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MS);
    v.extend(extra);
    v
}

/// Rot one unit of member 1 and scrub: one more `repaired` event in the log.
fn one_event(d: &Path, chunk: &str) {
    ok(&sg(
        &["inject", "m1", "--fault", "bit-rot", "--chunk", chunk],
        d,
    ));
    assert_eq!(sg(&args("scrub", &[]), d).status.code(), Some(1));
}

const HOOK: &str = "echo hook:$SG_EVENT_NUMBER:$SG_EVENT_ACTION:$SG_MEMBER_PATH:$SG_ARRAY_UUID";

/// The hook's lines for repairs (each scrub also logs its start and end, FORMAT.md §2.5).
fn hooks(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("hook:") && l.contains(":repaired:"))
        .collect()
}

/// Every line the hook printed.
fn all_hooks(out: &str) -> usize {
    out.lines().filter(|l| l.starts_with("hook:")).count()
}

#[test]
fn hooks_run_for_new_events_once_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut create = args("create", &["--size", "300K", "--chunk", "4K"]);
    create.truncate(5);
    create.extend(["--size", "300K", "--chunk", "4K"]);
    ok(&sg(&create, d));
    std::fs::write(d.join("a"), vec![5u8; 200_000]).unwrap();
    ok(&sg(&args("write", &["-i", "a"]), d));
    // An empty log is an empty JSON array.
    assert_eq!(ok(&sg(&args("events", &["--json"]), d)).trim(), "[]");
    one_event(d, "4");
    // scrub-started, the repair, scrub-finished.
    let all: serde_json::Value =
        serde_json::from_str(&ok(&sg(&args("events", &["--json"]), d))).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    assert_eq!(all[1]["action"], "repaired", "{all}");
    let uuid = ok(&sg(&args("status", &["--json"]), d));
    let uuid = serde_json::from_str::<serde_json::Value>(&uuid).unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();

    // Started after the event: not new, no hook (it used to run for every old event).
    let out = ok(&sg(&args("events", &["--exec", HOOK]), d));
    assert_eq!(all_hooks(&out), 0, "{out}");
    // Asked for: the old ones too, with the JSON's action name, the member's path, the uuid.
    let out = ok(&sg(&args("events", &["--exec", HOOK, "--from-start"]), d));
    assert_eq!(hooks(&out), [format!("hook:1:repaired:m1:{uuid}")], "{out}");
    assert_eq!(all_hooks(&out), 3, "{out}");

    // A cursor: its first run starts now; an event logged while the watcher is down runs at
    // the next start, once.
    let cur = ["--exec", HOOK, "--cursor", "pos"];
    assert_eq!(all_hooks(&ok(&sg(&args("events", &cur), d))), 0);
    one_event(d, "5");
    let out = ok(&sg(&args("events", &cur), d));
    assert_eq!(hooks(&out), [format!("hook:4:repaired:m1:{uuid}")], "{out}");
    assert_eq!(all_hooks(&out), 3, "{out}");
    assert_eq!(all_hooks(&ok(&sg(&args("events", &cur), d))), 0);
    // The cursor names its array: another array's cursor is refused.
    std::fs::write(d.join("other"), "00112233445566778899aabbccddeeff 3\n").unwrap();
    let out = sg(&args("events", &["--exec", HOOK, "--cursor", "other"]), d);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to array"));

    // --follow with a cursor: the hook runs for an event as it is logged, not for old ones.
    let log = d.join("hook.log");
    let hook = format!(
        "[ $SG_EVENT_ACTION = repaired ] && echo $SG_EVENT_NUMBER:$SG_EVENT_ACTION >> {}; true",
        log.display()
    );
    let mut follow = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args(
            "events",
            &["--follow", "--exec", &hook, "--cursor", "pos"],
        ))
        .current_dir(d)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    one_event(d, "6");
    let t = Instant::now();
    // The cursor moves after the hook has run.
    while std::fs::read_to_string(d.join("pos")).unwrap() != format!("{uuid} 9\n") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no hook ran for the new event"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "7:repaired\n");

    // A hook that hangs is killed (its children too) and the next event's hook still runs.
    let hung = format!(
        "sleep 30 & wait; echo $SG_EVENT_NUMBER >> {}",
        d.join("late").display()
    );
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args("events", &["--exec", &hung, "--from-start"]))
        .env("STRIPEGUARD_HOOK_TIMEOUT", "1")
        .current_dir(d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err_of(&out));
    let said = err_of(&out);
    assert_eq!(said.matches("killed after 1 s").count(), 9, "{said}");
    assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
    assert!(!d.join("late").exists(), "a killed hook went on");
}

/// A split brain refused (issue 35 §4) writes nothing to the members — which side holds the
/// data is the operator's to say — so no member's event log can record it; the refusal goes
/// to syslog (a fake `/dev/log` here) as one `split-brain-refused` line at severity err.
#[test]
fn a_split_brain_refused_reaches_syslog() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let five = ["m0", "m1", "m2", "m3", "m4"];
    let with5 = |verb: &'static str, extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec![verb];
        v.extend(five);
        v.extend(extra);
        v
    };
    ok(&sg(
        &with5("create", &["--level", "6", "--size", "4M", "--chunk", "4K"]),
        d,
    ));
    std::fs::write(d.join("a"), vec![5u8; 100_000]).unwrap();
    ok(&sg(&with5("write", &["-i", "a"]), d));
    let b = d.join("b");
    std::fs::create_dir(&b).unwrap();
    for m in ["m2", "m3", "m4"] {
        std::fs::copy(d.join(m), b.join(m)).unwrap();
    }
    // Half A writes without m3, m4; half B without m0, m1.
    std::fs::remove_file(d.join("m3")).unwrap();
    std::fs::remove_file(d.join("m4")).unwrap();
    let _ = sg(&with5("write", &["-i", "a"]), d);
    let _ = sg(&with5("write", &["-i", "../a"]), &b);
    std::fs::copy(b.join("m3"), d.join("m3")).unwrap();
    std::fs::copy(b.join("m4"), d.join("m4")).unwrap();

    let log = d.join("log.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&log).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with5("status", &[]))
        .current_dir(d)
        .env("STRIPEGUARD_SYSLOG_SOCKET", &log)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("split brain"));
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a syslog message");
    let msg = String::from_utf8_lossy(&buf[..n]);
    // Facility daemon (3), severity err (3): <27>.
    assert!(
        msg.starts_with("<27>stripeguard[")
            && msg.contains("]: split-brain-refused: split brain: "),
        "{msg}"
    );
}

/// From an outside attack: a member given from one side of a split brain with the other side's
/// members (A's m2 with B's m3 and m4, both sides at the same event count) was taken as current
/// because the newest table (B's) counts m2 active — and garbage mixed of both sides read back
/// with exit 0. Its own table records m3 and m4 gone while B's counts them current: written
/// apart, refused.
#[test]
fn one_sides_member_with_the_other_sides_members_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let five = ["m0", "m1", "m2", "m3", "m4"];
    let with5 = |verb: &'static str, extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec![verb];
        v.extend(five);
        v.extend(extra);
        v
    };
    ok(&sg(
        &with5("create", &["--level", "6", "--size", "4M", "--chunk", "4K"]),
        d,
    ));
    std::fs::write(d.join("a"), vec![1u8; 200_000]).unwrap();
    std::fs::write(d.join("x"), vec![2u8; 200_000]).unwrap();
    std::fs::write(d.join("y"), vec![3u8; 200_000]).unwrap();
    ok(&sg(&with5("write", &["-i", "a"]), d));
    let b = d.join("b");
    std::fs::create_dir(&b).unwrap();
    for m in ["m2", "m3", "m4"] {
        std::fs::copy(d.join(m), b.join(m)).unwrap();
    }
    std::fs::remove_file(d.join("m3")).unwrap();
    std::fs::remove_file(d.join("m4")).unwrap();
    let _ = sg(&with5("write", &["-i", "x"]), d); // side A: m0 m1 m2
    let _ = sg(&with5("write", &["-i", "../y"]), &b); // side B: m2' m3 m4
    std::fs::copy(b.join("m3"), d.join("m3")).unwrap();
    std::fs::copy(b.join("m4"), d.join("m4")).unwrap();
    let out = sg(&with5("status", &[]), d);
    let err = err_of(&out);
    assert!(err.contains("split brain"), "{err}");
    // A's m2 is named with A's m0 and m1, not with B's members.
    let (a_side, b_side) = err.split_once(" and ").unwrap();
    assert!(b_side.contains("m2 (") || a_side.contains("m2 ("), "{err}");
    assert!(
        !(a_side.contains("m3 (") && a_side.contains("m2 (")),
        "m2 grouped with B: {err}"
    );
    // A's m2 with B's members alone: refused, never read.
    std::fs::rename(d.join("m0"), d.join("m0.a")).unwrap();
    std::fs::rename(d.join("m1"), d.join("m1.a")).unwrap();
    let out = sg(&with5("read", &["--length", "200000", "-o", "got"]), d);
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
    assert!(err_of(&out).contains("split brain"), "{}", err_of(&out));
}
