//! `stripeguard wipe`: remove a member's stripeguard signatures (md's `--zero-superblock`,
//! issue 36 §1), so that no scan, assembly or probe takes it for a member again: both
//! superblock copies and every metadata record before the data area (owner, checkpoint, intent
//! record, event log, stripe-state record; FORMAT.md §2), and the journal slots after the last
//! unit. The data area is left as it is. Refused for a device in use (mounted, held, backing a
//! loop device) and for a member a live process holds.

use crate::probe::{Found, Target};
use std::path::Path;
use stripeguard_engine::{read_superblock_of, EngineError};

/// What was wiped.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Wiped {
    pub path: String,
    /// The array it belonged to and its index there, when its superblock still read.
    pub array_uuid: Option<String>,
    pub name: String,
    pub member_index: Option<u16>,
    /// Bytes zeroed.
    pub bytes: u64,
}

/// Wipe the member at `p` (a file, block device or NBD export).
/// Whether `p` could be wiped now (a member, not held): `wipe` asks it of every device before
/// it wipes the first, so that a bad one in the list leaves them all as they were.
pub fn wipe_preflight(p: &Path) -> Result<(), EngineError> {
    open_checked(p).map(drop)
}

/// `p` opened and locked, when it holds a stripeguard superblock.
fn open_checked(p: &Path) -> Result<Target, EngineError> {
    let t = Target::open(p, false)?;
    let Found::Member(_) = t.found() else {
        return Err(EngineError::Config(format!(
            "{} holds no stripeguard superblock (in either copy): nothing to wipe",
            p.display()
        )));
    };
    // A live holder keeps its members locked: never pull the metadata from under it.
    t.disk.try_lock(true)?;
    // Mid-reshape a member's metadata is what says where its data is, in two geometries.
    if let Some(r) = read_superblock_of(t.disk.as_ref())
        .ok()
        .and_then(|sb| sb.reshape.map(|r| (r, sb.members)))
    {
        return Err(EngineError::Config(format!(
            "{} is a member of an array whose reshape from {} to {} members is in progress or was interrupted: finish it with `stripeguard grow MEMBERS... --continue` first (wiping a member now would leave the array's data with no record of where it is)",
            p.display(),
            r.0.members,
            r.1
        )));
    }
    Ok(t)
}

pub fn wipe_member(p: &Path) -> Result<Wiped, EngineError> {
    let t = open_checked(p)?;
    let sb = read_superblock_of(t.disk.as_ref()).ok();
    let size = t.disk.size_bytes();
    // Without a readable superblock the layout is unknown: the fixed records (superblock
    // copies, owner, checkpoint) and the smallest layout's variable ones.
    let mut ranges: Vec<(u64, u64)> = match &sb {
        Some(sb) => vec![
            (0, sb.data_offset_bytes),
            (sb.journal_offset(), sb.member_bytes()),
        ],
        None => vec![(
            0,
            stripeguard_format::MetadataLayout::for_member(size).data_offset(),
        )],
    };
    for r in &mut ranges {
        r.1 = r.1.min(size);
    }
    let mut bytes = 0u64;
    const STEP: usize = 1 << 20;
    let zeros = vec![0u8; STEP];
    for (start, end) in ranges {
        let mut at = start;
        while at < end {
            let n = usize::try_from(end - at).map_or(STEP, |left| left.min(STEP));
            t.disk.write_at(at, &zeros[..n])?;
            at += n as u64;
            bytes += n as u64;
        }
    }
    t.disk.flush()?;
    Ok(Wiped {
        path: p.display().to_string(),
        array_uuid: sb.as_ref().map(|s| stripeguard_format::hex(&s.array_uuid)),
        name: sb.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
        member_index: sb.as_ref().map(|s| s.member_index),
        bytes,
    })
}
