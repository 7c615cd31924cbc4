//! What a device holds before stripeguard writes its first bytes (`create`, `replace`), and
//! which confirmation each danger needs (issue 35, "never destroy what it does not own").
//!
//! Three findings, three confirmations, each naming the device it applies to:
//!
//! | found | refused unless |
//! |---|---|
//! | in use: a block device mounted, part of another device or held open `O_EXCL` (the kernel answers `EBUSY`); a file backing a loop device; a member of an array a live process holds | never: refused whatever the flags |
//! | a member of a stripeguard array (a superblock at byte 0, even one this build cannot read) | `--force-take DEV` (`create --force` gives it for every member) |
//! | anything libblkid recognises: a filesystem, a partition table, LVM, md, ZFS, bcache, LUKS, swap | `--force-overwrite DEV` |
//!
//! The probe is the field's standard one, libblkid (through the `libblkid-rs` bindings): a
//! "safe probe" of superblocks and partition tables, which also reports an ambivalent device
//! (several signatures) rather than guessing. An NBD member cannot be handed to libblkid, so
//! its first and last MiB — where every signature libblkid knows sits, md 1.0 superblocks,
//! ZFS labels and the backup GPT at the end — are copied into a sparse in-memory file of the
//! export's size and that is probed.
//!
//! A [`Target`] is opened once (a block device `O_EXCL`) and probed, judged, wiped and written
//! through that one open file. The wipe — every signature libblkid finds, as `wipefs -a` does,
//! and both ends of the device, so the bytes a new member does not rewrite (past its data
//! area, a partition table's backup) do not go on naming the old content — runs only after
//! every other check of the command (the engine's preflight included) has passed: a refused
//! command destroys nothing.

use std::path::{Path, PathBuf};
use stripeguard_disk::{Disk, DiskRef};
use stripeguard_engine::{Array, EngineError};
use stripeguard_format::hex;
use stripeguard_integrity::{
    Superblock, SuperblockError, SUPERBLOCK_BYTES, SUPERBLOCK_COPY_OFFSETS,
};

/// What a probe found on a device that is about to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing anyone owns: zeros, or data no probe recognises.
    Nothing,
    /// In use (why); never overwritten.
    InUse(String),
    /// A member of a stripeguard array: its uuid and index when the superblock reads.
    Member(Option<([u8; 16], u16)>),
    /// Foreign data libblkid recognises, described ("an ext4 filesystem labelled precious").
    Foreign(String),
    /// A hot spare's label (FORMAT.md §2.11): the array it is a spare of, and its own uuid.
    Spare { array: [u8; 16], spare: [u8; 16] },
    /// A journal device's label (FORMAT.md §2.12): the array whose write journal it holds.
    JournalDevice { array: [u8; 16] },
}

/// The confirmations an operator gave: the devices each flag named.
#[derive(Clone, Debug, Default)]
pub struct Confirmations {
    /// `--force-overwrite DEV`: destroy the foreign data on DEV.
    pub overwrite: Vec<PathBuf>,
    /// `--force-take DEV`: take DEV from the stripeguard array it belongs to.
    pub take: Vec<PathBuf>,
    /// `create --force`: take every member given from the array it belongs to.
    pub take_all: bool,
}

impl Confirmations {
    fn names(list: &[PathBuf], p: &Path) -> bool {
        let me = identity(p);
        list.iter().any(|q| q == p || identity(q) == me)
    }
    /// Whether `p` may be overwritten though it holds foreign data.
    pub fn overwrite(&self, p: &Path) -> bool {
        Self::names(&self.overwrite, p)
    }
    /// Whether `p` may be taken from the stripeguard array it belongs to.
    pub fn take(&self, p: &Path) -> bool {
        self.take_all || Self::names(&self.take, p)
    }
    /// A flag that names none of `paths` is a mistake worth saying (a typo would otherwise
    /// leave the device it meant unconfirmed and the command refused for another reason).
    pub fn refuse_strays(&self, paths: &[&Path]) -> Result<(), EngineError> {
        for (flag, list) in [
            ("--force-overwrite", &self.overwrite),
            ("--force-take", &self.take),
        ] {
            if let Some(q) = list
                .iter()
                .find(|q| !paths.iter().any(|p| Self::names(&[(*q).clone()], p)))
            {
                return Err(EngineError::Config(format!(
                    "{flag} {} names no device this command writes",
                    q.display()
                )));
            }
        }
        Ok(())
    }
}

