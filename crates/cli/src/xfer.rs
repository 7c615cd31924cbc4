//! `stripeguard send` / `recv`: parse, connect, call stripeguard-xfer, print.

use crate::exit;
use crate::units::parse_size;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use stripeguard_xfer::beneath::Root;
use stripeguard_xfer::recv::Target;
use stripeguard_xfer::{send, Policy, RecvOptions, RecvSummary, SendOptions};

#[derive(Args)]
pub struct SendArgs {
    /// Files and directories to send (a file lands as DIR/NAME, a directory as DIR/NAME/...;
    /// a directory with a trailing slash, `src/`, lands what it holds in DIR itself, as rsync
    /// does).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// A receiver listening there (`stripeguard recv --listen`): `unix:PATH` (the receiver
    /// must run as you or root) or `HOST:PORT` (with --key-file).
    #[arg(long, value_name = "unix:PATH|HOST:PORT", conflicts_with_all = ["ssh", "rsh"])]
    to: Option<String>,
    /// Run `stripeguard recv --stdio --dir DIR` on HOST through ssh (the way to cross networks
    /// you do not trust).
    #[arg(long, value_name = "[USER@]HOST:DIR")]
    ssh: Option<String>,
    /// The remote shell for --ssh (as rsync's -e), or with no --ssh a whole command whose
    /// standard input and output are a receiver's (`stripeguard recv --stdio --dir DIR`).
    #[arg(long, value_name = "CMD")]
    rsh: Option<String>,
    /// The stripeguard binary on the far side (with --ssh).
    #[arg(long, default_value = "stripeguard")]
    remote_stripeguard: String,
    /// Block size: the unit of verification and of retransmission (256K measured best of
    /// 256K/1M/4M on a 1 Gbit/s link: smaller blocks overlap transfer and verification more).
    #[arg(long, value_parser = parse_size, default_value = "256K")]
    block_size: usize,
    /// Times a block is sent again after its read-back failed, before the file is given up.
    #[arg(long, default_value_t = 3)]
    retries: u32,
    /// Also evict each block from this host's page cache and read it from the device before
    /// sending it (catches an unrecoverable read error at the source).
    #[arg(long)]
    verify_source: bool,
    /// Send owners (uid and gid; applied only by a receiver run with --owner, as root for
    /// others' uids).
    #[arg(long)]
    owner: bool,
    /// Send extended attributes (applied only by a receiver run with --xattrs).
    #[arg(long)]
    xattrs: bool,
    /// A shared key (`stripeguard keygen FILE`; at least 32 bytes): the session is sealed and
    /// both ends prove the key; a receiver that does not is refused.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Write a manifest (every file's size and the hash of every block; paths relative to the
    /// receiving DIR) for `stripeguard verify-manifest DIR FILE` later.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Send at most RATE of file data a second, on average (as rsync's --bwlimit: a plain
    /// number is KiB per second; K, M, G suffixes are 1024-based).
    #[arg(long, value_name = "RATE", value_parser = parse_bwlimit)]
    bwlimit: Option<u64>,
    /// Change nothing on the receiver: list what would be sent, made and deleted.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Delete in each directory sent what the source does not have (and the filters do not
    /// exclude), after everything sent is verified; nothing when any entry failed. The
    /// receiver must run with --allow-delete.
    #[arg(long)]
    delete: bool,
    /// Compress blocks on the wire with zstd (blocks that do not shrink go as they are).
    #[arg(short = 'z', long)]
    compress: bool,
    /// The zstd level for --compress (1 fastest .. 19).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    compress_level: i32,
    /// A file already on the receiver whose verification record (written by an earlier
    /// --quick run) is younger than AGE and whose size, times and inode are unchanged is
    /// trusted without reading it from the device (`30s`, `12h`, `7d`; default: every file is
    /// proved from the device).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    quick: Option<u64>,
    /// Send changed files whole (by default the receiver offers the old file's blocks, and
    /// blocks it already has are copied there instead of sent).
    #[arg(short = 'W', long)]
    whole_file: bool,
    /// Keep hard links: a file with several names in the source lands as one file with those
    /// names.
    #[arg(short = 'H', long)]
    hard_links: bool,
    /// Send fifos and sockets.
    #[arg(long)]
    specials: bool,
    /// Send device nodes (made only by a receiver run with --devices, as root).
    #[arg(long)]
    devices: bool,
    /// --specials and --devices.
    #[arg(short = 'D')]
    specials_and_devices: bool,
    /// With --owner: send owners as numbers only (by default user and group names go too,
    /// and the receiver maps them to its own ids, as rsync does).
    #[arg(long)]
    numeric_ids: bool,
    /// Do not send what matches PATTERN (rsync's syntax: `*.log`, `/top/dir/`, `**/tmp`);
    /// rules apply in the order given, with --include, --filter and the -from files.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    exclude: Vec<String>,
    /// Send what matches PATTERN even if a later rule excludes it.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    include: Vec<String>,
    /// A rule: `- PATTERN`, `+ PATTERN`, or `!` (clear the rules so far).
    #[arg(short = 'f', long, value_name = "RULE", allow_hyphen_values = true)]
    filter: Vec<String>,
    /// Exclude patterns from FILE, one per line (`#` and `;` start comments).
    #[arg(long, value_name = "FILE")]
    exclude_from: Vec<PathBuf>,
    /// Include patterns from FILE, one per line.
    #[arg(long, value_name = "FILE")]
    include_from: Vec<PathBuf>,
    /// rsync's habits that are always so here, accepted so that an rsync command line works:
    /// `-a` (recursive, links, modes, times), `-r`, `-c` (every file already there is read and
    /// compared, from the device), `--partial` and `-P` (partials always kept and resumed).
    #[arg(short = 'a', long, hide_short_help = true)]
    archive: bool,
    #[arg(short = 'r', long, hide_short_help = true)]
    recursive: bool,
    #[arg(short = 'c', long, hide_short_help = true)]
    checksum: bool,
    #[arg(long, hide_short_help = true)]
    partial: bool,
    #[arg(short = 'P', hide_short_help = true)]
    partial_progress: bool,
    /// The module of a receiver daemon (`recv --daemon --module NAME=DIR`).
    #[arg(long, value_name = "NAME")]
    module: Option<String>,
    /// Give up when the receiver sends nothing for SECS while an answer is due (0: wait for
    /// ever).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

/// `--quick AGE`: `90` or `90s`, `15m`, `12h`, `7d`, `2w`, in seconds.
fn parse_age(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not an age (30s, 15m, 12h, 7d, 2w)"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(format!("{s:?}: the unit is one of s, m, h, d, w")),
    };
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{s:?} is not an age of more than 0 seconds"))
}

