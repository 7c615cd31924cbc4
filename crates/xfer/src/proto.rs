//! The transfer's wire format, version 3 (FORMAT.md §5). A session opens with a hello in each
//! direction (magic, version, feature flags); with a shared key it continues with a Noise
//! handshake (`seal.rs`) and every later byte is sealed. Then frames: `u8 type, u32 length,
//! payload` (little-endian). Every frame about a file carries the sender's file id, so that many
//! files are in flight at once. Names are bytes (any byte but NUL and `/` in a component).
//! Every length read from the peer is bounded before anything is allocated, and every decoder
//! returns an error, never panics.

use std::io::{self, Read, Write};

pub const MAGIC: [u8; 4] = *b"SGXF";
pub const VERSION: u16 = 3;
/// Feature bits. The sender offers what it supports; the receiver answers with what the
/// session uses. `FEATURE_SEALED`: a Noise handshake keyed by the shared key follows the
/// hellos, and every later byte is sealed (both ends prove the key).
pub const FEATURE_SEALED: u32 = 1;
/// In a receiver's hello: it turns this sender away, and an ERROR frame saying why follows.
pub const FEATURE_REFUSED: u32 = 1 << 31;
pub const FEATURES: u32 = FEATURE_SEALED;

/// Largest frame payload accepted (a block of the largest block size plus its header).
pub const MAX_FRAME: u32 = (16 << 20) + 4096;
/// Block sizes either side accepts.
pub const MIN_BLOCK: u32 = 4096;
pub const MAX_BLOCK: u32 = 16 << 20;
/// Most blocks in one file: with 32 bytes of hash and a bit per block, a file's state on the
/// receiver stays under 33 MiB. A sender picks a block size large enough (a 16 TiB file at most).
pub const MAX_BLOCKS: u64 = 1 << 20;
/// Most blocks of all the files a receiver holds open at once (the session's file state stays
/// under 66 MiB); a sender opens no further file while the next one would exceed it.
pub const MAX_OPEN_BLOCKS: u64 = 2 << 20;
/// Most files in flight at once in one session.
pub const MAX_OPEN_FILES: usize = 1024;
/// Longest relative path, and longest component, accepted.
pub const MAX_PATH: usize = 4096;
pub const MAX_NAME: usize = 255;
/// Most verified ranges in a FILE_REPLY (a longer list is cut: those blocks are sent again).
pub const MAX_RANGES: usize = 65536;
/// At most this many bytes of extended attributes per entry.
pub const MAX_XATTR_BYTES: usize = 256 << 10;

pub const T_FILE: u8 = 1;
pub const T_FILE_REPLY: u8 = 2;
pub const T_BLOCK: u8 = 3;
pub const T_BLOCK_RESULT: u8 = 4;
pub const T_FILE_END: u8 = 5;
pub const T_FILE_DONE: u8 = 6;
pub const T_DONE: u8 = 7;
pub const T_ERROR: u8 = 8;
pub const T_OPTIONS: u8 = 9;
pub const T_COPY: u8 = 10;
pub const T_ZBLOCK: u8 = 11;
pub const T_LIST: u8 = 12;
pub const T_LISTING: u8 = 13;
pub const T_DELETE: u8 = 14;

/// OPTIONS flags: what the sender asks of this session (FORMAT.md §5 "Options").
/// Delete what the source does not have, after everything is verified (`recv --allow-delete`).
pub const OPT_DELETE: u32 = 1;
/// Change nothing: answer what would be done.
pub const OPT_DRY_RUN: u32 = 1 << 1;
/// The sender may send blocks compressed (ZBLOCK).
pub const OPT_COMPRESS: u32 = 1 << 2;
/// Trust the receiver's verification records younger than the age that follows.
pub const OPT_QUICK: u32 = 1 << 3;
/// Never offer a changed file's old blocks (`send --whole-file`).
pub const OPT_WHOLE_FILE: u32 = 1 << 4;
const OPT_ALL: u32 = OPT_DELETE | OPT_DRY_RUN | OPT_COMPRESS | OPT_QUICK | OPT_WHOLE_FILE;

