//! The quantitative rule (Li & Lee section VI, Eq. 5–9).
//!
//! Near the switch point a write is partial-stripe. HYBRID-1 in RMW costs `X_L = 2(τ + m)`
//! (Eq. 5); HYBRID-2 in RCW costs `X_R = n + 1 + σ` (Eq. 6). Setting them equal gives
//! `τ* = ⌈(n + 1)/2⌉ − m` (Eq. 7). With `τ̄ = S_write / S_chunk` the average number of chunks a
//! write touches: `τ̄ < τ*` → HYBRID-1 (Eq. 8), `τ̄ > τ*` → HYBRID-2 (Eq. 9).
//!
//! Erratum (papers/INDEX.md): τ* is exact for even n; for odd n HYBRID-1 ties or wins at τ = τ*
//! (with σ = 1, 2(τ* + m) = n + 1 < n + 2), so the rule picks HYBRID-1 for `τ̄ ≤ τ*` when n is odd.

use serde::Serialize;
use stripeguard_integrity::Scheme;

/// `τ* = ⌈(n + 1)/2⌉ − m`.
pub fn switch_point(n: usize, m: usize) -> i64 {
    (n as i64 + 2) / 2 - m as i64
}

/// What the rule says and why.
#[derive(Clone, Debug, Serialize)]
pub struct RuleChoice {
    /// The pick.
    pub scheme: Scheme,
    /// Average chunks per write, `S_write / S_chunk`.
    pub tau_avg: f64,
    /// The switch point.
    pub tau_star: i64,
    /// One sentence.
    pub reason: String,
}

/// Apply Eq. 7–9 for an array of `n` members, `m` parity, `chunk_bytes` chunks and a workload
/// whose writes average `avg_write_bytes`.
pub fn choose_by_rule(n: usize, m: usize, chunk_bytes: u64, avg_write_bytes: f64) -> RuleChoice {
    let tau_avg = avg_write_bytes / chunk_bytes as f64;
    let tau_star = switch_point(n, m);
    let odd = n % 2 == 1;
    let h1 = tau_avg < tau_star as f64 || (odd && tau_avg <= tau_star as f64);
    let scheme = if h1 { Scheme::Hybrid1 } else { Scheme::Hybrid2 };
    let reason = format!(
        "writes touch {tau_avg:.2} chunks on average; the switch point is τ* = ⌈(n+1)/2⌉ − m = {tau_star} (n = {n}, m = {m}); {} → {}",
        if h1 {
            if odd && tau_avg == tau_star as f64 { "at τ* with odd n HYBRID-1 ties or wins" } else { "below it small-write RMW is cheapest with version mirroring" }
        } else {
            "above it large-write RCW is cheapest with checksum mirroring"
        },
        scheme.name()
    );
    RuleChoice {
        scheme,
        tau_avg,
        tau_star,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_point_and_rule() {
        // n = 8 RAID-6: τ* = ⌈9/2⌉ − 2 = 3; RAID-5: 4.
        assert_eq!(switch_point(8, 2), 3);
        assert_eq!(switch_point(8, 1), 4);
        assert_eq!(switch_point(7, 1), 3);
        assert_eq!(choose_by_rule(8, 2, 4096, 8192.0).scheme, Scheme::Hybrid1);
        assert_eq!(choose_by_rule(8, 2, 4096, 16384.0).scheme, Scheme::Hybrid2);
        // Odd n at exactly τ*: HYBRID-1 (erratum); even n at exactly τ*: the tie goes to HYBRID-2 per Eq. 9's ≥.
        assert_eq!(
            choose_by_rule(7, 1, 4096, 3.0 * 4096.0).scheme,
            Scheme::Hybrid1
        );
        assert_eq!(
            choose_by_rule(8, 2, 4096, 3.0 * 4096.0).scheme,
            Scheme::Hybrid2
        );
    }
}
