//! The `stripeguard` command: parses arguments, calls the library crates, prints. No decisions
//! are made here.

mod bench;
mod cmd;
mod codes;
mod exit;
mod figures;
mod interrupt;
mod progress;
mod reliability;
mod serve;
mod shard;
mod sigpipe;
mod sim;
mod units;
mod xfer;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

const EXIT_HELP: &str = "Exit status: 0 ok; 1 a check found something (repaired, degraded, inconsistent); 2 bad arguments or another error; 3 data that cannot be returned (unrecoverable); 4 nothing to work on (a trace that yields no request); 5 send/recv: the session failed as a whole (1: some files failed, the rest landed). A closed output pipe ends a command quietly (SIGPIPE), as it does `cat`.";

/// Detect, locate and repair silent data corruption.
#[derive(Parser)]
#[command(name = "stripeguard", version, about, long_about = None, after_help = EXIT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what stripeguard catches: every scheme against every fault kind, on small arrays in a
    /// temporary directory (the README's main job).
    Demo(cmd::demo::DemoArgs),
    /// Create an array over member files or block devices.
    Create(cmd::create::CreateArgs),
    /// Show an array's geometry and members; with --check, read and check every stripe.
    ///
    /// Exit status: 0 healthy, 1 damage found (repairable) or degraded, 3 unrecoverable, 2 error.
    Status(cmd::status::StatusArgs),
    /// Read and check every stripe with every unit voting, repair what can be repaired, and keep
    /// the position so an interrupted scrub resumes (`--check-only`: repair nothing).
    ///
    /// Exit status: 0 clean, 1 something found (and repaired unless --check-only), 3 unrecoverable.
    Scrub(cmd::scrub::ScrubArgs),
    /// Rebuild a failed, missing, stale or retired member onto a new file or device, checking the
    /// survivors as they are read; resumable.
    Replace(cmd::replace::ReplaceArgs),
    /// Add stripes when every member has room for them (each replaced by a bigger device, or
    /// its file extended), online when a process holds the array; the new stripes read as
    /// zeros. Refused while a member is out.
    Grow(cmd::grow::GrowArgs),
    /// Keep a device as a hot spare of the array: labelled for it, and rebuilt in place of a
    /// member that stays out longer than the spare delay by the process serving the array.
    AddSpare(cmd::spares::AddSpareArgs),
    /// Stop keeping a hot spare (by path or uuid); its label is zeroed.
    RemoveSpare(cmd::spares::RemoveSpareArgs),
    /// Zero-fill the blocks of a stripe that a resync listed as untrusted (it could not verify
    /// them), so the stripe is whole again; the bytes they held are gone. `status` lists them.
    ///
    /// Exit status: 0 cleared, 2 nothing listed in that stripe or another error.
    Clear(cmd::clear::ClearArgs),
    /// Print the durable event log (what was found and done, with its evidence); --follow
    /// watches it and --exec runs a command per new event.
    Events(cmd::events::EventsArgs),
    /// Ask the process serving the array to stop (refused while clients are connected unless
    /// --force); it closes the array clean.
    Stop(cmd::stop::StopArgs),
    /// What each member's own metadata says (array, index, state, event count, member table,
    /// owner, last written), without assembling the array.
    Examine(cmd::examine::ExamineArgs),
    /// Find arrays without their member lists: read the superblock of every candidate (the
    /// paths or globs given, the configuration file's, or every block device), one line per
    /// array — name, uuid, level, scheme, members found / expected, health, state; --config
    /// prints a configuration file for them.
    ///
    /// Exit status: 0 every array found complete, 1 one is degraded or incomplete.
    Scan(cmd::scan::ScanArgs),
    /// Every array on this host in one view: the held ones live from their holders (states, and
    /// the progress of a replace or scrub), the others as a scan finds them; control sockets
    /// whose holder is gone are removed.
    ///
    /// Exit status: 0 every array healthy, 1 something needs attention.
    List(cmd::list::ListArgs),
    /// Follow the event log of every array it finds (configured or scanned, held or not): a
    /// line per new event on stderr and syslog, the array's hook run (configuration `hook`, or
    /// --exec; the variables of `events --exec` and SG_ARRAY_NAME), mail with --mail; its
    /// position kept per array across restarts. --oneshot checks once (exit 0 all well, 1 not).
    Monitor(cmd::monitor::MonitorArgs),
    /// Prometheus metrics of every array found (held ones live from their holders): array
    /// state, members by state, units found by kind, repairs, unrecoverable stripes, member
    /// failures, progress; --textfile DIR for node_exporter's textfile collector.
    Metrics(cmd::metrics::MetricsArgs),
    /// Remove members' stripeguard signatures (both superblock copies, every metadata record,
    /// the journal slots) so nothing takes them for members again; the data area is left.
    /// Refused for a device in use or a member a running process holds.
    Wipe(cmd::wipe::WipeArgs),
    /// Print a shell completion script (bash, zsh, fish): `stripeguard completions bash >
    /// /usr/share/bash-completion/completions/stripeguard`.
    Completions(cmd::docs::CompletionsArgs),
    /// Write the man pages (one per command) into a directory, as scripts/install does.
    Manpages(cmd::docs::ManpagesArgs),
    /// Serve the array as a block device over NBD (a unix socket or loopback by default);
    /// SIGTERM or Ctrl-C stops it cleanly.
    ///
    /// Example: `stripeguard serve m0 m1 m2 m3 --socket /tmp/sg.sock` then
    /// `nbdfuse /mnt/sg/ 'nbd+unix:///?socket=/tmp/sg.sock'` and `losetup` on /mnt/sg/nbd.
    Serve(serve::ServeArgs),
    /// Send files and directories to a receiver that proves each block landed on its disk
    /// (evicted from its page cache and read back from the device); only failed blocks are
    /// sent again. Exit status: 0 all verified, 1 some files failed (the rest landed), 2 usage,
    /// 5 the session failed (connection, key, protocol).
    Send(xfer::SendArgs),
    /// Receive files from `stripeguard send` into a directory, verifying every block from the
    /// device before reporting it. Exit status as `send`.
    Recv(xfer::RecvArgs),
    /// Make a shared key file for `send`/`recv --key-file` (32 random bytes, mode 0600).
    Keygen(xfer::KeygenArgs),
    /// Check received files against a `send --manifest` manifest, reading every block from the
    /// device (not the page cache). Exit status: 0 intact, 1 some file failed.
    VerifyManifest(xfer::VerifyManifestArgs),
    /// Write a file (or standard input) into the array at an offset.
    Write(cmd::rw::WriteArgs),
    /// Read from the array to a file (or standard output), repairing what it finds.
    Read(cmd::rw::ReadArgs),
    /// Put a fault into a member file of a stopped array (for demos and tests).
    Inject(cmd::inject::InjectArgs),
    /// Run the fault campaign: seeded random I/O with injected faults against a model.
    Campaign(cmd::campaign::CampaignArgs),
    /// Replay a block trace (or a synthetic Table III workload) through every integrity scheme's
    /// planner and count disk I/Os; or draw the paper's figures (--figure tau|profiles).
    Sim(sim::SimArgs),
    /// Recommend an integrity scheme: the paper's rule from the average write size, and with a
    /// workload the simulated winner.
    Choose(sim::ChooseArgs),
    /// Measure the erasure-coding kernels and codes (with ratios to references in the same run).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Compare the RAID-6 codes (RS P+Q, RDP, Tier-code): I/O per request and XORs, counted by
    /// enumerating their layouts.
    #[command(subcommand)]
    Codes(codes::CodesCommand),
    /// Protect a file with any-strength Reed-Solomon shards (encode, decode, verify).
    #[command(subcommand)]
    Shard(shard::ShardCommand),
    /// Mean time to data loss and the probability of loss within a mission of a K+M array: the
    /// never-repaired formula of Mann, Anderson & Rychlik, a Markov model with repair, UREs in
    /// rebuilds, latent silent errors with and without integrity metadata, the parity needed for
    /// a target, and a plot of MTTDL against M.
    Reliability(reliability::ReliabilityArgs),
}

