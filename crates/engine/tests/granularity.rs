//! Faults aimed at the block granularity of appendix layout 2 (FORMAT.md §2.9): a 4 KiB write
//! sends the block and the appendix as separate I/Os, so each can be lost, torn or misdirected
//! on its own. Each case writes 4 KiB into a full 6+2 array of 64 KiB chunks, then damages the
//! member bytes by hand at the offsets FORMAT.md gives (no injector), reassembles and reads.
//! Every detecting scheme returns the new bytes and records a detection; `none` (the negative
//! control) returns wrong bytes under the same damage.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use stripeguard_disk::{Disk, DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::{CodeId, Scheme};

const K: usize = 6;
const M: usize = 2;
const CHUNK: u32 = 65536;
const STRIPES: u64 = 8;

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The block landed, the appendix write was lost.
    AppendixLost,
    /// The appendix landed, the block write was lost.
    BlockLost,
    /// Only the first sector of the block landed (torn inside the block), appendix landed.
    TornInsideBlock,
    /// The block landed on the same member one stripe further on; the appendix landed.
    Misdirected4k,
}

struct Case {
    mems: Vec<Arc<MemDisk>>,
    model: Vec<u8>,
}

fn members(mems: &[Arc<MemDisk>]) -> Vec<DiskRef> {
    mems.iter().map(|m| m.clone() as DiskRef).collect()
}

/// Damage one 4 KiB write of `scheme`'s array; returns the reassembled array, the model
/// (what the user wrote) and the byte offset of the write.
fn run(scheme: Scheme, damage: Damage, code: CodeId) -> (Array, Case, u64) {
    // RDP and Tier-code cut a chunk into p - 1 = 6 rows: 48 KiB (12 checksum blocks).
    let chunk_bytes: u32 = if code == CodeId::Raid6 { CHUNK } else { 49152 };
    let mut cfg = ArrayConfig::new(K, M, scheme, chunk_bytes, STRIPES);
    cfg.code = code;
    let mems: Vec<Arc<MemDisk>> = (0..K + M)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
        .collect();
    let array = Array::create(members(&mems), &cfg, true, &mut |_, _| {}).unwrap();
    let cap = array.capacity_bytes() as usize;
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut model = vec![0u8; cap];
    rng.fill(&mut model[..]);
    array.write(0, &model).unwrap();
    array.flush().unwrap();
    // Stripe 2, data chunk 3, block 5.
    let (stripe, chunk, block) = (2u64, 3usize, 5u64);
    let off =
        stripe * K as u64 * chunk_bytes as u64 + chunk as u64 * chunk_bytes as u64 + block * 4096;
    let member = array.geometry().member_of(stripe, chunk);
    let map = array.unit_map();
    let unit_at = map.offset_of(stripe);
    let block_at = unit_at + block * 4096;
    let appendix_at = unit_at + chunk_bytes as u64;
    let appendix_len = (map.unit_bytes - chunk_bytes as u64) as usize;
    let disk = mems[member].clone();
    let mut old_block = vec![0u8; 4096];
    disk.read_at(block_at, &mut old_block).unwrap();
    let mut old_appendix = vec![0u8; appendix_len];
    disk.read_at(appendix_at, &mut old_appendix).unwrap();

    let mut new = vec![0u8; 4096];
    rng.fill(&mut new[..]);
    array.write(off, &new).unwrap();
    array.flush().unwrap();
    array.close().unwrap();
    model[off as usize..off as usize + 4096].copy_from_slice(&new);

    match damage {
        Damage::AppendixLost => disk.write_at(appendix_at, &old_appendix).unwrap(),
        Damage::BlockLost => disk.write_at(block_at, &old_block).unwrap(),
        Damage::TornInsideBlock => disk.write_at(block_at + 512, &old_block[512..]).unwrap(),
        Damage::Misdirected4k => {
            let mut landed = vec![0u8; 4096];
            disk.read_at(block_at, &mut landed).unwrap();
            disk.write_at(block_at, &old_block).unwrap();
            disk.write_at(map.offset_of(stripe + 1) + block * 4096, &landed)
                .unwrap();
        }
    }
    let array = Array::assemble(members(&mems), &Default::default()).unwrap();
    (array, Case { mems, model }, off)
}

fn check(scheme: Scheme, damage: Damage) -> Result<(), String> {
    check_code(scheme, damage, CodeId::Raid6)
}

