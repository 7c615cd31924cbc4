//! The engine takes its clock, randomness and host from the environment it is given (issue 33):
//! with a simulated environment, the same seed makes the same array byte for byte, a holder on
//! another host is waited for on the virtual clock, and events carry the virtual time. The
//! negative control: the machine's environment makes a different array each time (a fresh uuid
//! and holder id), so the equality is the environment's doing.

use std::sync::Arc;
use std::time::Duration;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig, AssembleOptions, EnvRef, RealEnv, SimEnv};
use stripeguard_integrity::Scheme;

fn members() -> Vec<Arc<MemDisk>> {
    let cfg = ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, 16);
    (0..6)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())))
        .collect()
}

fn refs(d: &[Arc<MemDisk>]) -> Vec<DiskRef> {
    d.iter().map(|m| m.clone() as DiskRef).collect()
}

/// Create, write, close; the members' bytes.
fn make(env: EnvRef) -> Vec<Vec<u8>> {
    let d = members();
    let cfg = ArrayConfig {
        env,
        ..ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, 16)
    };
    let a = Array::create(refs(&d), &cfg, true, &mut |_, _| {}).unwrap();
    a.write(5000, &[0xA5; 9000]).unwrap();
    a.close().unwrap();
    d.iter().map(|m| m.snapshot()).collect()
}

#[test]
fn the_same_seed_makes_the_same_array_byte_for_byte() {
    assert!(make(SimEnv::shared(7)) == make(SimEnv::shared(7)));
    assert!(make(SimEnv::shared(7)) != make(SimEnv::shared(8)));
    // Negative control: the machine's environment draws a new uuid each time.
    assert!(make(RealEnv::shared()) != make(RealEnv::shared()));
}

/// Two simulations of one seed side by side in one process (as a test binary runs them) draw the
/// same holder id and name the same simulated process: each must still see its own array as the
/// only one it holds. CI found the campaign refusing its own restart ("in use by process 4242 on
/// sim") when another test's simulation held an array of the same seed.
#[test]
fn simulations_of_one_seed_side_by_side_hold_their_own_arrays() {
    let (a, b) = (members(), members());
    let env_a = SimEnv::shared(9);
    let env_b = SimEnv::shared(9);
    for (d, env) in [(&a, &env_a), (&b, &env_b)] {
        let cfg = ArrayConfig {
            env: env.clone(),
            ..ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, 16)
        };
        Array::create(refs(d), &cfg, true, &mut |_, _| {})
            .unwrap()
            .close()
            .unwrap();
    }
    let open = |d: &[Arc<MemDisk>], env: &EnvRef| {
        Array::assemble(
            refs(d),
            &AssembleOptions {
                env: env.clone(),
                no_wait: true,
                ..AssembleOptions::default()
            },
        )
    };
    let held_a = open(&a, &env_a).unwrap();
    let held_b = open(&b, &env_b).unwrap();
    assert_eq!(
        held_a.owner().unwrap().holder_id,
        held_b.owner().unwrap().holder_id
    );
    // b "crashes" (dropped without close); its own simulation takes it over while a is held.
    drop(held_b);
    open(&b, &env_b)
        .expect("a crashed holder of this simulation is taken over")
        .close()
        .unwrap();
    // Within one simulation a live holder is still respected.
    assert!(
        open(&a, &env_a).is_err(),
        "the same simulated process holds a"
    );
    held_a.close().unwrap();
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the real clock shows the wait was not on it"
)]
fn a_holder_elsewhere_is_waited_for_on_the_virtual_clock() {
    let d = members();
    let sim = Arc::new(SimEnv::new(3));
    let env: EnvRef = sim.clone();
    let cfg = ArrayConfig {
        env: env.clone(),
        ..ArrayConfig::new(4, 2, Scheme::HybridSeq, 4096, 16)
    };
    Array::create(refs(&d), &cfg, true, &mut |_, _| {})
        .unwrap()
        .close()
        .unwrap();
    let opts = AssembleOptions {
        env: env.clone(),
        heartbeat: Duration::from_secs(60),
        ..AssembleOptions::default()
    };
    // Held, then dropped without close (a crash): the record names host "sim". The next
    // assembler runs on a simulated host of another name, so it cannot ask whether the holder
    // still runs and must judge the heartbeat.
    let held = Array::assemble(refs(&d), &opts).unwrap();
    let owner = held.owner().unwrap();
    assert_eq!(owner.host, "sim");
    assert_eq!(owner.pid, SimEnv::PID);
    drop(held); // without close: the record stays held
    let other: EnvRef = Arc::new(Elsewhere(SimEnv::new(4)));
    let before = other.wall();
    let refused = Array::assemble(
        refs(&d),
        &AssembleOptions {
            env: other.clone(),
            no_wait: true,
            ..opts.clone()
        },
    );
    assert!(refused.is_err(), "a fresh heartbeat elsewhere is respected");
    // Three minutes later on the virtual clock the record is old; the takeover waits two of its
    // intervals (two minutes) on that clock, not on the machine's.
    let t0 = std::time::Instant::now();
    other.sleep(Duration::from_secs(180));
    let taken = Array::assemble(
        refs(&d),
        &AssembleOptions {
            env: other.clone(),
            ..opts
        },
    )
    .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "waited on the real clock"
    );
    assert!(other.wall() - before >= Duration::from_secs(180 + 120));
    assert_eq!(taken.owner().unwrap().host, "elsewhere");
    taken.close().unwrap();
    drop(sim);
}

/// A simulated host of another name.
#[derive(Debug)]
struct Elsewhere(SimEnv);

impl stripeguard_engine::Env for Elsewhere {
    fn wall(&self) -> Duration {
        self.0.wall()
    }
    fn monotonic(&self) -> Duration {
        self.0.monotonic()
    }
    fn fill_random(&self, buf: &mut [u8]) {
        self.0.fill_random(buf)
    }
    fn sleep(&self, d: Duration) {
        self.0.sleep(d)
    }
    fn host(&self) -> stripeguard_engine::Host {
        stripeguard_engine::Host {
            name: "elsewhere".into(),
            ..self.0.host()
        }
    }
    fn process_alive(&self, pid: u32) -> bool {
        self.0.process_alive(pid)
    }
    fn io_pool(&self, threads: usize) -> Option<rayon::ThreadPool> {
        self.0.io_pool(threads)
    }
    fn live_holders(&self) -> &stripeguard_engine::LiveHolders {
        self.0.live_holders()
    }
}
