//! CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected, init and xorout 0xFFFFFFFF): the only
//! checksum stripeguard writes. It is computed by `crc-fast` (SIMD carry-less multiplication, at
//! the speed of ISA-L's assembly); nothing else in the project computes a CRC by hand.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// CRC-32C of the concatenation of `parts`, without copying them together.
pub fn crc32c_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    let mut d = Crc32c::new();
    for p in parts {
        d.update(p);
    }
    d.finish()
}

/// The CRC-32C of `a ‖ b` from the CRC-32C of `a`, of `b`, and `b`'s length (zlib's
/// `crc32_combine`; O(log len), no data touched).
#[inline]
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc_fast::checksum_combine(CrcAlgorithm::Crc32Iscsi, crc_a as u64, crc_b as u64, len_b) as u32
}

/// Incremental CRC-32C.
#[derive(Clone)]
pub struct Crc32c(Digest);

impl Crc32c {
    /// A fresh digest.
    pub fn new() -> Self {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }
    /// Append bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data)
    }
    /// The CRC of everything appended so far.
    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn combine_is_the_crc_of_the_concatenation() {
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 31 + 7) as u8).collect();
        let blocks: Vec<u32> = data.chunks(4096).map(crc32c).collect();
        let all = blocks[1..]
            .iter()
            .fold(blocks[0], |acc, &c| crc32c_combine(acc, c, 4096));
        assert_eq!(all, crc32c(&data));
        // And a wrong length gives a wrong answer (the test can fail).
        assert_ne!(
            crc32c_combine(blocks[0], blocks[1], 4095),
            crc32c(&data[..8192])
        );
    }

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// Bitwise definition, the independent oracle.
    fn slow(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    proptest! {
        #[test]
        fn matches_bitwise_definition(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(crc32c(&data), slow(&data));
        }

        #[test]
        fn incremental_equals_one_shot(data in proptest::collection::vec(any::<u8>(), 0..3000), cut in 0usize..3000) {
            let cut = cut.min(data.len());
            prop_assert_eq!(crc32c_parts([&data[..cut], &data[cut..]]), crc32c(&data));
        }

        #[test]
        fn any_single_bit_flip_is_detected(data in proptest::collection::vec(any::<u8>(), 1..3000), bit in 0usize..24000) {
            let bit = bit % (data.len() * 8);
            let mut flipped = data.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert_ne!(crc32c(&flipped), crc32c(&data));
        }
    }
}
