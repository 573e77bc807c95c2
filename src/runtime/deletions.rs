//! Deleting cached datasets (eviction, `SCR_Delete`, a failed completion or restart, output
//! datasets once flushed) without holding up the application, and without a crash ever
//! leaving a dataset half deleted yet offered for restart.
//!
//! Protocol, collective (every rank deletes the same datasets, decided by rank 0 or agreed):
//!
//! 1. *mark* ([`Runtime::doom`]): a flush or encoding of the dataset still running on this rank
//!    finishes, its background checksum is cancelled, the flush file forgets it, and its
//!    record moves to the filemap's `deleting` list;
//! 2. every rank saves its filemap, and the ranks agree that they did (in `SCR_Start_output`
//!    this is the save and agreement the call makes anyway, so eviction adds no collective);
//! 3. *bury* ([`Runtime::bury`]): each rank renames its node's directory of the dataset into the
//!    store's trash directory (`<store>/.deleting/`; the first rank of a node to get there
//!    moves it, for the others it is already gone) and forgets the record; a worker thread
//!    removes the trash in the background, at a lower priority than the application.
//!
//! A dataset whose mark was saved anywhere is never offered for restart: the next `SCR_Init`
//! collects the marks of every rank (and those in filemaps of ranks that now run on another
//! node) and deletes those datasets everywhere before it looks for a checkpoint
//! ([`Runtime::resume_deletions`]); no rank removes a file before every rank's mark is saved.
//! The rename frees the dataset's directory at once (a fetch may reuse it right away), and
//! whatever a run left in the trash is removed by the next `SCR_Init` ([`Runtime::sweep_trash`]).
//! `SCR_Finalize` waits for the removals. The cost: until the worker is done, the old
//! dataset's bytes still occupy the store.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::worker::Worker;
use super::Runtime;
use crate::error::{Error, Result};
use crate::paths::remove_tree_if_exists;
use crate::state::filemap::Filemap;
use crate::{scr_debug, scr_error, scr_warn};

/// The trash directory next to a store's dataset directories.
const TRASH: &str = ".deleting";

/// This process's deletion worker.
pub(super) struct Deleter {
    worker: Worker<PathBuf>,
    /// Trash entries moved by this process, to name the next one.
    seq: u64,
}

impl Default for Deleter {
    fn default() -> Deleter {
        Deleter { worker: Worker::new("scr-delete"), seq: 0 }
    }
}

impl Deleter {
    /// Remove `path` (a directory in the trash) in the background, or now if no thread runs.
    fn remove(&mut self, path: PathBuf) {
        if !self.worker.running() {
            let started = self.worker.start(
                |p: PathBuf| {
                    if let Err(e) = remove_tree_if_exists(&p) {
                        scr_warn!("{e}");
                    }
                },
                |_| {},
                |_| 0,
            );
            if let Err(e) = started {
                scr_warn!("cannot start the deletion thread: {e}; cached datasets are deleted in the foreground");
            }
        }
        if let Err(p) = self.worker.send(path) {
            if let Err(e) = remove_tree_if_exists(&p) {
                scr_warn!("{e}");
            }
        }
    }

    /// Move `dir` into its store's trash and remove it from there in the background; `tag`
    /// makes the trash name unique. A directory already gone (moved by another rank of the
    /// node) is fine; one that cannot be moved is removed now.
    fn trash(&mut self, dir: &Path, tag: &str) {
        let Some(store) = dir.parent() else { return };
        let Some(name) = dir.file_name() else { return };
        self.seq += 1;
        let bin = store.join(TRASH);
        let to = bin.join(format!("{}.{tag}.{}", name.to_string_lossy(), self.seq));
        let moved = crate::paths::create_dirs(&bin).map_err(crate::error::Error::from).and_then(|_| {
            match std::fs::rename(dir, &to) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(crate::error::Error::io("move to the trash", dir, e)),
            }
        });
        match moved {
            Ok(true) => self.remove(to),
            Ok(false) => {}
            Err(e) => {
                scr_warn!("{e}; deleting it now");
                if let Err(e) = remove_tree_if_exists(dir) {
                    scr_error!("{e}");
                }
            }
        }
    }

    /// Let the queued removals finish.
    pub(super) fn finish(&mut self) {
        self.worker.finish();
    }
}

impl Runtime {
    /// Delete dataset `id` from the cache (collective: every rank calls it).
    pub(super) fn drop_cached(&mut self, id: u64) {
        self.drop_many(&[id]);
    }

    /// Delete datasets from the cache: mark, save, agree, bury (see the module doc). Every
    /// rank calls it once, possibly with different lists (each rank lists what it holds).
    pub(super) fn drop_many(&mut self, ids: &[u64]) {
        for &id in ids {
            self.doom(id);
        }
        let saved = self.save_filemap();
        if !self.filemap.deleting.is_empty() {
            crate::log::crash_point("marked");
        }
        self.marks_saved(saved.is_ok());
        if let Err(e) = saved {
            scr_error!("{e}");
        }
        self.bury();
    }

