//! Reshape planning (issue 39, "Arrays that grow online"): the order in which an array's data
//! moves from one geometry to another **in place**, so that a power cut at any moment leaves
//! every chunk readable from exactly one known place. Pure: the engine executes the steps; the
//! tests here play every step against a model of the members, cutting power inside each one.
//!
//! ## The model
//! Data is a sequence of `D = S·k` chunks (`S` stripes of `k` data chunks: the old geometry).
//! The new geometry holds `k'` data chunks per stripe, so it needs `S' = ⌈D / k'⌉` stripes. A
//! stripe is one physical position on every member (all members the same size, `P` physical
//! stripes each; members added by the reshape are blank). New stripe `t` lives at physical
//! stripe `t + δ`; old stripe `s` at `s` (the old data starts at physical stripe 0).
//!
//! Chunk `x` is at old stripe `x / k` before it moves and at new stripe `x / k'` after.
//! Writing new stripe `t` overwrites physical stripe `t + δ` on every member, destroying the
//! old stripe there. That is safe only when **every chunk of the destroyed old stripe is
//! already durable in a committed new stripe** (or in the backup, below): then no chunk has its
//! only copy overwritten, and the new stripes being written read their chunks from old stripes
//! that are all intact.
//!
//! ## Direction
//! - **Forward** when `k' > k` (data members added), `δ = 0`: new stripes `0, 1, …` in order,
//!   the committed region `[0, done)`. Old stripe `s ≥ a` (destroyed by writing new stripe `s`)
//!   holds chunks `[s·k, (s+1)·k)`, committed once `(s+1)·k ≤ a·k'`: from a committed prefix of
//!   `a` new stripes a batch may write new stripes `[a, ⌊a·k'/k⌋)` without any other copy. At
//!   `a = 0` that is nothing: the first new stripes (the **critical section**, md's name) are
//!   written only after their chunks are copied to a backup area (on the added members, in
//!   physical stripes the new layout never uses until the reshape ends, since `S' < P` there),
//!   and reads of those chunks go to the backup until their new stripes are committed.
//! - **Backward** when `k' ≤ k` (a level change at the same `k`, or fewer data chunks per
//!   stripe): `δ = P − S' ≥ 1` spare stripes at the end of the members (grow them first), new
//!   stripes `S'−1, S'−2, …`, the committed region `[S'−done, S')`. Writing new stripe `t`
//!   destroys old stripe `t + δ`, whose chunks are committed above once `(t+δ)·k ≥ a·k'` (`a`
//!   the lowest committed new stripe): batches of at least `δ` stripes, never a backup. The
//!   data then starts at physical stripe `δ` (the superblock's data offset).
//!
//! `locate` answers where a chunk is at any committed point, which the engine uses to serve
//! reads and writes during the reshape (the window's stripes are locked while a step runs).

use std::ops::Range;

/// How an in-place reshape proceeds (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshape {
    /// Data chunks per stripe, before and after.
    pub old_k: u64,
    pub new_k: u64,
    /// Stripes of the old geometry (all hold data) and of the new one.
    pub old_stripes: u64,
    pub new_stripes: u64,
    /// Physical stripes per member.
    pub physical: u64,
    /// The new stripes' physical offset (`δ`): 0 forward, the spare stripes backward.
    pub offset: u64,
    pub backward: bool,
    /// Forward: the chunks `[0, backup)` go through the backup area first (the critical
    /// section); 0 backward.
    pub backup_chunks: u64,
}

/// The next thing a reshape does from a committed point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Copy the chunks `[0, n)` (still in their old stripes) to the backup area, durably,
    /// before any new stripe is written (forward only, first).
    Backup(u64),
    /// Write these new stripes whole (each read from its sources, which stay intact), then
    /// commit them (the durable progress moves past them).
    Write(Range<u64>),
    /// Every new stripe is committed.
    Done,
}

/// Where a chunk is at a committed point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In new stripe `stripe` (physical stripe `stripe + offset`), data position `index`.
    New { stripe: u64, index: u64 },
    /// Still in old stripe `stripe`, data position `index`.
    Old { stripe: u64, index: u64 },
    /// In the backup area, its `n`-th chunk.
    Backup(u64),
}

