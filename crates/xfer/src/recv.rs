//! The receiving side. The main thread reads frames, makes directories and symlinks, opens
//! partials and writes blocks; a verifier thread takes everything written so far as one
//! batch and, per batch (FORMAT.md §5 "Durability"):
//!
//! 1. sets owner, xattrs, mode and times through the descriptor of each file whose blocks are
//!    all written;
//! 2. makes the batch durable with one call: `syncfs` when it holds several files, otherwise
//!    `fdatasync` (or `fsync` for a file whose attributes were just set) per file;
//! 3. drops each written block from the page cache (proved with `mincore`), reads it back from
//!    the device, hashes it and answers BLOCK_RESULT;
//! 4. renames each file whose blocks all verified (and whose whole-file hash matches) from its
//!    partial to its final name;
//! 5. makes the renames durable (`syncfs`, or `fsync` of each directory), and only then
//!    answers FILE_DONE.
//!
//! So many small files share one `syncfs` each way, and a large file's blocks are made durable
//! and read back in batches while the next ones arrive.

use crate::beneath::{self, Policy, Root};
use crate::proto::{self, Attrs, Cur, FileHeader, Options, ProtoError, Reply};
use crate::records::{Record, Records};
use crate::seal::{self, SealedReader};
use crate::verify;
use rustix::fd::OwnedFd;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// A batch with at least this many files is made durable with one `syncfs`.
const SYNCFS_FILES: usize = 3;
/// A file of this many blocks or more has its progress written for the next run (in a batch
/// that verified at least 8 more of its blocks).
const PROGRESS_BLOCKS: u64 = 8;

/// A test's hook, run between "durable" and "read back" with the file and the block's range
/// (the extreme-injection test damages the device there). Test builds only.
#[cfg(test)]
pub type Hook = Arc<dyn Fn(&File, u64, usize) + Send + Sync>;

/// How to receive.
#[derive(Clone)]
pub struct RecvOptions {
    pub dir: PathBuf,
    /// Verify each block from the device (the point of the tool). Off only to measure what
    /// verification costs (`recv --no-verify`): blocks are then acknowledged once written, and
    /// each file is made durable before its rename, like `rsync --fsync`.
    pub verify: bool,
    /// Require the sender to prove it holds this key (a sealed session).
    pub key: Option<[u8; 32]>,
    /// What of the sender's owners, modes and xattrs is applied.
    pub policy: Policy,
    /// Take a sender's `--delete` (`recv --allow-delete`): without it such a session is
    /// refused before anything is received.
    pub allow_delete: bool,
    /// Make device nodes a sender sends (`recv --devices`); without it each is refused.
    pub devices: bool,
    #[cfg(test)]
    pub hook: Option<Hook>,
}

impl RecvOptions {
    pub fn new(dir: PathBuf) -> RecvOptions {
        RecvOptions {
            dir,
            verify: true,
            key: None,
            policy: Policy::default(),
            allow_delete: false,
            devices: false,
            #[cfg(test)]
            hook: None,
        }
    }
}

/// What a receive did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecvSummary {
    /// Regular files landed under their names, verified on the device.
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Files already there, verified from the device.
    pub skipped: u64,
    /// Files already there, trusted from a verification record (`--quick`).
    pub trusted: u64,
    /// Fifos, sockets and device nodes made.
    pub specials: u64,
    /// Hard links made.
    pub hardlinks: u64,
    /// Entries deleted (`send --delete`, with `--allow-delete`).
    pub deleted: u64,
    /// A dry run: entries that would be sent or made.
    pub would: u64,
    /// Blocks copied from the old file under the name (a changed file's delta).
    pub blocks_copied: u64,
    /// Entries that did not land, each with its path and why.
    pub failed: Vec<String>,
    pub bytes: u64,
    pub blocks_verified: u64,
    /// Blocks whose read-back from the device did not match (each was sent again).
    pub blocks_mismatched: u64,
    /// Blocks read back with O_DIRECT because eviction could not be proved.
    pub direct_reads: u64,
    /// Durability calls (`syncfs`, `fsync`, `fdatasync`).
    pub syncs: u64,
    /// Total nanoseconds in each stage: write (into the page cache), durable, evict (fadvise +
    /// mincore proof), read back + hash.
    pub ns_write: u64,
    pub ns_durable: u64,
    pub ns_evict: u64,
    pub ns_read_back_hash: u64,
    /// Owners or extended attributes that could not be applied (not root, no xattr support).
    pub attr_problems: Vec<String>,
    /// Owners, setuid/setgid bits and xattrs the sender sent that this receiver does not
    /// accept (`recv --owner`, `--xattrs`, `--all-xattrs`, `--allow-setid`).
    pub attrs_refused: u64,
}

/// A connection after its hello (and key handshake): frames in, frames out.
pub struct Conn {
    input: Input,
    output: Box<dyn Write + Send>,
}

enum Input {
    Plain(BufReader<Box<dyn Read + Send>>),
    Sealed(SealedReader<BufReader<Box<dyn Read + Send>>>),
}

impl Input {
    /// Bytes already received and not yet read (the reply can wait for them).
    fn buffered(&self) -> bool {
        match self {
            Input::Plain(r) => !r.buffer().is_empty(),
            Input::Sealed(r) => r.buffered() > 0,
        }
    }
}

impl Read for Input {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Plain(r) => r.read(b),
            Input::Sealed(r) => r.read(b),
        }
    }
}

impl Conn {
    /// Turn the sender away with a reason (sent as ERROR, sealed when the session is).
    pub fn refuse(&mut self, why: &str) {
        let _ = proto::write_frame(&mut self.output, proto::T_ERROR, why.as_bytes());
        let _ = self.output.flush();
    }
}

