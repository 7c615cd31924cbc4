//! Reliability of a K + M array: mean time to data loss (MTTDL) and the probability of losing
//! data within a mission time. Pure math, no I/O.
//!
//! # Members and failures
//!
//! An array has `n = k + m` members, `k` data and `m` parity; any `k` rebuild the rest (MDS), so
//! data is lost when more than `m` members have failed at once. Member lifetimes are independent
//! and exponential with rate `λ`, derived from the annual failure rate (AFR) so that a member
//! fails within one year (8766 h, a Julian year) with probability exactly AFR:
//!
//! ```text
//!     λ = −ln(1 − AFR) / 8766 h        (AFR 2 % → λ = 2.305e-6 /h, 1/λ = 49.5 years)
//! ```
//!
//! # The paper's exact formula: never repaired (Mann, Anderson & Rychlik, section 5)
//!
//! With no repair the array passes through 0, 1, …, m failed members and dies at the (m+1)-th
//! failure; in state `i` the next failure comes at rate `(n − i)λ`, so
//!
//! ```text
//!     MTTDL₀ = Σ_{i=0..m} 1 / ((n − i) λ)  =  (1/λ) Σ_{i=0..m} (1/(1 − i/n)) (1/n)     (paper, as printed)
//!            ≈ (1/λ) ∫_0^{m/n} du / (1 − u)  =  (1/λ) ln(n/k)                           (Eq. 1, corrected)
//! ```
//!
//! The printed Eq. 1 reads `MTTDL ≈ λ log(1/R)` and Eq. 2 `R = e^{−MTTDL/λ}`: dimensionally wrong
//! (λ is a rate); the integral above gives `MTTDL ≈ (1/λ) ln(1/R)` with `R = k/n`, hence the
//! prescriptive rule `R = e^{−λ·MTTDL}`: for a target MTTDL `T` and `k` data members,
//!
//! ```text
//!     m ≥ k (e^{λT} − 1)                                                               (Eq. 2, corrected)
//! ```
//!
//! The probability of loss within a mission `t` is exact too: each member has failed by `t` with
//! probability `p = 1 − e^{−λt}`, independently, so `P(loss) = Σ_{j=m+1..n} C(n,j) pʲ (1−p)ⁿ⁻ʲ`.
//!
//! # With repair: a continuous-time Markov chain
//!
//! States `0..=m` count failed members; "loss" absorbs. Failures move `i → i+1` at `(n − i)λ`
//! (from `m` into loss). Repair is **one member at a time at rate `μ = 1 / rebuild hours`**, not
//! `i·μ`: a rebuild is limited by the survivors' read bandwidth, which all concurrent rebuilds
//! share (md rebuilds members one after another). So `i → i−1` at `μ` for `i ≥ 1`. For `m = 1`
//! this gives the classical RAID-5 closed form
//!
//! ```text
//!     MTTDL = ((2n − 1)λ + μ) / (n (n − 1) λ²)  ≈  μ / (n (n − 1) λ²)  for μ ≫ λ.
//! ```
//!
//! A rebuild in state `i` ends in data loss (instead of reaching `i − 1`) with probability `fᵢ`,
//! below; then `i → loss` at `μ fᵢ` and `i → i − 1` at `μ (1 − fᵢ)`. MTTDL is the expected
//! absorption time from state 0: the solution `τ` of `(−Q_T) τ = 1` over the transient states.
//! The matrix is tridiagonal; [`Chain::mttdl_hours`] eliminates it from the top, writing
//! `τᵢ = aᵢ + bᵢ τ_{i−1}` and carrying `cᵢ = 1 − bᵢ` as its own (positive) recurrence, because
//! `bᵢ` is within `λ/μ` of 1 and `1 − bᵢ` computed by subtraction loses every digit:
//!
//! ```text
//!     c_{m+1} = 1, a_{m+1} = 0;  for i = m..0, with μ₀ = 0:
//!     Dᵢ = μᵢ + (n−i)λ c_{i+1},   aᵢ = (1 + (n−i)λ a_{i+1}) / Dᵢ,   cᵢ = (μᵢ fᵢ + (n−i)λ c_{i+1}) / Dᵢ
//!     MTTDL = a₀
//! ```
//!
//! Every term is positive, so the result keeps full relative precision even at MTTDL/λ⁻¹ ~ 10³⁰.
//! The probability of loss within `t` uses uniformization: with `Λ ≥` every state's total rate,
//! `P(loss by t) = Σ_k Poisson(k; Λt) · Lₖ`, where `Lₖ` is the mass absorbed after `k` steps of
//! the jump chain `I + Q/Λ`; `Lₖ` is accumulated from inflows only (never as `1 − survivors`), so
//! probabilities of 10⁻²⁰ come out with full precision.
//!
//! # Unrecoverable read errors (URE) during a rebuild
//!
//! A rebuild reads `k` members × capacity bytes. In the critical state (`i = m`, no redundancy
//! left) one unreadable sector is lost data (the standard extension of the model); in any state
//! with parity left it is an erasure repaired from parity. With a URE rate `u` per bit read,
//!
//! ```text
//!     P_URE = 1 − (1 − u)^(8 k C)      (k = 8, C = 4 TiB, u = 1e-15 → 0.24)
//! ```
//!
//! # Latent silent errors found by scrubs, and what integrity metadata changes
//!
//! A member acquires a silent error (a flipped, lost or misdirected write that reads back without
//! an error) at rate `s` **per member-year** (`--sdc`; an event rate per member, not per byte,
//! because field studies count disks that develop corruption, and corruption is clustered). It
//! stays latent until the next scrub finds and repairs it. Scrubs run every `D` days; a rebuild
//! starts at a uniformly random time within the scrub interval `τ = 24 D h`, so a given member
//! holds a latent error then with probability
//!
//! ```text
//!     q = 1 − (1 − e^{−sτ}) / (sτ)  ≈ s τ / 2  (the error's mean latency is D/2 days)
//!     P_SDC = 1 − (1 − q)^k          (any of the k members the rebuild reads)
//! ```
//!
//! What a latent error costs during a rebuild in state `i` depends on whether it can be located.
//! The paper (section 3.5) decodes `t` silent errors and `f` erasures iff `2t + f < m + 1`:
//!
//! - **no integrity metadata** (`none`, Linux md): the error is not located; it needs two parity
//!   units, so the rebuild loses data when `i ≥ m − 1` (for RAID-6 with one member down, the
//!   paper's "1 failed device and 1 silent data error cause the system to lose data"). This
//!   credits `none` with an ideal error-locating decoder; md does not even try, so it is at least
//!   this bad.
//! - **located** (stripeguard's schemes: checksums name the bad chunk): the error is an erasure
//!   that the remaining parity repairs while any is left, so only the critical state `i = m`
//!   loses data (there a located error is a known loss, but a loss).
//!
//! For `m = 1` the two coincide; from `m = 2` on, locating moves the silent-error loss one state
//! deeper into the chain, which divides that part of the loss rate by about `μ/((n−m+1)λ)`
//! (then the URE in the critical state usually dominates: 8+2 with the defaults goes from 2,800
//! to 40,000 years, against 40,500 with no silent errors at all).
//!
//! ```text
//!     fᵢ = 1 − (1 − [i = m] P_URE) (1 − [i ≥ m − 1 (none) | i = m (located)] P_SDC)
//! ```
//!
//! # Assumptions
//!
//! Independent exponential lifetimes (no infant mortality, wear-out or correlated batch
//! failures), exponential rebuild times, no operator error, no failure of the host. Only losses
//! through exhausted redundancy count: with `none`, a silent error on a data chunk read by a user
//! is already wrong data, which this model (like the paper's) does not count, so `none` is
//! optimistic. Errors arriving during a rebuild are ignored (the rebuild is short next to the
//! scrub interval). MTTDL describes an exponential-ish tail; the mission probability is the number
//! to plan with (Greenan, Plank & Wylie, "Mean time to meaningless", HotStorage '10).
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::unwrap_used)]

