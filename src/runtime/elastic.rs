//! Elastic restart (`SCR_RESTART_ELASTIC=1`): a checkpoint written by another number of
//! processes is offered too, newest first as any other. The application learns how many
//! processes wrote it and which files it has (`SCR_Restart_info`, `SCR_Restart_file`) and
//! routes the files it needs by name; they are read in place from the prefix, each checked
//! (size and CRC32) by the rank that reads it before it is handed out ([`super::catalog`]).
//!
//! Why the prefix: rank numbers in the caches mean other processes in this run, and the
//! per-rank machinery (distribution, rebuild from redundancy data) cannot serve N writers to M
//! readers. So a checkpoint of another size that is only in caches is first published to the
//! prefix in `SCR_Init`, the way a scavenge does it: each node leader copies its node's parts
//! (every rank's files, filemap and redundancy file; [`crate::transfer::scavenge`]), rank 0
//! builds the dataset there (rebuilding what a lost node held from XOR/RS/PARTNER data, writing
//! summary, rank-to-file map and index entry; [`crate::transfer::build`]), and everyone agrees.
//! That costs about a flush; elastic restarts are rare. The cached parts are left as they are
//! (a run of the checkpoint's own size may still restart from cache), and nothing of another
//! size is ever marked failed or deleted because this run could not use it.

use std::collections::BTreeMap;
use std::time::Instant;

use super::catalog::{Catalog, Entry};
use super::error::RuntimeError;
use super::{Loaded, Runtime};
use crate::error::Result;
use crate::state::filemap::Filemap;
use crate::state::flushfile::Location;
use crate::state::summary::{Rank2File, Summary};
use crate::{scr_debug, scr_error, scr_warn};

/// What elastic restart keeps between candidates.
#[derive(Debug, Default)]
pub(super) struct Elastic {
    /// Rank 0: complete cached checkpoints of another number of processes on this run's nodes
    /// (id to name).
    pub cached: BTreeMap<u64, String>,
    /// Checkpoints this run tried to publish (each once).
    pub published: Vec<u64>,
}

impl Runtime {
    /// Whether checkpoints of another number of processes are candidates.
    pub(super) fn elastic(&self) -> bool {
        self.settings.restart_elastic && self.settings.fetch
    }

    /// Find the complete cached checkpoints of another number of processes in the control
    /// directories of this run's nodes (collective; the list lands on rank 0).
    pub(super) fn find_cached_other_sizes(&mut self) -> Result<()> {
        let mut mine: BTreeMap<u64, String> = BTreeMap::new();
        if self.node.rank() == 0 {
            for (_, path) in self.layout.filemaps() {
                // a damaged filemap was reported by its rank, or is reported by the copy
                let Ok(fm) = Filemap::load(&path) else { continue };
                for r in fm.datasets.values() {
                    if r.desc.checkpoint && r.complete && !self.fits(r.desc.ranks) {
                        mine.insert(r.desc.id, r.desc.name.clone());
                    }
                }
            }
        }
        if let Some(all) = self.world.gather(0, &mine)? {
            self.elastic.cached = all.into_iter().flatten().collect();
        }
        Ok(())
    }

    /// Rank 0: the newest cached checkpoint of another size not yet tried, if `wanted`.
    pub(super) fn publish_candidate(&self, wanted: impl Fn(&str) -> bool) -> Option<u64> {
        self.elastic
            .cached
            .iter()
            .rev()
            .filter(|(id, _)| !self.failed.contains(id) && !self.elastic.published.contains(id))
            .find(|(_, name)| wanted(name))
            .map(|(id, _)| *id)
    }

    /// Publish cached checkpoint `id` of another size to the prefix (collective): node leaders
    /// copy their node's parts, rank 0 builds it. Returns whether it is complete there now.
    pub(super) fn publish_cached(&mut self, id: u64) -> Result<bool> {
        let t0 = Instant::now();
        self.elastic.published.push(id);
        let copied = (self.node.rank() == 0)
            .then(|| crate::transfer::scavenge::copy_node(&self.layout, self.settings.file_buf_size, Some(&[id])));
        let mine = copied.map(|c| {
            let bytes: u64 = c.copied.iter().map(|p| p.3).sum();
            let failed: Vec<String> = c.failed.iter().map(|(_, r, why)| format!("rank {r}: {why}")).collect();
            (c.copied.len() as u64, bytes, failed)
        });
        let report = self.world.gather(0, &mine)?.map(|all| {
            let (parts, bytes) = all.iter().flatten().fold((0, 0), |(p, b), c| (p + c.0, b + c.1));
            let notes: Vec<String> = all.into_iter().flatten().flat_map(|c| c.2).collect();
            let piece = self.settings.mpi_buf_size.max(4096);
            let built =
                crate::transfer::build::build(&self.layout, id, piece, crate::transfer::build::Current::Promote);
            self.report_publish(id, parts, bytes, notes, built, t0)
        });
        let ok = self.world.bcast(0, &report.unwrap_or(false))?;
        if ok {
            self.set_location(id, Some(Location::Pfs));
        }
        Ok(ok)
    }

