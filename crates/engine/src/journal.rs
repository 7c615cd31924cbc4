//! The degraded-write journal (FORMAT.md §2.1e): closes the write hole of a degraded array.
//!
//! With a member out, its data chunk of a stripe exists only as "the parity minus the other
//! data". A write that changes the parity and is cut short by a crash leaves parity and data
//! disagreeing, and the missing chunk — old, flushed data the write never touched — would be
//! rebuilt wrong. The intent record cannot help: resync would have to rebuild that chunk from the
//! very parity that no longer matches. So before a degraded write touches such a stripe, the
//! missing chunk is rebuilt (the whole stripe checked) and saved, with its stripe and position, in
//! a journal slot on every current member and made durable. After a crash, resync restores every
//! saved chunk first: the stripe's parity is recomputed from the data on disk and the saved chunk.
//! A slot is freed (its header zeroed) by the first flush after its write completed.

use crate::{Array, EngineError};
use stripeguard_checksum::crc32c;
use stripeguard_disk::AlignedBuf;
use stripeguard_integrity::JOURNAL_HEADER_BYTES;

const MAGIC: [u8; 8] = *b"SGJRNL\0\0";
const VERSION: u32 = 1;
const HEADER: usize = JOURNAL_HEADER_BYTES as usize;

/// Slot bookkeeping.
#[derive(Default)]
pub(crate) struct Journal {
    /// Per slot: the (stripe, position) it holds, if any.
    used: Vec<Option<(u64, usize)>>,
    /// Per slot: writes still in flight that rely on it.
    busy: Vec<u32>,
    sequence: u64,
    /// The crash campaign's negative control only: run degraded writes without the journal.
    pub(crate) disabled: bool,
}

impl Journal {
    pub(crate) fn new(slots: usize) -> Journal {
        Journal {
            used: vec![None; slots],
            busy: vec![0; slots],
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
            j.busy[s] = j.busy[s].saturating_sub(1);
        }
    }
}

