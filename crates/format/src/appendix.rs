//! The appendix stored after every chunk, byte for byte as in `FORMAT.md` §2.9 (layout 2).
//!
//! The appendix is self-checked on its own (its last field is the CRC-32C of everything before
//! it) and covers its chunk through a **block table**: the CRC-32C of every `b`-byte checksum
//! block of the chunk. A request touching part of a chunk therefore reads and verifies only the
//! blocks it touches plus the appendix, and a partial write recomputes only the entries of the
//! blocks it wrote. The chunk's CRC (what checksum mirroring copies into the buddy and the parity
//! entries) is the CRC-32C of its bytes, obtained from the table with `crc32c_combine`:
//!
//! ```text
//! crc(B0 ‖ B1 ‖ … ‖ B(n-1)) = combine(…combine(combine(crc B0, crc B1, b), crc B2, b)…, crc B(n-1), b)
//! ```
//!
//! A pure data appendix has no table (pure updates it with a blind write; see FORMAT.md).

use crate::cursor::{u16_at, u32_at, u64_at};
use crate::Scheme;
use std::ops::Range;

/// Bytes before the entry list.
pub const APPENDIX_HEADER_BYTES: usize = 56;
/// The checksum block size of chunks that are a multiple of it.
pub const CHECKSUM_BLOCK_BYTES: u32 = 4096;
const MAGIC: [u8; 4] = *b"SGAX";
const VERSION: u8 = 2;

/// The checksum block size `b` of a chunk of `chunk_bytes` (FORMAT.md §2): 4096 when the chunk is
/// a larger multiple of it, otherwise the whole chunk.
pub fn block_bytes_for(chunk_bytes: u32) -> u32 {
    if chunk_bytes > CHECKSUM_BLOCK_BYTES && chunk_bytes.is_multiple_of(CHECKSUM_BLOCK_BYTES) {
        CHECKSUM_BLOCK_BYTES
    } else {
        chunk_bytes
    }
}

/// Bytes of the appendix after every chunk (`A·S`; 0 for `none`): the smallest whole number of
/// sectors holding the largest appendix of the array (a parity appendix with `k` entries and a
/// full block table).
pub fn appendix_bytes_for(scheme: Scheme, k: usize, chunk_bytes: u32, sector_bytes: u32) -> u32 {
    if !scheme.has_appendix() || chunk_bytes == 0 || sector_bytes == 0 {
        return 0;
    }
    let blocks = (chunk_bytes / block_bytes_for(chunk_bytes)) as usize;
    let need = APPENDIX_HEADER_BYTES + k * scheme.entry_bytes() + 4 * blocks + 4;
    let bytes = need.div_ceil(sector_bytes as usize) * sector_bytes as usize;
    // k ≤ 255 entries of ≤ 8 bytes and a chunk of ≤ 16 MiB (4096 blocks) need well under 4 GiB.
    u32::try_from(bytes).expect("an appendix of a valid geometry is small")
}

/// The CRC-32C of every `block_bytes` block of `chunk`.
pub fn block_crcs(chunk: &[u8], block_bytes: usize) -> Vec<u32> {
    chunk
        .chunks(block_bytes)
        .map(stripeguard_checksum::crc32c)
        .collect()
}

/// The CRC-32C of a chunk from the CRCs of its equal blocks of `block_bytes` (crc32c_combine;
/// table-driven for 4 KiB blocks).
pub fn combine_block_crcs(blocks: &[u32], block_bytes: usize) -> u32 {
    let mut it = blocks.iter();
    let Some(&first) = it.next() else {
        return stripeguard_checksum::crc32c(&[]);
    };
    if block_bytes == CHECKSUM_BLOCK_BYTES as usize {
        let append = stripeguard_checksum::Crc32cAppend::for_4k();
        return it.fold(first, |acc, &c| append.combine(acc, c));
    }
    it.fold(first, |acc, &c| {
        stripeguard_checksum::crc32c_combine(acc, c, block_bytes as u64)
    })
}

/// Which chunk of its stripe a unit holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Data chunk `0..k`.
    Data(u8),
    /// Parity chunk `0..m` (0 = P, 1 = Q, ...).
    Parity(u8),
}

/// Physical identity: where a unit belongs. A unit whose identity differs from where it was read
/// was misdirected (written to, or read from, the wrong place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The array.
    pub array_uuid: [u8; 16],
    /// The member.
    pub member_index: u16,
    /// The unit's index on the member (= its stripe).
    pub chunk_number: u64,
    /// Data or parity, and which.
    pub role: Role,
}

