//! `replace`: rebuild a failed, missing, stale or to-be-retired member onto a new device,
//! stripe by stripe. Every stripe goes through the full diagnosis with the old member erased,
//! so the survivors are checked as they are read (with RAID-6 and one member out there is still
//! one parity to locate a silently wrong survivor: its corruption is repaired, never copied into
//! the new member), and every rebuilt data chunk is checked against its copies where the scheme
//! keeps checksums. The position is kept in the checkpoint record (FORMAT.md §2.3) so an
//! interrupted replace resumes onto the same device.

use crate::array::Array;
use crate::checkpoint::{CHECKPOINT_EVERY, SLOT_BYTES};
use crate::error::EngineError;
use crate::num::{MemberIx, StripeIx};
use stripeguard_disk::DiskRef;
use stripeguard_format::{Checkpoint, EventKind};
use stripeguard_integrity::{MemberState, Superblock, CHECKPOINT_OFFSET, SUPERBLOCK_BYTES};

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
    /// The target was the device that left this slot, back: only the stripes of the regions
    /// the write-intent record marks were rebuilt (a re-add, not a full rebuild).
    pub readded: bool,
    /// Stripes the rebuild had to visit (all of them, or the marked regions' for a re-add).
    pub stripes_to_rebuild: u64,
    /// The target was this slot's own device back, but could not be re-added: why it was
    /// rebuilt in full instead.
    pub full_rebuild_reason: Option<String>,
    /// Stripes that could not be rebuilt and were passed over ([`ReplaceForce::skip_unrecoverable`]):
    /// they stay refused.
    pub skipped: Vec<u64>,
}

/// What an operator confirmed for one replace: each danger is its own confirmation (issue 35).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplaceForce {
    /// `replace --force`: retire a member that is healthy, or abandon an interrupted replace of
    /// the slot onto another device and start over.
    pub retire: bool,
    /// `--force-take NEW`: the target holds a stripeguard array (a member of another array, or
    /// of this one in the past) and is overwritten.
    pub take: bool,
    /// `--skip-unrecoverable`: a stripe that cannot be rebuilt (too much of it lost) does not
    /// stop the replace: the target's unit there is written as one that can never verify, the
    /// stripe stays refused on read (as before the replace), and the replace goes on. For an
    /// array that lost more than its parity covers, so that what remains gets its redundancy
    /// back.
    pub skip_unrecoverable: bool,
    /// The target is this hot spare of the array (its uuid in the spare table): the superblock
    /// write that gives it the slot takes it off the table (FORMAT.md §2.11).
    pub spare: Option<[u8; 16]>,
}

impl ReplaceForce {
    /// Nothing confirmed.
    pub const NONE: ReplaceForce = ReplaceForce {
        retire: false,
        take: false,
        skip_unrecoverable: false,
        spare: None,
    };
    /// Everything confirmed (tests and simulations that replace healthy members onto used
    /// devices on purpose).
    pub const ALL: ReplaceForce = ReplaceForce {
        retire: true,
        take: true,
        skip_unrecoverable: false,
        spare: None,
    };
}

/// Stops a replace at its next stripe from any thread ([`Array::rebuild_canceller`]).
#[derive(Clone)]
pub struct RebuildCanceller(std::sync::Arc<crate::members::Members>);

impl RebuildCanceller {
    /// Ask the replace to stop at its next stripe, its position kept.
    pub fn cancel(&self) {
        self.0.cancel_rebuild();
    }
}

/// The target's own checkpoint (its rebuild id), if it has one.
fn target_checkpoint(target: &DiskRef) -> Option<Checkpoint> {
    let mut b = vec![0u8; 2 * SLOT_BYTES];
    target.read_at(CHECKPOINT_OFFSET, &mut b).ok()?;
    let mut newest = stripeguard_format::Newest::<Checkpoint>::default();
    newest.take(&b, SLOT_BYTES, |_| true);
    newest.record
}

impl Array {
    /// Ask a replace running on another thread to stop at its next stripe; its position is
    /// kept, so `replace` onto the same device resumes it.
    pub fn cancel_rebuild(&self) {
        self.members().cancel_rebuild();
    }

    /// [`Array::cancel_rebuild`] for a thread that does not hold the array (a signal handler).
    pub fn rebuild_canceller(&self) -> RebuildCanceller {
        RebuildCanceller(std::sync::Arc::clone(self.members()))
    }