use serde::Serialize;

pub mod monte_carlo;

/// Hours in a (Julian) year: the unit AFR and mission times are given in.
pub const HOURS_PER_YEAR: f64 = 8766.0;

/// What is wrong with the parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReliabilityError {
    /// An argument out of its range.
    #[error("{name} {value}: must be {expected}")]
    OutOfRange {
        /// The parameter's name, as the CLI spells it.
        name: &'static str,
        /// The value given.
        value: f64,
        /// What is allowed.
        expected: &'static str,
    },
    /// The uniformization or the simulation would need more steps than its bound.
    #[error("{what} needs {steps:.3e} steps, over the bound of {bound:.0e}; {hint}")]
    TooManySteps {
        /// Which computation.
        what: &'static str,
        /// Steps it would take.
        steps: f64,
        /// The bound.
        bound: f64,
        /// What to change.
        hint: &'static str,
    },
}

/// The inputs of every model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Params {
    /// Data members `k` (at least 1).
    pub data: usize,
    /// Parity members `m`.
    pub parity: usize,
    /// Annual failure rate of one member, a fraction in (0, 1).
    pub afr: f64,
    /// Mean time to rebuild one member, hours (> 0).
    pub rebuild_hours: f64,
    /// Capacity of one member, bytes (what a rebuild reads from each of `k` members).
    pub capacity_bytes: f64,
    /// Unrecoverable read errors per bit read, in [0, 1).
    pub ure_per_bit: f64,
    /// Latent silent errors acquired per member-year (≥ 0).
    pub sdc_per_member_year: f64,
    /// Days between scrubs (> 0).
    pub scrub_days: f64,
    /// Mission time, years (> 0).
    pub mission_years: f64,
}

