use std::time::{Duration, Instant};

/// Best throughput of `f` over `reps` runs of at least `min_time` each, in bytes per second,
/// where one call of `f` processes `bytes_per_call` bytes.
pub fn best_rate(
    bytes_per_call: usize,
    reps: usize,
    min_time: Duration,
    mut f: impl FnMut(),
) -> f64 {
    best_rates_in_turns(bytes_per_call, reps, min_time, &mut [&mut f])[0]
}

/// Best throughput of each of `fs`, measured in turns: every round runs each function for at
/// least `min_time`, `reps` rounds, best kept per function. Taking turns puts a competitor's
/// runs in the same stretches of time as ours, so a noisy neighbour on a shared machine slows
/// both rather than whichever happened to run during the noise.
pub fn best_rates_in_turns(
    bytes_per_call: usize,
    reps: usize,
    min_time: Duration,
    fs: &mut [&mut dyn FnMut()],
) -> Vec<f64> {
    for f in fs.iter_mut() {
        f(); // warm caches, fault in pages, build lazy tables
    }
    let mut best = vec![0f64; fs.len()];
    for _ in 0..reps {
        for (f, best) in fs.iter_mut().zip(&mut best) {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < min_time {
                for _ in 0..8 {
                    f();
                }
                calls += 8;
            }
            let rate = (calls as f64 * bytes_per_call as f64) / start.elapsed().as_secs_f64();
            *best = best.max(rate);
        }
    }
    best
}
