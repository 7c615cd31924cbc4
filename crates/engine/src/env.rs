//! What the engine takes from the world, passed in at `create` and assembly ([`Env`]): the wall
//! clock, a monotonic clock, randomness, sleeping, this host's and process's identity, whether
//! another local process still runs, and whether one request's member I/O is issued from a pool
//! of threads. Nothing else in the engine reads a clock, draws a random number, sleeps, reads an
//! environment variable or `/proc` (clippy's `disallowed-methods` in `crates/engine/clippy.toml`
//! enforces it; this file alone is allowed).
//!
//! [`RealEnv`] is the machine's; [`SimEnv`] is a seeded generator and a virtual clock that only
//! `sleep` advances, and no thread pool, so that the same seed gives the same array, byte for
//! byte (the simulation tests replay by seed).
#![allow(
    clippy::disallowed_methods,
    reason = "this file is the one place the engine touches the clock, randomness and the host"
)]

use rand::{RngCore, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// This host and process, as the owner record names them (FORMAT.md §2.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The host name.
    pub name: String,
    /// The kernel's boot id: a holder on this host with another boot id is gone.
    pub boot_id: [u8; 16],
    /// This process's id.
    pub pid: u32,
    /// The command line, for messages naming the holder.
    pub command: String,
}

/// The engine's environment. Implementations must be cheap to call: the clocks are read per
/// event and per checkpoint.
pub trait Env: Send + Sync + std::fmt::Debug {
    /// Time since the Unix epoch (event times, owner heartbeats, checkpoints, `created`).
    fn wall(&self) -> Duration;
    /// Time since an arbitrary origin that never goes back (rate limits, checkpoint intervals).
    fn monotonic(&self) -> Duration;
    /// Fill `buf` with random bytes (array uuids, holder ids, replacement ids).
    fn fill_random(&self, buf: &mut [u8]);
    /// Wait `d`.
    fn sleep(&self, d: Duration);
    /// This host and process.
    fn host(&self) -> Host;
    /// Whether process `pid` of this host still runs (a zombie does not).
    fn process_alive(&self, pid: u32) -> bool;
    /// A pool of `threads` threads to issue one request's member I/O from, or `None` to issue
    /// it from the caller's thread (in member order: deterministic).
    fn io_pool(&self, threads: usize) -> Option<rayon::ThreadPool>;
    /// Whether the engine may run work on threads of its own: a holder's heartbeat rewriting
    /// its owner record every interval (FORMAT.md §2.2), an offline reshape reading the next
    /// step's chunks while it writes this one's. A simulation says no: those threads would run
    /// on the real clock, outside the seed's order.
    fn own_threads(&self) -> bool {
        true
    }
    /// The holder ids of the arrays this process has assembled and not yet dropped (an owner
    /// record naming this process is live only if its id is here). A real process has one set;
    /// each simulated process has its own, so that simulations run side by side in one test
    /// binary (drawing the same ids from the same seed) do not see each other's arrays as held.
    fn live_holders(&self) -> &LiveHolders {
        static PROCESS: LiveHolders = LiveHolders::new();
        &PROCESS
    }
}

/// The set behind [`Env::live_holders`].
#[derive(Debug, Default)]
pub struct LiveHolders(crate::sync::Mutex<Vec<[u8; 16]>>);

impl LiveHolders {
    /// An empty set.
    pub const fn new() -> LiveHolders {
        LiveHolders(crate::sync::Mutex::new(Vec::new()))
    }
    pub(crate) fn add(&self, id: [u8; 16]) {
        self.ids().push(id);
    }
    pub(crate) fn remove(&self, id: &[u8; 16]) {
        self.ids().retain(|x| x != id);
    }
    pub(crate) fn contains(&self, id: &[u8; 16]) -> bool {
        self.ids().contains(id)
    }
    fn ids(&self) -> crate::sync::MutexGuard<'_, Vec<[u8; 16]>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The environment handle an array keeps.
pub type EnvRef = Arc<dyn Env>;

/// Random bytes of `N` from `env`.
pub(crate) fn random<const N: usize>(env: &dyn Env) -> [u8; N] {
    let mut b = [0u8; N];
    env.fill_random(&mut b);
    b
}

/// Whole seconds since the Unix epoch.
pub(crate) fn unix_seconds(env: &dyn Env) -> u64 {
    env.wall().as_secs()
}

/// Milliseconds since the Unix epoch (saturating far past the year 584 million).
pub(crate) fn unix_millis(env: &dyn Env) -> u64 {
    crate::num::millis(env.wall())
}

/// The machine: the system clocks, the operating system's randomness, `/proc`.
#[derive(Debug)]
pub struct RealEnv {
    origin: Instant,
}

impl RealEnv {
    /// The machine's environment as a handle.
    pub fn shared() -> EnvRef {
        Arc::new(RealEnv {
            origin: Instant::now(),
        })
    }
}

impl Env for RealEnv {
    fn wall(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
    fn fill_random(&self, buf: &mut [u8]) {
        rand::rng().fill_bytes(buf);
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
    fn host(&self) -> Host {
        Host {
            name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            boot_id: boot_id(
                &std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
            ),
            pid: std::process::id(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }
    fn process_alive(&self, pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| running(&stat))
    }
    fn io_pool(&self, threads: usize) -> Option<rayon::ThreadPool> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("sg-io-{i}"))
            .build()
            .ok()
    }
}

/// A deliberate defect, for the simulator's negative controls (`campaign --simulate
/// --sabotage`): each must be caught by some seed of a short run, or the simulator would not
/// catch the real defect it stands for. No command but that one sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sabotage {
    /// A repair returns and writes back its rebuilt data chunk with one byte flipped.
    BrokenRepair,
    /// Assembly after an unclean shutdown skips the resync.
    SkippedResync,
    /// Writes take no stripe lock (reads and repairs still do).
    NoStripeLock,
    /// A write into a zero stripe is an ordinary write over whatever its units hold (parity
    /// over the stale bytes), and the stripe leaves the zero set.
    StaleZeroWrite,
    /// A reshape's router lets requests into the chunks a step is moving (no window).
    NoReshapeWindow,
    /// `grow --continue` after a cut inside an online reshape skips the resync of both
    /// geometries (client writes there set no intent bit).
    SkippedReshapeResync,
}

impl Sabotage {
    /// Every defect.
    pub const ALL: [Sabotage; 6] = [
        Sabotage::BrokenRepair,
        Sabotage::SkippedResync,
        Sabotage::NoStripeLock,
        Sabotage::StaleZeroWrite,
        Sabotage::NoReshapeWindow,
        Sabotage::SkippedReshapeResync,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Sabotage::BrokenRepair => "broken-repair",
            Sabotage::SkippedResync => "skipped-resync",
            Sabotage::NoStripeLock => "no-stripe-lock",
            Sabotage::StaleZeroWrite => "stale-zero-write",
            Sabotage::NoReshapeWindow => "no-reshape-window",
            Sabotage::SkippedReshapeResync => "skipped-reshape-resync",
        }
    }

