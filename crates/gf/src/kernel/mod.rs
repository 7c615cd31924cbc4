//! Region kernels and their run-time selection.
//!
//! A [`Kernel`] is a table of function pointers for one instruction set, chosen once: the best the
//! CPU supports, or the one named by `STRIPEGUARD_KERNEL=scalar|avx2|avx512|gfni` (an unsupported
//! or unknown name is an error, never a silent fallback). Every kernel computes exactly the same
//! bytes as [`KernelKind::Scalar`]; the differential tests in `tests/kernels.rs` hold them to it.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod generic;
#[cfg(target_arch = "x86_64")]
mod gfni;
mod scalar;

use crate::dyadic::DyadicProgram;
use crate::tables::MulTables;
use std::fmt;
use std::sync::OnceLock;

/// How the products are combined with what the output regions held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `out = M * in`
    Set,
    /// `out ^= M * in`
    Add,
    /// `out ^= M * (old ^ in)`: the parity delta of a read-modify-write.
    DeltaAdd,
}

/// The instruction sets with a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Portable table lookups; the reference.
    Scalar,
    /// AVX2 split-nibble VPSHUFB.
    Avx2,
    /// AVX-512BW split-nibble VPSHUFB.
    Avx512,
    /// AVX-512 + GFNI affine transforms.
    Gfni,
}

impl KernelKind {
    /// Every kind, fastest last.
    pub const ALL: [KernelKind; 4] = [
        KernelKind::Scalar,
        KernelKind::Avx2,
        KernelKind::Avx512,
        KernelKind::Gfni,
    ];

    /// The name used by `STRIPEGUARD_KERNEL` and printed by the benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Scalar => "scalar",
            KernelKind::Avx2 => "avx2",
            KernelKind::Avx512 => "avx512",
            KernelKind::Gfni => "gfni",
        }
    }

    /// Parse a name as accepted by `STRIPEGUARD_KERNEL`.
    pub fn parse(name: &str) -> Result<Self, KernelError> {
        KernelKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| KernelError::Unknown {
                name: name.to_string(),
            })
    }

    /// Whether this CPU can run the kernel.
    pub fn supported(self) -> bool {
        match self {
            KernelKind::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx2 => is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx512 => {
                is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "x86_64")]
            KernelKind::Gfni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kinds this CPU supports.
    pub fn available() -> Vec<KernelKind> {
        KernelKind::ALL
            .into_iter()
            .filter(|k| k.supported())
            .collect()
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a kernel could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The name is not one of the kernels.
    #[error("unknown kernel {name:?} in STRIPEGUARD_KERNEL (choose scalar, avx2, avx512 or gfni)")]
    Unknown {
        /// The name given.
        name: String,
    },
    /// The CPU lacks the instructions.
    #[error("kernel {kind} is not supported by this CPU (available: {available})")]
    Unsupported {
        /// The kernel asked for.
        kind: KernelKind,
        /// What this CPU can run, comma-separated.
        available: String,
    },
}

/// A kernel's dot product; `unsafe` to call: the CPU must support the kernel's instructions and
/// the regions must fit the tables (see `generic::dot`).
type DotFn = unsafe fn(&MulTables, &[&[u8]], &[&[u8]], &mut [&mut [u8]], Mode);
/// A kernel's XOR; `unsafe` to call: the CPU must support the kernel's instructions and every
/// input must be as long as the output.
type XorFn = unsafe fn(&[&[u8]], &mut [u8], bool);
/// A kernel's dyadic-program runner; `unsafe` to call (see `generic::dyadic`).
type DyadicFn = unsafe fn(&DyadicProgram, &[*const u8], &[*mut u8], usize, *mut u8);

/// One instruction set's region operations. Obtain with [`Kernel::new`] or [`Kernel::selected`].
#[derive(Clone, Copy)]
pub struct Kernel {
    kind: KernelKind,
    dot: DotFn,
    xor: XorFn,
    /// Runs dyadic programs; the scalar kernel has none (its callers use [`Kernel::dot`]).
    dyadic: Option<DyadicFn>,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.kind)
    }
}

