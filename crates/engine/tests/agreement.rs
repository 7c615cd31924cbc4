//! The engine's disk I/O (counted by a CountingDisk under every member) equals the planner's plan
//! for the same requests, request by request, for every scheme: the byte-accurate count
//! (`PiecePlan::member_io`: member I/Os and bytes) always, and the paper's unit count too where a
//! chunk is a single checksum block (every planned I/O is then one member I/O).

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use stripeguard_disk::{CountingDisk, DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::{CrossCheck, Scheme};
use stripeguard_plan::{Granularity, MemberIo, Op, Planner};

#[test]
fn engine_io_counts_equal_the_planners() {
    for chunk in [4096u32, 65536] {
        for scheme in Scheme::ALL {
            // `all` adds cross-check reads (first-read full-stripe reads of every scheme too).
            for cross in [CrossCheck::One, CrossCheck::All] {
                agree(scheme, chunk, cross);
            }
        }
    }
}

fn agree(scheme: Scheme, chunk: u32, cross: CrossCheck) {
    let (k, m, stripes) = (6usize, 2usize, 40u64);
    let gran = Granularity::new(scheme, k, chunk, 512);
    {
        let unit = gran.unit();
        let counting: Vec<Arc<CountingDisk>> = (0..k + m)
            .map(|i| {
                let mem = Arc::new(MemDisk::new(
                    format!("m{i}"),
                    stripeguard_integrity::MetadataLayout::member_bytes_for(stripes, unit),
                )) as DiskRef;
                Arc::new(CountingDisk::new(mem))
            })
            .collect();
        let members: Vec<DiskRef> = counting.iter().map(|c| c.clone() as DiskRef).collect();
        let cfg = ArrayConfig {
            cross_check: cross,
            ..ArrayConfig::new(k, m, scheme, chunk, stripes)
        };
        let array = Array::create(members, &cfg, true, &mut |_, _| {}).unwrap();
        let mut planner = Planner::new(array.geometry(), scheme, 1 << 20).with_cross_check(cross);
        // Reserve hybrid-seq's first block of sequence numbers before counting.
        array.write(0, &[1]).unwrap();
        planner.plan(Op::Write, 0, 1, |_| {});
        let total = |cs: &[Arc<CountingDisk>]| {
            cs.iter().fold(MemberIo::default(), |mut t, c| {
                let n = c.counts();
                t += MemberIo {
                    reads: n.reads,
                    read_bytes: n.read_bytes,
                    writes: n.writes,
                    write_bytes: n.write_bytes,
                };
                t
            })
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let cap = array.capacity_bytes();
        for i in 0..400 {
            let write = rng.random_bool(0.5);
            let off = rng.random_range(0..cap);
            let len = if i % 3 == 0 {
                rng.random_range(1..=(cap - off).min(3 * 6 * chunk as u64))
            } else {
                rng.random_range(1..=(cap - off).min(3 * 4096))
            };
            let (off, len) = if i % 2 == 0 {
                let o = off / 4096 * 4096;
                (o, (len.div_ceil(4096) * 4096).min(cap - o))
            } else {
                (off, len)
            };
            let before = total(&counting);
            let op = if write { Op::Write } else { Op::Read };
            if write {
                array.write(off, &vec![i as u8; len as usize]).unwrap();
            } else {
                array.read(off, &mut vec![0; len as usize]).unwrap();
            }
            let after = total(&counting);
            let got = MemberIo {
                reads: after.reads - before.reads,
                read_bytes: after.read_bytes - before.read_bytes,
                writes: after.writes - before.writes,
                write_bytes: after.write_bytes - before.write_bytes,
            };
            let (mut r, mut w) = (0u64, 0u64);
            let mut want = MemberIo::default();
            planner.plan(op, off, len, |p| {
                r += p.reads.len() as u64;
                w += p.writes.len() as u64;
                want += p.member_io(&gran);
            });
            assert_eq!(
                got,
                want,
                "{scheme} C={chunk} cross-check {}: request {i} {op:?} {off}+{len}",
                cross.name()
            );
            if chunk == 4096 {
                assert_eq!(
                    (got.reads, got.writes),
                    (r, w),
                    "{scheme} cross-check {}: paper count, request {i} {op:?} {off}+{len}",
                    cross.name()
                );
            }
        }
    }
}
