//! No command destroys what it does not own (issue 35 §1): `create` and `replace` probe every
//! device they are about to write with libblkid and our own superblock reader, refuse foreign
//! data without `--force-overwrite DEV`, another array's member without `--force-take DEV`, and a
//! device in use (mounted, held `O_EXCL`, backing a loop device, a member of an array a running
//! process holds) whatever the flags. On the landed main before this, every refusal below was a
//! silent success that destroyed the device. The loop-device tests need root and `losetup`
//! (present in CI) and skip with a printed reason otherwise.

mod common;

use common::{err_of, have, ok, sg};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

macro_rules! need {
    ($($tool:expr),*) => {
        $(if !have($tool) {
            eprintln!("SKIP: {} is not installed (scripts/install-deps installs it)", $tool);
            return;
        })*
    };
}

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mkfs_ext4(path: &Path, label: &str) {
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", label])
        .arg(path));
}

/// What libblkid (the `blkid` tool) says a device holds; empty when nothing.
fn blkid(path: &Path) -> String {
    let out = Command::new("blkid")
        .args(["-p", "-o", "export"])
        .arg(path)
        .output()
        .expect("blkid");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(out: &std::process::Output, needle: &str) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "must be refused: {}",
        err_of(out)
    );
    assert!(
        err_of(out).contains(needle),
        "{needle:?} not in: {}",
        err_of(out)
    );
}

#[test]
fn create_refuses_a_filesystem_until_told_to_destroy_it_and_then_wipes_it() {
    need!("mkfs.ext4", "blkid");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    mkfs_ext4(&img, "precious");
    let out = sg(
        &["create", "a", "b", "c", "fs.img", "--size", "32M"],
        dir.path(),
    );
    refused(&out, "fs.img holds an ext4 filesystem labelled precious; pass --force-overwrite fs.img to destroy it");
    // Nothing was made or touched: the other members were not left behind, fs.img still ext4.
    assert!(!dir.path().join("a").exists());
    assert!(blkid(&img).contains("TYPE=ext4"));
    // A flag naming another device confirms nothing.
    let out = sg(
        &[
            "create",
            "a",
            "b",
            "c",
            "fs.img",
            "--size",
            "32M",
            "--force-overwrite",
            "b",
        ],
        dir.path(),
    );
    refused(
        &out,
        "--force-overwrite b names no device this command writes",
    );
    // `--force` (take members of another array) does not cover foreign data.
    let out = sg(
        &[
            "create", "a", "b", "c", "fs.img", "--size", "32M", "--force",
        ],
        dir.path(),
    );
    refused(&out, "holds an ext4 filesystem");
    ok(&sg(
        &[
            "create",
            "a",
            "b",
            "c",
            "fs.img",
            "--size",
            "32M",
            "--force-overwrite",
            "fs.img",
        ],
        dir.path(),
    ));
    assert_eq!(blkid(&img), "", "the old signature is gone");
    ok(&sg(&["status", "a", "b", "c", "fs.img"], dir.path()));
}

#[test]
fn create_names_swap_and_a_partition_table() {
    need!("mkswap");
    let dir = tempfile::tempdir().unwrap();
    let swap = dir.path().join("swap.img");
    std::fs::File::create(&swap)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    run(Command::new("mkswap").arg(&swap));
    refused(
        &sg(
            &["create", "a", "b", "swap.img", "--size", "16M"],
            dir.path(),
        ),
        "swap.img holds swap space",
    );
    // A DOS partition table: one Linux partition from sector 2048.
    let pt = dir.path().join("pt.img");
    let mut mbr = vec![0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    std::fs::write(&pt, &mbr).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&pt)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    refused(
        &sg(&["create", "a", "b", "pt.img", "--size", "16M"], dir.path()),
        "pt.img holds a partition table (dos)",
    );
}

