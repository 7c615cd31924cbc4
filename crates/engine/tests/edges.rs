//! The edges of the fault model where the engine once returned wrong bytes with success
//! (issue 16), each with its negative control:
//! 1. k = 1: pure and hybrid2 have no buddy, so `create` refuses them; hybrid1 / hybrid-seq
//!    still catch a flipped bit.
//! 2. Two lost writes in one RAID-6 stripe (a data unit and P keep their old bytes, Q has the
//!    new entry): cross-check `all` catches it on the read path; `one` (the paper's cost) does not.
//! 3. A member that missed writes (stale event count) is never taken for current; two halves
//!    assembled apart (split brain) are refused; a member failed at run time is recorded.
//! 4. `none`'s full check reports a stripe whose parity disagrees with its data.

#![allow(
    clippy::disallowed_methods,
    reason = "the owner-record test compares with this real process and clock"
)]
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::SeedableRng;
use std::sync::Arc;
use stripeguard_disk::{Disk, DiskRef, FailedDisk, Fault, FaultyDisk, MemDisk};
use stripeguard_engine::{create_accepts, Array, ArrayConfig, AssembleOptions, EngineError};
use stripeguard_integrity::{CrossCheck, MemberState, MetadataLayout, Scheme};

const CHUNK: u32 = 4096;
const STRIPES: u64 = 8;

fn mems(scheme: Scheme, n: usize) -> Vec<Arc<MemDisk>> {
    let unit = CHUNK as u64 + if scheme.has_appendix() { 512 } else { 0 };
    let size = MetadataLayout::member_bytes_for(STRIPES, unit);
    // `n` data and parity members, and the checksum member of a checksum-chunk array.
    (0..n + scheme.extra_members())
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect()
}

fn refs(m: &[Arc<MemDisk>]) -> Vec<DiskRef> {
    m.iter().map(|d| d.clone() as DiskRef).collect()
}

fn create(m: &[Arc<MemDisk>], cfg: &ArrayConfig) -> Result<(), EngineError> {
    Array::create(refs(m), cfg, true, &mut |_, _| {})?.close()
}

fn assemble(d: Vec<DiskRef>) -> Result<Array, EngineError> {
    Array::assemble(d, &AssembleOptions::default())
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).rotate_left(3))
        .collect()
}

#[test]
fn k1_refuses_checksum_mirroring_and_versions_catch_a_flip() {
    for scheme in [Scheme::Pure, Scheme::Hybrid2] {
        for m in [1, 2] {
            let d = mems(scheme, 1 + m);
            let e = create(&d, &ArrayConfig::new(1, m, scheme, CHUNK, STRIPES)).unwrap_err();
            assert!(e.to_string().contains("buddy"), "{scheme} 1+{m}: {e}");
        }
    }
    // The refused schemes' sibling: one flipped bit in the only data chunk of a 1+1 array.
    for scheme in [Scheme::None, Scheme::Hybrid1, Scheme::HybridSeq] {
        let d = mems(scheme, 2);
        create(&d, &ArrayConfig::new(1, 1, scheme, CHUNK, STRIPES)).unwrap();
        let a = assemble(refs(&d)).unwrap();
        let data = bytes(CHUNK as usize, 1);
        a.write(0, &data).unwrap();
        let (g, off) = (a.geometry(), a.superblock().data_offset_bytes as usize);
        a.close().unwrap();
        d[g.member_of(0, 0)].with_bytes_mut(|b| b[off + 100] ^= 0x55);
        let a = assemble(refs(&d)).unwrap();
        let mut back = vec![0u8; CHUNK as usize];
        a.read(0, &mut back).unwrap();
        if scheme == Scheme::None {
            assert_ne!(back, data, "the negative control returned the right bytes");
        } else {
            assert_eq!(back, data, "{scheme}");
            assert_eq!(a.counters().located, 1, "{scheme}");
        }
    }
}

