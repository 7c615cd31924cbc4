//! The write-intent record's in-memory state (FORMAT.md §2.4): which regions may hold writes
//! that are not all durable, which of them have writes in flight, and the next copy to write.
//! It knows no array: [`crate::resync`] writes its copies to the members and runs the resync.
//!
//! Invariant: a stripe whose writes may not all be durable lies in a region whose bit is set in
//! the durable record on every current member. A write sets (and persists) its region's bit
//! before its first unit write; a flush clears the bits of regions with nothing in flight whose
//! last write completed before the flush began; a clean close clears everything. After an
//! unclean shutdown the first writable assembly resyncs every stripe of every set region.

use crate::num::usize_of;
use crate::sync::Mutex;
use std::collections::HashMap;
use stripeguard_format::intent::intent_capacity_bits;
use stripeguard_format::{slot_offset, IntentRecord, Newest, Record};
use stripeguard_integrity::MetadataLayout;

/// Array data per bit by default (FORMAT.md §2.4).
pub const DEFAULT_REGION_BYTES: u64 = 64 << 20;

/// In-memory state of the record.
pub(crate) struct Intent {
    stripes_per_bit: u64,
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
    map.get(usize_of(r / 8))
        .is_some_and(|b| b >> (r % 8) & 1 == 1)
}

/// The stripes of the regions set in `bitmap` (of `bits` regions of `per_bit` stripes).
fn stripes_of(bitmap: &[u8], bits: u64, per_bit: u64, stripes: u64) -> Vec<u64> {
    (0..bits)
        .filter(|&r| is_set(bitmap, r))
        .flat_map(|r| r * per_bit..((r + 1) * per_bit).min(stripes))
        .collect()
}

