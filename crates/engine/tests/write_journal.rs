//! The write journal (`create --journal`, FORMAT.md §2.6) where a crash meets a silent fault.
//!
//! The crash: a whole-chunk write to data unit 0 of stripe 1, not flushed, all of its I/Os
//! landed except the second half of the chunk's blocks (torn). The silent fault: a byte of data
//! unit 2 of the same stripe flipped by hand at FORMAT.md's offset. The next assembly resyncs.
//!
//! With the journal the resync writes the journaled bytes again (chunk 0 comes back whole and
//! new), and since the journal names every unit a write had in flight, the flipped unit is
//! reported as corruption (detected, located, repaired), not as the crash. Negative controls:
//! without the journal the same fault is blamed on the crash (RAID-6) or blessed by a settle and
//! returned (RAID-5), and `none` returns it with or without.
//!
//! The write hole: a chunk landed, its parity did not, and a member holding an untouched chunk
//! is lost before the resync. The journal replays the parity too, so the lost chunk comes back
//! from a parity that matches; without it `none` returns wrong bytes and hybrid-seq loses it.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig, AssembleOptions, EventAction};
use stripeguard_integrity::Scheme;

const CHUNK: usize = 16384;
const STRIPES: u64 = 4;
const S: u64 = 1;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

struct Outcome {
    array: Array,
    old: Vec<u8>,
    new0: Vec<u8>,
    k: usize,
}

