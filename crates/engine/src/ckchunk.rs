//! Kroth & Yang's checksum chunk in the engine (the `checksum-chunk` scheme; FORMAT.md §2.10,
//! the table's bytes in `stripeguard_integrity::cktable`).
//!
//! Data and parity units are bare chunks, planned and written as in `none`. The checksum member
//! (the last member, stripe position `k + m` here) holds each stripe's table of block CRCs.
//!
//! - **Read**: the blocks read are compared with the stripe's table (from the stripe cache, or
//!   one read of the table's `T` bytes). A mismatch sends the stripe to [`Array::repair_ck`].
//! - **Write**: the table's entries of the data and parity blocks written are recomputed; the
//!   table goes to the stripe cache dirty (written back when evicted and on every flush, before
//!   the members are flushed), or at once with the cache off.
//! - **Repair** (whole stripe + table): units whose blocks disagree with the table are the
//!   suspects. At most `m` of them rebuilt from the others and matching the table: they were
//!   wrong (lost, torn or misdirected writes, misdirected reads, bit rot) and are rewritten.
//!   Otherwise, when the parity agrees with the data, the table is the stale one (its own write
//!   was lost or torn) and is recomputed. A table that fails its own CRC or identity is
//!   recomputed when the parity agrees (RAID-6 first locates one wrong unit by its syndromes).
//!   Anything else is unrecoverable: nothing unverified is returned.
//! - **Blind spot** (the paper's): a lost write of a data unit and of its table together leaves
//!   both old and in agreement. The parity was written, so it alone disagrees with the table,
//!   and the repair puts the old parity back: the new data is gone without a trace (a test
//!   shows it).
//!
//! The stripe cache is bounded by count and by bytes (16 MiB of tables); dirty tables are
//! covered by the write-intent record until a flush writes them, so a crash leaves nothing a
//! resync does not visit.

use crate::array::Array;
use crate::ckcache::CkCache;
use crate::error::EngineError;
use crate::events::Event;
use crate::events::EventAction;
use crate::num::usize_of;
use crate::repair::Interrupted;
use crate::repair::{stripe_event, Finding, Image};
use stripeguard_codes::Located;
use stripeguard_disk::AlignedBuf;
use stripeguard_format::{EventKind, EventRole};
use stripeguard_integrity::{CkTable, Scheme};
use stripeguard_plan::Extent;

impl Array {
    pub(crate) fn is_ck(&self) -> bool {
        self.sb().scheme == Scheme::ChecksumChunk
    }

    /// The stripe position of the table (the checksum member).
    pub(crate) fn ck_pos(&self) -> usize {
        self.geometry().n()
    }

    /// Blocks per unit, and the table's bytes as read and written.
    pub(crate) fn ck_shape(&self) -> (usize, usize) {
        let b = usize_of(self.gran().block);
        let blocks = usize_of(self.geometry().chunk_bytes) / b;
        let t = stripeguard_integrity::ck_table_bytes(self.geometry().n(), self.sb().chunk_bytes);
        (blocks, t)
    }

    /// Keep up to `tables` checksum tables in memory (Kroth & Yang's stripe cache; 0 = none:
    /// every read reads the table and every write writes it). Dirty tables are written first.
    pub fn set_checksum_cache(&self, tables: usize) -> Result<(), EngineError> {
        self.ck_write_back()?;
        let (blocks, _) = self.ck_shape();
        let per = 4 * self.geometry().n() * blocks + 64;
        *self.ck().lock().expect("lock") = CkCache::bounded(tables, per);
        Ok(())
    }

    /// The table of `stripe` for a zero-filled stripe or from whole units.
    pub(crate) fn ck_table_of(&self, stripe: u64, units: &[&[u8]]) -> CkTable {
        let (blocks, _) = self.ck_shape();
        let b = usize_of(self.gran().block);
        let mut t = CkTable::new(stripe, self.sb().array_uuid, self.geometry().n(), blocks);
        for (u, bytes) in units.iter().enumerate() {
            t.set_blocks(u, 0, &bytes[..usize_of(self.geometry().chunk_bytes)], b);
        }
        t
    }

