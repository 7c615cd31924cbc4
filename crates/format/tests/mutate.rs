//! Mutation tests of the on-disk decoders (a stable-toolchain fuzz harness): start from valid
//! superblocks, appendices and stripe-state records, change fields (random bytes, boundary values, lengths, counts),
//! **re-checksum** so the decoder gets past its CRC into validation and field parsing, and
//! require: no panic; whatever is accepted validates and encodes back to a record that decodes
//! to the same value. Bounded: `PROPTEST_CASES` (default 2000 per property) sets the run.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::{cases, value};
use proptest::prelude::*;
use stripeguard_checksum::crc32c;
use stripeguard_format::{
    Appendix, ArrayState, CodeId, CrossCheck, Identity, MemberSlot, MemberState, MetadataLayout,
    Role, Scheme, StateRecord, Superblock, UntrustedRange, ZeroRange, SUPERBLOCK_BYTES,
};

fn superblock(members: u16, parity: u16, scheme: Scheme) -> Superblock {
    let layout = MetadataLayout::for_member(1 << 30);
    Superblock {
        name: "mutant-1".into(),
        array_uuid: [3; 16],
        member_index: members - 1,
        members,
        data_chunks: members - parity,
        parity_chunks: parity,
        code: CodeId::for_parity(parity as usize),
        scheme,
        sector_shift: 12,
        state: ArrayState::Clean,
        chunk_bytes: 65536,
        data_offset_bytes: layout.data_offset(),
        stripes: 12345,
        sequence_high_water: 1 << 20,
        generation: 9,
        created_unix_seconds: 1_800_000_000,
        cross_check: CrossCheck::All,
        layout,
        journal_slots: stripeguard_format::JOURNAL_SLOTS,
        write_journal: false,
        untrusted_listed: false,
        zero_stripes: false,
        spares: vec![stripeguard_format::SpareEntry {
            uuid: [8; 16],
            device_bytes: 1 << 30,
            hint: "/srv/spare0".into(),
        }],
        spare_policy: Some(stripeguard_format::SparePolicy {
            delay_seconds: 5,
            error_threshold: 3,
        }),
        journal_devices: Vec::new(),
        journal_devices_lost: 0,
        reshape: None,
        member_table: (0..members)
            .map(|i| MemberSlot {
                state: if i % 3 == 1 {
                    MemberState::Missing
                } else {
                    MemberState::Active
                },
                device: i * 3,
                last_event: 9 - (i % 3 == 1) as u64,
            })
            .collect(),
    }
}

