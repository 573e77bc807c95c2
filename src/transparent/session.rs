//! Starting and stopping transparent mode, and the process-wide state every call consults.
//!
//! [`start`] runs once, right after the application's `MPI_Init*` succeeded: `SCR_Init` in
//! transparent mode (rebuild, fetch), the restart, the communicator of the sync points, the
//! table of cached files; then routing begins. [`finish`] runs in `MPI_Finalize` before the
//! real one: the last sync point, then `SCR_Finalize`. Files closed after that (or still
//! pending at process exit, [`at_exit`]) go to their prefix paths.
//!
//! Before [`start`], after [`finish`], in processes that never initialise MPI, in forked
//! children and while the library itself works on a thread ([`crate::reentry`]), routing is
//! off and every call passes. Lock order: the sync state, then the table; the runtime never
//! calls back into this module. A sync point decides what completes with the table held, then
//! lets the runtime form the datasets (move, encode, flush) without it ([`without_table`]):
//! meanwhile a call of another thread on a file that completion does not touch proceeds
//! ([`table_for_file`], [`table_for_id`]), every other call waits for the completion to end,
//! as it waited for the lock before.

use std::cell::Cell;
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::prefix::{reserved, BaseFn, PrefixPaths, PATH_MAX};
use super::table::{Completing, Table};
use crate::config::patterns::PatternSet;
use crate::reentry::Inside;
use crate::{scr_debug, scr_error, scr_warn};

/// The routing setup of this process, fixed at [`start`].
pub struct Session {
    pub rank: u32,
    pid: u32,
    pub prefix: PrefixPaths,
    /// This rank's pending area.
    pub pending: PathBuf,
    pub patterns: PatternSet,
    /// Files several ranks write (`SCR_PRELOAD_SHARED`).
    pub shared: PatternSet,
    /// End the run at the sync point after a checkpoint that meets a halt condition.
    pub halt_exit: bool,
    pub base: BaseFn,
    /// A process the rank started ([`super::view`]): it reads the rank's cached files and
    /// reports removals, nothing more.
    pub child: bool,
    /// The rank: where it publishes its view for the processes it starts.
    pub view: Option<PathBuf>,
    /// Where children record what they removed.
    pub journal: PathBuf,
}

impl Session {
    /// The session of a process started by rank `rank` (read-only, see [`super::view`]).
    pub(super) fn child(rank: u32, prefix: PrefixPaths, journal: PathBuf, base: BaseFn) -> Session {
        Session {
            rank,
            pid: std::process::id(),
            prefix,
            pending: PathBuf::new(),
            patterns: PatternSet::compile(&[]).expect("an empty pattern list always compiles"),
            shared: PatternSet::compile(&[]).expect("an empty pattern list always compiles"),
            halt_exit: false,
            base,
            child: true,
            view: None,
            journal,
        }
    }

