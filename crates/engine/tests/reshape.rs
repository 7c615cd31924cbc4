//! Reshaping the array (FORMAT.md §2, "Reshaping the array"): every scheme and code that
//! reshapes keeps its data through `k → k + j` and scrubs clean after; silent damage met on
//! the way is repaired, not copied (and `none`, the negative control, copies it); and a power
//! cut at every I/O of a reshape, then `continue_reshape`, loses nothing.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use stripeguard_disk::{crash_images, CrashDisk, DiskRef, MemDisk, PowerCut};
use stripeguard_engine::{
    continue_reshape, scrub, Array, ArrayConfig, AssembleOptions, EventKind, ReshapeTo,
    ScrubOptions,
};
use stripeguard_format::CodeId;
use stripeguard_integrity::Scheme;

const STRIPES: u64 = 64;
const CHUNK: u32 = 8192;

fn config(
    scheme: Scheme,
    code: CodeId,
    m: usize,
    zero_stripes: bool,
    journal: bool,
) -> ArrayConfig {
    ArrayConfig {
        zero_stripes,
        write_journal: journal,
        code,
        ..ArrayConfig::new(3, m, scheme, CHUNK, STRIPES)
    }
}

fn member_count(cfg: &ArrayConfig) -> usize {
    cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members()
}

fn random(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

fn read_all(a: &Array) -> Vec<u8> {
    let mut got = vec![0u8; a.capacity_bytes() as usize];
    a.read(0, &mut got).unwrap();
    got
}

fn writable() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..AssembleOptions::default()
    }
}

/// Units of room past the array on every member: what a level change moves into first.
const ROOM: u64 = 20;

/// Bytes of each member: the array's, and `ROOM` units more.
fn member_size(cfg: &ArrayConfig) -> u64 {
    cfg.member_bytes() + ROOM * cfg.unit_bytes()
}

/// Members of `cfg` plus `j` blank ones of the same size.
fn disks(cfg: &ArrayConfig, j: usize) -> Vec<DiskRef> {
    (0..member_count(cfg) + j)
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), member_size(cfg))) as DiskRef)
        .collect()
}

/// `k` after reshaping a 3-data-chunk array `to` with `j` members.
fn new_k(to: ReshapeTo, j: usize) -> usize {
    match to {
        ReshapeTo::AddData => 3 + j,
        ReshapeTo::Raid6 | ReshapeTo::Raid5 => 3,
    }
}

