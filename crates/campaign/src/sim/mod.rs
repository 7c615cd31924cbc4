//! The seeded simulation of everything that can go wrong at once (after TigerBeetle's VOPR):
//! concurrent clients, silent faults, members that leave and come back, power cuts at any I/O,
//! restarts with resync, scrubs, replaces and re-adds, on an array with the appendix cache on,
//! checked against a model of what must be true.
//!
//! One seed decides everything: the array's shape, scheme and options ([`SimConfig::from_seed`]),
//! the clients' requests, the faults, when the power goes, and how the clients' steps interleave
//! ([`sched`]: logical threads switched at every lock and member I/O). The same seed gives the
//! same run byte for byte — the same event log, the same member images ([`SimReport::digest`]).
//!
//! A run is a sequence of epochs of 30–150 client operations each:
//! - a *fault epoch* arms silent faults within the paper's model (at most one silently wrong
//!   unit per stripe besides the members that are out; never in a stripe already damaged or hit
//!   this epoch), and ends by disarming them, scrubbing the stripes they hit, and checking that
//!   no member holds damage any more;
//! - a *power epoch* arms no fault and cuts the power at a random I/O (or at its end): every
//!   member keeps its durable bytes and a random subset of its unflushed writes, some torn; the
//!   array is reassembled from those images (the resync runs) and every block is checked.
//!
//! In either, clients may also flush, scrub a stripe, take a member out, bring it back (re-add)
//! or replace it with a blank disk. Requests never overlap on a 4 KiB block while in flight
//! (overlapping requests have no single right answer), but share stripes freely: that is where
//! a missing stripe lock shows.
//!
//! What must hold ([`Rule`]): no read returns bytes the model does not allow; nothing flushed is
//! lost or refused after a cut; within the model nothing is refused, except blocks of a stripe a
//! cut left undecidable (listed untrusted and refused: FORMAT.md §2.7); a refused block stays
//! refused until it is written; no scrub leaves damage; no thread deadlocks or panics; every
//! repair is in the durable event log.

mod campaign;
mod crashes;
pub mod disk;
mod model;
pub mod sched;

pub use campaign::{CampaignReport, FaultPlan, Plan};
pub use crashes::{CrashPlan, CrashReport};

use disk::{Power, SimDisk};
use model::Model;
use rand::{Rng, RngCore, SeedableRng};
use sched::{Halt, Sched};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use stripeguard_disk::{CrashDisk, Disk, DiskRef, FaultKind, FaultyDisk, UnitMap};
use stripeguard_engine::{
    continue_reshape, create_accepts, reshape_online, usize_of, Array, ArrayConfig,
    AssembleOptions, EngineError, EventKind, HeldArray, ReplaceForce, ReshapeTo, Reshaped,
    Sabotage, SimEnv,
};
use stripeguard_integrity::{CodeId, CrossCheck, Scheme};
use stripeguard_plan::Geometry;

/// The model's block: requests in flight never share one.
pub const BLOCK: usize = 4096;

/// One simulated run.
#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    /// The seed (everything else below is drawn from it by [`SimConfig::from_seed`]).
    pub seed: u64,
    /// `k`.
    pub data_chunks: usize,
    /// `m`.
    pub parity_chunks: usize,
    /// The scheme.
    pub scheme: Scheme,
    /// Chunk size.
    pub chunk_bytes: u32,
    /// Stripes (the array has three times as many when it reshapes: [`Self::array_stripes`]).
    pub stripes: u64,
    /// Concurrent clients.
    pub clients: usize,
    /// Client operations in the run.
    pub ops: u64,
    /// Silent fault kinds armed in fault epochs (none for `none`, which cannot find them).
    pub faults: Vec<FaultKind>,
    /// Members leave and come back (at most `m - 1` out at once).
    pub member_failures: bool,
    /// Power epochs happen.
    pub power_cuts: bool,
    /// `create --journal`.
    pub write_journal: bool,
    /// The array keeps zero stripes (every stripe starts as one), and clients zero ranges too.
    pub zero_stripes: bool,
    /// Some power epochs reshape the array (add members, RAID-5 to 6 and back) while the
    /// clients run through the holder's router (offline, with the write journal).
    pub reshape: bool,
    /// A deliberate defect in the engine (the simulator's negative controls).
    #[serde(skip)]
    pub sabotage: Option<Sabotage>,
    /// The erasure code.
    #[serde(serialize_with = "code_name")]
    pub code: CodeId,
    /// The array's cross-check setting.
    pub cross_check: CrossCheck,
    /// How epochs and operations are drawn.
    pub plan: Plan,
}

fn code_name<S: serde::Serializer>(c: &CodeId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

const SHAPES: [(usize, usize); 5] = [(2, 1), (3, 1), (4, 2), (3, 2), (4, 3)];

impl SimConfig {
    /// The run of `seed`: `ops` operations on a shape, scheme and options drawn from the seed.
    pub fn from_seed(seed: u64, ops: u64) -> SimConfig {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed_5eed);
        let (k, m) = SHAPES[rng.random_range(0..SHAPES.len())];
        let scheme = loop {
            let s = Scheme::ENGINE[rng.random_range(0..Scheme::ENGINE.len())];
            if create_accepts(k, s) {
                break s;
            }
        };
        let faults = if scheme == Scheme::None {
            vec![]
        } else {
            FaultKind::ALL
                .into_iter()
                .filter(|f| f.is_silent())
                .collect()
        };
        SimConfig {
            seed,
            data_chunks: k,
            parity_chunks: m,
            scheme,
            chunk_bytes: if rng.random_bool(0.7) { 4096 } else { 16384 },
            stripes: rng.random_range(6..=16),
            clients: rng.random_range(1..=4),
            ops,
            faults,
            member_failures: rng.random_bool(0.5),
            power_cuts: rng.random_bool(0.7),
            write_journal: rng.random_bool(0.25),
            sabotage: None,
            code: CodeId::for_parity(m),
            cross_check: CrossCheck::One,
            plan: Plan::Mixed,
            // Drawn last: the fields above stay what they were for every seed.
            zero_stripes: rng.random_bool(0.5),
            reshape: rng.random_bool(0.3),
        }
    }

    /// One client running `plan` on a `k + m` array of `scheme` with the usual code for `m`:
    /// the campaigns' runs (no departures, no sabotage; power cuts as the plan says).
    #[allow(
        clippy::too_many_arguments,
        reason = "the campaigns' case fields, named at the call"
    )]
    pub fn campaign(
        seed: u64,
        (k, m): (usize, usize),
        scheme: Scheme,
        chunk_bytes: u32,
        stripes: u64,
        ops: u64,
        faults: Vec<FaultKind>,
        plan: Plan,
    ) -> SimConfig {
        SimConfig {
            seed,
            data_chunks: k,
            parity_chunks: m,
            scheme,
            chunk_bytes,
            stripes,
            clients: 1,
            ops,
            faults,
            member_failures: false,
            power_cuts: matches!(plan, Plan::Crashes(_)),
            write_journal: false,
            zero_stripes: false,
            reshape: false,
            sabotage: None,
            code: CodeId::for_parity(m),
            cross_check: CrossCheck::One,
            plan,
        }
    }

    /// The array's stripes: with reshapes, room for a reshape's critical section (its backup
    /// goes past the new geometry's data, on the added members; the arrays here are small).
    pub fn array_stripes(&self) -> u64 {
        if self.reshape {
            self.stripes * 3
        } else {
            self.stripes
        }
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        let sabotage = match self.sabotage {
            None => String::new(),
            Some(s) => format!(" --sabotage {}", s.name()),
        };
        let drawn = SimConfig::from_seed(self.seed, self.ops);
        let stay = if drawn.member_failures && !self.member_failures {
            " --members-stay"
        } else {
            ""
        };
        let zero = if drawn.zero_stripes && !self.zero_stripes {
            " --no-zero-stripes"
        } else {
            ""
        };
        let reshape = if drawn.reshape && !self.reshape {
            " --no-reshape"
        } else {
            ""
        };
        format!(
            "stripeguard campaign --simulate --seeds 1 --seed {} --ops {}{stay}{zero}{reshape}{sabotage}",
            self.seed, self.ops
        )
    }
}

