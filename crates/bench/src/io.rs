//! `stripeguard bench io`: the engine on member files against the floor of its own I/O.
//!
//! For each scheme (`none`, `hybrid-seq`) and mode (buffered, `O_DIRECT`), an array of member
//! files in a directory on the local disk runs six workloads: 1 MiB sequential write and read,
//! 4 KiB random read and write at queue depth 1 and 32 (threads). Every member I/O of the data
//! area is recorded as it reaches the files. Two figures per row:
//!
//! - **amplification**: member bytes and member I/Os per user request, beside the unit I/Os
//!   the engine's planner planned for it (the simulator's count: on exports the member round
//!   trips against what the plan asks for) and the ideal for the request (a 4 KiB read: the
//!   block, plus its appendix where the scheme has one; a 4 KiB RAID-6 write: three blocks
//!   read and three written, plus their appendices);
//! - **efficiency**: the time `fio` takes to replay exactly the recorded member I/O list on the
//!   same files (one job per member, each replaying that member's I/Os in order, as fast as it
//!   can: a floor no engine can beat without issuing less I/O), divided by the engine's time.
//!
//! The replay is fio's `read_iolog` (iolog version 2), so the floor is measured by a tool that
//! is not ours, in the same run, on the same files.
//!
//! **Remote members** ([`Remote`]: NBD exports instead of files): the same rows, plus 1 MiB
//! sequential rows at queue depth 32, on an array made on the exports; the floor is fio's nbd
//! engine replaying each member's recorded I/O against that member's export (writes against a
//! scratch export of the same size beside it), one job per member at the row's queue depth —
//! exactly the engine's member I/O, over the same network, by a client that is not ours.
//!
//! At queue depth 1 the per-member floor is optimistic: its eight jobs overlap I/O of
//! consecutive requests that the engine, one request at a time, cannot. Those rows also report
//! a **serial floor**: one job replaying the whole list in the engine's order — pessimistic
//! where the engine overlaps the units of one request on different members, exact where a
//! request is one member I/O. The truth lies between the two.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use stripeguard_disk::{Disk, DiskError, DiskRef, FileDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::{MetadataLayout, Scheme};

/// What to measure.
#[derive(Clone, Debug)]
pub struct IoBenchOptions {
    /// Where the member files go (a directory on the disk to measure).
    pub dir: PathBuf,
    pub data_chunks: usize,
    pub parity_chunks: usize,
    pub chunk_bytes: u32,
    /// 512 or 4096.
    pub sector_bytes: u32,
    /// Bytes per member file's data area.
    pub member_data_bytes: u64,
    /// Bytes each sequential workload moves.
    pub sequential_bytes: u64,
    /// Requests of each random workload.
    pub random_requests: u64,
    /// Measure with O_DIRECT too.
    pub direct: bool,
    /// The fio binary.
    pub fio: String,
    /// Measure an array on these NBD exports instead of member files (`dir` then holds only
    /// fio's job files).
    pub remote: Option<Remote>,
}

/// NBD exports to measure on ([`IoBenchOptions::remote`]).
#[derive(Clone)]
pub struct Remote {
    /// The members, opened (`k + m` of them).
    pub members: Vec<DiskRef>,
    /// Their URIs, for fio's nbd engine.
    pub uris: Vec<String>,
    /// One scratch export per member, at least as large, that the floor's writes are replayed
    /// onto (replaying them onto the members would overwrite the array).
    pub scratch: Vec<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("uris", &self.uris)
            .field("scratch", &self.scratch)
            .finish()
    }
}

/// One row.
#[derive(Clone, Debug, Serialize)]
pub struct IoRow {
    pub scheme: &'static str,
    pub direct: bool,
    /// On NBD exports ([`Remote`]).
    pub remote: bool,
    pub workload: &'static str,
    pub queue_depth: usize,
    pub requests: u64,
    pub user_bytes: u64,
    pub member_ios_per_request: f64,
    /// The unit I/Os the engine's planner planned per request (the simulator's count): on
    /// exports, the member round trips beside what the plan asks for.
    pub planned_ios_per_request: f64,
    pub member_bytes_per_request: f64,
    pub ideal_ios_per_request: f64,
    pub ideal_bytes_per_request: f64,
    pub engine_seconds: f64,
    pub floor_seconds: f64,
    /// floor / engine: 1.0 = at the floor.
    pub efficiency: f64,
    /// Queue depth 1 only: one fio job replaying the whole list in the engine's order (no
    /// overlap between members, which the engine has inside a request), seconds.
    pub serial_floor_seconds: Option<f64>,
    /// serial floor / engine.
    pub serial_efficiency: Option<f64>,
    pub mb_per_s: f64,
    pub iops: f64,
}

