//! Untrusted blocks (FORMAT.md §2.7), end to end: a stripe damaged beyond its redundancy stays
//! refused after a resync settles it (it used to be re-sealed and read back wrong with exit 0),
//! and every way out — a whole write, a scrub that finds the good bytes back, `clear` — works,
//! while `replace` takes nothing off. The damage and the crash are made by hand at the offsets
//! FORMAT.md gives, not through our own injector.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

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

/// What a power cut in the middle of a write to region 0 leaves (FORMAT.md §2.1, §2.4): every
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
    // Stripe 3: parity on member 0, data chunk i on member i + 1 (FORMAT.md §2.8). Block 1 of
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
    // The feature bit is clear again: the superblock's incompatible features are block CRCs
    // and zero stripes (bit 3, set for the array's life) only.
    let sb = peek(&d.join("m0"), 0, 4096);
    assert_eq!(u64::from_le_bytes(sb[96..104].try_into().unwrap()), 1 | 8);
}

/// Member and byte offset of unit `pos` (`0..k` data, then parity) of `stripe` (FORMAT.md §2.8),
/// for an array of `n` members with `m` parity, units of `unit` bytes.
fn unit_at(n: usize, m: usize, unit: u64, stripe: u64, pos: usize) -> (usize, u64) {
    let p = n - 1 - (stripe as usize % n);
    let k = n - m;
    let member = if pos < k {
        (p + m + pos) % n
    } else {
        (p + pos - k) % n
    };
    (member, D + stripe * unit)
}

/// Found by an outside attack: a stripe whose listed block is damaged again, with its
/// neighbour, and a second stripe settled in the same resync. The second settle used to list
/// a range overlapping the first, which wrote a record copy the decoder refuses — the older copy
/// then hid the fresh range (its re-sealed bytes read back with exit 0), or no copy was valid
/// and the array could not be assembled at all.
#[test]
fn a_second_settle_of_a_listed_block_keeps_the_record_valid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(3);
    let args = [
        "--size", "4M", "--level", "5", "--scheme", "hybrid2", "--chunk", "64K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    let (c, sd, unit) = (65536u64, 2 * 65536u64, 65536u64 + 512);
    let a = random_file(&d.join("A"), (20 * sd) as usize, 5);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    let at = |stripe: u64, pos: usize, off: u64| {
        let (mem, base) = unit_at(3, 1, unit, stripe, pos);
        (d.join(&ms[mem]), base + off)
    };
    let mut n = 0u8;
    let mut damage = |stripe: u64, pos: usize, off: u64| {
        n += 1;
        let (p, o) = at(stripe, pos, off);
        poke(&p, o, &[n; 10]);
    };
    // First: block 0 of stripe 3's data chunk 0, and its parity.
    damage(3, 0, 100);
    damage(3, 2, 200);
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 3 * sd, 100).0, Some(3));
    // Again: blocks 0 and 1 of that chunk and the parity; and stripe 7 beside it.
    damage(3, 0, 100);
    damage(3, 0, 4096 + 100);
    damage(3, 2, 300);
    damage(7, 0, 2 * 4096);
    damage(7, 2, 50);
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 3 * sd, 100).0, Some(3));
    let st = sg(&with(&["status"], &ms, &["--json"]), d);
    assert_eq!(st.status.code(), Some(3), "{}", err_of(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let listed: Vec<(u64, u64, u64, u64)> = v["untrusted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let f = |k: &str| r[k].as_u64().unwrap();
            (f("stripe"), f("position"), f("offset"), f("len"))
        })
        .collect();
    assert_eq!(listed, vec![(3, 0, 0, 8192), (7, 0, 8192, 4096)], "{v}");
    // The block the second settle re-sealed is refused, not returned.
    assert_eq!(read_all(d, &ms, 3 * sd + 4096, 4096).0, Some(3));
    let (code, got, e) = read_all(d, &ms, 3 * sd + 8192, c - 8192);
    assert_eq!(code, Some(0), "{e}");
    assert_eq!(
        got.unwrap(),
        a[(3 * sd + 8192) as usize..(3 * sd + c) as usize]
    );
}

