//! Fast products with dyadic matrices: the wide Cauchy codes in fewer multiplications.
//!
//! ## Why
//! ISA-L's Cauchy generator has parity coefficients `P[r][j] = 1 / ((k + r) ^ j)`: every entry
//! is a function of `row ^ column` alone. A matrix `D[a][b] = h(a ^ b)` over positions
//! `0..n`, `n = 2^t`, is **dyadic**, and the encode matrix of every `(k, m)` is the block of the
//! 256 x 256 dyadic matrix of `h(s) = 1/s` with rows `k..k+m` and columns `0..k`. Wide codes
//! (64 + 64, 64 + 10) therefore do not need `k * m` multiplications per byte.
//!
//! ## The recursion (Karatsuba for dyadic matrices, characteristic 2)
//! Split positions in halves. `D = [[A, B], [B, A]]` with `A`, `B` dyadic of half the size
//! (`A` from `h` on the low half, `B` from the high half), and `x = (x0, x1)`:
//!
//! ```text
//! y0 = A x0 + B x1 = A (x0 + x1) + (A + B) x1
//! y1 = B x0 + A x1 = B (x0 + x1) + (A + B) x1
//! ```
//!
//! so three half-size products (`A s`, `B s`, `(A + B) x1` with `s = x0 + x1`; `A + B` is dyadic
//! with `h_low ^ h_high`) replace four: `3^t` multiplications for a full `2^t` block instead of
//! `4^t` (64 x 64: 729 instead of 4096). When only some rows are wanted or some inputs are absent
//! (64 + 10 wants 10 of 64 rows; a block may be cut by `k`), the halves that are not needed are
//! dropped and the recursion falls back to the plain two products where Karatsuba saves nothing.
//!
//! ## Two layouts
//! [`DyadicProgram::new`] builds both and keeps the cheaper by [`DyadicProgram::cost`] (vector
//! instructions per 64-byte column; a product and a register sum cost about the same on GFNI).
//!
//! **Recursive** ([`DyadicProgram::recursive`]): the recursion is run once and recorded as a
//! straight-line program over regions (inputs, outputs, scratch): full 8 x 8 blocks become one
//! register-resident Karatsuba kernel (27 products, `Op::Block`; 16 x 16 blocks likewise, 81),
//! smaller or partial blocks a dense product, and the sums of the upper levels vectorised XOR
//! passes through scratch regions, run over column tiles small enough to stay in L2. A full
//! block of 32 or 64 positions (32 + 32, 64 + 64) instead takes two levels at once down to nine
//! register blocks, a column vector at a time with every intermediate on the stack
//! (`Op::TwoLevels`, [`Builder::two_levels`]): 64 + 64 ran 1.8-2x faster than through scratch
//! passes, which took half its time. Best when most rows of a large block are wanted (64 + 64:
//! 729 products instead of 4096).
//!
//! **Cross** ([`DyadicProgram::cross`]): positions are cut into 8-aligned column blocks `T` and
//! row groups `G`; the block `(G, T)` is the 8 x 8 dyadic matrix of `h[8 (G ^ T) + s]`, so the
//! product is a sum over `T` of 8 x 8 dyadic products, each done by three Karatsuba levels. The
//! top level splits a group into quarters: A (`x_lo + x_hi` into rows 0..4), B (`x_lo + x_hi`
//! into rows 4..8) and A + B (`x_hi` into both). Per block the kernel forms the 4 operands of
//! the two lower levels for each branch (`z[2 (P1 == A+B) + (P0 == A+B)]`: `d0+d1+d2+d3`,
//! `d1+d3`, `d2+d3`, `d3`), multiplies each of a quarter's 9 paths once, and adds every product
//! to accumulators in registers (row `v = 2 v1 + v0` takes paths `(P1, P0)` with `P1` in
//! `{v1's half, A+B}` and `P0` in `{v0's half, A+B}`). A whole quarter keeps its middle level
//! unfolded: `q[P1][v0]` = paths `(P1, v0)` + `(P1, A+B)`, one three-way XOR a block each (6,
//! where adding four products to each of 4 rows took 8), and row `v` = `q[v1][v0] + q[A+B][v0]`
//! once per column. So a group keeps 18 accumulators over all blocks, no sum touches memory,
//! and every input is loaded once per column. A group of `r < 8` rows computes only the paths
//! its rows reach (`quarter_paths`) and keeps one accumulator a row in a partial quarter; a
//! second group of 2 rows keeps `w[P0]` = paths `(A, P0)` + `(A+B, P0)` (3 accumulators, 6 sums
//! a block). 64 + 10 takes 8 x (27 + 12) = 312 products instead of 640 and 32 sums a block, in
//! one pass holding rows 0..8 and 8..10 (18 + 3 accumulators, 4 operands at a time: quarter
//! A + B's operands are formed first and then turned into A's and B's in their registers).
//! The recursive layout needed 324 products but about two scratch passes per product and ran
//! no faster than dense.
//!
//! A cross op can also add a region per row before storing; [`DyadicProgram::solve`] uses that
//! to rebuild lost data chunks from parity: `d_L = C_{S,L}^-1 (p_S + C_{S,K} d_K)`. When the
//! rows `S` fit one pass (64 + 10: rows 64..72 and 72..74), the pass applies the small inverse
//! to them in registers and stores `d_L` (`CrossPass::finish`); otherwise the sums go through
//! scratch regions to a dense product. When the lost positions hold a whole 8-aligned block
//! and the rows a whole group, the block's dyadic inverse is folded into the walk's
//! coefficients instead, the parity rows walked as one more block, and only a small Schur
//! step is left for the end (`CrossParts::finish_by_block`).
//!
//! The walk alternates direction from one column vector to the next (first block to last, then
//! back): a column's misaligned loads share their second cache line with the next column's
//! first, and walking back reaches the blocks touched last first, while they are still in L1
//! (64 + 10 at 4 KiB on malloc'd chunks: +7-8%, docs/PERFORMANCE.md).

use crate::field;
use crate::matrix::Matrix;
use crate::tables::MulTables;

