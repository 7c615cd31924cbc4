//! Honest state for scripts (issue 35 §5): `status` names the states an array is in (`dirty`
//! awaiting resync, `degraded`, `rebuilding`, `untrusted`, `clean`) in its text, its JSON
//! (`state`, `states`) and its exit status, and a holder's live status shows a member an online
//! replace moved. On the landed main before this: after a crash `status` said "dirty" and exited
//! 0, offline `status --json` said `"state": "clean"` for a degraded array, and `serve` called a
//! failed member "1 unit(s) found wrong, 1 repaired" and the array "closed clean".

mod common;

use common::{err_of, ok, sg};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MS: [&str; 4] = ["m0", "m1", "m2", "m3"];

fn args<'a>(verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![verb];
    v.extend(MS);
    v.extend(extra);
    v
}

fn status_json(d: &Path) -> (Option<i32>, serde_json::Value) {
    let out = sg(&args("status", &["--json"]), d);
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", err_of(&out))),
    )
}

#[test]
fn a_crash_leaves_a_dirty_array_and_status_says_so_by_exit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "4M", "--chunk", "4K"]), d));
    let (code, v) = status_json(d);
    assert_eq!((code, v["state"].as_str()), (Some(0), Some("clean")), "{v}");
    std::fs::write(d.join("a"), vec![7u8; 2 << 20]).unwrap();
    // The writer stops at its 40th member write, as kill -9 would stop it there.
    let w = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args("write", &["-i", "a"]))
        .current_dir(d)
        .env("STRIPEGUARD_TEST_ABORT_AFTER_WRITES", "40")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!w.success());
    let (code, v) = status_json(d);
    assert_eq!(code, Some(1), "a dirty array is not a clean bill: {v}");
    assert_eq!(v["state"], "dirty", "{v}");
    assert_eq!(v["shutdown"], "dirty", "{v}");
    let text = ok_or_code(&sg(&args("status", &[]), d), 1);
    assert!(text.contains("DIRTY (not closed cleanly: "), "{text}");
    // A writable assembly resyncs; then it is clean again.
    ok(&sg(&args("scrub", &[]), d));
    let (code, v) = status_json(d);
    assert_eq!((code, v["state"].as_str()), (Some(0), Some("clean")), "{v}");
}

/// A server killed if the test fails before it stops it (it would hold the test's pipes).
struct Killed(Option<std::process::Child>);

impl Killed {
    /// `stripeguard serve` on the array in `d` (its stderr kept for `stop`), listening.
    fn serve(d: &Path) -> Killed {
        let sock = d.join("s.sock");
        let serve = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
            .args(args("serve", &["--socket"]))
            .arg(&sock)
            .current_dir(d)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let serve = Killed(Some(serve));
        let t = Instant::now();
        while !sock.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "serve did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        serve
    }

    fn stop(mut self) -> std::process::Output {
        let c = self.0.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        c.wait_with_output().unwrap()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ok_or_code(out: &std::process::Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "{}", err_of(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_degraded_array_is_degraded_offline_and_in_the_holders_words() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "4M", "--chunk", "4K"]), d));
    std::fs::remove_file(d.join("m2")).unwrap();
    let (code, v) = status_json(d);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["state"], "degraded", "{v}");
    assert!(v["states"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "degraded"));

    // serve on the degraded array: its closing line says so, with no unit found wrong.
    let serve = Killed::serve(d);
    let live = sg(&args("status", &["--json"]), d);
    let v: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    assert_eq!(v["state"], "degraded", "{v}");
    assert_eq!(live.status.code(), Some(1));

    // An online replace: the live status then names the new device for the slot.
    ok(&sg(
        &args("replace", &["--member", "2", "--with", "new2"]),
        d,
    ));
    let text = ok(&sg(&args("status", &[]), d));
    let new2 = std::fs::canonicalize(d.join("new2")).unwrap();
    assert!(
        text.contains(&format!(
            "member 2 is now {} (an online replace): give {} in place of m2",
            new2.display(),
            new2.display()
        )),
        "{text}"
    );
    assert!(text.contains("state: clean"), "{text}");
    let out = serve.stop();
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    // (m2 was gone when the server started: that is a member failure, logged at assembly.)
    assert!(
        last.contains("closed clean (1 member failure(s), 0 unit(s) found wrong, 0 repaired"),
        "{err}"
    );
}

