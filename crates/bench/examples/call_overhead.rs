//! Profiling aid: nanoseconds per call of encode and reconstruct on tiny chunks, where the
//! per-call work (argument checks, plan lookup, pointer tables) is all there is.
//! Usage: call_overhead [k m len]
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
use stripeguard_codes::{ErasureCode, ReedSolomon};

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("a number"))
        .collect();
    let get = |i: usize, d: usize| a.get(i).copied().unwrap_or(d);
    let (k, m, len) = (get(0, 4), get(1, 1), get(2, 64));
    let code = ReedSolomon::new(k, m).unwrap();
    let mut s: Vec<Vec<u8>> = (0..k + m).map(|i| vec![i as u8; len]).collect();
    let n = (400_000_000 / (len.max(64) * (k + m))).clamp(1_000, 2_000_000);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let (d, p) = s.split_at_mut(k);
        let d: Vec<&[u8]> = d.iter().map(|x| &x[..]).collect();
        let mut p: Vec<&mut [u8]> = p.iter_mut().map(|x| &mut x[..]).collect();
        code.encode(&d, &mut p).unwrap();
    }
    let enc = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    let lost: Vec<usize> = (0..m.min(k)).collect();
    let t = std::time::Instant::now();
    for _ in 0..n {
        let mut v: Vec<&mut [u8]> = s.iter_mut().map(|x| &mut x[..]).collect();
        code.reconstruct(&mut v, &lost).unwrap();
    }
    let rec = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    println!("k={k} m={m} len={len}: encode {enc:.1} ns/call, reconstruct {rec:.1} ns/call");
}
