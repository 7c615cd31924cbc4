//! Untrusted blocks (FORMAT.md §2.7): the ranges of data chunks that a resync kept as they were
//! on disk without being able to verify them.
//!
//! A resync that cannot decide a stripe (more units interrupted or damaged than the code has
//! parity) still recomputes its parity from the data as it is, so the units it could verify keep
//! their redundancy, and lists every checksum block it could not verify here — durably, with
//! incompatible feature bit 2 set first — before it re-seals anything. From then on:
//! - a read of a listed block is refused (exit 3), so a chunk in a settled stripe reads old, new
//!   or refused, never bytes that failed a check;
//! - a write that covers listed blocks whole takes them off (at the next flush, after its data is
//!   durable); a partial write into one is refused;
//! - a scrub that reads a listed range whose CRC is again the one its metadata vouched for before
//!   the settle (a good copy back) takes it off and re-seals the stripe around it;
//! - `stripeguard clear` zero-fills a stripe's listed blocks (a write, logged) — nothing ever
//!   accepts listed bytes as good.
//!
//! Entries are never dropped to make room: a settle that would not fit is refused instead.
//! A `replace` never takes an entry off (it rebuilds from the same undecidable stripe).
//!
//! Invariant: every range in memory is on disk in the newest record copy, or was taken off by a
//! write that is not yet flushed (`dirty`); the superblocks carry bit 2 whenever the record on
//! disk may hold an entry.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{Event, EventAction};
use crate::num::{usize_of, Pos, StripeIx};
use crate::stripe_state::Inner;
use stripeguard_format::{EventKind, EventRole};
use stripeguard_integrity::{state_capacity, StateRecord, UntrustedRange};

impl Array {
    /// Read the newest valid record copy on any current member (at assembly). A superblock that
    /// says entries are listed with no readable copy anywhere refuses the array: nothing could
    /// say which blocks must not be returned.
    pub(crate) fn load_untrusted(&self) -> Result<(), EngineError> {
        let (at, region) = (
            self.sb().layout.state_offset(),
            usize_of(self.sb().layout.state_bytes),
        );
        if region == 0 {
            return Ok(());
        }
        let copy = region / 2;
        // A copy listing zero stripes in an array without feature bit 3: the bit was cleared by
        // hand or by a tool (no build writes such a copy). Reading on would return those
        // stripes' unspecified bytes.
        let zero_without_bit = std::cell::Cell::new(false);
        let best = self
            .newest_record(at, copy, |r: &StateRecord| {
                if !r.zero.is_empty() && !self.sb().zero_stripes {
                    zero_without_bit.set(true);
                }
                self.untrusted_fits(r)
            })
            .record;
        if zero_without_bit.get() {
            return Err(EngineError::Assemble(format!(
                "a copy of the stripe-state record at byte {at} lists zero stripes (FORMAT.md §2.7), but the superblock does not carry incompatible feature bit 3 (zero stripes): refusing, as reads would return those stripes' unspecified bytes (was the bit cleared by hand?)"
            )));
        }
        if best.is_none() && self.sb().untrusted_listed {
            return Err(EngineError::Assemble(format!(
                "the superblock says blocks are listed as untrusted (feature bit 2) but no member holds a copy of the stripe-state record at byte {at} that is both intact and possible for this array (every copy is damaged, or lists a stripe, position or range the array does not have: FORMAT.md §2.7); refusing to read blocks that may be listed"
            )));
        }
        let mut u = self.untrusted_set().hold();
        if let Some(r) = best {
            u.sequence = r.sequence;
            u.entries = r.entries.iter().copied().collect();
            u.zero = crate::stripe_state::ZeroSet::from_record(&r.zero);
            u.durable = r;
        }
        // Entries on disk with the bit clear (cleared by hand, or by a tool that rewrote the
        // superblock): the next superblock write sets it again.
        if !u.entries.is_empty() {
            self.meta().lock().expect("lock").untrusted_listed = true;
        }
        Ok(())
    }

