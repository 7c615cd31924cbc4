use std::path::PathBuf;

/// Why a shard operation failed. Repaired damage is reported, not returned as an error.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Bad parameters.
    #[error("{0}")]
    Code(#[from] stripeguard_codes::CodeError),
    /// A directory that should exist does not.
    #[error("{0}: no such directory")]
    NoDirectory(PathBuf),
    /// Nothing that looks like a shard.
    #[error("{0}: no shard files (shard-NNN.sgs) found")]
    NoShards(PathBuf),
    /// No shard has a readable header, so the geometry is unknown.
    #[error("{0}: no shard has a readable header; the geometry cannot be recovered")]
    NoHeader(PathBuf),
    /// Shards of different encodings in one directory.
    #[error("{dir}: shards from {sets} different encodings are mixed ({detail}); move the foreign ones away")]
    MixedSets {
        /// The directory.
        dir: PathBuf,
        /// How many set ids.
        sets: usize,
        /// Which files belong to which set.
        detail: String,
    },
    /// Would overwrite something.
    #[error("{0} already exists; pass --force to replace it")]
    Exists(PathBuf),
    /// A stripe cannot be rebuilt.
    #[error("stripe {stripe} (file bytes {offset}..): {reason}")]
    Unrecoverable {
        /// Stripe number.
        stripe: u64,
        /// Its first byte in the file.
        offset: u64,
        /// What is missing.
        reason: String,
    },
    /// Bad option values.
    #[error("{0}")]
    Invalid(String),
}

impl ShardError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ShardError {
        let path = path.into();
        move |source| ShardError::Io { path, source }
    }
}
