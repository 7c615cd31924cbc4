//! Stripe diagnosis: given the units of one stripe that were read, say which are wrong and what
//! the truth about every data chunk is.
//!
//! The evidence, cheapest first (Li & Lee section III):
//! 1. **Self checks** of every unit read: the appendix parses, its self checksum matches the
//!    bytes (torn write, bit rot, unaligned misdirected I/O) and its physical identity is the
//!    place it was read from (aligned misdirected write or read). A unit that fails is wrong.
//! 2. **Claims** about each data chunk `i`, from every unit that passed: the chunk itself (its
//!    version / sequence in the appendix, or the CRC of its bytes), its buddy `(i + 1) mod k`
//!    (checksum schemes: a CRC copy) and every parity (its entry list).
//!    - versions and sequences order writes in time, so the **largest claim is the truth** and a
//!      unit claiming less is stale (a lost write left it behind);
//!    - checksum copies **vote**: the value held by a strict majority of the claims is the truth,
//!      and a unit disagreeing with it is wrong. No majority = ambiguous.
//!
//! A unit that was not read contributes nothing. With a partial view (a normal read) a non-empty
//! result only means "something is wrong"; the engine then reads the whole stripe and diagnoses
//! again, when every surviving unit can vote.

use crate::{Appendix, AppendixError, Identity, MirrorKind, Role, Scheme};
use serde::Serialize;
use stripeguard_format::EventKind;

/// One unit of a stripe as the diagnosis sees it.
#[derive(Clone, Copy, Debug)]
pub enum UnitView<'a> {
    /// Not part of this read (no evidence either way).
    NotRead,
    /// The read failed (EIO, failed member): an erasure.
    Erased,
    /// The unit's bytes.
    Read {
        /// The chunk.
        chunk: &'a [u8],
        /// Its appendix sector.
        appendix: &'a [u8],
    },
    /// Part of the unit: its appendix and the checksum blocks `blocks.0..blocks.1` of its chunk
    /// (none for an appendix-only read). `chunk` is the whole chunk's buffer; only those blocks
    /// hold bytes read from the disk. The chunk's CRC is taken from the block table.
    Partial {
        /// The chunk's buffer.
        chunk: &'a [u8],
        /// The blocks read.
        blocks: (usize, usize),
        /// Its appendix.
        appendix: &'a [u8],
    },
}

/// What is wrong with a unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum FindingKind {
    /// The read failed: latent sector error or failed member.
    ReadError,
    /// Self checksum mismatch or no appendix: torn write, bit rot, unaligned misdirected I/O.
    Checksum {
        /// The decoder's message.
        detail: String,
    },
    /// The bytes belong elsewhere: aligned misdirected write or read.
    Identity {
        /// Member the appendix names.
        member: u16,
        /// Chunk number the appendix names.
        chunk_number: u64,
        /// Whether the appendix names another array.
        foreign: bool,
    },
    /// Older than its copies: a lost write (versions / sequences).
    Stale {
        /// What this unit says.
        has: u64,
        /// What the newest claim is.
        newest: u64,
        /// The data chunk the claims are about.
        about: usize,
    },
    /// Outvoted by the checksum copies: lost write, torn write or misdirection (checksum mirroring).
    Outvoted {
        /// What this unit says (or is).
        has: u32,
        /// The majority.
        majority: u32,
        /// The data chunk the claims are about.
        about: usize,
    },
}

impl FindingKind {
    /// What the event log calls it.
    pub fn event_kind(&self) -> EventKind {
        match self {
            FindingKind::ReadError => EventKind::ReadError,
            FindingKind::Checksum { .. } => EventKind::Checksum,
            FindingKind::Identity { .. } => EventKind::Identity,
            FindingKind::Stale { .. } => EventKind::Stale,
            FindingKind::Outvoted { .. } => EventKind::Outvoted,
        }
    }

    /// Short name for counters.
    pub fn name(&self) -> &'static str {
        self.event_kind().as_str()
    }
}

/// One wrong unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Position in the stripe: `0..k` data, `k..k+m` parity.
    pub position: usize,
    /// Why.
    pub kind: FindingKind,
    /// The chunk bytes are right and only the appendix is stale (a buddy that missed a checksum
    /// update): rewrite the appendix, no need to rebuild the chunk.
    pub chunk_ok: bool,
}

/// The result of [`diagnose`].
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// Wrong units, ascending by position, at most one finding per unit.
    pub findings: Vec<Finding>,
    /// Data chunks whose claims could not be decided (no strict majority).
    pub ambiguous: Vec<usize>,
    /// The truth about each data chunk (version, sequence or CRC), where any claim survived.
    pub truth: Vec<Option<u64>>,
    /// CRC-32C of the bytes of every unit read (`None` when not read).
    pub data_crc: Vec<Option<u32>>,
    /// The decoded appendix of every unit that passed its self checks.
    pub appendices: Vec<Option<Appendix>>,
}

impl Diagnosis {
    /// Nothing wrong and nothing undecided.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && self.ambiguous.is_empty()
    }

    /// Whether unit `position` was found wrong.
    pub fn is_bad(&self, position: usize) -> bool {
        self.findings.iter().any(|f| f.position == position)
    }

    fn add(&mut self, position: usize, kind: FindingKind, chunk_ok: bool) {
        match self.findings.iter_mut().find(|f| f.position == position) {
            // Keep the first reason; a unit whose chunk is wrong stays wrong.
            Some(f) => f.chunk_ok &= chunk_ok,
            None => self.findings.push(Finding {
                position,
                kind,
                chunk_ok,
            }),
        }
    }
}

