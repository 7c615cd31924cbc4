//! `shard encode`: stream a file into k + m shard files.

use crate::error::ShardError;
use crate::format::{stripes_for, Header, HEADER_BYTES, MAX_BLOCK_BYTES};
use crate::{shard_file_name, Progress};
use rand::Rng;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use stripeguard_checksum::{crc32c, Crc32c};
use stripeguard_codes::{ErasureCode, ReedSolomon};

/// Largest block chosen automatically: memory is (k + m) x block.
pub const DEFAULT_MAX_BLOCK_BYTES: u32 = 256 << 10;

/// How to encode.
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Block size; `None` picks one (small files get small blocks).
    pub block_bytes: Option<u32>,
    /// Replace shards already in the output directory.
    pub force: bool,
}

/// What was written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EncodeSummary {
    /// Shard files, in index order.
    pub shards: Vec<PathBuf>,
    /// Original length.
    pub file_bytes: u64,
    /// Block size used.
    pub block_bytes: u32,
    /// Stripes.
    pub stripes: u64,
    /// Bytes written across all shards.
    pub written_bytes: u64,
}

fn pick_block(file_bytes: u64, k: usize) -> u32 {
    let per_shard = file_bytes.div_ceil(k as u64).max(1);
    let rounded = per_shard.div_ceil(64) * 64;
    u32::try_from(rounded.min(u64::from(DEFAULT_MAX_BLOCK_BYTES)))
        .expect("at most the default block size")
}

/// Encode `input` into `k + m` shards in `out_dir` (created if missing).
pub fn encode(
    input: &Path,
    out_dir: &Path,
    opts: &EncodeOptions,
    progress: Progress,
) -> Result<EncodeSummary, ShardError> {
    let code = ReedSolomon::new(opts.k, opts.m)?;
    let (k, m, n) = (opts.k, opts.m, opts.k + opts.m);
    let mut src = File::open(input).map_err(ShardError::io(input))?;
    let meta = src.metadata().map_err(ShardError::io(input))?;
    if !meta.is_file() {
        return Err(ShardError::Invalid(format!(
            "{}: not a regular file",
            input.display()
        )));
    }
    let file_bytes = meta.len();
    let block = match opts.block_bytes {
        Some(b) if b < 64 || b % 64 != 0 || b > MAX_BLOCK_BYTES => {
            return Err(ShardError::Invalid(format!(
                "block size {b} must be a multiple of 64 between 64 and {MAX_BLOCK_BYTES}"
            )))
        }
        Some(b) => b,
        None => pick_block(file_bytes, k),
    };
    let stripes = stripes_for(file_bytes, k as u64 * block as u64).expect("block > 0");
    std::fs::create_dir_all(out_dir).map_err(ShardError::io(out_dir))?;
    let finals: Vec<PathBuf> = (0..n).map(|i| out_dir.join(shard_file_name(i))).collect();
    if !opts.force {
        if let Some(existing) = existing_shards(out_dir)?.into_iter().next() {
            return Err(ShardError::Exists(existing));
        }
    }
    let temps: Vec<PathBuf> = finals.iter().map(|p| p.with_extension("sgs.tmp")).collect();
    let mut outs: Vec<BufWriter<File>> = temps
        .iter()
        .map(|p| {
            let f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(p)
                .map_err(ShardError::io(p))?;
            Ok(BufWriter::with_capacity(1 << 20, f))
        })
        .collect::<Result<_, ShardError>>()?;
    let result = (|| {
        for (o, p) in outs.iter_mut().zip(&temps) {
            o.write_all(&[0u8; HEADER_BYTES])
                .map_err(ShardError::io(p))?;
        }
        let b = block as usize;
        let mut buf = vec![0u8; n * b];
        let mut digests = vec![Crc32c::new(); n];
        let mut done = 0u64;
        for _ in 0..stripes {
            let (data, parity) = buf.split_at_mut(k * b);
            let got = read_full(&mut src, data).map_err(ShardError::io(input))?;
            data[got..].fill(0);
            done += got as u64;
            {
                let d: Vec<&[u8]> = data.chunks(b).collect();
                let mut p: Vec<&mut [u8]> = parity.chunks_mut(b).collect();
                code.encode(&d, &mut p)?;
            }
            for (i, chunk) in buf.chunks(b).enumerate() {
                let crc = crc32c(chunk).to_le_bytes();
                digests[i].update(chunk);
                digests[i].update(&crc);
                outs[i]
                    .write_all(chunk)
                    .and_then(|_| outs[i].write_all(&crc))
                    .map_err(ShardError::io(&temps[i]))?;
            }
            progress(done, file_bytes);
        }
        let name = input
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let set_id: [u8; 16] = rand::rng().random();
        for i in 0..n {
            let header = Header {
                // k + m ≤ 255: ReedSolomon::new above refuses more.
                k: u16::try_from(k).expect("k ≤ 255"),
                m: u16::try_from(m).expect("m ≤ 255"),
                index: u16::try_from(i).expect("i < k + m ≤ 255"),
                block_bytes: block,
                file_bytes,
                set_id,
                stripes,
                payload_crc: digests[i].finish(),
                file_name: name.clone(),
            };
            let o = &mut outs[i];
            let io = ShardError::io(&temps[i]);
            (|| {
                o.flush()?;
                let f = o.get_mut();
                f.seek(SeekFrom::Start(0))?;
                f.write_all(&header.encode())?;
                f.sync_all()
            })()
            .map_err(io)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        for t in &temps {
            let _ = std::fs::remove_file(t);
        }
        return Err(e);
    }
    for (t, f) in temps.iter().zip(&finals) {
        std::fs::rename(t, f).map_err(ShardError::io(f))?;
    }
    // Shards left from an earlier, wider encoding would look like a mixed set: remove them.
    for old in existing_shards(out_dir)? {
        if !finals.contains(&old) {
            std::fs::remove_file(&old).map_err(ShardError::io(&old))?;
        }
    }
    sync_dir(out_dir);
    let written_bytes = n as u64 * (HEADER_BYTES as u64 + stripes * (block as u64 + 4));
    Ok(EncodeSummary {
        shards: finals,
        file_bytes,
        block_bytes: block,
        stripes,
        written_bytes,
    })
}

pub(crate) fn existing_shards(dir: &Path) -> Result<Vec<PathBuf>, ShardError> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(ShardError::io(dir))? {
        let e = e.map_err(ShardError::io(dir))?;
        let name = e.file_name();
        if name.to_string_lossy().ends_with(".sgs") {
            v.push(e.path());
        }
    }
    v.sort();
    Ok(v)
}

pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Read until `buf` is full or the end of the file; returns bytes read.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
