//! Growing the array (FORMAT.md §2, "Growing the array"): every scheme, with and without zero
//! stripes and the write journal, keeps its data and reads its new stripes as zeros whatever
//! the members held there; and a power cut at every I/O of a grow leaves the array at its old
//! size or its new one, never between, nothing flushed lost.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use stripeguard_disk::{crash_images, CrashDisk, DiskRef, MemDisk, PowerCut};
use stripeguard_engine::{Array, ArrayConfig, ScrubOptions};
use stripeguard_integrity::Scheme;

const OLD: u64 = 6;
const NEW: u64 = 15;

fn config(scheme: Scheme, zero_stripes: bool, journal: bool) -> ArrayConfig {
    let (k, m) = if scheme.fits_data_chunks(1) {
        (3, 2)
    } else {
        (3, 1)
    };
    ArrayConfig {
        zero_stripes,
        write_journal: journal,
        ..ArrayConfig::new(k, m, scheme, 8192, OLD)
    }
}

fn member_count(cfg: &ArrayConfig) -> usize {
    cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members()
}

/// Members with room for `NEW` stripes; everything past what `OLD` stripes use holds bytes
/// that are not zeros (an old disk's content), which no read may return.
fn scribbled(cfg: &ArrayConfig, a: &Array, mems: &[DiskRef]) {
    let from = a.superblock().member_bytes();
    for d in mems {
        let to = d.size_bytes();
        d.write_at(from, &vec![0xa5; (to - from) as usize]).unwrap();
        d.flush().unwrap();
    }
    let _ = cfg;
}

fn big(cfg: &ArrayConfig) -> u64 {
    ArrayConfig {
        stripes: Some(NEW),
        ..cfg.clone()
    }
    .member_bytes()
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

#[test]
fn every_scheme_grows_keeping_its_data_and_reads_the_new_stripes_as_zeros() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(38);
    for journal in [false, true] {
        for zero_stripes in [true, false] {
            for scheme in Scheme::ENGINE {
                let what = format!("{scheme:?} zero_stripes={zero_stripes} journal={journal}");
                let cfg = config(scheme, zero_stripes, journal);
                let mems: Vec<DiskRef> = (0..member_count(&cfg))
                    .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), big(&cfg))) as DiskRef)
                    .collect();
                let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
                scribbled(&cfg, &a, &mems);
                let old = random(&mut rng, a.capacity_bytes() as usize);
                a.write(0, &old).unwrap();
                assert_eq!(a.stripes_that_fit(), NEW, "{what}");
                let grown = a.grow(NEW, &mut |_, _| {}).unwrap();
                assert_eq!((grown.from_stripes, grown.to_stripes), (OLD, NEW), "{what}");
                assert_eq!(grown.as_zero_stripes, zero_stripes, "{what}");
                assert_eq!(a.geometry().stripes, NEW);
                let sd = a.geometry().stripe_data_bytes() as usize;
                let got = read_all(&a);
                assert!(got[..old.len()] == old[..], "{what}: the old data changed");
                assert!(
                    got[old.len()..].iter().all(|&b| b == 0),
                    "{what}: a new stripe does not read as zeros"
                );
                // The new stripes take writes, the last one and one across the old end too.
                let across = random(&mut rng, 2 * sd);
                a.write((OLD as usize * sd - sd / 2) as u64, &across)
                    .unwrap();
                let last = random(&mut rng, 5000);
                a.write((NEW as usize * sd - 5000) as u64, &last).unwrap();
                a.flush().unwrap();
                let want = {
                    let mut w = got.clone();
                    let at = OLD as usize * sd - sd / 2;
                    w[at..at + across.len()].copy_from_slice(&across);
                    let n = w.len();
                    w[n - 5000..].copy_from_slice(&last);
                    w
                };
                assert!(
                    read_all(&a) == want,
                    "{what}: after writes past the old end"
                );
                assert!(
                    a.events()
                        .iter()
                        .any(|e| e.kind == stripeguard_engine::EventKind::Grown),
                    "{what}: no grown event"
                );
                // Growing to the size it has is no change.
                assert_eq!(a.grow(NEW, &mut |_, _| {}).unwrap().from_stripes, NEW);
                assert!(a.grow(NEW + 1, &mut |_, _| {}).is_err(), "{what}: no room");
                assert!(a.grow(OLD, &mut |_, _| {}).is_err(), "{what}: shrinking");
                a.close().unwrap();
                let b = Array::assemble(mems.clone(), &Default::default()).unwrap();
                assert_eq!(b.geometry().stripes, NEW, "{what}");
                assert!(read_all(&b) == want, "{what}: after reassembly");
                let found = stripeguard_engine::scrub(
                    &b,
                    &ScrubOptions {
                        check_only: true,
                        ..Default::default()
                    },
                    &mut |_, _| {},
                )
                .unwrap();
                assert!(
                    found.unrecoverable.is_empty() && found.metadata.is_empty(),
                    "{what}: {found:?}"
                );
                assert_eq!(b.counters().detected, 0, "{what}: {:?}", b.events());
                b.close().unwrap();
            }
        }
    }
}

