//! The fault injector: every fault of docs/DESIGN.md's table, on a schedule ("the next write to unit
//! `u`"), applied to the wrapped disk, with a log of what fired.
//!
//! It also keeps a **shadow** image: what the disk would hold had every write landed as issued.
//! [`FaultyDisk::corrupted_units`] compares media and shadow, so a test can assert that after a
//! scrub every silently damaged unit was found and rewritten.

use crate::{Disk, DiskError, DiskRef};
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Where units are on a member (FORMAT.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnitMap {
    /// Byte offset of unit 0.
    pub data_offset: u64,
    /// Bytes per unit (chunk + appendix).
    pub unit_bytes: u64,
    /// Sector size.
    pub sector_bytes: u64,
    /// Units on the member.
    pub units: u64,
}

impl UnitMap {
    /// The unit containing byte `offset`, if any.
    pub fn unit_of(&self, offset: u64) -> Option<u64> {
        let u = offset.checked_sub(self.data_offset)? / self.unit_bytes;
        (u < self.units).then_some(u)
    }
    /// First byte of unit `u`.
    pub fn offset_of(&self, u: u64) -> u64 {
        self.data_offset + u * self.unit_bytes
    }
    /// Sectors per unit.
    pub fn unit_sectors(&self) -> u64 {
        self.unit_bytes / self.sector_bytes
    }
}

/// One fault, attached to a target unit by [`FaultyDisk::arm`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "fault")]
pub enum Fault {
    /// The next write to the unit does not reach the media.
    LostWrite,
    /// The next write to the unit lands only its first `sectors` sectors.
    TornWrite {
        /// Sectors written.
        sectors: u64,
    },
    /// The next write to the unit lands at unit `victim` shifted by `shift_sectors` instead
    /// (aligned when the shift is 0; otherwise the end of `victim` and the front of `victim + 1`).
    MisdirectedWrite {
        /// Unit overwritten.
        victim: u64,
        /// Sector shift.
        shift_sectors: u64,
    },
    /// The next read of the unit returns the bytes at unit `source` shifted by `shift_sectors`.
    MisdirectedRead {
        /// Unit really read.
        source: u64,
        /// Sector shift.
        shift_sectors: u64,
    },
    /// Now: sector `sector` of the unit returns EIO until it is rewritten.
    LatentSectorError {
        /// Sector index within the unit.
        sector: u64,
    },
    /// Now: flip the bits of `mask` in byte `byte` of the unit.
    BitRot {
        /// Byte within the unit.
        byte: u64,
        /// Bits to flip (non-zero).
        mask: u8,
    },
    /// Now: every I/O to the disk fails.
    MemberFailure,
}

/// The fault kinds of docs/DESIGN.md's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Lost write.
    LostWrite,
    /// Torn write.
    TornWrite,
    /// Misdirected write, aligned.
    MisdirectedWriteAligned,
    /// Misdirected write, unaligned.
    MisdirectedWriteUnaligned,
    /// Misdirected read, aligned.
    MisdirectedReadAligned,
    /// Misdirected read, unaligned.
    MisdirectedReadUnaligned,
    /// Latent sector error.
    LatentSectorError,
    /// Bit rot.
    BitRot,
    /// Whole-member failure.
    MemberFailure,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::LostWrite,
        FaultKind::TornWrite,
        FaultKind::MisdirectedWriteAligned,
        FaultKind::MisdirectedWriteUnaligned,
        FaultKind::MisdirectedReadAligned,
        FaultKind::MisdirectedReadUnaligned,
        FaultKind::LatentSectorError,
        FaultKind::BitRot,
        FaultKind::MemberFailure,
    ];

    /// Name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LostWrite => "lost-write",
            FaultKind::TornWrite => "torn-write",
            FaultKind::MisdirectedWriteAligned => "misdirected-write",
            FaultKind::MisdirectedWriteUnaligned => "misdirected-write-unaligned",
            FaultKind::MisdirectedReadAligned => "misdirected-read",
            FaultKind::MisdirectedReadUnaligned => "misdirected-read-unaligned",
            FaultKind::LatentSectorError => "latent-sector-error",
            FaultKind::BitRot => "bit-rot",
            FaultKind::MemberFailure => "member-failure",
        }
    }

    /// From a name.
    pub fn from_name(s: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Silent (the disk reports nothing) as opposed to an erasure.
    pub fn is_silent(self) -> bool {
        !matches!(
            self,
            FaultKind::LatentSectorError | FaultKind::MemberFailure
        )
    }

    /// Fires on the next write to the target (rather than on a read, or at once).
    pub fn on_write(self) -> bool {
        matches!(
            self,
            FaultKind::LostWrite
                | FaultKind::TornWrite
                | FaultKind::MisdirectedWriteAligned
                | FaultKind::MisdirectedWriteUnaligned
        )
    }

    /// A random fault of this kind for target unit `unit` (`map.units >= 3`). Victims and sources
    /// are other units of the same member; returns the units whose stripes it may damage.
    pub fn random(self, rng: &mut impl Rng, map: &UnitMap, unit: u64) -> (Fault, Vec<u64>) {
        let secs = map.unit_sectors();
        let other = |rng: &mut dyn rand::RngCore, span: u64| loop {
            let v = rng.random_range(0..map.units - span);
            if v != unit && (span == 0 || v + 1 != unit) {
                break v;
            }
        };
        match self {
            FaultKind::LostWrite => (Fault::LostWrite, vec![unit]),
            FaultKind::TornWrite => (
                Fault::TornWrite {
                    sectors: rng.random_range(1..secs),
                },
                vec![unit],
            ),
            FaultKind::MisdirectedWriteAligned => {
                let victim = other(rng, 0);
                (
                    Fault::MisdirectedWrite {
                        victim,
                        shift_sectors: 0,
                    },
                    vec![unit, victim],
                )
            }
            FaultKind::MisdirectedWriteUnaligned => {
                let victim = other(rng, 1);
                (
                    Fault::MisdirectedWrite {
                        victim,
                        shift_sectors: rng.random_range(1..secs),
                    },
                    vec![unit, victim, victim + 1],
                )
            }
            FaultKind::MisdirectedReadAligned => (
                Fault::MisdirectedRead {
                    source: other(rng, 0),
                    shift_sectors: 0,
                },
                vec![unit],
            ),
            FaultKind::MisdirectedReadUnaligned => (
                Fault::MisdirectedRead {
                    source: other(rng, 1),
                    shift_sectors: rng.random_range(1..secs),
                },
                vec![unit],
            ),
            FaultKind::LatentSectorError => (
                Fault::LatentSectorError {
                    sector: rng.random_range(0..secs),
                },
                vec![unit],
            ),
            FaultKind::BitRot => (
                Fault::BitRot {
                    byte: rng.random_range(0..map.unit_bytes),
                    mask: rng.random_range(1..=255),
                },
                vec![unit],
            ),
            FaultKind::MemberFailure => (Fault::MemberFailure, vec![]),
        }
    }
}

