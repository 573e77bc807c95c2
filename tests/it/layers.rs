//! The layer rule of `ARCHITECTURE.md`: a module of the core uses only its own layer and the
//! ones below. This test reads every source file of `src/` (the commands in `src/bin/` are front
//! ends and may use anything) and fails naming each `crate::<module>` reference that points
//! to a higher layer. A new top-level module must be given a layer here, or the test fails.
//! It also reads the preload crate (`preload/src/`), a front end above every layer that may
//! reach the core only through [`PRELOAD_MAY_USE`].

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

/// The modules of `scr` the preload crate may use (besides std, libc and mpi): transparent
/// mode's surface, the C API it re-exports, and the re-entry guard.
const PRELOAD_MAY_USE: &[&str] = &["transparent", "capi", "reentry"];

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
    let mut out = scan(line, "crate::", false);
    if top_level_file {
        // in a file directly below src/, `super::` names the crate root (or, from a nested
        // test module, the file's own items: those are not modules and are skipped below)
        out.extend(scan(line, "super::", false));
    }
    out
}

/// The names following `prefix` (a path start such as `crate::` or `scr::`) in `line`,
/// including each item of a `prefix{a, b::c}` group; a macro (`crate::scr_debug!`) counts
/// only with `macros`.
fn scan(line: &str, prefix: &str, macros: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
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
            if !name.is_empty() && (macros || !rest[name.len()..].starts_with('!')) {
                out.push(name);
            }
        }
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
    assert!(unknown.is_empty(), "modules without a layer in tests/it/layers.rs: {unknown:?}");
    assert!(violations.is_empty(), "lower layers use higher ones:\n{}", violations.join("\n"));
}

/// The preload crate (`libscr_preload.so`) converts C arguments and calls transparent mode;
/// it must not reach past [`PRELOAD_MAY_USE`] into the core (the runtime, the
/// communicator, the configuration, the log's macros), so that transparent mode's surface
/// stays the one place its policy lives.
#[test]
fn the_preload_uses_only_its_surface() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("preload/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no sources in {}", src.display());
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for used in scan(line, "scr::", true) {
                if !PRELOAD_MAY_USE.contains(&used.as_str()) {
                    violations.push(format!("preload/src/{}:{}: uses scr::{used}: {code}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the preload may use only scr::{{{}}}:\n{}",
        PRELOAD_MAY_USE.join(", "),
        violations.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_and_groups() {
    assert_eq!(referenced("use crate::{config::Settings, state::filemap};", false), ["config", "state"]);
    assert_eq!(referenced("let x = crate::runtime::FLAG_OUTPUT;", false), ["runtime"]);
    assert_eq!(referenced("use super::runtime;", true), ["runtime"]);
    assert!(referenced("use super::runtime;", false).is_empty());
    assert!(referenced("let notcrate::x = 1;", false).is_empty());
    assert!(referenced("crate::scr_debug!(1, \"x\");", false).is_empty());
    assert_eq!(scan("scr::scr_error!(\"x\"); scr::comm::abort(1)", "scr::", true), ["scr_error", "comm"]);
    assert_eq!(scan("use scr::{transparent, config::params};", "scr::", true), ["transparent", "config"]);
    assert!(scan("libscr::x; a::scr::y", "scr::", true).is_empty());
}
