//! `stripeguard create | status | write | read | inject | demo | campaign`: the array commands.
//! Parsing and printing only; the engine decides everything.

use crate::exit;
use crate::progress::{count_bar, updater};
use crate::units::{format_bytes, format_size, parse_bytes, parse_shape, parse_size_f64};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use stripeguard_campaign::{campaign_cases, run_campaign, run_demo};
use stripeguard_disk::{Disk, DiskError, FaultKind, FileDisk};
use stripeguard_engine::{
    read_log_of, scrub, Array, AssembleOptions, Checkpoint, Counters, EngineError, EventKind,
    EventRole, LoggedEvent, ScrubOptions,
};
use stripeguard_integrity::{Scheme, Superblock};
use stripeguard_ops::{
    ask_holder, ask_holder_replace, assemble_paths, assemble_paths_with, default_parity,
    open_member_paths, peek_uuid, with_control_socket, CreateOnPaths,
};

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
    /// Overwrite members that already hold a stripeguard array.
    #[arg(long)]
    force: bool,
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
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct MembersArgs {
    /// The array's member files or block devices, in member order.
    #[arg(required = true)]
    pub(crate) members: Vec<PathBuf>,
    /// Open members with O_DIRECT (reads reach the device, not the page cache).
    #[arg(long)]
    pub(crate) direct: bool,
    /// Refuse at once when another process may hold the array, instead of waiting for it (a
    /// holder on another host whose heartbeat looks stale is otherwise watched for two of its
    /// heartbeat intervals, at most 2 minutes; `status` otherwise gives a holder that is
    /// starting up 5 s to answer).
    #[arg(long)]
    pub(crate) no_wait: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Also read and check every stripe (read-only: reports damage, repairs nothing).
    #[arg(long)]
    check: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Check only: repair nothing, write nothing (the same walk as `status --check`).
    #[arg(long)]
    check_only: bool,
    /// Limit the rate of member reads, in MB/s (decimals allowed).
    #[arg(long)]
    rate: Option<f64>,
    /// Start from the first stripe even when an interrupted scrub could be resumed.
    #[arg(long)]
    restart: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The member to rebuild (its index: its position in the member list).
    #[arg(long)]
    member: usize,
    /// The new file or block device (a file that does not exist is created at the member size).
    #[arg(long)]
    with: PathBuf,
    /// Retire a healthy member, overwrite a device holding an array, or abandon an interrupted
    /// replace onto another device.
    #[arg(long)]
    force: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct EventsArgs {
    /// The array's member files or block devices (read without taking the array: works while
    /// another process holds it).
    #[arg(required = true)]
    members: Vec<PathBuf>,
    /// Only events newer than this: Unix seconds, or an age such as 90s, 10m, 2h, 3d.
    #[arg(long)]
    since: Option<String>,
    /// Keep watching and print new events as they are logged (every second).
    #[arg(long)]
    follow: bool,
    /// Run this shell command for each new event, with SG_EVENT_{NUMBER,TIME_MS,KIND,ACTION,
    /// STRIPE,MEMBER,POSITION,ROLE,EVIDENCE} in its environment (as ZFS's event daemon does).
    #[arg(long)]
    exec: Option<String>,
    /// Print JSON (one object per line with --follow).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ClearArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The stripe whose listed untrusted blocks to zero-fill (`status` lists them).
    #[arg(long)]
    stripe: u64,
    /// Print the ranges cleared as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct WriteArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Array byte offset to write at.
    #[arg(long, default_value = "0", value_parser = parse_bytes)]
    offset: u64,
    /// File to write (default: standard input).
    #[arg(long, short = 'i')]
    input: Option<PathBuf>,
    /// Print the report as JSON (on stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReadArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Array byte offset to read from.
    #[arg(long, default_value = "0", value_parser = parse_bytes)]
    offset: u64,
    /// Bytes to read (default: to the end of the array).
    #[arg(long, value_parser = parse_bytes)]
    length: Option<u64>,
    /// Output file (default: standard output). Written to a temporary file beside it and
    /// renamed when every byte was read, so a failed read leaves no partial file; a device or
    /// FIFO (`/dev/null`, a named pipe) is written in place.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// On failure, keep the bytes read before the bad stripe in --output.
    #[arg(long, requires = "output")]
    keep_partial: bool,
    /// Print the report as JSON (on stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct InjectArgs {
    /// The member file to damage (the array must be stopped).
    member: PathBuf,
    /// bit-rot, torn-write, misdirected-write, misdirected-write-unaligned, or overwrite
    /// (random bytes over --count chunks, as `dd if=/dev/urandom` would). Lost writes, misdirected
    /// reads and latent sector errors happen during I/O: see `stripeguard demo` and `campaign`.
    #[arg(long)]
    fault: String,
    /// Chunk (unit) number on the member: the target.
    #[arg(long, default_value_t = 0)]
    chunk: u64,
    /// misdirected-write: the unit overwritten (default: the next one).
    #[arg(long)]
    victim: Option<u64>,
    /// misdirected-write-unaligned: sector shift (default 1); torn-write: sectors kept (default 1).
    #[arg(long)]
    sectors: Option<u64>,
    /// overwrite: units to overwrite from --chunk on.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Seed for the random bytes and bit positions (default: a fresh one, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DemoArgs {
    /// Keep every case's member files in this directory (one subdirectory per case) instead of
    /// a temporary directory that is removed.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct CampaignArgs {
    /// Operations per (shape, scheme, fault kind, degraded) case.
    #[arg(long, default_value_t = 2000)]
    ops: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Shapes (k+m), comma-separated.
    #[arg(long, default_value = "1+1,1+2,4+1,6+2,10+4")]
    shapes: String,
    /// Schemes, comma-separated, or `all`.
    #[arg(long, default_value = "all")]
    schemes: String,
    /// Stripes per array.
    #[arg(long, default_value_t = 64)]
    stripes: u64,
    /// The crash campaign instead: random writes and flushes, a power cut at a random point
    /// (random subsets of unflushed writes landed, some torn), reassembly with resync, and a
    /// check against what was flushed; --ops is then the crashes per case.
    #[arg(long)]
    crash: bool,
    /// With --crash: one member out of the array from the start (the degraded write hole).
    #[arg(long, requires = "crash")]
    degraded: bool,
    /// With --crash: arrays with the write journal (`create --journal`); then a chunk written
    /// but not flushed must read back whole (old or new) in every stripe and scheme.
    #[arg(long, requires = "crash")]
    journal: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn assemble(a: &MembersArgs, writable: bool) -> Result<Array> {
    let opts = AssembleOptions {
        writable,
        no_wait: a.no_wait,
        ..AssembleOptions::default()
    };
    let array = assemble_paths_with(&a.members, a.direct, &opts)?;
    for h in array.health() {
        if let Some(why) = &h.failed {
            eprintln!(
                "stripeguard: WARNING: member {} ({}) is out of the array: {why}; running DEGRADED{}",
                h.index,
                h.name,
                if writable {
                    " — the other members' superblocks now record it as gone, so it will not be taken back as current; replace it"
                } else {
                    ""
                }
            );
        }
    }
    Ok(array)
}

pub fn create(a: CreateArgs) -> Result<ExitCode> {
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
    let req = CreateOnPaths {
        paths: a.members.clone(),
        size_bytes: a.size,
        parity,
        scheme,
        chunk_bytes: a.chunk,
        sector_bytes: a.sector,
        cross_check: a.cross_check,
        force: a.force,
        code,
        write_journal: a.journal,
    };
    let bar = count_bar("initialising stripes");
    let result = req.run(&mut updater(&bar));
    bar.finish_and_clear();
    let array = result?;
    let m = parity;
    let sb = array.superblock().clone();
    let cap = array.capacity_bytes();
    array.close()?;
    if a.json {
        println!(
            "{}",
            json!({"uuid": hex(&sb.array_uuid), "members": n, "data_chunks": sb.data_chunks, "parity_chunks": m,
                   "code": sb.code.name(), "scheme": sb.scheme.name(), "chunk_bytes": sb.chunk_bytes,
                   "sector_bytes": sb.sector_bytes(), "stripes": sb.stripes, "capacity_bytes": cap,
                   "write_journal": sb.write_journal})
        );
    } else {
        println!(
            "created array {}: {} data + {} parity ({}){}, scheme {}{}, chunk {}, {} stripes, capacity {} bytes ({})",
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
    }
    Ok(ExitCode::from(crate::exit::OK))
}

fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::to_value(c).expect("serializable")
}

/// Events shown in human output (all of them are in `--json`).
const EVENTS_SHOWN: usize = 20;

/// Print the first events: to stderr for read/write (whose stdout may carry data), to stdout
/// for status.
fn print_events(array: &Array, to_stdout: bool) {
    let events = array.events();
    let k = array.superblock().data_chunks as usize;
    let mut lines = Vec::new();
    if events.len() > EVENTS_SHOWN {
        lines.push(format!(
            "  (first {EVENTS_SHOWN} of {} events; --json lists them all)",
            events.len()
        ));
    }
    for e in events.into_iter().take(EVENTS_SHOWN) {
        lines.push(format!(
            "  stripe {} member {} ({}): {} — {} [{:?}]",
            e.stripe,
            e.member,
            stripeguard_engine::unit_label(e.role, e.position, k),
            e.kind,
            e.evidence,
            e.action
        ));
    }
    for l in lines {
        if to_stdout {
            println!("{l}");
        } else {
            eprintln!("{l}");
        }
    }
}

pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let array = match assemble_paths(&a.array.members, a.array.direct, false) {
        Ok(array) => array,
        Err(EngineError::Disk(DiskError::Locked { name, holder })) => {
            return live_status(&a, &name, holder);
        }
        Err(e) => return Err(e.into()),
    };
    // Members no flock reaches (NBD exports): the owner record says who holds the array, and a
    // holder on this host answers over its control socket.
    if let Some(o) = array
        .owner()
        .filter(|o| o.held && o.pid != std::process::id())
    {
        if ask_holder(&array.superblock().array_uuid).is_ok() {
            drop(array);
            return live_status(&a, "the array", Some(o.pid));
        }
    }
    for h in array.health() {
        if let Some(why) = &h.failed {
            eprintln!(
                "stripeguard: WARNING: member {} ({}) is out of the array: {why}",
                h.index, h.name
            );
        }
    }
    let sb = array.superblock().clone();
    let mut unrecoverable = Vec::new();
    let awaiting = array.awaiting_resync().len();
    if a.check {
        let bar = count_bar("checking stripes");
        let summary = scrub(&array, &ScrubOptions::default(), &mut updater(&bar));
        bar.finish_and_clear();
        unrecoverable = summary?.unrecoverable;
    }
    let last_scrub = array.last_scrub();
    let c = array.counters();
    let health = array.health();
    let untrusted = array.untrusted();
    // Per member and fault class, over the whole durable log (zpool status' error columns).
    let log = array.event_log();
    let mut by_member: Vec<std::collections::BTreeMap<String, u64>> =
        vec![Default::default(); health.len()];
    for e in &log.entries {
        if matches!(
            e.role,
            EventRole::Data | EventRole::Parity | EventRole::Checksum
        ) {
            if let Some(m) = by_member.get_mut(e.member as usize) {
                // The checksum member's damaged table counts as that member's checksum failure.
                let class = match e.kind {
                    EventKind::ChecksumChunk => EventKind::Checksum,
                    k => k,
                };
                *m.entry(class.to_string()).or_default() += 1;
            }
        }
    }
    let degraded = health.iter().filter(|h| h.failed.is_some()).count();
    if a.json {
        println!(
            "{}",
            json!({"uuid": hex(&sb.array_uuid), "scheme": sb.scheme.name(), "code": sb.code.name(),
                   "data_chunks": sb.data_chunks, "parity_chunks": sb.parity_chunks,
                   "chunk_bytes": sb.chunk_bytes, "sector_bytes": sb.sector_bytes(), "stripes": sb.stripes,
                   "capacity_bytes": array.capacity_bytes(),
                   "state": format!("{:?}", sb.state).to_lowercase(), "members": health,
                   "cross_check": sb.cross_check, "event_count": sb.generation,
                   "write_journal": sb.write_journal, "journal_slots": sb.journal_slots,
                   "member_table": array.member_table(), "last_scrub": last_scrub,
                   "awaiting_resync_stripes": awaiting, "logged_by_member": by_member,
                   "log_entries": log.entries.len(), "log_dropped": log.dropped,
                   "log_not_understood": log.not_understood,
                   "checked": a.check, "counters": counters_json(&c), "events": array.events(),
                   "untrusted": untrusted,
                   "unrecoverable": unrecoverable})
        );
    } else {
        println!("array {}", hex(&sb.array_uuid));
        println!(
            "  {} data + {} parity ({}), scheme {}, chunk {}, sector {}, {} stripes, capacity {} bytes",
            sb.data_chunks,
            sb.parity_chunks,
            sb.code.name(),
            sb.scheme.name(),
            format_size(sb.chunk_bytes as usize),
            sb.sector_bytes(),
            sb.stripes,
            array.capacity_bytes()
        );
        println!(
            "  cross-check: {}, write journal: {}, event count {}",
            sb.cross_check.name(),
            if sb.write_journal { "on" } else { "off" },
            sb.generation
        );
        println!("  scan: {}", scan_line(last_scrub.as_ref()));
        print_untrusted(&untrusted, Some(array.geometry()));
        if array.was_unclean() {
            println!(
                "  not closed cleanly: {awaiting} stripe(s) in regions awaiting resync (the next command that may write resyncs them first){}",
                if a.check { "; the check skipped them" } else { "" }
            );
        }
        println!(
            "  state: {}",
            state_line(&sb, degraded, a.check.then_some(&c), unrecoverable.len())
        );
        const CLASSES: [&str; 7] = [
            "read-error",
            "checksum",
            "identity",
            "stale",
            "outvoted",
            "parity",
            "resync",
        ];
        println!(
            "  {:<10} {:<40} {:<8} {}",
            "member",
            "",
            "state",
            CLASSES.map(|c| format!("{c:>10}")).join("")
        );
        for h in &health {
            let counts: String = CLASSES
                .map(|c| format!("{:>10}", by_member[h.index].get(c).copied().unwrap_or(0)))
                .join("");
            let state = if h.failed.is_some() { "OUT" } else { "ONLINE" };
            println!("  member {:>3} {:<40} {state:<8} {counts}", h.index, h.name);
        }
        println!(
            "  (counts from the event log: {} entries, {} older ones overwritten; `stripeguard events` lists them)",
            log.entries.len(),
            log.dropped
        );
        for h in &health {
            let st = match &h.failed {
                None if h.superblock_copies_fixed > 0 => format!(
                    "ok ({} superblock copy damaged or stale)",
                    h.superblock_copies_fixed
                ),
                None => "ok".to_string(),
                Some(w) => format!("FAILED: {w}"),
            };
            if h.failed.is_some() || h.superblock_copies_fixed > 0 {
                println!("  member {:>3}  {:<40} {st}", h.index, h.name);
            }
        }
        if a.check {
            println!(
                "  check: {} stripes, {} damaged unit(s) located, {} stripe(s) with parity disagreeing with data, {} unrecoverable stripe(s)",
                sb.stripes,
                c.located,
                c.mismatches,
                unrecoverable.len()
            );
            for (k, v) in &c.by_kind {
                println!("    {k}: {v}");
            }
            print_events(&array, true);
            for u in &unrecoverable {
                println!("  {u}");
            }
        }
    }
    Ok(ExitCode::from(
        if !unrecoverable.is_empty() || !untrusted.is_empty() {
            exit::UNRECOVERABLE
        } else if c.located > 0
        || c.mismatches > 0
        || degraded > 0
        // A check that had to skip stripes awaiting resync is not a clean bill.
        || (a.check && array.was_unclean() && awaiting > 0)
        {
            exit::FOUND
        } else {
            exit::OK
        },
    ))
}

/// The listed untrusted ranges, as `status` shows them (with the member of each when the
/// geometry is at hand).
fn print_untrusted(
    untrusted: &[stripeguard_integrity::UntrustedRange],
    geometry: Option<&stripeguard_plan::Geometry>,
) {
    if untrusted.is_empty() {
        return;
    }
    println!(
        "  untrusted: {} range(s) a resync could not verify; reads of them are refused until a write covers them whole, a scrub verifies them again, or `stripeguard clear --stripe S` zero-fills them:",
        untrusted.len()
    );
    for r in untrusted {
        let member = geometry
            .map(|g| format!(" (member {})", g.member_of(r.stripe, r.position as usize)))
            .unwrap_or_default();
        println!(
            "    stripe {} data chunk {}{member} bytes {}..{}{}",
            r.stripe,
            r.position,
            r.offset,
            r.offset + r.len,
            if r.expected_crc.is_some() {
                ""
            } else {
                " (no CRC to verify it against: only a write or clear takes it off)"
            }
        );
    }
}

/// `status` of an array another process holds: what that process says over its control
/// socket (the array itself is not taken from it).
fn live_status(a: &StatusArgs, name: &str, holder: Option<u32>) -> Result<ExitCode> {
    let who = stripeguard_disk::holder_words(holder);
    let uuid = peek_uuid(&a.array.members).with_context(|| {
        format!("{name} is in use by {who}, and no member has a readable superblock")
    })?;
    // A holder opens its control socket once it has assembled the array (after its locks, its
    // superblock update and any resync): give one that is starting up a few seconds.
    let mut asked = ask_holder(&uuid);
    if asked.is_err() && !a.array.no_wait {
        eprintln!(
            "stripeguard: the array is in use by {who}, which does not answer status yet; waiting up to 5 s, until {}, for it to open its control socket (--no-wait does not wait)",
            stripeguard_ops::clock_utc_in(std::time::Duration::from_secs(5))
        );
        for _ in 0..50 {
            if asked.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            asked = ask_holder(&uuid);
        }
    }
    let live = asked.map_err(|why| {
        anyhow::anyhow!("{name} is in use by {who}, which does not answer status ({why}); try again when it finishes")
    })?;
    if a.check {
        eprintln!(
            "stripeguard: not checked: the array is in use by {who} and --check needs it; showing what the holder has found so far (run the check when it finishes, or `stripeguard scrub --check-only` then)"
        );
    }
    if a.json {
        println!(
            "{}",
            json!({"in_use_by": live.pid, "command": live.command, "untrusted": live.untrusted,
                   "live": live, "checked": false})
        );
    } else {
        println!(
            "array {} in use by process {} ({})",
            hex(&uuid),
            live.pid,
            live.command
        );
        println!(
            "  live: {} failed check(s), {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s), {} stripe(s) resynced",
            live.detected, live.located, live.repaired, live.unrecoverable, live.resynced
        );
        if !live.front_end.is_empty() {
            let parts: Vec<String> = live
                .front_end
                .iter()
                .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
                .collect();
            println!("  serving: {}", parts.join(", "));
        }
        for (m, why) in &live.out {
            println!("  member {m} out of the array: {why}");
        }
        print_untrusted(&live.untrusted, None);
        for e in &live.recent_events {
            println!("  {e}");
        }
    }
    // A check that was asked for and not done is not a clean result.
    Ok(ExitCode::from(if !live.untrusted.is_empty() {
        exit::UNRECOVERABLE
    } else if a.check {
        exit::USAGE
    } else if live.out.is_empty() && live.located == 0 {
        exit::OK
    } else {
        exit::FOUND
    }))
}

/// The last scrub, like `zpool status`' scan line.
fn scan_line(r: Option<&Checkpoint>) -> String {
    let Some(r) = r else {
        return "no scrub has run".into();
    };
    let when = |t: u64| format!("{} (Unix seconds {t})", ago(t));
    if r.finished {
        format!(
            "scrub finished {}: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s){}",
            when(r.updated_unix),
            r.found,
            r.repaired,
            r.unrecoverable,
            if r.mismatches > 0 {
                format!(", {} stripe(s) with parity disagreeing", r.mismatches)
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "scrub interrupted at stripe {} of {} ({}); `stripeguard scrub` resumes it",
            r.next_stripe,
            r.stripes,
            when(r.updated_unix)
        )
    }
}

fn ago(t: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(t);
    let s = now.saturating_sub(t);
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86400),
    }
}

