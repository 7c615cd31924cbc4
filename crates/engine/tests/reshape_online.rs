//! An online reshape (online.rs): the array a holder serves is reshaped while clients read
//! and write it. Every byte a client wrote reads back, through the reshape and after it, on
//! every scheme that reshapes; requests run concurrently with the steps; and a power cut at
//! any I/O of a reshape with client writes between its steps loses nothing a flush made
//! durable once `continue_reshape` has finished it.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use stripeguard_disk::{crash_images, CrashDisk, DiskRef, MemDisk, PowerCut};
use stripeguard_engine::{
    continue_reshape, reshape_online, scrub, Array, ArrayConfig, AssembleOptions, HeldArray,
    ReshapeTo, ScrubOptions,
};
use stripeguard_format::CodeId;
use stripeguard_integrity::Scheme;

const STRIPES: u64 = 64;
const CHUNK: u32 = 8192;
/// Units of room past the array on every member (a level change moves into it first).
const ROOM: u64 = 20;

fn config(scheme: Scheme, m: usize, zero_stripes: bool) -> ArrayConfig {
    ArrayConfig {
        zero_stripes,
        code: CodeId::for_parity(m),
        ..ArrayConfig::new(3, m, scheme, CHUNK, STRIPES)
    }
}

fn member_count(cfg: &ArrayConfig) -> usize {
    cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members()
}

fn member_size(cfg: &ArrayConfig) -> u64 {
    cfg.member_bytes() + ROOM * cfg.unit_bytes()
}

/// `count` blank members of `cfg`'s size behind one power switch: the budget of I/Os before
/// the cut (unlimited until set), their durable layers, and the members as the array sees them.
fn cut_members(
    cfg: &ArrayConfig,
    count: usize,
) -> (Arc<AtomicI64>, Vec<Arc<CrashDisk>>, Vec<DiskRef>) {
    let budget = Arc::new(AtomicI64::new(i64::MAX));
    let crash: Vec<Arc<CrashDisk>> = (0..count)
        .map(|i| Arc::new(CrashDisk::new(format!("c{i}"), member_size(cfg), 512)))
        .collect();
    let mems = crash
        .iter()
        .map(|c| Arc::new(PowerCut::new(Arc::clone(c), Arc::clone(&budget))) as DiskRef)
        .collect();
    (budget, crash, mems)
}

fn writable() -> AssembleOptions {
    AssembleOptions {
        writable: true,
        ..AssembleOptions::default()
    }
}

