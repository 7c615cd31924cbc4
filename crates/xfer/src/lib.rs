//! `stripeguard send` / `recv`: a file transfer that proves what landed on the receiver's
//! disk (RIVA, `papers/002`): per block, the receiver writes, makes durable, drops the block
//! from its page cache (proved with `mincore`), reads it back from the device and compares its
//! BLAKE3 hash with the sender's; a block that fails is sent again, alone. Transfer of block
//! i+1 overlaps verification of block i. An interrupted transfer resumes from the receiver's
//! per-file progress. The wire format is FORMAT.md §5.

pub mod attrs;
pub mod manifest;
pub mod proto;
pub mod recv;
pub mod send;
pub mod verify;

pub use manifest::{verify_manifest, ManifestResult};
pub use recv::{receive, RecvOptions, RecvSummary};
pub use send::{send, SendError, SendOptions, SendSummary};
