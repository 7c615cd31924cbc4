//! What the mutation harnesses share: field-shaped values and the case count.

/// A field-shaped value: boundaries more often than chance would give them.
pub fn value(kind: u8, width: usize, raw: u64) -> u64 {
    let max = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    match kind % 6 {
        0 => 0,
        1 => max,
        2 => 1,
        3 => max / 2 + 1,
        4 => raw % 300,
        _ => raw & max,
    }
}

/// Cases per property: `PROPTEST_CASES`, 2000 by default (scripts/test runs more).
pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000)
}
