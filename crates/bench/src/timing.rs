use std::time::{Duration, Instant};

/// Best throughput of `f` over `reps` runs of at least `min_time` each, in bytes per second,
/// where one call of `f` processes `bytes_per_call` bytes.
pub fn best_rate(
    bytes_per_call: usize,
    reps: usize,
    min_time: Duration,
    mut f: impl FnMut(),
) -> f64 {
    f(); // warm caches, fault in pages, build lazy tables
    let mut best = 0f64;
    for _ in 0..reps {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < min_time {
            for _ in 0..8 {
                f();
            }
            calls += 8;
        }
        let rate = (calls as f64 * bytes_per_call as f64) / start.elapsed().as_secs_f64();
        best = best.max(rate);
    }
    best
}
