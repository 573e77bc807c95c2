//! Starting and stopping transparent mode, and the process-wide state every call consults.
//!
//! [`start`] runs once, right after the application's `MPI_Init*` succeeded: `SCR_Init` in
//! transparent mode (rebuild, fetch), the restart, the communicator of the sync points, the
//! table of cached files; then routing begins. [`finish`] runs in `MPI_Finalize` before the
//! real one: the last sync point, then `SCR_Finalize`. Files closed after that (or still
//! pending at process exit, [`at_exit`]) go to their prefix paths.
//!
//! Before [`start`], after [`finish`], in processes that never initialise MPI, in forked
//! children and while the library itself works on a thread ([`crate::reentry`]), routing is
//! off and every call passes. Lock order: the sync state, then the table; the runtime is
//! called with the table held, and the runtime never calls back into this module.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::prefix::{BaseFn, PrefixPaths};
use super::table::Table;
use crate::config::patterns::PatternSet;
use crate::reentry::Inside;
use crate::{scr_debug, scr_error, scr_warn};

/// The routing setup of this process, fixed at [`start`].
pub struct Session {
    pub rank: u32,
    pid: u32,
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
            pid: std::process::id(),
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

    /// Whether this is the process that started (not a fork or vfork child, which shares or
    /// copies this memory but must not act on it).
    pub fn is_owner(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Where this rank's pending copy of `rel` lives, its directory created.
    pub fn make_pending(&self, rel: &std::path::Path) -> std::io::Result<PathBuf> {
        let cache = self.pending.join(rel);
        if let Some(parent) = cache.parent() {
            std::fs::create_dir_all(parent)?;
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
}

static SESSION: OnceLock<Session> = OnceLock::new();
/// Files are routed (between [`start`] and [`finish`]).
static LIVE: AtomicBool = AtomicBool::new(false);
/// [`finish`] ran: late closes send pending files to the prefix.
static FINISHED: AtomicBool = AtomicBool::new(false);
static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
/// A process started by a rank: its read-only session, if the rank published a view.
static CHILD: OnceLock<Option<Session>> = OnceLock::new();

/// The file table.
pub(super) fn table() -> MutexGuard<'static, Table> {
    TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The file table for a call on a path: in a rank, what its children removed is absorbed
/// first, so a path a child removed is gone.
pub(super) fn table_now() -> MutexGuard<'static, Table> {
    let mut t = table();
    if let Some(s) = SESSION.get().filter(|s| s.is_owner()) {
        super::view::absorb(s, &mut t, false);
    }
    t
}

/// This process's session as a child of a rank (loaded on first use; never for the library's
/// own calls, nor in a process that ran transparent mode itself).
fn child() -> Option<&'static Session> {
    // (hooks may run before the front end read the environment: nothing is decided then)
    if crate::reentry::inside() || SESSION.get().is_some() || !super::view::inherited_any() {
        return None;
    }
    CHILD
        .get_or_init(|| {
            let (s, files) = super::view::load()?;
            TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner()).set_committed(files);
            Some(s)
        })
        .as_ref()
}

/// The session, if this process routes files now and the caller is the application (not the
/// library on this thread) and the application has not taken the dataset boundaries over.
/// This gate is an atomic load or two; the owner check costs a system call and is made
/// only for paths that concern the prefix.
#[inline]
pub fn routing() -> Option<&'static Session> {
    if !LIVE.load(Ordering::Relaxed) {
        return child();
    }
    if crate::reentry::inside() || crate::runtime::application_controls_output() {
        return None;
    }
    SESSION.get()
}

/// The first test of every path call (no allocation, no lock): may `path` concern
/// transparent mode now? An absolute path outside the prefix is judged on its bytes first;
/// then routing must be on (see [`routing`]).
#[inline]
pub fn concerns(path: &std::ffi::CStr) -> bool {
    let Some(s) = SESSION.get().or_else(child) else { return false };
    let b = path.to_bytes();
    (b.first() != Some(&b'/') || s.prefix.may_contain(b, None)) && routing().is_some()
}

/// The session for bookkeeping that continues after [`finish`] (late closes), in the
/// owning process only.
pub fn owner() -> Option<&'static Session> {
    if crate::reentry::inside() {
        return None;
    }
    SESSION.get().filter(|s| s.is_owner())
}

pub(super) fn finished() -> bool {
    FINISHED.load(Ordering::SeqCst)
}

