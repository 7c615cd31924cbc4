//! Exhaustive and property tests of every code: decode(encode(x) minus any <= m chunks) = x,
//! update = re-encode, and locate finds every error pattern within 2t + f <= m without ever
//! naming a healthy chunk.
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use stripeguard_codes::{ChunkUpdate, CodeError, ErasureCode, Located, Raid6, ReedSolomon, Xor};
use stripeguard_gf::{Kernel, KernelKind};

fn codes_for(k: usize, m: usize, kernel: Kernel) -> Vec<Box<dyn ErasureCode>> {
    let mut v: Vec<Box<dyn ErasureCode>> =
        vec![Box::new(ReedSolomon::with_kernel(k, m, kernel).unwrap())];
    if m == 1 {
        v.push(Box::new(Xor::with_kernel(k, kernel).unwrap()));
    }
    if m == 2 {
        v.push(Box::new(Raid6::with_kernel(k, kernel).unwrap()));
    }
    v
}

fn stripe(code: &dyn ErasureCode, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; code.parity_chunks()];
    let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    code.encode(
        &refs,
        &mut parity.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
    )
    .unwrap();
    data.iter().cloned().chain(parity).collect()
}

fn views(s: &[Vec<u8>]) -> Vec<&[u8]> {
    s.iter().map(|c| &c[..]).collect()
}

fn views_mut(s: &mut [Vec<u8>]) -> Vec<&mut [u8]> {
    s.iter_mut().map(|c| &mut c[..]).collect()
}

fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|s| s.count_ones() as usize <= max)
        .map(|s| (0..n).filter(|i| s >> i & 1 != 0).collect())
        .collect()
}

fn kernels() -> Vec<Kernel> {
    KernelKind::available()
        .into_iter()
        .map(|k| Kernel::new(k).unwrap())
        .collect()
}

#[test]
fn every_erasure_pattern_of_small_codes() {
    let mut rng = StdRng::seed_from_u64(20);
    for kernel in kernels() {
        for (k, m) in [
            (1, 1),
            (4, 1),
            (2, 2),
            (4, 2),
            (6, 2),
            (5, 3),
            (6, 4),
            (3, 5),
            (8, 4),
        ] {
            for code in codes_for(k, m, kernel) {
                let data: Vec<Vec<u8>> = (0..k)
                    .map(|_| (0..97).map(|_| rng.random()).collect())
                    .collect();
                let good = stripe(&*code, &data);
                for erased in subsets(k + m, m) {
                    let mut s = good.clone();
                    for &e in &erased {
                        s[e].fill(0x5a);
                    }
                    code.reconstruct(&mut views_mut(&mut s), &erased).unwrap();
                    assert!(s == good, "{} k={k} m={m} erased={erased:?}", code.name());
                }
            }
        }
    }
}

#[test]
fn every_located_error_pattern_of_small_codes() {
    // Every placement of t errors and f erasures with 2t + f <= m, with errors on whole chunks.
    let mut rng = StdRng::seed_from_u64(21);
    for (k, m) in [(4, 2), (6, 2), (3, 4), (5, 4), (4, 5), (6, 6)] {
        for code in codes_for(k, m, Kernel::best()) {
            let n = k + m;
            let data: Vec<Vec<u8>> = (0..k)
                .map(|_| (0..200).map(|_| rng.random()).collect())
                .collect();
            let good = stripe(&*code, &data);
            for pattern in subsets(n, m) {
                // Split the pattern: the first f are erasures, the rest errors.
                for f in 0..=pattern.len() {
                    let (erased, errors) = pattern.split_at(f);
                    if 2 * errors.len() + f > m
                        || (code.name() == "raid6" && f > 0 && !errors.is_empty())
                    {
                        continue;
                    }
                    let mut s = good.clone();
                    for &e in errors {
                        for b in s[e].iter_mut() {
                            *b ^= rng.random_range(1..=255u8);
                        }
                    }
                    let found = code.locate(&views(&s), erased).unwrap();
                    let want = if f == m {
                        Located::Unchecked
                    } else if errors.is_empty() {
                        Located::Consistent
                    } else {
                        Located::Bad(errors.to_vec())
                    };
                    assert_eq!(
                        found,
                        want,
                        "{} k={k} m={m} erased={erased:?} errors={errors:?}",
                        code.name()
                    );
                    code.repair(&mut views_mut(&mut s), erased).unwrap();
                    assert!(s == good);
                }
            }
        }
    }
}

