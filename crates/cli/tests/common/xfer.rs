//! What the transfer's end-to-end tests share (xfer_cli, xfer_files, xfer_attacks).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The binary under test: this build's, or another named by `STRIPEGUARD_TEST_BIN` (how these
/// tests were shown to fail on the build before them).
pub fn sg_bin() -> &'static str {
    super::bin_under_test(env!("CARGO_BIN_EXE_stripeguard"))
}

/// A directory on a disk-backed filesystem (verification reads from the device; tmpfs has none).
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sg-xfer-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Is `tool` on the PATH?
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A frame as a hostile peer would write it: u8 type, u32 length, payload.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// `stripeguard keygen PATH`: a new shared key there.
pub fn keygen(path: &Path) {
    let out = Command::new(sg_bin())
        .arg("keygen")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `diff -r` finds no difference.
pub fn same_tree(a: &Path, b: &Path) {
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

/// A mount that is unmounted when dropped.
pub struct Mounted(pub PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `mount ARGS... DIR`, unmounted when the result drops; `None` (the caller skips, saying why)
/// when this machine cannot mount it.
pub fn mount(args: &[&OsStr], dir: &Path) -> Option<Mounted> {
    Command::new("mount")
        .args(args)
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
        .then(|| Mounted(dir.to_path_buf()))
}
