//! `SCR_Init`: configuration, identity, descriptors, directories, then the restart: keep
//! what survives in cache (newest first, rebuilding or dropping what lost data), check the
//! halt conditions, and load the newest checkpoint complete in cache or in the prefix
//! (`restart.rs`).

use std::time::Instant;

use super::{policy::Policy, Mode, Phase, Runtime};
use crate::comm::Comm;
use crate::config::{self, ConfigError, Settings};
use crate::desc::Descriptors;
use crate::error::{Error, Result};
use crate::events::EventLog;
use crate::identity::{self, JobId};
use crate::paths::{self, Prefix};
use crate::state::filemap::Filemap;
use crate::state::flushfile::{FlushFile, Location};
use crate::state::halt::{Halt, FINALIZE_REASON};
use crate::state::index::Index;
use crate::state::layout::Layout;
use crate::{log, redundancy, scr_debug, scr_error, scr_warn};

/// Rank 0's reading of the user name and the job id, given the prefix.
type Identify = Box<dyn FnOnce(&std::path::Path) -> (String, JobId)>;

/// What `SCR_Init` takes from the process's surroundings: the communicator, the node's name,
/// the configuration and the identity of the user and the job. A real run takes them from MPI
/// and the environment ([`Launch::mpi`]); the in-process tests give their own.
pub(super) struct Launch {
    pub world: Comm,
    /// The node this process runs on (processes with equal names share node-local storage).
    pub host: String,
    /// Read on rank 0 only: the configuration from every source.
    pub config: Box<dyn FnOnce() -> std::result::Result<Settings, ConfigError>>,
    /// Read on rank 0 only: the user name and the job id, given the prefix.
    pub identity: Identify,
    /// Simulated nodes: node-local directories go below this one (see `Layout::node_root`).
    pub node_root: Option<std::path::PathBuf>,
}

impl Launch {
    /// A real run: a copy of `MPI_COMM_WORLD` ([`super::world_copy`]), the host name, every
    /// configuration source, the environment's user and job.
    pub(super) fn mpi(mode: super::Mode) -> Launch {
        Launch {
            world: super::world_copy(mode),
            host: identity::host_name(),
            config: Box::new(|| config::resolve().and_then(|r| Settings::from_resolved(&r, paths::cwd()))),
            identity: Box::new(|prefix| (identity::user_name(), identity::job_id(prefix))),
            node_root: None,
        }
    }
}

impl Runtime {
    /// Build a running instance (collective over `MPI_COMM_WORLD`).
    pub(super) fn start(mode: Mode) -> Result<Runtime> {
        Runtime::start_with(mode, Launch::mpi(mode))
    }

    /// Build a running instance from `launch` (collective over its communicator): agree on
    /// the configuration, identify the job and the nodes, then open the run.
    pub(super) fn start_with(mode: Mode, launch: Launch) -> Result<Runtime> {
        let t0 = Instant::now();
        let Launch { world, host, config, identity: who, node_root } = launch;
        log::set_identity(world.rank(), &host);
        let (settings, descs) = agree_settings(&world, config)?;
        let (layout, job) = identify(&world, &settings, who, node_root.as_deref())?;
        // the nodes numbered by host name at rank 0, which keeps every rank's number for the
        // sets of failure group NODE
        let (node_id, nnodes, nodes) = world.group_index(0, &host)?;
        let node = world.split(node_id as i32, world.rank());
        if world.rank() == 0 {
            report_job(&settings, &layout, &job, nnodes);
        }
        let mut rt =
            Runtime::new(mode, Parts { world, node, node_id: node_id as u32, host, settings, descs, layout }, t0);
        rt.open_run((nodes.as_deref(), nnodes))?;
        if rt.rank0() {
            scr_debug!(1, "{} done in {:.3} s on {}", rt.call_name("SCR_Init"), t0.elapsed().as_secs_f64(), rt.host);
        }
        rt.log_run_start(nnodes as i32);
        rt.policy.compute_started();
        rt.arm_watchdog();
        Ok(rt)
    }

