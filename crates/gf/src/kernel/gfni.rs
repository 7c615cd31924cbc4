//! GFNI kernel: VGF2P8AFFINEQB on 64-byte vectors.
//!
//! Multiplication by a constant is linear over GF(2), so it is an 8x8 bit matrix applied to every
//! byte: one instruction per 64 bytes per coefficient, with the matrix broadcast from memory. The
//! instruction's own field (GF2P8MULB) uses the AES polynomial 0x11b, not ours, so only the affine
//! form is usable. Up to 16 accumulators are kept in the 32 ZMM registers.

use super::generic::{self, Vector};
use super::Mode;
use crate::tables::MulTables;
use core::arch::x86_64::*;

#[derive(Clone, Copy)]
pub(crate) struct Gfni(__m512i);

impl Vector for Gfni {
    const BYTES: usize = 64;
    const MAX_GROUP: usize = 16;
    type Prep = __m512i;
    type Coef = __m512i;

    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        Gfni(_mm512_loadu_si512(p as *const __m512i))
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        _mm512_storeu_si512(p as *mut __m512i, v.0)
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Gfni(_mm512_xor_si512(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Gfni(_mm512_setzero_si512())
    }
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        x.0
    }
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        _mm512_set1_epi64(*t.affine_ptr().add(idx) as i64)
    }
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, m: Self::Coef) -> Self {
        Gfni(_mm512_gf2p8affine_epi64_epi8::<0>(x, m))
    }
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    generic::dot::<Gfni>(t, i, o, out, m)
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    generic::xor::<Gfni>(inputs, output, accumulate)
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    generic::dyadic::<Gfni>(p, ins, outs, len, scratch)
}
