//! The stripe-state record (FORMAT.md §2.7): which byte ranges of which data chunks must not be
//! trusted, byte for byte, and which ranges of whole stripes read as zeros (zero stripes,
//! docs/ZERO-STRIPES.md: their units are never read; only in an array with incompatible feature
//! bit 3).
//!
//! A resync that cannot decide a stripe (more units interrupted or damaged than the code has
//! parity) keeps the stripe writable by recomputing its parity over the data as it is on disk;
//! every checksum block that failed its own check then is listed here, so that it is refused on
//! read until a write covers it whole, a scrub verifies it again against the CRC it should have
//! had, or an operator zero-fills it. Entries are never dropped to make room: a full record
//! refuses the settle instead.
//!
//! Two copies of `T / 2` bytes (the region's size is in the superblock), written alternately like
//! the write-intent record; the valid copy with the higher sequence wins. All zeros = empty.
//! While the record holds an entry the superblock's incompatible feature bit 2 is set, so a build
//! that does not know the record refuses the array instead of reading a listed block as good.

use crate::cursor::{u16_at, u32_at, u64_at};
use stripeguard_checksum::crc32c;

const MAGIC: [u8; 8] = *b"SGSTATE\0";
const VERSION: u32 = 1;
/// Bytes before the first entry.
pub const STATE_HEADER_BYTES: usize = 64;
/// Bytes of one entry.
pub const STATE_ENTRY_BYTES: usize = 24;
/// Entry state: the range failed its check in a stripe a resync settled.
const STATE_UNTRUSTED: u8 = 1;
/// Entry state: a range of whole stripes that read as zeros (docs/ZERO-STRIPES.md), only in an
/// array with incompatible feature bit 3.
const STATE_ZERO: u8 = 2;
/// Entry flag: `expected_crc` is the CRC-32C the range's metadata vouched for before the settle.
const FLAG_EXPECTED: u8 = 1;

/// One listed range: bytes `offset..offset + len` of data chunk `position` of `stripe`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct UntrustedRange {
    /// The stripe.
    pub stripe: u64,
    /// Data position in the stripe (`0..k`).
    pub position: u16,
    /// First byte in the chunk (a checksum-block boundary).
    pub offset: u32,
    /// Bytes (whole checksum blocks; the whole chunk where it has no block table of its own).
    pub len: u32,
    /// The CRC-32C of the range as its metadata last vouched for it, when known: a scrub that
    /// reads exactly these bytes again (a good copy back) may trust the range again.
    pub expected_crc: Option<u32>,
}

impl UntrustedRange {
    /// Whether the range overlaps bytes `lo..hi` of the same chunk.
    pub fn overlaps(&self, lo: u32, hi: u32) -> bool {
        self.offset < hi && lo < self.offset + self.len
    }
    /// Whether bytes `lo..hi` cover the range whole.
    pub fn covered_by(&self, lo: u32, hi: u32) -> bool {
        lo <= self.offset && self.offset + self.len <= hi
    }
}

/// A decoded copy of the record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateRecord {
    /// Incremented on every write.
    pub sequence: u64,
    /// Sorted, distinct, non-overlapping within a chunk.
    pub entries: Vec<UntrustedRange>,
    /// Stripes that read as zeros, sorted, neither overlapping nor touching (touching ranges
    /// are one range). Stored after the untrusted entries.
    pub zero: Vec<ZeroRange>,
}

/// Stripes `first..first + count` read as zeros: whatever their units hold on the members is
/// never read (docs/ZERO-STRIPES.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ZeroRange {
    pub first: u64,
    /// At least 1.
    pub count: u64,
}

