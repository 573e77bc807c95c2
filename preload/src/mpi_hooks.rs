//! MPI lifecycle and sync-point hooks: `MPI_Init`, `MPI_Init_thread`, `MPI_Finalize`,
//! `MPI_Barrier`, `MPI_Allreduce`, `MPI_File_open` (shared files), and `MPI_Comm_free` and
//! `MPI_Comm_disconnect` (which end what is known of a communicator), each exported under
//! its `MPI_` and `PMPI_` name (Open MPI's Fortran bindings call `PMPI_*` directly) and
//! calling the next `PMPI_*` implementation, never our own. After the real `PMPI_Init*`
//! succeeded, transparent mode starts; `MPI_Finalize` finishes it before the real one; a
//! world-spanning barrier or allreduce is a sync point: the barrier is replaced by the
//! sync point's agreement (on one node, in quiet stretches, it defers it and posts news on
//! the node board), a small allreduce with a predefined operation and type carries it
//! ([`crate::piggyback`]), any other allreduce agrees on the node board around it when every
//! rank is on one node, and is followed by it otherwise.

use std::ffi::{c_char, c_int, c_void, CStr};

use mpi::ffi::{MPI_Comm, MPI_Datatype, MPI_File, MPI_Info, MPI_Op};
use scr::reentry::Inside;
use scr::transparent;

use crate::detour::fence;
use crate::piggyback::{Allreduce, Plan, RealAllreduce};
use crate::real::next_or;
use transparent::sync::{Flags, Point, Via};

const MPI_SUCCESS: c_int = 0;
const MPI_ERR_OTHER: c_int = 16;

/// After the application's MPI initialisation succeeded.
fn started() {
    if fence("MPI_Init", std::ptr::null(), || transparent::start(crate::detour::base).is_err(), || false) {
        transparent::abort_job(1);
    }
    // (the board path of `allreduce` below, which needs the application's MPI calls one at a
    // time, carries news)
    if !app_threads() {
        transparent::sync::news_on_board();
    }
}

/// `SCR_HALT_EXIT`: a halt condition holds after a checkpoint; end the run as `MPI_Finalize`
/// and `exit(0)` would (at a sync point, on every rank).
fn halt_exit() -> ! {
    transparent::stop();
    let _inside = Inside::enter();
    // SAFETY: MPI is initialised and the library holds no communicator any more.
    unsafe { real_finalize() };
    std::process::exit(0);
}

/// Whether a collective on `comm` is a sync point: transparent mode routes and `comm`
/// spans the world (the same answer on every rank).
fn spans_world(comm: MPI_Comm) -> bool {
    if transparent::routing().is_none() {
        return false;
    }
    // SAFETY: reading the handle constant.
    let world = unsafe { mpi::ffi::RSMPI_COMM_WORLD };
    if comm == world {
        return true;
    }
    let key = comm.0 as usize;
    if let Some(spans) = congruence::known(key, !app_threads()) {
        return spans;
    }
    let mut r: c_int = 0;
    // SAFETY: MPI_Comm_compare is local and `comm` is the application's (an invalid handle
    // only makes it fail); reading MPI's constant.
    let spans =
        unsafe { mpi::ffi::MPI_Comm_compare(comm, world, &mut r) == MPI_SUCCESS && r == mpi::ffi::RSMPI_CONGRUENT };
    congruence::learn(key, spans, !app_threads());
    spans
}

/// What [`spans_world`] found for the application's other communicators, kept per thread by
/// handle (`MPI_Comm_compare` walks the groups: O(ranks)). A handle means one communicator
/// from its creation to its `MPI_Comm_free` or `MPI_Comm_disconnect`, after which MPI may give
/// its value to a new one; so those calls move [`FREED`] on *before* the communicator goes
/// (the application uses a communicator only before it frees it, and a new one only after it
/// was made), and a thread that finds [`FREED`] moved forgets all it knew. A lookup is a
/// thread-local read and one atomic load, where an attribute (`MPI_Comm_get_attr`, a lock and
/// a hash lookup in Open MPI) cost as much as the rest of a deferred sync point. An
/// application that makes its MPI calls one thread at a time (not `MPI_THREAD_MULTIPLE`:
/// `serial`) has the last answer in [`LAST`] too, a few loads with no thread-local access:
/// MPI's contract orders its calls, so the relaxed loads see the last call's stores.
mod congruence {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    /// Communicators freed or disconnected through this library so far.
    pub(super) static FREED: AtomicU64 = AtomicU64::new(0);