/// Entry kinds in a FILE frame.
pub const KIND_FILE: u8 = 0;
pub const KIND_DIR: u8 = 1;
pub const KIND_SYMLINK: u8 = 2;
pub const KIND_FIFO: u8 = 3;
pub const KIND_SOCKET: u8 = 4;
/// Device nodes: the FILE frame's size field holds the device number (`st_rdev`).
pub const KIND_CHAR: u8 = 5;
pub const KIND_BLOCK: u8 = 6;
/// A hard link: the target field names an entry of this session that landed or was there.
pub const KIND_HARDLINK: u8 = 7;

/// FILE_REPLY statuses.
pub const REPLY_SEND: u8 = 0;
pub const REPLY_SKIPPED: u8 = 1;
pub const REPLY_MADE: u8 = 2;
pub const REPLY_REFUSED: u8 = 3;
pub const REPLY_DELTA: u8 = 4;
pub const REPLY_WOULD: u8 = 5;
pub const REPLY_TRUSTED: u8 = 6;
pub const REPLY_HASH_FIRST: u8 = 7;

/// FILE_DONE statuses.
pub const DONE_LANDED: u8 = 0;
pub const DONE_KEPT_PARTIAL: u8 = 1;
pub const DONE_FAILED: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the peer is not a stripeguard transfer (bad magic)")]
    Magic,
    #[error("the peer speaks transfer protocol version {0} (an older stripeguard); both ends need version {VERSION}: upgrade the older one")]
    Version(u16),
    #[error("a frame of {0} bytes (at most {MAX_FRAME} are accepted)")]
    TooLong(u32),
    #[error("malformed {what}: {why}")]
    Malformed { what: &'static str, why: String },
    #[error("the peer reported: {0}")]
    Peer(String),
    /// The key handshake failed: the other end holds another key, or none.
    #[error("{0}")]
    Auth(String),
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

/// Lowercase hex of bytes (hashes in manifests and progress files).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of hex digits written by [`hex`] (`None`: odd length or not hex).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok())
        .collect()
}

/// Text from the peer made safe to print: control characters (terminal escapes) shown escaped,
/// and cut at 1,000 characters.
pub fn printable(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::new();
    for c in s.chars().take(1000) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A name (bytes) shown to a person: invalid UTF-8 and control characters escaped.
pub fn show(name: &[u8]) -> String {
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

pub fn hello_bytes(features: u32) -> [u8; 10] {
    let mut b = [0u8; 10];
    b[0..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b[6..10].copy_from_slice(&features.to_le_bytes());
    b
}

pub fn write_hello(w: &mut impl Write, features: u32) -> io::Result<[u8; 10]> {
    let b = hello_bytes(features);
    w.write_all(&b)?;
    w.flush()?;
    Ok(b)
}

/// Read the peer's hello: its features and the raw bytes (part of the handshake's prologue).
pub fn read_hello(r: &mut impl Read) -> Result<(u32, [u8; 10]), ProtoError> {
    let mut b = [0u8; 10];
    r.read_exact(&mut b).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ProtoError::Local(format!("the peer closed the connection before its hello (an older stripeguard at the far end would say why on its side: both ends need transfer protocol version {VERSION})"))
        } else {
            e.into()
        }
    })?;
    if b[0..4] != MAGIC {
        return Err(ProtoError::Magic);
    }
    let v = u16::from_le_bytes([b[4], b[5]]);
    if v != VERSION {
        return Err(ProtoError::Version(v));
    }
    Ok((u32::from_le_bytes([b[6], b[7], b[8], b[9]]), b))
}

pub fn write_frame(w: &mut (impl Write + ?Sized), kind: u8, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame over the limit"))?;
    let mut h = [0u8; 5];
    h[0] = kind;
    h[1..5].copy_from_slice(&len.to_le_bytes());
    w.write_all(&h)?;
    w.write_all(payload)
}

/// Read one frame; `None` at a clean end of stream.
pub fn read_frame(r: &mut (impl Read + ?Sized)) -> Result<Option<(u8, Vec<u8>)>, ProtoError> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        let n = match r.read(&mut h[got..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(closed());
        }
        got += n;
    }
    let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]);
    if len > MAX_FRAME {
        return Err(ProtoError::TooLong(len));
    }
    let mut p = vec![0u8; len as usize];
    r.read_exact(&mut p).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            closed()
        } else {
            e.into()
        }
    })?;
    Ok(Some((h[0], p)))
}