/// The include/exclude rules in the order they were given on the command line (rsync's rule:
/// the first that matches decides), across --include, --exclude, --filter and the -from files.
pub fn filters_in_order(m: &clap::ArgMatches) -> Result<stripeguard_xfer::filter::Filters> {
    let mut all: Vec<(usize, &str, String)> = Vec::new();
    for id in [
        "include",
        "exclude",
        "filter",
        "include_from",
        "exclude_from",
    ] {
        let (Some(ix), Some(vals)) = (m.indices_of(id), m.get_raw(id)) else {
            continue;
        };
        for (i, v) in ix.zip(vals) {
            all.push((i, id, v.to_string_lossy().into_owned()));
        }
    }
    all.sort_by_key(|(i, _, _)| *i);
    let mut f = stripeguard_xfer::filter::Filters::new();
    for (_, id, v) in all {
        match id {
            "include" => f.include(&v),
            "exclude" => f.exclude(&v),
            "filter" => f.rule(&v),
            "include_from" => f.from_file(std::path::Path::new(&v), true),
            _ => f.from_file(std::path::Path::new(&v), false),
        }
        .map_err(|e| anyhow::anyhow!("--{}: {e}", id.replace('_', "-")))?;
    }
    Ok(f)
}

/// `--bwlimit`: rsync's units (a plain number is KiB/s), bytes a second.
fn parse_bwlimit(s: &str) -> Result<u64, String> {
    let plain = s.chars().all(|c| c.is_ascii_digit());
    let bytes = if plain {
        s.parse::<u64>()
            .ok()
            .and_then(|k| k.checked_mul(1024))
            .ok_or_else(|| format!("{s:?} is not a rate"))?
    } else {
        crate::units::parse_bytes(s)?
    };
    if bytes == 0 {
        return Err("--bwlimit 0 would send nothing (leave it out for no limit)".into());
    }
    Ok(bytes)
}

#[derive(Args)]
pub struct VerifyManifestArgs {
    /// The receiving directory.
    dir: PathBuf,
    /// The manifest `send --manifest` wrote.
    manifest: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Check received files against a manifest, reading every block from the device.
pub fn verify_manifest(a: VerifyManifestArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.manifest)
        .with_context(|| format!("cannot read {}", a.manifest.display()))?;
    let results = stripeguard_xfer::verify_manifest(&a.dir, &text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.manifest.display()))?;
    let bad = results.iter().filter(|r| !r.ok).count();
    if a.json {
        println!("{}", serde_json::to_string(&results)?);
    } else {
        for r in results.iter().filter(|r| !r.ok) {
            println!("FAILED {}: {}", r.path, r.problems.join("; "));
        }
        println!(
            "{} file(s) checked from the device: {} intact, {bad} failed",
            results.len(),
            results.len() - bad
        );
    }
    Ok(ExitCode::from(if bad == 0 {
        exit::OK
    } else {
        exit::FOUND
    }))
}

