//! The fault campaign: seeded random reads and writes against a model of the expected bytes,
//! with faults injected within the paper's assumptions (at most one silently wrong unit per
//! stripe, plus the failed members), a check after every operation, and a scrub at the end.
//!
//! What it asserts is returned in [`CampaignReport`], and [`CampaignCase::passed`] says what
//! must hold: every read equal to the model, no damage left on any member after the scrub, and
//! no event naming a unit that no fault touched.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use stripeguard_disk::{DiskRef, Fault, FaultKind, FaultyDisk, MemDisk};
use stripeguard_engine::usize_of;
use stripeguard_engine::{
    create_accepts, Array, ArrayConfig, AssembleOptions, EngineError, EventAction,
};
use stripeguard_format::EventRole;
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

/// What happened.
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

struct Rig {
    array: Array,
    faulty: Vec<Arc<FaultyDisk>>,
}

fn build(cfg: &CampaignConfig) -> Result<Rig, EngineError> {
    let n = cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members();
    let appendix = if cfg.scheme.has_appendix() { 512 } else { 0 };
    let size = stripeguard_integrity::MetadataLayout::member_bytes_for(
        cfg.stripes,
        cfg.chunk_bytes as u64 + appendix,
    );
    let mems: Vec<DiskRef> = (0..n)
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), size)) as DiskRef)
        .collect();
    let acfg = ArrayConfig {
        code: cfg.code,
        cross_check: cfg.cross_check,
        ..ArrayConfig::new(
            cfg.data_chunks,
            cfg.parity_chunks,
            cfg.scheme,
            cfg.chunk_bytes,
            cfg.stripes,
        )
    };
    let a = Array::create(mems.clone(), &acfg, true, &mut |_, _| {})?;
    let map = a.unit_map();
    a.close()?;
    let faulty: Vec<Arc<FaultyDisk>> = mems
        .into_iter()
        .map(|d| FaultyDisk::new(d, map).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let members = faulty.iter().map(|f| f.clone() as DiskRef).collect();
    let array = Array::assemble(members, &AssembleOptions::default())?;
    // As the commands and the server run: faults must be caught with verified appendices cached.
    array.enable_appendix_cache(stripeguard_engine::APPENDIX_CACHE_ENTRIES);
    Ok(Rig { array, faulty })
}

