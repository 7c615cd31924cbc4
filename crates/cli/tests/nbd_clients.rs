//! `stripeguard serve` proven by real NBD clients: nbdinfo, qemu-img, fio with verification,
//! libnbd's Python bindings across a `kill -9`, and a whole filesystem chain (nbdfuse → losetup
//! → ext4) across damaged members. Each test skips with a printed reason when a tool it needs is
//! missing (scripts/install-deps installs them) or, for the filesystem, when not root.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;
#[macro_use]
mod nbd_common;

use common::{err_of, ok, sg};
use nbd_common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `stripeguard serve` on the members in `dir` (those that exist) at a unix socket.
fn serve(dir: &Path, extra: &[&str]) -> Served {
    let sock = dir.join("sg.sock");
    let stderr = dir.join(format!("serve-{}.err", Instant::now().elapsed().as_nanos()));
    let mut args: Vec<String> = vec!["serve".into()];
    args.extend(MEMBERS.iter().map(|m| m.to_string()));
    args.extend([
        "--socket".into(),
        sock.display().to_string(),
        "--json".into(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(&args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start the server");
    let t = Instant::now();
    // The socket file appears at bind(), a moment before the server listens: wait for a
    // connection to be accepted.
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not listen: {}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        child,
        uri: format!("nbd+unix:///stripeguard?socket={}", sock.display()),
        stderr,
    }
}

/// Units the engine repaired, from the durable event log (the same for every front end).
fn logged_repairs(dir: &Path) -> usize {
    let out = sg(&[&["events"][..], &MEMBERS[..], &["--json"]].concat(), dir);
    let all: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    all.iter().filter(|e| e["action"] == "repaired").count()
}

fn summary(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("serve --json summary")
}

#[test]
fn nbdinfo_reports_the_size_and_block_sizes() {
    need!("nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "8M");
    let status = ok(&sg(
        &[&["status"][..], &MEMBERS[..], &["--json"]].concat(),
        dir.path(),
    ));
    let capacity = serde_json::from_str::<serde_json::Value>(&status).unwrap()["capacity_bytes"]
        .as_u64()
        .expect("capacity in status --json");
    let s = serve(dir.path(), &[]);
    let out = run(Command::new("nbdinfo").args(["--json", &s.uri]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &info["exports"][0];
    assert_eq!(e["export-size"].as_u64(), Some(capacity));
    assert_eq!(e["block_size_minimum"].as_u64(), Some(512));
    assert_eq!(e["block_size_preferred"].as_u64(), Some(65536));
    assert_eq!(e["block_size_maximum"].as_u64(), Some(32 << 20));
    assert_eq!(e["can_multi_conn"].as_bool(), Some(true));
    assert_eq!(e["can_flush"].as_bool(), Some(true));
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
}

#[test]
fn qemu_img_converts_an_image_in_and_out_byte_identical() {
    need!("qemu-img");
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "16M");
    let img = dir.path().join("in.img");
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&img, &data).unwrap();
    let s = serve(dir.path(), &[]);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(&s.uri));
    let back = dir.path().join("out.img");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw", &s.uri])
        .arg(&back));
    let got = std::fs::read(&back).unwrap();
    assert!(got.len() >= data.len());
    assert!(
        got[..data.len()] == data[..],
        "the image came back different"
    );
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
}

/// Zero stripes seen by real clients (issue 37 §1-2): a new array is all hole; data written
/// at two places makes those stripes data; nbdcopy and qemu-img convert copy it into files that
/// are identical and sparse (only the data lands); a TRIM of whole stripes makes them holes
/// again that read as zeros, before and after a restart; FAST_ZERO succeeds on whole stripes
/// and is refused where a partial stripe would need writing.
#[test]
fn a_sparse_export_copies_sparse_and_trims_to_holes() {
    need!("nbdcopy", "qemu-img", "qemu-io", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "40M");
    let s = serve(d, &[]);
    let map = |uri: &str| -> Vec<(u64, u64, u32)> {
        let out = run(Command::new("nbdinfo").arg("--map").arg(uri));
        common::nbd_map(&out.stdout)
    };
    let fresh = map(&s.uri);
    assert!(
        fresh.len() == 1 && fresh[0].0 == 0 && fresh[0].2 == 3,
        "{fresh:?}"
    );
    // 6 data chunks of 64 KiB: a stripe holds 384 KiB.
    let sd: u64 = 6 * 64 * 1024;
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 0x5a 1M 2M",
        "-c",
        "write -P 0xa5 100M 1M",
        "-c",
        "flush",
        &s.uri,
    ]));
    let written = map(&s.uri);
    let data: Vec<(u64, u64)> = written
        .iter()
        .filter(|e| e.2 == 0)
        .map(|e| (e.0, e.0 + e.1))
        .collect();
    // Each written range, widened to its stripes.
    let widen = |lo: u64, hi: u64| (lo / sd * sd, hi.div_ceil(sd) * sd);
    assert_eq!(
        data,
        vec![widen(1 << 20, 3 << 20), widen(100 << 20, 101 << 20)],
        "{written:?}"
    );
    // Copies land sparse and identical.
    let a = d.join("a.img");
    run(Command::new("nbdcopy").arg(&s.uri).arg(&a));
    let b = d.join("b.img");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw", &s.uri])
        .arg(&b));
    let want = {
        let size = std::fs::metadata(&a).unwrap().len();
        let mut v = vec![0u8; size as usize];
        v[1 << 20..3 << 20].fill(0x5a);
        v[100 << 20..101 << 20].fill(0xa5);
        v
    };
    for f in [&a, &b] {
        assert!(std::fs::read(f).unwrap() == want, "{} differs", f.display());
        use std::os::unix::fs::MetadataExt;
        let allocated = std::fs::metadata(f).unwrap().blocks() * 512;
        assert!(
            allocated <= 4 << 20,
            "{} has {allocated} bytes allocated for 3 MiB of data",
            f.display()
        );
    }
    // TRIM two whole stripes of the first range and part of a third: holes, zeros.
    let (lo, hi) = widen(1 << 20, 3 << 20);
    let trim = format!("discard {} {}", lo, 2 * sd + 4096);
    run(Command::new("qemu-io").args(["-f", "raw", "-c", &trim, "-c", "flush", &s.uri]));
    let after = map(&s.uri);
    assert!(
        after.contains(&(0, lo + 2 * sd, 3)),
        "whole stripes trimmed are holes: {after:?}"
    );
    let check = format!("read -P 0 {lo} {}", 2 * sd + 4096);
    let rest = format!(
        "read -P 0x5a {} {}",
        lo + 2 * sd + 4096,
        (3 << 20) - lo - 2 * sd - 4096
    );
    let out = run(Command::new("qemu-io").args(["-f", "raw", "-c", &check, "-c", &rest, &s.uri]));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("Pattern verification failed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // FAST_ZERO: whole stripes succeed, a partial stripe is refused before anything is done.
    let fast = |off: u64, len: u64| -> bool {
        Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import nbd, sys; h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.zero(int(sys.argv[3]), int(sys.argv[2]), nbd.CMD_FLAG_FAST_ZERO)",
                &s.uri,
                &off.to_string(),
                &len.to_string(),
            ])
            .output()
            .unwrap()
            .status
            .success()
    };
    if have("nbdsh") {
        assert!(fast(50 * sd, 3 * sd), "fast zero of whole stripes");
        assert!(!fast(hi - 4096, 4096), "fast zero of part of a data stripe");
        // A READ wholly in zero stripes comes back as one hole chunk (no zeros on the wire);
        // one that touches data as a data chunk. Each reads as what it holds.
        let chunks = |off: u64, len: u64| -> String {
            let out = run(Command::new("/usr/bin/python3").args([
                "-c",
                "import nbd, sys\n\
                 h = nbd.NBD(); h.connect_uri(sys.argv[1])\n\
                 seen = []\n\
                 def cb(buf, off, status, err):\n    seen.append('hole' if status == nbd.READ_HOLE else 'data')\n    return 0\n\
                 b = h.pread_structured(int(sys.argv[3]), int(sys.argv[2]), cb)\n\
                 print(','.join(seen), 'zeros' if b == bytes(len(b)) else 'bytes')",
                &s.uri,
                &off.to_string(),
                &len.to_string(),
            ]));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(chunks(60 * sd, 65536), "hole zeros");
        assert_eq!(chunks(hi - 65536, 65536), "data bytes");
    }
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
    // After a restart: the same holes, the same bytes.
    let s = serve(d, &[]);
    assert_eq!(map(&s.uri), after);
    let out = run(Command::new("qemu-io").args(["-f", "raw", "-c", &check, "-c", &rest, &s.uri]));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("Pattern verification failed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
}

/// Write with fio (verified as it goes), damage the stopped array, verify again: for a checked
/// scheme no error and repairs in the log; for `none` (the negative control) fio's verify fails.
fn fio_damage_round(scheme: &str) -> (bool, usize) {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), scheme, "8M");
    let s = serve(dir.path(), &[]);
    run(fio_job(&s.uri, false).current_dir(dir.path()));
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
    damage(dir.path());
    let s = serve(dir.path(), &[]);
    let out = fio_job(&s.uri, true)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let verified = out.status.success();
    if !verified {
        eprintln!(
            "{scheme}: fio verify-only failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (status, _, err) = s.stop();
    assert!(status.code().is_some(), "{err}");
    (verified, logged_repairs(dir.path()))
}

#[test]
fn fio_verifies_through_the_server_and_after_members_are_damaged_by_hand() {
    need!("fio");
    let (verified, repairs) = fio_damage_round("hybrid-seq");
    assert!(verified, "fio's verify-only pass failed on hybrid-seq");
    assert!(repairs > 0, "the log names no repair");
    // The negative control: the same faults on bare RAID reach fio as wrong bytes.
    let (verified_none, _) = fio_damage_round("none");
    assert!(
        !verified_none,
        "fio's verify passed on `none` with damaged members: the damage missed the data fio reads"
    );
}

/// The Python script that writes through libnbd, logging what was acknowledged.
const KILL_WRITER: &str = r#"
import nbd, os, random, sys
uri, log_path, slots, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
h = nbd.NBD()
h.connect_uri(uri)
order = list(range(slots))
rng.shuffle(order)
log = open(log_path, "w", buffering=1)
try:
    for i, slot in enumerate(order):
        size = rng.choice([4096, 16384, 65536])
        fill = os.urandom(size)
        fua = rng.random() < 0.1
        h.pwrite(fill, slot * 65536, nbd.CMD_FLAG_FUA if fua else 0)
        log.write("W %d %d %d %s\n" % (slot, size, 1 if fua else 0, fill.hex()))
        if i % 8 == 7:
            h.flush()
            log.write("F\n")
except Exception as e:
    log.write("X %s\n" % str(e).replace("\n", " "))
"#;

#[test]
fn kill_9_mid_write_loses_nothing_acknowledged_after_a_flush_or_with_fua() {
    if !Command::new(python())
        .args(["-c", "import nbd"])
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipping: python3's nbd module (python3-libnbd) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "16M");
    let script = dir.path().join("writer.py");
    std::fs::write(&script, KILL_WRITER).unwrap();
    for round in 0..3u64 {
        let s = serve(dir.path(), &["--quiet"]);
        let log = dir.path().join(format!("log{round}"));
        let mut writer = Command::new(python())
            .arg(&script)
            .arg(&s.uri)
            .arg(&log)
            .arg("1200")
            .arg(round.to_string())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700 + 400 * round));
        s.kill9();
        let _ = writer.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        // What must survive: every write before the last acknowledged flush, and FUA writes.
        let lines: Vec<&str> = text.lines().collect();
        let last_flush = lines.iter().rposition(|l| *l == "F");
        let mut must = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let f: Vec<&str> = l.split(' ').collect();
            if f[0] == "W" && (last_flush.is_some_and(|lf| i < lf) || f[3] == "1") {
                must.push((f[1].parse::<u64>().unwrap(), hex_decode(f[4])));
            }
        }
        assert!(
            must.len() >= 8,
            "round {round}: the writer had too little time before the kill ({} lines)",
            lines.len()
        );
        // Restart (resync runs at assembly) and read every one back through the server.
        let s = serve(dir.path(), &["--quiet"]);
        let check = dir.path().join("check.py");
        let mut py =
            String::from("import nbd, sys\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\nbad = 0\n");
        for (slot, bytes) in &must {
            py.push_str(&format!(
                "if h.pread({}, {}) != bytes.fromhex('{}'): bad += 1\n",
                bytes.len(),
                slot * 65536,
                hex_encode(bytes)
            ));
        }
        py.push_str("print(bad)\n");
        std::fs::write(&check, py).unwrap();
        let out = run(Command::new(python()).arg(&check).arg(&s.uri));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0",
            "round {round}: writes acknowledged durable were lost"
        );
        let (status, _, err) = s.stop();
        assert!(status.success(), "{err}");
        assert!(
            round > 0 || err.is_empty() || !err.contains("panicked"),
            "{err}"
        );
    }
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// nbdfuse's file of the export, attached to a loop device; detached and unmounted on drop.
struct Attached {
    fuse: Child,
    mnt: PathBuf,
    loopdev: String,
}

