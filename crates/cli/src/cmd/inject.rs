//! `stripeguard inject`: put a fault at rest (bit rot, a torn or misdirected write, random
//! bytes) into a member file of a stopped array, for demos and tests.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_disk::{Disk, FaultKind, FileDisk};

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

pub fn run(a: InjectArgs) -> Result<ExitCode> {
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
