//! The integration tests: one test binary (`autotests = false` in Cargo.toml), one module per
//! topic. They run real programs (the C, C++, Fortran and Python examples, the commands, real
//! applications) under a real `mpirun` with 4 or more ranks, on nodes simulated with
//! `unshare` (see [`common`]). One binary is linked once, where a binary per file meant one
//! link of the whole library per file.
//!
//! Run one topic with `cargo test --test integration <module>::` (e.g. `preload::`), one test
//! by its name. A new topic is a new module here; [`suite::no_test_file_is_left_out`] fails
//! when a `.rs` file under `tests/` is not part of this binary.

mod api;
mod async_encode;
mod async_flush;
mod bindings;
mod collectives;
mod commands;
mod common;
mod dblog;
mod elastic;
mod enable;
mod events;
mod hostile;
mod installed_examples;
mod integrity;
mod job_lock;
mod job_scripts;
mod layers;
mod locking;
mod preload;
mod preload_calls;
mod preload_naming;
mod preload_peers;
mod preload_shapes;
mod preload_shared;
mod preload_sync;
mod realapps;
mod redundancy;
mod relaunch;
mod resource_managers;
mod restart;
mod restart_files;
mod settings;
mod shared;
mod slurm;
mod suite;
mod watchdog;
