//! `scr_index`: list the datasets of a prefix and edit the index (user guide 2.10):
//! `--current` (where the next restart starts), `--drop` (forget an entry, keep the files),
//! `--add` (index a dataset whose metadata is in its `scr.dataset.<id>` directory). Every
//! change is a locked read-modify-write of `index.scr`; a damaged or lost index is rebuilt
//! from the dataset directories first (`crate::state::recover`). `--build` lives in
//! [`crate::transfer::build`].

use std::path::Path;

use serde::Serialize;

use super::{OpError, OpResult};
pub use crate::state::index::complete_entry;
use crate::state::index::Index;
use crate::state::layout::Layout;
use crate::state::recover;
use crate::state::summary::{Rank2File, Summary};

/// One row of the listing (also the `--json` form).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The dataset id.
    pub id: u64,
    /// The name the application gave it.
    pub name: String,
    /// Complete and never failed: a restart may use it.
    pub valid: bool,
    /// Every rank's files are in the prefix and verified.
    pub(crate) complete: bool,
    /// A restart from it failed, or a newer dataset was flushed over it: never fetched again.
    pub(crate) failed: bool,
    /// A newer dataset was flushed over some of its files (it is failed too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) superseded_by: Option<u64>,
    /// A flush was started and never finished.
    pub(crate) flushing: bool,
    /// When its flush finished (ISO time), if it did.
    pub(crate) flushed: Option<String>,
    /// The checkpoint the next restart starts from.
    pub current: bool,
    /// Written as a checkpoint (`SCR_FLAG_CHECKPOINT`).
    pub checkpoint: bool,
    /// Written as output (`SCR_FLAG_OUTPUT`).
    pub(crate) output: bool,
    /// The number of processes that wrote it.
    pub(crate) ranks: u32,
    /// Its files over all ranks.
    pub(crate) files: u64,
    /// Its size over all ranks, in bytes.
    pub(crate) bytes: u64,
}

/// The listing of a prefix, newest dataset first.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    /// The prefix directory listed.
    pub(crate) prefix: String,
    /// The name of the checkpoint a restart starts from, if any.
    pub(crate) current: Option<String>,
    /// One row per indexed dataset, newest first.
    pub datasets: Vec<Row>,
}

/// Read the index (a missing one lists nothing; a damaged one is an error).
pub fn list(layout: &Layout) -> OpResult<Listing> {
    let ix = Index::load(&layout.index())?;
    // the entry a restart starts from: several entries may carry the current name (a
    // checkpoint written again after a restart from an older one); only the newest usable
    // one is current
    let current = ix.current.as_deref().and_then(|c| {
        ix.datasets.values().rev().find(|e| e.desc.name == c && e.complete && !e.failed && e.desc.checkpoint)
    });
    let current = current.map(|e| e.desc.id);
    let datasets = ix
        .datasets
        .values()
        .rev()
        .map(|e| Row {
            id: e.desc.id,
            name: e.desc.name.clone(),
            valid: e.complete && !e.failed,
            complete: e.complete,
            failed: e.failed,
            superseded_by: e.superseded_by,
            flushing: e.flushing,
            flushed: e.flushed.clone(),
            current: current == Some(e.desc.id),
            checkpoint: e.desc.checkpoint,
            output: e.desc.output,
            ranks: e.desc.ranks,
            files: e.desc.files,
            bytes: e.desc.size,
        })
        .collect();
    Ok(Listing { prefix: layout.prefix.path.display().to_string(), current: ix.current, datasets })
}

/// The table of user guide 2.10 (with the dataset id, which `--build` takes, in front).
pub fn table(l: &Listing) -> String {
    let mut out = format!("{:>6} {:<5} {:<19} {:<3} {}\n", "DSET", "VALID", "FLUSHED", "CUR", "NAME");
    for r in &l.datasets {
        let note = match (r.complete, r.failed, r.flushing) {
            (_, true, _) if r.superseded_by.is_some() => {
                format!("  (superseded: dataset {} was flushed over its files)", r.superseded_by.unwrap_or_default())
            }
            (_, true, _) => "  (a restart from it failed)".into(),
            (false, _, true) => "  (flush or scavenge did not finish)".into(),
            (false, _, false) => "  (incomplete)".into(),
            _ => String::new(),
        };
        out += &format!(
            "{:>6} {:<5} {:<19} {:<3} {}{note}\n",
            r.id,
            if r.valid { "YES" } else { "NO" },
            r.flushed.as_deref().unwrap_or("-"),
            if r.current { "*" } else { "" },
            r.name
        );
    }
    if l.datasets.is_empty() {
        out += "(no datasets in the index)\n";
    }
    out
}

