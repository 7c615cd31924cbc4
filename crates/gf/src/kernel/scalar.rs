//! Portable kernel and the reference for every SIMD kernel's differential tests.
//!
//! Multiplication by a constant `c` is a lookup in the 256-byte row `c * x` of a full
//! multiplication table (64 KiB, built once). XOR runs eight bytes at a time. Columns are walked in
//! tiles so that, as in the SIMD kernels, a wide code re-reads its inputs from cache.

use super::Mode;
use crate::field::mul;
use crate::tables::MulTables;
use std::sync::OnceLock;

fn mul_table() -> &'static [[u8; 256]; 256] {
    static TABLE: OnceLock<Box<[[u8; 256]; 256]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([[0u8; 256]; 256]);
        for c in 0..=255u8 {
            for x in 0..=255u8 {
                t[usize::from(c)][usize::from(x)] = mul(c, x);
            }
        }
        t
    })
}

const TILE_BYTES: usize = 1024;

pub(super) fn dot(
    t: &MulTables,
    inputs: &[&[u8]],
    old: &[&[u8]],
    outputs: &mut [&mut [u8]],
    mode: Mode,
) {
    let table = mul_table();
    let Some(len) = outputs.first().map(|o| o.len()) else {
        return;
    };
    let mut x = [0u8; TILE_BYTES];
    let mut acc = [0u8; TILE_BYTES];
    let mut start = 0;
    while start < len {
        let end = (start + TILE_BYTES).min(len);
        let n = end - start;
        for (r, o) in outputs.iter_mut().enumerate() {
            acc[..n].fill(0);
            for (i, input) in inputs.iter().enumerate() {
                let row = &table[t.coeff(i, r) as usize];
                let src = &input[start..end];
                let src: &[u8] = if mode == Mode::DeltaAdd {
                    for (d, (a, b)) in x.iter_mut().zip(src.iter().zip(&old[i][start..end])) {
                        *d = a ^ b;
                    }
                    &x[..n]
                } else {
                    src
                };
                for (a, &s) in acc.iter_mut().zip(src) {
                    *a ^= row[s as usize];
                }
            }
            let dst = &mut o[start..end];
            if mode == Mode::Set {
                dst.copy_from_slice(&acc[..n]);
            } else {
                xor_in_place(dst, &acc[..n]);
            }
        }
        start = end;
    }
}

fn xor_in_place(dst: &mut [u8], src: &[u8]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        const EIGHT: &str = "chunks_exact(8) yields 8-byte chunks";
        let v = u64::from_ne_bytes(d.try_into().expect(EIGHT))
            ^ u64::from_ne_bytes(s.try_into().expect(EIGHT));
        d.copy_from_slice(&v.to_ne_bytes());
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d ^= s;
    }
}

pub(super) fn xor(inputs: &[&[u8]], output: &mut [u8], accumulate: bool) {
    if !accumulate {
        output.fill(0);
    }
    for x in inputs {
        xor_in_place(output, x);
    }
}
