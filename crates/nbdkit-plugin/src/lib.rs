//! stripeguard as an nbdkit plugin: the array as an NBD export behind nbdkit, a second front end
//! beside `stripeguard serve` for operators who already run nbdkit (TLS, filters such as rate
//! limiting or logging, its process model and socket activation).
//!
//! ```text
//! nbdkit ./target/release/libstripeguard_nbdkit.so members=m0,m1,...,m7 [direct=true] --unix SOCK
//! ```
//!
//! Every request goes through the same engine calls as `stripeguard serve`: the array is
//! assembled with [`stripeguard_ops::assemble_paths`], and reads, writes, flushes, trims and
//! zeroes are [`ArrayExport`]'s [`Export`] methods, so what FORMAT.md §4 says of each NBD command
//! holds here too. A READ returns only bytes that passed the scheme's checks or were rebuilt and
//! re-checked; an unrecoverable stripe is `EIO` for that request only. FLUSH is the engine's
//! flush (every member flushed, the intent record settled), which makes every write completed on
//! any connection durable, so multi-conn is honest. FUA is native: the engine's flush after the
//! write, before the reply. TRIM and WRITE_ZEROES write zeros through the engine.
//!
//! Lifetime. nbdkit loads the plugin, passes `members=` and `direct=`, then (without `-f`)
//! forks into the background. The array is checked before the fork by a read-only assembly
//! (which writes nothing), so a wrong member list fails `nbdkit` at start; it is assembled for
//! real at the first connection, in the process that serves: the owner record names that
//! process, its heartbeats and the control socket (`stripeguard status` while nbdkit holds the
//! array) run on threads of it, and nbdkit's `-r` reaches the plugin only through `open`. The
//! array is writable unless nbdkit runs with `-r`. At unload (nbdkit stopping, its worker
//! threads done) the array is flushed, marked clean and its ownership released (`Array::close`),
//! as `serve` does when it stops.

#![warn(clippy::unwrap_used)]

use nbdkit::{
    CacheFlags, Error, ExtentHandle, ExtentType, Flags, FuaFlags, Result, Server, ThreadModel,
};
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;
use stripeguard_engine::Array;
use stripeguard_nbd::proto;
use stripeguard_ops::{assemble_paths, with_control_socket_and};
use stripeguard_serve::{ArrayExport, Export, ExportError};

/// What `members=` and `direct=` said.
struct Config {
    members: Vec<PathBuf>,
    direct: bool,
}

static CONFIG: Mutex<Config> = Mutex::new(Config {
    members: Vec::new(),
    direct: false,
});

/// The assembled array, shared by every connection of the process. Connections reach it through
/// [`HELD`] on each request instead of holding their own references: nbdkit skips a
/// connection's `close` when it is stopping (it must not call into a plugin being unloaded), so
/// references held by connections could outlive them and `unload` could never take the array
/// back to close it clean.
struct Held {
    array: Arc<Array>,
    export: Arc<ArrayExport>,
    stats: Arc<Stats>,
    /// The thread answering the control socket, and the flag that stops it (the owner
    /// record's heartbeat beats from a thread the engine keeps while the array is held).
    control: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

static HELD: RwLock<Option<Held>> = RwLock::new(None);

/// The front end's own counters, reported by `stripeguard status` beside the engine's.
#[derive(Default)]
struct Stats {
    connections: AtomicU64,
    requests: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    fn snapshot(&self) -> Vec<(String, u64)> {
        [
            ("connections", &self.connections),
            ("requests", &self.requests),
            ("read_bytes", &self.read_bytes),
            ("written_bytes", &self.written_bytes),
            ("errors", &self.errors),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.load(Ordering::Relaxed)))
        .collect()
    }
}

// nbdkit's own logging (stderr in the foreground, syslog once it has forked into the
// background); the nbdkit executable provides the symbol when it loads the plugin.
extern "C" {
    fn nbdkit_error(fmt: *const c_char, ...);
}

