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
