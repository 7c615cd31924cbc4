//! `stripeguard grow`: more stripes on members that have room for them (each replaced by a
//! bigger one, or its file extended), here or in the process holding the array while it serves;
//! or, with `--add`, more data members by a reshape (here, or online in the `serve` holding
//! the array), and `--continue` to finish an interrupted one.

use crate::cmd::shared::{assemble, assemble_or_holder, Held, MembersArgs};
use crate::exit;
use crate::progress::{count_bar, updater};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_engine::ReshapeTo;
use stripeguard_ops::{
    ask_holder_grow, ask_holder_reshape, continue_reshape_paths, follow_holder_grow,
    follow_holder_reshape, grow_array, grown_line, reshaped_line, Added, Confirmations, GrowTo,
    ReshapeRequest,
};

#[derive(Args)]
pub struct GrowArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The array's new size in bytes (K, M, G, T suffixes; rounded down to whole stripes), or
    /// `max`: as much as every member has room for.
    #[arg(long, default_value = "max", value_parser = parse_to, conflicts_with_all = ["add", "continue_", "level"])]
    size: GrowTo,
    /// Add these files, block devices or NBD exports as data members: a reshape moves the data
    /// in place from k to k + (how many) data chunks per stripe, crash-safe (an interrupted one
    /// is finished by `--continue`). When `serve` holds the array, it reshapes it while its
    /// clients go on reading and writing (online). A file that does not exist is made at the
    /// members' size.
    #[arg(long, num_args = 1.., value_name = "NEW")]
    add: Vec<PathBuf>,
    /// `6` with --add (one NEW): turn RAID-5 (one xor parity) into RAID-6, NEW holding the
    /// second parity. `5` (no --add): turn RAID-6 into RAID-5, the last member leaving the
    /// array (its superblock erased). Either way the data moves into room past it first, so
    /// every member needs a few stripes of room beyond the array (extend the files or devices;
    /// do not `grow --size` into it).
    #[arg(long, value_parser = parse_level, conflicts_with = "continue_")]
    level: Option<u8>,
    /// Finish an interrupted reshape: give every member, old and added, in order.
    #[arg(long = "continue", conflicts_with = "add")]
    continue_: bool,
    /// With --add: take NEW even though it is a member of another stripeguard array (that
    /// array loses the member).
    #[arg(long, value_name = "NEW")]
    force_take: Vec<PathBuf>,
    /// With --add: overwrite NEW even though it holds a file system, partition table or other
    /// data.
    #[arg(long, value_name = "NEW")]
    force_overwrite: Vec<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_level(s: &str) -> Result<u8, String> {
    match s {
        "5" => Ok(5),
        "6" => Ok(6),
        _ => Err("only --level 6 (RAID-5 to RAID-6, with --add NEW) and --level 5 (RAID-6 to RAID-5) are built".into()),
    }
}

fn parse_to(s: &str) -> Result<GrowTo, String> {
    if s == "max" {
        return Ok(GrowTo::Max);
    }
    crate::units::parse_bytes(s).map(GrowTo::Bytes)
}

/// What NBD clients of a holder must do to see the new size.
const RECONNECT: &str = "clients of `stripeguard serve` see the new size when they connect again (NBD has no resize notification)";

/// Follow the holder's work with a progress bar labelled `label` until it finishes.
fn follow_with_bar<T>(
    label: &str,
    follow: impl FnOnce(&mut dyn FnMut(u64, u64)) -> std::result::Result<T, String>,
) -> Result<T> {
    let bar = count_bar(label);
    let result = follow(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    result.map_err(anyhow::Error::msg)
}

/// `grow` of an array another process holds: ask it over its control socket, then follow its
/// progress in its status until it finishes.
fn via_holder(a: &GrowArgs, uuid: &[u8; 16]) -> Result<ExitCode> {
    ask_holder_grow(uuid, a.size)
        .map_err(|e| anyhow::anyhow!("the process holding the array refused to grow it: {e}"))?;
    let (g, _) = follow_with_bar("initialising new stripes", |p| follow_holder_grow(uuid, p))?;
    let outcome = g.outcome.clone().unwrap_or_default();
    if !g.ok {
        bail!("{outcome}");
    }
    if a.json {
        println!("{}", json!({"via_holder": true, "grow": g}));
    } else {
        println!("{outcome}");
        if g.to_bytes != g.from_bytes {
            println!("{RECONNECT}");
        }
    }
    Ok(ExitCode::from(exit::OK))
}

/// Print what a reshape did.
fn print_reshaped(a: &GrowArgs, r: &stripeguard_engine::Reshaped) {
    if a.json {
        println!("{}", json!({ "reshape": r }));
    } else {
        println!("{}", reshaped_line(r));
    }
}

/// `grow --continue`: finish an interrupted reshape.
fn continue_reshape(a: &GrowArgs) -> Result<ExitCode> {
    let bar = count_bar("reshaping (new stripes)");
    let result = continue_reshape_paths(&a.array.members, a.array.direct, &mut updater(&bar));
    bar.finish_and_clear();
    print_reshaped(a, &result?);
    Ok(ExitCode::from(exit::OK))
}

/// `grow --add NEW...`: the reshape onto added members.
fn reshape(a: &GrowArgs) -> Result<ExitCode> {
    let array = match assemble_or_holder(&a.array, true)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => return reshape_via_holder(a, &uuid),
    };
    let confirm = Confirmations {
        take: a.force_take.clone(),
        overwrite: a.force_overwrite.clone(),
        ..Confirmations::default()
    };
    let added = match Added::open(&array, &a.add, a.array.direct, &confirm) {
        Ok(added) => added,
        Err(e) => {
            let _ = array.close();
            return Err(e.into());
        }
    };
    let bar = count_bar("reshaping (new stripes)");
    let to = match a.level {
        Some(5) => ReshapeTo::Raid5,
        Some(_) => ReshapeTo::Raid6,
        None => ReshapeTo::AddData,
    };
    let result = added.run(*array, to, &mut updater(&bar));
    bar.finish_and_clear();
    print_reshaped(a, &result?);
    Ok(ExitCode::from(exit::OK))
}

