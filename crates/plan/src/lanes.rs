//! The counting planner: every scheme at once, counts only (the simulator's fast path).
//!
//! [`crate::Planner`] builds the list of unit I/Os of each piece, which the engine executes. The
//! simulator needs only how many there are, for every scheme, millions of times a second. This
//! planner takes the same decisions (from `planner::rules`, shared with [`crate::Planner`]) and
//! turns them into counts without building lists:
//!
//! - **First-read state of all schemes in one byte per data chunk.** Bit `l` of `bits[id]` is set
//!   when scheme `l` has read chunk `id` since it was last written. The σ of a piece for every
//!   scheme at once is the complement of the AND of its chunks' bytes; marking a chunk read
//!   (written) for a set of schemes is an OR (AND-NOT) with their lane mask. One cache line
//!   serves all schemes of a request.
//! - **Positions as bit masks.** A piece's reads (writes) are a set of stripe positions, at most
//!   once each (`Planner` never plans one position twice in a piece), so a count is a popcount.
//!   Positions are numbered `q = j` for parity `j` and `q = m + i` for data `i`; in that order the
//!   left-symmetric layout puts `q` on member `(p + q) mod n` with `p` the stripe's rotation, so a
//!   piece's member set is its position mask rotated by `p`.
//! - **Coalescing** (the real count): a unit on member `d` of a multi-stripe request joins the
//!   I/O of the previous stripe when the previous piece used `d` too, so the new I/Os of a piece
//!   are `popcount(members & !previous_members)`.
//!
//! The per-unit planner remains the definition: the simulator's tests replay random workloads
//! through both and require equal counts for every scheme and geometry.

use crate::extent::lane_member_io;
use crate::planner::rules;
use crate::{Geometry, Granularity, Mode, Op};
use serde::Serialize;
use stripeguard_integrity::{CrossCheck, Scheme};

/// Most members the counting planner handles (position sets are `u64` masks).
pub const MAX_MEMBERS: usize = 64;

/// Most schemes counted at once (one bit each in a first-read byte).
pub const MAX_LANES: usize = 8;

/// What one scheme's plans add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Disk reads in the paper's unit.
    pub disk_reads: u64,
    /// Disk writes.
    pub disk_writes: u64,
    /// Merge reads and merge checks (outside the paper's unit).
    pub merge_reads: u64,
    /// Reads after coalescing, merges included.
    pub real_reads: u64,
    /// Writes after coalescing.
    pub real_writes: u64,
    /// Read pieces.
    pub read_pieces: u64,
    /// Read pieces with σ = 1.
    pub first_read_pieces: u64,
    /// Read-modify-write pieces.
    pub rmw: u64,
    /// Reconstruct-write pieces.
    pub rcw: u64,
    /// Full-stripe write pieces.
    pub full_stripe: u64,
    /// Member I/O as the engine issues it: extents of checksum blocks and appendices
    /// (FORMAT.md §2.9.1), 512-byte sectors, no coalescing across stripes.
    pub member: crate::MemberIo,
}

/// Counts the plans of several schemes over one geometry.
#[derive(Clone, Debug)]
pub struct LanePlanner {
    g: Geometry,
    cross: CrossCheck,
    schemes: Vec<Scheme>,
    /// Every lane's bit.
    all: u8,
    /// Lanes whose partial writes rewrite the buddy (its first-read bit is cleared).
    buddy_writers: u8,
    tallies: Vec<Tally>,
    /// Per lane, what one I/O may move.
    grans: Vec<Granularity>,
    /// Per lane, the members the previous piece of this request read / wrote.
    prev_reads: [u64; MAX_LANES],
    prev_writes: [u64; MAX_LANES],
}

impl LanePlanner {
    /// A counting planner for `schemes` (lane `l` is `schemes[l]`), or `None` when the geometry
    /// has more than [`MAX_MEMBERS`] members or there are more than [`MAX_LANES`] schemes, or
    /// its chunk size does not fit the `u32` that [`Granularity`] takes.
    pub fn new(g: Geometry, schemes: &[Scheme]) -> Option<Self> {
        if g.n() > MAX_MEMBERS || schemes.is_empty() || schemes.len() > MAX_LANES {
            return None;
        }
        let chunk = u32::try_from(g.chunk_bytes).ok()?;
        assert!(g.k >= 1 && g.m >= 1 && g.chunk_bytes > 0);
        let lane_mask = |f: &dyn Fn(Scheme) -> bool| {
            schemes
                .iter()
                .enumerate()
                .filter(|(_, &s)| f(s))
                .fold(0u8, |a, (l, _)| a | 1 << l)
        };
        Some(LanePlanner {
            g,
            cross: CrossCheck::One,
            all: lane_mask(&|_| true),
            buddy_writers: lane_mask(&rules::writes_buddy),
            schemes: schemes.to_vec(),
            tallies: vec![Tally::default(); schemes.len()],
            grans: schemes
                .iter()
                .map(|&s| Granularity::new(s, g.k, chunk, 512))
                .collect(),
            prev_reads: [0; MAX_LANES],
            prev_writes: [0; MAX_LANES],
        })
    }

