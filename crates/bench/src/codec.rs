//! `stripeguard bench codec`: encode, update, reconstruct, locate, CRC-32C and memcpy for a set of
//! (k, m) shapes and chunk sizes, single core, with ISA-L measured in the same run when built
//! with the `isal` feature.
//!
//! Two data placements:
//! - **cache**: one stripe reused, so the data stays in L1/L2 and the kernels are compared;
//! - **stream**: a pool of stripes much larger than the last-level cache, walked in turn, which is
//!   what a disk array sees (every kernel is then bound by memory bandwidth).
//!
//! Runs: with `runs` above one the whole table is measured that many times in turn and each row
//! reports the median of its runs (the ratio: the median of the runs' ratios, each ours against
//! the reference in the same run) and the ratio's range. A row's own rounds last a fraction of a
//! second, and the slow spells of a shared machine can last seconds (one run here printed 0.66x
//! for 4+1 4 KiB rebuild, whose other runs gave 0.8-1.1x): runs spread over minutes see them
//! once, not in every sample.
//!
//! Units: `gbps` is data bytes per second / 1e9 (for update and rmw: the bytes of the one chunk
//! changed); `galops` (Mann et al.) is GF multiply-adds per second / 1e9, i.e. data bytes x rows
//! produced.

use crate::timing::best_rates_in_turns;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::cell::RefCell;
use std::hint::black_box;
use std::time::Duration;
use stripeguard_codes::{ChunkUpdate, ErasureCode, Raid6, Rdp, ReedSolomon, TierCode};
use stripeguard_gf::Kernel;

/// What to measure.
#[derive(Clone, Debug)]
pub struct CodecOptions {
    /// (k, m) shapes.
    pub shapes: Vec<(usize, usize)>,
    /// Chunk sizes in bytes.
    pub chunk_sizes: Vec<usize>,
    /// Measure with one stripe reused.
    pub cache: bool,
    /// Measure over a pool larger than the cache.
    pub stream: bool,
    /// Bytes of the streaming pool.
    pub pool_bytes: usize,
    /// Repetitions per measurement (best kept).
    pub reps: usize,
    /// Minimum time per repetition.
    pub min_time: Duration,
    /// Whole-table runs, combined by median (see the top of this file).
    pub runs: usize,
    /// Member counts at which RDP and Tier-code are measured against RAID-6 P+Q.
    pub xor_members: Vec<usize>,
}

