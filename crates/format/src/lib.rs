//! Every byte stripeguard writes to an array member or a shard file, one module per record and
//! one module per `FORMAT.md` section (the wire frames of NBD and the transfer stay in their
//! protocol crates):
//!
//! | FORMAT.md | module | record | magic |
//! |---|---|---|---|
//! | §1 | [`shard`] | shard file header | `SGSHARD\0` |
//! | §2, §2.1 | [`superblock`] | metadata area layout; superblock with its member table | `SGARRAY\0` |
//! | §2.2 | [`owner`] | owner record (two slots) | `SGOWNER\0` |
//! | §2.3 | [`checkpoint`] | checkpoint record (two slots) | `SGCHKPT\0` |
//! | §2.4 | [`intent`] | write-intent record (two copies) | `SGINTENT` |
//! | §2.5 | [`evlog`] | event-log entry | `SGEV` |
//! | §2.6 | [`journal`] | journal slot header | `SGJRNL\0\0` |
//! | §2.7 | [`state`] | stripe-state record (two copies) | `SGSTATE\0` |
//! | §2.8 | — | stripe layout (no record: computed by `stripeguard-plan`) | — |
//! | §2.9 | [`appendix`] | unit appendix (§2.9.1: what each I/O moves) | `SGAX` |
//! | §2.10 | [`cktable`] | checksum-chunk table | `SGCK` |
//! | §2.11 | [`spare`] | spare label (on a hot spare device) | `SGSPARE\0` |
//! | §2.12 | [`jdev`] | journal device label (the write journal on faster media) | `SGJDEV\0\0` |
//!
//! [`scheme`] holds the scheme codes the superblock and appendix store, [`cursor`] the one set of
//! little-endian field readers and writers every record uses.
//!
//! Each record is a type with one encode and one decode behind [`Record`]; decoders never panic,
//! whatever the bytes. Records kept in two copies written alternately are [`Sequenced`], and
//! [`Newest`] picks the newest valid copy of any of them the same way everywhere.
//!
//! **Compatibility rules** (FORMAT.md §2.1 lists the feature bits): a change a reader must
//! understand to read the array safely sets an *incompatible* feature bit, and a build that does
//! not know a set bit refuses the array (the superblock decoder rejects it); a field that only
//! adds information goes where older builds ignore it (a reserved byte they do not check), and
//! the row in FORMAT.md says what an older build does with it. Codes a decoder does not know in
//! an otherwise intact record are [`FormatError::Unknown`], never damage: a scrub does not
//! clear what a newer build wrote.

#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod appendix;
pub mod checkpoint;
pub mod cktable;
pub mod cursor;
pub mod evlog;
pub mod intent;
pub mod jdev;
pub mod journal;
pub mod owner;
pub mod scheme;
pub mod shard;
pub mod spare;
pub mod state;
pub mod superblock;

pub use appendix::{
    appendix_bytes_for, block_bytes_for, block_crcs, combine_block_crcs, Appendix, AppendixError,
    Identity, Role, APPENDIX_HEADER_BYTES, CHECKSUM_BLOCK_BYTES,
};
pub use checkpoint::{Checkpoint, ReshapeProgress, RESHAPE_ZERO_RANGES};
pub use cktable::{table_bytes as ck_table_bytes, CkError, CkTable};
pub use cursor::hex;
pub use evlog::{EventAction, EventEntry, EventKind, EventRole, EVENT_ENTRY_BYTES};
pub use intent::IntentRecord;
pub use jdev::{
    JournalDeviceLabel, JDEV_LABEL_BYTES, JDEV_LABEL_OFFSETS, JDEV_SLOTS_AT, MAX_JOURNAL_DEVICES,
};
pub use journal::{JournalHeader, JournalKind};
pub use owner::Owner;
pub use scheme::{MirrorKind, Scheme};
pub use spare::{SpareLabel, SPARE_LABEL_BYTES, SPARE_LABEL_OFFSETS};
pub use state::{
    state_capacity, StateError, StateRecord, UntrustedRange, ZeroRange, STATE_ENTRY_BYTES,
    STATE_HEADER_BYTES,
};
pub use superblock::{
    check_name, write_journal_slots, ArrayState, CodeId, CrossCheck, MemberSlot, MemberState,
    MetadataLayout, ReshapeFrom, SpareEntry, SparePolicy, Superblock, SuperblockError,
    CHECKPOINT_OFFSET, DEFAULT_SPARE_DELAY_SECONDS, FORMAT_VERSION, INTENT_RECORD_OFFSET,
    JOURNAL_HEADER_BYTES, JOURNAL_SLOTS, LARGE_MEMBER_BYTES, MAX_CHUNK_BYTES, MAX_JOURNAL_SLOTS,
    MAX_MEMBERS, MAX_NAME_BYTES, MAX_SPARES, MAX_SPARE_HINT_BYTES, OWNER_RECORD_OFFSET,
    SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS,
};

