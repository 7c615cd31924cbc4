//! `stripeguard status` of an array another process holds: what that process reports over its
//! control socket.

use crate::cmd::shared::MembersArgs;
use crate::exit;
use anyhow::{Context, Result};
use serde_json::json;
use std::process::ExitCode;
use stripeguard_format::hex;
use stripeguard_ops::{ask_holder, peek_uuid};

/// `status` of an array another process holds: what that process says over its control
/// socket (the array itself is not taken from it).
pub(super) fn live_status(
    array: &MembersArgs,
    check: bool,
    json: bool,
    name: &str,
    holder: Option<u32>,
) -> Result<ExitCode> {
    let who = stripeguard_disk::holder_words(holder);
    let uuid = peek_uuid(&array.members).with_context(|| {
        format!("{name} is in use by {who}, and no member has a readable superblock")
    })?;
    // A holder opens its control socket once it has assembled the array (after its locks, its
    // superblock update and any resync): give one that is starting up a few seconds.
    let mut asked = ask_holder(&uuid);
    if asked.is_err() && !array.no_wait {
        eprintln!(
            "stripeguard: the array is in use by {who}, which does not answer status yet; waiting up to 5 s, until {}, for it to open its control socket (--no-wait does not wait)",
            stripeguard_ops::clock_utc_in(std::time::Duration::from_secs(5))
        );
        // 5 s in all, however long each unanswered ask takes (a holder that is stopped
        // accepts the connection and never replies).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while asked.is_err() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(100));
            asked = ask_holder(&uuid);
        }
    }
    let mut live = asked.map_err(|why| {
        anyhow::anyhow!("{name} is in use by {who}, which does not answer status ({why}); try again when it finishes")
    })?;
    // --check: the holder checks every stripe while it serves (nothing written back).
    let mut checked = None;
    if check {
        match stripeguard_ops::ask_holder_scrub(&uuid, true, false, None) {
            Ok(()) => {
                let bar = crate::progress::count_bar("checking stripes (by the holder)");
                let followed = stripeguard_ops::follow_holder_scrub(&uuid, &mut |done, total| {
                    bar.set_length(total);
                    bar.set_position(done);
                });
                bar.finish_and_clear();
                let (s, now) = followed.map_err(anyhow::Error::msg)?;
                live = now;
                checked = Some(s);
            }
            Err(why) => eprintln!(
                "stripeguard: not checked: the array is in use by {who}, which refused the check ({why}); showing what the holder has found so far"
            ),
        }
    }
    if json {
        println!(
            "{}",
            json!({"in_use_by": live.pid, "command": live.command, "untrusted": live.untrusted,
                   "zero_stripes": live.zero_stripes.map(|(stripes, ranges)| json!({"stripes": stripes, "ranges": ranges})),
                   "state": live.states()[0], "states": live.states(),
                   "live": live, "checked": checked.is_some(), "check": checked})
        );
    } else {
        println!(
            "array {} in use by process {} ({})",
            hex(&uuid),
            live.pid,
            live.command
        );
        println!("  state: {}", live.states().join(", "));
        println!(
            "  live: {} failed check(s), {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s), {} stripe(s) resynced",
            live.detected, live.located, live.repaired, live.unrecoverable, live.resynced
        );
        let pct = |done: u64, total: u64| done * 100 / total.max(1);
        if let Some(s) = live.scrub.as_ref().filter(|s| s.running) {
            let what = if s.check_only { "check" } else { "scrub" };
            if s.total == 0 {
                println!("  {what} starting");
            } else {
                println!(
                    "  {what} running: stripe {} of {} ({}%)",
                    s.done,
                    s.total,
                    pct(s.done, s.total)
                );
            }
        }
        if let Some(r) = live.replace.as_ref().filter(|r| r.running) {
            println!(
                "  replace running: member {} onto {}, stripe {} of {} ({}%)",
                r.member,
                r.target,
                r.done,
                r.total,
                pct(r.done, r.total)
            );
        }
        if let Some(g) = live.grow.as_ref().filter(|g| g.running) {
            println!(
                "  grow running: from {} bytes, new stripe {} of {} written ({}%)",
                g.from_bytes,
                g.done,
                g.total,
                pct(g.done, g.total)
            );
        }
        if !live.front_end.is_empty() {
            let parts: Vec<String> = live
                .front_end
                .iter()
                .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
                .collect();
            println!("  serving: {}", parts.join(", "));
        }
        if let Some((stripes, ranges)) = live.zero_stripes {
            println!(
                "  zero stripes: {stripes} in {ranges} range(s) (never written or trimmed: read as zeros, not read from the members)"
            );
        }
        for (m, why) in &live.out {
            println!("  member {m} out of the array: {why}");
        }
        print_spares(&live.spares, None);
        for (i, (given, held)) in array.members.iter().zip(&live.members).enumerate() {
            if moved(given, held) {
                println!(
                    "  member {i} is now {held} (an online replace): give {held} in place of {} from now on",
                    given.display()
                );
            }
        }
        if let Some(s) = &checked {
            println!(
                "  check (by the holder, while serving): {}",
                s.outcome.as_deref().unwrap_or_default()
            );
        }
        print_untrusted(&live.untrusted, None);
        for e in &live.recent_events {
            println!("  {e}");
        }
    }
    let verdict = match &checked {
        None => live.verdict(check),
        Some(s) if !s.ok => stripeguard_ops::Verdict::NotChecked,
        Some(s) => live.verdict(false).max(super::scrub::holder_verdict(s)),
    };
    Ok(exit::of(verdict))
}