impl Attached {
    fn new(uri: &str, mnt: &Path) -> Attached {
        std::fs::create_dir_all(mnt).unwrap();
        let fuse = Command::new("nbdfuse")
            .arg(mnt)
            .arg(uri)
            .stderr(Stdio::null())
            .spawn()
            .expect("nbdfuse");
        let file = mnt.join("nbd");
        let t = Instant::now();
        while !file.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "nbdfuse did not mount"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = run(Command::new("losetup").args(["-f", "--show"]).arg(&file));
        Attached {
            fuse,
            mnt: mnt.to_path_buf(),
            loopdev: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = wait_or_kill(&mut self.fuse);
    }
}

fn wait_or_kill(c: &mut Child) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    c.wait().ok()
}

/// A tree of files with their contents' checksums (a deterministic generator).
fn write_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for d in 0..6 {
        let sub = root.join(format!("dir{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % (700 * 1024)) as usize + 1;
            let bytes: Vec<u8> = (0..len)
                .map(|i| (x.rotate_left(i as u32 % 64) >> 3) as u8 ^ i as u8)
                .collect();
            let p = sub.join(format!("f{f}.bin"));
            std::fs::write(&p, &bytes).unwrap();
            files.push((p.strip_prefix(root).unwrap().to_path_buf(), bytes));
        }
    }
    files
}