/// Found by an outside attack: a scrub that finds a listed block's good bytes back must not
/// take the rest of the stripe as it is. RAID-6: D0's block 0 is listed (with P and Q damaged
/// beside it); then a flushed write of D1 is lost (its unit rolled back by hand) and D0's good
/// bytes come back. The scrub used to re-seal the whole stripe as on disk, so D1 read back its
/// pre-write bytes with exit 0; now the good bytes are written again through the ordinary write
/// path, whose diagnosis repairs D1 from the parity.
#[test]
fn a_scrub_that_trusts_a_block_again_does_not_bless_the_rest_of_its_stripe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    let args = [
        "--size", "4M", "--level", "6", "--scheme", "hybrid2", "--chunk", "64K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    let (c, sd, unit) = (65536u64, 2 * 65536u64, 65536u64 + 512);
    random_file(&d.join("A"), (20 * sd) as usize, 6);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    let at = |pos: usize| {
        let (mem, base) = unit_at(4, 2, unit, 3, pos);
        (d.join(&ms[mem]), base)
    };
    let (d0, d0_at) = at(0);
    let good = peek(&d0, d0_at, 4096);
    poke(&d0, d0_at + 100, &[0x66; 10]);
    for pos in [2, 3] {
        let (p, o) = at(pos);
        poke(&p, o + 300, &[0x77; 10]);
    }
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 3 * sd, 100).0, Some(3));
    // A flushed write of D1, lost.
    let (d1, d1_at) = at(1);
    let before = peek(&d1, d1_at, unit as usize);
    let new = random_file(&d.join("N"), c as usize, 7);
    let off = (3 * sd + c).to_string();
    ok(&sg(
        &with(&["write"], &ms, &["--offset", &off, "-i", "N"]),
        d,
    ));
    poke(&d1, d1_at, &before);
    // D0's good bytes back; the scrub trusts them again.
    poke(&d0, d0_at, &good);
    let scrub = sg(&with(&["scrub"], &ms, &[]), d);
    assert!(
        matches!(scrub.status.code(), Some(0 | 1)),
        "{}",
        err_of(&scrub)
    );
    let (code, got, e) = read_all(d, &ms, 3 * sd + c, c);
    assert_eq!(code, Some(0), "{e}");
    assert!(
        got.unwrap() == new,
        "D1 read back other bytes than its flushed write"
    );
    let (code, got, e) = read_all(d, &ms, 3 * sd, 4096);
    assert_eq!((code, got.as_deref()), (Some(0), Some(&good[..])), "{e}");
    let check = sg(&with(&["status"], &ms, &["--check"]), d);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// Found by an outside attack: a lost flushed write of D0 (its table lost it too, so D0 passes
/// its own check) beside rot in D1, on RAID-5 hybrid2. D0's copies outvote it; a clean array
/// refuses it, and a resync used to re-seal it and return the pre-write bytes with exit 0.
#[test]
fn a_settle_lists_a_chunk_its_copies_outvote() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(3);
    let args = [
        "--size", "4M", "--level", "5", "--scheme", "hybrid2", "--chunk", "64K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    let (c, sd, unit) = (65536u64, 2 * 65536u64, 65536u64 + 512);
    random_file(&d.join("A"), (20 * sd) as usize, 8);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    let (m0, d0_at) = unit_at(3, 1, unit, 3, 0);
    let before = peek(&d.join(&ms[m0]), d0_at, unit as usize);
    random_file(&d.join("N"), c as usize, 9);
    let off = (3 * sd).to_string();
    ok(&sg(
        &with(&["write"], &ms, &["--offset", &off, "-i", "N"]),
        d,
    ));
    poke(&d.join(&ms[m0]), d0_at, &before);
    let (m1, d1_at) = unit_at(3, 1, unit, 3, 1);
    poke(&d.join(&ms[m1]), d1_at + 9 * 4096 + 5, &[0x99]);
    crash_by_hand(d, &ms);
    let (code, got, e) = read_all(d, &ms, 3 * sd, c);
    assert_eq!(code, Some(3), "the pre-write bytes came back: {e}");
    assert!(got.is_none());
}

