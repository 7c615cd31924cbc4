//! The journal on the members (FORMAT.md §2.6): a degraded write saves the missing chunks of
//! its stripe first ([`Array::save_missing`]), a write of a `--journal` array journals every
//! in-place I/O first ([`Array::journal_writes`]), a flush frees the slots of finished writes,
//! and after a crash the resync replays every record ([`Array::replay_journal`]). What each
//! slot holds is [`crate::journal::Journal`]'s; why the journal exists is said there.

use crate::array::Array;
use crate::error::EngineError;
use crate::journal::{
    slots_u32, Copies, Record, Saved, SlotWrite, Touched, UnitWrites, HEADER, SAVED, UNIT_WRITES,
};
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use std::collections::BTreeMap;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::journal::{MAX_EXTENTS, TOUCHED_BYTES};
use stripeguard_format::EventKind;

impl Array {
    /// The crash campaign's negative control only: write without the journal (the degraded
    /// write hole is then open, and a torn chunk may mix old and new blocks).
    #[doc(hidden)]
    pub fn disable_degraded_journal_for_campaign(&self) {
        self.journal().lock().expect("lock").disable();
    }

    fn journal_slot_offset(&self, slot: usize) -> u64 {
        self.journal_offset_at(self.geometry().stripes)
            + slot as u64 * self.sb().journal_slot_bytes()
    }

    /// Take a free slot for each of `wanted` (stripe, kind, position), all at once (a writer
    /// holding some while waiting for more could wait forever). Too few free, or a slot still
    /// holding a record of the same kind for one of these chunks: a flush first, which frees
    /// every slot whose write is done. So a chunk has at most one record of each kind: an older
    /// record can never outlive a newer one of the same chunk (FORMAT.md §2.6, "Freeing").
    /// Returns (slot, sequence) pairs. Caller holds the stripes' locks.
    fn take_slots(&self, wanted: &[(u64, u8, usize)]) -> Result<Vec<(usize, u64)>, EngineError> {
        let count = wanted.len();
        // Other writers' slots free as they finish; a bound keeps a shape the slots cannot hold
        // (a member failed while a batch was being put together) from flushing forever.
        for _ in 0..100_000 {
            let on_devices = self.jdevs().is_some_and(|j| !j.live().is_empty());
            if let Some(taken) = self
                .journal()
                .lock()
                .expect("lock")
                .try_take(wanted, on_devices)
            {
                return Ok(taken);
            }
            // On the journal devices, concurrent writers run out of slots together: while
            // another thread's flush runs (it frees every slot whose write is done), wait for it
            // instead of flushing the members again (FORMAT.md §2.12).
            if on_devices {
                let (running, finished) = self.flush_counts();
                let freeing = self
                    .journal()
                    .lock()
                    .expect("lock")
                    .freeing_would_do(wanted.len());
                if running > 0 || freeing {
                    while running > 0 && self.flush_counts().1 == finished {
                        self.env().sleep(std::time::Duration::from_micros(50));
                    }
                    if freeing {
                        self.env().sleep(std::time::Duration::from_micros(50));
                    }
                    continue;
                }
            }
            self.flush()?;
        }
        Err(EngineError::Config(format!(
            "the write journal's {} slots stayed full: {count} were needed at once",
            self.journal_slot_count()
        )))
    }

