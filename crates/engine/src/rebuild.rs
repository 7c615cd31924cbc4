//! `replace`: rebuild a failed, missing, stale or to-be-retired member onto a new device,
//! stripe by stripe. Every stripe goes through the full diagnosis with the old member erased,
//! so the survivors are checked as they are read (with RAID-6 and one member out there is still
//! one parity to locate a silently wrong survivor: its corruption is repaired, never copied into
//! the new member), and every rebuilt data chunk is checked against its copies where the scheme
//! keeps checksums. The position is kept in the checkpoint record (FORMAT.md §2.1a) so an
//! interrupted replace resumes onto the same device.

use crate::scrub::{now_unix, Checkpoint, CHECKPOINT_EVERY, SLOT_BYTES};
use crate::{Array, EngineError};
use std::sync::atomic::Ordering;
use stripeguard_disk::DiskRef;
use stripeguard_integrity::{MemberState, CHECKPOINT_OFFSET, SUPERBLOCK_BYTES};

/// What a replace did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReplaceSummary {
    /// The member rebuilt.
    pub member: usize,
    /// The stripe it started at (non-zero when it resumed).
    pub resumed_at: u64,
    /// Stripes rebuilt by this run.
    pub stripes_rebuilt: u64,
    /// Silently wrong survivor units found (and repaired) on the way.
    pub survivors_repaired: u64,
}

/// The target's own checkpoint (its rebuild id), if it has one.
fn target_checkpoint(target: &DiskRef) -> Option<Checkpoint> {
    let mut b = vec![0u8; 2 * SLOT_BYTES];
    target.read_at(CHECKPOINT_OFFSET, &mut b).ok()?;
    b.chunks(SLOT_BYTES)
        .filter_map(Checkpoint::decode)
        .max_by_key(|c| c.sequence)
}

impl Array {
    /// Rebuild member `member` onto `target`. A healthy member is replaced only with `force`.
    /// `progress(done, total)` as stripes are rebuilt.
    pub fn replace(
        &mut self,
        member: usize,
        target: DiskRef,
        force: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<ReplaceSummary, EngineError> {
        let n = self.geometry.n();
        let cfg = |s: String| Err(EngineError::Config(s));
        if !self.writable {
            return cfg("replace needs the array assembled for writing".into());
        }
        if member >= n {
            return cfg(format!(
                "member {member} does not exist: the array has members 0..{n}"
            ));
        }
        if !self.is_failed(member) && !force {
            return cfg(format!(
                "member {member} ({}) is healthy; pass --force to retire it anyway",
                self.members[member].name()
            ));
        }
        let need = self.sb.member_bytes();
        if target.size_bytes() < need {
            return cfg(format!(
                "{} ({} bytes) is too small: a member of this array needs {need} bytes",
                target.name(),
                target.size_bytes()
            ));
        }
        target.try_lock(true)?;
        let stripes = self.geometry.stripes;

        // Resume onto the same device, refuse another one, or start.
        let prev = self.checkpoint().unwrap_or_default();
        let mine = target_checkpoint(&target);
        let running = prev.rebuild_member == Some(member as u16) && !prev.rebuild_finished;
        let same = running && mine.as_ref().map(|c| c.rebuild_target) == Some(prev.rebuild_target);
        if running && !same && !force {
            return cfg(format!(
                "a replace of member {member} onto another device is in progress (stripe {} of {stripes}); give that device again, or --force to start over onto {}",
                prev.rebuild_next,
                target.name()
            ));
        }
        if !same && !force {
            let mut sb = vec![0u8; SUPERBLOCK_BYTES];
            if target.read_at(0, &mut sb).is_ok() && sb[..8] == *b"SGARRAY\0" {
                return cfg(format!(
                    "{} holds a stripeguard array; pass --force to overwrite it",
                    target.name()
                ));
            }
        }
        let mut ck = Checkpoint {
            rebuild_member: Some(member as u16),
            rebuild_finished: false,
            rebuild_next: if same { prev.rebuild_next } else { 0 },
            rebuild_started_unix: if same {
                prev.rebuild_started_unix
            } else {
                now_unix()
            },
            rebuild_target: if same {
                prev.rebuild_target
            } else {
                rand::random()
            },
            ..prev
        };
        let start = ck.rebuild_next;

        // The old member is out (erased for every read) while the new one fills.
        if !self.is_failed(member) {
            self.fail_member(
                member,
                &stripeguard_disk::DiskError::Failed {
                    name: self.members[member].name().to_string(),
                    why: "being replaced".into(),
                },
            )?;
        }
        {
            let mut meta = self.meta.lock().expect("lock");
            meta.table[member].state = MemberState::Rebuilding;
            self.write_superblocks_locked(&mut meta)?;
        }
        self.members[member] = target.clone();
        self.health.lock().expect("lock")[member].name = target.name().to_string();
        let save = |a: &Array, ck: &mut Checkpoint| -> Result<(), EngineError> {
            ck.sequence += 1;
            a.write_checkpoint(ck)?;
            // The target carries the same record: its id is how a resume recognises it.
            let slot = (ck.sequence % 2) * SLOT_BYTES as u64;
            target.write_at(CHECKPOINT_OFFSET + slot, &ck.encode())?;
            target.flush()?;
            Ok(())
        };
        save(self, &mut ck)?;

        let located_before = self.counters().located;
        for s in start..stripes {
            let pos = self.geometry.position_of(s, member);
            let image = {
                let _guard = self.locks[s as usize % self.locks.len()]
                    .lock()
                    .expect("lock");
                self.repair_stripe(s, &[])
            };
            let image = match image {
                Ok(i) => i,
                Err(e) => {
                    ck.rebuild_next = s;
                    save(self, &mut ck)?;
                    return Err(e);
                }
            };
            target.write_at(self.unit_offset(s), &image.units[pos])?;
            self.recycle(image.units);
            ck.rebuild_next = s + 1;
            if (s + 1) % CHECKPOINT_EVERY == 0 && s + 1 < stripes {
                target.flush()?;
                save(self, &mut ck)?;
            }
            if s % 64 == 63 || s + 1 == stripes {
                progress(s + 1, stripes);
            }
        }
        target.flush()?;

        // The new member is current from here on.
        self.failed[member].store(false, Ordering::Relaxed);
        self.health.lock().expect("lock")[member].failed = None;
        {
            let mut meta = self.meta.lock().expect("lock");
            meta.table[member].state = MemberState::Active;
            self.write_superblocks_locked(&mut meta)?;
        }
        ck.rebuild_finished = true;
        save(self, &mut ck)?;
        Ok(ReplaceSummary {
            member,
            resumed_at: start,
            stripes_rebuilt: stripes - start,
            survivors_repaired: self.counters().located - located_before,
        })
    }
}
