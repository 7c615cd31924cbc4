//! RIVA's extreme-injection test (papers/002), in-process so that its hook exists only in test
//! builds: on ext4 over a buffered loop device, every block of every file is damaged on the
//! device (the loop device's backing file) after it was made durable and before it is read back,
//! while the page cache still holds the good bytes. The receiver must find every one and the
//! sender resend it; `verify_manifest` must find damage under the page cache later; a plain
//! hash of a copied file and `rsync --checksum` are the negative controls that miss it.

use crate::{receive, send, verify_manifest, RecvOptions, SendOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

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

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn digest(path: &Path) -> [u8; 32] {
    *blake3::hash(&std::fs::read(path).unwrap()).as_bytes()
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

/// Damage `[off, off + len)` of `path` on the device, once per (file, offset) key.
fn flip(hook: &Path, path: &Path, off: u64, len: usize, state: &Path, backing: &Path) {
    run(Command::new(hook)
        .arg(path)
        .args([off.to_string(), len.to_string()])
        .env("SG_HOOK_STATE", state)
        .env("SG_HOOK_BACKING", backing));
}

#[test]
fn extreme_injection_on_the_receivers_device_is_found_and_repaired_and_the_controls_miss_it() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipping: the extreme-injection test needs root (losetup, mount)");
        return;
    }
    for t in ["losetup", "mkfs.ext4", "mount", "rsync", "python3"] {
        if !have(t) {
            eprintln!("skipping: {t} is not installed (scripts/install-deps installs it)");
            return;
        }
    }
    let d = tempfile::Builder::new()
        .prefix("sg-xfer-inject-")
        .tempdir_in("/var/tmp")
        .unwrap();
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
    let mut ropts = RecvOptions::new(mnt.join("dst"));
    {
        let (hook, state, backing) = (hook.clone(), state.clone(), backing.clone());
        // The partial, reached through this process's descriptor (its key is the file and
        // the offset, so each block is damaged on its first transmission only).
        ropts.hook = Some(Arc::new(move |f: &std::fs::File, off: u64, len: usize| {
            use std::os::fd::AsRawFd;
            let p = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()));
            let ino = std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
            let link = d_link(&p, ino);
            flip(&hook, &link, off, len, &state, &backing);
        }));
    }
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let receiver = std::thread::spawn(move || receive(b.try_clone().unwrap(), b, &ropts));
    let manifest = d.path().join("manifest");
    let sopts = SendOptions {
        block_size: 1 << 20,
        manifest: Some(manifest.clone()),
        ..SendOptions::default()
    };
    let sent = send(
        std::slice::from_ref(&src),
        a.try_clone().unwrap(),
        a,
        &sopts,
        &mut |_, _| {},
    )
    .unwrap();
    let got = receiver.join().unwrap().unwrap();
    let injected = std::fs::read_to_string(&state)
        .unwrap_or_default()
        .lines()
        .count() as u64;
    eprintln!("send: {sent:?}\nreceiver: {got:?}");
    assert!(
        injected >= 66,
        "every block of every file was damaged on the device: {injected}"
    );
    assert_eq!(sent.files, 3, "{sent:?}");
    assert_eq!(
        sent.blocks_retried, injected,
        "every injected block was found and sent again"
    );
    assert_eq!(got.blocks_mismatched, injected);
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
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(verify_manifest(&dst, &text).unwrap().iter().all(|r| r.ok));
    let received = dst.join("src/f1m");
    let _ = std::fs::read(&received).unwrap(); // in the page cache
    flip(
        &hook,
        &received,
        0,
        1 << 20,
        &d.path().join("manifest.state"),
        &backing,
    );
    let bad = verify_manifest(&dst, &text).unwrap();
    let failed: Vec<_> = bad
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        failed,
        ["src/f1m"],
        "verify-manifest missed damage under the page cache"
    );

    // Negative control 1: a plain copy, then "hash the received file" — the page cache answers.
    let plain = mnt.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(src.join("f1m"), plain.join("f1m")).unwrap();
    run(&mut Command::new("sync"));
    let p = plain.join("f1m");
    let _ = std::fs::read(&p).unwrap();
    flip(
        &hook,
        &p,
        0,
        1 << 20,
        &d.path().join("plain.state"),
        &backing,
    );
    assert_eq!(
        digest(&p),
        digest(&src.join("f1m")),
        "the plain hash reads the page cache: it misses the damage"
    );
    // Negative control 2: rsync --checksum decides there is nothing to do.
    let rs = mnt.join("rsync");
    std::fs::create_dir_all(&rs).unwrap();
    run(Command::new("rsync")
        .arg("-a")
        .arg(src.join("f1m"))
        .arg(&rs));
    run(&mut Command::new("sync"));
    let _ = std::fs::read(rs.join("f1m")).unwrap();
    flip(
        &hook,
        &rs.join("f1m"),
        0,
        1 << 20,
        &d.path().join("rsync.state"),
        &backing,
    );
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

/// A stable name for the hook's state key: the magic link itself (FIEMAP works through it);
/// the inode keeps the key the same across the descriptor numbers of one file.
fn d_link(p: &Path, ino: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sg-inject-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let l = dir.join(format!("ino{ino}"));
    let _ = std::fs::remove_file(&l);
    std::os::unix::fs::symlink(p, &l).unwrap();
    l
}
