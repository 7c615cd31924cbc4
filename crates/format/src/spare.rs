//! The spare label (FORMAT.md §2.11): what a hot spare device holds, so that it is known for
//! what it is — the spare `uuid` of the array `array_uuid`, which lists it in its superblock's
//! spare table (§2.1) — and never taken for a member, for foreign data or for free space.
//! 4096 bytes at byte 0 and again at byte 4096 of the device, written one after the other
//! (copy 0, flush, copy 1, flush), as the superblock is: the valid copy with the higher
//! generation is the label.
//!
//! ```text
//! offset size field
//!      0    8 magic "SGSPARE\0"
//!      8    4 version 1
//!     12    4 label bytes 4096
//!     16   16 spare uuid
//!     32   16 array uuid
//!     48    8 generation (every write of the label: one more)
//!     56    8 labelled, Unix seconds
//!     64    8 device bytes when labelled
//!     72 4020 zero
//!   4092    4 CRC-32C of bytes 0..4092
//! ```

use crate::cursor::{id_at, put_u64, seal_tail, u64_at};
use crate::{FormatError, Record, Sequenced};

const LABEL_BYTES_U32: u32 = 4096;
/// Bytes of one copy.
pub const SPARE_LABEL_BYTES: usize = LABEL_BYTES_U32 as usize;
/// Where the two copies are on the device.
pub const SPARE_LABEL_OFFSETS: [u64; 2] = [0, 4096];

/// A spare device's label.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpareLabel {
    /// The spare's own id (in the array's spare table).
    pub spare_uuid: [u8; 16],
    /// The array it is a spare of.
    pub array_uuid: [u8; 16],
    /// One more at every write.
    pub generation: u64,
    /// Unix seconds when it was labelled.
    pub labelled_unix: u64,
    /// The device's bytes then.
    pub device_bytes: u64,
}

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: SpareLabel::NAME,
    why,
};

impl Record for SpareLabel {
    const NAME: &'static str = "spare label";
    const MAGIC: &'static [u8] = b"SGSPARE\0";
    const VERSION: u32 = 1;
    const SIZE: usize = SPARE_LABEL_BYTES;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("a label is 4096 bytes"));
        }
        if self.spare_uuid == [0; 16] || self.array_uuid == [0; 16] {
            return Err(DAMAGED("a zero uuid"));
        }
        crate::put_copy_header::<Self>(b, LABEL_BYTES_U32);
        b[16..32].copy_from_slice(&self.spare_uuid);
        b[32..48].copy_from_slice(&self.array_uuid);
        put_u64(b, 48, self.generation);
        put_u64(b, 56, self.labelled_unix);
        put_u64(b, 64, self.device_bytes);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<SpareLabel>, FormatError> {
        let Some(b) = crate::open_copy::<Self>(b)? else {
            return Ok(None);
        };
        if b[72..SPARE_LABEL_BYTES - 4].iter().any(|&x| x != 0) {
            return Err(DAMAGED("reserved bytes"));
        }
        let label = SpareLabel {
            spare_uuid: id_at(b, 16),
            array_uuid: id_at(b, 32),
            generation: u64_at(b, 48),
            labelled_unix: u64_at(b, 56),
            device_bytes: u64_at(b, 64),
        };
        if label.spare_uuid == [0; 16] || label.array_uuid == [0; 16] {
            return Err(DAMAGED("a zero uuid"));
        }
        Ok(Some(label))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }
}

impl Sequenced for SpareLabel {
    fn sequence(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_round_trips_and_a_flipped_byte_is_damage() {
        let l = SpareLabel {
            spare_uuid: [7; 16],
            array_uuid: [9; 16],
            generation: 3,
            labelled_unix: 1_700_000_000,
            device_bytes: 1 << 30,
        };
        let mut b = l.to_copy(SPARE_LABEL_BYTES).unwrap();
        assert_eq!(SpareLabel::read_copy(&b).unwrap(), Some(l));
        b[40] ^= 1;
        assert!(SpareLabel::read_copy(&b).unwrap_err().is_damage());
        assert_eq!(
            SpareLabel::read_copy(&[0u8; SPARE_LABEL_BYTES]).unwrap(),
            None
        );
    }
}
