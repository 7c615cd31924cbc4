//! The receiving side: writes each block, makes it durable, drops it from the page cache
//! (proved), reads it back from the device, hashes it and reports — on a verifier thread, so
//! receiving block i+1 overlaps verifying block i.
//!
//! Safety of the receiving directory: names from the peer are relative, `/`-separated, without
//! `.`/`..`/empty components; every parent directory is created or checked to be a directory
//! (never followed through a symlink); only regular files, directories and symlinks are made;
//! a file lands as `.NAME.sgpart` (with its progress in `.NAME.sgpart.progress`) and appears
//! under its name only when every block is verified, by rename, with the directory fsynced.

use crate::proto::{self, Cur, FileHeader, ProtoError};
use crate::verify;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// How to receive.
#[derive(Clone, Debug)]
pub struct RecvOptions {
    pub dir: PathBuf,
    /// Verify each block from the device (the point of the tool). Off only to measure what
    /// verification costs (`recv --no-verify`): blocks are then acknowledged once written, and
    /// each file is fsynced when complete, like `rsync --fsync`.
    pub verify: bool,
    /// Require the sender to prove it holds this key (challenge-response) before anything else.
    pub key: Option<[u8; 32]>,
    /// Test only: a command run between "durable" and "verify" with the file, offset and
    /// length as arguments (the extreme-injection test flips bits on the device there).
    pub test_hook: Option<String>,
}

/// What a receive did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecvSummary {
    pub files: u64,
    pub skipped: u64,
    pub failed: Vec<String>,
    pub bytes: u64,
    pub blocks_verified: u64,
    /// Blocks whose read-back from the device did not match (each was sent again).
    pub blocks_mismatched: u64,
    /// Blocks read back with O_DIRECT because eviction could not be proved.
    pub direct_reads: u64,
    /// Total nanoseconds in each stage, over every block: write (into the page cache),
    /// durable (fdatasync), evict (fadvise + mincore proof), read back + hash.
    pub ns_write: u64,
    pub ns_durable: u64,
    pub ns_evict: u64,
    pub ns_read_back_hash: u64,
    /// Owners or extended attributes that could not be applied (not root, no xattr support).
    pub attr_problems: Vec<String>,
}

struct Partial {
    header: FileHeader,
    file: Arc<File>,
    part: PathBuf,
    progress: PathBuf,
    fin: PathBuf,
    verified: Vec<bool>,
    hashes: Vec<[u8; 32]>,
    /// Blocks received before in this session (a resent block is written even when all zero).
    seen: std::collections::HashSet<u64>,
    attrs: Option<proto::Attrs>,
}

fn blocks_of(h: &FileHeader) -> u64 {
    h.size.div_ceil(u64::from(h.block_size.max(1)))
}

/// Make every parent of `rel` under `root` a real directory (creating what is missing); never
/// go through a symlink.
fn parent_dir(root: &Path, parts: &[&str]) -> Result<PathBuf, ProtoError> {
    let mut at = root.to_path_buf();
    for p in &parts[..parts.len() - 1] {
        at.push(p);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(proto::malformed(
                    "path",
                    format!("{} exists and is not a directory", at.display()),
                ))
            }
            Err(_) => fs::create_dir(&at)?,
        }
    }
    Ok(at)
}