    /// Decode `stripe`'s table from its bytes on the checksum member.
    fn ck_decode(&self, b: &[u8], stripe: u64) -> Result<CkTable, stripeguard_integrity::CkError> {
        let (blocks, _) = self.ck_shape();
        CkTable::decode(
            b,
            stripe,
            &self.sb().array_uuid,
            self.geometry().n(),
            blocks,
        )
    }

    /// Encode `t` into a buffer of the table's `T` bytes (a unit buffer: aligned).
    pub(crate) fn ck_encode(&self, t: &CkTable) -> AlignedBuf {
        let (_, tb) = self.ck_shape();
        let mut buf = self.unit_buf();
        t.encode(&mut buf[..tb]);
        buf
    }

    /// The table of `stripe`: the cached one, else read and checked (its CRC, its stripe, its
    /// array). `Ok(Err(why))`: there is no valid table (unreadable, torn, misdirected).
    pub(crate) fn ck_load(&self, stripe: u64) -> Result<Result<CkTable, String>, EngineError> {
        if let Some(t) = self.ck().lock().expect("lock").get(stripe) {
            return Ok(Ok(t));
        }
        let (_, tb) = self.ck_shape();
        let e = Extent {
            lo: 0,
            hi: tb as u64,
            appendix: false,
        };
        let Some(buf) = self.read_extent(stripe, self.ck_pos(), e)? else {
            let member = self.ck_pos();
            return Ok(Err(if self.is_failed(member) {
                "the checksum member is out of the array".into()
            } else {
                "the checksum chunk could not be read".into()
            }));
        };
        let got = self.ck_decode(&buf[..tb], stripe);
        self.recycle([buf]);
        Ok(match got {
            Ok(t) => {
                self.ck_cache_put(stripe, t.clone(), false)?;
                Ok(t)
            }
            Err(e) => Err(e.to_string()),
        })
    }

    /// Put `t` in the cache (writing back a dirty table it evicts); without a cache, a dirty
    /// table is written at once.
    fn ck_cache_put(&self, stripe: u64, t: CkTable, dirty: bool) -> Result<(), EngineError> {
        let mut cache = self.ck().lock().expect("lock");
        if !cache.is_on() {
            drop(cache);
            return if dirty {
                self.ck_write(stripe, &t)
            } else {
                Ok(())
            };
        }
        if let Some((old_stripe, old)) = cache.put(stripe, t, dirty) {
            // Written under the cache lock: no newer copy of it can be written meanwhile.
            self.ck_write(old_stripe, &old)?;
        }
        Ok(())
    }

    /// Store a table this process changed: dirty in the cache, or written now.
    pub(crate) fn ck_store(&self, stripe: u64, mut t: CkTable) -> Result<(), EngineError> {
        t.writes = t.writes.wrapping_add(1);
        self.ck_cache_put(stripe, t, true)
    }

    /// Write `t` to the checksum member now (and keep it in the cache as clean).
    /// With `whole`, the whole unit: the table and the zeros after it (a repair of damage
    /// anywhere in the unit).
    pub(crate) fn ck_write_now(
        &self,
        stripe: u64,
        t: &CkTable,
        whole: bool,
    ) -> Result<(), EngineError> {
        self.ck_write_as(stripe, t, whole)?;
        self.ck().lock().expect("lock").put_clean(stripe, t.clone());
        Ok(())
    }

    /// `t` was written with its stripe's units (the write journal's write-through): cache
    /// it clean.
    pub(crate) fn ck_written(&self, stripe: u64, t: CkTable) {
        self.ck().lock().expect("lock").put_clean(stripe, t);
    }

    fn ck_write(&self, stripe: u64, t: &CkTable) -> Result<(), EngineError> {
        self.ck_write_as(stripe, t, false)
    }

    fn ck_write_as(&self, stripe: u64, t: &CkTable, whole: bool) -> Result<(), EngineError> {
        let (_, tb) = self.ck_shape();
        let mut buf = self.ck_encode(t);
        let len = if whole {
            let c = usize_of(self.geometry().chunk_bytes);
            buf[tb..c].fill(0);
            c
        } else {
            tb
        };
        let r = self.write_unit(stripe, self.ck_pos(), 0, &buf[..len]);
        self.recycle([buf]);
        r
    }

