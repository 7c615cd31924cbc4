//! RDP and Tier-code: exhaustive two-failure round trips for every prime in {5, 7, 11, 13} and
//! every shortened geometry of it, on every kernel; update and accumulate against re-encoding;
//! Tier-code's Eq. 3 as printed failing the same test (the negative control); the paper's Eq. 4-5
//! and Eq. 1-2 checked literally.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use stripeguard_codes::tier::{block_member, data_block_label, parity_block_label, parity_members};
use stripeguard_codes::{
    ChunkUpdate, CodeError, ErasureCode, Located, Rdp, TierCode, TierLabeling,
};
use stripeguard_gf::{Kernel, KernelKind};

const PRIMES: [usize; 4] = [5, 7, 11, 13];

fn kernels() -> Vec<Kernel> {
    KernelKind::available()
        .into_iter()
        .map(|k| Kernel::new(k).unwrap())
        .collect()
}

fn random_data(rng: &mut StdRng, k: usize, len: usize) -> Vec<Vec<u8>> {
    (0..k)
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect()
}

fn stripe(code: &dyn ErasureCode, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0xA5u8; len]; 2];
    let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    code.encode(
        &refs,
        &mut parity.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
    )
    .unwrap();
    data.iter().cloned().chain(parity).collect()
}

fn views_mut(s: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    s.iter_mut().map(|c| &mut c[..]).collect()
}

fn views(s: &[Vec<u8>]) -> Vec<&[u8]> {
    s.iter().map(|c| &c[..]).collect()
}

/// Every single and double erasure of a random stripe, overwritten with garbage and rebuilt.
/// Returns the erasure sets that did not come back (an error or wrong bytes).
fn failing_erasures(code: &dyn ErasureCode, rows: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
    let n = code.total_chunks();
    // Rows of 1..70 bytes: below, at and past a vector width, so kernel tails are covered.
    let row_len = rng.random_range(1..70);
    let full = stripe(code, &random_data(rng, code.data_chunks(), rows * row_len));
    let mut patterns: Vec<Vec<usize>> = (0..n).map(|a| vec![a]).collect();
    patterns.extend((0..n).flat_map(|a| (a + 1..n).map(move |b| vec![a, b])));
    patterns
        .into_iter()
        .filter(|lost| {
            let mut s = full.clone();
            for &i in lost {
                s[i].iter_mut().for_each(|b| *b = rng.random());
            }
            code.reconstruct(&mut views_mut(&mut s), lost).is_err() || s != full
        })
        .collect()
}

#[test]
fn every_one_or_two_lost_chunks_come_back_for_every_prime_and_shortening() {
    let mut rng = StdRng::seed_from_u64(23);
    for kernel in kernels() {
        for p in PRIMES {
            for k in 1..p {
                let rdp = Rdp::with_prime(k, p, kernel).unwrap();
                let tier = TierCode::with_labeling(k, p, TierLabeling::Corrected, kernel).unwrap();
                for code in [&rdp as &dyn ErasureCode, &tier] {
                    let bad = failing_erasures(code, p - 1, &mut rng);
                    assert!(
                        bad.is_empty(),
                        "{} p={p} k={k} {:?}: {bad:?}",
                        code.name(),
                        kernel.kind()
                    );
                }
            }
        }
    }
}

#[test]
fn default_geometry_picks_the_smallest_prime_and_round_trips() {
    let mut rng = StdRng::seed_from_u64(5);
    let kernel = Kernel::best();
    for (k, p) in [
        (1, 3),
        (2, 3),
        (3, 5),
        (4, 5),
        (5, 7),
        (6, 7),
        (7, 11),
        (12, 13),
        (13, 17),
    ] {
        let rdp = Rdp::with_kernel(k, kernel).unwrap();
        let tier = TierCode::with_kernel(k, kernel).unwrap();
        assert_eq!((rdp.prime(), rdp.rows()), (p, p - 1));
        assert_eq!((tier.prime(), tier.rows()), (p, p - 1));
        assert!(failing_erasures(&rdp, p - 1, &mut rng).is_empty());
        assert!(failing_erasures(&tier, p - 1, &mut rng).is_empty());
    }
}

