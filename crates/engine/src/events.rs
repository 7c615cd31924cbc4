//! What the engine found and did: a bounded log of events and running counters.

use crate::num::StripeIx;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

pub use stripeguard_format::{EventAction, EventKind, EventRole};

/// One finding in one unit.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Stripe.
    pub stripe: u64,
    /// Member index.
    pub member: usize,
    /// Stripe position (`0..k` data, then parity).
    pub position: usize,
    /// What it is about.
    pub role: EventRole,
    /// What was found.
    pub kind: EventKind,
    /// Human-readable evidence.
    pub evidence: String,
    /// What was done.
    pub action: EventAction,
}

/// A unit's place in words: `data 2`, `P`, `Q`, `parity 3` (beyond Q), `checksum` (the
/// checksum member), or the role alone for stripe- and member-wide events.
pub fn unit_label(role: EventRole, position: usize, k: usize) -> String {
    match role {
        EventRole::Data => format!("data {position}"),
        EventRole::Parity => match position.saturating_sub(k) {
            0 => "P".into(),
            1 => "Q".into(),
            j => format!("parity {j}"),
        },
        EventRole::Stripe | EventRole::Member | EventRole::Checksum => role.to_string(),
    }
}

/// Where an event happened, in words: `member 3 (/dev/sdd)` for a member's event or state
/// change, `the array` for the array's state changes, else `stripe 12 member 3 (data 2)` —
/// one form for every printer (`events`, the command reports, the holder's log lines).
pub fn event_place(
    kind: EventKind,
    role: EventRole,
    stripe: u64,
    member: usize,
    position: usize,
    k: usize,
    member_name: Option<&str>,
) -> String {
    let member_words = match member_name {
        Some(n) => format!("member {member} ({n})"),
        None => format!("member {member}"),
    };
    match role {
        EventRole::Member => member_words,
        EventRole::Stripe if kind.is_state_change() => "the array".into(),
        _ => format!(
            "stripe {stripe} member {member} ({})",
            unit_label(role, position, k)
        ),
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
    /// Members that failed (an I/O error took them out); not units found wrong.
    pub members_failed: u64,
    /// Located units by finding kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Located units by member index.
    pub by_member: BTreeMap<usize, u64>,
}

/// Most recent events kept in memory.
pub const EVENT_LOG_ENTRIES: usize = 4096;

pub(crate) struct EventLog {
    /// Where an event's time comes from.
    env: crate::env::EnvRef,
    pub(crate) counters: Counters,
    pub(crate) recent: VecDeque<Event>,
    /// Recorded but not yet in the durable log: (entry number, Unix ms, event).
    pub(crate) unsaved: Vec<(u64, u64, Event)>,
    /// The next durable entry number.
    pub(crate) next_number: u64,
    /// Told of every event as it is recorded (a holder's log line; `None`: nobody listens).
    pub(crate) listener: Option<EventListener>,
}

/// What a holder runs for each event as it is recorded (a line on stderr, a syslog message).
/// It runs with the event log locked: it must not call back into the array.
pub type EventListener = std::sync::Arc<dyn Fn(&Event) + Send + Sync>;

impl EventLog {
    pub(crate) fn new(env: crate::env::EnvRef) -> EventLog {
        EventLog {
            env,
            counters: Counters::default(),
            recent: VecDeque::new(),
            unsaved: Vec::new(),
            next_number: 0,
            listener: None,
        }
    }

    pub(crate) fn record(&mut self, e: Event) {
        let c = &mut self.counters;
        match e.action {
            _ if e.kind == EventKind::MemberFailed => c.members_failed += 1,
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
        // A stripe refused again and again for the same reason (a read that returns every
        // sector it can verifies the refused chunk sector by sector) is one event, not one per
        // attempt: a ring of 320 entries must not lose its history to one bad stripe.
        if e.action == EventAction::Unrecoverable
            && self.recent.iter().rev().take(RECENT_REFUSALS).any(|r| {
                r.action == e.action
                    && (r.kind, r.stripe, r.member, r.position)
                        == (e.kind, e.stripe, e.member, e.position)
                    && r.evidence == e.evidence
            })
        {
            return;
        }
        if self.unsaved.len() < EVENT_LOG_ENTRIES {
            let ms = crate::env::unix_millis(self.env.as_ref());
            self.unsaved.push((self.next_number, ms, e.clone()));
            self.next_number = self.next_number.saturating_add(1);
        }
        if let Some(l) = &self.listener {
            l(&e);
        }
        if self.recent.len() == EVENT_LOG_ENTRIES {
            self.recent.pop_front();
        }
        self.recent.push_back(e);
    }
}

/// How far back [`EventLog::record`] looks for the same refusal.
const RECENT_REFUSALS: usize = 16;

/// An event about a whole stripe rather than one of its units.
pub(crate) fn stripe_event(
    stripe: StripeIx,
    kind: EventKind,
    evidence: String,
    action: EventAction,
) -> Event {
    Event {
        stripe: stripe.get(),
        member: 0,
        position: 0,
        role: EventRole::Stripe,
        kind,
        evidence,
        action,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parity_is_named_p_q_then_by_number() {
        use super::{unit_label, EventRole};
        assert_eq!(unit_label(EventRole::Data, 2, 6), "data 2");
        assert_eq!(unit_label(EventRole::Parity, 6, 6), "P");
        assert_eq!(unit_label(EventRole::Parity, 7, 6), "Q");
        assert_eq!(unit_label(EventRole::Parity, 9, 6), "parity 3");
        assert_eq!(unit_label(EventRole::Checksum, 8, 6), "checksum");
        assert_eq!(unit_label(EventRole::Stripe, 0, 6), "stripe");
    }
}
