//! Which members make the array (FORMAT.md §2.1), decided from their superblocks alone: the
//! array most of the given members belong to, its newest superblock as the reference, every
//! member checked against it (same array, same geometry, in index order, none claiming another's
//! slot, not all too small), and which members are current — the newest superblock's member
//! table and each member's own event count decide; a member recorded as gone that wrote on is a
//! split brain and refused. Pure: `Array::assemble` reads the superblocks and acts on the verdict.

use crate::error::EngineError;
use stripeguard_format::hex;
use stripeguard_integrity::{MemberState, Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS};

/// What assembly goes on with.
pub(crate) struct Verdict {
    /// The newest superblock of the array most members belong to.
    pub(crate) reference: Superblock,
    /// Per member: superblock copies found damaged or stale.
    pub(crate) fixes: Vec<u8>,
    /// Members that cannot be used, with why (at most `m`).
    pub(crate) unusable: Vec<(usize, String)>,
    /// Stale members a forced assembly brought back, with what they missed.
    pub(crate) forced: Vec<(usize, String)>,
}

/// Decide from `found` (each member's best superblock and its damaged copies, or why it has
/// none), the members' `names` and `sizes` in the order given.
pub(crate) fn decide(
    names: &[String],
    sizes: &[u64],
    found: &[Result<(Superblock, u8), String>],
    force: bool,
) -> Result<Verdict, EngineError> {
    let reference = reference(names, found)?;
    let fixes = check_members(names, sizes, found, &reference)?;
    let (unusable, forced) = unusable(names, sizes, found, &reference, force)?;
    Ok(Verdict {
        reference,
        fixes,
        unusable,
        forced,
    })
}

/// The array is the one most of the given members belong to (so a single foreign member is
/// the one named), its geometry the one most of those members describe or trail by a grow (so
/// a single member whose geometry fields were changed is the one named, however new its event
/// count), and its newest such superblock speaks for it.
fn reference(
    names: &[String],
    found: &[Result<(Superblock, u8), String>],
) -> Result<Superblock, EngineError> {
    let votes = |uuid: &[u8; 16]| {
        found
            .iter()
            .filter(|f| matches!(f, Ok((sb, _)) if &sb.array_uuid == uuid))
            .count()
    };
    found
        .iter()
        .filter_map(|f| f.as_ref().ok())
        .max_by_key(|(sb, _)| {
            let alike = found
                .iter()
                .filter(|f| {
                    matches!(f, Ok((o, _)) if o.array_uuid == sb.array_uuid
                        && same_geometry(o, sb)
                        && stripes_agree(o, sb))
                })
                .count();
            (votes(&sb.array_uuid), alike, sb.generation)
        })
        .map(|(sb, _)| sb.clone())
        .ok_or_else(|| {
            let why: Vec<String> = names
                .iter()
                .zip(found)
                .filter_map(|(d, f)| f.as_ref().err().map(|e| format!("{d}: {e}")))
                .collect();
            EngineError::Assemble(format!(
                "no member has a valid superblock ({})",
                why.join("; ")
            ))
        })
}

/// Every member with a superblock is of the reference's array and geometry, in its index's
/// position; all of them are given, and not all too small. Returns each member's damaged or
/// stale superblock copies.
fn check_members(
    names: &[String],
    sizes: &[u64],
    found: &[Result<(Superblock, u8), String>],
    reference: &Superblock,
) -> Result<Vec<u8>, EngineError> {
    let n = reference.members as usize;
    let mut seen = vec![None::<usize>; n];
    let mut fixes = vec![0u8; n];
    for (pos, (d, f)) in names.iter().zip(found).enumerate() {
        let Ok((sb, fixed)) = f else { continue };
        if sb.array_uuid != reference.array_uuid {
            return Err(EngineError::Assemble(format!(
                "{} belongs to another array (uuid {}; the other members' is {})",
                d,
                hex(&sb.array_uuid),
                hex(&reference.array_uuid)
            )));
        }
        if !same_geometry(sb, reference) || !stripes_agree(sb, reference) {
            return Err(EngineError::Assemble(format!(
                "{}: its superblock disagrees with the others about the geometry",
                d
            )));
        }
        let idx = sb.member_index as usize;
        if let Some(other) = seen[idx] {
            return Err(EngineError::Assemble(format!(
                "{} and {} both claim member index {idx}",
                names[other], d
            )));
        }
        seen[idx] = Some(pos);
        if idx != pos {
            return Err(EngineError::Assemble(format!(
                "{} is member {idx} but was given in position {pos}; list members in index order",
                d
            )));
        }
        fixes[pos] = *fixed;
    }
    if names.len() != n {
        return Err(EngineError::Assemble(format!(
            "the array has {n} members but {} were given",
            names.len()
        )));
    }
    // A superblock that describes more than any member holds is wrong, not the members: a
    // member shorter than the rest is taken out (truncated), but all of them short means the
    // stripes or geometry fields cannot be believed (FORMAT.md §2.1: a valid copy describes a
    // possible array). Refused before anything is read from the data area or written.
    let need = reference.member_bytes();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    if largest < need {
        return Err(EngineError::Assemble(format!(
            "the superblock describes {} stripes of {}-byte units ({need} bytes per member with the metadata area and journal), but the largest member holds {largest} bytes: its stripes or geometry fields are wrong (FORMAT.md §2.1)",
            reference.stripes,
            reference.unit_bytes()
        )));
    }
    Ok(fixes)
}

