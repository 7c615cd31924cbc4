//! Scrub checks the metadata area too: damaged copies of the owner record, the checkpoint
//! record, the write-intent record and event-log entries are found (a check-only walk reports
//! them), and a writable scrub rewrites them, after which a second scrub finds nothing.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use std::sync::Arc;
use stripeguard_disk::{Disk, DiskRef, MemDisk};
use stripeguard_engine::{
    scrub, Array, ArrayConfig, AssembleOptions, EnvRef, ScrubOptions, SimEnv,
};
use stripeguard_integrity::{
    MetadataLayout, Scheme, CHECKPOINT_OFFSET, INTENT_RECORD_OFFSET, OWNER_RECORD_OFFSET,
};

#[test]
fn scrub_finds_and_rewrites_damaged_metadata_copies() {
    let stripes = 64;
    let unit = 4096 + 512;
    let size = MetadataLayout::member_bytes_for(stripes, unit);
    let d: Vec<Arc<MemDisk>> = (0..6)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect();
    let refs = || -> Vec<DiskRef> { d.iter().map(|x| x.clone() as DiskRef).collect() };
    let a = Array::create(
        refs(),
        &ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, stripes),
        true,
        &mut |_, _| {},
    )
    .unwrap();
    a.write(0, &vec![7u8; 64 * 1024]).unwrap();
    a.flush().unwrap();
    // An event in the log, and a scrub record (a checkpoint) to damage.
    scrub(&a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    a.close().unwrap();
    let layout = MetadataLayout::for_member(size);
    let flip = |m: usize, at: u64| {
        let mut b = [0u8; 1];
        d[m].read_at(at, &mut b).unwrap();
        b[0] ^= 0x40;
        d[m].write_at(at, &b).unwrap();
    };
    // Owner slot 0 and 1 on member 1 (one of them holds the record), checkpoint copies on
    // member 2, an intent copy on member 3, and the first log entry on member 4.
    flip(1, OWNER_RECORD_OFFSET + 100);
    flip(1, OWNER_RECORD_OFFSET + 2048 + 100);
    flip(2, CHECKPOINT_OFFSET + 30);
    flip(2, CHECKPOINT_OFFSET + 2048 + 30);
    flip(3, INTENT_RECORD_OFFSET + 17);
    flip(3, INTENT_RECORD_OFFSET + layout.intent_bytes / 2 + 17);
    flip(4, layout.log_offset() + 70);

    // Check only: found, nothing written.
    let ro = AssembleOptions {
        writable: false,
        ..AssembleOptions::default()
    };
    let a = Array::assemble(refs(), &ro).unwrap();
    let s = scrub(&a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    let regions: Vec<(&str, usize)> = s.metadata.iter().map(|f| (f.region, f.member)).collect();
    for want in [("checkpoint", 2), ("intent", 3), ("log", 4)] {
        assert!(regions.contains(&want), "{want:?} not found: {regions:?}");
    }
    assert!(s.metadata.iter().all(|f| !f.repaired));
    drop(a);

    // Writable scrub: rewritten; a second scrub finds nothing.
    let a = Array::assemble(refs(), &AssembleOptions::default()).unwrap();
    let s = scrub_from_start(&a);
    assert!(
        !s.metadata.is_empty() && s.metadata.iter().all(|f| f.repaired),
        "{:?}",
        s.metadata
    );
    let again = scrub_from_start(&a);
    assert!(again.metadata.is_empty(), "{:?}", again.metadata);
    a.close().unwrap();
    let a = Array::assemble(refs(), &ro).unwrap();
    let mut back = vec![0u8; 64 * 1024];
    a.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 7));
    assert!(a.event_log().entries.iter().any(|e| e.kind == "metadata"));
}

/// A power cut in the middle of an intent-record update tears the copy being written: that is
/// the crash's doing, and the resync rewrites both copies, so a later check finds nothing.
#[test]
fn the_resync_rewrites_an_intent_copy_the_crash_tore() {
    let stripes = 16;
    let size = MetadataLayout::member_bytes_for(stripes, 4096 + 512);
    let d: Vec<Arc<MemDisk>> = (0..6)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect();
    let refs = || -> Vec<DiskRef> { d.iter().map(|x| x.clone() as DiskRef).collect() };
    let cfg = ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, stripes);
    let a = Array::create(refs(), &cfg, true, &mut |_, _| {}).unwrap();
    a.write(0, &vec![9u8; 32 * 1024]).unwrap();
    // The crash: the array is dropped open (dirty), and both copies of member 3 are torn (one
    // of them is the update in flight; the other stands for any earlier torn update).
    drop(a);
    let layout = MetadataLayout::for_member(size);
    for at in [
        INTENT_RECORD_OFFSET + 40,
        INTENT_RECORD_OFFSET + layout.intent_bytes / 2 + 40,
    ] {
        d[3].write_at(at, &[0xee; 8]).unwrap();
    }
    let a = Array::assemble(refs(), &AssembleOptions::default()).unwrap();
    a.close().unwrap();
    let ro = AssembleOptions {
        writable: false,
        ..AssembleOptions::default()
    };
    let a = Array::assemble(refs(), &ro).unwrap();
    let s = scrub(&a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    assert!(s.metadata.is_empty(), "{:?}", s.metadata);
}

