//! The crash campaign: seeded random writes, flushes and reads on [`CrashDisk`] members, a power
//! cut at a random point (each member keeps its durable image plus a random subset of its
//! unflushed writes, some torn to a prefix of their sectors), reassembly (which resyncs the dirty
//! regions), and a check against a model that knows what was flushed:
//!
//! - a data chunk not written since the last flush must read back exactly (flushed bytes lost);
//! - a chunk written since must read back as one of the versions it held since the last flush
//!   (entirely old or entirely new), unless its stripe was *settled* (more units interrupted
//!   than the parity decides): then each checksum block reads old, new or refused — a block
//!   that failed its check is listed untrusted (FORMAT.md §2.7), so the chunk may mix old and
//!   new blocks or be refused, never read re-sealed bytes (counted apart); a flushed chunk is
//!   never refused — with the write journal, settled stripes and `none` too;
//! - with `damaged_stripe`, a stripe damaged beyond its redundancy before the crashes never
//!   reads back as anything but what was written there;
//! - afterwards a full check finds nothing to repair.
//!
//! The negative control: the same crash image assembled read-only, without resync, and checked
//! stripe by stripe finds inconsistent stripes.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Arc;
use stripeguard_disk::{CrashDisk, Disk, DiskRef, MemDisk};
use stripeguard_engine::usize_of;
use stripeguard_engine::{create_accepts, Array, ArrayConfig, AssembleOptions, EngineError};
use stripeguard_format::EventKind;
use stripeguard_integrity::Scheme;

/// What to run.
#[derive(Clone, Debug)]
pub struct CrashConfig {
    /// `k`.
    pub data_chunks: usize,
    /// `m`.
    pub parity_chunks: usize,
    /// Scheme.
    pub scheme: Scheme,
    /// Stripes.
    pub stripes: u64,
    /// Crashes (each a fresh array).
    pub crashes: u64,
    /// Operations before each crash, at most.
    pub ops: u64,
    /// Seed.
    pub seed: u64,
    /// Members out of the array from the start (degraded; at most `m - 1`... or `m` for a
    /// campaign that only checks flushed bytes).
    pub failed_members: usize,
    /// Degraded writes save the missing chunk first (the journal). `false` only for the
    /// negative control.
    pub journal: bool,
    /// Chunk size: 4096 is one checksum block (whole-unit I/O); larger chunks have several, so
    /// a partial write sends blocks and appendix as separate I/Os (FORMAT.md §2.9.1) and a crash
    /// can land any subset of them.
    pub chunk_bytes: u32,
    /// Arrays with the write journal (`create --journal`): then every chunk written since the
    /// last flush must read back entirely old or entirely new, settled stripes and `none`
    /// included.
    pub write_journal: bool,
    /// Each chain of crashes starts with one stripe damaged beyond its redundancy (`m + 1` of
    /// its data chunks overwritten on the members): whatever the crashes and resyncs do beside
    /// it, none of those chunks may ever read back as anything but what was written there.
    pub damaged_stripe: bool,
}

/// Totals.
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

impl CrashReport {
    /// What must hold after a run of `cfg`: nothing flushed lost or refused, no wrong byte, no
    /// chunk refused outside settled stripes, no write refused, no byte of a damaged stripe read
    /// as good, and a full check that finds nothing after the resync (degraded arrays excepted);
    /// with the write journal also no mixed and no refused chunk anywhere. `Err` names the
    /// fields that broke their rule.
    pub fn verdict(&self, cfg: &CrashConfig) -> Result<(), Vec<&'static str>> {
        let wj = cfg.write_journal;
        let rules = [
            ("flushed_bytes_lost", self.flushed_bytes_lost == 0),
            ("mixed_chunks", !wj || self.mixed_chunks == 0),
            ("wrong_bytes", self.wrong_bytes == 0),
            ("unreadable_unsettled", self.unreadable_unsettled == 0),
            ("flushed_refused", self.flushed_refused == 0),
            ("unreadable_chunks", !wj || self.unreadable_chunks == 0),
            ("refused_writes", self.refused_writes == 0),
            ("damaged_read_as_good", self.damaged_read_as_good == 0),
            (
                "found_after_resync",
                cfg.failed_members > 0 || self.found_after_resync == 0,
            ),
        ];
        let broken: Vec<&'static str> = rules
            .iter()
            .filter(|(_, held)| !held)
            .map(|(field, _)| *field)
            .collect();
        if broken.is_empty() {
            Ok(())
        } else {
            Err(broken)
        }
    }
}

