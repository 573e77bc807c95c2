//! The directory layout (user guide 2.3.3-2.3.4): control and cache directories derived from
//! their bases, the user and the job id; the prefix's hidden `.scr` directory with the index,
//! the halt file and one `scr.dataset.<id>` directory per flushed dataset.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths::Prefix;

/// Where a job's files are: its prefix, its control directory and (for the in-process tests)
/// its simulated nodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Layout {
    /// The prefix directory (`SCR_PREFIX`).
    pub prefix: Prefix,
    /// The user name in the control and cache paths.
    pub user: String,
    /// The job id in the control and cache paths.
    pub(crate) jobid: String,
    /// `<cntl_base>/<user>/scr.<jobid>`
    pub(crate) cntl_dir: PathBuf,
    /// Simulated nodes (the runtime's in-process tests): node-local paths (control and cache
    /// directories) are taken below this directory, one per node, as distinct storage would
    /// be on distinct machines. `None` on a real run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) node_root: Option<PathBuf>,
}

impl Layout {
    pub(crate) fn new(prefix: Prefix, cntl_base: &Path, user: &str, jobid: &str) -> Layout {
        let cntl_dir = cntl_base.join(user).join(format!("scr.{jobid}"));
        Layout { prefix, user: user.to_string(), jobid: jobid.to_string(), cntl_dir, node_root: None }
    }

    /// This layout with its node-local paths below `root` (see [`Layout::node_root`]).
    pub(crate) fn on_node(mut self, root: &Path) -> Layout {
        self.node_root = Some(root.to_path_buf());
        self.cntl_dir = self.node_local(&self.cntl_dir);
        self
    }

    /// A node-local path as this process sees it (below [`Layout::node_root`] when set).
    fn node_local(&self, p: &Path) -> PathBuf {
        match &self.node_root {
            Some(root) if !p.starts_with(root) => root.join(p.strip_prefix("/").unwrap_or(p)),
            _ => p.to_path_buf(),
        }
    }

    /// The prefix side only, for commands that never touch node-local storage (`scr_halt`,
    /// `scr_index`): the control directory is left empty.
    pub(crate) fn prefix_only(prefix: Prefix) -> Layout {
        Layout { prefix, user: String::new(), jobid: String::new(), cntl_dir: PathBuf::new(), node_root: None }
    }

    /// `<prefix>/.scr`
    pub(crate) fn scr_dir(&self) -> PathBuf {
        self.prefix.path.join(crate::paths::SCR_DIR)
    }

    /// The cache directory of a store: `<base>/<user>/scr.<jobid>`.
    pub(crate) fn store_dir(&self, base: &Path) -> PathBuf {
        self.node_local(base).join(&self.user).join(format!("scr.{}", self.jobid))
    }

    /// A dataset's directory in a store.
    pub(crate) fn cache_dataset_dir(&self, base: &Path, id: u64) -> PathBuf {
        self.store_dir(base).join(format!("scr.dataset.{id}"))
    }

    pub(crate) fn filemap(&self, rank: i32) -> PathBuf {
        self.cntl_dir.join(format!("filemap_{rank}.scrinfo"))
    }

    /// The rank filemaps present in the control directory: (rank, path), by rank.
    pub(crate) fn filemaps(&self) -> Vec<(i32, PathBuf)> {
        let Ok(rd) = std::fs::read_dir(&self.cntl_dir) else { return Vec::new() };
        let mut out: Vec<(i32, PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let rank = name.strip_prefix("filemap_")?.strip_suffix(".scrinfo")?.parse().ok()?;
                Some((rank, e.path()))
            })
            .collect();
        out.sort();
        out
    }

    pub(crate) fn flush_file(&self) -> PathBuf {
        self.cntl_dir.join("flush.scr")
    }

    /// `<prefix>/.scr/index.scr`
    pub(crate) fn index(&self) -> PathBuf {
        self.scr_dir().join("index.scr")
    }

    /// `<prefix>/.scr/halt.scr`
    pub fn halt(&self) -> PathBuf {
        self.scr_dir().join("halt.scr")
    }

    /// `<prefix>/.scr/scr.dataset.<id>`
    pub(crate) fn prefix_dataset_dir(&self, id: u64) -> PathBuf {
        self.scr_dir().join(format!("scr.dataset.{id}"))
    }

    pub(crate) fn summary(&self, id: u64) -> PathBuf {
        self.prefix_dataset_dir(id).join("summary.scr")
    }

    pub(crate) fn rank2file(&self, id: u64) -> PathBuf {
        self.prefix_dataset_dir(id).join("rank2file.scr")
    }

    /// A rank's scavenged filemap: `<prefix>/.scr/scr.dataset.<id>/<rank>.scrfilemap`.
    pub(crate) fn rank_filemap(&self, id: u64, rank: u32) -> PathBuf {
        self.prefix_dataset_dir(id).join(super::rankfile::file_name(rank))
    }

    /// Where the writers of shared file `rel` (below the prefix) write it until its dataset
    /// completes: `<prefix>/<dir>/.<name>.scrshared` beside it. The name depends on `rel`
    /// alone, so ranks that open it before any dataset exists (transparent mode) find the same.
    pub(crate) fn shared_staging(&self, rel: &Path) -> PathBuf {
        shared_staging_name(&self.prefix.join(rel))
    }

    /// The run record `scr_run` keeps: `<prefix>/.scr/run.scr`.
    pub(crate) fn run_file(&self) -> PathBuf {
        self.scr_dir().join("run.scr")
    }
}

/// The staging name of a shared file at `at`: `.<name>.scrshared` beside it (shortened with
/// a hash when too long, see [`crate::paths::temp_name`]).
pub(crate) fn shared_staging_name(at: &Path) -> PathBuf {
    crate::paths::temp_name(at, crate::paths::STAGING_SUFFIX)
}

/// The shared file whose staging name `staging` is ([`shared_staging_name`] reversed; for a
/// shortened name, the shortened form, which names no file).
pub(crate) fn shared_of_staging(staging: &Path) -> Option<PathBuf> {
    let name = staging.file_name()?.to_str()?;
    let real = name.strip_prefix('.')?.strip_suffix(crate::paths::STAGING_SUFFIX).filter(|n| !n.is_empty())?;
    Some(staging.with_file_name(real))
}
