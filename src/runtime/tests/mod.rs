//! Unit tests of the runtime on the in-process communicator (`crate::comm::local`): N ranks
//! as threads of the test process, each with its own [`Runtime`] built by
//! [`Runtime::start_with`]; simulated nodes by host name, each with its own node-local
//! directories below a temporary directory (see `Layout::node_root`), and one prefix. A
//! relaunch is a second [`Cluster::run`] on the same directories; a lost node is its
//! directory removed between runs; a rank that dies is a thread that returns without
//! finalising.

mod eviction;
mod failures;
mod output;
mod redundancy;
mod restart;
mod versions;

use std::path::{Path, PathBuf};

use super::init::Launch;
use super::{Mode, Runtime, FLAG_CHECKPOINT, FLAG_OUTPUT};
use crate::comm::{local, Comm};
use crate::config::{self, Settings};
use crate::identity::JobId;

pub(super) const CKPT: i32 = FLAG_CHECKPOINT;
pub(super) const OUTPUT: i32 = FLAG_OUTPUT;

/// A simulated cluster: `n` ranks, `per_node` of them on each node, a configuration.
pub(super) struct Cluster {
    pub root: tempfile::TempDir,
    pub n: usize,
    pub per_node: usize,
    /// Configuration-file lines (after the defaults of [`Cluster::new`], so they win).
    lines: Vec<String>,
    pub mode: Mode,
}

impl Cluster {
    /// SINGLE, no periodic flush, cache and control directories node-local.
    pub fn new(n: usize, per_node: usize) -> Cluster {
        let root = tempfile::tempdir().expect("a temporary directory");
        let prefix = root.path().join("prefix");
        std::fs::create_dir_all(&prefix).unwrap();
        let lines = vec![
            format!("SCR_PREFIX={}", prefix.display()),
            "SCR_CACHE_BASE=/cache".into(),
            "SCR_CNTL_BASE=/cntl".into(),
            "SCR_COPY_TYPE=SINGLE".into(),
            "SCR_FLUSH=0".into(),
            "SCR_LOG_ENABLE=0".into(),
        ];
        Cluster { root, n, per_node, lines, mode: Mode::Api }
    }

    /// Add a configuration line (`KEY=VALUE`, or a descriptor line such as `CKPT=0 TYPE=XOR`).
    pub fn set(mut self, line: &str) -> Cluster {
        self.lines.push(line.to_string());
        self
    }

    pub fn prefix(&self) -> PathBuf {
        self.root.path().join("prefix")
    }

    pub fn node_of(&self, rank: usize) -> usize {
        rank / self.per_node
    }

    /// The directory a node's node-local paths are below.
    pub fn node_dir(&self, node: usize) -> PathBuf {
        self.root.path().join("nodes").join(format!("node{node}"))
    }

