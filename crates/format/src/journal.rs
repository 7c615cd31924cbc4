//! A journal slot's header (FORMAT.md §2.6): the first 4096 bytes of a slot, before the payload
//! (the unit bytes it saves or the bytes of a write's I/Os to one unit).
//!
//! ```text
//! offset size field
//!      0    8 magic "SGJRNL\0\0"
//!      8    4 version 1
//!     12    4 header bytes 4096
//!     16    8 sequence
//!     24    8 stripe
//!     32    2 stripe position
//!     34    1 kind: 0 saved chunk, 1 unit writes
//!     35    1 zero
//!     36    4 CRC-32C of the payload
//!     40    8 superblock event count when written
//!     48    4 extents (1..=8)
//!     52    4 payload bytes (the sum of the extents' lengths)
//!     56   32 touched: the stripe positions the write changes (bit p of byte p/8)
//!     88   64 extents: (start u32, length u32) in the unit, in payload order; unused zero
//!    152    8 round: first sequence
//!    160    4 round: records (the record's sequence is within the round)
//!    164   16 array uuid (zeros in records of builds before it: accepted as unknown)
//!    180 3912 zero
//!   4092    4 CRC-32C of bytes 0..4092
//! ```

use crate::cursor::{put_u16, put_u32, put_u64, seal_tail, tail_sealed, u16_at, u32_at, u64_at};
use crate::{FormatError, Record, Sequenced};
use stripeguard_checksum::crc32c;

const HEADER_U32: u32 = 4096;
/// Bytes of the header.
pub const JOURNAL_HEADER_SIZE: usize = HEADER_U32 as usize;
/// Most extents of one unit a record holds.
pub const MAX_EXTENTS: usize = 8;
/// Bytes of the touched-positions bitmap (255 positions at most).
pub const TOUCHED_BYTES: usize = 32;
const EXTENTS_AT: usize = 88;
const ROUND_AT: usize = EXTENTS_AT + 8 * MAX_EXTENTS;
const UUID_AT: usize = ROUND_AT + 12;

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum JournalKind {
    /// A missing member's unit, saved before a degraded write touches its stripe.
    Saved = 0,
    /// A write's I/Os to one unit (arrays with the write journal).
    UnitWrites = 1,
}

/// One slot's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalHeader {
    /// What the payload is.
    pub kind: JournalKind,
    /// Numbers records from 1 in a run.
    pub sequence: u64,
    /// Stripe.
    pub stripe: u64,
    /// Stripe position of the unit.
    pub position: u16,
    /// CRC-32C of the payload.
    pub payload_crc: u32,
    /// The superblock's event count when written.
    pub event: u64,
    /// Where in the unit the payload's pieces go: (start, length), in payload order.
    pub extents: Vec<(u32, u32)>,
    /// The stripe positions the write changes.
    pub touched: [u8; TOUCHED_BYTES],
    /// The round: its first sequence and its number of records.
    pub round: (u64, u32),
    /// The array the record belongs to; zeros in records of builds before the field.
    pub array_uuid: [u8; 16],
}

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: JournalHeader::NAME,
    why,
};

impl JournalHeader {
    /// Whether the record may belong to array `uuid`: it names it, or it predates the field.
    pub fn belongs_to(&self, uuid: &[u8; 16]) -> bool {
        self.array_uuid == *uuid || self.array_uuid == [0; 16]
    }

    /// Payload bytes (the sum of the extents' lengths).
    pub fn payload_bytes(&self) -> u64 {
        self.extents.iter().map(|e| u64::from(e.1)).sum()
    }

    /// The payload that follows this header in `slot`, when its extents fit a unit of `unit`
    /// bytes (a saved chunk is the whole unit) and it matches its CRC. Never panics.
    pub fn payload_in<'a>(&self, slot: &'a [u8], unit: u64) -> Option<&'a [u8]> {
        let fits = self
            .extents
            .iter()
            .all(|&(start, len)| u64::from(start) + u64::from(len) <= unit)
            && match self.kind {
                JournalKind::Saved => {
                    self.extents.len() == 1
                        && self.extents[0].0 == 0
                        && u64::from(self.extents[0].1) == unit
                }
                JournalKind::UnitWrites => true,
            };
        let len = usize::try_from(self.payload_bytes()).ok()?;
        let payload = slot.get(JOURNAL_HEADER_SIZE..JOURNAL_HEADER_SIZE.checked_add(len)?)?;
        (fits && crc32c(payload) == self.payload_crc).then_some(payload)
    }
}

