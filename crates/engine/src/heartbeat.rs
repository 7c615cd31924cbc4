//! The holder's heartbeat (FORMAT.md §2.2): while a process holds the array for writing, a
//! thread of its own rewrites the owner record every interval. The record's taking and release
//! are [`crate::owner`]'s; this thread needs only the record, the members and the clock.

use crate::env::{unix_millis, EnvRef};
use crate::members::Members;
use std::sync::{Arc, Condvar};
use std::time::Duration;
pub(crate) use stripeguard_format::owner::OWNER_SLOT_BYTES as SLOT_BYTES;
use stripeguard_format::{Owner, Record};
use stripeguard_integrity::OWNER_RECORD_OFFSET;

/// Milliseconds between heartbeats of a holder.
pub const HEARTBEAT_MS: u32 = 5000;
/// The longest heartbeat interval a reader honours (FORMAT.md §2.2): a record naming a longer
/// one (or none) is judged as if it named this, so no record can make an assembler wait more
/// than two of these.
pub const MAX_HEARTBEAT_MS: u32 = 60_000;

/// One encoded slot of `o`.
pub(crate) fn slot_bytes(o: &Owner) -> Vec<u8> {
    o.to_copy(SLOT_BYTES)
        .expect("an owner record fits its slot")
}

/// The holder's heartbeat: a thread of its own that rewrites the owner record every interval
/// while the array is held, whatever the command does meanwhile (a `read`, a `replace` that
/// runs for hours, a holder whose control socket could not bind). It stops when the array is
/// closed or dropped.
pub(crate) struct Beater {
    stop: Arc<(std::sync::Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Beater {
    pub(crate) fn start(
        ownership: Arc<crate::sync::Mutex<Option<Owner>>>,
        members: Arc<Members>,
        env: EnvRef,
        every: Duration,
    ) -> Beater {
        let stop = Arc::new((std::sync::Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sg-heartbeat".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock().expect("lock");
                loop {
                    stopped = cv
                        .wait_timeout_while(stopped, every, |s| !*s)
                        .expect("lock")
                        .0;
                    if *stopped {
                        return;
                    }
                    let mut mine = ownership.lock().expect("lock");
                    let Some(o) = mine.as_mut() else { return };
                    o.sequence += 1;
                    o.heartbeat_ms = unix_millis(env.as_ref());
                    // A member whose write fails here is left to the holder's own I/O to take
                    // out (this thread cannot update the member table); the others still beat.
                    let _ =
                        members.write_slot(OWNER_RECORD_OFFSET, o.sequence, &slot_bytes(o), true);
                }
            })
            .ok();
        Beater { stop, thread }
    }

    /// Stop the thread and wait for it (at most the beat it is writing).
    pub(crate) fn stop(mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().expect("lock") = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
