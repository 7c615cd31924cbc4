//! Linux md RAID-6: `P = d_0 ^ .. ^ d_{k-1}`, `Q = sum_i g^i d_i` with `g = 2` over GF(2^8)/0x11d
//! (H. Peter Anvin, "The mathematics of RAID-6"), so parity matches the kernel's byte for byte.
//!
//! **Locating one bad chunk** (as mdadm's `raid6check`): recompute the syndromes
//! `Ps = P ^ sum d_i` and `Qs = Q ^ sum g^i d_i`. If only data chunk `z` is wrong by `e`, then
//! `Ps = e` and `Qs = g^z e`, so `z = log(Qs) - log(Ps) mod 255`. `Ps != 0, Qs = 0` means `P` is
//! wrong, `Ps = 0, Qs != 0` means `Q` is. Every byte of the chunk must name the same culprit,
//! otherwise more than one chunk is bad and the stripe cannot be located. With an erasure present
//! (2t + f <= 2 forces t = 0) the stripe can only be checked.

use crate::error::CodeError;
use crate::systematic::{systematic_accessors, Systematic};
use crate::{ErasureCode, Located};
use stripeguard_gf::{field, Kernel, Matrix};

/// Linux-compatible RAID-6 P + Q.
pub struct Raid6 {
    pub(crate) inner: Systematic,
}

impl Raid6 {
    /// `k` data chunks plus P and Q, on the selected kernel.
    pub fn new(k: usize) -> Result<Self, CodeError> {
        Self::with_kernel(k, *Kernel::selected()?)
    }

    /// The same on a given kernel.
    pub fn with_kernel(k: usize, kernel: Kernel) -> Result<Self, CodeError> {
        if k == 0 || k + 2 > 255 {
            return Err(CodeError::Geometry {
                k,
                m: 2,
                reason: "need 1 <= k and k + 2 <= 255",
            });
        }
        let mut rows = vec![1u8; k];
        rows.extend((0..k).map(field::exp2));
        Ok(Raid6 {
            inner: Systematic::new(Matrix::from_rows(2, k, rows), kernel),
        })
    }
}

impl ErasureCode for Raid6 {
    systematic_accessors!("raid6", with_encode_reconstruct);

    fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError> {
        let k = self.inner.k;
        Systematic::check_count("total", k + 2, chunks.len())?;
        let len = self.inner.common_len(chunks.iter().copied())?;
        let missing = self.inner.normalize(erased)?;
        if !missing.is_empty() {
            return self.inner.detect_only(chunks, &missing, len);
        }
        let syn = self.inner.parity_syndromes(chunks);
        let (ps, qs) = (&syn[0], &syn[1]);
        let mut culprit: Option<usize> = None;
        for (b, (&p, &q)) in ps.iter().zip(qs).enumerate() {
            let here = match (p, q) {
                (0, 0) => continue,
                (_, 0) => k,
                (0, _) => k + 1,
                _ => {
                    let z = (field::log2(q) as usize + 255 - field::log2(p) as usize) % 255;
                    if z >= k {
                        return Err(CodeError::CannotLocate {
                            reason: format!(
                                "byte {b}: syndromes point at data disk {z}, beyond k = {k}"
                            ),
                        });
                    }
                    z
                }
            };
            match culprit {
                None => culprit = Some(here),
                Some(c) if c != here => {
                    return Err(CodeError::CannotLocate {
                        reason: format!("byte {b} points at chunk {here}, earlier bytes at chunk {c}: more than one chunk is bad"),
                    })
                }
                _ => {}
            }
        }
        Ok(culprit.map_or(Located::Consistent, |c| Located::Bad(vec![c])))
    }
}
