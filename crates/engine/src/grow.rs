//! Growing the array (FORMAT.md §2, "Growing the array"): more stripes on members that have
//! room for them, online.
//!
//! The superblock's stripe count is the only field that changes; the journal slots move to the
//! new end of the data area and the write-intent record's region size follows the new count.
//! The order makes a crash at any point leave the array at the old size or the new one, never
//! between:
//!
//! 1. the new stripes that lie wholly past the old journal slots are initialised with the array
//!    serving (nothing reads or writes past the old end yet);
//! 2. every stripe lock is taken and the array is flushed as at a close: every write durable,
//!    every journal slot free and its header's zeros durable, every intent bit clear;
//! 3. the new stripes over the old slots are initialised — or, in an array that keeps zero
//!    stripes, every new stripe is listed as zeros in the stripe-state record (a copy naming
//!    stripes past the old end is not used by the old geometry, so a crash here falls back to
//!    the copy before it) — and the new slots' headers are zeroed and flushed;
//! 4. the superblocks are written with the new count (the commit), then the intent record with
//!    its new region size, and an event of kind `grown`.

use crate::array::Array;
use crate::error::EngineError;
use crate::num::{usize_of, MemberIx, StripeIx};
use stripeguard_format::EventKind;
use stripeguard_integrity::MemberState;

/// What [`Array::grow`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grown {
    /// Stripes before.
    pub from_stripes: u64,
    /// Stripes now.
    pub to_stripes: u64,
    /// The new stripes were listed as zero stripes (nothing of them written); else every unit
    /// was written.
    pub as_zero_stripes: bool,
    /// User-visible bytes now.
    pub capacity_bytes: u64,
}

/// How many times the locked step gives way to a flush that brings an over-full stripe-state
/// record back within its room (see [`Array::grow`]).
const LOCKED_TRIES: usize = 8;

impl Array {
    /// The most stripes every member has room for (metadata area, units and journal slots):
    /// what `grow --size max` grows to. Members that are out do not count.
    pub fn stripes_that_fit(&self) -> u64 {
        MemberIx::upto(self.members().len())
            .filter(|&m| !self.is_failed(m))
            .map(|m| self.members().get(m).measure_size())
            .map(|size| self.sb().units_that_fit(size))
            .min()
            .unwrap_or(0)
    }

    /// The member with the least room, and its bytes (what limits [`Array::stripes_that_fit`]).
    pub fn smallest_member(&self) -> (String, u64) {
        MemberIx::upto(self.members().len())
            .filter(|&m| !self.is_failed(m))
            .map(|m| {
                let d = self.members().get(m);
                (d.name().to_string(), d.measure_size())
            })
            .min_by_key(|(_, s)| *s)
            .unwrap_or_default()
    }

