//! The machinery of XOR-only array codes ([`crate::Rdp`], [`crate::TierCode`]): a code given by
//! a list of parity equations over the cells of a `rows x n` array, compiled into schedules of
//! region XORs that run on the word-wide XOR kernel of `gf` (`Kernel::xor`). No GF(2^8)
//! multiplication happens anywhere here.
//!
//! # Cells and equations
//! A stripe is `n = k + 2` chunks (data `0..k`, then the row parity `P` = chunk `k` and the
//! second parity `Q` = chunk `k + 1`). Every chunk is cut into `rows` equal, contiguous rows; the
//! chunk length must be a multiple of `rows`. A *cell* is one row of one chunk. The code is a set
//! of *equations*: each lists cells whose XOR is zero, and names the one parity cell it defines.
//! Cells of virtual (shortened-away) columns are zero and simply left out of the equations.
//!
//! # Encode, update, reconstruct
//! - **encode**: every equation, in order, sets its parity cell to the XOR of its other cells (a
//!   `Q` equation may read `P` cells, which are computed first).
//! - **update**: each parity cell is *expanded* into the data cells it depends on (a `P` cell
//!   inside a `Q` equation is replaced by its own data cells, and a data cell met twice cancels).
//!   A changed data row then flips exactly the parity cells whose expansion holds it:
//!   `parity_cell ^= old ^ new`, without reading any other data.
//! - **reconstruct** (peeling): while some equation has exactly one unknown cell, solve that cell
//!   as the XOR of the others. For RDP and the corrected Tier-code this always finishes for any
//!   two lost chunks (RDP's chains). If it ever stops short, the leftover unknowns are solved by
//!   Gaussian elimination over GF(2) on the equations (each unknown becomes the XOR of the known
//!   cells of a combination of equations); if that system is singular the erasure pattern is not
//!   recoverable, and the code says so ([`CodeError::NotRecoverable`]) instead of guessing. That
//!   is how the negative control (Tier-code's Eq. 3 as printed) is shown to fail.
//!
//! Schedules are lists of steps `target = XOR of sources` over one or more consecutive rows;
//! consecutive single-row steps that shift together (all `P` rows, for instance) are merged into
//! one kernel call. The decode schedule of an erasure pattern is built once and cached.
//!
//! # Counting
//! The metrics (`metrics.rs`) count what these schedules do: a step over `r` rows with `s`
//! sources costs `r (s - 1)` cell XORs (a copy or a zero fill costs none).

use crate::error::CodeError;
use crate::{ChunkUpdate, Located};
use smallvec::SmallVec;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use stripeguard_gf::Kernel;

/// One row of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Cell {
    /// Chunk index in the stripe, `0..k + 2`.
    pub chunk: u16,
    /// Row within the chunk.
    pub row: u16,
}

/// A chunk or row index as a [`Cell`] coordinate. Every code checks its geometry first
/// (`rdp::check_geometry`: `k + 2 <= 255` chunks, `p - 1 <= u16::MAX` rows), so this cannot
/// fail for a constructed code.
pub(crate) fn cell_index(i: usize) -> u16 {
    u16::try_from(i).expect("cell coordinates fit u16 (check_geometry bounds chunks and rows)")
}

impl Cell {
    pub(crate) fn new(chunk: usize, row: usize) -> Cell {
        Cell {
            chunk: cell_index(chunk),
            row: cell_index(row),
        }
    }
    fn shifted(self, by: u16) -> Cell {
        Cell {
            chunk: self.chunk,
            row: self.row + by,
        }
    }
}

/// One parity equation: the XOR of `cells` is zero; `defines` (one of them) is the parity cell
/// encode computes from it.
#[derive(Clone, Debug)]
pub(crate) struct Equation {
    pub cells: Vec<Cell>,
    pub defines: Cell,
}

/// `target = XOR of sources`, over `rows` consecutive rows starting at each cell's row.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub target: Cell,
    pub rows: u16,
    pub sources: Vec<Cell>,
}

/// Steps run in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    pub steps: Vec<Step>,
}

impl Schedule {
    /// Append a single-row step, merging it into the previous one when it continues it row by
    /// row and reads nothing of its own target chunk (so one kernel call over several rows never
    /// reads what it writes).
    fn push(&mut self, target: Cell, sources: Vec<Cell>) {
        if let Some(last) = self.steps.last_mut() {
            let continues = last.target.shifted(last.rows) == target
                && last.sources.len() == sources.len()
                && last
                    .sources
                    .iter()
                    .zip(&sources)
                    .all(|(a, b)| a.shifted(last.rows) == *b && b.chunk != target.chunk);
            if continues {
                last.rows += 1;
                return;
            }
        }
        self.steps.push(Step {
            target,
            rows: 1,
            sources,
        });
    }

