//! `stripeguard reliability`, run as a user would: the table, `--json` against the paper's
//! formula, the plot, the Monte-Carlo check, and one-line errors with exit 2.

use std::process::{Command, Output};

fn sg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .output()
        .expect("run")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn json_parses_and_matches_the_paper_formula() {
    let out = ok(&sg(&[
        "reliability",
        "--data",
        "8",
        "--parity",
        "2",
        "--afr",
        "2%",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let lambda = -(1.0f64 - 0.02).ln() / 8766.0;
    assert!((v["lambda_per_hour"].as_f64().unwrap() / lambda - 1.0).abs() < 1e-12);
    let models = v["models"].as_array().unwrap();
    let names: Vec<&str> = models
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "never-repaired",
            "repair",
            "+URE",
            "+URE+SDC none",
            "+URE+SDC located"
        ]
    );
    // The paper's exact never-repaired MTTDL: Σ_{i=0..2} 1 / ((10 − i) λ).
    let exact: f64 = (0..=2).map(|i| 1.0 / ((10 - i) as f64 * lambda)).sum();
    let got = models[0]["mttdl_hours"].as_f64().unwrap();
    assert!((got / exact - 1.0).abs() < 1e-12, "{got} vs {exact}");
    // Each loss mode can only shorten the MTTDL; locating silent errors helps from M = 2 on.
    let mttdl: Vec<f64> = models
        .iter()
        .map(|m| m["mttdl_hours"].as_f64().unwrap())
        .collect();
    assert!(mttdl[1] > mttdl[2] && mttdl[2] > mttdl[3] && mttdl[4] > 5.0 * mttdl[3]);
    let rules = v["prescriptive"].as_array().unwrap();
    assert_eq!(rules.len(), 6);
    let k8 = rules.iter().find(|r| r["data"] == 8).unwrap();
    assert_eq!(k8["repair"][2]["variant"], "sdc-none");
    // Locating silent errors never needs more parity than not locating them.
    assert!(k8["repair"][3]["parity"].as_u64() <= k8["repair"][2]["parity"].as_u64());
    assert_eq!(v["curve"].as_array().unwrap().len(), 6);
    assert!(v.get("simulation").is_none());
}

#[test]
fn table_plot_and_simulation() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("mttdl.svg");
    let out = ok(&sg(&[
        "reliability",
        "--data",
        "4",
        "--parity",
        "1",
        "--afr",
        "60%",
        "--rebuild-hours",
        "500",
        "--rule-data",
        "8",
        "--simulate",
        "4000",
        "--plot",
        svg.to_str().unwrap(),
    ]));
    for row in ["never-repaired", "+URE+SDC located", "Monte-Carlo", "K "] {
        assert!(out.contains(row), "{row}: {out}");
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") && text.contains("MTTDL"),
        "not a plot"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let base = ["reliability", "--data", "8", "--parity", "2"];
    for bad in [
        &["--afr", "150%"][..],
        &["--afr", "0"],
        &["--afr", "2"],
        &["--rebuild-hours", "-3"],
        &["--rebuild-hours", "soon"],
        &["--capacity", "4Q"],
        &["--ure", "1.5"],
        &["--ure", "1e300"],
        &["--target-mttdl-years", "-1"],
        &["--scrub-days", "0"],
        &["--target-loss", "2"],
        &["--plot", "mttdl.jpg"],
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(bad);
        let out = sg(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
        // The flag and the value as the user wrote it.
        assert!(err.contains(bad[0]), "{bad:?} not named: {err}");
        assert!(err.contains(bad[1]), "{bad:?} not quoted: {err}");
    }
    let out = sg(&["reliability", "--data", "0", "--parity", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--data"), "{err}");
}
