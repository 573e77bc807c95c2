//! Directories made for checkpoint files. The application's `mkdir` goes to the prefix while
//! the files it makes the directory for go to cache; when their checkpoint leaves the cache
//! without a copy in the prefix (evicted, or the cache was lost), a plain file system would
//! have had them there and the directory would not be empty. An empty shell misleads
//! applications that restart from the newest directory they list (OpenFOAM's
//! `startFrom latestTime`: `cannot find file processor0/0.3/p`).
//!
//! So each process remembers the directories it made under the prefix ([`made`]). When a
//! dataset completes, the ones (any rank's) holding its files and made at most one sync point
//! before its first file are its *shells* ([`assign`]); rank 0 records every
//! dataset's shells and the directories of its files in `<prefix>/.scr/shells.scr`. After each
//! completion and at start (after the restart, so also after a lost cache), rank 0 removes
//! the shells of datasets that no longer exist (neither complete in cache nor in the prefix's
//! index; one that has left the cache but is in the prefix has its files there and leaves the
//! record), deepest first, with `rmdir`: a directory that is not empty (the application put
//! another file there) stays, and so does one holding files of a dataset that still exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::paths::RelPath;

use super::session::Session;
use super::table::Table;

/// Directories this process made under the prefix since the last completion, with the
/// sync-point epoch at which it made them.
static MADE: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());

/// At most this many are remembered (the oldest are forgotten).
const MADE_MAX: usize = 4096;

/// The application made directory `rel` (relative to the prefix) at sync-point epoch `epoch`.
pub(super) fn made(rel: PathBuf, epoch: u64) {
    let mut m = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if m.len() >= MADE_MAX {
        m.remove(0);
    }
    m.push((rel, epoch));
}

/// The application renamed directory `from` to `to` (a temporary directory renamed into place).
pub(super) fn renamed(from: &Path, to: &Path) {
    let mut m = MADE.lock().unwrap_or_else(|e| e.into_inner());
    for (d, _) in m.iter_mut() {
        if let Ok(rest) = d.strip_prefix(from) {
            *d = to.join(rest);
        }
    }
}

/// What this process made since the last completion (then forgotten: a directory made before
/// a checkpoint's first files, such as a run directory made at start, is not one of its
/// shells).
pub(super) fn take_made() -> Vec<(String, u64)> {
    let mut m = MADE.lock().unwrap_or_else(|e| e.into_inner());
    m.drain(..).map(|(d, e)| (d.to_string_lossy().into_owned(), e)).collect()
}

/// The shells of datasets completing together, from every rank's made directories: `names`
/// gives each dataset's first sync-point epoch and its files' directories (all ranks), oldest
/// first. A directory is a shell of the first dataset with files at or below it, if it was
/// made at most one sync point before that dataset's first file (rank 0 makes `ckpt.6`, a
/// barrier, then every rank writes in it).
pub(super) fn assign(names: &[(String, u64, Vec<String>)], made: &[(String, u64)]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); names.len()];
    for (dir, epoch) in made {
        let d = Path::new(dir);
        let owner = names
            .iter()
            .position(|(_, first, dirs)| epoch + 1 >= *first && dirs.iter().any(|f| Path::new(f).starts_with(d)));
        if let Some(i) = owner {
            if !out[i].contains(dir) {
                out[i].push(dir.clone());
            }
        }
    }
    out
}

/// `<prefix>/.scr/shells.scr`: per dataset name, its shells and its files' directories.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Record {
    names: BTreeMap<String, Entry>,
}

/// Both lists are read through [`RelPath`]: the file is in the prefix, which others may be
/// able to write, so an entry that is absolute or climbs out (`..`) makes the whole record
/// refused as damaged (the warning names the file) instead of naming a directory to remove.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Entry {
    shells: Vec<RelPath>,
    dirs: Vec<RelPath>,
}

const FILE: &str = "shells.scr";
const KIND: &str = "SHELLS";

/// The record as rank 0 last read it (only rank 0 writes it during a run): a completion that
/// changes nothing in it, a new version of a checkpoint whose directories are recorded
/// already, costs an open and an `fstat` in the prefix once the file has settled
/// ([`crate::persist::update_memo`]), not a lock, a read and a listing.
static MEMO: Mutex<crate::persist::Memo<Record>> = Mutex::new(None);

/// [`crate::persist::update_memo`] of the record (`f` may run twice: it has no side effect).
fn update<R>(s: &Session, f: impl FnMut(&mut Record) -> R) -> Result<R, crate::persist::MetaError> {
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    crate::persist::update_memo(&mut memo, &path(s), KIND, f)
}

fn path(s: &Session) -> PathBuf {
    s.prefix.join(Path::new(crate::paths::SCR_DIR)).join(FILE)
}

