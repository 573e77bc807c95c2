//! Restart: choosing the checkpoint to offer (the newest one complete in cache or in the
//! prefix, written by this run's number of processes and not failed in this run; a cached one
//! verified against its CRC32s, a prefix one fetched), the restart phase, and the retry loop:
//! a restart that fails on any rank marks that checkpoint failed and loads the next one.

use std::path::{Path, PathBuf};

use super::{Loaded, Phase, Runtime};
use crate::error::{Error, Result};
use crate::events::{flag, Mibps, Secs};
use crate::identity;
use crate::state::filemap::DatasetRecord;
use crate::state::flushfile::Location;
use crate::state::index::{FetchRecord, Index};
use crate::{scr_debug, scr_error, scr_warn};

/// Where the next checkpoint to try is (rank 0 decides, every rank acts).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Candidate {
    /// A complete dataset in cache (intact on every rank by size).
    Cache(u64),
    /// A complete dataset in the prefix, newer than anything usable in cache.
    Prefix { id: u64, ckpt: u64, name: String, bytes: u64, files: u64 },
}

impl Runtime {
    /// Whether a dataset written by `ranks` processes can restart this run.
    pub(super) fn fits(&self, ranks: u32) -> bool {
        ranks == self.world.size() as u32
    }

    /// Choose the checkpoint to offer (collective): the newest checkpoint that is complete
    /// somewhere, in cache or in the prefix (a newer prefix copy beats an older cached one),
    /// skipping ones that failed in this run and ones written by another number of processes.
    /// A cached one is verified first (CRC32) and rebuilt or dropped if that fails; a prefix
    /// one is fetched (and verified); the first that succeeds is loaded.
    pub(super) fn load_checkpoint(&mut self) -> Result<()> {
        self.restart = None;
        loop {
            let next = if self.rank0() { self.next_candidate() } else { None };
            let loaded = match self.world.bcast(0, &next)? {
                None => return Ok(()),
                Some(Candidate::Cache(id)) => self.load_cached(id)?,
                Some(Candidate::Prefix { id, ckpt, name, bytes, files }) => {
                    self.fetch_one(id, ckpt, name, bytes, files)
                }
            };
            if loaded {
                return Ok(());
            }
        }
    }

    /// Rank 0: the next candidate, newest first.
    fn next_candidate(&self) -> Option<Candidate> {
        let wanted = |name: &str| self.wanted.as_ref().is_none_or(|w| w == name);
        let cached = self
            .filemap
            .datasets
            .values()
            .rev()
            .filter(|r| r.desc.checkpoint && r.complete && self.fits(r.desc.ranks) && !self.failed.contains(&r.desc.id))
            .find(|r| wanted(&r.desc.name))
            .map(|r| r.desc.id);
        let prefix = if self.settings.fetch {
            let ix = self.load_index();
            ix.restart_candidates(&self.failed)
                .into_iter()
                .map(|id| &ix.datasets[&id])
                .find(|e| self.fits(e.desc.ranks) && wanted(&e.desc.name))
                .map(|e| Candidate::Prefix {
                    id: e.desc.id,
                    ckpt: e.desc.ckpt.unwrap_or(e.desc.id),
                    name: e.desc.name.clone(),
                    bytes: e.desc.size,
                    files: e.desc.files,
                })
        } else {
            None
        };
        match (cached, prefix) {
            (Some(c), Some(p @ Candidate::Prefix { id, .. })) if id > c => {
                scr_debug!(1, "the prefix holds dataset {id}, newer than cached dataset {c}: fetching it");
                Some(p)
            }
            (Some(c), _) => Some(Candidate::Cache(c)),
            (None, p) => p,
        }
    }

    /// Offer cached dataset `id` once every rank's files check out against their CRC32s
    /// (`SCR_CRC_ON_COPY` unset or 1); a mismatch counts as a lost file: the dataset is
    /// rebuilt from its redundancy data if the scheme allows, else dropped from cache.
    fn load_cached(&mut self, id: u64) -> Result<bool> {
        let t0 = std::time::Instant::now();
        let problem = match self.filemap.datasets.get(&id) {
            Some(rec) if self.settings.crc_on_copy.verify() && !self.verified.contains(&id) => {
                crate::redundancy::check_local(rec, Some(self.verify_threads()), self.settings.file_buf_size).err()
            }
            Some(_) => None,
            None => Some("holds no record of it".to_string()),
        };
        let intact = self.world.all_true(problem.is_none());
        if self.rank0() && self.settings.crc_on_copy.verify() && self.verified.contains(&id) {
            scr_debug!(1, "cached dataset {id} was checked against its CRC32s while it was rebuilt");
        } else if self.rank0() && self.settings.crc_on_copy.verify() {
            let secs = t0.elapsed().as_secs_f64();
            let bytes = self.filemap.datasets.get(&id).map_or(0, |r| r.bytes());
            scr_debug!(
                1,
                "verified rank 0's part of cached dataset {id} against its CRC32s: {} in {secs:.3} s, {:.1} MiB/s ({} thread(s))",
                crate::log::bytes(bytes),
                crate::log::mib_per_sec(bytes, secs),
                self.verify_threads()
            );
        }
        if !intact && !self.rebuild_or_drop(id, problem)? {
            return Ok(false);
        }
        let rec = &self.filemap.datasets[&id];
        self.restart = Some(Loaded { id, name: rec.desc.name.clone(), in_prefix: rec.reddesc.bypass });
        if self.rank0() {
            scr_debug!(1, "restarting from cached dataset {id} ({})", rec.desc.name);
        }
        self.events.record("RESTART", &[("dset", &id), ("name", &rec.desc.name), ("from", &"cache")]);
        Ok(true)
    }

