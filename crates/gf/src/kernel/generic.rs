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

use super::Mode;
use crate::dyadic::{
    cross_shapes, quarter_paths, Cross, DyadicProgram, Finish, Op, Reg, DENSE_REGIONS,
    MAX_CROSS_BLOCKS, ZERO_BYTES,
};
use crate::tables::MulTables;
use core::mem::MaybeUninit;

/// One SIMD register's worth of bytes and the operations the loops need.
pub(crate) trait Vector: Copy {
    /// Bytes per vector.
    const BYTES: usize;
    /// Largest number of output accumulators kept in registers at once.
    const MAX_GROUP: usize;
    /// What [`Vector::mul`] needs from an input vector (the vector itself, or its nibbles).
    type Prep: Copy;
    unsafe fn load(p: *const u8) -> Self;
    unsafe fn store(p: *mut u8, v: Self);
    unsafe fn xor(a: Self, b: Self) -> Self;
    unsafe fn zero() -> Self;
    /// A coefficient ready for [`Vector::mul_by`] (its affine matrix or nibble tables, in
    /// registers).
    type Coef: Copy;
    unsafe fn prep(x: Self) -> Self::Prep;
    /// Load coefficient `idx` of the input-major tables of `t`.
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef;
    /// `c * x`.
    unsafe fn mul_by(x: Self::Prep, c: Self::Coef) -> Self;
    /// `coeff[idx] * x` where `idx` indexes the input-major tables of `t`.
    #[inline(always)]
    unsafe fn mul(x: Self::Prep, t: &MulTables, idx: usize) -> Self {
        Self::mul_by(x, Self::coef(t, idx))
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

/// The whole dot product. Preconditions (checked by the safe wrapper in `mod.rs`): region counts
/// match `t`, every region has the same length, `old` is as long as `inputs` for
/// [`Mode::DeltaAdd`] and the CPU has `V`'s features.
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
    // SAFETY: the first k (m) entries were written just above.
    let inp: &[*const u8] =
        &*(&inp[..k] as *const [MaybeUninit<*const u8>] as *const [*const u8]);
    let prev: &[*const u8] =
        &*(&prev[..k] as *const [MaybeUninit<*const u8>] as *const [*const u8]);
    let out: &[*mut u8] = &*(&out[..m] as *const [MaybeUninit<*mut u8>] as *const [*mut u8]);
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
            match mode {
                Mode::Set => group_dispatch::<V, SET>(g, t, inp, prev, out, row0, tile, end),
                Mode::Add => group_dispatch::<V, ADD>(g, t, inp, prev, out, row0, tile, end),
                Mode::DeltaAdd => group_dispatch::<V, DELTA>(g, t, inp, prev, out, row0, tile, end),
            }
            row0 += g;
        }
        tile = end;
    }
    tail(t, inputs, old, outputs, body, mode);
}

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
    sizes!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// `G` outputs over columns `start..end` (multiples of `V::BYTES`).
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
        return single_input::<V, G, MODE>(t, inp[0], prev[0], out, row0, start, end);
    }
    // The inputs go two at a time: both products of an output are added with one three-way XOR
    // (`vpternlogd`), and on GFNI sums are free only up to about half the products (see the
    // `throughput` example), so this takes a sum per product down to half of one.
    let pairs = inp.len() / 2;
    let load = |i: usize, off: usize| -> V {
        let x = V::load(inp.get_unchecked(i).add(off));
        if MODE == DELTA {
            V::xor(x, V::load(prev.get_unchecked(i).add(off)))
        } else {
            x
        }
    };
    let mut off = start;
    // Small groups (RAID-5/6 shapes, few outputs) take two vectors per pass over the inputs:
    // each input's pointer and coefficients are loaded once for 128 bytes, which is what a
    // pass costs beyond its products when there are only one or two of them per input.
    if G <= 4 {
        while off + 2 * V::BYTES <= end {
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
            off += 2 * V::BYTES;
        }
    }
    while off < end {
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
        off += V::BYTES;
    }
}

