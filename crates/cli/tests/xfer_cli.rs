//! `stripeguard send` / `recv` as a user runs them: a tree round trip over a remote-shell
//! command, a re-run that skips what is verified, a hostile stream that tries to leave the
//! directory, and (as root) RIVA's extreme-injection test on ext4 over a loop device, with
//! `rsync --checksum` and a plain hash of the received file as the negative controls.

mod common;

use common::{err_of, ok};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn sg_bin() -> &'static str {
    env!("CARGO_BIN_EXE_stripeguard")
}

/// A directory on a disk-backed filesystem (verification reads from the device; tmpfs has none).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sg-xfer-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    let big: Vec<u8> = (0..(3u32 << 20) + 777)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("sub/small.txt"), b"hello\n").unwrap();
    std::fs::write(root.join("sub/deeper/empty"), b"").unwrap();
    std::os::unix::fs::symlink("big.bin", root.join("link")).unwrap();
}

fn same_tree(a: &Path, b: &Path) {
    let out = Command::new("diff")
        .arg("-r")
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn send_via(src: &Path, rsh: &str, extra: &[&str]) -> std::process::Output {
    Command::new(sg_bin())
        .arg("send")
        .arg(src)
        .args(["--json", "--rsh", rsh])
        .args(extra)
        .output()
        .unwrap()
}

fn json(out: &std::process::Output) -> serde_json::Value {
    let text = ok(out);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap()
}

#[test]
fn a_tree_arrives_verified_and_a_rerun_sends_nothing() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let dst = d.path().join("dst");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    let first = json(&send_via(&src, &rsh, &[]));
    assert_eq!(first["files"], 3, "{first}");
    same_tree(&src, &dst.join("src"));
    let m1 = std::fs::metadata(src.join("big.bin")).unwrap();
    let m2 = std::fs::metadata(dst.join("src/big.bin")).unwrap();
    assert_eq!(m1.modified().unwrap(), m2.modified().unwrap(), "mtime kept");
    assert!(std::fs::symlink_metadata(dst.join("src/link"))
        .unwrap()
        .file_type()
        .is_symlink());
    // --verify-source reads each block back from the sender's device first; same result.
    let dst_vs = d.path().join("dst-vs");
    let rsh_vs = format!("{} recv --stdio --dir {}", sg_bin(), dst_vs.display());
    let vs = json(&send_via(&src, &rsh_vs, &["--verify-source"]));
    assert_eq!(vs["files"], 3, "{vs}");
    same_tree(&src, &dst_vs.join("src"));
    let again = json(&send_via(&src, &rsh, &[]));
    assert_eq!(again["skipped"], 3, "{again}");
    assert_eq!(again["bytes_sent"], 0, "{again}");
    // A changed file is sent again; the others are not.
    std::fs::write(src.join("sub/small.txt"), b"changed\n").unwrap();
    let third = json(&send_via(&src, &rsh, &[]));
    assert_eq!(
        (third["files"].clone(), third["skipped"].clone()),
        (1.into(), 2.into()),
        "{third}"
    );
    same_tree(&src, &dst.join("src"));
}

/// Frames as a hostile sender would write them.
fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn file_frame(path: &str) -> Vec<u8> {
    let h = stripeguard_xfer::proto::FileHeader {
        path: path.into(),
        kind: 0,
        size: 4,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
        target: String::new(),
        block_size: 4096,
        hash: [0; 32],
    };
    frame(1, &h.encode())
}

