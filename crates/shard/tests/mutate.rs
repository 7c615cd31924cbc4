//! Mutation harness for the shard header decoder (stable toolchain): fields of a valid header
//! changed (boundary values, counts, lengths) and re-checksummed, so validation is reached.
//! No panic; an accepted header is consistent and re-encodes to itself.

use proptest::prelude::*;
use stripeguard_checksum::crc32c;
use stripeguard_shard::format::{Header, HEADER_BYTES};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000)
}

fn value(kind: u8, width: usize, raw: u64) -> u64 {
    let max = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    match kind % 6 {
        0 => 0,
        1 => max,
        2 => 1,
        3 => 64,
        4 => raw % 300,
        _ => raw & max,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_shard_headers_are_rejected_or_consistent(
        edits in prop::collection::vec(
            (0usize..124, prop::sample::select(vec![1usize, 2, 4, 8]), any::<u8>(), any::<u64>()),
            1..5,
        ),
        truncate in prop::option::of(0usize..HEADER_BYTES),
    ) {
        let h = Header {
            k: 10,
            m: 4,
            index: 3,
            block_bytes: 4096,
            file_bytes: 1_000_000,
            set_id: [7; 16],
            stripes: 25,
            payload_crc: 0xabcd,
            file_name: "photo.raw".into(),
        };
        let mut b = h.encode().to_vec();
        for (at, width, kind, raw) in edits {
            let at = if kind & 0x80 != 0 { at % 64 } else { at }.min(124 - width);
            b[at..at + width].copy_from_slice(&value(kind, width, raw).to_le_bytes()[..width]);
        }
        let crc = crc32c(&b[..124]);
        b[124..128].copy_from_slice(&crc.to_le_bytes());
        if let Some(t) = truncate {
            b.truncate(t);
        }
        if let Some(got) = Header::decode(&b) {
            prop_assert!(got.k >= 1 && got.m >= 1 && got.index < got.k + got.m);
            prop_assert!(got.file_len() >= HEADER_BYTES as u64);
            let again = Header::decode(&got.encode());
            prop_assert_eq!(again.map(|x| (x.k, x.m, x.index, x.stripes)), Some((got.k, got.m, got.index, got.stripes)));
        }
    }
}
