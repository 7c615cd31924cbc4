//! Checked conversions between the engine's integer widths, each with the bound that makes it
//! infallible stated once.

// The engine addresses member bytes, stripes and chunks in u64 and indexes memory in usize; it
// is built for 64-bit targets only (io_uring, O_DIRECT, multi-TiB members), so every u64 that
// indexes memory fits. This says so at compile time, and usize_of is the one checked conversion.
const _: () = assert!(
    usize::BITS >= 64,
    "stripeguard's engine needs a 64-bit target"
);

/// `v` as a memory index or length (checked; infallible on the 64-bit targets the assertion
/// above requires). Public: the crates above the engine (campaigns, the server) index memory
/// by the engine's byte counts too.
pub fn usize_of(v: u64) -> usize {
    usize::try_from(v).expect("a 64-bit target: usize holds every u64")
}

/// A member index or stripe position as stored (u16): at most 255 members, checked at create
/// and at assembly (the member table's bound).
pub(crate) fn index_u16(v: usize) -> u16 {
    u16::try_from(v).expect("at most 255 members")
}

/// A byte offset or length within one unit as stored (u32): a chunk is at most 16 MiB plus its
/// appendix, checked at create and by the superblock decoder.
pub(crate) fn in_unit_u32(v: impl TryInto<u32>) -> u32 {
    v.try_into()
        .ok()
        .expect("within one unit (at most 16 MiB and its appendix)")
}

/// The CRC-32C a tag of the `checksum` mirror kind holds: those tags are CRCs widened to u64.
#[allow(
    clippy::cast_possible_truncation,
    reason = "a checksum-mirror tag is a CRC-32C widened to u64: its low 32 bits are the value"
)]
pub(crate) fn crc_of_tag(tag: u64) -> u32 {
    tag as u32
}

/// Unix milliseconds of `d` (saturating far past the year 584 million).
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
