//! The trace-driven simulator (Li & Lee section VII-B) and the scheme chooser (section VI).
//!
//! - [`trace`]: streaming readers for MSR Cambridge, SPC/UMass, DiskSim/MQSim, blkparse and fio
//!   iolog traces (constant memory, errors with line numbers).
//! - [`synth`]: seeded synthetic workloads from the paper's Table III profiles.
//! - [`replay`]: feeds requests through the **same planner the engine runs**
//!   ([`stripeguard_plan::Planner`]'s rules; all schemes in one pass through
//!   [`stripeguard_plan::LanePlanner`]) and counts disk I/Os, paper and real.
//! - [`choose`]: the quantitative rule (Eq. 7–9 with the odd-n correction).
//!
//! The one `unsafe` block is the x86-64 cache prefetch in [`Simulator::replay_batch`] (no stable
//! safe API exists; see its SAFETY comment).

#![warn(clippy::unwrap_used)]

pub mod analysis;
pub mod choose;
pub mod cksum;
pub mod codes;
pub mod replay;
pub mod run;
pub mod synth;
pub mod trace;

pub use choose::{choose_by_rule, switch_point, RuleChoice};
pub use cksum::{CkCounts, CkSim};
pub use codes::{CodeCounts, CodeSim};
pub use replay::{Fit, SchemeCounts, SimReport, Simulator};
pub use run::{run, ArrayShape, FitMode, Run, RunError, RunInfo, Source};
pub use synth::{Profile, SynthConfig, Synthetic, PROFILES};
pub use trace::{Request, TraceError, TraceFormat, TraceOptions, TraceReader};
