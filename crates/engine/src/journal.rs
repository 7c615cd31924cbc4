//! The journal's state (FORMAT.md §2.6): which slot after the data area holds which record,
//! and the records' bytes. It knows no array: [`crate::journaling`] writes the records to the
//! members, frees them after flushes and replays them after a crash.
//!
//! Slots after the data area of every member hold two kinds of record.
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
//! ([`Interrupted`](crate::layout::Interrupted)), never settled.
//!
//! A slot is freed (its header zeroed) by the first flush that began after its write completed,
//! and all of them only after a resync has finished, so a crash during the resync replays again.

use crate::num::{MemberIx, Pos};
use crate::sync::Mutex;
use std::collections::BTreeMap;
use std::sync::PoisonError;
use stripeguard_checksum::crc32c;
use stripeguard_format::journal::{JOURNAL_HEADER_SIZE, TOUCHED_BYTES};
use stripeguard_format::{JournalHeader, JournalKind, Record as _};

pub(crate) const HEADER: usize = JOURNAL_HEADER_SIZE;
/// Record kinds (header byte 34).
pub(crate) const SAVED: u8 = JournalKind::Saved as u8;
pub(crate) const UNIT_WRITES: u8 = JournalKind::UnitWrites as u8;

/// A count of journal slots (at most 64 on members, 4096 on a journal device).
pub(crate) fn slots_u32(n: usize) -> u32 {
    u32::try_from(n).expect("at most 4096 journal slots")
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
    /// Where its copies went.
    on: Copies,
    /// The record's sequence (a flush frees the record it saw idle, not a later one).
    sequence: u64,
}

/// Where a record's copies went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Copies {
    /// These members' slots (empty: every current member's).
    Members(Vec<MemberIx>),
    /// The journal devices' slots (FORMAT.md §2.12).
    Devices,
}

impl Default for Copies {
    fn default() -> Self {
        Copies::Members(Vec::new())
    }
}

/// Slot bookkeeping.
#[derive(Default)]
pub(crate) struct Journal {
    slots: Vec<Slot>,
    sequence: u64,
    /// The crash campaign's negative control only: write without the journal.
    disabled: bool,
}

impl Journal {
    pub(crate) fn new(slots: usize) -> Journal {
        Journal {
            slots: vec![Slot::default(); slots],
            sequence: 0,
            disabled: false,
        }
    }

    /// Whether `count` slots would be free once the freeing under way ends (another thread's
    /// flush is zeroing them): waiting for it beats a flush of one's own.
    pub(crate) fn freeing_would_do(&self, count: usize) -> bool {
        let soon = self
            .slots
            .iter()
            .filter(|s| s.held.is_none() || s.zeroing)
            .count();
        soon >= count && self.slots.iter().any(|s| s.zeroing)
    }

    /// The crash campaign's negative control only: write without the journal.
    pub(crate) fn disable(&mut self) {
        self.disabled = true;
    }

