//! `replace`: a missing member rebuilt onto a new disk with the survivors checked on the way
//! (a silently wrong survivor is repaired, not copied; `none` copies it: the negative control),
//! an interrupted replace resumed onto the same disk, and refused onto another.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use stripeguard_disk::{Disk, DiskError, DiskRef, FailedDisk, MemDisk};
use stripeguard_engine::{Array, ArrayConfig, AssembleOptions, ReplaceForce};
use stripeguard_integrity::{MetadataLayout, Scheme};

const CHUNK: u32 = 4096;

/// A disk that fails every write into `at` after the first `left` of them (a replace killed
/// there, or a device unplugged part way).
struct Flaky {
    inner: DiskRef,
    left: AtomicI64,
    at: std::ops::Range<u64>,
}

impl Disk for Flaky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, o: u64, b: &mut [u8]) -> Result<(), DiskError> {
        self.inner.read_at(o, b)
    }
    fn write_at(&self, o: u64, b: &[u8]) -> Result<(), DiskError> {
        if self.at.contains(&o) && self.left.fetch_sub(1, Ordering::Relaxed) <= 0 {
            return Err(DiskError::Failed {
                name: "flaky".into(),
                why: "unplugged".into(),
            });
        }
        self.inner.write_at(o, b)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.inner.flush()
    }
}

fn setup(scheme: Scheme, stripes: u64) -> (Vec<Arc<MemDisk>>, Vec<u8>, u64) {
    let unit = CHUNK as u64 + if scheme.has_appendix() { 512 } else { 0 };
    let size = MetadataLayout::member_bytes_for(stripes, unit);
    let d: Vec<Arc<MemDisk>> = (0..6)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect();
    let refs: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
    let cfg = ArrayConfig::new(4, 2, scheme, CHUNK, stripes);
    let a = Array::create(refs, &cfg, true, &mut |_, _| {}).unwrap();
    let data: Vec<u8> = (0..a.capacity_bytes() as usize)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    a.write(0, &data).unwrap();
    a.close().unwrap();
    (d, data, size)
}

/// Everything the array holds, read through `members` with members 0 and 5 taken out: every
/// byte then comes through the others, the rebuilt one included (RAID-6 has no parity to spare).
fn read_with_0_and_5_out(mut members: Vec<DiskRef>) -> Vec<u8> {
    members[0] = Arc::new(FailedDisk::new("gone", "removed"));
    members[5] = Arc::new(FailedDisk::new("gone", "removed"));
    let look = AssembleOptions {
        writable: false,
        ..AssembleOptions::default()
    };
    let a = Array::assemble(members, &look).unwrap();
    let mut back = vec![0u8; a.capacity_bytes() as usize];
    a.read(0, &mut back).unwrap();
    back
}

fn without(d: &[Arc<MemDisk>], gone: usize) -> Vec<DiskRef> {
    d.iter()
        .enumerate()
        .map(|(i, x)| {
            if i == gone {
                Arc::new(FailedDisk::new("gone", "removed")) as DiskRef
            } else {
                x.clone() as DiskRef
            }
        })
        .collect()
}

#[test]
fn rebuild_checks_survivors_and_none_copies_their_corruption() {
    for scheme in [
        Scheme::None,
        Scheme::Hybrid1,
        Scheme::HybridSeq,
        Scheme::Hybrid2,
    ] {
        let (d, data, size) = setup(scheme, 32);
        // Member 2 is gone; a survivor (member 4) has a flipped bit in stripe 5's unit.
        let probe = Array::assemble(without(&d, 2), &AssembleOptions::default()).unwrap();
        let off = probe.superblock().data_offset_bytes + 5 * probe.unit_bytes() + 33;
        probe.close().unwrap();
        d[4].with_bytes_mut(|b| b[off as usize] ^= 0x40);
        let a = Array::assemble(without(&d, 2), &AssembleOptions::default()).unwrap();
        let new = Arc::new(MemDisk::new("new2", size));
        let s = a
            .replace(2, new.clone(), ReplaceForce::NONE, &mut |_, _| {})
            .unwrap();
        a.close().unwrap();
        let mut members: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
        members[2] = new;
        let a = Array::assemble(members, &AssembleOptions::default()).unwrap();
        assert!(a.health().iter().all(|h| h.failed.is_none()), "{scheme}");
        let mut back = vec![0u8; data.len()];
        a.read(0, &mut back).unwrap();
        if scheme == Scheme::None {
            assert_ne!(back, data, "none should have copied the flipped bit");
        } else {
            assert_eq!(back, data, "{scheme}");
            assert_eq!(s.survivors_repaired, 1, "{scheme}");
        }
    }
}

