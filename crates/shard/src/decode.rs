//! `shard decode` and `shard verify`: one walk over the stripes that checks every block and
//! optionally writes the rebuilt file.
//!
//! Per stripe: a block is usable when its record exists and its CRC matches. With more than `k`
//! usable blocks the parity is checked, and `locate` names blocks that are wrong despite a good
//! CRC; those join the erasures. The file's data blocks are rebuilt from the rest.

use crate::encode::{existing_shards, sync_dir};
use crate::error::ShardError;
use crate::format::{Header, HEADER_BYTES};
use crate::{index_from_name, Progress};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use stripeguard_checksum::Crc32c;
use stripeguard_codes::{CodeError, ErasureCode, Located, ReedSolomon};

/// What the header of a shard file said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderState {
    /// Valid.
    Ok,
    /// Unreadable or failing its CRC; the index came from the file name.
    Damaged,
    /// Valid, but another file already holds this index; not used.
    Duplicate,
}

/// The state of one shard file after a walk.
#[derive(Clone, Debug, Serialize)]
pub struct ShardReport {
    /// File name.
    pub file: String,
    /// Index used (None: not used at all).
    pub index: Option<usize>,
    /// Header state.
    pub header: HeaderState,
    /// The file name says a different index than the header (the header wins).
    pub renamed: bool,
    /// Block records missing because the file is short.
    pub missing_blocks: u64,
    /// Blocks whose CRC failed.
    pub crc_bad_blocks: u64,
    /// Blocks with a good CRC that the parity showed to be wrong.
    pub located_bad_blocks: u64,
    /// Whether the whole payload matches the header's payload CRC (None if the header is damaged).
    pub payload_crc_ok: Option<bool>,
}

impl ShardReport {
    fn new(file: String, index: Option<usize>, header: HeaderState, renamed: bool) -> ShardReport {
        ShardReport {
            file,
            index,
            header,
            renamed,
            missing_blocks: 0,
            crc_bad_blocks: 0,
            located_bad_blocks: 0,
            payload_crc_ok: None,
        }
    }

    /// True when nothing is wrong with this shard.
    pub fn healthy(&self) -> bool {
        self.header == HeaderState::Ok
            && !self.renamed
            && self.missing_blocks == 0
            && self.crc_bad_blocks == 0
            && self.located_bad_blocks == 0
            && self.payload_crc_ok == Some(true)
    }
}

/// Overall verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every shard intact.
    Healthy,
    /// Damage found, and every stripe can still be rebuilt.
    Repairable,
    /// At least one stripe cannot be rebuilt.
    Unrecoverable,
}

/// Result of a walk.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Directory walked.
    pub dir: PathBuf,
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Block size.
    pub block_bytes: u32,
    /// Original file length.
    pub file_bytes: u64,
    /// Original file name.
    pub file_name: String,
    /// Stripes.
    pub stripes: u64,
    /// Every shard file found.
    pub shards: Vec<ShardReport>,
    /// Indices no file provides.
    pub missing_shards: Vec<usize>,
    /// Stripes with at least one unusable block.
    pub stripes_damaged: u64,
    /// Stripes that cannot be rebuilt.
    pub stripes_unrecoverable: u64,
    /// Why the first unrecoverable stripe is so.
    pub first_problem: Option<String>,
    /// Verdict.
    pub status: Status,
}

struct Source {
    path: PathBuf,
    file: File,
    len: u64,
    report: usize,
    digest: Crc32c,
    /// The payload CRC this shard's own header promises (None: header damaged).
    payload_crc: Option<u32>,
}

struct ShardSet {
    dir: PathBuf,
    header: Header,
    slots: Vec<Option<Source>>,
    reports: Vec<ShardReport>,
}

