//! The crash backend (after redb's): writes go to a live image; `flush` makes them durable; a
//! crash image is the durable image plus a random subset of the unflushed writes, each possibly
//! torn to a prefix of its sectors, applied in a random order.

use crate::{check_range, Disk, DiskError};
use rand::seq::SliceRandom;
use rand::Rng;
use std::sync::Mutex;

struct State {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
}

/// A disk that can be crashed.
pub struct CrashDisk {
    name: String,
    sector_bytes: usize,
    state: Mutex<State>,
}

impl CrashDisk {
    /// A zeroed disk of `size` bytes.
    pub fn new(name: impl Into<String>, size: u64, sector_bytes: usize) -> Self {
        let size = usize::try_from(size).expect("a crash disk's size fits in memory");
        CrashDisk {
            name: name.into(),
            sector_bytes,
            state: Mutex::new(State {
                live: vec![0; size],
                durable: vec![0; size],
                pending: Vec::new(),
            }),
        }
    }

    /// A disk whose durable (and live) content is `image`.
    pub fn from_image(name: impl Into<String>, image: Vec<u8>, sector_bytes: usize) -> Self {
        CrashDisk {
            name: name.into(),
            sector_bytes,
            state: Mutex::new(State {
                live: image.clone(),
                durable: image,
                pending: Vec::new(),
            }),
        }
    }

    /// Writes not yet flushed.
    pub fn pending_writes(&self) -> usize {
        self.state.lock().expect("lock").pending.len()
    }

    /// What the media could hold after a power cut now.
    pub fn crash_image(&self, rng: &mut impl Rng) -> Vec<u8> {
        let st = self.state.lock().expect("lock");
        let mut img = st.durable.clone();
        let mut order: Vec<&(u64, Vec<u8>)> = st.pending.iter().collect();
        order.shuffle(rng);
        for (off, data) in order {
            match rng.random_range(0..4) {
                0 | 1 => {}
                2 => {
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "pending writes were checked to be within the image, a Vec in memory"
                    )]
                    let o = *off as usize;
                    img[o..o + data.len()].copy_from_slice(data);
                }
                _ => {
                    let sectors = data.len().div_ceil(self.sector_bytes);
                    let keep = (rng.random_range(0..=sectors) * self.sector_bytes).min(data.len());
                    #[allow(
                        clippy::cast_possible_truncation,
                        reason = "pending writes were checked to be within the image, a Vec in memory"
                    )]
                    let o = *off as usize;
                    img[o..o + keep].copy_from_slice(&data[..keep]);
                }
            }
        }
        img
    }

    /// The live image (what reads see now).
    pub fn live_image(&self) -> Vec<u8> {
        self.state.lock().expect("lock").live.clone()
    }
}

impl Disk for CrashDisk {
    fn name(&self) -> &str {
        &self.name
    }
    fn size_bytes(&self) -> u64 {
        self.state.lock().expect("lock").live.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let st = self.state.lock().expect("lock");
        check_range(&self.name, "read", offset, buf.len(), st.live.len() as u64)?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked above to be within the image, a Vec in memory"
        )]
        let o = offset as usize;
        buf.copy_from_slice(&st.live[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let mut st = self.state.lock().expect("lock");
        check_range(&self.name, "write", offset, buf.len(), st.live.len() as u64)?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "checked above to be within the image, a Vec in memory"
        )]
        let o = offset as usize;
        st.live[o..o + buf.len()].copy_from_slice(buf);
        st.pending.push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> Result<(), DiskError> {
        let mut st = self.state.lock().expect("lock");
        let st = &mut *st;
        for (off, data) in st.pending.drain(..) {
            #[allow(
                clippy::cast_possible_truncation,
                reason = "pending writes were checked to be within the image, a Vec in memory"
            )]
            let o = off as usize;
            st.durable[o..o + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
}

/// A [`CrashDisk`] whose writes and flushes stop landing once a budget of I/Os shared with the
/// other members is spent: a power cut at a chosen I/O (reads still answer; what is durable is
/// the crash disk's to say). Tests of crash consistency cut at every I/O of an operation.
pub struct PowerCut {
    inner: std::sync::Arc<CrashDisk>,
    budget: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl PowerCut {
    /// `inner`, cut when `budget` (shared by every member) reaches zero.
    pub fn new(
        inner: std::sync::Arc<CrashDisk>,
        budget: std::sync::Arc<std::sync::atomic::AtomicI64>,
    ) -> Self {
        PowerCut { inner, budget }
    }

    fn spend(&self) -> Result<(), DiskError> {
        if self
            .budget
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            <= 0
        {
            return Err(DiskError::Failed {
                name: self.inner.name().to_string(),
                why: "power cut (test)".into(),
            });
        }
        Ok(())
    }
}

impl Disk for PowerCut {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        self.spend()?;
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.spend()?;
        self.inner.flush()
    }
}

/// What every member could hold after a power cut now, as memory disks named `m0`, `m1`, ...
/// (each its own random subset of unflushed writes, [`CrashDisk::crash_image`]).
pub fn crash_images(
    disks: &[std::sync::Arc<CrashDisk>],
    rng: &mut impl Rng,
) -> Vec<crate::DiskRef> {
    disks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            std::sync::Arc::new(crate::MemDisk::from_bytes(
                format!("m{i}"),
                c.crash_image(rng),
            )) as crate::DiskRef
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn flushed_writes_survive_a_crash_and_unflushed_may_not() {
        let d = CrashDisk::new("c", 4096, 512);
        d.write_at(0, &[1; 512]).unwrap();
        d.flush().unwrap();
        d.write_at(512, &[2; 1024]).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut saw = [false; 2];
        for _ in 0..64 {
            let img = d.crash_image(&mut rng);
            assert_eq!(&img[..512], &[1; 512]);
            saw[(img[512] == 2) as usize] = true;
        }
        assert_eq!(saw, [true, true]);
        assert_eq!(d.live_image()[512], 2);
    }
}
