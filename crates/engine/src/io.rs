//! Reads and writes: the one orchestrator of a request. A request is split into per-stripe
//! pieces; each piece, under its stripe's lock, goes through the same steps, each a call into
//! one part:
//!
//! 1. **plan** — the shared planner (`Array::plan_piece`): which extents of which units to
//!    read and write, and how (read-modify-write or reconstruct-write);
//! 2. **gather** — unit I/O (`unitio.rs`) reads the planned extents;
//! 3. **check** — the integrity layout (`Layout::check`) checks them;
//! 4. **repair** — on any failed check or erasure, the whole stripe is repaired (`repair.rs`:
//!    the layout decides) and the piece takes its units from the repaired stripe;
//! 5. **prepare** (writes) — the new chunks and parity are built here, the layout seals them
//!    (`Layout::seal_write`);
//! 6. **journal** (writes) — the write-intent claim (`resync.rs`) and, with the write journal,
//!    every in-place I/O made durable first (`journaling.rs`);
//! 7. **commit** (writes) — the units in place, then the layout keeps what it now knows
//!    (`Layout::committed`).
//!
//! A piece that fails puts its stripe's data chunks back in first-read state.

use crate::array::Array;
use crate::error::EngineError;
use crate::layout::{Image, InHand, NewChunk, NewWrite, Reads, Sealed};
use crate::num::{usize_of, Piece, Pos, StripeIx};
use stripeguard_codes::ChunkUpdate;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::EventKind;
use stripeguard_integrity::MirrorKind;
use stripeguard_plan::{Extent, Mode, Op, PiecePlan, Purpose, UnitIo};

