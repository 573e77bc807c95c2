//! What transparent mode (the preload) needs from the runtime beyond the `SCR_*` calls:
//! adopting files the application already wrote into a pending area of the cache as a new
//! dataset, restarting without the application asking, and the table of this rank's cached
//! files that prefix paths resolve to.
//!
//! Files matching a checkpoint pattern are written before any dataset exists (the
//! application does not say when a checkpoint starts), so they go to
//! `<store>/<user>/scr.<jobid>/scr.pending/<path below the prefix>` first. When the ranks
//! agree that a dataset is complete, [`adopt_output`] runs the ordinary output phase over
//! them: start, route each file (it is moved, not copied, to its routed place), complete
//! (redundancy, flush, halt). Node leaders clear the pending area in `SCR_Init`: what a
//! run left there never became a dataset.

use std::path::{Path, PathBuf};

use super::{with_rt, Runtime};
use crate::config::patterns::PatternSpec;
use crate::error::{Error, Result};

/// What the preload needs to route paths.
#[derive(Debug, Clone)]
pub struct TransparentSetup {
    pub rank: u32,
    pub prefix: crate::paths::Prefix,
    pub pending: PathBuf,
    pub patterns: Vec<PatternSpec>,
    /// `SCR_HALT_EXIT`
    pub halt_exit: bool,
}

/// The routing setup of the running instance.
pub fn transparent_setup() -> Result<TransparentSetup> {
    with_rt("transparent mode", |rt| {
        Ok(TransparentSetup {
            rank: rt.world.rank() as u32,
            prefix: rt.layout.prefix.clone(),
            pending: rt.pending_dir(),
            patterns: rt.settings.preload.clone(),
            halt_exit: rt.settings.halt_exit,
        })
    })
}

/// Make a dataset of files already written to the pending area (collective). `files` holds
/// (prefix path, current path) pairs of this rank, possibly none. Returns whether the
/// dataset is valid and complete, and where each file now is.
pub fn adopt_output(name: &str, flags: i32, files: &[(PathBuf, PathBuf)], valid: bool) -> Result<(bool, Vec<PathBuf>)> {
    with_rt("SCR_Complete_output (transparent)", |rt| rt.adopt_output(name, flags, files, valid))
}

/// Load the checkpoint SCR offers, as `SCR_Start_restart`/`SCR_Complete_restart` would
/// around an application that reads it (collective). A checkpoint whose files are missing
/// on some rank is marked failed and the next one is tried. Returns its name.
pub fn restart_auto() -> Result<Option<String>> {
    with_rt("SCR_Start_restart (transparent)", |rt| {
        rt.apply_rename_log();
        while let Some(name) = rt.have_restart()? {
            rt.start_restart()?;
            let files = rt.restart_files();
            let valid = files.iter().all(|(_, p)| p.exists());
            if rt.complete_restart(valid)? {
                return Ok(Some(name));
            }
        }
        Ok(None)
    })
}

/// This rank's cached files of complete datasets, as (prefix path, cache path), oldest
/// dataset first (so a later entry for the same prefix path is the newer file).
pub fn cached_files() -> Result<Vec<(PathBuf, PathBuf)>> {
    with_rt("transparent mode", |rt| {
        Ok(rt
            .filemap
            .datasets
            .values()
            .filter(|r| r.complete && !r.reddesc.bypass)
            .flat_map(|r| r.files.iter().map(|f| (rt.layout.prefix.join(&f.rel), f.path.clone())))
            .collect())
    })
}

/// Directory renames in the prefix that moved files of cached datasets, kept in
/// `<prefix>/.scr/renames.scr`: (newest dataset id at the time, old, new), relative to the
/// prefix. A rank that dies before it hears of a rename applies it at restart.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct RenameLog {
    renames: Vec<(u64, PathBuf, PathBuf)>,
}

const RENAME_LOG: &str = "renames.scr";

/// Before the application renames prefix directory `old` (relative to the prefix): wait for
/// background flushes still writing below it.
pub fn before_rename_dir(old: &Path) {
    let _ = with_rt("rename (transparent)", |rt| {
        rt.settle_flushes_under(old);
        Ok(())
    });
}

