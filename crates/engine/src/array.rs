//! Creating and assembling arrays; superblock maintenance.

use crate::assembly::{decide, read_superblock, Verdict};
use crate::ckcache::{CkCache, CK_CACHE_TABLES};
use crate::env::{Env, EnvRef, RealEnv, Sabotage};
use crate::error::EngineError;
use crate::events::Counters;
use crate::events::Event;
use crate::events::EventLog;
use crate::heartbeat::{Beater, HEARTBEAT_MS};
use crate::members::{MemberHealth, Members};
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use crate::sync::{Mutex, MutexGuard};
use crate::units::Units;
use crate::view::{write_superblock_copies, View};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stripeguard_codes::ErasureCode;
use stripeguard_disk::{AlignedBuf, DiskError, DiskRef, UnitMap};
use stripeguard_format::Owner;
use stripeguard_format::{EventKind, EventRole};
use stripeguard_integrity::{
    ArrayState, CodeId, CrossCheck, Identity, MemberSlot, MemberState, MetadataLayout, Role,
    Scheme, Superblock, OWNER_RECORD_OFFSET,
};
use stripeguard_plan::{Geometry, Granularity, Op, PiecePlan, Planner};

/// Sequence numbers reserved per superblock update (hybrid-seq).
pub const SEQUENCE_RESERVATION: u64 = 1 << 20;
const STRIPE_LOCKS: usize = 1024;

/// Parameters of a new array.
#[derive(Clone, Debug)]
pub struct ArrayConfig {
    /// `k`.
    pub data_chunks: usize,
    /// `m`.
    pub parity_chunks: usize,
    /// The erasure code.
    pub code: CodeId,
    /// The integrity scheme.
    pub scheme: Scheme,
    /// Chunk size in bytes.
    pub chunk_bytes: u32,
    /// 512 or 4096.
    pub sector_bytes: u32,
    /// Stripes; `None` = as many as the smallest member holds.
    pub stripes: Option<u64>,
    /// Bound on the first-read map's memory.
    pub first_read_map_bytes: u64,
    /// Parity appendices a first-read cross-checks against.
    pub cross_check: CrossCheck,
    /// Every write goes through the journal first (FORMAT.md §2.6): a chunk written but not
    /// flushed reads back entirely old or entirely new after any crash, at the price of
    /// writing its bytes twice and a flush before each write goes in place.
    pub write_journal: bool,
    /// The clock, randomness and host the array uses (the machine's by default).
    pub env: EnvRef,
    /// Lock every member with `flock` (off where flock does not cross hosts: the owner record
    /// is then the only guard, FORMAT.md §2.2).
    pub local_locks: bool,
    /// The array's name (FORMAT.md §2.1); `None`: the host's name and the first 8 hex digits
    /// of the new uuid (`backup-3f2a9c01`), unique without asking any other array.
    pub name: Option<String>,
    /// Keep zero stripes (incompatible feature bit 3, FORMAT.md §2.7): every stripe starts as
    /// one instead of being written, and TRIM / WRITE_ZEROES of whole stripes write metadata
    /// only. Off: every unit is written at create and zeros are written (an older build can
    /// assemble the array).
    pub zero_stripes: bool,
    /// The write journal on these devices (one, or two as a mirror) instead of the members'
    /// slots (FORMAT.md §2.12); needs `write_journal`.
    pub journal_devices: Devices,
}

/// Devices given by handle (printed by their names).
#[derive(Clone, Default)]
pub struct Devices(pub Vec<DiskRef>);

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|d| d.name().to_string()))
            .finish()
    }
}

impl std::ops::Deref for Devices {
    type Target = Vec<DiskRef>;
    fn deref(&self) -> &Vec<DiskRef> {
        &self.0
    }
}

impl ArrayConfig {
    /// `k + m` with the usual code for `m`, 512-byte sectors, `stripes` stripes and a 1 MiB
    /// first-read map: the shape tests, benchmarks and demos use.
    pub fn new(k: usize, m: usize, scheme: Scheme, chunk_bytes: u32, stripes: u64) -> Self {
        ArrayConfig {
            data_chunks: k,
            parity_chunks: m,
            code: CodeId::for_parity(m),
            scheme,
            chunk_bytes,
            sector_bytes: 512,
            stripes: Some(stripes),
            first_read_map_bytes: 1 << 20,
            cross_check: CrossCheck::One,
            write_journal: false,
            env: RealEnv::shared(),
            local_locks: true,
            name: None,
            zero_stripes: false,
            journal_devices: Devices::default(),
        }
    }

    /// Bytes each member needs for this configuration (superblocks + units; needs `stripes`).
    pub fn member_bytes(&self) -> u64 {
        MetadataLayout::member_bytes_with(
            self.stripes.unwrap_or(0),
            self.unit_bytes(),
            self.journal_slots(),
        )
    }

    /// The journal slots this configuration needs, when it is not the layout's default.
    pub fn journal_slots(&self) -> Option<u32> {
        self.write_journal.then(|| {
            stripeguard_integrity::write_journal_slots(
                self.data_chunks + self.parity_chunks + self.scheme.extra_members(),
            )
        })
    }

    /// Bytes of one unit: the chunk and its appendix (FORMAT.md §2.9).
    pub fn unit_bytes(&self) -> u64 {
        self.chunk_bytes as u64
            + stripeguard_integrity::appendix_bytes_for(
                self.scheme,
                self.data_chunks,
                self.chunk_bytes,
                self.sector_bytes,
            ) as u64
    }
}

/// Options for assembling an existing array.
#[derive(Clone, Debug)]
pub struct AssembleOptions {
    /// Bound on the first-read map's memory.
    pub first_read_map_bytes: u64,
    /// Mark the array dirty and allow writes (repairs are written back only when writable).
    pub writable: bool,
    /// Heartbeat interval written into the owner record (FORMAT.md §2.2).
    pub heartbeat: std::time::Duration,
    /// Refuse at once when another host's holder may still hold the array, instead of waiting
    /// to see whether its heartbeat moves (FORMAT.md §2.2).
    pub no_wait: bool,
    /// The clock, randomness and host the array uses (the machine's by default).
    pub env: EnvRef,
    /// Lock every member with `flock` (see [`ArrayConfig::local_locks`]).
    pub local_locks: bool,
    /// A deliberate defect (the simulator's negative controls); `None` everywhere else.
    pub sabotage: Option<Sabotage>,
    /// A forced assembly (`--force-assemble`): when more members are stale than the array
    /// survives, bring back the freshest stale ones (highest event count) until it survives, as
    /// md's `--assemble --force` does — not for scheme `none`: every read is then verified
    /// against the integrity metadata, and what cannot be verified is refused. Read-only, it
    /// writes nothing; writable (`--writable`), the members it brings back are recorded as
    /// current and every stripe is resynced at once, what cannot be verified listed untrusted
    /// (FORMAT.md §2.1, §2.7) — permanent, as md's rewritten event counts are.
    pub force: bool,
    /// Devices that may be the array's journal devices (FORMAT.md §2.12): matched by their
    /// labels; a listed journal device not among them is lost.
    pub journal_devices: Devices,
}

impl Default for AssembleOptions {
    fn default() -> Self {
        AssembleOptions {
            first_read_map_bytes: 64 << 20,
            writable: true,
            heartbeat: std::time::Duration::from_millis(u64::from(HEARTBEAT_MS)),
            no_wait: false,
            env: RealEnv::shared(),
            local_locks: true,
            sabotage: None,
            force: false,
            journal_devices: Devices::default(),
        }
    }
}

