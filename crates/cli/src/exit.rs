//! The exit status of every command (README, "Exit status").

/// Done; nothing found.
pub const OK: u8 = 0;
/// Done, but something was found: damage repaired, a member out of the array, a stripe
/// inconsistent, a shard damaged.
pub const FOUND: u8 = 1;
/// Bad arguments or input, or an error that is not about the data (a missing file, an
/// array that cannot be assembled).
pub const USAGE: u8 = 2;
/// Data that cannot be returned: an unrecoverable stripe or too many failed members.
pub const UNRECOVERABLE: u8 = 3;
/// Nothing to work on: a workload that yields no request (a file that is not a trace of its
/// format, an empty one, a device or limit that selects nothing).
pub const NOTHING: u8 = 4;
/// `send`/`recv`: the transfer failed as a whole (connection, key, protocol, the
/// receiving directory); 1 means some files failed and the rest landed.
pub const TRANSFER: u8 = 5;

/// The status of a command that ends with a verdict (`status`, `scrub`).
pub fn of(v: stripeguard_ops::Verdict) -> std::process::ExitCode {
    use stripeguard_ops::Verdict;
    std::process::ExitCode::from(match v {
        Verdict::Clean => OK,
        Verdict::Found => FOUND,
        Verdict::Unrecoverable => UNRECOVERABLE,
        // What was shown is not the check that was asked for.
        Verdict::NotChecked => USAGE,
    })
}
