//! The in-memory side of the stripe-state record (FORMAT.md §2.7): the listed untrusted ranges,
//! the record's sequence, and whether memory is ahead of the disk. It owns its lock and knows
//! nothing of the array; `untrusted.rs` does the I/O and the rules around it.
//!
//! Every read and write piece asks whether its range is listed. Nearly always nothing is, so
//! that answer comes from one atomic load, without the lock or an allocation; the flag is kept
//! equal to "the set is not empty" by the guard that every change goes through.

use crate::num::{Pos, StripeIx};
use crate::sync::{Mutex, MutexGuard};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use stripeguard_integrity::UntrustedRange;

/// The record's state behind its lock.
#[derive(Default)]
pub(crate) struct Inner {
    pub(crate) entries: BTreeSet<UntrustedRange>,
    pub(crate) sequence: u64,
    /// Bytes of one copy; 0 = the array has no record region (made by an older build).
    pub(crate) copy_bytes: usize,
    /// Entries were taken off in memory since the record was last written.
    pub(crate) dirty: bool,
}

impl Inner {
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

/// The listed ranges of one array.
pub(crate) struct UntrustedSet {
    inner: Mutex<Inner>,
    any: AtomicBool,
}

/// The set held for a change; on release the fast flag follows the entries.
pub(crate) struct Held<'a> {
    guard: MutexGuard<'a, Inner>,
    any: &'a AtomicBool,
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
        }
    }

    /// Hold the set to change it (or to write it out consistently).
    pub(crate) fn hold(&self) -> Held<'_> {
        Held {
            guard: self.inner.lock().expect("lock"),
            any: &self.any,
        }
    }

    /// Nothing listed (one atomic load).
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Every listed range, in order.
    pub(crate) fn all(&self) -> Vec<UntrustedRange> {
        self.matching(|_| true)
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