/// Files of this rank's cached datasets below `old` are now below `new` (paths relative to
/// the prefix): rewrite their records. `log`: this rank did the rename; record it in the
/// prefix for ranks that learn of it only at restart, and rename what the prefix's metadata
/// says of the flushed datasets below `old`.
pub fn rename_dir(old: &Path, new: &Path, log: bool) -> Result<()> {
    with_rt("rename (transparent)", |rt| {
        if log {
            let id = rt.dataset_id;
            let path = rt.layout.scr_dir().join(RENAME_LOG);
            // entries older than every cached dataset can no longer matter
            let oldest = rt.filemap.datasets.keys().next().copied().unwrap_or(id);
            crate::persist::update(&path, "RENAMES", |l: &mut RenameLog| {
                l.renames.retain(|(upto, _, _)| *upto >= oldest);
                l.renames.push((id, old.to_path_buf(), new.to_path_buf()))
            })?;
            let flushed: Vec<u64> = rt
                .filemap
                .datasets
                .values()
                .filter(|r| r.files.iter().any(|f| f.rel.starts_with(old)))
                .map(|r| r.desc.id)
                .collect();
            let ix = rt.load_index();
            for id in flushed.into_iter().filter(|id| ix.datasets.get(id).is_some_and(|e| e.complete)) {
                crate::transfer::flush::rename_in_prefix(&rt.layout, id, old, new)?;
            }
        }
        rt.rename_records(old, new, u64::MAX);
        Ok(())
    })
}

impl Runtime {
    fn rename_records(&mut self, old: &Path, new: &Path, upto: u64) {
        let mut changed = false;
        for rec in self.filemap.datasets.values_mut().filter(|r| r.desc.id <= upto) {
            if Path::new(&rec.desc.name) == old {
                rec.desc.name = new.to_string_lossy().into_owned();
                changed = true;
            }
            for f in rec.files.iter_mut() {
                if let Ok(rest) = f.rel.strip_prefix(old) {
                    f.rel = new.join(rest);
                    changed = true;
                }
            }
        }
        if changed {
            if let Err(e) = self.save_filemap() {
                crate::scr_error!("{e}");
            }
        }
    }

    /// Apply the prefix's rename log to this rank's records (at restart).
    fn apply_rename_log(&mut self) {
        let path = self.layout.scr_dir().join(RENAME_LOG);
        match crate::persist::read::<RenameLog>(&path, "RENAMES") {
            Ok(Some(log)) => {
                for (upto, old, new) in log.renames {
                    self.rename_records(&old, &new, upto);
                }
            }
            Ok(None) => {}
            Err(e) => crate::scr_warn!("{e}; directory renames of earlier runs are not applied"),
        }
    }

    /// The pending area of transparent mode (in the store of the first checkpoint).
    pub(super) fn pending_dir(&self) -> PathBuf {
        let store = &self.descs.select(1, true, false).store;
        self.layout.store_dir(store).join("scr.pending")
    }

    fn restart_files(&self) -> Vec<(PathBuf, PathBuf)> {
        let Some(loaded) = &self.restart else { return Vec::new() };
        let Some(rec) = self.filemap.datasets.get(&loaded.id) else { return Vec::new() };
        rec.files
            .iter()
            .map(|f| {
                let p = self.layout.prefix.join(&f.rel);
                let at = if loaded.in_prefix { p.clone() } else { f.path.clone() };
                (p, at)
            })
            .collect()
    }

    fn adopt_output(
        &mut self,
        name: &str,
        flags: i32,
        files: &[(PathBuf, PathBuf)],
        valid: bool,
    ) -> Result<(bool, Vec<PathBuf>)> {
        self.start_output_logged(Some(name), flags)?;
        // From here on every rank must reach complete_output: local failures only make the
        // dataset invalid.
        let mut problems = Vec::new();
        let mut placed = Vec::with_capacity(files.len());
        for (prefix_path, current) in files {
            let moved = self
                .route_file(&prefix_path.to_string_lossy())
                .and_then(|target| move_file(current, &target).map(|_| target));
            match moved {
                Ok(t) => placed.push(t),
                Err(e) => {
                    problems.push(e.to_string());
                    placed.push(current.clone());
                }
            }
        }
        for p in &problems {
            crate::scr_error!("dataset {name}: {p}");
        }
        let ok = self.complete_output_logged(valid && problems.is_empty())?;
        Ok((ok, placed))
    }
}

/// Move a file within the node (rename, or copy and remove across file systems).
fn move_file(from: &Path, to: &Path) -> Result<()> {
    if from == to {
        return Ok(());
    }
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(from, to).map_err(|e| Error::io("copy into the dataset", to, e))?;
            let _ = std::fs::remove_file(from);
            Ok(())
        }
        Err(e) => Err(Error::io("move into the dataset", from, e)),
    }
}