/// Open a session as the receiver: the hellos, and with a key the handshake in which the
/// sender proves it holds it. A peer of another version is told so, by name.
pub fn accept(
    input: Box<dyn Read + Send>,
    mut output: Box<dyn Write + Send>,
    key: Option<&[u8; 32]>,
) -> Result<Conn, ProtoError> {
    let mut input = BufReader::with_capacity(1 << 20, input);
    let (_offered, sender_hello) = match proto::read_hello(&mut input) {
        Ok(h) => h,
        Err(e @ (ProtoError::Version(_) | ProtoError::Magic)) => {
            proto::refuse(&mut output, &e.to_string());
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let features = if key.is_some() {
        proto::FEATURE_SEALED
    } else {
        0
    };
    let mine = proto::write_hello(&mut output, features)?;
    match key {
        Some(k) => {
            let (r, w) =
                seal::respond(input, output, k, &sender_hello, &mine).map_err(|e| match e {
                    ProtoError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                        ProtoError::Auth(
                            "the sender closed during the key handshake (it has no --key-file?)"
                                .into(),
                        )
                    }
                    e => e,
                })?;
            Ok(Conn {
                input: Input::Sealed(r),
                output: Box::new(std::io::BufWriter::with_capacity(1 << 16, w)),
            })
        }
        None => Ok(Conn {
            input: Input::Plain(input),
            output: Box::new(std::io::BufWriter::with_capacity(1 << 16, output)),
        }),
    }
}

/// Receive one session from `input`, answering on `output`.
pub fn receive(
    input: impl Read + Send + 'static,
    output: impl Write + Send + 'static,
    opts: &RecvOptions,
) -> Result<RecvSummary, ProtoError> {
    let root = Root::open(&opts.dir).map_err(ProtoError::Local)?;
    let conn = accept(Box::new(input), Box::new(output), opts.key.as_ref())?;
    receive_on(conn, Target::Dir(root), opts)
}

/// Where a session lands: one directory (opened already), or a daemon's modules, one of which
/// the sender names in its OPTIONS (opened for the session).
pub enum Target {
    Dir(Root),
    Modules(Arc<Vec<(String, PathBuf)>>),
}

/// What the sender asked of this session, and what it has landed (hard links name those).
struct Session {
    o: Options,
    /// Regular files that landed, were there or were trusted (a dry run: would be sent),
    /// with the device and inode that did: a hard link is made to that inode or not at all.
    landed: Mutex<HashMap<Vec<u8>, (u64, u64)>>,
    /// `--quick`: the verification records read (per directory) and those to write.
    records: Mutex<Records>,
}

impl Session {
    fn dry(&self) -> bool {
        self.o.has(proto::OPT_DRY_RUN)
    }
    fn note_landed(&self, rel: &[u8], dev_ino: (u64, u64)) {
        self.landed
            .lock()
            .expect("lock")
            .insert(rel.to_vec(), dev_ino);
    }

    /// `--quick`: this receiver's record of `rel`, if one is young enough.
    fn record(&self, root: &Root, rel: &[u8]) -> Option<Record> {
        if !self.o.has(proto::OPT_QUICK) {
            return None;
        }
        self.records
            .lock()
            .expect("lock")
            .get(root, rel, self.o.quick_secs)
    }

    /// `--quick`: a file proved from the device, to record at the session's end.
    fn note_record(&self, rel: &[u8], rec: Record) {
        if self.o.has(proto::OPT_QUICK) {
            self.records.lock().expect("lock").note(rel, rec);
        }
    }

    /// Write the records noted.
    fn write_records(&self, root: &Root) {
        let new = self.records.lock().expect("lock").take_new();
        crate::records::write(root, new);
    }
}

/// Read the sender's OPTIONS (its first frame) and open the directory they name; a refusal is
/// sent to the sender as ERROR and returned.
fn open_options(
    input: &mut Input,
    output: &mut Box<dyn Write + Send>,
    target: Target,
    opts: &RecvOptions,
) -> Result<(Options, Root, PathBuf), ProtoError> {
    let read = match proto::read_frame(input) {
        Ok(Some((proto::T_OPTIONS, p))) => Options::decode(&p),
        Ok(Some((proto::T_ERROR, p))) => Err(ProtoError::Peer(proto::printable(&p))),
        Ok(Some((k, _))) => Err(proto::malformed(
            "stream",
            format!("frame type {k} where OPTIONS was due"),
        )),
        Ok(None) => Err(ProtoError::Local(
            "the sender closed the connection before its options".into(),
        )),
        Err(e) => Err(e),
    };
    let o = match read {
        Ok(o) => o,
        Err(e) => {
            // Nothing of this session stays behind; the sender is told why (unless it is the
            // one who said it, or has gone).
            if let Target::Dir(root) = &target {
                root.tidy_unchanged();
            }
            if matches!(e, ProtoError::Malformed { .. } | ProtoError::TooLong(_)) {
                let _ = proto::write_frame(output, proto::T_ERROR, e.to_string().as_bytes());
                let _ = output.flush();
            }
            return Err(e);
        }
    };
    let mut refuse = |why: String| {
        let _ = proto::write_frame(output, proto::T_ERROR, why.as_bytes());
        let _ = output.flush();
        ProtoError::Local(why)
    };
    let module = String::from_utf8_lossy(&o.module).into_owned();
    let (root, dir) = match target {
        Target::Dir(root) if module.is_empty() => (root, opts.dir.clone()),
        Target::Dir(root) => {
            root.tidy();
            return Err(refuse(format!(
                "this receiver has no modules (asked for {:?}): leave out --module",
                proto::printable(&o.module)
            )));
        }
        Target::Modules(list) => {
            let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
            let Some((_, dir)) = list.iter().find(|(n, _)| *n == module) else {
                return Err(refuse(if module.is_empty() {
                    format!(
                        "this receiver serves modules ({}): give send --module NAME",
                        names.join(", ")
                    )
                } else {
                    format!(
                        "no module {:?} here (modules: {})",
                        proto::printable(&o.module),
                        names.join(", ")
                    )
                }));
            };
            match Root::open(dir) {
                Ok(r) => (r, dir.clone()),
                Err(e) => return Err(refuse(format!("module {module}: {e}"))),
            }
        }
    };
    if o.has(proto::OPT_DELETE) && !opts.allow_delete {
        // Nothing of this session stays behind (its partial directory was made empty).
        root.tidy();
        return Err(refuse(
            "this receiver does not take --delete (run recv with --allow-delete)".into(),
        ));
    }
    Ok((o, root, dir))
}

/// A file's state, shared by the main thread (which writes) and the verifier.
struct Open {
    file: Arc<File>,
    size: u64,
    bs: u64,
    blocks: u64,
    /// Created this session: an all-zero block's first transmission stays a hole.
    fresh: bool,
    written: Vec<u8>,
    /// The sender's blocks are ignored after a failure (until it reuses the id).
    dead: bool,
    /// Set by the verifier when the file has landed or failed: the id is free again.
    finished: Arc<AtomicBool>,
    /// Its path, for messages.
    shown: String,
    /// The old file under the name and its size, whose blocks a COPY names (a delta).
    old: Option<(Arc<File>, u64)>,
}

enum Msg {
    Open(Box<VFile>),
    Block {
        id: u32,
        index: u64,
        hash: [u8; 32],
    },
    /// The sender gave up on the file.
    End {
        id: u32,
    },
    /// The file failed on this side (a write error); `remove` drops its partial.
    Fail {
        id: u32,
        why: String,
        remove: bool,
    },
}

/// What the verifier knows of a file.
struct VFile {
    id: u32,
    rel: Vec<u8>,
    name: Vec<u8>,
    parent: Arc<OwnedFd>,
    file: Arc<File>,
    size: u64,
    bs: u64,
    mode: u32,
    mtime: (i64, u32),
    hash: [u8; 32],
    attrs: Attrs,
    verified: Vec<bool>,
    hashes: Vec<[u8; 32]>,
    resumed: bool,
    /// Written, not yet verified: block → the sender's hash of it.
    outstanding: BTreeMap<u64, [u8; 32]>,
    attrs_set: bool,
    abandoned: bool,
    verified_at_progress: usize,
    finished: Arc<AtomicBool>,
}

impl VFile {
    fn verified_count(&self) -> usize {
        self.verified.iter().filter(|&&v| v).count()
    }
    fn all_written(&self) -> bool {
        self.verified_count() + self.outstanding.len() == self.verified.len()
    }
    fn progress_text(&self) -> String {
        let bits: String = self
            .verified
            .iter()
            .map(|&v| if v { '1' } else { '0' })
            .collect();
        format!(
            "stripeguard-xfer-progress 2\npath {}\nsize {}\nblock {}\nhash {}\nverified {}\n",
            hex(blake3::hash(&self.rel).as_bytes()),
            self.size,
            self.bs,
            hex(&self.hash),
            bits
        )
    }
}

use proto::hex;

/// A previous run's progress for this header, if it matches (same path, size, block size, hash).
fn parse_progress(text: &str, h: &FileHeader) -> Option<Vec<bool>> {
    let mut lines = text.lines();
    if lines.next()? != "stripeguard-xfer-progress 2" {
        return None;
    }
    let path = lines.next()?.strip_prefix("path ")?;
    let size = lines.next()?.strip_prefix("size ")?.parse::<u64>().ok()?;
    let block = lines.next()?.strip_prefix("block ")?.parse::<u64>().ok()?;
    let hash = lines.next()?.strip_prefix("hash ")?;
    let bits = lines.next()?.strip_prefix("verified ")?;
    if path != hex(blake3::hash(&h.path).as_bytes())
        || size != h.size
        || block != u64::from(h.block_size)
        || hash != hex(&h.hash)
    {
        return None;
    }
    let v: Vec<bool> = bits.chars().map(|c| c == '1').collect();
    (v.len() as u64 == h.blocks()).then_some(v)
}

/// A directory received, for its mode, owner and times at the end.
struct DirDone {
    rel: Vec<u8>,
    mode: u32,
    attrs: Attrs,
    mtime: (i64, u32),
}

type Out = Arc<Mutex<Box<dyn Write + Send>>>;

fn send_frame(out: &Out, kind: u8, payload: &[u8], flush: bool) -> std::io::Result<()> {
    let mut o = out.lock().expect("lock");
    proto::write_frame(&mut *o, kind, payload)?;
    if flush {
        o.flush()?;
    }
    Ok(())
}

/// Receive one session on an accepted connection.
pub fn receive_on(
    conn: Conn,
    target: Target,
    opts: &RecvOptions,
) -> Result<RecvSummary, ProtoError> {
    let Conn {
        mut input,
        mut output,
    } = conn;
    let (o, root, dir) = open_options(&mut input, &mut output, target, opts)?;
    let opts = &RecvOptions {
        dir,
        ..opts.clone()
    };
    let sess = Arc::new(Session {
        o,
        landed: Mutex::default(),
        records: Mutex::default(),
    });
    let out: Out = Arc::new(Mutex::new(output));
    let root = Arc::new(root);
    let summary = Arc::new(Mutex::new(RecvSummary::default()));
    let (tx, rx) = mpsc::channel::<Msg>();
    let verifier = {
        let (root, out, summary, opts, sess) = (
            Arc::clone(&root),
            Arc::clone(&out),
            Arc::clone(&summary),
            opts.clone(),
            Arc::clone(&sess),
        );
        std::thread::spawn(move || {
            let r = Verifier {
                root,
                out: Arc::clone(&out),
                summary,
                opts,
                sess,
                files: HashMap::new(),
                dirty: Vec::new(),
            }
            .run(rx);
            if let Err(e) = &r {
                // Tell the sender now: the main thread may be waiting for its next frame.
                let _ = send_frame(&out, proto::T_ERROR, e.as_bytes(), true);
            }
            r
        })
    };
    let mut dirs: Vec<DirDone> = Vec::new();
    let mut open: HashMap<u32, Open> = HashMap::new();
    let mut open_blocks = 0u64;
    let result = session(
        &mut input,
        &out,
        &root,
        opts,
        &sess,
        &summary,
        &tx,
        &mut open,
        &mut open_blocks,
        &mut dirs,
    );
    drop(tx);
    let verified = verifier
        .join()
        .map_err(|_| ProtoError::Local("the verifier panicked".into()))?;
    let verifier_failed = verified.is_err();
    if result.is_ok() {
        // The verifier has finished every batch: what is still open was never completed.
        let mut s = summary.lock().expect("lock");
        for o in open
            .values()
            .filter(|o| !o.dead && !o.finished.load(Ordering::Acquire))
        {
            s.failed.push(format!(
                "{}: the sender ended the session before it was complete (kept as a partial)",
                o.shown
            ));
        }
    }
    let result = match (result, verified) {
        // The verifier's failure is the cause of whatever the stream did after it (and the
        // sender has been told).
        (_, Err(e)) => Err(ProtoError::Local(e)),
        (r, Ok(())) => r,
    };
    match result {
        Ok(()) => {
            // Directories last (their modes may forbid writing), then one sync for them all.
            let mut s = summary.lock().expect("lock");
            for d in dirs.iter().rev() {
                if let Err(e) = root.finish_dir(&d.rel, d.mode, &d.attrs, d.mtime) {
                    s.attr_problems.push(e);
                }
            }
            root.syncfs().map_err(|e| {
                ProtoError::Local(format!("cannot sync {}: {e}", opts.dir.display()))
            })?;
            s.syncs += 1;
            drop(s);
            send_frame(&out, proto::T_DONE, &[], true)?;
        }
        Err(ref e) => {
            if !matches!(e, ProtoError::Peer(_)) && !verifier_failed {
                let text = match e {
                    // A read timeout (`recv --idle-timeout`): said as what it is.
                    ProtoError::Io(io)
                        if matches!(
                            io.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        "the receiver heard nothing from this sender for its idle timeout; what was verified is kept for a later run".to_string()
                    }
                    e => e.to_string(),
                };
                let _ = send_frame(&out, proto::T_ERROR, text.as_bytes(), true);
            }
        }
    }
    // Every file noted was reported landed or there, after its durability call.
    sess.write_records(&root);
    if sess.dry() {
        root.tidy_unchanged();
    } else {
        root.tidy();
    }
    result?;
    let s = summary.lock().expect("lock").clone();
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
fn session(
    input: &mut Input,
    out: &Out,
    root: &Root,
    opts: &RecvOptions,
    sess: &Session,
    summary: &Mutex<RecvSummary>,
    tx: &mpsc::Sender<Msg>,
    open: &mut HashMap<u32, Open>,
    open_blocks: &mut u64,
    dirs: &mut Vec<DirDone>,
) -> Result<(), ProtoError> {
    let verifier_gone = || ProtoError::Local("the verifier stopped".into());
    // Replies wait in the buffer while more frames are already here, and go out before this
    // side waits for the sender.
    let mut unflushed = false;
    // The decompression context of ZBLOCKs, made at the first.
    let mut unz: Option<zstd::bulk::Decompressor<'static>> = None;
    // A DELETE came (with the count of entries that had failed then): no entry may follow.
    let mut deleting: Option<usize> = None;
    loop {
        if unflushed && !input.buffered() {
            out.lock().expect("lock").flush()?;
            unflushed = false;
        }
        let Some((kind, payload)) = proto::read_frame(input)? else {
            return Err(ProtoError::Local("the sender closed the connection before DONE (it ended or was killed); what was verified is kept for a later run".into()));
        };
        match kind {
            proto::T_FILE => {
                if deleting.is_some() {
                    return Err(proto::malformed("FILE frame", "an entry after a DELETE"));
                }
                let h = FileHeader::decode(&payload)?;
                if open
                    .get(&h.id)
                    .is_some_and(|o| !o.dead && !o.finished.load(Ordering::Acquire))
                {
                    return Err(proto::malformed(
                        "FILE frame",
                        format!("file id {} is already in flight", h.id),
                    ));
                }
                let over =
                    *open_blocks + h.blocks().min(proto::MAX_BLOCKS) > proto::MAX_OPEN_BLOCKS;
                if over || open.len() >= proto::MAX_OPEN_FILES || open.contains_key(&h.id) {
                    open.retain(|_, o| !(o.dead || o.finished.load(Ordering::Acquire)));
                    *open_blocks = open.values().map(|o| o.blocks).sum();
                }
                if open.len() >= proto::MAX_OPEN_FILES {
                    return Err(proto::malformed(
                        "FILE frame",
                        format!("more than {} files in flight", proto::MAX_OPEN_FILES),
                    ));
                }
                let reply = match entry(root, opts, sess, summary, &h, *open_blocks) {
                    Ok(Entry::Reply(r)) => r,
                    Ok(Entry::Dir(d)) => {
                        dirs.push(d);
                        Reply::Made
                    }
                    Ok(Entry::File(o, v, old)) => {
                        *open_blocks += o.blocks;
                        let ranges = verified_ranges(&v.verified);
                        open.insert(h.id, o);
                        tx.send(Msg::Open(v)).map_err(|_| verifier_gone())?;
                        match old {
                            Some(hashes) => Reply::Delta(ranges, hashes),
                            None => Reply::Send(ranges),
                        }
                    }
                    Err(why) => {
                        summary
                            .lock()
                            .expect("lock")
                            .failed
                            .push(format!("{}: {why}", proto::show(&h.path)));
                        Reply::Refused(why)
                    }
                };
                send_frame(
                    out,
                    proto::T_FILE_REPLY,
                    &proto::encode_reply(h.id, &reply),
                    false,
                )?;
                unflushed = true;
            }
            proto::T_BLOCK => {
                let b = proto::decode_block(&payload)?;
                write_block(
                    open,
                    summary,
                    tx,
                    b.id,
                    b.index,
                    b.hash,
                    Data::Bytes(b.data),
                )?;
            }
            proto::T_ZBLOCK => {
                if !sess.o.has(proto::OPT_COMPRESS) {
                    return Err(proto::malformed(
                        "ZBLOCK frame",
                        "compressed blocks without the COMPRESS option",
                    ));
                }
                if unz.is_none() {
                    unz = Some(zstd::bulk::Decompressor::new()?);
                }
                let z = unz.as_mut().expect("made above");
                let (id, index, hash, data) = proto::decode_zblock(&payload, z)?;
                write_block(open, summary, tx, id, index, hash, Data::Bytes(&data))?;
            }
            proto::T_COPY => {
                let (id, index, old, hash) = proto::decode_copy(&payload)?;
                write_block(open, summary, tx, id, index, hash, Data::Old(old))?;
            }
            proto::T_LIST => {
                let (id, rel) = proto::decode_list(&payload, "LIST frame")?;
                if !sess.o.has(proto::OPT_DELETE) {
                    return Err(proto::malformed("LIST frame", "without the DELETE option"));
                }
                list_dir(root, out, id, &rel)?;
                unflushed = true;
            }
            proto::T_DELETE => {
                let (id, rel) = proto::decode_list(&payload, "DELETE frame")?;
                if !sess.o.has(proto::OPT_DELETE) || sess.dry() {
                    return Err(proto::malformed(
                        "DELETE frame",
                        "without the DELETE option, or in a dry run",
                    ));
                }
                // This side holds the rule too: deleting starts only once every entry of the
                // session is done, none may follow, and nothing is deleted after a failure.
                if open
                    .values()
                    .any(|o| !o.dead && !o.finished.load(Ordering::Acquire))
                {
                    return Err(proto::malformed(
                        "DELETE frame",
                        "while entries of the session are in flight",
                    ));
                }
                // Entries that failed before the first DELETE (a DELETE's own failure does not
                // stop the others, as in rsync).
                let failed = *deleting.get_or_insert(summary.lock().expect("lock").failed.len());
                let r = if failed > 0 {
                    Err(format!(
                        "not deleting: {failed} entr{} of this session failed",
                        if failed == 1 { "y" } else { "ies" }
                    ))
                } else {
                    proto::check_relative(&rel).and_then(|parts| root.remove(&parts, &rel))
                };
                let (status, why) = match r {
                    Ok(()) => {
                        summary.lock().expect("lock").deleted += 1;
                        (proto::DONE_LANDED, String::new())
                    }
                    Err(why) => {
                        summary
                            .lock()
                            .expect("lock")
                            .failed
                            .push(format!("{}: {why}", proto::show(&rel)));
                        (proto::DONE_FAILED, why)
                    }
                };
                send_frame(
                    out,
                    proto::T_FILE_DONE,
                    &proto::encode_done(id, status, &why),
                    false,
                )?;
                unflushed = true;
            }
            proto::T_FILE_END => {
                let mut c = Cur::new(&payload, "FILE_END frame");
                let id = c.u32()?;
                c.end()?;
                match open.get_mut(&id) {
                    Some(o) if !o.dead => {
                        o.dead = true;
                        tx.send(Msg::End { id }).map_err(|_| verifier_gone())?;
                    }
                    Some(_) => {}
                    None => {
                        return Err(proto::malformed(
                            "FILE_END frame",
                            format!("file id {id} is not in flight"),
                        ))
                    }
                }
            }
            proto::T_DONE => return Ok(()),
            proto::T_ERROR => return Err(ProtoError::Peer(proto::printable(&payload))),
            k => {
                return Err(proto::malformed(
                    "stream",
                    format!("unexpected frame type {k}"),
                ))
            }
        }
    }
}

/// A block's bytes: sent, or those of a block of the old file under the name (COPY).
enum Data<'a> {
    Bytes(&'a [u8]),
    Old(u64),
}

/// Write one block (BLOCK, ZBLOCK or COPY) into its file's partial and hand it to the verifier.
fn write_block(
    open: &mut HashMap<u32, Open>,
    summary: &Mutex<RecvSummary>,
    tx: &mpsc::Sender<Msg>,
    id: u32,
    index: u64,
    hash: [u8; 32],
    data: Data<'_>,
) -> Result<(), ProtoError> {
    let verifier_gone = || ProtoError::Local("the verifier stopped".into());
    let Some(o) = open.get_mut(&id) else {
        return Err(proto::malformed(
            "BLOCK frame",
            format!("file id {id} is not in flight"),
        ));
    };
    if o.dead {
        return Ok(());
    }
    if o.finished.load(Ordering::Acquire) {
        return Err(proto::malformed(
            "BLOCK frame",
            format!("file id {id} has finished"),
        ));
    }
    if index >= o.blocks {
        return Err(proto::malformed(
            "BLOCK frame",
            format!("block {index} of {}", o.blocks),
        ));
    }
    let offset = index * o.bs;
    let want = proto::block_len(o.size, offset, o.bs);
    let tw = std::time::Instant::now();
    #[allow(
        clippy::cast_possible_truncation,
        reason = "index < blocks <= MAX_BLOCKS (checked above and by check_blocks)"
    )]
    let (byte, bit) = ((index / 8) as usize, 1u8 << (index % 8));
    let first = o.written[byte] & bit == 0;
    o.written[byte] |= bit;
    let mut copied = Vec::new();
    let data: &[u8] = match data {
        Data::Bytes(d) => {
            if d.len() != want {
                return Err(proto::malformed(
                    "BLOCK frame",
                    format!("{} bytes where block {index} has {want}", d.len()),
                ));
            }
            d
        }
        Data::Old(old) => {
            let Some((f, size)) = &o.old else {
                return Err(proto::malformed(
                    "COPY frame",
                    format!("file id {id} was offered no old blocks"),
                ));
            };
            let from = old.checked_mul(o.bs).filter(|&b| b < *size);
            // A block the old file does not have whole, or cannot read, is not written: the
            // read-back then fails and the sender sends the bytes.
            if let Some(from) = from.filter(|&b| proto::block_len(*size, b, o.bs) == want) {
                copied.resize(want, 0);
                if f.read_exact_at(&mut copied, from).is_err() {
                    copied.clear();
                }
            }
            if copied.is_empty() {
                tx.send(Msg::Block { id, index, hash })
                    .map_err(|_| verifier_gone())?;
                return Ok(());
            }
            summary.lock().expect("lock").blocks_copied += 1;
            &copied
        }
    };
    let hole = o.fresh && first && data.iter().all(|&b| b == 0);
    if !hole {
        if let Err(e) = o.file.write_all_at(data, offset) {
            // ENOSPC, EIO, EROFS: this file fails; the others go on.
            o.dead = true;
            let why = format!("cannot write: {e}");
            return tx
                .send(Msg::Fail {
                    id,
                    why,
                    remove: true,
                })
                .map_err(|_| verifier_gone());
        }
    }
    {
        let mut s = summary.lock().expect("lock");
        s.ns_write += crate::nanos(tw.elapsed());
        s.bytes += data.len() as u64;
    }
    tx.send(Msg::Block { id, index, hash })
        .map_err(|_| verifier_gone())
}

