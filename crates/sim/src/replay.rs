//! Replay: every request through one [`Planner`] per scheme (the engine's planner), counting.
//!
//! Counts per scheme:
//! - **paper**: disk reads and writes in the paper's unit (a chunk + its appendix = one I/O),
//!   exactly what the engine issues for the same requests on a healthy array;
//! - **merge**: extra reads of partially written chunks (and their cross-checks), which the
//!   paper's chunk-granular model leaves out;
//! - **real**: paper + merge I/Os after coalescing, per request and member, units of consecutive
//!   stripes into one I/O (what an elevator would send).

use crate::trace::Request;
use serde::Serialize;
use stripeguard_integrity::{FirstReadMap, ReadState, Scheme};
use stripeguard_plan::{Geometry, Granularity, LanePlanner, Mode, Op, Planner, Tally};

/// How trace offsets are mapped onto the array's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fit {
    /// Offset modulo capacity (aligned down to 512 B); requests running past the end are cut.
    Wrap,
    /// Offset × capacity / `extent` (the trace's largest end offset, found in a first pass).
    Scale {
        /// Largest end offset in the trace.
        extent: u64,
    },
}

impl Fit {
    /// Map a request onto `[0, capacity)`.
    pub fn apply(self, r: Request, capacity: u64) -> Request {
        let offset = match self {
            Fit::Wrap => (r.offset % capacity) / 512 * 512,
            Fit::Scale { extent } => {
                let scaled = r.offset as u128 * capacity as u128 / extent.max(1) as u128;
                // Below `capacity` for an offset within `extent`; one past it saturates here
                // and the `min` below clamps it into the array.
                u64::try_from(scaled).unwrap_or(u64::MAX) / 512 * 512
            }
        };
        let offset = offset.min(capacity - 1);
        Request {
            op: r.op,
            offset,
            len: r.len.min(capacity - offset).max(1),
        }
    }
}

/// What one scheme cost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SchemeCounts {
    /// The scheme.
    pub scheme: Option<Scheme>,
    /// User reads replayed.
    pub user_reads: u64,
    /// User writes replayed.
    pub user_writes: u64,
    /// Bytes read by users.
    pub user_read_bytes: u64,
    /// Bytes written by users.
    pub user_write_bytes: u64,
    /// Disk I/Os: the paper's count, merges, the real count and the piece mix.
    #[serde(flatten)]
    pub io: Tally,
}

impl SchemeCounts {
    /// Paper-unit total.
    pub fn total(&self) -> u64 {
        self.io.disk_reads + self.io.disk_writes
    }
    /// Real total.
    pub fn real_total(&self) -> u64 {
        self.io.real_reads + self.io.real_writes
    }
    /// Fraction of read pieces that were first-reads.
    pub fn first_read_fraction(&self) -> f64 {
        if self.io.read_pieces == 0 {
            0.0
        } else {
            self.io.first_read_pieces as f64 / self.io.read_pieces as f64
        }
    }
}

/// What every scheme saw from the user (the same for all of them).
#[derive(Clone, Copy, Debug, Default)]
struct UserCounts {
    reads: u64,
    writes: u64,
    read_bytes: u64,
    write_bytes: u64,
}

/// The result of a replay.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Geometry.
    pub k: usize,
    /// Parity.
    pub m: usize,
    /// Chunk size.
    pub chunk_bytes: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Per scheme, in the order asked.
    pub schemes: Vec<SchemeCounts>,
    /// Per RAID-6 code, when asked to compare them (`sim --code`).
    pub codes: Vec<crate::CodeCounts>,
    /// Kroth & Yang's checksum chunk: its extra I/O over bare RAID, per cache size.
    pub checksum_chunk: Vec<crate::CkCounts>,
}