/// Largest parity count the models accept (the chain has `m + 1` states).
pub const PARITY_MAX: usize = 255;

impl Params {
    /// Defaults for a `k + m` array: AFR 2 %, 24 h rebuilds of 4 TiB members, URE 1e-15 per bit,
    /// 0.005 latent silent errors per member-year, monthly scrubs (Debian's `checkarray` cron
    /// job), 5-year mission.
    pub fn new(data: usize, parity: usize) -> Self {
        Params {
            data,
            parity,
            afr: 0.02,
            rebuild_hours: 24.0,
            capacity_bytes: 4.0 * (1u64 << 40) as f64,
            ure_per_bit: 1e-15,
            sdc_per_member_year: 0.005,
            scrub_days: 30.0,
            mission_years: 5.0,
        }
    }

    /// Check every parameter's range.
    pub fn validate(&self) -> Result<(), ReliabilityError> {
        let bad = |name, value, expected| {
            Err(ReliabilityError::OutOfRange {
                name,
                value,
                expected,
            })
        };
        if self.data == 0 {
            return bad("--data", 0.0, "at least one data member");
        }
        if self.parity > PARITY_MAX {
            return bad("--parity", self.parity as f64, "at most 255 parity members");
        }
        if !(self.afr > 0.0 && self.afr < 1.0) {
            return bad("--afr", self.afr, "an annual failure rate in (0, 100 %)");
        }
        if !(self.rebuild_hours > 0.0 && self.rebuild_hours.is_finite()) {
            return bad(
                "--rebuild-hours",
                self.rebuild_hours,
                "a positive number of hours",
            );
        }
        if !(self.capacity_bytes >= 0.0 && self.capacity_bytes.is_finite()) {
            return bad("--capacity", self.capacity_bytes, "a size in bytes");
        }
        if !(self.ure_per_bit >= 0.0 && self.ure_per_bit < 1.0) {
            return bad("--ure", self.ure_per_bit, "errors per bit read, in [0, 1)");
        }
        if !(self.sdc_per_member_year >= 0.0 && self.sdc_per_member_year.is_finite()) {
            return bad(
                "--sdc",
                self.sdc_per_member_year,
                "latent silent errors per member-year, at least 0",
            );
        }
        if !(self.scrub_days > 0.0 && self.scrub_days.is_finite()) {
            return bad("--scrub-days", self.scrub_days, "a positive number of days");
        }
        if !(self.mission_years > 0.0 && self.mission_years.is_finite()) {
            return bad(
                "--mission-years",
                self.mission_years,
                "a positive number of years",
            );
        }
        Ok(())
    }

