//! MPI lifecycle and sync-point hooks: `MPI_Init`, `MPI_Init_thread`, `MPI_Finalize`,
//! `MPI_Barrier`, `MPI_Allreduce`, each exported under its `MPI_` and `PMPI_` name (Open
//! MPI's Fortran bindings call `PMPI_*` directly) and calling the next `PMPI_*`
//! implementation, never our own.
//!
//! After the real `PMPI_Init*` succeeded, SCR starts (`SCR_Init`: rebuild, fetch, the
//! checkpoint to restart from), the files of cached datasets become visible through their
//! prefix paths, and routing begins. `MPI_Finalize` completes the last dataset, runs
//! `SCR_Finalize` (flushes owed) and only then calls the real `PMPI_Finalize`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use mpi::ffi::{MPI_Comm, MPI_Datatype, MPI_Op};
use scr::hooks;
use scr::reentry::Inside;

use crate::real;
use crate::state::{self, Active};

const MPI_SUCCESS: c_int = 0;
const MPI_ERR_OTHER: c_int = 16;

static STARTED: AtomicBool = AtomicBool::new(false);

fn start() {
    if STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let _inside = Inside::enter();
    // An unmodified application cannot call SCR_Should_exit: honour halt conditions by
    // ending the run after the checkpoint that meets them, unless configured otherwise.
    if scr::config::scr_config("SCR_HALT_EXIT", false).ok().flatten().is_none() {
        let _ = scr::config::scr_config("SCR_HALT_EXIT=1", false);
    }
    if let Err(e) = scr::runtime::init_as(scr::runtime::Mode::Transparent) {
        scr::scr_error!("transparent mode cannot start: {e}; aborting the run (unset LD_PRELOAD to run without SCR)");
        scr::comm::abort(1);
    }
    hooks::set_auto_init(true);
    let setup = match scr::runtime::transparent_setup() {
        Ok(s) => s,
        Err(e) => {
            scr::scr_error!("transparent mode: {e}");
            return;
        }
    };
    let patterns = match scr::config::patterns::PatternSet::compile(&setup.patterns) {
        Ok(p) => p,
        Err(e) => {
            scr::scr_error!("{e}");
            scr::comm::abort(1);
        }
    };
    if patterns.is_empty() && setup.rank == 0 {
        scr::scr_warn!(
            "transparent mode: no checkpoint patterns are configured (PRELOAD= entries or SCR_PRELOAD_PATTERNS), so no file is routed to cache"
        );
    }
    match scr::runtime::restart_auto() {
        Ok(Some(name)) if setup.rank == 0 => scr::scr_debug!(1, "transparent mode: restarting from {name}"),
        Ok(_) => {}
        Err(e) => scr::scr_error!("transparent mode: restart: {e}"),
    }
    crate::sync::setup();
    crate::sync::refresh_committed();
    let canonical = setup.prefix.canonical.clone();
    if setup.rank == 0 {
        scr::scr_debug!(
            1,
            "transparent mode: {} pattern(s) under {}, pending files in {}",
            patterns.len(),
            setup.prefix.path.display(),
            setup.pending.display()
        );
    }
    state::activate(Active {
        rank: setup.rank,
        // SAFETY: no preconditions.
        pid: unsafe { libc::getpid() },
        prefix: setup.prefix.path,
        canonical,
        pending: setup.pending,
        patterns,
        halt_exit: setup.halt_exit,
    });
}

fn finish() {
    let _inside = Inside::enter();
    if !STARTED.load(Ordering::SeqCst) || !hooks::auto_init() {
        return;
    }
    if let Some(a) = state::active_any() {
        if !hooks::explicit() {
            crate::sync::point(a, true);
        }
    }
    shut_down();
}

/// `SCR_Finalize` and the end of routing (no MPI call of the library after this).
fn shut_down() {
    state::set_finalized();
    crate::sync::teardown();
    hooks::set_auto_init(false);
    if let Err(e) = scr::runtime::finalize() {
        scr::scr_error!("transparent mode: SCR_Finalize: {e}");
    }
}

/// `SCR_HALT_EXIT`: a halt condition holds after a checkpoint; end the run as `MPI_Finalize`
/// and `exit(0)` would (called at a sync point, on every rank).
pub fn halt_exit(rank: u32) -> ! {
    let _inside = Inside::enter();
    if rank == 0 {
        scr::log::emit("INFO", format_args!("halting the run after its checkpoint (SCR_HALT_EXIT=1)"));
    }
    shut_down();
    if let Some(f) = real::PMPI_Finalize() {
        // SAFETY: MPI is initialised and the library holds no communicator any more.
        unsafe { f() };
    }
    std::process::exit(0);
}

