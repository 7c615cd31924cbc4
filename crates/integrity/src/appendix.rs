//! The appendix sector stored after every chunk, byte for byte as in `FORMAT.md` §2.3.
//!
//! One pass over the chunk gives both checksums the schemes need: the CRC-32C of the chunk's bytes
//! (what checksum mirroring copies into the buddy and the parity appendices) and, continuing the
//! same CRC state over the appendix, the self checksum stored as the appendix's last field.

use crate::le::{u16_at, u32_at, u64_at};
use crate::Scheme;
use stripeguard_checksum::Crc32c;

/// Bytes before the entry list.
pub const APPENDIX_HEADER_BYTES: usize = 56;
const MAGIC: [u8; 4] = *b"SGAX";
const VERSION: u8 = 1;

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
}

/// Why a sector is not a valid appendix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendixError {
    /// Wrong size buffer.
    #[error("appendix sector has {0} bytes")]
    Size(usize),
    /// Not an appendix at all (zeros, or another sector's bytes).
    #[error("no appendix (magic not found)")]
    BadMagic,
    /// A layout this build does not know.
    #[error("appendix layout version {0} is not supported")]
    Version(u8),
    /// The chunk and appendix disagree: torn write, bit rot, or an unaligned misdirected I/O.
    #[error("self checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// In the appendix.
        stored: u32,
        /// Of the bytes read.
        computed: u32,
    },
    /// Checksum fine but fields impossible.
    #[error("malformed appendix: {0}")]
    Malformed(&'static str),
}

impl Appendix {
    /// Write this appendix into `sector` (one sector) for `chunk`, returning the CRC-32C of the
    /// chunk's bytes. One pass over the chunk.
    pub fn encode(&self, chunk: &[u8], sector: &mut [u8]) -> u32 {
        let mut crc = Crc32c::new();
        crc.update(chunk);
        self.encode_continuing(&crc, sector)
    }

    /// [`Appendix::encode`] for a chunk whose CRC state (over exactly its bytes) was computed
    /// earlier, e.g. while the chunk was still in cache; the chunk is not read again.
    pub fn encode_continuing(&self, chunk_crc: &Crc32c, sector: &mut [u8]) -> u32 {
        let s = sector.len();
        assert!(s >= APPENDIX_HEADER_BYTES + 4 + self.entries.len() * self.scheme.entry_bytes());
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
        sector[26..28].copy_from_slice(&(self.entries.len() as u16).to_le_bytes());
        sector[32..40].copy_from_slice(&self.identity.chunk_number.to_le_bytes());
        sector[40..48].copy_from_slice(&self.tag.to_le_bytes());
        sector[48..52].copy_from_slice(&self.buddy_crc.to_le_bytes());
        let w = self.scheme.entry_bytes();
        for (i, &e) in self.entries.iter().enumerate() {
            let o = APPENDIX_HEADER_BYTES + i * w;
            sector[o..o + w].copy_from_slice(&e.to_le_bytes()[..w]);
        }
        let data_crc = chunk_crc.finish();
        let mut crc = if self.covers_chunk() {
            chunk_crc.clone()
        } else {
            Crc32c::new()
        };
        crc.update(&sector[..s - 4]);
        let own = crc.finish();
        sector[s - 4..].copy_from_slice(&own.to_le_bytes());
        data_crc
    }

    /// Whether the self checksum covers the chunk too (all but pure data appendices).
    fn covers_chunk(&self) -> bool {
        matches!(self.identity.role, Role::Parity(_))
            || self.scheme.data_self_checksum_covers_chunk()
    }

