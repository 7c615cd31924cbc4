//! The receiver's filesystem operations, every one relative to a directory handle opened
//! beneath DIR (FORMAT.md §5 "Names"). A parent directory is opened with `openat2(RESOLVE_BENEATH
//! | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` from DIR's handle, so no component of a path
//! is followed through a symlink and nothing resolves outside DIR; after that only the last
//! component is named, relative to that handle (`mkdirat`, `symlinkat`, `renameat`,
//! `unlinkat`, `fstatat` without following). Swapping a directory for a symlink between two
//! steps changes nothing: the handle still names the directory it opened. Modes, owners, times
//! and extended attributes are set through a file's own descriptor.
//!
//! Partial files live in `DIR/.stripeguard-partial` (mode 0700, owned by the receiving user;
//! anything else there is refused), named by a hash of the final path: no name from the peer
//! is ever used for them, so names of 255 bytes, names that are not UTF-8, and source trees
//! that themselves contain partials all work. A new partial is created `O_EXCL`; an existing
//! one is used only if it is a regular file with one link, owned by the receiving user.

use crate::proto::{show, Attrs};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The name of the receiver's private directory in DIR.
pub const PARTIAL_DIR: &str = ".stripeguard-partial";
/// The receiver's verification records (`--quick`), beside it.
pub const VERIFIED_DIR: &str = ".stripeguard-verified";

/// Whether a first path component names one of the receiver's own directories (never received
/// into, listed or deleted).
pub fn is_own(first: &[u8]) -> bool {
    first == PARTIAL_DIR.as_bytes() || first == VERIFIED_DIR.as_bytes()
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);
const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC)
    .union(OFlags::NOFOLLOW);

/// What the receiver accepts of what a sender sends (never the sender's word alone).
#[derive(Clone, Copy, Debug, Default)]
pub struct Policy {
    /// Apply owners (`recv --owner`).
    pub owner: bool,
    /// Apply `user.*` extended attributes (`recv --xattrs`).
    pub xattrs: bool,
    /// Apply extended attributes of every namespace (`recv --all-xattrs`).
    pub all_xattrs: bool,
    /// Keep setuid/setgid bits and `security.capability` (`recv --allow-setid`).
    pub setid: bool,
}

impl Policy {
    /// The mode bits applied.
    pub fn mode(&self, mode: u32) -> u32 {
        if self.setid {
            mode & 0o7777
        } else {
            mode & 0o1777
        }
    }

    /// The attributes applied, and how many were refused.
    pub fn filter(&self, a: &Attrs, mode: u32) -> (Attrs, u64) {
        let mut refused = u64::from(!self.setid && mode & 0o6000 != 0);
        let owner = if self.owner {
            a.owner.map(|ids| map_owner(ids, a.names.as_ref()))
        } else {
            None
        };
        refused += u64::from(a.owner.is_some() && owner.is_none());
        let mut xattrs = Vec::new();
        for (n, v) in &a.xattrs {
            let cap = n == b"security.capability";
            let ok = if cap {
                self.setid && (self.xattrs || self.all_xattrs)
            } else {
                self.all_xattrs || (self.xattrs && n.starts_with(b"user."))
            };
            if ok {
                xattrs.push((n.clone(), v.clone()));
            } else {
                refused += 1;
            }
        }
        (
            Attrs {
                owner,
                names: None,
                xattrs,
            },
            refused,
        )
    }
}

/// This host's id of a user (`false`) or group (`true`) name, `None` when it has none.
type KnownIds = HashMap<(bool, Vec<u8>), Option<u32>>;

