//! Integrity protection for stripeguard arrays (Li & Lee, MSST 2014, sections III–V).
//!
//! - [`Scheme`]: which integrity primitives an array uses (`none`, `pure`, `hybrid1`, `hybrid2`,
//!   `hybrid-seq`).
//! - [`Superblock`] and [`Appendix`] (from `stripeguard-format`, where every on-disk record
//!   lives): the bytes on the members, exactly as in `FORMAT.md` §2.
//! - [`FirstReadMap`]: which data chunks have been read since they were last written, in zones
//!   with a bounded number of resident bitmaps.
//! - [`diagnose`]: given every unit of a stripe, decide which are wrong and what the truth is.
//!
//! ## Assumptions about the media (the fault model, docs/DESIGN.md)
//! A disk may silently lose a write, tear it (a prefix of its sectors lands), write it to the
//! wrong place (aligned or not), read from the wrong place, rot bits, fail sectors with EIO, or
//! fail whole. At most one unit per stripe is silently wrong, plus at most `m - 1` erasures; beyond
//! that [`diagnose`] says so and nothing it cannot vouch for is returned.
#![forbid(unsafe_code)]

mod diagnose;
mod firstread;

// The records live in the format crate; re-exported so the diagnosis's callers name one crate.
pub use diagnose::{diagnose, Diagnosis, Finding, FindingKind, UnitView};
pub use firstread::{FirstReadMap, ReadState};
pub use stripeguard_format::cktable;
pub use stripeguard_format::{
    appendix_bytes_for, block_bytes_for, block_crcs, combine_block_crcs, Appendix, AppendixError,
    Identity, Role, APPENDIX_HEADER_BYTES, CHECKSUM_BLOCK_BYTES,
};
pub use stripeguard_format::{
    check_name, write_journal_slots, ArrayState, CodeId, CrossCheck, MemberSlot, MemberState,
    MetadataLayout, Superblock, SuperblockError, CHECKPOINT_OFFSET, INTENT_RECORD_OFFSET,
    JOURNAL_HEADER_BYTES, JOURNAL_SLOTS, LARGE_MEMBER_BYTES, MAX_CHUNK_BYTES, MAX_JOURNAL_SLOTS,
    MAX_MEMBERS, MAX_NAME_BYTES, OWNER_RECORD_OFFSET, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS,
};
pub use stripeguard_format::{ck_table_bytes, CkError, CkTable};
pub use stripeguard_format::{
    state_capacity, StateError, StateRecord, UntrustedRange, ZeroRange, STATE_ENTRY_BYTES,
    STATE_HEADER_BYTES,
};
pub use stripeguard_format::{MirrorKind, Scheme};
