//! The per-dataset files in the prefix (`.scr/scr.dataset.<id>/`): `summary.scr` (the dataset
//! descriptor as flushed) and `rank2file.scr` (each rank's files with size and CRC32, which
//! fetch and `scr_index` verify against, and the hard links among them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dataset::DatasetDesc;
use crate::persist::{self, MetaError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub desc: DatasetDesc,
    /// The redundancy scheme applied in cache when it was written.
    pub scheme: String,
}

/// One file in the prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PrefixFile {
    /// Relative to the prefix.
    #[serde(with = "crate::paths::rel_field")]
    pub rel: PathBuf,
    pub size: u64,
    pub crc: Option<u32>,
    /// An earlier file of the same rank and dataset this one is a hard link of (in the prefix
    /// as in cache: the flush links it rather than copying the bytes again, and the fetch
    /// links the cached copies alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<crate::paths::RelPath>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rank2File {
    pub ranks: u32,
    pub files: BTreeMap<u32, Vec<PrefixFile>>,
}

impl Summary {
    pub fn load(path: &Path) -> Result<Option<Summary>, MetaError> {
        persist::read(path, "summary")
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, "summary", self)
    }
}

impl Rank2File {
    pub fn load(path: &Path) -> Result<Option<Rank2File>, MetaError> {
        persist::read(path, "rank2file")
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, "rank2file", self)
    }
}
