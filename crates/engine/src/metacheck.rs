//! Scrub of the metadata area (FORMAT.md §2.2–§2.5): every member's two owner-record slots,
//! two checkpoint slots, two write-intent copies and every event-log entry are checked — a
//! region that is neither empty (all zero) nor valid (magic, version, CRC) is damaged. The
//! superblocks are checked and rewritten at every assembly already.
//!
//! Repair (a writable scrub): the two-slot records are written again into both slots on every
//! member from the array's current record (the owner record this process holds, the newest
//! checkpoint, the intent record in memory), so a damaged slot never waits for its turn to be
//! overwritten; a damaged log entry is copied from a member whose copy of the same slot is
//! valid, else cleared (the event is lost; the finding says so).

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{Event, EventAction, EventKind, EventRole};
use crate::num::usize_of;
use crate::num::MemberIx;
use stripeguard_disk::DiskRef;
use stripeguard_integrity::{CHECKPOINT_OFFSET, INTENT_RECORD_OFFSET, OWNER_RECORD_OFFSET};

use stripeguard_format::{
    damaged, Checkpoint, EventEntry, IntentRecord, Owner, Record, StateRecord,
};

/// One damaged copy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MetadataFinding {
    /// Member index.
    pub member: usize,
    /// `owner`, `checkpoint`, `intent`, `state` or `log`.
    pub region: &'static str,
    /// Slot, copy or entry number within the region.
    pub copy: u64,
    /// Rewritten from a good copy (else only reported).
    pub repaired: bool,
    /// Repaired by clearing: no member held a valid copy to rewrite it from (a log entry, whose
    /// event is then lost).
    pub cleared: bool,
}

impl Array {
    /// Check every current member's metadata copies; with `repair` (and a writable array),
    /// rewrite the damaged ones. Findings are events of kind `metadata`.
    pub fn scrub_metadata(&self, repair: bool) -> Result<Vec<MetadataFinding>, EngineError> {
        let repair = repair && self.is_writable();
        let mut found = Vec::new();
        let mut logs: Vec<Option<Vec<u8>>> = Vec::new();
        for (m, d) in self.members().all().iter().enumerate() {
            if self.is_failed(MemberIx::new(m)) {
                logs.push(None);
                continue;
            }
            self.check_records(m, d, &mut found);
            logs.push(self.check_log(m, d, &mut found));
        }
        if repair && !found.is_empty() {
            self.repair_metadata(&mut found, &logs)?;
        }
        self.record_metadata_findings(&found);
        if repair && !found.is_empty() {
            self.flush()?;
        }
        Ok(found)
    }

    /// Check member `m`'s two-slot records (owner, checkpoint, write intent, and the
    /// stripe-state record where the array has one), adding a finding per damaged copy.
    fn check_records(&self, m: usize, d: &DiskRef, found: &mut Vec<MetadataFinding>) {
        let layout = &self.sb().layout;
        let intent_copy = (layout.intent_bytes / 2) as usize;
        check_copies(
            d,
            m,
            "owner",
            OWNER_RECORD_OFFSET,
            Owner::SIZE,
            &damaged::<Owner>,
            found,
        );
        check_copies(
            d,
            m,
            "checkpoint",
            CHECKPOINT_OFFSET,
            Checkpoint::SIZE,
            &damaged::<Checkpoint>,
            found,
        );
        check_copies(
            d,
            m,
            "intent",
            INTENT_RECORD_OFFSET,
            intent_copy,
            &damaged::<IntentRecord>,
            found,
        );
        if layout.state_bytes > 0 {
            check_copies(
                d,
                m,
                "state",
                layout.state_offset(),
                (layout.state_bytes / 2) as usize,
                // Intact but impossible for this array (a stripe, position or zero range it
                // does not have) is damage too: assembly never uses such a copy.
                &|c: &[u8]| {
                    damaged::<StateRecord>(c)
                        || matches!(StateRecord::decode(c), Ok(Some(r)) if !self.untrusted_fits(&r))
                },
                found,
            );
        }
    }

    /// Check member `m`'s event log, adding a finding per damaged entry. Returns the log as
    /// read (a source of good entries for the other members), or `None` when it is unreadable.
    fn check_log(
        &self,
        m: usize,
        d: &DiskRef,
        found: &mut Vec<MetadataFinding>,
    ) -> Option<Vec<u8>> {
        let mut log = vec![0u8; usize_of(self.sb().layout.log_bytes)];
        d.read_at(self.sb().layout.log_offset(), &mut log).ok()?;
        for (j, e) in log.chunks(EventEntry::SIZE).enumerate() {
            if damaged::<EventEntry>(e) {
                found.push(MetadataFinding::new(m, "log", j));
            }
        }
        Some(log)
    }

