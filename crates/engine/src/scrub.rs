//! Scrub: read and check every stripe with every unit voting, repair what can be repaired, and
//! keep the position in the checkpoint record (FORMAT.md §2.3) so an interrupted scrub resumes
//! where it stopped. `status --check` is the same walk on a read-only assembly (`check_only`),
//! which repairs and records nothing.

use crate::array::Array;
use crate::env::unix_seconds;
use crate::error::EngineError;
use std::time::Duration;
use stripeguard_format::EventKind;

use crate::checkpoint::{CHECKPOINT_EVERY, CHECKPOINT_SECONDS};
pub use stripeguard_format::Checkpoint;

/// How to scrub.
#[derive(Clone, Debug, Default)]
pub struct ScrubOptions {
    /// Start from stripe 0 even when an interrupted scrub could be resumed.
    pub restart: bool,
    /// Bound on member bytes read per second (`None`: as fast as the members go).
    pub rate_bytes_per_second: Option<u64>,
    /// Write nothing, on a writable array too (an online check): no repair, no checkpoint.
    pub check_only: bool,
    /// Set by another thread to stop the scrub at the next stripe (a holder stopping); the
    /// position is saved, and the next scrub resumes there.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// What a scrub (or a check) did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ScrubSummary {
    /// The stripe it started at (non-zero when it resumed).
    pub resumed_at: u64,
    /// Stripes in the array.
    pub stripes: u64,
    /// The record as written at the end (a check-only walk writes none).
    pub record: Checkpoint,
    /// Why each unrecoverable stripe could not be repaired.
    pub unrecoverable: Vec<String>,
    /// Check only, array not closed cleanly: stripes of dirty regions left for the resync
    /// (a half-finished write is not corruption).
    pub awaiting_resync: u64,
    /// Damaged copies in the members' metadata areas (owner, checkpoint, intent, log).
    pub metadata: Vec<crate::metacheck::MetadataFinding>,
    /// Where it stopped when cancelled (`None`: it ran to the end).
    pub interrupted_at: Option<u64>,
    /// Zero stripes passed over (FORMAT.md §2.7: their units are never read).
    pub zero_stripes: u64,
}

