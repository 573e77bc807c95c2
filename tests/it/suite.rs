//! The shape of the test suite itself: with `autotests = false`, a test file that is not a
//! module of this binary would never be compiled or run, and nobody would notice.

use std::path::{Path, PathBuf};

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_test_file_is_left_out() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let it = root.join("tests/it");
    let main = std::fs::read_to_string(it.join("main.rs")).unwrap();
    let declared: Vec<&str> =
        main.lines().filter_map(|l| l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';'))).collect();
    let common = std::fs::read_to_string(it.join("common/mod.rs")).unwrap();
    let mut files = Vec::new();
    rs_files(&root.join("tests"), &mut files);
    let mut stray = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap();
        let ok = match f.strip_prefix(&it) {
            Ok(r) if r == Path::new("main.rs") => true,
            Ok(r) if r.starts_with("common") => {
                // a file of common/ must be a module of common/mod.rs
                let stem = r.file_stem().unwrap().to_str().unwrap();
                r == Path::new("common/mod.rs") || common.contains(&format!("mod {stem};"))
            }
            Ok(r) if r.parent() == Some(Path::new("")) => declared.contains(&r.file_stem().unwrap().to_str().unwrap()),
            _ => false,
        };
        if !ok {
            stray.push(rel.display().to_string());
        }
    }
    assert!(
        stray.is_empty(),
        "test files outside the test binary (declare them with `mod` in tests/it/main.rs, or in \
         tests/it/common/mod.rs): {stray:?}"
    );
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("autotests = false"), "Cargo.toml: autotests = false expected");
    assert_eq!(manifest.matches("[[test]]").count(), 1, "Cargo.toml: one [[test]] target expected");
}