/// `--module NAME=DIR`.
fn parse_module(s: &str) -> Result<(String, PathBuf), String> {
    let (n, d) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give NAME=DIR"))?;
    if n.is_empty()
        || n.len() > 255
        || n.chars().all(|c| c == '.')
        || !n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "module name {n:?}: letters, digits, '-', '_' and '.' only (not dots alone)"
        ));
    }
    if d.is_empty() {
        return Err(format!("module {n}: no directory"));
    }
    Ok((n.to_string(), PathBuf::from(d)))
}

#[derive(Args)]
pub struct RecvArgs {
    /// Where received files land (created if missing; nothing is ever written outside it).
    #[arg(long, required_unless_present = "module")]
    dir: Option<PathBuf>,
    /// Listen for a sender: `unix:PATH` (a unix socket; only your own user or root may send,
    /// checked by peer credentials) or `ADDR:PORT` (TCP; needs --key-file, and a non-loopback
    /// address needs --allow-remote too). One session per run.
    #[arg(long, value_name = "unix:PATH|ADDR:PORT", conflicts_with = "stdio")]
    listen: Option<String>,
    /// Talk to the sender over standard input and output (what --ssh runs).
    #[arg(long)]
    stdio: bool,
    /// Listen on a non-loopback address (with --key-file: the session is then sealed, both ends
    /// prove the key).
    #[arg(long)]
    allow_remote: bool,
    /// Also accept senders running as this uid on a unix socket (repeatable).
    #[arg(long, value_name = "UID")]
    allow_uid: Vec<u32>,
    /// Do not verify blocks from the device (acknowledge once written; each file is still made
    /// durable before its rename, like `rsync --fsync`). Only for measuring what verification
    /// costs.
    #[arg(long)]
    no_verify: bool,
    /// Require the sender to prove it holds this shared key (`stripeguard keygen FILE`); the
    /// whole session is then sealed (Noise NNpsk0, ChaCha20-Poly1305).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Apply the owners a sender sends (`send --owner`; needs root for others' uids).
    #[arg(long)]
    owner: bool,
    /// Apply `user.*` extended attributes a sender sends (`send --xattrs`).
    #[arg(long)]
    xattrs: bool,
    /// Apply extended attributes of every namespace (trusted.*, security.* ...), except file
    /// capabilities unless --allow-setid.
    #[arg(long)]
    all_xattrs: bool,
    /// Keep setuid/setgid bits and file capabilities (`security.capability`); without it they
    /// are dropped, whatever the sender says.
    #[arg(long)]
    allow_setid: bool,
    /// Take a sender's --delete (it deletes beneath DIR what its source does not have).
    #[arg(long)]
    allow_delete: bool,
    /// Make device nodes a sender sends with --devices (as root; without this they are
    /// refused: a device node in DIR could give its readers the disk).
    #[arg(long)]
    devices: bool,
    /// With --listen: serve sessions until stopped (SIGTERM), as rsync's daemon does, instead
    /// of one.
    #[arg(long, requires = "listen")]
    daemon: bool,
    /// With --daemon: a module, a directory senders name with `send --module NAME`
    /// (repeatable; then --dir is not used).
    #[arg(long, value_name = "NAME=DIR", requires = "daemon", value_parser = parse_module)]
    module: Vec<(String, PathBuf)>,
    /// With --daemon: at most this many sessions at once (more are told busy).
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    max_sessions: u32,
    /// Print a JSON summary (on stderr with --stdio, whose stdout is the protocol).
    #[arg(long)]
    json: bool,
    /// With --listen: give up when the sender sends nothing for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    idle_timeout: u64,
}

/// A transfer that failed as a whole (connection, key, protocol, the receiving directory), as
/// opposed to some files failing: exit status 5.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransferFailed(pub String);

fn failed(e: impl std::fmt::Display) -> anyhow::Error {
    TransferFailed(e.to_string()).into()
}

/// Connections that have not finished their hello and key handshake: at most this many at
/// once, each for at most [`HANDSHAKE_SECS`]; they never end the run or hold the directory.
const MAX_PENDING: usize = 16;
const HANDSHAKE_SECS: u64 = 10;

/// Connections in their hello or key handshake: each can be cut (shut down).
#[derive(Default)]
struct Pending {
    next: u64,
    list: std::collections::VecDeque<(u64, std::time::Instant, Killer)>,
}

impl Pending {
    /// Register a new connection, cutting the oldest when MAX_PENDING are open.
    fn add(&mut self, kill: Killer, peer: &str) -> u64 {
        if self.list.len() >= MAX_PENDING {
            if let Some((_, _, k)) = self.list.pop_front() {
                eprintln!("stripeguard recv: {MAX_PENDING} connections opening at once; the oldest is cut for {peer}");
                k();
            }
        }
        self.next += 1;
        self.list
            .push_back((self.next, std::time::Instant::now(), kill));
        self.next
    }