    /// Whether this is the process that started (not a fork or vfork child, which shares or
    /// copies this memory but must not act on it).
    pub fn is_owner(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Where this rank's pending copy of `rel` lives, its directory created.
    pub fn make_pending(&self, rel: &std::path::Path) -> std::io::Result<PathBuf> {
        let cache = self.pending.join(rel);
        if let Some(parent) = cache.parent() {
            std::fs::create_dir_all(parent)?;
        }
        Ok(cache)
    }

    /// Whether a pattern routes `rel` for this rank.
    pub fn routed(&self, rel: &std::path::Path) -> bool {
        rel.to_str().is_some_and(|r| self.patterns.takes(r, self.rank))
    }

    /// Whether `rel` is a checkpoint file `SCR_PRELOAD_SHARED` declares shared.
    pub fn declared_shared(&self, rel: &std::path::Path) -> bool {
        rel.to_str().is_some_and(|r| self.shared.takes(r, self.rank)) && self.routed(rel)
    }

    /// The path argument relative to the prefix (`""` for the prefix itself), if it is below
    /// it, is not SCR's own ([`reserved`]) and this is the process that routes.
    pub(super) fn resolve(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        self.resolve_any(dirfd, path).filter(|rel| !reserved(rel))
    }

    /// As [`Session::resolve`], SCR's own names included.
    pub(super) fn resolve_any(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        let bytes = path.to_bytes();
        let mut buf = [0u8; PATH_MAX];
        let base = match bytes.first() {
            None => return None,
            Some(b'/') => None,
            Some(_) => (self.base)(dirfd, &mut buf).map(|n| &buf[..n]),
        };
        if !self.prefix.may_contain(bytes, base) || !self.is_owner() {
            return None;
        }
        self.prefix.relative(bytes, base)
    }

    /// As [`Session::resolve`], for a file below the prefix (not the prefix itself).
    pub(super) fn resolve_file(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        self.resolve(dirfd, path).filter(|rel| !rel.as_os_str().is_empty())
    }

    /// The absolute, normalised form of any path argument.
    pub(super) fn absolute(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        let p = Path::new(OsStr::from_bytes(path.to_bytes()));
        if p.is_absolute() {
            return Some(crate::paths::normalize(p, Path::new("/")));
        }
        let mut buf = [0u8; PATH_MAX];
        let n = (self.base)(dirfd, &mut buf)?;
        Some(crate::paths::normalize(p, Path::new(OsStr::from_bytes(&buf[..n]))))
    }
}

static SESSION: OnceLock<Session> = OnceLock::new();
/// Files are routed (between [`start`] and [`finish`]).
static LIVE: AtomicBool = AtomicBool::new(false);
/// [`finish`] ran: late closes send pending files to the prefix.
static FINISHED: AtomicBool = AtomicBool::new(false);
static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
/// A process started by a rank: its read-only session, if the rank published a view.
static CHILD: OnceLock<Option<Session>> = OnceLock::new();

/// Signalled when a completion ends (with the table mutex).
static COMPLETED: Condvar = Condvar::new();

thread_local! {
    /// This thread runs the completion the table names (const-initialised, no destructor:
    /// usable in any hook).
    static COMPLETING_HERE: Cell<bool> = const { Cell::new(false) };
}

fn lock() -> MutexGuard<'static, Table> {
    TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The table, once no completion of another thread that `touches` the caller's files runs.
fn table_unless(touches: impl Fn(&Table, &Completing) -> bool) -> MutexGuard<'static, Table> {
    let mut t = lock();
    while t.completing.as_ref().is_some_and(|c| touches(&t, c)) && !COMPLETING_HERE.try_with(Cell::get).unwrap_or(false)
    {
        t = COMPLETED.wait(t).unwrap_or_else(|e| e.into_inner());
    }
    t
}

/// The file table (waiting while another thread's completion runs: the caller may look at
/// or change any entry).
pub(super) fn table() -> MutexGuard<'static, Table> {
    table_unless(|_, _| true)
}

/// Absorb what this rank's children removed (unless a completion runs: a removed file is a
/// committed one, whose calls wait for it anyway; the next call or sync point absorbs it).
fn absorbed(mut t: MutexGuard<'static, Table>) -> MutexGuard<'static, Table> {
    if let Some(s) = SESSION.get().filter(|s| s.is_owner() && t.completing.is_none()) {
        super::view::absorb(s, &mut t, false);
    }
    t
}

/// The file table for a call on a path: in a rank, what its children removed is absorbed
/// first, so a path a child removed is gone.
pub(super) fn table_now() -> MutexGuard<'static, Table> {
    absorbed(table())
}

/// [`table_now`] for a call that only reads what SCR holds for the file `rel` (a stat, an
/// open for reading): it waits for another thread's completion only when that completion
/// takes `rel` or `rel` is a committed file.
pub(super) fn table_for_file(rel: &Path) -> MutexGuard<'static, Table> {
    absorbed(table_unless(|t, c| c.rels.contains(rel) || t.is_committed(rel)))
}

/// [`table`] for a call on a descriptor of tracked file `id`: it waits for another thread's
/// completion only when that completion takes `id`.
pub(super) fn table_for_id(id: u32) -> MutexGuard<'static, Table> {
    table_unless(|_, c| c.ids.contains(&id))
}

/// Run `work` (the runtime forming the datasets a completion decided, which touches none of
/// the table) without the table lock: the table records `busy` meanwhile, so other threads'
/// calls on those files (and on committed files) wait, and calls on other files proceed.
/// Returns `work`'s result and the table, locked again.
pub(super) fn without_table<T>(
    mut t: MutexGuard<'static, Table>,
    busy: Completing,
    work: impl FnOnce() -> T,
) -> (T, MutexGuard<'static, Table>) {
    /// Clears the mark (in the table `t`, or locked here after a panic in `work`) and wakes
    /// the waiters: they run once the caller has applied the completion to the table.
    fn clear(t: &mut Table) {
        let _ = COMPLETING_HERE.try_with(|c| c.set(false));
        t.completing = None;
        COMPLETED.notify_all();
    }
    struct Unwinding;
    impl Drop for Unwinding {
        fn drop(&mut self) {
            clear(&mut lock());
        }
    }
    t.completing = Some(busy);
    let _ = COMPLETING_HERE.try_with(|c| c.set(true));
    drop(t);
    let unwinding = Unwinding;
    let r = work();
    std::mem::forget(unwinding);
    let mut t = lock();
    clear(&mut t);
    (r, t)
}