#[test]
fn single_parity_detects_but_never_locates() {
    let code = Xor::new(4).unwrap();
    let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 64]).collect();
    let mut s = stripe(&code, &data);
    assert_eq!(code.locate(&views(&s), &[]).unwrap(), Located::Consistent);
    s[2][10] ^= 1;
    assert!(matches!(
        code.locate(&views(&s), &[]),
        Err(CodeError::CannotLocate { .. })
    ));
}

#[test]
fn raid6_with_two_bad_chunks_cannot_locate() {
    let code = Raid6::new(6).unwrap();
    let data: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8 * 3 + 1; 512]).collect();
    let mut s = stripe(&code, &data);
    s[1][0] ^= 0x11;
    s[4][0] ^= 0x22;
    s[4][100] ^= 0x22;
    assert!(matches!(
        code.locate(&views(&s), &[]),
        Err(CodeError::CannotLocate { .. })
    ));
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let code = ReedSolomon::new(4, 2).unwrap();
    let data = vec![vec![0u8; 8]; 4];
    let mut s = stripe(&code, &data);
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[0, 1, 2]),
        Err(CodeError::TooManyErasures { .. })
    ));
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[9]),
        Err(CodeError::BadIndex { .. })
    ));
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[1, 1]),
        Err(CodeError::BadIndex { .. })
    ));
    s[3].push(0);
    assert!(matches!(
        code.reconstruct(&mut views_mut(&mut s), &[0]),
        Err(CodeError::ChunkLength { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(200, 56),
        Err(CodeError::Geometry { .. })
    ));
    assert!(matches!(
        ReedSolomon::new(0, 2),
        Err(CodeError::Geometry { .. })
    ));
    assert!(matches!(
        code.encode(&[&[0u8; 8][..]], &mut []),
        Err(CodeError::ChunkCount { .. })
    ));
}

/// A code shape, data, and a set of distinct positions to damage.
fn case() -> impl Strategy<Value = (usize, usize, usize, u64)> {
    (1usize..=12, 1usize..=8, 1usize..=300, any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn decode_of_encode_minus_any_m_chunks((k, m, len, seed) in case()) {
        let mut rng = StdRng::seed_from_u64(seed);
        for code in codes_for(k, m, Kernel::best()) {
            let data: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.random()).collect()).collect();
            let good = stripe(&*code, &data);
            let count = rng.random_range(0..=m);
            let erased = rand::seq::index::sample(&mut rng, k + m, count).into_vec();
            let mut s = good.clone();
            for &e in &erased { s[e].iter_mut().for_each(|b| *b = !*b); }
            code.reconstruct(&mut views_mut(&mut s), &erased).unwrap();
            prop_assert!(s == good);
        }
    }

    #[test]
    fn update_equals_reencode((k, m, len, seed) in case()) {
        let mut rng = StdRng::seed_from_u64(seed);
        for code in codes_for(k, m, Kernel::best()) {
            let data: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.random()).collect()).collect();
            let mut s = stripe(&*code, &data);
            let how_many = rng.random_range(1..=k);
            let changed = rand::seq::index::sample(&mut rng, k, how_many).into_vec();
            let mut new_data = data.clone();
            for &j in &changed { new_data[j] = (0..len).map(|_| rng.random()).collect(); }
            let updates: Vec<ChunkUpdate> = changed.iter().map(|&j| ChunkUpdate { index: j, old: &data[j], new: &new_data[j] }).collect();
            code.update(&updates, &mut views_mut(&mut s[k..])).unwrap();
            let expect = stripe(&*code, &new_data);
            prop_assert!(s[k..] == expect[k..]);
        }
    }

    #[test]
    fn accumulating_every_chunk_into_zeroed_parity_encodes((k, m, len, seed) in case()) {
        let mut rng = StdRng::seed_from_u64(seed);
        for code in codes_for(k, m, Kernel::best()) {
            let data: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.random()).collect()).collect();
            let expect = stripe(&*code, &data);
            let mut parity = vec![vec![0u8; len]; m];
            let order = rand::seq::index::sample(&mut rng, k, k).into_vec();
            for &j in &order {
                code.accumulate(j, &data[j], &mut views_mut(&mut parity)).unwrap();
            }
            prop_assert!(parity[..] == expect[k..]);
            prop_assert!(code.accumulate(k, &data[0], &mut views_mut(&mut parity)).is_err());
        }
    }

    #[test]
    fn locate_finds_errors_within_the_bound((k, m, len, seed) in case()) {
        let mut rng = StdRng::seed_from_u64(seed);
        for code in codes_for(k, m, Kernel::best()) {
            let n = k + m;
            let data: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.random()).collect()).collect();
            let good = stripe(&*code, &data);
            let max_f = if code.name() == "raid6" { 0 } else { m };
            let f = rng.random_range(0..=max_f.min(m));
            let t = if m - f >= 2 { rng.random_range(0..=(m - f) / 2) } else { 0 };
            let mut picked = rand::seq::index::sample(&mut rng, n, f + t).into_vec();
            let errors: Vec<usize> = { let mut e = picked.split_off(f); e.sort_unstable(); e };
            let erased = picked;
            let mut s = good.clone();
            for &e in &erased { s[e].fill(0); }
            for &e in &errors {
                // Anything from one flipped byte to a whole chunk of garbage.
                let bytes = rng.random_range(1..=len);
                for _ in 0..bytes { let b = rng.random_range(0..len); s[e][b] ^= rng.random_range(1..=255u8); }
                if s[e] == good[e] { s[e][0] ^= 1; }
            }
            match code.locate(&views(&s), &erased) {
                Ok(Located::Consistent) => prop_assert!(errors.is_empty() && f < m),
                Ok(Located::Unchecked) => prop_assert!(errors.is_empty() && f == m),
                Ok(Located::Bad(bad)) => prop_assert_eq!(bad, errors.clone()),
                Err(e) => prop_assert!(false, "{} k={} m={} f={} errors={:?}: {}", code.name(), k, m, f, errors, e),
            }
        }
    }

    #[test]
    fn locate_beyond_the_bound_never_names_a_healthy_chunk_when_it_verifies((k, m, len, seed) in case()) {
        // Beyond 2t + f <= m a wrong answer is possible in principle (another codeword is
        // nearer); what must hold is that any answer is a verified codeword.
        let mut rng = StdRng::seed_from_u64(seed);
        let code = ReedSolomon::with_kernel(k, m, Kernel::best()).unwrap();
        let data: Vec<Vec<u8>> = (0..k).map(|_| (0..len).map(|_| rng.random()).collect()).collect();
        let good = stripe(&code, &data);
        let t = (m / 2 + 1).min(k + m);
        let errors = rand::seq::index::sample(&mut rng, k + m, t).into_vec();
        let mut s = good.clone();
        for &e in &errors { for b in s[e].iter_mut() { *b ^= rng.random_range(1..=255u8); } }
        if let Ok(Located::Bad(_)) = code.locate(&views(&s), &[]) {
            let mut r = s.clone();
            let _ = code.repair(&mut views_mut(&mut r), &[]);
            let check = stripe(&code, &r[..k]);
            prop_assert!(check == r, "a located answer must be a codeword");
        }
    }
}

