//! The sending side: walks the paths, hashes each file's blocks, and keeps a window of many
//! files in flight (headers sent ahead, blocks of every file whose reply has come, results read
//! on their own thread as they arrive); a block the receiver reports as mismatched is read and
//! sent again (only that block), up to the retry limit. A file that cannot be read, that
//! vanishes, or that changes while it is sent fails alone; the rest goes on. With
//! `verify_source`, each block is also evicted from the sender's page cache and read back from
//! its device before it is sent (RIVA's unrecoverable-read-error case).

use crate::proto::{self, Attrs, FileHeader, ProtoError, Reply};
use crate::seal;
use crate::verify;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
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
    /// Files in flight at once.
    pub window_files: usize,
    /// Bytes of blocks in flight (sent, not yet reported) and of small files held to send.
    pub window_bytes: u64,
    /// Write a manifest here (FORMAT.md §5) once everything is sent.
    pub manifest: Option<PathBuf>,
    /// Open a sealed session with this key (`--key-file`); a receiver that does not prove it
    /// is refused.
    pub key: Option<[u8; 32]>,
    /// Send owners (uid, gid) and extended attributes.
    pub owner: bool,
    pub xattrs: bool,
    /// At most this many bytes a second of file data and headers on the wire, on average
    /// since the start (`--bwlimit`, as rsync's); `None`: as fast as it goes.
    pub bwlimit: Option<u64>,
    /// Delete on the receiver what the source does not have, after everything is verified
    /// (`--delete`; the receiver must run with `--allow-delete`).
    pub delete: bool,
    /// Change nothing: list what would be sent and deleted (`--dry-run`).
    pub dry_run: bool,
    /// Compress blocks with zstd at this level (`-z`).
    pub compress: Option<i32>,
    /// Trust the receiver's verification records younger than this many seconds (`--quick`).
    pub quick: Option<u64>,
    /// Never send a changed file as a delta of the old one (`--whole-file`).
    pub whole_file: bool,
    /// Send hard links as links (`-H`).
    pub hard_links: bool,
    /// Send fifos and sockets (`--specials`) and device nodes (`--devices`).
    pub specials: bool,
    pub devices: bool,
    /// Send owners as numbers only, no names (`--numeric-ids`).
    pub numeric_ids: bool,
    /// Include/exclude rules, rsync's basic syntax.
    pub filters: crate::filter::Filters,
    /// The receiver daemon's module (`--module`).
    pub module: Option<String>,
    /// Give up when the receiver sends nothing for this long while an answer is due
    /// (`--timeout`; `None`: wait for ever).
    pub timeout: Option<std::time::Duration>,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            block_size: 256 << 10,
            retries: 3,
            verify_source: false,
            window_files: 256,
            window_bytes: 32 << 20,
            manifest: None,
            key: None,
            owner: false,
            xattrs: false,
            bwlimit: None,
            delete: false,
            dry_run: false,
            compress: None,
            quick: None,
            whole_file: false,
            hard_links: false,
            specials: false,
            devices: false,
            numeric_ids: false,
            filters: crate::filter::Filters::new(),
            module: None,
            timeout: Some(std::time::Duration::from_secs(600)),
        }
    }
}

/// What a send did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SendSummary {
    /// Regular files landed under their names, verified on the receiver's device.
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Files already there, verified from the receiver's device.
    pub skipped: u64,
    /// Files already there, trusted from the receiver's verification records (`--quick`).
    pub trusted: u64,
    /// Fifos, sockets and device nodes made.
    pub specials: u64,
    /// Hard links made.
    pub hardlinks: u64,
    /// Entries deleted on the receiver (`--delete`).
    pub deleted: Vec<String>,
    /// Why `--delete` deleted nothing, when it did not run.
    pub delete_skipped: Option<String>,
    /// Directories `--delete` kept because they hold names the filters exclude.
    pub delete_kept: Vec<String>,
    /// A dry run: what would be sent or made, and deleted.
    pub would_send: Vec<String>,
    pub would_delete: Vec<String>,
    /// File data in blocks (before compression), and the bytes those blocks took on the wire.
    pub bytes_sent: u64,
    pub wire_bytes: u64,
    pub blocks_sent: u64,
    /// Blocks the receiver copied from the old file under the name (a delta), not sent.
    pub blocks_copied: u64,
    /// Blocks sent again because the receiver's read-back did not match.
    pub blocks_retried: u64,
    /// Entries that did not land, each with its path and why.
    pub failed: Vec<String>,
    /// Special files (fifos, sockets, devices), not sent.
    pub not_sent: Vec<String>,
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

/// One entry to send: where it is here, its name there. A regular file is opened as `remote`
/// beneath `top` (the directory that holds the path argument it came from) with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, `O_NOFOLLOW` and `O_NONBLOCK`: a symlink or
/// fifo swapped in after the walk (by a user who can write the tree) is never read.
struct Entry {
    top: std::sync::Arc<rustix::fd::OwnedFd>,
    local: PathBuf,
    remote: Vec<u8>,
    /// `-H`: another link of a file sent earlier in this session, under this path.
    link: Option<Vec<u8>>,
}

/// The walk of the path arguments: the entries to send (filtered, links found), and each
/// directory whose names were all read, with those names (for `--delete`).
struct Walk<'a> {
    opts: &'a SendOptions,
    out: Vec<Entry>,
    /// `-H`: (device, inode) of files with more than one link → the first path sent.
    seen: HashMap<(u64, u64), Vec<u8>>,
    /// Paths other entries link to.
    link_targets: HashSet<Vec<u8>>,
    listed: Vec<(Vec<u8>, HashSet<Vec<u8>>)>,
}

