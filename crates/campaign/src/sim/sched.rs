//! The simulator's deterministic scheduler: logical threads that are OS threads, of which exactly
//! one runs at a time, switched at the points the engine names ([`stripeguard_engine::sync`]:
//! before every lock and every member I/O) in an order drawn from a seed.
//!
//! Why threads and not steppable requests: the engine's requests are ordinary blocking code
//! (plan, gather, check, repair, journal, commit), and making each a state machine would mean a
//! second engine. Why not shuttle or loom: their locks work only inside their own runner, and
//! `stripeguard campaign --simulate` runs the simulation in the shipped binary, whose engine
//! must keep `std`'s locks. So the engine's locks carry one seam (`sync.rs`) and this file
//! drives it: a thread runs until a step, where the seeded generator says whether it goes on
//! or which runnable thread takes over; a thread whose lock is busy is parked until some lock
//! is released. Only the running thread touches the generator, so a seed gives one order.
//!
//! A run ends when every thread has finished, or is halted: every live thread blocked (a
//! deadlock: a stripe stuck), a power cut (the simulator's disk takes the crash images and
//! halts), or a thread that panicked. A halt unwinds every thread with a [`Halted`] panic
//! (silenced in the panic hook) at its next step; a thread already unwinding is left to finish
//! freely, since nothing it does after the halt is looked at.

use rand::{Rng, SeedableRng};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, PoisonError};
use stripeguard_engine::sync::Scheduler;

/// Why a run stopped before its threads finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Halt {
    /// Every live thread waits for a lock: the threads' names and what they were doing.
    Deadlock(Vec<String>),
    /// The simulator cut the power.
    PowerCut,
    /// A thread panicked: its name and the message.
    Panic(String, String),
}

/// The payload of the unwinding that a halt starts.
pub struct Halted;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    Runnable,
    Blocked,
    Done,
}

struct State {
    rng: rand::rngs::StdRng,
    /// The thread that may run.
    running: usize,
    threads: Vec<Run>,
    names: Vec<String>,
    /// What each thread is doing (for a deadlock's report).
    doing: Vec<String>,
    /// Chance that a step switches to another thread.
    switch: f64,
    halt: Option<Halt>,
    /// Steps taken (the run's length in scheduling points).
    steps: u64,
    switches: u64,
}

/// A deterministic scheduler of `threads` logical threads.
pub struct Sched {
    state: Mutex<State>,
    turn: Condvar,
}

/// One run's scheduling totals.
#[derive(Clone, Copy, Debug, Default)]
pub struct SchedStats {
    /// Steps taken.
    pub steps: u64,
    /// Steps where another thread took over.
    pub switches: u64,
}

thread_local! {
    static ME: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

fn quiet_halts() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Halted>().is_none() {
                previous(info);
            }
        }));
    });
}

impl Sched {
    /// A scheduler whose order is drawn from `seed`.
    pub fn new(seed: u64) -> Arc<Sched> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Some runs switch often (fine-grained interleaving), some rarely (long runs of one
        // request, which is where a lock held across many steps matters).
        let switch = [0.05, 0.2, 0.5, 0.9][rng.random_range(0..4)];
        Arc::new(Sched {
            state: Mutex::new(State {
                rng,
                running: 0,
                threads: Vec::new(),
                names: Vec::new(),
                doing: Vec::new(),
                switch,
                halt: None,
                steps: 0,
                switches: 0,
            }),
            turn: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `bodies` as logical threads named `names` until every one finishes or the run is
    /// halted; each body runs with this scheduler entered. Returns the halt, if any.
    pub fn run(
        self: &Arc<Sched>,
        bodies: Vec<(String, Box<dyn FnOnce() + Send + '_>)>,
    ) -> (Option<Halt>, SchedStats) {
        quiet_halts();
        {
            let mut st = self.state();
            st.threads = vec![Run::Runnable; bodies.len()];
            st.names = bodies.iter().map(|(n, _)| n.clone()).collect();
            st.doing = vec![String::new(); bodies.len()];
            st.running = 0;
            st.halt = None;
        }
        std::thread::scope(|scope| {
            for (id, (_, body)) in bodies.into_iter().enumerate() {
                let sched = Arc::clone(self);
                scope.spawn(move || {
                    ME.with(|m| m.set(id));
                    let _entered = stripeguard_engine::sync::enter(sched.clone());
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        sched.wait_turn(id);
                        body();
                    }));
                    if let Err(p) = ran {
                        if p.downcast_ref::<Halted>().is_none() {
                            let msg = p
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "a panic".into());
                            let name = sched.state().names[id].clone();
                            sched.halt(Halt::Panic(name, msg));
                        }
                    }
                    sched.finish(id);
                });
            }
        });
        let st = self.state();
        (
            st.halt.clone(),
            SchedStats {
                steps: st.steps,
                switches: st.switches,
            },
        )
    }

    /// Steps and switches so far (over every run of this scheduler).
    pub fn stats(&self) -> SchedStats {
        let st = self.state();
        SchedStats {
            steps: st.steps,
            switches: st.switches,
        }
    }

    /// Say what the calling thread is doing (named in a deadlock's report).
    pub fn doing(&self, what: String) {
        let me = ME.with(|m| m.get());
        if let Some(d) = self.state().doing.get_mut(me) {
            *d = what;
        }
    }

