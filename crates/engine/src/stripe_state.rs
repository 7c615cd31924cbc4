//! The in-memory side of the stripe-state record (FORMAT.md §2.7): the listed untrusted ranges,
//! the zero stripes, the record's sequence, and what memory has that the disk does not. It owns
//! its lock and knows nothing of the array; `untrusted.rs` and `zero.rs` do the I/O and the
//! rules around it.
//!
//! Every read and write piece asks whether its range is listed or its stripe zero. Nearly
//! always nothing is, so that answer comes from one atomic load, without the lock or an
//! allocation; the flags are kept equal to "the set is not empty" by the guard that every
//! change goes through.
//!
//! **What the disk may say.** An entry taken off (a write replaced a listed range, or wrote
//! into a zero stripe) may leave the record on disk only once the write is durable. So a taking
//! off is kept as *pending*, numbered; a flush notes the number before it flushes the members
//! (the *mark*), and the record it then writes still holds every entry taken off at or after
//! the mark — those writes may not be durable yet — and forgets the older ones. Two flushes at
//! once are safe: what one forgets, the other's member flush made durable too. Every other
//! write of the record (listing untrusted ranges during a resync, a scrub rewriting a damaged
//! copy) holds every pending entry.

use crate::num::{Pos, StripeIx};
use crate::sync::{Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use stripeguard_integrity::{StateRecord, UntrustedRange, ZeroRange};

/// Stripes that read as zeros: disjoint ranges, merged where they touch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ZeroSet {
    /// First stripe -> end (exclusive).
    ranges: BTreeMap<u64, u64>,
}

impl ZeroSet {
    pub(crate) fn from_record(zero: &[ZeroRange]) -> ZeroSet {
        let mut z = ZeroSet::default();
        for r in zero {
            z.insert(r.first, r.first.saturating_add(r.count));
        }
        z
    }

    pub(crate) fn to_record(&self) -> Vec<ZeroRange> {
        self.ranges
            .iter()
            .map(|(&first, &end)| ZeroRange {
                first,
                count: end - first,
            })
            .collect()
    }

    pub(crate) fn contains(&self, stripe: u64) -> bool {
        self.ranges
            .range(..=stripe)
            .next_back()
            .is_some_and(|(_, &end)| stripe < end)
    }

    /// Stripes `lo..hi` read as zeros.
    pub(crate) fn insert(&mut self, mut lo: u64, mut hi: u64) {
        if lo >= hi {
            return;
        }
        if let Some((&f, &e)) = self.ranges.range(..=lo).next_back() {
            if e >= lo {
                lo = f;
                hi = hi.max(e);
            }
        }
        let after: Vec<u64> = self.ranges.range(lo..=hi).map(|(&f, _)| f).collect();
        for f in after {
            if let Some(e) = self.ranges.remove(&f) {
                hi = hi.max(e);
            }
        }
        self.ranges.insert(lo, hi);
    }

    /// `stripe` no longer reads as zeros; whether it did.
    pub(crate) fn remove(&mut self, stripe: u64) -> bool {
        let Some((&f, &e)) = self.ranges.range(..=stripe).next_back() else {
            return false;
        };
        if stripe >= e {
            return false;
        }
        self.ranges.remove(&f);
        if f < stripe {
            self.ranges.insert(f, stripe);
        }
        if stripe + 1 < e {
            self.ranges.insert(stripe + 1, e);
        }
        true
    }

    /// Ranges (entries of the record).
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Stripes in all ranges.
    pub(crate) fn stripes(&self) -> u64 {
        self.ranges.iter().map(|(f, e)| e - f).sum()
    }

    /// The ranges overlapping stripes `lo..hi`, clipped to them.
    pub(crate) fn overlapping(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let start = match self.ranges.range(..=lo).next_back() {
            Some((&f, &e)) if e > lo => f,
            _ => lo,
        };
        self.ranges
            .range(start..hi)
            .map(|(&f, &e)| (f.max(lo), e.min(hi)))
            .filter(|(f, e)| f < e)
            .collect()
    }

    /// The `count` smallest ranges (the cheapest to write out as real zeros).
    pub(crate) fn smallest(&self, count: usize) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = self.ranges.iter().map(|(&f, &e)| (f, e)).collect();
        all.sort_by_key(|&(f, e)| (e - f, f));
        all.truncate(count);
        all
    }
}

/// An entry taken off in memory whose removal may not be durable yet.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Removed {
    Untrusted(UntrustedRange),
    Zero(u64),
}

/// The record's state behind its lock.
#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) entries: BTreeSet<UntrustedRange>,
    pub(crate) zero: ZeroSet,
    pub(crate) sequence: u64,
    /// Bytes of one copy; 0 = the array has no record region (made by an older build).
    pub(crate) copy_bytes: usize,
    /// Memory differs from the newest copy on disk.
    pub(crate) dirty: bool,
    /// Entries taken off, numbered, that the disk may still need (see the module comment).
    pub(crate) pending: Vec<(u64, Removed)>,
    /// The number the next taking off gets.
    pub(crate) removals: u64,
    /// The record as last written (or loaded): what every current member holds.
    pub(crate) durable: StateRecord,
}

