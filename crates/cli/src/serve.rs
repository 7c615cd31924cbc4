//! `stripeguard serve`: parse, assemble, hand the array to the NBD server, print.

use crate::cmd::shared::{assemble, MembersArgs};
use crate::exit;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use stripeguard_serve::ArrayExport;
use stripeguard_serve::{Listener, Server, ServerConfig};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub array: MembersArgs,
    /// Listen on this unix socket (the file is created, and removed when the server stops).
    #[arg(long, conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP address (default 127.0.0.1:10809, NBD's port, when --socket is not
    /// given). NBD has no authentication: an address other than loopback needs --allow-remote.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Allow --listen on an address other than loopback; needs --tls-certificates (or
    /// --no-tls).
    #[arg(long)]
    pub allow_remote: bool,
    /// Require TLS of every client, X.509 with client certificates (NBD has no other
    /// authentication): DIR holds ca-cert.pem (clients' certificates must chain to it),
    /// server-cert.pem and server-key.pem, as nbdkit's --tls-certificates and qemu's
    /// tls-creds-x509 lay it out.
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,
    /// With --allow-remote: serve in the clear anyway (anyone who can reach the address can
    /// read and write the array).
    #[arg(long, requires = "allow_remote", conflicts_with = "tls_certificates")]
    pub no_tls: bool,
    /// The export's name (clients asking for the default export "" get it too).
    #[arg(long, default_value = "stripeguard", value_parser = export_name)]
    pub export: String,
    /// Serve read-only (the array is assembled without writing anything to it).
    #[arg(long)]
    pub read_only: bool,
    /// Connections served at once; more are refused.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_connections: u32,
    /// Worker threads executing requests (shared by all connections). Default 8, or 32 when a
    /// member is an NBD export (its requests wait on the network, not on a core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Print a JSON summary of the session when the server stops.
    #[arg(long)]
    pub json: bool,
    /// No line per connection or failed request on stderr (failed requests are at most 20
    /// lines a second anyway; the rest are counted in a line of their own).
    #[arg(long)]
    pub quiet: bool,
    /// Serve Prometheus metrics of the array and the NBD front end at http://ADDR/metrics
    /// (e.g. 127.0.0.1:9750; the configuration's `metrics` for `--array NAME` when not given).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// On SIGTERM (or `stripeguard stop`), how long to go on serving the clients still
    /// connected before stopping anyway (a second SIGTERM stops at once; still clean).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub stop_timeout: u64,
}

/// What systemd is told when a stop begins.
const STOPPING: &str =
    "STOPPING=1\nSTATUS=stopping: serving the connected clients until they leave, then closing the array clean";

