//! The enumerated metrics against closed forms (RDP's optimal XOR counts, its update
//! complexity, the paper's Table II), against a naive second computation of Eq. 7 and Eq. 8
//! for RAID-6 P+Q, and Tier-code's chain-walking degraded reads against the MDS rule.

use stripeguard_codes::metrics::{compare, CodeMetrics};

fn get(all: &[CodeMetrics], code: &str) -> CodeMetrics {
    all.iter().find(|m| m.code == code).unwrap().clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Unshortened RDP (M = p + 1): 2(p-1)(p-2) cell XORs to encode, i.e. 2(p-2) chunk XORs,
/// the optimum 2(k-1) for k = p-1 data chunks (Corbett et al.: "provably optimal in
/// computational complexity, both during construction and reconstruction"); every pair of lost
/// members rebuilt with the same count; and the update complexity of a cell:
/// 1 (P) + [not on the missing diagonal] + [its P cell's diagonal is not the missing one].
#[test]
fn rdp_matches_its_closed_forms() {
    for p in [3usize, 5, 7, 11, 13] {
        let all = compare(p + 1).unwrap();
        let rdp = get(&all, "rdp");
        let pf = p as f64;
        assert_eq!(rdp.prime, Some(p));
        assert!(close(rdp.encode_xors, 2.0 * (pf - 2.0)), "p={p} {rdp:?}");
        assert!(
            close(rdp.decode_xors_avg, 2.0 * (pf - 2.0)),
            "p={p} {rdp:?}"
        );
        assert!(
            close(rdp.decode_xors_max, 2.0 * (pf - 2.0)),
            "p={p} {rdp:?}"
        );
        assert_eq!(rdp.encode_mults, 0.0);
        let cells = (pf - 1.0) * (pf - 1.0);
        let touched = cells + (cells - (pf - 2.0)) + (pf - 1.0) * (pf - 2.0);
        assert!(close(rdp.update_avg, touched / cells), "p={p} {rdp:?}");
        assert_eq!(rdp.update_max, 3);
        assert_eq!(rdp.data_blocks_per_stripe, (p - 1) * (p - 1));
        assert_eq!(rdp.parity_blocks_per_stripe, 2 * (p - 1));
        // Tier-code: the same code, so the same XORs; two parity blocks per block write.
        let tier = get(&all, "tier");
        assert!(close(tier.encode_xors, rdp.encode_xors));
        assert!(close(tier.decode_xors_avg, rdp.decode_xors_avg));
        assert_eq!((tier.update_avg, tier.update_max), (2.0, 2));
    }
}

/// Table II of the Tier-code paper: XORs to encode (per row of parity, i.e. chunk XORs here)
/// 6, 10, 18, 22, 30, 34, 54, 58 for 6, 8, 12, 14, 18, 20, 30, 32 disks, for Tier-code and RS
/// alike; RS adds multiplications (we count k - 1: the coefficient of d_0 in Q is 1).
#[test]
fn encode_counts_match_table_ii() {
    for (disks, xors) in [(6, 6.0), (8, 10.0), (12, 18.0), (14, 22.0), (18, 30.0)] {
        let all = compare(disks).unwrap();
        assert!(close(get(&all, "tier").encode_xors, xors), "M={disks}");
        let raid6 = get(&all, "raid6");
        assert!(close(raid6.encode_xors, xors), "M={disks}");
        assert!(close(raid6.encode_mults, (disks - 3) as f64), "M={disks}");
        assert_eq!((raid6.update_avg, raid6.update_max), (2.0, 2));
    }
}

/// Eq. 7 for RAID-6 with M = 4 (k = 2), by hand: ranges [0,1) and [1,2) write 2 parity blocks
/// and read 1 (reconstruct-write: the other data block), [0,2) writes 2 and reads 0. Over starts
/// 0 and 1 and sizes 1..=8: parity writes 88 / 16, reads 16 / 16.
#[test]
fn raid6_eq7_by_hand() {
    let raid6 = get(&compare(4).unwrap(), "raid6");
    assert_eq!(raid6.request_blocks_max, 8);
    assert!(close(raid6.write_parity_avg, 5.5), "{raid6:?}");
    assert!(close(raid6.write_reads_avg, 1.0), "{raid6:?}");
    assert!(close(raid6.multi_block_access, 6.5));
}

/// Eq. 7 and Eq. 8 for RAID-6 P+Q computed naively from the definitions, block by block.
fn naive_raid6(members: usize) -> (f64, f64, f64, f64) {
    let k = members - 2;
    let max = members * (members - 2);
    let (mut writes, mut reads, mut n) = (0usize, 0usize, 0usize);
    for start in 0..k {
        for size in 1..=max {
            n += 1;
            let blocks: Vec<usize> = (start..start + size).collect();
            let first = start / k;
            let last = (start + size - 1) / k;
            for stripe in first..=last {
                let written = blocks.iter().filter(|&&b| b / k == stripe).count();
                writes += 2;
                reads += (written + 2).min(k - written);
            }
        }
    }
    let mut degraded = [0usize; 2];
    let mut counted = [0usize; 2];
    for (which, sets) in [
        (0usize, (0..k + 2).map(|a| vec![a]).collect::<Vec<_>>()),
        (
            1,
            (0..k + 2)
                .flat_map(|a| (a + 1..k + 2).map(move |b| vec![a, b]))
                .collect(),
        ),
    ] {
        for failed in &sets {
            for start in 0..k {
                for size in 1..=max {
                    counted[which] += 1;
                    let first = start / k;
                    let last = (start + size - 1) / k;
                    for stripe in first..=last {
                        let asked: Vec<usize> = (start..start + size)
                            .filter(|&b| b / k == stripe)
                            .map(|b| b % k)
                            .collect();
                        if asked.iter().any(|j| failed.contains(j)) {
                            let alive = asked.iter().filter(|j| !failed.contains(j)).count();
                            degraded[which] += k - alive;
                        }
                    }
                }
            }
        }
    }
    (
        writes as f64 / n as f64,
        reads as f64 / n as f64,
        degraded[0] as f64 / counted[0] as f64,
        degraded[1] as f64 / counted[1] as f64,
    )
}

#[test]
fn raid6_eq7_and_eq8_agree_with_a_naive_count() {
    for members in [4, 5, 6, 8, 9] {
        let raid6 = get(&compare(members).unwrap(), "raid6");
        let (w, r, d1, d2) = naive_raid6(members);
        assert!(close(raid6.write_parity_avg, w), "M={members}");
        assert!(close(raid6.write_reads_avg, r), "M={members}");
        assert!(close(raid6.degraded_read_1, d1), "M={members}");
        assert!(close(raid6.degraded_read_2, d2), "M={members}");
    }
}

/// Tier-code has md's block layout; its degraded reads come from walking RDP's chains cell by
/// cell, and must land on the MDS count (a lost chunk needs k whole surviving chunks), for one
/// and two failures. RDP, with one cell per block, touches more parity per write.
#[test]
fn tier_code_costs_what_raid6_costs_per_io_and_rdp_more() {
    for members in [4, 6, 8, 12, 14] {
        let all = compare(members).unwrap();
        let (raid6, tier, rdp) = (get(&all, "raid6"), get(&all, "tier"), get(&all, "rdp"));
        for (a, b, what) in [
            (tier.write_parity_avg, raid6.write_parity_avg, "writes"),
            (tier.write_reads_avg, raid6.write_reads_avg, "reads"),
            (tier.degraded_read_1, raid6.degraded_read_1, "degraded 1"),
            (tier.degraded_read_2, raid6.degraded_read_2, "degraded 2"),
        ] {
            assert!(close(a, b), "M={members} {what}: tier {a} raid6 {b}");
        }
        if members > 4 {
            assert!(rdp.update_avg > tier.update_avg, "M={members}");
            assert!(rdp.write_parity_avg > tier.write_parity_avg, "M={members}");
        }
    }
}

#[test]
fn metrics_refuse_too_few_members() {
    assert!(compare(3).is_err());
    assert!(compare(256).is_err());
}
