//! A whole simulator run: the array shape checked, the workload (a trace file or a synthetic
//! Table III profile) replayed through every scheme, and what the replay had to do to the
//! workload counted (requests wrapped or clipped to the capacity, lines skipped or ignored).
//! `stripeguard sim`, `choose` and the figures all call [`run`]; a trace that yields no request
//! is an error, never a table of zeros.

use crate::replay::{Fit, SimReport, Simulator};
use crate::synth::{Profile, SynthConfig, Synthetic};
use crate::trace::{TraceError, TraceFormat, TraceOptions, TraceReader};
use serde::Serialize;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use stripeguard_integrity::{CrossCheck, Scheme};
use stripeguard_plan::Geometry;

/// The array a workload runs on, as the user gave it.
#[derive(Clone, Debug)]
pub struct ArrayShape {
    /// Members `n`.
    pub disks: usize,
    /// Parity members `m`.
    pub parity: usize,
    /// Chunk size in bytes.
    pub chunk_bytes: u64,
    /// Capacity the requests fall in.
    pub capacity_bytes: u64,
}

impl ArrayShape {
    /// The geometry, or an error naming the number that does not fit.
    pub fn geometry(&self) -> Result<Geometry, RunError> {
        let (n, m) = (self.disks, self.parity);
        if m == 0 || m >= n {
            return Err(RunError::Shape(format!(
                "{n} disks cannot hold {m} parity chunk(s) and at least one data chunk"
            )));
        }
        if self.chunk_bytes == 0 || !self.chunk_bytes.is_multiple_of(512) {
            return Err(RunError::Shape(format!(
                "chunk size {} is not a non-zero multiple of 512 bytes",
                self.chunk_bytes
            )));
        }
        if u32::try_from(self.chunk_bytes).is_err() {
            return Err(RunError::Shape(format!(
                "chunk size {} does not fit 32 bits (chunks are at most 4 GiB - 512 bytes)",
                self.chunk_bytes
            )));
        }
        let k = n - m;
        let stripe = (k as u64).saturating_mul(self.chunk_bytes);
        if self.capacity_bytes < stripe {
            return Err(RunError::Shape(format!(
                "capacity {} bytes is smaller than one stripe ({k} x {} = {stripe} bytes)",
                self.capacity_bytes, self.chunk_bytes
            )));
        }
        Ok(Geometry {
            k,
            m,
            chunk_bytes: self.chunk_bytes,
            stripes: self.capacity_bytes / stripe,
        })
    }
}

/// How trace offsets are mapped onto the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitMode {
    /// Offset modulo the capacity.
    Wrap,
    /// Offsets scaled by the trace's extent (found in a first pass).
    Scale,
}

/// Where requests come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A block trace.
    Trace {
        /// The file.
        path: PathBuf,
        /// Its format, or `None` to detect it.
        format: Option<TraceFormat>,
        /// Reader options.
        opts: TraceOptions,
        /// Offset mapping.
        fit: FitMode,
    },
    /// A synthetic workload.
    Profile {
        /// The profile.
        profile: Profile,
        /// Requests to generate.
        requests: u64,
        /// Seed.
        seed: u64,
    },
}

/// One run.
#[derive(Clone, Debug)]
pub struct Run {
    /// The array.
    pub shape: ArrayShape,
    /// Schemes (lanes).
    pub schemes: Vec<Scheme>,
    /// First-read map memory per scheme.
    pub map_bytes: u64,
    /// Cross-check setting.
    pub cross_check: CrossCheck,
    /// The workload.
    pub source: Source,
    /// Also compare the RAID-6 codes (raid6, rdp, tier) in their own blocks
    /// ([`crate::codes`]); `Some(Some(f))` with physical member `f` failed.
    pub codes: Option<Option<usize>>,
    /// Cache sizes (checksum chunks; 0 = none) to count Kroth & Yang's checksum chunk with.
    pub checksum_chunk_caches: Vec<usize>,
}

/// What the replay did to the workload.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunInfo {
    /// A one-line description of the workload.
    pub label: String,
    /// Requests replayed.
    pub requests: u64,
    /// Malformed trace lines skipped (`--skip-bad`).
    pub skipped_bad: u64,
    /// Trace lines that were not requests (headers, other devices, other events).
    pub ignored_lines: u64,
    /// Requests whose offset lay beyond the capacity and was wrapped.
    pub wrapped: u64,
    /// Requests cut at the end of the capacity.
    pub clipped: u64,
}

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The array shape does not work.
    #[error("{0}")]
    Shape(String),
    // The causes below are part of the message and deliberately not `#[source]`s: a caller that
    // prints the chain (`anyhow`'s `{:#}`) would print them twice.
    /// The trace could not be opened.
    #[error("cannot open trace {path}: {error}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The trace is malformed.
    #[error("{path}: {error}")]
    Trace {
        /// The file.
        path: String,
        /// Where and why.
        error: TraceError,
    },
    /// Nothing to replay.
    #[error("no request to replay: {0}")]
    Empty(String),
}