/// The crash campaign of `stripeguard campaign --crash`: one case per shape `(k, m)` and
/// scheme that `create` accepts, each `crashes` crashes of at most 80 operations on arrays of
/// `stripes` stripes of 16 KiB chunks; one member out from the start when `degraded`, the
/// write journal when `write_journal`. Case `(i, j)` (shape, scheme) is seeded `seed + 100 i + j`.
pub fn crash_cases(
    shapes: &[(usize, usize)],
    schemes: &[Scheme],
    crashes: u64,
    stripes: u64,
    seed: u64,
    degraded: bool,
    write_journal: bool,
) -> Vec<CrashConfig> {
    let mut cases = Vec::new();
    for (i, &(k, m)) in shapes.iter().enumerate() {
        for (j, &scheme) in schemes.iter().enumerate() {
            if !create_accepts(k, scheme) {
                continue;
            }
            cases.push(CrashConfig {
                data_chunks: k,
                parity_chunks: m,
                scheme,
                stripes,
                crashes,
                ops: 80,
                seed: seed.wrapping_add((i * 100 + j) as u64),
                failed_members: usize::from(degraded),
                journal: true,
                chunk_bytes: 16384,
                write_journal,
                damaged_stripe: false,
            });
        }
    }
    cases
}

fn array_members_snapshot(a: &Array) -> Vec<DiskRef> {
    (0..).map_while(|i| a.member_disk(i)).collect()
}

/// Run `cfg.crashes` crashes.
pub fn run_crash_campaign(cfg: &CrashConfig) -> Result<CrashReport, EngineError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut rep = CrashReport::default();
    // Crashes come in chains of four on one array: each process after the first starts from
    // what the last one left (its records, sequence numbers and event log), as on a real disk.
    let mut carried: Option<Carried> = None;
    for c in 0..cfg.crashes {
        if c % 4 == 0 {
            carried = None;
        }
        carried = Some(one_crash(cfg, &mut rng, &mut rep, carried)?);
    }
    Ok(rep)
}

/// Member images and chunk versions a crash round leaves for the next.
type Carried = (Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>);

