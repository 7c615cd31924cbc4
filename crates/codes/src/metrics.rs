//! What a RAID-6 code costs per write and per degraded read, and how many XORs its encode and
//! decode do, counted by enumerating the code's layout and schedules (no closed forms; the tests
//! hold the counts to the closed forms that are known).
//!
//! # The three layouts compared
//! `M` members, `k = M - 2` data chunks per stripe. A *block* is the unit a request addresses
//! (the paper's 64 KiB block); consecutive logical blocks are consecutive addresses.
//!
//! - **raid6** (our Linux md RAID-6 P+Q): a block is a chunk; a stripe holds `k` consecutive
//!   blocks, `P` and `Q` (md rotates them across members; see below why that does not matter).
//! - **rdp** as the Tier-code paper compares it: a block is one *cell* of the RDP array
//!   (`1 / (p - 1)` of a chunk); a stripe holds `(p - 1) k` blocks, numbered along the rows
//!   (block `r k + j` is row `r` of data chunk `j`), and `2 (p - 1)` parity blocks.
//! - **tier**: a block is a whole chunk-column of the RDP array (Eq. 6: `p - 1` cells); a
//!   block-level stripe holds `k` consecutive blocks, `P` and `Q`: md's layout with RDP as the
//!   code inside the stripe.
//!
//! Every stripe of a layout has the same structure, so one stripe (with members numbered data
//! `0..k`, then `P`, `Q`) describes it. Parity rotation only permutes which member plays which
//! role in a stripe; the averages below run over every failed member (pair), which sees every
//! role assignment equally often, so rotation leaves them unchanged.
//!
//! # What is counted
//! - **update complexity**: parity blocks whose contents change when one data block is written
//!   (from each parity cell's expansion into data cells, `array.rs`); average and maximum over the
//!   stripe's data blocks.
//! - **XORs**: chunk-sized region XORs per stripe (cell XORs divided by `p - 1` for the array
//!   codes), from the schedules the code runs: encode, and reconstruct of every pair of lost
//!   members (average and maximum). For raid6, from the matrices it multiplies by: a row with `s`
//!   non-zero coefficients costs `s - 1` XORs and every coefficient other than 0 and 1 a GF(2^8)
//!   multiplication (reported apart; the array codes have none).
//! - **multi-block access complexity** (the paper's Eq. 7): a write of `τ` consecutive blocks,
//!   starting at every block of a stripe and for `τ = 1..=M (M - 2)` (the paper's range), averaged:
//!   `writes` = parity blocks updated; `reads` = blocks read to compute them, per stripe the
//!   cheaper of read-modify-write (the old copies of the written data blocks and of the touched
//!   parity) and reconstruct-write (the data blocks outside the write that the touched parity
//!   depends on; 0 for a full stripe).
//! - **degraded read complexity** (Eq. 8): with members `f1 < f2` failed, a read of `τ`
//!   consecutive blocks (every start, `τ = 1..=M (M - 2)`, every pair) needs extra reads to rebuild
//!   the lost data blocks it asks for; averaged (Eq. 8 divides by the same count). raid6 is MDS per
//!   block: a stripe with a lost requested block needs any `k` of its surviving blocks, so
//!   `k - (requested surviving blocks)` more. The array codes follow their decoder: each lost cell
//!   is rebuilt along the cheaper of its two chains (its row or its diagonal, then alternating, as
//!   in `rdp.rs`), reading every surviving cell of the equations it walks; a block counts once
//!   per request however many of its cells are read, and requested blocks are free. The same with
//!   one failed member is reported beside it (`degraded_read_1`), the common case.

use crate::array::{Cell, XorArray};
use crate::error::CodeError;
use crate::{Raid6, Rdp, TierCode};
use std::collections::HashMap;
use stripeguard_gf::{Kernel, KernelKind, Matrix};