#[test]
fn a_filesystem_on_the_export_survives_damaged_and_missing_members() {
    need!(
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "mount",
        "umount"
    );
    if !is_root() {
        eprintln!("skipping: the filesystem chain needs root (losetup, mount)");
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipping: /dev/fuse is missing (nbdfuse needs FUSE)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "16M");
    let mnt = d.join("fuse");
    let fs = d.join("fs");
    std::fs::create_dir_all(&fs).unwrap();
    // Round 1: mkfs, a tree of files, and a copy of member 2 taken after it (the "old copy").
    let s = serve(d, &["--quiet"]);
    let files;
    {
        let a = Attached::new(&s.uri, &mnt);
        run(Command::new("mkfs.ext4").args(["-q", "-F", &a.loopdev]));
        run(Command::new("mount").arg(&a.loopdev).arg(&fs));
        files = write_tree(&fs);
        run(&mut Command::new("sync"));
        run(Command::new("umount").arg(&fs));
    }
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
    let old_m2 = std::fs::read(d.join("m2")).unwrap();
    // Round 2: rewrite every file, so member 2's data chunks change; then put some of the old
    // ones back (lost writes), flip bits, misdirect a chunk, and delete a member.
    let s = serve(d, &["--quiet"]);
    {
        let a = Attached::new(&s.uri, &mnt);
        run(Command::new("mount").arg(&a.loopdev).arg(&fs));
        for (p, bytes) in &files {
            let mut b = bytes.clone();
            b.reverse();
            std::fs::write(fs.join(p), &b).unwrap();
        }
        run(&mut Command::new("sync"));
        run(Command::new("umount").arg(&fs));
    }
    let (status, _, err) = s.stop();
    assert!(status.success(), "{err}");
    let new_m2 = std::fs::read(d.join("m2")).unwrap();
    let (data_at, unit) = (128 * 1024usize, 64 * 1024 + 512usize);
    let mut lost = 0;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("m2"))
            .unwrap();
        // Every 5th unit that changed goes back to its old bytes, appendix included: a lost write.
        for u in (0..(new_m2.len() - data_at) / unit).step_by(5) {
            let r = data_at + u * unit..data_at + (u + 1) * unit;
            if r.end <= old_m2.len() && old_m2[r.clone()] != new_m2[r.clone()] {
                f.write_at(&old_m2[r.clone()], r.start as u64).unwrap();
                lost += 1;
            }
        }
    }
    assert!(lost > 0, "no unit of member 2 changed between the rounds");
    ok(&sg(
        &[
            "inject", "m5", "--fault", "bit-rot", "--chunk", "9", "--seed", "3",
        ],
        d,
    ));
    ok(&sg(
        &[
            "inject",
            "m3",
            "--fault",
            "misdirected-write",
            "--chunk",
            "13",
            "--seed",
            "4",
        ],
        d,
    ));
    std::fs::remove_file(d.join("m7")).unwrap();
    // Round 3: serve degraded, check the filesystem and every file.
    let s = serve(d, &[]);
    {
        let a = Attached::new(&s.uri, &mnt);
        let fsck = Command::new("e2fsck")
            .args(["-fn", &a.loopdev])
            .output()
            .unwrap();
        assert!(
            fsck.status.success(),
            "e2fsck found errors: {}",
            String::from_utf8_lossy(&fsck.stdout)
        );
        run(Command::new("mount")
            .args(["-o", "ro"])
            .arg(&a.loopdev)
            .arg(&fs));
        for (p, bytes) in &files {
            let mut want = bytes.clone();
            want.reverse();
            let got = std::fs::read(fs.join(p)).unwrap();
            assert!(got == want, "{} differs after the damage", p.display());
        }
        run(Command::new("umount").arg(&fs));
    }
    let (status, stdout, err) = s.stop();
    assert!(status.code().is_some(), "{err}");
    let sum = summary(&stdout);
    assert!(
        err.contains("DEGRADED"),
        "the deleted member was not reported: {err}"
    );
    assert!(sum["errors"].as_u64() == Some(0), "{sum}");
    eprintln!("after the damage: {sum}");
    assert!(
        sum["repaired"].as_u64().unwrap_or(0) > 0,
        "nothing was repaired: {sum}"
    );
    let _ = err_of;
}

