//! Per-coefficient lookup data for one coefficient matrix, prepared once and reused for every
//! region the matrix is applied to (the role of ISA-L's `ec_init_tables`).
//!
//! Every kernel's form of "multiply by c" is kept: the byte itself (scalar), the split-nibble
//! tables (AVX2 / AVX-512BW PSHUFB), and the 8x8 bit matrix (GFNI affine). Entries are stored
//! input-major (`[input][output]`) because the kernels load one input vector and then apply every
//! output's coefficient to it.

use crate::field::{affine_matrix, nibble_tables};
use crate::matrix::Matrix;

/// Prepared coefficients of an `outputs x inputs` matrix.
#[derive(Clone, Debug)]
pub struct MulTables {
    outputs: usize,
    inputs: usize,
    coeffs: Vec<u8>,
    affine: Vec<u64>,
    nibbles: Vec<[u8; 32]>,
}

impl MulTables {
    /// Prepare the coefficients of `m`: output `r` will be `sum_c m[r][c] * input[c]`.
    pub fn new(m: &Matrix) -> Self {
        let (outputs, inputs) = (m.rows(), m.cols());
        let mut coeffs = Vec::with_capacity(outputs * inputs);
        for c in 0..inputs {
            for r in 0..outputs {
                coeffs.push(m[(r, c)]);
            }
        }
        let affine = coeffs.iter().map(|&c| affine_matrix(c)).collect();
        let nibbles = coeffs.iter().map(|&c| nibble_tables(c)).collect();
        MulTables {
            outputs,
            inputs,
            coeffs,
            affine,
            nibbles,
        }
    }

    /// A single coefficient, for region multiply by a constant.
    pub fn scalar(c: u8) -> Self {
        MulTables::new(&Matrix::from_rows(1, 1, vec![c]))
    }

    /// Number of output regions.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Number of input regions.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Coefficient applied to input `i` for output `r`.
    #[inline(always)]
    pub fn coeff(&self, i: usize, r: usize) -> u8 {
        self.coeffs[i * self.outputs + r]
    }

    #[inline(always)]
    pub(crate) fn affine_ptr(&self) -> *const u64 {
        self.affine.as_ptr()
    }

    #[inline(always)]
    pub(crate) fn nibbles_ptr(&self) -> *const [u8; 32] {
        self.nibbles.as_ptr()
    }
}