impl Fault {
    /// The kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::LostWrite => FaultKind::LostWrite,
            Fault::TornWrite { .. } => FaultKind::TornWrite,
            Fault::MisdirectedWrite {
                shift_sectors: 0, ..
            } => FaultKind::MisdirectedWriteAligned,
            Fault::MisdirectedWrite { .. } => FaultKind::MisdirectedWriteUnaligned,
            Fault::MisdirectedRead {
                shift_sectors: 0, ..
            } => FaultKind::MisdirectedReadAligned,
            Fault::MisdirectedRead { .. } => FaultKind::MisdirectedReadUnaligned,
            Fault::LatentSectorError { .. } => FaultKind::LatentSectorError,
            Fault::BitRot { .. } => FaultKind::BitRot,
            Fault::MemberFailure => FaultKind::MemberFailure,
        }
    }
}

/// A fault that fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Injected {
    /// The disk.
    pub disk: String,
    /// Target unit.
    pub unit: u64,
    /// What.
    pub fault: Fault,
}

struct State {
    armed: Vec<(u64, Fault)>,
    bad_sectors: BTreeSet<u64>,
    failed: bool,
    log: Vec<Injected>,
    shadow: Vec<u8>,
}

/// A disk that injects faults into the disk it wraps.
pub struct FaultyDisk {
    inner: DiskRef,
    map: UnitMap,
    state: Mutex<State>,
}

