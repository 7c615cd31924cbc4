//! The durable event log (FORMAT.md §2.1c): a ring of 256-byte entries in every member's
//! metadata area, written in batches at each flush, so the evidence of what was found and done
//! travels with the disks.

use crate::events::{Event, EventAction};
use crate::{Array, EngineError};
use serde::Serialize;
use std::collections::BTreeMap;
use stripeguard_checksum::crc32c;
use stripeguard_disk::DiskRef;
use stripeguard_integrity::Superblock;

const MAGIC: [u8; 4] = *b"SGEV";
const VERSION: u8 = 1;
/// Bytes per entry.
pub const ENTRY_BYTES: usize = 256;
const CRC_AT: usize = ENTRY_BYTES - 4;

const ACTIONS: [EventAction; 9] = [
    EventAction::Repaired,
    EventAction::AppendixRewritten,
    EventAction::Reread,
    EventAction::RebuiltDegraded,
    EventAction::FoundReadOnly,
    EventAction::Unrecoverable,
    EventAction::Resynced,
    EventAction::Mismatch,
    EventAction::Notice,
];
const ROLES: [&str; 4] = ["data", "parity", "stripe", "member"];

/// An event read back from the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoggedEvent {
    /// Entry number, in the order recorded.
    pub number: u64,
    /// Unix milliseconds.
    pub time_unix_ms: u64,
    /// Stripe.
    pub stripe: u64,
    /// Member index.
    pub member: u16,
    /// Position in the stripe.
    pub position: u16,
    /// `data`, `parity`, `stripe` or `member`.
    pub role: String,
    /// Finding kind.
    pub kind: String,
    /// Evidence.
    pub evidence: String,
    /// What was done.
    pub action: EventAction,
}

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
}

fn encode(number: u64, time_unix_ms: u64, e: &Event) -> [u8; ENTRY_BYTES] {
    let mut b = [0u8; ENTRY_BYTES];
    b[0..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    b[5] = ACTIONS.iter().position(|a| *a == e.action).unwrap_or(0) as u8 + 1;
    b[6] = ROLES.iter().position(|r| *r == e.role).unwrap_or(2) as u8 + 1;
    b[8..16].copy_from_slice(&number.to_le_bytes());
    b[16..24].copy_from_slice(&time_unix_ms.to_le_bytes());
    b[24..32].copy_from_slice(&e.stripe.to_le_bytes());
    b[32..34].copy_from_slice(&(e.member as u16).to_le_bytes());
    b[34..36].copy_from_slice(&(e.position as u16).to_le_bytes());
    put_str(&mut b[40..64], e.kind);
    put_str(&mut b[64..CRC_AT], &e.evidence);
    let crc = crc32c(&b[..CRC_AT]);
    b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Copy `s` into `dst`, cut at a character boundary, NUL-padded.
fn put_str(dst: &mut [u8], s: &str) {
    let mut end = s.len().min(dst.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    dst[..end].copy_from_slice(&s.as_bytes()[..end]);
}

fn get_str(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Parse one entry; `None` when empty or damaged. Never panics.
pub(crate) fn decode(b: &[u8]) -> Option<LoggedEvent> {
    if b.len() < ENTRY_BYTES
        || b[0..4] != MAGIC
        || b[4] != VERSION
        || b[CRC_AT..ENTRY_BYTES] != crc32c(&b[..CRC_AT]).to_le_bytes()
    {
        return None;
    }
    let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let action = *ACTIONS.get((b[5] as usize).checked_sub(1)?)?;
    let role = ROLES.get((b[6] as usize).checked_sub(1)?)?.to_string();
    Some(LoggedEvent {
        number: u(8),
        time_unix_ms: u(16),
        stripe: u(24),
        member: u16::from_le_bytes([b[32], b[33]]),
        position: u16::from_le_bytes([b[34], b[35]]),
        role,
        kind: get_str(&b[40..64]),
        evidence: get_str(&b[64..CRC_AT]),
        action,
    })
}

/// Read the log of the array whose members are `members` (no lock taken: the log is read as
/// it is, entries being written fail their CRC and are skipped). `sb` gives the layout.
pub fn read_log(members: &[DiskRef], sb: &Superblock) -> LogRead {
    let (at, len) = (sb.layout.log_offset(), sb.layout.log_bytes);
    let capacity = len / ENTRY_BYTES as u64;
    let mut by_number: BTreeMap<u64, LoggedEvent> = BTreeMap::new();
    let mut buf = vec![0u8; len as usize];
    for d in members {
        if d.read_at(at, &mut buf).is_err() {
            continue;
        }
        for slot in buf.chunks(ENTRY_BYTES) {
            if let Some(e) = decode(slot) {
                by_number.entry(e.number).or_insert(e);
            }
        }
    }
    let next = by_number.keys().next_back().map(|n| n + 1).unwrap_or(0);
    LogRead {
        dropped: next.saturating_sub(by_number.len() as u64),
        entries: by_number.into_values().collect(),
        capacity,
        data_chunks: sb.data_chunks as usize,
    }
}

impl Array {
    /// Append the events recorded since the last save to every current member's log.
    pub(crate) fn save_events(&self) -> Result<(), EngineError> {
        if !self.writable {
            return Ok(());
        }
        let unsaved: Vec<(u64, u64, Event)> =
            std::mem::take(&mut self.events.lock().expect("lock").unsaved);
        if unsaved.is_empty() {
            return Ok(());
        }
        let (at, len) = (self.sb.layout.log_offset(), self.sb.layout.log_bytes);
        let capacity = len / ENTRY_BYTES as u64;
        for (number, time, e) in &unsaved {
            let bytes = encode(*number, *time, e);
            let off = at + (number % capacity) * ENTRY_BYTES as u64;
            for (i, d) in self.members.all().iter().enumerate() {
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
            .members
            .all()
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.is_failed(*i))
            .map(|(_, d)| d.clone())
            .collect();
        read_log(&current, &self.sb)
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

    #[test]
    fn entries_round_trip_and_long_evidence_is_cut_at_a_character() {
        let e = Event {
            stripe: 9,
            member: 3,
            position: 1,
            role: "parity",
            kind: "outvoted",
            evidence: "é".repeat(200),
            action: EventAction::AppendixRewritten,
        };
        let b = encode(42, 1_700_000_000_123, &e);
        let d = decode(&b).unwrap();
        assert_eq!((d.number, d.stripe, d.member, d.position), (42, 9, 3, 1));
        assert_eq!((d.role.as_str(), d.kind.as_str()), ("parity", "outvoted"));
        assert_eq!(d.action, EventAction::AppendixRewritten);
        assert_eq!(d.evidence, "é".repeat(94));
        for bit in 0..ENTRY_BYTES * 8 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&c).is_none(), "bit {bit}");
        }
        assert!(decode(&[0u8; ENTRY_BYTES]).is_none());
    }
}
