//! The owner record (FORMAT.md §2.2): who holds the array for writing, for members `flock`
//! cannot protect (remote exports, filesystems whose locks do not cross hosts). Checked after
//! the local locks at every writable assembly; written as held then, refreshed by heartbeats
//! from a thread of the holder's own for as long as it holds the array (whatever the command:
//! a `read` or a `replace` without a control socket too), and written as free at a clean close.

use crate::array::Array;
use crate::env::{unix_millis, EnvRef, Host};
use crate::error::EngineError;
use crate::num::MemberIx;
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use stripeguard_integrity::OWNER_RECORD_OFFSET;

/// The interval a reader judges a record by: the one it names, bounded to
/// `1..=MAX_HEARTBEAT_MS`.
pub(crate) fn honoured_interval_ms(named: u32) -> u64 {
    named.clamp(1, MAX_HEARTBEAT_MS) as u64
}

use crate::heartbeat::{slot_bytes, Beater, MAX_HEARTBEAT_MS, SLOT_BYTES};
use stripeguard_format::{Newest, Owner};

impl Array {
    /// The newest valid owner record on any current member.
    pub fn owner(&self) -> Option<Owner> {
        self.newest_record(OWNER_RECORD_OFFSET, SLOT_BYTES, |_: &Owner| true)
            .record
    }

    fn write_owner(&self, o: &Owner) -> Result<(), EngineError> {
        self.write_slot(OWNER_RECORD_OFFSET, o.sequence, &slot_bytes(o), true)
    }

    /// Take the array for this process, or refuse naming the holder (FORMAT.md §2.2). A holder
    /// on another host that may be gone is waited for (two of its bounded intervals, said on
    /// stderr with the time the wait ends), or with `no_wait` refused at once.
    pub(crate) fn take_ownership(
        &self,
        interval: Duration,
        no_wait: bool,
    ) -> Result<(), EngineError> {
        let env = self.env();
        let me = env.host();
        if let Some(o) = self.owner().filter(|o| o.held) {
            self.judge_holder(&o, &me, no_wait)?;
        }
        let now = unix_millis(env);
        let o = Owner {
            sequence: self.owner().map(|o| o.sequence).unwrap_or(0) + 1,
            held: true,
            pid: me.pid,
            boot_id: me.boot_id,
            holder_id: crate::env::random(env),
            acquired_ms: now,
            heartbeat_ms: now,
            interval_ms: u32::try_from(interval.as_millis().clamp(1, u128::from(MAX_HEARTBEAT_MS)))
                .expect("clamped to MAX_HEARTBEAT_MS"),
            host: me.name,
            command: me.command,
        };
        self.write_owner(&o)?;
        // Members that no lock protects (another host's exports): two assemblies that read
        // "free" at the same moment both write. Wait out the other's write, then look at every
        // member: if any holds another holder's newer record, this one backs off (both may, if
        // their writes interleaved member by member; neither writes data).
        if self.has_remote_members() {
            env.sleep(Duration::from_millis(300));
            for (i, d) in self.members().all().iter().enumerate() {
                if self.is_failed(MemberIx::new(i)) {
                    continue;
                }
                let mut b = vec![0u8; 2 * SLOT_BYTES];
                if d.read_at(OWNER_RECORD_OFFSET, &mut b).is_err() {
                    continue;
                }
                let mut newest = Newest::<Owner>::default();
                newest.take(&b, SLOT_BYTES, |_| true);
                let newest = newest.record;
                if let Some(other) = newest.filter(|r| r.holder_id != o.holder_id && r.held) {
                    return Err(in_use(
                        &other,
                        "which took it at the same moment as this process (try again)".into(),
                    ));
                }
            }
        }
        self.env().live_holders().add(o.holder_id);
        let every = Duration::from_millis(o.interval_ms as u64);
        *self.ownership().lock().expect("lock") = Some(o);
        if !self.env().own_threads() {
            return Ok(());
        }
        *self.beater().lock().expect("lock") = Some(Beater::start(
            Arc::clone(self.ownership()),
            Arc::clone(self.members()),
            EnvRef::clone(self.env_ref()),
            every,
        ));
        Ok(())
    }