impl Inner {
    /// Take `r` off in memory; the record keeps it until a flush after this.
    pub(crate) fn take_off(&mut self, r: Removed) {
        let removed = match r {
            Removed::Untrusted(e) => self.entries.remove(&e),
            Removed::Zero(s) => self.zero.remove(s),
        };
        if removed {
            self.pending.push((self.removals, r));
            self.removals += 1;
            self.dirty = true;
        }
    }

    /// The record to write: memory, with every entry taken off at or after `mark` still in it
    /// (`mark` 0: every pending one). Its sequence is the current one.
    pub(crate) fn record_since(&self, mark: u64) -> StateRecord {
        let mut entries = self.entries.clone();
        let mut zero = self.zero.clone();
        // Newest first: a range listed again and taken off again is re-added as it was last.
        for (i, r) in self.pending.iter().rev() {
            if *i < mark {
                continue;
            }
            match *r {
                Removed::Untrusted(e) => {
                    // Listed again since, or merged into a union: the union covers it.
                    let chunk =
                        |x: &UntrustedRange| (x.stripe, x.position) == (e.stripe, e.position);
                    if !entries
                        .iter()
                        .any(|x| chunk(x) && x.overlaps(e.offset, e.offset + e.len))
                    {
                        entries.insert(e);
                    }
                }
                Removed::Zero(s) => zero.insert(s, s + 1),
            }
        }
        StateRecord {
            sequence: self.sequence,
            entries: entries.into_iter().collect(),
            zero: zero.to_record(),
        }
    }

    /// `record` (from [`Inner::record_since`] with `mark`) is on every member now.
    pub(crate) fn written(&mut self, record: StateRecord, mark: Option<u64>) {
        if let Some(mark) = mark {
            self.pending.retain(|(i, _)| *i >= mark);
        }
        self.sequence = record.sequence;
        self.durable = record;
        self.dirty = !self.pending.is_empty();
    }

    /// The entries with `fresh` ranges listed too, and the ranges that are new. Ranges of one
    /// chunk stay disjoint (FORMAT.md §2.7): a fresh range already covered by listed ones adds
    /// nothing; one that overlaps listed ranges without being covered replaces them with their
    /// union, which keeps an expected CRC only if it is one listed range's own (the union of
    /// bytes vouched for at different times has none to verify it against).
    pub(crate) fn with_listed(
        &self,
        fresh: &[UntrustedRange],
    ) -> (BTreeSet<UntrustedRange>, Vec<UntrustedRange>) {
        let mut set = self.entries.clone();
        let mut added = Vec::new();
        for r in fresh {
            let chunk = |e: &UntrustedRange| (e.stripe, e.position) == (r.stripe, r.position);
            let hits: Vec<UntrustedRange> = set
                .iter()
                .filter(|e| chunk(e) && e.overlaps(r.offset, r.offset + r.len))
                .copied()
                .collect();
            let covered = {
                let mut at = r.offset;
                for e in &hits {
                    if e.offset <= at {
                        at = at.max(e.offset + e.len);
                    }
                }
                at >= r.offset + r.len
            };
            if covered {
                continue;
            }
            let lo = hits.iter().map(|e| e.offset).fold(r.offset, u32::min);
            let hi = hits
                .iter()
                .map(|e| e.offset + e.len)
                .fold(r.offset + r.len, u32::max);
            for e in &hits {
                set.remove(e);
            }
            let union = UntrustedRange {
                offset: lo,
                len: hi - lo,
                expected_crc: if hits.is_empty() {
                    r.expected_crc
                } else {
                    None
                },
                ..*r
            };
            set.insert(union);
            added.push(union);
        }
        (set, added)
    }
}

/// The listed ranges and zero stripes of one array.
pub(crate) struct UntrustedSet {
    inner: Mutex<Inner>,
    any: AtomicBool,
    any_zero: AtomicBool,
    /// [`Inner::removals`], readable without the lock (a flush's mark).
    removals: AtomicU64,
}

/// The set held for a change; on release the fast flags follow the entries.
pub(crate) struct Held<'a> {
    guard: MutexGuard<'a, Inner>,
    any: &'a AtomicBool,
    any_zero: &'a AtomicBool,
    removals: &'a AtomicU64,
}

impl std::ops::Deref for Held<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.any
            .store(!self.guard.entries.is_empty(), Ordering::Release);
        self.any_zero
            .store(!self.guard.zero.is_empty(), Ordering::Release);
        self.removals.store(self.guard.removals, Ordering::Release);
    }
}

impl UntrustedSet {
    /// An empty set for a record region of `region_bytes` (two copies).
    pub(crate) fn new(region_bytes: u64) -> UntrustedSet {
        UntrustedSet {
            inner: Mutex::new(Inner {
                copy_bytes: (region_bytes / 2) as usize,
                ..Inner::default()
            }),
            any: AtomicBool::new(false),
            any_zero: AtomicBool::new(false),
            removals: AtomicU64::new(0),
        }
    }

