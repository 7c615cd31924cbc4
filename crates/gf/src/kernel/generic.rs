//! The region loops every SIMD kernel shares, written once over a [`Vector`] abstraction.
//!
//! Shape of the work: `outputs[r] (op)= sum_i M[r][i] * x_i` where `x_i` is `inputs[i]` or, for a
//! read-modify-write, `old[i] ^ inputs[i]`. The loops are arranged so that
//! - each input vector is loaded once per output *group* and multiplied by every coefficient of
//!   that group, with the group's accumulators held in registers (a wide code such as 64+64 runs
//!   as four groups of 16 instead of eleven passes of six, as ISA-L does);
//! - the columns are walked in tiles small enough that all inputs of a tile stay in L2 while the
//!   groups re-read them, so long chunks (64 KiB and more) run at the cache-resident speed.
//!
//! Every function here is `#[inline(always)]`: the per-ISA files wrap them in one-line
//! `#[target_feature]` functions, so the intrinsics are compiled with the right features.
//!
//! # Safety contracts
//! The `# Safety` sections below are written with three terms:
//! - **`V`'s features**: the CPU supports the instruction set of the [`Vector`] implementation
//!   (AVX2; AVX-512F + AVX-512BW; those and GFNI). `Kernel::new` checks it before a kernel
//!   exists, and every function here only runs inside one of the per-ISA `#[target_feature]`
//!   wrappers a kernel calls.
//! - **coefficient `idx` of `t`**: `idx < t.inputs() * t.outputs()`, the number of entries of
//!   each of [`MulTables`]' forms; [`Vector::coef`] reads entry `idx` without a bounds check.
//! - **columns `a..b` of a region `p`**: `p.add(c)` is valid for reads (of an input or addend)
//!   or for reads and writes (of an output) of `V::BYTES` bytes for every `c` in `a..b` that
//!   the loop visits (`a`, `a + V::BYTES`, ... below `b`); `b - a` is a multiple of `V::BYTES`.

use super::Mode;
use crate::dyadic::{
    cross_shapes, quarter_paths, Cross, DyadicProgram, Finish, Op, Reg, DENSE_REGIONS,
    MAX_CROSS_BLOCKS, ZERO_BYTES,
};
use crate::tables::MulTables;
use core::mem::MaybeUninit;

/// One SIMD register's worth of bytes and the operations the loops need.
///
/// Every method executes the implementation's instructions, so every method is `unsafe`: the
/// caller guarantees `V`'s features (see the module's "Safety contracts"); the methods that
/// touch memory add their pointer requirements.
pub(crate) trait Vector: Copy {
    /// Bytes per vector.
    const BYTES: usize;
    /// Largest number of output accumulators kept in registers at once.
    const MAX_GROUP: usize;
    /// What [`Vector::mul`] needs from an input vector (the vector itself, or its nibbles).
    type Prep: Copy;
    /// The `BYTES` bytes at `p` (unaligned load).
    ///
    /// # Safety
    /// The CPU has `Self`'s features, and `p` is valid for reads of `Self::BYTES` bytes (no
    /// alignment needed).
    unsafe fn load(p: *const u8) -> Self;
    /// Store `v` to the `BYTES` bytes at `p` (unaligned store).
    ///
    /// # Safety
    /// The CPU has `Self`'s features, and `p` is valid for writes of `Self::BYTES` bytes (no
    /// alignment needed).
    unsafe fn store(p: *mut u8, v: Self);
    /// `a ^ b`.
    ///
    /// # Safety
    /// The CPU has `Self`'s features.
    unsafe fn xor(a: Self, b: Self) -> Self;
    /// All zero bytes.
    ///
    /// # Safety
    /// The CPU has `Self`'s features.
    unsafe fn zero() -> Self;
    /// A coefficient ready for [`Vector::mul_by`] (its affine matrix or nibble tables, in
    /// registers).
    type Coef: Copy;
    /// `x` made ready for [`Vector::mul_by`].
    ///
    /// # Safety
    /// The CPU has `Self`'s features.
    unsafe fn prep(x: Self) -> Self::Prep;
    /// Load coefficient `idx` of the input-major tables of `t`.
    ///
    /// # Safety
    /// The CPU has `Self`'s features, and `idx < t.inputs() * t.outputs()` (the entry is read
    /// without a bounds check).
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef;
    /// `c * x`.
    ///
    /// # Safety
    /// The CPU has `Self`'s features.
    unsafe fn mul_by(x: Self::Prep, c: Self::Coef) -> Self;
    /// `coeff[idx] * x` where `idx` indexes the input-major tables of `t`.
    ///
    /// # Safety
    /// As [`Vector::coef`]: the CPU has `Self`'s features, and `idx < t.inputs() * t.outputs()`.
    #[inline(always)]
    unsafe fn mul(x: Self::Prep, t: &MulTables, idx: usize) -> Self {
        // SAFETY: our caller guarantees the features and that `idx` is in `t`.
        unsafe { Self::mul_by(x, Self::coef(t, idx)) }
    }
}

/// Bytes of every input walked before the next output group starts: 64 inputs x 4 KiB = 256 KiB,
/// which stays in a 512 KiB - 1 MiB L2.
const TILE_BYTES: usize = 4096;

/// Largest output group when outputs are read-modify-written (see `dot`).
const ACCUMULATE_GROUP: usize = 6;

/// Most inputs or outputs a code can have (k + m <= 255).
const MAX_REGIONS: usize = 256;

const SET: u8 = 0;
const ADD: u8 = 1;
const DELTA: u8 = 2;

/// The whole dot product.
///
/// # Safety
/// The CPU has `V`'s features; `inputs.len() == t.inputs()` and `outputs.len() ==
/// t.outputs()`; every input and output region has the same length; for [`Mode::DeltaAdd`],
/// `old` has `inputs.len()` regions of that length too. (`Kernel::dot` checks all but the
/// features, which `Kernel::new` checked.)
#[inline(always)]
pub(crate) unsafe fn dot<V: Vector>(
    t: &MulTables,
    inputs: &[&[u8]],
    old: &[&[u8]],
    outputs: &mut [&mut [u8]],
    mode: Mode,
) {
    let Some(len) = outputs.first().map(|o| o.len()) else {
        return;
    };
    let k = inputs.len();
    let m = outputs.len();
    // Pointer tables on the stack, left uninitialised beyond what is used: zeroing 3 x 256
    // pointers would cost more than a 4 KiB update itself.
    let mut inp = [MaybeUninit::<*const u8>::uninit(); MAX_REGIONS];
    let mut prev = [MaybeUninit::<*const u8>::uninit(); MAX_REGIONS];
    let mut out = [MaybeUninit::<*mut u8>::uninit(); MAX_REGIONS];
    for i in 0..k {
        inp[i].write(inputs[i].as_ptr());
        prev[i].write(if mode == Mode::DeltaAdd {
            old[i].as_ptr()
        } else {
            core::ptr::null()
        });
    }
    for (r, o) in outputs.iter_mut().enumerate() {
        out[r].write(o.as_mut_ptr());
    }
    // SAFETY: the first k entries were written just above, and `MaybeUninit<T>` has the layout
    // of `T`.
    let inp: &[*const u8] =
        unsafe { &*(&inp[..k] as *const [MaybeUninit<*const u8>] as *const [*const u8]) };
    // SAFETY: as for `inp`: the first k entries were written above (null unless DeltaAdd).
    let prev: &[*const u8] =
        unsafe { &*(&prev[..k] as *const [MaybeUninit<*const u8>] as *const [*const u8]) };
    // SAFETY: as for `inp`: the first m entries were written above.
    let out: &[*mut u8] =
        unsafe { &*(&out[..m] as *const [MaybeUninit<*mut u8>] as *const [*mut u8]) };
    let body = len - len % V::BYTES;
    // Balanced groups: 64 outputs with MAX_GROUP 16 are 4 x 16, 20 are 10 + 10.
    // Outputs that are read and written back (Add, DeltaAdd) are capped lower: chunk buffers
    // usually sit a power of two (plus a small header) apart, so every output stream falls into
    // the same L1 set, and more streams than the cache has ways thrash it.
    let max_group = if mode == Mode::Set {
        V::MAX_GROUP
    } else {
        V::MAX_GROUP.min(ACCUMULATE_GROUP)
    };
    let groups = m.div_ceil(max_group);
    let per_group = m.div_ceil(groups);
    let mut tile = 0;
    while tile < body {
        let end = (tile + TILE_BYTES).min(body);
        let mut row0 = 0;
        while row0 < m {
            let g = per_group.min(m - row0);
            let out = &out[row0..row0 + g];
            // SAFETY: `group`'s contract with `G = g`: our caller guarantees `V`'s features,
            // `k == t.inputs()` and `row0 + g <= m == t.outputs()`; `g <= per_group <=
            // max_group <= V::MAX_GROUP` and `out` holds `g` pointers; every region (and `old`'s,
            // which `prev` points into for DeltaAdd, the only mode that reads it) holds `len >=
            // body >= end` bytes, and `end - tile` is a multiple of `V::BYTES`.
            unsafe {
                match mode {
                    Mode::Set => group_dispatch::<V, SET>(g, t, inp, prev, out, row0, tile, end),
                    Mode::Add => group_dispatch::<V, ADD>(g, t, inp, prev, out, row0, tile, end),
                    Mode::DeltaAdd => {
                        group_dispatch::<V, DELTA>(g, t, inp, prev, out, row0, tile, end)
                    }
                }
            }
            row0 += g;
        }
        tile = end;
    }
    tail(t, inputs, old, outputs, body, mode);
}

