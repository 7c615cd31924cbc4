//! Issue 30, items 2, 3, 4, 6 and 7, end to end: re-add never trusts a copy older than the
//! moment its member left; a forged owner record (FORMAT.md §2.2) cannot hang a command, and
//! every wait on another holder says what it waits for and until when (`--no-wait` refuses at
//! once); a split-brain message with one side empty reads well; every writable holder beats its
//! heartbeat, socket or not; a write refused with exit 3 closes the array clean. Each case
//! failed on the code before its fix.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::poke;
use common::{err_of, ok, sg};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn cmd<'a>(verb: &'a str, names: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![verb];
    args.extend(names);
    args.extend(extra);
    args
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761) >> (seed % 13)) as u8 ^ seed)
        .collect()
}

/// Issue 30 item 2: a copy of member 8 from before a write, put back after the member was
/// recorded missing, was re-added through the write-intent record: the write it missed while
/// it was still in the array (its region's bit cleared since) was never rebuilt, and `none`
/// returned the old bytes with exit 0. It must be rebuilt in full, with a line saying why.
#[test]
fn a_member_copy_older_than_its_leaving_is_rebuilt_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"];
    ok(&sg(
        &cmd(
            "create",
            &ms,
            &[
                "--size", "17M", "--parity", "1", "--scheme", "none", "--chunk", "64K",
            ],
        ),
        d,
    ));
    std::fs::copy(d.join("m8"), d.join("m8.old")).unwrap();
    let b1 = pattern(524288, 1);
    std::fs::write(d.join("B1"), &b1).unwrap();
    std::fs::write(d.join("B2"), pattern(524288, 2)).unwrap();
    let at1 = (10 * 524288).to_string();
    let at2 = (200 * 524288).to_string();
    ok(&sg(&cmd("write", &ms, &["--offset", &at1, "-i", "B1"]), d));
    std::fs::remove_file(d.join("m8")).unwrap();
    ok(&sg(&cmd("write", &ms, &["--offset", &at2, "-i", "B2"]), d));
    std::fs::copy(d.join("m8.old"), d.join("m8")).unwrap();
    let out = sg(&cmd("replace", &ms, &["--member", "8", "--with", "m8"]), d);
    let said = ok(&out);
    assert!(
        said.contains("rebuilt in full") && said.contains("older than event"),
        "{said}"
    );
    assert!(!said.contains("re-added through"), "{said}");
    let out = sg(
        &cmd("read", &ms, &["--offset", &at1, "--length", "524288"]),
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", err_of(&out));
    assert!(
        out.stdout == b1,
        "the write made before member 8 left is lost"
    );
    let check = sg(&cmd("status", &ms, &["--check"]), d);
    assert_eq!(check.status.code(), Some(0), "{}", ok(&check));

    // The device that left, back with what it held when it left, is still re-added.
    std::fs::rename(d.join("m8"), d.join("m8.away")).unwrap();
    ok(&sg(&cmd("write", &ms, &["--offset", &at1, "-i", "B2"]), d));
    std::fs::rename(d.join("m8.away"), d.join("m8")).unwrap();
    let said = ok(&sg(
        &cmd("replace", &ms, &["--member", "8", "--with", "m8"]),
        d,
    ));
    assert!(said.contains("re-added through"), "{said}");
    let out = sg(
        &cmd("read", &ms, &["--offset", &at1, "--length", "524288"]),
        d,
    );
    assert!(out.stdout == pattern(524288, 2));
}

/// Write a CRC-valid owner record (FORMAT.md §2.2) naming process 4242 on host "elsewhere"
/// into slot 0 of `member`, with a sequence above any record it holds.
fn forge_owner(member: &Path, heartbeat_ms: u64, interval_ms: u32) {
    let sequence = owner_of(member).map_or(0, |o| o.0) + 1000;
    let mut s = vec![0u8; 2048];
    s[0..8].copy_from_slice(b"SGOWNER\0");
    s[8..12].copy_from_slice(&1u32.to_le_bytes());
    s[12..16].copy_from_slice(&2048u32.to_le_bytes());
    s[16..24].copy_from_slice(&sequence.to_le_bytes());
    s[24] = 1;
    s[28..32].copy_from_slice(&4242u32.to_le_bytes());
    s[32..48].fill(0xEE);
    s[48..64].fill(0x77);
    s[64..72].copy_from_slice(&1u64.to_le_bytes());
    s[72..80].copy_from_slice(&heartbeat_ms.to_le_bytes());
    s[80..84].copy_from_slice(&interval_ms.to_le_bytes());
    s[88..97].copy_from_slice(b"elsewhere");
    s[152..169].copy_from_slice(b"stripeguard serve");
    let crc = stripeguard_checksum::crc32c(&s[..2044]);
    s[2044..].copy_from_slice(&crc.to_le_bytes());
    poke(member, 8192, &s);
}

fn create_small(d: &Path, ms: &[&str]) {
    ok(&sg(
        &cmd("create", ms, &["--size", "300K", "--chunk", "4K"]),
        d,
    ));
}