/// The array's state in words: what the superblock says, and what a check found.
fn state_line(
    sb: &Superblock,
    degraded: usize,
    check: Option<&Counters>,
    unrecoverable: usize,
) -> String {
    let mut words = vec![format!("{:?}", sb.state).to_lowercase()];
    if degraded > 0 {
        words.push(format!("DEGRADED ({degraded} member(s) out)"));
    }
    if let Some(c) = check {
        if unrecoverable > 0 {
            words.push(format!("UNRECOVERABLE ({unrecoverable} stripe(s))"));
        }
        if c.located > 0 {
            words.push(format!("DAMAGED ({} unit(s) found wrong)", c.located));
        }
        if c.mismatches > 0 {
            words.push(format!(
                "INCONSISTENT ({} stripe(s) whose parity disagrees with the data)",
                c.mismatches
            ));
        }
    }
    words.join(", ")
}

/// `replace` of an array another process holds: ask it over its control socket, then follow
/// its progress in its status until it finishes.
fn replace_via_holder(a: &ReplaceArgs, uuid: &[u8; 16]) -> Result<ExitCode> {
    let target = match a.with.to_str() {
        Some(t) if stripeguard_nbd::is_uri(t) => t.to_string(),
        _ => {
            // The holder runs elsewhere (its own working directory): an absolute path.
            let parent = a.with.parent().filter(|p| !p.as_os_str().is_empty());
            let dir = std::fs::canonicalize(parent.unwrap_or(std::path::Path::new(".")))
                .with_context(|| format!("cannot resolve {}", a.with.display()))?;
            let name = a
                .with
                .file_name()
                .with_context(|| format!("{} names no file", a.with.display()))?;
            dir.join(name).display().to_string()
        }
    };
    ask_holder_replace(uuid, a.member, &target, a.force)
        .map_err(|e| anyhow::anyhow!("the process holding the array refused the replace: {e}"))?;
    eprintln!("stripeguard: the array is in use; the process holding it rebuilds member {} onto {target} while it goes on serving", a.member);
    let bar = count_bar("rebuilding");
    let last = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let live = ask_holder(uuid)
            .map_err(|e| anyhow::anyhow!("lost the holder while it rebuilt: {e}"))?;
        let Some(r) = live.replace else {
            bail!("the holder reports no replace");
        };
        bar.set_length(r.total.max(1));
        bar.set_position(r.done);
        if !r.running {
            break r;
        }
    };
    bar.finish_and_clear();
    let outcome = last.outcome.unwrap_or_default();
    if a.json {
        println!(
            "{}",
            json!({"via_holder": true, "ok": last.ok, "outcome": outcome})
        );
    } else {
        println!("{outcome}");
    }
    if last.ok {
        Ok(ExitCode::from(exit::OK))
    } else {
        bail!("{outcome}")
    }
}