impl Array {
    /// An error unless `len` bytes at `offset` lie within the array (no overflow on any input).
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        let capacity = self.capacity_bytes();
        match offset.checked_add(len) {
            Some(end) if end <= capacity => Ok(()),
            _ => Err(EngineError::OutOfRange {
                offset,
                len,
                capacity,
            }),
        }
    }

    /// Call `f(stripe, piece_offset, piece_len, buffer_offset)` for each stripe piece.
    fn for_pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(StripeIx, u64, u64, usize) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let sd = self.geometry().stripe_data_bytes();
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let stripe = pos / sd;
            let piece_end = ((stripe + 1) * sd).min(end);
            f(
                StripeIx::new(stripe),
                pos,
                piece_end - pos,
                usize_of(pos - offset),
            )?;
            pos = piece_end;
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at array byte `offset`. Every byte returned passed the scheme's
    /// checks (or was rebuilt and re-checked).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        self.check_range(offset, buf.len() as u64)?;
        let _caller = Caller::enter(self);
        let mut pieces: Vec<(StripeIx, u64, &mut [u8])> = Vec::new();
        let mut rest = buf;
        self.for_pieces(offset, rest.len() as u64, |stripe, off, len, _| {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(usize_of(len));
            pieces.push((stripe, off, mine));
            rest = tail;
            Ok(())
        })?;
        if pieces.len() >= 2 && self.units().parallel() {
            return pieces
                .chunks_mut(READ_BATCH_STRIPES)
                .try_for_each(|group| self.read_pieces_together(group));
        }
        pieces
            .iter_mut()
            .try_for_each(|(stripe, off, out)| self.read_piece(*stripe, *off, out))
    }

    /// The pieces of a read over several stripes, their member I/O in one batch (one io_uring
    /// submission, or one round trip to network members) under every stripe's lock (taken in
    /// order, as a write's), then each checked — and repaired — as [`Array::read_piece`] does.
    fn read_pieces_together(
        &self,
        pieces: &mut [(StripeIx, u64, &mut [u8])],
    ) -> Result<(), EngineError> {
        let _guards = self.lock_stripes(pieces.iter().map(|p| p.0));
        let mut work = Vec::with_capacity(pieces.len());
        for (i, (stripe, off, out)) in pieces.iter_mut().enumerate() {
            if self.is_zero(*stripe) {
                out.fill(0);
                continue;
            }
            self.refuse_untrusted_read(*stripe, *off, out.len() as u64)?;
            let plan = self.plan_piece(Op::Read, *off, out.len() as u64);
            let set = self.read_set(&plan);
            work.push((i, plan, set));
        }
        let lists: Vec<(StripeIx, &[(Pos, Extent)])> = work
            .iter()
            .map(|(_, plan, set)| (StripeIx::new(plan.stripe), &set.to_read[..]))
            .collect();
        let mut got = self.read_extents_of(&lists)?.into_iter();
        drop(lists);
        for (i, plan, set) in work {
            let stripe = StripeIx::new(plan.stripe);
            let read = got.next().expect("one result per piece");
            let units = self.unverified_on_error(stripe, self.gather_from(&plan, set, read))?;
            self.copy_out(&plan, &units, pieces[i].2);
            self.recycle(units.units.into_iter().flatten());
        }
        Ok(())
    }

    /// A read piece's bytes from its gathered units into `out`.
    fn copy_out(&self, plan: &PiecePlan, units: &InHand, out: &mut [u8]) {
        let c = self.geometry().chunk_bytes;
        let mut o = 0;
        for i in plan.first..=plan.last {
            let (lo, hi) = plan.chunk_range(i, c);
            let chunk = units.units[i].as_ref().expect("read");
            out[o..o + usize_of(hi - lo)].copy_from_slice(&chunk[usize_of(lo)..usize_of(hi)]);
            o += usize_of(hi - lo);
        }
    }

    /// One piece of a read: `out.len()` bytes at array byte `off`, within `stripe`.
    fn read_piece(&self, stripe: StripeIx, off: u64, out: &mut [u8]) -> Result<(), EngineError> {
        let len = out.len() as u64;
        let _guard = self.lock_stripe(stripe);
        // A zero stripe reads as zeros, nothing read (FORMAT.md §2.7, zero.rs).
        if self.is_zero(stripe) {
            out.fill(0);
            return Ok(());
        }
        // A listed untrusted block is refused before anything is read (FORMAT.md §2.7).
        self.refuse_untrusted_read(stripe, off, len)?;
        let plan = self.plan_piece(Op::Read, off, len);
        let units = self.unverified_on_error(stripe, self.gather(&plan))?;
        self.copy_out(&plan, &units, out);
        self.recycle(units.units.into_iter().flatten());
        Ok(())
    }

    /// Write `data` at array byte `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        if !self.is_writable() {
            return Err(EngineError::Config(
                "the array was assembled read-only".into(),
            ));
        }
        self.check_range(offset, data.len() as u64)?;
        let _caller = Caller::enter(self);
        let mut pieces: Vec<Piece> = Vec::new();
        self.for_pieces(offset, data.len() as u64, |stripe, off, len, at| {
            pieces.push((stripe, off, len, at));
            Ok(())
        })?;
        if !self.sb().write_journal {
            // On files, devices and exports a request's stripes go together (claimed at once,
            // their unit writes in one batch: one io_uring submission, one round trip), at most
            // WRITE_BATCH_STRIPES at a time; on memory disks one by one.
            let per = if self.units().parallel() {
                WRITE_BATCH_STRIPES
            } else {
                1
            };
            return pieces
                .chunks(per)
                .try_for_each(|batch| self.write_batch(batch, data));
        }
        // With the write journal the pieces go in batches of as many stripes as the journal's
        // slots hold, each batch's records written and flushed in one round (one flush a batch,
        // not one a stripe). Slots a piece takes: one per unit it writes (its chunks, the
        // parity, a buddy's appendix or the checksum table), one per missing chunk it saves.
        let (sd, c) = (
            self.geometry().stripe_data_bytes(),
            self.geometry().chunk_bytes,
        );
        let (k, m) = (self.geometry().k, self.geometry().m);
        let slots_for = |&(stripe, off, len, _): &Piece| {
            let missing = Pos::upto(k)
                .filter(|&pos| self.is_failed(self.member_of(stripe, pos)))
                .count();
            usize_of((off + len - 1) % sd / c - off % sd / c + 1) + m + 1 + missing
        };
        let slots = self.journal_slot_count();
        let mut rest = &pieces[..];
        while !rest.is_empty() {
            // A piece takes at most 2n <= slots: every batch takes at least one.
            let mut count = 0;
            let take = rest
                .iter()
                .take_while(|p| {
                    count += slots_for(p);
                    count <= slots
                })
                .count()
                .max(1);
            let (batch, tail) = rest.split_at(take);
            rest = tail;
            self.write_batch(batch, data)?;
        }
        Ok(())
    }

    /// Write a batch of pieces (stripe, array offset, length, where in `data`): the stripes'
    /// locks in order (so two batches can never wait for each other), the intent bits and saved
    /// chunks, the write journal (when the array has it), then each piece in place.
    fn write_batch(&self, batch: &[Piece], data: &[u8]) -> Result<(), EngineError> {
        let _guards = self.lock_stripes(batch.iter().map(|p| p.0));
        self.write_batch_locked(batch, data)
    }

    /// One piece (`data` at array byte `off`, within `stripe`) written by a caller that holds
    /// the stripe's lock already (a scrub).
    pub(crate) fn write_piece_locked(
        &self,
        stripe: StripeIx,
        off: u64,
        data: &[u8],
    ) -> Result<(), EngineError> {
        self.write_batch_locked(&[(stripe, off, data.len() as u64, 0)], data)
    }

    /// [`Array::write_batch`] with every stripe's lock held.
    fn write_batch_locked(&self, batch: &[Piece], data: &[u8]) -> Result<(), EngineError> {
        // A piece into a zero stripe writes the stripe whole (zero.rs).
        if self.untrusted_set().any_zero() {
            let zero: Vec<bool> = batch.iter().map(|p| self.is_zero(p.0)).collect();
            if zero.contains(&true) {
                if self.sabotaged(crate::env::Sabotage::StaleZeroWrite) {
                    self.write_pieces(batch, data, &[])?;
                    self.leave_zero(batch.iter().zip(&zero).filter(|p| *p.1).map(|p| p.0 .0));
                    return Ok(());
                }
                return self.write_into_zero(batch, data, &zero);
            }
        }
        self.write_pieces(batch, data, &[])
    }

    /// Write a batch of pieces, every stripe's lock held. `zero[i]` (when given): piece `i` is
    /// its zero stripe written whole, from nothing read (zero.rs).
    pub(crate) fn write_pieces(
        &self,
        batch: &[Piece],
        data: &[u8],
        zero: &[bool],
    ) -> Result<(), EngineError> {
        // Listed untrusted blocks the batch covers whole come off once it has landed; a write
        // into part of one is refused before anything is written (FORMAT.md §2.7).
        let mut replaced = Vec::new();
        for &(stripe, off, len, _) in batch {
            replaced.push(self.untrusted_covered(stripe, off, len)?);
        }
        let mut from = 0;
        while from < batch.len() {
            let rest = zero.get(from..).unwrap_or(&[]);
            from += self.write_pieces_from(&batch[from..], data, rest, &mut replaced[from..])?;
        }
        Ok(())
    }

    /// [`Array::write_pieces`] of `batch` or of its first pieces: how many. In a plain write's
    /// batch (not a zero stripe's, not with the write journal: those batches are sized for
    /// their slots as before), a piece after the first whose stripe has a missing data chunk (a member failed,
    /// perhaps while this batch was being claimed) is left to the next call: saving it takes
    /// journal slots, and a batch must not hold some while it waits for more (the rule
    /// `take_slots` keeps within one call: two batches holding some each could wait on each
    /// other). Degraded, a write goes stripe by stripe as before batches.
    fn write_pieces_from(
        &self,
        batch: &[Piece],
        data: &[u8],
        zero: &[bool],
        replaced: &mut [Vec<stripeguard_integrity::UntrustedRange>],
    ) -> Result<usize, EngineError> {
        let is_zero = |i: usize| zero.get(i).copied().unwrap_or(false);
        // Begin: every stripe claimed (and a degraded one's missing chunks saved) before the
        // first unit write.
        let mut pending = self.pending();
        let mut plans = Vec::with_capacity(batch.len());
        let k = self.geometry().k;
        for (i, &(stripe, off, len, at)) in batch.iter().enumerate() {
            if i > 0
                && zero.is_empty()
                && !self.sb().write_journal
                && Pos::upto(k).any(|p| self.is_failed(self.member_of(stripe, p)))
            {
                break;
            }
            pending.claim(stripe)?;
            // A stripe zero on disk comes back zero after a crash whatever its units hold:
            // nothing of it to save (and nothing readable).
            if !(is_zero(i) && self.is_zero_on_disk(stripe)) {
                self.unverified_on_error(stripe, pending.save_missing(stripe))?;
            }
            plans.push((
                self.plan_piece(Op::Write, off, len),
                &data[at..at + usize_of(len)],
            ));
        }
        let mut ready = Vec::with_capacity(plans.len());
        for (i, (plan, piece)) in plans.iter().enumerate() {
            let stripe = StripeIx::new(plan.stripe);
            let gathered = if is_zero(i) {
                self.gather_zero(plan)
            } else {
                self.gather(plan)
            };
            let units = self.unverified_on_error(stripe, gathered)?;
            let prepared = self.prepare_write(plan, units, piece);
            ready.push(self.unverified_on_error(stripe, prepared)?);
        }
        // Journal: every in-place I/O of the batch durable before any is issued.
        if self.sb().write_journal {
            let writes: Vec<(StripeIx, crate::journal::UnitWrites<'_>)> =
                ready.iter().map(|r| (r.stripe(), r.writes(self))).collect();
            pending.journal(&writes)?;
        }
        // Commit, then the batch's claims and slots are released.
        if ready.len() > 1 && self.units().parallel() {
            self.commit_writes(ready)?;
        } else {
            for r in ready {
                let stripe = r.stripe();
                let done = self.commit_write(r);
                self.unverified_on_error(stripe, done)?;
            }
        }
        drop(pending);
        let done = plans.len();
        let taken: Vec<_> = replaced[..done]
            .iter_mut()
            .flat_map(std::mem::take)
            .collect();
        self.take_off_untrusted(&taken, "written whole by a write");
        if zero[..done.min(zero.len())].contains(&true) {
            self.leave_zero(
                batch[..done]
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| is_zero(i))
                    .map(|(_, p)| p.0),
            );
        }
        Ok(done)
    }

    /// Whether `plan` writes every byte of its stripe (a full-stripe plan may also be one whose
    /// first and last chunks are written in part, with merge reads).
    pub(crate) fn writes_whole_stripe(&self, plan: &PiecePlan) -> bool {
        let (k, c) = (self.geometry().k, self.geometry().chunk_bytes);
        plan.mode == Some(Mode::FullStripe)
            && plan.first == 0
            && plan.last + 1 == k
            && plan.chunk_range(0, c).0 == 0
            && plan.chunk_range(k - 1, c).1 == c
    }

    /// The planner marks the chunks a plan reads as read (subsequent-read state) when it plans;
    /// a piece that then fails verified nothing, so every data chunk of its stripe goes back to
    /// first-read state and the next access cross-checks it again.
    fn unverified_on_error<T>(
        &self,
        stripe: StripeIx,
        r: Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        if r.is_err() {
            self.forget_verified(stripe, Pos::upto(self.geometry().k));
        }
        r
    }

    /// Read the plan's extents and check them; on any failed check or erasure, repair the
    /// stripe and take the units whole from the repaired image.
    fn gather(&self, plan: &PiecePlan) -> Result<InHand, EngineError> {
        let set = self.read_set(plan);
        let got = self.read_extents(StripeIx::new(plan.stripe), &set.to_read)?;
        self.gather_from(plan, set, got)
    }

    /// What [`Array::gather`] reads for `plan`.
    fn read_set(&self, plan: &PiecePlan) -> ReadSet {
        let n = self.geometry().n();
        let stripe = StripeIx::new(plan.stripe);
        let mut wanted: Vec<(Pos, Extent)> = Vec::with_capacity(plan.reads.len());
        for io in &plan.reads {
            let e = plan.extent(io, self.gran());
            let pos = Pos::new(io.pos);
            match wanted.iter_mut().find(|w| w.0 == pos) {
                Some(w) => w.1 = union(w.1, e),
                None => wanted.push((pos, e)),
            }
        }
        // Appendices this holder verified or wrote need not be read again for a partial read:
        // its blocks are checked against the cached table (see `Array::enable_appendix_cache`).
        // A whole read (of a scheme whose units carry their own block table) reads the appendix
        // all the same (one I/O either way), but its blocks are checked against the cached
        // table: a lost write of a chunk with its appendix
        // leaves an older pair on the disk that agrees with itself (found by the seeded
        // simulation: the old bytes were returned as good).
        let mut cached: Vec<Option<std::sync::Arc<[u8]>>> = (0..n).map(|_| None).collect();
        let own_table = self.sb().scheme.self_checking();
        for (pos, e) in wanted.iter_mut() {
            let whole = e.is_whole(self.gran());
            if e.appendix && (!whole || own_table) {
                if let Some(a) = self.units().cached_appendix(stripe, *pos) {
                    cached[pos.get()] = Some(a);
                    e.appendix = whole;
                }
            }
        }
        let to_read: Vec<(Pos, Extent)> = wanted
            .iter()
            .copied()
            .filter(|(_, e)| e.hi > e.lo || e.appendix)
            .collect();
        ReadSet {
            wanted,
            cached,
            to_read,
        }
    }

    /// The rest of [`Array::gather`] once `set.to_read` was read (`got`, one per entry):
    /// checked, and repaired when a check fails.
    fn gather_from(
        &self,
        plan: &PiecePlan,
        set: ReadSet,
        got: Vec<Option<AlignedBuf>>,
    ) -> Result<InHand, EngineError> {
        let n = self.geometry().n();
        let stripe = StripeIx::new(plan.stripe);
        let ReadSet {
            wanted,
            cached,
            to_read,
        } = set;
        let mut units: Vec<Option<AlignedBuf>> = (0..n).map(|_| None).collect();
        let mut erased = vec![false; n];
        for (&(pos, _), got) in to_read.iter().zip(got) {
            match got {
                Some(u) => units[pos.get()] = Some(u),
                None => erased[pos.get()] = true,
            }
        }
        let got = Reads {
            wanted: &wanted,
            read: &to_read,
            units: &units,
            cached: &cached,
            erased: &erased,
            whole_stripe_write: self.writes_whole_stripe(plan),
            write: plan.op == Some(Op::Write),
        };
        let checked = self.layout().check(self, stripe, &got)?;
        if checked.clean && !erased.iter().any(|&e| e) {
            return Ok(InHand {
                units,
                erased,
                truth: checked.truth,
                data_crc: checked.data_crc,
                appendices: checked.appendices,
                table: checked.table,
            });
        }
        let mut suspects = checked.suspects;
        for (p, &e) in Pos::upto(n).zip(&erased) {
            if e && suspects.iter().all(|s| s.0 != p) {
                suspects.push((p, EventKind::ReadError, "read failed".into()));
            }
        }
        self.recycle(units.into_iter().flatten());
        let Image { units, truth, ck } = self.repair_stripe(stripe, &suspects)?;
        let data_crc = if self.sb().scheme.mirror() == Some(MirrorKind::Checksum) {
            truth
                .iter()
                .map(|t| t.map(crate::num::crc_of_tag))
                .collect()
        } else {
            vec![None; self.geometry().k]
        };
        Ok(InHand {
            units: units.into_iter().map(Some).collect(),
            erased: vec![false; n],
            truth,
            data_crc,
            appendices: Vec::new(),
            table: ck,
        })
    }

    /// Everything a write of `data` by `plan` will put in place (its new chunks, parity and
    /// their integrity metadata), from the units `have` in hand; nothing is written yet.
    fn prepare_write<'d>(
        &self,
        plan: &PiecePlan,
        mut have: InHand,
        data: &'d [u8],
    ) -> Result<Prepared<'d>, EngineError> {
        self.assert_write_in_hand(plan, &have);
        let new = self.new_chunks(plan, &have, data);
        let (parity, parity_extent) = self.new_parity(plan, &mut have, &new)?;
        let mut w = NewWrite {
            stripe: StripeIx::new(plan.stripe),
            first: Pos::new(plan.first),
            new,
            parity,
            parity_extent,
        };
        let sealed = self.layout().seal_write(self, plan, &mut have, &mut w)?;
        Ok(Prepared {
            w,
            sealed,
            old: have.units,
        })
    }

    /// The planner/executor seam, checked in release builds: a write's plan gathered what its
    /// mode computes parity from — read-modify-write the old bytes of every chunk it writes
    /// and every parity unit; a full-stripe or reconstruct write every chunk it does not write
    /// and the old bytes of every chunk it writes in part. A plan that breaks it is a bug in
    /// the planner, and executing it would put parity computed from bytes never read on disk.
    fn assert_write_in_hand(&self, plan: &PiecePlan, have: &InHand) {
        let (k, m) = (self.geometry().k, self.geometry().m);
        let c = self.geometry().chunk_bytes;
        let (first, last) = (plan.first, plan.last);
        assert!(
            first <= last && last < k,
            "the plan of stripe {} writes chunks {first}..={last} of {k}",
            plan.stripe
        );
        // Checked on every write piece: no allocation unless it fails.
        let rmw = match plan.mode {
            Some(Mode::Rmw) => true,
            Some(Mode::FullStripe | Mode::Rcw) => false,
            other => panic!(
                "the plan of a write of stripe {} has mode {other:?}",
                plan.stripe
            ),
        };
        let needed = |p: usize| {
            let written = (first..=last).contains(&p);
            if rmw {
                written || p >= k
            } else {
                p < k && (!written || plan.chunk_range(p, c) != (0, c))
            }
        };
        let lacking = |p: &usize| needed(*p) && (have.units[*p].is_none() || have.erased[*p]);
        if !(0..k + m).any(|p| lacking(&p)) {
            return;
        }
        let missing: Vec<usize> = (0..k + m).filter(lacking).collect();
        assert!(
            missing.is_empty(),
            "the {:?} plan of stripe {} writes chunks {first}..={last} but gathered nothing of positions {missing:?}",
            plan.mode,
            plan.stripe
        );
    }

    /// The new data units of a write: its bytes, with the old bytes merged in around the
    /// request where the parity computation needs them.
    fn new_chunks<'d>(&self, plan: &PiecePlan, have: &InHand, data: &'d [u8]) -> Vec<NewChunk<'d>> {
        let gran = self.gran();
        let c = usize_of(self.geometry().chunk_bytes);
        let mode = plan.mode.expect("planned");
        let mut new = Vec::with_capacity(plan.last + 1 - plan.first);
        let mut at = 0usize;
        for i in plan.first..=plan.last {
            let io = UnitIo {
                pos: i,
                purpose: Purpose::User,
            };
            let e = plan.extent(&io, gran);
            let (lo, hi) = plan.chunk_range(i, c as u64);
            let (lo, hi) = (usize_of(lo), usize_of(hi));
            // A unit without an appendix (`none`) written whole goes out from the caller's
            // bytes: no copy (FORMAT.md §2: a unit with an appendix is written in one I/O with
            // it, which a copy makes possible and is cheaper than a second I/O).
            if gran.appendix == 0
                && (lo, hi) == (0, c)
                && (data[at..].as_ptr() as usize).is_multiple_of(self.units().mem_align())
            {
                new.push(NewChunk {
                    buf: None,
                    user: Some(&data[at..at + c]),
                    e,
                });
                at += c;
                continue;
            }
            let mut u = self.unit_buf();
            // The old bytes the new chunk needs around the request: those of its written blocks
            // (RMW: the parity delta covers only them), or all of them (the parity is re-encoded
            // from whole chunks).
            let (flo, fhi) = if mode == Mode::Rmw && gran.local_parity {
                (usize_of(e.lo), usize_of(e.hi))
            } else {
                (0, c)
            };
            if lo != flo || hi != fhi {
                let old = have.units[i]
                    .as_ref()
                    .expect("partly written chunks are read (old data / merge / version)");
                u[flo..fhi].copy_from_slice(&old[flo..fhi]);
            }
            u[lo..hi].copy_from_slice(&data[at..at + hi - lo]);
            at += hi - lo;
            new.push(NewChunk {
                buf: Some(u),
                user: None,
                e,
            });
        }
        new
    }

    /// The new parity units of a write and what of them is written: a delta over the written
    /// bytes (RMW), or re-encoded whole.
    fn new_parity(
        &self,
        plan: &PiecePlan,
        have: &mut InHand,
        new: &[NewChunk<'_>],
    ) -> Result<(Vec<AlignedBuf>, Extent), EngineError> {
        let g = self.geometry();
        let gran = self.gran();
        let (k, m) = (g.k, g.m);
        let c = usize_of(g.chunk_bytes);
        let (first, last) = (plan.first, plan.last);
        let mut parity: Vec<AlignedBuf> = Vec::with_capacity(m);
        let parity_extent = plan.extent(
            &UnitIo {
                pos: k,
                purpose: Purpose::Parity,
            },
            gran,
        );
        if plan.mode != Some(Mode::Rmw) {
            for _ in 0..m {
                parity.push(self.unit_buf());
            }
            let datas: Vec<&[u8]> = (0..k)
                .map(|i| {
                    if (first..=last).contains(&i) {
                        &new[i - first].bytes()[..c]
                    } else {
                        &have.units[i].as_ref().expect("RCW reads untouched data")[..c]
                    }
                })
                .collect();
            let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
            self.code().encode(&datas, &mut views)?;
            return Ok((parity, parity_extent));
        }
        for j in 0..m {
            parity.push(have.units[k + j].take().expect("RMW reads parity"));
        }
        if gran.local_parity {
            // The delta is byte-local, so each chunk updates the parity over its own written
            // blocks (the parity read covers their union).
            for (i, n) in (first..=last).zip(new) {
                let (lo, hi) = (usize_of(n.e.lo), usize_of(n.e.hi));
                let change = [ChunkUpdate {
                    index: i,
                    old: &have.units[i].as_ref().expect("RMW reads old data")[lo..hi],
                    new: &n.bytes()[lo..hi],
                }];
                let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[lo..hi]).collect();
                self.code().update(&change, &mut views)?;
            }
        } else {
            // An array code's diagonals mix rows: whole chunks.
            let changes: Vec<ChunkUpdate<'_>> = (first..=last)
                .zip(new)
                .map(|(i, n)| ChunkUpdate {
                    index: i,
                    old: &have.units[i].as_ref().expect("RMW reads old data")[..c],
                    new: &n.bytes()[..c],
                })
                .collect();
            let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
            self.code().update(&changes, &mut views)?;
        }
        Ok((parity, parity_extent))
    }

    /// Put a [`Array::prepare_write`] in place.
    fn commit_write(&self, ready: Prepared<'_>) -> Result<(), EngineError> {
        self.write_units(ready.w.stripe, &ready.writes(self))?;
        self.committed(ready)
    }

    /// Several stripes' writes in place as one batch, then each stripe's layout keeps what
    /// it now knows ([`Array::commit_write`] for each, their I/O together).
    fn commit_writes(&self, ready: Vec<Prepared<'_>>) -> Result<(), EngineError> {
        let writes: Vec<crate::journal::UnitWrites<'_>> =
            ready.iter().map(|r| r.writes(self)).collect();
        let lists: Vec<crate::unitio::StripeWrites<'_>> = ready
            .iter()
            .zip(&writes)
            .map(|(r, w)| (r.stripe(), &w[..]))
            .collect();
        let wrote = self.write_units_of(&lists);
        drop(lists);
        drop(writes);
        if let Err(e) = wrote {
            // Which stripes' units landed is not known: every one back to first-read state.
            for r in &ready {
                self.forget_verified(r.stripe(), Pos::upto(self.geometry().k));
            }
            return Err(e);
        }
        for r in ready {
            let stripe = r.stripe();
            let done = self.committed(r);
            self.unverified_on_error(stripe, done)?;
        }
        Ok(())
    }

    /// What [`Array::commit_write`] does once the units are in place.
    fn committed(&self, ready: Prepared<'_>) -> Result<(), EngineError> {
        let Prepared { w, sealed, old } = ready;
        let done = self.layout().committed(self, &w, sealed);
        self.recycle(
            w.new
                .into_iter()
                .filter_map(|n| n.buf)
                .chain(w.parity)
                .chain(old.into_iter().flatten()),
        );
        done
    }
}