/// The array's data after a reshape: what was written, then zeros to the new end; the
/// new stripes take writes; a scrub finds nothing; the event is logged.
fn check_after(
    what: &str,
    mems: Vec<DiskRef>,
    old: &[u8],
    new_k: usize,
    event: bool,
    rng: &mut impl Rng,
) {
    let b = Array::assemble(mems.clone(), &writable()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(b.geometry().k, new_k, "{what}");
    assert_eq!(
        b.capacity_bytes(),
        STRIPES * new_k as u64 * u64::from(CHUNK),
        "{what}"
    );
    let got = read_all(&b);
    if got[..old.len()] != old[..] {
        let c = CHUNK as usize;
        let bad: Vec<usize> = (0..old.len() / c)
            .filter(|&x| got[x * c..(x + 1) * c] != old[x * c..(x + 1) * c])
            .collect();
        let zeros: Vec<bool> = bad
            .iter()
            .map(|&x| got[x * c..(x + 1) * c].iter().all(|&b| b == 0))
            .collect();
        panic!(
            "{what}: the data changed: chunks {bad:?} (all zeros: {zeros:?}); events {:?}",
            b.events()
        );
    }
    assert!(
        got[old.len()..].iter().all(|&x| x == 0),
        "{what}: the new room does not read as zeros"
    );
    let s = scrub(&b, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    // A metadata copy a cut tore (one of a record's two, the other newer) is found and
    // rewritten by the scrub's metadata pass, as after any crash; nothing else may be found.
    assert_eq!(
        (
            s.record.found - s.metadata.len() as u64,
            s.record.unrecoverable,
            s.record.mismatches
        ),
        (0, 0, 0),
        "{what}: the scrub after the reshape found something: {:?}",
        b.events()
    );
    let more = random(rng, 3 * CHUNK as usize);
    let at = b.capacity_bytes() - more.len() as u64 - 100;
    b.write(at, &more).unwrap();
    let mut back = vec![0u8; more.len()];
    b.read(at, &mut back).unwrap();
    assert!(back == more, "{what}: a write past the old end");
    b.close().unwrap();
    let logged = stripeguard_engine::read_log_of(&mems).unwrap();
    assert!(
        !event || logged.entries.iter().any(|e| e.kind == EventKind::Reshaped),
        "{what}: no reshaped event in the log"
    );
}

#[test]
fn every_scheme_and_code_reshapes_keeping_its_data() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(39);
    let mut cases = Vec::new();
    for scheme in Scheme::ENGINE {
        for zero_stripes in [true, false] {
            cases.push((scheme, CodeId::for_parity(2), 2, zero_stripes, false, 1));
        }
    }
    cases.extend([
        (Scheme::HybridSeq, CodeId::Xor, 1, true, false, 2),
        (Scheme::Hybrid1, CodeId::Rs, 2, false, true, 1),
        (Scheme::None, CodeId::Raid6, 2, true, true, 3),
        (Scheme::Hybrid2, CodeId::Rdp, 2, true, false, 1),
        (Scheme::Pure, CodeId::Tier, 2, false, false, 1),
    ]);
    let mut cases: Vec<_> = cases
        .into_iter()
        .map(|(s, c, m, z, jn, j)| (s, c, m, z, jn, j, ReshapeTo::AddData))
        .collect();
    for scheme in Scheme::ENGINE {
        for zero_stripes in [true, false] {
            cases.push((
                scheme,
                CodeId::Xor,
                1,
                zero_stripes,
                !zero_stripes,
                1,
                ReshapeTo::Raid6,
            ));
        }
    }
    for (scheme, code, m, zero_stripes, journal, j, to) in cases {
        let what = format!(
            "{scheme:?} {code:?} zero_stripes={zero_stripes} journal={journal} +{j} {to:?}"
        );
        let cfg = config(scheme, code, m, zero_stripes, journal);
        let mems = disks(&cfg, j);
        let n = member_count(&cfg);
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        let old = random(&mut rng, a.capacity_bytes() as usize);
        a.write(0, &old).unwrap();
        let r = a
            .reshape(mems[n..].to_vec(), to, &writable(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            (r.from_data_chunks, r.to_data_chunks),
            (3, new_k(to, j)),
            "{what}"
        );
        assert_eq!(r.repaired, 0, "{what}");
        let want_m = if to == ReshapeTo::Raid6 { 2 } else { m };
        let look = Array::assemble(mems.clone(), &AssembleOptions::default()).unwrap();
        assert_eq!(look.geometry().m, want_m, "{what}");
        drop(look);
        check_after(&what, mems, &old, new_k(to, j), true, &mut rng);
    }
}

/// Byte offset of the chunk of `stripe` on a member (64 KiB... here 8 KiB chunks): from the
/// superblock's data offset and unit size.
fn unit_at(a: &Array, stripe: u64) -> u64 {
    a.unit_offset(stripe)
}

#[test]
fn damage_met_on_the_way_is_repaired_and_none_copies_it() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(390);
    for scheme in [
        Scheme::HybridSeq,
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::ChecksumChunk,
        Scheme::None,
    ] {
        let cfg = config(scheme, CodeId::Raid6, 2, false, false);
        let mems = disks(&cfg, 1);
        let n = member_count(&cfg);
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        let old = random(&mut rng, a.capacity_bytes() as usize);
        a.write(0, &old).unwrap();
        // One flipped byte in member 1's unit of every third stripe (data or parity as the
        // rotation has it), the array closed: bit rot at rest.
        let offsets: Vec<u64> = (0..STRIPES)
            .step_by(3)
            .map(|s| unit_at(&a, s) + 100)
            .collect();
        a.close().unwrap();
        for &at in &offsets {
            let mut b = [0u8; 1];
            mems[1].read_at(at, &mut b).unwrap();
            mems[1].write_at(at, &[b[0] ^ 0x5a]).unwrap();
        }
        let a = Array::assemble(mems[..n].to_vec(), &writable()).unwrap();
        let r = a
            .reshape(
                mems[n..].to_vec(),
                ReshapeTo::AddData,
                &writable(),
                &mut |_, _| {},
            )
            .unwrap();
        let b = Array::assemble(mems.clone(), &AssembleOptions::default()).unwrap();
        let got = read_all(&b);
        let wrong = got[..old.len()]
            .iter()
            .zip(&old)
            .filter(|(x, y)| x != y)
            .count();
        if scheme == Scheme::None {
            assert!(
                wrong > 0,
                "the negative control: `none` should have copied the damage"
            );
            eprintln!("none: {wrong} wrong bytes after the reshape (the negative control)");
        } else {
            assert_eq!(wrong, 0, "{scheme:?}: damage was copied");
            assert!(r.repaired > 0, "{scheme:?}: nothing counted as repaired");
            eprintln!("{scheme:?}: {} units repaired on the way", r.repaired);
        }
    }
}

/// A checksum-chunk array's checksum member is the last: after adding a member the new last
/// member holds every stripe's table (damage put there by hand at FORMAT.md §2.10's offset is
/// found and repaired), and the old checksum member holds data and parity like the others.
#[test]
fn the_checksum_member_moves_to_the_last_added_member() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(398);
    let cfg = config(Scheme::ChecksumChunk, CodeId::Raid6, 2, false, false);
    let mems = disks(&cfg, 1);
    let n = member_count(&cfg);
    let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
    let old = random(&mut rng, a.capacity_bytes() as usize);
    a.write(0, &old).unwrap();
    a.reshape(
        mems[n..].to_vec(),
        ReshapeTo::AddData,
        &writable(),
        &mut |_, _| {},
    )
    .unwrap();
    let b = Array::assemble(mems.clone(), &writable()).unwrap();
    // Stripe 2's table: the first bytes of the new last member's unit 2 (its magic).
    let table = unit_at(&b, 2);
    let mut head = [0u8; 4];
    mems[n].read_at(table, &mut head).unwrap();
    assert_eq!(&head, b"SGCK", "the new last member holds the tables");
    mems[n - 1].read_at(unit_at(&b, 2), &mut head).unwrap();
    assert_ne!(&head, b"SGCK", "the old checksum member holds data now");
    mems[n].write_at(table + 48 + 4 * 3, &[0xa5; 4]).unwrap();
    let got = read_all(&b);
    assert!(got[..old.len()] == old[..]);
    b.scrub_stripe(2).unwrap();
    assert!(b.counters().located >= 1, "the damaged table was not found");
    b.close().unwrap();
    let b = Array::assemble(mems.clone(), &writable()).unwrap();
    let before = b.counters().located;
    b.scrub_stripe(2).unwrap();
    assert_eq!(b.counters().located, before, "the table was not rewritten");
}

