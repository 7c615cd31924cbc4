//! Locating silent errors in the Cauchy Reed-Solomon code by decoding it as a generalized
//! Reed-Solomon (GRS) code.
//!
//! # Why the Cauchy code is GRS
//! Parity row `r` of the ISA-L Cauchy code is `C[r][j] = 1 / (x_r + y_j)` with `x_r = k + r`
//! and `y_j = j` (field elements; `+` is XOR). Give data chunk `j` the point `a_j = y_j` and parity
//! chunk `r` the point `a_{k+r} = x_r`; all `n` points are distinct. Let
//! `A(y) = prod_s (y + x_s)` and `B_r = prod_{s != r} (x_r + x_s)`, and take column multipliers
//! `v_j = 1 / A(y_j)`, `v_{k+r} = 1 / B_r`. For any polynomial `f` of degree `< m`, Lagrange
//! interpolation on the `x_s` gives, for every data column `j` of the generator,
//! `v_j f(y_j) + sum_r v_{k+r} f(x_r) / (x_r + y_j) = 0`, so the vectors `(v_i f(a_i))_i` are
//! parity checks: the code is the dual of `GRS_m(a, v)`, itself a GRS code.
//! (`tests` check `H G = 0` for every shape used.)
//!
//! # The decoder
//! Shift the points by `beta = n` (not a point) so that every locator `X_i = a_i + beta` is
//! non-zero; `(a + beta)^r` for `r < m` still spans the polynomials of degree `< m`, so
//! `H[r][i] = v_i X_i^r` is a parity-check matrix and the syndromes of a received stripe are
//! `S_r = sum_{i in errors} Y_i X_i^r`. Known erasures `F` (their contents taken as zero) are
//! removed with the erasure locator `Gamma(x) = prod_{f in F} (1 + X_f x)`: the Forney syndromes
//! `Xi_u = sum_l Gamma_l S_{f+u-l}`, `u = 0..m-f-1`, involve the unknown errors only.
//! Berlekamp-Massey finds the shortest error locator `sigma` of `Xi`; its roots `X_i^{-1}`
//! (Chien search over the chunks of the stripe) name the bad chunks. This succeeds whenever
//! `2t + f <= m`.
//!
//! Errors are chunk-wide but a byte column may see only some of them, so the locator is found on
//! a sample of non-zero columns and the union is **verified**: the named chunks and the erasures
//! are rebuilt from the rest and the whole stripe must be a codeword. Only chunks whose rebuilt
//! bytes differ from what was read are reported; an unverifiable answer is `CannotLocate`.

use crate::error::CodeError;
use crate::systematic::Systematic;
use crate::Located;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use stripeguard_gf::field::{div, inv, mul, pow};
use stripeguard_gf::{Matrix, Mode, MulTables};

/// Forney syndrome tables kept per erasure pattern (building them costs more than locating in a
/// 4 KiB stripe for wide codes).
const FORNEY_CACHE_ENTRIES: usize = 64;

/// Error-locator search: how many non-zero byte columns are decoded before verification.
const SAMPLE_COLUMNS: usize = 16;

pub(crate) struct Grs {
    k: usize,
    m: usize,
    /// Locators `X_i = a_i + beta`, non-zero and distinct.
    x: Vec<u8>,
    /// The `m x n` parity-check matrix `v_i X_i^r`.
    check: Matrix,
    /// Erasure pattern → tables of the Forney checks restricted to the present chunks.
    forney: Mutex<LruCache<Vec<usize>, Arc<MulTables>>>,
}

impl Grs {
    pub fn for_cauchy(k: usize, m: usize) -> Grs {
        let n = k + m;
        assert!(n <= 255);
        let n8 = u8::try_from(n).expect("asserted n <= 255 just above");
        let a: Vec<u8> = (0..n8).collect();
        let xs = &a[k..];
        let v: Vec<u8> = (0..n)
            .map(|i| {
                let prod = if i < k {
                    xs.iter().fold(1u8, |p, &x| mul(p, a[i] ^ x))
                } else {
                    let r = i - k;
                    (0..m)
                        .filter(|&s| s != r)
                        .fold(1u8, |p, s| mul(p, xs[r] ^ xs[s]))
                };
                inv(prod)
            })
            .collect();
        let beta = n8;
        let x: Vec<u8> = a.iter().map(|&ai| ai ^ beta).collect();
        let mut h = Matrix::zero(m, n);
        for r in 0..m {
            for i in 0..n {
                h[(r, i)] = mul(v[i], pow(x[i], r));
            }
        }
        Grs {
            k,
            m,
            x,
            check: h,
            forney: Mutex::new(LruCache::new(
                NonZeroUsize::new(FORNEY_CACHE_ENTRIES).expect("non-zero"),
            )),
        }
    }

