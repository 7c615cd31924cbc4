//! The journal device label (FORMAT.md §2.12): what a device holding an array's write journal
//! on faster media carries — the array, its own uuid (the superblock lists it), its place in the
//! mirror and the slots after it. 4096 bytes at byte 0 and again at byte 4096, written one
//! after the other (copy 0, flush, copy 1, flush); the valid copy with the higher generation
//! is the label. Slot `j` of the device starts at `8192 + j * (4096 + U)` and holds a journal
//! record exactly as a member's slot does (§2.6).
//!
//! ```text
//! offset size field
//!      0    8 magic "SGJDEV\0\0"
//!      8    4 version 1
//!     12    4 label bytes 4096
//!     16   16 device uuid
//!     32   16 array uuid
//!     48    8 generation (every write of the label: one more)
//!     56    4 slots on the device (1..4096, at least the superblock's J)
//!     60    4 mirror index (0 or 1)
//!     64    8 slot bytes (4096 + U)
//!     72 4020 zero
//!   4092    4 CRC-32C of bytes 0..4092
//! ```

use crate::cursor::{id_at, put_u32, put_u64, seal_tail, u32_at, u64_at};
use crate::{FormatError, Record, Sequenced};

const LABEL_BYTES_U32: u32 = 4096;
/// Bytes of one copy.
pub const JDEV_LABEL_BYTES: usize = LABEL_BYTES_U32 as usize;
/// Where the two copies are on the device.
pub const JDEV_LABEL_OFFSETS: [u64; 2] = [0, 4096];
/// Where slot 0 starts on a journal device.
pub const JDEV_SLOTS_AT: u64 = 8192;
/// Journal devices an array keeps at most (a mirror of two).
pub const MAX_JOURNAL_DEVICES: usize = 2;

/// A journal device's label.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JournalDeviceLabel {
    /// The device's own id (listed in the array's superblock).
    pub device_uuid: [u8; 16],
    /// The array whose journal it holds.
    pub array_uuid: [u8; 16],
    /// One more at every write.
    pub generation: u64,
    /// Journal slots on it (its own count: at least the superblock's `J`).
    pub slots: u32,
    /// Its place in the mirror.
    pub mirror_index: u32,
    /// Bytes of one slot (a 4096-byte header and one unit).
    pub slot_bytes: u64,
}

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: JournalDeviceLabel::NAME,
    why,
};

impl JournalDeviceLabel {
    /// Bytes a device needs for this label and its slots.
    pub fn device_bytes(&self) -> u64 {
        JDEV_SLOTS_AT.saturating_add(u64::from(self.slots).saturating_mul(self.slot_bytes))
    }

    /// Where slot `slot` starts.
    pub fn slot_offset(&self, slot: usize) -> u64 {
        JDEV_SLOTS_AT + slot as u64 * self.slot_bytes
    }
}

impl Record for JournalDeviceLabel {
    const NAME: &'static str = "journal device label";
    const MAGIC: &'static [u8] = b"SGJDEV\0\0";
    const VERSION: u32 = 1;
    const SIZE: usize = JDEV_LABEL_BYTES;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("a label is 4096 bytes"));
        }
        if self.device_uuid == [0; 16] || self.array_uuid == [0; 16] {
            return Err(DAMAGED("a zero uuid"));
        }
        crate::put_copy_header::<Self>(b, LABEL_BYTES_U32);
        b[16..32].copy_from_slice(&self.device_uuid);
        b[32..48].copy_from_slice(&self.array_uuid);
        put_u64(b, 48, self.generation);
        put_u32(b, 56, self.slots);
        put_u32(b, 60, self.mirror_index);
        put_u64(b, 64, self.slot_bytes);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<JournalDeviceLabel>, FormatError> {
        let Some(b) = crate::open_copy::<Self>(b)? else {
            return Ok(None);
        };
        if b[72..JDEV_LABEL_BYTES - 4].iter().any(|&x| x != 0) {
            return Err(DAMAGED("reserved bytes"));
        }
        let l = JournalDeviceLabel {
            device_uuid: id_at(b, 16),
            array_uuid: id_at(b, 32),
            generation: u64_at(b, 48),
            slots: u32_at(b, 56),
            mirror_index: u32_at(b, 60),
            slot_bytes: u64_at(b, 64),
        };
        if l.device_uuid == [0; 16] || l.array_uuid == [0; 16] {
            return Err(DAMAGED("a zero uuid"));
        }
        if l.slots == 0
            || l.slots > 4096
            || l.mirror_index as usize >= MAX_JOURNAL_DEVICES
            || l.slot_bytes <= 4096
            || l.slot_bytes > 4096 + (1 << 25)
        {
            return Err(DAMAGED("slots, mirror index or slot size out of range"));
        }
        Ok(Some(l))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }
}

impl Sequenced for JournalDeviceLabel {
    fn sequence(&self) -> u64 {
        self.generation
    }
}
