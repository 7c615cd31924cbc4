//! The NBD client alone under a engine-like load: `cargo run --release -p stripeguard-nbd
//! --example load -- THREADS REQUESTS URI...` — THREADS callers each reading 4 KiB at random
//! offsets of random exports, one request at a time each (the engine's model: a request's
//! thread waits for its member I/O); prints requests per second. Compare with fio's nbd engine
//! at the same number in flight to see what the client's threads and hand-offs cost.
use rand::{Rng, SeedableRng};
use stripeguard_disk::Disk;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).expect("THREADS");
    let requests: u64 = args.next().and_then(|s| s.parse().ok()).expect("REQUESTS");
    let disks: Vec<stripeguard_nbd::NbdDisk> = args
        .map(|u| stripeguard_nbd::NbdDisk::open(&u).expect("open"))
        .collect();
    let blocks = disks[0].size_bytes() / 4096;
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for i in 0..threads {
            let disks = &disks;
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                let mut buf = vec![0u8; 4096];
                for _ in 0..requests / threads as u64 {
                    let d = &disks[rng.random_range(0..disks.len())];
                    d.read_at(rng.random_range(0..blocks) * 4096, &mut buf)
                        .expect("read");
                }
            });
        }
    });
    let secs = t.elapsed().as_secs_f64();
    println!("{threads} callers: {:.0} reads/s", requests as f64 / secs);
}