/// [`group`] for a run-time group size `g` (which must not exceed `V::MAX_GROUP`: it panics).
///
/// # Safety
/// The contract of [`group`] with `G = g`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn group_dispatch<V: Vector, const MODE: u8>(
    g: usize,
    t: &MulTables,
    inp: &[*const u8],
    prev: &[*const u8],
    out: &[*mut u8],
    row0: usize,
    start: usize,
    end: usize,
) {
    assert!(g <= V::MAX_GROUP);
    macro_rules! sizes {
        ($($n:literal)*) => {
            match g {
                $($n => group::<V, $n, MODE>(t, inp, prev, out, row0, start, end),)*
                _ => unreachable!("output group of {g} exceeds every kernel's register budget"),
            }
        };
    }
    // SAFETY: the arm taken calls `group` with `G == g`, so our contract is its contract.
    unsafe { sizes!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16) }
}

/// `G` outputs over columns `start..end` (multiples of `V::BYTES`).
///
/// # Safety
/// The CPU has `V`'s features; `inp.len() <= t.inputs()` and `row0 + G <= t.outputs()` (so
/// every coefficient read is in `t`); `prev.len() >= inp.len()` and `out.len() >= G`; columns
/// `start..end` of every `inp[i]` (and of `prev[i]` when `MODE == DELTA`; it is not read
/// otherwise) are readable, and of every `out[j]`, `j < G`, readable and writable.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn group<V: Vector, const G: usize, const MODE: u8>(
    t: &MulTables,
    inp: &[*const u8],
    prev: &[*const u8],
    out: &[*mut u8],
    row0: usize,
    start: usize,
    end: usize,
) {
    let rows = t.outputs();
    if inp.len() == 1 {
        // SAFETY: our contract for the one input: `row0 + G <= t.outputs()`, `out.len() >= G`,
        // and columns `start..end` of `inp[0]`, `prev[0]` (DELTA) and `out[..G]`.
        return unsafe { single_input::<V, G, MODE>(t, inp[0], prev[0], out, row0, start, end) };
    }
    // The inputs go two at a time: both products of an output are added with one three-way XOR
    // (`vpternlogd`), and on GFNI sums are free only up to about half the products (see the
    // `throughput` example), so this takes a sum per product down to half of one.
    let pairs = inp.len() / 2;
    let load = |i: usize, off: usize| -> V {
        // SAFETY: only called below with `i < inp.len() <= prev.len()` and a column `off` of
        // `start..end`, readable in `inp[i]` and (for DELTA) `prev[i]` by our contract; `V`'s
        // features are ours.
        unsafe {
            let x = V::load(inp.get_unchecked(i).add(off));
            if MODE == DELTA {
                V::xor(x, V::load(prev.get_unchecked(i).add(off)))
            } else {
                x
            }
        }
    };
    let mut off = start;
    // Small groups (RAID-5/6 shapes, few outputs) take two vectors per pass over the inputs:
    // each input's pointer and coefficients are loaded once for 128 bytes, which is what a
    // pass costs beyond its products when there are only one or two of them per input.
    if G <= 4 {
        while off + 2 * V::BYTES <= end {
            // SAFETY: `V`'s features are ours; every coefficient index is `i * rows + row0 + j`
            // with `i < inp.len() <= t.inputs()` and `row0 + j < row0 + G <= rows`, so in `t`;
            // `off` and `off + V::BYTES` are columns of `start..end` (`off + 2 * V::BYTES <=
            // end`), which `load` and `finish` (with `out.len() >= G`) may touch.
            unsafe {
                let mut acc0 = [V::zero(); G];
                let mut acc1 = [V::zero(); G];
                for h in 0..pairs {
                    let (i, k) = (2 * h, 2 * h + 1);
                    let (x0, x1) = (V::prep(load(i, off)), V::prep(load(i, off + V::BYTES)));
                    let (y0, y1) = (V::prep(load(k, off)), V::prep(load(k, off + V::BYTES)));
                    let (bi, bk) = (i * rows + row0, k * rows + row0);
                    for j in 0..G {
                        let (c, d) = (V::coef(t, bi + j), V::coef(t, bk + j));
                        acc0[j] = V::xor(acc0[j], V::xor(V::mul_by(x0, c), V::mul_by(y0, d)));
                        acc1[j] = V::xor(acc1[j], V::xor(V::mul_by(x1, c), V::mul_by(y1, d)));
                    }
                }
                if inp.len() % 2 == 1 {
                    let i = inp.len() - 1;
                    let (x0, x1) = (V::prep(load(i, off)), V::prep(load(i, off + V::BYTES)));
                    let base = i * rows + row0;
                    for j in 0..G {
                        let c = V::coef(t, base + j);
                        acc0[j] = V::xor(acc0[j], V::mul_by(x0, c));
                        acc1[j] = V::xor(acc1[j], V::mul_by(x1, c));
                    }
                }
                finish::<V, G, MODE>(acc0, out, off);
                finish::<V, G, MODE>(acc1, out, off + V::BYTES);
            }
            off += 2 * V::BYTES;
        }
    }
    while off < end {
        // SAFETY: as in the loop above, for the one column `off` of `start..end` (`end - off`
        // is a positive multiple of `V::BYTES`).
        unsafe {
            let mut acc = [V::zero(); G];
            for h in 0..pairs {
                let (i, k) = (2 * h, 2 * h + 1);
                let (x, y) = (V::prep(load(i, off)), V::prep(load(k, off)));
                let (bi, bk) = (i * rows + row0, k * rows + row0);
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = V::xor(*a, V::xor(V::mul(x, t, bi + j), V::mul(y, t, bk + j)));
                }
            }
            if inp.len() % 2 == 1 {
                let i = inp.len() - 1;
                let x = V::prep(load(i, off));
                let base = i * rows + row0;
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = V::xor(*a, V::mul(x, t, base + j));
                }
            }
            finish::<V, G, MODE>(acc, out, off);
        }
        off += V::BYTES;
    }
}

