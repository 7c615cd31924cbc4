//! Regular files and block devices with positional I/O.
//!
//! With `direct`, the file is opened `O_DIRECT` so reads reach the device rather than the page
//! cache. The alignment direct I/O needs is asked of the kernel (`statx` `STATX_DIOALIGN` for
//! files, the logical block size for block devices; 4096 when neither answers); an I/O whose
//! buffer, offset or length is not aligned goes through an aligned bounce buffer (a read of the
//! cover first, for a write). The engine's buffers are aligned, so only odd requests bounce.

use crate::{check_range, Disk, DiskError};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The alignment assumed when the kernel does not say.
const FALLBACK_ALIGN: usize = 4096;

/// A member stored in a file or block device.
#[derive(Debug)]
pub struct FileDisk {
    name: String,
    file: File,
    /// Bytes, as measured at open or by [`Disk::measure_size`] since (a file extended, a
    /// device grown while held).
    size: std::sync::atomic::AtomicU64,
    direct: bool,
    /// Direct I/O alignment of offsets and lengths, and of buffer addresses (1 when buffered).
    offset_align: usize,
    mem_align: usize,
}

/// (offset, memory) alignment for direct I/O on `file`.
fn dio_alignment(file: &File) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: libc::statx is a plain C struct of integers, for which all-zero bytes are a
    // valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the life of `file`; the path is a NUL-terminated empty string,
    // which AT_EMPTY_PATH makes refer to `fd` itself; `stx` is a valid, writable statx that
    // outlives the call, and statx writes nothing else.
    let r = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN | libc::STATX_TYPE,
            &mut stx,
        )
    };
    if r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align != 0 {
        return (
            stx.stx_dio_offset_align as usize,
            stx.stx_dio_mem_align.max(1) as usize,
        );
    }
    // A block device: its logical block size for both.
    let mut ssz: libc::c_int = 0;
    // SAFETY: `fd` is open for the life of `file`; BLKSSZGET writes one c_int through the
    // pointer, which points to `ssz`, a live c_int (other files refuse it with ENOTTY).
    if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut ssz) } == 0 && ssz > 0 {
        return (ssz as usize, ssz as usize);
    }
    (FALLBACK_ALIGN, FALLBACK_ALIGN)
}

impl FileDisk {
    /// Open an existing file or block device for reading and writing.
    pub fn open(path: &Path, direct: bool) -> Result<Self, DiskError> {
        Self::open_as(path, direct, false)
    }

    /// [`FileDisk::open`], and a block device opened `O_EXCL`: the kernel refuses it (`EBUSY`)
    /// while it is mounted, part of another device or held exclusively by another process, and
    /// refuses those to others while this handle is open (what md does with its members). On a
    /// regular file the flag means nothing without `O_CREAT`, so it is not given.
    pub fn open_exclusive(path: &Path, direct: bool) -> Result<Self, DiskError> {
        use std::os::unix::fs::FileTypeExt;
        let block = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        Self::open_as(path, direct, block)
    }

    /// Another descriptor of the same open file (sharing its `O_EXCL` claim): for probing and
    /// wiping exactly the device this handle writes, not whatever its path names by then.
    pub fn try_clone_file(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }

    /// Open an existing file or block device for reading only (`status`, `examine`, `events`:
    /// a user who may read the members but not write them can look). A write through it fails.
    pub fn open_read_only(path: &Path, direct: bool) -> Result<Self, DiskError> {
        Self::open_with(path, direct, false, false)
    }

    fn open_as(path: &Path, direct: bool, exclusive: bool) -> Result<Self, DiskError> {
        Self::open_with(path, direct, exclusive, true)
    }

    fn open_with(
        path: &Path,
        direct: bool,
        exclusive: bool,
        write: bool,
    ) -> Result<Self, DiskError> {
        let name = path.display().to_string();
        let io = |source| DiskError::Io {
            name: name.clone(),
            op: "open",
            offset: 0,
            len: 0,
            source,
        };
        let mut opts = OpenOptions::new();
        opts.read(true).write(write);
        opts.custom_flags(
            if direct { libc::O_DIRECT } else { 0 } | if exclusive { libc::O_EXCL } else { 0 },
        );
        let mut file = opts.open(path).map_err(io)?;
        // Block devices report length 0 in metadata; seeking to the end works for both.
        let size = file.seek(SeekFrom::End(0)).map_err(io)?;
        let (offset_align, mem_align) = if direct { dio_alignment(&file) } else { (1, 1) };
        Ok(FileDisk {
            name,
            file,
            size: std::sync::atomic::AtomicU64::new(size),
            direct,
            offset_align,
            mem_align,
        })
    }