/// Run one campaign.
pub fn run_campaign(cfg: &CampaignConfig) -> Result<CampaignReport, EngineError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let rig = build(cfg)?;
    let a = &rig.array;
    let g = *a.geometry();
    let cap = usize_of(a.capacity_bytes());
    let c = usize_of(g.chunk_bytes);
    let mut model = vec![0u8; cap];
    rng.fill(&mut model[..]);
    a.write(0, &model)?;
    let mut rep = CampaignReport::default();
    let failed: Vec<usize> = (0..cfg.failed_members.min(g.m.saturating_sub(1))).collect();
    for &f in &failed {
        rig.faulty[f].arm(0, Fault::MemberFailure)?;
    }
    // (member, stripe) pairs any fault touched: events may name only these.
    let mut touched: BTreeSet<(usize, u64)> = BTreeSet::new();
    let map = a.unit_map();

    let fail_at = cfg
        .kinds
        .contains(&FaultKind::MemberFailure)
        .then_some(cfg.ops / 3);
    let mut spare_failures = g.m - failed.len();
    let mut failed = failed;
    // Stripes a fired fault touched, and when: no new fault goes there until the campaign has
    // scrubbed them TAINT_OPS operations later (user I/O gets the first chance to find it).
    const TAINT_OPS: u64 = 50;
    let mut tainted: BTreeMap<u64, u64> = BTreeMap::new();
    // Every member, the checksum member of a checksum-chunk array included.
    let members = rig.faulty.len();
    let mut seen_log: Vec<usize> = vec![0; members];
    for op in 0..cfg.ops {
        rep.ops += 1;
        for (d, f) in rig.faulty.iter().enumerate() {
            let log = f.log();
            for inj in &log[seen_log[d]..] {
                let mut hit = vec![inj.unit];
                if let Fault::MisdirectedWrite { victim, .. } = inj.fault {
                    hit.extend([victim, victim + 1]);
                }
                for u in hit {
                    tainted.entry(u).or_insert(op);
                }
            }
            seen_log[d] = log.len();
        }
        let ripe: Vec<u64> = tainted
            .iter()
            .filter(|(_, &at)| op >= at + TAINT_OPS)
            .map(|(&s, _)| s)
            .collect();
        for s in ripe {
            if s < g.stripes && cfg.scheme != Scheme::None {
                match a.scrub_stripe(s) {
                    Ok(_) => {}
                    Err(EngineError::Unrecoverable { .. }) => rep.unrecoverable += 1,
                    Err(e) => return Err(e),
                }
            }
            tainted.remove(&s);
        }
        if fail_at == Some(op) && spare_failures > 0 {
            let d = (0..g.n())
                .find(|d| !failed.contains(d))
                .expect("a healthy member");
            rig.faulty[d].arm(0, Fault::MemberFailure)?;
            *rep.injected
                .entry(FaultKind::MemberFailure.name().to_string())
                .or_default() += 1;
            failed.push(d);
            spare_failures -= 1;
        }
        // Silent faults only while the stripe can still absorb one (at most m - 1 failed).
        let silent_ok = failed.len() < g.m;
        if !cfg.kinds.is_empty() && rng.random_bool(cfg.fault_rate) && g.stripes >= 4 {
            let kind = cfg.kinds[rng.random_range(0..cfg.kinds.len())];
            let member = loop {
                let d = rng.random_range(0..members);
                if !failed.contains(&d) {
                    break d;
                }
            };
            let unit = rng.random_range(0..g.stripes);
            let (fault, units) = kind.random(&mut rng, &map, unit);
            // Stay within the assumptions: every stripe this fault may damage must be clean on
            // every member, with nothing armed, and not recently hit (a stale parity that an RMW
            // of another chunk carried forward is wrong while equal to what was written).
            let mut dirty = dirty_stripes(&rig.faulty)?;
            dirty.extend(tainted.keys().copied());
            if units.iter().all(|u| !dirty.contains(u))
                && kind != FaultKind::MemberFailure
                && silent_ok
            {
                for &u in &units {
                    for d in 0..members {
                        touched.insert((d, u));
                    }
                }
                rig.faulty[member].arm(unit, fault.clone())?;
                if cfg.lost_write_pairs && fault == Fault::LostWrite && g.m >= 2 && member < g.n() {
                    // The unit is `member`'s unit of stripe `unit`; lose P's next write there too
                    // (when the unit is P itself, lose Q's: still two of the stripe's writes).
                    let pos = g.position_of(unit, member);
                    let partner = if pos == g.k { g.k + 1 } else { g.k };
                    rig.faulty[g.member_of(unit, partner)].arm(unit, Fault::LostWrite)?;
                }
            }
        }
        let write = rng.random_bool(0.5);
        let (off, len) = random_extent(&mut rng, cap, c, g.k);
        if write {
            let mut data = vec![0u8; len];
            rng.fill(&mut data[..]);
            match a.write(off as u64, &data) {
                Ok(()) => model[off..off + len].copy_from_slice(&data),
                Err(EngineError::Unrecoverable { stripe, .. }) => {
                    // Pieces are written in stripe order and a refused stripe writes nothing:
                    // the stripes before it hold the new bytes.
                    let landed = (stripe * g.stripe_data_bytes()).saturating_sub(off as u64);
                    let landed = usize_of(landed).min(len);
                    model[off..off + landed].copy_from_slice(&data[..landed]);
                    rep.unrecoverable += 1;
                }
                Err(e) => return Err(e),
            }
            rep.writes += 1;
        } else {
            check_read(a, off, &model[off..off + len], &mut rep)?;
        }
    }
    // Drain: nothing more may fire; read everything, then scrub every stripe.
    for f in &rig.faulty {
        f.disarm();
    }
    check_read(a, 0, &model, &mut rep)?;
    if cfg.scheme != Scheme::None {
        for s in 0..g.stripes {
            match a.scrub_stripe(s) {
                Ok(_) => {}
                Err(EngineError::Unrecoverable { .. }) => rep.unrecoverable += 1,
                Err(e) => return Err(e),
            }
        }
    }
    for (d, f) in rig.faulty.iter().enumerate() {
        if failed.contains(&d) {
            continue;
        }
        rep.damaged_after_scrub += f.corrupted_units()?.len() as u64;
        for inj in f.log() {
            *rep.injected
                .entry(inj.fault.kind().name().to_string())
                .or_default() += 1;
        }
    }
    let counters = a.counters();
    rep.detected = counters.detected;
    rep.located = counters.located;
    rep.repaired = counters.repaired;
    for e in a.events() {
        if e.action == EventAction::Reread {
            rep.reread += 1;
        }
        if matches!(e.role, EventRole::Data | EventRole::Parity)
            && !touched.contains(&(e.member, e.stripe))
        {
            rep.false_accusations += 1;
        }
    }
    Ok(rep)
}

/// Read `expect.len()` bytes at `off` and compare them with the model.
fn check_read(
    a: &Array,
    off: usize,
    expect: &[u8],
    rep: &mut CampaignReport,
) -> Result<(), EngineError> {
    let mut got = vec![0u8; expect.len()];
    match a.read(off as u64, &mut got) {
        Ok(()) => {
            let wrong = got.iter().zip(expect).filter(|(x, y)| x != y).count();
            if wrong > 0 {
                rep.wrong_reads += 1;
                rep.wrong_bytes += wrong as u64;
            }
        }
        Err(EngineError::Unrecoverable { .. }) => rep.unrecoverable += 1,
        Err(e) => return Err(e),
    }
    rep.reads += 1;
    Ok(())
}

fn dirty_stripes(faulty: &[Arc<FaultyDisk>]) -> Result<BTreeSet<u64>, EngineError> {
    let mut dirty = BTreeSet::new();
    for f in faulty {
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

/// Aligned or unaligned, single- or multi-stripe.
fn random_extent(rng: &mut impl Rng, cap: usize, c: usize, k: usize) -> (usize, usize) {
    let aligned = rng.random_bool(0.5);
    let max = (2 * k * c).min(cap);
    let (mut off, mut len) = (rng.random_range(0..cap), rng.random_range(1..=max));
    if aligned {
        off = off / c * c;
        len = len.div_ceil(c) * c;
    }
    len = len.min(cap - off).max(1);
    (off, len)
}
