//! Trace readers reject what is not a trace (issue 17 §2): each case failed before its fix.

mod common;

use common::{err_of, ok, sg};

const MSR: &str = "128166372003061629,rsrch,0,Read,7014609920,24576,41286\n128166372016382155,rsrch,0,Write,4096,8192,1\n";

fn sim(d: &std::path::Path, file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["sim", "--trace", file, "--json"];
    args.extend_from_slice(extra);
    sg(&args, d)
}

fn requests(out: &std::process::Output) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["requests"].as_u64().unwrap()
}

#[test]
fn an_msr_header_line_is_accepted_and_detected() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = format!("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n{MSR}");
    std::fs::write(d.join("h.csv"), text).unwrap();
    let auto = sim(d, "h.csv", &[]);
    ok(&auto);
    assert_eq!(requests(&auto), 2);
    let forced = sim(d, "h.csv", &["--format", "msr"]);
    ok(&forced);
    assert_eq!(requests(&forced), 2);
}

#[test]
fn what_is_not_a_trace_is_an_error_not_a_table_of_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("prose.txt"),
        "It was a bright cold day in April,\nand the clocks were striking thirteen.\n",
    )
    .unwrap();
    std::fs::write(d.join("empty"), "").unwrap();
    std::fs::write(d.join("msr.csv"), MSR).unwrap();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("prose.txt", vec!["--format", "blkparse"]),
        ("prose.txt", vec!["--format", "msr", "--skip-bad"]),
        ("prose.txt", vec!["--format", "spc", "--skip-bad"]),
        ("empty", vec![]),
        ("msr.csv", vec!["--device", "99"]),
        ("msr.csv", vec!["--limit", "0"]),
    ];
    // Exit 4 (nothing to replay), distinct from 2 (bad arguments): a script can tell them apart.
    for (file, extra) in cases {
        let out = sim(d, file, &extra);
        assert_eq!(out.status.code(), Some(4), "{file} {extra:?}: {out:?}");
        let e = err_of(&out);
        assert!(e.contains("no request"), "{file} {extra:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(out.stdout.is_empty(), "{file} {extra:?} printed a table");
    }
    let out = sg(&["sim", "--profile", "TPC-C", "--requests", "0"], d);
    assert_eq!(out.status.code(), Some(4));
    assert!(err_of(&out).contains("0 requests"), "{}", err_of(&out));
    let out = sg(&["choose", "--trace", "empty"], d);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

#[test]
fn the_no_request_error_says_why_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("prose.txt"),
        "It was a bright cold day in April,\nand the clocks were striking thirteen.\n",
    )
    .unwrap();
    std::fs::write(d.join("empty"), "").unwrap();
    std::fs::write(d.join("msr.csv"), MSR).unwrap();
    for (file, extra, want) in [
        (
            "prose.txt",
            vec!["--format", "blkparse"],
            "prose.txt: 0 of 2 lines parsed as blkparse requests; is it really a blkparse trace?",
        ),
        ("empty", vec![], "empty is empty"),
        ("empty", vec!["--format", "msr"], "empty is empty"),
        (
            "msr.csv",
            vec!["--device", "99"],
            "msr.csv: 0 of 2 lines parsed as msr requests of device 99",
        ),
        (
            "msr.csv",
            vec!["--limit", "0"],
            "--limit 0 replays nothing of msr.csv",
        ),
    ] {
        let out = sim(d, file, &extra);
        let e = err_of(&out);
        assert_eq!(
            e.trim_end(),
            format!("stripeguard: error: no request to replay: {want}"),
            "{file} {extra:?}"
        );
    }
}

#[test]
fn a_bad_trace_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.trace"), "1 4 8 16 0\n2 4 oops 16 1\n").unwrap();
    std::fs::write(d.join("prose.txt"), "hello there\n").unwrap();
    let mut bytes = MSR.as_bytes().to_vec();
    bytes.extend_from_slice(b"1281,rsrch,0,Read,\xff\xfe,4096,1\n");
    std::fs::write(d.join("bin.csv"), bytes).unwrap();
    for (file, cause) in [
        ("bad.trace", "lba \"oops\" is not a number"),
        ("prose.txt", "cannot tell the trace format"),
        ("bin.csv", "not UTF-8"),
        ("missing.trace", "No such file"),
    ] {
        let out = sim(d, file, &[]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        let e = err_of(&out);
        assert_eq!(e.matches(cause).count(), 1, "{file}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{file}: {e}");
    }
}

#[test]
fn a_line_that_is_not_utf8_is_a_malformed_line_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut bytes = MSR.as_bytes().to_vec();
    bytes.extend_from_slice(b"1281,rsrch,0,Read,\xff\xfe,4096,1\n");
    bytes.extend_from_slice(MSR.as_bytes());
    std::fs::write(d.join("bin.csv"), bytes).unwrap();
    let out = sim(d, "bin.csv", &[]);
    assert_eq!(out.status.code(), Some(2));
    let e = err_of(&out);
    assert!(e.contains("line 3") && e.contains("UTF-8"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    let skipped = sim(d, "bin.csv", &["--skip-bad"]);
    ok(&skipped);
    assert_eq!(requests(&skipped), 4);
    let v: serde_json::Value = serde_json::from_slice(&skipped.stdout).unwrap();
    assert_eq!(v["fit"]["skipped_bad"], 1);
}

#[test]
fn wrapped_and_clipped_requests_are_counted_and_a_tiny_capacity_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("msr.csv"), MSR).unwrap();
    // 1 MiB of capacity: the first request (offset ~6.5 GiB) wraps.
    let out = sim(d, "msr.csv", &["--capacity", "1M"]);
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["fit"]["wrapped"], 1, "{v}");
    let text = ok(&sg(&["sim", "--trace", "msr.csv", "--capacity", "1M"], d));
    assert!(text.contains("wrapped: 1"), "{text}");
    let out = sim(d, "msr.csv", &["--capacity", "8K"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err_of(&out).contains("smaller than one stripe"),
        "{}",
        err_of(&out)
    );
}

#[test]
fn detection_knows_fractional_disksim_times_and_six_field_msr() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("ds.txt"), "0.125 0 2048 8 0\n1.5 0 4096 8 1\n").unwrap();
    std::fs::write(
        d.join("msr6.csv"),
        "128166372003061629,rsrch,0,Read,7014609920,24576\n128166372016382155,rsrch,0,Write,4096,8192\n",
    )
    .unwrap();
    for f in ["ds.txt", "msr6.csv"] {
        let out = sim(d, f, &[]);
        ok(&out);
        assert_eq!(requests(&out), 2, "{f}");
    }
}