    /// Create a new file of `size` bytes (sparse) and open it. Fails if it exists.
    pub fn create(path: &Path, size: u64, direct: bool) -> Result<Self, DiskError> {
        let name = path.display().to_string();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|f| f.set_len(size).map(|_| f))
            .map_err(|source| DiskError::Io {
                name,
                op: "create",
                offset: 0,
                len: 0,
                source,
            })?;
        drop(f);
        Self::open(path, direct)
    }

    fn err(&self, op: &'static str, offset: u64, len: usize, source: std::io::Error) -> DiskError {
        if source.raw_os_error() == Some(libc::EIO) {
            return DiskError::Medium {
                name: self.name.clone(),
                offset,
            };
        }
        DiskError::Io {
            name: self.name.clone(),
            op,
            offset,
            len,
            source,
        }
    }

    fn aligned(&self, offset: u64, ptr: *const u8, len: usize) -> bool {
        !self.direct
            || (offset.is_multiple_of(self.offset_align as u64)
                && (ptr as usize).is_multiple_of(self.mem_align)
                && len.is_multiple_of(self.offset_align))
    }

    /// (offset, memory) alignment direct I/O needs on this member (1, 1 when buffered).
    pub fn dio_alignment(&self) -> (usize, usize) {
        (self.offset_align, self.mem_align)
    }
}

/// A zeroed, aligned buffer covering `[offset, offset + len)` rounded out to the alignment.
struct Bounce {
    start: u64,
    buf: crate::AlignedBuf,
}