/// A rule the model checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// A read returned bytes the model does not allow.
    WrongBytes,
    /// A block flushed before a cut read back wrong after it.
    FlushedLost,
    /// A block flushed before a cut was refused after it.
    FlushedRefused,
    /// A read or write refused within the model (outside a stripe a cut left undecidable).
    Refused,
    /// A refused block read back as bytes without a write in between.
    RefusalForgotten,
    /// A scrub left damage on a member, or a full check after a resync found some.
    DamageLeft,
    /// Every live thread waited for a lock.
    Deadlock,
    /// A thread panicked.
    Panic,
    /// The engine failed a request with an error the model does not expect.
    Error,
    /// A repair missing from the durable event log.
    RepairNotLogged,
}

/// A broken rule, with what broke it.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The rule.
    pub rule: Rule,
    /// What happened.
    pub detail: String,
}

/// What a run did and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimReport {
    /// Client operations.
    pub ops: u64,
    /// Reads checked.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Flushes.
    pub flushes: u64,
    /// Stripe scrubs by clients.
    pub scrubs: u64,
    /// Silent faults that fired or were applied.
    pub faults: u64,
    /// Members taken out.
    pub members_out: u64,
    /// Members re-added.
    pub readds: u64,
    /// Members replaced by a blank disk.
    pub replaces: u64,
    /// Power cuts.
    pub power_cuts: u64,
    /// Reshapes begun (online through the holder; offline with the write journal).
    pub reshapes: u64,
    /// Reshapes the power cut, finished at the restart by `grow --continue`'s function.
    pub reshapes_continued: u64,
    /// Reshapes the engine refused before it began (the scheme's or code's constraint).
    pub reshapes_refused: u64,
    /// Client requests that began while the holder served through both geometries.
    pub reshape_requests: u64,
    /// Stripes the resyncs after the cuts settled (refusing undecidable blocks).
    pub settled: u64,
    /// Reads refused in settled stripes (allowed).
    pub refused_settled: u64,
    /// Units the engine repaired.
    pub repaired: u64,
    /// Member I/Os.
    pub ios: u64,
    /// Scheduling points, and how many switched to another client.
    pub steps: u64,
    /// See `steps`.
    pub switches: u64,
    /// The fault campaign's totals (what `stripeguard campaign` prints).
    pub campaign: CampaignReport,
    /// The crash campaign's totals (what `stripeguard campaign --crash` prints).
    pub crash: CrashReport,
    /// Broken rules (at most 20 kept; `broken` counts them all).
    pub findings: Vec<Finding>,
    /// Broken rules in all.
    pub broken: u64,
    /// A hash of every member's final image and of the durable event log: two runs of one seed
    /// give the same.
    pub digest: String,
}

impl SimReport {
    /// The first finding that is the run failing (an engine error the model does not expect,
    /// a panic, a deadlock) rather than a broken rule, as an error.
    pub fn failure(&self) -> Option<EngineError> {
        self.findings
            .iter()
            .find(|f| matches!(f.rule, Rule::Error | Rule::Panic | Rule::Deadlock))
            .map(|f| EngineError::Config(format!("{:?}: {}", f.rule, f.detail)))
    }

    fn find(&mut self, rule: Rule, detail: String) {
        self.broken += 1;
        if self.findings.len() < 20 {
            self.findings.push(Finding { rule, detail });
        }
    }
}

/// One member's layers.
struct Member {
    crash: Arc<CrashDisk>,
    faulty: Arc<FaultyDisk>,
    sim: Arc<SimDisk>,
}

/// The array under test and its members.
struct Rig {
    array: Option<Array>,
    /// The number of the first event-log entry this process records.
    first_entry: u64,
    members: Vec<Member>,
    power: Arc<Power>,
    map: UnitMap,
    out: BTreeSet<usize>,
}

impl Rig {
    fn array(&self) -> &Array {
        self.array.as_ref().expect("an assembled array")
    }
}

fn member_layers(
    name: String,
    crash: Arc<CrashDisk>,
    map: UnitMap,
    power: &Arc<Power>,
) -> Result<Member, EngineError> {
    let faulty = Arc::new(FaultyDisk::new(crash.clone() as DiskRef, map)?);
    let sim = Arc::new(SimDisk::new(faulty.clone() as DiskRef, Arc::clone(power)));
    let _ = name;
    Ok(Member { crash, faulty, sim })
}

fn assemble_opts(seed: u64, sabotage: Option<Sabotage>) -> AssembleOptions {
    AssembleOptions {
        env: SimEnv::shared(seed),
        local_locks: false,
        sabotage,
        ..AssembleOptions::default()
    }
}

/// Build the rig over `images` (fresh members when `None`).
fn rig(
    cfg: &SimConfig,
    sched: &Arc<Sched>,
    rng: &mut rand::rngs::StdRng,
    images: Option<Vec<Vec<u8>>>,
    out: BTreeSet<usize>,
) -> Result<Rig, EngineError> {
    let acfg = ArrayConfig {
        write_journal: cfg.write_journal,
        zero_stripes: cfg.zero_stripes,
        code: cfg.code,
        cross_check: cfg.cross_check,
        env: SimEnv::shared(rng.next_u64()),
        local_locks: false,
        ..ArrayConfig::new(
            cfg.data_chunks,
            cfg.parity_chunks,
            cfg.scheme,
            cfg.chunk_bytes,
            cfg.array_stripes(),
        )
    };
    let crash: Vec<Arc<CrashDisk>> = match images {
        Some(images) => images
            .into_iter()
            .enumerate()
            .map(|(i, b)| Arc::new(CrashDisk::from_image(format!("sim{i}"), b, 512)))
            .collect(),
        None => {
            let n = cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members();
            // A reshape needs room past the data (a level change writes its new stripes there
            // first; adding members backs the critical section up past the new data): members
            // twice the array's size.
            let bytes = acfg.member_bytes() * if cfg.reshape { 2 } else { 1 };
            let disks: Vec<Arc<CrashDisk>> = (0..n)
                .map(|i| Arc::new(CrashDisk::new(format!("sim{i}"), bytes, 512)))
                .collect();
            let refs = disks.iter().map(|d| d.clone() as DiskRef).collect();
            Array::create(refs, &acfg, true, &mut |_, _| {})?.close()?;
            for d in &disks {
                d.flush()?;
            }
            disks
        }
    };
    let map = stripeguard_engine::member_unit_map(crash[0].as_ref())?;
    let power = Power::new(Arc::clone(sched), crash.clone(), rng.next_u64());
    let members = crash
        .into_iter()
        .enumerate()
        .map(|(i, c)| member_layers(format!("sim{i}"), c, map, &power))
        .collect::<Result<Vec<_>, _>>()?;
    for &o in &out {
        members[o].sim.set_out(true);
    }
    let refs: Vec<DiskRef> = members.iter().map(|m| m.sim.clone() as DiskRef).collect();
    // Read before the assembly: its resync may record (and save) repairs of its own.
    let first_entry = stripeguard_engine::read_log_of(&refs)?
        .entries
        .last()
        .map_or(0, |e| e.number + 1);
    let array = Array::assemble(refs, &assemble_opts(rng.next_u64(), cfg.sabotage))?;
    array.enable_appendix_cache(stripeguard_engine::APPENDIX_CACHE_ENTRIES);
    Ok(Rig {
        first_entry,
        array: Some(array),
        members,
        power,
        map,
        out,
    })
}