    #[cfg(test)]
    pub fn check_matrix(&self) -> &Matrix {
        &self.check
    }

    /// Forney parity checks for erasures `missing`: `(m - f) x n` (erased columns are zero).
    fn forney_matrix(&self, missing: &[usize]) -> Matrix {
        let f = missing.len();
        // gamma = prod (1 + X_e x), coefficients low to high.
        let mut gamma = vec![1u8];
        for &e in missing {
            let mut next = vec![0u8; gamma.len() + 1];
            for (l, &g) in gamma.iter().enumerate() {
                next[l] ^= g;
                next[l + 1] ^= mul(g, self.x[e]);
            }
            gamma = next;
        }
        let n = self.k + self.m;
        let mut phi = Matrix::zero(self.m - f, n);
        for u in 0..self.m - f {
            for i in (0..n).filter(|i| !missing.contains(i)) {
                let mut acc = 0u8;
                for (l, &g) in gamma.iter().enumerate() {
                    acc ^= mul(g, self.check[(f + u - l, i)]);
                }
                phi[(u, i)] = acc;
            }
        }
        phi
    }

    /// The Forney tables for erasure pattern `missing` (sorted), from the cache or built.
    fn forney_tables(&self, missing: &[usize], present: &[usize]) -> Arc<MulTables> {
        if let Some(t) = self.forney.lock().expect("lock").get(missing) {
            return t.clone();
        }
        let phi = self.forney_matrix(missing);
        let phi_present = Matrix::from_rows(
            phi.rows(),
            present.len(),
            (0..phi.rows())
                .flat_map(|u| present.iter().map(move |&i| (u, i)))
                .map(|p| phi[p])
                .collect(),
        );
        let t = Arc::new(MulTables::new(&phi_present));
        self.forney
            .lock()
            .expect("lock")
            .put(missing.to_vec(), t.clone());
        t
    }

    pub fn locate(
        &self,
        sys: &Systematic,
        chunks: &[&[u8]],
        missing: &[usize],
        len: usize,
    ) -> Result<Located, CodeError> {
        let f = missing.len();
        let syndromes_left = self.m - f.min(self.m);
        if syndromes_left < 2 {
            return sys.detect_only(chunks, missing, len);
        }
        let n = self.k + self.m;
        let present: Vec<usize> = (0..n).filter(|i| !missing.contains(i)).collect();
        let tables = self.forney_tables(missing, &present);
        let mut xi = vec![vec![0u8; len]; syndromes_left];
        {
            let inputs: Vec<&[u8]> = present.iter().map(|&i| chunks[i]).collect();
            let mut outs: Vec<&mut [u8]> = xi.iter_mut().map(|v| &mut v[..]).collect();
            sys.kernel.dot(&tables, &inputs, &[], &mut outs, Mode::Set);
        }
        let nonzero: Vec<usize> = (0..len).filter(|&b| xi.iter().any(|s| s[b] != 0)).collect();
        if nonzero.is_empty() {
            return Ok(Located::Consistent);
        }
        let t_max = syndromes_left / 2;
        let column = |b: usize| -> Vec<u8> { xi.iter().map(|s| s[b]).collect() };
        let mut found: Vec<usize> = Vec::new();
        let stride = (nonzero.len() / SAMPLE_COLUMNS).max(1);
        for &b in nonzero.iter().step_by(stride).take(SAMPLE_COLUMNS) {
            self.add_locations(&column(b), &present, t_max, &mut found)?;
        }
        // Verify; if some column has errors the sample missed, decode every column once more.
        let mut rounds = 0;
        loop {
            if let Some(bad) = self.verify(sys, chunks, missing, &found, len) {
                return Ok(if bad.is_empty() {
                    Located::Consistent
                } else {
                    Located::Bad(bad)
                });
            }
            rounds += 1;
            if rounds > 1 {
                return Err(CodeError::CannotLocate {
                    reason: format!("errors at {found:?} do not explain the syndromes; more than {t_max} chunks may be bad"),
                });
            }
            for &b in &nonzero {
                self.add_locations(&column(b), &present, t_max, &mut found)?;
            }
        }
    }