/// Store a group's sums at column `off` (combined with what the outputs held, for Add modes).
#[inline(always)]
unsafe fn finish<V: Vector, const G: usize, const MODE: u8>(
    mut acc: [V; G],
    out: &[*mut u8],
    off: usize,
) {
    if MODE != SET {
        // Every output is loaded before any is stored (see `single_input`).
        let held: [V; G] = core::array::from_fn(|j| V::load(out.get_unchecked(j).add(off)));
        for (a, h) in acc.iter_mut().zip(held) {
            *a = V::xor(*a, h);
        }
    }
    for (j, a) in acc.iter().enumerate() {
        V::store(out.get_unchecked(j).add(off), *a);
    }
}

/// One input (a single-chunk update, or a region multiply): no inner loop over inputs, and
/// the output pointers and coefficients are hoisted into locals for the whole range.
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
    let outs: [*mut u8; G] = core::array::from_fn(|j| *out.get_unchecked(j));
    // The coefficients go into registers once: loaded inside the loop, they would cost a load
    // per product, and with a load and a store per output already that is what bounds it.
    let coefs: [V::Coef; G] = core::array::from_fn(|j| V::coef(t, row0 + j));
    let mut off = start;
    while off < end {
        let mut x = V::load(inp.add(off));
        if MODE == DELTA {
            x = V::xor(x, V::load(prev.add(off)));
        }
        // Load every output before storing any, as ISA-L's mad kernels do: chunk buffers tend
        // to sit a multiple of 4 KiB apart, and a load issued after a store to an address equal
        // in its low 12 bits waits for that store (4K aliasing), which serialised the outputs.
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
#[inline(always)]
pub(crate) unsafe fn xor<V: Vector>(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    let len = output.len();
    let body = len - len % V::BYTES;
    let o = output.as_mut_ptr();
    let mut off = 0;
    while off < body {
        let mut acc = if accumulate {
            V::load(o.add(off))
        } else {
            V::zero()
        };
        for x in inputs {
            acc = V::xor(acc, V::load(x.as_ptr().add(off)));
        }
        V::store(o.add(off), acc);
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
/// Preconditions (checked by `Kernel::dyadic`): `ins` / `outs` match the program, every region
/// holds `len` bytes, and `scratch` holds `p.scratch_bytes()`.
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
        let at = |r: Reg| -> *mut u8 {
            match r {
                Reg::In(i) => ins.get_unchecked(i as usize).add(tile) as *mut u8,
                Reg::Out(o) => outs.get_unchecked(o as usize).add(tile),
                Reg::Tmp(t) => scratch.add(t as usize * step),
                Reg::Zero => ZEROS.as_ptr() as *mut u8,
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
                    let t = p.tables.get_unchecked(*table);
                    if *add {
                        group_dispatch::<V, ADD>(ro.len(), t, ip, ip, op_, 0, 0, w);
                    } else {
                        group_dispatch::<V, SET>(ro.len(), t, ip, ip, op_, 0, 0, w);
                    }
                }
                Op::Block {
                    table,
                    ins: ri,
                    outs: ro,
                    add,
                } => {
                    let t = p.tables.get_unchecked(*table);
                    if ri.len() == 16 {
                        kblock_region::<V, 16>(t, ri, ro, &at, w, *add);
                    } else {
                        kblock_region::<V, 8>(t, ri, ro, &at, w, *add);
                    }
                }
                Op::TwoLevels {
                    table,
                    ins: ri,
                    outs: ro,
                    add,
                } => {
                    let t = p.tables.get_unchecked(*table);
                    if ri.len() == 64 {
                        two_levels_region::<V, 16>(t, ri, ro, &at, w, *add);
                    } else {
                        two_levels_region::<V, 8>(t, ri, ro, &at, w, *add);
                    }
                }
                Op::Sum(triples) => {
                    for &(a, b, d) in triples {
                        let (a, b, d) = (at(a), at(b), at(d));
                        let mut off = 0;
                        while off < w {
                            let v = V::xor(V::load(a.add(off)), V::load(b.add(off)));
                            V::store(d.add(off), v);
                            off += V::BYTES;
                        }
                    }
                }
                Op::Zero(regs) => {
                    for &r in regs {
                        core::ptr::write_bytes(at(r), 0, w);
                    }
                }
                Op::Cross(c) => cross::<V>(p, c, &at, w),
            }
        }
        tile += w;
    }
}

