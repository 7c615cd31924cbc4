//! Human sizes on the command line: `4K`, `64KiB`, `1M`, `4096`.

/// Parse a size with an optional binary suffix (K, M, G, T, with or without `iB`/`B`) and an
/// optional decimal part (`7.04K`, as the paper's Table III writes sizes). Never wraps.
pub fn parse_size_f64(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num_end = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    let n: f64 = match num.parse() {
        Ok(n) if !num.is_empty() && !num.starts_with('.') => n,
        _ => {
            return Err(format!(
                "{s:?} is not a size (try 4096, 4K, 7.04K, 64KiB, 1M)"
            ))
        }
    };
    let mult: f64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("{s:?} has an unknown unit (use K, M, G or T)")),
    };
    Ok(n * mult)
}

/// Parse a whole number of bytes (see [`parse_size_f64`]); `7.5K` is fine, `0.3K` is not.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if !t.contains('.') {
        // Exact integer arithmetic: no float rounding for large sizes.
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, suffix) = t.split_at(digits_end);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a size (try 4096, 4K, 64KiB, 1M)"))?;
        let shift = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(format!("{s:?} has an unknown unit (use K, M, G or T)")),
        };
        return n
            .checked_mul(1u64 << shift)
            .ok_or_else(|| format!("{s:?} is too large"));
    }
    let v = parse_size_f64(s)?;
    if v.fract() != 0.0 || v > u64::MAX as f64 {
        return Err(format!(
            "{s:?} is not a whole number of bytes ({v}); give bytes, e.g. {}",
            v.round()
        ));
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked above: a whole number, not negative (no sign parses), at most 2^64, \
                  which saturates to u64::MAX"
    )]
    Ok(v as u64)
}

/// [`parse_bytes`] for sizes held in memory (at most the machine's address space).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let b = parse_bytes(s)?;
    usize::try_from(b).map_err(|_| format!("{s:?} is too large for this machine"))
}

/// `4096` -> `4K`, `65536` -> `64K`, otherwise bytes.
pub fn format_size(n: usize) -> String {
    format_bytes(n as u64)
}

/// [`format_size`] for sizes that need not fit in memory (an array's capacity).
pub fn format_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

/// `6+2` -> (6, 2).
pub fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (k, m) = s
        .split_once(['+', ',', 'x'])
        .ok_or_else(|| format!("{s:?} is not a shape like 6+2"))?;
    let k = k
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: bad data chunk count"))?;
    let m = m
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: bad parity chunk count"))?;
    Ok((k, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("4Q").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(format_size(65536), "64K");
        assert_eq!(parse_shape("10+4"), Ok((10, 4)));
        assert!(parse_shape("10").is_err());
    }

    #[test]
    fn decimal_sizes_and_huge_numbers() {
        assert_eq!(parse_size_f64("7.04K"), Ok(7.04 * 1024.0));
        assert_eq!(parse_bytes("1.5K"), Ok(1536));
        assert!(parse_bytes("7.04K").unwrap_err().contains("whole number"));
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_bytes("18446744073709551616").is_err());
        assert!(parse_bytes("16777216T").unwrap_err().contains("too large"));
        assert!(parse_size_f64(".5K").is_err());
        assert!(parse_size_f64("1.2.3K").is_err());
    }
}