/// A 3 + 1 hybrid-seq array of `stripes` 4 KiB chunks on memory members in a simulated
/// environment, and the members.
fn small_array(stripes: u64, env: &EnvRef) -> (Vec<Arc<MemDisk>>, Array) {
    let size = MetadataLayout::member_bytes_for(stripes, 4096 + 512);
    let d: Vec<Arc<MemDisk>> = (0..4)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect();
    let refs: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
    let cfg = ArrayConfig {
        env: env.clone(),
        ..ArrayConfig::new(3, 1, Scheme::HybridSeq, 4096, stripes)
    };
    let a = Array::create(refs, &cfg, true, &mut |_, _| {}).unwrap();
    (d, a)
}

/// Outside attack (issue 32): a writable scrub that repairs a damaged checkpoint slot leaves its
/// own record the newest (the repair rewrote the previous scrub's record at a higher sequence
/// than this scrub's final one, so `status` showed the previous scrub).
#[test]
fn a_scrub_that_repairs_a_checkpoint_slot_is_still_the_last_scrub() {
    let stripes = 16;
    let env = SimEnv::shared(1);
    let (d, a) = small_array(stripes, &env);
    let refs = || -> Vec<DiskRef> { d.iter().map(|x| x.clone() as DiskRef).collect() };
    // A first scrub, whose record a later one must supersede.
    scrub(&a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    let first = a.last_scrub().unwrap();
    a.close().unwrap();
    // Damage the slot the first scrub's record is not in, on one member.
    let other = CHECKPOINT_OFFSET + ((first.sequence + 1) % 2) * 2048;
    let mut b = [0u8; 1];
    d[1].read_at(other + 40, &mut b).unwrap();
    d[1].write_at(other + 40, &[b[0] ^ 1]).unwrap();
    let opts = AssembleOptions {
        env: env.clone(),
        ..AssembleOptions::default()
    };
    let a = Array::assemble(refs(), &opts).unwrap();
    env.sleep(std::time::Duration::from_millis(1100));
    let s = scrub_from_start(&a);
    assert!(!s.metadata.is_empty(), "the damaged slot was found");
    let last = a.last_scrub().unwrap();
    assert!(last.finished && last.next_stripe == stripes);
    // The (virtual) sleep above puts a second between the two scrubs' starts.
    assert!(
        last.started_unix > first.started_unix,
        "this scrub's record is the newest: {last:?} after {first:?}"
    );
    a.close().unwrap();
}

/// Outside attack (issue 32): a log entry damaged on every member is cleared, and the finding
/// says so (it claimed "rewritten from a good copy" when there was none).
#[test]
fn a_log_entry_damaged_everywhere_is_reported_cleared() {
    let stripes = 16;
    let (d, a) = small_array(stripes, &SimEnv::shared(2));
    let refs = || -> Vec<DiskRef> { d.iter().map(|x| x.clone() as DiskRef).collect() };
    scrub(&a, &ScrubOptions::default(), &mut |_, _| {}).unwrap();
    let log_at = a.superblock().layout.log_offset();
    a.close().unwrap();
    // Entry slot 0 (the first event) damaged on every member.
    for m in &d {
        let mut b = [0u8; 1];
        m.read_at(log_at + 70, &mut b).unwrap();
        if b[0] == 0 {
            b[0] = 0x20;
        }
        m.write_at(log_at + 70, &[b[0] ^ 0x01]).unwrap();
    }
    let a = Array::assemble(refs(), &AssembleOptions::default()).unwrap();
    let found = a.scrub_metadata(true).unwrap();
    let logs: Vec<_> = found.iter().filter(|f| f.region == "log").collect();
    assert_eq!(logs.len(), 4, "{found:?}");
    assert!(logs.iter().all(|f| f.repaired && f.cleared), "{found:?}");
    a.close().unwrap();
}

/// A writable scrub of the whole array from its first stripe (not resuming an earlier one).
fn scrub_from_start(a: &Array) -> stripeguard_engine::ScrubSummary {
    scrub(
        a,
        &ScrubOptions {
            restart: true,
            ..ScrubOptions::default()
        },
        &mut |_, _| {},
    )
    .unwrap()
}
