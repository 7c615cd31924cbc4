//! The shard header, byte for byte as in `FORMAT.md` section 1. Decoding never panics on any
//! input: it returns `None` for anything that is not a valid version-1 header.

use crate::cursor::{id_at, u16_at, u32_at, u64_at};
use stripeguard_checksum::crc32c;

const HEADER_BYTES_U16: u16 = 128;
/// Bytes in a header.
pub const HEADER_BYTES: usize = HEADER_BYTES_U16 as usize;
/// Magic at offset 0.
pub const MAGIC: [u8; 8] = *b"SGSHARD\0";
/// The only version written and read.
pub const VERSION: u16 = 1;
/// Code id of ISA-L-compatible Cauchy Reed-Solomon.
pub const CODE_RS_CAUCHY: u8 = 1;
/// Largest block size accepted.
pub const MAX_BLOCK_BYTES: u32 = 64 << 20;
const NAME_BYTES: usize = 56;

/// A decoded shard header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Data shards.
    pub k: u16,
    /// Parity shards.
    pub m: u16,
    /// This shard.
    pub index: u16,
    /// Block size `B`.
    pub block_bytes: u32,
    /// Length of the original file.
    pub file_bytes: u64,
    /// Random id shared by one encoding's shards.
    pub set_id: [u8; 16],
    /// Stripes `S`.
    pub stripes: u64,
    /// CRC-32C of all block records.
    pub payload_crc: u32,
    /// Base name of the original file.
    pub file_name: String,
}

impl Header {
    /// Record size: a block and its CRC.
    pub fn record_bytes(&self) -> u64 {
        self.block_bytes as u64 + 4
    }

    /// Length of a complete shard file.
    pub fn file_len(&self) -> u64 {
        HEADER_BYTES as u64 + self.stripes * self.record_bytes()
    }

    /// Serialize.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[10..12].copy_from_slice(&HEADER_BYTES_U16.to_le_bytes());
        h[12] = CODE_RS_CAUCHY;
        h[14..16].copy_from_slice(&self.k.to_le_bytes());
        h[16..18].copy_from_slice(&self.m.to_le_bytes());
        h[18..20].copy_from_slice(&self.index.to_le_bytes());
        h[20..24].copy_from_slice(&self.block_bytes.to_le_bytes());
        h[24..32].copy_from_slice(&self.file_bytes.to_le_bytes());
        h[32..48].copy_from_slice(&self.set_id);
        h[48..56].copy_from_slice(&self.stripes.to_le_bytes());
        h[56..60].copy_from_slice(&self.payload_crc.to_le_bytes());
        crate::cursor::put_text(&mut h[64..64 + NAME_BYTES], &self.file_name);
        let crc = crc32c(&h[..124]);
        h[124..128].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Parse and validate; `None` when anything is off.
    pub fn decode(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_BYTES] = b.get(..HEADER_BYTES)?.try_into().ok()?;
        let u16_at = |o: usize| u16_at(b, o);
        let u32_at = |o: usize| u32_at(b, o);
        let u64_at = |o: usize| u64_at(b, o);
        if b[0..8] != MAGIC || u32_at(124) != crc32c(&b[..124]) {
            return None;
        }
        if u16_at(8) != VERSION || u16_at(10) as usize != HEADER_BYTES || b[12] != CODE_RS_CAUCHY {
            return None;
        }
        let (k, m, index) = (u16_at(14), u16_at(16), u16_at(18));
        let block_bytes = u32_at(20);
        let (file_bytes, stripes) = (u64_at(24), u64_at(48));
        let valid = k >= 1
            && m >= 1
            && k as usize + m as usize <= 255
            && index < k + m
            && block_bytes >= 64
            && block_bytes % 64 == 0
            && block_bytes <= MAX_BLOCK_BYTES
            && stripes >= 1
            && Some(stripes) == stripes_for(file_bytes, k as u64 * block_bytes as u64)
            // The shard file's length (`file_len`) fits in a u64.
            && stripes
                .checked_mul(block_bytes as u64 + 4)
                .and_then(|records| records.checked_add(HEADER_BYTES as u64))
                .is_some();
        if !valid {
            return None;
        }
        let file_name = crate::cursor::text_at(&b[64..64 + NAME_BYTES]);
        Some(Header {
            k,
            m,
            index,
            block_bytes,
            file_bytes,
            set_id: id_at(b, 32),
            stripes,
            payload_crc: u32_at(56),
            file_name,
        })
    }
}