/// What a client does next.
#[derive(Clone, Debug)]
enum Op {
    Write {
        off: usize,
        data: Vec<u8>,
    },
    /// TRIM / WRITE_ZEROES (`Array::zero`).
    Zero {
        off: usize,
        len: usize,
    },
    Read {
        off: usize,
        len: usize,
    },
    Flush,
    Scrub(u64),
    Out(usize),
    Back(usize),
    Replace(usize),
}

impl Op {
    /// A few words for a deadlock's report and the trace (not the data).
    fn describe(&self) -> String {
        match self {
            Op::Write { off, data } => format!("write {off}+{}", data.len()),
            Op::Zero { off, len } => format!("zero {off}+{len}"),
            Op::Read { off, len } => format!("read {off}+{len}"),
            Op::Flush => "flush".into(),
            Op::Scrub(s) => format!("scrub of stripe {s}"),
            Op::Out(i) => format!("member {i} leaves"),
            Op::Back(i) => format!("member {i} comes back"),
            Op::Replace(i) => format!("member {i} replaced"),
        }
    }
}

/// What the clients send their requests to: the array, or the holder that reshapes it while
/// they run (a reshape epoch).
#[derive(Clone, Copy)]
enum Target<'a> {
    Array(&'a Array),
    Held(&'a HeldArray),
}

impl Target<'_> {
    fn read(self, off: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        match self {
            Target::Array(a) => a.read(off, buf),
            Target::Held(h) => h.read(off, buf),
        }
    }

    fn write(self, off: u64, data: &[u8]) -> Result<(), EngineError> {
        match self {
            Target::Array(a) => a.write(off, data),
            Target::Held(h) => h.write(off, data),
        }
    }

    fn zero(self, off: u64, len: u64) -> Result<(), EngineError> {
        match self {
            Target::Array(a) => a.zero(off, len),
            Target::Held(h) => h.zero(off, len),
        }
    }

    fn flush(self) -> Result<(), EngineError> {
        match self {
            Target::Array(a) => a.flush(),
            Target::Held(h) => h.flush(),
        }
    }

    /// A client's scrub of stripe `s`; a holder scrubs only when no reshape runs (its stripe
    /// numbers are then the only ones), as `serve` refuses it.
    fn scrub_stripe(self, s: u64) -> Result<(), EngineError> {
        match self {
            Target::Array(a) => a.scrub_stripe(s).map(|_| ()),
            Target::Held(h) => match h.plain() {
                Some(a) if s < a.geometry().stripes => a.scrub_stripe(s).map(|_| ()),
                _ => Ok(()),
            },
        }
    }
}

/// The state the clients share (only the running client touches it).
struct Driver {
    rng: rand::rngs::StdRng,
    model: Model,
    rep: SimReport,
    /// Operations left in this epoch.
    left: u64,
    /// A fault epoch (silent faults may be armed, members leave and come back).
    faults_on: bool,
    /// Stripes a fault was armed in or hit this epoch.
    tainted: BTreeSet<u64>,
    /// Members out, and whether one is leaving, being re-added or replaced now.
    out: BTreeSet<usize>,
    returning: bool,
    /// Replacement disks a client built (joined to the rig after the epoch: until then the
    /// rig's layers of that member are the old disk's, so it does not leave again this epoch).
    blanks: Vec<(usize, Member)>,
    /// The fault campaign's state ([`Plan::Faults`]).
    campaign: Option<campaign::CampaignState>,
    /// The crash campaign's chunk versions ([`Plan::Crashes`]).
    chunks: Option<crashes::ChunkVersions>,
    /// The array's geometry as the clients draw their requests (the old one through a
    /// reshape: what a holder's clients may address until it ends).
    geometry: Geometry,
    /// This epoch's reshape has ended (returned or failed): its clients stop.
    reshape_over: bool,
    /// The power is cut this many I/Os after a client first sees the reshape begun.
    cut_when_reshaping: Option<u64>,
    /// The operations of a reshape epoch kept for the reshape (see `client`).
    reshape_reserve: u64,
}

/// Run one seed.
pub fn simulate(cfg: &SimConfig) -> SimReport {
    let mut rep = SimReport::default();
    if let Err(e) = run(cfg, &mut rep) {
        rep.find(Rule::Error, format!("setting up or checking: {e}"));
    }
    rep
}

fn run(cfg: &SimConfig, rep: &mut SimReport) -> Result<(), EngineError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let sched = Sched::new(rng.next_u64());
    let mut rig = rig(cfg, &sched, &mut rng, None, BTreeSet::new())?;
    let cap = usize_of(rig.array().capacity_bytes());
    let shared = Mutex::new(Driver {
        rng: rand::rngs::StdRng::seed_from_u64(rng.next_u64()),
        model: Model::new(cap),
        rep: std::mem::take(rep),
        left: 0,
        faults_on: false,
        tainted: BTreeSet::new(),
        out: BTreeSet::new(),
        returning: false,
        blanks: Vec::new(),
        campaign: None,
        chunks: None,
        geometry: rig.array().geometry(),
        reshape_over: false,
        cut_when_reshaping: None,
        reshape_reserve: 0,
    });
    match &cfg.plan {
        Plan::Mixed => {}
        Plan::Faults(plan) => start_campaign(cfg, plan, &rig, &mut lock(&shared))?,
        Plan::Crashes(plan) => {
            rig = start_chain(cfg, plan, &sched, &mut rng, &mut lock(&shared))?;
        }
    }
    let mut done = 0;
    let mut epochs = 0;
    loop {
        let ops = match &cfg.plan {
            Plan::Mixed if done < cfg.ops => rng.random_range(30..=150).min(cfg.ops - done),
            Plan::Faults(_) if done < cfg.ops => cfg.ops,
            Plan::Crashes(p) if epochs < p.crashes => rng.random_range(1..=p.ops_per_crash),
            _ => break,
        };
        done += ops;
        epochs += 1;
        let crashes = crashes::is_crashes(&cfg.plan);
        let power_epoch = crashes || (cfg.power_cuts && rng.random_bool(0.5));
        {
            let mut d = lock(&shared);
            d.left = ops;
            d.faults_on = !power_epoch;
            d.reshape_over = false;
            d.cut_when_reshaping = None;
            d.reshape_reserve = ops / 2;
        }
        // A reshape runs in a power epoch with every member in (a degraded array refuses it).
        let reshaping = if power_epoch
            && cfg.reshape
            && matches!(cfg.plan, Plan::Mixed)
            && lock(&shared).out.is_empty()
            && rng.random_bool(0.4)
        {
            plan_reshape(&mut rig, &mut rng, &mut lock(&shared))?
        } else {
            None
        };
        if crashes {
            // The crash campaign cuts between requests, at the epoch's end.
            rig.power.arm(None);
        } else if power_epoch {
            // Somewhere in the epoch's member I/O (a few per member and operation; a reshape
            // reads and writes every stripe a few times).
            let n = rig.members.len() as u64;
            match &reshaping {
                None => rig.power.arm(Some(rng.random_range(0..ops * n * 3))),
                Some(_) => {
                    // Inside the reshape's moves, most of the time: a few I/Os per unit, as
                    // many more for each client's requests. Online the first client to see
                    // the reshape begun arms it; offline it is drawn past the check pass (a
                    // read of every unit).
                    let units = rig.array().geometry().stripes * n;
                    let cut = rng.random_range(0..units * 2 * (cfg.clients as u64 + 1));
                    if cfg.write_journal {
                        rig.power.arm(Some(units + cut));
                    } else {
                        rig.power.arm(None);
                        lock(&shared).cut_when_reshaping = Some(cut);
                    }
                }
            }
        } else {
            rig.power.arm(None);
        }
        let halt = match reshaping {
            Some(r) => reshape_epoch(cfg, &sched, &mut rig, &shared, r),
            None => {
                let bodies: Vec<(String, Box<dyn FnOnce() + Send + '_>)> = (0..cfg.clients)
                    .map(|c| {
                        let (shared, sched, rig) = (&shared, &sched, &rig);
                        let body: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                            client(cfg, sched, rig, Target::Array(rig.array()), shared, c)
                        });
                        (format!("client {c}"), body)
                    })
                    .collect();
                sched.run(bodies).0
            }
        };
        let mut d = lock(&shared);
        d.model.end_requests();
        let cut = match halt {
            None => false,
            Some(Halt::PowerCut) => true,
            Some(Halt::Deadlock(stuck)) => {
                d.rep.find(Rule::Deadlock, stuck.join("; "));
                break;
            }
            Some(Halt::Panic(who, what)) => {
                d.rep.find(Rule::Panic, format!("{who}: {what}"));
                break;
            }
        };
        for (i, m) in std::mem::take(&mut d.blanks) {
            rig.members[i] = m;
        }
        rig.out = d.out.clone();
        if let Plan::Crashes(plan) = &cfg.plan {
            rig.power.cut_now();
            rig = crash_restart(cfg, plan, &sched, &mut rng, rig, &mut d)?;
            if epochs % 4 == 0 && epochs < plan.crashes {
                // Chains of four cuts: then a fresh array.
                rig.array.take().expect("an array").close()?;
                rig = start_chain(cfg, plan, &sched, &mut rng, &mut d)?;
            }
        } else if power_epoch {
            if !cut {
                rig.power.cut_now();
            }
            rig = restart(cfg, &sched, &mut rng, rig, &mut d)?;
        } else if matches!(cfg.plan, Plan::Mixed) {
            end_fault_epoch(&rig, &mut d)?;
        }
    }
    let mut d = lock(&shared);
    let stats = sched.stats();
    d.rep.steps = stats.steps;
    d.rep.switches = stats.switches;
    finish(cfg, rig, &mut d)?;
    *rep = std::mem::take(&mut d.rep);
    Ok(())
}

