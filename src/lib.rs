//! # scr: Scalable Checkpoint/Restart for MPI applications
//!
//! A Rust implementation of LLNL's SCR library. An application's checkpoint files are written
//! to node-local storage (the *cache*), protected there by a redundancy scheme, copied to the
//! parallel file system (the *prefix* directory) now and then or when marked as output, and found
//! again on restart: from cache when the failure left it intact, fetched from the prefix
//! otherwise.
//!
//! Layers, each using only itself and the ones below. `ARCHITECTURE.md` at the repository root
//! explains them, follows a checkpoint and a restart through the modules, tells the crash-safety
//! story of every file the library writes and says where to start reading:
//!
//! | layer | modules |
//! |---|---|
//! | front ends | [`capi`] (the SCR 3 C API, `libscr.so`), the preload crate (through [`transparent`]), the commands (`src/bin/`, through [`ops`]) |
//! | transparent | [`transparent`]: transparent mode's policy (file table, rules, listings, sync points) |
//! | ops | [`ops`]: what the commands do |
//! | runtime | [`runtime`]: one function per `SCR_*` call, the phase state machine, policies |
//! | transfer | [`transfer`]: flush to and fetch from the prefix, verified copies |
//! | redundancy | [`redundancy`]: the schemes applied to a cached dataset |
//! | state | [`state`]: directory layout, filemaps, index, halt, flush and summary files |
//! | descriptors | [`desc`]: groups, stores, redundancy descriptors |
//! | events | [`events`]: the event log the configuration sets up (text log, syslog, MariaDB/MySQL) |
//! | config | [`config`]: parameters from environment, files, `SCR_Config` and defaults; transparent mode's checkpoint patterns ([`config::patterns`]) |
//! | foundation | [`error`], [`log`], [`identity`], [`paths`], [`persist`], [`comm`], [`checksum`], [`reentry`], `sys` (the libc calls outside the boundaries) |
//!
//! The crate-root constants ([`VERSION`], [`MAX_FILENAME`], [`FLAG_CHECKPOINT`],
//! [`FLAG_OUTPUT`]) belong to no layer. `tests/it/layers.rs` fails when a module uses a higher
//! layer, or when the preload crate uses anything but [`transparent`], [`capi`] and [`reentry`].

// `unsafe` lives only in the boundaries: the C API, the MPI wrapper and `sys` (the libc
// calls, as small safe functions); each block says why it is sound (`// SAFETY:`).
#![deny(unsafe_code)]
#![warn(unsafe_op_in_unsafe_fn)]
// Every item reachable from outside the crate says what it is; the rest is `pub(crate)`.
#![warn(missing_docs)]
// The module docs are the design docs and link freely to crate-internal items: read them with
// `cargo doc --document-private-items` (README), where every such link resolves.
#![allow(rustdoc::private_intra_doc_links)]

#[allow(unsafe_code)]
pub mod capi;
pub(crate) mod checksum;
#[allow(unsafe_code)]
pub(crate) mod comm;
pub(crate) mod config;
pub(crate) mod desc;
pub(crate) mod error;
pub mod events;
pub mod identity;
pub(crate) mod log;
pub mod ops;
pub mod paths;
pub mod persist;
pub(crate) mod redundancy;
pub mod reentry;
pub(crate) mod runtime;
pub mod state;
#[allow(unsafe_code)]
mod sys;

// the log macros, usable as `crate::scr_error!` from every module
pub(crate) use log::{scr_debug, scr_error, scr_warn};
pub mod transfer;
pub mod transparent;

/// The version string `SCR_Get_version` reports.
pub const VERSION: &str = concat!("scr-rs ", env!("CARGO_PKG_VERSION"));

/// The SCR API version this library implements: what `scr.h`'s `SCR_VERSION` leads with, what
/// pkg-config and the CMake package report (so a build that requires SCR 3 accepts it). The
/// implementation's own version is [`VERSION`].
pub const API_VERSION: &str = "3.0";

/// Longest path (including the terminating NUL) the C API hands back, as `SCR_MAX_FILENAME`.
pub const MAX_FILENAME: usize = 1024;

/// Dataset flag `SCR_FLAG_CHECKPOINT` of `scr.h`: the dataset is a checkpoint, which a restart
/// may load (a crate-root constant, usable by every layer).
pub const FLAG_CHECKPOINT: i32 = 1;
/// Dataset flag `SCR_FLAG_OUTPUT` of `scr.h`: the dataset is output, which must reach the
/// prefix (a crate-root constant, usable by every layer).
pub const FLAG_OUTPUT: i32 = 2;

#[cfg(test)]
mod tests {
    #[test]
    fn scr_h_reports_the_api_and_crate_versions() {
        let want = format!("#define SCR_VERSION \"{} ({})\"", super::API_VERSION, super::VERSION);
        assert!(include_str!("../include/scr.h").contains(&want), "include/scr.h must say {want}");
    }
}
