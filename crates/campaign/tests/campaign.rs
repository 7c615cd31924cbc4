//! The fault campaign, short: every shape and scheme `create` accepts among {1+1, 1+2, RAID-5
//! n=5, RAID-6 n=8, RS 10+4} × every fault kind × {healthy, m−1 members failed}, plus two lost
//! writes in one stripe (a data unit and P) on m >= 2. Protected schemes return no wrong byte,
//! leave no damage and accuse no healthy unit; `none` is shown returning wrong bytes under the
//! silent faults.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
use stripeguard_campaign::{campaign_cases, run_campaign, Pattern};
use stripeguard_disk::FaultKind;
use stripeguard_integrity::Scheme;

#[test]
fn campaign_short() {
    let shapes = [(1, 1), (1, 2), (4, 1), (6, 2), (10, 4)];
    let mut none_wrong = std::collections::BTreeMap::new();
    let mut pairs = 0;
    for (ci, case) in campaign_cases(&shapes, &Scheme::ENGINE).iter().enumerate() {
        if case.kind == FaultKind::MemberFailure {
            continue;
        }
        let mut cfg = case.config(150, 24, ci as u64);
        cfg.fault_rate = 0.3;
        let rep = run_campaign(&cfg).unwrap();
        let fired: u64 = rep.injected.values().sum();
        let label = format!(
            "{}+{} failed={} {} {}: {rep:?}",
            case.data_chunks,
            case.parity_chunks,
            case.failed_members,
            case.fault_name(),
            case.scheme
        );
        assert!(fired > 0, "nothing fired: {label}");
        assert!(case.passed(&rep), "{label}");
        if case.scheme == Scheme::None {
            *none_wrong.entry(case.fault_name()).or_insert(0) += rep.wrong_bytes;
            continue;
        }
        if case.pattern == Pattern::Single {
            assert_eq!(rep.unrecoverable, 0, "{label}");
            assert!(rep.located > 0, "{label}");
        } else {
            pairs += 1;
        }
    }
    // Every shape with m >= 2 ran the two-lost-writes pattern for every scheme it accepts.
    // 1+2: hybrid1, hybrid-seq, checksum-chunk (create refuses pure and hybrid2 there); 6+2 and
    // 10+4: all five.
    assert_eq!(pairs, 3 + 5 + 5, "pattern cases");
    // The negative control: bare RAID returns wrong bytes under every silent fault kind.
    for kind in FaultKind::ALL.into_iter().filter(|k| k.is_silent()) {
        assert!(
            none_wrong[kind.name()] > 0,
            "none survived {}: the test proves nothing",
            kind.name()
        );
    }
}

/// The same faults on 16 KiB chunks (four 4 KiB checksum blocks): reads and read-modify-writes
/// move single blocks, with verified appendices cached as the commands run. Protected schemes
/// return no wrong byte and locate what was injected; `none` returns wrong bytes.
#[test]
fn campaign_short_at_block_granularity() {
    let mut none_wrong = 0;
    for (ci, case) in campaign_cases(&[(4, 1), (6, 2)], &Scheme::ENGINE)
        .iter()
        .enumerate()
    {
        if case.kind == FaultKind::MemberFailure || case.pattern != Pattern::Single {
            continue;
        }
        let mut cfg = case.config(150, 16, 500 + ci as u64);
        cfg.chunk_bytes = 16384;
        cfg.fault_rate = 0.3;
        let rep = run_campaign(&cfg).unwrap();
        let label = format!(
            "{}+{} failed={} {} {}: {rep:?}",
            case.data_chunks,
            case.parity_chunks,
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
            none_wrong += rep.wrong_bytes;
        } else {
            assert_eq!(rep.unrecoverable, 0, "{label}");
            assert!(rep.located > 0, "{label}");
        }
    }
    assert!(
        none_wrong > 0,
        "none survived every fault: the test proves nothing"
    );
}
