//! SIGPIPE, decided per command. By default a closed stdout (`stripeguard ... | head`) ends a
//! command as it ends `cat`: killed by SIGPIPE, no message. A command that must see a closed
//! pipe as an error instead ignores it: the transfer (its pipes and socket end in errors), the
//! server (a client that goes must not kill it), and `read` (it holds the array, which it closes
//! cleanly before it dies of the closed pipe).

/// Let a write to a closed pipe kill the process (the default `main` sets first).
pub fn default() {
    // SAFETY: setting a signal's disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Make a write to a closed pipe fail with EPIPE instead.
pub fn ignore() {
    // SAFETY: setting a signal's disposition; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// End the process as a closed pipe ends `cat` (killed by SIGPIPE), once whatever it held is
/// released.
pub fn die() -> ! {
    default();
    // SAFETY: raising a signal whose disposition is the default: the process ends here.
    unsafe {
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(141)
}
