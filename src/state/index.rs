//! The index (`<prefix>/.scr/index.scr`): every dataset in the prefix, whether it is
//! complete, when it was flushed, whether a restart from it failed, each fetch attempt, and
//! the *current* marker that says where the next restart starts (user guide 2.10). Shared
//! with `scr_index`, so every change is a locked read-modify-write ([`Index::update`]).
//!
//! The index is a cache of the prefix's dataset directories: when it is damaged, or missing
//! while dataset directories exist, every reader and writer here rebuilds it from them first
//! ([`super::recover`]), says so loudly (which file, what was recovered, where the damaged
//! copy went), and goes on with the rebuilt index.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::dataset::DatasetDesc;
use super::recover;
use crate::persist::{self, Lock, MetaError};
use crate::scr_error;

const KIND: &str = "index";

/// A fetch attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FetchRecord {
    /// When it was attempted (ISO time).
    pub(crate) time: String,
    /// Whether the fetch succeeded.
    pub(crate) ok: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
}

/// One dataset of the prefix's index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The dataset as the run that wrote it described it.
    pub(crate) desc: DatasetDesc,
    /// Every rank's files are in the prefix and verified.
    pub complete: bool,
    /// When the flush finished (ISO time).
    pub(crate) flushed: Option<String>,
    /// A flush started; cleared when it completes.
    #[serde(default)]
    pub flushing: bool,
    /// A restart from it failed, or a newer dataset was flushed over some of its files
    /// (`superseded_by`); never fetched again.
    #[serde(default)]
    pub(crate) failed: bool,
    /// The newer dataset whose flush rewrote some of this one's prefix paths (transparent
    /// mode: a name kept for ever, each version a checkpoint of its own). Set, with `failed`,
    /// before that flush copies anything, so a restart never loads a mix of versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) superseded_by: Option<u64>,
    /// Every fetch of it for a restart, oldest first.
    #[serde(default)]
    pub(crate) fetches: Vec<FetchRecord>,
}

/// An index entry for a dataset that is complete in the prefix.
pub fn complete_entry(desc: DatasetDesc, flushed: Option<String>) -> IndexEntry {
    IndexEntry {
        desc,
        complete: true,
        flushed,
        flushing: false,
        failed: false,
        superseded_by: None,
        fetches: Vec::new(),
    }
}

/// The index (`<prefix>/.scr/index.scr`): every dataset in the prefix and the current
/// checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// Name of the current checkpoint.
    pub(crate) current: Option<String>,
    /// The datasets, by id.
    pub datasets: BTreeMap<u64, IndexEntry>,
}

impl Index {
    /// Read the index at `path` (`<prefix>/.scr/index.scr`), rebuilding it first if it is
    /// damaged or missing while the prefix holds datasets.
    pub(crate) fn load(path: &Path) -> Result<Index, MetaError> {
        match persist::read::<Index>(path, KIND) {
            Ok(Some(ix)) => Ok(ix),
            Ok(None) if !path.parent().is_some_and(recover::anything_to_index) => Ok(Index::default()),
            Ok(None) | Err(MetaError::Damaged { .. }) => {
                let _lock = Lock::acquire(path)?;
                read_or_rebuild(path)
            }
            Err(e) => Err(e),
        }
    }

    /// Locked read-modify-write (of the rebuilt index if it was damaged or lost).
    pub fn update<R>(path: &Path, f: impl FnOnce(&mut Index) -> R) -> Result<R, MetaError> {
        let _lock = Lock::acquire(path)?;
        let mut ix = read_or_rebuild(path)?;
        let r = f(&mut ix);
        persist::write_atomic(path, KIND, &ix)?;
        Ok(r)
    }

