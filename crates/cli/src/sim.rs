//! `stripeguard sim` and `stripeguard choose`: parse, call the simulator, print.

use crate::progress::count_bar;
use crate::units::{format_bytes, parse_size, parse_size_f64};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_integrity::Scheme;
use stripeguard_sim::{
    choose_by_rule, ArrayShape, FitMode, Profile, Run, RunInfo, SimReport, Source, TraceFormat,
    TraceOptions, PROFILES,
};

/// Where requests come from and what array they run on (shared by `sim` and `choose`).
#[derive(Args, Clone)]
pub struct WorkloadArgs {
    /// A block trace to replay.
    #[arg(long, conflicts_with_all = ["profile", "read_ratio"])]
    trace: Option<PathBuf>,
    /// Trace format: auto, msr, spc, disksim, blkparse, fio-v2, fio-v3.
    #[arg(long, default_value = "auto")]
    format: String,
    /// Keep only this device (DiskNumber, ASU, device number, maj,min or fio file name).
    #[arg(long)]
    device: Option<String>,
    /// blkparse: replay Q (queue) events instead of D (dispatch).
    #[arg(long)]
    queue_events: bool,
    /// Skip malformed lines (and count them) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Replay at most this many requests of the trace.
    #[arg(long)]
    limit: Option<u64>,
    /// Map trace offsets onto the array: wrap (modulo capacity) or scale (by the trace's extent).
    #[arg(long, default_value = "wrap")]
    fit: String,
    /// A synthetic workload from Table III instead of a trace (see --list-profiles).
    #[arg(long)]
    profile: Option<String>,
    /// A custom synthetic workload: share of reads (0..1); with --avg-read and --avg-write.
    #[arg(long, requires_all = ["avg_read", "avg_write"])]
    read_ratio: Option<f64>,
    /// Custom workload: mean read size (decimals allowed: 7.04K).
    #[arg(long, value_parser = parse_size_f64)]
    avg_read: Option<f64>,
    /// Mean write size (custom workload; for `choose` also the rule's input; decimals allowed).
    #[arg(long, value_parser = parse_size_f64)]
    avg_write: Option<f64>,
    /// Synthetic requests to generate.
    #[arg(long, default_value_t = 1_000_000)]
    requests: u64,
    /// Seed of the synthetic generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// RAID level: 5 or 6 (or --parity).
    #[arg(long, default_value_t = 6)]
    level: u8,
    /// Parity members (overrides --level).
    #[arg(long)]
    parity: Option<usize>,
    /// Members (n).
    #[arg(long, default_value_t = 8)]
    disks: usize,
    /// Chunk size.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    chunk: usize,
    /// Array capacity the requests fall in.
    #[arg(long, default_value = "256G", value_parser = parse_size)]
    capacity: usize,
    /// Memory bound of each scheme's first-read map.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    map_memory: usize,
    /// Cross-check first-reads against P only (`one`, the paper's Table II) or every parity
    /// (`all`, as `create --cross-check all`): counts its extra reads.
    #[arg(long, default_value = "one")]
    cross_check: stripeguard_integrity::CrossCheck,
    /// Stripe-cache size for Kroth & Yang's checksum-chunk rows (checksum chunks; LRU); the
    /// rows are shown with no cache and with this one.
    #[arg(long, default_value_t = 1024)]
    pub ck_cache: usize,
}

impl WorkloadArgs {
    fn parity(&self) -> Result<usize> {
        Ok(match (self.parity, self.level) {
            (Some(m), _) => m,
            (None, 5) => 1,
            (None, 6) => 2,
            (None, l) => bail!("--level {l} is not supported (5 or 6, or --parity M)"),
        })
    }

