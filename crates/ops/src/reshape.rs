//! Reshaping an array onto added members (`stripeguard grow --add`, `grow --continue`;
//! FORMAT.md §2, "Reshaping the array"): the devices opened and judged as a replace's target
//! is, the engine's preflight before anything is wiped, then the engine's reshape.

use crate::{
    heartbeat_interval, local_locks, open_member_paths_as, refuse_duplicate_paths, Confirmations,
    Replacement, Target,
};
use std::path::{Path, PathBuf};
use stripeguard_disk::DiskRef;
use stripeguard_engine::{
    continue_reshape, Array, AssembleOptions, EngineError, ReshapeTo, Reshaped,
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
        refuse_duplicate_paths(paths)?;
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
                    .map(|d| d.size_bytes())
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
                        return Err(e.into());
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
        array.reshape(self.disks, to, &reshape_options(), progress)
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
        r.from_members - r.from_data_chunks,
        r.to_data_chunks,
        r.to_members - r.to_data_chunks,
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
    )
}