/// One code's numbers for one member count.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CodeMetrics {
    /// `raid6`, `rdp` or `tier`.
    pub code: &'static str,
    /// Members `M`.
    pub members: usize,
    /// The array code's prime (`None` for raid6).
    pub prime: Option<usize>,
    /// What one block is.
    pub block: &'static str,
    /// Data blocks per stripe.
    pub data_blocks_per_stripe: usize,
    /// Parity blocks per stripe.
    pub parity_blocks_per_stripe: usize,
    /// Parity blocks changed by a one-block write, average over the data blocks.
    pub update_avg: f64,
    /// The same, maximum.
    pub update_max: usize,
    /// Chunk-sized XORs to encode one stripe.
    pub encode_xors: f64,
    /// Chunk-sized GF(2^8) multiplications to encode one stripe.
    pub encode_mults: f64,
    /// Chunk-sized XORs to rebuild two lost members, average over every pair.
    pub decode_xors_avg: f64,
    /// The same, the worst pair.
    pub decode_xors_max: f64,
    /// Chunk-sized multiplications to rebuild two lost members, average over every pair.
    pub decode_mults_avg: f64,
    /// Eq. 7: parity blocks written per request, average.
    pub write_parity_avg: f64,
    /// Eq. 7: blocks read per request, average.
    pub write_reads_avg: f64,
    /// Eq. 7: `write_parity_avg + write_reads_avg`.
    pub multi_block_access: f64,
    /// Eq. 8 with one failed member: extra blocks read per request, average.
    pub degraded_read_1: f64,
    /// Eq. 8 (two failed members): extra blocks read per request, average.
    pub degraded_read_2: f64,
    /// Largest request size averaged over, `M (M - 2)` blocks.
    pub request_blocks_max: usize,
}

/// The metrics of raid6, rdp and tier for `members` members (at least 4).
pub fn compare(members: usize) -> Result<Vec<CodeMetrics>, CodeError> {
    let (raid6, rdp, tier) = three_codes(members, "metrics need 4 <= members <= 255")?;
    Ok(vec![
        raid6_metrics(&raid6, members),
        array_metrics("rdp", &rdp.inner, rdp.prime(), members, Blocks::Cells),
        array_metrics("tier", &tier.inner, tier.prime(), members, Blocks::Columns),
    ])
}

/// The three RAID-6 codes compared, with `members - 2` data chunks, on the scalar kernel (the
/// counts do not depend on it).
fn three_codes(members: usize, reason: &'static str) -> Result<(Raid6, Rdp, TierCode), CodeError> {
    if !(4..=crate::rdp::MAX_DATA + 2).contains(&members) {
        return Err(CodeError::Geometry {
            k: members.saturating_sub(2),
            m: 2,
            reason,
        });
    }
    let k = members - 2;
    let scalar = Kernel::new(KernelKind::Scalar).expect("the scalar kernel always runs");
    Ok((
        Raid6::with_kernel(k, scalar)?,
        Rdp::with_kernel(k, scalar)?,
        TierCode::with_kernel(k, scalar)?,
    ))
}

/// How an array code's cells group into blocks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocks {
    /// A block is one cell; data blocks run along the rows.
    Cells,
    /// A block is one chunk (all its rows).
    Columns,
}

/// One stripe of a layout: blocks `0..nd` are data in address order, `nd..nd + np` parity.
struct Stripe {
    nd: usize,
    np: usize,
    /// Member (chunk) of every block.
    member: Vec<usize>,
    /// Per data block: parity blocks it changes.
    touched: Vec<Vec<usize>>,
    /// Per parity block: data blocks it depends on.
    support: Vec<Vec<usize>>,
}

/// Bit sets over a stripe's blocks.
#[derive(Clone, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn or(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }
    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Per-stripe cost of every range `[a, b)` of data blocks, `table[a][b - a - 1]`.
type RangeTable = Vec<Vec<usize>>;

/// Average over starts `0..nd` and sizes `1..=max` of a per-stripe range cost summed over the
/// stripes a request covers.
fn average_over_requests(nd: usize, max: usize, table: &RangeTable) -> f64 {
    let cost = |a: usize, b: usize| table[a][b - a - 1];
    let mut total = 0usize;
    for start in 0..nd {
        for size in 1..=max {
            let end = start + size;
            if end <= nd {
                total += cost(start, end);
                continue;
            }
            total += cost(start, nd);
            let full = (end - nd) / nd;
            total += full * cost(0, nd);
            let rest = (end - nd) % nd;
            if rest > 0 {
                total += cost(0, rest);
            }
        }
    }
    total as f64 / (nd * max) as f64
}

