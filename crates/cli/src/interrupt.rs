//! Ctrl-C (SIGINT) and SIGTERM for long array commands (`scrub`, `replace`): the first asks
//! the work to stop at its next stripe, so the command saves its position and closes the array
//! clean (the next run resumes; nothing needs a resync); a second ends the process at once, as
//! a second Ctrl-C does elsewhere (the array is then resynced at its next assembly).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Watches for the signals while it lives; `stop` runs on the first.
pub(crate) struct Interrupt {
    handle: Option<signal_hook::iterator::Handle>,
    fired: Arc<AtomicBool>,
}

impl Interrupt {
    /// Run `stop` on the first SIGINT or SIGTERM (on a thread of its own); exit 130 on the second.
    pub(crate) fn on_first(stop: impl Fn() + Send + 'static) -> Interrupt {
        let fired = Arc::new(AtomicBool::new(false));
        let Ok(mut signals) = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ]) else {
            // No handler: the signals keep their default (the array is resynced next time).
            return Interrupt {
                handle: None,
                fired,
            };
        };
        let handle = signals.handle();
        let seen = Arc::clone(&fired);
        std::thread::spawn(move || {
            for _ in signals.forever() {
                if seen.swap(true, Ordering::SeqCst) {
                    eprintln!("stripeguard: interrupted again: stopping at once");
                    std::process::exit(130);
                }
                eprintln!(
                    "stripeguard: interrupted: stopping at the next stripe and closing the array cleanly (interrupt again to stop at once)"
                );
                stop();
            }
        });
        Interrupt {
            handle: Some(handle),
            fired,
        }
    }

    /// Whether a signal came.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.close();
        }
    }
}
