//! stripeguard as an nbdkit plugin: `nbdkit ./libstripeguard_nbdkit.so members=m0,m1,...`.
//!
//! A second front end beside `stripeguard serve` for operators who already run nbdkit (TLS,
//! filters, its process model). It calls the same engine functions `serve` does: the array is
//! assembled with `assemble_paths` when nbdkit is ready (writable unless `readonly=true`), every
//! request goes through `ArrayExport` (reads checked and repaired, an unrecoverable stripe is
//! `EIO` for that request only; FUA and FLUSH are the engine's flush; trim and zero write zeros
//! through the engine), and the array is flushed and closed clean when nbdkit unloads the
//! plugin. While it runs, the array's control socket answers `status` (and keeps the owner
//! record's heartbeat for members no lock reaches), as it does for `serve`.
//!
//! Configuration: `members=PATH,PATH,...` (paths or NBD URIs, in member order; required),
//! `direct=true` (O_DIRECT members), `readonly=true` (assemble read-only).

use nbdkit::*;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use stripeguard_engine::{assemble_paths, with_control_socket_and, ArrayExport};
use stripeguard_nbd::Export;

#[derive(Default)]
struct Config {
    members: Vec<PathBuf>,
    direct: bool,
    readonly: bool,
}

/// The assembled array, the control-socket thread and the way to stop it.
struct Running {
    export: Arc<ArrayExport>,
    stop: mpsc::Sender<()>,
    control: std::thread::JoinHandle<()>,
}

static CONFIG: Mutex<Config> = Mutex::new(Config {
    members: Vec::new(),
    direct: false,
    readonly: false,
});
static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// One client connection.
struct Handle {
    export: Arc<ArrayExport>,
    readonly: bool,
}

fn err(e: stripeguard_nbd::ExportError) -> Error {
    // NBD's error numbers are errno values (EIO 5, EINVAL 22, EPERM 1, ENOSPC 28).
    Error::new(e.errno as i32, e.message)
}

fn config_error(msg: String) -> Error {
    Error::new(libc_einval(), msg)
}

fn libc_einval() -> i32 {
    22
}

impl Server for Handle {
    fn name() -> &'static str {
        "stripeguard"
    }

    fn description() -> Option<&'static str> {
        Some("a stripeguard array: RAID with silent-corruption detection, location and repair")
    }

    fn config_help() -> Option<&'static str> {
        Some(
            "members=PATH,PATH,...  the array's members in order (paths or NBD URIs; required)\n\
             direct=true            open members with O_DIRECT\n\
             readonly=true          assemble the array read-only",
        )
    }

    fn config(key: &str, value: &str) -> Result<()> {
        let mut c = CONFIG.lock().expect("lock");
        match key {
            "members" => {
                c.members = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)
                    .collect();
                Ok(())
            }
            "direct" => {
                c.direct = parse_bool(value)?;
                Ok(())
            }
            "readonly" => {
                c.readonly = parse_bool(value)?;
                Ok(())
            }
            other => Err(config_error(format!(
                "unknown parameter {other:?} (stripeguard takes members=, direct=, readonly=)"
            ))),
        }
    }

    fn config_complete() -> Result<()> {
        let c = CONFIG.lock().expect("lock");
        if c.members.len() < 2 {
            return Err(config_error(
                "members=PATH,PATH,... is required (at least two members, in member order)".into(),
            ));
        }
        Ok(())
    }

    fn get_ready() -> Result<()> {
        let c = CONFIG.lock().expect("lock");
        let array = assemble_paths(&c.members, c.direct, !c.readonly)
            .map_err(|e| Error::new(5, e.to_string()))?;
        for h in array.health() {
            if let Some(why) = &h.failed {
                eprintln!(
                    "stripeguard: WARNING: member {} ({}) is out of the array: {why}; running DEGRADED",
                    h.index, h.name
                );
            }
        }
        let array = Arc::new(array);
        let export = Arc::new(ArrayExport::new(Arc::clone(&array)));
        let (stop, stopped) = mpsc::channel::<()>();
        let control = std::thread::spawn(move || {
            with_control_socket_and(&array, &Vec::new, || {
                let _ = stopped.recv();
            });
        });
        *RUNNING.lock().expect("lock") = Some(Running {
            export,
            stop,
            control,
        });
        Ok(())
    }

    fn thread_model() -> Result<ThreadModel> {
        Ok(ThreadModel::Parallel)
    }

    fn open(readonly: bool) -> Result<Box<dyn Server>> {
        let running = RUNNING.lock().expect("lock");
        let r = running
            .as_ref()
            .ok_or_else(|| Error::new(5, "the array is not assembled"))?;
        Ok(Box::new(Handle {
            export: Arc::clone(&r.export),
            readonly: readonly || !r.export.writable(),
        }))
    }

    fn get_size(&self) -> Result<i64> {
        Ok(self.export.size_bytes() as i64)
    }

    fn can_write(&self) -> Result<bool> {
        Ok(!self.readonly)
    }

    fn can_flush(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_fua(&self) -> Result<FuaFlags> {
        Ok(FuaFlags::Native)
    }

    fn can_multi_conn(&self) -> Result<bool> {
        // A flush on any connection flushes every member: every completed write is durable.
        Ok(true)
    }

    fn can_trim(&self) -> Result<bool> {
        Ok(!self.readonly)
    }

    fn can_zero(&self) -> Result<bool> {
        Ok(!self.readonly)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.export.read(offset, buf).map_err(err)
    }

    fn write_at(&self, buf: &[u8], offset: u64, flags: Flags) -> Result<()> {
        self.export.write(offset, buf).map_err(err)?;
        if flags.contains(Flags::FUA) {
            self.export.flush().map_err(err)?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.export.flush().map_err(err)
    }

    fn trim(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        self.zero(count, offset, flags - Flags::FAST_ZERO)
    }

    fn zero(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        if flags.contains(Flags::FAST_ZERO) {
            // Zeros are written through the engine: never faster than a write.
            return Err(Error::new(95, "fast zero is not supported"));
        }
        self.export
            .write_zeroes(offset, u64::from(count))
            .map_err(err)?;
        if flags.contains(Flags::FUA) {
            self.export.flush().map_err(err)?;
        }
        Ok(())
    }

    fn unload() {
        let Some(r) = RUNNING.lock().expect("lock").take() else {
            return;
        };
        let _ = r.stop.send(());
        let _ = r.control.join();
        let Ok(export) = Arc::try_unwrap(r.export) else {
            eprintln!("stripeguard: the array is still in use at unload; it was not marked clean");
            return;
        };
        match Arc::try_unwrap(export.into_array()) {
            Ok(array) => {
                if let Err(e) = array.close() {
                    eprintln!("stripeguard: closing the array: {e}");
                }
            }
            Err(_) => eprintln!(
                "stripeguard: the array is still in use at unload; it was not marked clean"
            ),
        }
    }
}

plugin!(Handle {
    config,
    config_complete,
    config_help,
    get_ready,
    thread_model,
    write_at,
    flush,
    trim,
    zero,
    can_write,
    can_flush,
    can_fua,
    can_multi_conn,
    can_trim,
    can_zero,
    unload
});
