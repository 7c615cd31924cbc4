//! Figures: the paper's Fig. 6 (increased I/O against τ, from the planner) and Fig. 8 (per-profile
//! bars from simulation), as SVG or PNG with plotters. Text uses DejaVu Sans
//! (`fonts-dejavu-core`), registered at run time.

use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use stripeguard_integrity::Scheme;
use stripeguard_plan::Op;
use stripeguard_sim::analysis::tau_curve;
use stripeguard_sim::PROFILES;
use stripeguard_sim::{Run, Source};

const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

pub(crate) fn register_font() -> Result<()> {
    let path = FONT_PATHS
        .iter()
        .find(|p| Path::new(p).exists())
        .context("no DejaVu Sans font found for the figure's text; install it (apt-get install fonts-dejavu-core)")?;
    let bytes: &'static [u8] = Box::leak(std::fs::read(path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{path} is not a usable font"))?;
    Ok(())
}

const SCHEMES: [(Scheme, RGBColor); 4] = [
    (Scheme::Pure, RGBColor(0x99, 0x99, 0x99)),
    (Scheme::Hybrid1, RGBColor(0x1f, 0x77, 0xb4)),
    (Scheme::Hybrid2, RGBColor(0xd6, 0x27, 0x28)),
    (Scheme::HybridSeq, RGBColor(0x2c, 0xa0, 0x2c)),
];

/// Draw figure `kind` to `out`.
pub fn draw(kind: &str, w: &Run, chunks: &[usize], out: &Path) -> Result<()> {
    register_font()?;
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let size = match kind {
        "tau" => (1100, 480),
        "profiles" => {
            let rows = u32::try_from(chunks.len().max(1)).ok();
            match rows.and_then(|r| r.checked_mul(340)?.checked_add(60)) {
                Some(height) => (1300, height),
                None => bail!("{} chunk sizes are too many for one figure", chunks.len()),
            }
        }
        other => bail!("unknown figure `{other}` (tau or profiles)"),
    };
    // Fail here with one line naming the file, not inside the backend with its debug value.
    if ext == "svg" || ext == "png" {
        std::fs::File::create(out)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
    }
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(out, size).into_drawing_area();
            render(kind, w, chunks, &root)?;
            root.present().context("writing the figure")?;
        }
        "png" => {
            let root = BitMapBackend::new(out, size).into_drawing_area();
            render(kind, w, chunks, &root)?;
            root.present().context("writing the figure")?;
        }
        _ => bail!(
            "{}: the figure file must end in .svg or .png",
            out.display()
        ),
    }
    Ok(())
}

fn render<DB: DrawingBackend>(
    kind: &str,
    w: &Run,
    chunks: &[usize],
    root: &DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    match kind {
        "tau" => tau(w, root),
        _ => profiles(w, chunks, root),
    }
}

pub(crate) fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing: {e:?}")
}

