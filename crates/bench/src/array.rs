//! `stripeguard bench array`: the engine on memory-backed members, every scheme, with the ratio
//! to bare RAID (`none`) measured in the same run. Memory members make this a CPU measurement:
//! what integrity costs in checksums, metadata and extra (memory) I/O, not what a disk costs.

use crate::timing::best_rate;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;

/// What to measure.
#[derive(Clone, Debug)]
pub struct ArrayBenchOptions {
    /// Data members.
    pub data_chunks: usize,
    /// Parity members.
    pub parity_chunks: usize,
    /// Chunk size.
    pub chunk_bytes: u32,
    /// Array capacity to spread the I/O over.
    pub capacity_bytes: u64,
    /// Repetitions (best kept).
    pub reps: usize,
    /// Time per repetition.
    pub min_time: Duration,
}

/// One (scheme, workload) measurement.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayMeasurement {
    /// Scheme.
    pub scheme: Scheme,
    /// Workload name.
    pub workload: &'static str,
    /// Request size in bytes.
    pub request_bytes: usize,
    /// MB/s (10^6 bytes) of user data.
    pub mb_per_s: f64,
    /// Requests per second.
    pub ops_per_s: f64,
    /// This scheme's throughput / none's, same workload, same run.
    pub ratio_to_none: f64,
}

/// The four workloads.
pub const WORKLOADS: [(&str, usize, bool, bool); 4] = [
    ("seq-write-1M", 1 << 20, true, true),
    ("seq-read-1M", 1 << 20, false, true),
    ("rand-write-4K", 4096, true, false),
    ("rand-read-4K", 4096, false, false),
];

fn array(opts: &ArrayBenchOptions, scheme: Scheme) -> Array {
    let k = opts.data_chunks;
    let m = opts.parity_chunks;
    let stripe = k as u64 * opts.chunk_bytes as u64;
    let stripes = opts.capacity_bytes.div_ceil(stripe).max(1);
    let unit = opts.chunk_bytes as u64 + if scheme.has_appendix() { 512 } else { 0 };
    let size = stripeguard_integrity::MetadataLayout::member_bytes_for(stripes, unit);
    let members: Vec<DiskRef> = (0..k + m)
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), size)) as DiskRef)
        .collect();
    let cfg = ArrayConfig {
        first_read_map_bytes: 16 << 20,
        ..ArrayConfig::new(k, m, scheme, opts.chunk_bytes, stripes)
    };
    Array::create(members, &cfg, true, &mut |_, _| {}).expect("memory array")
}

/// Run every workload on every scheme.
pub fn run(opts: &ArrayBenchOptions, mut progress: impl FnMut(&str)) -> Vec<ArrayMeasurement> {
    let mut out = Vec::new();
    // none is measured last as well as first: the first array of a run pays one-off costs (page
    // faults, allocator growth); the better of the two is the reference.
    let order = [
        Scheme::None,
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
        Scheme::None,
    ];
    for scheme in order {
        progress(scheme.name());
        let a = array(opts, scheme);
        let cap = a.capacity_bytes();
        let mut fill = vec![0u8; cap as usize];
        rand::rngs::StdRng::seed_from_u64(1).fill(&mut fill[..]);
        a.write(0, &fill).expect("fill");
        drop(fill);
        for (name, size, write, sequential) in WORKLOADS {
            let mut rng = rand::rngs::StdRng::seed_from_u64(2);
            let mut buf = vec![0u8; size];
            rng.fill(&mut buf[..]);
            let slots = cap / size as u64;
            let mut next = 0u64;
            let rate = best_rate(size, opts.reps, opts.min_time, || {
                let slot = if sequential {
                    next = (next + 1) % slots;
                    next
                } else {
                    rng.random_range(0..slots)
                };
                let off = slot * size as u64;
                if write {
                    a.write(off, &buf).expect("write");
                } else {
                    a.read(off, &mut buf).expect("read");
                }
            });
            if let Some(prev) = out
                .iter_mut()
                .find(|x: &&mut ArrayMeasurement| x.scheme == scheme && x.workload == name)
            {
                prev.mb_per_s = prev.mb_per_s.max(rate / 1e6);
                prev.ops_per_s = prev.ops_per_s.max(rate / size as f64);
                continue;
            }
            out.push(ArrayMeasurement {
                scheme,
                workload: name,
                request_bytes: size,
                mb_per_s: rate / 1e6,
                ops_per_s: rate / size as f64,
                ratio_to_none: 0.0,
            });
        }
    }
    let base: Vec<(&str, f64)> = out
        .iter()
        .filter(|x| x.scheme == Scheme::None)
        .map(|x| (x.workload, x.mb_per_s))
        .collect();
    for x in &mut out {
        let b = base
            .iter()
            .find(|b| b.0 == x.workload)
            .expect("none measured")
            .1;
        x.ratio_to_none = x.mb_per_s / b;
    }
    out
}
