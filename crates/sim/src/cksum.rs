//! Kroth & Yang's checksum-chunk layout (RAID4C / RAID5C, `papers/001_…`) in the simulator:
//! each stripe gives one more chunk to the CRC-32C of every data and parity chunk of the stripe,
//! and a stripe cache keeps recently used checksum chunks in memory (LRU; dirty ones are written
//! back when evicted, or at the end of the run, as a flush would).
//!
//! What it adds to bare RAID (the `none` lane's count), in the paper's unit (one chunk = one
//! I/O), per stripe piece of a request:
//! - a read verifies the chunks it reads against the stripe's checksum chunk: one read of the
//!   checksum chunk unless it is cached;
//! - a write updates the CRCs of the data and parity chunks it writes: the checksum chunk is read
//!   unless cached, and written — at once without a cache, on eviction (or the final flush) with
//!   one, so writes to a stripe that stays cached cost one checksum-chunk write in all.
//!
//! The engine runs the scheme (`create --scheme checksum-chunk`, crates/engine/src/ckchunk.rs)
//! with the same stripe cache; its data and parity I/O is `none`'s plan, and its checksum-member
//! I/O equals this model's count exactly, with the cache off and on (crates/sim/tests/
//! agreement.rs) — which is why this model, not a planner lane, gives the `ck-chunk` rows.

use crate::Request;
use lru::LruCache;
use serde::Serialize;
use std::num::NonZeroUsize;
use stripeguard_plan::{Geometry, Op};

/// Extra I/O of the checksum chunk.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CkCounts {
    /// Cache capacity in checksum chunks (0 = no cache).
    pub cache_chunks: usize,
    /// Checksum-chunk reads.
    pub reads: u64,
    /// Checksum-chunk writes.
    pub writes: u64,
    /// Pieces whose checksum chunk was in the cache.
    pub hits: u64,
    /// Pieces that needed it.
    pub lookups: u64,
}

/// The checksum-chunk counter for one cache size.
pub struct CkSim {
    geometry: Geometry,
    cache: Option<LruCache<u64, bool>>,
    counts: CkCounts,
}

impl CkSim {
    /// A counter with a cache of `cache_chunks` checksum chunks (0 = none).
    pub fn new(geometry: Geometry, cache_chunks: usize) -> CkSim {
        CkSim {
            geometry,
            cache: NonZeroUsize::new(cache_chunks).map(LruCache::new),
            counts: CkCounts {
                cache_chunks,
                ..CkCounts::default()
            },
        }
    }

    /// Count one request (within capacity).
    pub fn replay(&mut self, r: Request) {
        if r.len == 0 {
            return;
        }
        let sd = self.geometry.stripe_data_bytes();
        let first = r.offset / sd;
        let last = (r.offset + r.len - 1) / sd;
        for stripe in first..=last {
            // A write of the whole stripe rewrites every entry: no read of the old table.
            let full = r.op == Op::Write
                && r.offset <= stripe * sd
                && r.offset + r.len >= (stripe + 1) * sd;
            self.piece(stripe, r.op == Op::Write, full);
        }
    }

    fn piece(&mut self, stripe: u64, write: bool, full: bool) {
        let c = &mut self.counts;
        c.lookups += 1;
        let Some(cache) = &mut self.cache else {
            c.reads += !full as u64;
            c.writes += write as u64;
            return;
        };
        match cache.get_mut(&stripe) {
            Some(dirty) => {
                c.hits += 1;
                *dirty |= write;
            }
            None => {
                c.reads += !full as u64;
                if let Some((_, was_dirty)) = cache.push(stripe, write) {
                    c.writes += was_dirty as u64;
                }
            }
        }
    }

    /// The counts, with every dirty cached checksum chunk written back (the final flush).
    pub fn report(&self) -> CkCounts {
        let mut c = self.counts;
        if let Some(cache) = &self.cache {
            c.writes += cache.iter().filter(|(_, &d)| d).count() as u64;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g() -> Geometry {
        Geometry {
            k: 4,
            m: 1,
            chunk_bytes: 4096,
            stripes: 100,
        }
    }

    fn w(offset: u64) -> Request {
        Request {
            op: Op::Write,
            offset,
            len: 4096,
        }
    }

    #[test]
    fn without_a_cache_every_piece_reads_and_every_write_writes_the_checksum_chunk() {
        let mut s = CkSim::new(g(), 0);
        for i in 0..10 {
            s.replay(w(i * 4096));
        }
        s.replay(Request {
            op: Op::Read,
            offset: 0,
            len: 3 * 16384,
        });
        assert_eq!(
            s.report(),
            CkCounts {
                cache_chunks: 0,
                reads: 13,
                writes: 10,
                hits: 0,
                lookups: 13
            }
        );
    }

    #[test]
    fn a_cache_absorbs_repeated_writes_to_a_stripe_and_writes_it_back_once() {
        let mut s = CkSim::new(g(), 2);
        // Ten writes into stripe 0: one read, one write-back at the end.
        for i in 0..10 {
            s.replay(w((i % 4) * 4096));
        }
        let r = s.report();
        assert_eq!((r.reads, r.writes, r.hits), (1, 1, 9));
        // Two more stripes evict stripe 0 (dirty: written back) and stripe 1 (dirty).
        s.replay(w(16384));
        s.replay(w(2 * 16384));
        s.replay(w(3 * 16384));
        let r = s.report();
        assert_eq!((r.reads, r.writes), (4, 4));
    }
}
