//! Several member I/Os issued at once from the calling thread, then collected together: the
//! engine's path for a request's I/O to plain member files and devices, and to network exports.
//!
//! - **Files and devices** go to the kernel through the calling thread's io_uring (measured
//!   0.71× the time of a thread-per-member pool for a 4 KiB RAID-6 read-modify-write, 0.88× for
//!   a full-stripe write: `crates/bench/examples/submit.rs`).
//! - **Network exports** ([`Disk::pipelined`]) get every request sent, then every answer
//!   collected: a stripe's units on eight remote members cost one round trip, not eight, and
//!   no thread hand-off. Requests are sent, and answers awaited, in one fixed order of the
//!   disks (their addresses): a caller that has requests outstanding on one connection while
//!   it blocks sending on another waits only on connections later in that order, so callers
//!   can never wait on each other in a circle (a server that stops reading requests while its
//!   answers are unread would otherwise let two callers with crossed orders block each other).
//!
//! [`submit`] returns `None` — and touches nothing — when the I/Os cannot all go one of these
//! ways ([`Disk::direct_fd`] declines one — memory disks, fault injectors, unaligned direct
//! I/O — and not every disk is pipelined; or io_uring is unavailable: an old kernel,
//! `io_uring_disabled`); the caller then uses the disks' own calls. Every I/O either completes
//! in full or gets its own error, named as the disk's calls name theirs (EIO is a medium
//! error).

use crate::{Disk, DiskError, IoBuf, Ticket};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;

/// One I/O of a batch.
pub enum Io<'a> {
    /// Fill the buffer from `offset`.
    Read(&'a dyn Disk, u64, &'a mut [u8]),
    /// Write the buffer at `offset`.
    Write(&'a dyn Disk, u64, &'a [u8]),
}

impl<'a> Io<'a> {
    /// The disk, for as long as the batch borrows it.
    fn disk(&self) -> &'a dyn Disk {
        match self {
            Io::Read(d, ..) | Io::Write(d, ..) => *d,
        }
    }

    fn parts(&self) -> (&dyn Disk, u64, *const u8, usize, bool) {
        match self {
            Io::Read(d, o, b) => (*d, *o, b.as_ptr(), b.len(), false),
            Io::Write(d, o, b) => (*d, *o, b.as_ptr(), b.len(), true),
        }
    }
}

/// Entries of each thread's ring; a larger batch goes in several submissions.
const RING_ENTRIES: u32 = 64;