/// A set of blocks that only grows, with its size and how many of its blocks lie in a request
/// range `[a, b)` that only grows at its end: every range cost below in O(1) amortized.
struct Growing {
    bits: Bits,
    count: usize,
    inside: usize,
}

impl Growing {
    fn new(n: usize) -> Growing {
        Growing {
            bits: Bits::new(n),
            count: 0,
            inside: 0,
        }
    }

    /// The range grew to `[a, b)`: block `b - 1` joined it.
    fn extend_range(&mut self, b: usize) {
        if self.bits.get(b - 1) {
            self.inside += 1;
        }
    }

    /// Add `other` to the set, with the range at `[a, b)`.
    fn or(&mut self, other: &Bits, a: usize, b: usize) {
        for (w, (mine, theirs)) in self.bits.0.iter_mut().zip(&other.0).enumerate() {
            let mut new = theirs & !*mine;
            *mine |= new;
            self.count += new.count_ones() as usize;
            while new != 0 {
                let i = w * 64 + new.trailing_zeros() as usize;
                if (a..b).contains(&i) {
                    self.inside += 1;
                }
                new &= new - 1;
            }
        }
    }

    /// Blocks of the set outside the range.
    fn outside(&self) -> usize {
        self.count - self.inside
    }
}

/// Eq. 7: (parity writes, reads) of every range.
fn write_tables(s: &Stripe) -> (RangeTable, RangeTable) {
    let supports: Vec<Bits> = s
        .support
        .iter()
        .map(|sup| {
            let mut b = Bits::new(s.nd);
            sup.iter().for_each(|&d| b.set(d));
            b
        })
        .collect();
    let mut writes = Vec::with_capacity(s.nd);
    let mut reads = Vec::with_capacity(s.nd);
    for a in 0..s.nd {
        let mut touched = Bits::new(s.np);
        let mut touched_count = 0;
        // The data blocks the touched parity depends on.
        let mut needed = Growing::new(s.nd);
        let (mut w_row, mut r_row) = (Vec::new(), Vec::new());
        for b in a + 1..=s.nd {
            needed.extend_range(b);
            for &q in &s.touched[b - 1] {
                if !touched.get(q) {
                    touched.set(q);
                    touched_count += 1;
                    needed.or(&supports[q], a, b);
                }
            }
            let rmw = (b - a) + touched_count;
            let rcw = needed.outside();
            w_row.push(touched_count);
            r_row.push(rmw.min(rcw));
        }
        writes.push(w_row);
        reads.push(r_row);
    }
    (writes, reads)
}

/// Eq. 8 for one failure set: extra reads of every range, given the blocks each lost data block
/// needs (`None` for a surviving one).
fn degraded_table(nd: usize, blocks: usize, needs: &[Option<Bits>]) -> RangeTable {
    (0..nd)
        .map(|a| {
            let mut union = Growing::new(blocks);
            (a + 1..=nd)
                .map(|b| {
                    union.extend_range(b);
                    if let Some(n) = &needs[b - 1] {
                        union.or(n, a, b);
                    }
                    union.outside()
                })
                .collect()
        })
        .collect()
}

/// Every failure set of one or two members.
fn failure_sets(n: usize, two: bool) -> Vec<Vec<usize>> {
    if two {
        (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| vec![a, b]))
            .collect()
    } else {
        (0..n).map(|a| vec![a]).collect()
    }
}

/// Eq. 8 averaged over the failure sets, given the per-set needs of every data block.
fn degraded_average(
    s: &Stripe,
    max: usize,
    two: bool,
    needs_of: &dyn Fn(&[usize]) -> Vec<Option<Bits>>,
) -> f64 {
    let sets = failure_sets(members_of(s), two);
    let sum: f64 = sets
        .iter()
        .map(|f| {
            let table = degraded_table(s.nd, s.nd + s.np, &needs_of(f));
            average_over_requests(s.nd, max, &table)
        })
        .sum();
    sum / sets.len() as f64
}

