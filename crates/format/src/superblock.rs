//! The member superblock and the metadata area, byte for byte as in `FORMAT.md` §2 and §2.1
//! (format version 2).

use crate::cursor::{u16_at, u32_at, u64_at};
use crate::Scheme;
use stripeguard_checksum::crc32c;

const SUPERBLOCK_BYTES_U32: u32 = 4096;
/// Bytes in one superblock copy.
pub const SUPERBLOCK_BYTES: usize = SUPERBLOCK_BYTES_U32 as usize;
/// Where the two copies live on every member.
pub const SUPERBLOCK_COPY_OFFSETS: [u64; 2] = [0, 4096];
/// The owner record's region (reserved: zeros in this build).
pub const OWNER_RECORD_OFFSET: u64 = 8192;
/// The checkpoint region (reserved: zeros in this build).
pub const CHECKPOINT_OFFSET: u64 = 12288;
/// Where the intent record starts; the regions before it are fixed.
pub const INTENT_RECORD_OFFSET: u64 = 16384;
/// Members smaller than this get the small metadata area.
pub const LARGE_MEMBER_BYTES: u64 = 256 << 20;
/// Journal slots after the data area of a member of 256 MiB or more (FORMAT.md §2.6); smaller
/// members get four.
pub const JOURNAL_SLOTS: u32 = 8;
/// Bytes of a journal slot's header, before the unit it holds.
pub const JOURNAL_HEADER_BYTES: u64 = 4096;
/// Largest member count (the member table's bound).
pub const MAX_MEMBERS: u16 = 255;
const MAGIC: [u8; 8] = *b"SGARRAY\0";
/// The members' on-disk format version (FORMAT.md §2).
pub const FORMAT_VERSION: u32 = 2;
const VERSION: u32 = FORMAT_VERSION;
const CRC_AT: usize = SUPERBLOCK_BYTES - 4;
const TABLE_AT: usize = 256;
const ENTRY_BYTES: usize = 12;

/// The sizes of the metadata area's variable regions (FORMAT.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataLayout {
    /// Write-intent record bytes (`I`).
    pub intent_bytes: u64,
    /// Event log bytes (`L`).
    pub log_bytes: u64,
    /// Stripe-state record bytes (`T`, §2.7), after the event log; 0 in arrays made by builds
    /// before the record (they list nothing and never settle a stripe that holds damage).
    pub state_bytes: u64,
}

impl MetadataLayout {
    /// The layout `create` picks for members of at least `smallest_member_bytes`.
    pub fn for_member(smallest_member_bytes: u64) -> MetadataLayout {
        if smallest_member_bytes >= LARGE_MEMBER_BYTES {
            MetadataLayout {
                intent_bytes: 256 << 10,
                log_bytes: 688 << 10,
                state_bytes: 64 << 10,
            }
        } else {
            MetadataLayout {
                intent_bytes: 16 << 10,
                log_bytes: 80 << 10,
                state_bytes: 16 << 10,
            }
        }
    }
    /// Degraded-write journal slots `create` gives members with this layout.
    pub fn journal_slots(&self) -> u32 {
        if self.intent_bytes >= 256 << 10 {
            JOURNAL_SLOTS
        } else {
            4
        }
    }

    /// Where the event log starts.
    pub fn log_offset(&self) -> u64 {
        // Saturating: a decoded record may hold any value until `validate` bounds it.
        INTENT_RECORD_OFFSET.saturating_add(self.intent_bytes)
    }
    /// Where the stripe-state record starts (right after the event log).
    pub fn state_offset(&self) -> u64 {
        self.log_offset().saturating_add(self.log_bytes)
    }
    /// Where the data area starts (the end of the metadata area).
    pub fn data_offset(&self) -> u64 {
        self.state_offset().saturating_add(self.state_bytes)
    }

    /// The smallest member that holds `stripes` units of `unit_bytes` with the layout `create`
    /// picks for a member of that size (saturating).
    pub fn member_bytes_for(stripes: u64, unit_bytes: u64) -> u64 {
        Self::member_bytes_with(stripes, unit_bytes, None)
    }

    /// [`MetadataLayout::member_bytes_for`] with `journal_slots` slots instead of the layout's
    /// (an array with the write journal, [`write_journal_slots`]).
    pub fn member_bytes_with(stripes: u64, unit_bytes: u64, journal_slots: Option<u32>) -> u64 {
        let with = |l: MetadataLayout| {
            let slots = journal_slots.unwrap_or(l.journal_slots());
            l.data_offset()
                .saturating_add(stripes.saturating_mul(unit_bytes))
                .saturating_add(slots as u64 * (JOURNAL_HEADER_BYTES + unit_bytes))
        };
        with(MetadataLayout::for_member(with(
            MetadataLayout::for_member(0),
        )))
    }
}

/// How many parity appendices a first-read cross-checks against (FORMAT.md §2.9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrossCheck {
    /// P only: the paper's cost (σ = 1 extra read).
    #[default]
    One,
    /// Every parity (σ = m extra reads): catches a data unit and P that both lost a write.
    All,
}

impl CrossCheck {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CrossCheck::One => "one",
            CrossCheck::All => "all",
        }
    }
}

impl std::str::FromStr for CrossCheck {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "one" => Ok(CrossCheck::One),
            "all" => Ok(CrossCheck::All),
            _ => Err(format!("unknown cross-check `{s}` (choose one or all)")),
        }
    }
}

/// What a superblock's writer knew about one member (the member table, FORMAT.md §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberState {
    /// In the array, receiving every write.
    Active,
    /// Taken out by an I/O error.
    Failed,
    /// Absent or unreadable when the array was assembled for writing.
    Missing,
    /// Its event count was behind the others' when assembled: it missed writes.
    Stale,
    /// A `replace` is writing it; not current until it finishes.
    Rebuilding,
}

