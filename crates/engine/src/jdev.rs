//! The journal devices (FORMAT.md §2.12): the write journal's slots on one or two faster
//! devices (a mirror) instead of the members', and the group commit that lets concurrent
//! writers share one flush of them. It knows no array: [`crate::journaling`] decides what goes
//! here and what happens when a device is lost.
//!
//! **Group commit.** A writer whose records are written takes a ticket (a counter bumped after
//! its writes completed), then the flush lock. Holding it, a writer whose ticket a finished
//! flush already covers returns at once; otherwise it reads the newest ticket, flushes every
//! live device and records that ticket as covered. A flush that starts after a ticket was taken
//! covers that ticket's writes, so one flush serves every writer queued behind the lock.

use crate::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use stripeguard_disk::{DiskError, DiskRef};
use stripeguard_format::{
    JournalDeviceLabel, Newest, Record, Superblock, JDEV_LABEL_BYTES, JDEV_LABEL_OFFSETS,
    MAX_JOURNAL_DEVICES,
};

/// The journal devices of an array.
pub(crate) struct JournalDevices {
    /// By mirror index; a device missing at assembly is a lost placeholder.
    devs: Vec<DiskRef>,
    lost: Vec<AtomicBool>,
    /// Not among the devices the assembly was given (a placeholder stands in).
    absent: Vec<bool>,
    slot_bytes: u64,
    /// Slots on each (the fewest any label says).
    slots: usize,
    /// Tickets handed out (group commit), and the newest one a finished flush covers.
    written: AtomicU64,
    flushed: AtomicU64,
    /// One flush of the devices at a time. Lock order 13 (a leaf).
    flush_lock: Mutex<()>,
}

/// The label on `disk`, if it carries a valid one (the newer valid copy).
pub fn read_journal_device_label(disk: &dyn stripeguard_disk::Disk) -> Option<JournalDeviceLabel> {
    let mut n = Newest::<JournalDeviceLabel>::default();
    for at in JDEV_LABEL_OFFSETS {
        let mut b = vec![0u8; JDEV_LABEL_BYTES];
        if disk.read_at(at, &mut b).is_ok() {
            n.take(&b, JDEV_LABEL_BYTES, |_| true);
        }
    }
    n.record
}

/// Write `label` to both copies of `disk`, each flushed before the next.
pub(crate) fn write_label(disk: &DiskRef, label: &JournalDeviceLabel) -> Result<(), DiskError> {
    let bytes = label
        .to_copy(JDEV_LABEL_BYTES)
        .map_err(|e| DiskError::Failed {
            name: disk.name().to_string(),
            why: e.to_string(),
        })?;
    for at in JDEV_LABEL_OFFSETS {
        disk.write_at(at, &bytes)?;
        disk.flush()?;
    }
    Ok(())
}

impl JournalDevices {
    /// `devs` by mirror index: each device (a placeholder whose I/O fails when it was not
    /// given), whether it is lost and whether it was absent; `slots` of `slot_bytes` each.
    pub(crate) fn new(
        devs: Vec<(DiskRef, bool, bool)>,
        slot_bytes: u64,
        slots: usize,
    ) -> JournalDevices {
        JournalDevices {
            lost: devs.iter().map(|(_, l, _)| AtomicBool::new(*l)).collect(),
            absent: devs.iter().map(|(_, _, a)| *a).collect(),
            devs: devs.into_iter().map(|(d, _, _)| d).collect(),
            slot_bytes,
            slots,
            written: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
        }
    }

    /// Slots on each device.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// How many the array lists.
    pub(crate) fn count(&self) -> usize {
        self.devs.len()
    }

    /// The devices not lost, by mirror index.
    pub(crate) fn live(&self) -> Vec<usize> {
        (0..self.devs.len())
            .filter(|&i| !self.lost[i].load(Ordering::Acquire))
            .collect()
    }

    /// Whether device `i` is lost.
    pub(crate) fn is_lost(&self, i: usize) -> bool {
        self.lost[i].load(Ordering::Acquire)
    }

    /// Whether device `i` was not given to the assembly.
    pub(crate) fn is_absent(&self, i: usize) -> bool {
        self.absent[i]
    }

    /// Device `i` (for names and reads).
    pub(crate) fn get(&self, i: usize) -> &DiskRef {
        &self.devs[i]
    }