fn random(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

/// One client request between steps: a write (any length, across the boundary or not), a
/// zeroing, a read checked against the model, or a flush. Returns whether it was a flush
/// that succeeded, and records the bytes written since the last one in `pending`.
fn client_op(
    held: &HeldArray,
    model: &mut [u8],
    pending: &mut Vec<(usize, usize)>,
    rng: &mut impl Rng,
) -> Result<bool, String> {
    let cap = model.len();
    let len = rng.random_range(1..4 * CHUNK as usize);
    let at = rng.random_range(0..cap - len);
    match rng.random_range(0..10) {
        0..=3 => {
            let data = random(rng, len);
            // Pending before it runs: a write that fails may still have landed in part.
            pending.push((at, at + len));
            held.write(at as u64, &data).map_err(|e| e.to_string())?;
            model[at..at + len].copy_from_slice(&data);
        }
        4 => {
            pending.push((at, at + len));
            held.zero(at as u64, len as u64)
                .map_err(|e| e.to_string())?;
            model[at..at + len].fill(0);
        }
        5..=8 => {
            let mut got = vec![0u8; len];
            held.read(at as u64, &mut got).map_err(|e| e.to_string())?;
            if got[..] != model[at..at + len] {
                return Err(format!("WRONG BYTES read at {at} + {len}"));
            }
        }
        _ => {
            held.flush().map_err(|e| e.to_string())?;
            pending.clear();
            return Ok(true);
        }
    }
    Ok(false)
}

fn check_array(what: &str, a: &Array, model: &[u8]) {
    let mut got = vec![0u8; a.capacity_bytes() as usize];
    a.read(0, &mut got).unwrap();
    assert!(got[..model.len()] == model[..], "{what}: the data changed");
    assert!(
        got[model.len()..].iter().all(|&b| b == 0),
        "{what}: the new room does not read as zeros"
    );
    let s = scrub(a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(
        (
            s.record.found - s.metadata.len() as u64,
            s.record.unrecoverable,
            s.record.mismatches
        ),
        (0, 0, 0),
        "{what}: the scrub after the reshape found something: {:?}",
        a.events()
    );
}

#[test]
fn clients_read_and_write_through_an_online_reshape() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3901);
    let mut cases = Vec::new();
    for scheme in [
        Scheme::HybridSeq,
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::None,
        Scheme::ChecksumChunk,
    ] {
        for zero_stripes in [true, false] {
            cases.push((scheme, 2, zero_stripes, 1, ReshapeTo::AddData));
            cases.push((scheme, 1, zero_stripes, 1, ReshapeTo::Raid6));
            cases.push((scheme, 2, zero_stripes, 0, ReshapeTo::Raid5));
        }
        cases.push((scheme, 1, true, 2, ReshapeTo::AddData));
    }
    for (scheme, m, zero_stripes, j, to) in cases {
        let what = format!("{scheme:?} m={m} zero_stripes={zero_stripes} +{j} {to:?}");
        let cfg = config(scheme, m, zero_stripes);
        let n = member_count(&cfg);
        let mems: Vec<DiskRef> = (0..n + j)
            .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), member_size(&cfg))) as DiskRef)
            .collect();
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        // Two thirds written, the rest zero stripes where the array keeps them.
        let cap = a.capacity_bytes() as usize;
        let mut model = vec![0u8; cap];
        let filled = cap / 3 * 2;
        model[..filled].copy_from_slice(&random(&mut rng, filled));
        a.write(0, &model[..filled]).unwrap();
        let held = HeldArray::new(a);
        let mut pending = Vec::new();
        let mut ops = 0;
        let mut errors = Vec::new();
        let r = reshape_online(
            &held,
            mems[n..].to_vec(),
            to,
            &writable(),
            &|_| {},
            &mut |_, _| {
                for _ in 0..4 {
                    ops += 1;
                    if let Err(e) = client_op(&held, &mut model, &mut pending, &mut rng) {
                        errors.push(e);
                    }
                }
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(errors.is_empty(), "{what}: {errors:?}");
        assert!(ops >= 16, "{what}: only {ops} client requests ran");
        let want_k = if to == ReshapeTo::AddData { 3 + j } else { 3 };
        let want_m = match to {
            ReshapeTo::Raid5 => 1,
            ReshapeTo::Raid6 => 2,
            ReshapeTo::AddData => m,
        };
        assert_eq!(r.to_data_chunks, want_k, "{what}");
        // The holder serves the new geometry now: its old bytes and its new room.
        let now = held.array();
        assert_eq!(
            (now.geometry().k, now.geometry().m),
            (want_k, want_m),
            "{what}"
        );
        assert!(!held.reshaping(), "{what}");
        for _ in 0..20 {
            client_op(&held, &mut model, &mut pending, &mut rng)
                .unwrap_or_else(|e| panic!("{what}: after: {e}"));
        }
        check_array(&what, &now, &model);
        drop(now);
        held.close().unwrap();
        // A level change down leaves the last member out.
        let stay = if to == ReshapeTo::Raid5 { n - 1 } else { n + j };
        let b = Array::assemble(mems[..stay].to_vec(), &writable()).unwrap();
        check_array(&format!("{what}, assembled again"), &b, &model);
        b.close().unwrap();
    }
}

#[test]
fn requests_run_while_the_steps_move_the_data() {
    // Four client threads, each on its own quarter of the array (so the model is exact),
    // writing and reading back while the reshape moves the data under them.
    for (scheme, m, to) in [
        (Scheme::HybridSeq, 2, ReshapeTo::AddData),
        (Scheme::Pure, 1, ReshapeTo::Raid6),
        (Scheme::None, 2, ReshapeTo::AddData),
        (Scheme::ChecksumChunk, 1, ReshapeTo::Raid6),
        (Scheme::ChecksumChunk, 2, ReshapeTo::AddData),
    ] {
        let what = format!("{scheme:?} m={m} {to:?}");
        let cfg = config(scheme, m, true);
        let n = member_count(&cfg);
        let mems: Vec<DiskRef> = (0..=n)
            .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), member_size(&cfg))) as DiskRef)
            .collect();
        let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
        let cap = a.capacity_bytes() as usize;
        let held = HeldArray::new(a);
        let stop = AtomicBool::new(false);
        let quarter = cap / 4;
        let models: Vec<Vec<u8>> = std::thread::scope(|s| {
            let clients: Vec<_> = (0..4)
                .map(|q| {
                    let (held, stop) = (&held, &stop);
                    s.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(q as u64);
                        let mut model = vec![0u8; quarter];
                        let mut ops = 0;
                        while !stop.load(Ordering::Relaxed) || ops < 50 {
                            ops += 1;
                            let len = rng.random_range(1..3 * CHUNK as usize);
                            let at = rng.random_range(0..quarter - len);
                            let base = q * quarter;
                            if rng.random_bool(0.5) {
                                let data = random(&mut rng, len);
                                held.write((base + at) as u64, &data).unwrap();
                                model[at..at + len].copy_from_slice(&data);
                            } else {
                                let mut got = vec![0u8; len];
                                held.read((base + at) as u64, &mut got).unwrap();
                                assert!(got[..] == model[at..at + len], "WRONG BYTES at {at}");
                            }
                            if ops % 16 == 0 {
                                held.flush().unwrap();
                            }
                        }
                        model
                    })
                })
                .collect();
            reshape_online(
                &held,
                mems[n..].to_vec(),
                to,
                &writable(),
                &|_| {},
                &mut |_, _| {},
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            stop.store(true, Ordering::Relaxed);
            clients.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let mut model = models.concat();
        model.resize(cap, 0);
        check_array(&what, &held.array(), &model);
        held.close().unwrap();
    }
}

