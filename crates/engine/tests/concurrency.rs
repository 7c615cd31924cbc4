//! Many threads on one array: writes to the same stripes are ordered by the stripe lock, writes
//! to different stripes run in parallel, and every byte ends up as one of the writers left it.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;

#[test]
fn threads_writing_overlapping_and_disjoint_ranges() {
    for scheme in [
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
        Scheme::Pure,
    ] {
        let stripes = 16u64;
        let size = stripeguard_integrity::MetadataLayout::member_bytes_for(stripes, 4096 + 512);
        let members: Vec<DiskRef> = (0..6)
            .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef)
            .collect();
        let cfg = ArrayConfig::new(4, 2, scheme, 4096, stripes);
        let array = Arc::new(Array::create(members, &cfg, true, &mut |_, _| {}).unwrap());
        let sd = 4 * 4096u64;
        // Each thread owns the chunks with index ≡ t (mod 4) of every stripe: all threads share
        // every stripe (so RMW of one thread must not lose another's parity update).
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let a = array.clone();
                std::thread::spawn(move || {
                    for round in 0..30u8 {
                        for s in 0..stripes {
                            let off = s * sd + t as u64 * 4096;
                            a.write(off, &vec![t.wrapping_mul(50).wrapping_add(round); 4096])
                                .unwrap();
                        }
                        let mut back = vec![0u8; 4096];
                        a.read(t as u64 * 4096, &mut back).unwrap();
                        assert_eq!(back, vec![t.wrapping_mul(50).wrapping_add(round); 4096]);
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        for s in 0..stripes {
            assert_eq!(
                array.scrub_stripe(s).unwrap(),
                0,
                "{scheme}: stripe {s} inconsistent"
            );
            for t in 0..4u8 {
                let mut back = vec![0u8; 4096];
                array.read(s * sd + t as u64 * 4096, &mut back).unwrap();
                assert_eq!(back, vec![t.wrapping_mul(50).wrapping_add(29); 4096]);
            }
        }
        assert_eq!(array.counters().detected, 0);
    }
}

/// Memory members that ask for parallel I/O, so the threaded path of a piece is exercised.
struct Parallel(MemDisk);

impl stripeguard_disk::Disk for Parallel {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, o: u64, b: &mut [u8]) -> Result<(), stripeguard_disk::DiskError> {
        self.0.read_at(o, b)
    }
    fn write_at(&self, o: u64, b: &[u8]) -> Result<(), stripeguard_disk::DiskError> {
        self.0.write_at(o, b)
    }
    fn flush(&self) -> Result<(), stripeguard_disk::DiskError> {
        self.0.flush()
    }
    fn prefers_parallel(&self) -> bool {
        true
    }
}

#[test]
fn members_driven_in_parallel_round_trip_and_repair() {
    for scheme in Scheme::ENGINE {
        let cfg = ArrayConfig::new(4, 2, scheme, 4096, 12);
        let mems: Vec<Arc<Parallel>> = (0..6 + scheme.extra_members())
            .map(|i| Arc::new(Parallel(MemDisk::new(format!("m{i}"), cfg.member_bytes()))))
            .collect();
        let members: Vec<DiskRef> = mems.iter().map(|m| m.clone() as DiskRef).collect();
        let array = Array::create(members, &cfg, true, &mut |_, _| {}).unwrap();
        let cap = array.capacity_bytes() as usize;
        let data: Vec<u8> = (0..cap).map(|i| (i * 7 + i / 4096) as u8).collect();
        array.write(0, &data).unwrap();
        array.write(5000, &data[..20000]).unwrap();
        let mut model = data.clone();
        model.copy_within(0..20000, 5000);
        // Rot one data unit behind the engine's back; every scheme but none repairs it.
        let g = array.geometry();
        let member = g.member_of(3, 0);
        mems[member].0.with_bytes_mut(|b| {
            b[array.superblock().data_offset_bytes as usize
                + 3 * array.unit_bytes() as usize
                + 10] ^= 0xff
        });
        let mut back = vec![0u8; cap];
        array.read(0, &mut back).unwrap();
        if scheme == Scheme::None {
            assert_ne!(back, model, "negative control");
        } else {
            assert_eq!(back, model, "{scheme}");
            assert_eq!(array.counters().repaired, 1, "{scheme}");
        }
    }
}