/// The peer went away mid-frame.
pub fn closed() -> ProtoError {
    ProtoError::Local(
        "the peer closed the connection in the middle of a frame (it ended or was killed)".into(),
    )
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
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.arr::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    pub fn i64(&mut self) -> Result<i64, ProtoError> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    pub fn hash(&mut self) -> Result<[u8; 32], ProtoError> {
        self.arr()
    }
    pub fn bytes16(&mut self, max: usize) -> Result<&'a [u8], ProtoError> {
        let n = self.u16()? as usize;
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

/// Append a u16 length and the bytes (callers bound the length first).
pub fn put16(v: &mut Vec<u8>, b: &[u8]) {
    let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
    v.extend_from_slice(&n.to_le_bytes());
    v.extend_from_slice(&b[..usize::from(n)]);
}

/// Owner and extended attributes of an entry (`send --owner` / `--xattrs`), inside its FILE
/// frame. The receiver applies only what it allows (`recv --owner`, `--xattrs`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// (uid, gid) when owners are sent.
    pub owner: Option<(u32, u32)>,
    /// The owner's user and group names on the sender (empty: none), so that the receiver can
    /// map them to its own ids as rsync does; `None` with `send --numeric-ids`.
    pub names: Option<(Vec<u8>, Vec<u8>)>,
    /// Extended attributes (name, value).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Attrs {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "Linux caps an attribute's value at 64 KiB (XATTR_SIZE_MAX) and the list of \
                  an entry's names at 64 KiB (XATTR_LIST_MAX), so their count and lengths fit"
    )]
    fn encode_into(&self, v: &mut Vec<u8>) {
        match self.owner {
            Some((u, g)) => {
                v.push(if self.names.is_some() { 2 } else { 1 });
                v.extend_from_slice(&u.to_le_bytes());
                v.extend_from_slice(&g.to_le_bytes());
                if let Some((un, gn)) = &self.names {
                    put16(v, &un[..un.len().min(MAX_NAME)]);
                    put16(v, &gn[..gn.len().min(MAX_NAME)]);
                }
            }
            None => v.push(0),
        }
        v.extend_from_slice(&(self.xattrs.len() as u32).to_le_bytes());
        for (n, val) in &self.xattrs {
            put16(v, n);
            v.extend_from_slice(&(val.len() as u32).to_le_bytes());
            v.extend_from_slice(val);
        }
    }

    fn decode_from(c: &mut Cur) -> Result<Attrs, ProtoError> {
        let (owner, names) = match c.u8()? {
            0 => (None, None),
            1 => (Some((c.u32()?, c.u32()?)), None),
            2 => {
                let ids = (c.u32()?, c.u32()?);
                let un = c.bytes16(MAX_NAME)?.to_vec();
                let gn = c.bytes16(MAX_NAME)?.to_vec();
                if un.contains(&0) || gn.contains(&0) {
                    return Err(malformed("FILE frame", "an owner name with NUL"));
                }
                (Some(ids), Some((un, gn)))
            }
            k => return Err(malformed("FILE frame", format!("owner flag {k}"))),
        };
        let n = c.u32()? as usize;
        let mut xattrs = Vec::new();
        let mut total = 0usize;
        for _ in 0..n {
            let name = c.bytes16(MAX_NAME)?.to_vec();
            let len = c.u32()? as usize;
            total = total.saturating_add(len).saturating_add(name.len());
            if total > MAX_XATTR_BYTES || name.is_empty() || name.contains(&0) {
                return Err(malformed(
                    "FILE frame",
                    "an extended attribute out of bounds",
                ));
            }
            xattrs.push((name, c.take(len)?.to_vec()));
        }
        Ok(Attrs {
            owner,
            names,
            xattrs,
        })
    }
}