#[test]
fn serve_never_says_closed_clean_for_a_degraded_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "4M", "--chunk", "4K"]), d));
    std::fs::remove_file(d.join("m1")).unwrap();
    let serve = Killed::serve(d);
    let out = serve.stop();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("closed DEGRADED: 1 of 4 members out: 1 (m1)"),
        "{err}"
    );
    assert!(!err.contains("closed clean"), "{err}");
    assert_eq!(out.status.code(), Some(1));
}

/// `examine` reads one member's own metadata without assembling (issue 35 §2), and `status` of
/// an array that cannot be assembled shows what each member says (it printed only an error).
#[test]
fn examine_and_status_show_members_of_an_array_that_cannot_be_assembled() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "4M", "--chunk", "4K"]), d));
    std::fs::write(d.join("a"), vec![3u8; 100_000]).unwrap();
    ok(&sg(&args("write", &["-i", "a"]), d));
    let (_, st) = status_json(d);
    let x: serde_json::Value =
        serde_json::from_str(&ok(&sg(&["examine", "m0", "m3", "--json"], d))).unwrap();
    assert_eq!(x[0]["array_uuid"], st["uuid"], "{x}");
    assert_eq!(
        (x[0]["member_index"].as_u64(), x[1]["member_index"].as_u64()),
        (Some(0), Some(3))
    );
    assert_eq!(x[0]["state"], "clean", "{x}");
    assert!(x[0]["event_count"].as_u64().unwrap() > 0, "{x}");
    assert!(x[0]["last_written_ms"].as_u64().is_some(), "{x}");
    // One copy damaged by hand (FORMAT.md §2.1: copy 0 at byte 0): still examined.
    let mut f = std::fs::File::options()
        .write(true)
        .open(d.join("m3"))
        .unwrap();
    std::io::Write::write_all(&mut f, &[0u8; 64]).unwrap();
    drop(f);
    let text = ok(&sg(&["examine", "m3"], d));
    assert!(
        text.contains("copy 0 INVALID") && text.contains("copy 1 valid"),
        "{text}"
    );
    // m2 leaves, the array writes on without it, an old image of it comes back (stale: it
    // missed those writes), and m1 is gone: RAID-5 cannot assemble; status still says what
    // each member is.
    let old_m2 = std::fs::read(d.join("m2")).unwrap();
    std::fs::remove_file(d.join("m2")).unwrap();
    let w = sg(&args("write", &["-i", "a", "--offset", "200000"]), d);
    assert!(w.status.code().is_some_and(|c| c <= 1), "{}", err_of(&w));
    std::fs::write(d.join("m2"), &old_m2).unwrap();
    std::fs::remove_file(d.join("m1")).unwrap();
    let out = sg(&args("status", &[]), d);
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the array cannot be assembled"), "{text}");
    assert!(
        text.contains("0 m0: member 0 of") && text.contains("(current)"),
        "{text}"
    );
    assert!(text.contains("1 m1: UNREADABLE"), "{text}");
    assert!(
        text.contains("2 m2: member 2 of") && text.contains("(STALE: "),
        "{text}"
    );
}

/// The members of a RAID-6 4+2 array (a seventh for the checksum member), in order.
fn members_of(scheme: &str) -> Vec<String> {
    let n = if scheme == "checksum-chunk" { 7 } else { 6 };
    (0..n).map(|i| format!("m{i}")).collect()
}

/// Where the dead array's three writes go: each in its own region of the write-intent record
/// (64 MiB of data per bit), so that what was written before the first member left sits in a
/// region no later write touched.
const A_AT: u64 = 0;
const B_AT: u64 = 70_000_000;
const C_AT: u64 = 140_000_000;