/// Where one given member stands against the newest superblock (FORMAT.md §2.1).
enum Standing {
    /// Current: the array uses it.
    Current,
    /// Cannot be used (unreadable, truncated), and why.
    Unusable(String),
    /// Holds old data (superseded by a replace, or missed writes), and why.
    Stale(String),
    /// Written by an assembly that did not include the newest superblock's member.
    Split,
}

/// Where member `pos` stands: `f` is its best superblock (or why it has none), `size` its
/// bytes.
fn standing(
    pos: usize,
    f: &Result<(Superblock, u8), String>,
    size: u64,
    reference: &Superblock,
) -> Standing {
    let need = reference.member_bytes();
    let sb = match f {
        Err(why) => return Standing::Unusable(why.clone()),
        Ok((sb, _)) => sb,
    };
    // Cut short (a file truncated, a smaller device): its units past the end cannot be read or
    // written, so it is out from the start rather than failed by the first I/O past its end.
    if size < need {
        return Standing::Unusable(format!(
            "truncated: it holds {size} bytes but the array needs {need} on each member; it needs a rebuild (replace it)"
        ));
    }
    let slot = reference.member_table[pos];
    // A device a replace superseded carries the slot's older device number: it holds old data
    // however current its event count looks (FORMAT.md §2.4).
    let own = sb.member_table.get(pos).map(|s| s.device);
    if own.is_some_and(|d| d != slot.device) {
        return Standing::Stale(format!(
            "superseded: a replace put another device into slot {pos} (device number {}; this one is {}), so it holds old data; give the device that replaced it",
            slot.device,
            own.unwrap_or_default()
        ));
    }
    if slot.state == MemberState::Active {
        // Active in the newest table, yet its own table records as gone a member the newest
        // table counts current on the same device, at a later event: the two were written
        // apart (each side recorded the other's members gone). The one innocent way to get
        // there is a crash in the superblock write that ended a re-add, which leaves a member
        // exactly one event count behind: that is taken as current, as before; level with the
        // newest, or further behind, it is not one history.
        let disagrees =
            sb.member_table
                .iter()
                .zip(&reference.member_table)
                .any(|(mine, newest)| {
                    mine.state != MemberState::Active
                        && newest.state == MemberState::Active
                        && mine.device == newest.device
                        && newest.last_event > mine.last_event
                });
        let apart = disagrees && sb.generation.saturating_add(1) != reference.generation;
        return if apart {
            Standing::Split
        } else {
            Standing::Current
        };
    }
    if sb.generation <= slot.last_event {
        return Standing::Stale(format!(
            "stale: {} since event {} while the array went on to event {} (its superblock is at {}); it missed writes and needs a rebuild (replace it)",
            slot.state.name(),
            slot.last_event,
            reference.generation,
            sb.generation
        ));
    }
    Standing::Split
}