impl MemberState {
    fn id(self) -> u8 {
        match self {
            MemberState::Active => 1,
            MemberState::Failed => 2,
            MemberState::Missing => 3,
            MemberState::Stale => 4,
            MemberState::Rebuilding => 5,
        }
    }
    fn from_id(id: u8) -> Option<MemberState> {
        [
            MemberState::Active,
            MemberState::Failed,
            MemberState::Missing,
            MemberState::Stale,
            MemberState::Rebuilding,
        ]
        .into_iter()
        .find(|s| s.id() == id)
    }
    /// Lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Active => "active",
            MemberState::Failed => "failed",
            MemberState::Missing => "missing",
            MemberState::Stale => "stale",
            MemberState::Rebuilding => "rebuilding",
        }
    }
}

/// One member table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberSlot {
    /// The member's state.
    pub state: MemberState,
    /// Which device holds the slot: 0 at create, one more each time `replace` rebuilds the slot
    /// onto another device. A device whose own superblock shows the current number is the one
    /// that left, not an older one (FORMAT.md §2.1).
    pub device: u16,
    /// Active: the superblock's event count; otherwise the last event count at which the member
    /// was known current.
    pub last_event: u64,
}
/// Largest chunk accepted.
pub const MAX_CHUNK_BYTES: u32 = 16 << 20;
/// Incompatible feature bit 0: appendix layout 2 with a per-block CRC table (FORMAT.md §2.1).
pub const INCOMPAT_BLOCK_CRCS: u64 = 1;
/// Incompatible feature bit 1: the write journal (FORMAT.md §2.6): every write's new bytes are
/// in the journal before they go in place, and resync replays them. A reader that does not
/// know it would resync without the replay, so it must refuse the array.
pub const INCOMPAT_WRITE_JOURNAL: u64 = 2;
/// Incompatible feature bit 2: the stripe-state record (FORMAT.md §2.7) lists untrusted blocks.
/// Set while it holds an entry: a reader that does not know the record would read a listed
/// block as good (its appendix was re-sealed over it), so it must refuse the array.
pub const INCOMPAT_UNTRUSTED: u64 = 4;
/// Incompatible feature bit 3: the array keeps zero stripes (FORMAT.md §2.7,
/// docs/ZERO-STRIPES.md): its stripe-state record may list ranges of stripes that read as zeros
/// whatever their units hold. Set by `create` for the array's life (`--no-zero-stripes` leaves
/// it clear, and TRIM then writes zeros as before). A reader that does not know it would read a
/// zero stripe's unspecified bytes as data, so it must refuse the array.
pub const INCOMPAT_ZERO_STRIPES: u64 = 8;
/// Incompatible feature bit 4: the superblock lists hot spares (FORMAT.md §2.1, §2.11) in its
/// spare table. Set while it lists any: a writer that does not know the table would drop it
/// when it rewrote the superblock, and the spares' labels would name an array that no longer
/// knows them.
pub const INCOMPAT_SPARES: u64 = 16;
/// Incompatible feature bit 5: the write journal is on journal devices (FORMAT.md §2.1,
/// §2.12) listed at bytes 209..244. A reader that does not know them would look for the
/// journal's records on the members only and resync without the ones on the devices.
pub const INCOMPAT_JOURNAL_DEVICES: u64 = 32;
/// Incompatible feature bit 6: a reshape is in progress (FORMAT.md §2.1, "Reshaping the
/// array"): the geometry fields describe the array being built, bytes 244..251 the one being
/// moved out of, and the checkpoint record (§2.3) how far the data has moved. A reader that
/// does not know it would read the old stripes in the new geometry, so it must refuse.
pub const INCOMPAT_RESHAPE: u64 = 64;
/// Compatible feature bit 0: the array has a name, at bytes 168..200 (FORMAT.md §2.1). A
/// reader that does not know it ignores the name (and a writer that does not know it drops it).
pub const COMPAT_NAME: u64 = 1;
/// Compatible feature bit 1: bytes 200..208 hold the spare policy (FORMAT.md §2.1). A reader
/// that does not know it uses no spare (it knows none); a writer that does not know it drops it
/// (the defaults apply again).
pub const COMPAT_SPARE_POLICY: u64 = 2;
/// Most spares a superblock lists.
pub const MAX_SPARES: usize = 6;
/// Bytes of a spare's path hint at most.
pub const MAX_SPARE_HINT_BYTES: usize = 100;
/// Where the spare table starts (past the largest member table, 256 + 12 * 255).
const SPARES_AT: usize = 3328;
/// Bytes of one spare table entry.
const SPARE_ENTRY_BYTES: usize = 124;
/// Seconds a member stays out before a spare takes its place, by default.
pub const DEFAULT_SPARE_DELAY_SECONDS: u32 = 30;

/// A hot spare the array lists (FORMAT.md §2.1 spare table; the device carries the matching
/// label, §2.11).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpareEntry {
    /// The spare's uuid (in its label).
    pub uuid: [u8; 16],
    /// Its bytes when added.
    pub device_bytes: u64,
    /// The path it was added by, where to look first (empty: too long to keep; found by
    /// scanning).
    pub hint: String,
}

/// When a spare takes a member's place (FORMAT.md §2.1, compatible bit 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SparePolicy {
    /// Seconds a member stays out (failed, missing, stale) before a spare is rebuilt in its
    /// place: a member that comes back sooner (an NBD member that dropped out for a few
    /// seconds) gets its cheap re-add instead.
    pub delay_seconds: u32,
    /// Units found silently wrong on one member (since the holder assembled the array) at which
    /// a spare takes its place while it is still in; 0: never.
    pub error_threshold: u32,
}

impl Default for SparePolicy {
    fn default() -> Self {
        SparePolicy {
            delay_seconds: DEFAULT_SPARE_DELAY_SECONDS,
            error_threshold: 0,
        }
    }
}

/// Bytes of an array's name at most.
pub const MAX_NAME_BYTES: usize = 32;

/// Whether `name` can be an array's name: 1 to 32 bytes of `A-Z a-z 0-9 . _ -`, starting with
/// a letter or digit (so it never reads as a flag), and not 32 hex digits (a uuid's spelling).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "an array's name has 1 to {MAX_NAME_BYTES} characters; {name:?} has {}",
            name.len()
        ));
    }
    if !name.chars().all(ok_char) || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "an array's name is letters, digits, '.', '_' and '-', starting with a letter or digit: {name:?} is not"
        ));
    }
    if name.len() == 32 && name.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "{name:?} reads as an array uuid; choose a name that does not"
        ));
    }
    Ok(())
}

