//! Kroth & Yang's stripe cache for the checksum-chunk scheme: checksum tables by stripe, least
//! recently used dropped first, each with whether it is newer than the table on the checksum
//! member (dirty). Bounded by count and by bytes (16 MiB of tables). It knows no array: the
//! caller writes what it hands back ([`CkCache::put`]'s evicted dirty table,
//! [`CkCache::write_back`]'s dirty ones) while it holds the cache's lock, so no newer copy of
//! a table can be written meanwhile.

use crate::num::StripeIx;
use stripeguard_integrity::CkTable;

/// Tables the stripe cache keeps by default (`Array::set_checksum_cache`).
pub const CK_CACHE_TABLES: usize = 4096;

/// The most memory the stripe cache's tables may hold.
const CK_CACHE_BYTES: usize = 16 << 20;

/// The stripe cache (off when it may hold no table).
pub(crate) struct CkCache {
    lru: Option<lru::LruCache<StripeIx, (CkTable, bool)>>,
}

impl CkCache {
    /// A cache of at most `tables` tables.
    pub(crate) fn new(tables: usize) -> CkCache {
        CkCache {
            lru: std::num::NonZeroUsize::new(tables).map(lru::LruCache::new),
        }
    }

    /// A cache of at most `tables` tables of `table_bytes` each, and at most 16 MiB.
    pub(crate) fn bounded(tables: usize, table_bytes: usize) -> CkCache {
        CkCache::new(tables.min(CK_CACHE_BYTES / table_bytes.max(1)))
    }

    /// Whether it holds tables at all.
    pub(crate) fn is_on(&self) -> bool {
        self.lru.is_some()
    }

    /// The table of `stripe`, made the most recently used.
    pub(crate) fn get(&mut self, stripe: StripeIx) -> Option<CkTable> {
        self.lru.as_mut()?.get(&stripe).map(|(t, _)| t.clone())
    }

    /// The table of `stripe` and whether it is dirty, leaving the order alone.
    pub(crate) fn peek(&self, stripe: StripeIx) -> Option<(CkTable, bool)> {
        self.lru.as_ref()?.peek(&stripe).cloned()
    }

    /// Put `t` (a dirty entry stays dirty when a clean copy of the same table comes by). Returns
    /// a dirty table of another stripe it evicted: the caller writes it before letting go of
    /// the lock. Without a cache nothing is kept (the caller writes a dirty `t` itself).
    pub(crate) fn put(
        &mut self,
        stripe: StripeIx,
        t: CkTable,
        dirty: bool,
    ) -> Option<(StripeIx, CkTable)> {
        let l = self.lru.as_mut()?;
        let dirty = dirty || l.peek(&stripe).is_some_and(|(_, d)| *d);
        match l.push(stripe, (t, dirty)) {
            Some((old_stripe, (old, true))) if old_stripe != stripe => Some((old_stripe, old)),
            _ => None,
        }
    }

    /// Put `t` as it is on the checksum member (clean), whatever was cached.
    pub(crate) fn put_clean(&mut self, stripe: StripeIx, t: CkTable) {
        if let Some(l) = self.lru.as_mut() {
            l.put(stripe, (t, false));
        }
    }

    /// Hand every dirty table to `write`; each one written is clean from then on (the first
    /// failure stops, leaving the rest dirty).
    pub(crate) fn write_back<E>(
        &mut self,
        mut write: impl FnMut(StripeIx, &CkTable) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(l) = self.lru.as_mut() else {
            return Ok(());
        };
        for (&s, (t, dirty)) in l.iter_mut() {
            if *dirty {
                write(s, t)?;
                *dirty = false;
            }
        }
        Ok(())
    }

    /// Forget every clean table (a member failed or was replaced: they are re-read).
    pub(crate) fn clear_clean(&mut self) {
        if let Some(l) = self.lru.as_mut() {
            let clean: Vec<StripeIx> = l
                .iter()
                .filter(|(_, (_, d))| !*d)
                .map(|(s, _)| *s)
                .collect();
            for s in clean {
                l.pop(&s);
            }
        }
    }
}