    /// Whether every entry of `r` names a data chunk range of this array.
    pub(crate) fn untrusted_fits(&self, r: &StateRecord) -> bool {
        let g = self.geometry();
        // Zero ranges only in an array that keeps zero stripes (feature bit 3), and within it.
        (r.zero.is_empty() || self.sb().zero_stripes)
            && r.zero
                .iter()
                .all(|z| z.first.saturating_add(z.count) <= g.stripes)
            && r.entries.iter().all(|e| {
                e.stripe < g.stripes
                    && (e.position as usize) < g.k
                    && e.offset as u64 + e.len as u64 <= g.chunk_bytes
            })
    }

    /// Every listed range, in order.
    pub fn untrusted(&self) -> Vec<UntrustedRange> {
        self.untrusted_set().all()
    }

    /// The listed ranges of stripes `lo..hi`, in order (what a block-status request covers).
    pub fn untrusted_within(&self, lo: u64, hi: u64) -> Vec<UntrustedRange> {
        self.untrusted_set().in_stripes(lo, hi)
    }

    /// The data chunks a piece of `len > 0` bytes at array byte `off` (within one stripe)
    /// touches: (position, first byte, end byte) within each chunk.
    fn piece_chunks(&self, off: u64, len: u64) -> impl Iterator<Item = (Pos, u32, u32)> {
        let (sd, c) = (
            self.geometry().stripe_data_bytes(),
            self.geometry().chunk_bytes,
        );
        let lo = off % sd;
        let hi = lo + len;
        (lo / c..=(hi - 1) / c).map(move |pos| {
            let base = pos * c;
            (
                Pos::new(usize_of(pos)),
                crate::num::in_unit_u32(lo.max(base) - base),
                crate::num::in_unit_u32(hi.min(base + c) - base),
            )
        })
    }

    /// A scrub of `stripe` (writable, under its lock): a listed range whose bytes on disk have
    /// the CRC its metadata vouched for before the settle (a good copy is back) is written again,
    /// those very bytes, through the ordinary write path. The write takes the range off; its
    /// read-modify-write diagnoses the stripe with every unit voting as any write does (the
    /// settled seal makes the good bytes look wrong there and they are rebuilt from the parity
    /// the settle computed, which reproduces the listed bytes: exactly the parity's old term),
    /// and it leaves the bytes, their seal and the parity consistent. Nothing else of the stripe
    /// is taken as it is: a fault elsewhere in it is found and repaired, or refused, as usual.
    pub(crate) fn verify_untrusted_again(&self, stripe: StripeIx) -> Result<(), EngineError> {
        let listed = self.untrusted_set().of_stripe(stripe);
        let checkable: Vec<UntrustedRange> = listed
            .into_iter()
            .filter(|e| e.expected_crc.is_some())
            .collect();
        if checkable.is_empty() {
            return Ok(());
        }
        let mut positions: Vec<Pos> = checkable
            .iter()
            .map(|e| Pos::new(e.position as usize))
            .collect();
        positions.dedup();
        let units = self.read_units(stripe, &positions)?;
        let good: Vec<(UntrustedRange, Vec<u8>)> = checkable
            .iter()
            .filter_map(|e| {
                let i = positions
                    .iter()
                    .position(|&p| p == Pos::new(e.position as usize))?;
                let u = units[i].as_ref()?;
                let bytes = &u[e.offset as usize..(e.offset + e.len) as usize];
                (Some(stripeguard_checksum::crc32c(bytes)) == e.expected_crc)
                    .then(|| (*e, bytes.to_vec()))
            })
            .collect();
        self.recycle(units.into_iter().flatten());
        let (sd, c) = (
            self.geometry().stripe_data_bytes(),
            self.geometry().chunk_bytes,
        );
        for (e, bytes) in &good {
            let at = stripe.get() * sd + e.position as u64 * c + e.offset as u64;
            self.write_piece_locked(stripe, at, bytes)?;
        }
        let ranges: Vec<UntrustedRange> = good.iter().map(|g| g.0).collect();
        self.record_ranges(
            &ranges,
            EventKind::UntrustedVerified,
            "a scrub read the bytes its metadata vouched for before the settle and wrote them again",
            EventAction::Notice,
        );
        Ok(())
    }