    /// Cross-check against every parity (see [`crate::Planner::with_cross_check`]).
    pub fn with_cross_check(mut self, cross: CrossCheck) -> Self {
        self.cross = cross;
        self
    }

    /// The schemes, in lane order.
    pub fn schemes(&self) -> &[Scheme] {
        &self.schemes
    }

    /// The counts so far, in lane order.
    pub fn tallies(&self) -> &[Tally] {
        &self.tallies
    }

    /// Count one request of `len` bytes at array byte `offset` (within capacity, `len > 0`).
    /// `bits` is the first-read state (one byte per data chunk of the array, see the module
    /// documentation) and is updated as the plans say.
    pub fn count(&mut self, bits: &mut [u8], op: Op, offset: u64, len: u64) {
        let sd = self.g.stripe_data_bytes();
        let end = offset + len;
        let multi = offset / sd != (end - 1) / sd;
        if multi {
            self.prev_reads = [0; MAX_LANES];
            self.prev_writes = [0; MAX_LANES];
        }
        let mut pos = offset;
        while pos < end {
            let stripe = pos / sd;
            let s_start = pos - stripe * sd;
            let s_end = (end - stripe * sd).min(sd);
            self.piece(bits, op, stripe, s_start, s_end, multi);
            pos = stripe * sd + s_end;
        }
    }

    fn piece(&mut self, bits: &mut [u8], op: Op, stripe: u64, start: u64, end: u64, multi: bool) {
        let g = self.g;
        let (k, m, n) = (g.k, g.m, g.n());
        let c = g.chunk_bytes;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "a piece lies in one stripe's data (end <= k * chunk): chunk indices below k"
        )]
        let (first, last) = ((start / c) as usize, ((end - 1) / c) as usize);
        let tau = last + 1 - first;
        let full = tau == k;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "`stripe * k` indexes `bits`, one byte per data chunk, held in memory"
        )]
        let base = (stripe * k as u64) as usize;
        let chunks = &mut bits[base..base + k];
        let all = self.all;

        // Position masks (q order: parity first, then data).
        let parity_all = mask(0, m);
        // The parity units a cross-check reads: P, or every parity.
        let n_cross = rules::cross_reads(self.cross, m);
        let parity0 = mask(0, n_cross);
        let data = |i: usize| 1u64 << (m + i);
        let touched = mask(m + first, m + last + 1);
        let data_all = mask(m, n);
        let rotation = g.rotation(stripe);

        match op {
            Op::Read => {
                let read = chunks[first..=last].iter().fold(all, |a, &b| a & b);
                for b in &mut chunks[first..=last] {
                    *b |= all;
                }
                for l in 0..self.schemes.len() {
                    let scheme = self.schemes[l];
                    let sigma = read >> l & 1 == 0;
                    let check = rules::read_cross_check(scheme, self.cross, full, sigma);
                    let t = &mut self.tallies[l];
                    t.disk_reads += (tau + check as usize * n_cross) as u64;
                    t.read_pieces += 1;
                    t.first_read_pieces += sigma as u64;
                    let reads = touched | if check { parity0 } else { 0 };
                    let mode = if full {
                        Mode::FullRead
                    } else {
                        Mode::PartialRead
                    };
                    t.member +=
                        lane_member_io(&self.grans[l], (k, m), mode, false, (start, end), reads, 0);
                    self.coalesce(l, multi, reads, 0, rotation);
                }
            }
            Op::Write => {
                // The partially written edge chunks (merged) and their first-read bytes.
                let partial = |i: usize| {
                    let lo = start.max(i as u64 * c) - i as u64 * c;
                    let hi = end.min((i as u64 + 1) * c) - i as u64 * c;
                    lo != 0 || hi != c
                };
                let mut edges = [(0usize, 0u8); 2];
                let mut n_edges = 0;
                let candidates = if first == last { 1 } else { 2 };
                for &i in &[first, last][..candidates] {
                    if partial(i) {
                        edges[n_edges] = (i, chunks[i]);
                        n_edges += 1;
                    }
                }
                let edges = &edges[..n_edges];
                let untouched_and = chunks[..first]
                    .iter()
                    .chain(&chunks[last + 1..])
                    .fold(all, |a, &b| a & b);
                let buddy = rules::buddy(k, last);
                let mut rcw_lanes = 0u8;

                for l in 0..self.schemes.len() {
                    let scheme = self.schemes[l];
                    let h1 = scheme == Scheme::Hybrid1;
                    // Merge reads of edges the plan does not read already, and whether a merged
                    // chunk needs its check (see `Ctx::merge_reads`).
                    let merges = |already_read: u64, have_cross: bool| -> (u64, u64) {
                        let mut reads = 0u64;
                        let mut need_check = false;
                        for &(i, byte) in edges {
                            if already_read & data(i) == 0 {
                                reads |= data(i);
                            }
                            need_check |= rules::merge_needs_check(scheme, || byte >> l & 1 == 0);
                        }
                        let check = need_check && !have_cross && scheme.has_appendix();
                        (reads, if check { parity0 } else { 0 })
                    };
                    let t = &mut self.tallies[l];
                    let mut mode = Mode::FullStripe;
                    let (paper, merge, writes) = if full {
                        t.full_stripe += 1;
                        let paper = if h1 { data_all } else { 0 };
                        let (mr, mc) = merges(paper, false);
                        (paper, mr | mc, data_all | parity_all)
                    } else {
                        let sigma = untouched_and >> l & 1 == 0;
                        let buddy_w = if rules::writes_buddy(scheme) {
                            data(buddy)
                        } else {
                            0
                        };
                        let writes = touched | parity_all | buddy_w;
                        if rules::prefers_rmw(scheme, (k, m, n_cross), tau, sigma) {
                            t.rmw += 1;
                            mode = Mode::Rmw;
                            let buddy_r = if scheme == Scheme::Hybrid2 {
                                data(buddy)
                            } else {
                                0
                            };
                            (touched | parity_all | buddy_r, 0, writes)
                        } else {
                            t.rcw += 1;
                            mode = Mode::Rcw;
                            rcw_lanes |= 1 << l;
                            let cross = rules::rcw_cross_check(scheme, sigma);
                            let paper = (data_all & !touched)
                                | if h1 { touched } else { 0 }
                                | if cross { parity0 } else { 0 };
                            let (mr, mc) = merges(paper, cross);
                            (paper, mr | mc, writes)
                        }
                    };
                    let t = &mut self.tallies[l];
                    let paper_n = paper.count_ones() as u64;
                    let all_reads = paper | merge;
                    let total_n = all_reads.count_ones() as u64;
                    t.disk_reads += paper_n;
                    t.merge_reads += total_n - paper_n;
                    t.disk_writes += writes.count_ones() as u64;
                    t.member += lane_member_io(
                        &self.grans[l],
                        (k, m),
                        mode,
                        h1,
                        (start, end),
                        all_reads,
                        writes,
                    );
                    self.coalesce(l, multi, all_reads, writes, rotation);
                }

                // First-read state: RCW lanes read the untouched chunks; then every lane wrote
                // the touched ones, and the buddy writers their buddy.
                if rcw_lanes != 0 {
                    let (before, rest) = chunks.split_at_mut(first);
                    for b in before.iter_mut().chain(&mut rest[tau..]) {
                        *b |= rcw_lanes;
                    }
                }
                for b in &mut chunks[first..=last] {
                    *b &= !all;
                }
                if !full {
                    chunks[buddy] &= !self.buddy_writers;
                }
            }
        }
    }

    /// Add a piece's reads and writes (position masks) to lane `l`'s real counts.
    #[inline]
    fn coalesce(&mut self, l: usize, multi: bool, reads: u64, writes: u64, rotation: usize) {
        let t = &mut self.tallies[l];
        if !multi {
            t.real_reads += reads.count_ones() as u64;
            t.real_writes += writes.count_ones() as u64;
            return;
        }
        let n = self.g.n();
        let (r, w) = (rotate(reads, rotation, n), rotate(writes, rotation, n));
        t.real_reads += (r & !self.prev_reads[l]).count_ones() as u64;
        t.real_writes += (w & !self.prev_writes[l]).count_ones() as u64;
        self.prev_reads[l] = r;
        self.prev_writes[l] = w;
    }
}

