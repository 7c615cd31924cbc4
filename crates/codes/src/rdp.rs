//! RDP, Row-Diagonal Parity (P. Corbett et al., "Row-diagonal parity for double disk failure
//! correction", FAST 2004): a RAID-6 code that uses XOR only.
//!
//! # The array
//! For a prime `p`, a stripe is an array of `p - 1` rows and `p + 1` columns: data columns
//! `0..p-1`, the row parity `P` (column `p - 1`) and the diagonal parity `Q` (column `p`). Here a
//! column is one chunk of a member and a row is `1 / (p - 1)` of it, contiguous, so a chunk holds
//! `p - 1` rows and its length must be a multiple of `p - 1`.
//!
//! - `P[r] = d_0[r] ^ .. ^ d_{p-2}[r]`
//! - cell `(r, c)` of columns `0..=p-1` (data **and P**) lies on diagonal `(r + c) mod p`;
//!   `Q[d]` is the XOR of the `p - 1` cells of diagonal `d`, for `d = 0..p-2`. Diagonal `p - 1`
//!   is the *missing* diagonal: it is not stored.
//!
//! Worked layout, `p = 5` (4 rows, 4 data columns), each cell showing its diagonal:
//!
//! ```text
//!          d0  d1  d2  d3 |  P |  Q
//!   row 0   0   1   2   3 |  4 | Q[0] = d0[0] ^ d3[2] ^ d2[3] ^ P[1]
//!   row 1   1   2   3   4 |  0 | Q[1] = d1[0] ^ d0[1] ^ d3[3] ^ P[2]
//!   row 2   2   3   4   0 |  1 | Q[2] = d2[0] ^ d1[1] ^ d0[2] ^ P[3]
//!   row 3   3   4   0   1 |  2 | Q[3] = d3[0] ^ d2[1] ^ d1[2] ^ d0[3]
//! ```
//!
//! # Two lost columns
//! Each diagonal misses exactly one of the columns `0..=p-1` (column `c` has no cell on diagonal
//! `c - 1 mod p`, it would sit on row `p - 1`), and every row holds one cell of every column. With
//! columns `a` and `b` lost, the diagonal that misses `b` (if it is stored) has one unknown cell,
//! in `a`; its row then has one unknown, in `b`; that cell's diagonal has one unknown in `a`; and
//! so on until the chain reaches the missing diagonal. The other chain starts from the diagonal
//! that misses `a`. Since `p` is prime the two chains together visit all `2 (p - 1)` lost cells.
//! Above, losing `d0` and `d1`: `Q[0]` gives `d0[0]`, row 0 gives `d1[0]`, `Q[1]` gives `d0[1]`,
//! row 1 gives `d1[1]`, ... row 3 gives `d1[3]` (diagonal 4 is missing, the chain ends). A lost `Q`
//! is recomputed after the rest; a lost `P` is just another column of the diagonals. This is
//! peeling ("an equation with one unknown solves it", `array.rs`), which the tests check
//! succeeds for every pair.
//!
//! Cost: every cell is the XOR of `p - 1` others, so encoding the `2 (p - 1)` parity cells takes
//! `2 (p - 1)(p - 2)` cell XORs, `2 (p - 2)` chunk-sized XORs a stripe, the optimum for a RAID-6
//! with `p - 1` data chunks (`2 (k - 1)`); rebuilding any two columns takes the same.
//! A data cell changes its `P` row, its diagonal's `Q` (unless it is on the missing diagonal) and,
//! through `P`, the `Q` of the `P` cell's diagonal (unless that is the missing one): up to three
//! parity cells, not two.
//!
//! # Other member counts
//! For `k` data chunks, `p` is the smallest prime with `p - 1 >= k` (at least 3) and the data
//! columns `k..p-1` are virtual zero columns (the shortening the RDP paper describes): they are
//! left out of every equation and stored nowhere. A chunk still holds `p - 1` rows.

use crate::array::{is_prime, prime_for, Cell, Equation, XorArray};
use crate::error::CodeError;
use crate::{ChunkUpdate, ErasureCode, Located};
use stripeguard_gf::{Kernel, KernelKind};

/// RDP with `k` data chunks, `P` and the diagonal parity `Q`.
pub struct Rdp {
    pub(crate) inner: XorArray,
    p: usize,
}

/// Largest `k` accepted (chunk indices fit `u16`, and the stripe stays within `k + 2 <= 255`
/// like the other codes).
pub(crate) const MAX_DATA: usize = 253;

