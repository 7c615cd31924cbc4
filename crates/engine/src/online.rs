//! The array a holder serves, which an online reshape (reshape.rs) turns into two geometries
//! and back into one without its clients noticing (FORMAT.md §2, "Reshaping the array",
//! docs/RESHAPE.md "Online").
//!
//! [`HeldArray`] is what a holder (`serve`) reads and writes. Most of the time it is one
//! [`Array`]. While a reshape runs it is a [`Router`] over the reshape's two views (view.rs):
//! - a request's bytes are split at the **boundary** between the committed new stripes and
//!   the old ones (chunk `x` at array byte `x·C` in both geometries: the byte address of
//!   the data does not change, only where it lies), each part read or written through the
//!   view that holds it;
//! - the reshape opens a **window** of chunks before it reads a step's chunks (and the
//!   critical section's while its backup is in use), waiting for requests already in it
//!   to end; a request that touches the window waits until the step has committed and
//!   moved the boundary past it. Everything outside the window is served meanwhile;
//! - a FLUSH flushes every member, then the old view's stripe-state record;
//! - the finish takes every request (the stripe-state record and the superblocks become
//!   the new geometry's), and the holder's array is replaced by the new geometry's,
//!   assembled. Requests that waited go on there; a client connected before sees the old
//!   size until it reconnects (NBD has no resize notice).
//!
//! Writes through the views set no write-intent bit: a crash of an online reshape is
//! resumed (`grow --continue`) with a resync of every stripe of both geometries.

use crate::array::Array;
use crate::error::EngineError;
use crate::sync::{Condvar, Mutex, MutexGuard, RwLock};
use crate::view::ViewShared;
use std::ops::Range;
use std::sync::Arc;
use stripeguard_plan::reshape::{Place, Reshape};

/// Zeros written per request where a range is zeroed through a router.
const ZERO_PIECE: usize = 1 << 20;

/// The array a holder serves (see the module comment).
pub struct HeldArray {
    mode: RwLock<Mode>,
}

#[derive(Clone)]
pub(crate) enum Mode {
    Plain(Arc<Array>),
    Reshaping(Arc<Router>),
}

impl HeldArray {
    pub fn new(array: Array) -> HeldArray {
        HeldArray {
            mode: RwLock::new(Mode::Plain(Arc::new(array))),
        }
    }

