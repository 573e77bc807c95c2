//! The dataset descriptor: what SCR knows of one dataset, recorded in filemaps, the index and
//! the summary file (the `DSETDESC` of the SCR internals).

use serde::{Deserialize, Serialize};

/// One checkpoint and/or output dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetDesc {
    /// Dataset id: 1, 2, 3, ... across the job's runs.
    pub id: u64,
    /// Checkpoint id (counts checkpoints only), if the dataset is a checkpoint.
    pub ckpt: Option<u64>,
    /// The name given to `SCR_Start_output`.
    pub name: String,
    pub checkpoint: bool,
    pub output: bool,
    /// Creation time, microseconds since the epoch.
    pub created: i64,
    pub user: String,
    pub jobname: String,
    pub jobid: String,
    /// Number of ranks that wrote it.
    pub ranks: u32,
    /// Total bytes over all ranks (known once complete).
    pub size: u64,
    /// Total files over all ranks (known once complete).
    pub files: u64,
    /// All ranks completed it validly.
    pub complete: bool,
}

impl DatasetDesc {
    /// The flags word as `SCR_Start_output` received it.
    pub fn flags_text(&self) -> &'static str {
        match (self.checkpoint, self.output) {
            (true, true) => "CHECKPOINT|OUTPUT",
            (true, false) => "CHECKPOINT",
            (false, true) => "OUTPUT",
            (false, false) => "NONE",
        }
    }
}

#[cfg(test)]
impl DatasetDesc {
    /// A complete checkpoint descriptor for unit tests.
    pub fn sample(id: u64, name: &str, ranks: u32) -> DatasetDesc {
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
        }
    }
}