/// Why a copy of one of the records this crate added is not read as a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Not a valid copy: wrong length, magic, version or CRC, or a field no writer produces.
    #[error("{record} is damaged ({why})")]
    Damaged {
        /// Which record.
        record: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// An intact copy (magic, version and CRC right) holding a code this build has none for,
    /// written by a newer build: skipped by readers, never cleared as damage.
    #[error("{record} holds {field} code {code}, which this build does not know")]
    Unknown {
        /// Which record.
        record: &'static str,
        /// Which field.
        field: &'static str,
        /// The code found.
        code: u8,
    },
}

impl FormatError {
    /// Whether the copy is damaged (else intact, from a newer build).
    pub fn is_damage(&self) -> bool {
        matches!(self, FormatError::Damaged { .. })
    }
}

/// One on-disk record: a type with one encode and one decode.
pub trait Record: Sized {
    /// What FORMAT.md calls it.
    const NAME: &'static str;
    /// The bytes it starts with.
    const MAGIC: &'static [u8];
    /// The version this build writes (and the only one it reads).
    const VERSION: u32;
    /// Bytes of one copy; 0 when the array chooses the size (FORMAT.md gives the rule).
    const SIZE: usize;
    /// Why a copy is not read as a record.
    type Error: std::fmt::Debug + std::fmt::Display;

    /// Encode into one copy of `copy.len()` bytes (every byte of it is written).
    fn write_copy(&self, copy: &mut [u8]) -> Result<(), Self::Error>;

    /// Decode one copy on its own: `Ok(None)` when it was never written (all zeros, for the
    /// records where that means empty). Checks that need the caller's context (which stripe,
    /// which array) are the caller's. Never panics.
    fn read_copy(copy: &[u8]) -> Result<Option<Self>, Self::Error>;

    /// Recompute the checksums of an encoded copy in place (the mutation harness changes fields
    /// of valid copies and re-seals them, so what gets tested is the fields' validation).
    fn reseal(copy: &mut [u8]);

    /// Whether `e` means the copy is damaged (else it is intact but from a newer build).
    fn is_damage(e: &Self::Error) -> bool {
        let _ = e;
        true
    }

    /// One encoded copy of `bytes` bytes ([`Record::SIZE`] for fixed-size records).
    fn to_copy(&self, bytes: usize) -> Result<Vec<u8>, Self::Error> {
        let mut b = vec![0u8; bytes];
        self.write_copy(&mut b)?;
        Ok(b)
    }
}

/// What every decoder promises, checked by the fuzz targets (`fuzz/`) and the mutation harness
/// (`tests/records.rs`): [`Record::read_copy`] never panics on any bytes, and a copy it accepts
/// encodes back into a copy of the same size that decodes to the same record. `Ok(true)` when
/// `copy` was accepted, `Err` naming the broken promise.
pub fn check_round_trip<T: Record + PartialEq + std::fmt::Debug>(
    copy: &[u8],
) -> Result<bool, String> {
    let Ok(Some(r)) = T::read_copy(copy) else {
        return Ok(false);
    };
    let bytes = if T::SIZE > 0 { T::SIZE } else { copy.len() };
    let again = r
        .to_copy(bytes)
        .map_err(|e| format!("{} accepted but not encodable: {e} ({r:?})", T::NAME))?;
    match T::read_copy(&again) {
        Ok(Some(back)) if back == r => Ok(true),
        other => Err(format!(
            "{} does not round-trip: {r:?} came back as {other:?}",
            T::NAME
        )),
    }
}

