//! Faults put into a member at rest (the array stopped), as a person with `dd` would: the same
//! damage [`crate::FaultyDisk`] does during I/O, applied directly to the media, at the unit
//! offsets of a [`UnitMap`]. Used by `stripeguard inject`.

use crate::{Disk, DiskError, UnitMap};
use rand::Rng;

/// A fault for a stopped member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtRest {
    /// Flip one random bit of the unit.
    BitRot,
    /// The unit's first `sectors` sectors get new random bytes; the rest (with the appendix)
    /// stays old, as after a torn write.
    TornWrite {
        /// Sectors replaced (at least 1, fewer than the unit has).
        sectors: u64,
    },
    /// The unit's bytes are written over unit `victim`, shifted by `shift_sectors`.
    MisdirectedWrite {
        /// The unit overwritten (and the next one when shifted).
        victim: u64,
        /// Sector shift; 0 = aligned.
        shift_sectors: u64,
    },
    /// `count` units from the target on are overwritten with random bytes.
    Overwrite {
        /// Units.
        count: u64,
    },
}

/// Why a fault cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum AtRestError {
    /// The target or victim is not on the member.
    #[error("{0}")]
    Range(String),
    /// The member could not be read or written.
    #[error(transparent)]
    Disk(#[from] DiskError),
}

/// Apply `fault` to unit `unit` of `disk` (laid out as `map`); returns what was done, in words.
pub fn apply(
    disk: &dyn Disk,
    map: &UnitMap,
    unit: u64,
    fault: AtRest,
    rng: &mut impl Rng,
) -> Result<String, AtRestError> {
    let range = |s: String| Err(AtRestError::Range(s));
    if unit >= map.units {
        return range(format!(
            "unit {unit} is beyond the member's {} units",
            map.units
        ));
    }
    let at = map.offset_of(unit);
    let sector = map.sector_bytes;
    // A buffer of `bytes` (at most a unit), or why it cannot be had.
    let buffer = |bytes: u64| {
        usize::try_from(bytes).map(|n| vec![0u8; n]).map_err(|_| {
            AtRestError::Range(format!(
                "a unit of {} bytes does not fit in memory",
                map.unit_bytes
            ))
        })
    };
    match fault {
        AtRest::BitRot => {
            let byte = rng.random_range(0..map.unit_bytes);
            let mask: u8 = 1 << rng.random_range(0..8);
            let mut x = [0u8];
            disk.read_at(at + byte, &mut x)?;
            x[0] ^= mask;
            disk.write_at(at + byte, &x)?;
            Ok(format!(
                "flipped bit {mask:#04x} of byte {byte} in unit {unit}"
            ))
        }
        AtRest::TornWrite { sectors } => {
            let keep = sectors.clamp(1, map.unit_sectors() - 1);
            let mut fresh = buffer(keep * sector)?;
            rng.fill(&mut fresh[..]);
            disk.write_at(at, &fresh)?;
            Ok(format!(
                "tore unit {unit}: its first {keep} sector(s) replaced, the rest stale"
            ))
        }
        AtRest::MisdirectedWrite {
            victim,
            shift_sectors,
        } => {
            let span = if shift_sectors > 0 { 2 } else { 1 };
            if shift_sectors >= map.unit_sectors() || victim.saturating_add(span) > map.units {
                return range(format!(
                    "victim unit {victim} (and its neighbour when shifted) must be on the member's {} units, shifted by less than a unit",
                    map.units
                ));
            }
            let mut bytes = buffer(map.unit_bytes)?;
            disk.read_at(at, &mut bytes)?;
            disk.write_at(map.offset_of(victim) + shift_sectors * sector, &bytes)?;
            Ok(format!(
                "wrote unit {unit}'s bytes over unit {victim} shifted by {shift_sectors} sector(s)"
            ))
        }
        AtRest::Overwrite { count } => {
            let count = count.clamp(1, map.units - unit);
            let mut bytes = buffer(map.unit_bytes)?;
            for u in unit..unit + count {
                rng.fill(&mut bytes[..]);
                disk.write_at(map.offset_of(u), &bytes)?;
            }
            Ok(format!(
                "overwrote {count} unit(s) from unit {unit} with random bytes"
            ))
        }
    }
}
