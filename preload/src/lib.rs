//! `libscr_preload.so`: transparent mode. `LD_PRELOAD` it into an unmodified MPI program
//! and the files it writes under the prefix that match a checkpoint pattern go to cache,
//! form SCR datasets (redundancy, flush, halt per the configuration) and are found again on
//! restart through their prefix paths. It embeds the SCR core and exports the whole SCR C
//! API too (`scr::capi` is linked in), so a preloaded application may call `SCR_*` itself;
//! once it starts an output phase, routing stops and the application is in charge.
//!
//! This crate is a detour layer: each hook resolves its real symbol once ([`real`]), passes
//! straight through when routing is off or the library itself is working on the thread,
//! converts its C arguments, calls one function of `scr::transparent` (which owns every
//! rule) behind a panic fence, applies the decision and keeps errno ([`detour`]).
//!
//! | module | hooks |
//! |---|---|
//! | [`file_hooks`] | open family, stdio, close and dup family, writes, shared mappings, renames, links, removals, metadata, `realpath`, `statfs` |
//! | [`dir_hooks`] | directory streams, `scandir`, `nftw` |
//! | [`mpi_hooks`] | `MPI_Init*`, `MPI_Finalize`, the sync-point collectives, `MPI_File_open` ([`piggyback`]: the agreement carried by a small allreduce) |

#![deny(unsafe_op_in_unsafe_fn)]

pub use scr::capi;

mod detour;
mod dir_hooks;
mod file_hooks;
mod mpi_hooks;
mod piggyback;
mod real;

extern "C" fn constructor() {
    real::find_mmap();
    detour::install_panic_hook();
    // a process started by a rank: the rank's view of its cached files
    // SAFETY: getenv at load time, before the program's threads exist.
    let view = unsafe { libc::getenv(scr::transparent::view::ENV.as_ptr()) };
    if !view.is_null() {
        // SAFETY: a NUL-terminated environment value.
        scr::transparent::view::inherited(unsafe { std::ffi::CStr::from_ptr(view) }, detour::base);
    }
}

extern "C" fn destructor() {
    detour::fence(
        "exit",
        std::ptr::null(),
        || {
            // SAFETY: fflush(NULL) flushes every output stream.
            unsafe { libc::fflush(std::ptr::null_mut()) };
            scr::transparent::at_exit();
        },
        || (),
    );
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = destructor;
