//! What a look at an array comes to: a [`Verdict`] for `status`, a scrub and a holder's live
//! status, and the durable log's faults tallied by member. The CLI prints these and maps the
//! verdict to its exit status; the rules are here.

use crate::LiveStatus;
use std::collections::BTreeMap;
use stripeguard_engine::{Array, Counters, EventKind, EventRole, LogRead, ScrubSummary};

/// What a command found, as its exit status will say it (ordered: a worse verdict is greater).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Nothing found.
    Clean,
    /// Something found: units found wrong (repaired unless only checked), stripes whose parity
    /// disagrees with the data, a member out of the array, stripes a check had to skip.
    Found,
    /// Data that cannot be returned: unrecoverable stripes, ranges listed untrusted.
    Unrecoverable,
    /// A check was asked for and not done: another process holds the array.
    NotChecked,
}

/// `status` of an array assembled here, after its check if one ran (`unrecoverable`: the
/// stripes that check refused; `awaiting`: the stripes awaiting resync at assembly, which a
/// check skips). Found (exit 1) for any state but `clean` and `scrub-interrupted`
/// ([`array_states`]), Unrecoverable (exit 3) for `untrusted`.
pub fn status_verdict(array: &Array, unrecoverable: usize, awaiting: usize) -> Verdict {
    let c = array.counters();
    let out = array.health().iter().any(|h| h.failed.is_some());
    if unrecoverable > 0 || !array.untrusted().is_empty() {
        Verdict::Unrecoverable
    } else if c.located > 0
        || c.mismatches > 0
        || out
        // Stripes awaiting resync are not a clean bill, checked or not.
        || (array.was_unclean() && awaiting > 0)
        || array.checkpoint().is_some_and(|ck| ck.rebuild_member.is_some() && !ck.rebuild_finished)
    {
        Verdict::Found
    } else {
        Verdict::Clean
    }
}

/// The states an array is in, worst first, as `status` names them in its text, its JSON
/// (`state`: the first, `states`: all) and its exit status (md's `--detail` states are the
/// model): `untrusted` (blocks listed that reads refuse), `degraded` (members out),
/// `rebuilding` (a replace that has not finished), `dirty` (not closed cleanly: `awaiting`
/// stripes await a resync, which the next writable assembly runs), `scrub-interrupted` (a scrub
/// stopped part-way; `scrub` resumes it); `clean` when none.
pub fn array_states(array: &Array, awaiting: usize) -> Vec<&'static str> {
    let ck = array.checkpoint().unwrap_or_default();
    let mut states = Vec::new();
    if !array.untrusted().is_empty() {
        states.push("untrusted");
    }
    if array.health().iter().any(|h| h.failed.is_some()) {
        states.push("degraded");
    }
    if ck.rebuild_member.is_some() && !ck.rebuild_finished {
        states.push("rebuilding");
    }
    if array.was_unclean() && awaiting > 0 {
        states.push("dirty");
    }
    if array.last_scrub().is_some_and(|r| !r.finished) {
        states.push("scrub-interrupted");
    }
    if states.is_empty() {
        states.push("clean");
    }
    states
}

/// What a holder (`serve`, the nbdkit plugin) says as it closes the array: members out as
/// such (never "closed clean" for a degraded array), failures as failures, not as units found
/// wrong. Taken before `close`.
pub fn closing_words(array: &Array) -> String {
    let c = array.counters();
    let health = array.health();
    let out: Vec<String> = health
        .iter()
        .filter(|h| h.failed.is_some())
        .map(|h| format!("{} ({})", h.index, h.name))
        .collect();
    let state = if out.is_empty() {
        "closed clean".to_string()
    } else {
        format!(
            "closed DEGRADED: {} of {} members out: {}",
            out.len(),
            health.len(),
            out.join(", ")
        )
    };
    format!(
        "{state} ({} member failure(s), {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s))",
        c.members_failed, c.located, c.repaired, c.unrecoverable
    )
}

/// A scrub (or `scrub --check-only`) that ended with `summary`, the array's counters `c`,
/// `out` members out of the array (what they hold was not checked: a check found it, as
/// `status --check` says).
pub fn scrub_verdict(summary: &ScrubSummary, c: &Counters, out: usize) -> Verdict {
    if !summary.unrecoverable.is_empty() {
        Verdict::Unrecoverable
    } else if c.located > 0 || c.mismatches > 0 || summary.awaiting_resync > 0 || out > 0 {
        Verdict::Found
    } else {
        Verdict::Clean
    }
}

