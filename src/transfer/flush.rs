//! Flush: copy a cached dataset to the prefix and publish it.
//!
//! Protocol (crash-safe at every step):
//! 1. rank 0 records the dataset in the index as *flushing* (not complete);
//! 2. every rank copies its files (at most `SCR_FLUSH_WIDTH` ranks at once), each through a
//!    temporary name renamed only after size and CRC32 check out (mode bits and times kept; a
//!    hard link of an earlier file of the rank's dataset becomes a link of its copy);
//! 3. the ranks agree; rank 0 writes `rank2file.scr` and `summary.scr`, then marks the index
//!    entry complete with its flush time.
//!
//! A run killed before step 3 leaves an incomplete index entry, which fetch never uses.
//! Also here: the `SCR_PREFIX_SIZE` sliding window and deleting a dataset from the prefix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::copy::{copy_verified_paced, identity, try_link, Pace};
use super::Ctx;
use crate::error::{Error, Result};
use crate::identity;
use crate::state::filemap::{DatasetRecord, FileMeta};
use crate::state::index::{Index, IndexEntry};
use crate::state::layout::Layout;
use crate::state::summary::{PrefixFile, Rank2File, Summary};
use crate::{scr_debug, scr_warn};

/// Flush `rec` to the prefix. On success the CRC32 of every file is recorded in `rec`.
pub fn flush(ctx: &Ctx, rec: &mut DatasetRecord) -> Result<()> {
    let id = rec.desc.id;
    let what = format!("flush of dataset {id} ({})", rec.desc.name);
    let rank = ctx.world.rank();
    let t0 = Instant::now();

    supersede_overlapping(ctx.world, ctx.layout, Some(rec))?;
    // rank 0 records the flush, and checks and makes the prefix's directories of its files
    // for every rank (the ranks' files usually share them): one look at each in all, where
    // every rank looking would cost the prefix's metadata servers a few operations per rank
    let mark: (Option<String>, Vec<PathBuf>) = if rank == 0 {
        let err = mark_flushing(ctx.layout, rec).err().map(|e| e.to_string());
        let mut ready = BTreeSet::new();
        let ours = rec.files.iter().filter(|_| err.is_none());
        for f in ours.filter(|f| !in_place(ctx.layout, f)) {
            // (a refusal here is this rank's own copy's to report, below)
            let _ = ctx.layout.prefix.for_write(&f.rel, &mut ready);
        }
        (err, ready.into_iter().collect())
    } else {
        (None, Vec::new())
    };
    let (mark, checked) = ctx.world.bcast(0, &mark)?;
    if let Some(e) = mark {
        return Err(Error::Collective(format!("{what}: cannot record it in the index: {e}")));
    }

    let local = ctx.in_waves(ctx.settings.flush_width, || {
        let ready = checked.into_iter().collect();
        copy_files(ctx.layout, rec, ctx.settings.file_buf_size, ctx.settings.crc_on_flush, ready, &mut Pace::new(0))
    });
    let local_err = local.as_ref().err().map(|e| e.to_string());
    if !ctx.world.all_true(local_err.is_none()) {
        let summary = ctx.summarize_failures(&what, local_err);
        if rank == 0 {
            unmark_flushing(ctx.layout, id);
        }
        return Err(Error::Collective(summary));
    }
    let files = local.expect("checked above");
    if ctx.settings.crc_on_flush {
        for (meta, pf) in rec.files.iter_mut().zip(&files) {
            meta.crc = meta.crc.or(pf.crc);
        }
    }

    let all = ctx.world.gather(0, &files)?;
    let publish_err = all.and_then(|all| publish(ctx.layout, rec, all).err().map(|e| e.to_string()));
    if let Some(e) = ctx.world.bcast(0, &publish_err)? {
        return Err(Error::Collective(format!("{what}: {e}")));
    }
    let secs = ctx.world.max_f64(t0.elapsed().as_secs_f64());
    if rank == 0 {
        scr_debug!(
            1,
            "flushed dataset {id} ({}): {} in {secs:.3} s, {:.1} MiB/s",
            rec.desc.name,
            crate::log::bytes(rec.desc.size),
            crate::log::mib_per_sec(rec.desc.size, secs)
        );
        if rec.desc.checkpoint && ctx.settings.prefix_size > 0 {
            prune_window(ctx.layout, ctx.settings.prefix_size);
        }
    }
    Ok(())
}

