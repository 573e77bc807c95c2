//! Dataset boundaries: sync points and the agreement that completes datasets.
//!
//! The application never says when a checkpoint starts or ends, and its ranks write
//! different numbers of files (some none). SCR's collective steps therefore run only at
//! *sync points*, places every rank passes in the same order: each `MPI_Barrier` and
//! `MPI_Allreduce` on a communicator congruent to `MPI_COMM_WORLD`, and `MPI_Finalize`.
//!
//! At every sync point the ranks agree on four flags (does any rank have: pending files open
//! for writing, pending files closed, files of cached datasets removed, namespace changes not
//! yet shared): in one small allreduce on SCR's own communicator, or carried by the
//! application's own collective so that a sync point where nothing is pending costs next to
//! nothing (the preload's MPI hooks: a world barrier *is* the agreement, except in a quiet
//! stretch on the node board, where it defers it and runs it right after itself when a rank
//! posted news; a small world allreduce with a predefined operation carries the flags as
//! extra elements). A world allreduce that cannot carry them (a floating-point SUM or PROD,
//! whose result must stay bitwise that of a plain run; a large or user-defined reduction)
//! defers the agreement to a later sync point and runs it only when [`DEFER_LIMIT`] of them
//! passed in a row ([`point_deferrable`]): on the node board around the collective when every
//! rank is on one node ([`super::board`], [`point_on_board`], [`on_board`]), separately
//! otherwise. On the board, a rank whose files changed posts news at the next deferred
//! collective and every rank agrees at the one after ([`defer_on_board`]; after a barrier,
//! right away, [`barrier_news`]), so the deferral there lasts up to [`BOARD_WINDOW`]
//! collectives. Changes
//! (directory renames and removals) are then exchanged and applied by every rank to its own
//! files. At a sync point
//! where some rank has closed files or removed a cached file since the last attempt (a
//! file's last close, a removal or a rename: closed and removed files waiting for a file held
//! open flag nothing until it closes) or shares namespace changes, the ranks group their pending
//! files by dataset name (from the pattern; the ranks first agree which captures of default
//! names are a rank's part, [`super::naming`]) and agree on the names; a dataset completes there
//! unless some rank still has a file of that name open for writing (so an application that
//! writes its checkpoint, passes a barrier and then updates a "latest" pointer finds the
//! checkpoint complete whenever it finds the pointer, and a file kept open all run holds back
//! its own dataset only). At the sync point in `MPI_Finalize` every closed file completes.
//! Each dataset is formed with [`crate::runtime::adopt_output`], oldest first. A name is one
//! checkpoint: files written under the name of a cached dataset (a `meta` file written after
//! the barrier, a file added to a directory renamed into place, a restart file rewritten in
//! place) make a new version of it that holds the earlier files too; removed files leave it.
//! A failed write or close anywhere makes that dataset invalid everywhere. Files several
//! ranks write ([`super::shared`]) count as pending files here and join their dataset as its
//! shared files. A file open for writing across more than [`HELD_OPEN_SYNCS`] sync points is
//! reported once, by rank 0, with the pattern that takes it and how to exclude it (looked for
//! at every completion, and every quarter of that many sync points while a file is open).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::MutexGuard;

use super::board::Board;
use super::naming::Part;
use super::session::Session;
use super::state::{self, refresh_committed, SyncState};
use super::table::{Change, Completing, Table};
use crate::comm::Comm;
use crate::config::patterns::Route;
use crate::reentry::Inside;
use crate::runtime::{Adopt, Adopted};
use crate::{scr_error, scr_warn};

/// Deferral of the agreement ([`point_deferrable`]): it starts after this many agreements in
/// a row found nothing closed, removed or renamed, and lets at most this many world
/// collectives pass in a row without an agreement (every carrying allreduce and
/// `MPI_Finalize` runs it, and so does every barrier on several nodes or under
/// `MPI_THREAD_MULTIPLE`; on the node board, see [`BOARD_WINDOW`]). So a checkpoint closed
/// during a quiet run of floating-point sums is complete at most this many collectives after
/// its last close (on the node board, see [`BOARD_WINDOW`]), and whatever follows a completion
/// (a rename into place, a late file) at the next collective.
pub const DEFER_LIMIT: u32 = 8;

/// The deferral's window on the node board when the front end posts news there
/// ([`news_on_board`]): at most this many world collectives (those that cannot carry the
/// agreement, and barriers) pass in a row without an agreement. A rank whose files changed
/// since the last agreement (a file closed, removed or renamed) says so on the board at the
/// next deferred collective ([`defer_on_board`]), and every rank runs the agreement at the one
/// after, or right after it when it is a barrier. So a checkpoint closed during a quiet run of
/// floating-point sums is complete by the second world collective after its last close, one
/// closed before a barrier when the barrier returns (as where the agreement replaces it), and
/// this window bounds only what no rank can tell at a collective (a file held open too long;
/// a removal by a child process is news too, [`super::view::children_moved`]).
pub const BOARD_WINDOW: u32 = 64;