/// `--current NAME`: restart from this checkpoint next (it must be a valid checkpoint).
pub fn set_current(layout: &Layout, name: &str) -> OpResult<u64> {
    Index::try_update(&layout.index(), |ix| -> OpResult<u64> {
        let e = ix.by_name(name).ok_or_else(|| not_found(name))?;
        if !e.desc.checkpoint {
            return Err(OpError::failed(format!(
                "{name} is an output dataset, not a checkpoint; a restart cannot use it"
            )));
        }
        if e.failed {
            return Err(OpError::failed(format!(
                "{name} (dataset {}) is marked failed (a restart from it failed); a restart never uses it",
                e.desc.id
            )));
        }
        if !e.complete {
            return Err(OpError::failed(format!(
                "{name} (dataset {}) is incomplete in the prefix; a restart never uses it (scr_index --build {} may \
                 complete it)",
                e.desc.id, e.desc.id
            )));
        }
        let id = e.desc.id;
        ix.current = Some(name.to_string());
        Ok(id)
    })?
}

/// `--drop NAME`: forget the newest entry called `NAME` (its files stay; its directory is
/// marked so a rebuild of the index does not bring it back).
pub fn drop(layout: &Layout, name: &str) -> OpResult<u64> {
    let id = Index::try_update(&layout.index(), |ix| -> OpResult<u64> {
        let id = ix.by_name(name).map(|e| e.desc.id).ok_or_else(|| not_found(name))?;
        ix.datasets.remove(&id);
        if ix.current.as_deref() == Some(name) {
            ix.current = None;
        }
        Ok(id)
    })??;
    recover::mark_dropped(&layout.index(), id, true).map_err(|e| {
        OpError::failed(format!("dataset {id} was dropped from the index, but marking its directory failed: {e}"))
    })?;
    Ok(id)
}

/// `--drop-after NAME`: forget every entry newer than the newest called `NAME` (their files
/// stay), so the next restart cannot pick one of them. Returns the dropped ids and names, oldest
/// first, and whether the current mark was among them (it is then cleared).
pub fn drop_after(layout: &Layout, name: &str) -> OpResult<(Vec<(u64, String)>, bool)> {
    let dropped = Index::try_update(&layout.index(), |ix| -> OpResult<(Vec<(u64, String)>, bool)> {
        let id = ix.by_name(name).map(|e| e.desc.id).ok_or_else(|| not_found(name))?;
        let later: Vec<(u64, String)> = ix.datasets.range(id + 1..).map(|(i, e)| (*i, e.desc.name.clone())).collect();
        for (i, _) in &later {
            ix.datasets.remove(i);
        }
        let current_dropped = ix.current.as_ref().is_some_and(|c| later.iter().any(|(_, n)| n == c));
        if current_dropped {
            ix.current = None;
        }
        Ok((later, current_dropped))
    })??;
    // marked in their directories, so a rebuild of the index does not bring them back
    for (id, _) in &dropped.0 {
        recover::mark_dropped(&layout.index(), *id, true).map_err(|e| {
            OpError::failed(format!("dataset {id} was dropped from the index, but marking its directory failed: {e}"))
        })?;
    }
    Ok(dropped)
}

/// `--add NAME`: index a dataset whose `summary.scr` and `rank2file.scr` are in its dataset
/// directory and whose files are all in place (sizes checked; fetch checks CRC32s).
pub fn add(layout: &Layout, name: &str) -> OpResult<u64> {
    let ix = Index::load(&layout.index())?;
    let scr = layout.scr_dir();
    let mut found: Option<(u64, Summary)> = None;
    let mut scavenged: Option<u64> = None;
    for id in dataset_ids(&scr)? {
        match Summary::load(&layout.summary(id)) {
            Ok(Some(s)) if s.desc.name == name => {
                if found.as_ref().is_none_or(|(fid, _)| id > *fid) {
                    found = Some((id, s));
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                if crate::transfer::build::scanned_name(layout, id).as_deref() == Some(name) {
                    scavenged = Some(id);
                }
            }
            Err(e) => eprintln!("scr_index: warning: {e}"),
        }
    }
    let Some((id, summary)) = found else {
        return Err(match scavenged {
            Some(id) => OpError::failed(format!(
                "{name} (dataset {id}) was scavenged but never built: its summary is missing; run scr_index --build {id}"
            )),
            None => OpError::failed(format!(
                "no dataset named {name} in {}: no scr.dataset.<id>/summary.scr names it",
                scr.display()
            )),
        });
    };
    if let Some(e) = ix.datasets.get(&id) {
        if e.complete {
            return Err(OpError::failed(format!("{name} (dataset {id}) is already in the index")));
        }
    }
    let r2f_path = layout.rank2file(id);
    let r2f = Rank2File::load(&r2f_path)?
        .ok_or_else(|| OpError::failed(format!("{} is missing; run scr_index --build {id}", r2f_path.display())))?;
    let mut missing = crate::transfer::build::missing_files(layout, &r2f);
    missing.extend(summary.desc.missing_shared(&layout.prefix.path));
    if !missing.is_empty() {
        return Err(OpError::failed(format!(
            "{name} (dataset {id}) is not complete in the prefix: {}; run scr_index --build {id} to rebuild what \
             redundancy data allows",
            missing.join("; ")
        )));
    }
    let flushed = std::fs::metadata(layout.summary(id))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| crate::identity::iso_time(d.as_secs() as i64));
    let _ = recover::mark_dropped(&layout.index(), id, false);
    Index::update(&layout.index(), |ix| {
        ix.datasets.insert(id, complete_entry(summary.desc.clone(), flushed));
    })?;
    Ok(id)
}

