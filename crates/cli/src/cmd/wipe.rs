//! `stripeguard wipe`: remove members' stripeguard signatures (ops::wipe_member).

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct WipeArgs {
    /// Member files, block devices or NBD URIs to wipe.
    #[arg(required = true)]
    devices: Vec<PathBuf>,
    /// Print JSON: one array, an object per device.
    #[arg(long)]
    json: bool,
}

pub fn run(a: WipeArgs) -> Result<ExitCode> {
    // Every device checked first: one that is not a member, or is held, stops the command
    // before anything is wiped.
    for d in &a.devices {
        stripeguard_ops::wipe_preflight(d)?;
    }
    let mut all = Vec::new();
    for d in &a.devices {
        let w = stripeguard_ops::wipe_member(d)?;
        if !a.json {
            println!(
                "wiped {}: it was member {} of array {}{}; {} bytes of metadata zeroed, its data area left as it was",
                w.path,
                w.member_index.map_or("?".into(), |i| i.to_string()),
                w.array_uuid.as_deref().unwrap_or("(superblock unreadable)"),
                if w.name.is_empty() { String::new() } else { format!(" ({})", w.name) },
                w.bytes
            );
        }
        all.push(w);
    }
    if a.json {
        println!("{}", serde_json::to_string(&all)?);
    }
    Ok(ExitCode::SUCCESS)
}
