//! The paper's Fig. 6 from the planner: increased percentage of disk I/Os against τ for one user
//! read or write touching τ data chunks of a stripe (Eq. 2–4), per scheme, for first-reads
//! (σ = 1) and subsequent-reads (σ = 0). Computed by planning a single piece, so the figure and
//! the simulator cannot disagree with the engine.

use stripeguard_integrity::Scheme;
use stripeguard_plan::{Geometry, Op, Planner};

/// Disk I/Os (paper's unit) of one piece touching chunks `0..tau` of stripe 0, with every chunk
/// in first-read state (`first_read`) or all read before (subsequent-read).
pub fn piece_ios(scheme: Scheme, op: Op, n: usize, m: usize, tau: usize, first_read: bool) -> u64 {
    let g = Geometry {
        k: n - m,
        m,
        chunk_bytes: 4096,
        stripes: 1,
    };
    let mut p = Planner::new(g, scheme, 1 << 16);
    if !first_read {
        p.plan(Op::Read, 0, g.stripe_data_bytes(), |_| {});
    }
    let mut total = 0;
    p.plan(op, 0, tau as u64 * 4096, |x| {
        total += (x.paper_reads() + x.paper_writes()) as u64
    });
    total
}

/// Increased percentage over bare RAID (`none`) for τ = 1..=k.
pub fn tau_curve(
    scheme: Scheme,
    op: Op,
    n: usize,
    m: usize,
    first_read: bool,
) -> Vec<(usize, f64)> {
    (1..=n - m)
        .map(|tau| {
            let s = piece_ios(scheme, op, n, m, tau, first_read) as f64;
            let b = piece_ios(Scheme::None, op, n, m, tau, first_read) as f64;
            (tau, (s / b - 1.0) * 100.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(c: &[(usize, f64)], tau: usize) -> f64 {
        c[tau - 1].1
    }

    #[test]
    fn figure_6_observations_for_n_8() {
        for fr in [false, true] {
            for (m, h1_max, h2_start) in [(1, 87.5, 50.0), (2, 75.0, 100.0 / 3.0)] {
                let k = 8 - m;
                let h1 = tau_curve(Scheme::Hybrid1, Op::Write, 8, m, fr);
                let h2 = tau_curve(Scheme::Hybrid2, Op::Write, 8, m, fr);
                assert_eq!(at(&h1, 1), 0.0, "HYBRID-1 starts at 0");
                assert!(
                    (at(&h1, k) - h1_max).abs() < 1e-9,
                    "HYBRID-1 rises to {h1_max}"
                );
                assert!(
                    (at(&h2, 1) - h2_start).abs() < 1e-9,
                    "HYBRID-2 starts at {h2_start}: {h2:?}"
                );
                assert_eq!(at(&h2, k), 0.0, "HYBRID-2 falls to 0");
                let seq = tau_curve(Scheme::HybridSeq, Op::Write, 8, m, fr);
                let pure_w = tau_curve(Scheme::Pure, Op::Write, 8, m, fr);
                for tau in 1..=k {
                    let best = at(&h1, tau).min(at(&h2, tau));
                    assert!(
                        at(&seq, tau) <= best + 1e-9,
                        "hybrid-seq above the better hybrid at τ = {tau}"
                    );
                    assert!(
                        best <= at(&pure_w, tau) + 1e-9,
                        "the winner is never worse than PURE"
                    );
                }
            }
            // PURE's reads reach 100 % (τ = 1, partial read: one extra I/O for one chunk).
            let pure = tau_curve(Scheme::Pure, Op::Read, 8, 2, fr);
            assert_eq!(at(&pure, 1), 100.0);
            assert_eq!(at(&pure, 6), 0.0);
        }
        // Subsequent reads of the hybrids are free.
        for s in [Scheme::Hybrid1, Scheme::Hybrid2, Scheme::HybridSeq] {
            assert!(tau_curve(s, Op::Read, 8, 2, false)
                .iter()
                .all(|p| p.1 == 0.0));
        }
    }
}
