//! Finding arrays without a member list (issue 36 §1): read the superblock of every candidate
//! (the configured globs and member URIs, or every block device of the host), group the
//! members by array uuid, and put each in the slot its own superblock names. Nothing is
//! assembled or written, and no lock is taken: it works beside a holder.
//!
//! A slot two candidates claim (a copy of a member, an old disk back after a replace) goes to
//! the one with the higher event count; the other is listed as ignored. Members are judged as
//! assembly would (FORMAT.md §2.1): the newest superblock's member table says which are current.

use crate::config::{parse_uuid, Config};
use std::path::{Path, PathBuf};
use stripeguard_engine::{read_superblock_of, EngineError};
use stripeguard_format::{MemberState, Superblock};

/// How a slot the scan did not find is named in a member list (`member_paths`).
const NOT_FOUND: &str = "\0not found by scan: member ";

/// Why `p` names no device: a slot the scan did not find.
pub(crate) fn not_found(p: &Path) -> Option<String> {
    let s = p.to_str()?;
    s.starts_with(NOT_FOUND)
        .then(|| "not found by scan among the configured devices".to_string())
}

/// One member found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FoundMember {
    /// Where it was found.
    pub path: PathBuf,
    /// Its index in the array (its superblock says).
    pub index: u16,
    /// Its own event count.
    pub event_count: u64,
    /// `current`, or why assembly would not take it as current (`stale`, `superseded`, …).
    pub standing: String,
}

/// One array found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FoundArray {
    /// Its uuid, hex.
    pub uuid: String,
    /// Its name (the superblock's, or the configuration file's when the superblock has none).
    pub name: String,
    /// `k + m` (+ the checksum member).
    pub members: u16,
    pub data_chunks: u16,
    pub parity_chunks: u16,
    /// The newest superblock says a reshape is in progress (FORMAT.md §2, "Reshaping the
    /// array"): nothing assembles the array until `grow --continue` finishes it.
    pub reshaping: bool,
    pub code: String,
    pub scheme: String,
    /// `clean` or `dirty`, as the newest superblock says.
    pub state: String,
    /// The newest event count among its members.
    pub event_count: u64,
    /// Each slot's member, in index order (`None`: not found).
    pub slots: Vec<Option<FoundMember>>,
    /// Candidates that name a slot another candidate holds with a newer event count.
    pub ignored: Vec<FoundMember>,
    /// Slots two candidates claim at the same event count (copies of a member, or two
    /// histories written apart): nothing can say which is the member.
    pub ambiguous: Vec<FoundMember>,
    /// Hot spares found whose label names this array (FORMAT.md §2.11), and whether the newest
    /// superblock lists each (an unlisted one was left by a crash, or removed while away).
    pub spares: Vec<FoundSpare>,
    /// Seconds a member stays out before a spare takes its place (the newest superblock's
    /// spare policy, FORMAT.md §2.1).
    pub spare_delay_seconds: u32,
}

/// A hot spare's label found by a scan.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FoundSpare {
    /// Where it was found.
    pub path: PathBuf,
    /// Its uuid, hex.
    pub uuid: String,
    /// The array's newest superblock lists it.
    pub listed: bool,
}

impl FoundArray {
    /// Members found that assembly would take as current.
    pub fn current(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|m| m.standing == "current")
            .count()
    }

    /// The health in a word: `complete` (every member current), `degraded` (the parity
    /// covers what is missing or stale), `incomplete` (it cannot be assembled as found),
    /// `reshaping` (a reshape to finish with `grow --continue` first).
    pub fn health(&self) -> &'static str {
        if !self.ambiguous.is_empty() {
            return "ambiguous";
        }
        if self.reshaping {
            return "reshaping";
        }
        // (Assembly refuses it whatever else is found: not merely degraded.)
        if self
            .slots
            .iter()
            .flatten()
            .any(|m| m.standing.contains("split brain"))
        {
            return "split-brain";
        }
        let out = usize::from(self.members) - self.current();
        match out {
            0 => "complete",
            o if o <= usize::from(self.parity_chunks) => "degraded",
            _ => "incomplete",
        }
    }

    /// The member list in index order, a slot not found given as a path that names it (it
    /// opens as a failed member: "not found by scan").
    pub fn member_paths(&self) -> Vec<PathBuf> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| match s {
                Some(m) => m.path.clone(),
                // A NUL byte: no file can have this name, so nothing on disk is taken for it.
                None => PathBuf::from(format!("{NOT_FOUND}{i}\0")),
            })
            .collect()
    }

    /// The uuid as bytes.
    pub fn uuid_bytes(&self) -> [u8; 16] {
        parse_uuid(&self.uuid).unwrap_or_default()
    }
}

