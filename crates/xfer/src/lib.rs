//! `stripeguard send` / `recv`: a file transfer that proves what landed on the receiver's
//! disk (RIVA, `papers/002`): the receiver writes each block, makes it durable, drops it from
//! its page cache (proved with `mincore`), reads it back from the device and compares its
//! BLAKE3 hash with the sender's; a block that fails is sent again, alone. Many files are in
//! flight at once, and verification of one batch overlaps the arrival of the next. An
//! interrupted transfer resumes from the receiver's per-file progress. The receiver works only
//! through directory handles beneath its DIR (`beneath.rs`); with a key the whole session is
//! sealed (`seal.rs`). The wire format is FORMAT.md §5.

#![warn(clippy::unwrap_used)]

pub mod attrs;
pub mod beneath;
pub mod filter;
pub mod manifest;
pub mod proto;
mod records;
pub mod recv;
pub mod seal;
pub mod send;
pub mod verify;

pub use beneath::Policy;
pub use manifest::{verify_manifest, ManifestResult};
pub use recv::{accept, receive, receive_on, Conn, RecvOptions, RecvSummary};
pub use send::{send, SendError, SendOptions, SendSummary};

#[cfg(test)]
mod injection_tests;

/// A duration in nanoseconds, for the summaries' counters (saturating, at 584 years).
pub(crate) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