/// The sender's owner as this host's ids: by name where the sender sent names and this host
/// knows them (as rsync does), otherwise the numeric ids; id 0 is never mapped by name, in
/// either direction (a name that is 0 here, such as `root`, keeps the sender's number).
fn map_owner((uid, gid): (u32, u32), names: Option<&(Vec<u8>, Vec<u8>)>) -> (u32, u32) {
    use std::os::unix::ffi::OsStrExt;
    let Some((un, gn)) = names else {
        return (uid, gid);
    };
    // Each name looked up once per thread (a directory service answers per lookup).
    thread_local! {
        static KNOWN: std::cell::RefCell<KnownIds> = std::cell::RefCell::default();
    }
    let lookup = |group: bool, name: &[u8]| {
        KNOWN.with(|k| {
            *k.borrow_mut()
                .entry((group, name.to_vec()))
                .or_insert_with(|| {
                    let n = std::ffi::OsStr::from_bytes(name);
                    if group {
                        uzers::get_group_by_name(n).map(|g| g.gid())
                    } else {
                        uzers::get_user_by_name(n).map(|u| u.uid())
                    }
                })
        })
    };
    let uid = if uid == 0 || un.is_empty() {
        uid
    } else {
        lookup(false, un).filter(|&u| u != 0).unwrap_or(uid)
    };
    let gid = if gid == 0 || gn.is_empty() {
        gid
    } else {
        lookup(true, gn).filter(|&g| g != 0).unwrap_or(gid)
    };
    (uid, gid)
}

fn errno_text(e: Errno) -> String {
    std::io::Error::from(e).to_string()
}

/// A directory's names with their kinds (LISTING).
pub type Names = Vec<(u8, Vec<u8>)>;

/// DIR, opened once, with its private partial directory.
pub struct Root {
    pub path: PathBuf,
    fd: OwnedFd,
    partial: OwnedFd,
    euid: u32,
    parents: Mutex<HashMap<Vec<u8>, Arc<OwnedFd>>>,
    /// A directory (or symlink) was made or replaced since the last `take_dirs_made`.
    dirs_made: AtomicBool,
    /// DIR's access and modification times before this receiver made its partial directory.
    times_before: Option<rfs::Timestamps>,
}

impl Root {
    /// Open (creating it if missing) the receiving directory and its partial directory, and
    /// prove that files can be made there (a read-only filesystem is found now, not when a
    /// sender comes).
    pub fn open(dir: &Path) -> Result<Root, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let fd = rfs::open(
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {}", dir.display(), errno_text(e)))?;
        let euid = rustix::process::geteuid().as_raw();
        let pd = dir.join(PARTIAL_DIR);
        // DIR's times before this receiver made its partial directory there, to put back when a
        // session that changed nothing (a dry run) removes it again.
        let ns = |n: u64| u32::try_from(n).unwrap_or(0);
        let before = rfs::fstat(&fd).ok().map(|st| rfs::Timestamps {
            last_access: timespec((st.st_atime, ns(st.st_atime_nsec))),
            last_modification: timespec((st.st_mtime, ns(st.st_mtime_nsec))),
        });
        let made_partial = match rfs::mkdirat(&fd, PARTIAL_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(format!("cannot create {}: {}", pd.display(), errno_text(e))),
        };
        let partial =
            rfs::openat2(&fd, PARTIAL_DIR, DIR_FLAGS, Mode::empty(), RESOLVE).map_err(|e| {
                format!(
                    "cannot open {}: {} (it must be a directory, not a symlink)",
                    pd.display(),
                    errno_text(e)
                )
            })?;
        let st = rfs::fstat(&partial).map_err(errno_text)?;
        if st.st_uid != euid {
            return Err(format!(
                "{} belongs to uid {}, not to this receiver (uid {euid}): remove it",
                pd.display(),
                st.st_uid
            ));
        }
        if st.st_mode & 0o077 != 0 {
            rfs::fchmod(&partial, Mode::from_raw_mode(0o700)).map_err(errno_text)?;
        }
        // One fixed name (a receiver killed between create and unlink leaves it for the next
        // one to reuse and remove, never a name per process that would pile up).
        let probe = "probe";
        match rfs::openat(
            &partial,
            probe,
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(_) => {
                let _ = rfs::unlinkat(&partial, probe, AtFlags::empty());
            }
            Err(e) => {
                return Err(format!(
                    "cannot write in {}: {}",
                    dir.display(),
                    errno_text(e)
                ))
            }
        }
        Ok(Root {
            path: dir.to_path_buf(),
            fd,
            partial,
            euid,
            parents: Mutex::default(),
            dirs_made: AtomicBool::new(false),
            times_before: before.filter(|_| made_partial),
        })
    }