    /// Whether `target` is the device that left slot `member`, back: `None` when it is not
    /// (its own superblock is not of this array and this slot with the slot's current device
    /// number, or the slot is not out). `Some(Ok)` when it can be re-added: its own event count
    /// is at least the one at which the write-intent record was last empty with every member
    /// in, and at most the event at which the slot was last current, so everything written to
    /// the array since it left lies in regions whose bits are still set (no bit is cleared
    /// while a member is out) and those stripes are all a re-add rebuilds. `Some(Err(why))`
    /// when it must be rebuilt in full (FORMAT.md §2.4); `older` in it says whether it is
    /// behind (it holds nothing the array lacks) rather than written apart from the array.
    fn returning(&self, member: MemberIx, target: &DiskRef) -> Option<Result<(), (bool, String)>> {
        let own = crate::array::read_superblock_of(target.as_ref()).ok()?;
        let cleared_at = self.intent_cleared_at();
        let meta = self.meta().lock().expect("lock");
        let slot = meta.table[member.get()];
        let ours = own.array_uuid == self.sb().array_uuid
            && own.member_index as usize == member.get()
            && own
                .member_table
                .get(member.get())
                .is_some_and(|s| s.device == slot.device)
            && matches!(
                slot.state,
                MemberState::Failed
                    | MemberState::Missing
                    | MemberState::Stale
                    | MemberState::Rebuilding
            );
        if !ours {
            return None;
        }
        let g = own.generation;
        Some(if g > slot.last_event {
            Err((false, format!(
                "its superblock is at event {g}, newer than event {}, the last at which the array counted it current: it was written apart from the array",
                slot.last_event
            )))
        } else if own.stripes != self.geometry().stripes {
            Err((true, format!(
                "its superblock says {} stripes and the array has {}: it was out when the array grew, so its new stripes hold nothing",
                own.stripes,
                self.geometry().stripes
            )))
        } else if g < cleared_at {
            Err((true, format!(
                "its superblock is at event {g}, older than event {cleared_at}, when the write-intent record was last empty with every member in: it may lack writes whose bits were cleared before it left"
            )))
        } else {
            Ok(())
        })
    }