fn progress_text(p: &Partial) -> String {
    let bits: String = p
        .verified
        .iter()
        .map(|&v| if v { '1' } else { '0' })
        .collect();
    format!(
        "stripeguard-xfer-progress 1\nsize {}\nblock {}\nhash {}\nverified {}\n",
        p.header.size,
        p.header.block_size,
        hex(&p.header.hash),
        bits
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A previous run's progress for this header, if it matches (same size, block size, hash).
fn load_progress(path: &Path, h: &FileHeader) -> Option<Vec<bool>> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    let mut lines = text.lines();
    if lines.next()? != "stripeguard-xfer-progress 1" {
        return None;
    }
    let size = lines.next()?.strip_prefix("size ")?.parse::<u64>().ok()?;
    let block = lines.next()?.strip_prefix("block ")?.parse::<u32>().ok()?;
    let hash = lines.next()?.strip_prefix("hash ")?;
    let bits = lines.next()?.strip_prefix("verified ")?;
    if size != h.size || block != h.block_size || hash != hex(&h.hash) {
        return None;
    }
    let v: Vec<bool> = bits.chars().map(|c| c == '1').collect();
    (v.len() as u64 == blocks_of(h)).then_some(v)
}

/// Hash of a whole file as the protocol defines it (BLAKE3 of the list of block hashes),
/// read from the device (block by block: durable, evicted, read back).
fn device_hash(path: &Path, h: &FileHeader) -> std::io::Result<[u8; 32]> {
    let f = File::open(path)?;
    let bs = h.block_size as usize;
    let mut list = blake3::Hasher::new();
    let mut buf = vec![0u8; bs];
    for i in 0..blocks_of(h) {
        let off = i * bs as u64;
        let n = (h.size - off).min(bs as u64) as usize;
        verify::durable_then_read_back(&f, path, off, &mut buf[..n])?;
        list.update(blake3::hash(&buf[..n]).as_bytes());
    }
    Ok(*list.finalize().as_bytes())
}

/// Set mtime (and atime) of `path` itself, never through a symlink.
fn set_times(path: &Path, h: &FileHeader) {
    let ts = [
        libc::timespec {
            tv_sec: h.mtime_s as libc::time_t,
            tv_nsec: h.mtime_ns as libc::c_long,
        },
        libc::timespec {
            tv_sec: h.mtime_s as libc::time_t,
            tv_nsec: h.mtime_ns as libc::c_long,
        },
    ];
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
    else {
        return;
    };
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: a NUL-terminated path and two timespecs.
    unsafe {
        libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), flags);
    }
}

fn fsync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Is `name` one the receiver uses for its own files beside a final name? An entry from the
/// peer with such a name is refused: it could stand in for another file's partial.
fn is_partial_name(name: &str) -> bool {
    name.starts_with('.') && (name.ends_with(".sgpart") || name.ends_with(".sgpart.progress"))
}

/// A receiver's own file (a partial, its progress) that is not a regular file — a symlink or
/// a fifo planted in DIR — is removed, never followed.
fn clear_non_regular(path: &Path) -> Result<(), ProtoError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(proto::malformed(
            "path",
            format!("{} is a directory", path.display()),
        )),
        Ok(m) if !m.is_file() => fs::remove_file(path).map_err(|e| at(path, "remove", e)),
        _ => Ok(()),
    }
}

fn at(path: &Path, what: &str, e: std::io::Error) -> ProtoError {
    ProtoError::Io(std::io::Error::new(
        e.kind(),
        format!("cannot {what} {}: {e}", path.display()),
    ))
}

/// Open (creating it if missing) the partial `part` for writing, never through a symlink
/// (`O_NOFOLLOW`), and take an exclusive `flock` on it for as long as it is open, so that two
/// receivers on one directory never write the same partial: the second is refused. Returns the
/// file and whether a partial was already there (a previous run's, to resume).
fn open_partial(part: &Path) -> Result<(File, bool), ProtoError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    clear_non_regular(part)?;
    // Another receiver may rename the partial away between our open and our lock; then the
    // inode we locked is no longer the partial, and we try again.
    for _ in 0..8 {
        let existed = fs::symlink_metadata(part).is_ok();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(part)
            .map_err(|e| at(part, "open", e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(ProtoError::Local(format!(
                "{} is being received by another stripeguard recv into the same directory",
                part.display()
            )));
        }
        let ours = file.metadata().map_err(|e| at(part, "stat", e))?;
        match fs::symlink_metadata(part) {
            Ok(m) if m.dev() == ours.dev() && m.ino() == ours.ino() => return Ok((file, existed)),
            _ => continue,
        }
    }
    Err(ProtoError::Local(format!(
        "{} keeps changing under another receiver",
        part.display()
    )))
}

/// Write a receiver's own small file (progress) without following a symlink planted there.
fn write_own(path: &Path, text: &str) -> Result<(), ProtoError> {
    use std::os::unix::fs::OpenOptionsExt;
    clear_non_regular(path)?;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| at(path, "write", e))
}

/// Set a file's mtime (and atime) through its descriptor.
fn set_file_times(f: &File, h: &FileHeader) {
    use std::os::fd::AsRawFd;
    let t = libc::timespec {
        tv_sec: h.mtime_s as libc::time_t,
        tv_nsec: h.mtime_ns as libc::c_long,
    };
    // SAFETY: a descriptor this caller owns and two timespecs.
    unsafe {
        libc::futimens(f.as_raw_fd(), [t, t].as_ptr());
    }
}

