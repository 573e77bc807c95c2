//! The prefix directory a command works on. `scr_halt` and `scr_index` take it from their
//! argument or the current directory (user guide 2.9.1, 2.10); the wrappers from `SCR_PREFIX`
//! or the current directory (2.8.5). A directory without the hidden `.scr` directory a job
//! creates is refused (a mistyped path must not receive a halt file nobody reads), unless the
//! caller creates it on purpose.

use std::path::{Path, PathBuf};

use super::{OpError, OpResult};
use crate::paths::Prefix;
use crate::state::layout::Layout;

/// The directory named by `given`, else the current directory, absolute and normalised.
pub fn choose(given: Option<&str>) -> PathBuf {
    match given {
        Some(d) => crate::paths::normalize(Path::new(d), &crate::paths::cwd()),
        None => crate::paths::cwd(),
    }
}

/// `dir` as a prefix whose `.scr` directory exists (or is created when `create`).
pub fn open(dir: &Path, create: bool) -> OpResult<Layout> {
    match std::fs::metadata(dir) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Err(OpError::failed(format!("{}: not a directory", dir.display()))),
        Err(e) => return Err(OpError::failed(format!("prefix directory {}: {e}", dir.display()))),
    }
    let layout = Layout::prefix_only(Prefix::new(dir));
    let scr = layout.scr_dir();
    if !scr.is_dir() {
        if create {
            std::fs::create_dir_all(&scr)
                .map_err(|e| OpError::failed(format!("cannot create {}: {e}", scr.display())))?;
        } else {
            let hint = match std::env::var("SCR_PREFIX") {
                Ok(p) if !p.is_empty() && Path::new(&p) != dir => format!(" (SCR_PREFIX is {p}; pass it explicitly)"),
                _ => String::new(),
            };
            return Err(OpError::failed(format!(
                "{} is not an SCR prefix directory: it has no .scr directory, so no job has run there{hint}",
                dir.display()
            )));
        }
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_directory_without_scr_unless_asked_to_create() {
        let d = tempfile::tempdir().unwrap();
        let e = open(d.path(), false).unwrap_err().to_string();
        assert!(e.contains("no .scr directory") && e.contains(&d.path().display().to_string()), "{e}");
        assert!(!d.path().join(".scr").exists());
        let l = open(d.path(), true).unwrap();
        assert!(l.scr_dir().is_dir());
        assert!(open(d.path(), false).is_ok());
        let e = open(&d.path().join("missing"), false).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
