//! What transparent mode (`crate::transparent`) needs from the runtime beyond the `SCR_*`
//! calls: forming a dataset of files the application already wrote into a pending area of the
//! cache, new versions of a cached checkpoint, restarting without the application asking, the
//! list of this rank's cached files that prefix paths resolve to, and the log of directory
//! renames.
//!
//! Files matching a checkpoint pattern are written before any dataset exists (the
//! application does not say when a checkpoint starts), so they go to
//! `<store>/<user>/scr.<jobid>/scr.pending/<rank>/<path below the prefix>` first. When the
//! ranks agree that a dataset is complete, [`adopt_output`] runs the ordinary output phase
//! over them: start, route each file (moved, not copied, to its routed place; files carried
//! from the earlier version are hard-linked), complete (redundancy, flush, halt). In
//! `SCR_Init` node leaders keep only the pending areas of the ranks now on their node
//! (`Runtime::prepare_pending`); when transparent mode starts, each rank adds what a killed
//! run left there to the cached checkpoint of its name and removes the rest
//! (`crate::transparent::sync`).

use std::path::{Path, PathBuf};

use super::{with_rt, Runtime, FLAG_CHECKPOINT};
use crate::config::patterns::PatternSpec;
use crate::error::{Error, Result};
use crate::state::filemap::FileMeta;

/// What the preload needs to route paths.
#[derive(Debug, Clone)]
pub struct TransparentSetup {
    pub rank: u32,
    pub prefix: crate::paths::Prefix,
    pub pending: PathBuf,
    pub patterns: Vec<PatternSpec>,
    /// `SCR_PRELOAD_SHARED`
    pub shared: Vec<PatternSpec>,
    /// `SCR_HALT_EXIT`
    pub halt_exit: bool,
    /// `SCR_PRELOAD_TIMING`
    pub timing: bool,
}

/// Whether every rank of the run is on this node (transparent mode then agrees at sync
/// points through shared memory, [`crate::transparent::board`]).
pub fn node_spans_world() -> bool {
    with_rt("transparent mode", |rt| Ok(rt.node.size() == rt.world.size())).unwrap_or(false)
}

/// The routing setup of the running instance.
pub fn transparent_setup() -> Result<TransparentSetup> {
    with_rt("transparent mode", |rt| {
        Ok(TransparentSetup {
            rank: rt.world.rank() as u32,
            prefix: rt.layout.prefix.clone(),
            pending: rt.pending_dir(),
            patterns: rt.settings.preload.clone(),
            shared: rt.settings.preload_shared.clone(),
            halt_exit: rt.settings.halt_exit,
            timing: rt.settings.preload_timing,
        })
    })
}

/// One dataset transparent mode forms at a sync point, as this rank sees it.
#[derive(Debug)]
pub struct Adopt<'a> {
    pub name: &'a str,
    pub flags: i32,
    /// This rank's new files: (path relative to the prefix, where the bytes are now).
    pub files: &'a [(PathBuf, PathBuf)],
    /// Files several ranks wrote that this rank opened (relative to the prefix), written at
    /// their staging names in the prefix ([`crate::state::layout::shared_staging_name`]).
    pub shared: &'a [PathBuf],
    /// Files (relative to the prefix) of the cached dataset of this name that the application
    /// removed or renamed away.
    pub removed: &'a [PathBuf],
    /// How many of `files` replace another rank's file of the dataset (each a rewrite).
    pub replaced: u64,
    /// No write or close failed on this rank.
    pub valid: bool,
    /// Only a new version of a cached dataset of this name may form (files a killed run
    /// left pending): without one, nothing happens ([`Adopted::Invalid`]).
    pub version_only: bool,
}

/// What became of an [`Adopt`] (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// A new dataset, or a new version of the cached dataset of its name, is complete.
    Complete { checkpoint: bool },
    /// The dataset is invalid (a failed write somewhere, or redundancy could not be applied);
    /// the cached dataset of its name, if any, is unchanged.
    Invalid,
    /// The application removed every file of the cached dataset of this name: it is gone from
    /// cache and from the prefix's index.
    Removed,
}

