//! `stripeguard write` and `stripeguard read`: stream a file or standard input into the array
//! at an offset, or the array out to a file or standard output, and report what was repaired.

use crate::cmd::shared::{assemble, counters_json, print_events, MembersArgs};
use crate::units::parse_bytes;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use stripeguard_engine::{usize_of, Array, EngineError};
use stripeguard_ops::with_control_socket;

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
    /// Read on past stripes that cannot be verified: their bytes in the output are zeros, each
    /// such range is listed on stderr, and the exit status is 3 (recovering what a damaged or
    /// force-assembled array still holds, as ddrescue does).
    #[arg(long, conflicts_with = "keep_partial")]
    skip_unrecoverable: bool,
    /// Print the report as JSON (on stderr).
    #[arg(long)]
    json: bool,
}

/// Bytes per request: a stripe's data, at least 4 MiB (requests stay stripe-sized, memory
/// bounded).
/// `write`'s input goes on past the array's end (the part that fits was written).
#[derive(Debug, thiserror::Error)]
#[error("the input goes on past the end of the array")]
struct PastTheEnd;

/// A step of `write`'s input: where it goes, its buffer and the bytes in it.
type Filled = (u64, Vec<u8>, usize);

/// The receiving end of the filled steps, shared by the writers.
type Shared<T> = std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<Result<T>>>>;

/// Requests `write` has in flight at once.
const WRITERS: usize = 2;

/// Bytes per request: whole stripes, about 4 MiB (the engine writes a request's stripes as one
/// batch; a step that ended inside a stripe would make two requests read-modify-write it).
fn step_of(array: &Array) -> Result<usize> {
    let stripe = usize::try_from(array.geometry().stripe_data_bytes())
        .context("a stripe of this array does not fit in memory")?;
    Ok(stripe * (4usize << 20).div_ceil(stripe))
}

/// What a read or write found, on stderr (stdout may carry the data): everything with
/// `--json`, else a line and the first events when something was found.
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