impl SimReport {
    /// Counts of `scheme`, if simulated.
    pub fn get(&self, scheme: Scheme) -> Option<&SchemeCounts> {
        self.schemes.iter().find(|c| c.scheme == Some(scheme))
    }
    /// Increase of disk I/Os over `none` in percent (paper's unit).
    pub fn increase_pct(&self, scheme: Scheme) -> Option<f64> {
        let base = self.get(Scheme::None)?.total() as f64;
        let s = self.get(scheme)?.total() as f64;
        Some(if base == 0.0 {
            0.0
        } else {
            (s / base - 1.0) * 100.0
        })
    }
    /// Same with the real counts.
    pub fn real_increase_pct(&self, scheme: Scheme) -> Option<f64> {
        let base = self.get(Scheme::None)?.real_total() as f64;
        let s = self.get(scheme)?.real_total() as f64;
        Some(if base == 0.0 {
            0.0
        } else {
            (s / base - 1.0) * 100.0
        })
    }
}

struct Lane {
    planner: Planner,
    scheme: Scheme,
    /// Counts of the per-scheme path (the counting planner keeps its own).
    counts: Tally,
    /// What one I/O may move (512-byte sectors).
    gran: Granularity,
    // Per member, the last stripe read / written in the current request (for coalescing).
    last_read: Vec<u64>,
    last_write: Vec<u64>,
}

/// Every scheme's first-read state. When the whole array fits the memory bound, one byte per
/// data chunk holds all schemes' bits (bit `lane`), so the cache line fetched for the first
/// scheme of a request serves the others; otherwise each scheme has its own zoned, bounded map.
enum SharedMap {
    Flat(Vec<u8>),
    PerLane(Vec<FirstReadMap>),
}

struct LaneState<'a> {
    map: &'a mut SharedMap,
    lane: usize,
}

impl ReadState for LaneState<'_> {
    #[inline]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a data chunk id below the length of the in-memory flat map"
    )]
    fn is_first_read(&mut self, chunk: u64) -> bool {
        match self.map {
            SharedMap::Flat(v) => (v[chunk as usize] >> self.lane) & 1 == 0,
            SharedMap::PerLane(m) => m[self.lane].is_first_read(chunk),
        }
    }
    #[inline]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a data chunk id below the length of the in-memory flat map"
    )]
    fn mark_read(&mut self, chunk: u64) {
        match self.map {
            SharedMap::Flat(v) => v[chunk as usize] |= 1 << self.lane,
            SharedMap::PerLane(m) => m[self.lane].mark_read(chunk),
        }
    }
    #[inline]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a data chunk id below the length of the in-memory flat map"
    )]
    fn mark_written(&mut self, chunk: u64) {
        match self.map {
            SharedMap::Flat(v) => v[chunk as usize] &= !(1 << self.lane),
            SharedMap::PerLane(m) => m[self.lane].mark_written(chunk),
        }
    }
}

/// A simulator over one geometry and a set of schemes.
///
/// Two paths with the same counts: when the shared byte map holds the state and the geometry
/// has at most 64 members, every request goes through the counting planner
/// ([`stripeguard_plan::LanePlanner`]: all schemes in one pass, no unit lists); otherwise
/// through one [`Planner`] per scheme. The tests replay random workloads through both.
pub struct Simulator {
    geometry: Geometry,
    lanes: Vec<Lane>,
    map: SharedMap,
    fast: Option<LanePlanner>,
    requests: u64,
    user: UserCounts,
    codes: Option<crate::CodeSim>,
    checksum_chunk: Vec<crate::CkSim>,
}