/// Store a group's sums at column `off` (combined with what the outputs held, for Add modes).
///
/// # Safety
/// The CPU has `V`'s features; `out.len() >= G`, and every `out[j]`, `j < G`, is valid for
/// writes (and, unless `MODE == SET`, reads) of `V::BYTES` bytes at `off`.
#[inline(always)]
unsafe fn finish<V: Vector, const G: usize, const MODE: u8>(
    mut acc: [V; G],
    out: &[*mut u8],
    off: usize,
) {
    if MODE != SET {
        // Every output is loaded before any is stored (see `single_input`).
        // SAFETY: `j < G <= out.len()`, and `out[j]` is readable at `off` (our contract).
        let held: [V; G] =
            core::array::from_fn(|j| unsafe { V::load(out.get_unchecked(j).add(off)) });
        for (a, h) in acc.iter_mut().zip(held) {
            // SAFETY: `V`'s features (our contract).
            *a = unsafe { V::xor(*a, h) };
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: `j < G <= out.len()`, and `out[j]` is writable at `off` (our contract).
        unsafe { V::store(out.get_unchecked(j).add(off), *a) };
    }
}

/// One input (a single-chunk update, or a region multiply): no inner loop over inputs, and
/// the output pointers and coefficients are hoisted into locals for the whole range.
///
/// # Safety
/// [`group`]'s contract for one input: the CPU has `V`'s features; `row0 + G <= t.outputs()`;
/// `out.len() >= G`; columns `start..end` of `inp` (and of `prev` when `MODE == DELTA`; it is
/// not read otherwise) are readable, and of every `out[j]`, `j < G`, readable and writable.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn single_input<V: Vector, const G: usize, const MODE: u8>(
    t: &MulTables,
    inp: *const u8,
    prev: *const u8,
    out: &[*mut u8],
    row0: usize,
    start: usize,
    end: usize,
) {
    // SAFETY: `j < G <= out.len()`.
    let outs: [*mut u8; G] = core::array::from_fn(|j| unsafe { *out.get_unchecked(j) });
    // The coefficients go into registers once: loaded inside the loop, they would cost a load
    // per product, and with a load and a store per output already that is what bounds it.
    // SAFETY: coefficient `row0 + j` (input 0, output `row0 + j < row0 + G <= t.outputs()`) is
    // in `t`; `V`'s features are ours.
    let coefs: [V::Coef; G] = core::array::from_fn(|j| unsafe { V::coef(t, row0 + j) });
    let mut off = start;
    while off < end {
        // SAFETY: `V`'s features are ours, and `off` is a column of `start..end` (`end - off`
        // is a positive multiple of `V::BYTES`): readable in `inp` and, for DELTA, `prev`,
        // readable and writable in every `outs[j]`.
        unsafe {
            let mut x = V::load(inp.add(off));
            if MODE == DELTA {
                x = V::xor(x, V::load(prev.add(off)));
            }
            // Load every output before storing any, as ISA-L's mad kernels do: chunk buffers
            // tend to sit a multiple of 4 KiB apart, and a load issued after a store to an
            // address equal in its low 12 bits waits for that store (4K aliasing), which
            // serialised the outputs.
            let held: [V; G] = if MODE == SET {
                [V::zero(); G]
            } else {
                core::array::from_fn(|j| V::load(outs[j].add(off)))
            };
            let x = V::prep(x);
            for (j, &o) in outs.iter().enumerate() {
                let p = V::mul_by(x, coefs[j]);
                V::store(o.add(off), if MODE == SET { p } else { V::xor(p, held[j]) });
            }
        }
        off += V::BYTES;
    }
}

/// The bytes after the last whole vector, done with scalar arithmetic.
#[inline(always)]
pub(crate) fn tail(
    t: &MulTables,
    inputs: &[&[u8]],
    old: &[&[u8]],
    outputs: &mut [&mut [u8]],
    from: usize,
    mode: Mode,
) {
    for (r, o) in outputs.iter_mut().enumerate() {
        for b in from..o.len() {
            let mut v = 0u8;
            for (i, x) in inputs.iter().enumerate() {
                let x = if mode == Mode::DeltaAdd {
                    x[b] ^ old[i][b]
                } else {
                    x[b]
                };
                v ^= crate::field::mul(t.coeff(i, r), x);
            }
            o[b] = if mode == Mode::Set { v } else { o[b] ^ v };
        }
    }
}

/// `output (op)= xor of inputs`, vector body plus scalar tail.
///
/// # Safety
/// The CPU has `V`'s features, and every input is `output.len()` bytes long (`Kernel::xor`
/// checks the lengths).
#[inline(always)]
pub(crate) unsafe fn xor<V: Vector>(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    let len = output.len();
    let body = len - len % V::BYTES;
    let o = output.as_mut_ptr();
    let mut off = 0;
    while off < body {
        // SAFETY: `off + V::BYTES <= body <= len`, the length of `output` and of every input;
        // `V`'s features are ours.
        unsafe {
            let mut acc = if accumulate {
                V::load(o.add(off))
            } else {
                V::zero()
            };
            for x in inputs {
                acc = V::xor(acc, V::load(x.as_ptr().add(off)));
            }
            V::store(o.add(off), acc);
        }
        off += V::BYTES;
    }
    for b in body..len {
        let v = inputs.iter().fold(0, |a, x| a ^ x[b]);
        output[b] = if accumulate { output[b] ^ v } else { v };
    }
}

/// What [`Reg::Zero`] reads: never written (the pointer is mutable only for the shared `at`).
static ZEROS: [u8; ZERO_BYTES] = [0; ZERO_BYTES];

