//! The runtime: one safe function per `SCR_*` call, the phase state machine of user guide
//! figure 3, and the policies (when to flush, when to checkpoint, when to halt).
//!
//! ```text
//!   Uninit --SCR_Init--> Idle --SCR_Finalize--> Finalized
//!                        |  ^
//!    SCR_Start_output    |  |  SCR_Complete_output        (Output phase)
//!    SCR_Start_restart   |  |  SCR_Complete_restart       (Restart phase)
//! ```
//!
//! Collective calls agree before they return: each rank computes its local outcome, the
//! ranks combine it, and all return the same result. The front ends (C API, preload) call
//! these functions and map errors to return codes.

mod adoption;
mod background;
mod catalog;
mod checksums;
mod deletions;
mod elastic;
mod encoder;
mod error;
mod flights;
mod init;
mod joblock;
mod manage;
mod names;
mod output;
mod peers;
mod policy;
mod rebuild;
mod report;
mod restart;
mod restart_files;
mod sets;
mod shared;
mod transparent;
pub mod watchdog;
mod worker;

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use peers::peers_test_file;
pub use peers::{in_prefix, peer_files, share_listing, InPrefix, PeerFile};
pub(crate) use restart::wanted_name;
pub use shared::route_shared_file;
pub use transparent::{
    adopt_output, before_rename_dir, cached_files, count_collectives_from, dataset_places, node_spans_world,
    rename_dir, restart_auto, transparent_setup, Adopt, Adopted, TransparentSetup,
};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::comm::Comm;
use crate::config::Settings;
use crate::desc::Descriptors;
use crate::error::{Error, Result};
use crate::state::filemap::{DatasetRecord, Filemap};
use crate::state::flushfile::{FlushEntry, FlushFile, Location};
use crate::state::layout::Layout;
use crate::transfer::Ctx;
use crate::{scr_error, scr_warn};

pub use crate::{FLAG_CHECKPOINT, FLAG_OUTPUT};

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    Idle,
    Output { id: u64, start: Instant },
    Restart,
}

/// The checkpoint offered to the application for restart.
#[derive(Debug, Clone)]
struct Loaded {
    id: u64,
    name: String,
    /// Files are read in place from the prefix (fetch bypass, global restart).
    in_prefix: bool,
    /// The number of processes that wrote it (another number than this run's: an elastic
    /// restart, read from the prefix).
    writers: u32,
    /// Every file of it and where its copies are (built at `SCR_Start_restart`).
    catalog: Option<catalog::Catalog>,
    /// Files of other ranks copied into this rank's cache for it: (name below the prefix, path).
    received: Vec<(PathBuf, PathBuf)>,
    /// This rank's own files of it: the index of each in its filemap record's files (built at
    /// the first `SCR_Route_file`: a search per route made a restart of N files O(N^2)).
    own: Option<std::collections::HashMap<PathBuf, usize>>,
}

impl Loaded {
    fn new(id: u64, name: &str, in_prefix: bool, writers: u32) -> Loaded {
        Loaded { id, name: name.to_string(), in_prefix, writers, catalog: None, received: Vec::new(), own: None }
    }
}

/// Which front end runs SCR in this process (the runtime records it in [`init_as`]; see
/// [`mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The application calls the API (`libscr.so`, or the preload's exported API).
    Api,
    /// The preload runs SCR for an unmodified application: it acts on `SCR_HALT_EXIT` itself,
    /// at the sync point after a checkpoint, so the application's own post-checkpoint steps
    /// (such as its pointer file) happen first.
    Transparent,
}

