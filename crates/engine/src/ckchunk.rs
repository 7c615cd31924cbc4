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
use crate::events::{stripe_event, EventAction};
use crate::layout::{
    Checked, Decided, Finding, Image, InHand, Interrupted, Layout, NewWrite, Reads, Sealed, Suspect,
};
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use stripeguard_codes::Located;
use stripeguard_disk::{AlignedBuf, DiskError};
use stripeguard_format::EventKind;
use stripeguard_integrity::{CkTable, UntrustedRange};
use stripeguard_plan::{Extent, PiecePlan};

impl Array {
    /// The stripe position of the table (the checksum member).
    pub(crate) fn ck_pos(&self) -> Pos {
        Pos::new(self.geometry().n())
    }

    /// The checksum member (the last: the same in every stripe).
    pub(crate) fn ck_member(&self) -> MemberIx {
        MemberIx::new(self.geometry().n())
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
    pub(crate) fn ck_table_of(&self, stripe: StripeIx, units: &[&[u8]]) -> CkTable {
        let (blocks, _) = self.ck_shape();
        let b = usize_of(self.gran().block);
        let mut t = CkTable::new(
            stripe.get(),
            self.sb().array_uuid,
            self.geometry().n(),
            blocks,
        );
        for (u, bytes) in units.iter().enumerate() {
            t.set_blocks(u, 0, &bytes[..usize_of(self.geometry().chunk_bytes)], b);
        }
        t
    }

    /// Decode `stripe`'s table from its bytes on the checksum member.
    fn ck_decode(
        &self,
        b: &[u8],
        stripe: StripeIx,
    ) -> Result<CkTable, stripeguard_integrity::CkError> {
        let (blocks, _) = self.ck_shape();
        CkTable::decode(
            b,
            stripe.get(),
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
    pub(crate) fn ck_load(&self, stripe: StripeIx) -> Result<Result<CkTable, String>, EngineError> {
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
            return Ok(Err(if self.is_failed(self.ck_member()) {
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
    fn ck_cache_put(&self, stripe: StripeIx, t: CkTable, dirty: bool) -> Result<(), EngineError> {
        let mut cache = self.ck().lock().expect("lock");
        if !cache.is_on() {
            drop(cache);
            return if dirty {
                self.ck_write(stripe, &t)
            } else {
                Ok(())
            };
        }
        let mut written = Ok(());
        if let Some((old_stripe, old)) = cache.put(stripe, t, dirty) {
            // Written under the cache lock: no newer copy of it can be written meanwhile.
            written = self.ck_try_write(old_stripe, &old, false);
        }
        drop(cache);
        // Failing the member clears the cache's clean tables: not under its lock.
        written.or_else(|(member, e)| self.fail_member(member, &e))
    }

    /// Store a table this process changed: dirty in the cache, or written now.
    pub(crate) fn ck_store(&self, stripe: StripeIx, mut t: CkTable) -> Result<(), EngineError> {
        t.writes = t.writes.wrapping_add(1);
        self.ck_cache_put(stripe, t, true)
    }

    /// Write `t` to the checksum member now (and keep it in the cache as clean).
    /// With `whole`, the whole unit: the table and the zeros after it (a repair of damage
    /// anywhere in the unit).
    pub(crate) fn ck_write_now(
        &self,
        stripe: StripeIx,
        t: &CkTable,
        whole: bool,
    ) -> Result<(), EngineError> {
        self.ck_try_write(stripe, t, whole)
            .or_else(|(member, e)| self.fail_member(member, &e))?;
        self.ck().lock().expect("lock").put_clean(stripe, t.clone());
        Ok(())
    }

    /// `t` was written with its stripe's units (the write journal's write-through): cache
    /// it clean.
    pub(crate) fn ck_written(&self, stripe: StripeIx, t: CkTable) {
        self.ck().lock().expect("lock").put_clean(stripe, t);
    }

    fn ck_write(&self, stripe: StripeIx, t: &CkTable) -> Result<(), EngineError> {
        self.ck_try_write(stripe, t, false)
            .or_else(|(member, e)| self.fail_member(member, &e))
    }

    /// Write `t` (with `whole`, the whole unit: the zeros after it too), leaving failing the
    /// checksum member on an error to the caller ([`Array::try_write_unit`]).
    fn ck_try_write(
        &self,
        stripe: StripeIx,
        t: &CkTable,
        whole: bool,
    ) -> Result<(), (MemberIx, DiskError)> {
        let (_, tb) = self.ck_shape();
        let mut buf = self.ck_encode(t);
        let len = if whole {
            let c = usize_of(self.geometry().chunk_bytes);
            buf[tb..c].fill(0);
            c
        } else {
            tb
        };
        let r = self.try_write_unit(stripe, self.ck_pos(), 0, &buf[..len]);
        self.recycle([buf]);
        r
    }

    /// Write every dirty table (before a flush of the members). A table whose write fails is
    /// taken as written: the checksum member is failed (once the cache's lock is dropped, as
    /// failing a member clears the cache's clean tables), and a failed member is not written.
    pub(crate) fn ck_write_back(&self) -> Result<(), EngineError> {
        if !self.is_writable() {
            return Ok(());
        }
        let mut failed = None;
        self.ck()
            .lock()
            .expect("lock")
            .write_back(|s, t| -> Result<(), EngineError> {
                if failed.is_none() {
                    failed = self.ck_try_write(s, t, false).err();
                }
                Ok(())
            })?;
        match failed {
            Some((member, e)) => self.fail_member(member, &e),
            None => Ok(()),
        }
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
        stripe: StripeIx,
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
            let out = self.is_failed(self.ck_member());
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
        // Everything after the table's own bytes is zero (its padding to `T` included; while
        // the table is dirty here, from `T`: the table's write covers its padding).
        let used = stripeguard_integrity::cktable::used_bytes(self.geometry().n(), blocks);
        let from = if matches!(cached, Some((_, true))) {
            tb
        } else {
            used
        };
        let tail_bad = buf[from..c].iter().any(|&x| x != 0);
        let disk = self.ck_decode(&buf[..tb], stripe);
        self.recycle([buf]);
        Ok(match cached {
            Some((t, true)) => {
                // Behind by design: written now, whole (no finding unless damaged outside
                // the table, which no write of the table would cure).
                (Ok(t), tail_bad, true)
            }
            Some((t, false)) => {
                // The whole table, its write count too: a lost write of a table whose CRCs did
                // not change (zeros written over zeros) leaves an older count on the disk
                // (found by the seeded simulation once clients zeroed ranges).
                let differs = disk.as_ref() != Ok(&t);
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
        read: &[(Pos, Extent)],
        units: &[Option<AlignedBuf>],
    ) -> Vec<Suspect> {
        let b = usize_of(self.gran().block);
        let mut out = Vec::new();
        for &(pos, e) in read {
            let Some(u) = &units[pos.get()] else { continue };
            if e.hi <= e.lo {
                continue;
            }
            let (first, _) = e.blocks(self.gran());
            let bad = t.mismatches(pos.get(), first, &u[usize_of(e.lo)..usize_of(e.hi)], b);
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
}

/// The checksum-member layout (see the module comment).
pub(crate) struct ChecksumMember;

impl Layout for ChecksumMember {
    fn check(&self, a: &Array, stripe: StripeIx, got: &Reads<'_>) -> Result<Checked, EngineError> {
        let (k, n) = (a.geometry().k, a.geometry().n());
        let mut out = Checked {
            clean: true,
            suspects: Vec::new(),
            truth: vec![None; k],
            data_crc: vec![None; n],
            appendices: vec![None; n],
            table: None,
        };
        // A write of every byte of the stripe rewrites every entry: it needs no table.
        if got.erased.iter().any(|&e| e) || got.whole_stripe_write {
            return Ok(out);
        }
        match a.ck_load(stripe)? {
            Ok(t) => {
                out.suspects = a.ck_check(&t, got.read, got.units);
                out.table = Some(t);
            }
            // The checksum member out of the array: reads go on unverified (as `none`) until
            // `replace` rebuilds its tables; nothing is suspect. A write while a replace fills
            // the member's new device must keep the stripe's table there current (the replace
            // may have rebuilt it already: found by the seeded simulation, seed 1391, a write
            // after the rebuild of its stripe left the new device's table stale, and one more
            // fault in the stripe then had it refused): the whole stripe is read and the table
            // computed from it (the repair without suspects), then updated by the write like
            // any other.
            Err(_) if a.is_failed(a.ck_member()) => {
                if got.write && a.members().writes_reach(a.ck_member(), stripe) {
                    return Ok(Checked {
                        clean: false,
                        ..out
                    });
                }
            }
            Err(why) => out
                .suspects
                .push((a.ck_pos(), EventKind::ChecksumChunk, why)),
        }
        out.clean = out.suspects.is_empty();
        Ok(out)
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
        let (table, disk_bad, dirty) = a.ck_load_whole(stripe)?;
        let erased: Vec<usize> = (0..n).filter(|&p| units[p].is_none()).collect();
        if erased.len() > m {
            let why = format!(
                "{} units are unreadable but the code rebuilds at most {m}",
                erased.len()
            );
            return Err(a.unrecoverable(stripe, why, cause));
        }
        let full: Vec<AlignedBuf> = units
            .into_iter()
            .map(|u| u.unwrap_or_else(|| a.unit_buf()))
            .collect();
        let findings = erased
            .iter()
            .map(|&p| {
                Finding::new(
                    Pos::new(p),
                    EventKind::ReadError,
                    "read failed".into(),
                    false,
                )
            })
            .collect();
        let mut r = CkRepair {
            a,
            stripe,
            cause,
            full,
            erased,
            findings,
            // A dirty table is written with the repair (whole: the scrub leaves the unit clean).
            rewrite_table: dirty,
        };
        if disk_bad && table.is_ok() {
            r.findings.push(Finding::new(
                a.ck_pos(),
                EventKind::ChecksumChunk,
                "the checksum member's unit differs from the table this holder holds, or is damaged outside the table".into(),
                false,
            ));
            r.rewrite_table = true;
        }
        let kept = match table {
            Ok(t) => r.with_table(t)?,
            Err(why) => {
                r.without_table(why)?;
                None
            }
        };
        let table = kept.unwrap_or_else(|| {
            let c = usize_of(g.chunk_bytes);
            let views: Vec<&[u8]> = r.full.iter().map(|u| &u[..c]).collect();
            a.ck_table_of(stripe, &views)
        });
        a.count_detection(stripe, suspects, &r.findings, cause);
        Ok(Decided {
            image: Image {
                units: r.full,
                truth: vec![None; k],
                ck: Some(table),
            },
            findings: r.findings,
            rewrite_table: r.rewrite_table,
            settled: None,
        })
    }

    fn reseal(&self, _: &Array, _: StripeIx, _: Pos, _: &mut [u8], _: &[u64]) {}

    fn finish_repair(&self, a: &Array, stripe: StripeIx, d: &Decided) -> Result<(), EngineError> {
        match &d.image.ck {
            Some(t) if d.rewrite_table && a.is_writable() => a.ck_write_now(stripe, t, true),
            _ => Ok(()),
        }
    }

    fn seal_write(
        &self,
        a: &Array,
        plan: &PiecePlan,
        have: &mut InHand,
        w: &mut NewWrite<'_>,
    ) -> Result<Sealed, EngineError> {
        let g = a.geometry();
        let gran = a.gran();
        let b = usize_of(gran.block);
        let fresh = || {
            let blocks = usize_of(g.chunk_bytes) / b;
            CkTable::new(plan.stripe, a.sb().array_uuid, g.n(), blocks)
        };
        // A write of the whole stripe starts a new table; any other found the stripe's.
        let mut t = match have.table.take() {
            Some(t) => t,
            None if a.writes_whole_stripe(plan) => fresh(),
            None => return Ok(Sealed::InUnits),
        };
        for (i, n) in w.first.onward().zip(&w.new) {
            let (lo, hi) = (usize_of(n.e.lo), usize_of(n.e.hi));
            t.set_blocks(i.get(), lo / b, &n.bytes()[lo..hi], b);
        }
        let (hlo, hhi) = (usize_of(w.parity_extent.lo), usize_of(w.parity_extent.hi));
        for (pos, p) in Pos::new(g.k).onward().zip(&w.parity) {
            t.set_blocks(pos.get(), hlo / b, &p[hlo..hhi], b);
        }
        // With the write journal the table is an in-place I/O of the write like the parity
        // (journaled, then written through), not a dirty cache entry.
        let bytes = a.sb().write_journal.then(|| {
            t.writes = t.writes.wrapping_add(1);
            a.ck_encode(&t)
        });
        Ok(Sealed::Table(t, bytes))
    }

    fn committed(&self, a: &Array, w: &NewWrite<'_>, sealed: Sealed) -> Result<(), EngineError> {
        match sealed {
            Sealed::Table(t, Some(written)) => {
                a.ck_written(w.stripe, t);
                a.recycle([written]);
                Ok(())
            }
            Sealed::Table(t, None) => a.ck_store(w.stripe, t),
            _ => Ok(()),
        }
    }

    fn seal_settled(
        &self,
        _: &Array,
        _: StripeIx,
        _: &mut [AlignedBuf],
    ) -> Result<(), EngineError> {
        Ok(())
    }

    fn finish_settled(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &[AlignedBuf],
    ) -> Result<(), EngineError> {
        let c = usize_of(a.geometry().chunk_bytes);
        let views: Vec<&[u8]> = units.iter().map(|u| &u[..c]).collect();
        let t = a.ck_table_of(stripe, &views);
        a.ck_write_now(stripe, &t, false)
    }

    fn unverified(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &[AlignedBuf],
        trusted: Option<Pos>,
    ) -> Result<Vec<UntrustedRange>, EngineError> {
        a.unverified_against_ck_table(stripe, units, trusted)
    }

    fn write_back(&self, a: &Array) -> Result<(), EngineError> {
        a.ck_write_back()
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
        let (_, tb) = a.ck_shape();
        let zero = vec![0u8; c];
        let zeros: Vec<&[u8]> = (0..g.n()).map(|_| &zero[..]).collect();
        let mut t = a.ck_table_of(StripeIx::new(0), &zeros);
        let ck = a.members().get(a.ck_member());
        for s in stripes.clone().map(StripeIx::new) {
            let off = a.unit_offset(s.get());
            t.stripe = s.get();
            let enc = a.ck_encode(&t);
            // Fresh members read as zeros: only the table's bytes; else the whole unit, and
            // the zero chunks.
            let w = if fresh {
                ck.write_at(off, &enc[..tb])
            } else {
                let mut unit = zero.clone();
                unit[..tb].copy_from_slice(&enc[..tb]);
                ck.write_at(off, &unit)
            };
            a.recycle([enc]);
            w?;
            if !fresh {
                for pos in Pos::upto(g.n()) {
                    a.members().get(a.member_of(s, pos)).write_at(off, &zero)?;
                }
            }
            crate::layout::report(progress, s, stripes.clone());
        }
        Ok(())
    }
}

/// A whole stripe of a checksum-member array being decided (see the module comment).
struct CkRepair<'a, 'c> {
    a: &'a Array,
    stripe: StripeIx,
    cause: Interrupted<'c>,
    /// Every unit, erased ones zero-filled.
    full: Vec<AlignedBuf>,
    /// Positions, as the erasure code takes them (bare; as are the position lists below that
    /// go to the code or into messages).
    erased: Vec<usize>,
    findings: Vec<Finding>,
    rewrite_table: bool,
}

impl CkRepair<'_, '_> {
    fn chunk(&self) -> usize {
        usize_of(self.a.geometry().chunk_bytes)
    }

    fn fail(&self, reason: String) -> EngineError {
        self.a.unrecoverable(self.stripe, reason, self.cause)
    }

    /// The blocks of unit `p` that disagree with `t`.
    fn mismatched(&self, t: &CkTable, p: usize) -> Vec<usize> {
        let b = usize_of(self.a.gran().block);
        t.mismatches(p, 0, &self.full[p][..self.chunk()], b)
    }

    /// Whether the parity equations hold over every unit, `skip` left out. (A code that cannot
    /// say where it is wrong says so with an error: inconsistent, no position named.)
    fn consistent(&self, skip: &[usize]) -> Located {
        let c = self.chunk();
        let chunks: Vec<&[u8]> = self.full.iter().map(|u| &u[..c]).collect();
        self.a
            .code()
            .locate(&chunks, skip)
            .unwrap_or(Located::Bad(Vec::new()))
    }

    fn rebuild(&mut self, bad: &[usize]) -> Result<(), EngineError> {
        if !bad.is_empty() {
            let c = self.chunk();
            let mut views: Vec<&mut [u8]> = self.full.iter_mut().map(|u| &mut u[..c]).collect();
            self.a.code().reconstruct(&mut views, bad)?;
        }
        Ok(())
    }

    /// Rebuild `bad` from the others and keep the result if `accept` says so; else put the
    /// units back as they were. Returns whether it was kept.
    fn rebuild_if(
        &mut self,
        bad: &[usize],
        accept: impl Fn(&Self) -> bool,
    ) -> Result<bool, EngineError> {
        let saved: Vec<(usize, AlignedBuf)> = bad
            .iter()
            .map(|&p| {
                let mut s = self.a.unit_buf();
                s.copy_from_slice(&self.full[p]);
                (p, s)
            })
            .collect();
        self.rebuild(bad)?;
        let kept = accept(self);
        for (p, s) in saved {
            if !kept {
                self.full[p].copy_from_slice(&s);
            }
            self.a.recycle([s]);
        }
        Ok(kept)
    }

    /// With a valid table `t`: decide which side is wrong. Returns the table to keep, or
    /// `None` when it is recomputed from the stripe as decided.
    fn with_table(&mut self, t: CkTable) -> Result<Option<CkTable>, EngineError> {
        let n = self.a.geometry().n();
        let wrong: Vec<(usize, Vec<usize>)> = (0..n)
            .filter(|p| !self.erased.contains(p))
            .map(|p| (p, self.mismatched(&t, p)))
            .filter(|(_, bad)| !bad.is_empty())
            .collect();
        if self.units_wrong(&t, &wrong)? {
            return Ok(Some(t));
        }
        if self.cold_units_wrong(&t, &wrong)? {
            return Ok(None);
        }
        self.table_stale(&wrong)?;
        Ok(None)
    }

    /// The table is right: the units that disagree with it (and the erased ones), at most
    /// `m`, rebuilt from the others, agree with it.
    fn units_wrong(
        &mut self,
        t: &CkTable,
        wrong: &[(usize, Vec<usize>)],
    ) -> Result<bool, EngineError> {
        let m = self.a.geometry().m;
        let mut bad = self.erased.clone();
        bad.extend(wrong.iter().map(|w| w.0));
        bad.sort_unstable();
        if bad.len() > m
            || !self.rebuild_if(&bad, |r| bad.iter().all(|&p| r.mismatched(t, p).is_empty()))?
        {
            return Ok(false);
        }
        for (p, blocks) in wrong {
            self.findings.push(Finding::new(
                Pos::new(*p),
                EventKind::Checksum,
                format!(
                    "block(s) {blocks:?} disagree with the checksum chunk; rebuilt from the others, it agrees"
                ),
                false,
            ));
        }
        // Nothing disagreed: check the parity with what is left to spare.
        if wrong.is_empty()
            && self.erased.len() < m
            && matches!(self.consistent(&self.erased), Located::Bad(_))
            && !self.cause.settles()
        {
            self.a.log_events(
                |c| c.detected += 1,
                [stripe_event(
                    self.stripe,
                    EventKind::ParityMismatch,
                    "every unit agrees with the checksum chunk but the parity equations do not hold: a lost write of a data unit and its checksum chunk together, which this layout cannot locate; nothing was changed".into(),
                    EventAction::Mismatch,
                )],
            );
        }
        Ok(true)
    }

    /// With the write journal the table can be behind only for the units a write had in
    /// flight (their bytes are whole again: the resync wrote them): a unit that disagrees with
    /// it and had none is wrong, whatever else is. It is rebuilt around the others as they are,
    /// and must then agree with the table; the table is then recomputed.
    fn cold_units_wrong(
        &mut self,
        t: &CkTable,
        wrong: &[(usize, Vec<usize>)],
    ) -> Result<bool, EngineError> {
        let g = self.a.geometry();
        let (k, m, n) = (g.k, g.m, g.n());
        let cause = self.cause;
        let cold: Vec<usize> = wrong
            .iter()
            .map(|w| w.0)
            .filter(|&p| !cause.may_have_left(Pos::new(p)))
            .chain(self.erased.iter().copied())
            .collect();
        if !matches!(cause, Interrupted::Only(_))
            || cold.len() >= self.erased.len() + wrong.len()
            || cold.len() > m
        {
            return Ok(false);
        }
        let agrees = |r: &Self| {
            cold.iter().all(|&p| r.mismatched(t, p).is_empty())
                && (n - cold.len() <= k || matches!(r.consistent(&cold), Located::Consistent))
        };
        if !self.rebuild_if(&cold, agrees)? {
            return Ok(false);
        }
        for (p, blocks) in wrong.iter().filter(|w| cold.contains(&w.0)) {
            self.findings.push(Finding::new(
                Pos::new(*p),
                EventKind::Checksum,
                format!(
                    "block(s) {blocks:?} disagree with the checksum chunk and no write was in flight to this unit; rebuilt from the others, it agrees"
                ),
                false,
            ));
        }
        self.findings.push(Finding::new(
            self.a.ck_pos(),
            EventKind::ChecksumChunk,
            "the checksum chunk was behind the interrupted write (recomputed)".into(),
            false,
        ));
        self.rewrite_table = true;
        Ok(true)
    }

    /// The table may be the stale one (its own write lost or torn): then the parity agrees
    /// with the data, and the table is recomputed. Anything else is unrecoverable.
    fn table_stale(&mut self, wrong: &[(usize, Vec<usize>)]) -> Result<(), EngineError> {
        let g = self.a.geometry();
        let (k, n) = (g.k, g.n());
        let positions: Vec<usize> = wrong.iter().map(|w| w.0).collect();
        let agrees = n - self.erased.len() > k
            && matches!(self.consistent(&self.erased), Located::Consistent);
        if !agrees {
            return Err(self.fail(format!(
                "units {positions:?} disagree with the checksum chunk and the parity cannot decide which are wrong"
            )));
        }
        // After a crash without the write journal the agreement may also be of units torn
        // alike (a data unit and the parity both half new, sector by sector), which nothing
        // tells from a whole new unit whose table write was lost: the stripe is settled as for
        // every scheme (FORMAT.md §2.4), which lists every block that disagrees with the table
        // untrusted before the table is recomputed — refused, never re-sealed as good. (Found
        // by the seeded simulation: a torn 4 KiB chunk read back as neither version.) With the
        // write journal the interrupted units are whole: a roll forward.
        if self.cause.settles() {
            return Err(self.fail(format!(
                "units {positions:?} disagree with the checksum chunk after an interrupted write; the parity agrees, but a unit and the parity torn alike would too"
            )));
        }
        let erased = self.erased.clone();
        self.rebuild(&erased)?;
        self.findings.push(Finding::new(
            self.a.ck_pos(),
            EventKind::ChecksumChunk,
            format!(
                "the checksum chunk disagrees with units {positions:?} whose parity agrees with the data: its own write was lost or torn"
            ),
            false,
        ));
        self.rewrite_table = true;
        Ok(())
    }

    /// No valid table (unreadable, torn, misdirected, or its member out): the parity alone
    /// decides, locating one more wrong unit where it has redundancy to spare; the table is
    /// recomputed (and rewritten unless its member is out).
    fn without_table(&mut self, why: String) -> Result<(), EngineError> {
        let g = self.a.geometry();
        let (k, m, n) = (g.k, g.m, g.n());
        let out = self.a.is_failed(self.a.ck_member());
        if !out {
            self.findings.push(Finding::new(
                self.a.ck_pos(),
                EventKind::ChecksumChunk,
                why,
                false,
            ));
        }
        let mut bad = self.erased.clone();
        if n - self.erased.len() > k {
            match self.consistent(&self.erased) {
                Located::Consistent | Located::Unchecked => {}
                Located::Bad(extra) if !extra.is_empty() && bad.len() + extra.len() <= m => {
                    for p in extra {
                        self.findings.push(Finding::new(
                            Pos::new(p),
                            EventKind::Parity,
                            "located by the erasure code's syndromes (no checksum chunk to compare with)".into(),
                            false,
                        ));
                        bad.push(p);
                    }
                }
                Located::Bad(extra) => {
                    return Err(self.fail(format!(
                        "no valid checksum chunk, and the parity equations name positions {extra:?}"
                    )))
                }
            }
        }
        bad.sort_unstable();
        self.rebuild(&bad)?;
        // With the checksum member out there is nothing to write it to.
        self.rewrite_table = !out;
        Ok(())
    }
}
