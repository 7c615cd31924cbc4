//! The per-unit appendix layout (FORMAT.md §2.6): every unit carries its own metadata after its
//! chunk — identity, a CRC table of its blocks, and the scheme's copies of the truth about the
//! data chunks (versions or sequence numbers for hybrid-1 and hybrid-seq, CRCs for pure and
//! hybrid-2; a parity unit holds all `k`, a data unit its own or its buddy's). `none` is this
//! layout with no appendix at all: nothing to check, nothing to seal.
//!
//! - **Check**: each unit read checks itself (CRC and identity) and votes on the data chunks
//!   (`stripeguard_integrity::diagnose`); a partial read checks its blocks against the block
//!   table, read or cached by this holder.
//! - **Decide**: every unit read whole and voting; the units that fail their own checks or are
//!   outvoted are rebuilt from redundancy, and with redundancy to spare the erasure code checks
//!   what the votes concluded and locates what they missed. A rebuilt data chunk must match
//!   the truth its copies hold.
//! - **Seal**: a write's new chunks and parity get appendices with the new truth (the next
//!   version, the array's next sequence number, or the chunk's CRC); under checksum mirroring
//!   the buddy's appendix is rewritten too (its copy of its neighbour's CRC).

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{stripe_event, EventAction};
use crate::layout::{
    Checked, Decided, Finding, Image, InHand, Interrupted, Layout, NewWrite, Reads, Sealed, Suspect,
};
use crate::num::{usize_of, Pos, StripeIx};
use stripeguard_codes::Located;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::EventKind;
use stripeguard_integrity::{
    block_crcs, combine_block_crcs, diagnose, Appendix, Diagnosis, FindingKind, MirrorKind, Scheme,
    UnitView, UntrustedRange,
};
use stripeguard_plan::{PiecePlan, Purpose};

/// The per-unit appendix layout (see the module comment).
pub(crate) struct Appendices;

impl Layout for Appendices {
    fn check(&self, a: &Array, stripe: StripeIx, got: &Reads<'_>) -> Result<Checked, EngineError> {
        let g = a.geometry();
        let c = usize_of(g.chunk_bytes);
        let gran = a.gran();
        let mut views: Vec<UnitView<'_>> = vec![UnitView::NotRead; g.n()];
        for &(p, e) in got.wanted {
            let p = p.get();
            views[p] = match (&got.units[p], &got.cached[p]) {
                _ if got.erased[p] => UnitView::Erased,
                (Some(b), Some(app)) => UnitView::Partial {
                    chunk: &b[..c],
                    blocks: e.blocks(gran),
                    appendix: app,
                },
                (None, Some(app)) => UnitView::Partial {
                    chunk: &[],
                    blocks: (0, 0),
                    appendix: app,
                },
                // Nothing to read (cannot happen with today's plans; say so rather than call
                // it an erasure).
                (None, None) => UnitView::NotRead,
                (Some(b), None) if e.is_whole(gran) || !e.appendix => UnitView::Read {
                    chunk: &b[..c],
                    appendix: &b[c..],
                },
                (Some(b), None) => UnitView::Partial {
                    chunk: &b[..c],
                    blocks: e.blocks(gran),
                    appendix: &b[c..],
                },
            };
        }
        let diag = diagnose(a.sb().scheme, g.k, &views, |p| {
            a.identity(stripe, Pos::new(p))
        });
        let clean = diag.is_clean();
        if clean && !got.erased.iter().any(|&e| e) {
            // Verified here: a later partial read of this unit need not read it again.
            // (A unit read whole with a cached appendix was checked against that one, which is
            // at least as new as the one on the disk: it stays.)
            for &(p, e) in got.read {
                let (units, apps) = (&got.units[p.get()], &diag.appendices[p.get()]);
                let known = got.cached[p.get()].is_some();
                if let (true, false, Some(b), Some(_)) = (e.appendix, known, units, apps) {
                    a.units().remember_appendix(stripe, p, &b[c..]);
                }
            }
        }
        Ok(Checked {
            clean,
            suspects: diag
                .findings
                .iter()
                .map(|f| (Pos::new(f.position), f.kind.event_kind(), evidence(&f.kind)))
                .collect(),
            truth: diag.truth,
            data_crc: diag.data_crc,
            appendices: diag.appendices,
            table: None,
        })
    }