    /// Step 1: mark dataset `id` on this rank (in memory; the caller saves the filemap).
    pub(super) fn doom(&mut self, id: u64) {
        self.bg.wait_for(id);
        self.cancel_checksum(id);
        // its shared files (in the prefix), decided while the flush record still says whether
        // it reached the prefix
        if let Some(rec) = self.filemap.datasets.get(&id).filter(|r| !r.desc.shared.is_empty()).cloned() {
            self.forget_shared(&rec);
        }
        self.filemap.mark_deleting(id);
        self.set_location(id, None);
    }

    /// Step 2's agreement: whether every rank saved its marks (collective). A rank that could
    /// not leaves its old record on disk; the others' saved marks still stop a later restart.
    pub(super) fn marks_saved(&self, saved: bool) {
        if !self.world.all_true(saved) && self.rank0() {
            scr_error!("some rank could not record the deletion of cached datasets in its filemap");
        }
    }

    /// Step 3: move every marked dataset's directory to the trash and forget its record.
    pub(super) fn bury(&mut self) {
        let doomed = std::mem::take(&mut self.filemap.deleting);
        let tag = format!("{}.{}", self.world.rank(), self.run_stamp);
        for (id, rec) in &doomed {
            scr_debug!(2, "dataset {id}: moving {} to the trash", rec.dir.display());
            self.bg.deleter.trash(&rec.dir, &tag);
        }
        if !doomed.is_empty() {
            crate::log::crash_point("buried");
        }
    }

    /// `SCR_Init`: finish the deletions a run began (collective). The marks of every rank,
    /// and those in the filemaps of ranks that now run on another node, name the datasets;
    /// they are deleted everywhere before anything is offered for restart.
    pub(super) fn resume_deletions(&mut self) -> Result<()> {
        let on_node: Vec<i32> = self.node.allgather(&self.world.rank())?;
        let mut marked: BTreeSet<u64> = self.filemap.deleting.keys().copied().collect();
        let mut foreign: Vec<(PathBuf, Filemap)> = Vec::new();
        if self.node.rank() == 0 {
            for (rank, path) in self.layout.filemaps() {
                if on_node.contains(&rank) {
                    continue;
                }
                if let Ok(fm) = Filemap::load(&path) {
                    marked.extend(fm.deleting.keys().copied());
                    foreign.push((path, fm));
                }
            }
        }
        // their union, made by rank 0 (it alone receives every rank's marks)
        let ids: BTreeSet<u64> = self
            .world
            .decide_at(0, &marked.into_iter().collect::<Vec<u64>>(), |all| {
                all.map(|all| all.into_iter().flatten().collect::<BTreeSet<u64>>()).map_err(|e| e.to_string())
            })?
            .map_err(|why| Error::Other(format!("the marks of unfinished deletions: {why}")))?;
        if ids.is_empty() {
            return Ok(());
        }
        if self.rank0() {
            let list: Vec<String> = ids.iter().map(u64::to_string).collect();
            let list = list.join(", ");
            crate::log::emit(
                "INFO",
                format_args!("finishing the deletion of cached dataset(s) {list} begun by an earlier run"),
            );
        }
        let tag = format!("{}.{}", self.world.rank(), self.run_stamp);
        for (path, mut fm) in foreign {
            let doomed: Vec<u64> =
                fm.datasets.keys().chain(fm.deleting.keys()).filter(|id| ids.contains(id)).copied().collect();
            if doomed.is_empty() {
                continue;
            }
            for id in doomed {
                if let Some(rec) = fm.datasets.remove(&id).or_else(|| fm.deleting.remove(&id)) {
                    self.bg.deleter.trash(&rec.dir, &tag);
                }
            }
            let r = if fm.datasets.is_empty() && fm.deleting.is_empty() {
                crate::state::filemap::remove_companions(&path);
                crate::paths::remove_file_if_exists(&path).map_err(crate::error::Error::from)
            } else {
                fm.save(&path).map_err(Into::into)
            };
            if let Err(e) = r {
                scr_warn!("{e}");
            }
        }
        let live: Vec<u64> = ids.iter().filter(|id| self.filemap.datasets.contains_key(id)).copied().collect();
        self.drop_many(&live);
        Ok(())
    }

    /// `SCR_Init`, node leaders: remove what a run left in the stores' trash. Called before
    /// any rank of this run can move something there.
    pub(super) fn sweep_trash(&mut self) {
        let stores: Vec<PathBuf> = self.descs.stores.iter().filter(|s| s.enabled).map(|s| s.path.clone()).collect();
        for store in stores {
            let bin = self.layout.store_dir(&store).join(TRASH);
            let Ok(rd) = std::fs::read_dir(&bin) else { continue };
            for e in rd.flatten() {
                scr_debug!(1, "removing {} left by an earlier run", e.path().display());
                self.bg.deleter.remove(e.path());
            }
        }
    }

    /// `SCR_Finalize`, halt: wait for the removals and record that the marks are gone.
    pub(super) fn finish_deletions(&mut self) {
        self.bg.deleter.finish();
        if let Err(e) = self.save_filemap() {
            scr_error!("{e}");
        }
    }
}
