//! `examine`: what one member's metadata says, read without assembling anything (md's
//! `--examine`): its array, its index, the array's state and event count as this member last
//! recorded them, the member table it holds, both superblock copies, its owner record, and when
//! it was last written (the owner record's last heartbeat and the newest event in its log; the
//! later of the two, as a member has no other clock of its own).

use std::path::Path;
use stripeguard_disk::Disk;
use stripeguard_engine::{read_log_of, read_superblock_of, EngineError};
use stripeguard_format::{Newest, Owner, Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS};

/// One superblock copy as read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Copy {
    /// Byte offset on the member.
    pub offset: u64,
    pub valid: bool,
    /// Its event count, when valid.
    pub event_count: Option<u64>,
    /// Why it is not valid.
    pub error: Option<String>,
    /// The member index it names, when valid (a copy naming another index than the best
    /// copy's was misdirected there).
    pub member_index: Option<u16>,
}

/// One member as its own metadata describes it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Examined {
    /// As given.
    pub path: String,
    /// Each superblock copy (bytes 0 and 4096; FORMAT.md §2.1): valid with its event count,
    /// or why not.
    pub copies: Vec<Copy>,
    /// The array's uuid, hex.
    pub array_uuid: String,
    /// The array's name (empty: none).
    pub name: String,
    /// This member's index.
    pub member_index: u16,
    /// `k + m` (+ 1 checksum member).
    pub members: u16,
    pub data_chunks: u16,
    pub parity_chunks: u16,
    pub scheme: String,
    pub code: String,
    pub chunk_bytes: u32,
    pub stripes: u64,
    /// `clean` or `dirty` (not closed cleanly) as this member last recorded it.
    pub state: String,
    /// Its event count (superblock generation): the highest among members is current.
    pub event_count: u64,
    pub created_unix_seconds: u64,
    /// The member table this member holds: each slot's state, device number, last event count.
    pub member_table: Vec<stripeguard_format::MemberSlot>,
    /// The newest owner record on this member.
    pub owner: Option<Owner>,
    /// The newest event in this member's copy of the log (Unix ms), and how many it holds.
    pub newest_event_ms: Option<u64>,
    pub events: usize,
    /// The later of the owner's last heartbeat and the newest event (Unix ms).
    pub last_written_ms: Option<u64>,
    /// Its size, and whether it is shorter than the array needs on each member (FORMAT.md
    /// §2.1: such a member is out of the array from the start).
    pub size_bytes: u64,
    pub truncated: bool,
    /// A reshape in progress (incompatible feature bit 6), as this member records it.
    pub reshape: Option<ReshapeLook>,
}

/// A reshape in progress as one member records it (FORMAT.md §2, "Reshaping the array").
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReshapeLook {
    /// Members and data chunks per stripe before (the fields above are the new geometry's).
    pub from_members: u16,
    pub from_data_chunks: u16,
    /// New stripes committed, of those that hold data (this member's checkpoint record).
    pub done: u64,
    pub stripes: u64,
}

/// Examine the member at `path` (a file, block device or NBD URI), opened read-only in effect
/// (nothing is written) and without locks, so it works while another process holds the array.
pub fn examine(path: &Path) -> Result<Examined, EngineError> {
    let disk = crate::open_member_how(path, false, false, false)?;
    let copies: Vec<Copy> = SUPERBLOCK_COPY_OFFSETS
        .iter()
        .map(|&at| {
            let mut b = vec![0u8; SUPERBLOCK_BYTES];
            let read = disk
                .read_at(at, &mut b)
                .map_err(|e| e.reason())
                .and_then(|()| Superblock::decode(&b).map_err(|e| e.to_string()));
            match read {
                Ok(sb) => Copy {
                    offset: at,
                    valid: true,
                    event_count: Some(sb.generation),
                    error: None,
                    member_index: Some(sb.member_index),
                },
                Err(e) => Copy {
                    offset: at,
                    valid: false,
                    event_count: None,
                    error: Some(e),
                    member_index: None,
                },
            }
        })
        .collect();
    let sb = read_superblock_of(disk.as_ref()).map_err(|why| {
        match stripeguard_engine::read_spare_label(disk.as_ref()).0 {
            Some(l) => EngineError::Assemble(format!(
                "{} is not a member: it is a hot spare (uuid {}) of array {}, labelled at Unix time {} (FORMAT.md §2.11; `stripeguard status` of that array lists its spares)",
                path.display(),
                stripeguard_format::hex(&l.spare_uuid),
                stripeguard_format::hex(&l.array_uuid),
                l.labelled_unix
            )),
            None => EngineError::Assemble(format!(
                "{} holds no valid stripeguard superblock: {why}",
                path.display()
            )),
        }
    })?;
    let owner = owner_of(disk.as_ref());
    let log = read_log_of(&[std::sync::Arc::clone(&disk)]).ok();
    let newest_event_ms = log
        .as_ref()
        .and_then(|l| l.entries.last())
        .map(|e| e.time_unix_ms);
    let last_written_ms = owner.as_ref().map(|o| o.heartbeat_ms).max(newest_event_ms);
    Ok(Examined {
        path: path.display().to_string(),
        copies,
        array_uuid: stripeguard_format::hex(&sb.array_uuid),
        name: sb.name.clone(),
        member_index: sb.member_index,
        members: sb.members,
        data_chunks: sb.data_chunks,
        parity_chunks: sb.parity_chunks,
        scheme: sb.scheme.name().to_string(),
        code: sb.code.name().to_string(),
        chunk_bytes: sb.chunk_bytes,
        stripes: sb.stripes,
        state: format!("{:?}", sb.state).to_lowercase(),
        event_count: sb.generation,
        created_unix_seconds: sb.created_unix_seconds,
        member_table: sb.member_table.clone(),
        owner,
        newest_event_ms,
        events: log.map_or(0, |l| l.entries.len()),
        last_written_ms,
        size_bytes: disk.size_bytes(),
        truncated: disk.size_bytes() < sb.member_bytes(),
        reshape: sb.reshape.map(|r| {
            let progress = checkpoint_of(disk.as_ref()).and_then(|c| c.reshape);
            ReshapeLook {
                from_members: r.members,
                from_data_chunks: r.data_chunks,
                done: progress.as_ref().map_or(0, |p| p.done),
                stripes: progress.as_ref().map_or(0, |p| p.stripes),
            }
        }),
    })
}

/// The newest valid checkpoint record among this member's two slots (FORMAT.md §2.3).
fn checkpoint_of(d: &dyn Disk) -> Option<stripeguard_format::Checkpoint> {
    use stripeguard_format::checkpoint::CHECKPOINT_SLOT_BYTES;
    let mut b = vec![0u8; 2 * CHECKPOINT_SLOT_BYTES];
    d.read_at(stripeguard_format::CHECKPOINT_OFFSET, &mut b)
        .ok()?;
    let mut newest = Newest::default();
    newest.take(
        &b,
        CHECKPOINT_SLOT_BYTES,
        |_: &stripeguard_format::Checkpoint| true,
    );
    newest.record
}

/// The newest valid owner record among this member's two slots (FORMAT.md §2.2).
fn owner_of(d: &dyn Disk) -> Option<Owner> {
    use stripeguard_format::owner::OWNER_SLOT_BYTES;
    let mut b = vec![0u8; 2 * OWNER_SLOT_BYTES];
    d.read_at(stripeguard_format::OWNER_RECORD_OFFSET, &mut b)
        .ok()?;
    let mut newest = Newest::default();
    newest.take(&b, OWNER_SLOT_BYTES, |_: &Owner| true);
    newest.record
}
