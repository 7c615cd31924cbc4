//! The engine over member files opened with O_DIRECT — the path where a request's member I/O
//! goes to the kernel as one io_uring batch (or the thread pool where io_uring is missing):
//! random unaligned writes and reads against a model, every stripe scrubbed clean, then one
//! bit flipped by hand inside a 4 KiB block of a data unit (FORMAT.md §2 offsets) is found and
//! repaired by the next read; then bits flipped in three stripes at once are found and repaired
//! by one read over six stripes (whose member I/O goes out as one batch). Skips where the
//! directory has no O_DIRECT (tmpfs).

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use stripeguard_disk::{Disk, DiskRef, FileDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;

#[test]
fn direct_members_round_trip_scrub_and_repair() {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(base).unwrap();
    for scheme in [Scheme::None, Scheme::HybridSeq, Scheme::Hybrid2] {
        let cfg = ArrayConfig::new(6, 2, scheme, 65536, 16);
        let paths: Vec<_> = (0..8)
            .map(|i| dir.path().join(format!("{scheme}-{i}")))
            .collect();
        let mut disks = Vec::new();
        for p in &paths {
            std::fs::File::create(p)
                .unwrap()
                .set_len(cfg.member_bytes())
                .unwrap();
            match FileDisk::open(p, true) {
                Ok(d) => disks.push(Arc::new(d) as DiskRef),
                Err(e) => {
                    eprintln!("skipping: no O_DIRECT in {}: {e}", dir.path().display());
                    return;
                }
            }
        }
        let a = Array::create(disks, &cfg, true, &mut |_, _| {}).unwrap();
        let cap = a.capacity_bytes() as usize;
        let mut model = vec![0u8; cap];
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for step in 0..120 {
            let off = rng.random_range(0..cap);
            let most = if step % 4 == 0 { 600_000 } else { 9000 };
            let len = rng.random_range(1..=(cap - off).min(most));
            let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            a.write(off as u64, &data).unwrap();
            model[off..off + len].copy_from_slice(&data);
            let off = rng.random_range(0..cap);
            let len = rng.random_range(1..=(cap - off).min(70_000));
            let mut got = vec![0u8; len];
            a.read(off as u64, &mut got).unwrap();
            assert!(got == model[off..off + len], "{scheme}: step {step}");
        }
        for s in 0..16 {
            assert_eq!(a.scrub_stripe(s).unwrap(), 0, "{scheme}: stripe {s}");
        }
        // A flipped bit in block 3 of stripe 5's data chunk 2, by hand on the file.
        let member = a.geometry().member_of(5, 2);
        let at = a.unit_map().offset_of(5) + 3 * 4096 + 100;
        a.close().unwrap();
        flip(&paths[member], at, 0x10);
        let a = reassemble(&paths);
        let off = 5 * 6 * 65536 + 2 * 65536 + 3 * 4096;
        let mut got = vec![0u8; 4096];
        a.read(off as u64, &mut got).unwrap();
        let want = &model[off..off + 4096];
        if scheme == Scheme::None {
            assert!(
                got != want,
                "none: the negative control returns the flipped bit"
            );
        } else {
            assert!(got == want, "{scheme}: wrong bytes after a flipped bit");
            assert!(a.counters().located > 0, "{scheme}: nothing located");
        }
        // Three stripes damaged at once (a data chunk of 4 and 7, P of 6), read by one request
        // over stripes 3..=8: each piece checked and repaired inside the one batch's read.
        let map = a.unit_map();
        let hits: Vec<(usize, u64)> = [(4u64, 0usize), (6, 6), (7, 5)]
            .iter()
            .map(|&(stripe, pos)| {
                let m = a.geometry().member_of(stripe, pos);
                (m, map.offset_of(stripe) + 7 * 4096 + 9)
            })
            .collect();
        let located = a.counters().located;
        a.close().unwrap();
        for &(m, at) in &hits {
            flip(&paths[m], at, 0x01);
        }
        let a = reassemble(&paths);
        let (from, to) = (3 * 6 * 65536, 9 * 6 * 65536);
        let mut got = vec![0u8; to - from];
        a.read(from as u64, &mut got).unwrap();
        if scheme == Scheme::None {
            assert!(
                got != model[from..to],
                "none: the negative control returns the flipped bits"
            );
        } else {
            assert!(
                got == model[from..to],
                "{scheme}: wrong bytes after bits flipped in three stripes"
            );
            // Each data chunk's flip is located by its own piece (P's only by a scrub or a
            // write: a read does not read P).
            assert!(
                a.counters().located >= 2,
                "{scheme}: {} located after the batch read (before: {located})",
                a.counters().located
            );
            for s in 3..9 {
                a.scrub_stripe(s).unwrap();
            }
            let mut again = vec![0u8; to - from];
            a.read(from as u64, &mut again).unwrap();
            assert!(again == model[from..to], "{scheme}: after scrub");
        }
    }
}

/// Flip the bits `mask` of the byte at `at` of a member file, by hand.
fn flip(path: &std::path::Path, at: u64, mask: u8) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ mask], at).unwrap();
    f.sync_all().unwrap();
}

