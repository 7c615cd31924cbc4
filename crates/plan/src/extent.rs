//! What each planned unit I/O really moves (FORMAT.md §2.9.1).
//!
//! The planner plans in the paper's unit — one chunk plus its appendix per I/O — because Li &
//! Lee's Table II is normative for the simulator. The engine does not move whole units where the
//! layout lets it do less: a chunk is covered by a CRC per checksum block (4 KiB) in its
//! appendix, so a request that touches part of a chunk reads or writes only those blocks plus the
//! appendix, and reads made only for an appendix's fields (a first-read cross-check, hybrid1's old
//! version, hybrid2's buddy copy) move the appendix alone. This module turns each planned I/O into
//! its **extent**; the engine issues exactly the extents and the simulator and benchmarks count
//! them, so the byte-accurate count agrees with the engine by construction (the agreement test
//! checks it against a counting disk).
//!
//! Rules (schemes other than `pure`, chunks of more than one block; `pure` and one-block chunks
//! move whole chunks, but appendix-only I/O stays appendix-only for every scheme):
//! - a user read, an RMW old-data read and a data write: the written (read) byte range of the
//!   chunk widened to whole blocks, plus the appendix;
//! - RMW parity (read and write): `H`, the union of the widened ranges of every touched chunk at
//!   the same offsets, plus the appendix (the parity delta is byte-local for xor, raid6 and rs;
//!   for RDP and Tier-code, whose diagonals mix rows, RMW old data and parity are whole units);
//! - cross-check, merge check, hybrid1 version (of a wholly written chunk), hybrid2 buddy, pure
//!   buddy appendix: appendix only;
//! - everything else (RCW untouched reads, merge reads, RCW and full-stripe parity): whole unit.

use crate::{Mode, PiecePlan, Purpose, UnitIo};
use serde::Serialize;
use stripeguard_integrity::{appendix_bytes_for, block_bytes_for, Scheme};

/// How finely an array's units can be moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granularity {
    /// `C`.
    pub chunk: u64,
    /// `b`, the checksum block.
    pub block: u64,
    /// `A·S`, bytes of the appendix (0 for `none`).
    pub appendix: u64,
    /// Whether chunk bytes may be moved in part (not pure, more than one block).
    pub partial: bool,
    /// Whether the code's parity is byte-local (xor, raid6, rs): a read-modify-write then reads
    /// and writes only the touched blocks of old data and parity. The array codes (RDP,
    /// Tier-code) mix rows, so their RMW moves whole old data and parity chunks.
    pub local_parity: bool,
}

impl Granularity {
    /// The granularity of an array of `scheme` with `k` data chunks.
    pub fn new(scheme: Scheme, k: usize, chunk: u32, sector: u32) -> Self {
        let block = block_bytes_for(chunk) as u64;
        Granularity {
            chunk: chunk as u64,
            block,
            appendix: appendix_bytes_for(scheme, k, chunk, sector) as u64,
            partial: scheme != Scheme::Pure && block < chunk as u64,
            local_parity: true,
        }
    }

    /// The same for a code whose parity is (or is not) byte-local.
    pub fn with_local_parity(mut self, local: bool) -> Self {
        self.local_parity = local;
        self
    }

    /// The unit's size, `C + A·S`.
    pub fn unit(&self) -> u64 {
        self.chunk + self.appendix
    }

    /// `[lo, hi)` widened to whole blocks (the whole chunk when parts cannot be moved).
    pub fn widen(&self, lo: u64, hi: u64) -> (u64, u64) {
        if !self.partial {
            return (0, self.chunk);
        }
        let b = self.block;
        (lo / b * b, hi.div_ceil(b) * b)
    }
}

/// The bytes of one unit that one planned I/O moves: chunk bytes `[lo, hi)` and, when
/// `appendix`, the appendix after the chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Extent {
    /// First chunk byte.
    pub lo: u64,
    /// One past the last chunk byte (`lo == hi`: no chunk bytes).
    pub hi: u64,
    /// Whether the appendix is moved too.
    pub appendix: bool,
}

impl Extent {
    /// The whole unit.
    pub fn whole(g: &Granularity) -> Extent {
        Extent {
            lo: 0,
            hi: g.chunk,
            appendix: g.appendix > 0,
        }
    }

    /// Whether this is the whole unit.
    pub fn is_whole(&self, g: &Granularity) -> bool {
        self.lo == 0 && self.hi == g.chunk && (self.appendix || g.appendix == 0)
    }