    /// The last answer for a serial application: handle (0: none), answer, [`FREED`]'s count.
    struct Last {
        handle: AtomicUsize,
        spans: AtomicBool,
        freed: AtomicU64,
    }

    static LAST: Last = Last { handle: AtomicUsize::new(0), spans: AtomicBool::new(false), freed: AtomicU64::new(0) };

    /// Handles kept per thread (round robin): a solver's few communicators.
    const KEPT: usize = 4;

    /// What one thread knows.
    #[derive(Clone, Copy)]
    struct Seen {
        /// (handle, spans the world); handle 0: empty.
        handles: [(usize, bool); KEPT],
        /// [`FREED`]'s count they were found under.
        freed: u64,
        /// The next entry to fill.
        next: usize,
    }

    thread_local! {
        static SEEN: Cell<Seen> = const { Cell::new(Seen { handles: [(0, false); KEPT], freed: 0, next: 0 }) };
    }

    /// The kept answer for `handle`, if this thread (or with `serial`, the last call) found
    /// one since the last free.
    #[inline]
    pub(super) fn known(handle: usize, serial: bool) -> Option<bool> {
        let freed = FREED.load(Ordering::Acquire);
        if serial
            && handle != 0
            && LAST.handle.load(Ordering::Relaxed) == handle
            && LAST.freed.load(Ordering::Relaxed) == freed
        {
            return Some(LAST.spans.load(Ordering::Relaxed));
        }
        SEEN.try_with(|s| {
            let seen = s.get();
            if seen.freed != freed {
                return None;
            }
            seen.handles.iter().find(|(h, _)| *h == handle && handle != 0).map(|(_, spans)| *spans)
        })
        .ok()
        .flatten()
    }

    /// Keep `spans` for `handle`.
    pub(super) fn learn(handle: usize, spans: bool, serial: bool) {
        let freed = FREED.load(Ordering::Acquire);
        if serial {
            LAST.handle.store(0, Ordering::Relaxed);
            LAST.spans.store(spans, Ordering::Relaxed);
            LAST.freed.store(freed, Ordering::Relaxed);
            LAST.handle.store(handle, Ordering::Relaxed);
        }
        let _ = SEEN.try_with(|s| {
            let mut seen = s.get();
            if seen.freed != freed {
                seen = Seen { handles: [(0, false); KEPT], freed, next: 0 };
            }
            seen.handles[seen.next] = (handle, spans);
            seen.next = (seen.next + 1) % KEPT;
            s.set(seen);
        });
    }

    /// A communicator is about to be freed or disconnected: every thread forgets its answers.
    pub(super) fn forget() {
        FREED.fetch_add(1, Ordering::AcqRel);
    }
}

/// A sync point whose agreement `agree` runs (see [`transparent::sync::point_with`]):
/// `Some(rc)` when it ran (the application's collective is done, `rc` its result), `None`
/// when this is not a sync point here and the caller runs the real collective.
fn sync_with(via: Via, agree: impl FnOnce(&transparent::Comm, Flags) -> Result<Flags, c_int>) -> Option<c_int> {
    let mut ran = None;
    let p = fence(
        "MPI sync point",
        std::ptr::null(),
        || {
            transparent::sync::point_with(false, via, |comm, mine| {
                let r = agree(comm, mine);
                ran = Some(r.err().unwrap_or(MPI_SUCCESS));
                r.ok()
            })
        },
        || Point::Off,
    );
    match p {
        Point::Halt => halt_exit(),
        // (a panic after the agreement ran: the collective is done all the same)
        _ => ran,
    }
}