/// A write ready to go in place ([`Array::prepare_write`]).
pub(crate) struct Prepared<'d> {
    w: NewWrite<'d>,
    sealed: Sealed,
    /// The units read for it (returned to the pool after).
    old: Vec<Option<AlignedBuf>>,
}

impl Prepared<'_> {
    pub(crate) fn stripe(&self) -> StripeIx {
        self.w.stripe
    }

    /// Every in-place I/O: (position, byte within the unit, bytes).
    pub(crate) fn writes(&self, a: &Array) -> crate::journal::UnitWrites<'_> {
        let c = usize_of(a.geometry().chunk_bytes);
        let k = a.geometry().k;
        let w = &self.w;
        let mut writes: Vec<(Pos, u64, &[u8])> = Vec::new();
        if let Sealed::Buddy(pos, bytes) = &self.sealed {
            writes.push((*pos, c as u64, &bytes[c..]));
        }
        for (i, n) in w.first.onward().zip(&w.new) {
            for (o, len) in n.e.ios(a.gran()) {
                writes.push((i, o, &n.bytes()[usize_of(o)..usize_of(o + len)]));
            }
        }
        for (pos, p) in Pos::new(k).onward().zip(&w.parity) {
            for (o, len) in w.parity_extent.ios(a.gran()) {
                writes.push((pos, o, &p[usize_of(o)..usize_of(o + len)]));
            }
        }
        if let Sealed::Table(_, Some(t)) = &self.sealed {
            writes.push((a.ck_pos(), 0, &t[..a.ck_shape().1]));
        }
        writes
    }
}
/// A user request in progress, counted by the array's unit I/O while it lives.
struct Caller<'a>(&'a Array);