    /// The checksum blocks `[first, end)` of the chunk bytes.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "`lo <= hi <= chunk`, which `Granularity::new` takes as a u32"
    )]
    pub fn blocks(&self, g: &Granularity) -> (usize, usize) {
        ((self.lo / g.block) as usize, (self.hi / g.block) as usize)
    }

    /// Bytes moved.
    pub fn bytes(&self, g: &Granularity) -> u64 {
        self.hi - self.lo + if self.appendix { g.appendix } else { 0 }
    }

    /// The contiguous member I/Os: `(byte within the unit, length)`, one when the chunk bytes
    /// run into the appendix, else one per part.
    pub fn ios(&self, g: &Granularity) -> impl Iterator<Item = (u64, u64)> {
        let chunk = self.hi > self.lo;
        let app = self.appendix && g.appendix > 0;
        let (a, b) = if chunk && app && self.hi == g.chunk {
            (Some((self.lo, g.unit() - self.lo)), None)
        } else {
            (
                chunk.then_some((self.lo, self.hi - self.lo)),
                app.then_some((g.chunk, g.appendix)),
            )
        };
        a.into_iter().chain(b)
    }
}

/// Member I/O of a plan, counted as the engine issues it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemberIo {
    /// Member read I/Os.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Member write I/Os.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
}

impl std::ops::AddAssign for MemberIo {
    fn add_assign(&mut self, o: MemberIo) {
        self.reads += o.reads;
        self.read_bytes += o.read_bytes;
        self.writes += o.writes;
        self.write_bytes += o.write_bytes;
    }
}

impl PiecePlan {
    /// The union `H` of the widened written ranges of every touched chunk (RMW parity).
    pub fn parity_hull(&self, g: &Granularity) -> (u64, u64) {
        let mut lo = g.chunk;
        let mut hi = 0;
        for i in self.first..=self.last {
            let (a, b) = self.chunk_range(i, g.chunk);
            let (a, b) = g.widen(a, b);
            lo = lo.min(a);
            hi = hi.max(b);
        }
        (lo.min(hi), hi)
    }

    /// The extent of planned I/O `io` (a read or a write of this piece).
    pub fn extent(&self, io: &UnitIo, g: &Granularity) -> Extent {
        let app = g.appendix > 0;
        let appendix_only = Extent {
            lo: 0,
            hi: 0,
            appendix: app,
        };
        let blocks_of = |i: usize| {
            let (a, b) = self.chunk_range(i, g.chunk);
            let (lo, hi) = g.widen(a, b);
            Extent {
                lo,
                hi,
                appendix: app,
            }
        };
        match io.purpose {
            // hybrid1's version read of a partly written chunk is also its merge read (the
            // planner plans one read per position): the whole unit.
            Purpose::Version if self.chunk_range(io.pos, g.chunk) != (0, g.chunk) => {
                Extent::whole(g)
            }
            Purpose::CrossCheck
            | Purpose::MergeCheck
            | Purpose::Version
            | Purpose::Buddy
            | Purpose::BuddyAppendix => appendix_only,
            Purpose::User => blocks_of(io.pos),
            Purpose::OldData if g.local_parity => blocks_of(io.pos),
            Purpose::OldData => Extent::whole(g),
            Purpose::Parity if self.mode == Some(Mode::Rmw) && g.local_parity => {
                let (lo, hi) = self.parity_hull(g);
                Extent {
                    lo,
                    hi,
                    appendix: app,
                }
            }
            Purpose::Parity | Purpose::Untouched | Purpose::Merge => Extent::whole(g),
        }
    }

    /// The member I/O this piece makes, as the engine issues it.
    pub fn member_io(&self, g: &Granularity) -> MemberIo {
        let mut t = MemberIo::default();
        for io in &self.reads {
            let e = self.extent(io, g);
            t.reads += e.ios(g).count() as u64;
            t.read_bytes += e.bytes(g);
        }
        for io in &self.writes {
            let e = self.extent(io, g);
            t.writes += e.ios(g).count() as u64;
            t.write_bytes += e.bytes(g);
        }
        t
    }
}

impl Extent {
    fn add_to(&self, g: &Granularity, t: &mut MemberIo, write: bool) {
        let (ios, bytes) = (self.ios(g).count() as u64, self.bytes(g));
        if write {
            t.writes += ios;
            t.write_bytes += bytes;
        } else {
            t.reads += ios;
            t.read_bytes += bytes;
        }
    }
}

