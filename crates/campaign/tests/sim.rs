//! The seeded simulation (crates/campaign/src/sim): seeds pass, a seed replays byte for byte,
//! and each deliberate defect is caught by some seed of a short run.

use stripeguard_campaign::sim::{simulate, SimConfig};
use stripeguard_engine::Sabotage;

fn ops() -> u64 {
    std::env::var("SG_SIM_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

fn seeds() -> u64 {
    std::env::var("SG_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

#[test]
fn every_seed_keeps_every_rule() {
    let t = std::time::Instant::now();
    let mut total = 0;
    let mut failed = Vec::new();
    for seed in 0..seeds() {
        let cfg = SimConfig::from_seed(seed, ops());
        let rep = simulate(&cfg);
        total += rep.ops;
        if rep.broken > 0 {
            eprintln!("seed {seed} {:?}: {:#?}", cfg, rep.findings);
            eprintln!("replay: {}", cfg.replay_command());
            failed.push(seed);
        }
    }
    eprintln!("{total} ops in {:.1?}", t.elapsed());
    assert!(failed.is_empty(), "seeds that broke a rule: {failed:?}");
}

#[test]
fn one_seed_replays_byte_for_byte() {
    // Seeds with several clients, power cuts and members leaving: the hardest to replay.
    for seed in [1, 5, 11] {
        let cfg = SimConfig::from_seed(seed, 300);
        let a = serde_json::to_string(&simulate(&cfg)).unwrap();
        let b = serde_json::to_string(&simulate(&cfg)).unwrap();
        assert_eq!(a, b, "seed {seed} ran two ways");
    }
    let one = simulate(&SimConfig::from_seed(1, 300)).digest;
    assert_ne!(one, simulate(&SimConfig::from_seed(2, 300)).digest);
}

/// The first seed of `0..limit` whose run with `sabotage` breaks a rule.
fn caught(sabotage: Sabotage, limit: u64) -> Option<(u64, String)> {
    (0..limit).find_map(|seed| {
        let cfg = SimConfig {
            sabotage: Some(sabotage),
            ..SimConfig::from_seed(seed, 400)
        };
        let rep = simulate(&cfg);
        (rep.broken > 0).then(|| (seed, format!("{:?}", rep.findings[0])))
    })
}

#[test]
fn a_broken_repair_is_caught() {
    let found = caught(Sabotage::BrokenRepair, 60);
    eprintln!("{found:?}");
    assert!(found.is_some());
}

#[test]
fn a_skipped_resync_is_caught() {
    let found = caught(Sabotage::SkippedResync, 60);
    eprintln!("{found:?}");
    assert!(found.is_some());
}

#[test]
fn a_missing_stripe_lock_is_caught() {
    let found = caught(Sabotage::NoStripeLock, 60);
    eprintln!("{found:?}");
    assert!(found.is_some());
}

#[test]
#[ignore]
fn one() {
    let seed: u64 = std::env::var("SG_SIM_SEED").unwrap().parse().unwrap();
    let cfg = SimConfig::from_seed(seed, ops());
    let rep = simulate(&cfg);
    eprintln!("{cfg:?}\n{:#?}", rep);
}
