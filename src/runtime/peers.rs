//! Transparent mode's knowledge of other ranks' files, one owned part of the runtime: for each
//! complete cached dataset, every other rank's files of it (name below the prefix, size, mode
//! bits, modification time) as they were when it completed, and which ranks run on this node.
//! A plain file system shows every process every rank's files; with this, transparent mode
//! does too ([`crate::transparent`] lists, stats and opens them).
//!
//! The lists travel in the completion's one exchange of every rank's outcome and names
//! ([`super::shared`], no collective of their own), and once at start for the datasets a
//! restart finds in cache ([`Runtime::share_listing`]). A rank on this node keeps its files in
//! this node's directory of the dataset, at their names: they are read there. The lists are
//! bounded: a rank sends its list only while every rank's would fit in [`MAX_LISTED`] entries
//! together (`MAX_LISTED / ranks` each); a larger part is not listed elsewhere (said once), and
//! its files appear to other ranks when they reach the prefix, as before. Kept in memory only:
//! the filemap records this rank's files, not the others'.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{with_rt, Runtime};
use crate::error::Result;

/// At most this many files of one dataset, over all ranks, are listed on every rank (about
/// 60 bytes each in the exchange, and some 300 bytes in each rank's memory).
pub(crate) const MAX_LISTED: usize = 1 << 16;

/// One file as its rank describes it to the others (in the exchange a bare array: name,
/// size, mode, seconds, nanoseconds, about 60 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Wire", into = "Wire")]
pub(crate) struct Listed {
    /// Its name below the prefix.
    pub rel: PathBuf,
    pub size: u64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, u32),
}

/// [`Listed`] as it travels.
type Wire = (PathBuf, u64, u32, i64, u32);

impl From<Wire> for Listed {
    fn from((rel, size, mode, sec, nsec): Wire) -> Listed {
        Listed { rel, size, mode, mtime: (sec, nsec) }
    }
}

impl From<Listed> for Wire {
    fn from(l: Listed) -> Wire {
        (l.rel, l.size, l.mode, l.mtime.0, l.mtime.1)
    }
}

impl Listed {
    /// `rel`'s description from the file at `path` (`None`: it cannot be read).
    pub(crate) fn of(rel: &Path, path: &Path) -> Option<Listed> {
        std::fs::symlink_metadata(path).ok().map(|m| Listed::from_lstat(rel, &m))
    }

    /// `rel`'s description from its file's `lstat`.
    pub(super) fn from_lstat(rel: &Path, m: &std::fs::Metadata) -> Listed {
        use std::os::unix::fs::MetadataExt;
        Listed { rel: rel.to_path_buf(), size: m.len(), mode: m.mode(), mtime: (m.mtime(), m.mtime_nsec() as u32) }
    }
}

/// Whether a rank's part of `files` files is listed on the others among `ranks` (its share
/// of [`MAX_LISTED`]).
pub(super) fn listable(files: usize, ranks: usize) -> bool {
    files <= MAX_LISTED / ranks.max(1)
}

/// This rank's list for dataset `rec` (`None` when it holds more files than its share of
/// [`MAX_LISTED`] among `ranks`, or a file cannot be described).
pub(super) fn list_of(rec: &crate::state::filemap::DatasetRecord, ranks: usize) -> Part {
    if !listable(rec.files.len(), ranks) {
        return None;
    }
    rec.files.iter().map(|f| Listed::of(&f.rel, &f.path)).collect()
}

/// A rank's files of one dataset (`None`: too many to list).
pub(super) type Part = Option<Vec<Listed>>;

/// What this rank knows of the others' files.
#[derive(Debug, Default)]
pub(super) struct Peers {
    /// World ranks on this node.
    node: Vec<i32>,
    /// Dataset id -> (rank, its files; `None`: too many to list).
    datasets: BTreeMap<u64, Vec<(u32, Part)>>,
    /// Said that some rank's part was too large to list.
    said: bool,
}

impl Peers {
    /// The world ranks on this node.
    pub(super) fn set_node(&mut self, ranks: Vec<i32>) {
        self.node = ranks;
    }

