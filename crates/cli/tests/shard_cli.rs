//! `stripeguard shard` end to end, through the built binary, on real files.

use rand::{rngs::StdRng, RngCore, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sg(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run stripeguard")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A temp dir with a random `data.bin` of `len` bytes encoded as k+m shards in `shards/`.
fn setup(len: usize, k: usize, m: usize, block: Option<&str>) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; len];
    StdRng::seed_from_u64(len as u64).fill_bytes(&mut data);
    std::fs::write(dir.path().join("data.bin"), &data).unwrap();
    let (ks, ms) = (k.to_string(), m.to_string());
    let mut args = vec![
        "shard", "encode", "data.bin", "--data", &ks, "--parity", &ms, "--out", "shards",
    ];
    if let Some(b) = block {
        args.extend(["--block-size", b]);
    }
    let o = sg(&args, dir.path());
    assert!(o.status.success(), "{}", text(&o));
    (dir, data)
}

fn shard(dir: &Path, i: usize) -> PathBuf {
    dir.join("shards").join(format!("shard-{i:03}.sgs"))
}

fn decode_ok(dir: &Path, data: &[u8]) -> String {
    let _ = std::fs::remove_file(dir.join("out.bin"));
    let o = sg(&["shard", "decode", "shards", "--out", "out.bin"], dir);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        std::fs::read(dir.join("out.bin")).unwrap() == data,
        "decoded file differs"
    );
    text(&o)
}

fn verify_json(dir: &Path) -> (i32, serde_json::Value) {
    let o = sg(&["shard", "verify", "shards", "--json"], dir);
    (
        o.status.code().unwrap(),
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o))),
    )
}

fn shard_entry<'a>(v: &'a serde_json::Value, file: &str) -> &'a serde_json::Value {
    v["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["file"] == file)
        .unwrap()
}

#[test]
fn healthy_round_trip_and_any_m_shards_deleted() {
    let (dir, data) = setup(1_000_003, 6, 3, Some("4K"));
    let (rc, v) = verify_json(dir.path());
    assert_eq!((rc, v["status"].as_str().unwrap()), (0, "healthy"));
    decode_ok(dir.path(), &data);
    for i in [0, 4, 7] {
        std::fs::remove_file(shard(dir.path(), i)).unwrap();
    }
    let (rc, v) = verify_json(dir.path());
    assert_eq!((rc, v["status"].as_str().unwrap()), (1, "repairable"));
    assert_eq!(v["missing_shards"], serde_json::json!([0, 4, 7]));
    decode_ok(dir.path(), &data);
}