/// `create_accepts` (the rule the campaigns pick their shapes by) says what `create` does.
#[test]
fn create_accepts_says_what_create_does() {
    for scheme in Scheme::ENGINE {
        for k in 1..=3 {
            let d = mems(scheme, k + 1);
            let made = create(&d, &ArrayConfig::new(k, 1, scheme, CHUNK, STRIPES));
            assert_eq!(
                create_accepts(k, scheme),
                made.is_ok(),
                "{scheme} {k}+1: {made:?}"
            );
        }
    }
}

/// Write A over the stripe, then B into data chunk 0, with data chunk 0's and P's units of
/// stripe 0 rolled back to their A contents (two lost writes). Returns what a read of chunk 0
/// gives on a fresh assembly.
fn two_lost_writes(scheme: Scheme, cross: CrossCheck) -> Result<Vec<u8>, EngineError> {
    lost_writes(scheme, cross, &[(0, 0), (4, 0)], CHUNK as usize)
}

/// Write A over a 4+2 stripe, then B into data chunk 0, then roll the bytes from `from` to the
/// end of unit `pos` of stripe 0 back to their A contents for every `(pos, from)` of
/// `rolled_back` (lost writes, whole or of the appendix alone). Returns what a read of `len`
/// bytes at 0 gives on a fresh assembly (first-read state).
fn lost_writes(
    scheme: Scheme,
    cross: CrossCheck,
    rolled_back: &[(usize, usize)],
    len: usize,
) -> Result<Vec<u8>, EngineError> {
    let d = mems(scheme, 6);
    let cfg = ArrayConfig {
        cross_check: cross,
        ..ArrayConfig::new(4, 2, scheme, CHUNK, STRIPES)
    };
    create(&d, &cfg).unwrap();
    let a = assemble(refs(&d)).unwrap();
    a.write(0, &bytes(4 * CHUNK as usize, 7)).unwrap();
    let (g, off, unit) = (
        a.geometry(),
        a.superblock().data_offset_bytes as usize,
        a.unit_bytes() as usize,
    );
    a.close().unwrap();
    let victims: Vec<(usize, usize)> = rolled_back
        .iter()
        .map(|&(pos, from)| (g.member_of(0, pos), from))
        .collect();
    let old: Vec<Vec<u8>> = victims
        .iter()
        .map(|&(v, from)| d[v].snapshot()[off + from..off + unit].to_vec())
        .collect();
    let a = assemble(refs(&d)).unwrap();
    a.write(0, &bytes(CHUNK as usize, 99)).unwrap();
    a.close().unwrap();
    for (&(v, from), o) in victims.iter().zip(&old) {
        d[v].with_bytes_mut(|b| b[off + from..off + unit].copy_from_slice(o));
    }
    let a = assemble(refs(&d)).unwrap();
    let mut back = vec![0u8; len];
    a.read(0, &mut back).map(|()| back)
}

#[test]
fn two_lost_writes_in_one_raid6_stripe_are_never_returned_with_cross_check_all() {
    let old = bytes(CHUNK as usize, 7);
    let new = bytes(CHUNK as usize, 99);
    for scheme in Scheme::ENGINE {
        let all = two_lost_writes(scheme, CrossCheck::All);
        match scheme {
            // Nothing to check: the negative control.
            Scheme::None => assert_eq!(all.unwrap(), old),
            // Q's newer version / sequence wins.
            Scheme::Hybrid1 | Scheme::HybridSeq => assert_eq!(all.unwrap(), new, "{scheme}"),
            // The table names both stale units; rebuilt from Q they agree with it.
            Scheme::ChecksumChunk => assert_eq!(all.unwrap(), new, "{scheme}"),
            // Two copies say A, two say B: a tie is an error, never either version.
            Scheme::Pure | Scheme::Hybrid2 => {
                let e = all.unwrap_err();
                assert!(
                    matches!(e, EngineError::Unrecoverable { .. }),
                    "{scheme}: {e}"
                );
            }
        }
        // The paper's cost (cross-check P only) does not see it: why `all` exists.
        if scheme.has_appendix() {
            assert_eq!(
                two_lost_writes(scheme, CrossCheck::One).unwrap(),
                old,
                "{scheme}"
            );
        }
    }
}

