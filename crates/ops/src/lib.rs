//! Array administration on paths: what `create`, `status` and every command that opens an
//! array share, so the CLI (and the coming server) only parse arguments and print.
//!
//! - [`CreateOnPaths`]: numbers exactly as the user gave them, range-checked once here (the
//!   user's own number is in every error); member files created where missing, removed again if
//!   `create` fails; a member that already holds any stripeguard array is refused without `force`.
//! - [`open_member_paths`] / [`assemble_paths`]: a member that cannot be opened becomes a failed
//!   member (the engine decides whether the array survives it).
//! - [`Replacement`]: the device a replace rebuilds onto, for `replace` here and for a holder
//!   asked over its control socket alike.
//! - [`Verdict`]: what `status`, a scrub and a holder's live status come to ([`status_verdict`],
//!   [`scrub_verdict`], [`LiveStatus::verdict`]); the CLI maps it to its exit status.
//!
//! The full check of every stripe is [`stripeguard_engine::scrub`] on a read-only assembly.
//!
//! This crate sits above the engine: it opens paths and URIs (the engine takes `Disk`s), creates
//! and removes files, and runs the control socket; the engine does none of that.
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stripeguard_disk::{DiskError, DiskRef, FailedDisk, FileDisk};
use stripeguard_engine::{
    clock_utc, read_superblock_of, Array, ArrayConfig, AssembleOptions, EngineError, RealEnv,
    ReplaceForce, ReplaceSummary, APPENDIX_CACHE_ENTRIES, MAX_HEARTBEAT_MS,
};

pub mod config;
mod eventlog_sink;
mod list;
pub mod metrics;
mod scan;
pub mod sdnotify;
mod wipe;
pub use list::{list, Listed};
pub use scan::{
    candidates, candidates_noted, configured_missing, find_array, order_members, others_named,
    scan, scan_noted, FoundArray, FoundMember, FoundSpare,
};
pub use wipe::{wipe_member, wipe_preflight, Wiped};
mod examine;
pub use examine::{examine, Copy as SuperblockCopy, Examined};
mod grow;
mod reshape;
pub use reshape::{
    ask_holder_reshape, continue_reshape_paths, follow_holder_reshape, reshaped_line,
    settled_geometry, Added, LiveReshape, ReshapeRequest, ReshapeSlot,
};
mod online;
pub mod spares;
pub use eventlog_sink::{line_of, log_events, syslog};
mod probe;
pub use grow::{
    ask_holder_grow, follow_holder_grow, grow_array, grown_line, target_stripes, GrowTo, LiveGrow,
};
pub use online::{ask_holder_scrub, follow_holder_scrub, LiveScrub};
mod verdict;
pub use probe::{in_use, Confirmations, Found, Target};
use stripeguard_integrity::{CodeId, CrossCheck, Scheme, MAX_MEMBERS};
pub use verdict::{
    array_states, closing_words, logged_by_member, scrub_verdict, status_verdict, Verdict,
};

/// Largest chunk `create` accepts (FORMAT.md §2).
pub const MAX_CHUNK_BYTES: u64 = stripeguard_integrity::MAX_CHUNK_BYTES as u64;

/// A `create` request, with the user's numbers unconverted.
#[derive(Clone, Debug)]
pub struct CreateOnPaths {
    /// Member files or block devices, in member order.
    pub paths: Vec<PathBuf>,
    /// Size of each member file to create where one is missing.
    pub size_bytes: Option<u64>,
    /// Parity members `m`.
    pub parity: usize,
    /// The integrity scheme.
    pub scheme: Scheme,
    /// Chunk size.
    pub chunk_bytes: u64,
    /// Sector size (512 or 4096).
    pub sector_bytes: u64,
    /// Cross-check setting.
    pub cross_check: CrossCheck,
    /// What the operator confirmed: taking members of another array, overwriting foreign data.
    pub confirm: Confirmations,
    /// The erasure code; `None` = the usual one for the parity count (xor, raid6, rs).
    pub code: Option<CodeId>,
    /// Every write goes through the journal first ([`ArrayConfig::write_journal`]).
    pub write_journal: bool,
    /// The array's name ([`ArrayConfig::name`]; `None`: derived from the host).
    pub name: Option<String>,
    /// Keep zero stripes ([`ArrayConfig::zero_stripes`]).
    pub zero_stripes: bool,
    /// The write journal on these devices ([`ArrayConfig::journal_devices`]); a file that does
    /// not exist is made at the size the journal needs.
    pub journal_devices: Vec<PathBuf>,
}

/// The usual parity count for `n` members: RAID-6 from 6 members, else RAID-5.
pub fn default_parity(n: usize) -> usize {
    if n >= 6 {
        2
    } else {
        1
    }
}

impl CreateOnPaths {
    /// The array configuration, or an error naming the number that is out of range.
    pub fn config(&self) -> Result<ArrayConfig, EngineError> {
        let bad = |s: String| Err(EngineError::Config(s));
        let n = self.paths.len();
        let m = self.parity;
        if n > MAX_MEMBERS as usize {
            return bad(format!(
                "{n} members given; an array has at most {MAX_MEMBERS}"
            ));
        }
        let extra = self.scheme.extra_members();
        if m == 0 || m + extra >= n {
            return bad(format!(
                "{n} members cannot hold {m} parity chunk(s){} and at least one data chunk",
                if extra > 0 {
                    ", the checksum member"
                } else {
                    ""
                }
            ));
        }
        if self.sector_bytes != 512 && self.sector_bytes != 4096 {
            return bad(format!(
                "sector size {} is not 512 or 4096",
                self.sector_bytes
            ));
        }
        if self.chunk_bytes == 0
            || self.chunk_bytes > MAX_CHUNK_BYTES
            || !self.chunk_bytes.is_multiple_of(self.sector_bytes)
        {
            return bad(format!(
                "chunk size {} must be a multiple of the {}-byte sector, at most {MAX_CHUNK_BYTES} (16 MiB)",
                self.chunk_bytes, self.sector_bytes
            ));
        }
        Ok(ArrayConfig {
            data_chunks: n - m - extra,
            parity_chunks: m,
            code: self.code.unwrap_or(CodeId::for_parity(m)),
            scheme: self.scheme,
            chunk_bytes: u32::try_from(self.chunk_bytes).expect("checked ≤ 16 MiB above"),
            sector_bytes: u32::try_from(self.sector_bytes).expect("checked 512 or 4096 above"),
            stripes: None,
            first_read_map_bytes: 1 << 20,
            cross_check: self.cross_check,
            write_journal: self.write_journal,
            env: RealEnv::shared(),
            local_locks: local_locks(),
            name: self.name.clone(),
            zero_stripes: self.zero_stripes,
            journal_devices: stripeguard_engine::Devices::default(),
        })
    }

