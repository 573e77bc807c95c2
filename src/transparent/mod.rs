//! Transparent mode: SCR for an unmodified MPI application, whose file calls a front end
//! (`libscr_preload.so`) forwards here. This module owns the whole policy; the front end
//! only converts C arguments, calls one function of this module, applies the decision it
//! returns and keeps errno.
//!
//! The modules, by floor from the top: each uses only those on its floors or below, none
//! imports one above it, and no two share state through a static (the process state is one
//! object in `state`).
//!
//! | floor | module | owns |
//! |---|---|---|
//! | lifecycle | `lifecycle` | start (in `MPI_Init`), stop (in `MPI_Finalize`), process exit ([`start`], [`finish`], [`stop`], [`at_exit`]) |
//! | sync points | [`sync`] | sync points: the agreement that completes datasets, shared namespace changes, recovery at start |
//! | calls | [`calls`] | the calls the front end forwards: gather facts, apply a rule, update table and cache |
//! | | [`names`] | renames, links and removals, performed here on the cache and the prefix |
//! | | [`shared`] | files several ranks write (MPI-IO, `SCR_PRELOAD_SHARED`): written once in the prefix |
//! | | [`listing`] | merged directory listings and `nftw` walks |
//! | state | `state` | the process state: sessions, routing gate ([`routing`]), flags, the table lock and completion gate, the sync state |
//! | data | [`view`] | what the processes a rank starts (shells, `ls`, `rm -r`) see of its cached files |
//! | | [`shells`] | directories made for checkpoint files, removed when empty once their checkpoint is gone |
//! | | [`rules`] | the open, rename, link and removal rules, as plain functions over the table |
//! | | [`table`] | the file table: pending files, cached datasets' files, removals, namespace changes |
//! | | `shared_files` | the table's part for shared files |
//! | | `peers` | other ranks' files of complete cached checkpoints: what they are, where their bytes are |
//! | | [`session`] | the routing setup of a process (rank, prefix, patterns) and path resolution |
//! | ground | `plain` | the answers the front end applies ([`Call`], [`Done`], [`Opening`]), plain file operations |
//! | | [`prefix`] | which path arguments concern the prefix (fast, no allocation) |
//! | | [`fds`] | which descriptors write pending files |
//! | | `untouched` | whether a copy made for an update in place was closed unchanged |
//! | | [`naming`] | dataset names agreed at a sync point; warnings about names that cannot work |
//! | | [`writes`] | the write journal: which pending files a killed run was still writing |
//! | | [`board`] | the node board: a sync point's agreement in shared memory when every rank is on one node |
//! | | `news` | whether this rank's files changed since the last agreement (posted on the board at deferred points) |
//!
//! Files under the prefix that match a checkpoint pattern (`config::patterns`) are written in
//! node-local cache (real kernel descriptors; only the path changes), become SCR datasets at
//! sync points (redundancy, flush and halt per the configuration) and are served back through
//! their prefix paths: open, the stat family, listings, `realpath`, metadata changes. The
//! runtime does the dataset work ([`crate::runtime::adopt_output`]).

pub mod board;
pub mod calls;
pub mod fds;
mod lifecycle;
pub mod listing;
pub mod names;
pub(crate) mod naming;
mod news;
mod peers;
mod plain;
pub(crate) mod prefix;
pub(crate) mod rules;
pub(crate) mod session;
pub mod shared;
mod shared_files;
pub(crate) mod shells;
mod state;
pub mod sync;
pub(crate) mod table;
pub mod timing;
mod untouched;
pub mod view;
mod writes;

#[cfg(test)]
mod agreement_tests;

pub use calls::{Call, Done, Opening};
pub use lifecycle::{at_exit, finish, start, stop};
pub use plain::{test_panic, TEST_PANIC};
pub use prefix::{cwd_generation, cwd_may_have_moved, BaseFn, PATH_MAX};
pub use state::routing;

/// The communicator a sync point's agreement runs on ([`sync::point_with`] hands it to the
/// front end's agreement, e.g. [`sync::agree`]).
pub use crate::comm::Comm;

// The few services of lower layers the front end needs, as narrow functions here so that
// `libscr_preload.so` reaches the core only through this module (`tests/it/layers.rs`).

/// Whether SCR is already started in this process (by `SCR_Init` or by the front end in
/// `MPI_Init`): the front end's `MPI_Init` then starts nothing more.
pub fn scr_started() -> bool {
    crate::runtime::mode().is_some()
}

/// Ends the whole job (`MPI_Abort` on the world communicator with `code`): transparent
/// mode could not start, and a run without it would write checkpoints nowhere safe.
pub fn abort_job(code: i32) -> ! {
    crate::comm::abort(code)
}

/// Logs a panic the front end caught in hook `hook` (on path `path`, `""` if none): the
/// call then goes to the file system unchanged.
pub fn internal_error(hook: &str, path: &str, msg: &str) {
    crate::scr_error!(
        "transparent mode: internal error in {hook}({path}): {msg}; the call goes to the file system unchanged"
    );
}

/// `SCR_ENCODE_ASYNC` is set to a true value in the environment (read before MPI and the
/// configuration files are up): MPI must then be initialised with `MPI_THREAD_MULTIPLE`.
pub fn encode_async_requested() -> bool {
    std::env::var("SCR_ENCODE_ASYNC").ok().and_then(|v| crate::config::params::parse_bool(&v)) == Some(true)
}