impl Default for CodecOptions {
    fn default() -> Self {
        CodecOptions {
            shapes: vec![(4, 1), (6, 2), (10, 4), (64, 10), (64, 64)],
            chunk_sizes: vec![4096, 65536],
            cache: true,
            stream: true,
            pool_bytes: 256 << 20,
            // Many short rounds: the slow spells of this shared machine last 0.1-1 s, and
            // taking turns often gives both sides the fast stretches between them.
            reps: 6,
            min_time: Duration::from_millis(30),
            runs: 1,
            xor_members: vec![6, 8, 14],
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// "encode", "update", "rmw", "reconstruct", "locate", "crc32c", "memcpy".
    pub op: &'static str,
    /// Data chunks.
    pub k: usize,
    /// Parity chunks.
    pub m: usize,
    /// Chunk size in bytes.
    pub chunk_bytes: usize,
    /// "cache" or "stream".
    pub placement: &'static str,
    /// Our throughput, GB/s of data.
    pub gbps: f64,
    /// Our GF multiply-adds per second / 1e9 (0 where no multiplication happens).
    pub galops: f64,
    /// The reference's throughput in the same run, if there is one.
    pub reference_gbps: Option<f64>,
    /// What the reference is ("isa-l ec_encode_data", "crc-fast", ...).
    pub reference: Option<&'static str>,
    /// gbps / reference_gbps (over several runs: the median of the runs' ratios).
    pub ratio: Option<f64>,
    /// The lowest and highest ratio of the runs ([`CodecReport::runs`]; `gbps` and
    /// `reference_gbps` are their medians).
    pub ratio_range: Option<(f64, f64)>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct CodecReport {
    /// Kernel our code ran on.
    pub kernel: String,
    /// Whether ISA-L was measured.
    pub isal: bool,
    /// Whole-table runs behind every row.
    pub runs: usize,
    /// Rows.
    pub results: Vec<Measurement>,
}

/// Stripes laid out for one (shape, chunk size, placement).
/// A chunk of a benchmark stripe: aligned as a device buffer would be, and as ISA-L's
/// `xor_gen` requires (32 bytes; a plain `Vec<u8>` is aligned to 16 and crashed it now and then).
type Chunk = stripeguard_disk::AlignedBuf;
const CHUNK_ALIGN: usize = 64;

struct Pool {
    k: usize,
    m: usize,
    chunk: usize,
    stripes: Vec<Vec<Chunk>>,
    next: usize,
}

/// Our encode of a stripe's parity from its data, in place.
fn encode_stripe(code: &dyn ErasureCode, s: &mut [Chunk]) {
    let (d, p) = s.split_at_mut(code.data_chunks());
    let d: Vec<&[u8]> = d.iter().map(|x| &x[..]).collect();
    let mut p: Vec<&mut [u8]> = p.iter_mut().map(|x| &mut x[..]).collect();
    code.encode(&d, &mut p)
        .expect("benchmark stripes fit their code");
}

impl Pool {
    fn new(code: &dyn ErasureCode, chunk: usize, count: usize, rng: &mut StdRng) -> Pool {
        let (k, m) = (code.data_chunks(), code.parity_chunks());
        let stripes = (0..count)
            .map(|_| {
                let mut s: Vec<Chunk> = (0..k + m)
                    .map(|_| {
                        let bytes: Vec<u8> = (0..chunk).map(|_| rng.random()).collect();
                        Chunk::from_slice(&bytes, CHUNK_ALIGN)
                    })
                    .collect();
                encode_stripe(code, &mut s);
                s
            })
            .collect();
        Pool {
            k,
            m,
            chunk,
            stripes,
            next: 0,
        }
    }

    fn take(&mut self) -> &mut Vec<Chunk> {
        let i = self.next;
        self.next = (self.next + 1) % self.stripes.len();
        &mut self.stripes[i]
    }
}

/// Run the codec benchmark.
pub fn run(opts: &CodecOptions, mut progress: impl FnMut(&str)) -> CodecReport {
    let kernel = Kernel::selected()
        .copied()
        .unwrap_or_else(|_| Kernel::best());
    let mut rng = StdRng::seed_from_u64(1);
    // Bring the core up to speed first: the first rows (4+1 at 4 KiB) ran right after start-up
    // and now and then printed 0.65x for ours against a reference that is the same code
    // (crc32c 0.85x in the same run).
    progress("warming up");
    let mut warm = vec![0u8; 64 << 10];
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        warm.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        black_box(&mut warm);
    }
    let runs = opts.runs.max(1);
    let mut passes = Vec::with_capacity(runs);
    for run in 1..=runs {
        let mut say = |what: &str| {
            if runs > 1 {
                progress(&format!("run {run}/{runs}: {what}"));
            } else {
                progress(what);
            }
        };
        passes.push(run_once(opts, kernel, &mut rng, &mut say));
    }
    CodecReport {
        kernel: kernel.kind().name().to_string(),
        isal: cfg!(feature = "isal"),
        runs,
        results: combine(&passes),
    }
}

/// One run of the whole table.
fn run_once(
    opts: &CodecOptions,
    kernel: Kernel,
    rng: &mut StdRng,
    progress: &mut impl FnMut(&str),
) -> Vec<Measurement> {
    let mut results = Vec::new();
    let placements: Vec<&'static str> = [(opts.cache, "cache"), (opts.stream, "stream")]
        .into_iter()
        .filter(|p| p.0)
        .map(|p| p.1)
        .collect();
    for &(k, m) in &opts.shapes {
        let code = ReedSolomon::with_kernel(k, m, kernel).expect("benchmark shapes are valid");
        for &chunk in &opts.chunk_sizes {
            for &placement in &placements {
                progress(&format!("k={k} m={m} chunk={chunk} {placement}"));
                let count = if placement == "cache" {
                    1
                } else {
                    (opts.pool_bytes / ((k + m) * chunk)).max(2)
                };
                let mut pool = Pool::new(&code, chunk, count, rng);
                results.extend(measure_shape(&code, &mut pool, placement, opts));
            }
        }
    }
    for &members in &opts.xor_members {
        for &chunk in &opts.chunk_sizes {
            for &placement in &placements {
                progress(&format!(
                    "rdp / tier / raid6, {members} members, chunk={chunk} {placement}"
                ));
                results.extend(measure_xor_codes(
                    kernel, members, chunk, placement, opts, rng,
                ));
            }
        }
    }
    results
}

/// RDP and Tier-code against our RAID-6 P+Q on `members` members, in turns in the same run:
/// encode, and the rebuild of two lost data chunks (0 and 1). The array codes need chunks of a
/// whole number of rows (`p - 1`), so the chunk is rounded down to a multiple of `64 (p - 1)`
/// bytes (4 KiB: 4096 at 6 members, 3840 at 8, 3072 at 14) and RAID-6 runs on the same length.
fn measure_xor_codes(
    kernel: Kernel,
    members: usize,
    chunk: usize,
    placement: &'static str,
    o: &CodecOptions,
    rng: &mut StdRng,
) -> Vec<Measurement> {
    let k = members - 2;
    let raid6 = Raid6::with_kernel(k, kernel).expect("benchmark member counts are valid");
    let rdp = Rdp::with_kernel(k, kernel).expect("benchmark member counts are valid");
    let tier = TierCode::with_kernel(k, kernel).expect("benchmark member counts are valid");
    let unit = 64 * rdp.rows();
    let chunk = (chunk / unit).max(1) * unit;
    let count = if placement == "cache" {
        1
    } else {
        (o.pool_bytes / ((k + 2) * chunk)).max(2)
    };
    let mut reference = Pool::new(&raid6, chunk, count, rng);
    let mut out = Vec::new();
    let codes: [(&'static str, &'static str, &dyn ErasureCode); 2] = [
        ("rdp encode", "rdp rebuild2", &rdp),
        ("tier encode", "tier rebuild2", &tier),
    ];
    for (encode_op, rebuild_op, code) in codes {
        let mut pool = Pool::new(code, chunk, count, rng);
        for (op, rebuild) in [(encode_op, false), (rebuild_op, true)] {
            let call = |c: &dyn ErasureCode, s: &mut Vec<Chunk>| {
                if rebuild {
                    c.reconstruct(
                        &mut s.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
                        &[0, 1],
                    )
                    .expect("two lost chunks are rebuilt");
                } else {
                    encode_stripe(c, s);
                }
            };
            let mut ours = || call(code, pool.take());
            let mut theirs = || call(&raid6, reference.take());
            let rates =
                best_rates_in_turns(k * chunk, o.reps, o.min_time, &mut [&mut ours, &mut theirs]);
            let mut r = row(op, &pool, placement, rates[0], 0);
            r.galops = 0.0;
            out.push(with_reference(r, "raid6 P+Q (ours)", rates[1]));
        }
    }
    out
}

/// Rows of several runs of the same table (same rows, same order) as one: medians, and the
/// ratio's range.
fn combine(passes: &[Vec<Measurement>]) -> Vec<Measurement> {
    let Some(first) = passes.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let rows: Vec<&Measurement> = passes.iter().map(|p| &p[i]).collect();
            let id = |r: &Measurement| (r.op, r.k, r.m, r.chunk_bytes, r.placement);
            assert!(
                rows.iter().all(|r| id(r) == id(rows[0])),
                "runs of the table differ in their rows"
            );
            // Every run's value of a field (`None` when a run has none: rows without a
            // reference).
            let all = |f: &dyn Fn(&Measurement) -> Option<f64>| -> Option<Vec<f64>> {
                rows.iter().map(|r| f(r)).collect()
            };
            let med = |f: &dyn Fn(&Measurement) -> Option<f64>| all(f).map(|v| median(&v));
            let ratios = all(&|r| r.ratio);
            Measurement {
                gbps: med(&|r| Some(r.gbps)).unwrap_or_default(),
                galops: med(&|r| Some(r.galops)).unwrap_or_default(),
                reference_gbps: med(&|r| r.reference_gbps),
                ratio: ratios.as_deref().map(median),
                ratio_range: ratios.as_deref().map(|v| {
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (lo, hi)
                }),
                ..rows[0].clone()
            }
        })
        .collect()
}