/// A region of the program: an input, an output, a scratch region of one tile, or zeros (a
/// shared read-only region of [`ZERO_BYTES`], for positions a product does not have).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reg {
    In(u16),
    Out(u16),
    Tmp(u16),
    Zero,
}

/// Region number `i` as a [`Reg`] index. Positions and region counts come from the caller's
/// `h`, `rows` and `cols`, so this is checked: a program of more than 65536 regions of a kind
/// (far beyond any GF(2^8) code, whose positions are below 256) is a caller bug and panics, as
/// the constructors' other shape checks do.
fn reg_index(i: usize) -> u16 {
    u16::try_from(i).expect("dyadic program with more than 65536 regions of a kind")
}

/// One step of a program.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// `outs = tables * ins` (or `^=` when `add`): at most [`DENSE_REGIONS`] inputs and
    /// [`DENSE_MAX`] outputs.
    Dense {
        table: usize,
        ins: Vec<Reg>,
        outs: Vec<Reg>,
        add: bool,
    },
    /// An 8 x 8 or 16 x 16 dyadic block by Karatsuba in registers (`ins.len()` is the size);
    /// `table` holds its 27 or 81 coefficients in the order of [`karatsuba_coefficients`]. A
    /// 16 x 16 block spills to the stack what the registers cannot hold rather than passing
    /// sums through scratch regions. Rows not wanted (`None`) are computed and dropped: cheaper
    /// than passing the block's sums through memory.
    Block {
        table: usize,
        ins: Vec<Reg>,
        outs: Vec<Option<Reg>>,
        add: bool,
    },
    /// A full dyadic block of `4 b` positions (`b` = 8 or 16) by two Karatsuba levels down to
    /// nine `b x b` register blocks ([`Builder::two_levels`]), one column vector at a time with
    /// its operands and shared products on the stack. `table` holds the nine blocks'
    /// coefficients ([`karatsuba_coefficients`]) in the order of [`TWO_LEVEL_PATHS`].
    TwoLevels {
        table: usize,
        ins: Vec<Reg>,
        outs: Vec<Reg>,
        add: bool,
    },
    /// `dst = a ^ b` for every triple (`dst` may be `a` or `b`: `dst ^= src` is `(src, dst, dst)`).
    Sum(Vec<(Reg, Reg, Reg)>),
    /// `dst = 0`.
    Zero(Vec<Reg>),
    /// Every 8 x 8 block of the product at once, each product added straight into the rows it
    /// reaches (see "Cross" at the top of this file).
    Cross(Box<Cross>),
}

/// The cross layout of a product: 8-column input blocks, and passes over them that each keep
/// the rows of one or two row groups in registers.
#[derive(Clone, Debug)]
pub(crate) struct Cross {
    /// Column blocks: 8 regions each, positions the product does not have reading
    /// [`Reg::Zero`].
    pub blocks: Vec<[Reg; 8]>,
    pub passes: Vec<CrossPass>,
}

/// One pass over the column blocks for one or two row groups.
#[derive(Clone, Debug)]
pub(crate) struct CrossPass {
    /// Rows (a prefix, 1..=8) each group computes; 0 = no second group. One of
    /// [`CROSS_SHAPES`].
    pub shape: [u8; 2],
    /// Coefficients, block-major (every pass reads every block of [`Cross::blocks`]): per block,
    /// each group's 27 in the order of
    /// [`karatsuba_coefficients`].
    pub table: usize,
    /// Each group's destination per row (`None`: not wanted).
    pub outs: Vec<[Option<Reg>; 8]>,
    /// What each group's rows are added to (the destination itself when the program
    /// accumulates).
    pub held: Vec<[Option<Reg>; 8]>,
    /// Instead of storing the rows, the solve's small inverse applied to them in registers
    /// (when its rows fit one pass): how, the table, and the outputs.
    pub finish: Option<(Finish, usize, Vec<Reg>)>,
}

/// How a pass applies the solve's inverse to its rows (rows in slot order: group 1's
/// `shape[0]` then group 2's `shape[1]`, plus their addends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// `outs = table * rows` ([`CrossParts::finish_in_registers`]).
    Dense,
    /// The block solve of [`CrossParts::finish_by_block`]: the walk has made `u` and `z` as
    /// the rows; the table holds `Sc^-1` (`r2 x r2`), then `M` (`8 x r2`), both row-major; the
    /// outputs are the lost block's 8 chunks in position order, then the other `r2`.
    ByBlock,
}

/// Calls `$m!` with every pass shape the kernels are compiled for, as `rows1 rows2` pairs (rows
/// of the first and second group; 0 = no second group): the one list behind [`CROSS_SHAPES`] and
/// the kernels' dispatch.
macro_rules! cross_shapes {
    ($m:ident) => {
        $m!(1 0, 2 0, 3 0, 4 0, 5 0, 6 0, 7 0, 8 0, 8 1, 8 2, 8 3, 8 4)
    };
}
pub(crate) use cross_shapes;

macro_rules! shape_array {
    ($($a:literal $b:literal),*) => {
        [$([$a, $b]),*]
    };
}

/// Pass shapes the kernels are compiled for.
pub(crate) const CROSS_SHAPES: &[[u8; 2]] = &cross_shapes!(shape_array);

/// Which of a quarter's 9 Karatsuba paths `3 P1 + P0` (`P` = 0 for A, 1 for B, 2 for A + B) the
/// first `rows` of its 4 rows need: row `v = 2 v1 + v0` takes path `(P1, P0)` when
/// `v1 in out(P1)` and `v0 in out(P0)`, with `out(A) = {0}`, `out(B) = {1}`, `out(A + B) = {0, 1}`.
pub(crate) const fn quarter_paths(rows: usize) -> u16 {
    let mut mask = 0u16;
    let mut v = 0;
    while v < rows {
        let mut p = 0;
        while p < 9 {
            let (p1, p0) = (p / 3, p % 3);
            let ok1 = p1 == 2 || p1 == (v >> 1);
            let ok0 = p0 == 2 || p0 == (v & 1);
            if ok1 && ok0 {
                mask |= 1 << p;
            }
            p += 1;
        }
        v += 1;
    }
    mask
}

