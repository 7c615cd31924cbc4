//! The array commands end to end, as a user runs them: create, write, damage members with `dd`
//! and `stripeguard inject`, read back, status --check. Includes the Kroth & Yang experiment.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::{ok, poke, sg, with};
use std::path::{Path, PathBuf};
use std::process::Command;

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}.img")).collect()
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
    kroth_yang_code(n, level, scheme, None)
}

fn kroth_yang_code(n: usize, level: &str, scheme: &str, code: Option<&str>) -> (bool, u64, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(n);
    let mut opts = vec![
        "--size", "5M", "--level", level, "--scheme", scheme, "--chunk", "4K",
    ];
    if let Some(c) = code {
        opts.extend(["--code", c]);
    }
    ok(&sg(&with(&["create"], &ms, &opts), d));
    // Bare chunks for none and for the checksum chunk (its CRCs live on the last member).
    let unit = if matches!(scheme, "none" | "checksum-chunk") {
        4096
    } else {
        4608
    };
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
            "seek=131072", // the data offset of a member under 256 MiB (FORMAT.md §2)
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
fn kroth_yang_on_rdp_and_tier_every_scheme_with_none_failing() {
    // 4 data + 2: p = 5, a 4 KiB chunk holds its four rows.
    for code in ["rdp", "tier"] {
        for scheme in ["pure", "hybrid1", "hybrid2", "hybrid-seq"] {
            let (same, located, stderr) = kroth_yang_code(6, "6", scheme, Some(code));
            assert!(same, "{code} {scheme}: file differs\n{stderr}");
            assert_eq!(
                located, 750,
                "{code} {scheme}: every overwritten unit is found"
            );
        }
        let (same, located, _) = kroth_yang_code(6, "6", "none", Some(code));
        assert_eq!(located, 0);
        assert!(
            !same,
            "negative control: {code} without integrity returns the random bytes"
        );
    }
}

#[test]
fn create_code_rdp_refuses_a_chunk_that_is_not_whole_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ms = members(8);
    let out = sg(
        &with(&["create"], &ms, &["--size", "4M", "--code", "rdp"]),
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("6 rows") && err.contains("--chunk"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = sg(
        &with(
            &["create"],
            &ms,
            &["--size", "4M", "--code", "tier", "--chunk", "48K"],
        ),
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = ok(&sg(&with(&["status"], &ms, &["--json"]), dir.path()));
    assert!(status.contains("\"tier\""), "{status}");
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
        // Their own layout: one member more (the checksum member); member 1 is still data
        // and parity.
        let (same, located, stderr) = kroth_yang(n + 1, level, "checksum-chunk");
        assert!(same, "RAID-{level} checksum-chunk: file differs\n{stderr}");
        assert_eq!(
            located, 750,
            "RAID-{level} checksum-chunk: every overwritten unit is found"
        );
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
    // Out of order: put in their places, with a note (issue 36; it was an error).
    let swapped = sg(&["status", "m1.img", "m0.img", "m2.img", "m3.img"], d);
    assert_eq!(swapped.status.code(), Some(0), "{swapped:?}");
    assert!(String::from_utf8_lossy(&swapped.stderr)
        .contains("members given out of order, put in their places: m0.img is member 0"));
    // Duplicated: the same file twice, and a copy of a member in another's place.
    assert!(err(vec!["status", "m0.img", "m0.img", "m2.img", "m3.img"])
        .contains("members 0 and 1 are the same file or device"));
    std::fs::copy(d.join("m0.img"), d.join("m0copy.img")).unwrap();
    assert!(
        err(vec!["status", "m0.img", "m0copy.img", "m2.img", "m3.img"])
            .contains("both claim member index 0")
    );
    std::fs::remove_file(d.join("m0copy.img")).unwrap();
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
    assert!(String::from_utf8_lossy(&out.stderr)
        .to_lowercase()
        .contains("running degraded"));
    assert_eq!(std::fs::read(d.join("back")).unwrap(), data);
    // A scrub cannot check the member that is out: exit 1 and a line saying so (it exited 0,
    // reading like a clean scrub: outsider attack, 2026-11-28).
    for extra in [&[][..], &["--check-only"][..]] {
        let out = sg(&with(&["scrub"], &ms, extra), d);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout)
            .contains("DEGRADED: 1 member(s) out, not checked: 2 (m2.img)"));
    }
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
    // Every engine scheme (the paper's five and the checksum chunk) × every fault kind.
    assert_eq!(rows.len(), 6 * 9);
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

/// The data offset of a member, read from its superblock as FORMAT.md §2.1 gives it (byte 48).
fn data_offset(member: &Path) -> u64 {
    let b = std::fs::read(member).unwrap();
    u64::from_le_bytes(b[48..56].try_into().unwrap())
}

/// `stripeguard create MEMBERS --size SIZE --chunk 4K EXTRA...`, which must succeed.
fn create(d: &Path, ms: &[String], size: &str, extra: &[&str]) {
    let mut rest = vec!["--size", size, "--chunk", "4K"];
    rest.extend_from_slice(extra);
    ok(&sg(&with(&["create"], ms, &rest), d));
}

fn read_back(d: &Path, ms: &[String], rest: &[&str]) -> (Option<i32>, Vec<u8>, String) {
    let out = sg(&with(&["read"], ms, rest), d);
    (
        out.status.code(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn k1_refuses_pure_and_hybrid2_and_hybrid1_catches_a_flipped_bit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(2);
    for scheme in ["pure", "hybrid2"] {
        let out = sg(
            &with(
                &["create"],
                &ms,
                &["--size", "1M", "--scheme", scheme, "--chunk", "4K"],
            ),
            d,
        );
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("buddy"));
        assert!(
            !d.join("m0.img").exists(),
            "a refused create left its files"
        );
    }
    create(d, &ms, "1M", &["--scheme", "hybrid1"]);
    let data = random_file(&d.join("A"), 4096, 3);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    // Stripe 0's data chunk is on member (n - 1 + m) mod n = 0 (FORMAT.md §2.8).
    let m0 = d.join("m0.img");
    let at = data_offset(&m0) + 100;
    let old = std::fs::read(&m0).unwrap()[at as usize];
    poke(&m0, at, &[old ^ 0x55]);
    let (code, back, err) = read_back(d, &ms, &["--length", "4096"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(back, data, "{err}");
    assert!(err.contains("checksum"), "{err}");
}

/// Issue 16's repro 2: restore the data unit and P of stripe 0 from older copies of their
/// members after a 4 KiB write. Returns (exit code, bytes read, the new bytes, stderr).
fn two_lost_writes(d: &Path, scheme: &str, cross: &str) -> (Option<i32>, Vec<u8>, Vec<u8>, String) {
    let ms = members(6);
    for m in &ms {
        let _ = std::fs::remove_file(d.join(m));
    }
    create(
        d,
        &ms,
        "1M",
        &["--level", "6", "--scheme", scheme, "--cross-check", cross],
    );
    random_file(&d.join("A64K"), 65536, 1);
    let b = random_file(&d.join("B4K"), 4096, 2);
    ok(&sg(&with(&["write"], &ms, &["-i", "A64K"]), d));
    // Stripe 0: P on member 5, Q on member 0, data chunk 0 on member 1 (FORMAT.md §2.8).
    let old1 = std::fs::read(d.join("m1.img")).unwrap();
    let old5 = std::fs::read(d.join("m5.img")).unwrap();
    ok(&sg(&with(&["write"], &ms, &["-i", "B4K"]), d));
    let off = data_offset(&d.join("m1.img")) as usize;
    let unit = 4096 + 512;
    poke(&d.join("m1.img"), off as u64, &old1[off..off + unit]);
    poke(&d.join("m5.img"), off as u64, &old5[off..off + unit]);
    let (code, back, err) = read_back(d, &ms, &["--length", "4096"]);
    (code, back, b, err)
}

#[test]
fn two_lost_writes_with_q_give_the_new_bytes_or_an_error_with_cross_check_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for scheme in ["hybrid1", "hybrid-seq"] {
        let (code, back, new, err) = two_lost_writes(d, scheme, "all");
        assert_eq!(code, Some(0), "{scheme}: {err}");
        assert_eq!(back, new, "{scheme}: {err}");
        assert!(err.contains("stale"), "{scheme}: {err}");
    }
    for scheme in ["pure", "hybrid2"] {
        let (code, back, _, err) = two_lost_writes(d, scheme, "all");
        assert_eq!(code, Some(3), "{scheme}: {err}");
        assert!(back.is_empty(), "{scheme} wrote bytes of a refused stripe");
        assert!(err.contains("tie"), "{scheme}: {err}");
    }
    // The paper's cost, cross-check P only, cannot see it (what `--cross-check all` is for);
    // and `none`, the negative control, returns the old bytes whatever the setting.
    for (scheme, cross) in [("hybrid1", "one"), ("none", "all")] {
        let (code, back, new, err) = two_lost_writes(d, scheme, cross);
        assert_eq!(code, Some(0), "{scheme}: {err}");
        assert_ne!(back, new, "{scheme} {cross}: expected the old bytes");
    }
}

#[test]
fn a_stale_member_is_not_readmitted_and_split_brain_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    create(d, &ms, "200K", &["--scheme", "hybrid1"]);
    random_file(&d.join("A"), 49152, 1);
    let b = random_file(&d.join("B"), 49152, 2);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    std::fs::rename(d.join("m2.img"), d.join("m2.x")).unwrap();
    let out = sg(&with(&["write"], &ms, &["-i", "B"]), d);
    ok(&out);
    let warn = String::from_utf8_lossy(&out.stderr);
    assert!(
        warn.contains("WARNING") && warn.contains("m2.img"),
        "{warn}"
    );
    std::fs::rename(d.join("m2.x"), d.join("m2.img")).unwrap();
    let out = sg(&with(&["status"], &ms, &[]), d);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stale"));
    let (code, back, err) = read_back(d, &ms, &["--offset", "8192", "--length", "4096"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(back, b[8192..12288], "{err}");
    std::fs::rename(d.join("m3.img"), d.join("m3.dead")).unwrap();
    let (code, back, err) = read_back(d, &ms, &["--offset", "8192", "--length", "4096"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(back.is_empty());
    assert!(err.contains("stale"), "{err}");

    // Split brain: two halves of a RAID-6 written apart.
    let ms = ["s0.img", "s1.img", "s2.img", "s3.img"].map(String::from);
    create(d, &ms, "200K", &["--level", "6"]);
    std::fs::create_dir(d.join("away")).unwrap();
    let hide = |names: &[&str], back: bool| {
        for n in names {
            let (from, to) = (d.join(n), d.join("away").join(n));
            if back {
                std::fs::rename(to, from).unwrap();
            } else {
                std::fs::rename(from, to).unwrap();
            }
        }
    };
    hide(&["s2.img", "s3.img"], false);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    hide(&["s2.img", "s3.img"], true);
    hide(&["s0.img", "s1.img"], false);
    ok(&sg(&with(&["write"], &ms, &["-i", "B"]), d));
    hide(&["s0.img", "s1.img"], true);
    let (code, back, err) = read_back(d, &ms, &["--length", "4096"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(back.is_empty());
    assert!(err.contains("split brain"), "{err}");
    for n in &ms {
        assert!(err.contains(n.as_str()), "{err}");
    }
}

#[test]
fn none_status_check_reports_a_parity_that_disagrees() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(3);
    create(d, &ms, "200K", &["--scheme", "none"]);
    random_file(&d.join("A"), 8192, 4);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    let clean = sg(&with(&["status"], &ms, &["--check"]), d);
    assert_eq!(clean.status.code(), Some(0), "{clean:?}");
    // Stripe 0's parity is on member n - 1 = 2 (FORMAT.md §2.8).
    let m2 = d.join("m2.img");
    let at = data_offset(&m2) + 10;
    let old = std::fs::read(&m2).unwrap()[at as usize];
    poke(&m2, at, &[old ^ 0xff]);
    let out = sg(&with(&["status"], &ms, &["--check", "--json"]), d);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["counters"]["mismatches"], 1, "{v}");
    let out = sg(&with(&["status"], &ms, &["--check"]), d);
    assert!(String::from_utf8_lossy(&out.stdout).contains("INCONSISTENT"));
}

/// The checksum member's findings are stored with their own role (FORMAT.md §2.5 role 5) and
/// counted in its row of `status` (they were stored as "stripe" and skipped).
#[test]
fn the_checksum_members_findings_count_in_its_status_row() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(5);
    create(
        d,
        &ms,
        "400K",
        &["--scheme", "checksum-chunk", "--parity", "1"],
    );
    random_file(&d.join("A"), 16384, 6);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    // Unit 0 of the checksum member (the last) begins with stripe 0's table: flip a byte of it.
    let m4 = d.join("m4.img");
    let at = data_offset(&m4) + 20;
    let old = std::fs::read(&m4).unwrap()[at as usize];
    poke(&m4, at, &[old ^ 0xff]);
    let scrub = sg(&with(&["scrub"], &ms, &[]), d);
    assert!(
        String::from_utf8_lossy(&scrub.stdout).contains("1 repaired"),
        "{scrub:?}"
    );
    let out = sg(&with(&["events"], &ms, &["--json"]), d);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(r#""role":"checksum""#), "{text}");
    let out = sg(&with(&["status"], &ms, &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["logged_by_member"][4]["checksum"], 1, "{v}");
}
