//! The journal (FORMAT.md §2.6): slots after the data area of every member, for two kinds of
//! record.
//!
//! **Saved chunk** (every array): closes the write hole of a degraded array. With a member out,
//! its data chunk of a stripe exists only as "the parity minus the other data". A write that
//! changes the parity and is cut short by a crash leaves parity and data disagreeing, and the
//! missing chunk — old, flushed data the write never touched — would be rebuilt wrong. The intent
//! record cannot help: resync would have to rebuild that chunk from the very parity that no longer
//! matches. So before a degraded write touches such a stripe, the missing chunk is rebuilt (the
//! whole stripe checked) and saved, with its stripe and position, in a journal slot on every
//! current member and made durable. After a crash, resync restores every saved chunk first.
//!
//! **Unit writes** (arrays created with `--journal`): a write is computed whole first (new
//! chunks, appendices, parity, checksum table); every in-place I/O it will issue is then in a
//! record per unit, with the positions it changes, on `m + 1` members, flushed (one round for
//! a batch of stripes). A crash can then tear the in-place writes any way it likes: the resync
//! first issues every journaled I/O again (redo), so each interrupted stripe is exactly as its
//! write would have left it, consistent, before anything is diagnosed — no write hole, no
//! torn chunk, and a member lost before the resync costs only its redundancy. A record that did
//! not become durable has nothing in place behind it. What the diagnosis then finds is damage:
//! repaired as a read would, reported as silent corruption where no record names the unit
//! ([`Interrupted`]), never settled.
//!
//! A slot is freed (its header zeroed) by the first flush that began after its write completed,
//! and all of them only after a resync has finished, so a crash during the resync replays again.

use crate::array::Array;
use crate::error::EngineError;
use crate::num::usize_of;
use std::collections::BTreeMap;
use stripeguard_checksum::crc32c;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::journal::{JOURNAL_HEADER_SIZE, MAX_EXTENTS, TOUCHED_BYTES};
use stripeguard_format::EventKind;
use stripeguard_format::{JournalHeader, JournalKind, Record as _};

const HEADER: usize = JOURNAL_HEADER_SIZE;
/// Record kinds (header byte 34).
const SAVED: u8 = JournalKind::Saved as u8;
const UNIT_WRITES: u8 = JournalKind::UnitWrites as u8;

/// A count of journal slots (at most MAX_JOURNAL_SLOTS, 64).
fn slots_u32(n: usize) -> u32 {
    u32::try_from(n).expect("at most 64 journal slots")
}

/// One slot's bookkeeping.
#[derive(Clone, Default)]
struct Slot {
    /// Holds a record (its stripe), until a flush frees it and its header is zeroed.
    held: Option<u64>,
    /// The record's kind and stripe position.
    kind: u8,
    pos: usize,
    /// Writes still in flight that rely on it.
    busy: u32,
    /// Its header is being zeroed (no longer a record to rely on, not yet a free slot).
    zeroing: bool,
    /// The members its copies went to; empty = every current member.
    on: Vec<usize>,
    /// The record's sequence (a flush frees the record it saw idle, not a later one).
    sequence: u64,
}

/// Slot bookkeeping.
#[derive(Default)]
pub(crate) struct Journal {
    slots: Vec<Slot>,
    sequence: u64,
    /// The crash campaign's negative control only: write without the journal.
    pub(crate) disabled: bool,
}

impl Journal {
    pub(crate) fn new(slots: usize) -> Journal {
        Journal {
            slots: vec![Slot::default(); slots],
            sequence: 0,
            disabled: false,
        }
    }
}

/// Holds a write's journal slots busy until it is done.
pub(crate) struct Saved<'a> {
    array: &'a Array,
    slots: Vec<usize>,
}

impl Drop for Saved<'_> {
    fn drop(&mut self) {
        let mut j = self.array.journal.lock().expect("lock");
        for &s in &self.slots {
            j.slots[s].busy = j.slots[s].busy.saturating_sub(1);
        }
    }
}