    /// A read piece (`len > 0` bytes at array byte `off` of `stripe`): refused when it touches
    /// a listed range, before any member I/O.
    pub(crate) fn refuse_untrusted_read(
        &self,
        stripe: StripeIx,
        off: u64,
        len: u64,
    ) -> Result<(), EngineError> {
        if self.untrusted_set().is_empty() {
            return Ok(());
        }
        for (pos, lo, hi) in self.piece_chunks(off, len) {
            if let Some(e) = self
                .untrusted_set()
                .overlapping(stripe, pos, lo, hi)
                .first()
            {
                return Err(EngineError::Unrecoverable {
                    stripe: stripe.get(),
                    reason: untrusted_reason(e),
                });
            }
        }
        Ok(())
    }

    /// A write piece (`len > 0` bytes at array byte `off` of `stripe`): the listed ranges it
    /// covers whole (taken off once it has landed), or an error when it would write part of one
    /// (the rest of the block could not be verified to merge with).
    pub(crate) fn untrusted_covered(
        &self,
        stripe: StripeIx,
        off: u64,
        len: u64,
    ) -> Result<Vec<UntrustedRange>, EngineError> {
        if self.untrusted_set().is_empty() {
            return Ok(vec![]);
        }
        let mut covered = Vec::new();
        for (pos, lo, hi) in self.piece_chunks(off, len) {
            let hit = self.untrusted_set().overlapping(stripe, pos, lo, hi);
            if let Some(e) = hit.iter().find(|e| !e.covered_by(lo, hi)) {
                return Err(EngineError::Unrecoverable {
                    stripe: stripe.get(),
                    reason: format!(
                        "{}; a write must cover those {} bytes from byte {} of data chunk {} whole to replace them",
                        untrusted_reason(e),
                        e.len,
                        e.offset,
                        e.position
                    ),
                });
            }
            covered.extend(hit);
        }
        Ok(covered)
    }

    /// Take `ranges` off (a write replaced them, or a scrub verified them): in memory now, on
    /// disk at the next flush, after the bytes that replaced them are durable.
    pub(crate) fn take_off_untrusted(&self, ranges: &[UntrustedRange], why: &str) {
        if ranges.is_empty() {
            return;
        }
        {
            let mut u = self.untrusted_set().hold();
            for r in ranges {
                u.take_off(crate::stripe_state::Removed::Untrusted(*r));
            }
        }
        self.record_ranges(
            ranges,
            EventKind::UntrustedCleared,
            why,
            EventAction::Notice,
        );
    }

    /// List `ranges` durably before the stripe around them is re-sealed. `Ok(false)` when the
    /// record cannot hold them (or the array has none): the caller must not settle.
    pub(crate) fn list_untrusted(
        &self,
        ranges: &[UntrustedRange],
        evidence: &str,
    ) -> Result<bool, EngineError> {
        let mut u = self.untrusted_set().hold();
        let (entries, fresh) = u.with_listed(ranges);
        if fresh.is_empty() {
            return Ok(true);
        }
        // Written with every pending taking off still in it (nothing says those writes are
        // durable): that is what must fit.
        let before = std::mem::replace(&mut u.entries, entries);
        let record = u.record_since(0);
        if record.entries.len() + record.zero.len() > state_capacity(u.copy_bytes) {
            u.entries = before;
            return Ok(false);
        }
        // The feature bit first: a build that does not know the record must never open the
        // array while a listed block's appendix holds a seal over bytes that failed.
        if let Err(e) = self.set_untrusted_bit(true) {
            u.entries = before;
            return Err(e);
        }
        u.dirty = true;
        self.persist_untrusted(&mut u, None)?;
        drop(u);
        self.record_ranges(
            &fresh,
            EventKind::Untrusted,
            &format!("listed untrusted: {evidence}"),
            EventAction::Unrecoverable,
        );
        Ok(true)
    }

    /// After a flush made every write completed before `mark` was taken durable: write the
    /// record if memory moved on from it, and clear feature bit 2 once no entry is listed on
    /// disk. A record that would not fit (more zero ranges than a copy holds: writes split
    /// them) first gives up its smallest zero ranges, written out as real zeros and flushed.
    pub(crate) fn settle_untrusted_after_flush(&self, mark: u64) -> Result<(), EngineError> {
        let mut mark = mark;
        loop {
            let mut u = self.untrusted_set().hold();
            if u.dirty {
                let record = u.record_since(mark);
                let excess = (record.entries.len() + record.zero.len())
                    .saturating_sub(state_capacity(u.copy_bytes));
                if excess > 0 && !u.zero.is_empty() {
                    let victims = u.zero.smallest(excess);
                    drop(u);
                    self.write_out_zero_ranges(&victims)?;
                    mark = self.untrusted_set().removals();
                    self.flush_members()?;
                    continue;
                }
                self.persist_untrusted(&mut u, Some(mark))?;
            }
            if u.durable.entries.is_empty() && self.meta().lock().expect("lock").untrusted_listed {
                self.set_untrusted_bit(false)?;
            }
            return Ok(());
        }
    }

