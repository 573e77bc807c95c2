//! Dataset boundaries under interposition.
//!
//! The application never says when a checkpoint starts or ends, and its ranks write
//! different numbers of files (some none). SCR's collective steps therefore run only at
//! *sync points*, places every rank passes in the same order: each `MPI_Barrier` and
//! `MPI_Allreduce` on a communicator congruent to `MPI_COMM_WORLD`, and `MPI_Finalize`.
//!
//! At every sync point the ranks combine three numbers in one small allreduce on SCR's own
//! communicator: descriptors open for writing pending files, pending files closed, directory
//! renames not yet shared. A dataset completes at the first sync point
//! where no rank has a pending file open and some rank has closed ones (so an application
//! that writes its checkpoint, passes a barrier and then updates a "latest" pointer file finds
//! the checkpoint complete whenever it finds the pointer). Completing means, on every rank:
//! group the pending files by dataset name (from the pattern), agree on the list of names,
//! and run one SCR output phase per name over them ([`scr::runtime::adopt_output`]):
//! redundancy, flush and halt policy as configured. A failed write or close anywhere makes
//! that dataset invalid everywhere.
//!
//! A directory renamed under the prefix (`ckpt.6.tmp` to `ckpt.6`, usually by one rank) is
//! renamed in the prefix by that rank, which also records it in the prefix's rename log;
//! the others apply it to their own files at the next sync point, or at restart from the log
//! if they never reach one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use scr::comm::Comm;
use scr::reentry::Inside;

use crate::state::{files, Active};

struct Sync {
    comm: Comm,
    /// A checkpoint completed at the previous sync point: check the halt conditions now.
    halt_check: bool,
}

const OPEN: usize = 0;
const CLOSED: usize = 1;
const RENAMES: usize = 2;

static SYNC: Mutex<Option<Sync>> = Mutex::new(None);

/// Create SCR's communicator for the agreement (collective, inside `MPI_Init`).
pub fn setup() {
    *SYNC.lock().unwrap_or_else(|e| e.into_inner()) = Some(Sync { comm: Comm::world_dup(), halt_check: false });
}

/// A sync point (collective). `last`: the one in `MPI_Finalize`.
pub fn point(a: &Active, last: bool) {
    let _inside = Inside::enter();
    let mut g = SYNC.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = g.as_mut() else { return };
    if std::mem::take(&mut s.halt_check) && a.halt_exit && scr::runtime::should_exit().unwrap_or(false) {
        drop(g);
        crate::mpi_hooks::halt_exit(a.rank);
    }
    let (open, closed, renames) = {
        let mut f = files();
        f.epoch += 1;
        let live = f.entries.values().filter(|e| !e.deleted);
        let (mut open, mut closed) = (0u64, 0u64);
        for e in live {
            if e.writers > 0 {
                open += 1;
            } else {
                closed += 1;
            }
        }
        (open, closed, f.dir_renames.len() as u64)
    };
    let agreed = s.comm.max_u64s(&[open, closed, renames]);
    if agreed[RENAMES] > 0 {
        share_renames(a, &s.comm);
    }
    let commit = agreed[CLOSED] > 0 && (agreed[OPEN] == 0 || last);
    if commit {
        s.halt_check = complete(a, &s.comm);
    }
}

/// Directory renames done by any rank apply to every rank's files.
fn share_renames(a: &Active, comm: &Comm) {
    let mine: Renames = std::mem::take(&mut files().dir_renames);
    let all: Vec<Renames> = match comm.allgather(&mine) {
        Ok(all) => all,
        Err(e) => {
            // agreed by every rank: the renames are applied in the prefix, records follow at restart
            scr::scr_error!("transparent mode: sharing directory renames: {e}");
            return;
        }
    };
    for (r, list) in all.iter().enumerate() {
        if r as u32 == a.rank {
            continue;
        }
        for (old, new) in list {
            crate::fileops::move_dir(a, old, new);
            if let (Ok(o), Ok(n)) = (old.strip_prefix(&a.prefix), new.strip_prefix(&a.prefix)) {
                let _ = scr::runtime::rename_dir(o, n, false);
            }
        }
    }
    refresh_committed();
}

type Renames = Vec<(PathBuf, PathBuf)>;

/// This rank's files of one dataset: (entry id, prefix path, pending path, failed).
type Group = (i32, u64, Vec<(u32, PathBuf, PathBuf, bool)>);

/// Complete the pending datasets; whether a checkpoint completed.
fn complete(a: &Active, comm: &Comm) -> bool {
    // 1. closed pending files by dataset (name, flags, first epoch)
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    {
        let f = files();
        for (id, e) in f.entries.iter().filter(|(_, e)| !e.deleted && e.writers == 0) {
            let Some(rel) = e.prefix.strip_prefix(&a.prefix).ok().and_then(|r| r.to_str()) else { continue };
            let Some(route) = a.patterns.route(rel, a.rank) else { continue };
            let g = groups.entry(route.name).or_insert((0, u64::MAX, Vec::new()));
            g.0 |= route.flags;
            g.1 = g.1.min(e.epoch);
            g.2.push((*id, e.prefix.clone(), e.cache.clone(), e.failed));
        }
    }
    let summary: Vec<(String, i32, u64)> = groups.iter().map(|(n, (fl, ep, _))| (n.clone(), *fl, *ep)).collect();
    let mut names: BTreeMap<String, (i32, u64)> = BTreeMap::new();
    let lists = match comm.allgather(&summary) {
        Ok(l) => l,
        Err(e) => {
            // agreed by every rank: the files stay pending until the next sync point
            scr::scr_error!("transparent mode: agreeing on the datasets to complete: {e}");
            return false;
        }
    };
    for list in lists {
        for (n, fl, ep) in list {
            let e = names.entry(n).or_insert((0, u64::MAX));
            e.0 |= fl;
            e.1 = e.1.min(ep);
        }
    }
    let mut order: Vec<(u64, String, i32)> = names.into_iter().map(|(n, (fl, ep))| (ep, n, fl)).collect();
    order.sort();
    // 2. one output phase per dataset, oldest first
    let mut checkpointed = false;
    for (_, name, flags) in order {
        let list = groups.remove(&name).map(|g| g.2).unwrap_or_default();
        let valid = !list.iter().any(|x| x.3);
        let pairs: Vec<(PathBuf, PathBuf)> = list.iter().map(|x| (x.1.clone(), x.2.clone())).collect();
        let r = scr::runtime::adopt_output(&name, flags, &pairs, valid);
        let mut f = files();
        for (id, _, cache, _) in &list {
            f.unlink(*id);
            if r.is_err() {
                let _ = std::fs::remove_file(cache);
            }
        }
        drop(f);
        match r {
            Ok((true, _)) => checkpointed |= flags & scr::runtime::FLAG_CHECKPOINT != 0,
            Ok((false, _)) => {}
            Err(e) => scr::scr_error!("transparent mode: dataset {name}: {e}"),
        }
    }
    refresh_committed();
    checkpointed
}

/// Rebuild the table of cached dataset files (after a dataset completed or at restart).
pub fn refresh_committed() {
    let list = scr::runtime::cached_files().unwrap_or_default();
    let mut f = files();
    f.committed = list.into_iter().collect();
    let hidden: Vec<PathBuf> = f.hidden.iter().filter(|p| f.committed.contains_key(*p)).cloned().collect();
    f.hidden = hidden.into_iter().collect();
}

/// Drop the communicator (before the real `MPI_Finalize`).
pub fn teardown() {
    let _inside = Inside::enter();
    *SYNC.lock().unwrap_or_else(|e| e.into_inner()) = None;
}