/// Answer a LIST: the names in a directory, in LISTING frames of at most LISTING_NAMES.
fn list_dir(root: &Root, out: &Out, id: u32, rel: &[u8]) -> Result<(), ProtoError> {
    let names = if rel.is_empty() {
        root.list(rel)
    } else {
        match proto::check_relative(rel) {
            Ok(parts) if beneath::is_own(parts[0]) => Ok(None),
            Ok(_) => root.list(rel),
            Err(e) => Err(e),
        }
    };
    match names {
        Ok(Some(names)) => {
            let chunks: Vec<&[(u8, Vec<u8>)]> = names.chunks(proto::LISTING_NAMES).collect();
            if chunks.is_empty() {
                return send_frame(
                    out,
                    proto::T_LISTING,
                    &proto::encode_listing(id, proto::LISTING_LAST, &[]),
                    false,
                )
                .map_err(Into::into);
            }
            for (i, c) in chunks.iter().enumerate() {
                let st = if i + 1 == chunks.len() {
                    proto::LISTING_LAST
                } else {
                    proto::LISTING_MORE
                };
                send_frame(
                    out,
                    proto::T_LISTING,
                    &proto::encode_listing(id, st, c),
                    false,
                )?;
            }
            Ok(())
        }
        Ok(None) => send_frame(
            out,
            proto::T_LISTING,
            &proto::encode_listing(id, proto::LISTING_NONE, &[]),
            false,
        )
        .map_err(Into::into),
        // The directory cannot be read: nothing in it is deleted.
        Err(why) => Err(ProtoError::Local(why)),
    }
}