/// A sync point on the node board around the application's collective `real` (see
/// [`transparent::sync::point_on_board`]): `Some(rc)` when the collective ran (its result), or
/// was run plainly because the agreement is deferred; `None` when this is not a sync point
/// here and the caller runs the real collective.
fn on_board(board: &transparent::board::Board, mut real: impl FnMut() -> c_int) -> Option<c_int> {
    let mut ran = None;
    let p = fence(
        "MPI sync point",
        std::ptr::null(),
        || {
            transparent::sync::point_on_board(|_, mine| {
                let r = transparent::sync::on_board(board, mine, || match real() {
                    MPI_SUCCESS => Ok(()),
                    rc => Err(rc),
                });
                ran = Some(r.err().unwrap_or(MPI_SUCCESS));
                r.ok()
            })
        },
        || Point::Off,
    );
    match p {
        Point::Halt => halt_exit(),
        // (deferred: no agreement at this one, the collective as it is)
        Point::Deferred => Some(real()),
        // (a panic after the agreement ran: the collective is done all the same)
        _ => ran,
    }
}

/// After a successful collective on `comm`: a sync point if `comm` spans the world, with the
/// agreement as a separate allreduce (a barrier's always; in quiet stretches an allreduce's
/// only at the end of the deferral's window, [`transparent::sync::point_deferrable`]).
fn collective_done(comm: MPI_Comm, barrier: bool) {
    if !spans_world(comm) {
        return;
    }
    // (the deferral's fast path needs the application's calls one at a time)
    if !barrier && !app_threads() && transparent::sync::try_defer() {
        return;
    }
    let point = || if barrier { transparent::sync::point(false) } else { transparent::sync::point_deferrable() };
    if fence("MPI sync point", std::ptr::null(), point, || false) {
        halt_exit();
    }
}

/// `SCR_ENCODE_ASYNC=1` in the environment: MPI is initialised with `MPI_THREAD_MULTIPLE`,
/// which the background encoding needs (an application may always get more than it asked for).
fn wants_thread_multiple() -> bool {
    transparent::encode_async_requested()
}

/// The real initialisation, then transparent mode (once, and never for the library's own
/// calls).
fn init_with(real: impl FnOnce() -> c_int) -> c_int {
    if scr::reentry::inside() || transparent::scr_started() {
        return real();
    }
    let rc = {
        let _inside = Inside::enter();
        real()
    };
    if rc == MPI_SUCCESS {
        started();
    }
    rc
}

unsafe fn init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    if wants_thread_multiple() {
        let mut provided: c_int = 0;
        // SAFETY: the application's arguments (MPI_Init's contract) and a local `provided`.
        return unsafe { init_thread_for(argc, argv, mpi::ffi::MPI_THREAD_MULTIPLE as c_int, &mut provided) };
    }
    let f = next_or!(PMPI_Init: fn(*mut c_int, *mut *mut *mut c_char) -> c_int, MPI_ERR_OTHER);
    // SAFETY: the real PMPI_Init with the application's arguments.
    init_with(|| unsafe { f(argc, argv) })
}

/// The application asked for `MPI_THREAD_MULTIPLE`: its threads may run world collectives
/// concurrently, so a sync point never holds its lock across one of the application's
/// collectives (two ranks taking it in a different order would deadlock); each collective
/// is followed by the separate agreement instead.
static APP_THREADS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn app_threads() -> bool {
    APP_THREADS.load(std::sync::atomic::Ordering::Relaxed)
}