/// Where the name sits in a superblock copy.
const NAME_AT: usize = 168;
/// Most journal slots a member may have.
pub const MAX_JOURNAL_SLOTS: u32 = 64;

/// Journal slots of an array of `members` members with the write journal: one write to a
/// stripe takes a slot for every unit it changes and every missing chunk it saves (at most
/// `2 * members`), and the next writes find room before a flush must free them.
pub fn write_journal_slots(members: usize) -> u32 {
    u32::try_from(8 * members).map_or(MAX_JOURNAL_SLOTS, |s| s.min(MAX_JOURNAL_SLOTS))
}

/// The erasure code of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeId {
    /// RAID-5 XOR parity.
    Xor,
    /// Linux md RAID-6 P + Q.
    Raid6,
    /// ISA-L-compatible Cauchy Reed-Solomon.
    Rs,
    /// Row-Diagonal Parity (XOR only, RAID-6; a chunk holds `p - 1` rows).
    Rdp,
    /// Tier-code with the corrected labeling (XOR only, RAID-6).
    Tier,
}

impl CodeId {
    /// Every code, in on-disk id order.
    pub const ALL: [CodeId; 5] = [
        CodeId::Xor,
        CodeId::Raid6,
        CodeId::Rs,
        CodeId::Rdp,
        CodeId::Tier,
    ];
    /// On-disk id.
    pub fn id(self) -> u8 {
        match self {
            CodeId::Xor => 1,
            CodeId::Raid6 => 2,
            CodeId::Rs => 3,
            CodeId::Rdp => 4,
            CodeId::Tier => 5,
        }
    }
    /// From the on-disk id.
    pub fn from_id(id: u8) -> Option<CodeId> {
        CodeId::ALL.into_iter().find(|c| c.id() == id)
    }
    /// Name as `stripeguard_codes::by_name` takes it.
    pub fn name(self) -> &'static str {
        match self {
            CodeId::Xor => "xor",
            CodeId::Raid6 => "raid6",
            CodeId::Rs => "rs",
            CodeId::Rdp => "rdp",
            CodeId::Tier => "tier",
        }
    }
    /// From a name as the command line takes it.
    pub fn from_name(name: &str) -> Option<CodeId> {
        CodeId::ALL.into_iter().find(|c| c.name() == name)
    }
    /// The usual code for `m` parity chunks: xor for 1, raid6 for 2, rs otherwise.
    pub fn for_parity(m: usize) -> CodeId {
        match m {
            1 => CodeId::Xor,
            2 => CodeId::Raid6,
            _ => CodeId::Rs,
        }
    }
}

/// Clean or dirty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayState {
    /// Closed cleanly: parity is consistent with data everywhere.
    Clean,
    /// Open for writing (or crashed while open).
    Dirty,
}

/// A decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Shared by every member of one array.
    pub array_uuid: [u8; 16],
    /// This member's position, `0..members`.
    pub member_index: u16,
    /// `n = k + m`.
    pub members: u16,
    /// `k`.
    pub data_chunks: u16,
    /// `m`.
    pub parity_chunks: u16,
    /// The erasure code.
    pub code: CodeId,
    /// The integrity scheme.
    pub scheme: Scheme,
    /// 9 or 12.
    pub sector_shift: u8,
    /// Clean or dirty.
    pub state: ArrayState,
    /// Chunk size in bytes.
    pub chunk_bytes: u32,
    /// Where unit 0 starts.
    pub data_offset_bytes: u64,
    /// Units per member.
    pub stripes: u64,
    /// Every hybrid-seq sequence number used so far is below this.
    pub sequence_high_water: u64,
    /// Update counter; the valid copy with the highest wins.
    pub generation: u64,
    /// Unix seconds at create.
    pub created_unix_seconds: u64,
    /// How many parity appendices a first-read cross-checks against.
    pub cross_check: CrossCheck,
    /// The variable regions of the metadata area.
    pub layout: MetadataLayout,
    /// Journal slots after the data area.
    pub journal_slots: u32,
    /// Every write goes through the journal first (incompatible feature bit 1).
    pub write_journal: bool,
    /// The stripe-state record lists untrusted blocks (incompatible feature bit 2).
    pub untrusted_listed: bool,
    /// The array keeps zero stripes in its stripe-state record (incompatible feature bit 3).
    pub zero_stripes: bool,
    /// The array's name (`create --name`; compatible feature bit 0); empty: none.
    pub name: String,
    /// Hot spares listed (incompatible feature bit 4 while any is).
    pub spares: Vec<SpareEntry>,
    /// When a spare takes a member's place (compatible feature bit 1; `None`: the defaults).
    pub spare_policy: Option<SparePolicy>,
    /// The write journal's devices (incompatible feature bit 5; at most 2, a mirror).
    pub journal_devices: Vec<[u8; 16]>,
    /// Bit `i`: journal device `i` was lost (its records are gone; the journal is on the
    /// others, or on the members when every one is lost).
    pub journal_devices_lost: u8,
    /// A reshape in progress (incompatible feature bit 6): the geometry it moves the data out
    /// of. The fields above describe the geometry it moves the data into.
    pub reshape: Option<ReshapeFrom>,
    /// What this superblock's writer knew about every member.
    pub member_table: Vec<MemberSlot>,
}

/// The geometry a reshape moves the data out of (superblock bytes 244..251): the first
/// `members` members of the array, `data_chunks` + `parity_chunks` of them per stripe, the
/// same scheme, chunk, sector and stripe count as the new geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReshapeFrom {
    /// `n` before.
    pub members: u16,
    /// `k` before.
    pub data_chunks: u16,
    /// `m` before.
    pub parity_chunks: u16,
    /// The code before.
    pub code: CodeId,
    /// How many units further into each member the new geometry's stripe 0 lies than the
    /// old one's (`δ`, a level change: the data offset at 48 is the new geometry's, the old
    /// one's is `δ·U` less); 0 when members are added as data members.
    pub offset_stripes: u32,
    /// Random, not zero: names this reshape; the checkpoint's reshape part (§2.3) carries the
    /// same, so a record of an earlier reshape is never taken for this one's progress.
    pub id: u32,
}

