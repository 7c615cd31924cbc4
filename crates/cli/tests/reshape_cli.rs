//! `stripeguard grow --add` as a user runs it (FORMAT.md §2, "Reshaping the array"): the data
//! moves onto the added members and reads back exact; bytes damaged by hand at the offsets
//! FORMAT.md gives are repaired on the way (not copied); a process killed at any of several
//! points of a reshape leaves an array every command refuses naming `grow --continue`, which
//! finishes it; and the refusals a user meets name their reason.

mod common;

use common::{err_of, ok, peek, poke, sg};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::Command;

const OLD: [&str; 4] = ["m0", "m1", "m2", "m3"];
const ALL: [&str; 6] = ["m0", "m1", "m2", "m3", "m4", "m5"];

fn args<'a>(verb: &'a str, members: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend_from_slice(members);
    v.extend_from_slice(rest);
    v
}

/// A 3+1 hybrid-seq array of 16 MiB members in `d`, holding `data` from offset 0.
fn array_with(d: &Path, data: &[u8]) {
    ok(&sg(
        &args(
            "create",
            &OLD,
            &[
                "--size",
                "16M",
                "--chunk",
                "16K",
                "--scheme",
                "hybrid-seq",
                "--parity",
                "1",
            ],
        ),
        d,
    ));
    std::fs::write(d.join("data"), data).unwrap();
    ok(&sg(&args("write", &OLD, &["-i", "data"]), d));
}

fn data(seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; 30 << 20];
    rng.fill(&mut v[..]);
    v
}

fn read_back(d: &Path, len: usize) -> Vec<u8> {
    let n = len.to_string();
    ok(&sg(&args("read", &ALL, &["--length", &n, "-o", "back"]), d));
    std::fs::read(d.join("back")).unwrap()
}

#[test]
fn grow_add_moves_the_data_and_repairs_damage_on_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let want = data(39);
    array_with(d, &want);
    // One byte flipped in member 2's chunk of stripes 10, 20, 30 (FORMAT.md §2: unit s at
    // D + s·U; D = 128 KiB for members under 256 MiB; U = 16 KiB chunk + one 512-byte sector).
    let (dd, u) = (128u64 << 10, (16u64 << 10) + 512);
    for s in [10u64, 20, 30] {
        let at = dd + s * u + 777;
        let b = peek(&d.join("m2"), at, 1);
        poke(&d.join("m2"), at, &[b[0] ^ 0x40]);
    }
    let out = ok(&sg(
        &args("grow", &OLD, &["--add", "m4", "m5", "--json"]),
        d,
    ));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let r = &v["reshape"];
    assert_eq!(r["from_members"], 4, "{out}");
    assert_eq!(r["to_members"], 6, "{out}");
    assert_eq!(r["to_data_chunks"], 5, "{out}");
    assert!(r["repaired"].as_u64().unwrap() >= 2, "{out}");
    assert!(read_back(d, want.len()) == want, "the data changed");
    let status = ok(&sg(&args("status", &ALL, &["--check"]), d));
    assert!(status.contains("5 data + 1 parity"), "{status}");
    let events = ok(&sg(&args("events", &ALL, &[]), d));
    assert!(events.contains("reshaped from 4 to 6 members"), "{events}");
}

#[test]
fn a_killed_reshape_is_refused_everywhere_until_grow_continue_finishes_it() {
    let want = data(391);
    let mut refused = 0;
    for abort_at in [40u64, 400, 1500, 3000, 6000] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        array_with(d, &want);
        let n = abort_at.to_string();
        let killed = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .args(args("grow", &OLD, &["--add", "m4", "m5"]))
            .env("STRIPEGUARD_TEST_ABORT_AFTER_WRITES", &n)
            .current_dir(d)
            .output()
            .unwrap();
        if killed.status.success() {
            continue;
        }
        let read = sg(&args("read", &ALL, &["--length", "100", "-o", "x"]), d);
        if read.status.success() {
            // Killed before any superblock said so: the array is as it was, on its 4 members.
            continue;
        }
        refused += 1;
        assert!(err_of(&read).contains("--continue"), "{}", err_of(&read));
        let status =
            String::from_utf8_lossy(&sg(&args("status", &ALL, &[]), d).stdout).into_owned();
        assert!(status.contains("RESHAPE in progress"), "{status}");
        // Wiping a member now would leave the data with no record of where it is.
        let e = err_of(&sg(&["wipe", "m5"], d));
        assert!(e.contains("--continue"), "{e}");
        let done = ok(&sg(&args("grow", &ALL, &["--continue"]), d));
        assert!(done.contains("reshaped: 4 → 6 members"), "{done}");
        assert!(
            read_back(d, want.len()) == want,
            "killed after {abort_at} writes: data changed"
        );
        let check = sg(&args("status", &ALL, &["--check"]), d);
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    assert!(
        refused >= 3,
        "only {refused} kills landed inside the reshape"
    );
}

