//! `stripeguard status`: an array's geometry, members, last scrub and per-member fault counts,
//! with `--check` a read-only check of every stripe; an array another process holds is asked.

use crate::cmd::live::{live_status, print_spares, print_untrusted};
use crate::cmd::shared::{ago, counters_json, print_events, MembersArgs};
use crate::exit;
use crate::progress::{count_bar, updater};
use crate::units::format_size;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use stripeguard_disk::DiskError;
use stripeguard_engine::{scrub, Checkpoint, Counters, EngineError, ScrubOptions};
use stripeguard_format::hex;
use stripeguard_ops::{array_states, ask_holder, logged_by_member, status_verdict};

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(super) array: MembersArgs,
    /// Also read and check every stripe (read-only: reports damage, repairs nothing).
    #[arg(long)]
    pub(super) check: bool,
    /// Print JSON.
    #[arg(long)]
    pub(super) json: bool,
}

pub fn run(mut a: StatusArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    super::shared::check_forced(&a.array, false)?;
    let array = match super::shared::assemble_quietly(&a.array) {
        Ok(array) => array,
        Err(EngineError::Disk(DiskError::Locked { name, holder })) => {
            return live_status(&a.array, a.check, a.json, &name, holder);
        }
        Err(e) => {
            // An array that cannot be assembled is still shown: what each member says.
            if a.json {
                let members: Vec<serde_json::Value> = a
                    .array
                    .members
                    .iter()
                    .map(|p| match stripeguard_ops::examine(p) {
                        Ok(x) => serde_json::to_value(x).unwrap_or_default(),
                        Err(e) => json!({"path": p.display().to_string(), "error": e.to_string()}),
                    })
                    .collect();
                println!(
                    "{}",
                    json!({"assembled": false, "state": "failed", "error": e.to_string(), "members": members})
                );
            } else {
                describe_members(&a.array.members);
            }
            return Err(e.into());
        }
    };
    // Members no flock reaches (NBD exports): the owner record says who holds the array, and a
    // holder on this host answers over its control socket.
    if let Some(o) = array
        .owner()
        .filter(|o| o.held && o.pid != std::process::id())
    {
        if ask_holder(&array.superblock().array_uuid).is_ok() {
            drop(array);
            return live_status(&a.array, a.check, a.json, "the array", Some(o.pid));
        }
    }
    for h in array.health() {
        if let Some(why) = &h.failed {
            eprintln!(
                "stripeguard: WARNING: member {} ({}) is out of the array: {why}",
                h.index, h.name
            );
        }
    }
    let sb = array.superblock().clone();
    let mut unrecoverable = Vec::new();
    let awaiting = array.awaiting_resync().len();
    if a.check {
        let bar = count_bar("checking stripes");
        let summary = scrub(&array, &ScrubOptions::default(), &mut updater(&bar));
        bar.finish_and_clear();
        unrecoverable = summary?.unrecoverable;
    }
    let last_scrub = array.last_scrub();
    let c = array.counters();
    let health = array.health();
    let untrusted = array.untrusted();
    // Per member and fault class, over the whole durable log (zpool status' error columns).
    let log = array.event_log();
    let by_member = logged_by_member(&log, health.len());
    let degraded = health.iter().filter(|h| h.failed.is_some()).count();
    let states = array_states(&array, awaiting);
    if a.json {
        println!(
            "{}",
            json!({"uuid": hex(&sb.array_uuid), "name": sb.name, "scheme": sb.scheme.name(), "code": sb.code.name(),
                   "data_chunks": sb.data_chunks, "parity_chunks": sb.parity_chunks,
                   "chunk_bytes": sb.chunk_bytes, "sector_bytes": sb.sector_bytes(), "stripes": sb.stripes,
                   "capacity_bytes": array.capacity_bytes(),
                   "state": states[0], "states": states,
                   "shutdown": format!("{:?}", sb.state).to_lowercase(), "members": health,
                   "cross_check": sb.cross_check, "event_count": sb.generation,
                   "write_journal": sb.write_journal, "journal_slots": sb.journal_slots,
                   "journal_devices": array.journal_devices().iter().map(|(n, state)| json!({"device": n, "state": state, "lost": *state == "lost"})).collect::<Vec<_>>(),
                   "member_table": array.member_table(), "last_scrub": last_scrub,
                   "awaiting_resync_stripes": awaiting, "logged_by_member": by_member,
                   "log_entries": log.entries.len(), "log_dropped": log.dropped,
                   "log_not_understood": log.not_understood,
                   "checked": a.check, "counters": counters_json(&c), "events": array.events(),
                   "untrusted": untrusted,
                   "zero_stripes": sb.zero_stripes.then(|| {
                       let (stripes, ranges) = array.zero_stripe_count();
                       json!({"stripes": stripes, "ranges": ranges})
                   }),
                   "spares": stripeguard_ops::spares::spare_states(&array),
                   "spare_policy": array.spare_policy(),
                   "unrecoverable": unrecoverable})
        );
    } else {
        if sb.name.is_empty() {
            println!("array {}", hex(&sb.array_uuid));
        } else {
            println!("array {} ({})", sb.name, hex(&sb.array_uuid));
        }
        println!(
            "  {} data + {} parity ({}), scheme {}, chunk {}, sector {}, {} stripes, capacity {} bytes",
            sb.data_chunks,
            sb.parity_chunks,
            sb.code.name(),
            sb.scheme.name(),
            format_size(sb.chunk_bytes as usize),
            sb.sector_bytes(),
            sb.stripes,
            array.capacity_bytes()
        );
        println!(
            "  cross-check: {}, write journal: {}, event count {}",
            sb.cross_check.name(),
            if sb.write_journal { "on" } else { "off" },
            sb.generation
        );
        if sb.zero_stripes {
            let (stripes, ranges) = array.zero_stripe_count();
            println!(
                "  zero stripes: {stripes} of {} in {ranges} range(s) (never written or trimmed: read as zeros, not read from the members)",
                sb.stripes
            );
        }
        for (i, (name, state)) in array.journal_devices().iter().enumerate() {
            println!(
                "  journal device {i}: {}",
                match *state {
                    "lost" => "LOST (for good: the journal is on the other device, or on the members)".to_string(),
                    "not given" => "not given (give it among the members: a command that writes without it marks it lost for good)".to_string(),
                    _ => name.clone(),
                }
            );
        }
        print_spares(
            &stripeguard_ops::spares::spare_states(&array),
            Some(array.spare_policy()),
        );
        println!("  scan: {}", scan_line(last_scrub.as_ref()));
        print_untrusted(&untrusted, Some(&array.geometry()));
        if array.was_unclean() {
            println!(
                "  not closed cleanly: {awaiting} stripe(s) in regions awaiting resync (the next command that may write resyncs them first){}",
                if a.check { "; the check skipped them" } else { "" }
            );
        }
        println!(
            "  state: {}",
            state_line(
                &states,
                degraded,
                awaiting,
                a.check.then_some(&c),
                unrecoverable.len()
            )
        );
        const CLASSES: [&str; 7] = [
            "read-error",
            "checksum",
            "identity",
            "stale",
            "outvoted",
            "parity",
            "resync",
        ];
        println!(
            "  {:<10} {:<40} {:<8} {}",
            "member",
            "",
            "state",
            CLASSES.map(|c| format!("{c:>10}")).join("")
        );
        for h in &health {
            let counts: String = CLASSES
                .map(|c| format!("{:>10}", by_member[h.index].get(c).copied().unwrap_or(0)))
                .join("");
            let state = if h.failed.is_some() { "OUT" } else { "ONLINE" };
            println!("  member {:>3} {:<40} {state:<8} {counts}", h.index, h.name);
        }
        println!(
            "  (counts from the event log: {} entries, {} older ones overwritten; `stripeguard events` lists them)",
            log.entries.len(),
            log.dropped
        );
        for h in &health {
            let st = match &h.failed {
                None if h.superblock_copies_fixed > 0 => format!(
                    "ok ({} superblock copy damaged or stale)",
                    h.superblock_copies_fixed
                ),
                None => "ok".to_string(),
                Some(w) => format!("FAILED: {w}"),
            };
            if h.failed.is_some() || h.superblock_copies_fixed > 0 {
                println!("  member {:>3}  {:<40} {st}", h.index, h.name);
            }
        }
        if a.check {
            println!(
                "  check: {} stripes, {} damaged unit(s) located, {} stripe(s) with parity disagreeing with data, {} unrecoverable stripe(s)",
                sb.stripes,
                c.located,
                c.mismatches,
                unrecoverable.len()
            );
            for (k, v) in &c.by_kind {
                println!("    {k}: {v}");
            }
            print_events(&array, true);
            for u in &unrecoverable {
                println!("  {u}");
            }
        }
    }
    Ok(exit::of(status_verdict(
        &array,
        unrecoverable.len(),
        awaiting,
    )))
}

