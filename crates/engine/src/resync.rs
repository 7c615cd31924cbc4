//! The write-intent life cycle and resync (FORMAT.md §2.4): a write claims its region
//! ([`Array::intent_begin`]: the bit durable before its first unit write), a flush makes every
//! completed write durable and clears the idle regions, and after an unclean shutdown the
//! first writable assembly replays the journal and makes every stripe of every dirty region
//! consistent ([`Array::resync`]), settling what the redundancy cannot decide. The record's
//! state is [`Intent`]; this file writes it to the members.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::EventAction;
use crate::intent::{Durable, InFlight, Intent};
use crate::layout::{Interrupted, Settle};
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use stripeguard_codes::Located;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::EventKind;
use stripeguard_format::IntentRecord;
use stripeguard_integrity::{Scheme, INTENT_RECORD_OFFSET};

/// Why a resync runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Why {
    /// The last writer did not close: the dirty regions.
    Unclean,
    /// A writable forced assembly brought back stale members: every stripe, each undecidable
    /// one settled.
    Forced,
}

impl Array {
    /// Claim `stripe`'s region for a write: its bit is durable on every member before this
    /// returns.
    pub(crate) fn intent_begin(&self, stripe: StripeIx) -> Result<InFlight<'_>, EngineError> {
        let (region, persisted) = {
            let mut i = self.intent().lock().expect("lock");
            let (region, newly) = i.claim(stripe.get());
            let persisted = if newly {
                self.persist_intent(&mut i)
            } else {
                Ok(())
            };
            (region, persisted)
        };
        // The claim ends when this is dropped, also when the record could not be written.
        let claim = InFlight::new(self.intent(), region);
        persisted?;
        Ok(claim)
    }

    /// Benchmarks only: run without the write-intent record (a crash then leaves stripes that
    /// no resync will visit). Measures what the record costs.
    #[doc(hidden)]
    pub fn disable_write_intent_for_benchmark(&self) {
        self.intent().lock().expect("lock").disable();
    }

    /// Array data one bit of the write-intent record covers, in stripes.
    pub fn intent_region_stripes(&self) -> u64 {
        self.intent().lock().expect("lock").stripes_per_bit()
    }

    /// Make every completed write durable, then clear the bits of regions that are settled and
    /// idle: nothing in flight and no write completed since the flush before this one (clearing
    /// a bit that the next write sets again costs two record writes for nothing; md also clears
    /// lazily).
    pub fn flush(&self) -> Result<(), EngineError> {
        self.flush_and_clear(false)
    }

    /// [`Array::flush`]; with `all` (closing: nothing can be in flight), clear every bit.
    pub(crate) fn flush_and_clear(&self, all: bool) -> Result<(), EngineError> {
        let _running = self.flush_running();
        let epoch = self.intent().lock().expect("lock").next_epoch();
        let idle = self.idle_journal_slots();
        // Taken before the members are flushed: what the stripe-state record may forget is
        // what was taken off before this (stripe_state.rs).
        let mark = self.untrusted_set().removals();
        self.save_events()?;
        self.flush_members()?;
        if !self.is_writable() {
            return Ok(());
        }
        self.free_journal_slots(idle)?;
        if all {
            // Closing: the next run's sequence starts again from 1, so no record of this one
            // may survive (a freeing has no flush of its own).
            self.flush_members()?;
        }
        // Listed blocks that writes replaced, and zero stripes written into, come off only now
        // that those writes are durable; stripes zeroed since the last flush go on.
        self.settle_untrusted_after_flush(mark)?;
        // While a member is out, no bit is cleared: the set bits are then the regions written
        // since it left, which is what a re-add of that member rebuilds (md's write-intent
        // bitmap keeps its bits for a missing member the same way).
        if self.members().any_out() {
            return Ok(());
        }
        let mut i = self.intent().lock().expect("lock");
        if i.clear_idle(epoch, all) {
            self.persist_intent(&mut i)?;
        }
        Ok(())
    }

    /// Write the record to every current member (the copy the newest is not in) and flush.
    pub(crate) fn persist_intent(&self, i: &mut Intent) -> Result<(), EngineError> {
        let generation = self.generation().load(std::sync::atomic::Ordering::Relaxed);
        // Empty with every member in: every member holds every write made so far, so a member
        // that leaves later and comes back needs at least this event count to be re-added.
        let every_member_in = !self.members().any_out();
        let (at, bytes) = i.next_copy(generation, every_member_in);
        let at = INTENT_RECORD_OFFSET + at;
        // Every member at once: a record update waits for one write and one flush.
        self.each_member(None, |_, d| d.write_at(at, &bytes).and_then(|()| d.flush()))
    }

    /// Continue the record from the newest copy on the members ([`Intent::take_over`]).
    pub(crate) fn load_intent_sequence(&self) {
        let found = self.read_intent();
        let degraded = self.members().any_out();
        self.intent()
            .lock()
            .expect("lock")
            .take_over(&found, degraded);
    }

    /// The stripes of the regions whose bits are set now (in this process's record, which holds
    /// every bit of the record on the members and the ones set since).
    pub(crate) fn intent_stripes(&self) -> Vec<u64> {
        self.intent()
            .lock()
            .expect("lock")
            .stripes(self.geometry().stripes)
    }

    /// The event count at which the record was last empty with every member in (0: never
    /// known): a returning member below it cannot be re-added (FORMAT.md §2.4).
    pub(crate) fn intent_cleared_at(&self) -> u64 {
        self.intent().lock().expect("lock").cleared_at()
    }

    /// The newest record on any current member.
    fn read_intent(&self) -> Durable {
        let copy = self.intent().lock().expect("lock").copy_bytes();
        Durable::from_newest(
            self.newest_record::<IntentRecord>(INTENT_RECORD_OFFSET, copy, |_| true),
        )
    }

    /// The stripes a resync would visit: those of the dirty regions when the array was not
    /// closed cleanly, else none.
    pub fn awaiting_resync(&self) -> Vec<u64> {
        if !self.was_unclean() {
            return vec![];
        }
        self.dirty_stripes()
    }

    fn dirty_stripes(&self) -> Vec<u64> {
        self.read_intent().stripes(self.geometry().stripes)
    }

    /// After an unclean shutdown: make every stripe of every dirty region consistent, then
    /// clear the record. Returns the number of stripes resynced.
    pub(crate) fn resync(&self) -> Result<u64, EngineError> {
        self.resync_as(Why::Unclean)
    }

    /// A writable forced assembly, before its first superblock write: hold back the
    /// superblocks of `members` (the stale members it brought back) until
    /// [`Array::adopt_forced`]. A crash in between leaves them stale on disk: the array then
    /// needs the forced assembly again, which starts over (the write-intent record is left as
    /// it was, so what it says was written since they left still decides what is trusted of
    /// them, forced.rs).
    pub(crate) fn hold_back_forced(&self, members: &[MemberIx]) -> Result<(), EngineError> {
        let mut meta = self.meta().lock().expect("lock");
        meta.held_back = members.iter().map(|m| m.get()).collect();
        Ok(())
    }

    /// Every stripe resynced after a writable forced assembly: `members` are current from the
    /// superblock write this makes on.
    pub(crate) fn adopt_forced(&self, members: &[MemberIx]) -> Result<(), EngineError> {
        let mut meta = self.meta().lock().expect("lock");
        meta.held_back.clear();
        for m in members {
            meta.table[m.get()].state = stripeguard_format::MemberState::Active;
        }
        self.write_superblocks_locked(&mut meta)?;
        drop(meta);
        // Every stripe is resynced: what they hold now is as current as anyone's.
        self.clear_forced();
        Ok(())
    }

    /// Every stripe after a writable forced assembly ([`Why::Forced`]).
    pub(crate) fn resync_forced(&self) -> Result<u64, EngineError> {
        self.resync_as(Why::Forced)
    }

    /// [`Array::resync`] after an unclean shutdown, or of the whole array after a forced
    /// assembly ([`Why`]).
    pub(crate) fn resync_as(&self, why: Why) -> Result<u64, EngineError> {
        // First the stripes whose missing chunk a degraded write saved: their parity may no
        // longer match it, so it is rebuilt from the saved copy, not from the parity.
        let touched = self.replay_journal()?;
        // Every stripe of the dirty regions, and every stripe a record named (a record is
        // only written inside a dirty region; one outside is checked all the same).
        let mut list = match why {
            Why::Unclean => self.dirty_stripes(),
            Why::Forced => (0..self.geometry().stripes).collect(),
        };
        list.extend(touched.keys().copied());
        list.sort_unstable();
        list.dedup();
        for &s in &list {
            // With the write journal every write in flight is named: what else is wrong in
            // the stripe is silent corruption.
            let cause = match touched.get(&s) {
                // A member brought back by force may hold anything from before the writes it
                // missed: every undecidable stripe is settled, whatever the journal says.
                _ if why == Why::Forced => Interrupted::Unknown,
                Some(mask) => Interrupted::Only(mask),
                // (Unless a journal device holding the interrupted writes' records was lost
                // with them: then as without the journal, FORMAT.md §2.12.)
                None if self.sb().write_journal
                    && !self
                        .journal_incomplete()
                        .load(std::sync::atomic::Ordering::Acquire) =>
                {
                    Interrupted::Only(&[])
                }
                None => Interrupted::Unknown,
            };
            self.resync_stripe(StripeIx::new(s), cause, why)?;
        }
        // Only now: a crash during the resync replays the journal again.
        self.clear_journal()?;
        {
            let mut i = self.intent().lock().expect("lock");
            // With a member out the bits stay: they are what its re-add must rebuild.
            if !self.members().any_out() {
                i.clear_all();
            }
            self.flush_members()?;
            // Both copies: the one the crash was writing may be torn, which is the crash's
            // doing, not damage for a later check to find.
            self.persist_intent(&mut i)?;
            self.persist_intent(&mut i)?;
        }
        self.count(|c| c.resynced += list.len() as u64);
        self.note(
            EventKind::ResyncFinished,
            None,
            format!(
                "{}: {} stripe(s) {} made consistent{}",
                match why {
                    Why::Unclean => "after an unclean shutdown",
                    Why::Forced => "after a writable forced assembly",
                },
                list.len(),
                match why {
                    Why::Unclean => "of the dirty regions",
                    Why::Forced => "(every stripe) verified and",
                },
                if touched.is_empty() {
                    String::new()
                } else {
                    format!(", {} from the write journal", touched.len())
                }
            ),
        );
        Ok(list.len() as u64)
    }

    /// Make `stripes` consistent as after an unclean shutdown, whatever the write-intent
    /// record says (a reshape's views, whose writes set no bit: reshape.rs).
    pub(crate) fn resync_stripes(
        &self,
        stripes: impl Iterator<Item = StripeIx>,
    ) -> Result<(), EngineError> {
        for s in stripes {
            self.resync_stripe(s, Interrupted::Unknown, Why::Unclean)?;
        }
        Ok(())
    }

    /// Make one stripe consistent after a crash (FORMAT.md §2.4).
    fn resync_stripe(
        &self,
        stripe: StripeIx,
        cause: Interrupted<'_>,
        why: Why,
    ) -> Result<(), EngineError> {
        let _guard = self.lock_stripe(stripe);
        // A zero stripe reads as zeros whatever a crash left in its units (zero.rs).
        if self.is_zero(stripe) {
            return Ok(());
        }
        if self.sb().scheme == Scheme::None {
            return self.recompute_parity(stripe, "resync: parity recomputed from the data");
        }
        // Checksum-chunk: the table and the parity decide (a unit that disagrees with the table
        // is rolled back from the parity; a table behind data that the parity agrees with is
        // recomputed); what they cannot decide is settled like every scheme below.
        match self.repair_stripe_as(stripe, &[], cause) {
            Ok(_) => Ok(()),
            // A stripe no interrupted write touched is not the crash's to settle: it stays
            // unrecoverable, as a read would find it (counted and logged by the diagnosis).
            Err(EngineError::Unrecoverable { .. }) if !cause.settles() => Ok(()),
            // Degraded and undecidable, or no room to list what it cannot verify: the stripe
            // stays unreadable (reads say so); the rest of the array must still come up.
            Err(EngineError::Unrecoverable { .. }) if why == Why::Forced => self.settle_or_report(
                stripe,
                Settle::LoseUnreadable,
                EventKind::ResyncSettled,
                "a forced assembly found more units stale, damaged or out than the parity rebuilds: what failed its checks or sat on a member that is out is listed untrusted (an out member's units zero-filled), the rest kept, parity recomputed",
            ),
            // Checksum-chunk with its checksum member out is RAID without checksums until a
            // replace rebuilds the tables: as for `none`, the parity is recomputed from the data
            // (md's rule). Nothing on disk says which data unit an interrupted write touched
            // (the intent record is per stripe), so settling would list every data unit —
            // refusing flushed ones; this keeps them, and an unflushed write's chunk may read
            // mixed, as on an array without checksums (FORMAT.md §2.10).
            Err(EngineError::Unrecoverable { .. }) if self.parity_alone_settles(stripe) => self
                .recompute_parity(
                    stripe,
                    "resync with the checksum member out, the parity alone not deciding which unit an interrupted write left behind: parity recomputed from the data (as without checksums)",
                ),
            Err(EngineError::Unrecoverable { .. }) => self.settle(stripe),
            Err(e) => Err(e),
        }
    }

    /// Whether a crash's undecidable stripe is settled by recomputing its parity from the
    /// data: checksum-chunk without the write journal, its checksum member out (no table
    /// decides), every data unit's member in (the parity is rebuilt from all of them).
    fn parity_alone_settles(&self, stripe: StripeIx) -> bool {
        self.sb().scheme == Scheme::ChecksumChunk
            && !self.sb().write_journal
            && self.is_failed(self.ck_member())
            && Pos::upto(self.geometry().k).all(|p| !self.is_failed(self.member_of(stripe, p)))
    }

    /// Re-encode the parity of `stripe` from its data units as they are and write it.
    fn recompute_parity(&self, stripe: StripeIx, evidence: &str) -> Result<(), EngineError> {
        let g = self.geometry();
        let all: Vec<Pos> = Pos::upto(g.n()).collect();
        let units = self.read_units(stripe, &all)?;
        if units[..g.k].iter().any(|u| u.is_none()) {
            // A data unit is unreadable: the parity is all that knows it; leave it.
            return Ok(());
        }
        let c = usize_of(g.chunk_bytes);
        let chunks: Vec<&[u8]> = units[..g.k]
            .iter()
            .map(|u| &u.as_ref().expect("read")[..c])
            .collect();
        if units.iter().all(|u| u.is_some()) {
            let every: Vec<&[u8]> = units
                .iter()
                .map(|u| &u.as_ref().expect("read")[..c])
                .collect();
            if matches!(self.code().locate(&every, &[]), Ok(Located::Consistent)) {
                return Ok(());
            }
        }
        let mut parity: Vec<Vec<u8>> = (0..g.m).map(|_| vec![0u8; c]).collect();
        let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        self.code().encode(&chunks, &mut views)?;
        let writes: Vec<(Pos, u64, &[u8])> = Pos::new(g.k)
            .onward()
            .zip(&parity)
            .map(|(pos, p)| (pos, 0, &p[..]))
            .collect();
        self.write_units(stripe, &writes)?;
        self.record_resync(stripe, EventKind::Resync, evidence.to_string());
        Ok(())
    }

    /// A stripe the votes cannot decide: keep every data unit as it is on disk, give each the
    /// truth of its own bytes, recompute the parity, seal and write everything.
    fn settle(&self, stripe: StripeIx) -> Result<(), EngineError> {
        self.settle_or_report(
            stripe,
            Settle::AsOnDisk,
            EventKind::ResyncSettled,
            "more units were interrupted than the parity can decide: data kept as on disk (a unit torn by the crash may mix old and new sectors), parity recomputed",
        )
    }

    /// [`Array::settle_with`]; a stripe it cannot settle (an unreadable data unit, no room to
    /// list what fails its checks) stays as it is, reported: the rest of the array comes up.
    pub(crate) fn settle_or_report(
        &self,
        stripe: StripeIx,
        known: Settle<'_>,
        kind: EventKind,
        evidence: &str,
    ) -> Result<(), EngineError> {
        match self.settle_with(stripe, known, kind, evidence) {
            Err(EngineError::Unrecoverable { reason, .. }) => {
                self.record_resync(stripe, EventKind::ResyncUnrecoverable, reason);
                Ok(())
            }
            other => other,
        }
    }

    /// [`Array::settle`], as `how` says ([`Settle`]).
    pub(crate) fn settle_with(
        &self,
        stripe: StripeIx,
        how: Settle<'_>,
        kind: EventKind,
        evidence: &str,
    ) -> Result<(), EngineError> {
        let g = self.geometry();
        let (k, c) = (g.k, usize_of(g.chunk_bytes));
        let all: Vec<Pos> = Pos::upto(g.n()).collect();
        let mut units = self.read_units(stripe, &all)?;
        let known = match how {
            Settle::Known(pos, bytes) => {
                let mut u = self.unit_buf();
                u.copy_from_slice(bytes);
                units[pos.get()] = Some(u);
                Some(pos)
            }
            _ => None,
        };
        // Data units no member gave: lost, when the caller says they may be (zero-filled and
        // listed whole below, so they read refused, never as the zeros).
        let lost: Vec<Pos> = if matches!(how, Settle::LoseUnreadable) {
            Pos::upto(k).filter(|p| units[p.get()].is_none()).collect()
        } else {
            vec![]
        };
        for &p in &lost {
            let mut u = self.unit_buf();
            u.fill(0);
            units[p.get()] = Some(u);
        }
        if units[..k].iter().any(|u| u.is_none()) {
            return Err(EngineError::Unrecoverable {
                stripe: stripe.get(),
                reason: "resync cannot settle a stripe with an unreadable data unit".into(),
            });
        }
        let mut units: Vec<AlignedBuf> = units
            .into_iter()
            .map(|u| u.unwrap_or_else(|| self.unit_buf()))
            .collect();
        // Every block that fails its own check is listed untrusted, durably, before the seal
        // below would make it pass (FORMAT.md §2.7): it then reads refused, never as good.
        if self.sb().scheme != Scheme::None {
            let mut ranges: Vec<_> = self
                .layout()
                .unverified(self, stripe, &units, known)?
                .into_iter()
                .filter(|r| !lost.iter().any(|p| p.get() == usize::from(r.position)))
                .collect();
            ranges.extend(
                lost.iter()
                    .map(|&p| crate::untrusted::whole(stripe, p, c, None)),
            );
            ranges.sort_by_key(|r| (r.position, r.offset));
            if !self.list_untrusted(&ranges, evidence)? {
                self.recycle(units);
                return Err(EngineError::Unrecoverable {
                    stripe: stripe.get(),
                    reason: format!(
                        "{} range(s) of its data fail their checks and the stripe-state record has no room to list them (FORMAT.md §2.7): not settled, the stripe stays as the crash left it",
                        ranges.len()
                    ),
                });
            }
        }
        let (data, parity) = units.split_at_mut(k);
        let chunks: Vec<&[u8]> = data.iter().map(|u| &u[..c]).collect();
        let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
        self.code().encode(&chunks, &mut views)?;
        let layout = self.layout();
        layout.seal_settled(self, stripe, &mut units)?;
        let writes: Vec<(Pos, u64, &[u8])> = Pos::upto(units.len())
            .zip(&units)
            .map(|(p, u)| (p, 0, &u[..]))
            .collect();
        self.write_units(stripe, &writes)?;
        layout.finish_settled(self, stripe, &units)?;
        self.forget_verified(stripe, Pos::upto(k));
        self.record_resync(stripe, kind, evidence.to_string());
        Ok(())
    }

    pub(crate) fn record_resync(&self, stripe: StripeIx, kind: EventKind, evidence: String) {
        self.log_event(crate::events::stripe_event(
            stripe,
            kind,
            evidence,
            EventAction::Resynced,
        ));
    }
}
