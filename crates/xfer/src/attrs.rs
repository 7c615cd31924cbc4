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
        let c = cpath(p)?;
        // SAFETY: llistxattr/lgetxattr write at most the sizes given into buffers of those sizes.
        unsafe {
            let n = libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0);
            if n > 0 {
                let mut names = vec![0u8; n as usize];
                let n = libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len());
                if n > 0 {
                    for name in names[..n as usize]
                        .split(|&b| b == 0)
                        .filter(|s| !s.is_empty())
                    {
                        let cn = CString::new(name).map_err(|_| io::ErrorKind::InvalidData)?;
                        let len = libc::lgetxattr(c.as_ptr(), cn.as_ptr(), std::ptr::null_mut(), 0);
                        if len < 0 {
                            continue;
                        }
                        let mut val = vec![0u8; len as usize];
                        let len = libc::lgetxattr(
                            c.as_ptr(),
                            cn.as_ptr(),
                            val.as_mut_ptr().cast(),
                            val.len(),
                        );
                        if len >= 0 {
                            val.truncate(len as usize);
                            a.xattrs.push((name.to_vec(), val));
                        }
                    }
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