#[test]
fn a_hostile_stream_cannot_write_outside_the_directory() {
    let d = scratch();
    let dst = d.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    // A symlink inside DIR that points out of it must not be followed either.
    std::os::unix::fs::symlink(d.path(), dst.join("escape")).unwrap();
    for (name, bytes) in [
        (
            "dotdot",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                file_frame("../evil"),
            ]
            .concat(),
        ),
        (
            "absolute",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                file_frame("/tmp/evil"),
            ]
            .concat(),
        ),
        (
            "through a symlink",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                file_frame("escape/evil"),
            ]
            .concat(),
        ),
        (
            "huge frame",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                vec![3, 0xff, 0xff, 0xff, 0x7f],
            ]
            .concat(),
        ),
        (
            "wrong version",
            [b"SGXF".to_vec(), vec![9, 0, 0, 0, 0, 0]].concat(),
        ),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        (
            "a partial's name",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                file_frame(".ok.sgpart"),
            ]
            .concat(),
        ),
        (
            "truncated",
            [
                b"SGXF".to_vec(),
                vec![1, 0, 0, 0, 0, 0],
                file_frame("ok")[..20].to_vec(),
            ]
            .concat(),
        ),
    ] {
        let mut c = Command::new(sg_bin())
            .args(["recv", "--stdio", "--dir"])
            .arg(&dst)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let _ = c.stdin.take().unwrap().write_all(&bytes);
        let out = c.wait_with_output().unwrap();
        let err = err_of(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.starts_with("stripeguard: error:") && !err.contains("panicked"),
            "{name}: {err}"
        );
    }
    assert!(!d.path().join("evil").exists() && !Path::new("/tmp/evil").exists());
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Flip one bit in every 4 KiB page of [OFFSET, OFFSET+LEN) of FILE, on the loop device's
/// backing file (found with FIEMAP), once per block: the page cache keeps the good bytes.
const HOOK: &str = r#"#!/usr/bin/python3
import fcntl, os, struct, sys
FS_IOC_FIEMAP = 0xC020660B
def extents(path):
    fd = os.open(path, os.O_RDONLY)
    n = 1024
    buf = bytearray(struct.pack('=QQIIII', 0, 0xFFFFFFFFFFFFFFFF, 1, 0, n, 0) + bytes(56 * n))
    fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    os.close(fd)
    mapped = struct.unpack_from('=I', buf, 20)[0]
    return [struct.unpack_from('=QQQ', buf, 32 + 56 * i) for i in range(mapped)]
def flip(path, off, length, backing):
    fd = os.open(backing, os.O_RDWR)
    flipped = 0
    ext = extents(path)
    for page in range(off, off + length, 4096):
        for lo, ph, ln in ext:
            if lo <= page < lo + ln:
                at = ph + (page - lo)
                b = bytearray(os.pread(fd, 1, at)); b[0] ^= 1; os.pwrite(fd, bytes(b), at)
                flipped += 1
                break
    os.fsync(fd); os.close(fd)
    return flipped
if __name__ == '__main__':
    path, off, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    state = os.environ['SG_HOOK_STATE']
    key = f"{os.path.basename(path)}:{off}"
    done = set(open(state).read().split()) if os.path.exists(state) else set()
    if key not in done:
        n = flip(path, off, length, os.environ['SG_HOOK_BACKING'])
        if n:
            open(state, 'a').write(key + "\n")
"#;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn digest(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    digest_of(&bytes)
}

fn digest_of(b: &[u8]) -> String {
    use std::hash::Hasher;
    // Any strong-enough digest will do for comparing two copies; keep it dependency-free.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(b);
    format!("{:016x}{}", h.finish(), b.len())
}

fn drop_caches() {
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

struct Mounted {
    loopdev: String,
    mnt: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
    }
}

