//! What a look at an array comes to: a [`Verdict`] for `status`, a scrub and a holder's live
//! status, and the durable log's faults tallied by member. The CLI prints these and maps the
//! verdict to its exit status; the rules are here.

use crate::LiveStatus;
use std::collections::BTreeMap;
use stripeguard_engine::{Array, Counters, EventKind, EventRole, LogRead, ScrubSummary};

/// What a command found, as its exit status will say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// `status` of an array assembled here, after its check when `checked` (`unrecoverable`: the
/// stripes that check refused; `awaiting`: the stripes awaiting resync at assembly, which a
/// check skips).
pub fn status_verdict(
    array: &Array,
    checked: bool,
    unrecoverable: usize,
    awaiting: usize,
) -> Verdict {
    let c = array.counters();
    let out = array.health().iter().any(|h| h.failed.is_some());
    if unrecoverable > 0 || !array.untrusted().is_empty() {
        Verdict::Unrecoverable
    } else if c.located > 0
        || c.mismatches > 0
        || out
        // A check that had to skip stripes awaiting resync is not a clean bill.
        || (checked && array.was_unclean() && awaiting > 0)
    {
        Verdict::Found
    } else {
        Verdict::Clean
    }
}

/// A scrub (or `scrub --check-only`) that ended with `summary`, the array's counters `c`.
pub fn scrub_verdict(summary: &ScrubSummary, c: &Counters) -> Verdict {
    if !summary.unrecoverable.is_empty() {
        Verdict::Unrecoverable
    } else if c.located > 0 || c.mismatches > 0 || summary.awaiting_resync > 0 {
        Verdict::Found
    } else {
        Verdict::Clean
    }
}

impl LiveStatus {
    /// `status` of an array this holder serves; `check_asked`: `--check` was given, and it
    /// cannot be done while another process holds the array.
    pub fn verdict(&self, check_asked: bool) -> Verdict {
        if !self.untrusted.is_empty() {
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
        assert_eq!(scrub_verdict(&s, &c), Verdict::Clean);
        s.awaiting_resync = 2;
        assert_eq!(scrub_verdict(&s, &c), Verdict::Found);
        s.awaiting_resync = 0;
        c.mismatches = 1;
        assert_eq!(scrub_verdict(&s, &c), Verdict::Found);
        s.unrecoverable.push("stripe 3".into());
        assert_eq!(scrub_verdict(&s, &c), Verdict::Unrecoverable);
    }

    #[test]
    fn a_holder_asked_for_a_check_is_not_a_clean_result() {
        let mut live = LiveStatus {
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
            replace: None,
            untrusted: vec![],
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
