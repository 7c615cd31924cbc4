//! Members in memory.

use crate::{check_range, Disk, DiskError};
use std::sync::RwLock;

/// A disk held in memory. Reads share a lock; writes take it exclusively.
#[derive(Debug)]
pub struct MemDisk {
    name: String,
    bytes: RwLock<Vec<u8>>,
}

impl MemDisk {
    /// A zero-filled disk of `size` bytes.
    pub fn new(name: impl Into<String>, size: u64) -> Self {
        let size = usize::try_from(size).expect("a memory disk's size fits in memory");
        Self::from_bytes(name, vec![0; size])
    }

    /// A disk holding `bytes`.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Self {
        MemDisk {
            name: name.into(),
            bytes: RwLock::new(bytes),
        }
    }

    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().expect("lock").clone()
    }

    /// Change the contents directly (tests: corrupt the media behind the engine's back).
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        f(&mut self.bytes.write().expect("lock"))
    }
}

impl Disk for MemDisk {
    fn name(&self) -> &str {
        &self.name
    }
    fn size_bytes(&self) -> u64 {
        self.bytes.read().expect("lock").len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let b = self.bytes.read().expect("lock");
        check_range(&self.name, "read", offset, buf.len(), b.len() as u64)?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked above to be within the image, a Vec in memory"
        )]
        let o = offset as usize;
        buf.copy_from_slice(&b[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let mut b = self.bytes.write().expect("lock");
        check_range(&self.name, "write", offset, buf.len(), b.len() as u64)?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked above to be within the image, a Vec in memory"
        )]
        let o = offset as usize;
        b[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> Result<(), DiskError> {
        Ok(())
    }
}