    /// Stop the run: every thread unwinds at its next step.
    pub fn halt(&self, why: Halt) {
        let mut st = self.state();
        if st.halt.is_none() {
            st.halt = Some(why);
        }
        drop(st);
        self.turn.notify_all();
    }

    /// Whether the run was halted.
    pub fn halted(&self) -> bool {
        self.state().halt.is_some()
    }

    /// Wait until `me` may run; unwind if the run was halted meanwhile.
    fn wait_turn(&self, me: usize) {
        let mut st = self.state();
        while st.running != me && st.halt.is_none() {
            st = self.turn.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        let halted = st.halt.is_some();
        drop(st);
        if halted && !std::thread::panicking() {
            std::panic::panic_any(Halted);
        }
    }

    /// Hand the turn to a runnable thread drawn from the generator (`me` included when it is
    /// runnable); with none runnable, halt as a deadlock if any thread is blocked.
    fn pass(&self, st: &mut State, me: usize) {
        let runnable: Vec<usize> = (0..st.threads.len())
            .filter(|&t| st.threads[t] == Run::Runnable)
            .collect();
        if runnable.is_empty() {
            if st.threads.contains(&Run::Blocked) && st.halt.is_none() {
                let stuck = (0..st.threads.len())
                    .filter(|&t| st.threads[t] == Run::Blocked)
                    .map(|t| format!("{} ({})", st.names[t], st.doing[t]))
                    .collect();
                st.halt = Some(Halt::Deadlock(stuck));
            }
            return;
        }
        let next = runnable[st.rng.random_range(0..runnable.len())];
        if next != me {
            st.switches += 1;
        }
        st.running = next;
    }

    fn finish(&self, me: usize) {
        let mut st = self.state();
        st.threads[me] = Run::Done;
        if st.running == me || st.halt.is_some() {
            self.pass(&mut st, me);
        }
        drop(st);
        self.turn.notify_all();
    }
}

impl Scheduler for Sched {
    fn step(&self) {
        let me = ME.with(|m| m.get());
        let mut st = self.state();
        if st.halt.is_some() {
            drop(st);
            if !std::thread::panicking() {
                std::panic::panic_any(Halted);
            }
            return;
        }
        st.steps += 1;
        let switch = st.switch;
        if !st.rng.random_bool(switch) {
            return;
        }
        self.pass(&mut st, me);
        let moved = st.running != me;
        drop(st);
        if moved {
            self.turn.notify_all();
            self.wait_turn(me);
        }
    }

    fn blocked(&self) {
        let me = ME.with(|m| m.get());
        let mut st = self.state();
        if st.halt.is_some() {
            drop(st);
            if std::thread::panicking() {
                // Unwinding after a halt: others run freely now, so wait for the holder.
                std::thread::yield_now();
                return;
            }
            std::panic::panic_any(Halted);
        }
        st.threads[me] = Run::Blocked;
        self.pass(&mut st, me);
        drop(st);
        self.turn.notify_all();
        self.wait_turn(me);
    }

    fn released(&self) {
        let mut st = self.state();
        for t in st.threads.iter_mut() {
            if *t == Run::Blocked {
                *t = Run::Runnable;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripeguard_engine::sync::{step, Mutex as EngineMutex};

    fn interleaving(seed: u64) -> Vec<usize> {
        let sched = Sched::new(seed);
        let log = Mutex::new(Vec::new());
        let bodies: Vec<(String, Box<dyn FnOnce() + Send + '_>)> = (0..3)
            .map(|t| {
                let log = &log;
                let body: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                    for _ in 0..20 {
                        step();
                        log.lock().unwrap().push(t);
                    }
                });
                (format!("t{t}"), body)
            })
            .collect();
        let (halt, _) = sched.run(bodies);
        assert_eq!(halt, None);
        log.into_inner().unwrap()
    }

    #[test]
    fn a_seed_gives_one_interleaving_and_seeds_differ() {
        let a = interleaving(7);
        assert_eq!(a.len(), 60);
        assert_eq!(a, interleaving(7));
        assert!((0..20).any(|s| interleaving(s) != a));
    }

    #[test]
    fn two_threads_taking_two_locks_in_opposite_orders_are_reported_as_a_deadlock() {
        let found = (0..40).any(|seed| {
            // Fresh locks each time: a halted run unwinds through them and poisons them.
            let (x, y) = (EngineMutex::new(()), EngineMutex::new(()));
            let sched = Sched::new(seed);
            let (x, y) = (&x, &y);
            let bodies: Vec<(String, Box<dyn FnOnce() + Send + '_>)> = vec![
                (
                    "a".into(),
                    Box::new(move || {
                        let _g = x.lock().unwrap();
                        step();
                        let _h = y.lock().unwrap();
                    }),
                ),
                (
                    "b".into(),
                    Box::new(move || {
                        let _g = y.lock().unwrap();
                        step();
                        let _h = x.lock().unwrap();
                    }),
                ),
            ];
            matches!(sched.run(bodies).0, Some(Halt::Deadlock(_)))
        });
        assert!(found, "no seed of 40 interleaved the two into a deadlock");
    }
}