    /// A runtime of `parts` with nothing loaded yet (local).
    fn new(mode: Mode, parts: Parts, t0: Instant) -> Runtime {
        let Parts { world, node, node_id, host, settings, descs, layout } = parts;
        Runtime {
            mode,
            world,
            node,
            node_id,
            host,
            settings,
            descs,
            layout,
            filemap: Filemap::default(),
            flushes: FlushFile::default(),
            phase: Phase::Idle,
            dataset_id: 0,
            ckpt_id: 0,
            restart: None,
            wanted: None,
            failed: Vec::new(),
            elastic: Default::default(),
            verified: Vec::new(),
            policy: Policy::started_at(t0),
            events: crate::events::EventLog::disabled(),
            sets: Vec::new(),
            exit_requested: None,
            bg: Default::default(),
            run_stamp: 0,
            any_rank_log: None,
            adoption: Default::default(),
            peers: Default::default(),
            job_lock: None,
            tally_from: None,
            routed: Default::default(),
            routes: Default::default(),
        }
    }

    /// The run's stamp, the prefix's lock, the directories, the event log, the redundancy
    /// sets (`nodes`: every rank's node number on rank 0, and the number of nodes) and
    /// encoder, then what to restart from (collective).
    fn open_run(&mut self, nodes: (Option<&[usize]>, usize)) -> Result<()> {
        self.run_stamp = self.world.bcast(0, &(identity::now_usecs() as u64))?;
        self.lock_prefix()?;
        self.make_directories()?;
        if self.rank0() {
            self.events = EventLog::for_run(&self.settings, &self.layout.scr_dir(), &self.layout.jobid, &self.host);
        }
        self.form_sets(nodes)?;
        self.setup_encoder()?;
        self.restore()
    }

    /// The prefix's `.scr` directory (rank 0), the control and cache directories (each node's
    /// leader, private to the user); failures anywhere fail `SCR_Init` everywhere.
    fn make_directories(&mut self) -> Result<()> {
        // transparent mode's pending area: the world ranks of this node keep theirs
        let on_node: Option<Vec<i32>> = (!self.settings.preload.is_empty() || self.mode == super::Mode::Transparent)
            .then(|| self.node.allgather(&self.world.rank()))
            .transpose()?;
        let local = (|| -> Result<()> {
            if self.rank0() {
                let d = self.layout.scr_dir();
                std::fs::create_dir_all(&d).map_err(|e| Error::io("create prefix directory", &d, e))?;
            }
            if self.node.rank() == 0 {
                let user_dir = self.layout.cntl_dir.parent().expect("control dir has a parent");
                paths::ensure_private_dir(user_dir)?;
                paths::ensure_private_dir(&self.layout.cntl_dir)?;
                for st in &self.descs.stores {
                    if !st.enabled || !self.descs.reddescs.iter().any(|d| d.store == st.path && !d.bypass) {
                        continue;
                    }
                    let dir = self.layout.store_dir(&st.path);
                    paths::ensure_private_dir(dir.parent().expect("store dir has a parent"))?;
                    paths::ensure_private_dir(&dir)?;
                }
                self.sweep_trash();
                if let Some(on_node) = &on_node {
                    self.prepare_pending(on_node)?;
                }
            }
            Ok(())
        })();
        self.agree(&format!("{}: creating SCR directories", self.call_name("SCR_Init")), local)?;
        self.node.barrier();
        self.peers.set_node(on_node.unwrap_or_default());
        Ok(())
    }

    /// Find what to restart from: cache first, then the prefix (collective). Stages: merge
    /// the flush records, load this rank's filemap, continue the ids, purge on request, keep
    /// what survives in cache, check the halt conditions, then load a checkpoint.
    fn restore(&mut self) -> Result<()> {
        self.merge_flush_files()?;
        let (fm_d, fm_c) = self.load_filemap()?;
        let index = self.continue_ids(fm_d, fm_c)?;
        self.record_landed(&index)?;
        self.purge(&index);
        self.scan_cache()?;
        self.report_other_sizes();
        if self.halts_at_init() {
            return Ok(());
        }
        self.wanted = self.settings.current.clone();
        if let Some(name) = self.wanted.clone() {
            self.choose_current(&name)?;
        }
        self.load_checkpoint()?;
        self.after_load()
    }