/// A reshape to run in this epoch: what it makes of the array, and its added members (joined
/// to the rig already: the power cuts them with the others).
struct Reshaping {
    to: ReshapeTo,
    added: Vec<DiskRef>,
    seed: u64,
}

/// Draw a reshape of the array as it is (add one or two data members, or go from RAID-5 to 6
/// or back) and join its new members to the rig; `None` when the engine refuses it (the
/// scheme's or code's constraint, counted) or the array is as wide as the simulation goes.
fn plan_reshape(
    rig: &mut Rig,
    rng: &mut rand::rngs::StdRng,
    d: &mut Driver,
) -> Result<Option<Reshaping>, EngineError> {
    let g = rig.array().geometry();
    let to = match rng.random_range(0..3) {
        0 if g.m == 1 => ReshapeTo::Raid6,
        1 if g.m == 2 => ReshapeTo::Raid5,
        _ => ReshapeTo::AddData,
    };
    let mut added = match to {
        ReshapeTo::AddData => rng.random_range(1..=2),
        ReshapeTo::Raid6 => 1,
        ReshapeTo::Raid5 => 0,
    };
    let n = rig.members.len();
    let size = rig.members[0].crash.size_bytes();
    let blanks = |added: usize| -> Vec<Arc<CrashDisk>> {
        (n..n + added)
            .map(|i| Arc::new(CrashDisk::new(format!("sim{i}"), size, 512)))
            .collect()
    };
    let refs = |crash: &[Arc<CrashDisk>]| -> Vec<DiskRef> {
        crash.iter().map(|c| c.clone() as DiskRef).collect()
    };
    let mut crash = blanks(added);
    let mut preflight = rig.array().reshape_preflight(&refs(&crash), to);
    if preflight.is_err() && to == ReshapeTo::AddData && added == 1 {
        // One more member makes more room for the critical section's backup (the arrays
        // here are small).
        added = 2;
        crash = blanks(added);
        preflight = rig.array().reshape_preflight(&refs(&crash), to);
    }
    if n + added > 9 {
        return Ok(None);
    }
    if let Err(e) = preflight {
        if std::env::var_os("SG_SIM_DEBUG").is_some() {
            eprintln!("  reshape {to:?} refused: {e}");
        }
        d.rep.reshapes_refused += 1;
        return Ok(None);
    }
    let mut refs = Vec::new();
    for (i, c) in crash.into_iter().enumerate() {
        let m = member_layers(format!("sim{}", n + i), c.clone(), rig.map, &rig.power)?;
        rig.power.add(c);
        refs.push(m.sim.clone() as DiskRef);
        rig.members.push(m);
    }
    d.rep.reshapes += 1;
    Ok(Some(Reshaping {
        to,
        added: refs,
        seed: rng.next_u64(),
    }))
}

/// An epoch that reshapes the array: online, the holder serves the clients through both
/// geometries while one more logical thread moves the data; with the write journal, offline
/// (`grow` refuses it online), with no client running. Leaves the rig without an array: the
/// epoch ends with a cut (a power epoch).
fn reshape_epoch(
    cfg: &SimConfig,
    sched: &Arc<Sched>,
    rig: &mut Rig,
    shared: &Mutex<Driver>,
    r: Reshaping,
) -> Option<Halt> {
    let array = rig.array.take().expect("an assembled array");
    let opts = assemble_opts(r.seed, cfg.sabotage);
    let ended = |res: Result<Reshaped, EngineError>| {
        let mut d = lock(shared);
        d.reshape_over = true;
        if let Err(e) = res {
            d.rep
                .find(Rule::Error, format!("the reshape ({:?}): {e}", r.to));
        }
    };
    if cfg.write_journal {
        lock(shared).left = 0;
        let slot = Mutex::new(Some(array));
        let body: Box<dyn FnOnce() + Send + '_> = Box::new(|| {
            let a = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            let a = a.expect("the array");
            ended(a.reshape(r.added.clone(), r.to, &opts, &mut |_, _| {}));
        });
        return sched.run(vec![("offline reshape".into(), body)]).0;
    }
    let held = HeldArray::new(array);
    let rig = &*rig;
    // The check pass reads every unit before the reshape begins: the clients run meanwhile
    // too, uncounted (above), so the cut is drawn past it.
    let mut bodies: Vec<(String, Box<dyn FnOnce() + Send + '_>)> = (0..cfg.clients)
        .map(|c| {
            let (held, sched) = (&held, &**sched);
            let body: Box<dyn FnOnce() + Send + '_> =
                Box::new(move || client(cfg, sched, rig, Target::Held(held), shared, c));
            (format!("client {c}"), body)
        })
        .collect();
    let (held_ref, opts_ref) = (&held, &opts);
    bodies.push((
        "online reshape".into(),
        Box::new(move || {
            let prepare =
                |a: &Array| a.enable_appendix_cache(stripeguard_engine::APPENDIX_CACHE_ENTRIES);
            ended(reshape_online(
                held_ref,
                r.added.clone(),
                r.to,
                opts_ref,
                &prepare,
                &mut |_, _| {},
            ));
        }),
    ));
    sched.run(bodies).0
}