/// A replace of member 1 (out) onto a new disk that fails after 400 writes: the new disk,
/// holding the first run's stripes and its saved position.
fn interrupted_replace(d: &[Arc<MemDisk>], size: u64) -> Arc<MemDisk> {
    let target = Arc::new(MemDisk::new("new1", size));
    let a = Array::assemble(without(d, 1), &AssembleOptions::default()).unwrap();
    let flaky = Arc::new(Flaky {
        inner: target.clone(),
        left: AtomicI64::new(400),
        at: 0..u64::MAX,
    });
    assert!(a
        .replace(1, flaky, ReplaceForce::NONE, &mut |_, _| {})
        .is_err());
    target
}

#[test]
fn an_interrupted_replace_resumes_onto_the_same_disk_only() {
    let scheme = Scheme::HybridSeq;
    let (d, data, size) = setup(scheme, 700);
    let target = interrupted_replace(&d, size);
    // Another disk while that replace is unfinished: refused, nothing lost.
    let a = Array::assemble(without(&d, 1), &AssembleOptions::default()).unwrap();
    let other = Arc::new(MemDisk::new("other", size));
    let e = a
        .replace(1, other, ReplaceForce::NONE, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("in progress"), "{e}");
    // The same disk: resumes past stripe 0.
    let s = a
        .replace(1, target.clone(), ReplaceForce::NONE, &mut |_, _| {})
        .unwrap();
    assert!(s.resumed_at >= 256, "{s:?}");
    a.close().unwrap();
    let mut members: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
    members[1] = target;
    let a = Array::assemble(members, &AssembleOptions::default()).unwrap();
    assert!(a.health().iter().all(|h| h.failed.is_none()));
    let mut back = vec![0u8; data.len()];
    a.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    for st in 0..700 {
        a.scrub_stripe(st).unwrap();
    }
    assert_eq!(a.counters().located, 0);
    // A healthy member is kept unless forced.
    drop(a);
}

/// A write between an interrupted replace and its resume, to a stripe the first run had
/// already rebuilt, reaches the new device once the replace has finished (found by an outside
/// test: the resume started where the first run stopped, and the member read the old bytes).
/// The write-intent record marks it (the member was out all along): the resume rebuilds it
/// again. On `none` the stale unit would be returned as it is; on hybrid-seq it would have been
/// found stale; both must read the new bytes with two other members out.
#[test]
fn a_write_between_an_interrupted_replace_and_its_resume_reaches_the_new_device() {
    for scheme in [Scheme::None, Scheme::HybridSeq] {
        let (d, mut data, size) = setup(scheme, 700);
        let target = interrupted_replace(&d, size);
        // Stripes 10..13 (the first run passed them), written while no replace runs.
        let a = Array::assemble(without(&d, 1), &AssembleOptions::default()).unwrap();
        let stripe_bytes = 4 * CHUNK as usize;
        let at = 10 * stripe_bytes + 321;
        let bytes = vec![0x5c; 3 * stripe_bytes];
        a.write(at as u64, &bytes).unwrap();
        data[at..at + bytes.len()].copy_from_slice(&bytes);
        let s = a
            .replace(1, target.clone(), ReplaceForce::NONE, &mut |_, _| {})
            .unwrap();
        assert!(s.resumed_at > 13, "{scheme:?}: {s:?}");
        a.close().unwrap();
        let mut members: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
        members[1] = target;
        assert!(
            read_with_0_and_5_out(members) == data,
            "{scheme:?}: the new device holds old bytes"
        );
    }
}