/// Run a [`DyadicProgram`] over `len` bytes (a multiple of `V::BYTES`) of every region, one
/// step ([`DyadicProgram::step`]) at a time so the scratch regions stay in cache.
///
/// # Safety
/// The CPU has `V`'s features; `ins.len() == p.inputs()` and `outs.len() == p.outputs()`;
/// `len` is a multiple of `V::BYTES`; every `ins[i]` is valid for reads and every `outs[o]` for
/// reads and writes of `len` bytes; `scratch` is valid for reads and writes of
/// `p.scratch_bytes()` bytes; no output or scratch region overlaps another region.
/// (`Kernel::dyadic` checks the counts and lengths and provides the scratch.) `p` itself is
/// trusted: its constructors only emit ops whose registers, tables and shapes fit it
/// (`DyadicProgram`'s invariant, relied on by every `SAFETY` comment below).
#[inline(always)]
pub(crate) unsafe fn dyadic<V: Vector>(
    p: &DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    let step = p.step();
    let mut tile = 0;
    while tile < len {
        let w = step.min(len - tile);
        // Where register `r`'s bytes of this step start. Programs never write `Reg::In` or
        // `Reg::Zero` (the `*mut` is only for one closure type).
        let at = |r: Reg| -> *mut u8 {
            // SAFETY: `p`'s registers index its `ins.len()` inputs, `outs.len()` outputs and
            // `p.scratch` scratch regions of `step` bytes each (`scratch_bytes = scratch *
            // step` when there are any); `tile < len` stays inside every input and output.
            unsafe {
                match r {
                    Reg::In(i) => ins.get_unchecked(i as usize).add(tile) as *mut u8,
                    Reg::Out(o) => outs.get_unchecked(o as usize).add(tile),
                    Reg::Tmp(t) => scratch.add(t as usize * step),
                    Reg::Zero => ZEROS.as_ptr() as *mut u8,
                }
            }
        };
        for op in &p.ops {
            match op {
                Op::Dense {
                    table,
                    ins: ri,
                    outs: ro,
                    add,
                } => {
                    let mut ip = [core::ptr::null::<u8>(); DENSE_REGIONS];
                    let mut op_ = [core::ptr::null_mut::<u8>(); DENSE_REGIONS];
                    for (d, &r) in ip.iter_mut().zip(ri) {
                        *d = at(r);
                    }
                    for (d, &r) in op_.iter_mut().zip(ro) {
                        *d = at(r);
                    }
                    debug_assert!(ri.len() <= DENSE_REGIONS && ro.len() <= DENSE_REGIONS);
                    let (ip, op_) = (&ip[..ri.len()], &op_[..ro.len()]);
                    // SAFETY: `table` is one of `p`'s, with `ri.len()` inputs and `ro.len() <=
                    // DENSE_MAX <= V::MAX_GROUP` outputs; every region `at` gives holds `w`
                    // bytes of this step (`w <= step <= ZERO_BYTES`, a multiple of `V::BYTES`);
                    // `V`'s features are ours. `prev` (= `ip`) is not read by SET or ADD.
                    unsafe {
                        let t = p.tables.get_unchecked(*table);
                        if *add {
                            group_dispatch::<V, ADD>(ro.len(), t, ip, ip, op_, 0, 0, w);
                        } else {
                            group_dispatch::<V, SET>(ro.len(), t, ip, ip, op_, 0, 0, w);
                        }
                    }
                }
                Op::Block {
                    table,
                    ins: ri,
                    outs: ro,
                    add,
                } => {
                    // SAFETY: `table` is one of `p`'s and holds the block's 81 or 27 coefficients;
                    // `ri` and `ro` have the block's size; every region `at` gives holds `w`
                    // bytes of this step, a multiple of `V::BYTES`; `V`'s features are ours.
                    unsafe {
                        let t = p.tables.get_unchecked(*table);
                        if ri.len() == 16 {
                            kblock_region::<V, 16>(t, ri, ro, &at, w, *add);
                        } else {
                            kblock_region::<V, 8>(t, ri, ro, &at, w, *add);
                        }
                    }
                }
                Op::TwoLevels {
                    table,
                    ins: ri,
                    outs: ro,
                    add,
                } => {
                    // SAFETY: `table` is one of `p`'s and holds the nine blocks' coefficients
                    // (9 x 81 or 9 x 27); `ri` and `ro` have `4 B` registers; every region `at`
                    // gives holds `w` bytes of this step, a multiple of `V::BYTES`; `V`'s
                    // features are ours.
                    unsafe {
                        let t = p.tables.get_unchecked(*table);
                        if ri.len() == 64 {
                            two_levels_region::<V, 16>(t, ri, ro, &at, w, *add);
                        } else {
                            two_levels_region::<V, 8>(t, ri, ro, &at, w, *add);
                        }
                    }
                }
                Op::Sum(triples) => {
                    for &(a, b, d) in triples {
                        let (a, b, d) = (at(a), at(b), at(d));
                        let mut off = 0;
                        while off < w {
                            // SAFETY: `off + V::BYTES <= w`, and every region `at` gives holds
                            // `w` bytes of this step (`d` a writable one); `V`'s features.
                            unsafe {
                                let v = V::xor(V::load(a.add(off)), V::load(b.add(off)));
                                V::store(d.add(off), v);
                            }
                            off += V::BYTES;
                        }
                    }
                }
                Op::Zero(regs) => {
                    for &r in regs {
                        // SAFETY: `r` is an output or scratch register, writable for the `w`
                        // bytes of this step.
                        unsafe { core::ptr::write_bytes(at(r), 0, w) };
                    }
                }
                // SAFETY: `c` is one of `p`'s ops; every region `at` gives holds `w` bytes of
                // this step, a multiple of `V::BYTES`; `V`'s features are ours.
                Op::Cross(c) => unsafe { cross::<V>(p, c, &at, w) },
            }
        }
        tile += w;
    }
}

/// A `B x B` dyadic block (`B` = 8 or 16) over `len` bytes: `outs (add)= D * ins` with `D`'s
/// `3^log2(B)` Karatsuba coefficients in `t` (see `dyadic::karatsuba_coefficients`), every sum
/// in registers.
///
/// # Safety
/// The CPU has `V`'s features; `t` holds at least `3^log2(B)` coefficients (27 or 81); for the
/// first `B` registers, `at` gives regions whose columns `0..len` are readable (`ri`) or, for
/// every `Some` in `ro`, writable (and readable when `add`).
#[inline(always)]
unsafe fn kblock_region<V: Vector, const B: usize>(
    t: &MulTables,
    ri: &[Reg],
    ro: &[Option<Reg>],
    at: &impl Fn(Reg) -> *mut u8,
    len: usize,
    add: bool,
) {
    let ins: [*const u8; B] = core::array::from_fn(|i| at(ri[i]) as *const u8);
    // Null outputs are rows nobody wants.
    let outs: [*mut u8; B] = core::array::from_fn(|i| ro[i].map_or(core::ptr::null_mut(), at));
    let mut off = 0;
    while off < len {
        // SAFETY: `off` is a column of `0..len`, readable in every `ins[i]` and, when not null,
        // writable (readable when `add`) in `outs[i]`; `k16` / `k8` read coefficients `0..81` /
        // `0..27`, all in `t`; `V`'s features are ours.
        unsafe {
            let x: [V; B] = core::array::from_fn(|i| V::load(ins[i].add(off)));
            let mut y: [V; B] = if B == 16 {
                let x16: [V; 16] = core::array::from_fn(|i| x[i]);
                let y16 = k16::<V>(t, 0, x16);
                core::array::from_fn(|i| y16[i])
            } else {
                let x8: [V; 8] = core::array::from_fn(|i| x[i]);
                let y8 = k8::<V>(t, 0, x8);
                core::array::from_fn(|i| y8[i])
            };
            if add {
                let held: [V; B] = core::array::from_fn(|i| {
                    if outs[i].is_null() {
                        V::zero()
                    } else {
                        V::load(outs[i].add(off))
                    }
                });
                for (a, h) in y.iter_mut().zip(held) {
                    *a = V::xor(*a, h);
                }
            }
            for (i, v) in y.into_iter().enumerate() {
                if !outs[i].is_null() {
                    V::store(outs[i].add(off), v);
                }
            }
        }
        off += V::BYTES;
    }
}

/// `B x B` Karatsuba block (`B` = 8 or 16) on `x`, coefficients from `c` in `t`.
///
/// # Safety
/// The CPU has `V`'s features, and coefficients `c..c + 3^log2(B)` (27 or 81) are in `t`.
#[inline(always)]
unsafe fn kblock<V: Vector, const B: usize>(t: &MulTables, c: usize, x: &[V; B]) -> [V; B] {
    // SAFETY: our contract is `k16`'s (B = 16) or `k8`'s (B = 8).
    unsafe {
        let mut y = [V::zero(); B];
        if B == 16 {
            let mut x16 = [V::zero(); 16];
            x16.copy_from_slice(x);
            y.copy_from_slice(&k16::<V>(t, c, x16));
        } else {
            let mut x8 = [V::zero(); 8];
            x8.copy_from_slice(x);
            y.copy_from_slice(&k8::<V>(t, c, x8));
        }
        y
    }
}