fn one_crash(
    cfg: &CrashConfig,
    rng: &mut rand::rngs::StdRng,
    rep: &mut CrashReport,
    carried: Option<Carried>,
) -> Result<Carried, EngineError> {
    let (k, m) = (cfg.data_chunks, cfg.parity_chunks);
    let acfg = ArrayConfig {
        write_journal: cfg.write_journal,
        ..ArrayConfig::new(k, m, cfg.scheme, cfg.chunk_bytes, cfg.stripes)
    };
    let size = acfg.member_bytes();
    let c = cfg.chunk_bytes as usize;
    let sd = k * c;
    let (disks, mut versions) = match carried {
        Some((images, versions)) => (
            images
                .into_iter()
                .enumerate()
                .map(|(i, b)| Arc::new(CrashDisk::from_image(format!("c{i}"), b, 512)))
                .collect::<Vec<_>>(),
            versions,
        ),
        None => {
            let disks: Vec<Arc<CrashDisk>> = (0..k + m + cfg.scheme.extra_members())
                .map(|i| Arc::new(CrashDisk::new(format!("c{i}"), size, 512)))
                .collect();
            let refs: Vec<DiskRef> = disks.iter().map(|d| d.clone() as DiskRef).collect();
            let created = Array::create(refs, &acfg, true, &mut |_, _| {})?;
            let damage = cfg.damaged_stripe.then(|| {
                let s = cfg.stripes / 2;
                let at = created.unit_offset(s) + 100;
                let members: Vec<usize> = (0..=m)
                    .map(|p| created.geometry().member_of(s, p))
                    .collect();
                (at, members)
            });
            created.close()?;
            if let Some((at, members)) = damage {
                // Different bytes on each member: the same bytes in two data units of a fresh
                // (all-zero) stripe would keep its XOR parity consistent.
                for mem in members {
                    let bytes = format!("DAMAGED BEYOND REDUNDANCY ON MEMBER {mem}");
                    disks[mem].write_at(at, bytes.as_bytes())?;
                    disks[mem].flush()?;
                }
            }
            let chunks = (usize_of(cfg.stripes) * sd) / c;
            // Per data chunk: every version it held since the last flush (the first durable).
            (disks, vec![vec![vec![0u8; c]]; chunks])
        }
    };
    let out = |refs: Vec<DiskRef>| -> Vec<DiskRef> {
        refs.into_iter()
            .enumerate()
            .map(|(i, d)| {
                if i < cfg.failed_members {
                    Arc::new(stripeguard_disk::FailedDisk::new(
                        format!("c{i}"),
                        "out (degraded campaign)",
                    )) as DiskRef
                } else {
                    d
                }
            })
            .collect()
    };
    let refs: Vec<DiskRef> = disks.iter().map(|d| d.clone() as DiskRef).collect();
    let array = Array::assemble(out(refs), &AssembleOptions::default())?;
    if !cfg.journal {
        array.disable_degraded_journal_for_campaign();
    }
    let cap = usize_of(array.capacity_bytes());
    let ops = rng.random_range(1..=cfg.ops);
    for _ in 0..ops {
        if rng.random_bool(0.15) {
            array.flush()?;
            rep.flushes += 1;
            for v in &mut versions {
                let last = v.pop().expect("a version");
                v.clear();
                v.push(last);
            }
            continue;
        }
        let (off, len) = if rng.random_bool(0.4) {
            let s = rng.random_range(0..usize_of(cfg.stripes));
            let first = rng.random_range(0..k);
            let n = rng.random_range(1..=k - first);
            (s * sd + first * c, n * c)
        } else if rng.random_bool(0.4) {
            // One or two 4 KiB blocks: the block-granular read-modify-write.
            let blocks = cap / 4096;
            let b = rng.random_range(0..blocks);
            (
                b * 4096,
                (rng.random_range(1..=2) * 4096).min(cap - b * 4096),
            )
        } else {
            let off = rng.random_range(0..cap);
            (off, rng.random_range(1..=(2 * sd).min(cap - off)))
        };
        let mut data = vec![0u8; len];
        rng.fill(&mut data[..]);
        // A stripe an earlier crash left undecidable refuses writes; the stripes before it
        // were written.
        let end = match array.write(off as u64, &data) {
            Ok(()) => off + len,
            Err(EngineError::Unrecoverable { stripe, .. }) => {
                rep.refused_writes += 1;
                (usize_of(stripe) * sd).max(off)
            }
            Err(e) => return Err(e),
        };
        rep.writes += 1;
        if end <= off {
            continue;
        }
        let len = end - off;
        for ch in off / c..=(off + len - 1) / c {
            let mut v = versions[ch].last().expect("a version").clone();
            let (lo, hi) = (off.max(ch * c), (off + len).min((ch + 1) * c));
            v[lo - ch * c..hi - ch * c].copy_from_slice(&data[lo - off..hi - off]);
            versions[ch].push(v);
        }
    }
    // Power cut: every member keeps its own random subset of unflushed writes.
    let images: Vec<Vec<u8>> = disks.iter().map(|d| d.crash_image(rng)).collect();
    drop(array);
    rep.crashes += 1;
    let mems = |imgs: &[Vec<u8>]| -> Vec<DiskRef> {
        imgs.iter()
            .enumerate()
            .map(|(i, b)| Arc::new(MemDisk::from_bytes(format!("c{i}"), b.clone())) as DiskRef)
            .collect()
    };

    // Negative control: no resync, every stripe checked.
    let ro = AssembleOptions {
        writable: false,
        ..AssembleOptions::default()
    };
    let raw = Array::assemble(out(mems(&images)), &ro)?;
    for s in 0..cfg.stripes {
        let _ = raw.scrub_stripe(s);
    }
    let rc = raw.counters();
    rep.inconsistent_without_resync += rc.located + rc.mismatches + rc.unrecoverable;
    drop(raw);

    // Reassemble: the resync runs first.
    let array = Array::assemble(out(mems(&images)), &AssembleOptions::default())?;
    let resynced = array.counters().resynced;
    rep.stripes_resynced += resynced;
    let settled: BTreeSet<u64> = array
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::ResyncSettled)
        .map(|e| e.stripe)
        .collect();
    rep.stripes_settled += settled.len() as u64;
    let mut back = vec![0u8; c];
    let damaged_stripe = cfg.damaged_stripe.then_some(cfg.stripes / 2);
    for (ch, v) in versions.iter().enumerate() {
        let stripe = (ch * c / sd) as u64;
        let damaged = Some(stripe) == damaged_stripe && ch % k <= m;
        match array.read((ch * c) as u64, &mut back) {
            Ok(()) => {}
            Err(EngineError::Unrecoverable { .. }) => {
                if damaged {
                    rep.damaged_refused += 1;
                } else if v.len() == 1 {
                    rep.flushed_refused += 1;
                } else if settled.contains(&stripe) {
                    rep.unreadable_chunks += 1;
                } else {
                    rep.unreadable_unsettled += 1;
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        if damaged {
            // Until a write covers it, the damaged chunk holds what no write put there.
            if !v.contains(&back) {
                rep.damaged_read_as_good += 1;
            }
            continue;
        }
        let wrong = || back.iter().zip(&v[0]).filter(|(a, b)| a != b).count() as u64;
        if v.len() == 1 {
            rep.flushed_bytes_lost += wrong();
            continue;
        }
        let unchecked = cfg.scheme == Scheme::None && !cfg.write_journal;
        rep.unchecked_chunks += unchecked as u64;
        if !v.contains(&back) {
            rep.mixed_chunks += 1;
            if !unchecked && (cfg.write_journal || !settled.contains(&stripe)) {
                rep.wrong_bytes += wrong().max(1);
            }
        }
    }
    let before = array.counters();
    for s in 0..cfg.stripes {
        match array.scrub_stripe(s) {
            Ok(_) | Err(EngineError::Unrecoverable { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let after = array.counters();
    rep.found_after_resync += (after.located - before.located)
        + (after.mismatches - before.mismatches)
        + (after.unrecoverable - before.unrecoverable);
    // Blocks the resync listed untrusted are zero-filled (the operator's `clear`), so the next
    // round starts from a whole array.
    let untrusted: BTreeSet<u64> = array.untrusted().iter().map(|r| r.stripe).collect();
    for s in 0..cfg.stripes {
        if untrusted.contains(&s) {
            array.clear_untrusted(s)?;
        }
    }
    // What the next round starts from: this array as it now is, every chunk at one version.
    let mut next_versions = Vec::with_capacity(versions.len());
    for (ch, v) in versions.iter().enumerate() {
        let mut b = vec![0u8; c];
        match array.read((ch * c) as u64, &mut b) {
            Ok(()) => next_versions.push(vec![b]),
            // Counted above; the next round expects what was last written.
            Err(EngineError::Unrecoverable { .. }) => {
                next_versions.push(vec![v.last().expect("a version").clone()])
            }
            Err(e) => return Err(e),
        }
    }
    let members: Vec<DiskRef> = array_members_snapshot(&array);
    array.close()?;
    let images = members
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i < cfg.failed_members {
                return Ok(images[i].clone()); // out of the array: as it was
            }
            let mut b = vec![0u8; usize_of(d.size_bytes())];
            d.read_at(0, &mut b).map(|()| b)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((images, next_versions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_each_broken_rule_and_knows_its_exceptions() {
        let cases = crash_cases(&[(3, 1)], &[Scheme::Pure], 1, 8, 1, false, false);
        let mut cfg = cases[0].clone();
        let mut rep = CrashReport {
            mixed_chunks: 4,
            unreadable_chunks: 2,
            found_after_resync: 1,
            ..CrashReport::default()
        };
        assert_eq!(rep.verdict(&cfg), Err(vec!["found_after_resync"]));
        cfg.failed_members = 1;
        assert_eq!(rep.verdict(&cfg), Ok(()));
        cfg.write_journal = true;
        assert_eq!(
            rep.verdict(&cfg),
            Err(vec!["mixed_chunks", "unreadable_chunks"])
        );
        rep = CrashReport {
            flushed_bytes_lost: 1,
            ..CrashReport::default()
        };
        assert_eq!(rep.verdict(&cfg), Err(vec!["flushed_bytes_lost"]));
    }

    #[test]
    fn crash_cases_skip_what_create_refuses_and_keep_their_seeds() {
        let cases = crash_cases(
            &[(1, 1), (3, 1)],
            &[Scheme::None, Scheme::Pure],
            5,
            8,
            10,
            true,
            false,
        );
        let got: Vec<_> = cases
            .iter()
            .map(|c| (c.data_chunks, c.scheme, c.seed, c.failed_members))
            .collect();
        assert_eq!(
            got,
            [
                (1, Scheme::None, 10, 1),
                (3, Scheme::None, 110, 1),
                (3, Scheme::Pure, 111, 1)
            ]
        );
    }
}