/// Data chunk 0's unit and its buddy's (chunk 1's) appendix lose the same write: the chunk and
/// its buddy's copy of its checksum are old, P and Q hold B's checksum (issue 30, item 5).
fn lost_write_with_its_buddy(
    scheme: Scheme,
    cross: CrossCheck,
    len: usize,
) -> Result<Vec<u8>, EngineError> {
    lost_writes(scheme, cross, &[(0, 0), (1, CHUNK as usize)], len)
}

#[test]
fn a_lost_write_with_its_buddy_appendix_is_caught_by_full_stripe_reads_with_cross_check_all() {
    let (chunk, stripe) = (CHUNK as usize, 4 * CHUNK as usize);
    let old = bytes(stripe, 7);
    for scheme in [Scheme::Pure, Scheme::Hybrid2] {
        for cross in [CrossCheck::One, CrossCheck::All] {
            // The chunk alone: its cross-check sees P's newer checksum; the full diagnosis
            // then finds two copies for A and two for B, a tie: an error, never either.
            let e = lost_write_with_its_buddy(scheme, cross, chunk).unwrap_err();
            assert!(
                matches!(e, EngineError::Unrecoverable { .. }),
                "{scheme} {cross:?} chunk read: {e}"
            );
        }
        // The whole stripe with `all`: every first-read chunk is cross-checked against every
        // parity as in a partial read, so the same tie is found.
        match lost_write_with_its_buddy(scheme, CrossCheck::All, stripe) {
            Err(EngineError::Unrecoverable { .. }) => {}
            Err(e) => panic!("{scheme} full-stripe read: {e}"),
            Ok(back) => panic!(
                "{scheme} full-stripe read returned {} bytes (old: {})",
                back.len(),
                back[..chunk] == old[..chunk]
            ),
        }
        // The paper's cost (`one`) keeps Table II's full-stripe read of pure and hybrid2: no
        // cross-check, the buddy agrees with the old chunk, the old bytes come back.
        let back = lost_write_with_its_buddy(scheme, CrossCheck::One, stripe).unwrap();
        assert_eq!(back[..chunk], old[..chunk], "{scheme}");
    }
}

#[test]
fn a_member_that_missed_writes_is_never_current() {
    for scheme in [
        Scheme::None,
        Scheme::Hybrid1,
        Scheme::HybridSeq,
        Scheme::Hybrid2,
    ] {
        let d = mems(scheme, 4);
        create(&d, &ArrayConfig::new(3, 1, scheme, CHUNK, STRIPES)).unwrap();
        let a = assemble(refs(&d)).unwrap();
        let old = bytes(3 * CHUNK as usize * 2, 1);
        a.write(0, &old).unwrap();
        a.close().unwrap();
        // Member 2 is missing while B is written.
        let mut without = refs(&d);
        without[2] = Arc::new(FailedDisk::new("m2", "absent"));
        let a = assemble(without).unwrap();
        let new = bytes(old.len(), 2);
        a.write(0, &new).unwrap();
        assert_eq!(a.member_table()[2].state, MemberState::Missing);
        a.close().unwrap();
        // It comes back: stale, the array runs degraded and returns B.
        let a = assemble(refs(&d)).unwrap();
        let h = a.health();
        assert!(
            h[2].failed.as_deref().unwrap_or("").contains("stale"),
            "{h:?}"
        );
        let mut back = vec![0u8; new.len()];
        a.read(0, &mut back).unwrap();
        assert_eq!(back, new, "{scheme}");
        a.close().unwrap();
        // One more member lost: too few current members, a clear error (never A's bytes).
        let mut lost = refs(&d);
        lost[3] = Arc::new(FailedDisk::new("m3", "absent"));
        let e = assemble(lost).err().expect("refused");
        assert!(e.to_string().contains("stale"), "{e}");
    }
}