/// Form a dataset of files already written to the pending area (collective). A dataset name
/// is one checkpoint: when a complete dataset of `name` is cached, the result is a new
/// version of it holding its files (hard-linked within the cache, never copied) that were not
/// replaced or removed, plus the new ones; its redundancy is applied again, and the earlier
/// version leaves the cache once the new one is complete. A version that rewrites a file of
/// the earlier one (on any rank) is a checkpoint of its own: a new checkpoint number, flushed
/// when that number is due (`SCR_FLUSH`). One that only adds or removes files completes the
/// same checkpoint: it keeps the number and is flushed if the earlier version was (its
/// prefix copy would lack the new files). The newest checkpoint stays in cache until the new
/// dataset is complete, and the one before it until the next dataset's sync point (the
/// application may still name it).
pub fn adopt_output(a: &Adopt) -> Result<Adopted> {
    with_rt("SCR_Complete_output (transparent)", |rt| rt.adopt_output(a))
}

/// The collectives of the datasets a sync point forms are counted from `from` (taken before
/// its agreement; `None` after it), and reported with each dataset's completion
/// (`SCR_DEBUG=1`); a dataset after the first counts from the end of the one before.
pub fn count_collectives_from(from: Option<crate::comm::Tally>) {
    let _ = with_rt("transparent mode", |rt| {
        rt.tally_from = from;
        Ok(())
    });
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

/// A file of a complete cached dataset, as transparent mode serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFile {
    /// The application's name for it, relative to the prefix.
    pub rel: PathBuf,
    /// Where its bytes are.
    pub path: PathBuf,
    pub dataset: u64,
    /// The dataset's name.
    pub name: String,
}

/// This rank's files of complete cached datasets, oldest dataset first (so a later entry for
/// the same path is the newer file).
pub fn cached_files() -> Result<Vec<CachedFile>> {
    with_rt("transparent mode", |rt| {
        Ok(rt
            .filemap
            .datasets
            .values()
            .filter(|r| r.complete && !r.reddesc.bypass)
            .flat_map(|r| {
                r.files.iter().map(|f| CachedFile {
                    rel: f.rel.clone(),
                    path: f.path.clone(),
                    dataset: r.desc.id,
                    name: r.desc.name.clone(),
                })
            })
            .collect())
    })
}

/// Where a dataset of each name exists: (complete in this rank's cache, complete in the
/// prefix's index); both `true` when that cannot be told. `None` when each of them is complete
/// in this rank's cache: the prefix's index is not read then.
pub fn dataset_places(names: &[String]) -> Option<Vec<(bool, bool)>> {
    with_rt("transparent mode", |rt| {
        let cached = |n: &String| rt.filemap.datasets.values().any(|r| r.complete && &r.desc.name == n);
        if names.iter().all(cached) {
            return Ok(None);
        }
        let ix = rt.load_index();
        Ok(Some(
            names.iter().map(|n| (cached(n), ix.datasets.values().any(|e| e.complete && &e.desc.name == n))).collect(),
        ))
    })
    .unwrap_or_else(|_| Some(vec![(true, true); names.len()]))
}