    fn decide(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: Vec<Option<AlignedBuf>>,
        suspects: &[Suspect],
        cause: Interrupted<'_>,
    ) -> Result<Decided, EngineError> {
        let g = a.geometry();
        let (k, m, n) = (g.k, g.m, g.n());
        let scheme = a.sb().scheme;
        let diag = diagnose_whole(a, stripe, &units);
        let mut findings: Vec<Finding> = diag
            .findings
            .iter()
            .map(|f| {
                let (kind, why) = (f.kind.event_kind(), evidence(&f.kind));
                Finding::new(Pos::new(f.position), kind, why, f.chunk_ok)
            })
            .collect();
        if scheme == Scheme::None {
            bare_raid_findings(a, stripe, &units, suspects, &mut findings);
        }
        a.count_detection(stripe, suspects, &findings, cause);
        // The erasure code's list of positions to rebuild (its own bare indexes).
        let mut bad: Vec<usize> = findings
            .iter()
            .filter(|f| !f.chunk_ok)
            .map(|f| f.pos.get())
            .collect();
        let fail = |reason: String| a.unrecoverable(stripe, reason, cause);
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
            .map(|u| u.unwrap_or_else(|| a.unit_buf()))
            .collect();
        // With redundancy to spare, the code itself checks what the metadata concluded (and is
        // the arbiter when checksum copies tie).
        if n - bad.len() > k && scheme != Scheme::None {
            let extra = locate_more(a, &full, &bad).map_err(fail)?;
            for p in extra {
                let why = "located by the erasure code's syndromes".into();
                findings.push(Finding::new(Pos::new(p), EventKind::Parity, why, false));
                bad.push(p);
            }
        }
        check_ties(&diag, n - bad.len() > k).map_err(fail)?;
        bad.sort_unstable();
        bad.dedup();
        if !bad.is_empty() {
            let c = usize_of(g.chunk_bytes);
            let mut views: Vec<&mut [u8]> = full.iter_mut().map(|u| &mut u[..c]).collect();
            a.code().reconstruct(&mut views, &bad)?;
        }
        let truth = rebuilt_truth(a, &diag, &full).map_err(fail)?;
        Ok(Decided {
            image: Image {
                units: full,
                truth,
                ck: None,
            },
            findings,
            rewrite_table: false,
            settled: None,
        })
    }

    fn reseal(&self, a: &Array, stripe: StripeIx, pos: Pos, unit: &mut [u8], tags: &[u64]) {
        if a.sb().scheme.has_appendix() {
            let (chunk, sector) = unit.split_at_mut(usize_of(a.geometry().chunk_bytes));
            a.seal(stripe, pos, tags, chunk, sector);
        }
    }

    fn finish_repair(&self, _: &Array, _: StripeIx, _: &Decided) -> Result<(), EngineError> {
        Ok(())
    }

    fn seal_write(
        &self,
        a: &Array,
        plan: &PiecePlan,
        have: &mut InHand,
        w: &mut NewWrite<'_>,
    ) -> Result<Sealed, EngineError> {
        let Some(mirror) = a.sb().scheme.mirror() else {
            return Ok(Sealed::InUnits);
        };
        let c = usize_of(a.geometry().chunk_bytes);
        let mut tags = write_tags(a, plan, have)?;
        // The new chunks' block tables: the old table with the written blocks recomputed, or a
        // whole new one when the whole chunk is written. Their appendices are encoded once
        // every chunk's CRC is known (a checksum-mirroring buddy copy needs its neighbour's).
        let mut tables = Vec::with_capacity(w.new.len());
        for (i, nc) in w.first.onward().zip(w.new.iter_mut()) {
            let u = nc
                .buf
                .as_mut()
                .expect("a unit with an appendix is built in a buffer");
            let table = chunk_table(a, i, u, (usize_of(nc.e.lo), usize_of(nc.e.hi)), have);
            if mirror == MirrorKind::Checksum {
                tags[i.get()] = match &table {
                    Some(t) => combine_block_crcs(t, a.sb().block_bytes() as usize),
                    None => stripeguard_checksum::crc32c(&u[..c]),
                } as u64;
            }
            tables.push(table);
        }
        for ((i, nc), table) in w.first.onward().zip(w.new.iter_mut()).zip(tables) {
            let mut app = a.appendix(StripeIx::new(plan.stripe), i, &tags);
            app.blocks = table.unwrap_or_default();
            app.encode(&mut nc.buf.as_mut().expect("built")[c..]);
        }
        seal_parity(a, StripeIx::new(plan.stripe), have, w, &tags);
        Ok(buddy_appendix(a, plan, have, &tags))
    }