/// A job for the verifier thread.
struct Job {
    file: Arc<File>,
    path: PathBuf,
    index: u64,
    /// Which transmission of the block this is (a resent block's earlier result must not
    /// count for it).
    seq: u64,
    offset: u64,
    len: usize,
    hash: [u8; 32],
}

/// Receive one session from `input`, answering on `output`.
pub fn receive(
    mut input: impl Read,
    output: impl Write + Send + 'static,
    opts: &RecvOptions,
) -> Result<RecvSummary, ProtoError> {
    let out = Arc::new(Mutex::new(output));
    let offered = proto::read_hello(&mut input)?;
    let mut features = offered & proto::FEATURES & !proto::FEATURE_AUTH;
    if opts.key.is_some() {
        features |= proto::FEATURE_AUTH;
    }
    proto::write_hello(&mut *out.lock().expect("lock"), features)?;
    if let Some(key) = &opts.key {
        let mut challenge = [0u8; 32];
        File::open("/dev/urandom")?.read_exact(&mut challenge)?;
        {
            let mut o = out.lock().expect("lock");
            proto::write_frame(&mut *o, proto::T_CHALLENGE, &challenge)?;
            o.flush()?;
        }
        let good = matches!(proto::read_frame(&mut input)?,
            Some((proto::T_RESPONSE, r)) if r[..] == proto::answer(key, &challenge)[..]);
        if !good {
            let mut o = out.lock().expect("lock");
            let _ = proto::write_frame(
                &mut *o,
                proto::T_ERROR,
                b"authentication failed: wrong or missing --key-file",
            );
            let _ = o.flush();
            return Err(proto::malformed(
                "authentication",
                "the sender does not hold the key",
            ));
        }
    }
    fs::create_dir_all(&opts.dir)?;
    let root = fs::canonicalize(&opts.dir)?;
    let summary = Arc::new(Mutex::new(RecvSummary::default()));
    let (jobs, job_rx) = mpsc::channel::<Job>();
    // Results of the verifier: (index, ok) of the current file.
    // Results of the verifier: (index, transmission, ok) of the current file.
    let (done_tx, done_rx) = mpsc::channel::<(u64, u64, bool)>();
    let hook = opts.test_hook.clone();
    let verify_blocks = opts.verify;
    let vsum = Arc::clone(&summary);
    let vout = Arc::clone(&out);
    // The verifier's failure, for the main loop to stop on (the peer is told at once).
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let vfailed = Arc::clone(&failed);
    let verifier = std::thread::spawn(move || -> Result<(), String> {
        let r = verify_jobs(job_rx, hook, verify_blocks, &vsum, &vout, done_tx);
        if let Err(e) = &r {
            *vfailed.lock().expect("lock") = Some(e.clone());
            let mut o = vout.lock().expect("lock");
            let _ = proto::write_frame(&mut *o, proto::T_ERROR, e.as_bytes());
            let _ = o.flush();
        }
        r
    });
    let mut dirs: Vec<(PathBuf, FileHeader)> = Vec::new();
    let mut dirty_dirs: std::collections::BTreeSet<PathBuf> = Default::default();
    let mut pending_attrs: Option<proto::Attrs> = None;
    let mut cur: Option<Partial> = None;
    let mut pending: HashMap<u64, (u64, [u8; 32])> = HashMap::new();
    let mut seq = 0u64;
    let result = (|| -> Result<(), ProtoError> {
        loop {
            if let Some(e) = failed.lock().expect("lock").clone() {
                return Err(ProtoError::Local(e));
            }
            let Some((kind, payload)) = proto::read_frame(&mut input)? else {
                return Err(proto::malformed("stream", "ended before DONE"));
            };
            match kind {
                proto::T_ATTRS => {
                    pending_attrs = Some(proto::Attrs::decode(&payload)?);
                }
                proto::T_FILE => {
                    // The attributes sent for this entry (none when not asked for).
                    let mut attrs = pending_attrs.take();
                    if cur.is_some() {
                        return Err(proto::malformed("FILE frame", "inside another file"));
                    }
                    let h = FileHeader::decode(&payload)?;
                    let parts = proto::check_relative(&h.path)?;
                    let name = parts[parts.len() - 1];
                    if is_partial_name(name) {
                        return Err(proto::malformed(
                            "path",
                            format!("{:?}: a name of the receiver's own partial files (.NAME.sgpart, .NAME.sgpart.progress)", h.path),
                        ));
                    }
                    let parent = parent_dir(&root, &parts)?;
                    let fin = parent.join(name);
                    let reply = |status: u8, extra: &[u8]| -> Result<(), ProtoError> {
                        let mut p = vec![status];
                        p.extend_from_slice(extra);
                        let mut o = out.lock().expect("lock");
                        proto::write_frame(&mut *o, proto::T_FILE_REPLY, &p)?;
                        o.flush()?;
                        Ok(())
                    };
                    match h.kind {
                        proto::KIND_DIR => {
                            match fs::symlink_metadata(&fin) {
                                Ok(m) if m.is_dir() => {}
                                Ok(_) => {
                                    return Err(proto::malformed(
                                        "path",
                                        format!("{} exists and is not a directory", fin.display()),
                                    ))
                                }
                                Err(_) => fs::create_dir(&fin)?,
                            }
                            if let Some(a) = attrs.take() {
                                if let Err(e) = crate::attrs::apply(&fin, &a) {
                                    summary.lock().expect("lock").attr_problems.push(e);
                                }
                            }
                            dirs.push((fin, h));
                            reply(1, &[])?;
                        }
                        proto::KIND_SYMLINK => {
                            if let Ok(m) = fs::symlink_metadata(&fin) {
                                if m.is_dir() {
                                    return Err(proto::malformed(
                                        "path",
                                        format!("{} is a directory", fin.display()),
                                    ));
                                }
                                fs::remove_file(&fin)?;
                            }
                            std::os::unix::fs::symlink(&h.target, &fin)?;
                            if let Some(a) = attrs.take() {
                                if let Err(e) = crate::attrs::apply(&fin, &a) {
                                    summary.lock().expect("lock").attr_problems.push(e);
                                }
                            }
                            set_times(&fin, &h);
                            summary.lock().expect("lock").files += 1;
                            reply(1, &[])?;
                        }
                        _ => {
                            // Already here, and verified from the device: skip it.
                            if let Ok(m) = fs::symlink_metadata(&fin) {
                                use std::os::unix::fs::MetadataExt;
                                if m.is_file()
                                    && m.len() == h.size
                                    && m.mtime() == h.mtime_s
                                    && m.mtime_nsec() as u32 == h.mtime_ns
                                    && device_hash(&fin, &h).ok() == Some(h.hash)
                                {
                                    summary.lock().expect("lock").skipped += 1;
                                    reply(1, &[])?;
                                    continue;
                                }
                                if m.is_dir() {
                                    return Err(proto::malformed(
                                        "path",
                                        format!("{} is a directory", fin.display()),
                                    ));
                                }
                            }
                            let part = parent.join(format!(".{name}.sgpart"));
                            let progress = parent.join(format!(".{name}.sgpart.progress"));
                            let blocks = blocks_of(&h);
                            let (file, existed) = open_partial(&part)?;
                            let resumed = if existed {
                                load_progress(&progress, &h)
                            } else {
                                None
                            };
                            if resumed.is_none() {
                                file.set_len(0).map_err(|e| at(&part, "truncate", e))?;
                            }
                            file.set_len(h.size).map_err(|e| at(&part, "size", e))?;
                            let verified = resumed.unwrap_or_else(|| vec![false; blocks as usize]);
                            let mut bits = Vec::new();
                            for chunk in verified.chunks(8) {
                                bits.push(
                                    chunk
                                        .iter()
                                        .enumerate()
                                        .fold(0u8, |a, (i, &v)| a | ((v as u8) << i)),
                                );
                            }
                            cur = Some(Partial {
                                attrs: attrs.take(),
                                seen: Default::default(),
                                hashes: vec![[0u8; 32]; blocks as usize],
                                header: h,
                                file: Arc::new(file),
                                part,
                                progress,
                                fin,
                                verified,
                            });
                            // 2 = send the blocks whose bit is clear.
                            reply(2, &bits)?;
                        }
                    }
                }
                proto::T_BLOCK => {
                    let Some(p) = cur.as_mut() else {
                        return Err(proto::malformed("BLOCK frame", "outside a file"));
                    };
                    let mut c = Cur::new(&payload, "BLOCK frame");
                    let index = c.u64()?;
                    let hash = c.hash()?;
                    let data = c.rest();
                    let blocks = blocks_of(&p.header);
                    if index >= blocks {
                        return Err(proto::malformed(
                            "BLOCK frame",
                            format!("block {index} of {blocks}"),
                        ));
                    }
                    let bs = u64::from(p.header.block_size);
                    let offset = index * bs;
                    let want = (p.header.size - offset).min(bs) as usize;
                    if data.len() != want {
                        return Err(proto::malformed(
                            "BLOCK frame",
                            format!("{} bytes where block {index} has {want}", data.len()),
                        ));
                    }
                    let tw = std::time::Instant::now();
                    // An all-zero block stays a hole (the file was sized sparse), as rsync -S.
                    if !p.seen.insert(index) || data.iter().any(|&b| b != 0) {
                        p.file.write_all_at(data, offset)?;
                    }
                    summary.lock().expect("lock").ns_write += tw.elapsed().as_nanos() as u64;
                    summary.lock().expect("lock").bytes += data.len() as u64;
                    seq += 1;
                    pending.insert(index, (seq, hash));
                    let _ = jobs.send(Job {
                        file: Arc::clone(&p.file),
                        path: p.part.clone(),
                        index,
                        seq,
                        offset,
                        len: want,
                        hash,
                    });
                    drain(&done_rx, p, &mut pending);
                }
                proto::T_FILE_END => {
                    let Some(mut p) = cur.take() else {
                        return Err(proto::malformed("FILE_END frame", "outside a file"));
                    };
                    let mut c = Cur::new(&payload, "FILE_END frame");
                    let gave_up = c.u8()? != 0;
                    c.end()?;
                    // Wait for the verifier to finish this file's blocks.
                    while !pending.is_empty() {
                        match done_rx.recv() {
                            Ok((i, n, ok)) => note(&mut p, &mut pending, i, n, ok),
                            Err(_) => return Err(proto::malformed("verifier", "stopped")),
                        }
                    }
                    let all = p.verified.iter().all(|&v| v);
                    let mut list = blake3::Hasher::new();
                    for h in &p.hashes {
                        list.update(h);
                    }
                    let whole_ok = all
                        && (p.header.size == 0
                            || *list.finalize().as_bytes() == p.header.hash
                            || resumed_any(&p));
                    let status = if all && whole_ok && !gave_up {
                        // Verified blocks were each made durable (fdatasync, which covers the
                        // size too); without verification the file is synced here once.
                        if !opts.verify {
                            p.file.sync_all()?;
                        }
                        p.file
                            .set_permissions(fs::Permissions::from_mode(p.header.mode & 0o7777))
                            .map_err(|e| at(&p.part, "set the mode of", e))?;
                        set_file_times(&p.file, &p.header);
                        if let Some(a) = &p.attrs {
                            if let Err(e) = crate::attrs::apply(&p.part, a) {
                                summary.lock().expect("lock").attr_problems.push(e);
                            }
                        }
                        fs::rename(&p.part, &p.fin)
                            .map_err(|e| at(&p.fin, "rename the partial to", e))?;
                        let _ = fs::remove_file(&p.progress);
                        // Directories are fsynced once each, at the end of the session (a
                        // crash before leaves the verified partial, which a later run resumes).
                        dirty_dirs.insert(p.fin.parent().unwrap_or(&root).to_path_buf());
                        summary.lock().expect("lock").files += 1;
                        0u8
                    } else {
                        write_own(&p.progress, &progress_text(&p))?;
                        summary
                            .lock()
                            .expect("lock")
                            .failed
                            .push(p.header.path.clone());
                        1u8
                    };
                    let mut o = out.lock().expect("lock");
                    proto::write_frame(&mut *o, proto::T_FILE_DONE, &[status])?;
                    o.flush()?;
                }
                proto::T_DONE => {
                    for d in &dirty_dirs {
                        fsync_dir(d);
                    }
                    for (d, h) in dirs.iter().rev() {
                        // Still the directory made here (never a symlink put in its place).
                        if fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()) {
                            let _ =
                                fs::set_permissions(d, fs::Permissions::from_mode(h.mode & 0o7777));
                            set_times(d, h);
                        }
                    }
                    let mut o = out.lock().expect("lock");
                    proto::write_frame(&mut *o, proto::T_DONE, &[])?;
                    o.flush()?;
                    return Ok(());
                }
                proto::T_ERROR => {
                    return Err(ProtoError::Peer(
                        String::from_utf8_lossy(&payload).into_owned(),
                    ))
                }
                k => {
                    return Err(proto::malformed(
                        "stream",
                        format!("unexpected frame type {k}"),
                    ))
                }
            }
        }
    })();
    // Keep what was verified of an unfinished file for the next run.
    if let Some(p) = cur.as_mut() {
        while let Ok((i, n, ok)) = done_rx.try_recv() {
            note(p, &mut pending, i, n, ok);
        }
        let _ = write_own(&p.progress, &progress_text(p));
    }
    drop(jobs);
    let verifier = verifier.join().expect("the verifier panicked");
    if let Err(e) = &result {
        // Tell the sender why (it would otherwise see only a closed stream), unless it was the
        // sender's own error or the verifier has told it already.
        if !matches!(e, ProtoError::Peer(_)) && failed.lock().expect("lock").is_none() {
            let mut o = out.lock().expect("lock");
            let _ = proto::write_frame(&mut *o, proto::T_ERROR, e.to_string().as_bytes());
            let _ = o.flush();
        }
    }
    // The verifier's failure is the cause of whatever the stream did after it.
    verifier.map_err(ProtoError::Local)?;
    result?;
    let s = summary.lock().expect("lock").clone();
    Ok(s)
}