#[test]
fn refusals_name_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let want = data(392);
    array_with(d, &want);
    // A member of the array given as a new one.
    let e = err_of(&sg(&args("grow", &OLD, &["--add", "m1"]), d));
    assert!(e.contains("already a member"), "{e}");
    // A device too small.
    std::fs::write(d.join("small"), vec![0u8; 1 << 20]).unwrap();
    let e = err_of(&sg(&args("grow", &OLD, &["--add", "small"]), d));
    assert!(e.contains("small holds"), "{e}");
    // Nothing to continue.
    let e = err_of(&sg(&args("grow", &OLD, &["--continue"]), d));
    assert!(e.contains("no reshape is in progress"), "{e}");
    // --size and --add together.
    let e = err_of(&sg(
        &args("grow", &OLD, &["--add", "m4", "--size", "max"]),
        d,
    ));
    assert!(e.contains("cannot be used with"), "{e}");
    // A member that cannot be opened (a typo) is refused without recording it as gone.
    let e = err_of(&sg(&["grow", "m0", "m1", "m2", "gone", "--add", "m4"], d));
    assert!(e.contains("member 3"), "{e}");
    let status = ok(&sg(&args("status", &OLD, &["--json"]), d));
    assert!(!status.contains("\"missing\""), "{status}");
    // Nothing was changed by any of them, and no file was left behind by a refusal; the
    // array was closed clean by each.
    let status = ok(&sg(&args("status", &OLD, &[]), d));
    assert!(status.contains("state: clean"), "{status}");
    assert!(!d.join("m4").exists());
    assert!(read_back_old(d, want.len()) == want);
}

fn read_back_old(d: &Path, len: usize) -> Vec<u8> {
    let n = len.to_string();
    ok(&sg(&args("read", &OLD, &["--length", &n, "-o", "back"]), d));
    std::fs::read(d.join("back")).unwrap()
}

#[test]
fn level_6_turns_raid5_into_raid6_after_the_members_get_room() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let want = data(393);
    array_with(d, &want);
    let e = err_of(&sg(
        &args("grow", &OLD, &["--level", "6", "--add", "m4"]),
        d,
    ));
    assert!(e.contains("needs room for"), "{e}");
    assert!(
        !d.join("m4").exists(),
        "a refused reshape left its new file"
    );
    let e = err_of(&sg(
        &args("grow", &OLD, &["--level", "5", "--add", "m4"]),
        d,
    ));
    assert!(e.contains("--level 5 adds no member"), "{e}");
    for m in OLD {
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join(m))
            .unwrap();
        f.set_len(f.metadata().unwrap().len() + (2 << 20)).unwrap();
    }
    // Killed part-way, then finished.
    let killed = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args("grow", &OLD, &["--level", "6", "--add", "m4"]))
        .env("STRIPEGUARD_TEST_ABORT_AFTER_WRITES", "1500")
        .current_dir(d)
        .output()
        .unwrap();
    assert!(!killed.status.success());
    let five = ["m0", "m1", "m2", "m3", "m4"];
    let done = ok(&sg(&args("grow", &five, &["--continue"]), d));
    assert!(done.contains("3+1 → 3+2"), "{done}");
    let status = ok(&sg(&args("status", &five, &["--check"]), d));
    assert!(status.contains("3 data + 2 parity (raid6)"), "{status}");
    let n = want.len().to_string();
    ok(&sg(
        &args("read", &five, &["--length", &n, "-o", "back"]),
        d,
    ));
    assert!(
        std::fs::read(d.join("back")).unwrap() == want,
        "the data changed"
    );
}

/// A checksum-chunk array (3 data + 1 parity + the checksum member, the last) takes a data
/// member: damage poked into member 1's chunks (bare chunks: unit `s` at `D + s·C`, FORMAT.md
/// §2.10) is found against the tables and repaired on the way, the data reads back exact, and
/// afterwards the tables live on the added member (the new last) and a check finds nothing.
#[test]
fn a_checksum_chunk_array_grows_and_its_tables_move_to_the_new_last_member() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = ["m0", "m1", "m2", "m3", "m4"];
    let all = ["m0", "m1", "m2", "m3", "m4", "m5"];
    ok(&sg(
        &args(
            "create",
            &old,
            &[
                "--size",
                "16M",
                "--chunk",
                "16K",
                "--scheme",
                "checksum-chunk",
                "--parity",
                "1",
            ],
        ),
        d,
    ));
    let mut want = data(393);
    want.truncate(20 << 20);
    std::fs::write(d.join("data"), &want).unwrap();
    ok(&sg(&args("write", &old, &["-i", "data"]), d));
    let (dd, c) = (128u64 << 10, 16u64 << 10);
    for s in [10u64, 20] {
        let at = dd + s * c + 999;
        let b = peek(&d.join("m1"), at, 1);
        poke(&d.join("m1"), at, &[b[0] ^ 0x21]);
    }
    let out = ok(&sg(&args("grow", &old, &["--add", "m5", "--json"]), d));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["reshape"]["to_data_chunks"], 4, "{out}");
    // Member 1 holds a data chunk of one of the two stripes and the parity of the other, which
    // a read does not need (the new stripe's parity is encoded afresh).
    assert!(v["reshape"]["repaired"].as_u64().unwrap() >= 1, "{out}");
    let n = want.len().to_string();
    ok(&sg(&args("read", &all, &["--length", &n, "-o", "back"]), d));
    assert!(
        std::fs::read(d.join("back")).unwrap() == want,
        "the data changed"
    );
    // Stripe 3's table begins its unit on the last member (magic "SGCK").
    assert_eq!(peek(&d.join("m5"), dd + 3 * c, 4), b"SGCK");
    assert_ne!(peek(&d.join("m4"), dd + 3 * c, 4), b"SGCK");
    let check = sg(&args("status", &all, &["--check"]), d);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}
