//! The write journal on a journal device (issue 38 §3, FORMAT.md §2.12), as a user runs it:
//! `create --journal --journal-device`, the device given among the members to `serve`, a
//! libnbd writer killed with the server (kill -9) mid-write, and everything flushed before the
//! kill read back; the device missing at the next assembly is lost, said, and the array goes on.

mod common;
#[macro_use]
mod nbd_common;

use common::{err_of, ok, sg};
use nbd_common::*;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn with<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MEMBERS);
    v.extend(extra);
    v
}

fn serve(dir: &Path) -> Served {
    let mut args = MEMBERS.to_vec();
    args.push("j0");
    serve_with(dir, &args)
}

/// Chunk-sized writes, each a pattern of its index and round; a flush every 4, the index of
/// the last write a flush covered printed after the flush returns.
const WRITER: &str = r#"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
n = h.get_size() // 65536
r = 0
while True:
    r += 1
    for i in range(n):
        h.pwrite(bytes([(i * 7 + r) % 251]) * 65536, i * 65536)
        if i % 4 == 3:
            h.flush()
            print(r, i, flush=True)
"#;

#[test]
fn a_served_array_with_a_journal_device_keeps_every_flushed_write_across_kill_9() {
    need!("nbdinfo");
    if !have_libnbd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(
        &with(
            "create",
            &[
                "--size",
                "16M",
                "--journal",
                "--journal-device",
                "j0",
                "--chunk",
                "64K",
            ],
        ),
        d,
    ));
    for kill_after_ms in [700u64, 1300] {
        let s = serve(d);
        let mut w = Command::new(python())
            .args(["-c", WRITER, &s.uri])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = w.stdout.take().unwrap();
        let lines = std::thread::spawn(move || {
            std::io::BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        s.kill9();
        let _ = w.kill();
        let _ = w.wait();
        let lines = lines.join().unwrap();
        let last = lines.last().expect("the writer flushed something").clone();
        let mut it = last.split(' ').map(|x| x.parse::<u64>().unwrap());
        let (round, upto) = (it.next().unwrap(), it.next().unwrap());
        // Reassembled with the journal device: the resync replays it first.
        let st = sg(&with("status", &["j0", "--json"]), d);
        let v: serde_json::Value =
            serde_json::from_slice(&st.stdout).unwrap_or_else(|e| panic!("{e}: {}", err_of(&st)));
        assert_eq!(v["journal_devices"][0]["lost"], false, "{v}");
        let cap = v["capacity_bytes"].as_u64().unwrap();
        let out = sg(&with("read", &["j0"]), d);
        ok(&out);
        assert_eq!(out.stdout.len() as u64, cap);
        for (i, chunk) in (0u64..).zip(out.stdout.chunks(65536)) {
            let of = |r: u64| ((i * 7 + r) % 251).to_le_bytes()[0];
            // Flushed in this round: its bytes. Otherwise this round's or the last one's, whole.
            let want: Vec<u8> = if i <= upto {
                vec![of(round)]
            } else {
                vec![of(round), of(round - 1), 0]
            };
            assert!(
                want.iter().any(|&b| chunk.iter().all(|&x| x == b)),
                "kill after {kill_after_ms} ms (round {round}, flushed up to {upto}): chunk {i} reads {:?}..., not {want:?} whole",
                &chunk[..8]
            );
        }
    }
    // Without the journal device: it is lost (said), the array goes on, the data stays.
    let out = sg(&with("read", &["--length", "65536"]), d);
    ok(&out);
    let ev = ok(&sg(&with("events", &[]), d));
    assert!(ev.contains("journal-device-lost"), "{ev}");
    let st = ok(&sg(&with("status", &["j0"]), d));
    assert!(st.contains("journal device 0: LOST"), "{st}");
}

#[test]
fn another_arrays_journal_device_is_never_taken_or_used_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = ["a0", "a1", "a2", "a3"];
    let b = ["b0", "b1", "b2", "b3"];
    let args = |names: &[&'static str], rest: &[&'static str]| -> Vec<&'static str> {
        let mut v = vec!["create"];
        v.extend(names);
        v.extend(["--size", "16M", "--journal"]);
        v.extend(rest);
        v
    };
    ok(&sg(&args(&a, &["--journal-device", "jA"]), d));
    ok(&sg(&args(&b, &["--journal-device", "jB"]), d));
    // Creating over A's journal device, or keeping it as B's spare: refused without
    // --force-take, naming whose it is.
    for cmd in [
        args(&["c0", "c1", "c2", "c3"], &["--journal-device", "jA"]),
        vec!["add-spare", "b0", "b1", "b2", "b3", "jB", "--spare", "jA"],
    ] {
        let e = sg(&cmd, d);
        assert_eq!(e.status.code(), Some(2), "{cmd:?}");
        assert!(
            err_of(&e).contains("is the journal device of stripeguard array"),
            "{cmd:?}: {}",
            err_of(&e)
        );
    }
    // A's journal device given to B: refused (B's own would otherwise be missed, and lost).
    let e = sg(&["status", "b0", "b1", "b2", "b3", "jA"], d);
    assert_eq!(e.status.code(), Some(2));
    assert!(
        err_of(&e).contains("is the journal device of another array"),
        "{}",
        err_of(&e)
    );
    let st = ok(&sg(&["status", "b0", "b1", "b2", "b3", "jB"], d));
    assert!(!st.contains("LOST"), "{st}");
    // Without it, read-only: not given (nothing marked); the array's own is found again.
    let st = ok(&sg(&["status", "b0", "b1", "b2", "b3"], d));
    assert!(st.contains("journal device 0: not given"), "{st}");
    let st = ok(&sg(&["status", "b0", "b1", "b2", "b3", "jB"], d));
    assert!(!st.contains("LOST") && !st.contains("not given"), "{st}");
}