/// The verifier thread: each block durable, evicted, read back, hashed, answered.
fn verify_jobs(
    job_rx: mpsc::Receiver<Job>,
    hook: Option<String>,
    verify_blocks: bool,
    vsum: &Mutex<RecvSummary>,
    vout: &Mutex<impl Write>,
    done_tx: mpsc::Sender<(u64, u64, bool)>,
) -> Result<(), String> {
    let mut buf = Vec::new();
    for j in job_rx {
        if let Some(cmd) = &hook {
            let _ = std::process::Command::new(cmd)
                .arg(&j.path)
                .arg(j.offset.to_string())
                .arg(j.len.to_string())
                .status();
        }
        buf.resize(j.len, 0);
        let (ok, how) = if verify_blocks {
            let (how, t) =
                    verify::durable_then_read_back_timed(&j.file, &j.path, j.offset, &mut buf[..])
                        .map_err(|e| {
                            format!(
                                "cannot read {} back from the device: {e} (a filesystem that keeps no separate device copy, such as tmpfs, cannot be verified)",
                                j.path.display()
                            )
                        })?;
            let th = std::time::Instant::now();
            let ok = *blake3::hash(&buf).as_bytes() == j.hash;
            let mut s = vsum.lock().expect("lock");
            s.ns_durable += t.durable.as_nanos() as u64;
            s.ns_evict += t.evict.as_nanos() as u64;
            s.ns_read_back_hash += (t.read_back + th.elapsed()).as_nanos() as u64;
            (ok, how)
        } else {
            (true, verify::ReadBack::Evicted)
        };
        {
            let mut s = vsum.lock().expect("lock");
            if ok {
                s.blocks_verified += 1;
            } else {
                s.blocks_mismatched += 1;
            }
            if how == verify::ReadBack::Direct {
                s.direct_reads += 1;
            }
        }
        let mut p = j.index.to_le_bytes().to_vec();
        p.push(ok as u8);
        {
            let mut o = vout.lock().expect("lock");
            proto::write_frame(&mut *o, proto::T_BLOCK_RESULT, &p)
                .and_then(|()| o.flush())
                .map_err(|e| e.to_string())?;
        }
        let _ = done_tx.send((j.index, j.seq, ok));
    }
    Ok(())
}

