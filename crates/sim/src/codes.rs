//! `sim --code`: the RAID-6 codes (Linux md's P+Q, RDP, Tier-code) side by side on a workload,
//! in each code's own block (issue 23; the Tier-code paper's Eq. 7 and 8, per request instead of
//! averaged).
//!
//! A request's bytes are cut into the layout's blocks (a chunk for raid6 and tier, one of the
//! `p - 1` cells of a chunk for rdp, as the Tier-code paper compares them; consecutive blocks
//! run along a stripe's data as in `codes::metrics`), then per stripe piece `[a, b)`:
//! - a write costs `b - a` data blocks plus the parity blocks it touches, and the reads the
//!   cheaper of read-modify-write and reconstruct-write needs (multi-block access, Eq. 7);
//! - a read costs `b - a` blocks; with a member failed (its role in the stripe follows the
//!   left-symmetric rotation, FORMAT.md §2.8) the lost requested blocks are replaced by the
//!   surviving blocks their rebuild reads (degraded read, Eq. 8).
//!
//! Writes are counted as on a healthy array (a degraded write's reconstruction is not modelled).
//! The tables come from `codes::metrics::code_costs`, which enumerates each code's equations.

use crate::Request;
use serde::Serialize;
use stripeguard_codes::metrics::{code_costs, CodeCost};
use stripeguard_plan::{Geometry, Op};

/// One code's totals.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CodeCounts {
    /// `raid6`, `rdp` or `tier`.
    pub code: &'static str,
    /// Bytes of the code's block.
    pub block_bytes: f64,
    /// Blocks read (user reads, RMW/RCW reads, degraded rebuild reads).
    pub reads: u64,
    /// Blocks written (data and parity).
    pub writes: u64,
    /// Of `reads`: surviving blocks read only to rebuild lost ones (a failed member).
    pub degraded_extra_reads: u64,
    /// Of `writes`: parity blocks.
    pub parity_writes: u64,
}

impl CodeCounts {
    /// Bytes moved (reads and writes).
    pub fn bytes(&self) -> f64 {
        (self.reads + self.writes) as f64 * self.block_bytes
    }
}

/// The codes' counters over one geometry (k data + 2).
pub struct CodeSim {
    geometry: Geometry,
    failed: Option<usize>,
    lanes: Vec<(CodeCost, CodeCounts)>,
}

impl CodeSim {
    /// The three codes for geometry `g` (which must have two parity members), with physical
    /// member `failed` lost (or none).
    pub fn new(g: Geometry, failed: Option<usize>) -> Result<CodeSim, String> {
        if g.m != 2 {
            return Err(format!(
                "--code compares RAID-6 codes: the array needs two parity members, not {}",
                g.m
            ));
        }
        if let Some(f) = failed {
            if f >= g.n() {
                return Err(format!(
                    "--failed-member {f} is not a member of a {}-member array (0 to {})",
                    g.n(),
                    g.n() - 1
                ));
            }
        }
        let costs = code_costs(g.n()).map_err(|e| e.to_string())?;
        let lanes = costs
            .into_iter()
            .map(|c| {
                let counts = CodeCounts {
                    code: c.code,
                    block_bytes: g.chunk_bytes as f64 / c.blocks_per_chunk as f64,
                    ..CodeCounts::default()
                };
                (c, counts)
            })
            .collect();
        Ok(CodeSim {
            geometry: g,
            failed,
            lanes,
        })
    }

    /// Count one request (within capacity).
    pub fn replay(&mut self, r: Request) {
        if r.len == 0 {
            return;
        }
        let g = self.geometry;
        let c = g.chunk_bytes as u128;
        for (cost, counts) in &mut self.lanes {
            let bpc = cost.blocks_per_chunk as u128;
            let nd = cost.data_blocks as u64;
            // Block numbers are byte offsets scaled by `bpc / c`: blocks per chunk (1, or an
            // array code's rows, a few dozen) over its bytes (512 or more), so they fit a u64.
            const FITS: &str = "block numbers fit a u64";
            let first = u64::try_from(r.offset as u128 * bpc / c).expect(FITS);
            let end = u64::try_from(((r.offset + r.len) as u128 * bpc).div_ceil(c)).expect(FITS);
            let mut lbn = first;
            while lbn < end {
                let stripe = lbn / nd;
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "both are at most nd, the data blocks of a stripe (a usize)"
                )]
                let (a, b) = (
                    (lbn - stripe * nd) as usize,
                    ((end - stripe * nd).min(nd)) as usize,
                );
                match r.op {
                    Op::Write => {
                        let (reads, writes) = cost.write(a, b);
                        counts.reads += reads as u64;
                        counts.writes += writes as u64;
                        counts.parity_writes += (writes - (b - a)) as u64;
                    }
                    Op::Read => {
                        let role = self
                            .failed
                            .map(|f| (0..g.n()).find(|&p| g.member_of(stripe, p) == f))
                            .and_then(|p| p);
                        let reads = cost.read(a, b, role);
                        counts.reads += reads as u64;
                        let healthy = cost.read(a, b, None);
                        counts.degraded_extra_reads += reads.saturating_sub(healthy) as u64;
                    }
                }
                lbn = stripe * nd + b as u64;
            }
        }
    }

    /// The totals, raid6 first.
    pub fn report(&self) -> Vec<CodeCounts> {
        self.lanes.iter().map(|(_, c)| c.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g() -> Geometry {
        Geometry {
            k: 4,
            m: 2,
            chunk_bytes: 4096,
            stripes: 64,
        }
    }

    fn req(op: Op, offset: u64, len: u64) -> Request {
        Request { op, offset, len }
    }

    #[test]
    fn a_one_chunk_write_costs_what_each_layout_says() {
        let mut s = CodeSim::new(g(), None).unwrap();
        s.replay(req(Op::Write, 0, 4096));
        let r = s.report();
        // raid6: one data block, P and Q, read-modify-write reads the three.
        assert_eq!((r[0].code, r[0].reads, r[0].writes), ("raid6", 3, 3));
        // tier: the same shape (a block is a chunk, P and Q are blocks).
        assert_eq!((r[2].code, r[2].writes), ("tier", 3));
        // rdp: a chunk is p - 1 = 4 cells; its rows' P cells and the diagonals they and the
        // written cells lie on.
        assert_eq!(r[1].code, "rdp");
        assert!(r[1].writes > 4 + 4, "{:?}", r[1]);
    }

    #[test]
    fn a_failed_member_costs_reads_only_where_it_is_read() {
        let mut healthy = CodeSim::new(g(), None).unwrap();
        let mut degraded = CodeSim::new(g(), Some(0)).unwrap();
        // 1 KiB reads (an RDP cell at p = 5) of every place in every stripe: where the lost
        // member holds what is asked, the rebuild reads more than was asked. (A read of a whole
        // stripe, or of a whole RDP row, costs nothing extra: P stands in for the lost block.)
        for s in 0..12u64 {
            for i in 0..16 {
                let r = req(Op::Read, s * 4 * 4096 + i * 1024, 1024);
                healthy.replay(r);
                degraded.replay(r);
            }
        }
        for (h, d) in healthy.report().iter().zip(degraded.report()) {
            assert_eq!(h.degraded_extra_reads, 0);
            assert!(d.degraded_extra_reads > 0, "{}", d.code);
            assert!(d.reads > h.reads, "{}", d.code);
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mut g5 = g();
        g5.m = 1;
        assert!(CodeSim::new(g5, None).is_err());
        assert!(CodeSim::new(g(), Some(6)).is_err());
    }
}
