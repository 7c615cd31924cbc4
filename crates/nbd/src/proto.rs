//! The NBD wire format (the NBD project's `doc/proto.md`; FORMAT.md §4 lists what this server
//! sends and accepts): the fixed-newstyle handshake and the transmission-phase request and simple
//! reply headers. Everything here is big-endian ("network byte order").
//!
//! Handshake, as this server runs it:
//!
//! ```text
//! S: "NBDMAGIC" "IHAVEOPT" u16 handshake flags (FIXED_NEWSTYLE | NO_ZEROES)
//! C: u32 client flags
//! repeat:
//!   C: "IHAVEOPT" u32 option u32 length [data]
//!   S: u64 0x3e889045565a9 u32 option u32 reply-type u32 length [data]   (one or more)
//! until GO is answered with ACK (or EXPORT_NAME is answered with the export's size and flags),
//! or the client sends ABORT.
//! ```
//!
//! Transmission: a 28-byte request header (magic, flags, type, cookie, offset, length) and, for
//! WRITE, `length` bytes of payload; a 16-byte simple reply (magic, error, cookie) and, for a
//! successful READ, `length` bytes of data.

use std::io::{self, Read, Write};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const CLIENT_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const CLIENT_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;

// Information types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Commands and their flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured replies.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

// Meta contexts this server offers, and their flags (FORMAT.md §4).
pub const CONTEXT_ALLOCATION: &str = "base:allocation";
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;
pub const CONTEXT_INTEGRITY: &str = "stripeguard:integrity";
/// Bytes listed untrusted (FORMAT.md §2.7): a read of them is refused (or zeros, as asked).
pub const INTEGRITY_UNTRUSTED: u32 = 1 << 0;
/// A member is out: damage found here now could be detected but not repaired.
pub const INTEGRITY_DEGRADED: u32 = 1 << 1;

// Errors in simple replies.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// The largest option payload this server reads (an export name is at most 4,096 bytes; the
/// rest of a GO is a short list of information requests; a meta-context request a few
/// names). A longer option is read and thrown away, and answered `NBD_REP_ERR_INVALID`.
pub const MAX_OPTION_BYTES: u32 = 16384;
/// An option longer than this is hostile: the connection is dropped rather than read on.
pub const MAX_DISCARD_BYTES: u32 = 64 << 20;
/// The largest READ or WRITE payload (the protocol's 2^25 that no client may be refused).
pub const MAX_PAYLOAD_BYTES: u32 = 32 << 20;
/// The longest export name the protocol allows.
pub const MAX_NAME_BYTES: usize = 4096;

/// A transmission-phase request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub const BYTES: usize = 28;

    /// Parse a header; `None` when the magic is wrong (the stream cannot be trusted after that).
    pub fn parse(b: &[u8; Self::BYTES]) -> Option<Request> {
        if be32(&b[0..4]) != REQUEST_MAGIC {
            return None;
        }
        Some(Request {
            flags: be16(&b[4..6]),
            kind: be16(&b[6..8]),
            cookie: be64(&b[8..16]),
            offset: be64(&b[16..24]),
            length: be32(&b[24..28]),
        })
    }

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// A simple reply header (16 bytes); a successful READ's data follows it.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk's header (20 bytes) for `len` bytes of payload.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, len: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk: the error and a message for the user (cut to the
/// protocol's 4,096 bytes at a character boundary).
pub fn error_chunk(cookie: u64, errno: u32, message: &str) -> Vec<u8> {
    let mut end = message.len().min(MAX_NAME_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let msg = &message.as_bytes()[..end];
    let mut b = Vec::with_capacity(26 + msg.len());
    let mlen = u16::try_from(msg.len()).unwrap_or(u16::MAX);
    let len = 6 + u32::from(mlen);
    b.extend_from_slice(&chunk_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        len,
    ));
    b.extend_from_slice(&errno.to_be_bytes());
    b.extend_from_slice(&mlen.to_be_bytes());
    b.extend_from_slice(msg);
    b
}

