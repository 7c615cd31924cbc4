//! Monte-Carlo simulation of a [`Chain`]: the same states and rates, run event by event with
//! exponential holding times drawn from a seeded generator. It checks the analytic solutions; it
//! is only practical where data loss takes few enough events (`(n λ / μ)^m` not too small), so
//! every run has a bound on its total events.
//!
//! MTTDL: the sample mean of `runs` times to loss, with the 95 % normal interval
//! `mean ± 1.96 s / √runs` (the times are exponential-like, so a few thousand runs make the
//! mean normal enough). Mission probability: the fraction of runs lost within the mission, with
//! the 95 % Wilson score interval (which stays inside [0, 1] and is sane near 0).

use crate::{Chain, ReliabilityError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

/// A Monte-Carlo estimate and its 95 % confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Sample mean (hours for MTTDL, a probability for the mission).
    pub mean: f64,
    /// Lower end of the 95 % interval.
    pub low: f64,
    /// Upper end of the 95 % interval.
    pub high: f64,
    /// Standard error of the mean (for intervals of other confidence: `mean ± z·std_error`).
    pub std_error: f64,
    /// Runs.
    pub runs: u64,
    /// Events simulated over all runs.
    pub events: u64,
}

impl Estimate {
    /// Whether `x` lies in the interval.
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// Whether `x` lies within `z` standard errors of the mean (a wider interval for a family
    /// of comparisons: z = 3.29 keeps 95 % family-wise confidence over up to 50 of them).
    pub fn within(&self, x: f64, z: f64) -> bool {
        (x - self.mean).abs() <= z * self.std_error
    }
}

/// One run from state 0 until loss or `horizon_hours`; returns the time of loss (or `None`).
fn run(
    chain: &Chain,
    rng: &mut StdRng,
    horizon_hours: f64,
    events: &mut u64,
    events_max: u64,
) -> Result<Option<f64>, ReliabilityError> {
    let mut state = 0usize;
    let mut t = 0.0;
    loop {
        *events += 1;
        if *events > events_max {
            return Err(ReliabilityError::TooManySteps {
                what: "the Monte-Carlo simulation",
                steps: *events as f64,
                bound: events_max as f64,
                hint: "use fewer runs, or rates where loss takes fewer events",
            });
        }
        let total = chain.total_rate(state);
        // 1 − U is in (0, 1]: its log is finite.
        let u: f64 = 1.0 - rng.random::<f64>();
        t += -u.ln() / total;
        if t > horizon_hours {
            return Ok(None);
        }
        let mut pick = rng.random::<f64>() * total;
        pick -= chain.failure_rate(state);
        if pick < 0.0 {
            if state == chain.parity {
                return Ok(Some(t));
            }
            state += 1;
            continue;
        }
        pick -= chain.repair_loss_rate(state);
        if pick < 0.0 {
            return Ok(Some(t));
        }
        state -= 1;
    }
}

/// Estimate the chain's MTTDL (hours) from `runs` runs seeded by `seed`, with at most
/// `events_max` events in all.
pub fn mttdl(
    chain: &Chain,
    runs: u64,
    seed: u64,
    events_max: u64,
) -> Result<Estimate, ReliabilityError> {
    assert!(runs >= 2, "an interval needs at least two runs");
    // Refuse at once what would only hit the bound after minutes.
    let expected = runs as f64 * chain.expected_events();
    if expected > events_max as f64 {
        return Err(ReliabilityError::TooManySteps {
            what: "the Monte-Carlo simulation",
            steps: expected,
            bound: events_max as f64,
            hint: "use fewer runs, or rates where loss takes fewer events (high AFR, long rebuilds, small M)",
        });
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = 0;
    // Welford's running mean and variance.
    let (mut mean, mut m2) = (0.0f64, 0.0f64);
    for i in 1..=runs {
        let x = run(chain, &mut rng, f64::INFINITY, &mut events, events_max)?
            .expect("an unbounded run ends in loss");
        let d = x - mean;
        mean += d / i as f64;
        m2 += d * (x - mean);
    }
    let std_error = (m2 / (runs - 1) as f64).sqrt() / (runs as f64).sqrt();
    Ok(Estimate {
        mean,
        low: mean - Z95 * std_error,
        high: mean + Z95 * std_error,
        std_error,
        runs,
        events,
    })
}

/// Estimate the probability of loss within `hours` from `runs` runs seeded by `seed`.
pub fn loss_probability(
    chain: &Chain,
    hours: f64,
    runs: u64,
    seed: u64,
    events_max: u64,
) -> Result<Estimate, ReliabilityError> {
    assert!(runs >= 1);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut events = 0;
    let mut lost = 0u64;
    for _ in 0..runs {
        if run(chain, &mut rng, hours, &mut events, events_max)?.is_some() {
            lost += 1;
        }
    }
    let n = runs as f64;
    let p = lost as f64 / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Ok(Estimate {
        mean: p,
        low: (centre - half).max(0.0),
        high: (centre + half).min(1.0),
        std_error: (p * (1.0 - p) / n).sqrt(),
        runs,
        events,
    })
}