impl Simulator {
    /// One planner per scheme; first-read state of at most `map_bytes` per scheme.
    ///
    /// Panics if the chunk size does not fit a `u32`, as chunk sizes do everywhere else
    /// ([`ArrayShape::geometry`](crate::ArrayShape::geometry) refuses such a shape).
    pub fn new(geometry: Geometry, schemes: &[Scheme], map_bytes: u64) -> Self {
        let n = geometry.n();
        let chunk = u32::try_from(geometry.chunk_bytes).expect("chunk size fits a u32");
        let chunks = geometry.stripes * geometry.k as u64;
        let flat = usize::try_from(chunks)
            .ok()
            .filter(|_| schemes.len() <= 8 && chunks <= map_bytes * schemes.len() as u64);
        let map = if let Some(len) = flat {
            SharedMap::Flat(vec![0u8; len])
        } else {
            SharedMap::PerLane(
                schemes
                    .iter()
                    .map(|_| FirstReadMap::with_memory_bytes(map_bytes))
                    .collect(),
            )
        };
        let fast = match map {
            SharedMap::Flat(_) => LanePlanner::new(geometry, schemes),
            SharedMap::PerLane(_) => None,
        };
        Simulator {
            map,
            fast,
            user: UserCounts::default(),
            geometry,
            lanes: schemes
                .iter()
                .map(|&s| Lane {
                    planner: Planner::new(geometry, s, map_bytes),
                    scheme: s,
                    counts: Tally::default(),
                    gran: Granularity::new(s, geometry.k, chunk, 512),
                    last_read: vec![u64::MAX; n],
                    last_write: vec![u64::MAX; n],
                })
                .collect(),
            requests: 0,
            codes: None,
            checksum_chunk: Vec::new(),
        }
    }

    /// Also count Kroth & Yang's checksum chunk ([`crate::cksum`]) for each cache size (in
    /// checksum chunks; 0 = no cache).
    pub fn with_checksum_chunk(mut self, cache_sizes: &[usize]) -> Self {
        self.checksum_chunk = cache_sizes
            .iter()
            .map(|&n| crate::CkSim::new(self.geometry, n))
            .collect();
        self
    }

    /// Also count the RAID-6 codes (raid6, rdp, tier) in their own blocks, with physical
    /// member `failed` lost (see [`crate::codes`]).
    pub fn with_codes(mut self, failed: Option<usize>) -> Result<Self, String> {
        self.codes = Some(crate::CodeSim::new(self.geometry, failed)?);
        Ok(self)
    }