/// A `NBD_REPLY_TYPE_BLOCK_STATUS` chunk for context `id`: (length, flags) descriptors.
pub fn block_status_chunk(cookie: u64, done: bool, id: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    // At most 2^20 extents, as the protocol asks (the server sends no more).
    let extents = &extents[..extents.len().min(1 << 20)];
    let len = 4 + 8 * extents.len();
    let mut b = Vec::with_capacity(20 + len);
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    b.extend_from_slice(&chunk_header(
        flags,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        u32::try_from(len).unwrap_or(u32::MAX),
    ));
    b.extend_from_slice(&id.to_be_bytes());
    for (l, f) in extents {
        b.extend_from_slice(&l.to_be_bytes());
        b.extend_from_slice(&f.to_be_bytes());
    }
    b
}

pub fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
pub fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// What the server tells a client about its one export.
#[derive(Clone, Debug)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    /// Transmission flags (`TFLAG_*`).
    pub flags: u16,
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_payload: u32,
    /// The meta contexts offered (`NBD_OPT_LIST_META_CONTEXT`), by name.
    pub meta_contexts: Vec<&'static str>,
}

/// What a handshake agreed on for the transmission phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// `NBD_OPT_STRUCTURED_REPLY` was acknowledged.
    pub structured: bool,
    /// The meta contexts the last `NBD_OPT_SET_META_CONTEXT` selected: (id, name).
    pub contexts: Vec<(u32, &'static str)>,
}

/// How a handshake ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Handshake {
    /// Transmission begins.
    Go(Negotiated),
    /// The client aborted (or asked only for information and left).
    Aborted,
}

/// Turns a client's stream into its TLS session's plaintext stream, in place (`STARTTLS`).
pub type Upgrade<S> = dyn Fn(&mut S) -> io::Result<()>;

/// Why every option but ABORT is being refused (the server is stopping, or full).
#[derive(Clone, Debug)]
pub struct Refusal {
    /// `NBD_REP_ERR_SHUTDOWN`, `NBD_REP_ERR_POLICY`, ...
    pub reply: u32,
    pub message: String,
}

/// Why a handshake was cut off (a hard disconnect; the reason is logged, never sent).
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the client sent {0:#x} where the option magic belongs")]
    BadMagic(u64),
    #[error("the client set unknown client flags {0:#x}")]
    ClientFlags(u32),
    #[error("an option of {0} bytes (over {MAX_DISCARD_BYTES}: not read on)")]
    OptionTooLong(u32),
    #[error("the client left during the handshake")]
    Left,
    #[error("{0}")]
    Refused(String),
    #[error("the client asked for export {0:?}, which this server does not have")]
    UnknownExport(String),
}

/// Run the fixed-newstyle handshake on `s` for `export`. `refusing` is asked before each
/// option: once it gives a refusal (the server stopping, or full), options other than ABORT
/// get its reply and message. A client that closes the connection during the handshake is
/// [`HandshakeError::Left`]. With `tls`, TLS is required (the protocol's FORCEDTLS mode):
/// until `STARTTLS`, every option but `STARTTLS` and `ABORT` gets `NBD_REP_ERR_TLS_REQD`;
/// `STARTTLS` is acknowledged and `tls` turns `s` into the session's plaintext stream, and the
/// haggling starts over on it (structured replies and meta contexts negotiated before are
/// forgotten, as the protocol asks).
pub fn handshake<S: Read + Write>(
    s: &mut S,
    export: &ExportInfo,
    refusing: &dyn Fn() -> Option<Refusal>,
    tls: Option<&Upgrade<S>>,
) -> Result<Handshake, HandshakeError> {
    handshake_inner(s, export, refusing, tls).map_err(|e| match e {
        HandshakeError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => HandshakeError::Left,
        other => other,
    })
}

