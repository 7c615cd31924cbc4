//! `stripeguard list`: every array on this host, held or not, one line each (issue 36 §2).

use crate::exit;
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;
use stripeguard_ops::config::Config;

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON: one array, an object per array.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ListArgs) -> Result<ExitCode> {
    let (_, cfg) = Config::load(None).map_err(anyhow::Error::msg)?;
    let (all, removed) = stripeguard_ops::list(&cfg);
    for p in &removed {
        eprintln!(
            "stripeguard: removed the control socket {} (its holder is gone)",
            p.display()
        );
    }
    if a.json {
        println!("{}", serde_json::to_string(&all)?);
    } else {
        if all.is_empty() {
            println!("no arrays");
        }
        for l in &all {
            let who = match &l.holder {
                Some((pid, cmd)) => format!("held by process {pid} ({cmd})"),
                None => "not held".into(),
            };
            println!(
                "{} {} {}: {}",
                if l.name.is_empty() { "-" } else { &l.name },
                l.uuid,
                who,
                l.states.join(", ")
            );
            if let Some(p) = &l.progress {
                println!("  {p}");
            }
            if !l.members.is_empty() {
                println!("  members: {}", l.members.join(" "));
            }
        }
    }
    // As `zpool status -x`: 0 when every array is healthy.
    let attention = all.iter().any(|l| l.attention);
    Ok(ExitCode::from(if attention {
        exit::FOUND
    } else {
        exit::OK
    }))
}