/// Members of a stripe (`k + 2`).
fn members_of(s: &Stripe) -> usize {
    s.member.iter().max().map_or(0, |m| m + 1)
}

/// raid6's one-stripe layout: a block is a chunk.
fn raid6_stripe(code: &Raid6) -> Stripe {
    let sys = &code.inner;
    let k = sys.k;
    Stripe {
        nd: k,
        np: 2,
        member: (0..k + 2).collect(),
        touched: (0..k)
            .map(|j| (0..2).filter(|&r| sys.parity[(r, j)] != 0).collect())
            .collect(),
        support: (0..2)
            .map(|r| (0..k).filter(|&j| sys.parity[(r, j)] != 0).collect())
            .collect(),
    }
}

/// MDS per block: any `k` surviving blocks of the stripe rebuild a lost one.
fn raid6_needs(k: usize, f: &[usize]) -> Vec<Option<Bits>> {
    let mut survivors = Bits::new(k + 2);
    (0..k + 2)
        .filter(|i| !f.contains(i))
        .for_each(|i| survivors.set(i));
    (0..k)
        .map(|j| f.contains(&j).then(|| survivors.clone()))
        .collect()
}

/// Eq. 8's range table for an MDS code: a range with a lost requested block reads `k`
/// surviving blocks, the requested ones first.
fn mds_table(k: usize, lost: &[Option<Bits>]) -> RangeTable {
    (0..k)
        .map(|a| {
            (a + 1..=k)
                .map(|b| {
                    let any_lost = (a..b).any(|j| lost[j].is_some());
                    let requested_alive = (a..b).filter(|j| lost[*j].is_none()).count();
                    if any_lost {
                        k - requested_alive
                    } else {
                        0
                    }
                })
                .collect()
        })
        .collect()
}

fn raid6_metrics(code: &Raid6, members: usize) -> CodeMetrics {
    let sys = &code.inner;
    let k = sys.k;
    let s = raid6_stripe(code);
    let (encode_xors, encode_mults) = matrix_cost(&sys.parity);
    let mut decode = Vec::new();
    for pair in failure_sets(k + 2, true) {
        let sources: Vec<usize> = (0..k + 2).filter(|i| !pair.contains(i)).take(k).collect();
        let inverse = sys
            .generator
            .select_rows(&sources)
            .inverse()
            .expect("RAID-6 P+Q is MDS");
        decode.push(matrix_cost(&sys.generator.select_rows(&pair).mul(&inverse)));
    }
    let max = members * (members - 2);
    let mds = |f: &[usize]| raid6_needs(k, f);
    let (w, r) = write_tables(&s);
    let mut m = CodeMetrics {
        code: "raid6",
        members,
        prime: None,
        block: "chunk",
        data_blocks_per_stripe: k,
        parity_blocks_per_stripe: 2,
        update_avg: 0.0,
        update_max: 0,
        encode_xors: encode_xors as f64,
        encode_mults: encode_mults as f64,
        decode_xors_avg: mean(decode.iter().map(|d| d.0 as f64)),
        decode_xors_max: decode.iter().map(|d| d.0).max().unwrap_or(0) as f64,
        decode_mults_avg: mean(decode.iter().map(|d| d.1 as f64)),
        write_parity_avg: average_over_requests(k, max, &w),
        write_reads_avg: average_over_requests(k, max, &r),
        multi_block_access: 0.0,
        degraded_read_1: mds_degraded(&s, max, false, &mds),
        degraded_read_2: mds_degraded(&s, max, true, &mds),
        request_blocks_max: max,
    };
    fill_update(&mut m, &s);
    m
}

/// Eq. 8 for an MDS code: a stripe with a lost requested block reads `k` surviving blocks, the
/// requested ones first.
fn mds_degraded(
    s: &Stripe,
    max: usize,
    two: bool,
    needs_of: &dyn Fn(&[usize]) -> Vec<Option<Bits>>,
) -> f64 {
    let k = s.nd;
    let sets = failure_sets(k + 2, two);
    let mut sum = 0.0;
    for f in &sets {
        let table = mds_table(k, &needs_of(f));
        sum += average_over_requests(k, max, &table);
    }
    sum / sets.len() as f64
}