/// Whether a block record (the block, then the CRC-32C of the block: FORMAT.md §1) is intact.
pub fn block_record_intact(record: &[u8]) -> bool {
    crate::cursor::tail_sealed(record)
}

/// Stripes needed for `file_bytes` at `stripe_bytes` each (at least one).
pub fn stripes_for(file_bytes: u64, stripe_bytes: u64) -> Option<u64> {
    if stripe_bytes == 0 {
        return None;
    }
    Some(file_bytes.div_ceil(stripe_bytes).max(1))
}

impl crate::Record for Header {
    const NAME: &'static str = "shard header";
    const MAGIC: &'static [u8] = &MAGIC;
    const VERSION: u32 = VERSION as u32;
    const SIZE: usize = HEADER_BYTES;
    type Error = crate::FormatError;

    fn write_copy(&self, copy: &mut [u8]) -> Result<(), crate::FormatError> {
        if copy.len() != HEADER_BYTES {
            return Err(crate::FormatError::Damaged {
                record: Self::NAME,
                why: "a header is 128 bytes",
            });
        }
        copy.copy_from_slice(&self.encode());
        Ok(())
    }

    fn read_copy(copy: &[u8]) -> Result<Option<Header>, crate::FormatError> {
        if copy.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        Header::decode(copy)
            .map(Some)
            .ok_or(crate::FormatError::Damaged {
                record: Self::NAME,
                why: "not a valid version-1 header",
            })
    }

    fn reseal(copy: &mut [u8]) {
        if copy.len() >= HEADER_BYTES {
            crate::cursor::seal_tail(&mut copy[..HEADER_BYTES]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Header {
        Header {
            k: 10,
            m: 4,
            index: 3,
            block_bytes: 65536,
            file_bytes: 1_000_000,
            set_id: [7; 16],
            stripes: 2,
            payload_crc: 0xdead_beef,
            file_name: "photo.jpg".into(),
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()), Some(h));
    }

    #[test]
    fn long_names_truncate_on_a_character_boundary() {
        let mut h = sample();
        h.file_name = "é".repeat(40);
        let back = Header::decode(&h.encode()).unwrap();
        assert_eq!(back.file_name, "é".repeat(28));
    }

    #[test]
    fn a_header_whose_shard_file_would_pass_2_64_bytes_is_rejected() {
        // Consistent fields (stripes = ceil(file / (k * block))), but 2^58 records of 68 bytes.
        let h = Header {
            k: 1,
            m: 1,
            index: 0,
            block_bytes: 64,
            file_bytes: u64::MAX,
            stripes: u64::MAX.div_ceil(64),
            ..sample()
        };
        assert_eq!(Header::decode(&h.encode()), None);
        // The largest that fits is accepted, and its length is exact.
        let stripes = (u64::MAX - HEADER_BYTES as u64) / 68;
        let h = Header {
            file_bytes: stripes * 64,
            stripes,
            ..h
        };
        let back = Header::decode(&h.encode()).unwrap();
        assert_eq!(back.file_len(), HEADER_BYTES as u64 + stripes * 68);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Header::decode(&bytes);
        }

        #[test]
        fn any_single_bit_flip_is_rejected(bit in 0usize..(HEADER_BYTES * 8)) {
            let mut b = sample().encode();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(Header::decode(&b), None);
        }

        #[test]
        fn truncated_headers_are_rejected(len in 0usize..HEADER_BYTES) {
            let b = sample().encode();
            prop_assert_eq!(Header::decode(&b[..len]), None);
        }
    }
}
