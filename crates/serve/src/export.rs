//! The array as an NBD export (the server is [`crate::server`]): every READ goes through
//! the engine's checks (a silently wrong chunk is repaired and the client gets the right bytes;
//! an unrecoverable stripe is `EIO` for that request only), FLUSH and FUA are the engine's flush
//! (every completed write durable, on every member), and TRIM and WRITE_ZEROES are the engine's
//! zeroing: whole stripes become zero stripes (metadata, FORMAT.md §2.7) on an array that keeps
//! them, the rest is written as zeros through the engine, so parity, appendices and versions
//! stay consistent and the range reads back as zeros (FORMAT.md §4). `base:allocation` reports
//! zero stripes as holes that read as zeros.
//!
//! The array is the holder's [`HeldArray`]: while an online reshape runs (`grow --add` asked of
//! the holder) requests go through both geometries, the export's size stays the old one until
//! a client connects again, and nothing is reported as a hole (everything is data).

use crate::server::{Export, ExportError};
use std::sync::Arc;
use stripeguard_engine::{Array, EngineError, HeldArray};
use stripeguard_nbd::proto;

/// The engine's array as an NBD export.
pub struct ArrayExport {
    held: Arc<HeldArray>,
}

impl ArrayExport {
    pub fn new(held: Arc<HeldArray>) -> ArrayExport {
        ArrayExport { held }
    }

    /// The array as its control plane sees it now.
    pub fn array(&self) -> Arc<Array> {
        self.held.array()
    }

    pub fn held(&self) -> &Arc<HeldArray> {
        &self.held
    }
}

fn nbd_error(e: EngineError) -> ExportError {
    let errno = match &e {
        EngineError::OutOfRange { .. } => proto::EINVAL,
        EngineError::Config(_) => proto::EPERM,
        _ => proto::EIO,
    };
    ExportError {
        errno,
        message: e.to_string(),
    }
}

impl Export for ArrayExport {
    fn size_bytes(&self) -> u64 {
        self.held.capacity_bytes()
    }

    fn writable(&self) -> bool {
        self.held.is_writable()
    }

    fn block_sizes(&self) -> (u32, u32) {
        // The engine takes any byte range, but clients are asked for whole sectors; a request of
        // a whole chunk (a power of two) avoids reading the rest of the chunk first.
        let chunk = self.held.array().geometry().chunk_bytes;
        let preferred = if chunk.is_power_of_two() {
            chunk.clamp(4096, u64::from(proto::MAX_PAYLOAD_BYTES))
        } else {
            4096
        };
        (
            512,
            u32::try_from(preferred).unwrap_or(proto::MAX_PAYLOAD_BYTES),
        )
    }

    fn description(&self) -> String {
        let array = self.held.array();
        let g = array.geometry();
        format!(
            "stripeguard array, {}+{} members, {} KiB chunks, scheme {}",
            g.k,
            g.m,
            g.chunk_bytes / 1024,
            array.scheme().name()
        )
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.held.read(offset, buf).map_err(nbd_error)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.held.write(offset, data).map_err(nbd_error)
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.held.flush().map_err(nbd_error)
    }

    /// `base:allocation`: zero stripes are holes that read as zeros, everything else data
    /// (FORMAT.md §4). `stripeguard:integrity`: ranges listed untrusted (§2.7), and everything
    /// degraded while a member is out.
    fn block_status(
        &self,
        context: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u32)>, ExportError> {
        if context != proto::CONTEXT_INTEGRITY {
            return Ok(self.allocation(offset, len));
        }
        let array = self.held.array();
        let degraded = if array.health().iter().any(|h| h.failed.is_some()) {
            proto::INTEGRITY_DEGRADED
        } else {
            0
        };
        let Some(array) = self.held.plain() else {
            // Stripe numbers are two geometries' now: only what holds for every byte.
            return Ok(vec![(len, degraded)]);
        };
        let g = array.geometry();
        let (sd, c) = (g.stripe_data_bytes(), g.chunk_bytes);
        let end = offset + len;
        // Listed ranges as array bytes, in order, merged where they touch.
        let mut listed: Vec<(u64, u64)> = array
            .untrusted_within(offset / sd, end.div_ceil(sd))
            .iter()
            .map(|r| {
                let lo = r.stripe * sd + u64::from(r.position) * c + u64::from(r.offset);
                (lo, lo + u64::from(r.len))
            })
            .filter(|&(lo, hi)| hi > offset && lo < end)
            .collect();
        listed.sort_unstable();
        let mut bad: Vec<(u64, u64)> = Vec::new();
        for (lo, hi) in listed {
            match bad.last_mut() {
                Some(last) if last.1 >= lo => last.1 = last.1.max(hi),
                _ => bad.push((lo, hi)),
            }
        }
        let mut out = Vec::new();
        let mut at = offset;
        for (lo, hi) in bad {
            let (lo, hi) = (lo.max(offset), hi.min(end));
            if lo > at {
                out.push((lo - at, degraded));
            }
            out.push((hi - lo, degraded | proto::INTEGRITY_UNTRUSTED));
            at = hi;
        }
        if at < end {
            out.push((end - at, degraded));
        }
        Ok(out)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<(), ExportError> {
        if may_trim {
            self.held.zero(offset, len)
        } else {
            // NO_HOLE: the client wants the bytes allocated; they are written.
            self.held.write_zeros(offset, len)
        }
        .map_err(nbd_error)
    }

    /// Bytes all in zero stripes (FORMAT.md §2.7) read as zeros without member I/O.
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        matches!(self.allocation(offset, len)[..], [(_, flags)] if flags & proto::STATE_HOLE != 0)
    }

    fn fast_zero(&self, offset: u64, len: u64, may_trim: bool) -> bool {
        may_trim
            && self
                .held
                .plain()
                .is_some_and(|a| a.zero_is_cheap(offset, len))
    }
}

impl ArrayExport {
    /// `base:allocation` extents of `len > 0` bytes at `offset`: zero stripes `HOLE | ZERO`,
    /// the rest 0 (data).
    pub fn allocation(&self, offset: u64, len: u64) -> Vec<(u64, u32)> {
        let Some(array) = self.held.plain() else {
            return vec![(len, 0)];
        };
        let sd = array.geometry().stripe_data_bytes();
        let end = offset + len;
        let mut out: Vec<(u64, u32)> = Vec::new();
        let mut push = |n: u64, flags: u32| match out.last_mut() {
            Some(last) if last.1 == flags => last.0 += n,
            _ => out.push((n, flags)),
        };
        let mut at = offset;
        for (lo, hi) in array.zero_stripes_within(offset / sd, end.div_ceil(sd)) {
            let (lo, hi) = ((lo * sd).max(offset), (hi * sd).min(end));
            if lo > at {
                push(lo - at, 0);
            }
            push(hi - lo, proto::STATE_HOLE | proto::STATE_ZERO);
            at = hi;
        }
        if at < end {
            push(end - at, 0);
        }
        out
    }
}
