//! Systematic Reed-Solomon with ISA-L's Cauchy matrix: parity row `r`, data column `j` holds
//! `1 / ((k + r) ^ j)` (`gf_gen_cauchy1_matrix`), so parity is byte-identical to ISA-L's
//! `ec_encode_data`. Every square submatrix of a Cauchy matrix is invertible, so the code is MDS
//! for any `k >= 1, m >= 1, k + m <= 255`. Errors are located by the GRS decoder in `grs.rs`.

use crate::error::CodeError;
use crate::grs::Grs;
use crate::systematic::{systematic_accessors, Systematic};
use crate::{ErasureCode, Located};
use stripeguard_gf::{dyadic, field, Kernel, Matrix};

/// Cauchy Reed-Solomon, any strength.
pub struct ReedSolomon {
    pub(crate) inner: Systematic,
    grs: Grs,
}

impl ReedSolomon {
    /// `k` data plus `m` parity chunks on the selected kernel.
    pub fn new(k: usize, m: usize) -> Result<Self, CodeError> {
        Self::with_kernel(k, m, *Kernel::selected()?)
    }

    /// The same on a given kernel.
    pub fn with_kernel(k: usize, m: usize, kernel: Kernel) -> Result<Self, CodeError> {
        if k == 0 || m == 0 || k + m > 255 {
            return Err(CodeError::Geometry {
                k,
                m,
                reason: "need k >= 1, m >= 1 and k + m <= 255",
            });
        }
        // Positions are below k + m <= 255 (checked above), so each fits a byte.
        let pos = |i: usize| u8::try_from(i).expect("positions are below k + m <= 255");
        let parity = Matrix::from_rows(
            m,
            k,
            (0..m)
                .flat_map(|r| (0..k).map(move |j| field::inv(pos(k + r) ^ pos(j))))
                .collect(),
        );
        // P[r][j] = h[(k + r) ^ j] with h(s) = 1/s: a block of the 256 x 256 dyadic matrix,
        // which wide codes multiply in far fewer products (gf::dyadic).
        let rows: Vec<usize> = (k..k + m).collect();
        let cols: Vec<usize> = (0..k).collect();
        Ok(ReedSolomon {
            inner: Systematic::new(parity, kernel).with_dyadic_parity(
                &dyadic::cauchy_function(),
                &rows,
                &cols,
            ),
            grs: Grs::for_cauchy(k, m),
        })
    }

    /// The `m x k` parity matrix.
    pub fn parity_matrix(&self) -> &Matrix {
        &self.inner.parity
    }
}

impl ErasureCode for ReedSolomon {
    systematic_accessors!("rs", with_encode_reconstruct);
    fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError> {
        Systematic::check_count("total", self.inner.n(), chunks.len())?;
        let len = self.inner.common_len(chunks.iter().copied())?;
        let missing = self.inner.normalize(erased)?;
        if missing.len() == self.inner.m {
            return self.inner.detect_only(chunks, &missing, len);
        }
        self.grs.locate(&self.inner, chunks, &missing, len)
    }
}