    /// Hold the set to change it (or to write it out consistently).
    pub(crate) fn hold(&self) -> Held<'_> {
        Held {
            guard: self.inner.lock().expect("lock"),
            any: &self.any,
            any_zero: &self.any_zero,
            removals: &self.removals,
        }
    }

    /// The number the next taking off gets: a flush's mark (one atomic load; a taking off
    /// counts once the set it changed is released).
    pub(crate) fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Whether `stripe` reads as zeros (one atomic load when no stripe does).
    pub(crate) fn is_zero(&self, stripe: StripeIx) -> bool {
        self.any_zero.load(Ordering::Acquire)
            && self.inner.lock().expect("lock").zero.contains(stripe.get())
    }

    /// Whether any stripe reads as zeros (one atomic load).
    pub(crate) fn any_zero(&self) -> bool {
        self.any_zero.load(Ordering::Acquire)
    }

    /// Nothing listed (one atomic load).
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Every listed range, in order.
    pub(crate) fn all(&self) -> Vec<UntrustedRange> {
        self.matching(|_| true)
    }

    /// The listed ranges of stripes `lo..hi`.
    pub(crate) fn in_stripes(&self, lo: u64, hi: u64) -> Vec<UntrustedRange> {
        self.matching(|e| (lo..hi).contains(&e.stripe))
    }

    /// The listed ranges of `stripe`.
    pub(crate) fn of_stripe(&self, stripe: StripeIx) -> Vec<UntrustedRange> {
        self.matching(|e| e.stripe == stripe.get())
    }

    /// The listed ranges of data chunk `pos` of `stripe` overlapping its bytes `lo..hi`.
    pub(crate) fn overlapping(
        &self,
        stripe: StripeIx,
        pos: Pos,
        lo: u32,
        hi: u32,
    ) -> Vec<UntrustedRange> {
        self.matching(|e| {
            e.stripe == stripe.get() && e.position as usize == pos.get() && e.overlaps(lo, hi)
        })
    }

    fn matching(&self, keep: impl Fn(&UntrustedRange) -> bool) -> Vec<UntrustedRange> {
        if self.is_empty() {
            return vec![];
        }
        let inner = self.inner.lock().expect("lock");
        inner.entries.iter().filter(|e| keep(e)).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(offset: u32, len: u32, crc: Option<u32>) -> UntrustedRange {
        UntrustedRange {
            stripe: 3,
            position: 1,
            offset,
            len,
            expected_crc: crc,
        }
    }

    #[test]
    fn listing_keeps_the_ranges_of_a_chunk_disjoint() {
        let mut inner = Inner::default();
        inner.entries.insert(range(0, 4096, Some(7)));
        inner.entries.insert(range(8192, 4096, Some(9)));
        // Covered: nothing new.
        let (set, added) = inner.with_listed(&[range(0, 4096, Some(1))]);
        assert!(added.is_empty() && set == inner.entries);
        // Overlapping both: one union without a CRC.
        let (set, added) = inner.with_listed(&[range(0, 12288, Some(5))]);
        assert_eq!(added, vec![range(0, 12288, None)]);
        assert_eq!(
            set.into_iter().collect::<Vec<_>>(),
            vec![range(0, 12288, None)]
        );
        // Beside them, or in another chunk: kept as it is.
        let other = UntrustedRange {
            position: 2,
            ..range(0, 4096, Some(3))
        };
        let (set, added) = inner.with_listed(&[range(4096, 4096, Some(4)), other]);
        assert_eq!(added, vec![range(4096, 4096, Some(4)), other]);
        assert_eq!(set.len(), 4);
        // What it builds always encodes and decodes (no overlap).
        let record = stripeguard_integrity::StateRecord {
            sequence: 1,
            entries: set.into_iter().collect(),
            zero: Vec::new(),
        };
        let b = record.encode(8192).unwrap();
        assert!(stripeguard_integrity::StateRecord::decode(&b).is_ok());
    }

    #[test]
    fn the_fast_flag_follows_every_change() {
        let s = UntrustedSet::new(16384);
        assert!(s.is_empty() && s.all().is_empty());
        let r = UntrustedRange {
            stripe: 3,
            position: 1,
            offset: 4096,
            len: 4096,
            expected_crc: None,
        };
        s.hold().entries.insert(r);
        assert!(!s.is_empty());
        let (three, p0, p1) = (StripeIx::new(3), Pos::new(0), Pos::new(1));
        assert_eq!(s.overlapping(three, p1, 8191, 8192), vec![r]);
        assert!(s.overlapping(three, p1, 0, 4096).is_empty());
        assert!(s.overlapping(three, p0, 0, 16384).is_empty());
        assert_eq!(s.of_stripe(three), vec![r]);
        s.hold().entries.remove(&r);
        assert!(s.is_empty());
    }
}