impl Intent {
    pub(crate) fn new(layout: &MetadataLayout, stripes: u64, stripe_data_bytes: u64) -> Intent {
        let copy_bytes = usize_of(layout.intent_bytes / 2);
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

    /// Cut the record for an array grown to `stripes` (its region size follows the stripe
    /// count), keeping its sequence and "cleared at". Only with no bit set and nothing in
    /// flight: a grow flushes and clears everything first, under every stripe lock.
    pub(crate) fn regrid(&mut self, layout: &MetadataLayout, stripes: u64, stripe_data_bytes: u64) {
        debug_assert!(self.set.iter().all(|&b| b == 0));
        let mut new = Intent::new(layout, stripes, stripe_data_bytes);
        new.sequence = self.sequence;
        new.cleared_at = self.cleared_at;
        new.disabled = self.disabled;
        new.epoch = self.epoch;
        *self = new;
    }

    /// Stripes per bit.
    pub(crate) fn stripes_per_bit(&self) -> u64 {
        self.stripes_per_bit
    }

    /// Benchmarks only: never set a bit.
    pub(crate) fn disable(&mut self) {
        self.disabled = true;
    }

    /// See [`Intent::cleared_at`]'s field.
    pub(crate) fn cleared_at(&self) -> u64 {
        self.cleared_at
    }

    /// A write's claim on `stripe`'s region: the region, and whether its bit was set just now
    /// (the record must then be persisted before the write's first unit write).
    pub(crate) fn claim(&mut self, stripe: u64) -> (u64, bool) {
        let r = stripe / self.stripes_per_bit;
        let newly = !is_set(&self.set, r) && !self.disabled;
        if newly {
            self.set[usize_of(r / 8)] |= 1 << (r % 8);
        }
        *self.inflight.entry(r).or_default() += 1;
        (r, newly)
    }

    /// A write on `region` is done.
    fn release(&mut self, region: u64) {
        if let Some(c) = self.inflight.get_mut(&region) {
            *c -= 1;
        }
        self.last_done_epoch.insert(region, self.epoch);
    }

    /// A flush begins: its epoch.
    pub(crate) fn next_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// After the flush of `epoch` made every completed write durable: clear the bits of regions
    /// that are idle (nothing in flight, no write completed since the flush before this one;
    /// with `all`, since this one). Whether any bit was cleared (the record must be persisted).
    pub(crate) fn clear_idle(&mut self, epoch: u64, all: bool) -> bool {
        let recent = if all { epoch } else { epoch.saturating_sub(1) };
        let mut cleared = false;
        for r in 0..self.bits {
            let busy = self.inflight.get(&r).copied().unwrap_or(0) > 0
                || self.last_done_epoch.get(&r).is_some_and(|&e| e >= recent);
            if is_set(&self.set, r) && !busy {
                self.set[usize_of(r / 8)] &= !(1 << (r % 8));
                self.last_done_epoch.remove(&r);
                cleared = true;
            }
        }
        cleared
    }

    /// Clear every bit (a resync made every region consistent).
    pub(crate) fn clear_all(&mut self) {
        self.set.fill(0);
    }

    /// The next copy to write: its offset from the record's start and its bytes, at event count
    /// `generation`. `every_member_in`: an empty record then marks the count a returning member
    /// must have reached to be re-added.
    pub(crate) fn next_copy(&mut self, generation: u64, every_member_in: bool) -> (u64, Vec<u8>) {
        self.sequence += 1;
        if every_member_in && self.set.iter().all(|&b| b == 0) {
            self.cleared_at = generation;
        }
        let bytes = IntentRecord {
            sequence: self.sequence,
            stripes_per_bit: self.stripes_per_bit,
            bits: self.bits,
            event_count: generation,
            cleared_at: self.cleared_at,
            bitmap: self.set.clone(),
        }
        .to_copy(self.copy_bytes)
        .expect("the bitmap was sized for the copy");
        (slot_offset(self.sequence, self.copy_bytes), bytes)
    }

    /// Bytes of one copy of the record.
    pub(crate) fn copy_bytes(&self) -> usize {
        self.copy_bytes
    }

    /// Continue from the newest record on the members, so this process's updates win over
    /// every earlier process's (a fresh count from 0 would lose to them). Its bits are taken
    /// over too: bits still set at a clean assembly are regions written while a member was
    /// out, kept for that member's re-add (a record too damaged to read counts as every region
    /// when a member is out).
    pub(crate) fn take_over(&mut self, found: &Durable, degraded: bool) {
        self.sequence = self.sequence.max(found.sequence);
        self.cleared_at = self.cleared_at.max(found.cleared_at);
        match &found.dirty {
            Dirty::Regions {
                per_bit,
                bitmap,
                bits,
            } if *per_bit == self.stripes_per_bit
                && *bits == self.bits
                && bitmap.len() >= self.set.len() =>
            {
                let n = self.set.len();
                self.set.copy_from_slice(&bitmap[..n]);
            }
            Dirty::Everything if degraded => self.set.fill(0xff),
            _ => {}
        }
    }

    /// The stripes of the regions whose bits are set now (in this process's record, which
    /// holds every bit of the record on the members and the ones set since).
    pub(crate) fn stripes(&self, stripes: u64) -> Vec<u64> {
        stripes_of(&self.set, self.bits, self.stripes_per_bit, stripes)
    }
}

/// Which stripes a resync must visit.
pub(crate) enum Dirty {
    Nothing,
    Regions {
        per_bit: u64,
        bitmap: Vec<u8>,
        bits: u64,
    },
    Everything,
}

/// What the newest durable record on the members says.
pub(crate) struct Durable {
    pub(crate) dirty: Dirty,
    /// Its sequence (0: none).
    pub(crate) sequence: u64,
    /// Its "cleared at" event count.
    pub(crate) cleared_at: u64,
}

impl Durable {
    /// From the newest valid copy found on the members (`damaged`: a copy failed its check).
    pub(crate) fn from_newest(newest: Newest<IntentRecord>) -> Durable {
        let (best, damaged) = (newest.record, newest.damaged);
        Durable {
            sequence: best.as_ref().map(|r| r.sequence).unwrap_or(0),
            cleared_at: best.as_ref().map(|r| r.cleared_at).unwrap_or(0),
            dirty: match best {
                Some(r) => Dirty::Regions {
                    per_bit: r.stripes_per_bit,
                    bitmap: r.bitmap,
                    bits: r.bits,
                },
                None if damaged => Dirty::Everything,
                None => Dirty::Nothing,
            },
        }
    }

    /// The stripes of its dirty regions, of `stripes`.
    pub(crate) fn stripes(&self, stripes: u64) -> Vec<u64> {
        match &self.dirty {
            Dirty::Nothing => vec![],
            Dirty::Everything => (0..stripes).collect(),
            Dirty::Regions {
                per_bit,
                bitmap,
                bits,
            } => stripes_of(bitmap, *bits, *per_bit, stripes),
        }
    }
}

/// Ends a write's claim on its region when dropped.
pub(crate) struct InFlight<'a> {
    intent: &'a Mutex<Intent>,
    region: u64,
}

impl<'a> InFlight<'a> {
    pub(crate) fn new(intent: &'a Mutex<Intent>, region: u64) -> InFlight<'a> {
        InFlight { intent, region }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.intent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(self.region);
    }
}
