//! The machinery every systematic linear code shares.
//!
//! A stripe is `n = k + m` chunks: data `d_0..d_{k-1}` then parity `p_0..p_{m-1}` with
//! `p = P d` for an `m x k` parity matrix `P`. The generator is `G = [I; P]` (`n x k`): chunk `i`
//! of the stripe is row `i` of `G` times the data.
//!
//! - **encode**: one dot product of `P` with the data.
//! - **update** (read-modify-write): `p_r ^= P[r][j] (old_j ^ new_j)` for each changed `j`, so the
//!   other data chunks are never read; **accumulate**: `p_r ^= P[r][j] x` for a given `x`.
//! - **reconstruct**: with chunks `E` missing, take the first `k` surviving chunks `S`, so
//!   `c_S = G_S d` and `d = G_S^{-1} c_S`; every missing chunk is `c_E = G_E G_S^{-1} c_S`. The
//!   matrix `G_E G_S^{-1}` depends only on `E` and is kept in a bounded LRU cache.

use crate::error::CodeError;
use crate::ChunkUpdate;
use lru::LruCache;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use stripeguard_gf::dyadic::{dyadic_function, DyadicProgram};
use stripeguard_gf::{Kernel, Matrix, Mode, MulTables};

/// The `ErasureCode` methods every code backed by a `Systematic` named `inner` shares.
macro_rules! systematic_accessors {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn data_chunks(&self) -> usize {
            self.inner.k
        }
        fn parity_chunks(&self) -> usize {
            self.inner.m
        }
        fn kernel(&self) -> stripeguard_gf::KernelKind {
            self.inner.kernel.kind()
        }
        fn update(
            &self,
            changes: &[crate::ChunkUpdate<'_>],
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
    };
    ($name:literal, with_encode_reconstruct) => {
        $crate::systematic::systematic_accessors!($name);
        fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
            self.inner.encode(data, parity)
        }
        fn reconstruct(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<(), CodeError> {
            self.inner.reconstruct(chunks, erased)
        }
    };
}
pub(crate) use systematic_accessors;

/// Decode matrices kept per code (one per distinct erasure pattern).
pub const DECODE_CACHE_ENTRIES: usize = 256;

pub(crate) struct Systematic {
    pub k: usize,
    pub m: usize,
    pub parity: Matrix,
    pub generator: Matrix,
    pub encode_tables: MulTables,
    /// Column `j` of `P` (an `m x 1` matrix) for single-chunk updates.
    pub column_tables: Vec<MulTables>,
    pub kernel: Kernel,
    /// `P` as dyadic programs (set and accumulate), for codes whose parity matrix is a block of a
    /// dyadic matrix and where that takes at most half the multiplications (wide Cauchy codes).
    fast_parity: Option<Box<(DyadicProgram, DyadicProgram)>>,
    /// The declared dyadic form of `P` (`h`, row positions, column positions), for rebuilding
    /// lost data chunks by [`DyadicProgram::solve`].
    dyadic: Option<Box<DyadicForm>>,
    cache: Mutex<LruCache<ErasureKey, Arc<DecodePlan>, KeyHasher>>,
    /// Tells this code's plans apart in [`LAST_PLAN`] (unique per code built).
    id: u64,
}

/// Why locking the plan cache cannot fail: it is held only for an LRU lookup or insert of plain
/// keys and `Arc`s, which do not panic, so it is never poisoned.
const PLAN_LOCK: &str = "decode plan cache lock poisoned (held only for a non-panicking get/put)";

/// Source of [`Systematic::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The plan this thread used last, with its code's id and erasure set: a degraded array
    /// rebuilds the same pattern over and over, and taking the cache's lock and cloning its
    /// `Arc` cost ~40 ns a call, a sixth of a 4 KiB 4+1 rebuild.
    static LAST_PLAN: RefCell<Option<(u64, ErasureKey, Arc<DecodePlan>)>> =
        const { RefCell::new(None) };
}

