//! The `stripeguard` command: parses arguments, calls the library crates, prints. No decisions
//! are made here.

mod array;
mod bench;
mod figures;
mod progress;
mod shard;
mod sim;
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
    /// Show what stripeguard catches: every scheme against every fault kind, on small arrays in a
    /// temporary directory (the README's main job).
    Demo(array::DemoArgs),
    /// Create an array over member files or block devices.
    Create(array::CreateArgs),
    /// Show an array's geometry and members; with --check, read and check every stripe.
    ///
    /// Exit status: 0 healthy, 1 damage found (repairable) or degraded, 3 unrecoverable, 2 error.
    Status(array::StatusArgs),
    /// Write a file (or standard input) into the array at an offset.
    Write(array::WriteArgs),
    /// Read from the array to a file (or standard output), repairing what it finds.
    Read(array::ReadArgs),
    /// Put a fault into a member file of a stopped array (for demos and tests).
    Inject(array::InjectArgs),
    /// Run the fault campaign: seeded random I/O with injected faults against a model.
    Campaign(array::CampaignArgs),
    /// Replay a block trace (or a synthetic Table III workload) through every integrity scheme's
    /// planner and count disk I/Os; or draw the paper's figures (--figure tau|profiles).
    Sim(sim::SimArgs),
    /// Recommend an integrity scheme: the paper's rule from the average write size, and with a
    /// workload the simulated winner.
    Choose(sim::ChooseArgs),
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
        Command::Demo(a) => array::demo(a),
        Command::Create(a) => array::create(a),
        Command::Status(a) => array::status(a),
        Command::Write(a) => array::write(a),
        Command::Read(a) => array::read(a),
        Command::Inject(a) => array::inject(a),
        Command::Campaign(a) => array::campaign(a),
        Command::Sim(a) => sim::sim(a),
        Command::Choose(a) => sim::choose(a),
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