    fn synthetic_profile(&self) -> Result<Option<Profile>> {
        if let Some(name) = &self.profile {
            return Profile::by_name(name).map(Some).with_context(|| {
                format!(
                    "unknown profile `{name}` (one of: {})",
                    PROFILES
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
        }
        if let Some(r) = self.read_ratio {
            if !(0.0..=1.0).contains(&r) {
                bail!("--read-ratio must be between 0 and 1");
            }
            return Ok(Some(Profile {
                name: "custom",
                read_ratio: r,
                avg_read_bytes: self.avg_read.unwrap_or(4096.0),
                avg_write_bytes: self.avg_write.unwrap_or(4096.0),
            }));
        }
        Ok(None)
    }

    /// The library's description of this run (the arguments, parsed; nothing decided here).
    /// `figure`: no workload is needed (the figures pick theirs).
    pub fn to_run(&self, schemes: &[Scheme], figure: bool) -> Result<Run> {
        let shape = ArrayShape {
            disks: self.disks,
            parity: self.parity()?,
            chunk_bytes: self.chunk as u64,
            capacity_bytes: self.capacity as u64,
        };
        let source = if let Some(path) = &self.trace {
            let format = match self.format.as_str() {
                "auto" => None,
                other => Some(other.parse::<TraceFormat>().map_err(anyhow::Error::msg)?),
            };
            let fit = match self.fit.as_str() {
                "wrap" => FitMode::Wrap,
                "scale" => FitMode::Scale,
                other => bail!("--fit {other}: use wrap or scale"),
            };
            Source::Trace {
                path: path.clone(),
                format,
                opts: TraceOptions {
                    device: self.device.clone(),
                    blkparse_queue: self.queue_events,
                    skip_bad: self.skip_bad,
                    limit: self.limit,
                },
                fit,
            }
        } else if let Some(profile) = self.synthetic_profile()? {
            Source::Profile {
                profile,
                requests: self.requests,
                seed: self.seed,
            }
        } else if figure {
            // The figures choose their own workloads; this one is only a placeholder.
            Source::Profile {
                profile: PROFILES[0],
                requests: self.requests,
                seed: self.seed,
            }
        } else {
            bail!("give --trace FILE, --profile NAME, or --read-ratio with --avg-read and --avg-write");
        };
        Ok(Run {
            shape,
            schemes: schemes.to_vec(),
            map_bytes: self.map_memory as u64,
            cross_check: self.cross_check,
            source,
            codes: None,
            checksum_chunk_caches: vec![0, self.ck_cache],
        })
    }

    /// Replay the workload through every scheme in `schemes`, with a progress bar.
    pub fn simulate(&self, schemes: &[Scheme]) -> Result<(SimReport, RunInfo)> {
        let run = self.to_run(schemes, false)?;
        simulate(&run)
    }
}

/// [`stripeguard_sim::run`] with a progress bar.
pub fn simulate(run: &Run) -> Result<(SimReport, RunInfo)> {
    let bar = count_bar("replaying");
    let out = stripeguard_sim::run(run, &mut |done, total| {
        if let Some(t) = total {
            bar.set_length(t);
        }
        bar.set_position(done);
    });
    bar.finish_and_clear();
    Ok(out?)
}

fn parse_schemes(s: &str) -> Result<Vec<Scheme>> {
    if s == "all" {
        return Ok(Scheme::ALL.to_vec());
    }
    let mut v: Vec<Scheme> = s
        .split(',')
        .map(|x| x.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    if !v.contains(&Scheme::None) {
        v.insert(0, Scheme::None); // the baseline for percentages
    }
    Ok(v)
}

#[derive(Args)]
pub struct SimArgs {
    #[command(flatten)]
    w: WorkloadArgs,
    /// Schemes, comma-separated, or all (none is always included as the baseline).
    #[arg(long, default_value = "all")]
    schemes: String,
    /// Draw a figure instead of a table: tau (the paper's Fig. 6) or profiles (Fig. 8).
    #[arg(long)]
    figure: Option<String>,
    /// Output file of the figure (.svg or .png).
    #[arg(long, requires = "figure")]
    out: Option<PathBuf>,
    /// Chunk sizes of the profiles figure.
    #[arg(long, default_value = "2K,4K,8K", value_delimiter = ',', value_parser = parse_size)]
    chunks: Vec<usize>,
    /// List the Table III profiles and exit.
    #[arg(long)]
    list_profiles: bool,
    /// Print JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV.
    #[arg(long)]
    csv: bool,
    /// Compare the RAID-6 codes on the workload instead of the schemes: raid6 (md's P+Q),
    /// rdp and tier, each in its own block (`--code rdp,tier,raid6` or `all`); needs --level 6.
    #[arg(long)]
    code: Option<String>,
    /// With --code: this member (0-based) has failed, so reads of its blocks are rebuilt.
    #[arg(long, requires = "code")]
    failed_member: Option<usize>,
}

pub fn sim(a: SimArgs) -> Result<ExitCode> {
    if a.list_profiles {
        println!(
            "{:<10} {:>8} {:>10} {:>10}",
            "profile", "reads %", "avg read", "avg write"
        );
        for p in PROFILES {
            println!(
                "{:<10} {:>8.2} {:>9.2}K {:>9.2}K",
                p.name,
                p.read_ratio * 100.0,
                p.avg_read_bytes / 1024.0,
                p.avg_write_bytes / 1024.0
            );
        }
        return Ok(ExitCode::from(crate::exit::OK));
    }
    if let Some(fig) = &a.figure {
        let out = a
            .out
            .clone()
            .context("--figure needs --out FILE.svg or FILE.png")?;
        let run = a.w.to_run(&Scheme::ALL, true)?;
        return crate::figures::draw(fig, &run, &a.chunks, &out).map(|_| {
            println!("wrote {}", out.display());
            ExitCode::from(crate::exit::OK)
        });
    }
    if let Some(codes) = &a.code {
        let wanted: Vec<&str> = if codes == "all" {
            vec!["raid6", "rdp", "tier"]
        } else {
            codes.split(',').map(str::trim).collect()
        };
        if let Some(bad) = wanted
            .iter()
            .find(|c| !["raid6", "rdp", "tier"].contains(c))
        {
            bail!("--code {bad}: the codes compared are raid6, rdp and tier");
        }
        let mut run = a.w.to_run(&[Scheme::None], false)?;
        run.codes = Some(a.failed_member);
        let (report, info) = simulate(&run)?;
        print_codes(&report, &info, &wanted, a.failed_member, a.json);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    let schemes = parse_schemes(&a.schemes)?;
    let (report, info) = a.w.simulate(&schemes)?;
    print_report(&report, &info, a.json, a.csv);
    Ok(ExitCode::from(crate::exit::OK))
}

fn print_codes(
    report: &SimReport,
    info: &RunInfo,
    wanted: &[&str],
    failed: Option<usize>,
    json_out: bool,
) {
    let rows: Vec<&stripeguard_sim::CodeCounts> = report
        .codes
        .iter()
        .filter(|c| wanted.contains(&c.code))
        .collect();
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"workload": info.label, "k": report.k, "m": report.m,
                "chunk_bytes": report.chunk_bytes, "requests": report.requests,
                "failed_member": failed, "codes": rows})
            )
            .expect("json")
        );
        return;
    }
    println!("{}", info.label);
    println!(
        "array: RAID-6, {} data + 2 parity, chunk {}; {} requests; {}; blocks of each code's layout (raid6, tier: a chunk; rdp: a cell, chunk / (p - 1)); writes counted healthy",
        report.k,
        format_bytes(report.chunk_bytes),
        report.requests,
        match failed {
            Some(f) => format!("member {f} failed"),
            None => "no member failed".into(),
        }
    );
    println!(
        "{:<7} {:>11} {:>12} {:>12} {:>13} {:>14} {:>12}",
        "code", "block", "reads", "writes", "parity writes", "degraded reads", "MiB moved"
    );
    for c in rows {
        println!(
            "{:<7} {:>11} {:>12} {:>12} {:>13} {:>14} {:>12.1}",
            c.code,
            format!("{:.0} B", c.block_bytes),
            c.reads,
            c.writes,
            c.parity_writes,
            c.degraded_extra_reads,
            c.bytes() / (1 << 20) as f64
        );
    }
}