    /// Repair every finding: the two-slot records rewritten whole, each damaged log entry
    /// copied from a member whose entry is intact (else cleared), then each finding marked
    /// repaired (an owner record only while this process holds one to write).
    fn repair_metadata(
        &self,
        found: &mut [MetadataFinding],
        logs: &[Option<Vec<u8>>],
    ) -> Result<(), EngineError> {
        self.rewrite_records(found)?;
        self.repair_log_entries(found, logs)?;
        for f in found.iter_mut() {
            f.repaired = !(f.region == "owner" && self.ownership().lock().expect("lock").is_none());
        }
        Ok(())
    }

    /// Write each two-slot record with a damaged copy into both its slots on every member,
    /// from the array's current record: the owner record this process holds, the newest
    /// checkpoint, the intent record in memory, the stripe-state record.
    fn rewrite_records(&self, found: &[MetadataFinding]) -> Result<(), EngineError> {
        let regions: std::collections::BTreeSet<&str> = found.iter().map(|f| f.region).collect();
        for region in regions {
            match region {
                "owner" => {
                    let mut mine = self.ownership().lock().expect("lock");
                    if let Some(o) = mine.as_mut() {
                        for _ in 0..2 {
                            o.sequence += 1;
                            self.write_slot(
                                OWNER_RECORD_OFFSET,
                                o.sequence,
                                &crate::heartbeat::slot_bytes(o),
                                true,
                            )?;
                        }
                    }
                }
                "checkpoint" => {
                    let mut c = self.checkpoint().unwrap_or_default();
                    for _ in 0..2 {
                        c.sequence += 1;
                        self.write_slot(
                            CHECKPOINT_OFFSET,
                            c.sequence,
                            &crate::checkpoint::checkpoint_bytes(&c),
                            false,
                        )?;
                    }
                }
                "intent" => {
                    let mut i = self.intent().lock().expect("lock");
                    self.persist_intent(&mut i)?;
                    self.persist_intent(&mut i)?;
                }
                "state" => self.rewrite_untrusted_copies()?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Write each damaged log entry again from the first member whose copy of the same slot
    /// is intact, or as zeros (`cleared`) when none is; a member whose write fails is failed.
    fn repair_log_entries(
        &self,
        found: &mut [MetadataFinding],
        logs: &[Option<Vec<u8>>],
    ) -> Result<(), EngineError> {
        let log_at = self.sb().layout.log_offset();
        let eb = EventEntry::SIZE;
        for f in found.iter_mut().filter(|f| f.region == "log") {
            let j = usize_of(f.copy);
            let good = logs
                .iter()
                .flatten()
                .map(|l| &l[j * eb..(j + 1) * eb])
                .find(|e| EventEntry::intact(e))
                .map(|e| e.to_vec());
            f.cleared = good.is_none();
            let good = good.unwrap_or_else(|| vec![0u8; eb]);
            if let Err(e) = self
                .members()
                .get(MemberIx::new(f.member))
                .write_at(log_at + (j * eb) as u64, &good)
            {
                self.fail_member(MemberIx::new(f.member), &e)?;
            }
        }
        Ok(())
    }

    /// One `metadata` event per finding: repaired, or found on a read-only scrub.
    fn record_metadata_findings(&self, found: &[MetadataFinding]) {
        let events = found.iter().map(|f| Event {
            stripe: 0,
            member: f.member,
            position: 0,
            role: EventRole::Member,
            kind: EventKind::Metadata,
            evidence: finding_evidence(f),
            action: if f.repaired {
                EventAction::Repaired
            } else {
                EventAction::FoundReadOnly
            },
        });
        self.log_events(|_| {}, events);
    }
}

impl MetadataFinding {
    /// Copy `copy` of `region` on member `member` is damaged (not yet repaired).
    fn new(member: usize, region: &'static str, copy: usize) -> MetadataFinding {
        MetadataFinding {
            member,
            region,
            copy: copy as u64,
            repaired: false,
            cleared: false,
        }
    }
}

/// Read both copies (`copy_bytes` each at `at`) of a two-slot record on member `m` and add a
/// finding for each one `is_damaged` says is damaged; an unreadable region adds none.
fn check_copies(
    d: &DiskRef,
    m: usize,
    region: &'static str,
    at: u64,
    copy_bytes: usize,
    is_damaged: &dyn Fn(&[u8]) -> bool,
    found: &mut Vec<MetadataFinding>,
) {
    let mut b = vec![0u8; 2 * copy_bytes];
    if d.read_at(at, &mut b).is_err() {
        return;
    }
    for (j, c) in b.chunks(copy_bytes).enumerate() {
        if is_damaged(c) {
            found.push(MetadataFinding::new(m, region, j));
        }
    }
}

/// The event's evidence for finding `f`: what is damaged, and what was done.
fn finding_evidence(f: &MetadataFinding) -> String {
    format!(
        "{} {} {} of member {} is damaged (neither empty nor valid){}",
        f.region,
        if f.region == "log" { "slot" } else { "copy" },
        f.copy,
        f.member,
        match (f.repaired, f.cleared) {
            (true, false) => "; rewritten from a good copy",
            (true, true) => "; cleared: no member holds a valid copy (the event is lost)",
            (false, _) => "",
        }
    )
}