/// `grow --add` of an array a `serve` holds: it reshapes the array while it serves it; this
/// follows its progress in its status until it finishes.
fn reshape_via_holder(a: &GrowArgs, uuid: &[u8; 16]) -> Result<ExitCode> {
    // The holder opens NEW by the path given here: made absolute from this directory (an NBD
    // URI as given: found by an outside test, a URI was made a path under this directory).
    let abs = |ps: &[PathBuf]| -> Vec<PathBuf> {
        ps.iter()
            .map(|p| PathBuf::from(stripeguard_ops::spares::spare_hint(p)))
            .collect()
    };
    let req = ReshapeRequest {
        add: abs(&a.add),
        level: a.level,
        force_take: abs(&a.force_take),
        force_overwrite: abs(&a.force_overwrite),
    };
    let first = a.array.members.first();
    let before = first.and_then(|m| stripeguard_ops::settled_geometry(m));
    ask_holder_reshape(uuid, &req)
        .map_err(|e| anyhow::anyhow!("the process holding the array refused to reshape it: {e}"))?;
    let followed = follow_with_bar("reshaping while serving (new stripes)", |p| {
        follow_holder_reshape(uuid, p)
    });
    let (r, _) = match followed {
        Ok(r) => r,
        Err(e) => {
            // A holder stopped by SIGTERM finishes the reshape first: say so, not "continue".
            let after = first.and_then(|m| stripeguard_ops::settled_geometry(m));
            if let (Some(b), Some((n, k, m))) = (before, after) {
                if b != (n, k, m) {
                    println!(
                        "the holder stopped after the reshape finished: the array now has {n} members, {k}+{m} (data + parity chunks per stripe); serve it again"
                    );
                    return Ok(ExitCode::from(exit::OK));
                }
            }
            return Err(e);
        }
    };
    let outcome = r.outcome.clone().unwrap_or_default();
    if !r.ok {
        bail!("{outcome}");
    }
    if a.json {
        println!("{}", json!({"via_holder": true, "reshape": r.reshaped}));
    } else {
        println!("{outcome}");
        println!("{RECONNECT}");
    }
    Ok(ExitCode::from(exit::OK))
}

pub fn run(mut a: GrowArgs) -> Result<ExitCode> {
    if a.continue_ {
        if a.array.array.is_none() {
            // Given by path: in the order given (a reshape's members are its old and added
            // ones, which an ordering by superblocks from before it would mix).
            return continue_reshape(&a);
        }
        a.array.resolve(false)?;
        return continue_reshape(&a);
    }
    a.array.resolve(false)?;
    // A member out refuses the grow: seen read-only first, so the refusal writes nothing (a
    // writable assembly would record the absent member as gone).
    if let Ok(look) = assemble(&a.array, false) {
        let out: Vec<String> = look
            .health()
            .into_iter()
            .filter_map(|h| {
                h.failed
                    .map(|why| format!("member {} ({}): {why}", h.index, h.name))
            })
            .collect();
        drop(look);
        if !out.is_empty() {
            bail!(
                "a member is out, so the array cannot grow (a re-add needs the write-intent bits of what it missed): {}; bring it back or `replace` it first",
                out.join("; ")
            );
        }
    }
    match (a.level, a.add.is_empty()) {
        (Some(6), true) => {
            bail!("--level 6 needs --add NEW (the member that holds the second parity)")
        }
        (Some(5), false) => {
            bail!("--level 5 adds no member (the last member leaves the array): drop --add")
        }
        (Some(_), _) | (None, false) => return reshape(&a),
        (None, true) => {}
    }
    // Held by a running `serve`: it grows the array while it goes on serving.
    let array = match assemble_or_holder(&a.array, true)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => return via_holder(&a, &uuid),
    };
    let bar = count_bar("initialising new stripes");
    let result = grow_array(&array, a.size, &mut updater(&bar));
    bar.finish_and_clear();
    let grown = match result {
        Ok(g) => g,
        Err(e) => {
            let _ = array.close();
            return Err(e.into());
        }
    };
    let small = stripeguard_ops::spares::spare_states(&array)
        .into_iter()
        .filter(|s| s.why.is_some())
        .collect::<Vec<_>>();
    if a.json {
        println!(
            "{}",
            json!({"from_stripes": grown.from_stripes, "to_stripes": grown.to_stripes,
                   "capacity_bytes": grown.capacity_bytes, "as_zero_stripes": grown.as_zero_stripes,
                   "spares_unusable": small})
        );
    } else {
        match (a.size, grown.from_stripes == grown.to_stripes) {
            (GrowTo::Bytes(_), true) => println!(
                "the array already has {} stripes ({} bytes), the size asked for: nothing to grow",
                grown.to_stripes, grown.capacity_bytes
            ),
            _ => println!("{}", grown_line(&grown, &array)),
        }
        for s in &small {
            eprintln!(
                "stripeguard: warning: hot spare {} cannot take a member's place any more: {} (`remove-spare` it and `add-spare` a bigger one)",
                s.path,
                s.why.as_deref().unwrap_or_default()
            );
        }
    }
    array.close()?;
    Ok(ExitCode::from(exit::OK))
}