#[test]
fn halves_assembled_apart_are_refused_together() {
    let scheme = Scheme::HybridSeq;
    let d = mems(scheme, 4);
    create(&d, &ArrayConfig::new(2, 2, scheme, CHUNK, STRIPES)).unwrap();
    let half = |keep: [usize; 2], seed: u8| {
        let members: Vec<DiskRef> = (0..4)
            .map(|i| {
                if keep.contains(&i) {
                    d[i].clone() as DiskRef
                } else {
                    Arc::new(FailedDisk::new(format!("m{i}"), "absent")) as DiskRef
                }
            })
            .collect();
        let a = assemble(members).unwrap();
        a.write(0, &bytes(2 * CHUNK as usize, seed)).unwrap();
        a.close().unwrap();
    };
    half([0, 1], 1);
    half([2, 3], 2);
    let e = assemble(refs(&d)).err().expect("refused").to_string();
    assert!(e.contains("split brain"), "{e}");
    for name in ["m0", "m1", "m2", "m3"] {
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn a_member_failed_at_run_time_is_recorded_before_writes_go_on() {
    let scheme = Scheme::Hybrid1;
    let d = mems(scheme, 4);
    create(&d, &ArrayConfig::new(3, 1, scheme, CHUNK, STRIPES)).unwrap();
    let probe = assemble(refs(&d)).unwrap();
    let map = probe.unit_map();
    probe.close().unwrap();
    let faulty: Vec<Arc<FaultyDisk>> = d
        .iter()
        .map(|m| Arc::new(FaultyDisk::new(m.clone() as DiskRef, map).unwrap()))
        .collect();
    let a = assemble(faulty.iter().map(|f| f.clone() as DiskRef).collect()).unwrap();
    faulty[1].arm(0, Fault::MemberFailure).unwrap();
    let new = bytes(3 * CHUNK as usize, 5);
    a.write(0, &new).unwrap();
    assert_eq!(a.member_table()[1].state, MemberState::Failed);
    a.close().unwrap();
    // The member "heals" (the same bytes, reachable again): it missed the write, so it is stale.
    let a = assemble(refs(&d)).unwrap();
    assert!(a.health()[1].failed.is_some(), "{:?}", a.health());
    let mut back = vec![0u8; new.len()];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, new);
}

#[test]
fn none_check_reports_parity_that_disagrees_with_data() {
    let d = mems(Scheme::None, 3);
    create(&d, &ArrayConfig::new(2, 1, Scheme::None, CHUNK, STRIPES)).unwrap();
    let a = assemble(refs(&d)).unwrap();
    a.write(0, &bytes(2 * CHUNK as usize * STRIPES as usize, 3))
        .unwrap();
    let (g, off) = (a.geometry(), a.superblock().data_offset_bytes as usize);
    a.close().unwrap();
    // Before any damage: nothing reported.
    let ro = AssembleOptions {
        writable: false,
        ..Default::default()
    };
    let a = Array::assemble(refs(&d), &ro).unwrap();
    for s in 0..STRIPES {
        a.scrub_stripe(s).unwrap();
    }
    assert_eq!(a.counters().mismatches, 0);
    drop(a);
    let unit = CHUNK as usize;
    d[g.member_of(5, 2)].with_bytes_mut(|b| b[off + 5 * unit + 17] ^= 1);
    let a = Array::assemble(refs(&d), &ro).unwrap();
    for s in 0..STRIPES {
        a.scrub_stripe(s).unwrap();
    }
    assert_eq!(a.counters().mismatches, 1);
    assert_eq!(a.events()[0].stripe, 5);
}

#[test]
fn a_damaged_intent_record_resyncs_every_stripe_and_a_clean_one_nothing() {
    let scheme = Scheme::HybridSeq;
    let d = mems(scheme, 4);
    create(&d, &ArrayConfig::new(3, 1, scheme, CHUNK, STRIPES)).unwrap();
    let a = assemble(refs(&d)).unwrap();
    a.write(0, &bytes(3 * CHUNK as usize, 1)).unwrap();
    let layout = a.superblock().layout;
    drop(a); // no close: the array stays dirty, one region's bit set
    let a = assemble(refs(&d)).unwrap();
    assert_eq!(
        a.counters().resynced,
        STRIPES,
        "one region covers these stripes"
    );
    a.close().unwrap();
    // Clean close: nothing to resync.
    let a = assemble(refs(&d)).unwrap();
    assert_eq!(a.counters().resynced, 0);
    drop(a);
    // Dirty, and the record damaged on every member: every stripe is resynced.
    for m in &d {
        m.with_bytes_mut(|b| {
            let at = stripeguard_integrity::INTENT_RECORD_OFFSET as usize;
            for x in &mut b[at..at + layout.intent_bytes as usize] {
                *x ^= 0x5a;
            }
        });
    }
    let a = assemble(refs(&d)).unwrap();
    assert_eq!(a.counters().resynced, STRIPES);
    let mut back = vec![0u8; 3 * CHUNK as usize];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, bytes(3 * CHUNK as usize, 1));
}