/// What one record says (its payload follows the header).
struct Record {
    kind: u8,
    sequence: u64,
    stripe: u64,
    pos: usize,
    /// Where in the unit the payload's pieces go: (start, length), in payload order.
    extents: Vec<(u32, u32)>,
    payload: Vec<u8>,
    /// New bytes: the stripe positions the write changes.
    touched: [u8; TOUCHED_BYTES],
    /// The journal round it was written in: its first sequence and its number of records
    /// (sequences `group.0 .. group.0 + group.1`). A round is replayed only whole: a crash
    /// before its flush may leave any subset, and then nothing of it had gone in place.
    group: (u64, u32),
}

impl Record {
    fn encode(&self, event: u64, array_uuid: [u8; 16]) -> Vec<u8> {
        let len = self.payload.len();
        // Whole sectors (a unit is whole sectors, so this stays inside the slot).
        let mut b = vec![0u8; HEADER + len.div_ceil(512) * 512];
        JournalHeader {
            kind: if self.kind == SAVED {
                JournalKind::Saved
            } else {
                JournalKind::UnitWrites
            },
            sequence: self.sequence,
            stripe: self.stripe,
            position: u16::try_from(self.pos).expect("a stripe has at most 255 positions"),
            payload_crc: crc32c(&self.payload),
            event,
            extents: self.extents.clone(),
            touched: self.touched,
            round: self.group,
            array_uuid,
        }
        .write_copy(&mut b[..HEADER])
        .expect("a record has 1 to 8 extents");
        b[HEADER..HEADER + len].copy_from_slice(&self.payload);
        b
    }

    /// A valid record whose payload matches its CRC and whose extents fit a unit of `unit`
    /// bytes; never panics.
    fn decode(slot: &[u8], unit: usize, array_uuid: &[u8; 16]) -> Option<Record> {
        let h = JournalHeader::read_copy(slot).ok()??;
        if !h.belongs_to(array_uuid) {
            return None;
        }
        let payload = h.payload_in(slot, unit as u64)?;
        Some(Record {
            kind: h.kind as u8,
            sequence: h.sequence,
            stripe: h.stripe,
            pos: usize::from(h.position),
            payload: payload.to_vec(),
            extents: h.extents,
            touched: h.touched,
            group: h.round,
        })
    }

    /// (where in the unit, bytes) of each extent.
    fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut at = 0usize;
        self.extents.iter().map(move |&(start, len)| {
            let p = &self.payload[at..at + len as usize];
            at += len as usize;
            (start as usize, p)
        })
    }
}

/// A write's in-place I/Os: (position, byte within the unit, bytes).
pub(crate) type UnitWrites<'a> = Vec<(usize, u64, &'a [u8])>;

/// One record's bytes for one member: (where, bytes shared by its copies).
type SlotWrite = (u64, std::sync::Arc<Vec<u8>>);

/// Per stripe with journaled writes: the positions they change.
pub(crate) type Touched = BTreeMap<u64, Vec<bool>>;

impl Array {
    /// The crash campaign's negative control only: write without the journal (the degraded
    /// write hole is then open, and a torn chunk may mix old and new blocks).
    #[doc(hidden)]
    pub fn disable_degraded_journal_for_campaign(&self) {
        self.journal.lock().expect("lock").disabled = true;
    }

    fn journal_slot_offset(&self, slot: usize) -> u64 {
        self.sb.journal_offset() + slot as u64 * self.sb.journal_slot_bytes()
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
        for _ in 0..10_000 {
            {
                let mut j = self.journal.lock().expect("lock");
                let older = j.slots.iter().any(|s| {
                    s.held
                        .is_some_and(|stripe| wanted.contains(&(stripe, s.kind, s.pos)))
                });
                let free: Vec<usize> = (0..j.slots.len())
                    .filter(|&s| j.slots[s].held.is_none())
                    .take(count)
                    .collect();
                if !older && free.len() == count {
                    let first = j.sequence + 1;
                    j.sequence += count as u64;
                    for (i, (&s, &(stripe, kind, pos))) in free.iter().zip(wanted).enumerate() {
                        j.slots[s] = Slot {
                            held: Some(stripe),
                            kind,
                            pos,
                            busy: 1,
                            zeroing: false,
                            on: Vec::new(),
                            sequence: first + i as u64,
                        };
                    }
                    return Ok(free
                        .into_iter()
                        .enumerate()
                        .map(|(i, s)| (s, first + i as u64))
                        .collect());
                }
            }
            self.flush()?;
        }
        Err(EngineError::Config(format!(
            "the write journal's {} slots stayed full: {count} were needed at once",
            self.sb.journal_slots
        )))
    }

