//! The state a forced assembly keeps about the stale members it brought back (what forced.rs
//! decides from): plain data, so the array can hold it without depending on the rules.

/// The stale members a forced assembly brought back, and where writes may have passed them.
pub(crate) struct ForcedView {
    /// Their indexes.
    pub(crate) members: Vec<usize>,
    /// Stripes per bit of the intent record, and its bits at assembly (set: written since).
    pub(crate) per_bit: u64,
    pub(crate) written: Vec<bool>,
}

impl ForcedView {
    pub(crate) fn written_since(&self, stripe: u64) -> bool {
        let r = usize::try_from(stripe / self.per_bit.max(1)).unwrap_or(usize::MAX);
        // Beyond the record (it did not cover the stripe): assume written.
        self.written.get(r).copied().unwrap_or(true)
    }
}
