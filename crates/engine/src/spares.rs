//! Hot spares (FORMAT.md §2.1 spare table, §2.11 spare label): devices the array lists and
//! that carry a label naming it, ready to take a member's place. Adding writes the label, then
//! the superblocks with the entry; removing writes the superblocks without it, then zeroes the
//! label; a replace onto a spare takes it off the table in the same superblock write that gives
//! it the slot ([`crate::ReplaceForce::spare`]). So a crash leaves at worst a label no
//! superblock lists, never a listed spare whose label names another array.
//!
//! When a spare is used is the holder's decision (`stripeguard-ops`): this file keeps the list,
//! the policy and the labels.

use crate::array::Array;
use crate::error::EngineError;
use stripeguard_disk::{DiskError, DiskRef};
use stripeguard_format::{
    Newest, Record, SpareEntry, SpareLabel, SparePolicy, MAX_SPARES, MAX_SPARE_HINT_BYTES,
    SPARE_LABEL_BYTES, SPARE_LABEL_OFFSETS,
};

/// The label on `disk`, if it carries a valid one (the newer valid copy); whether a copy was
/// damaged.
pub fn read_spare_label(disk: &dyn stripeguard_disk::Disk) -> (Option<SpareLabel>, bool) {
    let mut n = Newest::<SpareLabel>::default();
    for at in SPARE_LABEL_OFFSETS {
        let mut b = vec![0u8; SPARE_LABEL_BYTES];
        if disk.read_at(at, &mut b).is_ok() {
            n.take(&b, SPARE_LABEL_BYTES, |_| true);
        }
    }
    (n.record, n.damaged)
}

/// Write `label` to both copies of `disk`, each flushed before the next (as superblocks).
fn write_label(disk: &DiskRef, label: &SpareLabel) -> Result<(), EngineError> {
    let bytes = label
        .to_copy(SPARE_LABEL_BYTES)
        .map_err(|e| EngineError::Config(e.to_string()))?;
    for at in SPARE_LABEL_OFFSETS {
        disk.write_at(at, &bytes)?;
        disk.flush()?;
    }
    Ok(())
}

/// Zero both copies of a spare label on `disk` (it was taken off the array's table).
pub fn clear_spare_label(disk: &dyn stripeguard_disk::Disk) -> Result<(), DiskError> {
    let zeros = vec![0u8; SPARE_LABEL_BYTES];
    for at in SPARE_LABEL_OFFSETS {
        disk.write_at(at, &zeros)?;
    }
    disk.flush()
}

impl Array {
    /// The hot spares the array lists, in order.
    pub fn spares(&self) -> Vec<SpareEntry> {
        self.meta().lock().expect("lock").spares.clone()
    }

    /// When a spare takes a member's place.
    pub fn spare_policy(&self) -> SparePolicy {
        self.meta()
            .lock()
            .expect("lock")
            .spare_policy
            .unwrap_or_default()
    }

    /// Set when a spare takes a member's place (written to every superblock).
    pub fn set_spare_policy(&self, policy: SparePolicy) -> Result<(), EngineError> {
        self.writable_for("set the spare policy")?;
        let mut meta = self.meta().lock().expect("lock");
        meta.spare_policy = Some(policy);
        self.write_superblocks_locked(&mut meta)
    }

    /// Label `disk` a spare of this array and list it, `hint` the path or URI it was given by
    /// (kept when it fits, FORMAT.md §2.1). Refused when the table is full or `disk` is smaller
    /// than a member.
    pub fn add_spare(&self, disk: &DiskRef, hint: &str) -> Result<SpareEntry, EngineError> {
        self.writable_for("add a spare")?;
        if self.spares().len() >= MAX_SPARES {
            return Err(EngineError::Config(format!(
                "the array lists {MAX_SPARES} spares already, the most its superblock holds"
            )));
        }
        let need = self.superblock().member_bytes();
        let size = disk.measure_size();
        if size < need {
            return Err(EngineError::Config(format!(
                "{} ({size} bytes) is too small to be a spare: a member of this array needs {need} bytes",
                disk.name()
            )));
        }
        let (old, _) = read_spare_label(disk.as_ref());
        let label = SpareLabel {
            spare_uuid: crate::env::random::<16>(self.env()),
            array_uuid: self.sb().array_uuid,
            generation: old.map_or(1, |l| l.generation.saturating_add(1)),
            labelled_unix: crate::env::unix_seconds(self.env()),
            device_bytes: size,
        };
        // The label first: a crash before the superblocks leaves a label nothing lists.
        write_label(disk, &label)?;
        let entry = SpareEntry {
            uuid: label.spare_uuid,
            device_bytes: size,
            hint: if hint.len() <= MAX_SPARE_HINT_BYTES {
                hint.to_string()
            } else {
                String::new()
            },
        };
        let mut meta = self.meta().lock().expect("lock");
        meta.spares.push(entry.clone());
        if let Err(e) = self.write_superblocks_locked(&mut meta) {
            meta.spares.retain(|s| s.uuid != entry.uuid);
            return Err(e);
        }
        Ok(entry)
    }

    /// Take the spare `uuid` off the table (the caller zeroes its label when it can reach the
    /// device: [`clear_spare_label`]).
    pub fn remove_spare(&self, uuid: &[u8; 16]) -> Result<SpareEntry, EngineError> {
        self.writable_for("remove a spare")?;
        let mut meta = self.meta().lock().expect("lock");
        let Some(at) = meta.spares.iter().position(|s| &s.uuid == uuid) else {
            return Err(EngineError::Config(format!(
                "the array lists no spare {}",
                stripeguard_format::hex(uuid)
            )));
        };
        let gone = meta.spares.remove(at);
        if let Err(e) = self.write_superblocks_locked(&mut meta) {
            meta.spares.insert(at, gone);
            return Err(e);
        }
        Ok(gone)
    }

    /// Whether `disk` is the listed spare `entry` of this array (its label says so).
    pub fn is_spare_of_this(&self, disk: &dyn stripeguard_disk::Disk, entry: &SpareEntry) -> bool {
        matches!(read_spare_label(disk).0, Some(l)
            if l.spare_uuid == entry.uuid && l.array_uuid == self.sb().array_uuid)
    }

    /// Log that a hot spare takes member `member`'s place (event `spare-taken`, FORMAT.md
    /// §2.5): `evidence` says which spare and why.
    pub fn note_spare_taken(&self, member: usize, evidence: String) {
        self.note(
            stripeguard_format::EventKind::SpareTaken,
            Some(crate::num::MemberIx::new(member)),
            evidence,
        );
    }

    fn writable_for(&self, what: &str) -> Result<(), EngineError> {
        if self.is_writable() {
            Ok(())
        } else {
            Err(EngineError::Config(format!(
                "the array was assembled read-only: cannot {what}"
            )))
        }
    }
}