impl FaultyDisk {
    /// Wrap `inner`, whose units are laid out as `map`. Reads the whole disk once for the shadow.
    pub fn new(inner: DiskRef, map: UnitMap) -> Result<Self, DiskError> {
        let size = usize::try_from(inner.size_bytes()).map_err(|_| DiskError::Failed {
            name: inner.name().to_string(),
            why: format!(
                "{} bytes are too many to shadow in memory",
                inner.size_bytes()
            ),
        })?;
        let mut shadow = vec![0u8; size];
        inner.read_at(0, &mut shadow)?;
        Ok(FaultyDisk {
            inner,
            map,
            state: Mutex::new(State {
                armed: Vec::new(),
                bad_sectors: BTreeSet::new(),
                failed: false,
                log: Vec::new(),
                shadow,
            }),
        })
    }

    /// The unit map.
    pub fn map(&self) -> &UnitMap {
        &self.map
    }

    /// Attach `fault` to `unit`. Latent sector errors, bit rot and member failure apply at once;
    /// the others wait for the next write (or read) of the unit.
    pub fn arm(&self, unit: u64, fault: Fault) -> Result<(), DiskError> {
        assert!(unit < self.map.units, "unit {unit} out of range");
        let mut st = self.state.lock().expect("lock");
        let base = self.map.offset_of(unit);
        match fault {
            Fault::LatentSectorError { sector } => {
                st.bad_sectors.insert(base / self.map.sector_bytes + sector);
            }
            Fault::BitRot { byte, mask } => {
                let mut b = [0u8];
                self.inner.read_at(base + byte, &mut b)?;
                b[0] ^= mask;
                self.inner.write_at(base + byte, &b)?;
            }
            Fault::MemberFailure => st.failed = true,
            _ => {
                st.armed.push((unit, fault));
                return Ok(());
            }
        }
        let disk = self.inner.name().to_string();
        st.log.push(Injected { disk, unit, fault });
        Ok(())
    }

    /// Faults that fired (or were applied), in order.
    pub fn log(&self) -> Vec<Injected> {
        self.state.lock().expect("lock").log.clone()
    }

    /// Forget the faults that fired so far ([`FaultyDisk::log`] starts again).
    pub fn clear_log(&self) {
        self.state.lock().expect("lock").log.clear();
    }

    /// Armed faults still waiting for their I/O.
    pub fn armed(&self) -> Vec<(u64, Fault)> {
        self.state.lock().expect("lock").armed.clone()
    }

    /// Drop every armed fault that has not fired.
    pub fn disarm(&self) {
        self.state.lock().expect("lock").armed.clear();
    }

    /// Whether the member has failed.
    pub fn has_failed(&self) -> bool {
        self.state.lock().expect("lock").failed
    }

    /// Units whose media differs from what was written to them (silent damage now on the disk),
    /// plus units with an unreadable sector.
    pub fn corrupted_units(&self) -> Result<BTreeSet<u64>, DiskError> {
        let st = self.state.lock().expect("lock");
        let mut out = BTreeSet::new();
        #[allow(
            clippy::cast_possible_truncation,
            reason = "a unit lies on the disk, whose whole shadow is in memory"
        )]
        let mut media = vec![0u8; self.map.unit_bytes as usize];
        for u in 0..self.map.units {
            let o = self.map.offset_of(u);
            self.inner.read_at(o, &mut media)?;
            #[allow(
                clippy::cast_possible_truncation,
                reason = "the read above succeeded, so the unit is within the disk and its shadow"
            )]
            let shadow = &st.shadow[o as usize..(o + self.map.unit_bytes) as usize];
            if media[..] != *shadow {
                out.insert(u);
            }
        }
        let spu = self.map.unit_sectors();
        let first = self.map.data_offset / self.map.sector_bytes;
        out.extend(st.bad_sectors.iter().map(|s| (s - first) / spu));
        Ok(out)
    }

    fn take_armed(st: &mut State, unit: u64, on_write: bool) -> Option<Fault> {
        let i = st
            .armed
            .iter()
            .position(|(u, f)| *u == unit && f.kind().on_write() == on_write)?;
        Some(st.armed.remove(i).1)
    }

    fn failed(&self) -> DiskError {
        DiskError::Failed {
            name: self.inner.name().to_string(),
            why: "disk failed (injected)".into(),
        }
    }
}

