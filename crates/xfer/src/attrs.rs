//! Owners and extended attributes (`send --owner`, `--xattrs`), read without following
//! symlinks. The receiver applies them through descriptors (`beneath.rs`).

use crate::proto::Attrs;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// The attributes of `p` that the flags ask for.
pub fn read(p: &Path, owner: bool, xattrs: bool) -> io::Result<Attrs> {
    use std::os::unix::fs::MetadataExt;
    let mut a = Attrs::default();
    if owner {
        let m = std::fs::symlink_metadata(p)?;
        a.owner = Some((m.uid(), m.gid()));
    }
    if xattrs {
        // rustix's safe calls, as read_fd's: a list or attribute that cannot be read (or
        // changed size between the query and the read) is left out, as before.
        let c = cpath(p)?;
        let n = rustix::fs::llistxattr_query(c.as_c_str()).unwrap_or(0);
        if n > 0 {
            let mut names = vec![0u8; n];
            let n = rustix::fs::llistxattr(c.as_c_str(), &mut names[..]).unwrap_or(0);
            for name in names[..n.min(names.len())]
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
            {
                let cn = CString::new(name).map_err(|_| io::ErrorKind::InvalidData)?;
                let Ok(len) = rustix::fs::lgetxattr_query(c.as_c_str(), cn.as_c_str()) else {
                    continue;
                };
                let mut val = vec![0u8; len];
                if let Ok(len) = rustix::fs::lgetxattr(c.as_c_str(), cn.as_c_str(), &mut val[..]) {
                    val.truncate(len);
                    a.xattrs.push((name.to_vec(), val));
                }
            }
        }
    }
    Ok(a)
}

/// The attributes of an open file that the flags ask for (owner from `fstat`, xattrs through
/// the descriptor: never by a path that could have changed).
pub fn read_fd(f: &std::fs::File, owner: bool, xattrs: bool) -> io::Result<Attrs> {
    use std::os::unix::fs::MetadataExt;
    let mut a = Attrs::default();
    if owner {
        let m = f.metadata()?;
        a.owner = Some((m.uid(), m.gid()));
    }
    if xattrs {
        let n = rustix::fs::flistxattr_query(f).unwrap_or(0);
        if n > 0 {
            let mut names = vec![0u8; n];
            let n = rustix::fs::flistxattr(f, &mut names[..]).unwrap_or(0);
            for name in names[..n.min(names.len())]
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
            {
                let Ok(cn) = CString::new(name) else { continue };
                let Ok(len) = rustix::fs::fgetxattr_query(f, cn.as_c_str()) else {
                    continue;
                };
                let mut val = vec![0u8; len];
                if let Ok(len) = rustix::fs::fgetxattr(f, cn.as_c_str(), &mut val[..]) {
                    val.truncate(len);
                    a.xattrs.push((name.to_vec(), val));
                }
            }
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_path_and_by_descriptor_read_the_same_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let set = |name: &str, value: &[u8]| {
            rustix::fs::setxattr(&p, name, value, rustix::fs::XattrFlags::empty())
        };
        if set("user.a", b"one").is_err() {
            eprintln!("skipping: no user xattrs on this filesystem");
            return;
        }
        set("user.empty", b"").unwrap();
        let by_path = read(&p, true, true).unwrap();
        let by_fd = read_fd(&std::fs::File::open(&p).unwrap(), true, true).unwrap();
        assert_eq!(by_path, by_fd);
        let mut got = by_path.xattrs.clone();
        got.sort();
        assert_eq!(
            got,
            vec![
                (b"user.a".to_vec(), b"one".to_vec()),
                (b"user.empty".to_vec(), Vec::new())
            ]
        );
        assert!(by_path.owner.is_some());
    }
}