/// Why a copy is not a valid record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Magic, version, size or CRC wrong.
    #[error("stripe-state record copy is damaged ({0})")]
    Damaged(&'static str),
    /// Checksum fine but an entry is impossible.
    #[error("stripe-state record holds an impossible entry ({0})")]
    Malformed(&'static str),
    /// More entries than a copy of this size holds.
    #[error("stripe-state record is full ({0} entries)")]
    Full(usize),
}

/// Entries a copy of `copy_bytes` holds.
pub fn state_capacity(copy_bytes: usize) -> usize {
    copy_bytes.saturating_sub(STATE_HEADER_BYTES + 4) / STATE_ENTRY_BYTES
}

impl StateRecord {
    /// Serialize one copy of `copy_bytes`; an error when the entries do not fit.
    pub fn encode(&self, copy_bytes: usize) -> Result<Vec<u8>, StateError> {
        let all = self.entries.len() + self.zero.len();
        if all > state_capacity(copy_bytes) {
            return Err(StateError::Full(all));
        }
        let size = u32::try_from(copy_bytes).map_err(|_| StateError::Full(all))?;
        // Fits: at most state_capacity(copy_bytes) entries, checked above.
        let count = u32::try_from(all).map_err(|_| StateError::Full(all))?;
        let mut b = vec![0u8; copy_bytes];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&size.to_le_bytes());
        b[16..24].copy_from_slice(&self.sequence.to_le_bytes());
        b[24..28].copy_from_slice(&count.to_le_bytes());
        let mut sorted = self.entries.clone();
        sorted.sort_unstable();
        for (i, e) in sorted.iter().enumerate() {
            let o = STATE_HEADER_BYTES + i * STATE_ENTRY_BYTES;
            b[o..o + 8].copy_from_slice(&e.stripe.to_le_bytes());
            b[o + 8..o + 10].copy_from_slice(&e.position.to_le_bytes());
            b[o + 10] = STATE_UNTRUSTED;
            b[o + 11] = if e.expected_crc.is_some() {
                FLAG_EXPECTED
            } else {
                0
            };
            b[o + 12..o + 16].copy_from_slice(&e.offset.to_le_bytes());
            b[o + 16..o + 20].copy_from_slice(&e.len.to_le_bytes());
            b[o + 20..o + 24].copy_from_slice(&e.expected_crc.unwrap_or(0).to_le_bytes());
        }
        let mut zero = self.zero.clone();
        zero.sort_unstable();
        for (i, z) in zero.iter().enumerate() {
            let o = STATE_HEADER_BYTES + (sorted.len() + i) * STATE_ENTRY_BYTES;
            b[o..o + 8].copy_from_slice(&z.first.to_le_bytes());
            b[o + 10] = STATE_ZERO;
            b[o + 12..o + 20].copy_from_slice(&z.count.to_le_bytes());
        }
        let at = copy_bytes - 4;
        let crc = crc32c(&b[..at]);
        b[at..].copy_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Parse one copy: `Ok(None)` when it is all zeros (never written). Never panics.
    pub fn decode(b: &[u8]) -> Result<Option<StateRecord>, StateError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let n = b.len();
        if n < STATE_HEADER_BYTES + 4 || b[0..8] != MAGIC {
            return Err(StateError::Damaged("magic"));
        }
        if u32_at(b, 8) != VERSION || u32_at(b, 12) as usize != n {
            return Err(StateError::Damaged("version or size"));
        }
        if u32_at(b, n - 4) != crc32c(&b[..n - 4]) {
            return Err(StateError::Damaged("CRC"));
        }
        let count = u32_at(b, 24) as usize;
        if count > state_capacity(n) {
            return Err(StateError::Malformed("more entries than the copy holds"));
        }
        if b[28..STATE_HEADER_BYTES].iter().any(|&x| x != 0) {
            return Err(StateError::Malformed("reserved header bytes are not zero"));
        }
        let end = STATE_HEADER_BYTES + count * STATE_ENTRY_BYTES;
        if b[end..n - 4].iter().any(|&x| x != 0) {
            return Err(StateError::Malformed(
                "bytes after the last entry are not zero",
            ));
        }
        let mut entries: Vec<UntrustedRange> = Vec::with_capacity(count);
        let mut zero: Vec<ZeroRange> = Vec::new();
        for i in 0..count {
            let o = STATE_HEADER_BYTES + i * STATE_ENTRY_BYTES;
            if b[o + 10] == STATE_ZERO {
                if b[o + 8..o + 10] != [0, 0] || b[o + 11] != 0 || b[o + 20..o + 24] != [0; 4] {
                    return Err(StateError::Malformed("a zero range with stray bytes"));
                }
                let z = ZeroRange {
                    first: u64_at(b, o),
                    count: u64_at(b, o + 12),
                };
                if z.count == 0 || z.first.checked_add(z.count).is_none() {
                    return Err(StateError::Malformed("an empty or overflowing zero range"));
                }
                if zero.last().is_some_and(|p| p.first + p.count >= z.first) {
                    return Err(StateError::Malformed(
                        "zero ranges out of order, overlapping or touching",
                    ));
                }
                zero.push(z);
                continue;
            }
            if !zero.is_empty() {
                return Err(StateError::Malformed(
                    "an untrusted entry after a zero range",
                ));
            }
            if b[o + 10] != STATE_UNTRUSTED {
                return Err(StateError::Malformed("unknown entry state"));
            }
            if b[o + 11] & !FLAG_EXPECTED != 0 {
                return Err(StateError::Malformed("unknown entry flag"));
            }
            let (offset, len) = (u32_at(b, o + 12), u32_at(b, o + 16));
            if len == 0 || offset.checked_add(len).is_none() {
                return Err(StateError::Malformed("empty or overflowing range"));
            }
            let crc = u32_at(b, o + 20);
            let e = UntrustedRange {
                stripe: u64_at(b, o),
                position: u16_at(b, o + 8),
                offset,
                len,
                expected_crc: (b[o + 11] & FLAG_EXPECTED != 0).then_some(crc),
            };
            if e.expected_crc.is_none() && crc != 0 {
                return Err(StateError::Malformed("a CRC without its flag"));
            }
            if let Some(prev) = entries.last() {
                let same_chunk = (prev.stripe, prev.position) == (e.stripe, e.position);
                if (prev.stripe, prev.position, prev.offset) >= (e.stripe, e.position, e.offset)
                    || (same_chunk && prev.offset + prev.len > e.offset)
                {
                    return Err(StateError::Malformed("entries out of order or overlapping"));
                }
            }
            entries.push(e);
        }
        Ok(Some(StateRecord {
            sequence: u64_at(b, 16),
            entries,
            zero,
        }))
    }
}