impl Disk for FaultyDisk {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn device(&self) -> Option<String> {
        self.inner.device()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn measure_size(&self) -> u64 {
        self.inner.measure_size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let mut st = self.state.lock().expect("lock");
        if st.failed {
            return Err(self.failed());
        }
        let sb = self.map.sector_bytes;
        let (first, last) = (offset / sb, (offset + buf.len().max(1) as u64 - 1) / sb);
        if let Some(&bad) = st.bad_sectors.range(first..=last).next() {
            return Err(DiskError::Medium {
                name: self.inner.name().to_string(),
                offset: bad * sb,
            });
        }
        if let Some(unit) = self.map.unit_of(offset) {
            if let Some(fault) = Self::take_armed(&mut st, unit, false) {
                let Fault::MisdirectedRead {
                    source,
                    shift_sectors,
                } = fault
                else {
                    unreachable!("only reads are armed for reads")
                };
                let from = self.map.offset_of(source)
                    + shift_sectors * sb
                    + (offset - self.map.offset_of(unit));
                let disk = self.inner.name().to_string();
                st.log.push(Injected { disk, unit, fault });
                let end = self.inner.size_bytes();
                let from = from.min(end - buf.len() as u64);
                return self.inner.read_at(from, buf);
            }
        }
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let mut st = self.state.lock().expect("lock");
        if st.failed {
            return Err(self.failed());
        }
        crate::check_range(
            self.inner.name(),
            "write",
            offset,
            buf.len(),
            self.inner.size_bytes(),
        )?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked above to be within the disk, whose whole shadow is in memory"
        )]
        let o = offset as usize;
        st.shadow[o..o + buf.len()].copy_from_slice(buf);
        let sb = self.map.sector_bytes;
        let fault = self
            .map
            .unit_of(offset)
            .and_then(|u| Self::take_armed(&mut st, u, true).map(|f| (u, f)));
        let Some((unit, fault)) = fault else {
            let (first, last) = (offset / sb, (offset + buf.len() as u64).div_ceil(sb));
            let healed: Vec<u64> = st.bad_sectors.range(first..last).copied().collect();
            for s in healed {
                st.bad_sectors.remove(&s);
            }
            return self.inner.write_at(offset, buf);
        };
        let disk = self.inner.name().to_string();
        st.log.push(Injected {
            disk,
            unit,
            fault: fault.clone(),
        });
        match fault {
            Fault::LostWrite => Ok(()),
            Fault::TornWrite { sectors } => {
                let n = usize::try_from(sectors.saturating_mul(sb))
                    .unwrap_or(usize::MAX)
                    .min(buf.len().saturating_sub(1));
                self.inner.write_at(offset, &buf[..n])
            }
            Fault::MisdirectedWrite {
                victim,
                shift_sectors,
            } => {
                let to = self.map.offset_of(victim)
                    + shift_sectors * sb
                    + (offset - self.map.offset_of(unit));
                let end = self.inner.size_bytes();
                let to = to.min(end - buf.len() as u64);
                self.inner.write_at(to, buf)
            }
            _ => unreachable!("only write faults are armed for writes"),
        }
    }

    fn prefers_parallel(&self) -> bool {
        self.inner.prefers_parallel()
    }
    fn mem_align(&self) -> usize {
        self.inner.mem_align()
    }
    fn try_lock(&self, exclusive: bool) -> Result<(), DiskError> {
        self.inner.try_lock(exclusive)
    }
    fn flush(&self) -> Result<(), DiskError> {
        if self.state.lock().expect("lock").failed {
            return Err(self.failed());
        }
        self.inner.flush()
    }
}
