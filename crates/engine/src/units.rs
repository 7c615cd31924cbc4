//! Unit I/O resources: recycled unit buffers aligned for direct I/O, the pool of threads one
//! request's member I/O is issued from (and when to use it), and the appendix cache. It knows no
//! array; the array's unit reads and writes use it.
//!
//! - **Buffers.** Allocating a fresh chunk-sized buffer per I/O makes the allocator map and unmap
//!   pages on every request (measured: hybrid1 full-stripe writes at 0.13x of none instead of
//!   0.66x), so unit buffers are recycled (at most KEEP_STRIPES stripes' worth kept).
//! - **Threads.** With every member a file or device, a fixed pool of one thread per member,
//!   made once (a thread spawned per unit cost more than a 4 KiB direct I/O), overlaps one
//!   request's member I/O. With several requests at once (a queue depth above 1) they already
//!   overlap, and the pool's hand-offs and idle spinning cost more than they save (measured:
//!   docs/PERFORMANCE.md), so each request then issues its I/O itself ([`Units::pool_for`]).
//! - **Appendix cache.** Appendices this process verified or wrote, by (stripe, position): a
//!   read whose appendix is here reads only its blocks (FORMAT.md §2.9.1, "appendix cache").

use crate::num::{Pos, StripeIx};
use crate::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use stripeguard_disk::AlignedBuf;

/// Stripes' worth of unit buffers kept for reuse: two requests of a 16-stripe write batch in
/// flight (`stripeguard write`) with their old units, so a sequential stream does not allocate
/// (and zero) fresh buffers on every request.
const KEEP_STRIPES: usize = 40;

/// The most memory the appendix cache's entries may hold.
const APPENDIX_CACHE_BYTES: usize = 16 << 20;

/// Verified appendices by (stripe, position), least recently used dropped first.
type AppendixCache = lru::LruCache<(StripeIx, Pos), Arc<[u8]>>;

pub(crate) struct Units {
    unit_bytes: usize,
    /// Alignment of unit buffers: the largest any member needs for direct I/O.
    mem_align: usize,
    /// Buffers kept at most.
    keep: usize,
    free: Mutex<Vec<AlignedBuf>>,
    threads: Option<rayon::ThreadPool>,
    /// User requests in progress.
    callers: AtomicUsize,
    /// Off (`None`) until [`Units::enable_appendix_cache`].
    appendices: Mutex<Option<AppendixCache>>,
}

impl Units {
    /// For units of `unit_bytes` aligned to `mem_align`, `members` members, issuing from
    /// `threads` when given.
    pub(crate) fn new(
        unit_bytes: usize,
        mem_align: usize,
        members: usize,
        threads: Option<rayon::ThreadPool>,
    ) -> Units {
        Units {
            unit_bytes,
            mem_align,
            keep: KEEP_STRIPES * members,
            free: Mutex::new(Vec::new()),
            threads,
            callers: AtomicUsize::new(0),
            appendices: Mutex::new(None),
        }
    }

    /// The alignment every unit buffer has.
    pub(crate) fn mem_align(&self) -> usize {
        self.mem_align
    }

    /// A unit-sized buffer with unspecified contents (callers overwrite all of it), aligned for
    /// direct I/O on every member, so no member I/O goes through a bounce copy.
    pub(crate) fn buf(&self) -> AlignedBuf {
        match self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            Some(b) => b,
            None => AlignedBuf::zeroed(self.unit_bytes, self.mem_align),
        }
    }

    /// Return unit buffers (bounded: at most KEEP_STRIPES stripes' worth are kept).
    pub(crate) fn recycle(&self, bufs: impl IntoIterator<Item = AlignedBuf>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        for b in bufs {
            if b.len() == self.unit_bytes && free.len() < self.keep {
                free.push(b);
            }
        }
    }

    /// Whether member I/O may go through the thread pool at all (every member a file or
    /// device).
    pub(crate) fn parallel(&self) -> bool {
        self.threads.is_some()
    }

    /// The thread pool for `jobs` I/Os of one request: only for two or more, and only while
    /// this request is alone (see the file's comment).
    pub(crate) fn pool_for(&self, jobs: usize) -> Option<&rayon::ThreadPool> {
        self.threads
            .as_ref()
            .filter(|_| jobs >= 2 && self.callers.load(Ordering::Relaxed) <= 1)
    }

    /// The thread pool for `jobs` I/Os that are not one request's (a flush of every member, a
    /// metadata write): whenever there are two or more.
    pub(crate) fn pool_for_all(&self, jobs: usize) -> Option<&rayon::ThreadPool> {
        self.threads.as_ref().filter(|_| jobs >= 2)
    }

    /// A user request begins; [`Units::leave`] when it ends.
    pub(crate) fn enter(&self) {
        self.callers.fetch_add(1, Ordering::Relaxed);
    }

    /// A user request ended.
    pub(crate) fn leave(&self) {
        self.callers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Keep up to `entries` appendices of `appendix_bytes` each, at most 16 MiB of them; 0
    /// turns the cache off.
    pub(crate) fn enable_appendix_cache(&self, entries: usize, appendix_bytes: usize) {
        let entries = entries.min(APPENDIX_CACHE_BYTES / appendix_bytes.max(1));
        *self
            .appendices
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            std::num::NonZeroUsize::new(entries).map(lru::LruCache::new);
    }

    /// Forget every cached appendix (a member failed or was replaced).
    pub(crate) fn clear_appendices(&self) {
        if let Some(c) = self
            .appendices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            c.clear();
        }
    }

    /// The cached appendix of unit `pos` of `stripe`.
    pub(crate) fn cached_appendix(&self, stripe: StripeIx, pos: Pos) -> Option<Arc<[u8]>> {
        self.appendices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()?
            .get(&(stripe, pos))
            .cloned()
    }

    /// Keep `bytes` as unit `pos` of `stripe`'s appendix (verified or just written).
    pub(crate) fn remember_appendix(&self, stripe: StripeIx, pos: Pos, bytes: &[u8]) {
        if let Some(c) = self
            .appendices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            c.put((stripe, pos), bytes.into());
        }
    }

    /// Forget the appendices of `positions` of `stripe` (they are being rewritten).
    pub(crate) fn forget_appendices(&self, stripe: StripeIx, positions: impl Iterator<Item = Pos>) {
        if let Some(c) = self
            .appendices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            for p in positions {
                c.pop(&(stripe, p));
            }
        }
    }
}
