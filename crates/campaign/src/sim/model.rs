//! What the array must hold: per 4 KiB block, every version it may hold now. Outside a power
//! cut that is one version (the last write's); a write pushes its version when it starts (from
//! then on a cut may land it) and stamps it when it returns; a flush that started at tick `F`
//! makes every version stamped before `F` durable, so older ones are dropped. After a cut the
//! block must read as one of its versions — exactly the durable one if nothing was written
//! since — and the read decides which one it holds.
//!
//! Requests in flight never share a block: a write takes its blocks from every other request,
//! a read shares them only with reads.

use super::{Rule, BLOCK};
use std::collections::BTreeSet;

struct Version {
    data: Vec<u8>,
    /// The tick its write returned at (`None`: in flight, or cut off).
    done: Option<u64>,
}

/// The model of one array's bytes.
pub(super) struct Model {
    blocks: Vec<Vec<Version>>,
    writing: Vec<bool>,
    reading: Vec<u32>,
    /// Blocks a read was refused (they must stay refused until written).
    refused: BTreeSet<usize>,
    clock: u64,
    cap: usize,
}

impl Model {
    /// An array of `cap` zero bytes, all durable.
    pub(super) fn new(cap: usize) -> Model {
        let n = cap.div_ceil(BLOCK);
        Model {
            blocks: (0..n)
                .map(|_| {
                    vec![Version {
                        data: vec![0; BLOCK],
                        done: Some(0),
                    }]
                })
                .collect(),
            writing: vec![false; n],
            reading: vec![0; n],
            refused: BTreeSet::new(),
            clock: 1,
            cap,
        }
    }

    /// The array grew to `cap` bytes (a reshape added members): the new blocks are zero and
    /// durable.
    pub(super) fn grow(&mut self, cap: usize) {
        let n = cap.div_ceil(BLOCK);
        while self.blocks.len() < n {
            self.blocks.push(vec![Version {
                data: vec![0; BLOCK],
                done: Some(0),
            }]);
        }
        self.writing.resize(n, false);
        self.reading.resize(n, 0);
        self.cap = self.cap.max(cap);
    }

    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    pub(super) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The next tick.
    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn span(off: usize, len: usize) -> std::ops::RangeInclusive<usize> {
        off / BLOCK..=(off + len.max(1) - 1) / BLOCK
    }

    /// Take the blocks of a write, if no request has any of them.
    pub(super) fn write_begin(&mut self, off: usize, len: usize) -> bool {
        let r = Self::span(off, len);
        if r.clone().any(|b| self.writing[b] || self.reading[b] > 0) {
            return false;
        }
        r.for_each(|b| self.writing[b] = true);
        true
    }

    /// The write's new versions (pushed at its start: a cut may land them from now on).
    pub(super) fn write_content(&mut self, off: usize, data: &[u8]) {
        for b in Self::span(off, data.len()) {
            let mut v = self.blocks[b].last().expect("a version").data.clone();
            let (lo, hi) = (off.max(b * BLOCK), (off + data.len()).min((b + 1) * BLOCK));
            v[lo - b * BLOCK..hi - b * BLOCK].copy_from_slice(&data[lo - off..hi - off]);
            self.blocks[b].push(Version {
                data: v,
                done: None,
            });
        }
    }

    /// The write returned having written its first `landed` bytes (a refused stripe writes
    /// nothing, nor do the stripes after it).
    pub(super) fn write_done(&mut self, off: usize, len: usize, landed: usize) {
        let now = self.tick();
        for b in Self::span(off, len) {
            self.writing[b] = false;
            if landed > 0 && b * BLOCK < off + landed {
                self.blocks[b].last_mut().expect("a version").done = Some(now);
                self.refused.remove(&b);
            } else {
                self.blocks[b].pop();
            }
        }
    }

    /// Take the blocks of a read, if no write has any of them.
    pub(super) fn read_begin(&mut self, off: usize, len: usize) -> bool {
        let r = Self::span(off, len);
        if r.clone().any(|b| self.writing[b]) {
            return false;
        }
        r.for_each(|b| self.reading[b] += 1);
        true
    }

    pub(super) fn read_done(&mut self, off: usize, len: usize) {
        for b in Self::span(off, len) {
            self.reading[b] = self.reading[b].saturating_sub(1);
        }
    }

