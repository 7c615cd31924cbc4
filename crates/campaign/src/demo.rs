//! `stripeguard demo`: for every scheme and every fault kind, a small RAID-6 array of member files
//! in a directory; write data, inject the fault into four stripes, read everything back, scrub,
//! and tabulate what was injected, detected, located, repaired, and how many wrong bytes came back.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use stripeguard_disk::{DiskRef, Fault, FaultKind, FaultyDisk, FileDisk};
use stripeguard_engine::usize_of;
use stripeguard_engine::{Array, ArrayConfig, AssembleOptions, EngineError, EventAction};
use stripeguard_integrity::Scheme;

/// One row of the demo table.
#[derive(Clone, Debug, Serialize)]
pub struct DemoRow {
    /// Scheme.
    pub scheme: Scheme,
    /// Fault kind.
    pub fault: &'static str,
    /// Faults that fired.
    pub injected: u64,
    /// Failed checks.
    pub detected: u64,
    /// Units named wrong (misdirected reads: the unit that returned wrong bytes).
    pub located: u64,
    /// Units rebuilt and rewritten, plus reads answered again after a misdirected read.
    pub repaired: u64,
    /// Bytes returned that differ from what was written.
    pub wrong_bytes: u64,
    /// Reads refused as unrecoverable.
    pub unrecoverable: u64,
}

/// Demo geometry: RAID-6, 4 data + 2 parity, 4 KiB chunks.
pub const DEMO_DATA: usize = 4;
/// Parity members.
pub const DEMO_PARITY: usize = 2;
const CHUNK: u32 = 4096;
const STRIPES: u64 = 24;
const TARGETS: [u64; 4] = [1, 6, 11, 16];

/// Run the demo with member files under `dir`; `progress(done, total)` after each case.
pub fn run_demo(
    dir: &Path,
    keep: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<DemoRow>, EngineError> {
    let mut rows = Vec::new();
    let total = Scheme::ENGINE.len() * FaultKind::ALL.len();
    for scheme in Scheme::ENGINE {
        for kind in FaultKind::ALL {
            rows.push(one_case(dir, keep, scheme, kind)?);
            progress(rows.len(), total);
        }
    }
    Ok(rows)
}

fn one_case(
    dir: &Path,
    keep: bool,
    scheme: Scheme,
    kind: FaultKind,
) -> Result<DemoRow, EngineError> {
    let case = dir.join(format!("{}-{}", scheme.name(), kind.name()));
    std::fs::create_dir_all(&case)
        .map_err(|e| EngineError::Config(format!("{}: {e}", case.display())))?;
    let n = DEMO_DATA + DEMO_PARITY + scheme.extra_members();
    let unit = CHUNK as u64 + if scheme.has_appendix() { 512 } else { 0 };
    let size = stripeguard_integrity::MetadataLayout::member_bytes_for(STRIPES, unit);
    let paths: Vec<_> = (0..n)
        .map(|i| case.join(format!("member{i}.img")))
        .collect();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let files: Vec<DiskRef> = paths
        .iter()
        .map(|p| FileDisk::create(p, size, false).map(|d| Arc::new(d) as DiskRef))
        .collect::<Result<_, _>>()?;
    let cfg = ArrayConfig::new(DEMO_DATA, DEMO_PARITY, scheme, CHUNK, STRIPES);
    let a = Array::create(files.clone(), &cfg, true, &mut |_, _| {})?;
    let map = a.unit_map();
    a.close()?;
    let faulty: Vec<Arc<FaultyDisk>> = files
        .into_iter()
        .map(|d| FaultyDisk::new(d, map).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let array = Array::assemble(
        faulty.iter().map(|f| f.clone() as DiskRef).collect(),
        &AssembleOptions::default(),
    )?;
    let g = array.geometry();
    let mut rng = rand::rngs::StdRng::seed_from_u64(kind as u64 * 31 + scheme.id() as u64);
    let cap = usize_of(array.capacity_bytes());
    let mut model = vec![0u8; cap];
    rng.fill(&mut model[..]);
    array.write(0, &model)?;

    let targets: &[u64] = if kind == FaultKind::MemberFailure {
        &TARGETS[..1]
    } else {
        &TARGETS
    };
    for &s in targets {
        let member = g.member_of(s, 1);
        let fault = match kind {
            FaultKind::LostWrite => Fault::LostWrite,
            FaultKind::TornWrite => Fault::TornWrite { sectors: 3 },
            FaultKind::MisdirectedWriteAligned => Fault::MisdirectedWrite {
                victim: s + 1,
                shift_sectors: 0,
            },
            FaultKind::MisdirectedWriteUnaligned => Fault::MisdirectedWrite {
                victim: s + 1,
                shift_sectors: 5,
            },
            FaultKind::MisdirectedReadAligned => Fault::MisdirectedRead {
                source: s + 1,
                shift_sectors: 0,
            },
            FaultKind::MisdirectedReadUnaligned => Fault::MisdirectedRead {
                source: s + 1,
                shift_sectors: 5,
            },
            FaultKind::LatentSectorError => Fault::LatentSectorError { sector: 3 },
            FaultKind::BitRot => Fault::BitRot {
                byte: 100,
                mask: 0x24,
            },
            FaultKind::MemberFailure => Fault::MemberFailure,
        };
        faulty[member].arm(s, fault)?;
        if kind.on_write() {
            // Overwrite the target chunk through the array: the fault fires on that write.
            let off = usize_of(s * g.stripe_data_bytes() + g.chunk_bytes);
            let mut data = vec![0u8; CHUNK as usize];
            rng.fill(&mut data[..]);
            array.write(off as u64, &data)?;
            model[off..off + data.len()].copy_from_slice(&data);
        }
    }
    let mut back = vec![0u8; cap];
    let mut unrecoverable = 0;
    let mut wrong = 0u64;
    match array.read(0, &mut back) {
        Ok(()) => wrong = back.iter().zip(&model).filter(|(x, y)| x != y).count() as u64,
        Err(EngineError::Unrecoverable { .. }) => unrecoverable += 1,
        Err(e) => return Err(e),
    }
    if scheme != Scheme::None {
        for s in 0..g.stripes {
            if let Err(EngineError::Unrecoverable { .. }) = array.scrub_stripe(s) {
                unrecoverable += 1;
            }
        }
    }
    let c = array.counters();
    let rereads = array
        .events()
        .iter()
        .filter(|e| e.action == EventAction::Reread)
        .count() as u64;
    let injected = faulty.iter().map(|f| f.log().len() as u64).sum();
    array.close()?;
    if !keep {
        let _ = std::fs::remove_dir_all(&case);
    }
    Ok(DemoRow {
        scheme,
        fault: kind.name(),
        injected,
        detected: c.detected,
        // A failed member is one of the demo's faults: found, and served rebuilt.
        located: c.located + c.members_failed,
        repaired: c.repaired + c.members_failed + rereads,
        wrong_bytes: wrong,
        unrecoverable,
    })
}