/// After a successful collective on `comm`: a sync point if `comm` spans the world.
fn collective_done(comm: MPI_Comm) {
    let Some(a) = state::routing() else { return };
    // SAFETY: reading the handle constant; MPI_Comm_compare is local and `comm` was just
    // used successfully by the application.
    let world = unsafe { mpi::ffi::RSMPI_COMM_WORLD };
    let spans = comm == world || {
        let mut r: c_int = 0;
        unsafe { mpi::ffi::MPI_Comm_compare(comm, world, &mut r) == MPI_SUCCESS && r == mpi::ffi::RSMPI_CONGRUENT }
    };
    if spans {
        crate::sync::point(a, false);
    }
}

/// `SCR_ENCODE_ASYNC=1` in the environment: MPI is initialised with `MPI_THREAD_MULTIPLE`,
/// which the background encoding needs (an application may always get more than it asked for).
fn wants_thread_multiple() -> bool {
    std::env::var("SCR_ENCODE_ASYNC").ok().and_then(|v| scr::config::params::parse_bool(&v)) == Some(true)
}

unsafe fn init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let Some(f) = real::PMPI_Init() else { return MPI_ERR_OTHER };
    if scr::reentry::inside() || STARTED.load(Ordering::SeqCst) {
        return f(argc, argv);
    }
    let rc = {
        let _inside = Inside::enter();
        match real::PMPI_Init_thread().filter(|_| wants_thread_multiple()) {
            Some(ft) => {
                let mut provided: c_int = 0;
                ft(argc, argv, mpi::ffi::MPI_THREAD_MULTIPLE as c_int, &mut provided)
            }
            None => f(argc, argv),
        }
    };
    if rc == MPI_SUCCESS {
        start();
    }
    rc
}

unsafe fn init_thread(argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int {
    let Some(f) = real::PMPI_Init_thread() else { return MPI_ERR_OTHER };
    if scr::reentry::inside() || STARTED.load(Ordering::SeqCst) {
        return f(argc, argv, required, provided);
    }
    let rc = {
        let _inside = Inside::enter();
        let required = if wants_thread_multiple() { mpi::ffi::MPI_THREAD_MULTIPLE as c_int } else { required };
        f(argc, argv, required, provided)
    };
    if rc == MPI_SUCCESS {
        start();
    }
    rc
}

unsafe fn finalize() -> c_int {
    let Some(f) = real::PMPI_Finalize() else { return MPI_ERR_OTHER };
    if !scr::reentry::inside() {
        finish();
    }
    let _inside = Inside::enter();
    f()
}

unsafe fn barrier(comm: MPI_Comm) -> c_int {
    let Some(f) = real::PMPI_Barrier() else { return MPI_ERR_OTHER };
    let rc = f(comm);
    if rc == MPI_SUCCESS {
        collective_done(comm);
    }
    rc
}

unsafe fn allreduce(s: *const c_void, r: *mut c_void, n: c_int, t: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) -> c_int {
    let Some(f) = real::PMPI_Allreduce() else { return MPI_ERR_OTHER };
    let rc = f(s, r, n, t, op, comm);
    if rc == MPI_SUCCESS {
        collective_done(comm);
    }
    rc
}

macro_rules! export {
    ($($name:ident, $pname:ident => fn $imp:ident($($a:ident: $t:ty),*) -> $ret:ty;)*) => {
        $(
            /// # Safety
            /// Called by the application with the arguments the MPI standard defines.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
                $imp($($a),*)
            }
            /// # Safety
            /// As the `MPI_` form.
            #[no_mangle]
            pub unsafe extern "C" fn $pname($($a: $t),*) -> $ret {
                $imp($($a),*)
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
}

/// Process exit (library destructor): after `MPI_Finalize`, copy files still pending to the
/// prefix (stdio buffers flushed first); without it, leave them pending (they never became
/// a dataset) and say so.
pub fn at_exit() {
    let Some(a) = state::owner() else { return };
    let _inside = Inside::enter();
    // SAFETY: fflush(NULL) flushes every output stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    let entries: Vec<state::Entry> = state::files().entries.values().filter(|e| !e.deleted).cloned().collect();
    if entries.is_empty() {
        return;
    }
    if state::finalized() {
        for e in &entries {
            crate::fileops::materialize(e, e.writers == 0);
        }
    } else if STARTED.load(Ordering::SeqCst) {
        scr::scr_warn!(
            "rank {}: the process exits without MPI_Finalize; {} file(s) written since the last complete dataset stay in {} and are not a dataset",
            a.rank,
            entries.len(),
            a.pending.display()
        );
    }
}
