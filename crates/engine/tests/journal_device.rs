//! The write journal on a journal device (FORMAT.md §2.12): records go to the device, not the
//! members; a power cut at a random I/O, with the journal device lost at a random point before
//! it (or missing at the next assembly), never loses a flushed byte or returns a byte that was
//! never written there; while the device lives, an unflushed chunk reads entirely old or
//! entirely new (the journal's guarantee).

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use stripeguard_disk::{CrashDisk, Disk, DiskError, DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig, AssembleOptions, Devices};
use stripeguard_integrity::Scheme;

const BLOCK: usize = 4096;

/// A disk that fails every I/O once its budget of writes and flushes is spent (a journal
/// device dying), and, shared by every disk of the array, a power switch: past the cut, no
/// write or flush reaches any disk.
struct Cut {
    inner: Arc<CrashDisk>,
    own: Arc<AtomicI64>,
    power: Arc<AtomicI64>,
}

impl Cut {
    fn spend(&self) -> Result<(), DiskError> {
        let dead = self.own.fetch_sub(1, Ordering::SeqCst) <= 0;
        let cut = self.power.fetch_sub(1, Ordering::SeqCst) <= 0;
        if dead || cut {
            return Err(DiskError::Failed {
                name: self.inner.name().to_string(),
                why: if cut { "power cut" } else { "device died" }.into(),
            });
        }
        Ok(())
    }
}

impl Disk for Cut {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        if self.own.load(Ordering::SeqCst) <= 0 {
            return Err(DiskError::Failed {
                name: self.inner.name().to_string(),
                why: "device died".into(),
            });
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.spend()?;
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.spend()?;
        self.inner.flush()
    }
}

struct Rig {
    crash: Vec<Arc<CrashDisk>>,
    jcrash: Arc<CrashDisk>,
    members: Vec<DiskRef>,
    jdev: DiskRef,
    power: Arc<AtomicI64>,
    jbudget: Arc<AtomicI64>,
}

fn rig(cfg: &ArrayConfig) -> Rig {
    let power = Arc::new(AtomicI64::new(i64::MAX));
    let forever = || Arc::new(AtomicI64::new(i64::MAX));
    let crash: Vec<Arc<CrashDisk>> = (0..cfg.data_chunks + cfg.parity_chunks)
        .map(|i| Arc::new(CrashDisk::new(format!("m{i}"), cfg.member_bytes(), 512)))
        .collect();
    let jcrash = Arc::new(CrashDisk::new("j0", 8 << 20, 512));
    let wrap = |c: &Arc<CrashDisk>, own: Arc<AtomicI64>| {
        Arc::new(Cut {
            inner: Arc::clone(c),
            own,
            power: Arc::clone(&power),
        }) as DiskRef
    };
    let members = crash.iter().map(|c| wrap(c, forever())).collect();
    let jbudget = forever();
    let jdev = wrap(&jcrash, Arc::clone(&jbudget));
    Rig {
        crash,
        jcrash,
        members,
        jdev,
        power,
        jbudget,
    }
}