/// `replace` while `serve` holds the array: the server rebuilds the member while a client
/// writes; afterwards the array reads right with two other members gone (so the new member
/// carries its share of everything, the writes made during the rebuild included).
#[test]
fn replace_while_serving_rebuilds_online() {
    need!("qemu-img");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "16M");
    std::fs::remove_file(d.join("m2")).unwrap();
    let img = d.join("in.img");
    let data: Vec<u8> = (0..48u32 << 20)
        .map(|i| (i.wrapping_mul(2246822519) >> 11) as u8)
        .collect();
    std::fs::write(&img, &data).unwrap();
    let s = serve(d, &["--quiet"]);
    let mut writer = Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(&s.uri)
        .spawn()
        .unwrap();
    let out = sg(
        &[
            &["replace"][..],
            &MEMBERS[..],
            &["--member", "2", "--with", "new2"],
        ]
        .concat(),
        d,
    );
    let text = ok(&out);
    assert!(
        text.contains("rebuilt member 2"),
        "{text}\n{}",
        err_of(&out)
    );
    assert!(writer.wait().unwrap().success());
    let (status, _, err) = s.stop();
    assert!(status.code().is_some_and(|c| c <= 1), "{err}");
    std::fs::rename(d.join("new2"), d.join("m2")).unwrap();
    std::fs::remove_file(d.join("m0")).unwrap();
    std::fs::remove_file(d.join("m5")).unwrap();
    let len = data.len().to_string();
    let out = sg(
        &[
            &["read"][..],
            &MEMBERS[..],
            &["--length", &len, "--output", "back"],
        ]
        .concat(),
        d,
    );
    ok(&out);
    let back = std::fs::read(d.join("back")).unwrap();
    assert!(back == data, "the member rebuilt while serving misses data");
}