    /// Make the array: create missing member files, write every unit and the superblocks, and
    /// return it assembled and writable. On failure the files this call created are removed.
    pub fn run(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<Array, EngineError> {
        let cfg = self.config()?;
        refuse_duplicate_paths(&self.paths)?;
        let existing: Vec<&Path> = self
            .paths
            .iter()
            .map(PathBuf::as_path)
            .filter(|p| member_exists(p))
            .collect();
        self.confirm.refuse_strays(&existing)?;
        if let (None, Some(p)) = (
            self.size_bytes,
            self.paths.iter().find(|p| !member_exists(p)),
        ) {
            return Err(EngineError::Config(format!(
                "{} does not exist; give --size to create it",
                p.display()
            )));
        }
        // Every existing device is opened (a block device O_EXCL, held from here on), probed
        // and judged before anything is made or touched.
        let mut targets = Vec::new();
        for &p in &existing {
            let id = file_id(p);
            let t = Target::open(p, false)?;
            t.judge(None, &self.confirm)?;
            targets.push((t, id));
        }
        let mut created: Vec<(&Path, DiskRef)> = Vec::new();
        let result = self.make_and_create(&cfg, targets, &mut created, progress);
        if result.is_err() {
            // Removed while this call still holds the file's lock (taken when it made it): a
            // second `create` racing on the same paths can have taken none of them, so a file
            // removed here is never one it wrote its array into.
            for (p, lock) in created {
                let _ = std::fs::remove_file(p);
                drop(lock);
            }
        }
        result
    }

    /// Create the missing member files, check the whole request with the engine, then wipe the
    /// foreign signatures confirmed for overwriting (the last refusal is behind us) and write
    /// the array.
    fn make_and_create<'a>(
        &'a self,
        cfg: &ArrayConfig,
        mut targets: Vec<(Target, Option<(u64, u64)>)>,
        created: &mut Vec<(&'a Path, DiskRef)>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Array, EngineError> {
        let mut members = Vec::with_capacity(self.paths.len());
        for p in &self.paths {
            if let Some(i) = targets.iter().position(|(t, _)| &t.path == p) {
                let (t, id) = targets.remove(i);
                // Locked from here on: another `create` (or a holder) on it stops one of us.
                t.disk.try_lock(true)?;
                // Still the file that was opened: one a racing `create` made and has removed
                // again (its rollback) must not receive this array.
                if file_id(p) != id {
                    return Err(EngineError::Config(format!(
                        "{} was removed or replaced while this command opened it (another `create` on the same paths?)",
                        p.display()
                    )));
                }
                members.push(t);
                continue;
            }
            let size = self
                .size_bytes
                .expect("checked above: every missing member has a size");
            FileDisk::create(p, size, false)?;
            let t = Target::open(p, false)?;
            if t.disk.try_lock(true).is_err() {
                // Another `create` opened and locked the file in the instant after this one
                // made it: it is that one's now, and not removed on the way out.
                return Err(EngineError::Config(format!(
                    "{} was taken by another command as soon as it was made (two `create`s on the same paths?)",
                    p.display()
                )));
            }
            created.push((p, DiskRef::clone(&t.disk)));
            members.push(t);
        }
        let fresh = created.len() == self.paths.len();
        let disks: Vec<DiskRef> = members.iter().map(|t| DiskRef::clone(&t.disk)).collect();
        let mut cfg = cfg.clone();
        let mut journal = Vec::new();
        for (i, p) in self.journal_devices.iter().enumerate() {
            if self.journal_devices[..i].contains(p) {
                return Err(EngineError::Config(format!(
                    "{} is given twice as a journal device (a mirror needs two devices)",
                    p.display()
                )));
            }
            if self.paths.contains(p) {
                return Err(EngineError::Config(format!(
                    "{} is given as a member and as a journal device",
                    p.display()
                )));
            }
            if !member_exists(p) {
                // The label and the journal's slots (FORMAT.md §2.12).
                let slots = stripeguard_engine::NEW_DEVICE_SLOTS;
                let size = stripeguard_format::JDEV_SLOTS_AT + slots * (4096 + cfg.unit_bytes());
                FileDisk::create(p, size, false)?;
                let t = Target::open(p, false)?;
                t.disk.try_lock(true)?;
                created.push((p, DiskRef::clone(&t.disk)));
                journal.push(t);
                continue;
            }
            let t = Target::open(p, false)?;
            t.judge(None, &self.confirm)?;
            t.disk.try_lock(true)?;
            journal.push(t);
        }
        cfg.journal_devices =
            stripeguard_engine::Devices(journal.iter().map(|t| DiskRef::clone(&t.disk)).collect());
        Array::create_preflight(&disks, &cfg)?;
        for t in members.iter().chain(&journal) {
            t.wipe()?;
        }
        drop(members);
        drop(journal);
        let array = Array::create(disks, &cfg, fresh, progress)?;
        array.enable_appendix_cache(APPENDIX_CACHE_ENTRIES);
        Ok(array)
    }
}

/// A path's device and inode (symlinks followed), when it has one.
fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a member is there: a file or device that exists, or an NBD export (which is asked
/// when it is opened).
pub fn member_exists(p: &Path) -> bool {
    p.to_str().is_some_and(stripeguard_nbd::is_uri) || p.exists()
}

/// Open one member: an NBD URI (`nbd://host:port/export`, `nbd+unix:///export?socket=PATH`)
/// through the NBD client, anything else as a file or block device.
pub fn open_member(p: &Path, direct: bool) -> Result<DiskRef, DiskError> {
    open_member_as(p, direct, false)
}

/// [`open_member`]; with `exclusive`, a block device is opened `O_EXCL` (held for as long as
/// the handle lives, as md holds its members; refused while mounted or held by another).
pub fn open_member_as(p: &Path, direct: bool, exclusive: bool) -> Result<DiskRef, DiskError> {
    open_member_how(p, direct, exclusive, true)
}

/// [`open_member_as`]; without `write`, a file or device is opened read-only (NBD exports are
/// asked as they are).
pub(crate) fn open_member_how(
    p: &Path,
    direct: bool,
    exclusive: bool,
    write: bool,
) -> Result<DiskRef, DiskError> {
    let refuse = |why: &str| DiskError::Io {
        name: display_member(p),
        op: "open",
        offset: 0,
        len: 0,
        source: std::io::Error::other(why.to_string()),
    };
    // A slot a scan did not find (FoundArray::member_paths): never a file, whatever exists.
    if let Some(why) = scan::not_found(p) {
        return Err(refuse(&why));
    }
    if let Some(uri) = p.to_str().filter(|u| stripeguard_nbd::is_uri(u)) {
        return Ok(Arc::new(stripeguard_nbd::NbdDisk::open(uri)?) as DiskRef);
    }
    // A FIFO would block the open until a writer came; a socket or character device is no
    // member either.
    if let Ok(m) = std::fs::metadata(p) {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() || t.is_socket() || t.is_char_device() || t.is_dir() {
            return Err(refuse(if t.is_fifo() {
                "a FIFO, not a file or block device"
            } else if t.is_socket() {
                "a socket, not a file or block device"
            } else if t.is_dir() {
                "a directory, not a file or block device"
            } else {
                "a character device, not a file or block device"
            }));
        }
    }
    match p.to_str() {
        _ if !write => Ok(Arc::new(FileDisk::open_read_only(p, direct)?) as DiskRef),
        _ if exclusive => Ok(Arc::new(FileDisk::open_exclusive(p, direct)?) as DiskRef),
        _ => Ok(Arc::new(FileDisk::open(p, direct)?) as DiskRef),
    }
}

/// How a member path is named in messages (a slot a scan did not find by its words).
pub fn display_member(p: &Path) -> String {
    scan::not_found(p)
        .map(|_| p.display().to_string().replace('\0', ""))
        .unwrap_or_else(|| p.display().to_string())
}

/// A block device the kernel refused to open exclusively: why it is in use, as an error.
fn busy(p: &Path, e: &DiskError) -> Option<EngineError> {
    let DiskError::Io { source, .. } = e else {
        return None;
    };
    (source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())).then(|| {
        EngineError::Config(format!(
            "{} is in use ({}); stripeguard never writes a device in use",
            p.display(),
            probe::in_use(p).unwrap_or_else(|| "the kernel says it is busy".into())
        ))
    })
}

/// Open members by path or URI, read-only; one that cannot be opened is a failed member whose
/// reason says why (the engine decides whether the array survives it).
///
/// A test hook: with `STRIPEGUARD_TEST_ABORT_AFTER_WRITES=N` in the environment, the process
/// aborts before its `N`th member write (counted over every member), as a `kill -9` would stop
/// it at that write (crates/cli/tests/crash_cli.rs).
pub fn open_member_paths(paths: &[PathBuf], direct: bool) -> Vec<DiskRef> {
    let abort = abort_hook();
    paths
        .iter()
        .map(|p| {
            open_or_failed(p, direct, false, false, &abort).unwrap_or_else(|e| {
                Arc::new(FailedDisk::new(display_member(p), e.to_string())) as DiskRef
            })
        })
        .collect()
}

/// [`open_member_paths`]; with `exclusive` (a writable assembly), files and devices are opened
/// for writing and block devices `O_EXCL` (else read-only), and one in use is an error rather
/// than a failed member (it is not failed: someone
/// else has it, and writing the array around it would mark it so).
fn open_member_paths_as(
    paths: &[PathBuf],
    direct: bool,
    exclusive: bool,
) -> Result<Vec<DiskRef>, EngineError> {
    let abort = abort_hook();
    paths
        .iter()
        .map(|p| open_or_failed(p, direct, exclusive, exclusive, &abort))
        .collect()
}

/// The test hook's shared count of member writes left, when set.
fn abort_hook() -> Option<Arc<std::sync::atomic::AtomicU64>> {
    std::env::var("STRIPEGUARD_TEST_ABORT_AFTER_WRITES")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .map(|n| Arc::new(std::sync::atomic::AtomicU64::new(n)))
}

/// One member opened, or a failed member saying why it could not be; an error only for a block
/// device in use when opened `exclusive`.
fn open_or_failed(
    p: &Path,
    direct: bool,
    exclusive: bool,
    write: bool,
    abort: &Option<Arc<std::sync::atomic::AtomicU64>>,
) -> Result<DiskRef, EngineError> {
    match open_member_how(p, direct, exclusive, write) {
        Ok(d) => Ok(match abort {
            Some(left) => {
                Arc::new(stripeguard_disk::AbortDisk::new(d, Arc::clone(left))) as DiskRef
            }
            None => d,
        }),
        Err(e) => match busy(p, &e).filter(|_| exclusive) {
            Some(err) => Err(err),
            None => Ok(Arc::new(FailedDisk::new(display_member(p), e.reason())) as DiskRef),
        },
    }
}

/// Assemble the array on `paths`.
pub fn assemble_paths(
    paths: &[PathBuf],
    direct: bool,
    writable: bool,
) -> Result<Array, EngineError> {
    let opts = AssembleOptions {
        writable,
        ..AssembleOptions::default()
    };
    assemble_paths_with(paths, direct, &opts)
}

/// [`assemble_paths`] with every option (`no_wait`: refuse at once instead of waiting for a
/// holder on another host that may be gone).
pub fn assemble_paths_with(
    paths: &[PathBuf],
    direct: bool,
    opts: &AssembleOptions,
) -> Result<Array, EngineError> {
    refuse_duplicate_paths(paths)?;
    let opts = AssembleOptions {
        heartbeat: heartbeat_interval().unwrap_or(opts.heartbeat),
        local_locks: opts.local_locks && local_locks(),
        ..opts.clone()
    };
    let opened = open_member_paths_as(paths, direct, opts.writable)?;
    // A device carrying a journal device label is one of the array's journal devices
    // (FORMAT.md §2.12), wherever it was given; the others are the members, in order.
    let (journal, members): (Vec<DiskRef>, Vec<DiskRef>) = opened
        .into_iter()
        .partition(|d| stripeguard_engine::read_journal_device_label(d.as_ref()).is_some());
    // Another array's journal device given here would be ignored and this array's own missed
    // (then lost for good at a writable assembly): refused, naming it.
    let ours = members
        .iter()
        .find_map(|d| stripeguard_engine::read_superblock_of(d.as_ref()).ok())
        .map(|sb| sb.array_uuid);
    for d in &journal {
        let label = stripeguard_engine::read_journal_device_label(d.as_ref());
        if let (Some(l), Some(u)) = (label, ours) {
            if l.array_uuid != u {
                return Err(EngineError::Config(format!(
                    "{} is the journal device of another array ({}), not of this one ({}): give this array's own journal device",
                    d.name(),
                    stripeguard_format::hex(&l.array_uuid),
                    stripeguard_format::hex(&u)
                )));
            }
        }
    }
    let opts = AssembleOptions {
        journal_devices: stripeguard_engine::Devices(journal),
        ..opts
    };
    let array = match Array::assemble(members, &opts) {
        Err(EngineError::SplitBrain(why)) => {
            // Nothing reaches the members of an array refused; the refusal reaches syslog.
            eventlog_sink::log_refusal("split-brain-refused", &why);
            return Err(EngineError::SplitBrain(why));
        }
        other => other?,
    };
    array.enable_appendix_cache(APPENDIX_CACHE_ENTRIES);
    Ok(array)
}

/// The heartbeat interval `STRIPEGUARD_HEARTBEAT_MS` asks for (tests use a short one), bounded
/// to `1..=MAX_HEARTBEAT_MS`; `None` when unset (the engine's default then).
fn heartbeat_interval() -> Option<Duration> {
    let ms = std::env::var("STRIPEGUARD_HEARTBEAT_MS")
        .ok()?
        .trim()
        .parse::<u32>()
        .ok()?;
    Some(Duration::from_millis(u64::from(
        ms.clamp(1, MAX_HEARTBEAT_MS),
    )))
}

/// Whether members are locked with `flock`: not with `STRIPEGUARD_NO_LOCAL_LOCKS=1`, for
/// filesystems whose locks do not cross hosts (FORMAT.md §2.2).
fn local_locks() -> bool {
    std::env::var_os("STRIPEGUARD_NO_LOCAL_LOCKS").is_none_or(|v| v != "1")
}

/// The time of day, UTC, `after` from now: when a wait that starts now ends.
pub fn clock_utc_in(after: Duration) -> String {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after);
    clock_utc(u64::try_from(at.as_millis()).unwrap_or(u64::MAX))
}