/// The paths `(P1, P0)` of [`Op::TwoLevels`] in the order of its table (`P`: 0 for A, 1 for B,
/// 2 for A + B): the five on an A + B path first, then `(v1, v0)` for the output quarters
/// `v = 2 v1 + v0`.
pub(crate) const TWO_LEVEL_PATHS: [(usize, usize); 9] = [
    (2, 2),
    (0, 2),
    (1, 2),
    (2, 0),
    (2, 1),
    (0, 0),
    (0, 1),
    (1, 0),
    (1, 1),
];

/// Most column blocks a cross op walks (k <= 255, plus the parity block of a solve through a
/// lost block, which then has one column block fewer).
pub(crate) const MAX_CROSS_BLOCKS: usize = 32;

/// Largest dense leaf of the recursion (inputs or outputs), and largest output count of any
/// dense op (every kernel holds 8 accumulators).
pub(crate) const DENSE_MAX: usize = 8;

/// Most inputs of a dense op (the small inverse of [`DyadicProgram::solve`]).
pub(crate) const DENSE_REGIONS: usize = 32;

/// Bytes of each scratch region of the recursive layout: one column tile (1 KiB measured the
/// same on 64 + 64, 2 KiB 5-10% slower).
pub const TILE: usize = 512;

/// Bytes of each scratch region of [`DyadicProgram::solve`] (its sums, at most
/// [`DENSE_REGIONS`] of them): 2 KiB ran 64 + 10 reconstruct 6% faster than 512 bytes (fewer
/// steps, each rebuilding the cross op's pointer tables), 8 KiB no faster than 2.
pub const SOLVE_TILE: usize = 2048;

/// Bytes of [`Reg::Zero`], and the step of a program without scratch regions: such a program
/// (a cross layout) runs over up to this many bytes at once, since a step's set-up (pointer
/// tables for every block) is not free: 512-byte steps cost 64 + 10 7-10%.
pub const ZERO_BYTES: usize = 16 << 10;

/// `outputs = D * inputs` for a block of a dyadic matrix, as a program of kernel steps.
#[derive(Clone, Debug)]
pub struct DyadicProgram {
    pub(crate) ops: Vec<Op>,
    pub(crate) tables: Vec<MulTables>,
    pub(crate) scratch: usize,
    /// Bytes of each scratch region and of every region per step (0: no scratch).
    pub(crate) tile: usize,
    inputs: usize,
    outputs: usize,
    products: usize,
    cost: usize,
}

impl DyadicProgram {
    /// The program for `y[i] = sum_j h[rows[i] ^ cols[j]] * x[j]` (`add`: `y[i] ^= ...`).
    /// `h.len()` is a power of two and every position is below it; `h[0]` is never used when
    /// no row equals a column.
    pub fn new(h: &[u8], rows: &[usize], cols: &[usize], add: bool) -> Self {
        let recursive = Self::recursive(h, rows, cols, add);
        match Self::cross(h, rows, cols, add) {
            Some(cross) if cross.cost() < recursive.cost() => cross,
            _ => recursive,
        }
    }

    /// The recursive layout (Karatsuba over scratch regions down to 8 x 8 or 16 x 16 blocks).
    pub fn recursive(h: &[u8], rows: &[usize], cols: &[usize], add: bool) -> Self {
        let n = h.len();
        assert!(n.is_power_of_two(), "dyadic size must be a power of two");
        assert!(rows.iter().chain(cols).all(|&p| p < n));
        let mut x = vec![None; n];
        for (j, &c) in cols.iter().enumerate() {
            assert!(x[c].is_none(), "column position repeated");
            x[c] = Some(Reg::In(reg_index(j)));
        }
        let mut y = vec![None; n];
        for (i, &r) in rows.iter().enumerate() {
            assert!(y[r].is_none(), "row position repeated");
            y[r] = Some(Reg::Out(reg_index(i)));
        }
        let mut b = Builder::default();
        b.emit(h, &x, &y, add);
        // Vector instructions per column vector: a dense product and its sum, a block's
        // products and the sums of its three Karatsuba levels (57 for 8 x 8: 4 forward, 3 x 15
        // inside, 8 back; 195 for 16 x 16), and a sum through scratch regions at three (two
        // loads and a store, which costs two).
        let cost = b
            .ops
            .iter()
            .map(|op| match op {
                Op::Dense { ins, outs, .. } => 2 * ins.len() * outs.len(),
                Op::Block { ins, .. } if ins.len() == 16 => 81 + 195,
                Op::Block { .. } => 27 + 57,
                Op::Sum(t) => 3 * t.len(),
                // Nine blocks with their sums as compiled (three-way XORs take pairs; 101 and
                // about 30 instructions, where a `Block` above counts every two-way sum), then
                // per quarter row the operands' three sums and each output row adding three
                // shared products. Measured (`layouts` example, 4 KiB): 64 + 64 at 0.55 of
                // the cross layout's time, 32 + 32 at 0.7.
                Op::TwoLevels { ins, .. } if ins.len() == 64 => 9 * (81 + 101) + 16 * 10,
                Op::TwoLevels { .. } => 9 * (27 + 30) + 8 * 10,
                Op::Zero(r) => r.len(),
                Op::Cross(_) => unreachable!("the recursive layout has no cross op"),
            })
            .sum::<usize>();
        DyadicProgram {
            ops: b.ops,
            tables: b.tables,
            scratch: b.max_tmp,
            tile: TILE,
            inputs: cols.len(),
            outputs: rows.len(),
            products: b.products,
            cost,
        }
    }

    /// The cross layout (see the top of this file), when some column is present and `h` spans
    /// at least one 8-position block.
    pub fn cross(h: &[u8], rows: &[usize], cols: &[usize], add: bool) -> Option<Self> {
        let dst: Vec<Reg> = (0..rows.len()).map(|i| Reg::Out(reg_index(i))).collect();
        let held: Vec<Option<Reg>> = dst.iter().map(|&r| add.then_some(r)).collect();
        let c = CrossParts::new(h, rows, cols, &dst, &held)?;
        Some(DyadicProgram {
            ops: c.ops,
            tables: c.tables,
            scratch: 0,
            tile: 0,
            inputs: cols.len(),
            outputs: rows.len(),
            products: c.products,
            cost: c.cost,
        })
    }