pub fn serve(mut a: ServeArgs) -> Result<ExitCode> {
    // Under systemd (Type=notify): while the members are waited for (`wait` in the
    // configuration) and the array is assembled (a resync can take hours), the start timeout
    // is extended every 10 s; READY=1 once it serves.
    let assembling = Arc::new(AtomicBool::new(true));
    let notifier = stripeguard_ops::sdnotify::Notifier::from_env().map(|n| {
        let (n, assembling) = (Arc::new(n), Arc::clone(&assembling));
        let keep = Arc::clone(&n);
        std::thread::spawn(move || {
            let began = std::time::Instant::now();
            while assembling.load(Ordering::Relaxed) {
                keep.send(&format!(
                    "EXTEND_TIMEOUT_USEC=30000000\nSTATUS=finding the members (late ones waited for) and assembling the array (resyncing it if it was not closed clean): {} s",
                    began.elapsed().as_secs()
                ));
                for _ in 0..100 {
                    if !assembling.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
        });
        n
    });
    let resolved = a.array.resolve(true);
    if resolved.is_err() {
        assembling.store(false, Ordering::Relaxed);
    }
    resolved?;
    // TLS credentials are read before the array is opened: a bad file fails without touching it.
    let tls = match &a.tls_certificates {
        Some(dir) => Some(
            stripeguard_serve::TlsConfig::from_dir(dir)
                .map_err(|e| anyhow::anyhow!("--tls-certificates: {e}"))?,
        ),
        None => None,
    };
    // Prometheus metrics, when asked: bound before the array is opened, so a bad or busy
    // address fails without touching it.
    let metrics_addr = a
        .metrics
        .clone()
        .or_else(|| a.array.configured().and_then(|c| c.metrics));
    let metrics_listener = match &metrics_addr {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .with_context(|| format!("cannot listen for metrics on {addr}"))?,
        ),
        None => None,
    };
    // Assemble first, then listen: a socket that exists means a server that is ready (and that
    // holds the array), which is what scripts waiting for it rely on.
    let assembled = assemble(&a.array, !a.read_only);
    assembling.store(false, Ordering::Relaxed);
    let array = assembled?;
    let listener = match bind(&a) {
        Ok(l) => l,
        Err(e) => {
            array.close().context("closing the array")?;
            return Err(e);
        }
    };
    // Every event from here on is a line on stderr and a syslog message (also of the array an
    // online reshape ends with).
    let quiet = a.quiet;
    let prepare = move |array: &stripeguard_engine::Array| {
        if !quiet {
            stripeguard_ops::log_events(array, "stripeguard serve");
        }
        array.enable_appendix_cache(stripeguard_engine::APPENDIX_CACHE_ENTRIES);
    };
    prepare(&array);
    let held = Arc::new(stripeguard_engine::HeldArray::new(array));
    let reshaper = stripeguard_ops::ReshapeSlot::new(Arc::clone(&held), Box::new(prepare));
    let array = held.array();
    let export = Arc::new(ArrayExport::new(Arc::clone(&held)));
    let server = Server::new(
        export,
        ServerConfig {
            export_name: a.export.clone(),
            read_only: a.read_only,
            max_connections: a.max_connections as usize,
            workers: a
                .threads
                .unwrap_or(if array.has_remote_members() { 32 } else { 8 })
                as usize,
            log: !a.quiet,
            stop_timeout: std::time::Duration::from_secs(a.stop_timeout),
            tls,
            ..ServerConfig::default()
        },
    );
    // SIGTERM and SIGINT stop the server gracefully: no new clients, the connected ones served
    // until they leave (--stop-timeout), in-flight requests finished, the array flushed and
    // marked clean. A second signal skips the wait (still clean); a third kills as the default
    // would (an init system's SIGKILL comes after its own timeout anyway).
    let stop = Arc::new(AtomicBool::new(false));
    let hurry = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("installing a signal handler")?;
    {
        let (stop, hurry) = (Arc::clone(&stop), Arc::clone(&hurry));
        std::thread::Builder::new()
            .name("sg-signals".into())
            .spawn(move || {
                for (n, _) in signals.forever().enumerate() {
                    match n {
                        0 => {
                            stripeguard_ops::sdnotify::notify(STOPPING);
                            stop.store(true, Ordering::Relaxed);
                        }
                        1 => hurry.store(true, Ordering::Relaxed),
                        _ => std::process::exit(130),
                    }
                }
            })
            .context("starting the signal thread")?;
    }
    // A client that disappears must not kill the server with SIGPIPE (main resets it to the
    // default for the printing commands).
    crate::sigpipe::ignore();
    let info = server.export_info();
    let where_ = match &listener {
        Listener::Tcp(l) => format!(
            "nbd://{}/{}",
            l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            info.name
        ),
        Listener::Unix(_, p) => format!("nbd+unix:///{}?socket={}", info.name, p.display()),
    };
    if let Some(n) = &notifier {
        n.send(&format!(
            "READY=1\nSTATUS=serving {} at {where_}",
            info.description
        ));
    }
    if !a.quiet {
        eprintln!(
            "stripeguard serve: {} ({} bytes{}) at {where_}; SIGTERM or Ctrl-C stops it cleanly",
            info.description,
            info.size_bytes,
            if a.read_only { ", read-only" } else { "" }
        );
    }
    let stats = server.stats();
    let counters = || {
        stats
            .snapshot()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    // `stripeguard stop`: refused while clients are connected unless forced.
    let stats_for_stop = server.stats();
    let stop_request = |force: bool| -> std::result::Result<(), String> {
        let now = stats_for_stop.connections_now.load(Ordering::Relaxed);
        if now > 0 && !force {
            return Err(format!(
                "{now} client(s) connected; disconnect them first, or `stripeguard stop --force` (which cuts them off at once)"
            ));
        }
        stripeguard_ops::sdnotify::notify(STOPPING);
        stop.store(true, Ordering::Relaxed);
        if force {
            hurry.store(true, Ordering::Relaxed);
        }
        Ok(())
    };
    let stats_for_latency = server.stats();
    let latency = || {
        stripeguard_serve::LATENCY_COMMANDS
            .iter()
            .zip(&stats_for_latency.latency)
            .map(|(command, l)| {
                let (counts, sum_us) = l.snapshot();
                stripeguard_ops::metrics::LatencyHistogram {
                    command: command.to_string(),
                    bounds_seconds: stripeguard_serve::LATENCY_BOUNDS_US
                        .iter()
                        .map(|&us| us as f64 / 1e6)
                        .collect(),
                    counts,
                    sum_seconds: sum_us as f64 / 1e6,
                }
            })
            .collect()
    };
    let hooks = stripeguard_ops::HolderHooks {
        front_end: &counters,
        latency: Some(&latency),
        stop: Some(&stop_request),
        reshape: Some(&reshaper),
    };
    let metrics_stop = AtomicBool::new(false);
    let uuid = array.superblock().array_uuid;
    let served = std::thread::scope(|scope| {
        if let Some(l) = metrics_listener {
            let (held, metrics_stop) = (&held, &metrics_stop);
            scope.spawn(move || {
                stripeguard_ops::metrics::serve_http(l, metrics_stop, &|| {
                    let array = held.array();
                    // This holder's own live status (through its control socket, as any
                    // other process would see it), with its counters by kind.
                    let mut m = match stripeguard_ops::ask_holder(&uuid) {
                        Ok(live) => stripeguard_ops::metrics::ArrayMetrics::from_live(
                            &live,
                            Some(&array.counters()),
                        ),
                        Err(_) => return String::new(),
                    };
                    // The counts from the durable log, as `metrics` gives them whether the
                    // array is held or not.
                    let members: Vec<_> = (0..usize::from(array.superblock().members))
                        .filter_map(|i| array.member_disk(i))
                        .collect();
                    stripeguard_ops::metrics::log_totals(&mut m, &members);
                    let sb = array.superblock();
                    m.level = stripeguard_ops::metrics::level(
                        sb.parity_chunks,
                        sb.code.name(),
                        sb.data_chunks,
                    );
                    m.scheme = sb.scheme.name().to_string();
                    stripeguard_ops::metrics::render(&[m])
                });
            });
        }
        // The server runs throughout; the control socket answers for the holder's array, and
        // starts again on the new one when an online reshape has replaced it.
        let server = scope.spawn(|| server.run(listener, &stop, &hurry));
        loop {
            let array = held.array();
            let generation = reshaper.generation();
            stripeguard_ops::with_control_socket_hooks(&array, &hooks, || {
                while !server.is_finished() && reshaper.generation() == generation {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            });
            if server.is_finished() {
                break;
            }
        }
        metrics_stop.store(true, Ordering::Relaxed);
        server
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the server thread panicked")))
    });
    served.context("serving")?;
    drop(server);
    drop(array);
    // A reshape asked of this holder finishes (or stops on an error) before the array closes.
    if reshaper.status().is_some_and(|s| s.running) && !a.quiet {
        eprintln!("stripeguard serve: waiting for the reshape to finish before closing the array");
    }
    while reshaper.status().is_some_and(|s| s.running) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(reshaper);
    // (The reshape's thread lets go of the array a moment after it says it has finished.)
    let mut held = held;
    let mut tries = 0;
    let held = loop {
        match Arc::try_unwrap(held) {
            Ok(h) => break h,
            Err(h) if tries < 50 => {
                held = h;
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(_) => anyhow::bail!("the array is still in use after the server stopped"),
        }
    };
    let array = held.array();
    let c = array.counters();
    let words = if held.reshaping() {
        "let go mid-reshape (`grow --continue` with every member finishes it)".to_string()
    } else {
        stripeguard_ops::closing_words(&array)
    };
    let out = array.health().iter().filter(|h| h.failed.is_some()).count();
    drop(array);
    let snapshot = stats.snapshot();
    held.close().context("closing the array")?;
    if a.json {
        let mut m = serde_json::Map::new();
        for (k, v) in &snapshot {
            m.insert((*k).to_string(), (*v).into());
        }
        m.insert("repaired".into(), c.repaired.into());
        m.insert("located".into(), c.located.into());
        m.insert("unrecoverable".into(), c.unrecoverable.into());
        m.insert("members_failed".into(), c.members_failed.into());
        m.insert("members_out".into(), out.into());
        println!("{}", serde_json::Value::Object(m));
    } else if !a.quiet {
        eprintln!("stripeguard serve: stopped; array flushed and {words}");
    }
    Ok(ExitCode::from(
        if c.located > 0 || c.unrecoverable > 0 || out > 0 {
            exit::FOUND
        } else {
            exit::OK
        },
    ))
}

fn bind(a: &ServeArgs) -> Result<Listener> {
    if let Some(path) = &a.socket {
        if path.exists() {
            // A socket left by a server that was killed can be replaced; anything else is not ours.
            use std::os::unix::fs::FileTypeExt;
            let meta = std::fs::symlink_metadata(path)?;
            if !meta.file_type().is_socket() {
                bail!("{} exists and is not a socket", path.display());
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!("{} is in use by a running server", path.display());
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale socket {}", path.display()))?;
        }
        let l = UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        return Ok(Listener::Unix(l, path.clone()));
    }
    let addr = a
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 10809)));
    if !addr.ip().is_loopback() {
        if !a.allow_remote {
            bail!("--listen {addr} is not a loopback address; NBD has no authentication of its own, so anyone who can reach it could read and write the array. Add --allow-remote with --tls-certificates DIR (clients then need a certificate), or serve on --socket and tunnel through ssh");
        }
        if a.tls_certificates.is_none() && !a.no_tls {
            bail!("--allow-remote needs --tls-certificates DIR (TLS with client certificates: NBD has no other authentication), or --no-tls to serve in the clear anyway");
        }
        if a.no_tls {
            eprintln!("stripeguard serve: WARNING: listening on {addr} without authentication or encryption (--no-tls): anyone who can reach it can read and write the array");
        }
    }
    let l = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    Ok(Listener::Tcp(l))
}

/// An export name clients can ask for: at most 4,096 bytes (the protocol's limit on strings),
/// no control characters (NUL is refused by the protocol, a newline would break the logs).
fn export_name(s: &str) -> std::result::Result<String, String> {
    if s.len() > stripeguard_nbd::proto::MAX_NAME_BYTES {
        return Err(format!(
            "{} bytes; an NBD export name has at most {}",
            s.len(),
            stripeguard_nbd::proto::MAX_NAME_BYTES
        ));
    }
    if s.chars().any(char::is_control) {
        return Err("an export name has no control characters".into());
    }
    Ok(s.to_string())
}