#[test]
fn a_power_cut_during_an_online_reshape_loses_nothing_flushed() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3902);
    let mut cases = 0;
    let mut continued = 0;
    for (scheme, m, zero_stripes, to, every) in [
        (Scheme::HybridSeq, 2, true, ReshapeTo::AddData, 3),
        (Scheme::Pure, 1, false, ReshapeTo::Raid6, 3),
        (Scheme::None, 2, false, ReshapeTo::AddData, 5),
        (Scheme::Hybrid1, 1, true, ReshapeTo::Raid6, 5),
        (Scheme::HybridSeq, 2, false, ReshapeTo::Raid5, 4),
        (Scheme::ChecksumChunk, 2, true, ReshapeTo::AddData, 4),
        (Scheme::ChecksumChunk, 2, false, ReshapeTo::Raid5, 5),
    ] {
        // Members added (none for a level change down, whose last member leaves), and the
        // members of the array after.
        let j = usize::from(to != ReshapeTo::Raid5);
        let what = format!("{scheme:?} m={m} zero_stripes={zero_stripes} {to:?}");
        let cfg = config(scheme, m, zero_stripes);
        let n = member_count(&cfg);
        // Client requests between steps, the same for every cut (the same seed).
        let run = |cut: i64, rng: &mut rand::rngs::StdRng| {
            let (budget, crash, mems) = cut_members(&cfg, n + j);
            let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
            let cap = a.capacity_bytes() as usize;
            let mut ops_rng = rand::rngs::StdRng::seed_from_u64(77);
            let mut model = random(&mut ops_rng, cap / 2);
            model.resize(cap, 0);
            a.write(0, &model[..cap / 2]).unwrap();
            a.flush().unwrap();
            let held = HeldArray::new(a);
            let before = budget.load(Ordering::SeqCst);
            budget.store(cut.min(before), Ordering::SeqCst);
            // What the last successful flush made durable, and what was written since.
            let mut durable = model.clone();
            let mut pending: Vec<(usize, usize)> = Vec::new();
            let mut dead = false;
            let r = reshape_online(
                &held,
                mems[n..].to_vec(),
                to,
                &writable(),
                &|_| {},
                &mut |_, _| {
                    for _ in 0..3 {
                        if dead {
                            return;
                        }
                        match client_op(&held, &mut model, &mut pending, &mut ops_rng) {
                            Ok(true) => durable.clone_from(&model),
                            Ok(false) => {}
                            Err(e) if e.contains("WRONG") => panic!("{e}"),
                            Err(_) => dead = true,
                        }
                    }
                },
            );
            let used = before - budget.load(Ordering::SeqCst);
            drop(held);
            drop(mems);
            let images = crash_images(&crash, rng);
            (r.is_ok(), used, images, durable, pending)
        };
        let (ok, ios, ..) = run(i64::MAX, &mut rng);
        assert!(ok, "{what}: the uncut run failed");
        for cut in (0..ios).step_by(every) {
            cases += 1;
            let (ok, _, images, durable, pending) = run(cut, &mut rng);
            // (A cut among the last I/Os, the new array's first event, may pass unnoticed.)
            let _ = ok;
            let b = match continue_reshape(images.clone(), &writable(), &mut |_, _| {}) {
                Ok(_) => {
                    continued += 1;
                    let stay = if j == 0 { n - 1 } else { n + j };
                    Array::assemble(images[..stay].to_vec(), &writable())
                }
                // Cut before the superblocks named the reshape (the array as it was), or after
                // the commit (the new array).
                Err(e) if e.to_string().contains("no reshape is in progress") => {
                    Array::assemble(images.clone(), &writable())
                        .or_else(|_| Array::assemble(images[..n].to_vec(), &writable()))
                        .or_else(|_| Array::assemble(images[..n - 1].to_vec(), &writable()))
                }
                Err(e) => panic!("{what}: cut at {cut}: continue: {e}"),
            }
            .unwrap_or_else(|e| panic!("{what}: cut at {cut}: {e}"));
            // Chunk by chunk: one a write since the last flush tore may be unreadable (listed
            // untrusted by the resync that could not verify it), never wrong.
            let written_since =
                |lo: usize, hi: usize| pending.iter().any(|&(a, b)| a < hi && lo < b);
            let c = CHUNK as usize;
            let mut got = vec![0u8; c];
            for x in (0..durable.len()).step_by(c) {
                let hi = (x + c).min(durable.len());
                match b.read(x as u64, &mut got[..hi - x]) {
                    Err(_) if written_since(x, hi) => continue,
                    Err(e) => panic!("{what}: cut at {cut} of {ios}: read at {x}: {e}"),
                    Ok(()) => {}
                }
                if let Some(y) =
                    (x..hi).find(|&y| got[y - x] != durable[y] && !written_since(y, y + 1))
                {
                    panic!(
                        "{what}: cut at {cut} of {ios}: byte {y} lost what a flush made durable"
                    );
                }
            }
            b.close().unwrap();
        }
    }
    eprintln!("{cases} power cuts, {continued} continued from the checkpoint");
    assert!(continued > cases / 2, "most cuts fall inside the reshape");
}