/// After a cut inside a reshape (any member's superblock says one is in progress): finish it
/// as `grow --continue` does, on every member, old and added. Otherwise the trailing members
/// that hold no superblock (added ones the reshape had not begun on, or the one `--level 5`
/// let go) leave the rig. The members' images after; whether a reshape was continued.
fn settle_reshape(
    cfg: &SimConfig,
    rng: &mut rand::rngs::StdRng,
    images: Vec<Vec<u8>>,
    d: &mut Driver,
) -> Result<(Vec<Vec<u8>>, bool), EngineError> {
    let disks: Vec<Arc<CrashDisk>> = images
        .into_iter()
        .enumerate()
        .map(|(i, b)| Arc::new(CrashDisk::from_image(format!("sim{i}"), b, 512)))
        .collect();
    let sbs: Vec<Option<stripeguard_format::Superblock>> = disks
        .iter()
        .map(|x| stripeguard_engine::read_superblock_of(x.as_ref()).ok())
        .collect();
    let mut keep = disks.len();
    let continued = sbs.iter().flatten().any(|sb| sb.reshape.is_some());
    if continued {
        let refs = disks.iter().map(|x| x.clone() as DiskRef).collect();
        let opts = assemble_opts(rng.next_u64(), cfg.sabotage);
        let r = continue_reshape(refs, &opts, &mut |_, _| {}).map_err(|e| {
            EngineError::Config(format!(
                "grow --continue after cut {}: {e}",
                d.rep.power_cuts
            ))
        })?;
        keep = r.to_members;
        d.rep.reshapes_continued += 1;
    } else {
        while keep > 0 && sbs[keep - 1].is_none() {
            keep -= 1;
        }
    }
    Ok((
        disks[..keep].iter().map(|x| x.live_image()).collect(),
        continued,
    ))
}

/// The stripe `SG_SIM_TRACE` names, when a request at `off`, `len` touches it (a debugging aid:
/// the requests, faults and events of one stripe on stderr).
fn traced(a: &Array, off: usize, len: usize) -> Option<u64> {
    let s: u64 = std::env::var("SG_SIM_TRACE").ok()?.parse().ok()?;
    let sd = a.geometry().stripe_data_bytes();
    let (lo, hi) = (off as u64 / sd, (off + len.max(1) - 1) as u64 / sd);
    (lo <= s && s <= hi).then_some(s)
}

fn trace_events(a: &Array, s: u64) {
    for e in a.events().iter().filter(|e| e.stripe == s) {
        eprintln!(
            "    event: {:?} {:?} member {} pos {}: {}",
            e.kind, e.action, e.member, e.position, e.evidence
        );
    }
}

/// The fault campaign's scrubs of stripes a fault hit 50 operations ago.
fn scrub_due(cfg: &SimConfig, a: &Array, shared: &Mutex<Driver>, due: &[u64]) {
    if cfg.scheme == Scheme::None {
        return;
    }
    for &s in due {
        let r = a.scrub_stripe(s);
        let mut d = lock(shared);
        match r {
            Ok(_) => {}
            Err(EngineError::Unrecoverable { .. }) => d.rep.campaign.unrecoverable += 1,
            Err(e) => d.rep.find(Rule::Error, format!("scrub of stripe {s}: {e}")),
        }
    }
}

fn lock(d: &Mutex<Driver>) -> std::sync::MutexGuard<'_, Driver> {
    d.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fault campaign's start: the array filled with random data, the members of the case
/// failed.
fn start_campaign(
    cfg: &SimConfig,
    plan: &FaultPlan,
    rig: &Rig,
    d: &mut Driver,
) -> Result<(), EngineError> {
    let a = rig.array();
    let mut all = vec![0u8; d.model.cap()];
    d.rng.fill(&mut all[..]);
    a.write(0, &all)?;
    for (b, block) in all.chunks(BLOCK).enumerate() {
        let mut whole = vec![0u8; BLOCK];
        whole[..block.len()].copy_from_slice(block);
        d.model.set_block(b, &whole);
    }
    d.campaign = Some(campaign::CampaignState::start(cfg, plan, rig)?);
    Ok(())
}

/// A chain of the crash campaign's cuts begins: a fresh array (members of the case out, the
/// middle stripe damaged when asked), every chunk zero and durable.
fn start_chain(
    cfg: &SimConfig,
    plan: &CrashPlan,
    sched: &Arc<Sched>,
    rng: &mut rand::rngs::StdRng,
    d: &mut Driver,
) -> Result<Rig, EngineError> {
    let out: BTreeSet<usize> = (0..plan.failed_members).collect();
    let rig = rig(cfg, sched, rng, None, out.clone())?;
    if plan.damaged_stripe {
        crashes::damage_stripe(cfg, &rig)?;
    }
    if !plan.degraded_journal {
        rig.array().disable_degraded_journal_for_campaign();
    }
    let cap = usize_of(rig.array().capacity_bytes());
    let c = cfg.chunk_bytes as usize;
    d.model = Model::new(cap);
    d.chunks = Some(crashes::ChunkVersions::zeros(cap / c, c));
    d.out = out;
    Ok(rig)
}

/// After a crash campaign's cut: the negative control on the images, the reassembly (resync),
/// the chunk-level checks.
fn crash_restart(
    cfg: &SimConfig,
    plan: &CrashPlan,
    sched: &Arc<Sched>,
    rng: &mut rand::rngs::StdRng,
    old: Rig,
    d: &mut Driver,
) -> Result<Rig, EngineError> {
    let images = power_down(old, d);
    d.rep.crash.inconsistent_without_resync +=
        crashes::without_resync(cfg, &images, &d.out, rng.next_u64())?;
    let rig = rig(cfg, sched, rng, Some(images), d.out.clone())?;
    if !plan.degraded_journal {
        rig.array().disable_degraded_journal_for_campaign();
    }
    let mut versions = d.chunks.take().unwrap_or_default();
    let settled = crashes::check_chunks(cfg, plan, rig.array(), &mut versions, &mut d.rep.crash)?;
    d.rep.settled += settled;
    d.chunks = Some(versions);
    d.model = Model::new(d.model.cap());
    Ok(rig)
}

