//! `stripeguard bench io --members URI... --scratch URI...` (issue 41): the engine on NBD
//! exports against fio's nbd engine replaying each member's recorded I/O. Bad arguments are
//! refused by name; a small run on qemu-nbd exports over unix sockets prints every row with a
//! floor (skipped, saying why, without qemu-nbd or fio).

mod common;

use common::{err_of, ok, sg};
use std::process::{Child, Command, Stdio};

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn bad_member_lists_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = sg(
        &[
            "bench",
            "io",
            "--shape",
            "2+1",
            "--members",
            "nbd://a/",
            "nbd://b/",
            "--scratch",
            "nbd://c/",
            "nbd://d/",
            "nbd://e/",
        ],
        d,
    );
    assert!(!out.status.success());
    let e = err_of(&out);
    assert!(
        e.contains("needs 3 --members and 3 --scratch") && e.contains("got 2 and 3"),
        "{e}"
    );
    let out = sg(
        &[
            "bench",
            "io",
            "--shape",
            "1+1",
            "--members",
            "/tmp/a",
            "nbd://b/",
            "--scratch",
            "nbd://c/",
            "nbd://d/",
        ],
        d,
    );
    assert!(!out.status.success());
    assert!(
        err_of(&out).contains("/tmp/a is not an NBD URI"),
        "{}",
        err_of(&out)
    );
    // --scratch alone is an argument error.
    let out = sg(&["bench", "io", "--scratch", "nbd://c/"], d);
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
}

struct Exports(Vec<Child>);

impl Drop for Exports {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_small_run_on_exports_has_a_floor_for_every_row() {
    for tool in ["qemu-nbd", "fio"] {
        if !have(tool) {
            eprintln!("skipping: {tool} is not installed (scripts/install-deps)");
            return;
        }
    }
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(base).unwrap();
    let d = dir.path();
    let mut exports = Exports(Vec::new());
    let mut uris = Vec::new();
    for name in ["m0", "m1", "m2", "s0", "s1", "s2"] {
        let file = d.join(name);
        std::fs::write(&file, vec![7u8; 24 << 20]).unwrap();
        let sock = d.join(format!("{name}.sock"));
        exports.0.push(
            Command::new("qemu-nbd")
                .args(["-t", "--shared=64", "-f", "raw", "-k"])
                .arg(&sock)
                .arg(&file)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        for _ in 0..200 {
            if sock.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        uris.push(format!("nbd+unix:///?socket={}", sock.display()));
    }
    let mut args = vec![
        "bench",
        "io",
        "--shape",
        "2+1",
        "--requests",
        "64",
        "--sequential",
        "8M",
        "--json",
        "--dir",
    ];
    let dir_arg = d.display().to_string();
    args.push(&dir_arg);
    args.push("--members");
    args.extend(uris[..3].iter().map(String::as_str));
    args.push("--scratch");
    args.extend(uris[3..].iter().map(String::as_str));
    let rows: serde_json::Value = serde_json::from_str(&ok(&sg(&args, d))).unwrap();
    let rows = rows.as_array().unwrap();
    // Two schemes, eight workloads (the six of member files and two sequential at qd 32).
    assert_eq!(rows.len(), 16, "{rows:?}");
    for r in rows {
        assert_eq!(r["remote"], true);
        assert!(r["floor_seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["engine_seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["member_ios_per_request"].as_f64().unwrap() >= 1.0, "{r}");
        // What the planner planned for it, beside (the plan's count of unit I/Os).
        assert!(r["planned_ios_per_request"].as_f64().unwrap() >= 1.0, "{r}");
        // The serial floor (each member's job in turn) only at queue depth 1.
        assert_eq!(
            r["serial_floor_seconds"].is_null(),
            r["queue_depth"] != 1,
            "{r}"
        );
    }
}
