//! A rank's CRC32s of a SINGLE dataset, computed after `SCR_Complete_output` returned
//! (`<dataset cache dir>/.scr/crc.<rank>.scr`). PARTNER/XOR/RS record CRC32s while they
//! encode and a flush while it copies; a SINGLE dataset that is not flushed gets them from the
//! background checksum of the runtime, which writes this file (atomically, once every file is
//! done) and later copies the values into the rank's filemap. If the run dies in between, the
//! next `SCR_Init` takes them from here. The file lives and dies with the dataset's directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::filemap::DatasetRecord;
use crate::persist::{self, MetaError};

const KIND: &str = "crcs";

/// One file's size and CRC32 as the background checksum read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FileCrc {
    /// Relative to the prefix (the application's name).
    #[serde(with = "crate::paths::rel_field")]
    pub rel: PathBuf,
    pub size: u64,
    pub crc: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Crcs {
    pub dataset: u64,
    pub files: Vec<FileCrc>,
}

impl Crcs {
    /// Where rank `rank` keeps the CRC32s of its part of the dataset cached in `dir`.
    pub fn path(dir: &Path, rank: i32) -> PathBuf {
        dir.join(crate::paths::SCR_DIR).join(format!("crc.{rank}.scr"))
    }

    pub fn load(path: &Path) -> Result<Option<Crcs>, MetaError> {
        persist::read(path, KIND)
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| MetaError::Io {
                op: "create directory",
                path: parent.to_path_buf(),
                source,
            })?;
        }
        persist::write_atomic(path, KIND, self)
    }

    /// Fill in the CRC32s `rec` lacks from these (a file whose name or size differs is left
    /// alone); returns how many were filled.
    pub fn apply(&self, rec: &mut DatasetRecord) -> usize {
        if self.dataset != rec.desc.id {
            return 0;
        }
        // (by name in a map: a search per file made N files O(N^2))
        let mut by_rel: std::collections::HashMap<&Path, &FileCrc> = std::collections::HashMap::new();
        for c in &self.files {
            by_rel.entry(c.rel.as_path()).or_insert(c);
        }
        let mut n = 0;
        for f in rec.files.iter_mut().filter(|f| f.crc.is_none()) {
            if let Some(c) = by_rel.get(f.rel.as_path()).filter(|c| c.size == f.size) {
                f.crc = Some(c.crc);
                n += 1;
            }
        }
        n
    }
}