    /// An array shared with others that never reshape it (the nbdkit plugin's control thread).
    pub fn from_shared(array: Arc<Array>) -> HeldArray {
        HeldArray {
            mode: RwLock::new(Mode::Plain(array)),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replace the mode once every request in flight has ended (`f` runs meanwhile, with no
    /// request running).
    pub(crate) fn switch<T>(
        &self,
        f: impl FnOnce(&Mode) -> Result<(T, Mode), EngineError>,
    ) -> Result<T, EngineError> {
        let mut m = self.mode.write().unwrap_or_else(|p| p.into_inner());
        let (out, next) = f(&m)?;
        *m = next;
        Ok(out)
    }

    /// The array as its control plane sees it: the holder's array, which during a reshape is
    /// the old geometry's view (its health, counters and events).
    pub fn array(&self) -> Arc<Array> {
        match self.mode() {
            Mode::Plain(a) => a,
            Mode::Reshaping(r) => Arc::clone(&r.old),
        }
    }

    /// The array, when no reshape runs (its stripe numbers are then the only ones).
    pub fn plain(&self) -> Option<Arc<Array>> {
        match self.mode() {
            Mode::Plain(a) => Some(a),
            Mode::Reshaping(_) => None,
        }
    }

    /// Whether a reshape runs (or stopped and waits for `grow --continue`).
    pub fn reshaping(&self) -> bool {
        matches!(self.mode(), Mode::Reshaping(_))
    }

    /// Why the reshape stopped, if it did (the holder serves on through both geometries).
    pub fn reshape_stopped(&self) -> Option<String> {
        match self.mode() {
            Mode::Reshaping(r) => r.state().stopped.clone(),
            Mode::Plain(_) => None,
        }
    }

    /// User-visible bytes: during a reshape the old geometry's (what clients may address).
    pub fn capacity_bytes(&self) -> u64 {
        match self.mode() {
            Mode::Plain(a) => a.capacity_bytes(),
            Mode::Reshaping(r) => r.capacity,
        }
    }

    pub fn is_writable(&self) -> bool {
        self.array().is_writable()
    }

    /// Run `plain` on the array, or `routed` through the router (again on the array the
    /// router's finish left, when the request came while it finished).
    fn each<T>(
        &self,
        plain: impl Fn(&Array) -> Result<T, EngineError>,
        routed: impl Fn(&Router) -> Option<Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        loop {
            let m = self.mode.read().unwrap_or_else(|p| p.into_inner());
            let r = match &*m {
                Mode::Plain(a) => return plain(a),
                Mode::Reshaping(r) => match routed(r) {
                    Some(out) => return out,
                    None => Arc::clone(r),
                },
            };
            drop(m);
            r.wait_finished();
        }
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        // Both closures need the buffer (one runs at a time).
        let buf = std::cell::RefCell::new(buf);
        self.each(
            |a| a.read(offset, &mut buf.borrow_mut()),
            |r| r.read(offset, &mut buf.borrow_mut()),
        )
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.each(|a| a.write(offset, data), |r| r.write(offset, data))
    }

    pub fn flush(&self) -> Result<(), EngineError> {
        self.each(Array::flush, Router::flush)
    }

    /// TRIM / WRITE_ZEROES that may leave a hole ([`Array::zero`]); during a reshape the
    /// zeros are written.
    pub fn zero(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        self.each(|a| a.zero(offset, len), |r| r.write_zeros(offset, len))
    }

    /// WRITE_ZEROES that must allocate ([`Array::write_zeros`]).
    pub fn write_zeros(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        self.each(
            |a| a.write_zeros(offset, len),
            |r| r.write_zeros(offset, len),
        )
    }

    /// Stop serving: the array flushed and closed clean, or, while a reshape that stopped is
    /// in progress, flushed and let go (the reshape's superblocks stay: `grow --continue`).
    pub fn close(self) -> Result<(), EngineError> {
        match self.mode.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Mode::Plain(a) => Arc::try_unwrap(a)
                .map_err(|_| EngineError::Config("the array is still in use".into()))?
                .close(),
            Mode::Reshaping(r) => {
                if r.state().finishing {
                    // Broken at the finish: nothing more is written.
                    return r.old.release_ownership();
                }
                let flushed = r.target.flush_members().and_then(|()| r.old.flush());
                r.old.release_ownership()?;
                flushed
            }
        }
    }
}

/// A reshape's two views, and where the boundary and the window between them are.
pub(crate) struct Router {
    /// The holder's array, the old geometry's view.
    pub(crate) old: Arc<Array>,
    /// The new geometry's view.
    pub(crate) target: Arc<Array>,
    pub(crate) shared: Arc<ViewShared>,
    plan: Reshape,
    chunk: u64,
    /// The old geometry's user-visible bytes.
    capacity: u64,
    state: Mutex<RouteState>,
    changed: Condvar,
}

#[derive(Default)]
pub(crate) struct RouteState {
    /// New stripes committed.
    done: u64,
    /// Chunks no request may touch now.
    window: Option<Range<u64>>,
    /// The finish has begun: every request waits for the array the finish leaves.
    pub(crate) finishing: bool,
    /// The router was replaced (by the new geometry's array).
    ended: bool,
    /// The chunks of each request in flight (a FLUSH: none).
    inflight: Vec<Range<u64>>,
    /// Why the reshape stopped (it serves on).
    pub(crate) stopped: Option<String>,
    /// The finish failed: nothing can be served safely.
    broken: Option<String>,
}

/// A request's hold on its chunks while it runs.
struct Ticket<'a> {
    router: &'a Router,
    chunks: Range<u64>,
    done: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut st = self.router.state();
        if let Some(i) = st.inflight.iter().position(|c| *c == self.chunks) {
            st.inflight.swap_remove(i);
        }
        drop(st);
        self.router.changed.notify_all();
    }
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

impl Router {
    pub(crate) fn new(
        old: Arc<Array>,
        target: Arc<Array>,
        shared: Arc<ViewShared>,
        plan: Reshape,
        done: u64,
    ) -> Router {
        let chunk = old.geometry().chunk_bytes;
        let capacity = old.capacity_bytes();
        Router {
            old,
            target,
            shared,
            plan,
            chunk,
            capacity,
            state: Mutex::new(RouteState {
                done,
                ..RouteState::default()
            }),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, RouteState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, st: MutexGuard<'a, RouteState>) -> MutexGuard<'a, RouteState> {
        self.changed.wait(st).unwrap_or_else(|p| p.into_inner())
    }

    /// Hold `chunks` for a request (none for a FLUSH), once outside the window; `None` while
    /// the finish runs (the caller waits for the array it leaves).
    fn enter(&self, chunks: Range<u64>) -> Option<Result<Ticket<'_>, EngineError>> {
        let mut st = self.state();
        loop {
            if let Some(why) = &st.broken {
                return Some(Err(EngineError::Config(why.clone())));
            }
            if st.finishing || st.ended {
                return None;
            }
            if !st.window.as_ref().is_some_and(|w| overlaps(w, &chunks))
                || self.old.sabotaged(crate::env::Sabotage::NoReshapeWindow)
            {
                break;
            }
            st = self.wait(st);
        }
        st.inflight.push(chunks.clone());
        let done = st.done;
        Some(Ok(Ticket {
            router: self,
            chunks,
            done,
        }))
    }

    /// Wait until the finish has ended (the holder's array replaced, or the finish failed).
    fn wait_finished(&self) {
        let mut st = self.state();
        while st.finishing && !st.ended && st.broken.is_none() {
            st = self.wait(st);
        }
    }

    /// The request's bytes `offset..offset + len` cut at the boundary `done` new stripes make:
    /// (in the new geometry, array byte, length), in order.
    fn pieces(&self, offset: u64, len: u64, done: u64) -> Vec<(bool, u64, u64)> {
        let (p, c) = (&self.plan, self.plan.committed(done));
        // Forward the committed stripes are below the boundary, backward above it.
        let (boundary, new_below) = if p.backward {
            (c.start * p.new_k, false)
        } else {
            (c.end * p.new_k, true)
        };
        let at = boundary.saturating_mul(self.chunk);
        let end = offset + len;
        let mut out = Vec::with_capacity(2);
        if offset < at {
            out.push((new_below, offset, end.min(at) - offset));
        }
        if end > at {
            let lo = offset.max(at);
            out.push((!new_below, lo, end - lo));
        }
        out
    }

    fn view(&self, new: bool) -> &Array {
        if new {
            &self.target
        } else {
            &self.old
        }
    }

    fn chunks_of(&self, offset: u64, len: u64) -> Range<u64> {
        offset / self.chunk..(offset + len).div_ceil(self.chunk)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Option<Result<(), EngineError>> {
        if let Err(e) = self.old.check_range(offset, buf.len() as u64) {
            return Some(Err(e));
        }
        let ticket = match self.enter(self.chunks_of(offset, buf.len() as u64))? {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        for (new, at, len) in self.pieces(offset, buf.len() as u64, ticket.done) {
            let lo = crate::num::usize_of(at - offset);
            let hi = lo + crate::num::usize_of(len);
            if let Err(e) = self.view(new).read(at, &mut buf[lo..hi]) {
                return Some(Err(e));
            }
        }
        Some(Ok(()))
    }

    fn refuse_writes(&self) -> Result<(), EngineError> {
        if self.shared.failed() {
            return Err(EngineError::Config(
                "a member failed during the reshape: writes are refused until the holder is stopped, the member is back, and `grow --continue` has finished the reshape (nothing is written that the member would miss)".into(),
            ));
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Option<Result<(), EngineError>> {
        if let Err(e) = self
            .old
            .check_range(offset, data.len() as u64)
            .and_then(|()| self.refuse_writes())
        {
            return Some(Err(e));
        }
        let ticket = match self.enter(self.chunks_of(offset, data.len() as u64))? {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        for (new, at, len) in self.pieces(offset, data.len() as u64, ticket.done) {
            let lo = crate::num::usize_of(at - offset);
            let hi = lo + crate::num::usize_of(len);
            if let Err(e) = self.view(new).write(at, &data[lo..hi]) {
                return Some(Err(e));
            }
        }
        // A member failed by this write missed part of it (see `flush`).
        Some(self.refuse_writes())
    }

    fn flush(&self) -> Option<Result<(), EngineError>> {
        let ticket = match self.enter(0..0)? {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        // Every member's writes durable (the new view's members are all of them), then the
        // old view's stripe-state record (zero stripes written into leave it only now), which
        // until the finish is the durable list of both geometries' untrusted blocks.
        let done = ticket.done;
        // A member that failed on the way is out in memory only (view.rs): what it missed
        // cannot be made durable, so the flush fails (found by the checksum-chunk cuts: the
        // checksum member's flush failed, the array survived it, the flush returned, and the
        // continue took the member's stale table for current).
        Some(
            self.target
                .flush()
                .and_then(|()| {
                    self.carry_take_offs(done);
                    self.old.flush()
                })
                .and_then(|()| self.refuse_writes()),
        )
    }

    /// Blocks listed in the old record that moved listed and were written whole since in the
    /// new geometry come off the old record too (at this flush, after the writes are durable):
    /// a continue after a crash lists again what the old record lists.
    fn carry_take_offs(&self, done: u64) {
        let p = &self.plan;
        let committed = |x: u64| matches!(p.locate(x, done, false), Place::New { .. });
        let gone: Vec<_> = self
            .old
            .untrusted_set()
            .all()
            .into_iter()
            .filter(|e| {
                let x = e.stripe * p.old_k + u64::from(e.position);
                committed(x)
                    && !self
                        .target
                        .untrusted_within(x / p.new_k, x / p.new_k + 1)
                        .iter()
                        .any(|m| {
                            u64::from(m.position) == x % p.new_k
                                && m.offset == e.offset
                                && m.len == e.len
                        })
            })
            .collect();
        self.old.take_off_untrusted(
            &gone,
            "written whole in the new geometry during the reshape",
        );
    }

    fn write_zeros(&self, offset: u64, len: u64) -> Option<Result<(), EngineError>> {
        let zeros = vec![0u8; ZERO_PIECE];
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(ZERO_PIECE as u64);
            match self.write(at, &zeros[..crate::num::usize_of(n)])? {
                Ok(()) => at += n,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(()))
    }

    // The reshape's side.

    /// No request may touch `chunks` from now until [`Router::advance`]; returns once those
    /// in flight there have ended.
    pub(crate) fn open_window(&self, chunks: Range<u64>) {
        let mut st = self.state();
        st.window = Some(chunks.clone());
        while st.inflight.iter().any(|c| overlaps(c, &chunks)) {
            st = self.wait(st);
        }
    }

    /// `done` new stripes are committed: the boundary moves, the window closes (to `keep`).
    pub(crate) fn advance(&self, done: u64, keep: Option<Range<u64>>) {
        let mut st = self.state();
        st.done = done;
        st.window = keep;
        drop(st);
        self.changed.notify_all();
    }

    /// Whether a window is open.
    pub(crate) fn window_held(&self) -> bool {
        self.state().window.is_some()
    }

    /// The finish begins: returns once no request runs, and every new one waits for it.
    pub(crate) fn begin_finish(&self) {
        let mut st = self.state();
        st.finishing = true;
        st.window = None;
        while !st.inflight.is_empty() {
            st = self.wait(st);
        }
    }

    /// The reshape stopped before its finish (`why`): requests go on through both views.
    pub(crate) fn stop(&self, why: String) {
        let mut st = self.state();
        st.window = None;
        if st.finishing {
            st.broken = Some(format!(
                "the reshape failed at its finish ({why}): stop the holder and run `grow --continue`"
            ));
        }
        st.stopped = Some(why);
        drop(st);
        self.changed.notify_all();
    }

    /// The holder's array is the new geometry's now: waiting requests go there.
    pub(crate) fn end(&self) {
        self.state().ended = true;
        self.changed.notify_all();
    }
}