    /// Grow the array to `stripes` stripes (FORMAT.md §2, "Growing the array"), online: reads
    /// and writes wait only while the old end is settled and the superblocks are written.
    /// `progress(done, total)` counts the stripes initialised (none when the new ones are zero
    /// stripes). A `stripes` equal to the current count is no change (`from == to`).
    pub fn grow(
        &self,
        stripes: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Grown, EngineError> {
        let from = self.check_grow(stripes)?;
        let zero_stripes = self.keeps_zero_stripes();
        if stripes == from {
            return Ok(self.grown(from, zero_stripes));
        }
        // Step 1: the units past the old journal slots, without the locks.
        let free_from = self.first_stripe_past_journal(from).clamp(from, stripes);
        if !zero_stripes {
            self.layout()
                .initialise(self, false, free_from..stripes, progress)?;
        }
        for _ in 0..LOCKED_TRIES {
            // Steps 2-4, every stripe lock held.
            let locks = self.lock_stripes((0..self.stripe_lock_count()).map(StripeIx::new));
            // A grow or replace that started meanwhile, or a member gone: checked again.
            if self.check_grow(stripes)? != from {
                return Err(EngineError::Config(
                    "the array's size changed while growing it".into(),
                ));
            }
            if zero_stripes && !self.zero_set_fits() {
                // The next flush writes the smallest zero ranges out through the write path,
                // which takes stripe locks: give it the locks back.
                drop(locks);
                self.flush()?;
                continue;
            }
            // Step 2: as at a close (nothing is in flight: every stripe lock is held).
            self.flush_and_clear(true)?;
            // Step 3.
            let listed = zero_stripes && self.list_zero_stripes(from, stripes)?;
            if !listed {
                let rest = if zero_stripes { stripes } else { free_from };
                self.layout()
                    .initialise(self, false, from..rest, progress)?;
            }
            self.zero_journal_headers(stripes)?;
            self.flush_members()?;
            // Step 4: the commit.
            self.commit_stripes(stripes)?;
            drop(locks);
            let grown = self.grown(from, listed);
            self.note(
                EventKind::Grown,
                None,
                format!(
                    "grown from {from} to {stripes} stripes ({} to {} bytes){}",
                    from * self.geometry().stripe_data_bytes(),
                    grown.capacity_bytes,
                    if listed {
                        ", the new stripes zero stripes"
                    } else {
                        ", every new unit written"
                    }
                ),
            );
            return Ok(grown);
        }
        Err(EngineError::Config(format!(
            "could not grow: writes kept splitting the zero stripes faster than {LOCKED_TRIES} flushes wrote them out; try again when the array is quieter"
        )))
    }

    fn grown(&self, from: u64, as_zero_stripes: bool) -> Grown {
        Grown {
            from_stripes: from,
            to_stripes: self.geometry().stripes,
            as_zero_stripes,
            capacity_bytes: self.capacity_bytes(),
        }
    }

    /// The refusals of [`Array::grow`]; the current stripe count when it may go on.
    fn check_grow(&self, stripes: u64) -> Result<u64, EngineError> {
        let cfg = |s: String| Err(EngineError::Config(s));
        let from = self.geometry().stripes;
        if !self.is_writable() {
            return cfg("the array was assembled read-only".into());
        }
        if stripes < from {
            return cfg(format!(
                "the array has {from} stripes; it cannot shrink to {stripes}"
            ));
        }
        let table = self.meta().lock().expect("lock").table.clone();
        let out: Vec<String> = table
            .iter()
            .enumerate()
            .filter(|&(i, s)| s.state != MemberState::Active || self.is_failed(MemberIx::new(i)))
            .map(|(i, s)| format!("member {i} is {}", s.state.name()))
            .collect();
        if !out.is_empty() {
            return cfg(format!(
                "{}: replace it first (a member that is out would need every new stripe rebuilt, and a re-add needs the write-intent bits of what it missed)",
                out.join(", ")
            ));
        }
        let fits = self.stripes_that_fit();
        if stripes > fits {
            let (smallest, size) = self.smallest_member();
            return cfg(format!(
                "{stripes} stripes need {} bytes on every member, but {smallest} holds {size} ({fits} stripes fit): grow every member first",
                self.member_bytes_at(stripes)
            ));
        }
        Ok(from)
    }

    /// Bytes each member needs for `stripes` stripes (metadata area, units, journal slots).
    pub(crate) fn member_bytes_at(&self, stripes: u64) -> u64 {
        let slots = u64::from(self.sb().journal_slots) * self.sb().journal_slot_bytes();
        self.journal_offset_at(stripes).saturating_add(slots)
    }

    /// The first stripe whose units lie wholly past the journal slots of an array of `stripes`.
    fn first_stripe_past_journal(&self, stripes: u64) -> u64 {
        let end = self.member_bytes_at(stripes) - self.sb().data_offset_bytes;
        end.div_ceil(self.unit_bytes())
    }

    /// Zero the header of every journal slot of an array of `stripes` stripes, on every
    /// member (what the slots held before is not a record of this array's run).
    fn zero_journal_headers(&self, stripes: u64) -> Result<(), EngineError> {
        let header = vec![0u8; usize_of(stripeguard_format::JOURNAL_HEADER_BYTES)];
        let at = self.journal_offset_at(stripes);
        let slot = self.sb().journal_slot_bytes();
        let slots = u64::from(self.sb().journal_slots);
        self.each_member(None, |_, d| {
            (0..slots).try_for_each(|j| d.write_at(at + j * slot, &header))
        })
    }

    /// The commit: the superblocks say `stripes`; then the write-intent record is cut for it
    /// (empty: every write was flushed and no member is out) and the planner told.
    fn commit_stripes(&self, stripes: u64) -> Result<(), EngineError> {
        {
            let mut meta = self.meta().lock().expect("lock");
            self.set_stripes(stripes);
            self.write_superblocks_locked(&mut meta)?;
        }
        let mut i = self.intent().lock().expect("lock");
        i.regrid(
            &self.sb().layout,
            stripes,
            self.geometry().stripe_data_bytes(),
        );
        self.persist_intent(&mut i)
    }
}
