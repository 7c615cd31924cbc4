//! The `stripeguard` command: parses arguments, calls the library crates, prints. No decisions
//! are made here.

mod bench;
mod progress;
mod shard;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Detect, locate and repair silent data corruption.
#[derive(Parser)]
#[command(name = "stripeguard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the erasure-coding kernels and codes (with ratios to references in the same run).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Protect a file with any-strength Reed-Solomon shards (encode, decode, verify).
    #[command(subcommand)]
    Shard(shard::ShardCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(b) => bench::run(b),
        Command::Shard(s) => shard::run(s),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stripeguard: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
