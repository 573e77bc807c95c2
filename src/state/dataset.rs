//! The dataset descriptor: what SCR knows of one dataset, recorded in filemaps, the index and
//! the summary file (the `DSETDESC` of the SCR internals), with the dataset's shared files.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A file several ranks wrote together in one output phase (`SCR_Route_shared_file`): it is
/// written once, directly in the prefix, and belongs to the whole dataset rather than to a
/// rank. While the phase is open each writer records its own declaration (size and CRC32 not
/// known yet); at completion every rank records the agreed list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SharedFile {
    /// Its name below the prefix.
    #[serde(with = "crate::paths::rel_field")]
    pub(crate) rel: PathBuf,
    /// The ranks that wrote it.
    pub(crate) writers: Vec<u32>,
    /// Its size in bytes (known once the phase completes).
    pub(crate) size: u64,
    /// Its CRC32, if computed (`SCR_CRC_ON_FLUSH`, `SCR_CRC_ON_COPY`).
    pub(crate) crc: Option<u32>,
}

/// One checkpoint and/or output dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetDesc {
    /// Dataset id: 1, 2, 3, ... across the job's runs.
    pub(crate) id: u64,
    /// Checkpoint id (counts checkpoints only), if the dataset is a checkpoint.
    pub(crate) ckpt: Option<u64>,
    /// The name given to `SCR_Start_output`.
    pub name: String,
    /// Started with `SCR_FLAG_CHECKPOINT`: a restart may load it.
    pub(crate) checkpoint: bool,
    /// Started with `SCR_FLAG_OUTPUT`: it must reach the prefix.
    pub(crate) output: bool,
    /// Creation time, microseconds since the epoch.
    pub(crate) created: i64,
    /// The user who wrote it.
    pub user: String,
    /// The resource manager's job name.
    pub(crate) jobname: String,
    /// The job id of the run that wrote it.
    pub(crate) jobid: String,
    /// Number of ranks that wrote it.
    pub(crate) ranks: u32,
    /// Total bytes over all ranks (known once complete).
    pub(crate) size: u64,
    /// Total files over all ranks (known once complete).
    pub(crate) files: u64,
    /// All ranks completed it validly.
    pub(crate) complete: bool,
    /// Its shared files (in the prefix), counted in `size` and `files` once complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) shared: Vec<SharedFile>,
}

impl DatasetDesc {
    /// Its shared files that are not in the prefix `prefix` with their recorded sizes, described.
    pub(crate) fn missing_shared(&self, prefix: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.shared {
            match crate::paths::below(prefix, &f.rel) {
                Err(e) => out.push(format!("shared file {e}")),
                Ok(p) => {
                    if let Some(why) = crate::paths::size_problem(&p, f.size) {
                        out.push(format!("shared file {}: {why}", p.display()));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
impl DatasetDesc {
    /// A complete checkpoint descriptor for unit tests.
    pub(crate) fn sample(id: u64, name: &str, ranks: u32) -> DatasetDesc {
        DatasetDesc {
            id,
            ckpt: Some(id),
            name: name.into(),
            checkpoint: true,
            output: false,
            created: 0,
            user: "u".into(),
            jobname: String::new(),
            jobid: "j".into(),
            ranks,
            size: 0,
            files: 0,
            complete: true,
            shared: Vec::new(),
        }
    }
}
