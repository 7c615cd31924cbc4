//! The checkpoint record (FORMAT.md §2.3): where a scrub and a rebuild stand, so an interrupted
//! one resumes. Two 2048-byte slots at byte 12288 of every member, written alternately.
//!
//! ```text
//! offset size field
//!      0    8 magic "SGCHKPT\0"
//!      8    4 version 1
//!     12    4 slot bytes 2048
//!     16    8 sequence
//!     24    1 scrub: 0 never ran, 1 running or interrupted, 2 finished; 25..32 zero
//!     32    8 next stripe to scrub
//!     40    8 stripes in the array
//!     48    8 scrub started, Unix seconds
//!     56    8 record written, Unix seconds
//!     64    8 units found wrong
//!     72    8 units repaired
//!     80    8 stripes unrecoverable
//!     88    8 mismatches (`none`)
//!     96    2 member a replace rebuilds (0xffff: none)
//!     98    1 rebuild: 0 none, 1 running, 2 finished; 99..104 zero
//!    104    8 next stripe to rebuild
//!    112    8 rebuild started, Unix seconds
//!    120   16 rebuild target id (shared with the target device's own checkpoint)
//!    136    1 reshape: 0 none, 1 running or interrupted, 2 finished
//!    137    1 reshape backup: 0 none, 1 the critical section's backup is durable
//!    138    1 reshape finishing: 1 the stripe-state record may already be the new geometry's
//!    139    1 reshape online: 1 clients wrote through the array while it ran
//!    140    4 reshape id (the superblock's, §2.1 bytes 148..152)
//!    144    8 new stripes committed (the reshape's window starts here)
//!    152    8 new stripes that hold data
//!    160    8 reshape started, Unix seconds
//!    168    8 chunks in the backup
//!    176    4 CRC-32C of the backup's chunks, in order
//!    180    4 zero
//!    184    8 units the reshape's reads repaired
//!    192    4 zero-stripe ranges of the new geometry listed below (at most 100)
//!    196    4 zero
//!    200 1600 the ranges: first stripe, end (exclusive), 8 bytes each
//!   1800  244 zero
//!   2044    4 CRC-32C of bytes 0..2044
//! ```

use crate::cursor::{id_at, put_u16, put_u64, seal_tail, u16_at, u64_at};
use crate::{FormatError, Record, Sequenced};

const SLOT_BYTES_U32: u32 = 2048;
/// Bytes of one slot.
pub const CHECKPOINT_SLOT_BYTES: usize = SLOT_BYTES_U32 as usize;

/// Where a scrub and a rebuild stand (one slot of the checkpoint record).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Checkpoint {
    /// Incremented on every write.
    pub sequence: u64,
    /// A scrub ran (or is running).
    pub scrub_ran: bool,
    /// The scrub finished (else running or interrupted).
    pub finished: bool,
    /// First stripe not yet scrubbed.
    pub next_stripe: u64,
    /// Stripes in the array.
    pub stripes: u64,
    /// Unix seconds at the start.
    pub started_unix: u64,
    /// Unix seconds of the record (the end, when finished).
    pub updated_unix: u64,
    /// Units found wrong.
    pub found: u64,
    /// Units repaired.
    pub repaired: u64,
    /// Stripes that could not be repaired.
    pub unrecoverable: u64,
    /// `none`: stripes whose parity disagrees.
    pub mismatches: u64,
    /// The member a replace is rebuilding.
    pub rebuild_member: Option<u16>,
    /// The rebuild finished.
    pub rebuild_finished: bool,
    /// First stripe not yet rebuilt.
    pub rebuild_next: u64,
    /// Unix seconds the rebuild started.
    pub rebuild_started_unix: u64,
    /// Random id shared with the rebuild's target device.
    #[serde(skip)]
    pub rebuild_target: [u8; 16],
    /// Where a reshape stands (`grow --add`), when one ran.
    pub reshape: Option<ReshapeProgress>,
}

/// How far a reshape has moved the data (the checkpoint record's bytes 136..192).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReshapeProgress {
    /// Every new stripe is written and the new geometry committed.
    pub finished: bool,
    /// The critical section's chunks are in the backup, durably.
    pub backed_up: bool,
    /// New stripes committed.
    pub done: u64,
    /// New stripes that hold data.
    pub stripes: u64,
    /// Unix seconds at the start.
    pub started_unix: u64,
    /// Chunks in the backup.
    pub backup_chunks: u64,
    /// CRC-32C of the backup's chunks, in order.
    pub backup_crc: u32,
    /// Units the reshape's reads found wrong and repaired.
    pub repaired: u64,
    /// The reshape this is the progress of (the superblock's reshape id).
    pub id: u32,
    /// The finish has begun: the stripe-state record may already be the new geometry's, and
    /// `zero` is what it lists.
    pub finishing: bool,
    /// The new geometry's zero stripes among those committed, listed step by step, and from
    /// the finish on the stripes past the data too (at most [`RESHAPE_ZERO_RANGES`]).
    pub zero: Vec<(u64, u64)>,
    /// Clients read and wrote the array through both geometries while it ran (an online
    /// reshape, whose writes set no write-intent bit): a run that continues it after a crash
    /// resyncs every stripe of both first.
    pub online: bool,
}

/// Zero-stripe ranges the checkpoint record holds for a reshape's finish.
pub const RESHAPE_ZERO_RANGES: usize = 100;

const DAMAGED: fn(&'static str) -> FormatError = |why| FormatError::Damaged {
    record: Checkpoint::NAME,
    why,
};