/// Why bytes are not a valid superblock.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    /// Too short.
    #[error("superblock truncated ({0} bytes)")]
    Truncated(usize),
    /// Not a stripeguard member.
    #[error("no stripeguard superblock (magic not found)")]
    BadMagic,
    /// Written by another stripeguard format.
    #[error("{}", version_message(*.0))]
    Version(u32),
    /// Uses a feature this build does not know.
    #[error("the array uses incompatible features {0:#x} that this build does not know")]
    Features(u64),
    /// Made by an earlier build of format 2, with one checksum per chunk (appendix layout 1).
    #[error("the array was made by an earlier build with one checksum per chunk (appendix layout 1, no block-CRC feature bit); nothing of it was deployed: recreate the array with this build")]
    NoBlockCrcs,
    /// Damaged.
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// In the record.
        stored: u32,
        /// Of the bytes.
        computed: u32,
    },
    /// The name field (compatible feature bit 0) is damaged.
    #[error("the superblock's array name field is damaged: {0}")]
    Name(&'static str),
    /// Fields that cannot describe an array.
    #[error("superblock describes an impossible geometry: {0}")]
    Geometry(&'static str),
}

fn version_message(v: u32) -> String {
    if v == 1 {
        "superblock format version 1 (an array made before the version 2 metadata area) is not supported: recreate the array with this build".into()
    } else {
        format!(
            "superblock format version {v} is not supported (this build reads version {VERSION})"
        )
    }
}

impl Superblock {
    /// Sector size in bytes.
    pub fn sector_bytes(&self) -> u32 {
        1 << self.sector_shift
    }

    /// Units a member of `size` bytes has room for in this geometry: what is left after the
    /// metadata area (`D`) and the journal slots, in whole units.
    pub fn units_that_fit(&self, size: u64) -> u64 {
        let slots = u64::from(self.journal_slots) * self.journal_slot_bytes();
        size.saturating_sub(self.data_offset_bytes)
            .saturating_sub(slots)
            / self.unit_bytes()
    }

    /// Bytes of one unit (chunk + appendix, or chunk alone for `none`).
    pub fn unit_bytes(&self) -> u64 {
        self.chunk_bytes as u64 + self.appendix_bytes() as u64
    }

    /// Bytes of the appendix after every chunk (`A·S`, FORMAT.md §2.9; 0 for `none`).
    pub fn appendix_bytes(&self) -> u32 {
        crate::appendix_bytes_for(
            self.scheme,
            self.data_chunks as usize,
            self.chunk_bytes,
            self.sector_bytes(),
        )
    }

    /// The checksum block size `b` (FORMAT.md §2).
    pub fn block_bytes(&self) -> u32 {
        crate::block_bytes_for(self.chunk_bytes)
    }

    /// The member size this superblock needs.
    pub fn member_bytes(&self) -> u64 {
        self.journal_offset() + self.journal_slots as u64 * self.journal_slot_bytes()
    }

    /// Where the degraded-write journal starts (right after the last unit).
    pub fn journal_offset(&self) -> u64 {
        self.data_offset_bytes + self.stripes * self.unit_bytes()
    }

    /// Bytes of one journal slot: a header and one unit.
    pub fn journal_slot_bytes(&self) -> u64 {
        JOURNAL_HEADER_BYTES + self.unit_bytes()
    }

    /// Check the geometry fields; used by both `create` and the decoder.
    pub fn validate(&self) -> Result<(), SuperblockError> {
        let g = SuperblockError::Geometry;
        if !self.name.is_empty() && check_name(&self.name).is_err() {
            return Err(SuperblockError::Name("not a valid name"));
        }
        if self.data_chunks == 0 || self.parity_chunks == 0 {
            return Err(g("k and m must both be at least 1"));
        }
        let extra = u16::from(self.scheme.extra_members() == 1);
        if u32::from(self.data_chunks) + u32::from(self.parity_chunks) + u32::from(extra)
            != u32::from(self.members)
        {
            return Err(g(if extra == 0 {
                "members != data chunks + parity chunks"
            } else {
                "members != data chunks + parity chunks + the checksum member"
            }));
        }
        if extra > 0
            && crate::cktable::table_bytes(
                self.data_chunks as usize + self.parity_chunks as usize,
                self.chunk_bytes,
            ) > self.chunk_bytes as usize
        {
            return Err(g("the checksum chunk's table does not fit in one chunk: use larger chunks or fewer members"));
        }
        if self.members > MAX_MEMBERS {
            return Err(g("more than 255 members"));
        }
        if self.spares.len() > MAX_SPARES {
            return Err(g("more than 6 spares"));
        }
        if self.journal_devices.len() > 2
            || (!self.journal_devices.is_empty() && !self.write_journal)
            || self.journal_devices.iter().any(|u| u == &[0; 16])
        {
            return Err(g(
                "journal devices: at most 2, with non-zero uuids, and only with the write journal",
            ));
        }
        if self.member_table.len() != self.members as usize {
            return Err(g("member table length differs from the member count"));
        }
        if !self.scheme.fits_data_chunks(self.data_chunks as usize) {
            return Err(g(
                "pure and hybrid2 need at least 2 data chunks: with one, a chunk's buddy is the chunk itself, written in the same I/O, so a lost write or flipped bit could not be caught (use hybrid1 or hybrid-seq)",
            ));
        }
        // During a level change down (RAID-6 to RAID-5) the member that leaves still holds old
        // stripes: its index is the new geometry's count.
        let indexed = self
            .reshape
            .map_or(self.members, |r| r.members.max(self.members));
        if self.member_index >= indexed {
            return Err(g("member index out of range"));
        }
        match (self.code, self.parity_chunks) {
            (CodeId::Xor, 1)
            | (CodeId::Raid6 | CodeId::Rdp | CodeId::Tier, 2)
            | (CodeId::Rs, _) => {}
            (CodeId::Xor, _) => return Err(g("xor needs exactly one parity chunk")),
            (CodeId::Raid6, _) => return Err(g("raid6 needs exactly two parity chunks")),
            (CodeId::Rdp | CodeId::Tier, _) => {
                return Err(g("rdp and tier need exactly two parity chunks"))
            }
        }
        if self.sector_shift != 9 && self.sector_shift != 12 {
            return Err(g("sector size must be 512 or 4096 bytes"));
        }
        let sector = self.sector_bytes();
        if self.chunk_bytes == 0
            || !self.chunk_bytes.is_multiple_of(sector)
            || self.chunk_bytes > MAX_CHUNK_BYTES
        {
            return Err(g(
                "chunk size must be a non-zero multiple of the sector size, at most 16 MiB",
            ));
        }
        if self.layout.intent_bytes == 0
            || self.layout.log_bytes == 0
            || !self.layout.intent_bytes.is_multiple_of(4096)
            || !self.layout.log_bytes.is_multiple_of(4096)
            || self.layout.log_bytes > 1 << 40
            || self.layout.intent_bytes > 1 << 40
            || !self.layout.state_bytes.is_multiple_of(8192)
            || self.layout.state_bytes > 1 << 30
        {
            return Err(g(
                "metadata regions must be non-empty multiples of 4096 bytes",
            ));
        }
        if self.data_offset_bytes < self.layout.data_offset()
            || !self.data_offset_bytes.is_multiple_of(4096)
        {
            return Err(g(
                "data offset overlaps the metadata area or is not 4096-byte aligned",
            ));
        }
        if self.stripes == 0 {
            return Err(g("no stripes"));
        }
        if self.journal_slots > MAX_JOURNAL_SLOTS {
            return Err(g("more than 64 journal slots"));
        }
        if self.write_journal && (self.journal_slots as usize) < 2 * self.members as usize {
            return Err(g("a write journal needs two slots for every member"));
        }
        self.stripes
            .checked_mul(self.unit_bytes())
            .and_then(|b| b.checked_add(self.data_offset_bytes))
            .and_then(|b| {
                (self.journal_slots as u64)
                    .checked_mul(JOURNAL_HEADER_BYTES + self.unit_bytes())
                    .and_then(|j| j.checked_add(b))
            })
            .ok_or(g("member size overflows 64 bits"))?;
        if let Some(r) = self.reshape {
            let from = u32::from(r.data_chunks) + u32::from(r.parity_chunks) + u32::from(extra);
            // Members are only added, except by a level change down: one parity member leaves.
            let level_down = r.members == self.members + 1
                && r.parity_chunks == self.parity_chunks + 1
                && r.data_chunks == self.data_chunks;
            if r.data_chunks == 0
                || r.parity_chunks == 0
                || from != u32::from(r.members)
                || (r.members >= self.members && !level_down)
                || r.data_chunks > self.data_chunks
                || !self.scheme.fits_data_chunks(r.data_chunks as usize)
                || u64::from(r.offset_stripes)
                    .checked_mul(self.unit_bytes())
                    .is_none_or(|b| b > self.data_offset_bytes)
                // Adding data members moves in place; a level change (same k) into room past
                // the data.
                || (r.offset_stripes == 0) != (r.data_chunks < self.data_chunks)
                || r.id == 0
            {
                return Err(g(
                    "the reshape's old geometry is impossible or has as many members as the new one",
                ));
            }
        }
        Ok(())
    }

    /// Serialize one copy.
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&SUPERBLOCK_BYTES_U32.to_le_bytes());
        b[16..32].copy_from_slice(&self.array_uuid);
        b[32..34].copy_from_slice(&self.member_index.to_le_bytes());
        b[34..36].copy_from_slice(&self.members.to_le_bytes());
        b[36..38].copy_from_slice(&self.data_chunks.to_le_bytes());
        b[38..40].copy_from_slice(&self.parity_chunks.to_le_bytes());
        b[40] = self.code.id();
        b[41] = self.scheme.id();
        b[42] = self.sector_shift;
        b[43] = match self.state {
            ArrayState::Clean => 0,
            ArrayState::Dirty => 1,
        };
        b[44..48].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset_bytes.to_le_bytes());
        b[56..64].copy_from_slice(&self.stripes.to_le_bytes());
        b[64..72].copy_from_slice(&self.sequence_high_water.to_le_bytes());
        b[72..80].copy_from_slice(&self.generation.to_le_bytes());
        b[80..88].copy_from_slice(&self.created_unix_seconds.to_le_bytes());
        b[88] = match self.cross_check {
            CrossCheck::One => 0,
            CrossCheck::All => 1,
        };
        // 96..104: incompatible features (block CRCs, always); 104..112: compatible, none.
        let journal = if self.write_journal {
            INCOMPAT_WRITE_JOURNAL
        } else {
            0
        };
        let untrusted = if self.untrusted_listed {
            INCOMPAT_UNTRUSTED
        } else {
            0
        };
        let zero = if self.zero_stripes {
            INCOMPAT_ZERO_STRIPES
        } else {
            0
        };
        b[96..104]
            .copy_from_slice(&(INCOMPAT_BLOCK_CRCS | journal | untrusted | zero).to_le_bytes());
        b[112..120].copy_from_slice(&INTENT_RECORD_OFFSET.to_le_bytes());
        b[120..128].copy_from_slice(&self.layout.intent_bytes.to_le_bytes());
        b[128..136].copy_from_slice(&self.layout.log_offset().to_le_bytes());
        b[136..144].copy_from_slice(&self.layout.log_bytes.to_le_bytes());
        b[144..148].copy_from_slice(&self.journal_slots.to_le_bytes());
        if self.layout.state_bytes > 0 {
            b[152..160].copy_from_slice(&self.layout.state_offset().to_le_bytes());
            b[160..168].copy_from_slice(&self.layout.state_bytes.to_le_bytes());
        }
        if !self.name.is_empty() {
            let name = self.name.as_bytes();
            let len = name.len().min(MAX_NAME_BYTES);
            b[NAME_AT..NAME_AT + len].copy_from_slice(&name[..len]);
            b[104..112].copy_from_slice(&COMPAT_NAME.to_le_bytes());
        }
        let mut incompatible = u64_at(&b, 96);
        let mut compatible = u64_at(&b, 104);
        if let Some(p) = self.spare_policy {
            b[200..204].copy_from_slice(&p.delay_seconds.to_le_bytes());
            b[204..208].copy_from_slice(&p.error_threshold.to_le_bytes());
            compatible |= COMPAT_SPARE_POLICY;
        }
        if !self.spares.is_empty() {
            incompatible |= INCOMPAT_SPARES;
            b[208] = u8::try_from(self.spares.len().min(MAX_SPARES)).unwrap_or(0);
            for (i, e) in self.spares.iter().take(MAX_SPARES).enumerate() {
                let at = SPARES_AT + i * SPARE_ENTRY_BYTES;
                b[at..at + 16].copy_from_slice(&e.uuid);
                b[at + 16..at + 24].copy_from_slice(&e.device_bytes.to_le_bytes());
                let hint = crate::cursor::text_prefix(&e.hint, MAX_SPARE_HINT_BYTES);
                crate::cursor::put_text(&mut b[at + 24..at + SPARE_ENTRY_BYTES], hint);
            }
        }
        if !self.journal_devices.is_empty() {
            incompatible |= INCOMPAT_JOURNAL_DEVICES;
            b[209] = u8::try_from(self.journal_devices.len().min(2)).unwrap_or(0);
            b[210] = self.journal_devices_lost;
            for (i, u) in self.journal_devices.iter().take(2).enumerate() {
                b[212 + 16 * i..228 + 16 * i].copy_from_slice(u);
            }
        }
        if let Some(r) = self.reshape {
            incompatible |= INCOMPAT_RESHAPE;
            b[244..246].copy_from_slice(&r.members.to_le_bytes());
            b[246..248].copy_from_slice(&r.data_chunks.to_le_bytes());
            b[248..250].copy_from_slice(&r.parity_chunks.to_le_bytes());
            b[250] = r.code.id();
            b[252..256].copy_from_slice(&r.offset_stripes.to_le_bytes());
            b[148..152].copy_from_slice(&r.id.to_le_bytes());
        }
        b[96..104].copy_from_slice(&incompatible.to_le_bytes());
        b[104..112].copy_from_slice(&compatible.to_le_bytes());
        for (i, slot) in self.member_table.iter().enumerate() {
            let at = TABLE_AT + i * ENTRY_BYTES;
            b[at] = slot.state.id();
            b[at + 2..at + 4].copy_from_slice(&slot.device.to_le_bytes());
            b[at + 4..at + 12].copy_from_slice(&slot.last_event.to_le_bytes());
        }
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse one copy. Never panics.
    pub fn decode(b: &[u8]) -> Result<Superblock, SuperblockError> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(SuperblockError::Truncated(b.len()));
        }
        if b[0..8] != MAGIC {
            return Err(SuperblockError::BadMagic);
        }
        let version = u32_at(b, 8);
        if version != VERSION || u32_at(b, 12) != SUPERBLOCK_BYTES_U32 {
            return Err(SuperblockError::Version(version));
        }
        let stored = u32_at(b, CRC_AT);
        let computed = crc32c(&b[..CRC_AT]);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let sb = Superblock {
            array_uuid: b[16..32].try_into().expect("16 bytes"),
            member_index: u16_at(b, 32),
            members: u16_at(b, 34),
            data_chunks: u16_at(b, 36),
            parity_chunks: u16_at(b, 38),
            code: CodeId::from_id(b[40]).ok_or(SuperblockError::Geometry("unknown code id"))?,
            scheme: Scheme::from_id(b[41]).ok_or(SuperblockError::Geometry("unknown scheme id"))?,
            sector_shift: b[42],
            state: match b[43] {
                0 => ArrayState::Clean,
                1 => ArrayState::Dirty,
                _ => return Err(SuperblockError::Geometry("unknown state")),
            },
            chunk_bytes: u32_at(b, 44),
            data_offset_bytes: u64_at(b, 48),
            stripes: u64_at(b, 56),
            sequence_high_water: u64_at(b, 64),
            generation: u64_at(b, 72),
            created_unix_seconds: u64_at(b, 80),
            cross_check: match b[88] {
                0 => CrossCheck::One,
                1 => CrossCheck::All,
                _ => return Err(SuperblockError::Geometry("unknown cross-check mode")),
            },
            layout: MetadataLayout {
                intent_bytes: u64_at(b, 120),
                log_bytes: u64_at(b, 136),
                state_bytes: u64_at(b, 160),
            },
            member_table: Vec::new(),
            // Compatible bits this build does not know are ignored, as their definition says.
            name: if u64_at(b, 104) & COMPAT_NAME != 0 {
                let field = &b[NAME_AT..NAME_AT + MAX_NAME_BYTES];
                let len = field.iter().position(|&c| c == 0).unwrap_or(MAX_NAME_BYTES);
                if field[len..].iter().any(|&c| c != 0) {
                    return Err(SuperblockError::Name("bytes after its end are not zero"));
                }
                let name = std::str::from_utf8(&field[..len])
                    .map_err(|_| SuperblockError::Name("not text"))?;
                check_name(name).map_err(|_| SuperblockError::Name("not a valid name"))?;
                name.to_string()
            } else {
                String::new()
            },
            journal_slots: u32_at(b, 144),
            write_journal: u64_at(b, 96) & INCOMPAT_WRITE_JOURNAL != 0,
            untrusted_listed: u64_at(b, 96) & INCOMPAT_UNTRUSTED != 0,
            zero_stripes: u64_at(b, 96) & INCOMPAT_ZERO_STRIPES != 0,
            spares: if u64_at(b, 96) & INCOMPAT_SPARES != 0 {
                spares_at(b)?
            } else {
                Vec::new()
            },
            spare_policy: (u64_at(b, 104) & COMPAT_SPARE_POLICY != 0).then(|| SparePolicy {
                delay_seconds: u32_at(b, 200),
                error_threshold: u32_at(b, 204),
            }),
            journal_devices: if u64_at(b, 96) & INCOMPAT_JOURNAL_DEVICES != 0 {
                let n = usize::from(b[209]);
                if n == 0 || n > 2 || b[210] >> n != 0 {
                    return Err(SuperblockError::Geometry(
                        "the journal device count is 0 or over 2, or a lost bit names none",
                    ));
                }
                (0..n)
                    .map(|i| crate::cursor::id_at(b, 212 + 16 * i))
                    .collect()
            } else {
                Vec::new()
            },
            journal_devices_lost: if u64_at(b, 96) & INCOMPAT_JOURNAL_DEVICES != 0 {
                b[210]
            } else {
                0
            },
            reshape: if u64_at(b, 96) & INCOMPAT_RESHAPE != 0 {
                Some(ReshapeFrom {
                    members: u16_at(b, 244),
                    data_chunks: u16_at(b, 246),
                    parity_chunks: u16_at(b, 248),
                    code: CodeId::from_id(b[250])
                        .ok_or(SuperblockError::Geometry("unknown code id of the reshape"))?,
                    offset_stripes: u32_at(b, 252),
                    id: u32_at(b, 148),
                })
            } else {
                None
            },
        };
        let incompatible = u64_at(b, 96);
        let known = INCOMPAT_BLOCK_CRCS
            | INCOMPAT_WRITE_JOURNAL
            | INCOMPAT_UNTRUSTED
            | INCOMPAT_ZERO_STRIPES
            | INCOMPAT_SPARES
            | INCOMPAT_JOURNAL_DEVICES
            | INCOMPAT_RESHAPE;
        if incompatible & !known != 0 {
            return Err(SuperblockError::Features(incompatible & !known));
        }
        if incompatible & INCOMPAT_BLOCK_CRCS == 0 {
            return Err(SuperblockError::NoBlockCrcs);
        }
        let state_at = if sb.layout.state_bytes > 0 {
            sb.layout.state_offset()
        } else {
            0
        };
        if u64_at(b, 112) != INTENT_RECORD_OFFSET
            || u64_at(b, 128) != sb.layout.log_offset()
            || u64_at(b, 152) != state_at
        {
            return Err(SuperblockError::Geometry(
                "metadata regions are not where the layout puts them",
            ));
        }
        let n = (sb.members as usize).min(MAX_MEMBERS as usize);
        let mut sb = sb;
        for i in 0..n {
            let at = TABLE_AT + i * ENTRY_BYTES;
            let state = MemberState::from_id(b[at])
                .ok_or(SuperblockError::Geometry("unknown member state"))?;
            sb.member_table.push(MemberSlot {
                state,
                device: u16::from_le_bytes([b[at + 2], b[at + 3]]),
                last_event: u64_at(b, at + 4),
            });
        }
        sb.validate()?;
        Ok(sb)
    }
}

