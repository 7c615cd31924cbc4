//! Zero stripes (FORMAT.md §2.7, docs/ZERO-STRIPES.md): TRIM and zero as metadata, on every
//! scheme, with the record's room, a lost write after a zeroing, and the arrays without them.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig, EngineError};
use stripeguard_integrity::Scheme;

fn members(cfg: &ArrayConfig, scheme: Scheme) -> Vec<DiskRef> {
    let size = cfg.member_bytes();
    (0..cfg.data_chunks + cfg.parity_chunks + scheme.extra_members())
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), size)) as DiskRef)
        .collect()
}

fn config(scheme: Scheme, k: usize, m: usize, stripes: u64, journal: bool) -> ArrayConfig {
    ArrayConfig {
        zero_stripes: true,
        write_journal: journal,
        ..ArrayConfig::new(k, m, scheme, 4096, stripes)
    }
}

fn assemble(mems: &[DiskRef]) -> Array {
    Array::assemble(mems.to_vec(), &Default::default()).unwrap()
}

fn random(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

/// Fill every member's data area with bytes that are not zeros: a zero stripe's units are
/// unspecified, and nothing of them may be read, checked or returned.
fn scribble_data_areas(a: &Array, mems: &[DiskRef]) {
    let from = a.unit_offset(0);
    let to = a.unit_offset(a.geometry().stripes);
    for d in mems {
        d.write_at(from, &vec![0xa5; (to - from) as usize]).unwrap();
    }
}

#[test]
fn every_scheme_reads_zeros_writes_into_zero_stripes_and_trims_across_reassembly() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    for journal in [false, true] {
        for scheme in Scheme::ENGINE {
            let (k, m) = if scheme.fits_data_chunks(1) {
                (3, 2)
            } else {
                (3, 1)
            };
            let cfg = config(scheme, k, m, 8, journal);
            let mems = members(&cfg, scheme);
            let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
            assert!(a.keeps_zero_stripes() && a.superblock().zero_stripes);
            assert_eq!(
                a.zero_stripe_count(),
                (8, 1),
                "{scheme:?}: create records one range"
            );
            // Nothing of the data area is read: garbage there still reads as zeros.
            scribble_data_areas(&a, &mems);
            let cap = a.capacity_bytes() as usize;
            let sd = a.geometry().stripe_data_bytes() as usize;
            let mut model = vec![0u8; cap];
            let mut got = vec![1u8; cap];
            a.read(0, &mut got).unwrap();
            assert_eq!(got, model, "{scheme:?}: a new array reads as zeros");
            // Partial writes into zero stripes, one across a stripe boundary.
            for (off, len) in [
                (100, 300),
                (sd + 4096, 4096),
                (3 * sd - 1000, 3000),
                (7 * sd + 8, 8),
            ] {
                let data = random(&mut rng, len);
                a.write(off as u64, &data).unwrap();
                model[off..off + len].copy_from_slice(&data);
            }
            a.read(0, &mut got).unwrap();
            assert!(
                got == model,
                "{scheme:?} journal {journal}: after writes into zero stripes"
            );
            assert_eq!(
                a.zero_stripe_count().0,
                8 - 5,
                "{scheme:?}: five stripes written"
            );
            // Zeros across a boundary with no whole stripe: written | zero already (3 | 4),
            // zero already | written (6 | 7).
            for (off, len) in [(4 * sd - 100, 200), (7 * sd - 100, 200)] {
                a.zero(off as u64, len as u64).unwrap();
                model[off..off + len].fill(0);
            }
            a.read(0, &mut got).unwrap();
            assert!(
                got == model,
                "{scheme:?} journal {journal}: after zeros across a boundary"
            );
            for s in 0..8 {
                let found = a.scrub_stripe(s).unwrap();
                assert_eq!(
                    found,
                    0,
                    "{scheme:?} journal {journal}: stripe {s} scrubs clean: {:?}",
                    a.events()
                );
            }
            // Zero: a partial head, two whole stripes, a partial tail.
            let (zo, zl) = (sd / 2, 2 * sd + sd / 2 + 512);
            assert!(
                !a.zero_is_cheap(zo as u64, zl as u64),
                "partial stripes need writing"
            );
            assert!(
                a.zero_is_cheap(4 * sd as u64, 2 * sd as u64),
                "whole zero stripes"
            );
            a.zero(zo as u64, zl as u64).unwrap();
            model[zo..zo + zl].fill(0);
            a.read(0, &mut got).unwrap();
            assert!(got == model, "{scheme:?} journal {journal}: after a zero");
            a.flush().unwrap();
            a.close().unwrap();
            let a = assemble(&mems);
            a.read(0, &mut got).unwrap();
            assert!(
                got == model,
                "{scheme:?} journal {journal}: after reassembly"
            );
            assert!(
                a.zero_stripe_count().0 >= 5,
                "{scheme:?}: {:?}",
                a.zero_stripe_count()
            );
            for s in 0..8 {
                assert_eq!(
                    a.scrub_stripe(s).unwrap(),
                    0,
                    "{scheme:?}: stripe {s} scrubs clean"
                );
            }
            a.close().unwrap();
        }
    }
}

