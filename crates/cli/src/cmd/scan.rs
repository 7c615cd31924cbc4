//! `stripeguard scan`: every array whose members are among the candidates (the paths and globs
//! given, or the configuration file's, or every block device), one line each; `--config` prints
//! a configuration file for them.

use crate::exit;
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;
use stripeguard_ops::config::Config;
use stripeguard_ops::FoundArray;

#[derive(Args)]
pub struct ScanArgs {
    /// Paths, globs (quote them: '/dev/loop*') or NBD URIs to read. Default: the configuration
    /// file's `devices` and member URIs, or every block device.
    candidates: Vec<String>,
    /// Print a configuration file (/etc/stripeguard/stripeguard.conf) naming what was found,
    /// with the globs scanned as its `devices`.
    #[arg(long)]
    config: bool,
    /// Print JSON: one array, an object per array with its members by slot.
    #[arg(long)]
    json: bool,
    /// Also list each member and its standing.
    #[arg(long, short)]
    verbose: bool,
}

pub fn run(a: ScanArgs) -> Result<ExitCode> {
    let (_, cfg) = Config::load(None).map_err(anyhow::Error::msg)?;
    let (candidates, notes) = stripeguard_ops::candidates_noted(&a.candidates, &cfg);
    for n in &notes {
        eprintln!("stripeguard: note: {n}");
    }
    let (found, unread) = stripeguard_ops::scan_noted(&candidates, &cfg);
    if a.json {
        // Each array with its health (`complete`, `degraded`, `ambiguous`, ...), and the
        // configured arrays of which nothing was found, as `missing` (a default scan only).
        let mut all: Vec<serde_json::Value> = Vec::new();
        for f in &found {
            let mut v = serde_json::to_value(f)?;
            v["health"] = f.health().into();
            all.push(v);
        }
        if a.candidates.is_empty() {
            let known: Vec<[u8; 16]> = found.iter().map(|f| f.uuid_bytes()).collect();
            for (n, u) in stripeguard_ops::configured_missing(&cfg, &known) {
                all.push(serde_json::json!({
                    "name": n,
                    "uuid": stripeguard_format::hex(&u),
                    "health": "missing",
                    "slots": [],
                }));
            }
        }
        println!("{}", serde_json::to_string(&all)?);
    } else if a.config {
        print!("{}", config_for(&a.candidates, &found, &cfg));
    } else {
        if found.is_empty() {
            eprintln!(
                "stripeguard: no array member among {} candidate(s)",
                candidates.len()
            );
        }
        for f in &found {
            println!("{}", line(f));
            if a.verbose {
                for (i, s) in f.slots.iter().enumerate() {
                    match s {
                        Some(m) => println!(
                            "  member {i}: {} (event {}, {})",
                            m.path.display(),
                            m.event_count,
                            m.standing
                        ),
                        None => println!(
                            "  member {i}: NOT FOUND (no candidate read holds it; {} candidate(s) could not be read{})",
                            unread.len(),
                            if unread.is_empty() { "" } else { ", listed below" }
                        ),
                    }
                }
                for m in &f.ambiguous {
                    println!(
                        "  AMBIGUOUS: {} also names member {} at the same event count {}",
                        m.path.display(),
                        m.index,
                        m.event_count
                    );
                }
                for sp in &f.spares {
                    println!(
                        "  hot spare: {} ({}{})",
                        sp.path.display(),
                        sp.uuid,
                        if sp.listed {
                            ""
                        } else {
                            "; NOT LISTED by the array: `add-spare` takes it again"
                        }
                    );
                }
                for m in &f.ignored {
                    println!(
                        "  ignored: {} (names member {}, event {}: an older copy)",
                        m.path.display(),
                        m.index,
                        m.event_count
                    );
                }
            }
        }
    }
    if a.verbose && !a.json && !a.config {
        for (p, why) in &unread {
            // (Open errors already start with the path.)
            let p = p.display().to_string();
            if why.starts_with(&p) {
                println!("not read: {why}");
            } else {
                println!("not read: {p}: {why}");
            }
        }
    }
    // Configured arrays of which nothing was found (a default scan only).
    let mut missing = 0;
    if a.candidates.is_empty() && !a.json && !a.config {
        for (n, u) in stripeguard_ops::configured_missing(
            &cfg,
            &found.iter().map(|f| f.uuid_bytes()).collect::<Vec<_>>(),
        ) {
            println!(
                "{n} {} MISSING: no member found among the configured devices",
                stripeguard_format::hex(&u)
            );
            missing += 1;
        }
    }
    // A path given that is not there is a usage error (exit 2), as for every command; the
    // rest was still scanned and printed.
    if !a.candidates.is_empty() && notes.iter().any(|n| n.ends_with(": no such file")) {
        return Ok(ExitCode::from(exit::USAGE));
    }
    // As `zpool status -x`: 0 when every array found is complete.
    let attention = missing > 0 || found.iter().any(|f| f.health() != "complete");
    Ok(ExitCode::from(if attention {
        exit::FOUND
    } else {
        exit::OK
    }))
}