/// The candidates to read: the globs given (or the configuration's `devices`, or every block
/// device), and every member URI the configuration lists. Sorted, without duplicates.
pub fn candidates(given: &[String], cfg: &Config) -> Vec<PathBuf> {
    candidates_noted(given, cfg).0
}

/// [`candidates`], with a note for each glob that is not valid or found nothing (said to the
/// user: a typo in a glob otherwise looks like a missing array).
pub fn candidates_noted(given: &[String], cfg: &Config) -> (Vec<PathBuf>, Vec<String>) {
    let mut notes = Vec::new();
    let mut out: Vec<PathBuf> = Vec::new();
    let globs: Vec<String> = if !given.is_empty() {
        given.to_vec()
    } else {
        cfg.devices.clone()
    };
    if globs.is_empty() {
        out.extend(block_devices());
    }
    for g in &globs {
        if g.contains("://") {
            out.push(PathBuf::from(g));
            continue;
        }
        match glob::glob(g) {
            Ok(paths) => {
                let before = out.len();
                out.extend(paths.flatten());
                // A plain path that does not exist yet is still a candidate (it fails to open
                // and is skipped, as any unreadable candidate).
                if out.len() == before {
                    if Path::new(g).exists() {
                        // A path whose name holds glob characters (`br[1]`), as it is.
                        out.push(PathBuf::from(g));
                    } else if g.contains(['*', '?', '[']) {
                        notes.push(format!("{g}: matches nothing"));
                    } else {
                        notes.push(format!("{g}: no such file"));
                        out.push(PathBuf::from(g));
                    }
                }
            }
            Err(e) => {
                notes.push(format!("{g}: not a valid glob ({}), read as a path", e.msg));
                out.push(PathBuf::from(g));
            }
        }
    }
    if given.is_empty() {
        for a in cfg.arrays.values() {
            out.extend(a.members.iter().map(PathBuf::from));
        }
    }
    out.sort();
    out.dedup();
    // One device reached by two paths (the `ata-` and `wwn-` links of one disk under
    // /dev/disk/by-id, a symlink beside its target, two nodes of one block device) is one
    // candidate, not two copies of a member: the first path in sorted order stands for it.
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| match identity(p) {
        Some(id) => seen.insert(id),
        None => true,
    });
    (out, notes)
}

/// What a path names, whatever the path: a block device's device number, else the file's
/// device and inode (symlinks followed). `None` when it cannot be looked at (or is an NBD URI).
fn identity(p: &Path) -> Option<(u64, u64, bool)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(p).ok()?;
    Some(if m.file_type().is_block_device() {
        (m.rdev(), 0, true)
    } else {
        (m.dev(), m.ino(), false)
    })
}

/// Every block device of this host (`/dev/NAME` for each entry of `/sys/class/block`).
fn block_devices() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/sys/class/block") else {
        return vec![];
    };
    dir.flatten()
        .map(|e| Path::new("/dev").join(e.file_name()))
        .filter(|p| p.exists())
        .collect()
}

/// Read every candidate's superblock (those that hold none, or cannot be opened, are skipped)
/// and group them into arrays, sorted by name. `cfg` names arrays whose superblock has none.
pub fn scan(candidates: &[PathBuf], cfg: &Config) -> Vec<FoundArray> {
    scan_noted(candidates, cfg).0
}

