//! `stripeguard sim`, `choose` and the figures, run as a user would.

use std::path::Path;
use std::process::{Command, Output};

fn sg(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn shared_trace() -> Option<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/tpcc-small.trace");
    if p.exists() {
        Some(p.display().to_string())
    } else {
        eprintln!("skipping the shared-trace part: {} not found", p.display());
        None
    }
}

#[test]
fn sim_on_the_shared_trace_json_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let Some(trace) = shared_trace() else { return };
    let out = ok(&sg(
        &[
            "sim", "--trace", &trace, "--level", "6", "--disks", "8", "--chunk", "4K", "--json",
        ],
        dir.path(),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 6999);
    let rows = v["schemes"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0]["scheme"], "none");
    assert_eq!(rows[0]["increase_pct"], 0.0);
    for r in &rows[1..] {
        assert!(r["increase_pct"].as_f64().unwrap() > 0.0, "{r}");
    }
    let csv = ok(&sg(
        &["sim", "--trace", &trace, "--csv", "--schemes", "hybrid2"],
        dir.path(),
    ));
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("scheme,disk_reads"));
    assert_eq!(
        lines.len(),
        3,
        "none is always included as the baseline: {csv}"
    );
}

#[test]
fn every_trace_format_through_the_cli_and_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = [
        ("msr.csv", "128166372003061629,rsrch,0,Read,7014609920,24576,41286\n128166372016382155,rsrch,0,Write,4096,8192,1\n128166372016382155,rsrch,1,Write,4096,8192,1\n"),
        ("spc.csv", "0,20941264,8192,W,0.551706\n0,8,4096,r,0.6\n"),
        ("blk.txt", "  8,0    3        1     0.000000000  1234  Q   W 2048 + 8 [dd]\n  8,0    3        2     0.000001000  1234  D   W 2048 + 8 [dd]\n  8,0    1        3     0.000002000  99  D   R 64 + 16 [x]\n"),
        ("fio.log", "fio version 2 iolog\n/dev/x add\n/dev/x open\n/dev/x write 0 4096\n/dev/x read 8192 512\n/dev/x close\n"),
    ];
    for (name, text) in files {
        std::fs::write(d.join(name), text).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&ok(&sg(&["sim", "--trace", name, "--json"], d))).unwrap();
        let want = if name == "msr.csv" { 3 } else { 2 };
        assert_eq!(v["requests"], want, "{name}: {v}");
    }
    // Device selection.
    let v: serde_json::Value = serde_json::from_str(&ok(&sg(
        &["sim", "--trace", "msr.csv", "--device", "1", "--json"],
        d,
    )))
    .unwrap();
    assert_eq!(v["requests"], 1);
    // A malformed line is an error naming its line; --skip-bad skips and counts it.
    std::fs::write(
        d.join("bad.trace"),
        "1 4 8 16 0\n2 4 oops 16 1\n3 4 8 16 1\n",
    )
    .unwrap();
    let out = sg(&["sim", "--trace", "bad.trace"], d);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{out:?}"
    );
    let text = ok(&sg(&["sim", "--trace", "bad.trace", "--skip-bad"], d));
    assert!(text.contains("1 malformed lines skipped"), "{text}");
    // Missing file, unknown profile: one-line errors.
    let out = sg(&["sim", "--trace", "nope.trace"], d);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.trace"));
    let out = sg(&["sim", "--profile", "nope"], d);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown profile"));
}

#[test]
fn profiles_and_choose() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let list = ok(&sg(&["sim", "--list-profiles"], d));
    assert_eq!(list.lines().count(), 13);
    let v: serde_json::Value = serde_json::from_str(&ok(&sg(
        &["sim", "--profile", "TPC-E", "--requests", "20000", "--json"],
        d,
    )))
    .unwrap();
    assert_eq!(v["requests"], 20000);
    // The rule alone.
    let small = ok(&sg(&["choose", "--avg-write", "8K", "--chunk", "4K"], d));
    assert!(small.contains("→ hybrid1"), "{small}");
    let large = ok(&sg(&["choose", "--avg-write", "64K", "--chunk", "4K"], d));
    assert!(large.contains("→ hybrid2"), "{large}");
    // With a workload: the simulated winner, runner-up and margin.
    let sim: serde_json::Value = serde_json::from_str(&ok(&sg(
        &[
            "choose",
            "--profile",
            "DAP-PS",
            "--requests",
            "20000",
            "--json",
        ],
        d,
    )))
    .unwrap();
    let ranked = sim["simulated"].as_array().unwrap();
    assert_eq!(ranked.len(), 4);
    assert!(ranked[0]["total"].as_u64() <= ranked[1]["total"].as_u64());
    assert_eq!(sim["rule"]["scheme"], "hybrid2");
    // create --scheme auto uses the same rule.
    let members: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let mut args = vec!["create"];
    args.extend(members.iter().map(|s| s.as_str()));
    args.extend([
        "--size",
        "1M",
        "--chunk",
        "4K",
        "--scheme",
        "auto",
        "--avg-write",
        "4K",
    ]);
    let out = ok(&sg(&args, d));
    assert!(out.contains("scheme hybrid1"), "{out}");
}

