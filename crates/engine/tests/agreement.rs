//! The engine's disk I/O (counted by a CountingDisk under every member) equals the planner's plan
//! for the same requests, request by request, for every scheme.

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use stripeguard_disk::{CountingDisk, DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;
use stripeguard_plan::{Op, Planner};

#[test]
fn engine_io_counts_equal_the_planners() {
    let (k, m, chunk, stripes) = (6usize, 2usize, 4096u32, 40u64);
    for scheme in Scheme::ALL {
        let unit = chunk as u64 + if scheme.has_appendix() { 512 } else { 0 };
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
        let cfg = ArrayConfig::new(k, m, scheme, chunk, stripes);
        let array = Array::create(members, &cfg, true, &mut |_, _| {}).unwrap();
        let mut planner = Planner::new(*array.geometry(), scheme, 1 << 20);
        // Reserve hybrid-seq's first block of sequence numbers before counting.
        array.write(0, &[1]).unwrap();
        planner.plan(Op::Write, 0, 1, |_| {});
        let total = |cs: &[Arc<CountingDisk>]| {
            cs.iter().fold((0, 0), |(r, w), c| {
                (r + c.counts().reads, w + c.counts().writes)
            })
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let cap = array.capacity_bytes();
        for i in 0..400 {
            let write = rng.random_bool(0.5);
            let off = rng.random_range(0..cap);
            let len = rng.random_range(1..=(cap - off).min(3 * 6 * 4096));
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
            let (mut r, mut w) = (0u64, 0u64);
            planner.plan(op, off, len, |p| {
                r += p.reads.len() as u64;
                w += p.writes.len() as u64;
            });
            assert_eq!(
                (after.0 - before.0, after.1 - before.1),
                (r, w),
                "{scheme}: request {i} {op:?} {off}+{len}"
            );
        }
    }
}
