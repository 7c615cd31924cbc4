//! The I/O planner: a user request plus the scheme's state in, per-stripe disk I/O plans out.
//! It is pure (no I/O, no clock); the engine executes its plans and the simulator counts them, so
//! the two agree by construction.
//!
//! ## Normative counting rules (issue 3, Li & Lee Table II with the errata in `papers/INDEX.md`)
//! - A request is split into per-stripe **pieces**, each planned on its own. `τ` = data chunks the
//!   piece touches, even partially; the piece is full-stripe when `τ = k`.
//! - Unit of count: one chunk + its appendix = one disk I/O.
//! - Bare RAID writes use RMW (`2(τ + m)` I/Os) or RCW (`n`), whichever is smaller, ties to RMW
//!   (Eq. 1); a full-stripe write is `n` writes and no reads.
//! - Each scheme adds its extra I/Os and picks RMW or RCW by the smaller **total**, ties to RMW:
//!
//! | request | pure | hybrid1 | hybrid2 | hybrid-seq |
//! |---|---|---|---|---|
//! | partial-stripe read | 1 | σ | σ | σ |
//! | partial write, RMW | 1 | 0 | 2 | 0 |
//! | partial write, RCW | 2 | τ+σ | 1+σ | σ |
//! | full-stripe read | 0 | σ | 0 | σ |
//! | full-stripe write | 0 | k | 0 | 0 |
//!
//! - With cross-check `all` (not Table II) every cross-check reads every parity's appendix (σ·m
//!   where the table says σ, m where it says 1 for a pure read), and a full-stripe read of pure
//!   and hybrid2 is cross-checked as the other hybrids' are (σ·m): the buddy's copy of a chunk's
//!   CRC can lose the same write as the chunk.
//! - σ = 1 when a chunk whose bytes the piece uses (a user read, an RCW read of an untouched
//!   chunk) is in first-read state.
//! - First-read state: a user read or an RCW read of an untouched chunk sets a chunk's bit; any
//!   write of the chunk (including a buddy's appendix update) clears it; reads of a chunk about to
//!   be overwritten (RMW old data, hybrid1 version reads) leave it alone. Parity has no state.
//! - Bytes of a partially written chunk that the paper's plan does not read are fetched by
//!   **merge** reads (and, when such a chunk is in first-read state and the plan has no
//!   cross-check read, one **merge check** read of parity). Both are counted apart from the
//!   paper's unit, so reports give the paper's count and the real one.
//! - Every planned I/O also has an **extent** ([`Extent`], FORMAT.md §2.9.1): the bytes of the unit
//!   the engine really moves (part of a chunk's checksum blocks, the appendix alone, or the whole
//!   unit). [`PiecePlan::member_io`] is the byte-accurate count beside the paper's.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

mod extent;
mod geometry;
pub mod lanes;
mod planner;
pub mod reshape;

pub use extent::{Extent, Granularity, MemberIo};
pub use geometry::Geometry;
pub use lanes::{LanePlanner, Tally};
pub use planner::{Mode, Op, PiecePlan, Planner, Purpose, UnitIo};