/// The members that cannot be used (unreadable, truncated, superseded or stale), at most `m`;
/// a split brain refused. With `force`, when more than `m` are unusable, the freshest stale
/// members (highest event count; never a superseded or unreadable one) are brought back until
/// `m` are out: returned second, with what each missed.
#[allow(
    clippy::type_complexity,
    reason = "two lists of (member, why), named at the one call"
)]
fn unusable(
    names: &[String],
    sizes: &[u64],
    found: &[Result<(Superblock, u8), String>],
    reference: &Superblock,
    force: bool,
) -> Result<(Vec<(usize, String)>, Vec<(usize, String)>), EngineError> {
    // Which members are current (FORMAT.md §2.1): the newest superblock's member table and
    // every member's own event count decide.
    let mut unusable: Vec<(usize, String)> = Vec::new();
    let mut stale: Vec<usize> = Vec::new();
    let mut split: Vec<usize> = Vec::new();
    for (pos, f) in found.iter().enumerate() {
        match standing(pos, f, sizes[pos], reference) {
            Standing::Current => {}
            Standing::Unusable(why) => unusable.push((pos, why)),
            Standing::Stale(why) => {
                stale.push(pos);
                unusable.push((pos, why));
            }
            Standing::Split => split.push(pos),
        }
    }
    if !split.is_empty() {
        return Err(split_brain(names, found, &split, &stale, reference));
    }
    let m = reference.parity_chunks as usize;
    let generation = |p: usize| found[p].as_ref().map_or(0, |(sb, _)| sb.generation);
    // Only a stale member (it missed writes) can come back; a superseded one holds a device a
    // replace retired.
    let mut candidates: Vec<usize> = stale
        .iter()
        .copied()
        .filter(|&p| {
            let own = found[p]
                .as_ref()
                .ok()
                .and_then(|(sb, _)| sb.member_table.get(p).map(|s| s.device));
            own == Some(reference.member_table[p].device)
        })
        .collect();
    candidates.sort_by_key(|&p| std::cmp::Reverse(generation(p)));
    let mut forced = Vec::new();
    if force {
        for p in candidates.iter().copied() {
            if unusable.len() <= m {
                break;
            }
            if let Some(i) = unusable.iter().position(|(q, _)| *q == p) {
                let (_, why) = unusable.remove(i);
                forced.push((p, why));
            }
        }
    }
    if unusable.len() > m {
        let why: Vec<String> = unusable
            .iter()
            .map(|(p, w)| format!("{}: {w}", names[*p]))
            .collect();
        let hint = if force {
            " (a forced assembly brings back only stale members, and not enough are stale)"
                .to_string()
        } else if unusable.len() - m <= candidates.len() {
            format!(
                "; `--force-assemble` would bring back {} read-only, every read verified against the integrity metadata",
                candidates
                    .iter()
                    .take(unusable.len() - m)
                    .map(|&p| format!("{} (event {})", names[p], generation(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        return Err(EngineError::Assemble(format!(
            "{} members are unusable but the array survives at most {m}: {}{hint}",
            unusable.len(),
            why.join("; ")
        )));
    }
    Ok((unusable, forced))
}

/// The refusal of a split brain: the members written apart (`split`) against the members the
/// newest superblock counts as current (if any were given), each with its event count.
fn split_brain(
    names: &[String],
    found: &[Result<(Superblock, u8), String>],
    split: &[usize],
    stale: &[usize],
    reference: &Superblock,
) -> EngineError {
    let side = |list: &[usize]| -> String {
        let names = list
            .iter()
            .map(|&p| {
                let g = found[p].as_ref().map(|(sb, _)| sb.generation).unwrap_or(0);
                format!("{} (event {g})", names[p])
            })
            .collect::<Vec<_>>()
            .join(", ");
        let word = if list.len() == 1 { "member" } else { "members" };
        format!("{word} {names}")
    };
    let current: Vec<usize> = (0..reference.members as usize)
        .filter(|p| found[*p].is_ok() && !split.contains(p) && !stale.contains(p))
        .collect();
    EngineError::SplitBrain(if current.is_empty() {
        // Every member the newest superblock counts as current is absent or stale: one side of
        // the split is all that was given.
        format!(
            "split brain: {} {} written after the newest superblock (event {}) recorded {} as gone, and no member given is current by that superblock (the side that wrote it is absent or stale); refusing to guess which side holds the data — give the other side's members too, or assemble the side you trust alone and replace the others",
            side(split),
            if split.len() == 1 { "was" } else { "were" },
            reference.generation,
            if split.len() == 1 { "it" } else { "them" },
        )
    } else {
        format!(
            "split brain: {} and {} were assembled and written apart (each side recorded the other as gone); refusing to guess which side holds the data — assemble one side alone and replace the other's members",
            side(&current),
            side(split)
        )
    })
}

/// The best valid superblock copy of a member, and how many copies were damaged or stale.
pub(crate) fn read_superblock(d: &dyn stripeguard_disk::Disk) -> Result<(Superblock, u8), String> {
    let mut copies = Vec::new();
    let mut errors = Vec::new();
    for off in SUPERBLOCK_COPY_OFFSETS {
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        match d.read_at(off, &mut b) {
            Err(e) => errors.push(e.reason()),
            Ok(()) => match Superblock::decode(&b) {
                Ok(sb) => copies.push(sb),
                Err(e) => errors.push(e.to_string()),
            },
        }
    }
    let best = copies.iter().max_by_key(|sb| sb.generation).cloned();
    match best {
        Some(sb) => {
            let stale = copies
                .iter()
                .filter(|c| c.generation != sb.generation)
                .count();
            Ok((sb, u8::try_from(errors.len() + stale).unwrap_or(u8::MAX)))
        }
        None => Err(errors.first().cloned().unwrap_or_default()),
    }
}

/// Same shape, stripes aside: a member may trail the newest superblock in its stripe count by
/// a grow whose superblock writes it missed ([`trails_a_grow`]).
fn same_geometry(a: &Superblock, b: &Superblock) -> bool {
    (a.members, a.data_chunks, a.parity_chunks, a.code, a.scheme)
        == (b.members, b.data_chunks, b.parity_chunks, b.code, b.scheme)
        && (a.cross_check, a.layout, a.journal_slots, a.write_journal)
            == (b.cross_check, b.layout, b.journal_slots, b.write_journal)
        && (a.sector_shift, a.chunk_bytes, a.data_offset_bytes)
            == (b.sector_shift, b.chunk_bytes, b.data_offset_bytes)
}

/// Whether `sb`'s stripe count may differ from the newest superblock's (FORMAT.md §2,
/// "Growing the array"): only by trailing it — fewer stripes and an older event count (a grow
/// is committed by its superblock writes, and a crash among them leaves both kinds).
fn stripes_agree(sb: &Superblock, newest: &Superblock) -> bool {
    sb.stripes == newest.stripes
        || (sb.stripes < newest.stripes && sb.generation < newest.generation)
}