/// hybrid1's versions count up per chunk and the highest claim wins: a write into a zeroed
/// stripe must start above every version still on the members, or a lost write of a new unit
/// leaves an older unit whose higher version outvotes it. `none` is the negative control: it
/// returns the old bytes.
#[test]
fn a_lost_write_after_a_zeroing_is_found_not_returned() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(38);
    for scheme in [
        Scheme::Hybrid1,
        Scheme::HybridSeq,
        Scheme::Hybrid2,
        Scheme::None,
    ] {
        let cfg = config(scheme, 3, 1, 4, false);
        let mems = members(&cfg, scheme);
        let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
        let sd = a.geometry().stripe_data_bytes() as usize;
        // Stripe 1 written whole five times: its chunks' versions climb.
        for _ in 0..5 {
            a.write(sd as u64, &random(&mut rng, sd)).unwrap();
        }
        a.zero(sd as u64, sd as u64).unwrap();
        a.flush().unwrap();
        let member = a.geometry().member_of(1, 0);
        let at = a.unit_offset(1);
        let unit = a.unit_bytes() as usize;
        let mut old = vec![0u8; unit];
        mems[member].read_at(at, &mut old).unwrap();
        // One chunk written into the zero stripe: the stripe is written whole.
        let new = random(&mut rng, 4096);
        a.write(sd as u64, &new).unwrap();
        a.close().unwrap();
        // The new unit of chunk 0 never landed: its old self is back.
        mems[member].write_at(at, &old).unwrap();
        let a = assemble(&mems);
        let mut got = vec![0u8; 4096];
        let r = a.read(sd as u64, &mut got);
        if scheme == Scheme::None {
            assert!(r.is_ok() && got != new, "`none` cannot see the lost write");
        } else {
            match r {
                Ok(()) => assert!(got == new, "{scheme:?}: the old chunk was returned"),
                Err(e) => panic!("{scheme:?}: {e}"),
            }
        }
        a.close().unwrap();
    }
}

/// Writes that split the one range of a new array into more ranges than a record copy holds:
/// the flush writes the smallest ones out as real zeros, and everything reads back right.
#[test]
fn a_record_without_room_writes_its_smallest_ranges_out() {
    let scheme = Scheme::HybridSeq;
    let stripes = 800;
    let cfg = config(scheme, 2, 1, stripes, false);
    let mems = members(&cfg, scheme);
    let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    let sd = a.geometry().stripe_data_bytes();
    let room =
        stripeguard_integrity::state_capacity((a.superblock().layout.state_bytes / 2) as usize);
    assert!(
        room < stripes as usize / 2,
        "the test needs more ranges than {room}"
    );
    // Every other stripe written: about stripes / 2 ranges, more than a copy holds.
    for s in (0..stripes).step_by(2) {
        a.write(s * sd + 10, &[7u8; 100]).unwrap();
    }
    assert!(a.zero_stripe_count().1 > room);
    a.flush().unwrap();
    let (left, ranges) = a.zero_stripe_count();
    assert!(
        ranges <= room,
        "{ranges} ranges after the flush, room for {room}"
    );
    assert!(left > 0, "only the smallest ranges were given up");
    a.close().unwrap();
    let a = assemble(&mems);
    let mut got = vec![1u8; sd as usize];
    for s in 0..stripes {
        a.read(s * sd, &mut got).unwrap();
        let mut want = vec![0u8; sd as usize];
        if s % 2 == 0 {
            want[10..110].fill(7);
        }
        assert!(got == want, "stripe {s}");
        assert_eq!(a.scrub_stripe(s).unwrap(), 0);
    }
    a.close().unwrap();
}