/// A FILE frame: one entry of the tree being sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// The sender's id for this entry while it is in flight.
    pub id: u32,
    pub kind: u8,
    /// Relative path, `/`-separated, as bytes.
    pub path: Vec<u8>,
    pub size: u64,
    pub mode: u32,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    /// Symlink target (symlinks only), as bytes.
    pub target: Vec<u8>,
    pub block_size: u32,
    /// BLAKE3 of the list of the blocks' BLAKE3 hashes (files only).
    pub hash: [u8; 32],
    pub attrs: Attrs,
}

impl FileHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96 + self.path.len() + self.target.len());
        v.extend_from_slice(&self.id.to_le_bytes());
        v.push(self.kind);
        put16(&mut v, &self.path);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.mode.to_le_bytes());
        v.extend_from_slice(&self.mtime_s.to_le_bytes());
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        put16(&mut v, &self.target);
        v.extend_from_slice(&self.block_size.to_le_bytes());
        v.extend_from_slice(&self.hash);
        self.attrs.encode_into(&mut v);
        v
    }

    pub fn decode(b: &[u8]) -> Result<FileHeader, ProtoError> {
        let mut c = Cur::new(b, "FILE frame");
        let id = c.u32()?;
        let kind = c.u8()?;
        let path = c.bytes16(MAX_PATH)?.to_vec();
        let size = c.u64()?;
        let mode = c.u32()?;
        let mtime_s = c.i64()?;
        let mtime_ns = c.u32()?;
        let target = c.bytes16(MAX_PATH)?.to_vec();
        let block_size = c.u32()?;
        let hash = c.hash()?;
        let attrs = Attrs::decode_from(&mut c)?;
        c.end()?;
        if kind > KIND_HARDLINK {
            return Err(malformed("FILE frame", format!("entry kind {kind}")));
        }
        if mtime_ns >= 1_000_000_000 {
            return Err(malformed("FILE frame", "nanoseconds out of range"));
        }
        Ok(FileHeader {
            id,
            kind,
            path,
            size,
            mode,
            mtime_s,
            mtime_ns,
            target,
            block_size,
            hash,
            attrs,
        })
    }

    /// Blocks of a file (its block size checked first).
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(u64::from(self.block_size.max(1)))
    }

    /// Why a file's size and block size cannot be received, if they cannot.
    pub fn check_blocks(&self) -> Result<(), String> {
        if !(MIN_BLOCK..=MAX_BLOCK).contains(&self.block_size) || !self.block_size.is_power_of_two()
        {
            return Err(format!(
                "block size {} (a power of two from 4 KiB to 16 MiB)",
                self.block_size
            ));
        }
        if self.blocks() > MAX_BLOCKS {
            return Err(format!(
                "{} bytes in {}-byte blocks is {} blocks (at most {MAX_BLOCKS})",
                self.size,
                self.block_size,
                self.blocks()
            ));
        }
        Ok(())
    }
}

/// The length of the block at byte `off` of a `size`-byte file in blocks of `bs` bytes.
#[allow(
    clippy::cast_possible_truncation,
    reason = "at most `bs`, and a block size is at most MAX_BLOCK (16 MiB) wherever one is \
              taken: FILE frames pass check_blocks, a sender picks one with block_size_for, a \
              manifest's is checked when it is parsed"
)]
pub fn block_len(size: u64, off: u64, bs: u64) -> usize {
    (size - off).min(bs) as usize
}

/// The smallest power-of-two block size from `want` up that keeps a file of `size` bytes within
/// [`MAX_BLOCKS`], or `None` when the file is too large for the largest block size.
pub fn block_size_for(size: u64, want: u32) -> Option<u32> {
    let mut bs = want.clamp(MIN_BLOCK, MAX_BLOCK).next_power_of_two();
    while size.div_ceil(u64::from(bs)) > MAX_BLOCKS {
        if bs >= MAX_BLOCK {
            return None;
        }
        bs *= 2;
    }
    Some(bs)
}