#[test]
fn the_owner_record_guards_members_no_lock_can() {
    let scheme = Scheme::Hybrid1;
    let d = mems(scheme, 3);
    create(&d, &ArrayConfig::new(2, 1, scheme, CHUNK, STRIPES)).unwrap();
    // Memory members have no flock: only the owner record stands between two assemblies.
    let first = assemble(refs(&d)).unwrap();
    let e = assemble(refs(&d))
        .err()
        .expect("a second writer")
        .to_string();
    assert!(
        e.contains("in use by process") && e.contains("owner record"),
        "{e}"
    );
    // Read-only assembly does not need ownership.
    let ro = AssembleOptions {
        writable: false,
        ..Default::default()
    };
    assert!(Array::assemble(refs(&d), &ro).is_ok());
    // The first dropped without close (a crash): the next takes over.
    drop(first);
    let second = assemble(refs(&d)).unwrap();
    let o = second.owner().unwrap();
    assert!(o.held && o.pid == std::process::id());
    second.close().unwrap();
    // After a clean close the record says free.
    let probe = Array::assemble(refs(&d), &ro).unwrap();
    assert!(!probe.owner().unwrap().held);
    drop(probe);
    // A holder on another host with a fresh heartbeat is respected; a silent one is taken over
    // after waiting two intervals without its heartbeat moving.
    let a = Array::assemble(
        refs(&d),
        &AssembleOptions {
            heartbeat: std::time::Duration::from_millis(40),
            ..Default::default()
        },
    )
    .unwrap();
    drop(a); // left held, by "this" process
    let hold_elsewhere = |heartbeat_ms: u64| {
        // Rewrite the slots as another host's, re-sealed (FORMAT.md §2.2).
        for m in &d {
            m.with_bytes_mut(|b| {
                for slot in [8192usize, 8192 + 2048] {
                    let s = &mut b[slot..slot + 2048];
                    if s[0..8] != *b"SGOWNER\0" {
                        continue;
                    }
                    s[88..152].fill(0);
                    s[88..97].copy_from_slice(b"elsewhere");
                    s[72..80].copy_from_slice(&heartbeat_ms.to_le_bytes());
                    let crc = stripeguard_checksum::crc32c(&s[..2044]);
                    s[2044..].copy_from_slice(&crc.to_le_bytes());
                }
            });
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    hold_elsewhere(now);
    let e = assemble(refs(&d)).err().expect("refused").to_string();
    assert!(e.contains("elsewhere") && e.contains("heartbeat"), "{e}");
    hold_elsewhere(now - 60_000);
    let taken = assemble(refs(&d)).unwrap();
    assert_ne!(taken.owner().unwrap().host, "elsewhere");
    taken.close().unwrap();
}

#[test]
fn a_misdirected_write_inside_a_dirty_stripe_is_reported_as_corruption_not_crash() {
    use stripeguard_disk::{damage_at_rest, AtRest};
    let scheme = Scheme::HybridSeq;
    let d = mems(scheme, 6);
    create(&d, &ArrayConfig::new(4, 2, scheme, CHUNK, STRIPES)).unwrap();
    let a = assemble(refs(&d)).unwrap();
    let data = bytes(4 * CHUNK as usize * STRIPES as usize, 9);
    a.write(0, &data).unwrap();
    let map = a.unit_map();
    drop(a); // unclean: the whole array is one dirty region
             // On top of the crash, member 1's unit 2 lands on its unit 5 (an aligned misdirected write).
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    damage_at_rest(
        d[1].as_ref(),
        &map,
        2,
        AtRest::MisdirectedWrite {
            victim: 5,
            shift_sectors: 0,
        },
        &mut rng,
    )
    .unwrap();
    let a = assemble(refs(&d)).unwrap();
    let c = a.counters();
    assert_eq!(
        c.located, 1,
        "the misdirected unit is corruption, not crash: {c:?}"
    );
    let e = a.events();
    assert!(
        e.iter().any(|e| e.kind == "identity" && e.stripe == 5),
        "{e:?}"
    );
    let mut back = vec![0u8; data.len()];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, data);
}

/// Outside attack (issue 32): a superblock whose stripes field (CRC recomputed, on every member,
/// both copies) describes more than the members hold is refused at assembly, naming the field.
/// Before, the array assembled, a scrub read past the members' end, took two of them out, and
/// left an array no command could assemble.
#[test]
fn a_superblock_describing_more_than_the_members_hold_is_refused() {
    use stripeguard_format::{Record, Superblock};
    let cfg = ArrayConfig::new(3, 1, Scheme::Hybrid1, CHUNK, STRIPES);
    let m = mems(Scheme::Hybrid1, 4);
    create(&m, &cfg).unwrap();
    for d in &m {
        for at in [0u64, 4096] {
            let mut b = vec![0u8; 4096];
            d.read_at(at, &mut b).unwrap();
            b[56..64].copy_from_slice(&(STRIPES * 40).to_le_bytes());
            Superblock::reseal(&mut b);
            d.write_at(at, &b).unwrap();
        }
    }
    let err = assemble(refs(&m)).err().expect("refused");
    assert!(err.to_string().contains("stripes or geometry"), "{err}");
}

/// Outside attack (issue 32): an intact event-log entry numbered u64::MAX on one member (a
/// forged or damaged log) must not panic any command (it did: "attempt to add with overflow").
#[test]
fn an_event_numbered_u64_max_does_not_panic() {
    use stripeguard_format::{EventAction, EventEntry, EventKind, EventRole, Record};
    let cfg = ArrayConfig::new(3, 1, Scheme::Hybrid1, CHUNK, STRIPES);
    let m = mems(Scheme::Hybrid1, 4);
    create(&m, &cfg).unwrap();
    let a = assemble(refs(&m)).unwrap();
    let log_at = a.superblock().layout.log_offset();
    a.close().unwrap();
    let e = EventEntry {
        number: u64::MAX,
        time_unix_ms: 1,
        stripe: 0,
        member: 0,
        position: 0,
        role: EventRole::Data,
        kind: EventKind::Checksum,
        evidence: "forged".into(),
        action: EventAction::Notice,
    };
    m[3].write_at(log_at, &e.to_copy(EventEntry::SIZE).unwrap())
        .unwrap();
    let a = assemble(refs(&m)).unwrap();
    a.write(0, &bytes(4096, 1)).unwrap();
    a.flush().unwrap();
    assert!(a.event_log().entries.iter().any(|x| x.number == u64::MAX));
    a.close().unwrap();
}

/// Outside comparison (issue 33): a member cut short (a truncated file) was used until the first
/// I/O past its end failed it, and between runs `replace` called it healthy. It is out from the
/// assembly on, with the reason, and the array reads every byte from the others.
#[test]
fn a_truncated_member_is_out_from_assembly_with_the_reason() {
    let cfg = ArrayConfig::new(3, 1, Scheme::Hybrid1, CHUNK, STRIPES);
    let m = mems(Scheme::Hybrid1, 4);
    create(&m, &cfg).unwrap();
    let a = assemble(refs(&m)).unwrap();
    let data = bytes(a.capacity_bytes() as usize, 9);
    a.write(0, &data).unwrap();
    a.close().unwrap();
    let full = m[1].snapshot();
    let cut = Arc::new(MemDisk::from_bytes("m1", full[..full.len() / 2].to_vec()));
    let mut members = refs(&m);
    members[1] = cut as DiskRef;
    let a = assemble(members).unwrap();
    let why = a.health()[1]
        .failed
        .clone()
        .expect("the truncated member is out");
    assert!(why.contains("truncated"), "{why}");
    assert_eq!(a.member_table()[1].state, MemberState::Missing);
    let mut back = vec![0u8; data.len()];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, data);
}

