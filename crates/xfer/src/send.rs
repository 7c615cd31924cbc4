//! The sending side: walks the paths, hashes each file's blocks, sends the header and then
//! every block the receiver asks for, keeping a window of blocks in flight; a block the
//! receiver reports as mismatched is read and sent again (only that block), up to the retry
//! limit. With `verify_source`, each block is also evicted from the sender's page cache and
//! read back from its device before it is sent (RIVA's unrecoverable-read-error case).

use crate::proto::{self, Cur, FileHeader, ProtoError};
use crate::verify;
use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// How to send.
#[derive(Clone, Debug)]
pub struct SendOptions {
    pub block_size: u32,
    /// Times a block is sent again after a failed verification before the file is given up.
    pub retries: u32,
    /// Evict and re-read each source block from the device before sending it.
    pub verify_source: bool,
    /// Blocks in flight (sent, not yet reported).
    pub window: usize,
    /// Write a manifest here (FORMAT.md §5) once everything is sent.
    pub manifest: Option<PathBuf>,
    /// Answer the receiver's challenge with this key (`--key-file`).
    pub key: Option<[u8; 32]>,
    /// Send owners (uid, gid) and extended attributes.
    pub owner: bool,
    pub xattrs: bool,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            block_size: 256 << 10,
            retries: 3,
            verify_source: false,
            window: 16,
            manifest: None,
            key: None,
            owner: false,
            xattrs: false,
        }
    }
}

/// What a send did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SendSummary {
    pub files: u64,
    pub skipped: u64,
    pub bytes_sent: u64,
    pub blocks_sent: u64,
    /// Blocks sent again because the receiver's read-back did not match.
    pub blocks_retried: u64,
    /// Files given up, with the block ranges that never verified.
    pub failed: Vec<String>,
    /// Total nanoseconds reading blocks (and hashing them) and handing them to the connection.
    pub ns_read_hash: u64,
    pub ns_send: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("{path}: {source}")]
    Source {
        path: String,
        source: std::io::Error,
    },
}

/// One entry to send: where it is here, its name there.
struct Entry {
    local: PathBuf,
    remote: String,
}

fn walk(path: &Path, remote: &str, out: &mut Vec<Entry>) -> Result<(), SendError> {
    let m = fs::symlink_metadata(path).map_err(|e| SendError::Source {
        path: path.display().to_string(),
        source: e,
    })?;
    out.push(Entry {
        local: path.to_path_buf(),
        remote: remote.to_string(),
    });
    if m.is_dir() {
        let mut names: Vec<_> = fs::read_dir(path)
            .map_err(|e| SendError::Source {
                path: path.display().to_string(),
                source: e,
            })?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for n in names {
            let Some(s) = n.to_str() else {
                continue; // not UTF-8: the protocol carries UTF-8 names
            };
            walk(&path.join(&n), &format!("{remote}/{s}"), out)?;
        }
    }
    Ok(())
}

fn source_err(path: &Path) -> impl Fn(std::io::Error) -> SendError + '_ {
    move |e| SendError::Source {
        path: path.display().to_string(),
        source: e,
    }
}

