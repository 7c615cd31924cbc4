use std::time::{Duration, Instant};

/// Best throughput of `f` over `reps` runs of at least `min_time` each, in bytes per second,
/// where one call of `f` processes `bytes_per_call` bytes. Each run's rate is its average: for
/// work with state (the array engine), whose periodic costs a short batch could leave out.
pub fn best_rate(
    bytes_per_call: usize,
    reps: usize,
    min_time: Duration,
    mut f: impl FnMut(),
) -> f64 {
    let mut best = 0f64;
    f(); // warm caches, fault in pages, build lazy tables
    for _ in 0..reps {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed() < min_time {
            f();
            calls += 1;
        }
        best = best.max(calls as f64 * bytes_per_call as f64 / start.elapsed().as_secs_f64());
    }
    best
}

/// Shortest stretch timed on its own: long enough that the clock's resolution and a call's
/// set-up vanish in it, short enough that a round holds dozens of them.
const BATCH: Duration = Duration::from_millis(2);

/// Best throughput of each of `fs`, stateless kernels (each call the same work), measured in
/// turns: every round runs each function for at least `min_time`, `reps` rounds. Taking turns
/// puts a competitor's runs in the same stretches of time as ours, so a noisy neighbour on a
/// shared machine slows both rather than whichever happened to run during the noise. Within a round the calls are timed in batches of about
/// [`BATCH`] and the best batch over all rounds is kept: a neighbour's burst of a few
/// milliseconds spoils the batches it falls in, not the whole round (a 60 ms round's average
/// had 64+10 encode swing 1.6-2.2x between runs).
pub fn best_rates_in_turns(
    bytes_per_call: usize,
    reps: usize,
    min_time: Duration,
    fs: &mut [&mut dyn FnMut()],
) -> Vec<f64> {
    // Warm caches, fault in pages, build lazy tables; then size each function's batch.
    let batch: Vec<u64> = fs
        .iter_mut()
        .map(|f| {
            f();
            let mut calls = 1u64;
            loop {
                let start = Instant::now();
                for _ in 0..calls {
                    f();
                }
                let took = start.elapsed();
                if took >= BATCH / 4 || calls >= 1 << 30 {
                    let scale = BATCH.as_secs_f64() / took.as_secs_f64().max(1e-9);
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "a positive call count; `as` saturates, never wraps"
                    )]
                    let scaled = (calls as f64 * scale).ceil() as u64;
                    break scaled.max(1);
                }
                calls *= 2;
            }
        })
        .collect();
    let mut best = vec![0f64; fs.len()];
    for _ in 0..reps {
        for ((f, best), &n) in fs.iter_mut().zip(&mut best).zip(&batch) {
            let round = Instant::now();
            while round.elapsed() < min_time {
                let start = Instant::now();
                for _ in 0..n {
                    f();
                }
                let rate = (n as f64 * bytes_per_call as f64) / start.elapsed().as_secs_f64();
                *best = best.max(rate);
            }
        }
    }
    best
}