    /// Rank 0: say what publishing dataset `id` did (a complete build made it current), and
    /// return whether it is complete.
    fn report_publish(
        &self,
        id: u64,
        parts: u64,
        bytes: u64,
        notes: Vec<String>,
        built: Result<crate::transfer::build::Report>,
        t0: Instant,
    ) -> bool {
        let name = self.elastic.cached.get(&id).cloned().unwrap_or_default();
        let rep = match built {
            Ok(rep) if rep.complete => rep,
            Ok(rep) => {
                scr_warn!(
                    "SCR_RESTART_ELASTIC: cached checkpoint {name} cannot be restarted with {} processes: {}{}; it stays \
                     in cache as it is, for a run of its own size",
                    self.world.size(),
                    rep.describe(),
                    if notes.is_empty() { String::new() } else { format!(" (copies: {})", notes.join("; ")) }
                );
                return false;
            }
            Err(e) => {
                scr_error!("SCR_RESTART_ELASTIC: cannot publish cached checkpoint {name} to the prefix: {e}");
                return false;
            }
        };
        let secs = t0.elapsed().as_secs_f64();
        crate::log::emit(
            "INFO",
            format_args!(
                "SCR_RESTART_ELASTIC: copied cached checkpoint {} ({} processes) to the prefix for this run of {}: {parts} \
                 rank part(s), {} in {secs:.3} s, {:.1} MiB/s{}",
                rep.name,
                rep.ranks,
                self.world.size(),
                crate::log::bytes(bytes),
                crate::log::mib_per_sec(bytes, secs),
                if rep.rebuilt.is_empty() {
                    String::new()
                } else {
                    format!("; rebuilt the files of rank(s) {:?} from redundancy data", rep.rebuilt)
                }
            ),
        );
        true
    }

    /// Load checkpoint `id`, written by `ranks` processes (not this run's number), to be read
    /// in place from the prefix (collective): rank 0 reads its file list, every rank checks a
    /// share of the files for presence and size. A checkpoint whose prefix copy is incomplete
    /// is marked failed in the index, as a failed fetch is.
    pub(super) fn load_elastic(&mut self, id: u64, name: String, ranks: u32) -> Result<bool> {
        let t0 = Instant::now();
        let listed: Option<std::result::Result<(u64, Vec<Entry>), RuntimeError>> = self.rank0().then(|| {
            let summary = Summary::load(&self.layout.summary(id))?;
            let summary = summary.ok_or_else(|| RuntimeError::Missing(self.layout.summary(id)))?;
            let r2f = Rank2File::load(&self.layout.rank2file(id))?;
            let r2f = r2f.ok_or_else(|| RuntimeError::Missing(self.layout.rank2file(id)))?;
            let mut entries: Vec<Entry> = r2f
                .files
                .iter()
                .flat_map(|(r, files)| {
                    files.iter().map(|f| Entry { rel: f.rel.clone(), writer: Some(*r), size: f.size, crc: f.crc })
                })
                .collect();
            entries.extend(super::restart_files::shared_entries(&summary.desc));
            Ok((summary.desc.size, entries))
        });
        let listed = self.world.bcast(0, &listed.unwrap_or(Err(RuntimeError::Below(String::new()))))?;
        let (size, me) = (self.world.size() as usize, self.world.rank() as usize);
        let problem = match &listed {
            Err(why) => Some(why.to_string()),
            Ok((_, entries)) => entries.iter().skip(me).step_by(size).find_map(|e| {
                let p = self.layout.prefix.join(&e.rel);
                crate::paths::size_problem(&p, e.size).map(|why| format!("{}: {why}", p.display()))
            }),
        };
        let ok = self.world.all_true(problem.is_none());
        let why = (!ok).then(|| self.ctx().summarize_failures(&format!("checkpoint {name} in the prefix"), problem));
        let (bytes, entries) = listed.unwrap_or_default();
        self.fetch_event(id, &name, (bytes, entries.len() as u64), t0.elapsed().as_secs_f64(), ok, true);
        self.record_fetch(id, &name, why.clone());
        if let Some(why) = why {
            if self.rank0() {
                scr_error!("{why}; checkpoint {name} is marked failed, trying the next most recent one");
            }
            self.failed.push(id);
            return Ok(false);
        }
        if self.rank0() {
            crate::log::emit(
                "INFO",
                format_args!(
                    "SCR_RESTART_ELASTIC: restarting from {name}, written by {ranks} processes, with {size}: its {} \
                     file(s) are read from the prefix ({})",
                    entries.len(),
                    if self.mode == super::Mode::Transparent {
                        "at their own paths"
                    } else {
                        "SCR_Restart_info and SCR_Restart_file list them"
                    }
                ),
            );
            scr_debug!(1, "checked the sizes of the files of dataset {id} in the prefix");
        }
        self.events.record("RESTART", &[("dset", &id), ("name", &name), ("from", &"prefix")]);
        let mut loaded = Loaded::new(id, &name, true, ranks);
        let mut cat = Catalog::new(ranks, entries, true);
        self.check_shared(&mut cat)?;
        loaded.catalog = Some(cat);
        self.restart = Some(loaded);
        Ok(true)
    }
}
