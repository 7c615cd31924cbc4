//! The transfer's wire format (FORMAT.md §5). Every message is a frame: `u8 type, u32 length,
//! payload` (little-endian); the stream opens with a hello in each direction that carries the
//! protocol version and feature flags. Every length read from the peer is bounded before
//! anything is allocated.

use std::io::{self, Read, Write};

pub const MAGIC: [u8; 4] = *b"SGXF";
pub const VERSION: u16 = 1;
/// Feature bits. A sender offers what it supports; a receiver answers with what the session
/// uses. `FEATURE_AUTH`: the receiver requires a shared-key challenge before anything else.
pub const FEATURES: u32 = FEATURE_AUTH;
pub const FEATURE_AUTH: u32 = 1;

/// Largest frame payload accepted (a block of the largest block size plus its header).
pub const MAX_FRAME: u32 = (16 << 20) + 4096;
/// Largest block size either side accepts.
pub const MAX_BLOCK: u32 = 16 << 20;
/// Longest relative path accepted.
pub const MAX_PATH: usize = 4096;

pub const T_FILE: u8 = 1;
pub const T_FILE_REPLY: u8 = 2;
pub const T_BLOCK: u8 = 3;
pub const T_BLOCK_RESULT: u8 = 4;
pub const T_FILE_END: u8 = 5;
pub const T_FILE_DONE: u8 = 6;
pub const T_DONE: u8 = 7;
pub const T_ERROR: u8 = 8;
pub const T_CHALLENGE: u8 = 9;
pub const T_RESPONSE: u8 = 10;
pub const T_ATTRS: u8 = 11;

/// Entry kinds in a FILE frame.
pub const KIND_FILE: u8 = 0;
pub const KIND_DIR: u8 = 1;
pub const KIND_SYMLINK: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the peer is not a stripeguard transfer (bad magic)")]
    Magic,
    #[error("the peer speaks transfer protocol version {0}; this build speaks {VERSION}")]
    Version(u16),
    #[error("a frame of {0} bytes (at most {MAX_FRAME} are accepted)")]
    TooLong(u32),
    #[error("malformed {what}: {why}")]
    Malformed { what: &'static str, why: String },
    #[error("the peer reported: {0}")]
    Peer(String),
    /// This side cannot go on (its own directory, device or another receiver), said whole.
    #[error("{0}")]
    Local(String),
}

pub fn malformed(what: &'static str, why: impl Into<String>) -> ProtoError {
    ProtoError::Malformed {
        what,
        why: why.into(),
    }
}

pub fn write_hello(w: &mut impl Write, features: u32) -> io::Result<()> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&features.to_le_bytes());
    w.write_all(&b)?;
    w.flush()
}

pub fn read_hello(r: &mut impl Read) -> Result<u32, ProtoError> {
    let mut b = [0u8; 10];
    r.read_exact(&mut b)?;
    if b[0..4] != MAGIC {
        return Err(ProtoError::Magic);
    }
    let v = u16::from_le_bytes([b[4], b[5]]);
    if v != VERSION {
        return Err(ProtoError::Version(v));
    }
    Ok(u32::from_le_bytes([b[6], b[7], b[8], b[9]]))
}

pub fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> io::Result<()> {
    let mut h = [0u8; 5];
    h[0] = kind;
    h[1..5].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    w.write_all(&h)?;
    w.write_all(payload)
}

/// Read one frame; `None` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> Result<Option<(u8, Vec<u8>)>, ProtoError> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        let n = r.read(&mut h[got..])?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        got += n;
    }
    let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]);
    if len > MAX_FRAME {
        return Err(ProtoError::TooLong(len));
    }
    let mut p = vec![0u8; len as usize];
    r.read_exact(&mut p)?;
    Ok(Some((h[0], p)))
}

