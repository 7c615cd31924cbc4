//! RAID-5: one parity chunk, the XOR of the data. Encode and rebuild use the XOR kernel rather
//! than multiplications by 1. A single parity detects an inconsistent stripe but cannot say which
//! chunk is wrong (2t + f <= 1 forces t = 0).

use crate::error::CodeError;
use crate::systematic::{systematic_accessors, Systematic};
use crate::{ErasureCode, Located};
use stripeguard_gf::{Kernel, Matrix};

/// RAID-5 parity.
pub struct Xor {
    inner: Systematic,
}

impl Xor {
    /// `k` data chunks plus one parity chunk, on the selected kernel.
    pub fn new(k: usize) -> Result<Self, CodeError> {
        Self::with_kernel(k, *Kernel::selected()?)
    }

    /// The same on a given kernel.
    pub fn with_kernel(k: usize, kernel: Kernel) -> Result<Self, CodeError> {
        if k == 0 || k + 1 > 255 {
            return Err(CodeError::Geometry {
                k,
                m: 1,
                reason: "need 1 <= k and k + 1 <= 255",
            });
        }
        Ok(Xor {
            inner: Systematic::new(Matrix::from_rows(1, k, vec![1; k]), kernel),
        })
    }
}

impl ErasureCode for Xor {
    systematic_accessors!("xor");

    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        self.inner.check_encode_args(data, parity)?;
        self.inner.kernel.xor(data, parity[0], false);
        Ok(())
    }

    fn reconstruct(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<(), CodeError> {
        Systematic::check_count("total", self.inner.n(), chunks.len())?;
        self.inner.common_len(chunks.iter().map(|c| &**c))?;
        let missing = self.inner.normalize(erased)?;
        let Some(&lost) = missing.first() else {
            return Ok(());
        };
        let (before, rest) = chunks.split_at_mut(lost);
        let (target, after) = rest.split_first_mut().expect("lost < n");
        let others: Vec<&[u8]> = before.iter().chain(after.iter()).map(|c| &**c).collect();
        self.inner.kernel.xor(&others, target, false);
        Ok(())
    }

    fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError> {
        Systematic::check_count("total", self.inner.n(), chunks.len())?;
        let len = self.inner.common_len(chunks.iter().copied())?;
        let missing = self.inner.normalize(erased)?;
        self.inner.detect_only(chunks, &missing, len)
    }
}
