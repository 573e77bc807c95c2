//! The index (`<prefix>/.scr/index.scr`): every dataset in the prefix, whether it is
//! complete, when it was flushed, whether a restart from it failed, each fetch attempt, and
//! the *current* marker that says where the next restart starts (user guide 2.10). Shared
//! with `scr_index`, so every change is a locked read-modify-write ([`update`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::dataset::DatasetDesc;
use crate::persist::{self, MetaError};

const KIND: &str = "index";

/// A fetch attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchRecord {
    pub time: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub desc: DatasetDesc,
    /// Every rank's files are in the prefix and verified.
    pub complete: bool,
    /// When the flush finished (ISO time).
    pub flushed: Option<String>,
    /// A flush started; cleared when it completes.
    #[serde(default)]
    pub flushing: bool,
    /// A restart from it failed; never fetched again.
    #[serde(default)]
    pub failed: bool,
    #[serde(default)]
    pub fetches: Vec<FetchRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// Name of the current checkpoint.
    pub current: Option<String>,
    pub datasets: BTreeMap<u64, IndexEntry>,
}

impl Index {
    pub fn load(path: &Path) -> Result<Index, MetaError> {
        Ok(persist::read(path, KIND)?.unwrap_or_default())
    }

    /// Locked read-modify-write.
    pub fn update<R>(path: &Path, f: impl FnOnce(&mut Index) -> R) -> Result<R, MetaError> {
        persist::update(path, KIND, f)
    }

    /// Locked read-modify-write that writes only if `f` succeeds (see [`persist::try_update`]).
    pub fn try_update<R, E>(
        path: &Path,
        f: impl FnOnce(&mut Index) -> Result<R, E>,
    ) -> Result<Result<R, E>, MetaError> {
        persist::try_update(path, KIND, f)
    }

    /// The newest entry with this name.
    pub fn by_name(&self, name: &str) -> Option<&IndexEntry> {
        self.datasets.values().rev().find(|e| e.desc.name == name)
    }

    /// Checkpoints a restart may use, in the order to try them: the current one first (if
    /// set and usable), then newest to oldest; incomplete and failed ones never.
    pub fn restart_candidates(&self, exclude: &[u64]) -> Vec<u64> {
        let usable = |e: &&IndexEntry| e.complete && !e.failed && e.desc.checkpoint && !exclude.contains(&e.desc.id);
        let mut out: Vec<u64> = Vec::new();
        if let Some(cur) = &self.current {
            if let Some(e) = self.datasets.values().rev().filter(usable).find(|e| &e.desc.name == cur) {
                out.push(e.desc.id);
            }
        }
        let start_below = out.first().copied().unwrap_or(u64::MAX);
        out.extend(self.datasets.values().rev().filter(usable).map(|e| e.desc.id).filter(|id| *id < start_below));
        out
    }

    /// The highest dataset and checkpoint ids recorded.
    pub fn max_ids(&self) -> (u64, u64) {
        let d = self.datasets.keys().max().copied().unwrap_or(0);
        let c = self.datasets.values().filter_map(|e| e.desc.ckpt).max().unwrap_or(0);
        (d, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, name: &str, complete: bool, failed: bool) -> IndexEntry {
        IndexEntry {
            desc: DatasetDesc { complete, ..DatasetDesc::sample(id, name, 4) },
            complete,
            flushed: None,
            flushing: false,
            failed,
            fetches: vec![],
        }
    }

    #[test]
    fn candidates_start_at_current_and_skip_bad() {
        let mut ix = Index::default();
        for (id, c, f) in [(1, true, false), (2, true, true), (3, false, false), (4, true, false), (5, true, false)] {
            ix.datasets.insert(id, entry(id, &format!("ckpt.{id}"), c, f));
        }
        assert_eq!(ix.restart_candidates(&[]), vec![5, 4, 1]);
        ix.current = Some("ckpt.4".into());
        assert_eq!(ix.restart_candidates(&[]), vec![4, 1]);
        assert_eq!(ix.restart_candidates(&[4]), vec![5, 1]);
        assert_eq!(ix.max_ids(), (5, 5));
    }
}