    /// Members `n = k + m`.
    pub fn members(&self) -> usize {
        self.data + self.parity
    }

    /// `λ`, failures per member-hour.
    pub fn lambda_per_hour(&self) -> f64 {
        rate_from_afr(self.afr)
    }

    /// `μ`, rebuilds per hour.
    pub fn mu_per_hour(&self) -> f64 {
        1.0 / self.rebuild_hours
    }

    /// Mission time in hours.
    pub fn mission_hours(&self) -> f64 {
        self.mission_years * HOURS_PER_YEAR
    }

    /// Probability that a rebuild reading `k` members × capacity meets an unrecoverable read
    /// error: `1 − (1 − u)^(8 k C)`.
    pub fn p_ure_rebuild(&self) -> f64 {
        let bits = 8.0 * self.data as f64 * self.capacity_bytes;
        -(bits * (-self.ure_per_bit).ln_1p()).exp_m1()
    }

    /// Probability that one member holds a latent silent error at a random time:
    /// `1 − (1 − e^{−sτ})/(sτ)` with `τ` the scrub interval.
    pub fn q_latent_member(&self) -> f64 {
        let x = self.sdc_per_member_year / HOURS_PER_YEAR * self.scrub_days * 24.0;
        if x < 1e-4 {
            x / 2.0 - x * x / 6.0 + x * x * x / 24.0
        } else {
            1.0 + (-x).exp_m1() / x
        }
    }

    /// Probability that one of the `k` members a rebuild reads holds a latent silent error.
    pub fn p_sdc_rebuild(&self) -> f64 {
        let q = self.q_latent_member();
        -(self.data as f64 * (-q).ln_1p()).exp_m1()
    }
}

/// `λ = −ln(1 − AFR) / 8766 h`: the exponential rate under which a member fails within a year
/// with probability AFR.
pub fn rate_from_afr(afr: f64) -> f64 {
    -(-afr).ln_1p() / HOURS_PER_YEAR
}

/// Which losses a Markov chain counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Member failures only.
    Disks,
    /// Plus unrecoverable read errors in a critical rebuild.
    Ure,
    /// Plus latent silent errors, not located (no integrity metadata, md).
    SdcNone,
    /// Plus latent silent errors located by stripeguard's integrity schemes (erasures).
    SdcLocated,
}

impl Variant {
    /// Every variant, from the fewest losses counted to the most.
    pub const ALL: [Variant; 4] = [
        Variant::Disks,
        Variant::Ure,
        Variant::SdcNone,
        Variant::SdcLocated,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Disks => "repair",
            Variant::Ure => "+URE",
            Variant::SdcNone => "+URE+SDC none",
            Variant::SdcLocated => "+URE+SDC located",
        }
    }
}

/// The Markov chain of a `k + m` array with repair: states `0..=m` failed members and loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// Members `n`.
    pub members: usize,
    /// Parity `m`: the chain's last transient state.
    pub parity: usize,
    /// Failure rate of one member, per hour.
    pub lambda: f64,
    /// Repair rate, per hour (0: never repaired).
    pub mu: f64,
    /// `fᵢ`: probability that a rebuild in state `i` ends in data loss (`fail_prob[0]` unused).
    pub fail_prob: Vec<f64>,
}