#[derive(Clone, Copy)]
struct Io {
    member: u16,
    write: bool,
    offset: u64,
    len: u32,
}

/// A member that records its data-area I/O while recording is on.
struct Recording {
    inner: DiskRef,
    member: u16,
    data_offset: u64,
    on: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Io>>>,
}

impl Recording {
    fn note(&self, write: bool, offset: u64, len: usize) {
        if self.on.load(Ordering::Relaxed) && offset >= self.data_offset {
            self.log.lock().expect("lock").push(Io {
                member: self.member,
                write,
                offset,
                // Member I/Os are far below 4 GiB; one that were not would saturate, not wrap.
                len: u32::try_from(len).unwrap_or(u32::MAX),
            });
        }
    }
}

impl Disk for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.note(false, offset, buf.len());
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.note(true, offset, buf.len());
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.inner.flush()
    }
    fn prefers_parallel(&self) -> bool {
        self.inner.prefers_parallel()
    }
    fn mem_align(&self) -> usize {
        self.inner.mem_align()
    }
    fn direct_fd(
        &self,
        offset: u64,
        ptr: *const u8,
        len: usize,
        write: bool,
    ) -> Option<std::os::fd::RawFd> {
        self.inner.direct_fd(offset, ptr, len, write)
    }
    fn note_direct(&self, offset: u64, len: usize, write: bool) {
        self.note(write, offset, len);
    }
    fn pipelined(&self) -> Option<&dyn stripeguard_disk::Pipelined> {
        self.inner.pipelined()
    }
}