    /// Threads each process verifies its cached files with at restart: the node's cores
    /// (as far as this process may run on them) shared by the processes on the node; nothing
    /// else runs there before the application's restart reads.
    fn verify_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / self.node.size().max(1) as usize).max(1)
    }

    /// Fetch checkpoint `id` from the prefix (collective) and load it; on failure it is
    /// marked failed in the index (a failed fetch is never tried again).
    fn fetch_one(&mut self, id: u64, ckpt: u64, name: String, bytes: u64, files: u64) -> bool {
        let mut rd = self.descs.select(ckpt, true, false).clone();
        let bypass = self.settings.fetch_bypass || self.settings.global_restart || rd.bypass;
        if !bypass {
            let victims = self.evictions(&rd.store.clone(), None);
            self.drop_many(&victims);
        }
        rd.bypass = bypass;
        let dir = self.layout.cache_dataset_dir(&rd.store, id);
        let t0 = std::time::Instant::now();
        let result = crate::transfer::fetch::fetch(&self.ctx(), id, &dir, bypass);
        let ok = result.is_ok();
        let why = result.as_ref().err().map(|e| e.to_string());
        let secs = t0.elapsed().as_secs_f64();
        self.events.record(
            "FETCH",
            &[
                ("dset", &id),
                ("name", &name),
                ("bytes", &bytes),
                ("files", &files),
                ("secs", &Secs(secs)),
                ("mibps", &Mibps::of(bytes, secs)),
                ("ok", &flag(ok)),
                ("bypass", &flag(bypass)),
            ],
        );
        if self.rank0() {
            let r = Index::update(&self.layout.index(), |ix| {
                if let Some(e) = ix.datasets.get_mut(&id) {
                    e.fetches.push(FetchRecord {
                        time: identity::iso_time(identity::now_secs()),
                        ok,
                        why: why.clone(),
                    });
                    if ok {
                        ix.current = Some(name.clone());
                    } else {
                        e.failed = true;
                        if ix.current.as_deref() == Some(name.as_str()) {
                            ix.current = None;
                        }
                    }
                }
            });
            if let Err(e) = r {
                scr_warn!("cannot record the fetch of dataset {id} in the index: {e}");
            }
        }
        match result {
            Ok((desc, files)) => {
                self.filemap
                    .datasets
                    .insert(id, DatasetRecord { desc, reddesc: rd, dir, files, complete: true, red: None });
                if let Err(e) = self.save_filemap() {
                    scr_error!("{e}");
                }
                self.set_location(id, Some(Location::Pfs));
                self.events.record("RESTART", &[("dset", &id), ("name", &name), ("from", &"prefix")]);
                self.restart = Some(Loaded { id, name, in_prefix: bypass });
                true
            }
            Err(e) => {
                if self.rank0() {
                    scr_error!("{e}; checkpoint {name} is marked failed, trying the next most recent one");
                }
                self.failed.push(id);
                false
            }
        }
    }

    /// Say once which checkpoints this run skips because another number of processes wrote
    /// them (collective). They stay where they are, unmarked, for a run of their own size.
    pub(super) fn report_other_sizes(&self) {
        let mine: Vec<(u64, String, u32)> = self
            .filemap
            .datasets
            .values()
            .filter(|r| r.desc.checkpoint && r.complete && !self.fits(r.desc.ranks))
            .map(|r| (r.desc.id, r.desc.name.clone(), r.desc.ranks))
            .collect();
        let Ok(Some(all)) = self.world.gather(0, &mine) else { return };
        let mut seen: std::collections::BTreeMap<u64, (String, u32, &str)> = std::collections::BTreeMap::new();
        for (id, name, ranks) in all.into_iter().flatten() {
            seen.insert(id, (name, ranks, "cache"));
        }
        if self.settings.fetch {
            let ix = self.load_index();
            for e in ix.datasets.values().filter(|e| e.complete && !e.failed && e.desc.checkpoint) {
                if !self.fits(e.desc.ranks) {
                    seen.entry(e.desc.id).or_insert((e.desc.name.clone(), e.desc.ranks, "prefix"));
                }
            }
        }
        if seen.is_empty() {
            return;
        }
        let list: Vec<String> = seen
            .iter()
            .rev()
            .take(6)
            .map(|(id, (name, ranks, at))| format!("{name} (dataset {id}, {ranks} processes, in {at})"))
            .collect();
        scr_warn!(
            "this run has {} processes; skipping {} checkpoint(s) written by another number of processes: {}{}. \
             They are kept as they are (not marked failed, not deleted): relaunch with their number of processes \
             to restart from them",
            self.world.size(),
            seen.len(),
            list.join(", "),
            if seen.len() > 6 { ", ..." } else { "" }
        );
    }

    pub(super) fn have_restart(&mut self) -> Result<Option<String>> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error("SCR_Have_restart", "between output and restart phases"));
        }
        Ok(self.restart.as_ref().map(|r| r.name.clone()))
    }

    pub(super) fn start_restart(&mut self) -> Result<String> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error("SCR_Start_restart", "between output and restart phases"));
        }
        let Some(r) = &self.restart else {
            return Err(Error::usage(
                "SCR_Start_restart",
                "no checkpoint is available (SCR_Have_restart reports 0); only call it when SCR_Have_restart sets flag=1",
            ));
        };
        let name = r.name.clone();
        self.phase = Phase::Restart;
        self.policy.restart_started();
        Ok(name)
    }

    /// `SCR_Route_file` inside a restart phase: where to read `name` from.
    pub(super) fn route_restart(&self, name: &str) -> Result<PathBuf> {
        let loaded = self.restart.as_ref().expect("a restart phase has a loaded checkpoint");
        let rec = self.filemap.datasets.get(&loaded.id);
        let rel = self.layout.prefix.relative(Path::new(name));
        let found = rec.and_then(|rec| match &rel {
            Some(rel) => rec.file(rel),
            // deprecated: a bare file name looked up in the checkpoint's files
            None if !name.contains('/') => {
                rec.files.iter().find(|f| f.rel.file_name().map(|n| n == name).unwrap_or(false))
            }
            None => None,
        });
        let path = match (found, &rel) {
            (Some(f), _) if loaded.in_prefix => self.layout.prefix.join(&f.rel),
            (Some(f), _) => f.path.clone(),
            (None, Some(rel)) if loaded.in_prefix => self.layout.prefix.join(rel),
            _ => {
                return Err(Error::usage(
                    "SCR_Route_file",
                    format!("{name} is not a file of checkpoint {} written by rank {}", loaded.name, self.world.rank()),
                ))
            }
        };
        readable(&path).map_err(|e| Error::io("SCR_Route_file: cannot read", &path, e))?;
        Ok(path)
    }

    pub(super) fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        if self.phase != Phase::Restart {
            return Err(self.phase_error("SCR_Complete_restart", "after SCR_Start_restart"));
        }
        self.phase = Phase::Idle;
        let all = self.world.all_true(valid);
        let loaded = self.restart.take().expect("a restart phase has a loaded checkpoint");
        let secs = self.world.max_f64(self.policy.restart_elapsed());
        if all {
            if self.rank0() {
                let bytes = self.filemap.datasets.get(&loaded.id).map_or(0, |r| r.desc.size);
                scr_debug!(
                    1,
                    "restart from {} complete in {secs:.3} s ({} read, {:.1} MiB/s)",
                    loaded.name,
                    crate::log::bytes(bytes),
                    crate::log::mib_per_sec(bytes, secs)
                );
            }
            self.policy.compute_started();
            return Ok(true);
        }
        let summary = self.ctx().summarize_failures(
            &format!("restart from checkpoint {}", loaded.name),
            (!valid).then(|| "the application reported valid=0".to_string()),
        );
        if self.rank0() {
            scr_error!("{summary}; marking it failed and loading the next most recent checkpoint");
            let r = Index::update(&self.layout.index(), |ix| {
                if let Some(e) = ix.datasets.get_mut(&loaded.id) {
                    e.failed = true;
                }
                if ix.current.as_deref() == Some(loaded.name.as_str()) {
                    ix.current = None;
                }
            });
            if let Err(e) = r {
                scr_warn!("cannot mark {} failed in the index: {e}", loaded.name);
            }
        }
        self.failed.push(loaded.id);
        if self.wanted.as_deref() == Some(loaded.name.as_str()) {
            self.wanted = None;
        }
        self.drop_cached(loaded.id);
        self.load_checkpoint()?;
        self.policy.compute_started();
        Ok(false)
    }
}

fn readable(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path).map(drop)
}