    /// Write every dirty table (before a flush of the members).
    pub(crate) fn ck_write_back(&self) -> Result<(), EngineError> {
        if !self.is_ck() || !self.is_writable() {
            return Ok(());
        }
        self.ck()
            .lock()
            .expect("lock")
            .write_back(|s, t| self.ck_write(s, t))
    }

    /// Forget every cached table (a member failed or was replaced: they are re-read).
    pub(crate) fn ck_clear_clean(&self) {
        self.ck().lock().expect("lock").clear_clean();
    }

    /// For a repair: the table of `stripe` and whether the checksum member's unit needs
    /// rewriting. The whole unit is read: its table must decode and the rest must be zero (a
    /// scrub finds any damage to the checksum member). A dirty cached table is the truth (the
    /// disk is behind by design until the flush); a clean cached one must equal the disk's.
    /// Returns (the table, the unit on disk is damaged, the table is newer than the disk's).
    fn ck_load_whole(
        &self,
        stripe: u64,
    ) -> Result<(Result<CkTable, String>, bool, bool), EngineError> {
        let (blocks, tb) = self.ck_shape();
        let c = usize_of(self.geometry().chunk_bytes);
        let cached = self.ck().lock().expect("lock").peek(stripe);
        let whole = Extent {
            lo: 0,
            hi: c as u64,
            appendix: false,
        };
        let Some(buf) = self.read_extent(stripe, self.ck_pos(), whole)? else {
            let out = self.is_failed(self.ck_pos());
            return Ok(match cached {
                // Unreadable but known: rewritten (a latent sector error is cured by a write).
                Some((t, dirty)) => (Ok(t), !out, dirty),
                None => (
                    Err(if out {
                        "the checksum member is out of the array".into()
                    } else {
                        "the checksum chunk could not be read".into()
                    }),
                    !out,
                    false,
                ),
            });
        };
        // Everything after the table's own bytes is zero (its padding to `T` included).
        let used = stripeguard_integrity::cktable::used_bytes(self.geometry().n(), blocks);
        let tail_bad = buf[used..c].iter().any(|&x| x != 0);
        let disk = self.ck_decode(&buf[..tb], stripe);
        self.recycle([buf]);
        Ok(match cached {
            Some((t, true)) => {
                // Behind by design: written now, whole (no finding unless damaged outside
                // the table, which no write of the table would cure).
                (Ok(t), tail_bad, true)
            }
            Some((t, false)) => {
                let differs = disk.as_ref().map(|d| &d.crcs) != Ok(&t.crcs);
                (Ok(t), differs || tail_bad, false)
            }
            None => {
                let bad = disk.is_err() || tail_bad;
                (disk.map_err(|e| e.to_string()), bad, false)
            }
        })
    }

    /// Which read extents disagree with `t`: (position, kind, evidence).
    pub(crate) fn ck_check(
        &self,
        t: &CkTable,
        read: &[(usize, Extent)],
        units: &[Option<AlignedBuf>],
    ) -> Vec<(usize, EventKind, String)> {
        let b = usize_of(self.gran().block);
        let mut out = Vec::new();
        for &(pos, e) in read {
            let Some(u) = &units[pos] else { continue };
            if e.hi <= e.lo {
                continue;
            }
            let (first, _) = e.blocks(self.gran());
            let bad = t.mismatches(pos, first, &u[usize_of(e.lo)..usize_of(e.hi)], b);
            if !bad.is_empty() {
                out.push((
                    pos,
                    EventKind::Checksum,
                    format!("block(s) {bad:?} disagree with the checksum chunk"),
                ));
            }
        }
        out
    }

