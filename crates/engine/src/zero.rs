//! Zero stripes (FORMAT.md §2.7, docs/ZERO-STRIPES.md): TRIM and WRITE_ZEROES as metadata.
//!
//! An array that keeps zero stripes (incompatible feature bit 3, set by `create`) lists ranges
//! of whole stripes that read as zeros in its stripe-state record, whatever their units hold on
//! the members. The rules, each where the code is:
//!
//! 1. **Read** — a zero stripe reads as zeros without member I/O (`io.rs`); what vouches for
//!    them is the record (CRC-sealed, two copies with a sequence on every member).
//! 2. **Zero** ([`Array::zero`]) — whole stripes join the set in memory under their locks (a
//!    read after it returns zeros); the record is written at the next flush. The partial
//!    stripes at the ends are written as zeros through the ordinary write path.
//! 3. **Flush** — data first, then the record (`resync.rs`, `stripe_state.rs`): a stripe
//!    written into leaves the record on disk only once that write is durable.
//! 4. **Write into a zero stripe** — written whole: the new bytes, zeros around them, parity
//!    over exactly those bytes and fresh metadata, nothing read but (hybrid1) the versions on
//!    disk, so the new ones are higher than any unit left there from before ([`Array::
//!    gather_zero`]). Never parity over the stale bytes. Then it leaves the set.
//! 5. **Resync, scrub, replace** skip zero stripes: their units are never read.
//!
//! A record that would hold more ranges than a copy has room for gives up its smallest ranges
//! at the next flush, written out as real zeros (`untrusted.rs`).

use crate::array::Array;
use crate::error::EngineError;
use crate::layout::InHand;
use crate::num::{usize_of, Piece, Pos, StripeIx};
use crate::stripe_state::Removed;
use std::ops::Range;
use stripeguard_format::EventKind;
use stripeguard_integrity::{state_capacity, Appendix, Scheme};
use stripeguard_plan::{Extent, PiecePlan};

/// Bytes of zeros written per step where zeros are written (a few MiB, whole stripes).
const ZERO_STEP_BYTES: usize = 4 << 20;

impl Array {
    /// Whether the array keeps zero stripes (feature bit 3): TRIM and WRITE_ZEROES of whole
    /// stripes are then metadata, and `create` writes no unit.
    pub fn keeps_zero_stripes(&self) -> bool {
        self.sb().zero_stripes && self.sb().layout.state_bytes > 0
    }

    /// A new array: every stripe reads as zeros, the record durable on every member.
    pub(crate) fn start_all_zero(&self) -> Result<(), EngineError> {
        {
            let mut u = self.untrusted_set().hold();
            u.zero.insert(0, self.geometry().stripes);
            u.dirty = true;
        }
        self.settle_untrusted_after_flush(self.untrusted_set().removals())
    }

    /// Whether the stripe-state record as memory has it fits a copy (a record over its room
    /// is brought back by the next flush, which writes the smallest zero ranges out).
    pub(crate) fn zero_set_fits(&self) -> bool {
        let u = self.untrusted_set().hold();
        let r = u.record_since(0);
        r.entries.len() + r.zero.len() <= state_capacity(u.copy_bytes)
    }

    /// A grow's new stripes `from..to` as zero stripes, durably in the record, before the
    /// superblocks say them (FORMAT.md §2, "Growing the array"); `false`, with nothing
    /// changed, when the record has no room for another range. Every stripe lock is held and
    /// the array was just flushed: nothing is pending.
    pub(crate) fn list_zero_stripes(&self, from: u64, to: u64) -> Result<bool, EngineError> {
        let mut u = self.untrusted_set().hold();
        let before = u.zero.clone();
        u.zero.insert(from, to);
        let r = u.record_since(0);
        if r.entries.len() + r.zero.len() > state_capacity(u.copy_bytes) {
            u.zero = before;
            return Ok(false);
        }
        u.dirty = true;
        self.persist_untrusted(&mut u, None)?;
        Ok(true)
    }

