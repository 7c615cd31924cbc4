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

// Every method's contract is the trait's: the CPU supports AVX-512F, AVX-512BW and GFNI
// (`Kernel::new` checked it), plus the pointer or index requirements stated on each.
impl Vector for Gfni {
    const BYTES: usize = 64;
    const MAX_GROUP: usize = 16;
    type Prep = __m512i;
    type Coef = __m512i;

    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI; `p` is valid for reads of 64 bytes (any alignment).
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: AVX-512F+BW+GFNI and 64 readable bytes at `p` are our contract (unaligned load).
        Gfni(unsafe { _mm512_loadu_si512(p as *const __m512i) })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI; `p` is valid for writes of 64 bytes (any alignment).
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: Self) {
        // SAFETY: AVX-512F+BW+GFNI and 64 writable bytes at `p` are our contract (unaligned store).
        unsafe { _mm512_storeu_si512(p as *mut __m512i, v.0) }
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI.
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F+BW+GFNI is our contract; registers only.
        Gfni(unsafe { _mm512_xor_si512(a.0, b.0) })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI.
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: AVX-512F+BW+GFNI is our contract; registers only.
        Gfni(unsafe { _mm512_setzero_si512() })
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI.
    #[inline(always)]
    unsafe fn prep(x: Self) -> Self::Prep {
        x.0
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI; `idx < t.inputs() * t.outputs()`.
    #[inline(always)]
    unsafe fn coef(t: &MulTables, idx: usize) -> Self::Coef {
        // SAFETY: AVX-512F+BW+GFNI is our contract, and so is `idx` < the number of
        // coefficients: entry `idx` of the affine matrices (a `u64`) is read.
        unsafe { _mm512_set1_epi64(*t.affine_ptr().add(idx) as i64) }
    }
    /// # Safety
    /// The CPU supports AVX-512F+BW+GFNI.
    #[inline(always)]
    unsafe fn mul_by(x: Self::Prep, m: Self::Coef) -> Self {
        // SAFETY: AVX-512F+BW+GFNI is our contract; registers only.
        Gfni(unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(x, m) })
    }
}

/// [`generic::dot`] compiled for AVX-512F+BW+GFNI.
///
/// # Safety
/// The CPU supports AVX-512F+BW+GFNI, and the rest of [`generic::dot`]'s contract holds: region
/// counts match `t`, every region has the same length, and for [`Mode::DeltaAdd`] `old` has
/// one such region per input.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    // SAFETY: our contract is `generic::dot`'s for `Gfni`, whose features are enabled here.
    unsafe { generic::dot::<Gfni>(t, i, o, out, m) }
}

/// [`generic::xor`] compiled for AVX-512F+BW+GFNI.
///
/// # Safety
/// The CPU supports AVX-512F+BW+GFNI, and every input is `output.len()` bytes long.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    // SAFETY: our contract is `generic::xor`'s for `Gfni`, whose features are enabled here.
    unsafe { generic::xor::<Gfni>(inputs, output, accumulate) }
}

/// [`generic::dyadic`] compiled for AVX-512F+BW+GFNI.
///
/// # Safety
/// The CPU supports AVX-512F+BW+GFNI, and the rest of [`generic::dyadic`]'s contract holds: `ins`
/// and `outs` match `p`, `len` is a multiple of 64, every input is readable and every output
/// readable and writable for `len` bytes, `scratch` for `p.scratch_bytes()`, and no output or
/// scratch region overlaps another region.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dyadic(
    p: &crate::dyadic::DyadicProgram,
    ins: &[*const u8],
    outs: &[*mut u8],
    len: usize,
    scratch: *mut u8,
) {
    // SAFETY: our contract is `generic::dyadic`'s for `Gfni`, whose features are enabled
    // here.
    unsafe { generic::dyadic::<Gfni>(p, ins, outs, len, scratch) }
}
