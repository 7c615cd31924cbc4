//! Hot spares on paths (FORMAT.md §2.11): adding one (the device probed as a new member is),
//! removing one, finding a listed spare's device, and the holder's keeper that rebuilds a
//! member that stays out onto a spare by itself.
//!
//! The keeper runs in every process that holds an array writable and answers its control
//! socket (`serve`, the nbdkit plugin, `write`...): once a second it looks at the members; a
//! member out (failed, missing, stale) for the array's spare delay, or one on which this holder
//! has found the spare error threshold of units silently wrong, gets a replace onto the first
//! listed spare whose device it can open by its path hint and whose label names this array —
//! the same replace `stripeguard replace` asks a holder for, so `status` shows its progress.

use crate::probe::{Confirmations, Target};
use crate::{member_exists, LiveReplace};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripeguard_disk::{DiskRef, FileDisk};
use stripeguard_engine::{Array, EngineError, EventAction, ReplaceForce};
use stripeguard_format::{hex, SpareEntry};

/// The path (or URI) of a device as the array should remember it: absolute, so a holder in
/// another working directory finds it.
pub fn spare_hint(p: &Path) -> String {
    match p.to_str() {
        Some(u) if stripeguard_nbd::is_uri(u) => u.to_string(),
        _ => std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string(),
    }
}

/// Add the device at `path` as a hot spare of `array`: probed as a new member would be (in use
/// refused, another array's member or spare needs `confirm.take`, foreign data
/// `confirm.overwrite`), created as a file of the member size when it does not exist.
pub fn add_spare(
    array: &Array,
    path: &Path,
    direct: bool,
    confirm: &Confirmations,
) -> Result<SpareEntry, EngineError> {
    let disk = if member_exists(path) {
        confirm.refuse_strays(&[path])?;
        let t = Target::open(path, direct)?;
        if let crate::Found::Member(Some((uuid, _))) = t.found() {
            if *uuid == array.superblock().array_uuid {
                return Err(EngineError::Config(format!(
                    "{} holds a superblock of this array: a member (or an old copy of one) cannot be its spare; `stripeguard wipe` it first if it is free",
                    path.display()
                )));
            }
        }
        t.judge(None, confirm).or_else(|e| match t.found() {
            // Labelled again: a spare of this very array (listed or left unlisted by a crash).
            crate::Found::Spare { array: a, .. } if *a == array.superblock().array_uuid => Ok(()),
            _ => Err(e),
        })?;
        t.wipe()?;
        DiskRef::clone(&t.disk)
    } else {
        confirm.refuse_strays(&[])?;
        let size = array.superblock().member_bytes();
        Arc::new(FileDisk::create(path, size, direct)?) as DiskRef
    };
    let hint = spare_hint(path);
    if array.spares().iter().any(|s| s.hint == hint) {
        return Err(EngineError::Config(format!(
            "{} is a spare of this array already",
            path.display()
        )));
    }
    array.add_spare(&disk, &hint)
}

/// Which listed spare `which` names: its uuid in hex, or its path (the label on the device
/// says which spare it is, else the path hint).
pub fn find_spare(array: &Array, which: &str) -> Result<SpareEntry, EngineError> {
    let spares = array.spares();
    if let Some(s) = spares.iter().find(|s| hex(&s.uuid) == which.to_lowercase()) {
        return Ok(s.clone());
    }
    let hint = spare_hint(Path::new(which));
    let by_label = crate::open_member(Path::new(which), false)
        .ok()
        .and_then(|d| stripeguard_engine::read_spare_label(d.as_ref()).0);
    spares
        .iter()
        .find(|s| by_label.as_ref().is_some_and(|l| l.spare_uuid == s.uuid) || s.hint == hint)
        .cloned()
        .ok_or_else(|| {
            EngineError::Config(format!(
                "the array lists no spare {which} (`stripeguard status` lists its spares by path and uuid)"
            ))
        })
}

/// Take the spare `which` (uuid or path) off `array`'s table, then zero its label when its
/// device can be opened and still carries it.
pub fn remove_spare(array: &Array, which: &str) -> Result<SpareEntry, EngineError> {
    let entry = find_spare(array, which)?;
    let gone = array.remove_spare(&entry.uuid)?;
    if let Some((_, disk)) = open_spare(array, &gone) {
        let _ = stripeguard_engine::clear_spare_label(disk.as_ref());
    }
    Ok(gone)
}

/// The device of a listed spare, by its path hint, when it carries this array's label for it
/// and is big enough for a member; else why not.
pub fn usable_spare(array: &Array, entry: &SpareEntry) -> Result<(String, DiskRef), String> {
    if entry.hint.is_empty() {
        return Err("its path was too long to keep: remove it and add it by a shorter path".into());
    }
    let disk = crate::open_member(Path::new(&entry.hint), false)
        .map_err(|e| format!("not there ({e})"))?;
    if !array.is_spare_of_this(disk.as_ref(), entry) {
        return Err("the device there does not carry this array's label for it".into());
    }
    let need = array.superblock().member_bytes();
    let have = disk.measure_size();
    if have < need {
        return Err(format!(
            "too small: {have} bytes, a member of this array needs {need} (it grew)"
        ));
    }
    Ok((entry.hint.clone(), disk))
}

