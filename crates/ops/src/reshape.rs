//! Reshaping an array onto added members (`stripeguard grow --add`, `grow --continue`;
//! FORMAT.md §2, "Reshaping the array"): the devices opened and judged as a replace's target
//! is, the engine's preflight before anything is wiped, then the engine's reshape.

use crate::{
    heartbeat_interval, local_locks, open_member_paths_as, refuse_duplicate_paths, Confirmations,
    Replacement, Target,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use stripeguard_disk::DiskRef;
use stripeguard_engine::{
    continue_reshape, Array, AssembleOptions, EngineError, HeldArray, ReshapeTo, Reshaped,
};

/// The members a reshape adds, opened: existing devices probed (one in use refused, one
/// holding another array or foreign data only as `confirm` says), missing files made at the
/// member size (removed again when the preflight refuses).
pub struct Added {
    disks: Vec<DiskRef>,
    created: Vec<PathBuf>,
    targets: Vec<Target>,
}

impl Added {
    /// Open `paths` to be added to `array` as members `n..n + paths.len()`.
    pub fn open(
        array: &Array,
        paths: &[PathBuf],
        direct: bool,
        confirm: &Confirmations,
    ) -> Result<Added, EngineError> {
        if let Some((i, p)) = paths.iter().enumerate().find(|(i, p)| {
            paths[..*i]
                .iter()
                .any(|q| crate::probe::identity(q) == crate::probe::identity(p))
        }) {
            return Err(EngineError::Config(format!(
                "{} is given twice to --add (NEW {} of {}): give each device once",
                p.display(),
                i + 1,
                paths.len()
            )));
        }
        let n = array.geometry().n() + array.scheme().extra_members();
        let mut added = Added {
            disks: Vec::new(),
            created: Vec::new(),
            targets: Vec::new(),
        };
        for (i, p) in paths.iter().enumerate() {
            if (0..n).any(|m| {
                array
                    .member_disk(m)
                    .is_some_and(|d| Path::new(d.name()) == p)
            }) {
                added.remove_created();
                return Err(EngineError::Config(format!(
                    "{} is already a member of this array",
                    p.display()
                )));
            }
            if !crate::member_exists(p) {
                // Made at the size of the smallest member (which a level change needs: the
                // room past the array the others were given).
                confirm.refuse_strays(&[])?;
                let size = (0..n)
                    .filter_map(|m| array.member_disk(m))
                    // Measured now: a holder's members may have been extended since it opened
                    // them (a level change's room).
                    .map(|d| d.measure_size())
                    .min()
                    .unwrap_or_else(|| array.superblock().member_bytes());
                match stripeguard_disk::FileDisk::create(p, size, direct) {
                    Ok(d) => {
                        added.disks.push(std::sync::Arc::new(d) as DiskRef);
                        added.created.push(p.clone());
                        continue;
                    }
                    Err(e) => {
                        added.remove_created();
                        // Name the file and why (found by an outside test: a directory that
                        // does not exist read "create of 0 bytes at 0").
                        return Err(EngineError::Config(format!(
                            "{} cannot be made as a new member file of {size} bytes: {}",
                            p.display(),
                            match p.parent().filter(|d| !d.as_os_str().is_empty()) {
                                Some(d) if !d.is_dir() =>
                                    format!("its directory {} does not exist", d.display()),
                                _ => e.to_string(),
                            }
                        )));
                    }
                }
            }
            match Replacement::open(array, n + i, p, false, direct, confirm) {
                Ok(r) => {
                    let (disk, created, target) = r.into_parts();
                    added.disks.push(disk);
                    added.created.extend(created);
                    added.targets.extend(target);
                }
                Err(e) => {
                    added.remove_created();
                    return Err(e);
                }
            }
        }
        Ok(added)
    }

    fn remove_created(&self) {
        for p in &self.created {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The engine's refusals, then the confirmed wipes, then the reshape (`progress(done,
    /// total)` over the new stripes). Files this made are removed when refused before the
    /// reshape starts; once it has started they hold the array's data.
    pub fn run(
        self,
        array: Array,
        to: ReshapeTo,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Reshaped, EngineError> {
        if let Err(e) = array.reshape_preflight(&self.disks, to) {
            self.remove_created();
            // Refused: the array is closed as any command ends (clean, no owner left).
            let _ = array.close();
            return Err(e);
        }
        for t in &self.targets {
            if let Err(e) = t.wipe() {
                let _ = array.close();
                return Err(e);
            }
        }
        let created = self.created.clone();
        let disks = self.disks.clone();
        let result = array.reshape(self.disks, to, &reshape_options(), progress);
        if result.is_err() {
            remove_unused(&created, &disks);
        }
        result
    }
}

/// Remove the files in `created` that a refused reshape left without a superblock (it stopped
/// before it named them members: they hold nothing of the array).
fn remove_unused(created: &[PathBuf], disks: &[DiskRef]) {
    for p in created {
        let unused = disks
            .iter()
            .filter(|d| Path::new(d.name()) == p)
            .all(|d| stripeguard_engine::read_superblock_of(d.as_ref()).is_err());
        if unused {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The assembly options of a reshape (writable; the heartbeat and lock settings as for any
/// writable command).
fn reshape_options() -> AssembleOptions {
    let d = AssembleOptions::default();
    AssembleOptions {
        writable: true,
        heartbeat: heartbeat_interval().unwrap_or(d.heartbeat),
        local_locks: local_locks(),
        ..d
    }
}

/// Continue the interrupted reshape of the array on `paths` (every member, old and added, in
/// index order) and finish it.
pub fn continue_reshape_paths(
    paths: &[PathBuf],
    direct: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Reshaped, EngineError> {
    refuse_duplicate_paths(paths)?;
    let members = open_member_paths_as(paths, direct, true)?;
    continue_reshape(members, &reshape_options(), progress)
}

/// One line saying what a reshape did.
pub fn reshaped_line(r: &Reshaped) -> String {
    format!(
        "reshaped: {} → {} members, {}+{} → {}+{} (data + parity chunks per stripe), {} → {} bytes{}{}",
        r.from_members,
        r.to_members,
        r.from_data_chunks,
        r.from_parity_chunks,
        r.to_data_chunks,
        r.to_parity_chunks,
        r.from_bytes,
        r.to_bytes,
        if r.repaired > 0 {
            format!("; {} damaged unit(s) repaired on the way", r.repaired)
        } else {
            String::new()
        },
        if r.resumed_at > 0 {
            format!(" (continued at new stripe {})", r.resumed_at)
        } else {
            String::new()
        }
    ) + &if r.to_members < r.from_members {
        format!(
            "; member {} left the array (its superblock erased: it is a free device now)",
            r.to_members
        )
    } else {
        String::new()
    }
}

/// A reshape run by the holder of the array while it serves (FORMAT.md §3: `reshape JSON`).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LiveReshape {
    pub running: bool,
    /// New stripes committed, and in all (the read of every chunk first: stripes read).
    pub done: u64,
    pub total: u64,
    /// When finished: what it did, or why it stopped.
    pub outcome: Option<String>,
    pub ok: bool,
    /// What it did, when it finished.
    pub reshaped: Option<Reshaped>,
}

/// What a `reshape` request asks (the control socket's JSON).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ReshapeRequest {
    /// Devices to add.
    pub add: Vec<PathBuf>,
    /// `Some(6)`: RAID-5 to RAID-6.
    pub level: Option<u8>,
    #[serde(default)]
    pub force_take: Vec<PathBuf>,
    #[serde(default)]
    pub force_overwrite: Vec<PathBuf>,
}

/// The holder's array as its server serves it, and the reshape it may run on it.
pub struct ReshapeSlot {
    held: Arc<HeldArray>,
    state: Mutex<Option<LiveReshape>>,
    /// Bumped when the holder's array is replaced (the control socket starts again on it).
    generation: AtomicU64,
    /// Given the new geometry's array before it serves (event log lines, appendix cache).
    prepare: Box<dyn Fn(&Array) + Send + Sync>,
}

impl ReshapeSlot {
    pub fn new(held: Arc<HeldArray>, prepare: Box<dyn Fn(&Array) + Send + Sync>) -> Arc<Self> {
        Arc::new(ReshapeSlot {
            held,
            state: Mutex::new(None),
            generation: AtomicU64::new(0),
            prepare,
        })
    }

    /// How many times the holder's array was replaced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn status(&self) -> Option<LiveReshape> {
        self.state.lock().expect("lock").clone()
    }

    /// A reshape runs, or stopped mid-way (the array is in two geometries): nothing else that
    /// changes the array may start.
    pub fn busy(&self) -> bool {
        self.held.reshaping() || self.status().is_some_and(|s| s.running)
    }

    /// `reshape JSON`: the devices opened and judged, the engine's refusals answered, then the
    /// reshape started on a thread of its own (it outlives the control socket it came on).
    pub(crate) fn start(self: &Arc<Self>, req: &str) -> Result<(), String> {
        let json = req.strip_prefix("reshape ").unwrap_or("");
        let r: ReshapeRequest = serde_json::from_str(json)
            .map_err(|e| format!("reshape: the request is not valid JSON ({e})"))?;
        // The holder opens each path as given, from its own directory: only absolute paths
        // (or NBD URIs), and only names that arrived whole (a byte that was not UTF-8 became
        // U+FFFD on the way, another file's name).
        for p in r.add.iter().chain(&r.force_take).chain(&r.force_overwrite) {
            let s = p.to_string_lossy();
            if s.contains('\u{FFFD}') {
                return Err(format!(
                    "reshape: {s:?} is not a name this request can carry (not UTF-8)"
                ));
            }
            if !p.is_absolute() && !s.contains("://") {
                return Err(format!(
                    "reshape: {s:?} is not an absolute path (the holder would open it from its own directory)"
                ));
            }
        }
        if self.busy() {
            return Err(match self.held.reshape_stopped() {
                Some(why) => format!("a reshape stopped in this holder ({why}): stop the holder and run `grow --continue` with every member"),
                None => "a reshape is already running in this holder".into(),
            });
        }
        let array = self.held.array();
        if !array.is_writable() {
            return Err("this holder has the array read-only".into());
        }
        let to = match r.level {
            None => ReshapeTo::AddData,
            Some(6) => ReshapeTo::Raid6,
            Some(5) => ReshapeTo::Raid5,
            Some(l) => {
                return Err(format!(
                    "--level {l}: only --level 5 and --level 6 are built"
                ))
            }
        };
        let confirm = Confirmations {
            take: r.force_take.clone(),
            overwrite: r.force_overwrite.clone(),
            ..Confirmations::default()
        };
        let added = Added::open(&array, &r.add, false, &confirm).map_err(|e| e.to_string())?;
        if let Err(e) = array.reshape_preflight(&added.disks, to) {
            added.remove_created();
            return Err(e.to_string());
        }
        for t in &added.targets {
            t.wipe().map_err(|e| e.to_string())?;
        }
        drop(array);
        *self.state.lock().expect("lock") = Some(LiveReshape {
            running: true,
            ..LiveReshape::default()
        });
        let me = Arc::clone(self);
        let (created, disks) = (added.created.clone(), added.disks.clone());
        std::thread::Builder::new()
            .name("sg-reshape".into())
            .spawn(move || {
                let result = stripeguard_engine::reshape_online(
                    &me.held,
                    added.disks,
                    to,
                    &reshape_options(),
                    &*me.prepare,
                    &mut |done, total| {
                        if let Some(s) = me.state.lock().expect("lock").as_mut() {
                            s.done = done;
                            s.total = total;
                        }
                    },
                );
                let ok = result.is_ok();
                if !ok {
                    remove_unused(&created, &disks);
                }
                if let Some(s) = me.state.lock().expect("lock").as_mut() {
                    s.running = false;
                    s.ok = ok;
                    match result {
                        Ok(r) => {
                            s.outcome = Some(reshaped_line(&r));
                            s.reshaped = Some(r);
                        }
                        Err(e) => s.outcome = Some(e.to_string()),
                    }
                }
                if ok {
                    me.generation.fetch_add(1, Ordering::AcqRel);
                }
            })
            .map_err(|e| format!("starting the reshape thread: {e}"))?;
        Ok(())
    }
}

/// Ask the process holding array `uuid` to reshape it while it serves; progress and the
/// outcome come with its `status` ([`crate::LiveStatus::reshape`]).
pub fn ask_holder_reshape(uuid: &[u8; 16], r: &ReshapeRequest) -> Result<(), String> {
    let json = serde_json::to_string(r).map_err(|e| e.to_string())?;
    crate::ask_holder_to(uuid, &format!("reshape {json}"))
}

/// Follow the holder's reshape until it finishes, `progress(done, total)` as it goes.
/// The geometry the superblock of `member` names — (members, data chunks, parity chunks) —
/// when no reshape is in progress there: how a caller that lost its holder mid-reshape tells
/// a reshape that finished (the holder finishes one before it stops on SIGTERM) from one that
/// stopped. `None` when the superblock cannot be read or says a reshape is in progress.
pub fn settled_geometry(member: &Path) -> Option<(u16, u16, u16)> {
    let d = crate::open_member_as(member, false, false).ok()?;
    let sb = stripeguard_engine::read_superblock_of(d.as_ref()).ok()?;
    sb.reshape
        .is_none()
        .then_some((sb.members, sb.data_chunks, sb.parity_chunks))
}

pub fn follow_holder_reshape(
    uuid: &[u8; 16],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(LiveReshape, crate::LiveStatus), String> {
    crate::online::follow_holder(
        uuid,
        (
            "reshape",
            "it reshaped the array",
            "; `stripeguard status` says where the reshape stands, and `grow --continue` with every member (old and added) finishes it once the holder has stopped",
        ),
        |l| l.reshape.clone().map(|r| ((r.done, r.total, r.running), r)),
        progress,
    )
}
