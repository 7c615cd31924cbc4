//! Reshaping the array in place (FORMAT.md §2, "Reshaping the array"; the order of the moves
//! and its proof against power cuts: `stripeguard_plan::reshape`): `j` added members become
//! data members, `k` data chunks per stripe becoming `k' = k + j` (the plan's forward
//! direction, md's critical section backed up on the added members), or a level change at the
//! same `k` — one added member becomes RAID-6's second parity, or RAID-6's last member leaves
//! a RAID-5 — by the backward direction: the data moves from the end into `δ` units of room
//! past it, the new data offset `D + δ·U`.
//!
//! Before anything moves, every chunk is read once through the writable array (damage
//! repaired in place; a stripe that cannot be read refuses the reshape while nothing is
//! half moved; blocks listed untrusted are read around and move listed). Then each step: its
//! chunks read (offline, the next step's while this one's are written), each new stripe
//! encoded and sealed, written whole, the members flushed, the checkpoint's progress written
//! (the step's commit). A continue trusts that progress only when it is the newest ever
//! written ([`progress_of`]).
//!
//! Two views of the same members run the reshape (view.rs: one sequence counter, the
//! reshape's superblocks, no event or intent bit of their own):
//! - the **old view**: the old geometry on the first `n` members. Offline an array built from
//!   the superblock, read-only (writable only to resync after an online run's crash); online
//!   the holder's own array (online.rs routes client requests to it). The reshape reads its
//!   chunks through it, so every read is checked as the scheme says and a unit found wrong is
//!   rebuilt from the stripe's redundancy — the reshape repairs, never copies;
//! - the **new view**: the new geometry on its `n'` members. The reshape encodes and seals
//!   each new stripe through it as a resync seals a settled stripe (fresh appendices for the
//!   new stripe and position) and writes it whole; online, clients write the committed new
//!   stripes through it.
//!
//! This module writes the superblocks and the checkpoint record itself, in the order
//! FORMAT.md gives, so a crash at any point is resumed by [`continue_reshape`]. Every other
//! command refuses an array with a reshape in progress (incompatible feature bit 6).

use crate::array::{
    lock_members, num_gcd, zero_range, Array, AssembleOptions, SEQUENCE_RESERVATION,
};
use crate::assembly::read_superblock;
use crate::error::EngineError;
use crate::num::{usize_of, MemberIx, Pos, StripeIx};
use crate::online::{HeldArray, Mode, Router};
use crate::view::{write_superblocks, View, ViewShared};
use std::ops::Range;
use std::sync::Arc;
use stripeguard_disk::{AlignedBuf, DiskRef};
use stripeguard_format::{
    ArrayState, Checkpoint, CodeId, EventKind, MemberSlot, MemberState, Record, ReshapeFrom,
    ReshapeProgress, Scheme, Superblock,
};
use stripeguard_integrity::{CHECKPOINT_OFFSET, INTENT_RECORD_OFFSET};
use stripeguard_plan::reshape::{Place, Reshape, Step};

/// New stripes written per step at most (one flush and one checkpoint write per step).
pub const RESHAPE_BATCH: u64 = 32;
/// The critical section's backup is held in memory while it is needed: at most this much.
const MAX_BACKUP_BYTES: u64 = 256 << 20;

/// What a reshape makes of the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReshapeTo {
    /// The added members become data members: `k` data chunks per stripe become `k + j`.
    AddData,
    /// RAID-5 (one xor parity) becomes RAID-6: the one added member holds the second parity,
    /// `k` stays (`grow --level 6`).
    Raid6,
    /// RAID-6 becomes RAID-5 (one xor parity) at the same `k`: the last member leaves the
    /// array, its superblock erased at the commit (`grow --level 5`).
    Raid5,
}

/// What a reshape did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reshaped {
    /// Members before and after.
    pub from_members: usize,
    pub to_members: usize,
    /// Data chunks per stripe before and after.
    pub from_data_chunks: usize,
    pub to_data_chunks: usize,
    /// Parity chunks per stripe before and after (a checksum-chunk array's checksum member is
    /// a member, not a parity chunk).
    #[serde(default)]
    pub from_parity_chunks: usize,
    #[serde(default)]
    pub to_parity_chunks: usize,
    /// User-visible bytes before and after.
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// New stripes that hold the data (`S'`; the rest of the array is empty).
    pub stripes_written: u64,
    /// Units the reshape's reads found wrong and repaired on the way (over every run).
    pub repaired: u64,
    /// The new stripes already committed when this run started (0 unless it resumed).
    pub resumed_at: u64,
}

impl Array {
    /// Whether a reshape `to` with `added` members would be refused, and why; nothing
    /// written.
    pub fn reshape_preflight(&self, added: &[DiskRef], to: ReshapeTo) -> Result<(), EngineError> {
        self.reshape_target(added, to).map(|_| ())
    }