/// An array made without zero stripes (or by an older build) writes zeros: nothing is a hole,
/// fast zeros are refused, and its record never holds a zero range.
#[test]
fn an_array_without_zero_stripes_writes_zeros() {
    let scheme = Scheme::Hybrid2;
    let cfg = ArrayConfig::new(3, 1, scheme, 4096, 4);
    let mems = members(&cfg, scheme);
    let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    assert!(!a.keeps_zero_stripes() && !a.superblock().zero_stripes);
    let sd = a.geometry().stripe_data_bytes();
    a.write(0, &vec![9u8; 2 * sd as usize]).unwrap();
    assert!(!a.zero_is_cheap(0, sd));
    a.zero(0, sd).unwrap();
    assert_eq!(a.zero_stripe_count(), (0, 0));
    let mut got = vec![1u8; 2 * sd as usize];
    a.read(0, &mut got).unwrap();
    assert!(
        got[..sd as usize].iter().all(|&b| b == 0) && got[sd as usize..].iter().all(|&b| b == 9)
    );
    a.close().unwrap();
}

/// A read-only assembly refuses to zero; a range beyond the end is refused before anything.
#[test]
fn zeroing_is_refused_where_writing_is() {
    let scheme = Scheme::Pure;
    let cfg = config(scheme, 3, 1, 4, false);
    let mems = members(&cfg, scheme);
    let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    let cap = a.capacity_bytes();
    assert!(matches!(
        a.zero(cap - 10, 20),
        Err(EngineError::OutOfRange { .. })
    ));
    a.close().unwrap();
    let ro = Array::assemble(
        mems.clone(),
        &stripeguard_engine::AssembleOptions {
            writable: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(ro.zero(0, 4096).is_err());
}

/// Feature bit 3 cleared by hand on every member (each copy re-sealed): the record still lists
/// zero stripes, and the array is refused rather than read as if it had none.
#[test]
fn zero_stripes_without_the_feature_bit_are_refused() {
    use stripeguard_integrity::{Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS};
    let scheme = Scheme::None;
    let cfg = config(scheme, 3, 1, 4, false);
    let mems = members(&cfg, scheme);
    Array::create(mems.clone(), &cfg, true, &mut |_, _| {})
        .unwrap()
        .close()
        .unwrap();
    for d in &mems {
        for at in SUPERBLOCK_COPY_OFFSETS {
            let mut b = vec![0u8; SUPERBLOCK_BYTES];
            d.read_at(at, &mut b).unwrap();
            let mut sb = Superblock::decode(&b).unwrap();
            assert!(sb.zero_stripes);
            sb.zero_stripes = false;
            d.write_at(at, &sb.encode()).unwrap();
        }
    }
    let err = Array::assemble(mems.clone(), &Default::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("feature bit 3"), "{err}");
}

/// A record copy that is intact but names a zero range past the array's end (newer than the
/// good one): assembly passes over it, and the metadata scrub reports it as damaged and
/// rewrites it, as it does a copy that fails its CRC.
#[test]
fn an_impossible_zero_range_is_damage_to_the_metadata_scrub() {
    use stripeguard_integrity::{StateRecord, ZeroRange};
    let scheme = Scheme::HybridSeq;
    let cfg = config(scheme, 3, 1, 4, false);
    let mems = members(&cfg, scheme);
    let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    let (at, copy) = {
        let l = a.superblock().layout;
        (l.state_offset(), (l.state_bytes / 2) as usize)
    };
    a.write(0, &[7u8; 100]).unwrap();
    a.close().unwrap();
    let bad = StateRecord {
        sequence: 99,
        entries: vec![],
        zero: vec![ZeroRange {
            first: 5000,
            count: 1,
        }],
    };
    mems[0]
        .write_at(at + copy as u64, &bad.encode(copy).unwrap())
        .unwrap();
    let a = assemble(&mems);
    let mut got = vec![0u8; 100];
    a.read(0, &mut got).unwrap();
    assert_eq!(got, vec![7u8; 100], "the impossible copy was not used");
    let check = stripeguard_engine::ScrubOptions {
        check_only: true,
        ..Default::default()
    };
    let found = stripeguard_engine::scrub(&a, &check, &mut |_, _| {}).unwrap();
    assert!(
        found
            .metadata
            .iter()
            .any(|f| f.region == "state" && f.member == 0),
        "{:?}",
        found.metadata
    );
    let fixed = stripeguard_engine::scrub(&a, &Default::default(), &mut |_, _| {}).unwrap();
    assert!(fixed
        .metadata
        .iter()
        .any(|f| f.region == "state" && f.repaired));
    let again = stripeguard_engine::scrub(&a, &check, &mut |_, _| {}).unwrap();
    assert!(again.metadata.is_empty(), "{:?}", again.metadata);
    a.close().unwrap();
}
