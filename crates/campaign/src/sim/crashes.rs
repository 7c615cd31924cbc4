//! The crash campaign's plan ([`Plan::Crashes`]): the simulator's loop run as `stripeguard
//! campaign --crash` runs it — one client, power epochs only, each of 1..=`ops_per_crash`
//! writes and flushes (no reads), the power cut between requests at the epoch's end, chains of
//! four cuts on one array (each process after the first starts from what the last one left),
//! and the crash campaign's chunk-level checks after each reassembly:
//!
//! - a data chunk not written since the last flush must read back exactly (flushed bytes lost);
//! - a chunk written since must read back as one of the versions it held since the last flush
//!   (entirely old or entirely new), unless its stripe was settled (then each checksum block
//!   reads old, new or refused) or the scheme is `none` without the journal (unchecked);
//! - with `damaged_stripe`, a stripe damaged beyond its redundancy before the crashes never
//!   reads back as anything but what was written there;
//! - afterwards a full check finds nothing to repair.
//!
//! The negative control: the same crash image assembled read-only, without resync, and checked
//! stripe by stripe finds inconsistent stripes.

use super::{Driver, Op, Plan, Rig, SimConfig};
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{usize_of, Array, AssembleOptions, EngineError, EventKind, SimEnv};
use stripeguard_integrity::Scheme;

/// What the crash campaign's plan sets.
#[derive(Clone, Debug, Serialize)]
pub struct CrashPlan {
    /// Power cuts in the run.
    pub crashes: u64,
    /// Requests before each cut, at most.
    pub ops_per_crash: u64,
    /// Members out from the start.
    pub failed_members: usize,
    /// Degraded writes save the missing chunk first (`false`: the negative control).
    pub degraded_journal: bool,
    /// Each chain starts with one stripe damaged beyond its redundancy.
    pub damaged_stripe: bool,
}

/// What the crash campaign counted (`campaign --crash`'s columns). The loop fills the checks'
/// totals; `crashes`, `writes`, `flushes` and `stripes_settled` are the simulation's
/// ([`super::SimReport`]), copied in by [`crate::crash::run_crash_campaign`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CrashReport {
    /// Crashes.
    pub crashes: u64,
    /// User writes issued.
    pub writes: u64,
    /// Flushes issued.
    pub flushes: u64,
    /// Stripes resynced after the crashes.
    pub stripes_resynced: u64,
    /// Stripes settled (interrupted beyond what the parity decides).
    pub stripes_settled: u64,
    /// Bytes flushed before a crash and not intact after it (must be 0).
    pub flushed_bytes_lost: u64,
    /// Bytes read back that are neither an old nor a new version, outside settled stripes
    /// (must be 0).
    pub wrong_bytes: u64,
    /// Units a full check found wrong after the resync (must be 0).
    pub found_after_resync: u64,
    /// Chunks written since the last flush whose read is refused after the resync: blocks of
    /// a settled stripe that failed their checks are listed untrusted (FORMAT.md §2.7), so
    /// such a chunk reads old, new or refused. Must be 0 outside settled stripes.
    pub unreadable_chunks: u64,
    /// Refused reads of chunks outside settled stripes (must be 0).
    pub unreadable_unsettled: u64,
    /// Flushed chunks whose read is refused after the resync (must be 0: a crash is not data
    /// loss; the damaged stripe's chunks are counted apart).
    pub flushed_refused: u64,
    /// Reads of the damaged stripe's chunks that returned bytes never written there (must be 0).
    pub damaged_read_as_good: u64,
    /// Reads of the damaged stripe's chunks that were refused (the right answer).
    pub damaged_refused: u64,
    /// Writes refused because an earlier crash left their stripe unreadable (must be 0).
    pub refused_writes: u64,
    /// `none` without the write journal: chunks written since the last flush are not checked
    /// (a torn write there is a mix of old and new sectors that nothing can see).
    pub unchecked_chunks: u64,
    /// Chunks written since the last flush that read back as neither an old nor a new version
    /// (a mix of both), wherever they are: must be 0 with the write journal; without it they
    /// are the settled stripes' and `none`'s torn chunks (the journal's negative control).
    pub mixed_chunks: u64,
    /// Negative control: what a check without resync found (units wrong, stripes inconsistent
    /// or unrecoverable).
    pub inconsistent_without_resync: u64,
}