    /// The new geometry's superblock and the order of the moves, or the refusal naming the
    /// constraint; nothing written.
    fn reshape_target(
        &self,
        added: &[DiskRef],
        to: ReshapeTo,
    ) -> Result<(Superblock, Reshape), EngineError> {
        let cfg = |s: String| Err(EngineError::Config(s));
        let sb = self.superblock();
        let g = self.geometry();
        if added.is_empty() && to != ReshapeTo::Raid5 {
            return cfg("--add names no member to add".into());
        }
        if !added.is_empty() && to == ReshapeTo::Raid5 {
            return cfg("--level 5 adds no member: the last member leaves the array".into());
        }
        if !self.is_writable() {
            return cfg("the array was assembled read-only".into());
        }
        if !sb.journal_devices.is_empty() {
            return cfg("arrays with journal devices do not reshape yet: `create` them without --journal-device, or copy the data to a new array".into());
        }
        if self.forced_any().load(std::sync::atomic::Ordering::Acquire) {
            return cfg("a forced assembly cannot reshape: resync it writable first".into());
        }
        let out: Vec<String> = self
            .member_table()
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                s.state != MemberState::Active || self.is_failed(crate::num::MemberIx::new(i))
            })
            .map(|(i, s)| format!("member {i} is {}", s.state.name()))
            .collect();
        if !out.is_empty() {
            return cfg(format!(
                "{}: replace it first (a reshape reads every chunk; a degraded one would leave two geometries and a member missing at once)",
                out.join(", ")
            ));
        }
        if let Some(c) = self.checkpoint() {
            if c.rebuild_member.is_some() && !c.rebuild_finished {
                return cfg(
                    "a replace has not finished: finish it first (`replace` resumes it)".into(),
                );
            }
        }
        let j = added.len();
        let (k, m) = (g.k, g.m);
        let (new_k, new_m, new_code) = match to {
            ReshapeTo::AddData => (k + j, m, sb.code),
            ReshapeTo::Raid6 => {
                if m != 1 || sb.code != CodeId::Xor {
                    return cfg(format!(
                        "--level 6 turns RAID-5 (one xor parity) into RAID-6; this array has {m} parity chunk(s) ({})",
                        sb.code.name()
                    ));
                }
                if j != 1 {
                    return cfg(format!(
                        "--level 6 adds one member, the second parity; {j} given"
                    ));
                }
                (k, 2, CodeId::Raid6)
            }
            ReshapeTo::Raid5 => {
                if m != 2 {
                    return cfg(format!(
                        "--level 5 turns RAID-6 (two parity chunks) into RAID-5 (one xor parity); this array has {m} parity chunk(s) ({})",
                        sb.code.name()
                    ));
                }
                (k, 1, CodeId::Xor)
            }
        };
        let n = self.members().len();
        let new_n = if to == ReshapeTo::Raid5 { n - 1 } else { n + j };
        if sb.write_journal && new_n > 32 {
            return cfg(format!(
                "the write journal is limited to 32 members; {new_n} asked for"
            ));
        }
        let code = stripeguard_codes::by_name(new_code.name(), new_k, new_m).map_err(|e| {
            EngineError::Config(format!("{} with {new_k} data chunks: {e}", new_code.name()))
        })?;
        let rows = code.chunk_multiple() as u64;
        if !u64::from(sb.chunk_bytes).is_multiple_of(rows) {
            return cfg(format!(
                "{} with {new_k} data chunks cuts a chunk into {rows} rows, and the chunk of {} bytes is not a multiple of them",
                new_code.name(),
                sb.chunk_bytes
            ));
        }
        // A level change moves the data from the end into spare stripes past it (the plan's
        // backward direction): the new stripe 0 lies δ units further in, δ·U a multiple of
        // 4096 (the data offset's alignment), at most 32 (a step is at most δ stripes).
        let offset_stripes = match to {
            ReshapeTo::AddData => 0,
            ReshapeTo::Raid6 | ReshapeTo::Raid5 => {
                let u = sb.unit_bytes();
                let align = 4096 / num_gcd(u, 4096);
                // The members that stay, and the added one.
                let (fits, tightest) = MemberIx::upto(n.min(new_n))
                    .map(|i| self.members().get(i))
                    .chain(added.iter().cloned())
                    .map(|d| (sb.units_that_fit(d.measure_size()), d.name().to_string()))
                    .min()
                    .unwrap_or((0, String::new()));
                let room = fits.saturating_sub(sb.stripes);
                let delta = room.min(RESHAPE_BATCH) / align * align;
                if delta == 0 {
                    return cfg(format!(
                        "a level change writes the new stripes into room past the data first: every member needs room for {align} more stripe(s) ({} more bytes each, without `grow --size`, which would use it); {tightest} has room for {room}",
                        align * u
                    ));
                }
                delta
            }
        };
        let mut new = sb.clone();
        new.members = crate::num::index_u16(new_n);
        new.data_chunks = crate::num::index_u16(new_k);
        new.parity_chunks = crate::num::index_u16(new_m);
        new.code = new_code;
        new.data_offset_bytes = sb.data_offset_bytes + offset_stripes * sb.unit_bytes();
        new.reshape = Some(ReshapeFrom {
            members: sb.members,
            data_chunks: sb.data_chunks,
            parity_chunks: sb.parity_chunks,
            code: sb.code,
            offset_stripes: u32::try_from(offset_stripes).expect("at most 32"),
            // Named for real when the reshape starts.
            id: 1,
        });
        new.member_table = vec![
            MemberSlot {
                state: MemberState::Active,
                device: 0,
                last_event: 0,
            };
            new_n
        ];
        for (slot, old) in new.member_table.iter_mut().zip(sb.member_table.iter()) {
            slot.device = old.device;
        }
        new.validate()
            .map_err(|e| EngineError::Config(format!("the new geometry is not possible: {e}")))?;
        if new.unit_bytes() != sb.unit_bytes() {
            return cfg(format!(
                "with {new_k} data chunks a unit's appendix needs {} bytes instead of {}: units would move, which an in-place reshape cannot do (use a larger chunk at create)",
                new.appendix_bytes(),
                sb.appendix_bytes()
            ));
        }
        let need = new.member_bytes();
        for d in added {
            if d.size_bytes() < need {
                return cfg(format!(
                    "{} holds {} bytes; every member of this array needs {need}",
                    d.name(),
                    d.size_bytes()
                ));
            }
        }
        let plan = plan_of(&new)?;
        Ok((new, plan))
    }

    /// Read every chunk of the array through the normal read path (damage repaired), refusing
    /// at the first stripe that cannot be read, named with what to do.
    fn check_readable(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<(), EngineError> {
        let g = self.geometry();
        let step = g.stripe_data_bytes() * RESHAPE_BATCH;
        let total = self.capacity_bytes();
        let mut buf = vec![0u8; usize_of(step)];
        let mut at = 0;
        while at < total {
            let len = (total - at).min(step);
            match self.read(at, &mut buf[..usize_of(len)]) {
                Ok(()) => {}
                // Blocks listed untrusted move listed (`carry_listed`): read around them.
                Err(EngineError::Unrecoverable { .. })
                    if !self.untrusted_set().all().is_empty()
                        && read_around_listed(
                            self,
                            at / g.chunk_bytes..(at + len) / g.chunk_bytes,
                            &mut buf,
                        )
                        .is_ok() => {}
                Err(EngineError::Unrecoverable { stripe, reason }) => {
                    return Err(EngineError::Config(format!(
                        "stripe {stripe} cannot be read ({reason}): a reshape would stop there with the data half moved, so none starts; `status --check` lists every such stripe, and `read --skip-unrecoverable` saves what is left of it before it is rewritten or cleared"
                    )))
                }
                Err(e) => return Err(e),
            }
            at += len;
            progress(at / g.stripe_data_bytes(), g.stripes);
        }
        Ok(())
    }

    /// Add `added` as data members, or (`to`) as RAID-6's second parity (FORMAT.md §2,
    /// "Reshaping the array"), offline: the array is
    /// read whole first (a stripe that cannot be read refuses the reshape before anything
    /// moves), closed, the data moved into the new geometry, and the array assembled again to
    /// log the end. `added` must be opened and locked by the caller (as every member); the
    /// members stay locked through their handles. `progress(done, total)` counts new stripes.
    pub fn reshape(
        self,
        added: Vec<DiskRef>,
        to: ReshapeTo,
        opts: &AssembleOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Reshaped, EngineError> {
        let (mut new, plan) = match self.reshape_target(&added, to) {
            Ok(t) => t,
            Err(e) => {
                // Refused before anything is written: closed as any command ends.
                let _ = self.close();
                return Err(e);
            }
        };
        // Every chunk is read once before anything moves (damage met is repaired in place, as
        // any writable read does): a stripe that cannot be read would otherwise stop the
        // reshape with the data half moved, and no command could read the array until it was
        // finished.
        let before = self.counters().repaired;
        if let Err(e) = self.check_readable(progress) {
            let _ = self.close();
            return Err(e);
        }
        let repaired = self.counters().repaired - before;
        let prev = self.checkpoint().unwrap_or_default();
        lock_members(&added, true, opts.local_locks)?;
        let mut members: Vec<DiskRef> = self.members().all();
        let old_members = members.len();
        let sb_journal = self.superblock().journal_offset();
        // 1. As at the end of any command: every write durable, every intent bit clear, every
        // journal slot free, the superblocks clean.
        self.close()?;
        // Above every superblock the close wrote, and past every sequence number it reserved.
        above_written(&members, &mut new);
        members.extend(added);
        begin(
            &members,
            old_members,
            sb_journal,
            &mut new,
            &plan,
            Begin {
                prev,
                repaired,
                online: false,
            },
            opts,
        )?;
        run(members, new, plan, opts, progress)
    }
}

/// Give `new` an event count above every superblock on `members` and a high-water mark past
/// every sequence number they reserved.
fn above_written(members: &[DiskRef], new: &mut Superblock) {
    let written: Vec<Superblock> = members
        .iter()
        .filter_map(|d| read_superblock(d.as_ref()).ok().map(|(sb, _)| sb))
        .collect();
    new.generation = written.iter().map(|sb| sb.generation).max().unwrap_or(0) + 1;
    new.sequence_high_water = written
        .iter()
        .map(|sb| sb.sequence_high_water)
        .max()
        .unwrap_or(0)
        .max(new.sequence_high_water);
}

/// What [`begin`] records in the first progress record.
struct Begin {
    /// The checkpoint record as it was (its scrub and rebuild parts are kept).
    prev: Checkpoint,
    /// What the read before the start repaired.
    repaired: u64,
    online: bool,
}

/// Start the reshape to `new` on `members` (the first `old_members` the array's, every write
/// of the old geometry durable and its intent record clear; `new`'s generation and
/// high-water mark above every superblock written): the added members' metadata area, the
/// journal slot headers where the new geometry has them, this reshape's id and first progress
/// record, then the superblocks with bit 6 (the added members first).
fn begin(
    members: &[DiskRef],
    old_members: usize,
    sb_journal: u64,
    new: &mut Superblock,
    plan: &Reshape,
    b: Begin,
    opts: &AssembleOptions,
) -> Result<(), EngineError> {
    new.state = ArrayState::Dirty;
    let slot_bytes = new.journal_slot_bytes();
    // The added members' metadata area, and every member's journal slot headers where the
    // new geometry has them (past the old data: a level change moves them δ units on).
    for (i, d) in members.iter().enumerate().take(usize::from(new.members)) {
        if i >= old_members {
            zero_range(d, 0, new.data_offset_bytes)?;
        } else if new.journal_offset() == sb_journal {
            continue;
        }
        for s in 0..u64::from(new.journal_slots) {
            let at = new.journal_offset() + s * slot_bytes;
            zero_range(d, at, stripeguard_format::JOURNAL_HEADER_BYTES)?;
        }
        d.flush()?;
    }
    new.sequence_high_water = reserve_sequences(new, plan.new_stripes);
    // This reshape's name, and its first progress record, written before any superblock
    // names the reshape: a run that finds no record of this id knows the record is lost.
    let id = loop {
        let id = u32::from_le_bytes(crate::env::random(opts.env.as_ref()));
        if id != 0 {
            break id;
        }
    };
    if let Some(r) = new.reshape.as_mut() {
        r.id = id;
    }
    let first = Checkpoint {
        sequence: b.prev.sequence + 1,
        reshape: Some(ReshapeProgress {
            id,
            stripes: plan.new_stripes,
            started_unix: crate::env::unix_seconds(opts.env.as_ref()),
            repaired: b.repaired,
            online: b.online,
            ..ReshapeProgress::default()
        }),
        ..b.prev
    };
    let bytes = first
        .to_copy(stripeguard_format::checkpoint::CHECKPOINT_SLOT_BYTES)
        .expect("a checkpoint fits its slot");
    let at = CHECKPOINT_OFFSET + stripeguard_format::slot_offset(first.sequence, bytes.len());
    for d in members {
        d.write_at(at, &bytes)?;
        d.flush()?;
    }
    write_superblocks(members, new, true)
}

/// Resume the reshape of the array on `members` (every member, old and added, in index
/// order) from where its checkpoint record says, and finish it.
pub fn continue_reshape(
    members: Vec<DiskRef>,
    opts: &AssembleOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Reshaped, EngineError> {
    lock_members(&members, true, opts.local_locks)?;
    let found: Vec<Result<Superblock, String>> = members
        .iter()
        .map(|d| read_superblock(d.as_ref()).map(|(sb, _)| sb))
        .collect();
    let Some(mut new) = found
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .filter(|sb| sb.reshape.is_some())
        .max_by_key(|sb| sb.generation)
        .cloned()
    else {
        return Err(EngineError::Config(
            "no reshape is in progress on these members (nothing to continue)".into(),
        ));
    };
    let from = new.reshape.expect("filtered");
    if let Some(done) = found
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .filter(|sb| sb.array_uuid == new.array_uuid && sb.generation > new.generation)
        .find(|sb| sb.reshape.is_none())
    {
        // Committed: a crash came among the commit's superblock writes (an assembly takes
        // the newest and brings the others level). Only the event is left to log.
        let _ = done;
        let (array, summary) = finished(members, &new, opts, None, None)?;
        array.close()?;
        return Ok(summary);
    }
    let all = new.members.max(from.members);
    if members.len() != usize::from(all) {
        return Err(EngineError::Config(format!(
            "the reshape is onto {} members{}; {} given (give every member, old and added, in order)",
            new.members,
            if from.members > new.members {
                format!(" from {}", from.members)
            } else {
                String::new()
            },
            members.len()
        )));
    }
    // The start writes the added members' superblocks before the old ones': while an old
    // member still trails, nothing has moved, and an added member the start did not reach yet
    // (no superblock) is taken as it is (its superblock is written again below).
    let started =
        (0..usize::from(from.members)).all(|i| matches!(&found[i], Ok(sb) if sb.reshape.is_some()));
    for (i, (d, f)) in members.iter().zip(&found).enumerate() {
        let why = match f {
            Err(_) if !started && i >= usize::from(from.members) => None,
            Err(e) => Some(e.clone()),
            Ok(sb) if sb.array_uuid != new.array_uuid => Some(format!(
                "it belongs to array {}",
                stripeguard_format::hex(&sb.array_uuid)
            )),
            Ok(sb) if usize::from(sb.member_index) != i => {
                Some(format!("its superblock names member {}", sb.member_index))
            }
            Ok(sb) if sb.generation > new.generation => Some(format!(
                "its superblock (event count {}) is newer than the reshape's ({})",
                sb.generation, new.generation
            )),
            // An old member may trail from an interrupted start; an added one never had
            // another superblock of this array.
            Ok(sb) if sb.reshape.is_none() && i >= usize::from(from.members) => {
                Some("it is an added member without the reshape's superblock".into())
            }
            Ok(_) => None,
        };
        if let Some(why) = why {
            return Err(EngineError::Assemble(format!(
                "{} is not member {i} of the array being reshaped ({}): {why}",
                d.name(),
                stripeguard_format::hex(&new.array_uuid),
            )));
        }
        // The member a level change down lets go needs only the old geometry's room.
        let needs = if i < usize::from(new.members) {
            new.member_bytes()
        } else {
            old_superblock(&new).member_bytes()
        };
        if d.size_bytes() < needs {
            return Err(EngineError::Assemble(format!(
                "{} holds {} bytes; it needs {needs}",
                d.name(),
                d.size_bytes(),
            )));
        }
    }
    let plan = plan_of(&new)?;
    new.generation += 1;
    new.state = ArrayState::Dirty;
    new.sequence_high_water = reserve_sequences(&new, plan.new_stripes);
    write_superblocks(&members, &new, true)?;
    run(members, new, plan, opts, progress)
}

/// The order of the moves for the reshape `new` describes.
fn plan_of(new: &Superblock) -> Result<Reshape, EngineError> {
    let from = new
        .reshape
        .ok_or_else(|| EngineError::Config("no reshape".into()))?;
    let plan = Reshape::plan(
        u64::from(from.data_chunks),
        u64::from(new.data_chunks),
        new.stripes,
        new.stripes + u64::from(from.offset_stripes),
    )
    .map_err(EngineError::Config)?;
    let j = u64::from(new.members.saturating_sub(from.members));
    let room = new.stripes.saturating_sub(plan.new_stripes) * j;
    if plan.backup_chunks > room {
        return Err(EngineError::Config(format!(
            "the reshape's critical section ({} chunks) needs a backup on the added members past the new data, and they have room for {room}: the array is too small to reshape this way (add more members at once)",
            plan.backup_chunks
        )));
    }
    if plan.backup_chunks * u64::from(new.chunk_bytes) > MAX_BACKUP_BYTES {
        return Err(EngineError::Config(format!(
            "the reshape's critical section ({} chunks of {} bytes) is over 256 MiB: add more members at once, or use a smaller chunk",
            plan.backup_chunks, new.chunk_bytes
        )));
    }
    Ok(plan)
}

/// The high-water mark that covers every sequence number a run of the reshape can use (one per
/// new stripe, and those a resync-style seal of the stripes past the data takes none of):
/// the run uses the numbers from `new`'s current mark up.
fn reserve_sequences(new: &Superblock, new_stripes: u64) -> u64 {
    new.sequence_high_water
        .saturating_add(new_stripes)
        .saturating_add(SEQUENCE_RESERVATION)
}

/// The old geometry of a reshape's superblock `new`, as the first `n` members hold it.
fn old_superblock(new: &Superblock) -> Superblock {
    let from = new.reshape.expect("a reshape");
    let mut old = new.clone();
    old.reshape = None;
    old.members = from.members;
    old.data_chunks = from.data_chunks;
    old.parity_chunks = from.parity_chunks;
    old.code = from.code;
    old.data_offset_bytes -= u64::from(from.offset_stripes) * new.unit_bytes();
    // A level change down: the member that leaves is the old geometry's last.
    let last = old.member_table.last().copied();
    old.member_table.resize(
        usize::from(from.members),
        last.unwrap_or(MemberSlot {
            state: MemberState::Active,
            device: 0,
            last_event: 0,
        }),
    );
    old
}

/// One run of a reshape whose start (superblocks with bit 6) is durable: the steps from the
/// checkpoint's `done`, the finish, the commit, and the `reshaped` event.
fn run(
    members: Vec<DiskRef>,
    new: Superblock,
    plan: Reshape,
    opts: &AssembleOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Reshaped, EngineError> {
    let (record, now) = progress_of(&members, &new, &plan)?;
    let mut old_sb = old_superblock(&new);
    // The reshape's untrusted flag covers both geometries (a block the new one listed, in
    // memory until the finish, may be all it stands for): the old record is read for what it
    // lists, not required by it.
    old_sb.untrusted_listed = false;
    let n_old = usize::from(old_sb.members);
    // Writable only to resync what an online run's clients may have left half written.
    let mut old = Array::from_parts(
        old_sb.clone(),
        members[..n_old].to_vec(),
        now.online,
        opts.first_read_map_bytes,
        crate::env::EnvRef::clone(&opts.env),
    )?;
    old.sabotage = opts.sabotage;
    old.load_untrusted()?;
    let views = Views::with_old(Arc::new(old), &members, &new, &plan, opts)?;
    let ran = move_all(&views, &members, &plan, (record, now), None, progress)?;
    drop(views);
    let (array, summary) = finished(members, &new, opts, Some(ran), None)?;
    array.close()?;
    Ok(summary)
}

/// The two views of a reshape (view.rs).
struct Views {
    old: Arc<Array>,
    target: Arc<Array>,
    target_view: View,
    shared: Arc<ViewShared>,
}

impl Views {
    /// `old` (the old geometry's array on the first members) and the new geometry's on
    /// `members`, as views of the reshape `new` (its sequence numbers from those the
    /// superblocks reserve for a run).
    fn with_old(
        old: Arc<Array>,
        members: &[DiskRef],
        new: &Superblock,
        plan: &Reshape,
        opts: &AssembleOptions,
    ) -> Result<Views, EngineError> {
        let target = Array::from_parts(
            new.clone(),
            members[..usize::from(new.members)].to_vec(),
            true,
            opts.first_read_map_bytes,
            crate::env::EnvRef::clone(&opts.env),
        )?;
        let shared = ViewShared::new(
            members.to_vec(),
            new.clone(),
            new.sequence_high_water
                .saturating_sub(plan.new_stripes)
                .saturating_sub(SEQUENCE_RESERVATION),
            SEQUENCE_RESERVATION,
        );
        // The old view writes the stripe-state record only while it serves clients (online):
        // its zero stripes written into leave it at their flush.
        old.set_view(Some(View::new(&shared, old.is_writable())));
        let target_view = View::new(&shared, false);
        target.set_view(Some(target_view.clone()));
        Ok(Views {
            old,
            target: Arc::new(target),
            target_view,
            shared,
        })
    }
}

/// The steps from the checkpoint's progress (`at`), the finish and the commit (the new
/// superblocks). `route`: clients read and write through both views meanwhile (online.rs).
fn move_all(
    views: &Views,
    members: &[DiskRef],
    plan: &Reshape,
    at: (Checkpoint, ReshapeProgress),
    route: Option<&Router>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Ran, EngineError> {
    let (old, target) = (&*views.old, &*views.target);
    let from_bytes = old.capacity_bytes();
    // Members, not data and parity positions: a checksum-chunk array's checksum member is one
    // more (the last), and the added members come after it.
    let n_old = old.members().len();
    let mut mover = Mover {
        old,
        target,
        plan,
        chunk: usize_of(target.geometry().chunk_bytes),
        added: n_old..members.len(),
        record: at.0,
        progress: at.1,
        backup: None,
        online: route.is_some(),
    };
    let resumed_at = mover.progress.done;
    if mover.progress.online
        && route.is_none()
        && !mover.progress.finishing
        && !old.sabotaged(crate::env::Sabotage::SkippedReshapeResync)
    {
        // An online run's clients wrote without write-intent bits: every stripe of both
        // geometries is made consistent before anything more moves.
        resync_after_online(&mover)?;
        mover.progress.online = false;
    }
    mover.progress.online |= route.is_some();
    if !mover.progress.finishing {
        // What moved listed in an earlier run is listed in memory again (the old record,
        // which the finish replaces, still says it).
        let c = plan.committed(mover.progress.done);
        mover.carry_listed(c.start * plan.new_k..c.end * plan.new_k)?;
    }
    // Before anything moves, this run's progress goes into the other slot too: from here on
    // both slots hold this reshape's records, which `progress_of` relies on.
    if !mover.progress.finished {
        mover.commit()?;
    }
    // Offline, the next step's chunks are read while this one's are written (they are in old
    // stripes this step does not overwrite: the plan's rule), on a thread of its own where the
    // environment allows one (not in a simulation). Online, clients write them
    // until the step's window takes them: read in the step.
    std::thread::scope(|scope| -> Result<(), EngineError> {
        let mut ahead: Option<(Range<u64>, std::thread::ScopedJoinHandle<'_, AheadRead>)> = None;
        loop {
            let p = &mover.progress;
            let backed_up = p.backed_up;
            match plan.next(p.done, backed_up, RESHAPE_BATCH) {
                Step::Done => break,
                Step::Backup(chunks) => {
                    if let Some(r) = route {
                        r.open_window(0..chunks);
                    }
                    mover.back_up(chunks)?;
                }
                Step::Write(r) => {
                    if let Some(rt) = route {
                        rt.open_window(window(plan, &r, &mover.progress));
                    }
                    let got = ahead.take().map(|(chunks, h)| {
                        let read = h.join().unwrap_or_else(|_| {
                            Err(EngineError::Config("a reshape read thread panicked".into()))
                        });
                        (chunks, read)
                    });
                    let data = mover.gather(&r, got)?;
                    if route.is_none() && old.env().own_threads() {
                        if let Some(next) = read_ahead(plan, done_after(plan, &r), backed_up) {
                            let c = mover.chunk;
                            let chunks = next.clone();
                            ahead =
                                Some((next, scope.spawn(move || read_old(old, plan, c, chunks))));
                        }
                    }
                    mover.write(r, &data)?;
                    if let Some(rt) = route {
                        // The critical section's chunks the backup still stands for stay in
                        // the window: a client write there would be lost to the backup copy.
                        let p = &mover.progress;
                        let lo = p.done * plan.new_k;
                        let keep = (!plan.backward && p.backed_up && lo < p.backup_chunks)
                            .then_some(lo..p.backup_chunks);
                        rt.advance(p.done, keep);
                    }
                }
            }
            // Online, only between steps that leave no window (a caller's progress may be
            // what would wait for it).
            if route.is_none_or(|r| !r.window_held()) {
                progress(mover.progress.done, plan.new_stripes);
            }
        }
        Ok(())
    })?;
    if let Some(r) = route {
        r.begin_finish();
    }
    views.target_view.set_keeps_record(true);
    // Online, the finish holds every request: its progress is not reported (a caller's
    // progress may be what waits for one).
    let mut quiet = |_, _| {};
    mover.finish(if route.is_some() {
        &mut quiet
    } else {
        progress
    })?;
    // The commit: the new geometry, without bit 6.
    let mut done_sb = views.shared.superblock();
    done_sb.reshape = None;
    done_sb.state = ArrayState::Clean;
    done_sb.generation += 1;
    views.shared.commit(&done_sb)?;
    Ok(Ran {
        from_bytes,
        repaired: mover.progress.repaired,
        resumed_at,
    })
}

/// The chunks step `r` must have to itself while it runs: its own, and while the critical
/// section's backup is still to be written into new stripes, the section's.
fn window(plan: &Reshape, r: &Range<u64>, p: &ReshapeProgress) -> Range<u64> {
    let (lo, hi) = (r.start * plan.new_k, r.end * plan.new_k);
    if plan.backward {
        return lo..hi;
    }
    let backup_end = if p.backed_up && lo < p.backup_chunks {
        p.backup_chunks
    } else {
        0
    };
    lo..hi.max(backup_end)
}

/// Every stripe of both geometries that holds data, made consistent as after an unclean
/// shutdown (an online run's clients wrote without write-intent bits): the committed new
/// stripes not listed as zero, and the old stripes whose chunks are still to move (not
/// those the critical section's backup stands in for).
fn resync_after_online(m: &Mover<'_>) -> Result<(), EngineError> {
    let (plan, p) = (m.plan, &m.progress);
    let committed = plan.committed(p.done);
    let listed = |t: u64| p.zero.iter().any(|&(lo, hi)| lo <= t && t < hi);
    m.target
        .resync_stripes(committed.clone().filter(|&t| !listed(t)).map(StripeIx::new))?;
    let k = plan.old_k;
    let unmoved: Range<u64> = if plan.backward {
        // Same `k`: old stripe `t` holds new stripe `t`'s chunks.
        0..committed.start
    } else {
        let first = (p.done * plan.new_k).max(if p.backed_up { p.backup_chunks } else { 0 });
        first / k..plan.old_stripes
    };
    m.old.resync_stripes(unmoved.map(StripeIx::new))?;
    m.target.flush_members()
}

/// Reshape the array `held` serves while it serves it (online.rs): like [`Array::reshape`],
/// with clients reading and writing through both geometries meanwhile. Ends with `held`
/// serving the new geometry's array; a reshape that stops on an error leaves it serving
/// through both (`grow --continue` finishes it once the holder has stopped).
/// `prepare` is given the new geometry's array before it logs the `reshaped` event and takes
/// the requests (the holder's event listener and appendix cache).
pub fn reshape_online(
    held: &HeldArray,
    added: Vec<DiskRef>,
    to: ReshapeTo,
    opts: &AssembleOptions,
    prepare: &dyn Fn(&Array),
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Reshaped, EngineError> {
    let Mode::Plain(array) = held.mode() else {
        return Err(EngineError::Config(
            "a reshape is in progress in this holder already".into(),
        ));
    };
    let (mut new, plan) = array.reshape_target(&added, to)?;
    if array.sb().write_journal {
        return Err(EngineError::Config(
            "an array with the write journal reshapes offline (its journal slots would serve both geometries at once): stop the holder and run `grow --add` on the members".into(),
        ));
    }
    let before = array.counters().repaired;
    array.check_readable(progress)?;
    let repaired = array.counters().repaired - before;
    lock_members(&added, true, opts.local_locks)?;
    let mut members: Vec<DiskRef> = array.members().all();
    let old_members = members.len();
    members.extend(added);
    // Every request in flight ends, the array is flushed as at a close (every write durable,
    // every intent bit clear), the reshape begins and the router takes the requests.
    let (views, at, router) = held.switch(|_| {
        array.flush_and_clear(true)?;
        let prev = array.checkpoint().unwrap_or_default();
        above_written(&members[..old_members], &mut new);
        let sb_journal = array.superblock().journal_offset();
        begin(
            &members,
            old_members,
            sb_journal,
            &mut new,
            &plan,
            Begin {
                prev,
                repaired,
                online: true,
            },
            opts,
        )?;
        let at = progress_of(&members, &new, &plan)?;
        let views = Views::with_old(Arc::clone(&array), &members, &new, &plan, opts)?;
        let router = Arc::new(Router::new(
            Arc::clone(&views.old),
            Arc::clone(&views.target),
            Arc::clone(&views.shared),
            plan.clone(),
            at.1.done,
        ));
        Ok(((views, at, Arc::clone(&router)), Mode::Reshaping(router)))
    })?;
    let ran = match move_all(&views, &members, &plan, at, Some(&router), progress) {
        Ok(ran) => ran,
        Err(e) => {
            router.stop(e.to_string());
            return Err(e);
        }
    };
    // Committed. The holder's array (the old view) lets the members go; the new geometry's
    // is assembled and takes the requests that waited.
    let out = held.switch(|_| {
        views.old.release_ownership()?;
        let (array, summary) = finished(members.clone(), &new, opts, Some(ran), Some(prepare))?;
        for view in [&views.old, &views.target] {
            for (_, _, e) in view.take_unsaved() {
                array.log_event(e);
            }
        }
        Ok((summary, Mode::Plain(Arc::new(array))))
    });
    match out {
        Ok(summary) => {
            router.end();
            Ok(summary)
        }
        Err(e) => {
            router.stop(e.to_string());
            Err(e)
        }
    }
}

/// What one run did (see [`finished`]).
struct Ran {
    from_bytes: u64,
    repaired: u64,
    resumed_at: u64,
}

/// After the commit: assemble the array in its new geometry and log the `reshaped` event.
/// `ran`: this run's counts (`None`: the commit was found made, by an earlier run).
fn finished(
    members: Vec<DiskRef>,
    new: &Superblock,
    opts: &AssembleOptions,
    ran: Option<Ran>,
    prepare: Option<&dyn Fn(&Array)>,
) -> Result<(Array, Reshaped), EngineError> {
    let old_sb = old_superblock(new);
    let n_old = usize::from(old_sb.members);
    let writable = AssembleOptions {
        writable: true,
        ..opts.clone()
    };
    let mut members = members;
    // A level change down: the member that left loses its superblock (the commit erased it,
    // unless a crash came first).
    for d in members.iter().skip(usize::from(new.members)) {
        if read_superblock(d.as_ref()).is_ok_and(|(sb, _)| sb.array_uuid == new.array_uuid) {
            crate::view::erase_superblock(d)?;
        }
    }
    members.truncate(usize::from(new.members));
    let array = Array::assemble(members, &writable)?;
    if let Some(prepare) = prepare {
        prepare(&array);
    }
    let progress = array
        .checkpoint()
        .and_then(|c| c.reshape)
        .unwrap_or_default();
    let ran = ran.unwrap_or(Ran {
        // The old capacity, as the old geometry had it.
        from_bytes: old_sb.stripes * u64::from(old_sb.data_chunks) * u64::from(old_sb.chunk_bytes),
        repaired: progress.repaired,
        resumed_at: progress.done,
    });
    let summary = Reshaped {
        from_members: n_old,
        to_members: usize::from(new.members),
        from_data_chunks: usize::from(old_sb.data_chunks),
        to_data_chunks: usize::from(new.data_chunks),
        from_parity_chunks: usize::from(old_sb.parity_chunks),
        to_parity_chunks: usize::from(new.parity_chunks),
        from_bytes: ran.from_bytes,
        to_bytes: array.capacity_bytes(),
        stripes_written: progress.stripes,
        repaired: ran.repaired,
        resumed_at: ran.resumed_at,
    };
    array.note(
        EventKind::Reshaped,
        None,
        format!(
            "reshaped from {} to {} members ({} to {} data chunks per stripe, {} to {} bytes); {} damaged unit(s) repaired on the way{}",
            summary.from_members,
            summary.to_members,
            summary.from_data_chunks,
            summary.to_data_chunks,
            summary.from_bytes,
            summary.to_bytes,
            summary.repaired,
            if ran.resumed_at > 0 {
                format!(", continued at new stripe {}", ran.resumed_at)
            } else {
                String::new()
            }
        ),
    );
    Ok((array, summary))
}

/// The newest checkpoint record on `members` and this reshape's progress in it, refused when
/// it cannot be trusted: a reshape resumed from an older record than the newest written would
/// copy again from old stripes a later step has overwritten. A power cut tears at most the
/// copy in flight (the members are written one after another), so a damaged copy on more than
/// one member, no record of this reshape's id, or progress past its end is refused.
fn progress_of(
    members: &[DiskRef],
    new: &Superblock,
    plan: &Reshape,
) -> Result<(Checkpoint, ReshapeProgress), EngineError> {
    use stripeguard_format::checkpoint::CHECKPOINT_SLOT_BYTES as SLOT;
    let id = new.reshape.map_or(0, |r| r.id);
    let mut newest: Option<Checkpoint> = None;
    let mut damaged = Vec::new();
    let ours = |c: &Checkpoint| c.reshape.as_ref().is_some_and(|p| p.id == id);
    for d in members {
        let mut b = vec![0u8; 2 * SLOT];
        let read = d.read_at(CHECKPOINT_OFFSET, &mut b);
        let mut bad = read.is_err();
        let mut copies: Vec<Checkpoint> = Vec::new();
        for copy in b.chunks_exact(SLOT).filter(|_| read.is_ok()) {
            match Checkpoint::read_copy(copy) {
                Ok(Some(c)) => copies.push(c),
                Ok(None) => {}
                Err(_) => bad = true,
            }
        }
        // Every member got this reshape's first record before any superblock named it, and
        // from its second commit on both slots hold its records (they alternate): a member
        // without one, or whose newest has moved data while the other slot holds none of
        // this reshape (erased: an empty slot is never what a torn write leaves over a
        // record), has lost records.
        let mine: Vec<&Checkpoint> = copies.iter().filter(|c| ours(c)).collect();
        let moved = mine
            .iter()
            .max_by_key(|c| c.sequence)
            .and_then(|c| c.reshape.as_ref())
            .is_some_and(|p| p.done > 0 || p.backed_up || p.finishing);
        if mine.is_empty() || (moved && mine.len() < 2) {
            bad = true;
        }
        for c in copies {
            if newest.as_ref().is_none_or(|n| c.sequence > n.sequence) {
                newest = Some(c);
            }
        }
        if bad {
            damaged.push(d.name().to_string());
        }
    }
    let lost = |why: String| {
        Err(EngineError::Assemble(format!(
            "the reshape's progress cannot be trusted: {why}; continuing could copy chunks from old stripes a later step has overwritten, so it is refused (FORMAT.md §2, \"Reshaping the array\"). The data is in place but no command can read it safely"
        )))
    };
    if damaged.len() > 1 {
        return lost(format!(
            "the checkpoint record (FORMAT.md §2.3) is damaged or missing copies of this reshape on {} members ({}), more than a power cut leaves",
            damaged.len(),
            damaged.join(", ")
        ));
    }
    let record = newest.unwrap_or_default();
    let progress = match record.reshape.clone() {
        Some(p) if p.id == id => p,
        other => {
            return lost(format!(
                "the newest checkpoint record holds {} instead of this reshape's (id {id:08x}), which was written before the superblocks named it",
                match other {
                    Some(p) => format!("the progress of another reshape (id {:08x})", p.id),
                    None => "no reshape progress".into(),
                }
            ))
        }
    };
    if progress.stripes != plan.new_stripes || progress.done > progress.stripes {
        return lost(format!(
            "the checkpoint says {} of {} new stripes moved, but this reshape has {}",
            progress.done, progress.stripes, plan.new_stripes
        ));
    }
    Ok((record, progress))
}

/// Chunks read ahead, and what it found (see [`read_old`]).
type AheadRead = Result<(Vec<u8>, u64), EngineError>;
/// The chunk range read ahead, and the read.
type Ahead = (Range<u64>, AheadRead);

/// The new stripes committed once step `r` is (adding data members moves from the start,
/// a level change from the end).
fn done_after(plan: &Reshape, r: &Range<u64>) -> u64 {
    if plan.backward {
        plan.new_stripes - r.start
    } else {
        r.end
    }
}

/// The chunk range of the step after the one that leaves `done` new stripes committed, when
/// all of it is in old stripes (not in the backup): what may be read while that step is
/// written.
fn read_ahead(plan: &Reshape, done: u64, backed_up: bool) -> Option<Range<u64>> {
    let Step::Write(next) = plan.next(done, backed_up, RESHAPE_BATCH) else {
        return None;
    };
    let (first, last) = (next.start * plan.new_k, next.end * plan.new_k);
    let old = |x| matches!(plan.locate(x, done, backed_up), Place::Old { .. });
    (old(first) && old(last - 1)).then_some(first..last)
}

/// Chunks `r` of the data, read through the old geometry (every check of its scheme; what is
/// found wrong is rebuilt in memory and counted: the units located). Chunks past the data read
/// as zeros.
fn read_old(
    old: &Array,
    plan: &Reshape,
    chunk: usize,
    r: Range<u64>,
) -> Result<(Vec<u8>, u64), EngineError> {
    let c = chunk as u64;
    let mut bytes = vec![0u8; usize_of((r.end - r.start) * c)];
    let end = r.end.min(plan.chunks());
    let mut located = 0;
    if r.start < end {
        let before = old.counters().located;
        if listed_in(old, plan, r.start..end).is_empty() {
            let len = usize_of((end - r.start) * c);
            old.read(r.start * c, &mut bytes[..len])?;
        } else {
            read_around_listed(old, r.start..end, &mut bytes)?;
        }
        // Another thread's read may count between: the total over the run is exact.
        located = old.counters().located.saturating_sub(before);
    }
    Ok((bytes, located))
}

/// Chunks `r` of `a` into `out` (from its start) chunk by chunk, the bytes `a` lists
/// untrusted left zero (they move listed: `Mover::carry_listed`).
fn read_around_listed(a: &Array, r: Range<u64>, out: &mut [u8]) -> Result<(), EngineError> {
    let (k, c) = (a.geometry().k as u64, a.geometry().chunk_bytes);
    for x in r.clone() {
        let at = usize_of((x - r.start) * c);
        let chunk = &mut out[at..at + usize_of(c)];
        chunk.fill(0);
        let mut holes: Vec<(u64, u64)> = a
            .untrusted_within(x / k, x / k + 1)
            .into_iter()
            .filter(|e| u64::from(e.position) == x % k)
            .map(|e| (u64::from(e.offset), u64::from(e.offset) + u64::from(e.len)))
            .collect();
        holes.sort_unstable();
        let mut from = 0;
        for (lo, hi) in holes.into_iter().chain([(c, c)]) {
            if lo > from {
                a.read(x * c + from, &mut chunk[usize_of(from)..usize_of(lo)])?;
            }
            from = from.max(hi);
        }
    }
    Ok(())
}

/// What the old geometry lists untrusted in chunks `r`, placed in the new geometry.
fn listed_in(
    old: &Array,
    plan: &Reshape,
    r: Range<u64>,
) -> Vec<stripeguard_format::UntrustedRange> {
    if r.is_empty() {
        return Vec::new();
    }
    let k = plan.old_k;
    old.untrusted_within(r.start / k, (r.end - 1) / k + 1)
        .into_iter()
        .filter_map(|e| {
            let x = e.stripe * k + u64::from(e.position);
            r.contains(&x).then(|| stripeguard_format::UntrustedRange {
                stripe: x / plan.new_k,
                position: u16::try_from(x % plan.new_k).expect("k fits 16 bits"),
                ..e
            })
        })
        .collect()
}

/// The state of one run (see [`run`]).
struct Mover<'a> {
    old: &'a Array,
    target: &'a Array,
    plan: &'a Reshape,
    chunk: usize,
    /// The added members' indexes.
    added: Range<usize>,
    /// The checkpoint record as last written (its scrub and rebuild parts are kept).
    record: Checkpoint,
    progress: ReshapeProgress,
    /// The critical section's chunks, once read (from the old stripes, or the backup).
    backup: Option<Vec<u8>>,
    /// Clients read and write the array while it runs (online.rs).
    online: bool,
}

impl Mover<'_> {
    /// Write the checkpoint record with the progress as it is (after a flush of everything it
    /// counts), into the slot the previous one is not in, on every member, flushed.
    fn commit(&mut self) -> Result<(), EngineError> {
        self.record.sequence += 1;
        self.record.reshape = Some(self.progress.clone());
        let bytes = self
            .record
            .to_copy(stripeguard_format::checkpoint::CHECKPOINT_SLOT_BYTES)
            .expect("a checkpoint fits its slot");
        self.target
            .write_slot(CHECKPOINT_OFFSET, self.record.sequence, &bytes, true)?;
        // A level change down: the member that leaves holds the progress too, until it leaves
        // (`status` and a continue read every member's).
        let at =
            CHECKPOINT_OFFSET + stripeguard_format::slot_offset(self.record.sequence, bytes.len());
        for i in self.target.members().len()..self.old.members().len() {
            let d = self.old.members().get(MemberIx::new(i));
            d.write_at(at, &bytes)?;
            d.flush()?;
        }
        self.stop_if_degraded()
    }

    /// A member that failed stops the reshape (none continues degraded).
    fn stop_if_degraded(&self) -> Result<(), EngineError> {
        for h in self.target.health().into_iter().chain(self.old.health()) {
            if let Some(why) = h.failed {
                return Err(EngineError::Config(format!(
                    "member {} ({}) failed during the reshape: {why}; the reshape stops (it continues with `grow --continue` once the member is back)",
                    h.index, h.name
                )));
            }
        }
        Ok(())
    }

    /// Where backup chunk `x` is: the added member holding it, and the byte offset there.
    fn backup_place(&self, x: u64) -> (DiskRef, u64) {
        let j = self.added.len() as u64;
        let phys = self.plan.new_stripes + x / j;
        let member = self.added.start + usize_of(x % j);
        (
            self.target.members().get(MemberIx::new(member)),
            self.target.unit_offset(phys),
        )
    }

    /// Copy chunks `0..chunks` to the backup, durably, then record it.
    fn back_up(&mut self, chunks: u64) -> Result<(), EngineError> {
        if chunks != self.plan.backup_chunks {
            return Err(EngineError::Config(format!(
                "the reshape's plan asked for a second backup ({chunks} chunks, {} planned): not supported",
                self.plan.backup_chunks
            )));
        }
        let bytes = self.read_old(0..chunks)?;
        let c = self.chunk;
        for (x, chunk) in (0..chunks).zip(bytes.chunks(c)) {
            let (disk, at) = self.backup_place(x);
            disk.write_at(at, chunk)?;
        }
        self.target.flush_members()?;
        self.progress.backed_up = true;
        self.progress.backup_chunks = chunks;
        self.progress.backup_crc = stripeguard_checksum::crc32c(&bytes);
        self.backup = Some(bytes);
        self.commit()
    }

    /// The backup's chunks: as read for it in this run, or from the added members, checked
    /// against the CRC the checkpoint holds.
    fn backup(&mut self) -> Result<&[u8], EngineError> {
        if self.backup.is_none() {
            let c = self.chunk;
            let chunks = self.progress.backup_chunks;
            let mut bytes = vec![0u8; usize_of(chunks) * c];
            for (x, chunk) in (0..chunks).zip(bytes.chunks_mut(c)) {
                let (disk, at) = self.backup_place(x);
                disk.read_at(at, chunk)?;
            }
            let crc = stripeguard_checksum::crc32c(&bytes);
            if crc != self.progress.backup_crc {
                return Err(EngineError::Unrecoverable {
                    stripe: 0,
                    reason: format!(
                        "the reshape's backup of its critical section (chunks 0..{chunks} on the added members) fails its checksum (CRC-32C {crc:08x}, the checkpoint says {:08x}): the first new stripes cannot be rebuilt from it",
                        self.progress.backup_crc
                    ),
                });
            }
            self.backup = Some(bytes);
        }
        Ok(self.backup.as_deref().expect("just read"))
    }

    /// [`read_old`], counted.
    fn read_old(&mut self, r: Range<u64>) -> Result<Vec<u8>, EngineError> {
        let (bytes, located) = read_old(self.old, self.plan, self.chunk, r)?;
        self.progress.repaired += located;
        Ok(bytes)
    }

    /// The chunks of new stripes `r`, from their places. `ahead`: chunks read while the step
    /// before was written ([`read_ahead`]), used when they are these.
    fn gather(&mut self, r: &Range<u64>, ahead: Option<Ahead>) -> Result<Vec<u8>, EngineError> {
        let k = self.plan.new_k;
        let c = self.chunk;
        let first = r.start * k;
        let last = r.end * k;
        // Every chunk of the window is in the backup or in an old stripe (never committed).
        let done = self.progress.done;
        let backed_up = self.progress.backed_up;
        let split = (first..last)
            .find(|&x| !matches!(self.plan.locate(x, done, backed_up), Place::Backup(_)))
            .unwrap_or(last);
        if let Some(x) = (split..last)
            .find(|&x| !matches!(self.plan.locate(x, done, backed_up), Place::Old { .. }))
        {
            return Err(EngineError::Config(format!(
                "the reshape's plan put chunk {x} of a step neither in the backup nor in an old stripe"
            )));
        }
        let mut data = Vec::with_capacity(usize_of(last - first) * c);
        if split > first {
            let b = self.backup()?;
            data.extend_from_slice(&b[usize_of(first) * c..usize_of(split) * c]);
        }
        match ahead {
            Some((chunks, read)) if chunks == (split..last) => {
                let (bytes, located) = read?;
                self.progress.repaired += located;
                data.extend(bytes);
            }
            _ => data.extend(self.read_old(split..last)?),
        }
        Ok(data)
    }

    /// Write new stripes `r` whole from their chunks (`data`), flush, commit.
    fn write(&mut self, r: Range<u64>, data: &[u8]) -> Result<(), EngineError> {
        let k = self.plan.new_k;
        let c = self.chunk;
        let t = self.target;
        let n = t.geometry().n();
        let kk = usize_of(k);
        // Blocks the old geometry lists untrusted move listed (their bytes zero-filled, as
        // `clear` would), listed before the stripes around them are sealed.
        self.carry_listed(r.start * k..r.end * k)?;
        // checksum-chunk: the old view's dirty tables are written back before any new stripe
        // is (online, a client's write left them in its cache; written back later, a table of
        // an old stripe this step destroys would land on the new stripe's unit there).
        let ck = t.sb().scheme == Scheme::ChecksumChunk;
        if ck {
            self.old.ck_write_back()?;
        }
        let mut tables = Vec::new();
        let mut stripes: Vec<(StripeIx, Vec<AlignedBuf>)> = Vec::new();
        for (i, s) in r.clone().enumerate() {
            if self.zero_new(s) && self.list_zero(s) {
                // A zero stripe of the new geometry: listed in the progress this step commits,
                // nothing written.
                continue;
            }
            // The new view's own numbering: its data offset carries the plan's δ.
            let stripe = StripeIx::new(s);
            let mut units: Vec<AlignedBuf> = (0..n)
                .map(|_| {
                    let mut u = t.unit_buf();
                    u.fill(0);
                    u
                })
                .collect();
            for (p, u) in units.iter_mut().take(kk).enumerate() {
                let at = (i * kk + p) * c;
                u[..c].copy_from_slice(&data[at..at + c]);
            }
            let (d, parity) = units.split_at_mut(kk);
            let chunks: Vec<&[u8]> = d.iter().map(|u| &u[..c]).collect();
            let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
            t.code().encode(&chunks, &mut views)?;
            t.layout().seal_settled(t, stripe, &mut units)?;
            if ck {
                // The new stripe's table, on the new geometry's checksum member (the last
                // added): the whole unit, zeros after the table (FORMAT.md §2.10).
                let table = {
                    let views: Vec<&[u8]> = units.iter().map(|u| &u[..c]).collect();
                    t.ck_table_of(stripe, &views)
                };
                let (_, tb) = t.ck_shape();
                let mut unit = t.ck_encode(&table);
                unit[tb..].fill(0);
                units.push(unit);
                tables.push((stripe, table));
            }
            stripes.push((stripe, units));
        }
        let writes: Vec<Vec<(Pos, u64, &[u8])>> = stripes
            .iter()
            .map(|(_, units)| {
                Pos::upto(units.len())
                    .zip(units)
                    .map(|(p, u)| (p, 0, &u[..]))
                    .collect()
            })
            .collect();
        let lists: Vec<crate::unitio::StripeWrites<'_>> = stripes
            .iter()
            .zip(&writes)
            .map(|((s, _), w)| (*s, &w[..]))
            .collect();
        t.write_units_of(&lists)?;
        drop(lists);
        drop(writes);
        t.recycle(stripes.into_iter().flat_map(|(_, u)| u));
        self.stop_if_degraded()?;
        t.flush_members()?;
        for (stripe, table) in tables {
            t.ck_written(stripe, table);
        }
        self.progress.done = done_after(self.plan, &r);
        self.commit()
    }

    /// List in the new geometry (in memory; the finish writes the new record) what the old
    /// geometry lists untrusted in chunks `r` (FORMAT.md §2.7: a resync after an online
    /// run's crash could not verify a torn client write).
    fn carry_listed(&self, r: Range<u64>) -> Result<(), EngineError> {
        let moved = listed_in(self.old, self.plan, r);
        if moved.is_empty() {
            return Ok(());
        }
        if !self
            .target
            .list_untrusted(&moved, "moved by the reshape, still unverified")?
        {
            return Err(EngineError::Config(
                "the stripe-state record has no room for the untrusted blocks the reshape moves"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Whether new stripe `t` holds only chunks of old zero stripes (FORMAT.md §2.7): it is
    /// then listed as a zero stripe instead of written. Never online (`self.online`): clients
    /// write into the new stripes while the list is durable only at each step's commit, so
    /// every new stripe is written (zeros read as zeros).
    fn zero_new(&self, t: u64) -> bool {
        !self.online
            && self
                .plan
                .sources(t)
                .all(|s| self.old.is_zero(StripeIx::new(s)))
    }

    /// List new stripe `t` among the progress's zero stripes, unless that would take more
    /// ranges than the record holds (one kept for the stripes past the data): false, and the
    /// stripe is written.
    fn list_zero(&mut self, t: u64) -> bool {
        let mut zero = self.progress.zero.clone();
        let at = zero.partition_point(|r| r.1 < t);
        match zero.get_mut(at) {
            Some(r) if r.0 <= t + 1 && t <= r.1 => {
                r.0 = r.0.min(t);
                r.1 = r.1.max(t + 1);
            }
            _ => zero.insert(at, (t, t + 1)),
        }
        // Two ranges that now touch become one.
        if at + 1 < zero.len() && zero[at].1 >= zero[at + 1].0 {
            zero[at].1 = zero[at].1.max(zero[at + 1].1);
            zero.remove(at + 1);
        }
        if zero.len() + 1 > stripeguard_format::RESHAPE_ZERO_RANGES {
            return false;
        }
        self.progress.zero = zero;
        true
    }

    /// Every new stripe is committed: the stripes past the data join the new stripes of zero
    /// chunks as zero stripes (or are written as zeros where the array keeps none), the intent
    /// record empty, the checkpoint finished (the superblocks' commit is the caller's).
    fn finish(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<(), EngineError> {
        let t = self.target;
        if !self.progress.finishing {
            let (from, to) = (self.plan.new_stripes, t.geometry().stripes);
            let mut zero = self.progress.zero.clone();
            if from < to {
                match zero.last_mut() {
                    Some(r) if r.1 == from => r.1 = to,
                    _ => zero.push((from, to)),
                }
            }
            t.flush_members()?;
            self.progress.finishing = true;
            self.progress.zero = zero;
            self.commit()?;
        }
        let zero: Vec<Range<u64>> = self.progress.zero.iter().map(|&(lo, hi)| lo..hi).collect();
        let listed = t.keeps_zero_stripes() && t.only_zero_stripes(&zero)?;
        if !listed {
            for r in zero {
                t.layout().initialise(t, false, r, progress)?;
            }
            // What the old geometry listed names old stripes: the record lists only what the
            // new one listed (blocks moved listed, or a resync could not verify).
            if t.sb().layout.state_bytes > 0 && !t.only_zero_stripes(&[])? {
                return Err(EngineError::Config(
                    "the stripe-state record cannot be written empty".into(),
                ));
            }
        }
        let intent = t.sb().layout.intent_bytes;
        for d in t.members().all() {
            zero_range(&d, INTENT_RECORD_OFFSET, intent)?;
        }
        t.flush_members()?;
        self.stop_if_degraded()?;
        self.progress.finished = true;
        self.commit()
    }
}