fn check_code(scheme: Scheme, damage: Damage, code: CodeId) -> Result<(), String> {
    let (array, case, off) = run(scheme, damage, code);
    let mut got = vec![0u8; 4096];
    array
        .read(off, &mut got)
        .map_err(|e| format!("read failed: {e}"))?;
    if got != case.model[off as usize..off as usize + 4096] {
        return Err("the 4 KiB read returned wrong bytes".into());
    }
    let mut all = vec![0u8; case.model.len()];
    array
        .read(0, &mut all)
        .map_err(|e| format!("read failed: {e}"))?;
    if all != case.model {
        let bad = (0..all.len()).find(|&i| all[i] != case.model[i]).unwrap();
        return Err(format!("the whole array differs first at byte {bad}"));
    }
    if array.counters().detected == 0 {
        return Err("nothing was detected".into());
    }
    drop(case.mems);
    Ok(())
}

const DAMAGES: [Damage; 4] = [
    Damage::AppendixLost,
    Damage::BlockLost,
    Damage::TornInsideBlock,
    Damage::Misdirected4k,
];

#[test]
fn every_detecting_scheme_returns_the_new_bytes() {
    for scheme in [
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
        Scheme::Pure,
    ] {
        for damage in DAMAGES {
            if scheme == Scheme::Pure && matches!(damage, Damage::AppendixLost) {
                // A pure data appendix holds the buddy's copy, not this chunk's: losing it is
                // the buddy-appendix case of the fault campaign, not a block-granularity one.
                continue;
            }
            check(scheme, damage).unwrap_or_else(|e| panic!("{scheme} {damage:?}: {e}"));
        }
    }
}

#[test]
fn none_returns_wrong_bytes_under_the_same_damage() {
    for damage in [
        Damage::BlockLost,
        Damage::TornInsideBlock,
        Damage::Misdirected4k,
    ] {
        assert!(
            check(Scheme::None, damage).is_err(),
            "none {damage:?}: the negative control must fail"
        );
    }
}

#[test]
fn rdp_and_tier_too() {
    // 6 data chunks: p = 7, six rows per chunk; 48 KiB chunks would do, 64 KiB do not divide.
    for code in [CodeId::Rdp, CodeId::Tier] {
        for scheme in [Scheme::Hybrid1, Scheme::Hybrid2, Scheme::HybridSeq] {
            for damage in DAMAGES {
                check_code(scheme, damage, code)
                    .unwrap_or_else(|e| panic!("{} {scheme} {damage:?}: {e}", code.name()));
            }
        }
    }
}

/// The appendix cache (FORMAT.md §2.9): with the array still open and the unit's appendix
/// cached, a lost write of the block (old bytes put back on the member by hand) is caught by
/// the cached table on the next read, and damage to the on-disk appendix alone leaves the data
/// right and is found by a scrub.
#[test]
fn faults_are_caught_with_the_appendix_cached() {
    for scheme in [Scheme::Hybrid1, Scheme::Hybrid2, Scheme::HybridSeq] {
        let cfg = ArrayConfig::new(K, M, scheme, CHUNK, STRIPES);
        let mems: Vec<Arc<MemDisk>> = (0..K + M)
            .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
            .collect();
        let array = Array::create(members(&mems), &cfg, true, &mut |_, _| {}).unwrap();
        array.enable_appendix_cache(1024);
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let cap = array.capacity_bytes() as usize;
        let mut model = vec![0u8; cap];
        rng.fill(&mut model[..]);
        array.write(0, &model).unwrap();
        let (stripe, chunk, block) = (3u64, 1usize, 9u64);
        let off = stripe * K as u64 * CHUNK as u64 + chunk as u64 * CHUNK as u64 + block * 4096;
        let disk = mems[array.geometry().member_of(stripe, chunk)].clone();
        let map = array.unit_map();
        let block_at = map.offset_of(stripe) + block * 4096;
        let mut old = vec![0u8; 4096];
        disk.read_at(block_at, &mut old).unwrap();
        let appendix_at = map.offset_of(stripe) + CHUNK as u64;
        let mut old_appendix = vec![0u8; (map.unit_bytes - CHUNK as u64) as usize];
        disk.read_at(appendix_at, &mut old_appendix).unwrap();
        // A 4 KiB write (its appendix is now cached), then its block write "lost".
        let mut new = vec![0u8; 4096];
        rng.fill(&mut new[..]);
        array.write(off, &new).unwrap();
        model[off as usize..off as usize + 4096].copy_from_slice(&new);
        let mut got = vec![0u8; 4096];
        array.read(off, &mut got).unwrap(); // warm: verified from the cache
        assert!(got == new, "{scheme}");
        disk.write_at(block_at, &old).unwrap();
        let before = array.counters().located;
        array.read(off, &mut got).unwrap();
        assert!(
            got == new,
            "{scheme}: the lost block write returned old bytes"
        );
        assert!(array.counters().located > before, "{scheme}: not located");
        // The whole unit's old bytes put back (block and appendix: self-consistent) after a
        // read made it a subsequent read, which does not cross-check: only the cached, newer
        // table can tell — this is the cache's path, not the disk's appendix.
        array.read(off, &mut got).unwrap();
        disk.write_at(block_at, &old).unwrap();
        disk.write_at(appendix_at, &old_appendix).unwrap();
        let before = array.counters().located;
        array.read(off, &mut got).unwrap();
        assert!(got == new, "{scheme}: a stale unit was returned");
        assert!(
            array.counters().located > before,
            "{scheme}: stale unit not located"
        );
        // Damage to the on-disk appendix of another unit whose appendix is cached.
        let other = (stripe + 1, 2usize);
        let o_off = other.0 * K as u64 * CHUNK as u64 + other.1 as u64 * CHUNK as u64;
        array.read(o_off, &mut got).unwrap();
        let o_disk = mems[array.geometry().member_of(other.0, other.1)].clone();
        o_disk
            .write_at(map.offset_of(other.0) + CHUNK as u64 + 40, &[0xff; 8])
            .unwrap();
        array.read(o_off, &mut got).unwrap();
        assert!(
            got == model[o_off as usize..o_off as usize + 4096],
            "{scheme}"
        );
        let before = array.counters().located;
        assert_eq!(array.scrub_stripe(other.0).unwrap(), 1, "{scheme}: scrub");
        assert!(array.counters().located > before);
        let mut all = vec![0u8; cap];
        array.read(0, &mut all).unwrap();
        assert!(all == model, "{scheme}: the array differs");
    }
}