    /// Count first-reads cross-checked against every parity (`create --cross-check all`).
    pub fn with_cross_check(mut self, cross: stripeguard_integrity::CrossCheck) -> Self {
        self.fast = self.fast.map(|f| f.with_cross_check(cross));
        for lane in &mut self.lanes {
            lane.planner.set_cross_check(cross);
        }
        self
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Replay one request (already within capacity) through every scheme.
    pub fn replay(&mut self, r: Request) {
        self.requests += 1;
        match r.op {
            Op::Read => {
                self.user.reads += 1;
                self.user.read_bytes += r.len;
            }
            Op::Write => {
                self.user.writes += 1;
                self.user.write_bytes += r.len;
            }
        }
        if r.len == 0 {
            return; // a user request that moves no bytes plans no I/O
        }
        if let Some(c) = &mut self.codes {
            c.replay(r);
        }
        for c in &mut self.checksum_chunk {
            c.replay(r);
        }
        match (&mut self.fast, &mut self.map) {
            (Some(fast), SharedMap::Flat(bits)) => fast.count(bits, r.op, r.offset, r.len),
            _ => self.replay_per_scheme(r),
        }
    }

    /// One [`Planner`] per scheme, counting the unit lists it plans.
    fn replay_per_scheme(&mut self, r: Request) {
        let g = self.geometry;
        let sd = g.stripe_data_bytes();
        // A request within one stripe has nothing to coalesce: each unit is one real I/O.
        let one_stripe = r.offset / sd == (r.offset + r.len - 1) / sd;
        for (li, lane) in self.lanes.iter_mut().enumerate() {
            let c = &mut lane.counts;
            if !one_stripe {
                lane.last_read.fill(u64::MAX);
                lane.last_write.fill(u64::MAX);
            }
            let (last_read, last_write) = (&mut lane.last_read, &mut lane.last_write);
            let gran = &lane.gran;
            let mut state = LaneState {
                map: &mut self.map,
                lane: li,
            };
            lane.planner
                .plan_with(&mut state, r.op, r.offset, r.len, |p| {
                    let paper = p.paper_reads() as u64;
                    c.member += p.member_io(gran);
                    c.disk_reads += paper;
                    c.merge_reads += p.reads.len() as u64 - paper;
                    c.disk_writes += p.writes.len() as u64;
                    match p.mode {
                        Some(Mode::PartialRead) | Some(Mode::FullRead) => {
                            c.read_pieces += 1;
                            c.first_read_pieces += p.sigma as u64;
                        }
                        Some(Mode::Rmw) => c.rmw += 1,
                        Some(Mode::Rcw) => c.rcw += 1,
                        Some(Mode::FullStripe) => c.full_stripe += 1,
                        None => {}
                    }
                    if one_stripe {
                        c.real_reads += p.reads.len() as u64;
                        c.real_writes += p.writes.len() as u64;
                        return;
                    }
                    let rot = g.rotation(p.stripe);
                    for u in &p.reads {
                        let d = g.member_in(rot, u.pos);
                        if last_read[d] == u64::MAX || last_read[d] + 1 != p.stripe {
                            c.real_reads += 1;
                        }
                        last_read[d] = p.stripe;
                    }
                    for u in &p.writes {
                        let d = g.member_in(rot, u.pos);
                        if last_write[d] == u64::MAX || last_write[d] + 1 != p.stripe {
                            c.real_writes += 1;
                        }
                        last_write[d] = p.stripe;
                    }
                });
        }
    }

    /// Replay a batch of requests. Same counts as [`Simulator::replay`] one by one; the
    /// first-read bytes of requests a few places ahead are prefetched, so the cache misses of a
    /// large array overlap instead of stalling each request in turn.
    pub fn replay_batch(&mut self, requests: &[Request]) {
        const AHEAD: usize = 12;
        let chunk = self.geometry.chunk_bytes;
        for (i, r) in requests.iter().enumerate() {
            if let (SharedMap::Flat(v), Some(next)) = (&self.map, requests.get(i + AHEAD)) {
                // The data chunk id of an array byte is offset / chunk (stripe * k + index).
                let id = usize::try_from(next.offset / chunk).ok();
                if let Some(id) = id.filter(|&id| id < v.len()) {
                    prefetch(&v[id]);
                }
            }
            self.replay(*r);
        }
    }

    /// The counts so far.
    pub fn report(&self) -> SimReport {
        SimReport {
            k: self.geometry.k,
            m: self.geometry.m,
            chunk_bytes: self.geometry.chunk_bytes,
            requests: self.requests,
            schemes: self
                .lanes
                .iter()
                .enumerate()
                .map(|(l, lane)| SchemeCounts {
                    scheme: Some(lane.scheme),
                    user_reads: self.user.reads,
                    user_writes: self.user.writes,
                    user_read_bytes: self.user.read_bytes,
                    user_write_bytes: self.user.write_bytes,
                    // One path counts for the whole life of a simulator.
                    io: self.fast.as_ref().map_or(lane.counts, |f| f.tallies()[l]),
                })
                .collect(),
            codes: self.codes.as_ref().map(|c| c.report()).unwrap_or_default(),
            checksum_chunk: self.checksum_chunk.iter().map(|c| c.report()).collect(),
        }
    }
}

#[inline(always)]
fn prefetch(x: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs only SSE, part of every x86-64 CPU (the target's baseline);
    // a prefetch is a hint: it never faults, even on a bad address, and changes no state.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(x as *const u8 as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Profile, SynthConfig, Synthetic};

    /// Random requests, aligned and not, within a stripe and across many, on a small array so
    /// chunks are revisited in every first-read state.
    fn random_requests(g: Geometry, count: usize, seed: u64) -> Vec<Request> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cap = g.capacity_bytes();
        let c = g.chunk_bytes;
        (0..count)
            .map(|_| {
                let aligned = rng.random_bool(0.5);
                let unit = if aligned { c } else { 512 };
                let offset = rng.random_range(0..cap / unit) * unit;
                let max_len = match rng.random_range(0..4) {
                    0 => c,
                    1 => g.stripe_data_bytes(),
                    2 => 3 * g.stripe_data_bytes(),
                    _ => 2 * c,
                };
                let len = (rng.random_range(1..=max_len.div_ceil(unit)) * unit).min(cap - offset);
                let op = if rng.random_bool(0.45) {
                    Op::Read
                } else {
                    Op::Write
                };
                Request { op, offset, len }
            })
            .collect()
    }

    #[test]
    fn counting_planner_equals_the_per_scheme_planners() {
        for (k, m, chunk, stripes) in [
            (1, 1, 4096, 64),
            (2, 1, 512, 64),
            (4, 1, 4096, 32),
            (6, 2, 4096, 48),
            (6, 2, 65536, 16),
            (3, 1, 16384, 24),
            (5, 3, 1024, 40),
            (10, 4, 2048, 24),
            (60, 4, 512, 8),
        ] {
            let g = Geometry {
                k,
                m,
                chunk_bytes: chunk,
                stripes,
            };
            let reqs = random_requests(g, 6000, k as u64 * 31 + m as u64);
            let cross = if k % 2 == 0 {
                stripeguard_integrity::CrossCheck::All
            } else {
                stripeguard_integrity::CrossCheck::One
            };
            let mut fast = Simulator::new(g, &Scheme::ALL, 1 << 20).with_cross_check(cross);
            assert!(fast.fast.is_some());
            let mut reference = Simulator::new(g, &Scheme::ALL, 1 << 20).with_cross_check(cross);
            reference.fast = None;
            for r in &reqs {
                fast.replay(*r);
                reference.replay(*r);
            }
            for (a, b) in fast
                .report()
                .schemes
                .iter()
                .zip(&reference.report().schemes)
            {
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{k}+{m} chunk {chunk}");
            }
            // The negative control: a planner that ignored first-read state would differ.
            let r = reference.report();
            assert!(r.get(Scheme::Hybrid1).unwrap().io.first_read_pieces > 0);
            assert!(
                r.get(Scheme::Hybrid1).unwrap().io.first_read_pieces
                    < r.get(Scheme::Hybrid1).unwrap().io.read_pieces
            );
        }
    }

    #[test]
    fn batch_replay_counts_equal_one_by_one_and_per_lane_maps_equal_the_shared_one() {
        let g = Geometry {
            k: 6,
            m: 2,
            chunk_bytes: 4096,
            stripes: 4096,
        };
        let reqs: Vec<Request> = Synthetic::new(SynthConfig {
            profile: Profile::by_name("Exch").unwrap(),
            requests: 20_000,
            capacity_bytes: g.capacity_bytes(),
            seed: 3,
        })
        .collect();
        let mut one = Simulator::new(g, &Scheme::ALL, 1 << 20);
        reqs.iter().for_each(|r| one.replay(*r));
        let mut batch = Simulator::new(g, &Scheme::ALL, 1 << 20);
        batch.replay_batch(&reqs);
        // A bound too small for the shared byte map forces per-scheme zoned maps (large zones
        // stay resident here, so the counts must not change).
        let mut zoned = Simulator::new(g, &Scheme::ALL, 4096);
        assert!(matches!(zoned.map, SharedMap::PerLane(_)));
        zoned.replay_batch(&reqs);
        for ((a, b), c) in one
            .report()
            .schemes
            .iter()
            .zip(&batch.report().schemes)
            .zip(&zoned.report().schemes)
        {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            assert_eq!(format!("{a:?}"), format!("{c:?}"));
        }
    }
}
