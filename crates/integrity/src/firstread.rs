//! The first-read map (Li & Lee section IV-B): one bit per data chunk, set once the chunk has been
//! read (and checked) since it was last written. A chunk whose bit is clear is in **first-read**
//! state: its next read may see a lost or torn write and must be cross-checked.
//!
//! The array's chunks are grouped into zones of `zone_chunks` bits; at most `max_zones` zone
//! bitmaps are resident, replaced least-recently-used. An evicted zone reads as all first-read,
//! which is always safe (it can only cause an extra cross-check, never a missed one). Memory is
//! bounded by `max_zones * zone_chunks / 8` bytes whatever the array size or trace length.

use lru::LruCache;

/// First-read state as the planner needs it. [`FirstReadMap`] is the engine's; the simulator
/// keeps every scheme's state in one interleaved map so one cache line serves all schemes.
pub trait ReadState {
    /// Whether the next read of data chunk `chunk` is a first-read.
    fn is_first_read(&mut self, chunk: u64) -> bool;
    /// The chunk was read and checked.
    fn mark_read(&mut self, chunk: u64);
    /// The chunk was written.
    fn mark_written(&mut self, chunk: u64);
}

impl ReadState for FirstReadMap {
    fn is_first_read(&mut self, chunk: u64) -> bool {
        FirstReadMap::is_first_read(self, chunk)
    }
    fn mark_read(&mut self, chunk: u64) {
        FirstReadMap::mark_read(self, chunk)
    }
    fn mark_written(&mut self, chunk: u64) {
        FirstReadMap::mark_written(self, chunk)
    }
}
use std::num::NonZeroUsize;

/// Zoned, bounded first-read bitmap.
#[derive(Debug)]
pub struct FirstReadMap {
    zone_chunks: u64,
    max_zones: usize,
    /// Resident zone → slot in `slots`, in least-recently-used order.
    zones: LruCache<u64, usize>,
    slots: Vec<Box<[u64]>>,
    /// The zone touched last and its slot: consecutive accesses to one zone skip the LRU.
    last: Option<(u64, usize)>,
}

impl FirstReadMap {
    /// A map with zones of `zone_chunks` chunks (rounded up to a multiple of 64) and at most
    /// `max_zones` resident zones (at least 1).
    pub fn new(zone_chunks: u64, max_zones: usize) -> Self {
        let max_zones = max_zones.max(1);
        FirstReadMap {
            zone_chunks: zone_chunks.max(64).div_ceil(64) * 64,
            max_zones,
            zones: LruCache::new(NonZeroUsize::new(max_zones).expect("at least 1")),
            slots: Vec::new(),
            last: None,
        }
    }

    /// A map holding at most `bytes` of bitmap, in zones of 32 Ki chunks (4 KiB each).
    pub fn with_memory_bytes(bytes: u64) -> Self {
        let zone_chunks = 32 * 1024;
        let zone_bytes = zone_chunks / 8;
        let zones = usize::try_from((bytes / zone_bytes).max(1)).unwrap_or(usize::MAX);
        Self::new(zone_chunks, zones)
    }

    /// Upper bound of the bitmap memory in bytes.
    pub fn memory_bound_bytes(&self) -> u64 {
        self.max_zones as u64 * self.zone_chunks / 8
    }

    /// Zones resident now.
    pub fn resident_zones(&self) -> usize {
        self.zones.len()
    }

    fn split(&self, chunk: u64) -> (u64, usize, u64) {
        let zone = chunk / self.zone_chunks;
        let bit = chunk % self.zone_chunks;
        (zone, (bit / 64) as usize, 1u64 << (bit % 64))
    }

    /// The slot of a resident zone (refreshing its recency), or `None`.
    fn find(&mut self, zone: u64) -> Option<usize> {
        if let Some((z, slot)) = self.last {
            if z == zone {
                return Some(slot);
            }
        }
        let slot = *self.zones.get(&zone)?;
        self.last = Some((zone, slot));
        Some(slot)
    }

    /// Whether the next read of global data chunk `chunk` is a first-read.
    pub fn is_first_read(&mut self, chunk: u64) -> bool {
        let (zone, word, mask) = self.split(chunk);
        match self.find(zone) {
            Some(slot) => self.slots[slot][word] & mask == 0,
            None => true,
        }
    }

    /// The chunk was read and checked: later reads are subsequent-reads.
    pub fn mark_read(&mut self, chunk: u64) {
        let (zone, word, mask) = self.split(chunk);
        let slot = match self.find(zone) {
            Some(slot) => slot,
            None => {
                let words = (self.zone_chunks / 64) as usize;
                let slot = if self.slots.len() < self.max_zones {
                    self.slots.push(vec![0u64; words].into_boxed_slice());
                    self.slots.len() - 1
                } else {
                    // Evict the least recently used zone: it reads as first-read from now on.
                    let (_, slot) = self.zones.pop_lru().expect("a full map has a zone");
                    self.slots[slot].fill(0);
                    slot
                };
                self.zones.put(zone, slot);
                self.last = Some((zone, slot));
                slot
            }
        };
        self.slots[slot][word] |= mask;
    }

    /// The chunk was written: its next read is a first-read again.
    pub fn mark_written(&mut self, chunk: u64) {
        let (zone, word, mask) = self.split(chunk);
        if let Some(slot) = self.find(zone) {
            self.slots[slot][word] &= !mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_then_write_cycle() {
        let mut m = FirstReadMap::new(128, 4);
        assert!(m.is_first_read(5));
        m.mark_read(5);
        assert!(!m.is_first_read(5));
        assert!(m.is_first_read(6));
        m.mark_written(5);
        assert!(m.is_first_read(5));
    }

    #[test]
    fn eviction_forgets_to_first_read_and_bounds_memory() {
        let mut m = FirstReadMap::new(64, 2);
        m.mark_read(0); // zone 0
        m.mark_read(64); // zone 1
        assert!(!m.is_first_read(0)); // zone 0 now most recent
        m.mark_read(128); // zone 2 evicts zone 1
        assert_eq!(m.resident_zones(), 2);
        assert!(m.is_first_read(64), "evicted zone must read as first-read");
        assert!(!m.is_first_read(0));
        assert!(!m.is_first_read(128));
        assert_eq!(m.memory_bound_bytes(), 16);
    }
}