    pub fn partial_fd(&self) -> BorrowedFd<'_> {
        self.partial.as_fd()
    }

    fn shown(&self, rel: &[u8]) -> String {
        format!("{}/{}", self.path.display(), show(rel))
    }

    /// The directory that holds `parts`' last component, opened beneath DIR (missing
    /// directories are created, mode 0700 until the session's end sets theirs).
    pub fn parent(&self, parts: &[&[u8]]) -> Result<Arc<OwnedFd>, String> {
        let dirs = &parts[..parts.len() - 1];
        let key = dirs.join(&b'/');
        if let Some(fd) = self.parents.lock().expect("lock").get(&key) {
            return Ok(Arc::clone(fd));
        }
        if dirs.is_empty() {
            // DIR itself (an entry at the top), opened once like any other parent.
            let fd =
                Arc::new(rfs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty()).map_err(errno_text)?);
            self.parents
                .lock()
                .expect("lock")
                .insert(key, Arc::clone(&fd));
            return Ok(fd);
        }
        let mut cur: Option<OwnedFd> = None;
        let mut at: Vec<u8> = Vec::new();
        for d in dirs {
            if !at.is_empty() {
                at.push(b'/');
            }
            at.extend_from_slice(d);
            let base = cur.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
            let open = |b: BorrowedFd| rfs::openat2(b, *d, DIR_FLAGS, Mode::empty(), RESOLVE);
            let fd = match open(base) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    self.made();
                    match rfs::mkdirat(base, *d, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => {
                            return Err(format!(
                                "cannot create {}: {}",
                                self.shown(&at),
                                errno_text(e)
                            ))
                        }
                    }
                    open(base).map_err(|e| self.dir_error(&at, e))?
                }
                Err(e) => return Err(self.dir_error(&at, e)),
            };
            cur = Some(fd);
        }
        let fd = Arc::new(cur.expect("at least one directory"));
        let mut p = self.parents.lock().expect("lock");
        if p.len() > 256 {
            p.clear();
        }
        p.insert(key, Arc::clone(&fd));
        Ok(fd)
    }

    /// The directory that holds `parts`' last component if every directory on the way is
    /// there (nothing is made: a dry run).
    pub fn parent_existing(&self, parts: &[&[u8]]) -> Option<OwnedFd> {
        self.open_parent(parts).ok().flatten()
    }

    /// As [`Root::parent_existing`], telling "not there" (`None`) from a path that cannot be
    /// taken (a symlink on the way, never followed; not a directory).
    fn open_parent(&self, parts: &[&[u8]]) -> Result<Option<OwnedFd>, String> {
        let dirs = parts[..parts.len() - 1].join(&b'/');
        let rel: &[u8] = if dirs.is_empty() { b"." } else { &dirs };
        match rfs::openat2(&self.fd, rel, DIR_FLAGS, Mode::empty(), RESOLVE) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.dir_error(&dirs, e)),
        }
    }

    /// The names in directory `rel` (empty: DIR itself) with their kinds (0 file, 1 directory,
    /// 2 symlink, 3 other); `None` when it is not there or not a directory. The receiver's own
    /// directories are left out.
    pub fn list(&self, rel: &[u8]) -> Result<Option<Names>, String> {
        let at: &[u8] = if rel.is_empty() { b"." } else { rel };
        let fd = match rfs::openat2(&self.fd, at, DIR_FLAGS, Mode::empty(), RESOLVE) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => return Ok(None),
            Err(e) => return Err(self.dir_error(rel, e)),
        };
        let mut dir = rfs::Dir::read_from(&fd).map_err(|e| self.dir_error(rel, e))?;
        let mut out = Vec::new();
        while let Some(e) = dir.read() {
            let e = e.map_err(|e| self.dir_error(rel, e))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." || (rel.is_empty() && is_own(name)) {
                continue;
            }
            let kind = match rfs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| rfs::FileType::from_raw_mode(st.st_mode))
            {
                Ok(rfs::FileType::RegularFile) => 0,
                Ok(rfs::FileType::Directory) => 1,
                Ok(rfs::FileType::Symlink) => 2,
                _ => 3,
            };
            out.push((kind, name.to_vec()));
        }
        out.sort();
        Ok(Some(out))
    }

    /// Remove `rel` (a directory with everything beneath it), never following a symlink and
    /// never leaving DIR. A path that is already gone is not an error.
    pub fn remove(&self, parts: &[&[u8]], rel: &[u8]) -> Result<(), String> {
        if is_own(parts[0]) {
            return Err(format!("{} is the receiver's own", self.shown(rel)));
        }
        let Some(parent) = self.open_parent(parts)? else {
            return Ok(());
        };
        let name = parts[parts.len() - 1];
        self.forget();
        self.made();
        remove_at(&parent, name).map_err(|e| format!("cannot delete {}: {e}", self.shown(rel)))
    }

    /// A fifo, socket or device node at its final name: made in the partial directory, given
    /// its owner, mode and times there, then renamed into place.
    #[allow(clippy::too_many_arguments)]
    pub fn make_special(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &[u8],
        kind: rfs::FileType,
        rdev: u64,
        mode: u32,
        owner: Option<(u32, u32)>,
        mtime: (i64, u32),
    ) -> Result<Vec<String>, String> {
        self.made();
        let tmp = format!("{}.node", partial_key(rel));
        let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
        rfs::mknodat(
            &self.partial,
            tmp.as_str(),
            kind,
            Mode::from_raw_mode(0o600),
            rdev,
        )
        .map_err(|e| format!("cannot make {}: {}", self.shown(rel), errno_text(e)))?;
        let problems = self.settle(&tmp, rel, owner, Some(mode), mtime);
        if let Err(e) = self.land(&tmp, parent, name, rel) {
            let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(problems)
    }

    /// Owner, mode (not for a symlink) and times of `tmp`, an entry just made in the partial
    /// directory (mode 0700, the receiver's own: nobody can swap the name for a symlink).
    /// Returns what could not be applied.
    fn settle(
        &self,
        tmp: &str,
        rel: &[u8],
        owner: Option<(u32, u32)>,
        mode: Option<u32>,
        mtime: (i64, u32),
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some((u, g)) = owner {
            if let Err(e) = rfs::chownat(
                &self.partial,
                tmp,
                Some(rfs::Uid::from_raw(u)),
                Some(rfs::Gid::from_raw(g)),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                problems.push(format!(
                    "{}: owner {u}:{g}: {}",
                    self.shown(rel),
                    errno_text(e)
                ));
            }
        }
        if let Some(mode) = mode {
            if let Err(e) = rfs::chmodat(
                &self.partial,
                tmp,
                Mode::from_raw_mode(mode),
                AtFlags::empty(),
            ) {
                problems.push(format!(
                    "{}: mode {mode:o}: {}",
                    self.shown(rel),
                    errno_text(e)
                ));
            }
        }
        let t = timespec(mtime);
        let _ = rfs::utimensat(
            &self.partial,
            tmp,
            &rfs::Timestamps {
                last_access: t,
                last_modification: t,
            },
            AtFlags::SYMLINK_NOFOLLOW,
        );
        problems
    }

    /// A hard link at `name` in `parent` to the regular file `tname` in `tparent`: linked in
    /// the partial directory, then renamed over whatever is at the name.
    pub fn make_hardlink(
        &self,
        tparent: &OwnedFd,
        tname: &[u8],
        (dev, ino): (u64, u64),
        parent: &OwnedFd,
        name: &[u8],
        rel: &[u8],
    ) -> Result<(), String> {
        self.made();
        let tmp = format!("{}.hlink", partial_key(rel));
        let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
        rfs::linkat(
            tparent,
            tname,
            &self.partial,
            tmp.as_str(),
            AtFlags::empty(),
        )
        .map_err(|e| format!("cannot link {}: {}", self.shown(rel), errno_text(e)))?;
        // The link is to the inode that landed, or not made: something renamed over the
        // target since would otherwise be linked unverified.
        match rfs::statat(&self.partial, tmp.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_dev == dev && st.st_ino == ino => {}
            _ => {
                let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
                return Err(format!(
                    "{}: its link target was replaced since it landed (not linked)",
                    self.shown(rel)
                ));
            }
        }
        let r = self.land(&tmp, parent, name, rel);
        // (A rename onto another link of the same file does nothing and leaves the source.)
        let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
        r
    }

    fn dir_error(&self, at: &[u8], e: Errno) -> String {
        match e {
            Errno::LOOP | Errno::XDEV => {
                format!("{} is a symlink (never followed)", self.shown(at))
            }
            Errno::NOTDIR => format!("{} exists and is not a directory", self.shown(at)),
            e => format!("cannot open {}: {}", self.shown(at), errno_text(e)),
        }
    }

    /// Whether a directory entry other than a file's rename was made since the last call (then
    /// only a `syncfs` makes a landed file's path durable, not an `fsync` of its directory).
    pub fn take_dirs_made(&self) -> bool {
        self.dirs_made.swap(false, Ordering::AcqRel)
    }

    fn made(&self) {
        self.dirs_made.store(true, Ordering::Release);
    }

    /// Forget the open directories (one was removed or replaced).
    fn forget(&self) {
        self.parents.lock().expect("lock").clear();
    }

    /// A directory at `name` in `parent`: kept if there, made (0700) if missing, and put in
    /// place of a file or symlink that was there (its type changed since the last run).
    pub fn make_dir(&self, parent: &OwnedFd, name: &[u8], rel: &[u8]) -> Result<(), String> {
        match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory => {
                return Ok(())
            }
            Ok(_) => rfs::unlinkat(parent, name, AtFlags::empty())
                .map_err(|e| format!("cannot replace {}: {}", self.shown(rel), errno_text(e)))?,
            Err(_) => {}
        }
        self.made();
        rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700))
            .map_err(|e| format!("cannot create {}: {}", self.shown(rel), errno_text(e)))
    }

    /// Put the partial `part` (or a symlink made there) under its final name, replacing a file
    /// or symlink there, or an empty directory (a type change); a directory that holds entries
    /// is not replaced.
    pub fn land(
        &self,
        part: &str,
        parent: &OwnedFd,
        name: &[u8],
        rel: &[u8],
    ) -> Result<(), String> {
        match rfs::renameat(&self.partial, part, parent, name) {
            Ok(()) => Ok(()),
            Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => {
                match rfs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
                    Ok(()) => {
                        self.forget();
                        self.made();
                        rfs::renameat(&self.partial, part, parent, name).map_err(|e| {
                            format!("cannot rename into {}: {}", self.shown(rel), errno_text(e))
                        })
                    }
                    Err(_) => Err(format!(
                        "{} is a directory that holds entries (not replaced by a file)",
                        self.shown(rel)
                    )),
                }
            }
            Err(e) => Err(format!(
                "cannot rename into {}: {}",
                self.shown(rel),
                errno_text(e)
            )),
        }
    }

    /// What is at `name` in `parent`, without following a symlink.
    pub fn stat(&self, parent: &OwnedFd, name: &[u8]) -> Option<rfs::Stat> {
        rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// Open a regular file at `name` in `parent` for reading (never through a symlink).
    pub fn open_file(&self, parent: &OwnedFd, name: &[u8]) -> Option<File> {
        rfs::openat2(
            parent,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            RESOLVE,
        )
        .ok()
        .map(File::from)
    }

    /// A symlink at its final name: made in the partial directory, given its owner and times
    /// there, then renamed into place.
    pub fn make_symlink(
        &self,
        parent: &OwnedFd,
        name: &[u8],
        rel: &[u8],
        target: &[u8],
        owner: Option<(u32, u32)>,
        mtime: (i64, u32),
    ) -> Result<Vec<String>, String> {
        self.made();
        let tmp = format!("{}.link", partial_key(rel));
        let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
        rfs::symlinkat(target, &self.partial, tmp.as_str()).map_err(|e| {
            format!(
                "cannot make the symlink {}: {}",
                self.shown(rel),
                errno_text(e)
            )
        })?;
        let problems = self.settle(&tmp, rel, owner, None, mtime);
        if let Err(e) = self.land(&tmp, parent, name, rel) {
            let _ = rfs::unlinkat(&self.partial, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(problems)
    }

    /// Open the partial for `rel`: a new one `O_EXCL`, or the previous run's if it is a regular
    /// file with one link owned by this user; held under an exclusive `flock` while it is
    /// open, so a second receiver into the same directory is refused. Returns the file and
    /// whether it was there before (to resume).
    pub fn open_partial(&self, rel: &[u8]) -> Result<(File, bool), String> {
        let name = format!("{}.part", partial_key(rel));
        let rw = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        for _ in 0..4 {
            let (fd, existed) = match rfs::openat(
                &self.partial,
                name.as_str(),
                rw | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => (fd, false),
                Err(Errno::EXIST) => {
                    match rfs::openat(&self.partial, name.as_str(), rw, Mode::empty()) {
                        Ok(fd) => (fd, true),
                        Err(_) => {
                            let _ = rfs::unlinkat(&self.partial, name.as_str(), AtFlags::empty());
                            continue;
                        }
                    }
                }
                Err(e) => {
                    return Err(format!(
                        "cannot create a partial for {}: {}",
                        self.shown(rel),
                        errno_text(e)
                    ))
                }
            };
            if rfs::flock(&fd, rfs::FlockOperation::NonBlockingLockExclusive).is_err() {
                return Err(format!(
                    "{} is being received by another stripeguard recv into the same directory",
                    self.shown(rel)
                ));
            }
            let st = rfs::fstat(&fd).map_err(errno_text)?;
            let regular = rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::RegularFile;
            if existed && !(regular && st.st_nlink == 1 && st.st_uid == self.euid) {
                // Not one of ours: never written to; replaced by a new partial.
                let _ = rfs::unlinkat(&self.partial, name.as_str(), AtFlags::empty());
                continue;
            }
            // Still the partial (another receiver may have renamed it away before our lock).
            match rfs::statat(&self.partial, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if now.st_ino == st.st_ino && now.st_dev == st.st_dev => {
                    return Ok((File::from(fd), existed))
                }
                _ => continue,
            }
        }
        Err(format!(
            "{}: its partial keeps changing under another receiver",
            self.shown(rel)
        ))
    }

    pub fn partial_name(rel: &[u8]) -> String {
        format!("{}.part", partial_key(rel))
    }

    /// Remove the partial and progress of `rel`.
    pub fn remove_partial(&self, rel: &[u8]) {
        let k = partial_key(rel);
        let _ = rfs::unlinkat(
            &self.partial,
            format!("{k}.part").as_str(),
            AtFlags::empty(),
        );
        let _ = rfs::unlinkat(
            &self.partial,
            format!("{k}.progress").as_str(),
            AtFlags::empty(),
        );
    }

    /// The progress text of `rel` from an earlier run.
    pub fn read_progress(&self, rel: &[u8]) -> Option<String> {
        use std::io::Read;
        let fd = rfs::openat(
            &self.partial,
            format!("{}.progress", partial_key(rel)).as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .ok()?;
        let mut s = String::new();
        File::from(fd).take(4 << 20).read_to_string(&mut s).ok()?;
        Some(s)
    }

    pub fn write_progress(&self, rel: &[u8], text: &str) -> Result<(), String> {
        use std::io::Write;
        let name = format!("{}.progress", partial_key(rel));
        let fd = rfs::openat(
            &self.partial,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            format!(
                "cannot write the progress of {}: {}",
                self.shown(rel),
                errno_text(e)
            )
        })?;
        File::from(fd)
            .write_all(text.as_bytes())
            .map_err(|e| format!("cannot write the progress of {}: {e}", self.shown(rel)))
    }

    pub fn remove_progress(&self, rel: &[u8]) {
        let _ = rfs::unlinkat(
            &self.partial,
            format!("{}.progress", partial_key(rel)).as_str(),
            AtFlags::empty(),
        );
    }

    /// Set a received directory's mode, owner and times at the session's end, through a
    /// handle opened beneath DIR (a symlink put in its place is never followed).
    pub fn finish_dir(
        &self,
        rel: &[u8],
        mode: u32,
        attrs: &Attrs,
        mtime: (i64, u32),
    ) -> Result<(), String> {
        let fd = rfs::openat2(&self.fd, rel, DIR_FLAGS, Mode::empty(), RESOLVE)
            .map_err(|e| self.dir_error(rel, e))?;
        let problems = apply_to_file(&File::from(fd), attrs, mode, mtime);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("{}: {}", self.shown(rel), problems.join("; ")))
        }
    }

    /// The verification records' directory (`--quick`), made (mode 0700) when `create`; `None`
    /// when it is missing, or is not a directory owned by this user that nobody else can
    /// write (its records are then not trusted, and none are written).
    fn verified_dir(&self, create: bool) -> Option<OwnedFd> {
        if create {
            let _ = rfs::mkdirat(&self.fd, VERIFIED_DIR, Mode::from_raw_mode(0o700));
        }
        let fd = rfs::openat2(&self.fd, VERIFIED_DIR, DIR_FLAGS, Mode::empty(), RESOLVE).ok()?;
        let st = rfs::fstat(&fd).ok()?;
        (st.st_uid == self.euid && st.st_mode & 0o022 == 0).then_some(fd)
    }

    /// The verification record of `rel`, if there is one that only this user can have
    /// written (a regular file with one link, owned by it, writable by nobody else).
    pub fn read_record(&self, rel: &[u8]) -> Option<String> {
        use std::io::Read;
        let dir = self.verified_dir(false)?;
        let fd = rfs::openat(
            &dir,
            partial_key(rel).as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .ok()?;
        let st = rfs::fstat(&fd).ok()?;
        if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile
            || st.st_uid != self.euid
            || st.st_mode & 0o022 != 0
            || st.st_nlink != 1
        {
            return None;
        }
        let mut s = String::new();
        File::from(fd).take(80 << 20).read_to_string(&mut s).ok()?;
        Some(s)
    }

    /// Write the verification record of `rel` (a new file renamed over the old one, mode
    /// 0600; not made durable: a lost record only costs a read from the device later).
    pub fn write_record(&self, rel: &[u8], text: &str) -> Result<(), String> {
        use std::io::Write;
        let dir = self.verified_dir(true).ok_or_else(|| {
            format!(
                "{}/{VERIFIED_DIR} is not a directory of this user's that only it can write",
                self.path.display()
            )
        })?;
        let key = partial_key(rel);
        let tmp = format!("{key}.new");
        let _ = rfs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        let fd = rfs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(errno_text)?;
        File::from(fd)
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())?;
        rfs::renameat(&dir, tmp.as_str(), &dir, key.as_str()).map_err(errno_text)
    }

    /// Remove the partial directory if nothing is left in it.
    pub fn tidy(&self) {
        let _ = rfs::unlinkat(&self.fd, PARTIAL_DIR, AtFlags::REMOVEDIR);
    }

    /// After a session that changed nothing (a dry run): the partial directory removed, DIR's
    /// times put back as they were before this receiver made it.
    pub fn tidy_unchanged(&self) {
        if rfs::unlinkat(&self.fd, PARTIAL_DIR, AtFlags::REMOVEDIR).is_ok() {
            if let Some(t) = &self.times_before {
                let _ = rfs::futimens(&self.fd, t);
            }
        }
    }

    /// One `syncfs` of DIR's filesystem: every write, attribute and rename made there so far is
    /// durable when it returns.
    pub fn syncfs(&self) -> std::io::Result<()> {
        rfs::syncfs(&self.fd).map_err(Into::into)
    }
}

