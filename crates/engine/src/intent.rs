//! The write-intent record and resync (FORMAT.md §2.4): no RAID write hole after a crash.
//!
//! Invariant: a stripe whose writes may not all be durable lies in a region whose bit is set in
//! the durable record on every current member. A write sets (and persists) its region's bit
//! before its first unit write; a flush clears the bits of regions with nothing in flight whose
//! last write completed before the flush began; a clean close clears everything. After an
//! unclean shutdown the first writable assembly resyncs every stripe of every set region.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::EventAction;
use crate::num::usize_of;
use crate::repair::Interrupted;
use std::collections::HashMap;
use stripeguard_checksum::crc32c;
use stripeguard_codes::Located;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::intent::intent_capacity_bits;
use stripeguard_format::EventKind;
use stripeguard_format::{slot_offset, IntentRecord, Record};
use stripeguard_integrity::{MetadataLayout, MirrorKind, Scheme, INTENT_RECORD_OFFSET};

/// Array data per bit by default (FORMAT.md §2.4).
pub const DEFAULT_REGION_BYTES: u64 = 64 << 20;

/// In-memory state of the record.
pub(crate) struct Intent {
    pub(crate) stripes_per_bit: u64,
    bits: u64,
    copy_bytes: usize,
    sequence: u64,
    /// The durable bitmap.
    set: Vec<u8>,
    inflight: HashMap<u64, u32>,
    last_done_epoch: HashMap<u64, u64>,
    epoch: u64,
    /// Benchmarks only: measure the array without the record (then nothing is resynced).
    disabled: bool,
    /// The superblock event count when the record was last written with no bit set and no
    /// member out (0: never, or by an older build). A member whose own count is below it may
    /// have missed writes whose bits are cleared since: it cannot be re-added (FORMAT.md §2.4).
    cleared_at: u64,
}

fn is_set(map: &[u8], r: u64) -> bool {
    map.get((r / 8) as usize)
        .is_some_and(|b| b >> (r % 8) & 1 == 1)
}

impl Intent {
    pub(crate) fn new(layout: &MetadataLayout, stripes: u64, stripe_data_bytes: u64) -> Intent {
        let copy_bytes = (layout.intent_bytes / 2) as usize;
        let max_bits = intent_capacity_bits(copy_bytes);
        let per_bit = stripes
            .div_ceil(max_bits)
            .max(DEFAULT_REGION_BYTES.div_ceil(stripe_data_bytes.max(1)))
            .max(1);
        let bits = stripes.div_ceil(per_bit);
        Intent {
            stripes_per_bit: per_bit,
            bits,
            copy_bytes,
            sequence: 0,
            set: vec![0; usize_of(bits.div_ceil(8))],
            inflight: HashMap::new(),
            last_done_epoch: HashMap::new(),
            epoch: 0,
            disabled: false,
            cleared_at: 0,
        }
    }

    fn encode(&self, event_count: u64) -> Vec<u8> {
        IntentRecord {
            sequence: self.sequence,
            stripes_per_bit: self.stripes_per_bit,
            bits: self.bits,
            event_count,
            cleared_at: self.cleared_at,
            bitmap: self.set.clone(),
        }
        .to_copy(self.copy_bytes)
        .expect("the bitmap was sized for the copy")
    }
}

/// Which stripes a resync must visit.
enum Dirty {
    Nothing,
    Regions {
        per_bit: u64,
        bitmap: Vec<u8>,
        bits: u64,
    },
    Everything,
}

/// Ends a write's claim on its region when dropped.
pub(crate) struct InFlight<'a> {
    array: &'a Array,
    region: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut i = self.array.intent.lock().expect("lock");
        if let Some(c) = i.inflight.get_mut(&self.region) {
            *c -= 1;
        }
        let e = i.epoch;
        i.last_done_epoch.insert(self.region, e);
    }
}