fn handshake_inner<S: Read + Write>(
    s: &mut S,
    export: &ExportInfo,
    refusing: &dyn Fn() -> Option<Refusal>,
    tls: Option<&Upgrade<S>>,
) -> Result<Handshake, HandshakeError> {
    let mut neg = Negotiated::default();
    let mut encrypted = false;
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    s.flush()?;
    let mut b4 = [0u8; 4];
    s.read_exact(&mut b4)?;
    let client = u32::from_be_bytes(b4);
    if client & !(CLIENT_FIXED_NEWSTYLE | CLIENT_NO_ZEROES) != 0 {
        return Err(HandshakeError::ClientFlags(client));
    }
    let no_zeroes = client & CLIENT_NO_ZEROES != 0;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let magic = be64(&h[0..8]);
        if magic != IHAVEOPT {
            return Err(HandshakeError::BadMagic(magic));
        }
        let option = be32(&h[8..12]);
        let len = be32(&h[12..16]);
        if len > MAX_DISCARD_BYTES {
            return Err(HandshakeError::OptionTooLong(len));
        }
        if len > MAX_OPTION_BYTES {
            // Read and thrown away, as the reference servers do: the client learns why.
            io::copy(&mut (&mut *s).take(u64::from(len)), &mut io::sink())?;
            if option == OPT_EXPORT_NAME {
                // (EXPORT_NAME has no error reply: the protocol's answer is to close.)
                return Err(HandshakeError::UnknownExport(format!(
                    "(a name of {len} bytes)"
                )));
            }
            let msg =
                format!("an option of {len} bytes; this server reads at most {MAX_OPTION_BYTES}");
            option_reply(s, option, REP_ERR_INVALID, msg.as_bytes())?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data)?;
        if tls.is_some() && !encrypted && option != OPT_STARTTLS && option != OPT_ABORT {
            if option == OPT_EXPORT_NAME {
                return Err(HandshakeError::Refused(
                    "TLS is required, and EXPORT_NAME came before STARTTLS".into(),
                ));
            }
            option_reply(
                s,
                option,
                REP_ERR_TLS_REQD,
                b"TLS is required: send STARTTLS first",
            )?;
            continue;
        }
        if option != OPT_ABORT {
            if let Some(r) = refusing() {
                if option == OPT_EXPORT_NAME {
                    return Err(HandshakeError::Refused(r.message));
                }
                option_reply(s, option, r.reply, r.message.as_bytes())?;
                continue;
            }
        }
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data).into_owned();
                if !name_matches(&name, export) {
                    return Err(HandshakeError::UnknownExport(name));
                }
                let mut r = Vec::with_capacity(10 + 124);
                r.extend_from_slice(&export.size_bytes.to_be_bytes());
                r.extend_from_slice(&export.flags.to_be_bytes());
                if !no_zeroes {
                    r.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&r)?;
                s.flush()?;
                return Ok(Handshake::Go(neg));
            }
            OPT_ABORT => {
                // The client may already have gone; a failed ACK changes nothing.
                let _ = option_reply(s, option, REP_ACK, &[]);
                return Ok(Handshake::Aborted);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    option_reply(s, option, REP_ERR_INVALID, b"LIST takes no data")?;
                    continue;
                }
                let mut r = Vec::with_capacity(4 + export.name.len());
                r.extend_from_slice(&frame_len(export.name.len())?.to_be_bytes());
                r.extend_from_slice(export.name.as_bytes());
                option_reply(s, option, REP_SERVER, &r)?;
                option_reply(s, option, REP_ACK, &[])?;
            }
            OPT_INFO | OPT_GO => {
                let Some((name, _requests)) = parse_info_request(&data) else {
                    option_reply(s, option, REP_ERR_INVALID, b"malformed INFO/GO request")?;
                    continue;
                };
                if let Some((reply, why)) = wrong_name(&name, export) {
                    option_reply(s, option, reply, why.as_bytes())?;
                    continue;
                }
                // Every information type is sent whether asked for or not (the protocol allows
                // it; a client ignores what it does not understand).
                let mut e = Vec::with_capacity(12);
                e.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                e.extend_from_slice(&export.size_bytes.to_be_bytes());
                e.extend_from_slice(&export.flags.to_be_bytes());
                option_reply(s, option, REP_INFO, &e)?;
                let mut n = INFO_NAME.to_be_bytes().to_vec();
                n.extend_from_slice(export.name.as_bytes());
                option_reply(s, option, REP_INFO, &n)?;
                let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
                d.extend_from_slice(export.description.as_bytes());
                option_reply(s, option, REP_INFO, &d)?;
                let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                bs.extend_from_slice(&export.min_block.to_be_bytes());
                bs.extend_from_slice(&export.preferred_block.to_be_bytes());
                bs.extend_from_slice(&export.max_payload.to_be_bytes());
                option_reply(s, option, REP_INFO, &bs)?;
                option_reply(s, option, REP_ACK, &[])?;
                if option == OPT_GO {
                    return Ok(Handshake::Go(neg));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    option_reply(
                        s,
                        option,
                        REP_ERR_INVALID,
                        b"STRUCTURED_REPLY takes no data",
                    )?;
                    continue;
                }
                neg.structured = true;
                option_reply(s, option, REP_ACK, &[])?;
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                if set {
                    // Replaced, even when this one fails.
                    neg.contexts.clear();
                }
                if set && !neg.structured {
                    option_reply(
                        s,
                        option,
                        REP_ERR_INVALID,
                        b"SET_META_CONTEXT needs structured replies first",
                    )?;
                    continue;
                }
                let Some((name, queries)) = parse_meta_request(&data) else {
                    option_reply(
                        s,
                        option,
                        REP_ERR_INVALID,
                        b"malformed meta-context request",
                    )?;
                    continue;
                };
                if let Some((reply, why)) = wrong_name(&name, export) {
                    option_reply(s, option, reply, why.as_bytes())?;
                    continue;
                }
                let chosen = select_contexts(&export.meta_contexts, &queries, set);
                for (i, c) in export.meta_contexts.iter().enumerate() {
                    if !chosen.contains(c) {
                        continue;
                    }
                    // Ids: 1 + the context's place in the offer (0 when listing, as the
                    // protocol asks).
                    let id = if set {
                        u32::try_from(i + 1).unwrap_or(u32::MAX)
                    } else {
                        0
                    };
                    let mut r = id.to_be_bytes().to_vec();
                    r.extend_from_slice(c.as_bytes());
                    option_reply(s, option, REP_META_CONTEXT, &r)?;
                    if set {
                        neg.contexts.push((id, c));
                    }
                }
                option_reply(s, option, REP_ACK, &[])?;
            }
            OPT_STARTTLS => match tls {
                None => option_reply(s, option, REP_ERR_POLICY, b"TLS is not offered by this server (serve --tls-certificates DIR): serve on a unix socket or loopback, or tunnel through ssh")?,
                Some(_) if encrypted => {
                    option_reply(s, option, REP_ERR_INVALID, b"TLS is already on")?;
                }
                Some(_) if !data.is_empty() => {
                    option_reply(s, option, REP_ERR_INVALID, b"STARTTLS takes no data")?;
                }
                Some(upgrade) => {
                    option_reply(s, option, REP_ACK, &[])?;
                    upgrade(s)?;
                    encrypted = true;
                    neg = Negotiated::default();
                }
            },
            _ => {
                let msg = format!("option {option} is not supported by this server");
                option_reply(s, option, REP_ERR_UNSUP, msg.as_bytes())?;
            }
        }
    }
}