    /// Rebuild member `member` onto `target`. A healthy member is replaced only with
    /// `force.retire`, a target that holds a stripeguard array overwritten only with `force.take`.
    /// `progress(done, total)` as stripes are rebuilt.
    ///
    /// Runs while the array serves reads and writes (the stripe being rebuilt is locked as a
    /// write locks it); one replace at a time.
    pub fn replace(
        &self,
        member: usize,
        target: DiskRef,
        force: ReplaceForce,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<ReplaceSummary, EngineError> {
        let member = MemberIx::new(member);
        self.check_replace(member, &target, force)?;
        target.try_lock(true)?;
        // Ends the replace's claim however it ends.
        let _rebuilding = match self.members().begin_rebuild(member) {
            Ok(claim) => claim,
            Err(m) => {
                return Err(EngineError::Config(format!(
                    "a replace of member {m} is running; one at a time"
                )))
            }
        };
        let plan = self.plan_replace(member, &target, force)?;
        let mut ck = plan.checkpoint;
        let start = ck.rebuild_next;
        // The stripes the write-intent record marks: a re-add's whole work, and on a resume the
        // stripes below where the last run stopped that were written since (no replace ran, so
        // those writes did not reach the new device; the member has been out all along, so the
        // record marks every stripe written since it left, FORMAT.md §2.4), rebuilt first.
        // (Found by an outside test: a write between an interrupted replace and its resume read
        // back old bytes once the replace had finished.)
        let marked = (plan.readd || start > 0).then(|| self.intent_stripes());
        let ahead: Vec<u64> = match (&marked, plan.readd) {
            (Some(m), true) => m.clone(),
            _ => (0..self.geometry().stripes).collect(),
        };
        let behind: Vec<u64> = marked
            .iter()
            .flatten()
            .copied()
            .filter(|&s| s < start)
            .collect();
        let planned = ahead.len();
        let todo: Vec<u64> = behind
            .iter()
            .copied()
            .chain(ahead.into_iter().filter(|&s| s >= start))
            .collect();
        // A new device's metadata regions may hold anything (old data, another array's
        // records): zeroed as `create` zeroes them, before it joins, so a metadata scrub finds
        // nothing there but what this array writes. Not on a re-add (its records are this
        // array's) nor a resume (its checkpoint says where to go on).
        if start == 0 && !plan.readd {
            self.zero_metadata_of(&target)?;
        }
        self.take_slot(member, &target, plan.readd, force.spare)?;
        self.save_rebuild(&target, &mut ck)?;
        self.note(
            EventKind::ReplaceStarted,
            Some(member),
            format!(
                "member {member} onto {}: {}{}",
                target.name(),
                if plan.readd {
                    format!(
                        "re-add, {planned} stripe(s) the write-intent record marks"
                    )
                } else {
                    format!("full rebuild of {planned} stripe(s)")
                },
                if start > 0 {
                    format!(
                        ", resumed at stripe {start} ({} stripe(s) below it written since rebuilt again)",
                        behind.len()
                    )
                } else {
                    String::new()
                }
            ),
        );
        let interrupted = |at: u64, why: &str| {
            self.note(
                EventKind::ReplaceInterrupted,
                Some(member),
                format!(
                    "member {member} onto {} at stripe {at}: {why}",
                    target.name()
                ),
            );
        };

        let located_before = self.counters().located;
        let total = todo.len() as u64;
        let mut visited = 0u64;
        let mut skipped = Vec::new();
        for &s in &todo {
            if self.members().take_cancel() {
                target.flush()?;
                ck.rebuild_next = s;
                self.save_rebuild(&target, &mut ck)?;
                interrupted(s, "the holder is stopping");
                return Err(EngineError::Config(format!(
                    "replace interrupted at stripe {s} of {} (the holder is stopping); run it again onto the same device to resume",
                    self.geometry().stripes
                )));
            }
            // A stripe that cannot be rebuilt stops the replace with its position saved; a
            // failed write to the target stops it at once.
            let rebuilt = self.rebuild_onto(StripeIx::new(s), member, &target);
            if let Err(e) = &rebuilt {
                interrupted(s, &e.to_string());
            }
            let rebuilt = match rebuilt? {
                Err(EngineError::Unrecoverable { reason, .. }) if force.skip_unrecoverable => {
                    self.poison_onto(StripeIx::new(s), member, &target)?;
                    // One line per stripe would flood the event log's ring: the finish event
                    // counts them, the summary lists them.
                    let _ = reason;
                    skipped.push(s);
                    Ok(())
                }
                other => other,
            };
            if let Err(e) = rebuilt {
                ck.rebuild_next = s;
                self.save_rebuild(&target, &mut ck)?;
                interrupted(s, &e.to_string());
                return Err(e);
            }
            ck.rebuild_next = s + 1;
            visited += 1;
            if visited.is_multiple_of(CHECKPOINT_EVERY) && s + 1 < self.geometry().stripes {
                target.flush()?;
                self.save_rebuild(&target, &mut ck)?;
            }
            if visited.is_multiple_of(64) {
                progress(visited, total);
            }
        }
        progress(total, total);
        target.flush()?;
        // Its metadata area carries the listed untrusted blocks like every other member's.
        self.write_untrusted_to(&target)?;

        // The new member is current from here on.
        self.members().put_back(member);
        {
            let mut meta = self.meta().lock().expect("lock");
            meta.table[member.get()].state = MemberState::Active;
            self.write_superblocks_locked(&mut meta)?;
        }
        ck.rebuild_finished = true;
        self.save_rebuild(&target, &mut ck)?;
        self.note(
            EventKind::ReplaceFinished,
            Some(member),
            format!(
                "member {member} is {}: {visited} stripe(s) rebuilt, {} silently wrong survivor unit(s) repaired{}",
                target.name(),
                self.counters().located - located_before,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} unrecoverable stripe(s) passed over (they stay refused)",
                        skipped.len()
                    )
                }
            ),
        );
        if plan.readd {
            self.note(
                EventKind::MemberReturned,
                Some(member),
                format!("member {member} ({}) re-added", target.name()),
            );
        }
        Ok(ReplaceSummary {
            member: member.get(),
            resumed_at: start,
            stripes_rebuilt: visited,
            survivors_repaired: self.counters().located - located_before,
            readded: plan.readd,
            stripes_to_rebuild: total,
            full_rebuild_reason: plan.full_rebuild_reason,
            skipped,
        })
    }

    /// Whether [`Array::replace`] would start with these arguments: every refusal it can make
    /// before it writes anything (a read-only array, no such member, a healthy member without
    /// `force.retire`, a target too small, another replace of the slot under way, a target
    /// holding an array without `force.take`), made without writing. What the caller does to
    /// the target between this and the replace (wiping foreign signatures) comes after every
    /// refusal, so a refused replace destroys nothing.
    pub fn replace_preflight(
        &self,
        member: usize,
        target: &DiskRef,
        force: ReplaceForce,
    ) -> Result<(), EngineError> {
        let member = MemberIx::new(member);
        self.check_replace(member, target, force)?;
        self.plan_replace(member, target, force).map(|_| ())
    }

    /// Refuse a replace that cannot start: a read-only array, no such member, a healthy member
    /// without `force`, a target too small.
    fn check_replace(
        &self,
        member: MemberIx,
        target: &DiskRef,
        force: ReplaceForce,
    ) -> Result<(), EngineError> {
        let n = self.members().len();
        let cfg = |s: String| Err(EngineError::Config(s));
        if !self.is_writable() {
            return cfg("replace needs the array assembled for writing".into());
        }
        if member.get() >= n {
            return cfg(format!(
                "member {member} does not exist: the array has members 0 to {}",
                n - 1
            ));
        }
        if !self.is_failed(member) && !force.retire {
            return cfg(format!(
                "member {member} ({}) is healthy; pass --force to retire it anyway",
                self.members().get(member).name()
            ));
        }
        let need = self.superblock().member_bytes();
        if target.size_bytes() < need {
            return cfg(format!(
                "{} ({} bytes) is too small: a member of this array needs {need} bytes",
                target.name(),
                target.size_bytes()
            ));
        }
        Ok(())
    }

    /// Resume onto the same device, refuse another one, re-add the device that left, or start
    /// a full rebuild (refusing to overwrite another array without `force`).
    fn plan_replace(
        &self,
        member: MemberIx,
        target: &DiskRef,
        force: ReplaceForce,
    ) -> Result<ReplacePlan, EngineError> {
        let cfg = |s: String| Err(EngineError::Config(s));
        let stripes = self.geometry().stripes;
        let prev = self.checkpoint().unwrap_or_default();
        let mine = target_checkpoint(target);
        let running = prev.rebuild_member == Some(crate::num::index_u16(member.get()))
            && !prev.rebuild_finished;
        let same = running && mine.as_ref().map(|c| c.rebuild_target) == Some(prev.rebuild_target);
        if running && !same && !force.retire {
            return cfg(format!(
                "a replace of member {member} onto another device is in progress (stripe {} of {stripes}); give that device again, or --force to start over onto {}",
                prev.rebuild_next,
                target.name()
            ));
        }
        // The device that left, back: a re-add through the write-intent record. (Not while
        // a full rebuild of this slot onto another device is under way.)
        let back = if self.is_failed(member) && (same || !running) {
            self.returning(member, target)
        } else {
            None
        };
        let readd = matches!(back, Some(Ok(())));
        // This slot's own device, too old to re-add: it holds nothing the array lacks, so it
        // is rebuilt in full without --force (one written apart from the array still needs it).
        let older_copy = matches!(back, Some(Err((true, _))));
        let full_rebuild_reason = match back {
            Some(Err((_, why))) => Some(why),
            _ => None,
        };
        if !same && !force.take && !readd && !older_copy {
            // Either copy's magic: a member whose first copy was damaged is still one.
            let holds = stripeguard_integrity::SUPERBLOCK_COPY_OFFSETS
                .iter()
                .any(|&at| {
                    let mut sb = vec![0u8; SUPERBLOCK_BYTES];
                    target.read_at(at, &mut sb).is_ok()
                        && sb.starts_with(<Superblock as stripeguard_format::Record>::MAGIC)
                });
            if holds {
                return cfg(format!(
                    "{} holds a stripeguard array{}; pass --force-take {} to overwrite it",
                    target.name(),
                    full_rebuild_reason
                        .as_ref()
                        .map(|why| format!(" (this slot's own device, but {why})"))
                        .unwrap_or_default(),
                    target.name()
                ));
            }
        }
        let checkpoint = Checkpoint {
            rebuild_member: Some(crate::num::index_u16(member.get())),
            rebuild_finished: false,
            rebuild_next: if same { prev.rebuild_next } else { 0 },
            rebuild_started_unix: if same {
                prev.rebuild_started_unix
            } else {
                crate::env::unix_seconds(self.env())
            },
            rebuild_target: if same {
                prev.rebuild_target
            } else {
                crate::env::random(self.env())
            },
            ..prev
        };
        Ok(ReplacePlan {
            checkpoint,
            readd,
            full_rebuild_reason,
        })
    }

    /// Put `target` into slot `member`: the old member out (erased for every read) while the
    /// new one fills, the member table saying so.
    fn take_slot(
        &self,
        member: MemberIx,
        target: &DiskRef,
        readd: bool,
        spare: Option<[u8; 16]>,
    ) -> Result<(), EngineError> {
        if !self.is_failed(member) {
            self.fail_member(
                member,
                &stripeguard_disk::DiskError::Failed {
                    name: self.members().get(member).name().to_string(),
                    why: "being replaced".into(),
                },
            )?;
        }
        {
            let mut meta = self.meta().lock().expect("lock");
            let slot = &mut meta.table[member.get()];
            if slot.state != MemberState::Rebuilding && !readd {
                // Another device takes the slot: the one that held it can never be re-added.
                slot.device = slot.device.wrapping_add(1);
            }
            slot.state = MemberState::Rebuilding;
            if let Some(u) = spare {
                meta.spares.retain(|e| e.uuid != u);
            }
            self.write_superblocks_locked(&mut meta)?;
        }
        self.members().set(member, target.clone());
        // What the target's journal slots hold is not a record of this array's last run (a
        // device back from an earlier failure may hold one): a later resync must not replay it.
        self.clear_journal_of(member)?;
        self.clear_appendix_cache();
        Ok(())
    }

    /// Write the replace's checkpoint. The target carries the same record: its id is how a
    /// resume recognises it. It is durable on the target before the members name it, so a
    /// replace killed between the two writes never leaves the members naming an id its own
    /// target lacks (which refused the same device as "another device").
    fn save_rebuild(&self, target: &DiskRef, ck: &mut Checkpoint) -> Result<(), EngineError> {
        ck.sequence += 1;
        let slot = stripeguard_format::slot_offset(ck.sequence, SLOT_BYTES);
        target.write_at(
            CHECKPOINT_OFFSET + slot,
            &crate::checkpoint::checkpoint_bytes(ck),
        )?;
        target.flush()?;
        self.write_checkpoint(ck)
    }

    /// Rebuild `member`'s unit of stripe `s` (the stripe checked whole, every survivor
    /// voting) and write it to `target`. The stripe lock is held through the write: a write to
    /// this stripe waits for it, then goes to the new device too. The inner error is the
    /// stripe's (it could not be rebuilt), the outer one the target's.
    /// The target's unit of a stripe `replace --skip-unrecoverable` passed over: zeros with an
    /// appendix of 0xff bytes (or, for the checksum member, a table of them), which fail every
    /// check — a unit the stripe can never take as good (FORMAT.md §2.9).
    fn poison_onto(
        &self,
        s: StripeIx,
        member: MemberIx,
        target: &DiskRef,
    ) -> Result<(), EngineError> {
        let pos = self.position_of(s, member);
        let c = crate::num::usize_of(self.geometry().chunk_bytes);
        let mut unit = vec![0u8; crate::num::usize_of(self.unit_bytes())];
        if pos == self.ck_pos() {
            unit.fill(0xff);
        } else {
            unit[c..].fill(0xff);
        }
        target.write_at(self.unit_offset(s.get()), &unit)?;
        Ok(())
    }

    fn rebuild_onto(
        &self,
        s: StripeIx,
        member: MemberIx,
        target: &DiskRef,
    ) -> Result<Result<(), EngineError>, EngineError> {
        let pos = self.position_of(s, member);
        let _guard = self.lock_stripe(s);
        // A zero stripe's units are never read: nothing to rebuild (zero.rs).
        if self.is_zero(s) {
            return Ok(Ok(()));
        }
        self.members().rebuilding_stripe(member, Some(s));
        let image = self.repair_stripe(s, &[]);
        self.members().rebuilding_stripe(member, None);
        let image = match image {
            Ok(i) => i,
            Err(e) => return Ok(Err(e)),
        };
        if pos == self.ck_pos() {
            let t = image
                .ck
                .as_ref()
                .expect("a checksum-chunk repair returns its table");
            let enc = self.ck_encode(t);
            let tb = stripeguard_integrity::ck_table_bytes(pos.get(), self.sb().chunk_bytes);
            let w = target.write_at(self.unit_offset(s.get()), &enc[..tb]);
            self.recycle([enc]);
            w?;
        } else {
            target.write_at(self.unit_offset(s.get()), &image.units[pos.get()])?;
        }
        self.recycle(image.units);
        Ok(Ok(()))
    }
}

/// How a replace goes on: the checkpoint it starts or resumes from, whether it re-adds the
/// device that left, and why a returning device is rebuilt in full.
struct ReplacePlan {
    checkpoint: Checkpoint,
    readd: bool,
    full_rebuild_reason: Option<String>,
}