    /// Cell XORs this schedule performs: `rows (sources - 1)` per step.
    pub(crate) fn cell_xors(&self) -> usize {
        self.steps
            .iter()
            .map(|s| s.rows as usize * s.sources.len().saturating_sub(1))
            .sum()
    }
}

/// A run of an update: parity chunk `parity` (0 = P, 1 = Q) rows `parity_row..+rows` flip with
/// the changed data chunk's rows `data_row..+rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct UpdateRun {
    parity: u16,
    parity_row: u16,
    data_row: u16,
    rows: u16,
}

/// An XOR array code compiled from its equations.
pub(crate) struct XorArray {
    pub k: usize,
    pub rows: usize,
    pub kernel: Kernel,
    pub equations: Vec<Equation>,
    pub encode: Schedule,
    /// `touched[j][r]`: the parity cells whose expansion holds data cell `(j, r)`.
    pub touched: Vec<Vec<Vec<Cell>>>,
    /// `expansion[e]`: the data cells parity cell `equations[e].defines` depends on.
    pub expansion: Vec<BTreeSet<Cell>>,
    updates: Vec<Vec<UpdateRun>>,
    decode: Mutex<HashMap<(u16, u16), Arc<Schedule>>>,
}

/// Marker for "no second erasure" in a decode cache key.
const NONE: u16 = u16::MAX;

/// Why locking the decode cache cannot fail: it is held only for a map lookup or insert of
/// plain keys and `Arc`s, which do not panic, so it is never poisoned.
const DECODE_LOCK: &str = "decode cache lock poisoned (held only for a non-panicking get/insert)";