#[test]
fn refusals_name_the_constraint() {
    let cfg = config(Scheme::HybridSeq, CodeId::Raid6, 2, true, false);
    let n = member_count(&cfg);
    // A member too small.
    let mems = disks(&cfg, 1);
    let small: DiskRef = Arc::new(MemDisk::new("small", cfg.member_bytes() - 4096));
    let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
    let e = a
        .reshape_preflight(&[small], ReshapeTo::AddData)
        .unwrap_err()
        .to_string();
    assert!(e.contains("small holds"), "{e}");
    // An array too small for the critical section's backup.
    let tiny = ArrayConfig {
        stripes: Some(8),
        ..cfg.clone()
    };
    let t = disks(&tiny, 1);
    let b = Array::create(t[..n].to_vec(), &tiny, true, &mut |_, _| {}).unwrap();
    let e = b
        .reshape_preflight(&t[n..], ReshapeTo::AddData)
        .unwrap_err()
        .to_string();
    assert!(e.contains("critical section"), "{e}");
    // A reshape in progress is refused by every assembly, naming it.
    let r = a.reshape(
        mems[n..].to_vec(),
        ReshapeTo::AddData,
        &writable(),
        &mut |_, _| {},
    );
    assert!(r.is_ok());
    let e = continue_reshape(mems.clone(), &writable(), &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("no reshape is in progress"), "{e}");
}