/// Everything a running SCR instance holds.
pub struct Runtime {
    mode: Mode,
    world: Comm,
    node: Comm,
    /// This node's number among the run's nodes (by host name), the same on every rank.
    node_id: u32,
    host: String,
    settings: Settings,
    descs: Descriptors,
    layout: Layout,
    filemap: Filemap,
    /// Location of each cached dataset (same on every rank; node leaders persist it).
    flushes: FlushFile,
    phase: Phase,
    dataset_id: u64,
    ckpt_id: u64,
    restart: Option<Loaded>,
    /// A checkpoint the user asked for by name (`SCR_CURRENT`, `SCR_Current`).
    wanted: Option<String>,
    /// Checkpoints whose restart failed in this run.
    failed: Vec<u64>,
    /// Elastic restart (`SCR_RESTART_ELASTIC`): cached checkpoints of other sizes.
    elastic: elastic::Elastic,
    /// Cached datasets whose every file of this rank was checked against its CRC32 in this
    /// run's rebuild (per rank: the restart check of the others still reads theirs).
    verified: Vec<u64>,
    policy: policy::Policy,
    /// The event log (`SCR_LOG_ENABLE`); enabled on rank 0 only.
    events: crate::events::EventLog,
    /// This rank's redundancy set for each descriptor (by descriptor index).
    sets: Vec<Option<crate::redundancy::parallel::SetPlan>>,
    /// Set when a halt condition holds and `SCR_HALT_EXIT=1`: the front end ends the run.
    exit_requested: Option<String>,
    /// The run's start time (rank 0's clock): names each flush attempt and trash directory.
    run_stamp: u64,
    /// The event log for events any rank may see first ([`Runtime::any_rank_log`]).
    any_rank_log: Option<crate::events::EventLog>,
    /// Transparent mode forming a dataset: the datasets it pins in cache, the earlier version
    /// it replaces ([`adoption`]).
    adoption: adoption::Adoption,
    /// Transparent mode: the other ranks' files of the cached datasets ([`peers`]).
    peers: peers::Peers,
    /// Flushes, encodings, checksums, deletions and the watchdog in other threads
    /// ([`background`]).
    bg: background::Background,
    /// Rank 0: the prefix's job lock, held for the whole run ([`joblock`]).
    job_lock: Option<crate::state::joblock::JobLock>,
    /// The collectives of the dataset being formed are counted from this snapshot on
    /// (`SCR_Start_output`, or in transparent mode the sync point that forms it), and
    /// reported with its completion (`SCR_DEBUG=1`).
    tally_from: Option<crate::comm::Tally>,
    /// The names routed in the open output dataset (its record's files, for a lookup that
    /// does not grow with their number).
    routed: std::collections::HashSet<PathBuf>,
    /// Their log beside the filemap, written before the application creates each file.
    routes: crate::state::filemap::RoutesLog,
}

enum State {
    Uninit,
    Running(Box<Runtime>),
    Finalized,
}

static STATE: Mutex<State> = Mutex::new(State::Uninit);

/// The mode of this process's SCR instance, readable without the runtime lock (hooks read it
/// on every call): 0 before `SCR_Init`, then [`Mode`] as a number; it stays after
/// `SCR_Finalize`, since the mode was a property of the process's one run.
static MODE: AtomicU8 = AtomicU8::new(0);
/// Transparent mode only: the application started an output phase itself
/// ([`start_output`]), so dataset boundaries are its own from then on.
static APP_OUTPUT: AtomicBool = AtomicBool::new(false);

/// The mode SCR was started in, if `SCR_Init` (or the preload in `MPI_Init`) started it.
pub fn mode() -> Option<Mode> {
    match MODE.load(Ordering::Acquire) {
        1 => Some(Mode::Api),
        2 => Some(Mode::Transparent),
        _ => None,
    }
}

