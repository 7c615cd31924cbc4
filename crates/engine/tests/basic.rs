//! Round trips and single-fault detection for every scheme, with `none` as the negative control.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use stripeguard_disk::{DiskRef, Fault, FaultyDisk, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;

struct Rig {
    array: Array,
    faulty: Vec<Arc<FaultyDisk>>,
}

fn rig(scheme: Scheme, k: usize, m: usize, stripes: u64) -> Rig {
    rig_chunk(scheme, k, m, stripes, 4096)
}

fn rig_chunk(scheme: Scheme, k: usize, m: usize, stripes: u64, chunk: u32) -> Rig {
    let size = ArrayConfig::new(k, m, scheme, chunk, stripes).member_bytes();
    let mems: Vec<DiskRef> = (0..k + m + scheme.extra_members())
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), size)) as DiskRef)
        .collect();
    let cfg = ArrayConfig::new(k, m, scheme, chunk, stripes);
    // Create on the bare disks, then wrap them in fault injectors and assemble.
    Array::create(mems.clone(), &cfg, true, &mut |_, _| {})
        .unwrap()
        .close()
        .unwrap();
    let probe = Array::assemble(mems.clone(), &Default::default()).unwrap();
    let map = probe.unit_map();
    drop(probe);
    let faulty: Vec<Arc<FaultyDisk>> = mems
        .into_iter()
        .map(|d| Arc::new(FaultyDisk::new(d, map).unwrap()))
        .collect();
    let members = faulty.iter().map(|f| f.clone() as DiskRef).collect();
    let array = Array::assemble(members, &Default::default()).unwrap();
    Rig { array, faulty }
}

fn random_bytes(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

#[test]
fn round_trip_every_scheme_unaligned_multi_stripe() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for scheme in Scheme::ENGINE {
        // 4 KiB chunks are one checksum block (whole-unit I/O); 8 KiB and 64 KiB chunks move
        // only the blocks a request touches (FORMAT.md §2.9.1).
        for (k, m, chunk) in [
            (4, 1, 4096),
            (6, 2, 4096),
            (5, 3, 4096),
            (4, 1, 8192),
            (6, 2, 65536),
        ] {
            let r = rig_chunk(scheme, k, m, 12, chunk);
            let cap = r.array.capacity_bytes() as usize;
            let mut model = vec![0u8; cap];
            let mut back = vec![0u8; cap];
            r.array.read(0, &mut back).unwrap();
            assert_eq!(back, model, "fresh array reads zeros");
            for _ in 0..60 {
                let off = rng.random_range(0..cap);
                let most = if rng.random_bool(0.5) {
                    9000
                } else {
                    3 * chunk as usize * k
                };
                let len = rng.random_range(1..=(cap - off).min(most));
                let data = random_bytes(&mut rng, len);
                r.array.write(off as u64, &data).unwrap();
                model[off..off + len].copy_from_slice(&data);
                let off = rng.random_range(0..cap);
                let len = rng.random_range(1..=(cap - off).min(40000));
                let mut got = vec![0u8; len];
                r.array.read(off as u64, &mut got).unwrap();
                assert_eq!(got, model[off..off + len], "{scheme} {k}+{m}");
            }
            r.array.read(0, &mut back).unwrap();
            assert_eq!(back, model, "{scheme} {k}+{m}");
            // Every stripe is a codeword with every unit voting (parity written only where a
            // request touched it must still match the whole chunks).
            for s in 0..12 {
                assert_eq!(
                    r.array.scrub_stripe(s).unwrap(),
                    0,
                    "{scheme} {k}+{m} C={chunk}: stripe {s}"
                );
            }
            assert_eq!(
                r.array.counters().detected,
                0,
                "{scheme} {k}+{m} C={chunk}: no faults, no findings"
            );
            for f in &r.faulty {
                assert!(f.corrupted_units().unwrap().is_empty());
            }
        }
    }
}