/// An array on crash disks (plus `j` blank ones), its data written and the array closed; the
/// members as the reshape will see them, and the budget shared by their cuts.
fn crash_rig(
    cfg: &ArrayConfig,
    j: usize,
    old: &[u8],
) -> (Array, Vec<DiskRef>, Vec<Arc<CrashDisk>>, Arc<AtomicI64>) {
    let budget = Arc::new(AtomicI64::new(i64::MAX));
    let crash: Vec<Arc<CrashDisk>> = (0..member_count(cfg) + j)
        .map(|i| Arc::new(CrashDisk::new(format!("c{i}"), member_size(cfg), 512)))
        .collect();
    let mems: Vec<DiskRef> = crash
        .iter()
        .map(|c| Arc::new(PowerCut::new(Arc::clone(c), Arc::clone(&budget))) as DiskRef)
        .collect();
    let n = member_count(cfg);
    let a = Array::create(mems[..n].to_vec(), cfg, true, &mut |_, _| {}).unwrap();
    a.write(0, old).unwrap();
    a.flush().unwrap();
    (a, mems, crash, budget)
}

#[test]
fn a_power_cut_at_any_io_of_a_reshape_loses_nothing() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(391);
    let mut cases = 0;
    let mut resumed = 0;
    // `filled`: stripes of data written (the rest stay zero stripes where the array keeps
    // them, which the reshape carries as zero stripes instead of writing).
    let add = ReshapeTo::AddData;
    for (scheme, code, m, zero_stripes, j, every, filled, to) in [
        (
            Scheme::HybridSeq,
            CodeId::Raid6,
            2,
            true,
            1,
            1,
            STRIPES,
            add,
        ),
        (Scheme::Pure, CodeId::Xor, 1, false, 2, 1, STRIPES, add),
        (Scheme::HybridSeq, CodeId::Raid6, 2, true, 2, 1, 21, add),
        (Scheme::None, CodeId::Raid6, 2, false, 1, 3, STRIPES, add),
        (Scheme::Hybrid1, CodeId::Raid6, 2, true, 1, 3, 40, add),
        (Scheme::Hybrid2, CodeId::Raid6, 2, false, 1, 3, STRIPES, add),
        (Scheme::ChecksumChunk, CodeId::Raid6, 2, true, 1, 2, 40, add),
        (
            Scheme::ChecksumChunk,
            CodeId::Xor,
            1,
            false,
            1,
            3,
            STRIPES,
            ReshapeTo::Raid6,
        ),
        (
            Scheme::HybridSeq,
            CodeId::Xor,
            1,
            false,
            1,
            1,
            STRIPES,
            ReshapeTo::Raid6,
        ),
        (
            Scheme::Pure,
            CodeId::Xor,
            1,
            true,
            1,
            2,
            30,
            ReshapeTo::Raid6,
        ),
        (
            Scheme::None,
            CodeId::Xor,
            1,
            true,
            1,
            3,
            STRIPES,
            ReshapeTo::Raid6,
        ),
    ] {
        let what =
            format!("{scheme:?} {code:?} zero_stripes={zero_stripes} +{j} filled {filled} {to:?}");
        let cfg = config(scheme, code, m, zero_stripes, false);
        let n = member_count(&cfg);
        let old = random(&mut rng, (filled * 3 * u64::from(CHUNK)) as usize);
        // How many I/Os a whole reshape takes.
        let (a, mems, _, budget) = crash_rig(&cfg, j, &old);
        let before = budget.load(Ordering::SeqCst);
        a.reshape(mems[n..].to_vec(), to, &writable(), &mut |_, _| {})
            .unwrap();
        let ios = before - budget.load(Ordering::SeqCst);
        for cut in (0..ios).step_by(every) {
            let mut committed = false;
            let (a, mems, crash, budget) = crash_rig(&cfg, j, &old);
            budget.store(cut, Ordering::SeqCst);
            let r = a.reshape(mems[n..].to_vec(), to, &writable(), &mut |_, _| {});
            assert!(r.is_err(), "{what}: cut at {cut} of {ios} did not stop it");
            drop(mems);
            let images = crash_images(&crash, &mut rng);
            match continue_reshape(images.clone(), &writable(), &mut |_, _| {}) {
                Ok(_) => resumed += 1,
                Err(e) if e.to_string().contains("no reshape is in progress") => {
                    match Array::assemble(images[..n].to_vec(), &writable()) {
                        // Cut before any superblock said so: the array is as it was.
                        Ok(b) => {
                            let got = read_all(&b);
                            assert!(got[..old.len()] == old[..], "{what}, cut at {cut}");
                            b.reshape(images[n..].to_vec(), to, &writable(), &mut |_, _| {})
                                .unwrap_or_else(|e| {
                                    panic!("{what}, cut at {cut} of {ios}: again: {e}")
                                });
                        }
                        // Cut after the commit (the event may not have been saved).
                        Err(_) => committed = true,
                    }
                }
                Err(e) => panic!("{what}, cut at {cut} of {ios}: continue: {e}"),
            }
            check_after(
                &format!("{what}, cut at {cut} of {ios}"),
                images,
                &old,
                new_k(to, j),
                !committed,
                &mut rng,
            );
            cases += 1;
        }
    }
    eprintln!("{cases} power cuts inside reshapes; {resumed} continued from the checkpoint");
    assert!(resumed > 0);
}

