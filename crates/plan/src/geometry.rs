//! Array geometry and the left-symmetric layout (FORMAT.md §2.8).

/// Shape of an array, as the planner needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe.
    pub m: usize,
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Stripes in the array.
    pub stripes: u64,
}

impl Geometry {
    /// Members, `k + m`.
    pub fn n(&self) -> usize {
        self.k + self.m
    }

    /// Data bytes per stripe.
    pub fn stripe_data_bytes(&self) -> u64 {
        self.k as u64 * self.chunk_bytes
    }

    /// User-visible capacity.
    pub fn capacity_bytes(&self) -> u64 {
        self.stripes * self.stripe_data_bytes()
    }

    /// The member holding position `pos` (`0..k` data, `k..n` parity) of `stripe`:
    /// parity `j` on `(p + j) mod n`, data `i` on `(p + m + i) mod n`, `p = n - 1 - stripe mod n`.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a remainder modulo n, the member count (a usize)"
    )]
    pub fn member_of(&self, stripe: u64, pos: usize) -> usize {
        let n = self.n();
        let p = n - 1 - (stripe % n as u64) as usize;
        if pos < self.k {
            (p + self.m + pos) % n
        } else {
            (p + pos - self.k) % n
        }
    }

    /// `p = n - 1 - stripe mod n`, the member of parity 0 in `stripe`; with
    /// [`Geometry::member_in`] it finds members without a division per unit.
    #[inline]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a remainder modulo n, the member count (a usize)"
    )]
    pub fn rotation(&self, stripe: u64) -> usize {
        self.n() - 1 - (stripe % self.n() as u64) as usize
    }

    /// The member holding position `pos` of a stripe whose rotation is `p`.
    #[inline]
    pub fn member_in(&self, p: usize, pos: usize) -> usize {
        let n = self.n();
        let d = if pos < self.k {
            p + self.m + pos
        } else {
            p + pos - self.k
        };
        if d >= n {
            d - n
        } else {
            d
        }
    }

    /// Inverse of [`Geometry::member_of`]: the stripe position member `member` holds in `stripe`.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a remainder modulo n, the member count (a usize)"
    )]
    pub fn position_of(&self, stripe: u64, member: usize) -> usize {
        let n = self.n();
        let p = n - 1 - (stripe % n as u64) as usize;
        let off = (member + n - p) % n;
        if off < self.m {
            self.k + off
        } else {
            off - self.m
        }
    }

    /// Global index of data chunk `i` of `stripe` (for the first-read map).
    pub fn data_chunk_id(&self, stripe: u64, i: usize) -> u64 {
        stripe * self.k as u64 + i as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_left_symmetric_raid5_and_raid6() {
        // RAID-5, 4 members: stripe 0 parity on member 3, data 0 on member 0.
        let g = Geometry {
            k: 3,
            m: 1,
            chunk_bytes: 4096,
            stripes: 8,
        };
        assert_eq!(g.member_of(0, 3), 3);
        assert_eq!(
            (0..3).map(|i| g.member_of(0, i)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        // stripe 1: parity on member 2, data starts after it (left-symmetric).
        assert_eq!(g.member_of(1, 3), 2);
        assert_eq!(
            (0..3).map(|i| g.member_of(1, i)).collect::<Vec<_>>(),
            [3, 0, 1]
        );
        // RAID-6, 5 members, stripe 0: P on 4, Q on 0, data on 1, 2, 3.
        let g = Geometry {
            k: 3,
            m: 2,
            chunk_bytes: 4096,
            stripes: 8,
        };
        assert_eq!((g.member_of(0, 3), g.member_of(0, 4)), (4, 0));
        assert_eq!(
            (0..3).map(|i| g.member_of(0, i)).collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn position_of_inverts_member_of() {
        for (k, m) in [(1, 1), (4, 1), (6, 2), (10, 4)] {
            let g = Geometry {
                k,
                m,
                chunk_bytes: 512,
                stripes: 100,
            };
            for s in 0..(2 * g.n() as u64) {
                let mut seen = vec![false; g.n()];
                for pos in 0..g.n() {
                    let d = g.member_of(s, pos);
                    assert_eq!(d, g.member_in(g.rotation(s), pos));
                    assert!(!seen[d]);
                    seen[d] = true;
                    assert_eq!(g.position_of(s, d), pos);
                }
            }
        }
    }
}