pub(crate) struct SeqState {
    pub(crate) next: u64,
    pub(crate) high_water: u64,
}

/// What the superblocks say beyond the geometry: the member table and the sequence mark last
/// written.
pub(crate) struct Meta {
    pub(crate) table: Vec<MemberSlot>,
    pub(crate) high_water: u64,
    pub(crate) state: ArrayState,
    /// Incompatible feature bit 2: the stripe-state record may hold an entry (FORMAT.md §2.7).
    pub(crate) untrusted_listed: bool,
    /// Members whose superblock is not written: the stale members a writable forced assembly
    /// brought back, until its resync of every stripe is done. Their own superblocks still say
    /// stale, so a crash before then leaves an array that needs the forced assembly again
    /// (which starts over), never one that takes them as current half-resynced.
    pub(crate) held_back: Vec<usize>,
    /// Hot spares listed (FORMAT.md §2.1 spare table, §2.11).
    pub(crate) spares: Vec<stripeguard_format::SpareEntry>,
    /// When a spare takes a member's place (`None`: the defaults, not written).
    pub(crate) spare_policy: Option<stripeguard_format::SparePolicy>,
}

/// Appendices the commands and the server keep in memory (about 10 MiB with 512-byte
/// appendices; a partial read of a unit whose appendix is cached is one I/O): the number
/// [`Array::enable_appendix_cache`] is given by every caller that assembles an array to serve.
pub const APPENDIX_CACHE_ENTRIES: usize = 16384;