/// An [`Op::TwoLevels`] over `len` bytes: `4 B` inputs and outputs, nine `B x B` blocks a
/// column vector (see `Builder::two_levels` in `dyadic.rs`).
///
/// # Safety
/// The CPU has `V`'s features; `t` holds the nine blocks' `9 x 3^log2(B)` coefficients; for the
/// first `4 B` registers of `ri` and `ro`, `at` gives regions whose columns `0..len` are
/// readable (`ri`) or writable and, when `add`, readable (`ro`).
#[inline(always)]
unsafe fn two_levels_region<V: Vector, const B: usize>(
    t: &MulTables,
    ri: &[Reg],
    ro: &[Reg],
    at: &impl Fn(Reg) -> *mut u8,
    len: usize,
    add: bool,
) {
    let coefs = if B == 16 { 81 } else { 27 };
    let mut ins = [core::ptr::null::<u8>(); 64];
    let mut outs = [core::ptr::null_mut::<u8>(); 64];
    for i in 0..4 * B {
        ins[i] = at(ri[i]);
        outs[i] = at(ro[i]);
    }
    // The operands by the levels that take A + B: z[2 (P1 == A+B) + (P0 == A+B)]; the products
    // on an A + B path in the order of `TWO_LEVEL_PATHS`.
    // SAFETY: `V`'s features are ours.
    let mut z = unsafe { [[V::zero(); B]; 4] };
    // SAFETY: as for `z`.
    let mut shared = unsafe { [[V::zero(); B]; 5] };
    let mut off = 0;
    while off < len {
        // SAFETY: `off` is a column of `0..len`, readable in the `4 B` input regions and
        // writable (readable when `add`) in the `4 B` outputs; block `b` reads coefficients
        // `b * coefs..(b + 1) * coefs`, `b < 9`, all in `t`; `V`'s features are ours.
        unsafe {
            for i in 0..B {
                let x = |v: usize| V::load(ins[v * B + i].add(off));
                let (x0, x1, x2, x3) = (x(0), x(1), x(2), x(3));
                let x13 = V::xor(x1, x3);
                z[0][i] = V::xor(V::xor(x0, x2), x13);
                z[1][i] = x13;
                z[2][i] = V::xor(x2, x3);
                z[3][i] = x3;
            }
            for (b, zi) in [3, 1, 1, 2, 2].into_iter().enumerate() {
                shared[b] = kblock::<V, B>(t, b * coefs, &z[zi]);
            }
            for v in 0..4 {
                let y = kblock::<V, B>(t, (5 + v) * coefs, &z[0]);
                let (a, b, c) = (&shared[1 + (v >> 1)], &shared[3 + (v & 1)], &shared[0]);
                for i in 0..B {
                    let o = outs[v * B + i].add(off);
                    let mut r = V::xor(y[i], V::xor(V::xor(a[i], b[i]), c[i]));
                    if add {
                        r = V::xor(r, V::load(o));
                    }
                    V::store(o, r);
                }
            }
        }
        off += V::BYTES;
    }
}

/// 81 products for a 16 x 16 block.
///
/// # Safety
/// The CPU has `V`'s features, and coefficients `c..c + 81` are in `t`.
#[inline(always)]
unsafe fn k16<V: Vector>(t: &MulTables, c: usize, x: [V; 16]) -> [V; 16] {
    // SAFETY: the three `k8` read coefficients `c..c + 27`, `c + 27..c + 54` and
    // `c + 54..c + 81`, in `t` by our contract, which also gives `V`'s features.
    unsafe {
        let s: [V; 8] = core::array::from_fn(|i| V::xor(x[i], x[i + 8]));
        let p1 = k8::<V>(t, c, s);
        let p2 = k8::<V>(t, c + 27, s);
        let p3 = k8::<V>(t, c + 54, core::array::from_fn(|i| x[i + 8]));
        core::array::from_fn(|i| {
            if i < 8 {
                V::xor(p1[i], p3[i])
            } else {
                V::xor(p2[i - 8], p3[i - 8])
            }
        })
    }
}

/// `[[a, b], [b, a]] x` in 3 products: `s = x0 + x1`, `y0 = a s + (a + b) x1`, `y1 = b s + (a + b) x1`.
///
/// # Safety
/// The CPU has `V`'s features, and coefficients `c..c + 3` are in `t`.
#[inline(always)]
unsafe fn k2<V: Vector>(t: &MulTables, c: usize, x: [V; 2]) -> [V; 2] {
    // SAFETY: reads coefficients `c`, `c + 1` and `c + 2`, in `t` by our contract, which also
    // gives `V`'s features.
    unsafe {
        let s = V::prep(V::xor(x[0], x[1]));
        let p3 = V::mul(V::prep(x[1]), t, c + 2);
        [V::xor(V::mul(s, t, c), p3), V::xor(V::mul(s, t, c + 1), p3)]
    }
}

/// The same step one size up: 9 products.
///
/// # Safety
/// The CPU has `V`'s features, and coefficients `c..c + 9` are in `t`.
#[inline(always)]
unsafe fn k4<V: Vector>(t: &MulTables, c: usize, x: [V; 4]) -> [V; 4] {
    // SAFETY: the three `k2` read coefficients `c..c + 9`, in `t` by our contract, which also
    // gives `V`'s features.
    unsafe {
        let s = [V::xor(x[0], x[2]), V::xor(x[1], x[3])];
        let p1 = k2::<V>(t, c, s);
        let p2 = k2::<V>(t, c + 3, s);
        let p3 = k2::<V>(t, c + 6, [x[2], x[3]]);
        [
            V::xor(p1[0], p3[0]),
            V::xor(p1[1], p3[1]),
            V::xor(p2[0], p3[0]),
            V::xor(p2[1], p3[1]),
        ]
    }
}

/// And once more: 27 products for an 8 x 8 block.
///
/// # Safety
/// The CPU has `V`'s features, and coefficients `c..c + 27` are in `t`.
#[inline(always)]
unsafe fn k8<V: Vector>(t: &MulTables, c: usize, x: [V; 8]) -> [V; 8] {
    // SAFETY: the three `k4` read coefficients `c..c + 27`, in `t` by our contract, which also
    // gives `V`'s features.
    unsafe {
        let s = [
            V::xor(x[0], x[4]),
            V::xor(x[1], x[5]),
            V::xor(x[2], x[6]),
            V::xor(x[3], x[7]),
        ];
        let p1 = k4::<V>(t, c, s);
        let p2 = k4::<V>(t, c + 9, s);
        let p3 = k4::<V>(t, c + 18, [x[4], x[5], x[6], x[7]]);
        core::array::from_fn(|i| {
            if i < 4 {
                V::xor(p1[i], p3[i])
            } else {
                V::xor(p2[i - 4], p3[i - 4])
            }
        })
    }
}

