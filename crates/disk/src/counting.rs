//! Counting wrapper.

use crate::{Disk, DiskError, DiskRef};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// I/O counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IoCounts {
    /// Read calls.
    pub reads: u64,
    /// Write calls.
    pub writes: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Flushes.
    pub flushes: u64,
    /// Reads below the data offset (superblocks, intent record, checkpoints): not in `reads`.
    pub metadata_reads: u64,
    /// Writes below the data offset: not in `writes`.
    pub metadata_writes: u64,
}

/// Counts every call that reaches the inner disk (one call = one disk I/O).
pub struct CountingDisk {
    inner: DiskRef,
    data_offset: u64,
    data_end: u64,
    metadata_reads: AtomicU64,
    metadata_writes: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
}

impl CountingDisk {
    /// Wrap `inner`.
    pub fn new(inner: DiskRef) -> Self {
        CountingDisk {
            inner,
            data_offset: 0,
            data_end: u64::MAX,
            metadata_reads: AtomicU64::new(0),
            metadata_writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// Count I/O that starts below `offset` (the metadata area) apart from the data I/O.
    pub fn with_data_offset(mut self, offset: u64) -> Self {
        self.data_offset = offset;
        self
    }

    /// Count I/O that starts at or after `end` (the journal after the data area) as metadata
    /// too.
    pub fn with_data_end(mut self, end: u64) -> Self {
        self.data_end = end;
        self
    }

    fn is_metadata(&self, offset: u64) -> bool {
        offset < self.data_offset || offset >= self.data_end
    }

    /// The counts so far.
    pub fn counts(&self) -> IoCounts {
        IoCounts {
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            metadata_reads: self.metadata_reads.load(Relaxed),
            metadata_writes: self.metadata_writes.load(Relaxed),
        }
    }

    /// Zero the counters.
    pub fn reset(&self) {
        for c in [
            &self.reads,
            &self.writes,
            &self.read_bytes,
            &self.write_bytes,
            &self.flushes,
            &self.metadata_reads,
            &self.metadata_writes,
        ] {
            c.store(0, Relaxed);
        }
    }
}

impl Disk for CountingDisk {
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
        if self.is_metadata(offset) {
            self.metadata_reads.fetch_add(1, Relaxed);
            return self.inner.read_at(offset, buf);
        }
        self.reads.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(buf.len() as u64, Relaxed);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        if self.is_metadata(offset) {
            self.metadata_writes.fetch_add(1, Relaxed);
            return self.inner.write_at(offset, buf);
        }
        self.writes.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(buf.len() as u64, Relaxed);
        self.inner.write_at(offset, buf)
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
    fn flush(&self) -> Result<(), DiskError> {
        self.flushes.fetch_add(1, Relaxed);
        self.inner.flush()
    }
}
