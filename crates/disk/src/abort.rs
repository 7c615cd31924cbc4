//! A disk whose process dies at a chosen write: the `n`th write through any disk sharing one
//! countdown aborts the process before it lands (the writes before it have landed, in the page
//! cache, as a `kill -9` leaves them). The crash tests use it to stop a writer between a piece's
//! data and parity writes deterministically, which a timed `kill -9` hits only by luck.

use crate::{Disk, DiskError, DiskRef};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A wrapper that aborts the process at the countdown's last write.
pub struct AbortDisk {
    inner: DiskRef,
    left: Arc<AtomicU64>,
}

impl AbortDisk {
    /// Wrap `inner`; `left` counts the writes still allowed, over every disk sharing it.
    pub fn new(inner: DiskRef, left: Arc<AtomicU64>) -> Self {
        AbortDisk { inner, left }
    }
}

impl Disk for AbortDisk {
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
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 1 {
            std::process::abort();
        }
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.inner.flush()
    }
    fn prefers_parallel(&self) -> bool {
        self.inner.prefers_parallel()
    }
    fn mem_align(&self) -> usize {
        self.inner.mem_align()
    }
    fn try_lock(&self, exclusive: bool) -> Result<(), DiskError> {
        self.inner.try_lock(exclusive)
    }
}
