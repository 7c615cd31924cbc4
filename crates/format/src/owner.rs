//! The owner record (FORMAT.md §2.2): who holds the array for writing, for members `flock` cannot
//! protect. Two 2048-byte slots at byte 8192 of every member, written alternately.
//!
//! ```text
//! offset size field
//!      0    8 magic "SGOWNER\0"
//!      8    4 version 1
//!     12    4 slot bytes 2048
//!     16    8 sequence
//!     24    1 held (1) or free (0); 25..28 zero
//!     28    4 pid
//!     32   16 boot id of the holder's host
//!     48   16 holder id (random per assembly)
//!     64    8 acquired, Unix ms
//!     72    8 last heartbeat, Unix ms
//!     80    4 heartbeat interval, ms; 84..88 zero
//!     88   64 host name, UTF-8, NUL-padded
//!    152  256 command line, UTF-8, NUL-padded; 408..2044 zero
//!   2044    4 CRC-32C of bytes 0..2044
//! ```

use crate::cursor::{id_at, put_text, put_u32, put_u64, seal_tail, text_at, u32_at, u64_at};
use crate::{FormatError, Record, Sequenced};

const SLOT_BYTES_U32: u32 = 2048;
/// Bytes of one slot.
pub const OWNER_SLOT_BYTES: usize = SLOT_BYTES_U32 as usize;

/// One slot of the owner record.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Owner {
    /// Incremented on every write.
    pub sequence: u64,
    /// Held (else free).
    pub held: bool,
    /// Holder's process id.
    pub pid: u32,
    /// Holder host's boot id.
    #[serde(skip)]
    pub boot_id: [u8; 16],
    /// Random per assembly.
    #[serde(skip)]
    pub holder_id: [u8; 16],
    /// Unix ms.
    pub acquired_ms: u64,
    /// Unix ms.
    pub heartbeat_ms: u64,
    /// Heartbeat interval.
    pub interval_ms: u32,
    /// Host name.
    pub host: String,
    /// Command line.
    pub command: String,
}

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: Owner::NAME,
    why,
};

impl Record for Owner {
    const NAME: &'static str = "owner record";
    const MAGIC: &'static [u8] = b"SGOWNER\0";
    const VERSION: u32 = 1;
    const SIZE: usize = OWNER_SLOT_BYTES;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("a slot is 2048 bytes"));
        }
        crate::put_copy_header::<Self>(b, SLOT_BYTES_U32);
        put_u64(b, 16, self.sequence);
        b[24] = u8::from(self.held);
        put_u32(b, 28, self.pid);
        b[32..48].copy_from_slice(&self.boot_id);
        b[48..64].copy_from_slice(&self.holder_id);
        put_u64(b, 64, self.acquired_ms);
        put_u64(b, 72, self.heartbeat_ms);
        put_u32(b, 80, self.interval_ms);
        put_text(&mut b[88..152], &self.host);
        put_text(&mut b[152..408], &self.command);
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<Owner>, FormatError> {
        let Some(b) = crate::open_copy::<Self>(b)? else {
            return Ok(None);
        };
        if b[24] > 1 {
            return Err(DAMAGED("held is neither 0 nor 1"));
        }
        Ok(Some(Owner {
            sequence: u64_at(b, 16),
            held: b[24] == 1,
            pid: u32_at(b, 28),
            boot_id: id_at(b, 32),
            holder_id: id_at(b, 48),
            acquired_ms: u64_at(b, 64),
            heartbeat_ms: u64_at(b, 72),
            interval_ms: u32_at(b, 80),
            host: text_at(&b[88..152]),
            command: text_at(&b[152..408]),
        }))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }
}

impl Sequenced for Owner {
    fn sequence(&self) -> u64 {
        self.sequence
    }
}
