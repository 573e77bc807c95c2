//! Shared files: one file several ranks write in one output phase (N-to-1: `pwrite` at their
//! own offsets, MPI-IO, parallel HDF5). Per-rank caching cannot hold such a file (each node
//! would get a part), so a shared file is declared and written where every writer reaches it:
//! directly in the prefix, bypassing the cache for that file alone.
//!
//! * Declaration: each writer calls `SCR_Route_shared_file(name, file)` instead of
//!   `SCR_Route_file` ([`route_shared_file`]). It is local, as `SCR_Route_file` is, so any
//!   subset of ranks may share a file (a sub-communicator's MPI-IO file, or rank 0 alone
//!   writing a header straight to the prefix), and every writer gets the same path: the
//!   staging name `.<name>.scrshared` beside the file's place in the prefix
//!   ([`crate::state::layout::Layout::shared_staging`]), so a file of an older checkpoint with
//!   the same name stays intact until this dataset completes.
//! * `SCR_Complete_output` (collective) first checks the names every rank routed
//!   ([`super::names`]): a name routed by several ranks without being declared, or declared by
//!   some and routed privately by others, makes the dataset invalid on every rank, with one
//!   message naming the file, the ranks and the remedy. In a bypass dataset
//!   (`SCR_CACHE_BYPASS=1`) every route leads to the prefix, and ranks that route one name write
//!   one file there, as SCR 3 has it: such a name becomes a shared file of the dataset, written
//!   in place (no staging name). The dataset is then valid only if every
//!   rank, so every writer, reported it valid; then the file's CRC32 is computed once, after all
//!   writers finished: in slices read by all ranks at once and combined (one read of the data,
//!   spread over the job), and rank 0 renames it into place. Every rank records the list
//!   (writers, size, CRC32) in the dataset's descriptor, so a flush publishes it in the
//!   summary, and a restart offers it to every rank (checked before it is handed out).
//! * A dataset that is discarded takes its staging files with it; a complete one that leaves
//!   the cache without ever reaching the prefix takes its shared files too, unless a newer
//!   cached dataset wrote the same name.
//!
//! For transparent mode (the preload sees a shared write only when the application opens the
//! file, before any dataset exists): it opens the file at its staging name in the prefix
//! ([`crate::state::layout::shared_staging_name`]) instead, and `route_shared_file` inside
//! the output phase that adopts the files declares it.

use std::path::{Path, PathBuf};

use super::error::RuntimeError;
use super::names::Agreed;
use super::{with_rt, Phase, Runtime};
use crate::error::{Error, Result};
use crate::state::dataset::SharedFile;
use crate::state::filemap::DatasetRecord;

const ROUTE_SHARED: &str = "SCR_Route_shared_file";

/// Below this many bytes per slice, a shared file's CRC32 is not split further.
const SLICE: u64 = 16 << 20;

/// `SCR_Route_shared_file`: declare `name` a file several ranks write in this output phase and
/// return the path to write it at (the same on every rank).
pub fn route_shared_file(name: &str) -> Result<PathBuf> {
    with_rt(ROUTE_SHARED, |rt| rt.route_shared(name))
}

/// How the completion exchange of a dataset ended ([`Runtime::complete_shared`]).
pub(super) enum Checked {
    /// Some rank failed (or the exchange did): the summary, not yet said.
    Failed(String),
    /// A file was misused (said by rank 0).
    Misused,
    /// The shared files, and the dataset's bytes and files on all ranks (shared files not
    /// counted), and every rank's description of its files (transparent mode).
    Done { shared: Vec<SharedFile>, bytes: u64, files: u64, listed: Vec<super::peers::Part> },
}

impl Runtime {
    pub(super) fn route_shared(&mut self, name: &str) -> Result<PathBuf> {
        let call = self.call_name(ROUTE_SHARED);
        let Phase::Output { id, .. } = self.phase else {
            return Err(self.phase_error(call, "in an output phase (after SCR_Start_output)"));
        };
        let rel = self.dataset_rel(call, name)?;
        self.declare_shared(call, id, rel, Path::new(name))
    }

    /// [`Runtime::route_shared`] of a file named by its path below the prefix, as it is
    /// (transparent mode): no conversion through a string.
    pub(super) fn route_shared_rel(&mut self, rel: &Path) -> Result<PathBuf> {
        let call = self.call_name(ROUTE_SHARED);
        let (id, shown) = self.output_rel(call, rel)?;
        self.declare_shared(call, id, rel.to_path_buf(), &shown)
    }

