//! Any bytes as a trace of every format (and detected): never a panic; errors are one line; a
//! request has a length, an end that fits in a u64, and lands inside the array when fitted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_sim::{Fit, TraceFormat, TraceOptions, TraceReader};

fuzz_target!(|data: &[u8]| {
    for format in std::iter::once(None).chain(TraceFormat::ALL.map(Some)) {
        let opts = TraceOptions {
            skip_bad: data.first() == Some(&0),
            ..TraceOptions::default()
        };
        let reader = match TraceReader::new(data, format, opts) {
            Ok(r) => r,
            Err(e) => {
                assert!(!e.to_string().contains('\n'));
                continue;
            }
        };
        for item in reader.take(256) {
            match item {
                Ok(r) => {
                    assert!(r.len > 0);
                    let end = r.offset.checked_add(r.len).expect("end fits in a u64");
                    for fit in [Fit::Wrap, Fit::Scale { extent: end }] {
                        let f = fit.apply(r, 1 << 30);
                        assert!(f.len >= 1 && f.offset + f.len <= 1 << 30);
                    }
                }
                Err(e) => assert!(!e.to_string().contains('\n')),
            }
        }
    }
});