/// FILE_REPLY: what the receiver wants of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Send every block outside these verified ranges `[first, end)`.
    Send(Vec<(u64, u64)>),
    /// Already there and verified from the device.
    Skipped,
    /// Made (a directory or a symlink).
    Made,
    /// Refused, with the reason.
    Refused(String),
    /// A changed file: send every block outside these verified ranges, and where a block's
    /// hash is among the old file's (`old`, read from the device at this file's block size),
    /// a COPY of that old block may stand in for its bytes.
    Delta(Vec<(u64, u64)>, Vec<[u8; 32]>),
    /// A dry run: this entry would be sent or made.
    Would,
    /// Already there, trusted from the receiver's verification record written at this time
    /// (seconds since the epoch), not read from the device (`--quick`).
    Trusted(i64),
    /// A `--quick` file sent unhashed (block size 0) that no record vouches for: send its
    /// FILE frame again, hashed, under the same id.
    HashFirst,
}

/// Most old-block hashes in a DELTA reply (they fill at most 16 MiB of the frame); a longer
/// old file offers its first blocks only.
pub const MAX_OLD_HASHES: usize = 1 << 19;

/// OPTIONS: the sender's first frame, what it asks of the session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub flags: u32,
    /// With OPT_QUICK: the oldest verification record trusted, in seconds of age.
    pub quick_secs: u64,
    /// The module of a receiver daemon (empty: its one directory).
    pub module: Vec<u8>,
}

impl Options {
    pub fn has(&self, f: u32) -> bool {
        self.flags & f != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.flags.to_le_bytes().to_vec();
        v.extend_from_slice(&self.quick_secs.to_le_bytes());
        put16(&mut v, &self.module[..self.module.len().min(MAX_NAME)]);
        v
    }

    pub fn decode(b: &[u8]) -> Result<Options, ProtoError> {
        let mut c = Cur::new(b, "OPTIONS frame");
        let flags = c.u32()?;
        let quick_secs = c.u64()?;
        let module = c.bytes16(MAX_NAME)?.to_vec();
        c.end()?;
        if flags & !OPT_ALL != 0 {
            return Err(malformed(
                "OPTIONS frame",
                format!("unknown option bits {:#x}", flags & !OPT_ALL),
            ));
        }
        Ok(Options {
            flags,
            quick_secs,
            module,
        })
    }
}

/// u32 count and `[first, end)` pairs, at most MAX_RANGES of them (a longer list is cut).
fn put_ranges(v: &mut Vec<u8>, ranges: &[(u64, u64)]) {
    let ranges = &ranges[..ranges.len().min(MAX_RANGES)];
    let count = u32::try_from(ranges.len()).expect("at most MAX_RANGES (65536)");
    v.extend_from_slice(&count.to_le_bytes());
    for (a, b) in ranges {
        v.extend_from_slice(&a.to_le_bytes());
        v.extend_from_slice(&b.to_le_bytes());
    }
}

pub fn encode_reply(id: u32, r: &Reply) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    match r {
        Reply::Send(ranges) => {
            v.push(REPLY_SEND);
            put_ranges(&mut v, ranges);
        }
        Reply::Delta(ranges, old) => {
            v.push(REPLY_DELTA);
            put_ranges(&mut v, ranges);
            let old = &old[..old.len().min(MAX_OLD_HASHES)];
            let count = u32::try_from(old.len()).expect("at most MAX_OLD_HASHES");
            v.extend_from_slice(&count.to_le_bytes());
            for h in old {
                v.extend_from_slice(h);
            }
        }
        Reply::Would => v.push(REPLY_WOULD),
        Reply::HashFirst => v.push(REPLY_HASH_FIRST),
        Reply::Trusted(t) => {
            v.push(REPLY_TRUSTED);
            v.extend_from_slice(&t.to_le_bytes());
        }
        Reply::Skipped => v.push(REPLY_SKIPPED),
        Reply::Made => v.push(REPLY_MADE),
        Reply::Refused(why) => {
            v.push(REPLY_REFUSED);
            v.extend_from_slice(&why.as_bytes()[..why.len().min(4096)]);
        }
    }
    v
}

