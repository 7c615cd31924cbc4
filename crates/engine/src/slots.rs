//! Records kept in two slots written alternately (the owner record, the checkpoint, FORMAT.md
//! §2.2 and §2.3): a torn write can only hit the slot the newest record is not in.

use std::sync::atomic::{AtomicBool, Ordering};
use stripeguard_disk::{DiskError, DiskRef};

/// Write record `bytes` of `sequence` into its slot of the two at `offset` (the one
/// `sequence mod 2` names) on every member of `disks` not failed, flushing each when `flush`.
/// Returns the members whose write failed, for the caller to take out (the heartbeat thread,
/// which cannot change the member table, leaves them to the holder's own I/O).
pub(crate) fn write_slot_on(
    disks: &[DiskRef],
    failed: &[AtomicBool],
    offset: u64,
    sequence: u64,
    bytes: &[u8],
    flush: bool,
) -> Vec<(usize, DiskError)> {
    let at = offset + stripeguard_format::slot_offset(sequence, bytes.len());
    disks
        .iter()
        .enumerate()
        .filter(|(i, _)| !failed.get(*i).is_none_or(|f| f.load(Ordering::Relaxed)))
        .filter_map(|(i, d)| {
            d.write_at(at, bytes)
                .and_then(|()| if flush { d.flush() } else { Ok(()) })
                .err()
                .map(|e| (i, e))
        })
        .collect()
}