    /// The defect named `s`.
    pub fn from_name(s: &str) -> Option<Sabotage> {
        Sabotage::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// The boot id's 16 bytes from its text form (`/proc/sys/kernel/random/boot_id`).
fn boot_id(text: &str) -> [u8; 16] {
    let hex: Vec<u8> = text.bytes().filter(|c| c.is_ascii_hexdigit()).collect();
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).unwrap_or("0"), 16).unwrap_or(0);
    }
    id
}

/// Whether a `/proc/PID/stat` line is of a process that is not a zombie: `PID (COMM) STATE ...`,
/// where COMM may hold spaces and parentheses, so the state follows the last `)`.
fn running(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// A simulated environment: a seeded generator, a virtual clock that `sleep` alone advances,
/// one fixed host and process, no thread pool and no heartbeat thread.
#[derive(Debug)]
pub struct SimEnv {
    state: Mutex<SimState>,
    holders: LiveHolders,
}

#[derive(Debug)]
struct SimState {
    rng: rand::rngs::StdRng,
    /// Virtual time since the simulation began.
    elapsed: Duration,
}

impl SimEnv {
    /// The simulated wall clock's start: 2026-01-01 00:00:00 UTC.
    pub const EPOCH: Duration = Duration::from_secs(1_767_225_600);
    /// The simulated process's id.
    pub const PID: u32 = 4242;

    /// A simulated environment whose randomness is drawn from `seed`.
    pub fn new(seed: u64) -> SimEnv {
        SimEnv {
            state: Mutex::new(SimState {
                rng: rand::rngs::StdRng::seed_from_u64(seed),
                elapsed: Duration::ZERO,
            }),
            holders: LiveHolders::new(),
        }
    }

    /// [`SimEnv::new`] as a handle.
    pub fn shared(seed: u64) -> EnvRef {
        Arc::new(SimEnv::new(seed))
    }

    /// Move the virtual clock on by `d` (what a sleep does).
    pub fn advance(&self, d: Duration) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.elapsed = s.elapsed.saturating_add(d);
    }

    fn elapsed(&self) -> Duration {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).elapsed
    }
}

impl Env for SimEnv {
    fn wall(&self) -> Duration {
        SimEnv::EPOCH + self.elapsed()
    }
    fn monotonic(&self) -> Duration {
        self.elapsed()
    }
    fn fill_random(&self, buf: &mut [u8]) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rng
            .fill_bytes(buf);
    }
    fn sleep(&self, d: Duration) {
        self.advance(d);
    }
    fn host(&self) -> Host {
        Host {
            name: "sim".into(),
            boot_id: [0x51; 16],
            pid: SimEnv::PID,
            command: "stripeguard (simulated)".into(),
        }
    }
    fn process_alive(&self, pid: u32) -> bool {
        pid == SimEnv::PID
    }
    fn io_pool(&self, _threads: usize) -> Option<rayon::ThreadPool> {
        None
    }
    fn own_threads(&self) -> bool {
        false
    }
    fn live_holders(&self) -> &LiveHolders {
        &self.holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_or_a_dead_process_is_not_running() {
        assert!(running("12 (sleep) S 1 12"));
        assert!(running("12 (a) b) (c) R 1"));
        assert!(!running("12 (sh) Z 1 12"));
        assert!(!running("12 (x) X 1"));
        assert!(!running(""));
    }

    #[test]
    fn boot_ids_parse_from_their_text() {
        let id = boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n");
        assert_eq!(id[0], 0x0f);
        assert_eq!(id[15], 0xf0);
        assert_eq!(boot_id(""), [0u8; 16]);
    }

    #[test]
    fn the_simulated_clock_moves_only_by_sleeping_and_the_seed_decides_the_bytes() {
        let a = SimEnv::new(9);
        let t0 = a.wall();
        assert_eq!(a.wall(), t0);
        a.sleep(Duration::from_millis(1500));
        assert_eq!(a.wall() - t0, Duration::from_millis(1500));
        assert_eq!(a.monotonic(), Duration::from_millis(1500));
        let b = SimEnv::new(9);
        assert_eq!(random::<16>(&a), random::<16>(&b));
        assert_ne!(random::<16>(&a), random::<16>(&SimEnv::new(10)));
        assert!(a.io_pool(4).is_none());
    }
}
