//! The integrity layout: where a stripe's integrity metadata lives, and how a read is checked,
//! a damaged stripe decided, and a write sealed against it. Two families, one engine:
//!
//! - per-unit appendices (`appendix.rs`): the paper's schemes, `pure`, and `none` (no metadata
//!   at all, so nothing to check and nothing to seal);
//! - the checksum member (`ckchunk.rs`): Kroth & Yang's table of block CRCs per stripe on a
//!   member of its own.
//!
//! The engine around them is one: `io.rs` gathers a piece and asks [`Layout::check`]; a piece
//! that fails goes to `repair.rs`, which reads the whole stripe, asks [`Layout::decide`], writes
//! back what the decision rebuilt ([`Layout::reseal`], [`Layout::finish_repair`]) and records
//! the findings; a write builds its new chunks and parity and asks [`Layout::seal_write`] for
//! the metadata, then [`Layout::committed`] once it is in place. Nothing outside the two
//! implementations asks which family an array has.

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{stripe_event, EventAction};
use crate::num::{Pos, StripeIx};
use stripeguard_disk::AlignedBuf;
use stripeguard_format::EventKind;
use stripeguard_integrity::{Appendix, CkTable, UntrustedRange};
use stripeguard_plan::{Extent, PiecePlan};

/// One integrity family's part of every operation on a stripe (see the module comment).
pub(crate) trait Layout: Sync {
    /// Check what a piece read: what failed (the suspects; copies that tie fail it with none)
    /// and what a write of the piece keeps of the stripe's metadata.
    fn check(&self, a: &Array, stripe: StripeIx, got: &Reads<'_>) -> Result<Checked, EngineError>;

    /// Decide a whole stripe (`units`: every data and parity unit read whole, `None` an
    /// erasure): rebuild what is wrong in memory and say what was. Counts the detection (once,
    /// when anything found is news) and fails with [`Array::unrecoverable`] when nothing
    /// unverified can be avoided. Writes nothing.
    fn decide(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: Vec<Option<AlignedBuf>>,
        suspects: &[Suspect],
        cause: Interrupted<'_>,
    ) -> Result<Decided, EngineError>;

    /// A repair rewrites unit `pos` whole: put its own metadata right first (`tags`: the truth
    /// about every data chunk, as decided).
    fn reseal(&self, a: &Array, stripe: StripeIx, pos: Pos, unit: &mut [u8], tags: &[u64]);

    /// After a repair's units are written: write what else the decision changed.
    fn finish_repair(&self, a: &Array, stripe: StripeIx, d: &Decided) -> Result<(), EngineError>;

    /// The metadata of a write of `plan`, its new chunks and parity built: encoded into the
    /// units (appendices), or kept for [`Layout::committed`] (a table). `have` is what the
    /// piece gathered (after a repair: every unit whole).
    fn seal_write(
        &self,
        a: &Array,
        plan: &PiecePlan,
        have: &mut InHand,
        w: &mut NewWrite<'_>,
    ) -> Result<Sealed, EngineError>;

    /// A sealed write is in place: keep what this holder now knows of the stripe.
    fn committed(&self, a: &Array, w: &NewWrite<'_>, sealed: Sealed) -> Result<(), EngineError>;

    /// A resync settles a stripe as it is: `units` (every data and parity unit, whole, the
    /// parity re-encoded) get metadata that vouches for them. Before the units are written.
    fn seal_settled(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &mut [AlignedBuf],
    ) -> Result<(), EngineError>;

    /// The byte ranges of the data chunks of `stripe` (read whole into `units`) that fail
    /// their own check: each checksum block against the table that covers it (the unit's own
    /// appendix, or the checksum member's table), or the whole chunk against its CRC copies
    /// where it has no table of its own (pure) or its appendix is damaged or names another
    /// place. Position `trusted` (a chunk restored from the journal) is taken as it is.
    fn unverified(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &[AlignedBuf],
        trusted: Option<Pos>,
    ) -> Result<Vec<UntrustedRange>, EngineError>;

    /// Before the members are flushed: write what this holder keeps of the metadata in memory
    /// only (dirty checksum tables).
    fn write_back(&self, a: &Array) -> Result<(), EngineError>;

    /// Write the stripes `stripes` (every stripe of a new array, or a grow's new ones) as
    /// all-zero data with valid metadata. `fresh`: the members read as zeros already (new
    /// files), so zero chunks need not be written. `progress(done, total)` counts within
    /// `stripes`.
    fn initialise(
        &self,
        a: &Array,
        fresh: bool,
        stripes: std::ops::Range<u64>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), EngineError>;

    /// After a settled stripe's units are written: write what else vouches for them.
    fn finish_settled(
        &self,
        a: &Array,
        stripe: StripeIx,
        units: &[AlignedBuf],
    ) -> Result<(), EngineError>;
}

/// Report the progress of an initialisation every 64 stripes and at the end.
pub(crate) fn report(
    progress: &mut dyn FnMut(u64, u64),
    stripe: StripeIx,
    stripes: std::ops::Range<u64>,
) {
    let (done, total) = (
        stripe.get() + 1 - stripes.start,
        stripes.end - stripes.start,
    );
    if done % 64 == 0 || done == total {
        progress(done, total);
    }
}

/// What a piece has read, for [`Layout::check`].
pub(crate) struct Reads<'a> {
    /// Every unit the plan reads, with the extent it needs.
    pub(crate) wanted: &'a [(Pos, Extent)],
    /// What was read of them (an appendix taken from the cache is not read).
    pub(crate) read: &'a [(Pos, Extent)],
    /// The read bytes by position, at their extents' offsets.
    pub(crate) units: &'a [Option<AlignedBuf>],
    /// Appendices taken from this holder's cache instead of the disk, by position.
    pub(crate) cached: &'a [Option<std::sync::Arc<[u8]>>],
    /// Reads that failed, by position.
    pub(crate) erased: &'a [bool],
    /// The write rewrites every byte of the stripe (it needs nothing of the old metadata).
    pub(crate) whole_stripe_write: bool,
    /// The piece is a write's (the units read are the old bytes it updates).
    pub(crate) write: bool,
}

/// What [`Layout::check`] concluded about a piece.
pub(crate) struct Checked {
    /// Every byte read passed (no suspect, and no copies that tie).
    pub(crate) clean: bool,
    pub(crate) suspects: Vec<Suspect>,
    /// The truth about every data chunk (version, sequence or CRC) the units read agree on.
    pub(crate) truth: Vec<Option<u64>>,
    /// Each unit's chunk CRC, where its appendix says it.
    pub(crate) data_crc: Vec<Option<u32>>,
    /// The appendix of every unit read that passed its checks.
    pub(crate) appendices: Vec<Option<Appendix>>,
    /// The stripe's checksum-member table.
    pub(crate) table: Option<CkTable>,
}

/// The units a write has in hand: read from disk (only their planned extents), or taken whole
/// from a repaired stripe, with what the layout's check said of them.
pub(crate) struct InHand {
    pub(crate) units: Vec<Option<AlignedBuf>>,
    pub(crate) erased: Vec<bool>,
    pub(crate) truth: Vec<Option<u64>>,
    pub(crate) data_crc: Vec<Option<u32>>,
    /// The appendix of every unit read that passed its checks (its block table is what a
    /// partial seal keeps for the blocks it does not rewrite). Empty after a repair.
    pub(crate) appendices: Vec<Option<Appendix>>,
    pub(crate) table: Option<CkTable>,
}

impl InHand {
    /// Every unit is whole in memory (the piece was repaired); otherwise only the planned
    /// extents are.
    pub(crate) fn whole(&self) -> bool {
        self.appendices.is_empty()
    }
}

/// A write's new units, built before the layout seals them.
pub(crate) struct NewWrite<'d> {
    pub(crate) stripe: StripeIx,
    /// Position of `new[0]`.
    pub(crate) first: Pos,
    pub(crate) new: Vec<NewChunk<'d>>,
    pub(crate) parity: Vec<AlignedBuf>,
    /// What of each parity unit is written.
    pub(crate) parity_extent: Extent,
}