/// A `B x B` dyadic block (`B` = 8 or 16) over `len` bytes: `outs (add)= D * ins` with `D`'s
/// `3^log2(B)` Karatsuba coefficients in `t` (see `dyadic::karatsuba_coefficients`), every sum
/// in registers.
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
        off += V::BYTES;
    }
}

/// `B x B` Karatsuba block (`B` = 8 or 16) on `x`, coefficients from `c` in `t`.
#[inline(always)]
unsafe fn kblock<V: Vector, const B: usize>(t: &MulTables, c: usize, x: &[V; B]) -> [V; B] {
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

/// An [`Op::TwoLevels`] over `len` bytes: `4 B` inputs and outputs, nine `B x B` blocks a
/// column vector (see `Builder::two_levels` in `dyadic.rs`).
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
    let mut z = [[V::zero(); B]; 4];
    let mut shared = [[V::zero(); B]; 5];
    let mut off = 0;
    while off < len {
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
        off += V::BYTES;
    }
}

/// 81 products for a 16 x 16 block.
#[inline(always)]
unsafe fn k16<V: Vector>(t: &MulTables, c: usize, x: [V; 16]) -> [V; 16] {
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

/// `[[a, b], [b, a]] x` in 3 products: `s = x0 + x1`, `y0 = a s + (a + b) x1`, `y1 = b s + (a + b) x1`.
#[inline(always)]
unsafe fn k2<V: Vector>(t: &MulTables, c: usize, x: [V; 2]) -> [V; 2] {
    let s = V::prep(V::xor(x[0], x[1]));
    let p3 = V::mul(V::prep(x[1]), t, c + 2);
    [V::xor(V::mul(s, t, c), p3), V::xor(V::mul(s, t, c + 1), p3)]
}

/// The same step one size up: 9 products.
#[inline(always)]
unsafe fn k4<V: Vector>(t: &MulTables, c: usize, x: [V; 4]) -> [V; 4] {
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

/// And once more: 27 products for an 8 x 8 block.
#[inline(always)]
unsafe fn k8<V: Vector>(t: &MulTables, c: usize, x: [V; 8]) -> [V; 8] {
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

/// Run an [`Op::Cross`] over `len` bytes of the tile.
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
    // SAFETY: the first `c.blocks.len()` entries were written just above.
    let all: &[[*const u8; 8]] = &*(&all[..c.blocks.len()] as *const [MaybeUninit<[*const u8; 8]>]
        as *const [[*const u8; 8]]);
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
        let t = p.tables.get_unchecked(pass.table);
        let mut fo = [core::ptr::null_mut::<u8>(); DENSE_REGIONS];
        let how = pass.finish.as_ref().map(|f| f.0);
        let finish = pass.finish.as_ref().map(|(_, table, regs)| {
            for (d, &r) in fo.iter_mut().zip(regs) {
                *d = at(r);
            }
            (p.tables.get_unchecked(*table), &fo[..regs.len()])
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
        cross_shapes!(dispatch);
    }
}

/// One pass of a cross op: row groups of `R1` and `R2` rows (0 = none) over `len` bytes. For
/// each column vector and each block, the block's 8 inputs are reduced to the operands of the
/// two lower Karatsuba levels for both upper halves (`x_lo + x_hi` for quarters A and B, `x_hi`
/// for quarter A + B), every quarter's products are added to its accumulators ([`quarter_add`]),
/// and at the end each group row is its A or B quarter row plus its A + B quarter row. Odd
/// column vectors walk the blocks backwards (see "Cross" in `dyadic.rs`: the lines the last
/// blocks left in L1 are met first).
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
        let (mut a1, mut b1, mut c1) = ([V::zero(); 6], [V::zero(); 6], [V::zero(); 6]);
        let mut r2 = [V::zero(); 4];
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
            i = i.wrapping_add(step);
        }
        let row1 = |u: usize| group_row::<V>(&a1, &b1, &c1, R1, u);
        let row2 = |u: usize| second_group_row::<V>(&r2, R2, u);
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
        off += V::BYTES;
    }
}

