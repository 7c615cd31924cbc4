//! `stripeguard clear`: zero-fill the blocks of a stripe that a resync listed as untrusted, so
//! the stripe is whole again.

use crate::cmd::shared::{assemble, MembersArgs};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use stripeguard_ops::with_control_socket;

#[derive(Args)]
pub struct ClearArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The stripe whose listed untrusted blocks to zero-fill (`status` lists them).
    #[arg(long)]
    stripe: u64,
    /// Print the ranges cleared as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(mut a: ClearArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    let array = assemble(&a.array, true)?;
    let cleared = with_control_socket(&array, || array.clear_untrusted(a.stripe))?;
    if a.json {
        println!("{}", json!({"stripe": a.stripe, "cleared": cleared}));
    } else {
        for r in &cleared {
            println!(
                "stripe {}: data chunk {}: {} bytes from byte {} zero-filled",
                r.stripe, r.position, r.len, r.offset
            );
        }
    }
    array.close()?;
    Ok(ExitCode::from(crate::exit::OK))
}