/// The median of `v` (the mean of the middle two for an even count; 0 for none).
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn row(
    op: &'static str,
    pool: &Pool,
    placement: &'static str,
    gbps: f64,
    rows: usize,
) -> Measurement {
    Measurement {
        op,
        k: pool.k,
        m: pool.m,
        chunk_bytes: pool.chunk,
        placement,
        gbps: gbps / 1e9,
        galops: gbps * rows as f64 / 1e9,
        reference_gbps: None,
        reference: None,
        ratio: None,
        ratio_range: None,
    }
}

fn with_reference(mut r: Measurement, name: &'static str, reference_rate: f64) -> Measurement {
    let g = reference_rate / 1e9;
    r.reference_gbps = Some(g);
    r.reference = Some(name);
    r.ratio = Some(r.gbps / g);
    r.ratio_range = r.ratio.map(|x| (x, x));
    r
}

/// A function of one stripe, timed by [`measured`].
type StripeFn<'a> = &'a mut dyn FnMut(&mut Vec<Chunk>);

/// The reference a row is compared with, if any: its name and function.
type Reference<'a> = Option<(&'static str, Box<dyn FnMut(&mut Vec<Chunk>) + 'a>)>;

/// An ISA-L reference: `None` without the `isal` feature, which then compiles none of it.
macro_rules! isal {
    ($name:expr, $f:expr) => {{
        #[cfg(feature = "isal")]
        let r: Reference = Some(($name, Box::new($f)));
        #[cfg(not(feature = "isal"))]
        let r: Reference = None;
        r
    }};
}