/// One client: draw an operation, run it, check it, until the epoch's operations are done.
fn client(
    cfg: &SimConfig,
    sched: &Sched,
    rig: &Rig,
    target: Target<'_>,
    shared: &Mutex<Driver>,
    me: usize,
) {
    let plain = match target {
        Target::Array(a) => Some(a),
        Target::Held(_) => None,
    };
    loop {
        // (Asked before the driver is locked: the holder's lock is a scheduling point.)
        let reshaping = matches!(target, Target::Held(h) if h.reshaping());
        let (op, tick) = {
            let mut d = lock(shared);
            if d.left == 0 || d.reshape_over {
                return;
            }
            // In a reshape epoch half the operations at most are sent before the reshape has
            // begun (during its check pass); the rest wait for it, to go through both
            // geometries. The clients stop when it ends.
            if plain.is_none() && !reshaping && d.left <= d.reshape_reserve {
                drop(d);
                stripeguard_engine::sync::step();
                continue;
            }
            d.left -= 1;
            if reshaping {
                d.rep.reshape_requests += 1;
                if let Some(n) = d.cut_when_reshaping.take() {
                    rig.power.arm(Some(n));
                }
            }
            d.rep.ops += 1;
            let op = match &cfg.plan {
                Plan::Mixed => {
                    d.maybe_arm_fault(cfg, rig);
                    d.next_op(cfg, rig)
                }
                Plan::Faults(plan) => {
                    let due = match d.campaign_before(cfg, plan, rig) {
                        Ok(due) => due,
                        Err(e) => {
                            d.rep.find(Rule::Error, format!("arming a fault: {e}"));
                            Vec::new()
                        }
                    };
                    if !due.is_empty() {
                        drop(d);
                        if let Some(a) = plain {
                            scrub_due(cfg, a, shared, &due);
                        }
                        d = lock(shared);
                    }
                    d.campaign_op(rig)
                }
                Plan::Crashes(_) => d.crash_op(rig),
            };
            (op, d.model.tick())
        };
        sched.doing(op.describe());
        let span = match &op {
            Op::Write { off, data } => Some((*off, data.len())),
            Op::Zero { off, len } | Op::Read { off, len } => Some((*off, *len)),
            _ => None,
        };
        if let Some(s) = span.and_then(|(o, l)| plain.and_then(|a| traced(a, o, l))) {
            eprintln!("[tick {tick}] client {me} stripe {s}: {}", op.describe());
        }
        if let (Op::Out(_) | Op::Back(_) | Op::Replace(_) | Op::Flush, Ok(_)) =
            (&op, std::env::var("SG_SIM_TRACE"))
        {
            eprintln!("[tick {tick}] client {me}: {}", op.describe());
        }
        if let (Op::Scrub(st), Ok(want)) = (&op, std::env::var("SG_SIM_TRACE")) {
            if want == st.to_string() {
                eprintln!("[tick {tick}] client {me} stripe {st}: scrub");
            }
        }
        let (op, zero) = match op {
            Op::Zero { off, len } => (
                Op::Write {
                    off,
                    data: vec![0u8; len],
                },
                true,
            ),
            other => (other, false),
        };
        match op {
            Op::Write { off, data } => {
                let r = if zero {
                    target.zero(off as u64, data.len() as u64)
                } else {
                    target.write(off as u64, &data)
                };
                let mut d = lock(shared);
                d.rep.writes += 1;
                let sd = d.geometry.stripe_data_bytes();
                let landed = match r {
                    Ok(()) => data.len(),
                    Err(EngineError::Unrecoverable { stripe, .. }) => {
                        d.rep.campaign.unrecoverable += 1;
                        d.rep.crash.refused_writes += 1;
                        let refused = matches!(cfg.plan, Plan::Mixed);
                        if refused {
                            d.rep.find(
                                Rule::Refused,
                                format!("client {me}: write at {off}: stripe {stripe} refused"),
                            );
                        }
                        usize_of((stripe * sd).saturating_sub(off as u64)).min(data.len())
                    }
                    Err(e) => {
                        d.rep
                            .find(Rule::Error, format!("client {me}: write at {off}: {e}"));
                        0
                    }
                };
                d.model.write_done(off, data.len(), landed);
                if let Some(v) = d.chunks.as_mut() {
                    v.wrote(off, &data, landed, cfg.chunk_bytes as usize);
                }
            }
            Op::Zero { .. } => unreachable!("a zero runs as a write of zeros (above)"),
            Op::Read { off, len } => {
                let mut got = vec![0u8; len];
                let r = target.read(off as u64, &mut got);
                let mut d = lock(shared);
                d.rep.reads += 1;
                let d = &mut *d;
                match r {
                    Ok(()) => {
                        let wrong = d.model.differing(off, &got);
                        if wrong > 0 {
                            d.rep.campaign.wrong_reads += 1;
                            d.rep.campaign.wrong_bytes += wrong as u64;
                        }
                        if let Some(why) = d.model.read_ok(off, &got) {
                            if let Some((a, s)) =
                                plain.and_then(|a| Some((a, traced(a, off, len)?)))
                            {
                                eprintln!("  WRONG at stripe {s}: {}; out {:?}; members by position {:?}; failed {:?}", why.1, d.out, (0..rig.members.len()).map(|p| a.geometry().member_of(s, p)).collect::<Vec<_>>(), a.health().iter().map(|h| h.failed.is_some()).collect::<Vec<_>>());
                                trace_events(a, s);
                            }
                            d.rep.find(
                                why.0,
                                format!("client {me}: read at {off}+{len}: {}", why.1),
                            );
                        }
                    }
                    Err(EngineError::Unrecoverable { stripe, .. }) => {
                        d.rep.campaign.unrecoverable += 1;
                        if d.model.read_refused(off, len) {
                            d.rep.refused_settled += 1;
                        } else if matches!(cfg.plan, Plan::Mixed) {
                            d.rep.find(
                                Rule::Refused,
                                format!(
                                    "client {me}: read at {off}+{len}: stripe {stripe} refused"
                                ),
                            );
                        }
                    }
                    Err(e) => d
                        .rep
                        .find(Rule::Error, format!("client {me}: read at {off}: {e}")),
                }
                d.model.read_done(off, len);
            }
            Op::Flush => {
                let r = target.flush();
                let mut d = lock(shared);
                d.rep.flushes += 1;
                match r {
                    Ok(()) => {
                        d.model.flushed(tick);
                        if let Some(v) = d.chunks.as_mut() {
                            v.flushed();
                        }
                    }
                    Err(e) => d.rep.find(Rule::Error, format!("client {me}: flush: {e}")),
                }
            }
            Op::Scrub(s) => {
                let r = target.scrub_stripe(s);
                let mut d = lock(shared);
                d.rep.scrubs += 1;
                match r {
                    Ok(_) => {}
                    Err(e) => d.rep.find(
                        Rule::Error,
                        format!("client {me}: scrub of stripe {s}: {e}"),
                    ),
                }
            }
            Op::Out(_) | Op::Back(_) | Op::Replace(_) if plain.is_none() => {
                // Not drawn while a holder reshapes (member operations come in fault epochs).
                lock(shared).rep.find(
                    Rule::Error,
                    format!("client {me}: {} drawn during a reshape", op.describe()),
                );
            }
            Op::Out(i) => {
                let a = plain.expect("checked above");
                rig.members[i].sim.set_out(true);
                rig.members[i].faulty.disarm();
                // The engine notices at its next I/O to the member: a flush reaches every
                // member (a scrub of a stripe may not: a checksum member's table can come from
                // the cache). Noticed now, the departure is recorded before any client can
                // bring the member back (found: a member brought back while another client's
                // failed I/O to it was not yet recorded was then failed with nobody to re-add
                // it, and its tables went unwritten). No member comes back until this flush
                // returns (`returning`; found: seed 626, a client brought the member back while
                // the flush that would record its departure waited for a lock, and the late
                // record failed it with nobody to re-add it).
                let _ = a.flush();
                lock(shared).returning = false;
            }
            Op::Back(i) => {
                let a = plain.expect("checked above");
                rig.members[i].sim.set_out(false);
                let r = if a.health()[i].failed.is_some() {
                    a.replace(
                        i,
                        rig.members[i].sim.clone() as DiskRef,
                        ReplaceForce::NONE,
                        &mut |_, _| {},
                    )
                    .map(|_| ())
                } else {
                    Ok(())
                };
                let mut d = lock(shared);
                d.returning = false;
                match r {
                    Ok(()) => {
                        d.out.remove(&i);
                        d.rep.readds += 1;
                    }
                    Err(e) => d.rep.find(
                        Rule::Error,
                        format!("client {me}: re-add of member {i}: {e}"),
                    ),
                }
            }
            Op::Replace(i) => {
                let a = plain.expect("checked above");
                let fresh = Arc::new(CrashDisk::new(
                    format!("sim{i}'"),
                    rig.members[i].crash.size_bytes(),
                    512,
                ));
                let r =
                    member_layers(format!("sim{i}'"), fresh, rig.map, &rig.power).and_then(|m| {
                        a.replace(
                            i,
                            m.sim.clone() as DiskRef,
                            ReplaceForce::ALL,
                            &mut |_, _| {},
                        )?;
                        Ok(m)
                    });
                let mut d = lock(shared);
                d.returning = false;
                match r {
                    Ok(m) => {
                        d.out.remove(&i);
                        d.rep.replaces += 1;
                        rig.power.adopt(i, m.crash.clone());
                        d.blanks.push((i, m));
                    }
                    Err(e) => d.rep.find(
                        Rule::Error,
                        format!("client {me}: replace of member {i}: {e}"),
                    ),
                }
            }
        }
    }
}