/// One file or device named twice in a member list (the same path, or two names of one
/// inode) would be locked against itself; say what it is instead.
fn refuse_duplicate_paths(paths: &[PathBuf]) -> Result<(), EngineError> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        // The inode (or device number) when it exists; else the absolute path (create); an
        // NBD export by its server (a socket's inode) and export name, whatever the options.
        let id = probe::identity(p);
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == id) {
            return Err(EngineError::Assemble(format!(
                "members {first} and {i} are the same file or device ({} and {}): give each member once",
                paths[*first].display(),
                p.display()
            )));
        }
        seen.push((id, i));
    }
    Ok(())
}

/// Where the process holding array `uuid` answers `status` and `events` (FORMAT.md §3): under
/// `/run/stripeguard` when it can be made (root), else the temporary directory.
pub fn control_socket_path(uuid: &[u8; 16]) -> PathBuf {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    let run = Path::new(CONTROL_DIR);
    let dir = if std::fs::create_dir_all(run).is_ok() {
        run.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("stripeguard-{hex}.sock"))
}

/// Where control sockets live when the directory can be made (root).
pub const CONTROL_DIR: &str = "/run/stripeguard";

/// The live state a holder reports over its control socket.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LiveStatus {
    /// The array's name and uuid (hex) (empty from holders of builds before names).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    /// The holder's process id.
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// Counters so far.
    pub detected: u64,
    /// Units found wrong.
    pub located: u64,
    /// Units repaired.
    pub repaired: u64,
    /// Stripes refused.
    pub unrecoverable: u64,
    /// Stripes resynced.
    pub resynced: u64,
    /// Members out of the array, with why.
    pub out: Vec<(usize, String)>,
    /// The most recent events, as text.
    pub recent_events: Vec<String>,
    /// Counters of the holder's front end (a server's connections, requests, bytes), by name.
    #[serde(default)]
    pub front_end: Vec<(String, u64)>,
    /// The front end's request latency histograms, by command.
    #[serde(default)]
    pub front_end_latency: Vec<metrics::LatencyHistogram>,
    /// A replace the holder runs (or ran) on request (`stripeguard replace` while it serves).
    #[serde(default)]
    pub replace: Option<LiveReplace>,
    /// Ranges listed untrusted (FORMAT.md §2.7).
    #[serde(default)]
    pub untrusted: Vec<stripeguard_integrity::UntrustedRange>,
    /// Each member's device as the holder has it, by index (after an online replace, the new
    /// device: the member list to give from then on).
    #[serde(default)]
    pub members: Vec<String>,
    /// A scrub the holder runs (or ran) on request (`stripeguard scrub` while it serves).
    #[serde(default)]
    pub scrub: Option<LiveScrub>,
    /// Zero stripes (FORMAT.md §2.7): stripes and ranges, when the array keeps them.
    #[serde(default)]
    pub zero_stripes: Option<(u64, usize)>,
    /// A grow the holder runs (or ran) on request (`stripeguard grow` while it serves).
    #[serde(default)]
    pub grow: Option<LiveGrow>,
    /// The array's bytes now (0 from holders of builds before `grow`).
    #[serde(default)]
    pub capacity_bytes: u64,
    /// The hot spares the array lists, and whether each is where the holder looks for it.
    #[serde(default)]
    pub spares: Vec<spares::SpareState>,
    /// A reshape the holder runs (or ran) on request (`stripeguard grow --add` while it serves).
    #[serde(default)]
    pub reshape: Option<LiveReshape>,
}