enum Entry {
    Reply(Reply),
    Dir(DirDone),
    /// A file to receive, with the old file's block hashes when it replaces one (delta).
    File(Open, Box<VFile>, Option<Vec<[u8; 32]>>),
}

/// What to do with one FILE frame: make a directory, symlink, special file or hard link, skip
/// a file that is already there, or open its partial (a dry run only answers). An `Err`
/// refuses this entry alone.
fn entry(
    root: &Root,
    opts: &RecvOptions,
    sess: &Session,
    summary: &Mutex<RecvSummary>,
    h: &FileHeader,
    open_blocks: u64,
) -> Result<Entry, String> {
    let parts = proto::check_relative(&h.path)?;
    if beneath::is_own(parts[0]) {
        return Err(format!(
            "{} is the receiver's own directory",
            proto::show(parts[0])
        ));
    }
    let name = parts[parts.len() - 1];
    let (attrs, refused) = opts.policy.filter(&h.attrs, h.mode);
    summary.lock().expect("lock").attrs_refused += refused;
    let mode = opts.policy.mode(h.mode);
    let mtime = (h.mtime_s, h.mtime_ns);
    let special = match h.kind {
        proto::KIND_FIFO => Some(rustix::fs::FileType::Fifo),
        proto::KIND_SOCKET => Some(rustix::fs::FileType::Socket),
        proto::KIND_CHAR => Some(rustix::fs::FileType::CharacterDevice),
        proto::KIND_BLOCK => Some(rustix::fs::FileType::BlockDevice),
        _ => None,
    };
    if matches!(h.kind, proto::KIND_CHAR | proto::KIND_BLOCK) && !opts.devices {
        return Err("a device node (this receiver makes none: recv --devices)".into());
    }
    if sess.dry() {
        return dry_entry(root, sess, summary, h, &parts, special, mode, &attrs);
    }
    let parent = root.parent(&parts)?;
    match h.kind {
        proto::KIND_DIR => {
            root.make_dir(&parent, name, &h.path)?;
            summary.lock().expect("lock").dirs += 1;
            Ok(Entry::Dir(DirDone {
                rel: h.path.clone(),
                mode,
                attrs,
                mtime,
            }))
        }
        proto::KIND_SYMLINK => {
            if h.target.is_empty() || h.target.contains(&0) {
                return Err("an empty symlink target".into());
            }
            let problems =
                root.make_symlink(&parent, name, &h.path, &h.target, attrs.owner, mtime)?;
            let mut s = summary.lock().expect("lock");
            s.attr_problems.extend(problems);
            s.symlinks += 1;
            Ok(Entry::Reply(Reply::Made))
        }
        proto::KIND_HARDLINK => {
            let (tparent, tname, dev_ino) = link_target(root, sess, h)?;
            let same = |a: Option<rustix::fs::Stat>, b: Option<rustix::fs::Stat>| matches!((a, b), (Some(a), Some(b)) if a.st_ino == b.st_ino && a.st_dev == b.st_dev);
            if same(root.stat(&tparent, &tname), root.stat(&parent, name)) {
                summary.lock().expect("lock").skipped += 1;
                return Ok(Entry::Reply(Reply::Skipped));
            }
            root.make_hardlink(&tparent, &tname, dev_ino, &parent, name, &h.path)?;
            summary.lock().expect("lock").hardlinks += 1;
            Ok(Entry::Reply(Reply::Made))
        }
        _ if special.is_some() => {
            let kind = special.expect("matched");
            let rdev = if matches!(h.kind, proto::KIND_CHAR | proto::KIND_BLOCK) {
                h.size
            } else {
                0
            };
            let problems =
                root.make_special(&parent, name, &h.path, kind, rdev, mode, attrs.owner, mtime)?;
            let mut s = summary.lock().expect("lock");
            s.attr_problems.extend(problems);
            s.specials += 1;
            Ok(Entry::Reply(Reply::Made))
        }
        _ if h.block_size == 0 => {
            quick_unhashed(root, sess, summary, h, &parent, name, mode, &attrs)
        }
        _ => {
            h.check_blocks()?;
            let blocks = h.blocks();
            if open_blocks + blocks > proto::MAX_OPEN_BLOCKS && open_blocks > 0 {
                return Err(format!(
                    "over the receiver's limit of {} blocks in flight",
                    proto::MAX_OPEN_BLOCKS
                ));
            }
            // Already here, and verified from the device: skip it. A regular file of other
            // contents under the name offers its blocks (read from the device) to a delta.
            let mut old = None;
            let record = sess
                .record(root, &h.path)
                .filter(|r| r.block == u64::from(h.block_size));
            if let Some(st) = root.stat(&parent, name) {
                let regular = rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::RegularFile;
                let as_sent = as_sent(&st, h, mode, &attrs);
                let delta = regular && !sess.o.has(proto::OPT_WHOLE_FILE) && st.st_size > 0;
                // --quick: a record of this very file (same inode, size and times, ctime
                // included) written within the age given stands in for reading it.
                let known = record.as_ref().filter(|r| regular && r.same_file(&st));
                if let Some(r) = known {
                    if as_sent && r.hash == h.hash {
                        root.remove_partial(&h.path);
                        sess.note_landed(&h.path, (st.st_dev, st.st_ino));
                        summary.lock().expect("lock").trusted += 1;
                        return Ok(Entry::Reply(Reply::Trusted(r.at)));
                    }
                    if let (true, Some(hashes), Some(f)) =
                        (delta, &r.blocks, root.open_file(&parent, name))
                    {
                        old = Some((Arc::new(f), st.st_size as u64, hashes.clone()));
                    }
                }
                if (as_sent || delta) && old.is_none() {
                    if let Some(f) = root.open_file(&parent, name) {
                        let size = st.st_size as u64;
                        // A skip proves the file from the device; a delta's old blocks need no
                        // proof (each one copied is read back from the device in the new file
                        // and checked against the sender's hash), so they are read as they come.
                        let bs = u64::from(h.block_size);
                        let hashes = if as_sent {
                            device_blocks(&f, size, bs)
                        } else {
                            crate::send::block_hashes(&f, size, h.block_size)
                        };
                        if let Ok(hashes) = hashes {
                            if as_sent && crate::send::hash_of_list(&hashes) == h.hash {
                                // A partial or progress left beside it is stale: a run killed
                                // after landing the file and before removing its progress.
                                root.remove_partial(&h.path);
                                sess.note_record(
                                    &h.path,
                                    Record::of(&st, u64::from(h.block_size), h.hash, &hashes),
                                );
                                sess.note_landed(&h.path, (st.st_dev, st.st_ino));
                                summary.lock().expect("lock").skipped += 1;
                                return Ok(Entry::Reply(Reply::Skipped));
                            }
                            if delta {
                                old = Some((Arc::new(f), size, hashes));
                            }
                        }
                    }
                }
            }
            let (file, existed) = root.open_partial(&h.path)?;
            let resumed = if existed {
                root.read_progress(&h.path)
                    .and_then(|t| parse_progress(&t, h))
            } else {
                None
            };
            let shown = || format!("{}/{}", opts.dir.display(), proto::show(&h.path));
            if resumed.is_none() {
                file.set_len(0)
                    .map_err(|e| format!("{}: cannot truncate its partial: {e}", shown()))?;
            }
            // Room for it? (ENOSPC found now, not after most of the file is written.)
            // (A filesystem that reports no size at all, such as ramfs, is not checked.)
            if let Some(vfs) = rustix::fs::fstatvfs(&file).ok().filter(|v| v.f_blocks > 0) {
                let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
                let have = file.metadata().map(|m| m.len()).unwrap_or(0);
                if h.size.saturating_sub(have) > free {
                    root.remove_partial(&h.path);
                    return Err(format!(
                        "needs {} bytes; the filesystem has {free} free",
                        h.size
                    ));
                }
            }
            file.set_len(h.size)
                .map_err(|e| format!("{}: cannot size its partial: {e}", shown()))?;
            let file = Arc::new(file);
            let fresh = resumed.is_none();
            let finished = Arc::new(AtomicBool::new(false));
            #[allow(
                clippy::cast_possible_truncation,
                reason = "at most MAX_BLOCKS: check_blocks passed above"
            )]
            let nblocks = blocks as usize;
            let verified = resumed.unwrap_or_else(|| vec![false; nblocks]);
            let resumed_any = verified.iter().any(|&v| v);
            let (old_file, old_hashes) = match old {
                Some((f, size, hashes)) => (Some((f, size)), Some(hashes)),
                None => (None, None),
            };
            let o = Open {
                file: Arc::clone(&file),
                size: h.size,
                bs: u64::from(h.block_size),
                blocks,
                fresh,
                written: vec![0; nblocks.div_ceil(8)],
                dead: false,
                finished: Arc::clone(&finished),
                shown: proto::show(&h.path),
                old: old_file,
            };
            let v = VFile {
                id: h.id,
                rel: h.path.clone(),
                name: name.to_vec(),
                parent,
                file,
                size: h.size,
                bs: u64::from(h.block_size),
                mode,
                mtime,
                hash: h.hash,
                attrs,
                hashes: vec![[0; 32]; nblocks],
                verified_at_progress: verified.iter().filter(|&&v| v).count(),
                verified,
                resumed: resumed_any,
                outstanding: BTreeMap::new(),
                attrs_set: false,
                abandoned: false,
                finished,
            };
            Ok(Entry::File(o, Box::new(v), old_hashes))
        }
    }
}

