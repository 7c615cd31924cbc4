use stripeguard_disk::DiskError;
use stripeguard_integrity::SuperblockError;

/// Why an array operation failed. A repaired corruption is an [`crate::events::Event`], not an error.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A member could not be used.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// Bad parameters for create.
    #[error("{0}")]
    Config(String),
    /// A member's superblock is unusable.
    #[error("{member}: {source}")]
    Superblock {
        /// The member's name.
        member: String,
        /// Why.
        source: SuperblockError,
    },
    /// The members do not form one array.
    #[error("{0}")]
    Assemble(String),
    /// Members assembled and written apart (split brain): refused, nothing written.
    #[error("{0}")]
    SplitBrain(String),
    /// A request outside the array.
    #[error("request of {len} bytes at offset {offset} is beyond the array's capacity of {capacity} bytes")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Capacity.
        capacity: u64,
    },
    /// More damage in a stripe than the code and the metadata can repair.
    #[error("stripe {stripe} is unrecoverable: {reason}")]
    Unrecoverable {
        /// The stripe.
        stripe: u64,
        /// What was found.
        reason: String,
    },
    /// More members failed than the code tolerates.
    #[error("{failed} members have failed but the array survives at most {tolerated}; nothing more can be read or written safely")]
    TooManyFailed {
        /// Failed members.
        failed: usize,
        /// `m`.
        tolerated: usize,
    },
    /// The erasure code refused (a bug or impossible geometry).
    #[error(transparent)]
    Code(#[from] stripeguard_codes::CodeError),
}
