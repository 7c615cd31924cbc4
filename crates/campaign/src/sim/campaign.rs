//! The fault campaign's plan ([`Plan::Faults`]): the simulator's loop run as `stripeguard
//! campaign` runs it — one client, one epoch of reads and writes (half each) on an array filled
//! with random data, a fault of the case's kinds armed before an operation with the case's
//! probability, members failed from the start (and one more at a third of the run for the
//! member-failure kind), every stripe a fired fault touched scrubbed 50 operations later, and
//! at the end a read of everything and a scrub of every stripe. What it counts is
//! [`CampaignReport`]; [`crate::fault::run_campaign`] turns it into the campaign's report.
//!
//! The rules of fault.rs's loop, kept: a fault goes only where every stripe it may damage is
//! clean on every member, has nothing armed, and was not hit in the last 50 operations (a stale
//! parity that a read-modify-write of another chunk carried forward is wrong while equal to what
//! was written); silent faults only while at most `m - 1` members are out.

use super::{Driver, Op, Rig, SimConfig};
use rand::Rng;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use stripeguard_disk::{Fault, FaultKind, FaultyDisk};
use stripeguard_engine::{usize_of, EngineError, EventAction, EventRole};
use stripeguard_integrity::Scheme;

/// What the fault campaign's plan sets.
#[derive(Clone, Debug, Serialize)]
pub struct FaultPlan {
    /// Probability of arming a fault before each operation.
    pub fault_rate: f64,
    /// Members failed before the run (at most `m - 1`).
    pub failed_members: usize,
    /// Every armed lost write of a data unit also loses the next write of its stripe's P.
    pub lost_write_pairs: bool,
}

/// How the loop draws its epochs and operations.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Plan {
    /// Everything at once ([`SimConfig::from_seed`]).
    Mixed,
    /// `stripeguard campaign`.
    Faults(FaultPlan),
    /// `stripeguard campaign --crash`.
    Crashes(super::crashes::CrashPlan),
}

/// Stripes a fired fault touched stay out of reach of new faults this many operations, then
/// are scrubbed (user I/O gets the first chance to find the damage).
const TAINT_OPS: u64 = 50;

/// What the fault campaign counted (`stripeguard campaign`'s columns). The loop fills the
/// campaign's own totals in every plan (the mixed plan's are informational); `ops`, `reads`,
/// `writes` and `repaired` are the simulation's ([`super::SimReport`]), copied in by
/// [`crate::fault::run_campaign`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CampaignReport {
    /// Operations run.
    pub ops: u64,
    /// User reads checked against the model.
    pub reads: u64,
    /// User writes.
    pub writes: u64,
    /// Faults that fired (or were applied), by kind.
    pub injected: BTreeMap<String, u64>,
    /// Failed checks.
    pub detected: u64,
    /// Units named wrong.
    pub located: u64,
    /// Units rebuilt and rewritten.
    pub repaired: u64,
    /// Reads answered by re-reading (misdirected reads).
    pub reread: u64,
    /// Requests refused as unrecoverable.
    pub unrecoverable: u64,
    /// Reads that returned bytes different from the model.
    pub wrong_reads: u64,
    /// Bytes returned different from the model.
    pub wrong_bytes: u64,
    /// Units still damaged on some member after the final scrub.
    pub damaged_after_scrub: u64,
    /// Events naming a unit no fault touched.
    pub false_accusations: u64,
}

/// The campaign plan's state between operations.
#[derive(Default)]
pub(super) struct CampaignState {
    /// Operations begun.
    op: u64,
    /// Stripes a fired fault touched, and the operation it was seen at.
    hit: BTreeMap<u64, u64>,
    /// How much of each member's fault log was seen.
    seen_log: Vec<usize>,
    /// (member, stripe) pairs any fault touched: events may name only these.
    pub(super) touched: BTreeSet<(usize, u64)>,
    /// Members failed so far.
    pub(super) failed: Vec<usize>,
    spare_failures: usize,
    fail_at: Option<u64>,
    /// Members failed during the run (counted as injected; those failed from the start are
    /// the case's shape, not a fault).
    failed_mid_run: u64,
}