/// A `--quick` file sent unhashed (block size 0): trusted when this receiver's record vouches
/// for the file under the name (young enough, same inode, size and times) and it is as sent
/// (size, mtime, owner, mode); otherwise the sender is asked to hash it and offer it again.
#[allow(clippy::too_many_arguments)]
fn quick_unhashed(
    root: &Root,
    sess: &Session,
    summary: &Mutex<RecvSummary>,
    h: &FileHeader,
    parent: &OwnedFd,
    name: &[u8],
    mode: u32,
    attrs: &Attrs,
) -> Result<Entry, String> {
    if !sess.o.has(proto::OPT_QUICK) {
        return Err("a file sent without its hash (only a --quick session may)".into());
    }
    let trusted = root.stat(parent, name).and_then(|st| {
        let dev_ino = (st.st_dev, st.st_ino);
        if !as_sent(&st, h, mode, attrs) {
            return None;
        }
        sess.record(root, &h.path)
            .filter(|r| r.same_file(&st))
            .map(|r| (r, dev_ino))
    });
    Ok(Entry::Reply(match trusted {
        Some((r, dev_ino)) => {
            root.remove_partial(&h.path);
            sess.note_landed(&h.path, dev_ino);
            summary.lock().expect("lock").trusted += 1;
            Reply::Trusted(r.at)
        }
        None => Reply::HashFirst,
    }))
}

