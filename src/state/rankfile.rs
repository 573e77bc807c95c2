//! The per-rank filemap files scavenge writes next to a copied dataset
//! (`<prefix>/.scr/scr.dataset.<id>/<rank>.scrfilemap`, the "rank filemap file" of the SCR
//! internals): which files one rank wrote for the dataset, with sizes and CRC32s, and its
//! redundancy file with its place in its set. Paths are relative (application files to the
//! prefix, the redundancy file to the dataset directory), so the prefix may be moved; no
//! redundancy descriptor is recorded (it is cache-specific; the redundancy file's own header
//! carries what a rebuild needs).
//!
//! `scr_copy` writes a rank's file after that rank's files are copied and verified, so its
//! presence says "this rank's part arrived"; `scr_index --build` reads them all to find what
//! is missing and writes one for each rank it rebuilds, after checking the rebuilt data.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dataset::DatasetDesc;
use super::redinfo::RedInfo;
use crate::persist::{self, MetaError};

const KIND: &str = "rankfilemap";

/// One application file of the rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankFileEntry {
    /// Relative to the prefix.
    #[serde(with = "crate::paths::rel_field")]
    pub rel: PathBuf,
    pub size: u64,
    pub crc: Option<u32>,
    /// Copied and verified (size, and CRC32 when the cache recorded one).
    pub complete: bool,
}

/// The rank's redundancy file in the dataset directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankRed {
    /// The rank's place in its set; `file` is the name inside the dataset directory.
    pub info: RedInfo,
    pub size: u64,
    pub complete: bool,
}

/// One rank's part of a scavenged dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankFile {
    /// World rank in the run that wrote the dataset.
    pub rank: u32,
    pub desc: DatasetDesc,
    pub files: Vec<RankFileEntry>,
    pub red: Option<RankRed>,
}

impl RankFile {
    pub fn load(path: &Path) -> Result<Option<RankFile>, MetaError> {
        let rf: Option<RankFile> = persist::read(path, KIND)?;
        // the redundancy file is named inside the dataset directory: one component
        if let Some(red) = rf.as_ref().and_then(|f| f.red.as_ref()) {
            let f = &red.info.file;
            let why =
                crate::paths::rel_problem(f).or((f.components().count() != 1).then_some("not a single file name"));
            if let Some(why) = why {
                return Err(MetaError::Damaged {
                    path: path.to_path_buf(),
                    why: format!("redundancy file: unsafe path {:?} ({why})", f.as_os_str()),
                });
            }
        }
        Ok(rf)
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }
}

/// The file name of a rank's filemap in a dataset directory.
pub fn file_name(rank: u32) -> String {
    format!("{rank}.scrfilemap")
}

/// The rank a file name in a dataset directory belongs to, if it is a rank filemap.
pub(crate) fn rank_of(name: &str) -> Option<u32> {
    name.strip_suffix(".scrfilemap")?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::file_name(12), "12.scrfilemap");
        assert_eq!(super::rank_of("12.scrfilemap"), Some(12));
        assert_eq!(super::rank_of("x.scrfilemap"), None);
        assert_eq!(super::rank_of("summary.scr"), None);
    }
}