#[test]
fn a_listed_block_written_and_flushed_during_an_online_reshape_survives_a_crash() {
    // A RAID-5 whose resync listed blocks (two units of stripe 5 flipped while it was left
    // unclean), reshaped online; once the listed chunk is in the new geometry a client writes
    // it whole and flushes, and the power goes. After the continue it reads what was written.
    let cfg = config(Scheme::Hybrid1, 1, false);
    let n = member_count(&cfg);
    let (budget, crash, mems) = cut_members(&cfg, n + 1);
    let a = Array::create(mems[..n].to_vec(), &cfg, true, &mut |_, _| {}).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3903);
    let old = random(&mut rng, a.capacity_bytes() as usize);
    a.write(0, &old).unwrap();
    a.flush().unwrap();
    let at = a.unit_offset(5) + 100;
    drop(a);
    for m in [0, 1] {
        let mut b = [0u8; 1];
        mems[m].read_at(at, &mut b).unwrap();
        mems[m].write_at(at, &[b[0] ^ 0x33]).unwrap();
        mems[m].flush().unwrap();
    }
    let a = Array::assemble(mems[..n].to_vec(), &writable()).unwrap();
    let listed = a.untrusted();
    assert!(!listed.is_empty(), "the resync listed nothing");
    let c = u64::from(CHUNK);
    let spans: Vec<(u64, Vec<u8>)> = listed
        .iter()
        .map(|e| {
            let x = e.stripe * 3 + u64::from(e.position);
            (
                x * c + u64::from(e.offset),
                random(&mut rng, e.len as usize),
            )
        })
        .collect();
    let last = listed
        .iter()
        .map(|e| e.stripe * 3 + u64::from(e.position))
        .max()
        .unwrap();
    let held = HeldArray::new(a);
    let mut wrote = false;
    let r = reshape_online(
        &held,
        mems[n..].to_vec(),
        ReshapeTo::AddData,
        &writable(),
        &|_| {},
        &mut |done, _| {
            // `done` new stripes of 4 chunks are committed: the listed chunks are among them.
            if !wrote && held.reshaping() && done * 4 > last + 8 {
                for (at, data) in &spans {
                    held.write(*at, data).unwrap();
                }
                held.flush().unwrap();
                wrote = true;
                budget.store(0, Ordering::SeqCst);
            }
        },
    );
    assert!(wrote && r.is_err(), "the cut came after the write");
    drop(held);
    drop(mems);
    let images = crash_images(&crash, &mut rng);
    continue_reshape(images.clone(), &writable(), &mut |_, _| {}).unwrap();
    let b = Array::assemble(images, &writable()).unwrap();
    for (at, data) in &spans {
        let mut got = vec![0u8; data.len()];
        b.read(*at, &mut got)
            .unwrap_or_else(|e| panic!("the flushed write at {at} is refused: {e}"));
        assert!(got == *data, "the flushed write at {at} changed");
    }
    b.close().unwrap();
}
