//! The checkpoint record's place on the members (FORMAT.md §2.3): where a scrub or a replace
//! stands, written into the slot the previous record is not in.

use crate::array::Array;
use crate::error::EngineError;
use stripeguard_format::Checkpoint;
use stripeguard_integrity::CHECKPOINT_OFFSET;

pub(crate) use stripeguard_format::checkpoint::CHECKPOINT_SLOT_BYTES as SLOT_BYTES;
use stripeguard_format::Record;
/// Stripes between checkpoint writes (and at most this much work is redone after a crash).
pub(crate) const CHECKPOINT_EVERY: u64 = 256;
/// Seconds between checkpoint writes at most, however few stripes went by.
pub(crate) const CHECKPOINT_SECONDS: u64 = 10;

/// One encoded slot of `c`.
pub(crate) fn checkpoint_bytes(c: &Checkpoint) -> Vec<u8> {
    c.to_copy(SLOT_BYTES).expect("a checkpoint fits its slot")
}

impl Array {
    /// The newest valid checkpoint record on any current member, if one was ever written.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.newest_record(CHECKPOINT_OFFSET, SLOT_BYTES, |_: &Checkpoint| true)
            .record
    }

    /// The last scrub's record, if a scrub ever ran.
    pub fn last_scrub(&self) -> Option<Checkpoint> {
        self.checkpoint().filter(|c| c.scrub_ran)
    }

    /// Write `r` to every current member, into the slot the previous record is not in.
    pub(crate) fn write_checkpoint(&self, r: &Checkpoint) -> Result<(), EngineError> {
        self.write_slot(CHECKPOINT_OFFSET, r.sequence, &checkpoint_bytes(r), false)?;
        self.flush()
    }
}
