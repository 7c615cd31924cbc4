//! Protect a file with any-strength Reed-Solomon: `k` data shards + `m` parity shards, each a
//! self-describing file (format in `FORMAT.md` section 1). Any `k` intact shards rebuild the file;
//! damaged blocks are found by their CRCs, and blocks that are wrong *without* a CRC failure (a
//! shard whose header is lost and whose name is wrong, a stale or swapped shard) are found from
//! the parity alone with [`ErasureCode::locate`](stripeguard_codes::ErasureCode::locate).
//!
//! Everything streams one stripe at a time: memory is `(k + m) x (block + 4)` bytes whatever the
//! file size. Outputs are written to a temporary name, synced, and renamed into place, so an
//! interrupted run never leaves a half-written file under the final name.
#![forbid(unsafe_code)]

mod decode;
mod encode;
mod error;
/// The shard header (FORMAT.md §1) lives with every other on-disk record.
pub use stripeguard_format::shard as format;

pub use decode::{decode, verify, HeaderState, ShardReport, Status, VerifyReport};
pub use encode::{encode, EncodeOptions, EncodeSummary, DEFAULT_MAX_BLOCK_BYTES};
pub use error::ShardError;

/// File name of shard `index`.
pub fn shard_file_name(index: usize) -> String {
    format!("shard-{index:03}.sgs")
}

/// The index in a shard file name, if it follows [`shard_file_name`].
pub fn index_from_name(name: &str) -> Option<usize> {
    name.strip_prefix("shard-")?
        .strip_suffix(".sgs")?
        .parse()
        .ok()
}

/// Progress callbacks get `(bytes done, bytes total)`.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);