/// Per data chunk, every version it held since the last flush (the first durable).
#[derive(Default)]
pub(super) struct ChunkVersions(Vec<Vec<Vec<u8>>>);

impl ChunkVersions {
    /// `chunks` zero chunks of `c` bytes.
    pub(super) fn zeros(chunks: usize, c: usize) -> ChunkVersions {
        ChunkVersions(vec![vec![vec![0u8; c]]; chunks])
    }

    /// A write of `data` at `off` landed its first `landed` bytes.
    pub(super) fn wrote(&mut self, off: usize, data: &[u8], landed: usize, c: usize) {
        if landed == 0 {
            return;
        }
        for ch in off / c..=(off + landed - 1) / c {
            let mut v = self.0[ch].last().expect("a version").clone();
            let (lo, hi) = (off.max(ch * c), (off + landed).min((ch + 1) * c));
            v[lo - ch * c..hi - ch * c].copy_from_slice(&data[lo - off..hi - off]);
            self.0[ch].push(v);
        }
    }

    /// A flush returned (one client: every write before it is durable).
    pub(super) fn flushed(&mut self) {
        for v in &mut self.0 {
            let last = v.pop().expect("a version");
            v.clear();
            v.push(last);
        }
    }
}

impl Driver {
    /// The crash campaign's next request: a flush (15 %), or a write of whole chunks of one
    /// stripe, of one or two 4 KiB blocks (the block-granular read-modify-write), or anywhere.
    pub(super) fn crash_op(&mut self, rig: &Rig) -> Op {
        if self.rng.random_bool(0.15) {
            return Op::Flush;
        }
        let g = rig.array().geometry();
        let (k, c) = (g.k, usize_of(g.chunk_bytes));
        let sd = k * c;
        let cap = self.model.cap();
        let (off, len) = if self.rng.random_bool(0.4) {
            let s = self.rng.random_range(0..usize_of(g.stripes));
            let first = self.rng.random_range(0..k);
            let n = self.rng.random_range(1..=k - first);
            (s * sd + first * c, n * c)
        } else if self.rng.random_bool(0.4) {
            let blocks = cap / 4096;
            let b = self.rng.random_range(0..blocks);
            (
                b * 4096,
                (self.rng.random_range(1..=2) * 4096).min(cap - b * 4096),
            )
        } else {
            let off = self.rng.random_range(0..cap);
            (off, self.rng.random_range(1..=(2 * sd).min(cap - off)))
        };
        self.sole_write(off, len)
    }
}

/// Damage `m + 1` data chunks of the middle stripe on the members (different bytes on each: the
/// same bytes in two data units of a fresh, all-zero stripe would keep its XOR parity).
pub(super) fn damage_stripe(cfg: &SimConfig, rig: &Rig) -> Result<(), EngineError> {
    let a = rig.array();
    let s = cfg.stripes / 2;
    let at = a.unit_offset(s) + 100;
    for p in 0..=cfg.parity_chunks {
        let mem = a.geometry().member_of(s, p);
        let bytes = format!("DAMAGED BEYOND REDUNDANCY ON MEMBER {mem}");
        let disk = &rig.members[mem].crash;
        stripeguard_disk::Disk::write_at(disk.as_ref(), at, bytes.as_bytes())?;
        stripeguard_disk::Disk::flush(disk.as_ref())?;
    }
    Ok(())
}