impl XorArray {
    /// Compile `equations` (every parity cell defined exactly once; defined in an order where a
    /// cell is computed before it is read).
    pub(crate) fn new(k: usize, rows: usize, equations: Vec<Equation>, kernel: Kernel) -> Self {
        let is_parity = |c: &Cell| c.chunk as usize >= k;
        let mut defined: BTreeSet<Cell> = BTreeSet::new();
        let mut encode = Schedule::default();
        let mut expansion: Vec<BTreeSet<Cell>> = Vec::with_capacity(equations.len());
        let mut expansion_of: HashMap<Cell, usize> = HashMap::new();
        for (e, eq) in equations.iter().enumerate() {
            assert!(is_parity(&eq.defines) && eq.cells.contains(&eq.defines));
            let sources: Vec<Cell> = eq
                .cells
                .iter()
                .copied()
                .filter(|c| *c != eq.defines)
                .collect();
            let mut exp = BTreeSet::new();
            for s in &sources {
                if is_parity(s) {
                    let from = *expansion_of
                        .get(s)
                        .expect("a parity cell is defined before it is read");
                    for d in &expansion[from] {
                        if !exp.remove(d) {
                            exp.insert(*d);
                        }
                    }
                } else if !exp.remove(s) {
                    exp.insert(*s);
                }
            }
            assert!(defined.insert(eq.defines), "parity cell defined twice");
            expansion_of.insert(eq.defines, e);
            expansion.push(exp);
            encode.push(eq.defines, sources);
        }
        assert_eq!(defined.len(), 2 * rows, "every parity cell is defined");
        let mut touched = vec![vec![Vec::new(); rows]; k];
        for (e, exp) in expansion.iter().enumerate() {
            for d in exp {
                touched[d.chunk as usize][d.row as usize].push(equations[e].defines);
            }
        }
        let k16 = cell_index(k);
        let updates = (0..k)
            .map(|j| {
                let mut pairs: Vec<(Cell, u16)> = (0..rows)
                    .flat_map(|r| touched[j][r].iter().map(move |&p| (p, cell_index(r))))
                    .collect();
                pairs.sort();
                let mut runs: Vec<UpdateRun> = Vec::new();
                for (p, r) in pairs {
                    let parity = p.chunk - k16;
                    if let Some(l) = runs.last_mut() {
                        if l.parity == parity
                            && l.parity_row + l.rows == p.row
                            && l.data_row + l.rows == r
                        {
                            l.rows += 1;
                            continue;
                        }
                    }
                    runs.push(UpdateRun {
                        parity,
                        parity_row: p.row,
                        data_row: r,
                        rows: 1,
                    });
                }
                runs
            })
            .collect();
        XorArray {
            k,
            rows,
            kernel,
            equations,
            encode,
            touched,
            expansion,
            updates,
            decode: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn n(&self) -> usize {
        self.k + 2
    }

    /// Bytes per row of chunks `len` bytes long.
    fn row_len(&self, len: usize) -> Result<usize, CodeError> {
        if !len.is_multiple_of(self.rows) {
            return Err(CodeError::ChunkRows {
                len,
                rows: self.rows,
            });
        }
        Ok(len / self.rows)
    }

    fn common_len<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<usize, CodeError> {
        let mut len = None;
        for (index, c) in chunks.into_iter().enumerate() {
            match len {
                None => len = Some(c.len()),
                Some(expected) if expected != c.len() => {
                    return Err(CodeError::ChunkLength {
                        index,
                        expected,
                        got: c.len(),
                    })
                }
                _ => {}
            }
        }
        Ok(len.unwrap_or(0))
    }

    fn check_count(what: &'static str, expected: usize, got: usize) -> Result<(), CodeError> {
        if expected == got {
            Ok(())
        } else {
            Err(CodeError::ChunkCount {
                what,
                expected,
                got,
            })
        }
    }

    /// Run `s`: chunk `c < base` is `fixed[c]` (read only), chunk `c >= base` is
    /// `out[c - base]`. Every target lies in `out`.
    fn run(
        &self,
        s: &Schedule,
        row_len: usize,
        fixed: &[&[u8]],
        base: usize,
        out: &mut [&mut [u8]],
    ) {
        for step in &s.steps {
            let t = step.target.chunk as usize - base;
            let span = step.rows as usize * row_len;
            let ts = step.target.row as usize * row_len;
            let te = ts + span;
            let chunk: &mut [u8] = std::mem::take(&mut out[t]);
            {
                let (before, rest) = chunk.split_at_mut(ts);
                let (target, after) = rest.split_at_mut(span);
                let view: &[&mut [u8]] = out;
                let mut sources: SmallVec<[&[u8]; 16]> = SmallVec::new();
                for c in &step.sources {
                    let (s0, ci) = (c.row as usize * row_len, c.chunk as usize);
                    let s1 = s0 + span;
                    let src: &[u8] = if ci < base {
                        &fixed[ci][s0..s1]
                    } else if ci - base == t {
                        if s1 <= ts {
                            &before[s0..s1]
                        } else {
                            assert!(s0 >= te, "a step reads the rows it writes");
                            &after[s0 - te..s1 - te]
                        }
                    } else {
                        &view[ci - base][s0..s1]
                    };
                    sources.push(src);
                }
                self.kernel.xor(&sources, target, false);
            }
            out[t] = chunk;
        }
    }

    pub(crate) fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        Self::check_count("data", self.k, data.len())?;
        Self::check_count("parity", 2, parity.len())?;
        let len = Self::common_len(data.iter().copied().chain(parity.iter().map(|p| &**p)))?;
        let row_len = self.row_len(len)?;
        self.run(&self.encode, row_len, data, self.k, parity);
        Ok(())
    }

    fn check_update_args<'a>(
        &self,
        indices: impl Iterator<Item = usize>,
        regions: impl Iterator<Item = &'a [u8]>,
    ) -> Result<usize, CodeError> {
        let mut seen = vec![false; self.k];
        for index in indices {
            if index >= self.k || seen[index] {
                return Err(CodeError::BadIndex { index, n: self.k });
            }
            seen[index] = true;
        }
        self.row_len(Self::common_len(regions)?)
    }