/// Sync points that may still defer their agreement before the next one must run it
/// (the window less one after an agreement that left `quiet` at [`DEFER_LIMIT`] or more, else 0),
/// and those that deferred since the last agreement: kept outside the sync state's lock, so a
/// deferred point costs a few loads and stores ([`try_defer`]). Every rank computes the same
/// numbers from the same agreements.
static BUDGET: AtomicU32 = AtomicU32::new(0);
static SKIPPED: AtomicU32 = AtomicU32::new(0);
/// Deferred sync points in the run (`SCR_DEBUG=1` reports them).
static DEFERRED: AtomicU64 = AtomicU64::new(0);
/// Whether the deferral's window is [`BOARD_WINDOW`] ([`news_on_board`]; the same on every
/// rank).
static NEWS: AtomicBool = AtomicBool::new(false);
/// Sync points deferred on the node board so far (the same count on every rank): the number a
/// rank's news is posted under ([`defer_on_board`]).
static ON_BOARD: AtomicU64 = AtomicU64::new(0);

/// A world collective that cannot carry the agreement, where [`point_deferrable`]'s rule lets
/// its sync point defer the agreement: counted, and `true` (the caller runs its collective
/// plainly). The deferral's fast path, for callers on the application's only MPI thread
/// (no lock: a deferred sync point is most world collectives of a solver's quiet stretch),
/// outside the library's own calls: every caller has just been told so on this thread (the
/// front end's hooks by [`super::routing`], [`run`] by its own test).
#[inline]
pub fn try_defer() -> bool {
    let left = BUDGET.load(Ordering::Relaxed);
    if left == 0 {
        return false;
    }
    // (loads and stores, no read-modify-write: a locked instruction would wait for the
    // stores of the collective before, to cache lines another core reads, to drain)
    BUDGET.store(left - 1, Ordering::Relaxed);
    SKIPPED.store(SKIPPED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    DEFERRED.store(DEFERRED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    true
}

/// After an agreement: how many sync points may defer theirs now.
fn allow_deferral(quiet: u32) {
    let window = if NEWS.load(Ordering::Relaxed) { BOARD_WINDOW } else { DEFER_LIMIT };
    BUDGET.store(if quiet >= DEFER_LIMIT { window - 1 } else { 0 }, Ordering::Relaxed);
}

/// At start, after [`setup_board`] (on every rank alike): the front end makes its MPI calls
/// one at a time and runs every world barrier and every deferred world collective of at least
/// one element through [`defer_on_board`] and [`deferred_on_board`], so that news travels on
/// the node board and the deferral's window is [`BOARD_WINDOW`]. Nothing changes without a
/// board.
pub fn news_on_board() {
    NEWS.store(board().is_some(), Ordering::Relaxed);
}

/// [`try_defer`] at a world barrier or a world collective of at least one element on the node
/// board `b` (no rank leaves either before every rank entered it): `Some(e)` when its
/// agreement is deferred, after this rank posted news for deferred point `e` if its files
/// changed since the last agreement ([`super::news::stirred`]) or its children removed some
/// ([`super::view::children_moved`]). The caller runs its collective, then
/// [`deferred_on_board`] with `e` ([`barrier_news`] after a barrier).
#[inline]
pub fn defer_on_board(b: &Board) -> Option<u64> {
    if !try_defer() {
        return None;
    }
    let e = ON_BOARD.load(Ordering::Relaxed) + 1;
    ON_BOARD.store(e, Ordering::Relaxed);
    if super::news::stirred() || super::view::children_moved() {
        b.post_news(e);
    }
    Some(e)
}

/// After the collective of deferred point `e` (whatever it returned, so that no rank's
/// decision depends on a local error): when some rank posted news for it, the next sync point
/// runs the agreement, and `true` (after a barrier, [`barrier_news`]). Every rank reads the
/// same news, since none leaves the collective before every rank entered it, after posting.
#[inline]
pub fn deferred_on_board(b: &Board, e: u64) -> bool {
    let news = b.news(e);
    if news {
        BUDGET.store(0, Ordering::Relaxed);
    }
    news
}

/// [`deferred_on_board`] after a world barrier: when some rank posted news for it, `true`, and
/// the barrier's sync point is no longer a deferred one (the caller runs the agreement at once,
/// [`point_with`]: one sync point, counted once, for the barrier and it).
pub fn barrier_news(b: &Board, e: u64) -> bool {
    if !deferred_on_board(b, e) {
        return false;
    }
    // (the application's one MPI thread, as in try_defer)
    SKIPPED.store(SKIPPED.load(Ordering::Relaxed).saturating_sub(1), Ordering::Relaxed);
    DEFERRED.store(DEFERRED.load(Ordering::Relaxed).saturating_sub(1), Ordering::Relaxed);
    true
}

/// Create SCR's communicator for the agreement (collective, inside `MPI_Init`).
pub(super) fn setup() {
    BUDGET.store(0, Ordering::Relaxed);
    SKIPPED.store(0, Ordering::Relaxed);
    DEFERRED.store(0, Ordering::Relaxed);
    NEWS.store(false, Ordering::Relaxed);
    ON_BOARD.store(0, Ordering::Relaxed);
    *state::sync() = Some(SyncState::new(Comm::world_copy_in_init()));
}

/// End the sync points; rank 0 reports how their agreements travelled (`SCR_DEBUG=1`).
/// Returns the communicator, for [`super::timing::report`] after `SCR_Finalize` (it is freed
/// when dropped, before the real `MPI_Finalize`).
pub(super) fn teardown() -> Option<Comm> {
    let st = state::sync().take()?;
    BUDGET.store(0, Ordering::Relaxed);
    if st.comm.rank() == 0 {
        let [sep, bar, all, board] = st.via;
        let def = DEFERRED.load(Ordering::Relaxed);
        crate::scr_debug!(
            1,
            "transparent mode: {} sync points: {bar} world barriers were the agreement, {all} world allreduces carried it, {board} agreed on the node board, {sep} had a separate one, {def} deferred theirs",
            sep + bar + all + def + board
        );
        crate::scr_debug!(1, "transparent mode: {} sync points attempted completion", st.attempts);
    }
    Some(st.comm)
}

/// What each rank tells the others at a sync point, and what they agree on: whether (on
/// any rank) a pending file is open for writing, pending files are closed, files of cached
/// datasets were removed, namespace changes are not yet shared.
pub type Flags = [bool; 4];

/// How a sync point went (see [`point_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Not a sync point here (transparent mode is not running in this rank): the agreement
    /// was not run, the caller runs its collective itself.
    Off,
    /// A halt condition holds after a checkpoint and `SCR_HALT_EXIT` is set (the agreement
    /// was not run): the caller ends the run ([`super::lifecycle::stop`], the real `MPI_Finalize`,
    /// exit status 0).
    Halt,
    /// The agreement ran and the sync point is complete.
    Done,
    /// The agreement was deferred to a later sync point ([`point_deferrable`]).
    Deferred,
    /// The agreement's collective failed (the sync point is skipped).
    Failed,
}

/// How a sync point's agreement travelled (counted; `SCR_DEBUG=1` reports the counts at the
/// end of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A separate allreduce on SCR's communicator after the application's collective.
    Separate,
    /// In place of the application's world barrier, or (on the node board) right after one
    /// some rank posted news for ([`barrier_news`]).
    Barrier,
    /// As extra elements of the application's world allreduce.
    Allreduce,
    /// On the node board, around the application's collective ([`on_board`]).
    Board,
}

