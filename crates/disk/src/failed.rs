//! A member that is not there.

use crate::{Disk, DiskError};

/// Stands in for a member that could not be opened (missing file, unplugged device): every I/O
/// fails with [`DiskError::Failed`], so assembly counts it against the array's redundancy.
#[derive(Debug)]
pub struct FailedDisk {
    name: String,
    why: String,
}

impl FailedDisk {
    /// A failed member called `name`, failed because `why`.
    pub fn new(name: impl Into<String>, why: impl Into<String>) -> Self {
        FailedDisk {
            name: name.into(),
            why: why.into(),
        }
    }

    fn err(&self) -> DiskError {
        DiskError::Failed {
            name: self.name.clone(),
            why: self.why.clone(),
        }
    }
}

impl Disk for FailedDisk {
    fn name(&self) -> &str {
        &self.name
    }
    fn size_bytes(&self) -> u64 {
        0
    }
    fn read_at(&self, _: u64, _: &mut [u8]) -> Result<(), DiskError> {
        Err(self.err())
    }
    fn write_at(&self, _: u64, _: &[u8]) -> Result<(), DiskError> {
        Err(self.err())
    }
    fn flush(&self) -> Result<(), DiskError> {
        Err(self.err())
    }
}
