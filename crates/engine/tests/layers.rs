//! The engine's files stay in the layers docs/DESIGN.md gives them ("Inside the engine"): every
//! `crate::MODULE` a file names outside comments must be a module of a lower layer, and every
//! source file must have a layer. A new file is placed in the table first; an import that would
//! run back up (the 18 of the landed main before issue 33) fails here with the file, the module
//! and both layers named.

#![allow(
    clippy::disallowed_methods,
    reason = "this test reads the engine's source files and docs/DESIGN.md"
)]

use std::collections::BTreeMap;
use std::path::Path;

/// (file name → layer) from the table in docs/DESIGN.md.
fn layers() -> BTreeMap<String, u32> {
    let design = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/DESIGN.md");
    let text = std::fs::read_to_string(&design).expect("docs/DESIGN.md");
    let mut out = BTreeMap::new();
    let table = text
        .split("**Inside the engine.**")
        .nth(1)
        .expect("docs/DESIGN.md has the section \"Inside the engine\"");
    for line in table.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Ok(layer) = cells.get(1).unwrap_or(&"").parse::<u32>() else {
            continue; // the header and its rule
        };
        for file in cells[2].split('`').filter(|f| f.ends_with(".rs")) {
            assert!(
                out.insert(file.to_string(), layer).is_none(),
                "{file} is in two layers of docs/DESIGN.md"
            );
        }
    }
    out
}

/// The modules a source names as `crate::MODULE`, outside comments.
fn named_modules(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::{a, b}` groups are not used in the engine (each import names its module).
            assert!(
                !name.is_empty(),
                "a `crate::{{...}}` group: name each module"
            );
            out.push(name);
        }
    }
    out
}

#[test]
fn every_import_inside_the_engine_runs_down() {
    let layers = layers();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        if !file.ends_with(".rs") {
            continue;
        }
        files += 1;
        let Some(&mine) = layers.get(file) else {
            wrong.push(format!("{file} has no layer in docs/DESIGN.md"));
            continue;
        };
        let source = std::fs::read_to_string(&path).expect("source");
        for module in named_modules(&source) {
            let theirs = layers.get(&format!("{module}.rs")).copied();
            match theirs {
                Some(l) if l < mine => {}
                Some(l) => wrong.push(format!(
                    "{file} (layer {mine}) imports crate::{module} (layer {l})"
                )),
                None => wrong.push(format!(
                    "{file} names crate::{module}, which is no file of docs/DESIGN.md's table \
                     (import items from the module that defines them, not from the crate root)"
                )),
            }
        }
    }
    assert!(files > 10, "read only {files} files");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checker_sees_an_import_that_runs_up() {
    // The negative control: a low file naming a higher one, and a group import, are caught.
    assert_eq!(
        named_modules("use crate::array::Array; // crate::io in a comment"),
        ["array"]
    );
    let layers = layers();
    assert!(layers["members.rs"] < layers["array.rs"]);
    assert!(layers["io.rs"] > layers["array.rs"]);
    let caught = std::panic::catch_unwind(|| named_modules("use crate::{Array, io};"));
    assert!(caught.is_err());
}
