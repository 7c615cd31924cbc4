//! Systematic erasure codes over GF(2^8) for stripeguard: the one trait the engine uses,
//! [`ErasureCode`], and its implementations.
//!
//! | code | parity | compatible with |
//! |---|---|---|
//! | [`Xor`] | `p = d_0 ^ .. ^ d_{k-1}` (RAID-5, m = 1) | every RAID-5 |
//! | [`Raid6`] | `P = sum d_i`, `Q = sum 2^i d_i` | Linux md RAID-6 (`lib/raid6`), byte for byte |
//! | [`ReedSolomon`] | Cauchy matrix `1 / ((k + r) ^ j)` | ISA-L `gf_gen_cauchy1_matrix` + `ec_encode_data`, byte for byte |
//! | [`Rdp`] | row parity + diagonal parity over `p - 1` rows per chunk, XOR only | RDP (Corbett et al., FAST 2004), shortened for any `k` |
//! | [`TierCode`] | RDP inside each block-level stripe (corrected Eq. 3) | Tier-code (Li et al.), `papers/004_…` |
//!
//! [`metrics`] counts, by enumerating the layouts, what RDP, Tier-code and RAID-6 P+Q cost per
//! write and per degraded read, and the XORs of their encode and decode.
//!
//! Every code can rebuild any `<= m` erased chunks and **locate** silently wrong chunks from the
//! parity alone: with `f` known erasures, `t` unknown errors can be found whenever
//! `2t + f <= m` (Mann, Anderson & Rychlik, section 3.5). Beyond that bound a code says
//! [`CodeError::CannotLocate`]; it never guesses.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

mod array;
mod error;
mod grs;
pub mod metrics;
mod raid6;
mod rdp;
mod rs;
mod systematic;
pub mod tier;
mod xor;

pub use error::CodeError;
pub use raid6::Raid6;
pub use rdp::Rdp;
pub use rs::ReedSolomon;
pub use systematic::DECODE_CACHE_ENTRIES;
pub use tier::{TierCode, TierLabeling};
pub use xor::Xor;

use stripeguard_gf::KernelKind;

/// One data chunk's old and new contents, for [`ErasureCode::update`].
#[derive(Clone, Copy, Debug)]
pub struct ChunkUpdate<'a> {
    /// Data chunk index, `0..k`.
    pub index: usize,
    /// What the chunk held (and the parity reflects).
    pub old: &'a [u8],
    /// What it will hold.
    pub new: &'a [u8],
}

/// What [`ErasureCode::locate`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// The stripe is a codeword (after rebuilding the given erasures).
    Consistent,
    /// The erasures use up all the redundancy: nothing could be checked (`f = m`).
    Unchecked,
    /// These chunks (ascending) are wrong; rebuilding them (with the erasures) gives a codeword
    /// consistent with every other chunk.
    Bad(Vec<usize>),
}

/// A systematic erasure code: `k` data chunks, `m` parity chunks, chunk `i` of a stripe being
/// data for `i < k` and parity `i - k` otherwise. All chunks of a call have one length.
pub trait ErasureCode: Send + Sync {
    /// Short name: `xor`, `rs`, `raid6`.
    fn name(&self) -> &'static str;
    /// Data chunks per stripe, `k`.
    fn data_chunks(&self) -> usize;
    /// Parity chunks per stripe, `m`.
    fn parity_chunks(&self) -> usize;
    /// `k + m`.
    fn total_chunks(&self) -> usize {
        self.data_chunks() + self.parity_chunks()
    }
    /// The kernel the code's region operations run on.
    fn kernel(&self) -> KernelKind;

    /// Compute all `m` parity chunks from the `k` data chunks.
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError>;

    /// Bring `parity` up to date after the given data chunks change from `old` to `new`, without
    /// reading the other data chunks.
    fn update(
        &self,
        changes: &[ChunkUpdate<'_>],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError>;

    /// Add data chunk `index`'s contribution `data` to the parity: `parity[r] ^= P[r][index] *
    /// data` (ISA-L's `ec_encode_data_update`). Accumulating every data chunk into zeroed parity
    /// encodes chunk by chunk as data arrives; with `data = old ^ new` it is a read-modify-write
    /// whose delta the caller already has ([`ErasureCode::update`] fuses the delta instead).
    fn accumulate(
        &self,
        index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError>;
    /// Rebuild the chunks listed in `erased` (at most `m`, data or parity) in place from the others.
    fn reconstruct(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<(), CodeError>;

    /// Find which chunks are silently wrong, using only the redundancy. `chunks` holds all
    /// `k + m` chunks; the contents of those listed in `erased` are ignored.
    fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError>;

    /// A chunk's length must be a multiple of this (an array code's rows; 1 for the others).
    fn chunk_multiple(&self) -> usize {
        1
    }

    /// Whether parity byte `b` depends only on byte `b` of each data chunk (xor, raid6, rs), so a
    /// change to part of a chunk updates the same part of the parity. False for the array codes
    /// (RDP, Tier-code), whose diagonal parity mixes rows.
    fn parity_is_byte_local(&self) -> bool {
        true
    }

    /// Locate, then rebuild the bad and erased chunks in place. Returns what was found.
    fn repair(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<Located, CodeError> {
        let found = {
            let view: Vec<&[u8]> = chunks.iter().map(|c| &**c).collect();
            self.locate(&view, erased)?
        };
        let mut all: Vec<usize> = erased.to_vec();
        if let Located::Bad(bad) = &found {
            all.extend(bad);
        }
        self.reconstruct(chunks, &all)?;
        Ok(found)
    }
}

/// Build a code by name: `xor` (m must be 1), `raid6`, `rdp` or `tier` (m must be 2) or `rs`.
pub fn by_name(name: &str, k: usize, m: usize) -> Result<Box<dyn ErasureCode>, CodeError> {
    match name {
        "xor" | "raid5" => {
            if m != 1 {
                return Err(CodeError::Geometry {
                    k,
                    m,
                    reason: "xor has exactly one parity chunk",
                });
            }
            Ok(Box::new(Xor::new(k)?))
        }
        "raid6" => {
            if m != 2 {
                return Err(CodeError::Geometry {
                    k,
                    m,
                    reason: "raid6 has exactly two parity chunks",
                });
            }
            Ok(Box::new(Raid6::new(k)?))
        }
        "rdp" | "tier" => {
            if m != 2 {
                return Err(CodeError::Geometry {
                    k,
                    m,
                    reason: "rdp and tier have exactly two parity chunks",
                });
            }
            if name == "rdp" {
                Ok(Box::new(Rdp::new(k)?))
            } else {
                Ok(Box::new(TierCode::new(k)?))
            }
        }
        "rs" => Ok(Box::new(ReedSolomon::new(k, m)?)),
        _ => Err(CodeError::Geometry {
            k,
            m,
            reason: "unknown code (choose xor, raid6, rdp, tier or rs)",
        }),
    }
}