/// [`usable_spare`], when it is.
pub fn open_spare(array: &Array, entry: &SpareEntry) -> Option<(String, DiskRef)> {
    usable_spare(array, entry).ok()
}

/// A listed spare as `status` shows it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SpareState {
    /// Its uuid (hex).
    pub uuid: String,
    /// Where the array looks for it.
    pub path: String,
    /// Whether the device is there, carries the label and is big enough.
    pub found: bool,
    /// Why not, when it is not.
    #[serde(default)]
    pub why: Option<String>,
}

/// The listed spares and whether each is where the array looks for it.
pub fn spare_states(array: &Array) -> Vec<SpareState> {
    array
        .spares()
        .iter()
        .map(|s| {
            let why = usable_spare(array, s).err();
            SpareState {
                uuid: hex(&s.uuid),
                path: s.hint.clone(),
                found: why.is_none(),
                why,
            }
        })
        .collect()
}

/// The holder's watch over its members (see the module comment).
#[derive(Default)]
pub(crate) struct Keeper {
    /// Members seen out, and since when.
    out_since: HashMap<usize, Instant>,
    /// Spares that failed to start a replace, not tried again by this holder.
    refused: Vec<[u8; 16]>,
    /// What was last said, so a line is logged once.
    said: Option<String>,
}

impl Keeper {
    /// Look once: start a replace onto a spare when a member has been out for the delay (or
    /// failing past the threshold); `replacing` is the holder's replace slot.
    pub(crate) fn look<'scope>(
        &mut self,
        array: &'scope Array,
        replacing: &'scope std::sync::Mutex<Option<LiveReplace>>,
        scope: &'scope std::thread::Scope<'scope, '_>,
    ) {
        if !array.is_writable() {
            return;
        }
        let now = Instant::now();
        let health = array.health();
        self.out_since
            .retain(|m, _| health.iter().any(|h| h.index == *m && h.failed.is_some()));
        for h in health.iter().filter(|h| h.failed.is_some()) {
            self.out_since.entry(h.index).or_insert(now);
        }
        let busy = replacing
            .lock()
            .expect("lock")
            .as_ref()
            .is_some_and(|r| r.running);
        let spares = array.spares();
        if busy || spares.is_empty() {
            return;
        }
        let policy = array.spare_policy();
        let delay = Duration::from_secs(u64::from(policy.delay_seconds));
        let due = self
            .out_since
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= delay)
            .map(|(&m, since)| {
                (
                    m,
                    format!("out for {} s", now.duration_since(*since).as_secs()),
                )
            })
            .min();
        let (member, why, retire) = match due {
            Some((m, why)) => (m, why, false),
            None => match failing(array, policy.error_threshold) {
                Some((m, n)) => (
                    m,
                    format!(
                        "{n} unit(s) found silently wrong on it (threshold {})",
                        policy.error_threshold
                    ),
                    true,
                ),
                None => return,
            },
        };
        let Some((path, spare)) = spares
            .iter()
            .filter(|s| !self.refused.contains(&s.uuid))
            .find_map(|s| open_spare(array, s).map(|(p, _)| (p, s.uuid)))
        else {
            let line = format!(
                "member {member} needs a spare ({why}), but no listed spare is usable (`stripeguard status` says why for each)"
            );
            if self.said.as_ref() != Some(&line) {
                eprintln!("stripeguard: {line}");
                self.said = Some(line);
            }
            return;
        };
        let force = ReplaceForce {
            retire,
            spare: Some(spare),
            ..ReplaceForce::NONE
        };
        *replacing.lock().expect("lock") = None;
        match crate::launch_replace(
            array,
            member,
            path.clone(),
            force,
            &Confirmations::default(),
            replacing,
            scope,
        ) {
            Ok(()) => array.note_spare_taken(
                member,
                format!(
                    "member {member} ({why}): rebuilding it onto hot spare {} ({path})",
                    hex(&spare)
                ),
            ),
            Err(e) => {
                eprintln!(
                    "stripeguard: hot spare {} ({path}) could not take member {member}'s place: {e}",
                    hex(&spare)
                );
                self.refused.push(spare);
            }
        }
        self.out_since.remove(&member);
    }
}

/// A member still in on which this holder found at least `threshold` units silently wrong
/// (`threshold` 0: never), and how many.
fn failing(array: &Array, threshold: u32) -> Option<(usize, u64)> {
    if threshold == 0 {
        return None;
    }
    let mut per: HashMap<usize, u64> = HashMap::new();
    for e in array.events() {
        if matches!(
            e.action,
            EventAction::Repaired | EventAction::AppendixRewritten | EventAction::RebuiltDegraded
        ) && !e.kind.is_state_change()
        {
            *per.entry(e.member).or_default() += 1;
        }
    }
    let health = array.health();
    per.into_iter()
        .filter(|&(m, n)| {
            n >= u64::from(threshold) && health.iter().any(|h| h.index == m && h.failed.is_none())
        })
        .min()
}

