//! Per-piece planning (the rules are in the crate documentation).

use crate::Geometry;
use serde::Serialize;
use stripeguard_integrity::{CrossCheck, FirstReadMap, ReadState, Scheme};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// User read.
    Read,
    /// User write.
    Write,
}

/// How a piece is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Read of some data chunks.
    PartialRead,
    /// Read touching every data chunk.
    FullRead,
    /// Write touching every data chunk: parity computed from the new data.
    FullStripe,
    /// Read-modify-write: old data + old parity in, parity delta applied.
    Rmw,
    /// Reconstruct-write: untouched data in, parity re-encoded.
    Rcw,
}

/// Why a unit is read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// Read: bytes the user asked for. Write: the new data.
    User,
    /// RMW: the old contents of a chunk about to be overwritten.
    OldData,
    /// Parity: read old (RMW) or written new.
    Parity,
    /// RCW: an untouched data chunk.
    Untouched,
    /// hybrid1: a touched chunk read only for its old version number.
    Version,
    /// An extra read of parity to cross-check first-read chunks (its entry list).
    CrossCheck,
    /// hybrid2: the buddy of the last touched chunk, read and rewritten with a new checksum copy.
    Buddy,
    /// pure: a blind write of the buddy's appendix sector only.
    BuddyAppendix,
    /// Real count only: old bytes of a partially written chunk.
    Merge,
    /// Real count only: a cross-check read for merge-read chunks in first-read state.
    MergeCheck,
}

impl Purpose {
    /// Whether the paper's unit counts this I/O (merge I/Os are counted apart).
    pub fn in_paper_count(self) -> bool {
        !matches!(self, Purpose::Merge | Purpose::MergeCheck)
    }
}

/// One disk I/O of one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnitIo {
    /// Stripe position: `0..k` data, `k..n` parity.
    pub pos: usize,
    /// Why.
    pub purpose: Purpose,
}

/// The plan for one stripe's share of a request.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PiecePlan {
    /// The stripe.
    pub stripe: u64,
    /// Read or write.
    pub op: Option<Op>,
    /// How.
    pub mode: Option<Mode>,
    /// First byte of the piece, relative to the stripe's data (`0..k * chunk`).
    pub start: u64,
    /// One past the last byte, relative to the stripe's data.
    pub end: u64,
    /// First touched data chunk.
    pub first: usize,
    /// Last touched data chunk.
    pub last: usize,
    /// A chunk whose bytes this piece uses was in first-read state.
    pub sigma: bool,
    /// Reads, in the order they may be issued.
    pub reads: Vec<UnitIo>,
    /// Writes.
    pub writes: Vec<UnitIo>,
}

impl PiecePlan {
    /// Touched data chunks, `τ`.
    pub fn tau(&self) -> usize {
        self.last + 1 - self.first
    }
    /// Reads in the paper's unit. (Merge reads are always planned last.)
    pub fn paper_reads(&self) -> usize {
        let merges = self
            .reads
            .iter()
            .rev()
            .take_while(|u| !u.purpose.in_paper_count())
            .count();
        debug_assert!(self.reads[..self.reads.len() - merges]
            .iter()
            .all(|u| u.purpose.in_paper_count()));
        self.reads.len() - merges
    }
    /// Writes in the paper's unit.
    pub fn paper_writes(&self) -> usize {
        self.writes.len()
    }
    /// Merge reads (and merge checks), outside the paper's unit.
    pub fn merge_reads(&self) -> usize {
        self.reads.len() - self.paper_reads()
    }
    /// Whether data chunk `i`'s bytes `[lo, hi)` (chunk-relative) are all written by the piece.
    pub fn chunk_range(&self, i: usize, chunk_bytes: u64) -> (u64, u64) {
        let base = i as u64 * chunk_bytes;
        let lo = self.start.max(base) - base;
        let hi = self.end.min(base + chunk_bytes).saturating_sub(base);
        (lo, hi.max(lo))
    }
    /// Whether the piece reads position `pos`.
    pub fn reads_pos(&self, pos: usize) -> bool {
        self.reads.iter().any(|u| u.pos == pos)
    }
}

/// The decisions of Table II, in one place: the per-unit planner below and the counting
/// planner of [`crate::lanes`] both take them from here, so they cannot drift apart.
pub(crate) mod rules {
    use stripeguard_integrity::{CrossCheck, Scheme};

