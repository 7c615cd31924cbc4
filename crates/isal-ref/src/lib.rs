//! ISA-L as an independent reference: the erasure-code API exactly as ISA-L's own tests drive it.
//!
//! Only tests and the benchmark (feature `isal`) link this crate. Every function copies the
//! caller's slices into raw pointer arrays; lengths are checked here so the FFI calls are sound.

#![warn(clippy::unwrap_used)]

use erasure_isa_l_sys as sys;
use std::os::raw::c_int;

/// `n` as the C `int` ISA-L takes for counts and lengths. Checked: a value that does not fit
/// would reach the C side truncated, sizes that no longer match the buffers. Panics, like the
/// other shape checks here (a caller bug: no code or region is that large).
fn int(n: usize) -> c_int {
    c_int::try_from(n).expect("count or length exceeds a C int")
}

/// ISA-L's `(k + m) x k` Cauchy generator (`gf_gen_cauchy1_matrix`), row-major.
pub fn cauchy_matrix(k: usize, m: usize) -> Vec<u8> {
    let mut a = vec![0u8; (k + m) * k];
    let (rows, cols) = (int(k + m), int(k));
    // SAFETY: `a` holds (k + m) * k bytes, the `rows x cols` matrix the function writes.
    unsafe { sys::gf_gen_cauchy1_matrix(a.as_mut_ptr(), rows, cols) };
    a
}

/// `ec_init_tables` for an `rows x k` coefficient matrix.
pub fn init_tables(k: usize, rows: usize, coeffs: &[u8]) -> Vec<u8> {
    assert_eq!(coeffs.len(), k * rows);
    let mut a = coeffs.to_vec();
    let mut t = vec![0u8; 32 * k * rows];
    let (k_c, rows_c) = (int(k), int(rows));
    // SAFETY: sizes as documented by ISA-L: a is rows*k (asserted), tables are 32*k*rows.
    unsafe { sys::ec_init_tables(k_c, rows_c, a.as_mut_ptr(), t.as_mut_ptr()) };
    t
}

/// The common length of the regions, as a C `int` (panics if they differ or it does not fit).
fn check(inputs: &[&[u8]], outputs: &[&mut [u8]]) -> c_int {
    let len = outputs.first().map_or(0, |o| o.len());
    assert!(inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len));
    int(len)
}

/// `ec_encode_data`: `outputs = tables * inputs`.
pub fn encode_with_tables(tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    let len = check(inputs, outputs);
    assert_eq!(tables.len(), 32 * inputs.len() * outputs.len());
    let mut ins: Vec<*mut u8> = inputs.iter().map(|i| i.as_ptr() as *mut u8).collect();
    let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    let (k, rows) = (int(inputs.len()), int(outputs.len()));
    // SAFETY: every region is `len` bytes (`check`), the tables 32 * k * rows (asserted), and
    // the pointer arrays hold k and rows entries; ISA-L only reads the inputs and tables, so
    // their `*mut` casts are never written through.
    unsafe {
        sys::ec_encode_data(
            len,
            k,
            rows,
            tables.as_ptr() as *mut u8,
            ins.as_mut_ptr(),
            outs.as_mut_ptr(),
        )
    };
}

/// `ec_encode_data_update`: `outputs ^= tables[:, vec_i] * data` for data chunk `vec_i` of `k`.
pub fn update_with_tables(
    tables: &[u8],
    k: usize,
    vec_i: usize,
    data: &[u8],
    outputs: &mut [&mut [u8]],
) {
    let len = check(&[data], outputs);
    assert!(vec_i < k);
    assert_eq!(tables.len(), 32 * k * outputs.len());
    let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    let (k, rows, vec_i) = (int(k), int(outputs.len()), int(vec_i));
    // SAFETY: regions are `len` bytes (`check`); tables sized for k x rows (asserted) and
    // `vec_i < k`; ISA-L only reads `data` and the tables, never through their `*mut` casts.
    unsafe {
        sys::ec_encode_data_update(
            len,
            k,
            rows,
            vec_i,
            tables.as_ptr() as *mut u8,
            data.as_ptr() as *mut u8,
            outs.as_mut_ptr(),
        )
    };
}

// ISA-L's RAID module is in the same library; the -sys crate's bindings cover only gf_/ec_.
extern "C" {
    fn xor_gen(vects: c_int, len: c_int, array: *mut *mut std::ffi::c_void) -> c_int;
}