/// Whether a copy is damaged: neither empty nor a valid record (an intact copy from a newer
/// build, with codes this one does not know, is not damaged). What a metadata scrub checks.
pub fn damaged<T: Record>(copy: &[u8]) -> bool {
    match T::read_copy(copy) {
        Ok(_) => false,
        Err(e) => T::is_damage(&e),
    }
}

/// Start a copy of a record whose header is magic (8 bytes), version (u32) and copy size (u32):
/// the owner, checkpoint and write-intent records. The rest of the copy is zeroed.
pub(crate) fn put_copy_header<T: Record>(b: &mut [u8], size: u32) {
    b.fill(0);
    b[0..8].copy_from_slice(T::MAGIC);
    cursor::put_u32(b, 8, T::VERSION);
    cursor::put_u32(b, 12, size);
}

/// Open a copy of such a record: `Ok(None)` when empty (all zero), else the copy (its first
/// [`Record::SIZE`] bytes, or all of it for records the array sizes) once magic, version, size
/// and CRC hold.
pub(crate) fn open_copy<T: Record>(b: &[u8]) -> Result<Option<&[u8]>, FormatError> {
    let damaged = |why| FormatError::Damaged {
        record: T::NAME,
        why,
    };
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let n = if T::SIZE > 0 { T::SIZE } else { b.len() };
    if b.len() < n || n < 20 || &b[0..8] != T::MAGIC {
        return Err(damaged("magic"));
    }
    let b = &b[..n];
    if cursor::u32_at(b, 8) != T::VERSION || u32::try_from(n) != Ok(cursor::u32_at(b, 12)) {
        return Err(damaged("version or size"));
    }
    if !cursor::tail_sealed(b) {
        return Err(damaged("CRC"));
    }
    Ok(Some(b))
}

/// A record kept in two copies (or slots) written alternately: the valid one with the higher
/// sequence is the record, so a torn write can only hit the copy the newest is not in.
pub trait Sequenced: Record {
    /// Incremented on every write.
    fn sequence(&self) -> u64;
}

/// Which of two slots record `sequence` goes to (`sequence mod 2`), as a byte offset from the
/// region's start.
pub fn slot_offset(sequence: u64, slot_bytes: usize) -> u64 {
    (sequence % 2) * slot_bytes as u64
}

/// The newest valid copy of a two-copy record across members, and whether any copy was damaged
/// (neither empty nor valid). Copies with codes this build does not know count as neither.
#[derive(Debug)]
pub struct Newest<T> {
    /// The newest valid copy seen.
    pub record: Option<T>,
    /// Some copy was damaged (or could not be read: [`Newest::unreadable`]).
    pub damaged: bool,
}

impl<T> Default for Newest<T> {
    fn default() -> Self {
        Newest {
            record: None,
            damaged: false,
        }
    }
}

impl<T: Sequenced> Newest<T> {
    /// Take every copy of a region as read from one member (`copy_bytes` each), keeping only
    /// records `accept` takes (the caller's context checks).
    pub fn take(&mut self, region: &[u8], copy_bytes: usize, accept: impl Fn(&T) -> bool) {
        for c in region.chunks_exact(copy_bytes.max(1)) {
            match T::read_copy(c) {
                Ok(Some(r)) if accept(&r) => self.offer(r),
                Ok(_) => {}
                Err(e) => self.damaged |= T::is_damage(&e),
            }
        }
    }

    /// Keep `r` when it is newer than what was seen.
    pub fn offer(&mut self, r: T) {
        if self
            .record
            .as_ref()
            .is_none_or(|x| r.sequence() > x.sequence())
        {
            self.record = Some(r);
        }
    }

    /// A member's region could not be read.
    pub fn unreadable(&mut self) {
        self.damaged = true;
    }
}
