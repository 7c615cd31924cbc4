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
//! After an overwrite is confirmed, [`wipe_signatures`] erases every signature libblkid finds
//! (as `wipefs -a` does), so that the bytes a new member does not rewrite (past its data area,
//! a partition table's backup at the device's end) do not go on naming the old content.

use std::path::{Path, PathBuf};
use stripeguard_disk::Disk;
use stripeguard_engine::EngineError;
use stripeguard_integrity::{Superblock, SuperblockError, SUPERBLOCK_BYTES};

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
    match std::fs::metadata(p) {
        Ok(m) if m.file_type().is_block_device() => format!("device {}", m.rdev()),
        Ok(m) => format!("inode {}:{}", m.dev(), m.ino()),
        Err(_) => std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string(),
    }
}

/// Refuse to write `p` (opened as `disk`) unless what it holds is confirmed; say what was
/// found and the flag that confirms it. `array_uuid`: the array being written (a device that is
/// already one of its members is the operator's own business, judged by the engine).
pub fn check_target(
    p: &Path,
    disk: &dyn Disk,
    array_uuid: Option<&[u8; 16]>,
    ok: &Confirmations,
) -> Result<(), EngineError> {
    let refuse = |s: String| Err(EngineError::Config(s));
    match probe(p, disk) {
        Found::Nothing => Ok(()),
        Found::InUse(why) => refuse(format!(
            "{} is in use ({why}); stripeguard never writes a device in use, whatever the flags",
            p.display()
        )),
        Found::Member(Some((uuid, _))) if Some(&uuid) == array_uuid => Ok(()),
        Found::Member(id) => {
            if let Some((uuid, _)) = id {
                if let Ok(live) = crate::ask_holder(&uuid) {
                    return refuse(format!(
                        "{} is a member of stripeguard array {}, which process {} ({}) holds; stripeguard never takes a member of an array in use",
                        p.display(),
                        hex(&uuid),
                        live.pid,
                        live.command
                    ));
                }
            }
            if ok.take(p) {
                return Ok(());
            }
            let whose = match id {
                Some((uuid, ix)) => format!("member {ix} of stripeguard array {}", hex(&uuid)),
                None => "a member of a stripeguard array this build cannot read".into(),
            };
            refuse(format!(
                "{} is {whose}; pass --force-take {} to take it (that array loses the member)",
                p.display(),
                p.display()
            ))
        }
        Found::Foreign(what) if ok.overwrite(p) => {
            let _ = what;
            Ok(())
        }
        Found::Foreign(what) => refuse(format!(
            "{} holds {what}; pass --force-overwrite {} to destroy it",
            p.display(),
            p.display()
        )),
    }
}

/// What `p` (opened as `disk`) holds; in-use findings first, then ours, then libblkid's.
pub fn probe(p: &Path, disk: &dyn Disk) -> Found {
    let uri = p.to_str().is_some_and(stripeguard_nbd::is_uri);
    if !uri {
        if let Some(why) = in_use(p) {
            return Found::InUse(why);
        }
    }
    if let Some(member) = stripeguard_member(disk) {
        return Found::Member(member);
    }
    let foreign = if uri { probe_ends(disk) } else { blkid(p) };
    match foreign {
        Ok(Some(what)) => Found::Foreign(what),
        Ok(None) => Found::Nothing,
        // A probe that cannot run says nothing is there only if nobody could tell: refuse.
        Err(e) => Found::InUse(format!("cannot probe what it holds: {e}")),
    }
}

/// Whether `disk` holds a stripeguard superblock (even one this build cannot read), with the
/// array's uuid and the member's index when it reads.
fn stripeguard_member(disk: &dyn Disk) -> Option<Option<([u8; 16], u16)>> {
    let mut sb = vec![0u8; SUPERBLOCK_BYTES];
    disk.read_at(0, &mut sb).ok()?;
    match Superblock::decode(&sb) {
        Ok(s) => Some(Some((s.array_uuid, s.member_index))),
        Err(SuperblockError::BadMagic | SuperblockError::Truncated(_)) => None,
        Err(_) => Some(None),
    }
}