#[test]
fn a_grow_is_refused_while_a_member_is_out() {
    let cfg = config(Scheme::HybridSeq, true, false);
    let mems: Vec<DiskRef> = (0..member_count(&cfg))
        .map(|i| Arc::new(MemDisk::new(format!("mem{i}"), big(&cfg))) as DiskRef)
        .collect();
    Array::create(mems.clone(), &cfg, true, &mut |_, _| {})
        .unwrap()
        .close()
        .unwrap();
    let mut some = mems.clone();
    some[1] = Arc::new(stripeguard_disk::FailedDisk::new("mem1", "gone")) as DiskRef;
    let a = Array::assemble(some, &Default::default()).unwrap();
    let e = a.grow(NEW, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("member 1 is"), "{e}");
    assert_eq!(a.geometry().stripes, OLD);
    a.close().unwrap();
}

/// An array of `OLD` stripes on crash disks with room for `NEW`, its data written and flushed;
/// the members as the grow will see them, and the budget shared by their cuts.
fn crash_rig(cfg: &ArrayConfig, old: &[u8]) -> (Array, Vec<Arc<CrashDisk>>, Arc<AtomicI64>) {
    let budget = Arc::new(AtomicI64::new(i64::MAX));
    let crash: Vec<Arc<CrashDisk>> = (0..member_count(cfg))
        .map(|i| Arc::new(CrashDisk::new(format!("c{i}"), big(cfg), 512)))
        .collect();
    let mems: Vec<DiskRef> = crash
        .iter()
        .map(|c| Arc::new(PowerCut::new(Arc::clone(c), Arc::clone(&budget))) as DiskRef)
        .collect();
    let a = Array::create(mems.clone(), cfg, true, &mut |_, _| {}).unwrap();
    scribbled(cfg, &a, &mems);
    a.write(0, old).unwrap();
    a.flush().unwrap();
    (a, crash, budget)
}

#[test]
fn a_power_cut_at_any_io_of_a_grow_leaves_the_old_size_or_the_new_one() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(380);
    let mut cases = 0;
    let mut sizes = [0u32; 2];
    for (scheme, zero_stripes, journal) in [
        (Scheme::HybridSeq, true, false),
        (Scheme::HybridSeq, false, false),
        (Scheme::ChecksumChunk, true, false),
        (Scheme::Hybrid1, false, true),
        (Scheme::None, true, true),
    ] {
        let what = format!("{scheme:?} zero_stripes={zero_stripes} journal={journal}");
        let cfg = config(scheme, zero_stripes, journal);
        let old_len = (OLD * cfg.data_chunks as u64 * 8192) as usize;
        let old = random(&mut rng, old_len);
        // How many I/Os a whole grow takes.
        let (a, _, budget) = crash_rig(&cfg, &old);
        let before = budget.load(Ordering::SeqCst);
        a.grow(NEW, &mut |_, _| {}).unwrap();
        let ios = before - budget.load(Ordering::SeqCst);
        drop(a);
        for cut in 0..ios {
            let (a, crash, budget) = crash_rig(&cfg, &old);
            budget.store(cut, Ordering::SeqCst);
            let _ = a.grow(NEW, &mut |_, _| {});
            drop(a);
            let images = crash_images(&crash, &mut rng);
            let b = Array::assemble(images.clone(), &Default::default())
                .unwrap_or_else(|e| panic!("{what}, cut at I/O {cut} of {ios}: {e}"));
            let stripes = b.geometry().stripes;
            assert!(
                stripes == OLD || stripes == NEW,
                "{what}, cut at {cut}: {stripes} stripes"
            );
            sizes[usize::from(stripes == NEW)] += 1;
            let got = read_all(&b);
            assert!(
                got[..old.len()] == old[..],
                "{what}, cut at {cut}: flushed data lost"
            );
            assert!(
                got[old.len()..].iter().all(|&x| x == 0),
                "{what}, cut at {cut}: a new stripe reads other than zeros"
            );
            // Finishing the grow (or growing again) works and keeps everything.
            b.grow(NEW, &mut |_, _| {}).unwrap();
            let more = random(&mut rng, 3 * 8192);
            let at = b.capacity_bytes() - more.len() as u64;
            b.write(at, &more).unwrap();
            let got = read_all(&b);
            assert!(got[..old.len()] == old[..], "{what}, cut at {cut}");
            assert!(got[at as usize..] == more[..], "{what}, cut at {cut}");
            assert_eq!(b.counters().detected, 0, "{what}, cut at {cut}");
            b.close().unwrap();
            cases += 1;
        }
    }
    eprintln!(
        "{cases} power cuts: {} left the old size, {} the new one",
        sizes[0], sizes[1]
    );
    assert!(sizes[0] > 0 && sizes[1] > 0);
}
