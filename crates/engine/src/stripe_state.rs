//! The in-memory side of the stripe-state record (FORMAT.md §2.1f): the listed untrusted ranges,
//! the record's sequence, and whether memory is ahead of the disk. It owns its lock and knows
//! nothing of the array; `untrusted.rs` does the I/O and the rules around it.
//!
//! Every read and write piece asks whether its range is listed. Nearly always nothing is, so
//! that answer comes from one atomic load, without the lock or an allocation; the flag is kept
//! equal to "the set is not empty" by the guard that every change goes through.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
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
    pub(crate) fn of_stripe(&self, stripe: u64) -> Vec<UntrustedRange> {
        self.matching(|e| e.stripe == stripe)
    }

    /// The listed ranges of data chunk `pos` of `stripe` overlapping its bytes `lo..hi`.
    pub(crate) fn overlapping(
        &self,
        stripe: u64,
        pos: usize,
        lo: u32,
        hi: u32,
    ) -> Vec<UntrustedRange> {
        self.matching(|e| e.stripe == stripe && e.position as usize == pos && e.overlaps(lo, hi))
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
        assert_eq!(s.overlapping(3, 1, 8191, 8192), vec![r]);
        assert!(s.overlapping(3, 1, 0, 4096).is_empty());
        assert!(s.overlapping(3, 0, 0, 16384).is_empty());
        assert_eq!(s.of_stripe(3), vec![r]);
        s.hold().entries.remove(&r);
        assert!(s.is_empty());
    }
}