    /// `outputs = inv * (held + D x)` with `D[i][j] = h[rows[i] ^ cols[j]]`: the inputs are
    /// `x` (one per column) then `held` (one per row), and `inv` is `outputs x rows`. This is a
    /// rebuild of lost data chunks of a dyadic code from the parity rows `rows` and the
    /// surviving data columns `cols`: `d_L = C_{S,L}^-1 (p_S + C_{S,K} d_K)` (in
    /// characteristic 2 a difference is a sum), where the lost columns are left out of `cols`.
    /// `None` when the cross layout does not apply (no column, or `h` under 8 positions).
    pub fn solve(h: &[u8], rows: &[usize], cols: &[usize], inv: &Matrix) -> Option<Self> {
        Self::solve_with(h, rows, cols, inv, None)
    }

    /// [`DyadicProgram::solve`] for the lost positions `lost` (one per output, in output
    /// order), so that `inv` is `C_{S,L}^-1` with `C_{S,L}[i][j] = h[rows[i] ^ lost[j]]`. When
    /// the lost positions hold a whole 8-aligned block and the rows a whole 8-row group, the
    /// inverse is applied through that block's dyadic inverse ([`CrossParts::finish_by_block`]):
    /// for 64 + 10 losing 8 neighbours and two more, 8 blocks of 39 products and 20 at the end
    /// instead of 7 blocks and the dense inverse's 100.
    /// `None` as for `solve`, or when `C_{S,L}` is singular.
    pub fn solve_lost(h: &[u8], rows: &[usize], cols: &[usize], lost: &[usize]) -> Option<Self> {
        let inv = dyadic_block(h, rows, lost).inverse().ok()?;
        Self::solve_with(h, rows, cols, &inv, Some(lost))
    }

    fn solve_with(
        h: &[u8],
        rows: &[usize],
        cols: &[usize],
        inv: &Matrix,
        lost: Option<&[usize]>,
    ) -> Option<Self> {
        assert_eq!(
            inv.cols(),
            rows.len(),
            "inverse columns differ from the rows"
        );
        let r = rows.len();
        if r > DENSE_REGIONS {
            return None;
        }
        // The sums `held + D x` go to scratch regions 0..r.
        let dst: Vec<Reg> = (0..r).map(|i| Reg::Tmp(reg_index(i))).collect();
        let held: Vec<Option<Reg>> = (0..r)
            .map(|i| Some(Reg::In(reg_index(cols.len() + i))))
            .collect();
        let mut c = CrossParts::new(h, rows, cols, &dst, &held)?;
        let (mut products, mut cost) = (c.products, c.cost);
        let finished = lost
            .and_then(|l| c.finish_by_block(h, rows, l))
            .or_else(|| c.finish_in_registers(inv));
        if let Some((p, k)) = finished {
            products += p;
            cost += k;
        }
        let fused = finished.is_some();
        // Else the small dense product after it, in output groups the kernels hold in
        // registers.
        let mut row0 = 0;
        while !fused && row0 < inv.rows() {
            let g = DENSE_MAX.min(inv.rows() - row0);
            let m = Matrix::from_rows(
                g,
                r,
                (row0..row0 + g)
                    .flat_map(|o| (0..r).map(move |i| (o, i)))
                    .map(|(o, i)| inv[(o, i)])
                    .collect(),
            );
            products += g * r;
            cost += 2 * g * r;
            c.tables.push(MulTables::new(&m));
            c.ops.push(Op::Dense {
                table: c.tables.len() - 1,
                ins: dst.clone(),
                outs: (row0..row0 + g).map(|o| Reg::Out(reg_index(o))).collect(),
                add: false,
            });
            row0 += g;
        }
        let scratch = if fused { 0 } else { r };
        Some(DyadicProgram {
            ops: c.ops,
            tables: c.tables,
            scratch,
            tile: if fused { 0 } else { SOLVE_TILE },
            inputs: cols.len() + r,
            outputs: inv.rows(),
            products,
            cost,
        })
    }

    /// Inputs the program reads.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Outputs it writes.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Multiplications per byte of column, to compare with `inputs * outputs` for a dense
    /// product.
    pub fn products(&self) -> usize {
        self.products
    }

    /// Estimated cost per vector of column, in vector-instruction slots, to choose between
    /// layouts and against a dense product (`2 * inputs * outputs`: a product and its sum each).
    pub fn cost(&self) -> usize {
        self.cost
    }

    /// Scratch bytes a run needs.
    pub fn scratch_bytes(&self) -> usize {
        self.scratch * self.tile
    }

    /// Bytes of every region a run takes at a time: one scratch tile, or for a program without
    /// scratch regions as many as [`Reg::Zero`] holds.
    pub(crate) fn step(&self) -> usize {
        if self.scratch > 0 {
            self.tile
        } else {
            ZERO_BYTES
        }
    }
}

/// The block of the dyadic matrix of `h` with rows `rows` and columns `cols`:
/// `m[i][j] = h[rows[i] ^ cols[j]]`.
pub fn dyadic_block(h: &[u8], rows: &[usize], cols: &[usize]) -> Matrix {
    Matrix::from_rows(
        rows.len(),
        cols.len(),
        rows.iter()
            .flat_map(|&r| cols.iter().map(move |&c| h[r ^ c]))
            .collect(),
    )
}

/// If `m` (r x c) is the top-left block of a dyadic matrix (`m[a][b]` a function of `a ^ b`),
/// that function, over the next power of two of `max(r, c)` positions.
pub fn dyadic_function(m: &Matrix) -> Option<Vec<u8>> {
    let n = m.rows().max(m.cols()).next_power_of_two();
    let mut h: Vec<Option<u8>> = vec![None; n];
    for a in 0..m.rows() {
        for b in 0..m.cols() {
            let v = m[(a, b)];
            match h[a ^ b] {
                None => h[a ^ b] = Some(v),
                Some(w) if w != v => return None,
                _ => {}
            }
        }
    }
    Some(h.into_iter().map(|v| v.unwrap_or(0)).collect())
}

