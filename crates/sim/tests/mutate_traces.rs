//! Mutation harness for the trace readers (stable toolchain): lines of every format, from the
//! shared traces and from each format's own shape, mutated (bit flips, truncations, splices,
//! swapped fields, non-UTF-8 bytes) and read with every format and with detection. The readers
//! must never panic, and every request they accept must have a length.

use proptest::prelude::*;
use stripeguard_sim::{TraceFormat, TraceOptions, TraceReader};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1000)
}

fn seeds() -> Vec<String> {
    let mut v = vec![
        "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime".to_string(),
        "128166372003061629,rsrch,0,Read,7014609920,24576,41286".to_string(),
        "0,20941264,8192,W,0.551706".to_string(),
        "0.125 0 2048 8 0".to_string(),
        "8,0 3 1 0.000000000 697 D WS 223490 + 8 [jbd2/sda1-8]".to_string(),
        "fio version 2 iolog".to_string(),
        "/dev/x write 0 4096".to_string(),
        "fio version 3 iolog".to_string(),
        "12 /dev/x read 8192 512".to_string(),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    for f in ["tpcc-small.trace", "wsrch-small.trace"] {
        if let Ok(t) = std::fs::read_to_string(dir.join(f)) {
            v.extend(t.lines().take(20).map(String::from));
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_trace_lines_never_panic(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..6),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
        swap in any::<bool>(),
        skip_bad in any::<bool>(),
    ) {
        let seeds = seeds();
        let mut lines: Vec<Vec<u8>> = picks.iter().map(|i| i.get(&seeds).clone().into_bytes()).collect();
        if swap {
            // Swap two fields of the first line (commas or spaces).
            let s = String::from_utf8_lossy(&lines[0]).into_owned();
            let sep = if s.contains(',') { ',' } else { ' ' };
            let mut f: Vec<&str> = s.split(sep).collect();
            if f.len() > 2 {
                let last = f.len() - 1;
                f.swap(1, last);
            }
            lines[0] = f.join(&sep.to_string()).into_bytes();
        }
        let mut bytes: Vec<u8> = lines.join(&b'\n');
        bytes.push(b'\n');
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        if let Some(c) = cut {
            let c = c.index(bytes.len() + 1);
            bytes.truncate(c);
        }
        let formats = std::iter::once(None).chain(TraceFormat::ALL.map(Some));
        for format in formats {
            let opts = TraceOptions { skip_bad, ..TraceOptions::default() };
            if let Ok(reader) = TraceReader::new(std::io::Cursor::new(bytes.clone()), format, opts) {
                for r in reader.take(64).flatten() {
                    prop_assert!(r.len > 0);
                }
            }
        }
    }
}