/// Each member as its own metadata describes it, for an array that cannot be assembled: current
/// (the highest event count of its array among those given), behind (stale: it missed
/// writes), another array's, or unreadable.
fn describe_members(paths: &[std::path::PathBuf]) {
    let seen: Vec<_> = paths.iter().map(|p| stripeguard_ops::examine(p)).collect();
    let newest = seen
        .iter()
        .flatten()
        .map(|x| (x.array_uuid.clone(), x.event_count))
        .max_by_key(|(_, g)| *g);
    println!("the array cannot be assembled; its members as their own metadata describes them:");
    for (i, (p, x)) in paths.iter().zip(&seen).enumerate() {
        let what = match x {
            Err(e) => format!("UNREADABLE or not a member ({e})"),
            Ok(x) if newest.as_ref().is_some_and(|(u, _)| *u != x.array_uuid) => {
                format!("a member of ANOTHER array ({})", x.array_uuid)
            }
            Ok(x) => {
                let top = newest.as_ref().map_or(0, |(_, g)| *g);
                format!(
                    "member {} of {}, event count {}{}, {}",
                    x.member_index,
                    x.array_uuid,
                    x.event_count,
                    if x.event_count == top {
                        " (current)".to_string()
                    } else {
                        format!(" (STALE: {} event(s) behind)", top - x.event_count)
                    },
                    x.state
                )
            }
        };
        println!("  {i} {}: {what}", p.display());
    }
    println!("  (`stripeguard examine MEMBER` shows each in full)");
    let reshaping = seen
        .iter()
        .flatten()
        .filter(|x| x.reshape.is_some())
        .max_by_key(|x| x.event_count);
    if let Some(x) = reshaping {
        let r = x.reshape.as_ref().expect("filtered");
        println!(
            "  RESHAPE in progress or interrupted: {} → {} members, {} → {} data chunks per stripe; {} of {} new stripes moved{}; finish it with `stripeguard grow MEMBERS... --continue` (all {} members, old and added, in order)",
            r.from_members,
            x.members,
            r.from_data_chunks,
            x.data_chunks,
            r.done,
            r.stripes,
            (r.done * 100)
                .checked_div(r.stripes)
                .map(|p| format!(" ({p}%)"))
                .unwrap_or_default(),
            x.members.max(r.from_members)
        );
    }
}