fn fill_update(m: &mut CodeMetrics, s: &Stripe) {
    m.update_avg = mean(s.touched.iter().map(|t| t.len() as f64));
    m.update_max = s.touched.iter().map(Vec::len).max().unwrap_or(0);
    m.multi_block_access = m.write_parity_avg + m.write_reads_avg;
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// (XORs, multiplications) of `out = matrix * in`, per output chunk summed.
fn matrix_cost(m: &Matrix) -> (usize, usize) {
    let mut xors = 0;
    let mut mults = 0;
    for r in 0..m.rows() {
        let nz = (0..m.cols()).filter(|&c| m[(r, c)] != 0).count();
        xors += nz.saturating_sub(1);
        mults += (0..m.cols()).filter(|&c| m[(r, c)] > 1).count();
    }
    (xors, mults)
}

/// An array code's one-stripe layout, with the equations each cell is in (for the chains).
struct ArrayLayout<'a> {
    a: &'a XorArray,
    blocks: Blocks,
    stripe: Stripe,
    eqs_of: HashMap<Cell, Vec<usize>>,
}

impl<'a> ArrayLayout<'a> {
    fn new(a: &'a XorArray, blocks: Blocks) -> Self {
        let (k, rows) = (a.k, a.rows);
        let nd = match blocks {
            Blocks::Cells => rows * k,
            Blocks::Columns => k,
        };
        let np = match blocks {
            Blocks::Cells => 2 * rows,
            Blocks::Columns => 2,
        };
        let mut me = ArrayLayout {
            a,
            blocks,
            stripe: Stripe {
                nd,
                np,
                member: Vec::new(),
                touched: Vec::new(),
                support: Vec::new(),
            },
            eqs_of: HashMap::new(),
        };
        let member: Vec<usize> = (0..nd + np)
            .map(|b| match blocks {
                Blocks::Cells if b < nd => b % k,
                Blocks::Cells => k + (b - nd) / rows,
                Blocks::Columns => b,
            })
            .collect();
        let mut touched = Vec::with_capacity(nd);
        for b in 0..nd {
            let mut t: Vec<usize> = me
                .cells_of(b)
                .iter()
                .flat_map(|c| &a.touched[c.chunk as usize][c.row as usize])
                .map(|&q| me.block_of(q) - nd)
                .collect();
            t.sort_unstable();
            t.dedup();
            touched.push(t);
        }
        let mut support = vec![Vec::new(); np];
        for (e, exp) in a.expansion.iter().enumerate() {
            let q = me.block_of(a.equations[e].defines) - nd;
            support[q].extend(exp.iter().map(|&c| me.block_of(c)));
        }
        for s in &mut support {
            s.sort_unstable();
            s.dedup();
        }
        for (e, eq) in a.equations.iter().enumerate() {
            for c in &eq.cells {
                me.eqs_of.entry(*c).or_default().push(e);
            }
        }
        me.stripe.member = member;
        me.stripe.touched = touched;
        me.stripe.support = support;
        me
    }

    fn block_of(&self, c: Cell) -> usize {
        let (k, rows, nd) = (self.a.k, self.a.rows, self.stripe.nd);
        let (chunk, row) = (c.chunk as usize, c.row as usize);
        match (self.blocks, chunk < k) {
            (Blocks::Cells, true) => row * k + chunk,
            (Blocks::Cells, false) => nd + (chunk - k) * rows + row,
            (Blocks::Columns, true) => chunk,
            (Blocks::Columns, false) => nd + chunk - k,
        }
    }

    fn cells_of(&self, b: usize) -> Vec<Cell> {
        let (k, rows) = (self.a.k, self.a.rows);
        match self.blocks {
            Blocks::Cells => vec![Cell::new(b % k, b / k)],
            Blocks::Columns => (0..rows).map(|r| Cell::new(b, r)).collect(),
        }
    }

