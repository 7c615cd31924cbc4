//! An entry of the event log (FORMAT.md §2.5): a ring of 256-byte entries in every member's
//! metadata area, so the evidence of what was found and done travels with the disks.
//!
//! ```text
//! offset size field
//!      0    4 magic "SGEV"
//!      4    1 version 1
//!      5    1 action code      (EventAction)
//!      6    1 role code        (EventRole)
//!      7    1 kind code        (EventKind; 0 in entries of builds before it: read the text)
//!      8    8 entry number
//!     16    8 time, Unix ms
//!     24    8 stripe
//!     32    2 member
//!     34    2 position in the stripe
//!     36    4 zero
//!     40   24 kind as text, NUL-padded (what builds before the code read)
//!     64  188 evidence, UTF-8, NUL-padded, cut at a character boundary
//!    252    4 CRC-32C of bytes 0..252
//! ```
//! Roles, kinds and actions are `#[repr(u8)]` enums matched exhaustively, so nothing without a
//! code can be written. An intact entry (magic, version, CRC right) with a code this build does
//! not know is [`FormatError::Unknown`]: readers skip it and count it, scrubs leave it.

use crate::cursor::{put_text, put_u16, put_u64, seal_tail, tail_sealed, text_at, u16_at, u64_at};
use crate::{FormatError, Record};
use serde::Serialize;

/// Bytes per entry.
pub const EVENT_ENTRY_BYTES: usize = 256;

/// Generate a `#[repr(u8)]` code enum with its names (kebab-case text, as `serde` writes them).
macro_rules! codes {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $code:literal, $text:literal;)+ }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "kebab-case")]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $v = $code,)+ }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$v,)+];

            /// The code stored on disk.
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The value of `code`, if this build knows it.
            pub fn from_code(code: u8) -> Option<$name> {
                match code {
                    $($code => Some($name::$v),)+
                    _ => None,
                }
            }

            /// The name people and scripts see.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $text,)+
                }
            }

            /// The value named `text`.
            pub fn from_name(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$v),)+
                    _ => None,
                }
            }
        }

        /// Compares by name (`kind == "identity"`), as scripts and tests see it.
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

codes! {
    /// What was done about a finding.
    EventAction {
        /// The unit was rebuilt from redundancy, checked and written back.
        Repaired = 1, "repaired";
        /// Only the unit's appendix was stale (a missed checksum-copy update); it was rewritten.
        AppendixRewritten = 2, "appendix-rewritten";
        /// The bytes a read returned were wrong but the unit on disk is right (a misdirected
        /// read): the stripe was read again and the good bytes used.
        Reread = 3, "reread";
        /// Rebuilt in memory; the member is failed so nothing was written.
        RebuiltDegraded = 4, "rebuilt-degraded";
        /// Found and rebuilt in memory, not written: the array was opened read-only.
        FoundReadOnly = 5, "found-read-only";
        /// The stripe could not be repaired; the request failed.
        Unrecoverable = 6, "unrecoverable";
        /// A stripe an unclean shutdown may have left half-written was made consistent
        /// (resync); never counted as corruption.
        Resynced = 7, "resynced";
        /// Bare RAID (`none`): the stripe's parity disagrees with its data. Nothing says which
        /// unit is wrong, so nothing was changed (Linux md's `mismatch_cnt`).
        Mismatch = 8, "mismatch";
        /// Something an operator should know that is not a finding (counts nothing).
        Notice = 9, "notice";
    }
}

codes! {
    /// What an event is about.
    EventRole {
        /// A data unit.
        Data = 1, "data";
        /// A parity unit.
        Parity = 2, "parity";
        /// The stripe as a whole.
        Stripe = 3, "stripe";
        /// A member as a whole.
        Member = 4, "member";
        /// The checksum member's unit (scheme `checksum-chunk`).
        Checksum = 5, "checksum";
    }
}