fn open(
    path: &PathBuf,
    format: Option<TraceFormat>,
    opts: &TraceOptions,
) -> Result<TraceReader<BufReader<File>>, RunError> {
    let name = path.display().to_string();
    let f = File::open(path).map_err(|error| RunError::Open {
        path: name.clone(),
        error,
    })?;
    TraceReader::new(BufReader::new(f), format, opts.clone())
        .map_err(|error| RunError::Trace { path: name, error })
}

fn lines(n: u64) -> String {
    format!("{n} line{}", if n == 1 { "" } else { "s" })
}

/// Why a trace that was read to its end (or to `--limit`) gave no request.
fn why_empty<R: std::io::BufRead>(
    name: &str,
    reader: &TraceReader<R>,
    opts: &TraceOptions,
    forced: bool,
) -> String {
    let read = reader.lines_read();
    if opts.limit == Some(0) {
        return format!("--limit 0 replays nothing of {name}");
    }
    if read == 0 {
        return format!("{name} is empty");
    }
    if !reader.has_text() {
        return format!("{name} has only blank lines ({})", lines(read));
    }
    let used = reader.format().name();
    let mut why = format!("{name}: 0 of {} parsed as {used} requests", lines(read));
    if let Some(d) = &opts.device {
        why += &format!(" of device {d}");
    }
    if reader.skipped_bad > 0 {
        why += &format!("; {} malformed and skipped", lines(reader.skipped_bad));
    }
    if forced && opts.device.is_none() {
        why += &format!("; is it really a {used} trace?");
    }
    why
}