#[test]
fn extreme_injection_on_the_receivers_device_is_found_and_repaired_and_the_controls_miss_it() {
    if !is_root() {
        eprintln!("skipping: the extreme-injection test needs root (losetup, mount)");
        return;
    }
    for t in ["losetup", "mkfs.ext4", "mount", "rsync"] {
        if !have(t) {
            eprintln!("skipping: {t} is not installed (scripts/install-deps installs it)");
            return;
        }
    }
    let d = scratch();
    let backing = d.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(384 << 20)
        .unwrap();
    // Buffered loop (no --direct-io): the backing file is what the device returns.
    let loopdev = run(Command::new("losetup").args(["-f", "--show"]).arg(&backing))
        .trim()
        .to_string();
    let mnt = d.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let _m = Mounted {
        loopdev: loopdev.clone(),
        mnt: mnt.clone(),
    };
    run(Command::new("mkfs.ext4").args(["-q", "-F", &loopdev]));
    run(Command::new("mount").arg(&loopdev).arg(&mnt));
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (name, len) in [("f4k", 4096usize), ("f1m", 1 << 20), ("f64m", 64 << 20)] {
        let data: Vec<u8> = (0..len)
            .map(|i| ((i as u64).wrapping_mul(0x9E3779B97F4A7C15) >> 56) as u8)
            .collect();
        std::fs::write(src.join(name), data).unwrap();
    }
    let hook = d.path().join("hook.py");
    std::fs::write(&hook, HOOK).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = d.path().join("hook.state");
    let rsh = format!(
        "SG_HOOK_STATE={} SG_HOOK_BACKING={} STRIPEGUARD_XFER_TEST_HOOK={} {} recv --stdio --json --dir {}",
        state.display(),
        backing.display(),
        hook.display(),
        sg_bin(),
        mnt.join("dst").display()
    );
    let manifest = d.path().join("manifest");
    let mf = manifest.display().to_string();
    let out = send_via(&src, &rsh, &["--block-size", "1M", "--manifest", &mf]);
    let sent = json(&out);
    let injected = std::fs::read_to_string(&state)
        .unwrap_or_default()
        .lines()
        .count() as u64;
    eprintln!("send: {sent}\nreceiver: {}", err_of(&out));
    assert!(
        injected >= 66,
        "every block of every file was damaged on the device: {injected}"
    );
    assert_eq!(sent["files"], 3, "{sent}");
    assert_eq!(
        sent["blocks_retried"].as_u64(),
        Some(injected),
        "every injected block was found and sent again"
    );
    drop_caches();
    for f in ["f4k", "f1m", "f64m"] {
        assert_eq!(
            digest(&src.join(f)),
            digest(&mnt.join("dst/src").join(f)),
            "{f} on the device"
        );
    }

    // The manifest checks from the device: intact now; after damage under the page cache (the
    // received f1m's blocks flipped on the device while its pages are cached) it fails.
    let dst = mnt.join("dst");
    let vm = |args: &[&str]| {
        Command::new(sg_bin())
            .arg("verify-manifest")
            .arg(&dst)
            .arg(&manifest)
            .args(args)
            .output()
            .unwrap()
    };
    ok(&vm(&[]));
    let received = dst.join("src/f1m");
    let _ = std::fs::read(&received).unwrap(); // in the page cache
    run(Command::new(&hook)
        .arg(&received)
        .args(["0", &(1u32 << 20).to_string()])
        .env("SG_HOOK_STATE", d.path().join("manifest.state"))
        .env("SG_HOOK_BACKING", &backing));
    let bad = vm(&[]);
    assert_eq!(
        bad.status.code(),
        Some(1),
        "verify-manifest missed damage under the page cache: {}",
        String::from_utf8_lossy(&bad.stdout)
    );
    assert!(String::from_utf8_lossy(&bad.stdout).contains("src/f1m"));

    // Negative control 1: a plain copy, then "hash the received file" — the page cache answers.
    let plain = mnt.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(src.join("f1m"), plain.join("f1m")).unwrap();
    run(&mut Command::new("sync"));
    let p = plain.join("f1m");
    let _ = std::fs::read(&p).unwrap(); // in the page cache, whatever else the machine runs
    run(Command::new(&hook)
        .arg(&p)
        .args(["0", &(1u32 << 20).to_string()])
        .env("SG_HOOK_STATE", d.path().join("plain.state"))
        .env("SG_HOOK_BACKING", &backing));
    assert_eq!(
        digest(&p),
        digest(&src.join("f1m")),
        "the plain hash reads the page cache: it misses the damage"
    );
    // Negative control 2: rsync --checksum decides there is nothing to do. (A 1 MiB file, read
    // just before the damage, so its pages are surely cached whatever else the machine runs.)
    let rs = mnt.join("rsync");
    std::fs::create_dir_all(&rs).unwrap();
    run(Command::new("rsync")
        .arg("-a")
        .arg(src.join("f1m"))
        .arg(&rs));
    run(&mut Command::new("sync"));
    let _ = std::fs::read(rs.join("f1m")).unwrap();
    run(Command::new(&hook)
        .arg(rs.join("f1m"))
        .args(["0", &(1u32 << 20).to_string()])
        .env("SG_HOOK_STATE", d.path().join("rsync.state"))
        .env("SG_HOOK_BACKING", &backing));
    let itemized = run(Command::new("rsync")
        .args(["-a", "--checksum", "--itemize-changes"])
        .arg(src.join("f1m"))
        .arg(&rs));
    assert!(
        itemized.trim().is_empty(),
        "rsync --checksum saw a difference: {itemized}"
    );
    // Both damages are real: from the device, both copies differ from the source.
    drop_caches();
    assert_ne!(
        digest(&p),
        digest(&src.join("f1m")),
        "the plain copy is damaged on the device"
    );
    assert_ne!(
        digest(&rs.join("f1m")),
        digest(&src.join("f1m")),
        "rsync's copy is damaged on the device"
    );
}