/// The file or device `p` is, for comparing two names of it: the device number of a block
/// device, the inode of a file, else the absolute path (a file not yet made).
pub(crate) fn identity(p: &Path) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if let Some(uri) = p.to_str().filter(|u| stripeguard_nbd::is_uri(u)) {
        return match stripeguard_nbd::parse_uri(uri) {
            Ok(t) => match t.address {
                stripeguard_nbd::Address::Unix(sock) => {
                    format!("nbd {} export {:?}", identity(&sock), t.export)
                }
                stripeguard_nbd::Address::Tcp(host) => format!("nbd {host} export {:?}", t.export),
            },
            Err(_) => format!("uri {uri}"),
        };
    }
    match std::fs::metadata(p) {
        Ok(m) if m.file_type().is_block_device() => format!("device {}", m.rdev()),
        Ok(m) => format!("inode {}:{}", m.dev(), m.ino()),
        Err(_) => std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string(),
    }
}

/// A device about to be written as a member, opened once: probed, judged, wiped and handed to
/// the engine through the same open file, so that what was judged is what is written (a path
/// retargeted, a device mounted after the probe, cannot slip in between: a block device is held
/// `O_EXCL` from the probe on).
pub struct Target {
    /// As the user named it.
    pub path: PathBuf,
    /// The member handle the engine gets.
    pub disk: DiskRef,
    /// Another descriptor of the same open file (files and block devices).
    file: Option<std::fs::File>,
    found: Found,
}

impl Target {
    /// Open an existing file, block device or NBD export to write it as a member, and probe it.
    /// A device in use is an error here, whatever the flags: a block device the kernel will not
    /// give `O_EXCL` (mounted, held), a file or device backing a loop device or active swap.
    pub fn open(p: &Path, direct: bool) -> Result<Target, EngineError> {
        use std::os::unix::fs::FileTypeExt;
        let name = p.display();
        if p.to_str().is_some_and(stripeguard_nbd::is_uri) {
            let disk = crate::open_member(p, direct)?;
            let found = match (stripeguard_member(disk.as_ref()), spare_of(disk.as_ref())) {
                (Some(m), _) => Found::Member(m),
                (None, Some(found)) => found,
                (None, None) => foreign(probe_ends(disk.as_ref()), p)?,
            };
            return Ok(Target {
                path: p.to_path_buf(),
                disk,
                file: None,
                found,
            });
        }
        let kind = std::fs::metadata(p)
            .map_err(|e| EngineError::Config(format!("{name}: {e}")))?
            .file_type();
        if !kind.is_file() && !kind.is_block_device() {
            return Err(EngineError::Config(format!(
                "{name} is neither a regular file nor a block device"
            )));
        }
        let fd = stripeguard_disk::FileDisk::open_exclusive(p, direct)
            .map_err(|e| crate::busy(p, &e).unwrap_or(e.into()))?;
        let file = fd
            .try_clone_file()
            .map_err(|e| EngineError::Config(format!("{name}: {e}")))?;
        if let Some(why) = backs_something(&file) {
            return Err(in_use_error(p, &why));
        }
        let disk: DiskRef = std::sync::Arc::new(fd);
        let found = match (stripeguard_member(disk.as_ref()), spare_of(disk.as_ref())) {
            (Some(m), _) => Found::Member(m),
            (None, Some(found)) => found,
            (None, None) => foreign(blkid_file(&file), p)?,
        };
        Ok(Target {
            path: p.to_path_buf(),
            disk,
            file: Some(file),
            found,
        })
    }