/// Diagnose one stripe of scheme `scheme` with `k` data chunks. `units[p]` is position `p`
/// (`0..k` data, then parity); `expected(p)` is where it belongs.
pub fn diagnose(
    scheme: Scheme,
    k: usize,
    units: &[UnitView<'_>],
    expected: impl Fn(usize) -> Identity,
) -> Diagnosis {
    let n = units.len();
    let mut d = Diagnosis {
        truth: vec![None; k],
        data_crc: vec![None; n],
        appendices: vec![None; n],
        ..Diagnosis::default()
    };
    let Some(mirror) = scheme.mirror() else {
        return d;
    };

    // 1. Self checks.
    for (p, unit) in units.iter().enumerate() {
        match *unit {
            UnitView::NotRead => {}
            UnitView::Erased => d.add(p, FindingKind::ReadError, false),
            UnitView::Read { chunk, appendix } => match Appendix::decode(chunk, appendix) {
                Err(e) => {
                    d.data_crc[p] = Some(stripeguard_checksum::crc32c(chunk));
                    d.add(p, checksum_finding(&e), false)
                }
                Ok((a, crc)) => {
                    d.data_crc[p] = Some(crc);
                    check_identity(&mut d, p, a, scheme, k, &expected);
                }
            },
            UnitView::Partial {
                chunk,
                blocks,
                appendix,
            } => match Appendix::decode_appendix(appendix)
                .and_then(|a| a.check_blocks(chunk, blocks.0..blocks.1).map(|()| a))
            {
                Err(e) => d.add(p, checksum_finding(&e), false),
                // Only a pure data appendix has no table, and pure never reads part of a
                // chunk: a table-less appendix read in part is malformed here.
                Ok(a) if a.block_bytes == 0 => d.add(
                    p,
                    checksum_finding(&AppendixError::Malformed("no block table")),
                    false,
                ),
                Ok(a) => {
                    // Checksum mirroring compares the chunk's CRC, known from the table.
                    if mirror == MirrorKind::Checksum {
                        d.data_crc[p] = a.chunk_crc();
                    }
                    check_identity(&mut d, p, a, scheme, k, &expected);
                }
            },
        }
    }

    // 2. Claims about each data chunk from the units that passed.
    let mut claims: Vec<(usize, u64)> = Vec::with_capacity(n + 1);
    for i in 0..k {
        claims.clear();
        if let Some(a) = &d.appendices[i] {
            let own = match mirror {
                MirrorKind::Version => a.tag,
                MirrorKind::Checksum => d.data_crc[i].expect("read") as u64,
            };
            claims.push((i, own));
        }
        if mirror == MirrorKind::Checksum && k > 1 {
            let buddy = (i + 1) % k;
            if let Some(a) = &d.appendices[buddy] {
                claims.push((buddy, a.buddy_crc as u64));
            }
        }
        for p in k..n {
            if let Some(a) = &d.appendices[p] {
                claims.push((p, a.entries[i]));
            }
        }
        if claims.is_empty() {
            continue;
        }
        match mirror {
            MirrorKind::Version => {
                let newest = claims.iter().map(|c| c.1).max().expect("non-empty");
                d.truth[i] = Some(newest);
                for &(p, has) in &claims {
                    if has < newest {
                        let kind = FindingKind::Stale {
                            has,
                            newest,
                            about: i,
                        };
                        d.add(p, kind, false);
                    }
                }
            }
            MirrorKind::Checksum => {
                let majority = claims
                    .iter()
                    .map(|c| c.1)
                    .find(|&v| 2 * claims.iter().filter(|c| c.1 == v).count() > claims.len());
                let Some(majority) = majority else {
                    d.ambiguous.push(i);
                    continue;
                };
                d.truth[i] = Some(majority);
                for &(p, has) in &claims {
                    if has != majority {
                        let kind = FindingKind::Outvoted {
                            // CRCs: the claims are 32-bit values widened to u64.
                            has: u32::try_from(has).expect("a CRC claim"),
                            majority: u32::try_from(majority).expect("a CRC claim"),
                            about: i,
                        };
                        // A buddy's stale copy is only an appendix problem.
                        d.add(p, kind, p != i && p < k);
                    }
                }
            }
        }
    }
    d.findings.sort_by_key(|f| f.position);
    d
}

/// Keep `a` as unit `p`'s evidence if it is where it belongs, else record a misdirection.
fn check_identity(
    d: &mut Diagnosis,
    p: usize,
    a: Appendix,
    scheme: Scheme,
    k: usize,
    expected: &impl Fn(usize) -> Identity,
) {
    let want = expected(p);
    if a.identity != want || a.scheme != scheme || !entries_fit(&a, k) {
        d.add(
            p,
            FindingKind::Identity {
                member: a.identity.member_index,
                chunk_number: a.identity.chunk_number,
                foreign: a.identity.array_uuid != want.array_uuid,
            },
            false,
        );
    } else {
        d.appendices[p] = Some(a);
    }
}

fn entries_fit(a: &Appendix, k: usize) -> bool {
    match a.identity.role {
        Role::Data(_) => a.entries.is_empty(),
        Role::Parity(_) => a.entries.len() == k,
    }
}

fn checksum_finding(e: &AppendixError) -> FindingKind {
    FindingKind::Checksum {
        detail: e.to_string(),
    }
}
