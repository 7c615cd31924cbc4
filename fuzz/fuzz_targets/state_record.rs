//! Any bytes as a stripe-state record copy (FORMAT.md §2.7): reject or accept, never panic;
//! whatever is accepted round-trips.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_format::StateRecord;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(r)) = StateRecord::decode(data) {
        let again = r.encode(data.len()).expect("an accepted record fits its copy");
        assert_eq!(StateRecord::decode(&again), Ok(Some(r)));
    }
});
