//! The crash campaign, short: every scheme on RAID-5 and RAID-6, power cuts at random points
//! with random subsets of the unflushed writes landed (some torn). After the resync nothing
//! flushed is lost, no chunk reads back as anything but one of its versions since the last
//! flush, and a full check finds nothing; the same crashes without resync leave damage.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use stripeguard_campaign::{run_crash_campaign, CrashConfig};
use stripeguard_integrity::Scheme;

#[test]
fn crash_campaign_short() {
    let mut control = 0;
    for (k, m, chunk) in [(3, 1, 4096), (4, 2, 4096), (3, 1, 16384), (4, 2, 16384)] {
        for scheme in Scheme::ENGINE {
            let rep = run_crash_campaign(&CrashConfig {
                data_chunks: k,
                parity_chunks: m,
                scheme,
                stripes: 24,
                crashes: 12,
                ops: 60,
                seed: (k * 10 + scheme.id() as usize) as u64,
                failed_members: 0,
                journal: true,
                chunk_bytes: chunk,
                write_journal: false,
                damaged_stripe: false,
            })
            .unwrap();
            let label = format!("{k}+{m} C={chunk} {scheme}: {rep:?}");
            assert!(rep.writes > 0 && rep.stripes_resynced > 0, "{label}");
            assert_eq!(rep.flushed_bytes_lost, 0, "{label}");
            assert_eq!(rep.wrong_bytes, 0, "{label}");
            assert_eq!(rep.unreadable_unsettled, 0, "{label}");
            assert_eq!(rep.flushed_refused, 0, "{label}");
            assert_eq!(rep.found_after_resync, 0, "{label}");
            control += rep.inconsistent_without_resync;
        }
    }
    assert!(
        control > 0,
        "without resync nothing was inconsistent: the test proves nothing"
    );
}

/// Degraded arrays: a member out from the start, so every write that changes the parity of a
/// stripe whose missing chunk it does not overwrite puts that chunk at risk. With the journal no
/// flushed byte is lost; without it (the negative control) the write hole loses some.
#[test]
fn crash_campaign_degraded_closes_the_write_hole() {
    let mut lost_without = 0;
    for (k, m) in [(3, 1), (4, 2)] {
        for scheme in [
            Scheme::None,
            Scheme::Hybrid1,
            Scheme::HybridSeq,
            Scheme::Hybrid2,
        ] {
            for journal in [true, false] {
                let rep = run_crash_campaign(&CrashConfig {
                    data_chunks: k,
                    parity_chunks: m,
                    scheme,
                    stripes: 16,
                    crashes: 12,
                    ops: 40,
                    seed: (k * 10 + scheme.id() as usize) as u64,
                    failed_members: 1,
                    journal,
                    chunk_bytes: 16384,
                    write_journal: false,
                    damaged_stripe: false,
                })
                .unwrap();
                let label = format!("{k}+{m} {scheme} journal={journal}: {rep:?}");
                if journal {
                    assert_eq!(rep.flushed_bytes_lost, 0, "{label}");
                    assert_eq!(rep.wrong_bytes, 0, "{label}");
                    assert_eq!(rep.unreadable_unsettled, 0, "{label}");
                    assert_eq!(rep.flushed_refused, 0, "{label}");
                    assert_eq!(rep.refused_writes, 0, "{label}");
                } else {
                    lost_without += rep.flushed_bytes_lost
                        + rep.wrong_bytes
                        + rep.unreadable_chunks
                        + rep.refused_writes;
                }
            }
        }
    }
    assert!(
        lost_without > 0,
        "without the journal nothing was lost: the test proves nothing"
    );
}

/// The write journal (`create --journal`): every chunk written but not flushed reads back
/// entirely old or entirely new after any crash — in settled stripes, in `none`, degraded too.
/// The negative control: the same crashes without it leave mixed chunks.
#[test]
fn crash_campaign_write_journal_leaves_whole_chunks() {
    let mut mixed_without = 0;
    for (k, m, chunk, failed) in [
        (3, 1, 16384, 0),
        (4, 2, 16384, 0),
        (3, 1, 4096, 0),
        (3, 1, 16384, 1),
        (4, 2, 16384, 1),
    ] {
        for scheme in Scheme::ENGINE {
            for write_journal in [true, false] {
                let rep = run_crash_campaign(&CrashConfig {
                    data_chunks: k,
                    parity_chunks: m,
                    scheme,
                    stripes: 16,
                    crashes: 12,
                    ops: 40,
                    seed: (k * 10 + scheme.id() as usize + 7 * failed) as u64,
                    failed_members: failed,
                    journal: true,
                    chunk_bytes: chunk,
                    write_journal,
                    damaged_stripe: false,
                })
                .unwrap();
                let label =
                    format!("{k}+{m} C={chunk} out={failed} {scheme} wj={write_journal}: {rep:?}");
                assert_eq!(rep.flushed_bytes_lost, 0, "{label}");
                assert_eq!(rep.unreadable_unsettled, 0, "{label}");
                assert_eq!(rep.flushed_refused, 0, "{label}");
                if write_journal {
                    assert!(rep.writes > 0 && rep.stripes_resynced > 0, "{label}");
                    assert_eq!(rep.mixed_chunks, 0, "{label}");
                    assert_eq!(rep.wrong_bytes, 0, "{label}");
                    assert_eq!(rep.unchecked_chunks, 0, "{label}");
                    if failed == 0 {
                        assert_eq!(rep.found_after_resync, 0, "{label}");
                    }
                } else {
                    mixed_without += rep.mixed_chunks;
                }
            }
        }
    }
    assert!(
        mixed_without > 0,
        "without the journal no chunk was mixed: the test proves nothing"
    );
}

/// A stripe damaged beyond its redundancy before the crashes (FORMAT.md §2.7): resyncs that
/// settle it beside crashed writes list its failing blocks untrusted, so none of its chunks
/// ever reads back as bytes nobody wrote — on every protected scheme, RAID-5 and RAID-6 (a
/// settle used to re-seal them as good).
#[test]
fn crash_campaign_never_reads_a_damaged_stripe_as_good() {
    let mut refused = 0;
    for (k, m) in [(3, 1), (4, 2)] {
        for scheme in Scheme::ENGINE.into_iter().filter(|s| *s != Scheme::None) {
            let rep = run_crash_campaign(&CrashConfig {
                data_chunks: k,
                parity_chunks: m,
                scheme,
                stripes: 16,
                crashes: 8,
                ops: 30,
                seed: (k * 100 + scheme.id() as usize) as u64,
                failed_members: 0,
                journal: true,
                chunk_bytes: 16384,
                write_journal: false,
                damaged_stripe: true,
            })
            .unwrap();
            let label = format!("{k}+{m} {scheme}: {rep:?}");
            assert_eq!(rep.damaged_read_as_good, 0, "{label}");
            assert_eq!(rep.flushed_bytes_lost, 0, "{label}");
            assert_eq!(rep.flushed_refused, 0, "{label}");
            assert_eq!(rep.wrong_bytes, 0, "{label}");
            assert!(
                rep.stripes_settled > 0,
                "the damaged stripe was never settled: {label}"
            );
            refused += rep.damaged_refused;
        }
    }
    assert!(
        refused > 0,
        "no read of the damaged stripe was refused: the test proves nothing"
    );
}