/// `remote/name` (`remote` empty: DIR itself, the name alone).
fn join(remote: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = remote.to_vec();
    if !v.is_empty() {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

impl Walk<'_> {
    /// Every entry under `path` (sorted by name) that the filters keep; a directory that
    /// cannot be listed fails alone.
    fn walk(
        &mut self,
        top: &std::sync::Arc<rustix::fd::OwnedFd>,
        path: &Path,
        remote: Vec<u8>,
        s: &mut SendSummary,
    ) {
        let m = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => {
                s.failed.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        if self.opts.filters.excluded(&remote, m.is_dir()) {
            return;
        }
        let mut link = None;
        if self.opts.hard_links && m.is_file() && m.nlink() > 1 {
            match self.seen.get(&(m.dev(), m.ino())) {
                Some(first) => {
                    self.link_targets.insert(first.clone());
                    link = Some(first.clone());
                }
                None => {
                    self.seen.insert((m.dev(), m.ino()), remote.clone());
                }
            }
        }
        self.out.push(Entry {
            top: std::sync::Arc::clone(top),
            local: path.to_path_buf(),
            remote: remote.clone(),
            link,
        });
        if m.is_dir() {
            self.children(top, path, &remote, s);
        }
    }

    /// The entries of directory `path`, named `remote/NAME` (`remote` empty: DIR itself).
    fn children(
        &mut self,
        top: &std::sync::Arc<rustix::fd::OwnedFd>,
        path: &Path,
        remote: &[u8],
        s: &mut SendSummary,
    ) {
        let names: Result<Vec<OsString>, _> =
            fs::read_dir(path).and_then(|d| d.map(|e| e.map(|e| e.file_name())).collect());
        match names {
            Ok(mut names) => {
                names.sort();
                if self.opts.delete {
                    self.listed.push((
                        remote.to_vec(),
                        names.iter().map(|n| n.as_bytes().to_vec()).collect(),
                    ));
                }
                for n in names {
                    if remote.is_empty() && crate::beneath::is_own(n.as_bytes()) {
                        // A received directory sent on: its receiver's own state is not data
                        // (and the next receiver keeps its own under that name).
                        s.not_sent.push(format!(
                            "{}: a receiver's own directory",
                            path.join(&n).display()
                        ));
                        continue;
                    }
                    self.walk(top, &path.join(&n), join(remote, n.as_bytes()), s);
                }
            }
            Err(e) => s
                .failed
                .push(format!("{}: cannot list: {e}", path.display())),
        }
    }

    /// What directory `dir` holds, each entry named as it is within it (a path argument with
    /// a trailing slash, rsync's rule: `src/` lands its files in DIR, `src` lands as DIR/src).
    fn contents_of(&mut self, dir: &Path, s: &mut SendSummary) {
        let fd = match rustix::fs::open(
            dir,
            rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => std::sync::Arc::new(fd),
            Err(e) => {
                s.failed
                    .push(format!("{}: {}", dir.display(), std::io::Error::from(e)));
                return;
            }
        };
        self.children(&fd, dir, b"", s);
    }
}

/// The name a path argument lands under: its last component (a symlink argument keeps its own
/// name, as `cp -r` and rsync do); `.` and `..` are named after the directory they stand for.
fn top_name(p: &Path) -> Vec<u8> {
    p.file_name()
        .map(|n| n.as_bytes().to_vec())
        .or_else(|| {
            p.canonicalize()
                .ok()
                .and_then(|c| c.file_name().map(|n| n.as_bytes().to_vec()))
        })
        .unwrap_or_else(|| p.as_os_str().as_bytes().to_vec())
}

/// What the sender's loop waits for: a frame from the receiver (read on its own thread), or an
/// entry prepared (stat, opened, hashed) by the preparer thread.
enum Ev {
    Frame(Result<(u8, Vec<u8>), ProtoError>),
    Prepared(Prepared),
    /// The preparer has been through every entry.
    PrepDone,
}

/// One entry from the preparer: in flight next, or failed / not sent (with why).
struct Prepared {
    item: Option<Box<(Flight, FileHeader)>>,
    /// The path of an entry that failed (links to it fail too).
    path: Vec<u8>,
    failed: Option<String>,
    not_sent: Option<String>,
    ns_read_hash: u64,
}

type Events = mpsc::Receiver<Ev>;

/// A directory to list for `--delete`, with the names the source has there (`None`: an
/// extraneous directory on the receiver, all of whose names are extraneous).
type ToList = (Vec<u8>, Option<HashSet<Vec<u8>>>);

/// `--delete` considers at most this many names the receiver lists (a hostile receiver's
/// endless LISTING stops there).
const MAX_DELETE_NAMES: usize = 4 << 20;

/// Entries prepared ahead of the window (each holds at most one block of a small file).
const PREPARED_AHEAD: usize = 64;

/// Open a session as the sender: the hellos and, with a key, the handshake in which both ends
/// prove it. Returns a reader of the receiver's frames (on a thread of its own) and the writer.
fn open_session(
    mut input: Box<dyn Read + Send>,
    mut output: Box<dyn Write + Send>,
    key: Option<&[u8; 32]>,
    tx: mpsc::Sender<Ev>,
) -> Result<Box<dyn Write>, ProtoError> {
    let features = features_sent(key);
    // A receiver that turns us away may close before reading our hello: its answer says why.
    let wrote = proto::write_hello(&mut output, features);
    let (features, theirs) = match (proto::read_hello(&mut input), wrote) {
        (Ok(h), _) => h,
        (Err(_), Err(e)) => return Err(e.into()),
        (Err(e), Ok(_)) => return Err(e),
    };
    let mine = proto::hello_bytes(features_sent(key));
    if features & proto::FEATURE_REFUSED != 0 {
        return Err(match proto::read_frame(&mut input) {
            Ok(Some((proto::T_ERROR, p))) => ProtoError::Peer(proto::printable(&p)),
            _ => ProtoError::Local("the receiver turned this sender away".into()),
        });
    }
    let (mut reader, writer): (Box<dyn Read + Send>, Box<dyn Write>) = match (
        features & proto::FEATURE_SEALED != 0,
        key,
    ) {
        (true, Some(k)) => {
            let (r, w) = seal::initiate(input, output, k, &mine, &theirs)?;
            (
                Box::new(r),
                Box::new(std::io::BufWriter::with_capacity(1 << 20, w)),
            )
        }
        (true, None) => {
            // A receiver that requires a key says so; an ERROR may follow its hello.
            return Err(ProtoError::Auth(
                "the receiver requires a shared key: give --key-file".into(),
            ));
        }
        (false, Some(_)) => {
            return Err(ProtoError::Auth(
                "the receiver does not prove a key, but --key-file was given: not sending to an unauthenticated receiver".into(),
            ));
        }
        (false, None) => (
            input,
            Box::new(std::io::BufWriter::with_capacity(1 << 20, output)),
        ),
    };
    // Replies come on a thread of their own, so blocks keep flowing while results arrive.
    std::thread::spawn(move || loop {
        let r = match proto::read_frame(&mut reader) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(ProtoError::Local(
                "the receiver closed the connection (it ended or was killed)".into(),
            )),
            Err(e) => Err(e),
        };
        let end = r.is_err();
        if tx.send(Ev::Frame(r)).is_err() || end {
            return;
        }
    });
    Ok(writer)
}

fn features_sent(key: Option<&[u8; 32]>) -> u32 {
    if key.is_some() {
        proto::FEATURES
    } else {
        0
    }
}

/// Send `paths` over (`input` from the receiver, `output` to it). A file lands as `DIR/NAME`,
/// a directory as `DIR/NAME/...`. `progress(bytes, blocks retried so far)` as blocks go out.
pub fn send(
    paths: &[PathBuf],
    input: impl Read + Send + 'static,
    output: impl Write + Send + 'static,
    opts: &SendOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SendSummary, SendError> {
    let mut summary = SendSummary::default();
    let mut w = Walk {
        opts,
        out: Vec::new(),
        seen: HashMap::new(),
        link_targets: HashSet::new(),
        listed: Vec::new(),
    };
    for p in paths {
        // rsync's rule: a directory given with a trailing slash sends what it holds, into DIR
        // itself (not DIR/NAME); the files are opened beneath the directory.
        if p.as_os_str().as_bytes().ends_with(b"/") && p.is_dir() {
            w.contents_of(p, &mut summary);
            continue;
        }
        // The directory that holds the argument (the argument itself may be `.` or `..`).
        let parent = match p.file_name() {
            Some(_) => p
                .parent()
                .map(Path::to_path_buf)
                .filter(|q| !q.as_os_str().is_empty()),
            None => p
                .canonicalize()
                .ok()
                .and_then(|c| c.parent().map(Path::to_path_buf)),
        }
        .unwrap_or_else(|| PathBuf::from("."));
        match rustix::fs::open(
            &parent,
            rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => w.walk(&std::sync::Arc::new(fd), p, top_name(p), &mut summary),
            Err(e) => summary
                .failed
                .push(format!("{}: {}", p.display(), std::io::Error::from(e))),
        }
    }
    let Walk {
        out: entries,
        link_targets,
        listed,
        ..
    } = w;
    let (tx, rx) = mpsc::channel();
    let mut output = open_session(
        Box::new(input),
        Box::new(output),
        opts.key.as_ref(),
        tx.clone(),
    )?;
    // What this session asks of the receiver: its first frame.
    let mut flags = 0;
    for (on, f) in [
        (opts.delete, proto::OPT_DELETE),
        (opts.dry_run, proto::OPT_DRY_RUN),
        (opts.compress.is_some(), proto::OPT_COMPRESS),
        (opts.quick.is_some(), proto::OPT_QUICK),
        (opts.whole_file, proto::OPT_WHOLE_FILE),
    ] {
        if on {
            flags |= f;
        }
    }
    let options = proto::Options {
        flags,
        quick_secs: opts.quick.unwrap_or(0),
        module: opts.module.clone().unwrap_or_default().into_bytes(),
    };
    proto::write_frame(&mut output, proto::T_OPTIONS, &options.encode()).map_err(ProtoError::Io)?;
    // The preparer stats, opens and hashes entries ahead of the window (a large file's hashing
    // overlaps the blocks of the files before it), at most PREPARED_AHEAD of them.
    let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(PREPARED_AHEAD);
    for _ in 0..PREPARED_AHEAD {
        let _ = credit_tx.send(());
    }
    {
        let opts = opts.clone();
        std::thread::spawn(move || {
            let mut names = HashMap::new();
            for e in &entries {
                if credit_rx.recv().is_err() {
                    return;
                }
                if tx
                    .send(Ev::Prepared(prepare(&opts, e, &mut names)))
                    .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(Ev::PrepDone);
        });
    }
    let mut s = Sender {
        opts,
        out: &mut output,
        summary,
        flights: BTreeMap::new(),
        free_ids: Vec::new(),
        next_id: 0,
        bytes_in_flight: 0,
        held: 0,
        open_blocks: 0,
        manifest: opts
            .manifest
            .as_ref()
            .map(|_| String::from("stripeguard-manifest 2\n")),
        progress,
        ready: VecDeque::new(),
        prep_done: false,
        credits: credit_tx,
        throttle: Throttle::new(opts.bwlimit),
        link_targets,
        resolved: HashMap::new(),
        parked: HashMap::new(),
        listed,
        zstd: match opts.compress {
            Some(level) => Some(zstd::bulk::Compressor::new(level).map_err(ProtoError::Io)?),
            None => None,
        },
    };
    let r = s.run(&rx);
    let (summary, manifest) = (s.summary, s.manifest);
    match r {
        Ok(()) => {}
        // A write failed: the receiver has usually said why before it closed; report that.
        Err(ProtoError::Io(e)) => {
            let closed = matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            );
            return Err(peer_reason(&rx)
                .map(ProtoError::Peer)
                .unwrap_or(if closed {
                    ProtoError::Local(
                        "the receiver closed the connection (it ended or was killed); what it verified is kept for a later run".into(),
                    )
                } else {
                    ProtoError::Io(e)
                })
                .into());
        }
        Err(e) => return Err(e.into()),
    }
    if let (Some(path), Some(text)) = (&opts.manifest, manifest) {
        fs::write(path, text).map_err(|e| SendError::Source {
            path: path.display().to_string(),
            source: e,
        })?;
    }
    Ok(summary)
}

/// The ERROR frame the receiver sent before it closed, if one comes within two seconds.
fn peer_reason(rx: &Events) -> Option<String> {
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(2)) {
            Ok(Ev::Frame(Ok((proto::T_ERROR, p)))) => return Some(proto::printable(&p)),
            Ok(Ev::Frame(Err(_))) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

/// A file in flight.
struct Flight {
    remote: Vec<u8>,
    kind: u8,
    file: Option<File>,
    /// A file of one block, read once (hashed and sent from memory).
    data: Option<Vec<u8>>,
    size: u64,
    bs: u64,
    hashes: Vec<[u8; 32]>,
    replied: bool,
    todo: VecDeque<u64>,
    inflight: HashSet<u64>,
    tries: HashMap<u64, u32>,
    failed: Vec<u64>,
    /// Why the file was given up on this side (it changed or vanished).
    broken: Option<String>,
    ended: bool,
    /// A delta: the old file's blocks on the receiver, by hash.
    old: Option<HashMap<[u8; 32], u64>>,
    /// `--quick`: a file sent unhashed, its header kept to send again hashed if the receiver
    /// cannot trust it.
    unhashed: Option<Box<FileHeader>>,
}

impl Flight {
    fn blocks(&self) -> u64 {
        self.hashes.len() as u64
    }
    fn held(&self) -> u64 {
        self.data.as_ref().map_or(0, |d| d.len() as u64)
    }
}

struct Sender<'a> {
    opts: &'a SendOptions,
    out: &'a mut Box<dyn Write>,
    summary: SendSummary,
    flights: BTreeMap<u32, Flight>,
    free_ids: Vec<u32>,
    next_id: u32,
    bytes_in_flight: u64,
    /// Bytes of small files read and waiting to be sent.
    held: u64,
    open_blocks: u64,
    manifest: Option<String>,
    progress: &'a mut dyn FnMut(u64, u64),
    /// Prepared entries waiting for room in the window.
    ready: VecDeque<(Flight, FileHeader)>,
    prep_done: bool,
    /// One credit back to the preparer per prepared entry taken.
    credits: mpsc::SyncSender<()>,
    /// `--bwlimit`.
    throttle: Throttle,
    /// `-H`: the paths links name, whether each landed (or was there), and the links waiting
    /// for theirs.
    link_targets: HashSet<Vec<u8>>,
    resolved: HashMap<Vec<u8>, bool>,
    parked: HashMap<Vec<u8>, Vec<(Flight, FileHeader)>>,
    /// `--delete`: the directories whose names were all read here, with those names.
    listed: Vec<(Vec<u8>, HashSet<Vec<u8>>)>,
    /// `-z`: the compression context, kept across blocks.
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

/// `--bwlimit`: frames go out at most `rate` bytes a second on average since the start (a
/// sender that fell behind catches up, as rsync's does, without bursting past the average).
struct Throttle {
    rate: Option<u64>,
    start: std::time::Instant,
    sent: u64,
}

impl Throttle {
    fn new(rate: Option<u64>) -> Throttle {
        Throttle {
            rate: rate.filter(|&r| r > 0),
            start: std::time::Instant::now(),
            sent: 0,
        }
    }

    /// `n` more bytes went out: wait until the average allows them.
    fn pass(&mut self, n: usize) {
        let Some(rate) = self.rate else { return };
        self.sent += n as u64;
        let due = std::time::Duration::from_secs_f64(self.sent as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

fn io(e: std::io::Error) -> ProtoError {
    ProtoError::Io(e)
}

impl Sender<'_> {
    fn run(&mut self, rx: &Events) -> Result<(), ProtoError> {
        loop {
            // New files, while the window has room.
            while self.flights.len() < self.opts.window_files.max(1)
                && self.bytes_in_flight + self.held < self.opts.window_bytes
            {
                let Some((f, mut h)) = self.ready.pop_front() else {
                    break;
                };
                if h.kind == proto::KIND_HARDLINK {
                    // Sent only once the file it names has landed (or was there).
                    match self.resolved.get(&h.target) {
                        Some(true) => {}
                        Some(false) => {
                            let _ = self.credits.try_send(());
                            let why =
                                format!("its link target {} did not land", proto::show(&h.target));
                            self.fail(&f.remote, why);
                            continue;
                        }
                        None => {
                            let _ = self.credits.try_send(());
                            self.parked
                                .entry(h.target.clone())
                                .or_default()
                                .push((f, h));
                            continue;
                        }
                    }
                }
                if self.open_blocks + f.blocks() > proto::MAX_OPEN_BLOCKS
                    && !self.flights.is_empty()
                {
                    self.ready.push_front((f, h));
                    break;
                }
                let _ = self.credits.try_send(());
                h.id = self.free_ids.pop().unwrap_or_else(|| {
                    self.next_id += 1;
                    self.next_id - 1
                });
                self.open_blocks += f.blocks();
                self.held += f.held();
                let frame = h.encode();
                proto::write_frame(self.out, proto::T_FILE, &frame).map_err(io)?;
                self.throttle.pass(frame.len());
                self.flights.insert(h.id, f);
            }
            self.send_blocks()?;
            if self.flights.is_empty() && self.ready.is_empty() && self.prep_done {
                // Links whose target was never sent (it failed before it was prepared).
                for (t, links) in std::mem::take(&mut self.parked) {
                    for (f, _) in links {
                        self.fail(
                            &f.remote,
                            format!("its link target {} was not sent", proto::show(&t)),
                        );
                    }
                }
                break;
            }
            self.out.flush().map_err(io)?;
            // Waiting on the preparer alone (a large file's hash) is not the receiver's silence.
            let first = if self.flights.is_empty() {
                rx.recv()
                    .map_err(|_| ProtoError::Local("the receiver closed the connection".into()))?
            } else {
                self.wait(rx)?
            };
            self.event(first)?;
            for _ in 0..4096 {
                match rx.try_recv() {
                    Ok(ev) => self.event(ev)?,
                    Err(_) => break,
                }
            }
        }
        if self.opts.delete {
            self.delete(rx)?;
        }
        proto::write_frame(self.out, proto::T_DONE, &[]).map_err(io)?;
        self.out.flush().map_err(io)?;
        loop {
            match self.wait(rx) {
                Ok(Ev::Frame(Ok((proto::T_DONE, _)))) => return Ok(()),
                Ok(Ev::Frame(Ok((proto::T_ERROR, p)))) => {
                    return Err(ProtoError::Peer(proto::printable(&p)))
                }
                Ok(Ev::Frame(Ok((k, _)))) => {
                    return Err(proto::malformed(
                        "reply",
                        format!("frame type {k} where DONE was due"),
                    ))
                }
                Ok(Ev::Frame(Err(e))) => return Err(e),
                Ok(_) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next event, or an error when the receiver has sent nothing for `--timeout`.
    fn wait(&self, rx: &Events) -> Result<Ev, ProtoError> {
        let Some(t) = self.opts.timeout else {
            return rx
                .recv()
                .map_err(|_| ProtoError::Local("the receiver closed the connection".into()));
        };
        rx.recv_timeout(t).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => ProtoError::Local(format!(
                "the receiver sent nothing for {} s while an answer was due (--timeout)",
                t.as_secs()
            )),
            mpsc::RecvTimeoutError::Disconnected => {
                ProtoError::Local("the receiver closed the connection".into())
            }
        })
    }

    fn event(&mut self, ev: Ev) -> Result<(), ProtoError> {
        match ev {
            Ev::Frame(f) => self.handle(f?),
            Ev::Prepared(p) => {
                self.summary.ns_read_hash += p.ns_read_hash;
                if p.failed.is_some() {
                    self.resolve(&p.path, false);
                }
                self.summary.failed.extend(p.failed);
                self.summary.not_sent.extend(p.not_sent);
                match p.item {
                    Some(b) => self.ready.push_back(*b),
                    None => {
                        let _ = self.credits.try_send(());
                    }
                }
                Ok(())
            }
            Ev::PrepDone => {
                self.prep_done = true;
                Ok(())
            }
        }
    }

    fn fail(&mut self, path: &[u8], why: impl std::fmt::Display) {
        self.summary
            .failed
            .push(format!("{}: {why}", proto::show(path)));
    }

    /// `-H`: a file that links name has landed (or was there), or has failed: its links go
    /// next, or fail with it.
    fn resolve(&mut self, path: &[u8], ok: bool) {
        if !self.link_targets.contains(path) {
            return;
        }
        self.resolved.insert(path.to_vec(), ok);
        for (f, h) in self.parked.remove(path).unwrap_or_default() {
            if ok {
                self.ready.push_front((f, h));
            } else {
                let why = format!("its link target {} did not land", proto::show(path));
                self.fail(&f.remote, why);
            }
        }
    }

    /// `--delete`, once every entry is answered: list each directory sent on the receiver,
    /// and delete there what the source does not have and the filters do not protect. Nothing
    /// is deleted when any entry failed (a directory this side could not read would look
    /// empty), as rsync skips deletion after an I/O error.
    fn delete(&mut self, rx: &Events) -> Result<(), ProtoError> {
        if !self.summary.failed.is_empty() {
            self.summary.delete_skipped = Some(format!(
                "not deleting anything: {} entr{} failed",
                self.summary.failed.len(),
                if self.summary.failed.len() == 1 {
                    "y"
                } else {
                    "ies"
                }
            ));
            return Ok(());
        }
        // Rounds of LIST: the directories sent, then (with filters) each extraneous directory
        // on the receiver, whose excluded names protect it and its extraneous parents (rsync
        // keeps them: "cannot delete non-empty directory").
        let mut round: Vec<ToList> = std::mem::take(&mut self.listed)
            .into_iter()
            .map(|(d, have)| (d, Some(have)))
            .collect();
        let mut extra: Vec<(Vec<u8>, bool)> = Vec::new();
        let mut extra_dirs: HashSet<Vec<u8>> = HashSet::new();
        let mut protected: HashSet<Vec<u8>> = HashSet::new();
        let mut names_seen = 0usize;
        while !round.is_empty() {
            for (i, (dir, _)) in round.iter().enumerate() {
                let id = u32::try_from(i)
                    .map_err(|_| ProtoError::Local("too many directories to --delete in".into()))?;
                proto::write_frame(self.out, proto::T_LIST, &proto::encode_list(id, dir))
                    .map_err(io)?;
            }
            self.out.flush().map_err(io)?;
            let mut next = Vec::new();
            let mut open = round.len();
            while open > 0 {
                let (id, status, names) = match self.next_frame(rx)? {
                    (proto::T_LISTING, p) => proto::decode_listing(&p)?,
                    (k, _) => {
                        return Err(proto::malformed(
                            "reply",
                            format!("frame type {k} where LISTING was due"),
                        ))
                    }
                };
                let Some((dir, have)) = usize::try_from(id).ok().and_then(|i| round.get(i)) else {
                    return Err(proto::malformed("LISTING frame", format!("request {id}")));
                };
                names_seen += names.len();
                if names_seen > MAX_DELETE_NAMES {
                    return Err(ProtoError::Local(format!(
                        "the receiver listed more than {MAX_DELETE_NAMES} names to consider for --delete"
                    )));
                }
                for (kind, name) in names {
                    if have.as_ref().is_some_and(|h| h.contains(&name)) {
                        continue;
                    }
                    let rel = join(dir, &name);
                    let is_dir = kind == 1;
                    if self.opts.filters.excluded(&rel, is_dir) {
                        // Protected: so is every extraneous directory above it.
                        let mut at = rel.as_slice();
                        while let Some(i) = at.iter().rposition(|&b| b == b'/') {
                            at = &at[..i];
                            if extra_dirs.contains(at) {
                                protected.insert(at.to_vec());
                            }
                        }
                        continue;
                    }
                    if is_dir && !self.opts.filters.is_empty() {
                        extra_dirs.insert(rel.clone());
                        next.push((rel.clone(), None));
                    }
                    extra.push((rel, is_dir));
                }
                if status != proto::LISTING_MORE {
                    open -= 1;
                }
            }
            round = next;
        }
        // What goes: the extraneous entries that are not protected directories and do not lie
        // in a directory that goes whole.
        let goes_whole = |p: &[u8]| {
            let mut at = p;
            while let Some(i) = at.iter().rposition(|&b| b == b'/') {
                at = &at[..i];
                if extra_dirs.contains(at) && !protected.contains(at) {
                    return true;
                }
            }
            false
        };
        let mut kept: Vec<String> = protected.iter().map(|p| proto::show(p)).collect();
        kept.sort();
        self.summary.delete_kept = kept;
        let mut extra: Vec<(Vec<u8>, bool)> = extra
            .into_iter()
            .filter(|(p, _)| !protected.contains(p) && !goes_whole(p))
            .collect();
        extra.sort();
        if self.opts.dry_run {
            self.summary.would_delete = extra.iter().map(|(p, _)| proto::show(p)).collect();
            return Ok(());
        }
        for (i, (rel, _)) in extra.iter().enumerate() {
            let id = u32::try_from(i)
                .map_err(|_| ProtoError::Local("too many entries to delete".into()))?;
            proto::write_frame(self.out, proto::T_DELETE, &proto::encode_list(id, rel))
                .map_err(io)?;
        }
        self.out.flush().map_err(io)?;
        for _ in 0..extra.len() {
            let (id, status, why) = match self.next_frame(rx)? {
                (proto::T_FILE_DONE, p) => proto::decode_done(&p)?,
                (k, _) => {
                    return Err(proto::malformed(
                        "reply",
                        format!("frame type {k} where a DELETE's answer was due"),
                    ))
                }
            };
            let Some((rel, _)) = usize::try_from(id).ok().and_then(|i| extra.get(i)) else {
                return Err(proto::malformed("FILE_DONE frame", format!("delete {id}")));
            };
            if status == proto::DONE_LANDED {
                self.summary.deleted.push(proto::show(rel));
            } else {
                let rel = rel.clone();
                self.fail(&rel, format!("not deleted: {why}"));
            }
        }
        Ok(())
    }

    /// The receiver's next frame (an ERROR ends the session with its text).
    fn next_frame(&mut self, rx: &Events) -> Result<(u8, Vec<u8>), ProtoError> {
        loop {
            match self.wait(rx)? {
                Ev::Frame(Ok((proto::T_ERROR, p))) => {
                    return Err(ProtoError::Peer(proto::printable(&p)))
                }
                Ev::Frame(f) => return f,
                _ => continue,
            }
        }
    }

    /// Blocks of every file whose reply has come, oldest file first, while the window has room.
    fn send_blocks(&mut self) -> Result<(), ProtoError> {
        let ids: Vec<u32> = self
            .flights
            .iter()
            .filter(|(_, f)| f.replied && !f.todo.is_empty())
            .map(|(&id, _)| id)
            .collect();
        let mut buf = Vec::new();
        for id in ids {
            while self.bytes_in_flight < self.opts.window_bytes {
                let f = self.flights.get_mut(&id).expect("listed");
                let Some(i) = f.todo.pop_front() else { break };
                let off = i * f.bs;
                let n = proto::block_len(f.size, off, f.bs);
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "a block of this file: i < blocks <= MAX_BLOCKS (block_size_for)"
                )]
                let ix = i as usize;
                // A delta: the receiver's old file has these bytes (a retry sends them).
                let copy = f
                    .old
                    .as_ref()
                    .and_then(|old| old.get(&f.hashes[ix]))
                    .filter(|_| !f.tries.contains_key(&i));
                if let Some(&from) = copy {
                    let p = proto::encode_copy(id, i, from, &f.hashes[ix]);
                    proto::write_frame(self.out, proto::T_COPY, &p).map_err(io)?;
                    self.throttle.pass(p.len());
                    f.inflight.insert(i);
                    self.bytes_in_flight += n as u64;
                    self.summary.blocks_copied += 1;
                    (self.progress)(n as u64, self.summary.blocks_retried);
                    continue;
                }
                let t = std::time::Instant::now();
                let read = match (&f.data, &f.file) {
                    (Some(d), _) => {
                        buf.clear();
                        // A file of one block, held in memory: its only block is at 0.
                        #[allow(
                            clippy::cast_possible_truncation,
                            reason = "`off` is within `d`, a file of one block held in memory"
                        )]
                        let off = off as usize;
                        buf.extend_from_slice(&d[off..off + n]);
                        Ok(())
                    }
                    (None, Some(file)) => {
                        buf.resize(n, 0);
                        if self.opts.verify_source {
                            verify::durable_then_read_back(file, off, &mut buf).map(|_| ())
                        } else {
                            file.read_exact_at(&mut buf, off)
                        }
                    }
                    (None, None) => Ok(()),
                };
                let ok = read.is_ok() && *blake3::hash(&buf).as_bytes() == f.hashes[ix];
                self.summary.ns_read_hash += crate::nanos(t.elapsed());
                if !ok {
                    // Changed (or vanished) since it was hashed: it must not land torn.
                    f.broken = Some(match read {
                        Err(e) => format!("cannot read: {e} (it changed or was truncated while it was sent; not landed)"),
                        Ok(()) => "changed while it was sent (not landed; send it again)".into(),
                    });
                    f.todo.clear();
                    self.end_if_idle(id)?;
                    break;
                }
                let packed = self
                    .zstd
                    .as_mut()
                    .and_then(|z| z.compress(&buf).ok())
                    .filter(|z| z.len() < n);
                let (kind, p) = match packed {
                    Some(z) => {
                        let mut p = proto::encode_zblock_header(id, i, &f.hashes[ix], n);
                        p.extend_from_slice(&z);
                        (proto::T_ZBLOCK, p)
                    }
                    None => {
                        let mut p = proto::encode_block_header(id, i, &f.hashes[ix], n);
                        p.extend_from_slice(&buf);
                        (proto::T_BLOCK, p)
                    }
                };
                self.summary.wire_bytes += p.len() as u64;
                let ts = std::time::Instant::now();
                proto::write_frame(self.out, kind, &p).map_err(io)?;
                self.summary.ns_send += crate::nanos(ts.elapsed());
                self.throttle.pass(p.len());
                f.inflight.insert(i);
                self.bytes_in_flight += n as u64;
                self.summary.blocks_sent += 1;
                self.summary.bytes_sent += n as u64;
                (self.progress)(n as u64, self.summary.blocks_retried);
            }
        }
        Ok(())
    }

    /// Give a file up on the receiver (FILE_END) once none of its blocks is in flight.
    fn end_if_idle(&mut self, id: u32) -> Result<(), ProtoError> {
        let f = self.flights.get_mut(&id).expect("in flight");
        if f.replied
            && f.todo.is_empty()
            && f.inflight.is_empty()
            && !f.ended
            && (!f.failed.is_empty() || f.broken.is_some())
        {
            f.ended = true;
            proto::write_frame(self.out, proto::T_FILE_END, &id.to_le_bytes()).map_err(io)?;
        }
        Ok(())
    }

    fn finish(&mut self, id: u32) -> Flight {
        let f = self.flights.remove(&id).expect("in flight");
        self.open_blocks -= f.blocks();
        self.held -= f.held();
        for i in &f.inflight {
            self.bytes_in_flight -= (f.size - i * f.bs).min(f.bs);
        }
        self.free_ids.push(id);
        f
    }

    fn handle(&mut self, (kind, p): (u8, Vec<u8>)) -> Result<(), ProtoError> {
        match kind {
            proto::T_FILE_REPLY => {
                let (id, r) = proto::decode_reply(&p)?;
                let f = match self.flights.get_mut(&id) {
                    Some(f) if !f.replied => f,
                    _ => {
                        return Err(proto::malformed(
                            "FILE_REPLY frame",
                            format!("file id {id} is not awaiting a reply"),
                        ))
                    }
                };
                f.replied = true;
                let mut r = r;
                if let Reply::Delta(_, old) = &mut r {
                    // The old file's blocks by hash (the first of equal ones).
                    let mut map = HashMap::with_capacity(old.len());
                    for (i, h) in std::mem::take(old).into_iter().enumerate() {
                        map.entry(h).or_insert(i as u64);
                    }
                    f.old = Some(map);
                }
                match r {
                    Reply::Send(ranges) | Reply::Delta(ranges, _) => {
                        if f.kind != proto::KIND_FILE {
                            return Err(proto::malformed(
                                "FILE_REPLY frame",
                                "blocks asked of a directory or symlink",
                            ));
                        }
                        let blocks = f.blocks();
                        // Blocks of a file this sender split with block_size_for: at most
                        // MAX_BLOCKS, and a range is checked to be within them first.
                        let index = |b: u64| usize::try_from(b).expect("at most MAX_BLOCKS");
                        let mut have = vec![false; index(blocks)];
                        for (a, e) in ranges {
                            if e > blocks {
                                return Err(proto::malformed(
                                    "FILE_REPLY frame",
                                    format!("blocks {a} to {} of {blocks}", e.saturating_sub(1)),
                                ));
                            }
                            have[index(a)..index(e)].iter_mut().for_each(|h| *h = true);
                        }
                        f.todo = (0..blocks).filter(|&i| !have[index(i)]).collect();
                    }
                    Reply::Skipped | Reply::Trusted(_) => {
                        if matches!(r, Reply::Trusted(_)) && self.opts.quick.is_none() {
                            return Err(proto::malformed(
                                "FILE_REPLY frame",
                                "a file trusted from a record in a session without --quick",
                            ));
                        }
                        let f = self.finish(id);
                        if matches!(r, Reply::Trusted(_)) {
                            self.summary.trusted += 1;
                        } else {
                            self.summary.skipped += 1;
                        }
                        self.note_manifest(&f);
                        self.resolve(&f.remote, true);
                    }
                    Reply::HashFirst => {
                        let Some(mut h) = f.unhashed.take() else {
                            return Err(proto::malformed(
                                "FILE_REPLY frame",
                                "a hash asked for an entry sent hashed",
                            ));
                        };
                        // Hashed now (on this thread: only files that changed, or that no
                        // record vouches for, come here), then offered again.
                        let t = std::time::Instant::now();
                        let hashed = match f.file.take() {
                            Some(file) => {
                                let r = hash_file(f, &file);
                                f.file = Some(file);
                                r
                            }
                            None => Err("not open".into()),
                        };
                        self.summary.ns_read_hash += crate::nanos(t.elapsed());
                        if let Err(why) = hashed {
                            let f = self.finish(id);
                            self.fail(&f.remote, why);
                            self.resolve(&f.remote, false);
                            return Ok(());
                        }
                        f.replied = false;
                        h.id = id;
                        h.hash = hash_of_list(&f.hashes);
                        h.block_size = u32::try_from(f.bs).unwrap_or(proto::MAX_BLOCK);
                        let (blocks, held) = (f.blocks(), f.held());
                        self.open_blocks += blocks;
                        self.held += held;
                        let frame = h.encode();
                        proto::write_frame(self.out, proto::T_FILE, &frame).map_err(io)?;
                        self.throttle.pass(frame.len());
                    }
                    Reply::Would => {
                        if !self.opts.dry_run {
                            return Err(proto::malformed(
                                "FILE_REPLY frame",
                                "a dry run's answer in a real run",
                            ));
                        }
                        let f = self.finish(id);
                        self.summary.would_send.push(proto::show(&f.remote));
                        self.resolve(&f.remote, true);
                    }
                    Reply::Made => {
                        let f = self.finish(id);
                        match f.kind {
                            proto::KIND_DIR => self.summary.dirs += 1,
                            proto::KIND_SYMLINK => self.summary.symlinks += 1,
                            proto::KIND_HARDLINK => self.summary.hardlinks += 1,
                            proto::KIND_FIFO
                            | proto::KIND_SOCKET
                            | proto::KIND_CHAR
                            | proto::KIND_BLOCK => self.summary.specials += 1,
                            _ => {
                                return Err(proto::malformed(
                                    "FILE_REPLY frame",
                                    "a file \"made\" without its blocks",
                                ))
                            }
                        }
                    }
                    Reply::Refused(why) => {
                        let f = self.finish(id);
                        self.fail(&f.remote, format!("refused by the receiver: {why}"));
                        self.resolve(&f.remote, false);
                    }
                }
            }
            proto::T_BLOCK_RESULT => {
                let (id, index, ok) = proto::decode_result(&p)?;
                let retries = self.opts.retries;
                let f = match self.flights.get_mut(&id) {
                    Some(f) if f.inflight.contains(&index) => f,
                    _ => {
                        return Err(proto::malformed(
                            "BLOCK_RESULT frame",
                            format!("block {index} of file id {id} is not in flight"),
                        ))
                    }
                };
                f.inflight.remove(&index);
                self.bytes_in_flight -= (f.size - index * f.bs).min(f.bs);
                if !ok {
                    let t = f.tries.entry(index).or_default();
                    *t += 1;
                    if *t <= retries && f.broken.is_none() {
                        self.summary.blocks_retried += 1;
                        f.todo.push_back(index);
                    } else {
                        f.failed.push(index);
                    }
                }
                self.end_if_idle(id)?;
            }
            proto::T_FILE_DONE => {
                let (id, status, why) = proto::decode_done(&p)?;
                match self.flights.get(&id) {
                    Some(f)
                        if f.replied
                            && (status != proto::DONE_LANDED
                                || (f.inflight.is_empty() && f.todo.is_empty())) => {}
                    _ => {
                        return Err(proto::malformed(
                            "FILE_DONE frame",
                            format!("file id {id} cannot be done"),
                        ))
                    }
                }
                let mut f = self.finish(id);
                let landed =
                    status == proto::DONE_LANDED && f.broken.is_none() && f.failed.is_empty();
                self.resolve(&f.remote, landed);
                if landed {
                    self.summary.files += 1;
                    self.note_manifest(&f);
                } else if let Some(b) = f.broken.take() {
                    self.fail(&f.remote, b);
                } else if !f.failed.is_empty() {
                    f.failed.sort_unstable();
                    let ranges: Vec<String> = f
                        .failed
                        .iter()
                        .map(|&i| {
                            format!(
                                "{} bytes from byte {}",
                                ((i + 1) * f.bs).min(f.size) - i * f.bs,
                                i * f.bs
                            )
                        })
                        .collect();
                    self.fail(
                        &f.remote,
                        format!(
                            "never verified after {} retries: {}",
                            self.opts.retries,
                            ranges.join(", ")
                        ),
                    );
                } else {
                    self.fail(
                        &f.remote,
                        if why.is_empty() {
                            "the receiver could not land it".to_string()
                        } else {
                            why
                        },
                    );
                }
            }
            proto::T_ERROR => return Err(ProtoError::Peer(proto::printable(&p))),
            k => {
                return Err(proto::malformed(
                    "reply",
                    format!("unexpected frame type {k}"),
                ))
            }
        }
        Ok(())
    }

    fn note_manifest(&mut self, f: &Flight) {
        if let Some(m) = self.manifest.as_mut() {
            if f.kind == proto::KIND_FILE {
                m.push_str(&format!(
                    "file {} {} {} {}\n",
                    proto::hex(&hash_of_list(&f.hashes)),
                    f.size,
                    f.bs,
                    crate::manifest::escape(&f.remote)
                ));
                for b in &f.hashes {
                    m.push_str(&format!("block {}\n", proto::hex(b)));
                }
            }
        }
    }
}

/// Stat, open and hash one entry (on the preparer thread).
fn prepare(opts: &SendOptions, e: &Entry, names: &mut Names) -> Prepared {
    let mut p = Prep {
        opts,
        failed: None,
        not_sent: None,
        ns_read_hash: 0,
        names,
    };
    let item = p.prepare(e).map(Box::new);
    Prepared {
        item,
        path: e.remote.clone(),
        failed: p.failed,
        not_sent: p.not_sent,
        ns_read_hash: p.ns_read_hash,
    }
}

struct Prep<'a> {
    opts: &'a SendOptions,
    failed: Option<String>,
    not_sent: Option<String>,
    ns_read_hash: u64,
    names: &'a mut Names,
}

/// User and group names by id (`true`: a group), looked up once each.
type Names = HashMap<(bool, u32), Vec<u8>>;

fn name_of(names: &mut Names, group: bool, id: u32) -> Vec<u8> {
    names
        .entry((group, id))
        .or_insert_with(|| {
            let n = if group {
                uzers::get_group_by_gid(id).map(|g| g.name().as_bytes().to_vec())
            } else {
                uzers::get_user_by_uid(id).map(|u| u.name().as_bytes().to_vec())
            };
            n.unwrap_or_default()
        })
        .clone()
}

impl Prep<'_> {
    fn fail(&mut self, path: &[u8], why: impl std::fmt::Display) {
        self.failed = Some(format!("{}: {why}", proto::show(path)));
    }

    /// Stat, open and hash an entry; `None` when it fails alone (reported) or is not sent.
    fn prepare(&mut self, e: &Entry) -> Option<(Flight, FileHeader)> {
        let m = match fs::symlink_metadata(&e.local) {
            Ok(m) => m,
            Err(err) => {
                self.fail(&e.remote, format!("cannot read: {err}"));
                return None;
            }
        };
        let ft = m.file_type();
        let mut h = FileHeader {
            id: 0,
            kind: proto::KIND_FILE,
            path: e.remote.clone(),
            size: 0,
            mode: m.mode(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec().clamp(0, 999_999_999) as u32,
            target: Vec::new(),
            block_size: proto::MIN_BLOCK,
            hash: [0; 32],
            attrs: Attrs::default(),
        };
        let mut f = Flight {
            remote: e.remote.clone(),
            kind: proto::KIND_FILE,
            file: None,
            data: None,
            size: 0,
            bs: u64::from(proto::MIN_BLOCK),
            hashes: Vec::new(),
            replied: false,
            todo: VecDeque::new(),
            inflight: HashSet::new(),
            tries: HashMap::new(),
            failed: Vec::new(),
            broken: None,
            ended: false,
            old: None,
            unhashed: None,
        };
        if let Some(target) = &e.link {
            h.kind = proto::KIND_HARDLINK;
            h.target = target.clone();
        } else if ft.is_dir() {
            h.kind = proto::KIND_DIR;
        } else if (ft.is_fifo() || ft.is_socket()) && self.opts.specials {
            h.kind = if ft.is_fifo() {
                proto::KIND_FIFO
            } else {
                proto::KIND_SOCKET
            };
        } else if (ft.is_char_device() || ft.is_block_device()) && self.opts.devices {
            h.kind = if ft.is_char_device() {
                proto::KIND_CHAR
            } else {
                proto::KIND_BLOCK
            };
            h.size = m.rdev();
        } else if ft.is_symlink() {
            h.kind = proto::KIND_SYMLINK;
            match fs::read_link(&e.local) {
                Ok(t) => h.target = t.into_os_string().into_vec(),
                Err(err) => {
                    self.fail(&e.remote, format!("cannot read the link: {err}"));
                    return None;
                }
            }
        } else if ft.is_file() {
            let file = match open_source(e) {
                Ok(x) => x,
                Err(err) => {
                    self.fail(&e.remote, format!("cannot open: {err}"));
                    return None;
                }
            };
            // What was opened, not what the walk saw: its size, mode, times and owner.
            let om = file.metadata();
            if let Ok(om) = &om {
                h.mode = om.mode();
                h.mtime_s = om.mtime();
                h.mtime_ns = om.mtime_nsec().clamp(0, 999_999_999) as u32;
            }
            let size = match om {
                Ok(m) if m.is_file() => m.len(),
                Ok(_) => {
                    self.fail(&e.remote, "changed type while it was sent");
                    return None;
                }
                Err(err) => {
                    self.fail(&e.remote, format!("cannot read: {err}"));
                    return None;
                }
            };
            let Some(bs) = proto::block_size_for(size, self.opts.block_size) else {
                self.fail(
                    &e.remote,
                    format!(
                        "{size} bytes: too large for the protocol's {} blocks of 16 MiB",
                        proto::MAX_BLOCKS
                    ),
                );
                return None;
            };
            h.size = size;
            h.block_size = bs;
            f.size = size;
            f.bs = u64::from(bs);
            let t = std::time::Instant::now();
            if self.opts.dry_run {
                // A dry run compares by size and times (rsync's quick check): nothing is
                // read, and no block is ever sent.
            } else if self.opts.quick.is_some() {
                // --quick: first asked unhashed (block size 0); hashed only if the receiver
                // has no record that vouches for it (FORMAT.md §5, reply 7).
                h.block_size = 0;
            } else if let Err(err) = hash_file(&mut f, &file) {
                self.fail(&e.remote, err);
                return None;
            }
            self.ns_read_hash += crate::nanos(t.elapsed());
            h.hash = hash_of_list(&f.hashes);
            f.file = Some(file);
        } else {
            let what = if ft.is_fifo() {
                "a fifo"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "a device node"
            };
            self.not_sent = Some(format!(
                "{}: {what} (sent only with {})",
                e.local.display(),
                if what == "a device node" {
                    "--devices"
                } else {
                    "--specials"
                }
            ));
            return None;
        }
        if self.opts.owner || self.opts.xattrs {
            let read = match &f.file {
                Some(file) => crate::attrs::read_fd(file, self.opts.owner, self.opts.xattrs),
                None => crate::attrs::read(&e.local, self.opts.owner, self.opts.xattrs),
            };
            match read.map(|a| {
                let bytes: usize = a.xattrs.iter().map(|(n, v)| n.len() + v.len()).sum();
                (a, bytes)
            }) {
                // The receiver refuses a FILE frame carrying more (FORMAT.md §5): this file fails
                // alone, with the reason, instead of ending the session as a malformed frame.
                Ok((_, bytes)) if bytes > crate::proto::MAX_XATTR_BYTES => {
                    self.fail(
                        &e.remote,
                        format!(
                            "its extended attributes total {bytes} bytes, more than the {} a transfer carries per file",
                            crate::proto::MAX_XATTR_BYTES
                        ),
                    );
                    return None;
                }
                Ok((mut a, _)) => {
                    if let (Some((u, g)), false) = (a.owner, self.opts.numeric_ids) {
                        a.names =
                            Some((name_of(self.names, false, u), name_of(self.names, true, g)));
                    }
                    h.attrs = a;
                }
                Err(err) => {
                    self.fail(&e.remote, format!("cannot read its attributes: {err}"));
                    return None;
                }
            }
        }
        f.kind = h.kind;
        if h.kind == proto::KIND_FILE && h.block_size == 0 {
            f.unhashed = Some(Box::new(h.clone()));
        }
        Some((f, h))
    }
}

/// Open a regular file to send, beneath the directory of its path argument (see [`Entry`]).
fn open_source(e: &Entry) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let fd = rustix::fs::openat2(
        &*e.top,
        e.remote.as_slice(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|err| match err {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => std::io::Error::other(
            "a symlink where the walk saw a file (swapped in while it was sent; not followed)",
        ),
        err => err.into(),
    })?;
    let f = File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(
            "not a regular file any more (changed while it was sent)",
        ));
    }
    Ok(f)
}