/// The negative control: the same test on Eq. 3 as printed, `T_ij = (i, j % (M-1) + i)`, loses
/// data for many pairs (most from p = 7 on), while the corrected labeling loses none.
#[test]
fn printed_eq3_labeling_fails_the_two_failure_test() {
    let mut rng = StdRng::seed_from_u64(3);
    let kernel = Kernel::best();
    for p in PRIMES {
        let k = p - 1;
        let printed = TierCode::with_labeling(k, p, TierLabeling::PrintedEq3, kernel).unwrap();
        let corrected = TierCode::with_labeling(k, p, TierLabeling::Corrected, kernel).unwrap();
        let bad = failing_erasures(&printed, p - 1, &mut rng);
        let pairs = (k + 2) * (k + 1) / 2;
        let bad_pairs = bad.iter().filter(|e| e.len() == 2).count();
        // Exactly the pairs that avoid block A (whose cells all carry second labels 0..M-3):
        // (p-1)(p-2)/2 of the (p+1)p/2 pairs, 6 of 15 at p = 5 and 66 of 91 at p = 13.
        let expect: Vec<Vec<usize>> = (1..=k)
            .flat_map(|a| (a + 1..=k).map(move |b| vec![a, b]))
            .collect();
        assert_eq!(bad, expect, "p={p}");
        assert_eq!(bad_pairs, (p - 1) * (p - 2) / 2);
        assert!(p < 7 || 2 * bad_pairs > pairs, "most pairs from p = 7 on");
        // Single failures are fine: each row still has its P equation.
        assert!(bad.iter().all(|e| e.len() == 2), "p={p}: {bad:?}");
        assert!(failing_erasures(&corrected, p - 1, &mut rng).is_empty());
        // The failure is a proof, not a give-up: the equations are singular for that pattern.
        let mut s = stripe(&printed, &random_data(&mut rng, k, (p - 1) * 8));
        let lost = [k - 1, k];
        assert_eq!(
            printed.reconstruct(&mut views_mut(&mut s), &lost),
            Err(CodeError::NotRecoverable {
                erased: lost.to_vec()
            }),
            "p={p}: the last data block and P"
        );
    }
}

#[test]
fn corrected_tier_code_is_rdp_byte_for_byte() {
    let mut rng = StdRng::seed_from_u64(9);
    let kernel = Kernel::best();
    for p in PRIMES {
        for k in [1, p / 2, p - 1] {
            let data = random_data(&mut rng, k, (p - 1) * 40);
            let rdp = Rdp::with_prime(k, p, kernel).unwrap();
            let tier = TierCode::with_labeling(k, p, TierLabeling::Corrected, kernel).unwrap();
            assert_eq!(stripe(&rdp, &data), stripe(&tier, &data), "p={p} k={k}");
        }
    }
}

/// Eq. 4 and Eq. 5 of the paper (M = 6, rows counted from 1 there, from 0 here), XOR by XOR.
#[test]
fn tier_code_m6_matches_the_papers_eq4_and_eq5() {
    let mut rng = StdRng::seed_from_u64(4);
    let code = TierCode::new(4).unwrap();
    assert_eq!(code.prime(), 5);
    let row = 16;
    let s = stripe(&code, &random_data(&mut rng, 4, 4 * row));
    let cell = |chunk: usize, r1: usize| &s[chunk][(r1 - 1) * row..r1 * row];
    let xor = |cells: &[(usize, usize)]| -> Vec<u8> {
        (0..row)
            .map(|b| cells.iter().fold(0, |a, &(c, r)| a ^ cell(c, r)[b]))
            .collect()
    };
    let (a, b, c, d, p, q) = (0, 1, 2, 3, 4, 5);
    for r in 1..=4 {
        assert_eq!(cell(p, r), xor(&[(a, r), (b, r), (c, r), (d, r)]), "P_{r}");
    }
    assert_eq!(cell(q, 1), xor(&[(a, 1), (c, 4), (d, 3), (p, 2)]), "Q_1");
    assert_eq!(cell(q, 2), xor(&[(a, 2), (b, 1), (d, 4), (p, 3)]), "Q_2");
    assert_eq!(cell(q, 3), xor(&[(a, 3), (b, 2), (c, 1), (p, 4)]), "Q_3");
    assert_eq!(cell(q, 4), xor(&[(a, 4), (b, 3), (c, 2), (d, 1)]), "Q_4");
}

#[test]
fn update_and_accumulate_agree_with_re_encoding() {
    let mut rng = StdRng::seed_from_u64(11);
    for kernel in kernels() {
        for p in PRIMES {
            for k in [1, 2, p - 2, p - 1] {
                let rdp = Rdp::with_prime(k, p, kernel).unwrap();
                let tier = TierCode::with_labeling(k, p, TierLabeling::Corrected, kernel).unwrap();
                for code in [&rdp as &dyn ErasureCode, &tier] {
                    let len = (p - 1) * rng.random_range(1..50);
                    let mut data = random_data(&mut rng, k, len);
                    let mut s = stripe(code, &data);
                    // Change one or two chunks; update the old parity from the deltas only.
                    let mut changed: Vec<usize> = vec![rng.random_range(0..k)];
                    if k > 1 && rng.random() {
                        changed.push((changed[0] + 1) % k);
                    }
                    let news = random_data(&mut rng, changed.len(), len);
                    let updates: Vec<ChunkUpdate> = changed
                        .iter()
                        .zip(&news)
                        .map(|(&index, new)| ChunkUpdate {
                            index,
                            old: &data[index],
                            new,
                        })
                        .collect();
                    let (_, parity) = s.split_at_mut(k);
                    code.update(&updates, &mut views_mut(parity)).unwrap();
                    for (&i, new) in changed.iter().zip(&news) {
                        data[i] = new.clone();
                    }
                    let expect = stripe(code, &data);
                    assert_eq!(s[k..], expect[k..], "{} p={p} k={k}", code.name());
                    // Encoding chunk by chunk into zeroed parity.
                    let mut acc = vec![vec![0u8; len]; 2];
                    for (j, d) in data.iter().enumerate() {
                        code.accumulate(j, d, &mut views_mut(&mut acc)).unwrap();
                    }
                    assert_eq!(
                        acc[..],
                        expect[k..],
                        "accumulate {} p={p} k={k}",
                        code.name()
                    );
                }
            }
        }
    }
}

