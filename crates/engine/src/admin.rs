//! Array administration on paths: what `create`, `status` and every command that opens an
//! array share, so the CLI (and the coming server) only parse arguments and print.
//!
//! - [`CreateOnPaths`]: numbers exactly as the user gave them, range-checked once here (the
//!   user's own number is in every error); member files created where missing, removed again if
//!   `create` fails; a member that already holds any stripeguard array is refused without `force`.
//! - [`open_member_paths`] / [`assemble_paths`]: a member that cannot be opened becomes a failed
//!   member (the engine decides whether the array survives it).
//!
//! The full check of every stripe is [`crate::scrub`] on a read-only assembly.

use crate::{Array, ArrayConfig, AssembleOptions, EngineError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stripeguard_disk::{Disk, DiskRef, FailedDisk, FileDisk};
use stripeguard_integrity::{
    CodeId, CrossCheck, Scheme, Superblock, SuperblockError, MAX_MEMBERS, SUPERBLOCK_BYTES,
};

/// Largest chunk `create` accepts (FORMAT.md §2).
pub const MAX_CHUNK_BYTES: u64 = stripeguard_integrity::MAX_CHUNK_BYTES as u64;

/// A `create` request, with the user's numbers unconverted.
#[derive(Clone, Debug)]
pub struct CreateOnPaths {
    /// Member files or block devices, in member order.
    pub paths: Vec<PathBuf>,
    /// Size of each member file to create where one is missing.
    pub size_bytes: Option<u64>,
    /// Parity members `m`.
    pub parity: usize,
    /// The integrity scheme.
    pub scheme: Scheme,
    /// Chunk size.
    pub chunk_bytes: u64,
    /// Sector size (512 or 4096).
    pub sector_bytes: u64,
    /// Cross-check setting.
    pub cross_check: CrossCheck,
    /// Overwrite members that hold an array.
    pub force: bool,
}

/// The usual parity count for `n` members: RAID-6 from 6 members, else RAID-5.
pub fn default_parity(n: usize) -> usize {
    if n >= 6 {
        2
    } else {
        1
    }
}

impl CreateOnPaths {
    /// The array configuration, or an error naming the number that is out of range.
    pub fn config(&self) -> Result<ArrayConfig, EngineError> {
        let bad = |s: String| Err(EngineError::Config(s));
        let n = self.paths.len();
        let m = self.parity;
        if n > MAX_MEMBERS as usize {
            return bad(format!(
                "{n} members given; an array has at most {MAX_MEMBERS}"
            ));
        }
        if m == 0 || m >= n {
            return bad(format!(
                "{n} members cannot hold {m} parity chunk(s) and at least one data chunk"
            ));
        }
        if self.sector_bytes != 512 && self.sector_bytes != 4096 {
            return bad(format!(
                "sector size {} is not 512 or 4096",
                self.sector_bytes
            ));
        }
        if self.chunk_bytes == 0
            || self.chunk_bytes > MAX_CHUNK_BYTES
            || !self.chunk_bytes.is_multiple_of(self.sector_bytes)
        {
            return bad(format!(
                "chunk size {} must be a multiple of the {}-byte sector, at most {MAX_CHUNK_BYTES} (16 MiB)",
                self.chunk_bytes, self.sector_bytes
            ));
        }
        Ok(ArrayConfig {
            data_chunks: n - m,
            parity_chunks: m,
            code: CodeId::for_parity(m),
            scheme: self.scheme,
            chunk_bytes: self.chunk_bytes as u32,
            sector_bytes: self.sector_bytes as u32,
            stripes: None,
            first_read_map_bytes: 1 << 20,
            cross_check: self.cross_check,
        })
    }

    /// Make the array: create missing member files, write every unit and the superblocks, and
    /// return it assembled and writable. On failure the files this call created are removed.
    pub fn run(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<Array, EngineError> {
        let cfg = self.config()?;
        let mut created: Vec<&Path> = Vec::new();
        let result = self.create_files(&mut created).and_then(|fresh| {
            let members = self
                .paths
                .iter()
                .map(|p| FileDisk::open(p, false).map(|d| Arc::new(d) as DiskRef))
                .collect::<Result<Vec<_>, _>>()?;
            Array::create(members, &cfg, fresh, progress)
        });
        if result.is_err() {
            for p in created {
                let _ = std::fs::remove_file(p);
            }
        }
        result
    }

    /// Create the missing member files; whether every member is new (sparse zeros, so only the
    /// appendices need writing).
    fn create_files<'a>(&'a self, created: &mut Vec<&'a Path>) -> Result<bool, EngineError> {
        for p in &self.paths {
            if !p.exists() {
                continue;
            }
            let d = FileDisk::open(p, false)?;
            if holds_array(&d) && !self.force {
                return Err(EngineError::Config(format!(
                    "{} already holds a stripeguard array; pass --force to overwrite it",
                    p.display()
                )));
            }
        }
        for p in &self.paths {
            if p.exists() {
                continue;
            }
            let size = self.size_bytes.ok_or_else(|| {
                EngineError::Config(format!(
                    "{} does not exist; give --size to create it",
                    p.display()
                ))
            })?;
            FileDisk::create(p, size, false)?;
            created.push(p);
        }
        Ok(created.len() == self.paths.len())
    }
}

/// Whether a member holds any stripeguard superblock, even one this build cannot read (another
/// format version, a damaged copy).
fn holds_array(d: &dyn Disk) -> bool {
    let mut sb = vec![0u8; SUPERBLOCK_BYTES];
    d.read_at(0, &mut sb).is_ok()
        && !matches!(
            Superblock::decode(&sb),
            Err(SuperblockError::BadMagic | SuperblockError::Truncated(_))
        )
}

/// Open members by path; one that cannot be opened is a failed member whose reason says why
/// (the engine decides whether the array survives it).
pub fn open_member_paths(paths: &[PathBuf], direct: bool) -> Vec<DiskRef> {
    paths
        .iter()
        .map(|p| match FileDisk::open(p, direct) {
            Ok(d) => Arc::new(d) as DiskRef,
            Err(e) => Arc::new(FailedDisk::new(p.display().to_string(), e.reason())) as DiskRef,
        })
        .collect()
}

/// Assemble the array on `paths`.
pub fn assemble_paths(
    paths: &[PathBuf],
    direct: bool,
    writable: bool,
) -> Result<Array, EngineError> {
    let opts = AssembleOptions {
        writable,
        ..AssembleOptions::default()
    };
    Array::assemble(open_member_paths(paths, direct), &opts)
}