#[test]
fn reshapes_one_after_another_each_move_the_data() {
    // The second reshape must not take the first one's finished progress for its own (an
    // outside attack found exactly that: the data was left where the first one put it).
    let mut rng = rand::rngs::StdRng::seed_from_u64(392);
    for scheme in [Scheme::HybridSeq, Scheme::None] {
        let cfg = config(scheme, CodeId::Xor, 1, true, false);
        let mems = disks(&cfg, 4);
        let n = member_count(&cfg);
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        let old = random(&mut rng, a.capacity_bytes() as usize / 2);
        a.write(0, &old).unwrap();
        let steps = [
            (ReshapeTo::AddData, n + 1, 4, 1),
            (ReshapeTo::Raid6, n + 2, 4, 2),
            (ReshapeTo::AddData, n + 4, 6, 2),
        ];
        let mut a = Some(a);
        for (to, members, k, m) in steps {
            let what = format!("{scheme:?} to {members} members {to:?}");
            let cur = a.take().unwrap();
            let had = cur.geometry().n();
            cur.reshape(mems[had..members].to_vec(), to, &writable(), &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let b = Array::assemble(mems[..members].to_vec(), &writable()).unwrap();
            assert_eq!((b.geometry().k, b.geometry().m), (k, m), "{what}");
            let got = read_all(&b);
            assert!(got[..old.len()] == old[..], "{what}: the data changed");
            assert!(got[old.len()..].iter().all(|&x| x == 0), "{what}");
            a = Some(b);
        }
        a.unwrap().close().unwrap();
    }
}

#[test]
fn a_continue_refuses_progress_it_cannot_trust() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(393);
    let cfg = config(Scheme::None, CodeId::Raid6, 2, false, false);
    let n = member_count(&cfg);
    let old = random(&mut rng, (STRIPES * 3 * u64::from(CHUNK)) as usize);
    for damage in [
        "zeros",
        "garbage",
        "one member",
        "newest zeroed",
        "two members zeroed",
    ] {
        let (a, mems, crash, budget) = crash_rig(&cfg, 1, &old);
        budget.store(400, Ordering::SeqCst);
        assert!(a
            .reshape(
                mems[n..].to_vec(),
                ReshapeTo::AddData,
                &writable(),
                &mut |_, _| {}
            )
            .is_err());
        drop(mems);
        let images: Vec<DiskRef> = crash
            .iter()
            .enumerate()
            .map(|(i, c)| Arc::new(MemDisk::from_bytes(format!("m{i}"), c.live_image())) as DiskRef)
            .collect();
        // The checkpoint's two 2048-byte slots at 12288 (FORMAT.md §2.3; the sequence a u64 at
        // byte 16 of each).
        let hit: &[DiskRef] = match damage {
            "one member" => &images[..1],
            "two members zeroed" => &images[..2],
            _ => &images,
        };
        for d in hit {
            if damage == "newest zeroed" {
                let mut b = [0u8; 4096];
                d.read_at(12288, &mut b).unwrap();
                let seq = |at: usize| u64::from_le_bytes(b[at + 16..at + 24].try_into().unwrap());
                let newest: u64 = if seq(0) > seq(2048) { 0 } else { 2048 };
                d.write_at(12288 + newest, &[0; 2048]).unwrap();
                continue;
            }
            let fill = if damage.contains("zero") { 0 } else { 0x5a };
            d.write_at(12288, &[fill; 4096]).unwrap();
        }
        let r = continue_reshape(images.clone(), &writable(), &mut |_, _| {});
        if damage == "one member" {
            // A torn copy on one member is what a power cut leaves: the others hold it.
            r.unwrap_or_else(|e| panic!("{damage}: {e}"));
            check_after(damage, images, &old, 4, true, &mut rng);
        } else {
            let e = r.expect_err(damage).to_string();
            assert!(e.contains("cannot be trusted"), "{damage}: {e}");
        }
    }
}