impl Record for Checkpoint {
    const NAME: &'static str = "checkpoint record";
    const MAGIC: &'static [u8] = b"SGCHKPT\0";
    const VERSION: u32 = 1;
    const SIZE: usize = CHECKPOINT_SLOT_BYTES;
    type Error = FormatError;

    fn write_copy(&self, b: &mut [u8]) -> Result<(), FormatError> {
        if b.len() != Self::SIZE {
            return Err(DAMAGED("a slot is 2048 bytes"));
        }
        crate::put_copy_header::<Self>(b, SLOT_BYTES_U32);
        put_u64(b, 16, self.sequence);
        b[24] = match (self.scrub_ran, self.finished) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let fields = [
            self.next_stripe,
            self.stripes,
            self.started_unix,
            self.updated_unix,
            self.found,
            self.repaired,
            self.unrecoverable,
            self.mismatches,
        ];
        for (i, v) in fields.iter().enumerate() {
            put_u64(b, 32 + 8 * i, *v);
        }
        put_u16(b, 96, self.rebuild_member.unwrap_or(u16::MAX));
        b[98] = match (self.rebuild_member, self.rebuild_finished) {
            (None, _) => 0,
            (Some(_), false) => 1,
            (Some(_), true) => 2,
        };
        put_u64(b, 104, self.rebuild_next);
        put_u64(b, 112, self.rebuild_started_unix);
        b[120..136].copy_from_slice(&self.rebuild_target);
        if let Some(r) = &self.reshape {
            b[136] = if r.finished { 2 } else { 1 };
            b[137] = u8::from(r.backed_up);
            put_u64(b, 144, r.done);
            put_u64(b, 152, r.stripes);
            put_u64(b, 160, r.started_unix);
            put_u64(b, 168, r.backup_chunks);
            b[176..180].copy_from_slice(&r.backup_crc.to_le_bytes());
            put_u64(b, 184, r.repaired);
            b[138] = u8::from(r.finishing);
            b[139] = u8::from(r.online);
            b[140..144].copy_from_slice(&r.id.to_le_bytes());
            let zero = &r.zero[..r.zero.len().min(RESHAPE_ZERO_RANGES)];
            b[192..196].copy_from_slice(&u32::try_from(zero.len()).unwrap_or(0).to_le_bytes());
            for (i, &(lo, hi)) in zero.iter().enumerate() {
                put_u64(b, 200 + 16 * i, lo);
                put_u64(b, 208 + 16 * i, hi);
            }
        }
        seal_tail(b);
        Ok(())
    }

    fn read_copy(b: &[u8]) -> Result<Option<Checkpoint>, FormatError> {
        let Some(b) = crate::open_copy::<Self>(b)? else {
            return Ok(None);
        };
        let (scrub_ran, finished) = match b[24] {
            0 => (false, false),
            1 => (true, false),
            2 => (true, true),
            _ => return Err(DAMAGED("scrub state")),
        };
        let member = u16_at(b, 96);
        let (rebuild_member, rebuild_finished) = match b[98] {
            0 => (None, false),
            1 => (Some(member), false),
            2 => (Some(member), true),
            _ => return Err(DAMAGED("rebuild state")),
        };
        let reshape = match b[136] {
            0 => None,
            state @ (1 | 2) => {
                if b[137] > 1 || b[138] > 1 || b[139] > 1 {
                    return Err(DAMAGED("reshape backup, finishing or online state"));
                }
                let count = usize::try_from(u32::from_le_bytes([b[192], b[193], b[194], b[195]]))
                    .unwrap_or(usize::MAX);
                if count > RESHAPE_ZERO_RANGES {
                    return Err(DAMAGED("reshape zero-stripe range count"));
                }
                let zero: Vec<(u64, u64)> = (0..count)
                    .map(|i| (u64_at(b, 200 + 16 * i), u64_at(b, 208 + 16 * i)))
                    .collect();
                Some(ReshapeProgress {
                    finished: state == 2,
                    backed_up: b[137] == 1,
                    done: u64_at(b, 144),
                    stripes: u64_at(b, 152),
                    started_unix: u64_at(b, 160),
                    backup_chunks: u64_at(b, 168),
                    backup_crc: u32::from_le_bytes([b[176], b[177], b[178], b[179]]),
                    repaired: u64_at(b, 184),
                    finishing: b[138] == 1,
                    id: u32::from_le_bytes([b[140], b[141], b[142], b[143]]),
                    zero,
                    online: b[139] == 1,
                })
            }
            _ => return Err(DAMAGED("reshape state")),
        };
        Ok(Some(Checkpoint {
            sequence: u64_at(b, 16),
            scrub_ran,
            finished,
            next_stripe: u64_at(b, 32),
            stripes: u64_at(b, 40),
            started_unix: u64_at(b, 48),
            updated_unix: u64_at(b, 56),
            found: u64_at(b, 64),
            repaired: u64_at(b, 72),
            unrecoverable: u64_at(b, 80),
            mismatches: u64_at(b, 88),
            rebuild_member,
            rebuild_finished,
            rebuild_next: u64_at(b, 104),
            rebuild_started_unix: u64_at(b, 112),
            rebuild_target: id_at(b, 120),
            reshape,
        }))
    }

    fn reseal(b: &mut [u8]) {
        seal_tail(b);
    }
}

impl Sequenced for Checkpoint {
    fn sequence(&self) -> u64 {
        self.sequence
    }
}