pub fn decode_reply(b: &[u8]) -> Result<(u32, Reply), ProtoError> {
    let mut c = Cur::new(b, "FILE_REPLY frame");
    let id = c.u32()?;
    let ranges = |c: &mut Cur| -> Result<Vec<(u64, u64)>, ProtoError> {
        let n = c.u32()? as usize;
        if n > MAX_RANGES {
            return Err(malformed("FILE_REPLY frame", format!("{n} ranges")));
        }
        let mut ranges = Vec::with_capacity(n);
        for _ in 0..n {
            let (a, e) = (c.u64()?, c.u64()?);
            if a >= e {
                return Err(malformed("FILE_REPLY frame", "an empty range"));
            }
            ranges.push((a, e));
        }
        Ok(ranges)
    };
    let r = match c.u8()? {
        REPLY_SEND => Reply::Send(ranges(&mut c)?),
        REPLY_DELTA => {
            let r = ranges(&mut c)?;
            let n = c.u32()? as usize;
            if n > MAX_OLD_HASHES {
                return Err(malformed("FILE_REPLY frame", format!("{n} old hashes")));
            }
            let mut old = Vec::with_capacity(n);
            for _ in 0..n {
                old.push(c.hash()?);
            }
            Reply::Delta(r, old)
        }
        REPLY_WOULD => Reply::Would,
        REPLY_HASH_FIRST => Reply::HashFirst,
        REPLY_TRUSTED => Reply::Trusted(c.i64()?),
        REPLY_SKIPPED => Reply::Skipped,
        REPLY_MADE => Reply::Made,
        REPLY_REFUSED => Reply::Refused(printable(c.rest())),
        k => return Err(malformed("FILE_REPLY frame", format!("status {k}"))),
    };
    c.end()?;
    Ok((id, r))
}

/// BLOCK: file id, block index, BLAKE3 of the bytes, the bytes.
pub fn encode_block_header(id: u32, index: u64, hash: &[u8; 32], len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(44 + len);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(hash);
    v
}

/// A BLOCK frame's fields: file id, block index, the sender's hash, the bytes.
pub struct Block<'a> {
    pub id: u32,
    pub index: u64,
    pub hash: [u8; 32],
    pub data: &'a [u8],
}

pub fn decode_block(b: &[u8]) -> Result<Block<'_>, ProtoError> {
    let mut c = Cur::new(b, "BLOCK frame");
    Ok(Block {
        id: c.u32()?,
        index: c.u64()?,
        hash: c.hash()?,
        data: c.rest(),
    })
}

/// COPY: file id, block index, the old block (of the file under the name) whose bytes it
/// has, and their BLAKE3 hash.
pub fn encode_copy(id: u32, index: u64, old: u64, hash: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(52);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(&old.to_le_bytes());
    v.extend_from_slice(hash);
    v
}

pub fn decode_copy(b: &[u8]) -> Result<(u32, u64, u64, [u8; 32]), ProtoError> {
    let mut c = Cur::new(b, "COPY frame");
    let r = (c.u32()?, c.u64()?, c.u64()?, c.hash()?);
    c.end()?;
    Ok(r)
}

/// ZBLOCK: a BLOCK whose bytes are one zstd frame; u32 length of the bytes it holds follows
/// the hash.
pub fn encode_zblock_header(id: u32, index: u64, hash: &[u8; 32], raw: usize) -> Vec<u8> {
    let mut v = encode_block_header(id, index, hash, 0);
    let raw = u32::try_from(raw).expect("a block is at most 16 MiB");
    v.extend_from_slice(&raw.to_le_bytes());
    v
}

/// A ZBLOCK frame's fields, its bytes decompressed (exactly `raw` of them, at most a block).
/// (`z`: the session's decompression context, kept across blocks.)
pub fn decode_zblock(
    b: &[u8],
    z: &mut zstd::bulk::Decompressor<'_>,
) -> Result<(u32, u64, [u8; 32], Vec<u8>), ProtoError> {
    let mut c = Cur::new(b, "ZBLOCK frame");
    let (id, index, hash) = (c.u32()?, c.u64()?, c.hash()?);
    let raw = c.u32()?;
    if raw > MAX_BLOCK {
        return Err(malformed("ZBLOCK frame", format!("{raw} bytes")));
    }
    let data = z
        .decompress(c.rest(), raw as usize)
        .map_err(|e| malformed("ZBLOCK frame", format!("does not decompress: {e}")))?;
    if data.len() != raw as usize {
        return Err(malformed(
            "ZBLOCK frame",
            format!("{} bytes where {raw} were announced", data.len()),
        ));
    }
    Ok((id, index, hash, data))
}

