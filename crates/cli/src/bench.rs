//! `stripeguard bench ...`

use crate::units::{format_size, parse_shape, parse_size};
use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;
use stripeguard_bench::{run_codec, CodecOptions};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Encode, update, reconstruct, locate, CRC-32C and memcpy throughput per (k, m) and chunk size.
    Codec(CodecArgs),
    /// The array engine on memory members: 1 MiB sequential and 4 KiB random reads and writes
    /// per scheme, with the ratio to bare RAID (`none`) measured in the same run.
    Array(ArrayArgs),
    /// The engine on member files against the floor of its own I/O: amplification (member I/Os
    /// and bytes per request, beside the ideal) and efficiency (fio replaying exactly the
    /// engine's member I/O on the same files, same run), buffered and O_DIRECT.
    Io(IoArgs),
    /// The simulator: requests per second per scheme and for all schemes together, on a seeded
    /// synthetic workload (memory bounded by the first-read maps, not the trace length).
    Sim(SimBenchArgs),
}

#[derive(Args)]
pub struct SimBenchArgs {
    /// Requests.
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// Table III profile.
    #[arg(long, default_value = "TPC-C")]
    profile: String,
    /// Members (RAID-6).
    #[arg(long, default_value_t = 8)]
    disks: usize,
    /// Chunk size.
    #[arg(long, value_parser = parse_size, default_value = "4K")]
    chunk: usize,
    /// Array capacity.
    #[arg(long, value_parser = parse_size, default_value = "256G")]
    capacity: usize,
    /// First-read map memory per scheme.
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    map_memory: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ArrayArgs {
    /// Shape k+m.
    #[arg(long, value_parser = parse_shape, default_value = "8+2")]
    shape: (usize, usize),
    /// Chunk size (8+2 with 128K makes a 1 MiB write exactly one full stripe).
    #[arg(long, value_parser = parse_size, default_value = "128K")]
    chunk: usize,
    /// Array capacity the requests are spread over.
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    capacity: usize,
    /// Repetitions per measurement; the best is kept.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Milliseconds per repetition.
    #[arg(long, default_value_t = 300)]
    ms: u64,
    /// Measure request latency on members that take this long per I/O (ms): the units of one
    /// request go to their members at once, so a full-stripe write takes about one latency.
    #[arg(long, conflicts_with = "intent_latency_ms")]
    latency_ms: Option<f64>,
    /// Measure the write-intent record instead: members that take this long per I/O (ms,
    /// decimals allowed) and ten times as long per flush, with and without the record.
    #[arg(long)]
    intent_latency_ms: Option<f64>,
    /// User writes per workload for --intent-latency-ms.
    #[arg(long, default_value_t = 512)]
    intent_writes: u64,
    /// With --intent-latency-ms: measure the write journal (create --journal) against the
    /// default, the write-intent record alone.
    #[arg(long, requires = "intent_latency_ms")]
    journal: bool,
    /// With --intent-latency-ms and --journal: the journal on a journal device (FORMAT.md
    /// §2.12) that takes this long per I/O (ms) and five times as long per flush (0.02 for an
    /// NVMe in front of disks), against the intent record alone, 4 KiB random writes by
    /// --queue-depth writers at once.
    #[arg(long, requires = "journal")]
    journal_device_latency_ms: Option<f64>,
    /// Concurrent writers for --journal-device-latency-ms.
    #[arg(long, default_value_t = 32)]
    queue_depth: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Placement {
    /// One stripe reused: data in cache, compares the kernels.
    Cache,
    /// A pool much larger than the cache: what a disk array sees.
    Stream,
    /// Both.
    Both,
}

#[derive(Args)]
pub struct CodecArgs {
    /// Shapes as k+m, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_shape, default_value = "4+1,6+2,10+4,64+10,64+64")]
    shapes: Vec<(usize, usize)>,
    /// Chunk sizes, comma-separated (4K, 64K, ...).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "4K,64K")]
    chunks: Vec<usize>,
    /// Where the data lives during the measurement.
    #[arg(long, value_enum, default_value = "both")]
    placement: Placement,
    /// Rounds per measurement, ours and the reference in turns; the best ~2 ms batch of calls
    /// is kept.
    #[arg(long, default_value_t = 6)]
    reps: usize,
    /// Milliseconds per round and side.
    #[arg(long, default_value_t = 30)]
    ms: u64,
    /// Size of the streaming pool.
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pool: usize,
    /// Measure the whole table this many times in turn and print each row's median and the
    /// ratio's range: a shared machine's slow spells can outlast a row's rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Member counts at which RDP and Tier-code encode and two-chunk rebuild are measured
    /// against our RAID-6 P+Q in the same run (empty: none).
    #[arg(long, value_delimiter = ',', default_value = "6,8,14", value_parser = clap::value_parser!(u16).range(4..=255))]
    xor_members: Vec<u16>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Codec(a) => codec(a),
        BenchCommand::Array(a) => array(a),
        BenchCommand::Sim(a) => sim(a),
        BenchCommand::Io(a) => io(a),
    }
}

#[derive(Args)]
pub struct IoArgs {
    /// Directory for the member files (on the disk to measure; not tmpfs for --direct).
    #[arg(long, default_value = "/var/tmp")]
    dir: std::path::PathBuf,
    /// Data + parity members.
    #[arg(long, value_parser = parse_shape, default_value = "6+2")]
    shape: (usize, usize),
    /// Chunk size.
    #[arg(long, value_parser = parse_size, default_value = "64K")]
    chunk: usize,
    /// Data area of each member file.
    #[arg(long, value_parser = parse_size, default_value = "96M")]
    member_size: usize,
    /// Sector size of the arrays (512 or 4096: the appendix is whole sectors, so 4096 keeps
    /// every unit and checksum block 4 KiB-aligned on the device).
    #[arg(long, value_parser = parse_size, default_value = "512")]
    sector: usize,
    /// Bytes each sequential workload moves.
    #[arg(long, value_parser = parse_size, default_value = "512M")]
    sequential: usize,
    /// Requests of each random workload.
    #[arg(long, default_value_t = 20000)]
    requests: u64,
    /// Buffered only (no O_DIRECT rows).
    #[arg(long)]
    no_direct: bool,
    /// The fio binary that replays the member I/O (the floor).
    #[arg(long, default_value = "fio")]
    fio: String,
    /// Measure an array on these NBD exports instead of member files (one per member, in
    /// order; their contents are overwritten). The floor is fio's nbd engine replaying each
    /// member's I/O against its export; needs --scratch.
    #[arg(long, num_args = 1.., value_name = "URI")]
    members: Vec<String>,
    /// With --members: one export per member, as large, that the floor's writes go to.
    #[arg(long, num_args = 1.., value_name = "URI", requires = "members")]
    scratch: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The exports of `bench io --members`, opened.
fn remote_members(a: &IoArgs) -> Result<Option<stripeguard_bench::io::Remote>> {
    if a.members.is_empty() {
        return Ok(None);
    }
    let n = a.shape.0 + a.shape.1;
    if a.members.len() != n || a.scratch.len() != n {
        anyhow::bail!(
            "--shape {}+{} needs {n} --members and {n} --scratch exports (got {} and {})",
            a.shape.0,
            a.shape.1,
            a.members.len(),
            a.scratch.len()
        );
    }
    for u in a.members.iter().chain(&a.scratch) {
        if !stripeguard_nbd::client::is_uri(u) {
            anyhow::bail!("{u} is not an NBD URI (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)");
        }
    }
    let members = a
        .members
        .iter()
        .map(|u| stripeguard_ops::open_member(std::path::Path::new(u), false))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(stripeguard_bench::io::Remote {
        members,
        uris: a.members.clone(),
        scratch: a.scratch.clone(),
    }))
}

fn io(a: IoArgs) -> Result<ExitCode> {
    if std::process::Command::new(&a.fio)
        .arg("--version")
        .output()
        .is_err()
    {
        anyhow::bail!(
            "{} is not installed: bench io measures the floor with fio (scripts/install-deps installs it)",
            a.fio
        );
    }
    if !a.dir.is_dir() {
        anyhow::bail!("--dir {} is not a directory", a.dir.display());
    }
    let opts = stripeguard_bench::io::IoBenchOptions {
        dir: a.dir.clone(),
        data_chunks: a.shape.0,
        parity_chunks: a.shape.1,
        chunk_bytes: u32::try_from(a.chunk)?,
        sector_bytes: u32::try_from(a.sector)?,
        member_data_bytes: a.member_size as u64,
        sequential_bytes: a.sequential as u64,
        random_requests: a.requests.max(32),
        direct: !a.no_direct,
        fio: a.fio.clone(),
        remote: remote_members(&a)?,
    };
    let remote = opts.remote.is_some();
    let tty = std::io::stderr().is_terminal();
    let rows = stripeguard_bench::io::run(&opts, |what| {
        if tty {
            eprint!("\r\x1b[2Kmeasuring {what}");
        }
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    if tty {
        eprint!("\r\x1b[2K");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    if remote {
        println!(
            "engine on {} NBD exports, {}+{}, chunk {}; floor = fio's nbd engine replaying each member's I/O on its export (one job per member at the row's queue depth), same run",
            a.members.len(),
            a.shape.0,
            a.shape.1,
            format_size(a.chunk)
        );
    } else {
        println!(
            "engine on member files in {}, {}+{}, chunk {}; floor = fio replaying the engine's member I/O (one job per member), same run",
            a.dir.display(),
            a.shape.0,
            a.shape.1,
            format_size(a.chunk)
        );
    }
    println!(
        "{:<11} {:<8} {:<14} {:>3} {:>9} {:>8} {:>10} {:>9} {:>10} {:>9} {:>8} {:>8} {:>6} {:>8}",
        "scheme",
        "mode",
        "workload",
        "qd",
        "IOs/req",
        "planned",
        "bytes/req",
        "ideal IO",
        "ideal B",
        "MB/s",
        "engine s",
        "floor s",
        "eff",
        "eff ser."
    );
    for r in &rows {
        println!(
            "{:<11} {:<8} {:<14} {:>3} {:>9.2} {:>8.2} {:>10.0} {:>9.2} {:>10.0} {:>9.1} {:>8.3} {:>8.3} {:>5.2}x {:>8}",
            r.scheme,
            match (r.remote, r.direct) {
                (true, _) => "remote",
                (false, true) => "direct",
                (false, false) => "buffered",
            },
            r.workload,
            r.queue_depth,
            r.member_ios_per_request,
            r.planned_ios_per_request,
            r.member_bytes_per_request,
            r.ideal_ios_per_request,
            r.ideal_bytes_per_request,
            r.mb_per_s,
            r.engine_seconds,
            r.floor_seconds,
            r.efficiency,
            r.serial_efficiency
                .map(|e| format!("{e:.2}x"))
                .unwrap_or_else(|| "-".into())
        );
    }
    Ok(ExitCode::from(crate::exit::OK))
}

fn array(a: ArrayArgs) -> Result<ExitCode> {
    let opts = stripeguard_bench::array::ArrayBenchOptions {
        data_chunks: a.shape.0,
        parity_chunks: a.shape.1,
        chunk_bytes: u32::try_from(a.chunk)?,
        capacity_bytes: a.capacity as u64,
        reps: a.reps.max(1),
        min_time: Duration::from_millis(a.ms.max(1)),
    };
    if let Some(ms) = a.latency_ms {
        if !(ms > 0.0 && ms.is_finite()) {
            anyhow::bail!("--latency-ms {ms} must be a positive number");
        }
        let rows =
            stripeguard_bench::array::concurrency(&opts, Duration::from_secs_f64(ms / 1000.0), 50);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
            return Ok(ExitCode::from(crate::exit::OK));
        }
        println!(
            "hybrid-seq {}+{}, chunk {}, members with {ms} ms per I/O: one I/O thread per member",
            a.shape.0,
            a.shape.1,
            format_size(a.chunk)
        );
        println!(
            "{:<18} {:>12} {:>14} {:>20}",
            "request", "member I/Os", "ms measured", "ms if one by one"
        );
        for r in &rows {
            println!(
                "{:<18} {:>12.1} {:>14.2} {:>20.1}",
                r.workload, r.member_ios_per_request, r.ms_per_request, r.serial_ms
            );
        }
        return Ok(ExitCode::from(crate::exit::OK));
    }
    if let Some(ms) = a.intent_latency_ms {
        if !(ms >= 0.0 && ms.is_finite()) {
            anyhow::bail!("--intent-latency-ms {ms} must be a non-negative number");
        }
        let io = Duration::from_secs_f64(ms / 1000.0);
        let writes = a.intent_writes.max(1);
        if let Some(dms) = a.journal_device_latency_ms {
            if !(dms >= 0.0 && dms.is_finite()) {
                anyhow::bail!("--journal-device-latency-ms {dms} must be a non-negative number");
            }
            let dio = Duration::from_secs_f64(dms / 1000.0);
            let rows = stripeguard_bench::array::journal_device_overhead(
                &opts,
                (io, io * 10),
                (dio, dio * 5),
                writes,
                a.queue_depth,
            );
            if a.json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(ExitCode::from(crate::exit::OK));
            }
            println!(
                "write journal on a journal device against the write-intent record alone, hybrid-seq {}+{}, chunk {}, members {ms} ms per I/O and {} ms per flush, journal device {dms} ms and {} ms; 4 KiB random writes by {} writers at once; best of {}",
                a.shape.0,
                a.shape.1,
                format_size(a.chunk),
                ms * 10.0,
                dms * 5.0,
                a.queue_depth.max(1),
                opts.reps
            );
            println!(
                "{:<20} {:>7} {:>9} {:>10} {:>16} {:>9}",
                "variant", "writes", "seconds", "writes/s", "member fl/1000", "overhead"
            );
            for r in &rows {
                println!(
                    "{:<20} {:>7} {:>9.2} {:>10.0} {:>16.1} {:>8.1}%",
                    r.variant,
                    r.user_writes,
                    r.seconds,
                    r.writes_per_second,
                    r.member_flushes_per_1000,
                    r.overhead * 100.0
                );
            }
            return Ok(ExitCode::from(crate::exit::OK));
        }
        let (rows, what, record, without) = if a.journal {
            (
                stripeguard_bench::array::crash_overhead(&opts, io, io * 10, writes, true),
                "write journal against the write-intent record alone",
                "metadata wr/1000",
                "intent only",
            )
        } else {
            (
                stripeguard_bench::array::crash_overhead(&opts, io, io * 10, writes, false),
                "write-intent record",
                "record wr/1000",
                "w/o record",
            )
        };
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
            return Ok(ExitCode::from(crate::exit::OK));
        }
        println!(
            "{what}, hybrid-seq {}+{}, chunk {}, members with {ms} ms per I/O and {} ms per flush; a flush every {} writes; best of {}",
            a.shape.0,
            a.shape.1,
            format_size(a.chunk),
            ms * 10.0,
            rows.first().map(|r| r.flush_every).unwrap_or(0),
            opts.reps
        );
        println!(
            "{:<14} {:>7} {:>16} {:>16} {:>16} {:>9} {:>9} {:>9}",
            "workload", "writes", record, "flushes/1000", without, "s with", "s w/o", "overhead"
        );
        for r in &rows {
            println!(
                "{:<14} {:>7} {:>16.1} {:>16.1} {:>16.1} {:>9.2} {:>9.2} {:>8.1}%",
                r.workload,
                r.user_writes,
                r.record_writes_per_1000,
                r.flushes_per_1000,
                r.flushes_per_1000_without,
                r.seconds_with,
                r.seconds_without,
                r.overhead * 100.0
            );
        }
        return Ok(ExitCode::from(crate::exit::OK));
    }
    let tty = std::io::stderr().is_terminal();
    let rows = stripeguard_bench::array::run(&opts, |what| {
        if tty {
            eprint!("\r\x1b[2Kmeasuring {what}");
        }
    });
    if tty {
        eprint!("\r\x1b[2K");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    println!(
        "array {}+{}, chunk {}, memory members, one thread; ratio = scheme / none, same run",
        a.shape.0,
        a.shape.1,
        format_size(a.chunk)
    );
    println!(
        "{:<14} {:<14} {:>10} {:>11} {:>8}",
        "scheme", "workload", "MB/s", "ops/s", "ratio"
    );
    for r in &rows {
        println!(
            "{:<14} {:<14} {:>10.0} {:>11.0} {:>7.2}x",
            r.scheme.name(),
            r.workload,
            r.mb_per_s,
            r.ops_per_s,
            r.ratio_to_none
        );
    }
    Ok(ExitCode::from(crate::exit::OK))
}

fn codec(a: CodecArgs) -> Result<ExitCode> {
    // Surface a bad STRIPEGUARD_KERNEL before measuring anything.
    let kernel = stripeguard_gf::Kernel::selected()?;
    for &(k, m) in &a.shapes {
        stripeguard_codes::ReedSolomon::new(k, m)?;
    }
    let opts = CodecOptions {
        shapes: a.shapes,
        chunk_sizes: a.chunks,
        cache: a.placement != Placement::Stream,
        stream: a.placement != Placement::Cache,
        pool_bytes: a.pool,
        reps: a.reps.max(1),
        min_time: Duration::from_millis(a.ms.max(1)),
        runs: a.runs as usize,
        xor_members: a.xor_members.iter().map(|&m| m as usize).collect(),
    };
    let tty = std::io::stderr().is_terminal();
    let report = run_codec(&opts, |what| {
        if tty {
            eprint!("\r\x1b[2Kmeasuring {what}");
        }
    });
    if tty {
        eprint!("\r\x1b[2K");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    // With several runs: the header says so and a column gives each ratio's range.
    let several = report.runs > 1;
    let range_column = |text: String| {
        if several {
            format!(" {text:>11}")
        } else {
            String::new()
        }
    };
    println!(
        "kernel: {} (single core){}{}",
        kernel.kind(),
        if report.isal {
            ", reference: ISA-L 2.32"
        } else {
            ""
        },
        if several {
            format!(
                ", median of {} runs (ratio: median of the runs' ratios)",
                report.runs
            )
        } else {
            String::new()
        }
    );
    if !report.isal {
        println!("note: built without the `isal` feature, so no ISA-L ratios (cargo run --release --features isal -- bench codec)");
    }
    println!(
        "{:<14} {:>7} {:>6} {:>7} {:>9} {:>8} {:>10} {:>7}{}  reference",
        "op",
        "k+m",
        "chunk",
        "where",
        "GB/s",
        "GalOPS",
        "ref GB/s",
        "ratio",
        range_column("range".into())
    );
    for r in &report.results {
        println!(
            "{:<14} {:>7} {:>6} {:>7} {:>9.2} {:>8.2} {:>10} {:>7}{}  {}",
            r.op,
            format!("{}+{}", r.k, r.m),
            format_size(r.chunk_bytes),
            r.placement,
            r.gbps,
            r.galops,
            r.reference_gbps.map_or("-".into(), |g| format!("{g:.2}")),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}x")),
            range_column(
                r.ratio_range
                    .map_or("-".into(), |(lo, hi)| format!("{lo:.2}-{hi:.2}"))
            ),
            r.reference.unwrap_or(""),
        );
    }
    Ok(ExitCode::from(crate::exit::OK))
}

fn sim(a: SimBenchArgs) -> Result<ExitCode> {
    use stripeguard_integrity::Scheme;
    let profile = stripeguard_sim::Profile::by_name(&a.profile)
        .ok_or_else(|| anyhow::anyhow!("unknown profile `{}`", a.profile))?;
    if a.disks < 3 {
        anyhow::bail!("--disks must be at least 3 for RAID-6");
    }
    let k = a.disks - 2;
    let g = stripeguard_plan::Geometry {
        k,
        m: 2,
        chunk_bytes: a.chunk as u64,
        stripes: (a.capacity / (k * a.chunk)).max(1) as u64,
    };
    let mut rows = Vec::new();
    let tty = std::io::stderr().is_terminal();
    for set in std::iter::once(Scheme::ALL.to_vec()).chain(Scheme::ALL.iter().map(|s| vec![*s])) {
        if tty {
            eprint!("\r\x1b[2Kmeasuring {set:?}");
        }
        rows.push(stripeguard_bench::sim::measure(
            g,
            profile,
            a.requests,
            &set,
            a.map_memory as u64,
        ));
    }
    if tty {
        eprint!("\r\x1b[2K");
    }
    let rss = stripeguard_bench::sim::peak_rss_bytes();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"profile": profile.name, "peak_rss_bytes": rss, "runs": rows})
            )?
        );
        return Ok(ExitCode::from(crate::exit::OK));
    }
    println!(
        "simulator: RAID-6 {}+2, chunk {}, profile {}, {} requests, one core; first-read map bound {} per scheme",
        k,
        format_size(a.chunk),
        profile.name,
        a.requests,
        format_size(a.map_memory)
    );
    println!("{:<12} {:>10} {:>14}", "schemes", "seconds", "requests/s");
    for r in &rows {
        println!(
            "{:<12} {:>10.2} {:>14.0}",
            r.schemes, r.seconds, r.requests_per_s
        );
    }
    if let Some(rss) = rss {
        println!(
            "peak resident memory: {} MiB (the trace is generated in 64 Ki-request batches)",
            rss >> 20
        );
    }
    Ok(ExitCode::from(crate::exit::OK))
}
