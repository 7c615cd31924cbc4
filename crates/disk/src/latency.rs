//! A disk that waits: every read or write takes at least `io`, every flush `flush` (a stand-in
//! for a real device's latency in benchmarks, where the page cache would make flushes free).

use crate::{Disk, DiskError, DiskRef};
use std::time::Duration;

/// Latency-injecting wrapper.
pub struct LatencyDisk {
    inner: DiskRef,
    io: Duration,
    flush: Duration,
}

impl LatencyDisk {
    /// Wrap `inner`: `io` per read or write, `flush` per flush.
    pub fn new(inner: DiskRef, io: Duration, flush: Duration) -> Self {
        LatencyDisk { inner, io, flush }
    }
}

impl Disk for LatencyDisk {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn device(&self) -> Option<String> {
        self.inner.device()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn measure_size(&self) -> u64 {
        self.inner.measure_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        std::thread::sleep(self.io);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        std::thread::sleep(self.io);
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        std::thread::sleep(self.flush);
        self.inner.flush()
    }
    /// Its I/O waits: units of one request should wait together, as on a real device.
    fn prefers_parallel(&self) -> bool {
        true
    }
    fn mem_align(&self) -> usize {
        self.inner.mem_align()
    }
    fn try_lock(&self, exclusive: bool) -> Result<(), DiskError> {
        self.inner.try_lock(exclusive)
    }
}