/// The device that left comes back: `replace` onto it rebuilds only the stripes of the regions
/// written while it was out (the write-intent bits stay set while a member is out), and the
/// array reads right afterwards even with two other members gone. An older device of the same
/// slot (one that a full replace superseded) is not taken for it: it is rebuilt in full.
#[test]
fn a_returning_member_is_readded_through_the_intent_record_and_an_older_one_is_not() {
    const BIG: u32 = 64 * 1024;
    let stripes = 600; // 64 MiB regions of 4 × 64 KiB stripes: 256 stripes a bit, three bits
    let unit = BIG as u64 + 512;
    let size = MetadataLayout::member_bytes_for(stripes, unit);
    let d: Vec<Arc<MemDisk>> = (0..6)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), size)))
        .collect();
    let refs =
        |d: &[Arc<MemDisk>]| -> Vec<DiskRef> { d.iter().map(|x| x.clone() as DiskRef).collect() };
    let cfg = ArrayConfig::new(4, 2, Scheme::HybridSeq, BIG, stripes);
    let a = Array::create(refs(&d), &cfg, true, &mut |_, _| {}).unwrap();
    let mut data: Vec<u8> = (0..a.capacity_bytes() as usize)
        .map(|i| (i * 13 + i / 7001) as u8)
        .collect();
    a.write(0, &data).unwrap();
    a.close().unwrap();
    let stripe_bytes = 4 * BIG as usize;

    // Member 2 leaves; two writes land in region 0 and region 2 (two processes, clean closes).
    let kept = d[2].clone();
    for (at, fill) in [
        (10 * stripe_bytes + 123, 0xA1u8),
        (530 * stripe_bytes, 0xB2),
    ] {
        let a = Array::assemble(without(&d, 2), &AssembleOptions::default()).unwrap();
        let bytes = vec![fill; 3 * stripe_bytes];
        a.write(at as u64, &bytes).unwrap();
        data[at..at + bytes.len()].copy_from_slice(&bytes);
        a.close().unwrap();
    }
    let a = Array::assemble(refs(&d), &AssembleOptions::default()).unwrap();
    assert!(
        a.health()[2].failed.is_some(),
        "the member that left is stale"
    );
    let s = a
        .replace(
            2,
            kept.clone() as DiskRef,
            ReplaceForce::NONE,
            &mut |_, _| {},
        )
        .unwrap();
    assert!(s.readded, "{s:?}");
    assert_eq!(
        s.stripes_to_rebuild,
        256 + (600 - 512),
        "regions 0 and 2: {s:?}"
    );
    a.close().unwrap();
    assert!(
        read_with_0_and_5_out(refs(&d)) == data,
        "the re-added member holds wrong bytes"
    );

    // Now member 2 is replaced by another device in full; its old device, brought back later,
    // is older than the slot's device and must be rebuilt in full too.
    let old_device = Arc::new(MemDisk::new("old-m2", size));
    {
        let mut b = vec![0u8; size as usize];
        kept.read_at(0, &mut b).unwrap();
        old_device.write_at(0, &b).unwrap();
    }
    let fresh = Arc::new(MemDisk::new("new-m2", size));
    let a = Array::assemble(without(&d, 2), &AssembleOptions::default()).unwrap();
    let s = a
        .replace(
            2,
            fresh.clone() as DiskRef,
            ReplaceForce::NONE,
            &mut |_, _| {},
        )
        .unwrap();
    assert!(!s.readded);
    a.close().unwrap();
    let mut now = refs(&d);
    now[2] = fresh.clone();
    let a = Array::assemble(now.clone(), &AssembleOptions::default()).unwrap();
    a.write(0, &[0x5Cu8; 4096]).unwrap();
    data[..4096].fill(0x5C);
    a.close().unwrap();
    now[2] = Arc::new(FailedDisk::new("gone", "unplugged"));
    let a = Array::assemble(now.clone(), &AssembleOptions::default()).unwrap();
    let s = a
        .replace(
            2,
            old_device.clone() as DiskRef,
            ReplaceForce::ALL,
            &mut |_, _| {},
        )
        .unwrap();
    assert!(
        !s.readded,
        "an older device of the slot was taken for the one that left"
    );
    assert_eq!(s.stripes_rebuilt, stripes);
    now[2] = old_device;
    a.close().unwrap();
    assert!(read_with_0_and_5_out(now) == data);
}