/// Start transparent mode (collective, right after the application's `MPI_Init*`
/// succeeded). `Err`: the run must stop (the message says why); it has been printed.
pub fn start(base: BaseFn) -> Result<(), String> {
    if SESSION.get().is_some() {
        return Ok(());
    }
    let _inside = Inside::enter();
    // An unmodified application cannot call SCR_Should_exit: honour halt conditions by
    // ending the run after the checkpoint that meets them, unless configured otherwise.
    if crate::config::scr_config("SCR_HALT_EXIT", false).ok().flatten().is_none() {
        let _ = crate::config::scr_config("SCR_HALT_EXIT=1", false);
    }
    match crate::runtime::init_as(crate::runtime::Mode::Transparent) {
        Ok(true) => {}
        // SCR_ENABLE=0: no session, so the application runs as without the preload
        Ok(false) => return Ok(()),
        Err(e) => {
            let msg =
                format!("transparent mode cannot start: {e}; aborting the run (unset LD_PRELOAD to run without SCR)");
            scr_error!("{msg}");
            return Err(msg);
        }
    }
    let setup = match crate::runtime::transparent_setup() {
        Ok(s) => s,
        Err(e) => {
            scr_error!("transparent mode: {e}");
            return Ok(());
        }
    };
    let compile = |specs| {
        PatternSet::compile(specs).map_err(|e| {
            scr_error!("{e}");
            e.to_string()
        })
    };
    let (patterns, shared) = (compile(&setup.patterns)?, compile(&setup.shared)?);
    if patterns.is_empty() && setup.rank == 0 {
        scr_warn!(
            "transparent mode: no checkpoint patterns are configured (PRELOAD= entries or SCR_PRELOAD_PATTERNS), so no file is routed to cache"
        );
    }
    match crate::runtime::restart_auto() {
        Ok(Some(name)) if setup.rank == 0 => scr_debug!(1, "transparent mode: restarting from {name}"),
        Ok(_) => {}
        Err(e) => scr_error!("transparent mode: restart: {e}"),
    }
    super::sync::setup();
    super::sync::refresh_committed(&mut table());
    if setup.rank == 0 {
        scr_debug!(
            1,
            "transparent mode: {} pattern(s) under {}, pending files in {}",
            patterns.len(),
            setup.prefix.path.display(),
            setup.pending.display()
        );
    }
    let (view, journal) = super::view::paths(&setup.pending, setup.rank);
    let session = Session {
        rank: setup.rank,
        pid: std::process::id(),
        prefix: PrefixPaths::from(setup.prefix.clone()),
        pending: setup.pending.join(setup.rank.to_string()),
        patterns,
        shared,
        halt_exit: setup.halt_exit,
        base,
        child: false,
        view: Some(view.clone()),
        journal,
    };
    if SESSION.set(session).is_ok() {
        if let Some(s) = SESSION.get() {
            super::sync::recover(s);
            super::view::publish(s, &table());
        }
        // the processes this rank starts inherit it (MPI_Init runs before the application
        // starts threads that could read the environment meanwhile)
        std::env::set_var(super::view::ENV.to_str().unwrap_or_default(), &view);
        LIVE.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// `MPI_Finalize`, before the real one: the last sync point (files closed since the last
/// barrier or allreduce become datasets, flushed per the configuration), then `SCR_Finalize`
/// (its own flush rules). No MPI call of the library follows.
pub fn finish() {
    let sync = {
        let _inside = Inside::enter();
        if crate::runtime::mode() != Some(crate::runtime::Mode::Transparent) || FINISHED.load(Ordering::SeqCst) {
            return;
        }
        SESSION.get().is_some() && !crate::runtime::application_controls_output()
    };
    // outside the guard: the sync point acts for the application (it enters the guard
    // itself), so files closed since the last barrier become datasets here
    if sync {
        super::sync::point(true);
    }
    stop();
}

/// End routing and run `SCR_Finalize` (also before a halt exit).
pub fn stop() {
    let _inside = Inside::enter();
    LIVE.store(false, Ordering::SeqCst);
    if FINISHED.swap(true, Ordering::SeqCst) {
        return;
    }
    super::sync::teardown();
    if let Err(e) = crate::runtime::finalize() {
        scr_error!("transparent mode: ending SCR in MPI_Finalize: {e}");
    }
}

/// Process exit (the front end flushed stdio first): after [`finish`], pending files go to
/// their prefix paths; without it they stay pending (they never became a dataset; the next
/// run clears them) and the process says so.
pub fn at_exit() {
    let Some(s) = owner() else { return };
    let _inside = Inside::enter();
    let pending = table().all_pending();
    if pending.is_empty() {
        return;
    }
    if finished() {
        for p in &pending {
            super::calls::materialize(&p.cache, &s.prefix.join(&p.rel), p.writers == 0);
        }
    } else if crate::runtime::mode().is_some() {
        scr_warn!(
            "rank {}: the process exits without MPI_Finalize; {} file(s) written since the last complete dataset stay in {} and are not a dataset",
            s.rank,
            pending.len(),
            s.pending.display()
        );
    }
}
