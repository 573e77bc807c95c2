//! The filemap: each rank's record of its cached datasets and their files, in the control
//! directory (`filemap_<rank>.scrinfo`).
//!
//! Crash story: the dataset is recorded (incomplete) before the first file is routed, every
//! routed file is recorded before the application creates it, and the dataset is marked
//! complete only after `SCR_Complete_output` agreed it is valid on every rank. A run killed
//! anywhere in between leaves an incomplete record, and the next `SCR_Init` deletes exactly
//! the files it names.
//!
//! Deleting a cached dataset moves its record to [`Filemap::deleting`] first, on every rank,
//! and only then removes its files (in the background): a record there is never offered for
//! restart, and a run killed in between leaves it there, so the next `SCR_Init` finishes the
//! deletion on every rank instead of finding a dataset with part of its files gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dataset::DatasetDesc;
use super::redinfo::RedInfo;
use crate::desc::RedDesc;
use crate::persist::{self, MetaError};

const KIND: &str = "filemap";

/// One file of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Path relative to the prefix (the application's name for it).
    #[serde(with = "crate::paths::rel_field")]
    pub rel: PathBuf,
    /// Where the bytes are: in the cache, or in the prefix for bypass datasets.
    pub path: PathBuf,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its CRC32, once computed.
    pub(crate) crc: Option<u32>,
    /// Closed and sized in `SCR_Complete_output` (or fetched and verified).
    pub(crate) complete: bool,
}

/// One dataset as this rank holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetRecord {
    /// The dataset as every rank records it.
    pub desc: DatasetDesc,
    /// The redundancy descriptor it was written with.
    pub(crate) reddesc: RedDesc,
    /// The dataset's cache directory (also used in bypass for SCR's own files).
    pub(crate) dir: PathBuf,
    /// This rank's files of it.
    pub files: Vec<FileMeta>,
    /// This rank's part is complete and valid.
    pub complete: bool,
    /// The redundancy applied to this rank's part (none: SINGLE, or bypass).
    #[serde(default)]
    pub red: Option<RedInfo>,
}

impl DatasetRecord {
    pub(crate) fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Every file this rank's part keeps in cache: its data files (not bypass files in the
    /// prefix), then its redundancy file.
    pub(crate) fn cached_paths(&self) -> Vec<&Path> {
        let data = self.files.iter().filter(|f| f.path.starts_with(&self.dir)).map(|f| f.path.as_path());
        data.chain(self.red.as_ref().map(|r| r.file.as_path())).collect()
    }

    /// The file routed as `rel`, if any.
    pub(crate) fn file(&self, rel: &Path) -> Option<&FileMeta> {
        self.files.iter().find(|f| f.rel == rel)
    }
}

/// A rank's filemap.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filemap {
    /// The datasets this rank holds, by id.
    pub datasets: BTreeMap<u64, DatasetRecord>,
    /// Datasets being deleted: marked here before any of their files is removed.
    #[serde(default)]
    pub(crate) deleting: BTreeMap<u64, DatasetRecord>,
}

impl Filemap {
    /// Read the filemap at `path` (a missing file is an empty filemap; a damaged one an error
    /// naming it).
    pub fn load(path: &Path) -> Result<Filemap, MetaError> {
        Ok(persist::read(path, KIND)?.unwrap_or_default())
    }

    /// Write it to `path` atomically ([`persist::write_atomic`]).
    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }

    /// Mark dataset `id` as being deleted (its record leaves [`Filemap::datasets`]); false if
    /// this rank holds no record of it.
    pub(crate) fn mark_deleting(&mut self, id: u64) -> bool {
        match self.datasets.remove(&id) {
            Some(rec) => {
                self.deleting.insert(id, rec);
                true
            }
            None => false,
        }
    }

    /// The highest dataset and checkpoint ids recorded, datasets being deleted included.
    pub(crate) fn max_ids(&self) -> (u64, u64) {
        let all = || self.datasets.values().chain(self.deleting.values());
        (all().map(|r| r.desc.id).max().unwrap_or(0), all().filter_map(|r| r.desc.ckpt).max().unwrap_or(0))
    }

    /// The newest dataset with this name.
    pub(crate) fn by_name(&self, name: &str) -> Option<&DatasetRecord> {
        self.datasets.values().rev().find(|d| d.desc.name == name)
    }
}