impl<'a> Caller<'a> {
    fn enter(a: &'a Array) -> Self {
        a.units().enter();
        Caller(a)
    }
}

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        self.0.units().leave();
    }
}

/// The smallest extent covering both.
/// Stripes a read request on files, devices or exports reads together (their member I/O in one
/// batch): memory held is about this many stripes' units.
const READ_BATCH_STRIPES: usize = 16;

/// Stripes a write request on files, devices or exports commits together (their unit writes
/// in one batch): memory held is about this many stripes' units.
const WRITE_BATCH_STRIPES: usize = 16;

/// What a piece reads ([`Array::read_set`]): the extent wanted of each position, the
/// appendices the cache has (so not read), and the extents read.
struct ReadSet {
    wanted: Vec<(Pos, Extent)>,
    cached: Vec<Option<std::sync::Arc<[u8]>>>,
    to_read: Vec<(Pos, Extent)>,
}

fn union(a: Extent, b: Extent) -> Extent {
    let (lo, hi) = match (a.hi > a.lo, b.hi > b.lo) {
        (true, true) => (a.lo.min(b.lo), a.hi.max(b.hi)),
        (true, false) => (a.lo, a.hi),
        (false, true) => (b.lo, b.hi),
        (false, false) => (0, 0),
    };
    Extent {
        lo,
        hi,
        appendix: a.appendix || b.appendix,
    }
}

