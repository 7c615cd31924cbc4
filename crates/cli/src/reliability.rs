//! `stripeguard reliability`: MTTDL and the probability of data loss of a K+M array, as
//! `stripeguard_reliability` computes them (the math is at the top of that crate). Parses,
//! prints, draws; decides nothing.
//!
//! Every number is taken as text and checked here or by `Params::validate`, so a bad value is one
//! line on stderr and exit 2 (clap's own errors are several lines).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use stripeguard_reliability::{
    analyze, monte_carlo, mttdl_curve, prescriptive_table, Chain, CurvePoint, Params,
    ReliabilityError, Report, RuleRow, Target, Variant, HOURS_PER_YEAR,
};

#[derive(Args)]
pub struct ReliabilityArgs {
    /// Data members K (at least 1).
    #[arg(long, allow_hyphen_values = true, value_name = "K")]
    data: String,
    /// Parity members M (0 to 255).
    #[arg(long, allow_hyphen_values = true, value_name = "M")]
    parity: String,
    /// Annual failure rate of one member: `2%` or `0.02`.
    #[arg(long, allow_hyphen_values = true, default_value = "2%")]
    afr: String,
    /// Mean time to rebuild one member, hours (members are rebuilt one at a time).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "H",
        default_value = "24"
    )]
    rebuild_hours: String,
    /// Capacity of one member (binary units: 4T = 4 TiB); a rebuild reads K of them.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "SIZE",
        default_value = "4T"
    )]
    capacity: String,
    /// Unrecoverable read errors per bit read (1e-15 is a typical nearline datasheet figure).
    #[arg(long, allow_hyphen_values = true, default_value = "1e-15")]
    ure: String,
    /// Latent silent errors a member acquires per year (events per member-year), found and
    /// repaired by the next scrub.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "RATE",
        default_value = "0.005"
    )]
    sdc: String,
    /// Days between scrubs (a latent silent error waits D/2 days on average).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "D",
        default_value = "30"
    )]
    scrub_days: String,
    /// Mission time for the probability of loss, years.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "Y",
        default_value = "5"
    )]
    mission_years: String,
    /// Target of the prescriptive table: probability of loss within the mission at most P
    /// (the default target is 1e-6).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "P",
        conflicts_with = "target_mttdl_years"
    )]
    target_loss: Option<String>,
    /// Target of the prescriptive table: MTTDL of at least Y years (adds the paper's Eq. 2).
    #[arg(long, allow_hyphen_values = true, value_name = "Y")]
    target_mttdl_years: Option<String>,
    /// K values of the prescriptive table (with --data added).
    #[arg(
        long,
        allow_hyphen_values = true,
        value_name = "LIST",
        default_value = "4,8,12,16,24,50"
    )]
    rule_data: String,
    /// Check the Markov models with a Monte-Carlo simulation of RUNS runs (only practical when
    /// loss takes few events: high AFR, long rebuilds, small M).
    #[arg(long, allow_hyphen_values = true, value_name = "RUNS")]
    simulate: Option<String>,
    /// Seed of --simulate.
    #[arg(long, allow_hyphen_values = true, default_value = "1")]
    seed: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Draw MTTDL (log scale) against M = 1..6 for the given K to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// Largest parity count the prescriptive table searches.
const RULE_PARITY_MAX: usize = 64;
/// Bound on simulated events over all runs of --simulate.
const SIM_EVENTS_MAX: u64 = 500_000_000;

fn number(flag: &str, s: &str) -> Result<f64> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| anyhow!("{flag} {s:?} is not a number"))?;
    if !v.is_finite() {
        bail!("{flag} {s:?} is not a finite number");
    }
    Ok(v)
}

fn count(flag: &str, s: &str) -> Result<usize> {
    s.trim()
        .parse()
        .map_err(|_| anyhow!("{flag} {s:?} is not a whole number"))
}

fn afr(s: &str) -> Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => number("--afr", p)? / 100.0,
        None => number("--afr", t)?,
    };
    if !(v > 0.0 && v < 1.0) {
        bail!("--afr {s:?}: an annual failure rate is between 0 and 100 % (write 2% or 0.02)");
    }
    Ok(v)
}

