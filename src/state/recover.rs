//! Rebuilding the prefix index from what the prefix holds. The index (`.scr/index.scr`) is a
//! cache of the dataset directories beside it, never the only record: every flush writes
//! `summary.scr` and `rank2file.scr` into `.scr/scr.dataset.<id>/` before it marks the index
//! entry complete. When the index is damaged (a flipped byte, truncated) or missing while
//! dataset directories exist, [`rebuild`] reads each directory's summary and rank-to-file map,
//! checks that every file listed is in the prefix with its recorded size, and makes one entry
//! per dataset: complete when everything is there, incomplete (never fetched) otherwise. The
//! newest complete checkpoint becomes current. A damaged index is first moved aside to
//! `index.scr.damaged.<seconds since the epoch>` so nothing is lost for a post-mortem.
//!
//! What a rebuild cannot know: which datasets a restart marked failed, the fetch history, and a
//! `current` marker set by hand. A dataset forgotten on purpose (`SCR_Drop`, `scr_index
//! --drop`) carries a `dropped` mark in its directory and is not brought back.

use std::path::{Path, PathBuf};

use super::dataset::DatasetDesc;
use super::summary::{Rank2File, Summary};
use crate::identity;

/// The mark a dropped dataset's directory carries (`.scr/scr.dataset.<id>/dropped`).
pub(crate) const DROPPED: &str = "dropped";

/// A dataset directory a rebuild indexes: its summary's record and whether every file it
/// lists is in the prefix with its recorded size.
#[derive(Debug)]
pub struct Found {
    /// The dataset id (`scr.dataset.<id>`).
    pub id: u64,
    /// The dataset as its summary records it.
    pub desc: DatasetDesc,
    /// Complete when written and every file is in the prefix as recorded.
    pub complete: bool,
    /// When the flush finished (the summary's modification time, ISO).
    pub flushed: Option<String>,
}

/// What a rebuild found: the datasets to index, by id, and one line per dataset directory.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    pub found: Vec<Found>,
    pub notes: Vec<String>,
}