/// [`scan`], with each candidate that was not read and why (`scan -v`): it could not be
/// opened, is empty, or holds no stripeguard superblock (or a damaged one).
pub fn scan_noted(
    candidates: &[PathBuf],
    cfg: &Config,
) -> (Vec<FoundArray>, Vec<(PathBuf, String)>) {
    let mut found: Vec<(PathBuf, Superblock)> = Vec::new();
    let mut labels: Vec<(PathBuf, stripeguard_format::SpareLabel)> = Vec::new();
    let mut unread = Vec::new();
    for p in candidates {
        // Read-only, no lock, no O_EXCL: a held array's members are read too.
        let disk = match crate::open_member_how(p, false, false, false) {
            Ok(d) => d,
            Err(e) => {
                unread.push((p.clone(), e.to_string()));
                continue;
            }
        };
        if disk.size_bytes() == 0 {
            unread.push((p.clone(), "empty (0 bytes)".into()));
            continue;
        }
        match read_superblock_of(disk.as_ref()) {
            Ok(sb) => found.push((p.clone(), sb)),
            Err(e) => match stripeguard_engine::read_spare_label(disk.as_ref()).0 {
                Some(l) => labels.push((p.clone(), l)),
                None => unread.push((p.clone(), e.to_string())),
            },
        }
    }
    let mut uuids: Vec<[u8; 16]> = found.iter().map(|(_, sb)| sb.array_uuid).collect();
    uuids.sort_unstable();
    uuids.dedup();
    let mut arrays: Vec<FoundArray> = uuids.iter().map(|u| group(u, &found, cfg)).collect();
    for (p, l) in labels {
        match arrays.iter_mut().find(|a| a.uuid_bytes() == l.array_uuid) {
            Some(a) => {
                let listed = found
                    .iter()
                    .filter(|(_, sb)| sb.array_uuid == l.array_uuid)
                    .max_by_key(|(_, sb)| sb.generation)
                    .is_some_and(|(_, sb)| sb.spares.iter().any(|e| e.uuid == l.spare_uuid));
                a.spares.push(FoundSpare {
                    path: p,
                    uuid: stripeguard_format::hex(&l.spare_uuid),
                    listed,
                });
            }
            None => unread.push((
                p,
                format!(
                    "a hot spare of array {}, none of whose members was found",
                    stripeguard_format::hex(&l.array_uuid)
                ),
            )),
        }
    }
    arrays.sort_by(|a, b| (&a.name, &a.uuid).cmp(&(&b.name, &b.uuid)));
    (arrays, unread)
}

/// The array with `uuid` from the superblocks found.
fn group(uuid: &[u8; 16], found: &[(PathBuf, Superblock)], cfg: &Config) -> FoundArray {
    let mine: Vec<&(PathBuf, Superblock)> = found
        .iter()
        .filter(|(_, sb)| &sb.array_uuid == uuid)
        .collect();
    // The newest superblock; among equals, the one most others share the geometry of (one
    // member's damaged field must not make its good peers look wrong).
    let top = mine.iter().map(|(_, sb)| sb.generation).max().unwrap_or(0);
    let newest = mine
        .iter()
        .map(|(_, sb)| sb)
        .filter(|sb| sb.generation == top)
        .max_by_key(|sb| mine.iter().filter(|(_, o)| shape(o) == shape(sb)).count())
        .expect("at least one");
    let n = usize::from(newest.members);
    let mut slots: Vec<Option<FoundMember>> = vec![None; n];
    let mut ignored = Vec::new();
    let mut ambiguous = Vec::new();
    let mut by_age: Vec<&&(PathBuf, Superblock)> = mine.iter().collect();
    by_age.sort_by_key(|(_, sb)| std::cmp::Reverse(sb.generation));
    for (path, sb) in by_age.into_iter().map(|x| (&x.0, &x.1)) {
        let i = usize::from(sb.member_index);
        let m = FoundMember {
            path: path.clone(),
            index: sb.member_index,
            event_count: sb.generation,
            standing: standing(sb, newest),
        };
        match slots.get_mut(i) {
            Some(s @ None) => *s = Some(m),
            Some(Some(held)) if held.event_count == m.event_count => ambiguous.push(m),
            _ => ignored.push(m),
        }
    }
    let name = if newest.name.is_empty() {
        cfg.name_of(uuid).unwrap_or_default().to_string()
    } else {
        newest.name.clone()
    };
    FoundArray {
        uuid: stripeguard_format::hex(uuid),
        name,
        members: newest.members,
        data_chunks: newest.data_chunks,
        parity_chunks: newest.parity_chunks,
        reshaping: newest.reshape.is_some(),
        code: newest.code.name().to_string(),
        scheme: newest.scheme.name().to_string(),
        state: format!("{:?}", newest.state).to_lowercase(),
        event_count: newest.generation,
        slots,
        ignored,
        ambiguous,
        spares: Vec::new(),
        spare_delay_seconds: newest.spare_policy.unwrap_or_default().delay_seconds,
    }
}