/// Log `msg` through nbdkit, where the operator of a background nbdkit will see it.
fn log(msg: &str) {
    let text = std::ffi::CString::new(msg.replace('\0', " ")).expect("no NUL left");
    // SAFETY: nbdkit_error is printf-like and thread-safe, and this code runs only inside the
    // nbdkit process that loaded the plugin and provides the symbol. The format is a
    // NUL-terminated "%s" that takes exactly the one argument given, a NUL-terminated C string
    // that `text` keeps alive until the call returns; nbdkit does not keep either pointer.
    unsafe { nbdkit_error(c"%s".as_ptr(), text.as_ptr()) }
}

/// NBD's error numbers (FORMAT.md §4) as the host's errno, which nbdkit sends back.
fn nbdkit_error_of(e: ExportError) -> Error {
    let errno = match e.errno {
        proto::EPERM => libc::EPERM,
        proto::EINVAL => libc::EINVAL,
        proto::ENOSPC => libc::ENOSPC,
        proto::EOVERFLOW => libc::EOVERFLOW,
        proto::ESHUTDOWN => libc::ESHUTDOWN,
        proto::ENOTSUP => libc::ENOTSUP,
        _ => libc::EIO,
    };
    Error::new(errno, e.message)
}

fn config_error(msg: String) -> Error {
    Error::new(libc::EINVAL, msg)
}

