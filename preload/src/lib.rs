//! `libscr_preload.so`: transparent mode. `LD_PRELOAD` it into an unmodified MPI program
//! and the files it writes under the prefix that match a checkpoint pattern go to cache,
//! form SCR datasets (redundancy, flush, halt per the configuration) and are found again on
//! restart through their prefix paths. It embeds the SCR core and exports the whole SCR C
//! API too (`scr::capi` is linked in), so a preloaded application may call `SCR_*` itself;
//! once it starts an output phase, routing stops and the application is in charge.
//!
//! | module | owns |
//! |---|---|
//! | [`real`] | finding the next definition of each hooked symbol |
//! | [`state`] | the routing setup, the file table, the descriptor table, errno saving |
//! | [`path`] | the fast "under the prefix?" test and path normalisation |
//! | [`fileops`] | what an open, close, dup, rename, unlink or stat of a prefix path does |
//! | [`file_hooks`] | the exported libc symbols (thin) |
//! | [`sync`] | dataset boundaries: sync points and completing datasets |
//! | [`mpi_hooks`] | `MPI_Init*`, `MPI_Finalize`, the sync-point collectives, process exit |
//!
//! Before `MPI_Init` returns, after `MPI_Finalize`, in processes that never initialise MPI
//! (`mpirun`, shells, compilers) and in forked children, every hook is a plain call of the
//! real function with errno untouched. The library's own work runs with the re-entry guard
//! of [`scr::hooks`] set, so its I/O and MPI traffic pass straight through.

pub use scr::capi;

mod file_hooks;
mod fileops;
mod mpi_hooks;
mod path;
mod real;
mod state;
mod sync;

extern "C" fn destructor() {
    mpi_hooks::at_exit();
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = destructor;