/// The agreement on SCR's own communicator: one small allreduce.
pub fn agree(comm: &Comm, mine: Flags) -> Flags {
    let all = comm.or_bits(bits(mine) as u32);
    from_bits(u64::from(all))
}

fn bits(f: Flags) -> u64 {
    f.iter().enumerate().fold(0, |b, (i, f)| b | (u64::from(*f) << i))
}

fn from_bits(b: u64) -> Flags {
    std::array::from_fn(|i| b & (1 << i) != 0)
}

/// The node board, when every rank of the run is on this node and the front end may agree
/// through it ([`on_board`]).
#[inline]
pub fn board() -> Option<&'static Board> {
    state::board()
}

/// The agreement on the node board around the application's world collective `collective`
/// (an allreduce of at least one element; `Err`: its error code): this rank's flags are
/// posted, the collective runs, and every rank's flags are read (for [`point_with`] with
/// [`Via::Board`]). A rank that did not post is a broken run: it is said and the job aborts.
pub fn on_board(b: &Board, mine: Flags, collective: impl FnOnce() -> Result<(), i32>) -> Result<Flags, i32> {
    let e = b.post(bits(mine));
    collective()?;
    match b.collect(e) {
        Ok(all) => Ok(from_bits(all)),
        Err(r) => {
            scr_error!(
                "transparent mode: rank {r} did not post its flags for sync point agreement {e} on the node board; aborting the run"
            );
            crate::comm::abort(1)
        }
    }
}

/// At start (collective): the node board, if every rank runs on this node (rank 0 makes its
/// file in the pending area `pending_root`; it is used only if every rank mapped it).
pub(super) fn setup_board(pending_root: &std::path::Path) {
    if !crate::runtime::node_spans_world() {
        return;
    }
    let g = state::sync();
    let Some(st) = g.as_ref() else { return };
    let (n, me) = (st.comm.size() as usize, st.comm.rank() as usize);
    let path = pending_root.join(super::board::FILE);
    // rank 0's stamp of this run (the time and its process id), which every rank must find
    let stamp =
        if me == 0 { (crate::identity::now_usecs() as u64) << 20 ^ u64::from(std::process::id()) | 1 } else { 0 };
    let stamp = st.comm.max_u64s(&[stamp])[0];
    let made = me != 0 || Board::create(&path, n, stamp).is_ok();
    if !st.comm.all_true(made) {
        return;
    }
    let mapped = Board::map(&path, n, me, stamp);
    if st.comm.all_true(mapped.is_ok()) {
        if let Ok(b) = mapped {
            state::set_board(b);
        }
    } else if me == 0 {
        scr_warn!("transparent mode: the node board {} could not be mapped on every rank; sync points agree with a collective", path.display());
    }
}

