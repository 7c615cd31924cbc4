//! How should the engine hand one request's member I/Os to the kernel? Issue 19 asks to measure
//! a thread per member (what the engine does: a rayon pool, one thread per member) against
//! io_uring, and keep the faster. This measures the mechanism alone, outside the engine, on
//! member files with O_DIRECT: a 4 KiB RAID-6 read-modify-write (three 4 KiB reads on three
//! members at once, then three writes) and a full-stripe write (eight 64 KiB writes at once),
//! one request at a time, each way in turns in the same run:
//! - `inline`: one pread/pwrite after another on the calling thread;
//! - `pool`: the I/Os of a step fanned out to a rayon pool of one thread per member;
//! - `uring`: the I/Os of a step submitted to one io_uring together, then reaped.
//!
//! `cargo run --release -p stripeguard-bench --example submit [DIR] [REQUESTS]`
//! (DIR default /var/tmp; it must not be tmpfs, which has no O_DIRECT).
#![allow(
    clippy::cast_possible_truncation,
    reason = "buffer lengths and indices are small and known"
)]

use io_uring::{opcode, types, IoUring};
use rand::{Rng, SeedableRng};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

const MEMBERS: usize = 8;
const FILE_BYTES: u64 = 64 << 20;

/// A 4 KiB-aligned, zeroed heap buffer for O_DIRECT (leaked: the example runs once).
struct Buf(*mut u8, usize);
// SAFETY: a `Buf` owns its heap block outright (no thread-local state, nothing freed), so moving
// it to another thread is sound.
unsafe impl Send for Buf {}
// SAFETY: `&Buf` hands out its bytes only through `slice`, whose callers give each buffer to one
// I/O of a step at a time (see there), so threads sharing a `Buf` never access it concurrently.
unsafe impl Sync for Buf {}
impl Buf {
    fn new(len: usize) -> Buf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: `layout` has a non-zero size (every buffer is at least 4 KiB) and a valid
        // power-of-two alignment (checked by `from_size_align`).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!p.is_null());
        Buf(p, len)
    }
    // Each buffer belongs to one I/O of a step at a time (the steps wait for their I/Os), so
    // handing out its bytes through a shared reference never aliases a live borrow.
    #[allow(clippy::mut_from_ref)]
    fn slice(&self) -> &mut [u8] {
        // SAFETY: `self.0` points to `self.1` initialised (zeroed) bytes this `Buf` owns, and by
        // the discipline above no other reference to them is live.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
}

/// One step: (member, offset, write) per I/O, each with its own buffer.
type Step = Vec<(usize, u64, bool)>;

fn inline(files: &[File], step: &Step, bufs: &[Buf]) {
    for (&(m, off, w), b) in step.iter().zip(bufs) {
        if w {
            files[m].write_all_at(b.slice(), off).unwrap();
        } else {
            files[m].read_exact_at(b.slice(), off).unwrap();
        }
    }
}

fn pool(p: &rayon::ThreadPool, files: &[File], step: &Step, bufs: &[Buf]) {
    use rayon::prelude::*;
    p.install(|| {
        step.par_iter()
            .zip(bufs.par_iter())
            .with_max_len(1)
            .for_each(|(&(m, off, w), b)| {
                if w {
                    files[m].write_all_at(b.slice(), off).unwrap();
                } else {
                    files[m].read_exact_at(b.slice(), off).unwrap();
                }
            })
    });
}

fn uring(ring: &mut IoUring, files: &[File], step: &Step, bufs: &[Buf]) {
    for (i, (&(m, off, w), b)) in step.iter().zip(bufs).enumerate() {
        let fd = types::Fd(files[m].as_raw_fd());
        let e = if w {
            opcode::Write::new(fd, b.0, b.1 as u32).offset(off).build()
        } else {
            opcode::Read::new(fd, b.0, b.1 as u32).offset(off).build()
        };
        // SAFETY: the entry's buffer (`b`, `b.1` bytes) and file stay alive and untouched until
        // the wait below reaps every completion of this step.
        unsafe { ring.submission().push(&e.user_data(i as u64)).unwrap() };
    }
    ring.submit_and_wait(step.len()).unwrap();
    let mut done = 0;
    while done < step.len() {
        for c in ring.completion() {
            assert_eq!(
                c.result() as usize,
                bufs[c.user_data() as usize].1,
                "short or failed I/O"
            );
            done += 1;
        }
        if done < step.len() {
            ring.submit_and_wait(step.len() - done).unwrap();
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp".into()));
    let requests: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(3000);
    let files: Vec<File> = (0..MEMBERS)
        .map(|i| {
            let p = dir.join(format!("sg-submit-{}-{i}", std::process::id()));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&p)
                .expect("open with O_DIRECT (not tmpfs)");
            std::fs::remove_file(&p).unwrap();
            f.set_len(FILE_BYTES).unwrap();
            let chunk = vec![0x5au8; 1 << 20];
            let b = Buf::new(1 << 20);
            b.slice().copy_from_slice(&chunk);
            for o in (0..FILE_BYTES).step_by(1 << 20) {
                f.write_all_at(b.slice(), o).unwrap();
            }
            f.sync_all().unwrap();
            f
        })
        .collect();
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(MEMBERS)
        .build()
        .unwrap();
    let mut ring = IoUring::new(64).expect("io_uring");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let rmw = |rng: &mut rand::rngs::StdRng| -> Vec<Step> {
        let mut ms: Vec<usize> = (0..MEMBERS).collect();
        for i in 0..3 {
            let j = rng.random_range(i..MEMBERS);
            ms.swap(i, j);
        }
        let off = rng.random_range(0..FILE_BYTES / 4096) * 4096;
        let reads = ms[..3].iter().map(|&m| (m, off, false)).collect();
        let writes = ms[..3].iter().map(|&m| (m, off, true)).collect();
        vec![reads, writes]
    };
    let full = |rng: &mut rand::rngs::StdRng| -> Vec<Step> {
        let off = rng.random_range(0..FILE_BYTES / 65536) * 65536;
        vec![(0..MEMBERS).map(|m| (m, off, true)).collect()]
    };
    println!(
        "member files in {}, O_DIRECT, {requests} requests per row, turns interleaved",
        dir.display()
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "request", "inline µs", "pool µs", "uring µs", "uring/pool", "uring/inline"
    );
    for (name, make, len) in [
        (
            "4K RMW (3 rd + 3 wr)",
            &rmw as &dyn Fn(&mut rand::rngs::StdRng) -> Vec<Step>,
            4096usize,
        ),
        ("full stripe 8 x 64K", &full, 65536),
    ] {
        let bufs: Vec<Buf> = (0..MEMBERS).map(|_| Buf::new(len)).collect();
        let mut t = [0f64; 3];
        for round in 0..requests {
            let steps = make(&mut rng);
            for k in 0..3 {
                let way = (round + k) % 3;
                let s = Instant::now();
                for step in &steps {
                    match way {
                        0 => inline(&files, step, &bufs),
                        1 => pool(&p, &files, step, &bufs),
                        _ => uring(&mut ring, &files, step, &bufs),
                    }
                }
                t[way] += s.elapsed().as_secs_f64();
            }
        }
        let us = |x: f64| x / requests as f64 * 1e6;
        println!(
            "{:<22} {:>10.1} {:>10.1} {:>10.1} {:>11.2}x {:>11.2}x",
            name,
            us(t[0]),
            us(t[1]),
            us(t[2]),
            t[2] / t[1],
            t[2] / t[0]
        );
    }
}