/// Remove `name` in `dir`: a directory with everything beneath it (each level opened beneath
/// its parent, never through a symlink), anything else unlinked.
fn remove_at(dir: &OwnedFd, name: &[u8]) -> Result<(), String> {
    let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(errno_text(e)),
    };
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::Directory {
        return match rfs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(errno_text(e)),
        };
    }
    let sub = rfs::openat2(dir, name, DIR_FLAGS, Mode::empty(), RESOLVE).map_err(errno_text)?;
    let mut names = Vec::new();
    {
        let mut d = rfs::Dir::read_from(&sub).map_err(errno_text)?;
        while let Some(e) = d.read() {
            let e = e.map_err(errno_text)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(n.to_vec());
            }
        }
    }
    for n in names {
        remove_at(&sub, &n)?;
    }
    match rfs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(errno_text(e)),
    }
}

/// Owner, xattrs, mode and times set through a file's (or directory's) descriptor, in that order (a `chown`
/// clears setuid/setgid, so the mode comes after it). Returns what could not be applied.
pub fn apply_to_file(f: &File, a: &Attrs, mode: u32, mtime: (i64, u32)) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some((u, g)) = a.owner {
        if let Err(e) = rfs::fchown(f, Some(rfs::Uid::from_raw(u)), Some(rfs::Gid::from_raw(g))) {
            problems.push(format!("owner {u}:{g}: {}", errno_text(e)));
        }
    }
    for (n, v) in &a.xattrs {
        let Ok(name) = std::ffi::CString::new(n.clone()) else {
            continue;
        };
        if let Err(e) = rfs::fsetxattr(f, name.as_c_str(), v, rfs::XattrFlags::empty()) {
            problems.push(format!("xattr {}: {}", show(n), errno_text(e)));
        }
    }
    if let Err(e) = rfs::fchmod(f, Mode::from_raw_mode(mode)) {
        problems.push(format!("mode {mode:o}: {}", errno_text(e)));
    }
    let t = timespec(mtime);
    if let Err(e) = rfs::futimens(
        f,
        &rfs::Timestamps {
            last_access: t,
            last_modification: t,
        },
    ) {
        problems.push(format!("times: {}", errno_text(e)));
    }
    problems
}

fn timespec((s, ns): (i64, u32)) -> rfs::Timespec {
    rfs::Timespec {
        tv_sec: s,
        tv_nsec: i64::from(ns),
    }
}

/// The name of a path's partial in the partial directory: 32 hex digits of BLAKE3 of the
/// relative path.
pub fn partial_key(rel: &[u8]) -> String {
    blake3::hash(rel).as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_zero_is_never_mapped_by_name() {
        let names = |u: &str, g: &str| Some((u.as_bytes().to_vec(), g.as_bytes().to_vec()));
        // A name that is 0 here keeps the sender's number; 0 sent under another name stays 0.
        assert_eq!(
            map_owner((12345, 12345), names("root", "root").as_ref()),
            (12345, 12345)
        );
        assert_eq!(
            map_owner((0, 0), names("nobody", "nogroup").as_ref()),
            (0, 0)
        );
        // No names (--numeric-ids) or unknown ones: the numbers.
        assert_eq!(map_owner((4242, 4243), None), (4242, 4243));
        assert_eq!(
            map_owner((4242, 4243), names("no-such-user-here", "").as_ref()),
            (4242, 4243)
        );
    }
}
