//! `stripeguard send` / `recv`: parse, connect, call stripeguard-xfer, print.

use crate::exit;
use crate::units::parse_size;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use stripeguard_xfer::{receive, send, RecvOptions, SendOptions};

#[derive(Args)]
pub struct SendArgs {
    /// Files and directories to send (a file lands as DIR/NAME, a directory as DIR/NAME/...).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// A receiver listening there (`stripeguard recv --listen`).
    #[arg(long, conflicts_with_all = ["ssh", "rsh"])]
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
    /// Keep owners (uid and gid; the receiver must run as root to apply others').
    #[arg(long)]
    owner: bool,
    /// Keep extended attributes.
    #[arg(long)]
    xattrs: bool,
    /// A shared key (a file of at least 16 random bytes) to answer a receiver that requires
    /// one (`recv --key-file`).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Write a manifest (every file's size and the hash of every block; paths relative to the
    /// receiving DIR) for `stripeguard verify-manifest DIR FILE` later.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
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

#[derive(Args)]
pub struct RecvArgs {
    /// Where received files land (created if missing; nothing is ever written outside it).
    #[arg(long)]
    dir: PathBuf,
    /// Listen on this address for one sender (loopback unless --allow-remote).
    #[arg(long, conflicts_with = "stdio")]
    listen: Option<SocketAddr>,
    /// Talk to the sender over standard input and output (what --ssh runs).
    #[arg(long)]
    stdio: bool,
    /// Listen on a non-loopback address (needs --key-file: the sender must prove it holds the
    /// key). There is no encryption on a raw connection; use --ssh across networks you do not
    /// trust.
    #[arg(long)]
    allow_remote: bool,
    /// Do not verify blocks from the device (acknowledge once written; fsync each file at its
    /// end, like `rsync --fsync`). Only for measuring what verification costs.
    #[arg(long)]
    no_verify: bool,
    /// Require the sender to prove it holds this shared key (challenge-response, BLAKE3-keyed).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Print a JSON summary (on stderr with --stdio, whose stdout is the protocol).
    #[arg(long)]
    json: bool,
    /// With --listen: give up when the sender sends nothing for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    idle_timeout: u64,
}

/// The transfer's pipes and socket end in errors, never in a silent SIGPIPE (main restores
/// the default for `| head`).
fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to ignore.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

pub fn recv(a: RecvArgs) -> Result<ExitCode> {
    ignore_sigpipe();
    let key = read_key(a.key_file.as_deref())?;
    let opts = RecvOptions {
        dir: a.dir.clone(),
        verify: !a.no_verify,
        key,
        // Test only (the extreme-injection test): see FORMAT.md §5.
        test_hook: std::env::var("STRIPEGUARD_XFER_TEST_HOOK").ok(),
    };
    let summary = if a.stdio {
        receive(std::io::stdin().lock(), std::io::stdout(), &opts)?
    } else {
        let addr = a
            .listen
            .context("give --listen 127.0.0.1:PORT or --stdio")?;
        let authenticated_remote = a.allow_remote && a.key_file.is_some();
        if !(addr.ip().is_loopback() || authenticated_remote) {
            bail!("--listen {addr} is not a loopback address: anyone who reaches it could write into {}. Give --allow-remote with --key-file (the sender proves it holds the key), or use --ssh from the sender", a.dir.display());
        }
        let l = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        eprintln!("stripeguard recv: listening on {}", l.local_addr()?);
        let (s, peer) = l.accept()?;
        let _ = s.set_nodelay(true);
        eprintln!("stripeguard recv: sender {peer}");
        // One sender per run: later ones are told so instead of waiting in the backlog.
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    stripeguard_xfer::proto::refuse(
                        &mut c,
                        &format!("busy: this receiver is already receiving from {peer}"),
                    );
                    // Read what the sender has sent meanwhile, so closing does not reset the
                    // connection before it has read why.
                    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                    let _ = std::io::copy(&mut c, &mut std::io::sink());
                });
            }
        });
        // A sender that goes silent must not hold the directory forever.
        let idle = std::time::Duration::from_secs(a.idle_timeout.max(1));
        s.set_read_timeout(Some(idle))?;
        let w = s.try_clone()?;
        receive(s, w, &opts).map_err(|e| match e {
            stripeguard_xfer::proto::ProtoError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                anyhow::anyhow!(
                    "no data from the sender {peer} for {} s (--idle-timeout); what was verified is kept for a later run",
                    idle.as_secs()
                )
            }
            e => e.into(),
        })?
    };
    let line = serde_json::to_string(&summary)?;
    if a.json {
        eprintln!("{line}");
    } else {
        eprintln!(
            "stripeguard recv: {} file(s) verified on the device, {} already there, {} failed; {} block(s) verified, {} mismatched on read-back and sent again",
            summary.files,
            summary.skipped,
            summary.failed.len(),
            summary.blocks_verified,
            summary.blocks_mismatched
        );
    }
    Ok(ExitCode::from(if summary.failed.is_empty() {
        exit::OK
    } else {
        exit::FOUND
    }))
}

pub fn send_cmd(a: SendArgs) -> Result<ExitCode> {
    ignore_sigpipe();
    for p in &a.paths {
        std::fs::symlink_metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
    }
    let opts = SendOptions {
        block_size: u32::try_from(a.block_size)
            .ok()
            .filter(|&b| (4096..=16 << 20).contains(&b))
            .context("--block-size must be between 4K and 16M")?,
        retries: a.retries,
        verify_source: a.verify_source,
        manifest: a.manifest.clone(),
        key: read_key(a.key_file.as_deref())?,
        owner: a.owner,
        xattrs: a.xattrs,
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
    let summary = if let Some(to) = &a.to {
        let s = TcpStream::connect(to).with_context(|| format!("cannot connect to {to}"))?;
        let _ = s.set_nodelay(true);
        let r = s.try_clone()?;
        send(
            &a.paths,
            r,
            std::io::BufWriter::with_capacity(1 << 20, s),
            &opts,
            &mut progress,
        )?
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
                    shell_quote(dir)
                ));
                c
            }
            (None, Some(rsh)) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(rsh);
                c
            }
            (None, None) => bail!("give --to HOST:PORT, --ssh [USER@]HOST:DIR, or --rsh CMD"),
        };
        let mut c = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the remote receiver")?;
        let r = c.stdout.take().expect("piped");
        let w = c.stdin.take().expect("piped");
        child = Some(c);
        send(
            &a.paths,
            r,
            std::io::BufWriter::with_capacity(1 << 20, w),
            &opts,
            &mut progress,
        )?
    };
    bar.finish_and_clear();
    if let Some(mut c) = child {
        let _ = c.wait();
    }
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "sent {} file(s) ({} bytes in {} blocks), {} already there; {} block(s) sent again after a failed read-back on the receiver's device",
            summary.files, summary.bytes_sent, summary.blocks_sent, summary.skipped, summary.blocks_retried
        );
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

fn read_key(path: Option<&std::path::Path>) -> Result<Option<[u8; 32]>> {
    let Some(p) = path else { return Ok(None) };
    let bytes =
        std::fs::read(p).with_context(|| format!("cannot read the key file {}", p.display()))?;
    stripeguard_xfer::proto::key_from_file(&bytes)
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

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