    /// The flush files of all nodes merged (a dataset counts as flushed if any node saw its
    /// flush complete), so every rank decides alike even if a node was lost (collective).
    fn merge_flush_files(&mut self) -> Result<()> {
        let mine = if self.node.rank() == 0 {
            FlushFile::load(&self.layout.flush_file()).unwrap_or_else(|e| {
                scr_warn!("{e}; this node's record of flushed datasets is ignored");
                FlushFile::default()
            })
        } else {
            FlushFile::default()
        };
        let merged = self.world.gather(0, &mine)?.map(|all| {
            let mut out = FlushFile::default();
            for f in all {
                for (id, e) in f.datasets {
                    match out.datasets.get(&id) {
                        Some(have) if have.location == Location::Pfs => {}
                        _ => {
                            out.datasets.insert(id, e);
                        }
                    }
                }
            }
            out
        });
        self.flushes = self.world.bcast(0, &merged.unwrap_or_default())?;
        Ok(())
    }

    /// This rank's filemap, with its background encodings and checksums adopted, its
    /// deletions resumed and (`SCR_DISTRIBUTE`) its datasets distributed. Returns the largest
    /// dataset and checkpoint ids it held before (datasets being deleted count: their
    /// directories may still exist).
    fn load_filemap(&mut self) -> Result<(u64, u64)> {
        let fm_path = self.layout.filemap(self.world.rank());
        self.filemap = Filemap::load(&fm_path).unwrap_or_else(|e| {
            scr_error!("{e}; the cached datasets of this rank are unusable");
            Filemap::default()
        });
        self.adopt_encodings();
        self.adopt_checksum_files();
        let ids = self.filemap.max_ids();
        self.resume_deletions()?;
        if self.settings.distribute && !self.settings.cache_purge {
            self.distribute()?;
        }
        Ok(ids)
    }

    /// Continue ids after everything known, in cache (`fm_d`, `fm_c`: this rank's before it
    /// distributed) or in the prefix (collective). Returns rank 0's index (empty elsewhere).
    fn continue_ids(&mut self, fm_d: u64, fm_c: u64) -> Result<Index> {
        let index = if self.rank0() { self.load_index() } else { Index::default() };
        let (ix_d, ix_c) = self.world.bcast(0, &index.max_ids())?;
        let (fm_d, fm_c) = (fm_d.max(self.filemap.max_ids().0), fm_c.max(self.filemap.max_ids().1));
        self.dataset_id = (self.world.max_i64(fm_d as i64) as u64).max(ix_d);
        self.ckpt_id = (self.world.max_i64(fm_c as i64) as u64).max(ix_c);
        Ok(index)
    }

