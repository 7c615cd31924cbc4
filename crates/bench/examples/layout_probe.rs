//! Ours against ISA-L encoding one shape with the chunks laid out in different ways in memory:
//! one allocation per chunk (what `bench codec` uses), and chunks in one page-aligned region at
//! several strides and misalignments (4 KiB strides map every chunk's column to the same L1 set;
//! misaligned chunks split most 64-byte loads over two cache lines), the two timed in turns.
//! Usage: `cargo run --release -p stripeguard-bench --features isal --example layout_probe --
//! [K M LEN] [--same] [--xor]` (default 64 10 4096; `--same`: every data chunk reads one of two
//! buffers, so the data stays in L1 and only the instructions are timed; `--xor`: time the XOR
//! of the data chunks instead, the ceiling the loads alone set).
#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]
use std::time::Duration;
use stripeguard_bench::timing::best_rates_in_turns;
use stripeguard_codes::{ErasureCode, ReedSolomon};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let same = args.iter().any(|a| a == "--same");
    let xor = args.iter().any(|a| a == "--xor");
    let fail = |msg: String| -> ! {
        eprintln!("layout_probe: {msg} (usage: layout_probe [K M LEN] [--same] [--xor])");
        std::process::exit(2)
    };
    let nums: Vec<usize> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| fail(format!("`{a}` is not a number")))
        })
        .collect();
    let get = |i: usize, d: usize| nums.get(i).copied().unwrap_or(d);
    let (k, m, len) = (get(0, 64), get(1, 10), get(2, 4096));
    let code = ReedSolomon::new(k, m).unwrap_or_else(|e| fail(format!("{k}+{m}: {e}")));
    let isal = stripeguard_isal_ref::Reference::cauchy(k, m);
    let chunks: Vec<Vec<u8>> = (0..k)
        .map(|i| (0..len).map(|b| (i * 7 + b * 13) as u8).collect())
        .collect();
    // (name, stride between chunk starts (0: one allocation each), offset of the first chunk
    // from a page boundary)
    let layouts = [
        ("malloc", 0, 0),
        ("4096", 4096, 0),
        ("4096+64", 4160, 0),
        ("4096+128", 4224, 0),
        ("4096+16", 4112, 16),
        ("4160 +16", 4160, 16),
        ("4176 +16", 4176, 16),
        ("4096 +16", 4096, 16),
    ];
    for (name, stride, offset) in layouts {
        let st = if stride == 0 { len } else { stride.max(len) };
        let mut region = vec![0u8; k * st + 2 * 4096];
        let start = (4096 - region.as_ptr() as usize % 4096) % 4096 + offset;
        for (i, c) in chunks.iter().enumerate() {
            region[start + i * st..start + i * st + len].copy_from_slice(c);
        }
        let at = |i: usize| start + i * st;
        let data: Vec<&[u8]> = if same {
            (0..k)
                .map(|i| &region[at(i % 2)..at(i % 2) + len])
                .collect()
        } else if stride == 0 {
            chunks.iter().map(|c| &c[..]).collect()
        } else {
            (0..k).map(|i| &region[at(i)..at(i) + len]).collect()
        };
        // Each side its own parity buffers, so the two can take turns.
        let mut ours_p = vec![vec![0u8; len]; m];
        let mut theirs_p = vec![vec![0u8; len]; m];
        let mut ours_out: Vec<&mut [u8]> = ours_p.iter_mut().map(|p| &mut p[..]).collect();
        let mut theirs_out: Vec<&mut [u8]> = theirs_p.iter_mut().map(|p| &mut p[..]).collect();
        let (bytes, reps, min_time) = (k * len, 5, Duration::from_millis(40));
        if xor {
            let kernel = *stripeguard_gf::Kernel::selected().expect("a kernel");
            let rate = best_rates_in_turns(
                bytes,
                reps,
                min_time,
                &mut [&mut || kernel.xor(&data, ours_out[0], false)],
            )[0];
            println!("{name:>9}: xor of {k} inputs {:6.2} GB/s", rate / 1e9);
            continue;
        }
        let rates = best_rates_in_turns(
            bytes,
            reps,
            min_time,
            &mut [
                &mut || code.encode(&data, &mut ours_out).unwrap(),
                &mut || isal.encode(&data, &mut theirs_out),
            ],
        );
        println!(
            "{k}+{m} len {len} {name:>9}: ours {:6.2} GB/s  isa-l {:6.2} GB/s  ratio {:.2}",
            rates[0] / 1e9,
            rates[1] / 1e9,
            rates[0] / rates[1]
        );
    }
}