/// Issue 30 item 3: a forged record with an ancient heartbeat and an interval of 2^32 - 1 ms
/// made every writing command sleep ~99 days without a word. The interval is bounded (60 s),
/// and `--no-wait` on every command that assembles for writing refuses at once, saying so.
#[test]
fn a_forged_owner_record_cannot_hang_a_command_and_no_wait_refuses_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create_small(d, &ms);
    forge_owner(&d.join("m0"), 1, u32::MAX);
    let sock = d.join("sg.sock");
    let sock = sock.to_str().unwrap();
    for extra in [
        vec!["read", "--length", "4096", "-o", "/dev/null"],
        vec!["write", "-i", "/dev/null"],
        vec!["scrub"],
        vec!["replace", "--member", "1", "--with", "n1"],
        vec!["serve", "--socket", sock],
    ] {
        let mut args = vec![extra[0]];
        args.extend(ms);
        args.extend(&extra[1..]);
        args.push("--no-wait");
        let started = Instant::now();
        let out = sg(&args, d);
        let e = err_of(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {e}", extra[0]);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}: waited",
            extra[0]
        );
        assert!(
            e.contains("in use by process 4242 on elsewhere")
                && e.contains("not waiting (--no-wait)")
                && e.contains("2 min"),
            "{}: {e}",
            extra[0]
        );
    }
    assert!(!d.join("n1").exists());
}

/// Issue 30 item 3: a stale holder on another host is waited for — two of its intervals, said
/// on stderr with the time the wait ends — then taken over when its sequence did not move.
#[test]
fn waiting_for_a_silent_holder_says_for_what_and_until_when() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create_small(d, &ms);
    forge_owner(&d.join("m0"), now_ms() - 3_600_000, 100);
    let out = sg(&cmd("write", &ms, &["-i", "/dev/null"]), d);
    let e = err_of(&out);
    assert_eq!(out.status.code(), Some(0), "{e}");
    assert!(
        e.contains("process 4242 on elsewhere")
            && e.contains("waiting 200 ms, until ")
            && e.contains(" UTC"),
        "{e}"
    );
}

/// Issue 30 item 3: a heartbeat in the future refused forever ("last heartbeat 0 ms ago ...
/// try again in 15 s"). It is judged by the sequence alone: after two intervals without a move
/// the holder is taken over; with `--no-wait` it is refused at once.
#[test]
fn a_heartbeat_from_the_future_is_judged_by_the_sequence_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create_small(d, &ms);
    forge_owner(&d.join("m0"), now_ms() + 86_400_000, 100);
    let out = sg(&cmd("write", &ms, &["-i", "/dev/null"]), d);
    let e = err_of(&out);
    assert_eq!(out.status.code(), Some(0), "{e}");
    assert!(e.contains("in the future") && e.contains("until "), "{e}");
    forge_owner(&d.join("m0"), now_ms() + 86_400_000, 100);
    let out = sg(&cmd("write", &ms, &["-i", "/dev/null", "--no-wait"]), d);
    let e = err_of(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("in the future") && e.contains("--no-wait"),
        "{e}"
    );
}

/// Rewrite both superblock copies of `member` (FORMAT.md §2.1) with `edit`, re-sealed.
fn forge_superblock(member: &Path, edit: impl Fn(&mut [u8])) {
    let mut b = std::fs::read(member).unwrap();
    for copy in [0usize, 4096] {
        let sb = &mut b[copy..copy + 4096];
        edit(sb);
        let crc = stripeguard_checksum::crc32c(&sb[..4092]);
        sb[4092..].copy_from_slice(&crc.to_le_bytes());
    }
    poke(member, 0, &b[..8192]);
}

/// Issue 30 item 6: a split brain whose current side is empty read "split brain: members  and
/// members ...".
#[test]
fn a_split_brain_with_one_side_empty_reads_well() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["s0", "s1", "s2", "s3"];
    ok(&sg(
        &cmd(
            "create",
            &ms,
            &["--size", "300K", "--chunk", "4K", "--level", "6"],
        ),
        d,
    ));
    let gen = |m: &str| {
        let b = std::fs::read(d.join(m)).unwrap();
        u64::from_le_bytes(b[72..80].try_into().unwrap())
    };
    let others = gen("s1");
    // s0's superblock: far ahead (event 50), recording itself gone at event 1 and every other
    // member gone at the event their own superblocks show (so they are stale, not current).
    forge_superblock(&d.join("s0"), |sb| {
        sb[72..80].copy_from_slice(&50u64.to_le_bytes());
        for i in 0..4 {
            let e = &mut sb[256 + 12 * i..256 + 12 * (i + 1)];
            e[0] = 3;
            let last = if i == 0 { 1 } else { others };
            e[4..12].copy_from_slice(&last.to_le_bytes());
        }
    });
    let out = sg(&cmd("read", &ms, &["--length", "4096"]), d);
    let e = err_of(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("split brain") && e.contains("s0 (event 50)"),
        "{e}"
    );
    assert!(
        !e.contains("members  and") && !e.contains("members and"),
        "{e}"
    );
    assert!(e.contains("member s0 (event 50) was written"), "{e}");
}