/// The spare table of a copy whose incompatible bit 4 is set: 1 to [`MAX_SPARES`] entries,
/// each with a non-zero uuid and a hint that is text; none listed twice.
fn spares_at(b: &[u8]) -> Result<Vec<SpareEntry>, SuperblockError> {
    let bad = SuperblockError::Geometry;
    let n = usize::from(b[208]);
    if n == 0 || n > MAX_SPARES {
        return Err(bad(
            "the spare count is 0 or over 6 with the spares feature bit set",
        ));
    }
    let mut out: Vec<SpareEntry> = Vec::with_capacity(n);
    for i in 0..n {
        let at = SPARES_AT + i * SPARE_ENTRY_BYTES;
        let field = &b[at + 24..at + SPARE_ENTRY_BYTES];
        let len = field.iter().position(|&c| c == 0).unwrap_or(field.len());
        let hint = std::str::from_utf8(&field[..len])
            .map_err(|_| bad("a spare's path hint is not text"))?;
        let e = SpareEntry {
            uuid: crate::cursor::id_at(b, at),
            device_bytes: u64_at(b, at + 16),
            hint: hint.to_string(),
        };
        if e.uuid == [0; 16] || out.iter().any(|o| o.uuid == e.uuid) {
            return Err(bad("a spare's uuid is zero or listed twice"));
        }
        out.push(e);
    }
    Ok(out)
}

