//! Human sizes on the command line: `4K`, `64KiB`, `1M`, `4096`.

/// Parse a byte size with an optional binary suffix (K, M, G, with or without `iB`/`B`).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (try 4096, 4K, 64KiB, 1M)"))?;
    let mult: usize = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?} has an unknown unit (use K, M or G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `4096` -> `4K`, `65536` -> `64K`, otherwise bytes.
pub fn format_size(n: usize) -> String {
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
}