/// The array on `paths` assembled again, members opened with O_DIRECT.
fn reassemble(paths: &[std::path::PathBuf]) -> Array {
    let disks: Vec<DiskRef> = paths
        .iter()
        .map(|p| Arc::new(FileDisk::open(p, true).unwrap()) as DiskRef)
        .collect();
    Array::assemble(disks, &Default::default()).unwrap()
}

/// A member that fails (every I/O an error, as a server gone) from its `left`-th write on.
struct DiesAfter {
    inner: FileDisk,
    left: Arc<std::sync::atomic::AtomicI64>,
}

impl Disk for DiesAfter {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), stripeguard_disk::DiskError> {
        self.alive()?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), stripeguard_disk::DiskError> {
        if self.left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) <= 0 {
            return Err(self.gone());
        }
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), stripeguard_disk::DiskError> {
        self.alive()?;
        self.inner.flush()
    }
    fn prefers_parallel(&self) -> bool {
        true
    }
}

impl DiesAfter {
    fn gone(&self) -> stripeguard_disk::DiskError {
        stripeguard_disk::DiskError::Failed {
            name: self.inner.name().to_string(),
            why: "gone".into(),
        }
    }
    fn alive(&self) -> Result<(), stripeguard_disk::DiskError> {
        if self.left.load(std::sync::atomic::Ordering::SeqCst) <= 0 {
            return Err(self.gone());
        }
        Ok(())
    }
}

/// A member failing in the middle of writes over many stripes (two requests at once, each
/// claimed and written in batches of stripes): the writes go on degraded and every byte reads
/// back, whichever of the member's writes is the first to fail (its intent record, a unit, a
/// saved chunk). The outside attack of issue 41 saw a write with an NBD member killed mid-way
/// stall and fail ("the write journal's 4 slots stayed full"); this does not reproduce that
/// (see the note), it guards the batched path's failure handling.
#[test]
fn a_member_failing_inside_a_batched_write_leaves_it_degraded_not_stuck() {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    for die_at in [1i64, 2, 5, 9, 14] {
        let dir = tempfile::tempdir_in(base).unwrap();
        let cfg = ArrayConfig::new(6, 2, Scheme::HybridSeq, 65536, 48);
        let left = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
        let mut disks = Vec::new();
        for i in 0..8 {
            let p = dir.path().join(format!("m{i}"));
            std::fs::File::create(&p)
                .unwrap()
                .set_len(cfg.member_bytes())
                .unwrap();
            let f = FileDisk::open(&p, false).unwrap();
            disks.push(if i == 5 {
                Arc::new(DiesAfter {
                    inner: f,
                    left: Arc::clone(&left),
                }) as DiskRef
            } else {
                Arc::new(f) as DiskRef
            });
        }
        let a = Array::create(disks, &cfg, true, &mut |_, _| {}).unwrap();
        // Writes from here on: the countdown starts now.
        left.store(die_at, std::sync::atomic::Ordering::SeqCst);
        // Two writers at once, as `stripeguard write` runs them, each a request of 20
        // stripes (two batches).
        let half = 20 * 6 * 65536;
        let data: Vec<u8> = (0..2 * half).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for w in 0..2 {
                let (a, data) = (&a, &data);
                s.spawn(move || {
                    a.write((w * half) as u64, &data[w * half..(w + 1) * half])
                        .unwrap_or_else(|e| panic!("member dying at write {die_at}: {e}"));
                });
            }
        });
        let mut got = vec![0u8; data.len()];
        a.read(0, &mut got).unwrap();
        assert!(got == data, "member dying at write {die_at}: wrong bytes");
        assert!(
            a.health().iter().any(|h| h.failed.is_some()),
            "member dying at write {die_at}: the member never failed"
        );
    }
}
