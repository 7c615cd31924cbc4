//! The durable event log (FORMAT.md §2.5): a ring of 256-byte entries in every member's
//! metadata area, written in batches at each flush, so the evidence of what was found and done
//! travels with the disks.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::Event;
use crate::num::usize_of;
use crate::num::MemberIx;
use serde::Serialize;
use std::collections::BTreeMap;
use stripeguard_disk::DiskRef;
use stripeguard_format::{EventEntry, Record, EVENT_ENTRY_BYTES};
use stripeguard_integrity::Superblock;

/// Bytes per entry.
pub const ENTRY_BYTES: usize = EVENT_ENTRY_BYTES;

/// An event read back from the log.
pub type LoggedEvent = EventEntry;

/// The log as read from the members.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LogRead {
    /// Entries, by number.
    pub entries: Vec<LoggedEvent>,
    /// Entries overwritten because the ring was full.
    pub dropped: u64,
    /// Entries the ring holds.
    pub capacity: u64,
    /// `k` of the array (to name parity positions: P, Q, parity j).
    pub data_chunks: usize,
    /// Intact entries written by a newer build with codes this one does not know (skipped).
    pub not_understood: u64,
    /// The array the log belongs to (hooks and cursors name it).
    pub array_uuid: [u8; 16],
    /// Its name (empty: none).
    pub name: String,
}

fn encode(number: u64, time_unix_ms: u64, e: &Event) -> Vec<u8> {
    EventEntry {
        number,
        time_unix_ms,
        stripe: e.stripe,
        member: u16::try_from(e.member).expect("at most 255 members"),
        position: u16::try_from(e.position).expect("at most 255 positions"),
        role: e.role,
        kind: e.kind,
        evidence: e.evidence.clone(),
        action: e.action,
    }
    .to_copy(ENTRY_BYTES)
    .expect("an entry is ENTRY_BYTES")
}

/// Read the log of the array whose members are `members` (no lock taken: the log is read as
/// it is, entries being written fail their CRC and are skipped). `sb` gives the layout.
pub fn read_log(members: &[DiskRef], sb: &Superblock) -> LogRead {
    let (at, len) = (sb.layout.log_offset(), sb.layout.log_bytes);
    let capacity = len / ENTRY_BYTES as u64;
    let mut by_number: BTreeMap<u64, LoggedEvent> = BTreeMap::new();
    let mut not_understood = std::collections::BTreeSet::new();
    let mut buf = vec![0u8; usize_of(len)];
    for d in members {
        if d.read_at(at, &mut buf).is_err() {
            continue;
        }
        for slot in buf.chunks(ENTRY_BYTES) {
            match EventEntry::read_copy(slot) {
                Ok(Some(e)) => {
                    by_number.entry(e.number).or_insert(e);
                }
                Err(e) if !e.is_damage() => {
                    not_understood.insert(stripeguard_format::cursor::u64_at(slot, 8));
                }
                Ok(None) | Err(_) => {}
            }
        }
    }
    let next = by_number
        .keys()
        .next_back()
        .map(|n| n.saturating_add(1))
        .unwrap_or(0);
    LogRead {
        dropped: next.saturating_sub(by_number.len() as u64 + not_understood.len() as u64),
        entries: by_number.into_values().collect(),
        capacity,
        data_chunks: sb.data_chunks as usize,
        not_understood: not_understood.len() as u64,
        array_uuid: sb.array_uuid,
        name: sb.name.clone(),
    }
}

impl Array {
    /// Append the events recorded since the last save to every current member's log.
    pub(crate) fn save_events(&self) -> Result<(), EngineError> {
        // A reshape's views keep theirs in memory (view.rs).
        if !self.is_writable() || self.view().is_some() {
            return Ok(());
        }
        let unsaved: Vec<(u64, u64, Event)> = self.take_unsaved();
        if unsaved.is_empty() {
            return Ok(());
        }
        let (at, len) = (self.sb().layout.log_offset(), self.sb().layout.log_bytes);
        let capacity = len / ENTRY_BYTES as u64;
        for (number, time, e) in &unsaved {
            let bytes = encode(*number, *time, e);
            let off = at + (number % capacity) * ENTRY_BYTES as u64;
            for (i, d) in self.members().all().iter().enumerate() {
                let i = MemberIx::new(i);
                if self.is_failed(i) {
                    continue;
                }
                if let Err(err) = d.write_at(off, &bytes) {
                    self.fail_member(i, &err)?;
                }
            }
        }
        Ok(())
    }

    /// The durable event log as the current members hold it.
    pub fn event_log(&self) -> LogRead {
        let current: Vec<DiskRef> = self
            .members()
            .all()
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.is_failed(MemberIx::new(*i)))
            .map(|(_, d)| d.clone())
            .collect();
        read_log(&current, self.sb())
    }
}

/// Read the log of the members at `members` without assembling the array (so it works while
/// another process holds it).
pub fn read_log_of(members: &[DiskRef]) -> Result<LogRead, EngineError> {
    let sb = members
        .iter()
        .filter_map(|d| crate::array::read_superblock_of(d.as_ref()).ok())
        .max_by_key(|sb| sb.generation)
        .ok_or_else(|| EngineError::Assemble("no member has a valid superblock".into()))?;
    Ok(read_log(members, &sb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventAction, EventKind, EventRole};

    #[test]
    fn entries_round_trip_and_long_evidence_is_cut_at_a_character() {
        let e = Event {
            stripe: 9,
            member: 3,
            position: 1,
            role: EventRole::Parity,
            kind: EventKind::Outvoted,
            evidence: "é".repeat(200),
            action: EventAction::AppendixRewritten,
        };
        let b = encode(42, 1_700_000_000_123, &e);
        let d = EventEntry::read_copy(&b).unwrap().unwrap();
        assert_eq!((d.number, d.stripe, d.member, d.position), (42, 9, 3, 1));
        assert_eq!((d.role, d.kind), (EventRole::Parity, EventKind::Outvoted));
        assert_eq!(d.action, EventAction::AppendixRewritten);
        assert_eq!(d.evidence, "é".repeat(94));
        for bit in 0..ENTRY_BYTES * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(EventEntry::read_copy(&c).is_err(), "bit {bit}");
        }
        assert_eq!(EventEntry::read_copy(&[0u8; ENTRY_BYTES]), Ok(None));
    }

    /// A state-change entry (kinds 21–27) as a build that does not know the code sees it: an
    /// intact entry a newer build wrote, skipped and counted, never damage (so this build's
    /// metadata scrub leaves it).
    #[test]
    fn an_unknown_kind_is_skipped_and_left() {
        let e = Event {
            stripe: 0,
            member: 2,
            position: 0,
            role: EventRole::Member,
            kind: EventKind::ReplaceStarted,
            evidence: "onto /dev/sdz".into(),
            action: EventAction::Notice,
        };
        let mut b = encode(7, 1, &e);
        assert_eq!(
            EventEntry::read_copy(&b).unwrap().unwrap().kind,
            EventKind::ReplaceStarted
        );
        // A code no build knows yet, re-sealed as its writer would have.
        b[7] = 250;
        let crc = stripeguard_checksum::crc32c(&b[..ENTRY_BYTES - 4]);
        b[ENTRY_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        let err = EventEntry::read_copy(&b).unwrap_err();
        assert!(!err.is_damage(), "{err}");
        assert!(!stripeguard_format::damaged::<EventEntry>(&b));
    }
}
