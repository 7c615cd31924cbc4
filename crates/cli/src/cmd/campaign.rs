//! `stripeguard campaign`: the fault campaign (seeded random I/O with injected faults against a
//! model), with `--crash` the crash campaign ([`super::crash`]), one row a case; with
//! `--simulate` the seeded simulation of everything at once ([`super::simulate`]).

use crate::exit;
use crate::progress::count_bar;
use crate::units::parse_shape;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use stripeguard_campaign::{campaign_cases, run_campaign};
use stripeguard_integrity::Scheme;

#[derive(Args)]
pub struct CampaignArgs {
    /// Operations per (shape, scheme, fault kind, degraded) case.
    #[arg(long, default_value_t = 2000)]
    pub(super) ops: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Shapes (k+m), comma-separated.
    #[arg(long, default_value = "1+1,1+2,4+1,6+2,10+4")]
    shapes: String,
    /// Schemes, comma-separated, or `all`.
    #[arg(long, default_value = "all")]
    schemes: String,
    /// Stripes per array.
    #[arg(long, default_value_t = 64)]
    pub(super) stripes: u64,
    /// The crash campaign instead: random writes and flushes, a power cut at a random point
    /// (random subsets of unflushed writes landed, some torn), reassembly with resync, and a
    /// check against what was flushed; --ops is then the crashes per case.
    #[arg(long)]
    crash: bool,
    /// With --crash: one member out of the array from the start (the degraded write hole).
    #[arg(long, requires = "crash")]
    pub(super) degraded: bool,
    /// With --crash: arrays with the write journal (`create --journal`); then a chunk written
    /// but not flushed must read back whole (old or new) in every stripe and scheme.
    #[arg(long, requires = "crash")]
    pub(super) journal: bool,
    /// The seeded simulation instead: concurrent clients, silent faults, members leaving and
    /// coming back, power cuts at any I/O, restarts, scrubs, replaces, all in one loop against
    /// a model; every seed draws its own shape, scheme and options. --ops is then the
    /// operations per seed, --seed the first seed.
    #[arg(long, conflicts_with_all = ["crash", "degraded", "journal", "shapes", "schemes", "stripes"])]
    simulate: bool,
    /// With --simulate: how many seeds.
    #[arg(long, requires = "simulate", default_value_t = 100)]
    seeds: u64,
    /// With --simulate: run an engine with a deliberate defect (broken-repair, skipped-resync,
    /// no-stripe-lock, stale-zero-write, no-reshape-window, skipped-reshape-resync), to see the
    /// simulator catch it.
    #[arg(long, requires = "simulate", value_name = "DEFECT")]
    sabotage: Option<String>,
    /// With --simulate: no member leaves (no re-add, no replace) whatever the seed draws.
    #[arg(long, requires = "simulate")]
    members_stay: bool,
    /// With --simulate: arrays without zero stripes (and no client zeroes a range) whatever
    /// the seed draws.
    #[arg(long, requires = "simulate")]
    no_zero_stripes: bool,
    /// With --simulate: no epoch reshapes the array whatever the seed draws.
    #[arg(long, requires = "simulate")]
    no_reshape: bool,
    /// Print JSON.
    #[arg(long)]
    pub(super) json: bool,
}

pub fn run(a: CampaignArgs) -> Result<ExitCode> {
    if a.simulate {
        return super::simulate::run(&super::simulate::SimRun {
            first_seed: a.seed,
            seeds: a.seeds,
            ops: a.ops,
            sabotage: a.sabotage,
            members_stay: a.members_stay,
            no_zero_stripes: a.no_zero_stripes,
            no_reshape: a.no_reshape,
            json: a.json,
        });
    }
    let shapes: Vec<(usize, usize)> = a
        .shapes
        .split(',')
        .map(parse_shape)
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let schemes: Vec<Scheme> = if a.schemes == "all" {
        Scheme::ENGINE.to_vec()
    } else {
        a.schemes
            .split(',')
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?
    };
    if a.crash {
        let run = super::crash::CrashRun {
            ops: a.ops,
            stripes: a.stripes,
            seed: a.seed,
            degraded: a.degraded,
            journal: a.journal,
            json: a.json,
        };
        return super::crash::run(&run, &shapes, &schemes);
    }
    let cases = campaign_cases(&shapes, &schemes);
    let bar = count_bar("campaign cases");
    bar.set_length(cases.len() as u64);
    let mut rows = Vec::new();
    let mut bad = 0;
    for (i, case) in cases.iter().enumerate() {
        let rep = run_campaign(&case.config(a.ops, a.stripes, a.seed.wrapping_add(i as u64)))?;
        let ok = case.passed(&rep);
        bad += (!ok) as usize;
        rows.push((
            case.data_chunks,
            case.parity_chunks,
            case.failed_members,
            case.fault_name(),
            case.scheme,
            rep,
            ok,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(k, m, f, kind, s, rep, ok)| json!({"shape": format!("{k}+{m}"), "failed_members": f, "fault": kind, "scheme": s.name(), "ok": ok, "report": rep}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<6} {:>6} {:<28} {:<14} {:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>6}",
            "shape",
            "failed",
            "fault",
            "scheme",
            "ops",
            "injected",
            "detected",
            "located",
            "repaired",
            "wrong bytes",
            "ok"
        );
        for (k, m, f, kind, s, rep, ok) in &rows {
            println!(
                "{:<6} {:>6} {:<28} {:<14} {:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>6}",
                format!("{k}+{m}"),
                f,
                kind,
                s.name(),
                rep.ops,
                rep.injected.values().sum::<u64>(),
                rep.detected,
                rep.located,
                rep.repaired + rep.reread,
                rep.wrong_bytes,
                if *ok { "yes" } else { "NO" }
            );
        }
        let tot = |f: &dyn Fn(&stripeguard_campaign::CampaignReport) -> u64, none: bool| -> u64 {
            rows.iter()
                .filter(|r| (r.4 == Scheme::None) == none)
                .map(|r| f(&r.5))
                .sum()
        };
        println!(
            "\nprotected schemes: {} ops, {} faults fired, {} detected, {} located, {} repaired, {} wrong bytes, {} unrecoverable, {} damaged units left",
            tot(&|r| r.ops, false),
            tot(&|r| r.injected.values().sum(), false),
            tot(&|r| r.detected, false),
            tot(&|r| r.located, false),
            tot(&|r| r.repaired + r.reread, false),
            tot(&|r| r.wrong_bytes, false),
            tot(&|r| r.unrecoverable, false),
            tot(&|r| r.damaged_after_scrub, false)
        );
        println!(
            "none (negative control): {} faults fired, {} wrong bytes returned",
            tot(&|r| r.injected.values().sum(), true),
            tot(&|r| r.wrong_bytes, true)
        );
    }
    Ok(if bad > 0 {
        ExitCode::from(exit::FOUND)
    } else {
        ExitCode::from(crate::exit::OK)
    })
}
