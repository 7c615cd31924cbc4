//! `stripeguard verify-manifest DIR MANIFEST`: check files against the manifest `send
//! --manifest` wrote, reading every block from the device (durable, evicted — proved — and read
//! back), so a file whose on-disk bytes were damaged after the transfer fails even while the
//! page cache still holds the good ones.
//!
//! Manifest (text): `stripeguard-manifest 1`, then per file `file HASH SIZE BLOCK PATH` (HASH:
//! the protocol's file hash in hex; PATH relative to the receiving DIR) followed by one
//! `block HASH` line per block.

use crate::verify;
use std::path::Path;

/// One file's verdict.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ManifestResult {
    pub path: String,
    pub ok: bool,
    /// Blocks that did not match (byte ranges), or why the file could not be checked.
    pub problems: Vec<String>,
}

/// Check every file of `manifest` under `dir`.
pub fn verify_manifest(dir: &Path, manifest: &str) -> Result<Vec<ManifestResult>, String> {
    let mut lines = manifest.lines();
    if lines.next() != Some("stripeguard-manifest 1") {
        return Err("not a stripeguard manifest (version 1)".into());
    }
    let mut out: Vec<ManifestResult> = Vec::new();
    let mut cur: Option<(String, u64, u64, Vec<String>)> = None;
    let finish = |c: Option<(String, u64, u64, Vec<String>)>, out: &mut Vec<ManifestResult>| {
        if let Some((path, size, bs, blocks)) = c {
            out.push(check(dir, &path, size, bs, &blocks));
        }
    };
    for (n, l) in lines.enumerate() {
        if let Some(rest) = l.strip_prefix("file ") {
            finish(cur.take(), &mut out);
            let mut w = rest.splitn(4, ' ');
            let (_hash, size, bs, path) = (w.next(), w.next(), w.next(), w.next());
            let size = size.and_then(|s| s.parse().ok());
            let bs = bs
                .and_then(|s| s.parse::<u64>().ok())
                .filter(|&b| b > 0 && b <= 16 << 20);
            match (size, bs, path) {
                (Some(size), Some(bs), Some(path)) => {
                    crate::proto::check_relative(path)
                        .map_err(|e| format!("line {}: {e}", n + 2))?;
                    cur = Some((path.to_string(), size, bs, Vec::new()));
                }
                _ => return Err(format!("line {}: malformed file line", n + 2)),
            }
        } else if let Some(h) = l.strip_prefix("block ") {
            match cur.as_mut() {
                Some(c) => c.3.push(h.to_string()),
                None => return Err(format!("line {}: a block before any file", n + 2)),
            }
        } else if !l.is_empty() {
            return Err(format!("line {}: not understood", n + 2));
        }
    }
    finish(cur.take(), &mut out);
    Ok(out)
}

fn check(dir: &Path, path: &str, size: u64, bs: u64, blocks: &[String]) -> ManifestResult {
    let mut r = ManifestResult {
        path: path.to_string(),
        ok: false,
        problems: Vec::new(),
    };
    let full = dir.join(path);
    let f = match std::fs::File::open(&full) {
        Ok(f) => f,
        Err(e) => {
            r.problems.push(format!("cannot open: {e}"));
            return r;
        }
    };
    match f.metadata() {
        Ok(m) if m.len() == size => {}
        Ok(m) => {
            r.problems
                .push(format!("{} bytes, the manifest says {size}", m.len()));
            return r;
        }
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    }
    if blocks.len() as u64 != size.div_ceil(bs) {
        r.problems
            .push("the manifest's block list does not cover the file".into());
        return r;
    }
    let mut buf = vec![0u8; bs as usize];
    for (i, want) in blocks.iter().enumerate() {
        let off = i as u64 * bs;
        let n = (size - off).min(bs) as usize;
        if let Err(e) = verify::durable_then_read_back(&f, &full, off, &mut buf[..n]) {
            r.problems
                .push(format!("bytes {off}..{}: {e}", off + n as u64));
            continue;
        }
        if crate::send::hex(blake3::hash(&buf[..n]).as_bytes()) != *want {
            r.problems.push(format!(
                "bytes {off}..{} differ on the device",
                off + n as u64
            ));
        }
    }
    r.ok = r.problems.is_empty();
    r
}