impl Bounce {
    fn new(offset: u64, len: usize, offset_align: usize, mem_align: usize) -> Bounce {
        let a = offset_align as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the cover is `len` (a buffer in memory) plus less than two alignment units"
        )]
        let cover = (end - start) as usize;
        Bounce {
            start,
            buf: crate::AlignedBuf::zeroed(cover, mem_align.max(offset_align)),
        }
    }
    fn region(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Disk for FileDisk {
    fn name(&self) -> &str {
        &self.name
    }
    fn device(&self) -> Option<String> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let m = self.file.metadata().ok()?;
        Some(if m.file_type().is_block_device() {
            let (ma, mi) = (libc::major(m.rdev()), libc::minor(m.rdev()));
            format!("block device {ma}:{mi}")
        } else {
            let (ma, mi) = (libc::major(m.dev()), libc::minor(m.dev()));
            format!("file on device {ma}:{mi}, inode {}", m.ino())
        })
    }
    fn size_bytes(&self) -> u64 {
        self.size.load(std::sync::atomic::Ordering::Acquire)
    }
    fn measure_size(&self) -> u64 {
        // Seeking a shared handle moves only the file position, which no I/O here uses (every
        // read and write is positional).
        if let Ok(now) = (&self.file).seek(SeekFrom::End(0)) {
            self.size
                .fetch_max(now, std::sync::atomic::Ordering::AcqRel);
        }
        self.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_range(&self.name, "read", offset, buf.len(), self.size_bytes())?;
        if self.aligned(offset, buf.as_ptr(), buf.len()) {
            return self
                .file
                .read_exact_at(buf, offset)
                .map_err(|e| self.err("read", offset, buf.len(), e));
        }
        let mut b = Bounce::new(offset, buf.len(), self.offset_align, self.mem_align);
        let start = b.start;
        self.file
            .read_exact_at(b.region(), start)
            .map_err(|e| self.err("read", offset, buf.len(), e))?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "less than one alignment unit, itself a usize"
        )]
        let o = (offset - start) as usize;
        buf.copy_from_slice(&b.region()[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_range(&self.name, "write", offset, buf.len(), self.size_bytes())?;
        if self.aligned(offset, buf.as_ptr(), buf.len()) {
            return self
                .file
                .write_all_at(buf, offset)
                .map_err(|e| self.err("write", offset, buf.len(), e));
        }
        // Read-modify-write of the aligned cover (only with O_DIRECT and unaligned requests).
        let mut b = Bounce::new(offset, buf.len(), self.offset_align, self.mem_align);
        let start = b.start;
        let cover = b.region().len();
        let readable = usize::try_from(self.size_bytes().saturating_sub(start))
            .map_or(cover, |n| n.min(cover));
        self.file
            .read_exact_at(&mut b.region()[..readable], start)
            .map_err(|e| self.err("write", offset, buf.len(), e))?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "less than one alignment unit, itself a usize"
        )]
        let o = (offset - start) as usize;
        b.region()[o..o + buf.len()].copy_from_slice(buf);
        self.file
            .write_all_at(b.region(), start)
            .map_err(|e| self.err("write", offset, buf.len(), e))
    }
    /// With O_DIRECT every I/O waits for the device, so a piece's units to different members
    /// should be in flight together; buffered I/O mostly copies from the page cache, where a
    /// thread hand-off costs more than it saves (measured: 5x slower CLI tests with 4 KiB units).
    fn prefers_parallel(&self) -> bool {
        self.direct
    }
    fn mem_align(&self) -> usize {
        self.mem_align
    }
    fn direct_fd(
        &self,
        offset: u64,
        ptr: *const u8,
        len: usize,
        _write: bool,
    ) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let in_range = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.size_bytes());
        (in_range && self.aligned(offset, ptr, len)).then(|| self.file.as_raw_fd())
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.file
            .sync_data()
            .map_err(|e| self.err("flush", 0, 0, e))
    }
    /// `flock(2)`: the lock belongs to this open file, so it ends with the process whatever
    /// way it ends (no stale lock after `kill -9`), and a second `open` in the same process
    /// conflicts like another process would. The holder is looked up in `/proc/locks`.
    /// (std's `File::try_lock` and `try_lock_shared` are `flock` with `LOCK_NB` on Linux.)
    fn try_lock(&self, exclusive: bool) -> Result<(), DiskError> {
        // A holder that is gone but whose lock is still held is being torn down: a process
        // killed with an io_uring open drops its files (and their locks) from a kernel worker
        // some time after it died. That is waited out, up to LOCK_TEARDOWN; a live holder is
        // refused at once.
        let began = std::time::Instant::now();
        loop {
            let r = if exclusive {
                self.file.try_lock()
            } else {
                self.file.try_lock_shared()
            };
            match r {
                Ok(()) => return Ok(()),
                Err(std::fs::TryLockError::WouldBlock) => {
                    let holder = self.lock_holder();
                    let gone = holder
                        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
                    if gone && began.elapsed() < LOCK_TEARDOWN {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        continue;
                    }
                    return Err(DiskError::Locked {
                        name: self.name.clone(),
                        holder,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(self.err("lock", 0, 0, e)),
            }
        }
    }
}

/// How long a lock whose holder has exited may take to be released (see `try_lock`).
const LOCK_TEARDOWN: std::time::Duration = std::time::Duration::from_secs(2);

impl FileDisk {
    /// The process holding a flock on this file, from `/proc/locks` (lines such as
    /// `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; device as hex major:minor, inode).
    fn lock_holder(&self) -> Option<u32> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata().ok()?;
        let dev = meta.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        let me = std::process::id();
        locks.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Blocked waiters are listed with "->"; skip them.
            if f.len() < 6 || f[1] != "FLOCK" || f[5] != want {
                return None;
            }
            f[4].parse().ok().filter(|&pid| pid != me)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_handle_cannot_take_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m");
        let a = FileDisk::create(&path, 4096, false).unwrap();
        let b = FileDisk::open(&path, false).unwrap();
        a.try_lock(true).unwrap();
        assert!(matches!(b.try_lock(true), Err(DiskError::Locked { .. })));
        assert!(matches!(b.try_lock(false), Err(DiskError::Locked { .. })));
        drop(a);
        b.try_lock(false).unwrap();
        let c = FileDisk::open(&path, false).unwrap();
        c.try_lock(false).unwrap();
        assert!(matches!(c.try_lock(true), Err(DiskError::Locked { .. })));
    }

    #[test]
    fn round_trip_buffered_and_direct() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("m{direct}"));
            let d = match FileDisk::create(&path, 1 << 16, direct) {
                Ok(d) => d,
                Err(e) if direct => {
                    eprintln!("skipping O_DIRECT: this filesystem refuses it ({e})");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            let data: Vec<u8> = (0..5000u32)
                .map(|i| u8::try_from(i * 31 % 256).unwrap())
                .collect();
            d.write_at(4096 + 13, &data).unwrap();
            let mut back = vec![0u8; 5000];
            d.read_at(4096 + 13, &mut back).unwrap();
            assert_eq!(back, data);
            assert!(d.read_at((1 << 16) - 10, &mut back).is_err());
            d.flush().unwrap();
            if direct {
                let (o, m) = d.dio_alignment();
                eprintln!("direct I/O alignment here: offsets {o}, memory {m}");
                assert!(o.is_power_of_two() && m.is_power_of_two() && o <= 4096);
            }
        }
    }
}