/// Why `p` is in use, if it is: a block device the kernel will not open exclusively (with
/// where it is mounted or what holds it), or a file backing a loop device.
pub fn in_use(p: &Path) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let m = std::fs::metadata(p).ok()?;
    if m.file_type().is_block_device() {
        let busy = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
            .open(p)
            .is_err_and(|e| e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()));
        if !busy {
            return None;
        }
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
        return Some("held open exclusively by another process, or a partition of it is".into());
    }
    let me = format!("inode {}:{}", m.dev(), m.ino());
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
    None
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

/// libblkid's safe probe of `p`: a description of the filesystem, partition table or other
/// signature it holds, or `None`.
fn blkid(p: &Path) -> Result<Option<String>, String> {
    use libblkid_rs::{BlkidProbe, BlkidSafeprobeRet, BlkidSublks, BlkidSublksFlags};
    let e = |e: libblkid_rs::BlkidErr| format!("libblkid: {e}");
    let mut probe = BlkidProbe::new_from_filename(p).map_err(e)?;
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

/// libblkid's probe of a device it cannot open (an NBD export): its first and last MiB copied
/// into a sparse in-memory file of the same size.
fn probe_ends(disk: &dyn Disk) -> Result<Option<String>, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    const MIB: u64 = 1 << 20;
    let fd = rustix::fs::memfd_create("stripeguard-probe", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| format!("memfd: {e}"))?;
    let f = std::fs::File::from(fd);
    let size = disk.size_bytes();
    f.set_len(size).map_err(|e| format!("memfd: {e}"))?;
    for off in [0, size.saturating_sub(MIB)] {
        let mut buf = vec![0u8; usize::try_from(MIB.min(size - off)).unwrap_or(0)];
        disk.read_at(off, &mut buf).map_err(|e| e.to_string())?;
        f.write_all_at(&buf, off)
            .map_err(|e| format!("memfd: {e}"))?;
    }
    blkid(Path::new(&format!("/proc/self/fd/{}", f.as_raw_fd())))
}

/// Erase what an overwrite was confirmed for (as `wipefs -a` and a partition-table zap do):
/// every superblock signature libblkid finds, a few bytes at each magic, and the first and last
/// MiB (partition tables, the backup GPT, md 1.0 and ZFS labels at the end). The new member's
/// own initialisation writes everything it uses afterwards, so zeros here lose nothing of it.
pub fn wipe_signatures(p: &Path) -> Result<(), EngineError> {
    use libblkid_rs::{BlkidProbe, BlkidProbeRet, BlkidSublks, BlkidSublksFlags};
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    const MIB: u64 = 1 << 20;
    let name = p.display();
    let io = |e: std::io::Error| EngineError::Config(format!("wiping {name}: {e}"));
    let blk =
        |e: libblkid_rs::BlkidErr| EngineError::Config(format!("wiping {name}: libblkid: {e}"));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .map_err(io)?;
    let size = f.seek(SeekFrom::End(0)).map_err(io)?;
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
    let zeros = vec![0u8; usize::try_from(MIB.min(size)).unwrap_or(0)];
    f.write_all_at(&zeros, 0).map_err(io)?;
    let tail = size.saturating_sub(MIB);
    f.write_all_at(&zeros[..usize::try_from(size - tail).unwrap_or(0)], tail)
        .map_err(io)?;
    f.sync_all().map_err(io)
}

/// [`wipe_signatures`] for a device only reachable as a [`Disk`] (an NBD export): its first and
/// last MiB zeroed, where every signature it could be probed by sits.
pub fn wipe_ends(disk: &dyn Disk) -> Result<(), EngineError> {
    const MIB: u64 = 1 << 20;
    let size = disk.size_bytes();
    let zeros = vec![0u8; usize::try_from(MIB.min(size)).unwrap_or(0)];
    let tail = size.saturating_sub(MIB);
    disk.write_at(0, &zeros)?;
    disk.write_at(tail, &zeros[..usize::try_from(size - tail).unwrap_or(0)])?;
    disk.flush()?;
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
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