    fn remove(&mut self, id: u64) {
        self.list.retain(|(i, _, _)| *i != id);
    }

    /// Cut every connection older than HANDSHAKE_SECS.
    fn reap(&mut self) {
        let limit = std::time::Duration::from_secs(HANDSHAKE_SECS);
        while self
            .list
            .front()
            .is_some_and(|(_, t, _)| t.elapsed() > limit)
        {
            if let Some((_, _, k)) = self.list.pop_front() {
                k();
            }
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Remove a unix socket's file (the accepting thread still holds the listener).
    fn remove(&self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A connection's two halves, its peer's name, how to set its read timeout, and how to cut it.
type Stream = (
    Box<dyn Read + Send>,
    Box<dyn Write + Send>,
    String,
    Box<dyn Fn(std::time::Duration) + Send>,
    Killer,
);
type Killer = Box<dyn Fn() + Send>;

fn listen(a: &RecvArgs, spec: &str) -> Result<Listener> {
    if let Some(path) = spec.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket())
            && UnixStream::connect(&path).is_err()
        {
            // A socket left by an earlier run that no longer listens.
            let _ = std::fs::remove_file(&path);
        }
        // Anyone may connect (mode 0666, set by the umask around bind, never by a chmod of the
        // path, which a user who can write the socket's directory could swap for a symlink);
        // who may send is decided by peer credentials. (No other thread runs yet.)
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o111));
        let l = UnixListener::bind(&path);
        rustix::process::umask(old);
        let l = l.with_context(|| format!("cannot listen on {}", path.display()))?;
        eprintln!("stripeguard recv: listening on unix:{}", path.display());
        return Ok(Listener::Unix(l, path));
    }
    let addr: SocketAddr = spec
        .parse()
        .with_context(|| format!("--listen {spec}: give unix:PATH or ADDR:PORT"))?;
    if a.key_file.is_none() {
        bail!("--listen {addr} (TCP) needs --key-file: any local user could connect and write into {}. Make a key with `stripeguard keygen FILE`, or use --listen unix:PATH (your own user or root only)", a.dir.as_deref().map_or_else(|| "its modules".into(), |d| d.display().to_string()));
    }
    if !addr.ip().is_loopback() && !a.allow_remote {
        bail!("--listen {addr} is not a loopback address: give --allow-remote too (the session is sealed by the key), or use --ssh from the sender");
    }
    let l = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("stripeguard recv: listening on {}", l.local_addr()?);
    Ok(Listener::Tcp(l))
}

impl Listener {
    /// The next connection, its peer's name, and (unix) whether its user may send.
    fn accept(&self, allowed: &[u32]) -> std::io::Result<(Stream, Result<(), String>)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                let _ = s.set_nodelay(true);
                s.set_read_timeout(Some(std::time::Duration::from_secs(HANDSHAKE_SECS)))?;
                let r = s.try_clone()?;
                let t = s.try_clone()?;
                let k = s.try_clone()?;
                let idle = Box::new(move |d| {
                    let _ = t.set_read_timeout(Some(d));
                });
                let kill: Killer = Box::new(move || {
                    let _ = k.shutdown(std::net::Shutdown::Both);
                });
                Ok((
                    (Box::new(r), Box::new(s), peer.to_string(), idle, kill),
                    Ok(()),
                ))
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                s.set_read_timeout(Some(std::time::Duration::from_secs(HANDSHAKE_SECS)))?;
                let cred = rustix::net::sockopt::socket_peercred(&s);
                let (name, ok) = match cred {
                    Ok(c) => {
                        let uid = c.uid.as_raw();
                        let me = rustix::process::geteuid().as_raw();
                        let ok = if uid == me || uid == 0 || allowed.contains(&uid) {
                            Ok(())
                        } else {
                            Err(format!("uid {uid} may not send to this receiver (only uid {me}, root, or --allow-uid)"))
                        };
                        (format!("pid {} uid {uid}", c.pid.as_raw_nonzero()), ok)
                    }
                    Err(e) => (
                        "an unknown peer".into(),
                        Err(format!("no peer credentials: {e}")),
                    ),
                };
                let r = s.try_clone()?;
                let t = s.try_clone()?;
                let k = s.try_clone()?;
                let idle = Box::new(move |d| {
                    let _ = t.set_read_timeout(Some(d));
                });
                let kill: Killer = Box::new(move || {
                    let _ = k.shutdown(std::net::Shutdown::Both);
                });
                Ok(((Box::new(r), Box::new(s), name, idle, kill), ok))
            }
        }
    }
}

/// Room for the receiver's descriptors (partials and directory handles of many files in
/// flight): the soft limit raised toward the hard one.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    let want = l.maximum.map_or(65536, |m| m.min(65536));
    if l.current.is_some_and(|c| c < want) {
        l.current = Some(want);
        let _ = setrlimit(Resource::Nofile, l);
    }
}

