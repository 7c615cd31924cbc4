//! The array commands end to end, as a user runs them: create, write, damage members with `dd`
//! and `stripeguard inject`, read back, status --check. Includes the Kroth & Yang experiment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sg(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run stripeguard")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}.img")).collect()
}

fn with<'a>(cmd: &[&'a str], members: &'a [String], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = cmd.to_vec();
    v.extend(members.iter().map(|s| s.as_str()));
    v.extend_from_slice(rest);
    v
}

fn random_file(path: &Path, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(2654435761)
                .rotate_left(seed as u32 % 63)
                >> 7) as u8
        })
        .collect();
    std::fs::write(path, &data).unwrap();
    data
}

/// Kroth & Yang's experiment: overwrite the first 750 chunks of one member's data area with
/// random bytes (`dd` from /dev/urandom), read the whole file back. Returns (identical, stderr).
fn kroth_yang(n: usize, level: &str, scheme: &str) -> (bool, u64, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(n);
    ok(&sg(
        &with(
            &["create"],
            &ms,
            &[
                "--size", "5M", "--level", level, "--scheme", scheme, "--chunk", "4K",
            ],
        ),
        d,
    ));
    let unit = if scheme == "none" { 4096 } else { 4608 };
    let cap_line = ok(&sg(&with(&["status"], &ms, &["--json"]), d));
    let status: serde_json::Value = serde_json::from_str(&cap_line).unwrap();
    let cap = status["capacity_bytes"].as_u64().unwrap() as usize;
    let data = random_file(&d.join("data.bin"), cap, 3);
    ok(&sg(&with(&["write"], &ms, &["--input", "data.bin"]), d));
    let dd = Command::new("dd")
        .args([
            "if=/dev/urandom",
            "of=m1.img",
            &format!("bs={unit}"),
            "oflag=seek_bytes",
            "seek=8192",
            "count=750",
            "conv=notrunc",
            "status=none",
        ])
        .current_dir(d)
        .status()
        .expect("dd");
    assert!(dd.success());
    let out = sg(
        &with(&["read"], &ms, &["--output", "back.bin", "--json"]),
        d,
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let back = std::fs::read(d.join("back.bin")).unwrap();
    // Full-stripe reads do not read parity; the check (a read-only scrub) finds the rest.
    let located_by_read = serde_json::from_str::<serde_json::Value>(&stderr).unwrap()["counters"]
        ["located"]
        .as_u64()
        .unwrap();
    let check = sg(&with(&["status"], &ms, &["--check", "--json"]), d);
    let check: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let located_by_check = check["counters"]["located"].as_u64().unwrap();
    (back == data, located_by_read + located_by_check, stderr)
}

#[test]
fn kroth_yang_raid5_and_raid6_every_scheme_with_none_failing() {
    for (n, level) in [(4, "5"), (6, "6")] {
        for scheme in ["pure", "hybrid1", "hybrid2", "hybrid-seq"] {
            let (same, located, stderr) = kroth_yang(n, level, scheme);
            assert!(same, "RAID-{level} {scheme}: file differs\n{stderr}");
            assert_eq!(
                located, 750,
                "RAID-{level} {scheme}: every overwritten unit is found"
            );
        }
        let (same, located, _) = kroth_yang(n, level, "none");
        assert_eq!(located, 0);
        assert!(
            !same,
            "negative control: RAID-{level} without integrity must return the random bytes"
        );
    }
}

#[test]
fn inject_then_check_then_read_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(5);
    ok(&sg(
        &with(
            &["create"],
            &ms,
            &[
                "--size", "2M", "--level", "5", "--scheme", "hybrid2", "--chunk", "8K",
            ],
        ),
        d,
    ));
    let data = random_file(&d.join("f"), 300_000, 9);
    ok(&sg(
        &with(&["write"], &ms, &["--input", "f", "--offset", "4096"]),
        d,
    ));
    for (m, fault, chunk) in [
        ("m0.img", "bit-rot", "2"),
        ("m1.img", "torn-write", "5"),
        ("m2.img", "misdirected-write", "7"),
        ("m3.img", "misdirected-write-unaligned", "12"),
    ] {
        ok(&sg(&["inject", m, "--fault", fault, "--chunk", chunk], d));
    }
    let out = sg(&with(&["status"], &ms, &["--check"]), d);
    assert_eq!(out.status.code(), Some(1), "damage found → exit 1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("damaged unit(s) located"), "{text}");
    let out = sg(
        &with(
            &["read"],
            &ms,
            &["--offset", "4096", "--length", "300000", "--output", "back"],
        ),
        d,
    );
    ok(&out);
    assert_eq!(std::fs::read(d.join("back")).unwrap(), data);
    // In-flight faults cannot be put into a stopped member; the error says where they live.
    let out = sg(&["inject", "m0.img", "--fault", "lost-write"], d);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("demo"));
}

#[test]
fn assembly_errors_are_clear_and_one_missing_member_runs_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    ok(&sg(
        &with(
            &["create"],
            &ms,
            &["--size", "1M", "--level", "5", "--chunk", "4K"],
        ),
        d,
    ));
    let data = random_file(&d.join("f"), 100_000, 5);
    ok(&sg(&with(&["write"], &ms, &["--input", "f"]), d));
    let err = |args: Vec<&str>| {
        let out = sg(&args, d);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Out of order.
    let swapped = vec!["status", "m1.img", "m0.img", "m2.img", "m3.img"];
    assert!(err(swapped).contains("list members in index order"));
    // Duplicated.
    assert!(err(vec!["status", "m0.img", "m0.img", "m2.img", "m3.img"])
        .contains("both claim member index 0"));
    // Foreign member.
    let other = members(4)
        .iter()
        .map(|m| format!("o{m}"))
        .collect::<Vec<_>>();
    ok(&sg(
        &with(
            &["create"],
            &other,
            &["--size", "1M", "--level", "5", "--chunk", "4K"],
        ),
        d,
    ));
    assert!(err(vec!["status", "m0.img", "m1.img", "om2.img", "m3.img"])
        .contains("belongs to another array"));
    // Wrong count.
    assert!(
        err(vec!["status", "m0.img", "m1.img", "m2.img"]).contains("4 members but 3 were given")
    );
    // Refuses to overwrite an array.
    assert!(err(with(&["create"], &ms, &["--size", "1M"])).contains("--force"));
    // One member gone: degraded, data intact; two gone: a clear error.
    std::fs::remove_file(d.join("m2.img")).unwrap();
    let out = sg(
        &with(&["read"], &ms, &["--length", "100000", "--output", "back"]),
        d,
    );
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("running degraded"));
    assert_eq!(std::fs::read(d.join("back")).unwrap(), data);
    std::fs::remove_file(d.join("m3.img")).unwrap();
    assert!(err(with(&["read"], &ms, &["--length", "10"])).contains("survives at most 1"));
    // Beyond the end.
    let _ = PathBuf::new();
}

#[test]
fn demo_runs_on_defaults_and_none_shows_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&sg(&["demo", "--json"], dir.path()));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 45);
    for r in &rows {
        let silent = !matches!(
            r["fault"].as_str().unwrap(),
            "latent-sector-error" | "member-failure"
        );
        let wrong = r["wrong_bytes"].as_u64().unwrap();
        if r["scheme"] == "none" && silent {
            assert!(wrong > 0, "{r}");
        } else {
            assert_eq!(wrong, 0, "{r}");
            assert!(r["located"].as_u64().unwrap() >= 1, "{r}");
        }
    }
}
