//! Operating a job from a batch script or a terminal (user guide 2.8-2.10): what the commands
//! `scr_halt`, `scr_index`, `scr_interval`, `scr_copy`, `scr_scavenge`/`scr_postrun`,
//! `scr_prerun`, `scr_should_exit` and `scr_run` (with `scr_srun`/`scr_mpirun`) do, as library
//! functions. The binaries in `src/bin/` hold their manual text, parse arguments with [`args`]
//! and call one function here.
//!
//! | module | owns |
//! |---|---|
//! | [`args`] | command-line parsing shared by every command, and [`main`]'s exit codes |
//! | [`prefix`] | finding the prefix directory a command works on, refusing one without `.scr` |
//! | [`times`] | the time forms `scr_halt --before/--after` accept, and printing them |
//! | [`halt`] | reading and changing halt conditions (`scr_halt`) |
//! | [`index`] | listing and editing the index (`scr_index`) |
//! | [`next`] | what the next run would restart from, for job scripts (`scr_index --restart`) |
//! | [`interval`] | checkpoint interval advice from the event log (`scr_interval`) |
//! | [`scavenge`] | `scr_copy` on one node and `scr_scavenge` over the nodes (the copy and the build, `scr_index --build`, are [`crate::transfer::scavenge`] and [`crate::transfer::build`]) |
//! | [`hostlist`] | host-list syntax (`n[1-3,7]`) and why the nodes of a run could not be known |
//! | [`nodes`] | node lists: the allocation, the nodes left out of a run |
//! | [`slurm`] | what the commands ask Slurm: unusable nodes, a run's job step, cancelling it |
//! | [`run`] | the run wrapper: pre-run checks, relaunch decisions, scavenge at the end |
//! | [`should_exit`] | the same stop-or-relaunch decision for job scripts that loop themselves |
//! | [`down`] | the down nodes of a node set, for job scripts (`scr_list_down_nodes`) |
//! | [`launch`] | one run's command line: node exclusion and preload per launcher, the simulated cluster |
//!
//! Every metadata file these read or write goes through [`crate::state`] (the index and halt
//! file under the same lock the running library takes), so a running job and a command can
//! change them at the same time without losing an update. Bad input (an unknown option, a
//! malformed time, a directory without `.scr`, a damaged index or halt file) is reported
//! naming the option or file, with exit status 2 (usage) or 1 (failure), before any file is
//! changed.

pub mod args;
pub mod down;
pub mod halt;
pub(crate) mod hostlist;
pub mod index;
pub mod interval;
pub(crate) mod launch;
pub mod next;
pub mod nodes;
pub mod prefix;
pub mod run;
pub mod scavenge;
pub mod should_exit;
pub(crate) mod slurm;
pub mod times;

use std::fmt;

/// Why a command failed: bad usage (exit status 2) or a failure doing the work (exit status 1).
#[derive(Debug)]
pub enum OpError {
    /// Bad usage (an unknown option, a malformed value): exit status 2; the message names it.
    Usage(String),
    /// The work failed (an unreadable or damaged file, a failed copy): exit status 1.
    Failed(String),
}

impl OpError {
    /// An [`OpError::Usage`] with message `msg`.
    pub fn usage(msg: impl Into<String>) -> OpError {
        OpError::Usage(msg.into())
    }

    /// An [`OpError::Failed`] with message `msg`.
    pub(crate) fn failed(msg: impl Into<String>) -> OpError {
        OpError::Failed(msg.into())
    }

    /// The exit status a script sees.
    pub fn code(&self) -> i32 {
        match self {
            OpError::Usage(_) => 2,
            OpError::Failed(_) => 1,
        }
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::Usage(m) | OpError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<crate::error::Error> for OpError {
    fn from(e: crate::error::Error) -> OpError {
        OpError::Failed(e.to_string())
    }
}

impl From<crate::persist::MetaError> for OpError {
    fn from(e: crate::persist::MetaError) -> OpError {
        OpError::Failed(e.to_string())
    }
}

impl From<crate::config::ConfigError> for OpError {
    fn from(e: crate::config::ConfigError) -> OpError {
        OpError::Failed(e.to_string())
    }
}

impl From<nodes::NodeError> for OpError {
    fn from(e: nodes::NodeError) -> OpError {
        OpError::Failed(e.to_string())
    }
}

/// Result alias for the commands.
pub type OpResult<T> = Result<T, OpError>;

/// Run a command's body and turn its outcome into an exit status: `--help`/`-h` prints `help`
/// and exits 0, `--version` prints the implementation's and the SCR API's versions; an error
/// is printed as `<cmd>: error: ...` (usage errors add a pointer to `--help`), long input in
/// it shortened by [`crate::log::clip`]. `body` returns the exit status on success (0 unless
/// it has more to say).
/// `wrapper`: the command's first positional argument starts another command line, whose
/// `--help` and `--version` are not ours.
pub fn main(cmd: &str, help: &str, wrapper: bool, body: impl FnOnce(Vec<String>) -> OpResult<i32>) -> i32 {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if args::wants(&argv, wrapper, &["--help", "-h"]) {
        print!("{help}");
        return 0;
    }
    if args::wants(&argv, wrapper, &["--version"]) {
        println!("{cmd} ({}, SCR API {})", crate::VERSION, crate::API_VERSION);
        return 0;
    }
    match body(argv) {
        Ok(code) => code,
        Err(e) => {
            match &e {
                OpError::Usage(m) => eprintln!("{cmd}: error: {}\n(see {cmd} --help)", crate::log::clip(m)),
                OpError::Failed(m) => eprintln!("{cmd}: error: {}", crate::log::clip(m)),
            }
            e.code()
        }
    }
}
