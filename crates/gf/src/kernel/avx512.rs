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

// Every method's contract is the trait's: the CPU supports AVX-512F and AVX-512BW (`Kernel::new`
// checked it), plus the pointer or index requirements stated on each.
impl Vector for Avx512 {
    const BYTES: usize = 64;
    const MAX_GROUP: usize = 16;
    type Prep = (__m512i, __m512i);
    type Coef = (__m512i, __m512i);

    /// # Safety
    /// The CPU supports AVX-512F+BW; `p` is valid for reads of 64 bytes (any alignment).
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX-512F+BW and 64 readable bytes at `p` are our contract (unaligned load).
        Avx512(unsafe { _mm512_loadu_si512(p as *const __m512i) })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW; `p` is valid for writes of 64 bytes (any alignment).
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        // SAFETY: AVX-512F+BW and 64 writable bytes at `p` are our contract (unaligned store).
        unsafe { _mm512_storeu_si512(p as *mut __m512i, v.0) }
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW.
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F+BW is our contract; registers only.
        Avx512(unsafe { _mm512_xor_si512(a.0, b.0) })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW.
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F+BW is our contract; registers only.
        Avx512(unsafe { _mm512_setzero_si512() })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW.
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        // SAFETY: AVX-512F+BW is our contract; registers only.
        unsafe {
            let mask = _mm512_set1_epi8(0x0f);
            (
                _mm512_and_si512(x.0, mask),
                _mm512_and_si512(_mm512_srli_epi64(x.0, 4), mask),
            )
        }
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW; `idx < t.inputs() * t.outputs()`.
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        // SAFETY: AVX-512F+BW is our contract, and so is `idx` < the number of coefficients:
        // entry `idx` of the nibble tables, 32 bytes, is read as two 16-byte unaligned loads.
        unsafe {
            let tab = t.nibbles_ptr().add(idx) as *const __m128i;
            (
                _mm512_broadcast_i32x4(_mm_loadu_si128(tab)),
                _mm512_broadcast_i32x4(_mm_loadu_si128(tab.add(1))),
            )
        }
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW.
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, (lo, hi): Self::Coef) -> Self {
        // SAFETY: AVX-512F+BW is our contract; registers only.
        unsafe {
            Avx512(_mm512_xor_si512(
                _mm512_shuffle_epi8(lo, x.0),
                _mm512_shuffle_epi8(hi, x.1),
            ))
        }
    }
}

/// [`generic::dot`] compiled for AVX-512F+BW.
///
/// # Safety
/// The CPU supports AVX-512F+BW, and the rest of [`generic::dot`]'s contract holds: region
/// counts match `t`, every region has the same length, and for [`Mode::DeltaAdd`] `old` has
/// one such region per input.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    // SAFETY: our contract is `generic::dot`'s for `Avx512`, whose features are enabled here.
    unsafe { generic::dot::<Avx512>(t, i, o, out, m) }
}

/// [`generic::xor`] compiled for AVX-512F+BW.
///
/// # Safety
/// The CPU supports AVX-512F+BW, and every input is `output.len()` bytes long.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    // SAFETY: our contract is `generic::xor`'s for `Avx512`, whose features are enabled here.
    unsafe { generic::xor::<Avx512>(inputs, output, accumulate) }
}

/// [`generic::dyadic`] compiled for AVX-512F+BW.
///
/// # Safety
/// The CPU supports AVX-512F+BW, and the rest of [`generic::dyadic`]'s contract holds: `ins` and
/// `outs` match `p`, `len` is a multiple of 64, every input is readable and every output
/// readable and writable for `len` bytes, `scratch` for `p.scratch_bytes()`, and no output
/// or scratch region overlaps another region.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    // SAFETY: our contract is `generic::dyadic`'s for `Avx512`, whose features are enabled
    // here.
    unsafe { generic::dyadic::<Avx512>(p, ins, outs, len, scratch) }
}