/// This process's session as a child of a rank (loaded on first use; never for the library's
/// own calls, nor in a process that ran transparent mode itself).
fn child() -> Option<&'static Session> {
    // (hooks may run before the front end read the environment: nothing is decided then)
    if crate::reentry::inside() || SESSION.get().is_some() || !super::view::inherited_any() {
        return None;
    }
    CHILD
        .get_or_init(|| {
            let (s, files) = super::view::load()?;
            lock().set_committed(files);
            Some(s)
        })
        .as_ref()
}

/// The session, if this process routes files now and the caller is the application (not the
/// library on this thread) and the application has not taken the dataset boundaries over.
/// This gate is an atomic load or two; the owner check costs a system call and is made
/// only for paths that concern the prefix.
#[inline]
pub fn routing() -> Option<&'static Session> {
    if !LIVE.load(Ordering::Relaxed) {
        return child();
    }
    if crate::reentry::inside() || crate::runtime::application_controls_output() {
        return None;
    }
    SESSION.get()
}

/// The first test of every path call (no allocation, no lock): may `path` concern
/// transparent mode now? An absolute path outside the prefix is judged on its bytes first;
/// then routing must be on (see [`routing`]).
#[inline]
pub fn concerns(path: &std::ffi::CStr) -> bool {
    let Some(s) = SESSION.get().or_else(child) else { return false };
    let b = path.to_bytes();
    (b.first() != Some(&b'/') || s.prefix.may_contain(b, None)) && routing().is_some()
}

/// The session for bookkeeping that continues after [`finish`] (late closes), in the
/// owning process only.
pub fn owner() -> Option<&'static Session> {
    if crate::reentry::inside() {
        return None;
    }
    SESSION.get().filter(|s| s.is_owner())
}

pub(super) fn finished() -> bool {
    FINISHED.load(Ordering::SeqCst)
}