    /// Decode one column's syndromes and merge its error positions into `found`.
    fn add_locations(
        &self,
        s: &[u8],
        present: &[usize],
        t_max: usize,
        found: &mut Vec<usize>,
    ) -> Result<(), CodeError> {
        let (sigma, l) = berlekamp_massey(s);
        if l > t_max {
            return Err(CodeError::CannotLocate {
                reason: format!(
                    "the syndromes need {l} errors, more than the {t_max} this stripe can locate"
                ),
            });
        }
        let roots: Vec<usize> = present
            .iter()
            .copied()
            .filter(|&i| eval(&sigma, inv(self.x[i])) == 0)
            .collect();
        if roots.len() != l {
            return Err(CodeError::CannotLocate {
                reason: format!(
                    "error locator of degree {l} has {} roots among the chunks",
                    roots.len()
                ),
            });
        }
        for r in roots {
            if !found.contains(&r) {
                found.push(r);
            }
        }
        if found.len() > t_max {
            return Err(CodeError::CannotLocate {
                reason: format!(
                    "{} chunks look bad, more than the {t_max} this stripe can locate",
                    found.len()
                ),
            });
        }
        Ok(())
    }

    /// Rebuild `found` and `missing` from the rest; if the result is a codeword, return the found
    /// chunks whose bytes actually changed.
    fn verify(
        &self,
        sys: &Systematic,
        chunks: &[&[u8]],
        missing: &[usize],
        found: &[usize],
        len: usize,
    ) -> Option<Vec<usize>> {
        let mut all: Vec<usize> = missing.iter().chain(found).copied().collect();
        all.sort_unstable();
        let rebuilt = sys.rebuild_if_codeword(chunks, &all, len)?;
        let mut bad: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(slot, i)| found.contains(i) && rebuilt[*slot] != chunks[**i])
            .map(|(_, &i)| i)
            .collect();
        bad.sort_unstable();
        Some(bad)
    }
}

/// Shortest LFSR generating `s`: returns the connection polynomial (low to high, constant 1)
/// padded to its length `L + 1`, and `L`.
fn berlekamp_massey(s: &[u8]) -> (Vec<u8>, usize) {
    let mut c = vec![1u8];
    let mut b = vec![1u8];
    let (mut l, mut shift, mut last) = (0usize, 1usize, 1u8);
    for n in 0..s.len() {
        let mut d = s[n];
        for i in 1..=l.min(c.len() - 1) {
            d ^= mul(c[i], s[n - i]);
        }
        if d == 0 {
            shift += 1;
            continue;
        }
        let coef = div(d, last);
        let before = c.clone();
        if c.len() < b.len() + shift {
            c.resize(b.len() + shift, 0);
        }
        for (i, &bi) in b.iter().enumerate() {
            c[i + shift] ^= mul(coef, bi);
        }
        if 2 * l <= n {
            l = n + 1 - l;
            b = before;
            last = d;
            shift = 1;
        } else {
            shift += 1;
        }
    }
    c.resize(l + 1, 0);
    (c, l)
}

fn eval(p: &[u8], x: u8) -> u8 {
    p.iter().rev().fold(0u8, |acc, &c| mul(acc, x) ^ c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_matrix_annihilates_the_cauchy_generator() {
        for (k, m) in [
            (1, 1),
            (2, 2),
            (4, 3),
            (10, 4),
            (64, 10),
            (64, 64),
            (200, 55),
            (1, 254),
        ] {
            let grs = Grs::for_cauchy(k, m);
            let mut g = Matrix::zero(k + m, k);
            for j in 0..k {
                g[(j, j)] = 1;
                for r in 0..m {
                    g[(k + r, j)] = inv(u8::try_from((k + r) ^ j).unwrap());
                }
            }
            let prod = grs.check_matrix().mul(&g);
            assert_eq!(prod, Matrix::zero(m, k), "k={k} m={m}");
        }
    }

    #[test]
    fn berlekamp_massey_finds_known_locator() {
        // Two errors at locators 3 and 7 with values 5 and 9: S_u = 5*3^u + 9*7^u.
        let s: Vec<u8> = (0..4)
            .map(|u| mul(5, pow(3, u)) ^ mul(9, pow(7, u)))
            .collect();
        let (sigma, l) = berlekamp_massey(&s);
        assert_eq!(l, 2);
        assert_eq!(eval(&sigma, inv(3)), 0);
        assert_eq!(eval(&sigma, inv(7)), 0);
    }
}