/// A sync point (collective; `last`: the one in `MPI_Finalize`). Returns `true` when a halt
/// condition holds after a checkpoint and `SCR_HALT_EXIT` is set: the caller ends the run
/// ([`super::lifecycle::stop`], the real `MPI_Finalize`, exit status 0).
pub fn point(last: bool) -> bool {
    point_with(last, Via::Separate, |comm, mine| Some(agree(comm, mine))) == Point::Halt
}

/// A sync point after a world collective of the application that could not carry the
/// agreement (a floating-point SUM or PROD, a large or user-defined reduction, any under
/// `MPI_THREAD_MULTIPLE`): once [`DEFER_LIMIT`] agreements in a row found nothing closed,
/// removed or renamed, it runs the separate agreement only when [`DEFER_LIMIT`] world
/// collectives passed without one (the window, [`BOARD_WINDOW`] with news on the node board),
/// so a quiet run of them costs one small allreduce per [`DEFER_LIMIT`] instead of one each
/// (OpenFOAM's sums). Every rank defers the same points. Returns `true` as [`point`] does.
pub fn point_deferrable() -> bool {
    run(false, Via::Separate, true, |comm, mine| Some(agree(comm, mine))) == Point::Halt
}

/// A sync point whose agreement `agree` runs: given SCR's communicator and this rank's
/// flags, it returns the flags every rank agreed on (any rank's flag set), or `None` when
/// its collective failed. It runs on every rank or on none, so it may be a collective of
/// the application that carries the flags (an `MPI_Barrier` replaced by [`agree`], an
/// `MPI_Allreduce` with the flags as extra elements). The datasets the agreement completes
/// are complete when this returns.
pub fn point_with(last: bool, via: Via, agree: impl FnOnce(&Comm, Flags) -> Option<Flags>) -> Point {
    run(last, via, false, agree)
}

/// A sync point after (around) a world collective of the application on the node board
/// ([`on_board`] in `agree`), with [`point_deferrable`]'s rule: [`Point::Deferred`] when the
/// agreement is deferred (`agree` not run: the caller runs its collective plainly).
pub fn point_on_board(agree: impl FnOnce(&Comm, Flags) -> Option<Flags>) -> Point {
    run(false, Via::Board, true, agree)
}