    /// Give a replace's new device the record (both copies), before it becomes current: it
    /// would otherwise carry feature bit 2 with an empty record, and once every member had been
    /// replaced no copy would be left.
    pub(crate) fn write_untrusted_to(
        &self,
        target: &stripeguard_disk::DiskRef,
    ) -> Result<(), EngineError> {
        let u = self.untrusted_set().hold();
        if u.copy_bytes == 0 {
            return Ok(());
        }
        // What every current member holds (it always fits; memory may be ahead of it).
        let bytes = u
            .durable
            .encode(u.copy_bytes)
            .map_err(|e| EngineError::Config(e.to_string()))?;
        let at = self.sb().layout.state_offset();
        target.write_at(at, &bytes)?;
        target.write_at(at + u.copy_bytes as u64, &bytes)?;
        target.flush()?;
        Ok(())
    }

    /// Write the record into both copies on every current member (a scrub found one damaged):
    /// what the disk held, with new sequences (memory may be ahead of what is durable).
    pub(crate) fn rewrite_untrusted_copies(&self) -> Result<(), EngineError> {
        let mut u = self.untrusted_set().hold();
        if u.copy_bytes == 0 {
            return Ok(());
        }
        for _ in 0..2 {
            let mut record = u.durable.clone();
            record.sequence = u.sequence + 1;
            self.write_state_record(&record, u.copy_bytes)?;
            let dirty = u.dirty;
            u.sequence = record.sequence;
            u.durable = record;
            u.dirty = dirty;
        }
        Ok(())
    }

    /// One event per range: `bytes LO..HI: evidence`.
    fn record_ranges(
        &self,
        ranges: &[UntrustedRange],
        kind: EventKind,
        evidence: &str,
        action: EventAction,
    ) {
        let events = ranges.iter().map(|r| {
            let (stripe, pos) = (StripeIx::new(r.stripe), Pos::new(r.position as usize));
            Event {
                stripe: r.stripe,
                member: self.member_of(stripe, pos).get(),
                position: pos.get(),
                role: EventRole::Data,
                kind,
                evidence: format!("{} bytes from byte {}: {evidence}", r.len, r.offset),
                action,
            }
        });
        self.log_events(|_| {}, events);
    }

    /// Write memory (with the entries taken off since `mark` still in; `None`: every pending
    /// one) as the next copy on every current member.
    pub(crate) fn persist_untrusted(
        &self,
        u: &mut Inner,
        mark: Option<u64>,
    ) -> Result<(), EngineError> {
        if self.view().is_some_and(|v| !v.keeps_record()) {
            // The record on the members is the other geometry's (view.rs).
            return Ok(());
        }
        let mut record = u.record_since(mark.unwrap_or(0));
        record.sequence = u.sequence + 1;
        self.write_state_record(&record, u.copy_bytes)?;
        u.written(record, mark);
        Ok(())
    }

    fn write_state_record(
        &self,
        record: &StateRecord,
        copy_bytes: usize,
    ) -> Result<(), EngineError> {
        let bytes = record
            .encode(copy_bytes)
            .map_err(|e| EngineError::Config(e.to_string()))?;
        // A copy this build would refuse to read is never written (it would silently fall back
        // to the older copy, or to none).
        if let Err(e) = StateRecord::decode(&bytes) {
            return Err(EngineError::Config(format!(
                "refusing to write an invalid stripe-state record: {e}"
            )));
        }
        self.write_slot(
            self.sb().layout.state_offset(),
            record.sequence,
            &bytes,
            true,
        )
    }

    fn set_untrusted_bit(&self, on: bool) -> Result<(), EngineError> {
        let mut meta = self.meta().lock().expect("lock");
        if meta.untrusted_listed != on {
            meta.untrusted_listed = on;
            self.write_superblocks_locked(&mut meta)?;
        }
        Ok(())
    }
}

