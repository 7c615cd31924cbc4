//! Disks for stripeguard: one small trait, [`Disk`], with positional I/O, and its backends.
//!
//! | backend | what for |
//! |---|---|
//! | [`FileDisk`] | a regular file or a block device (positional I/O, O_DIRECT optional) |
//! | [`MemDisk`] | members in memory (tests, benchmarks, the simulator's agreement test) |
//! | [`FaultyDisk`] | injects every fault of docs/DESIGN.md's table on a schedule and records what it did |
//! | [`CountingDisk`] | counts I/Os and bytes (the engine's counts must equal the planner's) |
//! | [`CrashDisk`] | keeps a durable and a live image; a crash keeps a random subset of unflushed writes |
//! | [`PowerCut`] | a crash disk whose writes stop landing after a budget of I/Os shared by the members |
//! | [`FailedDisk`] | a member that could not be opened: every I/O fails, so assembly runs degraded |
//!
//! All take `&self` and are safe to share between threads: the engine issues I/O to different
//! members, and to different stripes of one member, concurrently.

#![warn(clippy::unwrap_used)]

mod abort;
mod at_rest;
pub mod batch;
mod buf;
mod counting;
mod crash;
mod failed;
mod faulty;
mod file;
mod latency;
mod mem;

pub use abort::AbortDisk;
pub use at_rest::{apply as damage_at_rest, AtRest, AtRestError};
pub use buf::AlignedBuf;
pub use counting::{CountingDisk, IoCounts};
pub use crash::{crash_images, CrashDisk, PowerCut};
pub use failed::FailedDisk;
pub use faulty::{Fault, FaultKind, FaultyDisk, Injected, UnitMap};
pub use file::FileDisk;
pub use latency::LatencyDisk;
pub use mem::MemDisk;

use std::sync::Arc;

/// Why a disk I/O failed. Every variant is an erasure to the engine.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The OS returned an error.
    #[error("{name}: {op} of {len} bytes at {offset}: {source}")]
    Io {
        /// The disk.
        name: String,
        /// read / write / flush.
        op: &'static str,
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: usize,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Beyond the end of the disk.
    #[error("{name}: {op} of {len} bytes at {offset} is beyond the end ({size} bytes)")]
    OutOfRange {
        /// The disk.
        name: String,
        /// read / write.
        op: &'static str,
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: usize,
        /// Disk size.
        size: u64,
    },
    /// A sector could not be read (latent sector error, injected or real EIO).
    #[error("{name}: unreadable sector at byte {offset}")]
    Medium {
        /// The disk.
        name: String,
        /// Byte offset of the bad sector.
        offset: u64,
    },
    /// Another process holds the member (an advisory lock on it).
    #[error("{name} is in use by {}", holder_words(*.holder))]
    Locked {
        /// The disk.
        name: String,
        /// The process that holds it, where it can be known.
        holder: Option<u32>,
    },
    /// The whole disk is gone.
    #[error("{name}: {why}")]
    Failed {
        /// The disk.
        name: String,
        /// Why (e.g. "cannot open: No such file or directory").
        why: String,
    },
}

/// "process 1234 (stripeguard write m0 m1 m2)", or "another process".
pub fn holder_words(holder: Option<u32>) -> String {
    match holder {
        Some(pid) => {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .split('\0')
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            if cmd.is_empty() {
                format!("process {pid}")
            } else {
                format!("process {pid} ({cmd})")
            }
        }
        None => "another process".into(),
    }
}

impl DiskError {
    /// What went wrong, without the disk's name (for messages that name the disk already).
    pub fn reason(&self) -> String {
        match self {
            DiskError::Io {
                op: "open", source, ..
            } => format!("cannot open: {source}"),
            DiskError::Io {
                op,
                offset,
                len,
                source,
                ..
            } => format!("{op} of {len} bytes at {offset}: {source}"),
            DiskError::OutOfRange {
                op,
                offset,
                len,
                size,
                ..
            } => format!("{op} of {len} bytes at {offset} is beyond the end ({size} bytes)"),
            DiskError::Medium { offset, .. } => format!("unreadable sector at byte {offset}"),
            DiskError::Locked { holder, .. } => format!("in use by {}", holder_words(*holder)),
            DiskError::Failed { why, .. } => why.clone(),
        }
    }
}

