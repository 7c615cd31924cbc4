//! AVX-512BW kernel: split-nibble multiplication with VPSHUFB on 64-byte vectors.
//!
//! The same method as the AVX2 kernel with twice the width and 32 registers, so up to 16 output
//! accumulators stay in registers. Tables are broadcast from memory with VBROADCASTI32X4.

use super::generic::{self, Vector};
use super::Mode;
use crate::tables::MulTables;
use core::arch::x86_64::*;

#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512i);

impl Vector for Avx512 {
    const BYTES: usize = 64;
    const MAX_GROUP: usize = 16;
    type Prep = (__m512i, __m512i);
    type Coef = (__m512i, __m512i);

    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        Avx512(_mm512_loadu_si512(p as *const __m512i))
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        _mm512_storeu_si512(p as *mut __m512i, v.0)
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx512(_mm512_xor_si512(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx512(_mm512_setzero_si512())
    }
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        let mask = _mm512_set1_epi8(0x0f);
        (
            _mm512_and_si512(x.0, mask),
            _mm512_and_si512(_mm512_srli_epi64(x.0, 4), mask),
        )
    }
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        let tab = t.nibbles_ptr().add(idx) as *const __m128i;
        (
            _mm512_broadcast_i32x4(_mm_loadu_si128(tab)),
            _mm512_broadcast_i32x4(_mm_loadu_si128(tab.add(1))),
        )
    }
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, (lo, hi): Self::Coef) -> Self {
        Avx512(_mm512_xor_si512(
            _mm512_shuffle_epi8(lo, x.0),
            _mm512_shuffle_epi8(hi, x.1),
        ))
    }
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    generic::dot::<Avx512>(t, i, o, out, m)
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    generic::xor::<Avx512>(inputs, output, accumulate)
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    generic::dyadic::<Avx512>(p, ins, outs, len, scratch)
}