/// The dataset directories of a prefix's `.scr` directory: (id, path), by id.
pub(crate) fn dataset_dirs(scr_dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(scr_dir) else { return Vec::new() };
    let mut out: Vec<(u64, PathBuf)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let id = e.file_name().to_str()?.strip_prefix("scr.dataset.")?.parse().ok()?;
            Some((id, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Whether the dataset directories hold anything a rebuild would index (a summary).
pub(crate) fn anything_to_index(scr_dir: &Path) -> bool {
    dataset_dirs(scr_dir).iter().any(|(_, d)| d.join("summary.scr").exists() && !d.join(DROPPED).exists())
}

/// Read the dataset directories of the prefix whose `.scr` directory is `scr_dir`: what a
/// rebuilt index holds ([`super::index`] makes the index of it).
pub fn rebuild(scr_dir: &Path) -> Rebuilt {
    let prefix = scr_dir.parent().unwrap_or(scr_dir);
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for (id, dir) in dataset_dirs(scr_dir) {
        if dir.join(DROPPED).exists() {
            notes.push(format!("dataset {id}: dropped earlier (SCR_Drop or scr_index --drop), not indexed"));
            continue;
        }
        let summary_path = dir.join("summary.scr");
        let summary = match Summary::load(&summary_path) {
            Ok(Some(s)) => s,
            Ok(None) if dir.join("flush").exists() => {
                notes.push(format!("dataset {id}: its flush never finished, not indexed"));
                continue;
            }
            Ok(None) => {
                notes.push(format!(
                    "dataset {id}: no summary.scr (a scavenge that was not built? try scr_index --build {id}), not indexed"
                ));
                continue;
            }
            Err(e) => {
                notes.push(format!("dataset {id}: {e}; not indexed"));
                continue;
            }
        };
        let problem = match Rank2File::load(&dir.join("rank2file.scr")) {
            Ok(Some(r2f)) => {
                missing_file(prefix, &r2f).or_else(|| summary.desc.missing_shared(prefix).into_iter().next())
            }
            Ok(None) => Some("rank2file.scr is missing".to_string()),
            Err(e) => Some(e.to_string()),
        };
        let desc = summary.desc;
        let complete = desc.complete && problem.is_none();
        notes.push(match &problem {
            None => format!("{} (dataset {id}): complete", desc.name),
            Some(p) => format!("{} (dataset {id}): incomplete, {p}", desc.name),
        });
        let flushed = std::fs::metadata(&summary_path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| identity::iso_time(d.as_secs() as i64));
        found.push(Found { id, desc, complete, flushed });
    }
    Rebuilt { found, notes }
}

/// The first file of `r2f` that is not in the prefix with its recorded size.
fn missing_file(prefix: &Path, r2f: &Rank2File) -> Option<String> {
    for (rank, files) in &r2f.files {
        for f in files {
            let p = match crate::paths::below(prefix, &f.rel) {
                Ok(p) => p,
                Err(e) => return Some(format!("{e} (rank {rank})")),
            };
            if let Some(why) = crate::paths::size_problem(&p, f.size) {
                return Some(format!("{} of rank {rank}: {why}", p.display()));
            }
        }
    }
    if (r2f.files.len() as u32) < r2f.ranks {
        return Some(format!("rank2file.scr lists {} of {} ranks", r2f.files.len(), r2f.ranks));
    }
    None
}

/// Mark dataset `id` of the prefix whose index is `index_path` as dropped on purpose, so a
/// rebuild of the index does not bring it back (nothing to do if it has no directory).
pub(crate) fn mark_dropped(index_path: &Path, id: u64, dropped: bool) -> std::io::Result<()> {
    let dir = index_path.parent().unwrap_or(Path::new(".")).join(format!("scr.dataset.{id}"));
    let mark = dir.join(DROPPED);
    match (dropped, dir.is_dir()) {
        (true, true) => std::fs::write(mark, b"dropped from the index on purpose; a rebuild of the index skips it\n"),
        (false, _) => crate::paths::remove_file_if_exists(&mark).map_err(|e| std::io::Error::other(e.to_string())),
        (true, false) => Ok(()),
    }
}

/// Move a damaged index aside; returns where it went.
pub(crate) fn move_aside(path: &Path) -> Option<PathBuf> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".damaged.{}", identity::now_secs()));
    let to = PathBuf::from(name);
    std::fs::rename(path, &to).ok().map(|_| to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::summary::PrefixFile;

    fn flushed(scr: &Path, id: u64, name: &str, ranks: u32, data: &[u8]) {
        let prefix = scr.parent().unwrap();
        let dir = scr.join(format!("scr.dataset.{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r2f = Rank2File { ranks, ..Default::default() };
        for r in 0..ranks {
            let rel = PathBuf::from(format!("{name}/rank_{r}"));
            std::fs::create_dir_all(prefix.join(name)).unwrap();
            std::fs::write(prefix.join(&rel), data).unwrap();
            r2f.files.insert(r, vec![PrefixFile { rel, size: data.len() as u64, crc: None, link: None }]);
        }
        r2f.save(&dir.join("rank2file.scr")).unwrap();
        let desc = DatasetDesc { id, ckpt: Some(id), ..DatasetDesc::sample(id, name, ranks) };
        Summary { desc, scheme: "SINGLE".into() }.save(&dir.join("summary.scr")).unwrap();
    }

    #[test]
    fn complete_incomplete_dropped_and_unsummarised_directories() {
        let d = tempfile::tempdir().unwrap();
        let scr = d.path().join(".scr");
        flushed(&scr, 2, "ckpt.2", 2, b"abc");
        flushed(&scr, 4, "ckpt.4", 2, b"abcd");
        flushed(&scr, 6, "ckpt.6", 2, b"abcdef");
        std::fs::remove_file(d.path().join("ckpt.6/rank_1")).unwrap();
        flushed(&scr, 7, "ckpt.7", 2, b"x");
        std::fs::write(scr.join("scr.dataset.7").join(DROPPED), b"").unwrap();
        std::fs::create_dir_all(scr.join("scr.dataset.8/flush")).unwrap();
        let r = rebuild(&scr);
        let got: Vec<(u64, bool)> = r.found.iter().map(|f| (f.id, f.complete)).collect();
        assert_eq!(got, vec![(2, true), (4, true), (6, false)]);
        let notes = r.notes.join("\n");
        assert!(notes.contains("ckpt.6 (dataset 6): incomplete") && notes.contains("rank_1 of rank 1"), "{notes}");
        assert!(
            notes.contains("dataset 7: dropped") && notes.contains("dataset 8: its flush never finished"),
            "{notes}"
        );
        assert!(anything_to_index(&scr));
    }
}