/// The coefficients of a dyadic block in the order the block kernels use them (27 for 8 x 8): for a
/// block of size `n` with function `h`, those of `A` (`h` low half), of `B` (high half), then of
/// `A + B` (`low ^ high`); a 1 x 1 block is `h[0]`.
pub(crate) fn karatsuba_coefficients(h: &[u8], out: &mut Vec<u8>) {
    if h.len() == 1 {
        out.push(h[0]);
        return;
    }
    let half = h.len() / 2;
    let (lo, hi) = h.split_at(half);
    let sum: Vec<u8> = lo.iter().zip(hi).map(|(a, b)| a ^ b).collect();
    karatsuba_coefficients(lo, out);
    karatsuba_coefficients(hi, out);
    karatsuba_coefficients(&sum, out);
}

#[derive(Default)]
struct Builder {
    ops: Vec<Op>,
    tables: Vec<MulTables>,
    next_tmp: usize,
    max_tmp: usize,
    products: usize,
}

impl Builder {
    fn tmp(&mut self) -> Reg {
        let r = Reg::Tmp(reg_index(self.next_tmp));
        self.next_tmp += 1;
        self.max_tmp = self.max_tmp.max(self.next_tmp);
        r
    }

    /// `y (add)= D_h x` where `None` inputs are zero and `None` outputs are not wanted.
    fn emit(&mut self, h: &[u8], x: &[Option<Reg>], y: &[Option<Reg>], add: bool) {
        let n = h.len();
        let wanted = y.iter().filter(|r| r.is_some()).count();
        let present = x.iter().filter(|r| r.is_some()).count();
        if wanted == 0 {
            return;
        }
        if present == 0 {
            if !add {
                self.ops
                    .push(Op::Zero(y.iter().flatten().copied().collect()));
            }
            return;
        }
        if (n == 8 && wanted == n || n == 16 && wanted > 8) && present == n {
            let mut c = Vec::with_capacity(81);
            karatsuba_coefficients(h, &mut c);
            let table = self.karatsuba_table(c);
            self.ops.push(Op::Block {
                table,
                ins: x.iter().map(|r| r.expect("present")).collect(),
                outs: y.to_vec(),
                add,
            });
            return;
        }
        if (n == 32 || n == 64) && wanted == n && present == n {
            self.two_levels(h, x, y, add);
            return;
        }
        if n <= DENSE_MAX {
            self.dense(h, x, y, add);
            return;
        }
        let half = n / 2;
        let (hl, hh) = h.split_at(half);
        let (x0, x1) = x.split_at(half);
        let (y0, y1) = y.split_at(half);
        let none = |v: &[Option<Reg>]| v.iter().all(|r| r.is_none());
        if none(y1) {
            // The first product initialises y0 (or zeroes it), so the second adds.
            self.emit(hl, x0, y0, add);
            self.emit(hh, x1, y0, true);
            return;
        }
        if none(y0) {
            self.emit(hh, x0, y1, add);
            self.emit(hl, x1, y1, true);
            return;
        }
        if none(x1) {
            self.emit(hl, x0, y0, add);
            self.emit(hh, x0, y1, add);
            return;
        }
        if none(x0) {
            self.emit(hh, x1, y0, add);
            self.emit(hl, x1, y1, add);
            return;
        }
        // Karatsuba: s = x0 + x1, t = (A + B) x1, y0 = A s + t, y1 = B s + t.
        let mark = self.next_tmp;
        let mut sums = Vec::new();
        let s: Vec<Option<Reg>> = x0
            .iter()
            .zip(x1)
            .map(|(a, b)| match (*a, *b) {
                (Some(a), Some(b)) => {
                    let t = self.tmp();
                    sums.push((a, b, t));
                    Some(t)
                }
                (a, b) => a.or(b),
            })
            .collect();
        if !sums.is_empty() {
            self.ops.push(Op::Sum(sums));
        }
        let t: Vec<Option<Reg>> = (0..half)
            .map(|a| (y0[a].is_some() || y1[a].is_some()).then(|| self.tmp()))
            .collect();
        let hs: Vec<u8> = hl.iter().zip(hh).map(|(a, b)| a ^ b).collect();
        self.emit(&hs, x1, &t, false);
        self.emit(hl, &s, y0, add);
        self.emit(hh, &s, y1, add);
        let adds: Vec<(Reg, Reg, Reg)> = (0..half)
            .flat_map(|a| {
                let t = t[a];
                [y0[a], y1[a]]
                    .into_iter()
                    .flatten()
                    .map(move |d| (t.expect("made for every wanted row"), d, d))
            })
            .collect();
        self.ops.push(Op::Sum(adds));
        self.next_tmp = mark;
    }

    /// Two Karatsuba levels at once for a full block of 32 or 64 positions ([`Op::TwoLevels`]).
    /// With quarters `x0..x3` (`x_v`, `v = 2 v1 + v0`) and the paths `(P1, P0)` of the two
    /// levels (`P` in A, B, A + B), the nine products `p[P1][P0] = D_{P1 P0} z` take four
    /// operands: `z = x0 + x1 + x2 + x3` when neither level takes A + B, `x1 + x3` when only the
    /// lower one does, `x2 + x3` when only the upper one does, `x3` when both do; and quarter
    /// `v` of the output is the sum of the four paths with `P1` in `{v1, A + B}` and `P0` in
    /// `{v0, A + B}`. Run a column vector at a time, the operands and the five products on an
    /// A + B path stay on the stack (in L1); the one-level recursion passed 240 region sums
    /// (two loads and a store each) through scratch tiles for 64 positions.
    fn two_levels(&mut self, h: &[u8], x: &[Option<Reg>], y: &[Option<Reg>], add: bool) {
        let split = |f: &[u8]| -> [Vec<u8>; 3] {
            let (lo, hi) = f.split_at(f.len() / 2);
            [
                lo.to_vec(),
                hi.to_vec(),
                lo.iter().zip(hi).map(|(a, b)| a ^ b).collect(),
            ]
        };
        let f: Vec<[Vec<u8>; 3]> = split(h).iter().map(|g| split(g)).collect();
        let mut c = Vec::with_capacity(9 * 81);
        for (p1, p0) in TWO_LEVEL_PATHS {
            karatsuba_coefficients(&f[p1][p0], &mut c);
        }
        let table = self.karatsuba_table(c);
        self.ops.push(Op::TwoLevels {
            table,
            ins: x.iter().map(|r| r.expect("present")).collect(),
            outs: y.iter().map(|r| r.expect("wanted")).collect(),
            add,
        });
    }