pub fn write(mut a: WriteArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    // Stream the input in steps of a few MiB: memory stays bounded whatever its size.
    let (mut input, known_len): (Box<dyn Read + Send>, Option<u64>) = match &a.input {
        Some(p) => {
            let f =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(f), len)
        }
        None => (Box::new(std::io::stdin()), None),
    };
    let array = assemble(&a.array, true)?;
    if let Some(len) = known_len {
        // Refused before anything is written: closed clean (nothing for a resync to do).
        if let Err(e) = array.check_range(a.offset, len) {
            array.close()?;
            return Err(e.into());
        }
    }
    let step = step_of(&array)?;
    let bar = crate::progress::bytes_bar("writing");
    if let Some(len) = known_len {
        bar.set_length(len);
    }
    let mut total = 0u64;
    let stripe = array.geometry().stripe_data_bytes();
    // The first request ends at a stripe's end when the offset is inside one; the rest are
    // whole steps.
    let first = step - usize_of(a.offset % stripe);
    let capacity = array.capacity_bytes();
    // While it writes, `status` from another process asks this one over the control socket.
    let written = with_control_socket(&array, || -> Result<()> {
        std::thread::scope(|s| -> Result<()> {
            // The input is read on a thread of its own, a step ahead, and two requests are
            // written at once (disjoint stripes): reading the input, building a request's units
            // and its member I/O were a direct write's time in series, measured.
            let (full_tx, full) = std::sync::mpsc::sync_channel::<Result<Filled>>(1);
            let full = std::sync::Arc::new(std::sync::Mutex::new(full));
            let (free, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
            for _ in 0..WRITERS + 1 {
                let _ = free.send(vec![0u8; step]);
            }
            let input = &mut input;
            let offset = a.offset;
            s.spawn(move || {
                let (mut at, mut want) = (offset, first);
                while let Ok(mut buf) = free_rx.recv() {
                    // Fill a whole step (pipes deliver short reads) so requests stay whole
                    // stripes.
                    let mut got = 0;
                    let filled = loop {
                        if got == want {
                            break Ok(());
                        }
                        match input.read(&mut buf[got..want]) {
                            Ok(0) => break Ok(()),
                            Ok(n) => got += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => break Err(e),
                        }
                    };
                    let last = got < want || filled.is_err();
                    let sent = match filled {
                        Ok(()) => full_tx.send(Ok((at, buf, got))),
                        Err(e) => {
                            full_tx.send(Err(anyhow::Error::new(e).context("reading the input")))
                        }
                    };
                    if sent.is_err() || last {
                        return;
                    }
                    at = at.saturating_add(got as u64);
                    want = step;
                }
            });
            let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            // Each writer owns its ends of the channels: when the writers are gone, the reader's
            // next send or wait fails and it stops too.
            let writer = |full: Shared<Filled>,
                          free: std::sync::mpsc::Sender<Vec<u8>>,
                          done: std::sync::Arc<std::sync::atomic::AtomicU64>,
                          failed: std::sync::Arc<std::sync::atomic::AtomicBool>|
             -> Result<()> {
                loop {
                    let next = full.lock().expect("lock").recv();
                    let Ok(next) = next else { return Ok(()) };
                    if failed.load(std::sync::atomic::Ordering::Relaxed) {
                        return Ok(());
                    }
                    let (at, buf, got) = next?;
                    if got == 0 {
                        return Ok(());
                    }
                    // Input that runs past the array's end (a pipe: a file's length is checked
                    // before anything is written): what fits is written, as dd does.
                    let fits = usize_of(capacity.saturating_sub(at)).min(got);
                    let wrote = if fits == 0 {
                        Ok(())
                    } else {
                        array.write(at, &buf[..fits])
                    };
                    if let Err(e) = wrote {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(e.into());
                    }
                    let d = done.fetch_add(fits as u64, std::sync::atomic::Ordering::Relaxed);
                    bar.set_position(d + fits as u64);
                    if fits < got {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(PastTheEnd.into());
                    }
                    let _ = free.send(buf);
                }
            };
            let writers: Vec<_> = (0..WRITERS)
                .map(|_| {
                    let (full, free, done, failed) = (
                        std::sync::Arc::clone(&full),
                        free.clone(),
                        std::sync::Arc::clone(&done),
                        std::sync::Arc::clone(&failed),
                    );
                    s.spawn(move || writer(full, free, done, failed))
                })
                .collect();
            drop((full, free));
            let mut result = Ok(());
            for w in writers {
                let r = w.join().expect("a writer thread panicked");
                if result.is_ok() {
                    result = r;
                }
            }
            total = done.load(std::sync::atomic::Ordering::Relaxed);
            result
        })
    });
    bar.finish_and_clear();
    // Input past the end: said with what was written, not as the request that did not fit.
    let written = written.map_err(|e| {
        if e.is::<PastTheEnd>() {
            anyhow::anyhow!(
                "the input is longer than the array from offset {}: its first {total} bytes were written, up to the array's end ({capacity} bytes); the rest of the input was not",
                a.offset
            )
        } else {
            e
        }
    });
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
            report(&array, "wrote", total, a.json);
            array.close()?;
        }
        return Err(e);
    }
    report(&array, "wrote", total, a.json);
    array.close()?;
    Ok(ExitCode::from(crate::exit::OK))
}