/// A replace runs while another thread writes: every write, to stripes already rebuilt or not
/// yet, is on the new device at the end (checked by reading with two other members out).
#[test]
fn replace_runs_while_the_array_serves_writes() {
    for scheme in [Scheme::None, Scheme::HybridSeq, Scheme::Hybrid2] {
        let stripes = 400;
        let (d, mut data, size) = setup(scheme, stripes);
        let a = Array::assemble(without(&d, 3), &AssembleOptions::default()).unwrap();
        let fresh = Arc::new(MemDisk::new("new-m3", size));
        let stripe_bytes = 4 * CHUNK as usize;
        let model = std::sync::Mutex::new(&mut data);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut x = 12345u64;
                for i in 0..600u64 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let stripe = (x >> 33) as usize % stripes as usize;
                    let at = stripe * stripe_bytes + (x as usize % 3) * 1000;
                    let len = 1 + (x >> 20) as usize % (2 * CHUNK as usize);
                    let bytes: Vec<u8> = (0..len).map(|j| (i as usize * 31 + j) as u8).collect();
                    let mut m = model.lock().unwrap();
                    if at + len > m.len() {
                        continue;
                    }
                    a.write(at as u64, &bytes).unwrap();
                    m[at..at + len].copy_from_slice(&bytes);
                }
            });
            let s2 = a
                .replace(
                    3,
                    fresh.clone() as DiskRef,
                    ReplaceForce::NONE,
                    &mut |_, _| {},
                )
                .unwrap();
            assert_eq!(s2.stripes_rebuilt, stripes);
            writer.join().unwrap();
        });
        a.close().unwrap();
        let mut now: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
        now[3] = fresh;
        assert!(
            read_with_0_and_5_out(now) == data,
            "{scheme:?}: the new member misses writes made during the replace"
        );
    }
}

/// Issue 30 item 4: a replace killed as it writes its first checkpoint, run again onto the same
/// device, resumes (or starts over) instead of calling that device "another device". The
/// members used to name the target's id before the target held it.
#[test]
fn a_replace_killed_at_its_first_checkpoint_runs_again_onto_the_same_device() {
    let scheme = Scheme::HybridSeq;
    let (d, data, size) = setup(scheme, 64);
    let target = Arc::new(MemDisk::new("new1", size));
    {
        let a = Array::assemble(without(&d, 1), &AssembleOptions::default()).unwrap();
        // Killed as it records its target's id in the target's checkpoint region.
        let ck = stripeguard_integrity::CHECKPOINT_OFFSET;
        let killed = Arc::new(Flaky {
            inner: target.clone(),
            left: AtomicI64::new(0),
            at: ck..ck + 4096,
        });
        assert!(a
            .replace(1, killed, ReplaceForce::NONE, &mut |_, _| {})
            .is_err());
        // Dropped without closing: the process died there.
    }
    let a = Array::assemble(without(&d, 1), &AssembleOptions::default()).unwrap();
    let s = a
        .replace(1, target.clone(), ReplaceForce::NONE, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("the same device was refused: {e}"));
    assert_eq!(s.stripes_rebuilt, 64, "{s:?}");
    a.close().unwrap();
    let mut members: Vec<DiskRef> = d.iter().map(|x| x.clone() as DiskRef).collect();
    members[1] = target;
    assert!(
        read_with_0_and_5_out(members) == data,
        "the rebuilt member holds wrong bytes"
    );
}