#[test]
fn another_arrays_member_needs_force_take_and_a_held_one_is_never_taken() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "x0", "x1", "x2", "--size", "16M"], d));
    let out = sg(&["create", "y0", "y1", "x2", "--size", "16M"], d);
    refused(&out, "x2 is member 2 of stripeguard array ");
    assert!(
        err_of(&out).contains("pass --force-take x2 to take it"),
        "{}",
        err_of(&out)
    );
    ok(&sg(
        &[
            "create",
            "y0",
            "y1",
            "x2",
            "--size",
            "16M",
            "--force-take",
            "x2",
        ],
        d,
    ));
    // `create --force` takes every member given, as it always did.
    ok(&sg(
        &["create", "y0", "y1", "x2", "--size", "16M", "--force"],
        d,
    ));

    // An array a running process holds: its member is in use whatever the flags.
    ok(&sg(&["create", "h0", "h1", "h2", "--size", "16M"], d));
    let sock = d.join("s.sock");
    let mut serve = serve(d, &["h0", "h1", "h2"], &sock);
    let out = sg(
        &[
            "create",
            "z0",
            "z1",
            "h2",
            "--size",
            "16M",
            "--force-take",
            "h2",
            "--force",
        ],
        d,
    );
    refused(&out, "which process");
    assert!(
        err_of(&out).contains("never takes a member of an array in use"),
        "{}",
        err_of(&out)
    );
    serve.stop();
    ok(&sg(&["status", "h0", "h1", "h2"], d));
}

#[test]
fn replace_asks_for_each_danger_separately() {
    need!("mkfs.ext4");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "m0", "m1", "m2", "--size", "16M"], d));
    ok(&sg(&["create", "o0", "o1", "o2", "--size", "16M"], d));
    let img = d.join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    mkfs_ext4(&img, "keep");
    // Retiring a healthy member (--force) does not also take another array's member ...
    let out = sg(
        &[
            "replace", "m0", "m1", "m2", "--member", "1", "--with", "o1", "--force",
        ],
        d,
    );
    refused(&out, "o1 is member 1 of stripeguard array ");
    // ... nor destroy a filesystem.
    let out = sg(
        &[
            "replace", "m0", "m1", "m2", "--member", "1", "--with", "fs.img", "--force",
        ],
        d,
    );
    refused(
        &out,
        "fs.img holds an ext4 filesystem labelled keep; pass --force-overwrite fs.img",
    );
    let out = sg(
        &[
            "replace",
            "m0",
            "m1",
            "m2",
            "--member",
            "1",
            "--with",
            "fs.img",
            "--force",
            "--force-overwrite",
            "o1",
        ],
        d,
    );
    refused(
        &out,
        "--force-overwrite o1 does not name the device given with --with",
    );
    // And the healthy member is still refused without --force.
    let out = sg(
        &[
            "replace",
            "m0",
            "m1",
            "m2",
            "--member",
            "1",
            "--with",
            "fs.img",
            "--force-overwrite",
            "fs.img",
        ],
        d,
    );
    refused(&out, "is healthy; pass --force to retire it");
    ok(&sg(
        &[
            "replace",
            "m0",
            "m1",
            "m2",
            "--member",
            "1",
            "--with",
            "fs.img",
            "--force",
            "--force-overwrite",
            "fs.img",
        ],
        d,
    ));
    ok(&sg(
        &[
            "replace",
            "m0",
            "fs.img",
            "m2",
            "--member",
            "1",
            "--with",
            "o1",
            "--force",
            "--force-take",
            "o1",
        ],
        d,
    ));
    ok(&sg(&["scrub", "m0", "o1", "m2"], d));
}

/// A loop device attached to a file, detached again when dropped.
struct Loop(String);