fn header(sequence: u64, stripe: u64, pos: usize, unit: &[u8], event: u64) -> Vec<u8> {
    let mut h = vec![0u8; HEADER];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER as u32).to_le_bytes());
    h[16..24].copy_from_slice(&sequence.to_le_bytes());
    h[24..32].copy_from_slice(&stripe.to_le_bytes());
    h[32..34].copy_from_slice(&(pos as u16).to_le_bytes());
    h[36..40].copy_from_slice(&crc32c(unit).to_le_bytes());
    h[40..48].copy_from_slice(&event.to_le_bytes());
    let crc = crc32c(&h[..HEADER - 4]);
    h[HEADER - 4..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// (sequence, stripe, position) of a valid slot whose unit matches its CRC.
fn decode(slot: &[u8]) -> Option<(u64, u64, usize)> {
    let h = slot.get(..HEADER)?;
    if h[0..8] != MAGIC
        || h[8..12] != VERSION.to_le_bytes()
        || h[12..16] != (HEADER as u32).to_le_bytes()
        || h[HEADER - 4..] != crc32c(&h[..HEADER - 4]).to_le_bytes()
        || h[36..40] != crc32c(&slot[HEADER..]).to_le_bytes()
    {
        return None;
    }
    let u = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8"));
    Some((u(16), u(24), u16::from_le_bytes([h[32], h[33]]) as usize))
}

impl Array {
    /// The crash campaign's negative control only: degraded writes without the journal (the
    /// write hole is then open).
    #[doc(hidden)]
    pub fn disable_degraded_journal_for_campaign(&self) {
        self.journal.lock().expect("lock").disabled = true;
    }

    fn journal_slot_offset(&self, slot: usize) -> u64 {
        self.sb.journal_offset() + slot as u64 * self.sb.journal_slot_bytes()
    }

    /// Before a degraded write of `[start, end)` (stripe-relative bytes) to `stripe`: save every
    /// missing data chunk of the stripe. Caller holds the stripe lock.
    pub(crate) fn save_missing(
        &self,
        stripe: u64,
        start: u64,
        end: u64,
    ) -> Result<Option<Saved<'_>>, EngineError> {
        let g = self.geometry;
        // Every missing data chunk, even one the write overwrites whole: if the write is cut
        // short, the chunk then reads back as its old contents (an unflushed write may be lost,
        // never garbled), where without the saved copy the stripe could not be decided at all.
        let _ = (start, end, g.chunk_bytes);
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
                "journal-too-small",
                format!(
                    "{} data chunks of this stripe are missing but the journal has {} slots: written without it (a crash during this write may lose them)",
                    missing.len(),
                    self.sb.journal_slots
                ),
                crate::EventAction::Notice,
            ));
            return Ok(None);
        }
        // The stripe as it should be, every survivor checked, the missing chunks rebuilt.
        let image = self.repair_stripe(stripe, &[])?;
        // All of the stripe's slots at once (a writer holding some while waiting for more
        // could wait forever); too few free: a flush frees every slot whose write is done.
        let (taken, first_seq) = loop {
            {
                let mut j = self.journal.lock().expect("lock");
                let free: Vec<usize> = (0..j.used.len())
                    .filter(|&s| j.used[s].is_none())
                    .take(missing.len())
                    .collect();
                if free.len() == missing.len() {
                    for (&slot, &pos) in free.iter().zip(&missing) {
                        j.used[slot] = Some((stripe, pos));
                        j.busy[slot] += 1;
                    }
                    let first = j.sequence + 1;
                    j.sequence += missing.len() as u64;
                    break (free, first);
                }
            }
            self.flush()?;
        };
        let mut slots = Vec::new();
        for (i, (&slot, &pos)) in taken.iter().zip(&missing).enumerate() {
            let slot = (slot, first_seq + i as u64);
            let unit = &image.units[pos];
            let event = self.generation.load(std::sync::atomic::Ordering::Relaxed);
            let mut bytes = header(slot.1, stripe, pos, unit, event);
            bytes.extend_from_slice(unit);
            let at = self.journal_slot_offset(slot.0);
            for (m, d) in self.members.all().iter().enumerate() {
                if self.is_failed(m) {
                    continue;
                }
                if let Err(e) = d.write_at(at, &bytes) {
                    self.fail_member(m, &e)?;
                }
            }
            slots.push(slot.0);
        }
        self.recycle(image.units);
        self.flush_members()?;
        Ok(Some(Saved { array: self, slots }))
    }

    /// After a flush: free the slots no write relies on any more (their writes are durable).
    pub(crate) fn free_journal_slots(&self) -> Result<(), EngineError> {
        let freed: Vec<usize> = {
            let mut j = self.journal.lock().expect("lock");
            let idle: Vec<usize> = (0..j.used.len())
                .filter(|&s| j.used[s].is_some() && j.busy[s] == 0)
                .collect();
            for &s in &idle {
                j.used[s] = None;
            }
            idle
        };
        if freed.is_empty() {
            return Ok(());
        }
        let zeros = vec![0u8; HEADER];
        for s in freed {
            let at = self.journal_slot_offset(s);
            for (m, d) in self.members.all().iter().enumerate() {
                if self.is_failed(m) {
                    continue;
                }
                if let Err(e) = d.write_at(at, &zeros) {
                    self.fail_member(m, &e)?;
                }
            }
        }
        self.flush_members()
    }

    /// Resync, first step: restore every chunk a degraded write saved, then clear the journal.
    pub(crate) fn replay_journal(&self) -> Result<(), EngineError> {
        let slots = self.sb.journal_slots as usize;
        let slot_bytes = self.sb.journal_slot_bytes() as usize;
        // The newest valid copy of each (stripe, position) on any current member.
        let mut best: std::collections::BTreeMap<(u64, usize), (u64, Vec<u8>)> = Default::default();
        for (m, d) in self.members.all().iter().enumerate() {
            if self.is_failed(m) {
                continue;
            }
            for s in 0..slots {
                let mut b = vec![0u8; slot_bytes];
                if d.read_at(self.journal_slot_offset(s), &mut b).is_err() {
                    continue;
                }
                if let Some((seq, stripe, pos)) = decode(&b) {
                    if stripe < self.geometry.stripes
                        && pos < self.geometry.k
                        && best.get(&(stripe, pos)).is_none_or(|x| seq > x.0)
                    {
                        best.insert((stripe, pos), (seq, b[HEADER..].to_vec()));
                    }
                }
            }
        }
        for ((stripe, pos), (_, unit)) in &best {
            let _guard = self.locks[*stripe as usize % self.locks.len()]
                .lock()
                .expect("lock");
            if self.sb.scheme == stripeguard_integrity::Scheme::None {
                // Bare RAID has no votes: the parity is recomputed from the data as it is and
                // the saved chunk (md's rule, with the chunk md would have lost).
                self.settle_with(
                    *stripe,
                    Some((*pos, unit)),
                    "resync-journal",
                    "a degraded write was interrupted: parity recomputed from the data and the missing member's chunk from the journal",
                )?;
                continue;
            }
            // With the saved copy standing in for the missing unit, the stripe is diagnosed as
            // if no member were out: the votes roll the interrupted write forward or back.
            *self.stand_in.lock().expect("lock") =
                Some((*stripe, *pos, AlignedBuf::from_slice(unit, self.mem_align)));
            let decided = self.repair_stripe_as(*stripe, &[], true);
            *self.stand_in.lock().expect("lock") = None;
            match decided {
                Ok(image) => {
                    self.recycle(image.units);
                    self.record_resync(
                        *stripe,
                        "resync-journal",
                        "a degraded write was interrupted: the missing member's chunk came from the journal, the stripe was made consistent around it".into(),
                    );
                }
                Err(EngineError::Unrecoverable { .. }) => self.settle_with(
                    *stripe,
                    Some((*pos, unit)),
                    "resync-settled",
                    "a degraded write was interrupted beyond what the parity decides: the missing member's chunk restored from the journal, the other data kept as on disk (a unit torn by the crash may mix old and new sectors), parity recomputed",
                )?,
                Err(e) => return Err(e),
            }
        }
        if !best.is_empty() || slots > 0 {
            let mut j = self.journal.lock().expect("lock");
            for u in &mut j.used {
                *u = Some((0, 0));
            }
            j.busy.iter_mut().for_each(|b| *b = 0);
        }
        self.free_journal_slots()
    }
}
