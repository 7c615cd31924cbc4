//! Scrub: read and check every stripe with every unit voting, repair what can be repaired, and
//! keep the position in the checkpoint record (FORMAT.md §2.1a) so an interrupted scrub resumes
//! where it stopped. `status --check` is the same walk on a read-only assembly (`check_only`),
//! which repairs and records nothing.

use crate::{Array, EngineError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use stripeguard_checksum::crc32c;
use stripeguard_integrity::CHECKPOINT_OFFSET;

const MAGIC: [u8; 8] = *b"SGCHKPT\0";
const VERSION: u32 = 1;
pub(crate) const SLOT_BYTES: usize = 2048;
const CRC_AT: usize = SLOT_BYTES - 4;
/// Stripes between checkpoint writes (and at most this much work is redone after a crash).
pub(crate) const CHECKPOINT_EVERY: u64 = 256;

/// Where a scrub and a rebuild stand (one slot of the checkpoint record, FORMAT.md §2.1a).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Checkpoint {
    /// Incremented on every write.
    pub sequence: u64,
    /// A scrub ran (or is running).
    pub scrub_ran: bool,
    /// The scrub finished (else running or interrupted).
    pub finished: bool,
    /// First stripe not yet scrubbed.
    pub next_stripe: u64,
    /// Stripes in the array.
    pub stripes: u64,
    /// Unix seconds at the start.
    pub started_unix: u64,
    /// Unix seconds of the record (the end, when finished).
    pub updated_unix: u64,
    /// Units found wrong.
    pub found: u64,
    /// Units repaired.
    pub repaired: u64,
    /// Stripes that could not be repaired.
    pub unrecoverable: u64,
    /// `none`: stripes whose parity disagrees.
    pub mismatches: u64,
    /// The member a replace is rebuilding.
    pub rebuild_member: Option<u16>,
    /// The rebuild finished.
    pub rebuild_finished: bool,
    /// First stripe not yet rebuilt.
    pub rebuild_next: u64,
    /// Unix seconds the rebuild started.
    pub rebuild_started_unix: u64,
    /// Random id shared with the rebuild's target device.
    #[serde(skip)]
    pub rebuild_target: [u8; 16],
}