    /// Write `records` (slot, record, the members its copies go to: every current member when
    /// empty) and flush those members: every copy at once, then every flush at once, so the
    /// records are durable after about one write and one flush.
    fn put_records(&self, records: &[(usize, Record, Vec<usize>)]) -> Result<(), EngineError> {
        let event = self.generation.load(std::sync::atomic::Ordering::Relaxed);
        let n = self.members.len();
        let on = |members: &Vec<usize>, m: usize| members.is_empty() || members.contains(&m);
        let mut jobs: Vec<(usize, SlotWrite)> = Vec::new();
        {
            let mut j = self.journal.lock().expect("lock");
            for (slot, record, members) in records {
                j.slots[*slot].on = members.clone();
                let bytes = record.encode(event, self.sb.array_uuid);
                let at = self.journal_slot_offset(*slot);
                let bytes = std::sync::Arc::new(bytes);
                for m in (0..n).filter(|&m| on(members, m)) {
                    jobs.push((m, (at, bytes.clone())));
                }
            }
        }
        let flushed: Vec<usize> = (0..n)
            .filter(|&m| records.iter().any(|(_, _, members)| on(members, m)))
            .collect();
        self.member_jobs(&jobs, |_, d, (at, b)| d.write_at(*at, b))?;
        self.each_member(Some(&flushed), |_, d| d.flush())
    }

