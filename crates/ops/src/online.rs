//! A scrub (or check) run by the process holding an array, asked over its control socket
//! (FORMAT.md §3: `scrub [--check-only ][--restart ][--rate B ]`): the holder scrubs on a thread
//! of its own while it goes on serving — every stripe under its lock as a write takes it, so
//! client I/O interleaves stripe by stripe, at most `--rate` bytes of member reads a second —
//! and reports progress and the outcome in its `status` replies. A holder that stops cancels
//! it at the next stripe with its position saved; the next scrub resumes there.

use crate::LiveStatus;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use stripeguard_engine::{scrub, Array, ScrubOptions};

/// A scrub run by the holder of the array.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LiveScrub {
    /// Repair nothing (an online check).
    pub check_only: bool,
    pub running: bool,
    /// Stripes done and in all.
    pub done: u64,
    pub total: u64,
    /// When finished: what it found, or why it failed.
    pub outcome: Option<String>,
    /// Finished without an error.
    pub ok: bool,
    /// Units found wrong, repaired, stripes unrecoverable, stripes whose parity disagrees.
    pub found: u64,
    pub repaired: u64,
    pub unrecoverable: u64,
    pub mismatches: u64,
}

/// The holder's running scrub and the flag that cancels it.
#[derive(Default)]
pub(crate) struct ScrubSlot {
    pub(crate) state: Mutex<Option<LiveScrub>>,
    pub(crate) cancel: Arc<AtomicBool>,
}

impl ScrubSlot {
    pub(crate) fn running(&self) -> bool {
        self.state
            .lock()
            .expect("lock")
            .as_ref()
            .is_some_and(|s| s.running)
    }
}

/// `scrub [--check-only ][--restart ][--rate B ]`: check it and start the scrub on a thread of
/// the holder's scope.
pub(crate) fn start_scrub<'scope>(
    array: &'scope Array,
    req: &str,
    slot: &'scope ScrubSlot,
    replace_running: bool,
    scope: &'scope std::thread::Scope<'scope, '_>,
) -> Result<(), String> {
    let mut opts = ScrubOptions {
        cancel: Some(Arc::clone(&slot.cancel)),
        ..ScrubOptions::default()
    };
    let mut words = req.split(' ').skip(1);
    while let Some(w) = words.next() {
        match w {
            "--check-only" => opts.check_only = true,
            "--restart" => opts.restart = true,
            "--rate" => {
                let r = words
                    .next()
                    .and_then(|r| r.parse::<u64>().ok())
                    .filter(|&r| r > 0)
                    .ok_or("scrub --rate B: B must be a positive number of bytes a second")?;
                opts.rate_bytes_per_second = Some(r);
            }
            "" => {}
            other => return Err(format!("scrub: unknown word {other:?}")),
        }
    }
    if !opts.check_only && !array.is_writable() {
        return Err(
            "this holder has the array read-only: only `scrub --check-only` can run".into(),
        );
    }
    if slot.running() {
        return Err("a scrub is already running in this holder".into());
    }
    if replace_running {
        return Err(
            "a replace is running in this holder; a scrub or check can run when it has finished"
                .into(),
        );
    }
    let check_only = opts.check_only;
    *slot.state.lock().expect("lock") = Some(LiveScrub {
        check_only,
        running: true,
        ..LiveScrub::default()
    });
    slot.cancel
        .store(false, std::sync::atomic::Ordering::Relaxed);
    scope.spawn(move || {
        let before = array.counters();
        let result = scrub(array, &opts, &mut |done, total| {
            if let Some(s) = slot.state.lock().expect("lock").as_mut() {
                s.done = done;
                s.total = total;
            }
        });
        let c = array.counters();
        let mut st = slot.state.lock().expect("lock");
        let s = st.as_mut().expect("set above");
        s.running = false;
        s.found = c.located - before.located;
        s.repaired = if check_only {
            0
        } else {
            c.repaired - before.repaired
        };
        s.mismatches = c.mismatches - before.mismatches;
        match result {
            Ok(sum) => {
                s.ok = true;
                s.unrecoverable = sum.unrecoverable.len() as u64;
                s.outcome = Some(match sum.interrupted_at {
                    Some(at) => format!(
                        "{} interrupted at stripe {at} of {} (the holder is stopping); run it again to resume",
                        if check_only { "check" } else { "scrub" },
                        sum.stripes
                    ),
                    None => format!(
                        "{} {} stripes while serving: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s){}{}",
                        if check_only { "checked" } else { "scrubbed" },
                        sum.stripes - sum.resumed_at,
                        s.found,
                        s.repaired,
                        s.unrecoverable,
                        if s.mismatches > 0 {
                            format!(", {} stripe(s) whose parity disagrees with the data", s.mismatches)
                        } else {
                            String::new()
                        },
                        sum.unrecoverable
                            .iter()
                            .map(|u| format!("\n  {u}"))
                            .collect::<String>()
                    ),
                });
                if sum.interrupted_at.is_some() {
                    s.ok = false;
                }
            }
            Err(e) => s.outcome = Some(e.to_string()),
        }
    });
    Ok(())
}

/// Ask the process holding array `uuid` to scrub it (`check_only`: check it) while it serves;
/// progress and the outcome come with its `status` ([`LiveStatus::scrub`]).
pub fn ask_holder_scrub(
    uuid: &[u8; 16],
    check_only: bool,
    restart: bool,
    rate_bytes_per_second: Option<u64>,
) -> Result<(), String> {
    let mut req = String::from("scrub");
    if check_only {
        req.push_str(" --check-only");
    }
    if restart {
        req.push_str(" --restart");
    }
    if let Some(r) = rate_bytes_per_second {
        req.push_str(&format!(" --rate {r}"));
    }
    crate::ask_holder_to(uuid, &req)
}

/// Follow the holder's scrub until it finishes, `progress(done, total)` as it goes; its last
/// state.
pub fn follow_holder_scrub(
    uuid: &[u8; 16],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(LiveScrub, LiveStatus), String> {
    follow_holder(
        uuid,
        (
            "scrub",
            "it scrubbed",
            "; a holder that stops saves the scrub's position, and the next scrub resumes there",
        ),
        |l| l.scrub.clone().map(|s| ((s.done, s.total, s.running), s)),
        progress,
    )
}

/// Poll the holder of array `uuid` every 200 ms until the operation `pick` finds in its status
/// (`(done, total, running)` and the operation's state) has stopped running; `progress(done,
/// total)` as it goes. `(what, while_doing, then)` name the operation for the errors: the
/// holder reports none, or stopped answering while doing it (`then`: what to do about that).
pub(crate) fn follow_holder<T>(
    uuid: &[u8; 16],
    (what, while_doing, then): (&str, &str, &str),
    pick: impl Fn(&LiveStatus) -> Option<((u64, u64, bool), T)>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(T, LiveStatus), String> {
    let mut misses = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let live = match crate::ask_holder(uuid) {
            Ok(live) => live,
            // Its control socket is bound again when its array is replaced (a reshape's
            // end): a few misses in a row are not a stop.
            Err(_) if misses < 25 => {
                misses += 1;
                continue;
            }
            Err(e) => {
                return Err(format!(
                    "the holder stopped (or stopped answering) while {while_doing} ({e}){then}"
                ))
            }
        };
        misses = 0;
        let Some(((done, total, running), state)) = pick(&live) else {
            return Err(format!("the holder reports no {what}"));
        };
        progress(done, total.max(1));
        if !running {
            return Ok((state, live));
        }
    }
}