impl Reshape {
    /// Plan moving `old_stripes` stripes of `old_k` data chunks to `new_k` per stripe on
    /// members of `physical` stripes. Refused, saying why, when the new layout does not fit.
    pub fn plan(
        old_k: u64,
        new_k: u64,
        old_stripes: u64,
        physical: u64,
    ) -> Result<Reshape, String> {
        if old_k == 0 || new_k == 0 || old_stripes == 0 {
            return Err("a reshape needs data chunks and stripes".into());
        }
        if old_stripes > physical {
            return Err(format!(
                "{old_stripes} stripes of data on members of {physical} stripes"
            ));
        }
        let chunks = old_stripes
            .checked_mul(old_k)
            .ok_or("the array is too large to reshape")?;
        let new_stripes = chunks.div_ceil(new_k);
        if new_k > old_k {
            // The critical section: the smallest a with ⌊a·k'/k⌋ > a, i.e. a·(k'−k) ≥ k.
            let critical = old_k.div_ceil(new_k - old_k).min(new_stripes);
            return Ok(Reshape {
                old_k,
                new_k,
                old_stripes,
                new_stripes,
                physical,
                offset: 0,
                backward: false,
                backup_chunks: (critical * new_k).min(chunks),
            });
        }
        if new_stripes >= physical {
            return Err(format!(
                "{new_stripes} stripes of {new_k} data chunks need at least {} stripes per member (they have {physical}): grow the members first",
                new_stripes + 1
            ));
        }
        Ok(Reshape {
            old_k,
            new_k,
            old_stripes,
            new_stripes,
            physical,
            offset: physical - new_stripes,
            backward: true,
            backup_chunks: 0,
        })
    }

    /// Data chunks moved.
    pub fn chunks(&self) -> u64 {
        self.old_stripes * self.old_k
    }

    /// The old stripes that hold new stripe `t`'s chunks.
    pub fn sources(&self, t: u64) -> Range<u64> {
        let first = t * self.new_k;
        let end = ((t + 1) * self.new_k).min(self.chunks());
        first / self.old_k..end.div_ceil(self.old_k)
    }

    /// The next step after `done` new stripes are committed (`backed_up`: the backup holds
    /// the critical section). A batch is at most `max_batch` stripes.
    pub fn next(&self, done: u64, backed_up: bool, max_batch: u64) -> Step {
        let max_batch = max_batch.max(1);
        if done >= self.new_stripes {
            return Step::Done;
        }
        if self.backward {
            // Committed [a, S'); writing t destroys old stripe t + δ, safe once its chunks are
            // all at or above a·k' (or it holds no data).
            let a = self.new_stripes - done;
            let mut t = a;
            while t > 0 && a - t < max_batch {
                let o = t - 1 + self.offset;
                if o < self.old_stripes && o * self.old_k < a * self.new_k {
                    break;
                }
                t -= 1;
            }
            debug_assert!(t < a, "δ ≥ 1 always allows one stripe");
            return Step::Write(t..a);
        }
        let a = done;
        if !backed_up && self.backup_chunks > a * self.new_k {
            return Step::Backup(self.backup_chunks);
        }
        // Committed [0, a) plus the backup: old stripe s may go once its chunks are committed
        // or backed up.
        let covered = (a * self.new_k).max(if backed_up { self.backup_chunks } else { 0 });
        let mut b = a;
        while b < self.new_stripes && b - a < max_batch {
            let o = b; // δ = 0
            if o < self.old_stripes && (o + 1) * self.old_k > covered {
                break;
            }
            b += 1;
        }
        if b == a {
            // Only reached when a chunk of old stripe a is neither committed nor backed up,
            // which `backup_chunks` rules out; one stripe with a backup of its own is the
            // fallback.
            return Step::Backup(((a + 1) * self.new_k).min(self.chunks()));
        }
        Step::Write(a..b)
    }

    /// The new stripes committed once `done` are: `0..done` forward, the last `done` backward
    /// (a level change moves from the end). Their chunks are `committed(done)` times `new_k`.
    pub fn committed(&self, done: u64) -> Range<u64> {
        let done = done.min(self.new_stripes);
        if self.backward {
            self.new_stripes - done..self.new_stripes
        } else {
            0..done
        }
    }

