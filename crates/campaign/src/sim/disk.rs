//! The simulator's member disk: a scheduling point before every I/O, a member that can leave
//! (every I/O fails) and come back with what it held, and the power switch — at a chosen I/O of
//! the whole array, before that I/O lands, every member's crash image is taken (its durable
//! bytes plus a random subset of its unflushed writes, some torn) and the run is halted.
//!
//! Stack: `SimDisk` → `FaultyDisk` (silent faults) → `CrashDisk` (what is durable).

use super::sched::{Halt, Halted, Sched};
use rand::SeedableRng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use stripeguard_disk::{CrashDisk, Disk, DiskError, DiskRef};

/// The power of one array's members: counts their I/Os and cuts at a chosen one.
pub struct Power {
    sched: Arc<Sched>,
    crash: Mutex<Vec<Arc<CrashDisk>>>,
    ios: AtomicU64,
    cut_at: AtomicU64,
    seed: u64,
    images: Mutex<Option<Vec<Vec<u8>>>>,
}

impl Power {
    /// The power of `crash` (every member's durable layer), scheduled by `sched`; crash images
    /// drawn from `seed`.
    pub fn new(sched: Arc<Sched>, crash: Vec<Arc<CrashDisk>>, seed: u64) -> Arc<Power> {
        Arc::new(Power {
            sched,
            crash: Mutex::new(crash),
            ios: AtomicU64::new(0),
            cut_at: AtomicU64::new(u64::MAX),
            seed,
            images: Mutex::new(None),
        })
    }

    /// Cut the power before I/O number `n` from now (`None`: never).
    pub fn arm(&self, n: Option<u64>) {
        let now = self.ios.load(Ordering::Relaxed);
        self.cut_at
            .store(n.map_or(u64::MAX, |n| now + n), Ordering::Relaxed);
    }

    /// Member I/Os so far.
    pub fn ios(&self) -> u64 {
        self.ios.load(Ordering::Relaxed)
    }

    /// Take every member's crash image now (the cut), once.
    pub fn cut_now(&self) {
        let mut images = self.images.lock().unwrap_or_else(PoisonError::into_inner);
        if images.is_none() {
            let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ self.ios());
            let crash = self.crash.lock().unwrap_or_else(PoisonError::into_inner);
            *images = Some(crash.iter().map(|d| d.crash_image(&mut rng)).collect());
        }
    }

    /// Member `i`'s durable layer is now `crash` (it was replaced).
    pub fn adopt(&self, i: usize, crash: Arc<CrashDisk>) {
        self.crash.lock().unwrap_or_else(PoisonError::into_inner)[i] = crash;
    }

    /// A member joins (a reshape adds it): its durable layer is cut with the others'.
    pub fn add(&self, crash: Arc<CrashDisk>) {
        self.crash
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(crash);
    }

    /// The images of the cut, if it happened.
    pub fn take_images(&self) -> Option<Vec<Vec<u8>>> {
        self.images
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn tick(&self) {
        stripeguard_engine::sync::step();
        let n = self.ios.fetch_add(1, Ordering::Relaxed);
        if n == self.cut_at.load(Ordering::Relaxed) && !std::thread::panicking() {
            self.cut_now();
            self.sched.halt(Halt::PowerCut);
            std::panic::panic_any(Halted);
        }
    }
}

/// One member as the simulated array sees it.
pub struct SimDisk {
    inner: DiskRef,
    out: AtomicBool,
    power: Arc<Power>,
}

impl SimDisk {
    /// `inner` under `power`.
    pub fn new(inner: DiskRef, power: Arc<Power>) -> SimDisk {
        SimDisk {
            inner,
            out: AtomicBool::new(false),
            power,
        }
    }

    /// The member leaves (`true`: every I/O fails) or comes back with what it held.
    pub fn set_out(&self, out: bool) {
        self.out.store(out, Ordering::Relaxed);
    }

    /// Whether the member is out.
    pub fn is_out(&self) -> bool {
        self.out.load(Ordering::Relaxed)
    }

    fn enter(&self) -> Result<(), DiskError> {
        self.power.tick();
        if self.is_out() {
            return Err(DiskError::Failed {
                name: self.inner.name().to_string(),
                why: "member out (simulated)".into(),
            });
        }
        Ok(())
    }
}

impl Disk for SimDisk {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.enter()?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.enter()?;
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.enter()?;
        self.inner.flush()
    }
}
