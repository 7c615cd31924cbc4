//! The fault campaign: seeded random reads and writes against a model of the expected bytes,
//! with faults injected within the paper's assumptions (at most one silently wrong unit per
//! stripe, plus the failed members), a check after every operation, and a scrub at the end.
//!
//! What it asserts is returned in [`CampaignReport`], and [`CampaignCase::passed`] says what
//! must hold: every read equal to the model, no damage left on any member after the scrub, and
//! no event naming a unit that no fault touched.

use crate::sim::{simulate, FaultPlan, Plan, SimConfig};
use serde::Serialize;
use stripeguard_disk::FaultKind;
use stripeguard_engine::{create_accepts, EngineError};
use stripeguard_integrity::{CodeId, CrossCheck, MirrorKind, Scheme};

/// What to run.
#[derive(Clone, Debug)]
pub struct CampaignConfig {
    /// `k`.
    pub data_chunks: usize,
    /// `m`.
    pub parity_chunks: usize,
    /// Code.
    pub code: CodeId,
    /// Scheme.
    pub scheme: Scheme,
    /// Chunk size.
    pub chunk_bytes: u32,
    /// Stripes.
    pub stripes: u64,
    /// Operations.
    pub ops: u64,
    /// Seed.
    pub seed: u64,
    /// Fault kinds to draw from (member failure is applied at the start, see `failed_members`).
    pub kinds: Vec<FaultKind>,
    /// Members failed before the run (at most `m - 1` so silent faults stay repairable).
    pub failed_members: usize,
    /// Probability of arming a fault before each operation.
    pub fault_rate: f64,
    /// The array's cross-check setting.
    pub cross_check: CrossCheck,
    /// Two lost writes in one stripe: every armed lost write of a data unit also loses the next
    /// write of its stripe's P (m >= 2, so Q still holds the newer entry). Outside the paper's
    /// one-fault-per-stripe model; caught on the read path with cross-check `all`.
    pub lost_write_pairs: bool,
}

/// The fault pattern of a campaign case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// One fault of the kind at a time per stripe (the paper's model).
    Single,
    /// A data unit and P of one stripe both lose a write (cross-check `all`, RAID-6 and up).
    LostWriteWithP,
}

/// One case of the default campaign.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CampaignCase {
    /// `k`.
    pub data_chunks: usize,
    /// `m`.
    pub parity_chunks: usize,
    /// Members failed from the start.
    pub failed_members: usize,
    /// The fault kind.
    pub kind: FaultKind,
    /// The scheme.
    pub scheme: Scheme,
    /// The pattern.
    pub pattern: Pattern,
}

/// Every case for `shapes` × `schemes` that `create` accepts: each fault kind, healthy and with
/// `m - 1` members failed, plus the two-lost-writes-with-Q pattern on shapes with `m >= 2`.
pub fn campaign_cases(shapes: &[(usize, usize)], schemes: &[Scheme]) -> Vec<CampaignCase> {
    let mut cases = Vec::new();
    for &(k, m) in shapes {
        let accepted = |s: Scheme| create_accepts(k, s);
        let failures = if m > 1 { vec![0, m - 1] } else { vec![0] };
        for failed in failures {
            for kind in FaultKind::ALL {
                for &scheme in schemes.iter().filter(|s| accepted(**s)) {
                    cases.push(CampaignCase {
                        data_chunks: k,
                        parity_chunks: m,
                        failed_members: failed,
                        kind,
                        scheme,
                        pattern: Pattern::Single,
                    });
                }
            }
        }
        if m >= 2 {
            for &scheme in schemes.iter().filter(|s| accepted(**s)) {
                cases.push(CampaignCase {
                    data_chunks: k,
                    parity_chunks: m,
                    failed_members: 0,
                    kind: FaultKind::LostWrite,
                    scheme,
                    pattern: Pattern::LostWriteWithP,
                });
            }
        }
    }
    cases
}

impl CampaignCase {
    /// The run of this case.
    pub fn config(&self, ops: u64, stripes: u64, seed: u64) -> CampaignConfig {
        let pairs = self.pattern == Pattern::LostWriteWithP;
        CampaignConfig {
            data_chunks: self.data_chunks,
            parity_chunks: self.parity_chunks,
            code: CodeId::for_parity(self.parity_chunks),
            scheme: self.scheme,
            chunk_bytes: 4096,
            stripes,
            ops,
            seed,
            kinds: vec![self.kind],
            failed_members: self.failed_members,
            fault_rate: 0.2,
            cross_check: if pairs {
                CrossCheck::All
            } else {
                CrossCheck::One
            },
            lost_write_pairs: pairs,
        }
    }

    /// The fault column of a report: the kind, or the pattern's name.
    pub fn fault_name(&self) -> &'static str {
        match self.pattern {
            Pattern::Single => self.kind.name(),
            Pattern::LostWriteWithP => "lost-write-with-p",
        }
    }

    /// What must hold. `none` is the negative control and passes whatever it returns. Every
    /// other scheme returns no wrong byte and accuses no healthy unit; within the paper's model
    /// it also repairs everything. Two lost writes with checksum copies can tie (two copies
    /// each way): refusing the stripe is then right, returning either version is not.
    pub fn passed(&self, rep: &CampaignReport) -> bool {
        if self.scheme == Scheme::None {
            return true;
        }
        let sound = rep.wrong_bytes == 0 && rep.false_accusations == 0;
        let may_refuse = self.pattern == Pattern::LostWriteWithP
            && self.scheme.mirror() == Some(MirrorKind::Checksum);
        sound && (may_refuse || (rep.unrecoverable == 0 && rep.damaged_after_scrub == 0))
    }
}

pub use crate::sim::CampaignReport;

/// Run one campaign: the seeded simulation's loop ([`crate::sim`]) with the fault campaign's
/// plan ([`crate::sim::Plan::Faults`]), one client, no power cut. Until issue 34 this was a
/// loop of its own; its per-seed totals changed with the move (the simulator's array has its
/// own seeded environment, and the final read goes block by block), its rules did not.
pub fn run_campaign(cfg: &CampaignConfig) -> Result<CampaignReport, EngineError> {
    let plan = Plan::Faults(FaultPlan {
        fault_rate: cfg.fault_rate,
        failed_members: cfg.failed_members,
        lost_write_pairs: cfg.lost_write_pairs,
    });
    let sim = SimConfig {
        code: cfg.code,
        cross_check: cfg.cross_check,
        ..SimConfig::campaign(
            cfg.seed,
            (cfg.data_chunks, cfg.parity_chunks),
            cfg.scheme,
            cfg.chunk_bytes,
            cfg.stripes,
            cfg.ops,
            cfg.kinds.clone(),
            plan,
        )
    };
    let rep = simulate(&sim);
    if let Some(e) = rep.failure() {
        return Err(e);
    }
    // The loop counts the campaign's own totals; the request totals are the simulation's.
    Ok(CampaignReport {
        ops: rep.ops,
        reads: rep.reads,
        writes: rep.writes,
        repaired: rep.repaired,
        ..rep.campaign
    })
}