pub fn replace(a: ReplaceArgs) -> Result<ExitCode> {
    // The slot's own path again is the device coming back (a re-add, which the engine checks);
    // another member's path is a mistake.
    let own_slot = a.array.members.get(a.member) == Some(&a.with);
    if !own_slot && a.array.members.iter().any(|m| m == &a.with) && !a.force {
        bail!(
            "{} is already a member of the array; give a new device",
            a.with.display()
        );
    }
    let array = match assemble(&a.array, true) {
        Ok(array) => array,
        Err(e) => {
            // Held by a process on this host that answers its control socket (a running
            // `serve`): it runs the replace while it goes on serving.
            if let Some(uuid) = peek_uuid(&a.array.members) {
                if ask_holder(&uuid).is_ok() {
                    return replace_via_holder(&a, &uuid);
                }
            }
            return Err(e);
        }
    };
    let size = array.superblock().member_bytes();
    let created = !stripeguard_ops::member_exists(&a.with);
    // The slot's own device is already open (and locked) by the array: the same handle.
    let held = if own_slot {
        array.member_disk(a.member).filter(|d| d.size_bytes() > 0)
    } else {
        None
    };
    let target = if let Some(d) = held {
        Ok(d)
    } else if created {
        FileDisk::create(&a.with, size, a.array.direct)
            .map(|d| std::sync::Arc::new(d) as stripeguard_disk::DiskRef)
    } else {
        stripeguard_ops::open_member(&a.with, a.array.direct)
    }
    .with_context(|| format!("cannot open {}", a.with.display()))?;
    let bar = count_bar("rebuilding");
    let started = std::time::Instant::now();
    let result = array.replace(a.member, target, a.force, &mut updater(&bar));
    bar.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            if created && array.checkpoint().and_then(|c| c.rebuild_member).is_none() {
                let _ = std::fs::remove_file(&a.with);
            }
            let _ = array.close();
            return Err(e.into());
        }
    };
    if a.json {
        println!(
            "{}",
            json!({"summary": summary, "counters": counters_json(&array.counters()), "events": array.events()})
        );
    } else {
        if summary.resumed_at > 0 {
            println!(
                "resumed an interrupted replace at stripe {}",
                summary.resumed_at
            );
        }
        if let Some(why) = &summary.full_rebuild_reason {
            println!(
                "member {} ({}) is this slot's own device back, but it is rebuilt in full, not re-added: {why}",
                summary.member,
                a.with.display()
            );
        }
        if summary.readded {
            println!(
                "member {} ({}) is the device that left, back: re-added through the write-intent record ({} of {} stripes were written while it was out)",
                summary.member,
                a.with.display(),
                summary.stripes_to_rebuild,
                array.geometry().stripes
            );
        }
        println!(
            "rebuilt member {} onto {}: {} stripes in {:.1} s; {} silently wrong survivor unit(s) found and repaired on the way",
            summary.member,
            a.with.display(),
            summary.stripes_rebuilt,
            started.elapsed().as_secs_f64(),
            summary.survivors_repaired
        );
        print_events(&array, true);
        println!(
            "from now on give {} in place of the old member {}",
            a.with.display(),
            a.member
        );
    }
    array.close()?;
    Ok(ExitCode::from(exit::OK))
}