/// A dead array (issue 35 §2): RAID-6 4+2 of `scheme` loses three members one after another
/// (m3 and m4 recorded as gone while it went on writing, m5 simply gone); m4's old image comes
/// back. Writes: `a` at A_AT before anyone left, `b` at B_AT after m3 left, `c` at C_AT after
/// m4 left. Returns (a, b, c).
fn dead_array(d: &Path, scheme: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let ms = members_of(scheme);
    let with_ms = |verb: &str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![verb.to_string()];
        v.extend(ms.iter().cloned());
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let run = |v: Vec<String>| sg(&v.iter().map(String::as_str).collect::<Vec<_>>(), d);
    ok(&run(with_ms(
        "create",
        &[
            "--size", "48M", "--chunk", "4K", "--level", "6", "--scheme", scheme,
        ],
    )));
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng.to_le_bytes()[0]
            })
            .collect()
    };
    let (a, b, c) = (bytes(3_000_000), bytes(1_000_000), bytes(500_000));
    std::fs::write(d.join("a"), &a).unwrap();
    std::fs::write(d.join("b"), &b).unwrap();
    std::fs::write(d.join("c"), &c).unwrap();
    ok(&run(with_ms(
        "write",
        &["-i", "a", "--offset", &A_AT.to_string()],
    )));
    std::fs::rename(d.join("m3"), d.join("m3.gone")).unwrap();
    let w = run(with_ms(
        "write",
        &["-i", "b", "--offset", &B_AT.to_string()],
    ));
    assert!(w.status.code().is_some_and(|c| c <= 1), "{}", err_of(&w));
    std::fs::copy(d.join("m4"), d.join("m4.image")).unwrap();
    std::fs::rename(d.join("m4"), d.join("m4.gone")).unwrap();
    let w = run(with_ms(
        "write",
        &["-i", "c", "--offset", &C_AT.to_string()],
    ));
    assert!(w.status.code().is_some_and(|c| c <= 1), "{}", err_of(&w));
    std::fs::rename(d.join("m5"), d.join("m5.gone")).unwrap();
    std::fs::rename(d.join("m4.image"), d.join("m4")).unwrap();
    (a, b, c)
}

/// How many bytes of `back` (read from array byte `at` with `--skip-unrecoverable`, whose
/// stderr is `listed`) are `want`'s, and how many are not although no listed range covers them
/// (wrong bytes returned as good: zeros included).
fn verified_and_wrong(back: &[u8], want: &[u8], at: u64, listed: &str) -> (usize, usize) {
    assert_eq!(back.len(), want.len());
    // "  N bytes from byte O: why"
    let refused: Vec<(u64, u64)> = listed
        .lines()
        .filter_map(|l| {
            let (n, rest) = l.trim_start().split_once(" bytes from byte ")?;
            let (o, _) = rest.split_once(':')?;
            Some((o.parse().ok()?, n.parse().ok()?))
        })
        .collect();
    let covered = |i: usize| {
        let b = at + i as u64;
        refused.iter().any(|&(o, n)| b >= o && b < o + n)
    };
    let same = back.iter().zip(want).filter(|(x, y)| x == y).count();
    let wrong = (0..back.len())
        .filter(|&i| back[i] != want[i] && !covered(i))
        .count();
    (same, wrong)
}

/// A dead array brought back read-only (issue 35 §2): it cannot be assembled — the refusal
/// names what `--force-assemble` would bring back — and forced, read-only, it returns every
/// byte it can verify and refuses (lists) the rest: the stripes written after that member
/// left. On the landed main before this, every command refused with the circular advice to
/// replace the stale member.
#[test]
fn a_forced_assembly_returns_every_verifiable_byte_and_lists_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b, c) = dead_array(d, "hybrid-seq");
    let six = ["m0", "m1", "m2", "m3", "m4", "m5"];
    let with6 = |verb: &'static str, extra: &[&str]| -> Vec<String> {
        let mut v = vec![verb.to_string()];
        v.extend(six.iter().map(|x| x.to_string()));
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let run = |v: Vec<String>| sg(&v.iter().map(String::as_str).collect::<Vec<_>>(), d);
    let out = run(with6("status", &[]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err_of(&out).contains("`--force-assemble` would bring back m4"),
        "{}",
        err_of(&out)
    );
    let out = run(with6("read", &["--length", "3000000", "-o", "back"]));
    assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
    // Forced: read-only unless --writable; status shows it; every verifiable byte comes back.
    let out = run(with6("write", &["-i", "a", "--force-assemble"]));
    assert!(
        err_of(&out).contains("--force-assemble is read-only unless --writable"),
        "{}",
        err_of(&out)
    );
    let out = run(with6("status", &["--force-assemble"]));
    assert!(
        err_of(&out).contains(": m4 brought back by a forced assembly"),
        "{}",
        err_of(&out)
    );
    // What was written before anyone left, in a region nothing wrote since: all of it.
    let out = run(with6(
        "read",
        &["--force-assemble", "--length", "3000000", "-o", "back"],
    ));
    ok(&out);
    assert!(
        std::fs::read(d.join("back")).unwrap() == a,
        "verifiable bytes were refused"
    );
    // Written after members left: never a wrong byte; what cannot be verified is listed.
    for (at, want, name) in [(B_AT, &b, "b"), (C_AT, &c, "c")] {
        let out = run(with6(
            "read",
            &[
                "--force-assemble",
                "--offset",
                &at.to_string(),
                "--length",
                &want.len().to_string(),
                "-o",
                "back",
                "--skip-unrecoverable",
            ],
        ));
        assert_eq!(out.status.code(), Some(3), "{name}: {}", err_of(&out));
        let listed = err_of(&out);
        let (_, wrong) =
            verified_and_wrong(&std::fs::read(d.join("back")).unwrap(), want, at, &listed);
        assert_eq!(
            wrong, 0,
            "{name}: a forced assembly returned wrong bytes as good"
        );
        assert!(
            listed.contains("could not be verified and were not returned"),
            "{listed}"
        );
    }
    // Nothing was written: the array is as dead as before.
    assert_eq!(run(with6("status", &[])).status.code(), Some(2));
}

