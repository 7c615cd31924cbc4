//! One stripe's worth of member I/O against several NBD exports, as the engine issues it:
//! `cargo run --release -p stripeguard-nbd --example stripe -- [--bytes N] URI...` — one read
//! (then one write) of N bytes (default 64 KiB) per export, all sent at once and collected
//! (`stripeguard_disk::batch`), against the same I/Os one after another; µs per stripe.
use stripeguard_disk::{batch, Disk};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut bytes = 64 << 10;
    if args.first().map(String::as_str) == Some("--bytes") {
        bytes = args[1].parse().expect("--bytes N");
        args.drain(..2);
    }
    let disks: Vec<stripeguard_nbd::NbdDisk> = args
        .iter()
        .map(|u| stripeguard_nbd::NbdDisk::open(u).expect("open"))
        .collect();
    let n = 300u64;
    let mut bufs: Vec<Vec<u8>> = disks.iter().map(|_| vec![7u8; bytes]).collect();
    let span = disks[0].size_bytes() / bytes as u64;
    for write in [false, true] {
        let t = std::time::Instant::now();
        for i in 0..n {
            let at = (i * 7919 % span) * bytes as u64;
            let mut ios: Vec<batch::Io<'_>> = disks
                .iter()
                .zip(bufs.iter_mut())
                .map(|(d, b)| {
                    if write {
                        batch::Io::Write(d as &dyn Disk, at, &b[..])
                    } else {
                        batch::Io::Read(d as &dyn Disk, at, &mut b[..])
                    }
                })
                .collect();
            for r in batch::submit(&mut ios).expect("pipelined") {
                r.expect("io");
            }
        }
        let batched = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        let t = std::time::Instant::now();
        for i in 0..n {
            let at = (i * 7919 % span) * bytes as u64;
            for (d, b) in disks.iter().zip(bufs.iter_mut()) {
                if write {
                    d.write_at(at, b).expect("io");
                } else {
                    d.read_at(at, b).expect("io");
                }
            }
        }
        let serial = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        let what = if write { "write" } else { "read" };
        println!(
            "{} x {bytes} B {what}: {batched:.0} us sent together, {serial:.0} us one after another",
            disks.len()
        );
    }
}
