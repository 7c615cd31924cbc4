//! The array as an NBD export (the server is [`crate::server`]): every READ goes through
//! the engine's checks (a silently wrong chunk is repaired and the client gets the right bytes;
//! an unrecoverable stripe is `EIO` for that request only), FLUSH and FUA are the engine's flush
//! (every completed write durable, on every member), and TRIM and WRITE_ZEROES write zeros
//! through the engine, so parity, appendices and versions stay consistent and the range reads
//! back as zeros (FORMAT.md §4).

use crate::server::{Export, ExportError};
use std::sync::Arc;
use stripeguard_engine::{usize_of, Array, EngineError};
use stripeguard_nbd::proto;

/// The engine's array as an NBD export.
pub struct ArrayExport {
    array: Arc<Array>,
    zeros: Vec<u8>,
}

impl ArrayExport {
    pub fn new(array: Arc<Array>) -> ArrayExport {
        // Zeroing goes in whole stripes where it can (no read-modify-write), a few MiB a step.
        let stripe = usize_of(array.geometry().stripe_data_bytes());
        let step = stripe * (4usize << 20).div_ceil(stripe);
        ArrayExport {
            array,
            zeros: vec![0u8; step],
        }
    }

    pub fn array(&self) -> &Arc<Array> {
        &self.array
    }

    /// The array back (to close it once no request can come any more).
    pub fn into_array(self) -> Arc<Array> {
        self.array
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
        self.array.capacity_bytes()
    }

    fn writable(&self) -> bool {
        self.array.is_writable()
    }

    fn block_sizes(&self) -> (u32, u32) {
        // The engine takes any byte range, but clients are asked for whole sectors; a request of
        // a whole chunk (a power of two) avoids reading the rest of the chunk first.
        let chunk = self.array.geometry().chunk_bytes;
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
        let g = self.array.geometry();
        format!(
            "stripeguard array, {}+{} members, {} KiB chunks, scheme {}",
            g.k,
            g.m,
            g.chunk_bytes / 1024,
            self.array.scheme().name()
        )
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.array.read(offset, buf).map_err(nbd_error)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.array.write(offset, data).map_err(nbd_error)
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.array.flush().map_err(nbd_error)
    }

    /// `base:allocation`: every byte is allocated (nothing is a hole yet, FORMAT.md §4).
    /// `stripeguard:integrity`: ranges listed untrusted (§2.7), and everything degraded while
    /// a member is out.
    fn block_status(
        &self,
        context: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, u32)>, ExportError> {
        if context != proto::CONTEXT_INTEGRITY {
            return Ok(vec![(len, 0)]);
        }
        let degraded = if self.array.health().iter().any(|h| h.failed.is_some()) {
            proto::INTEGRITY_DEGRADED
        } else {
            0
        };
        let g = self.array.geometry();
        let (sd, c) = (g.stripe_data_bytes(), g.chunk_bytes);
        let end = offset + len;
        // Listed ranges as array bytes, in order, merged where they touch.
        let mut listed: Vec<(u64, u64)> = self
            .array
            .untrusted()
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

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            // Up to the next multiple of the step, so later steps are stripe-aligned.
            let step = self.zeros.len() as u64;
            let n = (step - pos % step).min(end - pos);
            self.array
                .write(pos, &self.zeros[..usize_of(n)])
                .map_err(nbd_error)?;
            pos += n;
        }
        Ok(())
    }
}