pub fn recv(a: RecvArgs) -> Result<ExitCode> {
    // Its pipes and socket end in errors, never in a silent SIGPIPE.
    crate::sigpipe::ignore();
    raise_nofile();
    let key = read_key(a.key_file.as_deref())?;
    let mut opts = RecvOptions::new(a.dir.clone().unwrap_or_default());
    opts.allow_delete = a.allow_delete;
    opts.devices = a.devices;
    opts.verify = !a.no_verify;
    opts.key = key;
    opts.policy = Policy {
        owner: a.owner,
        xattrs: a.xattrs,
        all_xattrs: a.all_xattrs,
        setid: a.allow_setid,
    };
    // The directories are checked now, before any sender comes.
    let target = match (&a.dir, a.module.is_empty()) {
        (Some(dir), true) => Target::Dir(Root::open(dir).map_err(failed)?),
        (Some(_), false) => {
            bail!("--dir and --module: a daemon with modules receives only into its modules")
        }
        (None, _) => {
            for (i, (n, d)) in a.module.iter().enumerate() {
                if a.module[..i].iter().any(|(m, _)| m == n) {
                    bail!("--module {n} is given twice");
                }
                // Checked now; each session opens it again, so nothing of the check stays.
                Root::open(d)
                    .map_err(|e| failed(format!("module {n}: {e}")))?
                    .tidy_unchanged();
            }
            Target::Modules(Arc::new(a.module.clone()))
        }
    };
    let summary = if a.stdio {
        // The directory opened by the check above is the one received into (its times before
        // this receiver touched it are kept for a dry run to put back).
        let conn = stripeguard_xfer::accept(
            Box::new(std::io::stdin()),
            Box::new(std::io::stdout()),
            opts.key.as_ref(),
        )
        .map_err(failed)?;
        stripeguard_xfer::receive_on(conn, target, &opts).map_err(failed)?
    } else {
        let spec = a
            .listen
            .clone()
            .context("give --listen unix:PATH, --listen ADDR:PORT with --key-file, or --stdio")?;
        let l = listen(&a, &spec)?;
        serve(l, target, &opts, &a)?
    };
    print_recv_summary(&a, &summary)?;
    Ok(ExitCode::from(if summary.failed.is_empty() {
        exit::OK
    } else {
        exit::FOUND
    }))
}