pub fn read(mut a: ReadArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    // A forced assembly is read-only: its reads are verified, nothing is written back.
    let array = assemble(&a.array, !a.array.force_assemble)?;
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
    let step = step_of(&array)?;
    let mut buf = vec![0u8; step];
    let bar = crate::progress::bytes_bar("reading");
    bar.set_length(len);
    // A reader that goes (`read | head`) is an error to see, not a signal to die of while the
    // array is held: it is closed cleanly first (else it stays dirty for a resync to settle),
    // then the command ends as `cat` does.
    crate::sigpipe::ignore();
    let mut done = 0u64;
    let mut failure = None;
    let mut reader_gone = false;
    let mut refused: Vec<(u64, usize, String)> = Vec::new();
    while done < len {
        let n = usize::try_from(len - done).map_or(step, |left| left.min(step));
        let mut result = array.read(a.offset + done, &mut buf[..n]);
        if a.skip_unrecoverable
            && matches!(
                result,
                Err(stripeguard_engine::EngineError::Unrecoverable { .. })
            )
        {
            result = read_around(&array, a.offset + done, &mut buf[..n], &mut refused);
        }
        if let Err(e) = result {
            // With --keep-partial, the stripes before the refused one are still worth having.
            if let (true, stripeguard_engine::EngineError::Unrecoverable { stripe, .. }) =
                (a.keep_partial, &e)
            {
                let good = usize::try_from(
                    (stripe * array.geometry().stripe_data_bytes()).saturating_sub(a.offset + done),
                )
                .map_or(n, |g| g.min(n));
                if good > 0 && array.read(a.offset + done, &mut buf[..good]).is_ok() {
                    reader_gone = !wrote(out.write_all(&buf[..good]))?;
                    done += good as u64;
                }
            }
            failure = Some(e);
            break;
        }
        if !wrote(out.write_all(&buf[..n]))? {
            reader_gone = true;
            break;
        }
        done += n as u64;
        bar.inc(n as u64);
    }
    if reader_gone || !wrote(out.flush())? {
        // Nothing was half-done: every read returned or was refused whole.
        drop(out);
        bar.finish_and_clear();
        array.close()?;
        crate::sigpipe::die();
    }
    drop(out);
    bar.finish_and_clear();
    crate::sigpipe::default();
    if let (Some(t), Some(p)) = (temp, &a.output) {
        if failure.is_none() || a.keep_partial {
            t.persist(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
    }
    if failure.is_none() && !refused.is_empty() {
        report(&array, "read", len, a.json);
        array.close()?;
        let bytes: usize = refused.iter().map(|(_, n, _)| n).sum();
        eprintln!(
            "stripeguard: {bytes} byte(s) in {} range(s) could not be verified and were not returned (zeros in their place):",
            refused.len()
        );
        for (at, n, why) in &refused {
            eprintln!("  {n} bytes from byte {at}: {why}");
        }
        return Ok(ExitCode::from(crate::exit::UNRECOVERABLE));
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

/// `buf` read from array byte `at` a stripe at a time, what cannot be verified left as zeros and
/// listed in `refused` (byte offset, length, why), down to the sector; any other error ends it.
fn read_around(
    array: &Array,
    at: u64,
    buf: &mut [u8],
    refused: &mut Vec<(u64, usize, String)>,
) -> Result<(), stripeguard_engine::EngineError> {
    // Every verifiable byte is returned: a stripe refused is read again chunk by chunk, a
    // chunk refused sector by sector (what the integrity metadata can vouch for separately).
    let g = array.geometry();
    let tiers = [
        g.stripe_data_bytes(),
        g.chunk_bytes,
        u64::from(array.superblock().sector_bytes()),
    ];
    read_in_pieces(array, at, buf, refused, &tiers)
}

/// [`read_around`] in pieces aligned to `tiers[0]`, each refused one again in `tiers[1..]`'s.
fn read_in_pieces(
    array: &Array,
    at: u64,
    buf: &mut [u8],
    refused: &mut Vec<(u64, usize, String)>,
    tiers: &[u64],
) -> Result<(), stripeguard_engine::EngineError> {
    let piece = tiers[0].max(1);
    let mut off = 0usize;
    while off < buf.len() {
        let pos = at + off as u64;
        let to_end = usize::try_from((pos / piece + 1) * piece - pos).unwrap_or(usize::MAX);
        let m = to_end.min(buf.len() - off);
        match array.read(pos, &mut buf[off..off + m]) {
            Ok(()) => {}
            Err(stripeguard_engine::EngineError::Unrecoverable { .. }) if tiers.len() > 1 => {
                read_in_pieces(array, pos, &mut buf[off..off + m], refused, &tiers[1..])?;
            }
            Err(stripeguard_engine::EngineError::Unrecoverable { stripe, reason }) => {
                buf[off..off + m].fill(0);
                let why = format!("stripe {stripe}: {reason}");
                // Neighbouring pieces refused for the same reason are one range.
                match refused.last_mut() {
                    Some((a, n, w)) if *a + *n as u64 == pos && *w == why => *n += m,
                    _ => refused.push((pos, m, why)),
                }
            }
            Err(e) => return Err(e),
        }
        off += m;
    }
    Ok(())
}

/// Whether `r`, a write of `read`'s output, landed (`false`: the reader went — a closed pipe).
fn wrote(r: std::io::Result<()>) -> Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing output")),
    }
}
