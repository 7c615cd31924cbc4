//! `stripeguard create`: make an array over member files or block devices (files created where
//! missing), and print its geometry.

use crate::progress::{count_bar, updater};
use crate::units::{format_bytes, format_size, parse_bytes, parse_size_f64};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_format::hex;
use stripeguard_integrity::Scheme;
use stripeguard_ops::{default_parity, CreateOnPaths};

fn parse_scheme(s: &str) -> Result<Scheme, String> {
    s.parse()
}

#[derive(Args)]
pub struct CreateArgs {
    /// Member files or block devices, in order (files that do not exist are created with --size).
    #[arg(required = true, num_args = 2..)]
    members: Vec<PathBuf>,
    /// Size of each member file to create (e.g. 64M).
    #[arg(long, value_parser = parse_bytes)]
    size: Option<u64>,
    /// RAID level: 5 (one parity) or 6 (two). Default: 6 with 6 or more members, else 5.
    #[arg(long, conflicts_with = "parity")]
    level: Option<u8>,
    /// Parity members (any k + m with Reed-Solomon), instead of --level.
    #[arg(long)]
    parity: Option<usize>,
    /// Integrity scheme: none, pure, hybrid1, hybrid2, hybrid-seq, checksum-chunk (Kroth & Yang:
    /// the last member holds each stripe's block CRCs), or auto (the paper's rule from
    /// --avg-write: hybrid1 for small writes, hybrid2 for large ones).
    #[arg(long, default_value = "hybrid-seq")]
    scheme: String,
    /// The workload's average write size, for --scheme auto (decimals allowed: 7.04K).
    #[arg(long, value_parser = parse_size_f64)]
    avg_write: Option<f64>,
    /// Chunk size.
    #[arg(long, default_value = "64K", value_parser = parse_bytes)]
    chunk: u64,
    /// Sector size (the appendix is one sector): 512 or 4096.
    #[arg(long, default_value = "512", value_parser = parse_bytes)]
    sector: u64,
    /// Parity appendices a first-read is cross-checked against: `one` (P only: the paper's
    /// cost, one extra read) or `all` (every parity: m extra reads; also catches a data unit and
    /// P that both lost a write while Q holds the newer version).
    #[arg(long, default_value = "one")]
    cross_check: stripeguard_integrity::CrossCheck,
    /// Take every member given from the stripeguard array it belongs to (as `--force-take` for
    /// each). Never covers foreign data or a device in use.
    #[arg(long)]
    force: bool,
    /// DEV holds a filesystem, partition table or other signature (found by libblkid): destroy
    /// it. Repeat for each device; a device in use is refused whatever the flags.
    #[arg(long, value_name = "DEV")]
    force_overwrite: Vec<PathBuf>,
    /// DEV is a member of another stripeguard array (not held by a running process): take it;
    /// that array loses the member. Repeat for each device.
    #[arg(long, value_name = "DEV")]
    force_take: Vec<PathBuf>,
    /// Erasure code: xor (RAID-5), raid6 (Linux md P+Q), rs (Reed-Solomon, any parity count),
    /// or the XOR-only RAID-6 codes rdp and tier (a chunk holds p-1 rows: the chunk size must be
    /// a multiple of them). Default: xor for one parity, raid6 for two, rs for more.
    #[arg(long)]
    code: Option<String>,
    /// Journal every write's I/Os (data and parity) before they go in place (like md's write
    /// journal): after a crash a chunk written but not flushed reads back entirely old or
    /// entirely new, the write hole is closed (a member lost before the resync costs nothing
    /// more), and a fault the resync finds is repaired and reported as corruption. Costs m + 1
    /// more copies of each write and a flush before it goes in place; at most 32 members.
    #[arg(long)]
    journal: bool,
    /// The array's name (1–32 of A-Z a-z 0-9 . _ -), for `scan`, `list`, `--array NAME` and
    /// the config file. Default: this host's name and the uuid's first 8 hex digits.
    #[arg(long, value_parser = parse_name)]
    name: Option<String>,
    /// Write every stripe now and zeros on TRIM, as builds before zero stripes did, so that
    /// such a build can still assemble the array. By default the array keeps zero stripes
    /// (incompatible feature bit 3, FORMAT.md §2.7): create writes metadata only, whatever the
    /// size, and TRIM / WRITE_ZEROES of whole stripes are a metadata update at the next flush.
    #[arg(long)]
    no_zero_stripes: bool,
    /// Keep the write journal (--journal) on this device instead of the members: a faster
    /// device in front of the members (md's --write-journal, ZFS's SLOG; FORMAT.md §2.12).
    /// Give it twice for a mirror of two. A file that does not exist is made at the size the
    /// journal needs. Give it again among the members to every later command (its label says
    /// what it is).
    #[arg(long, value_name = "DEV")]
    journal_device: Vec<PathBuf>,
    /// A hot spare (FORMAT.md §2.11): a device labelled for this array, rebuilt in place of a
    /// member that stays out for --spare-delay by the process serving the array. Repeat for
    /// up to 6; a file that does not exist is created at the member size.
    #[arg(long, value_name = "DEV")]
    spare: Vec<PathBuf>,
    /// Seconds a member stays out before a spare takes its place (default 30): a member that
    /// comes back sooner (an NBD member that dropped out for a moment) is re-added instead.
    #[arg(long, value_name = "SECONDS")]
    spare_delay: Option<u32>,
    /// Units found silently wrong on one member (by the process serving the array) at which a
    /// spare takes its place while it is still in (default 0: never).
    #[arg(long, value_name = "N")]
    spare_threshold: Option<u32>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_name(s: &str) -> Result<String, String> {
    stripeguard_integrity::check_name(s).map(|()| s.to_string())
}

pub fn run(a: CreateArgs) -> Result<ExitCode> {
    let n = a.members.len();
    let parity = match (a.level, a.parity) {
        (Some(5), _) => 1,
        (Some(6), _) => 2,
        (Some(l), _) => bail!("--level {l} is not supported (use 5 or 6, or --parity M)"),
        (None, Some(m)) => m,
        (None, None) => {
            // The checksum member is neither data nor parity.
            let extra = parse_scheme(&a.scheme).map_or(0, |s| s.extra_members());
            default_parity(n - extra.min(n))
        }
    };
    let scheme: Scheme = if a.scheme == "auto" {
        let avg = a.avg_write.context(
            "--scheme auto needs --avg-write SIZE (or run `stripeguard choose --trace FILE`)",
        )?;
        let rule = stripeguard_sim::choose_by_rule(n, parity, a.chunk, avg);
        if !a.json {
            println!("scheme auto: {}", rule.reason);
        }
        rule.scheme
    } else {
        parse_scheme(&a.scheme).map_err(anyhow::Error::msg)?
    };
    let code =
        match a.code.as_deref() {
            None => None,
            Some(name) => Some(stripeguard_integrity::CodeId::from_name(name).with_context(
                || format!("unknown code `{name}` (choose xor, raid6, rs, rdp or tier)"),
            )?),
        };
    if let Some(name) = &a.name {
        // Names are for finding arrays: a second array of one name is allowed (`--array` then
        // asks for the uuid), but it is most likely a mistake.
        if let Ok((_, cfg)) = stripeguard_ops::config::Config::load(None) {
            let others = stripeguard_ops::others_named(name, &cfg, &a.members);
            if !others.is_empty() {
                eprintln!(
                    "stripeguard: warning: an array called {name:?} already exists (uuid {}): `--array {name}` will have to be given a uuid instead",
                    others.join(", ")
                );
            }
        }
    }
    let req = CreateOnPaths {
        paths: a.members.clone(),
        size_bytes: a.size,
        parity,
        scheme,
        chunk_bytes: a.chunk,
        sector_bytes: a.sector,
        cross_check: a.cross_check,
        confirm: stripeguard_ops::Confirmations {
            overwrite: a.force_overwrite.clone(),
            take: a.force_take.clone(),
            take_all: a.force,
        },
        code,
        write_journal: a.journal,
        name: a.name.clone(),
        zero_stripes: !a.no_zero_stripes,
        journal_devices: a.journal_device.clone(),
    };
    // The spares are probed before anything is written: a refused spare refuses the create.
    for sp in &a.spare {
        if a.members.contains(sp) {
            bail!("{} is given as a member and as a spare", sp.display());
        }
        if stripeguard_ops::member_exists(sp) {
            stripeguard_ops::Target::open(sp, false)?.judge(None, &req.confirm)?;
        }
    }
    if a.spare.len() > stripeguard_format::MAX_SPARES {
        bail!(
            "{} spares given; an array lists at most {}",
            a.spare.len(),
            stripeguard_format::MAX_SPARES
        );
    }
    let bar = count_bar("initialising stripes");
    let result = req.run(&mut updater(&bar));
    bar.finish_and_clear();
    let array = result?;
    if a.spare_delay.is_some() || a.spare_threshold.is_some() {
        let d = stripeguard_format::SparePolicy::default();
        array.set_spare_policy(stripeguard_format::SparePolicy {
            delay_seconds: a.spare_delay.unwrap_or(d.delay_seconds),
            error_threshold: a.spare_threshold.unwrap_or(d.error_threshold),
        })?;
    }
    for sp in &a.spare {
        if let Err(e) = stripeguard_ops::spares::add_spare(&array, sp, false, &req.confirm) {
            let _ = array.close();
            bail!(
                "the array was created, but {} could not be added as its spare: {e} (`stripeguard add-spare` adds it later)",
                sp.display()
            );
        }
    }
    let spares = stripeguard_ops::spares::spare_states(&array);
    let m = parity;
    let sb = array.superblock().clone();
    let cap = array.capacity_bytes();
    array.close()?;
    if a.json {
        println!(
            "{}",
            json!({"uuid": hex(&sb.array_uuid), "name": sb.name, "members": n, "data_chunks": sb.data_chunks, "parity_chunks": m,
                   "code": sb.code.name(), "scheme": sb.scheme.name(), "chunk_bytes": sb.chunk_bytes,
                   "sector_bytes": sb.sector_bytes(), "stripes": sb.stripes, "capacity_bytes": cap,
                   "write_journal": sb.write_journal, "zero_stripes": sb.zero_stripes,
                   "spares": spares})
        );
    } else {
        println!(
            "created array {} ({}): {} data + {} parity ({}){}, scheme {}{}, chunk {}, {} stripes, capacity {} bytes ({})",
            sb.name,
            hex(&sb.array_uuid),
            sb.data_chunks,
            m,
            sb.code.name(),
            if sb.scheme.extra_members() > 0 { " + a checksum member" } else { "" },
            sb.scheme.name(),
            if sb.write_journal { ", write journal" } else { "" },
            format_size(sb.chunk_bytes as usize),
            sb.stripes,
            cap,
            format_bytes(cap)
        );
        for sp in &spares {
            println!("hot spare {} ({})", sp.path, sp.uuid);
        }
    }
    Ok(ExitCode::from(crate::exit::OK))
}