    fn committed(&self, a: &Array, w: &NewWrite<'_>, sealed: Sealed) -> Result<(), EngineError> {
        if !a.sb().scheme.has_appendix() {
            return Ok(());
        }
        let g = a.geometry();
        let c = usize_of(g.chunk_bytes);
        let stripe = w.stripe;
        let live = |pos: Pos| !a.is_failed(a.member_of(stripe, pos));
        for (i, n) in w.first.onward().zip(w.new.iter()) {
            if let (Some(b), true) = (&n.buf, live(i)) {
                a.units().remember_appendix(stripe, i, &b[c..]);
            }
        }
        for (pos, p) in Pos::new(g.k).onward().zip(&w.parity) {
            if live(pos) {
                a.units().remember_appendix(stripe, pos, &p[c..]);
            }
        }
        if let Sealed::Buddy(pos, bytes) = sealed {
            if live(pos) {
                a.units().remember_appendix(stripe, pos, &bytes[c..]);
            }
            a.recycle([bytes]);
        }
        Ok(())
    }

    fn seal_settled(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &mut [AlignedBuf],
    ) -> Result<(), EngineError> {
        let g = a.geometry();
        let (k, c) = (g.k, usize_of(g.chunk_bytes));
        let tags: Vec<u64> = match a.sb().scheme.mirror() {
            Some(MirrorKind::Checksum) => units[..k]
                .iter()
                .map(|u| stripeguard_checksum::crc32c(&u[..c]) as u64)
                .collect(),
            Some(MirrorKind::Version) => vec![a.next_sequence()?; k],
            None => return Ok(()),
        };
        for (pos, u) in Pos::upto(units.len()).zip(units.iter_mut()) {
            let (chunk, sector) = u.split_at_mut(c);
            a.seal(stripe, pos, &tags, chunk, sector);
        }
        Ok(())
    }

    fn finish_settled(&self, _: &Array, _: StripeIx, _: &[AlignedBuf]) -> Result<(), EngineError> {
        Ok(())
    }

    fn unverified(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &[AlignedBuf],
        trusted: Option<Pos>,
    ) -> Result<Vec<UntrustedRange>, EngineError> {
        Ok(a.unverified_by_diagnosis(stripe, units, trusted))
    }

    fn write_back(&self, _: &Array) -> Result<(), EngineError> {
        Ok(())
    }

    fn initialise(
        &self,
        a: &Array,
        fresh: bool,
        stripes: std::ops::Range<u64>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), EngineError> {
        let g = a.geometry();
        let c = usize_of(g.chunk_bytes);
        let scheme = a.sb().scheme;
        // The truth about an all-zero chunk: version 0, or the CRC of its zeros.
        let zero = match scheme.mirror() {
            Some(MirrorKind::Checksum) => stripeguard_checksum::crc32c(&vec![0u8; c]) as u64,
            _ => 0,
        };
        let tags = vec![zero; g.k];
        let mut buf = vec![0u8; usize_of(a.unit_bytes())];
        for s in stripes.clone().map(StripeIx::new) {
            // Fresh members already hold the zero chunks; without appendices, nothing else.
            if !fresh || scheme.has_appendix() {
                let off = a.unit_offset(s.get());
                for pos in Pos::upto(g.n()) {
                    buf.fill(0);
                    if scheme.has_appendix() {
                        let (chunk, sector) = buf.split_at_mut(c);
                        a.seal(s, pos, &tags, chunk, sector);
                    }
                    let disk = a.members().get(a.member_of(s, pos));
                    if fresh {
                        disk.write_at(off + c as u64, &buf[c..])?;
                    } else {
                        disk.write_at(off, &buf)?;
                    }
                }
            }
            crate::layout::report(progress, s, stripes.clone());
        }
        Ok(())
    }
}