fn print_report(report: &SimReport, info: &RunInfo, json_out: bool, csv: bool) {
    let label = &info.label;
    if json_out {
        let rows: Vec<_> = report
            .schemes
            .iter()
            .map(|c| {
                let s = c.scheme.unwrap();
                json!({"scheme": s.name(), "counts": c, "total": c.total(), "increase_pct": report.increase_pct(s),
                       "real_total": c.real_total(), "real_increase_pct": report.real_increase_pct(s),
                       "first_read_fraction": c.first_read_fraction()})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"workload": label, "k": report.k, "m": report.m,
            "chunk_bytes": report.chunk_bytes, "requests": report.requests, "fit": info, "schemes": rows,
            "checksum_chunk": report.checksum_chunk}))
            .expect("json")
        );
        return;
    }
    if csv {
        println!("scheme,disk_reads,disk_writes,total,increase_pct,first_read_fraction,rmw,rcw,full_stripe,merge_reads,real_total,real_increase_pct,member_ios,member_bytes");
        for c in &report.schemes {
            let s = c.scheme.unwrap();
            println!(
                "{},{},{},{},{:.4},{:.4},{},{},{},{},{},{:.4},{},{}",
                s.name(),
                c.io.disk_reads,
                c.io.disk_writes,
                c.total(),
                report.increase_pct(s).unwrap_or(0.0),
                c.first_read_fraction(),
                c.io.rmw,
                c.io.rcw,
                c.io.full_stripe,
                c.io.merge_reads,
                c.real_total(),
                report.real_increase_pct(s).unwrap_or(0.0),
                c.io.member.reads + c.io.member.writes,
                c.io.member.read_bytes + c.io.member.write_bytes
            );
        }
        return;
    }
    println!("{label}");
    println!(
        "array: RAID {} data + {} parity, chunk {}; {} requests; counts in the paper's unit (chunk + appendix = 1 I/O); \"engine\": the member I/Os and bytes the engine issues (checksum blocks and appendices, FORMAT.md §2.9.1)",
        report.k, report.m, format_bytes(report.chunk_bytes), report.requests
    );
    if info.wrapped > 0 || info.clipped > 0 {
        println!(
            "fit: wrapped: {} requests (offset beyond the capacity), clipped: {} (cut at its end); --capacity or --fit scale changes this",
            info.wrapped, info.clipped
        );
    }
    println!(
        "{:<11} {:>11} {:>11} {:>11} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11} {:>8} {:>11} {:>11}",
        "scheme",
        "disk reads",
        "disk writes",
        "total",
        "+% none",
        "1st-read",
        "RMW",
        "RCW",
        "full",
        "merge",
        "real total",
        "real +%",
        "engine I/Os",
        "engine MiB"
    );
    for c in &report.schemes {
        let s = c.scheme.unwrap();
        println!(
            "{:<11} {:>11} {:>11} {:>11} {:>7.2}% {:>9.1}% {:>9} {:>9} {:>9} {:>9} {:>11} {:>7.2}% {:>11} {:>11.1}",
            s.name(),
            c.io.disk_reads,
            c.io.disk_writes,
            c.total(),
            report.increase_pct(s).unwrap_or(0.0),
            c.first_read_fraction() * 100.0,
            c.io.rmw,
            c.io.rcw,
            c.io.full_stripe,
            c.io.merge_reads,
            c.real_total(),
            report.real_increase_pct(s).unwrap_or(0.0),
            c.io.member.reads + c.io.member.writes,
            (c.io.member.read_bytes + c.io.member.write_bytes) as f64 / (1 << 20) as f64
        );
    }
    if let Some(none) = report.get(Scheme::None) {
        for ck in &report.checksum_chunk {
            let (r, w) = (
                none.io.disk_reads + ck.reads,
                none.io.disk_writes + ck.writes,
            );
            let base = none.total() as f64;
            println!(
                "{:<11} {:>11} {:>11} {:>11} {:>7.2}%  (Kroth & Yang's checksum chunk, {}: {:.1} % of pieces hit the cache)",
                "ck-chunk",
                r,
                w,
                r + w,
                if base > 0.0 { ((r + w) as f64 / base - 1.0) * 100.0 } else { 0.0 },
                if ck.cache_chunks == 0 {
                    "no stripe cache".to_string()
                } else {
                    format!("LRU of {} chunks", ck.cache_chunks)
                },
                if ck.lookups == 0 { 0.0 } else { ck.hits as f64 / ck.lookups as f64 * 100.0 }
            );
        }
    }
}

