//! The layer rule of `DESIGN.md`: a module of the core uses only its own layer and the ones
//! below. This test reads every source file of `src/` (the commands in `src/bin/` are front
//! ends and may use anything) and fails naming each `crate::<module>` reference that points
//! to a higher layer. A new top-level module must be given a layer here, or the test fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layers from the bottom up; a module may use modules of its own layer or a lower one.
const LAYERS: &[(&str, &[&str])] = &[
    ("foundation", &["error", "log", "identity", "paths", "persist", "comm", "checksum", "reentry", "sys"]),
    ("config", &["config"]),
    ("events", &["events"]),
    ("descriptors", &["desc"]),
    ("state", &["state"]),
    ("redundancy", &["redundancy"]),
    ("transfer", &["transfer"]),
    ("runtime", &["runtime"]),
    ("ops", &["ops"]),
    ("transparent", &["transparent"]),
    ("front ends", &["capi"]),
];

/// Items of the crate root every layer may use (`lib.rs` constants).
const ROOT_ITEMS: &[&str] = &["VERSION", "API_VERSION", "MAX_FILENAME", "FLAG_CHECKPOINT", "FLAG_OUTPUT"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module names a line refers to through `crate::` (including `use crate::{a,
/// b::c}` groups) or, in a file directly below `src/`, through `super::`.
fn referenced(line: &str, top_level_file: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut scan = |prefix: &str| {
        let mut rest = line;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.push(name);
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                // the crate's exported macros (`crate::scr_debug!`) belong to no layer
                if !name.is_empty() && !rest[name.len()..].starts_with('!') {
                    out.push(name);
                }
            }
        }
    };
    scan("crate::");
    if top_level_file {
        // in a file directly below src/, `super::` names the crate root (or, from a nested
        // test module, the file's own items: those are not modules and are skipped below)
        scan("super::");
    }
    out
}

#[test]
fn no_module_uses_a_higher_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    let mut unknown = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        if first == "bin" || first == "lib.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_string();
        let Some(mine) = layer_of(&module) else {
            unknown.insert(module, rel.display().to_string());
            continue;
        };
        let top_level_file = rel.components().count() == 1;
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for used in referenced(line, top_level_file) {
                // `use crate::{scr_debug, ...}`: the crate's exported macros belong to no layer
                if ROOT_ITEMS.contains(&used.as_str()) || used == module || used.starts_with("scr_") {
                    continue;
                }
                match layer_of(&used) {
                    Some(l) if l > mine => violations.push(format!(
                        "{}:{}: {} ({}) uses {} ({}): {}",
                        rel.display(),
                        n + 1,
                        module,
                        LAYERS[mine].0,
                        used,
                        LAYERS[l].0,
                        code
                    )),
                    Some(_) => {}
                    None if !top_level_file && used.chars().next().is_some_and(char::is_lowercase) => {
                        unknown.insert(used, format!("{}:{}", rel.display(), n + 1));
                    }
                    None => {}
                }
            }
        }
    }
    assert!(unknown.is_empty(), "modules without a layer in tests/layers.rs: {unknown:?}");
    assert!(violations.is_empty(), "lower layers use higher ones:\n{}", violations.join("\n"));
}

#[test]
fn the_scanner_sees_paths_and_groups() {
    assert_eq!(referenced("use crate::{config::Settings, state::filemap};", false), ["config", "state"]);
    assert_eq!(referenced("let x = crate::runtime::FLAG_OUTPUT;", false), ["runtime"]);
    assert_eq!(referenced("use super::runtime;", true), ["runtime"]);
    assert!(referenced("use super::runtime;", false).is_empty());
    assert!(referenced("let notcrate::x = 1;", false).is_empty());
}