    /// Where chunk `x` is once `done` new stripes are committed (`backed_up`: the backup holds
    /// the critical section; reads of it go there until their new stripes are committed).
    pub fn locate(&self, x: u64, done: u64, backed_up: bool) -> Place {
        let c = self.committed(done);
        if (c.start * self.new_k..c.end * self.new_k).contains(&x) {
            Place::New {
                stripe: x / self.new_k,
                index: x % self.new_k,
            }
        } else if backed_up && x < self.backup_chunks {
            Place::Backup(x)
        } else {
            Place::Old {
                stripe: x / self.old_k,
                index: x % self.old_k,
            }
        }
    }

    /// The physical stripe of new stripe `t`.
    pub fn physical_of_new(&self, t: u64) -> u64 {
        t + self.offset
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    reason = "the model's stripe counts are under 100"
)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The members as the model sees them: per physical stripe, what it holds (old stripe s's
    /// chunks, new stripe t's, or garbage after a torn write).
    #[derive(Clone, Debug, PartialEq)]
    enum Held {
        Old(u64),
        New(u64),
        Torn,
        Empty,
    }

    /// Play a reshape to the end, cutting power inside step number `cut` (some of its stripe
    /// writes land, the one at `torn` is torn, none is committed) and then resuming from what
    /// is durable; after every step and after the cut, every chunk must be where `locate`
    /// says, intact.
    fn play(r: &Reshape, max_batch: u64, cut: Option<(usize, u64, u64)>) -> Result<(), String> {
        let mut disk: Vec<Held> = (0..r.physical)
            .map(|p| {
                if p < r.old_stripes {
                    Held::Old(p)
                } else {
                    Held::Empty
                }
            })
            .collect();
        let mut backup: Option<u64> = None;
        let (mut done, mut backed_up) = (0u64, false);
        let check = |disk: &[Held], done: u64, backed_up: bool, backup: Option<u64>| {
            for x in 0..r.chunks() {
                let ok = match r.locate(x, done, backed_up) {
                    Place::New { stripe, index } => {
                        disk[(stripe + r.offset) as usize] == Held::New(stripe)
                            && stripe * r.new_k + index == x
                    }
                    Place::Old { stripe, index } => {
                        disk[stripe as usize] == Held::Old(stripe) && stripe * r.old_k + index == x
                    }
                    Place::Backup(n) => backup.is_some_and(|b| n < b),
                };
                if !ok {
                    return Err(format!(
                        "chunk {x} lost at done {done}: {:?}, disk {disk:?}",
                        r.locate(x, done, backed_up)
                    ));
                }
            }
            Ok(())
        };
        let mut step_no = 0usize;
        let mut guard = 0;
        loop {
            guard += 1;
            if guard > 100_000 {
                return Err("no progress".into());
            }
            check(&disk, done, backed_up, backup)?;
            let step = r.next(done, backed_up, max_batch);
            match step {
                Step::Done => break,
                Step::Backup(n) => {
                    // The copy reads old stripes that must be intact: check_reads below.
                    for x in 0..n {
                        match r.locate(x, done, backed_up) {
                            Place::Old { stripe, .. }
                                if disk[stripe as usize] != Held::Old(stripe) =>
                            {
                                return Err(format!("backup read a destroyed old stripe {stripe}"));
                            }
                            _ => {}
                        }
                    }
                    if cut.is_some_and(|(c, _, _)| c == step_no) {
                        // The backup record is not durable: nothing changed.
                    } else {
                        backup = Some(n);
                        backed_up = true;
                    }
                }
                Step::Write(range) => {
                    // Every source read is intact.
                    for t in range.clone() {
                        for x in t * r.new_k..((t + 1) * r.new_k).min(r.chunks()) {
                            match r.locate(x, done, backed_up) {
                                Place::Old { stripe, .. }
                                    if disk[stripe as usize] != Held::Old(stripe) =>
                                {
                                    return Err(format!(
                                        "new stripe {t} read destroyed old stripe {stripe}"
                                    ));
                                }
                                Place::New { .. } => {
                                    return Err(format!(
                                        "chunk {x} of uncommitted {t} already committed"
                                    ))
                                }
                                _ => {}
                            }
                        }
                    }
                    let stripes: Vec<u64> = range.clone().collect();
                    if let Some((_, landed, torn)) = cut.filter(|(c, _, _)| *c == step_no) {
                        // Power cut: a subset of the writes land, one is torn, nothing commits.
                        for (i, &t) in stripes.iter().enumerate() {
                            let p = r.physical_of_new(t) as usize;
                            if (landed >> (i % 64)) & 1 == 1 {
                                disk[p] = Held::New(t);
                            }
                            if i as u64 == torn % stripes.len() as u64 {
                                disk[p] = Held::Torn;
                            }
                        }
                        check(&disk, done, backed_up, backup)?;
                        // Resume: the same step again from what is durable.
                        step_no += 1;
                        continue;
                    }
                    for &t in &stripes {
                        disk[r.physical_of_new(t) as usize] = Held::New(t);
                    }
                    done += stripes.len() as u64;
                }
            }
            step_no += 1;
        }
        // At the end every chunk is in its new stripe.
        for x in 0..r.chunks() {
            if !matches!(r.locate(x, done, backed_up), Place::New { .. }) {
                return Err(format!("chunk {x} not moved"));
            }
        }
        Ok(())
    }

    #[test]
    fn adding_members_moves_forward_through_a_backed_up_critical_section() {
        // 4 data members become 5: the first ⌈4/1⌉ = 4 new stripes go through the backup.
        let r = Reshape::plan(4, 5, 100, 100).unwrap();
        assert!(!r.backward);
        assert_eq!((r.new_stripes, r.backup_chunks), (80, 20));
        assert_eq!(r.next(0, false, 64), Step::Backup(20));
        assert_eq!(r.next(0, true, 64), Step::Write(0..5));
        // Past the critical section, batches grow with the committed prefix: ⌊a·5/4⌋ − a.
        assert_eq!(r.next(40, true, 64), Step::Write(40..50));
        // New stripe 40 holds chunks 200..205: old stripes 50 and 51.
        assert_eq!(r.sources(40), 50..52);
        play(&r, 64, None).unwrap();
    }

    #[test]
    fn a_level_change_moves_backward_into_spare_stripes() {
        // RAID-5 4+1 → RAID-6 4+2 (a member added, k unchanged): one spare stripe at the end.
        let r = Reshape::plan(4, 4, 99, 100).unwrap();
        assert!(r.backward);
        assert_eq!((r.offset, r.backup_chunks), (1, 0));
        assert_eq!(r.next(0, false, 64), Step::Write(98..99));
        play(&r, 64, None).unwrap();
        // Without a spare stripe it is refused, saying what to do.
        let e = Reshape::plan(4, 4, 100, 100).unwrap_err();
        assert!(e.contains("grow the members first"), "{e}");
    }

    #[test]
    fn a_broken_safety_rule_is_caught_by_the_model() {
        // Negative control: a plan that skips the backup loses chunks of the critical section
        // when power is cut inside its first write.
        let mut r = Reshape::plan(4, 5, 40, 40).unwrap();
        r.backup_chunks = 0;
        let lost = (0..64u64).any(|torn| play(&r, 64, Some((0, 0, torn))).is_err());
        assert!(lost, "the model did not notice a write over the only copy");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]
        #[test]
        fn every_cut_inside_every_step_leaves_every_chunk_readable(
            old_k in 1u64..9,
            new_k in 1u64..9,
            old_stripes in 1u64..60,
            spare in 0u64..4,
            max_batch in 1u64..20,
            cut_step in 0usize..40,
            landed in any::<u64>(),
            torn in any::<u64>(),
        ) {
            let chunks = old_stripes * old_k;
            let need = chunks.div_ceil(new_k).max(old_stripes);
            let physical = need + spare;
            match Reshape::plan(old_k, new_k, old_stripes, physical) {
                Ok(r) => {
                    prop_assert!(play(&r, max_batch, None).is_ok(), "{:?}", play(&r, max_batch, None));
                    let cut = play(&r, max_batch, Some((cut_step, landed, torn)));
                    prop_assert!(cut.is_ok(), "{r:?}: {cut:?}");
                }
                Err(_) => prop_assert!(new_k <= old_k && spare == 0 || chunks.div_ceil(new_k) >= physical),
            }
        }
    }
}