impl Array {
    /// Claim `stripe`'s region for a write: its bit is durable on every member before this
    /// returns.
    pub(crate) fn intent_begin(&self, stripe: u64) -> Result<InFlight<'_>, EngineError> {
        let mut i = self.intent.lock().expect("lock");
        let r = stripe / i.stripes_per_bit;
        if !is_set(&i.set, r) && !i.disabled {
            i.set[(r / 8) as usize] |= 1 << (r % 8);
            self.persist_intent(&mut i)?;
        }
        *i.inflight.entry(r).or_default() += 1;
        Ok(InFlight {
            array: self,
            region: r,
        })
    }

    /// Benchmarks only: run without the write-intent record (a crash then leaves stripes that
    /// no resync will visit). Measures what the record costs.
    #[doc(hidden)]
    pub fn disable_write_intent_for_benchmark(&self) {
        self.intent.lock().expect("lock").disabled = true;
    }

    /// Array data one bit of the write-intent record covers, in stripes.
    pub fn intent_region_stripes(&self) -> u64 {
        self.intent.lock().expect("lock").stripes_per_bit
    }

    /// Make every completed write durable, then clear the bits of regions that are settled and
    /// idle: nothing in flight and no write completed since the flush before this one (clearing
    /// a bit that the next write sets again costs two record writes for nothing; md also clears
    /// lazily).
    pub fn flush(&self) -> Result<(), EngineError> {
        self.flush_and_clear(false)
    }

    /// [`Array::flush`]; with `all` (closing: nothing can be in flight), clear every bit.
    pub(crate) fn flush_and_clear(&self, all: bool) -> Result<(), EngineError> {
        let epoch = {
            let mut i = self.intent.lock().expect("lock");
            i.epoch += 1;
            i.epoch
        };
        let idle = self.idle_journal_slots();
        self.save_events()?;
        self.flush_members()?;
        if !self.writable {
            return Ok(());
        }
        self.free_journal_slots(idle)?;
        if all {
            // Closing: the next run's sequence starts again from 1, so no record of this one
            // may survive (a freeing has no flush of its own).
            self.flush_members()?;
        }
        // Listed blocks that writes replaced come off only now that those writes are durable.
        self.settle_untrusted_after_flush()?;
        // While a member is out, no bit is cleared: the set bits are then the regions written
        // since it left, which is what a re-add of that member rebuilds (md's write-intent
        // bitmap keeps its bits for a missing member the same way).
        if (0..self.members.len()).any(|m| self.is_failed(m)) {
            return Ok(());
        }
        let mut i = self.intent.lock().expect("lock");
        let mut cleared = false;
        for r in 0..i.bits {
            let recent = if all { epoch } else { epoch.saturating_sub(1) };
            let busy = i.inflight.get(&r).copied().unwrap_or(0) > 0
                || i.last_done_epoch.get(&r).is_some_and(|&e| e >= recent);
            if is_set(&i.set, r) && !busy {
                i.set[(r / 8) as usize] &= !(1 << (r % 8));
                i.last_done_epoch.remove(&r);
                cleared = true;
            }
        }
        if cleared {
            self.persist_intent(&mut i)?;
        }
        Ok(())
    }

    /// Write the record to every current member (the copy the newest is not in) and flush.
    pub(crate) fn persist_intent(&self, i: &mut Intent) -> Result<(), EngineError> {
        i.sequence += 1;
        let generation = self.generation.load(std::sync::atomic::Ordering::Relaxed);
        // Empty with every member in: every member holds every write made so far, so a member
        // that leaves later and comes back needs at least this event count to be re-added.
        if i.set.iter().all(|&b| b == 0) && !(0..self.members.len()).any(|m| self.is_failed(m)) {
            i.cleared_at = generation;
        }
        let bytes = i.encode(generation);
        let at = INTENT_RECORD_OFFSET + slot_offset(i.sequence, i.copy_bytes);
        // Every member at once: a record update waits for one write and one flush.
        self.each_member(None, |_, d| d.write_at(at, &bytes).and_then(|()| d.flush()))
    }

    /// Continue the record's sequence from the newest copy on the members, so this process's
    /// updates win over every earlier process's (a fresh count from 0 would lose to them).
    ///
    /// Its bits are taken over too: bits still set at a clean assembly are regions written while
    /// a member was out, kept for that member's re-add (a record too damaged to read counts as
    /// every region when a member is out).
    pub(crate) fn load_intent_sequence(&self) {
        let (dirty, newest, cleared_at) = self.read_intent_with_sequence();
        let degraded = (0..self.members.len()).any(|m| self.is_failed(m));
        let mut i = self.intent.lock().expect("lock");
        i.sequence = i.sequence.max(newest);
        i.cleared_at = i.cleared_at.max(cleared_at);
        match dirty {
            Dirty::Regions {
                per_bit,
                bitmap,
                bits,
            } if per_bit == i.stripes_per_bit && bits == i.bits && bitmap.len() >= i.set.len() => {
                let n = i.set.len();
                i.set.copy_from_slice(&bitmap[..n]);
            }
            Dirty::Everything if degraded => i.set.fill(0xff),
            _ => {}
        }
    }

    /// The stripes of the regions whose bits are set now (in this process's record, which holds
    /// every bit of the record on the members and the ones set since).
    pub(crate) fn intent_stripes(&self) -> Vec<u64> {
        let stripes = self.geometry.stripes;
        let i = self.intent.lock().expect("lock");
        (0..i.bits)
            .filter(|&r| is_set(&i.set, r))
            .flat_map(|r| r * i.stripes_per_bit..((r + 1) * i.stripes_per_bit).min(stripes))
            .collect()
    }

    /// The event count at which the record was last empty with every member in (0: never
    /// known): a returning member below it cannot be re-added (FORMAT.md §2.4).
    pub(crate) fn intent_cleared_at(&self) -> u64 {
        self.intent.lock().expect("lock").cleared_at
    }

    /// The newest record on any current member.
    fn read_intent(&self) -> Dirty {
        self.read_intent_with_sequence().0
    }

    /// The newest record's dirty regions, sequence and "cleared at" event count.
    fn read_intent_with_sequence(&self) -> (Dirty, u64, u64) {
        let copy = (self.sb.layout.intent_bytes / 2) as usize;
        let newest = self.newest_record::<IntentRecord>(INTENT_RECORD_OFFSET, copy, |_| true);
        let (best, damaged) = (newest.record, newest.damaged);
        let newest = best.as_ref().map(|r| r.sequence).unwrap_or(0);
        let cleared_at = best.as_ref().map(|r| r.cleared_at).unwrap_or(0);
        let dirty = match best {
            Some(r) => Dirty::Regions {
                per_bit: r.stripes_per_bit,
                bitmap: r.bitmap,
                bits: r.bits,
            },
            None if damaged => Dirty::Everything,
            None => Dirty::Nothing,
        };
        (dirty, newest, cleared_at)
    }

    /// The stripes a resync would visit: those of the dirty regions when the array was not
    /// closed cleanly, else none.
    pub fn awaiting_resync(&self) -> Vec<u64> {
        if !self.was_unclean() {
            return vec![];
        }
        self.dirty_stripes()
    }

    fn dirty_stripes(&self) -> Vec<u64> {
        let stripes = self.geometry.stripes;
        match self.read_intent() {
            Dirty::Nothing => vec![],
            Dirty::Everything => (0..stripes).collect(),
            Dirty::Regions {
                per_bit,
                bitmap,
                bits,
            } => (0..bits)
                .filter(|&r| is_set(&bitmap, r))
                .flat_map(|r| r * per_bit..((r + 1) * per_bit).min(stripes))
                .collect(),
        }
    }

    /// After an unclean shutdown: make every stripe of every dirty region consistent, then
    /// clear the record. Returns the number of stripes resynced.
    pub(crate) fn resync(&self) -> Result<u64, EngineError> {
        // First the stripes whose missing chunk a degraded write saved: their parity may no
        // longer match it, so it is rebuilt from the saved copy, not from the parity.
        let touched = self.replay_journal()?;
        // Every stripe of the dirty regions, and every stripe a record named (a record is
        // only written inside a dirty region; one outside is checked all the same).
        let mut list = self.dirty_stripes();
        list.extend(touched.keys().copied());
        list.sort_unstable();
        list.dedup();
        for &s in &list {
            // With the write journal every write in flight is named: what else is wrong in
            // the stripe is silent corruption.
            let cause = match touched.get(&s) {
                Some(mask) => Interrupted::Only(mask),
                None if self.sb.write_journal => Interrupted::Only(&[]),
                None => Interrupted::Unknown,
            };
            self.resync_stripe(s, cause)?;
        }
        // Only now: a crash during the resync replays the journal again.
        self.clear_journal()?;
        {
            let mut i = self.intent.lock().expect("lock");
            // With a member out the bits stay: they are what its re-add must rebuild.
            if !(0..self.members.len()).any(|m| self.is_failed(m)) {
                i.set.fill(0);
            }
            self.flush_members()?;
            // Both copies: the one the crash was writing may be torn, which is the crash's
            // doing, not damage for a later check to find.
            self.persist_intent(&mut i)?;
            self.persist_intent(&mut i)?;
        }
        self.events.lock().expect("lock").counters.resynced += list.len() as u64;
        Ok(list.len() as u64)
    }

    /// Make one stripe consistent after a crash (FORMAT.md §2.4).
    fn resync_stripe(&self, stripe: u64, cause: Interrupted<'_>) -> Result<(), EngineError> {
        let _guard = self.locks[usize_of(stripe) % self.locks.len()]
            .lock()
            .expect("lock");
        if self.sb.scheme == Scheme::None {
            return self.recompute_parity(stripe, "resync: parity recomputed from the data");
        }
        // Checksum-chunk: the table and the parity decide (a unit that disagrees with the table
        // is rolled back from the parity; a table behind data that the parity agrees with is
        // recomputed); what they cannot decide is settled like every scheme below.
        match self.repair_stripe_as(stripe, &[], cause) {
            Ok(_) => Ok(()),
            // A stripe no interrupted write touched is not the crash's to settle: it stays
            // unrecoverable, as a read would find it (counted and logged by the diagnosis).
            Err(EngineError::Unrecoverable { .. }) if !cause.settles() => Ok(()),
            // Degraded and undecidable, or no room to list what it cannot verify: the stripe
            // stays unreadable (reads say so); the rest of the array must still come up.
            Err(EngineError::Unrecoverable { .. }) => self.settle(stripe),
            Err(e) => Err(e),
        }
    }

    /// Re-encode the parity of `stripe` from its data units as they are and write it.
    fn recompute_parity(&self, stripe: u64, evidence: &str) -> Result<(), EngineError> {
        let g = self.geometry;
        let all: Vec<usize> = (0..g.n()).collect();
        let units = self.read_units(stripe, &all)?;
        if units[..g.k].iter().any(|u| u.is_none()) {
            // A data unit is unreadable: the parity is all that knows it; leave it.
            return Ok(());
        }
        let c = usize_of(g.chunk_bytes);
        let chunks: Vec<&[u8]> = units[..g.k]
            .iter()
            .map(|u| &u.as_ref().expect("read")[..c])
            .collect();
        if units.iter().all(|u| u.is_some()) {
            let every: Vec<&[u8]> = units
                .iter()
                .map(|u| &u.as_ref().expect("read")[..c])
                .collect();
            if matches!(self.code.locate(&every, &[]), Ok(Located::Consistent)) {
                return Ok(());
            }
        }
        let mut parity: Vec<Vec<u8>> = (0..g.m).map(|_| vec![0u8; c]).collect();
        let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        self.code.encode(&chunks, &mut views)?;
        let writes: Vec<(usize, u64, &[u8])> = parity
            .iter()
            .enumerate()
            .map(|(j, p)| (g.k + j, 0, &p[..]))
            .collect();
        self.write_units(stripe, &writes)?;
        self.record_resync(stripe, EventKind::Resync, evidence.to_string());
        Ok(())
    }

    /// A stripe the votes cannot decide: keep every data unit as it is on disk, give each the
    /// truth of its own bytes, recompute the parity, seal and write everything.
    fn settle(&self, stripe: u64) -> Result<(), EngineError> {
        self.settle_or_report(
            stripe,
            None,
            EventKind::ResyncSettled,
            "more units were interrupted than the parity can decide: data kept as on disk (a unit torn by the crash may mix old and new sectors), parity recomputed",
        )
    }

    /// [`Array::settle_with`]; a stripe it cannot settle (an unreadable data unit, no room to
    /// list what fails its checks) stays as it is, reported: the rest of the array comes up.
    pub(crate) fn settle_or_report(
        &self,
        stripe: u64,
        known: Option<(usize, &[u8])>,
        kind: EventKind,
        evidence: &str,
    ) -> Result<(), EngineError> {
        match self.settle_with(stripe, known, kind, evidence) {
            Err(EngineError::Unrecoverable { reason, .. }) => {
                self.record_resync(stripe, EventKind::ResyncUnrecoverable, reason);
                Ok(())
            }
            other => other,
        }
    }

    /// [`Array::settle`], with data position `known.0`'s unit taken from `known.1` instead of
    /// the disk (a missing member's chunk saved in the journal before a degraded write).
    pub(crate) fn settle_with(
        &self,
        stripe: u64,
        known: Option<(usize, &[u8])>,
        kind: EventKind,
        evidence: &str,
    ) -> Result<(), EngineError> {
        let g = self.geometry;
        let (k, c) = (g.k, usize_of(g.chunk_bytes));
        let all: Vec<usize> = (0..g.n()).collect();
        let mut units = self.read_units(stripe, &all)?;
        if let Some((pos, bytes)) = known {
            let mut u = self.unit_buf();
            u.copy_from_slice(bytes);
            units[pos] = Some(u);
        }
        if units[..k].iter().any(|u| u.is_none()) {
            return Err(EngineError::Unrecoverable {
                stripe,
                reason: "resync cannot settle a stripe with an unreadable data unit".into(),
            });
        }
        let mut units: Vec<AlignedBuf> = units
            .into_iter()
            .map(|u| u.unwrap_or_else(|| self.unit_buf()))
            .collect();
        // Every block that fails its own check is listed untrusted, durably, before the seal
        // below would make it pass (FORMAT.md §2.7): it then reads refused, never as good.
        if self.sb.scheme != Scheme::None {
            let ranges = self.unverified_ranges(stripe, &units, known.map(|k| k.0))?;
            if !self.list_untrusted(&ranges, evidence)? {
                self.recycle(units);
                return Err(EngineError::Unrecoverable {
                    stripe,
                    reason: format!(
                        "{} range(s) of its data fail their checks and the stripe-state record has no room to list them (FORMAT.md §2.7): not settled, the stripe stays as the crash left it",
                        ranges.len()
                    ),
                });
            }
        }
        let tags: Vec<u64> = match self.sb.scheme.mirror() {
            Some(MirrorKind::Checksum) => {
                units[..k].iter().map(|u| crc32c(&u[..c]) as u64).collect()
            }
            Some(MirrorKind::Version) => {
                let seq = self.next_sequence()?;
                vec![seq; k]
            }
            None => vec![0; k],
        };
        let (data, parity) = units.split_at_mut(k);
        let chunks: Vec<&[u8]> = data.iter().map(|u| &u[..c]).collect();
        let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
        self.code.encode(&chunks, &mut views)?;
        if self.sb.scheme.has_appendix() {
            for (pos, u) in units.iter_mut().enumerate() {
                let (chunk, sector) = u.split_at_mut(c);
                self.seal(stripe, pos, &tags, chunk, sector);
            }
        }
        let writes: Vec<(usize, u64, &[u8])> = units
            .iter()
            .enumerate()
            .map(|(p, u)| (p, 0, &u[..]))
            .collect();
        self.write_units(stripe, &writes)?;
        if self.is_ck() {
            let views: Vec<&[u8]> = units.iter().map(|u| &u[..c]).collect();
            let t = self.ck_table_of(stripe, &views);
            self.ck_write_now(stripe, &t, false)?;
        }
        for i in 0..k {
            let id = g.data_chunk_id(stripe, i);
            self.planner
                .lock()
                .expect("lock")
                .map_mut()
                .mark_written(id);
        }
        self.record_resync(stripe, kind, evidence.to_string());
        Ok(())
    }

    pub(crate) fn record_resync(&self, stripe: u64, kind: EventKind, evidence: String) {
        self.events
            .lock()
            .expect("lock")
            .record(crate::repair::stripe_event(
                stripe,
                kind,
                evidence,
                EventAction::Resynced,
            ));
    }
}