/// `u32 name length, name, u32 n, n × (u32 length, query)` — `None` when the lengths do not
/// add up (or a string is not UTF-8).
pub fn parse_meta_request(data: &[u8]) -> Option<(String, Vec<String>)> {
    let mut at = 0usize;
    let string = |at: &mut usize| -> Option<String> {
        let len = be32(data.get(*at..*at + 4)?) as usize;
        if len > MAX_NAME_BYTES {
            return None;
        }
        let s = std::str::from_utf8(data.get(*at + 4..*at + 4 + len)?).ok()?;
        *at += 4 + len;
        Some(s.to_string())
    };
    let name = string(&mut at)?;
    let n = be32(data.get(at..at + 4)?) as usize;
    at += 4;
    // Each query takes 4 bytes at least: a count past that is a lie.
    if n > (data.len() - at) / 4 {
        return None;
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(string(&mut at)?);
    }
    (at == data.len()).then_some((name, queries))
}

/// The offered contexts the queries select: a whole name selects it; listing also takes no
/// query as every context and `NAMESPACE:` as every context of that namespace. Queries for
/// anything else are ignored, as the protocol asks.
fn select_contexts(offered: &[&'static str], queries: &[String], set: bool) -> Vec<&'static str> {
    offered
        .iter()
        .copied()
        .filter(|c| {
            (!set && queries.is_empty())
                || queries
                    .iter()
                    .any(|q| q == c || (!set && q.ends_with(':') && c.starts_with(q.as_str())))
        })
        .collect()
}

/// Why `name` (of an INFO, GO or meta-context request) selects no export: the reply and its
/// message; `None` when it selects this one.
fn wrong_name(name: &str, export: &ExportInfo) -> Option<(u32, String)> {
    if name.contains('\0') {
        return Some((REP_ERR_INVALID, "an export name holds a NUL".into()));
    }
    (!name_matches(name, export)).then(|| {
        (
            REP_ERR_UNKNOWN,
            format!(
                "no export named {name:?} (this server has {:?})",
                export.name
            ),
        )
    })
}

/// The default export ("") and the export's own name both select it.
fn name_matches(name: &str, export: &ExportInfo) -> bool {
    name.is_empty() || name == export.name
}

/// `u32 name length, name, u16 n, n × u16` — `None` when the lengths do not add up.
pub fn parse_info_request(data: &[u8]) -> Option<(String, Vec<u16>)> {
    if data.len() < 6 {
        return None;
    }
    let name_len = be32(&data[0..4]) as usize;
    if name_len > MAX_NAME_BYTES || name_len > data.len() - 6 {
        return None;
    }
    let name = std::str::from_utf8(&data[4..4 + name_len])
        .ok()?
        .to_string();
    let rest = &data[4 + name_len..];
    let n = be16(&rest[0..2]) as usize;
    if rest.len() != 2 + 2 * n {
        return None;
    }
    let requests = rest[2..].chunks_exact(2).map(be16).collect();
    Some((name, requests))
}

fn option_reply<S: Write>(s: &mut S, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut r = Vec::with_capacity(20 + data.len());
    r.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    r.extend_from_slice(&option.to_be_bytes());
    r.extend_from_slice(&kind.to_be_bytes());
    r.extend_from_slice(&frame_len(data.len())?.to_be_bytes());
    r.extend_from_slice(data);
    s.write_all(&r)?;
    s.flush()
}

/// `len` as an option frame's 32-bit length field; an error for anything longer.
fn frame_len(len: usize) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{len} bytes do not fit an option reply"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_a_wrong_magic_is_refused() {
        let r = Request {
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let b = r.encode();
        assert_eq!(Request::parse(&b), Some(r));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Request::parse(&bad), None);
    }

    #[test]
    fn info_requests_with_inconsistent_lengths_are_refused() {
        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"abc");
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        assert_eq!(
            parse_info_request(&d),
            Some(("abc".to_string(), vec![INFO_BLOCK_SIZE]))
        );
        // A name longer than the option, a count that overruns, and a short option.
        let mut long = d.clone();
        long[3] = 200;
        assert_eq!(parse_info_request(&long), None);
        let mut count = d.clone();
        count[8] = 9;
        assert_eq!(parse_info_request(&count), None);
        assert_eq!(parse_info_request(&d[..5]), None);
    }
}