/// Found by an outside attack: a replace wrote feature bit 2 to its new device but no record,
/// so after every member had been replaced no command could assemble the array. The record now
/// goes to the new device first; the listed range survives every replace and stays refused.
#[test]
fn replace_carries_the_record_to_the_new_device() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut ms = members(3);
    let args = [
        "--size", "4M", "--level", "5", "--scheme", "hybrid2", "--chunk", "64K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    let (sd, unit) = (2 * 65536u64, 65536u64 + 512);
    let a = random_file(&d.join("A"), (20 * sd) as usize, 10);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    for pos in [0, 2] {
        let (mem, base) = unit_at(3, 1, unit, 3, pos);
        poke(&d.join(&ms[mem]), base + 100, &[0x55; 10]);
    }
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 3 * sd, 100).0, Some(3));
    for i in 0..3 {
        let new = format!("n{i}");
        let idx = i.to_string();
        ok(&sg(
            &with(
                &["replace"],
                &ms,
                &["--member", &idx, "--with", &new, "--force"],
            ),
            d,
        ));
        ms[i] = new;
    }
    let st = sg(&with(&["status"], &ms, &["--json"]), d);
    assert_eq!(st.status.code(), Some(3), "{}", err_of(&st));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["untrusted"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(read_all(d, &ms, 3 * sd, 100).0, Some(3));
    let (code, got, e) = read_all(d, &ms, 0, sd);
    assert_eq!(
        (code, got.as_deref()),
        (Some(0), Some(&a[..sd as usize])),
        "{e}"
    );
}

/// Found by an outside attack: feature bit 2 cleared by hand while a range is listed is set
/// again by the next command that writes the superblocks (the record still refuses the range).
#[test]
fn a_cleared_feature_bit_is_set_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    let args = [
        "--size",
        "1M",
        "--level",
        "5",
        "--scheme",
        "hybrid-seq",
        "--chunk",
        "4K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    random_file(&d.join("A"), 65536, 12);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    for mem in &ms[1..=2] {
        poke(&d.join(mem), D + 3 * 4608 + 100, b"XY");
    }
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 0, 65536).0, Some(3));
    let features =
        |m: &str| u64::from_le_bytes(peek(&d.join(m), 0, 4096)[96..104].try_into().unwrap());
    assert_eq!(features("m0") & 4, 4);
    for m in &ms {
        let p = d.join(m);
        for at in [0u64, 4096] {
            let mut sb = peek(&p, at, 4096);
            sb[96] &= !4;
            let crc = crc32c(&sb[..4092]);
            sb[4092..].copy_from_slice(&crc.to_le_bytes());
            poke(&p, at, &sb);
        }
    }
    assert_eq!(read_all(d, &ms, 0, 65536).0, Some(3));
    for m in &ms {
        assert_eq!(features(m) & 4, 4, "{m}");
    }
}

