//! The byte cursor every record is read and written with: little-endian fields at fixed offsets,
//! NUL-padded text, and the CRC-32C that closes a copy. Readers are called after the caller has
//! checked the copy's length (each decoder does, first), so they index directly; writers take the
//! buffer the encoder sized.

use stripeguard_checksum::crc32c;

/// The `u16` at byte `o`.
pub fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// The `u32` at byte `o`.
pub fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// The `u64` at byte `o`.
pub fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(v)
}

/// The 16 bytes at `o` (uuids, ids).
pub fn id_at(b: &[u8], o: usize) -> [u8; 16] {
    let mut v = [0u8; 16];
    v.copy_from_slice(&b[o..o + 16]);
    v
}

/// Write `v` at byte `o`.
pub fn put_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}

/// Write `v` at byte `o`.
pub fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// Write `v` at byte `o`.
pub fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Copy `s` into `dst`, cut at a character boundary so what is stored stays UTF-8; the rest of
/// `dst` is left as it is (zero in a fresh copy).
pub fn put_text(dst: &mut [u8], s: &str) {
    let cut = text_prefix(s, dst.len());
    dst[..cut.len()].copy_from_slice(cut.as_bytes());
}

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub fn text_prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// NUL-padded text: up to the first NUL, invalid UTF-8 replaced (a reader never fails on it),
/// and cut to the field's width at a character boundary (a replacement character takes three
/// bytes, so the text read must still fit the field it is written back to: round trip).
pub fn text_at(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    let text = String::from_utf8_lossy(&b[..end]);
    text_prefix(&text, b.len()).to_string()
}

/// Close a copy: the CRC-32C of every byte before its last four, into its last four.
pub fn seal_tail(b: &mut [u8]) {
    let at = b.len() - 4;
    let crc = crc32c(&b[..at]);
    b[at..].copy_from_slice(&crc.to_le_bytes());
}

/// Whether a copy's last four bytes are the CRC-32C of the bytes before them.
pub fn tail_sealed(b: &[u8]) -> bool {
    b.len() >= 4 && u32_at(b, b.len() - 4) == crc32c(&b[..b.len() - 4])
}

/// Lower-case hex of `b` (uuids and ids in messages).
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(2 * b.len()), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_and_read_back_to_the_nul() {
        let mut b = [0u8; 5];
        put_text(&mut b, "aéé");
        assert_eq!(&b, b"a\xc3\xa9\xc3\xa9");
        let mut b = [0u8; 4];
        put_text(&mut b, "aéé");
        assert_eq!(text_at(&b), "aé");
        assert_eq!(text_at(b"ab\0c"), "ab");
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }

    #[test]
    fn a_sealed_copy_checks_and_any_flip_does_not() {
        let mut b = vec![7u8; 64];
        seal_tail(&mut b);
        assert!(tail_sealed(&b));
        for bit in 0..64 * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(!tail_sealed(&c), "bit {bit}");
        }
        assert!(!tail_sealed(&[1, 2]));
    }
}
