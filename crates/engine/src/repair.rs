//! Full-stripe diagnosis and repair: read every unit, let every surviving unit vote, rebuild the
//! wrong ones from redundancy, check the rebuilt bytes, write them back, record events.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{Event, EventAction};
use crate::num::usize_of;
use stripeguard_codes::Located;
use stripeguard_disk::{batch, AlignedBuf, DiskError, DiskRef};
use stripeguard_format::{EventKind, EventRole};
use stripeguard_integrity::{diagnose, Appendix, FindingKind, MirrorKind, Scheme, UnitView};
use stripeguard_plan::Extent;

/// A stripe as it should be: every unit's bytes, and the truth about every data chunk.
pub(crate) struct Image {
    pub(crate) units: Vec<AlignedBuf>,
    pub(crate) truth: Vec<Option<u64>>,
    /// The stripe's checksum-chunk table, as repaired (checksum-chunk arrays only).
    pub(crate) ck: Option<stripeguard_integrity::CkTable>,
}

impl Array {
    /// Read extent `e` of unit `pos` of `stripe` into a unit-sized buffer, at the extent's own
    /// offsets (the rest of the buffer holds nothing meaningful). `Ok(None)` = erasure.
    pub(crate) fn read_extent(
        &self,
        stripe: u64,
        pos: usize,
        e: Extent,
    ) -> Result<Option<AlignedBuf>, EngineError> {
        let member = self.member_of(stripe, pos);
        if self.is_failed(member) {
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
        let base = self.unit_offset(stripe);
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
        stripe: u64,
        positions: &[usize],
    ) -> Result<Vec<Option<AlignedBuf>>, EngineError> {
        let whole = Extent::whole(self.gran());
        let list: Vec<(usize, Extent)> = positions.iter().map(|&p| (p, whole)).collect();
        self.read_extents(stripe, &list)
    }

    /// Read extents of units of `stripe` (distinct positions), concurrently when the members
    /// are files or devices: a piece's I/O to different members overlaps instead of queueing.
    pub(crate) fn read_extents(
        &self,
        stripe: u64,
        list: &[(usize, Extent)],
    ) -> Result<Vec<Option<AlignedBuf>>, EngineError> {
        if let Some(done) = self.read_extents_batched(stripe, list) {
            return done;
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

    /// Write several units (position, byte within the unit, bytes) of `stripe`, concurrently
    /// when the members are files or devices.
    pub(crate) fn write_units(
        &self,
        stripe: u64,
        writes: &[(usize, u64, &[u8])],
    ) -> Result<(), EngineError> {
        self.units()
            .forget_appendices(stripe, writes.iter().map(|w| w.0));
        if let Some(done) = self.write_units_batched(stripe, writes) {
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
        stripe: u64,
        positions: impl Iterator<Item = usize>,
    ) -> Option<Vec<DiskRef>> {
        if !self.units().parallel() {
            return None;
        }
        positions
            .map(|p| {
                let m = self.member_of(stripe, p);
                (!self.is_failed(m)).then(|| self.members().get(m))
            })
            .collect()
    }

    /// [`Array::read_extents`] as one io_uring batch (`stripeguard_disk::batch`): every part of
    /// every unit submitted at once from this thread. `None` when it cannot go that way.
    fn read_extents_batched(
        &self,
        stripe: u64,
        list: &[(usize, Extent)],
    ) -> Option<Result<Vec<Option<AlignedBuf>>, EngineError>> {
        let parts: Vec<Vec<(u64, u64)>> = list
            .iter()
            .map(|(_, e)| e.ios(self.gran()).collect())
            .collect();
        if parts.iter().map(Vec::len).sum::<usize>() < 2 {
            return None;
        }
        let disks = self.batchable(stripe, list.iter().map(|l| l.0))?;
        let base = self.unit_offset(stripe);
        let mut bufs: Vec<AlignedBuf> = list.iter().map(|_| self.unit_buf()).collect();
        let mut owner = Vec::new();
        let results = {
            let mut ios: Vec<batch::Io<'_>> = Vec::new();
            for (i, buf) in bufs.iter_mut().enumerate() {
                // The parts of a unit are ascending and disjoint: cut the buffer between them.
                let mut rest: &mut [u8] = &mut buf[..];
                let mut consumed = 0u64;
                for &(at, len) in &parts[i] {
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
        let mut failed: Vec<Option<DiskError>> = (0..list.len()).map(|_| None).collect();
        for (r, &i) in results.into_iter().zip(&owner) {
            if let (Err(e), None) = (r, &failed[i]) {
                failed[i] = Some(e);
            }
        }
        let mut out = Vec::with_capacity(list.len());
        for (i, buf) in bufs.into_iter().enumerate() {
            match failed[i].take() {
                None => out.push(Some(buf)),
                Some(e) => {
                    self.recycle([buf]);
                    if !matches!(e, DiskError::Medium { .. }) {
                        let m = self.member_of(stripe, list[i].0);
                        if let Err(err) = self.fail_member(m, &e) {
                            return Some(Err(err));
                        }
                    }
                    out.push(None);
                }
            }
        }
        Some(Ok(out))
    }

    /// [`Array::write_units`] as one io_uring batch. `None` when it cannot go that way.
    fn write_units_batched(
        &self,
        stripe: u64,
        writes: &[(usize, u64, &[u8])],
    ) -> Option<Result<(), EngineError>> {
        if writes.len() < 2 {
            return None;
        }
        let disks = self.batchable(stripe, writes.iter().map(|w| w.0))?;
        let base = self.unit_offset(stripe);
        let mut ios: Vec<batch::Io<'_>> = writes
            .iter()
            .zip(&disks)
            .map(|(&(_, at, b), d)| batch::Io::Write(&**d, base + at, b))
            .collect();
        let results = batch::submit(&mut ios)?;
        drop(ios);
        for (r, &(p, _, _)) in results.into_iter().zip(writes) {
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
        stripe: u64,
        pos: usize,
        byte_in_unit: u64,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        self.units().forget_appendices(stripe, std::iter::once(pos));
        let member = self.member_of(stripe, pos);
        if self.is_failed(member) {
            // Out of the array, unless a replace is filling its new device.
            if !self.members().writes_reach(member, stripe) {
                return Ok(());
            }
        }
        let off = self.unit_offset(stripe) + byte_in_unit;
        if let Err(e) = self.members().get(member).write_at(off, bytes) {
            self.fail_member(member, &e)?;
        }
        Ok(())
    }

    /// Encode the appendix of position `pos` of `stripe` after `chunk`, from the truth about the
    /// data chunks (`tags[i]` = version, sequence or CRC). Returns the chunk's CRC.
    pub(crate) fn seal(
        &self,
        stripe: u64,
        pos: usize,
        tags: &[u64],
        chunk: &[u8],
        sector: &mut [u8],
    ) -> u32 {
        self.appendix(stripe, pos, tags).seal(chunk, sector)
    }

    /// A stripe that cannot be decided: counted and logged (not in a resync of a stripe a crash
    /// interrupted, whose caller settles it), and the error that says so.
    pub(crate) fn unrecoverable(
        &self,
        stripe: u64,
        reason: String,
        cause: Interrupted<'_>,
    ) -> EngineError {
        if !cause.settles() {
            let mut ev = self.log().lock().expect("lock");
            ev.counters.unrecoverable += 1;
            ev.record(stripe_event(
                stripe,
                EventKind::Unrecoverable,
                reason.clone(),
                EventAction::Unrecoverable,
            ));
        }
        EngineError::Unrecoverable { stripe, reason }
    }

    /// The member holding position `pos` of `stripe`: the geometry's for data and parity, and
    /// the checksum member (the last) for position `k + m` of a checksum-chunk array.
    #[inline]
    pub(crate) fn member_of(&self, stripe: u64, pos: usize) -> usize {
        if pos == self.geometry().n() {
            pos
        } else {
            self.geometry().member_of(stripe, pos)
        }
    }

    /// The checksum block size of position `pos`'s appendix table (0 = none: a pure data unit).
    pub(crate) fn block_bytes_of(&self, pos: usize) -> u32 {
        if pos < self.geometry().k && self.sb().scheme == Scheme::Pure {
            0
        } else {
            self.sb().block_bytes()
        }
    }

    /// The appendix of position `pos` of `stripe` given the truth about the data chunks.
    pub(crate) fn appendix(&self, stripe: u64, pos: usize, tags: &[u64]) -> Appendix {
        let k = self.geometry().k;
        let scheme = self.sb().scheme;
        let checksum = scheme.mirror() == Some(MirrorKind::Checksum);
        if pos < k {
            Appendix {
                scheme,
                identity: self.identity(stripe, pos),
                tag: if checksum { 0 } else { tags[pos] },
                buddy_crc: if checksum && k > 1 {
                    crate::num::crc_of_tag(tags[(pos + k - 1) % k])
                } else {
                    0
                },
                entries: vec![],
                block_bytes: self.block_bytes_of(pos),
                blocks: vec![],
            }
        } else {
            Appendix {
                scheme,
                identity: self.identity(stripe, pos),
                tag: if scheme == Scheme::HybridSeq {
                    tags.iter().copied().max().unwrap_or(0)
                } else {
                    0
                },
                buddy_crc: 0,
                entries: tags.to_vec(),
                block_bytes: self.block_bytes_of(pos),
                blocks: vec![],
            }
        }
    }

    /// Diagnose and repair `stripe` after a failed check. Returns the stripe as it should be.
    /// `suspects` are the positions (with evidence) the failed check named; one that the fresh
    /// full read finds healthy returned wrong bytes only in flight (a misdirected read).
    pub(crate) fn repair_stripe(
        &self,
        stripe: u64,
        suspects: &[(usize, EventKind, String)],
    ) -> Result<Image, EngineError> {
        self.repair_stripe_as(stripe, suspects, Interrupted::No)
    }

    /// [`Array::repair_stripe`]; in a resync, what it finds where a write was interrupted is
    /// what the crash left (resync
    /// events, no detection or unrecoverable counted: the caller settles a stripe it cannot
    /// decide).
    pub(crate) fn repair_stripe_as(
        &self,
        stripe: u64,
        suspects: &[(usize, EventKind, String)],
        cause: Interrupted<'_>,
    ) -> Result<Image, EngineError> {
        if self.is_ck() {
            return self.repair_ck(stripe, suspects, cause);
        }
        let g = self.geometry();
        let (k, m, n) = (g.k, g.m, g.n());
        let c = usize_of(g.chunk_bytes);
        let scheme = self.sb().scheme;

        let all: Vec<usize> = (0..n).collect();
        let units = self.read_units(stripe, &all)?;
        let views: Vec<UnitView<'_>> = units
            .iter()
            .map(|u| match u {
                None => UnitView::Erased,
                Some(b) if scheme.has_appendix() => UnitView::Read {
                    chunk: &b[..c],
                    appendix: &b[c..],
                },
                Some(b) => UnitView::Read {
                    chunk: &b[..c],
                    appendix: &[],
                },
            })
            .collect();
        let diag = diagnose(scheme, k, &views, |p| self.identity(stripe, p));
        let mut findings: Vec<Finding> = diag
            .findings
            .iter()
            .map(|f| {
                Finding::new(
                    f.position,
                    f.kind.event_kind(),
                    evidence(&f.kind),
                    f.chunk_ok,
                )
            })
            .collect();
        if scheme == Scheme::None {
            for (pos, u) in units.iter().enumerate() {
                if u.is_none() {
                    findings.push(Finding::new(
                        pos,
                        EventKind::ReadError,
                        "read failed".into(),
                        false,
                    ));
                }
            }
            if findings.is_empty() && suspects.is_empty() {
                // Bare RAID cannot say which unit is wrong, but it can say the stripe is not a
                // codeword (md's `check`).
                let chunks: Vec<&[u8]> = units.iter().flatten().map(|u| &u[..c]).collect();
                if !matches!(
                    self.code().locate(&chunks, &[]),
                    Ok(Located::Consistent | Located::Unchecked)
                ) {
                    let mut ev = self.log().lock().expect("lock");
                    ev.counters.detected += 1;
                    ev.record(stripe_event(
                        stripe,
                        EventKind::ParityMismatch,
                        "the parity disagrees with the data; bare RAID cannot say which unit is wrong, so nothing was changed".into(),
                        EventAction::Mismatch,
                    ));
                }
            }
        }
        // Reconstructing around a member already known to have failed is degraded mode, not a
        // detection.
        let news = |pos: usize, kind: EventKind| {
            !(kind == EventKind::ReadError && self.is_failed(self.member_of(stripe, pos)))
        };
        let corruption =
            |pos: usize, kind: EventKind| !cause.may_have_left(pos) || kind == EventKind::Identity;
        if suspects
            .iter()
            .any(|s| news(s.0, s.1) && corruption(s.0, s.1))
            || findings
                .iter()
                .any(|f| news(f.pos, f.kind) && corruption(f.pos, f.kind))
        {
            self.log().lock().expect("lock").counters.detected += 1;
        }
        let mut bad: Vec<usize> = findings
            .iter()
            .filter(|f| !f.chunk_ok)
            .map(|f| f.pos)
            .collect();
        let self_bad: Vec<usize> = diag
            .findings
            .iter()
            .filter(|f| {
                matches!(
                    f.kind,
                    FindingKind::ReadError
                        | FindingKind::Checksum { .. }
                        | FindingKind::Identity { .. }
                )
            })
            .map(|f| f.position)
            .collect();
        let fail = |reason: String| self.unrecoverable(stripe, reason, cause);
        if bad.len() > m {
            return Err(fail(format!(
                "{} units are wrong or unreadable ({}) but the code rebuilds at most {m}",
                bad.len(),
                describe(&findings)
            )));
        }

        // Fill erased slots so the code can work in place.
        let mut full: Vec<AlignedBuf> = units
            .into_iter()
            .map(|u| u.unwrap_or_else(|| self.unit_buf()))
            .collect();

        // With redundancy to spare, the code itself checks what the metadata concluded (and is
        // the arbiter when checksum copies tie).
        if n - bad.len() > k && scheme != Scheme::None {
            let chunks: Vec<&[u8]> = full.iter().map(|u| &u[..c]).collect();
            match self.code().locate(&chunks, &bad) {
                Ok(Located::Consistent) | Ok(Located::Unchecked) => {}
                Ok(Located::Bad(extra))
                    if bad.len() + extra.len() <= m && scheme != Scheme::None =>
                {
                    for p in extra {
                        findings.push(Finding::new(
                            p,
                            EventKind::Parity,
                            "located by the erasure code's syndromes".into(),
                            false,
                        ));
                        bad.push(p);
                    }
                }
                Ok(Located::Bad(extra)) if scheme != Scheme::None => {
                    return Err(fail(format!(
                        "the parity equations also name positions {extra:?}"
                    )));
                }
                Ok(Located::Bad(_)) => {}
                Err(e) => return Err(fail(e.to_string())),
            }
        }
        // A tie among the checksum copies is never broken by the parity equations: two lost
        // writes (P and Q both, or a data unit and P) make the code name the one unit that
        // holds the newer bytes. Only a chunk that failed its own self checks (and is rebuilt
        // from parity anyway) may have undecided copies.
        // And a rebuilt chunk's copies may disagree only where redundancy is left to check the
        // rebuild: with none to spare (RAID-5 with a member out) the bytes come from the very
        // parity whose copy is one side of the tie, so they prove nothing (a lost write of P,
        // then a member lost, would otherwise return the old bytes).
        let spare = n - bad.len() > k;
        for &i in &diag.ambiguous {
            if !self_bad.contains(&i) || !spare {
                return Err(fail(format!(
                    "the checksum copies of data chunk {i} disagree and nothing can break the tie"
                )));
            }
        }
        bad.sort_unstable();
        bad.dedup();
        if !bad.is_empty() {
            let mut views: Vec<&mut [u8]> = full.iter_mut().map(|u| &mut u[..c]).collect();
            self.code().reconstruct(&mut views, &bad)?;
        }

        // The truth about every data chunk, and a check of every rebuilt data chunk against it.
        let mut truth = diag.truth.clone();
        if let Some(mirror) = scheme.mirror() {
            for i in 0..k {
                if mirror == MirrorKind::Checksum {
                    let crc = stripeguard_checksum::crc32c(&full[i][..c]) as u64;
                    match truth[i] {
                        Some(t) if t != crc => {
                            return Err(fail(format!(
                                "rebuilt data chunk {i} has CRC {crc:#010x} but its copies say {t:#010x}"
                            )))
                        }
                        _ => truth[i] = Some(crc),
                    }
                } else if truth[i].is_none() {
                    return Err(fail(format!(
                        "no surviving unit knows data chunk {i}'s version"
                    )));
                }
            }
        }

        // Write back the rebuilt units and the stale appendices.
        let tags: Vec<u64> = truth.iter().map(|t| t.unwrap_or(0)).collect();
        let mut rewritten = Vec::new();
        for &Finding { pos, .. } in &findings {
            if rewritten.contains(&pos) {
                continue;
            }
            rewritten.push(pos);
            if scheme.has_appendix() {
                let (chunk, sector) = full[pos].split_at_mut(c);
                self.seal(stripe, pos, &tags, chunk, sector);
            }
            if self.is_writable() {
                self.write_unit(stripe, pos, 0, &full[pos])?;
            }
            if pos < k {
                let id = g.data_chunk_id(stripe, pos);
                self.planner()
                    .lock()
                    .expect("lock")
                    .map_mut()
                    .mark_written(id);
            }
        }
        let mut ev = self.log().lock().expect("lock");
        for (pos, kind, evidence) in suspects {
            if findings.iter().all(|f| f.pos != *pos) {
                ev.record(Event {
                    stripe,
                    member: self.member_of(stripe, *pos),
                    position: *pos,
                    role: if *pos < k {
                        EventRole::Data
                    } else {
                        EventRole::Parity
                    },
                    kind: *kind,
                    evidence: format!("{evidence} (in flight only: the unit on disk is correct)"),
                    action: EventAction::Reread,
                });
            }
        }
        for Finding {
            pos,
            kind,
            evidence,
            chunk_ok,
        } in findings
        {
            let member = self.member_of(stripe, pos);
            if kind == EventKind::ReadError && self.is_failed(member) {
                // A failed member is reported once, when it fails, not in every stripe.
                continue;
            }
            // A crash leaves units torn (checksum), behind (stale, outvoted) or missing; it never
            // leaves a unit that names another place. An identity finding in a resync is silent
            // corruption that happened to meet the crash, and is reported as such.
            let crash_like = cause.may_have_left(pos) && kind != EventKind::Identity;
            let (kind, evidence) = if crash_like {
                (
                    EventKind::Resync,
                    format!("{kind}: {evidence} (left by the interrupted write)"),
                )
            } else {
                (kind, evidence)
            };
            let action = if crash_like {
                EventAction::Resynced
            } else if !self.is_writable() {
                EventAction::FoundReadOnly
            } else if self.is_failed(member) {
                EventAction::RebuiltDegraded
            } else if chunk_ok {
                EventAction::AppendixRewritten
            } else {
                EventAction::Repaired
            };
            ev.record(Event {
                stripe,
                member,
                position: pos,
                role: if pos < k {
                    EventRole::Data
                } else {
                    EventRole::Parity
                },
                kind,
                evidence,
                action,
            });
        }
        Ok(Image {
            units: full,
            truth,
            ck: None,
        })
    }
}

/// An event about a whole stripe rather than one of its units.
pub(crate) fn stripe_event(
    stripe: u64,
    kind: EventKind,
    evidence: String,
    action: EventAction,
) -> Event {
    Event {
        stripe,
        member: 0,
        position: 0,
        role: EventRole::Stripe,
        kind,
        evidence,
        action,
    }
}

/// What a repair found about one unit of a stripe.
#[derive(Clone, Debug)]
pub(crate) struct Finding {
    /// Its stripe position.
    pub(crate) pos: usize,
    pub(crate) kind: EventKind,
    /// What showed it.
    pub(crate) evidence: String,
    /// Its chunk bytes were right (only its appendix or table entry was wrong).
    pub(crate) chunk_ok: bool,
}

impl Finding {
    pub(crate) fn new(pos: usize, kind: EventKind, evidence: String, chunk_ok: bool) -> Finding {
        Finding {
            pos,
            kind,
            evidence,
            chunk_ok,
        }
    }
}

fn describe(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| format!("position {}: {}", f.pos, f.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn evidence(kind: &FindingKind) -> String {
    match kind {
        FindingKind::ReadError => "read failed (latent sector error or failed member)".into(),
        FindingKind::Checksum { detail } => detail.clone(),
        FindingKind::Identity {
            member,
            chunk_number,
            foreign,
        } => {
            if *foreign {
                "holds a unit of another array".into()
            } else {
                format!("holds member {member}'s chunk {chunk_number}: misdirected")
            }
        }
        FindingKind::Stale { has, newest, about } => {
            format!("says version {has} of data chunk {about}, its copies say {newest}: lost write")
        }
        FindingKind::Outvoted {
            has,
            majority,
            about,
        } => format!(
            "CRC of data chunk {about} is {has:#010x} here, {majority:#010x} in the majority of copies"
        ),
    }
}

/// What a resync knows of the writes a crash interrupted in one stripe.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Interrupted<'a> {
    /// Not a resync: whatever is wrong is silent corruption.
    No,
    /// A resync without the write journal: any unit may be what the crash left.
    Unknown,
    /// A resync with the write journal: only these positions had a write in flight (all false
    /// when none did).
    Only(&'a [bool]),
}

impl Interrupted<'_> {
    /// Whether an undecidable stripe is the crash's to settle: a resync without the write
    /// journal. With it, the replay has put every interrupted write's I/Os in place, so the
    /// stripe is whole and consistent unless something beyond the crash damaged it: settling
    /// would bless that damage, so it stays unrecoverable.
    pub(crate) fn settles(self) -> bool {
        matches!(self, Interrupted::Unknown)
    }

    /// Whether a finding at stripe position `pos` may be what the crash left.
    pub(crate) fn may_have_left(self, pos: usize) -> bool {
        match self {
            Interrupted::No => false,
            Interrupted::Unknown => true,
            Interrupted::Only(mask) => mask.get(pos).copied().unwrap_or(false),
        }
    }
}
