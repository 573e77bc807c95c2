//! What the preload knows: the routing setup of the run ([`Active`], set once in `MPI_Init`),
//! the file table (pending files written since the last complete dataset, the committed
//! files of cached datasets, paths the application deleted), and a lock-free table of the
//! file descriptors that write pending files.
//!
//! Lock order: only [`files`] is a lock here, and nothing that can call a hooked function
//! runs while it is held except the library's own I/O, which passes through the hooks
//! because the re-entry guard is set first.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use scr::config::patterns::PatternSet;

/// The routing setup of this process, set once after `SCR_Init` succeeded in `MPI_Init`.
pub struct Active {
    pub rank: u32,
    pub pid: libc::pid_t,
    pub prefix: PathBuf,
    pub canonical: PathBuf,
    pub pending: PathBuf,
    pub patterns: PatternSet,
    /// End the run at the sync point after a checkpoint that meets a halt condition.
    pub halt_exit: bool,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();
/// Files are routed (between activation and `MPI_Finalize`).
static LIVE: AtomicBool = AtomicBool::new(false);
/// `MPI_Finalize` ran: late closes send pending files to the prefix.
static FINALIZED: AtomicBool = AtomicBool::new(false);

pub fn activate(a: Active) {
    let _ = ACTIVE.set(a);
    LIVE.store(true, Ordering::SeqCst);
}

pub fn set_finalized() {
    LIVE.store(false, Ordering::SeqCst);
    FINALIZED.store(true, Ordering::SeqCst);
}

pub fn finalized() -> bool {
    FINALIZED.load(Ordering::SeqCst)
}

pub fn active_any() -> Option<&'static Active> {
    ACTIVE.get()
}

/// The setup, if this process routes files now and the caller is not the library itself
/// and the application has not taken explicit control. This is the gate every path hook
/// passes first; [`crate::path::resolve`] then checks that this is not a forked child
/// (a system call, so only for paths under the prefix).
#[inline]
pub fn routing() -> Option<&'static Active> {
    if !LIVE.load(Ordering::Relaxed) || scr::reentry::inside() || scr::hooks::explicit() {
        return None;
    }
    ACTIVE.get()
}

/// Whether this is the process that activated (not a fork or vfork child).
pub fn is_owner(a: &Active) -> bool {
    // SAFETY: getpid has no preconditions (and is not cached by glibc, so it is right in a
    // vfork child, which shares this memory).
    unsafe { libc::getpid() == a.pid }
}

/// The process that owns the tables (late hooks after finalize use this, not `routing`).
pub fn owner() -> Option<&'static Active> {
    if scr::reentry::inside() {
        return None;
    }
    let a = ACTIVE.get()?;
    is_owner(a).then_some(a)
}

/// A file written since the last complete dataset.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The application's path (absolute, under the prefix).
    pub prefix: PathBuf,
    /// Where the bytes are (in the pending area).
    pub cache: PathBuf,
    /// Descriptors open for writing.
    pub writers: u32,
    /// Sync epoch of the last open for writing.
    pub epoch: u64,
    /// A write or close failed: the dataset is invalid.
    pub failed: bool,
    /// Unlinked while still open: dropped at the last close.
    pub deleted: bool,
}

#[derive(Default)]
pub struct Files {
    pub entries: HashMap<u32, Entry>,
    pub next_id: u32,
    pub by_path: HashMap<PathBuf, u32>,
    /// Prefix path -> cached file, for files of complete datasets in cache.
    pub committed: HashMap<PathBuf, PathBuf>,
    /// Prefix paths the application deleted or renamed away (committed copies stay SCR's).
    pub hidden: HashSet<PathBuf>,
    /// Directory renames done here since the last dataset (applied on every rank).
    pub dir_renames: Vec<(PathBuf, PathBuf)>,
    pub epoch: u64,
}

impl Files {
    pub fn add(&mut self, e: Entry) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let id = self.next_id;
        if let Some(old) = self.by_path.insert(e.prefix.clone(), id) {
            if let Some(o) = self.entries.get_mut(&old) {
                o.deleted = true;
            }
        }
        self.hidden.remove(&e.prefix);
        self.entries.insert(id, e);
        id
    }

    /// The pending entry of a prefix path (not deleted).
    pub fn pending(&self, p: &PathBuf) -> Option<u32> {
        self.by_path.get(p).copied().filter(|id| self.entries.get(id).is_some_and(|e| !e.deleted))
    }

    /// Forget an entry (its path no longer names it).
    pub fn unlink(&mut self, id: u32) {
        if let Some(e) = self.entries.get_mut(&id) {
            if self.by_path.get(&e.prefix) == Some(&id) {
                self.by_path.remove(&e.prefix);
            }
            if e.writers == 0 {
                self.entries.remove(&id);
            } else {
                e.deleted = true;
            }
        }
    }

    /// Where a path's current bytes are if SCR holds them: pending first, then committed.
    pub fn lookup(&self, p: &PathBuf) -> Option<PathBuf> {
        if let Some(id) = self.pending(p) {
            return Some(self.entries[&id].cache.clone());
        }
        if self.hidden.contains(p) {
            return None;
        }
        self.committed.get(p).cloned()
    }
}

static FILES: OnceLock<Mutex<Files>> = OnceLock::new();

pub fn files() -> MutexGuard<'static, Files> {
    FILES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Descriptor table: entry id, with [`WRITER`] set for descriptors open for writing.
const FD_SLOTS: usize = 1 << 16;
pub const WRITER: u32 = 1 << 31;
static FDS: [AtomicU32; FD_SLOTS] = [const { AtomicU32::new(0) }; FD_SLOTS];
static FD_OVERFLOW: Mutex<Option<HashMap<i32, u32>>> = Mutex::new(None);
static ANY_TRACKED: AtomicBool = AtomicBool::new(false);

pub fn fd_get(fd: i32) -> u32 {
    if !ANY_TRACKED.load(Ordering::Relaxed) || fd < 0 {
        return 0;
    }
    match FDS.get(fd as usize) {
        Some(s) => s.load(Ordering::Acquire),
        None => FD_OVERFLOW.lock().ok().and_then(|m| m.as_ref().and_then(|m| m.get(&fd).copied())).unwrap_or(0),
    }
}

pub fn fd_set(fd: i32, v: u32) {
    if fd < 0 {
        return;
    }
    if v != 0 {
        ANY_TRACKED.store(true, Ordering::Relaxed);
    }
    match FDS.get(fd as usize) {
        Some(s) => s.store(v, Ordering::Release),
        None => {
            if let Ok(mut m) = FD_OVERFLOW.lock() {
                let m = m.get_or_insert_with(HashMap::new);
                if v == 0 {
                    m.remove(&fd);
                } else {
                    m.insert(fd, v);
                }
            }
        }
    }
}

/// Saves errno on creation and restores it on drop (bookkeeping must not change it).
pub struct Errno(i32);

impl Errno {
    pub fn save() -> Errno {
        Errno(get_errno())
    }
    pub fn set(&mut self, v: i32) {
        self.0 = v;
    }
}

impl Drop for Errno {
    fn drop(&mut self) {
        set_errno(self.0);
    }
}

pub fn get_errno() -> i32 {
    // SAFETY: errno location of the calling thread.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(v: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v }
}