#[test]
fn figures_are_written_as_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let font = Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    if !font.exists() {
        eprintln!(
            "skipping: {} missing (scripts/install-deps installs fonts-dejavu-core)",
            font.display()
        );
        return;
    }
    ok(&sg(
        &[
            "sim", "--figure", "tau", "--level", "5", "--disks", "8", "--out", "tau.png",
        ],
        d,
    ));
    let png = std::fs::read(d.join("tau.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    ok(&sg(
        &[
            "sim",
            "--figure",
            "profiles",
            "--chunks",
            "4K",
            "--requests",
            "2000",
            "--out",
            "p.svg",
        ],
        d,
    ));
    let svg = std::fs::read_to_string(d.join("p.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("TPC-E") && svg.contains("hybrid-seq"));
    let out = sg(&["sim", "--figure", "tau", "--out", "x.gif"], d);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sim_code_compares_the_raid6_codes_with_a_failed_member() {
    let dir = tempfile::tempdir().unwrap();
    let base = [
        "sim",
        "--profile",
        "TPC-C",
        "--requests",
        "3000",
        "--level",
        "6",
        "--disks",
        "8",
        "--chunk",
        "48K",
        "--code",
        "all",
        "--json",
    ];
    let healthy: serde_json::Value = serde_json::from_str(&ok(&sg(&base, dir.path()))).unwrap();
    let mut args = base.to_vec();
    args.extend(["--failed-member", "3"]);
    let degraded: serde_json::Value = serde_json::from_str(&ok(&sg(&args, dir.path()))).unwrap();
    let codes = |v: &serde_json::Value| -> Vec<String> {
        v["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["code"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(codes(&healthy), ["raid6", "rdp", "tier"]);
    for (h, d) in healthy["codes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(degraded["codes"].as_array().unwrap())
    {
        assert_eq!(h["degraded_extra_reads"], 0);
        assert!(d["degraded_extra_reads"].as_u64().unwrap() > 0, "{d}");
        assert_eq!(h["writes"], d["writes"], "writes are counted healthy");
        assert!(h["parity_writes"].as_u64().unwrap() > 0);
    }
    // RDP's block is a cell: 48K / (p - 1 = 6).
    assert_eq!(healthy["codes"][1]["block_bytes"], 8192.0);
    // Bad input: one line, exit 2.
    let out = sg(
        &["sim", "--profile", "TPC-C", "--level", "5", "--code", "rdp"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("two parity"));
}

#[test]
fn sim_shows_kroth_and_yangs_checksum_chunk_with_and_without_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&sg(
        &[
            "sim",
            "--profile",
            "TPC-C",
            "--requests",
            "20000",
            "--level",
            "5",
            "--disks",
            "5",
            "--chunk",
            "4K",
            "--capacity",
            "64M",
            "--ck-cache",
            "4096",
            "--json",
        ],
        dir.path(),
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ck = v["checksum_chunk"].as_array().unwrap();
    assert_eq!(ck.len(), 2);
    let (plain, cached) = (&ck[0], &ck[1]);
    assert_eq!(plain["cache_chunks"], 0);
    assert_eq!(plain["hits"], 0);
    assert_eq!(cached["cache_chunks"], 4096);
    // A cache of every stripe of a 64 MiB array: each checksum chunk is read once and written
    // back once, far fewer than one per piece.
    let n = |c: &serde_json::Value, f: &str| c[f].as_u64().unwrap();
    assert!(n(cached, "hits") > 0);
    assert!(n(cached, "reads") < n(plain, "reads"));
    assert!(n(cached, "writes") < n(plain, "writes"));
    // Without a cache every piece reads the table, except writes of a whole stripe (they
    // build it new): those are writes too.
    assert!(n(plain, "reads") <= n(plain, "lookups"));
    assert!(n(plain, "lookups") - n(plain, "reads") <= n(plain, "writes"));
    let text = ok(&sg(
        &[
            "sim",
            "--profile",
            "TPC-C",
            "--requests",
            "2000",
            "--level",
            "6",
            "--disks",
            "8",
        ],
        dir.path(),
    ));
    assert!(text.contains("ck-chunk"), "{text}");
}