/// A replace run by the holder of the array.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LiveReplace {
    pub member: usize,
    pub target: String,
    pub running: bool,
    pub done: u64,
    pub total: u64,
    /// When finished: what it did, or why it failed.
    pub outcome: Option<String>,
    pub ok: bool,
}

/// The device a replace rebuilds onto, opened; a file opening it made is removed again when the
/// replace fails before the array's checkpoint records the rebuild onto it.
pub struct Replacement {
    disk: DiskRef,
    created: Option<PathBuf>,
    /// The probed device, when it existed (wiped, if confirmed, just before the replace).
    target: Option<Target>,
}

impl Replacement {
    /// Open `path` to rebuild `member` onto. With `own_slot` (the path is the one the array was
    /// given for that member: the device coming back, a re-add the engine checks) the handle
    /// the array already holds open and locked, when it holds one; else an existing file,
    /// device or NBD export; else a new file of the member size.
    ///
    /// Any other existing device is opened once (a block device `O_EXCL`) and probed
    /// ([`Target`]): one in use is refused, one holding another array needs `confirm.take`,
    /// foreign data `confirm.overwrite` (wiped only in [`Replacement::run`], after the engine's
    /// preflight); a member of this array is the engine's to judge (a re-add, an older copy of
    /// a slot, a `--force-take`), unless it is another current member of it.
    pub fn open(
        array: &Array,
        member: usize,
        path: &Path,
        own_slot: bool,
        direct: bool,
        confirm: &Confirmations,
    ) -> Result<Self, EngineError> {
        if let Some(disk) = own_slot
            .then(|| array.member_disk(member))
            .flatten()
            .filter(|d| d.size_bytes() > 0)
        {
            return Ok(Self {
                disk,
                created: None,
                target: None,
            });
        }
        if member_exists(path) {
            confirm.refuse_strays(&[path])?;
            let t = Target::open(path, direct)?;
            t.judge(Some((array, member)), confirm)?;
            return Ok(Self {
                disk: DiskRef::clone(&t.disk),
                created: None,
                target: Some(t),
            });
        }
        confirm.refuse_strays(&[])?;
        let size = array.superblock().member_bytes();
        Ok(Self {
            disk: Arc::new(FileDisk::create(path, size, direct)?) as DiskRef,
            created: Some(path.to_path_buf()),
            target: None,
        })
    }