fn poke(b: &mut [u8], at: usize, width: usize, v: u64) {
    let at = at.min(b.len() - width);
    b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

fn reseal_superblock(b: &mut [u8]) {
    let crc = crc32c(&b[..SUPERBLOCK_BYTES - 4]);
    b[SUPERBLOCK_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_superblocks_are_rejected_or_consistent(
        shape in prop::sample::select(vec![(2u16, 1u16), (8, 2), (20, 4), (255, 3)]),
        scheme in prop::sample::select(Scheme::ALL.to_vec()),
        edits in prop::collection::vec(
            (0usize..SUPERBLOCK_BYTES - 4, prop::sample::select(vec![1usize, 2, 4, 8]), any::<u8>(), any::<u64>()),
            1..6,
        ),
        truncate in prop::option::of(0usize..SUPERBLOCK_BYTES),
    ) {
        let mut sb = superblock(shape.0, shape.1, scheme);
        if sb.data_chunks == 1 && scheme.mirror().is_some() {
            sb.scheme = Scheme::Hybrid1;
        }
        let mut b = sb.encode().to_vec();
        for (at, width, kind, raw) in edits {
            // Half the edits land in the first 256 bytes, where the fields are.
            let at = if kind & 0x80 != 0 { at % 256 } else { at };
            poke(&mut b, at, width, value(kind, width, raw));
        }
        reseal_superblock(&mut b);
        if let Some(t) = truncate {
            b.truncate(t);
        }
        if let Ok(got) = Superblock::decode(&b) {
            prop_assert!(got.validate().is_ok());
            prop_assert_eq!(got.member_table.len(), got.members as usize);
            prop_assert_eq!(Superblock::decode(&got.encode()), Ok(got.clone()));
            prop_assert!(got.member_bytes() >= got.data_offset_bytes);
        }
    }

    #[test]
    fn mutated_appendices_are_rejected_or_consistent(
        scheme in prop::sample::select(vec![Scheme::Pure, Scheme::Hybrid1, Scheme::Hybrid2, Scheme::HybridSeq]),
        parity in any::<bool>(),
        sector in prop::sample::select(vec![512usize, 4096]),
        edits in prop::collection::vec(
            (0usize..4096, prop::sample::select(vec![1usize, 2, 4, 8]), any::<u8>(), any::<u64>()),
            1..6,
        ),
    ) {
        let chunk: Vec<u8> = (0..8192u32).map(|i| (i * 29 + 1) as u8).collect();
        let role = if parity { Role::Parity(1) } else { Role::Data(2) };
        let pure_data = scheme == Scheme::Pure && !parity;
        let mut a = Appendix {
            scheme,
            identity: Identity { array_uuid: [8; 16], member_index: 4, chunk_number: 99, role },
            tag: 5,
            buddy_crc: 0x1234_5678,
            entries: if parity { vec![1, 2, 3, 4, 5, 6] } else { vec![] },
            block_bytes: if pure_data { 0 } else { 4096 },
            blocks: vec![],
        };
        let mut s = vec![0u8; sector];
        a.seal(&chunk, &mut s);
        for (at, width, kind, raw) in edits {
            let at = if kind & 0x80 != 0 { at % 64 } else { at % (sector - 4) };
            poke(&mut s, at, width, value(kind, width, raw));
        }
        // Re-seal as the encoder would: the self checksum covers the appendix alone.
        let own = crc32c(&s[..sector - 4]);
        s[sector - 4..].copy_from_slice(&own.to_le_bytes());
        if let Ok((got, data_crc)) = Appendix::decode(&chunk, &s) {
            prop_assert_eq!(data_crc, crc32c(&chunk));
            let mut again = vec![0u8; sector];
            got.encode(&mut again);
            prop_assert_eq!(Appendix::decode(&chunk, &again), Ok((got, data_crc)));
        }
    }

    #[test]
    fn mutated_stripe_state_records_are_rejected_or_consistent(
        entries in 0usize..12,
        copy in prop::sample::select(vec![1024usize, 8192]),
        edits in prop::collection::vec(
            (0usize..400, prop::sample::select(vec![1usize, 2, 4, 8]), any::<u8>(), any::<u64>()),
            1..6,
        ),
    ) {
        let r = StateRecord {
            sequence: 77,
            entries: (0..entries as u64)
                .map(|i| UntrustedRange {
                    stripe: i / 3,
                    position: (i % 3) as u16,
                    offset: 4096 * (i % 2) as u32,
                    len: 4096,
                    expected_crc: (i % 2 == 0).then_some(0xabcd_0000 + i as u32),
                })
                .collect(),
            zero: (0..entries as u64 / 3)
                .map(|i| ZeroRange { first: 100 + 10 * i, count: 1 + i })
                .collect(),
        };
        let mut b = r.encode(copy).unwrap();
        prop_assert_eq!(StateRecord::decode(&b), Ok(Some(r)));
        for (at, width, kind, raw) in edits {
            poke(&mut b, at, width, value(kind, width, raw));
        }
        let crc = crc32c(&b[..copy - 4]);
        b[copy - 4..].copy_from_slice(&crc.to_le_bytes());
        if let Ok(Some(got)) = StateRecord::decode(&b) {
            prop_assert!(got.entries.iter().all(|e| e.len > 0));
            prop_assert!(got.entries.windows(2).all(|w| w[0] < w[1]));
            let again = got.encode(copy).unwrap();
            prop_assert_eq!(StateRecord::decode(&again), Ok(Some(got)));
        }
    }
}