/// Directory renames in the prefix that moved files of cached datasets, kept in
/// `<prefix>/.scr/renames.scr`: (newest dataset id at the time, old, new), relative to the
/// prefix. A rank that dies before it hears of a rename applies it at restart.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct RenameLog {
    renames: Vec<(u64, crate::paths::RelPath, crate::paths::RelPath)>,
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
        // a dataset is concerned when it is named by the directory or has files below it
        // here (a rank may have none)
        let concerned = |r: &crate::state::filemap::DatasetRecord| {
            Path::new(&r.desc.name).starts_with(old) || r.files.iter().any(|f| f.rel.starts_with(old))
        };
        if !rt.filemap.datasets.values().any(concerned) {
            return Ok(());
        }
        if log {
            let id = rt.dataset_id;
            let path = rt.layout.scr_dir().join(RENAME_LOG);
            // entries older than every cached dataset can no longer matter
            let oldest = rt.filemap.datasets.keys().next().copied().unwrap_or(id);
            let rel = |p: &Path| crate::paths::RelPath::new(p.to_path_buf()).map_err(crate::error::Error::from);
            let entry = (id, rel(old)?, rel(new)?);
            crate::persist::update(&path, "RENAMES", |l: &mut RenameLog| {
                l.renames.retain(|(upto, _, _)| *upto >= oldest);
                l.renames.push(entry)
            })?;
            let flushed: Vec<u64> = rt.filemap.datasets.values().filter(|r| concerned(r)).map(|r| r.desc.id).collect();
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

    /// Node leader, in `SCR_Init`: the pending area exists and holds nothing but what ranks
    /// now on this node left there in transparent mode (each rank then recovers or removes
    /// its own when transparent mode starts); in API mode nothing left pending is kept.
    pub(super) fn prepare_pending(&self, on_node: &[i32]) -> Result<()> {
        let pending = self.pending_dir();
        if self.mode == super::Mode::Api {
            crate::paths::remove_tree_if_exists(&pending)?;
        } else if let Ok(rd) = std::fs::read_dir(&pending) {
            for e in rd.flatten() {
                let mine =
                    e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()).is_some_and(|r| on_node.contains(&r));
                if !mine && e.file_type().is_ok_and(|t| t.is_dir()) {
                    crate::paths::remove_tree_if_exists(&e.path())?;
                } else if !mine {
                    crate::paths::remove_file_if_exists(&e.path())?;
                }
            }
        }
        Ok(crate::paths::ensure_private_dir(&pending)?)
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

    pub(super) fn adopt_output(&mut self, a: &Adopt) -> Result<Adopted> {
        // CRC32s the worker finished ride with the files the new version carries (else its
        // job would compute them again)
        self.retire_checksums();
        let held = self.filemap.by_name(a.name).filter(|r| r.complete && !r.reddesc.bypass).map(|r| r.desc.id);
        let new: std::collections::HashSet<&Path> = a.files.iter().map(|(rel, _)| rel.as_path()).collect();
        let carried: Vec<FileMeta> = held
            .and_then(|id| self.filemap.datasets.get(&id))
            .map(|r| {
                r.files
                    .iter()
                    .filter(|f| !new.contains(f.rel.as_path()) && !a.removed.contains(&f.rel))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        // a version that rewrites a file of the earlier one (an application rewriting its
        // restart files in place, LAMMPS' toggle files) is a checkpoint of its own; one that
        // only adds or removes files (a `meta` written after the barrier) completes the same one
        let rewrites = a.replaced
            + held.and_then(|id| self.filemap.datasets.get(&id)).map_or(0, |r| {
                r.files.iter().filter(|f| new.contains(f.rel.as_path())).count() as u64
                    + r.desc.shared.iter().filter(|s| a.shared.contains(&s.rel)).count() as u64
            });
        // one reduction: the largest id and the largest complement (the smallest id; none: 0)
        // of the earlier version each rank holds, and, which counts only when every rank holds
        // the same one (then each computed them against it), whether any rank keeps a file of
        // it and whether any rewrites one
        let mine = held.map_or(0, |id| id + 1);
        let adds = (a.files.len() + a.shared.len()) as u64;
        let keeps = adds + carried.len() as u64;
        let all = self.world.max_u64s(&[mine, u64::MAX - mine, keeps, rewrites, adds]);
        let (earlier, carried) = if all[0] == u64::MAX - all[1] {
            (held, carried)
        } else {
            if self.rank0() {
                crate::scr_warn!(
                    "dataset {}: not every rank holds its earlier version in cache; the new files form a dataset of their own",
                    a.name
                );
            }
            (None, Vec::new())
        };
        // nothing to form: only removals of files whose version is in no rank's cache any
        // more (a dataset formed earlier at this sync point evicted it: OpenFOAM's purgeWrite
        // removes a time directory as it writes the next one)
        if (a.version_only || all[4] == 0) && earlier.is_none() {
            return Ok(Adopted::Invalid);
        }
        let mut counts = false;
        if let Some(id) = earlier {
            if all[2] == 0 {
                self.forget_removed(id);
                return Ok(Adopted::Removed);
            }
            counts = all[3] > 0;
        }
        let flags = a.flags | earlier.and_then(|id| self.filemap.datasets.get(&id)).map_or(0, |r| flags_of(&r.desc));
        // (files held from a dataset that left the cache meanwhile, no pattern naming them
        // now: they were a checkpoint's)
        let flags = if flags == 0 { FLAG_CHECKPOINT } else { flags };
        let newest = self.filemap.datasets.values().rev().find(|r| r.complete && r.desc.checkpoint).map(|r| r.desc.id);
        self.adoption.begin(earlier.into_iter().chain(newest).collect(), earlier, counts);
        let r = self.adopt_phase(a, flags, &carried);
        self.adoption.end();
        if r?.is_none() {
            return Ok(Adopted::Invalid);
        }
        if let Some(old) = earlier {
            self.drop_cached(old);
        }
        Ok(Adopted::Complete { checkpoint: flags & FLAG_CHECKPOINT != 0 })
    }

    /// The output phase of [`Runtime::adopt_output`]: new files are moved into the dataset,
    /// carried ones hard-linked, shared ones declared (`SCR_Route_shared_file`). The
    /// dataset's id if it is valid and complete.
    fn adopt_phase(&mut self, a: &Adopt, flags: i32, carried: &[FileMeta]) -> Result<Option<u64>> {
        let (name, files) = (a.name, a.files);
        self.start_output_logged(Some(name), flags)?;
        let id = self.dataset_id;
        // From here on every rank must reach complete_output: local failures only make the
        // dataset invalid.
        let mut problems: Vec<String> = self.adoption.take_start_failed().into_iter().collect();
        let moves = files.iter().map(|(rel, at)| (rel, at, false));
        let links = carried.iter().map(|f| (&f.rel, &f.path, true));
        // every file recorded first, with the dataset's record in one write of the filemap
        // (its directory made after it), then placed
        let mut placements = Vec::new();
        for (rel, current, link) in moves.chain(links) {
            match self.route_rel(rel) {
                Ok((target, _)) => placements.push((current, target, link)),
                Err(e) => problems.push(e.to_string()),
            }
        }
        // a carried file is a hard link to the earlier version's bytes: its CRC32 holds (the
        // background worker would otherwise read every carried file again for each version)
        let crcs: std::collections::HashMap<&Path, u32> =
            carried.iter().filter_map(|f| Some((f.rel.as_path(), f.crc?))).collect();
        if let Some(rec) = self.filemap.datasets.get_mut(&id).filter(|_| !crcs.is_empty()) {
            for f in rec.files.iter_mut() {
                if let Some(crc) = crcs.get(f.rel.as_path()) {
                    f.crc = Some(*crc);
                }
            }
        }
        if let Err(e) = self.persist_start(id) {
            problems.push(e.to_string());
            placements.clear();
        }
        // directories made, with their parents (each once: most files of a dataset share a
        // few, and `out/si.save` made first makes `out` too)
        let mut made: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
        for (current, target, link) in placements {
            let parent = target.parent().unwrap_or(Path::new(""));
            let fresh = !made.contains(parent);
            let dirs = if fresh {
                self.make_parent_of(&target).map(|_| {
                    // (a directory already known has its parents known too)
                    for d in parent.ancestors() {
                        if !made.insert(d.to_path_buf()) {
                            break;
                        }
                    }
                })
            } else {
                Ok(())
            };
            let placed = dirs.and_then(|_| {
                if link {
                    link_file(current, &target)
                } else {
                    crate::paths::move_file(current, &target)
                        .map_err(|e| Error::io("move into the dataset", current, e))
                }
            });
            if let Err(e) = placed {
                problems.push(e.to_string());
            }
        }
        for rel in a.shared {
            if let Err(e) = self.route_shared_rel(rel) {
                problems.push(e.to_string());
            }
        }
        for p in &problems {
            crate::scr_error!("dataset {name}: {p}");
        }
        Ok(self.complete_output_logged(a.valid && problems.is_empty())?.then_some(id))
    }

    /// Every file of cached dataset `id` was removed by the application (collective): it
    /// leaves the cache, and the prefix's record of it goes too (its files there are gone).
    fn forget_removed(&mut self, id: u64) {
        if self.rank0() {
            crate::scr_debug!(1, "dataset {id}: the application removed all of its files; SCR forgets it");
        }
        self.drop_cached(id);
        let local = if self.rank0() && self.load_index().datasets.contains_key(&id) {
            crate::transfer::flush::delete_from_prefix(&self.layout, id)
        } else {
            Ok(())
        };
        if let Err(e) = local {
            crate::scr_warn!("dataset {id}: {e}");
        }
    }
}

fn flags_of(d: &crate::state::dataset::DatasetDesc) -> i32 {
    (if d.checkpoint { FLAG_CHECKPOINT } else { 0 }) | (if d.output { crate::FLAG_OUTPUT } else { 0 })
}

/// Hard-link a file of an earlier version into the new one (same store: same file system),
/// replacing what a killed attempt may have left under its name.
fn link_file(from: &Path, to: &Path) -> Result<()> {
    let link = || std::fs::hard_link(from, to);
    let r = match link() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::remove_file(to).and_then(|_| link()),
        r => r,
    };
    r.map_err(|e| Error::io("link into the new version of the dataset", from, e))
}