/// Assemble the array (writable unless nbdkit runs with `-r`) and start its control thread.
fn hold(writable: bool) -> Result<Held> {
    let (members, direct) = {
        let c = CONFIG.lock().expect("config lock");
        (c.members.clone(), c.direct)
    };
    let array = assemble_paths(&members, direct, writable)
        .map_err(|e| Error::new(libc::EIO, format!("assembling the array: {e}")))?;
    for h in array.health() {
        if let Some(why) = &h.failed {
            log(&format!(
                "WARNING: member {} ({}) is out of the array: {why}; running DEGRADED{}",
                h.index,
                h.name,
                if writable {
                    " (the other members' superblocks now record it as gone; replace it)"
                } else {
                    ""
                }
            ));
        }
    }
    stripeguard_ops::log_events(&array, "stripeguard-nbdkit");
    let array = Arc::new(array);
    let export = Arc::new(ArrayExport::new(Arc::new(
        stripeguard_engine::HeldArray::from_shared(Arc::clone(&array)),
    )));
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let control = {
        let (array, stats, stop) = (Arc::clone(&array), Arc::clone(&stats), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("stripeguard-control".into())
            .spawn(move || {
                let counters = || stats.snapshot();
                with_control_socket_and(&array, &counters, || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            })
            .map_err(|e| Error::new(libc::EIO, format!("starting the control thread: {e}")))?
    };
    Ok(Held {
        array,
        export,
        stats,
        control: Some((stop, control)),
    })
}

/// One client connection.
struct Connection {
    stats: Arc<Stats>,
    writable: bool,
}

impl Connection {
    /// Run one engine call. A panic (a broken invariant in the engine) must not unwind into
    /// nbdkit's C frames; by the panic policy (docs/DESIGN.md, "Panics") it aborts the
    /// process after saying so, leaving the array as a crash does, rather than serving on from
    /// an engine whose state a half-done operation may have broken.
    fn call<T>(
        &self,
        what: &str,
        f: impl FnOnce(&ArrayExport) -> std::result::Result<T, ExportError>,
    ) -> Result<T> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        // A read lock per request: unload's write lock waits for requests in flight.
        let held = HELD.read().unwrap_or_else(|e| e.into_inner());
        let Some(held) = held.as_ref() else {
            return Err(Error::new(libc::ESHUTDOWN, "the array is closed"));
        };
        let r = match catch_unwind(AssertUnwindSafe(|| f(&held.export))) {
            Ok(r) => r.map_err(nbdkit_error_of),
            Err(_) => {
                eprintln!(
                    "stripeguard-nbdkit: {what}: internal error in the engine (a bug: please report it); aborting — the array is left as after a crash and is resynced at its next assembly"
                );
                std::process::abort();
            }
        };
        if r.is_err() {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Zeros through the engine (TRIM and WRITE_ZEROES, FORMAT.md §4), then the engine's flush
    /// when the client asked for FUA.
    fn zeroes(
        &self,
        what: &str,
        count: u32,
        offset: u64,
        flags: Flags,
        may_trim: bool,
    ) -> Result<()> {
        self.call(what, |export| {
            // Asked to fail rather than be as slow as a write (qemu-img then skips a
            // pre-zeroing pass): cheap only where whole zero stripes cover the range.
            if flags.contains(Flags::FAST_ZERO) && !export.fast_zero(offset, count as u64, may_trim)
            {
                return Err(ExportError {
                    errno: proto::ENOTSUP,
                    message: "zeroing this range would be as slow as writing it".into(),
                });
            }
            export.write_zeroes(offset, count as u64, may_trim)?;
            if flags.contains(Flags::FUA) {
                export.flush()?;
            }
            Ok(())
        })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stats.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Server for Connection {
    fn name() -> &'static str {
        "stripeguard"
    }

    fn longname() -> Option<&'static str> {
        Some("stripeguard RAID array (detects and repairs silent corruption)")
    }

    fn version() -> Option<&'static str> {
        Some(env!("CARGO_PKG_VERSION"))
    }

    fn description() -> Option<&'static str> {
        Some("Serves a stripeguard array (made by `stripeguard create`) through the same engine calls as `stripeguard serve`.")
    }

    fn config_help() -> Option<&'static str> {
        Some(
            "members=PATH,PATH,...  The array's member files or devices, in member order.\n\
             array=NAME|UUID        Or the array by name or uuid, its members found as `stripeguard\n\
             \x20                      scan` finds them (/etc/stripeguard/stripeguard.conf or STRIPEGUARD_CONFIG).\n\
             direct=BOOL            Open the members with O_DIRECT (default false).",
        )
    }

    /// `nbdkit plugin.so m0,m1,...` is `members=m0,m1,...`.
    fn magic_config_key() -> Option<&'static str> {
        Some("members")
    }

    fn config(key: &str, value: &str) -> Result<()> {
        let mut c = CONFIG.lock().expect("config lock");
        match key {
            "members" => {
                for m in value.split(',') {
                    if m.is_empty() {
                        return Err(config_error(format!(
                            "members={value}: an empty member path"
                        )));
                    }
                    // nbdkit changes to / when it forks into the background: keep paths
                    // absolute (without resolving them: a missing member is not an error here).
                    let p = std::path::absolute(m).map_err(|e| {
                        config_error(format!("members: cannot make {m} absolute: {e}"))
                    })?;
                    c.members.push(p);
                }
                Ok(())
            }
            "array" => {
                if !c.members.is_empty() {
                    return Err(config_error(
                        "give members=... or array=NAME, not both".into(),
                    ));
                }
                let (_, cfg) = stripeguard_ops::config::Config::load(None).map_err(config_error)?;
                let found = stripeguard_ops::find_array(value, &cfg)
                    .map_err(|e| config_error(format!("array={value}: {e}")))?;
                for p in found.member_paths() {
                    c.members.push(std::path::absolute(&p).unwrap_or(p));
                }
                Ok(())
            }
            "direct" => {
                c.direct = nbdkit::parse_bool(value)?;
                Ok(())
            }
            _ => Err(config_error(format!(
                "unknown parameter {key} (this plugin takes members=PATH,PATH,..., array=NAME and direct=BOOL)"
            ))),
        }
    }

    fn config_complete() -> Result<()> {
        if CONFIG.lock().expect("config lock").members.is_empty() {
            return Err(config_error(
                "members=PATH,PATH,... or array=NAME is required (the array's members in order, or its name)".into(),
            ));
        }
        Ok(())
    }

    /// Before nbdkit forks: assemble read-only (writing nothing, taking no exclusive lock) and
    /// let go, so a wrong member list or an array held by another writer stops nbdkit here and
    /// not at the first client.
    fn get_ready() -> Result<()> {
        let (members, direct) = {
            let c = CONFIG.lock().expect("config lock");
            (c.members.clone(), c.direct)
        };
        let array = assemble_paths(&members, direct, false)
            .map_err(|e| Error::new(libc::EIO, format!("assembling the array: {e}")))?;
        drop(array);
        Ok(())
    }

    fn thread_model() -> Result<ThreadModel> {
        // The engine orders requests to one stripe by its stripe locks; everything else runs in
        // parallel, on one connection or many.
        Ok(ThreadModel::Parallel)
    }

    fn open(readonly: bool) -> Result<Box<dyn Server>> {
        let mut held = HELD.write().unwrap_or_else(|e| e.into_inner());
        if held.is_none() {
            *held = Some(hold(!readonly)?);
        }
        let h = held.as_ref().expect("assembled above");
        h.stats.connections.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(Connection {
            stats: Arc::clone(&h.stats),
            // A read-only connection of a writable array (a filter asked for it) stays
            // read-only; a writable one of a read-only array is served read-only.
            writable: !readonly && h.array.is_writable(),
        }))
    }

    fn unload() {
        let Some(mut held) = HELD.write().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        if let Some((stop, thread)) = held.control.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
        drop(held.export);
        match Arc::try_unwrap(held.array) {
            Ok(array) => {
                let words = stripeguard_ops::closing_words(&array);
                match array.close() {
                    Ok(()) => eprintln!("stripeguard-nbdkit: stopped; array flushed and {words}"),
                    Err(e) => log(&format!("closing the array failed: {e}")),
                }
            }
            Err(array) => {
                // Not expected (only HELD and the joined control thread held it): flush what
                // is there, and leave the array marked in use so the next assembly resyncs.
                let r = array.flush();
                log(&format!(
                    "the array is still in use at unload; flushed ({r:?}) but not marked clean"
                ));
            }
        }
    }

    fn get_size(&self) -> Result<i64> {
        let held = HELD.read().unwrap_or_else(|e| e.into_inner());
        let held = held
            .as_ref()
            .ok_or_else(|| Error::new(libc::ESHUTDOWN, "the array is closed"))?;
        Ok(held.export.size_bytes() as i64)
    }

    fn can_write(&self) -> Result<bool> {
        Ok(self.writable)
    }

    fn can_flush(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_fua(&self) -> Result<FuaFlags> {
        Ok(FuaFlags::Native)
    }

    fn can_multi_conn(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_trim(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_zero(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_cache(&self) -> Result<CacheFlags> {
        // A CACHE is a read whose bytes are thrown away: verified (and repaired) now, its
        // appendices cached, as `serve` does it (FORMAT.md §4).
        Ok(CacheFlags::Emulate)
    }

    fn can_fast_zero(&self) -> Result<bool> {
        // Offered: a fast zero succeeds where whole zero stripes cover the range and fails at
        // once with ENOTSUP elsewhere, as `serve` does.
        Ok(true)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let n = buf.len() as u64;
        self.call("read", |export| export.read(offset, buf))?;
        self.stats.read_bytes.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, flags: Flags) -> Result<()> {
        self.call("write", |export| {
            export.write(offset, buf)?;
            if flags.contains(Flags::FUA) {
                export.flush()?;
            }
            Ok(())
        })?;
        self.stats
            .written_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.call("flush", |export| export.flush())
    }

    fn trim(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        self.zeroes("trim", count, offset, flags, true)
    }

    fn zero(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        self.zeroes(
            "zero",
            count,
            offset,
            flags,
            flags.contains(Flags::MAY_TRIM),
        )
    }

    fn can_extents(&self) -> Result<bool> {
        Ok(true)
    }

    /// `base:allocation`: zero stripes are holes that read as zeros (FORMAT.md §2.7), the
    /// rest data.
    fn extents(
        &self,
        count: u32,
        offset: u64,
        _flags: Flags,
        handle: &mut ExtentHandle,
    ) -> Result<()> {
        let extents = self.call("extents", |export| {
            Ok(export.allocation(offset, count as u64))
        })?;
        let mut at = offset;
        for (len, flags) in extents {
            let kind = if flags & proto::STATE_HOLE != 0 {
                ExtentType::HoleZero
            } else {
                ExtentType::Allocated
            };
            handle.add(at, len, kind)?;
            at += len;
        }
        Ok(())
    }
}

nbdkit::plugin!(Connection {
    config,
    config_complete,
    config_help,
    get_ready,
    thread_model,
    unload,
    can_write,
    can_flush,
    can_fua,
    can_multi_conn,
    can_trim,
    can_zero,
    can_fast_zero,
    can_cache,
    can_extents,
    extents,
    write_at,
    flush,
    trim,
    zero
});