/// `NAME UUID raid6 4+2 hybrid-seq 6/6 members complete clean`.
fn line(f: &FoundArray) -> String {
    let level = match (f.parity_chunks, f.code.as_str()) {
        (1, _) => "raid5".to_string(),
        (2, "raid6") => "raid6".to_string(),
        (_, code) => code.to_string(),
    };
    format!(
        "{} {} {level} {}+{} {} {}/{} members {} {}",
        if f.name.is_empty() { "-" } else { &f.name },
        f.uuid,
        f.data_chunks,
        f.parity_chunks,
        f.scheme,
        f.current(),
        f.members,
        f.health(),
        f.state
    )
}

/// A configuration naming every array found (by the name it has, or `array-UUID8`), with
/// the globs scanned, and NBD members (which no glob finds) listed.
fn config_for(given: &[String], found: &[FoundArray], cfg: &Config) -> String {
    let mut out = Config {
        devices: if given.is_empty() {
            cfg.devices.clone()
        } else {
            // Absolute: the file is read from wherever the service runs.
            let here = std::env::current_dir().unwrap_or_default();
            given
                .iter()
                .filter(|g| !g.contains("://"))
                .map(|g| here.join(g).to_string_lossy().into_owned())
                .collect()
        },
        arrays: Default::default(),
    };
    for f in found {
        let mut name = if f.name.is_empty() {
            format!("array-{}", &f.uuid[..8])
        } else {
            f.name.clone()
        };
        if out.arrays.contains_key(&name) {
            // Two arrays of one name: the file keys arrays by name, so the second is written
            // under a name of its own (its superblock keeps its name; `--array` takes either).
            // (Names are ASCII, at most 32 bytes: cut to leave room for `-UUID8`.)
            let other = format!("{}-{}", &name[..name.len().min(23)], &f.uuid[..8]);
            eprintln!(
                "stripeguard: note: two arrays are called {name:?}: the one with uuid {} is written as [array.{other}]",
                f.uuid
            );
            name = other;
        }
        let mut a = cfg.array(&name).map(|(_, a)| a.clone()).unwrap_or_default();
        a.uuid = Some(f.uuid.clone());
        let nbd: Vec<String> = f
            .slots
            .iter()
            .flatten()
            .map(|m| m.path.display().to_string())
            .filter(|p| p.contains("://"))
            .collect();
        for u in nbd {
            if !a.members.contains(&u) {
                a.members.push(u);
            }
        }
        out.arrays.insert(name, a);
    }
    format!(
        "# stripeguard configuration (stripeguard scan --config){}\n{}",
        if found.is_empty() {
            ": no array found"
        } else {
            ""
        },
        out.to_text()
    )
}