codes! {
    /// What was found.
    EventKind {
        /// A block failed its CRC.
        Checksum = 1, "checksum";
        /// The unit belongs elsewhere (misdirected write or read).
        Identity = 2, "identity";
        /// The unit is older than its stripe (lost write).
        Stale = 3, "stale";
        /// The other units outvote it.
        Outvoted = 4, "outvoted";
        /// The read failed.
        ReadError = 5, "read-error";
        /// The parity disagrees with data that checks.
        Parity = 6, "parity";
        /// `none`: the parity disagrees with the data.
        ParityMismatch = 7, "parity-mismatch";
        /// A member was taken out.
        MemberFailed = 8, "member-failed";
        /// The stripe could not be repaired.
        Unrecoverable = 9, "unrecoverable";
        /// A stripe an unclean shutdown may have left half-written was made consistent.
        Resync = 10, "resync";
        /// A resync could not decide a stripe and settled it as on disk.
        ResyncSettled = 11, "resync-settled";
        /// A resync replayed the journal.
        ResyncJournal = 12, "resync-journal";
        /// A resync could not make a stripe consistent.
        ResyncUnrecoverable = 13, "resync-unrecoverable";
        /// A degraded write found too few journal slots.
        JournalTooSmall = 14, "journal-too-small";
        /// A range was listed as untrusted (FORMAT.md §2.7).
        Untrusted = 15, "untrusted";
        /// A listed range was taken off (written whole, or verified again).
        UntrustedCleared = 16, "untrusted-cleared";
        /// A scrub re-sealed a stripe around bytes verified again.
        UntrustedVerified = 17, "untrusted-verified";
        /// `stripeguard clear` zero-filled a listed range.
        UntrustedZeroed = 18, "untrusted-zeroed";
        /// A metadata copy was damaged.
        Metadata = 19, "metadata";
        /// The checksum member's table of a stripe is damaged or stale.
        ChecksumChunk = 20, "checksum-chunk";
        /// A replace began rebuilding a member onto a device (the evidence names both).
        ReplaceStarted = 21, "replace-started";
        /// A replace finished: the new member is current.
        ReplaceFinished = 22, "replace-finished";
        /// A replace stopped before the end (a holder stopping, a stripe it could not rebuild,
        /// a failed write to the target); run again onto the same device, it resumes.
        ReplaceInterrupted = 23, "replace-interrupted";
        /// A scrub (or check) began.
        ScrubStarted = 24, "scrub-started";
        /// A scrub (or check) ended, with its counts in the evidence.
        ScrubFinished = 25, "scrub-finished";
        /// The resync after an unclean shutdown ended, with its counts in the evidence.
        ResyncFinished = 26, "resync-finished";
        /// A member that had left came back (re-added through the write-intent record).
        MemberReturned = 27, "member-returned";
        /// A forced assembly brought a stale member back (read-only, or made current for
        /// good with `--writable`).
        ForcedAssembly = 28, "forced-assembly";
        /// The array grew (`stripeguard grow`): its stripe is the old stripe count.
        Grown = 29, "grown";
        /// A hot spare took an out (or failing) member's place: a replace onto it begins.
        SpareTaken = 30, "spare-taken";
        /// A journal device failed or was missing (FORMAT.md §2.12): not used again.
        JournalDeviceLost = 31, "journal-device-lost";
        /// A reshape (`grow --add`) finished: the array has its new geometry.
        Reshaped = 32, "reshaped";
    }
}

impl EventKind {
    /// A change of the array's or a member's state (codes 21–32), not a finding in a stripe:
    /// its stripe and position say nothing.
    pub fn is_state_change(self) -> bool {
        matches!(
            self,
            EventKind::ReplaceStarted
                | EventKind::ReplaceFinished
                | EventKind::ReplaceInterrupted
                | EventKind::ScrubStarted
                | EventKind::ScrubFinished
                | EventKind::ResyncFinished
                | EventKind::MemberReturned
                | EventKind::ForcedAssembly
                | EventKind::Grown
                | EventKind::SpareTaken
                | EventKind::JournalDeviceLost
                | EventKind::Reshaped
        )
    }
}

/// One entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventEntry {
    /// Entry number, in the order recorded.
    pub number: u64,
    /// Unix milliseconds.
    pub time_unix_ms: u64,
    /// Stripe.
    pub stripe: u64,
    /// Member index.
    pub member: u16,
    /// Position in the stripe.
    pub position: u16,
    /// What it is about.
    pub role: EventRole,
    /// What was found.
    pub kind: EventKind,
    /// Evidence.
    pub evidence: String,
    /// What was done.
    pub action: EventAction,
}

const NAME: &str = "event-log entry";
const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged { record: NAME, why };
const UNKNOWN: fn(&'static str, u8) -> FormatError = |field, code| FormatError::Unknown {
    record: NAME,
    field,
    code,
};

impl EventEntry {
    /// Whether `b` is an intact entry (magic, version, CRC), whether or not this build knows
    /// its codes: what a metadata scrub checks.
    pub fn intact(b: &[u8]) -> bool {
        b.len() == EVENT_ENTRY_BYTES && &b[0..4] == Self::MAGIC && b[4] == 1 && tail_sealed(b)
    }
}

impl Record for EventEntry {
    const NAME: &'static str = NAME;
    const MAGIC: &'static [u8] = b"SGEV";
    const VERSION: u32 = 1;
    const SIZE: usize = EVENT_ENTRY_BYTES;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("an entry is 256 bytes"));
        }
        b.fill(0);
        b[0..4].copy_from_slice(Self::MAGIC);
        b[4] = 1;
        b[5] = self.action.code();
        b[6] = self.role.code();
        b[7] = self.kind.code();
        put_u64(b, 8, self.number);
        put_u64(b, 16, self.time_unix_ms);
        put_u64(b, 24, self.stripe);
        put_u16(b, 32, self.member);
        put_u16(b, 34, self.position);
        put_text(&mut b[40..64], self.kind.as_str());
        put_text(&mut b[64..252], &self.evidence);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<EventEntry>, FormatError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if !Self::intact(b) {
            return Err(DAMAGED("magic, version, size or CRC"));
        }
        let action = EventAction::from_code(b[5]).ok_or(UNKNOWN("action", b[5]))?;
        let role = EventRole::from_code(b[6]).ok_or(UNKNOWN("role", b[6]))?;
        let text = text_at(&b[40..64]);
        let kind = match b[7] {
            // Written before kinds had codes: the text is the kind.
            0 => EventKind::from_name(&text).ok_or(UNKNOWN("kind (as text)", 0))?,
            code => EventKind::from_code(code).ok_or(UNKNOWN("kind", code))?,
        };
        Ok(Some(EventEntry {
            number: u64_at(b, 8),
            time_unix_ms: u64_at(b, 16),
            stripe: u64_at(b, 24),
            member: u16_at(b, 32),
            position: u16_at(b, 34),
            role,
            kind,
            evidence: text_at(&b[64..252]),
            action,
        }))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }

    fn is_damage(e: &FormatError) -> bool {
        e.is_damage()
    }
}
