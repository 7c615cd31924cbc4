//! The checksum chunk's table (Kroth & Yang's RAID5C/RAID6C, `papers/001_…`; FORMAT.md §2.10).
//!
//! An array of the `checksum-chunk` scheme has one member more than data and parity: the
//! checksum member. Its unit of stripe `s` (at the same offset as every member's unit `s`)
//! begins with this table: the CRC-32C of every checksum block (`b`, 4 KiB; the chunk when it
//! is not a larger multiple of 4 KiB) of every data and parity unit of the stripe. Data and
//! parity units carry no appendix: a unit is its chunk, as in `none`.
//!
//! ```text
//! offset  bytes      field
//!      0  4          magic "SGCK"
//!      4  2          layout, 1
//!      6  2          U, units covered (k + m; stripe positions: 0..k data, k..k+m parity)
//!      8  4          B, blocks per unit (chunk / b)
//!     12  4          reserved, 0
//!     16  8          stripe number (identity: a table written to another stripe's place)
//!     24  16         array uuid (identity: a table of another array)
//!     40  8          writes of this table (wrapping; informational)
//!     48  4·U·B      CRC-32C of block j of unit u at 48 + 4·(u·B + j)
//!  48+4UB 4          CRC-32C of bytes 0 .. 48+4UB
//! ```
//! The table is read and written as its first `T` bytes of the unit: `48 + 4·U·B + 4` rounded
//! up to `b` (one 4 KiB block for a 6+2 array of 64 KiB chunks; it must fit in the chunk).
//!
//! What it proves: a torn table or one written elsewhere fails its own CRC or identity and is
//! rebuilt from the stripe when the parity agrees with the data; a lost table write leaves a
//! self-consistent older table that disagrees with the newer data and parity — the parity then
//! agrees with the data, so the table is the stale one. A lost write of a data unit *and* its
//! table together leaves both old and consistent with each other: the one fault this layout
//! cannot see (Kroth & Yang say so; a test shows it).

use crate::cursor::{u16_at, u32_at, u64_at};

/// Bytes before the CRC list.
pub const CK_HEADER_BYTES: usize = 48;

const MAGIC: &[u8; 4] = b"SGCK";
const LAYOUT: u16 = 1;

/// Bytes the table itself fills (header, CRCs, its own CRC); the rest of the unit is zero.
pub fn used_bytes(units: usize, blocks: usize) -> usize {
    CK_HEADER_BYTES + 4 * units * blocks + 4
}

/// `T`: bytes of the table as read and written, for `units` units of `chunk` bytes.
pub fn table_bytes(units: usize, chunk: u32) -> usize {
    let b = crate::block_bytes_for(chunk).max(1) as usize;
    let blocks = chunk as usize / b;
    used_bytes(units, blocks).div_ceil(b) * b
}

/// One stripe's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CkTable {
    pub stripe: u64,
    pub uuid: [u8; 16],
    pub writes: u64,
    pub units: usize,
    pub blocks: usize,
    /// Unit-major: `crcs[u * blocks + j]`.
    pub crcs: Vec<u32>,
}

/// Why bytes are not a valid table for the stripe asked about.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CkError {
    #[error("not a checksum-chunk table (bad magic)")]
    Magic,
    #[error("checksum-chunk table of layout {0}")]
    Layout(u16),
    #[error("checksum-chunk table for {units} units of {blocks} blocks where {want_units} of {want_blocks} are due")]
    Shape {
        units: usize,
        blocks: usize,
        want_units: usize,
        want_blocks: usize,
    },
    #[error("checksum-chunk table fails its own CRC (torn)")]
    Crc,
    #[error("checksum-chunk table of stripe {0} (misdirected)")]
    Stripe(u64),
    #[error("checksum-chunk table of another array")]
    Uuid,
    #[error("checksum-chunk table truncated")]
    Short,
    #[error("checksum-chunk table with a non-zero reserved field")]
    Reserved,
}