fn params(a: &ReliabilityArgs) -> Result<Params> {
    let capacity_bytes =
        crate::units::parse_size_f64(&a.capacity).map_err(|e| anyhow!("--capacity: {e}"))?;
    let p = Params {
        data: count("--data", &a.data)?,
        parity: count("--parity", &a.parity)?,
        afr: afr(&a.afr)?,
        rebuild_hours: number("--rebuild-hours", &a.rebuild_hours)?,
        capacity_bytes,
        ure_per_bit: number("--ure", &a.ure)?,
        sdc_per_member_year: number("--sdc", &a.sdc)?,
        scrub_days: number("--scrub-days", &a.scrub_days)?,
        mission_years: number("--mission-years", &a.mission_years)?,
    };
    // Name the value as the user wrote it (`1e300`, not its 301 digits).
    p.validate().map_err(|e| match e {
        ReliabilityError::OutOfRange { name, expected, .. } => {
            let given = match name {
                "--data" => &a.data,
                "--parity" => &a.parity,
                "--rebuild-hours" => &a.rebuild_hours,
                "--capacity" => &a.capacity,
                "--ure" => &a.ure,
                "--sdc" => &a.sdc,
                "--scrub-days" => &a.scrub_days,
                "--mission-years" => &a.mission_years,
                _ => &a.afr,
            };
            anyhow!("{name} {given:?}: must be {expected}")
        }
        other => other.into(),
    })?;
    Ok(p)
}

fn target(a: &ReliabilityArgs) -> Result<Target> {
    Ok(match (&a.target_loss, &a.target_mttdl_years) {
        (_, Some(y)) => match number("--target-mttdl-years", y)? {
            v if v > 0.0 => Target::MttdlYears(v),
            _ => bail!("--target-mttdl-years {y:?}: must be a positive number of years"),
        },
        (Some(p), None) => match number("--target-loss", p)? {
            v if v > 0.0 && v < 1.0 => Target::LossProbability(v),
            _ => bail!("--target-loss {p:?}: must be a probability in (0, 1)"),
        },
        (None, None) => Target::LossProbability(1e-6),
    })
}

fn rule_data(a: &ReliabilityArgs, k: usize) -> Result<Vec<usize>> {
    let mut ks = vec![k];
    for part in a.rule_data.split(',').filter(|s| !s.trim().is_empty()) {
        let v = count("--rule-data", part)?;
        if v == 0 || v > 10_000 {
            bail!("--rule-data {part:?}: K must be 1 to 10000");
        }
        ks.push(v);
    }
    if ks.len() > 64 {
        bail!("--rule-data: at most 63 values");
    }
    ks.sort_unstable();
    ks.dedup();
    Ok(ks)
}

/// A Monte-Carlo check of one Markov variant.
#[derive(Serialize)]
struct SimRow {
    model: &'static str,
    mttdl_hours_markov: f64,
    mttdl_hours: monte_carlo::Estimate,
    loss_probability_markov: f64,
    loss_probability: monte_carlo::Estimate,
}

#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    report: &'a Report,
    target: Target,
    prescriptive: &'a [RuleRow],
    curve: &'a [CurvePoint],
    #[serde(skip_serializing_if = "Option::is_none")]
    simulation: Option<&'a [SimRow]>,
}

pub fn run(a: ReliabilityArgs) -> Result<ExitCode> {
    let p = params(&a)?;
    let tgt = target(&a)?;
    let ks = rule_data(&a, p.data)?;
    let runs = a
        .simulate
        .as_deref()
        .map(|s| match count("--simulate", s)? {
            r @ 2..=100_000_000 => Ok(r as u64),
            _ => bail!("--simulate {s:?}: 2 to 100000000 runs"),
        })
        .transpose()?;
    let seed: u64 = a
        .seed
        .trim()
        .parse()
        .map_err(|_| anyhow!("--seed {:?} is not a whole number", a.seed))?;
    let report = analyze(&p)?;
    let rules = prescriptive_table(&p, tgt, &ks, RULE_PARITY_MAX)?;
    let curve = mttdl_curve(&p, 1..=6)?;
    let sims = match runs {
        Some(r) => Some(simulate(&p, r, seed)?),
        None => None,
    };
    if let Some(out) = &a.plot {
        plot(&p, &curve, out)?;
    }
    if a.json {
        let o = Output {
            report: &report,
            target: tgt,
            prescriptive: &rules,
            curve: &curve,
            simulation: sims.as_deref(),
        };
        println!("{}", serde_json::to_string_pretty(&o)?);
    } else {
        print_report(&report);
        println!();
        print_rules(&p, tgt, &rules);
        if let Some(s) = &sims {
            println!();
            print_sims(s);
        }
        if let Some(out) = &a.plot {
            println!("\nwrote {}", out.display());
        }
    }
    Ok(ExitCode::from(crate::exit::OK))
}