/// `--since`: Unix seconds, or an age (`90s`, `10m`, `2h`, `3d`), as Unix milliseconds.
fn since_ms(s: &str) -> Result<u64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("--since {s:?}: give Unix seconds or an age like 10m"))?;
    let secs = match unit {
        "" => return Ok(n.saturating_mul(1000)),
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => bail!("--since {s:?}: unknown unit {unit:?} (s, m, h or d)"),
    };
    Ok(now.saturating_sub(secs.saturating_mul(1000)))
}

pub fn events(a: EventsArgs) -> Result<ExitCode> {
    let since = a.since.as_deref().map(since_ms).transpose()?.unwrap_or(0);
    let members = open_member_paths(&a.members, false);
    let mut seen: Option<u64> = None;
    loop {
        let log = read_log_of(&members)?;
        let fresh: Vec<&LoggedEvent> = log
            .entries
            .iter()
            .filter(|e| e.time_unix_ms >= since && seen.is_none_or(|n| e.number > n))
            .collect();
        if seen.is_none() && !a.json && !a.follow {
            println!(
                "{} event(s) in the log (ring of {}; {} older ones overwritten)",
                log.entries.len(),
                log.capacity,
                log.dropped
            );
            if log.not_understood > 0 {
                println!(
                    "{} entry(ies) written by a newer build hold codes this one does not know (skipped)",
                    log.not_understood
                );
            }
        }
        for e in &fresh {
            if a.json {
                println!("{}", serde_json::to_string(e)?);
            } else {
                println!(
                    "#{:<6} {} stripe {} member {} ({}): {} — {} [{:?}]",
                    e.number,
                    ago(e.time_unix_ms / 1000),
                    e.stripe,
                    e.member,
                    stripeguard_engine::unit_label(e.role, e.position as usize, log.data_chunks),
                    e.kind,
                    // Evidence is stored text: terminal escapes in it are shown, not obeyed.
                    stripeguard_xfer::proto::printable(e.evidence.as_bytes()),
                    e.action
                );
            }
            if let Some(cmd) = &a.exec {
                let status = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .env("SG_EVENT_NUMBER", e.number.to_string())
                    .env("SG_EVENT_TIME_MS", e.time_unix_ms.to_string())
                    .env("SG_EVENT_KIND", e.kind.as_str())
                    .env("SG_EVENT_ACTION", format!("{:?}", e.action))
                    .env("SG_EVENT_STRIPE", e.stripe.to_string())
                    .env("SG_EVENT_MEMBER", e.member.to_string())
                    .env("SG_EVENT_POSITION", e.position.to_string())
                    .env("SG_EVENT_ROLE", e.role.as_str())
                    .env("SG_EVENT_EVIDENCE", &e.evidence)
                    .status()
                    .with_context(|| format!("running --exec {cmd:?}"))?;
                if !status.success() {
                    eprintln!(
                        "stripeguard: warning: --exec for event #{} exited with {status}",
                        e.number
                    );
                }
            }
        }
        if let Some(last) = log.entries.last() {
            seen = Some(seen.map_or(last.number, |s| s.max(last.number)));
        }
        if !a.follow {
            break;
        }
        std::io::stdout().flush().ok();
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    Ok(ExitCode::from(exit::OK))
}

pub fn scrub_cmd(a: ScrubArgs) -> Result<ExitCode> {
    if let Some(r) = a.rate {
        if !(r > 0.0 && r.is_finite()) {
            bail!("--rate {r} must be a positive number of MB/s");
        }
    }
    let array = assemble(&a.array, !a.check_only)?;
    let opts = ScrubOptions {
        restart: a.restart,
        #[allow(
            clippy::cast_possible_truncation,
            reason = "a positive finite rate (checked above); a fraction of a byte per second \
                      is dropped and a rate beyond u64 saturates"
        )]
        rate_bytes_per_second: a.rate.map(|r| (r * 1e6) as u64),
    };
    let bar = count_bar(if a.check_only {
        "checking stripes"
    } else {
        "scrubbing"
    });
    let started = std::time::Instant::now();
    let result = with_control_socket(&array, || scrub(&array, &opts, &mut updater(&bar)));
    bar.finish_and_clear();
    let summary = result?;
    let c = array.counters();
    if a.json {
        println!(
            "{}",
            json!({"check_only": a.check_only, "resumed_at": summary.resumed_at, "stripes": summary.stripes,
                   "record": summary.record, "counters": counters_json(&c), "events": array.events(),
                   "unrecoverable": summary.unrecoverable, "metadata": summary.metadata,
                   "awaiting_resync_skipped": summary.awaiting_resync})
        );
    } else {
        if summary.resumed_at > 0 {
            println!(
                "resumed an interrupted scrub at stripe {}",
                summary.resumed_at
            );
        }
        println!(
            "{} {} stripes in {:.1} s: {} unit(s) found wrong, {} repaired, {} unrecoverable stripe(s){}",
            if a.check_only { "checked" } else { "scrubbed" },
            (summary.stripes - summary.resumed_at).saturating_sub(summary.awaiting_resync),
            started.elapsed().as_secs_f64(),
            c.located,
            if a.check_only { 0 } else { c.repaired },
            summary.unrecoverable.len(),
            if c.mismatches > 0 {
                format!(", {} stripe(s) whose parity disagrees with the data", c.mismatches)
            } else {
                String::new()
            }
        );
        if summary.awaiting_resync > 0 {
            println!(
                "  not checked: {} stripe(s) of regions awaiting resync (the array was not closed cleanly; a scrub without --check-only resyncs them first)",
                summary.awaiting_resync
            );
        }
        print_events(&array, true);
        for u in &summary.unrecoverable {
            println!("  {u}");
        }
    }
    array.close()?;
    Ok(ExitCode::from(if !summary.unrecoverable.is_empty() {
        exit::UNRECOVERABLE
    } else if c.located > 0 || c.mismatches > 0 || summary.awaiting_resync > 0 {
        exit::FOUND
    } else {
        exit::OK
    }))
}