/// A block's operands of the two lower Karatsuba levels for quarter A + B: `z` of `d = x_hi`,
/// with `z = (d0 + d1 + d2 + d3, d1 + d3, d2 + d3, d3)` (3 XORs).
#[inline(always)]
unsafe fn high_operands<V: Vector>(x: &[*const u8; 8], off: usize) -> [V; 4] {
    let [v4, v5, v6, v7] = core::array::from_fn(|c| V::load(x[4 + c].add(off)));
    let h1 = V::xor(v5, v7);
    [V::xor(V::xor(v4, v6), h1), h1, V::xor(v6, v7), v7]
}

/// And for quarters A and B: `z` of `x_lo + x_hi`, which is `z(x_lo) + h` for `h` =
/// [`high_operands`] (5 XORs, three-way where they can be; 8 with the high ones, not the 10 of
/// forming `x_lo + x_hi` first). Formed after quarter A + B is done, over `h`'s registers.
#[inline(always)]
unsafe fn low_operands<V: Vector>(h: [V; 4], x: &[*const u8; 8], off: usize) -> [V; 4] {
    let [v0, v1, v2, v3] = core::array::from_fn(|c| V::load(x[c].add(off)));
    [
        V::xor(V::xor(h[0], V::xor(v0, v1)), V::xor(v2, v3)),
        V::xor(V::xor(h[1], v1), v3),
        V::xor(V::xor(h[2], v2), v3),
        V::xor(h[3], v3),
    ]
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
#[inline(always)]
unsafe fn finish_by_block<V: Vector, const R2: usize>(
    rows: &[V; 12],
    t: &MulTables,
    outs: &[*mut u8],
    off: usize,
) {
    // Plain loops, no closures: a closure handed to `array::from_fn` here was compiled on its
    // own, without the kernel's target features, and every XOR became a call.
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

/// A pass's rows: group 1's `R1`, then group 2's `R2`, each plus its addend.
#[inline(always)]
unsafe fn pass_rows<V: Vector, const R1: usize, const R2: usize>(
    row1: impl Fn(usize) -> V,
    row2: impl Fn(usize) -> V,
    groups: &[GroupDests; 2],
    off: usize,
) -> [V; 12] {
    let mut y = [V::zero(); 12];
    for (j, y) in y.iter_mut().enumerate().take(R1 + R2) {
        *y = if j < R1 {
            plus_held::<V>(row1(j), groups[0][j].1, off)
        } else {
            plus_held::<V>(row2(j - R1), groups[1][j - R1].1, off)
        };
    }
    y
}

/// A pass's rows ([`pass_rows`]) times the finish matrix `t` (outputs x rows, input-major),
/// stored to `outs`: the solve's inverse applied in registers instead of through scratch.
#[inline(always)]
unsafe fn finish_rows<V: Vector, const R1: usize, const R2: usize>(
    rows: &[V; 12],
    t: &MulTables,
    outs: &[*mut u8],
    off: usize,
) {
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

/// A group's rows: `(destination, addend or null)`, null destinations not wanted.
type GroupDests = [(*mut u8, *const u8); 8];

/// Store a group's `n` rows `row(u)`, each plus its addend when it has one.
#[inline(always)]
unsafe fn store_rows<V: Vector>(outs: &GroupDests, n: usize, off: usize, row: impl Fn(usize) -> V) {
    for (u, &(o, held)) in outs.iter().enumerate().take(n) {
        if !o.is_null() {
            V::store(o.add(off), plus_held::<V>(row(u), held, off));
        }
    }
}

/// `y` plus the vector at `held + off` (nothing when `held` is null).
#[inline(always)]
unsafe fn plus_held<V: Vector>(y: V, held: *const u8, off: usize) -> V {
    if held.is_null() {
        y
    } else {
        V::xor(y, V::load(held.add(off)))
    }
}

/// Row `u` of a first group of `rows` rows: quarter row `u` of A (`u - 4` of B from 4 on) plus
/// the A + B quarter's row `u % 4`.
#[inline(always)]
unsafe fn group_row<V: Vector>(a: &[V; 6], b: &[V; 6], c: &[V; 6], rows: usize, u: usize) -> V {
    let (na, nb) = (rows.min(4), rows.saturating_sub(4));
    let half = if u < 4 {
        quarter_row::<V>(a, na, u)
    } else {
        quarter_row::<V>(b, nb, u - 4)
    };
    V::xor(half, quarter_row::<V>(c, na, u % 4))
}

/// A quarter's 9 path products (zero where `mask` leaves a path out): path `3 P1 + P0`
/// multiplies `z[2 (P1 == A+B) + (P0 == A+B)]` by coefficient `c + path`.
#[inline(always)]
unsafe fn quarter_products<V: Vector>(
    z: &[V::Prep; 4],
    t: &MulTables,
    c: usize,
    mask: u16,
) -> [V; 9] {
    core::array::from_fn(|path| {
        if mask & (1 << path) != 0 {
            let zi = 2 * usize::from(path / 3 == 2) + usize::from(path % 3 == 2);
            V::mul(z[zi], t, c + path)
        } else {
            V::zero()
        }
    })
}

/// Add one quarter's products for one block to the first `n <= 4` rows of a second group,
/// called once for quarter A (operands of `x_lo + x_hi`, the group's coefficients from `c`) and
/// once for quarter A + B (operands of `x_hi`, from `c + 18`). Two rows (64 + 10's rows 8 and
/// 9, the common case) keep the lowest Karatsuba level unfolded, `w[P0]` = paths `(A, P0)` and
/// `(A+B, P0)` of both quarters, row `v0` = `w[v0] + w[2]`: 3 three-way sums a quarter instead
/// of 4. Otherwise one accumulator a row, two sums a row and quarter.
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

/// Row `u` of a second group of `n` rows (see [`second_add`]).
#[inline(always)]
unsafe fn second_group_row<V: Vector>(acc: &[V; 4], n: usize, u: usize) -> V {
    if n == 2 {
        V::xor(acc[u], acc[2])
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

/// Row `v` of a quarter of `n` rows (see [`quarter_add`]).
#[inline(always)]
unsafe fn quarter_row<V: Vector>(acc: &[V; 6], n: usize, v: usize) -> V {
    if n == 4 {
        V::xor(acc[2 * (v >> 1) + (v & 1)], acc[4 + (v & 1)])
    } else {
        acc[v]
    }
}

/// `a` plus the four of a quarter's path products `p` that reach its row `v = 2 v1 + v0`:
/// paths `(P1, P0)` with `P1` in `{v1's half, A+B}` and `P0` in `{v0's half, A+B}`, two
/// three-way sums.
#[inline(always)]
unsafe fn add_row_paths<V: Vector>(a: V, p: &[V; 9], v: usize) -> V {
    let (h1, h0) = (v >> 1, v & 1);
    let x = V::xor(V::xor(a, p[3 * h1 + h0]), p[3 * h1 + 2]);
    V::xor(V::xor(x, p[6 + h0]), p[8])
}
