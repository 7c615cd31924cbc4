//! Dense matrices over GF(2^8): the generator matrices of the codes and their inverses.
//!
//! Inversion is Gauss-Jordan elimination with row swaps; a singular matrix is reported, never
//! "inverted". Matrices are small (at most 255 x 255), so clarity beats speed here: the region
//! kernels do the heavy work.

use crate::field::{inv, mul};

/// A row-major matrix over GF(2^8).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

/// The matrix given to [`Matrix::inverse`] has no inverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("matrix is singular")]
pub struct Singular;

impl Matrix {
    /// The all-zero matrix.
    pub fn zero(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    /// The identity matrix of order `n`.
    pub fn identity(n: usize) -> Self {
        let mut m = Matrix::zero(n, n);
        for i in 0..n {
            m[(i, i)] = 1;
        }
        m
    }

    /// A matrix from row-major bytes.
    pub fn from_rows(rows: usize, cols: usize, data: Vec<u8>) -> Self {
        assert_eq!(data.len(), rows * cols, "matrix data has the wrong length");
        Matrix { rows, cols, data }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row-major bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Row `r` as a slice.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The matrix made of the given rows of `self`, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut data = Vec::with_capacity(rows.len() * self.cols);
        for &r in rows {
            data.extend_from_slice(self.row(r));
        }
        Matrix {
            rows: rows.len(),
            cols: self.cols,
            data,
        }
    }

    /// Matrix product `self * rhs`.
    pub fn mul(&self, rhs: &Matrix) -> Matrix {
        assert_eq!(self.cols, rhs.rows, "matrix shapes do not chain");
        let mut out = Matrix::zero(self.rows, rhs.cols);
        for i in 0..self.rows {
            for l in 0..self.cols {
                let a = self[(i, l)];
                if a == 0 {
                    continue;
                }
                for j in 0..rhs.cols {
                    out[(i, j)] ^= mul(a, rhs[(l, j)]);
                }
            }
        }
        out
    }

    /// Inverse of a square matrix.
    pub fn inverse(&self) -> Result<Matrix, Singular> {
        assert_eq!(self.rows, self.cols, "only square matrices have inverses");
        let n = self.rows;
        let mut a = self.clone();
        let mut b = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| a[(r, col)] != 0).ok_or(Singular)?;
            if pivot != col {
                a.swap_rows(pivot, col);
                b.swap_rows(pivot, col);
            }
            let scale = inv(a[(col, col)]);
            a.scale_row(col, scale);
            b.scale_row(col, scale);
            for r in 0..n {
                let f = a[(r, col)];
                if r != col && f != 0 {
                    a.add_scaled_row(r, col, f);
                    b.add_scaled_row(r, col, f);
                }
            }
        }
        Ok(b)
    }

    fn swap_rows(&mut self, x: usize, y: usize) {
        for c in 0..self.cols {
            self.data.swap(x * self.cols + c, y * self.cols + c);
        }
    }

    fn scale_row(&mut self, r: usize, f: u8) {
        for v in &mut self.data[r * self.cols..(r + 1) * self.cols] {
            *v = mul(*v, f);
        }
    }

    /// row[dst] ^= f * row[src]
    fn add_scaled_row(&mut self, dst: usize, src: usize, f: u8) {
        for c in 0..self.cols {
            let v = mul(self.data[src * self.cols + c], f);
            self.data[dst * self.cols + c] ^= v;
        }
    }
}

impl std::ops::Index<(usize, usize)> for Matrix {
    type Output = u8;
    fn index(&self, (r, c): (usize, usize)) -> &u8 {
        assert!(r < self.rows && c < self.cols);
        &self.data[r * self.cols + c]
    }
}

impl std::ops::IndexMut<(usize, usize)> for Matrix {
    fn index_mut(&mut self, (r, c): (usize, usize)) -> &mut u8 {
        assert!(r < self.rows && c < self.cols);
        &mut self.data[r * self.cols + c]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn random_invertible_matrices_invert() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut inverted = 0;
        for n in 1..20 {
            for _ in 0..20 {
                let data: Vec<u8> = (0..n * n).map(|_| rng.random()).collect();
                let m = Matrix::from_rows(n, n, data);
                if let Ok(i) = m.inverse() {
                    assert_eq!(m.mul(&i), Matrix::identity(n));
                    assert_eq!(i.mul(&m), Matrix::identity(n));
                    inverted += 1;
                }
            }
        }
        assert!(inverted > 300);
    }

    #[test]
    fn singular_matrix_is_reported() {
        let m = Matrix::from_rows(2, 2, vec![3, 5, 3, 5]);
        assert_eq!(m.inverse(), Err(Singular));
    }
}