pub(crate) fn untrusted_reason(e: &UntrustedRange) -> String {
    format!(
        "{} bytes from byte {} of data chunk {} are listed untrusted (a resync could not verify them: FORMAT.md §2.7); write them whole, or zero-fill them with `stripeguard clear --stripe {}`",
        e.len,
        e.offset,
        e.position,
        e.stripe
    )
}

impl Array {
    /// [`Layout::unverified`](crate::layout::Layout::unverified) of a checksum-chunk array: each data chunk's blocks against
    /// the stripe's table; every chunk whole when there is no valid table.
    pub(crate) fn unverified_against_ck_table(
        &self,
        stripe: StripeIx,
        units: &[stripeguard_disk::AlignedBuf],
        trusted: Option<Pos>,
    ) -> Result<Vec<UntrustedRange>, EngineError> {
        let (k, c) = (self.geometry().k, usize_of(self.geometry().chunk_bytes));
        let b = self.sb().block_bytes() as usize;
        let table = self.ck_load(stripe)?;
        let mut out = Vec::new();
        for (pos, unit) in Pos::upto(k).zip(units) {
            if Some(pos) == trusted {
                continue;
            }
            match &table {
                Ok(t) => {
                    let failing = t.mismatches(pos.get(), 0, &unit[..c], b);
                    out.extend(failing_runs(stripe, pos, &failing, b, &|j| {
                        t.crc(pos.get(), j)
                    }));
                }
                Err(_) => out.push(whole(stripe, pos, c, None)),
            }
        }
        Ok(out)
    }

    /// [`Layout::unverified`](crate::layout::Layout::unverified) of an array whose units carry appendices: the stripe
    /// diagnosed with every unit voting; a chunk its copies outvote or tie over is listed
    /// whole, every other one is checked against its own table.
    pub(crate) fn unverified_by_diagnosis(
        &self,
        stripe: StripeIx,
        units: &[stripeguard_disk::AlignedBuf],
        trusted: Option<Pos>,
    ) -> Vec<UntrustedRange> {
        use stripeguard_integrity::{diagnose, FindingKind, MirrorKind, UnitView};
        let (k, c) = (self.geometry().k, usize_of(self.geometry().chunk_bytes));
        let scheme = self.sb().scheme;
        let views: Vec<UnitView<'_>> = units
            .iter()
            .map(|u| UnitView::Read {
                chunk: &u[..c],
                appendix: &u[c..],
            })
            .collect();
        let diag = diagnose(scheme, k, &views, |p| self.identity(stripe, Pos::new(p)));
        let copies_say = |pos: Pos| match scheme.mirror() {
            Some(MirrorKind::Checksum) => diag.truth[pos.get()].map(crate::num::crc_of_tag),
            _ => None,
        };
        let mut out = Vec::new();
        for (pos, unit) in Pos::upto(k).zip(units) {
            if Some(pos) == trusted {
                continue;
            }
            // A chunk that passes its own table but that its copies outvote (a lost write:
            // the table lost it too), or whose copies tie, is not verified: its bytes are the version before the
            // one the stripe's metadata vouches for. Listed whole, against the copies' CRC.
            let behind = diag.findings.iter().any(|f| {
                f.position == pos.get()
                    && !f.chunk_ok
                    && matches!(
                        f.kind,
                        FindingKind::Stale { .. } | FindingKind::Outvoted { .. }
                    )
            });
            if behind {
                out.push(whole(stripe, pos, c, copies_say(pos)));
                continue;
            }
            // Copies that tie (some say this chunk's CRC, as many say another): nothing can
            // say its bytes are the version the stripe holds.
            if diag.ambiguous.contains(&pos.get()) {
                out.push(whole(stripe, pos, c, None));
                continue;
            }
            out.extend(self.unverified_in_chunk(stripe, pos, unit, copies_say(pos)));
        }
        out
    }