    /// With members `f` lost: for each data block, the blocks read to rebuild it (`None` when
    /// it survives). Each lost cell goes along the cheaper of its chains.
    fn needs(&self, f: &[usize]) -> Vec<Option<Bits>> {
        let (nd, np) = (self.stripe.nd, self.stripe.np);
        let lost = |c: &Cell| f.contains(&(c.chunk as usize));
        (0..nd)
            .map(|b| {
                let cells = self.cells_of(b);
                if !cells.iter().any(lost) {
                    return None;
                }
                let mut need = Bits::new(nd + np);
                for x in cells {
                    let best = self.eqs_of[&x]
                        .iter()
                        .filter_map(|&e| chain(self.a, &self.eqs_of, &lost, x, e))
                        .map(|reads| {
                            let mut bits = Bits::new(nd + np);
                            reads.iter().for_each(|&c| bits.set(self.block_of(c)));
                            bits
                        })
                        .min_by_key(Bits::count)
                        .expect("every lost cell of a two-failure pattern has a chain");
                    need.or(&best);
                }
                Some(need)
            })
            .collect()
    }
}

fn array_metrics(
    code: &'static str,
    a: &XorArray,
    p: usize,
    members: usize,
    blocks: Blocks,
) -> CodeMetrics {
    let (k, rows) = (a.k, a.rows);
    let layout = ArrayLayout::new(a, blocks);
    let s = &layout.stripe;
    let (nd, np) = (s.nd, s.np);
    let n = k + 2;
    let per_chunk = |cell_xors: usize| cell_xors as f64 / rows as f64;
    let decode: Vec<f64> = failure_sets(n, true)
        .iter()
        .map(|pair| {
            per_chunk(
                a.decode_schedule(pair)
                    .expect("RDP recovers every pair")
                    .cell_xors(),
            )
        })
        .collect();
    let needs_of = |f: &[usize]| layout.needs(f);
    let max = members * (members - 2);
    let (w, r) = write_tables(s);
    let mut m = CodeMetrics {
        code,
        members,
        prime: Some(p),
        block: match blocks {
            Blocks::Cells => "cell (chunk / (p - 1))",
            Blocks::Columns => "chunk (p - 1 cells)",
        },
        data_blocks_per_stripe: nd,
        parity_blocks_per_stripe: np,
        update_avg: 0.0,
        update_max: 0,
        encode_xors: per_chunk(a.encode.cell_xors()),
        encode_mults: 0.0,
        decode_xors_avg: mean(decode.iter().copied()),
        decode_xors_max: decode.iter().copied().fold(0.0, f64::max),
        decode_mults_avg: 0.0,
        write_parity_avg: average_over_requests(nd, max, &w),
        write_reads_avg: average_over_requests(nd, max, &r),
        multi_block_access: 0.0,
        degraded_read_1: degraded_average(s, max, false, &needs_of),
        degraded_read_2: degraded_average(s, max, true, &needs_of),
        request_blocks_max: max,
    };
    fill_update(&mut m, s);
    m
}