/// The prefix paths (relative) a dataset's flush writes on this rank: its files and, once,
/// its shared files.
fn flush_paths(rec: &DatasetRecord) -> Vec<PathBuf> {
    rec.files.iter().map(|f| f.rel.clone()).chain(rec.desc.shared.iter().map(|f| f.rel.clone())).collect()
}

/// The prefix paths (relative) index entry `id` lists: every rank's files in its
/// `rank2file.scr` and the shared files in its `summary.scr` (none known: empty).
fn listed_paths(layout: &Layout, id: u64) -> Vec<PathBuf> {
    let shared = Summary::load(&layout.summary(id)).ok().flatten().map(|s| s.desc.shared).unwrap_or_default();
    let files = Rank2File::load(&layout.rank2file(id)).ok().flatten().map(|r| r.files).unwrap_or_default();
    files.into_values().flatten().map(|f| f.rel).chain(shared.into_iter().map(|f| f.rel)).collect()
}

/// Collective, before any rank copies dataset `rec` (`None`: not in this rank's cache) to the
/// prefix: rank 0 marks every older index entry that lists one of the paths this flush writes
/// as failed, superseded by it (a version rewriting files under a name kept for ever is a
/// checkpoint of its own, flushed to the same paths). Their bytes are about to be replaced,
/// so from now on no restart may load them: a flush killed half way leaves no entry that
/// mixes two versions.
pub(crate) fn supersede_overlapping(
    world: &crate::comm::Comm,
    layout: &Layout,
    rec: Option<&DatasetRecord>,
) -> Result<()> {
    let mine = (rec.map(|r| r.desc.id), rec.map(flush_paths).unwrap_or_default());
    let err = world.gather(0, &mine)?.and_then(|all| {
        let id = all.iter().find_map(|(id, _)| *id)?;
        let paths: std::collections::BTreeSet<PathBuf> = all.into_iter().flat_map(|(_, p)| p).collect();
        mark_superseded(layout, id, &paths).err().map(|e| e.to_string())
    });
    if let Some(e) = world.bcast(0, &err)? {
        return Err(Error::Collective(format!("cannot mark the datasets it supersedes in the index: {e}")));
    }
    Ok(())
}

/// Rank 0: mark the entries older than `id` that list one of `paths` failed, superseded by `id`.
fn mark_superseded(layout: &Layout, id: u64, paths: &std::collections::BTreeSet<PathBuf>) -> Result<()> {
    let ix = Index::load(&layout.index())?;
    let hit: Vec<u64> = ix
        .datasets
        .values()
        .filter(|e| e.desc.id < id && !e.failed)
        .filter(|e| listed_paths(layout, e.desc.id).iter().any(|p| paths.contains(p)))
        .map(|e| e.desc.id)
        .collect();
    if hit.is_empty() {
        return Ok(());
    }
    Index::update(&layout.index(), |ix| {
        for old in &hit {
            if let Some(e) = ix.datasets.get_mut(old) {
                scr_debug!(
                    1,
                    "dataset {id} is flushed over files of dataset {old} ({}): marked superseded",
                    e.desc.name
                );
                e.failed = true;
                e.superseded_by = Some(id);
            }
        }
    })?;
    Ok(())
}

/// Step 1: record the dataset in the index as being flushed (not complete), replacing any
/// entry of an earlier attempt.
pub(super) fn mark_flushing(layout: &Layout, rec: &DatasetRecord) -> Result<()> {
    Index::update(&layout.index(), |ix| {
        ix.datasets.insert(
            rec.desc.id,
            IndexEntry {
                desc: rec.desc.clone(),
                complete: false,
                flushed: None,
                flushing: true,
                failed: false,
                superseded_by: None,
                fetches: vec![],
            },
        );
    })?;
    Ok(())
}

/// A flush failed: the index entry stays incomplete and no longer claims a flush is running.
pub(crate) fn unmark_flushing(layout: &Layout, id: u64) {
    let _ = Index::update(&layout.index(), |ix| {
        if let Some(e) = ix.datasets.get_mut(&id) {
            e.flushing = false;
        }
    });
}

/// Whether `f` is a bypass dataset's file, written in place in the prefix (nothing to copy).
fn in_place(layout: &Layout, f: &FileMeta) -> bool {
    f.path == layout.prefix.path.join(&f.rel)
}