    /// Locked read-modify-write that writes only if `f` succeeds (a rebuilt index is written
    /// in any case).
    pub(crate) fn try_update<R, E>(
        path: &Path,
        f: impl FnOnce(&mut Index) -> Result<R, E>,
    ) -> Result<Result<R, E>, MetaError> {
        let _lock = Lock::acquire(path)?;
        let mut ix = read_or_rebuild(path)?;
        match f(&mut ix) {
            Ok(r) => {
                persist::write_atomic(path, KIND, &ix)?;
                Ok(Ok(r))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// Make dataset `id` the current checkpoint if it is a complete, usable checkpoint newer
    /// than the one the marker names (as SCR's scavenge does: a marker left on an older
    /// checkpoint would hide this one from the next fetch).
    pub(crate) fn promote_current(&mut self, id: u64) {
        let Some(e) = self.datasets.get(&id) else { return };
        if !(e.complete && !e.failed && e.desc.checkpoint) {
            return;
        }
        let cur = self.current.as_deref().and_then(|c| self.by_name(c)).map(|c| c.desc.id);
        if cur.is_none_or(|c| c < id) {
            self.current = Some(e.desc.name.clone());
        }
    }

    /// The newest entry with this name.
    pub(crate) fn by_name(&self, name: &str) -> Option<&IndexEntry> {
        self.datasets.values().rev().find(|e| e.desc.name == name)
    }

    /// Checkpoints a restart may use, in the order to try them: the current one first (if
    /// set and usable), then newest to oldest; incomplete and failed ones never.
    pub(crate) fn restart_candidates(&self, exclude: &[u64]) -> Vec<u64> {
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

    /// The index of the datasets a rebuild found ([`recover::rebuild`]): their fetch history
    /// and restart marks are lost; the newest complete checkpoint is current.
    fn rebuilt(found: Vec<recover::Found>) -> Index {
        let mut index = Index::default();
        for f in found {
            let entry = IndexEntry { complete: f.complete, ..complete_entry(f.desc, f.flushed) };
            index.datasets.insert(f.id, entry);
        }
        index.current =
            index.datasets.values().rev().find(|e| e.complete && e.desc.checkpoint).map(|e| e.desc.name.clone());
        index
    }

    /// The highest dataset and checkpoint ids recorded.
    pub(crate) fn max_ids(&self) -> (u64, u64) {
        let d = self.datasets.keys().max().copied().unwrap_or(0);
        let c = self.datasets.values().filter_map(|e| e.desc.ckpt).max().unwrap_or(0);
        (d, c)
    }
}

/// With the index's lock held: its content, rebuilt from the dataset directories (and
/// written) when it is damaged, or missing while there are datasets to index.
fn read_or_rebuild(path: &Path) -> Result<Index, MetaError> {
    let why = match persist::read::<Index>(path, KIND) {
        Ok(Some(ix)) => return Ok(ix),
        Ok(None) => "is missing".to_string(),
        Err(MetaError::Damaged { why, .. }) => format!("is damaged ({why})"),
        Err(e) => return Err(e),
    };
    let scr_dir = path.parent().unwrap_or(Path::new("."));
    if why == "is missing" && !recover::anything_to_index(scr_dir) {
        return Ok(Index::default());
    }
    let moved = if path.exists() { recover::move_aside(path) } else { None };
    let rebuilt = recover::rebuild(scr_dir);
    let index = Index::rebuilt(rebuilt.found);
    persist::write_atomic(path, KIND, &index)?;
    let what = match &moved {
        Some(to) => format!("{} {why}; the damaged copy was moved to {}", path.display(), to.display()),
        None if why == "is missing" => format!("{} is missing", path.display()),
        None => format!("{} {why}; it could not be moved aside and was replaced", path.display()),
    };
    scr_error!(
        "{what}; the index was rebuilt from the dataset directories of the prefix (restart markers and fetch history are lost): {}",
        if rebuilt.notes.is_empty() { "nothing to index".to_string() } else { rebuilt.notes.join("; ") }
    );
    Ok(index)
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
            superseded_by: None,
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
        ix.promote_current(5);
        assert_eq!(ix.current.as_deref(), Some("ckpt.5"));
        ix.promote_current(1);
        assert_eq!(ix.current.as_deref(), Some("ckpt.5"), "an older one never takes over");
        ix.promote_current(2);
        assert_eq!(ix.current.as_deref(), Some("ckpt.5"), "nor a failed one");
    }

    #[test]
    fn a_rebuilt_index_makes_the_newest_complete_checkpoint_current() {
        let found = |id: u64, complete: bool, checkpoint: bool| recover::Found {
            id,
            desc: DatasetDesc { checkpoint, ..DatasetDesc::sample(id, &format!("ckpt.{id}"), 2) },
            complete,
            flushed: None,
        };
        let ix = Index::rebuilt(vec![
            found(2, true, true),
            found(4, true, true),
            found(6, false, true),
            found(7, true, false),
        ]);
        assert_eq!(ix.datasets.keys().copied().collect::<Vec<_>>(), vec![2, 4, 6, 7]);
        assert!(!ix.datasets[&6].complete && ix.datasets[&7].complete);
        assert_eq!(ix.current.as_deref(), Some("ckpt.4"), "6 is incomplete, 7 is output only");
        assert_eq!(ix.restart_candidates(&[]), vec![4, 2]);
    }

    /// A flushed dataset's directory, as a flush leaves it.
    fn flushed(scr: &Path, id: u64) {
        let dir = scr.join(format!("scr.dataset.{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let r2f = super::super::summary::Rank2File { ranks: 0, files: Default::default() };
        r2f.save(&dir.join("rank2file.scr")).unwrap();
        let desc = DatasetDesc::sample(id, &format!("ckpt.{id}"), 0);
        super::super::summary::Summary { desc, scheme: "SINGLE".into() }.save(&dir.join("summary.scr")).unwrap();
    }

    #[test]
    fn damaged_truncated_or_deleted_index_is_rebuilt_and_kept_aside() {
        for damage in ["flip", "truncate", "delete"] {
            let d = tempfile::tempdir().unwrap();
            let scr = d.path().join(".scr");
            let path = scr.join("index.scr");
            flushed(&scr, 3);
            flushed(&scr, 5);
            Index::update(&path, |ix| {
                ix.datasets.insert(9, entry(9, "gone", true, false));
            })
            .unwrap();
            let mut bytes = std::fs::read(&path).unwrap();
            match damage {
                "flip" => {
                    let n = bytes.len() - 5;
                    bytes[n] ^= 1;
                    std::fs::write(&path, &bytes).unwrap();
                }
                "truncate" => std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap(),
                _ => std::fs::remove_file(&path).unwrap(),
            }
            let ix = Index::load(&path).unwrap();
            assert_eq!(ix.restart_candidates(&[]), vec![5, 3], "{damage}");
            assert_eq!(ix.current.as_deref(), Some("ckpt.5"));
            let aside: Vec<_> = std::fs::read_dir(&scr)
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("index.scr.damaged."))
                .collect();
            assert_eq!(aside.len(), usize::from(damage != "delete"), "{damage}");
            // written back: a plain read now succeeds, and updates work
            assert_eq!(persist::read::<Index>(&path, KIND).unwrap().unwrap(), ix);
            Index::update(&path, |ix| ix.current = None).unwrap();
        }
    }

    #[test]
    fn a_missing_index_with_nothing_to_index_stays_missing() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(".scr/index.scr");
        assert_eq!(Index::load(&path).unwrap(), Index::default());
        assert!(!path.exists());
    }
}