/// While `serve` holds the array: `status --check` is done by the holder while it serves
/// (issue 35 §3; before, it said it did not check, exit 2 — and before that, it claimed a check
/// it had not made); `replace` of a healthy member is refused without `--force` and `--force`
/// reaches the holder (outside attack: it was dropped on the way).
#[test]
fn while_serving_the_holder_checks_and_replace_force_reaches_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "8M");
    let s = serve(d, &["--quiet"]);
    let out = sg(
        &[&["status"][..], &MEMBERS[..], &["--check", "--json"]].concat(),
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", err_of(&out));
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(v["checked"], true, "{v}");
    assert_eq!(v["check"]["check_only"], true, "{v}");
    assert_eq!(v["check"]["found"], 0, "{v}");
    assert_eq!(v["check"]["done"], v["check"]["total"], "{v}");
    let replace = |extra: &[&str]| {
        sg(
            &[
                &["replace"][..],
                &MEMBERS[..],
                &["--member", "1", "--with", "new1"],
                extra,
            ]
            .concat(),
            d,
        )
    };
    let refused = replace(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", err_of(&refused));
    assert!(err_of(&refused).contains("--force"), "{}", err_of(&refused));
    let forced = replace(&["--force"]);
    let text = ok(&forced);
    assert!(text.contains("rebuilt member 1"), "{text}");
    let (status, _, err) = s.stop();
    assert!(status.code().is_some_and(|c| c <= 1), "{err}");
}
