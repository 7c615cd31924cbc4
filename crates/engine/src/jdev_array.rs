//! The journal devices and the array (FORMAT.md §2.12): lost when an I/O to one fails — the
//! superblocks say so before another record is written anywhere, and the journal goes on on
//! the other device or on the members' slots — and shown. (Labelling them at `create` and
//! finding them at assembly is `jdev.rs`'s and `array.rs`'s.)

use crate::array::Array;
use crate::error::EngineError;
use crate::events::{Event, EventAction};
use stripeguard_disk::DiskError;
use stripeguard_format::{EventKind, EventRole};

impl Array {
    /// Journal devices whose I/O failed are lost: an event each, and the superblocks say so
    /// before another record is written anywhere.
    pub(crate) fn lose_journal_devices(
        &self,
        failed: Vec<(usize, DiskError)>,
    ) -> Result<(), EngineError> {
        let Some(j) = self.jdevs() else {
            return Ok(());
        };
        let mut any = false;
        for (i, e) in failed {
            if j.lose(i) {
                any = true;
                self.log_event(Event {
                    stripe: 0,
                    member: 0,
                    position: 0,
                    role: EventRole::Stripe,
                    kind: EventKind::JournalDeviceLost,
                    evidence: format!(
                        "journal device {i} ({}) failed: {e}; the journal goes on {}",
                        j.get(i).name(),
                        if j.live().is_empty() {
                            "on the members' slots"
                        } else {
                            "on the other journal device"
                        }
                    ),
                    action: EventAction::Notice,
                });
            }
        }
        if any {
            let mut meta = self.meta().lock().expect("lock");
            self.write_superblocks_locked(&mut meta)?;
        }
        Ok(())
    }

    /// The journal devices as `status` shows them, by mirror index: the device, and `in use`,
    /// `lost` (FORMAT.md §2.12: for good), or `not given` (a read-only assembly without it;
    /// a writable one marks it lost).
    pub fn journal_devices(&self) -> Vec<(String, &'static str)> {
        self.jdevs().map_or(Vec::new(), |j| {
            (0..j.count())
                .map(|i| {
                    let lost_on_disk = self.sb().journal_devices_lost >> i & 1 == 1;
                    let state = if j.is_absent(i) && !self.is_writable() && !lost_on_disk {
                        "not given"
                    } else if j.is_lost(i) {
                        "lost"
                    } else {
                        "in use"
                    };
                    (j.get(i).name().to_string(), state)
                })
                .collect()
        })
    }
}