/// Read and hash a file to send (its size and block size set): a file of one block is kept in
/// memory and sent from there.
fn hash_file(f: &mut Flight, file: &File) -> Result<(), String> {
    let (size, bs) = (f.size, f.bs);
    let cannot = |err: std::io::Error| format!("cannot read: {err} (it changed or was truncated)");
    if size <= bs {
        let mut d = vec![0u8; proto::block_len(size, 0, bs)];
        file.read_exact_at(&mut d, 0).map_err(cannot)?;
        if size > 0 {
            f.hashes = vec![*blake3::hash(&d).as_bytes()];
        }
        f.data = Some(d);
    } else {
        let bs = u32::try_from(bs).map_err(|_| "a block size over 4 GiB".to_string())?;
        f.hashes = block_hashes(file, size, bs).map_err(cannot)?;
    }
    Ok(())
}

/// BLAKE3 of every block of the file.
pub fn block_hashes(f: &File, size: u64, bs: u32) -> std::io::Result<Vec<[u8; 32]>> {
    // A capacity only (a count beyond usize could not be held anyway).
    let blocks = size.div_ceil(u64::from(bs));
    let mut out = Vec::with_capacity(usize::try_from(blocks).unwrap_or(0));
    let mut buf = vec![0u8; bs as usize];
    let mut off = 0u64;
    while off < size {
        let n = proto::block_len(size, off, u64::from(bs));
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