impl CkTable {
    /// A table of `units` × `blocks` CRCs, all zero.
    pub fn new(stripe: u64, uuid: [u8; 16], units: usize, blocks: usize) -> CkTable {
        CkTable {
            stripe,
            uuid,
            writes: 0,
            units,
            blocks,
            crcs: vec![0; units * blocks],
        }
    }

    /// The CRC of block `j` of unit `u`.
    pub fn crc(&self, u: usize, j: usize) -> u32 {
        self.crcs[u * self.blocks + j]
    }

    /// Set the CRCs of unit `u`'s blocks `first..` from `bytes` (whole blocks of `b` bytes).
    pub fn set_blocks(&mut self, u: usize, first: usize, bytes: &[u8], b: usize) {
        for (i, blk) in bytes.chunks(b).enumerate() {
            self.crcs[u * self.blocks + first + i] = stripeguard_checksum::crc32c(blk);
        }
    }

    /// The blocks `first..` of unit `u` in `bytes` whose CRC differs from the table's.
    pub fn mismatches(&self, u: usize, first: usize, bytes: &[u8], b: usize) -> Vec<usize> {
        bytes
            .chunks(b)
            .enumerate()
            .filter(|(i, blk)| stripeguard_checksum::crc32c(blk) != self.crc(u, first + i))
            .map(|(i, _)| first + i)
            .collect()
    }