    /// The ranges of data chunk `pos` of `stripe` (`unit`: the chunk and its appendix) that
    /// fail their check: the blocks that disagree with its own appendix's table, or, with no
    /// usable table (pure, or an appendix that is damaged or names another place), the whole
    /// chunk unless its CRC is `expected` (what its copies say).
    fn unverified_in_chunk(
        &self,
        stripe: StripeIx,
        pos: Pos,
        unit: &[u8],
        expected: Option<u32>,
    ) -> Vec<UntrustedRange> {
        let c = usize_of(self.geometry().chunk_bytes);
        let b = self.sb().block_bytes() as usize;
        let chunk = &unit[..c];
        let own = stripeguard_integrity::Appendix::decode_appendix(&unit[c..])
            .ok()
            .filter(|a| a.identity == self.identity(stripe, pos));
        match own {
            Some(a) if a.block_bytes as usize == b && a.blocks.len() * b == c => {
                let failing: Vec<usize> = (0..a.blocks.len())
                    .filter(|&j| {
                        stripeguard_checksum::crc32c(&chunk[j * b..(j + 1) * b]) != a.blocks[j]
                    })
                    .collect();
                failing_runs(stripe, pos, &failing, b, &|j| a.blocks[j])
            }
            // No table of its own (pure), or an appendix that is damaged or names another
            // place: the chunk's CRC copies decide the whole chunk.
            _ if expected != Some(stripeguard_checksum::crc32c(chunk)) => {
                vec![whole(stripe, pos, c, expected)]
            }
            _ => vec![],
        }
    }
}

/// The ranges of data chunk `pos` of `stripe` made of its `failing` blocks (ascending indices,
/// `b` bytes each): contiguous failing blocks become one range whose CRC is the combination of
/// theirs (`table(j)`: block `j`'s CRC as the table says).
fn failing_runs(
    stripe: StripeIx,
    pos: Pos,
    failing: &[usize],
    b: usize,
    table: &dyn Fn(usize) -> u32,
) -> Vec<UntrustedRange> {
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < failing.len() {
        let mut j = i;
        while j + 1 < failing.len() && failing[j + 1] == failing[j] + 1 {
            j += 1;
        }
        let crcs: Vec<u32> = (failing[i]..=failing[j]).map(table).collect();
        ranges.push(UntrustedRange {
            stripe: stripe.get(),
            position: crate::num::index_u16(pos.get()),
            offset: crate::num::in_unit_u32(failing[i] * b),
            len: crate::num::in_unit_u32((j - i + 1) * b),
            expected_crc: Some(stripeguard_integrity::combine_block_crcs(&crcs, b)),
        });
        i = j + 1;
    }
    ranges
}

pub(crate) fn whole(
    stripe: StripeIx,
    pos: Pos,
    c: usize,
    expected_crc: Option<u32>,
) -> UntrustedRange {
    UntrustedRange {
        stripe: stripe.get(),
        position: crate::num::index_u16(pos.get()),
        offset: 0,
        len: crate::num::in_unit_u32(c),
        expected_crc,
    }
}

impl Array {
    /// The operator's way out (`stripeguard clear --stripe S`): zero-fill every listed range of
    /// `stripe` through the ordinary write path (which takes them off once durable) and log it.
    /// Listed bytes are never accepted as good. Returns the ranges zero-filled (none listed: an
    /// error naming the stripe).
    pub fn clear_untrusted(&self, stripe: u64) -> Result<Vec<UntrustedRange>, EngineError> {
        if stripe >= self.geometry().stripes {
            return Err(EngineError::Config(format!(
                "stripe {stripe} is beyond the array, which has {} stripes",
                self.geometry().stripes
            )));
        }
        let listed = self.untrusted_set().of_stripe(StripeIx::new(stripe));
        if listed.is_empty() {
            return Err(EngineError::Config(format!(
                "stripe {stripe} has no blocks listed untrusted (`stripeguard status` lists them)"
            )));
        }
        let (sd, c) = (
            self.geometry().stripe_data_bytes(),
            self.geometry().chunk_bytes,
        );
        for e in &listed {
            let at = stripe * sd + e.position as u64 * c + e.offset as u64;
            self.write(at, &vec![0u8; e.len as usize])?;
        }
        self.flush()?;
        self.record_ranges(
            &listed,
            EventKind::UntrustedZeroed,
            "zero-filled by an operator (stripeguard clear); what they held is gone",
            EventAction::Notice,
        );
        Ok(listed)
    }
}
