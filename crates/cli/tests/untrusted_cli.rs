//! Untrusted blocks (FORMAT.md §2.1f), end to end: a stripe damaged beyond its redundancy stays
//! refused after a resync settles it (it used to be re-sealed and read back wrong with exit 0),
//! and every way out — a whole write, a scrub that finds the good bytes back, `clear` — works,
//! while `replace` takes nothing off. The damage and the crash are made by hand at the offsets
//! FORMAT.md gives, not through our own injector.

mod common;
use common::{err_of, ok, peek, poke, sg, with};
use std::path::Path;
use stripeguard_checksum::crc32c;

const D: u64 = 128 << 10; // data offset of members under 256 MiB (FORMAT.md §2)

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m{i}")).collect()
}

fn random_file(path: &Path, len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    std::fs::write(path, &data).unwrap();
    data
}

/// What a power cut in the middle of a write to region 0 leaves (FORMAT.md §2.1, §2.1b): every
/// superblock copy says dirty and the newest intent record copy has region 0's bit set.
fn crash_by_hand(dir: &Path, ms: &[String]) {
    for m in ms {
        let p = dir.join(m);
        for at in [0u64, 4096] {
            let mut sb = peek(&p, at, 4096);
            sb[43] = 1;
            let crc = crc32c(&sb[..4092]);
            sb[4092..].copy_from_slice(&crc.to_le_bytes());
            poke(&p, at, &sb);
        }
        let sb = peek(&p, 0, 4096);
        let intent = u64::from_le_bytes(sb[120..128].try_into().unwrap());
        let copy = (intent / 2) as usize;
        for c in 0..2u64 {
            let at = 16384 + c * copy as u64;
            let mut b = peek(&p, at, copy);
            if b.iter().all(|&x| x == 0) {
                continue;
            }
            b[64] |= 1;
            let crc = crc32c(&b[..copy - 4]);
            b[copy - 4..].copy_from_slice(&crc.to_le_bytes());
            poke(&p, at, &b);
        }
    }
}

fn read_all(
    d: &Path,
    ms: &[String],
    offset: u64,
    len: u64,
) -> (Option<i32>, Option<Vec<u8>>, String) {
    let (off, l) = (offset.to_string(), len.to_string());
    let out = sg(
        &with(
            &["read"],
            ms,
            &["--offset", &off, "--length", &l, "-o", "B"],
        ),
        d,
    );
    let got = std::fs::read(d.join("B")).ok();
    let _ = std::fs::remove_file(d.join("B"));
    (out.status.code(), got, err_of(&out))
}