    /// Lose a node: its storage is gone (a relaunch may run on a spare of the same name).
    pub fn lose_node(&self, node: usize) {
        let d = self.node_dir(node);
        if d.exists() {
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    fn settings(&self) -> Result<Settings, config::ConfigError> {
        let text = self.lines.join("\n");
        let mut warnings = Vec::new();
        let layer = config::parse_file_text(&text, Path::new("<test config>"), true, &mut warnings)?;
        Settings::from_resolved(&config::resolve_layers(vec![layer], warnings), self.prefix())
    }

    /// Start rank `comm.rank()`'s runtime (collective over `comm`).
    pub fn start(&self, comm: Comm) -> crate::error::Result<Runtime> {
        let rank = comm.rank() as usize;
        let node = self.node_of(rank);
        let settings = self.settings();
        let launch = Launch {
            world: comm,
            host: format!("node{node}"),
            config: Box::new(move || settings),
            identity: Box::new(|_| {
                ("tester".to_string(), JobId { id: "unit".to_string(), source: "test".to_string() })
            }),
            node_root: Some(self.node_dir(node)),
        };
        Runtime::start_with(self.mode, launch)
    }

    /// Launch a run: start every rank, run `f`, finalise. Results in rank order.
    pub fn run<T: Send>(&self, f: impl Fn(&mut Runtime) -> T + Sync) -> Vec<T> {
        local::run(self.n, |comm| {
            let mut rt = self.start(comm).expect("SCR_Init");
            let out = f(&mut rt);
            rt.finalize_checked().expect("SCR_Finalize");
            rt.shutdown(crate::state::halt::FINALIZE_REASON);
            out
        })
    }

    /// Launch a run where `f` says whether the rank finalises (`false`: the rank "dies" after
    /// `f`, its runtime dropped without `SCR_Finalize`; every rank must agree, since finalising
    /// is collective).
    pub fn run_dying<T: Send>(&self, f: impl Fn(&mut Runtime) -> (T, bool) + Sync) -> Vec<T> {
        local::run(self.n, |comm| {
            let mut rt = self.start(comm).expect("SCR_Init");
            let (out, finalize) = f(&mut rt);
            if finalize {
                rt.finalize_checked().expect("SCR_Finalize");
                rt.shutdown(crate::state::halt::FINALIZE_REASON);
            } else {
                rt.abandon();
            }
            out
        })
    }
}

impl Runtime {
    pub(super) fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// The path the application names a file of its dataset by (in the prefix).
    pub(super) fn app_path(&self, rel: &str) -> String {
        self.layout.prefix.path.join(rel).display().to_string()
    }

    /// One output phase: each `(name, bytes)` routed and written, then completed with `valid`.
    pub(super) fn output(&mut self, name: &str, flags: i32, files: &[(String, Vec<u8>)], valid: bool) -> bool {
        self.start_output(Some(name), flags).expect("SCR_Start_output");
        for (rel, bytes) in files {
            let path = self.route_file(&self.app_path(rel)).expect("SCR_Route_file");
            std::fs::write(&path, bytes).unwrap();
        }
        self.complete_output(valid).expect("SCR_Complete_output")
    }

    /// A checkpoint of one file per rank, `ckpt.<rank>`, holding `content(rank)`.
    pub(super) fn checkpoint(&mut self, name: &str, valid: bool) -> bool {
        let r = self.rank();
        self.output(name, CKPT, &[(format!("{name}/rank.{r}"), content(name, r))], valid)
    }

    /// Restart: the name offered and this rank's files' bytes (by name below the prefix), read
    /// where `SCR_Route_file` says they are; `None` when there is nothing to restart from.
    pub(super) fn read_restart(&mut self) -> Option<(String, Vec<u8>)> {
        let name = self.have_restart().expect("SCR_Have_restart")?;
        assert_eq!(self.start_restart().expect("SCR_Start_restart"), name);
        let r = self.rank();
        let path = self.route_file(&self.app_path(&format!("{name}/rank.{r}"))).expect("SCR_Route_file");
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(self.complete_restart(true).expect("SCR_Complete_restart"));
        Some((name, bytes))
    }

    /// Where this rank's file of cached dataset `name` is.
    pub(super) fn file_of(&self, name: &str) -> PathBuf {
        let rec = self.filemap.by_name(name).unwrap_or_else(|| panic!("{name} is cached"));
        rec.files[0].path.clone()
    }

    /// Cached dataset ids of this rank, oldest first.
    pub(super) fn cached(&self) -> Vec<u64> {
        self.filemap.datasets.keys().copied().collect()
    }

    /// Cached dataset names of this rank, oldest first.
    pub(super) fn cached_names(&self) -> Vec<String> {
        self.filemap.datasets.values().map(|r| r.desc.name.clone()).collect()
    }

    /// Drop this runtime as a process killed now would leave things: nothing finalised,
    /// flushed or recorded (background threads are stopped without waiting for them).
    pub(super) fn abandon(mut self) {
        self.stop_watchdog();
        self.job_lock = None;
    }
}

/// The bytes rank `r` writes in checkpoint `name` (distinct per rank and checkpoint).
pub(super) fn content(name: &str, r: usize) -> Vec<u8> {
    let mut v = format!("{name} of rank {r}\n").into_bytes();
    // more than one block, so that redundancy spreads over pieces
    v.extend((0..3000u32).map(|i| (i as usize * 31 + r * 7 + name.len()) as u8));
    v
}

/// The index of the prefix (what `scr_index` shows).
pub(super) fn index(c: &Cluster) -> crate::state::index::Index {
    let layout = crate::state::layout::Layout::prefix_only(crate::paths::Prefix::new(&c.prefix()));
    crate::state::index::Index::load(&layout.index()).expect("the index reads")
}
