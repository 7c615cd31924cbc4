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
    /// Repetitions per measurement; the best is kept.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Milliseconds per repetition.
    #[arg(long, default_value_t = 60)]
    ms: u64,
    /// Size of the streaming pool.
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pool: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Codec(a) => codec(a),
    }
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
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "kernel: {} (single core){}",
        kernel.kind(),
        if report.isal {
            ", reference: ISA-L 2.32"
        } else {
            ""
        }
    );
    if !report.isal {
        println!("note: built without the `isal` feature, so no ISA-L ratios (cargo run --release --features isal -- bench codec)");
    }
    println!(
        "{:<12} {:>7} {:>6} {:>7} {:>9} {:>8} {:>10} {:>7}  reference",
        "op", "k+m", "chunk", "where", "GB/s", "GalOPS", "ref GB/s", "ratio"
    );
    for r in &report.results {
        println!(
            "{:<12} {:>7} {:>6} {:>7} {:>9.2} {:>8.2} {:>10} {:>7}  {}",
            r.op,
            format!("{}+{}", r.k, r.m),
            format_size(r.chunk_bytes),
            r.placement,
            r.gbps,
            r.galops,
            r.reference_gbps.map_or("-".into(), |g| format!("{g:.2}")),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}x")),
            r.reference.unwrap_or(""),
        );
    }
    Ok(ExitCode::SUCCESS)
}
