//! GF(2^8) arithmetic and the region kernels every stripeguard code is built on.
//!
//! # The field
//! `GF(2^8) = GF(2)[x] / (x^8 + x^4 + x^3 + x^2 + 1)`, polynomial 0x11d, the field of ISA-L,
//! Jerasure and Linux RAID-6; 2 is a generator. Addition is XOR. See [`field`].
//!
//! # Region operations
//! Codes apply a small coefficient matrix `M` (`outputs x inputs`) to byte regions:
//! `out[r] = sum_i M[r][i] * in[i]` (encode, reconstruct), `out[r] ^= ...` (accumulate) and
//! `out[r] ^= sum_i M[r][i] * (old[i] ^ new[i])` (read-modify-write). [`MulTables`] holds the
//! coefficients prepared for every kernel; [`Kernel`] runs the operation with the instruction set
//! chosen at run time ([`Kernel::selected`]).
//!
//! # Kernels
//! - `scalar`: 256-byte multiplication-table rows; portable, and the reference.
//! - `avx2`, `avx512`: split-nibble lookups with VPSHUFB (`c*x = lo[x & 15] ^ hi[x >> 4]`).
//! - `gfni`: VGF2P8AFFINEQB, multiplication by `c` as an 8x8 bit matrix ([`field::affine_matrix`]).
//!
//! # Unsafe code
//! Only the SIMD kernels (`kernel::{avx2, avx512, gfni, generic}`) are `unsafe`: intrinsics
//! that need CPU features and raw-pointer loops without bounds checks. Each `unsafe fn` states
//! its contract in a `# Safety` section and each `unsafe` block why it holds; the safe
//! [`Kernel`] methods check shapes and lengths, and [`Kernel::new`] the CPU, before calling in.

#![warn(clippy::unwrap_used)]

pub mod dyadic;
pub mod field;
pub mod kernel;
pub mod matrix;
pub mod tables;

pub use dyadic::DyadicProgram;
pub use kernel::{Kernel, KernelError, KernelKind, Mode, KERNEL_ENV};
pub use matrix::{Matrix, Singular};
pub use tables::MulTables;
