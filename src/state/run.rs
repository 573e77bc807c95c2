//! The run record (`<prefix>/.scr/run.scr`): which run `scr_run` launched, from where (and in
//! which Slurm job), and whether it is still going. `scr_halt --immediate` reads it to stop the
//! current run; the next `scr_run` reads the node count of the previous run from it (user guide
//! 2.8.5: the next run needs as many nodes as the previous one unless `SCR_MIN_NODES` says
//! otherwise).
//!
//! Only `scr_run` writes it (atomically, through [`crate::persist`]); a crash leaves a record
//! whose process no longer exists, which readers check (`launcher_start` guards against a
//! reused process id). The prefix may be writable by others, so before it signals anything
//! `scr_halt` also checks that the process belongs to the record's owner and still runs the
//! recorded command line (`launcher_cmdline`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::persist::{self, MetaError};

const KIND: &str = "run";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// Host `scr_run` runs on (the batch script's node).
    pub host: String,
    /// Process id of `scr_run`.
    pub wrapper_pid: u32,
    /// Process id of the launcher (`mpirun`, `srun`, ...) of the current run.
    pub launcher_pid: u32,
    /// The launcher's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub launcher_start: u64,
    /// 1 for the first run of this `scr_run`, 2 for the first relaunch, ...
    pub attempt: u32,
    /// ISO time the run started.
    pub started: String,
    /// Nodes the run was given.
    pub nodes: Vec<String>,
    /// The command line launched.
    pub command: Vec<String>,
    /// ISO time the run ended, once it has.
    pub ended: Option<String>,
    /// Exit status of the launcher (`None`: killed by a signal, or still running).
    pub status: Option<i32>,
    /// The Slurm job whose step the run is, when the launcher is `srun` in an allocation: the
    /// step is found by the launcher's host and process id, and cancelled, from any host.
    #[serde(default)]
    pub slurm_job: Option<String>,
    /// The launcher's command line as the kernel shows it (`/proc/<pid>/cmdline`) once it
    /// started: with its owner (the record's file owner) and `launcher_start`, what proves to
    /// `scr_halt --immediate` that a process is this job's launcher. Older records lack it,
    /// and `scr_halt` then signals nothing.
    #[serde(default)]
    pub launcher_cmdline: Option<Vec<String>>,
}

impl RunRecord {
    pub fn load(path: &Path) -> Result<Option<RunRecord>, MetaError> {
        persist::read(path, KIND)
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }
}