fn report(array: &Array, what: &str, bytes: u64, json_out: bool) {
    let c = array.counters();
    if json_out {
        eprintln!(
            "{}",
            json!({"op": what, "bytes": bytes, "counters": counters_json(&c), "events": array.events()})
        );
    } else if c.located > 0 || c.detected > 0 {
        eprintln!(
            "stripeguard: {what} {bytes} bytes; detected {} failed check(s), located {} unit(s), repaired {}:",
            c.detected, c.located, c.repaired
        );
        print_events(array, false);
    }
}

pub fn clear(a: ClearArgs) -> Result<ExitCode> {
    let array = assemble(&a.array, true)?;
    let cleared = with_control_socket(&array, || array.clear_untrusted(a.stripe))?;
    if a.json {
        println!("{}", json!({"stripe": a.stripe, "cleared": cleared}));
    } else {
        for r in &cleared {
            println!(
                "stripe {}: data chunk {} bytes {}..{} zero-filled",
                r.stripe,
                r.position,
                r.offset,
                r.offset + r.len
            );
        }
    }
    array.close()?;
    Ok(ExitCode::from(crate::exit::OK))
}

pub fn write(a: WriteArgs) -> Result<ExitCode> {
    // Stream the input in steps of a few MiB: memory stays bounded whatever its size.
    let (mut input, known_len): (Box<dyn Read>, Option<u64>) = match &a.input {
        Some(p) => {
            let f =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(f), len)
        }
        None => (Box::new(std::io::stdin().lock()), None),
    };
    let array = assemble(&a.array, true)?;
    if let Some(len) = known_len {
        array.check_range(a.offset, len)?;
    }
    let step = usize::try_from(array.geometry().stripe_data_bytes())
        .context("a stripe of this array does not fit in memory")?
        .max(4 << 20);
    let mut buf = vec![0u8; step];
    let bar = crate::progress::bytes_bar("writing");
    if let Some(len) = known_len {
        bar.set_length(len);
    }
    let mut done = 0u64;
    // While it writes, `status` from another process asks this one over the control socket.
    let written = with_control_socket(&array, || -> Result<()> {
        loop {
            // Fill a whole step (pipes deliver short reads) so requests stay stripe-sized.
            let mut got = 0;
            while got < step {
                let n = input.read(&mut buf[got..]).context("reading the input")?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got == 0 {
                break;
            }
            let at = a.offset.saturating_add(done);
            array.check_range(at, got as u64)?;
            array.write(at, &buf[..got])?;
            done += got as u64;
            bar.set_position(done);
        }
        Ok(())
    });
    bar.finish_and_clear();
    if let Err(e) = written {
        // A refused write (an unrecoverable stripe, exit 3; a range or input error) wrote none
        // of the stripe it refused and every piece before it whole: close clean, as after any
        // finished write, so nothing is left dirty for a resync to settle. An I/O error may
        // have left a stripe half-written: that one stays dirty for the resync.
        let refused = match e.downcast_ref::<EngineError>() {
            Some(
                EngineError::Unrecoverable { .. }
                | EngineError::Config(_)
                | EngineError::OutOfRange { .. },
            )
            | None => true,
            Some(_) => false,
        };
        if refused {
            report(&array, "wrote", done, a.json);
            array.close()?;
        }
        return Err(e);
    }
    report(&array, "wrote", done, a.json);
    array.close()?;
    Ok(ExitCode::from(crate::exit::OK))
}