/// A workload: name, request bytes, write, random, queue depth.
type Workload = (&'static str, usize, bool, bool, usize);

/// The workloads on remote members besides [`WORKLOADS`]: sequential streams at queue depth 32
/// (each thread its own stream), where the network rather than a round trip is the limit.
const REMOTE_WORKLOADS: [Workload; 2] = [
    ("seq-write-1M", 1 << 20, true, false, 32),
    ("seq-read-1M", 1 << 20, false, false, 32),
];

/// The workloads.
const WORKLOADS: [Workload; 6] = [
    ("seq-write-1M", 1 << 20, true, false, 1),
    ("seq-read-1M", 1 << 20, false, false, 1),
    ("rand-read-4K", 4096, false, true, 1),
    ("rand-write-4K", 4096, true, true, 1),
    ("rand-read-4K", 4096, false, true, 32),
    ("rand-write-4K", 4096, true, true, 32),
];

/// Run every row; `progress` names what is being measured.
pub fn run(opts: &IoBenchOptions, mut progress: impl FnMut(&str)) -> Result<Vec<IoRow>, String> {
    let mut rows = Vec::new();
    if opts.remote.is_some() {
        for scheme in [Scheme::None, Scheme::HybridSeq] {
            rows.extend(one_array(opts, scheme, false, &mut progress)?);
        }
        return Ok(rows);
    }
    let modes: &[bool] = if opts.direct {
        &[false, true]
    } else {
        &[false]
    };
    for &direct in modes {
        for scheme in [Scheme::None, Scheme::HybridSeq] {
            rows.extend(one_array(opts, scheme, direct, &mut progress)?);
        }
    }
    Ok(rows)
}

fn one_array(
    opts: &IoBenchOptions,
    scheme: Scheme,
    direct: bool,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<IoRow>, String> {
    let (k, m) = (opts.data_chunks, opts.parity_chunks);
    let n = k + m;
    let chunk = opts.chunk_bytes as u64;
    let apx =
        stripeguard_integrity::appendix_bytes_for(scheme, k, opts.chunk_bytes, opts.sector_bytes)
            as u64;
    let unit = chunk + apx;
    let on = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (stripes, size, paths, scratch, inner): (
        u64,
        u64,
        Vec<PathBuf>,
        Vec<PathBuf>,
        Vec<DiskRef>,
    ) = match &opts.remote {
        Some(r) => {
            if r.members.len() != n || r.scratch.len() != n {
                return Err(format!(
                    "{k}+{m} needs {n} member exports and {n} scratch exports"
                ));
            }
            // As many stripes as the smallest export holds.
            let size = r.members.iter().map(|d| d.size_bytes()).min().unwrap_or(0);
            let layout = MetadataLayout::for_member(size);
            let stripes = size.saturating_sub(layout.data_offset()) / unit;
            let stripes = (1..=stripes)
                .rev()
                .find(|&s| MetadataLayout::member_bytes_for(s, unit) <= size)
                .ok_or_else(|| format!("exports of {size} bytes hold no stripe"))?;
            let as_paths = |u: &[String]| u.iter().map(PathBuf::from).collect();
            (
                stripes,
                size,
                as_paths(&r.uris),
                as_paths(&r.scratch),
                r.members.clone(),
            )
        }
        None => {
            let stripes = (opts.member_data_bytes / unit).max(1);
            let size = MetadataLayout::member_bytes_for(stripes, unit);
            let paths: Vec<PathBuf> = (0..n)
                .map(|i| opts.dir.join(format!("sg-bench-io-m{i}")))
                .collect();
            // The floor replays writes onto scratch files beside the members (replaying
            // them onto the members would overwrite the array with fio's bytes). Members
            // and scratch files are both allocated up front, so neither pays for
            // allocating blocks during a measurement.
            let scratch: Vec<PathBuf> = (0..n)
                .map(|i| opts.dir.join(format!("sg-bench-io-floor{i}")))
                .collect();
            for p in paths.iter().chain(&scratch) {
                let _ = std::fs::remove_file(p);
                allocate(p, size)?;
            }
            let inner = paths
                .iter()
                .map(|p| {
                    FileDisk::open(p, direct)
                        .map(|d| Arc::new(d) as DiskRef)
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<_, _>>()?;
            (stripes, size, paths, scratch, inner)
        }
    };
    let data_offset = MetadataLayout::for_member(size).data_offset();
    let mut members: Vec<DiskRef> = Vec::new();
    for (i, inner) in inner.into_iter().enumerate() {
        members.push(Arc::new(Recording {
            inner,
            member: u16::try_from(i).map_err(|_| format!("{n} members do not fit a u16"))?,
            data_offset,
            on: Arc::clone(&on),
            log: Arc::clone(&log),
        }));
    }
    let cfg = ArrayConfig {
        first_read_map_bytes: 16 << 20,
        sector_bytes: opts.sector_bytes,
        ..ArrayConfig::new(k, m, scheme, opts.chunk_bytes, stripes)
    };
    // Member files are new (zeros: only appendices need writing); exports hold whatever was
    // there before.
    let fresh = opts.remote.is_none();
    let array = Array::create(members, &cfg, fresh, &mut |_, _| {}).map_err(|e| e.to_string())?;
    // As the commands and the server run the array.
    array.enable_appendix_cache(stripeguard_engine::APPENDIX_CACHE_ENTRIES);
    let capacity = array.capacity_bytes();
    let mut rows = Vec::new();
    let remote = opts.remote.is_some();
    let extra: &[Workload] = if remote { &REMOTE_WORKLOADS } else { &[] };
    let mode = match (remote, direct) {
        (true, _) => "remote",
        (false, true) => "direct",
        (false, false) => "buffered",
    };
    for &(name, req, write, random, qd) in WORKLOADS.iter().chain(extra) {
        progress(&format!("{} {mode} {name} qd{qd}", scheme.name()));
        let requests = if random {
            opts.random_requests
        } else {
            (opts.sequential_bytes / req as u64).min(capacity / req as u64)
        };
        log.lock().expect("lock").clear();
        let planned_before = array.planned_unit_ios();
        on.store(true, Ordering::Relaxed);
        let t = Instant::now();
        drive(&array, req, write, random, qd, requests, capacity)?;
        if write {
            array.flush().map_err(|e| e.to_string())?;
        }
        let engine_seconds = t.elapsed().as_secs_f64();
        on.store(false, Ordering::Relaxed);
        let ios = std::mem::take(&mut *log.lock().expect("lock"));
        let planned = array.planned_unit_ios() - planned_before;
        let files = if write { &scratch } else { &paths };
        // On exports, each member's job keeps as many I/Os in flight as the engine could:
        // the row's requests with every member I/O of each in flight at once, spread over the
        // members (an upper bound: a read-modify-write's reads and writes are two phases).
        let in_flight = (qd as u64 * ios.len() as u64).div_ceil((requests * n as u64).max(1));
        let depth = usize::try_from(in_flight.max(1)).unwrap_or(usize::MAX);
        let floor_seconds = replay(opts, files, &ios, direct, write, Floor::PerMember(depth))?;
        let serial_floor_seconds = if qd == 1 {
            Some(replay(opts, files, &ios, direct, write, Floor::Serial)?)
        } else {
            None
        };
        let member_bytes: u64 = ios.iter().map(|io| io.len as u64).sum();
        let (ideal_ios, ideal_bytes) = ideal(scheme, (k, m, apx), chunk, req, write, random);
        rows.push(IoRow {
            scheme: scheme.name(),
            direct,
            remote,
            workload: name,
            queue_depth: qd,
            requests,
            user_bytes: requests * req as u64,
            member_ios_per_request: ios.len() as f64 / requests as f64,
            planned_ios_per_request: planned as f64 / requests as f64,
            member_bytes_per_request: member_bytes as f64 / requests as f64,
            ideal_ios_per_request: ideal_ios,
            ideal_bytes_per_request: ideal_bytes,
            engine_seconds,
            floor_seconds,
            efficiency: floor_seconds / engine_seconds,
            serial_floor_seconds,
            serial_efficiency: serial_floor_seconds.map(|f| f / engine_seconds),
            mb_per_s: (requests * req as u64) as f64 / engine_seconds / 1e6,
            iops: requests as f64 / engine_seconds,
        });
    }
    array.close().map_err(|e| e.to_string())?;
    if !remote {
        for p in paths.iter().chain(&scratch) {
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(rows)
}

/// A file of `size` bytes with its blocks allocated.
fn allocate(p: &Path, size: u64) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    // SAFETY: posix_fallocate on a file descriptor this function owns.
    let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, size as libc::off_t) };
    if r != 0 {
        f.set_len(size)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// Issue `requests` requests of `req` bytes from `qd` threads.
fn drive(
    array: &Array,
    req: usize,
    write: bool,
    random: bool,
    qd: usize,
    requests: u64,
    capacity: u64,
) -> Result<(), String> {
    let slots = capacity / req as u64;
    let per_thread = requests.div_ceil(qd as u64);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..qd)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64 + 1);
                    let mut buf = vec![0u8; req];
                    rng.fill(&mut buf[..]);
                    let first = t as u64 * per_thread;
                    let last = ((t as u64 + 1) * per_thread).min(requests);
                    for i in first..last {
                        let slot = if random {
                            rng.random_range(0..slots)
                        } else {
                            i % slots
                        };
                        let at = slot * req as u64;
                        let r = if write {
                            array.write(at, &buf)
                        } else {
                            array.read(at, &mut buf)
                        };
                        r.map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("a bench thread panicked"))
    })
}

/// The least member I/O a request needs: the bytes it touches (plus, with appendices, the
/// appendix sector of each chunk touched); a RAID write of less than a stripe reads and writes
/// the touched data and every parity (read-modify-write).
fn ideal(
    scheme: Scheme,
    (k, m, appendix): (usize, usize, u64),
    chunk: u64,
    req: usize,
    write: bool,
    random: bool,
) -> (f64, f64) {
    let apx = if scheme.has_appendix() {
        appendix as f64
    } else {
        0.0
    };
    let req = req as f64;
    let chunks_touched = (req / chunk as f64).ceil().max(1.0);
    if !write {
        let ios = chunks_touched * if apx > 0.0 { 2.0 } else { 1.0 };
        return (ios, req + chunks_touched * apx);
    }
    if random {
        // Read-modify-write of one block: data and m parities, read and written.
        let units = 1.0 + m as f64;
        let per = if apx > 0.0 { 2.0 } else { 1.0 };
        (2.0 * units * per, 2.0 * units * (req + apx))
    } else {
        // Full stripes: the data and m parity chunks per k chunks of data, written once.
        let stripes = req / (k as f64 * chunk as f64);
        let units = stripes * (k + m) as f64;
        (units, units * (chunk as f64 + apx))
    }
}

/// How the floor replays the member I/O.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Floor {
    /// One job per member, each replaying its member's I/Os in order as fast as it goes, all
    /// at once; on exports with this many I/Os in flight per job.
    PerMember(usize),
    /// The I/Os one at a time in the engine's order: one job over every file; on exports
    /// (one export per fio job) each member's job in turn at depth 1, their times summed.
    Serial,
}

