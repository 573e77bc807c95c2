//! Starting and stopping transparent mode: the top floor, which the front end's MPI hooks and
//! its exit handler call.
//!
//! [`start`] runs once, right after the application's `MPI_Init*` succeeded: `SCR_Init` in
//! transparent mode (rebuild, fetch), the restart, the communicator of the sync points, the
//! table of cached files, the recovery of files a killed run left pending; then routing
//! begins ([`super::state`]). [`finish`] runs in `MPI_Finalize` before the real one: the last
//! sync point, then `SCR_Finalize` ([`stop`]). Files closed after that (or still pending at
//! process exit, [`at_exit`]) go to their prefix paths.

use super::prefix::{BaseFn, PrefixPaths};
use super::session::Session;
use super::{state, sync, view};
use crate::config::patterns::PatternSet;
use crate::reentry::Inside;
use crate::{scr_debug, scr_error, scr_warn};

/// Why transparent mode could not start: the run must stop, since a run without it would
/// write its checkpoints nowhere safe. [`start`] has printed it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `SCR_Init` in transparent mode failed (configuration, cache, the prefix's lock, ...).
    #[error("transparent mode cannot start: {0}; aborting the run (unset LD_PRELOAD to run without SCR)")]
    Init(#[source] crate::error::Error),
    /// A checkpoint pattern that does not compile (the message names its file and line, or
    /// the variable).
    #[error("{0}")]
    Pattern(#[source] crate::config::ConfigError),
}

/// Start transparent mode (collective, right after the application's `MPI_Init*`
/// succeeded): `SCR_Init`, the patterns, the restart, the sync points' communicator, the
/// session, the recovery of what a killed run left pending, routing. `Err`: the run must stop;
/// the message has been printed.
pub fn start(base: BaseFn) -> Result<(), StartError> {
    if state::session().is_some() {
        return Ok(());
    }
    let _inside = Inside::enter();
    let t0 = std::time::Instant::now();
    let Some(setup) = init()? else { return Ok(()) };
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
    sync::setup();
    sync::setup_board(&setup.pending);
    // every rank's files of the checkpoints in cache, for the others to see
    if let Err(e) = crate::runtime::share_listing() {
        scr_warn!("transparent mode: other ranks' cached files are not visible to this rank: {e}");
    }
    state::refresh_committed(&mut state::table());
    // this rank's files of the checkpoints in cache count as written under their names: a
    // restarted run that writes them again rewrites in place (Quantum ESPRESSO's
    // `restart_mode='restart'`), it does not grow
    for f in crate::runtime::cached_files().unwrap_or_default() {
        super::naming::seen(&f.name, std::iter::once(f.rel.to_string_lossy().as_ref()));
    }
    if setup.rank == 0 {
        scr_debug!(
            1,
            "transparent mode: {} pattern(s) under {}, pending files in {}",
            patterns.len(),
            setup.prefix.path.display(),
            setup.pending.display()
        );
    }
    go_live(setup, patterns, shared, base);
    // (timing starts in go_live: the start is counted from here)
    if super::timing::enabled() {
        super::timing::record(super::timing::START, Some(t0));
    }
    Ok(())
}

/// `SCR_Init` in transparent mode and what the session is made of; `None` when SCR is
/// disabled (`SCR_ENABLE=0`) or the setup cannot be read (said): the application then runs
/// as without the preload.
fn init() -> Result<Option<crate::runtime::TransparentSetup>, StartError> {
    // An unmodified application cannot call SCR_Should_exit: honour halt conditions by
    // ending the run after the checkpoint that meets them, unless configured otherwise.
    if crate::config::scr_config("SCR_HALT_EXIT", false).ok().flatten().is_none() {
        let _ = crate::config::scr_config("SCR_HALT_EXIT=1", false);
    }
    match crate::runtime::init_as(crate::runtime::Mode::Transparent) {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(e) => {
            let e = StartError::Init(e);
            scr_error!("{e}");
            return Err(e);
        }
    }
    match crate::runtime::transparent_setup() {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            scr_error!("transparent mode: {e}");
            Ok(None)
        }
    }
}

/// The compiled pattern set of `specs` (an error is printed).
fn compile(specs: &[crate::config::patterns::PatternSpec]) -> Result<PatternSet, StartError> {
    PatternSet::compile(specs).map_err(|e| {
        scr_error!("{e}");
        StartError::Pattern(e)
    })
}

/// This rank's session made and set; then what a killed run left pending is recovered, the
/// view published for the processes the rank starts, and routing begins.
fn go_live(setup: crate::runtime::TransparentSetup, patterns: PatternSet, shared: PatternSet, base: BaseFn) {
    let (view, journal) = view::paths(&setup.pending, setup.rank);
    let session = Session {
        rank: setup.rank,
        pid: crate::sys::pid(),
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
    super::timing::enable(setup.timing);
    if let Some(s) = state::set_session(session) {
        sync::recover(s);
        view::publish(s, &state::table());
        // the processes this rank starts inherit it (MPI_Init runs before the application
        // starts threads that could read the environment meanwhile)
        std::env::set_var(view::ENV.to_str().unwrap_or_default(), &view);
        state::go_live();
    }
}

/// `MPI_Finalize`, before the real one: the last sync point (files closed since the last
/// barrier or allreduce become datasets, flushed per the configuration), then `SCR_Finalize`
/// (its own flush rules). No MPI call of the library follows.
pub fn finish() {
    let sync = {
        let _inside = Inside::enter();
        if crate::runtime::mode() != Some(crate::runtime::Mode::Transparent) || state::finished() {
            return;
        }
        state::session().is_some() && !crate::runtime::application_controls_output()
    };
    // outside the guard: the sync point acts for the application (it enters the guard
    // itself), so files closed since the last barrier become datasets here
    if sync {
        sync::point(true);
    }
    stop();
}

/// End routing and run `SCR_Finalize` (also before a halt exit).
pub fn stop() {
    let _inside = Inside::enter();
    if state::end_routing() {
        return;
    }
    let comm = sync::teardown();
    let t0 = super::timing::start();
    if let Err(e) = crate::runtime::finalize() {
        scr_error!("transparent mode: ending SCR in MPI_Finalize: {e}");
    }
    super::timing::record(super::timing::FINALIZE, t0);
    // (after SCR_Finalize, so that its flushes count; MPI is still initialised)
    if let Some(comm) = &comm {
        super::timing::report(comm);
    }
}

/// Process exit (the front end flushed stdio first): after [`finish`], pending files go to
/// their prefix paths; without it they stay pending (they never became a dataset; the next
/// run clears them) and the process says so.
pub fn at_exit() {
    let Some(s) = state::owner() else { return };
    let _inside = Inside::enter();
    let pending = state::table().all_pending();
    if pending.is_empty() {
        return;
    }
    if state::finished() {
        for p in &pending {
            super::plain::materialize(&p.cache, &s.prefix.join(&p.rel), p.writers == 0);
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
