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
    let members: Vec<DiskRef> = (0..k + m + scheme.extra_members())
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
    // Every engine scheme (Kroth & Yang's checksum chunk included: they measured 50-100 % over
    // md), then none again.
    for scheme in Scheme::ENGINE.into_iter().chain([Scheme::None]) {
        progress(scheme.name());
        let a = array(opts, scheme);
        let cap = a.capacity_bytes();
        let mut fill =
            vec![0u8; usize::try_from(cap).expect("the array's capacity fits in memory")];
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

/// One row of the write-intent benchmark.
#[derive(Clone, Debug, Serialize)]
pub struct IntentMeasurement {
    /// Workload name.
    pub workload: &'static str,
    /// User writes issued (with a flush every `flush_every`).
    pub user_writes: u64,
    /// A flush after this many writes (what a filesystem's commits look like).
    pub flush_every: u64,
    /// Intent-record writes to members per 1,000 user writes.
    pub record_writes_per_1000: f64,
    /// Member flushes per 1,000 user writes (record and data together).
    pub flushes_per_1000: f64,
    /// Member flushes per 1,000 user writes without the record.
    pub flushes_per_1000_without: f64,
    /// Wall seconds with the record.
    pub seconds_with: f64,
    /// Wall seconds without it, same run.
    pub seconds_without: f64,
    /// with / without - 1.
    pub overhead: f64,
}

/// One configuration a latency benchmark compares.
#[derive(Clone, Copy)]
struct Variant {
    intent: bool,
    write_journal: bool,
}

/// (seconds, metadata writes, flushes) of the best of `reps` runs of `writes` user writes of
/// each workload (1 MiB sequential, 4 KiB random; a flush every `flush_every`), per variant,
/// the variants alternating, hybrid-seq on members with `io` per I/O and `flush` per flush.
type Best = (f64, u64, u64);

const LATENCY_WORKLOADS: [(&str, usize, bool); 2] = [
    ("seq-write-1M", 1usize << 20, true),
    ("rand-write-4K", 4096, false),
];
const FLUSH_EVERY: u64 = 64;

fn latency_runs(
    opts: &ArrayBenchOptions,
    io: Duration,
    flush: Duration,
    writes: u64,
    variants: &[Variant],
) -> Vec<Vec<Best>> {
    use stripeguard_disk::{CountingDisk, LatencyDisk};
    let k = opts.data_chunks;
    let m = opts.parity_chunks;
    let stripe = k as u64 * opts.chunk_bytes as u64;
    let stripes = opts.capacity_bytes.div_ceil(stripe).max(1);
    let mut out = Vec::new();
    for (_, req, sequential) in LATENCY_WORKLOADS {
        let mut best = vec![(f64::MAX, 0u64, 0u64); variants.len()];
        for _ in 0..opts.reps.max(1) {
            for (v, var) in variants.iter().enumerate() {
                let cfg = ArrayConfig {
                    write_journal: var.write_journal,
                    ..ArrayConfig::new(k, m, Scheme::HybridSeq, opts.chunk_bytes, stripes)
                };
                let size = cfg.member_bytes();
                let data_offset =
                    stripeguard_integrity::MetadataLayout::for_member(size).data_offset();
                let data_end = data_offset + stripes * (opts.chunk_bytes as u64 + 512);
                let counting: Vec<Arc<CountingDisk>> = (0..k + m)
                    .map(|i| {
                        Arc::new(
                            CountingDisk::new(
                                Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef
                            )
                            .with_data_offset(data_offset)
                            .with_data_end(data_end),
                        )
                    })
                    .collect();
                let members: Vec<DiskRef> = counting
                    .iter()
                    .map(|c| Arc::new(LatencyDisk::new(c.clone() as DiskRef, io, flush)) as DiskRef)
                    .collect();
                let a = Array::create(members, &cfg, true, &mut |_, _| {}).expect("array");
                if !var.intent {
                    a.disable_write_intent_for_benchmark();
                }
                a.flush().expect("flush");
                counting.iter().for_each(|c| c.reset());
                let mut rng = rand::rngs::StdRng::seed_from_u64(3);
                let buf = vec![0x5au8; req];
                let slots = a.capacity_bytes() / req as u64;
                let t = std::time::Instant::now();
                for w in 0..writes {
                    let slot = if sequential {
                        w % slots
                    } else {
                        rng.random_range(0..slots)
                    };
                    a.write(slot * req as u64, &buf).expect("write");
                    if (w + 1) % FLUSH_EVERY == 0 {
                        a.flush().expect("flush");
                    }
                }
                a.flush().expect("flush");
                let secs = t.elapsed().as_secs_f64();
                let c = counting.iter().fold((0, 0), |(r, f), c| {
                    let x = c.counts();
                    (r + x.metadata_writes, f + x.flushes)
                });
                if secs < best[v].0 {
                    best[v] = (secs, c.0, c.1);
                }
            }
        }
        out.push(best);
    }
    out
}

/// The rows of one with/without comparison: `with` and `without` alternate, best of `reps`.
fn compare(
    opts: &ArrayBenchOptions,
    io: Duration,
    flush: Duration,
    writes: u64,
    with: Variant,
    without: Variant,
) -> Vec<IntentMeasurement> {
    let runs = latency_runs(opts, io, flush, writes, &[with, without]);
    let per = |x: u64| x as f64 * 1000.0 / writes as f64;
    LATENCY_WORKLOADS
        .iter()
        .zip(runs)
        .map(|((name, _, _), best)| IntentMeasurement {
            workload: name,
            user_writes: writes,
            flush_every: FLUSH_EVERY,
            record_writes_per_1000: per(best[0].1),
            flushes_per_1000: per(best[0].2),
            flushes_per_1000_without: per(best[1].2),
            seconds_with: best[0].0,
            seconds_without: best[1].0,
            overhead: best[0].0 / best[1].0 - 1.0,
        })
        .collect()
}

/// What crash consistency costs on a disk with real latency (`io` per I/O, `flush` per
/// flush): 1 MiB sequential and 4 KiB random writes, hybrid-seq, the variants alternating, best
/// of `reps`. Without `journal`: the write-intent record against none; with it: the write
/// journal (`create --journal`) against the intent record alone, "record" then being every
/// metadata write (journal records, the intent record).
pub fn crash_overhead(
    opts: &ArrayBenchOptions,
    io: Duration,
    flush: Duration,
    writes: u64,
    journal: bool,
) -> Vec<IntentMeasurement> {
    let base = Variant {
        intent: journal,
        write_journal: false,
    };
    let with = Variant {
        intent: true,
        write_journal: journal,
    };
    compare(opts, io, flush, writes, with, base)
}

/// What one request costs on members with `io` latency per I/O: the units of a request go to
/// their members at once (one I/O thread per member), so a full-stripe write of n units takes
/// about one latency, not n.
#[derive(Clone, Debug, Serialize)]
pub struct ConcurrencyMeasurement {
    /// Request kind.
    pub workload: &'static str,
    /// Member I/Os one request issues (data area).
    pub member_ios_per_request: f64,
    /// The latency of one member I/O.
    pub latency_ms: f64,
    /// Measured wall time per request.
    pub ms_per_request: f64,
    /// Member I/Os × latency: what issuing them one after another would take.
    pub serial_ms: f64,
}

/// Full-stripe writes and 4 KiB reads of hybrid-seq on members with `io` latency.
pub fn concurrency(
    opts: &ArrayBenchOptions,
    io: Duration,
    requests: u64,
) -> Vec<ConcurrencyMeasurement> {
    use stripeguard_disk::{CountingDisk, LatencyDisk};
    let (k, m) = (opts.data_chunks, opts.parity_chunks);
    let stripe = k as u64 * opts.chunk_bytes as u64;
    let stripes = requests.max(1) + 1;
    let unit = opts.chunk_bytes as u64 + 512;
    let size = stripeguard_integrity::MetadataLayout::member_bytes_for(stripes, unit);
    let data_offset = stripeguard_integrity::MetadataLayout::for_member(size).data_offset();
    let counting: Vec<Arc<CountingDisk>> = (0..k + m)
        .map(|i| {
            Arc::new(
                CountingDisk::new(Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef)
                    .with_data_offset(data_offset),
            )
        })
        .collect();
    let members: Vec<DiskRef> = counting
        .iter()
        .map(|c| Arc::new(LatencyDisk::new(c.clone() as DiskRef, io, io)) as DiskRef)
        .collect();
    let cfg = ArrayConfig::new(k, m, Scheme::HybridSeq, opts.chunk_bytes, stripes);
    let a = Array::create(members, &cfg, true, &mut |_, _| {}).expect("array");
    // The region bits are set once, up front, so the requests measured carry no record write.
    let bytes = usize::try_from(stripe * stripes).expect("the array fits in memory");
    a.write(0, &vec![1u8; bytes]).expect("write");
    let ms = io.as_secs_f64() * 1000.0;
    let mut out = Vec::new();
    for (name, write) in [("full-stripe write", true), ("4K read", false)] {
        counting.iter().for_each(|c| c.reset());
        let data = vec![0x3cu8; usize::try_from(stripe).expect("a stripe fits in memory")];
        let mut small = vec![0u8; 4096];
        let t = std::time::Instant::now();
        for r in 0..requests {
            if write {
                a.write(r * stripe, &data).expect("write");
            } else {
                a.read(r * stripe + 8192, &mut small).expect("read");
            }
        }
        let per = t.elapsed().as_secs_f64() * 1000.0 / requests as f64;
        let ios: u64 = counting
            .iter()
            .map(|c| {
                let x = c.counts();
                x.reads + x.writes
            })
            .sum();
        let per_req = ios as f64 / requests as f64;
        out.push(ConcurrencyMeasurement {
            workload: name,
            member_ios_per_request: per_req,
            latency_ms: ms,
            ms_per_request: per,
            serial_ms: per_req * ms,
        });
    }
    out
}

/// One row of the journal-device benchmark: a variant, its time for the same writes, and its
/// overhead against the write-intent record alone (measured in the same run).
#[derive(Clone, Debug, Serialize)]
pub struct JournalDeviceMeasurement {
    /// `intent only`, `journal on device`.
    pub variant: &'static str,
    /// 4 KiB random writes issued, by `queue_depth` concurrent writers.
    pub user_writes: u64,
    pub queue_depth: usize,
    /// Best wall seconds of `reps`.
    pub seconds: f64,
    /// Writes per second.
    pub writes_per_second: f64,
    /// Member flushes per 1,000 user writes.
    pub member_flushes_per_1000: f64,
    /// seconds / intent-only seconds - 1.
    pub overhead: f64,
}

/// What the write journal costs against the write-intent record alone when it is on a journal
/// device (FORMAT.md §2.12) with `dev_io` per I/O and `dev_flush` per flush, members at `io`
/// and `flush`: `writes` 4 KiB random writes by `queue_depth` writers at once (no flush until
/// the end, as fio's randwrite issues none), hybrid-seq, the variants alternating, best of
/// `reps`.
pub fn journal_device_overhead(
    opts: &ArrayBenchOptions,
    (io, flush): (Duration, Duration),
    (dev_io, dev_flush): (Duration, Duration),
    writes: u64,
    queue_depth: usize,
) -> Vec<JournalDeviceMeasurement> {
    use stripeguard_disk::{CountingDisk, LatencyDisk};
    let (k, m) = (opts.data_chunks, opts.parity_chunks);
    let stripe = k as u64 * opts.chunk_bytes as u64;
    let stripes = opts.capacity_bytes.div_ceil(stripe).max(1);
    // (The journal on the members at this depth is ~80x slower: `--journal` without a device
    // measures it; docs/PERFORMANCE.md has a figure.)
    let variants: [(&'static str, bool, bool); 2] = [
        ("intent only", false, false),
        ("journal on device", true, true),
    ];
    let qd = queue_depth.max(1);
    let mut best = [(f64::MAX, 0u64); 2];
    for _ in 0..opts.reps.max(1) {
        for (v, &(_, journal, device)) in variants.iter().enumerate() {
            let base = ArrayConfig {
                write_journal: journal,
                ..ArrayConfig::new(k, m, Scheme::HybridSeq, opts.chunk_bytes, stripes)
            };
            let size = base.member_bytes();
            let counting: Vec<Arc<CountingDisk>> = (0..k + m)
                .map(|i| {
                    Arc::new(CountingDisk::new(
                        Arc::new(MemDisk::new(format!("m{i}"), size)) as DiskRef,
                    ))
                })
                .collect();
            let members: Vec<DiskRef> = counting
                .iter()
                .map(|c| Arc::new(LatencyDisk::new(c.clone() as DiskRef, io, flush)) as DiskRef)
                .collect();
            let journal_devices = if device {
                let unit = base.unit_bytes();
                let bytes = 8192 + u64::from(stripeguard_engine::MAX_DEVICE_SLOTS) * (4096 + unit);
                vec![Arc::new(LatencyDisk::new(
                    Arc::new(MemDisk::new("journal", bytes)) as DiskRef,
                    dev_io,
                    dev_flush,
                )) as DiskRef]
            } else {
                Vec::new()
            };
            let cfg = ArrayConfig {
                journal_devices: stripeguard_engine::Devices(journal_devices),
                ..base
            };
            let a = Array::create(members, &cfg, true, &mut |_, _| {}).expect("array");
            a.flush().expect("flush");
            counting.iter().for_each(|c| c.reset());
            let slots = a.capacity_bytes() / 4096;
            let t = std::time::Instant::now();
            std::thread::scope(|s| {
                for w in 0..qd {
                    let a = &a;
                    s.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(7 + w as u64);
                        let buf = vec![0x5au8; 4096];
                        for _ in 0..writes / qd as u64 {
                            let slot = rng.random_range(0..slots);
                            a.write(slot * 4096, &buf).expect("write");
                        }
                    });
                }
            });
            a.flush().expect("flush");
            let secs = t.elapsed().as_secs_f64();
            let flushes: u64 = counting.iter().map(|c| c.counts().flushes).sum();
            if secs < best[v].0 {
                best[v] = (secs, flushes);
            }
            drop(a);
        }
    }
    let done = writes / qd as u64 * qd as u64;
    variants
        .iter()
        .zip(best)
        .map(
            |(&(name, _, _), (secs, flushes))| JournalDeviceMeasurement {
                variant: name,
                user_writes: done,
                queue_depth: qd,
                seconds: secs,
                writes_per_second: done as f64 / secs,
                member_flushes_per_1000: flushes as f64 * 1000.0 / done.max(1) as f64,
                overhead: secs / best[0].0 - 1.0,
            },
        )
        .collect()
}
