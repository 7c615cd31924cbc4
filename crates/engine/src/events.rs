//! What the engine found and did: a bounded log of events and running counters.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// What was done about a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventAction {
    /// The unit was rebuilt from redundancy, checked and written back.
    Repaired,
    /// Only the unit's appendix was stale (a missed checksum-copy update); it was rewritten.
    AppendixRewritten,
    /// The bytes a read returned were wrong but the unit on disk is right (a misdirected read):
    /// the stripe was read again and the good bytes used.
    Reread,
    /// Rebuilt in memory; the member is failed so nothing was written.
    RebuiltDegraded,
    /// Found and rebuilt in memory, not written: the array was opened read-only (`status --check`).
    FoundReadOnly,
    /// The stripe could not be repaired; the request failed.
    Unrecoverable,
    /// A stripe an unclean shutdown may have left half-written was made consistent (resync);
    /// never counted as corruption.
    Resynced,
    /// Something an operator should know that is not a finding (counts nothing).
    Notice,
    /// Bare RAID (`none`): the stripe's parity disagrees with its data. Nothing says which unit
    /// is wrong, so nothing was changed (Linux md's `mismatch_cnt`).
    Mismatch,
}

/// One finding in one unit.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Stripe.
    pub stripe: u64,
    /// Member index.
    pub member: usize,
    /// Stripe position (`0..k` data, then parity).
    pub position: usize,
    /// `data` or `parity`.
    pub role: &'static str,
    /// Finding kind (`checksum`, `identity`, `stale`, `outvoted`, `read-error`, `parity`).
    pub kind: &'static str,
    /// Human-readable evidence.
    pub evidence: String,
    /// What was done.
    pub action: EventAction,
}

/// A unit's place in words: `data 2`, `P`, `Q`, `parity 3` (beyond Q), `checksum` (the
/// checksum member), or the role alone for stripe- and member-wide events.
pub fn unit_label(role: &str, position: usize, k: usize) -> String {
    match role {
        "data" => format!("data {position}"),
        "parity" => match position.saturating_sub(k) {
            0 => "P".into(),
            1 => "Q".into(),
            j => format!("parity {j}"),
        },
        other => other.to_string(),
    }
}

/// Running totals.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    /// Checks that failed (each triggers a full-stripe diagnosis).
    pub detected: u64,
    /// Units named as wrong by a diagnosis.
    pub located: u64,
    /// Units rebuilt (or their appendix rewritten) and verified.
    pub repaired: u64,
    /// Stripes found unrecoverable.
    pub unrecoverable: u64,
    /// Stripes whose parity disagrees with their data where nothing can locate the wrong unit
    /// (scheme `none`).
    pub mismatches: u64,
    /// Stripes resynced after an unclean shutdown.
    pub resynced: u64,
    /// Located units by finding kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Located units by member index.
    pub by_member: BTreeMap<usize, u64>,
}

/// Most recent events kept in memory.
pub const EVENT_LOG_ENTRIES: usize = 4096;

#[derive(Default)]
pub(crate) struct EventLog {
    pub(crate) counters: Counters,
    pub(crate) recent: VecDeque<Event>,
    /// Recorded but not yet in the durable log: (entry number, Unix ms, event).
    pub(crate) unsaved: Vec<(u64, u64, Event)>,
    /// The next durable entry number.
    pub(crate) next_number: u64,
}

impl EventLog {
    pub(crate) fn record(&mut self, e: Event) {
        let c = &mut self.counters;
        match e.action {
            EventAction::Unrecoverable => {}
            EventAction::Mismatch | EventAction::Resynced | EventAction::Notice => {
                if e.action == EventAction::Mismatch {
                    c.mismatches += 1;
                }
            }
            _ => {
                c.located += 1;
                if !matches!(e.action, EventAction::Reread | EventAction::FoundReadOnly) {
                    c.repaired += 1;
                }
                *c.by_kind.entry(e.kind.to_string()).or_default() += 1;
                *c.by_member.entry(e.member).or_default() += 1;
            }
        }
        if self.unsaved.len() < EVENT_LOG_ENTRIES {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            self.unsaved.push((self.next_number, ms, e.clone()));
            self.next_number += 1;
        }
        if self.recent.len() == EVENT_LOG_ENTRIES {
            self.recent.pop_front();
        }
        self.recent.push_back(e);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parity_is_named_p_q_then_by_number() {
        use super::unit_label;
        assert_eq!(unit_label("data", 2, 6), "data 2");
        assert_eq!(unit_label("parity", 6, 6), "P");
        assert_eq!(unit_label("parity", 7, 6), "Q");
        assert_eq!(unit_label("parity", 9, 6), "parity 3");
        assert_eq!(unit_label("checksum", 8, 6), "checksum");
        assert_eq!(unit_label("stripe", 0, 6), "stripe");
    }
}