/// Bits `lo..hi` (at most 64).
#[inline]
#[allow(
    clippy::cast_possible_truncation,
    reason = "hi <= 64: the bits above 64 are masked off"
)]
fn mask(lo: usize, hi: usize) -> u64 {
    (((1u128 << hi) - 1) & !((1u128 << lo) - 1)) as u64
}

/// `x` (an `n`-bit set) rotated left by `p < n` within `n` bits.
#[inline]
#[allow(
    clippy::cast_possible_truncation,
    reason = "n <= 64: the bits above n are masked off"
)]
fn rotate(x: u64, p: usize, n: usize) -> u64 {
    let x = x as u128;
    (((x << p) | (x >> (n - p))) & ((1u128 << n) - 1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_rotation_follow_the_layout() {
        assert_eq!(mask(0, 64), u64::MAX);
        assert_eq!(mask(2, 5), 0b11100);
        for (k, m) in [(1, 1), (6, 2), (10, 4), (60, 4)] {
            let g = Geometry {
                k,
                m,
                chunk_bytes: 512,
                stripes: 1000,
            };
            for s in 0..2 * g.n() as u64 {
                let p = g.rotation(s);
                for pos in 0..g.n() {
                    let q = if pos < k { m + pos } else { pos - k };
                    let d = rotate(1 << q, p, g.n());
                    assert_eq!(
                        d,
                        1 << g.member_of(s, pos),
                        "k {k} m {m} stripe {s} pos {pos}"
                    );
                }
            }
        }
    }
}