    /// Write `records` (slot, record, the members its copies go to: every current member when
    /// empty) and flush those members: every copy at once, then every flush at once, so the
    /// records are durable after about one write and one flush.
    fn put_records(&self, records: &[(usize, Record, Vec<MemberIx>)]) -> Result<(), EngineError> {
        let event = self.generation().load(std::sync::atomic::Ordering::Relaxed);
        if self.put_on_devices(records, event)? {
            return Ok(());
        }
        let n = self.members().len();
        let on = |members: &Vec<MemberIx>, m: MemberIx| members.is_empty() || members.contains(&m);
        let mut jobs: Vec<(MemberIx, SlotWrite)> = Vec::new();
        {
            let mut j = self.journal().lock().expect("lock");
            for (slot, record, members) in records {
                j.set_copies(*slot, Copies::Members(members.clone()));
                let bytes = record.encode(event, self.sb().array_uuid);
                let at = self.journal_slot_offset(*slot);
                let bytes = std::sync::Arc::new(bytes);
                for m in MemberIx::upto(n).filter(|&m| on(members, m)) {
                    jobs.push((m, (at, bytes.clone())));
                }
            }
        }
        let flushed: Vec<MemberIx> = MemberIx::upto(n)
            .filter(|&m| records.iter().any(|(_, _, members)| on(members, m)))
            .collect();
        self.member_jobs(&jobs, |_, d, (at, b)| d.write_at(*at, b))?;
        self.each_member(Some(&flushed), |_, d| d.flush())
    }

    /// [`Array::put_records`] on the journal devices (FORMAT.md §2.12): every record to every
    /// live device, then a group commit. `false` when no device is left (before or after a
    /// failure here): the caller writes them to the members instead.
    fn put_on_devices(
        &self,
        records: &[(usize, Record, Vec<MemberIx>)],
        event: u64,
    ) -> Result<bool, EngineError> {
        let Some(jd) = self.jdevs() else {
            return Ok(false);
        };
        if jd.live().is_empty() {
            return Ok(false);
        }
        {
            let mut j = self.journal().lock().expect("lock");
            for (slot, _, _) in records {
                j.set_copies(*slot, Copies::Devices);
            }
        }
        let mut failed = Vec::new();
        for (slot, record, _) in records {
            let bytes = record.encode(event, self.sb().array_uuid);
            failed.extend(jd.write_slot(*slot, &bytes));
        }
        failed.extend(jd.commit());
        if failed.is_empty() {
            return Ok(true);
        }
        self.lose_journal_devices(failed)?;
        if jd.live().is_empty() {
            return Err(self.journal_gone());
        }
        // A device left: what it holds was flushed by the commit (or is, now).
        let again = jd.commit();
        if again.is_empty() {
            return Ok(true);
        }
        self.lose_journal_devices(again)?;
        if jd.live().is_empty() {
            return Err(self.journal_gone());
        }
        Ok(true)
    }

    /// Every journal device is lost while the array runs (FORMAT.md §2.12): the write whose
    /// records could not be made durable fails before anything of it goes in place, and the
    /// array goes on with the write-intent record alone (its slots are the devices', which the
    /// members do not have) — until the next assembly puts the journal on the members' slots.
    fn journal_gone(&self) -> EngineError {
        self.journal().lock().expect("lock").disable();
        self.journal_incomplete()
            .store(true, std::sync::atomic::Ordering::Release);
        EngineError::Config(
            "every journal device is lost: this write failed before anything of it went in place; the array goes on with the write-intent record alone until it is assembled again (the journal is then on the members)".into(),
        )
    }