fn dirty_stripes(members: &[&FaultyDisk]) -> Result<BTreeSet<u64>, EngineError> {
    let mut dirty = BTreeSet::new();
    for f in members {
        if f.has_failed() {
            continue;
        }
        dirty.extend(f.corrupted_units()?);
        for (u, fault) in f.armed() {
            dirty.insert(u);
            if let Fault::MisdirectedWrite { victim, .. } = fault {
                dirty.insert(victim);
                dirty.insert(victim + 1);
            }
        }
    }
    Ok(dirty)
}

impl CampaignState {
    /// The state for `plan` on `rig`, with the members failed from the start failed.
    pub(super) fn start(
        cfg: &SimConfig,
        plan: &FaultPlan,
        rig: &Rig,
    ) -> Result<CampaignState, EngineError> {
        let m = cfg.parity_chunks;
        let failed: Vec<usize> = (0..plan.failed_members.min(m.saturating_sub(1))).collect();
        for &f in &failed {
            rig.members[f].faulty.arm(0, Fault::MemberFailure)?;
        }
        Ok(CampaignState {
            op: 0,
            hit: BTreeMap::new(),
            seen_log: vec![0; rig.members.len()],
            touched: BTreeSet::new(),
            spare_failures: m - failed.len(),
            fail_at: cfg
                .faults
                .contains(&FaultKind::MemberFailure)
                .then_some(cfg.ops / 3),
            failed,
            failed_mid_run: 0,
        })
    }
}

impl Driver {
    /// Before a campaign operation: note the faults that fired, hand back the stripes whose
    /// scrub is due, fail a member at a third of the run, maybe arm a fault.
    pub(super) fn campaign_before(
        &mut self,
        cfg: &SimConfig,
        plan: &FaultPlan,
        rig: &Rig,
    ) -> Result<Vec<u64>, EngineError> {
        let Some(st) = self.campaign.as_mut() else {
            return Ok(Vec::new());
        };
        let op = st.op;
        st.op += 1;
        for (d, m) in rig.members.iter().enumerate() {
            let log = m.faulty.log();
            for inj in &log[st.seen_log[d]..] {
                let mut hit = vec![inj.unit];
                if let Fault::MisdirectedWrite { victim, .. } = inj.fault {
                    hit.extend([victim, victim + 1]);
                }
                for u in hit {
                    st.hit.entry(u).or_insert(op);
                }
            }
            st.seen_log[d] = log.len();
        }
        let ripe: Vec<u64> = st
            .hit
            .iter()
            .filter(|(_, &at)| op >= at + TAINT_OPS)
            .map(|(&s, _)| s)
            .collect();
        for s in &ripe {
            st.hit.remove(s);
        }
        let g = rig.array().geometry();
        if st.fail_at == Some(op) && st.spare_failures > 0 {
            let d = (0..g.n())
                .find(|d| !st.failed.contains(d))
                .expect("a healthy member");
            rig.members[d].faulty.arm(0, Fault::MemberFailure)?;
            st.failed.push(d);
            st.spare_failures -= 1;
            st.failed_mid_run += 1;
        }
        let silent_ok = st.failed.len() < g.m;
        if cfg.faults.is_empty() || !self.rng.random_bool(plan.fault_rate) || g.stripes < 4 {
            return Ok(ripe.into_iter().filter(|&s| s < g.stripes).collect());
        }
        let kind = cfg.faults[self.rng.random_range(0..cfg.faults.len())];
        let members = rig.members.len();
        let member = loop {
            let d = self.rng.random_range(0..members);
            if !st.failed.contains(&d) {
                break d;
            }
        };
        let unit = self.rng.random_range(0..g.stripes);
        let (fault, units) = kind.random(&mut self.rng, &rig.map, unit);
        let faulty: Vec<&FaultyDisk> = rig.members.iter().map(|m| m.faulty.as_ref()).collect();
        let mut dirty = dirty_stripes(&faulty)?;
        dirty.extend(st.hit.keys().copied());
        if units.iter().all(|u| !dirty.contains(u)) && kind != FaultKind::MemberFailure && silent_ok
        {
            for &u in &units {
                for d in 0..members {
                    st.touched.insert((d, u));
                }
            }
            rig.members[member].faulty.arm(unit, fault.clone())?;
            if plan.lost_write_pairs && fault == Fault::LostWrite && g.m >= 2 && member < g.n() {
                // The unit is `member`'s unit of stripe `unit`; lose P's next write there too
                // (when the unit is P itself, lose Q's: still two of the stripe's writes).
                let pos = g.position_of(unit, member);
                let partner = if pos == g.k { g.k + 1 } else { g.k };
                rig.members[g.member_of(unit, partner)]
                    .faulty
                    .arm(unit, Fault::LostWrite)?;
            }
        }
        Ok(ripe.into_iter().filter(|&s| s < g.stripes).collect())
    }