/// Blocks verified in an earlier run have no hash here; the whole-file check then rests on the
/// per-block checks of both runs.
fn resumed_any(p: &Partial) -> bool {
    p.hashes.contains(&[0u8; 32])
}

fn note(
    p: &mut Partial,
    pending: &mut HashMap<u64, (u64, [u8; 32])>,
    index: u64,
    seq: u64,
    ok: bool,
) {
    // Only the result of the block's latest transmission counts.
    if pending.get(&index).is_some_and(|&(s, _)| s == seq) {
        let (_, h) = pending.remove(&index).expect("present");
        if ok {
            p.verified[index as usize] = true;
            p.hashes[index as usize] = h;
        }
    }
}

fn drain(
    rx: &mpsc::Receiver<(u64, u64, bool)>,
    p: &mut Partial,
    pending: &mut HashMap<u64, (u64, [u8; 32])>,
) {
    let mut n = 0;
    while let Ok((i, s, ok)) = rx.try_recv() {
        note(p, pending, i, s, ok);
        n += 1;
    }
    // Progress on disk now and then, so an interrupted transfer resumes near where it stopped.
    if n > 0 && p.verified.iter().filter(|&&v| v).count() % 64 == 0 {
        let _ = write_own(&p.progress, &progress_text(p));
    }
}