/// Start transparent mode (collective, right after the application's `MPI_Init*`
/// succeeded). `Err`: the run must stop (the message says why); it has been printed.
pub fn start(base: BaseFn) -> Result<(), String> {
    if SESSION.get().is_some() {
        return Ok(());
    }
    let _inside = Inside::enter();
    // An unmodified application cannot call SCR_Should_exit: honour halt conditions by
    // ending the run after the checkpoint that meets them, unless configured otherwise.
    if crate::config::scr_config("SCR_HALT_EXIT", false).ok().flatten().is_none() {
        let _ = crate::config::scr_config("SCR_HALT_EXIT=1", false);
    }
    match crate::runtime::init_as(crate::runtime::Mode::Transparent) {
        Ok(true) => {}
        // SCR_ENABLE=0: no session, so the application runs as without the preload
        Ok(false) => return Ok(()),
        Err(e) => {
            let msg =
                format!("transparent mode cannot start: {e}; aborting the run (unset LD_PRELOAD to run without SCR)");
            scr_error!("{msg}");
            return Err(msg);
        }
    }
    let setup = match crate::runtime::transparent_setup() {
        Ok(s) => s,
        Err(e) => {
            scr_error!("transparent mode: {e}");
            return Ok(());
        }
    };
    let compile = |specs| {
        PatternSet::compile(specs).map_err(|e| {
            scr_error!("{e}");
            e.to_string()
        })
    };
    let (patterns, shared) = (compile(&setup.patterns)?, compile(&setup.shared)?);
    if patterns.is_empty() && setup.rank == 0 {
        scr_warn!(
            "transparent mode: no checkpoint patterns are configured (PRELOAD= entries or SCR_PRELOAD_PATTERNS), so no file is routed to cache"
        );
    }
    match crate::runtime::restart_auto() {
        Ok(Some(name)) if setup.rank == 0 => scr_debug!(1, "transparent mode: restarting from {name}"),
        Ok(_) => {}
        Err(e) => scr_error!("transparent mode: restart: {e}"),
    }
    super::sync::setup();
    super::sync::refresh_committed(&mut table());
    if setup.rank == 0 {
        scr_debug!(
            1,
            "transparent mode: {} pattern(s) under {}, pending files in {}",
            patterns.len(),
            setup.prefix.path.display(),
            setup.pending.display()
        );
    }
    let (view, journal) = super::view::paths(&setup.pending, setup.rank);
    let session = Session {
        rank: setup.rank,
        pid: std::process::id(),
        prefix: PrefixPaths::from(setup.prefix.clone()),
        pending: setup.pending.join(setup.rank.to_string()),
        patterns,
        shared,
        halt_exit: setup.halt_exit,
        base,
        child: false,
        view: Some(view.clone()),
        journal,
    };
    if SESSION.set(session).is_ok() {
        if let Some(s) = SESSION.get() {
            super::sync::recover(s);
            super::view::publish(s, &table());
        }
        // the processes this rank starts inherit it (MPI_Init runs before the application
        // starts threads that could read the environment meanwhile)
        std::env::set_var(super::view::ENV.to_str().unwrap_or_default(), &view);
        LIVE.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// `MPI_Finalize`, before the real one: the last sync point (files closed since the last
/// barrier or allreduce become datasets, flushed per the configuration), then `SCR_Finalize`
/// (its own flush rules). No MPI call of the library follows.
pub fn finish() {
    let sync = {
        let _inside = Inside::enter();
        if crate::runtime::mode() != Some(crate::runtime::Mode::Transparent) || FINISHED.load(Ordering::SeqCst) {
            return;
        }
        SESSION.get().is_some() && !crate::runtime::application_controls_output()
    };
    // outside the guard: the sync point acts for the application (it enters the guard
    // itself), so files closed since the last barrier become datasets here
    if sync {
        super::sync::point(true);
    }
    stop();
}

/// End routing and run `SCR_Finalize` (also before a halt exit).
pub fn stop() {
    let _inside = Inside::enter();
    LIVE.store(false, Ordering::SeqCst);
    if FINISHED.swap(true, Ordering::SeqCst) {
        return;
    }
    super::sync::teardown();
    if let Err(e) = crate::runtime::finalize() {
        scr_error!("transparent mode: ending SCR in MPI_Finalize: {e}");
    }
}

/// Process exit (the front end flushed stdio first): after [`finish`], pending files go to
/// their prefix paths; without it they stay pending (they never became a dataset; the next
/// run clears them) and the process says so.
pub fn at_exit() {
    let Some(s) = owner() else { return };
    let _inside = Inside::enter();
    let pending = table().all_pending();
    if pending.is_empty() {
        return;
    }
    if finished() {
        for p in &pending {
            super::plain::materialize(&p.cache, &s.prefix.join(&p.rel), p.writers == 0);
        }
    } else if crate::runtime::mode().is_some() {
        scr_warn!(
            "rank {}: the process exits without MPI_Finalize; {} file(s) written since the last complete dataset stay in {} and are not a dataset",
            s.rank,
            pending.len(),
            s.pending.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::Duration;

    // one test: the table is process-wide
    #[test]
    fn a_completion_without_the_table_holds_back_only_the_calls_on_its_files() {
        let taken = Completing { ids: BTreeSet::from([7]), rels: BTreeSet::from([PathBuf::from("ckpt.1/a")]) };
        let (done_tx, done_rx) = mpsc::channel::<&str>();
        let finished = std::sync::Arc::new(AtomicBool::new(false));
        let t = table();
        // the calls of other threads, started while the completion runs
        let spawn = |name: &'static str, get: fn() -> MutexGuard<'static, Table>| {
            let (done_tx, finished) = (done_tx.clone(), finished.clone());
            std::thread::spawn(move || {
                let _t = get();
                // a call that waited sees the completion's work done
                done_tx.send(if finished.load(Ordering::SeqCst) { name } else { "free" }).unwrap();
            })
        };
        let (r, t) = without_table(t, taken, || {
            // this thread's own calls do not wait for its completion
            drop(table());
            let free = spawn("", || table_for_file(Path::new("input.dat")));
            // the call on another file returns while the work runs
            let got = done_rx.recv_timeout(Duration::from_secs(30)).expect("a call on another file is not held back");
            free.join().unwrap();
            let held = [
                spawn("file", || table_for_file(Path::new("ckpt.1/a"))),
                spawn("id", || table_for_id(7)),
                spawn("any", table),
            ];
            // (time for them to reach the table: one that did not wait would see the work running)
            std::thread::sleep(Duration::from_millis(200));
            finished.store(true, Ordering::SeqCst);
            (got, held)
        });
        assert_eq!(r.0, "free");
        assert!(t.completing.is_none());
        drop(t);
        for h in r.1 {
            h.join().unwrap();
        }
        let mut waited: Vec<&str> = done_rx.try_iter().collect();
        waited.sort();
        assert_eq!(waited, ["any", "file", "id"], "each waited for the completion");
        assert!(!COMPLETING_HERE.with(Cell::get));
    }
}