unsafe fn init_thread(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int {
    if required == mpi::ffi::MPI_THREAD_MULTIPLE as c_int {
        APP_THREADS.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: the application's arguments (MPI_Init_thread's contract).
    unsafe { init_thread_for(argc, argv, required, provided) }
}

/// `MPI_Init_thread` with the level `required` (the application's, or for `MPI_Init` under
/// `SCR_ENCODE_ASYNC=1` the library's).
unsafe fn init_thread_for(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let f =
        next_or!(PMPI_Init_thread: fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int, MPI_ERR_OTHER);
    let required = if wants_thread_multiple() { mpi::ffi::MPI_THREAD_MULTIPLE as c_int } else { required };
    // SAFETY: the real PMPI_Init_thread with the application's arguments.
    init_with(|| unsafe { f(argc, argv, required, provided) })
}

unsafe fn real_finalize() -> c_int {
    let f = next_or!(PMPI_Finalize: fn() -> c_int, MPI_ERR_OTHER);
    // SAFETY: the real PMPI_Finalize (the caller's contract: MPI is initialised).
    unsafe { f() }
}

unsafe fn finalize() -> c_int {
    if !scr::reentry::inside() {
        fence("MPI_Finalize", std::ptr::null(), transparent::finish, || ());
    }
    let _inside = Inside::enter();
    // SAFETY: the application finalises MPI (MPI_Finalize's contract), after the library.
    unsafe { real_finalize() }
}

/// `MPI_Barrier`: on a world-spanning communicator the agreement replaces it (an
/// allreduce over every rank synchronises them as a barrier does), except in a quiet stretch
/// on the node board: there the barrier is the application's own and defers the agreement as
/// a floating-point sum does ([`transparent::sync::defer_on_board`]); when some rank posted
/// news for it, the agreement runs right after it ([`transparent::sync::barrier_news`]), so
/// that what every rank closed before the barrier is complete when it returns, as where the
/// agreement replaces it.
unsafe fn barrier(comm: MPI_Comm) -> c_int {
    let f = next_or!(PMPI_Barrier: fn(MPI_Comm) -> c_int, MPI_ERR_OTHER);
    if app_threads() {
        // SAFETY: the real PMPI_Barrier with the application's communicator.
        let rc = unsafe { f(comm) };
        if rc == MPI_SUCCESS {
            collective_done(comm, true);
        }
        return rc;
    }
    if spans_world(comm) {
        if let Some(board) = transparent::sync::board() {
            if let Some(e) = transparent::sync::defer_on_board(board) {
                // SAFETY: as above.
                let rc = unsafe { f(comm) };
                if !transparent::sync::barrier_news(board, e) {
                    return rc;
                }
                // (news, read alike by every rank: the agreement, a collective of its own)
                let agreed = barrier_agreement();
                return if rc == MPI_SUCCESS { agreed.unwrap_or(rc) } else { rc };
            }
        }
        if let Some(rc) = barrier_agreement() {
            return rc;
        }
    }
    // SAFETY: as above.
    unsafe { f(comm) }
}

/// The agreement in place of a world barrier (apart, so that the quiet stretch's path stays
/// short): `None` when this is not a sync point here.
#[inline(never)]
fn barrier_agreement() -> Option<c_int> {
    sync_with(Via::Barrier, |c, mine| Ok(transparent::sync::agree(c, mine)))
}

/// `MPI_Allreduce`: on a world-spanning communicator, a small one with a predefined
/// operation and type carries the agreement ([`crate::piggyback`]); any other agrees on the
/// node board around it when every rank is on one node ([`transparent::board`]; in quiet
/// stretches at most every [`transparent::sync::BOARD_WINDOW`]-th in a row, sooner when a
/// rank posts news), and is followed by the separate agreement otherwise, at most every
/// [`transparent::sync::DEFER_LIMIT`]-th in a row.
unsafe fn allreduce(s: *const c_void, r: *mut c_void, n: c_int, t: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) -> c_int {
    let f = next_or!(
        PMPI_Allreduce: fn(*const c_void, *mut c_void, c_int, MPI_Datatype, MPI_Op, MPI_Comm) -> c_int,
        MPI_ERR_OTHER
    );
    let a = || Allreduce { send: s, recv: r, count: n, t, op, comm };
    if !spans_world(comm) {
        // SAFETY: the real PMPI_Allreduce with the application's arguments.
        return unsafe { f(s, r, n, t, op, comm) };
    }
    if !app_threads() {
        if let Some(plan) = Plan::serial(n, t, op) {
            // SAFETY: the application's arguments, as MPI requires them.
            if let Some(rc) = unsafe { carried(f, plan, &a()) } {
                return rc;
            }
        } else if let Some(board) = transparent::sync::board().filter(|_| n > 0) {
            // every rank on this node: the agreement rides on the node board around the
            // application's own allreduce, unchanged (one that cannot carry it: a
            // floating-point sum); no rank leaves an allreduce of at least one element before
            // every rank entered it. A deferred agreement (the quiet stretch's fast path):
            // nothing of SCR's runs around the collective but this rank's news posted before
            // it, if it has any, and every rank's read after it.
            if let Some(e) = transparent::sync::defer_on_board(board) {
                // SAFETY: as above.
                let rc = unsafe { f(s, r, n, t, op, comm) };
                // (news: the next sync point runs the agreement)
                transparent::sync::deferred_on_board(board, e);
                return rc;
            }
            // SAFETY: as above.
            if let Some(rc) = unsafe { agreed_on_board(f, board, &a()) } {
                return rc;
            }
        }
    }
    // SAFETY: as above.
    unsafe { followed(f, &a()) }
}

/// `allreduce` carrying the agreement ([`crate::piggyback`]); `None`: not a sync point here.
/// (Apart, as the two below, so that the quiet stretch's path stays short.)
#[inline(never)]
unsafe fn carried(f: RealAllreduce, plan: Plan, a: &Allreduce) -> Option<c_int> {
    // SAFETY: the application's arguments, as MPI requires them (the caller's contract).
    sync_with(Via::Allreduce, |_, mine| unsafe { plan.run(f, a, mine) })
}

/// `allreduce` with the agreement on the node board around it ([`on_board`]).
#[inline(never)]
unsafe fn agreed_on_board(f: RealAllreduce, board: &transparent::board::Board, a: &Allreduce) -> Option<c_int> {
    let Allreduce { send, recv, count, t, op, comm } = *a;
    // SAFETY: the real PMPI_Allreduce with the application's arguments (the caller's contract).
    on_board(board, || unsafe { f(send, recv, count, t, op, comm) })
}

/// `allreduce` followed by the separate agreement ([`collective_done`]).
#[inline(never)]
unsafe fn followed(f: RealAllreduce, a: &Allreduce) -> c_int {
    let Allreduce { send, recv, count, t, op, comm } = *a;
    // SAFETY: the real PMPI_Allreduce with the application's arguments (the caller's contract).
    let rc = unsafe { f(send, recv, count, t, op, comm) };
    if rc == MPI_SUCCESS {
        collective_done(comm, false);
    }
    rc
}

/// The element-wise maximum of `v` over `comm` (collective), with the real
/// `PMPI_Allreduce`: the library's own agreement, never a sync point.
unsafe fn max_over(comm: MPI_Comm, v: &[i64]) -> Option<Vec<i64>> {
    let f =
        next_or!(PMPI_Allreduce: fn(*const c_void, *mut c_void, c_int, MPI_Datatype, MPI_Op, MPI_Comm) -> c_int, None);
    let mut out = vec![0i64; v.len()];
    let _inside = Inside::enter();
    // SAFETY: reading MPI's predefined handle constants.
    let (t, op) = unsafe { (mpi::ffi::RSMPI_INT64_T, mpi::ffi::RSMPI_MAX) };
    // SAFETY: both buffers hold v.len() 64-bit integers; the datatype and op are MPI's own;
    // `comm` is the caller's communicator (the caller's contract).
    let rc = unsafe { f(v.as_ptr().cast(), out.as_mut_ptr().cast(), v.len() as c_int, t, op, comm) };
    (rc == MPI_SUCCESS).then_some(out)
}

/// `MPI_File_open`: a checkpoint file opened by several processes is a shared file; the
/// core names the file to open instead (its staging name in the prefix), agreeing with the
/// other processes of `comm` when a rank wrote the file alone before.
unsafe fn file_open(comm: MPI_Comm, name: *const c_char, amode: c_int, info: MPI_Info, fh: *mut MPI_File) -> c_int {
    use transparent::shared::{mpi_open, mpi_opened, Amode, MpiCall};
    let f =
        next_or!(PMPI_File_open: fn(MPI_Comm, *const c_char, c_int, MPI_Info, *mut MPI_File) -> c_int, MPI_ERR_OTHER);
    if name.is_null() || transparent::routing().is_none() {
        // SAFETY: the real PMPI_File_open with the application's arguments.
        return unsafe { f(comm, name, amode, info, fh) };
    }
    let mut n: c_int = 0;
    // SAFETY: MPI_Comm_size is local; an invalid handle only makes it fail (n stays 0).
    unsafe { mpi::ffi::MPI_Comm_size(comm, &mut n) };
    let has = |bit: u32| amode & bit as c_int != 0;
    let mode = Amode {
        read_only: has(mpi::ffi::MPI_MODE_RDONLY),
        create: has(mpi::ffi::MPI_MODE_CREATE),
        excl: has(mpi::ffi::MPI_MODE_EXCL),
    };
    // SAFETY: a collective over the application's communicator, which every rank of it
    // enters here too (MPI_File_open is collective).
    let mut agree = |v: &[i64]| unsafe { max_over(comm, v) };
    // SAFETY: `name` is non-null here and NUL-terminated (MPI_File_open's contract).
    let call = fence(
        "MPI_File_open",
        name,
        || mpi_open(unsafe { CStr::from_ptr(name) }, mode, n, &mut agree),
        || MpiCall::Pass,
    );
    match call {
        // SAFETY: the real PMPI_File_open with the application's arguments.
        MpiCall::Pass => unsafe { f(comm, name, amode, info, fh) },
        MpiCall::Fail => {
            if !fh.is_null() {
                // SAFETY: the application's non-null handle pointer; reading MPI's constant.
                unsafe { *fh = mpi::ffi::RSMPI_FILE_NULL };
            }
            mpi::ffi::MPI_ERR_FILE as c_int
        }
        MpiCall::Open(o) => {
            // SAFETY: the real PMPI_File_open with the application's arguments and the core's
            // NUL-terminated name, on every rank of `comm` alike.
            let rc = unsafe { f(comm, o.name.as_ptr(), amode, info, fh) };
            fence("MPI_File_open", name, || mpi_opened(&o, rc == MPI_SUCCESS), || ());
            rc
        }
    }
}

/// `MPI_Comm_free`: the handle may name another communicator afterwards
/// ([`congruence`]).
unsafe fn comm_free(comm: *mut MPI_Comm) -> c_int {
    let f = next_or!(PMPI_Comm_free: fn(*mut MPI_Comm) -> c_int, MPI_ERR_OTHER);
    congruence::forget();
    // SAFETY: the real PMPI_Comm_free with the application's argument.
    unsafe { f(comm) }
}

/// `MPI_Comm_disconnect`: as [`comm_free`].
unsafe fn comm_disconnect(comm: *mut MPI_Comm) -> c_int {
    let f = next_or!(PMPI_Comm_disconnect: fn(*mut MPI_Comm) -> c_int, MPI_ERR_OTHER);
    congruence::forget();
    // SAFETY: the real PMPI_Comm_disconnect with the application's argument.
    unsafe { f(comm) }
}

/// Both names of each entry point, with the MPI standard's contract.
macro_rules! export {
    ($($name:ident, $pname:ident => fn $imp:ident($($a:ident: $t:ty),*) -> $ret:ty;)*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
                // SAFETY: the caller keeps the MPI standard's contract of this function.
                unsafe { $imp($($a),*) }
            }
            #[no_mangle]
            pub unsafe extern "C" fn $pname($($a: $t),*) -> $ret {
                // SAFETY: as above.
                unsafe { $imp($($a),*) }
            }
        )*
    };
}

export! {
    MPI_Init, PMPI_Init => fn init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int;
    MPI_Init_thread, PMPI_Init_thread => fn init_thread(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int;
    MPI_Finalize, PMPI_Finalize => fn finalize() -> c_int;
    MPI_Barrier, PMPI_Barrier => fn barrier(comm: MPI_Comm) -> c_int;
    MPI_Allreduce, PMPI_Allreduce => fn allreduce(s: *const c_void, r: *mut c_void, n: c_int, t: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) -> c_int;
    MPI_Comm_free, PMPI_Comm_free => fn comm_free(comm: *mut MPI_Comm) -> c_int;
    MPI_Comm_disconnect, PMPI_Comm_disconnect => fn comm_disconnect(comm: *mut MPI_Comm) -> c_int;
    MPI_File_open, PMPI_File_open => fn file_open(comm: MPI_Comm, name: *const c_char, amode: c_int, info: MPI_Info, fh: *mut MPI_File) -> c_int;
}