/// An assembled array.
///
/// Its locks are taken in the order of the numbered list in docs/DESIGN.md ("Lock order.",
/// under "Inside the engine"); each lock field below gives its number there.
pub struct Array {
    /// The superblock as assembled (member index 0's view). Its `stripes` is the count at
    /// assembly: a grow changes `stripes` below, so the stripe count and everything that
    /// follows from it (the journal's offset, the bytes a member needs) are read from
    /// [`Array::geometry`], never from here.
    sb: Superblock,
    /// k, m and the chunk size (its `stripes`: as assembled, see `stripes`).
    shape: Geometry,
    /// Stripes now ([`Array::grow`] raises it, under every stripe lock).
    stripes: std::sync::atomic::AtomicU64,
    /// What one I/O may move (FORMAT.md §2.9.1): checksum blocks, the appendix alone.
    gran: Granularity,
    /// Shared with the heartbeat thread (as is `ownership`). Its locks: lock order 13 (leaves).
    members: Arc<Members>,
    code: Box<dyn ErasureCode>,
    /// Lock order 13 (a leaf).
    planner: Mutex<Planner>,
    /// Unit I/Os the planner planned for reads and writes ([`Array::planned_unit_ios`]).
    planned_ios: std::sync::atomic::AtomicU64,
    /// The stripe locks, a stripe's at its index modulo their count: lock order 1.
    locks: Box<[Mutex<()>]>,
    /// Lock order 8.
    seq: Mutex<SeqState>,
    /// Lock order 10.
    meta: Mutex<Meta>,
    /// Lock order 6.
    intent: Mutex<crate::intent::Intent>,
    /// Listed untrusted blocks (FORMAT.md §2.7). Lock order 7.
    untrusted: crate::stripe_state::UntrustedSet,
    /// Lock order 4.
    ownership: Arc<Mutex<Option<Owner>>>,
    /// The owner record's heartbeat thread while this process holds the array. Lock order 2.
    beater: Mutex<Option<Beater>>,
    /// Lock order 13 (a leaf).
    journal: Mutex<crate::journal::Journal>,
    /// One freeing of journal slots at a time, from its start to its last flush: a flush
    /// that finds a slot another flush is freeing returns only once that freeing is durable.
    /// Lock order 5.
    journal_freeing: Mutex<()>,
    /// During a journal replay: (stripe, position, unit) that stands in for a missing member.
    /// Lock order 11.
    stand_in: Mutex<Option<(StripeIx, Pos, AlignedBuf)>>,
    /// Lock order 12.
    events: Mutex<EventLog>,
    writable: bool,
    generation: std::sync::atomic::AtomicU64,
    /// Unit buffers, the I/O thread pool and the appendix cache. Its locks: lock order 13
    /// (leaves); waiting for its pool: see the list.
    units: Units,
    /// Checksum-chunk arrays: the stripe cache of tables (Kroth & Yang), dirty ones included.
    /// Lock order 9.
    ck: Mutex<CkCache>,
    /// The clock, randomness and host (given at create or assembly).
    env: EnvRef,
    /// A deliberate defect (the simulator's negative controls).
    pub(crate) sabotage: Option<Sabotage>,
    /// A forced assembly's stale members and what of them may be trusted (forced.rs). A leaf
    /// lock, held only to read it.
    ///
    /// A std mutex, not one of `crate::sync`'s: it is taken on every unit read of a forced
    /// assembly only (`forced_any` says whether there is one), and is no scheduling point of
    /// the seeded simulation (an array without a forced assembly reads exactly as before).
    forced: std::sync::Mutex<Option<crate::trust::ForcedView>>,
    /// Whether `forced` holds a view: read first, without the lock.
    forced_any: std::sync::atomic::AtomicBool,
    /// The write journal's devices (FORMAT.md §2.12), when the array has them.
    jdevs: Option<crate::jdev::JournalDevices>,
    /// A journal device was missing at an unclean assembly: the records of the interrupted
    /// writes may be gone, so the resync may not take the journal as complete.
    journal_incomplete: std::sync::atomic::AtomicBool,
    /// Flushes running now, and flushes finished (a writer waiting for journal slots waits
    /// for a running one instead of starting its own: `journaling.rs`).
    flushes: (std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
    /// The journal's slots are the journal devices' (set at create or assembly).
    journal_on_devices: bool,
    /// While a reshape runs: the geometry's view this array is (view.rs). A std lock, no
    /// scheduling point (read on the rare paths only: sequence numbers, superblocks, records).
    view: std::sync::RwLock<Option<View>>,
}

impl Array {
    /// Make a new array on `members` (in order) and return it assembled and writable. Every unit
    /// is written (zero chunk, valid appendix), so no unit of the array lacks an identity; with
    /// `fresh` (members are new sparse zero files) only the appendix sectors are written.
    /// `progress(done, total)` is called as stripes are initialised.
    pub fn create(
        members: Vec<DiskRef>,
        cfg: &ArrayConfig,
        fresh: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Array, EngineError> {
        lock_members(&members, true, cfg.local_locks)?;
        let mut sb = new_superblock(cfg, &members)?;
        let labels = journal_labels(cfg, &sb)?;
        sb.journal_devices = labels.iter().map(|l| l.device_uuid).collect();
        let mut array = Array::from_parts(
            sb,
            members,
            true,
            cfg.first_read_map_bytes,
            EnvRef::clone(&cfg.env),
        )?;
        if !fresh {
            array.zero_metadata_regions()?;
        }
        array.jdevs = crate::jdev::write_new(
            &cfg.journal_devices,
            &labels,
            array.sb().journal_slot_bytes(),
        )?;
        array.size_journal();
        if array.keeps_zero_stripes() {
            // Every stripe one zero range: nothing of the data area is written (zero.rs).
            array.start_all_zero()?;
            progress(array.geometry().stripes, array.geometry().stripes);
        } else {
            let all = 0..array.geometry().stripes;
            array.layout().initialise(&array, fresh, all, progress)?;
        }
        array.write_superblocks(ArrayState::Dirty)?;
        Ok(array)
    }

    /// Whether [`Array::create`] would accept `members` for `cfg` (member count, sector size,
    /// stripes that fit the smallest member, ...), checked without writing anything: a caller
    /// that must destroy something first (foreign signatures) does it only after this.
    pub fn create_preflight(members: &[DiskRef], cfg: &ArrayConfig) -> Result<(), EngineError> {
        let sb = new_superblock(cfg, members)?;
        journal_labels(cfg, &sb).map(|_| ())
    }

    /// Assemble the array whose members are `members`, in member-index order. Up to `m` members
    /// may be unusable (unreadable, no superblock) or stale (behind the others' event count: they
    /// missed writes): the array then runs degraded without them. Members assembled and written
    /// apart (split brain) are refused. FORMAT.md §2.1 gives the rules.
    pub fn assemble(members: Vec<DiskRef>, opts: &AssembleOptions) -> Result<Array, EngineError> {
        if members.is_empty() {
            return Err(EngineError::Assemble("no members given".into()));
        }
        lock_members(&members, opts.writable, opts.local_locks)?;
        let found: Vec<Result<(Superblock, u8), String>> = members
            .iter()
            .map(|d| read_superblock(d.as_ref()))
            .collect();
        // A superblock saying a reshape is in progress, at least as new as every other (one
        // trailing the others is from before the reshape's commit, which they record).
        let valid = || {
            found
                .iter()
                .filter_map(|f| f.as_ref().ok())
                .map(|(sb, _)| sb)
        };
        let plain = valid()
            .filter(|sb| sb.reshape.is_none())
            .map(|sb| sb.generation)
            .max();
        if let Some(sb) = valid()
            .filter(|sb| sb.reshape.is_some())
            .max_by_key(|sb| sb.generation)
            .filter(|sb| plain.is_none_or(|g| sb.generation >= g))
        {
            return Err(reshaping(sb));
        }
        let names: Vec<String> = members.iter().map(|d| d.name().to_string()).collect();
        let sizes: Vec<u64> = members.iter().map(|d| d.size_bytes()).collect();
        let Verdict {
            reference,
            fixes,
            unusable,
            forced,
        } = decide(&names, &sizes, &found, opts.force)?;
        if !forced.is_empty() && reference.scheme == Scheme::None {
            return Err(EngineError::Config(
                "a forced assembly needs an integrity scheme to verify every read; scheme `none` has none, so the stale members' old data would be returned as good".into(),
            ));
        }
        let high_water = found
            .iter()
            .filter_map(|f| f.as_ref().ok())
            .map(|(sb, _)| sb.sequence_high_water)
            .max()
            .unwrap_or(SEQUENCE_RESERVATION);
        let mut sb = reference;
        sb.sequence_high_water = high_water;
        let mut array = Array::from_parts(
            sb,
            members,
            opts.writable,
            opts.first_read_map_bytes,
            EnvRef::clone(&opts.env),
        )?;
        array.sabotage = opts.sabotage;
        let mut newly_out = Vec::new();
        {
            let mut meta = array.meta.lock().expect("lock");
            for (member, why) in &unusable {
                array.members.take_out(MemberIx::new(*member), why.clone());
                let slot = &mut meta.table[*member];
                if slot.state == MemberState::Active {
                    // Current at the newest event count; it leaves now.
                    slot.state = MemberState::Missing;
                    newly_out.push((*member, why.clone()));
                }
            }
            array.members.note_superblock_fixes(fixes);
        }
        let logged = array.event_log();
        array.events.lock().expect("lock").next_number = logged
            .entries
            .last()
            .map(|e| e.number.saturating_add(1))
            .unwrap_or(0);
        let (jdevs, jlost) = crate::jdev::find(array.sb(), &opts.journal_devices);
        array.jdevs = jdevs;
        array.size_journal();
        if !jlost.is_empty() && array.sb.state == ArrayState::Dirty {
            // The records of the writes the crash interrupted may be gone with it.
            array
                .journal_incomplete
                .store(true, std::sync::atomic::Ordering::Release);
        }
        for why in jlost.iter().filter(|_| opts.writable) {
            array.log_event(Event {
                stripe: 0,
                member: 0,
                position: 0,
                role: EventRole::Stripe,
                kind: EventKind::JournalDeviceLost,
                evidence: why.clone(),
                action: crate::events::EventAction::Notice,
            });
        }
        // Numbered after the log on the members (a writable assembly saves them with the
        // first save). A member current until now and absent at this assembly has failed as
        // surely as one an I/O error takes out: its event says so (a read-only assembly
        // records nothing, so it logs nothing durable).
        for (member, why) in newly_out.iter().filter(|_| opts.writable) {
            array.log_event(Event {
                stripe: 0,
                member: *member,
                position: 0,
                role: EventRole::Member,
                kind: EventKind::MemberFailed,
                evidence: format!("{}: absent or unusable at assembly: {why}", names[*member]),
                action: crate::events::EventAction::RebuiltDegraded,
            });
        }
        // Writable, the members are recorded as current only at the end of the resync: their
        // events are logged then (after the resync's own, which may be many).
        for (member, why) in forced.iter().filter(|_| !opts.writable) {
            array.log_event(Event {
                stripe: 0,
                member: *member,
                position: 0,
                role: EventRole::Member,
                kind: EventKind::ForcedAssembly,
                evidence: format!(
                    "{}{} brought back by a forced assembly (read-only, every read verified): {why}",
                    array
                        .members
                        .get(MemberIx::new(*member))
                        .device()
                        .map(|d| format!("{d}: "))
                        .unwrap_or_default(),
                    names[*member],
                ),
                action: crate::events::EventAction::Notice,
            });
        }
        array.load_intent_sequence();
        if !forced.is_empty() {
            // From the record as it stands, before a writable one sets every bit.
            array.set_forced(forced.iter().map(|(p, _)| *p).collect());
        }
        array.load_untrusted()?;
        if opts.writable {
            array.take_ownership(opts.heartbeat, opts.no_wait)?;
            let unclean = array.sb.state == ArrayState::Dirty;
            let forced_members: Vec<MemberIx> =
                forced.iter().map(|(p, _)| MemberIx::new(*p)).collect();
            if !forced.is_empty() {
                // Every region dirty, and the stale members' superblocks left as they are,
                // until every stripe is resynced (FORMAT.md §2.1).
                array.hold_back_forced(&forced_members)?;
            }
            array.write_superblocks(ArrayState::Dirty)?;
            // The members found gone are news now, not at the first flush (a monitor reads
            // the durable log while this process holds the array). Best effort, as any save.
            if !newly_out.is_empty() {
                let _ = array.save_events();
            }
            if !forced.is_empty() {
                array.resync_forced()?;
                array.adopt_forced(&forced_members)?;
                for (member, why) in &forced {
                    array.note(
                        EventKind::ForcedAssembly,
                        Some(MemberIx::new(*member)),
                        format!(
                            "{} brought back by a forced assembly and recorded as current (every stripe resynced, what could not be verified listed untrusted): {why}",
                            names[*member]
                        ),
                    );
                }
            } else if unclean && !array.sabotaged(Sabotage::SkippedResync) {
                // The last writer did not close: settle what it may have left half-written
                // before anything else reads or writes.
                array.resync()?;
            }
        }
        Ok(array)
    }

    pub(crate) fn from_parts(
        sb: Superblock,
        members: Vec<DiskRef>,
        writable: bool,
        map_bytes: u64,
        env: EnvRef,
    ) -> Result<Array, EngineError> {
        let k = sb.data_chunks as usize;
        let m = sb.parity_chunks as usize;
        let code = stripeguard_codes::by_name(sb.code.name(), k, m)?;
        let geometry = Geometry {
            k,
            m,
            chunk_bytes: sb.chunk_bytes as u64,
            stripes: sb.stripes,
        };
        let io_pool = if members.iter().all(|d| d.prefers_parallel()) {
            env.io_pool(members.len().clamp(2, 64))
        } else {
            None
        };
        let mem_align = members.iter().map(|d| d.mem_align()).max().unwrap_or(1);
        let units = Units::new(usize_of(sb.unit_bytes()), mem_align, geometry.n(), io_pool);
        let gran = Granularity::new(sb.scheme, k, sb.chunk_bytes, sb.sector_bytes())
            .with_local_parity(code.parity_is_byte_local());
        Ok(Array {
            gran,
            planner: Mutex::new(
                Planner::new(geometry, sb.scheme, map_bytes).with_cross_check(sb.cross_check),
            ),
            planned_ios: std::sync::atomic::AtomicU64::new(0),
            locks: (0..STRIPE_LOCKS).map(|_| Mutex::new(())).collect(),
            seq: Mutex::new(SeqState {
                next: sb.sequence_high_water,
                high_water: sb.sequence_high_water,
            }),
            ownership: Arc::new(Mutex::new(None)),
            beater: Mutex::new(None),
            journal: Mutex::new(crate::journal::Journal::new(sb.journal_slots as usize)),
            journal_freeing: Mutex::new(()),
            stand_in: Mutex::new(None),
            intent: Mutex::new(crate::intent::Intent::new(
                &sb.layout,
                sb.stripes,
                geometry.stripe_data_bytes(),
            )),
            meta: Mutex::new(Meta {
                table: sb.member_table.clone(),
                high_water: sb.sequence_high_water,
                state: sb.state,
                untrusted_listed: sb.untrusted_listed,
                held_back: Vec::new(),
                spares: sb.spares.clone(),
                spare_policy: sb.spare_policy,
            }),
            untrusted: crate::stripe_state::UntrustedSet::new(sb.layout.state_bytes),
            events: Mutex::new(EventLog::new(EnvRef::clone(&env))),
            env,
            code,
            shape: geometry,
            stripes: std::sync::atomic::AtomicU64::new(sb.stripes),
            members: Arc::new(Members::new(members)),
            generation: std::sync::atomic::AtomicU64::new(sb.generation),
            units,
            ck: Mutex::new(CkCache::new(if sb.scheme.extra_members() > 0 {
                CK_CACHE_TABLES
            } else {
                0
            })),
            sb,
            writable,
            sabotage: None,
            forced: std::sync::Mutex::new(None),
            forced_any: std::sync::atomic::AtomicBool::new(false),
            jdevs: None,
            journal_incomplete: std::sync::atomic::AtomicBool::new(false),
            flushes: Default::default(),
            journal_on_devices: false,
            view: std::sync::RwLock::new(None),
        })
    }

    /// Keep up to `entries` appendices this process verified or wrote in memory, so that a read
    /// of a unit whose appendix is cached moves only its blocks (the paper's subsequent read:
    /// one I/O) — checked against the cached block table, the newest one this holder wrote or
    /// verified, so a lost, torn or misdirected write of the unit is still caught. 0 turns it
    /// off. The planner's byte-accurate count is of the uncached I/O.
    /// The cache holds at most 16 MiB of appendices whatever `entries` says (a 16 MiB chunk's
    /// appendix is 33 sectors).
    pub fn enable_appendix_cache(&self, entries: usize) {
        self.units
            .enable_appendix_cache(entries, usize_of(self.gran.appendix));
    }

    /// Forget every cached appendix and clean checksum table (a member failed or was
    /// replaced: they are re-read).
    pub(crate) fn clear_appendix_cache(&self) {
        self.ck_clear_clean();
        self.units.clear_appendices();
    }

    /// The superblock as this process keeps it (member index 0's view).
    pub(crate) fn sb(&self) -> &Superblock {
        &self.sb
    }

    pub(crate) fn gran(&self) -> &Granularity {
        &self.gran
    }

    pub(crate) fn members(&self) -> &Arc<Members> {
        &self.members
    }

    pub(crate) fn code(&self) -> &dyn ErasureCode {
        self.code.as_ref()
    }

    /// The plan of one stripe piece (`offset`, `len` within one stripe) for `op`.
    pub(crate) fn plan_piece(&self, op: Op, offset: u64, len: u64) -> PiecePlan {
        let mut out = None;
        self.planner
            .lock()
            .expect("lock")
            .plan(op, offset, len, |p| out = Some(p.clone()));
        let plan = out.expect("a range within one stripe is one piece");
        self.planned_ios.fetch_add(
            (plan.reads.len() + plan.writes.len()) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        plan
    }

    /// Unit I/Os the planner has planned for the reads and writes since assembly: what the
    /// simulator counts for the same requests. The member I/Os issued can be fewer (a
    /// request's consecutive units on one member merged into one I/O, appendices taken from
    /// the cache) or more (repairs, the write journal, intent-record writes).
    pub fn planned_unit_ios(&self) -> u64 {
        self.planned_ios.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The data chunks at `positions` of `stripe` go back to first-read state: their next
    /// access cross-checks them again (they were rewritten, or a piece that read them failed).
    pub(crate) fn forget_verified(
        &self,
        stripe: StripeIx,
        positions: impl IntoIterator<Item = Pos>,
    ) {
        let mut planner = self.planner.lock().expect("lock");
        for pos in positions {
            let id = self.geometry().data_chunk_id(stripe.get(), pos.get());
            planner.map_mut().mark_written(id);
        }
    }

    /// The lock of `stripe`: every read, write, repair, resync and rebuild of a stripe holds
    /// it (a fixed table of mutexes, shared by stripes with the same index modulo its size).
    pub(crate) fn lock_stripe(&self, stripe: StripeIx) -> MutexGuard<'_, ()> {
        self.locks[usize_of(stripe.get()) % self.locks.len()]
            .lock()
            .expect("lock")
    }

    /// The locks of every stripe of `stripes`, taken in the table's order (so two callers
    /// can never wait for each other).
    pub(crate) fn lock_stripes(
        &self,
        stripes: impl IntoIterator<Item = StripeIx>,
    ) -> Vec<MutexGuard<'_, ()>> {
        if self.sabotaged(Sabotage::NoStripeLock) {
            return Vec::new();
        }
        let mut slots: Vec<usize> = stripes
            .into_iter()
            .map(|s| usize_of(s.get()) % self.locks.len())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
            .iter()
            .map(|&l| self.locks[l].lock().expect("lock"))
            .collect()
    }

    /// How many stripe locks there are: stripes `0..` this many take every one of them.
    pub(crate) fn stripe_lock_count(&self) -> u64 {
        self.locks.len() as u64
    }

    /// The array has `stripes` stripes from now on (a grow's commit, under every stripe lock
    /// and the superblock lock).
    pub(crate) fn set_stripes(&self, stripes: u64) {
        self.stripes.store(stripes, Ordering::Release);
        self.planner.lock().expect("lock").set_stripes(stripes);
    }

    /// Whether the simulator asked for defect `s`.
    pub(crate) fn jdevs(&self) -> Option<&crate::jdev::JournalDevices> {
        self.jdevs.as_ref()
    }

    /// The journal's slots are the journal devices' while one lives (FORMAT.md §2.12), else
    /// the members'.
    fn size_journal(&mut self) {
        if let Some(j) = self.jdevs.as_ref().filter(|j| !j.live().is_empty()) {
            self.journal = Mutex::new(crate::journal::Journal::new(j.slots()));
            self.journal_on_devices = true;
        }
    }

    /// Counts a flush as running until the guard is dropped.
    pub(crate) fn flush_running(&self) -> FlushRunning<'_> {
        self.flushes.0.fetch_add(1, Ordering::AcqRel);
        FlushRunning(&self.flushes)
    }

