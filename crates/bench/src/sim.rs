//! `stripeguard bench sim`: requests per second of the simulator (the engine's planner, one per
//! scheme) on a seeded synthetic workload, generated in batches so memory stays bounded by the
//! first-read maps, not the trace length. Only the replay is timed.

use serde::Serialize;
use std::time::{Duration, Instant};
use stripeguard_integrity::Scheme;
use stripeguard_plan::Geometry;
use stripeguard_sim::{Profile, Request, Simulator, SynthConfig, Synthetic};

/// One measurement.
#[derive(Clone, Debug, Serialize)]
pub struct SimBench {
    /// `all` or a scheme name.
    pub schemes: String,
    /// Requests replayed.
    pub requests: u64,
    /// Replay time.
    pub seconds: f64,
    /// Requests per second (each request through every scheme of the run).
    pub requests_per_s: f64,
}

/// Replay `requests` synthetic requests of `profile` through `schemes`.
pub fn measure(
    g: Geometry,
    profile: Profile,
    requests: u64,
    schemes: &[Scheme],
    map_bytes: u64,
) -> SimBench {
    let mut sim = Simulator::new(g, schemes, map_bytes);
    let mut gen = Synthetic::new(SynthConfig {
        profile,
        requests,
        capacity_bytes: g.capacity_bytes(),
        seed: 1,
    });
    let mut batch: Vec<Request> = Vec::with_capacity(1 << 16);
    let mut spent = Duration::ZERO;
    loop {
        batch.clear();
        batch.extend(gen.by_ref().take(1 << 16));
        if batch.is_empty() {
            break;
        }
        let t = Instant::now();
        sim.replay_batch(&batch);
        spent += t.elapsed();
    }
    let secs = spent.as_secs_f64();
    SimBench {
        schemes: if schemes.len() == Scheme::ALL.len() {
            "all".into()
        } else {
            schemes
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(",")
        },
        requests,
        seconds: secs,
        requests_per_s: requests as f64 / secs,
    }
}

/// Peak resident memory of this process in bytes (Linux), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
