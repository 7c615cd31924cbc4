//! `stripeguard add-spare` and `remove-spare`: the hot spares an array lists (FORMAT.md §2.11),
//! here or through the process holding the array.

use crate::cmd::shared::{assemble_or_holder, Held, MembersArgs};
use crate::exit;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use stripeguard_ops::spares::{self, ask_holder_spares, SpareState};
use stripeguard_ops::{ask_holder, Confirmations};

#[derive(Args)]
pub struct AddSpareArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The device (or file; created at the member size when it does not exist) to keep as a hot
    /// spare: labelled for this array, rebuilt in place of a member that stays out.
    #[arg(long, value_name = "DEV")]
    spare: PathBuf,
    /// Seconds a member stays out before a spare takes its place (kept for the array).
    #[arg(long, value_name = "SECONDS")]
    delay: Option<u32>,
    /// Units found silently wrong on one member at which a spare takes its place (0: never).
    #[arg(long, value_name = "N")]
    threshold: Option<u32>,
    /// DEV holds a filesystem or other signature libblkid finds: destroy it (give DEV again).
    #[arg(long, value_name = "DEV")]
    force_overwrite: Option<PathBuf>,
    /// DEV is a member or spare of another stripeguard array: take it (give DEV again).
    #[arg(long, value_name = "DEV")]
    force_take: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RemoveSpareArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The spare to remove: its path, or its uuid as `status` lists it. Its label is zeroed
    /// when the device is there.
    #[arg(long, value_name = "DEV|UUID")]
    spare: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// An absolute path (the holder runs in its own working directory), or the URI as given.
fn absolute(p: &Path) -> Result<String> {
    let s = spares::spare_hint(p);
    if s.contains('\n') {
        bail!("{} holds a newline; rename it", p.display());
    }
    Ok(s)
}

fn print_spares(list: &[SpareState], json: bool, what: serde_json::Value) {
    if json {
        println!("{}", json!({"result": what, "spares": list}));
        return;
    }
    if list.is_empty() {
        println!("the array lists no hot spare");
    }
    for s in list {
        println!(
            "hot spare {} ({}){}",
            s.path,
            s.uuid,
            match (s.found, &s.why) {
                (true, _) => String::new(),
                (false, Some(why)) => format!(": not usable: {why}"),
                (false, None) => ": not there (the array looks for it at that path)".into(),
            }
        );
    }
}

/// The holder's spares after a request, from its status.
fn holder_spares(uuid: &[u8; 16]) -> Vec<SpareState> {
    ask_holder(uuid).map(|l| l.spares).unwrap_or_default()
}

pub fn add(mut a: AddSpareArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    for (flag, v) in [
        ("--force-overwrite", &a.force_overwrite),
        ("--force-take", &a.force_take),
    ] {
        if v.as_ref().is_some_and(|p| p != &a.spare) {
            bail!("{flag} does not name the device given with --spare");
        }
    }
    if a.array.members.contains(&a.spare) {
        bail!("{} is a member of the array", a.spare.display());
    }
    let array = match assemble_or_holder(&a.array, true)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => {
            let path = absolute(&a.spare)?;
            let flags = match (a.force_overwrite.is_some(), a.force_take.is_some()) {
                (true, true) => "--force-overwrite --force-take ",
                (true, false) => "--force-overwrite ",
                (false, true) => "--force-take ",
                (false, false) => "",
            };
            ask_holder_spares(&uuid, &format!("add-spare {flags}{path}"))
                .map_err(|e| anyhow::anyhow!("the process holding the array refused: {e}"))?;
            if a.delay.is_some() || a.threshold.is_some() {
                let d = stripeguard_format::SparePolicy::default();
                ask_holder_spares(
                    &uuid,
                    &format!(
                        "spare-policy {} {}",
                        a.delay.unwrap_or(d.delay_seconds),
                        a.threshold.unwrap_or(d.error_threshold)
                    ),
                )
                .map_err(anyhow::Error::msg)?;
            }
            print_spares(&holder_spares(&uuid), a.json, json!({"added": path}));
            return Ok(ExitCode::from(exit::OK));
        }
    };
    let confirm = Confirmations {
        overwrite: a.force_overwrite.iter().cloned().collect(),
        take: a.force_take.iter().cloned().collect(),
        take_all: false,
    };
    let result = spares::add_spare(&array, &a.spare, a.array.direct, &confirm).and_then(|_| {
        if a.delay.is_none() && a.threshold.is_none() {
            return Ok(());
        }
        let now = array.spare_policy();
        array.set_spare_policy(stripeguard_format::SparePolicy {
            delay_seconds: a.delay.unwrap_or(now.delay_seconds),
            error_threshold: a.threshold.unwrap_or(now.error_threshold),
        })
    });
    if let Err(e) = result {
        let _ = array.close();
        return Err(e.into());
    }
    let list = spares::spare_states(&array);
    array.close()?;
    print_spares(
        &list,
        a.json,
        json!({"added": spares::spare_hint(&a.spare)}),
    );
    Ok(ExitCode::from(exit::OK))
}

pub fn remove(mut a: RemoveSpareArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    let array = match assemble_or_holder(&a.array, true)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => {
            let which = if Path::new(&a.spare).exists() {
                absolute(Path::new(&a.spare))?
            } else {
                a.spare.clone()
            };
            ask_holder_spares(&uuid, &format!("remove-spare {which}"))
                .map_err(|e| anyhow::anyhow!("the process holding the array refused: {e}"))?;
            print_spares(&holder_spares(&uuid), a.json, json!({"removed": which}));
            return Ok(ExitCode::from(exit::OK));
        }
    };
    let gone = spares::remove_spare(&array, &a.spare);
    let gone = match gone {
        Ok(g) => g,
        Err(e) => {
            let _ = array.close();
            return Err(e).context("remove-spare");
        }
    };
    let list = spares::spare_states(&array);
    array.close()?;
    if !a.json {
        println!(
            "removed hot spare {} ({})",
            gone.hint,
            stripeguard_format::hex(&gone.uuid)
        );
    }
    print_spares(
        &list,
        a.json,
        json!({"removed": stripeguard_format::hex(&gone.uuid)}),
    );
    Ok(ExitCode::from(exit::OK))
}
