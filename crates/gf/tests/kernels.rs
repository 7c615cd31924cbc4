//! Differential tests: every kernel this CPU supports against the scalar reference, and the
//! scalar reference against plain field arithmetic, over all lengths 0..=1024, random larger
//! lengths, every misalignment 0..63, and guard bytes after every region.

use rand::{rngs::StdRng, Rng, SeedableRng};
use stripeguard_gf::{field, Kernel, KernelKind, Matrix, Mode, MulTables};

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xa5;

/// A region placed at `offset` inside its allocation, followed by guard bytes.
struct Region {
    buf: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Region {
    fn random(rng: &mut StdRng, offset: usize, len: usize) -> Region {
        let mut buf = vec![GUARD_BYTE; offset + len + GUARD];
        rng.fill(&mut buf[offset..offset + len]);
        Region { buf, offset, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.offset..self.offset + self.len]
    }
    fn guards_intact(&self) -> bool {
        self.buf[..self.offset]
            .iter()
            .chain(&self.buf[self.offset + self.len..])
            .all(|&b| b == GUARD_BYTE)
    }
}

/// The definition, byte by byte, with nothing shared with any kernel but `field::mul`.
fn oracle(m: &Matrix, inputs: &[&[u8]], old: &[&[u8]], outputs: &mut [Vec<u8>], mode: Mode) {
    for (r, out) in outputs.iter_mut().enumerate() {
        for b in 0..out.len() {
            let mut v = 0;
            for (i, x) in inputs.iter().enumerate() {
                let x = if mode == Mode::DeltaAdd {
                    x[b] ^ old[i][b]
                } else {
                    x[b]
                };
                v ^= field::mul(m[(r, i)], x);
            }
            out[b] = if mode == Mode::Set { v } else { out[b] ^ v };
        }
    }
}

/// Run one case on `kernel` and compare with the oracle; return false on any difference.
fn check_case(
    kernel: &Kernel,
    rng: &mut StdRng,
    k: usize,
    m: usize,
    len: usize,
    offset: usize,
    mode: Mode,
) {
    let matrix = Matrix::from_rows(m, k, (0..m * k).map(|_| rng.random()).collect());
    let tables = MulTables::new(&matrix);
    let off = |i: usize| (offset + 17 * i) % 64;
    let inputs: Vec<Region> = (0..k).map(|i| Region::random(rng, off(i), len)).collect();
    let olds: Vec<Region> = (0..k)
        .map(|i| Region::random(rng, off(i + 3), len))
        .collect();
    let mut outputs: Vec<Region> = (0..m)
        .map(|r| Region::random(rng, off(r + 5), len))
        .collect();
    let mut expected: Vec<Vec<u8>> = outputs.iter().map(|o| o.bytes().to_vec()).collect();

    let ins: Vec<&[u8]> = inputs.iter().map(Region::bytes).collect();
    let old: Vec<&[u8]> = olds.iter().map(Region::bytes).collect();
    oracle(&matrix, &ins, &old, &mut expected, mode);
    {
        let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(Region::bytes_mut).collect();
        kernel.dot(&tables, &ins, &old, &mut outs, mode);
    }
    for (r, o) in outputs.iter().enumerate() {
        assert!(
            o.guards_intact(),
            "{kernel:?} wrote outside output {r} (k={k} m={m} len={len} off={offset})"
        );
        if o.bytes() != expected[r] {
            let b = o
                .bytes()
                .iter()
                .zip(&expected[r])
                .position(|(a, b)| a != b)
                .unwrap();
            panic!("{kernel:?} {mode:?} k={k} m={m} len={len} offset={offset}: output {r} differs at byte {b}");
        }
    }
    for r in inputs.iter().chain(&olds) {
        assert!(
            r.guards_intact(),
            "{kernel:?} wrote into an input's guard bytes"
        );
    }
}

fn kernels() -> Vec<Kernel> {
    let kinds = KernelKind::available();
    println!("kernels under test: {kinds:?}");
    kinds.into_iter().map(|k| Kernel::new(k).unwrap()).collect()
}

const MODES: [Mode; 3] = [Mode::Set, Mode::Add, Mode::DeltaAdd];

#[test]
fn every_length_up_to_1024() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(1);
        for len in 0..=1024 {
            let k = rng.random_range(1..=6);
            let m = rng.random_range(1..=5);
            check_case(&kernel, &mut rng, k, m, len, len * 7 % 64, MODES[len % 3]);
        }
    }
}

#[test]
fn every_misalignment() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(2);
        for offset in 0..64 {
            for len in [1, 63, 64, 65, 130, 257, 4096 + 33] {
                for mode in MODES {
                    check_case(&kernel, &mut rng, 3, 2, len, offset, mode);
                }
            }
        }
    }
}

#[test]
fn random_shapes_and_larger_lengths() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..60 {
            let k = rng.random_range(1..=24);
            let m = rng.random_range(1..=40); // crosses every output-group split
            let len = rng.random_range(1025..20_000);
            let mode = MODES[rng.random_range(0..3)];
            let offset = rng.random_range(0..64);
            check_case(&kernel, &mut rng, k, m, len, offset, mode);
        }
    }
}

#[test]
fn wide_code_64_by_64() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(4);
        for len in [4096, 9000] {
            check_case(&kernel, &mut rng, 64, 64, len, 5, Mode::Set);
        }
    }
}

#[test]
fn xor_matches_definition() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(5);
        for len in (0..=1024).chain([5000, 65_536 + 3]) {
            let k = 1 + len % 7;
            let inputs: Vec<Region> = (0..k)
                .map(|i| Region::random(&mut rng, (len + i) % 64, len))
                .collect();
            let ins: Vec<&[u8]> = inputs.iter().map(Region::bytes).collect();
            for accumulate in [false, true] {
                let mut out = Region::random(&mut rng, len % 61, len);
                let mut expected = out.bytes().to_vec();
                for (b, e) in expected.iter_mut().enumerate() {
                    let v = ins.iter().fold(0, |a, x| a ^ x[b]);
                    *e = if accumulate { *e ^ v } else { v };
                }
                kernel.xor(&ins, out.bytes_mut(), accumulate);
                assert!(out.guards_intact());
                assert_eq!(out.bytes(), &expected[..], "{kernel:?} xor len={len}");
            }
        }
    }
}

#[test]
fn mul_and_mul_add() {
    for kernel in kernels() {
        let mut rng = StdRng::seed_from_u64(6);
        for c in 0..=255u8 {
            let src: Vec<u8> = (0..300).map(|_| rng.random()).collect();
            let mut dst = vec![0u8; 300];
            kernel.mul(c, &src, &mut dst);
            assert!(dst.iter().zip(&src).all(|(d, s)| *d == field::mul(c, *s)));
            let before = dst.clone();
            kernel.mul_add(c, &src, &mut dst);
            assert!(dst
                .iter()
                .zip(&before)
                .zip(&src)
                .all(|((d, b), s)| *d == b ^ field::mul(c, *s)));
        }
    }
}

#[test]
fn unsupported_or_unknown_kernel_is_an_error() {
    assert!(KernelKind::parse("sse9").is_err());
    for kind in KernelKind::ALL {
        assert_eq!(Kernel::new(kind).is_ok(), kind.supported());
    }
}