    /// (flushes running, flushes finished).
    pub(crate) fn flush_counts(&self) -> (u64, u64) {
        (
            self.flushes.0.load(Ordering::Acquire),
            self.flushes.1.load(Ordering::Acquire),
        )
    }

    /// Slots the journal has (without its lock: a lock taken here would move the seeded
    /// simulation's schedules).
    pub(crate) fn journal_slot_count(&self) -> usize {
        match self.jdevs.as_ref() {
            Some(j) if self.journal_on_devices => j.slots(),
            _ => self.sb.journal_slots as usize,
        }
    }

    /// See the `journal_incomplete` field.
    pub(crate) fn journal_incomplete(&self) -> &std::sync::atomic::AtomicBool {
        &self.journal_incomplete
    }

    pub(crate) fn sabotaged(&self, s: Sabotage) -> bool {
        self.sabotage == Some(s)
    }

    /// Make this array a view of a reshape (or, `None`, an array of its own again).
    pub(crate) fn set_view(&self, view: Option<View>) {
        if view.is_some() {
            self.intent.lock().expect("lock").disable();
        }
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = view;
    }

    /// The reshape this array is a view of, if any.
    pub(crate) fn view(&self) -> Option<View> {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn meta(&self) -> &Mutex<Meta> {
        &self.meta
    }

    pub(crate) fn forced_view(&self) -> &std::sync::Mutex<Option<crate::trust::ForcedView>> {
        &self.forced
    }

    pub(crate) fn forced_any(&self) -> &std::sync::atomic::AtomicBool {
        &self.forced_any
    }

    pub(crate) fn intent(&self) -> &Mutex<crate::intent::Intent> {
        &self.intent
    }

    pub(crate) fn untrusted_set(&self) -> &crate::stripe_state::UntrustedSet {
        &self.untrusted
    }

    pub(crate) fn ownership(&self) -> &Arc<Mutex<Option<Owner>>> {
        &self.ownership
    }

    pub(crate) fn beater(&self) -> &Mutex<Option<Beater>> {
        &self.beater
    }

    pub(crate) fn journal(&self) -> &Mutex<crate::journal::Journal> {
        &self.journal
    }

    pub(crate) fn journal_freeing(&self) -> &Mutex<()> {
        &self.journal_freeing
    }

    pub(crate) fn stand_in(&self) -> &Mutex<Option<(StripeIx, Pos, AlignedBuf)>> {
        &self.stand_in
    }

    /// Record `events` in the event log, in order, after `count` has updated its counters, in
    /// one hold of its lock (a leaf of the lock order: nothing else is taken under it).
    pub(crate) fn log_events(
        &self,
        count: impl FnOnce(&mut Counters),
        events: impl IntoIterator<Item = Event>,
    ) {
        let mut log = self.events.lock().expect("lock");
        count(&mut log.counters);
        for e in events {
            log.record(e);
        }
    }

    /// Record one event in the event log.
    pub(crate) fn log_event(&self, e: Event) {
        self.log_events(|_| {}, [e]);
    }

    /// Have `listener` told of every event from now on, as it is recorded (a holder logs each
    /// as a line on stderr and to syslog).
    pub fn set_event_listener(&self, listener: crate::events::EventListener) {
        self.events.lock().expect("lock").listener = Some(listener);
    }

    /// Record a state change (FORMAT.md §2.5 kinds 21–27: action `notice`, counted nowhere)
    /// about `member` (or the array as a whole) and make it durable at once: a state change an
    /// operator looks for after a crash must be in the log, not in memory.
    pub(crate) fn note(&self, kind: EventKind, member: Option<MemberIx>, evidence: String) {
        // A member's event names the device too (a path can name another disk tomorrow),
        // first: the entry's evidence field cuts long text at its end (FORMAT.md §2.5).
        let evidence = match member.and_then(|m| self.members.get(m).device()) {
            Some(dev) => format!("{dev}: {evidence}"),
            None => evidence,
        };
        self.log_event(Event {
            stripe: 0,
            member: member.map_or(0, MemberIx::get),
            position: 0,
            role: if member.is_some() {
                EventRole::Member
            } else {
                EventRole::Stripe
            },
            kind,
            evidence,
            action: crate::events::EventAction::Notice,
        });
        // Best effort: the event is in memory either way, and the next save writes it.
        let _ = self.save_events();
    }

    /// Update the event log's counters.
    pub(crate) fn count(&self, f: impl FnOnce(&mut Counters)) {
        self.log_events(f, []);
    }

    /// The events recorded since the last save, taken to be saved.
    pub(crate) fn take_unsaved(&self) -> Vec<(u64, u64, Event)> {
        std::mem::take(&mut self.events.lock().expect("lock").unsaved)
    }

    pub(crate) fn generation(&self) -> &std::sync::atomic::AtomicU64 {
        &self.generation
    }

    pub(crate) fn units(&self) -> &Units {
        &self.units
    }

    pub(crate) fn ck(&self) -> &Mutex<CkCache> {
        &self.ck
    }

    /// The environment the array was given.
    pub(crate) fn env(&self) -> &dyn Env {
        self.env.as_ref()
    }

    /// The environment's handle (for a thread of the array's own).
    pub(crate) fn env_ref(&self) -> &EnvRef {
        &self.env
    }

    /// The superblock (member index 0's view), with the stripe count as it is now.
    pub fn superblock(&self) -> Superblock {
        Superblock {
            stripes: self.geometry().stripes,
            ..self.sb.clone()
        }
    }
    /// The geometry, with the stripe count as it is now.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            stripes: self.stripes.load(std::sync::atomic::Ordering::Acquire),
            ..self.shape
        }
    }
    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.sb.scheme
    }
    /// User-visible bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.geometry().capacity_bytes()
    }
    /// Bytes per unit.
    pub fn unit_bytes(&self) -> u64 {
        self.sb.unit_bytes()
    }
    /// Where units are on each member (for fault injection).
    pub fn unit_map(&self) -> UnitMap {
        unit_map(&self.superblock())
    }
    /// The handle of member `i` as assembled (a stale or failed member's too, when it could be
    /// opened).
    pub fn member_disk(&self, i: usize) -> Option<DiskRef> {
        (i < self.members.len()).then(|| self.members.get(MemberIx::new(i)))
    }

    /// Whether some member is another host's export (an NBD URI): its I/O waits on the network
    /// rather than a device, so a server runs more requests at once on such an array.
    pub fn has_remote_members(&self) -> bool {
        self.members().all().iter().any(|d| d.shared_across_hosts())
    }

    /// Whether it was assembled for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Whether the superblocks said the array was not closed cleanly when it was assembled.
    pub fn was_unclean(&self) -> bool {
        self.sb.state == ArrayState::Dirty
    }
    /// Members' state.
    pub fn health(&self) -> Vec<MemberHealth> {
        self.members.health()
    }
    /// Totals of what was found and repaired.
    pub fn counters(&self) -> Counters {
        self.events.lock().expect("lock").counters.clone()
    }
    /// The most recent events.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .expect("lock")
            .recent
            .iter()
            .cloned()
            .collect()
    }

    /// Flush every member and mark the array clean.
    pub fn close(self) -> Result<(), EngineError> {
        if self.writable {
            self.flush_and_clear(true)?;
            self.write_superblocks(ArrayState::Clean)?;
            self.release_ownership()?;
        }
        Ok(())
    }

    /// Flush every current member (a failed flush takes the member out).
    pub(crate) fn flush_members(&self) -> Result<(), EngineError> {
        // The stripe cache's dirty checksum tables reach the disk before the flush.
        self.layout().write_back(self)?;
        // A failed flush is fatal for that member (docs/STYLE.md habit 3).
        self.each_member(None, |_, d| d.flush())
    }

    /// Run `op` on each current member (those in `only`, when given), all at once when the
    /// members are files or devices: a flush or a metadata write then waits for the slowest
    /// member, not for each in turn (8 members at 1 ms a flush: 8.8 ms -> ~1.1 ms). A member
    /// whose `op` fails is taken out.
    pub(crate) fn each_member(
        &self,
        only: Option<&[MemberIx]>,
        op: impl Fn(MemberIx, &DiskRef) -> Result<(), DiskError> + Sync,
    ) -> Result<(), EngineError> {
        let jobs: Vec<(MemberIx, ())> = MemberIx::upto(self.members.len())
            .filter(|&m| only.is_none_or(|o| o.contains(&m)))
            .map(|m| (m, ()))
            .collect();
        self.member_jobs(&jobs, |m, d, ()| op(m, d))
    }

    /// Run `op` on every (member, job) of `jobs` whose member is current, all at once as
    /// [`Array::each_member`] (several jobs of one member overlap too, as a device's queue
    /// would take them). A member with a failed job is taken out.
    pub(crate) fn member_jobs<T: Sync>(
        &self,
        jobs: &[(MemberIx, T)],
        op: impl Fn(MemberIx, &DiskRef, &T) -> Result<(), DiskError> + Sync,
    ) -> Result<(), EngineError> {
        let members = self.members.all();
        let live: Vec<&(MemberIx, T)> = jobs.iter().filter(|(m, _)| !self.is_failed(*m)).collect();
        let run = |&&(m, ref job): &&(MemberIx, T)| (m, op(m, &members[m.get()], job));
        let results: Vec<(MemberIx, Result<(), DiskError>)> =
            match self.units.pool_for_all(live.len()) {
                Some(pool) => pool.install(|| {
                    use rayon::prelude::*;
                    live.par_iter().with_max_len(1).map(run).collect()
                }),
                _ => live.iter().map(run).collect(),
            };
        for (m, r) in results {
            if let Err(e) = r {
                self.fail_member(m, &e)?;
            }
        }
        Ok(())
    }

    /// A unit-sized buffer with unspecified contents (callers overwrite all of it).
    /// Aligned for direct I/O on every member, so no member I/O goes through a bounce copy.
    pub(crate) fn unit_buf(&self) -> AlignedBuf {
        self.units.buf()
    }

    /// Return unit buffers to the pool (bounded: at most 16 stripes' worth are kept).
    pub(crate) fn recycle(&self, bufs: impl IntoIterator<Item = AlignedBuf>) {
        self.units.recycle(bufs);
    }

    pub(crate) fn is_failed(&self, member: MemberIx) -> bool {
        self.members.is_out(member)
    }

    /// Take a member out of the array after an I/O error that is not a bad sector. When the
    /// array is writable, the other members' superblocks record it as failed before this
    /// returns, so a member that missed writes is never taken for current (FORMAT.md §2.1).
    pub(crate) fn fail_member(&self, member: MemberIx, why: &DiskError) -> Result<(), EngineError> {
        if self.members.is_out(member) {
            return self.check_survivable();
        }
        self.clear_appendix_cache();
        let mut meta = self.meta.lock().expect("lock");
        if self.mark_failed(member, why, &mut meta) && self.writable {
            match self.view() {
                // A reshape's view: out in memory; the reshape stops (view.rs).
                Some(v) => v.shared.member_failed(),
                None => self.write_superblocks_locked(&mut meta)?,
            }
        }
        drop(meta);
        self.check_survivable()
    }

    /// Set `member`'s failed flag, health, event and table entry; false if it was failed already.
    fn mark_failed(&self, member: MemberIx, why: &DiskError, meta: &mut Meta) -> bool {
        if !self.members.take_out(member, why.reason()) {
            return false;
        }
        let slot = &mut meta.table[member.get()];
        if slot.state == MemberState::Active {
            slot.state = MemberState::Failed;
            slot.last_event = self.generation.load(Ordering::Relaxed);
        }
        self.events.lock().expect("lock").record(Event {
            stripe: 0,
            member: member.get(),
            position: 0,
            role: EventRole::Member,
            kind: EventKind::MemberFailed,
            evidence: {
                let d = self.members.get(member);
                match d.device() {
                    Some(dev) => format!("{} ({dev}): {}", d.name(), why.reason()),
                    None => format!("{}: {}", d.name(), why.reason()),
                }
            },
            action: crate::events::EventAction::RebuiltDegraded,
        });
        true
    }

    fn check_survivable(&self) -> Result<(), EngineError> {
        // The checksum member holds no data: without it reads go unverified, not lost.
        let failed = self.members.out_among(self.geometry().n());
        if failed > self.geometry().m {
            return Err(EngineError::TooManyFailed {
                failed,
                tolerated: self.geometry().m,
            });
        }
        Ok(())
    }

    /// The member table as this process knows it.
    pub fn member_table(&self) -> Vec<MemberSlot> {
        self.meta.lock().expect("lock").table.clone()
    }

    /// The next hybrid-seq sequence number, reserving a new block in the superblocks first when
    /// the current one is used up (so a number is never reused, even after a crash).
    pub(crate) fn next_sequence(&self) -> Result<u64, EngineError> {
        if let Some(v) = self.view() {
            return v.shared.next_sequence();
        }
        let mut s = self.seq.lock().expect("lock");
        if s.next >= s.high_water {
            let hw = s.high_water + SEQUENCE_RESERVATION;
            let mut meta = self.meta.lock().expect("lock");
            meta.high_water = hw;
            meta.state = ArrayState::Dirty;
            self.write_superblocks_locked(&mut meta)?;
            s.high_water = hw;
        }
        s.next += 1;
        Ok(s.next)
    }

    fn write_superblocks(&self, state: ArrayState) -> Result<(), EngineError> {
        let mut meta = self.meta.lock().expect("lock");
        meta.state = state;
        self.write_superblocks_locked(&mut meta)
    }

    /// Write every current member's superblock copies with a new event count. A member whose
    /// write fails leaves the array, and the others are written again with a table that says so.
    pub(crate) fn write_superblocks_locked(&self, meta: &mut Meta) -> Result<(), EngineError> {
        if let Some(v) = self.view() {
            // The superblocks are the reshape's: of what this array would change, only the
            // untrusted flag is carried into them (a resync's listing); the rest waits.
            return v.shared.set_untrusted_listed(meta.untrusted_listed);
        }
        loop {
            let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            for (i, slot) in meta.table.iter_mut().enumerate() {
                if slot.state == MemberState::Active && !self.is_failed(MemberIx::new(i)) {
                    slot.last_event = generation;
                }
            }
            let mut lost = None;
            for (i, d) in self.members.all().iter().enumerate() {
                if meta.held_back.contains(&i) {
                    continue;
                }
                let i = MemberIx::new(i);
                if self.is_failed(i) {
                    continue;
                }
                let mut sb = self.superblock();
                sb.member_index = crate::num::index_u16(i.get());
                sb.state = meta.state;
                sb.sequence_high_water = meta.high_water;
                sb.untrusted_listed = meta.untrusted_listed;
                sb.generation = generation;
                sb.member_table = meta.table.clone();
                sb.spares = meta.spares.clone();
                sb.spare_policy = meta.spare_policy;
                if let Some(j) = &self.jdevs {
                    sb.journal_devices_lost = j.lost_bits();
                }
                if let Err(e) = write_superblock_copies(d.as_ref(), &sb) {
                    lost = Some((i, e));
                    break;
                }
            }
            match lost {
                None => return Ok(()),
                Some((i, e)) => {
                    self.mark_failed(i, &e, meta);
                    self.check_survivable()?;
                }
            }
        }
    }

    /// Zero the reserved regions of the metadata area (owner record to the data offset) of
    /// members that held something before `create`.
    fn zero_metadata_regions(&self) -> Result<(), EngineError> {
        for d in &self.members.all() {
            self.zero_metadata_of(d)?;
        }
        Ok(())
    }

    /// Zero the reserved regions of the metadata area (owner record to the data offset) of
    /// `d` (a member at `create`, a replace's new device).
    pub(crate) fn zero_metadata_of(&self, d: &DiskRef) -> Result<(), EngineError> {
        let from = OWNER_RECORD_OFFSET.min(self.sb.data_offset_bytes);
        zero_range(d, from, self.sb.data_offset_bytes - from)
    }

    /// Expected identity of position `pos` of `stripe`.
    pub(crate) fn identity(&self, stripe: StripeIx, pos: Pos) -> Identity {
        let k = self.geometry().k;
        let pos = pos.get();
        Identity {
            array_uuid: self.sb.array_uuid,
            member_index: crate::num::index_u16(self.geometry().member_of(stripe.get(), pos)),
            chunk_number: stripe.get(),
            // Positions are below 255 (the member table's bound), so they fit a byte.
            role: if pos < k {
                Role::Data(u8::try_from(pos).expect("at most 255 positions"))
            } else {
                Role::Parity(u8::try_from(pos - k).expect("at most 255 positions"))
            },
        }
    }

    /// Where the journal slots start on every member of the array at `stripes` stripes
    /// (right after the last unit, FORMAT.md §2.6).
    pub(crate) fn journal_offset_at(&self, stripes: u64) -> u64 {
        self.unit_offset(stripes)
    }

    /// Byte offset of `stripe`'s unit on every member.
    pub fn unit_offset(&self, stripe: u64) -> u64 {
        self.sb.data_offset_bytes + stripe * self.unit_bytes()
    }
}