impl Chain {
    /// The chain for `params` counting the losses of `variant`.
    pub fn new(params: &Params, variant: Variant) -> Self {
        let m = params.parity;
        let p_ure = params.p_ure_rebuild();
        let p_sdc = params.p_sdc_rebuild();
        let fail_prob = (0..=m)
            .map(|i| {
                if i == 0 {
                    return 0.0;
                }
                let ure = if variant != Variant::Disks && i == m {
                    p_ure
                } else {
                    0.0
                };
                let sdc = match variant {
                    Variant::Disks | Variant::Ure => 0.0,
                    Variant::SdcNone if i + 1 >= m => p_sdc,
                    Variant::SdcLocated if i == m => p_sdc,
                    _ => 0.0,
                };
                1.0 - (1.0 - ure) * (1.0 - sdc)
            })
            .collect();
        Chain {
            members: params.members(),
            parity: m,
            lambda: params.lambda_per_hour(),
            mu: params.mu_per_hour(),
            fail_prob,
        }
    }

    /// A chain with no repair (the paper's model when `μ = 0`).
    pub fn never_repaired(members: usize, parity: usize, lambda: f64) -> Self {
        Chain {
            members,
            parity,
            lambda,
            mu: 0.0,
            fail_prob: vec![0.0; parity + 1],
        }
    }

    /// Rate of a failure out of state `i` (into `i + 1`, or loss from `m`).
    pub fn failure_rate(&self, i: usize) -> f64 {
        (self.members - i) as f64 * self.lambda
    }

    /// Rate of a successful repair out of state `i` (into `i − 1`).
    pub fn repair_ok_rate(&self, i: usize) -> f64 {
        if i == 0 {
            0.0
        } else {
            self.mu * (1.0 - self.fail_prob[i])
        }
    }

    /// Rate of a rebuild in state `i` that ends in data loss.
    pub fn repair_loss_rate(&self, i: usize) -> f64 {
        if i == 0 {
            0.0
        } else {
            self.mu * self.fail_prob[i]
        }
    }

    /// Total rate of leaving state `i`.
    pub fn total_rate(&self, i: usize) -> f64 {
        self.failure_rate(i) + if i == 0 { 0.0 } else { self.mu }
    }

    /// Rate of going straight into loss from state `i`.
    pub fn loss_rate(&self, i: usize) -> f64 {
        self.repair_loss_rate(i)
            + if i == self.parity {
                self.failure_rate(i)
            } else {
                0.0
            }
    }

    /// The generator over the transient states `0..=m` (rows sum to minus the loss rate).
    pub fn generator(&self) -> Vec<Vec<f64>> {
        let s = self.parity + 1;
        let mut q = vec![vec![0.0; s]; s];
        for (i, row) in q.iter_mut().enumerate() {
            row[i] = -self.total_rate(i);
            if i + 1 < s {
                row[i + 1] = self.failure_rate(i);
            }
            if i > 0 {
                row[i - 1] = self.repair_ok_rate(i);
            }
        }
        q
    }

    /// Expected hours from all members healthy to data loss (see the top of this file).
    pub fn mttdl_hours(&self) -> f64 {
        self.expected_until_loss(|_| 1.0)
    }

    /// Expected number of transitions (failures and rebuilds) from all members healthy to data
    /// loss: what a simulation of one run costs.
    pub fn expected_events(&self) -> f64 {
        self.expected_until_loss(|i| self.total_rate(i))
    }

    /// The elimination of the top comment for `(−Q_T) x = w`: `w(i) = 1` gives expected time,
    /// `w(i) = rᵢ` (each visit to state `i` costs 1) expected transitions.
    fn expected_until_loss(&self, w: impl Fn(usize) -> f64) -> f64 {
        let (mut a, mut c) = (0.0f64, 1.0f64); // a_{m+1}, c_{m+1}
        for i in (0..=self.parity).rev() {
            let up = self.failure_rate(i);
            let mu = if i == 0 { 0.0 } else { self.mu };
            let d = mu + up * c;
            a = (w(i) + up * a) / d;
            c = (mu * self.fail_prob[i] + up * c) / d;
        }
        a
    }

