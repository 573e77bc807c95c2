//! The filemap: each rank's record of its cached datasets and their files, in the control
//! directory (`filemap_<rank>.scrinfo`).
//!
//! Crash story: the dataset is recorded (incomplete) before the first file is routed, every
//! routed file is recorded before the application creates it (in the [`RoutesLog`] beside the
//! filemap, which [`Filemap::load`] adds to the record), and the dataset is marked complete
//! only after `SCR_Complete_output` agreed it is valid on every rank. A run killed anywhere in
//! between leaves an incomplete record, and the next `SCR_Init` deletes its directory, and
//! carries to a rank's new node or removes exactly the files it names.
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
    /// naming it), with the names of its [`RoutesLog`] added to the incomplete record they
    /// were routed in.
    pub fn load(path: &Path) -> Result<Filemap, MetaError> {
        let mut fm: Filemap = persist::read(path, KIND)?.unwrap_or_default();
        fm.add_logged_routes(&routes_path(path));
        Ok(fm)
    }

    /// Add the names of the routes log at `log` to its dataset's record, if that record is
    /// incomplete and in cache (not bypass); a name already recorded, one that is not a safe
    /// relative path, or a line cut short by a crash is skipped.
    fn add_logged_routes(&mut self, log: &Path) {
        let Ok(bytes) = std::fs::read(log) else { return };
        let text = String::from_utf8_lossy(&bytes);
        let mut lines = text.lines();
        let header = lines.next().and_then(|h| h.strip_prefix(ROUTES_HEADER));
        let Some(id) = header.and_then(|h| h.trim().parse::<u64>().ok()) else { return };
        let Some(rec) = self.datasets.get_mut(&id).filter(|r| !r.complete && !r.reddesc.bypass) else { return };
        let mut known: std::collections::HashSet<PathBuf> = rec.files.iter().map(|f| f.rel.clone()).collect();
        for line in lines {
            let Ok(rel) = serde_json::from_str::<String>(line).map(PathBuf::from) else { continue };
            if crate::paths::rel_problem(&rel).is_some() || !known.insert(rel.clone()) {
                continue;
            }
            rec.files.push(FileMeta { path: rec.dir.join(&rel), rel, size: 0, crc: None, complete: false });
        }
    }

    /// Write it to `path` atomically ([`persist::write_atomic`]).
    pub fn save(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_atomic(path, KIND, self)
    }

    /// [`Filemap::save`] of a rank's own filemap by its process, which alone writes it while it
    /// runs (under the runtime's lock): through the spare file beside it
    /// ([`persist::write_swapped`]; a transparent-mode completion saves it three times).
    pub(crate) fn save_own(&self, path: &Path) -> Result<(), MetaError> {
        persist::write_swapped(path, KIND, self)
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

/// The first line of a [`RoutesLog`], followed by the dataset's id.
const ROUTES_HEADER: &str = "SCRROUTES 1 ";

/// Remove the files kept beside the filemap at `filemap`, its routes log ([`routes_path`]) and
/// its spare ([`persist::spare_path`]), when the filemap is removed or rewritten by another
/// rank than its own (best effort: a leftover is stale, never read as the filemap).
pub(crate) fn remove_companions(filemap: &Path) {
    let _ = crate::paths::remove_file_if_exists(&routes_path(filemap));
    let _ = crate::paths::remove_file_if_exists(&persist::spare_path(filemap));
}

/// The routes log of the filemap at `filemap` (`filemap_<rank>.scrinfo.routes`).
pub(crate) fn routes_path(filemap: &Path) -> PathBuf {
    let mut p = filemap.as_os_str().to_os_string();
    p.push(".routes");
    PathBuf::from(p)
}

/// The names `SCR_Route_file` recorded in a rank's open output dataset, one JSON string per
/// line after a header naming the dataset, appended before the application creates each
/// file. Saving the whole filemap at each route (as C SCR does) writes O(N^2) bytes for N
/// files; this writes N lines, and [`Filemap::load`] puts them back into the incomplete
/// record, so a crash leaves on disk what a save per route would have. It is redundant once
/// the filemap is saved with the dataset's files ([`RoutesLog::end`]); a log left behind
/// names a dataset that is complete or gone, and is ignored.
#[derive(Debug, Default)]
pub(crate) struct RoutesLog {
    /// The dataset whose log this process has open, the log's path and the open file.
    open: Option<(u64, PathBuf, std::fs::File)>,
}

impl RoutesLog {
    /// Append `rel`, routed in dataset `id`, to the log beside the filemap `filemap` names (the
    /// first name of a dataset starts the log anew; `filemap` is asked for then only).
    pub(crate) fn append(&mut self, id: u64, rel: &Path, filemap: impl FnOnce() -> PathBuf) -> Result<(), MetaError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let line = format!("{}\n", serde_json::Value::from(rel.to_string_lossy()));
        let (path, f) = match &mut self.open {
            Some((open, path, f)) if *open == id => (&*path, f),
            _ => {
                let path = routes_path(&filemap());
                let io = |source| MetaError::Io { op: "start the routes log", path: path.clone(), source };
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(io)?;
                f.write_all(format!("{ROUTES_HEADER}{id}\n").as_bytes()).map_err(io)?;
                let (_, path, f) = self.open.insert((id, path, f));
                (&*path, f)
            }
        };
        // (one write per name: a crash cuts at most the last line)
        f.write_all(line.as_bytes()).map_err(|source| MetaError::Io {
            op: "append to",
            path: path.to_path_buf(),
            source,
        })
    }

    /// Close and remove the log this process wrote: the filemap now holds its names, or the
    /// dataset left. (Nothing to do in transparent mode, which saves the names with the
    /// record.)
    pub(crate) fn end(&mut self) {
        if let Some((_, path, _)) = self.open.take() {
            let _ = crate::paths::remove_file_if_exists(&path);
        }
    }
}