#[derive(Args)]
pub struct ChooseArgs {
    #[command(flatten)]
    w: WorkloadArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn choose(a: ChooseArgs) -> Result<ExitCode> {
    let g = ArrayShape {
        disks: a.w.disks,
        parity: a.w.parity()?,
        chunk_bytes: a.w.chunk as u64,
        capacity_bytes: a.w.capacity as u64,
    }
    .geometry()?;
    let simulate = a.w.trace.is_some() || a.w.profile.is_some() || a.w.read_ratio.is_some();
    let (report, label) = if simulate {
        let (r, info) = a.w.simulate(&Scheme::ALL)?;
        (Some(r), info.label)
    } else {
        (None, String::new())
    };
    // The rule's input: the declared average write size, or the workload's measured one.
    let avg_write = match (a.w.avg_write, &report) {
        (Some(s), _) => s,
        (None, Some(r)) => {
            let c = r.get(Scheme::None).expect("none simulated");
            if c.user_writes == 0 {
                bail!("the workload has no writes; the rule needs an average write size")
            }
            c.user_write_bytes as f64 / c.user_writes as f64
        }
        (None, None) => {
            bail!("give --avg-write SIZE, or a workload (--trace / --profile) to measure it from")
        }
    };
    let rule = choose_by_rule(g.n(), g.m, g.chunk_bytes, avg_write);
    let mut ranked: Vec<(Scheme, u64, f64)> = Vec::new();
    if let Some(r) = &report {
        for c in &r.schemes {
            let s = c.scheme.unwrap();
            if s != Scheme::None {
                ranked.push((s, c.total(), r.increase_pct(s).unwrap_or(0.0)));
            }
        }
        ranked.sort_by_key(|x| x.1);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "rule": rule, "avg_write_bytes": avg_write, "workload": label,
                "simulated": ranked.iter().map(|(s, t, p)| json!({"scheme": s.name(), "total": t, "increase_pct": p})).collect::<Vec<_>>(),
                "recommended": ranked.first().map(|x| x.0.name()).unwrap_or(rule.scheme.name()),
            }))?
        );
        return Ok(ExitCode::from(crate::exit::OK));
    }
    println!("rule (Li & Lee Eq. 7-9): {}", rule.reason);
    if let (Some(best), Some(second)) = (ranked.first(), ranked.get(1)) {
        println!("simulated on {label}:");
        for (s, t, p) in &ranked {
            println!(
                "  {:<11} {:>12} disk I/Os  +{:.2}% over none",
                s.name(),
                t,
                p
            );
        }
        println!(
            "recommended: {} ({} fewer disk I/Os than the runner-up {}, {:.2} percentage points){}",
            best.0.name(),
            second.1 - best.1,
            second.0.name(),
            second.2 - best.2,
            if best.0 == rule.scheme {
                String::new()
            } else {
                format!("; the rule alone picks {}", rule.scheme.name())
            }
        );
    } else {
        println!("recommended: {}", rule.scheme.name());
    }
    Ok(ExitCode::from(crate::exit::OK))
}
