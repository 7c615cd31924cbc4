//! Tier-code (B. Li et al., "Tier-code: an XOR-based RAID-6 code with improved write and
//! degraded-mode read performance", `papers/004_…`): two tiers of labeling on `M = p + 1`
//! members.
//!
//! # Block level (Eq. 1, Eq. 2): which blocks form a stripe
//! The `M` members hold a matrix of `M / 2` block rows; the last is parity. Data block
//! `(i, j)` (row `i = 1..M/2-1`, member `j = 1..M`, both 1-based) gets the label
//! `C_ij = floor((i M + j - 3) / (M - 2))` (Eq. 1) and parity block `j` the label
//! `P_j = floor((M - j + 2) / 2)` (Eq. 2). Blocks of one label form a *block-level stripe*:
//! `M - 2` data blocks that are consecutive in the address space, and its two parity blocks
//! on the two members that hold none of them. With `M = 6`:
//!
//! ```text
//!   member   1  2  3  4  5  6
//!   row 1    1  1  1  1  2  2      data block labels (Eq. 1)
//!   row 2    2  2  3  3  3  3
//!   parity   3  3  2  2  1  1      parity labels (Eq. 2): P then Q
//! ```
//!
//! Zero-based, stripe `s` (label `s + 1`) holds data block `t` (`0..M-2`) on member
//! `(s (M - 2) + t) mod M` and `P`, `Q` on the next two members: the left-rotating placement of
//! Linux md's RAID-6, with a Tier-code *block* as md's chunk ([`block_member`],
//! [`parity_members`]; the tests check them against Eq. 1 and Eq. 2).
//!
//! # Chunk level (Eq. 3, corrected): the code inside a stripe
//! Each block is cut into `M - 2` *chunks* (Eq. 6: block = (M - 2) x chunk); here a Tier-code
//! block is one member's chunk of the stripe (`ErasureCode` chunk) and a Tier-code chunk is one
//! of its rows. Chunk `i` of block `j` (`j = 0..M-2` for the data and `P`) gets the tuple
//! `T_ij = (i, (i + j) mod (M - 1))` (the corrected labeling of `papers/INDEX.md`): `P[i]` is
//! the XOR of the chunks whose first label is `i`, `Q[i]` of those whose second label is `i`,
//! for `i = 0..M-3`; second label `M - 2` belongs to no `Q` chunk. With `p = M - 1` this is
//! exactly RDP ([`crate::Rdp`], `rdp.rs`): the first label is the row, the second the diagonal,
//! `M - 2 = p - 1` the missing diagonal. It reproduces the paper's Eq. 4-5 (their rows count
//! from 1, so their missing label is 0): `Q_1 = A_1 ^ C_4 ^ D_3 ^ P_2`.
//!
//! ```text
//!   M = 6, second labels       A  B  C  D  P      Q
//!                     i = 0    0  1  2  3  4     Q[0]: A0 C3 D2 P1
//!                     i = 1    1  2  3  4  0     Q[1]: A1 B0 D3 P2
//!                     i = 2    2  3  4  0  1     Q[2]: A2 B1 C0 P3
//!                     i = 3    3  4  0  1  2     Q[3]: A3 B2 C1 D0
//! ```
//!
//! **Eq. 3 as printed**, `T_ij = (i, j % (M - 1) + i)`, never wraps (`j < M - 1`): the second
//! labels run `0..2M-5` and only `0..M-3` have a `Q` chunk, so the chunks with `i + j >= M - 2`
//! are covered by their row alone. Losing `D` and `P` above leaves rows 1-3 with two unknowns and
//! no `Q` equation reaching `D[1..]`: not recoverable. [`TierLabeling::PrintedEq3`] builds that
//! code so the tests can show it failing the same two-failure test the corrected code passes.
//!
//! Reconstruction, update and their costs are RDP's (`rdp.rs`, `array.rs`). What Tier-code
//! changes is the *layout*: a data block is a whole chunk-column of one member, consecutive
//! blocks fill a stripe before the next, so writing one block touches the stripe's two parity
//! blocks and no more (RDP, with one cell per block, touches up to three). `metrics.rs` counts
//! both layouts.
//!
//! # Other member counts
//! As for RDP: `p` is the smallest prime with `p - 1 >= M - 2`, the missing data blocks of a
//! stripe are virtual zero blocks, and a block still holds `p - 1` chunks (Eq. 6 then reads
//! block = (p - 1) x chunk).