/// Found by an outside attack: `status` of an array another process holds showed its live
/// counters only, and exited 0 with ranges listed. The holder's control socket reports them.
#[test]
fn status_of_a_held_array_lists_the_untrusted_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = members(4);
    let args = [
        "--size",
        "1M",
        "--level",
        "5",
        "--scheme",
        "hybrid-seq",
        "--chunk",
        "4K",
    ];
    ok(&sg(&with(&["create"], &ms, &args), d));
    random_file(&d.join("A"), 65536, 13);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    for mem in &ms[1..=2] {
        poke(&d.join(mem), D + 3 * 4608 + 100, b"XY");
    }
    crash_by_hand(d, &ms);
    assert_eq!(read_all(d, &ms, 0, 65536).0, Some(3));
    // A writer that holds the array while it waits for its input on a FIFO.
    let fifo = d.join("in.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(with(&["write"], &ms, &["--offset", "0", "-i", "in.fifo"]))
        .current_dir(d)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let input = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    // The writer has opened its input; it takes the array right after. Watch its owner record
    // (FORMAT.md §2.2) without locking anything (a status run meanwhile would take a shared
    // lock and make the writer's exclusive one fail).
    let held_by = || {
        let b = peek(&d.join(&ms[0]), 8192, 4096);
        b.chunks(2048)
            .filter(|s| &s[..8] == b"SGOWNER\0")
            .max_by_key(|s| u64::from_le_bytes(s[16..24].try_into().unwrap()))
            .filter(|s| s[24] == 1)
            .map(|s| u32::from_le_bytes(s[28..32].try_into().unwrap()))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while held_by() != Some(holder.id()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let st = sg(&with(&["status"], &ms, &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
    drop(input);
    holder.wait().unwrap();
    assert!(v["in_use_by"].is_u64(), "not the live status: {v}");
    assert_eq!(v["untrusted"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(st.status.code(), Some(3), "{v}");
}

/// `nbdinfo --map=stripeguard:integrity` (libnbd, as any NBD client would ask): the server's
/// integrity meta context shows the listed bytes as untrusted (flag 1), inside the stripe that
/// was settled, and nothing else; `base:allocation` says every byte is data. The control is the
/// same array before the damage: no flag anywhere.
#[test]
fn an_nbd_client_sees_which_extents_are_untrusted() {
    if std::process::Command::new("nbdinfo")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: nbdinfo (libnbd-bin) is not installed");
        return;
    }
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
    random_file(&d.join("A"), 65536, 7);
    ok(&sg(&with(&["write"], &ms, &["-i", "A"]), d));
    // (uri, map of a context as `offset length flags` lines).
    let map = |context: &str| -> Vec<(u64, u64, u32)> {
        let sock = d.join("s.sock");
        let _ = std::fs::remove_file(&sock);
        let mut args = with(&["serve"], &ms, &["--socket"]);
        let s = sock.to_str().unwrap().to_string();
        args.push(&s);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .args(&args)
            .current_dir(d)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(t.elapsed().as_secs() < 30, "serve did not listen");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = std::process::Command::new("nbdinfo")
            .arg(format!("--map={context}"))
            .arg(format!("nbd+unix:///?socket={}", sock.display()))
            .output()
            .unwrap();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        assert!(out.status.success(), "{}", err_of(&out));
        common::nbd_map(&out.stdout)
    };
    let clean = map("stripeguard:integrity");
    assert!(clean.iter().all(|e| e.2 == 0), "{clean:?}");
    // The 64 KiB written are data up to the end of their stripe (3 × 4 KiB of data each); the
    // rest has never been written: zero stripes, holes that read as zeros.
    let allocation = map("base:allocation");
    assert_eq!(allocation.len(), 2, "{allocation:?}");
    assert_eq!(allocation[0], (0, 6 * 12288, 0), "{allocation:?}");
    assert_eq!(
        (allocation[1].0, allocation[1].2),
        (6 * 12288, 3),
        "{allocation:?}"
    );
    // Two units of stripe 3 damaged by hand (more than RAID-5 repairs), then a crash: the
    // resync lists the stripe's unverifiable bytes untrusted.
    for mem in &ms[1..=2] {
        poke(&d.join(mem), D + 3 * 4608 + 100, b"XY");
    }
    crash_by_hand(d, &ms);
    let (code, _, e) = read_all(d, &ms, 0, 65536);
    assert_eq!(code, Some(3), "{e}");
    let listed = map("stripeguard:integrity");
    let bad: Vec<&(u64, u64, u32)> = listed.iter().filter(|e| e.2 & 1 != 0).collect();
    assert!(!bad.is_empty(), "{listed:?}");
    // Stripe 3 holds array bytes 3 * 12 KiB .. 4 * 12 KiB.
    assert!(
        bad.iter()
            .all(|e| e.0 >= 3 * 12288 && e.0 + e.1 <= 4 * 12288),
        "{listed:?}"
    );
    assert!(listed.iter().all(|e| e.2 & !1 == 0), "{listed:?}");
    // The extents cover the export, in order.
    let mut at = 0;
    for e in &listed {
        assert_eq!(e.0, at, "{listed:?}");
        at += e.1;
    }
}