/// Replay `ios` with fio as `floor` says; seconds.
fn replay(
    opts: &IoBenchOptions,
    paths: &[PathBuf],
    ios: &[Io],
    direct: bool,
    write: bool,
    floor: Floor,
) -> Result<f64, String> {
    let dir = tempfile_dir(&opts.dir)?;
    let remote = opts.remote.is_some();
    let mut job = if remote {
        let depth = match floor {
            Floor::PerMember(d) => d,
            Floor::Serial => 1,
        };
        format!("[global]\nioengine=nbd\nreplay_no_stall=1\nthread=1\niodepth={depth}\n")
    } else {
        let mut j = String::from("[global]\nioengine=psync\nreplay_no_stall=1\nthread=1\n");
        j.push_str(&format!("direct={}\n", direct as u8));
        j
    };
    if floor == Floor::Serial && !remote {
        let log = dir.join("all.iolog");
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(&log).map_err(|e| e.to_string())?);
        let w = |e: std::io::Error| e.to_string();
        writeln!(f, "fio version 2 iolog").map_err(w)?;
        for p in paths {
            writeln!(f, "{0} add\n{0} open", p.display()).map_err(w)?;
        }
        for io in ios {
            let op = if io.write { "write" } else { "read" };
            let name = paths[io.member as usize].display();
            writeln!(f, "{name} {op} {} {}", io.offset, io.len).map_err(w)?;
        }
        for p in paths {
            if write {
                writeln!(f, "{} sync 0 0", p.display()).map_err(w)?;
            }
            writeln!(f, "{} close", p.display()).map_err(w)?;
        }
        f.flush().map_err(w)?;
        job.push_str(&format!("[all]\nread_iolog={}\n", log.display()));
        return run_fio(opts, &dir, job, false);
    }
    let mut any = false;
    for (i, p) in paths.iter().enumerate() {
        let mine: Vec<&Io> = ios.iter().filter(|io| io.member as usize == i).collect();
        if mine.is_empty() {
            continue;
        }
        any = true;
        let log = dir.join(format!("m{i}.iolog"));
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(&log).map_err(|e| e.to_string())?);
        // fio's nbd engine takes the export from `uri`; the log's file name is a label.
        let label = PathBuf::from("nbd");
        let name = if remote { label.display() } else { p.display() };
        writeln!(f, "fio version 2 iolog\n{name} add\n{name} open").map_err(|e| e.to_string())?;
        for io in mine {
            let op = if io.write { "write" } else { "read" };
            writeln!(f, "{name} {op} {} {}", io.offset, io.len).map_err(|e| e.to_string())?;
        }
        if write {
            writeln!(f, "{name} sync 0 0").map_err(|e| e.to_string())?;
        }
        writeln!(f, "{name} close").map_err(|e| e.to_string())?;
        f.flush().map_err(|e| e.to_string())?;
        job.push_str(&format!("[m{i}]\nread_iolog={}\n", log.display()));
        if remote {
            job.push_str(&format!("uri={}\n", p.display()));
            if floor == Floor::Serial {
                job.push_str("stonewall=1\n");
            }
        }
    }
    if !any {
        return Ok(0.0);
    }
    run_fio(opts, &dir, job, floor == Floor::Serial)
}