pub fn read(a: ReadArgs) -> Result<ExitCode> {
    let array = assemble(&a.array, true)?;
    let cap = array.capacity_bytes();
    let len = a.length.unwrap_or(cap.saturating_sub(a.offset));
    array.check_range(a.offset, len)?;
    // To a temporary file beside the output, renamed when every byte is in: a failed read never
    // leaves a file that looks complete.
    // A device, FIFO or socket (`--output /dev/null`, a pipe) is written in place: renaming a
    // temporary file over it would replace the device node with a regular file.
    let special = a
        .output
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| {
            use std::os::unix::fs::FileTypeExt;
            let t = m.file_type();
            (
                t.is_dir(),
                t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket(),
            )
        });
    if let (Some(p), Some((true, _))) = (&a.output, special) {
        bail!("--output {} is a directory", p.display());
    }
    let (mut out, temp): (Box<dyn Write>, Option<tempfile::NamedTempFile>) = match &a.output {
        Some(p) if matches!(special, Some((false, true))) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .with_context(|| format!("cannot write to {}", p.display()))?;
            (Box::new(std::io::BufWriter::new(f)), None)
        }
        Some(p) => {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let t = tempfile::NamedTempFile::new_in(dir)
                .with_context(|| format!("cannot create a file in {}", dir.display()))?;
            let f = t.reopen().context("reopening the temporary output")?;
            (Box::new(std::io::BufWriter::new(f)), Some(t))
        }
        None => (
            Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            None,
        ),
    };
    let step = usize::try_from(array.geometry().stripe_data_bytes())
        .context("a stripe of this array does not fit in memory")?
        .max(4 << 20);
    let mut buf = vec![0u8; step];
    let bar = crate::progress::bytes_bar("reading");
    bar.set_length(len);
    let mut done = 0u64;
    let mut failure = None;
    while done < len {
        let n = usize::try_from(len - done).map_or(step, |left| left.min(step));
        if let Err(e) = array.read(a.offset + done, &mut buf[..n]) {
            // With --keep-partial, the stripes before the refused one are still worth having.
            if let (true, stripeguard_engine::EngineError::Unrecoverable { stripe, .. }) =
                (a.keep_partial, &e)
            {
                let good = usize::try_from(
                    (stripe * array.geometry().stripe_data_bytes()).saturating_sub(a.offset + done),
                )
                .map_or(n, |g| g.min(n));
                if good > 0 && array.read(a.offset + done, &mut buf[..good]).is_ok() {
                    out.write_all(&buf[..good]).context("writing output")?;
                    done += good as u64;
                }
            }
            failure = Some(e);
            break;
        }
        out.write_all(&buf[..n]).context("writing output")?;
        done += n as u64;
        bar.inc(n as u64);
    }
    out.flush().context("writing output")?;
    drop(out);
    bar.finish_and_clear();
    if let (Some(t), Some(p)) = (temp, &a.output) {
        if failure.is_none() || a.keep_partial {
            t.persist(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
    }
    if let Some(e) = failure {
        report(&array, "read", done, a.json);
        array.close()?;
        if a.keep_partial {
            eprintln!(
                "stripeguard: kept the {done} bytes read before the failure in {}",
                a.output.as_deref().unwrap_or(Path::new("-")).display()
            );
        }
        return Err(e.into());
    }
    report(&array, "read", len, a.json);
    array.close()?;
    Ok(ExitCode::from(crate::exit::OK))
}

pub fn inject(a: InjectArgs) -> Result<ExitCode> {
    use rand::SeedableRng;
    use stripeguard_disk::{damage_at_rest, AtRest};
    let fault = match a.fault.as_str() {
        "bit-rot" => AtRest::BitRot,
        "torn-write" => AtRest::TornWrite {
            sectors: a.sectors.unwrap_or(1),
        },
        "misdirected-write" => AtRest::MisdirectedWrite {
            victim: a.victim.unwrap_or(a.chunk.saturating_add(1)),
            shift_sectors: 0,
        },
        "misdirected-write-unaligned" => AtRest::MisdirectedWrite {
            victim: a.victim.unwrap_or(a.chunk.saturating_add(1)),
            shift_sectors: a.sectors.unwrap_or(1),
        },
        "overwrite" => AtRest::Overwrite { count: a.count },
        other => match FaultKind::from_name(other) {
            Some(k) => bail!(
                "{} happens during I/O and cannot be put into a stopped member; `stripeguard demo` and `stripeguard campaign` inject it",
                k.name()
            ),
            None => bail!("unknown fault `{other}` (bit-rot, torn-write, misdirected-write, misdirected-write-unaligned, overwrite)"),
        },
    };
    let d = FileDisk::open(&a.member, false)
        .with_context(|| format!("cannot open {}", a.member.display()))?;
    // Only into a stopped array: damage under a running engine would race its writes.
    d.try_lock(true)?;
    let map = stripeguard_engine::member_unit_map(&d)
        .with_context(|| format!("{} is not a stripeguard member", a.member.display()))?;
    // A fresh seed unless one is given: injecting twice must not flip the same bit back.
    let seed = a.seed.unwrap_or_else(rand::random);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let what = damage_at_rest(&d, &map, a.chunk, fault, &mut rng)?;
    d.flush()?;
    if a.json {
        println!(
            "{}",
            json!({"member": a.member, "fault": a.fault, "seed": seed, "done": what})
        );
    } else {
        println!("{}: {what} (seed {seed})", a.member.display());
    }
    Ok(ExitCode::from(crate::exit::OK))
}

pub fn demo(a: DemoArgs) -> Result<ExitCode> {
    let tmp;
    let dir: &Path = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            d
        }
        None => {
            tmp = tempfile::tempdir().context("cannot make a temporary directory")?;
            tmp.path()
        }
    };
    let bar = count_bar("demo cases");
    let rows = run_demo(dir, a.dir.is_some(), &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    println!(
        "stripeguard demo: RAID-6 ({} data + {} parity member files, 4K chunks); each fault injected into 4 stripes,\nthen the whole array is read back and scrubbed.\n",
        stripeguard_campaign::DEMO_DATA,
        stripeguard_campaign::DEMO_PARITY
    );
    println!(
        "{:<14} {:<28} {:>8} {:>8} {:>8} {:>8} {:>11}",
        "scheme", "fault", "injected", "detected", "located", "repaired", "wrong bytes"
    );
    let mut last = None;
    for r in &rows {
        if last.is_some() && last != Some(r.scheme) {
            println!();
        }
        last = Some(r.scheme);
        println!(
            "{:<14} {:<28} {:>8} {:>8} {:>8} {:>8} {:>11}{}",
            r.scheme.name(),
            r.fault,
            r.injected,
            r.detected,
            r.located,
            r.repaired,
            r.wrong_bytes,
            if r.unrecoverable > 0 {
                "  (unrecoverable reads refused)"
            } else {
                ""
            }
        );
    }
    println!(
        "\n`none` is bare RAID: it repairs what the disk reports (read errors, a failed member) and returns\nwrong bytes for every silent fault. Misdirected reads leave the disk intact: they are located and\nanswered by re-reading (counted as repaired). A misdirected write damages its target (stale) and\nits victim(s), so it locates more units than were injected."
    );
    Ok(ExitCode::from(crate::exit::OK))
}