/// Issue 30, repro 1, every scheme, RAID-5 and RAID-6: `m + 1` units of stripe 3 damaged by
/// hand, then a crash that leaves region 0 dirty. The resync must not re-seal the damage: the
/// read stays refused (exit 3) and `status` lists the blocks. `none` is the negative control:
/// its resync recomputes the parity, and the read returns the damaged bytes with exit 0.
#[test]
fn a_resync_never_reseals_a_stripe_damaged_beyond_its_redundancy() {
    for level in ["5", "6"] {
        let m: usize = if level == "5" { 1 } else { 2 };
        for scheme in [
            "none",
            "pure",
            "hybrid1",
            "hybrid2",
            "hybrid-seq",
            "checksum-chunk",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            let extra = usize::from(scheme == "checksum-chunk");
            let ms = members(3 + m + extra);
            let label = format!("RAID-{level} {scheme}");
            ok(&sg(
                &with(
                    &["create"],
                    &ms,
                    &[
                        "--size", "1M", "--level", level, "--scheme", scheme, "--chunk", "4K",
                    ],
                ),
                d,
            ));
            let a = random_file(&d.join("A"), 65536, 7);
            ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
            let unit: u64 = if matches!(scheme, "none" | "checksum-chunk") {
                4096
            } else {
                4608
            };
            for mem in &ms[1..=m + 1] {
                poke(&d.join(mem), D + 3 * unit + 100, b"XY");
            }
            let (code, _, e) = read_all(d, &ms, 0, 65536);
            if scheme != "none" {
                assert_eq!(code, Some(3), "{label}: {e}");
            }
            crash_by_hand(d, &ms);
            let (code, got, e) = read_all(d, &ms, 0, 65536);
            if scheme == "none" {
                // The negative control: bare RAID returns the damage as data.
                assert_eq!(code, Some(0), "{label}: {e}");
                assert_ne!(
                    got.as_deref(),
                    Some(&a[..]),
                    "{label}: none saw the damage?"
                );
                continue;
            }
            assert_eq!(
                code,
                Some(3),
                "{label}: a settled stripe read back with exit 0: {e}"
            );
            assert!(got.is_none(), "{label}: a refused read left output");
            assert!(e.contains("untrusted"), "{label}: {e}");
            // A second resync (another crash) changes nothing.
            crash_by_hand(d, &ms);
            let (code, _, _) = read_all(d, &ms, 0, 65536);
            assert_eq!(code, Some(3), "{label}");
            let st = sg(&with(&["status"], &ms, &["--json"]), d);
            assert_eq!(st.status.code(), Some(3), "{label}");
            let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
            let listed = v["untrusted"].as_array().unwrap();
            assert!(!listed.is_empty(), "{label}: {v}");
            assert!(listed.iter().all(|r| r["stripe"] == 3), "{label}: {v}");
            let check = sg(&with(&["status"], &ms, &["--check"]), d);
            assert_eq!(
                check.status.code(),
                Some(3),
                "{label}: status --check said clean"
            );
            // The stripes beside it read as they were written.
            let (code, got, e) = read_all(d, &ms, 0, 3 * 4096 * 3);
            assert_eq!(code, Some(0), "{label}: {e}");
            assert_eq!(got.unwrap(), a[..3 * 4096 * 3], "{label}");
        }
    }
}