/// Run the fio job file text `job` (in `dir`, removed after); the slowest job's run time, or
/// with `sum` (jobs that ran one after another) their total.
fn run_fio(opts: &IoBenchOptions, dir: &Path, job: String, sum: bool) -> Result<f64, String> {
    let jobfile = dir.join("floor.fio");
    std::fs::write(&jobfile, job).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(&opts.fio)
        .arg(&jobfile)
        .arg("--output-format=json")
        .output()
        .map_err(|e| format!("running {}: {e}", opts.fio))?;
    let _ = std::fs::remove_dir_all(dir);
    if !out.status.success() {
        return Err(format!(
            "fio failed replaying the member I/O: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The jobs run at once; the floor is the slowest one's run time as fio measures it (its
    // start-up, parsing and forking are not I/O).
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.find('{').map(|i| &text[i..]).unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("fio's JSON output: {e}"))?;
    let ms = v["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| j["job_runtime"].as_f64())
                .fold(0.0, |acc, t| if sum { acc + t } else { acc.max(t) })
        })
        .unwrap_or(0.0);
    Ok((ms / 1000.0).max(1e-3))
}

fn tempfile_dir(base: &Path) -> Result<PathBuf, String> {
    let d = base.join(format!("sg-bench-io-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    Ok(d)
}