    /// A reshape's finish (FORMAT.md §2, "Reshaping the array"): the stripe-state record as
    /// the members hold it is replaced by one listing `ranges` as zero stripes and what this
    /// array listed itself (what the old geometry listed names old stripes), durably, with a sequence above
    /// the copies there; `false`, nothing written, when the record has no room for them.
    pub(crate) fn only_zero_stripes(&self, ranges: &[Range<u64>]) -> Result<bool, EngineError> {
        // What this array listed itself (the new geometry's view: blocks a resync after an
        // online run could not verify) is kept; what the members' record lists names old
        // stripes.
        let (at, region) = (
            self.sb().layout.state_offset(),
            usize_of(self.sb().layout.state_bytes),
        );
        // Above the sequence of every intact copy there (whatever geometry it was written for).
        let newest = self
            .newest_record(at, region / 2, |_: &stripeguard_integrity::StateRecord| {
                true
            })
            .record;
        let mut u = self.untrusted_set().hold();
        if let Some(r) = newest {
            u.sequence = u.sequence.max(r.sequence);
        }
        u.zero = crate::stripe_state::ZeroSet::default();
        for r in ranges.iter().filter(|r| r.start < r.end) {
            u.zero.insert(r.start, r.end);
        }
        let r = u.record_since(0);
        if r.entries.len() + r.zero.len() > state_capacity(u.copy_bytes) {
            return Ok(false);
        }
        u.dirty = true;
        self.persist_untrusted(&mut u, None)?;
        Ok(true)
    }

    /// Whether `stripe` reads as zeros (its units are not read).
    pub(crate) fn is_zero(&self, stripe: StripeIx) -> bool {
        self.untrusted_set().is_zero(stripe)
    }

    /// Whether the record on disk says `stripe` reads as zeros.
    pub(crate) fn is_zero_on_disk(&self, stripe: StripeIx) -> bool {
        let s = stripe.get();
        let u = self.untrusted_set().hold();
        let z = &u.durable.zero;
        let i = z.partition_point(|r| r.first <= s);
        i > 0 && s < z[i - 1].first.saturating_add(z[i - 1].count)
    }

    /// The ranges of zero stripes (first stripe, end stripe) overlapping stripes `lo..hi`,
    /// clipped to them.
    pub fn zero_stripes_within(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        if !self.untrusted_set().any_zero() {
            return Vec::new();
        }
        self.untrusted_set().hold().zero.overlapping(lo, hi)
    }

    /// Stripes that read as zeros, and the ranges they are in.
    pub fn zero_stripe_count(&self) -> (u64, usize) {
        let u = self.untrusted_set().hold();
        (u.zero.stripes(), u.zero.len())
    }

    /// Make `len` bytes at array byte `offset` read as zeros (TRIM, WRITE_ZEROES, `discard`).
    /// Whole stripes become zero stripes when the array keeps them; the rest is written.
    pub fn zero(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        if !self.is_writable() {
            return Err(EngineError::Config(
                "the array was assembled read-only".into(),
            ));
        }
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if !self.keeps_zero_stripes() {
            return self.write_zeros(offset, len);
        }
        let sd = self.geometry().stripe_data_bytes();
        let end = offset + len;
        // Whole stripes `first..last`; the pieces before and after them (a range inside one
        // stripe, or across a boundary with no whole stripe, is all pieces).
        let (first, last) = (offset.div_ceil(sd), end / sd);
        let head_end = (first * sd).min(end);
        let tail_start = (last * sd).max(head_end);
        self.write_zeros_unless_zero(offset, head_end)?;
        for s in (first..last).map(StripeIx::new) {
            let _guard = self.lock_stripe(s);
            self.make_zero(s);
        }
        self.write_zeros_unless_zero(tail_start, end)
    }

    /// Whether [`Array::zero`] of this range writes nothing (NBD's FAST_ZERO): the array keeps
    /// zero stripes and any partial stripe at either end reads as zeros already.
    pub fn zero_is_cheap(&self, offset: u64, len: u64) -> bool {
        if !self.keeps_zero_stripes() || self.check_range(offset, len).is_err() {
            return false;
        }
        let sd = self.geometry().stripe_data_bytes();
        let end = offset + len;
        let partial = |at: u64| !at.is_multiple_of(sd) && !self.is_zero(StripeIx::new(at / sd));
        len == 0 || (!partial(offset) && !partial(end))
    }

