//! Round-trip latency of the NBD client: `cargo run --release -p stripeguard-nbd --example
//! latency -- nbd://HOST:PORT/EXPORT [count]` (4 KiB reads and writes at queue depth 1).
use stripeguard_disk::Disk;

fn main() {
    let mut args = std::env::args().skip(1);
    let uri = args.next().expect("usage: latency URI [count]");
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(500);
    let d = stripeguard_nbd::NbdDisk::open(&uri).expect("open");
    let mut buf = vec![0u8; 4096];
    let t = std::time::Instant::now();
    for i in 0..n {
        d.read_at(i * 4096 % d.size_bytes(), &mut buf)
            .expect("read");
    }
    println!(
        "4 KiB read, qd1: {:.1} us",
        t.elapsed().as_secs_f64() / n as f64 * 1e6
    );
    let t = std::time::Instant::now();
    for i in 0..n {
        d.write_at(i * 4096 % d.size_bytes(), &buf).expect("write");
    }
    println!(
        "4 KiB write, qd1: {:.1} us",
        t.elapsed().as_secs_f64() / n as f64 * 1e6
    );
}
