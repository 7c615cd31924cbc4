//! Any bytes as a shard header: rejected or consistent, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_shard::format::Header;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = Header::decode(data) {
        assert!(h.k >= 1 && h.m >= 1 && h.index < h.k + h.m);
        assert!(Header::decode(&h.encode()).is_some());
    }
});