/// A dead array put back in service (issue 35 §2, `--writable`), on every scheme that can
/// verify: the forced member becomes current for good, every stripe is resynced at once, what
/// it cannot verify is listed untrusted, and after the two members still out are replaced the
/// array holds every byte written before the forced member left, refuses (never returns wrong)
/// what came after where it cannot verify it, and says UNTRUSTED. The negative control: scheme
/// `none` is refused a forced assembly (its stale member's old bytes would read as good).
#[test]
fn a_writable_forced_assembly_puts_a_dead_array_back_with_the_unverifiable_listed() {
    for scheme in [
        "hybrid-seq",
        "pure",
        "hybrid1",
        "hybrid2",
        "checksum-chunk",
        "none",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b, c) = dead_array(d, scheme);
        let mut ms = members_of(scheme);
        let run = |verb: &str, ms: &[String], extra: &[&str]| {
            let mut v = vec![verb];
            v.extend(ms.iter().map(String::as_str));
            v.extend(extra);
            sg(&v, d)
        };
        if scheme == "hybrid-seq" {
            // Killed part-way through its resync (as kill -9 would, before its 200th member
            // write): m4 is still stale on disk, so the array needs the forced assembly
            // again, and that one starts over.
            let mut v = vec!["scrub"];
            v.extend(ms.iter().map(String::as_str));
            v.extend(["--force-assemble", "--writable"]);
            let killed = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
                .args(&v)
                .current_dir(d)
                .env("STRIPEGUARD_TEST_ABORT_AFTER_WRITES", "200")
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(!killed.success());
            let out = run("status", &ms, &[]);
            assert_eq!(out.status.code(), Some(2), "{}", err_of(&out));
            assert!(
                err_of(&out).contains("would bring back m4"),
                "{}",
                err_of(&out)
            );
        }
        let out = run(
            "replace",
            &ms,
            // (Stripes too much of which is lost are passed over and stay refused.)
            &[
                "--force-assemble",
                "--writable",
                "--skip-unrecoverable",
                "--member",
                "3",
                "--with",
                "new3",
            ],
        );
        if scheme == "none" {
            assert!(
                err_of(&out).contains("needs an integrity scheme"),
                "{scheme}: {}",
                err_of(&out)
            );
            continue;
        }
        assert!(
            matches!(out.status.code(), Some(0 | 3))
                && String::from_utf8_lossy(&out.stdout).contains("from now on give"),
            "{scheme}: {:?} {} {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            err_of(&out)
        );
        assert!(err_of(&out).contains(": m4 brought back by a forced assembly"));
        ms[3] = "new3".into();
        // Permanent: a plain assembly takes m4 as current now.
        let out = run(
            "replace",
            &ms,
            &["--member", "5", "--with", "new5", "--skip-unrecoverable"],
        );
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{scheme}: {}",
            err_of(&out)
        );
        ms[5] = "new5".into();
        let st = run("status", &ms, &["--json"]);
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        assert_eq!(st.status.code(), Some(3), "{scheme}: {v}");
        assert!(
            v["states"].to_string().contains("untrusted"),
            "{scheme}: {v}"
        );
        let ev = ok(&run("events", &ms, &["--json"]));
        assert!(
            ev.contains("\"kind\":\"forced-assembly\""),
            "{scheme}: not durable"
        );
        // Member events name the device, not only a path that can name another disk later.
        let replaced = ev
            .split("},{")
            .find(|e| e.contains("replace-started") && e.contains("onto new5"))
            .unwrap_or_default();
        assert!(
            replaced.contains("file on device ") && replaced.contains(", inode "),
            "{scheme}: {replaced}"
        );
        // Written before anyone left: all of it, as current data.
        let out = run("read", &ms, &["--length", "3000000", "-o", "early"]);
        ok(&out);
        assert!(std::fs::read(d.join("early")).unwrap() == a, "{scheme}");
        // Written after: never a wrong byte, what cannot be verified listed.
        for (at, want, name) in [(B_AT, &b, "b"), (C_AT, &c, "c")] {
            let out = run(
                "read",
                &ms,
                &[
                    "--offset",
                    &at.to_string(),
                    "--length",
                    &want.len().to_string(),
                    "-o",
                    "late",
                    "--skip-unrecoverable",
                ],
            );
            assert!(
                matches!(out.status.code(), Some(0 | 3)),
                "{scheme} {name}: {}",
                err_of(&out)
            );
            let (_, wrong) = verified_and_wrong(
                &std::fs::read(d.join("late")).unwrap(),
                want,
                at,
                &err_of(&out),
            );
            assert_eq!(wrong, 0, "{scheme} {name}: wrong bytes returned as good");
        }
        // A listed range goes when the operator zero-fills it (`clear`, a write through the
        // ordinary path); its stripe then reads, the range as zeros.
        let stripe = v["untrusted"][0]["stripe"]
            .as_u64()
            .unwrap_or_else(|| panic!("{scheme}: no listed range: {v}"));
        let out = run("clear", &ms, &["--stripe", &stripe.to_string()]);
        assert!(out.status.success(), "{scheme}: {}", err_of(&out));
        let out = run(
            "read",
            &ms,
            &[
                "--offset",
                &(stripe * 16384).to_string(),
                "--length",
                "16384",
                "-o",
                "s2",
            ],
        );
        assert!(out.status.success(), "{scheme}: {}", err_of(&out));
    }
}