fn print_recv_summary(a: &RecvArgs, summary: &RecvSummary) -> Result<()> {
    let line = serde_json::to_string(summary)?;
    if a.json {
        eprintln!("{line}");
    } else {
        eprintln!(
            "stripeguard recv: {} file(s) verified on the device ({} dir(s), {} symlink(s)), {} already there, {} failed; {} block(s) verified, {} mismatched on read-back and sent again",
            summary.files,
            summary.dirs,
            summary.symlinks,
            summary.skipped,
            summary.failed.len(),
            summary.blocks_verified,
            summary.blocks_mismatched
        );
        for f in &summary.failed {
            eprintln!("  FAILED {f}");
        }
        if summary.attrs_refused > 0 {
            eprintln!("  {} owner(s), setuid/setgid bit(s) or xattr(s) from the sender not applied (see recv --help: --owner, --xattrs, --allow-setid)", summary.attrs_refused);
        }
        let extra: Vec<String> = [
            (summary.trusted, "trusted from verification records"),
            (summary.specials, "special file(s) made"),
            (summary.hardlinks, "hard link(s) made"),
            (summary.deleted, "deleted"),
            (summary.would, "would be sent or made (dry run)"),
            (summary.blocks_copied, "block(s) copied from old files"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if !extra.is_empty() {
            eprintln!("  {}", extra.join(", "));
        }
    }
    Ok(())
}

/// Where sessions land: one session into the directory opened at the start, or with
/// `--daemon` up to `--max-sessions` at once, each with its own handles.
struct Slots {
    first: Mutex<Option<Target>>,
    daemon: Option<(Target, usize)>,
    active: AtomicUsize,
}

impl Slots {
    /// A target for a new session, or `None` when busy.
    fn take(&self) -> Result<Option<Target>, String> {
        match &self.daemon {
            None => Ok(self.first.lock().expect("lock").take()),
            Some((t, max)) => {
                if self.active.fetch_add(1, Ordering::SeqCst) >= *max {
                    self.active.fetch_sub(1, Ordering::SeqCst);
                    return Ok(None);
                }
                match t {
                    Target::Dir(r) => match Root::open(&r.path) {
                        Ok(r) => Ok(Some(Target::Dir(r))),
                        Err(e) => {
                            self.active.fetch_sub(1, Ordering::SeqCst);
                            Err(e)
                        }
                    },
                    Target::Modules(m) => Ok(Some(Target::Modules(Arc::clone(m)))),
                }
            }
        }
    }

    fn release(&self) {
        if self.daemon.is_some() {
            self.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Accept connections until one sender has authenticated and its session has ended (with
/// `--daemon`: until stopped); a connection that fails its hello or key handshake is logged
/// and the run goes on.
fn serve(l: Listener, target: Target, opts: &RecvOptions, a: &RecvArgs) -> Result<RecvSummary> {
    let pending: Arc<Mutex<Pending>> = Arc::default();
    let draining = Arc::new(AtomicUsize::new(0));
    let slots = Arc::new(if a.daemon {
        Slots {
            first: Mutex::new(None),
            daemon: Some((
                {
                    // Each session opens DIR again: the check's partial directory goes now.
                    if let Target::Dir(r) = &target {
                        r.tidy_unchanged();
                    }
                    target
                },
                a.max_sessions as usize,
            )),
            active: AtomicUsize::new(0),
        }
    } else {
        Slots {
            first: Mutex::new(Some(target)),
            daemon: None,
            active: AtomicUsize::new(0),
        }
    });
    let busy: Arc<Mutex<Option<String>>> = Arc::default();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(String, RecvSummary), String>>();
    let idle = std::time::Duration::from_secs(a.idle_timeout.max(1));
    let l = Arc::new(l);
    // SIGTERM or SIGINT: the unix socket goes with the process (what was verified of an
    // unfinished file stays in its partial for a later run, as after a kill); a daemon stops.
    let path = match &*l {
        Listener::Unix(_, path) => Some(path.clone()),
        Listener::Tcp(_) => None,
    };
    if path.is_some() || a.daemon {
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ]) {
            std::thread::spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    if let Some(p) = &path {
                        let _ = std::fs::remove_file(p);
                    }
                    eprintln!("stripeguard recv: stopped by signal {sig}");
                    std::process::exit(128 + sig);
                }
            });
        }
    }
    {
        // Connections still in their hello or handshake after HANDSHAKE_SECS are cut.
        let pending = Arc::clone(&pending);
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(250));
            pending.lock().expect("lock").reap();
        });
    }
    {
        let (l, allowed, opts) = (Arc::clone(&l), a.allow_uid.clone(), opts.clone());
        std::thread::spawn(move || loop {
            let ((r, mut w, peer, set_idle, kill), ok) = match l.accept(&allowed) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("stripeguard recv: accept: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            if let Err(why) = ok {
                eprintln!("stripeguard recv: refused {peer}: {why}");
                stripeguard_xfer::proto::refuse(&mut w, &why);
                // Read what the sender sends meanwhile (at most 1 s, at most 16 at once), so
                // that closing does not reset the connection before it has read why.
                if draining.fetch_add(1, Ordering::SeqCst) < 16 {
                    set_idle(std::time::Duration::from_secs(1));
                    let d = Arc::clone(&draining);
                    let spawned = std::thread::Builder::new().spawn(move || {
                        let mut r = r;
                        let _ = std::io::copy(&mut (&mut r).take(1 << 16), &mut std::io::sink());
                        d.fetch_sub(1, Ordering::SeqCst);
                    });
                    if spawned.is_err() {
                        draining.fetch_sub(1, Ordering::SeqCst);
                    }
                } else {
                    draining.fetch_sub(1, Ordering::SeqCst);
                }
                continue;
            }
            // At most MAX_PENDING connections in their hello or handshake: a new one cuts the
            // oldest (a flood of silent connections cannot keep the real sender out for long,
            // and none lasts past HANDSHAKE_SECS).
            let id = pending.lock().expect("lock").add(kill, &peer);
            let (pending2, slots, busy, done_tx, opts) = (
                Arc::clone(&pending),
                Arc::clone(&slots),
                Arc::clone(&busy),
                done_tx.clone(),
                opts.clone(),
            );
            let spawned = std::thread::Builder::new().spawn(move || {
                let conn = stripeguard_xfer::accept(r, w, opts.key.as_ref());
                pending2.lock().expect("lock").remove(id);
                let conn = match conn {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("stripeguard recv: {peer}: {e} (still listening)");
                        return;
                    }
                };
                let taken = slots.take();
                let target = match taken {
                    Ok(Some(t)) => t,
                    Ok(None) => {
                        let who = busy.lock().expect("lock").clone().unwrap_or_default();
                        let mut conn = conn;
                        conn.refuse(&format!(
                            "busy: this receiver is already receiving from {who}"
                        ));
                        eprintln!("stripeguard recv: {peer}: told busy");
                        return;
                    }
                    Err(e) => {
                        let mut conn = conn;
                        conn.refuse(&e);
                        eprintln!("stripeguard recv: {peer}: {e}");
                        return;
                    }
                };
                *busy.lock().expect("lock") = Some(peer.clone());
                eprintln!("stripeguard recv: sender {peer}");
                set_idle(idle);
                let r = stripeguard_xfer::receive_on(conn, target, &opts).map_err(|e| match e {
                    stripeguard_xfer::proto::ProtoError::Io(io)
                        if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                    {
                        format!("no data from the sender {peer} for {} s (--idle-timeout); what was verified is kept for a later run", idle.as_secs())
                    }
                    e => e.to_string(),
                });
                slots.release();
                let _ = done_tx.send(r.map(|s| (peer, s)));
            });
            if let Err(e) = spawned {
                // Out of threads (a pids limit): this connection is dropped, the run goes on.
                pending.lock().expect("lock").remove(id);
                eprintln!("stripeguard recv: {e}: a connection dropped");
            }
        });
    }
    if a.daemon {
        // Each session's summary as it ends; the daemon runs until stopped.
        loop {
            match done_rx.recv() {
                Ok(Ok((peer, s))) => {
                    eprintln!("stripeguard recv: session from {peer} ended");
                    print_recv_summary(a, &s)?;
                }
                Ok(Err(e)) => eprintln!("stripeguard recv: a session failed: {e}"),
                Err(_) => return Err(failed("the listener stopped")),
            }
        }
    }
    let r = done_rx.recv().map_err(|_| failed("the listener stopped"));
    l.remove();
    r?.map(|(_, s)| s).map_err(failed)
}