/// The ids of the `scr.dataset.<id>` directories in `.scr`, ascending.
pub(crate) fn dataset_ids(scr: &Path) -> OpResult<Vec<u64>> {
    let rd = std::fs::read_dir(scr).map_err(|e| OpError::failed(format!("cannot read {}: {e}", scr.display())))?;
    let mut ids: Vec<u64> =
        rd.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix("scr.dataset.")?.parse().ok()).collect();
    ids.sort_unstable();
    Ok(ids)
}

fn not_found(name: &str) -> OpError {
    OpError::failed(format!("no dataset named {name} in the index (scr_index lists them)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::Prefix;
    use crate::state::dataset::DatasetDesc;

    fn desc(id: u64, name: &str) -> DatasetDesc {
        DatasetDesc { size: 10, files: 2, ..DatasetDesc::sample(id, name, 2) }
    }

    fn layout() -> (tempfile::TempDir, Layout) {
        let d = tempfile::tempdir().unwrap();
        let l = Layout::prefix_only(Prefix::new(d.path()));
        std::fs::create_dir_all(l.scr_dir()).unwrap();
        (d, l)
    }

    #[test]
    fn list_current_drop() {
        let (_d, l) = layout();
        Index::update(&l.index(), |ix| {
            ix.datasets.insert(1, complete_entry(desc(1, "ckpt.1"), Some("2024-01-01T00:00:00".into())));
            let mut bad = complete_entry(desc(2, "ckpt.2"), None);
            bad.complete = false;
            ix.datasets.insert(2, bad);
            let mut failed = complete_entry(desc(3, "ckpt.3"), Some("2024-01-01T01:00:00".into()));
            failed.failed = true;
            ix.datasets.insert(3, failed);
        })
        .unwrap();
        assert_eq!(set_current(&l, "ckpt.1").unwrap(), 1);
        let e = set_current(&l, "ckpt.2").unwrap_err().to_string();
        assert!(e.contains("incomplete"), "{e}");
        assert!(set_current(&l, "ckpt.3").unwrap_err().to_string().contains("failed"));
        assert!(set_current(&l, "nope").unwrap_err().to_string().contains("no dataset named nope"));
        let listing = list(&l).unwrap();
        assert_eq!(listing.datasets.iter().map(|r| r.id).collect::<Vec<_>>(), vec![3, 2, 1]);
        assert_eq!(listing.current.as_deref(), Some("ckpt.1"));
        let t = table(&listing);
        assert!(t.lines().any(|l| l.contains("ckpt.1") && l.contains("YES") && l.contains('*')), "{t}");
        assert!(t.lines().any(|l| l.contains("ckpt.3") && l.contains("NO") && l.contains("failed")), "{t}");
        assert_eq!(drop(&l, "ckpt.1").unwrap(), 1);
        let listing = list(&l).unwrap();
        assert_eq!(listing.current, None);
        assert_eq!(listing.datasets.len(), 2);
    }

    #[test]
    fn drop_after_forgets_newer_entries_and_their_current_mark() {
        let (_d, l) = layout();
        Index::update(&l.index(), |ix| {
            for id in 1..=4 {
                ix.datasets.insert(id, complete_entry(desc(id, &format!("ckpt.{id}")), None));
            }
            ix.current = Some("ckpt.3".into());
        })
        .unwrap();
        let (dropped, current) = drop_after(&l, "ckpt.2").unwrap();
        assert_eq!(dropped, vec![(3, "ckpt.3".to_string()), (4, "ckpt.4".to_string())]);
        assert!(current);
        let listing = list(&l).unwrap();
        assert_eq!(listing.datasets.iter().map(|r| r.id).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(listing.current, None);
        assert_eq!(drop_after(&l, "ckpt.2").unwrap(), (vec![], false), "nothing newer: nothing to do");
        assert!(drop_after(&l, "ckpt.9").unwrap_err().to_string().contains("no dataset named ckpt.9"));
    }

    #[test]
    fn a_damaged_index_is_rebuilt_and_kept_aside() {
        let (_d, l) = layout();
        Index::update(&l.index(), |ix| {
            ix.datasets.insert(1, complete_entry(desc(1, "ckpt.1"), None));
        })
        .unwrap();
        let mut bytes = std::fs::read(l.index()).unwrap();
        let n = bytes.len();
        bytes[n - 3] ^= 0x20;
        std::fs::write(l.index(), &bytes).unwrap();
        // ckpt.1 has no dataset directory (its entry was all there was): nothing to recover
        assert!(list(&l).unwrap().datasets.is_empty());
        let aside: Vec<_> = std::fs::read_dir(l.scr_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("index.scr.damaged."))
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(std::fs::read(aside[0].path()).unwrap(), bytes, "the damaged copy is kept as it was");
    }

    #[test]
    fn refusals_change_no_file() {
        let (_d, l) = layout();
        assert!(drop(&l, "ckpt.1").is_err());
        assert!(set_current(&l, "ckpt.1").is_err());
        assert!(!l.index().exists(), "a refused change does not create the index");
    }
}