use crate::array::{prime_for, Cell, Equation, XorArray};
use crate::error::CodeError;
use crate::rdp::{check_geometry, chunk_of_column, rdp_equations, row_equations, xor_array_code};
use crate::{ChunkUpdate, ErasureCode, Located};
use stripeguard_gf::{Kernel, KernelKind};

/// Which chunk-level labeling to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierLabeling {
    /// `T_ij = (i, (i + j) mod (M - 1))` (`papers/INDEX.md`): MDS, RDP in each block stripe.
    Corrected,
    /// `T_ij = (i, j % (M - 1) + i)` as printed: **not** MDS; for negative controls only.
    PrintedEq3,
}

/// Tier-code with `k = M - 2` data blocks per block-level stripe.
pub struct TierCode {
    pub(crate) inner: XorArray,
    p: usize,
    labeling: TierLabeling,
}

/// The printed Eq. 3: `Q[i]` is the XOR of the cells `(r, c)`, `c = 0..=p-1`, with `r + c = i`.
fn printed_equations(k: usize, p: usize) -> Vec<Equation> {
    let mut eqs = row_equations(k, p);
    for i in 0..p - 1 {
        let mut cells: Vec<Cell> = (0..p)
            .filter_map(|c| {
                let chunk = chunk_of_column(k, p, c)?;
                (c <= i).then(|| Cell::new(chunk, i - c))
            })
            .collect();
        cells.push(Cell::new(k + 1, i));
        eqs.push(Equation {
            cells,
            defines: Cell::new(k + 1, i),
        });
    }
    eqs
}

impl TierCode {
    /// `k = M - 2` data blocks on the selected kernel, corrected labeling.
    pub fn new(k: usize) -> Result<Self, CodeError> {
        Self::with_kernel(k, *Kernel::selected()?)
    }

    /// The same on a given kernel.
    pub fn with_kernel(k: usize, kernel: Kernel) -> Result<Self, CodeError> {
        Self::with_labeling(k, prime_for(k), TierLabeling::Corrected, kernel)
    }

    /// Any labeling, with a given prime `p` (`p - 1 >= k`).
    pub fn with_labeling(
        k: usize,
        p: usize,
        labeling: TierLabeling,
        kernel: Kernel,
    ) -> Result<Self, CodeError> {
        check_geometry(k, p)?;
        let equations = match labeling {
            TierLabeling::Corrected => rdp_equations(k, p),
            TierLabeling::PrintedEq3 => printed_equations(k, p),
        };
        Ok(TierCode {
            inner: XorArray::new(k, p - 1, equations, kernel),
            p,
            labeling,
        })
    }

    /// The prime (`M - 1` for an unshortened code).
    pub fn prime(&self) -> usize {
        self.p
    }

    /// Chunks (rows) per block, `p - 1` (Eq. 6): block lengths must be a multiple of it.
    pub fn rows(&self) -> usize {
        self.inner.rows
    }

    /// The labeling this code was built with.
    pub fn labeling(&self) -> TierLabeling {
        self.labeling
    }
}

impl ErasureCode for TierCode {
    xor_array_code!("tier");
}

/// Eq. 1: the label of data block row `i` (1-based), member `j` (1-based), `M` members.
pub fn data_block_label(members: usize, i: usize, j: usize) -> usize {
    (i * members + j - 3) / (members - 2)
}

/// Eq. 2: the label of the parity block on member `j` (1-based).
pub fn parity_block_label(members: usize, j: usize) -> usize {
    (members - j + 2) / 2
}

/// The member (0-based) of logical data block `block` (0-based): stripe `block / (M - 2)`,
/// member `block mod M`.
#[allow(
    clippy::cast_possible_truncation,
    reason = "the remainder is below `members`, a usize"
)]
pub fn block_member(members: usize, block: u64) -> usize {
    (block % members as u64) as usize
}

/// The members (0-based) of `P` and `Q` of block-level stripe `stripe` (0-based).
#[allow(
    clippy::cast_possible_truncation,
    reason = "both are remainders modulo `members`, a usize"
)]
pub fn parity_members(members: usize, stripe: u64) -> (usize, usize) {
    let m = members as u64;
    let p = ((stripe % m) * (m - 2) + (m - 2)) % m;
    (p as usize, ((p + 1) % m) as usize)
}
