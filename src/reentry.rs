//! The per-thread re-entry guard: while the library itself runs on a thread (any `SCR_*`
//! call, a hook doing SCR work, the background flush, the watchdog, the event log), the file
//! and MPI hooks of `libscr_preload.so` pass straight through, so the library's own I/O and
//! MPI traffic are never redirected or mistaken for the application's. The guard is a
//! `const`-initialised `Cell` (no destructor), so it stays usable before constructors and
//! after thread-local destructors have run. In `libscr.so` nothing reads it; it costs one
//! thread-local increment per API call, and one process-wide atomic add when a thread's depth
//! goes from 0 to 1 or back ([`ANYWHERE`], which spares the hooks the thread-local read while
//! no thread of the process is inside).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Threads of this process inside the library right now. While it is 0 no thread is, and
/// [`inside`] answers without the thread-local access (in a cdylib, a call into the dynamic
/// linker: a sizeable part of a hook's cost in a solver's quiet stretch). A thread that is
/// inside counted itself before, so it always reads at least its own count here.
static ANYWHERE: AtomicU32 = AtomicU32::new(0);

/// RAII marker: "the library is running on this thread" (not `Send`: it must be dropped on
/// the thread that made it).
pub struct Inside(std::marker::PhantomData<*const ()>);

impl Inside {
    /// Mark the library as running on this thread until the returned guard is dropped (nests).
    pub fn enter() -> Inside {
        if DEPTH.try_with(|d| d.replace(d.get() + 1) == 0).unwrap_or(false) {
            ANYWHERE.fetch_add(1, Ordering::Relaxed);
        }
        Inside(std::marker::PhantomData)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        if DEPTH.try_with(|d| d.replace(d.get().saturating_sub(1)) == 1).unwrap_or(false) {
            ANYWHERE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether the library is already running on this thread (a hook must pass through).
#[inline]
pub fn inside() -> bool {
    ANYWHERE.load(Ordering::Relaxed) != 0 && inside_this_thread()
}

/// [`inside`]'s thread-local read (apart, so that the compiler does not compute the
/// thread-local's address before the test that spares it).
#[inline(never)]
fn inside_this_thread() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(true)
}