impl Driver {
    /// Arm a silent fault now and then in a fault epoch, within the model.
    fn maybe_arm_fault(&mut self, cfg: &SimConfig, rig: &Rig) {
        if !self.faults_on || cfg.faults.is_empty() || !self.rng.random_bool(0.1) || self.returning
        {
            return;
        }
        if self.out.len() >= self.geometry.m {
            return;
        }
        // Without its checksum member a checksum-chunk array reads unverified until a replace
        // rebuilds the tables (FORMAT.md §2.10): no silent fault is within its model then.
        let ck_member = rig.members.len() - 1;
        if cfg.scheme == Scheme::ChecksumChunk && self.out.contains(&ck_member) {
            return;
        }
        let kind = cfg.faults[self.rng.random_range(0..cfg.faults.len())];
        let member = self.rng.random_range(0..rig.members.len());
        if self.out.contains(&member) {
            return;
        }
        let unit = self.rng.random_range(0..self.geometry.stripes);
        let (fault, units) = kind.random(&mut self.rng, &rig.map, unit);
        if units.iter().any(|u| self.tainted.contains(u)) {
            return;
        }
        self.tainted.extend(units.iter().copied());
        if let Ok(t) = std::env::var("SG_SIM_TRACE") {
            if units.iter().any(|u| u.to_string() == t) {
                eprintln!("  arm on member {member} unit {unit}: {fault:?} (touches {units:?})");
            }
        }
        let _ = rig.members[member].faulty.arm(unit, fault);
    }

    /// The next operation of a client.
    fn next_op(&mut self, cfg: &SimConfig, rig: &Rig) -> Op {
        let g = self.geometry;
        let n = rig.members.len();
        let roll = self.rng.random_range(0..100);
        // Members leave and come back only in fault epochs: a member that leaves while a write
        // to its stripe is in flight, with the power cut before the engine notices, is the
        // write hole of a degraded array without the write journal (listed in docs/
        // SEEDED-SIMULATION.md as found and open); a power epoch starts with every departure noticed.
        if cfg.member_failures && self.faults_on && roll < 2 && !self.returning {
            // A member leaves (keeping m - 1 out at most) or one that left comes back.
            if let Some(&i) = self.out.iter().next() {
                self.returning = true;
                return if self.rng.random_bool(0.7) {
                    Op::Back(i)
                } else {
                    Op::Replace(i)
                };
            }
            if self.out.len() + 1 < g.m.max(1) || (self.out.is_empty() && g.m > 1) {
                let i = self.rng.random_range(0..n);
                let replaced = self.blanks.iter().any(|(b, _)| *b == i);
                if self.tainted.is_empty() && !replaced {
                    self.out.insert(i);
                    self.rep.members_out += 1;
                    // Until its departure is recorded, no client brings it back (below).
                    self.returning = true;
                    return Op::Out(i);
                }
            }
        }
        if roll < 10 {
            return Op::Flush;
        }
        if roll < 14 {
            let s = self.rng.random_range(0..g.stripes);
            return Op::Scrub(s);
        }
        let write = roll < 57;
        for _ in 0..8 {
            let (off, len) = extent(
                &mut self.rng,
                self.model.cap(),
                usize_of(g.chunk_bytes),
                g.k,
            );
            if write && cfg.zero_stripes && self.rng.random_bool(0.2) {
                // Half of them whole stripes (metadata only), the rest as drawn.
                let sd = usize_of(g.chunk_bytes) * g.k;
                let (off, len) = if self.rng.random_bool(0.5) {
                    let first = off / sd;
                    let n = self
                        .rng
                        .random_range(1..=3)
                        .min(self.model.cap() / sd - first);
                    (first * sd, n * sd)
                } else {
                    (off, len)
                };
                if self.model.write_begin(off, len) {
                    self.model.write_content(off, &vec![0u8; len]);
                    return Op::Zero { off, len };
                }
                continue;
            }
            if write && self.model.write_begin(off, len) {
                let mut data = vec![0u8; len];
                self.rng.fill(&mut data[..]);
                self.model.write_content(off, &data);
                return Op::Write { off, data };
            }
            if !write && self.model.read_begin(off, len) {
                return Op::Read { off, len };
            }
        }
        Op::Flush
    }
}

/// Aligned or not, within a block or across stripes.
fn extent(rng: &mut impl Rng, cap: usize, c: usize, k: usize) -> (usize, usize) {
    let (off, len) = match rng.random_range(0..3) {
        0 => (
            rng.random_range(0..cap / BLOCK) * BLOCK,
            BLOCK * rng.random_range(1..=2),
        ),
        1 => {
            let off = rng.random_range(0..cap);
            (off, rng.random_range(1..=BLOCK))
        }
        _ => {
            let off = rng.random_range(0..cap / c) * c;
            (off, c * rng.random_range(1..=k))
        }
    };
    (off, len.min(cap - off).max(1))
}

/// After a fault epoch: nothing more fires; the stripes the faults hit are scrubbed, and no
/// member that is in may hold damage.
fn end_fault_epoch(rig: &Rig, d: &mut Driver) -> Result<(), EngineError> {
    let a = rig.array();
    for m in &rig.members {
        m.faulty.disarm();
        d.rep.faults += m.faulty.log().len() as u64;
    }
    let tainted = std::mem::take(&mut d.tainted);
    let hit: BTreeSet<u64> = tainted
        .iter()
        .copied()
        .filter(|&s| s < a.geometry().stripes)
        .collect();
    for &s in &hit {
        match a.scrub_stripe(s) {
            Ok(_) => {}
            Err(e) => d.rep.find(
                Rule::Refused,
                format!("scrub of stripe {s} after its fault: {e}"),
            ),
        }
    }
    for (i, m) in rig.members.iter().enumerate() {
        if d.out.contains(&i) {
            continue;
        }
        let bad = m.faulty.corrupted_units()?;
        // A zero stripe's units are unspecified and never read: damage there is no damage.
        let bad: Vec<u64> = bad
            .into_iter()
            .filter(|&u| u < a.geometry().stripes && a.zero_stripes_within(u, u + 1).is_empty())
            .collect();
        if !bad.is_empty() && !hit.is_empty() {
            d.rep.find(
                Rule::DamageLeft,
                format!("member {i} still holds damage in stripes {bad:?} after the scrub"),
            );
        }
        // The faults' log restarts with the next epoch.
        m.faulty.clear_log();
    }
    // Every repair that returned is in the durable log already (a repair saves its events
    // before it returns), flush or no flush since.
    logged_repairs(rig, a, d, "at the end of a fault epoch");
    Ok(())
}

/// The rule "every repair is logged": the durable event log holds as many repairs of this
/// process as it counted.
fn logged_repairs(rig: &Rig, a: &Array, d: &mut Driver, when: &str) {
    // This process's events in memory (it keeps the last 4,096; none of these runs records
    // more).
    let repaired = a.events().iter().filter(|e| is_repair(e.action)).count() as u64;
    let log = a.event_log();
    let logged = log
        .entries
        .iter()
        .filter(|e| e.number >= rig.first_entry && is_repair(e.action))
        .count() as u64;
    if log.dropped == 0 && logged != repaired {
        d.rep.find(
            Rule::RepairNotLogged,
            format!("{when}: {repaired} units repaired, {logged} repairs in the durable event log"),
        );
    }
}

