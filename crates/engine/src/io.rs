//! Reads and writes: split into per-stripe pieces, plan each with the shared planner, execute.

use crate::repair::Image;
use crate::{Array, EngineError};
use stripeguard_codes::ChunkUpdate;
use stripeguard_disk::AlignedBuf;
use stripeguard_integrity::{diagnose, Diagnosis, MirrorKind, Scheme, UnitView};
use stripeguard_plan::{Mode, Op, PiecePlan, Purpose};

/// The units one piece has in hand: read from disk, or taken from a repaired image.
struct Units {
    units: Vec<Option<AlignedBuf>>,
    erased: Vec<bool>,
    truth: Vec<Option<u64>>,
    data_crc: Vec<Option<u32>>,
}

impl Array {
    /// An error unless `len` bytes at `offset` lie within the array (no overflow on any input).
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), EngineError> {
        let capacity = self.capacity_bytes();
        match offset.checked_add(len) {
            Some(end) if end <= capacity => Ok(()),
            _ => Err(EngineError::OutOfRange {
                offset,
                len,
                capacity,
            }),
        }
    }

    /// Call `f(stripe, piece_offset, piece_len, buffer_offset)` for each stripe piece.
    fn for_pieces(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, u64, u64, usize) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let sd = self.geometry.stripe_data_bytes();
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let stripe = pos / sd;
            let piece_end = ((stripe + 1) * sd).min(end);
            f(stripe, pos, piece_end - pos, (pos - offset) as usize)?;
            pos = piece_end;
        }
        Ok(())
    }

    fn plan_one(&self, op: Op, offset: u64, len: u64) -> PiecePlan {
        let mut out = None;
        self.planner
            .lock()
            .expect("lock")
            .plan(op, offset, len, |p| out = Some(p.clone()));
        out.expect("one piece")
    }

    /// Read `buf.len()` bytes at array byte `offset`. Every byte returned passed the scheme's
    /// checks (or was rebuilt and re-checked).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        self.check_range(offset, buf.len() as u64)?;
        self.for_pieces(offset, buf.len() as u64, |stripe, off, len, at| {
            let _guard = self.locks[stripe as usize % self.locks.len()]
                .lock()
                .expect("lock");
            let plan = self.plan_one(Op::Read, off, len);
            let units = self.unverified_on_error(stripe, self.gather(&plan))?;
            let c = self.geometry.chunk_bytes;
            let mut o = at;
            for i in plan.first..=plan.last {
                let (lo, hi) = plan.chunk_range(i, c);
                let chunk = units.units[i].as_ref().expect("read");
                buf[o..o + (hi - lo) as usize].copy_from_slice(&chunk[lo as usize..hi as usize]);
                o += (hi - lo) as usize;
            }
            self.recycle(units.units.into_iter().flatten());
            Ok(())
        })
    }

    /// Write `data` at array byte `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        if !self.writable {
            return Err(EngineError::Config(
                "the array was assembled read-only".into(),
            ));
        }
        self.check_range(offset, data.len() as u64)?;
        self.for_pieces(offset, data.len() as u64, |stripe, off, len, at| {
            let _guard = self.locks[stripe as usize % self.locks.len()]
                .lock()
                .expect("lock");
            let _claim = self.intent_begin(stripe)?;
            // Degraded: save the missing member's chunk before the parity changes.
            let base = stripe * self.geometry.stripe_data_bytes();
            let _saved = self.unverified_on_error(
                stripe,
                self.save_missing(stripe, off - base, off - base + len),
            )?;
            let plan = self.plan_one(Op::Write, off, len);
            let units = self.unverified_on_error(stripe, self.gather(&plan))?;
            let done = self.apply_write(&plan, units, &data[at..at + len as usize]);
            self.unverified_on_error(stripe, done)
        })
    }

    /// The planner marks the chunks a plan reads as read (subsequent-read state) when it plans;
    /// a piece that then fails verified nothing, so every data chunk of its stripe goes back to
    /// first-read state and the next access cross-checks it again.
    fn unverified_on_error<T>(
        &self,
        stripe: u64,
        r: Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        if r.is_err() {
            let mut planner = self.planner.lock().expect("lock");
            for i in 0..self.geometry.k {
                let id = self.geometry.data_chunk_id(stripe, i);
                planner.map_mut().mark_written(id);
            }
        }
        r
    }

    /// Read the plan's units and check them; on any failed check or erasure, repair the stripe
    /// and take the units from the repaired image.
    fn gather(&self, plan: &PiecePlan) -> Result<Units, EngineError> {
        let g = self.geometry;
        let n = g.n();
        let c = g.chunk_bytes as usize;
        let scheme = self.sb.scheme;
        let mut units: Vec<Option<AlignedBuf>> = (0..n).map(|_| None).collect();
        let mut erased = vec![false; n];
        let mut wanted: Vec<usize> = Vec::with_capacity(plan.reads.len());
        for io in &plan.reads {
            if !wanted.contains(&io.pos) {
                wanted.push(io.pos);
            }
        }
        for (&pos, got) in wanted.iter().zip(self.read_units(plan.stripe, &wanted)?) {
            match got {
                Some(u) => units[pos] = Some(u),
                None => erased[pos] = true,
            }
        }
        let diag: Diagnosis = {
            let views: Vec<UnitView<'_>> = (0..n)
                .map(|p| match (&units[p], erased[p]) {
                    (_, true) => UnitView::Erased,
                    (Some(b), _) => UnitView::Read {
                        chunk: &b[..c],
                        appendix: &b[c..],
                    },
                    (None, _) => UnitView::NotRead,
                })
                .collect();
            diagnose(scheme, g.k, &views, |p| self.identity(plan.stripe, p))
        };
        if diag.is_clean() && !erased.iter().any(|&e| e) {
            return Ok(Units {
                units,
                erased,
                truth: diag.truth,
                data_crc: diag.data_crc,
            });
        }
        let mut suspects: Vec<(usize, &'static str, String)> = diag
            .findings
            .iter()
            .map(|f| (f.position, f.kind.name(), crate::repair::evidence(&f.kind)))
            .collect();
        for (p, &e) in erased.iter().enumerate() {
            if e && suspects.iter().all(|s| s.0 != p) {
                suspects.push((p, "read-error", "read failed".into()));
            }
        }
        let Image { units: full, truth } = self.repair_stripe(plan.stripe, &suspects)?;
        let data_crc = if scheme.mirror() == Some(MirrorKind::Checksum) {
            truth.iter().map(|t| t.map(|v| v as u32)).collect()
        } else {
            vec![None; g.k]
        };
        Ok(Units {
            units: full.into_iter().map(Some).collect(),
            erased: vec![false; n],
            truth,
            data_crc,
        })
    }

    fn apply_write(
        &self,
        plan: &PiecePlan,
        mut have: Units,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let g = self.geometry;
        let (k, m) = (g.k, g.m);
        let c = g.chunk_bytes as usize;
        let scheme = self.sb.scheme;
        let unit = self.unit_bytes() as usize;
        let mode = plan.mode.expect("planned");
        let (first, last) = (plan.first, plan.last);
        debug_assert!(!have.erased.iter().any(|&e| e));

        // Metadata known before the data: the truth about untouched chunks, and for versioned
        // schemes the new version / sequence of the touched ones.
        let mirror = scheme.mirror();
        let mut tags: Vec<u64> = (0..k)
            .map(|i| {
                have.truth[i]
                    .or_else(|| have.data_crc.get(i).copied().flatten().map(u64::from))
                    .unwrap_or(0)
            })
            .collect();
        if mirror == Some(MirrorKind::Version) {
            let seq = if scheme == Scheme::HybridSeq {
                Some(self.next_sequence()?)
            } else {
                None
            };
            for t in &mut tags[first..=last] {
                *t = seq.unwrap_or(*t + 1);
            }
        }
        // Chunk i's checksum-mirroring appendix holds the CRC of chunk i - 1; a full stripe wraps,
        // so its first chunk is sealed last.
        let deferred = mirror == Some(MirrorKind::Checksum) && mode == Mode::FullStripe && k > 1;

        // New data units (chunk + room for the appendix), each sealed right after it is built,
        // while it is still in cache.
        let mut new: Vec<AlignedBuf> = Vec::with_capacity(last + 1 - first);
        let mut first_crc: Option<stripeguard_checksum::Crc32c> = None;
        let mut at = 0usize;
        for i in first..=last {
            let (lo, hi) = plan.chunk_range(i, c as u64);
            let (lo, hi) = (lo as usize, hi as usize);
            let mut u = self.unit_buf();
            if lo != 0 || hi != c {
                let old = have.units[i]
                    .as_ref()
                    .expect("partial chunks are read (merge/old/version)");
                u.copy_from_slice(old);
            }
            u[lo..hi].copy_from_slice(&data[at..at + hi - lo]);
            at += hi - lo;
            if deferred && i == first {
                // Its CRC is needed by the next chunk now; its appendix (which needs the last
                // chunk's CRC) is finished from this state at the end without a second pass.
                let mut st = stripeguard_checksum::Crc32c::new();
                st.update(&u[..c]);
                tags[i] = st.finish() as u64;
                first_crc = Some(st);
            } else if mirror.is_some() {
                let (chunk, sector) = u.split_at_mut(c);
                let crc = self.seal(plan.stripe, i, &tags, chunk, sector);
                if mirror == Some(MirrorKind::Checksum) {
                    tags[i] = crc as u64;
                }
            }
            new.push(u);
        }
        if let Some(st) = first_crc {
            let a = self.appendix(plan.stripe, first, &tags);
            a.encode_continuing(&st, &mut new[0][c..]);
        }

        // Parity.
        let mut parity: Vec<AlignedBuf> = Vec::with_capacity(m);
        match mode {
            Mode::Rmw => {
                for j in 0..m {
                    parity.push(have.units[k + j].take().expect("RMW reads parity"));
                }
                let changes: Vec<ChunkUpdate<'_>> = (first..=last)
                    .map(|i| ChunkUpdate {
                        index: i,
                        old: &have.units[i].as_ref().expect("RMW reads old data")[..c],
                        new: &new[i - first][..c],
                    })
                    .collect();
                let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
                self.code.update(&changes, &mut views)?;
            }
            _ => {
                for _ in 0..m {
                    parity.push(self.unit_buf());
                }
                let datas: Vec<&[u8]> = (0..k)
                    .map(|i| {
                        if (first..=last).contains(&i) {
                            &new[i - first][..c]
                        } else {
                            &have.units[i].as_ref().expect("RCW reads untouched data")[..c]
                        }
                    })
                    .collect();
                let mut views: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..c]).collect();
                self.code.encode(&datas, &mut views)?;
            }
        }

        // Parity metadata, the buddy's copy, then the writes.
        let mut buddy: Option<(usize, u64, AlignedBuf)> = None;
        if mirror.is_some() {
            for (j, p) in parity.iter_mut().enumerate() {
                let (chunk, sector) = p.split_at_mut(c);
                self.seal(plan.stripe, k + j, &tags, chunk, sector);
            }
            for w in &plan.writes {
                match w.purpose {
                    Purpose::BuddyAppendix => {
                        let mut sector = AlignedBuf::zeroed(unit - c, self.mem_align);
                        self.seal(plan.stripe, w.pos, &tags, &[], &mut sector);
                        buddy = Some((w.pos, c as u64, sector));
                    }
                    Purpose::Buddy => {
                        let mut u = have.units[w.pos].take().expect("the buddy was read");
                        let (chunk, sector) = u.split_at_mut(c);
                        self.seal(plan.stripe, w.pos, &tags, chunk, sector);
                        buddy = Some((w.pos, 0, u));
                    }
                    _ => {}
                }
            }
        }
        let mut writes: Vec<(usize, u64, &[u8])> = Vec::with_capacity(plan.writes.len());
        if let Some((pos, at, bytes)) = &buddy {
            writes.push((*pos, *at, bytes));
        }
        writes.extend((first..=last).zip(&new).map(|(i, u)| (i, 0, &u[..])));
        writes.extend(parity.iter().enumerate().map(|(j, p)| (k + j, 0, &p[..])));
        self.write_units(plan.stripe, &writes)?;
        drop(writes);
        self.recycle(
            new.into_iter()
                .chain(parity)
                .chain(have.units.into_iter().flatten()),
        );
        Ok(())
    }
}

impl Array {
    /// Read every unit of `stripe`, diagnose with every unit voting, and repair what is wrong
    /// (the scrub of one stripe). Returns the number of units found wrong.
    pub fn scrub_stripe(&self, stripe: u64) -> Result<u64, EngineError> {
        if stripe >= self.geometry.stripes {
            return Err(EngineError::OutOfRange {
                offset: stripe,
                len: 1,
                capacity: self.geometry.stripes,
            });
        }
        let _guard = self.locks[stripe as usize % self.locks.len()]
            .lock()
            .expect("lock");
        let before = self.counters().located;
        self.repair_stripe(stripe, &[])?;
        Ok(self.counters().located - before)
    }
}
