//! Dataset boundaries: sync points and the agreement that completes datasets.
//!
//! The application never says when a checkpoint starts or ends, and its ranks write
//! different numbers of files (some none). SCR's collective steps therefore run only at
//! *sync points*, places every rank passes in the same order: each `MPI_Barrier` and
//! `MPI_Allreduce` on a communicator congruent to `MPI_COMM_WORLD`, and `MPI_Finalize`.
//!
//! At every sync point the ranks combine four numbers in one small allreduce on SCR's own
//! communicator: pending files open for writing, pending files closed, files of cached
//! datasets removed, namespace changes not yet shared. Changes (directory renames and
//! removals) are then exchanged and applied by every rank to its own files. Datasets complete
//! at the first sync point where no rank has a pending file open and some rank has closed
//! ones or removed a cached file (so an application that writes its checkpoint, passes a
//! barrier and then updates a "latest" pointer finds the checkpoint complete whenever it
//! finds the pointer). Completing means, on every rank: group the pending files by dataset
//! name (from the pattern; the ranks first agree which captures of default names are a
//! rank's part, [`super::naming`]), agree on the list of names, and form each dataset with
//! [`crate::runtime::adopt_output`], oldest first. A name is one checkpoint: files written
//! under the name of a cached dataset (a `meta` file written after the barrier, a file
//! added to a directory renamed into place) make a new version of it that holds the earlier
//! files too; removed files leave it. A failed write or close anywhere makes that dataset
//! invalid everywhere. Files several ranks write ([`super::shared`]) count as pending files
//! here and join their dataset as its shared files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use super::naming::Part;
use super::session::{self, Session};
use super::table::{Change, Committed, Table};
use crate::comm::Comm;
use crate::config::patterns::Route;
use crate::reentry::Inside;
use crate::runtime::{Adopt, Adopted};
use crate::{scr_error, scr_warn};

struct SyncState {
    comm: Comm,
    /// A checkpoint completed at the previous sync point: check the halt conditions now.
    halt_check: bool,
}

static SYNC: Mutex<Option<SyncState>> = Mutex::new(None);

/// Create SCR's communicator for the agreement (collective, inside `MPI_Init`).
pub(super) fn setup() {
    *SYNC.lock().unwrap_or_else(|e| e.into_inner()) = Some(SyncState { comm: Comm::world_dup(), halt_check: false });
}

