//! An array as one geometry's view of a reshape in progress (reshape.rs, online.rs; the
//! array holds its [`View`] and asks it at each point below).
//!
//! While a reshape runs, two geometries share the members, and the superblocks, the event
//! log, the write-intent record and the sequence numbers are the reshape's, not either
//! geometry's. An array that is a view therefore:
//! - takes its hybrid-seq sequence numbers from the one counter both views share
//!   ([`ViewShared::next_sequence`]): a unit the new geometry writes over one the old geometry
//!   wrote always gets a higher number, as if one array had written both. A counter past its
//!   reservation raises the reshape's superblocks' high-water mark first;
//! - writes no superblock of its own (only the untrusted flag is carried into the
//!   reshape's): a member that fails is out in memory only and stops the reshape
//!   ([`ViewShared::failed`]; writes are refused from then on, so nothing is written that the
//!   member would miss);
//! - keeps its events in memory (the reshape logs them through the array it ends with);
//! - sets no write-intent bit (a crash of an online reshape resyncs every stripe, FORMAT.md
//!   §2 "Reshaping the array");
//! - writes the stripe-state record only when [`View::keeps_record`] says so: the old view
//!   while its stripes hold data (the record numbers old stripes), the new view only at the
//!   finish, when the record becomes the new geometry's.

use crate::error::EngineError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use stripeguard_disk::{DiskError, DiskRef};
use stripeguard_format::{Superblock, SUPERBLOCK_COPY_OFFSETS};

/// What both views of one reshape share.
pub(crate) struct ViewShared {
    /// Every member, old and added, in index order.
    members: Vec<DiskRef>,
    /// The reshape's superblock as last written, and the last sequence number handed out.
    state: crate::sync::Mutex<(Superblock, u64)>,
    /// Sequence numbers a raise of the high-water mark reserves.
    reservation: u64,
    /// A member failed in a view.
    failed: AtomicBool,
}

impl ViewShared {
    /// `sb`: the reshape's superblock as written to `members`; sequence numbers are handed out
    /// from `next + 1` up.
    pub(crate) fn new(
        members: Vec<DiskRef>,
        sb: Superblock,
        next: u64,
        reservation: u64,
    ) -> Arc<ViewShared> {
        Arc::new(ViewShared {
            members,
            reservation,
            state: crate::sync::Mutex::new((sb, next)),
            failed: AtomicBool::new(false),
        })
    }

    /// The next sequence number, never handed out before (even across a crash).
    pub(crate) fn next_sequence(&self) -> Result<u64, EngineError> {
        let mut st = self.state.lock().expect("lock");
        if st.1 >= st.0.sequence_high_water {
            let mut sb = st.0.clone();
            sb.sequence_high_water += self.reservation;
            sb.generation += 1;
            write_superblocks(&self.members, &sb, false)?;
            st.0 = sb;
        }
        st.1 += 1;
        Ok(st.1)
    }

    /// The reshape's superblock as last written.
    pub(crate) fn superblock(&self) -> Superblock {
        self.state.lock().expect("lock").0.clone()
    }

    /// Carry a view's "blocks are listed untrusted" flag (incompatible feature bit 2, §2.1)
    /// into the reshape's superblocks.
    pub(crate) fn set_untrusted_listed(&self, on: bool) -> Result<(), EngineError> {
        let mut st = self.state.lock().expect("lock");
        if st.0.untrusted_listed == on {
            return Ok(());
        }
        let mut sb = st.0.clone();
        sb.untrusted_listed = on;
        sb.generation += 1;
        write_superblocks(&self.members, &sb, false)?;
        st.0 = sb;
        Ok(())
    }

    /// The commit: `sb` (the new geometry, without the reshape) on the members it names, then
    /// the superblock of a member that leaves (a level change down) erased.
    pub(crate) fn commit(&self, sb: &Superblock) -> Result<(), EngineError> {
        let mut st = self.state.lock().expect("lock");
        let keep = usize::from(sb.members).min(self.members.len());
        write_superblocks(&self.members[..keep], sb, false)?;
        for d in &self.members[keep..] {
            erase_superblock(d)?;
        }
        st.0 = sb.clone();
        Ok(())
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(crate) fn member_failed(&self) {
        self.failed.store(true, Ordering::Release);
    }
}

/// One array's part in a reshape.
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) shared: Arc<ViewShared>,
    keeps_record: Arc<AtomicBool>,
}

impl View {
    pub(crate) fn new(shared: &Arc<ViewShared>, keeps_record: bool) -> View {
        View {
            shared: Arc::clone(shared),
            keeps_record: Arc::new(AtomicBool::new(keeps_record)),
        }
    }

    /// Whether this view may write the stripe-state record.
    pub(crate) fn keeps_record(&self) -> bool {
        self.keeps_record.load(Ordering::Acquire)
    }

    pub(crate) fn set_keeps_record(&self, keep: bool) {
        self.keeps_record.store(keep, Ordering::Release);
    }
}

/// Write `sb` (with each member's index) to every member, each copy flushed before the next
/// (FORMAT.md §2.1's update order): the added ones (index `n` up) first when `added_first`.
pub(crate) fn write_superblocks(
    members: &[DiskRef],
    sb: &Superblock,
    added_first: bool,
) -> Result<(), EngineError> {
    let old = sb
        .reshape
        .map(|r| usize::from(r.members))
        .unwrap_or(members.len());
    let order: Vec<usize> = if added_first {
        (old..members.len()).chain(0..old).collect()
    } else {
        (0..members.len()).collect()
    };
    for i in order {
        let mut mine = sb.clone();
        mine.member_index = crate::num::index_u16(i);
        for slot in &mut mine.member_table {
            slot.last_event = sb.generation;
        }
        write_superblock_copies(members[i].as_ref(), &mine)?;
    }
    Ok(())
}

/// Write both copies of a member's superblock `sb`, each flushed before the next is written: a
/// power cut can tear only the one in flight, never both (FORMAT.md §2.1's update order).
pub(crate) fn write_superblock_copies(
    d: &dyn stripeguard_disk::Disk,
    sb: &Superblock,
) -> Result<(), DiskError> {
    let bytes = sb.encode();
    SUPERBLOCK_COPY_OFFSETS
        .iter()
        .try_for_each(|&off| d.write_at(off, &bytes).and_then(|()| d.flush()))
}

/// Zero both superblock copies of `d` (a member that left the array), each flushed.
pub(crate) fn erase_superblock(d: &DiskRef) -> Result<(), DiskError> {
    let zeros = [0u8; stripeguard_format::SUPERBLOCK_BYTES];
    SUPERBLOCK_COPY_OFFSETS
        .iter()
        .try_for_each(|&off| d.write_at(off, &zeros).and_then(|()| d.flush()))
}