/// [`PiecePlan::member_io`] for the counting planner, which keeps positions as bit masks
/// (`q = j` for parity `j`, `q = m + i` for data `i`) and no purposes: the purpose of each
/// position follows from the piece's mode as in [`PiecePlan::extent`] (the simulator's tests
/// require both to agree on random workloads).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lane_member_io(
    gran: &Granularity,
    (_k, m): (usize, usize),
    mode: Mode,
    hybrid1: bool,
    (start, end): (u64, u64),
    reads: u64,
    writes: u64,
) -> MemberIo {
    let c = gran.chunk;
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a piece lies in one stripe's data (end <= k * chunk): chunk indices below k"
    )]
    let (first, last) = ((start / c) as usize, ((end - 1) / c) as usize);
    let range = |i: usize| {
        let base = i as u64 * c;
        let lo = start.max(base) - base;
        let hi = end.min(base + c).saturating_sub(base).max(lo);
        (lo, hi)
    };
    let app = Extent {
        lo: 0,
        hi: 0,
        appendix: gran.appendix > 0,
    };
    let whole = Extent::whole(gran);
    let blocks_of = |i: usize| {
        let (a, b) = range(i);
        let (lo, hi) = gran.widen(a, b);
        Extent {
            lo,
            hi,
            appendix: gran.appendix > 0,
        }
    };
    let hull = if mode != Mode::Rmw {
        whole
    } else {
        let (mut lo, mut hi) = (c, 0);
        for i in first..=last {
            let e = blocks_of(i);
            lo = lo.min(e.lo);
            hi = hi.max(e.hi);
        }
        Extent {
            lo: lo.min(hi),
            hi,
            appendix: gran.appendix > 0,
        }
    };
    let hull = if gran.local_parity { hull } else { whole };
    let touched = |i: usize| (first..=last).contains(&i);
    let partial = |i: usize| range(i) != (0, c);
    let mut t = MemberIo::default();
    // Only the positions in the masks (a piece touches few of a wide stripe's).
    let mut r = reads;
    while r != 0 {
        let q = r.trailing_zeros() as usize;
        r &= r - 1;
        let e = if q < m {
            if mode == Mode::Rmw {
                hull
            } else {
                app
            }
        } else {
            let i = q - m;
            match mode {
                Mode::PartialRead | Mode::FullRead => blocks_of(i),
                Mode::Rmw if touched(i) && !gran.local_parity => whole,
                Mode::Rmw if touched(i) => blocks_of(i),
                Mode::Rmw => app,
                Mode::FullStripe | Mode::Rcw if touched(i) => {
                    if hybrid1 && !partial(i) {
                        app
                    } else {
                        whole
                    }
                }
                Mode::FullStripe | Mode::Rcw => whole,
            }
        };
        e.add_to(gran, &mut t, false);
    }
    let mut w = writes;
    while w != 0 {
        let q = w.trailing_zeros() as usize;
        w &= w - 1;
        let e = if q < m {
            if mode == Mode::Rmw {
                hull
            } else {
                whole
            }
        } else if touched(q - m) {
            blocks_of(q - m)
        } else {
            app
        };
        e.add_to(gran, &mut t, true);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Geometry, Op, Planner};

    fn one(scheme: Scheme, op: Op, off: u64, len: u64) -> (PiecePlan, Granularity) {
        let g = Geometry {
            k: 6,
            m: 2,
            chunk_bytes: 65536,
            stripes: 10,
        };
        let mut p = Planner::new(g, scheme, 1 << 16);
        // Warm the chunk so reads are subsequent reads.
        p.plan(Op::Read, 0, g.capacity_bytes(), |_| {});
        let mut out = None;
        p.plan(op, off, len, |x| out = Some(x.clone()));
        (out.unwrap(), Granularity::new(scheme, 6, 65536, 512))
    }

    #[test]
    fn a_4k_read_moves_one_block_and_the_appendix() {
        let (p, g) = one(Scheme::HybridSeq, Op::Read, 8192, 4096);
        let io = p.member_io(&g);
        assert_eq!((io.reads, io.read_bytes), (2, 4096 + 512));
        let (p, g) = one(Scheme::None, Op::Read, 8192, 4096);
        assert_eq!(p.member_io(&g).read_bytes, 4096);
        // Pure keeps whole chunks (and cross-checks against P's appendix).
        let (p, g) = one(Scheme::Pure, Op::Read, 8192, 4096);
        assert_eq!(p.member_io(&g).read_bytes, 65536 + 512 + 512);
    }

    #[test]
    fn a_4k_raid6_write_reads_and_writes_three_blocks() {
        let (p, g) = one(Scheme::HybridSeq, Op::Write, 65536 + 4096, 4096);
        assert_eq!(p.mode, Some(Mode::Rmw));
        let io = p.member_io(&g);
        assert_eq!((io.reads, io.read_bytes), (6, 3 * (4096 + 512)));
        assert_eq!((io.writes, io.write_bytes), (6, 3 * (4096 + 512)));
        let (p, g) = one(Scheme::None, Op::Write, 65536 + 4096, 4096);
        let io = p.member_io(&g);
        assert_eq!(
            (io.reads, io.read_bytes, io.write_bytes),
            (3, 3 * 4096, 3 * 4096)
        );
    }

    #[test]
    fn a_write_ending_on_the_chunk_end_is_one_io_with_its_appendix() {
        let g = Granularity::new(Scheme::Hybrid1, 6, 65536, 512);
        let e = Extent {
            lo: 61440,
            hi: 65536,
            appendix: true,
        };
        assert_eq!(e.ios(&g).collect::<Vec<_>>(), vec![(61440, 4096 + 512)]);
        let e = Extent {
            lo: 0,
            hi: 4096,
            appendix: true,
        };
        assert_eq!(e.ios(&g).count(), 2);
    }
}