    /// Declare `rel` a shared file of open dataset `id` written by this rank; returns where
    /// it is written. `shown` names it in messages.
    fn declare_shared(&mut self, call: &'static str, id: u64, rel: PathBuf, shown: &Path) -> Result<PathBuf> {
        let name = shown.display();
        let me = self.world.rank() as u32;
        let transparent = self.mode == super::Mode::Transparent;
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        let staging = shared_target(&self.layout, rec, &rel);
        if self.routed.contains(&rel) {
            let msg = if transparent {
                format!(
                    "{name} was written by this rank both as a file of its own and as a shared file (MPI_File_open on \
                     several processes, or SCR_PRELOAD_SHARED): write it one way only"
                )
            } else {
                format!(
                    "{name} was routed with SCR_Route_file by this rank in this output phase: route a shared file \
                     with SCR_Route_shared_file only"
                )
            };
            return Err(Error::usage(call, msg));
        }
        if let Some(parent) = staging.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create directory", parent, e))?;
        }
        if !rec.reddesc.bypass {
            unlink_planted(&staging)?;
        }
        if !rec.desc.shared.iter().any(|s| s.rel == rel) {
            rec.desc.shared.push(SharedFile { rel, writers: vec![me], size: 0, crc: None });
            // recorded before the application creates it: a crash leaves it to clean up
            self.save_filemap()?;
        }
        crate::scr_debug!(2, "route shared {name} -> {} (dataset {id})", staging.display());
        Ok(staging)
    }

    /// `SCR_Complete_output` of dataset `id` (collective): in one exchange, every rank's outcome
    /// (`local`, with its listing in transparent mode), its bytes and files, and the names it
    /// routed; then check the names and complete the shared files (in a bypass dataset, the
    /// names several ranks routed become shared files: the caller drops them from the ranks'
    /// own files). The same answer on every rank; a misuse is said once, by rank 0.
    pub(super) fn complete_shared(&self, id: u64, local: super::names::Validated, bytes: u64, files: u64) -> Checked {
        let agreed = match self.agree_names(id, local, bytes, files) {
            Ok(a) => a,
            Err(e) => return Checked::Failed(format!("dataset {id}: {e}")),
        };
        let (done, totals, listed) = match agreed {
            Agreed::Failed(summary) => return Checked::Failed(summary),
            Agreed::Names(r, totals, listed) => (r, totals, listed),
        };
        let done = match done {
            Ok(list) if list.is_empty() => Ok(list),
            Ok(list) => self.finish_shared(id, list).unwrap_or_else(|e| Err(e.into())),
            Err(e) => Err(e),
        };
        match done {
            Ok(list) => Checked::Done { shared: list, bytes: totals.0, files: totals.1, listed },
            Err(e) => {
                if self.rank0() {
                    let name = &self.filemap.datasets[&id].desc.name;
                    crate::scr_error!(
                        "dataset {id} ({name}): {e}; the dataset is invalid on every rank and is discarded"
                    );
                }
                Checked::Misused
            }
        }
    }

    /// Complete the shared files of valid dataset `id` (collective): rank 0 checks each one
    /// where its writers wrote it, all ranks compute slices of its CRC32 (unless
    /// `SCR_CRC_ON_COPY=0`), rank 0 combines them and renames the file into place. Returns the
    /// files with size and CRC32.
    fn finish_shared(
        &self,
        id: u64,
        mut list: Vec<SharedFile>,
    ) -> Result<std::result::Result<Vec<SharedFile>, RuntimeError>> {
        let rec = &self.filemap.datasets[&id];
        let staged: Vec<PathBuf> = list.iter().map(|s| shared_target(&self.layout, rec, &s.rel)).collect();
        let sizes = self.rank0().then(|| {
            staged
                .iter()
                .zip(&list)
                .map(|(p, s)| {
                    std::fs::metadata(p).map(|m| m.len()).map_err(|e| RuntimeError::SharedMissing {
                        rel: s.rel.clone(),
                        path: p.clone(),
                        why: e.to_string(),
                        writers: s.writers.clone(),
                    })
                })
                .collect::<std::result::Result<Vec<u64>, RuntimeError>>()
        });
        let sizes = match self.world.bcast(0, &sizes.unwrap_or(Ok(Vec::new())))? {
            Ok(sizes) => sizes,
            Err(e) => return Ok(Err(e)),
        };
        let verify = self.settings.crc_on_copy.verify();
        let files: Vec<(PathBuf, u64)> =
            if verify { staged.iter().cloned().zip(sizes.iter().copied()).collect() } else { Vec::new() };
        let done = self.crcs_in_slices(&files)?.map(|crcs| {
            let crcs = crcs.into_iter().collect::<std::result::Result<Vec<u32>, RuntimeError>>()?;
            for (k, s) in list.iter_mut().enumerate() {
                s.size = sizes[k];
                s.crc = crcs.get(k).copied();
                let to = self.layout.prefix.join(&s.rel);
                if staged[k] != to {
                    std::fs::rename(&staged[k], &to)
                        .map_err(|e| RuntimeError::Rename { to: to.clone(), why: e.to_string() })?;
                }
            }
            Ok(list)
        });
        Ok(self.world.bcast(0, &done.unwrap_or(Ok(Vec::new())))?)
    }

    /// The CRC32 of each file `(path, size)` (collective, the same list on every rank), read in
    /// slices dealt out to all ranks in turn, so each byte is read once, spread over the job;
    /// combined on rank 0: `Some` there (per file, or why a slice of it could not be read),
    /// `None` on the other ranks.
    pub(super) fn crcs_in_slices(
        &self,
        files: &[(PathBuf, u64)],
    ) -> Result<Option<Vec<std::result::Result<u32, RuntimeError>>>> {
        let mut slices = Vec::new();
        for (k, &(_, size)) in files.iter().enumerate() {
            let n = size.div_ceil(SLICE).clamp(1, self.world.size() as u64);
            let step = size.div_ceil(n).max(1);
            for j in 0..n {
                let off = (j * step).min(size);
                slices.push((k, off, step.min(size - off)));
            }
        }
        let (me, ranks) = (self.world.rank() as usize, self.world.size() as usize);
        type Slice = (usize, u64, std::result::Result<u32, RuntimeError>, u64);
        let mine: Vec<Slice> = slices
            .iter()
            .skip(me)
            .step_by(ranks)
            .map(|&(k, off, len)| {
                let crc = crate::checksum::crc_of_range(&files[k].0, off, len, self.settings.file_buf_size);
                (k, off, crc.map_err(RuntimeError::from), len)
            })
            .collect();
        Ok(self.world.gather(0, &mine)?.map(|all| {
            let mut parts: Vec<Slice> = all.into_iter().flatten().collect();
            parts.sort_unstable_by_key(|p| (p.0, p.1));
            (0..files.len())
                .map(|k| {
                    let of_k = parts.iter().filter(|p| p.0 == k).map(|p| p.2.clone().map(|crc| (crc, p.3)));
                    of_k.collect::<std::result::Result<Vec<(u32, u64)>, RuntimeError>>()
                        .map(|s| crate::checksum::combine(&s))
                })
                .collect()
        }))
    }

    /// A dataset leaves the cache: remove the staging files this rank declared (a dataset that
    /// never completed), and, on rank 0, the shared files of a complete dataset that never
    /// reached the prefix, unless another cached dataset wrote the same name.
    pub(super) fn forget_shared(&self, rec: &DatasetRecord) {
        for s in &rec.desc.shared {
            if !rec.reddesc.bypass {
                let _ = crate::paths::remove_file_if_exists(&self.layout.shared_staging(&s.rel));
            }
            let others = self.filemap.datasets.values().filter(|r| r.desc.id != rec.desc.id);
            let kept = others.flat_map(|r| &r.desc.shared).any(|o| o.rel == s.rel);
            if rec.complete && self.rank0() && !self.flushed(rec.desc.id) && !kept {
                let p = self.layout.prefix.join(&s.rel);
                crate::scr_debug!(
                    1,
                    "removing shared file {} of dataset {}: it never reached the prefix",
                    p.display(),
                    rec.desc.id
                );
                let _ = crate::paths::remove_file_if_exists(&p);
            }
        }
    }
}

/// Where the writers of shared file `rel` of dataset `rec` write it: its staging name, or in a
/// bypass dataset its place in the prefix.
/// Remove a symbolic link (or anything but a regular file) at staging name `staging` before
/// the application writes there: neither SCR nor a writer makes one, so someone planted it,
/// and the writers' opens would follow it out of the prefix. A regular file stays: another
/// rank may already be writing it (each rank routes the name on its own).
fn unlink_planted(staging: &Path) -> Result<()> {
    match std::fs::symlink_metadata(staging) {
        Ok(m) if !m.file_type().is_file() => {
            crate::scr_warn!(
                "{} is not a regular file (a link someone planted?): removed before the ranks write there",
                staging.display()
            );
            match std::fs::remove_file(staging) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", staging, e)),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

pub(super) fn shared_target(layout: &crate::state::layout::Layout, rec: &DatasetRecord, rel: &Path) -> PathBuf {
    if rec.reddesc.bypass {
        layout.prefix.join(rel)
    } else {
        layout.shared_staging(rel)
    }
}