/// Drop the communicator (before the real `MPI_Finalize`).
pub(super) fn teardown() {
    *SYNC.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// A sync point (collective; `last`: the one in `MPI_Finalize`). Returns `true` when a halt
/// condition holds after a checkpoint and `SCR_HALT_EXIT` is set: the caller ends the run
/// ([`session::stop`], the real `MPI_Finalize`, exit status 0).
pub fn point(last: bool) -> bool {
    let Some(s) = session::owner() else { return false };
    let _inside = Inside::enter();
    let mut g = SYNC.lock().unwrap_or_else(|e| e.into_inner());
    let Some(st) = g.as_mut() else { return false };
    if std::mem::take(&mut st.halt_check) && s.halt_exit && crate::runtime::should_exit().unwrap_or(false) {
        if s.rank == 0 {
            crate::log::emit("INFO", format_args!("halting the run after its checkpoint (SCR_HALT_EXIT=1)"));
        }
        return true;
    }
    let mut t = session::table();
    super::view::absorb(s, &mut t, true);
    t.epoch += 1;
    let c = t.counts();
    let agreed = st.comm.max_u64s(&[c.open, c.closed, c.removed, c.changes]);
    if agreed[3] > 0 {
        share_changes(s, &st.comm, &mut t);
    }
    if (agreed[1] > 0 || agreed[2] > 0) && (agreed[0] == 0 || last) {
        st.halt_check = complete(s, &st.comm, &mut t, false);
    }
    super::view::publish(s, &t);
    false
}

/// Namespace changes made by any rank apply to every rank's files.
fn share_changes(s: &Session, comm: &Comm, t: &mut Table) {
    let mine = t.take_changes();
    let all: Vec<Vec<Change>> = match comm.allgather(&mine) {
        Ok(all) => all,
        Err(e) => {
            // agreed by every rank: their own changes stand, the others' are not applied
            scr_error!("transparent mode: sharing directory renames and removals: {e}");
            return;
        }
    };
    for (r, list) in all.iter().enumerate() {
        if r as u32 == s.rank {
            continue;
        }
        for c in list {
            match c {
                Change::RenamedDir { from, to } => {
                    super::names::move_pending(s, t, from, to);
                    if let Err(e) = crate::runtime::rename_dir(from, to, false) {
                        scr_warn!("transparent mode: applying the rename of {}: {e}", from.display());
                    }
                }
                Change::RemovedDir { dir, epoch } => {
                    for bytes in t.remove_below(dir, *epoch) {
                        let _ = std::fs::remove_file(bytes);
                    }
                }
            }
        }
    }
    refresh_committed(t);
}

/// This rank's part of one dataset.
#[derive(Default)]
struct Group {
    flags: i32,
    epoch: u64,
    /// The pattern that named it.
    pattern: Option<usize>,
    /// (pending id, path relative to the prefix, bytes, failed)
    files: Vec<(u32, PathBuf, PathBuf, bool)>,
    /// (shared file id, path relative to the prefix, failed)
    shared: Vec<(u32, PathBuf, bool)>,
    removed: Vec<PathBuf>,
}

/// At start (collective, after the restart): files a killed run of this rank left pending
/// under the name of a checkpoint now in cache (a `meta` written after its barrier, the
/// crash before the next sync point) join it as a new version, as a plain file system would
/// have kept them. They only add files: a pending copy of a file the checkpoint has (an
/// update cut short) is not used. The rest never became a checkpoint and is removed.
pub(super) fn recover(s: &Session) {
    let _inside = Inside::enter();
    let mut g = SYNC.lock().unwrap_or_else(|e| e.into_inner());
    let Some(st) = g.as_mut() else { return };
    // before the collective below: no rank opens a staging name again until all passed it
    super::shared::remove_staged(s);
    let mut t = session::table();
    let mut found = Vec::new();
    crate::paths::walk_files(&s.pending, &mut |p| found.push(p.to_path_buf()));
    let mut added = 0u64;
    for p in found {
        let Ok(rel) = p.strip_prefix(&s.pending) else { continue };
        if t.held(rel).is_none() && !super::prefix::reserved(rel) {
            t.add(rel, p.clone(), false);
            added += 1;
        }
    }
    if st.comm.max_u64s(&[added])[0] > 0 {
        complete(s, &st.comm, &mut t, true);
    }
    // (completing forgot every file it looked at: what is left on disk joined nothing)
    let _ = crate::paths::remove_tree_if_exists(&s.pending);
}

/// Complete the pending datasets (`versions_only`: only new versions of cached datasets may
/// form); whether a checkpoint completed.
fn complete(s: &Session, comm: &Comm, t: &mut Table, versions_only: bool) -> bool {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut homeless = Vec::new();
    let route = |rel: &std::path::Path| rel.to_str().and_then(|r| s.patterns.route(r, s.rank));
    let pending: Vec<_> = t.closed_pending().into_iter().map(|(id, p)| (id, route(&p.rel), p.clone())).collect();
    let shared: Vec<_> = t.shared.closed_files().into_iter().map(|(id, e)| (id, route(&e.rel), e)).collect();
    // names agreed by the ranks: what differs between their files is a rank's part
    let varies = super::naming::agree(comm, pending.iter().filter_map(|f| f.1.as_ref()));
    let named = |r: &Route| r.named(|p, run| varies.contains(&(p, run)));
    for (id, route, p) in pending {
        let (name, flags, pattern) = match (route, &p.dataset) {
            (Some(r), _) => (named(&r), r.flags, Some(r.pattern)),
            (None, Some(name)) => (name.clone(), 0, None),
            (None, None) => {
                homeless.push(id);
                continue;
            }
        };
        let g = groups.entry(name).or_insert_with(|| Group { epoch: u64::MAX, ..Default::default() });
        g.flags |= flags;
        g.epoch = g.epoch.min(p.epoch);
        g.pattern = g.pattern.or(pattern);
        g.files.push((id, p.rel.clone(), p.cache.clone(), p.failed));
    }
    for (id, route, e) in shared {
        // declared only when a pattern routes it (its dataset's name)
        let Some(r) = route else {
            t.shared.forget(id);
            continue;
        };
        let g = groups.entry(named(&r)).or_insert_with(|| Group { epoch: u64::MAX, ..Default::default() });
        g.flags |= r.flags;
        g.epoch = g.epoch.min(e.epoch);
        g.pattern = g.pattern.or(Some(r.pattern));
        g.shared.push((id, e.rel, e.failed));
    }
    for (name, removed) in t.removed_by_name() {
        let g = groups.entry(name).or_insert_with(|| Group { epoch: t.epoch, ..Default::default() });
        g.removed = removed;
    }
    // files no pattern takes any more (held from an earlier run's patterns) go to the prefix
    for id in homeless {
        if let Some(p) = t.get(id).cloned() {
            super::calls::materialize(&p.cache, &s.prefix.join(&p.rel), true);
            t.forget(id);
        }
    }
    let summary: Vec<Part> = groups
        .iter()
        .map(|(n, g)| {
            let paths = g.files.iter().map(|f| &f.1).chain(g.shared.iter().map(|f| &f.1));
            let paths: Vec<String> = paths.map(|p| p.to_string_lossy().into_owned()).collect();
            Part {
                name: n.clone(),
                flags: g.flags,
                epoch: g.epoch,
                pattern: g.pattern,
                fresh: super::naming::fresh(n, paths.iter().map(String::as_str)),
                sample: paths.first().cloned().unwrap_or_default(),
            }
        })
        .collect();
    let mut names: BTreeMap<String, (i32, u64)> = BTreeMap::new();
    let lists = match comm.allgather(&summary) {
        Ok(l) => l,
        Err(e) => {
            // agreed by every rank: the files stay pending until the next sync point
            scr_error!("transparent mode: agreeing on the datasets to complete: {e}");
            return false;
        }
    };
    super::naming::check(&s.patterns, &lists, s.rank == 0);
    for list in lists {
        for p in list {
            let e = names.entry(p.name).or_insert((0, u64::MAX));
            e.0 |= p.flags;
            e.1 = e.1.min(p.epoch);
        }
    }
    let mut order: Vec<(u64, String, i32)> = names.into_iter().map(|(n, (fl, ep))| (ep, n, fl)).collect();
    order.sort();
    let mut checkpointed = false;
    for (_, name, flags) in order {
        let g = groups.remove(&name).unwrap_or_default();
        let files: Vec<(PathBuf, PathBuf)> = g.files.iter().map(|f| (f.1.clone(), f.2.clone())).collect();
        let shared: Vec<PathBuf> = g.shared.iter().map(|f| f.1.clone()).collect();
        let valid = !g.files.iter().any(|f| f.3) && !g.shared.iter().any(|f| f.2);
        let adopt = Adopt {
            name: &name,
            flags,
            files: &files,
            shared: &shared,
            removed: &g.removed,
            valid,
            version_only: versions_only,
        };
        let r = crate::runtime::adopt_output(&adopt);
        for (id, _, bytes, _) in &g.files {
            t.forget(*id);
            if r.is_err() {
                let _ = std::fs::remove_file(bytes);
            }
        }
        for (id, _, _) in &g.shared {
            t.shared.forget(*id);
        }
        match r {
            Ok(Adopted::Complete { checkpoint }) => checkpointed |= checkpoint,
            Ok(Adopted::Invalid) | Ok(Adopted::Removed) => {}
            Err(e) => scr_error!("transparent mode: dataset {name}: {e}"),
        }
    }
    refresh_committed(t);
    checkpointed
}

/// Rebuild the table's committed files from the runtime (after datasets completed or
/// changed, and at start).
pub(super) fn refresh_committed(t: &mut Table) {
    let files = crate::runtime::cached_files().unwrap_or_default();
    t.set_committed(files.into_iter().map(|f| (f.rel, Committed { cache: f.path, dataset: f.dataset, name: f.name })));
}
