//! What a forced assembly may trust of the stale members it brings back (FORMAT.md §2.1).
//!
//! A stale member's unit is what it held when it left. Where nothing was written since, that
//! is the current unit; where something was, it may be older than what the array went on to
//! hold — and the only things that can tell are metadata on members that stayed current. Two
//! facts decide, per stripe:
//! - **Written since?** The write-intent record (§2.4) clears no bit while a member is out, so
//!   a region whose bit is clear, as the record stood at assembly, was not written since the
//!   first departure: a brought-back unit there is trusted as any other.
//! - **Vouched for?** In a region that was written, a brought-back unit is used only when
//!   metadata on a current member covers it: for the appendix schemes, a present parity unit on
//!   a current member and no parity unit on a brought-back one (every parity appendix mirrors
//!   every data chunk's version or CRC, and a first read is cross-checked against the first
//!   parity, which must not be a stale one); for checksum-chunk, the checksum member present and
//!   current. Otherwise the unit is read as **erased**: rebuilt from the others when they
//!   suffice, the stripe refused when they do not (a writable forced assembly then lists it
//!   untrusted, §2.7). It is never returned unverified.

use crate::array::Array;
use crate::num::{MemberIx, Pos, StripeIx};
use crate::trust::ForcedView;
use stripeguard_integrity::Scheme;

impl Array {
    /// Whether `member`'s unit of `stripe` is to be read as erased (module doc): a member a
    /// forced assembly brought back, in a region written since, with no current metadata to
    /// vouch for its unit.
    pub(crate) fn forced_unvouched(&self, stripe: StripeIx, member: MemberIx) -> bool {
        if !self.forced_any().load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let guard = self.forced_view().lock().expect("lock");
        let Some(v) = guard.as_ref() else {
            return false;
        };
        if !v.members.contains(&member.get()) || !v.written_since(stripe.get()) {
            return false;
        }
        let g = self.geometry();
        let current = |m: MemberIx| !self.is_failed(m) && !v.members.contains(&m.get());
        if self.sb().scheme == Scheme::ChecksumChunk {
            return !current(self.ck_member());
        }
        let parities: Vec<MemberIx> = Pos::new(g.k)
            .onward()
            .take(g.m)
            .map(|p| self.member_of(stripe, p))
            .collect();
        let one_current = parities.iter().any(|&m| current(m));
        let a_stale_one = parities.iter().any(|m| v.members.contains(&m.get()));
        !one_current || a_stale_one
    }

    /// Record what a forced assembly brought back (before anything reads), from the intent
    /// record as it stands now.
    pub(crate) fn set_forced(&self, members: Vec<usize>) {
        let (per_bit, written) = {
            let i = self.intent().lock().expect("lock");
            let per = i.stripes_per_bit();
            let stripes = self.geometry().stripes;
            let regions = usize::try_from(stripes.div_ceil(per.max(1))).unwrap_or(0);
            let mut w = vec![false; regions];
            for s in i.stripes(stripes) {
                if let Some(x) = usize::try_from(s / per.max(1))
                    .ok()
                    .and_then(|r| w.get_mut(r))
                {
                    *x = true;
                }
            }
            (per, w)
        };
        *self.forced_view().lock().expect("lock") = Some(ForcedView {
            members,
            per_bit,
            written,
        });
        self.forced_any()
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The members brought back are current now (a writable forced assembly adopted them).
    pub(crate) fn clear_forced(&self) {
        self.forced_any()
            .store(false, std::sync::atomic::Ordering::Release);
        *self.forced_view().lock().expect("lock") = None;
    }
}
