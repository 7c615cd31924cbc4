//! `stripeguard verify-manifest DIR MANIFEST`: check files against the manifest `send
//! --manifest` wrote, reading every block from the device (durable, evicted — proved — and read
//! back), so a file whose on-disk bytes were damaged after the transfer fails even while the
//! page cache still holds the good ones. Files are opened beneath DIR without following any
//! symlink (a symlinked directory inside DIR is not followed out of it).
//!
//! Manifest (text, FORMAT.md §5): `stripeguard-manifest 2`, then per file `file HASH SIZE BLOCK
//! PATH` (HASH: the protocol's file hash in hex; PATH relative to the receiving DIR, escaped:
//! every byte outside `!`..`~` and every `\` written `\xHH`, so a name with spaces, newlines or
//! bytes that are not UTF-8 stays one token) followed by one `block HASH` line per block.
//! Version 1 manifests (PATH the rest of the line, UTF-8) are still read.

use crate::verify;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::path::Path;

/// One file's verdict.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ManifestResult {
    pub path: String,
    pub ok: bool,
    /// Blocks that did not match (byte ranges), or why the file could not be checked.
    pub problems: Vec<String>,
}

/// A path as one manifest token.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if (b'!'..=b'~').contains(&c) && c != b'\\' {
            s.push(c as char);
        } else {
            s.push_str(&format!("\\x{c:02x}"));
        }
    }
    s
}

/// The bytes of an escaped token.
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) != Some(&b'x') {
                return None;
            }
            let h = std::str::from_utf8(b.get(i + 2..i + 4)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Check every file of `manifest` under `dir`.
pub fn verify_manifest(dir: &Path, manifest: &str) -> Result<Vec<ManifestResult>, String> {
    let mut lines = manifest.split('\n');
    let version = match lines.next() {
        Some("stripeguard-manifest 1") => 1,
        Some("stripeguard-manifest 2") => 2,
        _ => return Err("not a stripeguard manifest (version 1 or 2)".into()),
    };
    let root = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {}: {}", dir.display(), std::io::Error::from(e)))?;
    let mut out: Vec<ManifestResult> = Vec::new();
    let mut cur: Option<(Vec<u8>, u64, u64, Vec<String>)> = None;
    let finish = |c: Option<(Vec<u8>, u64, u64, Vec<String>)>, out: &mut Vec<ManifestResult>| {
        if let Some((path, size, bs, blocks)) = c {
            out.push(check(&root, &path, size, bs, &blocks));
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
            let path = match version {
                1 => path.map(|p| p.as_bytes().to_vec()),
                _ => path.and_then(unescape),
            };
            match (size, bs, path) {
                (Some(size), Some(bs), Some(path)) => {
                    crate::proto::check_relative(&path)
                        .map_err(|e| format!("line {}: {e}", n + 2))?;
                    cur = Some((path, size, bs, Vec::new()));
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

fn check(
    root: &rustix::fd::OwnedFd,
    path: &[u8],
    size: u64,
    bs: u64,
    blocks: &[String],
) -> ManifestResult {
    let mut r = ManifestResult {
        path: crate::proto::show(path),
        ok: false,
        problems: Vec::new(),
    };
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let f = match rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        resolve,
    ) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::XDEV) => {
            r.problems
                .push("reached through a symlink (never followed)".into());
            return r;
        }
        Err(e) => {
            r.problems
                .push(format!("cannot open: {}", std::io::Error::from(e)));
            return r;
        }
    };
    match f.metadata() {
        Ok(m) if !m.is_file() => {
            r.problems.push("not a regular file".into());
            return r;
        }
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
    // One fdatasync covers the whole file; then each block is evicted and read back.
    if let Err(e) = f.sync_data() {
        r.problems.push(format!("cannot make it durable: {e}"));
        return r;
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "bs was checked to be at most 16 MiB when the manifest was parsed"
    )]
    let mut buf = vec![0u8; bs as usize];
    for (i, want) in blocks.iter().enumerate() {
        let off = i as u64 * bs;
        let n = crate::proto::block_len(size, off, bs);
        if let Err(e) = verify::read_back(&f, off, &mut buf[..n]) {
            r.problems.push(format!("{n} bytes from byte {off}: {e}"));
            continue;
        }
        if crate::proto::hex(blake3::hash(&buf[..n]).as_bytes()) != *want {
            r.problems
                .push(format!("{n} bytes from byte {off} differ on the device"));
        }
    }
    r.ok = r.problems.is_empty();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn escaped_names_are_one_token_and_come_back(b in prop::collection::vec(any::<u8>(), 0..64)) {
            let e = escape(&b);
            prop_assert!(!e.contains(' ') && !e.contains('\n'));
            prop_assert_eq!(unescape(&e).unwrap(), b);
        }
    }
}