    /// The device, the file this made (if it made one), and the probed device (if it existed).
    pub(crate) fn into_parts(self) -> (DiskRef, Option<PathBuf>, Option<Target>) {
        (self.disk, self.created, self.target)
    }

    /// Every refusal [`Replacement::run`] could make before it writes ([`Array::replace_preflight`]);
    /// a file [`Replacement::open`] made is removed again when refused.
    pub fn preflight(
        &self,
        array: &Array,
        member: usize,
        force: ReplaceForce,
    ) -> Result<(), EngineError> {
        let r = array.replace_preflight(member, &self.disk, force);
        if let (Err(_), Some(p)) = (&r, &self.created) {
            let _ = std::fs::remove_file(p);
        }
        r
    }

    /// Rebuild `member` onto it (`progress(done, total)` by stripe): the preflight, then the
    /// confirmed wipe of foreign signatures, then the replace. When the replace fails, a file
    /// [`Replacement::open`] made is removed again unless the array's checkpoint records the
    /// rebuild onto it (the next replace resumes there).
    pub fn run(
        self,
        array: &Array,
        member: usize,
        force: ReplaceForce,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<ReplaceSummary, EngineError> {
        self.preflight(array, member, force)?;
        if let Some(t) = &self.target {
            t.wipe()?;
        }
        let result = array.replace(member, self.disk, force, progress);
        if let (Err(_), Some(p)) = (&result, &self.created) {
            if array.checkpoint().and_then(|c| c.rebuild_member).is_none() {
                let _ = std::fs::remove_file(p);
            }
        }
        result
    }
}

/// Run `body` while answering `status` requests on the array's control socket from another
/// thread (the CLI's writing commands and, later, the server). The socket is removed after.
pub fn with_control_socket<R>(array: &Array, body: impl FnOnce() -> R) -> R {
    with_control_socket_and(array, &Vec::new, body)
}

/// [`with_control_socket`], with `front_end` giving the holder's own counters (the NBD server's).
pub fn with_control_socket_and<R>(
    array: &Array,
    front_end: &(dyn Fn() -> Vec<(String, u64)> + Sync),
    body: impl FnOnce() -> R,
) -> R {
    with_control_socket_hooks(
        array,
        &HolderHooks {
            front_end,
            latency: None,
            stop: None,
            reshape: None,
        },
        body,
    )
}

/// What a holder's front end adds to its control socket.
pub struct HolderHooks<'a> {
    /// The front end's own counters (the NBD server's), by name.
    pub front_end: &'a (dyn Fn() -> Vec<(String, u64)> + Sync),
    /// The front end's request latency histograms.
    pub latency: Option<&'a (dyn Fn() -> Vec<metrics::LatencyHistogram> + Sync)>,
    /// Asked to stop (`stripeguard stop [--force]`, FORMAT.md §3): `Ok` when it will, else
    /// why not (clients connected, without `force`); `None`: this holder is not stopped so.
    pub stop: Option<&'a (dyn Fn(bool) -> Result<(), String> + Sync)>,
    /// The array as the front end serves it, which a reshape may run on (`serve`); `None`:
    /// this holder does not reshape.
    pub reshape: Option<&'a Arc<ReshapeSlot>>,
}