/// Where the units of a (stopped) member are, from its own superblock: for putting faults into
/// it at rest.
pub fn member_unit_map(d: &dyn stripeguard_disk::Disk) -> Result<UnitMap, EngineError> {
    read_superblock(d)
        .map(|(sb, _)| unit_map(&sb))
        .map_err(EngineError::Assemble)
}

impl Array {
    /// The newest valid record of a two-copy region (`copy_bytes` each at `offset`, written
    /// alternately) on any current member that `accept` takes, and whether a copy was damaged
    /// or a member's region could not be read.
    pub(crate) fn newest_record<T: stripeguard_format::Sequenced>(
        &self,
        offset: u64,
        copy_bytes: usize,
        accept: impl Fn(&T) -> bool,
    ) -> stripeguard_format::Newest<T> {
        let mut newest = stripeguard_format::Newest::default();
        for (i, d) in self.members.all().iter().enumerate() {
            if self.is_failed(MemberIx::new(i)) {
                continue;
            }
            let mut b = vec![0u8; 2 * copy_bytes];
            match d.read_at(offset, &mut b) {
                Ok(()) => newest.take(&b, copy_bytes, &accept),
                Err(_) => newest.unreadable(),
            }
        }
        newest
    }

    /// Write record `bytes` of `sequence` into the slot of the two at `offset` that the
    /// previous record is not in, on every current member (flushing each when `flush`).
    pub(crate) fn write_slot(
        &self,
        offset: u64,
        sequence: u64,
        bytes: &[u8],
        flush: bool,
    ) -> Result<(), EngineError> {
        for (i, e) in self.members.write_slot(offset, sequence, bytes, flush) {
            self.fail_member(i, &e)?;
        }
        Ok(())
    }
}