/// The skip rule's quick part: a regular file of the size and mtime sent, with the owner,
/// mode and link count this receiver would give it (what stands under the name is then
/// proved from the device, or trusted from a record, or, in a dry run, taken as it is).
fn as_sent(st: &rustix::fs::Stat, h: &FileHeader, mode: u32, attrs: &Attrs) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        && st.st_size as u64 == h.size
        && st.st_mtime == h.mtime_s
        && u32::try_from(st.st_mtime_nsec) == Ok(h.mtime_ns)
        && owned_as(st, mode, attrs)
}

/// Whether a file's owner, mode and link count are those this receiver would give it (so
/// that a skip leaves nothing different from a landing).
fn owned_as(st: &rustix::fs::Stat, mode: u32, attrs: &Attrs) -> bool {
    st.st_nlink == 1
        && st.st_mode & 0o7777 == mode
        && st.st_uid
            == attrs
                .owner
                .map_or(rustix::process::geteuid().as_raw(), |o| o.0)
        && attrs.owner.is_none_or(|o| st.st_gid == o.1)
}

/// A hard link's target: its directory, its name, and the device and inode that landed.
type LinkTarget = (Arc<OwnedFd>, Vec<u8>, (u64, u64));

/// A hard link's target: an entry of this session that landed (or was there), opened
/// beneath DIR.
fn link_target(root: &Root, sess: &Session, h: &FileHeader) -> Result<LinkTarget, String> {
    let tparts = proto::check_relative(&h.target)?;
    let Some(&dev_ino) = sess.landed.lock().expect("lock").get(&h.target) else {
        return Err(format!(
            "its link target {} did not land in this session",
            proto::show(&h.target)
        ));
    };
    let tparent = root.parent(&tparts)?;
    Ok((tparent, tparts[tparts.len() - 1].to_vec(), dev_ino))
}