impl Array {
    /// Read every unit of `stripe`, diagnose with every unit voting, and repair what is wrong
    /// (the scrub of one stripe). Returns the number of units found wrong.
    pub fn scrub_stripe(&self, stripe: u64) -> Result<u64, EngineError> {
        self.scrub_stripe_as(stripe, false)
    }

    /// [`Array::scrub_stripe`]; with `check_only`, nothing is written back even on a writable
    /// array (an online `scrub --check-only`): findings are logged as found read-only.
    pub fn scrub_stripe_as(&self, stripe: u64, check_only: bool) -> Result<u64, EngineError> {
        if stripe >= self.geometry().stripes {
            return Err(EngineError::OutOfRange {
                offset: stripe,
                len: 1,
                capacity: self.geometry().stripes,
            });
        }
        let ix = StripeIx::new(stripe);
        let _guard = self.lock_stripe(ix);
        // A zero stripe has nothing to check: its units are never read (zero.rs).
        if self.is_zero(ix) {
            return Ok(0);
        }
        let before = self.counters().located;
        if check_only {
            self.check_stripe_locked(ix)?;
        } else {
            if self.is_writable() {
                self.verify_untrusted_again(ix)?;
            }
            self.repair_stripe(ix, &[])?;
        }
        // Listed blocks stay unreadable: the stripe is not whole (FORMAT.md §2.7).
        if let Some(e) = self.untrusted_set().of_stripe(ix).first() {
            return Err(EngineError::Unrecoverable {
                stripe,
                reason: crate::untrusted::untrusted_reason(e),
            });
        }
        Ok(self.counters().located - before)
    }
}