/// Row `op` (`rows` outputs per data byte, `bytes` per call): ours, and the reference timed in
/// turns with it (see [`best_rates_in_turns`]), each call on the pool's next stripe.
#[allow(clippy::too_many_arguments)]
fn measured(
    pool: &mut Pool,
    placement: &'static str,
    o: &CodecOptions,
    op: &'static str,
    rows: usize,
    bytes: usize,
    ours: StripeFn,
    reference: Reference,
) -> Measurement {
    let cell = RefCell::new(&mut *pool);
    let mut ours = || ours(cell.borrow_mut().take());
    let Some((name, mut theirs)) = reference else {
        let rate = best_rates_in_turns(bytes, o.reps, o.min_time, &mut [&mut ours])[0];
        return row(op, pool, placement, rate, rows);
    };
    let mut theirs = || theirs(cell.borrow_mut().take());
    let rates = best_rates_in_turns(bytes, o.reps, o.min_time, &mut [&mut ours, &mut theirs]);
    with_reference(row(op, pool, placement, rates[0], rows), name, rates[1])
}

fn measure_shape(
    code: &ReedSolomon,
    pool: &mut Pool,
    placement: &'static str,
    o: &CodecOptions,
) -> Vec<Measurement> {
    let (k, m, chunk) = (pool.k, pool.m, pool.chunk);
    let data_bytes = k * chunk;
    let lost: Vec<usize> = (0..m.min(k)).collect();
    #[cfg(feature = "isal")]
    let reference = stripeguard_isal_ref::Reference::cauchy(k, m);
    let mut out = Vec::new();

    out.push(measured(
        pool,
        placement,
        o,
        "encode",
        m,
        data_bytes,
        &mut |s| encode_stripe(code, s),
        isal!("isa-l ec_encode_data", |s: &mut Vec<Chunk>| {
            let (d, p) = s.split_at_mut(k);
            let d: Vec<&[u8]> = d.iter().map(|x| &x[..]).collect();
            reference.encode(
                &d,
                &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
            );
        }),
    ));

    // update: one data chunk's contribution added to the parity, `p ^= P[:, j] * x` — exactly
    // what ISA-L's ec_encode_data_update does (x = the delta of a read-modify-write, or the data
    // of a chunk being encoded as it arrives).
    out.push(measured(
        pool,
        placement,
        o,
        "update",
        m,
        chunk,
        &mut |s| {
            let (d, p) = s.split_at_mut(k);
            code.accumulate(
                1 % k,
                &d[1 % k],
                &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
            )
            .expect("accumulate into the code's own stripe shape");
        },
        isal!("isa-l ec_encode_data_update", |s: &mut Vec<Chunk>| {
            let (d, p) = s.split_at_mut(k);
            let outs = &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>();
            stripeguard_isal_ref::update_with_tables(
                reference.encode_tables(),
                k,
                1 % k,
                &d[1 % k],
                outs,
            );
        }),
    ));

    // rmw: a read-modify-write of one chunk from its old and new contents. Ours fuses the
    // delta into the parity pass (`update`); ISA-L needs the delta first (xor_gen, then
    // ec_encode_data_update), the fastest way its API offers.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "test data: an index pattern reduced to bytes, wrapping on purpose"
    )]
    let new_chunk: Vec<u8> = (0..chunk).map(|i| (i * 31 + 7) as u8).collect();
    let new_chunk = Chunk::from_slice(&new_chunk, CHUNK_ALIGN);
    #[cfg(feature = "isal")]
    let mut delta = Chunk::zeroed(chunk, CHUNK_ALIGN);
    out.push(measured(
        pool,
        placement,
        o,
        "rmw",
        m,
        chunk,
        &mut |s| {
            let (d, p) = s.split_at_mut(k);
            let change = ChunkUpdate {
                index: 1 % k,
                old: &d[1 % k],
                new: &new_chunk,
            };
            code.update(
                &[change],
                &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
            )
            .expect("update of the code's own stripe shape");
        },
        isal!("isa-l xor_gen + ec_encode_data_update", |s: &mut Vec<
            Chunk,
        >| {
            let (d, p) = s.split_at_mut(k);
            let outs = &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>();
            stripeguard_isal_ref::rmw_with_tables(
                reference.encode_tables(),
                k,
                1 % k,
                &d[1 % k],
                &new_chunk,
                &mut delta,
                outs,
            );
        }),
    ));

    // reconstruct m lost data chunks (the stripe's data is overwritten with the same bytes)
    #[cfg(feature = "isal")]
    let (tables, sources) = reference.decode_tables(&lost);
    out.push(measured(
        pool,
        placement,
        o,
        "reconstruct",
        lost.len(),
        data_bytes,
        &mut |s| {
            code.reconstruct(
                &mut s.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
                &lost,
            )
            .expect("reconstruct at most m lost chunks of the code's own stripe");
        },
        isal!("isa-l decode (ec_encode_data)", |s: &mut Vec<Chunk>| {
            let (targets, rest) = s.split_at_mut(lost.len());
            let ins: Vec<&[u8]> = sources.iter().map(|&i| &rest[i - lost.len()][..]).collect();
            stripeguard_isal_ref::encode_with_tables(
                &tables,
                &ins,
                &mut targets.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
            );
        }),
    ));

    // locate one silently corrupted data chunk (then undo the damage)
    if m >= 2 {
        out.push(measured(
            pool,
            placement,
            o,
            "locate",
            m,
            data_bytes,
            &mut |s| {
                s[0][7] ^= 0x5a;
                let views: Vec<&[u8]> = s.iter().map(|x| &x[..]).collect();
                let found = code
                    .locate(&views, &[])
                    .expect("one corrupt chunk is within the code's locating bound");
                assert_eq!(found, stripeguard_codes::Located::Bad(vec![0]));
                s[0][7] ^= 0x5a;
            },
            None,
        ));
    }

    // CRC-32C of the data chunks: our wrapper against crc-fast called directly
    out.push(measured(
        pool,
        placement,
        o,
        "crc32c",
        0,
        data_bytes,
        &mut |s| {
            for c in &s[..k] {
                black_box(stripeguard_checksum::crc32c(c));
            }
        },
        Some((
            "crc-fast",
            Box::new(|s: &mut Vec<Chunk>| {
                for c in &s[..k] {
                    black_box(crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, c));
                }
            }),
        )),
    ));

    // memcpy of the data chunks: the ceiling
    let mut dst = vec![0u8; chunk];
    out.push(measured(
        pool,
        placement,
        o,
        "memcpy",
        0,
        data_bytes,
        &mut |s| {
            for c in &s[..k] {
                dst.copy_from_slice(c);
                black_box(&dst);
            }
        },
        None,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(gbps: f64, reference: Option<f64>) -> Measurement {
        let r = Measurement {
            op: "encode",
            k: 4,
            m: 1,
            chunk_bytes: 4096,
            placement: "cache",
            gbps,
            galops: gbps,
            reference_gbps: None,
            reference: None,
            ratio: None,
            ratio_range: None,
        };
        match reference {
            Some(g) => with_reference(r, "ref", g * 1e9),
            None => r,
        }
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    /// The combined ratio is the median of the runs' own ratios (each ours against the
    /// reference of the same run), not a ratio of medians taken from different runs.
    #[test]
    fn runs_combine_by_median_ratio_and_range() {
        let passes = vec![
            vec![m(10.0, Some(5.0)), m(1.0, None)],
            vec![m(4.0, Some(4.0)), m(3.0, None)],
            vec![m(9.0, Some(3.0)), m(2.0, None)],
        ];
        let rows = combine(&passes);
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!(r.gbps, 9.0);
        assert_eq!(r.reference_gbps, Some(4.0));
        // Ratios 2, 1, 3: median 2 (medians of the rates would give 9 / 4 = 2.25).
        assert_eq!(r.ratio, Some(2.0));
        assert_eq!(r.ratio_range, Some((1.0, 3.0)));
        assert_eq!(r.reference, Some("ref"));
        let plain = &rows[1];
        assert_eq!(
            (plain.gbps, plain.ratio, plain.ratio_range),
            (2.0, None, None)
        );
    }
}