/// The negative control for the test above: without the cache's check, the same lost block
/// write under `none` returns the old bytes.
#[test]
fn none_returns_the_lost_block_with_the_array_open() {
    let cfg = ArrayConfig::new(K, M, Scheme::None, CHUNK, STRIPES);
    let mems: Vec<Arc<MemDisk>> = (0..K + M)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
        .collect();
    let array = Array::create(members(&mems), &cfg, true, &mut |_, _| {}).unwrap();
    array.enable_appendix_cache(1024);
    let (stripe, chunk, block) = (3u64, 1usize, 9u64);
    let off = stripe * K as u64 * CHUNK as u64 + chunk as u64 * CHUNK as u64 + block * 4096;
    let disk = mems[array.geometry().member_of(stripe, chunk)].clone();
    let block_at = array.unit_map().offset_of(stripe) + block * 4096;
    let old = vec![0u8; 4096];
    array.write(off, &[7u8; 4096]).unwrap();
    disk.write_at(block_at, &old).unwrap();
    let mut got = vec![0u8; 4096];
    array.read(off, &mut got).unwrap();
    assert_eq!(got, old, "none cannot see the lost write");
}

/// Found by an outside attack: RAID-5, a 4 KiB write whose write of P is lost entirely, then
/// the data member lost. The rebuilt chunk comes from the stale P, whose copy of the chunk's CRC
/// ties with the buddy's newer one: with no redundancy left to check the rebuild, that is an
/// unrecoverable stripe, never the old bytes.
#[test]
fn a_lost_parity_write_then_a_lost_member_is_unrecoverable_not_old_bytes() {
    for scheme in [Scheme::Hybrid2, Scheme::Pure] {
        let (k, m) = (4usize, 1usize);
        let cfg = ArrayConfig::new(k, m, scheme, CHUNK, STRIPES);
        let mems: Vec<Arc<MemDisk>> = (0..k + m)
            .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
            .collect();
        let array = Array::create(members(&mems), &cfg, true, &mut |_, _| {}).unwrap();
        let data: Vec<u8> = (0..array.capacity_bytes() as usize)
            .map(|i| (i * 7) as u8)
            .collect();
        array.write(0, &data).unwrap();
        let map = array.unit_map();
        let p = mems[array.geometry().member_of(0, k)].clone();
        let d = array.geometry().member_of(0, 2);
        let mut old_p = vec![0u8; map.unit_bytes as usize];
        p.read_at(map.offset_of(0), &mut old_p).unwrap();
        let off = 2 * CHUNK as u64 + 8192;
        array.write(off, &[0xa5; 4096]).unwrap();
        array.close().unwrap();
        p.write_at(map.offset_of(0), &old_p).unwrap();
        let left: Vec<DiskRef> = mems
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if i == d {
                    Arc::new(stripeguard_disk::FailedDisk::new("gone", "removed")) as DiskRef
                } else {
                    m.clone() as DiskRef
                }
            })
            .collect();
        let array = Array::assemble(left, &Default::default()).unwrap();
        let mut got = vec![0u8; 4096];
        match array.read(off, &mut got) {
            Err(stripeguard_engine::EngineError::Unrecoverable { .. }) => {}
            Ok(()) => panic!(
                "{scheme}: returned {} bytes",
                if got == [0xa5; 4096] {
                    "the new"
                } else {
                    "old"
                }
            ),
            Err(e) => panic!("{scheme}: {e}"),
        }
    }
}
