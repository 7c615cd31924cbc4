//! `kill -9` of a real `stripeguard write` at random moments: the next command that may write
//! resyncs first, `status --check` is then clean, and every chunk reads back as the old or the
//! new file's bytes (a killed process loses nothing that reached the page cache; only the piece
//! in flight may be half-written, and the resync rolls it forward or back — or, when more units
//! of the stripe were interrupted than the parity decides, settles it, reported by an event).
//! The negative control forgets each crash by hand (state byte and intent record) and shows the
//! check then finding inconsistent stripes.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::{ok, sg};
use rand::{Rng, SeedableRng};
use std::process::{Command, Stdio};

#[test]
fn kill_9_during_writes_then_resync_leaves_a_clean_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    let with = |verb: &'static str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![verb.to_string()];
        v.extend(ms.iter().map(|s| s.to_string()));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        sg(&a, d)
    };
    ok(&run(with(
        "create",
        &["--size", "12M", "--chunk", "16K", "--scheme", "hybrid-seq"],
    )));
    let len = 24 << 20;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut old = vec![0u8; len];
    rng.fill(&mut old[..]);
    std::fs::write(d.join("old"), &old).unwrap();
    // The kills land while the write writes, whatever this machine's speed: at a random point
    // of the middle 80 % of the time a whole write of the same size takes here (fixed delays
    // of 2-60 ms landed mostly before the first data write on a slower start, and the negative
    // control then never saw a torn piece).
    let began = std::time::Instant::now();
    ok(&run(with("write", &["-i", "old"])));
    let whole = began.elapsed().as_micros() as u64;
    let mut killed = 0;
    let mut without_resync = 0;
    // Six rounds, and more (at most 60) until one kill has landed between a piece's data and
    // parity writes, which the negative control needs (a window of microseconds per piece).
    let mut round = 0;
    while round < 6 || (without_resync == 0 && round < 60) {
        round += 1;
        let mut new = vec![0u8; len];
        rng.fill(&mut new[..]);
        std::fs::write(d.join("new"), &new).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stripeguard"));
        cmd.args(with("write", &["-i", "new"]))
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Odd rounds stop the writer at a member write chosen here (the test hook of
        // `ops::open_member_paths`: the process aborts before that write, as a kill -9 would
        // stop it there), so some stop between a piece's data and parity writes whatever this
        // machine's load; even rounds kill -9 it at a random time.
        let timed = round % 2 == 0;
        if !timed {
            // 24 MiB in 48 KiB stripes: 512 pieces of 4 unit writes, plus metadata.
            cmd.env(
                "STRIPEGUARD_TEST_ABORT_AFTER_WRITES",
                rng.random_range(200..1800u64).to_string(),
            );
        }
        let mut child = cmd.spawn().unwrap();
        if timed {
            std::thread::sleep(std::time::Duration::from_micros(
                rng.random_range(whole / 10..whole * 9 / 10),
            ));
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        killed += (!status.success()) as usize;
        // Negative control: the same members with the crash forgotten by hand (FORMAT.md §2.1:
        // superblock state byte 43 set to clean and both copies re-sealed; the intent record
        // at 16384, 16 KiB for members this small, zeroed) — a check without a resync.
        for m in ms {
            let mut b = std::fs::read(d.join(m)).unwrap();
            for copy in [0usize, 4096] {
                let sb = &mut b[copy..copy + 4096];
                sb[43] = 0;
                let crc = stripeguard_checksum::crc32c(&sb[..4092]);
                sb[4092..].copy_from_slice(&crc.to_le_bytes());
            }
            b[16384..32768].fill(0);
            std::fs::write(d.join(format!("forgot-{m}")), b).unwrap();
        }
        let forgot: Vec<String> = ms.iter().map(|m| format!("forgot-{m}")).collect();
        let mut args = vec!["status".to_string()];
        args.extend(forgot.iter().cloned());
        args.push("--check".into());
        let fc = run(args);
        let text = String::from_utf8_lossy(&fc.stdout);
        if matches!(fc.status.code(), Some(1) | Some(3)) {
            assert!(
                text.contains("DAMAGED") || text.contains("UNRECOVERABLE"),
                "round {round}: {text}"
            );
            without_resync += 1;
        } else {
            assert_eq!(
                fc.status.code(),
                Some(0),
                "round {round}: {text} {}",
                String::from_utf8_lossy(&fc.stderr)
            );
        }
        for f in &forgot {
            std::fs::remove_file(d.join(f)).unwrap();
        }
        // The array was left open: status says so and its check does not call it damage.
        let st = run(with("status", &["--check"]));
        let text = String::from_utf8_lossy(&st.stdout);
        assert!(!text.contains("DAMAGED"), "round {round}: {text}");
        // A read may write (it repairs), so it resyncs first; then everything reads back.
        let mut back = run(with("read", &["--json", "--length", &len.to_string()]));
        let report = String::from_utf8_lossy(&back.stderr).into_owned();
        // Stripes the resync had to settle (more units interrupted than the parity decides:
        // a unit torn by the kill keeps its mix of old and new blocks, and the blocks that
        // fail their checks are listed untrusted and refused; FORMAT.md §2.4, §2.7).
        let settled: Vec<u64> = report
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|v| v["events"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["kind"] == "resync-settled")
            .filter_map(|e| e["stripe"].as_u64())
            .collect();
        if !back.status.success() {
            // Refused only for listed blocks of settled stripes (the kill's unflushed write):
            // zero-filled by the operator's `clear`, after which everything reads.
            let st = run(with("status", &["--json"]));
            let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
            let listed: Vec<u64> = v["untrusted"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|r| r["stripe"].as_u64())
                .collect();
            assert!(
                !listed.is_empty() && listed.iter().all(|s| settled.contains(s)),
                "round {round}: refused outside settled stripes: {listed:?} settled {settled:?}: {report}"
            );
            for s in &listed {
                ok(&run(with("clear", &["--stripe", &s.to_string()])));
            }
            back = run(with("read", &["--length", &len.to_string()]));
            assert!(
                back.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&back.stderr)
            );
        }
        let back = back.stdout;
        for (i, ((b, o), n)) in back
            .chunks(4096)
            .zip(old.chunks(4096))
            .zip(new.chunks(4096))
            .enumerate()
        {
            if settled.contains(&((i * 4096 / (3 * 16384)) as u64)) {
                continue;
            }
            assert!(
                b == o || b == n,
                "round {round}: 4K block {i} is neither old nor new (bytes matching old {}, new {}); status before: {}; read's report: {}",
                b.iter().zip(o).filter(|(x, y)| x == y).count(),
                b.iter().zip(n).filter(|(x, y)| x == y).count(),
                String::from_utf8_lossy(&st.stdout),
                report
            );
        }
        old = back;
        let clean = run(with("status", &["--check"]));
        assert_eq!(
            clean.status.code(),
            Some(0),
            "round {round}: {}",
            String::from_utf8_lossy(&clean.stdout)
        );
    }
    assert!(
        killed > 0,
        "no write was ever interrupted: the test proves nothing"
    );
    eprintln!(
        "{without_resync} of {round} kills left stripes a check without resync calls damaged"
    );
    assert!(
        without_resync > 0,
        "negative control: without the intent record and resync, no kill ever left an inconsistent stripe"
    );
}