    pub(crate) fn update(
        &self,
        changes: &[ChunkUpdate<'_>],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        Self::check_count("parity", 2, parity.len())?;
        let row_len = self.check_update_args(
            changes.iter().map(|c| c.index),
            changes
                .iter()
                .flat_map(|c| [c.old, c.new])
                .chain(parity.iter().map(|p| &**p)),
        )?;
        for c in changes {
            for u in &self.updates[c.index] {
                let (d0, p0) = (
                    u.data_row as usize * row_len,
                    u.parity_row as usize * row_len,
                );
                let span = u.rows as usize * row_len;
                self.kernel.xor(
                    &[&c.old[d0..d0 + span], &c.new[d0..d0 + span]],
                    &mut parity[u.parity as usize][p0..p0 + span],
                    true,
                );
            }
        }
        Ok(())
    }

    pub(crate) fn accumulate(
        &self,
        index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        Self::check_count("parity", 2, parity.len())?;
        let row_len = self.check_update_args(
            std::iter::once(index),
            std::iter::once(data).chain(parity.iter().map(|p| &**p)),
        )?;
        for u in &self.updates[index] {
            let (d0, p0) = (
                u.data_row as usize * row_len,
                u.parity_row as usize * row_len,
            );
            let span = u.rows as usize * row_len;
            self.kernel.xor(
                &[&data[d0..d0 + span]],
                &mut parity[u.parity as usize][p0..p0 + span],
                true,
            );
        }
        Ok(())
    }

    /// Sorted, de-duplicated, range-checked erasures (at most two).
    fn normalize(&self, erased: &[usize]) -> Result<SmallVec<[usize; 2]>, CodeError> {
        let n = self.n();
        let mut e: SmallVec<[usize; 2]> = erased.iter().copied().collect();
        e.sort_unstable();
        for w in e.windows(2) {
            if w[0] == w[1] {
                return Err(CodeError::BadIndex { index: w[0], n });
            }
        }
        if let Some(&bad) = e.iter().find(|&&i| i >= n) {
            return Err(CodeError::BadIndex { index: bad, n });
        }
        if e.len() > 2 {
            return Err(CodeError::TooManyErasures {
                erased: e.len(),
                max: 2,
            });
        }
        Ok(e)
    }

    /// The decode schedule of a normalized, non-empty erasure list, built once.
    pub(crate) fn decode_schedule(&self, missing: &[usize]) -> Result<Arc<Schedule>, CodeError> {
        // Normalized erasures are chunk indices, below `n = k + 2 <= 255`.
        let key = (
            cell_index(missing[0]),
            missing.get(1).map_or(NONE, |&b| cell_index(b)),
        );
        if let Some(s) = self.decode.lock().expect(DECODE_LOCK).get(&key) {
            return Ok(s.clone());
        }
        let s = Arc::new(build_decode(&self.equations, self.n(), self.rows, missing)?);
        self.decode
            .lock()
            .expect(DECODE_LOCK)
            .insert(key, s.clone());
        Ok(s)
    }

    pub(crate) fn reconstruct(
        &self,
        chunks: &mut [&mut [u8]],
        erased: &[usize],
    ) -> Result<(), CodeError> {
        Self::check_count("total", self.n(), chunks.len())?;
        let len = Self::common_len(chunks.iter().map(|c| &**c))?;
        let row_len = self.row_len(len)?;
        let missing = self.normalize(erased)?;
        if missing.is_empty() {
            return Ok(());
        }
        let s = self.decode_schedule(&missing)?;
        self.run(&s, row_len, &[], 0, chunks);
        Ok(())
    }

    /// Whether every equation holds.
    fn is_codeword(&self, chunks: &[&[u8]], row_len: usize) -> bool {
        let mut scratch = vec![0u8; row_len];
        self.equations.iter().all(|eq| {
            let cells: SmallVec<[&[u8]; 16]> = eq
                .cells
                .iter()
                .map(|c| {
                    let s0 = c.row as usize * row_len;
                    &chunks[c.chunk as usize][s0..s0 + row_len]
                })
                .collect();
            self.kernel.xor(&cells, &mut scratch, false);
            scratch.iter().all(|&b| b == 0)
        })
    }

    /// A copy of the stripe with `missing` rebuilt from the others; `None` if it is not
    /// recoverable.
    fn rebuilt(&self, chunks: &[&[u8]], missing: &[usize]) -> Option<Vec<Vec<u8>>> {
        let mut copy: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let mut views: Vec<&mut [u8]> = copy.iter_mut().map(|c| &mut c[..]).collect();
        self.reconstruct(&mut views, missing).ok()?;
        Some(copy)
    }

    /// One bad chunk is located by trying each: rebuild it from the others, and keep it if the
    /// result is a codeword. Two codewords of an MDS code with two parity chunks differ in at
    /// least three chunks, so at most one candidate can pass when the stripe itself is not a
    /// codeword. With one erasure (2t + f <= 2 forces t = 0) the stripe is only checked.
    pub(crate) fn locate(&self, chunks: &[&[u8]], erased: &[usize]) -> Result<Located, CodeError> {
        Self::check_count("total", self.n(), chunks.len())?;
        let len = Self::common_len(chunks.iter().copied())?;
        let row_len = self.row_len(len)?;
        let missing = self.normalize(erased)?;
        if missing.len() == 2 {
            return Ok(Located::Unchecked);
        }
        if let Some(&lost) = missing.first() {
            let full = self
                .rebuilt(chunks, &[lost])
                .expect("one erasure is always recoverable");
            return if self.is_codeword(&views(&full), row_len) {
                Ok(Located::Consistent)
            } else {
                Err(CodeError::CannotLocate {
                    reason: "syndromes are non-zero but 2t + f <= 2 allows no error location with one erasure".into(),
                })
            };
        }
        if self.is_codeword(chunks, row_len) {
            return Ok(Located::Consistent);
        }
        let passing: Vec<usize> = (0..self.n())
            .filter(|&c| {
                self.rebuilt(chunks, &[c])
                    .is_some_and(|full| self.is_codeword(&views(&full), row_len))
            })
            .collect();
        match passing[..] {
            [c] => Ok(Located::Bad(vec![c])),
            _ => Err(CodeError::CannotLocate {
                reason: format!(
                    "no single chunk explains the syndromes ({} candidates)",
                    passing.len()
                ),
            }),
        }
    }
}

fn views(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|c| &c[..]).collect()
}