/// Negative control: the images assembled read-only, without resync, every stripe checked.
pub(super) fn without_resync(
    cfg: &SimConfig,
    images: &[Vec<u8>],
    out: &BTreeSet<usize>,
    seed: u64,
) -> Result<u64, EngineError> {
    let disks: Vec<DiskRef> = images
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if out.contains(&i) {
                Arc::new(stripeguard_disk::FailedDisk::new(
                    format!("sim{i}"),
                    "out (degraded campaign)",
                )) as DiskRef
            } else {
                Arc::new(MemDisk::from_bytes(format!("sim{i}"), b.clone())) as DiskRef
            }
        })
        .collect();
    let ro = AssembleOptions {
        writable: false,
        env: SimEnv::shared(seed),
        local_locks: false,
        ..AssembleOptions::default()
    };
    let raw = Array::assemble(disks, &ro)?;
    for s in 0..cfg.stripes {
        let _ = raw.scrub_stripe(s);
    }
    let rc = raw.counters();
    Ok(rc.located + rc.members_failed + rc.mismatches + rc.unrecoverable)
}

/// After the cut and the resync: the crash campaign's chunk-level checks, a full check, the
/// untrusted stripes cleared, and the versions the next round starts from.
pub(super) fn check_chunks(
    cfg: &SimConfig,
    plan: &super::CrashPlan,
    a: &Array,
    versions: &mut ChunkVersions,
    counts: &mut CrashReport,
) -> Result<u64, EngineError> {
    let (k, m) = (cfg.data_chunks, cfg.parity_chunks);
    let c = cfg.chunk_bytes as usize;
    let sd = k * c;
    counts.stripes_resynced += a.counters().resynced;
    let settled: BTreeSet<u64> = a
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::ResyncSettled)
        .map(|e| e.stripe)
        .collect();
    let mut back = vec![0u8; c];
    let damaged_stripe = plan.damaged_stripe.then_some(cfg.stripes / 2);
    for (ch, v) in versions.0.iter().enumerate() {
        let stripe = (ch * c / sd) as u64;
        let damaged = Some(stripe) == damaged_stripe && ch % k <= m;
        match a.read((ch * c) as u64, &mut back) {
            Ok(()) => {}
            Err(EngineError::Unrecoverable { .. }) => {
                if damaged {
                    counts.damaged_refused += 1;
                } else if v.len() == 1 {
                    counts.flushed_refused += 1;
                } else if settled.contains(&stripe) {
                    counts.unreadable_chunks += 1;
                } else {
                    counts.unreadable_unsettled += 1;
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        if damaged {
            // Until a write covers it, the damaged chunk holds what no write put there.
            if !v.contains(&back) {
                counts.damaged_read_as_good += 1;
            }
            continue;
        }
        let wrong = || back.iter().zip(&v[0]).filter(|(a, b)| a != b).count() as u64;
        if v.len() == 1 {
            counts.flushed_bytes_lost += wrong();
            continue;
        }
        let unchecked = cfg.scheme == Scheme::None && !cfg.write_journal;
        counts.unchecked_chunks += u64::from(unchecked);
        if !v.contains(&back) {
            counts.mixed_chunks += 1;
            if !unchecked && (cfg.write_journal || !settled.contains(&stripe)) {
                counts.wrong_bytes += wrong().max(1);
            }
        }
    }
    let (found, unrecoverable) = super::full_check(a)?;
    counts.found_after_resync += found + unrecoverable;
    // Blocks the resync listed untrusted are zero-filled (the operator's `clear`), so the next
    // round starts from a whole array.
    let untrusted: BTreeSet<u64> = a.untrusted().iter().map(|r| r.stripe).collect();
    for &s in &untrusted {
        a.clear_untrusted(s)?;
    }
    // What the next round starts from: the array as it now is, every chunk at one version.
    for (ch, v) in versions.0.iter_mut().enumerate() {
        let mut b = vec![0u8; c];
        match a.read((ch * c) as u64, &mut b) {
            Ok(()) => *v = vec![b],
            // Counted above; the next round expects what was last written.
            Err(EngineError::Unrecoverable { .. }) => {
                let last = v.pop().expect("a version");
                *v = vec![last];
            }
            Err(e) => return Err(e),
        }
    }
    Ok(settled.len() as u64)
}

/// Whether `plan` is the crash campaign's.
pub(super) fn is_crashes(plan: &Plan) -> bool {
    matches!(plan, Plan::Crashes(_))
}