    /// The campaign's next operation: a read or a write, half each, aligned or not, of up to
    /// two stripes.
    pub(super) fn campaign_op(&mut self, rig: &Rig) -> Op {
        let g = rig.array().geometry();
        let cap = self.model.cap();
        let c = usize_of(g.chunk_bytes);
        let write = self.rng.random_bool(0.5);
        let aligned = self.rng.random_bool(0.5);
        let max = (2 * g.k * c).min(cap);
        let (mut off, mut len) = (
            self.rng.random_range(0..cap),
            self.rng.random_range(1..=max),
        );
        if aligned {
            off = off / c * c;
            len = len.div_ceil(c) * c;
        }
        len = len.min(cap - off).max(1);
        if write {
            self.sole_write(off, len)
        } else {
            let taken = self.model.read_begin(off, len);
            debug_assert!(taken, "one client: nothing else is in flight");
            Op::Read { off, len }
        }
    }
}

impl Driver {
    /// A write of `len` random bytes at `off` by the one client of a campaign plan (nothing
    /// else is in flight, so its blocks are free).
    pub(super) fn sole_write(&mut self, off: usize, len: usize) -> Op {
        let mut data = vec![0u8; len];
        self.rng.fill(&mut data[..]);
        let taken = self.model.write_begin(off, len);
        debug_assert!(taken, "one client: nothing else is in flight");
        self.model.write_content(off, &data);
        Op::Write { off, data }
    }
}

/// The campaign's end: nothing more fires; every stripe is scrubbed; what is still damaged,
/// what fired, and what the engine counted and logged.
pub(super) fn campaign_end(
    cfg: &SimConfig,
    rig: &Rig,
    st: &CampaignState,
    counts: &mut CampaignReport,
) -> Result<(), EngineError> {
    let a = rig.array();
    if cfg.scheme != Scheme::None {
        for s in 0..cfg.stripes {
            match a.scrub_stripe(s) {
                Ok(_) => {}
                Err(EngineError::Unrecoverable { .. }) => counts.unrecoverable += 1,
                Err(e) => return Err(e),
            }
        }
    }
    for (d, m) in rig.members.iter().enumerate() {
        if st.failed.contains(&d) {
            continue;
        }
        counts.damaged_after_scrub += m.faulty.corrupted_units()?.len() as u64;
        for inj in m.faulty.log() {
            *counts
                .injected
                .entry(inj.fault.kind().name().to_string())
                .or_default() += 1;
        }
    }
    if st.failed_mid_run > 0 {
        *counts
            .injected
            .entry(FaultKind::MemberFailure.name().to_string())
            .or_default() += st.failed_mid_run;
    }
    let c = a.counters();
    counts.detected = c.detected;
    // A member that failed mid-run is one of the campaign's faults, found like the others.
    counts.located = c.located + c.members_failed;
    for e in a.events() {
        if e.action == EventAction::Reread {
            counts.reread += 1;
        }
        if matches!(e.role, EventRole::Data | EventRole::Parity)
            && !st.touched.contains(&(e.member, e.stripe))
        {
            counts.false_accusations += 1;
        }
    }
    Ok(())
}
