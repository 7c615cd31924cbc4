//! `stripeguard campaign --simulate`, run as a user would: a range of seeds replays to the same
//! digest, a deliberate defect is found (exit 1, with the command that replays it), and ranges
//! that would run nothing or wrap are refused (exit 2).

mod common;
use common::{err_of, ok, sg};

fn digest(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    v["totals"]["digest"]
        .as_str()
        .expect("a digest")
        .to_string()
}

#[test]
fn a_range_of_seeds_replays_to_the_same_digest() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        ok(&sg(
            &[
                "campaign",
                "--simulate",
                "--seeds",
                "3",
                "--seed",
                "40",
                "--ops",
                "300",
                "--json",
            ],
            dir.path(),
        ))
    };
    let (a, b) = (digest(&run()), digest(&run()));
    assert_eq!(a.len(), 16);
    assert_eq!(a, b);
    let other = ok(&sg(
        &[
            "campaign",
            "--simulate",
            "--seeds",
            "3",
            "--seed",
            "41",
            "--ops",
            "300",
            "--json",
        ],
        dir.path(),
    ));
    assert_ne!(a, digest(&other));
}

#[test]
fn a_sabotaged_engine_is_found_with_its_replay_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = sg(
        &[
            "campaign",
            "--simulate",
            "--seeds",
            "5",
            "--ops",
            "400",
            "--sabotage",
            "broken-repair",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("replay: stripeguard campaign --simulate --seeds 1 --seed ")
            && text.contains("--sabotage broken-repair"),
        "{text}"
    );
    // The same seeds without the defect find nothing.
    ok(&sg(
        &["campaign", "--simulate", "--seeds", "5", "--ops", "400"],
        dir.path(),
    ));
}

#[test]
fn ranges_that_run_nothing_or_wrap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["campaign", "--simulate", "--seeds", "0"],
        vec![
            "campaign",
            "--simulate",
            "--seeds",
            "3",
            "--seed",
            "18446744073709551614",
        ],
        vec!["campaign", "--simulate", "--sabotage", "bogus"],
        vec!["campaign", "--simulate", "--journal"],
    ] {
        let out = sg(&args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", err_of(&out));
        assert!(!err_of(&out).contains("panicked"), "{args:?}");
    }
    // The last seed itself runs.
    let out = ok(&sg(
        &[
            "campaign",
            "--simulate",
            "--seeds",
            "1",
            "--seed",
            "18446744073709551615",
            "--ops",
            "50",
        ],
        dir.path(),
    ));
    assert!(
        out.contains("1 seeds (18446744073709551615..=18446744073709551615), 50 operations"),
        "{out}"
    );
}