    /// Diagnose and repair a whole stripe of a checksum-chunk array (see the module comment).
    pub(crate) fn repair_ck(
        &self,
        stripe: u64,
        suspects: &[(usize, EventKind, String)],
        cause: Interrupted<'_>,
    ) -> Result<Image, EngineError> {
        let g = self.geometry();
        let (k, m, n) = (g.k, g.m, g.n());
        let c = usize_of(g.chunk_bytes);
        let b = usize_of(self.gran().block);
        let all: Vec<usize> = (0..n).collect();
        let units = self.read_units(stripe, &all)?;
        let (table, disk_bad, dirty) = self.ck_load_whole(stripe)?;
        let erased: Vec<usize> = (0..n).filter(|&p| units[p].is_none()).collect();
        let mut full: Vec<AlignedBuf> = units
            .into_iter()
            .map(|u| u.unwrap_or_else(|| self.unit_buf()))
            .collect();
        let fail = |reason: String| self.unrecoverable(stripe, reason, cause);
        if erased.len() > m {
            return Err(fail(format!(
                "{} units are unreadable but the code rebuilds at most {m}",
                erased.len()
            )));
        }
        let mut findings: Vec<Finding> = erased
            .iter()
            .map(|&p| Finding::new(p, EventKind::ReadError, "read failed".into(), false))
            .collect();
        let mismatched = |t: &CkTable, full: &[AlignedBuf], p: usize| -> Vec<usize> {
            t.mismatches(p, 0, &full[p][..c], b)
        };
        // Whether the parity equations hold over every unit, the erased ones left out.
        // (A code that cannot say where it is wrong says so with an error: inconsistent, no
        // position named.)
        let consistent = |full: &[AlignedBuf], skip: &[usize]| -> Result<Located, EngineError> {
            let chunks: Vec<&[u8]> = full.iter().map(|u| &u[..c]).collect();
            Ok(self
                .code()
                .locate(&chunks, skip)
                .unwrap_or(Located::Bad(Vec::new())))
        };
        let rebuild = |full: &mut Vec<AlignedBuf>, bad: &[usize]| -> Result<(), EngineError> {
            if !bad.is_empty() {
                let mut views: Vec<&mut [u8]> = full.iter_mut().map(|u| &mut u[..c]).collect();
                self.code().reconstruct(&mut views, bad)?;
            }
            Ok(())
        };
        // A dirty table is written with the repair (whole: the scrub leaves the unit clean).
        let mut rewrite_table = dirty;
        let mut settled = false;
        let mut out_table = None;
        if disk_bad && table.is_ok() {
            findings.push(Finding::new(
                n,
                EventKind::ChecksumChunk,
                "the checksum member's unit differs from the table this holder holds, or is damaged outside the table".into(),
                false,
            ));
            rewrite_table = true;
        }
        match table {
            Ok(t) => {
                let wrong: Vec<(usize, Vec<usize>)> = (0..n)
                    .filter(|p| !erased.contains(p))
                    .map(|p| (p, mismatched(&t, &full, p)))
                    .filter(|(_, bad)| !bad.is_empty())
                    .collect();
                let mut bad: Vec<usize> = erased.clone();
                bad.extend(wrong.iter().map(|w| w.0));
                bad.sort_unstable();
                let mut decided = false;
                // The table is behind the stripe (recomputed from it below).
                let mut behind = false;
                if bad.len() <= m {
                    let saved: Vec<(usize, AlignedBuf)> = bad
                        .iter()
                        .map(|&p| {
                            let mut s = self.unit_buf();
                            s.copy_from_slice(&full[p]);
                            (p, s)
                        })
                        .collect();
                    rebuild(&mut full, &bad)?;
                    if bad.iter().all(|&p| mismatched(&t, &full, p).is_empty()) {
                        decided = true;
                        for (p, blocks) in &wrong {
                            findings.push(Finding::new(
                                *p,
                                EventKind::Checksum,
                                format!(
                                    "block(s) {blocks:?} disagree with the checksum chunk; rebuilt from the others, it agrees"
                                ),
                                false,
                            ));
                        }
                        // Nothing disagreed: check the parity with what is left to spare.
                        if wrong.is_empty() && erased.len() < m {
                            if let Located::Bad(_) = consistent(&full, &erased)? {
                                if !cause.settles() {
                                    let mut ev = self.log().lock().expect("lock");
                                    ev.counters.detected += 1;
                                    ev.record(stripe_event(
                                        stripe,
                                        EventKind::ParityMismatch,
                                        "every unit agrees with the checksum chunk but the parity equations do not hold: a lost write of a data unit and its checksum chunk together, which this layout cannot locate; nothing was changed".into(),
                                        EventAction::Mismatch,
                                    ));
                                }
                            }
                        }
                    } else {
                        for (p, s) in saved {
                            full[p].copy_from_slice(&s);
                            self.recycle([s]);
                        }
                    }
                }
                // With the write journal the table can be behind only for the units a write
                // had in flight (their bytes are whole again: the resync wrote them): a unit
                // that disagrees with it and had none is wrong, whatever else is. It is rebuilt
                // around the others as they are, and must then agree with the table.
                let cold: Vec<usize> = wrong
                    .iter()
                    .map(|w| w.0)
                    .filter(|&p| !cause.may_have_left(p))
                    .chain(erased.iter().copied())
                    .collect();
                if !decided
                    && matches!(cause, Interrupted::Only(_))
                    && cold.len() < bad.len()
                    && cold.len() <= m
                {
                    let saved: Vec<(usize, AlignedBuf)> = cold
                        .iter()
                        .map(|&p| {
                            let mut s = self.unit_buf();
                            s.copy_from_slice(&full[p]);
                            (p, s)
                        })
                        .collect();
                    rebuild(&mut full, &cold)?;
                    let agrees = cold.iter().all(|&p| mismatched(&t, &full, p).is_empty())
                        && (n - cold.len() <= k
                            || matches!(consistent(&full, &cold)?, Located::Consistent));
                    if agrees {
                        decided = true;
                        for (p, blocks) in wrong.iter().filter(|w| cold.contains(&w.0)) {
                            findings.push(Finding::new(
                                *p,
                                EventKind::Checksum,
                                format!(
                                    "block(s) {blocks:?} disagree with the checksum chunk and no write was in flight to this unit; rebuilt from the others, it agrees"
                                ),
                                false,
                            ));
                        }
                        findings.push(Finding::new(
                            n,
                            EventKind::ChecksumChunk,
                            "the checksum chunk was behind the interrupted write (recomputed)"
                                .into(),
                            false,
                        ));
                        rewrite_table = true;
                        behind = true;
                        self.recycle(saved.into_iter().map(|s| s.1));
                    } else {
                        for (p, s) in saved {
                            full[p].copy_from_slice(&s);
                            self.recycle([s]);
                        }
                    }
                }
                if !decided {
                    // The table may be the stale one: then the parity agrees with the data.
                    let agrees = n - erased.len() > k
                        && matches!(consistent(&full, &erased)?, Located::Consistent);
                    if !agrees {
                        return Err(fail(format!(
                            "units {:?} disagree with the checksum chunk and the parity cannot decide which are wrong",
                            wrong.iter().map(|w| w.0).collect::<Vec<_>>()
                        )));
                    }
                    rebuild(&mut full, &erased)?;
                    // After a crash the agreement may also be of units torn alike (data and
                    // parity both half new, block by block): the data is kept as it is, which
                    // is a settle, as for every scheme (FORMAT.md §2.4).
                    // With the write journal the interrupted units are whole: a roll forward.
                    settled = matches!(cause, Interrupted::Unknown);
                    findings.push(Finding::new(
                        n,
                        EventKind::ChecksumChunk,
                        format!(
                            "the checksum chunk disagrees with units {:?} whose parity agrees with the data: its own write was lost or torn",
                            wrong.iter().map(|w| w.0).collect::<Vec<_>>()
                        ),
                        false,
                    ));
                    rewrite_table = true;
                } else if !behind {
                    out_table = Some(t);
                }
            }
            Err(why) => {
                let out = self.is_failed(n);
                if !out {
                    findings.push(Finding::new(n, EventKind::ChecksumChunk, why, false));
                }
                let mut bad = erased.clone();
                if n - erased.len() > k {
                    match consistent(&full, &erased)? {
                        Located::Consistent | Located::Unchecked => {}
                        Located::Bad(extra) if !extra.is_empty() && bad.len() + extra.len() <= m => {
                            for p in extra {
                                findings.push(Finding::new(
                                    p,
                                    EventKind::Parity,
                                    "located by the erasure code's syndromes (no checksum chunk to compare with)".into(),
                                    false,
                                ));
                                bad.push(p);
                            }
                        }
                        Located::Bad(extra) => {
                            return Err(fail(format!(
                                "no valid checksum chunk, and the parity equations name positions {extra:?}"
                            )))
                        }
                    }
                }
                bad.sort_unstable();
                rebuild(&mut full, &bad)?;
                // With the checksum member out there is nothing to write it to.
                rewrite_table = !out;
            }
        }
        let table = match out_table {
            Some(t) => t,
            None => {
                let views: Vec<&[u8]> = full.iter().map(|u| &u[..c]).collect();
                self.ck_table_of(stripe, &views)
            }
        };
        let suspected = suspects.iter().any(|s| {
            self.counts_as_news(stripe, &Finding::new(s.0, s.1, String::new(), false), cause)
        });
        if suspected
            || findings
                .iter()
                .any(|f| self.counts_as_news(stripe, f, cause))
        {
            self.log().lock().expect("lock").counters.detected += 1;
        }
        // Write back what was wrong, then the table.
        for &Finding { pos, .. } in &findings {
            if pos < n && self.is_writable() {
                self.write_unit(stripe, pos, 0, &full[pos][..c])?;
            }
        }
        if rewrite_table && self.is_writable() {
            self.ck_write_now(stripe, &table, true)?;
        }
        for p in (0..k).filter(|p| findings.iter().any(|f| f.pos == *p)) {
            let id = g.data_chunk_id(stripe, p);
            self.planner()
                .lock()
                .expect("lock")
                .map_mut()
                .mark_written(id);
        }
        if settled {
            self.record_resync(
                stripe,
                EventKind::ResyncSettled,
                "units disagree with the checksum chunk and the parity agrees with the data as it is: data kept as on disk (a unit torn by the crash may mix old and new blocks), checksum chunk recomputed".into(),
            );
        } else {
            self.record_ck_findings(stripe, suspects, findings, cause);
        }
        Ok(Image {
            units: full,
            truth: vec![None; k],
            ck: Some(table),
        })
    }

