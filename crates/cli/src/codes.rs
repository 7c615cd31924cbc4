//! `stripeguard codes ...`: what the RAID-6 codes cost, as `stripeguard_codes::metrics` counts it.

use anyhow::Result;
use clap::{Args, Subcommand};
use std::process::ExitCode;
use stripeguard_codes::metrics::{compare, CodeMetrics};

#[derive(Subcommand)]
pub enum CodesCommand {
    /// Update complexity, XORs per encode and two-member decode, multi-block access (Tier-code
    /// paper Eq. 7) and degraded reads (Eq. 8) of RS RAID-6 P+Q, RDP and Tier-code, counted by
    /// enumerating their layouts.
    Metrics(MetricsArgs),
}

#[derive(Args)]
pub struct MetricsArgs {
    /// Members M (data + 2 parity), 4 to 32 (the enumeration grows as ~M^6: 2 s at 32); RDP and Tier-code use the smallest prime
    /// p >= M - 1 and shorten when M - 1 is not prime.
    #[arg(long, value_parser = clap::value_parser!(u16).range(4..=32))]
    members: u16,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: CodesCommand) -> Result<ExitCode> {
    match cmd {
        CodesCommand::Metrics(a) => metrics(a),
    }
}

fn metrics(a: MetricsArgs) -> Result<ExitCode> {
    let rows = compare(a.members as usize)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::from(crate::exit::OK));
    }
    print_table(&rows);
    Ok(ExitCode::from(crate::exit::OK))
}

fn print_table(rows: &[CodeMetrics]) {
    let first = &rows[0];
    println!(
        "RAID-6 codes on {} members (k = {} data); requests of 1..={} blocks from every block; \
         Eq. 8 over every failed member (pair)",
        first.members,
        first.members - 2,
        first.request_blocks_max
    );
    println!(
        "{:<6} {:>5} {:<22} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "code",
        "p",
        "block",
        "upd avg",
        "upd max",
        "enc xor",
        "enc mul",
        "dec xor",
        "dec mul",
        "wr par",
        "wr rd",
        "Eq.7",
        "deg 1",
        "Eq.8"
    );
    for r in rows {
        println!(
            "{:<6} {:>5} {:<22} {:>7.3} {:>7} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
            r.code,
            r.prime.map_or("-".to_string(), |p| p.to_string()),
            r.block,
            r.update_avg,
            r.update_max,
            r.encode_xors,
            r.encode_mults,
            r.decode_xors_avg,
            r.decode_mults_avg,
            r.write_parity_avg,
            r.write_reads_avg,
            r.multi_block_access,
            r.degraded_read_1,
            r.degraded_read_2
        );
    }
    println!(
        "upd: parity blocks changed by a one-block write; enc/dec: chunk-sized XORs and GF(2^8) \
         multiplications per stripe (dec: two lost members, average over pairs); wr par / wr rd: \
         parity blocks written and blocks read per write request (Eq. 7 = their sum); deg 1 / \
         Eq.8: extra blocks read per read request with one / two failed members"
    );
}