/// Arm one fault on the data unit holding array chunk 0 of stripe 2, rewrite that chunk, read
/// everything back. Returns (wrong bytes returned, units located).
fn one_fault(scheme: Scheme, fault: Fault, read_fault: bool) -> (usize, u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let r = rig(scheme, 4, 1, 8);
    let cap = r.array.capacity_bytes() as usize;
    let mut model = random_bytes(&mut rng, cap);
    r.array.write(0, &model).unwrap();
    let mut back = vec![0u8; cap];
    r.array.read(0, &mut back).unwrap();
    let g = r.array.geometry();
    let stripe = 2u64;
    let member = g.member_of(stripe, 1);
    r.faulty[member].arm(stripe, fault).unwrap();
    let chunk_off = (stripe * g.stripe_data_bytes() + g.chunk_bytes) as usize;
    if !read_fault {
        let data = random_bytes(&mut rng, 4096);
        r.array.write(chunk_off as u64, &data).unwrap();
        model[chunk_off..chunk_off + 4096].copy_from_slice(&data);
    }
    r.array.read(0, &mut back).unwrap();
    let wrong = back.iter().zip(&model).filter(|(a, b)| a != b).count();
    (wrong, r.array.counters().located)
}

#[test]
fn every_scheme_but_none_catches_each_silent_fault() {
    let faults = [
        (Fault::LostWrite, false),
        (Fault::TornWrite { sectors: 3 }, false),
        (
            Fault::MisdirectedWrite {
                victim: 5,
                shift_sectors: 0,
            },
            false,
        ),
        (
            Fault::MisdirectedWrite {
                victim: 5,
                shift_sectors: 2,
            },
            false,
        ),
        (
            Fault::MisdirectedRead {
                source: 6,
                shift_sectors: 0,
            },
            true,
        ),
        (
            Fault::MisdirectedRead {
                source: 6,
                shift_sectors: 3,
            },
            true,
        ),
        (
            Fault::BitRot {
                byte: 100,
                mask: 0x10,
            },
            true,
        ),
    ];
    for (fault, on_read) in faults {
        let (wrong, _) = one_fault(Scheme::None, fault.clone(), on_read);
        assert!(
            wrong > 0,
            "negative control: none must return wrong bytes under {fault:?}"
        );
        for scheme in [
            Scheme::Pure,
            Scheme::Hybrid1,
            Scheme::Hybrid2,
            Scheme::HybridSeq,
        ] {
            let (wrong, located) = one_fault(scheme, fault.clone(), on_read);
            assert_eq!(wrong, 0, "{scheme} returned wrong bytes under {fault:?}");
            assert!(located >= 1, "{scheme} did not locate {fault:?}");
        }
    }
}

#[test]
fn full_stripe_rewrites_find_nothing_to_repair() {
    for scheme in Scheme::ENGINE {
        let r = rig(scheme, 4, 2, 8);
        let sd = 4 * 4096;
        for round in 0..3u8 {
            for s in 0..8u64 {
                r.array.write(s * sd, &vec![round; sd as usize]).unwrap();
            }
        }
        assert_eq!(r.array.counters().detected, 0, "{scheme}");
    }
}

/// `planned_unit_ios` counts what the planner planned (the simulator's count): on `none`
/// RAID-6 a 4 KiB read of a written stripe is one unit read, a 4 KiB write inside a chunk a
/// read-modify-write of the chunk and both parities (three reads, three writes), and a write
/// of a whole stripe its k + m unit writes.
#[test]
fn the_planner_count_is_what_a_request_plans() {
    let r = rig(Scheme::None, 4, 2, 8);
    let a = &r.array;
    let stripe = 4 * 4096;
    a.write(0, &vec![7u8; stripe]).unwrap();
    let before = a.planned_unit_ios();
    let mut buf = vec![0u8; 4096];
    a.read(4096, &mut buf).unwrap();
    assert_eq!(a.planned_unit_ios() - before, 1);
    let before = a.planned_unit_ios();
    a.write(8192 + 100, &[1u8; 512]).unwrap();
    assert_eq!(a.planned_unit_ios() - before, 6);
    let before = a.planned_unit_ios();
    a.write(stripe as u64, &vec![3u8; stripe]).unwrap();
    assert_eq!(a.planned_unit_ios() - before, 6);
}