impl Loop {
    fn attach(file: &Path) -> Loop {
        Loop(
            run(Command::new("losetup").args(["-f", "--show"]).arg(file))
                .trim()
                .to_string(),
        )
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

struct Holder(Child);

/// Wait until `sock` exists (the process making it has started listening).
fn wait_for(sock: &Path, what: &str) {
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `stripeguard serve MEMBERS --socket SOCK` in `d`, listening.
fn serve(d: &Path, members: &[&str], sock: &Path) -> Holder {
    let h = Holder(
        Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .arg("serve")
            .args(members)
            .arg("--socket")
            .arg(sock)
            .current_dir(d)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(sock, "serve");
    h
}

/// nbdkit's file plugin exporting `file` on the unix socket `sock`, listening.
fn nbdkit_file(sock: &Path, file: impl AsRef<std::ffi::OsStr>) -> Holder {
    let h = Holder(
        Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(sock)
            .arg("file")
            .arg(file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(sock, "nbdkit");
    h
}

impl Holder {
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn loop_devices_mounted_backed_or_held_are_refused() {
    if !root() {
        eprintln!("SKIP: loop devices need root");
        return;
    }
    need!("losetup", "mkfs.ext4", "mount");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backing = d.join("disk.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    mkfs_ext4(&backing, "onloop");
    let lo = Loop::attach(&backing);
    // The file behind a loop device is in use, whatever the flags.
    let out = sg(
        &[
            "create",
            "a",
            "b",
            "disk.img",
            "--size",
            "32M",
            "--force-overwrite",
            "disk.img",
        ],
        d,
    );
    refused(
        &out,
        &format!("disk.img is in use (it backs loop device {})", lo.0),
    );
    // The device itself: foreign data needs the flag ...
    refused(
        &sg(&["create", "a", "b", &lo.0, "--size", "32M"], d),
        "holds an ext4 filesystem labelled onloop",
    );
    // ... and mounted, it is refused even with it.
    let mnt = d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run(Command::new("mount").arg(&lo.0).arg(&mnt));
    let out = sg(
        &[
            "create",
            "a",
            "b",
            &lo.0,
            "--size",
            "32M",
            "--force-overwrite",
            &lo.0,
        ],
        d,
    );
    refused(&out, &format!("is in use (mounted on {})", mnt.display()));
    run(Command::new("umount").arg(&mnt));
    ok(&sg(
        &[
            "create",
            "a",
            "b",
            &lo.0,
            "--size",
            "32M",
            "--force-overwrite",
            &lo.0,
        ],
        d,
    ));
    // Held by a running array, the member is opened O_EXCL: nobody can mount or mkfs it.
    let sock = d.join("s.sock");
    let mut serve = serve(d, &["a", "b", &lo.0], &sock);
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&lo.0)
        .output()
        .unwrap();
    assert!(!mkfs.status.success(), "mkfs.ext4 wrote a held member");
    let mount = Command::new("mount").arg(&lo.0).arg(&mnt).output().unwrap();
    assert!(!mount.status.success(), "a held member was mounted");
    serve.stop();
    ok(&sg(&["scrub", "a", "b", &lo.0], d));
}

#[test]
fn an_nbd_member_is_probed_through_its_ends() {
    need!("nbdkit", "mkfs.ext4");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = d.join("remote.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    mkfs_ext4(&img, "remote");
    let sock = d.join("nbd.sock");
    let _nbdkit = nbdkit_file(&sock, &img);
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let out = sg(&["create", "a", "b", &uri, "--size", "32M"], d);
    refused(&out, "holds an ext4 filesystem labelled remote");
    ok(&sg(
        &[
            "create",
            "a",
            "b",
            &uri,
            "--size",
            "32M",
            "--force-overwrite",
            &uri,
        ],
        d,
    ));
}

/// From an outside attack: a confirmed overwrite is carried out only after every other check
/// of the command has passed, so a command refused for another reason destroys nothing.
#[test]
fn a_refused_command_wipes_nothing_it_was_allowed_to() {
    need!("mkfs.ext4", "blkid");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = d.join("e.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    mkfs_ext4(&img, "keep");
    // Another member has no size given.
    let out = sg(
        &["create", "e.img", "x", "y", "--force-overwrite", "e.img"],
        d,
    );
    refused(&out, "x does not exist; give --size");
    assert!(blkid(&img).contains("TYPE=ext4"), "refused, yet wiped");
    // Another member is too small for the array.
    std::fs::File::create(d.join("tiny"))
        .unwrap()
        .set_len(4096)
        .unwrap();
    let out = sg(
        &["create", "e.img", "tiny", "--force-overwrite", "e.img"],
        d,
    );
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
    assert!(blkid(&img).contains("TYPE=ext4"), "refused, yet wiped");
    // replace: a healthy member without --force, a member that does not exist.
    ok(&sg(&["create", "a", "b", "c", "--size", "16M"], d));
    let out = sg(
        &[
            "replace",
            "a",
            "b",
            "c",
            "--member",
            "1",
            "--with",
            "e.img",
            "--force-overwrite",
            "e.img",
        ],
        d,
    );
    refused(&out, "is healthy; pass --force");
    let out = sg(
        &[
            "replace",
            "a",
            "b",
            "c",
            "--member",
            "7",
            "--with",
            "e.img",
            "--force",
            "--force-overwrite",
            "e.img",
        ],
        d,
    );
    refused(&out, "the array has members 0 to 2");
    assert!(blkid(&img).contains("TYPE=ext4"), "refused, yet wiped");
}

/// From an outside attack: a member whose first superblock copy was zeroed is still a member
/// (the second copy says so); the same NBD export named twice is one device.
#[test]
fn a_member_with_one_copy_left_and_an_export_named_twice_are_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "a", "b", "c", "--size", "16M"], d));
    let mut f = std::fs::File::options()
        .write(true)
        .open(d.join("a"))
        .unwrap();
    std::io::Write::write_all(&mut f, &[0u8; 512]).unwrap();
    drop(f);
    ok(&sg(&["status", "a", "b", "c"], d));
    refused(
        &sg(&["create", "a", "n1", "n2", "--size", "16M"], d),
        "a is member 0 of stripeguard array",
    );
    if !have("nbdkit") {
        eprintln!("SKIP (the NBD half): nbdkit is not installed");
        return;
    }
    std::fs::File::create(d.join("e.img"))
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let sock = d.join("n.sock");
    let _nbdkit = nbdkit_file(&sock, d.join("e.img"));
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let with_timeout = format!("{uri}&timeout=5");
    refused(
        &sg(&["create", &uri, &with_timeout, "z", "--size", "32M"], d),
        "the same file or device",
    );
}

/// From an outside attack: a current member of the array, named as an NBD export, is not a
/// replacement target, whatever the flags (taking it would destroy the member it is).
#[test]
fn another_current_member_is_never_a_replacement_target() {
    need!("nbdkit");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "a", "b", "c", "--size", "16M"], d));
    let sock = d.join("a.sock");
    let _nbdkit = nbdkit_file(&sock, d.join("a"));
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let out = sg(
        &[
            "replace",
            "a",
            "b",
            "c",
            "--member",
            "1",
            "--with",
            &uri,
            "--force",
            "--force-take",
            &uri,
        ],
        d,
    );
    refused(&out, "is member 0 of this array");
    ok(&sg(&["status", "a", "b", "c"], d));
}

/// From an outside attack: a target name the one-line control request cannot carry exactly
/// is refused, rather than another file named by what is left of it being written.
#[test]
fn a_name_the_holder_request_cannot_carry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "a", "b", "c", "--size", "16M"], d));
    std::fs::write(d.join("e.img"), b"precious").unwrap();
    let sock = d.join("s.sock");
    let _serve = serve(d, &["a", "b", "c"], &sock);
    let newline = "e.img\nfoo";
    std::fs::File::create(d.join(newline))
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let out = sg(
        &[
            "replace", "a", "b", "c", "--member", "1", "--with", newline, "--force",
        ],
        d,
    );
    refused(&out, "holds a newline");
    // A trailing space is part of the name: the file with it is written, not e.img.
    let spaced = "e.img ";
    let out = sg(
        &[
            "replace", "a", "b", "c", "--member", "1", "--with", spaced, "--force",
        ],
        d,
    );
    ok(&out);
    assert_eq!(std::fs::read(d.join("e.img")).unwrap(), b"precious");
    assert!(std::fs::metadata(d.join(spaced)).unwrap().len() > 1 << 20);
}

/// From an outside attack: a block device under a loop device is in use like a file under one.
#[test]
fn a_device_under_a_loop_device_is_in_use() {
    if !root() {
        eprintln!("SKIP: loop devices need root");
        return;
    }
    need!("losetup");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = d.join("w.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let lower = Loop::attach(&img);
    let upper = Loop(
        run(Command::new("losetup").args(["-f", "--show", "-o", "1048576", &lower.0]))
            .trim()
            .to_string(),
    );
    let out = sg(
        &[
            "create",
            &lower.0,
            "b",
            "c",
            "--size",
            "32M",
            "--force-overwrite",
            &lower.0,
        ],
        d,
    );
    refused(&out, &format!("it backs loop device {}", upper.0));
    drop(upper);
}