/// A fresh array filled with a pattern (`seed`), closed and assembled again: (its members,
/// the open array, what it holds).
fn written(
    scheme: Scheme,
    k: usize,
    m: usize,
    write_journal: bool,
    seed: u8,
) -> (Vec<Arc<MemDisk>>, Array, Vec<u8>) {
    let cfg = ArrayConfig {
        write_journal,
        ..ArrayConfig::new(k, m, scheme, CHUNK as u32, STRIPES)
    };
    let d: Vec<Arc<MemDisk>> = (0..k + m + scheme.extra_members())
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
        .collect();
    let refs: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
    let a = Array::create(refs.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    assert_eq!(a.superblock().write_journal, write_journal);
    let old = pattern(a.capacity_bytes() as usize, seed);
    a.write(0, &old).unwrap();
    a.close().unwrap();
    let a = Array::assemble(refs, &AssembleOptions::default()).unwrap();
    (d, a, old)
}

/// The array on member images as a crash left them (the next assembly resyncs).
fn reassemble(images: Vec<Vec<u8>>) -> Array {
    let refs: Vec<DiskRef> = images
        .into_iter()
        .enumerate()
        .map(|(i, b)| Arc::new(MemDisk::from_bytes(format!("m{i}"), b)) as DiskRef)
        .collect();
    Array::assemble(refs, &AssembleOptions::default()).unwrap()
}

fn crash_with_fault(scheme: Scheme, k: usize, m: usize, write_journal: bool) -> Outcome {
    let (d, a, old) = written(scheme, k, m, write_journal, 1);
    let new0 = pattern(CHUNK, 77);
    let sd = (k * CHUNK) as u64;
    a.write(S * sd, &new0).unwrap();
    // The power cut: every I/O of the write landed (the array is open: dirty, its intent bit
    // and journal record on disk), then the chunk's second half is torn back to old bytes.
    let mut images: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
    let g = a.geometry();
    let base = a.superblock().data_offset_bytes as usize + S as usize * a.unit_bytes() as usize;
    let first = (S as usize * k) * CHUNK;
    let img0 = &mut images[g.member_of(S, 0)];
    img0[base + CHUNK / 2..base + CHUNK].copy_from_slice(&old[first + CHUNK / 2..first + CHUNK]);
    // The silent fault: a byte of data unit 2 (FORMAT.md §2.8: unit S at D + S * U).
    images[g.member_of(S, 2)][base + 3 * 4096 + 17] ^= 0x5a;
    drop(a);

    let array = reassemble(images);
    Outcome {
        array,
        old,
        new0,
        k,
    }
}

impl Outcome {
    /// Chunks `a` and `b` of stripe S as read back (`None`: a read failed).
    fn read_chunks(&self, a: usize, b: usize) -> Option<(Vec<u8>, Vec<u8>)> {
        let read = |pos: usize| {
            let mut c = vec![0u8; CHUNK];
            let at = (S as usize * self.k + pos) * CHUNK;
            self.array.read(at as u64, &mut c).ok().map(|()| c)
        };
        Some((read(a)?, read(b)?))
    }
    /// Chunks 0 and 2 of stripe S as read back.
    fn chunks(&self) -> (Vec<u8>, Vec<u8>) {
        self.read_chunks(0, 2).expect("readable")
    }
    fn old_chunk(&self, pos: usize) -> &[u8] {
        let at = (S as usize * self.k + pos) * CHUNK;
        &self.old[at..at + CHUNK]
    }
    /// How the resync reported data unit 2: (as corruption and repaired, as the crash).
    fn unit2_report(&self) -> (bool, bool) {
        let ev = self.array.events();
        let mine = || {
            ev.iter()
                .filter(|e| e.stripe == S && e.position == 2 && e.role == "data")
        };
        (
            mine().any(|e| e.kind != "resync" && e.action == EventAction::Repaired),
            mine().any(|e| e.kind == "resync"),
        )
    }
}

#[test]
fn a_silent_fault_in_a_dirty_stripe_is_corruption_not_the_crash() {
    for (k, m) in [(4, 2), (3, 1)] {
        for scheme in Scheme::ENGINE {
            if scheme == Scheme::None {
                continue;
            }
            let o = crash_with_fault(scheme, k, m, true);
            let label = format!("{k}+{m} {scheme}: {:?}", o.array.events());
            let (c0, c2) = o.chunks();
            assert!(c0 == o.new0, "chunk 0 is not whole and new: {label}");
            assert!(c2 == o.old_chunk(2), "chunk 2 wrong: {label}");
            let (corruption, blamed_on_crash) = o.unit2_report();
            assert!(corruption && !blamed_on_crash, "{label}");
            assert!(o.array.counters().detected >= 1, "{label}");
            assert!(o.array.superblock().write_journal);
        }
    }
}

#[test]
fn without_the_journal_the_fault_is_blamed_on_the_crash_or_returned() {
    // RAID-6: both bad units are rebuilt, but the flipped one is logged as the crash's.
    let o = crash_with_fault(Scheme::Hybrid1, 4, 2, false);
    let (_, c2) = o.chunks();
    assert!(c2 == o.old_chunk(2));
    assert_eq!(o.unit2_report(), (false, true), "{:?}", o.array.events());
    // RAID-5: two bad units are beyond the parity: the stripe is settled, and the blocks that
    // fail their checks — the torn half of chunk 0 and the flipped block of chunk 2 — are listed
    // untrusted (FORMAT.md §2.7): refused, never returned (a settle used to re-seal them and
    // return the flipped byte). With the journal the same case reads whole and right (above).
    let o = crash_with_fault(Scheme::Hybrid1, 3, 1, false);
    assert!(o.read_chunks(0, 2).is_none(), "{:?}", o.array.events());
    let listed = o.array.untrusted();
    assert!(
        listed
            .iter()
            .any(|r| r.stripe == S && r.position == 2 && r.len == 4096),
        "{listed:?}"
    );
    assert!(
        listed.iter().any(|r| r.stripe == S && r.position == 0),
        "{listed:?}"
    );
    // `none` returns the flipped byte even with the journal: nothing can see it.
    for wj in [true, false] {
        let o = crash_with_fault(Scheme::None, 4, 2, wj);
        let (c0, c2) = o.chunks();
        assert!(c2 != o.old_chunk(2));
        if wj {
            assert!(c0 == o.new0, "the journal makes none's chunk whole too");
        }
    }
}

/// The write hole itself: a write to data unit 0 of stripe S whose chunk landed but whose
/// parity did not, then — before any resync — the member of untouched data unit 3 is lost
/// (replaced by zeros). Unit 3 can only come back from the parity, which no longer matches.
fn crash_then_lose_a_member(scheme: Scheme, k: usize, m: usize, write_journal: bool) -> Outcome {
    let (d, a, old) = written(scheme, k, m, write_journal, 3);
    let before: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
    let new0 = pattern(CHUNK, 91);
    a.write(S * (k * CHUNK) as u64, &new0).unwrap();
    let mut images: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
    let g = a.geometry();
    let unit = a.unit_bytes() as usize;
    let base = a.superblock().data_offset_bytes as usize + S as usize * unit;
    // The parity units (and the checksum member's table) of stripe S never landed.
    for pos in k..k + m + scheme.extra_members() {
        let member = g.member_of(S, pos);
        images[member][base..base + unit].copy_from_slice(&before[member][base..base + unit]);
    }
    drop(a);
    let lost = g.member_of(S, 3);
    images[lost].fill(0);
    let array = reassemble(images);
    Outcome {
        array,
        old,
        new0,
        k,
    }
}

#[test]
fn with_the_journal_a_crash_then_a_lost_member_loses_nothing() {
    for (k, m) in [(4, 1), (4, 2)] {
        for scheme in Scheme::ENGINE {
            let o = crash_then_lose_a_member(scheme, k, m, true);
            let label = format!("{k}+{m} {scheme}: {:?}", o.array.events());
            let (c0, c3) = o
                .read_chunks(0, 3)
                .unwrap_or_else(|| panic!("unreadable: {label}"));
            assert!(c0 == o.new0, "chunk 0 is not the new write: {label}");
            assert!(
                c3 == o.old_chunk(3),
                "chunk 3 (never written) is wrong: {label}"
            );
        }
    }
}

#[test]
fn without_the_journal_a_crash_then_a_lost_member_loses_the_untouched_chunk() {
    // `none` rebuilds unit 3 from the stale parity and returns it: wrong bytes.
    let o = crash_then_lose_a_member(Scheme::None, 4, 1, false);
    let (_, c3) = o
        .read_chunks(0, 3)
        .expect("none reads whatever the parity gives");
    assert!(c3 != o.old_chunk(3));
    // hybrid-seq sees the parity is stale and refuses the stripe: the chunk is lost.
    let o = crash_then_lose_a_member(Scheme::HybridSeq, 4, 1, false);
    assert!(o
        .read_chunks(0, 3)
        .is_none_or(|(_, c3)| c3 != o.old_chunk(3)));
}

/// A power cut in the middle of a journal round: some of the write's records are on disk,
/// the rest (the last one here) are not, and nothing went in place. Then the member of untouched
/// data unit 3 is lost. The round must be ignored whole: replaying the records that made it
/// would change the data without the parity that follows it.
fn crash_in_the_journal_round(scheme: Scheme, k: usize, m: usize) -> Outcome {
    let (d, a, old) = written(scheme, k, m, true, 5);
    let before: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
    let new0 = pattern(CHUNK, 93);
    a.write(S * (k * CHUNK) as u64, &new0).unwrap();
    let mut images: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
    let g = a.geometry();
    let sb = a.superblock().clone();
    let unit = a.unit_bytes() as usize;
    let base = sb.data_offset_bytes as usize + S as usize * unit;
    let (journal, slot) = (
        sb.journal_offset() as usize,
        sb.journal_slot_bytes() as usize,
    );
    drop(a);
    // Nothing in place.
    for (img, old) in images.iter_mut().zip(&before) {
        img[base..base + unit].copy_from_slice(&old[base..base + unit]);
    }
    // The round's last record never landed, on any member.
    let last = (0..sb.journal_slots as usize)
        .rev()
        .find(|&s| {
            let r = journal + s * slot..journal + (s + 1) * slot;
            images
                .iter()
                .zip(&before)
                .any(|(i, b)| i[r.clone()] != b[r.clone()])
        })
        .expect("the write journaled something");
    for (img, old) in images.iter_mut().zip(&before) {
        let r = journal + last * slot..journal + (last + 1) * slot;
        img[r.clone()].copy_from_slice(&old[r]);
    }
    images[g.member_of(S, 3)].fill(0);
    Outcome {
        array: reassemble(images),
        old,
        new0,
        k,
    }
}

#[test]
fn a_journal_round_cut_short_is_not_replayed() {
    for (k, m) in [(4, 1), (4, 2)] {
        for scheme in Scheme::ENGINE {
            let o = crash_in_the_journal_round(scheme, k, m);
            let label = format!("{k}+{m} {scheme}: {:?}", o.array.events());
            let (c0, c3) = o
                .read_chunks(0, 3)
                .unwrap_or_else(|| panic!("unreadable: {label}"));
            assert!(c0 == o.old_chunk(0), "chunk 0 is not the old one: {label}");
            assert!(
                c3 == o.old_chunk(3),
                "chunk 3 (never written) is wrong: {label}"
            );
            assert!(o.new0 != o.old_chunk(0));
        }
    }
}

/// Outside attack (issue 32): a valid unit-writes record put into every member's journal slot 0
/// of a dirty array is replayed only when it is this array's: never in an array without the
/// write journal (feature bit 1), never when it names another array (a slot copied from one).
/// Before, both were replayed and `read` returned the record's bytes as the data.
#[test]
fn a_journal_record_that_is_not_this_arrays_is_never_replayed() {
    use stripeguard_format::{JournalHeader, JournalKind, Record};
    for (write_journal, uuid_of_other) in [(false, false), (true, true)] {
        let (d, a, old) = written(Scheme::None, 3, 1, write_journal, 5);
        // Dirty: open, with a write in flight's bookkeeping on disk.
        a.write(0, &old[..CHUNK]).unwrap();
        let sb = a.superblock().clone();
        let g = a.geometry();
        let mut images: Vec<Vec<u8>> = d.iter().map(|x| x.snapshot()).collect();
        drop(a);
        let payload = vec![0xAAu8; 4096];
        let header = JournalHeader {
            kind: JournalKind::UnitWrites,
            sequence: 1,
            stripe: 1,
            position: 0,
            payload_crc: stripeguard_checksum::crc32c(&payload),
            event: sb.generation,
            extents: vec![(0, 4096)],
            touched: [1; 32],
            round: (1, 1),
            array_uuid: if uuid_of_other {
                [0x99; 16]
            } else {
                sb.array_uuid
            },
        };
        let mut slot = header.to_copy(JournalHeader::SIZE).unwrap();
        slot.extend_from_slice(&payload);
        let at = sb.journal_offset() as usize;
        for img in &mut images {
            img[at..at + slot.len()].copy_from_slice(&slot);
        }
        let array = reassemble(images);
        let mut got = vec![0u8; 4096];
        let first = g.k * CHUNK;
        array.read(first as u64, &mut got).unwrap();
        assert!(
            got == old[first..first + 4096],
            "write journal {write_journal}, another array's record {uuid_of_other}: replayed"
        );
    }
}