    /// Stripe `s` (its lock held) reads as zeros from now on; listed blocks in it are replaced.
    fn make_zero(&self, s: StripeIx) {
        let listed = self.untrusted_set().of_stripe(s);
        {
            let mut u = self.untrusted_set().hold();
            if u.zero.contains(s.get()) {
                return;
            }
            for r in &listed {
                u.take_off(Removed::Untrusted(*r));
            }
            u.zero.insert(s.get(), s.get() + 1);
            u.dirty = true;
        }
        // The units stay as they are on disk and are never read while the stripe is zero.
        let n = self.geometry().n();
        self.units().forget_appendices(s, Pos::upto(n));
        self.forget_verified(s, Pos::upto(self.geometry().k));
        if !listed.is_empty() {
            self.log_events(
                |_| {},
                listed.iter().map(|r| crate::events::Event {
                    stripe: r.stripe,
                    member: self.member_of(s, Pos::new(r.position as usize)).get(),
                    position: r.position as usize,
                    role: stripeguard_format::EventRole::Data,
                    kind: EventKind::UntrustedCleared,
                    evidence: format!(
                        "{} bytes from byte {}: the stripe was zeroed (TRIM / WRITE_ZEROES)",
                        r.len, r.offset
                    ),
                    action: crate::events::EventAction::Notice,
                }),
            );
        }
    }

    /// Bytes `lo..hi` (within at most two stripes) written as zeros, each stripe's part unless
    /// it reads as zeros already.
    fn write_zeros_unless_zero(&self, lo: u64, hi: u64) -> Result<(), EngineError> {
        let sd = self.geometry().stripe_data_bytes();
        let mut at = lo;
        while at < hi {
            let piece_end = ((at / sd + 1) * sd).min(hi);
            if !self.is_zero(StripeIx::new(at / sd)) {
                self.write_zeros(at, piece_end - at)?;
            }
            at = piece_end;
        }
        Ok(())
    }

