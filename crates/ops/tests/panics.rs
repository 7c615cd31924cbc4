//! The panic policy: with [`stripeguard_ops::abort_on_panic`] a panic on any thread aborts the
//! whole process (SIGABRT) after its message; without it (the negative control) the same panic
//! on a worker thread leaves the process running and exiting 0, as a dead `serve` worker would.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// Run this test binary's `panicking_child` test in a process of its own.
fn run_child(policy: bool) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "panicking_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SG_PANIC_CHILD", if policy { "abort" } else { "default" })
        .output()
        .unwrap()
}

/// Not a test of its own: the body the two runs above execute.
#[test]
fn panicking_child() {
    let Some(mode) = std::env::var_os("SG_PANIC_CHILD") else {
        return;
    };
    if mode == "abort" {
        stripeguard_ops::abort_on_panic();
    }
    let worker = std::thread::spawn(|| panic!("a worker's bug"));
    let _ = worker.join();
    println!("the process went on");
}

#[test]
fn a_panic_on_any_thread_aborts_the_process() {
    let out = run_child(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc_sigabrt()), "{out:?}");
    assert!(
        err.contains("a worker's bug") && err.contains("aborting"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("the process went on"));
    // Negative control: without the policy the worker dies alone and the process goes on.
    let out = run_child(false);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("the process went on"));
}

/// SIGABRT on Linux.
fn libc_sigabrt() -> i32 {
    6
}