/// One member's superblock copies re-sealed with another stripe count and a newer event count
/// (valid CRCs, so nothing but the other members can say they are wrong): the refusal names
/// that member, not one of the three that agree (an outside tester saw the good member named
/// when the changed copy was the newest).
#[test]
fn a_member_whose_geometry_alone_differs_is_the_one_named() {
    use stripeguard_integrity::{Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS};
    let m = mems(Scheme::HybridSeq, 4);
    create(
        &m,
        &ArrayConfig::new(3, 1, Scheme::HybridSeq, CHUNK, STRIPES),
    )
    .unwrap();
    for at in SUPERBLOCK_COPY_OFFSETS {
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        m[2].read_at(at, &mut b).unwrap();
        let mut sb = Superblock::decode(&b).unwrap();
        sb.stripes -= 1;
        sb.generation += 5;
        m[2].write_at(at, &sb.encode()).unwrap();
    }
    let err = Array::assemble(refs(&m), &AssembleOptions::default())
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("m2: its superblock disagrees with the others about the geometry"),
        "{text}"
    );
}

#[test]
fn a_stripe_refused_again_and_again_is_one_event() {
    // `read --skip-unrecoverable` reads a refused chunk sector by sector: one event for the
    // stripe, not one per attempt (the ring of 320 would lose its history to one bad stripe).
    let m = mems(Scheme::HybridSeq, 4);
    let cfg = ArrayConfig::new(3, 1, Scheme::HybridSeq, CHUNK, STRIPES);
    create(&m, &cfg).unwrap();
    let a = Array::assemble(refs(&m), &AssembleOptions::default()).unwrap();
    a.write(0, &vec![9u8; a.capacity_bytes() as usize]).unwrap();
    a.close().unwrap();
    // Two units of stripe 0 wrong: beyond RAID-5's one.
    let (unit, off) = {
        let a = Array::assemble(refs(&m), &AssembleOptions::default()).unwrap();
        let r = (a.unit_bytes() as usize, a.unit_offset(0) as usize);
        a.close().unwrap();
        r
    };
    for d in &m[..2] {
        d.write_at(off as u64, &vec![0x66u8; unit]).unwrap();
    }
    let a = Array::assemble(refs(&m), &AssembleOptions::default()).unwrap();
    let mut b = vec![0u8; 512];
    // Data chunks 0 and 1 (on members 0 and 1), a sector at a time: 16 refusals.
    for i in 0..16u64 {
        let r = a.read(i * 512, &mut b);
        assert!(
            r.is_err(),
            "read {i}: {:?} {:?} events {:?}",
            r,
            &b[..8],
            a.events()
        );
    }
    let refusals = a
        .events()
        .iter()
        .filter(|e| e.action == stripeguard_engine::EventAction::Unrecoverable)
        .count();
    assert_eq!(refusals, 1, "{:?}", a.events());
    a.close().unwrap();
}