    /// Parity units a cross-check reads: P alone, or every parity.
    #[inline]
    pub fn cross_reads(cross: CrossCheck, m: usize) -> usize {
        match cross {
            CrossCheck::One => 1,
            CrossCheck::All => m,
        }
    }

    /// Whether a read piece adds a cross-check read of parity. With `One` (Table II) a
    /// full-stripe read of pure or hybrid2 has none: every chunk read is checked against its
    /// buddy's copy of its CRC. That copy can lose the same write as the chunk (the chunk and
    /// its buddy's appendix both old), so with `All` a full-stripe read of a first-read chunk is
    /// cross-checked against every parity too, as a hybrid1 / hybrid-seq one is (a chunk read
    /// and verified since it was last written cannot have lost that write).
    #[inline]
    pub fn read_cross_check(scheme: Scheme, cross: CrossCheck, full: bool, sigma: bool) -> bool {
        let all = cross == CrossCheck::All;
        match scheme {
            Scheme::None | Scheme::ChecksumChunk => false,
            Scheme::Pure => !full || (all && sigma),
            Scheme::Hybrid1 | Scheme::HybridSeq => sigma,
            Scheme::Hybrid2 => sigma && (!full || all),
        }
    }

    /// Whether a partial write of `tau` chunks goes read-modify-write: the scheme's extras
    /// (Table II) added to Eq. 1's costs, the smaller total wins, ties to RMW. `sigma`: an
    /// untouched chunk is in first-read state.
    #[inline]
    /// `cross`: parity units one cross-check reads (1 in the paper).
    pub fn prefers_rmw(
        scheme: Scheme,
        (k, m, cross): (usize, usize, usize),
        tau: usize,
        sigma: bool,
    ) -> bool {
        let s = sigma as usize * cross;
        let (rmw_extra, rcw_extra) = match scheme {
            // The checksum chunk's own I/O does not depend on the mode.
            Scheme::None | Scheme::ChecksumChunk => (0, 0),
            Scheme::Pure => (1, 1 + cross),
            Scheme::Hybrid1 => (0, tau + s),
            Scheme::Hybrid2 => (2, 1 + s),
            Scheme::HybridSeq => (0, s),
        };
        2 * (tau + m) + rmw_extra <= k + m + rcw_extra
    }

    /// Whether a reconstruct-write adds a cross-check read of parity.
    #[inline]
    pub fn rcw_cross_check(scheme: Scheme, sigma: bool) -> bool {
        match scheme {
            Scheme::None | Scheme::ChecksumChunk => false,
            Scheme::Pure => true,
            _ => sigma,
        }
    }

    /// The buddy of a partial write whose last touched chunk is `last`.
    #[inline]
    pub fn buddy(k: usize, last: usize) -> usize {
        if last + 1 == k {
            0
        } else {
            last + 1
        }
    }

    /// Whether a partial write also writes its buddy (pure: its appendix, hybrid2: the unit).
    #[inline]
    pub fn writes_buddy(scheme: Scheme) -> bool {
        matches!(scheme, Scheme::Pure | Scheme::Hybrid2)
    }

    /// Whether a merged (partially written) chunk needs a cross-check: always for pure (no self
    /// check of a data chunk), else when the chunk is in first-read state.
    #[inline]
    pub fn merge_needs_check(scheme: Scheme, first_read: impl FnOnce() -> bool) -> bool {
        scheme == Scheme::Pure || first_read()
    }
}

/// The planner: geometry, scheme and the first-read map.
#[derive(Debug)]
pub struct Planner {
    geometry: Geometry,
    scheme: Scheme,
    cross: CrossCheck,
    map: FirstReadMap,
    piece: PiecePlan,
}

impl Planner {
    /// A planner whose first-read map holds at most `map_bytes` of bitmap.
    pub fn new(geometry: Geometry, scheme: Scheme, map_bytes: u64) -> Self {
        assert!(geometry.k >= 1 && geometry.m >= 1 && geometry.chunk_bytes > 0);
        Planner {
            geometry,
            scheme,
            cross: CrossCheck::One,
            map: FirstReadMap::with_memory_bytes(map_bytes),
            piece: PiecePlan::default(),
        }
    }

    /// Cross-check first-reads against every parity's appendix (`All`: m extra reads where the
    /// paper's Table II counts one) instead of P's alone.
    pub fn with_cross_check(mut self, cross: CrossCheck) -> Self {
        self.set_cross_check(cross);
        self
    }

