//! `stripeguard scrub`: check every stripe with every unit voting and repair what can be
//! repaired (`--check-only`: repair nothing), resuming an interrupted scrub.

use crate::cmd::shared::{assemble_or_holder, counters_json, print_events, Held, MembersArgs};
use crate::exit;
use crate::progress::{count_bar, updater};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use stripeguard_engine::{scrub, ScrubOptions};
use stripeguard_ops::{
    ask_holder, ask_holder_scrub, follow_holder_scrub, scrub_verdict, with_control_socket, Verdict,
};

/// `scrub` of an array another process holds: ask it over its control socket, then follow its
/// progress in its status until it finishes.
fn via_holder(a: &ScrubArgs, uuid: &[u8; 16]) -> Result<ExitCode> {
    let rate = rate_bytes(a.rate);
    ask_holder_scrub(uuid, a.check_only, a.restart, rate)
        .map_err(|e| anyhow::anyhow!("the process holding the array refused the scrub: {e}"))?;
    eprintln!(
        "stripeguard: the array is in use; the process holding it {} it while it goes on serving",
        if a.check_only { "checks" } else { "scrubs" }
    );
    let bar = count_bar(if a.check_only {
        "checking stripes"
    } else {
        "scrubbing"
    });
    let result = follow_holder_scrub(uuid, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let (s, live) = result.map_err(anyhow::Error::msg)?;
    let outcome = s.outcome.clone().unwrap_or_default();
    let out: Vec<String> = live
        .out
        .iter()
        .map(|(i, why)| format!("{i} ({why})"))
        .collect();
    if a.json {
        println!(
            "{}",
            json!({"via_holder": true, "scrub": s, "members_out": out})
        );
    } else if s.ok {
        println!("{outcome}");
        print_out(&out);
    }
    if !s.ok {
        bail!("{outcome}");
    }
    // A member out was not checked: found, as a scrub without a holder says.
    let degraded = if out.is_empty() {
        Verdict::Clean
    } else {
        Verdict::Found
    };
    Ok(exit::of(holder_verdict(&s).max(degraded)))
}

/// What a holder's scrub comes to, as `scrub`'s exit status says it.
pub(crate) fn holder_verdict(s: &stripeguard_ops::LiveScrub) -> Verdict {
    if s.unrecoverable > 0 {
        Verdict::Unrecoverable
    } else if s.found > 0 || s.mismatches > 0 {
        Verdict::Found
    } else {
        Verdict::Clean
    }
}

/// The members out of the array, which a scrub could not check (nothing when none is).
fn print_out(out: &[String]) {
    if !out.is_empty() {
        println!(
            "  DEGRADED: {} member(s) out, not checked: {} (`replace` them; the exit status says so)",
            out.len(),
            out.join(", ")
        );
    }
}

/// `--rate` in MB/s as bytes a second.
fn rate_bytes(rate: Option<f64>) -> Option<u64> {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a positive finite rate (checked by run); a fraction of a byte per second is \
                  dropped and a rate beyond u64 saturates"
    )]
    rate.map(|r| (r * 1e6) as u64)
}