/// The same kills on an array made with `--journal` (FORMAT.md §2.6): after the resync every
/// 16 KiB chunk is entirely the old file's or entirely the new one's, with no exception for
/// settled stripes, and the check is clean.
#[test]
fn kill_9_with_the_write_journal_leaves_whole_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ms = ["m0", "m1", "m2", "m3"];
    let with = |verb: &'static str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![verb.to_string()];
        v.extend(ms.iter().map(|s| s.to_string()));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        sg(&a, d)
    };
    let chunk = 16384;
    ok(&run(with(
        "create",
        &[
            "--size",
            "12M",
            "--chunk",
            "16K",
            "--scheme",
            "hybrid1",
            "--journal",
        ],
    )));
    let st = run(with("status", &["--json"]));
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["write_journal"], true);
    let len = 8 << 20;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut old = vec![0u8; len];
    rng.fill(&mut old[..]);
    std::fs::write(d.join("old"), &old).unwrap();
    ok(&run(with("write", &["-i", "old"])));
    let mut killed = 0;
    for round in 0..6 {
        let mut new = vec![0u8; len];
        rng.fill(&mut new[..]);
        std::fs::write(d.join("new"), &new).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .args(with("write", &["-i", "new"]))
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.random_range(5..150)));
        let _ = child.kill();
        killed += (!child.wait().unwrap().success()) as usize;
        let back = run(with("read", &["--length", &len.to_string()]));
        assert!(
            back.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&back.stderr)
        );
        for (i, ((b, o), n)) in back
            .stdout
            .chunks(chunk)
            .zip(old.chunks(chunk))
            .zip(new.chunks(chunk))
            .enumerate()
        {
            assert!(
                b == o || b == n,
                "round {round}: chunk {i} mixes old and new ({} bytes match old, {} new)",
                b.iter().zip(o).filter(|(x, y)| x == y).count(),
                b.iter().zip(n).filter(|(x, y)| x == y).count(),
            );
        }
        old = back.stdout;
        let clean = run(with("status", &["--check"]));
        assert_eq!(
            clean.status.code(),
            Some(0),
            "round {round}: {}",
            String::from_utf8_lossy(&clean.stdout)
        );
    }
    assert!(
        killed > 0,
        "no write was ever interrupted: the test proves nothing"
    );
}