#[test]
fn a_stripe_that_cannot_be_read_refuses_the_reshape_before_anything_moves() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(394);
    let cfg = config(Scheme::HybridSeq, CodeId::Xor, 1, false, false);
    let mems = disks(&cfg, 1);
    let n = member_count(&cfg);
    let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
    let old = random(&mut rng, a.capacity_bytes() as usize);
    a.write(0, &old).unwrap();
    let at = a.unit_offset(40) + 100;
    a.close().unwrap();
    // Two units of stripe 40 damaged: more than one parity rebuilds.
    for d in &mems[..2] {
        d.write_at(at, &[0xee; 64]).unwrap();
    }
    let a = Array::assemble(mems[..n].to_vec(), &writable()).unwrap();
    let e = a
        .reshape(
            mems[n..].to_vec(),
            ReshapeTo::AddData,
            &writable(),
            &mut |_, _| {},
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("stripe 40 cannot be read"), "{e}");
    // Nothing moved: the array assembles as it was, every other stripe readable.
    let b = Array::assemble(mems[..n].to_vec(), &writable()).unwrap();
    assert_eq!(b.geometry().k, 3);
    let sd = b.geometry().stripe_data_bytes() as usize;
    let mut got = vec![0u8; 40 * sd];
    b.read(0, &mut got).unwrap();
    assert!(got == old[..40 * sd]);
    b.close().unwrap();
}

#[test]
fn raid6_becomes_raid5_and_its_last_member_leaves() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(395);
    for scheme in Scheme::ENGINE {
        for zero_stripes in [true, false] {
            let what = format!("{scheme:?} zero_stripes={zero_stripes} --level 5");
            let cfg = config(scheme, CodeId::Raid6, 2, zero_stripes, false);
            let mems = disks(&cfg, 0);
            let n = member_count(&cfg);
            let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
            let old = random(&mut rng, a.capacity_bytes() as usize * 2 / 3);
            a.write(0, &old).unwrap();
            let r = a
                .reshape(Vec::new(), ReshapeTo::Raid5, &writable(), &mut |_, _| {})
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((r.from_members, r.to_members), (n, n - 1), "{what}");
            // The member that left holds no superblock of the array any more.
            assert!(
                stripeguard_engine::read_superblock_of(mems[n - 1].as_ref()).is_err(),
                "{what}: the leaving member still has a superblock"
            );
            let look =
                Array::assemble(mems[..n - 1].to_vec(), &AssembleOptions::default()).unwrap();
            assert_eq!((look.geometry().k, look.geometry().m), (3, 1), "{what}");
            drop(look);
            check_after(&what, mems[..n - 1].to_vec(), &old, 3, true, &mut rng);
        }
    }
    // Refused: RAID-5 has no second parity to give up; --level 5 takes no NEW.
    let cfg = config(Scheme::HybridSeq, CodeId::Xor, 1, true, false);
    let mems = disks(&cfg, 1);
    let n = member_count(&cfg);
    let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
    let e = a
        .reshape_preflight(&[], ReshapeTo::Raid5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--level 5 turns RAID-6"), "{e}");
    let e = a
        .reshape_preflight(&mems[n..], ReshapeTo::Raid5)
        .unwrap_err()
        .to_string();
    assert!(e.contains("adds no member"), "{e}");
}