    /// Before a degraded write to `stripe`: save every missing data chunk of the stripe.
    /// Caller holds the stripe lock.
    pub(crate) fn save_missing(&self, stripe: StripeIx) -> Result<Option<Saved<'_>>, EngineError> {
        let g = self.geometry();
        // Every missing data chunk, even one the write overwrites whole: if the write is cut
        // short, the chunk then reads back as its old contents (an unflushed write may be lost,
        // never garbled), where without the saved copy the stripe could not be decided at all.
        let missing: Vec<Pos> = Pos::upto(g.k)
            .filter(|&pos| self.is_failed(self.member_of(stripe, pos)))
            .collect();
        if missing.is_empty()
            || self.sb().journal_slots == 0
            || self.journal().lock().expect("lock").is_disabled()
        {
            return Ok(None);
        }
        if missing.len() > self.journal_slot_count() {
            self.log_event(crate::events::stripe_event(
                stripe,
                EventKind::JournalTooSmall,
                format!(
                    "{} data chunks of this stripe are missing but the journal has {} slots: written without it (a crash during this write may lose them)",
                    missing.len(),
                    self.journal_slot_count()
                ),
                crate::events::EventAction::Notice,
            ));
            return Ok(None);
        }
        // The stripe as it should be, every survivor checked, the missing chunks rebuilt.
        let image = self.repair_stripe(stripe, &[])?;
        let wanted: Vec<(u64, u8, usize)> = missing
            .iter()
            .map(|&p| (stripe.get(), SAVED, p.get()))
            .collect();
        let taken = self.take_slots(&wanted)?;
        let saved = Saved::new(self.journal(), &taken);
        let records: Vec<(usize, Record, Vec<MemberIx>)> = taken
            .iter()
            .zip(&missing)
            .map(|(&(slot, sequence), &pos)| {
                let unit = &image.units[pos.get()];
                let record = Record {
                    kind: SAVED,
                    sequence,
                    stripe: stripe.get(),
                    pos: pos.get(),
                    extents: vec![(0, crate::num::in_unit_u32(unit.len()))],
                    payload: unit.to_vec(),
                    touched: [0; TOUCHED_BYTES],
                    group: (taken[0].1, slots_u32(taken.len())),
                };
                (slot, record, Vec::new())
            })
            .collect();
        self.recycle(image.units);
        self.put_records(&records)?;
        Ok(Some(saved))
    }

    /// With the write journal, before a batch of writes goes in place: journal every
    /// in-place I/O each will issue — (stripe, [(position, byte within the unit, bytes)]) —
    /// a record per unit, on `m + 1` members, all in one round (one flush a batch). Replayed,
    /// the records leave each stripe exactly as its write would have: new data, appendices
    /// and parity, consistent. Caller holds the stripes' locks.
    pub(crate) fn journal_writes(
        &self,
        batch: &[(StripeIx, UnitWrites<'_>)],
    ) -> Result<Option<Saved<'_>>, EngineError> {
        if !self.sb().write_journal || self.journal().lock().expect("lock").is_disabled() {
            return Ok(None);
        }
        let g = self.geometry();
        let n = self.members().len();
        // A record per unit (more when a unit has more than MAX_EXTENTS pieces); sequences
        // are given when the slots are taken.
        let mut records: Vec<Record> = Vec::new();
        for (stripe, writes) in batch {
            let mut touched = [0u8; TOUCHED_BYTES];
            let from = records.len();
            for &(pos, at, bytes) in writes {
                let pos = pos.get();
                touched[pos / 8] |= 1 << (pos % 8);
                let open = records[from..]
                    .iter()
                    .rposition(|r| r.pos == pos && r.extents.len() < MAX_EXTENTS);
                let r = match open {
                    Some(i) => &mut records[from + i],
                    None => {
                        records.push(Record {
                            kind: UNIT_WRITES,
                            sequence: 0,
                            stripe: stripe.get(),
                            pos,
                            extents: Vec::new(),
                            payload: Vec::new(),
                            touched: [0; TOUCHED_BYTES],
                            group: (0, 0),
                        });
                        records.last_mut().expect("pushed")
                    }
                };
                r.extents.push((
                    crate::num::in_unit_u32(at),
                    crate::num::in_unit_u32(bytes.len()),
                ));
                r.payload.extend_from_slice(bytes);
            }
            for r in &mut records[from..] {
                r.touched = touched;
            }
        }
        if records.is_empty() {
            return Ok(None);
        }
        let wanted: Vec<(u64, u8, usize)> = records
            .iter()
            .map(|r| (r.stripe, UNIT_WRITES, r.pos))
            .collect();
        let taken = self.take_slots(&wanted)?;
        let saved = Saved::new(self.journal(), &taken);
        let group = (taken[0].1, slots_u32(taken.len()));
        let records: Vec<(usize, Record, Vec<MemberIx>)> = records
            .into_iter()
            .zip(taken)
            .map(|(mut record, (slot, sequence))| {
                record.sequence = sequence;
                record.group = group;
                // The copies go to m + 1 current members from P's on: the record outlives any
                // m of them.
                let first = self.member_of(StripeIx::new(record.stripe), Pos::new(g.k));
                let copies: Vec<MemberIx> = (0..n)
                    .map(|i| MemberIx::new((first.get() + i) % n))
                    .filter(|&m| !self.is_failed(m))
                    .take(g.m + 1)
                    .collect();
                (slot, record, copies)
            })
            .collect();
        self.put_records(&records)?;
        Ok(Some(saved))
    }

    /// The slots a flush beginning now may free: their writes are done, so the flush makes
    /// them durable. (Taken before the flush: a write that ends during it is not yet durable.)
    pub(crate) fn idle_journal_slots(&self) -> Vec<(usize, u64)> {
        self.journal().lock().expect("lock").idle()
    }

    /// After a flush: free `idle` ([`Array::idle_journal_slots`] from before it), zeroing
    /// their headers. New-bytes records need no flush of their own: one whose zeroing a crash
    /// loses replays bytes already in place, and no newer record of its chunk can exist until
    /// its zeroing is done (`take_slots`), so none can be gone while it is not. A saved chunk
    /// is the chunk *before* its write: replayed after the write was flushed it would undo it,
    /// so its zeroing is flushed before the flush that freed it returns — and before any
    /// other flush returns: one that began while this freeing ran found the slot being zeroed
    /// (not idle, so not its to free) and waits here for the freeing to end. (Found by the
    /// seeded simulation: a flush that returned while another's zeroing of a saved chunk was
    /// not yet durable; the cut kept the record, and the resync undid the flushed write.)
    pub(crate) fn free_journal_slots(&self, idle: Vec<(usize, u64)>) -> Result<(), EngineError> {
        let _one = self.journal_freeing().lock().expect("lock");
        let (freed, undo) = self.journal().lock().expect("lock").start_freeing(idle);
        if freed.is_empty() {
            return Ok(());
        }
        let zeros = vec![0u8; HEADER];
        let on_member = |on: &Copies, m: MemberIx| match on {
            Copies::Members(v) => v.is_empty() || v.contains(&m),
            Copies::Devices => false,
        };
        // (The journal devices' slots outnumber the members': only these have a place there.)
        let member_slots = self.sb().journal_slots as usize;
        let jobs: Vec<(MemberIx, u64)> = MemberIx::upto(self.members().len())
            .flat_map(|m| {
                freed
                    .iter()
                    .filter(move |(s, on)| *s < member_slots && on_member(on, m))
                    .map(move |(s, _)| (m, self.journal_slot_offset(*s)))
            })
            .collect();
        let zeroed = self.member_jobs(&jobs, |_, d, &at| d.write_at(at, &zeros));
        let on_devices: Vec<usize> = freed
            .iter()
            .filter(|(_, on)| *on == Copies::Devices)
            .map(|(s, _)| *s)
            .collect();
        if let (Some(jd), false) = (self.jdevs(), on_devices.is_empty()) {
            // A unit's older records zeroed, durably, before its newer ones (several records of
            // one unit live at once on the devices: `take_slots`).
            let phases = self
                .journal()
                .lock()
                .expect("lock")
                .freeing_phases(&on_devices);
            let last = phases.len().saturating_sub(1);
            let mut failed = Vec::new();
            for (i, phase) in phases.iter().enumerate() {
                failed.extend(jd.zero_headers(phase));
                if i < last || undo {
                    failed.extend(jd.flush_all());
                }
            }
            self.lose_journal_devices(failed)?;
        }
        // Free even when a member failed: its zeroing no longer matters.
        self.journal()
            .lock()
            .expect("lock")
            .free(freed.iter().map(|(s, _)| *s));
        zeroed?;
        if undo {
            self.flush_members()?;
        }
        Ok(())
    }

    /// Zero every slot header on `member` (a device a `replace` writes: slots it held before
    /// are not records of this array's last run).
    pub(crate) fn clear_journal_of(&self, member: MemberIx) -> Result<(), EngineError> {
        let zeros = vec![0u8; HEADER];
        let d = self.members().get(member);
        for s in 0..self.sb().journal_slots as usize {
            d.write_at(self.journal_slot_offset(s), &zeros)?;
        }
        Ok(())
    }

    /// Every valid record on any current member: saved chunks by (stripe, position), the newest
    /// of each; unit writes of whole rounds, in the order they were written.
    fn read_journal(&self) -> (BTreeMap<(u64, usize), Record>, Vec<Record>) {
        let slot_bytes = usize_of(self.sb().journal_slot_bytes());
        let unit = usize_of(self.unit_bytes());
        let g = self.geometry();
        let mut saved: BTreeMap<(u64, usize), Record> = BTreeMap::new();
        let mut redo: BTreeMap<u64, Record> = BTreeMap::new();
        let mut b = vec![0u8; slot_bytes];
        // Every slot of every current member, then of every live journal device (§2.12).
        let mut places: Vec<(stripeguard_disk::DiskRef, u64)> = Vec::new();
        for (m, d) in self.members().all().iter().enumerate() {
            if !self.is_failed(MemberIx::new(m)) {
                places.extend(
                    (0..self.sb().journal_slots as usize)
                        .map(|s| (d.clone(), self.journal_slot_offset(s))),
                );
            }
        }
        if let Some(jd) = self.jdevs() {
            for i in jd.live() {
                places.extend((0..jd.slots()).map(|s| (jd.get(i).clone(), jd.slot_offset(s))));
            }
        }
        for (d, at) in places {
            {
                if d.read_at(at, &mut b).is_err() {
                    continue;
                }
                let Some(r) = Record::decode(&b, unit, &self.sb().array_uuid) else {
                    continue;
                };
                // Unit-writes records exist only in arrays with the write journal (feature bit
                // 1): one found elsewhere is not this array's and is never replayed.
                if r.kind == UNIT_WRITES && !self.sb().write_journal {
                    continue;
                }
                let positions = match r.kind {
                    SAVED => g.k,
                    _ => g.n() + self.sb().scheme.extra_members(),
                };
                if r.stripe >= g.stripes || r.pos >= positions {
                    continue;
                }
                if r.kind == SAVED {
                    if saved
                        .get(&(r.stripe, r.pos))
                        .is_none_or(|x| r.sequence > x.sequence)
                    {
                        saved.insert((r.stripe, r.pos), r);
                    }
                } else {
                    redo.insert(r.sequence, r);
                }
            }
        }
        // Only whole rounds: a round cut short before its flush had put nothing in place, and
        // a part of it replayed would change a stripe its parity does not follow.
        let mut found: BTreeMap<(u64, u32), u32> = BTreeMap::new();
        for r in redo.values() {
            *found.entry(r.group).or_default() += 1;
        }
        let redo = redo
            .into_values()
            .filter(|r| found.get(&r.group) == Some(&r.group.1))
            .collect();
        (saved, redo)
    }

    /// Resync, first step: write every journaled chunk's new bytes again and restore every
    /// chunk a degraded write saved. Returns, per stripe with journaled writes, the positions
    /// they change. The slots stay until the resync is done ([`Array::clear_journal`]).
    pub(crate) fn replay_journal(&self) -> Result<Touched, EngineError> {
        let (mut saved, redo) = self.read_journal();
        let n = self.geometry().n() + self.sb().scheme.extra_members();
        let mut touched = Touched::new();
        for r in &redo {
            let mask = touched.entry(r.stripe).or_insert_with(|| vec![false; n]);
            for (p, t) in mask.iter_mut().enumerate() {
                *t |= r
                    .touched
                    .get(p / 8)
                    .is_some_and(|b| b & (1 << (p % 8)) != 0);
            }
            let (stripe, pos) = (StripeIx::new(r.stripe), Pos::new(r.pos));
            let member = self.member_of(stripe, pos);
            if self.is_failed(member) {
                // Degraded: the chunk is its saved copy (if the write saved one) plus these bytes.
                if let Some(s) = saved.get_mut(&(r.stripe, r.pos)) {
                    for (at, bytes) in r.pieces() {
                        s.payload[at..at + bytes.len()].copy_from_slice(bytes);
                    }
                }
                continue;
            }
            let base = self.unit_offset(r.stripe);
            let d = self.members().get(member);
            if let Err(e) = r
                .pieces()
                .try_for_each(|(at, bytes)| d.write_at(base + at as u64, bytes))
            {
                self.fail_member(member, &e)?;
            }
        }
        self.clear_appendix_cache();
        for (&(stripe, pos), r) in &saved {
            let (stripe, pos) = (StripeIx::new(stripe), Pos::new(pos));
            let unit = &r.payload;
            let _guard = self.lock_stripe(stripe);
            if self.sb().scheme == stripeguard_integrity::Scheme::None {
                // Bare RAID has no votes: the parity is recomputed from the data as it is and
                // the saved chunk (md's rule, with the chunk md would have lost).
                self.settle_or_report(
                    stripe,
                    crate::layout::Settle::Known(pos, unit),
                    EventKind::ResyncJournal,
                    "a degraded write was interrupted: parity recomputed from the data and the missing member's chunk from the journal",
                )?;
                continue;
            }
            // With the saved copy standing in for the missing unit, the stripe is diagnosed as
            // if no member were out: the votes roll the interrupted write forward or back.
            *self.stand_in().lock().expect("lock") = Some((
                stripe,
                pos,
                AlignedBuf::from_slice(unit, self.units().mem_align()),
            ));
            let cause = match touched.get(&stripe.get()) {
                Some(mask) => crate::layout::Interrupted::Only(mask),
                None if self.sb().write_journal => crate::layout::Interrupted::Only(&[]),
                None => crate::layout::Interrupted::Unknown,
            };
            let decided = self.repair_stripe_as(stripe, &[], cause);
            *self.stand_in().lock().expect("lock") = None;
            match decided {
                Ok(image) => {
                    self.recycle(image.units);
                    self.record_resync(
                        stripe,
                        EventKind::ResyncJournal,
                        "a degraded write was interrupted: the missing member's chunk came from the journal, the stripe was made consistent around it".into(),
                    );
                }
                Err(EngineError::Unrecoverable { .. }) => self.settle_or_report(
                    stripe,
                    crate::layout::Settle::Known(pos, unit),
                    EventKind::ResyncSettled,
                    "a degraded write was interrupted beyond what the parity decides: the missing member's chunk restored from the journal, the other data kept as on disk, parity recomputed",
                )?,
                Err(e) => return Err(e),
            }
        }
        Ok(touched)
    }

    /// Resync, last step: free every slot on every current member, durably (a later run's
    /// sequence starts again from 1, so no record of this one may survive).
    pub(crate) fn clear_journal(&self) -> Result<(), EngineError> {
        self.flush_members()?;
        let all = self.journal().lock().expect("lock").all_to_free();
        self.free_journal_slots(all)?;
        if let Some(jd) = self.jdevs() {
            let slots: Vec<usize> = (0..jd.slots()).collect();
            let mut failed = jd.zero_headers(&slots);
            failed.extend(jd.flush_all());
            self.lose_journal_devices(failed)?;
        }
        self.flush_members()
    }
}