/// This rank's part of a flush: copy (or, for bypass datasets, check) each file. A cached file
/// that is a hard link of an earlier one of the dataset (the same inode: the application
/// linked it) becomes a hard link of that one's copy in the prefix, recorded as such. No MPI:
/// the background flush runs it in its own thread. `ready`: the prefix's directories
/// already checked and made for this flush ([`crate::paths::dirs_for_write`]).
pub(super) fn copy_files(
    layout: &Layout,
    rec: &DatasetRecord,
    buf: usize,
    crc_on_flush: bool,
    mut ready: BTreeSet<PathBuf>,
    pace: &mut Pace,
) -> Result<Vec<PrefixFile>> {
    let mut out: Vec<PrefixFile> = Vec::with_capacity(rec.files.len());
    // (device, inode) of a cached file copied already -> its place in `out`, its prefix copy
    // and the CRC32 of the bytes copied
    let mut copied: std::collections::HashMap<super::copy::FileId, (usize, PathBuf, u32)> = Default::default();
    for f in &rec.files {
        if in_place(layout, f) {
            // read, so its whole path is checked
            let dst = layout.prefix.below(&f.rel)?;
            let size = std::fs::metadata(&dst).map_err(|e| Error::io("stat", &dst, e))?.len();
            if size != f.size {
                return Err(Error::Integrity {
                    path: dst,
                    why: format!("size is {size} bytes, {} were written", f.size),
                });
            }
            out.push(PrefixFile { rel: f.rel.clone(), size, crc: f.crc, link: None });
            continue;
        }
        let dst = layout.prefix.for_write(&f.rel, &mut ready)?;
        let id = identity(&f.path);
        if let Some((first, first_dst, crc)) = id.and_then(|id| copied.get(&id)).cloned() {
            let of = &out[first];
            // the same bytes as recorded (a prefix that refuses hard links gets a copy)
            if of.size == f.size && f.crc.is_none_or(|c| c == crc) && try_link(&first_dst, &dst, false) {
                let link = crate::paths::RelPath::new(of.rel.clone()).ok();
                out.push(PrefixFile { rel: f.rel.clone(), size: f.size, crc: of.crc.or(f.crc), link });
                continue;
            }
        }
        let c = copy_verified_paced(&f.path, &dst, Some(f.size), f.crc, buf, pace)?;
        scr_debug!(2, "flushed {} -> {} ({} bytes, crc32 {:#010x})", f.path.display(), dst.display(), c.size, c.crc);
        let crc = if crc_on_flush { Some(c.crc) } else { f.crc };
        if let Some(id) = id {
            copied.insert(id, (out.len(), dst.clone(), c.crc));
        }
        out.push(PrefixFile { rel: f.rel.clone(), size: c.size, crc, link: None });
    }
    Ok(out)
}

/// Write the dataset's summary and rank-to-file map, then mark it complete in the index and,
/// for a checkpoint, current (rank 0 of a synchronous flush; the last rank to finish a
/// background flush).
pub(super) fn publish(layout: &Layout, rec: &DatasetRecord, all: Vec<Vec<PrefixFile>>) -> Result<()> {
    let id = rec.desc.id;
    // shared files were written in place: they must still be there as completed
    if let Some(why) = rec.desc.missing_shared(&layout.prefix.path).into_iter().next() {
        return Err(super::TransferError::SharedFile { why }.into());
    }
    let dir = layout.prefix_dataset_dir(id);
    layout.prefix.below(dir.strip_prefix(&layout.prefix.path).unwrap_or(&dir))?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("create directory", &dir, e))?;
    let r2f = Rank2File {
        ranks: all.len() as u32,
        files: all.into_iter().enumerate().map(|(r, f)| (r as u32, f)).collect::<BTreeMap<_, _>>(),
    };
    r2f.save(&layout.rank2file(id))?;
    Summary { desc: rec.desc.clone(), scheme: rec.reddesc.scheme.name().to_string() }.save(&layout.summary(id))?;
    Index::update(&layout.index(), |ix| {
        let e = ix.datasets.entry(id).or_insert_with(|| IndexEntry {
            desc: rec.desc.clone(),
            complete: false,
            flushed: None,
            flushing: false,
            failed: false,
            superseded_by: None,
            fetches: vec![],
        });
        e.desc = rec.desc.clone();
        e.complete = true;
        e.flushing = false;
        e.flushed = Some(identity::iso_time(identity::now_secs()));
        // as SCR does: the newest flushed checkpoint is where the next restart starts (a
        // current marker left on an older one would hide every newer checkpoint from fetch)
        if rec.desc.checkpoint {
            ix.current = Some(rec.desc.name.clone());
        }
    })?;
    Ok(())
}

