//! Golden vectors from independent implementations, compared live: ISA-L 2.32 (built from source
//! by the `erasure-isa-l-sys` crate) for Reed-Solomon, and the Linux kernel's RAID-6 algorithm
//! (`lib/raid6/int.uc`: Horner's rule with multiply-by-2) for P + Q.

use rand::{rngs::StdRng, Rng, SeedableRng};
use stripeguard_codes::{ChunkUpdate, ErasureCode, Raid6, ReedSolomon};
use stripeguard_gf::{Kernel, KernelKind};
use stripeguard_isal_ref::{self as isal, Reference};

fn kernels() -> Vec<Kernel> {
    KernelKind::available()
        .into_iter()
        .map(|k| Kernel::new(k).unwrap())
        .collect()
}

fn random_chunks(rng: &mut StdRng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect()
}

const SHAPES: [(usize, usize); 11] = [
    (1, 1),
    (32, 8),
    (48, 16),
    (4, 1),
    (6, 2),
    (10, 4),
    (3, 7),
    (17, 3),
    (64, 10),
    (64, 64),
    (200, 55),
];

#[test]
fn cauchy_matrix_equals_isal() {
    for (k, m) in SHAPES {
        let ours = ReedSolomon::with_kernel(k, m, Kernel::best()).unwrap();
        let theirs = isal::cauchy_matrix(k, m);
        assert_eq!(
            ours.parity_matrix().as_bytes(),
            &theirs[k * k..],
            "k={k} m={m}"
        );
    }
}

#[test]
fn field_multiplication_equals_isal() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(stripeguard_gf::field::mul(a, b), isal::gf_mul(a, b));
        }
    }
}

#[test]
fn rs_parity_equals_isal_ec_encode_data() {
    let mut rng = StdRng::seed_from_u64(10);
    for kernel in kernels() {
        for (k, m) in SHAPES {
            for len in [1, 64, 4096 + 7, 65_536] {
                let data = random_chunks(&mut rng, k, len);
                let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
                let mut ours = vec![vec![0u8; len]; m];
                let mut theirs = vec![vec![0u8; len]; m];
                let code = ReedSolomon::with_kernel(k, m, kernel).unwrap();
                code.encode(
                    &refs,
                    &mut ours.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
                )
                .unwrap();
                Reference::cauchy(k, m).encode(
                    &refs,
                    &mut theirs.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
                );
                assert!(
                    ours == theirs,
                    "{kernel:?} k={k} m={m} len={len}: parity differs from ISA-L"
                );
            }
        }
    }
}

#[test]
fn rs_reconstruction_equals_isal_decode() {
    let mut rng = StdRng::seed_from_u64(11);
    for kernel in kernels() {
        for (k, m) in SHAPES {
            let len = 4096 + 13;
            let code = ReedSolomon::with_kernel(k, m, kernel).unwrap();
            let reference = Reference::cauchy(k, m);
            let data = random_chunks(&mut rng, k, len);
            let mut stripe = data.clone();
            stripe.extend(vec![vec![0u8; len]; m]);
            {
                let (d, p) = stripe.split_at_mut(k);
                let refs: Vec<&[u8]> = d.iter().map(|x| &x[..]).collect();
                reference.encode(
                    &refs,
                    &mut p.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
                );
            }
            for round in 0..7 {
                let count = rng.random_range(1..=m);
                // Round 4 loses the first data chunks, as the benchmark does (for 64 + 64 every
                // data chunk, rebuilt by the dyadic program of the inverse); rounds 5 and 6 a
                // whole 8-aligned block of data and up to 4 more (the solve through the block).
                let mut erased: Vec<usize> = if round >= 5 && m >= 9 && k >= 16 {
                    let b = rng.random_range(0..k / 8);
                    let others: Vec<usize> = (0..k).filter(|&j| j / 8 != b).collect();
                    let more = rng.random_range(1..=(m - 8).min(4));
                    (8 * b..8 * b + 8)
                        .chain(
                            rand::seq::index::sample(&mut rng, others.len(), more)
                                .into_iter()
                                .map(|i| others[i]),
                        )
                        .collect()
                } else if round >= 5 {
                    continue;
                } else if round == 4 {
                    (0..m.min(k)).collect()
                } else if round == 3 {
                    // Data chunks only (wide Cauchy codes solve these through the parity).
                    rand::seq::index::sample(&mut rng, k, count.min(k)).into_vec()
                } else {
                    rand::seq::index::sample(&mut rng, k + m, count).into_vec()
                };
                erased.sort_unstable();
                // ISA-L's answer.
                let (tables, sources) = reference.decode_tables(&erased);
                let ins: Vec<&[u8]> = sources.iter().map(|&s| &stripe[s][..]).collect();
                let mut theirs = vec![vec![0u8; len]; erased.len()];
                isal::encode_with_tables(
                    &tables,
                    &ins,
                    &mut theirs.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
                );
                // Ours, in place over garbage.
                let mut damaged = stripe.clone();
                for &e in &erased {
                    damaged[e].iter_mut().for_each(|b| *b = 0xee);
                }
                code.reconstruct(
                    &mut damaged.iter_mut().map(|x| &mut x[..]).collect::<Vec<_>>(),
                    &erased,
                )
                .unwrap();
                for (slot, &e) in erased.iter().enumerate() {
                    assert!(
                        damaged[e] == theirs[slot],
                        "{kernel:?} k={k} m={m} erased={erased:?}"
                    );
                    assert!(damaged[e] == stripe[e]);
                }
            }
        }
    }
}