/// Scrub `array`: every stripe from where the last interrupted scrub stopped (or from 0), every
/// unit voting, repairs written back when the array is writable. On a read-only assembly it is
/// a check: nothing is written, the checkpoint included. `progress(done, total)` as it goes.
pub fn scrub(
    array: &Array,
    opts: &ScrubOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ScrubSummary, EngineError> {
    let stripes = array.geometry().stripes;
    let writable = array.is_writable() && !opts.check_only;
    let mut rec = starting_record(array, opts);
    let start = rec.next_stripe;
    let base = array.counters();
    let mut summary = ScrubSummary {
        resumed_at: start,
        stripes,
        ..ScrubSummary::default()
    };
    let stripe_bytes = array.geometry().n() as u64 * array.unit_bytes();
    let env = array.env();
    let began = env.monotonic();
    // Totals = what the resumed record carried + what this run's counters added.
    let carried = rec.clone();
    let save = |rec: &mut Checkpoint, finished: bool| -> Result<(), EngineError> {
        let c = array.counters();
        rec.found = carried.found + (c.located - base.located);
        rec.repaired = carried.repaired + (c.repaired - base.repaired);
        rec.mismatches = carried.mismatches + (c.mismatches - base.mismatches);
        rec.finished = finished;
        rec.updated_unix = unix_seconds(env);
        rec.sequence += 1;
        if writable {
            array.write_checkpoint(rec)?;
        }
        Ok(())
    };
    let skip: std::collections::BTreeSet<u64> = if writable {
        Default::default()
    } else {
        array.awaiting_resync().into_iter().collect()
    };
    summary.awaiting_resync = skip.len() as u64;
    // The metadata area first: a damaged checkpoint copy is rewritten before this scrub's own
    // checkpoints go into its slots.
    summary.metadata = array.scrub_metadata(writable)?;
    // A repaired checkpoint slot was written at a higher sequence than the one this scrub
    // started from: this scrub's records must still be the newest.
    if let Some(now) = array.checkpoint() {
        rec.sequence = rec.sequence.max(now.sequence);
    }
    // Progress is saved every CHECKPOINT_EVERY stripes and at least every CHECKPOINT_SECONDS, so a
    // slow or small scrub killed midway resumes too.
    let mut saved_at = env.monotonic();
    let what = if writable { "scrub" } else { "check" };
    array.note(
        EventKind::ScrubStarted,
        None,
        format!("{what} of {stripes} stripe(s) from stripe {start}"),
    );
    for s in start..stripes {
        if skip.contains(&s) {
            continue;
        }
        if cancelled(opts) {
            rec.next_stripe = s;
            save(&mut rec, false)?;
            array.note(
                EventKind::ScrubFinished,
                None,
                format!("{what} interrupted at stripe {s} of {stripes} (the holder is stopping); the next scrub resumes there"),
            );
            summary.record = rec;
            summary.interrupted_at = Some(s);
            return Ok(summary);
        }
        // A zero stripe is passed over (scrub_stripe_as returns at once): counted, and not
        // against the rate, which bounds member bytes read.
        if array.is_zero(crate::num::StripeIx::new(s)) {
            summary.zero_stripes += 1;
        }
        match array.scrub_stripe_as(s, opts.check_only) {
            Ok(_) => {}
            Err(e @ EngineError::Unrecoverable { .. }) => {
                rec.unrecoverable += 1;
                summary.unrecoverable.push(e.to_string());
            }
            Err(e) => return Err(e),
        }
        rec.next_stripe = s + 1;
        let due = (s + 1) % CHECKPOINT_EVERY == 0
            || env.monotonic() - saved_at >= Duration::from_secs(CHECKPOINT_SECONDS);
        if due && s + 1 < stripes {
            save(&mut rec, false)?;
            saved_at = env.monotonic();
        }
        if let Some(rate) = opts.rate_bytes_per_second.filter(|&r| r > 0) {
            let read = s + 1 - start - summary.zero_stripes;
            let due = Duration::from_secs_f64((read * stripe_bytes) as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(env.monotonic() - began) {
                // In slices, so a cancel (the holder stopping) is seen within 100 ms however
                // slow the rate.
                let until = env.monotonic() + wait;
                while env.monotonic() < until && !cancelled(opts) {
                    env.sleep((until - env.monotonic()).min(Duration::from_millis(100)));
                }
            }
        }
        if s % 64 == 63 || s + 1 == stripes {
            progress(s + 1, stripes);
        }
    }
    save(&mut rec, true)?;
    let c = array.counters();
    array.note(
        EventKind::ScrubFinished,
        None,
        format!(
            "{what} of stripes {start} to {}: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s), {} stripe(s) whose parity disagrees",
            stripes.saturating_sub(1),
            c.located - base.located,
            if writable { c.repaired - base.repaired } else { 0 },
            summary.unrecoverable.len(),
            c.mismatches - base.mismatches
        ),
    );
    summary.record = rec;
    Ok(summary)
}

/// Whether the scrub was asked to stop.
fn cancelled(opts: &ScrubOptions) -> bool {
    opts.cancel
        .as_ref()
        .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
}

/// The record a scrub starts from: the unfinished one it resumes (writable, not `restart`), or
/// a new one keeping the rebuild part of the record as it was; its sequence continues the
/// newest record's.
fn starting_record(array: &Array, opts: &ScrubOptions) -> Checkpoint {
    let stripes = array.geometry().stripes;
    let writable = array.is_writable();
    let prev = array.checkpoint();
    let resume = match &prev {
        Some(r)
            if writable
                && r.scrub_ran
                && !opts.restart
                && !r.finished
                && r.next_stripe < stripes =>
        {
            Some(r.clone())
        }
        _ => None,
    };
    let mut rec = resume.unwrap_or(Checkpoint {
        scrub_ran: true,
        stripes,
        started_unix: unix_seconds(array.env()),
        // The rebuild part stays as it was.
        ..prev
            .clone()
            .map(|p| Checkpoint {
                rebuild_member: p.rebuild_member,
                rebuild_finished: p.rebuild_finished,
                rebuild_next: p.rebuild_next,
                rebuild_started_unix: p.rebuild_started_unix,
                rebuild_target: p.rebuild_target,
                // And the last reshape's.
                reshape: p.reshape,
                ..Checkpoint::default()
            })
            .unwrap_or_default()
    });
    rec.sequence = prev.map(|r| r.sequence).unwrap_or(0);
    rec
}