/// Run an [`Op::Cross`] over `len` bytes of the tile.
///
/// # Safety
/// The CPU has `V`'s features; `c` is an op of `p` (so its passes' tables, shapes and finishes
/// fit `p`'s tables, see `DyadicProgram`); `len` is a multiple of `V::BYTES`; for every register
/// `c` names, `at` gives a region whose columns `0..len` are readable (block inputs, addends) or
/// writable (destinations, finish outputs).
#[inline(always)]
unsafe fn cross<V: Vector>(p: &DyadicProgram, c: &Cross, at: &impl Fn(Reg) -> *mut u8, len: usize) {
    // Filled only as far as used: zeroing 32 blocks' pointers per tile cost more than a small
    // product itself.
    let mut all = [MaybeUninit::<[*const u8; 8]>::uninit(); MAX_CROSS_BLOCKS];
    for (d, regs) in all.iter_mut().zip(&c.blocks) {
        // A plain loop: `[Reg; 8]::map` was an out-of-line call, a tenth of a small call.
        let mut ptrs = [core::ptr::null::<u8>(); 8];
        for (p, &r) in ptrs.iter_mut().zip(regs) {
            *p = at(r);
        }
        d.write(ptrs);
    }
    // SAFETY: the first `c.blocks.len()` entries were written just above (the slice panics
    // beyond `MAX_CROSS_BLOCKS`), and `MaybeUninit<T>` has the layout of `T`.
    let all: &[[*const u8; 8]] = unsafe {
        &*(&all[..c.blocks.len()] as *const [MaybeUninit<[*const u8; 8]>]
            as *const [[*const u8; 8]])
    };
    for pass in &c.passes {
        let mut outs = [[(core::ptr::null_mut::<u8>(), core::ptr::null::<u8>()); 8]; 2];
        for ((d, g), h) in outs.iter_mut().zip(&pass.outs).zip(&pass.held) {
            for ((d, r), h) in d.iter_mut().zip(g).zip(h) {
                *d = (
                    r.map_or(core::ptr::null_mut(), at),
                    h.map_or(core::ptr::null(), |h| at(h) as *const u8),
                );
            }
        }
        // SAFETY: the pass's table is one of `p`'s (our contract).
        let t = unsafe { p.tables.get_unchecked(pass.table) };
        let mut fo = [core::ptr::null_mut::<u8>(); DENSE_REGIONS];
        let how = pass.finish.as_ref().map(|f| f.0);
        let finish = pass.finish.as_ref().map(|(_, table, regs)| {
            for (d, &r) in fo.iter_mut().zip(regs) {
                *d = at(r);
            }
            // SAFETY: the finish's table is one of `p`'s (our contract).
            let ft = unsafe { p.tables.get_unchecked(*table) };
            (ft, &fo[..regs.len()])
        });
        macro_rules! dispatch {
            ($($a:literal $b:literal),*) => {
                match pass.shape {
                    $([$a, $b] => match how {
                        Some(Finish::ByBlock) => cross_pass::<V, $a, $b, BY_BLOCK>(t, all, &outs, len, finish),
                        Some(Finish::Dense) => cross_pass::<V, $a, $b, DENSE>(t, all, &outs, len, finish),
                        None => cross_pass::<V, $a, $b, STORE>(t, all, &outs, len, None),
                    },)*
                    s => unreachable!("cross pass shape {s:?} is not compiled"),
                }
            };
        }
        // SAFETY: the arm taken has the pass's shape and finish, so `t` holds its groups'
        // coefficients for every block of `all`, the finish table and outputs fit it, and every
        // pointer in `all`, `outs` and `fo` came from `at` for `len` bytes; `V`'s features are
        // ours.
        unsafe { cross_shapes!(dispatch) }
    }
}

/// One pass of a cross op: row groups of `R1` and `R2` rows (0 = none) over `len` bytes. For
/// each column vector and each block, the block's 8 inputs are reduced to the operands of the
/// two lower Karatsuba levels for both upper halves (`x_lo + x_hi` for quarters A and B, `x_hi`
/// for quarter A + B), every quarter's products are added to its accumulators ([`quarter_add`]),
/// and at the end each group row is its A or B quarter row plus its A + B quarter row. Odd
/// column vectors walk the blocks backwards (see "Cross" in `dyadic.rs`: the lines the last
/// blocks left in L1 are met first).
///
/// # Safety
/// The CPU has `V`'s features; `len` is a multiple of `V::BYTES`; `t` holds 27 coefficients per
/// group (1 or 2, by `R2 > 0`) for each block, block-major; columns `0..len` of every
/// `blocks[b][c]` and every non-null addend in `outs` are readable, and of every non-null
/// destination in `outs` writable; with a `finish`, its table holds the finish coefficients
/// (`R2 * R2 + 8 * R2` for `BY_BLOCK`, `(R1 + R2) * fo.len()` for `DENSE`) and columns `0..len`
/// of its outputs `fo` (`8 + R2` of them for `BY_BLOCK`) are writable.
#[inline(always)]
unsafe fn cross_pass<V: Vector, const R1: usize, const R2: usize, const FINISH: u8>(
    t: &MulTables,
    blocks: &[[*const u8; 8]],
    outs: &[GroupDests; 2],
    len: usize,
    finish: Option<(&MulTables, &[*mut u8])>,
) {
    const { assert!(R2 <= 4, "a second group has at most 4 rows") };
    let coefs = 27 * (usize::from(R1 > 0) + usize::from(R2 > 0));
    let mut off = 0;
    while off < len {
        // Named accumulator sets touched only through constant indices, so they live in
        // registers.
        // SAFETY: `V`'s features are ours.
        let (mut a1, mut b1, mut c1) = unsafe { ([V::zero(); 6], [V::zero(); 6], [V::zero(); 6]) };
        // SAFETY: as above.
        let mut r2 = unsafe { [V::zero(); 4] };
        // One loop for both directions (a loop each was allocated registers differently, and
        // the backward one spilled): the block index steps by +1 or -1 (wrapping).
        let back = (off / V::BYTES) % 2 == 1;
        let step = if back { usize::MAX } else { 1 };
        let mut i = if back {
            blocks.len().wrapping_sub(1)
        } else {
            0
        };
        for _ in 0..blocks.len() {
            // SAFETY: `i` walks `0..blocks.len()` (forwards, or backwards from the last);
            // block `i`'s coefficients are `ci..ci + coefs`, in `t`, and the offsets used stay
            // below `ci + coefs` (`+ 27` only when `R2 > 0`); `off` is a column of `0..len`,
            // readable in every block region; `V`'s features are ours.
            unsafe {
                let (x, ci) = (blocks.get_unchecked(i), i * coefs);
                // Quarter A + B first, so its operands' registers then take those of A and B:
                // 4 operands live at a time next to the accumulators (21 for 64 + 10).
                let h = high_operands::<V>(x, off);
                let zh = h.map(|v| V::prep(v));
                quarter_add::<V>(&mut c1, &zh, t, ci + 18, R1.min(4));
                second_add::<V>(&mut r2, &zh, t, ci + 27 + 18, R2);
                let zs = low_operands::<V>(h, x, off).map(|v| V::prep(v));
                quarter_add::<V>(&mut a1, &zs, t, ci, R1.min(4));
                quarter_add::<V>(&mut b1, &zs, t, ci + 9, R1.saturating_sub(4));
                second_add::<V>(&mut r2, &zs, t, ci + 27, R2);
            }
            i = i.wrapping_add(step);
        }
        // SAFETY: register arithmetic only; `V`'s features are ours.
        let row1 = |u: usize| unsafe { group_row::<V>(&a1, &b1, &c1, R1, u) };
        // SAFETY: as for `row1`.
        let row2 = |u: usize| unsafe { second_group_row::<V>(&r2, R2, u) };
        // SAFETY: `off` is a column of `0..len`, readable in every non-null addend and
        // writable in every non-null destination of `outs` and in the finish's outputs, whose
        // table fits the finish taken (our contract); `V`'s features are ours.
        unsafe {
            if let (BY_BLOCK, true, Some((ft, fo))) = (FINISH, R1 == 8 && R2 > 0, finish) {
                let y = pass_rows::<V, R1, R2>(row1, row2, outs, off);
                finish_by_block::<V, R2>(&y, ft, fo, off);
            } else if let (DENSE, Some((ft, fo))) = (FINISH, finish) {
                let y = pass_rows::<V, R1, R2>(row1, row2, outs, off);
                finish_rows::<V, R1, R2>(&y, ft, fo, off);
            } else {
                store_rows::<V>(&outs[0], R1, off, row1);
                store_rows::<V>(&outs[1], R2, off, row2);
            }
        }
        off += V::BYTES;
    }
}