/// A new data unit of a write: built in a unit buffer, or (a whole chunk without an appendix)
/// the caller's own bytes.
pub(crate) struct NewChunk<'d> {
    pub(crate) buf: Option<AlignedBuf>,
    pub(crate) user: Option<&'d [u8]>,
    /// What of it is written.
    pub(crate) e: Extent,
}

impl NewChunk<'_> {
    /// The unit's bytes (the chunk alone when borrowed).
    pub(crate) fn bytes(&self) -> &[u8] {
        match (&self.buf, self.user) {
            (Some(b), _) => b,
            (None, Some(u)) => u,
            (None, None) => unreachable!("a new chunk has bytes"),
        }
    }
}

/// What a write's seal adds to its in-place I/O besides its units.
pub(crate) enum Sealed {
    /// Nothing: the metadata is inside the units.
    InUnits,
    /// A buddy's rewritten appendix (position, unit buffer with it at the chunk's end).
    Buddy(Pos, AlignedBuf),
    /// The stripe's new checksum-member table; with the write journal also encoded, written
    /// with the units (else it goes to the stripe cache dirty).
    Table(CkTable, Option<AlignedBuf>),
}

/// A unit a check suspects: its position, what failed and what showed it.
pub(crate) type Suspect = (Pos, EventKind, String);