/// The ways out of the record, on 16 KiB chunks (four checksum blocks: only the damaged block is
/// listed, the other three of the chunk still read): a scrub that finds the good bytes back takes
/// a range off; a write covering a range whole replaces it while a partial one is refused;
/// `replace` takes nothing off; `clear` zero-fills what is left. The record survives every
/// reassembly in between (each command is a new process).
#[test]
fn every_way_out_of_the_untrusted_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    ok(&sg(
        &with(
            &["create"],
            &ms,
            &[
                "--size",
                "2M",
                "--level",
                "5",
                "--scheme",
                "hybrid-seq",
                "--chunk",
                "16K",
            ],
        ),
        d,
    ));
    let (c, sd) = (16384u64, 3 * 16384u64);
    let a = random_file(&d.join("A"), (6 * sd) as usize, 11);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    let unit = c + 512;
    // Stripe 3: parity on member 0, data chunk i on member i + 1 (FORMAT.md §2.2). Block 1 of
    // data chunks 0 and 1 damaged: two data units wrong, one parity.
    let at = D + 3 * unit + 4096 + 200;
    let good = peek(&d.join("m1"), at, 2);
    for mem in ["m1", "m2"] {
        poke(&d.join(mem), at, b"ZZ");
    }
    crash_by_hand(d, &ms);
    // The next command that may write resyncs first (`status` only looks).
    let chunk0 = 3 * sd;
    let (code, got, e) = read_all(d, &ms, chunk0, 4096);
    assert_eq!(
        (code, got.as_deref()),
        (Some(0), Some(&a[chunk0 as usize..][..4096])),
        "{e}"
    );
    let st = sg(&with(&["status"], &ms, &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let listed = v["untrusted"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2, "{v}");
    for (i, r) in listed.iter().enumerate() {
        assert_eq!(
            (r["stripe"].as_u64(), r["position"].as_u64()),
            (Some(3), Some(i as u64))
        );
        assert_eq!(
            (r["offset"].as_u64(), r["len"].as_u64()),
            (Some(4096), Some(4096))
        );
    }
    // Blocks 0, 2 and 3 of the chunk read; block 1 does not.
    let (code, got, e) = read_all(d, &ms, chunk0 + 8192, 8192);
    assert_eq!(code, Some(0), "{e}");
    assert_eq!(got.unwrap(), a[(chunk0 + 8192) as usize..][..8192]);
    assert_eq!(read_all(d, &ms, chunk0 + 4096, 1).0, Some(3));

    // The good bytes come back on member 1 (a device restored): a scrub verifies the range
    // against the CRC its metadata vouched for, re-seals the stripe around it, takes it off.
    poke(&d.join("m1"), at, &good);
    let scrub = sg(&with(&["scrub"], &ms, &[]), d);
    assert_eq!(
        scrub.status.code(),
        Some(3),
        "chunk 1's range is still listed: {}",
        err_of(&scrub)
    );
    let (code, got, e) = read_all(d, &ms, chunk0, c);
    assert_eq!(code, Some(0), "{e}");
    assert_eq!(got.unwrap(), a[chunk0 as usize..][..c as usize]);

    // A replace of member 2 (which holds the listed block) rebuilds it and takes nothing off.
    std::fs::remove_file(d.join("m2")).unwrap();
    ok(&sg(
        &with(&["replace"], &ms, &["--member", "2", "--with", "m2"]),
        d,
    ));
    let st = sg(&with(&["status"], &ms, &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["untrusted"].as_array().unwrap().len(), 1, "{v}");

    // A write into part of the listed block is refused; one that covers it whole replaces it.
    let chunk1 = chunk0 + c;
    let part = random_file(&d.join("P"), 100, 3);
    let off = (chunk1 + 4096 + 10).to_string();
    let w = sg(&with(&["write"], &ms, &["--offset", &off, "-i", "P"]), d);
    assert_eq!(w.status.code(), Some(3), "{}", err_of(&w));
    let whole = random_file(&d.join("W"), 8192, 4);
    let off = (chunk1 + 4096).to_string();
    ok(&sg(
        &with(&["write"], &ms, &["--offset", &off, "-i", "W"]),
        d,
    ));
    let (code, got, e) = read_all(d, &ms, chunk1 + 4096, 8192);
    assert_eq!((code, got.as_deref()), (Some(0), Some(&whole[..])), "{e}");
    let st = sg(&with(&["status"], &ms, &[]), d);
    assert_eq!(
        st.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&st.stdout)
    );
    assert_eq!(part.len(), 100);

    // `clear`: nothing listed in stripe 3 any more is an error; a fresh settle then clear.
    let cl = sg(&with(&["clear"], &ms, &["--stripe", "3"]), d);
    assert_eq!(cl.status.code(), Some(2), "{}", err_of(&cl));
    assert!(err_of(&cl).contains("no blocks listed"), "{}", err_of(&cl));
    let cl = sg(&with(&["clear"], &ms, &["--stripe", "1000000"]), d);
    assert_eq!(cl.status.code(), Some(2), "{}", err_of(&cl));
    assert!(err_of(&cl).contains("beyond the array"), "{}", err_of(&cl));
    for mem in ["m1", "m2"] {
        poke(&d.join(mem), at, b"QQ");
    }
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, chunk0 + 4096, 1).0, Some(3));
    let out = ok(&sg(&with(&["clear"], &ms, &["--stripe", "3"]), d));
    assert!(out.contains("zero-filled"), "{out}");
    let (code, got, e) = read_all(d, &ms, chunk0 + 4096, 4096);
    assert_eq!(
        (code, got.as_deref()),
        (Some(0), Some(&[0u8; 4096][..])),
        "{e}"
    );
    let check = sg(&with(&["status"], &ms, &["--check"]), d);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let ev = ok(&sg(&with(&["events"], &ms, &[]), d));
    for kind in [
        "untrusted —",
        "untrusted-verified",
        "untrusted-cleared",
        "untrusted-zeroed",
    ] {
        assert!(ev.contains(kind), "no {kind} event:\n{ev}");
    }
    // The feature bit is clear again: the superblock's incompatible features are block CRCs only.
    let sb = peek(&d.join("m0"), 0, 4096);
    assert_eq!(u64::from_le_bytes(sb[96..104].try_into().unwrap()), 1);
}
