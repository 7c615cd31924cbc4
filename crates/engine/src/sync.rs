//! The engine's locks: the standard library's, with one seam for a deterministic scheduler.
//!
//! Every lock in the engine is a [`Mutex`] or [`RwLock`] from this module, every condition
//! variable a [`Condvar`]. Outside a
//! simulation they are `std::sync`'s with nothing added on the uncontended path (`try_lock`
//! first, then the blocking `lock`), plus one thread-local read per acquisition and release.
//!
//! Inside a simulation (the campaign crate's seeded simulator) each logical client is a thread
//! that has [`enter`]ed a [`Scheduler`], which lets exactly one such thread run at a time and
//! chooses, from its seed, which one runs next. The engine tells it where another thread may
//! run: before every lock is taken ([`step`]; member disks call it too, before every I/O), when
//! a lock is busy ([`Scheduler::blocked`]: the thread is parked until the scheduler lets it
//! retry, instead of blocking the one running thread in the kernel), and when a lock is
//! released ([`Scheduler::released`]: blocked threads may retry). That is what makes a run with
//! many concurrent requests replay byte for byte from its seed, and what lets the simulator
//! see a deadlock (every live thread blocked) instead of hanging.
//!
//! Poisoning is kept as `std` has it: `lock()` returns a `LockResult` whose error holds this
//! module's guard, so `expect("lock")` and `unwrap_or_else(PoisonError::into_inner)` read as
//! they do with `std`.

use std::cell::RefCell;
use std::sync::{Arc, LockResult, PoisonError, TryLockError};

/// A deterministic scheduler of logical threads (implemented by the simulator).
pub trait Scheduler: Send + Sync {
    /// Another thread may run here; returns when this one runs again.
    fn step(&self);
    /// The lock this thread wants is held by another: run others; returns when this thread may
    /// try again (a lock was released since), or never if every thread is blocked (the
    /// scheduler reports the deadlock and unwinds the threads).
    fn blocked(&self);
    /// A lock was released: threads blocked on one may try again.
    fn released(&self);
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Scheduler>>> = const { RefCell::new(None) };
}

/// Run this thread under `scheduler` until the returned guard is dropped.
pub fn enter(scheduler: Arc<dyn Scheduler>) -> Entered {
    CURRENT.with(|c| *c.borrow_mut() = Some(scheduler));
    Entered(())
}

/// This thread runs under a scheduler while it lives.
pub struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

fn with_scheduler(f: impl FnOnce(&dyn Scheduler)) {
    // Clone out of the cell so the scheduler may park this thread without the cell borrowed.
    let s = CURRENT.with(|c| c.borrow().clone());
    if let Some(s) = s {
        f(s.as_ref());
    }
}

/// Whether this thread runs under a scheduler.
fn scheduled() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// A point where another logical thread may run (nothing outside a simulation).
pub fn step() {
    with_scheduler(|s| s.step());
}

/// `std::sync::Mutex` with the scheduler's seam.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

/// The guard of a [`Mutex`].
pub struct MutexGuard<'a, T: ?Sized> {
    /// Always `Some` but inside [`Condvar::wait`], which hands it to `std`'s condvar.
    inner: Option<std::sync::MutexGuard<'a, T>>,
    lock: &'a Mutex<T>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex(std::sync::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Take the lock (a step first, under a scheduler).
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        acquire(
            || self.0.try_lock(),
            || self.0.lock(),
            |inner| MutexGuard {
                inner: Some(inner),
                lock: self,
            },
        )
    }
}

impl<T: ?Sized> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner.as_ref().expect("a guard holds its lock")
    }
}

impl<T: ?Sized> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.as_mut().expect("a guard holds its lock")
    }
}

/// `std::sync::Condvar` with the scheduler's seam: under a scheduler a wait lets the lock go,
/// is [`Scheduler::blocked`] until some lock is released (a notify counts as one), and takes
/// the lock again; callers wait in a loop on their condition, as with `std` (a wake may be
/// spurious).
#[derive(Debug, Default)]
pub struct Condvar(std::sync::Condvar);

impl Condvar {
    pub const fn new() -> Condvar {
        Condvar(std::sync::Condvar::new())
    }

    /// Let `guard`'s lock go until notified (or, under a scheduler, until a lock is released),
    /// then take it again.
    pub fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        let lock = guard.lock;
        if scheduled() {
            drop(guard);
            with_scheduler(|s| s.blocked());
            return lock.lock();
        }
        let inner = guard.inner.take().expect("a guard holds its lock");
        drop(guard);
        let wrap = |inner| MutexGuard {
            inner: Some(inner),
            lock,
        };
        self.0
            .wait(inner)
            .map(wrap)
            .map_err(|p| PoisonError::new(wrap(p.into_inner())))
    }

    /// Wake every waiter.
    pub fn notify_all(&self) {
        self.0.notify_all();
        with_scheduler(|s| s.released());
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // The lock itself is released just after this (when `inner` drops), before this
        // thread can be switched out: the next step is after it.
        with_scheduler(|s| s.released());
    }
}

/// `std::sync::RwLock` with the scheduler's seam.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

/// A shared guard of an [`RwLock`].
pub struct RwLockReadGuard<'a, T: ?Sized> {
    inner: std::sync::RwLockReadGuard<'a, T>,
}

/// The exclusive guard of an [`RwLock`].
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    inner: std::sync::RwLockWriteGuard<'a, T>,
}

impl<T> RwLock<T> {
    /// A lock holding `value`.
    pub const fn new(value: T) -> RwLock<T> {
        RwLock(std::sync::RwLock::new(value))
    }

    /// The value, the lock consumed.
    pub fn into_inner(self) -> LockResult<T> {
        self.0.into_inner()
    }
}

/// Take a lock through `try_take` (cooperatively under a scheduler) or `take` (blocking).
fn acquire<G, W>(
    try_take: impl Fn() -> Result<G, TryLockError<G>>,
    take: impl FnOnce() -> LockResult<G>,
    wrap: impl Fn(G) -> W,
) -> LockResult<W> {
    if scheduled() {
        step();
        loop {
            match try_take() {
                Ok(g) => return Ok(wrap(g)),
                Err(TryLockError::Poisoned(p)) => {
                    return Err(PoisonError::new(wrap(p.into_inner())))
                }
                Err(TryLockError::WouldBlock) => with_scheduler(|s| s.blocked()),
            }
        }
    }
    take()
        .map(&wrap)
        .map_err(|p| PoisonError::new(wrap(p.into_inner())))
}

impl<T: ?Sized> RwLock<T> {
    /// Take the lock shared.
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        acquire(
            || self.0.try_read(),
            || self.0.read(),
            |inner| RwLockReadGuard { inner },
        )
    }

    /// Take the lock exclusively.
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        acquire(
            || self.0.try_write(),
            || self.0.write(),
            |inner| RwLockWriteGuard { inner },
        )
    }
}

impl<T: ?Sized> std::ops::Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        with_scheduler(|s| s.released());
    }
}

impl<T: ?Sized> std::ops::Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> std::ops::DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        with_scheduler(|s| s.released());
    }
}
