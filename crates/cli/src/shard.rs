//! `stripeguard shard ...`: protect a file with Reed-Solomon shards.

use crate::progress::{bytes_bar, updater};
use crate::units::{format_size, parse_size};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_shard::{EncodeOptions, HeaderState, Status, VerifyReport};

#[derive(Subcommand)]
pub enum ShardCommand {
    /// Split FILE into K data + M parity shard files in DIR; any K of them rebuild it.
    Encode(EncodeArgs),
    /// Rebuild the original file from the shards in DIR (any K intact shards suffice).
    Decode(DecodeArgs),
    /// Check every shard in DIR and report its state; writes nothing.
    ///
    /// Exit status: 0 all shards healthy, 1 damage found but the file can be rebuilt,
    /// 3 the file cannot be rebuilt, 2 error.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct EncodeArgs {
    /// File to protect.
    file: PathBuf,
    /// Data shards (K).
    #[arg(long = "data", short = 'k', default_value_t = 10)]
    k: usize,
    /// Parity shards (M): up to M lost shards, or M/2 silently wrong ones, are survived.
    #[arg(long = "parity", short = 'm', default_value_t = 4)]
    m: usize,
    /// Output directory (created if missing).
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Block size per shard per stripe (multiple of 64; default: up to 256K, smaller for small files).
    #[arg(long, value_parser = parse_size)]
    block_size: Option<usize>,
    /// Replace shards already in DIR.
    #[arg(long)]
    force: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DecodeArgs {
    /// Directory holding the shards.
    dir: PathBuf,
    /// Where to write the file (default: its original name, in the current directory).
    #[arg(long, short = 'o')]
    out: Option<PathBuf>,
    /// Replace OUT if it exists.
    #[arg(long)]
    force: bool,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// Directory holding the shards.
    dir: PathBuf,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: ShardCommand) -> Result<ExitCode> {
    match cmd {
        ShardCommand::Encode(a) => {
            let block_bytes = a.block_size.map(|b| u32::try_from(b).unwrap_or(u32::MAX));
            let opts = EncodeOptions {
                k: a.k,
                m: a.m,
                block_bytes,
                force: a.force,
            };
            let bar = bytes_bar("encode");
            let summary = stripeguard_shard::encode(&a.file, &a.out, &opts, &mut updater(&bar))?;
            bar.finish_and_clear();
            if a.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                println!(
                    "wrote {} shards ({}+{}) to {}: {} bytes in {} stripes of {} blocks",
                    summary.shards.len(),
                    a.k,
                    a.m,
                    a.out.display(),
                    summary.file_bytes,
                    summary.stripes,
                    format_size(summary.block_bytes as usize),
                );
                println!(
                    "any {} of them rebuild the file; up to {} silently wrong shards are located",
                    a.k,
                    a.m / 2
                );
            }
            Ok(ExitCode::from(crate::exit::OK))
        }
        ShardCommand::Decode(a) => {
            let bar = bytes_bar("decode");
            let (out, report) =
                stripeguard_shard::decode(&a.dir, a.out.as_deref(), a.force, &mut updater(&bar))?;
            bar.finish_and_clear();
            if a.json {
                let v = serde_json::json!({ "output": out, "report": report });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_report(&report);
                println!("wrote {} ({} bytes)", out.display(), report.file_bytes);
            }
            Ok(ExitCode::from(crate::exit::OK))
        }
        ShardCommand::Verify(a) => {
            let bar = bytes_bar("verify");
            let report = stripeguard_shard::verify(&a.dir, &mut updater(&bar))?;
            bar.finish_and_clear();
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
            Ok(match report.status {
                Status::Healthy => ExitCode::from(crate::exit::OK),
                Status::Repairable => ExitCode::from(crate::exit::FOUND),
                Status::Unrecoverable => ExitCode::from(crate::exit::UNRECOVERABLE),
            })
        }
    }
}

fn print_report(r: &VerifyReport) {
    println!(
        "{}: {}+{} shards of {:?} ({} bytes, {} stripes of {} blocks)",
        r.dir.display(),
        r.k,
        r.m,
        r.file_name,
        r.file_bytes,
        r.stripes,
        format_size(r.block_bytes as usize)
    );
    println!("{:<18} {:>5}  state", "shard", "index");
    for s in &r.shards {
        let mut problems = Vec::new();
        match s.header {
            HeaderState::Ok => {}
            HeaderState::Damaged => {
                problems.push("header damaged (index taken from the file name)".to_string())
            }
            HeaderState::Duplicate => problems.push("duplicate index, ignored".to_string()),
        }
        if s.renamed {
            problems.push("file name disagrees with its header (header used)".into());
        }
        if s.missing_blocks > 0 {
            problems.push(format!("truncated: {} blocks missing", s.missing_blocks));
        }
        if s.crc_bad_blocks > 0 {
            problems.push(format!("{} blocks fail their CRC", s.crc_bad_blocks));
        }
        if s.located_bad_blocks > 0 {
            problems.push(format!(
                "{} blocks silently wrong (located by parity)",
                s.located_bad_blocks
            ));
        }
        if s.payload_crc_ok == Some(false) && problems.is_empty() {
            problems.push("payload CRC mismatch".into());
        }
        let state = if problems.is_empty() {
            "ok".to_string()
        } else {
            problems.join("; ")
        };
        let idx = s.index.map_or("-".into(), |i| i.to_string());
        println!("{:<18} {:>5}  {}", s.file, idx, state);
    }
    for &i in &r.missing_shards {
        println!(
            "{:<18} {:>5}  missing",
            stripeguard_shard::shard_file_name(i),
            i
        );
    }
    let verdict = match r.status {
        Status::Healthy => "healthy".to_string(),
        Status::Repairable => format!(
            "damaged, repairable ({} of {} stripes affected)",
            r.stripes_damaged, r.stripes
        ),
        Status::Unrecoverable => format!(
            "UNRECOVERABLE: {} stripes cannot be rebuilt; {}",
            r.stripes_unrecoverable,
            r.first_problem.as_deref().unwrap_or("")
        ),
    };
    println!("status: {verdict}");
}