/// `--version`: the version, the commit, the on-disk format and the GF kernels this CPU runs.
fn long_version() -> String {
    use stripeguard_gf::{Kernel, KernelKind};
    let available: Vec<String> = KernelKind::available()
        .iter()
        .map(|k| k.to_string())
        .collect();
    let selected = Kernel::selected()
        .map(|k| k.kind().to_string())
        .unwrap_or_else(|e| format!("none ({e})"));
    format!(
        "{}\ncommit {}\non-disk format version {} (members), transfer protocol version {}\nGF kernels: {} available on this CPU, {} selected (STRIPEGUARD_KERNEL chooses)",
        env!("CARGO_PKG_VERSION"),
        env!("STRIPEGUARD_COMMIT"),
        stripeguard_format::FORMAT_VERSION,
        stripeguard_xfer::proto::VERSION,
        available.join(", "),
        selected
    )
}

fn main() -> ExitCode {
    // A panic is a bug: it aborts the whole process (docs/DESIGN.md, "Panics").
    stripeguard_ops::abort_on_panic();
    // A closed stdout (`stripeguard ... | head`) ends the command as it ends `cat`: killed by
    // SIGPIPE, no message. Rust ignores SIGPIPE by default, which turns every later print into a
    // panic. (A long-running server that must outlive its clients ignores it again.)
    sigpipe::default();
    let matches = Cli::command().long_version(long_version()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::Create(a) => cmd::create::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Scrub(a) => cmd::scrub::run(a),
        Command::Events(a) => cmd::events::run(a),
        Command::Stop(a) => cmd::stop::run(a),
        Command::Examine(a) => cmd::examine::run(a),
        Command::Scan(a) => cmd::scan::run(a),
        Command::List(a) => cmd::list::run(a),
        Command::Monitor(a) => cmd::monitor::run(a),
        Command::Metrics(a) => cmd::metrics::run(a),
        Command::Wipe(a) => cmd::wipe::run(a),
        Command::Completions(a) => cmd::docs::completions(a, Cli::command()),
        Command::Manpages(a) => cmd::docs::manpages(a, Cli::command()),
        Command::Replace(a) => cmd::replace::run(a),
        Command::Grow(a) => cmd::grow::run(a),
        Command::AddSpare(a) => cmd::spares::add(a),
        Command::RemoveSpare(a) => cmd::spares::remove(a),
        Command::Clear(a) => cmd::clear::run(a),
        Command::Serve(a) => serve::serve(a),
        Command::Send(a) => match matches.subcommand_matches("send") {
            Some(m) => xfer::send_cmd(a, m),
            None => xfer::send_cmd(a, &clap::ArgMatches::default()),
        },
        Command::Recv(a) => xfer::recv(a),
        Command::Keygen(a) => xfer::keygen(a),
        Command::VerifyManifest(a) => xfer::verify_manifest(a),
        Command::Write(a) => cmd::rw::write(a),
        Command::Read(a) => cmd::rw::read(a),
        Command::Inject(a) => cmd::inject::run(a),
        Command::Campaign(a) => cmd::campaign::run(a),
        Command::Sim(a) => sim::sim(a),
        Command::Choose(a) => sim::choose(a),
        Command::Bench(b) => bench::run(b),
        Command::Codes(c) => codes::run(c),
        Command::Shard(s) => shard::run(s),
        Command::Reliability(a) => reliability::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stripeguard: error: {}", one_line(&e));
            ExitCode::from(exit_code_of(&e))
        }
    }
}

/// The error and its causes on one line, each cause once: many of our errors already say their
/// cause ("s1: open of 0 bytes at 0: Is a directory"), and anyhow's `{:#}` would repeat it.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

/// The exit status of a failed command: 3 when data could not be returned, 4 when the workload
/// had no request, else 2.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    use stripeguard_engine::EngineError;
    use stripeguard_sim::RunError;
    if let Some(EngineError::Unrecoverable { .. } | EngineError::TooManyFailed { .. }) =
        e.downcast_ref::<EngineError>()
    {
        return exit::UNRECOVERABLE;
    }
    if let Some(RunError::Empty(_)) = e.downcast_ref::<RunError>() {
        return exit::NOTHING;
    }
    if e.downcast_ref::<xfer::TransferFailed>().is_some() {
        return exit::TRANSFER;
    }
    exit::USAGE
}
