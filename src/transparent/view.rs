//! What the processes a rank starts see: a shell from `system()`, Fortran's
//! `EXECUTE_COMMAND_LINE`, Python's `subprocess`, and the `ls` or `rm -r` they run. They never
//! initialise MPI, so they cannot route files; but the rank's cached files must not vanish
//! from their view either.
//!
//! The rank publishes its view: `<pending area>/view.<rank>`, a checked metadata file
//! ([`crate::persist`]) listing the cached files it holds (path below the prefix, bytes), written
//! at start and after each sync point that changed what it lists, and names it in the
//! environment its children inherit ([`ENV`]). A child process with the preload loaded (the
//! front end reads the variable at load time) serves reads, metadata calls, listings and
//! `realpath` of those files from the view, as the rank does; it changes no cached file. When
//! it removes one (`unlink`, `rm -r`, a rename out), it appends the removal to
//! `<pending area>/removed.<rank>` and counts it in `view.<rank>.removals`, which the rank maps
//! shared; the rank absorbs that journal before its next call on a path below the prefix
//! (looking at the count at most every millisecond, and at every sync point; at the journal
//! only when the count moved), so the removal reaches the dataset at the next sync point as
//! the rank's own would. Files
//! written since the last sync point are not in the view yet.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::prefix::{BaseFn, PrefixPaths};
use super::session::Session;
use super::table::{Change, Committed, Table};
use crate::paths::Prefix;
use crate::reentry::Inside;

/// The environment variable naming a rank's view file to the processes it starts.
pub const ENV: &std::ffi::CStr = c"SCR_PRELOAD_VIEW";
const KIND: &str = "preload-view";

#[derive(Debug, Serialize, Deserialize)]
struct ViewFile {
    rank: u32,
    prefix: PathBuf,
    canonical: PathBuf,
    journal: PathBuf,
    /// (path below the prefix, bytes)
    files: Vec<(PathBuf, PathBuf)>,
}

/// Where a rank's view file and journal of removals are (beside its pending directory).
pub(super) fn paths(pending_root: &Path, rank: u32) -> (PathBuf, PathBuf) {
    (pending_root.join(format!("view.{rank}")), pending_root.join(format!("removed.{rank}")))
}

/// The table generation last published (so an unchanged table is not written again).
static PUBLISHED: AtomicU64 = AtomicU64::new(u64::MAX);

/// The files of the view last written: a table that changed only in files the view does not
/// list (pending ones, the most frequent change) is not written again either.
static WRITTEN: std::sync::Mutex<Option<Vec<(PathBuf, PathBuf)>>> = std::sync::Mutex::new(None);

/// The rank: publish its view if the table changed since the last time.
pub(super) fn publish(s: &Session, t: &Table) {
    let Some(view) = &s.view else { return };
    // (the caller holds the table: no other publish runs meanwhile)
    if PUBLISHED.load(Ordering::Relaxed) == t.generation() {
        return;
    }
    PUBLISHED.store(t.generation(), Ordering::Relaxed);
    let own = t
        .visible_below(Path::new(""))
        .filter(|(rel, _)| matches!(t.held(rel), Some(super::table::Held::Committed(_))))
        .map(|(rel, cache)| (rel.to_path_buf(), cache.to_path_buf()));
    // other ranks' files on this node too ([`super::peers`]; another node's bytes are not here)
    let peers = t
        .peers_below(Path::new(""))
        .filter_map(|(rel, p)| p.local.as_ref().map(|bytes| (rel.to_path_buf(), bytes.clone())));
    let files: Vec<(PathBuf, PathBuf)> = own.chain(peers).collect();
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    if written.as_ref() == Some(&files) {
        return;
    }
    let v = ViewFile {
        rank: s.rank,
        prefix: s.prefix.path().to_path_buf(),
        canonical: s.prefix.canonical().to_path_buf(),
        journal: s.journal.clone(),
        files,
    };
    // (the view only matters while this rank runs: no fsync)
    match crate::persist::write_atomic_unsynced(view, KIND, &v) {
        Ok(()) => *written = Some(v.files),
        Err(e) => {
            *written = None;
            crate::scr_warn!("transparent mode: child processes will not see the cached files: {e}");
        }
    }
}

