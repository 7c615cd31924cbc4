//! Unit I/O: the extents of a stripe's units read and written on their members, concurrently
//! when the members are files or devices (one io_uring batch, or the I/O pool), and the one
//! rule for which member holds a stripe position. A read that fails is an erasure (`None`); a
//! member whose I/O fails for any reason but a medium error is failed here.

use crate::array::Array;
use crate::error::EngineError;
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use stripeguard_disk::{batch, AlignedBuf, DiskError, DiskRef};
use stripeguard_plan::Extent;

/// A stripe's unit writes (position, byte within the unit, bytes), for a batch of stripes.
pub(crate) type StripeWrites<'a> = (StripeIx, &'a [(Pos, u64, &'a [u8])]);

impl Array {
    /// Read extent `e` of unit `pos` of `stripe` into a unit-sized buffer, at the extent's own
    /// offsets (the rest of the buffer holds nothing meaningful). `Ok(None)` = erasure.
    pub(crate) fn read_extent(
        &self,
        stripe: StripeIx,
        pos: Pos,
        e: Extent,
    ) -> Result<Option<AlignedBuf>, EngineError> {
        let member = self.member_of(stripe, pos);
        if self.is_failed(member) || self.forced_unvouched(stripe, member) {
            let stand_in = self.stand_in().lock().expect("lock");
            return Ok(match stand_in.as_ref() {
                Some((s, p, unit)) if *s == stripe && *p == pos => {
                    let mut buf = self.unit_buf();
                    buf.copy_from_slice(unit);
                    Some(buf)
                }
                _ => None,
            });
        }
        let mut buf = self.unit_buf();
        let disk = self.members().get(member);
        let base = self.unit_offset(stripe.get());
        let parts: Vec<(u64, u64)> = e.ios(self.gran()).collect();
        let got = match (self.units().pool_for(parts.len()), parts.as_slice()) {
            // A block and the appendix are two I/Os at different offsets: overlap them.
            (Some(pool), &[(a, alen), (b, blen)]) => {
                let (lo, hi) = buf.split_at_mut(usize_of(b));
                let (first, second) = (
                    &mut lo[usize_of(a)..usize_of(a + alen)],
                    &mut hi[..usize_of(blen)],
                );
                let (r1, r2) = pool.install(|| {
                    rayon::join(
                        || disk.read_at(base + a, first),
                        || disk.read_at(base + b, second),
                    )
                });
                r1.and(r2)
            }
            _ => parts.iter().try_for_each(|&(at, len)| {
                let (at, len) = (usize_of(at), usize_of(len));
                disk.read_at(base + at as u64, &mut buf[at..at + len])
            }),
        };
        match got {
            Ok(()) => {}
            Err(DiskError::Medium { .. }) => {
                self.recycle([buf]);
                return Ok(None);
            }
            Err(e) => {
                self.recycle([buf]);
                self.fail_member(member, &e)?;
                return Ok(None);
            }
        }
        Ok(Some(buf))
    }

    /// Read units `positions` of `stripe` (distinct) whole.
    pub(crate) fn read_units(
        &self,
        stripe: StripeIx,
        positions: &[Pos],
    ) -> Result<Vec<Option<AlignedBuf>>, EngineError> {
        let whole = Extent::whole(self.gran());
        let list: Vec<(Pos, Extent)> = positions.iter().map(|&p| (p, whole)).collect();
        self.read_extents(stripe, &list)
    }

    /// Read extents of units of `stripe` (distinct positions), concurrently when the members
    /// are files or devices: a piece's I/O to different members overlaps instead of queueing.
    pub(crate) fn read_extents(
        &self,
        stripe: StripeIx,
        list: &[(Pos, Extent)],
    ) -> Result<Vec<Option<AlignedBuf>>, EngineError> {
        if let Some(done) = self.read_extents_batched(&[(stripe, list)]) {
            return done.map(|mut v| v.pop().unwrap_or_default());
        }
        match self.units().pool_for(list.len()) {
            Some(pool) => pool.install(|| {
                use rayon::prelude::*;
                list.par_iter()
                    .with_max_len(1)
                    .map(|&(p, e)| self.read_extent(stripe, p, e))
                    .collect()
            }),
            _ => list
                .iter()
                .map(|&(p, e)| self.read_extent(stripe, p, e))
                .collect(),
        }
    }

    /// [`Array::read_extents`] of several stripes at once (a request over several stripes):
    /// one batch when the members take one, else stripe by stripe.
    pub(crate) fn read_extents_of(
        &self,
        lists: &[(StripeIx, &[(Pos, Extent)])],
    ) -> Result<Vec<Vec<Option<AlignedBuf>>>, EngineError> {
        if let Some(done) = self.read_extents_batched(lists) {
            return done;
        }
        lists
            .iter()
            .map(|&(stripe, list)| self.read_extents(stripe, list))
            .collect()
    }

    /// Write several units (position, byte within the unit, bytes) of `stripe`, concurrently
    /// when the members are files or devices.
    pub(crate) fn write_units(
        &self,
        stripe: StripeIx,
        writes: &[(Pos, u64, &[u8])],
    ) -> Result<(), EngineError> {
        self.units()
            .forget_appendices(stripe, writes.iter().map(|w| w.0));
        if let Some(done) = self.write_units_batched(&[(stripe, writes)]) {
            return done;
        }
        match self.units().pool_for(writes.len()) {
            Some(pool) => pool.install(|| {
                use rayon::prelude::*;
                writes
                    .par_iter()
                    .with_max_len(1)
                    .try_for_each(|&(p, at, b)| self.write_unit(stripe, p, at, b))
            }),
            _ => writes
                .iter()
                .try_for_each(|&(p, at, b)| self.write_unit(stripe, p, at, b)),
        }
    }

    /// The members of `positions` of `stripe`, when a batch may go to them: members that want
    /// parallel I/O (files and devices with O_DIRECT), none of them failed.
    fn batchable(
        &self,
        stripe: StripeIx,
        positions: impl Iterator<Item = Pos>,
    ) -> Option<Vec<DiskRef>> {
        if !self.units().parallel() {
            return None;
        }
        positions
            .map(|p| {
                let m = self.member_of(stripe, p);
                (!self.is_failed(m) && !self.forced_unvouched(stripe, m))
                    .then(|| self.members().get(m))
            })
            .collect()
    }

    /// [`Array::read_extents_of`] as one batch (`stripeguard_disk::batch`: io_uring for files
    /// and devices, every request sent before any answer is awaited for network members): every
    /// part of every unit of every stripe submitted at once from this thread. `None` when it
    /// cannot go that way.
    #[allow(clippy::type_complexity)]
    fn read_extents_batched(
        &self,
        lists: &[(StripeIx, &[(Pos, Extent)])],
    ) -> Option<Result<Vec<Vec<Option<AlignedBuf>>>, EngineError>> {
        // (stripe, position, the unit's parts) in the order of `lists`.
        let mut units: Vec<(StripeIx, Pos, Vec<(u64, u64)>)> = Vec::new();
        for &(stripe, list) in lists {
            for &(pos, e) in list {
                units.push((stripe, pos, e.ios(self.gran()).collect()));
            }
        }
        if units.iter().map(|u| u.2.len()).sum::<usize>() < 2 {
            return None;
        }
        let mut disks = Vec::with_capacity(units.len());
        for &(stripe, list) in lists {
            disks.extend(self.batchable(stripe, list.iter().map(|l| l.0))?);
        }
        let mut bufs: Vec<AlignedBuf> = units.iter().map(|_| self.unit_buf()).collect();
        let mut owner = Vec::new();
        let results = {
            let mut ios: Vec<batch::Io<'_>> = Vec::new();
            for (i, buf) in bufs.iter_mut().enumerate() {
                let base = self.unit_offset(units[i].0.get());
                // The parts of a unit are ascending and disjoint: cut the buffer between them.
                let mut rest: &mut [u8] = &mut buf[..];
                let mut consumed = 0u64;
                for &(at, len) in &units[i].2 {
                    let tail = std::mem::take(&mut rest);
                    let (_, tail) = tail.split_at_mut(usize_of(at - consumed));
                    let (mine, after) = tail.split_at_mut(usize_of(len));
                    ios.push(batch::Io::Read(&*disks[i], base + at, mine));
                    owner.push(i);
                    rest = after;
                    consumed = at + len;
                }
            }
            batch::submit(&mut ios)
        };
        let Some(results) = results else {
            self.recycle(bufs);
            return None;
        };
        let mut failed: Vec<Option<DiskError>> = (0..units.len()).map(|_| None).collect();
        for (r, &i) in results.into_iter().zip(&owner) {
            if let (Err(e), None) = (r, &failed[i]) {
                failed[i] = Some(e);
            }
        }
        let mut out: Vec<Vec<Option<AlignedBuf>>> = lists
            .iter()
            .map(|l| Vec::with_capacity(l.1.len()))
            .collect();
        let mut which = lists
            .iter()
            .enumerate()
            .flat_map(|(j, l)| std::iter::repeat_n(j, l.1.len()));
        for (i, buf) in bufs.into_iter().enumerate() {
            let j = which.next().expect("one list entry per unit");
            match failed[i].take() {
                None => out[j].push(Some(buf)),
                Some(e) => {
                    self.recycle([buf]);
                    if !matches!(e, DiskError::Medium { .. }) {
                        let (stripe, pos, _) = units[i];
                        let m = self.member_of(stripe, pos);
                        if let Err(err) = self.fail_member(m, &e) {
                            return Some(Err(err));
                        }
                    }
                    out[j].push(None);
                }
            }
        }
        Some(Ok(out))
    }

    /// [`Array::write_units`] of several stripes (a batch of pieces committed together): one
    /// batch when the members take one, else stripe by stripe.
    pub(crate) fn write_units_of(&self, lists: &[StripeWrites<'_>]) -> Result<(), EngineError> {
        for &(stripe, writes) in lists {
            self.units()
                .forget_appendices(stripe, writes.iter().map(|w| w.0));
        }
        if lists.len() > 1 {
            if let Some(done) = self.write_units_batched(lists) {
                return done;
            }
        }
        lists
            .iter()
            .try_for_each(|&(stripe, writes)| self.write_units(stripe, writes))
    }

    /// [`Array::write_units_of`] as one batch (io_uring for files and devices, every request
    /// sent before any answer is awaited for network members). `None` when it cannot go that
    /// way.
    fn write_units_batched(&self, lists: &[StripeWrites<'_>]) -> Option<Result<(), EngineError>> {
        if lists.iter().map(|l| l.1.len()).sum::<usize>() < 2 {
            return None;
        }
        let mut disks = Vec::new();
        for &(stripe, writes) in lists {
            disks.extend(self.batchable(stripe, writes.iter().map(|w| w.0))?);
        }
        let mut ios: Vec<batch::Io<'_>> = Vec::with_capacity(disks.len());
        let mut whose = Vec::with_capacity(disks.len());
        for &(stripe, writes) in lists {
            let base = self.unit_offset(stripe.get());
            for &(p, at, b) in writes {
                ios.push(batch::Io::Write(&*disks[ios.len()], base + at, b));
                whose.push((stripe, p));
            }
        }
        let results = batch::submit(&mut ios)?;
        drop(ios);
        for (r, &(stripe, p)) in results.into_iter().zip(&whose) {
            if let Err(e) = r {
                let m = self.member_of(stripe, p);
                if let Err(err) = self.fail_member(m, &e) {
                    return Some(Err(err));
                }
            }
        }
        Some(Ok(()))
    }

    /// Write `bytes` at `byte_in_unit` of unit `pos` of `stripe`, unless its member has failed.
    pub(crate) fn write_unit(
        &self,
        stripe: StripeIx,
        pos: Pos,
        byte_in_unit: u64,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        match self.try_write_unit(stripe, pos, byte_in_unit, bytes) {
            Ok(()) => Ok(()),
            Err((member, e)) => self.fail_member(member, &e),
        }
    }

    /// [`Array::write_unit`] that leaves failing the member to its caller: the member and the
    /// error. For a caller holding a lock that failing a member takes (the checksum cache's).
    pub(crate) fn try_write_unit(
        &self,
        stripe: StripeIx,
        pos: Pos,
        byte_in_unit: u64,
        bytes: &[u8],
    ) -> Result<(), (MemberIx, DiskError)> {
        self.units().forget_appendices(stripe, std::iter::once(pos));
        let member = self.member_of(stripe, pos);
        if self.is_failed(member) {
            // Out of the array, unless a replace is filling its new device.
            if !self.members().writes_reach(member, stripe) {
                return Ok(());
            }
        }
        let off = self.unit_offset(stripe.get()) + byte_in_unit;
        self.members()
            .get(member)
            .write_at(off, bytes)
            .map_err(|e| (member, e))
    }

    /// The stripe position member `member` holds in `stripe` ([`Array::member_of`] inverted).
    pub(crate) fn position_of(&self, stripe: StripeIx, member: MemberIx) -> Pos {
        if member.get() == self.geometry().n() {
            Pos::new(member.get())
        } else {
            Pos::new(self.geometry().position_of(stripe.get(), member.get()))
        }
    }

    /// The member holding position `pos` of `stripe`: the geometry's for data and parity, and
    /// the checksum member (the last) for position `k + m` of a checksum-chunk array.
    #[inline]
    pub(crate) fn member_of(&self, stripe: StripeIx, pos: Pos) -> MemberIx {
        if pos.get() == self.geometry().n() {
            MemberIx::new(pos.get())
        } else {
            MemberIx::new(self.geometry().member_of(stripe.get(), pos.get()))
        }
    }
}