/// Send `paths` over (`input` from the receiver, `output` to it). A file lands as `DIR/NAME`,
/// a directory as `DIR/NAME/...`. `progress(bytes, blocks retried so far)` as blocks go out.
pub fn send(
    paths: &[PathBuf],
    input: impl Read + Send + 'static,
    mut output: impl Write,
    opts: &SendOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SendSummary, SendError> {
    let mut entries = Vec::new();
    for p in paths {
        // Named as given (a symlink argument keeps its own name, as `cp -r` and rsync do);
        // `.` and `..` are named after the directory they stand for.
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .or_else(|| {
                p.canonicalize()
                    .ok()
                    .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            })
            .unwrap_or_else(|| p.display().to_string());
        walk(p, &name, &mut entries)?;
    }
    proto::write_hello(&mut output, proto::FEATURES).map_err(ProtoError::from)?;
    output.flush().map_err(ProtoError::from)?;
    let mut input = input;
    let features = proto::read_hello(&mut input)?;
    if features & proto::FEATURE_AUTH != 0 {
        let Some(key) = &opts.key else {
            return Err(ProtoError::Peer(
                "the receiver requires a shared key: give --key-file".into(),
            )
            .into());
        };
        match proto::read_frame(&mut input)? {
            Some((proto::T_CHALLENGE, c)) if c.len() == 32 => {
                proto::write_frame(&mut output, proto::T_RESPONSE, &proto::answer(key, &c))
                    .map_err(ProtoError::from)?;
                output.flush().map_err(ProtoError::from)?;
            }
            _ => {
                return Err(
                    proto::malformed("authentication", "no challenge from the receiver").into(),
                )
            }
        }
    }
    // Replies come on a thread of their own, so blocks keep flowing while results arrive.
    let (tx, rx) = mpsc::channel::<Result<(u8, Vec<u8>), ProtoError>>();
    std::thread::spawn(move || loop {
        match proto::read_frame(&mut input) {
            Ok(Some(f)) => {
                if tx.send(Ok(f)).is_err() {
                    return;
                }
            }
            Ok(None) => {
                let _ = tx.send(Err(proto::malformed("stream", "the receiver closed")));
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    });
    let next = |want: u8| -> Result<Vec<u8>, ProtoError> {
        match rx.recv() {
            Ok(Ok((k, p))) if k == want => Ok(p),
            Ok(Ok((proto::T_ERROR, p))) => {
                Err(ProtoError::Peer(String::from_utf8_lossy(&p).into()))
            }
            Ok(Ok((k, _))) => Err(proto::malformed(
                "reply",
                format!("frame type {k} where {want} was due"),
            )),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(proto::malformed("stream", "the receiver closed")),
        }
    };
    match send_entries(&entries, &mut output, &next, opts, progress) {
        // A write failed: the receiver has usually said why before it closed; report that.
        Err(SendError::Proto(ProtoError::Io(e))) => Err(peer_reason(&rx)
            .map(ProtoError::Peer)
            .unwrap_or(ProtoError::Io(e))
            .into()),
        r => r,
    }
}

/// The ERROR frame the receiver sent before it closed, if one comes within two seconds.
fn peer_reason(rx: &mpsc::Receiver<Result<(u8, Vec<u8>), ProtoError>>) -> Option<String> {
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(2)) {
            Ok(Ok((proto::T_ERROR, p))) => return Some(String::from_utf8_lossy(&p).into()),
            Ok(Ok(_)) => continue,
            _ => return None,
        }
    }
}

/// The entries, one after another, once the session is open.
fn send_entries(
    entries: &[Entry],
    mut output: impl Write,
    next: &dyn Fn(u8) -> Result<Vec<u8>, ProtoError>,
    opts: &SendOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SendSummary, SendError> {
    let mut summary = SendSummary::default();
    let bs = opts.block_size.clamp(4096, proto::MAX_BLOCK);
    let mut manifest = opts
        .manifest
        .as_ref()
        .map(|_| String::from("stripeguard-manifest 1\n"));
    for e in entries {
        let m = fs::symlink_metadata(&e.local).map_err(source_err(&e.local))?;
        let mut h = FileHeader {
            path: e.remote.clone(),
            kind: proto::KIND_FILE,
            size: 0,
            mode: m.mode(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec() as u32,
            target: String::new(),
            block_size: bs,
            hash: [0; 32],
        };
        let ft = m.file_type();
        let file = if ft.is_dir() {
            h.kind = proto::KIND_DIR;
            None
        } else if ft.is_symlink() {
            h.kind = proto::KIND_SYMLINK;
            h.target = fs::read_link(&e.local)
                .map_err(source_err(&e.local))?
                .to_string_lossy()
                .into_owned();
            None
        } else if ft.is_file() {
            let f = File::open(&e.local).map_err(source_err(&e.local))?;
            h.size = m.len();
            let hashes = block_hashes(&f, h.size, bs).map_err(source_err(&e.local))?;
            h.hash = hash_of_list(&hashes);
            if let Some(m) = manifest.as_mut() {
                m.push_str(&format!(
                    "file {} {} {} {}\n",
                    hex(&h.hash),
                    h.size,
                    bs,
                    h.path
                ));
                for b in &hashes {
                    m.push_str(&format!("block {}\n", hex(b)));
                }
            }
            Some(f)
        } else {
            continue; // devices, sockets, fifos are not sent
        };
        if opts.owner || opts.xattrs {
            let a = crate::attrs::read(&e.local, opts.owner, opts.xattrs)
                .map_err(source_err(&e.local))?;
            proto::write_frame(&mut output, proto::T_ATTRS, &a.encode())
                .map_err(ProtoError::from)?;
        }
        proto::write_frame(&mut output, proto::T_FILE, &h.encode()).map_err(ProtoError::from)?;
        output.flush().map_err(ProtoError::from)?;
        let reply = next(proto::T_FILE_REPLY)?;
        let mut c = Cur::new(&reply, "FILE reply");
        let status = c.u8()?;
        let Some(f) = file else { continue };
        if status == 1 {
            summary.skipped += 1;
            continue;
        }
        let blocks = h.size.div_ceil(u64::from(bs));
        let have = c.rest();
        let mut todo: VecDeque<u64> = (0..blocks)
            .filter(|&i| {
                have.get((i / 8) as usize)
                    .is_none_or(|b| b & (1 << (i % 8)) == 0)
            })
            .collect();
        let mut tries: HashMap<u64, u32> = HashMap::new();
        let mut inflight = 0usize;
        let mut failed: Vec<u64> = Vec::new();
        let mut buf = vec![0u8; bs as usize];
        while !todo.is_empty() || inflight > 0 {
            while inflight < opts.window.max(1) {
                let Some(i) = todo.pop_front() else { break };
                let off = i * u64::from(bs);
                let n = (h.size - off).min(u64::from(bs)) as usize;
                let tr = std::time::Instant::now();
                if opts.verify_source {
                    verify::durable_then_read_back(&f, &e.local, off, &mut buf[..n])
                        .map_err(source_err(&e.local))?;
                } else {
                    f.read_exact_at(&mut buf[..n], off)
                        .map_err(source_err(&e.local))?;
                }
                let mut p = Vec::with_capacity(40 + n);
                p.extend_from_slice(&i.to_le_bytes());
                p.extend_from_slice(blake3::hash(&buf[..n]).as_bytes());
                p.extend_from_slice(&buf[..n]);
                summary.ns_read_hash += tr.elapsed().as_nanos() as u64;
                let ts = std::time::Instant::now();
                proto::write_frame(&mut output, proto::T_BLOCK, &p).map_err(ProtoError::from)?;
                summary.ns_send += ts.elapsed().as_nanos() as u64;
                inflight += 1;
                summary.blocks_sent += 1;
                summary.bytes_sent += n as u64;
                progress(n as u64, summary.blocks_retried);
            }
            output.flush().map_err(ProtoError::from)?;
            let r = next(proto::T_BLOCK_RESULT)?;
            let mut c = Cur::new(&r, "BLOCK result");
            let i = c.u64()?;
            let ok = c.u8()? != 0;
            inflight -= 1;
            if !ok {
                let t = tries.entry(i).or_default();
                *t += 1;
                if *t <= opts.retries {
                    summary.blocks_retried += 1;
                    todo.push_back(i);
                } else {
                    failed.push(i);
                }
            }
        }
        proto::write_frame(&mut output, proto::T_FILE_END, &[!failed.is_empty() as u8])
            .map_err(ProtoError::from)?;
        output.flush().map_err(ProtoError::from)?;
        let done = next(proto::T_FILE_DONE)?;
        if done.first() == Some(&0) && failed.is_empty() {
            summary.files += 1;
        } else {
            failed.sort();
            let ranges: Vec<String> = failed
                .iter()
                .map(|&i| {
                    format!(
                        "bytes {}..{}",
                        i * u64::from(bs),
                        ((i + 1) * u64::from(bs)).min(h.size)
                    )
                })
                .collect();
            summary.failed.push(format!(
                "{}: {}",
                h.path,
                if ranges.is_empty() {
                    "the receiver could not verify it".to_string()
                } else {
                    format!(
                        "never verified after {} retries: {}",
                        opts.retries,
                        ranges.join(", ")
                    )
                }
            ));
        }
    }
    proto::write_frame(&mut output, proto::T_DONE, &[]).map_err(ProtoError::from)?;
    output.flush().map_err(ProtoError::from)?;
    next(proto::T_DONE)?;
    if let (Some(path), Some(text)) = (&opts.manifest, manifest) {
        fs::write(path, text).map_err(source_err(path))?;
    }
    Ok(summary)
}

/// BLAKE3 of every block of the file.
pub fn block_hashes(f: &File, size: u64, bs: u32) -> std::io::Result<Vec<[u8; 32]>> {
    let mut out = Vec::with_capacity(size.div_ceil(u64::from(bs)) as usize);
    let mut buf = vec![0u8; bs as usize];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(u64::from(bs)) as usize;
        f.read_exact_at(&mut buf[..n], off)?;
        out.push(*blake3::hash(&buf[..n]).as_bytes());
        off += n as u64;
    }
    Ok(out)
}

/// The protocol's file hash: BLAKE3 of the list of block hashes.
pub fn hash_of_list(hashes: &[[u8; 32]]) -> [u8; 32] {
    let mut list = blake3::Hasher::new();
    for h in hashes {
        list.update(h);
    }
    *list.finalize().as_bytes()
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