/// The view file this process was started with ([`ENV`], as the front end read it), and
/// how the front end reads base directories.
static FROM_ENV: OnceLock<(PathBuf, BaseFn)> = OnceLock::new();

/// The front end, at load time: the value of [`ENV`], if set.
pub fn inherited(path: &std::ffi::CStr, base: BaseFn) {
    use std::os::unix::ffi::OsStrExt;
    let _ = FROM_ENV.set((PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())), base));
}

/// Whether this process was started by a rank (known once the front end was loaded).
pub(super) fn inherited_any() -> bool {
    FROM_ENV.get().is_some()
}

/// A child process: its read-only session and its table's files, from the view file.
pub(super) fn load() -> Option<(Session, Vec<(PathBuf, Committed)>)> {
    let (path, base) = FROM_ENV.get()?;
    let _inside = Inside::enter();
    let v: ViewFile = crate::persist::read(path, KIND).ok().flatten()?;
    let files =
        v.files.into_iter().map(|(rel, cache)| (rel, Committed { cache, dataset: 0, name: String::new() })).collect();
    let s =
        Session::child(v.rank, PrefixPaths::from(Prefix { path: v.prefix, canonical: v.canonical }), v.journal, *base);
    Some((s, files))
}

/// A removal a child made: a file, or a directory.
fn record(s: &Session, kind: u8, rel: &Path) {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut line = vec![kind];
    line.extend_from_slice(rel.as_os_str().as_bytes());
    line.push(0);
    // one write with O_APPEND: entries of concurrent children never interleave
    let r = std::fs::OpenOptions::new().append(true).create(true).open(&s.journal).and_then(|mut f| f.write_all(&line));
    if let Err(e) = r {
        crate::scr_warn!("transparent mode: cannot tell rank {} of the removal of {}: {e}", s.rank, rel.display());
    }
    // then the count, which the rank reads without a system call
    if let Some(c) = Counter::map(s) {
        c.get().fetch_add(1, Ordering::SeqCst);
    }
}

/// The number of entries children appended to a rank's journal, in a file beside its view
/// (`view.<rank>.removals`) that the rank and its children map shared: the rank looks at the
/// journal only when the count moved, so its sync points and path calls make no system call
/// for it while no child removed anything.
struct Counter(crate::sys::SharedWords);

impl Counter {
    /// Beside the view file: `view.<rank>.removals`.
    fn path(s: &Session) -> PathBuf {
        s.journal.with_file_name(format!("view.{}.removals", s.rank))
    }

    /// Map the count of `s`'s journal (created, 8 zero bytes, if missing).
    fn map(s: &Session) -> Option<Counter> {
        use std::os::fd::AsFd;
        let f =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(Self::path(s)).ok()?;
        if f.metadata().ok()?.len() < 8 {
            f.set_len(8).ok()?;
        }
        crate::sys::SharedWords::map(f.as_fd(), 1).ok().map(Counter)
    }

    fn get(&self) -> &AtomicU64 {
        self.0.word(0)
    }
}

/// A child removed the cached file `rel`.
pub(super) fn removed_file(s: &Session, rel: &Path) {
    record(s, b'f', rel);
}

/// A child removed directory `rel` of the prefix.
pub(super) fn removed_dir(s: &Session, rel: &Path) {
    record(s, b'd', rel);
}

/// How often the rank looks for its children's journal: a child (a shell, `rm`) takes longer
/// than this to start, so a removal made by a command the rank waited for is always seen.
const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// The count the rank's children keep ([`absorb`]): the journal is read only when it moved
/// (`SEEN`, `u64::MAX`: never read); without it (it could not be mapped), at most every
/// [`LOOK_EVERY`] unless `now`. With the address of the session it was mapped for, the
/// rank's, which lives as long as the process; any other session (only tests make one) looks
/// as without a count.
static COUNTER: OnceLock<(usize, Option<Counter>)> = OnceLock::new();
static SEEN: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether the rank's children removed something it has not absorbed yet: one load of their
/// count (false before the rank's first look, and without a mapped count). A deferred sync
/// point on the node board posts it as news ([`super::sync::defer_on_board`]).
#[inline]
pub(super) fn children_moved() -> bool {
    COUNTER
        .get()
        .and_then(|(_, c)| c.as_ref())
        .is_some_and(|c| c.get().load(Ordering::SeqCst) != SEEN.load(Ordering::Relaxed))
}