impl Record for JournalHeader {
    const NAME: &'static str = "journal slot header";
    const MAGIC: &'static [u8] = b"SGJRNL\0\0";
    const VERSION: u32 = 1;
    const SIZE: usize = JOURNAL_HEADER_SIZE;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("a header is 4096 bytes"));
        }
        if self.extents.is_empty() || self.extents.len() > MAX_EXTENTS {
            return Err(DAMAGED("1 to 8 extents"));
        }
        let len = u32::try_from(self.payload_bytes()).map_err(|_| DAMAGED("payload over 4 GiB"))?;
        b.fill(0);
        b[0..8].copy_from_slice(Self::MAGIC);
        put_u32(b, 8, Self::VERSION);
        put_u32(b, 12, HEADER_U32);
        put_u64(b, 16, self.sequence);
        put_u64(b, 24, self.stripe);
        put_u16(b, 32, self.position);
        b[34] = self.kind as u8;
        put_u32(b, 36, self.payload_crc);
        put_u64(b, 40, self.event);
        put_u32(
            b,
            48,
            u32::try_from(self.extents.len()).expect("1 to 8, checked above"),
        );
        put_u32(b, 52, len);
        b[56..56 + TOUCHED_BYTES].copy_from_slice(&self.touched);
        for (i, (start, elen)) in self.extents.iter().enumerate() {
            put_u32(b, EXTENTS_AT + 8 * i, *start);
            put_u32(b, EXTENTS_AT + 8 * i + 4, *elen);
        }
        put_u64(b, ROUND_AT, self.round.0);
        put_u32(b, ROUND_AT + 8, self.round.1);
        b[UUID_AT..UUID_AT + 16].copy_from_slice(&self.array_uuid);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<JournalHeader>, FormatError> {
        let Some(h) = b.get(..Self::SIZE) else {
            return Err(DAMAGED("shorter than a header"));
        };
        if h.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if &h[0..8] != Self::MAGIC
            || u32_at(h, 8) != Self::VERSION
            || u32_at(h, 12) != HEADER_U32
            || !tail_sealed(h)
        {
            return Err(DAMAGED("magic, version, size or CRC"));
        }
        let kind = match h[34] {
            0 => JournalKind::Saved,
            1 => JournalKind::UnitWrites,
            _ => return Err(DAMAGED("kind")),
        };
        if h[35] != 0 {
            return Err(DAMAGED("byte 35"));
        }
        let count = u32_at(h, 48) as usize;
        if count == 0 || count > MAX_EXTENTS {
            return Err(DAMAGED("extent count"));
        }
        let extents: Vec<(u32, u32)> = (0..count)
            .map(|i| {
                (
                    u32_at(h, EXTENTS_AT + 8 * i),
                    u32_at(h, EXTENTS_AT + 8 * i + 4),
                )
            })
            .collect();
        let sum: u64 = extents.iter().map(|e| u64::from(e.1)).sum();
        if extents.iter().any(|e| e.1 == 0) || sum != u64::from(u32_at(h, 52)) {
            return Err(DAMAGED("extents"));
        }
        let (sequence, round) = (
            u64_at(h, 16),
            (u64_at(h, ROUND_AT), u32_at(h, ROUND_AT + 8)),
        );
        let in_round =
            round.1 >= 1 && sequence >= round.0 && sequence - round.0 < u64::from(round.1);
        if !in_round {
            return Err(DAMAGED("sequence outside its round"));
        }
        let mut touched = [0u8; TOUCHED_BYTES];
        touched.copy_from_slice(&h[56..56 + TOUCHED_BYTES]);
        Ok(Some(JournalHeader {
            kind,
            sequence,
            stripe: u64_at(h, 24),
            position: u16_at(h, 32),
            payload_crc: u32_at(h, 36),
            event: u64_at(h, 40),
            extents,
            touched,
            round,
            array_uuid: crate::cursor::id_at(h, UUID_AT),
        }))
    }

    fn reseal(b: &mut [u8]) {
        if b.len() >= Self::SIZE {
            seal_tail(&mut b[..Self::SIZE]);
        }
    }
}

impl Sequenced for JournalHeader {
    fn sequence(&self) -> u64 {
        self.sequence
    }
}