    /// Every rank's list of dataset `id` (this rank's entry is ignored); rank 0 says once when
    /// some rank's part is too large to list.
    pub(super) fn record(&mut self, id: u64, me: u32, lists: Vec<Part>, rank0: bool) {
        let over = lists.iter().filter(|l| l.is_none()).count();
        if over > 0 && rank0 && !std::mem::replace(&mut self.said, true) {
            crate::scr_warn!(
                "transparent mode: dataset {id}: {over} rank(s) hold more than {} files of it (or a file that could not be read), so their files are not listed on the other ranks (other ranks see them once they are flushed to the prefix); said once",
                MAX_LISTED / lists.len().max(1)
            );
        }
        let others = lists.into_iter().enumerate().filter(|(r, _)| *r as u32 != me).map(|(r, l)| (r as u32, l));
        self.datasets.insert(id, others.collect());
    }

    /// Forget datasets that are no longer cached.
    fn retain(&mut self, cached: impl Fn(u64) -> bool) {
        self.datasets.retain(|id, _| cached(*id));
    }
}

/// Another rank's file of a complete cached dataset, as transparent mode serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFile {
    /// Its description from its rank.
    pub listed: Listed,
    /// The rank holding it.
    pub rank: u32,
    pub dataset: u64,
    /// Where its bytes are when its rank runs on this node.
    pub local: Option<PathBuf>,
}

/// Every other rank's files of this rank's complete cached datasets, oldest dataset first.
pub fn peer_files() -> Result<Vec<PeerFile>> {
    with_rt("transparent mode", |rt| {
        let cached = |id: u64| rt.filemap.datasets.get(&id).is_some_and(|r| r.complete && !r.reddesc.bypass);
        rt.peers.retain(cached);
        let mut out = Vec::new();
        for (id, ranks) in &rt.peers.datasets {
            let dir = &rt.filemap.datasets[id].dir;
            for (rank, list) in ranks {
                let near = rt.peers.node.contains(&(*rank as i32));
                for l in list.iter().flatten() {
                    let local = near.then(|| dir.join(&l.rel));
                    out.push(PeerFile { listed: l.clone(), rank: *rank, dataset: *id, local });
                }
            }
        }
        Ok(out)
    })
}

/// At start (collective): every rank's files of the complete datasets it holds in cache,
/// exchanged, so each rank sees the others' files of the checkpoint it restarts from.
pub fn share_listing() -> Result<()> {
    with_rt("transparent mode", |rt| rt.share_listing())
}

impl Runtime {
    /// [`share_listing`]: one allgather.
    fn share_listing(&mut self) -> Result<()> {
        let ranks = self.world.size() as usize;
        let mine: BTreeMap<u64, Part> = self
            .filemap
            .datasets
            .values()
            .filter(|r| r.complete && !r.reddesc.bypass)
            .map(|r| (r.desc.id, list_of(r, ranks)))
            .collect();
        let all: Vec<BTreeMap<u64, Part>> = self.world.allgather(&mine)?;
        let (me, rank0) = (self.world.rank() as u32, self.rank0());
        for id in mine.keys() {
            // (a rank without the dataset lists nothing of it)
            let lists = all.iter().map(|m| m.get(id).cloned().unwrap_or(Some(Vec::new()))).collect();
            self.peers.record(*id, me, lists, rank0);
        }
        Ok(())
    }
}

/// Where a dataset stands with the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPrefix {
    /// Flushed: every rank's files are there.
    Yes,
    /// Being flushed in the background: each file appears there when its rank copied it.
    Coming,
    /// Only in cache.
    No,
}

/// Where dataset `id` stands with the prefix.
pub fn in_prefix(id: u64) -> InPrefix {
    with_rt("transparent mode", |rt| {
        Ok(if rt.flushed(id) {
            InPrefix::Yes
        } else if rt.bg.in_flight(id) {
            InPrefix::Coming
        } else {
            InPrefix::No
        })
    })
    .unwrap_or(InPrefix::No)
}

/// A [`PeerFile`] for unit tests of transparent mode: `rel` of `rank` in dataset `dataset`.
#[cfg(test)]
pub(crate) fn peers_test_file(rel: &str, rank: u32, dataset: u64) -> PeerFile {
    PeerFile {
        listed: Listed { rel: PathBuf::from(rel), size: 10, mode: 0o100644, mtime: (1, 0) },
        rank,
        dataset,
        local: None,
    }
}