/// A dry run's answer for one entry: what is there already (1), or what would be sent or
/// made (5). Nothing is changed; a file is compared by rsync's quick check (size, mtime,
/// owner and mode), not read.
#[allow(clippy::too_many_arguments)]
fn dry_entry(
    root: &Root,
    sess: &Session,
    summary: &Mutex<RecvSummary>,
    h: &FileHeader,
    parts: &[&[u8]],
    special: Option<rustix::fs::FileType>,
    mode: u32,
    attrs: &Attrs,
) -> Result<Entry, String> {
    use rustix::fs::FileType;
    let name = parts[parts.len() - 1];
    let parent = root.parent_existing(parts);
    let st = parent
        .as_ref()
        .and_then(|p| rustix::fs::statat(p, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok());
    let kind = st.as_ref().map(|st| FileType::from_raw_mode(st.st_mode));
    let there = match h.kind {
        proto::KIND_DIR => kind == Some(FileType::Directory),
        proto::KIND_SYMLINK => {
            kind == Some(FileType::Symlink)
                && parent
                    .as_ref()
                    .and_then(|p| rustix::fs::readlinkat(p, name, Vec::new()).ok())
                    .is_some_and(|t| t.as_bytes() == h.target.as_slice())
        }
        proto::KIND_HARDLINK => {
            if !sess.landed.lock().expect("lock").contains_key(&h.target) {
                return Err(format!(
                    "its link target {} would not land",
                    proto::show(&h.target)
                ));
            }
            let tparts = proto::check_relative(&h.target)?;
            let t = root.parent_existing(&tparts).and_then(|p| {
                rustix::fs::statat(
                    &p,
                    tparts[tparts.len() - 1],
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok()
            });
            matches!((t, st.as_ref()), (Some(t), Some(s)) if t.st_ino == s.st_ino && t.st_dev == s.st_dev)
        }
        proto::KIND_FILE => {
            h.check_blocks()?;
            sess.note_landed(&h.path, (0, 0));
            st.as_ref().is_some_and(|st| as_sent(st, h, mode, attrs))
        }
        _ => {
            kind == special
                && (special != Some(FileType::CharacterDevice)
                    && special != Some(FileType::BlockDevice)
                    || st.as_ref().is_some_and(|st| st.st_rdev == h.size))
        }
    };
    let mut s = summary.lock().expect("lock");
    if there {
        s.skipped += 1;
        Ok(Entry::Reply(Reply::Skipped))
    } else {
        s.would += 1;
        Ok(Entry::Reply(Reply::Would))
    }
}

/// The BLAKE3 hash of every block of a file, read from the device.
fn device_blocks(f: &File, size: u64, bs: u64) -> std::io::Result<Vec<[u8; 32]>> {
    // One fdatasync covers the whole file; then each block is evicted and read back.
    f.sync_data()?;
    #[allow(
        clippy::cast_possible_truncation,
        reason = "a checked FILE frame's block size: at most MAX_BLOCK (16 MiB)"
    )]
    let mut buf = vec![0u8; bs as usize];
    let mut out = Vec::new();
    let mut off = 0;
    while off < size {
        let n = proto::block_len(size, off, bs);
        verify::read_back(f, off, &mut buf[..n])?;
        out.push(*blake3::hash(&buf[..n]).as_bytes());
        off += n as u64;
    }
    Ok(out)
}

/// Hash, from the device, the blocks a file resumed with (their hashes are not known here).
fn rehash_resumed(f: &mut VFile) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for i in 0..f.hashes.len() {
        if f.hashes[i] == [0; 32] {
            let off = i as u64 * f.bs;
            buf.resize(proto::block_len(f.size, off, f.bs), 0);
            verify::read_back(&f.file, off, &mut buf)?;
            f.hashes[i] = *blake3::hash(&buf).as_bytes();
        }
    }
    Ok(())
}

/// The verified blocks as ranges `[first, end)`, at most [`proto::MAX_RANGES`] of them.
fn verified_ranges(v: &[bool]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() && out.len() < proto::MAX_RANGES {
        if v[i] {
            let a = i;
            while i < v.len() && v[i] {
                i += 1;
            }
            out.push((a as u64, i as u64));
        } else {
            i += 1;
        }
    }
    out
}

struct Verifier {
    root: Arc<Root>,
    out: Out,
    summary: Arc<Mutex<RecvSummary>>,
    opts: RecvOptions,
    sess: Arc<Session>,
    files: HashMap<u32, Box<VFile>>,
    dirty: Vec<Arc<OwnedFd>>,
}