/// `xor_gen`: `output = a ^ b` (ISA-L's RAID-5 parity routine).
///
/// ISA-L requires every pointer aligned to 32 bytes (raid.h); an unaligned one panics here
/// instead of faulting inside its AVX loads.
pub fn xor2(a: &[u8], b: &[u8], output: &mut [u8]) {
    let len = check(&[a, b], &[&mut *output]);
    assert!(
        [a.as_ptr(), b.as_ptr(), output.as_ptr()]
            .iter()
            .all(|p| (*p as usize).is_multiple_of(32)),
        "ISA-L's xor_gen needs 32-byte aligned buffers"
    );
    let mut ptrs = [
        a.as_ptr() as *mut std::ffi::c_void,
        b.as_ptr() as *mut std::ffi::c_void,
        output.as_mut_ptr() as *mut std::ffi::c_void,
    ];
    // SAFETY: three regions of `len` bytes, 32-byte aligned (asserted); xor_gen reads the first
    // two and writes the last (`output`, borrowed mutably).
    let rc = unsafe { xor_gen(3, len, ptrs.as_mut_ptr()) };
    assert_eq!(rc, 0, "xor_gen failed");
}

/// A read-modify-write of data chunk `vec_i` the ISA-L way: `delta = old ^ new` (`xor_gen`),
/// then `outputs ^= tables[:, vec_i] * delta` (`ec_encode_data_update`). `delta` is scratch.
pub fn rmw_with_tables(
    tables: &[u8],
    k: usize,
    vec_i: usize,
    old: &[u8],
    new: &[u8],
    delta: &mut [u8],
    outputs: &mut [&mut [u8]],
) {
    xor2(old, new, delta);
    update_with_tables(tables, k, vec_i, delta, outputs);
}

/// Invert a `n x n` matrix with `gf_invert_matrix`; `None` if singular.
pub fn invert(matrix: &[u8], n: usize) -> Option<Vec<u8>> {
    assert_eq!(matrix.len(), n * n);
    let mut a = matrix.to_vec();
    let mut out = vec![0u8; n * n];
    let n_c = int(n);
    // SAFETY: both buffers are n*n bytes (asserted).
    let rc = unsafe { sys::gf_invert_matrix(a.as_mut_ptr(), out.as_mut_ptr(), n_c) };
    (rc == 0).then_some(out)
}

/// ISA-L's field multiplication.
pub fn gf_mul(a: u8, b: u8) -> u8 {
    // SAFETY: takes and returns plain bytes, touching only ISA-L's static tables.
    unsafe { sys::gf_mul(a, b) }
}

/// A reference Cauchy RS code driven the way ISA-L's `erasure_code_test` does.
pub struct Reference {
    k: usize,
    m: usize,
    generator: Vec<u8>,
    encode_tables: Vec<u8>,
}

impl Reference {
    /// `k` data, `m` parity chunks with `gf_gen_cauchy1_matrix`.
    pub fn cauchy(k: usize, m: usize) -> Reference {
        let generator = cauchy_matrix(k, m);
        let encode_tables = init_tables(k, m, &generator[k * k..]);
        Reference {
            k,
            m,
            generator,
            encode_tables,
        }
    }

    /// Tables for encoding (useful to time `ec_encode_data` alone).
    pub fn encode_tables(&self) -> &[u8] {
        &self.encode_tables
    }

    /// Parity of `data`.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        assert_eq!((data.len(), parity.len()), (self.k, self.m));
        encode_with_tables(&self.encode_tables, data, parity);
    }

    /// Decode tables that rebuild `erased` (sorted) from the first `k` other chunks, as ISA-L's
    /// test does; returns the tables and the source indices.
    pub fn decode_tables(&self, erased: &[usize]) -> (Vec<u8>, Vec<usize>) {
        let k = self.k;
        let sources: Vec<usize> = (0..k + self.m)
            .filter(|i| !erased.contains(i))
            .take(k)
            .collect();
        let sub: Vec<u8> = sources
            .iter()
            .flat_map(|&s| self.generator[s * k..(s + 1) * k].to_vec())
            .collect();
        let inv = invert(&sub, k).expect("Cauchy submatrices are invertible");
        let mut rows = Vec::with_capacity(erased.len() * k);
        for &e in erased {
            for j in 0..k {
                let mut acc = 0u8;
                for l in 0..k {
                    acc ^= gf_mul(self.generator[e * k + l], inv[l * k + j]);
                }
                rows.push(acc);
            }
        }
        (init_tables(k, erased.len(), &rows), sources)
    }
}
