//! The crash campaign (a configuration of the seeded simulation, [`crate::sim::Plan::Crashes`],
//! whose `sim/crashes.rs` holds the checks below): seeded random writes and flushes on
//! `CrashDisk` members, a power
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

use crate::sim::{simulate, CrashPlan, Plan, SimConfig};
use stripeguard_engine::{create_accepts, EngineError};
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

pub use crate::sim::CrashReport;

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

/// Run `cfg.crashes` crashes: the seeded simulation's loop ([`crate::sim`]) with the crash
/// campaign's plan ([`crate::sim::Plan::Crashes`]). Until issue 34 this was a loop of its own;
/// its per-seed totals changed with the move (the simulator's array has its own seeded
/// environment), its rules did not.
pub fn run_crash_campaign(cfg: &CrashConfig) -> Result<CrashReport, EngineError> {
    let plan = Plan::Crashes(CrashPlan {
        crashes: cfg.crashes,
        ops_per_crash: cfg.ops,
        failed_members: cfg.failed_members,
        degraded_journal: cfg.journal,
        damaged_stripe: cfg.damaged_stripe,
    });
    let sim = SimConfig {
        write_journal: cfg.write_journal,
        ..SimConfig::campaign(
            cfg.seed,
            (cfg.data_chunks, cfg.parity_chunks),
            cfg.scheme,
            cfg.chunk_bytes,
            cfg.stripes,
            cfg.ops,
            Vec::new(),
            plan,
        )
    };
    let rep = simulate(&sim);
    if let Some(e) = rep.failure() {
        return Err(e);
    }
    // The loop counts the checks' totals; the request and cut totals are the simulation's.
    Ok(CrashReport {
        crashes: rep.power_cuts,
        writes: rep.writes,
        flushes: rep.flushes,
        stripes_settled: rep.settled,
        ..rep.crash
    })
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