impl LiveStatus {
    /// [`array_states`] as the holder reports them: `unrecoverable` (stripes it refused),
    /// `untrusted`, `degraded`, `rebuilding` (a replace it runs), `scrubbing`, else `clean`.
    pub fn states(&self) -> Vec<&'static str> {
        let mut states = Vec::new();
        if self.unrecoverable > 0 {
            states.push("unrecoverable");
        }
        if !self.untrusted.is_empty() {
            states.push("untrusted");
        }
        if !self.out.is_empty() {
            states.push("degraded");
        }
        if self.replace.as_ref().is_some_and(|r| r.running) {
            states.push("rebuilding");
        }
        if self.scrub.as_ref().is_some_and(|s| s.running) {
            states.push("scrubbing");
        }
        if states.is_empty() {
            states.push("clean");
        }
        states
    }

    /// `status` of an array this holder serves; `check_asked`: `--check` was given, and it
    /// cannot be done while another process holds the array.
    pub fn verdict(&self, check_asked: bool) -> Verdict {
        if !self.untrusted.is_empty() || self.unrecoverable > 0 {
            Verdict::Unrecoverable
        } else if check_asked {
            // A check that was asked for and not done is not a clean result.
            Verdict::NotChecked
        } else if self.out.is_empty() && self.located == 0 {
            Verdict::Clean
        } else {
            Verdict::Found
        }
    }
}

/// The durable log's faults on members' units, by member (`members` of them) and fault class
/// (as `zpool status`' error columns). The checksum member's damaged table counts as that
/// member's checksum failure.
pub fn logged_by_member(log: &LogRead, members: usize) -> Vec<BTreeMap<String, u64>> {
    let mut by_member: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); members];
    for e in &log.entries {
        if matches!(
            e.role,
            EventRole::Data | EventRole::Parity | EventRole::Checksum
        ) {
            if let Some(m) = by_member.get_mut(e.member as usize) {
                let class = match e.kind {
                    EventKind::ChecksumChunk => EventKind::Checksum,
                    k => k,
                };
                *m.entry(class.to_string()).or_default() += 1;
            }
        }
    }
    by_member
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_unrecoverable_outranks_what_was_found() {
        let mut s = ScrubSummary::default();
        let mut c = Counters::default();
        assert_eq!(scrub_verdict(&s, &c, 0), Verdict::Clean);
        assert_eq!(scrub_verdict(&s, &c, 1), Verdict::Found);
        s.awaiting_resync = 2;
        assert_eq!(scrub_verdict(&s, &c, 0), Verdict::Found);
        s.awaiting_resync = 0;
        c.mismatches = 1;
        assert_eq!(scrub_verdict(&s, &c, 0), Verdict::Found);
        s.unrecoverable.push("stripe 3".into());
        assert_eq!(scrub_verdict(&s, &c, 1), Verdict::Unrecoverable);
    }

    #[test]
    fn a_holder_asked_for_a_check_is_not_a_clean_result() {
        let mut live = LiveStatus {
            name: String::new(),
            uuid: String::new(),
            pid: 1,
            command: String::new(),
            detected: 0,
            located: 0,
            repaired: 0,
            unrecoverable: 0,
            resynced: 0,
            out: vec![],
            recent_events: vec![],
            front_end: vec![],
            front_end_latency: vec![],
            replace: None,
            untrusted: vec![],
            members: vec![],
            scrub: None,
            zero_stripes: None,
            grow: None,
            capacity_bytes: 0,
            spares: vec![],
            reshape: None,
        };
        assert_eq!(live.verdict(false), Verdict::Clean);
        assert_eq!(live.verdict(true), Verdict::NotChecked);
        live.out.push((2, "gone".into()));
        assert_eq!(live.verdict(false), Verdict::Found);
        live.untrusted.push(stripeguard_integrity::UntrustedRange {
            stripe: 3,
            position: 0,
            offset: 0,
            len: 4096,
            expected_crc: None,
        });
        assert_eq!(live.verdict(true), Verdict::Unrecoverable);
    }
}