    /// A read of `got` at `off` returned: what it broke, if anything.
    pub(super) fn read_ok(&self, off: usize, got: &[u8]) -> Option<(Rule, String)> {
        for b in Self::span(off, got.len()) {
            if self.refused.contains(&b) {
                return Some((
                    Rule::RefusalForgotten,
                    format!("block {b} was refused and is now read without a write since"),
                ));
            }
            let (lo, hi) = (off.max(b * BLOCK), (off + got.len()).min((b + 1) * BLOCK));
            let want =
                &self.blocks[b].last().expect("a version").data[lo - b * BLOCK..hi - b * BLOCK];
            let have = &got[lo - off..hi - off];
            if want != have {
                let wrong = want.iter().zip(have).filter(|(x, y)| x != y).count();
                return Some((
                    Rule::WrongBytes,
                    format!(
                        "{wrong} of {} bytes of block {b} differ from the last write",
                        hi - lo
                    ),
                ));
            }
        }
        None
    }

    /// Bytes of `got` (read at `off`) that differ from the last write.
    pub(super) fn differing(&self, off: usize, got: &[u8]) -> usize {
        Self::span(off, got.len())
            .map(|b| {
                let (lo, hi) = (off.max(b * BLOCK), (off + got.len()).min((b + 1) * BLOCK));
                let want =
                    &self.blocks[b].last().expect("a version").data[lo - b * BLOCK..hi - b * BLOCK];
                want.iter()
                    .zip(&got[lo - off..hi - off])
                    .filter(|(x, y)| x != y)
                    .count()
            })
            .sum()
    }

    /// A read at `off` was refused: whether that is allowed (a block of it was refused before).
    pub(super) fn read_refused(&self, off: usize, len: usize) -> bool {
        Self::span(off, len).any(|b| self.refused.contains(&b))
    }

    /// A flush that started at tick `started` returned.
    pub(super) fn flushed(&mut self, started: u64) {
        for versions in &mut self.blocks {
            if let Some(i) = versions
                .iter()
                .rposition(|v| v.done.is_some_and(|t| t < started))
            {
                versions.drain(..i);
            }
        }
    }

    /// The run was halted: no request of it is in flight any more.
    pub(super) fn end_requests(&mut self) {
        self.writing.iter_mut().for_each(|w| *w = false);
        self.reading.iter_mut().for_each(|r| *r = 0);
    }

    /// Whether a block of the `per_chunk` blocks of block `b`'s chunk was written since the
    /// last flush.
    pub(super) fn chunk_written(&self, b: usize, per_chunk: usize) -> bool {
        let first = b / per_chunk * per_chunk;
        (first..(first + per_chunk).min(self.blocks.len())).any(|x| self.blocks[x].len() > 1)
    }

    /// Block `b` after a cut read as `got` (`None`: refused). `settled`: its stripe was
    /// settled by the resync (without the write journal), so it may be refused if its chunk
    /// was written since the last flush (a data unit the votes find behind is listed whole,
    /// FORMAT.md §2.4); `unchecked`: scheme `none` without the journal, where a torn write mixes
    /// versions unseen.
    pub(super) fn after_cut(
        &self,
        b: usize,
        got: Option<&[u8]>,
        settled: bool,
        unchecked: bool,
    ) -> Option<(Rule, String)> {
        let versions = &self.blocks[b];
        let flushed = versions.len() == 1;
        match got {
            None if settled => None,
            None if flushed => Some((Rule::FlushedRefused, "flushed, refused".into())),
            None => Some((Rule::Refused, "refused outside a settled stripe".into())),
            Some(have) if flushed => (have != versions[0].data).then(|| {
                let wrong = have
                    .iter()
                    .zip(&versions[0].data)
                    .filter(|(x, y)| x != y)
                    .count();
                (Rule::FlushedLost, format!("flushed, {wrong} bytes differ"))
            }),
            Some(have) => (!unchecked && !versions.iter().any(|v| v.data == have)).then(|| {
                (
                    Rule::WrongBytes,
                    format!(
                        "reads as none of its {} versions since the flush",
                        versions.len()
                    ),
                )
            }),
        }
    }

    /// Block `b` now holds `data` (read back after a cut and made durable).
    pub(super) fn set_block(&mut self, b: usize, data: &[u8]) {
        self.blocks[b] = vec![Version {
            data: data.to_vec(),
            done: Some(0),
        }];
        self.refused.remove(&b);
    }

    /// Block `b` is refused.
    pub(super) fn set_refused(&mut self, b: usize) {
        self.refused.insert(b);
    }
}
