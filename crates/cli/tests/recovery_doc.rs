//! docs/RECOVERY.md's procedures, run as written (issue 35 §2): every ```sh block, in a fresh
//! directory, with this build's `stripeguard` first on PATH, under `set -euo pipefail`. A
//! procedure that no longer works fails here, so the document cannot drift from the tool.

use std::path::Path;
use std::process::Command;

/// (heading, script) for every ```sh block of the document.
fn procedures(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::from("(top)");
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if let Some(h) = l.strip_prefix("## ") {
            heading = h.to_string();
        } else if l.trim() == "```sh" {
            let script: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push((heading.clone(), script.join("\n")));
        }
    }
    out
}

#[test]
fn every_recovery_procedure_runs_as_written() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/RECOVERY.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let all = procedures(&doc);
    assert!(all.len() >= 5, "docs/RECOVERY.md lost its procedures");
    let bin = Path::new(env!("CARGO_BIN_EXE_stripeguard"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failed = Vec::new();
    for (heading, script) in &all {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{script}"))
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        if !out.status.success() {
            failed.push(format!(
                "{heading}: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "docs/RECOVERY.md procedures failed:\n{}",
        failed.join("\n---\n")
    );
}