/// Ctrl-C on an offline scrub (issue 35 §5, from the last session's note): it stops at the next
/// stripe, saves its position and closes the array clean — exit 130, `status` says the scrub
/// was interrupted but not that the array is dirty, and the next scrub resumes. Before this,
/// SIGINT killed the process mid-write and left the array dirty for a resync.
#[test]
fn ctrl_c_stops_a_scrub_clean_and_the_next_one_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "16M"]), d));
    // Data to read: a zero stripe (FORMAT.md §2.7) costs the rate nothing.
    std::fs::write(d.join("A"), vec![0x5au8; 16 << 20]).unwrap();
    ok(&sg(&args("write", &["-i", "A"]), d));
    // Rate-limited so it is still running when the signal comes (about 10 s in all).
    let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args("scrub", &["--rate", "5"]))
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("the array is closed clean"), "{err}");
    let (code, v) = status_json(d);
    assert_eq!(v["shutdown"], "clean", "{v}");
    assert!(v["states"].to_string().contains("scrub-interrupted"), "{v}");
    // An unfinished scrub is news, not an alarm: the exit status stays 0.
    assert_eq!(code, Some(0), "{v}");
    let text = ok(&sg(&args("scrub", &[]), d));
    assert!(
        text.contains("resumed an interrupted scrub at stripe"),
        "{text}"
    );
}

/// A replace onto a device full of old bytes: its metadata regions are zeroed before it joins,
/// so a metadata scrub afterwards finds nothing there (an outside tester found 321 "damaged"
/// intent and event-log copies on the new member before), and the data reads back.
#[test]
fn a_replace_onto_old_bytes_leaves_no_damaged_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&args("create", &["--size", "16M", "--chunk", "4K"]), d));
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11).to_le_bytes()[0])
        .collect();
    std::fs::write(d.join("A"), &data).unwrap();
    ok(&sg(&args("write", &["-i", "A"]), d));
    let noise: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(40503) >> 7).to_le_bytes()[0] | 1)
        .collect();
    std::fs::write(d.join("new"), &noise).unwrap();
    ok(&sg(
        &args("replace", &["--member", "2", "--with", "new", "--force"]),
        d,
    ));
    let members = ["m0", "m1", "new", "m3"];
    let check = sg(
        &[&["scrub"][..], &members, &["--check-only", "--json"]].concat(),
        d,
    );
    let report = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        &report[..report.len().min(600)]
    );
    let back = sg(
        &[&["read"][..], &members, &["--length", "3000000"]].concat(),
        d,
    );
    assert!(back.stdout == data, "the data came back different");
}