impl crate::Record for StateRecord {
    const NAME: &'static str = "stripe-state record";
    const MAGIC: &'static [u8] = &MAGIC;
    const VERSION: u32 = VERSION;
    const SIZE: usize = 0;
    type Error = StateError;

    fn write_copy(&self, copy: &mut [u8]) -> Result<(), StateError> {
        copy.copy_from_slice(&self.encode(copy.len())?);
        Ok(())
    }

    fn read_copy(copy: &[u8]) -> Result<Option<StateRecord>, StateError> {
        StateRecord::decode(copy)
    }

    fn reseal(copy: &mut [u8]) {
        if copy.len() >= 4 {
            crate::cursor::seal_tail(copy);
        }
    }
}

impl crate::Sequenced for StateRecord {
    fn sequence(&self) -> u64 {
        self.sequence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> StateRecord {
        StateRecord {
            sequence: 5,
            entries: vec![
                UntrustedRange {
                    stripe: 3,
                    position: 1,
                    offset: 0,
                    len: 4096,
                    expected_crc: Some(0xdead_beef),
                },
                UntrustedRange {
                    stripe: 3,
                    position: 2,
                    offset: 8192,
                    len: 4096,
                    expected_crc: None,
                },
            ],
            zero: vec![
                ZeroRange {
                    first: 10,
                    count: 4,
                },
                ZeroRange {
                    first: 100,
                    count: 1,
                },
            ],
        }
    }

    #[test]
    fn zero_ranges_that_are_impossible_are_refused() {
        let reseal = |b: &mut Vec<u8>| {
            let at = b.len() - 4;
            let crc = crc32c(&b[..at]);
            b[at..].copy_from_slice(&crc.to_le_bytes());
        };
        let good = sample().encode(4096).unwrap();
        // The first zero range is entry 2, at 64 + 2 * 24.
        let z = 64 + 2 * 24;
        for (what, at, bytes) in [
            ("an empty range", z + 12, 0u64.to_le_bytes().to_vec()),
            ("overflowing", z, u64::MAX.to_le_bytes().to_vec()),
            ("touching the next", z + 12, 90u64.to_le_bytes().to_vec()),
            ("stray position bytes", z + 8, vec![1, 0]),
            ("stray flags", z + 11, vec![1]),
        ] {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(&bytes);
            reseal(&mut b);
            assert!(
                matches!(StateRecord::decode(&b), Err(StateError::Malformed(_))),
                "{what}"
            );
        }
        // An untrusted entry after a zero range: the order is untrusted first.
        let mut b = good.clone();
        let (u, zz) = (64usize, z);
        let first: Vec<u8> = b[u..u + 24].to_vec();
        let zero: Vec<u8> = b[zz..zz + 24].to_vec();
        b[u..u + 24].copy_from_slice(&zero);
        b[zz..zz + 24].copy_from_slice(&first);
        reseal(&mut b);
        assert!(StateRecord::decode(&b).is_err());
    }

    #[test]
    fn round_trip_and_every_bit_flip_is_refused() {
        let r = sample();
        let b = r.encode(8192).unwrap();
        assert_eq!(StateRecord::decode(&b), Ok(Some(r)));
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(StateRecord::decode(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn golden_bytes() {
        // FORMAT.md §2.7, byte for byte.
        let b = sample().encode(256).unwrap();
        let hex: String = b[..160].iter().map(|x| format!("{x:02x}")).collect();
        let expected = [
            "5347535441544500", // magic
            "01000000",         // version
            "00010000",         // copy size 256
            "0500000000000000", // sequence
            "04000000",         // entries (two untrusted, two zero ranges)
            &"00".repeat(36),   // reserved
            "0300000000000000", // stripe 3
            "0100",             // position 1
            "01",               // untrusted
            "01",               // expected CRC known
            "00000000",         // offset
            "00100000",         // len 4096
            "efbeadde",         // expected CRC
            "0300000000000000", // stripe 3
            "0200",             // position 2
            "01",               // untrusted
            "00",               // no expected CRC
            "00200000",         // offset 8192
            "00100000",         // len 4096
            "00000000",         // CRC field zero
            "0a00000000000000", // zero range: first stripe 10
            "0000",             // nothing
            "02",               // zero
            "00",               // no flags
            "0400000000000000", // 4 stripes
            "00000000",         // nothing
            "6400000000000000", // zero range: first stripe 100
            "0000",
            "02",
            "00",
            "0100000000000000", // 1 stripe
            "00000000",
        ]
        .concat();
        assert_eq!(hex, expected);
        assert!(b[160..252].iter().all(|&x| x == 0));
        assert_eq!(b[252..], crc32c(&b[..252]).to_le_bytes());
    }

    #[test]
    fn zeros_are_empty_and_a_full_record_does_not_encode() {
        assert_eq!(StateRecord::decode(&[0u8; 256]), Ok(None));
        let cap = state_capacity(256);
        assert_eq!(cap, (256 - 68) / 24);
        let mut r = StateRecord::default();
        for s in 0..=cap as u64 {
            r.entries.push(UntrustedRange {
                stripe: s,
                position: 0,
                offset: 0,
                len: 512,
                expected_crc: None,
            });
        }
        assert_eq!(r.encode(256), Err(StateError::Full(cap + 1)));
        r.entries.pop();
        assert!(StateRecord::decode(&r.encode(256).unwrap())
            .unwrap()
            .is_some());
    }

    #[test]
    fn overlapping_entries_are_refused() {
        let mut r = sample();
        r.entries[1] = UntrustedRange {
            position: 1,
            offset: 2048,
            ..r.entries[0]
        };
        let b = r.encode(512).unwrap();
        assert_eq!(
            StateRecord::decode(&b),
            Err(StateError::Malformed("entries out of order or overlapping"))
        );
    }
}
