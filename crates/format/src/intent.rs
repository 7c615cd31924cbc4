//! The write-intent record (FORMAT.md §2.4): which regions of the array may hold a stripe whose
//! writes were not all durable. Two copies of `I / 2` bytes (the superblock gives `I`), written
//! alternately; all zeros = empty.
//!
//! ```text
//! offset size field
//!      0    8 magic "SGINTENT"
//!      8    4 version 1
//!     12    4 copy bytes (I / 2)
//!     16    8 sequence
//!     24    8 stripes per bit (at least 1)
//!     32    8 bits: ceil(stripes / stripes per bit), at most (copy - 68) * 8
//!     40    8 superblock event count when written
//!     48    8 "cleared at": event count when last written with no bit set and no member out
//!     56    8 zero
//!     64    … bitmap, bit r of byte r/8 (LSB first) = region r; then zeros
//!   copy-4  4 CRC-32C of bytes 0..copy-4
//! ```

use crate::cursor::{put_u64, seal_tail, u64_at};
use crate::{FormatError, Record, Sequenced};

/// Bytes before the bitmap.
pub const INTENT_HEADER_BYTES: usize = 64;

/// One copy of the record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentRecord {
    /// Incremented on every write.
    pub sequence: u64,
    /// Region size in stripes.
    pub stripes_per_bit: u64,
    /// Regions.
    pub bits: u64,
    /// The superblock's event count when written.
    pub event_count: u64,
    /// The event count when the record was last written clean (0: never).
    pub cleared_at: u64,
    /// `ceil(bits / 8)` bytes, LSB first.
    pub bitmap: Vec<u8>,
}

/// Regions a copy of `copy_bytes` can hold.
pub fn intent_capacity_bits(copy_bytes: usize) -> u64 {
    (copy_bytes.saturating_sub(INTENT_HEADER_BYTES + 4) as u64) * 8
}

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: IntentRecord::NAME,
    why,
};

impl IntentRecord {
    /// Whether region `r`'s bit is set.
    pub fn is_set(&self, r: u64) -> bool {
        usize::try_from(r / 8)
            .ok()
            .and_then(|i| self.bitmap.get(i))
            .is_some_and(|b| b >> (r % 8) & 1 == 1)
    }
}

impl Record for IntentRecord {
    const NAME: &'static str = "write-intent record";
    const MAGIC: &'static [u8] = b"SGINTENT";
    const VERSION: u32 = 1;
    const SIZE: usize = 0;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        let n = b.len();
        let size = u32::try_from(n).map_err(|_| DAMAGED("copy larger than 4 GiB"))?;
        if n < INTENT_HEADER_BYTES + 4 + self.bitmap.len()
            || self.bits.div_ceil(8) != self.bitmap.len() as u64
            || self.stripes_per_bit == 0
        {
            return Err(DAMAGED("the bitmap does not fit the copy"));
        }
        crate::put_copy_header::<Self>(b, size);
        put_u64(b, 16, self.sequence);
        put_u64(b, 24, self.stripes_per_bit);
        put_u64(b, 32, self.bits);
        put_u64(b, 40, self.event_count);
        put_u64(b, 48, self.cleared_at);
        b[INTENT_HEADER_BYTES..INTENT_HEADER_BYTES + self.bitmap.len()]
            .copy_from_slice(&self.bitmap);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<IntentRecord>, FormatError> {
        let n = b.len();
        let Some(b) = crate::open_copy::<Self>(b)? else {
            return Ok(None);
        };
        if n < INTENT_HEADER_BYTES + 4 {
            return Err(DAMAGED("shorter than its header"));
        }
        let (per_bit, bits) = (u64_at(b, 24), u64_at(b, 32));
        if per_bit == 0 || bits > intent_capacity_bits(n) {
            return Err(DAMAGED("stripes per bit or bits"));
        }
        let map_bytes = usize::try_from(bits.div_ceil(8)).map_err(|_| DAMAGED("bits"))?;
        Ok(Some(IntentRecord {
            sequence: u64_at(b, 16),
            stripes_per_bit: per_bit,
            bits,
            event_count: u64_at(b, 40),
            cleared_at: u64_at(b, 48),
            bitmap: b[INTENT_HEADER_BYTES..INTENT_HEADER_BYTES + map_bytes].to_vec(),
        }))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }
}

impl Sequenced for IntentRecord {
    fn sequence(&self) -> u64 {
        self.sequence
    }
}
