//! Mutation harness for the trace readers (stable toolchain): lines of every format, from the
//! shared traces and from each format's own shape, mutated (bit flips, truncations, splices of
//! two lines, swapped fields, non-UTF-8 bytes) and read with every format and with detection.
//!
//! Properties: the readers never panic; an error is one line; every request they accept has a
//! length, an end that fits in a `u64`, re-reads as itself when written back in its format, and
//! lands inside the array under either fit; with `skip_bad`, every line read is a request, a
//! line that is not one, or a skipped malformed line.
//!
//! Bounded: `PROPTEST_CASES` cases (default 1000, about a second); `scripts/test` runs more.

use proptest::prelude::*;
use stripeguard_plan::Op;
use stripeguard_sim::{Fit, Request, TraceFormat, TraceOptions, TraceReader};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1000)
}

fn seeds() -> Vec<String> {
    let mut v: Vec<String> = [
        "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
        "128166372003061629,rsrch,0,Read,7014609920,24576,41286",
        "128166372016382155,rsrch,1,Write,4096,512",
        "0,20941264,8192,W,0.551706",
        "1,8,4096,r,0.6,extra",
        "0.125 0 2048 8 0",
        "938513000 4 264719034 16 1",
        "  8,0    3        1     0.000000000  1234  Q   W 2048 + 8 [dd]",
        "8,0 3 1 0.000000000 697 D WS 223490 + 8 [jbd2/sda1-8]",
        "  8,0    1        4     0.000003000  99  D   FN 0 + 0 [kworker]",
        "CPU0 (8,0):",
        "fio version 2 iolog",
        "/dev/x add",
        "/dev/x write 0 4096",
        "fio version 3 iolog",
        "12 /dev/x read 8192 512",
        "# a comment",
        "",
    ]
    .map(String::from)
    .to_vec();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    for f in ["tpcc-small.trace", "wsrch-small.trace"] {
        if let Ok(t) = std::fs::read_to_string(dir.join(f)) {
            v.extend(t.lines().take(20).map(String::from));
        }
    }
    v
}

/// `r` written back as one trace of `format` (with its header line where it has one).
fn write_back(format: TraceFormat, r: &Request) -> String {
    let (w, sectors) = (r.op == Op::Write, |x: u64| x / 512);
    match format {
        TraceFormat::Msr => format!(
            "1,h,0,{},{},{},1\n",
            if w { "Write" } else { "Read" },
            r.offset,
            r.len
        ),
        TraceFormat::Spc => format!(
            "0,{},{},{},0.5\n",
            sectors(r.offset),
            r.len,
            if w { "W" } else { "R" }
        ),
        TraceFormat::Disksim => format!(
            "1 0 {} {} {}\n",
            sectors(r.offset),
            sectors(r.len),
            if w { 0 } else { 1 }
        ),
        TraceFormat::Blkparse => format!(
            "8,0 0 1 0.0 1 D {} {} + {} [x]\n",
            if w { "W" } else { "R" },
            sectors(r.offset),
            sectors(r.len)
        ),
        TraceFormat::FioV2 => format!(
            "fio version 2 iolog\n/dev/x {} {} {}\n",
            if w { "write" } else { "read" },
            r.offset,
            r.len
        ),
        TraceFormat::FioV3 => format!(
            "fio version 3 iolog\n0 /dev/x {} {} {}\n",
            if w { "write" } else { "read" },
            r.offset,
            r.len
        ),
    }
}

/// Read `bytes` as `format` (or detected) and check every property.
fn check(bytes: &[u8], format: Option<TraceFormat>, skip_bad: bool) -> Result<(), TestCaseError> {
    let opts = TraceOptions {
        skip_bad,
        ..TraceOptions::default()
    };
    let mut reader = match TraceReader::new(bytes, format, opts) {
        Ok(r) => r,
        Err(e) => {
            prop_assert!(!e.to_string().contains('\n'), "{}", e);
            return Ok(());
        }
    };
    let used = reader.format();
    let lines = bytes.split(|&b| b == b'\n').count() as u64;
    for item in reader.by_ref() {
        let r = match item {
            Ok(r) => r,
            Err(e) => {
                prop_assert!(!skip_bad, "skip_bad returned an error: {}", e);
                prop_assert!(!e.to_string().contains('\n'), "{}", e);
                return Ok(());
            }
        };
        prop_assert!(r.len > 0);
        let end = r.offset.checked_add(r.len);
        prop_assert!(end.is_some(), "{:?} ends past 2^64", r);
        let again: Vec<_> = TraceReader::new(
            write_back(used, &r).as_bytes(),
            Some(used),
            TraceOptions::default(),
        )
        .expect("a written-back trace opens")
        .collect::<Result<_, _>>()
        .map_err(|e| TestCaseError::fail(format!("{used:?} {r:?} written back: {e}")))?;
        prop_assert_eq!(again, vec![r], "{:?} round trip", used);
        for capacity in [512u64, 24_576, 1 << 30, u64::MAX / 2] {
            for fit in [
                Fit::Wrap,
                Fit::Scale {
                    extent: end.unwrap(),
                },
            ] {
                let f = fit.apply(r, capacity);
                prop_assert!(f.len >= 1 && f.len <= r.len, "{:?} {:?}", fit, f);
                prop_assert!(f.offset.checked_add(f.len).is_some_and(|e| e <= capacity));
            }
        }
    }
    prop_assert!(reader.lines_read() <= lines);
    if skip_bad {
        prop_assert_eq!(
            reader.yielded() + reader.ignored + reader.skipped_bad,
            reader.lines_read()
        );
    }
    Ok(())
}

