//! Any bytes as one copy of a `JournalDeviceLabel` (stripeguard-format): rejected or accepted,
//! never a panic; whatever is accepted round-trips (the same promise the mutation harness
//! checks on stable).
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_format::{check_round_trip, JournalDeviceLabel};

fuzz_target!(|data: &[u8]| {
    if let Err(e) = check_round_trip::<JournalDeviceLabel>(data) {
        panic!("{e}");
    }
});