    /// Probability of data loss within `hours`, starting with all members healthy, by
    /// uniformization (see the top of this file).
    pub fn loss_probability(&self, hours: f64) -> Result<f64, ReliabilityError> {
        const STEPS_MAX: f64 = 2e8;
        let s = self.parity + 1;
        let big_lambda = (0..s).map(|i| self.total_rate(i)).fold(0.0, f64::max);
        let mean = big_lambda * hours;
        if mean == 0.0 {
            return Ok(0.0);
        }
        let k_max = (mean + 12.0 * mean.sqrt() + 40.0).ceil();
        if k_max * s as f64 > STEPS_MAX {
            return Err(ReliabilityError::TooManySteps {
                what: "the mission probability",
                steps: k_max * s as f64,
                bound: STEPS_MAX,
                hint: "use a shorter mission or longer rebuilds",
            });
        }
        let stay: Vec<f64> = (0..s)
            .map(|i| 1.0 - self.total_rate(i) / big_lambda)
            .collect();
        let up: Vec<f64> = (0..s).map(|i| self.failure_rate(i) / big_lambda).collect();
        let down: Vec<f64> = (0..s)
            .map(|i| self.repair_ok_rate(i) / big_lambda)
            .collect();
        let to_loss: Vec<f64> = (0..s).map(|i| self.loss_rate(i) / big_lambda).collect();
        let mut v = vec![0.0; s];
        v[0] = 1.0;
        let mut next = vec![0.0; s];
        let mut absorbed = 0.0; // L_k
        let ln_mean = mean.ln();
        let mut ln_w = -mean; // ln Poisson(k; mean)
        let mut total = 0.0;
        let mut k = 0.0;
        while k <= k_max {
            total += ln_w.exp() * absorbed;
            // One step of the jump chain.
            for (i, x) in next.iter_mut().enumerate() {
                let mut y = v[i] * stay[i];
                if i > 0 {
                    y += v[i - 1] * up[i - 1];
                }
                if i + 1 < s {
                    y += v[i + 1] * down[i + 1];
                }
                *x = y;
            }
            absorbed += v.iter().zip(&to_loss).map(|(a, b)| a * b).sum::<f64>();
            std::mem::swap(&mut v, &mut next);
            k += 1.0;
            ln_w += ln_mean - k.ln();
        }
        Ok(total.min(1.0))
    }
}

/// The paper's exact never-repaired MTTDL, as printed: `(1/λ) Σ_{k=0..m} (1/(1 − k/n)) (1/n)`.
pub fn paper_mttdl_hours(data: usize, parity: usize, lambda: f64) -> f64 {
    let n = (data + parity) as f64;
    (0..=parity)
        .map(|k| 1.0 / (1.0 - k as f64 / n) / n)
        .sum::<f64>()
        / lambda
}

/// The paper's Eq. 1 (corrected): `MTTDL ≈ (1/λ) ln(n/k)`.
pub fn paper_approx_mttdl_hours(data: usize, parity: usize, lambda: f64) -> f64 {
    ((data + parity) as f64 / data as f64).ln() / lambda
}

/// The paper's prescriptive rule, Eq. 2 corrected (`R = k/n ≤ e^{−λT}`): the smallest `m` with
/// `m ≥ k (e^{λT} − 1)`, or `None` past [`PARITY_MAX`].
#[allow(
    clippy::cast_possible_truncation,
    reason = "m is a whole number checked <= PARITY_MAX first (NaN fails the check); only a \
              negative λT could make it negative, which saturates to 0"
)]
pub fn paper_rule_parity(data: usize, target_hours: f64, lambda: f64) -> Option<usize> {
    let m = (data as f64 * (lambda * target_hours).exp_m1()).ceil();
    (m <= PARITY_MAX as f64).then_some(m as usize)
}

/// Exact probability that more than `m` of `n` never-repaired members fail within `hours`:
/// `Σ_{j=m+1..n} C(n,j) pʲ (1−p)ⁿ⁻ʲ`, `p = 1 − e^{−λt}`, summed in logs.
pub fn never_repaired_loss_probability(data: usize, parity: usize, lambda: f64, hours: f64) -> f64 {
    let n = data + parity;
    let p = -(-lambda * hours).exp_m1();
    let (ln_p, ln_q) = (p.ln(), -lambda * hours);
    let ln_choose = |j: usize| -> f64 {
        (0..j)
            .map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln())
            .sum()
    };
    ((parity + 1)..=n)
        .map(|j| (ln_choose(j) + j as f64 * ln_p + (n - j) as f64 * ln_q).exp())
        .sum::<f64>()
        .min(1.0)
}

