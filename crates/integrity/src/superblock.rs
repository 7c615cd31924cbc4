//! The member superblock, byte for byte as in `FORMAT.md` §2.1.

use crate::le::{u16_at, u32_at, u64_at};
use crate::Scheme;
use stripeguard_checksum::crc32c;

/// Bytes in one superblock copy.
pub const SUPERBLOCK_BYTES: usize = 512;
/// Where the two copies live on every member.
pub const SUPERBLOCK_COPY_OFFSETS: [u64; 2] = [0, 4096];
/// Where the data area starts on every member.
pub const DATA_OFFSET_BYTES: u64 = 8192;
const MAGIC: [u8; 8] = *b"SGARRAY\0";
const VERSION: u32 = 1;
const CRC_AT: usize = SUPERBLOCK_BYTES - 4;
/// Largest chunk accepted.
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;

/// The erasure code of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeId {
    /// RAID-5 XOR parity.
    Xor,
    /// Linux md RAID-6 P + Q.
    Raid6,
    /// ISA-L-compatible Cauchy Reed-Solomon.
    Rs,
}

impl CodeId {
    /// On-disk id.
    pub fn id(self) -> u8 {
        match self {
            CodeId::Xor => 1,
            CodeId::Raid6 => 2,
            CodeId::Rs => 3,
        }
    }
    /// From the on-disk id.
    pub fn from_id(id: u8) -> Option<CodeId> {
        [CodeId::Xor, CodeId::Raid6, CodeId::Rs]
            .into_iter()
            .find(|c| c.id() == id)
    }
    /// Name as `stripeguard_codes::by_name` takes it.
    pub fn name(self) -> &'static str {
        match self {
            CodeId::Xor => "xor",
            CodeId::Raid6 => "raid6",
            CodeId::Rs => "rs",
        }
    }
    /// The usual code for `m` parity chunks: xor for 1, raid6 for 2, rs otherwise.
    pub fn for_parity(m: usize) -> CodeId {
        match m {
            1 => CodeId::Xor,
            2 => CodeId::Raid6,
            _ => CodeId::Rs,
        }
    }
}

/// Clean or dirty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayState {
    /// Closed cleanly: parity is consistent with data everywhere.
    Clean,
    /// Open for writing (or crashed while open).
    Dirty,
}

/// A decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Shared by every member of one array.
    pub array_uuid: [u8; 16],
    /// This member's position, `0..members`.
    pub member_index: u16,
    /// `n = k + m`.
    pub members: u16,
    /// `k`.
    pub data_chunks: u16,
    /// `m`.
    pub parity_chunks: u16,
    /// The erasure code.
    pub code: CodeId,
    /// The integrity scheme.
    pub scheme: Scheme,
    /// 9 or 12.
    pub sector_shift: u8,
    /// Clean or dirty.
    pub state: ArrayState,
    /// Chunk size in bytes.
    pub chunk_bytes: u32,
    /// Where unit 0 starts.
    pub data_offset_bytes: u64,
    /// Units per member.
    pub stripes: u64,
    /// Every hybrid-seq sequence number used so far is below this.
    pub sequence_high_water: u64,
    /// Update counter; the valid copy with the highest wins.
    pub generation: u64,
    /// Unix seconds at create.
    pub created_unix_seconds: u64,
}

/// Why bytes are not a valid superblock.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    /// Too short.
    #[error("superblock truncated ({0} bytes)")]
    Truncated(usize),
    /// Not a stripeguard member.
    #[error("no stripeguard superblock (magic not found)")]
    BadMagic,
    /// Written by a newer stripeguard.
    #[error("superblock format version {0} is not supported (this build reads version 1)")]
    Version(u32),
    /// Damaged.
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// In the record.
        stored: u32,
        /// Of the bytes.
        computed: u32,
    },
    /// Fields that cannot describe an array.
    #[error("superblock describes an impossible geometry: {0}")]
    Geometry(&'static str),
}

impl Superblock {
    /// Sector size in bytes.
    pub fn sector_bytes(&self) -> u32 {
        1 << self.sector_shift
    }

    /// Bytes of one unit (chunk + appendix, or chunk alone for `none`).
    pub fn unit_bytes(&self) -> u64 {
        let appendix = if self.scheme.has_appendix() {
            self.sector_bytes() as u64
        } else {
            0
        };
        self.chunk_bytes as u64 + appendix
    }

    /// The member size this superblock needs.
    pub fn member_bytes(&self) -> u64 {
        self.data_offset_bytes + self.stripes * self.unit_bytes()
    }