    /// Mark device `i` lost; whether it was not already.
    pub(crate) fn lose(&self, i: usize) -> bool {
        !self.lost[i].swap(true, Ordering::AcqRel)
    }

    /// The lost bits, as the superblock keeps them.
    pub(crate) fn lost_bits(&self) -> u8 {
        (0..self.devs.len().min(8))
            .filter(|&i| self.is_lost(i))
            .fold(0u8, |b, i| b | (1 << i))
    }

    /// Where slot `slot` starts on a device.
    pub(crate) fn slot_offset(&self, slot: usize) -> u64 {
        stripeguard_format::JDEV_SLOTS_AT + slot as u64 * self.slot_bytes
    }

    /// Write `bytes` at `slot` on every live device; the devices whose write failed.
    pub(crate) fn write_slot(&self, slot: usize, bytes: &[u8]) -> Vec<(usize, DiskError)> {
        let at = self.slot_offset(slot);
        self.live()
            .into_iter()
            .filter_map(|i| self.devs[i].write_at(at, bytes).err().map(|e| (i, e)))
            .collect()
    }

    /// Make every record written before this call durable on the live devices, sharing a
    /// flush with concurrent callers (the module comment); the devices whose flush failed.
    pub(crate) fn commit(&self) -> Vec<(usize, DiskError)> {
        let ticket = self.written.fetch_add(1, Ordering::AcqRel) + 1;
        let _one = self
            .flush_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.flushed.load(Ordering::Acquire) >= ticket {
            return Vec::new();
        }
        let target = self.written.load(Ordering::Acquire);
        let live = self.live();
        let failed: Vec<(usize, DiskError)> = live
            .iter()
            .filter_map(|&i| self.devs[i].flush().err().map(|e| (i, e)))
            .collect();
        if failed.len() < live.len() {
            self.flushed.fetch_max(target, Ordering::AcqRel);
        }
        failed
    }