/// Replay `run`; `progress(done, total)` as requests go (total when known).
pub fn run(
    run: &Run,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<(SimReport, RunInfo), RunError> {
    let g = run.shape.geometry()?;
    let cap = g.capacity_bytes();
    let mut sim = Simulator::new(g, &run.schemes, run.map_bytes).with_cross_check(run.cross_check);
    if let Some(failed) = run.codes {
        sim = sim.with_codes(failed).map_err(RunError::Shape)?;
    }
    sim = sim.with_checksum_chunk(&run.checksum_chunk_caches);
    let mut info = RunInfo::default();
    match &run.source {
        Source::Trace {
            path,
            format,
            opts,
            fit,
        } => {
            let name = path.display().to_string();
            let bad = |error| RunError::Trace {
                path: name.clone(),
                error,
            };
            let fit = match fit {
                FitMode::Wrap => Fit::Wrap,
                FitMode::Scale => {
                    let mut extent = 0u64;
                    for r in open(path, *format, opts)? {
                        let r = r.map_err(bad)?;
                        extent = extent.max(r.offset.saturating_add(r.len));
                    }
                    Fit::Scale { extent }
                }
            };
            let mut reader = open(path, *format, opts)?;
            let used = reader.format();
            for r in reader.by_ref() {
                let r = r.map_err(bad)?;
                if fit == Fit::Wrap && r.offset >= cap {
                    info.wrapped += 1;
                }
                let fitted = fit.apply(r, cap);
                if fitted.len < r.len {
                    info.clipped += 1;
                }
                sim.replay(fitted);
                info.requests += 1;
                if info.requests % 4096 == 0 {
                    progress(info.requests, opts.limit);
                }
            }
            info.skipped_bad = reader.skipped_bad;
            info.ignored_lines = reader.ignored;
            if info.requests == 0 {
                return Err(RunError::Empty(why_empty(
                    &name,
                    &reader,
                    opts,
                    format.is_some(),
                )));
            }
            info.label = format!(
                "trace {name} ({}{}{})",
                used.name(),
                if reader.skipped_bad > 0 {
                    format!(", {} malformed lines skipped", reader.skipped_bad)
                } else {
                    String::new()
                },
                opts.device
                    .as_ref()
                    .map(|d| format!(", device {d}"))
                    .unwrap_or_default()
            );
        }
        Source::Profile {
            profile,
            requests,
            seed,
        } => {
            if *requests == 0 {
                return Err(RunError::Empty("a synthetic workload of 0 requests".into()));
            }
            let mut gen = Synthetic::new(SynthConfig {
                profile: *profile,
                requests: *requests,
                capacity_bytes: cap,
                seed: *seed,
            });
            let mut batch = Vec::with_capacity(4096);
            loop {
                batch.clear();
                batch.extend(gen.by_ref().take(4096));
                if batch.is_empty() {
                    break;
                }
                sim.replay_batch(&batch);
                info.requests += batch.len() as u64;
                progress(info.requests, Some(*requests));
            }
            info.label = format!(
                "profile {} (reads {:.1} %, avg read {:.2}K, avg write {:.2}K; {requests} requests, seed {seed})",
                profile.name,
                profile.read_ratio * 100.0,
                profile.avg_read_bytes / 1024.0,
                profile.avg_write_bytes / 1024.0,
            );
        }
    }
    progress(info.requests, Some(info.requests));
    Ok((sim.report(), info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stripeguard_integrity::Scheme;

    fn trace_run(
        text: &[u8],
        format: Option<TraceFormat>,
        opts: TraceOptions,
    ) -> (tempfile::TempDir, Run) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        std::fs::write(&path, text).unwrap();
        let run = Run {
            shape: ArrayShape {
                disks: 6,
                parity: 2,
                chunk_bytes: 4096,
                capacity_bytes: 1 << 20,
            },
            schemes: vec![Scheme::None],
            map_bytes: 1 << 20,
            cross_check: CrossCheck::default(),
            codes: None,
            checksum_chunk_caches: Vec::new(),
            source: Source::Trace {
                path,
                format,
                opts,
                fit: FitMode::Wrap,
            },
        };
        (dir, run)
    }

    /// The error as the CLI prints it: its message, then every source's (`anyhow`'s `{:#}`).
    fn printed(e: &RunError) -> String {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(x) = src {
            s += &format!(": {x}");
            src = x.source();
        }
        s
    }

    #[test]
    fn a_malformed_line_is_reported_once_with_its_file_and_number() {
        let (_d, r) = trace_run(b"1 0 8 8 0\n2 0 x 8 1\n", None, TraceOptions::default());
        let e = printed(&run(&r, &mut |_, _| {}).unwrap_err());
        assert!(e.contains("t.trace: line 2:"), "{e}");
        assert_eq!(e.matches("is not a number").count(), 1, "{e}");
        let (_d, r) = trace_run(b"hello world\n", None, TraceOptions::default());
        let e = printed(&run(&r, &mut |_, _| {}).unwrap_err());
        assert_eq!(e.matches("cannot tell the trace format").count(), 1, "{e}");
    }

    #[test]
    fn an_empty_file_is_an_error_that_says_so() {
        for format in [None, Some(TraceFormat::Msr)] {
            let (_d, r) = trace_run(b"", format, TraceOptions::default());
            let e = run(&r, &mut |_, _| {}).unwrap_err();
            assert!(matches!(e, RunError::Empty(_)), "{e}");
            let e = e.to_string();
            assert!(e.contains("t.trace is empty"), "{e}");
            assert!(!e.contains("really that format"), "{e}");
        }
        let (_d, r) = trace_run(b"\n\n  \n", None, TraceOptions::default());
        let e = run(&r, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("t.trace has only blank lines (3 lines)"), "{e}");
    }

    #[test]
    fn text_that_is_not_a_trace_yields_no_request_and_an_error() {
        let prose = b"It was a bright cold day in April,\nand the clocks were striking thirteen.\n";
        let (_d, r) = trace_run(prose, Some(TraceFormat::Blkparse), TraceOptions::default());
        let e = run(&r, &mut |_, _| {}).unwrap_err();
        assert!(matches!(e, RunError::Empty(_)), "{e}");
        let e = e.to_string();
        assert!(e.contains("0 of 2 lines") && e.contains("blkparse"), "{e}");
        let opts = TraceOptions {
            device: Some("9".into()),
            ..TraceOptions::default()
        };
        let (_d, r) = trace_run(b"1 0 8 8 0\n", None, opts);
        let e = run(&r, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("device 9"), "{e}");
    }

    #[test]
    fn wrapped_and_clipped_requests_are_counted() {
        // 1 MiB capacity (4 data chunks of 4K: 64 stripes): one request beyond it, one across its end.
        let text = b"1 0 8 8 0\n2 0 4194304 8 0\n3 0 2044 16 1\n";
        let (_d, r) = trace_run(text, None, TraceOptions::default());
        let (_, info) = run(&r, &mut |_, _| {}).unwrap();
        assert_eq!((info.requests, info.wrapped, info.clipped), (3, 1, 1));
    }

    #[test]
    fn a_capacity_smaller_than_one_stripe_is_refused() {
        let (_d, mut r) = trace_run(b"1 0 8 8 0\n", None, TraceOptions::default());
        r.shape.capacity_bytes = 16384 - 512;
        let e = run(&r, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("smaller than one stripe"), "{e}");
    }
}