    /// Whether the array, held by `o` by its owner record, may be taken by this process `me`:
    /// a holder on this host that no longer runs may be taken over; one elsewhere is judged by
    /// its heartbeat and waited for (two of its intervals) unless `no_wait`.
    fn judge_holder(&self, o: &Owner, me: &Host, no_wait: bool) -> Result<(), EngineError> {
        let env = self.env();
        let here = o.host == me.name && o.boot_id == me.boot_id;
        if here {
            let alive = if o.pid == me.pid {
                env.live_holders().contains(&o.holder_id)
            } else {
                env.process_alive(o.pid)
            };
            if alive {
                return Err(in_use(o, "by its owner record".into()));
            }
            // The holder died without closing: taking over is safe on this host.
        } else {
            let now = unix_millis(env);
            let interval_ms = honoured_interval_ms(o.interval_ms);
            // A heartbeat ahead of this host's clock says nothing about when it was
            // written: only the sequence can tell (a live holder moves it every interval).
            let future = o.heartbeat_ms > now;
            let age = now.saturating_sub(o.heartbeat_ms);
            if !future && age < 3 * interval_ms {
                return Err(in_use(
                        o,
                        format!(
                            "its last heartbeat {} ago (it beats every {}); if that host is down, try again in {} s",
                            span(age),
                            span(interval_ms),
                            (3 * interval_ms - age).div_ceil(1000)
                        ),
                    ));
            }
            let wait = 2 * interval_ms;
            let why = if future {
                format!(
                        "its last heartbeat is {} in the future by this host's clock, so only its sequence can tell whether it still beats",
                        span(o.heartbeat_ms - now)
                    )
            } else {
                format!("its last heartbeat was {} ago", span(age))
            };
            if no_wait {
                return Err(in_use(
                        o,
                        format!(
                            "{why}; not waiting (--no-wait): it is taken over once its sequence stays still for {} (two of its heartbeat intervals)",
                            span(wait)
                        ),
                    ));
            }
            // Wait and look again (a live holder, whatever its clock, moves the sequence).
            eprintln!(
                    "stripeguard: the array's owner record names process {} on {} ({}); {why}: waiting {}, until {}, to see whether its sequence moves (it is taken over if not; --no-wait refuses instead)",
                    o.pid,
                    o.host,
                    o.command,
                    span(wait),
                    clock_utc(now + wait)
                );
            env.sleep(Duration::from_millis(wait));
            if let Some(again) = self.owner() {
                if again.sequence != o.sequence && again.held {
                    return Err(in_use(&again, "its heartbeat still moves".into()));
                }
            }
        }
        Ok(())
    }

    /// Forget this array's holder id (it was dropped: closed or crashed) and stop its heartbeat.
    pub(crate) fn forget_ownership(&self) {
        // Runs in `Drop`, also of an array whose threads were unwound (the simulator's power
        // cut poisons the locks they held): it must not panic.
        if let Some(b) = self
            .beater()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            b.stop();
        }
        if let Some(o) = self
            .ownership()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            self.env().live_holders().remove(&o.holder_id);
        }
    }

    /// Mark the array free (a clean close).
    pub(crate) fn release_ownership(&self) -> Result<(), EngineError> {
        if let Some(b) = self.beater().lock().expect("lock").take() {
            b.stop();
        }
        let mut mine = self.ownership().lock().expect("lock");
        if let Some(mut o) = mine.take() {
            self.env().live_holders().remove(&o.holder_id);
            o.sequence += 1;
            o.held = false;
            o.heartbeat_ms = unix_millis(self.env());
            self.write_owner(&o)?;
        }
        Ok(())
    }
}

/// The refusal naming holder `o`.
fn in_use(o: &Owner, why: String) -> EngineError {
    EngineError::Assemble(format!(
        "the array is in use by process {} on {} ({}), {why}",
        o.pid, o.host, o.command
    ))
}

/// A span of milliseconds in words.
fn span(ms: u64) -> String {
    match ms {
        0..=9_999 => format!("{ms} ms"),
        10_000..=119_999 => format!("{} s", ms / 1000),
        120_000..=7_199_999 => format!("{} min", ms / 60_000),
        7_200_000..=172_799_999 => format!("{} h", ms / 3_600_000),
        _ => format!("{} days", ms / 86_400_000),
    }
}

/// Unix milliseconds as the time of day, UTC (`14:03:07 UTC`).
pub fn clock_utc(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripeguard_format::Record;

    #[test]
    fn records_round_trip_and_flips_are_rejected() {
        let o = Owner {
            sequence: 7,
            held: true,
            pid: 4242,
            boot_id: [1; 16],
            holder_id: [2; 16],
            acquired_ms: 10,
            heartbeat_ms: 20,
            interval_ms: 5000,
            host: "node-é".into(),
            command: "stripeguard write m0 m1".into(),
        };
        let b = slot_bytes(&o);
        assert_eq!(Owner::read_copy(&b), Ok(Some(o)));
        for bit in (0..SLOT_BYTES * 8).step_by(7) {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Owner::read_copy(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_reader_honours_at_most_a_minute_between_heartbeats() {
        assert_eq!(honoured_interval_ms(u32::MAX), 60_000);
        assert_eq!(honoured_interval_ms(0), 1);
        assert_eq!(honoured_interval_ms(5000), 5000);
        assert_eq!(span(120_000), "2 min");
        assert_eq!(clock_utc(86_400_000 + 3_723_000), "01:02:03 UTC");
    }

    #[test]
    #[allow(clippy::disallowed_methods, reason = "the test watches a real process")]
    fn a_zombie_holds_nothing() {
        use crate::env::RealEnv;
        let env = RealEnv::shared();
        assert!(env.process_alive(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        // Not reaped yet: a zombie until wait().
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z"))
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!env.process_alive(pid));
        c.wait().unwrap();
        assert!(!env.process_alive(pid));
    }
}