fn simulate(p: &Params, runs: u64, seed: u64) -> Result<Vec<SimRow>> {
    let t = p.mission_hours();
    let mut rows = Vec::new();
    for (i, v) in Variant::ALL.into_iter().enumerate() {
        let chain = Chain::new(p, v);
        let s = seed.wrapping_add(2 * i as u64);
        rows.push(SimRow {
            model: v.name(),
            mttdl_hours_markov: chain.mttdl_hours(),
            mttdl_hours: monte_carlo::mttdl(&chain, runs, s, SIM_EVENTS_MAX)?,
            loss_probability_markov: chain.loss_probability(t)?,
            loss_probability: monte_carlo::loss_probability(
                &chain,
                t,
                runs,
                s + 1,
                SIM_EVENTS_MAX,
            )?,
        });
    }
    Ok(rows)
}

/// `1.23e9` style for numbers that span many decades, plain below 10⁴.
fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if (1e-2..1e4).contains(&x.abs()) {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// An input value as the user would write it: `2`, `24`, `0.5`, `1e-15`.
fn plain(x: f64) -> String {
    if x != 0.0 && !(1e-4..1e9).contains(&x.abs()) {
        return format!("{x:e}");
    }
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn years(h: f64) -> String {
    sci(h / HOURS_PER_YEAR)
}

fn print_report(r: &Report) {
    let p = &r.params;
    println!(
        "{}+{} array ({} members): AFR {}% (λ = {:.3e}/h, 1/λ = {:.1} years), rebuild {} h one member at a time (μ = {:.3e}/h), members of {}",
        p.data,
        p.parity,
        p.members(),
        plain(p.afr * 100.0),
        r.lambda_per_hour,
        1.0 / r.lambda_per_hour / HOURS_PER_YEAR,
        plain(p.rebuild_hours),
        r.mu_per_hour,
        human_bytes(p.capacity_bytes)
    );
    println!(
        "URE {}/bit: a rebuild reading {} members meets one with p = {}",
        plain(p.ure_per_bit),
        p.data,
        sci(r.p_ure_rebuild)
    );
    println!(
        "silent errors {}/member-year, scrub every {} days: a member holds a latent one with p = {}; a rebuild reads one with p = {}",
        plain(p.sdc_per_member_year),
        plain(p.scrub_days),
        sci(r.q_latent_member),
        sci(r.p_sdc_rebuild)
    );
    println!();
    let mission = format!("P(loss in {} y)", plain(p.mission_years));
    println!(
        "{:<17} {:>14} {:>17}  counts",
        "model", "MTTDL (years)", mission
    );
    for row in &r.models {
        let what = match row.variant {
            None => "member failures, never repaired (the paper's exact formula)",
            Some(Variant::Disks) => "member failures, rebuilt one at a time",
            Some(Variant::Ure) => "+ an unreadable sector in a rebuild with no parity left",
            Some(Variant::SdcNone) => {
                "+ latent silent errors, not located (none/md): lost if read with < 2 parity left"
            }
            Some(Variant::SdcLocated) => {
                "+ latent silent errors located by checksums (stripeguard): lost only with no parity left"
            }
        };
        println!(
            "{:<17} {:>14} {:>17}  {what}",
            row.model,
            years(row.mttdl_hours),
            sci(row.loss_probability)
        );
    }
    println!(
        "paper Eq. 1 (corrected to (1/λ) ln(n/k)): never-repaired MTTDL ≈ {} years",
        years(r.paper_eq1_mttdl_hours)
    );
}

fn human_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{} {}", plain((v * 1000.0).round() / 1000.0), units[u])
}

fn print_rules(p: &Params, tgt: Target, rows: &[RuleRow]) {
    let what = match tgt {
        Target::MttdlYears(y) => format!("MTTDL ≥ {} years", plain(y)),
        Target::LossProbability(x) => {
            format!("P(loss in {} years) ≤ {}", plain(p.mission_years), plain(x))
        }
    };
    println!("Parity members M needed for {what} (the paper's prescriptive rule, per model; same AFR, rebuild, URE, SDC):");
    let eq2 = matches!(tgt, Target::MttdlYears(_));
    let cell = |m: Option<usize>| m.map_or(format!(">{RULE_PARITY_MAX}"), |m| m.to_string());
    let mut head = format!("{:>5}", "K");
    if eq2 {
        head += &format!(" {:>11}", "paper Eq.2");
    }
    head += &format!(" {:>15}", "never-repaired");
    for v in Variant::ALL {
        head += &format!(" {:>17}", v.name());
    }
    println!("{head}");
    for r in rows {
        let mut line = format!("{:>5}", r.data);
        if eq2 {
            line += &format!(" {:>11}", cell(r.paper_eq2));
        }
        line += &format!(" {:>15}", cell(r.never_repaired));
        for m in &r.repair {
            line += &format!(" {:>17}", cell(m.parity));
        }
        println!("{line}");
    }
}

fn print_sims(rows: &[SimRow]) {
    let runs = rows.first().map_or(0, |r| r.mttdl_hours.runs);
    println!("Monte-Carlo check of the Markov models ({runs} runs each, 95 % intervals):");
    println!(
        "{:<17} {:>14} {:>31} {:>12} {:>27}",
        "model", "MTTDL (h)", "simulated", "P(loss)", "simulated"
    );
    for r in rows {
        let m = &r.mttdl_hours;
        let l = &r.loss_probability;
        println!(
            "{:<17} {:>14} {:>31} {:>12} {:>27}",
            r.model,
            sci(r.mttdl_hours_markov),
            format!("{} [{}, {}]", sci(m.mean), sci(m.low), sci(m.high)),
            sci(r.loss_probability_markov),
            format!("{} [{}, {}]", sci(l.mean), sci(l.low), sci(l.high)),
        );
    }
}

const COLORS: [RGBColor; 5] = [
    RGBColor(0x99, 0x99, 0x99),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
];

fn plot(p: &Params, curve: &[CurvePoint], out: &Path) -> Result<()> {
    crate::figures::register_font()?;
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if ext != "svg" && ext != "png" {
        bail!(
            "--plot {}: the file must end in .svg or .png",
            out.display()
        );
    }
    std::fs::File::create(out).map_err(|e| anyhow!("cannot write {}: {e}", out.display()))?;
    let size = (900, 560);
    if ext == "svg" {
        let root = SVGBackend::new(out, size).into_drawing_area();
        render(p, curve, &root)?;
        root.present().context("writing the plot")?;
    } else {
        let root = BitMapBackend::new(out, size).into_drawing_area();
        render(p, curve, &root)?;
        root.present().context("writing the plot")?;
    }
    Ok(())
}

fn render<DB: DrawingBackend>(
    p: &Params,
    curve: &[CurvePoint],
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    use crate::figures::err;
    root.fill(&WHITE).map_err(err)?;
    let series: Vec<(String, Vec<(f64, f64)>)> = std::iter::once((
        "never repaired (paper)".to_string(),
        curve
            .iter()
            .map(|c| (c.parity as f64, c.never_repaired_years))
            .collect(),
    ))
    .chain(Variant::ALL.iter().enumerate().map(|(i, v)| {
        (
            v.name().to_string(),
            curve
                .iter()
                .map(|c| (c.parity as f64, c.repair[i].mttdl_years))
                .collect(),
        )
    }))
    .collect();
    let ys = series.iter().flat_map(|(_, s)| s.iter().map(|&(_, y)| y));
    let (lo, hi) = ys.fold((f64::INFINITY, 0.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    );
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!(
                "MTTDL against parity members, K = {} (AFR {}%, rebuild {} h, URE {:.0e}/bit, SDC {}/member-year, scrub {} d)",
                p.data,
                plain(p.afr * 100.0),
                plain(p.rebuild_hours),
                p.ure_per_bit,
                plain(p.sdc_per_member_year),
                plain(p.scrub_days)
            ),
            ("sans-serif", 15),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.8f64..6.2f64, (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("parity members M")
        .y_desc("MTTDL (years, log scale)")
        .x_labels(6)
        .x_label_formatter(&|x| {
            #[allow(
                clippy::cast_possible_truncation,
                reason = "an axis tick between 0.8 and 6.2"
            )]
            let tick = x.round() as i64;
            format!("{tick}")
        })
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()
        .map_err(err)?;
    // +URE and +URE+SDC located nearly coincide (located silent errors only matter where the
    // URE already dominates): +URE is drawn wide so the located curve shows inside it.
    for ((name, pts), (color, width)) in series
        .into_iter()
        .zip(COLORS.into_iter().zip([2, 2, 7, 2, 2]))
    {
        let style = color.stroke_width(width);
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(pts.iter().map(|q| Circle::new(*q, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}