    /// Zero the headers of `slots` on every live device; the devices whose write failed. Many
    /// at once (a flush frees thousands): spread over up to [`ZEROING_THREADS`] threads, as a
    /// device's queue takes them.
    pub(crate) fn zero_headers(&self, slots: &[usize]) -> Vec<(usize, DiskError)> {
        let zeros = vec![0u8; stripeguard_format::journal::JOURNAL_HEADER_SIZE];
        let mut failed = Vec::new();
        for i in self.live() {
            let d = &self.devs[i];
            let per = slots.len().div_ceil(ZEROING_THREADS).max(64);
            let zero = |part: &[usize]| {
                part.iter()
                    .try_for_each(|&s| d.write_at(self.slot_offset(s), &zeros))
            };
            let result = if slots.len() <= per {
                zero(slots)
            } else {
                std::thread::scope(|scope| {
                    let parts: Vec<_> = slots
                        .chunks(per)
                        .map(|part| scope.spawn(move || zero(part)))
                        .collect();
                    parts
                        .into_iter()
                        .try_for_each(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                })
            };
            if let Err(e) = result {
                failed.push((i, e));
            }
        }
        failed
    }

    /// Flush every live device (no group commit: a freeing that must be durable now).
    pub(crate) fn flush_all(&self) -> Vec<(usize, DiskError)> {
        self.live()
            .into_iter()
            .filter_map(|i| self.devs[i].flush().err().map(|e| (i, e)))
            .collect()
    }
}

/// A device that stands for a journal device missing at assembly: every I/O fails.
pub(crate) fn missing(name: String) -> DiskRef {
    std::sync::Arc::new(stripeguard_disk::FailedDisk::new(
        name,
        "missing at assembly",
    ))
}

/// Threads that zero freed slot headers at once.
const ZEROING_THREADS: usize = 16;

/// Slots a journal device holds at most.
pub const MAX_DEVICE_SLOTS: u32 = 4096;

/// The slots a new journal device file is made with when `create` makes it: enough for 32
/// concurrent writers of a few units each between flushes.
pub const NEW_DEVICE_SLOTS: u64 = 512;

/// The labels `create` gives `devs` (with the `uuids` drawn for them) for the array `sb`
/// describes: checked — the write journal is on, at most two, each big enough.
pub(crate) fn labels_for(
    devs: &[DiskRef],
    uuids: &[[u8; 16]],
    sb: &Superblock,
) -> Result<Vec<JournalDeviceLabel>, String> {
    if devs.is_empty() {
        return Ok(Vec::new());
    }
    if !sb.write_journal {
        return Err(
            "a journal device holds the write journal: create the array with the write journal (--journal) too".into(),
        );
    }
    if devs.len() > MAX_JOURNAL_DEVICES {
        return Err(format!(
            "{} journal devices given; at most {MAX_JOURNAL_DEVICES} (a mirror)",
            devs.len()
        ));
    }
    let slot_bytes = sb.journal_slot_bytes();
    // As many slots as the smallest device holds, up to MAX_DEVICE_SLOTS, at least the
    // members' count: more slots, fewer flushes to free them under concurrent writers.
    let smallest = devs.iter().map(|d| d.measure_size()).min().unwrap_or(0);
    let fits = smallest.saturating_sub(stripeguard_format::JDEV_SLOTS_AT) / slot_bytes;
    let slots = u32::try_from(fits.min(u64::from(MAX_DEVICE_SLOTS))).unwrap_or(MAX_DEVICE_SLOTS);
    if slots < sb.journal_slots {
        return Err(format!(
            "a journal device holds {smallest} bytes; the journal needs at least {} ({} slots of {slot_bytes} bytes after an 8 KiB label)",
            stripeguard_format::JDEV_SLOTS_AT + u64::from(sb.journal_slots) * slot_bytes,
            sb.journal_slots
        ));
    }
    Ok(devs
        .iter()
        .zip(uuids)
        .enumerate()
        .map(|(i, (_, uuid))| JournalDeviceLabel {
            device_uuid: *uuid,
            array_uuid: sb.array_uuid,
            generation: 1,
            slots,
            mirror_index: u32::try_from(i).expect("at most 2"),
            slot_bytes,
        })
        .collect())
}

/// Zero every slot header of the new journal devices `devs` and label them.
pub(crate) fn write_new(
    devs: &[DiskRef],
    labels: &[JournalDeviceLabel],
    slot_bytes: u64,
) -> Result<Option<JournalDevices>, DiskError> {
    if labels.is_empty() {
        return Ok(None);
    }
    let zeros = vec![0u8; stripeguard_format::journal::JOURNAL_HEADER_SIZE];
    for (d, l) in devs.iter().zip(labels) {
        for s in 0..l.slots as usize {
            d.write_at(l.slot_offset(s), &zeros)?;
        }
        write_label(d, l)?;
    }
    Ok(Some(JournalDevices::new(
        devs.iter()
            .map(|d| (DiskRef::clone(d), false, false))
            .collect(),
        slot_bytes,
        labels.iter().map(|l| l.slots as usize).min().unwrap_or(0),
    )))
}

/// The array's journal devices (`sb` lists them) among `given`, found by their labels; one
/// missing, or lost before, is lost. With what to say of each newly lost one.
pub(crate) fn find(sb: &Superblock, given: &[DiskRef]) -> (Option<JournalDevices>, Vec<String>) {
    if sb.journal_devices.is_empty() {
        return (None, Vec::new());
    }
    let labels: Vec<Option<JournalDeviceLabel>> = given
        .iter()
        .map(|d| read_journal_device_label(d.as_ref()))
        .collect();
    let mut newly = Vec::new();
    let mut devs = Vec::new();
    let mut slots = usize::MAX;
    for (i, uuid) in sb.journal_devices.iter().enumerate() {
        let was_lost = sb.journal_devices_lost >> i & 1 == 1;
        let found = given.iter().zip(&labels).find_map(|(d, l)| {
            l.as_ref()
                .filter(|l| &l.device_uuid == uuid && l.array_uuid == sb.array_uuid)
                .map(|l| (DiskRef::clone(d), l.slots as usize))
        });
        let found = found.map(|(d, n)| {
            slots = slots.min(n);
            d
        });
        match found {
            Some(d) => devs.push((d, was_lost, false)),
            None => {
                if !was_lost {
                    newly.push(format!(
                        "journal device {i} ({}) is missing at assembly: lost, the journal goes on {}",
                        stripeguard_format::hex(uuid),
                        if sb.journal_devices.len() > 1 {
                            "on the other journal device, or on the members"
                        } else {
                            "on the members' slots"
                        }
                    ));
                }
                devs.push((missing(format!("journal device {i}")), true, true));
            }
        }
    }
    let slots = if slots == usize::MAX { 0 } else { slots };
    (
        Some(JournalDevices::new(devs, sb.journal_slot_bytes(), slots)),
        newly,
    )
}
