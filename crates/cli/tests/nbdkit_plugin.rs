//! The nbdkit plugin (crates/nbdkit-plugin, `libstripeguard_nbdkit.so`) proven by the same real
//! clients as `stripeguard serve` in nbd_clients.rs: nbdinfo, qemu-img, and fio's verify across
//! members damaged by hand, with the `none` scheme failing the same verify. Each test skips with
//! a printed reason when nbdkit or a client is missing (scripts/install-deps installs them).
//!
//! The plugin is a dev-dependency of this crate, so cargo builds the `.so` with these tests;
//! they find it in the target directory they run from.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;
#[macro_use]
mod nbd_common;

use common::{ok, sg};
use nbd_common::{create, damage, fio_job, python, run, Served, MEMBERS};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `libstripeguard_nbdkit.so` of this build: beside the test binary in `deps/`, or uplifted to
/// the profile's directory.
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("deps/");
    let profile = deps.parent().expect("the profile's directory");
    [deps, profile]
        .iter()
        .map(|d| d.join("libstripeguard_nbdkit.so"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libstripeguard_nbdkit.so is not in {} nor {}: stripeguard-nbdkit is a dev-dependency of this crate, so cargo should have built it",
                deps.display(),
                profile.display()
            )
        })
}

/// Start `nbdkit -f` with the plugin on the members in `dir` at a unix socket; `options` go
/// before the plugin (nbdkit's own, such as `-r`). Members are given relative to `dir`, as a
/// user in that directory would.
fn nbdkit(dir: &Path, options: &[&str]) -> Served {
    let sock = dir.join("nbdkit.sock");
    let _ = std::fs::remove_file(&sock);
    let stderr = dir.join(format!(
        "nbdkit-{}.err",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let child = Command::new("nbdkit")
        .arg("-f")
        .arg("--unix")
        .arg(&sock)
        .args(options)
        .arg(plugin())
        .arg(format!("members={}", MEMBERS.join(",")))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start nbdkit");
    let mut s = Served {
        child,
        uri: format!("nbd+unix:///?socket={}", sock.display()),
        stderr,
    };
    let t = Instant::now();
    // The file appears at bind(), a moment before nbdkit listens: wait for a connection.
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!(
                "nbdkit exited ({status}) before listening: {}",
                std::fs::read_to_string(&s.stderr).unwrap_or_default()
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "nbdkit did not listen: {}",
            std::fs::read_to_string(&s.stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

/// Stop nbdkit with SIGTERM; insist it exited cleanly and closed the array clean. Returns the
/// counts from the plugin's last line: (units found wrong, repaired, unrecoverable stripes).
fn stop_clean(s: Served) -> (u64, u64, u64) {
    let (status, _, err) = s.stop();
    assert!(status.success(), "nbdkit: {status}: {err}");
    let line = err
        .lines()
        .find(|l| l.contains("array flushed and closed clean"))
        .unwrap_or_else(|| panic!("the plugin did not close the array clean at unload: {err}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    // (member failures, units found wrong, repaired, unrecoverable stripes)
    assert_eq!(nums.len(), 4, "{line}");
    (nums[1], nums[2], nums[3])
}

fn status_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&sg(
        &[&["status"][..], &MEMBERS[..], &["--json"]].concat(),
        dir,
    )))
    .expect("status --json")
}

#[test]
fn nbdinfo_reports_the_size_and_flags_and_status_sees_the_holder() {
    need!("nbdkit", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "8M");
    let capacity = status_json(dir.path())["capacity_bytes"]
        .as_u64()
        .expect("capacity in status --json");
    let s = nbdkit(dir.path(), &[]);
    let out = run(Command::new("nbdinfo").args(["--json", &s.uri]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &info["exports"][0];
    assert_eq!(e["export-size"].as_u64(), Some(capacity), "{info}");
    for (flag, want) in [
        ("is_read_only", false),
        ("can_multi_conn", true),
        ("can_flush", true),
        ("can_fua", true),
        ("can_trim", true),
        ("can_zero", true),
        // Offered; every fast zero fails at once (FORMAT.md §4).
        ("can_fast_zero", true),
        ("can_cache", true),
    ] {
        assert_eq!(e[flag].as_bool(), Some(want), "{flag}: {info}");
    }
    // The plugin holds the array (exclusively, it is writable) and answers status through the
    // engine's control socket, with its own counters beside the engine's.
    let live = status_json(dir.path());
    assert_eq!(
        live["in_use_by"].as_u64(),
        Some(s.child.id() as u64),
        "{live}"
    );
    let front_end = live["live"]["front_end"].to_string();
    assert!(front_end.contains("requests"), "{live}");
    stop_clean(s);
    assert_eq!(status_json(dir.path())["state"], "clean");

    // nbdkit -r: the array is assembled read-only, and the export says so.
    let s = nbdkit(dir.path(), &["-r"]);
    let out = run(Command::new("nbdinfo").args(["--json", &s.uri]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        info["exports"][0]["is_read_only"].as_bool(),
        Some(true),
        "{info}"
    );
    stop_clean(s);
}

#[test]
fn a_wrong_member_list_stops_nbdkit_at_start() {
    need!("nbdkit");
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "8M");
    std::fs::write(dir.path().join("stranger"), vec![0u8; 1 << 20]).unwrap();
    let out = Command::new("nbdkit")
        .args(["-f", "--unix"])
        .arg(dir.path().join("x.sock"))
        .arg(plugin())
        .arg("members=stranger,stranger2")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("assembling the array"), "{err}");
    // And without members= at all.
    let out = Command::new("nbdkit")
        .args(["-f", "--unix"])
        .arg(dir.path().join("x.sock"))
        .arg(plugin())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("members=PATH,PATH,... or array=NAME is required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn qemu_img_converts_an_image_in_and_out_byte_identical() {
    need!("nbdkit", "qemu-img");
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "16M");
    let img = dir.path().join("in.img");
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&img, &data).unwrap();
    let s = nbdkit(dir.path(), &[]);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(&s.uri));
    stop_clean(s);
    // Out through a fresh nbdkit, so the bytes come from the members, not from anything the
    // first process held.
    let s = nbdkit(dir.path(), &["-r"]);
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
    stop_clean(s);
}

/// Write with fio through the plugin (verified as it goes), damage the stopped array, verify
/// again through a fresh nbdkit: returns whether the verify-only pass succeeded and the
/// plugin's (found wrong, repaired, unrecoverable) counts of that pass.
fn fio_damage_round(scheme: &str) -> (bool, (u64, u64, u64)) {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), scheme, "8M");
    let s = nbdkit(dir.path(), &[]);
    run(fio_job(&s.uri, false).current_dir(dir.path()));
    stop_clean(s);
    damage(dir.path());
    let s = nbdkit(dir.path(), &[]);
    let verified = fio_job(&s.uri, true)
        .current_dir(dir.path())
        .output()
        .unwrap()
        .status
        .success();
    (verified, stop_clean(s))
}

#[test]
fn fio_verifies_through_the_plugin_and_after_members_are_damaged_by_hand() {
    need!("nbdkit", "fio");
    let (verified, (located, repaired, unrecoverable)) = fio_damage_round("hybrid-seq");
    assert!(verified, "fio's verify-only pass failed on hybrid-seq");
    assert!(
        located > 0 && repaired > 0 && unrecoverable == 0,
        "found wrong {located}, repaired {repaired}, unrecoverable {unrecoverable}"
    );
    // The negative control: the same faults on bare RAID reach fio as wrong bytes.
    let (verified_none, _) = fio_damage_round("none");
    assert!(
        !verified_none,
        "fio's verify passed on `none` with damaged members: the damage missed the data fio reads"
    );
}

/// Beyond the fault model (four wrong units in one stripe of a 6+2 array) a read of that stripe
/// is `EIO` for that request only: the same connection then reads other stripes, right.
#[test]
fn an_unrecoverable_stripe_is_eio_for_that_request_only() {
    need!("nbdkit", "nbdcopy");
    if !Command::new(python())
        .args(["-c", "import nbd"])
        .status()
        .is_ok_and(|st| st.success())
    {
        eprintln!("skipping: python3's nbd module (python3-libnbd) is not installed");
        return;
    }
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "hybrid-seq", "8M");
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2246822519) >> 11) as u8)
        .collect();
    let img = dir.path().join("in.img");
    std::fs::write(&img, &data).unwrap();
    let s = nbdkit(dir.path(), &[]);
    run(Command::new("nbdcopy").arg(&img).arg(&s.uri));
    stop_clean(s);
    // FORMAT.md §2: the data area at 128 KiB, units of a 64 KiB chunk and its 512-byte appendix;
    // unit 0 of every member belongs to stripe 0, whatever its role.
    for m in &MEMBERS[..4] {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(m))
            .unwrap();
        f.write_at(&[0x5a; 4096], 128 * 1024 + 2048).unwrap();
    }
    let s = nbdkit(dir.path(), &[]);
    let stripe = 6 * 64 * 1024u64;
    let script = format!(
        "import errno, nbd, sys\n\
         h = nbd.NBD()\n\
         h.connect_uri(sys.argv[1])\n\
         try:\n    h.pread(65536, 0)\n    print('read')\n\
         except nbd.Error as e:\n    print('errno', e.errno in ('EIO', errno.EIO), e.errno, e.string)\n\
         open('{out}', 'wb').write(h.pread({len}, {at}))\n",
        out = dir.path().join("after.bin").display(),
        len = 4 * stripe,
        at = 3 * stripe,
    );
    let out = run(Command::new(python())
        .args(["-c", &script, &s.uri])
        .current_dir(dir.path()));
    // libnbd's Python bindings name the errno ("EIO") in some versions, number it in others.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("errno True"),
        "the damaged stripe was not refused with EIO: {said}"
    );
    let after = std::fs::read(dir.path().join("after.bin")).unwrap();
    assert!(
        after[..] == data[3 * stripe as usize..7 * stripe as usize],
        "the stripes after the refused one came back different"
    );
    let (_, _, unrecoverable) = stop_clean(s);
    assert!(
        unrecoverable > 0,
        "the plugin counted no unrecoverable stripe"
    );
}

