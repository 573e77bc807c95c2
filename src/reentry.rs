//! The per-thread re-entry guard: while the library itself runs on a thread (any `SCR_*`
//! call, a hook doing SCR work, the background flush, the watchdog, the event log), the file
//! and MPI hooks of `libscr_preload.so` pass straight through, so the library's own I/O and
//! MPI traffic are never redirected or mistaken for the application's. The guard is a
//! `const`-initialised `Cell` (no destructor), so it stays usable before constructors and
//! after thread-local destructors have run. In `libscr.so` nothing reads it; it costs one
//! thread-local increment per API call.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// RAII marker: "the library is running on this thread".
pub struct Inside(());

impl Inside {
    /// Mark the library as running on this thread until the returned guard is dropped (nests).
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
