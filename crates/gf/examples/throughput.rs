//! Instruction throughput of the GFNI kernel's building blocks on this CPU: an affine product,
//! a two- and a three-way XOR, and mixes of them, each as independent ZMM instructions in a loop;
//! then the load side (vector loads, broadcast products beside loads) and shuffles beside
//! products.
//! These figures are the cost model behind `DyadicProgram::cost` (count instructions, not
//! products). Usage: `cargo run --release -p stripeguard-gf --example throughput`.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::time::Instant;

    const ITERS: u64 = 20_000_000;

    /// Nanoseconds per loop iteration of `f`, best of five.
    fn ns(f: impl Fn()) -> f64 {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e9 / ITERS as f64
            })
            .fold(f64::MAX, f64::min)
    }

    macro_rules! timed {
        ($($body:tt)*) => {
            // SAFETY: the asm touches only the zmm registers it declares clobbered, no memory
            // and no stack (`nostack`); its instructions (AVX-512F, GFNI) are those the
            // `#[target_feature]` function this expands in enables, whose caller checked them.
            ns(|| unsafe {
                for _ in 0..ITERS {
                    asm!($($body)*, out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                        out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                        out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                        out("zmm16") _, out("zmm17") _, options(nostack));
                }
            })
        };
    }

    /// One aligned static buffer: 8 identity matrices, then data (on the stack, loads ran at
    /// half speed, likely checked against the loop's own stack stores).
    #[repr(align(64))]
    struct Lines([u64; 64]);
    static LINES: Lines = {
        let mut l = [0u64; 64];
        let mut i = 0;
        while i < 8 {
            l[i] = 0x0102040810204080;
            i += 1;
        }
        Lines(l)
    };

    /// [`timed!`] with `{d}` = [`LINES`]: matrices at `[{d}]..[{d} + 56]`, data lines from
    /// `[{d} + 64]`. The pointer is moved into the closure: captured by reference it was
    /// reloaded every iteration and halved the loads' rate.
    macro_rules! with_memory {
        ($($body:tt)*) => {{
            let d = LINES.0.as_ptr();
            // SAFETY: as in `timed!`, and the only memory read is `LINES` through `d`, at most
            // `[d + 384]` + 64 bytes, inside its 512.
            ns(move || unsafe {
                for _ in 0..ITERS {
                    asm!($($body)*, d = in(reg) d,
                        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                        out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                        out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                        out("zmm16") _, out("zmm17") _, out("zmm18") _, options(nostack));
                }
            })
        }};
    }

    /// # Safety
    /// The CPU supports AVX-512F and GFNI.
    #[target_feature(enable = "avx512f,gfni")]
    unsafe fn run() {
        // Reported per instruction and relative to one affine product alone (a clock
        // estimate from a chain of adds proved unreliable under this hypervisor).
        let mut base = None;
        let mut per = |name: &str, t: f64, count: f64| {
            let each = t / count;
            let unit = *base.get_or_insert(each);
            println!(
                "{name:44} {each:6.3} ns per instruction ({:.2} of a product)",
                each / unit
            );
        };
        per(
            "12 affine products",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm0, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm1, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm2, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm3, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm4, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm5, zmm16, zmm17, 0",
                ".endr"
            ),
            12.0,
        );
        per(
            "12 two-way XORs",
            timed!(
                ".rept 2",
                "vpxord zmm0, zmm16, zmm17",
                "vpxord zmm1, zmm16, zmm17",
                "vpxord zmm2, zmm16, zmm17",
                "vpxord zmm3, zmm16, zmm17",
                "vpxord zmm4, zmm16, zmm17",
                "vpxord zmm5, zmm16, zmm17",
                ".endr"
            ),
            12.0,
        );
        per(
            // Twelve destinations: vpternlogd also reads its destination, and two to a
            // register made a chain (Zen 5 printed 0.83 of a product that way, 0.6 this way).
            "12 three-way XORs (vpternlogd 0x96)",
            timed!(
                "vpternlogd zmm0, zmm16, zmm17, 0x96",
                "vpternlogd zmm1, zmm16, zmm17, 0x96",
                "vpternlogd zmm2, zmm16, zmm17, 0x96",
                "vpternlogd zmm3, zmm16, zmm17, 0x96",
                "vpternlogd zmm4, zmm16, zmm17, 0x96",
                "vpternlogd zmm5, zmm16, zmm17, 0x96",
                "vpternlogd zmm6, zmm16, zmm17, 0x96",
                "vpternlogd zmm7, zmm16, zmm17, 0x96",
                "vpternlogd zmm8, zmm16, zmm17, 0x96",
                "vpternlogd zmm9, zmm16, zmm17, 0x96",
                "vpternlogd zmm10, zmm16, zmm17, 0x96",
                "vpternlogd zmm11, zmm16, zmm17, 0x96"
            ),
            12.0,
        );
        per(
            "6 products each added to an accumulator",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm6, zmm16, zmm17, 0",
                "vpxord zmm0, zmm0, zmm6",
                "vgf2p8affineqb zmm7, zmm16, zmm17, 0",
                "vpxord zmm1, zmm1, zmm7",
                "vgf2p8affineqb zmm8, zmm16, zmm17, 0",
                "vpxord zmm2, zmm2, zmm8",
                "vgf2p8affineqb zmm9, zmm16, zmm17, 0",
                "vpxord zmm3, zmm3, zmm9",
                "vgf2p8affineqb zmm10, zmm16, zmm17, 0",
                "vpxord zmm4, zmm4, zmm10",
                "vgf2p8affineqb zmm11, zmm16, zmm17, 0",
                "vpxord zmm5, zmm5, zmm11",
                ".endr"
            ),
            24.0,
        );
        per(
            "6 products, pairs added by three-way XORs",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm6, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm7, zmm16, zmm17, 0",
                "vpternlogd zmm0, zmm6, zmm7, 0x96",
                "vgf2p8affineqb zmm8, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm9, zmm16, zmm17, 0",
                "vpternlogd zmm1, zmm8, zmm9, 0x96",
                "vgf2p8affineqb zmm10, zmm16, zmm17, 0",
                "vgf2p8affineqb zmm11, zmm16, zmm17, 0",
                "vpternlogd zmm2, zmm10, zmm11, 0x96",
                ".endr"
            ),
            18.0,
        );
        per(
            "12 affine products, matrix broadcast from memory",
            with_memory!(
                ".rept 2",
                "vgf2p8affineqb zmm0, zmm16, qword ptr [{d}]{{1to8}}, 0",
                "vgf2p8affineqb zmm1, zmm16, qword ptr [{d} + 8]{{1to8}}, 0",
                "vgf2p8affineqb zmm2, zmm16, qword ptr [{d} + 16]{{1to8}}, 0",
                "vgf2p8affineqb zmm3, zmm16, qword ptr [{d} + 24]{{1to8}}, 0",
                "vgf2p8affineqb zmm4, zmm16, qword ptr [{d} + 32]{{1to8}}, 0",
                "vgf2p8affineqb zmm5, zmm16, qword ptr [{d} + 40]{{1to8}}, 0",
                ".endr"
            ),
            12.0,
        );
        per(
            "12 products, 12 three-way XORs (one a product)",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm6, zmm16, zmm17, 0",
                "vpternlogd zmm0, zmm6, zmm17, 0x96",
                "vgf2p8affineqb zmm7, zmm16, zmm17, 0",
                "vpternlogd zmm1, zmm7, zmm17, 0x96",
                "vgf2p8affineqb zmm8, zmm16, zmm17, 0",
                "vpternlogd zmm2, zmm8, zmm17, 0x96",
                "vgf2p8affineqb zmm9, zmm16, zmm17, 0",
                "vpternlogd zmm3, zmm9, zmm17, 0x96",
                "vgf2p8affineqb zmm10, zmm16, zmm17, 0",
                "vpternlogd zmm4, zmm10, zmm17, 0x96",
                "vgf2p8affineqb zmm11, zmm16, zmm17, 0",
                "vpternlogd zmm5, zmm11, zmm17, 0x96",
                ".endr"
            ),
            24.0,
        );
        per(
            "12 products, 12 independent three-way XORs",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm6, zmm16, zmm17, 0",
                "vpternlogd zmm0, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm7, zmm16, zmm17, 0",
                "vpternlogd zmm1, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm8, zmm16, zmm17, 0",
                "vpternlogd zmm2, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm9, zmm16, zmm17, 0",
                "vpternlogd zmm3, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm10, zmm16, zmm17, 0",
                "vpternlogd zmm4, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm11, zmm16, zmm17, 0",
                "vpternlogd zmm5, zmm16, zmm17, 0x96",
                ".endr"
            ),
            24.0,
        );
        // SAFETY: the features `loads_and_shuffles` needs are ours (the same target features).
        unsafe { loads_and_shuffles(&mut per) };
    }

    /// The load side: a product whose matrix is broadcast from memory is also a vector load,
    /// and a shuffle may share the product's ports (on Zen 5 both hold: 2 vector loads and 2
    /// products or shuffles a cycle, so the cross kernel's 39 broadcast products and 8 data
    /// loads a block are bound by loads before products).
    ///
    /// # Safety
    /// The CPU supports AVX-512F and GFNI.
    #[target_feature(enable = "avx512f,gfni")]
    unsafe fn loads_and_shuffles(per: &mut impl FnMut(&str, f64, f64)) {
        per(
            "12 vector loads (64 bytes, aligned)",
            with_memory!(
                ".rept 2",
                "vmovdqu64 zmm0, [{d} + 64]",
                "vmovdqu64 zmm1, [{d} + 128]",
                "vmovdqu64 zmm2, [{d} + 192]",
                "vmovdqu64 zmm3, [{d} + 256]",
                "vmovdqu64 zmm4, [{d} + 320]",
                "vmovdqu64 zmm5, [{d} + 384]",
                ".endr"
            ),
            12.0,
        );
        per(
            "12 broadcast products, 12 sums, 3 vector loads",
            with_memory!(
                ".rept 3",
                "vmovdqu64 zmm18, [{d} + 64]",
                "vgf2p8affineqb zmm0, zmm16, qword ptr [{d}]{{1to8}}, 0",
                "vpternlogd zmm6, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm1, zmm16, qword ptr [{d} + 8]{{1to8}}, 0",
                "vpternlogd zmm7, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm2, zmm16, qword ptr [{d} + 16]{{1to8}}, 0",
                "vpternlogd zmm8, zmm16, zmm17, 0x96",
                "vgf2p8affineqb zmm3, zmm16, qword ptr [{d} + 24]{{1to8}}, 0",
                "vpternlogd zmm9, zmm16, zmm17, 0x96",
                ".endr"
            ),
            27.0,
        );
        per(
            "12 products, 12 shuffles (vpermq)",
            timed!(
                ".rept 2",
                "vgf2p8affineqb zmm0, zmm16, zmm17, 0",
                "vpermq zmm6, zmm16, zmm17",
                "vgf2p8affineqb zmm1, zmm16, zmm17, 0",
                "vpermq zmm7, zmm16, zmm17",
                "vgf2p8affineqb zmm2, zmm16, zmm17, 0",
                "vpermq zmm8, zmm16, zmm17",
                "vgf2p8affineqb zmm3, zmm16, zmm17, 0",
                "vpermq zmm9, zmm16, zmm17",
                "vgf2p8affineqb zmm4, zmm16, zmm17, 0",
                "vpermq zmm10, zmm16, zmm17",
                "vgf2p8affineqb zmm5, zmm16, zmm17, 0",
                "vpermq zmm11, zmm16, zmm17",
                ".endr"
            ),
            24.0,
        );
    }

    pub fn main() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("gfni")) {
            println!("skipped: this CPU has no AVX-512 + GFNI");
            return;
        }
        // SAFETY: the features were detected just above.
        unsafe { run() }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    x86::main();
    #[cfg(not(target_arch = "x86_64"))]
    println!("skipped: x86-64 only");
}
