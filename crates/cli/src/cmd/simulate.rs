//! `stripeguard campaign --simulate`: the seeded simulation ([`stripeguard_campaign::sim`]) over
//! a range of seeds; totals, operations per second, and each failing seed with the command that
//! replays it.

use crate::exit;
use crate::progress::count_bar;
use anyhow::{bail, Result};
use serde_json::json;
use std::process::ExitCode;
use std::time::Instant;
use stripeguard_campaign::sim::{simulate, SimConfig, SimReport};
use stripeguard_engine::Sabotage;

/// What to run.
pub(super) struct SimRun {
    pub(super) first_seed: u64,
    pub(super) seeds: u64,
    pub(super) ops: u64,
    pub(super) sabotage: Option<String>,
    pub(super) members_stay: bool,
    pub(super) no_zero_stripes: bool,
    pub(super) no_reshape: bool,
    pub(super) json: bool,
}

pub(super) fn run(r: &SimRun) -> Result<ExitCode> {
    let sabotage = match &r.sabotage {
        None => None,
        Some(name) => match Sabotage::from_name(name) {
            Some(s) => Some(s),
            None => bail!(
                "unknown --sabotage {name:?}: one of {}",
                Sabotage::ALL.map(|s| s.name()).join(", ")
            ),
        },
    };
    if r.seeds == 0 {
        bail!("--seeds 0 runs nothing: give at least 1");
    }
    let Some(last) = r.first_seed.checked_add(r.seeds - 1) else {
        bail!(
            "--seed {} with --seeds {} runs past the last seed ({}): start lower or run fewer",
            r.first_seed,
            r.seeds,
            u64::MAX
        );
    };
    let bar = count_bar("seeds");
    bar.set_length(r.seeds);
    let started = Instant::now();
    let mut total = SimReport::default();
    let mut failed: Vec<(SimConfig, SimReport)> = Vec::new();
    // Every seed's digest (its members' final images), hashed in order: two runs of one range
    // print the same.
    let mut digests = blake3::Hasher::new();
    for seed in r.first_seed..=last {
        let drawn = SimConfig::from_seed(seed, r.ops);
        let cfg = SimConfig {
            sabotage,
            member_failures: drawn.member_failures && !r.members_stay,
            zero_stripes: drawn.zero_stripes && !r.no_zero_stripes,
            reshape: drawn.reshape && !r.no_reshape,
            ..drawn
        };
        let rep = simulate(&cfg);
        digests.update(rep.digest.as_bytes());
        add(&mut total, &rep);
        if rep.broken > 0 {
            failed.push((cfg, rep));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    total.digest = digests.finalize().to_hex()[..16].to_string();
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let per_sec = total.ops as f64 / secs;
    if r.json {
        let failures: Vec<_> = failed
            .iter()
            .map(|(cfg, rep)| json!({"seed": cfg.seed, "config": cfg, "replay": cfg.replay_command(), "report": rep}))
            .collect();
        let v = json!({
            "seeds": r.seeds,
            "first_seed": r.first_seed,
            "ops_per_seed": r.ops,
            "seconds": secs,
            "ops_per_second": per_sec,
            "totals": total,
            "failed_seeds": failures,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (cfg, rep) in &failed {
            println!(
                "seed {}: {}+{} {} chunk {} KiB, {} clients: {} rule(s) broken",
                cfg.seed,
                cfg.data_chunks,
                cfg.parity_chunks,
                cfg.scheme.name(),
                cfg.chunk_bytes / 1024,
                cfg.clients,
                rep.broken
            );
            for f in &rep.findings {
                println!("  {:?}: {}", f.rule, f.detail);
            }
            println!("  replay: {}", cfg.replay_command());
        }
        println!(
            "{} seeds ({}..={last}), {} operations in {secs:.1} s: {per_sec:.0} operations/s; digest {}",
            r.seeds,
            r.first_seed,
            total.ops,
            total.digest
        );
        println!(
            "{} reads, {} writes, {} flushes, {} scrubs; {} silent faults, {} members out, {} re-added, {} replaced; {} power cuts, {} stripes settled; {} reshapes ({} finished after a cut, {} refused; {} requests during them); {} units repaired; {} scheduling points, {} switches",
            total.reads,
            total.writes,
            total.flushes,
            total.scrubs,
            total.faults,
            total.members_out,
            total.readds,
            total.replaces,
            total.power_cuts,
            total.settled,
            total.reshapes,
            total.reshapes_continued,
            total.reshapes_refused,
            total.reshape_requests,
            total.repaired,
            total.steps,
            total.switches
        );
        println!(
            "found: {} broken rule(s) in {} seed(s)",
            total.broken,
            failed.len()
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::from(exit::OK)
    } else {
        ExitCode::from(exit::FOUND)
    })
}

fn add(t: &mut SimReport, r: &SimReport) {
    t.ops += r.ops;
    t.reads += r.reads;
    t.writes += r.writes;
    t.flushes += r.flushes;
    t.scrubs += r.scrubs;
    t.faults += r.faults;
    t.members_out += r.members_out;
    t.readds += r.readds;
    t.replaces += r.replaces;
    t.power_cuts += r.power_cuts;
    t.reshapes += r.reshapes;
    t.reshapes_continued += r.reshapes_continued;
    t.reshapes_refused += r.reshapes_refused;
    t.reshape_requests += r.reshape_requests;
    t.settled += r.settled;
    t.refused_settled += r.refused_settled;
    t.repaired += r.repaired;
    t.ios += r.ios;
    t.steps += r.steps;
    t.switches += r.switches;
    t.broken += r.broken;
}
