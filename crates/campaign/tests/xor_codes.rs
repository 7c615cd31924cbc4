//! The XOR-only RAID-6 codes (RDP, Tier-code) in the engine: the fault campaign as on Reed-
//! Solomon RAID-6 — every scheme, every silent fault kind, healthy and with one member failed —
//! returns no wrong byte and repairs what it finds, and `none` on the same codes is shown
//! returning wrong bytes (the negative control). Chunks hold `p - 1` rows: 4 KiB for 4 data
//! chunks (p = 5), 12 KiB for 6 (p = 7; three 4 KiB checksum blocks).

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
use stripeguard_campaign::{campaign_cases, run_campaign, Pattern};
use stripeguard_disk::FaultKind;
use stripeguard_integrity::{CodeId, Scheme};

#[test]
fn campaign_on_rdp_and_tier() {
    for code in [CodeId::Rdp, CodeId::Tier] {
        let mut none_wrong = std::collections::BTreeMap::new();
        for (k, chunk) in [(4usize, 4096u32), (6, 12288)] {
            for (ci, case) in campaign_cases(&[(k, 2)], &Scheme::ALL).iter().enumerate() {
                if case.kind == FaultKind::MemberFailure || case.pattern != Pattern::Single {
                    continue;
                }
                let mut cfg = case.config(120, 16, 1000 + ci as u64);
                cfg.code = code;
                cfg.chunk_bytes = chunk;
                cfg.fault_rate = 0.3;
                let rep = run_campaign(&cfg).unwrap();
                let label = format!(
                    "{} {k}+2 failed={} {} {}: {rep:?}",
                    code.name(),
                    case.failed_members,
                    case.fault_name(),
                    case.scheme
                );
                assert!(
                    rep.injected.values().sum::<u64>() > 0,
                    "nothing fired: {label}"
                );
                assert!(case.passed(&rep), "{label}");
                if case.scheme == Scheme::None {
                    *none_wrong.entry(case.fault_name()).or_insert(0) += rep.wrong_bytes;
                    continue;
                }
                assert_eq!(rep.unrecoverable, 0, "{label}");
                assert!(rep.located > 0, "{label}");
            }
        }
        for kind in FaultKind::ALL.into_iter().filter(|k| k.is_silent()) {
            assert!(
                none_wrong[kind.name()] > 0,
                "{}: none survived {}: the test proves nothing",
                code.name(),
                kind.name()
            );
        }
    }
}

/// Random unaligned writes and reads against a model, then every stripe scrubbed: nothing
/// found (a read-modify-write of part of a chunk must update the diagonal parity of the whole
/// chunk; reads alone cannot see a wrong parity).
#[test]
fn round_trip_and_scrub_on_rdp_and_tier() {
    use rand::{Rng, SeedableRng};
    use std::sync::Arc;
    use stripeguard_disk::{DiskRef, MemDisk};
    use stripeguard_engine::{Array, ArrayConfig};
    for code in [CodeId::Rdp, CodeId::Tier] {
        for scheme in Scheme::ALL {
            for (k, chunk) in [(4usize, 4096u32), (6, 12288), (5, 49152)] {
                let mut cfg = ArrayConfig::new(k, 2, scheme, chunk, 8);
                cfg.code = code;
                let mems: Vec<DiskRef> = (0..k + 2)
                    .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())) as DiskRef)
                    .collect();
                let a = Array::create(mems, &cfg, true, &mut |_, _| {}).unwrap();
                let cap = a.capacity_bytes() as usize;
                let mut model = vec![0u8; cap];
                let mut rng = rand::rngs::StdRng::seed_from_u64(k as u64);
                for step in 0..80 {
                    let off = rng.random_range(0..cap);
                    let most = if step % 3 == 0 {
                        2 * k * chunk as usize
                    } else {
                        9000
                    };
                    let len = rng.random_range(1..=(cap - off).min(most));
                    let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                    a.write(off as u64, &data).unwrap();
                    model[off..off + len].copy_from_slice(&data);
                }
                let mut back = vec![0u8; cap];
                a.read(0, &mut back).unwrap();
                let label = format!("{} {scheme} {k}+2 C={chunk}", code.name());
                assert!(back == model, "{label}: wrong bytes");
                for s in 0..8 {
                    assert_eq!(a.scrub_stripe(s).unwrap(), 0, "{label}: stripe {s}");
                }
                assert_eq!(a.counters().detected, 0, "{label}");
            }
        }
    }
}