/// [`with_control_socket_and`] with every hook a holder can give.
pub fn with_control_socket_hooks<R>(
    array: &Array,
    hooks: &HolderHooks<'_>,
    body: impl FnOnce() -> R,
) -> R {
    let front_end = hooks.front_end;
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    let path = control_socket_path(&array.superblock().array_uuid);
    let _ = std::fs::remove_file(&path);
    // Mode 0600 (FORMAT.md §3): set by the umask around bind, never by a chmod of the path,
    // which a user who can write the socket's directory (the temporary directory) could swap
    // for a symlink. Another thread creating a file in this instant gets a stricter mode, never
    // a looser one.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(&path);
    rustix::process::umask(old);
    let Ok(listener) = bound else {
        return body();
    };
    if listener.set_nonblocking(true).is_err() {
        return body();
    }
    let stop = AtomicBool::new(false);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let replacing: std::sync::Mutex<Option<LiveReplace>> = std::sync::Mutex::new(None);
    let scrubbing = online::ScrubSlot::default();
    let growing = grow::GrowSlot::default();
    let out = std::thread::scope(|s| {
        let replacing = &replacing;
        let scrubbing = &scrubbing;
        let growing = &growing;
        s.spawn(|| {
            let mut keeper = spares::Keeper::default();
            let mut last_look = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let line = read_request(&conn, 4096, std::time::Duration::from_secs(2));
                        // Only the newline ends the request: TARGET's own bytes (a trailing
                        // space) are kept, and a replace cut short (no newline) is refused.
                        let whole = line.ends_with('\n');
                        let reply = match line.strip_suffix('\n').unwrap_or(&line) {
                            r if r.trim() == "status" => {
                                let c = array.counters();
                                let live = LiveStatus {
                                    name: array.superblock().name.clone(),
                                    uuid: stripeguard_format::hex(&array.superblock().array_uuid),
                                    pid: std::process::id(),
                                    command: command.clone(),
                                    detected: c.detected,
                                    located: c.located,
                                    repaired: c.repaired,
                                    unrecoverable: c.unrecoverable,
                                    resynced: c.resynced,
                                    out: array
                                        .health()
                                        .into_iter()
                                        .filter_map(|h| h.failed.map(|w| (h.index, w)))
                                        .collect(),
                                    members: array
                                        .health()
                                        .into_iter()
                                        .map(|h| h.name)
                                        .collect(),
                                    recent_events: array
                                        .events()
                                        .iter()
                                        .rev()
                                        .take(20)
                                        .map(|e| {
                                            format!(
                                                "{}: {} — {}",
                                                stripeguard_engine::event_place(
                                                    e.kind,
                                                    e.role,
                                                    e.stripe,
                                                    e.member,
                                                    e.position,
                                                    usize::from(array.superblock().data_chunks),
                                                    None,
                                                ),
                                                e.kind,
                                                e.evidence
                                            )
                                        })
                                        .collect(),
                                    front_end: front_end(),
                                    front_end_latency: hooks
                                        .latency
                                        .map(|l| l())
                                        .unwrap_or_default(),
                                    replace: replacing.lock().expect("lock").clone(),
                                    scrub: scrubbing.state.lock().expect("lock").clone(),
                                    untrusted: array.untrusted(),
                                    zero_stripes: array
                                        .keeps_zero_stripes()
                                        .then(|| array.zero_stripe_count()),
                                    grow: growing.state.lock().expect("lock").clone(),
                                    spares: spares::spare_states(array),
                                    capacity_bytes: array.capacity_bytes(),
                                    reshape: hooks.reshape.and_then(|r| r.status()),
                                };
                                serde_json::to_string(&live).unwrap_or_default()
                            }
                            req if (req.starts_with("replace ")
                                || req == "scrub"
                                || req.starts_with("scrub ")
                                || req.starts_with("grow ")
                                || req.starts_with("add-spare ")
                                || req.starts_with("remove-spare ")
                                || req.starts_with("spare-policy "))
                                && hooks.reshape.is_some_and(|r| r.busy()) =>
                            {
                                serde_json::json!({ "error": "a reshape is running in this holder (or stopped mid-way: `status` says); ask again when it has finished" }).to_string()
                            }
                            req if req.starts_with("reshape ") && !whole => {
                                serde_json::json!({ "error": "a reshape request must end with a newline (cut short, or over 4096 bytes)" })
                                    .to_string()
                            }
                            req if req.starts_with("reshape ") && !may_change(&conn) => {
                                forbidden("ask it to reshape the array")
                            }
                            req if req.starts_with("reshape ") => match hooks.reshape {
                                None => serde_json::json!({ "error": "this holder does not reshape the array (stop it, then `grow --add` runs offline)" }).to_string(),
                                Some(_) if growing.running() || scrubbing.running() || replacing.lock().expect("lock").as_ref().is_some_and(|r| r.running) => {
                                    serde_json::json!({ "error": "a grow, scrub or replace is running in this holder; reshape when it has finished" }).to_string()
                                }
                                Some(r) => match r.start(req) {
                                    Ok(()) => "{\"started\":true}".to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                },
                            },
                            req if req.starts_with("replace ") && !whole => {
                                serde_json::json!({ "error": "a replace request must end with a newline (cut short, or over 4096 bytes)" })
                                    .to_string()
                            }
                            req if req.starts_with("replace ") && !may_change(&conn) => {
                                forbidden("ask it to replace a member")
                            }
                            req if (req == "scrub" || req.starts_with("scrub ")) && !may_change(&conn) => {
                                forbidden("ask it to scrub")
                            }
                            req if req == "scrub" || req.starts_with("scrub ") => {
                                let replace_running = replacing
                                    .lock()
                                    .expect("lock")
                                    .as_ref()
                                    .is_some_and(|r| r.running);
                                match online::start_scrub(array, req, scrubbing, replace_running, s) {
                                    Ok(()) => "{\"started\":true}".to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                }
                            }
                            req if (req == "stop" || req == "stop --force") && !may_change(&conn) => {
                                forbidden("ask it to stop")
                            }
                            req if req == "stop" || req == "stop --force" => match hooks.stop {
                                None => serde_json::json!({ "error": "this holder is not stopped over its control socket (stop the program that runs it)" }).to_string(),
                                Some(stop) => match stop(req.ends_with("--force")) {
                                    Ok(()) => "{\"stopping\":true}".to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                },
                            },
                            req if req.starts_with("grow ") && !may_change(&conn) => {
                                forbidden("ask it to grow the array")
                            }
                            req if req.starts_with("grow ") => {
                                match grow::start_grow(array, req, growing, s) {
                                    Ok(()) => "{\"started\":true}".to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                }
                            }
                            req if (req.starts_with("add-spare ")
                                || req.starts_with("remove-spare ")
                                || req.starts_with("spare-policy "))
                                && !may_change(&conn) =>
                            {
                                forbidden("change the array's spares")
                            }
                            req if req.starts_with("add-spare ")
                                || req.starts_with("remove-spare ")
                                || req.starts_with("spare-policy ") =>
                            {
                                match spares::serve_request(array, req, whole) {
                                    Ok(v) => v.to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                }
                            }
                            req if req.starts_with("replace ") && growing.running() => {
                                serde_json::json!({ "error": "a grow is running in this holder; replace when it has finished" }).to_string()
                            }
                            req if req.starts_with("replace ") && scrubbing.running() => {
                                serde_json::json!({ "error": "a scrub or check is running in this holder; replace when it has finished (`status` shows its progress)" }).to_string()
                            }
                            req if req.starts_with("replace ") => {
                                match start_replace(array, req, replacing, s) {
                                    Ok(()) => "{\"started\":true}".to_string(),
                                    Err(e) => serde_json::json!({ "error": e }).to_string(),
                                }
                            }
                            other => serde_json::json!({ "error": format!(
                                "unknown request {:?} (this holder answers: status, replace, scrub, grow, reshape, add-spare, remove-spare, spare-policy, stop)",
                                other.chars().take(32).collect::<String>()
                            ) })
                            .to_string(),
                        };
                        let mut w = &conn;
                        let _ = w.write_all(reply.as_bytes());
                        let _ = w.write_all(b"\n");
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
                // Once a second: a member out for the spare delay gets a hot spare.
                if last_look.elapsed() >= std::time::Duration::from_secs(1) {
                    last_look = std::time::Instant::now();
                    keeper.look(array, replacing, s);
                }
            }
        });
        let r = body();
        stop.store(true, Ordering::Relaxed);
        // A replace or scrub still running stops at its next stripe and resumes when run again.
        array.cancel_rebuild();
        scrubbing.cancel.store(true, Ordering::Relaxed);
        r
    });
    let _ = std::fs::remove_file(&path);
    out
}