fn crash_campaign(
    a: &CampaignArgs,
    shapes: &[(usize, usize)],
    schemes: &[Scheme],
) -> Result<ExitCode> {
    let bar = count_bar("crash cases");
    bar.set_length((shapes.len() * schemes.len()) as u64);
    let mut rows = Vec::new();
    for (i, &(k, m)) in shapes.iter().enumerate() {
        for (j, &scheme) in schemes.iter().enumerate() {
            if k == 1 && scheme.mirror() == Some(stripeguard_integrity::MirrorKind::Checksum) {
                continue;
            }
            let rep =
                stripeguard_campaign::run_crash_campaign(&stripeguard_campaign::CrashConfig {
                    data_chunks: k,
                    parity_chunks: m,
                    scheme,
                    stripes: a.stripes,
                    crashes: a.ops,
                    ops: 80,
                    seed: a.seed.wrapping_add((i * 100 + j) as u64),
                    failed_members: a.degraded as usize,
                    journal: true,
                    chunk_bytes: 16384,
                    write_journal: a.journal,
                    damaged_stripe: false,
                })?;
            let ok = rep.flushed_bytes_lost == 0
                && (!a.journal || rep.mixed_chunks == 0)
                && rep.wrong_bytes == 0
                && rep.unreadable_unsettled == 0
                && rep.flushed_refused == 0
                && (!a.journal || rep.unreadable_chunks == 0)
                && rep.refused_writes == 0
                && (a.degraded || rep.found_after_resync == 0);
            rows.push((k, m, scheme, rep, ok));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let bad = rows.iter().filter(|r| !r.4).count();
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(k, m, s, rep, ok)| json!({"shape": format!("{k}+{m}"), "scheme": s.name(), "ok": ok, "report": rep}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<6} {:<14} {:>7} {:>7} {:>8} {:>8} {:>7} {:>6} {:>12} {:>11} {:>10} {:>12} {:>4}",
            "shape",
            "scheme",
            "crashes",
            "writes",
            "flushes",
            "resynced",
            "settled",
            "mixed",
            "flushed lost",
            "wrong bytes",
            "found after",
            "no-resync",
            "ok"
        );
        for (k, m, s, r, ok) in &rows {
            println!(
                "{:<6} {:<14} {:>7} {:>7} {:>8} {:>8} {:>7} {:>6} {:>12} {:>11} {:>10} {:>12} {:>4}",
                format!("{k}+{m}"),
                s.name(),
                r.crashes,
                r.writes,
                r.flushes,
                r.stripes_resynced,
                r.stripes_settled,
                r.mixed_chunks,
                r.flushed_bytes_lost,
                r.wrong_bytes,
                r.found_after_resync,
                r.inconsistent_without_resync,
                if *ok { "yes" } else { "NO" }
            );
        }
    }
    Ok(ExitCode::from(if bad > 0 { exit::FOUND } else { exit::OK }))
}