/// A stripe as it should be: every unit's bytes, and the truth about every data chunk.
pub(crate) struct Image {
    pub(crate) units: Vec<AlignedBuf>,
    pub(crate) truth: Vec<Option<u64>>,
    /// The stripe's checksum-member table, as repaired.
    pub(crate) ck: Option<CkTable>,
}

/// What [`Layout::decide`] concluded: the stripe as it should be and what was wrong with it.
pub(crate) struct Decided {
    pub(crate) image: Image,
    /// Every unit found wrong, once per finding (a unit may have several).
    pub(crate) findings: Vec<Finding>,
    /// The checksum member's unit must be rewritten with `image.ck`.
    pub(crate) rewrite_table: bool,
    /// A resync settled the stripe as it is (the evidence for its event) instead of repairing.
    pub(crate) settled: Option<String>,
}

/// What a repair found about one unit of a stripe.
#[derive(Clone, Debug)]
pub(crate) struct Finding {
    /// Its stripe position (`n`: the checksum member's unit).
    pub(crate) pos: Pos,
    pub(crate) kind: EventKind,
    /// What showed it.
    pub(crate) evidence: String,
    /// Its chunk bytes were right (only its appendix or table entry was wrong).
    pub(crate) chunk_ok: bool,
}

impl Finding {
    pub(crate) fn new(pos: Pos, kind: EventKind, evidence: String, chunk_ok: bool) -> Finding {
        Finding {
            pos,
            kind,
            evidence,
            chunk_ok,
        }
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
    pub(crate) fn may_have_left(self, pos: Pos) -> bool {
        match self {
            Interrupted::No => false,
            Interrupted::Unknown => true,
            Interrupted::Only(mask) => mask.get(pos.get()).copied().unwrap_or(false),
        }
    }

    /// Whether a finding of `kind` at `pos` is silent corruption rather than what the crash
    /// left: a crash leaves units torn, behind or missing, never a unit that names another
    /// place.
    pub(crate) fn is_corruption(self, pos: Pos, kind: EventKind) -> bool {
        !self.may_have_left(pos) || kind == EventKind::Identity
    }
}

impl Array {
    /// A stripe that cannot be decided: counted and logged (not in a resync of a stripe a crash
    /// interrupted, whose caller settles it), and the error that says so.
    pub(crate) fn unrecoverable(
        &self,
        stripe: StripeIx,
        reason: String,
        cause: Interrupted<'_>,
    ) -> EngineError {
        if !cause.settles() {
            self.log_events(
                |c| c.unrecoverable += 1,
                [stripe_event(
                    stripe,
                    EventKind::Unrecoverable,
                    reason.clone(),
                    EventAction::Unrecoverable,
                )],
            );
        }
        EngineError::Unrecoverable {
            stripe: stripe.get(),
            reason,
        }
    }

    /// Count one detection when anything suspected or found in `stripe` is news: silent
    /// corruption, not a member already known to be out, nor what an interrupted write left.
    pub(crate) fn count_detection<'f>(
        &self,
        stripe: StripeIx,
        suspects: &[Suspect],
        findings: impl IntoIterator<Item = &'f Finding>,
        cause: Interrupted<'_>,
    ) {
        let news = |pos: Pos, kind: EventKind| {
            let member = self.member_of(stripe, pos);
            let known_out = kind == EventKind::ReadError
                && (self.is_failed(member) || self.forced_unvouched(stripe, member));
            !known_out && cause.is_corruption(pos, kind)
        };
        if suspects.iter().any(|s| news(s.0, s.1))
            || findings.into_iter().any(|f| news(f.pos, f.kind))
        {
            self.count(|c| c.detected += 1);
        }
    }
}

/// What a settle takes for the data units (`Array::settle_with`).
#[derive(Clone, Copy)]
pub(crate) enum Settle<'a> {
    /// Every data unit as on disk; one no member gives leaves the stripe unsettled.
    AsOnDisk,
    /// Data position `.0`'s unit from `.1` instead of the disk (a missing member's chunk
    /// saved in the journal before a degraded write).
    Known(Pos, &'a [u8]),
    /// A data unit no member gives is lost: zero-filled and listed untrusted whole (a
    /// writable forced assembly, whose operator accepted that what cannot be verified goes).
    LoseUnreadable,
}