/// Owner and extended attributes of the next entry (`send --owner` / `--xattrs`), sent just
/// before its FILE frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// (uid, gid) when owners are sent.
    pub owner: Option<(u32, u32)>,
    /// Extended attributes (name, value).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// At most this many bytes of extended attributes per entry.
pub const MAX_XATTR_BYTES: usize = 256 << 10;

impl Attrs {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self.owner {
            Some((u, g)) => {
                v.push(1);
                v.extend_from_slice(&u.to_le_bytes());
                v.extend_from_slice(&g.to_le_bytes());
            }
            None => v.push(0),
        }
        v.extend_from_slice(&(self.xattrs.len() as u32).to_le_bytes());
        for (n, val) in &self.xattrs {
            put16(&mut v, n);
            v.extend_from_slice(&(val.len() as u32).to_le_bytes());
            v.extend_from_slice(val);
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<Attrs, ProtoError> {
        let mut c = Cur::new(b, "ATTRS frame");
        let owner = match c.u8()? {
            0 => None,
            1 => Some((c.u32()?, c.u32()?)),
            k => return Err(malformed("ATTRS frame", format!("owner flag {k}"))),
        };
        let n = c.u32()? as usize;
        let mut xattrs = Vec::new();
        let mut total = 0usize;
        for _ in 0..n {
            let name = c.bytes16(255)?.to_vec();
            let len = c.u32()? as usize;
            total += len + name.len();
            if total > MAX_XATTR_BYTES || name.is_empty() || name.contains(&0) {
                return Err(malformed(
                    "ATTRS frame",
                    "an extended attribute out of bounds",
                ));
            }
            xattrs.push((name, c.take(len)?.to_vec()));
        }
        c.end()?;
        Ok(Attrs { owner, xattrs })
    }
}

/// The session key from a key file's contents (at least 16 bytes).
pub fn key_from_file(contents: &[u8]) -> Result<[u8; 32], String> {
    if contents.len() < 16 {
        return Err(
            "a key file needs at least 16 bytes (e.g. head -c 32 /dev/urandom > key)".into(),
        );
    }
    Ok(blake3::derive_key("stripeguard xfer key-file v1", contents))
}

/// The answer to a challenge: BLAKE3 keyed with the session key (an HMAC-like MAC).
pub fn answer(key: &[u8; 32], challenge: &[u8]) -> [u8; 32] {
    *blake3::keyed_hash(key, challenge).as_bytes()
}

/// A cursor over a payload that fails instead of panicking.
pub struct Cur<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Cur<'a> {
    pub fn new(b: &'a [u8], what: &'static str) -> Cur<'a> {
        Cur { b, what }
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.b.len() < n {
            return Err(malformed(self.what, "truncated"));
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    pub fn i64(&mut self) -> Result<i64, ProtoError> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    pub fn hash(&mut self) -> Result<[u8; 32], ProtoError> {
        Ok(self.take(32)?.try_into().expect("32"))
    }
    pub fn bytes16(&mut self, max: usize) -> Result<&'a [u8], ProtoError> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize;
        if n > max {
            return Err(malformed(self.what, format!("a field of {n} bytes")));
        }
        self.take(n)
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }
    pub fn end(&self) -> Result<(), ProtoError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(malformed(self.what, "trailing bytes"))
        }
    }
}

pub fn put16(v: &mut Vec<u8>, b: &[u8]) {
    v.extend_from_slice(&(b.len() as u16).to_le_bytes());
    v.extend_from_slice(b);
}

/// A FILE frame: one entry of the tree being sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Relative path, `/`-separated.
    pub path: String,
    pub kind: u8,
    pub size: u64,
    pub mode: u32,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    /// Symlink target (symlinks only).
    pub target: String,
    pub block_size: u32,
    /// BLAKE3 of the whole file (files only).
    pub hash: [u8; 32],
}