    /// A finding is news unless it is a member already known to be out.
    fn counts_as_news(&self, stripe: u64, f: &Finding, cause: Interrupted<'_>) -> bool {
        let known_out =
            f.kind == EventKind::ReadError && self.is_failed(self.member_of(stripe, f.pos));
        !known_out && !cause.may_have_left(f.pos)
    }

    fn record_ck_findings(
        &self,
        stripe: u64,
        suspects: &[(usize, EventKind, String)],
        findings: Vec<Finding>,
        cause: Interrupted<'_>,
    ) {
        let g = self.geometry();
        let role = |pos: usize| {
            if pos < g.k {
                EventRole::Data
            } else if pos < g.n() {
                EventRole::Parity
            } else {
                EventRole::Checksum
            }
        };
        let mut ev = self.log().lock().expect("lock");
        // A unit suspected because the table was wrong is innocent: the finding is the table's.
        let table_at_fault = findings.iter().any(|f| f.pos == g.n());
        for (pos, kind, evidence) in suspects {
            if table_at_fault && *pos < g.n() {
                continue;
            }
            if findings.iter().all(|f| f.pos != *pos) {
                ev.record(Event {
                    stripe,
                    member: self.member_of(stripe, *pos),
                    position: *pos,
                    role: role(*pos),
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
            ..
        } in findings
        {
            let member = self.member_of(stripe, pos);
            if kind == EventKind::ReadError && self.is_failed(member) {
                continue;
            }
            let (kind, evidence, action) = if cause.may_have_left(pos) {
                (
                    EventKind::Resync,
                    format!("{kind}: {evidence} (left by the interrupted write)"),
                    EventAction::Resynced,
                )
            } else if !self.is_writable() {
                (kind, evidence, EventAction::FoundReadOnly)
            } else if self.is_failed(member) {
                (kind, evidence, EventAction::RebuiltDegraded)
            } else {
                (kind, evidence, EventAction::Repaired)
            };
            ev.record(Event {
                stripe,
                member,
                position: pos,
                role: role(pos),
                kind,
                evidence,
                action,
            });
        }
    }
}