/// A decoded appendix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appendix {
    /// The scheme that wrote it.
    pub scheme: Scheme,
    /// Where the unit belongs.
    pub identity: Identity,
    /// Data: version (hybrid1) or sequence (hybrid-seq). Parity: latest sequence in the list.
    pub tag: u64,
    /// Pure / hybrid2 data chunk `i`: CRC-32C of data chunk `i - 1 (mod k)`.
    pub buddy_crc: u32,
    /// Parity only: one entry per data chunk (version, sequence or CRC-32C).
    pub entries: Vec<u64>,
    /// The checksum block size `b`; 0 = no block table (a pure data appendix).
    pub block_bytes: u32,
    /// The block table: CRC-32C of each block of the chunk (filled by [`Appendix::seal`]).
    pub blocks: Vec<u32>,
}

/// Why a sector is not a valid appendix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendixError {
    /// Wrong size buffer.
    #[error("appendix has {0} bytes")]
    Size(usize),
    /// Not an appendix at all (zeros, or another sector's bytes).
    #[error("no appendix (magic not found)")]
    BadMagic,
    /// A layout this build does not know.
    #[error("appendix layout version {0} is not supported")]
    Version(u8),
    /// The appendix's own bytes are damaged: torn appendix write, bit rot.
    #[error("self checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// In the appendix.
        stored: u32,
        /// Of the bytes read.
        computed: u32,
    },
    /// A block of the chunk disagrees with the table: torn or lost write of the block or of the
    /// appendix, bit rot, a misdirected write of part of a chunk.
    #[error("block {block} checksum mismatch (table {stored:#010x}, computed {computed:#010x})")]
    Block {
        /// The block's index in the chunk.
        block: usize,
        /// In the table.
        stored: u32,
        /// Of the bytes read.
        computed: u32,
    },
    /// Checksum fine but fields impossible.
    #[error("malformed appendix: {0}")]
    Malformed(&'static str),
}

impl Appendix {
    /// Compute the whole block table of `chunk` (when this appendix has one) and write the
    /// appendix into `sector`; returns the CRC-32C of the chunk's bytes.
    pub fn seal(&mut self, chunk: &[u8], sector: &mut [u8]) -> u32 {
        let crc = if self.block_bytes == 0 {
            self.blocks.clear();
            stripeguard_checksum::crc32c(chunk)
        } else {
            let b = self.block_bytes as usize;
            self.blocks = block_crcs(chunk, b);
            combine_block_crcs(&self.blocks, b)
        };
        self.encode(sector);
        crc
    }

    /// Seal after a partial write: `old` is the table before it, and only the blocks `changed`
    /// (block indices) of `chunk` hold new bytes (the others need not be in memory). Returns the
    /// chunk's CRC from the table.
    pub fn seal_partial(
        &mut self,
        chunk: &[u8],
        sector: &mut [u8],
        old: &[u32],
        changed: Range<usize>,
    ) -> u32 {
        let b = self.block_bytes as usize;
        assert!(b > 0 && old.len() * b == chunk.len() && changed.end <= old.len());
        self.blocks = old.to_vec();
        for i in changed {
            self.blocks[i] = stripeguard_checksum::crc32c(&chunk[i * b..(i + 1) * b]);
        }
        self.encode(sector);
        combine_block_crcs(&self.blocks, b)
    }

    /// The CRC-32C of the chunk's bytes according to the table (`None` without a table).
    pub fn chunk_crc(&self) -> Option<u32> {
        (self.block_bytes != 0).then(|| combine_block_crcs(&self.blocks, self.block_bytes as usize))
    }