/// A block's operands of the two lower Karatsuba levels for quarter A + B: `z` of `d = x_hi`,
/// with `z = (d0 + d1 + d2 + d3, d1 + d3, d2 + d3, d3)` (3 XORs).
///
/// # Safety
/// The CPU has `V`'s features, and `x[4..8]` are each valid for reads of `V::BYTES` bytes at
/// `off`.
#[inline(always)]
unsafe fn high_operands<V: Vector>(x: &[*const u8; 8], off: usize) -> [V; 4] {
    // SAFETY: loads `x[4..8]` at `off` and XORs registers, as our contract allows.
    unsafe {
        let [v4, v5, v6, v7] = core::array::from_fn(|c| V::load(x[4 + c].add(off)));
        let h1 = V::xor(v5, v7);
        [V::xor(V::xor(v4, v6), h1), h1, V::xor(v6, v7), v7]
    }
}

/// And for quarters A and B: `z` of `x_lo + x_hi`, which is `z(x_lo) + h` for `h` =
/// [`high_operands`] (5 XORs, three-way where they can be; 8 with the high ones, not the 10 of
/// forming `x_lo + x_hi` first). Formed after quarter A + B is done, over `h`'s registers.
///
/// # Safety
/// The CPU has `V`'s features, and `x[0..4]` are each valid for reads of `V::BYTES` bytes at
/// `off`.
#[inline(always)]
unsafe fn low_operands<V: Vector>(h: [V; 4], x: &[*const u8; 8], off: usize) -> [V; 4] {
    // SAFETY: loads `x[0..4]` at `off` and XORs registers, as our contract allows.
    unsafe {
        let [v0, v1, v2, v3] = core::array::from_fn(|c| V::load(x[c].add(off)));
        [
            V::xor(V::xor(h[0], V::xor(v0, v1)), V::xor(v2, v3)),
            V::xor(V::xor(h[1], v1), v3),
            V::xor(V::xor(h[2], v2), v3),
            V::xor(h[3], v3),
        ]
    }
}

/// What a cross pass does with its rows: store them, multiply them by a small dense inverse
/// ([`finish_rows`]), or solve through a lost block ([`finish_by_block`]).
const STORE: u8 = 0;
const DENSE: u8 = 1;
const BY_BLOCK: u8 = 2;

/// The solve through a lost block (`CrossParts::finish_by_block` in `dyadic.rs` has the math):
/// the walk has made `u` (rows 0..8) and `z` (the other `R2`), and this stores
/// `d2 = Sc^-1 z` and `d1 = u + M d2`, with `Sc^-1` (`R2 x R2`) and `M` (`8 x R2`) in `t`,
/// row-major; `outs` are the block's 8 outputs, then the other `R2`.
///
/// # Safety
/// The CPU has `V`'s features; `t` holds `R2 * R2 + 8 * R2` coefficients; `outs[..8 + R2]` are
/// each valid for writes of `V::BYTES` bytes at `off`.
#[inline(always)]
unsafe fn finish_by_block<V: Vector, const R2: usize>(
    rows: &[V; 12],
    t: &MulTables,
    outs: &[*mut u8],
    off: usize,
) {
    // SAFETY: coefficients read are `j * R2 + i < R2 * R2` and `R2 * R2 + c * R2 + j <
    // R2 * R2 + 8 * R2`, in `t`; stores go to `outs[8 + j]`, `j < R2`, and `outs[c]`, `c < 8`,
    // at `off`; `V`'s features. All by our contract.
    unsafe {
        // Plain loops, no closures: a closure handed to `array::from_fn` here was compiled on
        // its own, without the kernel's target features, and every XOR became a call.
        let mut z = [V::prep(V::zero()); 4];
        for (y, &r) in z.iter_mut().zip(&rows[8..]).take(R2) {
            *y = V::prep(r);
        }
        let mut d2 = [V::prep(V::zero()); 4];
        for (j, d) in d2.iter_mut().enumerate().take(R2) {
            let mut acc = V::zero();
            for (i, &y) in z.iter().enumerate().take(R2) {
                acc = V::xor(acc, V::mul(y, t, j * R2 + i));
            }
            V::store(outs[8 + j].add(off), acc);
            *d = V::prep(acc);
        }
        let m = R2 * R2;
        for (c, &u) in rows[..8].iter().enumerate() {
            let mut acc = u;
            for (j, &d) in d2.iter().enumerate().take(R2) {
                acc = V::xor(acc, V::mul(d, t, m + c * R2 + j));
            }
            V::store(outs[c].add(off), acc);
        }
    }
}

/// A pass's rows: group 1's `R1`, then group 2's `R2`, each plus its addend.
///
/// # Safety
/// The CPU has `V`'s features, and every non-null addend among the first `R1` rows of
/// `groups[0]` and `R2` of `groups[1]` is valid for reads of `V::BYTES` bytes at `off`.
#[inline(always)]
unsafe fn pass_rows<V: Vector, const R1: usize, const R2: usize>(
    row1: impl Fn(usize) -> V,
    row2: impl Fn(usize) -> V,
    groups: &[GroupDests; 2],
    off: usize,
) -> [V; 12] {
    // SAFETY: `V`'s features are ours.
    let mut y = unsafe { [V::zero(); 12] };
    for (j, y) in y.iter_mut().enumerate().take(R1 + R2) {
        // SAFETY: the addend of row `j < R1` of group 0 or `j - R1 < R2` of group 1 is null or
        // readable at `off` (our contract); `V`'s features are ours.
        *y = unsafe {
            if j < R1 {
                plus_held::<V>(row1(j), groups[0][j].1, off)
            } else {
                plus_held::<V>(row2(j - R1), groups[1][j - R1].1, off)
            }
        };
    }
    y
}

/// A pass's rows ([`pass_rows`]) times the finish matrix `t` (outputs x rows, input-major),
/// stored to `outs`: the solve's inverse applied in registers instead of through scratch.
///
/// # Safety
/// The CPU has `V`'s features; `t` holds `(R1 + R2) * outs.len()` coefficients; every `outs[o]`
/// is valid for writes of `V::BYTES` bytes at `off`.
#[inline(always)]
unsafe fn finish_rows<V: Vector, const R1: usize, const R2: usize>(
    rows: &[V; 12],
    t: &MulTables,
    outs: &[*mut u8],
    off: usize,
) {
    // SAFETY: coefficients read are `j * n + o < (R1 + R2) * n`, in `t`; stores go to every
    // `outs[o]` at `off`; `V`'s features. All by our contract.
    unsafe {
        let mut yp = [V::prep(V::zero()); 12];
        for (p, &y) in yp.iter_mut().zip(rows).take(R1 + R2) {
            *p = V::prep(y);
        }
        let n = outs.len();
        for (o, &dst) in outs.iter().enumerate() {
            let mut acc = V::zero();
            for (j, &y) in yp.iter().enumerate().take(R1 + R2) {
                acc = V::xor(acc, V::mul(y, t, j * n + o));
            }
            V::store(dst.add(off), acc);
        }
    }
}

/// A group's rows: `(destination, addend or null)`, null destinations not wanted.
type GroupDests = [(*mut u8, *const u8); 8];

/// Store a group's `n` rows `row(u)`, each plus its addend when it has one.
///
/// # Safety
/// The CPU has `V`'s features; among the first `n` rows of `outs`, every non-null destination
/// is valid for writes and every non-null addend (of a row with a destination) for reads of
/// `V::BYTES` bytes at `off`.
#[inline(always)]
unsafe fn store_rows<V: Vector>(outs: &GroupDests, n: usize, off: usize, row: impl Fn(usize) -> V) {
    for (u, &(o, held)) in outs.iter().enumerate().take(n) {
        if !o.is_null() {
            // SAFETY: row `u < n` has the non-null destination `o`, writable at `off`, and an
            // addend that is null or readable there (our contract); `V`'s features are ours.
            unsafe { V::store(o.add(off), plus_held::<V>(row(u), held, off)) };
        }
    }
}