/// Rank 0: keep at most `keep` checkpoints in the prefix, deleting the oldest; datasets
/// flagged output and the current checkpoint are never deleted.
pub(crate) fn prune_window(layout: &Layout, keep: usize) {
    let ix = match Index::load(&layout.index()) {
        Ok(ix) => ix,
        Err(e) => {
            scr_warn!("SCR_PREFIX_SIZE: cannot read the index, nothing pruned: {e}");
            return;
        }
    };
    let ckpts: Vec<&IndexEntry> =
        ix.datasets.values().rev().filter(|e| e.complete && e.desc.checkpoint && !e.desc.output).collect();
    // the current checkpoint: the newest usable entry of the name the marker gives
    let current = ix.current.as_deref().and_then(|c| {
        ix.datasets.values().rev().find(|e| e.desc.name == c && e.complete && !e.failed).map(|e| e.desc.id)
    });
    for e in ckpts.into_iter().skip(keep) {
        if current == Some(e.desc.id) {
            continue;
        }
        scr_debug!(1, "SCR_PREFIX_SIZE={keep}: deleting dataset {} ({}) from the prefix", e.desc.id, e.desc.name);
        if let Err(err) = delete_from_prefix(layout, e.desc.id) {
            scr_warn!("SCR_PREFIX_SIZE: could not delete dataset {} ({}): {err}", e.desc.id, e.desc.name);
        }
    }
}

/// A directory of a flushed dataset was renamed in the prefix (transparent mode: an
/// application renaming `ckpt.6.tmp` to `ckpt.6` after writing it): rename the dataset's
/// files in its `rank2file.scr`, and its name in `summary.scr` and the index where it is the
/// directory's, so fetch finds the files where they are now. `old`/`new` are relative to the
/// prefix. Each file is rewritten atomically; a crash in between leaves the rank-to-file map
/// renamed and the name not, which fetch does not mind.
pub(crate) fn rename_in_prefix(layout: &Layout, id: u64, old: &Path, new: &Path) -> Result<()> {
    let rename = |p: &Path| {
        p.strip_prefix(old)
            .ok()
            .map(|rest| if rest.as_os_str().is_empty() { new.to_path_buf() } else { new.join(rest) })
    };
    if let Some(mut r2f) = Rank2File::load(&layout.rank2file(id))? {
        let mut changed = false;
        for f in r2f.files.values_mut().flatten() {
            if let Some(n) = rename(&f.rel) {
                f.rel = n;
                changed = true;
            }
            // a hard link's record names its first file, which the rename moved too
            if let Some(n) = f.link.as_deref().and_then(rename).and_then(|n| crate::paths::RelPath::new(n).ok()) {
                f.link = Some(n);
                changed = true;
            }
        }
        if changed {
            r2f.save(&layout.rank2file(id))?;
        }
    }
    let new_name = |name: &str| rename(Path::new(name)).map(|p| p.to_string_lossy().into_owned());
    if let Some(mut sum) = Summary::load(&layout.summary(id))? {
        if let Some(n) = new_name(&sum.desc.name) {
            sum.desc.name = n;
            sum.save(&layout.summary(id))?;
        }
    }
    Index::update(&layout.index(), |ix| {
        if let Some(e) = ix.datasets.get_mut(&id) {
            if let Some(n) = new_name(&e.desc.name) {
                if ix.current.as_deref() == Some(e.desc.name.as_str()) {
                    ix.current = Some(n.clone());
                }
                e.desc.name = n;
            }
        }
    })?;
    Ok(())
}

/// What deleting a dataset from the prefix must leave there.
enum Keep {
    /// The paths another usable or in-flight entry lists.
    Listed(std::collections::BTreeSet<PathBuf>),
    /// Everything (why): e.g. the dataset that superseded this one is being flushed, its
    /// paths not yet known.
    All(String),
}