/// `v` as a stored member count, refused (naming `what`) past the member table's bound: checked
/// before narrowing, not wrapped into a valid-looking one.
fn count(v: usize, what: &str) -> Result<u16, EngineError> {
    u16::try_from(v)
        .ok()
        .filter(|&v| v <= stripeguard_format::MAX_MEMBERS)
        .ok_or_else(|| {
            EngineError::Config(format!(
                "{what} {v}: an array has at most {} members",
                stripeguard_format::MAX_MEMBERS
            ))
        })
}

/// Whether [`Array::create`] accepts `scheme` on `k` (at least 1) data chunks: checksum mirroring
/// keeps a copy of each chunk's checksum on a buddy data chunk, so it needs two or more. `create`
/// refuses any other shape through the superblock's own check, which asks the same rule
/// ([`Scheme::fits_data_chunks`]); callers that pick shapes (the campaigns) ask this.
pub fn create_accepts(k: usize, scheme: Scheme) -> bool {
    scheme.fits_data_chunks(k)
}

/// The superblock a new array on `members` gets from `cfg`: its geometry checked (member count,
/// sector size, journal slots, stripes that fit the smallest member, the member table's bound),
/// a fresh uuid from the environment.
fn new_superblock(cfg: &ArrayConfig, members: &[DiskRef]) -> Result<Superblock, EngineError> {
    let n = cfg.data_chunks + cfg.parity_chunks + cfg.scheme.extra_members();
    if members.len() != n {
        return Err(EngineError::Config(format!(
            "{} members given for k + m{} = {n}",
            members.len(),
            if cfg.scheme.extra_members() > 0 {
                " + the checksum member"
            } else {
                ""
            }
        )));
    }
    if cfg.sector_bytes != 512 && cfg.sector_bytes != 4096 {
        return Err(EngineError::Config(
            "sector size must be 512 or 4096".into(),
        ));
    }
    let unit = cfg.unit_bytes();
    let smallest = members.iter().map(|d| d.size_bytes()).min().unwrap_or(0);
    let layout = MetadataLayout::for_member(smallest);
    let data_offset = layout.data_offset();
    if cfg.write_journal && 2 * n > stripeguard_integrity::MAX_JOURNAL_SLOTS as usize {
        return Err(EngineError::Config(format!(
            "a write journal holds one stripe's units and saved chunks at once (twice the members) in at most {} slots: at most {} members, this array has {n}",
            stripeguard_integrity::MAX_JOURNAL_SLOTS,
            stripeguard_integrity::MAX_JOURNAL_SLOTS / 2
        )));
    }
    let slots = cfg.journal_slots().unwrap_or(layout.journal_slots());
    let journal = slots as u64 * (stripeguard_integrity::JOURNAL_HEADER_BYTES + unit);
    let fits = smallest.saturating_sub(data_offset).saturating_sub(journal) / unit.max(1);
    let stripes = cfg.stripes.unwrap_or(fits);
    if stripes == 0 || stripes > fits {
        let small = members
            .iter()
            .min_by_key(|d| d.size_bytes())
            .map(|d| d.name().to_string())
            .unwrap_or_default();
        return Err(EngineError::Config(format!(
            "{small} ({smallest} bytes) is too small for {} stripe(s) of {unit}-byte units after the {data_offset}-byte metadata area and the {journal}-byte journal ({slots} slots of a unit each)",
            stripes.max(1),
        )));
    }
    let uuid: [u8; 16] = crate::env::random(cfg.env.as_ref());
    let name = match &cfg.name {
        Some(n) => {
            stripeguard_integrity::check_name(n).map_err(EngineError::Config)?;
            n.clone()
        }
        None => default_name(&cfg.env.host().name, &uuid),
    };
    let sb = Superblock {
        name,
        array_uuid: uuid,
        member_index: 0,
        members: count(n, "members")?,
        data_chunks: count(cfg.data_chunks, "data chunks")?,
        parity_chunks: count(cfg.parity_chunks, "parity chunks")?,
        code: cfg.code,
        scheme: cfg.scheme,
        sector_shift: u8::try_from(cfg.sector_bytes.trailing_zeros()).expect("at most 32"),
        state: ArrayState::Clean,
        chunk_bytes: cfg.chunk_bytes,
        data_offset_bytes: data_offset,
        stripes,
        sequence_high_water: SEQUENCE_RESERVATION,
        generation: 1,
        created_unix_seconds: crate::env::unix_seconds(cfg.env.as_ref()),
        cross_check: cfg.cross_check,
        layout,
        journal_slots: slots,
        write_journal: cfg.write_journal,
        untrusted_listed: false,
        zero_stripes: cfg.zero_stripes,
        spares: Vec::new(),
        spare_policy: None,
        journal_devices: Vec::new(),
        journal_devices_lost: 0,
        reshape: None,
        member_table: vec![
            MemberSlot {
                state: MemberState::Active,
                device: 0,
                last_event: 1,
            };
            n
        ],
    };
    sb.validate().map_err(|e| {
        EngineError::Config(match e {
            stripeguard_integrity::SuperblockError::Geometry(why) => why.to_string(),
            other => other.to_string(),
        })
    })?;
    check_chunk_rows(cfg)?;
    Ok(sb)
}