#[test]
fn one_bad_chunk_is_located_and_two_are_not_guessed() {
    let mut rng = StdRng::seed_from_u64(8);
    for p in [5, 7] {
        for k in [2, p - 1] {
            let code = Rdp::with_prime(k, p, Kernel::best()).unwrap();
            let clean = stripe(&code, &random_data(&mut rng, k, (p - 1) * 8));
            assert_eq!(code.locate(&views(&clean), &[]), Ok(Located::Consistent));
            for bad in 0..k + 2 {
                let mut s = clean.clone();
                let at = rng.random_range(0..s[bad].len());
                s[bad][at] ^= 1 << rng.random_range(0..8);
                assert_eq!(
                    code.locate(&views(&s), &[]),
                    Ok(Located::Bad(vec![bad])),
                    "p={p} k={k}"
                );
                let mut fixed = s.clone();
                code.repair(&mut views_mut(&mut fixed), &[]).unwrap();
                assert_eq!(fixed, clean);
                // With one erasure elsewhere the damage is detected, not located.
                let other = (bad + 1) % (k + 2);
                assert!(matches!(
                    code.locate(&views(&s), &[other]),
                    Err(CodeError::CannotLocate { .. })
                ));
                assert_eq!(
                    code.locate(&views(&clean), &[other]),
                    Ok(Located::Consistent)
                );
                assert_eq!(
                    code.locate(&views(&s), &[other, (bad + 2) % (k + 2)]),
                    Ok(Located::Unchecked)
                );
                // A second bad chunk: no single chunk explains it.
                let second = (bad + 1) % (k + 2);
                s[second][0] ^= 0x80;
                assert!(matches!(
                    code.locate(&views(&s), &[]),
                    Err(CodeError::CannotLocate { .. })
                ));
            }
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    let code = Rdp::new(4).unwrap();
    let mut s = stripe(&code, &random_data(&mut StdRng::seed_from_u64(1), 4, 40));
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[0, 1, 2]),
        Err(CodeError::TooManyErasures { .. })
    ));
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[6]),
        Err(CodeError::BadIndex { .. })
    ));
    let mut odd = vec![vec![0u8; 42]; 6];
    assert_eq!(
        code.reconstruct(&mut views_mut(&mut odd), &[0]),
        Err(CodeError::ChunkRows { len: 42, rows: 4 })
    );
    let k0 = Kernel::best();
    assert!(Rdp::with_prime(5, 5, k0).is_err(), "p - 1 < k");
    assert!(Rdp::with_prime(3, 9, k0).is_err(), "9 is not prime");
    assert!(Rdp::with_prime(0, 5, k0).is_err());
    assert!(stripeguard_codes::by_name("rdp", 4, 1).is_err());
    assert_eq!(
        stripeguard_codes::by_name("tier", 4, 2).unwrap().name(),
        "tier"
    );
}

/// Eq. 1 and Eq. 2, evaluated literally, place every block where the rotation formulas say.
#[test]
fn block_level_labels_follow_eq1_and_eq2() {
    for members in [4, 6, 8, 12, 14, 18] {
        let k = members - 2;
        for i in 1..members / 2 {
            for j in 1..=members {
                let label = data_block_label(members, i, j);
                let block = ((i - 1) * members + j - 1) as u64;
                assert_eq!(label, 1 + block as usize / k, "M={members} ({i},{j})");
                assert_eq!(block_member(members, block), j - 1);
                // The stripe's parity is elsewhere.
                let (p, q) = parity_members(members, block / k as u64);
                assert!(p != j - 1 && q != j - 1);
            }
        }
        for j in 1..=members {
            let stripe = (parity_block_label(members, j) - 1) as u64;
            let (p, q) = parity_members(members, stripe);
            assert!(j - 1 == p || j - 1 == q, "M={members} parity member {j}");
        }
        // The M/2 stripes of one matrix put their parity on distinct members.
        let mut seen = vec![false; members];
        for s in 0..(members / 2) as u64 {
            let (p, q) = parity_members(members, s);
            assert!(!seen[p] && !seen[q]);
            seen[p] = true;
            seen[q] = true;
        }
    }
}