    /// Parse and self-check the appendix `sector` stored after `chunk`. Returns the appendix and
    /// the CRC-32C of the chunk's bytes (always computed, in the same pass). Never panics.
    pub fn decode(chunk: &[u8], sector: &[u8]) -> Result<(Appendix, u32), AppendixError> {
        let s = sector.len();
        if s < APPENDIX_HEADER_BYTES + 4 {
            return Err(AppendixError::Size(s));
        }
        let mut crc = Crc32c::new();
        crc.update(chunk);
        let data_crc = crc.finish();
        if sector[0..4] != MAGIC {
            return Err(AppendixError::BadMagic);
        }
        if sector[4] != VERSION {
            return Err(AppendixError::Version(sector[4]));
        }
        let scheme = Scheme::from_id(sector[5])
            .filter(|s| s.has_appendix())
            .ok_or(AppendixError::Malformed("unknown scheme id"))?;
        let role = match sector[6] {
            1 => Role::Data(sector[7]),
            2 => Role::Parity(sector[7]),
            _ => return Err(AppendixError::Malformed("unknown role")),
        };
        let covers_chunk =
            matches!(role, Role::Parity(_)) || scheme.data_self_checksum_covers_chunk();
        if !covers_chunk {
            crc = Crc32c::new();
        }
        crc.update(&sector[..s - 4]);
        let computed = crc.finish();
        let stored = u32_at(sector, s - 4);
        if stored != computed {
            return Err(AppendixError::Checksum { stored, computed });
        }
        let count = u16_at(sector, 26) as usize;
        let w = scheme.entry_bytes();
        if APPENDIX_HEADER_BYTES + count * w + 4 > s {
            return Err(AppendixError::Malformed(
                "entry list longer than the sector",
            ));
        }
        if matches!(role, Role::Data(_)) && count != 0 {
            return Err(AppendixError::Malformed("data appendix with entries"));
        }
        let entries = (0..count)
            .map(|i| {
                let o = APPENDIX_HEADER_BYTES + i * w;
                let mut e = [0u8; 8];
                e[..w].copy_from_slice(&sector[o..o + w]);
                u64::from_le_bytes(e)
            })
            .collect();
        let appendix = Appendix {
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
        };
        Ok((appendix, data_crc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(scheme: Scheme, role: Role) -> Appendix {
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
        }
    }

    #[test]
    fn round_trip_every_scheme_and_role() {
        let chunk: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        for scheme in [
            Scheme::Pure,
            Scheme::Hybrid1,
            Scheme::Hybrid2,
            Scheme::HybridSeq,
        ] {
            for role in [Role::Data(3), Role::Parity(1)] {
                let a = sample(scheme, role);
                let mut sector = vec![0u8; 512];
                let crc = a.encode(&chunk, &mut sector);
                assert_eq!(crc, stripeguard_checksum::crc32c(&chunk));
                assert_eq!(Appendix::decode(&chunk, &sector), Ok((a, crc)));
            }
        }
    }

    #[test]
    fn a_torn_chunk_fails_the_self_checksum_except_pure_data() {
        let chunk = vec![0x5a; 4096];
        for scheme in [
            Scheme::Pure,
            Scheme::Hybrid1,
            Scheme::Hybrid2,
            Scheme::HybridSeq,
        ] {
            let mut sector = vec![0u8; 512];
            sample(scheme, Role::Data(0)).encode(&chunk, &mut sector);
            let mut torn = chunk.clone();
            torn[4000] ^= 1;
            let r = Appendix::decode(&torn, &sector);
            if scheme == Scheme::Pure {
                // Pure relies on checksum mirroring: the data CRC changes, the appendix is fine.
                let (_, crc) = r.unwrap();
                assert_ne!(crc, stripeguard_checksum::crc32c(&chunk));
            } else {
                assert!(matches!(r, Err(AppendixError::Checksum { .. })), "{scheme}");
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

    proptest! {
        #[test]
        fn any_bit_flip_in_a_hybrid_unit_is_caught(bit in 0usize..(4096 + 512) * 8) {
            let chunk: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
            let mut sector = vec![0u8; 512];
            sample(Scheme::Hybrid2, Role::Parity(0)).encode(&chunk, &mut sector);
            let mut unit = chunk.clone();
            unit.extend_from_slice(&sector);
            unit[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Appendix::decode(&unit[..4096], &unit[4096..]).is_err());
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
                s[4] = 1;
                let _ = Appendix::decode(&chunk, &s);
            }
        }
    }
}