/// A member disk: a fixed-size array of bytes with positional reads and writes.
pub trait Disk: Send + Sync {
    /// A name for messages (a path, or `mem3`).
    fn name(&self) -> &str;
    /// Size in bytes.
    fn size_bytes(&self) -> u64;
    /// Size in bytes as the device says now: a disk whose size can change while it is open (a
    /// file extended, a block device grown) measures it again, and [`Disk::size_bytes`] says
    /// the new size from then on. A size never shrinks in this handle (a member that shrank
    /// fails its I/O past the end as before).
    fn measure_size(&self) -> u64 {
        self.size_bytes()
    }
    /// Fill `buf` from byte `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError>;
    /// Write `buf` at byte `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError>;
    /// Make every completed write durable.
    fn flush(&self) -> Result<(), DiskError>;
    /// The device the member is, for messages and events: `block device 7:3` (its device
    /// number), `file on device 259:1, inode 1234`; `None` for disks that live in this process
    /// or on another host.
    fn device(&self) -> Option<String> {
        None
    }
    /// Whether I/O to this disk is slow enough that issuing it from several threads at once pays
    /// (files and devices: yes; memory: no, a thread hand-off costs more than the copy).
    fn prefers_parallel(&self) -> bool {
        false
    }
    /// Whether another host may open this member too (a network export), so that no local
    /// lock protects it and the owner record is the only guard (FORMAT.md §2.2).
    fn shared_across_hosts(&self) -> bool {
        false
    }
    /// The alignment direct I/O needs of buffer addresses (bytes; 1 = none). The engine
    /// allocates its unit buffers to the largest of its members'.
    fn mem_align(&self) -> usize {
        1
    }
    /// Take an advisory lock on the member for as long as this handle lives: exclusive for a
    /// process that may write, shared for one that only looks. Fails with
    /// [`DiskError::Locked`] naming the holder when another process has it in a conflicting
    /// mode. Disks that live in this process (memory, test doubles) have nothing to lock.
    fn try_lock(&self, exclusive: bool) -> Result<(), DiskError> {
        let _ = exclusive;
        Ok(())
    }
    /// The descriptor to submit this one I/O (`len` bytes at `offset` from/to the buffer at
    /// `ptr`) straight to the kernel in a batch with other disks' ([`batch`], io_uring), or
    /// `None` to use [`Disk::read_at`] / [`Disk::write_at`]. A plain file or block device
    /// gives it when the I/O is in range and aligned as its mode needs; a wrapper gives its
    /// inner disk's only if it needs nothing of the I/O beyond [`Disk::note_direct`]. No side
    /// effects: a batch asks every disk first and may then not be submitted.
    fn direct_fd(
        &self,
        offset: u64,
        ptr: *const u8,
        len: usize,
        write: bool,
    ) -> Option<std::os::fd::RawFd> {
        let _ = (offset, ptr, len, write);
        None
    }
    /// An I/O is being submitted without [`Disk::read_at`] / [`Disk::write_at`] (by the
    /// descriptor this disk gave, or through its [`Disk::pipelined`] side): a recording
    /// wrapper records it here.
    fn note_direct(&self, offset: u64, len: usize, write: bool) {
        let _ = (offset, len, write);
    }
    /// The split-phase side of a disk whose requests can be sent now and completed later from
    /// the same thread (a network export: one request per member goes out, then every reply
    /// is collected — one round trip for a stripe instead of one per member). `None`: use
    /// [`Disk::read_at`] / [`Disk::write_at`]. A wrapper gives its inner disk's only if it
    /// needs nothing of the I/O beyond [`Disk::note_direct`].
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        None
    }
}

/// Requests sent now and completed later ([`Disk::pipelined`], used by [`batch::submit`]).
pub trait Pipelined: Send + Sync {
    /// Send `len` bytes' read at `offset` (`data` `None`) or a write of `data` at `offset`,
    /// without waiting for the answer. Every sent request must be given to
    /// [`Pipelined::complete`].
    fn send(&self, offset: u64, len: usize, data: Option<&[u8]>) -> Result<Ticket, DiskError>;
    /// Wait for a sent request's answer, given the same buffer: a read's bytes land in it, a
    /// write's are there to be sent again. A request whose connection was lost before the
    /// answer is sent again, as [`Disk::read_at`] / [`Disk::write_at`] would; its errors are
    /// theirs.
    fn complete(&self, ticket: Ticket, buf: IoBuf<'_>) -> Result<(), DiskError>;
}

/// The buffer of a [`Pipelined`] request.
pub enum IoBuf<'a> {
    /// A read's: the bytes land here.
    Into(&'a mut [u8]),
    /// A write's bytes.
    From(&'a [u8]),
}

/// What a [`Pipelined`] disk needs to complete a request it sent (its own type inside).
pub struct Ticket(pub Box<dyn std::any::Any + Send>);

/// A shared disk.
pub type DiskRef = Arc<dyn Disk>;

pub(crate) fn check_range(
    name: &str,
    op: &'static str,
    offset: u64,
    len: usize,
    size: u64,
) -> Result<(), DiskError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DiskError::OutOfRange {
            name: name.to_string(),
            op,
            offset,
            len,
            size,
        }),
    }
}