/// LIST (sender): a request id and a directory's path (empty: DIR itself).
pub fn encode_list(id: u32, path: &[u8]) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    put16(&mut v, path);
    v
}

pub fn decode_list(b: &[u8], what: &'static str) -> Result<(u32, Vec<u8>), ProtoError> {
    let mut c = Cur::new(b, what);
    let id = c.u32()?;
    let p = c.bytes16(MAX_PATH)?.to_vec();
    c.end()?;
    Ok((id, p))
}

/// LISTING statuses: more frames follow for this request, this is the last, the directory is
/// not there (or is not a directory).
pub const LISTING_MORE: u8 = 0;
pub const LISTING_LAST: u8 = 1;
pub const LISTING_NONE: u8 = 2;

/// Names per LISTING frame (each at most 255 bytes: the frame stays under 1 MiB).
pub const LISTING_NAMES: usize = 4096;

/// LISTING (receiver): request id, status, u32 count, then per entry u8 kind (0 file, 1
/// directory, 2 symlink, 3 anything else) and u16 + name.
pub fn encode_listing(id: u32, status: u8, names: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.push(status);
    let n = u32::try_from(names.len()).expect("at most LISTING_NAMES");
    v.extend_from_slice(&n.to_le_bytes());
    for (k, name) in names {
        v.push(*k);
        put16(&mut v, name);
    }
    v
}

/// A LISTING frame's fields.
pub type Listing = (u32, u8, Vec<(u8, Vec<u8>)>);

pub fn decode_listing(b: &[u8]) -> Result<Listing, ProtoError> {
    let mut c = Cur::new(b, "LISTING frame");
    let id = c.u32()?;
    let status = c.u8()?;
    let n = c.u32()? as usize;
    if status > LISTING_NONE || n > LISTING_NAMES {
        return Err(malformed(
            "LISTING frame",
            format!("status {status}, {n} names"),
        ));
    }
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        let k = c.u8()?;
        if k > 3 {
            return Err(malformed("LISTING frame", format!("entry kind {k}")));
        }
        let name = c.bytes16(MAX_NAME)?.to_vec();
        if name.is_empty()
            || name.contains(&b'/')
            || name.contains(&0)
            || name == b"."
            || name == b".."
        {
            return Err(malformed(
                "LISTING frame",
                "a name that is not one component",
            ));
        }
        names.push((k, name));
    }
    c.end()?;
    Ok((id, status, names))
}

pub fn encode_result(id: u32, index: u64, ok: bool) -> [u8; 13] {
    let mut v = [0u8; 13];
    v[0..4].copy_from_slice(&id.to_le_bytes());
    v[4..12].copy_from_slice(&index.to_le_bytes());
    v[12] = ok as u8;
    v
}

pub fn decode_result(b: &[u8]) -> Result<(u32, u64, bool), ProtoError> {
    let mut c = Cur::new(b, "BLOCK_RESULT frame");
    let r = (c.u32()?, c.u64()?, c.u8()? != 0);
    c.end()?;
    Ok(r)
}

pub fn encode_done(id: u32, status: u8, why: &str) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.push(status);
    v.extend_from_slice(&why.as_bytes()[..why.len().min(4096)]);
    v
}

pub fn decode_done(b: &[u8]) -> Result<(u32, u8, String), ProtoError> {
    let mut c = Cur::new(b, "FILE_DONE frame");
    let id = c.u32()?;
    let status = c.u8()?;
    if status > DONE_FAILED {
        return Err(malformed("FILE_DONE frame", format!("status {status}")));
    }
    Ok((id, status, printable(c.rest())))
}

/// Turn a connection away: our hello, then an ERROR frame saying why (the sender reports it).
pub fn refuse(mut c: impl Write, why: &str) {
    let _ = write_hello(&mut c, FEATURE_REFUSED)
        .and_then(|_| write_frame(&mut c, T_ERROR, why.as_bytes()))
        .and_then(|()| c.flush());
}