fn scan(dir: &Path) -> Result<ShardSet, ShardError> {
    if !dir.is_dir() {
        return Err(ShardError::NoDirectory(dir.to_path_buf()));
    }
    let paths = existing_shards(dir)?;
    if paths.is_empty() {
        return Err(ShardError::NoShards(dir.to_path_buf()));
    }
    let mut found: Vec<(PathBuf, File, u64, Option<Header>)> = Vec::new();
    for p in paths {
        let file = File::open(&p).map_err(ShardError::io(&p))?;
        let len = file.metadata().map_err(ShardError::io(&p))?.len();
        let mut head = [0u8; HEADER_BYTES];
        let header = if len >= HEADER_BYTES as u64 {
            file.read_exact_at(&mut head, 0)
                .map_err(ShardError::io(&p))?;
            Header::decode(&head)
        } else {
            None
        };
        found.push((p, file, len, header));
    }
    let mut sets: BTreeMap<[u8; 16], Vec<String>> = BTreeMap::new();
    for (p, _, _, h) in &found {
        if let Some(h) = h {
            sets.entry(h.set_id).or_default().push(file_name(p));
        }
    }
    if sets.len() > 1 {
        let detail = sets
            .iter()
            .map(|(id, files)| format!("set {}: {}", hex(&id[..4]), files.join(" ")))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ShardError::MixedSets {
            dir: dir.to_path_buf(),
            sets: sets.len(),
            detail,
        });
    }
    let header = found
        .iter()
        .find_map(|f| f.3.clone())
        .ok_or_else(|| ShardError::NoHeader(dir.to_path_buf()))?;
    let n = header.k as usize + header.m as usize;
    let same_geometry = |h: &Header| {
        (h.k, h.m, h.block_bytes, h.file_bytes, h.stripes)
            == (
                header.k,
                header.m,
                header.block_bytes,
                header.file_bytes,
                header.stripes,
            )
    };
    let mut slots: Vec<Option<Source>> = (0..n).map(|_| None).collect();
    let mut reports = Vec::new();
    let mut damaged = Vec::new();
    for (path, file, len, h) in found {
        let name = file_name(&path);
        let named = index_from_name(&name);
        match h.filter(same_geometry) {
            Some(h) => {
                let i = h.index as usize;
                let mut report = ShardReport::new(name, Some(i), HeaderState::Ok, named != Some(i));
                if slots[i].is_some() {
                    report.header = HeaderState::Duplicate;
                    report.index = None;
                } else {
                    let payload_crc = Some(h.payload_crc);
                    slots[i] = Some(Source {
                        path,
                        file,
                        len,
                        report: reports.len(),
                        digest: Crc32c::new(),
                        payload_crc,
                    });
                }
                reports.push(report);
            }
            None => damaged.push((path, file, len, name, named)),
        }
    }
    // Shards with damaged headers take the slot their name gives, if no valid header claims it.
    for (path, file, len, name, named) in damaged {
        let index = named.filter(|&i| i < n && slots[i].is_none());
        if let Some(i) = index {
            slots[i] = Some(Source {
                path,
                file,
                len,
                report: reports.len(),
                digest: Crc32c::new(),
                payload_crc: None,
            });
        }
        reports.push(ShardReport::new(name, index, HeaderState::Damaged, false));
    }
    Ok(ShardSet {
        dir: dir.to_path_buf(),
        header,
        slots,
        reports,
    })
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

use stripeguard_format::hex;

/// Check every shard in `dir` without writing anything.
pub fn verify(dir: &Path, progress: Progress) -> Result<VerifyReport, ShardError> {
    let mut set = scan(dir)?;
    walk(&mut set, None, progress)
}