/// One request line from `conn`: bytes up to and including the newline, at most `max` of them,
/// within `limit` in all (a peer that trickles a byte at a time, or sends nothing, is cut off
/// when the time is up: one slow peer must not hold the holder's other clients, nor its stop).
fn read_request(
    conn: &std::os::unix::net::UnixStream,
    max: usize,
    limit: std::time::Duration,
) -> String {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut byte = [0u8; 256];
    while got.len() < max && !got.ends_with(b"\n") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            break;
        }
        let want = (max - got.len()).min(byte.len());
        match (&*conn).read(&mut byte[..want]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Nothing past the first newline belongs to this request.
                let upto = byte[..n]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(n, |i| i + 1);
                got.extend_from_slice(&byte[..upto]);
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The reply refusing a request that changes the array to a peer [`may_change`] refuses:
/// `what` it may not do ("ask it to scrub").
fn forbidden(what: &str) -> String {
    serde_json::json!({ "error": format!(
        "only root or the holder's user (uid {}) may {what}",
        rustix::process::geteuid().as_raw()
    ) })
    .to_string()
}

/// Whether the peer of `conn` may change the array's state: root, or the holder's own user
/// (by the kernel's peer credentials; a peer whose credentials cannot be read may not).
fn may_change(conn: &std::os::unix::net::UnixStream) -> bool {
    rustix::net::sockopt::socket_peercred(conn)
        .is_ok_and(|c| peer_may_change(c.uid.as_raw(), rustix::process::geteuid().as_raw()))
}

/// The rule of [`may_change`]: root, or the holder's user.
fn peer_may_change(peer: u32, holder: u32) -> bool {
    peer == 0 || peer == holder
}

/// `replace MEMBER TARGET`: check it and start the replace on a thread of the holder's scope.
fn start_replace<'scope>(
    array: &'scope Array,
    req: &str,
    state: &'scope std::sync::Mutex<Option<LiveReplace>>,
    scope: &'scope std::thread::Scope<'scope, '_>,
) -> Result<(), String> {
    // `replace [--force ][--force-take ][--force-overwrite ]MEMBER TARGET` (TARGET may hold
    // spaces: it is the rest of the line).
    let mut rest = req.strip_prefix("replace ").unwrap_or(req);
    let (mut force, mut overwrite) = (ReplaceForce::NONE, false);
    loop {
        if let Some(r) = rest.strip_prefix("--force ") {
            force.retire = true;
            rest = r;
        } else if let Some(r) = rest.strip_prefix("--force-take ") {
            force.take = true;
            rest = r;
        } else if let Some(r) = rest.strip_prefix("--force-overwrite ") {
            overwrite = true;
            rest = r;
        } else {
            break;
        }
    }
    let mut words = rest.splitn(2, ' ');
    let member: usize = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or("replace MEMBER TARGET: MEMBER must be a member index")?;
    let target = words
        .next()
        .filter(|t| !t.is_empty())
        .ok_or("replace MEMBER TARGET: TARGET is missing")?
        .to_string();
    let confirm = Confirmations {
        overwrite: if overwrite {
            vec![PathBuf::from(&target)]
        } else {
            Vec::new()
        },
        take: if force.take {
            vec![PathBuf::from(&target)]
        } else {
            Vec::new()
        },
        take_all: false,
    };
    launch_replace(array, member, target, force, &confirm, state, scope)
}