#[test]
fn a_power_cut_at_any_io_of_a_level_change_down_loses_nothing() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(396);
    let (mut cases, mut resumed) = (0, 0);
    for (scheme, zero_stripes, every) in [
        (Scheme::HybridSeq, true, 1),
        (Scheme::Pure, false, 2),
        (Scheme::None, false, 3),
        (Scheme::ChecksumChunk, true, 3),
    ] {
        let what = format!("{scheme:?} zero_stripes={zero_stripes} --level 5");
        let cfg = config(scheme, CodeId::Raid6, 2, zero_stripes, false);
        let n = member_count(&cfg);
        let old = random(&mut rng, (40 * 3 * u64::from(CHUNK)) as usize);
        let (a, mems, _, budget) = crash_rig(&cfg, 0, &old);
        let before = budget.load(Ordering::SeqCst);
        a.reshape(Vec::new(), ReshapeTo::Raid5, &writable(), &mut |_, _| {})
            .unwrap();
        let ios = before - budget.load(Ordering::SeqCst);
        drop(mems);
        for cut in (0..ios).step_by(every) {
            cases += 1;
            let (a, mems, crash, budget) = crash_rig(&cfg, 0, &old);
            budget.store(cut, Ordering::SeqCst);
            let _ = a.reshape(Vec::new(), ReshapeTo::Raid5, &writable(), &mut |_, _| {});
            drop(mems);
            let images = crash_images(&crash, &mut rng);
            let b = match continue_reshape(images.clone(), &writable(), &mut |_, _| {}) {
                Ok(_) => {
                    resumed += 1;
                    Array::assemble(images[..n - 1].to_vec(), &writable())
                }
                Err(e) if e.to_string().contains("no reshape is in progress") => {
                    // Before the start (the array as it was), or after the commit.
                    Array::assemble(images.clone(), &writable())
                        .or_else(|_| Array::assemble(images[..n - 1].to_vec(), &writable()))
                }
                Err(e) => panic!("{what}: cut at {cut} of {ios}: {e}"),
            }
            .unwrap_or_else(|e| panic!("{what}: cut at {cut} of {ios}: {e}"));
            let mut got = vec![0u8; old.len()];
            b.read(0, &mut got)
                .unwrap_or_else(|e| panic!("{what}: cut at {cut} of {ios}: {e}"));
            assert!(
                got == old,
                "{what}: cut at {cut} of {ios}: the data changed"
            );
            b.close().unwrap();
        }
    }
    eprintln!("{cases} power cuts of a level change down, {resumed} continued");
    assert!(resumed > cases / 2);
}

#[test]
fn blocks_listed_untrusted_move_listed() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(397);
    for to in [ReshapeTo::AddData, ReshapeTo::Raid6] {
        let what = format!("{to:?}");
        let cfg = config(Scheme::Hybrid1, CodeId::Xor, 1, false, false);
        let mems = disks(&cfg, 1);
        let n = member_count(&cfg);
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        let old = random(&mut rng, a.capacity_bytes() as usize);
        a.write(0, &old).unwrap();
        let at = unit_at(&a, 5);
        // Not closed (its intent bits stay set: the next assembly resyncs), and two units of
        // stripe 5 flipped at rest: beyond RAID-5, so the resync lists what it cannot verify.
        drop(a);
        for m in [0, 1] {
            let mut b = [0u8; 1];
            mems[m].read_at(at + 100, &mut b).unwrap();
            mems[m].write_at(at + 100, &[b[0] ^ 0x33]).unwrap();
        }
        let a = Array::assemble(mems[..n].to_vec(), &writable()).unwrap();
        let listed = a.untrusted();
        assert!(!listed.is_empty(), "{what}: the resync listed nothing");
        let r = a
            .reshape(mems[n..].to_vec(), to, &writable(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let b = Array::assemble(mems.clone(), &writable()).unwrap();
        let k = r.to_data_chunks as u64;
        let c = u64::from(CHUNK);
        // Every listed block is listed at its new place and refused; every other byte exact.
        let moved = b.untrusted();
        assert_eq!(
            moved.len(),
            listed.len(),
            "{what}: {moved:?} from {listed:?}"
        );
        for e in &listed {
            let x = e.stripe * 3 + u64::from(e.position);
            assert!(
                moved.iter().any(|m| m.stripe == x / k
                    && u64::from(m.position) == x % k
                    && m.offset == e.offset
                    && m.len == e.len),
                "{what}: {e:?} not listed at its new place: {moved:?}"
            );
            let mut buf = vec![0u8; e.len as usize];
            assert!(
                b.read(x * c + u64::from(e.offset), &mut buf).is_err(),
                "{what}: a listed block was returned"
            );
        }
        let skip = |byte: u64| {
            listed.iter().any(|e| {
                let lo = (e.stripe * 3 + u64::from(e.position)) * c + u64::from(e.offset);
                lo <= byte && byte < lo + u64::from(e.len)
            })
        };
        let mut chunk = vec![0u8; CHUNK as usize];
        for x in 0..old.len() as u64 / c {
            if (x * c..(x + 1) * c).any(skip) {
                continue;
            }
            b.read(x * c, &mut chunk).unwrap();
            assert!(
                chunk[..] == old[(x * c) as usize..((x + 1) * c) as usize],
                "{what}: chunk {x} changed"
            );
        }
        b.close().unwrap();
    }
}