/// A spare request over the control socket (FORMAT.md §3): `add-spare [--force-overwrite
/// ][--force-take ]PATH`, `remove-spare UUID|PATH`, `spare-policy DELAY THRESHOLD`. `whole`:
/// the line ended with its newline (a path cut short is refused).
pub(crate) fn serve_request(
    array: &Array,
    req: &str,
    whole: bool,
) -> Result<serde_json::Value, String> {
    if !whole {
        return Err(
            "a spare request must end with a newline (cut short, or over 4096 bytes)".into(),
        );
    }
    if !array.is_writable() {
        return Err("this holder has the array read-only".into());
    }
    if let Some(mut rest) = req.strip_prefix("add-spare ") {
        let (mut overwrite, mut take) = (false, false);
        loop {
            if let Some(r) = rest.strip_prefix("--force-overwrite ") {
                overwrite = true;
                rest = r;
            } else if let Some(r) = rest.strip_prefix("--force-take ") {
                take = true;
                rest = r;
            } else {
                break;
            }
        }
        if rest.is_empty() {
            return Err("add-spare PATH: PATH is missing".into());
        }
        let p = std::path::PathBuf::from(rest);
        let confirm = Confirmations {
            overwrite: if overwrite { vec![p.clone()] } else { vec![] },
            take: if take { vec![p.clone()] } else { vec![] },
            take_all: false,
        };
        let e = add_spare(array, &p, false, &confirm).map_err(|e| e.to_string())?;
        return Ok(serde_json::json!({"added": {"uuid": hex(&e.uuid), "path": e.hint}}));
    }
    if let Some(which) = req.strip_prefix("remove-spare ") {
        let e = remove_spare(array, which).map_err(|e| e.to_string())?;
        return Ok(serde_json::json!({"removed": {"uuid": hex(&e.uuid), "path": e.hint}}));
    }
    if let Some(rest) = req.strip_prefix("spare-policy ") {
        let mut words = rest.split(' ');
        let mut num = || words.next().and_then(|w| w.parse::<u32>().ok());
        let (Some(delay), Some(threshold)) = (num(), num()) else {
            return Err("spare-policy DELAY THRESHOLD: two whole numbers".into());
        };
        let p = stripeguard_format::SparePolicy {
            delay_seconds: delay,
            error_threshold: threshold,
        };
        array.set_spare_policy(p).map_err(|e| e.to_string())?;
        return Ok(serde_json::json!({"policy": p}));
    }
    Err(format!("unknown spare request {req:?}"))
}

/// Ask the process holding array `uuid` to add, remove or set (`req`: one of the requests of
/// [`serve_request`], without its newline).
pub fn ask_holder_spares(uuid: &[u8; 16], req: &str) -> Result<(), String> {
    if req.contains('\n') {
        return Err("a path holding a newline cannot be sent to the holder; rename it".into());
    }
    crate::ask_holder_to(uuid, req)
}

/// Move the hot spare `spare` (found by a scan, listed by `giver`) to `taker`, arrays of one
/// spare group (FORMAT.md §2.11): off the giver first (its label zeroed), then labelled for and
/// listed by the taker — each through the array's holder when one holds it, else by assembling
/// it here. A crash between the two leaves the device listed by neither, never by both.
pub fn move_spare(
    giver: &crate::scan::FoundArray,
    spare: &crate::scan::FoundSpare,
    taker: &crate::scan::FoundArray,
) -> Result<(), String> {
    let path = spare_hint(&spare.path);
    let held = |u: &[u8; 16]| crate::ask_holder(u).is_ok();
    let (g, t) = (giver.uuid_bytes(), taker.uuid_bytes());
    if held(&g) {
        ask_holder_spares(&g, &format!("remove-spare {}", spare.uuid))?;
    } else {
        let a = crate::assemble_paths(&giver.member_paths(), false, true)
            .map_err(|e| format!("array {}: {e}", giver.uuid))?;
        let r = remove_spare(&a, &spare.uuid);
        a.close().map_err(|e| e.to_string())?;
        r.map_err(|e| e.to_string())?;
    }
    if held(&t) {
        ask_holder_spares(&t, &format!("add-spare {path}"))
    } else {
        let a = crate::assemble_paths(&taker.member_paths(), false, true)
            .map_err(|e| format!("array {}: {e}", taker.uuid))?;
        let r = add_spare(&a, &spare.path, false, &Confirmations::default());
        a.close().map_err(|e| e.to_string())?;
        r.map(|_| ()).map_err(|e| e.to_string())
    }
}
