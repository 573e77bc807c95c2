//! The flush file (`flush.scr` in the control directory): where each cached dataset stands
//! with respect to the prefix. `FLUSHING` is written before a flush starts and replaced by
//! `PFS` once the index says the dataset is complete there, so a crash during a flush is
//! visible to the next run and to scavenge.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::persist::{self, MetaError};

const KIND: &str = "flush";

/// Where a dataset's files are, as far as flushing goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Location {
    /// Only in cache.
    Cache,
    /// A flush started and has not finished.
    Flushing,
    /// Complete in the prefix (and maybe still in cache).
    Pfs,
}

/// One dataset of the flush file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushEntry {
    /// The dataset's name.
    pub(crate) name: String,
    /// Where its files are.
    pub location: Location,
    /// A checkpoint (`SCR_FLAG_CHECKPOINT`).
    pub(crate) checkpoint: bool,
    /// Output (`SCR_FLAG_OUTPUT`): it must reach the prefix.
    pub(crate) output: bool,
}

/// The flush file (`<control dir>/flush.scr`): which cached datasets are in the prefix, and which
/// flush was interrupted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlushFile {
    /// The datasets in cache, by id.
    pub datasets: BTreeMap<u64, FlushEntry>,
}

impl FlushFile {
    /// Read the flush file at `path` (missing: empty; damaged: an error naming it).
    pub fn load(path: &Path) -> Result<FlushFile, MetaError> {
        Ok(persist::read(path, KIND)?.unwrap_or_default())
    }

    /// Write it to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }

    /// [`FlushFile::save`] by the node leader, which alone writes its node's flush file while it
    /// runs (under the runtime's lock; twice per transparent-mode completion): through the spare
    /// file beside it ([`persist::write_swapped`]).
    pub(crate) fn save_by_leader(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_swapped(path, KIND, self)
    }

    pub(crate) fn location(&self, id: u64) -> Option<Location> {
        self.datasets.get(&id).map(|e| e.location)
    }
}