/// Peel, then eliminate what is left (see the top of this file).
fn build_decode(
    equations: &[Equation],
    n: usize,
    rows: usize,
    missing: &[usize],
) -> Result<Schedule, CodeError> {
    let idx = |c: &Cell| c.chunk as usize * rows + c.row as usize;
    let mut known = vec![true; n * rows];
    for &m in missing {
        for r in 0..rows {
            known[m * rows + r] = false;
        }
    }
    let mut left = missing.len() * rows;
    let mut schedule = Schedule::default();
    while left > 0 {
        let mut progress = false;
        for eq in equations {
            let mut unknown = eq.cells.iter().filter(|c| !known[idx(c)]);
            let (Some(&t), None) = (unknown.next(), unknown.next()) else {
                continue;
            };
            let sources: Vec<Cell> = eq.cells.iter().copied().filter(|c| *c != t).collect();
            schedule.push(t, sources);
            known[idx(&t)] = true;
            left -= 1;
            progress = true;
        }
        if !progress {
            break;
        }
    }
    if left == 0 {
        return Ok(schedule);
    }
    // Gaussian elimination over GF(2) for what peeling left.
    let unknowns: Vec<Cell> = missing
        .iter()
        .flat_map(|&m| (0..rows).map(move |r| Cell::new(m, r)))
        .filter(|c| !known[idx(c)])
        .collect();
    let col_of: HashMap<Cell, usize> = unknowns.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    // Each row: (unknown bits, equations combined).
    let mut system: Vec<(Vec<bool>, Vec<bool>)> = equations
        .iter()
        .enumerate()
        .filter_map(|(e, eq)| {
            let mut bits = vec![false; unknowns.len()];
            for c in &eq.cells {
                if let Some(&u) = col_of.get(c) {
                    bits[u] = true;
                }
            }
            bits.iter().any(|&b| b).then(|| {
                let mut combo = vec![false; equations.len()];
                combo[e] = true;
                (bits, combo)
            })
        })
        .collect();
    let mut pivot_rows = Vec::with_capacity(unknowns.len());
    for u in 0..unknowns.len() {
        let Some(p) = (pivot_rows.len()..system.len()).find(|&r| system[r].0[u]) else {
            return Err(CodeError::NotRecoverable {
                erased: missing.to_vec(),
            });
        };
        let at = pivot_rows.len();
        system.swap(at, p);
        let pivot = system[at].clone();
        for (r, row) in system.iter_mut().enumerate() {
            if r != at && row.0[u] {
                for (a, b) in row.0.iter_mut().zip(&pivot.0) {
                    *a ^= b;
                }
                for (a, b) in row.1.iter_mut().zip(&pivot.1) {
                    *a ^= b;
                }
            }
        }
        pivot_rows.push(at);
    }
    for (u, &r) in pivot_rows.iter().enumerate() {
        let mut odd: BTreeSet<Cell> = BTreeSet::new();
        for (e, _) in system[r].1.iter().enumerate().filter(|(_, &on)| on) {
            for c in &equations[e].cells {
                if !col_of.contains_key(c) && !odd.remove(c) {
                    odd.insert(*c);
                }
            }
        }
        schedule.steps.push(Step {
            target: unknowns[u],
            rows: 1,
            sources: odd.into_iter().collect(),
        });
    }
    Ok(schedule)
}

/// Whether `n` is prime.
pub(crate) fn is_prime(n: usize) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// The smallest prime `p >= 3` with `p - 1 >= k` data columns.
pub(crate) fn prime_for(k: usize) -> usize {
    (k.max(2) + 1..)
        .find(|&p| is_prime(p))
        .expect("primes are unbounded")
}
