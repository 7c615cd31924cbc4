//! `stripeguard grow --add` of an array `serve` holds (FORMAT.md §2 "Reshaping the array",
//! docs/RESHAPE.md "Online"): the holder reshapes it while fio writes and verifies through
//! it, fio never sees a wrong byte, the data fio wrote last verifies after the reshape, new
//! clients see the new size, and the array scrubs clean offline afterwards — adding a data
//! member to a 6+2 array and to a checksum-chunk array, RAID-5 to RAID-6, and RAID-6 to RAID-5
//! (the last member freed).

mod common;
#[macro_use]
mod nbd_common;

use common::{ok, sg};
use nbd_common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// fio rounds (write then verify, each with its own seed) while `busy` is set, through `uri`;
/// the seed of the last round, and how many ran.
fn fio_rounds(uri: &str, dir: &Path, busy: &AtomicBool) -> (u32, u32) {
    let mut seed = 0;
    let mut rounds = 0;
    while busy.load(Ordering::Relaxed) || rounds == 0 {
        seed += 1;
        rounds += 1;
        let out = fio_job(uri, false)
            .arg(format!("--randseed={seed}"))
            .current_dir(dir)
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fio round {rounds} failed during the online reshape:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    (seed, rounds)
}

fn size(uri: &str) -> u64 {
    let out = run(Command::new("nbdinfo").args(["--size", uri]));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Serve the array of `members` in `d`, reshape it with `grow_args` while fio rounds run,
/// check, stop, and scrub it offline with `after` as members.
fn reshape_while_fio_runs(d: &Path, members: &[&str], grow_args: &[&str], after: &[&str]) {
    // Data past fio's 24 MiB, so the reshape has chunks to move while fio runs (stripes never
    // written are zero stripes, which an online reshape lists instead of moving).
    let block: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
        .collect();
    std::fs::write(d.join("fill"), block.repeat(48)).unwrap();
    let mut args = vec!["write"];
    args.extend(members);
    args.extend(["--offset", "32M", "-i", "fill"]);
    ok(&sg(&args, d));
    let s = serve_with(d, members);
    let before = size(&s.uri);
    let busy = AtomicBool::new(true);
    let (grow, (seed, rounds)) = std::thread::scope(|scope| {
        let fio = scope.spawn(|| fio_rounds(&s.uri, d, &busy));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut args = vec!["grow"];
        args.extend(members);
        args.extend(grow_args);
        let grow = sg(&args, d);
        busy.store(false, Ordering::Relaxed);
        (grow, fio.join().unwrap())
    });
    let said = ok(&grow);
    assert!(said.contains("reshaped:"), "{said}");
    assert!(
        rounds >= 2,
        "fio ran {rounds} round(s): did it overlap the reshape?"
    );
    eprintln!("{rounds} fio rounds ran across the reshape");
    // What the last round wrote reads back through the new geometry.
    let out = fio_job(&s.uri, true)
        .arg(format!("--randseed={seed}"))
        .current_dir(d)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fio verify after the reshape:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after_size = size(&s.uri);
    assert!(after_size >= before, "{before} -> {after_size}");
    let (status, _, err) = s.stop();
    assert!(status.success(), "serve: {err}");
    assert!(err.contains("reshaped"), "the event is logged: {err}");
    let mut args = vec!["scrub"];
    args.extend(after);
    let scrubbed = ok(&sg(&args, d));
    assert!(
        scrubbed.contains("0 unit(s) found wrong, 0 repaired, 0 unrecoverable"),
        "{scrubbed}"
    );
}

/// `stripeguard create` of `members` in `d` with `options`.
fn create_on(d: &Path, members: &[&str], options: &[&str]) {
    let mut args = vec!["create"];
    args.extend(members);
    args.extend(options);
    ok(&sg(&args, d));
}

/// Room past the array on every member of `members`, for a level change to move into first.
fn give_room(d: &Path, members: &[&str]) {
    for m in members {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join(m))
            .unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len + (4 << 20)).unwrap();
    }
}

#[test]
fn a_served_array_takes_a_data_member_while_fio_verifies() {
    need!("fio", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "32M");
    let mut all: Vec<&str> = MEMBERS.to_vec();
    all.push("m8");
    reshape_while_fio_runs(d, &MEMBERS, &["--add", "m8"], &all);
}

#[test]
fn a_served_raid5_becomes_raid6_while_fio_verifies() {
    need!("fio", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = ["m0", "m1", "m2", "m3"];
    create_on(
        d,
        &old,
        &[
            "--size", "32M", "--scheme", "pure", "--chunk", "64K", "--level", "5",
        ],
    );
    give_room(d, &old);
    reshape_while_fio_runs(
        d,
        &old,
        &["--level", "6", "--add", "m4"],
        &["m0", "m1", "m2", "m3", "m4"],
    );
}

#[test]
fn a_served_raid6_becomes_raid5_while_fio_verifies_and_its_last_member_is_freed() {
    need!("fio", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "32M");
    give_room(d, &MEMBERS);
    reshape_while_fio_runs(d, &MEMBERS, &["--level", "5"], &MEMBERS[..7]);
    // The member that left is a free device: no superblock of the array.
    let out = sg(&["examine", "m7"], d);
    assert!(!out.status.success(), "m7 still examines as a member");
}

#[test]
fn a_served_checksum_chunk_array_takes_a_data_member_while_fio_verifies() {
    need!("fio", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 4 data + 2 parity + the checksum member (the last); its tables move to m7.
    let old = ["m0", "m1", "m2", "m3", "m4", "m5", "m6"];
    create_on(
        d,
        &old,
        &[
            "--size",
            "32M",
            "--scheme",
            "checksum-chunk",
            "--chunk",
            "64K",
            "--parity",
            "2",
        ],
    );
    let mut all = old.to_vec();
    all.push("m7");
    reshape_while_fio_runs(d, &old, &["--add", "m7"], &all);
}

/// `grow --add` of an NBD export, sent to the holder: the URI is passed as given (an outside
/// test found it turned into a path under the current directory).
#[test]
fn a_served_array_takes_an_nbd_export_as_its_new_member() {
    need!("qemu-nbd", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = ["m0", "m1", "m2", "m3"];
    create_on(d, &old, &["--size", "16M", "--parity", "1"]);
    let img = d.join("new.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(40 << 20)
        .unwrap();
    let sock = d.join("q.sock");
    let mut q = Command::new("qemu-nbd")
        .args(["-f", "raw", "-t", "-k"])
        .arg(&sock)
        .arg(&img)
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let s = serve_with(d, &old);
    let before = size(&s.uri);
    let mut args = vec!["grow"];
    args.extend(old);
    args.extend(["--add", uri.as_str()]);
    let said = ok(&sg(&args, d));
    assert!(said.contains("4+1"), "{said}");
    assert!(size(&s.uri) > before);
    let (status, _, err) = s.stop();
    assert!(status.success(), "serve: {err}");
    let _ = q.kill();
    let _ = q.wait();
}
