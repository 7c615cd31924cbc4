//! Dyadic programs against the plain definition `y[i] (^)= sum_j h[rows[i] ^ cols[j]] x[j]`,
//! on every SIMD kernel this CPU has, for the Cauchy blocks of wide codes and for random
//! functions, position sets, lengths and both modes.

use rand::{rngs::StdRng, Rng, SeedableRng};
use stripeguard_gf::dyadic::{cauchy_function, dyadic_block, DyadicProgram};
use stripeguard_gf::{field, Kernel, KernelKind, Matrix};

fn expected(h: &[u8], rows: &[usize], cols: &[usize], x: &[Vec<u8>], y: &mut [Vec<u8>], add: bool) {
    for (i, &r) in rows.iter().enumerate() {
        for b in 0..y[i].len() {
            let mut v = if add { y[i][b] } else { 0 };
            for (j, &c) in cols.iter().enumerate() {
                v ^= field::mul(h[r ^ c], x[j][b]);
            }
            y[i][b] = v;
        }
    }
}

fn check(
    kernel: &Kernel,
    rng: &mut StdRng,
    h: &[u8],
    rows: &[usize],
    cols: &[usize],
    len: usize,
    add: bool,
) {
    let layouts = [
        ("chosen", Some(DyadicProgram::new(h, rows, cols, add))),
        (
            "recursive",
            Some(DyadicProgram::recursive(h, rows, cols, add)),
        ),
        ("cross", DyadicProgram::cross(h, rows, cols, add)),
    ];
    for (layout, p) in layouts {
        if let Some(p) = p {
            check_one(kernel, rng, &p, layout, h, rows, cols, len, add);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_one(
    kernel: &Kernel,
    rng: &mut StdRng,
    p: &DyadicProgram,
    layout: &str,
    h: &[u8],
    rows: &[usize],
    cols: &[usize],
    len: usize,
    add: bool,
) {
    let x: Vec<Vec<u8>> = (0..cols.len())
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect();
    let start: Vec<Vec<u8>> = (0..rows.len())
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect();
    let mut want = start.clone();
    expected(h, rows, cols, &x, &mut want, add);
    let mut got = start.clone();
    let xs: Vec<&[u8]> = x.iter().map(|v| &v[..]).collect();
    let mut ys: Vec<&mut [u8]> = got.iter_mut().map(|v| &mut v[..]).collect();
    assert!(kernel.dyadic(p, &xs, &mut ys));
    assert!(
        got == want,
        "{:?} {layout}: {} rows x {} cols, len {len}, add {add}",
        kernel.kind(),
        rows.len(),
        cols.len()
    );
}

fn simd_kernels() -> Vec<Kernel> {
    let kinds: Vec<KernelKind> = KernelKind::available()
        .into_iter()
        .filter(|&k| k != KernelKind::Scalar)
        .collect();
    println!("kernels under test: {kinds:?}");
    kinds.into_iter().map(|k| Kernel::new(k).unwrap()).collect()
}

#[test]
fn cauchy_blocks_of_wide_codes() {
    let h = cauchy_function();
    let mut rng = StdRng::seed_from_u64(1);
    for kernel in simd_kernels() {
        for (k, m) in [(64, 64), (64, 10), (32, 32), (48, 16), (16, 4), (100, 20)] {
            let rows: Vec<usize> = (k..k + m).collect();
            let cols: Vec<usize> = (0..k).collect();
            for len in [1, 64, 2048 + 64 + 5, 4096] {
                check(&kernel, &mut rng, &h, &rows, &cols, len, false);
            }
            check(&kernel, &mut rng, &h, &rows, &cols, 130, true);
        }
    }
}

/// Regions longer than one step of a program without scratch (16 KiB, the zero region's size),
/// with blocks cut by `k` (absent positions read zeros) and with full blocks.
#[test]
fn regions_longer_than_one_step() {
    let h = cauchy_function();
    let mut rng = StdRng::seed_from_u64(5);
    for kernel in simd_kernels() {
        for (k, m) in [(60, 10), (64, 10), (21, 3)] {
            let rows: Vec<usize> = (k..k + m).collect();
            let cols: Vec<usize> = (0..k).collect();
            check(
                &kernel,
                &mut rng,
                &h,
                &rows,
                &cols,
                (48 << 10) + 64 + 5,
                false,
            );
        }
    }
}

#[test]
fn random_functions_positions_and_lengths() {
    let mut rng = StdRng::seed_from_u64(2);
    for kernel in simd_kernels() {
        for case in 0..80 {
            let n = [8usize, 16, 32, 64, 128][case % 5];
            let h: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            let pick = |rng: &mut StdRng| {
                let count = rng.random_range(1..=n);
                rand::seq::index::sample(rng, n, count).into_vec()
            };
            let rows = pick(&mut rng);
            let cols = pick(&mut rng);
            let len = [0, 1, 63, 64, 65, 200, 2048, 2049, 4160][rng.random_range(0..9)];
            let add = rng.random_bool(0.5);
            check(&kernel, &mut rng, &h, &rows, &cols, len, add);
        }
    }
}

/// Full blocks of 32 and 64 positions inside random functions of 64 and 128 (the two-level
/// step with 8 x 8 and 16 x 16 register blocks), both halves each way, both modes, a length
/// longer than one step.
#[test]
fn full_blocks_of_random_functions() {
    let mut rng = StdRng::seed_from_u64(6);
    for kernel in simd_kernels() {
        for n in [64usize, 128] {
            let h: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            let (lo, hi): (Vec<usize>, Vec<usize>) = ((0..n / 2).collect(), (n / 2..n).collect());
            for (rows, cols) in [(&hi, &lo), (&lo, &hi)] {
                for (len, add) in [(4096, false), (192, true), ((16 << 10) + 64 + 3, false)] {
                    check(&kernel, &mut rng, &h, rows, cols, len, add);
                }
            }
        }
    }
}

#[test]
fn scalar_has_no_runner() {
    let k = Kernel::new(KernelKind::Scalar).unwrap();
    let p = DyadicProgram::new(&[0, 1], &[1], &[0], false);
    let x = [1u8];
    let mut y = [0u8];
    assert!(!k.runs_dyadic());
    assert!(!k.dyadic(&p, &[&x], &mut [&mut y]));
    assert_eq!(y, [0]);
}

/// Run solve program `p` on random inputs (one region of `len` bytes per column, then one per
/// row, the held addends) and return its outputs beside `inv * (held + D x)` by the definition.
#[allow(clippy::too_many_arguments)]
fn run_solve(
    kernel: &Kernel,
    rng: &mut StdRng,
    p: &DyadicProgram,
    h: &[u8],
    rows: &[usize],
    cols: &[usize],
    inv: &Matrix,
    len: usize,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let x: Vec<Vec<u8>> = (0..cols.len() + rows.len())
        .map(|_| (0..len).map(|_| rng.random()).collect())
        .collect();
    // held + D x, then inv times that.
    let mut mid: Vec<Vec<u8>> = x[cols.len()..].to_vec();
    expected(h, rows, cols, &x[..cols.len()], &mut mid, true);
    let want: Vec<Vec<u8>> = (0..inv.rows())
        .map(|o| {
            (0..len)
                .map(|b| (0..rows.len()).fold(0, |a, i| a ^ field::mul(inv[(o, i)], mid[i][b])))
                .collect()
        })
        .collect();
    let mut got = vec![vec![0x5au8; len]; inv.rows()];
    let xs: Vec<&[u8]> = x.iter().map(|v| &v[..]).collect();
    let mut ys: Vec<&mut [u8]> = got.iter_mut().map(|v| &mut v[..]).collect();
    assert!(kernel.dyadic(p, &xs, &mut ys));
    (got, want)
}

/// `solve`: `out = inv * (held + D x)` against the definition, for random functions, position
/// sets, small matrices and lengths, and for the rebuild of the first 10 data chunks of 64 + 10.
#[test]
fn solve_is_inverse_times_held_plus_product() {
    let mut rng = StdRng::seed_from_u64(3);
    let h64 = cauchy_function();
    for kernel in simd_kernels() {
        for case in 0..40 {
            let (h, rows, cols): (Vec<u8>, Vec<usize>, Vec<usize>) = if case == 0 {
                (h64.clone(), (64..74).collect(), (10..64).collect())
            } else {
                let n = [8usize, 16, 32, 64, 128][case % 5];
                let h: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                let rows = {
                    let c = rng.random_range(1..=n.min(20));
                    rand::seq::index::sample(&mut rng, n, c).into_vec()
                };
                let cols = {
                    let c = rng.random_range(1..=n);
                    rand::seq::index::sample(&mut rng, n, c).into_vec()
                };
                (h, rows, cols)
            };
            let outs = rng.random_range(1..=rows.len());
            let inv = Matrix::from_rows(
                outs,
                rows.len(),
                (0..outs * rows.len()).map(|_| rng.random()).collect(),
            );
            let Some(p) = DyadicProgram::solve(&h, &rows, &cols, &inv) else {
                continue;
            };
            let len = [64, 130, 4096, 4160 + 7][rng.random_range(0..4)];
            let (got, want) = run_solve(&kernel, &mut rng, &p, &h, &rows, &cols, &inv, len);
            assert!(
                got == want,
                "{:?} case {case}: {} rows, {} cols, {outs} outs, len {len}",
                kernel.kind(),
                rows.len(),
                cols.len()
            );
        }
    }
}

/// `solve_lost` when the lost positions hold a whole 8-aligned block and `r2` <= 4 more, and the
/// rows a whole 8-row group and a prefix of `r2` rows of another (the solve folded into the
/// walk: `CrossParts::finish_by_block`): `d_L = C_{S,L}^-1 (held + C_{S,K} x)` against the
/// definition, and the product count that shows that solve was taken (one more block walked and
/// `r2 (r2 + 8)` products, not the dense finish's `(8 + r2)^2`).
#[test]
fn solve_lost_through_a_whole_lost_block() {
    let mut rng = StdRng::seed_from_u64(5);
    let cauchy = cauchy_function();
    for kernel in simd_kernels() {
        let mut taken = 0;
        for case in 0..24 {
            let r2 = 1 + case % 4;
            let (h, rows, lost, cols): (Vec<u8>, Vec<usize>, Vec<usize>, Vec<usize>) = if case < 4 {
                // 64 + (8 + r2) losing its first 8 + r2 data chunks, as the benchmark does.
                let lost: Vec<usize> = (0..8 + r2).collect();
                (
                    cauchy.clone(),
                    (64..72 + r2).collect(),
                    lost,
                    (8 + r2..64).collect(),
                )
            } else {
                let n = [64usize, 128][case % 2];
                let h: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                let blocks = rand::seq::index::sample(&mut rng, n / 8, 3).into_vec();
                let (g, g2, b) = (blocks[0], blocks[1], blocks[2]);
                let rows: Vec<usize> = (8 * g..8 * g + 8).chain(8 * g2..8 * g2 + r2).collect();
                let others: Vec<usize> = (0..n).filter(|&p| p / 8 != b).collect();
                let mut pick = rand::seq::index::sample(&mut rng, others.len(), others.len() / 2)
                    .into_iter()
                    .map(|i| others[i]);
                let lost: Vec<usize> = (8 * b..8 * b + 8).chain(pick.by_ref().take(r2)).collect();
                (h, rows, lost, pick.collect())
            };
            let Ok(inv) = dyadic_block(&h, &rows, &lost).inverse() else {
                continue;
            };
            let p = DyadicProgram::solve_lost(&h, &rows, &cols, &lost).expect("a cross layout");
            // The lost block `A11 = C[G, B]`: the block solve applies when it is invertible.
            if dyadic_block(&h, &rows[..8], &lost[..8]).inverse().is_ok() {
                let mut column_blocks: Vec<usize> = cols.iter().map(|&j| j / 8).collect();
                column_blocks.sort_unstable();
                column_blocks.dedup();
                let per_block = 27 + [0, 8, 12, 16, 18][r2];
                let want = (column_blocks.len() + 1) * per_block + r2 * (r2 + 8);
                assert_eq!(
                    p.products(),
                    want,
                    "case {case}: the solve through the block"
                );
                taken += 1;
            }
            let len = [64, 4096, 4160 + 7][rng.random_range(0..3)];
            let (got, want) = run_solve(&kernel, &mut rng, &p, &h, &rows, &cols, &inv, len);
            assert!(
                got == want,
                "{:?} case {case}: r2 {r2}, len {len}",
                kernel.kind()
            );
        }
        assert!(
            taken >= 8,
            "the solve through the block was taken {taken} times"
        );
    }
}

/// Regions that start at every misalignment (shared by all inputs, or not), so the aligned body,
/// the padded head and the padded tail all run.
#[test]
fn misaligned_regions() {
    let mut rng = StdRng::seed_from_u64(4);
    let h = cauchy_function();
    let (rows, cols): (Vec<usize>, Vec<usize>) = ((64..74).collect(), (0..64).collect());
    for kernel in simd_kernels() {
        let p = DyadicProgram::new(&h, &rows, &cols, false);
        for (shift, len) in [
            (0, 4096),
            (1, 4096),
            (16, 4160 + 5),
            (63, 70),
            (48, 10),
            (5, 0),
        ] {
            let store: Vec<Vec<u8>> = (0..cols.len())
                .map(|_| (0..len + 128).map(|_| rng.random()).collect())
                .collect();
            // The first input is misaligned differently from the rest in the odd cases.
            let x: Vec<&[u8]> = store
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let base = v.as_ptr().align_offset(64);
                    let s = if i == 0 && shift % 2 == 1 {
                        shift + 7
                    } else {
                        shift
                    };
                    &v[base + s..base + s + len]
                })
                .collect();
            let owned: Vec<Vec<u8>> = x.iter().map(|v| v.to_vec()).collect();
            let mut want = vec![vec![0u8; len]; rows.len()];
            expected(&h, &rows, &cols, &owned, &mut want, false);
            let mut out_store: Vec<Vec<u8>> = vec![vec![0u8; len + 128]; rows.len()];
            let mut ys: Vec<&mut [u8]> = out_store
                .iter_mut()
                .map(|v| {
                    let base = v.as_ptr().align_offset(64);
                    &mut v[base + 3..base + 3 + len]
                })
                .collect();
            assert!(kernel.dyadic(&p, &x, &mut ys));
            let got: Vec<Vec<u8>> = ys.iter().map(|v| v.to_vec()).collect();
            assert!(got == want, "{:?} shift {shift} len {len}", kernel.kind());
        }
    }
}
