//! Any bytes as a shard header: rejected, or valid (FORMAT.md §1) and round-tripping; never a
//! panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_shard::format::{stripes_for, Header, HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = Header::decode(data) {
        assert!(h.k >= 1 && h.m >= 1 && h.k as u32 + h.m as u32 <= 255 && h.index < h.k + h.m);
        assert_eq!(
            Some(h.stripes),
            stripes_for(h.file_bytes, h.k as u64 * h.block_bytes as u64)
        );
        let len = h
            .stripes
            .checked_mul(h.record_bytes())
            .and_then(|r| r.checked_add(HEADER_BYTES as u64));
        assert_eq!(len, Some(h.file_len()));
        let again = h.encode();
        assert!(again[..13] == data[..13] && again[14..60] == data[14..60]);
        let back = Header::decode(&again).expect("re-encoded header decodes");
        assert!(h.file_name.starts_with(&back.file_name));
    }
});