/// Check a replace of `member` onto `target` and start it on a thread of the holder's scope
/// (asked over the control socket, or a spare taking a member's place).
pub(crate) fn launch_replace<'scope>(
    array: &'scope Array,
    member: usize,
    target: String,
    force: ReplaceForce,
    confirm: &Confirmations,
    state: &'scope std::sync::Mutex<Option<LiveReplace>>,
    scope: &'scope std::thread::Scope<'scope, '_>,
) -> Result<(), String> {
    if !array.is_writable() {
        return Err("this holder has the array read-only".into());
    }
    if state
        .lock()
        .expect("lock")
        .as_ref()
        .is_some_and(|r| r.running)
    {
        return Err("a replace is already running in this holder".into());
    }
    let replacement = Replacement::open(array, member, Path::new(&target), false, false, confirm)
        .map_err(|e| e.to_string())?;
    // Every refusal answers the request itself, before anything is written or started.
    replacement
        .preflight(array, member, force)
        .map_err(|e| e.to_string())?;
    *state.lock().expect("lock") = Some(LiveReplace {
        member,
        target: target.clone(),
        running: true,
        ..LiveReplace::default()
    });
    scope.spawn(move || {
        let result = replacement.run(array, member, force, &mut |done, total| {
            if let Some(r) = state.lock().expect("lock").as_mut() {
                r.done = done;
                r.total = total;
            }
        });
        // A flush makes the new member's state durable with everything written meanwhile.
        let result = result.and_then(|s| array.flush().map(|()| s));
        let mut st = state.lock().expect("lock");
        let r = st.as_mut().expect("set above");
        r.running = false;
        match result {
            Ok(sum) => {
                r.ok = true;
                r.outcome = Some(format!(
                    "rebuilt member {} onto {}: {} stripe(s){}; {} silently wrong survivor unit(s) repaired",
                    sum.member,
                    target,
                    sum.stripes_rebuilt,
                    match (&sum.full_rebuild_reason, sum.readded) {
                        (_, true) => " (re-added through the write-intent record)".to_string(),
                        (Some(why), false) => format!(
                            " (this slot's own device back, rebuilt in full, not re-added: {why})"
                        ),
                        (None, false) => String::new(),
                    },
                    sum.survivors_repaired
                ));
            }
            Err(e) => r.outcome = Some(e.to_string()),
        }
    });
    Ok(())
}

/// Ask the process holding array `uuid` to replace `member` with `target` (an absolute path or
/// a URI); progress and the outcome come with its `status`.
pub fn ask_holder_replace(
    uuid: &[u8; 16],
    member: usize,
    target: &str,
    force: ReplaceForce,
    overwrite: bool,
) -> Result<(), String> {
    if target.contains('\n') {
        return Err(format!(
            "{target:?} holds a newline, which the control socket's one-line request cannot carry; rename it"
        ));
    }
    let flags: String = [
        (force.retire, "--force "),
        (force.take, "--force-take "),
        (overwrite, "--force-overwrite "),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, f)| *f)
    .collect();
    ask_holder_to(uuid, &format!("replace {flags}{member} {target}"))
}

/// Ask the process holding array `uuid` to stop (`force`: even with clients connected).
pub fn ask_holder_stop(uuid: &[u8; 16], force: bool) -> Result<(), String> {
    ask_holder_to(uuid, if force { "stop --force" } else { "stop" })
}

/// Send one request that changes the array (`replace ...`, `scrub ...`) to the process holding
/// array `uuid`; `Ok` when it started, else the holder's refusal.
pub(crate) fn ask_holder_to(uuid: &[u8; 16], req: &str) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Write};
    // The holder reads at most 4096 bytes of a request (FORMAT.md §3).
    if req.len() + 1 > 4096 {
        return Err(format!(
            "the request is {} bytes, over the control socket's 4096 (a path that long cannot be sent to the holder)",
            req.len() + 1
        ));
    }
    let path = control_socket_path(uuid);
    let mut conn = std::os::unix::net::UnixStream::connect(&path)
        .map_err(|e| format!("no control socket at {} ({e})", path.display()))?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    conn.write_all(format!("{req}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(conn, 1 << 20))
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| format!("the holder's answer: {e}"))?;
    match v.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// Ask the process holding array `uuid` for its live status.
pub fn ask_holder(uuid: &[u8; 16]) -> Result<LiveStatus, String> {
    use std::io::{BufRead, BufReader, Write};
    let path = control_socket_path(uuid);
    let mut conn = std::os::unix::net::UnixStream::connect(&path)
        .map_err(|e| format!("no control socket at {} ({e})", path.display()))?;
    // Short: a holder that accepted but does not answer (stopped, hung) is said so quickly.
    conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    conn.write_all(b"status\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(conn, 1 << 20))
        .read_line(&mut line)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                "the process at {} accepted but did not answer within 5 s (stopped or hung?)",
                path.display()
            ),
            _ => e.to_string(),
        })?;
    serde_json::from_str(&line).map_err(|e| format!("the holder's answer is not status: {e}"))
}

/// The uuid of the array a member belongs to, read without taking the array.
pub fn peek_uuid(paths: &[PathBuf]) -> Option<[u8; 16]> {
    open_member_paths(paths, false)
        .iter()
        .find_map(|d| read_superblock_of(d.as_ref()).ok())
        .map(|sb| sb.array_uuid)
}

/// The panic policy of a stripeguard process (docs/DESIGN.md, "Panics"): a panic on any thread
/// prints its message, then aborts the process. The array is left as a crash leaves it — dirty,
/// resynced at the next assembly — instead of running on with a dead worker thread (its
/// in-flight accounting lost) or a poisoned lock that every later caller trips over. Called
/// first thing by `main`.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // `println!` to an output that refuses the bytes (`> /dev/full`, a full disk): not a
        // bug but an error of the environment, said in one line (exit 2, as any error); what
        // the command did before it printed stands.
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to std") {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "stripeguard: error: cannot write the output ({msg}); the command's work before it printed stands"
            );
            std::process::exit(2);
        }
        report(info);
        eprintln!(
            "stripeguard: internal error (a bug: please report it); aborting — an array this process held is left as after a crash and is resynced at its next assembly"
        );
        std::process::abort();
    }));
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_root_or_the_holders_user_may_change_the_array() {
        use super::peer_may_change;
        assert!(peer_may_change(0, 1000));
        assert!(peer_may_change(1000, 1000));
        assert!(!peer_may_change(65534, 1000));
        assert!(!peer_may_change(65534, 0));
    }
}