/// [`point_with`], or with `defer` [`point_deferrable`]'s rule.
fn run(last: bool, via: Via, defer: bool, agree: impl FnOnce(&Comm, Flags) -> Option<Flags>) -> Point {
    if crate::reentry::inside() || state::forked() {
        return Point::Off;
    }
    let mut g = state::sync();
    let Some(st) = g.as_mut() else { return Point::Off };
    if defer && !last && try_defer() {
        return Point::Deferred;
    }
    let s = match st.session {
        Some(s) => s,
        None => {
            let Some(s) = state::owner() else { return Point::Off };
            *st.session.insert(s)
        }
    };
    let _inside = Inside::enter();
    let from = crate::comm::tally();
    if std::mem::take(&mut st.halt_check) && s.halt_exit && crate::runtime::should_exit().unwrap_or(false) {
        if s.rank == 0 {
            crate::log::emit("INFO", format_args!("halting the run after its checkpoint (SCR_HALT_EXIT=1)"));
        }
        return Point::Halt;
    }
    let mut t = state::table();
    super::view::absorb(s, &mut t, true);
    // (the epoch counts every sync point, deferred ones too: a file held open is reported
    // after as many world collectives whatever their kind)
    let before = t.epoch;
    t.epoch += 1 + u64::from(SKIPPED.swap(0, Ordering::Relaxed));
    let c = t.counts();
    // (what this rank tells now is its news: a change after this, by the completion below or
    // by another thread while the completion has the table unlocked, is news again)
    super::news::calm();
    // closed and removed files flag only what changed since the last attempt (those waiting
    // for a file open for writing would make every sync point attempt again: QE removes a
    // file of out/ while it writes another), except at the last point
    let fresh = last || t.settled() != st.tried;
    let Some([open, closed, removed, changes]) = super::timing::timed(super::timing::AGREEMENT, || {
        agree(&st.comm, [c.open > 0, c.closed > 0 && fresh, c.removed > 0 && fresh, c.changes > 0])
    }) else {
        st.quiet = 0;
        allow_deferral(0);
        return Point::Failed;
    };
    st.quiet = if closed || removed || changes { 0 } else { st.quiet.saturating_add(1) };
    allow_deferral(if last { 0 } else { st.quiet });
    if changes {
        share_changes(s, &st.comm, &mut t);
    }
    // a file held open is reported (once) from the completion's offers: with nothing else
    // pending none would run, so look every quarter of HELD_OPEN_SYNCS while one is open
    let held_check = open && t.epoch / (HELD_OPEN_SYNCS / 4) != before / (HELD_OPEN_SYNCS / 4);
    if closed || removed || changes || held_check {
        // (datasets with a file open for writing somewhere wait, except at the last point)
        st.tried = t.settled();
        st.attempts += 1;
        if s.rank == 0 {
            crate::scr_debug!(
                3,
                "transparent mode: sync point {} attempts completion (closed {closed}, removed {removed}, renamed {changes}, open {open})",
                t.epoch
            );
        }
        crate::runtime::count_collectives_from(Some(from));
        let checkpointed;
        (checkpointed, t) = super::timing::timed(super::timing::COMPLETION, || complete(s, st, t, false, !last));
        st.halt_check = checkpointed;
        crate::runtime::count_collectives_from(None);
        if t.no_pending() {
            super::writes::clear();
        }
    }
    super::view::publish(s, &t);
    st.via[via as usize] += 1;
    Point::Done
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
        if list.iter().any(|c| !matches!(c, Change::RemovedFile { .. })) {
            // (another rank renamed or removed a directory: it may hold the working directory)
            super::prefix::cwd_may_have_moved();
        }
        for c in list {
            match c {
                Change::RenamedDir { from, to } => {
                    super::names::move_pending(s, t, from, to);
                    if let Err(e) = crate::runtime::rename_dir(from, to, false) {
                        scr_warn!("transparent mode: applying the rename of {}: {e}", from.display());
                    }
                }
                Change::RemovedFile { rel } => {
                    // (a file this rank has written since stays)
                    if matches!(t.held(rel), Some(super::table::Held::Committed(_))) {
                        t.remove(rel);
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
    /// Files among them that replace another rank's file of the dataset.
    replaced: u64,
    /// (shared file id, path relative to the prefix, failed)
    shared: Vec<(u32, PathBuf, bool)>,
    removed: Vec<PathBuf>,
}

/// At start (collective, after the restart): files a killed run of this rank left pending
/// under the name of a checkpoint now in cache (a `meta` written after its barrier, the
/// crash before the next sync point) join it as a new version, as a plain file system would
/// have kept them. They only add files: a pending copy of a file the checkpoint has (an
/// update cut short) is not used, nor a file the run was still writing when it died or whose
/// writing failed ([`super::writes`]): no checkpoint is called complete with a file cut off
/// mid-write. The rest never became a checkpoint and is removed.
pub(super) fn recover(s: &Session) {
    use std::os::unix::fs::MetadataExt;
    let _inside = Inside::enter();
    let mut g = state::sync();
    let Some(st) = g.as_mut() else { return };
    // before the collective below: no rank opens a staging name again until all passed it
    super::shared::remove_staged(s);
    let mut t = state::table();
    let mut found = Vec::new();
    crate::paths::walk_files(&s.pending, &mut |p| found.push(p.to_path_buf()));
    let cut_short = super::writes::cut_short(&s.pending);
    let mut added = 0u64;
    for p in found {
        let Ok(rel) = p.strip_prefix(&s.pending) else { continue };
        if t.held(rel).is_some() || super::prefix::reserved(rel) {
            continue;
        }
        let ino = std::fs::symlink_metadata(&p).map(|m| m.ino()).ok();
        if ino.is_some_and(|i| cut_short.contains(&i)) {
            crate::log::emit(
                "INFO",
                format_args!(
                    "rank {}: {} is left out of its checkpoint: the killed run was still writing it",
                    s.rank,
                    rel.display()
                ),
            );
            continue;
        }
        t.add(rel, p.clone(), false);
        added += 1;
    }
    if st.comm.max_u64s(&[added])[0] > 0 {
        crate::runtime::count_collectives_from(Some(crate::comm::tally()));
        t = complete(s, st, t, true, false).1;
        crate::runtime::count_collectives_from(None);
    }
    // (completing forgot every file it looked at: what is left on disk joined nothing)
    super::writes::forget();
    let _ = crate::paths::remove_tree_if_exists(&s.pending);
    if s.rank == 0 {
        // a checkpoint gone with a lost cache leaves no empty directory behind
        // (every other rank waits in the collective below: its table is as agreed)
        super::shells::sweep(s, &t, &[]);
    }
    // no rank lists the prefix before they are gone
    st.comm.max_u64s(&[0]);
}

/// A file open for writing across more than this many sync points is reported, once per
/// run: it is in no checkpoint while it is open, and the dataset of its name waits for it.
pub const HELD_OPEN_SYNCS: u64 = 100;

/// What one rank says when datasets complete.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Offer {
    /// Its part of each dataset of its closed files.
    ready: Vec<Part>,
    /// Names of the datasets it has a file of open for writing.
    open: Vec<String>,
    /// Its file open for writing across the most sync points beyond [`HELD_OPEN_SYNCS`]:
    /// (path relative to the prefix, sync points, dataset name).
    held: Option<(String, u64, String)>,
    /// The directories it made since the last completion ([`super::shells`]).
    made: Vec<(String, u64)>,
    /// The directories of its files open for writing: with those of `ready` (all of them,
    /// also of datasets that wait), where rank 0's sweep of empty directories must not go.
    open_dirs: Vec<String>,
}

/// A file of this rank open for writing: its path relative to the prefix, the sync epoch of
/// its open, and the dataset it will join (when a pattern or an earlier dataset names one).
type OpenFile = (PathBuf, u64, Option<String>);

/// What the ranks decided at a completion ([`decide`]): the datasets to form, oldest first
/// (epoch, name, flags), and rank 0's record of their directories (name, the directories made
/// for it, its files' directories) and of every rank's directories SCR still holds files in.
struct Decision {
    order: Vec<(u64, String, i32)>,
    made: Vec<(String, Vec<String>, Vec<String>)>,
    busy: Vec<PathBuf>,
}

/// Complete the pending datasets (`versions_only`: only new versions of cached datasets may
/// form; `wait_open`: a dataset with a file open for writing on some rank waits for the next
/// sync point); whether a checkpoint completed, and the table. The stages: this rank groups
/// its files by dataset ([`group_local`]) and offers them ([`offer_of`]); the offers are
/// exchanged and every rank decides alike ([`decide`]); the runtime forms the datasets
/// without the table lock ([`form`], [`state::without_table`]); the table lets go of what
/// they took ([`settle`]).
fn complete(
    s: &Session,
    st: &mut SyncState,
    mut t: MutexGuard<'static, Table>,
    versions_only: bool,
    wait_open: bool,
) -> (bool, MutexGuard<'static, Table>) {
    let (mut groups, open) = group_local(s, &st.comm, &mut t);
    let (offer, my_paths) = offer_of(&t, &groups, &open, wait_open);
    let offers = match st.comm.allgather(&offer) {
        Ok(l) => l,
        Err(e) => {
            // agreed by every rank: the files stay pending, and flag again at the next sync point
            scr_error!("transparent mode: agreeing on the datasets to complete: {e}");
            st.tried = u64::MAX;
            return (false, t);
        }
    };
    let d = decide(s, st, &offers, &my_paths);
    let forming: Vec<(String, i32, Group)> = d
        .order
        .into_iter()
        .map(|(_, name, flags)| (name.clone(), flags, groups.remove(&name).unwrap_or_default()))
        .collect();
    let (results, mut t) = form(t, &forming, versions_only);
    let (checkpointed, removed_by_app) = settle(&mut t, forming, results);
    refresh_committed(&mut t);
    if s.rank == 0 {
        super::shells::record(s, &t, d.made, &removed_by_app, &d.busy);
    }
    (checkpointed, t)
}

/// This rank's closed pending and shared files grouped by the dataset each joins (named as
/// the ranks agree, [`super::naming`]), with the files removed from cached datasets; its files
/// open for writing; files no pattern takes any more go to the prefix.
fn group_local(s: &Session, comm: &Comm, t: &mut Table) -> (BTreeMap<String, Group>, Vec<OpenFile>) {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut homeless = Vec::new();
    let route = |rel: &std::path::Path| rel.to_str().and_then(|r| s.patterns.route(r, s.rank));
    let pending: Vec<_> = t.closed_pending().into_iter().map(|(id, p)| (id, route(&p.rel), p.clone())).collect();
    let shared: Vec<_> = t.shared.closed_files().into_iter().map(|(id, e)| (id, route(&e.rel), e)).collect();
    // files still open for writing: (path, sync epoch of their open, route, earlier dataset)
    let open: Vec<_> = t
        .open_pending()
        .into_iter()
        .map(|p| (p.rel.clone(), p.epoch, route(&p.rel), p.dataset))
        .chain(t.shared.open_files().map(|e| (e.rel.clone(), e.epoch, route(&e.rel), None)))
        .collect();
    // names agreed by the ranks: what differs between their files (open ones too, so a file
    // still open is named as its checkpoint will be) is a rank's part
    let routes = pending.iter().filter_map(|f| f.1.as_ref()).chain(open.iter().filter_map(|f| f.2.as_ref()));
    let varies = super::naming::agree(comm, routes);
    let cached = super::naming::cached_globs();
    let named = |r: &Route| {
        super::naming::join_cached(r.named(|p, run| varies.contains(&(p, run))), r.pieces.is_some(), &cached)
    };
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
        g.replaced += u64::from(p.takes_over);
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
            super::plain::materialize(&p.cache, &s.prefix.join(&p.rel), true);
            t.forget(id);
        }
    }
    let open =
        open.into_iter().map(|(rel, epoch, route, dataset)| (rel, epoch, route.as_ref().map(&named).or(dataset)));
    (groups, open.collect())
}

/// This rank's offer ([`Offer`]) from its groups and open files, and its paths per dataset
/// name (recorded as seen, [`super::naming::seen`], once the name completes).
fn offer_of(
    t: &Table,
    groups: &BTreeMap<String, Group>,
    open: &[OpenFile],
    wait_open: bool,
) -> (Offer, BTreeMap<String, Vec<String>>) {
    let mut my_paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let ready: Vec<Part> = groups
        .iter()
        .map(|(n, g)| {
            let paths = g.files.iter().map(|f| &f.1).chain(g.shared.iter().map(|f| &f.1));
            let mut dirs: Vec<String> =
                paths.clone().filter_map(|p| p.parent()).map(|d| d.to_string_lossy().into_owned()).collect();
            dirs.sort();
            dirs.dedup();
            let paths: Vec<String> = paths.map(|p| p.to_string_lossy().into_owned()).collect();
            let part = Part {
                dirs,
                name: n.clone(),
                flags: g.flags,
                epoch: g.epoch,
                pattern: g.pattern,
                fresh: super::naming::fresh(n, paths.iter().map(String::as_str)),
                files: paths.len() as u64,
                sample: paths.first().cloned().unwrap_or_default(),
            };
            my_paths.insert(n.clone(), paths);
            part
        })
        .collect();
    let mut offer = Offer { ready, made: super::shells::take_made(), ..Default::default() };
    for (rel, ..) in open {
        if let Some(d) = rel.parent() {
            offer.open_dirs.push(d.to_string_lossy().into_owned());
        }
    }
    offer.open_dirs.sort();
    offer.open_dirs.dedup();
    for (rel, epoch, name) in open {
        let Some(name) = name else { continue };
        let syncs = t.epoch.saturating_sub(*epoch);
        if syncs > HELD_OPEN_SYNCS && offer.held.as_ref().is_none_or(|h| h.1 < syncs) {
            offer.held = Some((rel.to_string_lossy().into_owned(), syncs, name.clone()));
        }
        if wait_open {
            offer.open.push(name.clone());
        }
    }
    offer.open.sort();
    offer.open.dedup();
    (offer, my_paths)
}

/// What every rank decides alike from all ranks' offers: the datasets that complete now (not
/// those a rank still has a file of open for writing), oldest first, and the directories made
/// for them; on the way, this rank's names are recorded as seen, names that cannot work and a
/// file held open too long are reported, and directories made for a dataset that waits stay
/// this rank's to offer again.
fn decide(s: &Session, st: &mut SyncState, offers: &[Offer], my_paths: &BTreeMap<String, Vec<String>>) -> Decision {
    let waiting: BTreeSet<&String> = offers.iter().flat_map(|o| &o.open).collect();
    // what waits is left as it is (its files and removals stay) and is checked when it completes
    let lists: Vec<Vec<Part>> =
        offers.iter().map(|o| o.ready.iter().filter(|p| !waiting.contains(&p.name)).cloned().collect()).collect();
    let made: Vec<(String, u64)> = offers.iter().flat_map(|o| o.made.iter().cloned()).collect();
    // every rank's directories with files SCR holds (pending, open, waiting) at this point
    let busy: Vec<PathBuf> = if s.rank == 0 {
        let ready = offers.iter().flat_map(|o| o.ready.iter().flat_map(|p| p.dirs.iter()));
        ready.chain(offers.iter().flat_map(|o| o.open_dirs.iter())).map(PathBuf::from).collect()
    } else {
        Vec::new()
    };
    for (n, paths) in my_paths.iter().filter(|(n, _)| !waiting.contains(n)) {
        super::naming::seen(n, paths.iter().map(String::as_str));
    }
    super::naming::check(&s.patterns, &lists, s.rank == 0);
    let mut names: BTreeMap<String, (i32, u64)> = BTreeMap::new();
    let mut dirs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for list in lists {
        for p in list {
            let e = names.entry(p.name.clone()).or_insert((0, u64::MAX));
            e.0 |= p.flags;
            e.1 = e.1.min(p.epoch);
            dirs.entry(p.name).or_default().extend(p.dirs);
        }
    }
    report_held(s, offers, &mut st.held_reported);
    let mut order: Vec<(u64, String, i32)> = names.into_iter().map(|(n, (fl, ep))| (ep, n, fl)).collect();
    order.sort();
    // the directories made for them (every rank's), with the directories of their files
    let by_age: Vec<(String, u64, Vec<String>)> =
        order.iter().map(|(ep, n, _)| (n.clone(), *ep, dirs.remove(n).unwrap_or_default())).collect();
    let shells = super::shells::assign(&by_age, &made);
    if !waiting.is_empty() {
        // a dataset that waits may still be given the directories made for it
        let mine = offers.get(s.rank as usize).map_or(&[][..], |o| &o.made[..]);
        for (d, e) in mine.iter().filter(|(d, _)| !shells.iter().flatten().any(|x| x == d)) {
            super::shells::made(PathBuf::from(d), *e);
        }
    }
    let made = by_age.into_iter().zip(shells).map(|((n, _, d), shells)| (n, shells, d)).collect();
    Decision { order, made, busy }
}

/// The runtime forms each dataset of `forming` ([`crate::runtime::adopt_output`]), without
/// the table lock (moving, encoding and flushing take long): another thread's call on a file
/// none of them takes proceeds meanwhile. The outcomes, in order, and the table locked again.
fn form(
    t: MutexGuard<'static, Table>,
    forming: &[(String, i32, Group)],
    versions_only: bool,
) -> (Vec<crate::error::Result<Adopted>>, MutexGuard<'static, Table>) {
    if forming.is_empty() {
        return (Vec::new(), t);
    }
    let mut taken = Completing::default();
    for (_, _, g) in forming {
        taken.ids.extend(g.files.iter().map(|f| f.0).chain(g.shared.iter().map(|f| f.0)));
        taken.rels.extend(g.files.iter().map(|f| f.1.clone()).chain(g.shared.iter().map(|f| f.1.clone())));
        taken.rels.extend(g.removed.iter().cloned());
    }
    let adopt = |(name, flags, g): &(String, i32, Group)| {
        let files: Vec<(PathBuf, PathBuf)> = g.files.iter().map(|f| (f.1.clone(), f.2.clone())).collect();
        let shared: Vec<PathBuf> = g.shared.iter().map(|f| f.1.clone()).collect();
        let valid = !g.files.iter().any(|f| f.3) && !g.shared.iter().any(|f| f.2);
        crate::runtime::adopt_output(&Adopt {
            name,
            flags: *flags,
            files: &files,
            shared: &shared,
            removed: &g.removed,
            replaced: g.replaced,
            valid,
            version_only: versions_only,
        })
    };
    state::without_table(t, taken, || forming.iter().map(adopt).collect::<Vec<_>>())
}

/// The table lets go of the files the formed datasets took (a failed one's pending bytes are
/// removed); whether a checkpoint completed, and the datasets the application's removals
/// emptied.
fn settle(
    t: &mut Table,
    forming: Vec<(String, i32, Group)>,
    results: Vec<crate::error::Result<Adopted>>,
) -> (bool, Vec<String>) {
    let mut checkpointed = false;
    let mut removed_by_app = Vec::new();
    for ((name, _, g), r) in forming.into_iter().zip(results) {
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
            Ok(Adopted::Removed) => removed_by_app.push(name),
            Ok(Adopted::Invalid) => {}
            Err(e) => scr_error!("transparent mode: dataset {name}: {e}"),
        }
    }
    (checkpointed, removed_by_app)
}