/// The fields a member must share with its array to be assembled with it.
fn shape(s: &Superblock) -> impl PartialEq {
    (
        s.members,
        s.data_chunks,
        s.parity_chunks,
        s.chunk_bytes,
        s.scheme,
        s.code,
    )
}

/// What the newest superblock's table says of a member whose own superblock is `sb` (the rules
/// of FORMAT.md §2.1, without the split-brain and size checks assembly adds).
fn standing(sb: &Superblock, newest: &Superblock) -> String {
    // A member whose geometry is not the array's cannot be assembled with it, whatever its
    // table says (a damaged field with a valid CRC, or a superblock written by something else).
    // Stripes may trail the newest by a grow whose superblock writes it missed (FORMAT.md §2).
    let stripes_agree = sb.stripes == newest.stripes
        || (sb.stripes < newest.stripes && sb.generation < newest.generation);
    if shape(sb) != shape(newest) || !stripes_agree {
        return "disagrees with the array's geometry (damaged?)".into();
    }
    let i = usize::from(sb.member_index);
    let Some(slot) = newest.member_table.get(i) else {
        return "not in the member table".into();
    };
    let own_device = sb.member_table.get(i).map(|s| s.device);
    if own_device != Some(slot.device) {
        return "superseded (a replace put another device in its slot)".into();
    }
    match slot.state {
        MemberState::Active => "current".into(),
        s if sb.generation <= slot.last_event => format!("stale ({})", s.name()),
        _ => "written apart (split brain)".into(),
    }
}