    /// A background flush that completed in the prefix after its run stopped watching
    /// (killed, or exited without SCR_Finalize) is flushed: the index is the authority
    /// (collective; rank 0 decides).
    fn record_landed(&mut self, index: &Index) -> Result<()> {
        let landed: Vec<u64> = self
            .flushes
            .datasets
            .iter()
            .filter(|(id, e)| {
                e.location != Location::Pfs
                    && index.datasets.get(id).is_some_and(|ix| ix.complete && ix.desc.name == e.name)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in self.world.bcast(0, &landed)? {
            if self.rank0() {
                scr_debug!(1, "dataset {id} reached the prefix after its run ended; recorded as flushed");
            }
            self.set_location(id, Some(Location::Pfs));
        }
        Ok(())
    }

    /// `SCR_PREFIX_PURGE` (rank 0, from `index`), and `SCR_CACHE_PURGE` or
    /// `SCR_DISTRIBUTE=0` (collective: this run's cached datasets leave).
    fn purge(&mut self, index: &Index) {
        if self.settings.prefix_purge && self.rank0() {
            for id in index.datasets.keys() {
                if let Err(e) = crate::transfer::flush::delete_from_prefix(&self.layout, *id) {
                    scr_warn!("SCR_PREFIX_PURGE: {e}");
                }
            }
        }
        if self.settings.cache_purge || !self.settings.distribute {
            let why = if self.settings.cache_purge { "SCR_CACHE_PURGE=1" } else { "SCR_DISTRIBUTE=0" };
            let ids: Vec<u64> =
                self.filemap.datasets.values().filter(|r| self.fits(r.desc.ranks)).map(|r| r.desc.id).collect();
            if self.rank0() && !ids.is_empty() {
                scr_debug!(1, "{why}: deleting {} cached dataset(s)", ids.len());
            }
            self.drop_many(&ids);
        }
    }

    /// The halt file updated for this run (rank 0), and its conditions checked: true when
    /// one holds and `SCR_HALT_EXIT=1` (the run ends; nothing is loaded).
    fn halts_at_init(&mut self) -> bool {
        if self.rank0() {
            let r = Halt::update(&self.layout.halt(), |h| {
                if h.exit_reason.as_deref() == Some(FINALIZE_REASON) {
                    h.exit_reason = None;
                }
                if h.halt_seconds.is_none() && self.settings.halt_seconds > 0 {
                    h.halt_seconds = Some(self.settings.halt_seconds);
                }
            });
            if let Err(e) = r {
                scr_warn!("cannot update the halt file: {e}");
            }
        }
        let Some(reason) = self.halt_reason() else {
            return false;
        };
        if self.rank0() {
            let at = if self.mode == super::Mode::Transparent { "MPI_Init" } else { "SCR_Init" };
            crate::log::emit("INFO", format_args!("halt condition at {at}: {reason}"));
        }
        if self.settings.halt_exit {
            self.exit_requested = Some(reason);
            return true;
        }
        false
    }

    /// `SCR_CURRENT=name`: checked, marked current in the index (rank 0), and the newer
    /// cached datasets deleted (collective).
    fn choose_current(&mut self, name: &str) -> Result<()> {
        self.check_current_name(name)?;
        if self.rank0() {
            let r = Index::update(&self.layout.index(), |ix| {
                if ix.by_name(name).is_some() {
                    ix.current = Some(name.to_string());
                }
            });
            if let Err(e) = r {
                scr_warn!("SCR_CURRENT={name}: cannot set the current marker: {e}");
            }
        }
        self.drop_newer_than_named(name);
        Ok(())
    }

    /// Rank 0's view of the index (rebuilt from the prefix's dataset directories if it was
    /// damaged or lost); an index that cannot be read at all is reported and left as it is.
    pub(super) fn load_index(&self) -> Index {
        Index::load(&self.layout.index()).unwrap_or_else(|e| {
            scr_error!("{e}; no checkpoint can be fetched from the prefix until it can be read");
            Index::default()
        })
    }

    /// Keep each cached dataset that every rank holds with its files at their recorded sizes;
    /// rebuild or delete the rest, saying why. (CRC32s are checked when a dataset is chosen
    /// for restart, see `load_cached`.) Datasets written by another number of processes are
    /// left alone: they belong to a run of that size.
    fn scan_cache(&mut self) -> Result<()> {
        let mut bound = i64::MAX;
        loop {
            let mine = self
                .filemap
                .datasets
                .values()
                .rev()
                .filter(|r| self.fits(r.desc.ranks))
                .map(|r| r.desc.id as i64)
                .find(|&i| i < bound)
                .unwrap_or(-1);
            let id = self.world.max_i64(mine);
            if id < 0 {
                break;
            }
            bound = id;
            let id = id as u64;
            let check = match self.filemap.datasets.get(&id) {
                None => Err("holds no record of it".to_string()),
                Some(rec) => redundancy::check_local(rec, None, self.settings.file_buf_size).map_err(|e| e.to_string()),
            };
            let err = check.err();
            if self.world.all_true(err.is_none()) {
                scr_debug!(2, "cached dataset {id} is intact on this rank");
                continue;
            }
            self.rebuild_or_drop(id, err)?;
        }
        // Datasets SCR owes the prefix (output never flushed, a flush cut short) go now.
        let owed: Vec<u64> = self
            .filemap
            .datasets
            .values()
            .filter(|r| r.desc.output && !self.flushed(r.desc.id) && self.fits(r.desc.ranks))
            .map(|r| r.desc.id)
            .collect();
        for id in owed {
            if let Err(e) = self.flush_dataset(id) {
                if self.rank0() {
                    scr_error!("{e}");
                }
            }
        }
        Ok(())
    }

    /// With a named checkpoint requested, newer cached datasets are deleted (user guide 2.5.6).
    pub(super) fn drop_newer_than_named(&mut self, name: &str) {
        let target = self.filemap.by_name(name).map(|r| r.desc.id as i64).unwrap_or(-1);
        let target = self.world.max_i64(target);
        if target < 0 {
            return;
        }
        let newer: Vec<u64> = self
            .filemap
            .datasets
            .values()
            .filter(|r| r.desc.id as i64 > target && self.fits(r.desc.ranks))
            .map(|r| r.desc.id)
            .collect();
        self.drop_many(&newer);
    }

    /// `SCR_FLUSH_ON_RESTART` and `SCR_GLOBAL_RESTART`: put the loaded checkpoint in the prefix.
    fn after_load(&mut self) -> Result<()> {
        let Some(loaded) = self.restart.clone() else {
            return Ok(());
        };
        let want_flush = self.settings.flush_on_restart || self.settings.global_restart;
        if want_flush && !self.flushed(loaded.id) && self.filemap.datasets.contains_key(&loaded.id) {
            if let Err(e) = self.flush_dataset(loaded.id) {
                if self.rank0() {
                    scr_error!("SCR_FLUSH_ON_RESTART: {e}");
                }
                return Ok(());
            }
        }
        if self.settings.global_restart && self.flushed(loaded.id) {
            if let Some(r) = self.restart.as_mut() {
                r.in_prefix = true;
            }
        }
        Ok(())
    }
}

/// What `SCR_Init` agreed on before the runtime exists.
struct Parts {
    world: Comm,
    node: Comm,
    node_id: u32,
    host: String,
    settings: Settings,
    descs: Descriptors,
    layout: Layout,
}

/// Rank 0 reads the configuration and builds the descriptors; every rank runs with its
/// result (collective: two broadcasts). Rank 0 alone prints the warnings.
fn agree_settings(
    world: &Comm,
    config: Box<dyn FnOnce() -> std::result::Result<Settings, ConfigError>>,
) -> Result<(Settings, Descriptors)> {
    let mine: std::result::Result<Settings, ConfigError> =
        if world.rank() == 0 { config() } else { Err(ConfigError { at: String::new(), msg: String::new() }) };
    // Rank 0 alone prints a configuration error (it is the same on every rank).
    let settings = world.bcast(0, &mine)?.map_err(|e| Error::Collective(e.to_string()))?;
    log::set_level(settings.debug);
    let descs = world
        .bcast(0, &(world.rank() == 0).then(|| Descriptors::build(&settings)))?
        .ok_or_else(|| Error::Collective("starting SCR: rank 0 sent no descriptors".into()))?
        .map_err(|e| Error::Collective(e.to_string()))?;
    if world.rank() == 0 {
        for w in &settings.warnings {
            scr_warn!("{w}");
        }
        scr_debug!(
            1,
            "{} starting on {} ranks; effective configuration:\n{}",
            crate::VERSION,
            world.size(),
            settings.describe()
        );
    }
    Ok((settings, descs))
}

/// The run's directories, named by rank 0's reading of the prefix (its canonical form: one
/// `readlink` per component on the parallel file system, made once for the job, not once per
/// rank), of the user and of the job (collective: one broadcast), and the job.
fn identify(
    world: &Comm,
    settings: &Settings,
    who: Identify,
    node_root: Option<&std::path::Path>,
) -> Result<(Layout, JobId)> {
    let mine = (world.rank() == 0).then(|| {
        let prefix = Prefix::new(&settings.prefix);
        let (user, job) = who(&prefix.path);
        (prefix, user, job)
    });
    let (prefix, user, job): (Prefix, String, JobId) = world.bcast(0, &mine)?.expect("rank 0 sends its identity");
    let mut layout = Layout::new(prefix, &settings.cntl_base, &user, &job.id);
    if let Some(root) = node_root {
        layout = layout.on_node(root);
    }
    Ok((layout, job))
}

/// Rank 0 describes the job, and when it must halt before its allocation ends.
fn report_job(settings: &Settings, layout: &Layout, job: &JobId, nnodes: usize) {
    scr_debug!(
        1,
        "job id {} ({}), user {}, {nnodes} node(s), prefix {}, control {}",
        job.id,
        job.source,
        layout.user,
        layout.prefix.path.display(),
        layout.cntl_dir.display()
    );
    if settings.halt_seconds > 0 {
        match identity::end_time() {
            Some(end) => scr_debug!(
                1,
                "the allocation ends at {} UTC ({} s from now); SCR_HALT_SECONDS={}",
                identity::iso_time(end),
                end - identity::now_secs(),
                settings.halt_seconds
            ),
            None => scr_warn!(
                "SCR_HALT_SECONDS={} but the allocation's end time is unknown (no SCR_END_TIME, and no \
                 resource manager job, Slurm, LSF, Flux or PBS, that reports one): the job is not halted before its allocation ends",
                settings.halt_seconds
            ),
        }
    }
}
