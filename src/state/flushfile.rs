//! The flush file (`flush.scr` in the control directory): where each cached dataset stands
//! with respect to the prefix. `FLUSHING` is written before a flush starts and replaced by
//! `PFS` once the index says the dataset is complete there, so a crash during a flush is
//! visible to the next run and to scavenge.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::persist::{self, MetaError};

const KIND: &str = "flush";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Location {
    /// Only in cache.
    Cache,
    /// A flush started and has not finished.
    Flushing,
    /// Complete in the prefix (and maybe still in cache).
    Pfs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushEntry {
    pub name: String,
    pub location: Location,
    pub checkpoint: bool,
    pub output: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlushFile {
    pub datasets: BTreeMap<u64, FlushEntry>,
}

impl FlushFile {
    pub fn load(path: &Path) -> Result<FlushFile, MetaError> {
        Ok(persist::read(path, KIND)?.unwrap_or_default())
    }

    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }

    pub fn location(&self, id: u64) -> Option<Location> {
        self.datasets.get(&id).map(|e| e.location)
    }
}