thread_local! {
    /// Scratch regions of dyadic programs, grown to the largest program run on this thread.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Zero-padded copies of the last `len % 64` bytes of every region of a dyadic program,
    /// kept so that an odd length does not cost a heap allocation a call.
    static PAD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Name of the environment variable that forces a kernel.
pub const KERNEL_ENV: &str = "STRIPEGUARD_KERNEL";

impl Kernel {
    /// The kernel for `kind`, if this CPU supports it.
    pub fn new(kind: KernelKind) -> Result<Kernel, KernelError> {
        if !kind.supported() {
            let available = KernelKind::available()
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(KernelError::Unsupported { kind, available });
        }
        // SAFETY of the pointers below: each is only reachable through a Kernel, and a Kernel of
        // a SIMD kind is only built after the check above.
        let (dot, xor, dyadic): (DotFn, XorFn, Option<DyadicFn>) = match kind {
            KernelKind::Scalar => (scalar_dot, scalar_xor, None),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx2 => (avx2::dot, avx2::xor, Some(avx2::dyadic)),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx512 => (avx512::dot, avx512::xor, Some(avx512::dyadic)),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Gfni => (gfni::dot, gfni::xor, Some(gfni::dyadic)),
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("checked by supported()"),
        };
        Ok(Kernel {
            kind,
            dot,
            xor,
            dyadic,
        })
    }

    /// The best kernel this CPU supports.
    pub fn best() -> Kernel {
        let kind = *KernelKind::available()
            .last()
            .expect("scalar is always available");
        Kernel::new(kind).expect("available kernels are supported")
    }

    /// The process-wide kernel: `STRIPEGUARD_KERNEL` if set, else the best. Decided once.
    pub fn selected() -> Result<&'static Kernel, KernelError> {
        static SELECTED: OnceLock<Result<Kernel, KernelError>> = OnceLock::new();
        SELECTED
            .get_or_init(|| match std::env::var(KERNEL_ENV) {
                Ok(name) if !name.is_empty() => Kernel::new(KernelKind::parse(&name)?),
                _ => Ok(Kernel::best()),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Which instruction set this is.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// `outputs (mode)= M * inputs` for the matrix prepared in `t`.
    ///
    /// Panics when the region counts differ from the matrix shape or the regions differ in length
    /// (caller bugs). For [`Mode::DeltaAdd`], `old` holds the previous contents of each input.
    pub fn dot(
        &self,
        t: &MulTables,
        inputs: &[&[u8]],
        old: &[&[u8]],
        outputs: &mut [&mut [u8]],
        mode: Mode,
    ) {
        let len = region_len(inputs, outputs, (t.inputs(), t.outputs()), "matrix");
        if mode == Mode::DeltaAdd {
            assert_eq!(
                old.len(),
                inputs.len(),
                "delta needs the old contents of every input"
            );
            assert!(
                old.iter().all(|i| i.len() == len),
                "old regions differ in length"
            );
        }
        // SAFETY: shapes checked above; the CPU features were checked when `self` was built.
        unsafe { (self.dot)(t, inputs, old, outputs, mode) }
    }

    /// Whether [`Kernel::dyadic`] runs here (every SIMD kernel; not the scalar one).
    pub fn runs_dyadic(&self) -> bool {
        self.dyadic.is_some()
    }

    /// Run `p` (built by [`DyadicProgram::new`] for these input and output counts) over regions
    /// of one length. Returns `false`, touching nothing, on a kernel without a dyadic runner
    /// (see [`Kernel::runs_dyadic`]); the caller then uses [`Kernel::dot`] with the same matrix.
    /// Panics on counts or lengths that do not match (caller bugs).
    pub fn dyadic(&self, p: &DyadicProgram, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> bool {
        let Some(run) = self.dyadic else {
            return false;
        };
        let len = region_len(inputs, outputs, (p.inputs(), p.outputs()), "program");
        let ins: smallvec::SmallVec<[*const u8; 64]> = inputs.iter().map(|i| i.as_ptr()).collect();
        let outs: smallvec::SmallVec<[*mut u8; 64]> =
            outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let body = len - len % 64;
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let need = p.scratch_bytes().max(1);
            if scratch.len() < need {
                scratch.resize(need, 0);
            }
            // SAFETY: counts and lengths checked above (`body` is a multiple of 64, so of every
            // kernel's vector width); the scratch holds `p.scratch_bytes()`; outputs come from
            // `&mut` borrows and scratch is ours, so neither overlaps anything; the CPU
            // features were checked when `self` was built.
            unsafe { run(p, &ins, &outs, body, scratch.as_mut_ptr()) };
            if body < len {
                // The last `len % 64` bytes: the same program over zero-padded copies.
                let tail = len - body;
                let mut pad = PAD.with_borrow_mut(std::mem::take);
                pad.clear();
                pad.resize(64 * (inputs.len() + outputs.len()), 0);
                let (pin, pout) = pad.split_at_mut(64 * inputs.len());
                for (i, x) in inputs.iter().enumerate() {
                    pin[64 * i..64 * i + tail].copy_from_slice(&x[body..]);
                }
                for (r, o) in outputs.iter().enumerate() {
                    pout[64 * r..64 * r + tail].copy_from_slice(&o[body..]);
                }
                let ins: smallvec::SmallVec<[*const u8; 64]> =
                    (0..inputs.len()).map(|i| pin[64 * i..].as_ptr()).collect();
                let outs: smallvec::SmallVec<[*mut u8; 64]> = (0..outputs.len())
                    .map(|r| pout[64 * r..].as_mut_ptr())
                    .collect();
                // SAFETY: as above, over 64-byte padded regions: the inputs' copies in `pin`,
                // the outputs' in `pout`, disjoint halves of `pad`.
                unsafe { run(p, &ins, &outs, 64, scratch.as_mut_ptr()) };
                for (r, o) in outputs.iter_mut().enumerate() {
                    o[body..].copy_from_slice(&pout[64 * r..64 * r + tail]);
                }
                PAD.set(pad);
            }
        });
        true
    }

    /// `output = xor of inputs` (or `^=` when `accumulate`).
    pub fn xor(&self, inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
        assert!(
            inputs.iter().all(|i| i.len() == output.len()),
            "regions differ in length"
        );
        // SAFETY: lengths checked; features checked when `self` was built.
        unsafe { (self.xor)(inputs, output, accumulate) }
    }

    /// `dst = c * src`.
    pub fn mul(&self, c: u8, src: &[u8], dst: &mut [u8]) {
        self.dot(&MulTables::scalar(c), &[src], &[], &mut [dst], Mode::Set)
    }

    /// `dst ^= c * src`.
    pub fn mul_add(&self, c: u8, src: &[u8], dst: &mut [u8]) {
        self.dot(&MulTables::scalar(c), &[src], &[], &mut [dst], Mode::Add)
    }
}

/// The common length of `inputs` and `outputs`, after checking their counts against `counts`
/// (what `of`, a matrix or a program, takes). Panics on a mismatch: a caller bug.
fn region_len(inputs: &[&[u8]], outputs: &[&mut [u8]], counts: (usize, usize), of: &str) -> usize {
    assert_eq!(inputs.len(), counts.0, "input count differs from the {of}");
    assert_eq!(
        outputs.len(),
        counts.1,
        "output count differs from the {of}"
    );
    let len = outputs.first().map_or(0, |o| o.len());
    assert!(
        outputs.iter().all(|o| o.len() == len),
        "output regions differ in length"
    );
    assert!(
        inputs.iter().all(|i| i.len() == len),
        "input regions differ in length"
    );
    len
}

/// The scalar kernel as a [`DotFn`].
///
/// # Safety
/// None beyond the signature: the scalar kernel is safe code (it panics on mismatched shapes)
/// and is `unsafe` only to share [`DotFn`] with the SIMD kernels.
unsafe fn scalar_dot(t: &MulTables, i: &[&[u8]], o: &[&[u8]], out: &mut [&mut [u8]], m: Mode) {
    scalar::dot(t, i, o, out, m)
}

/// The scalar kernel as an [`XorFn`].
///
/// # Safety
/// None beyond the signature: safe code, `unsafe` only to share [`XorFn`] with the SIMD
/// kernels.
unsafe fn scalar_xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    scalar::xor(inputs, output, accumulate)
}