/// The last scrub, like `zpool status`' scan line.
fn scan_line(r: Option<&Checkpoint>) -> String {
    let Some(r) = r else {
        return "no scrub has run".into();
    };
    let when = |t: u64| format!("{} (Unix seconds {t})", ago(t));
    if r.finished {
        format!(
            "scrub finished {}: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s){}",
            when(r.updated_unix),
            r.found,
            r.repaired,
            r.unrecoverable,
            if r.mismatches > 0 {
                format!(", {} stripe(s) with parity disagreeing", r.mismatches)
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "scrub interrupted at stripe {} of {} ({}); `stripeguard scrub` resumes it",
            r.next_stripe,
            r.stripes,
            when(r.updated_unix)
        )
    }
}

/// The array's state in words: its states ([`array_states`]), and what a check found.
fn state_line(
    states: &[&str],
    degraded: usize,
    awaiting: usize,
    check: Option<&Counters>,
    unrecoverable: usize,
) -> String {
    let mut words: Vec<String> = states
        .iter()
        .map(|s| match *s {
            "degraded" => format!("DEGRADED ({degraded} member(s) out)"),
            "dirty" => format!(
                "DIRTY (not closed cleanly: {awaiting} stripe(s) await a resync, which the next writable assembly runs)"
            ),
            "rebuilding" => "REBUILDING (a replace has not finished; `stripeguard replace` onto the same device resumes it)".into(),
            "untrusted" => "UNTRUSTED (blocks listed below)".into(),
            "scrub-interrupted" => "scrub interrupted".into(),
            s => s.to_string(),
        })
        .collect();
    if let Some(c) = check {
        if unrecoverable > 0 {
            words.push(format!("UNRECOVERABLE ({unrecoverable} stripe(s))"));
        }
        if c.located > 0 {
            words.push(format!("DAMAGED ({} unit(s) found wrong)", c.located));
        }
        if c.mismatches > 0 {
            words.push(format!(
                "INCONSISTENT ({} stripe(s) whose parity disagrees with the data)",
                c.mismatches
            ));
        }
    }
    words.join(", ")
}