    /// Write `len` zero bytes at `offset`, in steps that stay stripe-aligned (WRITE_ZEROES
    /// with NO_HOLE: the bytes are written even where they could be a zero stripe).
    pub fn write_zeros(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        let sd = usize_of(self.geometry().stripe_data_bytes());
        let step = (sd * ZERO_STEP_BYTES.div_ceil(sd)) as u64;
        let zeros = vec![0u8; usize_of(step.min(len))];
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (step - at % step).min(end - at).min(zeros.len() as u64);
            self.write(at, &zeros[..usize_of(n)])?;
            at += n;
        }
        Ok(())
    }

    /// Give up zero ranges (a record with no room for them): each stripe written as real zeros,
    /// which takes it out of the set.
    pub(crate) fn write_out_zero_ranges(&self, ranges: &[(u64, u64)]) -> Result<(), EngineError> {
        let sd = self.geometry().stripe_data_bytes();
        for &(lo, hi) in ranges {
            self.write_zeros(lo * sd, (hi - lo) * sd)?;
        }
        Ok(())
    }

    /// A write piece into zero stripes: `batch` pieces with `zero[i]` for those whose stripe
    /// reads as zeros, each of which is written whole (the piece's bytes, zeros around them).
    /// Every stripe's lock is held.
    pub(crate) fn write_into_zero(
        &self,
        batch: &[Piece],
        data: &[u8],
        zero: &[bool],
    ) -> Result<(), EngineError> {
        // The journal's batches were counted for the pieces as asked; one at a time a whole
        // stripe always fits (its units, its parity, its missing chunks: at most 2n slots).
        if self.sb().write_journal && batch.len() > 1 {
            for (piece, &z) in batch.iter().zip(zero) {
                let one = std::slice::from_ref(piece);
                if z {
                    self.write_into_zero(one, data, &[true])?;
                } else {
                    self.write_pieces(one, data, &[false])?;
                }
            }
            return Ok(());
        }
        let sd = self.geometry().stripe_data_bytes();
        let total: u64 = batch
            .iter()
            .zip(zero)
            .map(|(p, &z)| if z { sd } else { p.2 })
            .sum();
        let mut buf = vec![0u8; usize_of(total)];
        let mut pieces = Vec::with_capacity(batch.len());
        let mut at = 0usize;
        for (&(s, off, len, src), &z) in batch.iter().zip(zero) {
            let bytes = &data[src..src + usize_of(len)];
            if z {
                let base = s.get() * sd;
                let o = at + usize_of(off - base);
                buf[o..o + bytes.len()].copy_from_slice(bytes);
                pieces.push((s, base, sd, at));
                at += usize_of(sd);
            } else {
                buf[at..at + bytes.len()].copy_from_slice(bytes);
                pieces.push((s, off, len, at));
                at += bytes.len();
            }
        }
        self.write_pieces(&pieces, &buf, zero)
    }

    /// Stripes written whole out of the zero set: in memory now, on disk after a flush.
    pub(crate) fn leave_zero(&self, stripes: impl Iterator<Item = StripeIx>) {
        let mut u = self.untrusted_set().hold();
        for s in stripes {
            u.take_off(Removed::Zero(s.get()));
        }
    }

    /// What a whole-stripe write into a zero stripe has in hand: nothing of its units (they
    /// are unspecified), and, for hybrid1, whose versions count up per chunk, the highest
    /// version any unit of the stripe still claims on disk, so that every new version is
    /// higher than any left there from before the stripe was zeroed (a lost write of the new
    /// unit then leaves a unit that claims less, which is found stale, never one that wins).
    ///
    /// The checksum member's unit must be zero after its table (a scrub checks it): written as
    /// zeros here; the write puts the table in place (at once, or from the cache).
    pub(crate) fn gather_zero(&self, plan: &PiecePlan) -> Result<InHand, EngineError> {
        let g = self.geometry();
        let (n, k) = (g.n(), g.k);
        let stripe = StripeIx::new(plan.stripe);
        if self.sb().scheme == Scheme::ChecksumChunk && !self.is_failed(self.ck_member()) {
            // From the table's padded end (block-aligned, as every member I/O): the table's own
            // write covers its padding.
            let (_, tb) = self.ck_shape();
            let c = usize_of(g.chunk_bytes);
            if tb < c {
                let mut zeros = self.unit_buf();
                zeros[tb..c].fill(0);
                let w = self
                    .members()
                    .get(self.ck_member())
                    .write_at(self.unit_offset(plan.stripe) + tb as u64, &zeros[tb..c]);
                self.recycle([zeros]);
                w?;
            }
        }
        let truth = if self.sb().scheme == Scheme::Hybrid1 {
            vec![Some(self.highest_claim_on_disk(stripe)?); k]
        } else {
            vec![None; k]
        };
        Ok(InHand {
            units: (0..n).map(|_| None).collect(),
            erased: vec![false; n],
            truth,
            data_crc: vec![None; k],
            appendices: (0..n).map(|_| None).collect(),
            table: None,
        })
    }

    /// The highest version or sequence any intact appendix of `stripe` that names its place
    /// claims (0 when none does).
    fn highest_claim_on_disk(&self, stripe: StripeIx) -> Result<u64, EngineError> {
        let n = self.geometry().n();
        let c = usize_of(self.geometry().chunk_bytes);
        let only_appendix = Extent {
            lo: 0,
            hi: 0,
            appendix: true,
        };
        let list: Vec<(Pos, Extent)> = Pos::upto(n).map(|p| (p, only_appendix)).collect();
        let units = self.read_extents(stripe, &list)?;
        let mut high = 0u64;
        for (p, u) in Pos::upto(n).zip(&units) {
            let Some(u) = u else { continue };
            if let Ok(a) = Appendix::decode_appendix(&u[c..]) {
                if a.identity == self.identity(stripe, p) {
                    high = high
                        .max(a.tag)
                        .max(a.entries.iter().copied().max().unwrap_or(0));
                }
            }
        }
        self.recycle(units.into_iter().flatten());
        Ok(high)
    }
}