/// The classical RAID-5 closed form with repair: `((2n − 1)λ + μ) / (n (n − 1) λ²)`.
pub fn raid5_mttdl_hours(members: usize, lambda: f64, mu: f64) -> f64 {
    let n = members as f64;
    ((2.0 * n - 1.0) * lambda + mu) / (n * (n - 1.0) * lambda * lambda)
}

/// One model's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRow {
    /// Short name: `never-repaired`, `repair`, `+URE`, `+URE+SDC none`, `+URE+SDC located`.
    pub model: &'static str,
    /// Which losses it counts.
    pub variant: Option<Variant>,
    /// Mean time to data loss, hours.
    pub mttdl_hours: f64,
    /// The same in years.
    pub mttdl_years: f64,
    /// Probability of data loss within the mission time.
    pub loss_probability: f64,
}

/// Every model for one array.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The inputs.
    pub params: Params,
    /// `λ` per member-hour.
    pub lambda_per_hour: f64,
    /// `μ` per hour.
    pub mu_per_hour: f64,
    /// Probability of a URE in a rebuild that reads `k` members.
    pub p_ure_rebuild: f64,
    /// Probability that one member holds a latent silent error at a random time.
    pub q_latent_member: f64,
    /// Probability that a rebuild reads a latent silent error.
    pub p_sdc_rebuild: f64,
    /// The paper's Eq. 1 (corrected) approximation of the never-repaired MTTDL, hours.
    pub paper_eq1_mttdl_hours: f64,
    /// Never repaired, then the Markov chain with each variant.
    pub models: Vec<ModelRow>,
}

/// Every model for `params`.
pub fn analyze(params: &Params) -> Result<Report, ReliabilityError> {
    params.validate()?;
    let lambda = params.lambda_per_hour();
    let t = params.mission_hours();
    let never = paper_mttdl_hours(params.data, params.parity, lambda);
    let mut models = vec![ModelRow {
        model: "never-repaired",
        variant: None,
        mttdl_hours: never,
        mttdl_years: never / HOURS_PER_YEAR,
        loss_probability: never_repaired_loss_probability(params.data, params.parity, lambda, t),
    }];
    for v in Variant::ALL {
        let chain = Chain::new(params, v);
        let h = chain.mttdl_hours();
        models.push(ModelRow {
            model: v.name(),
            variant: Some(v),
            mttdl_hours: h,
            mttdl_years: h / HOURS_PER_YEAR,
            loss_probability: chain.loss_probability(t)?,
        });
    }
    Ok(Report {
        params: params.clone(),
        lambda_per_hour: lambda,
        mu_per_hour: params.mu_per_hour(),
        p_ure_rebuild: params.p_ure_rebuild(),
        q_latent_member: params.q_latent_member(),
        p_sdc_rebuild: params.p_sdc_rebuild(),
        paper_eq1_mttdl_hours: paper_approx_mttdl_hours(params.data, params.parity, lambda),
        models,
    })
}

/// What the prescriptive rule must reach.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// MTTDL of at least this many years.
    MttdlYears(f64),
    /// Probability of loss within the mission of at most this.
    LossProbability(f64),
}

/// The smallest parity count per model for one `k` (`None`: more than the search limit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleRow {
    /// Data members `k`.
    pub data: usize,
    /// The paper's Eq. 2 (corrected), for an MTTDL target only.
    pub paper_eq2: Option<usize>,
    /// The exact never-repaired model.
    pub never_repaired: Option<usize>,
    /// The Markov chain with each variant, in [`Variant::ALL`] order.
    pub repair: Vec<ParityFor>,
}

/// The parity one Markov variant needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParityFor {
    /// Which losses the chain counts.
    pub variant: Variant,
    /// The smallest parity count meeting the target (`None`: more than the search limit).
    pub parity: Option<usize>,
}

