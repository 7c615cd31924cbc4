//! Any bytes as a superblock: reject or accept, never panic; whatever is accepted round-trips.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_format::Superblock;

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock::decode(data) {
        assert!(sb.validate().is_ok());
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb));
    }
});