/// One mutation of a trace's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR a byte.
    Flip(prop::sample::Index, u8),
    /// Insert a byte (a separator, a digit, a byte that is not UTF-8, anything).
    Insert(prop::sample::Index, u8),
    /// Cut the rest.
    Truncate(prop::sample::Index),
    /// Swap two fields of one line (comma- or space-separated).
    SwapFields(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
    ),
    /// The head of one line joined to the tail of another.
    Splice(
        prop::sample::Index,
        prop::sample::Index,
        prop::sample::Index,
    ),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::Index;
    let byte = prop_oneof![
        any::<u8>(),
        prop::sample::select(b", \n+0123456789-.\xff\xc3".to_vec())
    ];
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, x)| Mutation::Flip(i, x)),
        (any::<Index>(), byte).prop_map(|(i, x)| Mutation::Insert(i, x)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(l, a, b)| Mutation::SwapFields(l, a, b)),
        (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, at)| Mutation::Splice(a, b, at)),
    ]
}

fn apply(bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let mut bytes = bytes;
    let lines = || -> Vec<Vec<u8>> { bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect() };
    match m {
        Mutation::Flip(at, x) if !bytes.is_empty() => {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
            bytes
        }
        Mutation::Insert(at, x) => {
            let i = at.index(bytes.len() + 1);
            bytes.insert(i, *x);
            bytes
        }
        Mutation::Truncate(at) => {
            bytes.truncate(at.index(bytes.len() + 1));
            bytes
        }
        Mutation::SwapFields(l, a, b) => {
            let mut ls = lines();
            let line = l.get(&ls).clone();
            let sep = if line.contains(&b',') { b',' } else { b' ' };
            let mut f: Vec<&[u8]> = line.split(|&c| c == sep).collect();
            let (i, j) = (a.index(f.len()), b.index(f.len()));
            f.swap(i, j);
            let k = l.index(ls.len());
            ls[k] = f.join(&sep);
            ls.join(&b'\n')
        }
        Mutation::Splice(a, b, at) => {
            let mut ls = lines();
            let (x, y) = (a.get(&ls).clone(), b.get(&ls).clone());
            let cut = at.index(x.len().min(y.len()) + 1);
            let k = a.index(ls.len());
            ls[k] = [&x[..cut], &y[cut..]].concat();
            ls.join(&b'\n')
        }
        _ => bytes,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_traces_never_panic_and_what_they_yield_is_a_request(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..6),
        mutations in prop::collection::vec(mutation(), 0..5),
        skip_bad in any::<bool>(),
    ) {
        let seeds = seeds();
        let lines: Vec<&[u8]> = picks.iter().map(|i| i.get(&seeds).as_bytes()).collect();
        let mut bytes = lines.join(&b'\n');
        bytes.push(b'\n');
        for m in &mutations {
            bytes = apply(bytes, m);
        }
        check(&bytes, None, skip_bad)?;
        for format in TraceFormat::ALL {
            check(&bytes, Some(format), skip_bad)?;
        }
    }

    /// Numbers at the edges of 64 bits in every numeric field of every format.
    #[test]
    fn edge_numbers_are_requests_in_bounds_or_malformed_lines(
        a in prop_oneof![Just(0u64), Just(1), Just(511), Just(u64::MAX / 512), Just(u64::MAX / 512 + 1), Just(u64::MAX - 1), Just(u64::MAX), any::<u64>()],
        b in prop_oneof![Just(0u64), Just(1), Just(512), Just(u64::MAX / 512 + 1), Just(u64::MAX), any::<u64>()],
        skip_bad in any::<bool>(),
    ) {
        let texts = [
            format!("1,h,0,Write,{a},{b},1\n"),
            format!("0,{a},{b},W,0.5\n"),
            format!("1 0 {a} {b} 0\n"),
            format!("8,0 0 1 0.0 1 D R {a} + {b} [x]\n"),
            format!("fio version 2 iolog\n/dev/x read {a} {b}\n"),
            format!("fio version 3 iolog\n{a} /dev/x write {b} {a}\n"),
        ];
        for (text, format) in texts.iter().zip(TraceFormat::ALL) {
            check(text.as_bytes(), Some(format), skip_bad)?;
            check(text.as_bytes(), None, skip_bad)?;
        }
    }
}