#[test]
fn flipped_bytes_are_reported_by_name_and_repaired() {
    let (dir, data) = setup(300_000, 4, 2, Some("8K"));
    let p = shard(dir.path(), 2);
    let mut b = std::fs::read(&p).unwrap();
    b[128 + 100] ^= 0x01;
    b[128 + 3 * (8192 + 4) + 5] ^= 0x80;
    std::fs::write(&p, &b).unwrap();
    let o = sg(&["shard", "verify", "shards"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("shard-002.sgs          2  2 blocks fail their CRC"),
        "{}",
        text(&o)
    );
    let (_, v) = verify_json(dir.path());
    assert_eq!(shard_entry(&v, "shard-002.sgs")["payload_crc_ok"], false);
    decode_ok(dir.path(), &data);
}

#[test]
fn swapped_shards_with_lost_headers_are_located_by_parity() {
    let (dir, data) = setup(200_000, 5, 4, Some("4K"));
    // Swap the contents of shards 1 and 6 and destroy both headers: their block CRCs still
    // pass, so only the parity can tell that they sit in the wrong places.
    let (a, b) = (shard(dir.path(), 1), shard(dir.path(), 6));
    let (mut ba, mut bb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    ba[..128].fill(0);
    bb[..128].fill(0);
    std::fs::write(&a, &bb).unwrap();
    std::fs::write(&b, &ba).unwrap();
    let (rc, v) = verify_json(dir.path());
    assert_eq!(rc, 1, "{v}");
    for f in ["shard-001.sgs", "shard-006.sgs"] {
        let s = shard_entry(&v, f);
        assert_eq!(s["header"], "damaged");
        assert_eq!(
            s["crc_bad_blocks"], 0,
            "the CRCs alone cannot see this damage"
        );
        assert!(
            s["located_bad_blocks"].as_u64().unwrap() > 0,
            "{f} not located: {v}"
        );
    }
    let out = decode_ok(dir.path(), &data);
    assert!(out.contains("silently wrong (located by parity)"), "{out}");
}

#[test]
fn truncated_shard_still_decodes() {
    let (dir, data) = setup(500_000, 4, 2, Some("4K"));
    let p = shard(dir.path(), 3);
    let len = std::fs::metadata(&p).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (rc, v) = verify_json(dir.path());
    assert_eq!(rc, 1);
    assert!(
        shard_entry(&v, "shard-003.sgs")["missing_blocks"]
            .as_u64()
            .unwrap()
            > 0
    );
    decode_ok(dir.path(), &data);
}

#[test]
fn too_few_shards_is_a_clear_error_and_leaves_no_output() {
    let (dir, _) = setup(100_000, 4, 2, None);
    for i in [0, 1, 5] {
        std::fs::remove_file(shard(dir.path(), i)).unwrap();
    }
    let o = sg(
        &["shard", "decode", "shards", "--out", "out.bin"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("only 3 of the 4 blocks needed are intact"),
        "{}",
        text(&o)
    );
    assert!(!dir.path().join("out.bin").exists());
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("sgtmp")));
    let (rc, v) = verify_json(dir.path());
    assert_eq!((rc, v["status"].as_str().unwrap()), (3, "unrecoverable"));
}

#[test]
fn mixed_sets_missing_dirs_and_bad_arguments() {
    let (dir, _) = setup(10_000, 3, 2, None);
    // A second encoding's shard dropped into the directory.
    std::fs::write(dir.path().join("other.bin"), b"something else entirely").unwrap();
    let o = sg(
        &[
            "shard",
            "encode",
            "other.bin",
            "--data",
            "3",
            "--parity",
            "2",
            "--out",
            "other",
        ],
        dir.path(),
    );
    assert!(o.status.success());
    std::fs::copy(
        dir.path().join("other/shard-000.sgs"),
        dir.path().join("shards/shard-000.sgs"),
    )
    .unwrap();
    let o = sg(&["shard", "decode", "shards", "--out", "x"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("different encodings are mixed"),
        "{}",
        text(&o)
    );

    let o = sg(&["shard", "verify", "nope"], dir.path());
    assert!(text(&o).contains("nope: no such directory"), "{}", text(&o));
    let o = sg(
        &["shard", "encode", "missing.bin", "--out", "s2"],
        dir.path(),
    );
    assert!(
        text(&o).contains("missing.bin: No such file"),
        "{}",
        text(&o)
    );
    let o = sg(
        &[
            "shard", "encode", "data.bin", "--data", "200", "--parity", "60", "--out", "s3",
        ],
        dir.path(),
    );
    assert!(text(&o).contains("k + m <= 255"), "{}", text(&o));
    let o = sg(
        &["shard", "encode", "data.bin", "--out", "shards"],
        dir.path(),
    );
    assert!(
        text(&o).contains("already exists; pass --force"),
        "{}",
        text(&o)
    );
    let o = sg(
        &["shard", "decode", "other", "--out", "data.bin"],
        dir.path(),
    );
    assert!(text(&o).contains("already exists"), "{}", text(&o));
}

#[test]
fn empty_file_round_trips() {
    let (dir, data) = setup(0, 3, 2, None);
    decode_ok(dir.path(), &data);
}

#[test]
fn unsupported_kernel_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args([
            "bench",
            "codec",
            "--shapes",
            "4+1",
            "--chunks",
            "4K",
            "--placement",
            "cache",
            "--reps",
            "1",
            "--ms",
            "1",
        ])
        .env("STRIPEGUARD_KERNEL", "sse9")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown kernel \"sse9\""), "{}", text(&o));
}

#[test]
fn bench_codec_rejects_zero_runs() {
    let dir = tempfile::tempdir().unwrap();
    let o = sg(&["bench", "codec", "--runs", "0"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--runs"), "{}", text(&o));
}

#[test]
fn bench_codec_runs_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let o = sg(
        &[
            "bench",
            "codec",
            "--shapes",
            "6+2",
            "--chunks",
            "4K",
            "--placement",
            "cache",
            "--reps",
            "1",
            "--ms",
            "2",
            "--runs",
            "2",
            "--xor-members",
            "8",
            "--json",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"], 2);
    // Rows with a reference (crc32c always has one) carry the median ratio inside its range.
    for r in v["results"].as_array().unwrap() {
        if let Some(ratio) = r["ratio"].as_f64() {
            let (lo, hi) = (
                r["ratio_range"][0].as_f64().unwrap(),
                r["ratio_range"][1].as_f64().unwrap(),
            );
            assert!(lo <= ratio && ratio <= hi, "{r}");
        } else {
            assert!(r["ratio_range"].is_null(), "{r}");
        }
    }
    assert!(
        v["results"][5]["ratio"].as_f64().is_some(),
        "crc32c has a reference"
    );
    let ops: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "encode",
            "update",
            "rmw",
            "reconstruct",
            "locate",
            "crc32c",
            "memcpy",
            "rdp encode",
            "rdp rebuild2",
            "tier encode",
            "tier rebuild2"
        ]
    );
    assert!(v["results"][0]["gbps"].as_f64().unwrap() > 0.0);
}