    /// Adds a table of Karatsuba coefficients, one product each, and returns its index.
    fn karatsuba_table(&mut self, c: Vec<u8>) -> usize {
        self.products += c.len();
        self.tables
            .push(MulTables::new(&Matrix::from_rows(1, c.len(), c)));
        self.tables.len() - 1
    }

    /// A dense leaf over the present inputs and wanted outputs.
    fn dense(&mut self, h: &[u8], x: &[Option<Reg>], y: &[Option<Reg>], add: bool) {
        let cols: Vec<usize> = (0..x.len()).filter(|&b| x[b].is_some()).collect();
        let rows: Vec<usize> = (0..y.len()).filter(|&a| y[a].is_some()).collect();
        let mut m = Vec::with_capacity(rows.len() * cols.len());
        for &a in &rows {
            for &b in &cols {
                m.push(h[a ^ b]);
            }
        }
        self.products += m.iter().filter(|&&c| c != 0).count();
        self.tables.push(MulTables::new(&Matrix::from_rows(
            rows.len(),
            cols.len(),
            m,
        )));
        self.ops.push(Op::Dense {
            table: self.tables.len() - 1,
            ins: cols.iter().map(|&b| x[b].expect("present")).collect(),
            outs: rows.iter().map(|&a| y[a].expect("wanted")).collect(),
            add,
        });
    }
}

/// The ops of a cross layout writing row `i` to `dst[i]` (plus `held[i]` when given).
struct CrossParts {
    ops: Vec<Op>,
    tables: Vec<MulTables>,
    /// The position block `T` of each of the cross op's column blocks, in order.
    block_at: Vec<usize>,
    products: usize,
    cost: usize,
}

impl CrossParts {
    /// When the op is one pass writing every row to scratch region `i` (row `i` of `inv`'s
    /// columns), make that pass store `inv * rows` to `Out(0..)` instead, in registers
    /// ([`CrossPass::finish`]). Returns the rows it multiplies, if it did.
    fn finish_in_registers(&mut self, inv: &Matrix) -> Option<(usize, usize)> {
        let pass = only_pass(&mut self.ops)?;
        let width = (pass.shape[0] + pass.shape[1]) as usize;
        let mut m = Matrix::zero(inv.rows(), width);
        let slots = pass
            .outs
            .iter()
            .zip(pass.shape)
            .flat_map(|(g, n)| &g[..n as usize]);
        for (j, d) in slots.enumerate() {
            if let Some(Reg::Tmp(i)) = *d {
                for o in 0..inv.rows() {
                    m[(o, j)] = inv[(o, i as usize)];
                }
            }
        }
        let outs = (0..inv.rows()).map(|o| Reg::Out(reg_index(o))).collect();
        finish_with(pass, &mut self.tables, Finish::Dense, &m, outs);
        // A product and a sum per coefficient.
        Some((inv.rows() * width, 2 * inv.rows() * width))
    }