/// The paper's prescriptive rule, for every model: for each `k` in `data`, the smallest `m` up to
/// `parity_max` meeting `target` (other parameters from `params`).
pub fn prescriptive_table(
    params: &Params,
    target: Target,
    data: &[usize],
    parity_max: usize,
) -> Result<Vec<RuleRow>, ReliabilityError> {
    params.validate()?;
    match target {
        Target::MttdlYears(y) if !(y > 0.0 && y.is_finite()) => {
            return Err(ReliabilityError::OutOfRange {
                name: "--target-mttdl-years",
                value: y,
                expected: "a positive number of years",
            })
        }
        Target::LossProbability(p) if !(p > 0.0 && p < 1.0) => {
            return Err(ReliabilityError::OutOfRange {
                name: "--target-loss",
                value: p,
                expected: "a probability in (0, 1)",
            })
        }
        _ => {}
    }
    let parity_max = parity_max.min(PARITY_MAX);
    let lambda = params.lambda_per_hour();
    let t = params.mission_hours();
    let mut rows = Vec::new();
    for &k in data {
        let p = |m: usize| Params {
            data: k,
            parity: m,
            ..params.clone()
        };
        p(0).validate()?;
        // Smallest m in 0..=parity_max for which `meets(m)` holds.
        let first = |meets: &dyn Fn(usize) -> Result<bool, ReliabilityError>| {
            for m in 0..=parity_max {
                if meets(m)? {
                    return Ok(Some(m));
                }
            }
            Ok::<_, ReliabilityError>(None)
        };
        let paper_eq2 = match target {
            Target::MttdlYears(y) => {
                paper_rule_parity(k, y * HOURS_PER_YEAR, lambda).filter(|&m| m <= parity_max)
            }
            Target::LossProbability(_) => None,
        };
        let never_repaired = first(&|m| {
            Ok(match target {
                Target::MttdlYears(y) => paper_mttdl_hours(k, m, lambda) >= y * HOURS_PER_YEAR,
                Target::LossProbability(x) => never_repaired_loss_probability(k, m, lambda, t) <= x,
            })
        })?;
        let mut repair = Vec::new();
        for v in Variant::ALL {
            let parity = first(&|m| {
                let chain = Chain::new(&p(m), v);
                Ok(match target {
                    Target::MttdlYears(y) => chain.mttdl_hours() >= y * HOURS_PER_YEAR,
                    Target::LossProbability(x) => chain.loss_probability(t)? <= x,
                })
            })?;
            repair.push(ParityFor { variant: v, parity });
        }
        rows.push(RuleRow {
            data: k,
            paper_eq2,
            never_repaired,
            repair,
        });
    }
    Ok(rows)
}

/// MTTDL (years) of every model at one parity count: a point of the MTTDL-against-M plot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// Parity members `m`.
    pub parity: usize,
    /// Never repaired.
    pub never_repaired_years: f64,
    /// The Markov chain with each variant, in [`Variant::ALL`] order.
    pub repair: Vec<MttdlFor>,
}

/// The MTTDL of one Markov variant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MttdlFor {
    /// Which losses the chain counts.
    pub variant: Variant,
    /// Mean time to data loss, years.
    pub mttdl_years: f64,
}

/// MTTDL against `m` for `params.data` data members.
pub fn mttdl_curve(
    params: &Params,
    parity: std::ops::RangeInclusive<usize>,
) -> Result<Vec<CurvePoint>, ReliabilityError> {
    params.validate()?;
    let lambda = params.lambda_per_hour();
    Ok(parity
        .map(|m| {
            let p = Params {
                parity: m,
                ..params.clone()
            };
            CurvePoint {
                parity: m,
                never_repaired_years: paper_mttdl_hours(p.data, m, lambda) / HOURS_PER_YEAR,
                repair: Variant::ALL
                    .iter()
                    .map(|&variant| MttdlFor {
                        variant,
                        mttdl_years: Chain::new(&p, variant).mttdl_hours() / HOURS_PER_YEAR,
                    })
                    .collect(),
            }
        })
        .collect())
}