/// Codes that take turns rebuilding the same erasure set on one thread each get their own plan
/// (a thread remembers the plan it used last): RS, RAID-6 and XOR of one width, and a code built
/// where a dropped one may have lived.
#[test]
fn codes_taking_turns_on_one_erasure_set_rebuild_their_own_chunks() {
    let mut rng = StdRng::seed_from_u64(21);
    let data: Vec<Vec<u8>> = (0..4)
        .map(|_| (0..256).map(|_| rng.random()).collect())
        .collect();
    let rs: Box<dyn ErasureCode> = Box::new(ReedSolomon::new(4, 2).unwrap());
    let raid6: Box<dyn ErasureCode> = Box::new(Raid6::new(4).unwrap());
    for round in 0..3 {
        for code in [&rs, &raid6] {
            let good = stripe(&**code, &data);
            let mut s = good.clone();
            s[1].fill(0);
            s[4].fill(0);
            code.reconstruct(&mut views_mut(&mut s), &[1, 4]).unwrap();
            assert_eq!(s, good, "round {round}");
        }
        // Dropped and rebuilt with another shape, perhaps at the same address.
        let other = ReedSolomon::new(3 + round, 2).unwrap();
        let data: Vec<Vec<u8>> = data.iter().cycle().take(3 + round).cloned().collect();
        let good = stripe(&other, &data);
        let mut s = good.clone();
        s[1].fill(0);
        s[4].fill(0);
        other.reconstruct(&mut views_mut(&mut s), &[1, 4]).unwrap();
        assert_eq!(s, good, "round {round}");
    }
}