impl Checkpoint {
    pub(crate) fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SLOT_BYTES as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        b[24] = match (self.scrub_ran, self.finished) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let fields = [
            self.next_stripe,
            self.stripes,
            self.started_unix,
            self.updated_unix,
            self.found,
            self.repaired,
            self.unrecoverable,
            self.mismatches,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[32 + 8 * i..40 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[96..98].copy_from_slice(&self.rebuild_member.unwrap_or(u16::MAX).to_le_bytes());
        b[98] = match (self.rebuild_member, self.rebuild_finished) {
            (None, _) => 0,
            (Some(_), false) => 1,
            (Some(_), true) => 2,
        };
        b[104..112].copy_from_slice(&self.rebuild_next.to_le_bytes());
        b[112..120].copy_from_slice(&self.rebuild_started_unix.to_le_bytes());
        b[120..136].copy_from_slice(&self.rebuild_target);
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse one slot; `None` when it is empty or damaged. Never panics.
    pub(crate) fn decode(b: &[u8]) -> Option<Checkpoint> {
        if b.len() < SLOT_BYTES
            || b[0..8] != MAGIC
            || b[8..12] != VERSION.to_le_bytes()
            || b[12..16] != (SLOT_BYTES as u32).to_le_bytes()
            || b[CRC_AT..SLOT_BYTES] != crc32c(&b[..CRC_AT]).to_le_bytes()
        {
            return None;
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let (scrub_ran, finished) = match b[24] {
            0 => (false, false),
            1 => (true, false),
            2 => (true, true),
            _ => return None,
        };
        let member = u16::from_le_bytes([b[96], b[97]]);
        let (rebuild_member, rebuild_finished) = match b[98] {
            0 => (None, false),
            1 => (Some(member), false),
            2 => (Some(member), true),
            _ => return None,
        };
        Some(Checkpoint {
            sequence: u(16),
            scrub_ran,
            finished,
            next_stripe: u(32),
            stripes: u(40),
            started_unix: u(48),
            updated_unix: u(56),
            found: u(64),
            repaired: u(72),
            unrecoverable: u(80),
            mismatches: u(88),
            rebuild_member,
            rebuild_finished,
            rebuild_next: u(104),
            rebuild_started_unix: u(112),
            rebuild_target: b[120..136].try_into().expect("16 bytes"),
        })
    }
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Array {
    /// The newest valid checkpoint record on any current member, if one was ever written.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.newest_slot(CHECKPOINT_OFFSET, SLOT_BYTES, Checkpoint::decode, |c| {
            c.sequence
        })
    }

    /// The last scrub's record, if a scrub ever ran.
    pub fn last_scrub(&self) -> Option<Checkpoint> {
        self.checkpoint().filter(|c| c.scrub_ran)
    }

    /// Write `r` to every current member, into the slot the previous record is not in.
    pub(crate) fn write_checkpoint(&self, r: &Checkpoint) -> Result<(), EngineError> {
        self.write_slot(CHECKPOINT_OFFSET, r.sequence, &r.encode(), false)?;
        self.flush()
    }
}

/// How to scrub.
#[derive(Clone, Debug, Default)]
pub struct ScrubOptions {
    /// Start from stripe 0 even when an interrupted scrub could be resumed.
    pub restart: bool,
    /// Bound on member bytes read per second (`None`: as fast as the members go).
    pub rate_bytes_per_second: Option<u64>,
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
    pub metadata: Vec<crate::MetadataFinding>,
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
    let writable = array.writable;
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
    let mut rec = resume.clone().unwrap_or(Checkpoint {
        scrub_ran: true,
        stripes,
        started_unix: now_unix(),
        // The rebuild part stays as it was.
        ..prev
            .clone()
            .map(|p| Checkpoint {
                rebuild_member: p.rebuild_member,
                rebuild_finished: p.rebuild_finished,
                rebuild_next: p.rebuild_next,
                rebuild_started_unix: p.rebuild_started_unix,
                rebuild_target: p.rebuild_target,
                ..Checkpoint::default()
            })
            .unwrap_or_default()
    });
    rec.sequence = prev.map(|r| r.sequence).unwrap_or(0);
    let start = rec.next_stripe;
    let base = array.counters();
    let mut summary = ScrubSummary {
        resumed_at: start,
        stripes,
        ..ScrubSummary::default()
    };
    let stripe_bytes = array.geometry().n() as u64 * array.unit_bytes();
    let began = Instant::now();
    // Totals = what the resumed record carried + what this run's counters added.
    let carried = rec.clone();
    let save = |rec: &mut Checkpoint, finished: bool| -> Result<(), EngineError> {
        let c = array.counters();
        rec.found = carried.found + (c.located - base.located);
        rec.repaired = carried.repaired + (c.repaired - base.repaired);
        rec.mismatches = carried.mismatches + (c.mismatches - base.mismatches);
        rec.finished = finished;
        rec.updated_unix = now_unix();
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
    for s in start..stripes {
        if skip.contains(&s) {
            continue;
        }
        match array.scrub_stripe(s) {
            Ok(_) => {}
            Err(e @ EngineError::Unrecoverable { .. }) => {
                rec.unrecoverable += 1;
                summary.unrecoverable.push(e.to_string());
            }
            Err(e) => return Err(e),
        }
        rec.next_stripe = s + 1;
        if (s + 1) % CHECKPOINT_EVERY == 0 && s + 1 < stripes {
            save(&mut rec, false)?;
        }
        if let Some(rate) = opts.rate_bytes_per_second.filter(|&r| r > 0) {
            let due =
                Duration::from_secs_f64(((s + 1 - start) * stripe_bytes) as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        if s % 64 == 63 || s + 1 == stripes {
            progress(s + 1, stripes);
        }
    }
    save(&mut rec, true)?;
    summary.record = rec;
    Ok(summary)
}