impl crate::Record for Superblock {
    const NAME: &'static str = "superblock";
    const MAGIC: &'static [u8] = &MAGIC;
    const VERSION: u32 = VERSION;
    const SIZE: usize = SUPERBLOCK_BYTES;
    type Error = SuperblockError;

    fn write_copy(&self, copy: &mut [u8]) -> Result<(), SuperblockError> {
        self.validate()?;
        if copy.len() != SUPERBLOCK_BYTES {
            return Err(SuperblockError::Truncated(copy.len()));
        }
        copy.copy_from_slice(&self.encode());
        Ok(())
    }

    fn read_copy(copy: &[u8]) -> Result<Option<Superblock>, SuperblockError> {
        if copy.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        Superblock::decode(copy).map(Some)
    }

    fn reseal(copy: &mut [u8]) {
        if copy.len() >= SUPERBLOCK_BYTES {
            crate::cursor::seal_tail(&mut copy[..SUPERBLOCK_BYTES]);
        }
    }
}

/// The two copies are written in turn with the same generation; the newer generation wins.
impl crate::Sequenced for Superblock {
    fn sequence(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> Superblock {
        Superblock {
            name: String::new(),
            array_uuid: [9; 16],
            member_index: 3,
            members: 8,
            data_chunks: 6,
            parity_chunks: 2,
            code: CodeId::Raid6,
            scheme: Scheme::Hybrid2,
            sector_shift: 9,
            state: ArrayState::Dirty,
            chunk_bytes: 4096,
            data_offset_bytes: MetadataLayout::for_member(1 << 20).data_offset(),
            stripes: 1000,
            sequence_high_water: 1 << 20,
            generation: 7,
            created_unix_seconds: 1_700_000_000,
            cross_check: CrossCheck::All,
            layout: MetadataLayout::for_member(1 << 20),
            journal_slots: JOURNAL_SLOTS,
            write_journal: false,
            untrusted_listed: true,
            zero_stripes: false,
            spares: Vec::new(),
            spare_policy: None,
            journal_devices: Vec::new(),
            journal_devices_lost: 0,
            reshape: None,
            member_table: (0..8)
                .map(|i| MemberSlot {
                    state: if i == 5 {
                        MemberState::Stale
                    } else {
                        MemberState::Active
                    },
                    device: i as u16,
                    last_event: if i == 5 { 3 } else { 7 },
                })
                .collect(),
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode()), Ok(sb));
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let b = sample().encode();
        for bit in 0..SUPERBLOCK_BYTES * 8 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn version_1_is_refused_by_name() {
        let mut b = sample().encode();
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let e = Superblock::decode(&b).unwrap_err();
        assert_eq!(e, SuperblockError::Version(1));
        assert!(e.to_string().contains("version 1"), "{e}");
        assert!(e.to_string().contains("recreate"), "{e}");
    }

    #[test]
    fn checksum_mirroring_with_one_data_chunk_is_refused() {
        for scheme in [Scheme::Pure, Scheme::Hybrid2] {
            let mut sb = sample();
            sb.members = 2;
            sb.data_chunks = 1;
            sb.parity_chunks = 1;
            sb.member_index = 0;
            sb.code = CodeId::Xor;
            sb.scheme = scheme;
            sb.member_table.truncate(2);
            let e = sb.validate().unwrap_err().to_string();
            assert!(e.contains("buddy"), "{e}");
            sb.scheme = Scheme::Hybrid1;
            assert!(sb.validate().is_ok());
        }
    }

    /// The name (compatible bit 0, bytes 168..200): round-trips; its bytes mean nothing with
    /// the bit clear (an older build's zeros, or a build that dropped it); a name that breaks
    /// the rules is not a valid copy; unknown compatible bits are ignored.
    #[test]
    fn the_name_is_a_compatible_feature() {
        let mut sb = sample();
        sb.name = "backup-01".into();
        let b = sb.encode();
        assert_eq!(&b[168..177], b"backup-01");
        assert_eq!(b[177], 0);
        assert_eq!(u64_at(&b, 104), COMPAT_NAME);
        assert_eq!(Superblock::decode(&b).unwrap().name, "backup-01");
        let reseal = |mut b: [u8; SUPERBLOCK_BYTES]| {
            let crc = crc32c(&b[..CRC_AT]);
            b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut clear = b;
        clear[104] = 0;
        assert_eq!(Superblock::decode(&reseal(clear)).unwrap().name, "");
        let mut unknown = b;
        unknown[104] |= 0x80;
        assert_eq!(
            Superblock::decode(&reseal(unknown)).unwrap().name,
            "backup-01"
        );
        let mut bad = b;
        bad[168] = b'-';
        assert!(matches!(
            Superblock::decode(&reseal(bad)),
            Err(SuperblockError::Name(_))
        ));
        // Bytes after the name's end: written by no build, so damage (the copy's CRC covers
        // them, so a writer wrote them).
        let mut tail = b;
        tail[190] = b'x';
        assert_eq!(
            Superblock::decode(&reseal(tail)),
            Err(SuperblockError::Name("bytes after its end are not zero"))
        );
        let mut full = b;
        full[168..200].copy_from_slice(&[b'x'; 32]);
        assert_eq!(
            Superblock::decode(&reseal(full)).unwrap().name,
            "x".repeat(32)
        );
        for ok in ["a", "db.01", "A_b-c", &"z".repeat(32)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for no in [
            "",
            "-a",
            ".a",
            "a b",
            "a/b",
            "é",
            &"z".repeat(33),
            &"ab".repeat(16),
        ] {
            assert!(check_name(no).is_err(), "{no}");
        }
    }

    #[test]
    fn incompatible_features_are_refused() {
        let mut b = sample().encode();
        b[96] = 129;
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Superblock::decode(&b), Err(SuperblockError::Features(128)));
        // Bit 4 (spares) with no spare counted is not a valid copy.
        b[96] = 17;
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&b),
            Err(SuperblockError::Geometry(_))
        ));
        // Bits 2 (untrusted blocks listed) and 3 (zero stripes, §2.7) are known, and
        // round-trip.
        let mut sb = sample();
        for on in [true, false] {
            sb.untrusted_listed = on;
            sb.zero_stripes = !on;
            let back = Superblock::decode(&sb.encode()).unwrap();
            assert_eq!((back.untrusted_listed, back.zero_stripes), (on, !on));
        }
        // The stripe-state record's offset must be where the layout puts it.
        let mut c = sample().encode();
        c[152] ^= 8;
        let crc = crc32c(&c[..CRC_AT]);
        c[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&c),
            Err(SuperblockError::Geometry(_))
        ));
        // The write journal is known; it needs a slot per member.
        let mut sb = sample();
        sb.write_journal = true;
        sb.journal_slots = 4;
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SuperblockError::Geometry(_))
        ));
        sb.journal_slots = write_journal_slots(8);
        assert!(Superblock::decode(&sb.encode()).unwrap().write_journal);
        // An array of an earlier build (no block CRCs) is refused with its own message.
        b[96] = 0;
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Superblock::decode(&b), Err(SuperblockError::NoBlockCrcs));
        assert!(SuperblockError::NoBlockCrcs
            .to_string()
            .contains("recreate"));
    }

    #[test]
    fn impossible_geometry_is_rejected_even_with_a_good_crc() {
        let mut sb = sample();
        sb.members = 9;
        assert!(matches!(
            Superblock::decode(&sb.encode()),
            Err(SuperblockError::Geometry(_))
        ));
    }

    proptest! {
        #[test]
        fn random_and_truncated_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Superblock::decode(&bytes);
        }

        #[test]
        fn truncations_of_a_valid_record_are_rejected(len in 0usize..SUPERBLOCK_BYTES) {
            let b = sample().encode();
            prop_assert!(Superblock::decode(&b[..len]).is_err());
        }
    }
}