/// The prefix paths of dataset `id` that belong to other entries too: those a complete usable
/// entry or one being flushed lists (a name kept for ever: every version lists the same
/// paths, and only the newest bytes are there).
fn kept_by_others(layout: &Layout, id: u64) -> Keep {
    let Ok(ix) = Index::load(&layout.index()) else {
        return Keep::All("the index cannot be read".into());
    };
    let by = ix.datasets.get(&id).and_then(|e| e.superseded_by);
    let mut keep = std::collections::BTreeSet::new();
    for e in ix.datasets.values().filter(|e| e.desc.id != id && ((e.complete && !e.failed) || e.flushing)) {
        let listed = listed_paths(layout, e.desc.id);
        if e.flushing && listed.is_empty() && by == Some(e.desc.id) {
            return Keep::All(format!("dataset {} is being flushed over it", e.desc.id));
        }
        keep.extend(listed);
    }
    Keep::Listed(keep)
}

/// Rank 0: delete a dataset's files from the prefix (as listed in its `rank2file.scr`, and its
/// shared files as its `summary.scr` lists them) except those another usable or in-flight
/// entry lists too, the directories that became empty, its `.scr/scr.dataset.<id>` directory and its index entry.
/// A dataset any of whose paths goes through a symbolic link below the prefix is left whole
/// (an error naming the link): deleting through it would delete outside the prefix.
pub(crate) fn delete_from_prefix(layout: &Layout, id: u64) -> Result<()> {
    let meta = Path::new(crate::paths::SCR_DIR).join(format!("scr.dataset.{id}"));
    layout.prefix.below(&meta)?;
    let shared = Summary::load(&layout.summary(id)).ok().flatten().map(|s| s.desc.shared).unwrap_or_default();
    if let Some(r2f) = Rank2File::load(&layout.rank2file(id))? {
        let shared = shared.iter().map(|f| &f.rel);
        let rels: Vec<&PathBuf> = r2f.files.values().flatten().map(|f| &f.rel).chain(shared).collect();
        let paths = rels.iter().map(|rel| layout.prefix.below(rel)).collect::<Result<Vec<PathBuf>, _>>()?;
        let keep = kept_by_others(layout, id);
        for (rel, p) in rels.iter().zip(paths) {
            match &keep {
                Keep::All(why) => {
                    scr_debug!(1, "dataset {id}: {} left in the prefix: {why}", rel.display());
                    continue;
                }
                Keep::Listed(keep) if keep.contains(*rel) => {
                    scr_debug!(1, "dataset {id}: {} left in the prefix: another dataset lists it", rel.display());
                    continue;
                }
                Keep::Listed(_) => {}
            }
            crate::paths::remove_file_if_exists(&p)?;
            if let Some(parent) = p.parent() {
                crate::paths::prune_empty_dirs(parent, &layout.prefix.path);
            }
        }
    }
    crate::paths::remove_tree_if_exists(&layout.prefix_dataset_dir(id))?;
    Index::update(&layout.index(), |ix| {
        if let Some(e) = ix.datasets.remove(&id) {
            // the marker names the newest entry of that name: another may still carry it
            if ix.current.as_deref() == Some(e.desc.name.as_str()) && ix.by_name(&e.desc.name).is_none() {
                ix.current = None;
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::{Prefix, RelPath};

    #[test]
    fn a_renamed_directory_renames_the_hard_links_recorded_in_it() {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("prefix");
        std::fs::create_dir_all(prefix.join(".scr/scr.dataset.3")).unwrap();
        let layout = Layout::new(Prefix::new(&prefix), &d.path().join("cntl"), "u", "1");
        let file = |rel: &str, link: Option<&str>| PrefixFile {
            rel: PathBuf::from(rel),
            size: 1,
            crc: None,
            link: link.map(|l| RelPath::new(PathBuf::from(l)).unwrap()),
        };
        let files = vec![file("tmp.6/a", None), file("tmp.6/c", Some("tmp.6/a")), file("other/b", None)];
        Rank2File { ranks: 1, files: [(0, files)].into_iter().collect() }.save(&layout.rank2file(3)).unwrap();
        rename_in_prefix(&layout, 3, Path::new("tmp.6"), Path::new("ckpt.6")).unwrap();
        let r2f = Rank2File::load(&layout.rank2file(3)).unwrap().unwrap();
        let got: Vec<(String, Option<String>)> = r2f.files[&0]
            .iter()
            .map(|f| (f.rel.display().to_string(), f.link.as_deref().map(|l| l.display().to_string())))
            .collect();
        let want = [("ckpt.6/a", None), ("ckpt.6/c", Some("ckpt.6/a")), ("other/b", None)];
        assert_eq!(got, want.map(|(r, l)| (r.to_string(), l.map(String::from))));
    }
}