    /// Check the geometry fields; used by both `create` and the decoder.
    pub fn validate(&self) -> Result<(), SuperblockError> {
        let g = SuperblockError::Geometry;
        if self.data_chunks == 0 || self.parity_chunks == 0 {
            return Err(g("k and m must both be at least 1"));
        }
        if self.data_chunks as u32 + self.parity_chunks as u32 != self.members as u32 {
            return Err(g("members != data chunks + parity chunks"));
        }
        if self.members > 255 {
            return Err(g("more than 255 members"));
        }
        if self.member_index >= self.members {
            return Err(g("member index out of range"));
        }
        match (self.code, self.parity_chunks) {
            (CodeId::Xor, 1) | (CodeId::Raid6, 2) | (CodeId::Rs, _) => {}
            (CodeId::Xor, _) => return Err(g("xor needs exactly one parity chunk")),
            (CodeId::Raid6, _) => return Err(g("raid6 needs exactly two parity chunks")),
        }
        if self.sector_shift != 9 && self.sector_shift != 12 {
            return Err(g("sector size must be 512 or 4096 bytes"));
        }
        let sector = self.sector_bytes();
        if self.chunk_bytes == 0
            || !self.chunk_bytes.is_multiple_of(sector)
            || self.chunk_bytes > MAX_CHUNK_BYTES
        {
            return Err(g(
                "chunk size must be a non-zero multiple of the sector size, at most 16 MiB",
            ));
        }
        let needed = crate::APPENDIX_HEADER_BYTES
            + self.scheme.entry_bytes() * self.data_chunks as usize
            + 4;
        if self.scheme.has_appendix() && needed > sector as usize {
            return Err(g(
                "the parity appendix cannot hold one entry per data chunk in one sector; use 4096-byte sectors or fewer data chunks",
            ));
        }
        if self.data_offset_bytes < DATA_OFFSET_BYTES
            || !self.data_offset_bytes.is_multiple_of(sector as u64)
        {
            return Err(g(
                "data offset overlaps the superblocks or is not sector-aligned",
            ));
        }
        if self.stripes == 0 {
            return Err(g("no stripes"));
        }
        self.stripes
            .checked_mul(self.unit_bytes())
            .and_then(|b| b.checked_add(self.data_offset_bytes))
            .ok_or(g("member size overflows 64 bits"))?;
        Ok(())
    }

    /// Serialize one copy.
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SUPERBLOCK_BYTES as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.array_uuid);
        b[32..34].copy_from_slice(&self.member_index.to_le_bytes());
        b[34..36].copy_from_slice(&self.members.to_le_bytes());
        b[36..38].copy_from_slice(&self.data_chunks.to_le_bytes());
        b[38..40].copy_from_slice(&self.parity_chunks.to_le_bytes());
        b[40] = self.code.id();
        b[41] = self.scheme.id();
        b[42] = self.sector_shift;
        b[43] = match self.state {
            ArrayState::Clean => 0,
            ArrayState::Dirty => 1,
        };
        b[44..48].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset_bytes.to_le_bytes());
        b[56..64].copy_from_slice(&self.stripes.to_le_bytes());
        b[64..72].copy_from_slice(&self.sequence_high_water.to_le_bytes());
        b[72..80].copy_from_slice(&self.generation.to_le_bytes());
        b[80..88].copy_from_slice(&self.created_unix_seconds.to_le_bytes());
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse one copy. Never panics.
    pub fn decode(b: &[u8]) -> Result<Superblock, SuperblockError> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(SuperblockError::Truncated(b.len()));
        }
        if b[0..8] != MAGIC {
            return Err(SuperblockError::BadMagic);
        }
        let version = u32_at(b, 8);
        if version != VERSION || u32_at(b, 12) != SUPERBLOCK_BYTES as u32 {
            return Err(SuperblockError::Version(version));
        }
        let stored = u32_at(b, CRC_AT);
        let computed = crc32c(&b[..CRC_AT]);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let sb = Superblock {
            array_uuid: b[16..32].try_into().expect("16 bytes"),
            member_index: u16_at(b, 32),
            members: u16_at(b, 34),
            data_chunks: u16_at(b, 36),
            parity_chunks: u16_at(b, 38),
            code: CodeId::from_id(b[40]).ok_or(SuperblockError::Geometry("unknown code id"))?,
            scheme: Scheme::from_id(b[41]).ok_or(SuperblockError::Geometry("unknown scheme id"))?,
            sector_shift: b[42],
            state: match b[43] {
                0 => ArrayState::Clean,
                1 => ArrayState::Dirty,
                _ => return Err(SuperblockError::Geometry("unknown state")),
            },
            chunk_bytes: u32_at(b, 44),
            data_offset_bytes: u64_at(b, 48),
            stripes: u64_at(b, 56),
            sequence_high_water: u64_at(b, 64),
            generation: u64_at(b, 72),
            created_unix_seconds: u64_at(b, 80),
        };
        sb.validate()?;
        Ok(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> Superblock {
        Superblock {
            array_uuid: [9; 16],
            member_index: 3,
            members: 8,
            data_chunks: 6,
            parity_chunks: 2,
            code: CodeId::Raid6,
            scheme: Scheme::Hybrid2,
            sector_shift: 9,
            state: ArrayState::Dirty,
            chunk_bytes: 4096,
            data_offset_bytes: DATA_OFFSET_BYTES,
            stripes: 1000,
            sequence_high_water: 1 << 20,
            generation: 7,
            created_unix_seconds: 1_700_000_000,
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb));
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let b = sample().encode();
        for bit in 0..SUPERBLOCK_BYTES * 8 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn impossible_geometry_is_rejected_even_with_a_good_crc() {
        let mut sb = sample();
        sb.members = 9;
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SuperblockError::Geometry(_))
        ));
    }

    proptest! {
        #[test]
        fn random_and_truncated_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Superblock::decode(&bytes);
        }

        #[test]
        fn truncations_of_a_valid_record_are_rejected(len in 0usize..SUPERBLOCK_BYTES) {
            let b = sample().encode();
            prop_assert!(Superblock::decode(&b[..len]).is_err());
        }
    }
}