/// `P[r][j] = h[rows[r] ^ cols[j]]`: `(h, rows, cols)`.
type DyadicForm = (Vec<u8>, Vec<usize>, Vec<usize>);

/// A dyadic program replaces the dense product when its estimated cost (vector instructions
/// per column vector, [`DyadicProgram::cost`]) is at most 73% of the dense product's (a product
/// and half a three-way sum per coefficient: 1.5 k m) and it spans two or more 8-column blocks.
/// Measured with the `layouts` example of the gf crate (same buffers, 4 KiB / 64 KiB chunks,
/// against the dense kernel that pairs inputs): cross layouts 64+10 (0.59 of dense) 1.54x at
/// 4 KiB, 32+8 (0.55) 1.28x, 100+20 (0.69) 1.13x (after whole quarters kept their middle
/// Karatsuba level unfolded; before: 64+10 1.05-1.15x / 1.08x, 32+8 and 24+8 1.04-1.13x /
/// 1.04-1.06x, 16+16 1.08-1.10x, 48+16 1.02-1.11x);
/// recursive 64+64 (two levels at a time, 0.29) 2.65-2.96x / 2.7x, 32+32 (0.39) 1.8-1.9x /
/// 1.4-1.8x (through scratch passes before: 1.5x / 1.9x and 1.1x / 1.05x). 8+8 (one block,
/// 0.61) gained at 4 KiB and lost at 64 KiB; 16+4 and 32+4 (0.88) lost at 64 KiB (before the
/// dense kernel paired its inputs, so by more now).
fn worth_it(p: &DyadicProgram) -> bool {
    p.inputs() >= 16 && 200 * p.cost() <= 73 * 3 * p.inputs() * p.outputs()
}

/// An erasure pattern as a bit set over the `n <= 255` chunks: a cache key that needs no heap.
type ErasureKey = [u64; 4];