impl FileHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96 + self.path.len());
        put16(&mut v, self.path.as_bytes());
        v.push(self.kind);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.mode.to_le_bytes());
        v.extend_from_slice(&self.mtime_s.to_le_bytes());
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        put16(&mut v, self.target.as_bytes());
        v.extend_from_slice(&self.block_size.to_le_bytes());
        v.extend_from_slice(&self.hash);
        v
    }

    pub fn decode(b: &[u8]) -> Result<FileHeader, ProtoError> {
        let mut c = Cur::new(b, "FILE frame");
        let path = std::str::from_utf8(c.bytes16(MAX_PATH)?)
            .map_err(|_| malformed("FILE frame", "a path that is not UTF-8"))?
            .to_string();
        let kind = c.u8()?;
        let size = c.u64()?;
        let mode = c.u32()?;
        let mtime_s = c.i64()?;
        let mtime_ns = c.u32()?;
        let target = std::str::from_utf8(c.bytes16(MAX_PATH)?)
            .map_err(|_| malformed("FILE frame", "a link target that is not UTF-8"))?
            .to_string();
        let block_size = c.u32()?;
        let hash = c.hash()?;
        c.end()?;
        if kind > KIND_SYMLINK {
            return Err(malformed("FILE frame", format!("entry kind {kind}")));
        }
        if kind == KIND_FILE && (block_size == 0 || block_size > MAX_BLOCK) {
            return Err(malformed("FILE frame", format!("block size {block_size}")));
        }
        if mtime_ns >= 1_000_000_000 {
            return Err(malformed("FILE frame", "nanoseconds out of range"));
        }
        Ok(FileHeader {
            path,
            kind,
            size,
            mode,
            mtime_s,
            mtime_ns,
            target,
            block_size,
            hash,
        })
    }
}

/// Turn a connection away: our HELLO, then an ERROR frame saying why (the sender reports it).
pub fn refuse(mut c: impl Write, why: &str) {
    let _ = write_hello(&mut c, 0)
        .and_then(|()| write_frame(&mut c, T_ERROR, why.as_bytes()))
        .and_then(|()| c.flush());
}

/// Check a relative path from the peer: non-empty `/`-separated components, none empty, `.`
/// or `..`, no NUL, not absolute.
pub fn check_relative(path: &str) -> Result<Vec<&str>, ProtoError> {
    let bad = |why: &str| malformed("path", format!("{path:?}: {why}"));
    if path.is_empty() || path.starts_with('/') {
        return Err(bad("empty or absolute"));
    }
    if path.contains('\0') {
        return Err(bad("contains NUL"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(bad("an empty, `.` or `..` component"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paths_that_leave_the_directory_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "a/../../b",
            "..",
            "a//b",
            "./a",
            "a/.",
            "a\0b",
        ] {
            assert!(check_relative(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_relative("a/b c/d").unwrap(), ["a", "b c", "d"]);
    }

    #[test]
    fn headers_round_trip() {
        let h = FileHeader {
            path: "dir/file".into(),
            kind: KIND_FILE,
            size: 12345,
            mode: 0o644,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            target: String::new(),
            block_size: 1 << 20,
            hash: [7; 32],
        };
        assert_eq!(FileHeader::decode(&h.encode()).unwrap(), h);
    }

    proptest! {
        #[test]
        fn decoders_never_panic_on_random_or_truncated_input(
            bytes in prop::collection::vec(any::<u8>(), 0..300),
            cut in any::<usize>(),
        ) {
            let _ = FileHeader::decode(&bytes);
            let h = FileHeader {
                path: "x".into(), kind: KIND_FILE, size: 1, mode: 0, mtime_s: 0, mtime_ns: 0,
                target: String::new(), block_size: 4096, hash: [0; 32],
            }.encode();
            let _ = FileHeader::decode(&h[..cut % (h.len() + 1)]);
            let mut r = &bytes[..];
            while let Ok(Some(_)) = read_frame(&mut r) {}
            let mut r = &bytes[..];
            let _ = read_hello(&mut r);
        }
    }
}