/// `array=NAME|UUID` (issue 36): the plugin finds the members as `scan` does, from the
/// configuration file, in any order.
#[test]
fn the_plugin_takes_the_array_by_name() {
    need!("nbdkit", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    create(d, "hybrid-seq", "8M");
    let st = status_json(d);
    let (uuid, capacity) = (
        st["uuid"].as_str().unwrap().to_string(),
        st["capacity_bytes"].as_u64().unwrap(),
    );
    let conf = d.join("c.conf");
    std::fs::write(&conf, format!("devices = [\"{}/*\"]\n", d.display())).unwrap();
    let sock = d.join("byname.sock");
    let mut child = Command::new("nbdkit")
        .args(["-f", "--unix"])
        .arg(&sock)
        .arg(plugin())
        .arg(format!("array={uuid}"))
        .env("STRIPEGUARD_CONFIG", &conf)
        .current_dir("/")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "nbdkit exited");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "nbdkit did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let out = run(Command::new("nbdinfo").args(["--json", &uri]));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        info["exports"][0]["export-size"].as_u64(),
        Some(capacity),
        "{info}"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    // Both, or an unknown name: refused at start, saying so.
    let out = Command::new("nbdkit")
        .args(["-f", "--unix"])
        .arg(&sock)
        .arg(plugin())
        .arg("array=nosuch")
        .env("STRIPEGUARD_CONFIG", &conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("array=nosuch"),
        "{out:?}"
    );
}

/// The conformance table of issue 37 (docs/NBD-CONFORMANCE.md), built by
/// `scripts/nbd-conformance` against the real servers of this machine: `serve` and the plugin
/// miss nothing that both qemu-nbd and nbdkit's file plugin offer, except the gaps the script
/// names with their reason.
#[test]
fn the_conformance_table_has_no_gap_but_the_named_ones() {
    for tool in ["nbdinfo", "qemu-nbd", "nbdkit", "python3"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
        {
            eprintln!("skipping the conformance table: {tool} is not installed");
            return;
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nbd-conformance");
    let out = Command::new(&script)
        .args([
            "--stripeguard",
            env!("CARGO_BIN_EXE_stripeguard"),
            "--plugin",
        ])
        .arg(plugin())
        .arg("--check")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The table the docs show is the one this build produces (the rows, at least).
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/NBD-CONFORMANCE.md"),
    )
    .unwrap();
    for row in table.lines().filter(|l| l.starts_with("| ")) {
        assert!(
            doc.contains(row),
            "docs/NBD-CONFORMANCE.md lacks the row {row:?}"
        );
    }
}