    pub(crate) fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// A free slot for each of `wanted` (stripe, kind, position), all at once, busy until the
    /// returned [`Saved`]'s owner is done: (slot, sequence) pairs. `None` when too few are free
    /// or a slot still holds a record of the same kind for one of these chunks (a flush frees
    /// them: then try again).
    /// With `repeat_unit_writes` (the journal devices, FORMAT.md §2.12), a unit-writes record
    /// may be taken while an older one of the same unit is still held: both are replayed, in
    /// sequence order, and their freeing zeroes the older first, durably
    /// ([`Journal::freeing_phases`]).
    pub(crate) fn try_take(
        &mut self,
        wanted: &[(u64, u8, usize)],
        repeat_unit_writes: bool,
    ) -> Option<Vec<(usize, u64)>> {
        let count = wanted.len();
        let older = self.slots.iter().any(|s| {
            s.held.is_some_and(|stripe| {
                wanted.contains(&(stripe, s.kind, s.pos))
                    && !(repeat_unit_writes && s.kind == UNIT_WRITES)
            })
        });
        let free: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].held.is_none())
            .take(count)
            .collect();
        if older || free.len() != count {
            return None;
        }
        let first = self.sequence + 1;
        self.sequence += count as u64;
        for (i, (&s, &(stripe, kind, pos))) in free.iter().zip(wanted).enumerate() {
            self.slots[s] = Slot {
                held: Some(stripe),
                kind,
                pos,
                busy: 1,
                zeroing: false,
                on: Copies::default(),
                sequence: first + i as u64,
            };
        }
        Some(
            free.into_iter()
                .enumerate()
                .map(|(i, s)| (s, first + i as u64))
                .collect(),
        )
    }

    /// Where `slot`'s copies go.
    pub(crate) fn set_copies(&mut self, slot: usize, on: Copies) {
        self.slots[slot].on = on;
    }

    /// The slots a flush beginning now may free: their writes are done, so the flush makes
    /// them durable. (Taken before the flush: a write that ends during it is not yet durable.)
    pub(crate) fn idle(&self) -> Vec<(usize, u64)> {
        (0..self.slots.len())
            .filter(|&s| {
                let slot = &self.slots[s];
                slot.held.is_some() && slot.busy == 0 && !slot.zeroing
            })
            .map(|s| (s, self.slots[s].sequence))
            .collect()
    }

    /// Of `idle` (from [`Journal::idle`] before a flush), the slots still idle with the same
    /// record: marked as being zeroed, with the members their copies are on. And whether one
    /// is a saved chunk (its zeroing must be flushed before the flush returns).
    pub(crate) fn start_freeing(
        &mut self,
        idle: Vec<(usize, u64)>,
    ) -> (Vec<(usize, Copies)>, bool) {
        let mut undo = false;
        let mut freed = Vec::new();
        for (s, sequence) in idle {
            let slot = &mut self.slots[s];
            if slot.held.is_some() && slot.busy == 0 && !slot.zeroing && slot.sequence == sequence {
                slot.zeroing = true;
                undo |= slot.kind == SAVED;
                freed.push((s, slot.on.clone()));
            }
        }
        (freed, undo)
    }

    /// `freed` (slots [`Journal::start_freeing`] gave) in the order their zeroing must reach
    /// the disk: phase `i` holds each unit's `i`-th oldest record, so a unit's older record is
    /// zeroed, durably, before a newer one of it is (a crash that kept an older record but lost
    /// its newer one would replay stale bytes over the newer write).
    pub(crate) fn freeing_phases(&self, freed: &[usize]) -> Vec<Vec<usize>> {
        let mut by_unit: BTreeMap<(u64, u8, usize), Vec<(u64, usize)>> = BTreeMap::new();
        for &s in freed {
            let slot = &self.slots[s];
            let unit = (slot.held.unwrap_or(0), slot.kind, slot.pos);
            by_unit.entry(unit).or_default().push((slot.sequence, s));
        }
        let mut phases: Vec<Vec<usize>> = Vec::new();
        for mut records in by_unit.into_values() {
            records.sort_unstable();
            for (i, (_, s)) in records.into_iter().enumerate() {
                if phases.len() <= i {
                    phases.push(Vec::new());
                }
                phases[i].push(s);
            }
        }
        phases
    }

    /// `slots`' headers are zeroed (or their members failed): free.
    pub(crate) fn free(&mut self, slots: impl IntoIterator<Item = usize>) {
        for s in slots {
            self.slots[s] = Slot::default();
        }
    }

    /// Every slot, to be zeroed on every member (the end of a resync): each marked as holding
    /// an idle record of sequence 0, which is what [`Journal::start_freeing`] then frees.
    pub(crate) fn all_to_free(&mut self) -> Vec<(usize, u64)> {
        for s in &mut self.slots {
            *s = Slot {
                held: Some(0),
                ..Slot::default()
            };
        }
        (0..self.slots.len()).map(|s| (s, 0)).collect()
    }
}

/// Holds a write's journal slots busy until it is done.
pub(crate) struct Saved<'a> {
    journal: &'a Mutex<Journal>,
    slots: Vec<usize>,
}

impl<'a> Saved<'a> {
    pub(crate) fn new(journal: &'a Mutex<Journal>, taken: &[(usize, u64)]) -> Saved<'a> {
        Saved {
            journal,
            slots: taken.iter().map(|t| t.0).collect(),
        }
    }
}

impl Drop for Saved<'_> {
    fn drop(&mut self) {
        let mut j = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        for &s in &self.slots {
            j.slots[s].busy = j.slots[s].busy.saturating_sub(1);
        }
    }
}

/// What one record says (its payload follows the header).
pub(crate) struct Record {
    pub(crate) kind: u8,
    pub(crate) sequence: u64,
    pub(crate) stripe: u64,
    pub(crate) pos: usize,
    /// Where in the unit the payload's pieces go: (start, length), in payload order.
    pub(crate) extents: Vec<(u32, u32)>,
    pub(crate) payload: Vec<u8>,
    /// New bytes: the stripe positions the write changes.
    pub(crate) touched: [u8; TOUCHED_BYTES],
    /// The journal round it was written in: its first sequence and its number of records
    /// (sequences `group.0 .. group.0 + group.1`). A round is replayed only whole: a crash
    /// before its flush may leave any subset, and then nothing of it had gone in place.
    pub(crate) group: (u64, u32),
}

impl Record {
    pub(crate) fn encode(&self, event: u64, array_uuid: [u8; 16]) -> Vec<u8> {
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
    pub(crate) fn decode(slot: &[u8], unit: usize, array_uuid: &[u8; 16]) -> Option<Record> {
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
    pub(crate) fn pieces(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut at = 0usize;
        self.extents.iter().map(move |&(start, len)| {
            let p = &self.payload[at..at + len as usize];
            at += len as usize;
            (start as usize, p)
        })
    }
}

/// A write's in-place I/Os: (position, byte within the unit, bytes).
pub(crate) type UnitWrites<'a> = Vec<(Pos, u64, &'a [u8])>;

/// One record's bytes for one member: (where, bytes shared by its copies).
pub(crate) type SlotWrite = (u64, std::sync::Arc<Vec<u8>>);

/// Per stripe with journaled writes: the positions they change.
pub(crate) type Touched = BTreeMap<u64, Vec<bool>>;