impl Verifier {
    fn run(mut self, rx: mpsc::Receiver<Msg>) -> Result<(), String> {
        let mut closed = false;
        while !closed {
            let Ok(first) = rx.recv() else { break };
            let mut msgs = vec![first];
            loop {
                match rx.try_recv() {
                    Ok(m) => msgs.push(m),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            let mut done: Vec<(u32, u8, String)> = Vec::new();
            for m in msgs {
                match m {
                    Msg::Open(v) => {
                        self.files.insert(v.id, v);
                    }
                    Msg::Block { id, index, hash } => {
                        if let Some(f) = self.files.get_mut(&id) {
                            f.outstanding.insert(index, hash);
                        }
                    }
                    Msg::End { id } => {
                        if let Some(f) = self.files.get_mut(&id) {
                            f.abandoned = true;
                        }
                    }
                    Msg::Fail { id, why, remove } => {
                        if let Some(f) = self.files.remove(&id) {
                            f.finished.store(true, Ordering::Release);
                            if remove {
                                self.root.remove_partial(&f.rel);
                            }
                            self.fail(&f, &why);
                            done.push((id, proto::DONE_FAILED, why));
                        }
                    }
                }
            }
            self.batch(&mut done)?;
            let mut o = self.out.lock().expect("lock");
            for (id, status, why) in &done {
                proto::write_frame(
                    &mut *o,
                    proto::T_FILE_DONE,
                    &proto::encode_done(*id, *status, why),
                )
                .map_err(|e| e.to_string())?;
            }
            o.flush().map_err(|e| e.to_string())?;
        }
        // The session ended: keep what was verified of unfinished files for the next run.
        for f in self.files.values() {
            if f.verified.len() > 1 && f.verified_count() > 0 {
                let _ = self.root.write_progress(&f.rel, &f.progress_text());
            }
        }
        Ok(())
    }

    fn fail(&self, f: &VFile, why: &str) {
        self.summary
            .lock()
            .expect("lock")
            .failed
            .push(format!("{}: {why}", proto::show(&f.rel)));
    }

    /// One batch: attributes, one durability call, read-back of every written block, renames,
    /// one durability call for the renames. Appends FILE_DONE answers to `done`.
    fn batch(&mut self, done: &mut Vec<(u32, u8, String)>) -> Result<(), String> {
        let verify = self.opts.verify;
        let mut ids: Vec<u32> = self
            .files
            .iter()
            .filter(|(_, f)| !f.outstanding.is_empty() || f.all_written() || f.abandoned)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        if ids.is_empty() {
            return Ok(());
        }
        // 1. Attributes of files whose blocks are all written, through the descriptor.
        let mut problems = Vec::new();
        let mut touched = 0usize;
        for id in &ids {
            let f = self.files.get_mut(id).expect("listed");
            if f.all_written() && !f.attrs_set && !f.abandoned {
                for p in beneath::apply_to_file(&f.file, &f.attrs, f.mode, f.mtime) {
                    problems.push(format!("{}: {p}", proto::show(&f.rel)));
                }
                f.attrs_set = true;
            }
            if !f.outstanding.is_empty() || f.attrs_set {
                touched += 1;
            }
        }
        // 2. One durability call for the batch.
        let t0 = std::time::Instant::now();
        let mut syncs = 0u64;
        if touched >= SYNCFS_FILES {
            self.root
                .syncfs()
                .map_err(|e| format!("cannot sync {}: {e}", self.opts.dir.display()))?;
            syncs += 1;
        } else {
            for id in &ids {
                let f = &self.files[id];
                let r = if f.attrs_set {
                    f.file.sync_all()
                } else if verify && !f.outstanding.is_empty() {
                    f.file.sync_data()
                } else {
                    continue;
                };
                r.map_err(|e| format!("cannot sync a partial of {}: {e}", proto::show(&f.rel)))?;
                syncs += 1;
            }
        }
        let durable = t0.elapsed();
        // 3. Read every written block back from the device.
        let mut results = Vec::new();
        let (mut ok_n, mut bad_n, mut direct, mut ns_evict, mut ns_read) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut buf = Vec::new();
        for id in &ids {
            let f = self.files.get_mut(id).expect("listed");
            let outstanding = std::mem::take(&mut f.outstanding);
            for (index, want) in outstanding {
                let off = index * f.bs;
                let n = proto::block_len(f.size, off, f.bs);
                let ok = if verify {
                    #[cfg(test)]
                    if let Some(h) = &self.opts.hook {
                        h(&f.file, off, n);
                    }
                    buf.resize(n, 0);
                    let (how, t) = verify::read_back(&f.file, off, &mut buf).map_err(|e| {
                        format!(
                            "cannot read {}/{} back from the device: {e} (a filesystem that keeps no separate device copy, such as tmpfs, cannot be verified)",
                            self.opts.dir.display(),
                            proto::show(&f.rel)
                        )
                    })?;
                    let th = std::time::Instant::now();
                    let ok = *blake3::hash(&buf).as_bytes() == want;
                    ns_evict += crate::nanos(t.evict);
                    ns_read += crate::nanos(t.read_back + th.elapsed());
                    direct += u64::from(how == verify::ReadBack::Direct);
                    ok
                } else {
                    true
                };
                if ok {
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "a block of this file: index < blocks <= MAX_BLOCKS (checked on arrival)"
                    )]
                    let i = index as usize;
                    f.verified[i] = true;
                    f.hashes[i] = want;
                    ok_n += 1;
                } else {
                    // It comes again; its attributes are set again after that write.
                    f.attrs_set = false;
                    bad_n += 1;
                }
                proto::write_frame(
                    &mut results,
                    proto::T_BLOCK_RESULT,
                    &proto::encode_result(*id, index, ok),
                )
                .map_err(|e| e.to_string())?;
            }
        }
        if !results.is_empty() {
            let mut o = self.out.lock().expect("lock");
            o.write_all(&results).map_err(|e| e.to_string())?;
        }
        // 4. Files whose every block verified go under their names.
        let mut landed = Vec::new();
        let mut records = Vec::new();
        for id in &ids {
            let f = &self.files[id];
            let all = f.verified.iter().all(|&v| v);
            if all && f.attrs_set && f.outstanding.is_empty() {
                let mut f = self.files.remove(id).expect("listed");
                f.finished.store(true, Ordering::Release);
                // Blocks verified in an earlier run were checked against that run's hashes:
                // read them back from the device now, so the file hash covers every block.
                let resumed_ok = !f.resumed || rehash_resumed(&mut f).is_ok();
                if f.size > 0 && (!resumed_ok || crate::send::hash_of_list(&f.hashes) != f.hash) {
                    self.root.remove_partial(&f.rel);
                    let why = if f.resumed {
                        "the blocks kept from an earlier run do not match the file (discarded; send it again)"
                    } else {
                        "the source changed while it was sent (not landed)"
                    }
                    .to_string();
                    self.fail(&f, &why);
                    done.push((*id, proto::DONE_FAILED, why));
                    continue;
                }
                match self.root.land(
                    &beneath::Root::partial_name(&f.rel),
                    &f.parent,
                    &f.name,
                    &f.rel,
                ) {
                    Ok(()) => {
                        self.root.remove_progress(&f.rel);
                        let dev_ino = {
                            use std::os::unix::fs::MetadataExt;
                            f.file.metadata().map_or((0, 0), |m| (m.dev(), m.ino()))
                        };
                        self.sess.note_landed(&f.rel, dev_ino);
                        if self.sess.o.has(proto::OPT_QUICK) {
                            records.push((
                                f.rel.clone(),
                                Arc::clone(&f.parent),
                                f.name.clone(),
                                f.bs,
                                f.hash,
                                std::mem::take(&mut f.hashes),
                            ));
                        }
                        if !self.dirty.iter().any(|d| Arc::ptr_eq(d, &f.parent)) {
                            self.dirty.push(Arc::clone(&f.parent));
                        }
                        landed.push(*id);
                    }
                    Err(why) => {
                        self.root.remove_partial(&f.rel);
                        self.fail(&f, &why);
                        done.push((*id, proto::DONE_FAILED, why));
                    }
                }
            } else if f.abandoned && f.outstanding.is_empty() {
                let f = self.files.remove(id).expect("listed");
                f.finished.store(true, Ordering::Release);
                if f.verified.len() > 1 {
                    let _ = self.root.write_progress(&f.rel, &f.progress_text());
                }
                let why = "the sender gave up on some block (kept as a partial for a later run)"
                    .to_string();
                self.fail(&f, &why);
                done.push((*id, proto::DONE_KEPT_PARTIAL, why));
            } else if f.verified.len() as u64 >= PROGRESS_BLOCKS
                && f.verified_count() >= f.verified_at_progress + 8
            {
                let f = self.files.get_mut(id).expect("listed");
                f.verified_at_progress = f.verified_count();
                let _ = self.root.write_progress(&f.rel, &f.progress_text());
            }
        }
        // 5. The renames made durable before anyone is told.
        if !landed.is_empty() {
            // A directory made since the last `syncfs` is durable only with it.
            if self.dirty.len() >= SYNCFS_FILES || self.root.take_dirs_made() {
                self.root
                    .syncfs()
                    .map_err(|e| format!("cannot sync {}: {e}", self.opts.dir.display()))?;
                syncs += 1;
            } else {
                for d in &self.dirty {
                    rustix::fs::fsync(&**d).map_err(|e| {
                        format!(
                            "cannot sync a directory of {}: {e}",
                            self.opts.dir.display()
                        )
                    })?;
                    syncs += 1;
                }
            }
            self.dirty.clear();
            for id in landed {
                done.push((id, proto::DONE_LANDED, String::new()));
            }
            // --quick: what landed, as it is on the device now, for a later run to trust.
            for (rel, parent, name, bs, hash, hashes) in records {
                if let Some(st) = self.root.stat(&parent, &name) {
                    self.sess
                        .note_record(&rel, Record::of(&st, bs, hash, &hashes));
                }
            }
        }
        let landed_n = done.iter().filter(|d| d.1 == proto::DONE_LANDED).count() as u64;
        let mut s = self.summary.lock().expect("lock");
        s.files += landed_n;
        s.blocks_verified += ok_n;
        s.blocks_mismatched += bad_n;
        s.direct_reads += direct;
        s.syncs += syncs;
        s.ns_durable += crate::nanos(durable);
        s.ns_evict += ns_evict;
        s.ns_read_back_hash += ns_read;
        s.attr_problems.extend(problems);
        Ok(())
    }
}