    /// Write this appendix, table as it is, into `sector` (the appendix's `A·S` bytes).
    pub fn encode(&self, sector: &mut [u8]) {
        let s = sector.len();
        let w = self.scheme.entry_bytes();
        let table = APPENDIX_HEADER_BYTES + self.entries.len() * w;
        assert!(s >= table + 4 * self.blocks.len() + 4);
        sector.fill(0);
        sector[0..4].copy_from_slice(&MAGIC);
        sector[4] = VERSION;
        sector[5] = self.scheme.id();
        let (role, index) = match self.identity.role {
            Role::Data(i) => (1, i),
            Role::Parity(j) => (2, j),
        };
        sector[6] = role;
        sector[7] = index;
        sector[8..24].copy_from_slice(&self.identity.array_uuid);
        sector[24..26].copy_from_slice(&self.identity.member_index.to_le_bytes());
        let count =
            |n: usize| u16::try_from(n).expect("≤ 255 entries, ≤ 4096 blocks (16 MiB chunks)");
        sector[26..28].copy_from_slice(&count(self.entries.len()).to_le_bytes());
        sector[28..30].copy_from_slice(&count(self.blocks.len()).to_le_bytes());
        sector[32..40].copy_from_slice(&self.identity.chunk_number.to_le_bytes());
        sector[40..48].copy_from_slice(&self.tag.to_le_bytes());
        sector[48..52].copy_from_slice(&self.buddy_crc.to_le_bytes());
        let b = if self.blocks.is_empty() {
            0
        } else {
            self.block_bytes
        };
        sector[52..56].copy_from_slice(&b.to_le_bytes());
        for (i, &e) in self.entries.iter().enumerate() {
            let o = APPENDIX_HEADER_BYTES + i * w;
            sector[o..o + w].copy_from_slice(&e.to_le_bytes()[..w]);
        }
        for (i, &c) in self.blocks.iter().enumerate() {
            let o = table + 4 * i;
            sector[o..o + 4].copy_from_slice(&c.to_le_bytes());
        }
        let own = stripeguard_checksum::crc32c(&sector[..s - 4]);
        sector[s - 4..].copy_from_slice(&own.to_le_bytes());
    }

    /// Parse and self-check an appendix on its own (the chunk is not looked at). Never panics.
    pub fn decode_appendix(sector: &[u8]) -> Result<Appendix, AppendixError> {
        let s = sector.len();
        if s < APPENDIX_HEADER_BYTES + 4 {
            return Err(AppendixError::Size(s));
        }
        if sector[0..4] != MAGIC {
            return Err(AppendixError::BadMagic);
        }
        if sector[4] != VERSION {
            return Err(AppendixError::Version(sector[4]));
        }
        let computed = stripeguard_checksum::crc32c(&sector[..s - 4]);
        let stored = u32_at(sector, s - 4);
        if stored != computed {
            return Err(AppendixError::Checksum { stored, computed });
        }
        let scheme = Scheme::from_id(sector[5])
            .filter(|s| s.has_appendix())
            .ok_or(AppendixError::Malformed("unknown scheme id"))?;
        let role = match sector[6] {
            1 => Role::Data(sector[7]),
            2 => Role::Parity(sector[7]),
            _ => return Err(AppendixError::Malformed("unknown role")),
        };
        let count = u16_at(sector, 26) as usize;
        let nblocks = u16_at(sector, 28) as usize;
        let block_bytes = u32_at(sector, 52);
        let w = scheme.entry_bytes();
        let table = APPENDIX_HEADER_BYTES + count * w;
        if table + 4 * nblocks + 4 > s {
            return Err(AppendixError::Malformed(
                "entry list and block table longer than the appendix",
            ));
        }
        if matches!(role, Role::Data(_)) && count != 0 {
            return Err(AppendixError::Malformed("data appendix with entries"));
        }
        if (nblocks == 0) != (block_bytes == 0) {
            return Err(AppendixError::Malformed(
                "block table without a block size, or the reverse",
            ));
        }
        let entries = (0..count)
            .map(|i| {
                let o = APPENDIX_HEADER_BYTES + i * w;
                let mut e = [0u8; 8];
                e[..w].copy_from_slice(&sector[o..o + w]);
                u64::from_le_bytes(e)
            })
            .collect();
        let blocks = (0..nblocks)
            .map(|i| u32_at(sector, table + 4 * i))
            .collect();
        Ok(Appendix {
            scheme,
            identity: Identity {
                array_uuid: sector[8..24].try_into().expect("16 bytes"),
                member_index: u16_at(sector, 24),
                chunk_number: u64_at(sector, 32),
                role,
            },
            tag: u64_at(sector, 40),
            buddy_crc: u32_at(sector, 48),
            entries,
            block_bytes,
            blocks,
        })
    }

    /// Check blocks `which` (block indices) of `chunk` (the whole chunk's buffer; only those
    /// blocks need hold bytes) against the table. Without a table there is nothing to check.
    pub fn check_blocks(&self, chunk: &[u8], which: Range<usize>) -> Result<(), AppendixError> {
        if self.block_bytes == 0 || which.is_empty() {
            return Ok(());
        }
        let b = self.block_bytes as usize;
        if self.blocks.len() * b != chunk.len() || which.end > self.blocks.len() {
            return Err(AppendixError::Malformed(
                "block table does not match the chunk size",
            ));
        }
        for i in which {
            let computed = stripeguard_checksum::crc32c(&chunk[i * b..(i + 1) * b]);
            if computed != self.blocks[i] {
                return Err(AppendixError::Block {
                    block: i,
                    stored: self.blocks[i],
                    computed,
                });
            }
        }
        Ok(())
    }