/// In transparent mode: whether the application took over the dataset boundaries by starting
/// an output phase itself (routing of files then stops for the run).
#[inline]
pub fn application_controls_output() -> bool {
    APP_OUTPUT.load(Ordering::Relaxed)
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f` on the running instance, or explain why there is none.
fn with_rt<T>(call: &'static str, f: impl FnOnce(&mut Runtime) -> Result<T>) -> Result<T> {
    let mut g = lock();
    let result = match &mut *g {
        State::Uninit => return Err(Error::usage(call, "called before SCR_Init")),
        State::Finalized => return Err(Error::usage(call, "called after SCR_Finalize")),
        State::Running(rt) => f(rt),
    };
    let exit = match &mut *g {
        State::Running(rt) => rt.exit_requested.take(),
        _ => None,
    };
    if let Some(reason) = exit {
        halt_exit(g, &reason);
    }
    result
}

/// `SCR_HALT_EXIT`: finish this run cleanly (flush, record the reason, release MPI) and exit.
fn halt_exit(mut g: std::sync::MutexGuard<'static, State>, reason: &str) -> ! {
    if let State::Running(rt) = std::mem::replace(&mut *g, State::Finalized) {
        let mut rt = rt;
        if rt.world.rank() == 0 {
            crate::log::emit("INFO", format_args!("halting the run: {reason} (SCR_HALT_EXIT=1)"));
        }
        rt.events.record("HALT", &[("reason", &reason), ("action", &"exit")]);
        rt.shutdown(reason);
        drop(rt);
    }
    drop(g);
    crate::comm::finalize_mpi();
    std::process::exit(0);
}

/// Whether `SCR_Init` has run and `SCR_Finalize` has not.
pub fn is_initialized() -> bool {
    matches!(&*lock(), State::Running(_))
}

/// The world rank, if initialised (for message routing at the front ends).
pub fn world_rank() -> Option<i32> {
    match &*lock() {
        State::Running(rt) => Some(rt.world.rank()),
        _ => None,
    }
}

/// `SCR_ENABLE=0` made `SCR_Init` bow out: SCR stays off for the rest of the process (the
/// front ends turn every call into a no-op; see [`disabled`]).
static DISABLED: AtomicBool = AtomicBool::new(false);

/// Whether `SCR_Init` found SCR disabled (`SCR_ENABLE=0`).
pub fn disabled() -> bool {
    DISABLED.load(Ordering::Acquire)
}

/// `SCR_ENABLE`, as SCR 3 reads it: the environment first (a `0` there disables SCR without
/// reading any configuration file), then every source, read by rank 0 and broadcast.
fn enabled(mode: Mode) -> Result<bool> {
    if std::env::var("SCR_ENABLE").is_ok_and(|v| crate::config::params::parse_bool(&v) == Some(false)) {
        return Ok(false);
    }
    let world = world_copy(mode);
    let mine = world.rank() != 0 || crate::config::enabled();
    Ok(world.bcast(0, &mine)?)
}

/// A copy of `MPI_COMM_WORLD` for `mode`'s front end: transparent mode starts inside the
/// application's `MPI_Init` ([`Comm::world_copy_in_init`]), the API at any time
/// ([`Comm::world_dup`]).
fn world_copy(mode: Mode) -> Comm {
    match mode {
        Mode::Transparent => Comm::world_copy_in_init(),
        Mode::Api => Comm::world_dup(),
    }
}

/// `SCR_Init`: `Ok(false)` if SCR is disabled (`SCR_ENABLE=0`), which touches nothing.
pub fn init() -> Result<bool> {
    init_as(Mode::Api)
}

/// `SCR_Init` run by `mode`'s front end: `Ok(false)` if SCR is disabled (`SCR_ENABLE=0`).
pub fn init_as(mode: Mode) -> Result<bool> {
    let mut g = lock();
    match &*g {
        State::Uninit => {}
        State::Running(_) => {
            return Err(Error::usage("SCR_Init", "called twice; SCR_Init may be called once per process"))
        }
        State::Finalized => {
            return Err(Error::usage("SCR_Init", "called after SCR_Finalize; SCR_Init may be called once per process"))
        }
    }
    if !crate::comm::mpi_active() {
        return Err(Error::usage("SCR_Init", "MPI is not initialised: call MPI_Init before SCR_Init"));
    }
    if disabled() {
        return Ok(false);
    }
    if !enabled(mode)? {
        DISABLED.store(true, Ordering::Release);
        return Ok(false);
    }
    let rt = Runtime::start(mode)?;
    MODE.store(if mode == Mode::Api { 1 } else { 2 }, Ordering::Release);
    *g = State::Running(Box::new(rt));
    let exit = match &mut *g {
        State::Running(rt) => rt.exit_requested.take(),
        _ => None,
    };
    if let Some(reason) = exit {
        halt_exit(g, &reason);
    }
    Ok(true)
}

/// `SCR_Finalize`.
pub fn finalize() -> Result<()> {
    let mut g = lock();
    match std::mem::replace(&mut *g, State::Finalized) {
        State::Running(mut rt) => {
            rt.stop_watchdog();
            let r = rt.finalize_checked();
            rt.shutdown(crate::state::halt::FINALIZE_REASON);
            r
        }
        State::Uninit => {
            *g = State::Uninit;
            Err(Error::usage("SCR_Finalize", "called before SCR_Init"))
        }
        State::Finalized => Err(Error::usage("SCR_Finalize", "called twice")),
    }
}

pub fn need_checkpoint() -> Result<bool> {
    with_rt("SCR_Need_checkpoint", |rt| rt.need_checkpoint())
}

/// `SCR_Start_output`, called by the application. In transparent mode this hands the dataset
/// boundaries to the application for the rest of the run.
pub fn start_output(name: Option<&str>, flags: i32) -> Result<()> {
    if mode() == Some(Mode::Transparent) {
        APP_OUTPUT.store(true, Ordering::Relaxed);
    }
    with_rt("SCR_Start_output", |rt| rt.start_output_logged(name, flags))
}

pub fn route_file(name: &str) -> Result<PathBuf> {
    with_rt("SCR_Route_file", |rt| rt.route_file(name))
}

pub fn complete_output(valid: bool) -> Result<bool> {
    with_rt("SCR_Complete_output", |rt| rt.complete_output_logged(valid))
}

pub fn have_restart() -> Result<Option<String>> {
    with_rt("SCR_Have_restart", |rt| rt.have_restart())
}

pub fn start_restart() -> Result<String> {
    with_rt("SCR_Start_restart", |rt| rt.start_restart())
}

/// `SCR_Restart_info`: (processes that wrote the checkpoint, its number of files).
pub fn restart_info() -> Result<(u32, usize)> {
    with_rt("SCR_Restart_info", |rt| rt.restart_info())
}

/// `SCR_Restart_file`: (path in the prefix, writer or -1 for a shared file) of file `i`.
pub fn restart_file(i: i64) -> Result<(PathBuf, i32)> {
    with_rt("SCR_Restart_file", |rt| rt.restart_file(i))
}

pub fn complete_restart(valid: bool) -> Result<bool> {
    with_rt("SCR_Complete_restart", |rt| rt.complete_restart(valid))
}

pub fn should_exit() -> Result<bool> {
    with_rt("SCR_Should_exit", |rt| rt.should_exit())
}

pub fn current(name: &str) -> Result<()> {
    with_rt("SCR_Current", |rt| rt.set_current(name))
}

pub fn delete(name: &str) -> Result<()> {
    with_rt("SCR_Delete", |rt| rt.delete(name))
}

pub fn drop_entry(name: &str) -> Result<()> {
    with_rt("SCR_Drop", |rt| rt.drop_entry(name))
}

/// `SCR_Config`: allowed before `SCR_Init` (set, unset, query) and after (query only).
pub fn config(text: &str) -> Result<crate::config::Reply> {
    crate::config::scr_config_reply(text, is_initialized()).map_err(Error::from)
}

impl Runtime {
    fn ctx(&self) -> Ctx<'_> {
        Ctx { world: &self.world, layout: &self.layout, settings: &self.settings }
    }

    fn rank0(&self) -> bool {
        self.world.rank() == 0
    }

    /// Combine a local outcome: every rank gets `Ok` only if all ranks succeeded, otherwise
    /// the same summary error naming the failing ranks.
    fn agree<T>(&self, what: &str, local: Result<T>) -> Result<T> {
        if self.world.all_true(local.is_ok()) {
            return local;
        }
        let msg = local.as_ref().err().map(|e| e.to_string());
        Err(Error::Collective(self.ctx().summarize_failures(what, msg)))
    }

    /// [`Runtime::agree`] when every rank already knows whether any rank failed (`failed`,
    /// from a reduction the caller made): no collective when none did.
    fn agree_known<T>(&self, what: &str, local: Result<T>, failed: bool) -> Result<T> {
        if !failed {
            return local;
        }
        let msg = match &local {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        Err(Error::Collective(self.ctx().summarize_failures(what, msg)))
    }

    /// How messages name the step of API call `call`: the call in API mode; in transparent
    /// mode, where the preload makes the call and the application never did, what it does.
    pub(super) fn call_name(&self, call: &'static str) -> &'static str {
        if self.mode != Mode::Transparent {
            return call;
        }
        match call {
            "SCR_Init" => "starting SCR in MPI_Init",
            "SCR_Start_output" => "starting a dataset",
            "SCR_Route_file" => "placing a file in cache",
            "SCR_Route_shared_file" => "recording a shared file",
            "SCR_Complete_output" => "completing a dataset",
            other => other,
        }
    }

    /// Where a dataset's redundancy is encoded when not in the background, as the user knows it.
    pub(super) fn encoding_step(&self) -> &'static str {
        if self.mode == Mode::Transparent {
            "the sync point that completes the dataset (the application's MPI_Barrier or MPI_Allreduce)"
        } else {
            "SCR_Complete_output"
        }
    }

    /// Where flushes SCR still owes are retried, as the user knows it.
    pub(super) fn finalize_name(&self) -> &'static str {
        if self.mode == Mode::Transparent {
            "the end of the run (MPI_Finalize)"
        } else {
            "SCR_Finalize"
        }
    }

    /// Name a phase for "expected" messages.
    fn phase_error(&self, call: &'static str, wanted: &str) -> Error {
        let now = match &self.phase {
            Phase::Idle => "outside any output or restart phase".to_string(),
            Phase::Output { id, .. } => {
                format!("inside the output phase of dataset {id}; call SCR_Complete_output first")
            }
            Phase::Restart => "inside a restart phase; call SCR_Complete_restart first".to_string(),
        };
        Error::usage(call, format!("called {now} (it is valid {wanted})"))
    }

    fn save_filemap(&self) -> Result<()> {
        self.filemap.save_own(&self.layout.filemap(self.world.rank())).map_err(Error::from)
    }

    /// Record (or forget) where a dataset stands; node leaders persist the flush file.
    fn set_location(&mut self, id: u64, loc: Option<Location>) {
        match (loc, self.filemap.datasets.get(&id)) {
            (Some(location), Some(rec)) => {
                self.flushes.datasets.insert(
                    id,
                    FlushEntry {
                        name: rec.desc.name.clone(),
                        location,
                        checkpoint: rec.desc.checkpoint,
                        output: rec.desc.output,
                    },
                );
            }
            (Some(location), None) => {
                if let Some(e) = self.flushes.datasets.get_mut(&id) {
                    e.location = location;
                }
            }
            (None, _) => {
                // (already forgotten: nothing to write)
                if self.flushes.datasets.remove(&id).is_none() {
                    return;
                }
            }
        }
        if self.node.rank() == 0 {
            if let Err(e) = self.flushes.save_by_leader(&self.layout.flush_file()) {
                scr_warn!("cannot update the flush file: {e}");
            }
        }
    }

    fn flushed(&self, id: u64) -> bool {
        self.flushes.location(id) == Some(Location::Pfs)
    }

    /// Flush a cached dataset (collective) and record the outcome.
    fn flush_dataset(&mut self, id: u64) -> Result<()> {
        let Some(mut rec) = self.filemap.datasets.get(&id).cloned() else {
            return Err(Error::Other(format!("dataset {id} is not in cache")));
        };
        self.watchdog_wrote();
        self.set_location(id, Some(Location::Flushing));
        let (t0, bytes, files) = (Instant::now(), rec.desc.size, rec.desc.files);
        self.events.flush_start(id, &rec.desc.name, bytes, "sync");
        let r = crate::transfer::flush::flush(&self.ctx(), &mut rec);
        let secs = t0.elapsed().as_secs_f64();
        match &r {
            Ok(()) => {
                self.events.flush_end(id, &rec.desc.name, bytes, files, secs, "sync");
                self.filemap.datasets.insert(id, rec);
                // The flush is complete and agreed; a local failure to record the CRCs must not
                // make this rank leave the collective path the others are on.
                if let Err(e) = self.save_filemap() {
                    scr_error!("{e}");
                }
                self.set_location(id, Some(Location::Pfs));
            }
            Err(e) => {
                self.events.flush_fail(id, &rec.desc.name, e, "sync");
                self.set_location(id, Some(Location::Cache));
            }
        }
        r
    }

    /// Release everything: finish flushes SCR owes, record why the run stops.
    fn shutdown(&mut self, reason: &str) {
        self.stop_watchdog();
        if self.rank0() {
            let r = crate::state::halt::Halt::update(&self.layout.halt(), |h| {
                if h.exit_reason.is_none() {
                    h.exit_reason = Some(reason.to_string());
                }
            });
            if let Err(e) = r {
                scr_warn!("cannot record the exit reason in the halt file: {e}");
            }
        }
        self.finish_flights();
        self.finish_encodes();
        self.evict_encoded();
        self.finish_checksums();
        self.flush_owed();
        self.finish_deletions();
        self.world.barrier();
        if self.rank0() {
            crate::scr_debug!(1, "this run: {} (rank 0, all of SCR's communicators)", crate::comm::tally());
        }
        self.log_run_end(reason);
        // rank 0: the database rows of this run are written before MPI is released
        self.events.drain();
        // the run is over: another one may use the prefix
        self.job_lock = None;
    }
}

/// Remove this rank's part of a cached dataset (its files and redundancy file) and the
/// directories left empty, without touching the parts of other ranks on the same node.
fn remove_part(rec: &DatasetRecord) {
    for f in rec.cached_paths() {
        let _ = crate::paths::remove_file_if_exists(f);
        if let Some(parent) = f.parent() {
            crate::paths::prune_empty_dirs(parent, rec.dir.parent().unwrap_or(&rec.dir));
        }
    }
}
