//! `stripeguard codes metrics`, run as a user would.

use std::process::{Command, Output};

fn sg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .output()
        .expect("run")
}

#[test]
fn metrics_json_has_the_three_codes_with_enumerated_numbers() {
    let out = sg(&["codes", "metrics", "--members", "6", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    let codes: Vec<&str> = rows.iter().map(|r| r["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["raid6", "rdp", "tier"]);
    let rdp = &rows[1];
    assert_eq!(rdp["prime"], 5);
    assert_eq!(rdp["encode_xors"], 6.0);
    assert_eq!(rdp["update_max"], 3);
    assert_eq!(rdp["update_avg"], 2.5625);
    // Tier-code and RAID-6 share md's block layout: the same I/O per request.
    assert_eq!(rows[0]["degraded_read_2"], rows[2]["degraded_read_2"]);
    assert_eq!(rows[0]["write_parity_avg"], rows[2]["write_parity_avg"]);
}

#[test]
fn metrics_table_and_bad_member_counts() {
    let out = sg(&["codes", "metrics", "--members", "8"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("8 members"), "{text}");
    for code in ["raid6", "rdp", "tier"] {
        assert!(text.lines().any(|l| l.starts_with(code)), "{text}");
    }
    for bad in ["3", "33", "x"] {
        let out = sg(&["codes", "metrics", "--members", bad]);
        assert_eq!(out.status.code(), Some(2), "--members {bad}");
        assert!(out.stdout.is_empty());
    }
}