/// Whether the holder's member `held` is another device than the one the user named `given`
/// (judged only where the holder's name means the same here: an absolute path or a URI).
fn moved(given: &std::path::Path, held: &str) -> bool {
    if stripeguard_nbd::is_uri(held) {
        return given.to_str() != Some(held);
    }
    let held = std::path::Path::new(held);
    if !held.is_absolute() {
        return false;
    }
    // A given path that is gone (the failed member's file) is compared as written.
    let given = std::fs::canonicalize(given)
        .or_else(|_| std::path::absolute(given))
        .unwrap_or_else(|_| given.to_path_buf());
    std::fs::canonicalize(held).map_or(given != held, |held| given != held)
}

/// The listed untrusted ranges, as `status` shows them (with the member of each when the
/// geometry is at hand).
pub(super) fn print_untrusted(
    untrusted: &[stripeguard_integrity::UntrustedRange],
    geometry: Option<&stripeguard_plan::Geometry>,
) {
    if untrusted.is_empty() {
        return;
    }
    println!(
        "  untrusted: {} range(s) a resync could not verify; reads of them are refused until a write covers them whole, a scrub verifies them again, or `stripeguard clear --stripe S` zero-fills them:",
        untrusted.len()
    );
    for r in untrusted {
        let member = geometry
            .map(|g| format!(" (member {})", g.member_of(r.stripe, r.position as usize)))
            .unwrap_or_default();
        println!(
            "    stripe {} data chunk {}{member}: {} bytes from byte {}{}",
            r.stripe,
            r.position,
            r.len,
            r.offset,
            if r.expected_crc.is_some() {
                ""
            } else {
                " (no CRC to verify it against: only a write or clear takes it off)"
            }
        );
    }
}

/// The hot spares, one line each, and when they are used.
pub(crate) fn print_spares(
    spares: &[stripeguard_ops::spares::SpareState],
    policy: Option<stripeguard_format::SparePolicy>,
) {
    for s in spares {
        println!(
            "  hot spare: {} ({}){}",
            s.path,
            s.uuid,
            match (&s.found, &s.why) {
                (true, _) => String::new(),
                (false, Some(why)) => format!(" — not usable: {why}"),
                (false, None) => " — not there".to_string(),
            }
        );
    }
    if let (false, Some(p)) = (spares.is_empty(), policy) {
        println!(
            "  a spare takes the place of a member out for {} s{}",
            p.delay_seconds,
            if p.error_threshold > 0 {
                format!(
                    ", or of one with {} unit(s) found silently wrong",
                    p.error_threshold
                )
            } else {
                String::new()
            }
        );
    }
}