/// Largest prime `p` accepted: the `p - 1` rows of a chunk are numbered in a `u16` (`Cell`).
pub(crate) const MAX_PRIME: usize = u16::MAX as usize + 1;

/// Check `k` and `p` for an RDP-shaped code.
pub(crate) fn check_geometry(k: usize, p: usize) -> Result<(), CodeError> {
    let bad = |reason| Err(CodeError::Geometry { k, m: 2, reason });
    if k == 0 || k > MAX_DATA {
        return bad("need 1 <= k and k + 2 <= 255");
    }
    if p < 3 || !is_prime(p) {
        return bad("p must be a prime >= 3");
    }
    if p > MAX_PRIME {
        return bad("p - 1 (the rows per chunk) must be at most 65535");
    }
    if p - 1 < k {
        return bad("p - 1 must be at least k (the data columns)");
    }
    Ok(())
}

/// The chunk that holds array column `c` (`0..=p`), or `None` for a virtual zero column.
pub(crate) fn chunk_of_column(k: usize, p: usize, c: usize) -> Option<usize> {
    match c {
        c if c < k => Some(c),
        c if c < p - 1 => None,
        c if c == p - 1 => Some(k),
        _ => Some(k + 1),
    }
}

/// The row equations (`P`).
pub(crate) fn row_equations(k: usize, p: usize) -> Vec<Equation> {
    (0..p - 1)
        .map(|r| Equation {
            cells: (0..=k).map(|j| Cell::new(j, r)).collect(),
            defines: Cell::new(k, r),
        })
        .collect()
}

/// RDP's equations: the rows, then the diagonals `0..p-1` of columns `0..=p-1`.
pub(crate) fn rdp_equations(k: usize, p: usize) -> Vec<Equation> {
    let mut eqs = row_equations(k, p);
    for d in 0..p - 1 {
        let mut cells: Vec<Cell> = (0..p)
            .filter_map(|c| {
                let r = (d + p - c) % p;
                let chunk = chunk_of_column(k, p, c)?;
                (r < p - 1).then(|| Cell::new(chunk, r))
            })
            .collect();
        cells.push(Cell::new(k + 1, d));
        eqs.push(Equation {
            cells,
            defines: Cell::new(k + 1, d),
        });
    }
    eqs
}

impl Rdp {
    /// `k` data chunks on the selected kernel, `p` the smallest prime with `p - 1 >= k`.
    pub fn new(k: usize) -> Result<Self, CodeError> {
        Self::with_kernel(k, *Kernel::selected()?)
    }

    /// The same on a given kernel.
    pub fn with_kernel(k: usize, kernel: Kernel) -> Result<Self, CodeError> {
        Self::with_prime(k, prime_for(k), kernel)
    }

    /// `k` data chunks with a given prime `p` (`p - 1 >= k`; the other columns are virtual).
    pub fn with_prime(k: usize, p: usize, kernel: Kernel) -> Result<Self, CodeError> {
        check_geometry(k, p)?;
        Ok(Rdp {
            inner: XorArray::new(k, p - 1, rdp_equations(k, p), kernel),
            p,
        })
    }

    /// The prime.
    pub fn prime(&self) -> usize {
        self.p
    }

    /// Rows per chunk, `p - 1`: chunk lengths must be a multiple of it.
    pub fn rows(&self) -> usize {
        self.inner.rows
    }
}

/// The `ErasureCode` methods of a code backed by an `XorArray` named `inner`.
macro_rules! xor_array_code {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn data_chunks(&self) -> usize {
            self.inner.k
        }
        fn parity_chunks(&self) -> usize {
            2
        }
        fn kernel(&self) -> KernelKind {
            self.inner.kernel.kind()
        }
        fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
            self.inner.encode(data, parity)
        }
        fn update(
            &self,
            changes: &[ChunkUpdate<'_>],
            parity: &mut [&mut [u8]],
        ) -> Result<(), CodeError> {
            self.inner.update(changes, parity)
        }
        fn accumulate(
            &self,
            index: usize,
            data: &[u8],
            parity: &mut [&mut [u8]],
        ) -> Result<(), CodeError> {
            self.inner.accumulate(index, data, parity)
        }
        fn reconstruct(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<(), CodeError> {
            self.inner.reconstruct(chunks, erased)
        }
        fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError> {
            self.inner.locate(chunks, erased)
        }
        fn chunk_multiple(&self) -> usize {
            self.inner.rows
        }
        fn parity_is_byte_local(&self) -> bool {
            false
        }
    };
}
pub(crate) use xor_array_code;

impl ErasureCode for Rdp {
    xor_array_code!("rdp");
}