/// Rebuild the original file from the shards in `dir` into `out` (default: the stored file name
/// in the current directory). Fails, leaving nothing at `out`, if any stripe is unrecoverable.
pub fn decode(
    dir: &Path,
    out: Option<&Path>,
    force: bool,
    progress: Progress,
) -> Result<(PathBuf, VerifyReport), ShardError> {
    let mut set = scan(dir)?;
    let out: PathBuf = match out {
        Some(o) => o.to_path_buf(),
        None if !set.header.file_name.is_empty() && !set.header.file_name.contains('/') => {
            PathBuf::from(&set.header.file_name)
        }
        None => {
            return Err(ShardError::Invalid(
                "the shards record no file name; pass --out FILE".into(),
            ))
        }
    };
    if out.exists() && !force {
        return Err(ShardError::Exists(out));
    }
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temp = parent.join(format!(".{}.sgtmp", file_name(&out)));
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&temp)
        .map_err(ShardError::io(&temp))?;
    let mut sink = BufWriter::with_capacity(1 << 20, f);
    let result = walk(&mut set, Some(&mut sink), progress).and_then(|report| {
        sink.flush().map_err(ShardError::io(&temp))?;
        sink.get_ref().sync_all().map_err(ShardError::io(&temp))?;
        Ok(report)
    });
    match result {
        Ok(report) => {
            std::fs::rename(&temp, &out).map_err(ShardError::io(&out))?;
            sync_dir(parent);
            Ok((out, report))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

fn walk(
    set: &mut ShardSet,
    mut sink: Option<&mut BufWriter<File>>,
    progress: Progress,
) -> Result<VerifyReport, ShardError> {
    let h = set.header.clone();
    let (k, m) = (h.k as usize, h.m as usize);
    let n = k + m;
    let b = h.block_bytes as usize;
    let rec = b + 4;
    let code = ReedSolomon::new(k, m)?;
    let stripe_bytes = (k * b) as u64;
    let mut buf = vec![0u8; n * rec];
    let (mut damaged, mut unrecoverable, mut first_problem) = (0u64, 0u64, None::<String>);
    for s in 0..h.stripes {
        let mut erased: Vec<usize> = Vec::new();
        for (i, (slot, record)) in set.slots.iter_mut().zip(buf.chunks_mut(rec)).enumerate() {
            let Some(src) = slot else {
                erased.push(i);
                continue;
            };
            let off = HEADER_BYTES as u64 + s * rec as u64;
            if off + rec as u64 > src.len {
                set.reports[src.report].missing_blocks += 1;
                erased.push(i);
                continue;
            }
            src.file
                .read_exact_at(record, off)
                .map_err(ShardError::io(&src.path))?;
            src.digest.update(record);
            if !crate::format::block_record_intact(record) {
                set.reports[src.report].crc_bad_blocks += 1;
                erased.push(i);
            }
        }
        let mut problem = None;
        if n - erased.len() < k {
            let lost: Vec<String> = erased.iter().map(|&i| crate::shard_file_name(i)).collect();
            problem = Some(format!(
                "only {} of the {k} blocks needed are intact (unusable: {})",
                n - erased.len(),
                lost.join(", ")
            ));
        } else if n - erased.len() > k {
            let views: Vec<&[u8]> = buf.chunks(rec).map(|r| &r[..b]).collect();
            match code.locate(&views, &erased) {
                Ok(Located::Consistent) | Ok(Located::Unchecked) => {}
                Ok(Located::Bad(bad)) => {
                    for &i in &bad {
                        if let Some(src) = &set.slots[i] {
                            set.reports[src.report].located_bad_blocks += 1;
                        }
                    }
                    erased.extend(bad);
                }
                Err(CodeError::CannotLocate { reason }) => {
                    problem = Some(format!("blocks pass their CRCs but disagree with the parity, and the wrong ones cannot be located ({reason})"))
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !erased.is_empty() {
            damaged += 1;
        }
        if let Some(p) = problem {
            unrecoverable += 1;
            if sink.is_some() {
                return Err(ShardError::Unrecoverable {
                    stripe: s,
                    offset: s * stripe_bytes,
                    reason: p,
                });
            }
            first_problem.get_or_insert(format!("stripe {s}: {p}"));
        } else if let Some(out) = sink.as_deref_mut() {
            if erased.iter().any(|&i| i < k) {
                let mut chunks: Vec<&mut [u8]> = buf.chunks_mut(rec).map(|r| &mut r[..b]).collect();
                code.reconstruct(&mut chunks, &erased)?;
            }
            // At most one stripe, k blocks of ≤ 64 MiB each, held in memory already.
            let remaining = usize::try_from((h.file_bytes - s * stripe_bytes).min(stripe_bytes))
                .expect("a stripe fits in memory");
            let mut left = remaining;
            for record in buf.chunks(rec).take(k) {
                let take = left.min(b);
                out.write_all(&record[..take]).map_err(|e| ShardError::Io {
                    path: "output".into(),
                    source: e,
                })?;
                left -= take;
            }
        }
        progress(((s + 1) * stripe_bytes).min(h.file_bytes), h.file_bytes);
    }
    for src in set.slots.iter().flatten() {
        let r = &mut set.reports[src.report];
        if let Some(expected) = src.payload_crc {
            r.payload_crc_ok = Some(r.missing_blocks == 0 && src.digest.finish() == expected);
        }
    }
    let missing_shards: Vec<usize> = (0..n).filter(|&i| set.slots[i].is_none()).collect();
    let all_healthy = set.reports.iter().all(ShardReport::healthy) && missing_shards.is_empty();
    let status = if unrecoverable > 0 {
        Status::Unrecoverable
    } else if all_healthy && damaged == 0 {
        Status::Healthy
    } else {
        Status::Repairable
    };
    Ok(VerifyReport {
        dir: set.dir.clone(),
        k,
        m,
        block_bytes: h.block_bytes,
        file_bytes: h.file_bytes,
        file_name: h.file_name.clone(),
        stripes: h.stripes,
        shards: set.reports.clone(),
        missing_shards,
        stripes_damaged: damaged,
        stripes_unrecoverable: unrecoverable,
        first_problem,
        status,
    })
}
