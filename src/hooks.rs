//! State shared by the C API and the preload's hooks (transparent mode). (The re-entry guard
//! the hooks check is [`crate::reentry`].)
//!
//! * Whether the preload initialised SCR inside `MPI_Init` (then an application's own
//!   `SCR_Init`/`SCR_Finalize` succeed without doing it twice).
//! * Whether the application took explicit control by starting an output phase itself (then
//!   the hooks stop routing files and leave dataset boundaries to the application).

use std::sync::atomic::{AtomicBool, Ordering};

static AUTO_INIT: AtomicBool = AtomicBool::new(false);
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