/// A flush running (see [`Array::flush_running`]).
pub(crate) struct FlushRunning<'a>(
    &'a (std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64),
);

impl Drop for FlushRunning<'_> {
    fn drop(&mut self) {
        self.0 .1.fetch_add(1, Ordering::AcqRel);
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The labels of `cfg`'s journal devices for the array `sb` describes (FORMAT.md §2.12).
fn journal_labels(
    cfg: &ArrayConfig,
    sb: &Superblock,
) -> Result<Vec<stripeguard_format::JournalDeviceLabel>, EngineError> {
    let uuids: Vec<[u8; 16]> = cfg
        .journal_devices
        .iter()
        .map(|_| crate::env::random::<16>(cfg.env.as_ref()))
        .collect();
    crate::jdev::labels_for(&cfg.journal_devices, &uuids, sb).map_err(EngineError::Config)
}

/// `HOST-UUID8`: the host's name cut to what a name may hold, and the uuid's first 8 hex digits.
fn default_name(host: &str, uuid: &[u8; 16]) -> String {
    let host: String = host
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(stripeguard_integrity::MAX_NAME_BYTES - 9)
        .collect();
    let tail = stripeguard_format::hex(&uuid[..4]);
    let named = format!("{host}-{tail}");
    if stripeguard_integrity::check_name(&named).is_ok() {
        named
    } else {
        format!("array-{tail}")
    }
}

/// Lock every member (exclusively for a process that may write, shared for one that only
/// looks) before reading its superblock, so two writers never share an array. A member that
/// cannot be locked for another reason (unreadable, absent) is left to the superblock read.
pub(crate) fn lock_members(
    members: &[DiskRef],
    exclusive: bool,
    local: bool,
) -> Result<(), EngineError> {
    // Where flock does not cross hosts (NFS and the like) the owner record is the only guard.
    if !local {
        return Ok(());
    }
    for d in members {
        if let Err(e @ DiskError::Locked { .. }) = d.try_lock(exclusive) {
            return Err(e.into());
        }
    }
    Ok(())
}

/// The refusal of an array whose newest superblock says a reshape is in progress.
fn reshaping(sb: &Superblock) -> EngineError {
    let from = sb.reshape.expect("a reshape");
    EngineError::Assemble(format!(
        "a reshape of this array from {} members ({}+{}: data + parity chunks per stripe) to {} ({}+{}) is in progress or was interrupted (FORMAT.md §2, \"Reshaping the array\"): nothing else can use it until it finishes; run `stripeguard grow MEMBERS... --continue` with all {} members (every old one and every added one, in order)",
        from.members,
        from.data_chunks,
        from.parity_chunks,
        sb.members,
        sb.data_chunks,
        sb.parity_chunks,
        from.members.max(sb.members)
    ))
}

impl Drop for Array {
    fn drop(&mut self) {
        self.forget_ownership();
    }
}

/// An array code (RDP, Tier-code) cuts a chunk into rows: refuse a chunk size that is not a
/// whole number of them, suggesting the nearest one that also keeps 4 KiB checksum blocks.
fn check_chunk_rows(cfg: &ArrayConfig) -> Result<(), EngineError> {
    let code = stripeguard_codes::by_name(cfg.code.name(), cfg.data_chunks, cfg.parity_chunks)?;
    let rows = code.chunk_multiple() as u64;
    let chunk = cfg.chunk_bytes as u64;
    if chunk.is_multiple_of(rows) {
        return Ok(());
    }
    let step = num_lcm(rows * cfg.sector_bytes as u64, 4096);
    let near = (chunk.div_ceil(step) * step).clamp(
        step,
        stripeguard_integrity::MAX_CHUNK_BYTES as u64 / step * step,
    );
    Err(EngineError::Config(format!(
        "{} with {} data chunks cuts a chunk into {rows} rows, so the chunk size must be a multiple of {rows} bytes; {chunk} is not (try --chunk {}K: a multiple of {rows} sectors and of 4 KiB)",
        cfg.code.name(),
        cfg.data_chunks,
        near / 1024
    )))
}

fn num_lcm(a: u64, b: u64) -> u64 {
    a / num_gcd(a, b) * b
}

/// Greatest common divisor.
pub(crate) fn num_gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Write zeros over `len` bytes of `d` from `at`, 64 KiB at a time.
pub(crate) fn zero_range(d: &DiskRef, mut at: u64, len: u64) -> Result<(), EngineError> {
    let zeros = vec![0u8; 64 << 10];
    let end = at + len;
    while at < end {
        let n = usize_of((end - at).min(zeros.len() as u64));
        d.write_at(at, &zeros[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Unit layout of a member with superblock `sb`.
pub(crate) fn unit_map(sb: &Superblock) -> UnitMap {
    UnitMap {
        data_offset: sb.data_offset_bytes,
        unit_bytes: sb.unit_bytes(),
        sector_bytes: sb.sector_bytes() as u64,
        units: sb.stripes,
    }
}

/// The best valid superblock of a member.
pub fn read_superblock_of(d: &dyn stripeguard_disk::Disk) -> Result<Superblock, String> {
    read_superblock(d).map(|(sb, _)| sb)
}