/// The owner record's newest slot on `member`: (sequence, held, pid, heartbeat ms).
fn owner_of(member: &Path) -> Option<(u64, bool, u32, u64)> {
    let b = std::fs::read(member).ok()?;
    [8192usize, 10240]
        .iter()
        .filter(|&&s| b[s..s + 8] == *b"SGOWNER\0")
        .map(|&s| {
            let u64_at = |at: usize| u64::from_le_bytes(b[s + at..s + at + 8].try_into().unwrap());
            (
                u64_at(16),
                b[s + 24] == 1,
                u32::from_le_bytes(b[s + 28..s + 32].try_into().unwrap()),
                u64_at(72),
            )
        })
        .max_by_key(|o| o.0)
}

/// Issue 30 item 7: `read` holds the array writable (it repairs) without a control socket, and
/// only the socket thread beat the heartbeat: another host could take the array over ~25 s into
/// a long read or replace. Here the holder is a `read` blocked on its output (a FIFO nobody
/// reads yet), with a 100 ms heartbeat; after well over the takeover window (3 intervals
/// stale, then 2 still) its record still beats, and an assembler on another host (a UTS
/// namespace with its own host name, when this runs as root) is refused.
#[test]
fn a_holder_without_a_control_socket_still_beats_its_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2"];
    create_small(d, &ms);
    std::fs::write(d.join("A"), pattern(8192, 5)).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "A"]), d));
    assert!(Command::new("mkfifo")
        .arg(d.join("out.fifo"))
        .status()
        .unwrap()
        .success());
    let env = [
        ("STRIPEGUARD_HEARTBEAT_MS", "100"),
        ("STRIPEGUARD_NO_LOCAL_LOCKS", "1"),
    ];
    let mut holder = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(cmd("read", &ms, &["--length", "8192", "-o", "out.fifo"]))
        .current_dir(d)
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = holder.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        match owner_of(&d.join("m0")) {
            Some(o) if o.1 && o.2 == pid => break o,
            _ if Instant::now() > deadline => panic!("the read never took the array"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    // Longer than the takeover window: 3 intervals stale plus 2 more without a move.
    std::thread::sleep(Duration::from_millis(1500));
    let later = owner_of(&d.join("m0")).unwrap();
    assert!(later.1 && later.2 == pid, "{later:?}");
    assert!(
        later.0 >= first.0 + 3,
        "the read's heartbeat did not move in 1.5 s: {first:?} then {later:?}"
    );
    // Another host's assembler (when a UTS namespace can be made): refused, not a takeover.
    let unshare_works = Command::new("unshare")
        .args(["--uts", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if unshare_works {
        let script = format!(
            "hostname sg-another-host && exec {} write {} -i /dev/null",
            env!("CARGO_BIN_EXE_stripeguard"),
            ms.join(" ")
        );
        let out = Command::new("unshare")
            .args(["--uts", "sh", "-c", &script])
            .current_dir(d)
            .envs(env)
            .output()
            .unwrap();
        let e = err_of(&out);
        assert_eq!(out.status.code(), Some(2), "taken over: {e}");
        assert!(e.contains(&format!("in use by process {pid}")), "{e}");
    } else {
        eprintln!("skipping the other-host assembler: cannot make a UTS namespace");
    }
    // Let the read finish: it reads back what was written and closes clean.
    let back = std::fs::read(d.join("out.fifo")).unwrap();
    assert!(holder.wait().unwrap().success());
    assert_eq!(back, pattern(8192, 5));
    let o = owner_of(&d.join("m0")).unwrap();
    assert!(!o.1, "{o:?}");
}

/// Issue 30 (with item 7): a write refused with exit 3 (a stripe damaged beyond its
/// redundancy) returned without closing, leaving the array dirty as if it had crashed. It
/// closes clean: `status` shows state clean and nothing awaiting resync.
#[test]
fn a_write_refused_with_exit_3_closes_the_array_clean() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    ok(&sg(
        &cmd(
            "create",
            &ms,
            &[
                "--size",
                "1M",
                "--level",
                "5",
                "--scheme",
                "hybrid-seq",
                "--chunk",
                "4K",
            ],
        ),
        d,
    ));
    std::fs::write(d.join("A"), pattern(65536, 7)).unwrap();
    ok(&sg(&cmd("write", &ms, &["-i", "A"]), d));
    // Stripe 3's units on members 1 and 2 (data offset 128 KiB, units of 4096 + 512 bytes).
    for m in ["m1", "m2"] {
        poke(&d.join(m), 131072 + 3 * 4608 + 100, b"XY");
    }
    std::fs::write(d.join("w"), b"0123456789").unwrap();
    let at = (9 * 4096 + 10).to_string();
    let out = sg(&cmd("write", &ms, &["--offset", &at, "-i", "w"]), d);
    assert_eq!(out.status.code(), Some(3), "{}", err_of(&out));
    let out = sg(&cmd("status", &ms, &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "clean", "{v}");
    assert_eq!(v["awaiting_resync_stripes"], 0, "{v}");
}