    /// What the probe found.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// Refuse to write it unless what it holds is confirmed; say what was found and the flag
    /// that confirms it. `slot`: the array and the member index a `replace` writes it as (a
    /// device that already belongs to that array is judged by the engine — a re-add, an older
    /// copy — unless it is another current member of it, which is refused whatever the flags).
    pub fn judge(
        &self,
        slot: Option<(&Array, usize)>,
        ok: &Confirmations,
    ) -> Result<(), EngineError> {
        let p = &self.path;
        let refuse = |s: String| Err(EngineError::Config(s));
        match &self.found {
            Found::Nothing => Ok(()),
            Found::InUse(why) => Err(in_use_error(p, why)),
            Found::Member(Some((uuid, ix)))
                if slot.is_some_and(|(a, _)| a.superblock().array_uuid == *uuid) =>
            {
                let (array, member) = slot.expect("checked");
                if usize::from(*ix) != member
                    && same_superblock(self.disk.as_ref(), array, usize::from(*ix))
                {
                    return refuse(format!(
                        "{} is member {ix} of this array (the device in that slot holds the same superblock): give a new device",
                        p.display()
                    ));
                }
                Ok(())
            }
            Found::Member(id) => {
                if let Some((uuid, _)) = id {
                    if let Ok(live) = crate::ask_holder(uuid) {
                        return refuse(format!(
                            "{} is a member of stripeguard array {}, which process {} ({}) holds; stripeguard never takes a member of an array in use",
                            p.display(),
                            hex(uuid),
                            live.pid,
                            live.command
                        ));
                    }
                }
                if ok.take(p) {
                    return Ok(());
                }
                let whose = match id {
                    Some((uuid, ix)) => format!("member {ix} of stripeguard array {}", hex(uuid)),
                    None => "a member of a stripeguard array this build cannot read".into(),
                };
                refuse(format!(
                    "{} is {whose}; pass --force-take {} to take it (that array loses the member)",
                    p.display(),
                    p.display()
                ))
            }
            // A spare of the array it is about to serve (a replace onto it, or labelled again).
            Found::Spare { array, .. }
                if slot.is_some_and(|(a, _)| a.superblock().array_uuid == *array) =>
            {
                Ok(())
            }
            Found::Spare { array, .. } => take_labelled(
                p,
                array,
                ok,
                "a hot spare",
                "may rebuild onto it at any moment; remove it there first (`stripeguard remove-spare`)",
                "that array loses the spare",
            ),
            // Another array's write journal (or this one's): never taken while that array is
            // held (it may be writing records there now), else only with --force-take.
            Found::JournalDevice { array } => take_labelled(
                p,
                array,
                ok,
                "the journal device",
                "writes its journal to it; stripeguard never takes it while that array is in use",
                "that array loses its journal device and goes on with the journal on its members",
            ),
            Found::Foreign(_) if ok.overwrite(p) => Ok(()),
            Found::Foreign(what) => refuse(format!(
                "{} holds {what}; pass --force-overwrite {} to destroy it",
                p.display(),
                p.display()
            )),
        }
    }

    /// Erase the foreign signatures it holds (after [`Target::judge`] and every other check
    /// of the command passed): through the same open file, or the NBD export's ends.
    pub fn wipe(&self) -> Result<(), EngineError> {
        if !matches!(self.found, Found::Foreign(_)) {
            return Ok(());
        }
        match &self.file {
            Some(f) => wipe_file(f, &self.path),
            None => wipe_ends(self.disk.as_ref()),
        }
    }
}

/// A device labelled `role` ("a hot spare", "the journal device") of stripeguard array
/// `array`: refused while a process holds that array (`held`: what it may be doing with it),
/// else taken only with `--force-take` (`loses`: what that array loses then).
fn take_labelled(
    p: &Path,
    array: &[u8; 16],
    ok: &Confirmations,
    role: &str,
    held: &str,
    loses: &str,
) -> Result<(), EngineError> {
    if let Ok(live) = crate::ask_holder(array) {
        return Err(EngineError::Config(format!(
            "{} is {role} of stripeguard array {}, which process {} ({}) holds and {held}",
            p.display(),
            hex(array),
            live.pid,
            live.command
        )));
    }
    if ok.take(p) {
        return Ok(());
    }
    Err(EngineError::Config(format!(
        "{} is {role} of stripeguard array {}; pass --force-take {} to take it ({loses})",
        p.display(),
        hex(array),
        p.display()
    )))
}