/// Every unit of `stripe` read whole (`None`: erased), diagnosed with every unit voting.
fn diagnose_whole(a: &Array, stripe: StripeIx, units: &[Option<AlignedBuf>]) -> Diagnosis {
    let c = usize_of(a.geometry().chunk_bytes);
    let scheme = a.sb().scheme;
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
    diagnose(scheme, a.geometry().k, &views, |p| {
        a.identity(stripe, Pos::new(p))
    })
}

/// Bare RAID (`none`) knows only its read errors; and with nothing else to go on it can say
/// the stripe is not a codeword (md's `check`), though not which unit is wrong.
fn bare_raid_findings(
    a: &Array,
    stripe: StripeIx,
    units: &[Option<AlignedBuf>],
    suspects: &[Suspect],
    findings: &mut Vec<Finding>,
) {
    for (pos, u) in Pos::upto(units.len()).zip(units) {
        if u.is_none() {
            let why = "read failed".into();
            findings.push(Finding::new(pos, EventKind::ReadError, why, false));
        }
    }
    if !findings.is_empty() || !suspects.is_empty() {
        return;
    }
    let c = usize_of(a.geometry().chunk_bytes);
    let chunks: Vec<&[u8]> = units.iter().flatten().map(|u| &u[..c]).collect();
    if !matches!(
        a.code().locate(&chunks, &[]),
        Ok(Located::Consistent | Located::Unchecked)
    ) {
        a.log_events(
            |c| c.detected += 1,
            [stripe_event(
                stripe,
                EventKind::ParityMismatch,
                "the parity disagrees with the data; bare RAID cannot say which unit is wrong, so nothing was changed".into(),
                EventAction::Mismatch,
            )],
        );
    }
}