    /// Before a degraded write to `stripe`: save every missing data chunk of the stripe.
    /// Caller holds the stripe lock.
    pub(crate) fn save_missing(&self, stripe: u64) -> Result<Option<Saved<'_>>, EngineError> {
        let g = self.geometry;
        // Every missing data chunk, even one the write overwrites whole: if the write is cut
        // short, the chunk then reads back as its old contents (an unflushed write may be lost,
        // never garbled), where without the saved copy the stripe could not be decided at all.
        let missing: Vec<usize> = (0..g.k)
            .filter(|&pos| self.is_failed(self.member_of(stripe, pos)))
            .collect();
        if missing.is_empty()
            || self.sb.journal_slots == 0
            || self.journal.lock().expect("lock").disabled
        {
            return Ok(None);
        }
        if missing.len() > self.sb.journal_slots as usize {
            self.events.lock().expect("lock").record(crate::repair::stripe_event(
                stripe,
                EventKind::JournalTooSmall,
                format!(
                    "{} data chunks of this stripe are missing but the journal has {} slots: written without it (a crash during this write may lose them)",
                    missing.len(),
                    self.sb.journal_slots
                ),
                crate::events::EventAction::Notice,
            ));
            return Ok(None);
        }
        // The stripe as it should be, every survivor checked, the missing chunks rebuilt.
        let image = self.repair_stripe(stripe, &[])?;
        let wanted: Vec<(u64, u8, usize)> = missing.iter().map(|&p| (stripe, SAVED, p)).collect();
        let taken = self.take_slots(&wanted)?;
        let saved = Saved {
            array: self,
            slots: taken.iter().map(|t| t.0).collect(),
        };
        let records: Vec<(usize, Record, Vec<usize>)> = taken
            .iter()
            .zip(&missing)
            .map(|(&(slot, sequence), &pos)| {
                let record = Record {
                    kind: SAVED,
                    sequence,
                    stripe,
                    pos,
                    extents: vec![(0, crate::num::in_unit_u32(image.units[pos].len()))],
                    payload: image.units[pos].to_vec(),
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
        batch: &[(u64, UnitWrites<'_>)],
    ) -> Result<Option<Saved<'_>>, EngineError> {
        if !self.sb.write_journal || self.journal.lock().expect("lock").disabled {
            return Ok(None);
        }
        let g = self.geometry;
        let n = self.members.len();
        // A record per unit (more when a unit has more than MAX_EXTENTS pieces); sequences
        // are given when the slots are taken.
        let mut records: Vec<Record> = Vec::new();
        for (stripe, writes) in batch {
            let mut touched = [0u8; TOUCHED_BYTES];
            let from = records.len();
            for &(pos, at, bytes) in writes {
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
                            stripe: *stripe,
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
        let saved = Saved {
            array: self,
            slots: taken.iter().map(|t| t.0).collect(),
        };
        let group = (taken[0].1, slots_u32(taken.len()));
        let records: Vec<(usize, Record, Vec<usize>)> = records
            .into_iter()
            .zip(taken)
            .map(|(mut record, (slot, sequence))| {
                record.sequence = sequence;
                record.group = group;
                // The copies go to m + 1 current members from P's on: the record outlives any
                // m of them.
                let first = self.member_of(record.stripe, g.k);
                let copies: Vec<usize> = (0..n)
                    .map(|i| (first + i) % n)
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
        let j = self.journal.lock().expect("lock");
        (0..j.slots.len())
            .filter(|&s| j.slots[s].held.is_some() && j.slots[s].busy == 0 && !j.slots[s].zeroing)
            .map(|s| (s, j.slots[s].sequence))
            .collect()
    }

    /// After a flush: free `idle` ([`Array::idle_journal_slots`] from before it), zeroing
    /// their headers. New-bytes records need no flush of their own: one whose zeroing a crash
    /// loses replays bytes already in place, and no newer record of its chunk can exist until
    /// its zeroing is done (`take_slots`), so none can be gone while it is not. A saved chunk
    /// is the chunk *before* its write: replayed after the write was flushed it would undo it,
    /// so its zeroing is flushed before the flush that freed it returns.
    pub(crate) fn free_journal_slots(&self, idle: Vec<(usize, u64)>) -> Result<(), EngineError> {
        let mut undo = false;
        let freed: Vec<(usize, Vec<usize>)> = {
            let mut j = self.journal.lock().expect("lock");
            let mut freed = Vec::new();
            for (s, sequence) in idle {
                let slot = &mut j.slots[s];
                if slot.held.is_some()
                    && slot.busy == 0
                    && !slot.zeroing
                    && slot.sequence == sequence
                {
                    slot.zeroing = true;
                    undo |= slot.kind == SAVED;
                    freed.push((s, slot.on.clone()));
                }
            }
            freed
        };
        if freed.is_empty() {
            return Ok(());
        }
        let zeros = vec![0u8; HEADER];
        let jobs: Vec<(usize, u64)> = (0..self.members.len())
            .flat_map(|m| {
                freed
                    .iter()
                    .filter(move |(_, on)| on.is_empty() || on.contains(&m))
                    .map(move |(s, _)| (m, self.journal_slot_offset(*s)))
            })
            .collect();
        let zeroed = self.member_jobs(&jobs, |_, d, &at| d.write_at(at, &zeros));
        // Free even when a member failed: its zeroing no longer matters.
        {
            let mut j = self.journal.lock().expect("lock");
            for (s, _) in &freed {
                j.slots[*s] = Slot::default();
            }
        }
        zeroed?;
        if undo {
            self.flush_members()?;
        }
        Ok(())
    }

    /// Zero every slot header on `member` (a device a `replace` writes: slots it held before
    /// are not records of this array's last run).
    pub(crate) fn clear_journal_of(&self, member: usize) -> Result<(), EngineError> {
        let zeros = vec![0u8; HEADER];
        let d = self.members.get(member);
        for s in 0..self.sb.journal_slots as usize {
            d.write_at(self.journal_slot_offset(s), &zeros)?;
        }
        Ok(())
    }

    /// Every valid record on any current member: saved chunks by (stripe, position), the newest
    /// of each; unit writes of whole rounds, in the order they were written.
    fn read_journal(&self) -> (BTreeMap<(u64, usize), Record>, Vec<Record>) {
        let slot_bytes = usize_of(self.sb.journal_slot_bytes());
        let unit = usize_of(self.unit_bytes());
        let g = self.geometry;
        let mut saved: BTreeMap<(u64, usize), Record> = BTreeMap::new();
        let mut redo: BTreeMap<u64, Record> = BTreeMap::new();
        let mut b = vec![0u8; slot_bytes];
        for (m, d) in self.members.all().iter().enumerate() {
            if self.is_failed(m) {
                continue;
            }
            for s in 0..self.sb.journal_slots as usize {
                if d.read_at(self.journal_slot_offset(s), &mut b).is_err() {
                    continue;
                }
                let Some(r) = Record::decode(&b, unit, &self.sb.array_uuid) else {
                    continue;
                };
                // Unit-writes records exist only in arrays with the write journal (feature bit
                // 1): one found elsewhere is not this array's and is never replayed.
                if r.kind == UNIT_WRITES && !self.sb.write_journal {
                    continue;
                }
                let positions = match r.kind {
                    SAVED => g.k,
                    _ => g.n() + self.sb.scheme.extra_members(),
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
        let n = self.geometry.n() + self.sb.scheme.extra_members();
        let mut touched = Touched::new();
        for r in &redo {
            let mask = touched.entry(r.stripe).or_insert_with(|| vec![false; n]);
            for (p, t) in mask.iter_mut().enumerate() {
                *t |= r
                    .touched
                    .get(p / 8)
                    .is_some_and(|b| b & (1 << (p % 8)) != 0);
            }
            let member = self.member_of(r.stripe, r.pos);
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
            let d = self.members.get(member);
            if let Err(e) = r
                .pieces()
                .try_for_each(|(at, bytes)| d.write_at(base + at as u64, bytes))
            {
                self.fail_member(member, &e)?;
            }
        }
        self.clear_appendix_cache();
        for ((stripe, pos), r) in &saved {
            let unit = &r.payload;
            let _guard = self.locks[usize_of(*stripe) % self.locks.len()]
                .lock()
                .expect("lock");
            if self.sb.scheme == stripeguard_integrity::Scheme::None {
                // Bare RAID has no votes: the parity is recomputed from the data as it is and
                // the saved chunk (md's rule, with the chunk md would have lost).
                self.settle_or_report(
                    *stripe,
                    Some((*pos, unit)),
                    EventKind::ResyncJournal,
                    "a degraded write was interrupted: parity recomputed from the data and the missing member's chunk from the journal",
                )?;
                continue;
            }
            // With the saved copy standing in for the missing unit, the stripe is diagnosed as
            // if no member were out: the votes roll the interrupted write forward or back.
            *self.stand_in.lock().expect("lock") =
                Some((*stripe, *pos, AlignedBuf::from_slice(unit, self.mem_align)));
            let cause = match touched.get(stripe) {
                Some(mask) => crate::repair::Interrupted::Only(mask),
                None if self.sb.write_journal => crate::repair::Interrupted::Only(&[]),
                None => crate::repair::Interrupted::Unknown,
            };
            let decided = self.repair_stripe_as(*stripe, &[], cause);
            *self.stand_in.lock().expect("lock") = None;
            match decided {
                Ok(image) => {
                    self.recycle(image.units);
                    self.record_resync(
                        *stripe,
                        EventKind::ResyncJournal,
                        "a degraded write was interrupted: the missing member's chunk came from the journal, the stripe was made consistent around it".into(),
                    );
                }
                Err(EngineError::Unrecoverable { .. }) => self.settle_or_report(
                    *stripe,
                    Some((*pos, unit)),
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
        let all: Vec<(usize, u64)> = {
            let mut j = self.journal.lock().expect("lock");
            for s in &mut j.slots {
                *s = Slot {
                    held: Some(0),
                    ..Slot::default()
                };
            }
            (0..j.slots.len()).map(|s| (s, 0)).collect()
        };
        self.free_journal_slots(all)?;
        self.flush_members()
    }
}