/// Rank 0, after a completion: record (name, shells, directories of its files) of every
/// dataset formed, forget the datasets whose files the application removed (their directories
/// are the application's business, as on a plain file system), then remove the shells of
/// datasets that are gone; at most one locked read and one write of the record, none when
/// nothing in it changes and it is the settled file rank 0 last read. A completion that
/// formed nothing and saw no removal changed nothing a sweep looks at (datasets leave the cache
/// only when one forms, or at start): the record is not even looked at.
pub(super) fn record(
    s: &Session,
    t: &Table,
    done: Vec<(String, Vec<String>, Vec<String>)>,
    removed_by_app: &[String],
    busy: &[PathBuf],
) {
    if done.is_empty() && removed_by_app.is_empty() {
        return;
    }
    let r = update(s, |r: &mut Record| {
        for n in removed_by_app {
            r.names.remove(n);
        }
        for (name, shells, dirs) in &done {
            let e = r.names.entry(name.clone()).or_default();
            for (list, add) in [(&mut e.shells, shells), (&mut e.dirs, dirs)] {
                // the application's directories, relative to the prefix and normalised
                for d in add.iter().filter_map(|d| RelPath::new(PathBuf::from(d)).ok()) {
                    if !list.contains(&d) {
                        list.push(d);
                    }
                }
            }
        }
        gone_shells(t, busy, r)
    });
    match r {
        Ok(gone) => remove_shells(s, gone),
        Err(e) => crate::scr_warn!("transparent mode: recording the directories made for checkpoints: {e}"),
    }
}

/// Rank 0 at start: remove the shells of datasets that no longer exist (a lost cache), and
/// forget them. A prefix without a record stays without one.
pub(super) fn sweep(s: &Session, t: &Table, busy: &[PathBuf]) {
    let p = path(s);
    match crate::persist::read::<Record>(&p, KIND) {
        Ok(Some(_)) => {}
        Ok(None) => return,
        Err(e) => {
            crate::scr_warn!("transparent mode: {e}; empty directories of gone checkpoints are left in the prefix");
            return;
        }
    }
    match update(s, |r: &mut Record| gone_shells(t, busy, r)) {
        Ok(gone) => remove_shells(s, gone),
        Err(e) => crate::scr_warn!("transparent mode: removing empty directories of gone checkpoints: {e}"),
    }
}

/// Forget the datasets in `r` that no longer exist; their shells to remove, deepest first.
/// Never one with a file SCR holds below it: rank 0's (`t`), or any rank's as agreed at the
/// sync point (`busy`: the directories of every rank's pending and open files), since other
/// ranks run on while rank 0 sweeps and a directory another rank writes into must not vanish.
fn gone_shells(t: &Table, busy: &[PathBuf], r: &mut Record) -> Vec<RelPath> {
    // a dataset that left the cache but is in the prefix has its files in its directories
    // there: nothing to remove, now or later; one in cache keeps its record until it leaves
    // the cache (so while every one is in cache, the usual case after a completion, the
    // prefix's index is not read)
    let names: Vec<String> = r.names.keys().cloned().collect();
    let Some(places) = crate::runtime::dataset_places(&names) else { return Vec::new() };
    let place = |n: &str| names.iter().position(|x| x == n).map_or((true, true), |i| places[i]);
    let mut gone = Vec::new();
    r.names.retain(|n, e| match place(n) {
        (_, true) => false,
        (true, false) => true,
        (false, false) => {
            gone.append(&mut e.shells);
            false
        }
    });
    let needed: Vec<&RelPath> = r.names.values().flat_map(|e| e.dirs.iter()).collect();
    // deepest first, so a parent made for the same checkpoint is empty when its turn comes
    gone.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    gone.dedup();
    gone.retain(|d| {
        !(needed.iter().any(|n| n.starts_with(d)) || t.any_below(d) || busy.iter().any(|b| b.starts_with(d)))
    });
    gone
}

/// Remove the shells [`gone_shells`] found (`rmdir`: one the application put a file in stays).
fn remove_shells(s: &Session, gone: Vec<RelPath>) {
    for d in gone {
        // never through a symbolic link below the prefix (someone who can write there could
        // point `ckpt.5` at another directory)
        match crate::paths::below(s.prefix.path(), &d) {
            // not empty (a file the application put there): it stays, as on a plain file system
            Ok(p) => {
                let _ = std::fs::remove_dir(p);
            }
            Err(e) => crate::scr_warn!("transparent mode: not removing a directory of a gone checkpoint: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn shells_are_directories_made_just_before_a_checkpoint_that_hold_its_files() {
        let names = vec![
            ("processor*/0.2".to_string(), 2, s(&["processor0/0.2", "processor1/0.2"])),
            ("ckpt.4".to_string(), 4, s(&["ckpt.4", "ckpt.4/sub"])),
        ];
        let made = vec![
            ("processor0".to_string(), 0),     // made at start: not the checkpoint's
            ("processor0/0.2".to_string(), 2), // made with its files
            ("processor1/0.2".to_string(), 2),
            ("ckpt.4".to_string(), 3), // rank 0 made it, then a barrier, then the files
            ("ckpt.4/sub".to_string(), 4),
            ("other".to_string(), 4), // holds no checkpoint file
        ];
        let got = assign(&names, &made);
        assert_eq!(got, [s(&["processor0/0.2", "processor1/0.2"]), s(&["ckpt.4", "ckpt.4/sub"])]);
    }
}
