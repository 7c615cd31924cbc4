use stripeguard_gf::KernelError;

/// What a code operation could not do. A located-and-repaired error is not an `Err`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    /// The geometry is not one this code supports.
    #[error("invalid geometry k={k}, m={m}: {reason}")]
    Geometry {
        /// Data chunks asked for.
        k: usize,
        /// Parity chunks asked for.
        m: usize,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A slice of chunks has the wrong number of entries.
    #[error("expected {expected} {what} chunks, got {got}")]
    ChunkCount {
        /// "data", "parity" or "total".
        what: &'static str,
        /// How many the code needs.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// Chunks of one stripe must all have the same length.
    #[error("chunk {index} is {got} bytes, expected {expected}")]
    ChunkLength {
        /// The offending chunk.
        index: usize,
        /// Length of chunk 0.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// A chunk index out of range, or named twice.
    #[error("chunk index {index} is out of range or repeated (n = {n})")]
    BadIndex {
        /// The index.
        index: usize,
        /// Chunks in a stripe.
        n: usize,
    },
    /// More chunks are missing than the code can rebuild.
    #[error("{erased} chunks are erased but the code can rebuild at most {max}")]
    TooManyErasures {
        /// Chunks erased.
        erased: usize,
        /// Parity chunks.
        max: usize,
    },
    /// The stripe is inconsistent and the errors cannot be pinned to chunks.
    #[error("stripe is inconsistent and the bad chunks cannot be located: {reason}")]
    CannotLocate {
        /// Why (bound exceeded, ambiguous syndromes, ...).
        reason: String,
    },
    /// An array code cuts every chunk into rows: the length must be a multiple of their number.
    #[error("chunks of {len} bytes cannot be cut into {rows} equal rows")]
    ChunkRows {
        /// Chunk length.
        len: usize,
        /// Rows per chunk.
        rows: usize,
    },
    /// The code's equations do not determine the erased chunks (a code that is not MDS).
    #[error("chunks {erased:?} cannot be rebuilt: the parity equations do not determine them")]
    NotRecoverable {
        /// The erased chunks.
        erased: Vec<usize>,
    },
    /// The requested kernel is not usable.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}
