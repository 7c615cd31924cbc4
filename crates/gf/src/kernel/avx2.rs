//! AVX2 kernel: split-nibble multiplication with VPSHUFB on 32-byte vectors.
//!
//! `c * x = lo_c[x & 15] ^ hi_c[x >> 4]`, each table lookup one VPSHUFB over 32 bytes; the two
//! 16-byte tables of every coefficient are broadcast from memory (VBROADCASTI128), so only the
//! accumulators occupy registers. 16 YMM registers leave room for 8 accumulators.

use super::generic::{self, Vector};
use super::Mode;
use crate::tables::MulTables;
use core::arch::x86_64::*;

#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256i);

impl Vector for Avx2 {
    const BYTES: usize = 32;
    const MAX_GROUP: usize = 8;
    type Prep = (__m256i, __m256i);
    type Coef = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        Avx2(_mm256_loadu_si256(p as *const __m256i))
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        _mm256_storeu_si256(p as *mut __m256i, v.0)
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        Avx2(_mm256_xor_si256(a.0, b.0))
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        Avx2(_mm256_setzero_si256())
    }
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        let mask = _mm256_set1_epi8(0x0f);
        (
            _mm256_and_si256(x.0, mask),
            _mm256_and_si256(_mm256_srli_epi64(x.0, 4), mask),
        )
    }
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        let tab = t.nibbles_ptr().add(idx) as *const __m128i;
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(tab)),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(tab.add(1))),
        )
    }
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, (lo, hi): Self::Coef) -> Self {
        Avx2(_mm256_xor_si256(
            _mm256_shuffle_epi8(lo, x.0),
            _mm256_shuffle_epi8(hi, x.1),
        ))
    }
}

#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    generic::dot::<Avx2>(t, i, o, out, m)
}

#[target_feature(enable = "avx2")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    generic::xor::<Avx2>(inputs, output, accumulate)
}

#[target_feature(enable = "avx2")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    generic::dyadic::<Avx2>(p, ins, outs, len, scratch)
}
