//! The process state of transparent mode, in one object ([`State`], the static `STATE`): the
//! session of this rank (or, in a process a rank started, its read-only one), whether files
//! are routed now and whether `MPI_Finalize` ran, the file table with the gate of a
//! completion that runs without its lock, and the sync state (SCR's communicator for the
//! agreements and what the sync points remember). Every file of transparent mode reaches
//! that state through the functions here; none shares state with another through a static.
//!
//! Every part of [`State`] is built in a constant, so the one static needs no lazy
//! initialisation of its own, and the routing gate ([`routing`], [`concerns`]) stays an
//! atomic load or two. The parts set once (the session, a child's session, the table) are
//! `OnceLock`s inside it. Left out, as per-concern caches that no other file reads: the
//! descriptor table of [`super::fds`] (plain atomics, read on every `read`, `write` and
//! `close` of the application, untracked descriptors included: it stays one load there),
//! the directory streams of [`super::listing`], the directories [`super::shells`] saw made,
//! the name watch of [`super::naming`], the write journal of [`super::writes`] and the
//! view's counters of [`super::view`] (which also keeps the view path the front end read
//! from the environment before anything else ran).
//!
//! Before [`super::lifecycle::start`], after [`super::lifecycle::finish`], in processes that
//! never initialise MPI, in forked children and while the library itself works on a thread
//! ([`crate::reentry`]), routing is off and every call passes. Lock order: the sync state,
//! then the table; the runtime never calls back into this module. A sync point decides what
//! completes with the table held, then lets the runtime form the datasets (move, encode,
//! flush) without it ([`without_table`]): meanwhile a call of another thread on a file that
//! completion does not touch proceeds ([`table_for_file`], [`table_for_id`]), every other
//! call waits for the completion to end, as it waited for the lock before.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::board::Board;
use super::session::Session;
use super::table::{Committed, Completing, Table};
use crate::comm::Comm;

/// The process state (one per process; see the module doc).
pub(super) struct State {
    /// This rank's session, fixed at start.
    session: OnceLock<Session>,
    /// A process started by a rank: its read-only session, if the rank published a view.
    child: OnceLock<Option<Session>>,
    /// Files are routed (between start and finish).
    live: AtomicBool,
    /// `MPI_Finalize` ran ([`super::lifecycle::finish`]): late closes send pending files to
    /// the prefix.
    finished: AtomicBool,
    /// The file table (made on first use).
    table: Apart<OnceLock<Mutex<Table>>>,
    /// Signalled when a completion ends (with the table mutex).
    completed: Apart<Condvar>,
    /// The sync state, from start to the end of the run (locked before the table).
    sync: Apart<Mutex<Option<SyncState>>>,
    /// The node board, when every rank runs on this node ([`super::board`]; set at start).
    board: OnceLock<Board>,
}

/// A part of [`State`] on cache lines of its own: the locks, which threads write, never share
/// a line with the routing gate (`live`, the session), which every hooked call reads.
#[repr(align(64))]
struct Apart<T>(T);

static STATE: State = State {
    session: OnceLock::new(),
    child: OnceLock::new(),
    live: AtomicBool::new(false),
    finished: AtomicBool::new(false),
    table: Apart(OnceLock::new()),
    completed: Apart(Condvar::new()),
    sync: Apart(Mutex::new(None)),
    board: OnceLock::new(),
};

/// What the sync points of this rank keep between them ([`super::sync`]).
pub(super) struct SyncState {
    /// SCR's communicator for the agreements.
    pub comm: Comm,
    /// This process's session (known at the first sync point).
    pub session: Option<&'static Session>,
    /// A checkpoint completed at the previous sync point: check the halt conditions now.
    pub halt_check: bool,
    /// [`Table::settled`] at this rank's last completion attempt: closed and removed files
    /// that were there then (waiting for a file open for writing) flag nothing until it
    /// changes (`u64::MAX`: the attempt failed, they flag again).
    pub tried: u64,
    /// Agreements in a row that found nothing closed, removed or renamed on any rank (the
    /// same on every rank: it follows the agreed flags). It sets how many of the next sync
    /// points may defer theirs ([`super::sync::point_deferrable`]).
    pub quiet: u32,
    /// Sync points by how their agreement travelled (indexed by [`super::sync::Via`]; those
    /// that deferred it are counted beside the deferral's budget, [`super::sync::try_defer`];
    /// `SCR_DEBUG=1` reports them at the end of the run).
    pub via: [u64; 4],
    /// Sync points that attempted completion (`SCR_DEBUG=1` reports it).
    pub attempts: u64,
    /// The report of a file held open across [`super::sync::HELD_OPEN_SYNCS`] sync points
    /// was printed (by rank 0; every rank knows).
    pub held_reported: bool,
}

impl SyncState {
    /// The state of a run's first sync point, on SCR's communicator `comm`.
    pub fn new(comm: Comm) -> SyncState {
        SyncState {
            comm,
            session: None,
            halt_check: false,
            tried: 0,
            quiet: 0,
            via: [0; 4],
            attempts: 0,
            held_reported: false,
        }
    }
}

/// The node board, if this run uses one ([`super::board`]).
#[inline]
pub(super) fn board() -> Option<&'static Board> {
    STATE.board.get()
}

/// Use `b` as the node board from now on (at start, on every rank or none).
pub(super) fn set_board(b: Board) {
    let _ = STATE.board.set(b);
}

/// The sync state (`None` before start and after the end of the run). Lock it before the
/// table.
pub(super) fn sync() -> MutexGuard<'static, Option<SyncState>> {
    STATE.sync.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process is a forked child of a rank: it copied the rank's session and sync state but