fn tau<DB: DrawingBackend>(w: &Run, root: &DrawingArea<DB, Shift>) -> Result<()> {
    let g = w.shape.geometry()?;
    let (n, m, k) = (g.n(), g.m, g.k);
    let level = if m == 1 {
        "RAID-5".to_string()
    } else if m == 2 {
        "RAID-6".to_string()
    } else {
        format!("{k}+{m}")
    };
    let root = root
        .titled(&format!("Increased disk I/Os vs. data chunks touched (τ), {level}, n = {n} (Li & Lee Fig. 6, from the planner)"), ("sans-serif", 18))
        .map_err(err)?;
    let panels = root.split_evenly((1, 2));
    for (panel, (op, name)) in panels
        .iter()
        .zip([(Op::Read, "user read"), (Op::Write, "user write")])
    {
        let mut ymax: f64 = 10.0;
        for (s, _) in SCHEMES {
            for fr in [false, true] {
                for (_, y) in tau_curve(s, op, n, m, fr) {
                    ymax = ymax.max(y);
                }
            }
        }
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(0.8f64..k as f64 + 0.2, 0f64..(ymax * 1.1).ceil())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("τ (data chunks touched)")
            .y_desc("increased disk I/Os (%)")
            .x_labels(k)
            .x_label_formatter(&|x| {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "an axis tick between 0.8 and k + 0.2 (k data chunks)"
                )]
                let tick = x.round() as i64;
                format!("{tick}")
            })
            .draw()
            .map_err(err)?;
        for (si, (s, color)) in SCHEMES.into_iter().enumerate() {
            // Curves often coincide: earlier schemes are drawn wider so later ones show inside.
            #[allow(
                clippy::cast_possible_truncation,
                reason = "SCHEMES is a short constant list"
            )]
            let width = 2 * (SCHEMES.len() - si) as u32;
            for fr in [false, true] {
                let pts: Vec<(f64, f64)> = tau_curve(s, op, n, m, fr)
                    .into_iter()
                    .map(|(t, y)| (t as f64, y))
                    .collect();
                let style = if fr {
                    color.stroke_width(width)
                } else {
                    color.mix(0.45).stroke_width(width)
                };
                let label = format!(
                    "{} ({})",
                    s.name(),
                    if fr { "first-read" } else { "subsequent-read" }
                );
                let series = chart
                    .draw_series(LineSeries::new(pts.clone(), style))
                    .map_err(err)?;
                series
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                if fr {
                    chart
                        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                        .map_err(err)?;
                } else {
                    chart
                        .draw_series(
                            pts.iter()
                                .map(|p| Cross::new(*p, 4, color.mix(0.55).stroke_width(2))),
                        )
                        .map_err(err)?;
                }
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .position(if op == Op::Write {
                SeriesLabelPosition::UpperLeft
            } else {
                SeriesLabelPosition::UpperRight
            })
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

fn profiles<DB: DrawingBackend>(
    w: &Run,
    chunks: &[usize],
    root: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let g0 = w.shape.geometry()?;
    let requests = match &w.source {
        Source::Profile { requests, .. } => *requests,
        Source::Trace { .. } => 1_000_000,
    };
    let root = root
        .titled(
            &format!(
                "Increased disk I/Os per workload profile, RAID {}+{} (n = {}), synthetic Table III workloads ({} requests each; Li & Lee Fig. 8 layout)",
                g0.k, g0.m, g0.n(), requests
            ),
            ("sans-serif", 16),
        )
        .map_err(err)?;
    let panels = root.split_evenly((chunks.len().max(1), 1));
    for (panel, &chunk) in panels.iter().zip(chunks) {
        let mut values: Vec<Vec<f64>> = Vec::new();
        for p in PROFILES {
            let mut wp = w.clone();
            wp.shape.chunk_bytes = chunk as u64;
            wp.schemes = Scheme::ALL.to_vec();
            wp.source = Source::Profile {
                profile: p,
                requests,
                seed: match &w.source {
                    Source::Profile { seed, .. } => *seed,
                    Source::Trace { .. } => 1,
                },
            };
            let (r, _) = stripeguard_sim::run(&wp, &mut |_, _| {})?;
            values.push(
                SCHEMES
                    .iter()
                    .map(|(s, _)| r.increase_pct(*s).unwrap_or(0.0))
                    .collect(),
            );
        }
        let ymax = values.iter().flatten().cloned().fold(10.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("chunk size {} KiB", chunk / 1024),
                ("sans-serif", 15),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..PROFILES.len() as f64, 0f64..(ymax * 1.15).ceil())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(PROFILES.len() * 2 + 1)
            .x_label_formatter(&|x| {
                // The profile whose bar is centred on this tick, if any.
                match PROFILES
                    .iter()
                    .enumerate()
                    .find(|&(i, _)| (x - 0.5 - i as f64).abs() < 1e-6)
                {
                    Some((_, p)) => p.name.to_string(),
                    None => String::new(),
                }
            })
            .y_desc("increased disk I/Os (%)")
            .draw()
            .map_err(err)?;
        let bar = 0.8 / SCHEMES.len() as f64;
        for (si, (s, color)) in SCHEMES.iter().enumerate() {
            let bars = values.iter().enumerate().map(|(pi, v)| {
                let x0 = pi as f64 + 0.1 + si as f64 * bar;
                Rectangle::new([(x0, 0.0), (x0 + bar * 0.9, v[si])], color.filled())
            });
            let c = *color;
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(s.name())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}
