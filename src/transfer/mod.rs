//! Moving datasets between the cache and the prefix: [`flush`] (cache to prefix, publishing
//! the dataset in the index only when every rank's files are verified there) and [`fetch`]
//! (prefix to cache, verifying sizes and CRC32). Both copy through [`copy`], which publishes
//! each file under a temporary name and renames it only after size and CRC check out.
//! Both are collective over the world communicator and return the same result on every rank.
//! The number of ranks touching the prefix at once is bounded by `SCR_FLUSH_WIDTH` /
//! `SCR_FETCH_WIDTH`.
//!
//! Over MPI between two ranks: [`sendfile`] (a file from a rank that holds it to one that
//! needs it). Without MPI: [`background`] (a flush in a thread), [`scavenge`] (a node's cached parts to
//! the prefix) and [`build`] (those parts into an indexed dataset, rebuilding lost ones from
//! redundancy data), which the commands and `SCR_Init` (elastic restart) share.

pub(crate) mod background;
pub mod build;
pub(crate) mod copy;
pub(crate) mod fetch;
pub(crate) mod flush;
pub(crate) mod scavenge;
pub(crate) mod sendfile;

use std::path::PathBuf;

use crate::comm::Comm;
use crate::config::Settings;
use crate::state::layout::Layout;

/// What a transfer needs to know about the job.
pub(crate) struct Ctx<'a> {
    pub(crate) world: &'a Comm,
    pub(crate) layout: &'a Layout,
    pub(crate) settings: &'a Settings,
}

impl Ctx<'_> {
    /// Run `f` on each rank in waves of at most `width` ranks at a time.
    pub(crate) fn in_waves<T>(&self, width: usize, f: impl FnOnce() -> T) -> T {
        let width = width.max(1) as i32;
        let waves = (self.world.size() + width - 1) / width;
        let mine = self.world.rank() / width;
        let mut f = Some(f);
        let mut out = None;
        for wave in 0..waves {
            if wave == mine {
                out = Some((f.take().expect("runs once"))());
            }
            if waves > 1 {
                self.world.barrier();
            }
        }
        out.expect("every rank has a wave")
    }

    /// Gather per-rank error messages to rank 0 and return a summary (same on every rank):
    /// how many ranks failed and the first few reasons.
    pub(crate) fn summarize_failures(&self, what: &str, local: Option<String>) -> String {
        let all = match self.world.gather(0, &local) {
            Ok(all) => all,
            Err(e) => return format!("{what} failed: {e}"),
        };
        let summary = all.map(|all| failure_summary(what, all)).unwrap_or_default();
        self.world.bcast(0, &summary).unwrap_or_else(|e| format!("{what} failed: {e}"))
    }
}

/// The summary of [`Ctx::summarize_failures`] from every rank's error (by rank): how many
/// ranks failed and the first few reasons.
pub(crate) fn failure_summary(what: &str, all: Vec<Option<String>>) -> String {
    let size = all.len();
    let failed: Vec<(usize, String)> = all.into_iter().enumerate().filter_map(|(r, m)| m.map(|m| (r, m))).collect();
    let shown: Vec<String> = failed.iter().take(4).map(|(r, m)| format!("rank {r}: {m}")).collect();
    let more = if failed.len() > 4 { format!("; and {} more", failed.len() - 4) } else { String::new() };
    format!("{what} failed on {} of {size} ranks: {}{more}", failed.len(), shown.join("; "))
}

/// Why a flush, fetch, scavenge or build could not do its part: the file, rank, dataset or
/// set member at fault. A lower layer's error keeps its own type ([`TransferError::Lower`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransferError {
    /// A metadata file the transfer needs is missing.
    #[error("{} is missing", path.display())]
    Missing { path: PathBuf },
    /// The rank-to-file map of dataset `id` is missing: its flush never finished.
    #[error("{} is missing: the flush of dataset {id} never finished", path.display())]
    FlushUnfinished { path: PathBuf, id: u64 },
    /// A dataset written by `written` ranks, fetched by a run of `ranks`.
    #[error(
        "it was written by {written} ranks and this run has {ranks} (restart with the same number of processes, \
         or set SCR_FETCH=0 and read the files yourself)"
    )]
    Ranks { written: u32, ranks: i32 },
    /// A flush part left by another attempt.
    #[error("{} belongs to another flush attempt", path.display())]
    OtherAttempt { path: PathBuf },
    /// Rank `rank` reported that its share failed.
    #[error("rank {rank}: {why}")]
    RankFailed { rank: u32, why: Reported },
    /// A file in the prefix that does not match its record.
    #[error("{}: does not match what was written", path.display())]
    Mismatch { path: PathBuf },
    /// A directory could not be created.
    #[error("create {}: {source}", path.display())]
    Create { path: PathBuf, source: std::io::Error },
    /// No survivor of a redundancy set has a usable redundancy file.
    #[error("no surviving member has a usable redundancy file")]
    NoTemplate,
    /// No surviving redundancy file lists the files of set member `member`.
    #[error("no surviving redundancy file lists the files of set member {member}")]
    NoFileList { member: usize },
    /// `scr_index --build` of a dataset id without its directory.
    #[error(
        "{}: no such dataset directory (dataset ids are the numbers of the scr.dataset.<id> directories in {})",
        dir.display(),
        scr_dir.display()
    )]
    NoDatasetDir { dir: PathBuf, scr_dir: PathBuf },
    /// A dataset directory with nothing to index; `damaged` lists the rank filemaps refused.
    #[error(
        "{} holds no usable rank filemap (*.scrfilemap) and no summary: nothing to index{}",
        dir.display(),
        if damaged.is_empty() { String::new() } else { format!(" ({})", damaged.join("; ")) }
    )]
    NothingToIndex { dir: PathBuf, damaged: Vec<String> },
    /// A shared file of the dataset is not in the prefix as completed; `why` names it.
    #[error("{why}")]
    SharedFile { why: String },
    /// An error of a lower layer (I/O, metadata, redundancy).
    #[error(transparent)]
    Lower(#[from] crate::error::Error),
}

impl From<crate::persist::MetaError> for TransferError {
    fn from(e: crate::persist::MetaError) -> TransferError {
        TransferError::Lower(e.into())
    }
}

impl From<crate::paths::PathError> for TransferError {
    fn from(e: crate::paths::PathError) -> TransferError {
        TransferError::Lower(e.into())
    }
}

impl From<TransferError> for crate::error::Error {
    fn from(e: TransferError) -> crate::error::Error {
        match e {
            TransferError::Lower(e) => e,
            e => crate::error::Error::Layer { layer: "transfer", source: Box::new(e) },
        }
    }
}

/// A failure as one rank or one attempt reported it, for the records that carry it to other
/// ranks and processes (a background flush's part file, a broadcast): serialized as the bare
/// message, so the files keep their format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
#[error("{msg}")]
pub(crate) struct Reported {
    pub(crate) msg: String,
}

impl Reported {
    /// The report of `e`, as its message.
    pub(crate) fn of(e: impl std::fmt::Display) -> Reported {
        Reported { msg: e.to_string() }
    }
}
