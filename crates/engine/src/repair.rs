//! Full-stripe repair, one engine for both integrity layouts: read every unit, let the layout
//! decide what is wrong and rebuild it in memory ([`Layout::decide`]), write back what it
//! rebuilt, record the events.

use crate::appendix::Appendices;
use crate::array::Array;
use crate::ckchunk::ChecksumMember;
use crate::error::EngineError;
use crate::events::{Event, EventAction};
use crate::layout::{Decided, Finding, Image, Interrupted, Layout, Suspect};
use crate::num::{Pos, StripeIx};
use stripeguard_format::{EventKind, EventRole};
use stripeguard_integrity::Scheme;

impl Array {
    /// The array's integrity layout: the checksum member, or per-unit appendices.
    pub(crate) fn layout(&self) -> &'static dyn Layout {
        if self.sb().scheme == Scheme::ChecksumChunk {
            &ChecksumMember
        } else {
            &Appendices
        }
    }

    /// Diagnose and repair `stripe` after a failed check. Returns the stripe as it should be.
    /// `suspects` are the positions (with evidence) the failed check named; one that the fresh
    /// full read finds healthy returned wrong bytes only in flight (a misdirected read).
    pub(crate) fn repair_stripe(
        &self,
        stripe: StripeIx,
        suspects: &[Suspect],
    ) -> Result<Image, EngineError> {
        self.repair_stripe_as(stripe, suspects, Interrupted::No)
    }

    /// What [`Array::repair_stripe`] would find in `stripe`, found and logged (as found
    /// read-only) but nothing written back, on a writable array too: an online check while the
    /// holder goes on serving (the caller holds the stripe's lock).
    pub(crate) fn check_stripe_locked(&self, stripe: StripeIx) -> Result<(), EngineError> {
        let all: Vec<Pos> = Pos::upto(self.geometry().n()).collect();
        let units = self.read_units(stripe, &all)?;
        let d = self
            .layout()
            .decide(self, stripe, units, &[], Interrupted::No)?;
        self.record_findings(stripe, &[], &d.findings, Interrupted::No, false);
        Ok(())
    }

    /// [`Array::repair_stripe`]; in a resync, what it finds where a write was interrupted is
    /// what the crash left (resync events, no detection or unrecoverable counted: the caller
    /// settles a stripe it cannot decide).
    pub(crate) fn repair_stripe_as(
        &self,
        stripe: StripeIx,
        suspects: &[Suspect],
        cause: Interrupted<'_>,
    ) -> Result<Image, EngineError> {
        let all: Vec<Pos> = Pos::upto(self.geometry().n()).collect();
        let units = self.read_units(stripe, &all)?;
        let layout = self.layout();
        let mut d = layout.decide(self, stripe, units, suspects, cause)?;
        let wrote = self.write_repair(layout, stripe, &mut d)?;
        match d.settled.take() {
            Some(evidence) => self.record_resync(stripe, EventKind::ResyncSettled, evidence),
            None => self.record_findings(stripe, suspects, &d.findings, cause, self.is_writable()),
        }
        // A repair is durable, and in the durable log, before it is reported: otherwise a
        // power cut before the next flush brings the damage back, and a resync of a
        // neighbouring write's region then meets it beside the crash (found by the seeded
        // simulation: a stale checksum table, repaired by a scrub and lost to the cut, made the
        // resync refuse flushed blocks); and the log would lack a repair that happened.
        if wrote {
            self.save_events()?;
            self.flush_members()?;
        }
        Ok(d.image)
    }

    /// Write back every unit a decision found wrong (its metadata resealed), then what else
    /// the layout changed; its data chunks go back to first-read state. Whether it wrote.
    fn write_repair(
        &self,
        layout: &dyn Layout,
        stripe: StripeIx,
        d: &mut Decided,
    ) -> Result<bool, EngineError> {
        let g = self.geometry();
        let tags: Vec<u64> = d.image.truth.iter().map(|t| t.unwrap_or(0)).collect();
        let mut rewritten: Vec<Pos> = Vec::new();
        for pos in d.findings.iter().map(|f| f.pos) {
            if pos.get() >= g.n() || rewritten.contains(&pos) {
                continue;
            }
            rewritten.push(pos);
            let unit = &mut d.image.units[pos.get()];
            if pos.get() < g.k && self.sabotaged(crate::env::Sabotage::BrokenRepair) {
                unit[0] ^= 1;
            }
            layout.reseal(self, stripe, pos, unit, &tags);
            if self.is_writable() {
                self.write_unit(stripe, pos, 0, unit)?;
            }
        }
        layout.finish_repair(self, stripe, d)?;
        let wrote = self.is_writable() && (!rewritten.is_empty() || d.rewrite_table);
        self.forget_verified(stripe, rewritten.into_iter().filter(|p| p.get() < g.k));
        Ok(wrote)
    }

    /// The events of a repair: each finding with what was done about it, and each suspect the
    /// whole stripe cleared (it returned wrong bytes only in flight).
    fn record_findings(
        &self,
        stripe: StripeIx,
        suspects: &[Suspect],
        findings: &[Finding],
        cause: Interrupted<'_>,
        written: bool,
    ) {
        let g = self.geometry();
        let role = |pos: Pos| {
            if pos.get() < g.k {
                EventRole::Data
            } else if pos.get() < g.n() {
                EventRole::Parity
            } else {
                EventRole::Checksum
            }
        };
        let mut events = Vec::with_capacity(suspects.len() + findings.len());
        // A unit suspected because the checksum member's table was wrong is innocent: the
        // finding is the table's.
        let table_at_fault = findings.iter().any(|f| f.pos.get() == g.n());
        for (pos, kind, evidence) in suspects {
            if (table_at_fault && pos.get() < g.n()) || findings.iter().any(|f| f.pos == *pos) {
                continue;
            }
            events.push(Event {
                stripe: stripe.get(),
                member: self.member_of(stripe, *pos).get(),
                position: pos.get(),
                role: role(*pos),
                kind: *kind,
                evidence: format!("{evidence} (in flight only: the unit on disk is correct)"),
                action: EventAction::Reread,
            });
        }
        for f in findings {
            let member = self.member_of(stripe, f.pos);
            if f.kind == EventKind::ReadError
                && (self.is_failed(member) || self.forced_unvouched(stripe, member))
            {
                // A failed member is reported once, when it fails, not in every stripe (and a
                // stale member's unit a forced assembly cannot vouch for is not a read error).
                continue;
            }
            // A crash leaves units torn (checksum), behind (stale, outvoted) or missing; an
            // identity finding in a resync is silent corruption that happened to meet it.
            let crash_like = !cause.is_corruption(f.pos, f.kind);
            let (kind, evidence, action) = if crash_like {
                (
                    EventKind::Resync,
                    format!("{}: {} (left by the interrupted write)", f.kind, f.evidence),
                    EventAction::Resynced,
                )
            } else if !written {
                (f.kind, f.evidence.clone(), EventAction::FoundReadOnly)
            } else if self.is_failed(member) {
                (f.kind, f.evidence.clone(), EventAction::RebuiltDegraded)
            } else if f.chunk_ok {
                (f.kind, f.evidence.clone(), EventAction::AppendixRewritten)
            } else {
                (f.kind, f.evidence.clone(), EventAction::Repaired)
            };
            events.push(Event {
                stripe: stripe.get(),
                member: member.get(),
                position: f.pos.get(),
                role: role(f.pos),
                kind,
                evidence,
                action,
            });
        }
        self.log_events(|_| {}, events);
    }
}
