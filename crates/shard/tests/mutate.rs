//! Mutation harness for the shard header decoder (stable toolchain). Headers are built from
//! fields at their edges (0, 1, the limits, the largest values, anything), usually with `stripes`
//! recomputed so the consistency check passes and what lies behind it is reached, then bytes are
//! overwritten, flipped or cut, and the CRC is recomputed (or not).
//!
//! Properties: decoding never panics; an accepted header obeys FORMAT.md §1 (limits, `stripes`,
//! a shard file length that fits in 64 bits) and round-trips: re-encoded, every field byte is the
//! input's and it decodes to itself.
//!
//! Bounded: `PROPTEST_CASES` cases (default 2000, well under a second); `scripts/test` runs more.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use proptest::prelude::*;
use stripeguard_checksum::crc32c;
use stripeguard_shard::format::{stripes_for, Header, HEADER_BYTES, MAX_BLOCK_BYTES};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000)
}

fn edge_u16() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(0u16),
        Just(1),
        Just(2),
        Just(127),
        Just(128),
        Just(254),
        Just(255),
        Just(256),
        Just(u16::MAX),
        any::<u16>()
    ]
}

fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(63),
        Just(64),
        Just(65),
        Just(4096),
        Just(MAX_BLOCK_BYTES),
        Just(MAX_BLOCK_BYTES + 64),
        Just(u32::MAX - 63),
        any::<u32>()
    ]
}

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(1_000_000),
        Just(u64::MAX / 68),
        Just(u64::MAX / 2),
        Just(u64::MAX - 1),
        Just(u64::MAX),
        any::<u64>()
    ]
}

fn header() -> impl Strategy<Value = (Header, bool)> {
    (
        (edge_u16(), edge_u16(), edge_u16(), edge_u32()),
        (edge_u64(), edge_u64(), any::<[u8; 16]>(), any::<u32>()),
        prop_oneof![
            Just(String::new()),
            Just("photo.raw".to_string()),
            "\\PC{0,30}"
        ],
        // Most headers get the stripes their fields imply, so validation goes past that check.
        prop::bool::weighted(0.8),
    )
        .prop_map(
            |(
                (k, m, index, block_bytes),
                (file_bytes, stripes, set_id, payload_crc),
                name,
                fix,
            )| {
                let stripes = match stripes_for(file_bytes, k as u64 * block_bytes as u64) {
                    Some(s) if fix => s,
                    _ => stripes,
                };
                let h = Header {
                    k,
                    m,
                    index,
                    block_bytes,
                    file_bytes,
                    set_id,
                    stripes,
                    payload_crc,
                    file_name: name,
                };
                (h, fix)
            },
        )
}

/// One change to the encoded bytes.
#[derive(Clone, Debug)]
enum Edit {
    /// Overwrite 1, 2, 4 or 8 bytes at an offset with a value (the fixed fields, reserved bytes,
    /// the name — including bytes that are not UTF-8).
    Put(usize, usize, u64),
    /// XOR one byte.
    Flip(usize, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (
            0usize..124,
            prop::sample::select(vec![1usize, 2, 4, 8]),
            edge_u64()
        )
            .prop_map(|(at, w, v)| Edit::Put(at.min(124 - w), w, v)),
        (0usize..HEADER_BYTES, 1u8..=255).prop_map(|(at, x)| Edit::Flip(at, x)),
    ]
}

/// Bytes `decode` reads as fields: all but the reserved ones and the CRC (the name is compared
/// separately: it is cut at its first NUL and read lossily).
fn field_bytes() -> impl Iterator<Item = usize> {
    (0..13).chain(14..60)
}

fn check(b: &[u8]) -> Result<(), TestCaseError> {
    let Some(got) = Header::decode(b) else {
        return Ok(());
    };
    let (k, m) = (got.k as u64, got.m as u64);
    prop_assert!(b.len() >= HEADER_BYTES);
    prop_assert!(k >= 1 && m >= 1 && k + m <= 255 && (got.index as u64) < k + m);
    prop_assert!(got.block_bytes >= 64 && got.block_bytes % 64 == 0);
    prop_assert!(got.block_bytes <= MAX_BLOCK_BYTES);
    prop_assert_eq!(
        Some(got.stripes),
        stripes_for(got.file_bytes, k * got.block_bytes as u64)
    );
    let len = got
        .stripes
        .checked_mul(got.record_bytes())
        .and_then(|r| r.checked_add(HEADER_BYTES as u64));
    prop_assert_eq!(len, Some(got.file_len()), "the file length overflows");
    let again = got.encode();
    for i in field_bytes() {
        prop_assert_eq!(again[i], b[i], "byte {} does not round-trip", i);
    }
    let back = Header::decode(&again);
    prop_assert!(
        back.is_some(),
        "a decoded header re-encodes to an invalid one"
    );
    let back = back.unwrap();
    prop_assert!(got.file_name.starts_with(&back.file_name));
    let name_ok = std::str::from_utf8(&b[64..120]).is_ok();
    if name_ok {
        prop_assert_eq!(back, got);
    } else {
        // A name that is not UTF-8 is read lossily; the rest is exact.
        prop_assert_eq!(
            back.clone(),
            Header {
                file_name: back.file_name.clone(),
                ..got
            }
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Headers built from edge values and written by the encoder: what the decoder accepts is a
    /// valid header (the overflow of `file_len` was found this way).
    #[test]
    fn built_headers_are_rejected_or_valid((h, _fixed) in header()) {
        check(&h.encode())?;
    }

    /// A valid or nearly valid header, bytes changed, re-checksummed (mostly) and maybe cut.
    #[test]
    fn mutated_shard_headers_are_rejected_or_round_trip(
        (h, _fixed) in header(),
        edits in prop::collection::vec(edit(), 1..5),
        recrc in prop::bool::weighted(0.9),
        cut in prop::option::weighted(0.1, 0usize..HEADER_BYTES),
        tail in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut b = h.encode().to_vec();
        for e in edits {
            match e {
                Edit::Put(at, w, v) => b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]),
                Edit::Flip(at, x) => b[at] ^= x,
            }
        }
        if recrc {
            let crc = crc32c(&b[..124]);
            b[124..128].copy_from_slice(&crc.to_le_bytes());
        }
        // What follows the header in a shard file is not the decoder's business.
        b.extend_from_slice(&tail);
        if let Some(c) = cut {
            b.truncate(c);
        }
        check(&b)?;
    }

    /// The encoder's own valid headers always decode to themselves.
    #[test]
    fn valid_headers_round_trip(
        k in 1u16..=254,
        m_frac in 0.0f64..1.0,
        index_frac in 0.0f64..1.0,
        blocks in 1u32..=(MAX_BLOCK_BYTES / 64),
        file_bytes in edge_u64(),
        name in "[a-z0-9._-]{0,56}",
    ) {
        let m = 1 + ((255 - k - 1) as f64 * m_frac) as u16;
        let index = ((k + m - 1) as f64 * index_frac) as u16;
        let block_bytes = blocks * 64;
        let stripes = stripes_for(file_bytes, k as u64 * block_bytes as u64).unwrap();
        let fits = stripes
            .checked_mul(block_bytes as u64 + 4)
            .and_then(|r| r.checked_add(HEADER_BYTES as u64))
            .is_some();
        let h = Header { k, m, index, block_bytes, file_bytes, set_id: [1; 16], stripes, payload_crc: 9, file_name: name };
        let got = Header::decode(&h.encode());
        if fits {
            prop_assert_eq!(got, Some(h));
        } else {
            prop_assert_eq!(got, None);
        }
    }
}