/// A transfer killed with SIGKILL at random points resumes to a verified result, sending less
/// than the whole the second time.
#[test]
fn a_transfer_killed_at_random_points_resumes_to_a_verified_result() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..(48u32 << 20))
        .map(|i| (i.wrapping_mul(2246822519) >> 9) as u8)
        .collect();
    std::fs::write(src.join("big"), &data).unwrap();
    std::fs::write(src.join("small"), b"small file").unwrap();
    let dst = d.path().join("dst");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    for (round, wait_ms) in [150u64, 400, 700].into_iter().enumerate() {
        let mut c = Command::new(sg_bin())
            .arg("send")
            .arg(&src)
            .args(["--json", "--block-size", "256K", "--rsh", &rsh])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        let _ = c.kill();
        let _ = c.wait();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !dst.join("src/big").exists() || std::fs::read(dst.join("src/big")).unwrap() == data,
            "round {round}: a finished name holds wrong bytes"
        );
    }
    let fin = json(&send_via(&src, &rsh, &["--block-size", "256K"]));
    assert!(fin["failed"].as_array().unwrap().is_empty(), "{fin}");
    assert!(
        fin["bytes_sent"].as_u64().unwrap() < data.len() as u64,
        "nothing was resumed: {fin}"
    );
    same_tree(&src, &dst.join("src"));
    // No partial or progress file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dst.join("src"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("sgpart"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A receiver with --key-file takes only a sender that proves it holds the key.
#[test]
fn a_key_file_receiver_refuses_senders_without_the_key() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"payload").unwrap();
    let key = d.path().join("key");
    let other = d.path().join("other");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::write(&other, [8u8; 32]).unwrap();
    let dst = d.path().join("dst");
    let rsh = format!(
        "{} recv --stdio --dir {} --key-file {}",
        sg_bin(),
        dst.display(),
        key.display()
    );
    let k = key.display().to_string();
    let o = other.display().to_string();
    let none = send_via(&src, &rsh, &[]);
    assert_eq!(none.status.code(), Some(2), "{}", err_of(&none));
    assert!(err_of(&none).contains("--key-file"), "{}", err_of(&none));
    let wrong = send_via(&src, &rsh, &["--key-file", &o]);
    assert_eq!(wrong.status.code(), Some(2), "{}", err_of(&wrong));
    assert!(!dst.join("src/a").exists());
    let right = json(&send_via(&src, &rsh, &["--key-file", &k]));
    assert_eq!(right["files"], 1, "{right}");
    assert_eq!(std::fs::read(dst.join("src/a")).unwrap(), b"payload");
}

/// --owner and --xattrs keep the owner (as root) and extended attributes.
#[test]
fn owner_and_xattrs_are_kept_when_asked() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let f = src.join("f");
    std::fs::write(&f, b"attributes").unwrap();
    let py = |code: &str, p: &Path| {
        Command::new("/usr/bin/python3")
            .args(["-c", code])
            .arg(p)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let set = py(
        "import os,sys\ntry:\n os.setxattr(sys.argv[1], 'user.sg', b'blue'); print('ok')\nexcept OSError as e: print(e)",
        &f,
    );
    if set != "ok" {
        eprintln!("skipping the xattr part: this filesystem refuses user xattrs ({set})");
    }
    if is_root() {
        std::os::unix::fs::chown(&f, Some(1234), Some(4321)).unwrap();
    }
    let dst = d.path().join("dst");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    let out = json(&send_via(&src, &rsh, &["--owner", "--xattrs"]));
    assert_eq!(out["files"], 1, "{out}");
    let got = dst.join("src/f");
    if set == "ok" {
        assert_eq!(
            py(
                "import os,sys; print(os.getxattr(sys.argv[1], 'user.sg').decode())",
                &got
            ),
            "blue"
        );
    }
    if is_root() {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&got).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 4321));
    }
    // Without the flags neither is sent.
    let plain = d.path().join("plain");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), plain.display());
    json(&send_via(&src, &rsh, &[]));
    if set == "ok" {
        assert_ne!(
            py("import os,sys\ntry: print(os.getxattr(sys.argv[1], 'user.sg').decode())\nexcept OSError: print('none')", &plain.join("src/f")),
            "blue"
        );
    }
}

/// Outside attack: a symlink planted where the receiver keeps a partial (`.NAME.sgpart`, and
/// its progress file) must be removed, never followed — before the fix, the received bytes
/// went into the symlink's target outside DIR and the symlink was renamed to NAME.
#[test]
fn a_symlink_planted_as_a_partial_is_not_followed() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x"), b"the new bytes").unwrap();
    let victim = d.path().join("victim");
    let victim2 = d.path().join("victim2");
    std::fs::write(&victim, b"outside DIR").unwrap();
    std::fs::write(&victim2, b"outside DIR too").unwrap();
    let dst = d.path().join("dst");
    std::fs::create_dir_all(dst.join("src")).unwrap();
    std::os::unix::fs::symlink(&victim, dst.join("src/.x.sgpart")).unwrap();
    std::os::unix::fs::symlink(&victim2, dst.join("src/.x.sgpart.progress")).unwrap();
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    let out = json(&send_via(&src, &rsh, &[]));
    assert_eq!(out["files"], 1, "{out}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"outside DIR");
    assert_eq!(std::fs::read(&victim2).unwrap(), b"outside DIR too");
    let m = std::fs::symlink_metadata(dst.join("src/x")).unwrap();
    assert!(
        m.is_file(),
        "x must be a regular file, not the planted symlink"
    );
    assert_eq!(std::fs::read(dst.join("src/x")).unwrap(), b"the new bytes");
}