pub fn send_cmd(a: SendArgs, m: &clap::ArgMatches) -> Result<ExitCode> {
    let filters = filters_in_order(m)?;
    // rsync's habits, always so here (see SendArgs): nothing to do for them.
    let _always = (
        a.archive,
        a.recursive,
        a.checksum,
        a.partial,
        a.partial_progress,
    );
    // Its pipes and socket end in errors, never in a silent SIGPIPE.
    crate::sigpipe::ignore();
    let opts = SendOptions {
        block_size: u32::try_from(a.block_size)
            .ok()
            .filter(|&b| (4096..=16 << 20).contains(&b) && b.is_power_of_two())
            .context("--block-size must be a power of two between 4K and 16M")?,
        retries: a.retries,
        verify_source: a.verify_source,
        manifest: a.manifest.clone(),
        key: read_key(a.key_file.as_deref())?,
        owner: a.owner,
        xattrs: a.xattrs,
        bwlimit: a.bwlimit,
        delete: a.delete,
        dry_run: a.dry_run,
        compress: a.compress.then_some(a.compress_level),
        quick: a.quick,
        whole_file: a.whole_file,
        hard_links: a.hard_links,
        specials: a.specials || a.specials_and_devices,
        devices: a.devices || a.specials_and_devices,
        numeric_ids: a.numeric_ids,
        filters,
        module: a.module.clone(),
        timeout: (a.timeout > 0).then(|| std::time::Duration::from_secs(a.timeout)),
        ..SendOptions::default()
    };
    let total: u64 = a.paths.iter().map(|p| tree_bytes(p)).sum();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "sending [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let mut sent = 0u64;
    let mut progress = |n: u64, retried: u64| {
        sent += n;
        bar.set_position(sent);
        if retried > 0 {
            bar.set_message(format!("({retried} block(s) resent)"));
        }
    };
    let mut child = None;
    let result = if let Some(to) = &a.to {
        if let Some(path) = to.strip_prefix("unix:") {
            let s = UnixStream::connect(path)
                .map_err(|e| failed(format!("cannot connect to unix:{path}: {e}")))?;
            // Only a receiver run by this user or root gets the files.
            let me = rustix::process::geteuid().as_raw();
            match rustix::net::sockopt::socket_peercred(&s) {
                Ok(c) if c.uid.as_raw() == me || c.uid.as_raw() == 0 => {}
                Ok(c) => return Err(failed(format!("the receiver at unix:{path} runs as uid {} (not you or root): not sending to it", c.uid.as_raw()))),
                Err(e) => return Err(failed(format!("unix:{path}: no peer credentials: {e}"))),
            }
            let r = s.try_clone()?;
            send(&a.paths, r, s, &opts, &mut progress)
        } else {
            let s = TcpStream::connect(to)
                .map_err(|e| failed(format!("cannot connect to {to}: {e}")))?;
            let _ = s.set_nodelay(true);
            let r = s.try_clone()?;
            send(&a.paths, r, s, &opts, &mut progress)
        }
    } else {
        let mut cmd = match (&a.ssh, &a.rsh) {
            (Some(target), rsh) => {
                let (host, dir) = target
                    .rsplit_once(':')
                    .context("--ssh takes [USER@]HOST:DIR")?;
                let shell = rsh.clone().unwrap_or_else(|| "ssh".into());
                let mut words = shell.split_whitespace();
                let mut c = Command::new(words.next().context("--rsh is empty")?);
                c.args(words).arg(host).arg(format!(
                    "{} recv --stdio --dir {}",
                    a.remote_stripeguard,
                    remote_dir(dir)
                ));
                c
            }
            (None, Some(rsh)) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(rsh);
                c
            }
            (None, None) => {
                bail!("give --to unix:PATH|HOST:PORT, --ssh [USER@]HOST:DIR, or --rsh CMD")
            }
        };
        let mut c = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the remote receiver")?;
        let r = c.stdout.take().expect("piped");
        let w = c.stdin.take().expect("piped");
        child = Some(c);
        send(&a.paths, r, w, &opts, &mut progress)
    };
    bar.finish_and_clear();
    // The transfer is over: from here a closed stdout (`send ... | head`) ends the command
    // quietly, as it ends `cat`, instead of a failed print.
    crate::sigpipe::default();
    if let Some(mut c) = child {
        // A transfer that failed does not wait for a remote shell that may never end.
        if result.is_err() {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
    let summary = result.map_err(failed)?;
    for n in &summary.not_sent {
        eprintln!("stripeguard send: not sent: {n}");
    }
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        if a.dry_run {
            for p in &summary.would_send {
                println!("would send {p}");
            }
            for p in &summary.would_delete {
                println!("would delete {p}");
            }
            println!(
                "dry run: {} entr(ies) would be sent or made, {} would be deleted, {} already there; nothing was changed",
                summary.would_send.len(),
                summary.would_delete.len(),
                summary.skipped
            );
        } else {
            println!(
                "sent {} file(s) ({} bytes in {} blocks), {} dir(s), {} symlink(s), {} already there; {} block(s) sent again after a failed read-back on the receiver's device; {} failed, {} special file(s) not sent",
                summary.files, summary.bytes_sent, summary.blocks_sent, summary.dirs, summary.symlinks, summary.skipped, summary.blocks_retried, summary.failed.len(), summary.not_sent.len()
            );
        }
        let extra: Vec<String> = [
            (summary.trusted, "trusted from the receiver's verification records (--quick), not read from its device"),
            (summary.blocks_copied, "block(s) copied from the receiver's old files (not sent)"),
            (summary.hardlinks, "hard link(s) made"),
            (summary.specials, "special file(s) made"),
            (summary.deleted.len() as u64, "deleted on the receiver"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if !extra.is_empty() {
            println!("  {}", extra.join("; "));
        }
        if a.compress && summary.bytes_sent > 0 {
            println!(
                "  compressed: {} bytes of blocks took {} on the wire",
                summary.bytes_sent, summary.wire_bytes
            );
        }
        if let Some(why) = &summary.delete_skipped {
            println!("  --delete: {why}");
        }
        for d in &summary.delete_kept {
            println!("  --delete: kept {d}: it holds names the filters exclude (as rsync, \"cannot delete non-empty directory\")");
        }
        for f in &summary.failed {
            println!("  FAILED {f}");
        }
    }
    Ok(ExitCode::from(if summary.failed.is_empty() {
        exit::OK
    } else {
        exit::FOUND
    }))
}

#[derive(Args)]
pub struct KeygenArgs {
    /// The key file to create (mode 0600; an existing file is never overwritten).
    file: PathBuf,
}

/// Write a new shared key for `send`/`recv --key-file`.
pub fn keygen(a: KeygenArgs) -> Result<ExitCode> {
    use std::os::unix::fs::OpenOptionsExt;
    let text = stripeguard_xfer::seal::new_key_text()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&a.file)
        .with_context(|| format!("cannot create {}", a.file.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    eprintln!(
        "wrote a new key to {} (copy it to the other end over a channel you trust)",
        a.file.display()
    );
    Ok(ExitCode::from(exit::OK))
}

fn read_key(path: Option<&std::path::Path>) -> Result<Option<[u8; 32]>> {
    let Some(p) = path else { return Ok(None) };
    let bytes =
        std::fs::read(p).with_context(|| format!("cannot read the key file {}", p.display()))?;
    stripeguard_xfer::seal::key_from_file(&bytes)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
}

fn tree_bytes(p: &std::path::Path) -> u64 {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| tree_bytes(&e.path()))
                    .sum()
            })
            .unwrap_or(0),
        Ok(m) if m.is_file() => m.len(),
        _ => 0,
    }
}

/// The receiving directory as the remote shell will see it: quoted, except a leading `~` or
/// `~/` (left for the remote shell to expand to the home directory, as rsync and scp do).
fn remote_dir(dir: &str) -> String {
    if dir == "~" {
        return "~".into();
    }
    match dir.strip_prefix("~/") {
        Some("") => "~/".into(),
        Some(rest) => format!("~/{}", shell_quote(rest)),
        None => shell_quote(dir),
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