thread_local! {
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

/// Submit `ios` together and wait for all of them; one result per I/O, in order. `None` when
/// they cannot all go this way (nothing was submitted then).
pub fn submit(ios: &mut [Io<'_>]) -> Option<Vec<Result<(), DiskError>>> {
    match descriptors(ios) {
        Some(fds) => through_ring(ios, &fds),
        None => pipelined(ios),
    }
}

/// Every I/O's descriptor, or `None` when a disk declines one.
fn descriptors(ios: &[Io<'_>]) -> Option<Vec<i32>> {
    ios.iter()
        .map(|io| {
            let (d, off, ptr, len, write) = io.parts();
            if len > u32::MAX as usize {
                return None;
            }
            d.direct_fd(off, ptr, len, write)
        })
        .collect()
}

/// Every I/O sent to its pipelined disk, then every answer collected (the file's comment says
/// why in the disks' address order); a run of I/Os that continue one another on one disk goes
/// as one request. `None` when a disk is not pipelined.
fn pipelined(ios: &mut [Io<'_>]) -> Option<Vec<Result<(), DiskError>>> {
    let sides = ios
        .iter()
        .map(|io| io.disk().pipelined())
        .collect::<Option<Vec<_>>>()?;
    let keys: Vec<usize> = sides
        .iter()
        .map(|s| std::ptr::from_ref(*s).cast::<u8>() as usize)
        .collect();
    // Sorted by disk, then offset: the order the file's comment asks for.
    let runs = runs(ios, &keys);
    note_runs(ios, &runs);
    // A run of several writes as one buffer, made once: sent, and kept for a resend.
    let joins: Vec<Option<Vec<u8>>> = runs
        .iter()
        .map(|run| (run.len() > 1 && ios[run[0]].parts().4).then(|| joined(ios, run)))
        .collect();
    let mut tickets: Vec<Result<Ticket, DiskError>> = Vec::with_capacity(runs.len());
    for (run, join) in runs.iter().zip(&joins) {
        let first = run[0];
        let (_, off, _, _, write) = ios[first].parts();
        let len = run.iter().map(|&i| ios[i].parts().3).sum();
        let sent = match (&ios[first], join) {
            (_, Some(all)) => sides[first].send(off, len, Some(all)),
            (Io::Write(_, _, b), None) => sides[first].send(off, len, Some(b)),
            (Io::Read(..), None) => sides[first].send(off, len, None),
        };
        debug_assert!(write || join.is_none());
        tickets.push(sent);
    }
    let mut out: Vec<Result<(), DiskError>> = (0..ios.len()).map(|_| Ok(())).collect();
    for ((run, sent), join) in runs.iter().zip(tickets).zip(&joins) {
        let first = run[0];
        let result = sent.and_then(|t| match (&mut ios[first], run.len()) {
            (Io::Read(_, _, b), 1) => sides[first].complete(t, IoBuf::Into(b)),
            (Io::Write(_, _, b), 1) => sides[first].complete(t, IoBuf::From(b)),
            (Io::Write(..), _) => {
                let all = join
                    .as_deref()
                    .expect("a write run of several is joined above");
                sides[first].complete(t, IoBuf::From(all))
            }
            (Io::Read(..), _) => {
                let len = run.iter().map(|&i| ios[i].parts().3).sum();
                let mut all = vec![0u8; len];
                let got = sides[first].complete(t, IoBuf::Into(&mut all));
                if got.is_ok() {
                    let mut at = 0;
                    for &i in run {
                        if let Io::Read(_, _, b) = &mut ios[i] {
                            b.copy_from_slice(&all[at..at + b.len()]);
                            at += b.len();
                        }
                    }
                }
                got
            }
        });
        match result {
            Ok(()) => {}
            Err(e) if run.len() == 1 => out[first] = Err(e),
            // The disk is gone (its server unreachable for the whole timeout): every I/O of the
            // run fails as it did, not after another timeout each.
            Err(DiskError::Failed { name, why }) => {
                for &i in run {
                    out[i] = Err(DiskError::Failed {
                        name: name.clone(),
                        why: why.clone(),
                    });
                }
            }
            // A run that failed otherwise is done again I/O by I/O (the disk's own calls), so
            // each error is its own unit's.
            Err(_) => {
                for &i in run {
                    out[i] = match &mut ios[i] {
                        Io::Read(d, off, b) => d.read_at(*off, b),
                        Io::Write(d, off, b) => d.write_at(*off, b),
                    };
                }
            }
        }
    }
    Some(out)
}

/// Each run, as the one I/O it goes as, to its disk's [`Disk::note_direct`].
fn note_runs(ios: &[Io<'_>], runs: &[Vec<usize>]) {
    for run in runs {
        let (d, off, _, _, write) = ios[run[0]].parts();
        d.note_direct(off, run.iter().map(|&i| ios[i].parts().3).sum(), write);
    }
}

/// The bytes of a run of writes, one after another.
fn joined(ios: &[Io<'_>], run: &[usize]) -> Vec<u8> {
    let mut all = Vec::with_capacity(run.iter().map(|&i| ios[i].parts().3).sum());
    for &i in run {
        if let Io::Write(_, _, b) = &ios[i] {
            all.extend_from_slice(b);
        }
    }
    all
}

/// The I/Os through the calling thread's io_uring, `None` when it has none.
fn through_ring(ios: &mut [Io<'_>], fds: &[i32]) -> Option<Vec<Result<(), DiskError>>> {
    // Runs of I/Os that continue one another on one descriptor go as one vectored I/O
    // (consecutive stripes' units on a member are contiguous), and are noted as the one I/O
    // they are; what such an I/O does not move whole, and every I/O alone, goes one by one.
    let runs = runs(ios, fds);
    note_runs(ios, &runs);
    // Pointers for the kernel: a read's from its exclusive borrow, a write's from its shared one.
    let ptrs: Vec<*mut u8> = ios
        .iter_mut()
        .map(|io| match io {
            Io::Read(_, _, b) => b.as_mut_ptr(),
            Io::Write(_, _, b) => b.as_ptr() as *mut u8,
        })
        .collect();
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ring = slot
            .get_or_insert_with(|| IoUring::new(RING_ENTRIES).ok())
            .as_mut()?;
        let (whole, ring_failed) = run_vectored(ring, ios, fds, &ptrs, &runs);
        if ring_failed {
            *slot = None;
            return Some(ios.iter().map(|io| Err(error(io, libc::EIO))).collect());
        }
        let single: Vec<usize> = runs
            .iter()
            .zip(&whole)
            .filter(|(_, &w)| !w)
            .flat_map(|(r, _)| r.iter().copied())
            .collect();
        let (out, ring_failed) = run(ring, ios, fds, &ptrs, single);
        if ring_failed {
            // Dropped so that the next call makes a new one.
            *slot = None;
        }
        Some(out)
    })
}

/// The most I/Os one vectored I/O joins, and the most bytes it moves.
const RUN_IOS: usize = 64;
const RUN_BYTES: usize = 8 << 20;

/// The I/Os grouped into runs: one descriptor, one direction, each I/O starting where the one
/// before ends (within RUN_IOS and RUN_BYTES); every other I/O a run of its own.
fn runs<K: Ord + Copy>(ios: &[Io<'_>], fds: &[K]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..ios.len()).collect();
    order.sort_by_key(|&i| {
        let (_, off, _, _, write) = ios[i].parts();
        (fds[i], write, off)
    });
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0usize;
    for i in order {
        let (_, off, _, len, write) = ios[i].parts();
        let joins = out.last().is_some_and(|run| {
            let j = *run.last().expect("runs are never empty");
            let (_, o, _, l, w) = ios[j].parts();
            fds[j] == fds[i]
                && w == write
                && o + l as u64 == off
                && run.len() < RUN_IOS
                && bytes + len <= RUN_BYTES
        });
        if joins {
            out.last_mut().expect("checked above").push(i);
            bytes += len;
        } else {
            out.push(vec![i]);
            bytes = len;
        }
    }
    out
}

/// Each run of two or more I/Os as one vectored I/O; per run, whether it moved every byte
/// (runs of one are `false`: they go one by one), and whether the ring itself failed.
fn run_vectored(
    ring: &mut IoUring,
    ios: &[Io<'_>],
    fds: &[i32],
    ptrs: &[*mut u8],
    runs: &[Vec<usize>],
) -> (Vec<bool>, bool) {
    let mut whole = vec![false; runs.len()];
    let joined: Vec<usize> = (0..runs.len()).filter(|&r| runs[r].len() > 1).collect();
    // The iovec arrays live until every entry that names them is reaped (below).
    let iovecs: Vec<Vec<libc::iovec>> = runs
        .iter()
        .map(|run| {
            // Runs of one go one by one (no iovecs).
            let run = if run.len() > 1 { &run[..] } else { &[] };
            run.iter()
                .map(|&i| libc::iovec {
                    iov_base: ptrs[i].cast::<libc::c_void>(),
                    iov_len: ios[i].parts().3,
                })
                .collect()
        })
        .collect();
    for batch in joined.chunks(RING_ENTRIES as usize) {
        for &r in batch {
            let first = runs[r][0];
            let (_, off, _, _, write) = ios[first].parts();
            let fd = types::Fd(fds[first]);
            // A run has at most RUN_IOS entries.
            let n = u32::try_from(iovecs[r].len()).unwrap_or(u32::MAX);
            let e = if write {
                opcode::Writev::new(fd, iovecs[r].as_ptr(), n)
                    .offset(off)
                    .build()
            } else {
                opcode::Readv::new(fd, iovecs[r].as_ptr(), n)
                    .offset(off)
                    .build()
            };
            // SAFETY: as in `run`: the descriptor stays open and every buffer an iovec names
            // is borrowed (exclusively for reads) by `ios` for this whole call; the iovec
            // arrays outlive the loop; every entry pushed is reaped before the next batch and
            // before returning; at most RING_ENTRIES are in flight.
            unsafe {
                ring.submission()
                    .push(&e.user_data(r as u64))
                    .expect("the batch fits the ring");
            }
        }
        let mut left = batch.len();
        while left > 0 {
            if let Err(e) = ring.submit_and_wait(1) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return (whole, true);
            }
            for c in ring.completion() {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "user_data is an index into `runs`, set from a usize above"
                )]
                let r = c.user_data() as usize;
                left -= 1;
                let total: usize = runs[r].iter().map(|&i| ios[i].parts().3).sum();
                whole[r] = usize::try_from(c.result()).is_ok_and(|n| n == total);
            }
        }
    }
    (whole, false)
}

/// The I/Os `pending` (the rest are done already) one by one; every I/O's result, and whether
/// the ring itself failed.
fn run(
    ring: &mut IoUring,
    ios: &[Io<'_>],
    fds: &[i32],
    ptrs: &[*mut u8],
    mut pending: Vec<usize>,
) -> (Vec<Result<(), DiskError>>, bool) {
    let mut out: Vec<Result<(), DiskError>> = (0..ios.len()).map(|_| Ok(())).collect();
    // Bytes still to move per I/O (a short transfer is continued, as read_exact_at does).
    let mut done = vec![0usize; ios.len()];
    while !pending.is_empty() {
        let batch: Vec<usize> = pending
            .iter()
            .copied()
            .take(RING_ENTRIES as usize)
            .collect();
        for &i in &batch {
            let (_, off, _, len, write) = ios[i].parts();
            let ptr = ptrs[i];
            let at = done[i];
            let fd = types::Fd(fds[i]);
            // `submit` declines an I/O over u32::MAX bytes; were one here, the clamp would
            // only make it a short transfer, continued below.
            let n = u32::try_from(len - at).unwrap_or(u32::MAX);
            let (p, o) = (ptr.wrapping_add(at), off + at as u64);
            let e = if write {
                opcode::Write::new(fd, p as *const u8, n).offset(o).build()
            } else {
                opcode::Read::new(fd, p, n).offset(o).build()
            };
            // SAFETY: the entry names `fd`, which the disk gave for this I/O and which stays
            // open while `ios` borrows the disk, and `n` bytes at `p`, inside the buffer `ios`
            // borrows (exclusively for a read) for this whole call. The call reaps every entry
            // it pushes before returning: waits interrupted by a signal are retried, and with
            // at most RING_ENTRIES entries in flight the completion queue (twice that) cannot
            // overflow, so io_uring_enter fails only when it accepted nothing (the early return
            // below). The ring has room for `batch`: at most RING_ENTRIES, all reaped before
            // the next batch is pushed.
            unsafe {
                ring.submission()
                    .push(&e.user_data(i as u64))
                    .expect("the batch fits the ring");
            }
        }
        let mut left = batch.len();
        let mut again = Vec::new();
        while left > 0 {
            if let Err(e) = ring.submit_and_wait(1) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // The ring itself failed: every I/O still in it is reported failed, and the
                // ring is dropped so the next call makes a new one.
                for &i in &batch {
                    if matches!(out[i], Ok(())) && done[i] < ios[i].parts().3 {
                        out[i] = Err(error(&ios[i], e.raw_os_error().unwrap_or(libc::EIO)));
                    }
                }
                return (out, true);
            }
            for c in ring.completion() {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "user_data is an index into `ios`, set from a usize above"
                )]
                let i = c.user_data() as usize;
                left -= 1;
                let r = c.result();
                let len = ios[i].parts().3;
                if r < 0 {
                    out[i] = Err(error(&ios[i], -r));
                } else if r == 0 {
                    // End of file before the buffer was filled.
                    out[i] = Err(error(&ios[i], libc::EIO));
                } else {
                    done[i] += r as usize;
                    if done[i] < len {
                        again.push(i);
                    }
                }
            }
        }
        pending.retain(|i| !batch.contains(i));
        pending.extend(again);
    }
    (out, false)
}

fn error(io: &Io<'_>, errno: i32) -> DiskError {
    let (d, offset, _, len, write) = io.parts();
    if errno == libc::EIO {
        return DiskError::Medium {
            name: d.name().to_string(),
            offset,
        };
    }
    DiskError::Io {
        name: d.name().to_string(),
        op: if write { "write" } else { "read" },
        offset,
        len,
        source: std::io::Error::from_raw_os_error(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileDisk, MemDisk};

    #[test]
    fn a_batch_over_files_reads_what_was_written_and_memory_disks_decline() {
        let dir = tempfile::tempdir().unwrap();
        let disks: Vec<FileDisk> = (0..3)
            .map(|i| {
                let p = dir.path().join(format!("d{i}"));
                std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
                FileDisk::open(&p, false).unwrap()
            })
            .collect();
        let data: Vec<Vec<u8>> = (1..=3u8).map(|i| vec![i; 8192]).collect();
        let mut writes: Vec<Io<'_>> = disks
            .iter()
            .zip(&data)
            .map(|(d, b)| Io::Write(d as &dyn Disk, 4096, &b[..]))
            .collect();
        let Some(r) = submit(&mut writes) else {
            eprintln!("skipping: io_uring is not available here");
            return;
        };
        assert!(r.iter().all(|r| r.is_ok()));
        let mut back: Vec<Vec<u8>> = (0..3).map(|_| vec![0u8; 8192]).collect();
        let mut reads: Vec<Io<'_>> = disks
            .iter()
            .zip(back.iter_mut())
            .map(|(d, b)| Io::Read(d as &dyn Disk, 4096, &mut b[..]))
            .collect();
        assert!(submit(&mut reads).unwrap().iter().all(|r| r.is_ok()));
        assert_eq!(back, data);
        // Past the end: the file disk declines, so nothing is submitted.
        let mut buf = vec![0u8; 4096];
        let mut past = [Io::Read(&disks[0], 1 << 20, &mut buf[..])];
        assert!(submit(&mut past).is_none());
        let mem = MemDisk::new("m", 1 << 20);
        let mut on_mem = [Io::Read(&mem, 0, &mut buf[..])];
        assert!(submit(&mut on_mem).is_none());
    }
}
