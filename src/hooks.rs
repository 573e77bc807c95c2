//! State shared by the C API and the preload's hooks (transparent mode).
//!
//! * A per-thread re-entry guard: while the library itself runs (any `SCR_*` call, or a hook
//!   doing SCR work), the file and MPI hooks of `libscr_preload.so` pass straight through, so
//!   the library's own I/O and MPI traffic are never redirected or mistaken for the
//!   application's. The guard is a `const`-initialised `Cell` (no destructor), so it stays
//!   usable before constructors and after thread-local destructors have run.
//! * Whether the preload initialised SCR inside `MPI_Init` (then an application's own
//!   `SCR_Init`/`SCR_Finalize` succeed without doing it twice).
//! * Whether the application took explicit control by starting an output phase itself (then
//!   the hooks stop routing files and leave dataset boundaries to the application).
//!
//! In `libscr.so` nothing reads these; they cost one thread-local increment per API call.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// RAII marker: "the library is running on this thread".
pub struct Inside(());

impl Inside {
    pub fn enter() -> Inside {
        let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
        Inside(())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether the library is already running on this thread (a hook must pass through).
#[inline]
pub fn inside() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(true)
}

static AUTO_INIT: AtomicBool = AtomicBool::new(false);
static DEFER_HALT: AtomicBool = AtomicBool::new(false);

/// Transparent mode acts on `SCR_HALT_EXIT` itself, at the sync point after a checkpoint (so
/// the application's own post-checkpoint steps, such as its pointer file, happen first).
pub fn set_defer_halt_exit(v: bool) {
    DEFER_HALT.store(v, Ordering::SeqCst);
}

pub fn defer_halt_exit() -> bool {
    DEFER_HALT.load(Ordering::SeqCst)
}
static EXPLICIT: AtomicBool = AtomicBool::new(false);

/// The preload ran `SCR_Init` inside `MPI_Init` (and will run `SCR_Finalize` in `MPI_Finalize`).
pub fn set_auto_init(v: bool) {
    AUTO_INIT.store(v, Ordering::SeqCst);
}

pub fn auto_init() -> bool {
    AUTO_INIT.load(Ordering::SeqCst)
}

/// The application started an output phase itself: transparent routing stops for the run.
pub fn set_explicit() {
    EXPLICIT.store(true, Ordering::SeqCst);
}

pub fn explicit() -> bool {
    EXPLICIT.load(Ordering::Relaxed)
}
