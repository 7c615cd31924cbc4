//! `stripeguard metrics`: Prometheus metrics of every array found (held ones live from their
//! holders), on standard output or as node_exporter's textfile collector wants them: one file,
//! `DIR/stripeguard.prom`, replaced atomically (a scrape never sees half of it).

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_ops::config::Config;
use stripeguard_ops::metrics::{from_scan, render, ArrayMetrics};

#[derive(Args)]
pub struct MetricsArgs {
    /// Write DIR/stripeguard.prom (node_exporter --collector.textfile.directory=DIR) instead
    /// of printing.
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
}

pub fn run(a: MetricsArgs) -> Result<ExitCode> {
    let (_, cfg) = Config::load(None).map_err(anyhow::Error::msg)?;
    let found = stripeguard_ops::scan(&stripeguard_ops::candidates(&[], &cfg), &cfg);
    let all: Vec<ArrayMetrics> = found
        .iter()
        .map(|f| match stripeguard_ops::ask_holder(&f.uuid_bytes()) {
            Ok(live) => {
                let mut m = ArrayMetrics::from_live(&live, None);
                // The same counts as when nobody holds it: from the durable log.
                let members = stripeguard_ops::open_member_paths(&f.member_paths(), false);
                stripeguard_ops::metrics::log_totals(&mut m, &members);
                m.level = stripeguard_ops::metrics::level(f.parity_chunks, &f.code, f.data_chunks);
                m.scheme = f.scheme.clone();
                if m.name.is_empty() {
                    m.name = f.name.clone();
                }
                m
            }
            Err(_) => from_scan(f),
        })
        .collect();
    // A configured array none of whose members is found is there too, unhealthy: its absence
    // is what an alert must see.
    let mut all = all;
    let known: Vec<[u8; 16]> = found.iter().map(|f| f.uuid_bytes()).collect();
    for (name, uuid) in stripeguard_ops::configured_missing(&cfg, &known) {
        all.push(ArrayMetrics {
            name,
            uuid: stripeguard_format::hex(&uuid),
            states: vec!["missing".into()],
            healthy: false,
            ..ArrayMetrics::default()
        });
    }
    let text = render(&all);
    match &a.textfile {
        None => print!("{text}"),
        Some(dir) => {
            // Not made when missing: node_exporter reads one directory, and a mistyped one
            // made here would hold metrics nobody scrapes.
            if !dir.is_dir() {
                anyhow::bail!(
                    "{}: no such directory (give node_exporter's --collector.textfile.directory)",
                    dir.display()
                );
            }
            // (Named by process: two runs at once each rename their own whole file.)
            let tmp = dir.join(format!(".stripeguard.prom.{}.tmp", std::process::id()));
            std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, dir.join("stripeguard.prom")))
                .with_context(|| format!("cannot write {}/stripeguard.prom", dir.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
