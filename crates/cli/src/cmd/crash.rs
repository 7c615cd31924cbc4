//! `stripeguard campaign --crash`: power cuts at random points, reassembly with resync, and a
//! check against what was flushed; one row a shape and scheme.

use crate::exit;
use crate::progress::count_bar;
use anyhow::Result;
use serde_json::json;
use std::process::ExitCode;
use stripeguard_campaign::{crash_cases, run_crash_campaign};
use stripeguard_integrity::Scheme;

/// What a crash campaign run is asked for (from `campaign --crash`'s arguments).
pub(super) struct CrashRun {
    pub(super) ops: u64,
    pub(super) stripes: u64,
    pub(super) seed: u64,
    pub(super) degraded: bool,
    pub(super) journal: bool,
    pub(super) json: bool,
}

/// Run the crash cases of `shapes` × `schemes` and print a row each; exit 1 when a case broke
/// [`stripeguard_campaign::CrashReport::verdict`].
pub(super) fn run(a: &CrashRun, shapes: &[(usize, usize)], schemes: &[Scheme]) -> Result<ExitCode> {
    let cases = crash_cases(
        shapes, schemes, a.ops, a.stripes, a.seed, a.degraded, a.journal,
    );
    let bar = count_bar("crash cases");
    bar.set_length(cases.len() as u64);
    let mut rows = Vec::new();
    for cfg in &cases {
        let rep = run_crash_campaign(cfg)?;
        let ok = rep.verdict(cfg).is_ok();
        rows.push((cfg.data_chunks, cfg.parity_chunks, cfg.scheme, rep, ok));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let bad = rows.iter().filter(|r| !r.4).count();
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(k, m, s, rep, ok)| json!({"shape": format!("{k}+{m}"), "scheme": s.name(), "ok": ok, "report": rep}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<6} {:<14} {:>7} {:>7} {:>8} {:>8} {:>7} {:>6} {:>12} {:>11} {:>10} {:>12} {:>4}",
            "shape",
            "scheme",
            "crashes",
            "writes",
            "flushes",
            "resynced",
            "settled",
            "mixed",
            "flushed lost",
            "wrong bytes",
            "found after",
            "no-resync",
            "ok"
        );
        for (k, m, s, r, ok) in &rows {
            println!(
                "{:<6} {:<14} {:>7} {:>7} {:>8} {:>8} {:>7} {:>6} {:>12} {:>11} {:>10} {:>12} {:>4}",
                format!("{k}+{m}"),
                s.name(),
                r.crashes,
                r.writes,
                r.flushes,
                r.stripes_resynced,
                r.stripes_settled,
                r.mixed_chunks,
                r.flushed_bytes_lost,
                r.wrong_bytes,
                r.found_after_resync,
                r.inconsistent_without_resync,
                if *ok { "yes" } else { "NO" }
            );
        }
    }
    Ok(ExitCode::from(if bad > 0 { exit::FOUND } else { exit::OK }))
}
