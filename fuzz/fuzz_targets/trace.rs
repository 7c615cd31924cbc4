//! Any bytes as a trace of every format (and detected): never a panic; requests have a length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_sim::{TraceFormat, TraceOptions, TraceReader};

fuzz_target!(|data: &[u8]| {
    for format in std::iter::once(None).chain(TraceFormat::ALL.map(Some)) {
        let opts = TraceOptions { skip_bad: data.first() == Some(&0), ..TraceOptions::default() };
        if let Ok(r) = TraceReader::new(std::io::Cursor::new(data), format, opts) {
            for req in r.take(256).flatten() {
                assert!(req.len > 0);
            }
        }
    }
});
