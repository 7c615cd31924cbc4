//! Profiling aid: a tight loop of one-chunk updates for `perf record`, with the three buffers
//! placed at chosen offsets modulo 4 KiB (to see 4K-aliasing between stores and later loads).
//! Usage: update_probe [k m len old_off new_off parity_off]
use stripeguard_codes::{ChunkUpdate, ErasureCode, ReedSolomon};

fn placed(backing: &mut [u8], offset: usize, len: usize) -> &mut [u8] {
    let base = backing.as_ptr() as usize;
    let start = (4096 - base % 4096) % 4096 + offset;
    &mut backing[start..start + len]
}

fn main() {
    let parse = |s: String| match s.strip_prefix("0x") {
        Some(h) => usize::from_str_radix(h, 16).expect("hex offset"),
        None => s.parse().expect("decimal number"),
    };
    let a: Vec<usize> = std::env::args().skip(1).map(parse).collect();
    let get = |i: usize, d: usize| a.get(i).copied().unwrap_or(d);
    let (k, m, len) = (get(0, 4), get(1, 1), get(2, 4096));
    let (oo, no, po) = (get(3, 0x470), get(4, 0x480), get(5, 0x490));
    let code = ReedSolomon::new(k, m).unwrap();
    let mut b1 = vec![1u8; len + 8192];
    let mut b2 = vec![2u8; len + 8192];
    let mut bp: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; len + 8192]).collect();
    let old_ref: &[u8] = placed(&mut b1, oo, len);
    let new_ref: &[u8] = placed(&mut b2, no, len);
    let mut parity: Vec<&mut [u8]> = bp.iter_mut().map(|b| placed(b, po, len)).collect();
    let n = 1_000_000 / m.max(1);
    let t = std::time::Instant::now();
    for _ in 0..n {
        code.update(
            &[ChunkUpdate {
                index: 1 % k,
                old: old_ref,
                new: new_ref,
            }],
            &mut parity,
        )
        .unwrap();
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "k={k} m={m} len={len} offsets {oo:#x}/{no:#x}/{po:#x}: {:.1} ns/call, {:.2} GB/s",
        dt * 1e9 / n as f64,
        (n * len) as f64 / dt / 1e9
    );
}