/// A probe's answer as a finding; a probe that cannot run is an error naming the device (saying
/// nothing is there when nobody could tell would be a guess).
fn foreign(probed: Result<Option<String>, String>, p: &Path) -> Result<Found, EngineError> {
    match probed {
        Ok(Some(what)) => Ok(Found::Foreign(what)),
        Ok(None) => Ok(Found::Nothing),
        Err(e) => Err(EngineError::Config(format!(
            "cannot tell what {} holds ({e}); refusing to write it",
            p.display()
        ))),
    }
}

fn in_use_error(p: &Path, why: &str) -> EngineError {
    EngineError::Config(format!(
        "{} is in use ({why}); stripeguard never writes a device in use, whatever the flags",
        p.display()
    ))
}

/// Whether member `ix`'s device in `array` holds the same first superblock copy as `d` (the
/// same device under another name, or a copy of it).
fn same_superblock(d: &dyn Disk, array: &Array, ix: usize) -> bool {
    let Some(theirs) = array.member_disk(ix) else {
        return false;
    };
    let read = |d: &dyn Disk| {
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        d.read_at(0, &mut b).ok().map(|()| b)
    };
    matches!((read(d), read(theirs.as_ref())), (Some(a), Some(b)) if a == b)
}

/// A hot spare's or a journal device's label on `disk`, when it carries a valid one.
fn spare_of(disk: &dyn Disk) -> Option<Found> {
    if let Some(l) = stripeguard_engine::read_journal_device_label(disk) {
        return Some(Found::JournalDevice {
            array: l.array_uuid,
        });
    }
    stripeguard_engine::read_spare_label(disk)
        .0
        .map(|l| Found::Spare {
            array: l.array_uuid,
            spare: l.spare_uuid,
        })
}

/// Whether `disk` holds a stripeguard superblock in either copy (even one this build cannot
/// read), with the array's uuid and the member's index when one reads.
fn stripeguard_member(disk: &dyn Disk) -> Option<Option<([u8; 16], u16)>> {
    if let Ok(sb) = stripeguard_engine::read_superblock_of(disk) {
        return Some(Some((sb.array_uuid, sb.member_index)));
    }
    SUPERBLOCK_COPY_OFFSETS
        .iter()
        .any(|&at| {
            let mut sb = vec![0u8; SUPERBLOCK_BYTES];
            disk.read_at(at, &mut sb).is_ok()
                && !matches!(
                    Superblock::decode(&sb),
                    Err(SuperblockError::BadMagic | SuperblockError::Truncated(_))
                )
        })
        .then_some(None)
}

/// Why the open file `f` is in use though it could be opened: it backs a loop device (a file,
/// or a block device under a loop device) or is active swap.
fn backs_something(f: &std::fs::File) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = f.metadata().ok()?;
    let me = if m.file_type().is_block_device() {
        format!("device {}", m.rdev())
    } else {
        format!("inode {}:{}", m.dev(), m.ino())
    };
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(backing) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n');
        if identity(Path::new(backing)) == me {
            return Some(format!("it backs loop device /dev/{name}"));
        }
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    for line in swaps.lines().skip(1) {
        let Some(path) = line.split_whitespace().next() else {
            continue;
        };
        if identity(Path::new(&path.replace("\\040", " "))) == me {
            return Some("it is active swap".into());
        }
    }
    None
}

