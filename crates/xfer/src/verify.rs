//! Reading back what is on the device, not what is in the page cache (RIVA's idea, with the
//! eviction that works on Linux: RIVA evicted by `munmap`, which drops a mapping, not the
//! cached pages — see `papers/INDEX.md`).
//!
//! A range is made durable (`fdatasync`), its pages are dropped (`posix_fadvise(DONTNEED)`),
//! the drop is **proved** with `mincore` on a fresh mapping of the range, and only then is the
//! range read and hashed. If some page stays resident (a concurrent reader, a locked page), the
//! range is read with `O_DIRECT` instead, which never comes from the cache.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// How a range was read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBack {
    /// Evicted (proved by mincore), then read.
    Evicted,
    /// Read with O_DIRECT (eviction could not be proved).
    Direct,
}

fn page() -> u64 {
    // SAFETY: sysconf takes a name by value and touches no memory of ours; _SC_PAGESIZE is a
    // name it knows.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Drop `[offset, offset + len)` of `f` from the page cache and report whether every page of it
/// is gone (mincore on a fresh shared mapping; mapping does not fault pages in).
pub fn evict(f: &File, offset: u64, len: u64) -> io::Result<bool> {
    if len == 0 {
        return Ok(true);
    }
    // rustix's safe fadvise is the same fadvise64 system call posix_fadvise makes.
    rustix::fs::fadvise(
        f,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::DontNeed,
    )?;
    resident(f, offset, len).map(|n| n == 0)
}

/// Pages of the range still in the page cache.
pub fn resident(f: &File, offset: u64, len: u64) -> io::Result<usize> {
    let pg = page();
    let start = offset / pg * pg;
    let end = (offset + len).div_ceil(pg) * pg;
    let size = f.metadata()?.len();
    let end = end.min(size.div_ceil(pg) * pg);
    if end <= start {
        return Ok(0);
    }
    let too_long = |_| io::Error::new(io::ErrorKind::InvalidInput, "a range too long to map");
    let map_len = usize::try_from(end - start).map_err(too_long)?;
    // `start` and `end` are multiples of the page size.
    let pages = usize::try_from((end - start) / pg).map_err(too_long)?;
    // SAFETY: a new mapping at an address the kernel chooses (null hint, no MAP_FIXED), so no
    // existing memory is affected; read-only and shared, of our own open descriptor; it is
    // only used through the mincore call below, never dereferenced.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            start as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `p` is the mapping of `map_len` bytes made above (page-aligned, as mmap
    // returns it); mincore writes one byte per page of it, `pages` bytes, into `vec`, which
    // holds exactly that many.
    let r = unsafe { libc::mincore(p, map_len, vec.as_mut_ptr()) };
    let e = io::Error::last_os_error();
    // SAFETY: unmaps exactly the mapping made above, which nothing else refers to.
    unsafe { libc::munmap(p, map_len) };
    if r != 0 {
        return Err(e);
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Make `[offset, offset + buf.len())` of `f` durable, drop it from the page cache (proved),
/// and read it back from the device into `buf`.
pub fn durable_then_read_back(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<ReadBack> {
    f.sync_data()?;
    read_back(f, offset, buf).map(|(how, _)| how)
}

/// Time spent in each stage of [`durable_then_read_back`].
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    pub durable: std::time::Duration,
    pub evict: std::time::Duration,
    pub read_back: std::time::Duration,
}

/// Read a range that is already durable back from the device: drop it from the page cache
/// (proved), then read it; with the time of each stage (`durable` left zero).
pub fn read_back(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<(ReadBack, StageTimes)> {
    let mut t = StageTimes::default();
    for _ in 0..3 {
        let t1 = std::time::Instant::now();
        let gone = evict(f, offset, buf.len() as u64)?;
        t.evict += t1.elapsed();
        if gone {
            let t2 = std::time::Instant::now();
            f.read_exact_at(buf, offset)?;
            t.read_back = t2.elapsed();
            return Ok((ReadBack::Evicted, t));
        }
    }
    let t2 = std::time::Instant::now();
    read_direct(f, offset, buf)?;
    t.read_back = t2.elapsed();
    Ok((ReadBack::Direct, t))
}

/// Read a range with O_DIRECT (through an aligned bounce buffer), from the same inode as `f`
/// (reopened through `/proc/self/fd`, never by a path a peer could change).
pub fn read_direct(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    const ALIGN: usize = 4096;
    let a = ALIGN as u64;
    let start = offset / a * a;
    let end = (offset + buf.len() as u64).div_ceil(a) * a;
    let n = usize::try_from(end - start)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a range too long to read"))?;
    // An aligned region of a Vec as the bounce buffer: the same 4096-aligned, zeroed n bytes
    // an aligned allocation gave, with no unsafe code.
    let mut v = vec![0u8; n + ALIGN];
    let addr = v.as_ptr() as usize;
    let skip = addr.next_multiple_of(ALIGN) - addr;
    let b = &mut v[skip..skip + n];
    let mut got = 0;
    while got < n {
        match f.read_at(&mut b[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "less than the 4096-byte alignment"
    )]
    let o = (offset - start) as usize;
    if got >= o + buf.len() {
        buf.copy_from_slice(&b[o..o + buf.len()]);
        Ok(())
    } else {
        Err(io::Error::from(io::ErrorKind::UnexpectedEof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn eviction_is_proved_and_the_bytes_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let mut f = File::create(&p).unwrap();
        let data: Vec<u8> = (0..(1u32 << 20))
            .map(|i| u8::try_from(i * 7 % 256).unwrap())
            .collect();
        f.write_all(&data).unwrap();
        let f = File::options().read(true).write(true).open(&p).unwrap();
        assert!(
            resident(&f, 0, 1 << 20).unwrap() > 0,
            "just written: cached"
        );
        let mut back = vec![0u8; 1 << 20];
        let how = durable_then_read_back(&f, 0, &mut back).unwrap();
        assert_eq!(back, data);
        // tmpfs cannot drop pages it holds the only copy of: then O_DIRECT or a failed proof.
        eprintln!("read back: {how:?}");
    }

    #[test]
    fn direct_reads_of_unaligned_ranges_come_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..20_000u32)
            .map(|i| u8::try_from(i * 13 % 251).unwrap())
            .collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        for (off, len) in [
            (0, 4096),
            (13, 5000),
            (4095, 2),
            (8192, 11_808),
            (19_999, 1),
        ] {
            let mut back = vec![0u8; len];
            match read_direct(&f, off as u64, &mut back) {
                Ok(()) => assert_eq!(back, data[off..off + len], "{off}+{len}"),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    eprintln!("skipping: this filesystem refuses O_DIRECT");
                    return;
                }
                Err(e) => panic!("{off}+{len}: {e}"),
            }
        }
        let mut past = vec![0u8; 10];
        let e = read_direct(&f, 19_995, &mut past).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