/// The surviving cells read to rebuild lost cell `x` starting with equation `e`: walk the
/// equation, and if it holds another lost cell, rebuild that one through its other equation
/// first, and so on. `None` when the walk dead-ends (a lost cell with no other equation) or
/// loops.
fn chain(
    a: &XorArray,
    eqs_of: &HashMap<Cell, Vec<usize>>,
    lost: &dyn Fn(&Cell) -> bool,
    x: Cell,
    e: usize,
) -> Option<Vec<Cell>> {
    let (mut cur, mut eq) = (x, e);
    let mut reads = Vec::new();
    for _ in 0..a.equations.len() {
        let mut other = None;
        for c in &a.equations[eq].cells {
            if *c == cur {
                continue;
            }
            if lost(c) {
                if other.replace(*c).is_some() {
                    return None;
                }
            } else {
                reads.push(*c);
            }
        }
        let Some(y) = other else {
            return Some(reads);
        };
        eq = *eqs_of[&y].iter().find(|&&f| f != eq)?;
        cur = y;
    }
    None
}
/// A code's per-request costs on one stripe of its layout, for replaying a workload (the
/// simulator's `--code`): what [`compare`] averages, kept per request range.
#[derive(Clone, Debug)]
pub struct CodeCost {
    /// `raid6`, `rdp` or `tier`.
    pub code: &'static str,
    /// Blocks per chunk: 1 (raid6, tier: a block is a chunk) or `p - 1` (rdp: a block is a cell).
    pub blocks_per_chunk: usize,
    /// Data blocks per stripe.
    pub data_blocks: usize,
    /// `[a][b - a - 1]`: parity blocks a write of data blocks `[a, b)` updates.
    pub parity_writes: Vec<Vec<usize>>,
    /// `[a][b - a - 1]`: blocks read to update them (the cheaper of RMW and RCW).
    pub write_reads: Vec<Vec<usize>>,
    /// Per failed member of the stripe (`0..k` data, then P, Q), `[a][b - a - 1]`: the extra
    /// blocks a read of data blocks `[a, b)` needs to rebuild the lost ones it asks for.
    pub degraded_reads: Vec<Vec<Vec<usize>>>,
}

impl CodeCost {
    /// (reads, writes) in blocks of a write of data blocks `[a, b)` of one stripe.
    pub fn write(&self, a: usize, b: usize) -> (usize, usize) {
        (
            self.write_reads[a][b - a - 1],
            (b - a) + self.parity_writes[a][b - a - 1],
        )
    }

    /// Blocks read by a read of data blocks `[a, b)` of one stripe whose member `failed` (its
    /// position in the stripe) is lost.
    pub fn read(&self, a: usize, b: usize, failed: Option<usize>) -> usize {
        let lost_requested = failed.map_or(0, |f| self.lost_blocks_in(f, a, b));
        (b - a) - lost_requested + failed.map_or(0, |f| self.degraded_reads[f][a][b - a - 1])
    }

    fn lost_blocks_in(&self, failed: usize, a: usize, b: usize) -> usize {
        let k = self.data_blocks / self.blocks_per_chunk;
        if failed >= k {
            return 0;
        }
        (a..b)
            .filter(|&x| self.member_of_data_block(x) == failed)
            .count()
    }

    /// The stripe position (data chunk) holding data block `x`.
    pub fn member_of_data_block(&self, x: usize) -> usize {
        let k = self.data_blocks / self.blocks_per_chunk;
        if self.blocks_per_chunk == 1 {
            x
        } else {
            x % k
        }
    }
}

/// The per-request cost models of raid6, rdp and tier for `members` members.
pub fn code_costs(members: usize) -> Result<Vec<CodeCost>, CodeError> {
    let (raid6, rdp, tier) = three_codes(members, "code costs need 4 <= members <= 255")?;
    let k = members - 2;
    let mut out = Vec::new();
    {
        let s = raid6_stripe(&raid6);
        let (w, r) = write_tables(&s);
        let degraded = (0..k + 2)
            .map(|f| mds_table(k, &raid6_needs(k, &[f])))
            .collect();
        out.push(CodeCost {
            code: "raid6",
            blocks_per_chunk: 1,
            data_blocks: k,
            parity_writes: w,
            write_reads: r,
            degraded_reads: degraded,
        });
    }
    for (name, a, blocks) in [
        ("rdp", &rdp.inner, Blocks::Cells),
        ("tier", &tier.inner, Blocks::Columns),
    ] {
        let layout = ArrayLayout::new(a, blocks);
        let (w, r) = write_tables(&layout.stripe);
        let degraded = (0..k + 2)
            .map(|f| {
                degraded_table(
                    layout.stripe.nd,
                    layout.stripe.nd + layout.stripe.np,
                    &layout.needs(&[f]),
                )
            })
            .collect();
        out.push(CodeCost {
            code: name,
            blocks_per_chunk: match blocks {
                Blocks::Cells => a.rows,
                Blocks::Columns => 1,
            },
            data_blocks: layout.stripe.nd,
            parity_writes: w,
            write_reads: r,
            degraded_reads: degraded,
        });
    }
    Ok(out)
}
