//! Times each layout of the Cauchy product of the given shapes against the dense kernel, on
//! the selected kernel, data in cache: the measurement behind `worth_it` in the codes crate.
//! Usage: layouts [--len BYTES] [--only recursive|cross] [--contig | --huge] K+M ...
//! (`--contig`: inputs in one region, each 64 bytes after the last; `--stride BYTES`: chunk
//! starts that far apart; `--huge`: that region on huge pages)   (default len 4096)
#![allow(
    clippy::cast_possible_truncation,
    reason = "test data: an index pattern reduced to bytes, wrapping on purpose"
)]
use std::time::Instant;
use stripeguard_gf::dyadic::{cauchy_function, dyadic_block, DyadicProgram};
use stripeguard_gf::{Kernel, Mode, MulTables};

fn best_ns(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..7 {
        let reps = 200;
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e9 / reps as f64);
    }
    best
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut len = 4096;
    if let Some(i) = args.iter().position(|a| a == "--len") {
        len = args[i + 1].parse().expect("--len BYTES");
        args.drain(i..i + 2);
    }
    let huge = args.iter().any(|a| a == "--huge");
    let contig = huge || args.iter().any(|a| a == "--contig");
    args.retain(|a| a != "--huge" && a != "--contig");
    let mut stride_arg = None;
    if let Some(i) = args.iter().position(|a| a == "--stride") {
        stride_arg = Some(args[i + 1].parse::<usize>().expect("--stride BYTES"));
        args.drain(i..i + 2);
    }
    let contig = contig || stride_arg.is_some();
    let mut only = None;
    if let Some(i) = args.iter().position(|a| a == "--only") {
        only = Some(args[i + 1].clone());
        args.drain(i..i + 2);
    }
    let kernel = Kernel::selected().expect("kernel");
    let h = cauchy_function();
    for arg in args {
        let (k, m) = arg.split_once('+').expect("K+M");
        let (k, m): (usize, usize) = (k.parse().expect("K"), m.parse().expect("M"));
        let rows: Vec<usize> = (k..k + m).collect();
        let cols: Vec<usize> = (0..k).collect();
        // One 2 MiB-aligned region (transparent huge pages when `--huge`), or one Vec per chunk.
        let stride = stride_arg.unwrap_or(len + 64);
        let mut region: Vec<u8>;
        let x: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..len).map(|b| (i * 31 + b * 7) as u8).collect())
            .collect();
        let xs: Vec<&[u8]> = if contig {
            region = vec![0u8; k * stride + (4 << 20)];
            let base = region.as_mut_ptr();
            let pad = base.align_offset(2 << 20);
            assert!(pad < 2 << 20, "no 2 MiB boundary found in the region");
            if huge {
                // SAFETY: `pad < 2 MiB`, so `pad + k * stride + 2 MiB` stays within the region's
                // `k * stride + 4 MiB` bytes: the range is mapped and ours. MADV_HUGEPAGE is only
                // advice and never changes the contents.
                unsafe {
                    libc::madvise(
                        base.add(pad) as *mut libc::c_void,
                        k * stride + (2 << 20),
                        libc::MADV_HUGEPAGE,
                    );
                }
            }
            for (i, v) in x.iter().enumerate() {
                region[pad + i * stride..pad + i * stride + len].copy_from_slice(v);
            }
            (0..k)
                .map(|i| &region[pad + i * stride..pad + i * stride + len])
                .collect()
        } else {
            x.iter().map(|v| &v[..]).collect()
        };
        let mut y = vec![vec![0u8; len]; m];
        let dense = MulTables::new(&dyadic_block(&h, &rows, &cols));
        let gb = |ns: f64| (k * len) as f64 / ns;
        let d = best_ns(|| {
            let mut ys: Vec<&mut [u8]> = y.iter_mut().map(|v| &mut v[..]).collect();
            kernel.dot(&dense, &xs, &[], &mut ys, Mode::Set);
        });
        print!(
            "{k}+{m} len {len} ({}): dense {:6.2} GB/s",
            kernel.kind(),
            gb(d)
        );
        for (name, p) in [
            (
                "recursive",
                Some(DyadicProgram::recursive(&h, &rows, &cols, false)),
            ),
            ("cross", DyadicProgram::cross(&h, &rows, &cols, false)),
        ] {
            let Some(p) = p else { continue };
            if only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let t = best_ns(|| {
                let mut ys: Vec<&mut [u8]> = y.iter_mut().map(|v| &mut v[..]).collect();
                kernel.dyadic(&p, &xs, &mut ys);
            });
            print!(
                "  {name} {:6.2} GB/s ({:.2}x, cost {:.2})",
                gb(t),
                d / t,
                p.cost() as f64 / (2 * k * m) as f64
            );
        }
        println!();
    }
}