/// Why `p` is in use, if it is: a block device the kernel will not open exclusively (with
/// where it is mounted or what holds it), or a file or device backing a loop device or swap.
pub fn in_use(p: &Path) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let m = std::fs::metadata(p).ok()?;
    if m.file_type().is_block_device() {
        use std::os::unix::fs::MetadataExt;
        let busy = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
            .open(p)
            .is_err_and(|e| e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()));
        if busy {
            let (major, minor) = (rustix::fs::major(m.rdev()), rustix::fs::minor(m.rdev()));
            if let Some(at) = mounted_at(major, minor) {
                return Some(format!("mounted on {at}"));
            }
            let holders: Vec<String> =
                std::fs::read_dir(format!("/sys/dev/block/{major}:{minor}/holders"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
            if !holders.is_empty() {
                return Some(format!("held by {}", holders.join(", ")));
            }
            return Some(
                "held open exclusively by another process, or a partition of it is".into(),
            );
        }
    }
    backs_something(&std::fs::File::open(p).ok()?)
}

/// Where block device `major:minor` is mounted (the first mount point in this process's view).
fn mounted_at(major: u32, minor: u32) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dev = format!("{major}:{minor}");
    info.lines().find_map(|l| {
        let mut f = l.split(' ');
        let (_, _, d, _, at) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        (d == dev).then(|| at.replace("\\040", " "))
    })
}

/// libblkid's safe probe of the open file `f`: a description of the filesystem, partition
/// table or other signature it holds, or `None`.
fn blkid_file(f: &std::fs::File) -> Result<Option<String>, String> {
    use libblkid_rs::{BlkidProbe, BlkidSafeprobeRet, BlkidSublks, BlkidSublksFlags};
    use std::os::fd::AsRawFd;
    let e = |e: libblkid_rs::BlkidErr| format!("libblkid: {e}");
    let mut probe = BlkidProbe::new().map_err(e)?;
    probe.set_device(f.as_raw_fd(), 0, 0).map_err(e)?;
    probe.enable_superblocks(true).map_err(e)?;
    probe
        .set_superblock_flags(BlkidSublksFlags::new(vec![
            BlkidSublks::Type,
            BlkidSublks::Label,
            BlkidSublks::Usage,
        ]))
        .map_err(e)?;
    probe.enable_partitions(true).map_err(e)?;
    match probe.do_safeprobe().map_err(e)? {
        BlkidSafeprobeRet::None => Ok(None),
        BlkidSafeprobeRet::Ambiguous => Ok(Some(
            "several signatures at once (libblkid cannot tell which is current)".into(),
        )),
        BlkidSafeprobeRet::Success => {
            let get = |k: &str| probe.lookup_value(k).ok().filter(|v| !v.is_empty());
            Ok(Some(describe(
                get("TYPE").as_deref(),
                get("USAGE").as_deref(),
                get("LABEL").as_deref(),
                get("PTTYPE").as_deref(),
            )))
        }
    }
}

/// One phrase for what libblkid reported.
fn describe(
    kind: Option<&str>,
    usage: Option<&str>,
    label: Option<&str>,
    pt: Option<&str>,
) -> String {
    let labelled = label.map(|l| format!(" labelled {l}")).unwrap_or_default();
    match (kind, usage, pt) {
        (Some("swap"), _, _) => format!("swap space{labelled}"),
        (Some(t), Some("filesystem"), _) => format!("{} {t} filesystem{labelled}", article(t)),
        (Some(t), Some("raid"), _) => format!("a RAID or volume-manager signature ({t}){labelled}"),
        (Some(t), Some("crypto"), _) => format!("an encrypted volume ({t}){labelled}"),
        (Some(t), _, _) => format!("a {t} signature{labelled}"),
        (None, _, Some(pt)) => format!("a partition table ({pt})"),
        (None, _, None) => "a signature libblkid recognises".into(),
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u', 'x']) {
        "an"
    } else {
        "a"
    }
}

/// How much of each end of a device is probed through a copy (an NBD export) and zeroed by a
/// wipe: every signature libblkid knows sits within it (md 1.0 and ZFS labels within the last
/// MiB, some firmware RAID signatures ~1.5 MiB from the end, btrfs at 64 KiB).
const ENDS: u64 = 4 << 20;

