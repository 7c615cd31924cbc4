//! Scalar arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d).
//!
//! This is the field of ISA-L, Jerasure and Linux RAID-6. The element 2 (the polynomial x)
//! generates the multiplicative group, so every non-zero `a` is `2^log(a)` and
//! `a * b = 2^((log a + log b) mod 255)`. The exp table is doubled to 510 entries so that the sum
//! of two logs indexes it without a reduction.

/// The reduction polynomial, including the x^8 term.
pub const POLY: u16 = 0x11d;

#[allow(
    clippy::cast_possible_truncation,
    reason = "x < 0x100 at the top of every iteration: bit 8 is cleared by the reduction"
)]
const fn build_exp() -> [u8; 512] {
    let mut exp = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    exp
}

const fn build_log(exp: &[u8; 512]) -> [u8; 256] {
    let mut log = [0u8; 256];
    let mut i: u8 = 0;
    while i < 255 {
        log[exp[i as usize] as usize] = i;
        i += 1;
    }
    log
}

/// `EXP[i] = 2^i`, for `i` in `0..510`.
pub static EXP: [u8; 512] = build_exp();
/// `LOG[a]` for non-zero `a`; `LOG[0]` is meaningless (0).
pub static LOG: [u8; 256] = build_log(&build_exp());

/// Product of two field elements.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse; `inv(0)` is 0 by convention (as in ISA-L's `gf_inv`).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// `a / b`; panics when `b` is zero (a bug in the caller, never a data condition).
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    assert!(b != 0, "division by zero in GF(2^8)");
    if a == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + 255 - LOG[b as usize] as usize]
    }
}

/// `2^e` for any exponent (reduced mod 255).
#[inline]
pub fn exp2(e: usize) -> u8 {
    EXP[e % 255]
}

/// `a^e`.
pub fn pow(a: u8, e: usize) -> u8 {
    if e == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as usize * e) % 255]
}

/// Discrete log base 2 of a non-zero element.
#[inline]
pub fn log2(a: u8) -> u8 {
    assert!(a != 0, "log of zero in GF(2^8)");
    LOG[a as usize]
}

/// Carry-less multiply-and-reduce without tables: the independent oracle for the tables.
pub fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xff) as u8;
        }
        b >>= 1;
    }
    p
}

/// The 8x8 bit matrix of "multiply by `c`" in the layout of `GF2P8AFFINEQB`: output bit `i` of
/// each byte is the parity of `x & byte[7 - i]`, so byte `7 - i` of the qword holds, in bit `j`,
/// bit `i` of `c * 2^j`.
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if mul(c, 1 << j) >> i & 1 != 0 {
                row |= 1 << j;
            }
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}

/// Split-nibble tables of "multiply by `c`": `[c*0, c*1, .., c*15, c*0x00, c*0x10, .., c*0xf0]`,
/// so `c*x = lo[x & 15] ^ hi[x >> 4]` (the PSHUFB method).
pub fn nibble_tables(c: u8) -> [u8; 32] {
    let mut t = [0u8; 32];
    for n in 0..16u8 {
        t[n as usize] = mul(c, n);
        t[16 + n as usize] = mul(c, n << 4);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_carryless_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn inverse_and_division() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1);
            for b in 1..=255u8 {
                assert_eq!(mul(div(a, b), b), a);
            }
        }
        assert_eq!(inv(0), 0);
    }

    #[test]
    fn two_generates_the_group() {
        let mut seen = [false; 256];
        for e in 0..255 {
            let x = exp2(e);
            assert!(!seen[x as usize]);
            seen[x as usize] = true;
        }
        assert!(!seen[0]);
    }

    #[test]
    fn pow_matches_repeated_multiplication() {
        for a in 0..=255u8 {
            let mut p = 1u8;
            for e in 0..20 {
                assert_eq!(pow(a, e), p);
                p = mul(p, a);
            }
        }
    }

    #[test]
    fn nibble_tables_multiply() {
        for c in 0..=255u8 {
            let t = nibble_tables(c);
            for x in 0..=255u8 {
                assert_eq!(t[(x & 15) as usize] ^ t[16 + (x >> 4) as usize], mul(c, x));
            }
        }
    }

    #[test]
    fn affine_matrix_multiplies() {
        // Software model of GF2P8AFFINEQB with imm8 = 0.
        fn affine(m: u64, x: u8) -> u8 {
            let mut r = 0u8;
            for i in 0..8 {
                let row = m.to_be_bytes()[i];
                r |= (((row & x).count_ones() & 1) as u8) << i;
            }
            r
        }
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                assert_eq!(affine(m, x), mul(c, x));
            }
        }
    }
}
