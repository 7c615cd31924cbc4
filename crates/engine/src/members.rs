//! The member set: each member's handle, whether it is out of the array, and its health as
//! `status` shows it. A slot's handle changes only when `replace` puts a new device in it, which
//! it does while the array serves I/O, so everyone takes a handle per access. Shared with the
//! holder's heartbeat thread. The member table (FORMAT.md §2.1) and the decision to take a
//! member out are the array's (`Array::fail_member`, the one place that fails a member); this
//! keeps the flags it sets.

use crate::num::{MemberIx, StripeIx};
use crate::sync::{Mutex, RwLock};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::PoisonError;
use stripeguard_disk::{DiskError, DiskRef};

/// A member's state.
#[derive(Clone, Debug, Serialize)]
pub struct MemberHealth {
    /// Index in the array.
    pub index: usize,
    /// Its name (path).
    pub name: String,
    /// `None` when healthy; otherwise why it is out of the array.
    pub failed: Option<String>,
    /// Superblock copies that were damaged or stale at assembly (and rewritten when writable).
    pub superblock_copies_fixed: u8,
}

/// The members' handles and flags.
pub(crate) struct Members {
    disks: RwLock<Vec<DiskRef>>,
    out: Vec<AtomicBool>,
    health: Mutex<Vec<MemberHealth>>,
    /// The member a replace is rebuilding. Every write of one of its units reaches the new
    /// device although the member still counts as out for reads: a stripe already rebuilt
    /// stays current, one not yet rebuilt is rebuilt from the other members later (which hold
    /// that write too). So a replace can run while the array serves writes.
    /// (member, the stripe the replace itself is writing, whose unit it writes once itself).
    rebuilding: Mutex<Option<(MemberIx, Option<StripeIx>)>>,
    /// Asks a running replace to stop at its next stripe (it resumes when run again).
    cancel: AtomicBool,
}

/// A replace's claim on the member set; dropped, no member is being rebuilt.
pub(crate) struct RebuildClaim<'a>(&'a Members);

impl Drop for RebuildClaim<'_> {
    fn drop(&mut self) {
        *self
            .0
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl Members {
    pub(crate) fn new(disks: Vec<DiskRef>) -> Members {
        let health = disks
            .iter()
            .enumerate()
            .map(|(index, d)| MemberHealth {
                index,
                name: d.name().to_string(),
                failed: None,
                superblock_copies_fixed: 0,
            })
            .collect();
        Members {
            out: disks.iter().map(|_| AtomicBool::new(false)).collect(),
            disks: RwLock::new(disks),
            health: Mutex::new(health),
            rebuilding: Mutex::new(None),
            cancel: AtomicBool::new(false),
        }
    }

    /// A replace of `member` begins (one at a time: `Err` names the member already being
    /// rebuilt).
    pub(crate) fn begin_rebuild(&self, member: MemberIx) -> Result<RebuildClaim<'_>, MemberIx> {
        let mut r = self
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((m, _)) = *r {
            return Err(m);
        }
        *r = Some((member, None));
        self.cancel.store(false, Ordering::Relaxed);
        Ok(RebuildClaim(self))
    }

    /// The replace is writing (`Some`) or done writing (`None`) the rebuilt unit of `stripe`
    /// itself.
    pub(crate) fn rebuilding_stripe(&self, member: MemberIx, stripe: Option<StripeIx>) {
        *self
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((member, stripe));
    }

    /// Whether a write of `member`'s unit of `stripe` goes to the device a replace is
    /// filling (every stripe but the one the replace is writing itself).
    pub(crate) fn writes_reach(&self, member: MemberIx, stripe: StripeIx) -> bool {
        matches!(*self.rebuilding.lock().unwrap_or_else(PoisonError::into_inner),
            Some((m, busy)) if m == member && busy != Some(stripe))
    }

    /// Ask a running replace to stop at its next stripe.
    pub(crate) fn cancel_rebuild(&self) {
        if self
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the running replace was asked to stop (the request is taken).
    pub(crate) fn take_cancel(&self) -> bool {
        self.cancel.swap(false, Ordering::Relaxed)
    }

    /// Member `i`'s handle.
    pub(crate) fn get(&self, i: MemberIx) -> DiskRef {
        self.disks.read().unwrap_or_else(PoisonError::into_inner)[i.get()].clone()
    }

    /// Every member's handle, as of now.
    pub(crate) fn all(&self) -> Vec<DiskRef> {
        self.disks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many members (k + m, and the checksum member).
    pub(crate) fn len(&self) -> usize {
        self.out.len()
    }

    /// Put `d` in slot `i` (a replace), named in its health.
    pub(crate) fn set(&self, i: MemberIx, d: DiskRef) {
        let name = d.name().to_string();
        self.disks.write().unwrap_or_else(PoisonError::into_inner)[i.get()] = d;
        self.health.lock().unwrap_or_else(PoisonError::into_inner)[i.get()].name = name;
    }

    /// Whether member `i` is out of the array.
    pub(crate) fn is_out(&self, i: MemberIx) -> bool {
        self.out[i.get()].load(Ordering::Relaxed)
    }

    /// Whether any member is out.
    pub(crate) fn any_out(&self) -> bool {
        MemberIx::upto(self.len()).any(|i| self.is_out(i))
    }

    /// Members out among the first `n` (the checksum member, last, holds no data).
    pub(crate) fn out_among(&self, n: usize) -> usize {
        self.out
            .iter()
            .take(n)
            .filter(|f| f.load(Ordering::Relaxed))
            .count()
    }

    /// Take member `i` out, saying why; false if it was out already.
    pub(crate) fn take_out(&self, i: MemberIx, why: String) -> bool {
        if self.out[i.get()].swap(true, Ordering::Relaxed) {
            return false;
        }
        self.health.lock().unwrap_or_else(PoisonError::into_inner)[i.get()].failed = Some(why);
        true
    }

    /// Member `i` is current again (a replace finished rebuilding it).
    pub(crate) fn put_back(&self, i: MemberIx) {
        self.out[i.get()].store(false, Ordering::Relaxed);
        self.health.lock().unwrap_or_else(PoisonError::into_inner)[i.get()].failed = None;
    }

    /// Superblock copies found damaged or stale at assembly, per member.
    pub(crate) fn note_superblock_fixes(&self, fixes: impl IntoIterator<Item = u8>) {
        let mut h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        for (h, f) in h.iter_mut().zip(fixes) {
            h.superblock_copies_fixed = f;
        }
    }

    /// Every member's health.
    pub(crate) fn health(&self) -> Vec<MemberHealth> {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Write record `bytes` of `sequence` into its slot of the two at `offset` (the one
    /// `sequence mod 2` names, FORMAT.md §2.2–§2.3: a torn write can only hit the slot the
    /// newest record is not in) on every member not out, flushing each when `flush`. Returns
    /// the members whose write failed, for the caller to take out (the heartbeat thread, which
    /// cannot change the member table, leaves them to the holder's own I/O).
    pub(crate) fn write_slot(
        &self,
        offset: u64,
        sequence: u64,
        bytes: &[u8],
        flush: bool,
    ) -> Vec<(MemberIx, DiskError)> {
        let at = offset + stripeguard_format::slot_offset(sequence, bytes.len());
        self.all()
            .iter()
            .enumerate()
            .map(|(i, d)| (MemberIx::new(i), d))
            .filter(|(i, _)| !self.is_out(*i))
            .filter_map(|(i, d)| {
                d.write_at(at, bytes)
                    .and_then(|()| if flush { d.flush() } else { Ok(()) })
                    .err()
                    .map(|e| (i, e))
            })
            .collect()
    }
}