/// Whether an event's action is a repair written to a member (a unit rebuilt, or its appendix
/// rewritten). [`stripeguard_engine::Counters::repaired`] counts more: a member's failure
/// (rebuilt-degraded), which is recorded after the flush that found it.
fn is_repair(a: stripeguard_engine::EventAction) -> bool {
    use stripeguard_engine::EventAction as A;
    matches!(a, A::Repaired | A::AppendixRewritten)
}

/// Scrub every stripe; the units found wrong or mismatched, and the stripes found
/// unrecoverable, since before.
fn full_check(a: &Array) -> Result<(u64, u64), EngineError> {
    let before = a.counters();
    for s in 0..a.geometry().stripes {
        match a.scrub_stripe(s) {
            Ok(_) | Err(EngineError::Unrecoverable { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let after = a.counters();
    Ok((
        (after.located - before.located)
            + (after.members_failed - before.members_failed)
            + (after.mismatches - before.mismatches),
        after.unrecoverable - before.unrecoverable,
    ))
}

/// The power is cut: the members' images, the old array gone.
fn power_down(mut old: Rig, d: &mut Driver) -> Vec<Vec<u8>> {
    let images = old.power.take_images().expect("the cut took images");
    d.rep.ios += old.power.ios();
    d.rep.power_cuts += 1;
    drop(old.array.take());
    images
}

/// After a power epoch: reassemble from the crash images and check every block.
fn restart(
    cfg: &SimConfig,
    sched: &Arc<Sched>,
    rng: &mut rand::rngs::StdRng,
    old: Rig,
    d: &mut Driver,
) -> Result<Rig, EngineError> {
    let images = power_down(old, d);
    let (images, continued) = if cfg.reshape {
        settle_reshape(cfg, rng, images, d)?
    } else {
        (images, false)
    };
    let rig = rig(cfg, sched, rng, Some(images), d.out.clone())?;
    let a = rig.array();
    let mut settled: BTreeSet<u64> = a
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::ResyncSettled)
        .map(|e| e.stripe)
        .collect();
    if continued {
        // The continued reshape's resync lists what it cannot verify (a torn write of a
        // client); its events are the continue's, not this assembly's.
        settled.extend(a.untrusted().iter().map(|r| r.stripe));
    }
    // A reshape that added data members grew the array: the new bytes read as zeros.
    d.model.grow(usize_of(a.capacity_bytes()));
    d.geometry = a.geometry();
    d.rep.settled += settled.len() as u64;
    // Unchecked: `none` without the journal, whose torn writes nothing can see; likewise
    // checksum-chunk without the journal while its checksum member is out (RAID without
    // checksums until a replace: its resync recomputes the parity from the data).
    let ck_out = cfg.scheme == Scheme::ChecksumChunk && d.out.contains(&(rig.members.len() - 1));
    let unchecked = (cfg.scheme == Scheme::None || ck_out) && !cfg.write_journal;
    let sd = a.geometry().stripe_data_bytes();
    let mut buf = vec![0u8; BLOCK];
    for b in 0..d.model.blocks() {
        let stripe = (b * BLOCK) as u64 / sd;
        let r = a.read((b * BLOCK) as u64, &mut buf);
        let verdict = d.model.after_cut(
            b,
            r.as_ref().ok().map(|_| &buf[..]),
            settled.contains(&stripe)
                && !cfg.write_journal
                && d.model.chunk_written(b, cfg.chunk_bytes as usize / BLOCK),
            unchecked,
        );
        match (r, verdict) {
            (Err(e), _) if !matches!(e, EngineError::Unrecoverable { .. }) => d
                .rep
                .find(Rule::Error, format!("read of block {b} after the cut: {e}")),
            (_, Some((rule, why))) => {
                if std::env::var_os("SG_SIM_DEBUG").is_some()
                    || traced(a, b * BLOCK, BLOCK).is_some()
                {
                    eprintln!(
                        "  out: {:?}; members of stripe {stripe}: {:?}",
                        d.out,
                        (0..a.geometry().n())
                            .map(|p| a.geometry().member_of(stripe, p))
                            .collect::<Vec<_>>()
                    );
                    for e in a.events().iter().filter(|e| e.stripe == stripe) {
                        eprintln!("  stripe {stripe}: {e:?}");
                    }
                }
                d.rep.find(
                    rule,
                    format!(
                        "block {b} (stripe {stripe}{}) after cut {}: {why}",
                        if settled.contains(&stripe) {
                            ", settled"
                        } else {
                            ""
                        },
                        d.rep.power_cuts
                    ),
                )
            }
            _ => {}
        }
    }
    if d.out.is_empty() {
        let (found, _) = full_check(a)?;
        if found > 0 && !unchecked {
            d.rep.find(
                Rule::DamageLeft,
                format!(
                    "a full check after cut {} found {found} units wrong",
                    d.rep.power_cuts
                ),
            );
        }
    }
    // Blocks the resync listed untrusted are zero-filled (the operator's `clear`); the model
    // then holds what each block reads now, made durable.
    let listed: BTreeSet<u64> = a.untrusted().iter().map(|r| r.stripe).collect();
    for &s in &listed {
        a.clear_untrusted(s)?;
    }
    for b in 0..d.model.blocks() {
        match a.read((b * BLOCK) as u64, &mut buf) {
            Ok(()) => d.model.set_block(b, &buf),
            Err(EngineError::Unrecoverable { stripe, .. }) => {
                d.rep.find(
                    Rule::Refused,
                    format!("block {b} (stripe {stripe}) refused after its stripe was cleared"),
                );
                d.model.set_refused(b);
            }
            Err(e) => return Err(e),
        }
    }
    a.flush()?;
    Ok(rig)
}

/// The end: read everything, scrub everything, close, and compare the durable event log.
fn finish(cfg: &SimConfig, mut rig: Rig, d: &mut Driver) -> Result<(), EngineError> {
    let a = rig.array();
    if d.campaign.is_some() {
        for m in &rig.members {
            m.faulty.disarm();
        }
    }
    let mut buf = vec![0u8; BLOCK];
    // (The crash campaign's last cut was checked chunk by chunk; its block model is not kept.)
    let blocks = if d.chunks.is_some() {
        0
    } else {
        d.model.blocks()
    };
    for b in 0..blocks {
        match a.read((b * BLOCK) as u64, &mut buf) {
            Ok(()) => {
                let wrong = d.model.differing(b * BLOCK, &buf);
                if wrong > 0 {
                    d.rep.campaign.wrong_reads += 1;
                    d.rep.campaign.wrong_bytes += wrong as u64;
                }
                if let Some((rule, why)) = d.model.read_ok(b * BLOCK, &buf) {
                    d.rep.find(rule, format!("final read of block {b}: {why}"));
                }
            }
            Err(EngineError::Unrecoverable { .. }) => {
                d.rep.campaign.unrecoverable += 1;
                if !d.model.read_refused(b * BLOCK, BLOCK) && d.campaign.is_none() {
                    d.rep
                        .find(Rule::Refused, format!("final read of block {b} refused"));
                }
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(st) = d.campaign.take() {
        campaign::campaign_end(cfg, &rig, &st, &mut d.rep.campaign)?;
    }
    let c = a.counters();
    d.rep.repaired += c.repaired + c.members_failed;
    d.rep.ios += rig.power.ios();
    logged_repairs(&rig, a, d, "at the end");
    let array = rig.array.take().expect("an array");
    array.close()?;
    let mut h = blake3::Hasher::new();
    for m in &rig.members {
        h.update(&m.crash.live_image());
    }
    d.rep.digest = h.finalize().to_hex()[..16].to_string();
    Ok(())
}