    /// Encode into `out` (at least [`table_bytes`] long; the rest is zeroed).
    pub fn encode(&self, out: &mut [u8]) {
        let end = CK_HEADER_BYTES + 4 * self.crcs.len();
        out.fill(0);
        out[0..4].copy_from_slice(MAGIC);
        out[4..6].copy_from_slice(&LAYOUT.to_le_bytes());
        let units = u16::try_from(self.units).expect("a stripe has at most 255 units");
        let blocks = u32::try_from(self.blocks).expect("a chunk has at most 4096 blocks");
        out[6..8].copy_from_slice(&units.to_le_bytes());
        out[8..12].copy_from_slice(&blocks.to_le_bytes());
        out[16..24].copy_from_slice(&self.stripe.to_le_bytes());
        out[24..40].copy_from_slice(&self.uuid);
        out[40..48].copy_from_slice(&self.writes.to_le_bytes());
        for (i, c) in self.crcs.iter().enumerate() {
            let at = CK_HEADER_BYTES + 4 * i;
            out[at..at + 4].copy_from_slice(&c.to_le_bytes());
        }
        let crc = stripeguard_checksum::crc32c(&out[..end]);
        out[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode the table of `stripe` of array `uuid` with `units` × `blocks` CRCs from `b`.
    /// Never panics.
    pub fn decode(
        b: &[u8],
        stripe: u64,
        uuid: &[u8; 16],
        units: usize,
        blocks: usize,
    ) -> Result<CkTable, CkError> {
        if b.len() < CK_HEADER_BYTES {
            return Err(CkError::Short);
        }
        if &b[0..4] != MAGIC {
            return Err(CkError::Magic);
        }
        let layout = u16_at(b, 4);
        if layout != LAYOUT {
            return Err(CkError::Layout(layout));
        }
        if u32_at(b, 12) != 0 {
            return Err(CkError::Reserved);
        }
        let (u, bl) = (u16_at(b, 6) as usize, u32_at(b, 8) as usize);
        if (u, bl) != (units, blocks) {
            return Err(CkError::Shape {
                units: u,
                blocks: bl,
                want_units: units,
                want_blocks: blocks,
            });
        }
        let end = CK_HEADER_BYTES + 4 * units * blocks;
        if b.len() < end + 4 {
            return Err(CkError::Short);
        }
        if stripeguard_checksum::crc32c(&b[..end]) != u32_at(b, end) {
            return Err(CkError::Crc);
        }
        let s = u64_at(b, 16);
        if s != stripe {
            return Err(CkError::Stripe(s));
        }
        if &b[24..40] != uuid {
            return Err(CkError::Uuid);
        }
        Ok(CkTable {
            stripe,
            uuid: *uuid,
            writes: u64_at(b, 40),
            units,
            blocks,
            crcs: (0..units * blocks)
                .map(|i| u32_at(b, CK_HEADER_BYTES + 4 * i))
                .collect(),
        })
    }
}

impl crate::Record for CkTable {
    const NAME: &'static str = "checksum-chunk table";
    const MAGIC: &'static [u8] = MAGIC;
    const VERSION: u32 = LAYOUT as u32;
    const SIZE: usize = 0;
    type Error = CkError;

    fn write_copy(&self, out: &mut [u8]) -> Result<(), CkError> {
        if out.len() < used_bytes(self.units, self.blocks)
            || self.crcs.len() != self.units * self.blocks
        {
            return Err(CkError::Short);
        }
        self.encode(out);
        Ok(())
    }

    /// The table on its own: its shape, stripe and array are taken from its header (a reader
    /// of a stripe checks them against what it expects with [`CkTable::decode`]).
    fn read_copy(b: &[u8]) -> Result<Option<CkTable>, CkError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if b.len() < CK_HEADER_BYTES {
            return Err(CkError::Short);
        }
        let uuid = crate::cursor::id_at(b, 24);
        CkTable::decode(
            b,
            u64_at(b, 16),
            &uuid,
            u16_at(b, 6) as usize,
            u32_at(b, 8) as usize,
        )
        .map(Some)
    }

    fn reseal(b: &mut [u8]) {
        if b.len() < CK_HEADER_BYTES {
            return;
        }
        let end = CK_HEADER_BYTES.saturating_add(
            (u16_at(b, 6) as usize)
                .saturating_mul(u32_at(b, 8) as usize)
                .saturating_mul(4),
        );
        if end.saturating_add(4) <= b.len() {
            let crc = stripeguard_checksum::crc32c(&b[..end]);
            b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_refused() {
        let uuid = [7u8; 16];
        let mut t = CkTable::new(42, uuid, 8, 16);
        t.writes = 3;
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
        t.set_blocks(2, 0, &data, 4096);
        let n = table_bytes(8, 65536);
        assert_eq!(n, 4096);
        let mut b = vec![0xffu8; n];
        t.encode(&mut b);
        assert_eq!(CkTable::decode(&b, 42, &uuid, 8, 16), Ok(t.clone()));
        assert!(t.mismatches(2, 0, &data, 4096).is_empty());
        let mut other = data.clone();
        other[5000] ^= 1;
        assert_eq!(t.mismatches(2, 0, &other, 4096), vec![1]);
        assert_eq!(
            CkTable::decode(&b, 43, &uuid, 8, 16),
            Err(CkError::Stripe(42))
        );
        assert_eq!(CkTable::decode(&b, 42, &[0; 16], 8, 16), Err(CkError::Uuid));
        let mut reserved = b.clone();
        reserved[12] = 1;
        assert_eq!(
            CkTable::decode(&reserved, 42, &uuid, 8, 16),
            Err(CkError::Reserved)
        );
        for at in [0, 5, 7, 100, CK_HEADER_BYTES + 4 * 128] {
            let mut bad = b.clone();
            bad[at] ^= 0x10;
            assert!(
                CkTable::decode(&bad, 42, &uuid, 8, 16).is_err(),
                "flip at {at}"
            );
        }
        for len in [0, 10, 47, 100, 560] {
            assert!(CkTable::decode(&b[..len], 42, &uuid, 8, 16).is_err());
        }
        // Large chunks: 16 MiB, 8 units -> 128 KiB + a block.
        assert_eq!(table_bytes(8, 16 << 20), 135168);
        assert_eq!(table_bytes(3, 4096), 4096);
    }
}