/// The positions the erasure code's syndromes name beyond `bad` (those the metadata already
/// condemned), when the code can rebuild them all; an error when it names more.
fn locate_more(a: &Array, full: &[AlignedBuf], bad: &[usize]) -> Result<Vec<usize>, String> {
    let c = usize_of(a.geometry().chunk_bytes);
    let chunks: Vec<&[u8]> = full.iter().map(|u| &u[..c]).collect();
    match a.code().locate(&chunks, bad) {
        Ok(Located::Consistent) | Ok(Located::Unchecked) => Ok(Vec::new()),
        Ok(Located::Bad(extra)) if bad.len() + extra.len() <= a.geometry().m => Ok(extra),
        Ok(Located::Bad(extra)) => Err(format!(
            "the parity equations also name positions {extra:?}"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A tie among the checksum copies is never broken by the parity equations: two lost writes
/// (P and Q both, or a data unit and P) make the code name the one unit that holds the newer
/// bytes. Only a chunk that failed its own self checks (and is rebuilt from parity anyway) may
/// have undecided copies — and only where redundancy is left to check the rebuild (`spare`):
/// with none (RAID-5 with a member out) the bytes come from the very parity whose copy is one
/// side of the tie, so they prove nothing (a lost write of P, then a member lost, would
/// otherwise return the old bytes).
fn check_ties(diag: &Diagnosis, spare: bool) -> Result<(), String> {
    let self_bad = |i: usize| {
        diag.findings.iter().any(|f| {
            f.position == i
                && matches!(
                    f.kind,
                    FindingKind::ReadError
                        | FindingKind::Checksum { .. }
                        | FindingKind::Identity { .. }
                )
        })
    };
    match diag.ambiguous.iter().find(|&&i| !self_bad(i) || !spare) {
        Some(i) => Err(format!(
            "the checksum copies of data chunk {i} disagree and nothing can break the tie"
        )),
        None => Ok(()),
    }
}

/// The truth about every data chunk after a rebuild, checked against each rebuilt chunk: its
/// CRC must be what its copies say (checksum mirroring), or some unit must know its version.
fn rebuilt_truth(
    a: &Array,
    diag: &Diagnosis,
    full: &[AlignedBuf],
) -> Result<Vec<Option<u64>>, String> {
    let mut truth = diag.truth.clone();
    let Some(mirror) = a.sb().scheme.mirror() else {
        return Ok(truth);
    };
    let c = usize_of(a.geometry().chunk_bytes);
    for (i, t) in truth.iter_mut().enumerate() {
        if mirror == MirrorKind::Checksum {
            let crc = stripeguard_checksum::crc32c(&full[i][..c]) as u64;
            match *t {
                Some(have) if have != crc => {
                    return Err(format!(
                        "rebuilt data chunk {i} has CRC {crc:#010x} but its copies say {have:#010x}"
                    ))
                }
                _ => *t = Some(crc),
            }
        } else if t.is_none() {
            return Err(format!("no surviving unit knows data chunk {i}'s version"));
        }
    }
    Ok(truth)
}

/// The truth a write seals: that of the untouched chunks as gathered, and for versioned
/// schemes the new version (or the array's next sequence number) of the written ones. Under
/// checksum mirroring the written chunks' CRCs are filled in once they are known.
fn write_tags(a: &Array, plan: &PiecePlan, have: &InHand) -> Result<Vec<u64>, EngineError> {
    let scheme = a.sb().scheme;
    let mut tags: Vec<u64> = (0..a.geometry().k)
        .map(|i| {
            have.truth[i]
                .or_else(|| have.data_crc.get(i).copied().flatten().map(u64::from))
                .unwrap_or(0)
        })
        .collect();
    if scheme.mirror() == Some(MirrorKind::Version) {
        let seq = if scheme == Scheme::HybridSeq {
            Some(a.next_sequence()?)
        } else {
            None
        };
        for t in &mut tags[plan.first..=plan.last] {
            *t = seq.unwrap_or(*t + 1);
        }
    }
    Ok(tags)
}

/// The block table of new data unit `u` at position `i`, written over `[wlo, whi)`: the old
/// table with the written blocks recomputed, or a whole new one (`None` for a pure data unit,
/// which has no table: its CRC is the chunk's). Without an old table a partly written chunk
/// is first completed from the old bytes (only after a repair, when they are all in hand).
fn chunk_table(
    a: &Array,
    i: Pos,
    u: &mut [u8],
    (wlo, whi): (usize, usize),
    have: &InHand,
) -> Option<Vec<u32>> {
    if a.block_bytes_of(i) == 0 {
        return None;
    }
    let c = usize_of(a.geometry().chunk_bytes);
    let b = a.sb().block_bytes() as usize;
    match have.appendices.get(i.get()).and_then(|a| a.as_ref()) {
        Some(old) if !(wlo == 0 && whi == c) => {
            let mut table = old.blocks.clone();
            for (j, t) in table.iter_mut().enumerate().take(whi / b).skip(wlo / b) {
                *t = stripeguard_checksum::crc32c(&u[j * b..(j + 1) * b]);
            }
            Some(table)
        }
        _ => {
            if wlo != 0 || whi != c {
                debug_assert!(have.whole());
                let old = have.units[i.get()].as_ref().expect("repaired");
                u[..wlo].copy_from_slice(&old[..wlo]);
                u[whi..c].copy_from_slice(&old[whi..c]);
            }
            Some(block_crcs(&u[..c], b))
        }
    }
}

/// Encode every new parity unit's appendix: its block table (the old one with the written
/// blocks recomputed, or whole) and the truth about every data chunk.
fn seal_parity(a: &Array, stripe: StripeIx, have: &InHand, w: &mut NewWrite<'_>, tags: &[u64]) {
    let (k, c) = (a.geometry().k, usize_of(a.geometry().chunk_bytes));
    let b = a.sb().block_bytes() as usize;
    let (hlo, hhi) = (usize_of(w.parity_extent.lo), usize_of(w.parity_extent.hi));
    let whole = w.parity_extent.is_whole(a.gran());
    for (pos, p) in Pos::new(k).onward().zip(w.parity.iter_mut()) {
        let mut app = a.appendix(stripe, pos, tags);
        match have.appendices.get(pos.get()).and_then(|a| a.as_ref()) {
            Some(o) if !whole => {
                app.blocks = o.blocks.clone();
                for t in (hlo / b)..(hhi / b) {
                    app.blocks[t] = stripeguard_checksum::crc32c(&p[t * b..(t + 1) * b]);
                }
            }
            _ => app.blocks = block_crcs(&p[..c], b),
        }
        app.encode(&mut p[c..]);
    }
}

/// Under checksum mirroring a write whose plan rewrites a buddy's appendix (its copy of the
/// previous chunk's CRC changed): that appendix, in a unit buffer at the chunk's end.
fn buddy_appendix(a: &Array, plan: &PiecePlan, have: &InHand, tags: &[u64]) -> Sealed {
    let c = usize_of(a.geometry().chunk_bytes);
    let b = a.sb().block_bytes() as usize;
    let mut out = Sealed::InUnits;
    for w in &plan.writes {
        if !matches!(w.purpose, Purpose::BuddyAppendix | Purpose::Buddy) {
            continue;
        }
        let pos = Pos::new(w.pos);
        let mut app = a.appendix(StripeIx::new(plan.stripe), pos, tags);
        if app.block_bytes != 0 {
            app.blocks = match have.appendices.get(w.pos).and_then(|a| a.as_ref()) {
                Some(o) => o.blocks.clone(),
                None => {
                    let u = have.units[w.pos].as_ref().expect("the buddy was read");
                    block_crcs(&u[..c], b)
                }
            };
        }
        let mut sector = a.unit_buf();
        app.encode(&mut sector[c..]);
        out = Sealed::Buddy(pos, sector);
    }
    out
}

fn describe(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| format!("position {}: {}", f.pos, f.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a finding of the appendix checks says, in words for its event.
fn evidence(kind: &FindingKind) -> String {
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

impl Array {
    /// Encode the appendix of position `pos` of `stripe` after `chunk`, from the truth about the
    /// data chunks (`tags[i]` = version, sequence or CRC). Returns the chunk's CRC.
    pub(crate) fn seal(
        &self,
        stripe: StripeIx,
        pos: Pos,
        tags: &[u64],
        chunk: &[u8],
        sector: &mut [u8],
    ) -> u32 {
        self.appendix(stripe, pos, tags).seal(chunk, sector)
    }

    /// The checksum block size of position `pos`'s appendix table (0 = none: a pure data unit).
    pub(crate) fn block_bytes_of(&self, pos: Pos) -> u32 {
        if pos.get() < self.geometry().k && self.sb().scheme == Scheme::Pure {
            0
        } else {
            self.sb().block_bytes()
        }
    }

    /// The appendix of position `pos` of `stripe` given the truth about the data chunks.
    pub(crate) fn appendix(&self, stripe: StripeIx, pos: Pos, tags: &[u64]) -> Appendix {
        let k = self.geometry().k;
        let scheme = self.sb().scheme;
        let checksum = scheme.mirror() == Some(MirrorKind::Checksum);
        let data = pos.get() < k;
        Appendix {
            scheme,
            identity: self.identity(stripe, pos),
            tag: match (data, checksum) {
                (true, false) => tags[pos.get()],
                (false, _) if scheme == Scheme::HybridSeq => {
                    tags.iter().copied().max().unwrap_or(0)
                }
                _ => 0,
            },
            buddy_crc: if data && checksum && k > 1 {
                crate::num::crc_of_tag(tags[(pos.get() + k - 1) % k])
            } else {
                0
            },
            entries: if data { vec![] } else { tags.to_vec() },
            block_bytes: self.block_bytes_of(pos),
            blocks: vec![],
        }
    }
}
