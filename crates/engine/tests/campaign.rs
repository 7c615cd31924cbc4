//! The fault campaign, short: {RAID-5 n=5, RAID-6 n=8, RS 10+4} × every scheme × every fault
//! kind × {healthy, m−1 members failed}. Protected schemes return no wrong byte, leave no damage
//! and accuse no healthy unit; `none` is shown returning wrong bytes under the silent faults.

use stripeguard_disk::FaultKind;
use stripeguard_engine::{run_campaign, CampaignConfig};
use stripeguard_integrity::{CodeId, Scheme};

fn cfg(
    k: usize,
    m: usize,
    scheme: Scheme,
    kind: FaultKind,
    failed: usize,
    seed: u64,
) -> CampaignConfig {
    CampaignConfig {
        data_chunks: k,
        parity_chunks: m,
        code: CodeId::for_parity(m),
        scheme,
        chunk_bytes: 4096,
        stripes: 24,
        ops: 150,
        seed,
        kinds: vec![kind],
        failed_members: failed,
        fault_rate: 0.3,
    }
}

#[test]
fn campaign_short() {
    let shapes = [(4, 1), (6, 2), (10, 4)];
    let mut none_wrong = std::collections::BTreeMap::new();
    for (si, &(k, m)) in shapes.iter().enumerate() {
        for failed in [0, m - 1] {
            for kind in FaultKind::ALL
                .into_iter()
                .filter(|k| *k != FaultKind::MemberFailure)
            {
                for scheme in Scheme::ALL {
                    let seed = (si * 100 + failed * 10) as u64 + kind as u64;
                    let rep = run_campaign(&cfg(k, m, scheme, kind, failed, seed)).unwrap();
                    let fired: u64 = rep.injected.values().sum();
                    let label =
                        format!("{k}+{m} failed={failed} {} {scheme}: {rep:?}", kind.name());
                    assert!(fired > 0, "nothing fired: {label}");
                    if scheme == Scheme::None {
                        *none_wrong.entry(kind.name()).or_insert(0) += rep.wrong_bytes;
                        continue;
                    }
                    assert_eq!(rep.wrong_bytes, 0, "{label}");
                    assert_eq!(rep.unrecoverable, 0, "{label}");
                    assert_eq!(rep.damaged_after_scrub, 0, "{label}");
                    assert_eq!(rep.false_accusations, 0, "{label}");
                    assert!(rep.located > 0, "{label}");
                }
            }
        }
    }
    // The negative control: bare RAID returns wrong bytes under every silent fault kind.
    for kind in FaultKind::ALL.into_iter().filter(|k| k.is_silent()) {
        assert!(
            none_wrong[kind.name()] > 0,
            "none survived {}: the test proves nothing",
            kind.name()
        );
    }
}