#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Check only: repair nothing, write nothing (the same walk as `status --check`).
    #[arg(long)]
    check_only: bool,
    /// Limit the rate of member reads, in MB/s (decimals allowed).
    #[arg(long)]
    rate: Option<f64>,
    /// Start from the first stripe even when an interrupted scrub could be resumed.
    #[arg(long)]
    restart: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(mut a: ScrubArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    if a.rate.is_none() {
        // `--array NAME`: the configuration's scrub_rate (the scrub timer gives no --rate).
        a.rate = a
            .array
            .configured()
            .and_then(|c| c.scrub_rate)
            .and_then(|r| stripeguard_ops::config::parse_rate(&r))
            .map(|b| b as f64 / 1e6);
    }
    if let Some(r) = a.rate {
        if !(r > 0.0 && r.is_finite()) {
            bail!("--rate {r} must be a positive number of MB/s");
        }
    }
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Ctrl-C stops at the next stripe, the position saved, the array closed clean (from the
    // start: one during the assembly's resync stops the scrub before its first stripe).
    let interrupt = {
        let cancel = std::sync::Arc::clone(&cancel);
        crate::interrupt::Interrupt::on_first(move || {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    // Held by a running `serve`: it scrubs while it goes on serving.
    let array = match assemble_or_holder(&a.array, !a.check_only)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => return via_holder(&a, &uuid),
    };
    // Members no flock reaches (NBD exports): a read-only assembly succeeds beside a holder,
    // whose writes a check from here would race; the holder checks instead.
    if let Some(o) = array
        .owner()
        .filter(|o| o.held && o.pid != std::process::id())
    {
        let uuid = array.superblock().array_uuid;
        if ask_holder(&uuid).is_ok() {
            drop(array);
            let _ = o;
            return via_holder(&a, &uuid);
        }
    }
    let opts = ScrubOptions {
        restart: a.restart,
        rate_bytes_per_second: rate_bytes(a.rate),
        cancel: Some(std::sync::Arc::clone(&cancel)),
        ..ScrubOptions::default()
    };
    let bar = count_bar(if a.check_only {
        "checking stripes"
    } else {
        "scrubbing"
    });
    let started = std::time::Instant::now();
    let result = with_control_socket(&array, || scrub(&array, &opts, &mut updater(&bar)));
    bar.finish_and_clear();
    let summary = result?;
    if let (Some(at), true) = (summary.interrupted_at, interrupt.fired()) {
        array.close()?;
        eprintln!(
            "stripeguard: {} interrupted at stripe {at} of {}; the array is closed clean{}",
            if a.check_only { "check" } else { "scrub" },
            summary.stripes,
            if a.check_only {
                String::new()
            } else {
                "; `scrub` again resumes there".into()
            }
        );
        return Ok(ExitCode::from(130));
    }
    let c = array.counters();
    let out: Vec<String> = array
        .health()
        .iter()
        .filter(|h| h.failed.is_some())
        .map(|h| format!("{} ({})", h.index, h.name))
        .collect();
    if a.json {
        println!(
            "{}",
            json!({"check_only": a.check_only, "resumed_at": summary.resumed_at, "stripes": summary.stripes,
                   "record": summary.record, "counters": counters_json(&c), "events": array.events(),
                   "unrecoverable": summary.unrecoverable, "metadata": summary.metadata,
                   "awaiting_resync_skipped": summary.awaiting_resync, "members_out": out,
                   "zero_stripes": summary.zero_stripes})
        );
    } else {
        if summary.resumed_at > 0 {
            println!(
                "resumed an interrupted scrub at stripe {}",
                summary.resumed_at
            );
        }
        println!(
            "{} {} stripes in {:.1} s: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s){}",
            if a.check_only { "checked" } else { "scrubbed" },
            (summary.stripes - summary.resumed_at).saturating_sub(summary.awaiting_resync),
            started.elapsed().as_secs_f64(),
            c.located,
            if a.check_only { 0 } else { c.repaired },
            summary.unrecoverable.len(),
            if c.mismatches > 0 {
                format!(", {} stripe(s) whose parity disagrees with the data", c.mismatches)
            } else {
                String::new()
            }
        );
        if summary.zero_stripes > 0 {
            println!(
                "  {} of them zero stripes (never written or trimmed): nothing to read",
                summary.zero_stripes
            );
        }
        if summary.awaiting_resync > 0 {
            println!(
                "  not checked: {} stripe(s) of regions awaiting resync (the array was not closed cleanly; a scrub without --check-only resyncs them first)",
                summary.awaiting_resync
            );
        }
        print_events(&array, true);
        for u in &summary.unrecoverable {
            println!("  {u}");
        }
        print_out(&out);
    }
    array.close()?;
    Ok(exit::of(scrub_verdict(&summary, &c, out.len())))
}