/// `y` plus the vector at `held + off` (nothing when `held` is null).
///
/// # Safety
/// The CPU has `V`'s features, and `held` is null or valid for reads of `V::BYTES` bytes at
/// `off`.
#[inline(always)]
unsafe fn plus_held<V: Vector>(y: V, held: *const u8, off: usize) -> V {
    if held.is_null() {
        y
    } else {
        // SAFETY: `held` is not null, so readable at `off` (our contract); `V`'s features.
        unsafe { V::xor(y, V::load(held.add(off))) }
    }
}

/// Row `u` of a first group of `rows` rows: quarter row `u` of A (`u - 4` of B from 4 on) plus
/// the A + B quarter's row `u % 4`.
///
/// # Safety
/// The CPU has `V`'s features.
#[inline(always)]
unsafe fn group_row<V: Vector>(a: &[V; 6], b: &[V; 6], c: &[V; 6], rows: usize, u: usize) -> V {
    let (na, nb) = (rows.min(4), rows.saturating_sub(4));
    // SAFETY: register arithmetic only; `V`'s features are ours.
    unsafe {
        let half = if u < 4 {
            quarter_row::<V>(a, na, u)
        } else {
            quarter_row::<V>(b, nb, u - 4)
        };
        V::xor(half, quarter_row::<V>(c, na, u % 4))
    }
}

/// A quarter's 9 path products (zero where `mask` leaves a path out): path `3 P1 + P0`
/// multiplies `z[2 (P1 == A+B) + (P0 == A+B)]` by coefficient `c + path`.
///
/// # Safety
/// The CPU has `V`'s features, and coefficient `c + path` is in `t` for every `path` set in
/// `mask` (so `c..c + 9` suffices).
#[inline(always)]
unsafe fn quarter_products<V: Vector>(
    z: &[V::Prep; 4],
    t: &MulTables,
    c: usize,
    mask: u16,
) -> [V; 9] {
    core::array::from_fn(|path| {
        // SAFETY: coefficient `c + path` is read only for a `path` set in `mask`, in `t` by our
        // contract; `V`'s features are ours.
        unsafe {
            if mask & (1 << path) != 0 {
                let zi = 2 * usize::from(path / 3 == 2) + usize::from(path % 3 == 2);
                V::mul(z[zi], t, c + path)
            } else {
                V::zero()
            }
        }
    })
}

/// Add one quarter's products for one block to the first `n <= 4` rows of a second group,
/// called once for quarter A (operands of `x_lo + x_hi`, the group's coefficients from `c`) and
/// once for quarter A + B (operands of `x_hi`, from `c + 18`). Two rows (64 + 10's rows 8 and
/// 9, the common case) keep the lowest Karatsuba level unfolded, `w[P0]` = paths `(A, P0)` and
/// `(A+B, P0)` of both quarters, row `v0` = `w[v0] + w[2]`: 3 three-way sums a quarter instead
/// of 4. Otherwise one accumulator a row, two sums a row and quarter.
///
/// # Safety
/// The CPU has `V`'s features, and (when `n > 0`) coefficients `c..c + 9` are in `t`.
#[inline(always)]
unsafe fn second_add<V: Vector>(
    acc: &mut [V; 4],
    z: &[V::Prep; 4],
    t: &MulTables,
    c: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    // SAFETY: `quarter_paths(n)` only sets paths below 9, whose coefficients `c..c + 9` are in
    // `t`; the rest is register arithmetic. All by our contract.
    unsafe {
        let p = quarter_products::<V>(z, t, c, quarter_paths(n));
        if n == 2 {
            for (p0, w) in acc.iter_mut().enumerate().take(3) {
                *w = V::xor(V::xor(*w, p[p0]), p[6 + p0]);
            }
        } else {
            for (v, a) in acc.iter_mut().enumerate().take(n) {
                *a = add_row_paths::<V>(*a, &p, v);
            }
        }
    }
}

/// Row `u` of a second group of `n` rows (see [`second_add`]).
///
/// # Safety
/// The CPU has `V`'s features.
#[inline(always)]
unsafe fn second_group_row<V: Vector>(acc: &[V; 4], n: usize, u: usize) -> V {
    if n == 2 {
        // SAFETY: register arithmetic; `V`'s features are ours.
        unsafe { V::xor(acc[u], acc[2]) }
    } else {
        acc[u]
    }
}

/// Add one block's products to a quarter's accumulators for its first `n` rows (nothing when
/// `n` is 0; `n` is a constant where this is inlined). A whole quarter keeps the middle
/// Karatsuba level unfolded: `q[2 P1 + v0]` = paths `(P1, v0)` and `(P1, A+B)`, one three-way
/// sum a block for both, 6 accumulators and 6 sums instead of 4 and 8; row `v = 2 v1 + v0` is
/// `q[2 v1 + v0] + q[4 + v0]` ([`quarter_row`]). Fewer rows gain nothing that way and keep one
/// accumulator a row (two three-way sums a block, [`add_row_paths`]).
///
/// # Safety
/// The CPU has `V`'s features, and (when `n > 0`) coefficients `c..c + 9` are in `t`.
#[inline(always)]
unsafe fn quarter_add<V: Vector>(
    acc: &mut [V; 6],
    z: &[V::Prep; 4],
    t: &MulTables,
    c: usize,
    n: usize,
) {
    if n == 0 {
        return;
    }
    // SAFETY: `quarter_paths(n)` only sets paths below 9, whose coefficients `c..c + 9` are in
    // `t`; the rest is register arithmetic. All by our contract.
    unsafe {
        let p = quarter_products::<V>(z, t, c, quarter_paths(n));
        if n == 4 {
            for (i, q) in acc.iter_mut().enumerate() {
                let (p1, v0) = (i / 2, i % 2);
                *q = V::xor(V::xor(*q, p[3 * p1 + v0]), p[3 * p1 + 2]);
            }
        } else {
            for (v, a) in acc.iter_mut().enumerate().take(n) {
                *a = add_row_paths::<V>(*a, &p, v);
            }
        }
    }
}

/// Row `v` of a quarter of `n` rows (see [`quarter_add`]).
///
/// # Safety
/// The CPU has `V`'s features.
#[inline(always)]
unsafe fn quarter_row<V: Vector>(acc: &[V; 6], n: usize, v: usize) -> V {
    if n == 4 {
        // SAFETY: register arithmetic; `V`'s features are ours.
        unsafe { V::xor(acc[2 * (v >> 1) + (v & 1)], acc[4 + (v & 1)]) }
    } else {
        acc[v]
    }
}

/// `a` plus the four of a quarter's path products `p` that reach its row `v = 2 v1 + v0`:
/// paths `(P1, P0)` with `P1` in `{v1's half, A+B}` and `P0` in `{v0's half, A+B}`, two
/// three-way sums.
///
/// # Safety
/// The CPU has `V`'s features.
#[inline(always)]
unsafe fn add_row_paths<V: Vector>(a: V, p: &[V; 9], v: usize) -> V {
    let (h1, h0) = (v >> 1, v & 1);
    // SAFETY: register arithmetic; `V`'s features are ours.
    unsafe {
        let x = V::xor(V::xor(a, p[3 * h1 + h0]), p[3 * h1 + 2]);
        V::xor(V::xor(x, p[6 + h0]), p[8])
    }
}