    /// The solve through a lost block, folded into the walk: when the op is one pass of a full
    /// row group `G` and `r2` more rows `S2` (a prefix of group `G2`), and the lost positions
    /// are an 8-aligned block `B` and `r2` others `L2`. Write `D_s` for the 8 x 8 dyadic matrix
    /// of `h[8 s..8 s + 8]`, so that `C[G, T] = D_{G^T}` and `C[S2, T]` is the first `r2` rows
    /// of `D_{G2^T}`; `A11 = C[G, B]` (dyadic, and so is its inverse), `A12 = C[G, L2]`,
    /// `A21 = C[S2, B]`, `A22 = C[S2, L2]`; `p1`, `p2` the parity rows of `G` and `S2`. Then
    ///
    /// ```text
    /// u    = A11^-1 y1 = A11^-1 p1 + sum_T (A11^-1 D_{G^T}) d_T
    /// z    = y2 + A21 u = p2 + A21 A11^-1 p1 + sum_T (D_{G2^T} + D_{G2^B} A11^-1 D_{G^T}) d_T
    /// d_L2 = Sc^-1 z                     (Sc = A22 + A21 A11^-1 A12; r2 r2 products)
    /// d_B  = u + (A11^-1 A12) d_L2       (8 r2 products)
    /// ```
    ///
    /// Products and sums of dyadic matrices are dyadic, so the walk makes `u` and `z` itself
    /// with each block's coefficients changed, and `p1` becomes one more block (group 1
    /// `A11^-1`, group 2 `D_{G2^B} A11^-1`): the same products as applying `A11^-1` to the rows
    /// by Karatsuba after the walk, without that Karatsuba's 57 sums or its wait for the last
    /// block. Returns the products and cost it adds, if it applies.
    fn finish_by_block(
        &mut self,
        h: &[u8],
        rows: &[usize],
        lost: &[usize],
    ) -> Option<(usize, usize)> {
        let [Op::Cross(x)] = &mut self.ops[..] else {
            return None;
        };
        let Cross { blocks, passes } = &mut **x;
        let [pass] = &mut passes[..] else {
            return None;
        };
        let r2 = pass.shape[1] as usize;
        if pass.shape[0] != 8 || r2 == 0 || lost.len() != 8 + r2 {
            return None;
        }
        // The row index (into `rows`) of every slot: group 1's 8, then group 2's r2.
        let slots = pass.outs[0]
            .iter()
            .chain(&pass.outs[1][..r2])
            .map(|d| match d {
                Some(Reg::Tmp(i)) => Some(*i as usize),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()?;
        let g = rows[slots[0]] / 8;
        let s2: Vec<usize> = slots[8..].iter().map(|&i| rows[i]).collect();
        let g2 = s2[0] / 8;
        let p1: [Reg; 8] = pass.held[0].map(|r| r.unwrap_or(Reg::Zero));
        if s2.iter().enumerate().any(|(i, &r)| r != 8 * g2 + i) || p1.contains(&Reg::Zero) {
            return None;
        }
        let in_lost = |p: usize| lost.iter().position(|&l| l == p);
        let b = lost
            .iter()
            .map(|&l| l / 8)
            .find(|&b| (0..8).all(|c| in_lost(8 * b + c).is_some()))?;
        let l2: Vec<usize> = lost.iter().copied().filter(|&l| l / 8 != b).collect();
        let at = |r: &[usize], c: &[usize]| dyadic_block(h, r, c);
        let (gpos, bpos): (Vec<usize>, Vec<usize>) = (
            (0..8).map(|i| 8 * g + i).collect(),
            (0..8).map(|c| 8 * b + c).collect(),
        );
        let inv11 = at(&gpos, &bpos).inverse().ok()?;
        let ginv = dyadic_function(&inv11)?;
        let m = inv11.mul(&at(&gpos, &l2));
        let a21 = at(&s2, &bpos);
        let sc = at(&s2, &l2);
        let sc = Matrix::from_rows(
            r2,
            r2,
            sc.as_bytes()
                .iter()
                .zip(a21.mul(&m).as_bytes())
                .map(|(x, y)| x ^ y)
                .collect(),
        );
        let scinv = sc.inverse().ok()?;
        let outs = bpos
            .iter()
            .chain(&l2)
            .map(|&p| in_lost(p).map(|o| Reg::Out(reg_index(o))))
            .collect::<Option<Vec<Reg>>>()?;
        // Nothing fails from here on, so the pass is changed only when the solve applies.
        // The walk's coefficients: every column block's, then the parity block's.
        let d = |s: usize| &h[8 * s..8 * s + 8];
        let e = dyadic_product(d(g2 ^ b), &ginv);
        let mut coefs = Vec::with_capacity(54 * (self.block_at.len() + 1));
        for &t in &self.block_at {
            karatsuba_coefficients(&dyadic_product(&ginv, d(g ^ t)), &mut coefs);
            let f2: Vec<u8> = d(g2 ^ t)
                .iter()
                .zip(dyadic_product(&e, d(g ^ t)))
                .map(|(a, b)| a ^ b)
                .collect();
            karatsuba_coefficients(&f2, &mut coefs);
        }
        karatsuba_coefficients(&ginv, &mut coefs);
        karatsuba_coefficients(&e, &mut coefs);
        self.tables[pass.table] = MulTables::new(&Matrix::from_rows(1, coefs.len(), coefs));
        blocks.push(p1);
        debug_assert!(blocks.len() <= MAX_CROSS_BLOCKS);
        pass.held[0] = [None; 8];
        let (block_products, block_sums) = block_work(pass.shape);
        let mut table = scinv.as_bytes().to_vec();
        table.extend_from_slice(m.as_bytes());
        let table = Matrix::from_rows(1, table.len(), table);
        finish_with(pass, &mut self.tables, Finish::ByBlock, &table, outs);
        // The parity block, and a product and a sum per coefficient of the dense steps.
        let dense = r2 * r2 + 8 * r2;
        Some((
            block_products + dense,
            block_products + block_sums + 2 * dense,
        ))
    }

    fn new(
        h: &[u8],
        rows: &[usize],
        cols: &[usize],
        dst: &[Reg],
        held: &[Option<Reg>],
    ) -> Option<CrossParts> {
        let n = h.len();
        assert!(n.is_power_of_two(), "dyadic size must be a power of two");
        assert!(rows.iter().chain(cols).all(|&p| p < n));
        if n < 8 || rows.is_empty() || cols.is_empty() {
            return None;
        }
        // Column blocks, in position order; absent positions read zeros.
        let zero = Reg::Zero;
        let mut block_of = vec![None; n / 8];
        let mut blocks: Vec<(usize, [Reg; 8])> = Vec::new();
        let mut sorted: Vec<(usize, usize)> = cols.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        for (c, j) in sorted {
            let b = *block_of[c / 8].get_or_insert_with(|| {
                blocks.push((c / 8, [zero; 8]));
                blocks.len() - 1
            });
            assert!(blocks[b].1[c % 8] == zero, "column position repeated");
            blocks[b].1[c % 8] = Reg::In(reg_index(j));
        }
        // Row groups: destination and addend per row `u` of each 8-row group.
        #[allow(clippy::type_complexity)]
        let mut groups: Vec<(usize, [Option<Reg>; 8], [Option<Reg>; 8])> = Vec::new();
        let mut sorted: Vec<(usize, usize)> = rows.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        for (r, i) in sorted {
            if groups.last().is_none_or(|g| g.0 != r / 8) {
                groups.push((r / 8, [None; 8], [None; 8]));
            }
            let g = groups.last_mut().expect("pushed");
            assert!(g.1[r % 8].is_none(), "row position repeated");
            g.1[r % 8] = Some(dst[i]);
            g.2[r % 8] = held[i];
        }
        let mut ops = Vec::new();
        let mut tables = Vec::new();
        // Passes: a full row group alone, or with a group of at most 4 rows (the registers hold
        // 12 + 4 accumulators and the 8 operands of a block). A group computes a prefix of its
        // rows (any other set: all 8).
        let rows: Vec<usize> = groups
            .iter()
            .map(|(_, outs, _)| {
                let last = outs
                    .iter()
                    .rposition(|r| r.is_some())
                    .expect("a group has a row");
                if outs[..=last].iter().all(|r| r.is_some()) {
                    last + 1
                } else {
                    8
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| std::cmp::Reverse(rows[g]));
        let mut small: Vec<usize> = order.iter().copied().filter(|&g| rows[g] <= 4).collect();
        let mut packs: Vec<Vec<usize>> = Vec::new();
        for &g in order.iter().filter(|&&g| rows[g] > 4) {
            let mut pack = vec![g];
            if rows[g] == 8 {
                pack.extend(small.pop());
            }
            packs.push(pack);
        }
        packs.extend(small.into_iter().map(|g| vec![g]));
        let nb = blocks.len();
        let mut passes = Vec::new();
        let mut products = 0;
        let mut sums = 0;
        for pack in packs {
            let mut shape = [0u8; 2];
            for (slot, &g) in pack.iter().enumerate() {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a group computes at most its 8 rows"
                )]
                let r = rows[g] as u8;
                shape[slot] = r;
            }
            let (p, s) = block_work(shape);
            products += nb * p;
            sums += nb * s;
            let mut coefs = Vec::with_capacity(nb * pack.len() * 27);
            for &(t, ..) in &blocks {
                for &g in &pack {
                    let base = 8 * (groups[g].0 ^ t);
                    karatsuba_coefficients(&h[base..base + 8], &mut coefs);
                }
            }
            let outs = pack.iter().map(|&g| groups[g].1).collect();
            tables.push(MulTables::new(&Matrix::from_rows(1, coefs.len(), coefs)));
            let held = pack.iter().map(|&g| groups[g].2).collect();
            passes.push(CrossPass {
                shape,
                table: tables.len() - 1,
                outs,
                held,
                finish: None,
            });
        }
        debug_assert!(passes.iter().all(|p| CROSS_SHAPES.contains(&p.shape)));
        debug_assert!(blocks.len() <= MAX_CROSS_BLOCKS);
        ops.push(Op::Cross(Box::new(Cross {
            blocks: blocks.iter().map(|b| b.1).collect(),
            passes,
        })));
        Some(CrossParts {
            ops,
            tables,
            block_at: blocks.iter().map(|b| b.0).collect(),
            products,
            // A product and a register sum each take a vector slot.
            cost: products + sums,
        })
    }
}

/// Products and sums a column block costs a pass of `shape`.
fn block_work(shape: [u8; 2]) -> (usize, usize) {
    let paths = |n: usize| quarter_paths(n).count_ones() as usize;
    // Three-way sums a block (`quarter_add`, `second_add` in the kernels): a whole quarter 6,
    // else two per row; a second group of two rows 6, else four per row.
    let quarter = |n: usize| if n == 4 { 6 } else { 2 * n };
    // The block's operands of both branches: 8 sums (`high_operands`, `low_operands`).
    let (mut products, mut sums) = (0, 8);
    for (slot, r) in shape.map(usize::from).into_iter().enumerate() {
        let (qa, qb) = (r.min(4), r.saturating_sub(4));
        products += paths(qa) + paths(qb) + paths(qa);
        sums += match (slot, r) {
            (_, 0) => 0,
            (0, _) => quarter(qa) + quarter(qb) + quarter(qa),
            (_, 2) => 6,
            _ => 4 * r,
        };
    }
    (products, sums)
}

/// The function of the product of two dyadic matrices of functions `f` and `g`: it is dyadic,
/// `(F G)[a][c] = sum_j f(a ^ j) g(j ^ c) = sum_j f(j) g(j ^ a ^ c)`.
fn dyadic_product(f: &[u8], g: &[u8]) -> Vec<u8> {
    (0..f.len())
        .map(|c| (0..f.len()).fold(0, |acc, j| acc ^ field::mul(f[j], g[j ^ c])))
        .collect()
}

/// The one pass of a program that is a single cross op of a single pass.
fn only_pass(ops: &mut [Op]) -> Option<&mut CrossPass> {
    let [Op::Cross(x)] = ops else {
        return None;
    };
    let [pass] = &mut x.passes[..] else {
        return None;
    };
    Some(pass)
}

/// Make `pass` apply `table` to its rows (`how`) and write `outs` instead of storing the rows.
fn finish_with(
    pass: &mut CrossPass,
    tables: &mut Vec<MulTables>,
    how: Finish,
    table: &Matrix,
    outs: Vec<Reg>,
) {
    for g in &mut pass.outs {
        *g = [None; 8];
    }
    tables.push(MulTables::new(table));
    pass.finish = Some((how, tables.len() - 1, outs));
}

/// `h(s) = 1 / s` over GF(2^8) (and 0 at 0): the dyadic function of ISA-L's Cauchy matrix.
pub fn cauchy_function() -> Vec<u8> {
    (0..=255u8)
        .map(|s| if s == 0 { 0 } else { field::inv(s) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_block_takes_three_to_the_t_products() {
        let h = cauchy_function();
        // Rows 64..128, columns 0..64: the 64 + 64 Cauchy encode.
        let rows: Vec<usize> = (64..128).collect();
        let cols: Vec<usize> = (0..64).collect();
        let p = DyadicProgram::new(&h, &rows, &cols, false);
        assert_eq!(p.products(), 729);
        // 64 + 10 recursively: four 16 x 16 blocks, each computed whole (81) with 6 rows dropped.
        let p = DyadicProgram::recursive(&h, &rows[..10], &cols, false);
        assert_eq!(p.products(), 4 * 81);
        // In the cross layout: 8 column blocks, each with a full row group (27) and the 12
        // paths of rows 8 and 9; chosen, as it needs no scratch sums.
        let p = DyadicProgram::new(&h, &rows[..10], &cols, false);
        assert_eq!(p.products(), 8 * (27 + 12));
    }

    #[test]
    fn dyadic_function_recognises_only_dyadic_blocks() {
        let h = cauchy_function();
        let m = Matrix::from_rows(8, 8, (0..64).map(|i| h[8 + ((i / 8) ^ (i % 8))]).collect());
        assert_eq!(dyadic_function(&m).unwrap(), h[8..16].to_vec());
        let mut bytes = m.as_bytes().to_vec();
        bytes[9] ^= 1;
        assert!(dyadic_function(&Matrix::from_rows(8, 8, bytes)).is_none());
    }
}