/// Check a relative path from the peer: `/`-separated components, none empty, `.` or `..`,
/// none longer than 255 bytes, no NUL, not absolute, at most 4096 bytes.
pub fn check_relative(path: &[u8]) -> Result<Vec<&[u8]>, String> {
    let bad = |why: &str| format!("path {:?}: {why}", show(path));
    if path.is_empty() || path[0] == b'/' {
        return Err(bad("empty or absolute"));
    }
    if path.len() > MAX_PATH {
        return Err(bad("longer than 4096 bytes"));
    }
    if path.contains(&0) {
        return Err(bad("contains NUL"));
    }
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == b"." || *p == b"..")
    {
        return Err(bad("an empty, `.` or `..` component"));
    }
    if parts.iter().any(|p| p.len() > MAX_NAME) {
        return Err(bad("a component longer than 255 bytes"));
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
            &b""[..],
            b"/etc/passwd",
            b"a/../../b",
            b"..",
            b"a//b",
            b"./a",
            b"a/.",
            b"a\0b",
        ] {
            assert!(check_relative(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_relative(b"a/b c/d\xff\n").unwrap(),
            [&b"a"[..], b"b c", b"d\xff\n"]
        );
        assert!(check_relative(&[b'x'; 256]).is_err());
        assert!(check_relative(&[b'x'; 255]).is_ok());
    }

    fn header() -> FileHeader {
        FileHeader {
            id: 7,
            kind: KIND_FILE,
            path: b"dir/file\xff".to_vec(),
            size: 12345,
            mode: 0o644,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            target: Vec::new(),
            block_size: 1 << 20,
            hash: [7; 32],
            attrs: Attrs {
                owner: Some((1, 2)),
                names: Some((b"alice".to_vec(), Vec::new())),
                xattrs: vec![(b"user.a".to_vec(), b"v".to_vec())],
            },
        }
    }

    #[test]
    fn frames_round_trip() {
        let h = header();
        assert_eq!(FileHeader::decode(&h.encode()).unwrap(), h);
        for r in [
            Reply::Send(vec![(0, 3), (5, 9)]),
            Reply::Skipped,
            Reply::Made,
            Reply::Refused("no".into()),
        ] {
            assert_eq!(decode_reply(&encode_reply(9, &r)).unwrap(), (9, r));
        }
        assert_eq!(
            decode_result(&encode_result(3, 1 << 40, true)).unwrap(),
            (3, 1 << 40, true)
        );
        assert_eq!(
            decode_done(&encode_done(3, DONE_FAILED, "x")).unwrap(),
            (3, DONE_FAILED, "x".into())
        );
    }

    #[test]
    fn a_huge_file_gets_a_block_size_within_the_limits() {
        assert_eq!(block_size_for(1 << 20, 256 << 10), Some(256 << 10));
        assert_eq!(block_size_for(1 << 40, 4096), Some(1 << 20));
        assert_eq!(block_size_for(1 << 45, 4096), None);
        let mut h = header();
        h.size = 1 << 40;
        h.block_size = 4096;
        assert!(h.check_blocks().is_err(), "2^28 blocks");
        h.block_size = 1;
        assert!(h.check_blocks().is_err(), "a block size of 1");
    }

    #[test]
    fn peer_text_is_printed_without_escapes() {
        assert_eq!(printable(b"a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(show(b"a\xffb\n"), "a\\xffb\\n");
    }

    proptest! {
        #[test]
        fn decoders_never_panic_on_random_or_truncated_input(
            bytes in prop::collection::vec(any::<u8>(), 0..300),
            cut in any::<usize>(),
        ) {
            let _ = FileHeader::decode(&bytes);
            let h = header().encode();
            let _ = FileHeader::decode(&h[..cut % (h.len() + 1)]);
            let _ = decode_reply(&bytes);
            let _ = decode_block(&bytes);
            let _ = decode_result(&bytes);
            let _ = decode_done(&bytes);
            let _ = check_relative(&bytes);
            let mut r = &bytes[..];
            while let Ok(Some(_)) = read_frame(&mut r) {}
            let mut r = &bytes[..];
            let _ = read_hello(&mut r);
        }
    }
}