/// Two receivers on one directory: the partial is locked, and the second is refused with a
/// message naming it (before, both wrote it and a sender reported a mixed file "verified").
#[test]
fn a_second_receiver_of_the_same_file_is_refused() {
    use std::os::fd::AsRawFd;
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x"), vec![5u8; 100_000]).unwrap();
    let dst = d.path().join("dst");
    std::fs::create_dir_all(dst.join("src")).unwrap();
    // The other receiver: holds the partial's lock as `recv` does.
    let other = std::fs::File::create(dst.join("src/.x.sgpart")).unwrap();
    assert_eq!(
        unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    let out = send_via(&src, &rsh, &[]);
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("another stripeguard recv"), "{err}");
    assert!(!dst.join("src/x").exists());
    drop(other);
    let again = json(&send_via(&src, &rsh, &[]));
    assert_eq!(again["files"], 1, "{again}");
    assert_eq!(
        std::fs::read(dst.join("src/x")).unwrap(),
        vec![5u8; 100_000]
    );
}

/// A symlink given as an argument keeps its own name on the receiver (as with `cp -a`).
#[test]
fn a_symlink_argument_keeps_its_name() {
    let d = scratch();
    std::fs::write(d.path().join("target"), b"t").unwrap();
    std::os::unix::fs::symlink("target", d.path().join("lnk")).unwrap();
    let dst = d.path().join("dst");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dst.display());
    ok(&send_via(&d.path().join("lnk"), &rsh, &[]));
    let m = std::fs::symlink_metadata(dst.join("lnk")).unwrap();
    assert!(m.file_type().is_symlink());
    assert!(!dst.join("target").exists());
}

/// Wait for a child at most `secs`; a hang is a failure, not a stuck test run.
fn wait_bounded(mut c: std::process::Child, secs: u64) -> std::process::Output {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while c.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = c.kill();
            panic!("still running after {secs} s: hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    c.wait_with_output().unwrap()
}

/// A receiver whose device cannot be read back (ramfs keeps no device copy) ends the
/// transfer with that reason on both sides (before the fix both waited forever).
#[test]
fn a_receiver_that_cannot_verify_ends_the_transfer_with_the_reason() {
    if !is_root() {
        eprintln!("skipped: mounting ramfs needs root");
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x"), vec![1u8; 300_000]).unwrap();
    let mnt = d.path().join("ramfs");
    std::fs::create_dir_all(&mnt).unwrap();
    if !Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: cannot mount ramfs here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let rsh = format!(
        "{} recv --stdio --dir {}",
        sg_bin(),
        mnt.join("d").display()
    );
    let c = Command::new(sg_bin())
        .arg("send")
        .arg(&src)
        .args(["--rsh", &rsh])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(c, 120);
    let err = err_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot read") && err.contains("back from the device"),
        "{err}"
    );
    assert!(!mnt.join("d/src/x").exists());
}

/// `recv --listen` takes one sender: a second is told it is busy; a sender that goes silent
/// is given up after --idle-timeout.
#[test]
fn a_listening_receiver_refuses_a_second_sender_and_times_out_a_silent_one() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("x"), b"x").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let recv = Command::new(sg_bin())
        .args(["recv", "--listen", &addr, "--idle-timeout", "3", "--dir"])
        .arg(d.path().join("dst"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tries = 0;
    let first = loop {
        match std::net::TcpStream::connect(&addr) {
            Ok(s) => break s,
            Err(e) if tries < 200 => {
                tries += 1;
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("the receiver never listened: {e}"),
        }
    };
    let second = Command::new(sg_bin())
        .arg("send")
        .arg(&src)
        .args(["--to", &addr])
        .output()
        .unwrap();
    let err = err_of(&second);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains("busy"), "{err}");
    let out = wait_bounded(recv, 60);
    drop(first);
    let rerr = err_of(&out);
    assert_eq!(out.status.code(), Some(2), "{rerr}");
    assert!(rerr.contains("--idle-timeout"), "{rerr}");
}
