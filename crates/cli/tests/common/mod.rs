//! What every end-to-end test of the binary does: run it in a directory, insist on success.
#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::process::{Command, Output};

/// Run `stripeguard ARGS` in `dir`.
pub fn sg(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run stripeguard")
}

/// The standard output of a run that must have succeeded.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard error of a run.
pub fn err_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `CMD MEMBERS... REST...` as arguments.
pub fn with<'a>(cmd: &[&'a str], members: &'a [String], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = cmd.to_vec();
    v.extend(members.iter().map(|s| s.as_str()));
    v.extend_from_slice(rest);
    v
}

/// Overwrite `bytes` at `offset` of a member file, as `dd conv=notrunc` does.
pub fn poke(member: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(member)
        .unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// `len` bytes at `offset` of a member file.
pub fn peek(member: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(member).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, offset).unwrap();
    b
}

/// `default`, or the binary named by `STRIPEGUARD_TEST_BIN` (to run a test file against an
/// older build and see its tests fail there).
#[allow(dead_code)]
pub fn bin_under_test(default: &'static str) -> &'static str {
    match std::env::var("STRIPEGUARD_TEST_BIN") {
        Ok(b) if !b.is_empty() => Box::leak(b.into_boxed_str()),
        _ => default,
    }
}
pub mod xfer;

/// Whether `tool` is on the PATH (tests that need it skip, saying so, when not).
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn have(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
#[allow(dead_code, reason = "not every test binary uses every helper")]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `nbdinfo --map` output: one (offset, length, flags) per line.
pub fn nbd_map(stdout: &[u8]) -> Vec<(u64, u64, u32)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}