/// libblkid's probe of a device it cannot open (an NBD export): both ends ([`ENDS`]) copied
/// into a sparse in-memory file of the same size, and that probed.
fn probe_ends(disk: &dyn Disk) -> Result<Option<String>, String> {
    use std::os::unix::fs::FileExt;
    let fd = rustix::fs::memfd_create("stripeguard-probe", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| format!("memfd: {e}"))?;
    let f = std::fs::File::from(fd);
    let size = disk.size_bytes();
    f.set_len(size).map_err(|e| format!("memfd: {e}"))?;
    for (off, len) in ends(size) {
        let mut buf = vec![0u8; len];
        disk.read_at(off, &mut buf).map_err(|e| e.to_string())?;
        f.write_all_at(&buf, off)
            .map_err(|e| format!("memfd: {e}"))?;
    }
    blkid_file(&f)
}

/// The first and last [`ENDS`] bytes of a device of `size` bytes, as (offset, length).
fn ends(size: u64) -> [(u64, usize); 2] {
    let len = |n: u64| usize::try_from(n).unwrap_or(0);
    let head = ENDS.min(size);
    let tail = size.saturating_sub(ENDS).max(head);
    [(0, len(head)), (tail, len(size - tail))]
}

/// Erase what an overwrite was confirmed for (as `wipefs -a` and a partition-table zap do),
/// through the open file `f`: every superblock signature libblkid finds, a few bytes at each
/// magic, and both ends ([`ENDS`]: partition tables, the backup GPT, md 1.0 and ZFS labels).
/// The new member's own initialisation writes everything it uses afterwards, so zeros here
/// lose nothing of it.
fn wipe_file(f: &std::fs::File, p: &Path) -> Result<(), EngineError> {
    use libblkid_rs::{BlkidProbe, BlkidProbeRet, BlkidSublks, BlkidSublksFlags};
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let name = p.display();
    let io = |e: std::io::Error| EngineError::Config(format!("wiping {name}: {e}"));
    let blk =
        |e: libblkid_rs::BlkidErr| EngineError::Config(format!("wiping {name}: libblkid: {e}"));
    let size = (&*f).seek(SeekFrom::End(0)).map_err(io)?;
    {
        let mut probe = BlkidProbe::new().map_err(blk)?;
        probe.set_device(f.as_raw_fd(), 0, 0).map_err(blk)?;
        probe.enable_superblocks(true).map_err(blk)?;
        probe
            .set_superblock_flags(BlkidSublksFlags::new(vec![
                BlkidSublks::Magic,
                BlkidSublks::Type,
                BlkidSublks::Badcsum,
            ]))
            .map_err(blk)?;
        // Each wipe makes the next probe find the next signature; a bound in case one will not go.
        for _ in 0..64 {
            if !matches!(probe.do_probe().map_err(blk)?, BlkidProbeRet::Success) {
                break;
            }
            probe.do_wipe(false).map_err(blk)?;
        }
    }
    for (off, len) in ends(size) {
        f.write_all_at(&vec![0u8; len], off).map_err(io)?;
    }
    f.sync_all().map_err(io)
}

/// [`wipe_file`] for a device only reachable as a [`Disk`] (an NBD export): both ends zeroed,
/// where every signature it was probed by sits.
fn wipe_ends(disk: &dyn Disk) -> Result<(), EngineError> {
    for (off, len) in ends(disk.size_bytes()) {
        disk.write_at(off, &vec![0u8; len])?;
    }
    disk.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_read_as_a_phrase() {
        assert_eq!(
            describe(Some("ext4"), Some("filesystem"), Some("precious"), None),
            "an ext4 filesystem labelled precious"
        );
        assert_eq!(
            describe(Some("xfs"), Some("filesystem"), None, None),
            "an xfs filesystem"
        );
        assert_eq!(
            describe(Some("swap"), Some("other"), None, None),
            "swap space"
        );
        assert_eq!(
            describe(Some("linux_raid_member"), Some("raid"), None, None),
            "a RAID or volume-manager signature (linux_raid_member)"
        );
        assert_eq!(
            describe(None, None, None, Some("gpt")),
            "a partition table (gpt)"
        );
    }
}
