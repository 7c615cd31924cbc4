//! The simulator's counts equal the engine's, measured with counting disks under every member,
//! for the shared DiskSim trace and a synthetic workload, every scheme.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use std::sync::Arc;
use stripeguard_disk::{CountingDisk, DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::{CrossCheck, MetadataLayout, Scheme};
use stripeguard_plan::{MemberIo, Op};
use stripeguard_sim::{
    Fit, Profile, Request, Simulator, SynthConfig, Synthetic, TraceOptions, TraceReader,
};

fn engine_counts(
    cross: CrossCheck,
    scheme: Scheme,
    k: usize,
    m: usize,
    chunk: u32,
    stripes: u64,
    reqs: &[Request],
) -> MemberIo {
    let size = ArrayConfig::new(k, m, scheme, chunk, stripes).member_bytes();
    let data_offset = MetadataLayout::for_member(size).data_offset();
    // Superblock, intent-record and checkpoint I/O is counted apart: the planner counts units.
    let counting: Vec<Arc<CountingDisk>> = (0..k + m)
        .map(|i| {
            Arc::new(
                CountingDisk::new(Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef)
                    .with_data_offset(data_offset),
            )
        })
        .collect();
    let cfg = ArrayConfig {
        cross_check: cross,
        ..ArrayConfig::new(k, m, scheme, chunk, stripes)
    };
    let array = Array::create(
        counting.iter().map(|c| c.clone() as DiskRef).collect(),
        &cfg,
        true,
        &mut |_, _| {},
    )
    .unwrap();
    counting.iter().for_each(|c| c.reset());
    let mut buf = Vec::new();
    for r in reqs {
        buf.resize(r.len as usize, 0x5a);
        match r.op {
            Op::Read => array.read(r.offset, &mut buf).unwrap(),
            Op::Write => array.write(r.offset, &buf).unwrap(),
        }
    }
    counting.iter().fold(MemberIo::default(), |mut t, c| {
        let n = c.counts();
        t += MemberIo {
            reads: n.reads,
            read_bytes: n.read_bytes,
            writes: n.writes,
            write_bytes: n.write_bytes,
        };
        t
    })
}

fn check(name: &str, reqs: Vec<Request>, k: usize, m: usize, chunk: u32, stripes: u64) {
    for cross in [CrossCheck::One, CrossCheck::All] {
        check_with(cross, name, &reqs, k, m, chunk, stripes);
    }
}

fn check_with(
    cross: CrossCheck,
    name: &str,
    reqs: &[Request],
    k: usize,
    m: usize,
    chunk: u32,
    stripes: u64,
) {
    let g = stripeguard_plan::Geometry {
        k,
        m,
        chunk_bytes: chunk as u64,
        stripes,
    };
    let mut sim = Simulator::new(g, &Scheme::ALL, 1 << 20).with_cross_check(cross);
    for r in reqs {
        sim.replay(*r);
    }
    let report = sim.report();
    for c in &report.schemes {
        let scheme = c.scheme.unwrap();
        let got = engine_counts(cross, scheme, k, m, chunk, stripes, reqs);
        assert_eq!(
            got,
            c.io.member,
            "{name} {scheme} cross-check {}: engine member I/O vs the simulator's byte-accurate count",
            cross.name()
        );
        if chunk == 4096 {
            // One checksum block per chunk: every planned unit I/O is one member I/O.
            assert_eq!(
                (got.reads, got.writes),
                (c.io.disk_reads + c.io.merge_reads, c.io.disk_writes),
                "{name} {scheme} cross-check {}: engine (reads, writes) vs the paper's count",
                cross.name()
            );
        }
    }
}

#[test]
fn shared_trace_counts_agree() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/tpcc-small.trace");
    let Ok(f) = std::fs::File::open(&path) else {
        eprintln!(
            "skipping: {} not found (../shared is not beside the checkout)",
            path.display()
        );
        return;
    };
    let (k, m, chunk, stripes) = (6, 2, 4096u32, 2048u64);
    let cap = k as u64 * chunk as u64 * stripes;
    let reqs: Vec<Request> =
        TraceReader::new(std::io::BufReader::new(f), None, TraceOptions::default())
            .unwrap()
            .map(|r| Fit::Wrap.apply(r.unwrap(), cap))
            .collect();
    assert_eq!(reqs.len(), 6999);
    check("tpcc-small", reqs, k, m, chunk, stripes);
}

#[test]
fn synthetic_counts_agree() {
    let (k, m, chunk, stripes) = (4, 1, 8192u32, 512u64);
    let cap = k as u64 * chunk as u64 * stripes;
    let reqs: Vec<Request> = Synthetic::new(SynthConfig {
        profile: Profile::by_name("DAP-PS").unwrap(),
        requests: 3000,
        capacity_bytes: cap,
        seed: 4,
    })
    .collect();
    check("DAP-PS synthetic", reqs, k, m, chunk, stripes);
}

/// The checksum-chunk model of the simulator (`cksum.rs`, the `ck-chunk` rows of `sim`) counts
/// what the engine does to the checksum member: its table reads and writes, with the stripe
/// cache off and at two sizes, on the shared trace shape and a random workload. The data and
/// parity I/O is `none`'s (the plan is the same), checked above.
#[test]
fn checksum_chunk_model_counts_agree_with_the_engine() {
    use rand::{Rng, SeedableRng};
    let (k, m, chunk, stripes) = (4usize, 1usize, 16384u32, 64u64);
    let g = stripeguard_plan::Geometry {
        k,
        m,
        chunk_bytes: chunk as u64,
        stripes,
    };
    let cap = g.capacity_bytes();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let reqs: Vec<Request> = (0..2500)
        .map(|_| {
            let len = 4096 * rng.random_range(1..=24u64);
            let offset = 4096 * rng.random_range(0..(cap - len) / 4096);
            Request {
                op: if rng.random_bool(0.5) {
                    Op::Write
                } else {
                    Op::Read
                },
                offset,
                len,
            }
        })
        .collect();
    for tables in [0usize, 8, 40] {
        let mut sim = stripeguard_sim::CkSim::new(g, tables);
        for r in &reqs {
            sim.replay(*r);
        }
        let want = sim.report();
        let scheme = Scheme::ChecksumChunk;
        let size = ArrayConfig::new(k, m, scheme, chunk, stripes).member_bytes();
        let data_offset = MetadataLayout::for_member(size).data_offset();
        let counting: Vec<Arc<CountingDisk>> = (0..k + m + 1)
            .map(|i| {
                Arc::new(
                    CountingDisk::new(Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef)
                        .with_data_offset(data_offset),
                )
            })
            .collect();
        let array = Array::create(
            counting.iter().map(|c| c.clone() as DiskRef).collect(),
            &ArrayConfig::new(k, m, scheme, chunk, stripes),
            true,
            &mut |_, _| {},
        )
        .unwrap();
        array.set_checksum_cache(tables).unwrap();
        counting.iter().for_each(|c| c.reset());
        let mut buf = Vec::new();
        for r in &reqs {
            buf.resize(r.len as usize, 0x33);
            match r.op {
                Op::Read => array.read(r.offset, &mut buf).unwrap(),
                Op::Write => array.write(r.offset, &buf).unwrap(),
            }
        }
        array.flush().unwrap();
        let ck = counting[k + m].counts();
        assert_eq!(
            (ck.reads, ck.writes),
            (want.reads, want.writes),
            "checksum member I/O with a stripe cache of {tables} tables: engine vs the model"
        );
        assert!(want.reads > 0 && want.writes > 0);
    }
}