/// The rank: apply what its children removed since the last look (`now`: whatever the time
/// since the last look; otherwise at most every [`LOOK_EVERY`], no system call in between).
pub(super) fn absorb(s: &'static Session, t: &mut Table, now: bool) {
    use std::os::unix::ffi::OsStrExt;
    let by = s as *const Session as usize;
    let (of, counter) = COUNTER.get_or_init(|| (by, Counter::map(s)));
    if let Some(c) = counter.as_ref().filter(|_| *of == by) {
        let n = c.get().load(Ordering::SeqCst);
        if SEEN.load(Ordering::Relaxed) == n {
            return;
        }
        SEEN.store(n, Ordering::Relaxed);
    } else {
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        static LAST: AtomicU64 = AtomicU64::new(0);
        let at = START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1;
        if !now && at.saturating_sub(LAST.load(Ordering::Relaxed)) < LOOK_EVERY.as_nanos() as u64 {
            return;
        }
        LAST.store(at, Ordering::Relaxed);
    }
    if std::fs::symlink_metadata(&s.journal).is_err() {
        return;
    }
    let mut taken = s.journal.as_os_str().to_owned();
    taken.push(".taken");
    let taken = PathBuf::from(taken);
    if std::fs::rename(&s.journal, &taken).is_err() {
        return;
    }
    let bytes = std::fs::read(&taken).unwrap_or_default();
    let _ = std::fs::remove_file(&taken);
    for entry in bytes.split(|b| *b == 0).filter(|e| e.len() > 1) {
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(&entry[1..]));
        match entry[0] {
            b'f' => match t.remove(&rel) {
                (Some(pending), _) => {
                    let _ = std::fs::remove_file(pending);
                }
                (None, false) => {
                    // another rank's file (on this node) the child saw
                    t.remove_peer(&rel);
                }
                (None, true) => {}
            },
            b'd' => {
                let epoch = t.epoch;
                t.record(Change::RemovedDir { dir: rel, epoch });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_by_children_reach_the_rank_table() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("removed.0");
        let base: BaseFn = |_, _| None;
        let s: &'static Session = Box::leak(Box::new(Session::child(
            0,
            PrefixPaths::from(Prefix { path: "/p".into(), canonical: "/p".into() }),
            journal.clone(),
            base,
        )));
        let mut t = Table::default();
        let c = |n: &str| Committed { cache: dir.path().join(n), dataset: 1, name: "ckpt.1".into() };
        t.set_committed([(PathBuf::from("ckpt.1/a"), c("a")), (PathBuf::from("ckpt.1/b"), c("b"))]);
        absorb(s, &mut t, true); // no journal: nothing happens
        assert!(t.held(Path::new("ckpt.1/a")).is_some());
        removed_file(s, Path::new("ckpt.1/a"));
        removed_dir(s, Path::new("ckpt.1/sub"));
        absorb(s, &mut t, true);
        assert!(t.held(Path::new("ckpt.1/a")).is_none());
        assert!(t.held(Path::new("ckpt.1/b")).is_some());
        assert_eq!(t.removed_by_name().get("ckpt.1"), Some(&vec![PathBuf::from("ckpt.1/a")]));
        assert_eq!(t.take_changes(), vec![Change::RemovedDir { dir: PathBuf::from("ckpt.1/sub"), epoch: 0 }]);
        assert!(!journal.exists(), "the journal is taken once");
        // the rank reads the journal only when the children's count moved
        std::fs::write(&journal, b"fckpt.1/b\0").unwrap();
        absorb(s, &mut t, true);
        assert!(journal.exists() && t.held(Path::new("ckpt.1/b")).is_some(), "not counted: not looked at");
        removed_dir(s, Path::new("ckpt.1/other"));
        absorb(s, &mut t, true);
        assert!(!journal.exists() && t.held(Path::new("ckpt.1/b")).is_none());
        assert_eq!(std::fs::read(dir.path().join("view.0.removals")).unwrap(), 3u64.to_ne_bytes());
    }
}
