//! The routing setup of a process ([`Session`]): its rank, the prefix, its pending area, the
//! patterns that route files, and how a path argument resolves against the prefix. Plain
//! data, fixed at start ([`super::lifecycle::start`]) and held by the process state
//! ([`super::state`]); a process a rank started gets a read-only one ([`super::view`]).

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::prefix::{reserved, BaseFn, PrefixPaths, PATH_MAX};
use crate::config::patterns::PatternSet;

/// The routing setup of this process, fixed at [`super::lifecycle::start`].
pub struct Session {
    pub rank: u32,
    pub(super) pid: u32,
    pub prefix: PrefixPaths,
    /// This rank's pending area.
    pub pending: PathBuf,
    pub patterns: PatternSet,
    /// Files several ranks write (`SCR_PRELOAD_SHARED`).
    pub shared: PatternSet,
    /// End the run at the sync point after a checkpoint that meets a halt condition.
    pub halt_exit: bool,
    pub base: BaseFn,
    /// A process the rank started ([`super::view`]): it reads the rank's cached files and
    /// reports removals, nothing more.
    pub child: bool,
    /// The rank: where it publishes its view for the processes it starts.
    pub view: Option<PathBuf>,
    /// Where children record what they removed.
    pub journal: PathBuf,
}

impl Session {
    /// The session of a process started by rank `rank` (read-only, see [`super::view`]).
    pub(super) fn child(rank: u32, prefix: PrefixPaths, journal: PathBuf, base: BaseFn) -> Session {
        Session {
            rank,
            pid: crate::sys::pid(),
            prefix,
            pending: PathBuf::new(),
            patterns: PatternSet::compile(&[]).expect("an empty pattern list always compiles"),
            shared: PatternSet::compile(&[]).expect("an empty pattern list always compiles"),
            halt_exit: false,
            base,
            child: true,
            view: None,
            journal,
        }
    }

    /// Whether this is the process that started (not a forked child, which copies this memory
    /// but must not act on it). No system call: [`crate::sys::pid`] keeps the id, and forgets it
    /// in a child of `fork`; a `vfork` child, which shares this memory, may only call `exec` or
    /// `_exit` (POSIX), which reach no hook that asks.
    pub fn is_owner(&self) -> bool {
        crate::sys::pid() == self.pid
    }

    /// Where this rank's pending copy of `rel` lives, its directory created.
    pub fn make_pending(&self, rel: &std::path::Path) -> std::io::Result<PathBuf> {
        let cache = self.pending.join(rel);
        if let Some(parent) = cache.parent() {
            // one `mkdir` when the directory exists (an entry there that is not a directory
            // fails the open that follows, with ENOTDIR as in the prefix)
            match std::fs::create_dir(parent) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(parent)?,
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        Ok(cache)
    }

    /// Whether a pattern routes `rel` for this rank.
    pub fn routed(&self, rel: &std::path::Path) -> bool {
        rel.to_str().is_some_and(|r| self.patterns.takes(r, self.rank))
    }

    /// Whether `rel` is a checkpoint file `SCR_PRELOAD_SHARED` declares shared.
    pub fn declared_shared(&self, rel: &std::path::Path) -> bool {
        rel.to_str().is_some_and(|r| self.shared.takes(r, self.rank)) && self.routed(rel)
    }

    /// The path argument relative to the prefix (`""` for the prefix itself), if it is below
    /// it, is not SCR's own ([`reserved`]) and this is the process that routes.
    pub(super) fn resolve(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        self.resolve_any(dirfd, path).filter(|rel| !reserved(rel))
    }

    /// As [`Session::resolve`], SCR's own names included.
    pub(super) fn resolve_any(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        let bytes = path.to_bytes();
        let within = |base: Option<&[u8]>| {
            if !self.prefix.may_contain(bytes, base) || !self.is_owner() {
                return None;
            }
            self.prefix.relative(bytes, base)
        };
        match bytes.first() {
            None => None,
            // (no base directory to read: no buffer to clear)
            Some(b'/') => within(None),
            Some(_) => {
                let mut buf = [0u8; PATH_MAX];
                within((self.base)(dirfd, &mut buf).map(|n| &buf[..n]))
            }
        }
    }

    /// As [`Session::resolve`], for a file below the prefix (not the prefix itself).
    pub(super) fn resolve_file(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        self.resolve(dirfd, path).filter(|rel| !rel.as_os_str().is_empty())
    }

    /// The absolute, normalised form of any path argument.
    pub(super) fn absolute(&self, dirfd: i32, path: &CStr) -> Option<PathBuf> {
        let p = Path::new(OsStr::from_bytes(path.to_bytes()));
        if p.is_absolute() {
            return Some(crate::paths::normalize(p, Path::new("/")));
        }
        let mut buf = [0u8; PATH_MAX];
        let n = (self.base)(dirfd, &mut buf)?;
        Some(crate::paths::normalize(p, Path::new(OsStr::from_bytes(&buf[..n]))))
    }
}
