//! Transparent mode: SCR for an unmodified MPI application, whose file calls a front end
//! (`libscr_preload.so`) forwards here. This module owns the whole policy; the front end
//! only converts C arguments, calls one function of this module, applies the decision it
//! returns and keeps errno.
//!
//! | module | owns |
//! |---|---|
//! | [`prefix`] | which path arguments concern the prefix (fast, no allocation) |
//! | [`table`] | the file table: pending files, cached datasets' files, removals, namespace changes |
//! | [`rules`] | the open, rename, link and removal rules, as plain functions over the table |
//! | [`calls`] | the calls the front end forwards: gather facts, apply a rule, update table and cache |
//! | [`names`] | renames, links and removals, performed here on the cache and the prefix |
//! | [`naming`] | dataset names agreed at a sync point; warnings about names that cannot work |
//! | [`fds`] | which descriptors write pending files |
//! | [`shared`] | files several ranks write (MPI-IO, `SCR_PRELOAD_SHARED`): written once in the prefix |
//! | [`shells`] | directories made for checkpoint files, removed when empty once their checkpoint is gone |
//! | [`listing`] | merged directory listings and `nftw` walks |
//! | [`sync`] | sync points: the agreement that completes datasets, shared namespace changes |
//! | [`session`] | start (in `MPI_Init`), stop (in `MPI_Finalize`), process exit, the routing gate |
//! | [`view`] | what the processes a rank starts (shells, `ls`, `rm -r`) see of its cached files |
//!
//! Files under the prefix that match a checkpoint pattern (`config::patterns`) are written in
//! node-local cache (real kernel descriptors; only the path changes), become SCR datasets at
//! sync points (redundancy, flush and halt per the configuration) and are served back through
//! their prefix paths: open, the stat family, listings, `realpath`, metadata changes. The
//! runtime does the dataset work ([`crate::runtime::adopt_output`]).

pub mod calls;
pub mod fds;
pub mod listing;
pub mod names;
pub(crate) mod naming;
pub mod prefix;
pub mod rules;
pub mod session;
pub mod shared;
pub(crate) mod shells;
pub mod sync;
pub mod table;
pub mod view;

#[cfg(test)]
mod agreement_tests;

pub use calls::{Call, Done, Opening};
pub use prefix::{BaseFn, PATH_MAX};
pub use session::{at_exit, finish, routing, start, stop};

/// Test builds only: a path whose name contains this makes the core panic inside the hook
/// that handles it, so tests can show that a panic never reaches the application.
pub const TEST_PANIC: &str = "SCR_TEST_PANIC";

/// Panic when `path` asks for it ([`TEST_PANIC`]); compiled out of release builds.
#[inline]
pub fn test_panic(path: &std::ffi::CStr) {
    if cfg!(debug_assertions) && path.to_bytes().windows(TEST_PANIC.len()).any(|w| w == TEST_PANIC.as_bytes()) {
        panic!("test panic ({TEST_PANIC} in the path)");
    }
}
