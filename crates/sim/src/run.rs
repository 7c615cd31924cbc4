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
    /// The trace could not be opened.
    #[error("cannot open trace {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The trace is malformed.
    #[error("{path}: {source}")]
    Trace {
        /// The file.
        path: String,
        /// Where and why.
        source: TraceError,
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
    let f = File::open(path).map_err(|source| RunError::Open {
        path: name.clone(),
        source,
    })?;
    TraceReader::new(BufReader::new(f), format, opts.clone())
        .map_err(|source| RunError::Trace { path: name, source })
}

/// Replay `run`; `progress(done, total)` as requests go (total when known).
pub fn run(
    run: &Run,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<(SimReport, RunInfo), RunError> {
    let g = run.shape.geometry()?;
    let cap = g.capacity_bytes();
    let mut sim = Simulator::new(g, &run.schemes, run.map_bytes).with_cross_check(run.cross_check);
    let mut info = RunInfo::default();
    match &run.source {
        Source::Trace {
            path,
            format,
            opts,
            fit,
        } => {
            let name = path.display().to_string();
            let bad = |source| RunError::Trace {
                path: name.clone(),
                source,
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
                let mut why = format!(
                    "{name}: {} line(s) read as {}, none of them a request",
                    reader.lines_read(),
                    used.name()
                );
                if let Some(d) = &opts.device {
                    why += &format!(" of device {d}");
                }
                if opts.limit == Some(0) {
                    why += " (--limit 0)";
                } else if reader.skipped_bad > 0 {
                    why += &format!("; {} malformed line(s) skipped", reader.skipped_bad);
                } else if reader.lines_read() > 0 && format.is_some() {
                    why += "; is it really that format?";
                }
                return Err(RunError::Empty(why));
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