#[test]
fn records_go_to_the_journal_device_not_the_members() {
    let cfg = ArrayConfig {
        write_journal: true,
        journal_devices: Devices(vec![]),
        ..ArrayConfig::new(3, 1, Scheme::HybridSeq, 16384, 32)
    };
    let r = rig(&cfg);
    let cfg = ArrayConfig {
        journal_devices: Devices(vec![Arc::clone(&r.jdev)]),
        ..cfg
    };
    let a = Array::create(r.members.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    let slots_at = a.unit_offset(32);
    let before: Vec<Vec<u8>> = r.crash.iter().map(|c| c.live_image()).collect();
    a.write(0, &vec![7u8; 3 * 16384]).unwrap();
    for (c, b) in r.crash.iter().zip(&before) {
        assert!(
            c.live_image()[slots_at as usize..] == b[slots_at as usize..],
            "a member's journal slots were written"
        );
    }
    assert!(
        r.jcrash.live_image()[8192..].iter().any(|&x| x != 0),
        "nothing reached the journal device"
    );
    a.close().unwrap();
}

/// What each block may read back as after the cut: its flushed bytes, or (if written since the
/// last flush) any version written since.
struct Model {
    flushed: Vec<Vec<u8>>,
    since: Vec<Vec<Vec<u8>>>,
}

/// Whether any block of block `i`'s chunk (16 KiB, four blocks) was written since the flush.
fn chunk_written(m: &Model, i: usize) -> bool {
    let first = i / 4 * 4;
    (first..first + 4).any(|b| m.since.get(b).is_some_and(|s| !s.is_empty()))
}

#[test]
fn a_power_cut_with_the_journal_device_lost_at_a_random_point_loses_nothing_flushed() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3812);
    let mut torn_while_alive = 0;
    let (mut lost_runs, mut alive_runs) = (0, 0);
    for round in 0..120 {
        let scheme = [Scheme::HybridSeq, Scheme::Hybrid1, Scheme::None][round % 3];
        let base = ArrayConfig {
            write_journal: true,
            ..ArrayConfig::new(3, 1, scheme, 16384, 24)
        };
        let r = rig(&base);
        let cfg = ArrayConfig {
            journal_devices: Devices(vec![Arc::clone(&r.jdev)]),
            ..base
        };
        let a = Array::create(r.members.clone(), &cfg, true, &mut |_, _| {}).unwrap();
        let cap = a.capacity_bytes() as usize;
        let blocks = cap / BLOCK;
        let mut m = Model {
            flushed: vec![vec![0u8; BLOCK]; blocks],
            since: vec![Vec::new(); blocks],
        };
        // The journal device dies after a random number of its I/Os (or never), and the
        // power goes after a random number of I/Os of the whole array.
        let dies = rng.random_bool(0.5);
        if dies {
            r.jbudget.store(rng.random_range(0..60), Ordering::SeqCst);
        }
        r.power.store(rng.random_range(20..400), Ordering::SeqCst);
        for _ in 0..40 {
            if rng.random_bool(0.2) {
                if a.flush().is_err() {
                    break;
                }
                for (f, s) in m.flushed.iter_mut().zip(&mut m.since) {
                    if let Some(last) = s.last() {
                        *f = last.clone();
                    }
                    s.clear();
                }
                continue;
            }
            let first = rng.random_range(0..blocks);
            let n = rng.random_range(1..=(blocks - first).min(8));
            let data: Vec<u8> = (0..n * BLOCK).map(|_| rng.random()).collect();
            // Recorded before: a write cut short may have landed any part of it.
            for i in 0..n {
                m.since[first + i].push(data[i * BLOCK..(i + 1) * BLOCK].to_vec());
            }
            if a.write((first * BLOCK) as u64, &data).is_err() {
                break;
            }
        }
        let lost = r.jbudget.load(Ordering::SeqCst) <= 0;
        if lost {
            lost_runs += 1;
        } else {
            alive_runs += 1;
        }
        drop(a);
        // The cut: each disk keeps what was durable and a random part of the rest.
        let images: Vec<DiskRef> = r
            .crash
            .iter()
            .map(|c| Arc::new(MemDisk::from_bytes(c.name(), c.crash_image(&mut rng))) as DiskRef)
            .collect();
        let jimage = Arc::new(MemDisk::from_bytes("j0", r.jcrash.crash_image(&mut rng))) as DiskRef;
        // Given back (its records were what it had), or missing at the assembly.
        let give = !rng.random_bool(0.25);
        let b = Array::assemble(
            images,
            &AssembleOptions {
                journal_devices: Devices(if give { vec![jimage] } else { vec![] }),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("round {round} {scheme:?}: {e}"));
        for i in 0..blocks {
            let mut got = vec![0u8; BLOCK];
            match b.read((i * BLOCK) as u64, &mut got) {
                Ok(()) => {
                    let ok = got == m.flushed[i] || m.since[i].contains(&got);
                    if !ok && !m.since[i].is_empty() {
                        // A mix of versions inside a block: torn. With the device alive and
                        // given, the journal must prevent it.
                        if !lost && give && scheme != Scheme::None {
                            torn_while_alive += 1;
                        }
                    }
                    assert!(
                        ok || !m.since[i].is_empty(),
                        "round {round} {scheme:?} (device lost {lost}, given {give}): block {i} flushed and never written since reads wrong"
                    );
                }
                // (A chunk written since the last flush may be refused whole after a settle,
                // as without the journal: FORMAT.md §2.4, the crash campaign's rule.)
                Err(e) => assert!(
                    chunk_written(&m, i) && (lost || !give),
                    "round {round} {scheme:?} (device lost {lost}, given {give}): block {i} refused (with the journal device alive nothing may be): {e}"
                ),
            }
        }
        b.close().unwrap();
    }
    eprintln!(
        "{lost_runs} runs lost the journal device, {alive_runs} kept it; {torn_while_alive} torn blocks with it alive"
    );
    assert!(lost_runs > 10 && alive_runs > 10);
    assert_eq!(torn_while_alive, 0);
}