pub fn campaign(a: CampaignArgs) -> Result<ExitCode> {
    let shapes: Vec<(usize, usize)> = a
        .shapes
        .split(',')
        .map(parse_shape)
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let schemes: Vec<Scheme> = if a.schemes == "all" {
        Scheme::ENGINE.to_vec()
    } else {
        a.schemes
            .split(',')
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .map_err(anyhow::Error::msg)?
    };
    if a.crash {
        return crash_campaign(&a, &shapes, &schemes);
    }
    let cases = campaign_cases(&shapes, &schemes);
    let bar = count_bar("campaign cases");
    bar.set_length(cases.len() as u64);
    let mut rows = Vec::new();
    let mut bad = 0;
    for (i, case) in cases.iter().enumerate() {
        let rep = run_campaign(&case.config(a.ops, a.stripes, a.seed.wrapping_add(i as u64)))?;
        let ok = case.passed(&rep);
        bad += (!ok) as usize;
        rows.push((
            case.data_chunks,
            case.parity_chunks,
            case.failed_members,
            case.fault_name(),
            case.scheme,
            rep,
            ok,
        ));
        bar.inc(1);
    }
    bar.finish_and_clear();
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(k, m, f, kind, s, rep, ok)| json!({"shape": format!("{k}+{m}"), "failed_members": f, "fault": kind, "scheme": s.name(), "ok": ok, "report": rep}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<6} {:>6} {:<28} {:<14} {:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>6}",
            "shape",
            "failed",
            "fault",
            "scheme",
            "ops",
            "injected",
            "detected",
            "located",
            "repaired",
            "wrong bytes",
            "ok"
        );
        for (k, m, f, kind, s, rep, ok) in &rows {
            println!(
                "{:<6} {:>6} {:<28} {:<14} {:>6} {:>8} {:>8} {:>8} {:>8} {:>11} {:>6}",
                format!("{k}+{m}"),
                f,
                kind,
                s.name(),
                rep.ops,
                rep.injected.values().sum::<u64>(),
                rep.detected,
                rep.located,
                rep.repaired + rep.reread,
                rep.wrong_bytes,
                if *ok { "yes" } else { "NO" }
            );
        }
        let tot = |f: &dyn Fn(&stripeguard_campaign::CampaignReport) -> u64, none: bool| -> u64 {
            rows.iter()
                .filter(|r| (r.4 == Scheme::None) == none)
                .map(|r| f(&r.5))
                .sum()
        };
        println!(
            "\nprotected schemes: {} ops, {} faults fired, {} detected, {} located, {} repaired, {} wrong bytes, {} unrecoverable, {} damaged units left",
            tot(&|r| r.ops, false),
            tot(&|r| r.injected.values().sum(), false),
            tot(&|r| r.detected, false),
            tot(&|r| r.located, false),
            tot(&|r| r.repaired + r.reread, false),
            tot(&|r| r.wrong_bytes, false),
            tot(&|r| r.unrecoverable, false),
            tot(&|r| r.damaged_after_scrub, false)
        );
        println!(
            "none (negative control): {} faults fired, {} wrong bytes returned",
            tot(&|r| r.injected.values().sum(), true),
            tot(&|r| r.wrong_bytes, true)
        );
    }
    Ok(if bad > 0 {
        ExitCode::from(exit::FOUND)
    } else {
        ExitCode::from(crate::exit::OK)
    })
}

use stripeguard_format::hex;