/// `bytes` copied to a 32-byte aligned place in a buffer of its own: the buffer and where the
/// copy starts.
fn aligned(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; bytes.len() + 32];
    let at = buf.as_ptr().align_offset(32);
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    (buf, at)
}

#[test]
fn rs_update_equals_isal_ec_encode_data_update() {
    let mut rng = StdRng::seed_from_u64(12);
    for kernel in kernels() {
        for (k, m) in SHAPES {
            let len = 8192 + 3;
            let code = ReedSolomon::with_kernel(k, m, kernel).unwrap();
            let reference = Reference::cauchy(k, m);
            let data = random_chunks(&mut rng, k, len);
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut parity = vec![vec![0u8; len]; m];
            code.encode(
                &refs,
                &mut parity.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
            )
            .unwrap();
            let j = rng.random_range(0..k);
            let new: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let delta: Vec<u8> = new.iter().zip(&data[j]).map(|(a, b)| a ^ b).collect();
            let mut theirs = parity.clone();
            let mut theirs_rmw = parity.clone();
            // ISA-L's xor_gen needs its buffers 32-byte aligned.
            let ((old_a, o1), (new_a, o2)) = (aligned(&data[j]), aligned(&new));
            let (mut scratch, o3) = aligned(&vec![0u8; len]);
            isal::rmw_with_tables(
                reference.encode_tables(),
                k,
                j,
                &old_a[o1..o1 + len],
                &new_a[o2..o2 + len],
                &mut scratch[o3..o3 + len],
                &mut theirs_rmw
                    .iter_mut()
                    .map(|p| &mut p[..])
                    .collect::<Vec<_>>(),
            );
            isal::update_with_tables(
                reference.encode_tables(),
                k,
                j,
                &delta,
                &mut theirs.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
            );
            code.update(
                &[ChunkUpdate {
                    index: j,
                    old: &data[j],
                    new: &new,
                }],
                &mut parity.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
            )
            .unwrap();
            assert!(
                parity == theirs,
                "{kernel:?} k={k} m={m}: update differs from ISA-L"
            );
            assert!(
                parity == theirs_rmw,
                "ISA-L's xor_gen + update path differs"
            );
            // accumulate is ec_encode_data_update itself: the same delta, the same bytes.
            isal::update_with_tables(
                reference.encode_tables(),
                k,
                j,
                &delta,
                &mut theirs.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
            );
            code.accumulate(
                j,
                &delta,
                &mut parity.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
            )
            .unwrap();
            assert!(
                parity == theirs,
                "{kernel:?} k={k} m={m}: accumulate differs from ISA-L"
            );
        }
    }
}

/// Linux `lib/raid6/int.uc` gen_syndrome: Horner's rule from the highest data disk down.
fn linux_raid6(data: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let len = data[0].len();
    let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
    for b in 0..len {
        let z0 = data.len() - 1;
        let (mut wp, mut wq) = (data[z0][b], data[z0][b]);
        for z in (0..z0).rev() {
            let wd = data[z][b];
            wp ^= wd;
            // SHLBYTE / MASK: multiply by 2 with the 0x1d reduction.
            wq = (wq << 1) ^ if wq & 0x80 != 0 { 0x1d } else { 0 };
            wq ^= wd;
        }
        p[b] = wp;
        q[b] = wq;
    }
    (p, q)
}

#[test]
fn raid6_pq_equals_linux_definition() {
    let mut rng = StdRng::seed_from_u64(13);
    for kernel in kernels() {
        for k in [1, 2, 3, 6, 14, 62, 253] {
            let len = 4096 + 5;
            let data = random_chunks(&mut rng, k, len);
            let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut pq = vec![vec![0u8; len]; 2];
            Raid6::with_kernel(k, kernel)
                .unwrap()
                .encode(
                    &refs,
                    &mut pq.iter_mut().map(|p| &mut p[..]).collect::<Vec<_>>(),
                )
                .unwrap();
            let (p, q) = linux_raid6(&data);
            assert!(
                pq[0] == p && pq[1] == q,
                "{kernel:?} k={k}: P/Q differ from Linux"
            );
        }
    }
}