    /// Parse and self-check the appendix stored after `chunk`, and check every block of `chunk`
    /// against its table. Returns the appendix and the CRC-32C of the chunk's bytes. Never
    /// panics.
    pub fn decode(chunk: &[u8], sector: &[u8]) -> Result<(Appendix, u32), AppendixError> {
        let a = Appendix::decode_appendix(sector)?;
        if a.block_bytes == 0 {
            if !matches!(a.identity.role, Role::Data(_)) || a.scheme != Scheme::Pure {
                return Err(AppendixError::Malformed("no block table"));
            }
            return Ok((a, stripeguard_checksum::crc32c(chunk)));
        }
        let b = a.block_bytes as usize;
        if a.blocks.len() * b != chunk.len() {
            return Err(AppendixError::Malformed(
                "block table does not match the chunk size",
            ));
        }
        let computed = block_crcs(chunk, b);
        if let Some(i) = (0..computed.len()).find(|&i| computed[i] != a.blocks[i]) {
            return Err(AppendixError::Block {
                block: i,
                stored: a.blocks[i],
                computed: computed[i],
            });
        }
        let crc = combine_block_crcs(&computed, b);
        Ok((a, crc))
    }
}

impl crate::Record for Appendix {
    const NAME: &'static str = "appendix";
    const MAGIC: &'static [u8] = &MAGIC;
    const VERSION: u32 = VERSION as u32;
    const SIZE: usize = 0;
    type Error = AppendixError;

    fn write_copy(&self, sector: &mut [u8]) -> Result<(), AppendixError> {
        let need = APPENDIX_HEADER_BYTES
            + self.entries.len() * self.scheme.entry_bytes()
            + 4 * self.blocks.len()
            + 4;
        if sector.len() < need {
            return Err(AppendixError::Size(sector.len()));
        }
        self.encode(sector);
        Ok(())
    }

    fn read_copy(sector: &[u8]) -> Result<Option<Appendix>, AppendixError> {
        if sector.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        Appendix::decode_appendix(sector).map(Some)
    }