/// must not act on them. No system call: [`Session::is_owner`] compares the id
/// [`crate::sys::pid`] keeps, which a fork handler forgets in the child.
pub(super) fn forked() -> bool {
    STATE.session.get().is_some_and(|s| !s.is_owner())
}

thread_local! {
    /// This thread runs the completion the table names (const-initialised, no destructor:
    /// usable in any hook).
    static COMPLETING_HERE: Cell<bool> = const { Cell::new(false) };
}

fn lock() -> MutexGuard<'static, Table> {
    STATE.table.0.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The table, once no completion of another thread that `touches` the caller's files runs.
fn table_unless(touches: impl Fn(&Table, &Completing) -> bool) -> MutexGuard<'static, Table> {
    let mut t = lock();
    while t.completing.as_ref().is_some_and(|c| touches(&t, c)) && !COMPLETING_HERE.try_with(Cell::get).unwrap_or(false)
    {
        t = STATE.completed.0.wait(t).unwrap_or_else(|e| e.into_inner());
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
fn absorbed(t: MutexGuard<'static, Table>) -> MutexGuard<'static, Table> {
    match STATE.session.get().filter(|s| s.is_owner()) {
        Some(s) => absorbed_by(s, t),
        None => t,
    }
}

/// [`absorbed`] for a caller whose session `s` resolved its path, which only the process that
/// started does ([`Session::resolve_any`]): no second system call to ask which process this is.
fn absorbed_by(s: &Session, mut t: MutexGuard<'static, Table>) -> MutexGuard<'static, Table> {
    if let Some(rank) = STATE.session.get().filter(|rank| std::ptr::eq(*rank, s) && t.completing.is_none()) {
        super::view::absorb(rank, &mut t, false);
    }
    t
}

/// The file table for a call on a path: in a rank, what its children removed is absorbed
/// first, so a path a child removed is gone.
pub(super) fn table_now() -> MutexGuard<'static, Table> {
    absorbed(table())
}

/// [`table_now`] for a call that only reads what SCR holds for the file `rel`, as session `s`
/// resolved it (a stat, an open for reading; [`absorbed_by`]): it waits for another thread's
/// completion only when that completion takes `rel` or `rel` is a committed file.
pub(super) fn table_for_file(s: &Session, rel: &Path) -> MutexGuard<'static, Table> {
    absorbed_by(s, table_for_reading(rel))
}

/// [`table_for_file`]'s lock, before any absorption.
fn table_for_reading(rel: &Path) -> MutexGuard<'static, Table> {
    table_unless(|t, c| c.rels.contains(rel) || t.is_committed(rel))
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
        STATE.completed.0.notify_all();
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

/// Rebuild the table's committed files from the runtime (after datasets completed or
/// changed, and at start).
pub(super) fn refresh_committed(t: &mut Table) {
    let files = crate::runtime::cached_files().unwrap_or_default();
    t.set_committed(files.into_iter().map(|f| (f.rel, Committed { cache: f.path, dataset: f.dataset, name: f.name })));
    if t.set_peers(crate::runtime::peer_files().unwrap_or_default()) {
        // stand-ins of files that went (their dataset left the cache, a new version)
        if let Some((s, root)) = session().and_then(|s| Some((s, s.pending.parent()?))) {
            super::peers::prune(t.peers(), root, s.rank);
        }
    }
}

/// This process's session as a child of a rank (loaded on first use; never for the library's
/// own calls, nor in a process that ran transparent mode itself).
fn child() -> Option<&'static Session> {
    // (hooks may run before the front end read the environment: nothing is decided then)
    if crate::reentry::inside() || STATE.session.get().is_some() || !super::view::inherited_any() {
        return None;
    }
    STATE
        .child
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
    if !STATE.live.load(Ordering::Relaxed) {
        return child();
    }
    if crate::reentry::inside() || crate::runtime::application_controls_output() {
        return None;
    }
    STATE.session.get()
}

/// The first test of every path call (no allocation, no lock): may `path` concern
/// transparent mode now? An absolute path outside the prefix is judged on its bytes first;
/// then routing must be on (see [`routing`]).
#[inline]
pub fn concerns(path: &std::ffi::CStr) -> bool {
    let Some(s) = STATE.session.get().or_else(child) else { return false };
    let b = path.to_bytes();
    (b.first() != Some(&b'/') || s.prefix.may_contain(b, None)) && routing().is_some()
}

/// The session for bookkeeping that continues after finish (late closes), in the owning
/// process only.
pub(super) fn owner() -> Option<&'static Session> {
    if crate::reentry::inside() {
        return None;
    }
    STATE.session.get().filter(|s| s.is_owner())
}

/// This rank's session, once start set it (whatever the caller and the process).
pub(super) fn session() -> Option<&'static Session> {
    STATE.session.get()
}

/// Set this rank's session (at start): the session now held, or `None` when one was set
/// already.
pub(super) fn set_session(s: Session) -> Option<&'static Session> {
    STATE.session.set(s).ok().and(STATE.session.get())
}

/// Route files from now on.
pub(super) fn go_live() {
    STATE.live.store(true, Ordering::SeqCst);
}

/// `MPI_Finalize` ran ([`end_routing`]).
pub(super) fn finished() -> bool {
    STATE.finished.load(Ordering::SeqCst)
}

/// Stop routing and mark the run finished; whether it was finished already.
pub(super) fn end_routing() -> bool {
    STATE.live.store(false, Ordering::SeqCst);
    STATE.finished.swap(true, Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::PathBuf;
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
            let free = spawn("", || table_for_reading(Path::new("input.dat")));
            // the call on another file returns while the work runs
            let got = done_rx.recv_timeout(Duration::from_secs(30)).expect("a call on another file is not held back");
            free.join().unwrap();
            let held = [
                spawn("file", || table_for_reading(Path::new("ckpt.1/a"))),
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