/// The array `key` names — a name (the configuration's, or a superblock's) or a uuid — with
/// its members, from the candidates the configuration gives. An error says what was looked at.
pub fn find_array(key: &str, cfg: &Config) -> Result<FoundArray, EngineError> {
    // (An unnamed array's name is empty: an empty key would pick one of those.)
    if key.is_empty() {
        return Err(EngineError::Assemble(
            "an empty array name: give the array's name or uuid".into(),
        ));
    }
    let wanted: Option<[u8; 16]> = match cfg.array(key) {
        Some((_, a)) => a.uuid.as_deref().and_then(parse_uuid),
        None => parse_uuid(key),
    };
    let cands = candidates(&[], cfg);
    let all = scan(&cands, cfg);
    let hits: Vec<&FoundArray> = all
        .iter()
        .filter(|a| match wanted {
            Some(u) => a.uuid_bytes() == u,
            None => a.name == key,
        })
        .collect();
    match hits.as_slice() {
        [one] if !one.ambiguous.is_empty() => Err(EngineError::Assemble(format!(
            "array {key:?}: {} claimed by two devices at the same event count ({}): copies of a member, or two histories written apart; give the members by hand",
            one.ambiguous
                .iter()
                .map(|m| format!("member {}", m.index))
                .collect::<Vec<_>>()
                .join(", "),
            one.ambiguous
                .iter()
                .map(|m| {
                    let other = one.slots[usize::from(m.index)]
                        .as_ref()
                        .map(|s| s.path.display().to_string())
                        .unwrap_or_default();
                    format!("{} and {}", other, m.path.display())
                })
                .collect::<Vec<_>>()
                .join("; ")
        ))),
        [one] => Ok((*one).clone()),
        [] => Err(EngineError::Assemble(format!(
            "no member of an array {key:?} found among {} candidate(s) ({}); give its members, or list them in the configuration file (`devices` globs, or `members` under [array.{key}])",
            cands.len(),
            if cfg.devices.is_empty() {
                "every block device".to_string()
            } else {
                cfg.devices.join(" ")
            }
        ))),
        many => Err(EngineError::Assemble(format!(
            "{} arrays are called {key:?} ({}); name one by its uuid",
            many.len(),
            many.iter().map(|a| a.uuid.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `paths` in the order their superblocks' member indexes give, when they all belong to one
/// array and name distinct slots; with a note saying what moved. Paths that hold no superblock
/// (a missing member) keep their relative order in the slots left free. Anything else is
/// returned as given (assembly then explains what is wrong).
pub fn order_members(paths: &[PathBuf]) -> (Vec<PathBuf>, Option<String>) {
    // Journal devices (FORMAT.md §2.12) stand anywhere in the list: the members are ordered
    // without them, and they follow.
    let is_journal = |p: &PathBuf| {
        crate::open_member_how(p, false, false, false)
            .ok()
            .and_then(|d| stripeguard_engine::read_journal_device_label(d.as_ref()))
            .is_some()
    };
    let (journal, members): (Vec<PathBuf>, Vec<PathBuf>) =
        paths.iter().cloned().partition(is_journal);
    if !journal.is_empty() {
        let (mut ordered, note) = order_members(&members);
        ordered.extend(journal);
        return (ordered, note);
    }
    let read: Vec<Option<Superblock>> = paths
        .iter()
        .map(|p| {
            let d = crate::open_member_how(p, false, false, false).ok()?;
            read_superblock_of(d.as_ref()).ok()
        })
        .collect();
    let as_given = (paths.to_vec(), None);
    let Some(first) = read.iter().flatten().next() else {
        return as_given;
    };
    let n = usize::from(first.members);
    if n != paths.len()
        || read
            .iter()
            .flatten()
            .any(|sb| sb.array_uuid != first.array_uuid)
    {
        return as_given;
    }
    let mut slots: Vec<Option<PathBuf>> = vec![None; n];
    for (p, sb) in paths.iter().zip(&read) {
        if let Some(sb) = sb {
            match slots.get_mut(usize::from(sb.member_index)) {
                Some(s @ None) => *s = Some(p.clone()),
                _ => return as_given,
            }
        }
    }
    let mut rest = paths
        .iter()
        .zip(&read)
        .filter(|(_, sb)| sb.is_none())
        .map(|(p, _)| p);
    let ordered: Vec<PathBuf> = slots
        .into_iter()
        .map(|s| s.or_else(|| rest.next().cloned()).unwrap_or_default())
        .collect();
    if ordered == paths {
        return as_given;
    }
    let moved: Vec<String> = ordered
        .iter()
        .enumerate()
        .filter(|(i, p)| paths.get(*i) != Some(p))
        .map(|(i, p)| format!("{} is member {i}", p.display()))
        .collect();
    (
        ordered,
        Some(format!(
            "members given out of order, put in their places: {}",
            moved.join(", ")
        )),
    )
}

/// Uuids (hex) of other arrays already called `name`: the configuration's entry, and arrays
/// found on the configuration's `devices` (not every block device, nor NBD members: a
/// `create` does not wait on those), leaving out the devices in `skip` (the members about to
/// be overwritten). `create --name` warns with it.
pub fn others_named(name: &str, cfg: &Config, skip: &[PathBuf]) -> Vec<String> {
    let mut out: Vec<String> = cfg
        .array(name)
        .and_then(|(_, a)| a.uuid.clone())
        .into_iter()
        .collect();
    if !cfg.devices.is_empty() {
        let skip: Vec<PathBuf> = skip
            .iter()
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
            .collect();
        let cands: Vec<PathBuf> = candidates(&cfg.devices, cfg)
            .into_iter()
            .filter(|p| !p.to_string_lossy().contains("://"))
            .filter(|p| !skip.contains(&std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
            .collect();
        out.extend(
            scan(&cands, cfg)
                .into_iter()
                .filter(|a| a.name == name)
                .map(|a| a.uuid),
        );
    }
    out.sort();
    out.dedup();
    out
}

/// The arrays the configuration names by uuid that are not among `known` (the uuids found or
/// held): (name, uuid).
pub fn configured_missing(cfg: &Config, known: &[[u8; 16]]) -> Vec<(String, [u8; 16])> {
    cfg.arrays
        .iter()
        .filter_map(|(n, c)| {
            let u = c.uuid.as_deref().and_then(parse_uuid)?;
            (!known.contains(&u)).then(|| (n.clone(), u))
        })
        .collect()
}
