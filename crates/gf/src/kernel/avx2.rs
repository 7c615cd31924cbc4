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

// Every method's contract is the trait's: the CPU supports AVX2 (`Kernel::new` checked
// it), plus the pointer or index requirements stated on each.
impl Vector for Avx2 {
    const BYTES: usize = 32;
    const MAX_GROUP: usize = 8;
    type Prep = (__m256i, __m256i);
    type Coef = (__m256i, __m256i);

    /// # Safety
    /// The CPU supports AVX2; `p` is valid for reads of 32 bytes (any alignment).
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX2 and 32 readable bytes at `p` are our contract (unaligned load).
        Avx2(unsafe { _mm256_loadu_si256(p as *const __m256i) })
    }
    /// # Safety
    /// The CPU supports AVX2; `p` is valid for writes of 32 bytes (any alignment).
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        // SAFETY: AVX2 and 32 writable bytes at `p` are our contract (unaligned store).
        unsafe { _mm256_storeu_si256(p as *mut __m256i, v.0) }
    }
    /// # Safety
    /// The CPU supports AVX2.
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        // SAFETY: AVX2 is our contract; registers only.
        Avx2(unsafe { _mm256_xor_si256(a.0, b.0) })
    }
    /// # Safety
    /// The CPU supports AVX2.
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX2 is our contract; registers only.
        Avx2(unsafe { _mm256_setzero_si256() })
    }
    /// # Safety
    /// The CPU supports AVX2.
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        // SAFETY: AVX2 is our contract; registers only.
        unsafe {
            let mask = _mm256_set1_epi8(0x0f);
            (
                _mm256_and_si256(x.0, mask),
                _mm256_and_si256(_mm256_srli_epi64(x.0, 4), mask),
            )
        }
    }
    /// # Safety
    /// The CPU supports AVX2; `idx < t.inputs() * t.outputs()`.
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        // SAFETY: AVX2 is our contract, and so is `idx` < the number of coefficients:
        // entry `idx` of the nibble tables, 32 bytes, is read as two 16-byte unaligned loads.
        unsafe {
            let tab = t.nibbles_ptr().add(idx) as *const __m128i;
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(tab)),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(tab.add(1))),
            )
        }
    }
    /// # Safety
    /// The CPU supports AVX2.
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, (lo, hi): Self::Coef) -> Self {
        // SAFETY: AVX2 is our contract; registers only.
        unsafe {
            Avx2(_mm256_xor_si256(
                _mm256_shuffle_epi8(lo, x.0),
                _mm256_shuffle_epi8(hi, x.1),
            ))
        }
    }
}

/// [`generic::dot`] compiled for AVX2.
///
/// # Safety
/// The CPU supports AVX2, and the rest of [`generic::dot`]'s contract holds: region
/// counts match `t`, every region has the same length, and for [`Mode::DeltaAdd`] `old` has
/// one such region per input.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    // SAFETY: our contract is `generic::dot`'s for `Avx2`, whose features are enabled here.
    unsafe { generic::dot::<Avx2>(t, i, o, out, m) }
}

/// [`generic::xor`] compiled for AVX2.
///
/// # Safety
/// The CPU supports AVX2, and every input is `output.len()` bytes long.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    // SAFETY: our contract is `generic::xor`'s for `Avx2`, whose features are enabled here.
    unsafe { generic::xor::<Avx2>(inputs, output, accumulate) }
}

/// [`generic::dyadic`] compiled for AVX2.
///
/// # Safety
/// The CPU supports AVX2, and the rest of [`generic::dyadic`]'s contract holds: `ins` and
/// `outs` match `p`, `len` is a multiple of 32, every input is readable and every output
/// readable and writable for `len` bytes, `scratch` for `p.scratch_bytes()`, and no output
/// or scratch region overlaps another region.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    // SAFETY: our contract is `generic::dyadic`'s for `Avx2`, whose features are enabled
    // here.
    unsafe { generic::dyadic::<Avx2>(p, ins, outs, len, scratch) }
}