/// Once per run, by rank 0: a file has stayed open for writing across more than
/// [`HELD_OPEN_SYNCS`] sync points (a scratch file an application keeps open all run); name
/// it, the pattern that takes it and how to exclude it.
fn report_held(s: &Session, offers: &[Offer], reported: &mut bool) {
    let mut held = offers.iter().enumerate().filter_map(|(r, o)| o.held.as_ref().map(|h| (r, h)));
    let Some((rank, (rel, syncs, name))) = held.next() else { return };
    if std::mem::replace(reported, true) || s.rank != 0 {
        return;
    }
    let more = held.count();
    let others = if more > 0 { format!(", and a file on {more} more rank(s)") } else { String::new() };
    let by = match s.patterns.route(rel, rank as u32) {
        Some(r) => {
            let (pattern, at) = s.patterns.describe(r.pattern);
            format!(" (pattern {pattern} from {at} takes it)")
        }
        None => String::new(),
    };
    let glob = exclusion_glob(rel);
    scr_warn!(
        "transparent mode: {rel} (rank {rank}{others}) has been open for writing across {syncs} sync points (MPI_Barrier/MPI_Allreduce on MPI_COMM_WORLD): a file open for writing is in no checkpoint, and dataset {name} completes only after it is closed (other datasets complete without it). If it is not needed to restart, exclude it: add !{glob} to SCR_PRELOAD_PATTERNS, or PRELOAD={glob} TYPE=EXCLUDE to the configuration file{by}. (reported once)"
    );
}

/// A pattern for a file and its siblings of other ranks and steps: the digits of its name
/// become `*` (`out/si.wfc12` gives `out/si.wfc*`).
fn exclusion_glob(rel: &str) -> String {
    let (dir, leaf) = rel.rsplit_once('/').map_or(("", rel), |(d, l)| (d, l));
    let mut out = String::new();
    for c in leaf.chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('*') {
            out.push('*');
        }
    }
    if dir.is_empty() {
        out
    } else {
        format!("{dir}/{out}")
    }
}

#[cfg(test)]
mod tests {
    use super::exclusion_glob;

    #[test]
    fn the_exclusion_suggested_for_a_held_file_takes_its_siblings() {
        assert_eq!(exclusion_glob("out/si.wfc12"), "out/si.wfc*");
        assert_eq!(exclusion_glob("hold/wfc_3.dat"), "hold/wfc_*.dat");
        assert_eq!(exclusion_glob("a1/log"), "a1/log");
        assert_eq!(exclusion_glob("run7.log"), "run*.log");
    }
}
