//! Crash consistency as one life cycle: **begin** → **journal** → (the caller puts the I/Os in
//! place) → **flush** → after a crash, **resync**. The rest of the engine goes through it:
//!
//! - **begin** ([`Pending::claim`], [`Pending::save_missing`]): a write's stripe has its
//!   write-intent bit durable on every member before the write's first unit write (FORMAT.md
//!   §2.4), and a degraded stripe's missing data chunks are saved in the journal before its
//!   parity changes (§2.6);
//! - **journal** ([`Pending::journal`]): with the write journal (`create --journal`), every
//!   in-place I/O of the batch is durable in the journal before the first one is issued;
//! - the batch's claims and journal slots are released when its [`Pending`] is dropped, once
//!   the batch is in place (a later flush then frees the slots and clears idle bits);
//! - **flush** (`Array::flush`): every completed write durable, the slots of finished writes
//!   freed, the bits of idle regions cleared;
//! - **resync** (`Array::resync`, at the first writable assembly after an unclean shutdown):
//!   the journal replayed, then every stripe of every dirty region made consistent, settling
//!   what the redundancy cannot decide.
//!
//! The state is in `intent.rs` (the record) and `journal.rs` (the slots); what is written to
//! the members, in `resync.rs` and `journaling.rs`.

use crate::array::Array;
use crate::error::EngineError;
use crate::intent::InFlight;
use crate::journal::{Saved, UnitWrites};
use crate::num::StripeIx;

/// A batch of writes inside the life cycle, from its first claim until it is dropped (see the
/// module comment).
pub(crate) struct Pending<'a> {
    array: &'a Array,
    claims: Vec<InFlight<'a>>,
    saved: Vec<Saved<'a>>,
    journaled: Option<Saved<'a>>,
}

impl Array {
    /// A batch of writes entering the crash-consistency life cycle (nothing claimed yet).
    pub(crate) fn pending(&self) -> Pending<'_> {
        Pending {
            array: self,
            claims: Vec::new(),
            saved: Vec::new(),
            journaled: None,
        }
    }
}

impl Pending<'_> {
    /// Begin a write of `stripe`: its write-intent region claimed, the bit durable before
    /// this returns.
    pub(crate) fn claim(&mut self, stripe: StripeIx) -> Result<(), EngineError> {
        self.claims.push(self.array.intent_begin(stripe)?);
        Ok(())
    }

    /// Begin a degraded write of `stripe`: every missing data chunk saved in the journal
    /// before the parity changes (it reads the stripe, so it fails as a read does).
    pub(crate) fn save_missing(&mut self, stripe: StripeIx) -> Result<(), EngineError> {
        self.saved.extend(self.array.save_missing(stripe)?);
        Ok(())
    }

    /// With the write journal: every in-place I/O of the batch (stripe, its unit writes)
    /// durable in the journal before any is issued.
    pub(crate) fn journal(
        &mut self,
        writes: &[(StripeIx, UnitWrites<'_>)],
    ) -> Result<(), EngineError> {
        self.journaled = self.array.journal_writes(writes)?;
        Ok(())
    }
}