    /// See [`Planner::with_cross_check`].
    pub fn set_cross_check(&mut self, cross: CrossCheck) {
        self.cross = cross;
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The array grew to `stripes` stripes.
    pub fn set_stripes(&mut self, stripes: u64) {
        self.geometry.stripes = stripes;
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The first-read map (the engine marks repaired chunks written).
    pub fn map_mut(&mut self) -> &mut FirstReadMap {
        &mut self.map
    }

    /// Plan a request of `len` bytes at array byte `offset` (both within capacity; the caller
    /// validates). `each` is called once per piece, in stripe order, with the piece's plan; the
    /// first-read map is updated as the plan says.
    pub fn plan(&mut self, op: Op, offset: u64, len: u64, each: impl FnMut(&PiecePlan)) {
        let mut piece = std::mem::take(&mut self.piece);
        let mut ctx = Ctx {
            g: self.geometry,
            scheme: self.scheme,
            cross: self.cross,
            map: &mut self.map,
        };
        ctx.plan(op, offset, len, &mut piece, each);
        self.piece = piece;
    }

    /// [`Planner::plan`] with the first-read state kept elsewhere (the simulator's shared map).
    pub fn plan_with<S: ReadState>(
        &mut self,
        state: &mut S,
        op: Op,
        offset: u64,
        len: u64,
        each: impl FnMut(&PiecePlan),
    ) {
        let mut piece = std::mem::take(&mut self.piece);
        let mut ctx = Ctx {
            g: self.geometry,
            scheme: self.scheme,
            cross: self.cross,
            map: state,
        };
        ctx.plan(op, offset, len, &mut piece, each);
        self.piece = piece;
    }
}

/// One planning call: geometry, scheme and the first-read state it reads and updates.
struct Ctx<'a, S: ReadState> {
    g: Geometry,
    scheme: Scheme,
    cross: CrossCheck,
    map: &'a mut S,
}

impl<S: ReadState> Ctx<'_, S> {
    fn plan(
        &mut self,
        op: Op,
        offset: u64,
        len: u64,
        piece: &mut PiecePlan,
        mut each: impl FnMut(&PiecePlan),
    ) {
        let sd = self.g.stripe_data_bytes();
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let stripe = pos / sd;
            let s_start = pos - stripe * sd;
            let s_end = (end - stripe * sd).min(sd);
            self.plan_piece(op, stripe, s_start, s_end, piece);
            each(piece);
            pos = stripe * sd + s_end;
        }
    }

    fn first_read(&mut self, stripe: u64, i: usize) -> bool {
        let id = self.g.data_chunk_id(stripe, i);
        self.map.is_first_read(id)
    }

    #[allow(
        clippy::cast_possible_truncation,
        reason = "a piece lies in one stripe's data (end <= k * chunk): chunk indices below k"
    )]
    fn plan_piece(&mut self, op: Op, stripe: u64, start: u64, end: u64, p: &mut PiecePlan) {
        let g = self.g;
        let (k, m) = (g.k, g.m);
        let c = g.chunk_bytes;
        p.stripe = stripe;
        p.op = Some(op);
        p.start = start;
        p.end = end;
        p.first = (start / c) as usize;
        p.last = ((end - 1) / c) as usize;
        p.reads.clear();
        p.writes.clear();
        let tau = p.tau();
        let full = tau == k;
        let scheme = self.scheme;
        let io = |pos, purpose| UnitIo { pos, purpose };

        match op {
            Op::Read => {
                p.mode = Some(if full {
                    Mode::FullRead
                } else {
                    Mode::PartialRead
                });
                let mut sigma = false;
                for i in p.first..=p.last {
                    sigma |= self.first_read(stripe, i);
                    p.reads.push(io(i, Purpose::User));
                }
                p.sigma = sigma;
                if rules::read_cross_check(scheme, self.cross, full, sigma) {
                    for j in 0..rules::cross_reads(self.cross, m) {
                        p.reads.push(io(k + j, Purpose::CrossCheck));
                    }
                }
                for i in p.first..=p.last {
                    self.map.mark_read(g.data_chunk_id(stripe, i));
                }
            }
            Op::Write if full => {
                p.mode = Some(Mode::FullStripe);
                p.sigma = false;
                if scheme == Scheme::Hybrid1 {
                    for i in 0..k {
                        p.reads.push(io(i, Purpose::Version));
                    }
                }
                self.merge_reads(stripe, p, false);
                for i in 0..k {
                    p.writes.push(io(i, Purpose::User));
                }
                for j in 0..m {
                    p.writes.push(io(k + j, Purpose::Parity));
                }
                for i in 0..k {
                    self.map.mark_written(g.data_chunk_id(stripe, i));
                }
            }
            Op::Write => {
                let mut sigma = false;
                for i in (0..k).filter(|&i| i < p.first || i > p.last) {
                    sigma |= self.first_read(stripe, i);
                }
                let buddy = rules::buddy(k, p.last);
                let shape = (k, m, rules::cross_reads(self.cross, m));
                if rules::prefers_rmw(scheme, shape, tau, sigma) {
                    p.mode = Some(Mode::Rmw);
                    p.sigma = false;
                    for i in p.first..=p.last {
                        p.reads.push(io(i, Purpose::OldData));
                    }
                    for j in 0..m {
                        p.reads.push(io(k + j, Purpose::Parity));
                    }
                    if scheme == Scheme::Hybrid2 {
                        p.reads.push(io(buddy, Purpose::Buddy));
                    }
                } else {
                    p.mode = Some(Mode::Rcw);
                    p.sigma = sigma;
                    for i in (0..k).filter(|&i| i < p.first || i > p.last) {
                        p.reads.push(io(i, Purpose::Untouched));
                    }
                    let cross = rules::rcw_cross_check(scheme, sigma);
                    if scheme == Scheme::Hybrid1 {
                        for i in p.first..=p.last {
                            p.reads.push(io(i, Purpose::Version));
                        }
                    }
                    if cross {
                        for j in 0..rules::cross_reads(self.cross, m) {
                            p.reads.push(io(k + j, Purpose::CrossCheck));
                        }
                    }
                    self.merge_reads(stripe, p, cross);
                    for i in (0..k).filter(|&i| i < p.first || i > p.last) {
                        self.map.mark_read(g.data_chunk_id(stripe, i));
                    }
                }
                for i in p.first..=p.last {
                    p.writes.push(io(i, Purpose::User));
                }
                for j in 0..m {
                    p.writes.push(io(k + j, Purpose::Parity));
                }
                match scheme {
                    Scheme::Pure => p.writes.push(io(buddy, Purpose::BuddyAppendix)),
                    Scheme::Hybrid2 => p.writes.push(io(buddy, Purpose::Buddy)),
                    _ => {}
                }
                for i in p.first..=p.last {
                    self.map.mark_written(g.data_chunk_id(stripe, i));
                }
                if rules::writes_buddy(scheme) {
                    self.map.mark_written(g.data_chunk_id(stripe, buddy));
                }
            }
        }
    }

    /// Merge reads for the partially written first / last chunk of a write whose plan does not
    /// read them yet (hybrid1's version reads already do), plus one merge check when a merged
    /// chunk needs a cross-check (first-read state; always for pure, which has no self check of
    /// a data chunk) and the plan has no cross-check read yet. The merged bytes survive the
    /// write, so they must be checked like any other bytes the piece uses.
    fn merge_reads(&mut self, stripe: u64, p: &mut PiecePlan, have_cross: bool) {
        let c = self.g.chunk_bytes;
        let mut need_check = false;
        let edges = [p.first, p.last];
        let n_edges = if p.first == p.last { 1 } else { 2 };
        for &i in &edges[..n_edges] {
            let (lo, hi) = p.chunk_range(i, c);
            if lo == 0 && hi == c {
                continue;
            }
            if !p.reads.iter().any(|u| u.pos == i) {
                p.reads.push(UnitIo {
                    pos: i,
                    purpose: Purpose::Merge,
                });
            }
            need_check |= rules::merge_needs_check(self.scheme, || self.first_read(stripe, i));
        }
        if need_check && !have_cross && self.scheme.has_appendix() {
            for j in 0..rules::cross_reads(self.cross, self.g.m) {
                p.reads.push(UnitIo {
                    pos: self.g.k + j,
                    purpose: Purpose::MergeCheck,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: u64 = 4096;

    fn planner(scheme: Scheme, k: usize, m: usize) -> Planner {
        let g = Geometry {
            k,
            m,
            chunk_bytes: C,
            stripes: 16,
        };
        Planner::new(g, scheme, 1 << 20)
    }

    /// (mode, paper I/Os, extra over bare RAID in the same mode, sigma) of one piece of τ chunks
    /// starting at data chunk `first` of stripe 0; `warm` reads the whole stripe first.
    fn one(
        scheme: Scheme,
        op: Op,
        first: usize,
        tau: usize,
        warm: bool,
    ) -> (Mode, usize, usize, bool) {
        let (k, m) = (6, 2);
        let mut p = planner(scheme, k, m);
        if warm {
            p.plan(Op::Read, 0, k as u64 * C, |_| {});
        }
        let mut out = None;
        p.plan(op, first as u64 * C, tau as u64 * C, |piece| {
            out = Some(piece.clone())
        });
        let piece = out.unwrap();
        let mode = piece.mode.unwrap();
        let total = piece.paper_reads() + piece.paper_writes();
        let base = match mode {
            Mode::PartialRead | Mode::FullRead => tau,
            Mode::FullStripe | Mode::Rcw => k + m,
            Mode::Rmw => 2 * (tau + m),
        };
        (mode, total, total - base, piece.sigma)
    }

    #[test]
    fn extra_ios_are_table_ii() {
        use Scheme::*;
        for (warm, s) in [(false, 1), (true, 0)] {
            // Partial-stripe read: pure 1, hybrids σ.
            assert_eq!(one(Pure, Op::Read, 1, 2, warm).2, 1);
            for h in [Hybrid1, Hybrid2, HybridSeq] {
                assert_eq!(one(h, Op::Read, 1, 2, warm).2, s, "{h} partial read");
            }
            // Full-stripe read: pure 0, hybrid1 σ, hybrid2 0, hybrid-seq σ.
            assert_eq!(one(Pure, Op::Read, 0, 6, warm).2, 0);
            assert_eq!(one(Hybrid1, Op::Read, 0, 6, warm).2, s);
            assert_eq!(one(Hybrid2, Op::Read, 0, 6, warm).2, 0);
            assert_eq!(one(HybridSeq, Op::Read, 0, 6, warm).2, s);
            // Full-stripe write: 0 except hybrid1 k.
            for (h, e) in [
                (None, 0),
                (Pure, 0),
                (Hybrid1, 6),
                (Hybrid2, 0),
                (HybridSeq, 0),
            ] {
                assert_eq!(
                    one(h, Op::Write, 0, 6, warm),
                    (Mode::FullStripe, 8 + e, e, false)
                );
            }
        }
        // Partial writes: RMW extras for τ = 1 (RMW everywhere it is cheaper).
        assert_eq!(one(Pure, Op::Write, 2, 1, false).0, Mode::Rmw);
        assert_eq!(one(Pure, Op::Write, 2, 1, false).2, 1);
        assert_eq!(one(Hybrid1, Op::Write, 2, 1, false).2, 0);
        assert_eq!(one(Hybrid2, Op::Write, 2, 1, false).2, 2);
        assert_eq!(one(HybridSeq, Op::Write, 2, 1, false).2, 0);
        // RCW extras for τ = 5 of k = 6: n = 8 < 2(5+2) = 14.
        for (warm, s) in [(false, 1), (true, 0)] {
            assert_eq!(one(Pure, Op::Write, 0, 5, warm), (Mode::Rcw, 10, 2, s == 1));
            assert_eq!(
                one(Hybrid2, Op::Write, 0, 5, warm),
                (Mode::Rcw, 9 + s, 1 + s, s == 1)
            );
            assert_eq!(
                one(HybridSeq, Op::Write, 0, 5, warm),
                (Mode::Rcw, 8 + s, s, s == 1)
            );
            // hybrid1 RCW would cost 8 + 5 + σ = 13 + σ; RMW costs 14: RCW when σ = 0, tie → RMW.
            let h1 = one(Hybrid1, Op::Write, 0, 5, warm);
            if s == 0 {
                assert_eq!(h1, (Mode::Rcw, 13, 5, false));
            } else {
                assert_eq!(h1.0, Mode::Rmw);
                assert_eq!(h1.2, 0);
            }
        }
    }

    #[test]
    fn cross_check_all_cross_checks_first_full_stripe_reads_of_every_scheme() {
        use Scheme::{ChecksumChunk, Hybrid1, Hybrid2, HybridSeq, Pure};
        // (extra reads of a full-stripe read of k = 6, m = 2, first-read / subsequent-read).
        let full = |scheme, cross, warm| {
            let mut p = planner(scheme, 6, 2).with_cross_check(cross);
            if warm {
                p.plan(Op::Read, 0, 6 * C, |_| {});
            }
            let mut out = None;
            p.plan(Op::Read, 0, 6 * C, |x| out = Some(x.clone()));
            let x = out.unwrap();
            assert_eq!(x.mode, Some(Mode::FullRead));
            assert!(x.reads[6..]
                .iter()
                .all(|u| u.purpose == Purpose::CrossCheck));
            x.paper_reads() - 6
        };
        for scheme in [Scheme::None, ChecksumChunk] {
            assert_eq!(full(scheme, CrossCheck::All, false), 0, "{scheme}");
        }
        for scheme in [Pure, Hybrid1, Hybrid2, HybridSeq] {
            // `all`: σ·m (every parity's appendix), like a partial read of the hybrids.
            assert_eq!(full(scheme, CrossCheck::All, false), 2, "{scheme}");
            assert_eq!(full(scheme, CrossCheck::All, true), 0, "{scheme}");
        }
        // `one` keeps Table II: pure and hybrid2 0, hybrid1 and hybrid-seq σ.
        for (scheme, first) in [(Pure, 0), (Hybrid1, 1), (Hybrid2, 0), (HybridSeq, 1)] {
            assert_eq!(full(scheme, CrossCheck::One, false), first, "{scheme}");
            assert_eq!(full(scheme, CrossCheck::One, true), 0, "{scheme}");
        }
    }

    #[test]
    fn bare_raid_picks_by_equation_1_with_ties_to_rmw() {
        // k = 6, m = 2: RMW 2(τ+2) vs RCW 8: τ = 1 → 6 RMW, τ = 2 → 8 tie → RMW, τ = 3 → RCW.
        assert_eq!(one(Scheme::None, Op::Write, 0, 1, false).0, Mode::Rmw);
        assert_eq!(one(Scheme::None, Op::Write, 0, 2, false).0, Mode::Rmw);
        assert_eq!(one(Scheme::None, Op::Write, 0, 3, false).0, Mode::Rcw);
    }

    #[test]
    fn first_read_state_follows_the_rules() {
        let mut p = planner(Scheme::Hybrid1, 6, 2);
        let sig = |p: &mut Planner, op, off: u64, len: u64| {
            let mut s = false;
            p.plan(op, off, len, |x| s = x.sigma);
            s
        };
        assert!(sig(&mut p, Op::Read, 0, C), "never read: first-read");
        assert!(!sig(&mut p, Op::Read, 0, C), "read once: subsequent");
        p.plan(Op::Write, 0, C, |_| {}); // RMW of chunk 0 clears it
        assert!(sig(&mut p, Op::Read, 0, C));
        // An RMW read of a chunk about to be overwritten does not set it.
        p.plan(Op::Write, C, C, |x| assert_eq!(x.mode, Some(Mode::Rmw)));
        assert!(sig(&mut p, Op::Read, C, C));
    }

    #[test]
    fn merge_reads_are_counted_apart() {
        // hybrid-seq RCW of 4.5 chunks: the half chunk must be merged (real count), paper unchanged.
        let mut p = planner(Scheme::HybridSeq, 6, 2);
        p.plan(Op::Read, 0, 6 * C, |_| {});
        let mut got = None;
        p.plan(Op::Write, 0, 4 * C + C / 2, |x| got = Some(x.clone()));
        let x = got.unwrap();
        assert_eq!(x.mode, Some(Mode::Rcw));
        assert_eq!(x.paper_reads() + x.paper_writes(), 8);
        assert_eq!(x.merge_reads(), 1);
        assert_eq!(x.reads.last().unwrap().purpose, Purpose::Merge);
    }

    #[test]
    fn requests_split_into_pieces_per_stripe() {
        let mut p = planner(Scheme::None, 4, 1);
        let mut pieces = vec![];
        p.plan(Op::Read, 3 * C + 10, 6 * C, |x| {
            pieces.push((x.stripe, x.start, x.end))
        });
        assert_eq!(
            pieces,
            [(0, 3 * C + 10, 4 * C), (1, 0, 4 * C), (2, 0, C + 10)]
        );
    }
}