/// Hashes an [`ErasureKey`] with one multiply per word: the keys are few and chosen by the
/// caller's own failures, not by an adversary, and SipHash cost more than a small rebuild's lookup.
#[derive(Clone, Copy, Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `[u64; 4]` hashes its words as one byte slice: take them back 8 bytes at a time.
        let mut words = bytes.chunks_exact(8);
        for w in words.by_ref() {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

impl std::hash::BuildHasher for KeyHasher {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// Chunk indices (each below 256; an index of 256 or more is left out) as a bit set.
fn bit_set(chunks: &[usize]) -> ErasureKey {
    let mut key: ErasureKey = [0; 4];
    for &i in chunks.iter().filter(|&&i| i < 256) {
        key[i / 64] |= 1 << (i % 64);
    }
    key
}

/// Chunk lists of one call, on the stack for every shape up to 16 chunks (a heap allocation per
/// call cost a third of a 4 KiB reconstruct; a larger inline buffer costs its copy on return).
pub(crate) type Chunks<T> = SmallVec<[T; 16]>;

/// How to rebuild one erasure pattern.
pub(crate) struct DecodePlan {
    /// The `k` chunks read, ascending.
    pub sources: Vec<usize>,
    /// The rebuild as a dyadic program over the same sources, when that is cheaper: the matrix
    /// itself when it is dyadic (all data of a wide Cauchy code rebuilt from parity: the inverse
    /// of a dyadic matrix is dyadic), or, when only data chunks are lost, the solve through the
    /// parity (`Systematic::solve_data`).
    pub fast: Option<DyadicProgram>,
    /// The missing chunks, as a bit set.
    pub missing: ErasureKey,
    /// `sources` as a bit set.
    pub source_set: ErasureKey,
    /// `G_E G_S^{-1}`: one row per missing chunk, one column per source.
    pub tables: MulTables,
}

impl Systematic {
    pub fn new(parity: Matrix, kernel: Kernel) -> Self {
        let (m, k) = (parity.rows(), parity.cols());
        let mut g = Vec::with_capacity((k + m) * k);
        g.extend_from_slice(Matrix::identity(k).as_bytes());
        g.extend_from_slice(parity.as_bytes());
        let generator = Matrix::from_rows(k + m, k, g);
        let column_tables = (0..k)
            .map(|j| {
                MulTables::new(&Matrix::from_rows(
                    m,
                    1,
                    (0..m).map(|r| parity[(r, j)]).collect(),
                ))
            })
            .collect();
        Systematic {
            k,
            m,
            encode_tables: MulTables::new(&parity),
            parity,
            generator,
            column_tables,
            kernel,
            fast_parity: None,
            dyadic: None,
            cache: Mutex::new(LruCache::with_hasher(
                const { NonZeroUsize::new(DECODE_CACHE_ENTRIES).expect("non-zero constant") },
                KeyHasher::default(),
            )),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Declare `P[r][j] = h[rows[r] ^ cols[j]]` (checked) so encode, syndromes and the decode
    /// plans whose matrix is dyadic run as dyadic programs when that halves the products.
    pub fn with_dyadic_parity(mut self, h: &[u8], rows: &[usize], cols: &[usize]) -> Self {
        assert!(
            (0..self.m).all(|r| (0..self.k).all(|j| self.parity[(r, j)] == h[rows[r] ^ cols[j]]))
        );
        self.dyadic = Some(Box::new((h.to_vec(), rows.to_vec(), cols.to_vec())));
        // Plans made from here on may take the dyadic paths: a new identity for them.
        self.id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let set = DyadicProgram::new(h, rows, cols, false);
        if self.kernel.runs_dyadic() && worth_it(&set) {
            let add = DyadicProgram::new(h, rows, cols, true);
            self.fast_parity = Some(Box::new((set, add)));
        }
        self
    }

    /// `parity (op)= P data`, dyadic when declared and worth it.
    fn parity_product(&self, data: &[&[u8]], parity: &mut [&mut [u8]], mode: Mode) {
        if let Some(fast) = &self.fast_parity {
            let p = if mode == Mode::Set { &fast.0 } else { &fast.1 };
            if self.kernel.dyadic(p, data, parity) {
                return;
            }
        }
        self.kernel
            .dot(&self.encode_tables, data, &[], parity, mode);
    }

    pub fn n(&self) -> usize {
        self.k + self.m
    }

    /// All slices the same length; returns it.
    pub fn common_len<'a>(
        &self,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<usize, CodeError> {
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

    pub fn check_count(what: &'static str, expected: usize, got: usize) -> Result<(), CodeError> {
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

    pub fn check_encode_args(&self, data: &[&[u8]], parity: &[&mut [u8]]) -> Result<(), CodeError> {
        Self::check_count("data", self.k, data.len())?;
        Self::check_count("parity", self.m, parity.len())?;
        self.common_len(data.iter().copied().chain(parity.iter().map(|p| &**p)))?;
        Ok(())
    }

    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        self.check_encode_args(data, parity)?;
        self.parity_product(data, parity, Mode::Set);
        Ok(())
    }

    pub fn update(
        &self,
        changes: &[ChunkUpdate<'_>],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        Self::check_count("parity", self.m, parity.len())?;
        // k < 256: a bit set on the stack (a heap allocation here cost a quarter of a 4 KiB update).
        let mut seen = [0u64; 4];
        for c in changes {
            let (word, bit) = (c.index / 64, 1u64 << (c.index % 64));
            if c.index >= self.k || seen[word] & bit != 0 {
                return Err(CodeError::BadIndex {
                    index: c.index,
                    n: self.k,
                });
            }
            seen[word] |= bit;
        }
        let all = changes
            .iter()
            .flat_map(|c| [c.old, c.new])
            .chain(parity.iter().map(|p| &**p));
        self.common_len(all)?;
        for c in changes {
            self.kernel.dot(
                &self.column_tables[c.index],
                &[c.new],
                &[c.old],
                parity,
                Mode::DeltaAdd,
            );
        }
        Ok(())
    }

    pub fn accumulate(
        &self,
        index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        Self::check_count("parity", self.m, parity.len())?;
        if index >= self.k {
            return Err(CodeError::BadIndex { index, n: self.k });
        }
        self.common_len(std::iter::once(data).chain(parity.iter().map(|p| &**p)))?;
        self.kernel
            .dot(&self.column_tables[index], &[data], &[], parity, Mode::Add);
        Ok(())
    }

    /// Sorted, de-duplicated, range-checked erasure list.
    pub fn normalize(&self, erased: &[usize]) -> Result<Chunks<usize>, CodeError> {
        let n = self.n();
        let mut e: Chunks<usize> = erased.iter().copied().collect();
        e.sort_unstable();
        for w in e.windows(2) {
            if w[0] == w[1] {
                return Err(CodeError::BadIndex { index: w[0], n });
            }
        }
        if let Some(&bad) = e.iter().find(|&&i| i >= n) {
            return Err(CodeError::BadIndex { index: bad, n });
        }
        if e.len() > self.m {
            return Err(CodeError::TooManyErasures {
                erased: e.len(),
                max: self.m,
            });
        }
        Ok(e)
    }

    /// `erased` as a bit set and its size, for the reconstruct fast path; any problem with the
    /// list is reported exactly as [`Systematic::normalize`] reports it.
    fn erasure_key(&self, erased: &[usize]) -> Result<(ErasureKey, usize), CodeError> {
        let n = self.n();
        let key = bit_set(erased);
        let distinct: u32 = key.iter().map(|w| w.count_ones()).sum();
        if erased.len() > self.m
            || distinct as usize != erased.len()
            || erased.iter().any(|&i| i >= n)
        {
            return Err(self
                .normalize(erased)
                .expect_err("normalize rejects what the fast path rejects"));
        }
        Ok((key, erased.len()))
    }

    /// The decode plan for a normalized, non-empty erasure list.
    pub fn plan(&self, missing: &[usize]) -> Arc<DecodePlan> {
        self.plan_for(bit_set(missing))
    }

    /// The decode plan for a non-empty erasure set.
    fn plan_for(&self, key: ErasureKey) -> Arc<DecodePlan> {
        if let Some(p) = self.cache.lock().expect(PLAN_LOCK).get(&key) {
            return p.clone();
        }
        let missing: Vec<usize> = (0..self.n())
            .filter(|&i| key[i / 64] & 1 << (i % 64) != 0)
            .collect();
        let missing = &missing[..];
        let sources: Vec<usize> = (0..self.n())
            .filter(|i| !missing.contains(i))
            .take(self.k)
            .collect();
        let inverse = self
            .generator
            .select_rows(&sources)
            .inverse()
            .expect("every k x k submatrix of an MDS generator is invertible");
        let rebuild = self.generator.select_rows(missing).mul(&inverse);
        let source_set = bit_set(&sources);
        let fast = dyadic_function(&rebuild)
            .and_then(|h| {
                let rows: Vec<usize> = (0..rebuild.rows()).collect();
                let cols: Vec<usize> = (0..rebuild.cols()).collect();
                let p = DyadicProgram::new(&h, &rows, &cols, false);
                (self.kernel.runs_dyadic() && worth_it(&p)).then_some(p)
            })
            .or_else(|| self.solve_data(missing, &sources));
        let plan = Arc::new(DecodePlan {
            fast,
            missing: key,
            source_set,
            sources,
            tables: MulTables::new(&rebuild),
        });
        self.cache.lock().expect(PLAN_LOCK).put(key, plan.clone());
        plan
    }

    /// Lost data chunks only, rebuilt from the surviving data and as many parity chunks as were
    /// lost (the `sources` a plan reads): `d_L = C_{S,L}^-1 (p_S + C_{S,K} d_K)`, the product
    /// with the surviving data in the cross layout when the parity is declared dyadic, then the
    /// `|L| x |L|` inverse (in registers when the parity rows fit one pass, as for 64 + 10, and
    /// through a whole lost 8-block's dyadic inverse when there is one: `solve_lost`). Used
    /// when that costs at most 87% of the dense rebuild (1.5 k |L|). 64 + 10 losing its first
    /// 10 data chunks (a whole block and two more): 2.17x ISA-L at 4 KiB; ten scattered losses
    /// ~12% slower than that (docs/PERFORMANCE.md); before the in-register inverse it ran the
    /// same speed as the dense rebuild.
    fn solve_data(&self, missing: &[usize], sources: &[usize]) -> Option<DyadicProgram> {
        let (h, prow, pcol) = &**self.dyadic.as_ref()?;
        if !self.kernel.runs_dyadic() || missing.iter().any(|&i| i >= self.k) {
            return None;
        }
        let lost = missing.len();
        let (data, parity) = sources.split_at(self.k - lost);
        let rows: Vec<usize> = parity.iter().map(|&i| prow[i - self.k]).collect();
        let cols: Vec<usize> = data.iter().map(|&j| pcol[j]).collect();
        let lost_at: Vec<usize> = missing.iter().map(|&j| pcol[j]).collect();
        let p = DyadicProgram::solve_lost(h, &rows, &cols, &lost_at)?;
        (200 * p.cost() <= 87 * 3 * self.k * lost).then_some(p)
    }

    pub fn reconstruct(&self, chunks: &mut [&mut [u8]], erased: &[usize]) -> Result<(), CodeError> {
        Self::check_count("total", self.n(), chunks.len())?;
        self.common_len(chunks.iter().map(|c| &**c))?;
        let (key, count) = self.erasure_key(erased)?;
        if count == 0 {
            return Ok(());
        }
        let run = |plan: &DecodePlan, chunks: &mut [&mut [u8]]| {
            // Room for the wide codes' 64 sources on the stack (growing a heap list from 16
            // was a fifth of a 64+10 rebuild's per-call cost), filled in place and written by
            // index: a push per source kept the inline length in memory, a store-to-load chain.
            let mut inputs: SmallVec<[&[u8]; 64]> = SmallVec::new();
            inputs.resize(plan.sources.len(), &[]);
            let mut outputs: SmallVec<[&mut [u8]; 64]> = SmallVec::new();
            let mut next = 0;
            for (i, c) in chunks.iter_mut().enumerate() {
                let bit = 1u64 << (i % 64);
                if plan.missing[i / 64] & bit != 0 {
                    outputs.push(&mut **c);
                } else if plan.source_set[i / 64] & bit != 0 {
                    inputs[next] = &**c;
                    next += 1;
                }
            }
            self.run_plan(plan, &inputs, &mut outputs);
        };
        let hit = LAST_PLAN.with_borrow(|last| match last {
            Some((id, k, plan)) if *id == self.id && *k == key => {
                run(plan, chunks);
                true
            }
            _ => false,
        });
        if !hit {
            let plan = self.plan_for(key);
            run(&plan, chunks);
            LAST_PLAN.set(Some((self.id, key, plan)));
        }
        Ok(())
    }

    /// `outputs = plan * inputs`: the plan's dyadic program when it has one, else dense.
    fn run_plan(&self, plan: &DecodePlan, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        let fast = plan.fast.as_ref();
        if !fast.is_some_and(|p| self.kernel.dyadic(p, inputs, outputs)) {
            self.kernel
                .dot(&plan.tables, inputs, &[], outputs, Mode::Set);
        }
    }

    /// Rebuild `missing` (normalized) from `chunks` into fresh buffers, in `missing`'s order.
    pub fn rebuild_copies(&self, chunks: &[&[u8]], missing: &[usize], len: usize) -> Vec<Vec<u8>> {
        let mut out = vec![vec![0u8; len]; missing.len()];
        if missing.is_empty() {
            return out;
        }
        let plan = self.plan(missing);
        let inputs: Vec<&[u8]> = plan.sources.iter().map(|&i| chunks[i]).collect();
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|v| &mut v[..]).collect();
        self.run_plan(&plan, &inputs, &mut outs);
        out
    }

    /// Parity recomputed from the data of `chunks` XOR the stored parity: all zero iff consistent.
    pub fn parity_syndromes(&self, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut syn: Vec<Vec<u8>> = chunks[self.k..].iter().map(|p| p.to_vec()).collect();
        let mut outs: Vec<&mut [u8]> = syn.iter_mut().map(|v| &mut v[..]).collect();
        self.parity_product(&chunks[..self.k], &mut outs, Mode::Add);
        syn
    }

    /// With `missing` (normalized) rebuilt, is the stripe a codeword? Needs `missing.len() < m`.
    pub fn consistent_with(&self, chunks: &[&[u8]], missing: &[usize], len: usize) -> bool {
        assert!(missing.len() < self.m);
        self.rebuild_if_codeword(chunks, missing, len).is_some()
    }

    /// Rebuild `missing` (normalized) from the others; if the completed stripe is a codeword,
    /// return the rebuilt chunks in `missing`'s order, otherwise `None`.
    pub fn rebuild_if_codeword(
        &self,
        chunks: &[&[u8]],
        missing: &[usize],
        len: usize,
    ) -> Option<Vec<Vec<u8>>> {
        let rebuilt = self.rebuild_copies(chunks, missing, len);
        let mut full: Vec<&[u8]> = chunks.to_vec();
        for (slot, &i) in missing.iter().enumerate() {
            full[i] = &rebuilt[slot];
        }
        let codeword = self
            .parity_syndromes(&full)
            .iter()
            .all(|s| s.iter().all(|&b| b == 0));
        codeword.then_some(rebuilt)
    }

    /// Locate for codes whose bound leaves no room to locate (t = 0): detect only.
    pub fn detect_only(
        &self,
        chunks: &[&[u8]],
        missing: &[usize],
        len: usize,
    ) -> Result<crate::Located, CodeError> {
        if missing.len() >= self.m {
            return Ok(crate::Located::Unchecked);
        }
        if self.consistent_with(chunks, missing, len) {
            Ok(crate::Located::Consistent)
        } else {
            Err(CodeError::CannotLocate {
                reason: format!(
                    "syndromes are non-zero but 2t + f <= m allows no error location with m = {} and f = {}",
                    self.m,
                    missing.len()
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ReedSolomon;
    use stripeguard_gf::Kernel;

    #[test]
    fn wide_cauchy_codes_take_the_dyadic_paths_where_they_pay() {
        let k = Kernel::best();
        if !k.runs_dyadic() {
            println!("skipped: the scalar kernel has no dyadic runner");
            return;
        }
        let wide = ReedSolomon::with_kernel(64, 64, k).unwrap();
        assert!(wide.inner.fast_parity.is_some());
        let all_data: Vec<usize> = (0..64).collect();
        assert!(wide.inner.plan(&all_data).fast.is_some(), "P^-1 is dyadic");
        assert!(wide.inner.plan(&[0, 70]).fast.is_none());
        assert!(ReedSolomon::with_kernel(16, 16, k)
            .unwrap()
            .inner
            .fast_parity
            .is_some());
        for (k_, m) in [(6, 2), (10, 4), (8, 8), (16, 4)] {
            let code = ReedSolomon::with_kernel(k_, m, k).unwrap();
            assert!(code.inner.fast_parity.is_none(), "{k_}+{m}");
        }
        // Losing data chunks of 64 + 10 solves through the parity.
        let code = ReedSolomon::with_kernel(64, 10, k).unwrap();
        let lost: Vec<usize> = (0..10).collect();
        assert!(code.inner.plan(&lost).fast.is_some());
        assert!(code
            .inner
            .plan(&[0, 9, 17, 25, 33, 41, 49, 57])
            .fast
            .is_some());
        // Three lost chunks: 0.84 of the dense rebuild, not worth it; a parity chunk: dense.
        assert!(code.inner.plan(&[3, 17, 40]).fast.is_none());
        assert!(code.inner.plan(&[3, 70]).fast.is_none());
        // 64 + 10 and 32 + 8 run the cross layout.
        for (k_, m) in [(64, 10), (32, 8)] {
            let code = ReedSolomon::with_kernel(k_, m, k).unwrap();
            assert!(code.inner.fast_parity.is_some(), "{k_}+{m}");
        }
    }
}