    fn reseal(sector: &mut [u8]) {
        if sector.len() >= 4 {
            crate::cursor::seal_tail(sector);
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
    use proptest::prelude::*;

    fn sample(scheme: Scheme, role: Role) -> Appendix {
        let pure_data = scheme == Scheme::Pure && matches!(role, Role::Data(_));
        Appendix {
            scheme,
            identity: Identity {
                array_uuid: [5; 16],
                member_index: 2,
                chunk_number: 77,
                role,
            },
            tag: 12,
            buddy_crc: 0xdead_beef,
            entries: match role {
                Role::Parity(_) => vec![1, 2, 3, 0xffff_fffe],
                Role::Data(_) => vec![],
            },
            block_bytes: if pure_data { 0 } else { 4096 },
            blocks: vec![],
        }
    }

    const SCHEMES: [Scheme; 4] = [
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
    ];

    #[test]
    fn round_trip_every_scheme_and_role() {
        let chunk: Vec<u8> = (0..16384u32).map(|i| (i * 7) as u8).collect();
        for scheme in SCHEMES {
            for role in [Role::Data(3), Role::Parity(1)] {
                let mut a = sample(scheme, role);
                let mut sector = vec![0u8; 512];
                let crc = a.seal(&chunk, &mut sector);
                assert_eq!(crc, stripeguard_checksum::crc32c(&chunk));
                assert_eq!(Appendix::decode(&chunk, &sector), Ok((a.clone(), crc)));
                if a.block_bytes != 0 {
                    assert_eq!(a.chunk_crc(), Some(crc));
                }
            }
        }
    }

    #[test]
    fn sizes_follow_the_format() {
        assert_eq!(block_bytes_for(65536), 4096);
        assert_eq!(block_bytes_for(4096), 4096);
        assert_eq!(block_bytes_for(6144), 6144);
        assert_eq!(appendix_bytes_for(Scheme::None, 6, 65536, 512), 0);
        // 56 + 6·8 + 16·4 + 4 = 172 → one sector.
        assert_eq!(appendix_bytes_for(Scheme::HybridSeq, 6, 65536, 512), 512);
        // 16 MiB: 4096 blocks, 56 + 48 + 16384 + 4 → 33 sectors.
        assert_eq!(
            appendix_bytes_for(Scheme::HybridSeq, 6, 16 << 20, 512),
            33 * 512
        );
    }

    #[test]
    fn a_partial_seal_equals_a_full_one() {
        let mut chunk: Vec<u8> = (0..65536u32).map(|i| (i * 11) as u8).collect();
        let mut a = sample(Scheme::Hybrid2, Role::Data(1));
        let mut sector = vec![0u8; 512];
        a.seal(&chunk, &mut sector);
        let old = a.blocks.clone();
        chunk[8192..12288].fill(0x77);
        let mut partial = vec![0u8; 512];
        let crc = a.seal_partial(&chunk, &mut partial, &old, 2..3);
        let mut full = vec![0u8; 512];
        let crc_full = a.clone().seal(&chunk, &mut full);
        assert_eq!((crc, &partial), (crc_full, &full));
    }

    #[test]
    fn a_torn_chunk_fails_its_block_check_except_pure_data() {
        let chunk = vec![0x5a; 8192];
        for scheme in SCHEMES {
            let mut sector = vec![0u8; 512];
            sample(scheme, Role::Data(0)).seal(&chunk, &mut sector);
            let mut torn = chunk.clone();
            torn[5000] ^= 1;
            let r = Appendix::decode(&torn, &sector);
            if scheme == Scheme::Pure {
                // Pure relies on checksum mirroring: the data CRC changes, the appendix is fine.
                let (_, crc) = r.unwrap();
                assert_ne!(crc, stripeguard_checksum::crc32c(&chunk));
            } else {
                assert!(
                    matches!(r, Err(AppendixError::Block { block: 1, .. })),
                    "{scheme}"
                );
                // A read of block 0 alone does not see it; a read of block 1 does.
                let a = Appendix::decode_appendix(&sector).unwrap();
                assert!(a.check_blocks(&torn, 0..1).is_ok());
                assert!(a.check_blocks(&torn, 1..2).is_err());
            }
        }
    }

    #[test]
    fn a_zero_sector_is_not_an_appendix() {
        assert_eq!(
            Appendix::decode(&[0; 512], &[0; 512]),
            Err(AppendixError::BadMagic)
        );
    }

    #[test]
    fn a_multi_sector_appendix_torn_at_a_sector_fails() {
        let chunk: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 3) as u8).collect();
        let n = appendix_bytes_for(Scheme::HybridSeq, 4, 1 << 20, 512) as usize;
        assert!(n > 512);
        let mut a = sample(Scheme::HybridSeq, Role::Parity(0));
        let mut old = vec![0u8; n];
        a.seal(&chunk, &mut old);
        let mut changed = chunk.clone();
        changed[0] ^= 1;
        a.tag = 13;
        let mut new = vec![0u8; n];
        a.seal(&changed, &mut new);
        // The first sector of the new appendix landed, the rest did not.
        let mut torn = old.clone();
        torn[..512].copy_from_slice(&new[..512]);
        assert!(matches!(
            Appendix::decode_appendix(&torn),
            Err(AppendixError::Checksum { .. })
        ));
    }

    proptest! {
        #[test]
        fn any_bit_flip_in_a_hybrid_unit_is_caught(bit in 0usize..(8192 + 512) * 8) {
            let chunk: Vec<u8> = (0..8192u32).map(|i| (i * 13) as u8).collect();
            let mut sector = vec![0u8; 512];
            sample(Scheme::Hybrid2, Role::Parity(0)).seal(&chunk, &mut sector);
            let mut unit = chunk.clone();
            unit.extend_from_slice(&sector);
            unit[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Appendix::decode(&unit[..8192], &unit[8192..]).is_err());
        }

        #[test]
        fn random_and_truncated_sectors_never_panic(
            chunk in proptest::collection::vec(any::<u8>(), 0..64),
            sector in proptest::collection::vec(any::<u8>(), 0..700),
        ) {
            let _ = Appendix::decode(&chunk, &sector);
            let mut s = sector.clone();
            if s.len() >= 8 {
                s[0..4].copy_from_slice(b"SGAX");
                s[4] = 2;
                let _ = Appendix::decode(&chunk, &s);
                if let Ok(a) = Appendix::decode_appendix(&s) {
                    let _ = a.check_blocks(&chunk, 0..a.blocks.len());
                }
            }
        }
    }
}
