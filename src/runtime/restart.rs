//! Restart: choosing the checkpoint to offer (the newest one complete in cache or in the
//! prefix, written by this run's number of processes, or by any with `SCR_RESTART_ELASTIC`
//! (`elastic.rs`), and not failed in this run; a cached one verified against its CRC32s, a
//! prefix one fetched), the restart phase, and the retry loop:
//! a restart that fails on any rank marks that checkpoint failed and loads the next one,
//! unless what failed were files held in caches on other nodes, which are copied and the same
//! checkpoint offered again (the files of the restart phase: `restart_files.rs`).

use super::{Loaded, Phase, Runtime};
use crate::error::{Error, Result};
use crate::events::{flag, Mibps, Secs};
use crate::identity;
use crate::state::filemap::DatasetRecord;
use crate::state::flushfile::Location;
use crate::state::index::{FetchRecord, Index};
use crate::{scr_debug, scr_error, scr_warn};

/// Whether a checkpoint called `name` may be restarted from when `SCR_CURRENT` (or
/// `SCR_Current`) asked for `wanted`: the one name rule of the restart selection, shared with
/// `scr_index --restart` (`crate::ops::next`), which must name what `SCR_Init` would load.
pub(crate) fn wanted_name(wanted: Option<&str>, name: &str) -> bool {
    wanted.is_none_or(|w| w == name)
}

/// Where the next checkpoint to try is (rank 0 decides, every rank acts).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Candidate {
    /// A complete dataset in cache (intact on every rank by size).
    Cache(u64),
    /// A complete dataset in the prefix, newer than anything usable in cache (written by
    /// `ranks` processes: another number than this run's with `SCR_RESTART_ELASTIC`).
    Prefix { id: u64, ckpt: u64, name: String, bytes: u64, files: u64, ranks: u32 },
    /// A complete cached dataset of another number of processes, newer than the others
    /// (`SCR_RESTART_ELASTIC`): to publish to the prefix, then to try again.
    Publish(u64),
}

impl Runtime {
    /// Whether a dataset written by `ranks` processes can restart this run.
    pub(super) fn fits(&self, ranks: u32) -> bool {
        ranks == self.world.size() as u32
    }

    /// Choose the checkpoint to offer (collective): the newest checkpoint that is complete
    /// somewhere, in cache or in the prefix (a newer prefix copy beats an older cached one),
    /// skipping ones that failed in this run and, unless `SCR_RESTART_ELASTIC=1`, ones written
    /// by another number of processes. A cached one is verified first (CRC32) and rebuilt or
    /// dropped if that fails; a prefix one is fetched (and verified), or with another number of
    /// processes checked for read in place; the first that succeeds is loaded.
    pub(super) fn load_checkpoint(&mut self) -> Result<()> {
        self.restart = None;
        if self.elastic() {
            self.find_cached_other_sizes()?;
        }
        loop {
            let next = if self.rank0() { self.next_candidate() } else { None };
            let loaded = match self.world.bcast(0, &next)? {
                None => return Ok(()),
                Some(Candidate::Cache(id)) => self.load_cached(id)?,
                Some(Candidate::Prefix { id, name, ranks, .. }) if !self.fits(ranks) => {
                    self.load_elastic(id, name, ranks)?
                }
                Some(Candidate::Prefix { id, ckpt, name, bytes, files, .. }) => {
                    self.fetch_one(id, ckpt, name, bytes, files)
                }
                Some(Candidate::Publish(id)) => {
                    // complete in the prefix now (the next candidate), or skipped from now on
                    self.publish_cached(id)?;
                    false
                }
            };
            if loaded {
                return Ok(());
            }
        }
    }

    /// `SCR_CURRENT=name` at `SCR_Init` (collective): a name no usable checkpoint carries (in
    /// any rank's cache, or in the prefix's index when fetching is on) is an error naming the
    /// checkpoints there are, rather than a silent start from scratch next to them; with no
    /// checkpoint at all (a first run) it is a warning and the run starts from the beginning.
    pub(super) fn check_current_name(&mut self, name: &str) -> Result<()> {
        let usable = |r: &DatasetRecord| r.complete && r.desc.checkpoint;
        let here = self.filemap.datasets.values().any(|r| r.desc.name == name && usable(r));
        let cached = self.world.max_i64(here as i64) == 1;
        let verdict: Option<(bool, String)> = if self.rank0() && !cached {
            let mut there: Vec<(u64, String, &str)> = self
                .filemap
                .datasets
                .values()
                .filter(|r| usable(r))
                .map(|r| (r.desc.id, r.desc.name.clone(), "cache"))
                .collect();
            let ix = if self.settings.fetch { self.load_index() } else { Index::default() };
            let in_prefix = ix.restart_candidates(&[]).into_iter().any(|id| ix.datasets[&id].desc.name == name);
            for id in ix.restart_candidates(&[]) {
                if !there.iter().any(|(i, _, _)| *i == id) {
                    there.push((id, ix.datasets[&id].desc.name.clone(), "prefix"));
                }
            }
            there.sort_by_key(|t| std::cmp::Reverse(t.0));
            let unusable = match ix.by_name(name) {
                Some(e) if e.failed => {
                    format!(" ({name}, dataset {}, is marked failed: a restart from it failed)", e.desc.id)
                }
                Some(e) if !e.complete => format!(" ({name}, dataset {}, is incomplete in the prefix)", e.desc.id),
                Some(e) if !e.desc.checkpoint => format!(" ({name}, dataset {}, is an output dataset)", e.desc.id),
                _ => String::new(),
            };
            if in_prefix {
                None
            } else if there.is_empty() {
                Some((
                    false,
                    format!(
                        "SCR_CURRENT={name}: there is no checkpoint yet{unusable}; the run starts from the beginning"
                    ),
                ))
            } else {
                let list: Vec<String> = there.iter().map(|(id, n, at)| format!("{n} (dataset {id}, {at})")).collect();
                Some((
                    true,
                    format!(
                        "SCR_CURRENT={name} names no checkpoint a restart can use{unusable}; the checkpoints are: {}; \
                         set SCR_CURRENT to one of them, or unset it to restart from the newest",
                        list.join(", ")
                    ),
                ))
            }
        } else {
            None
        };
        match self.world.bcast(0, &verdict)? {
            Some((true, msg)) => Err(Error::usage("SCR_Init", msg)),
            Some((false, msg)) => {
                if self.rank0() {
                    scr_warn!("{msg}");
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Rank 0: the next candidate, newest first.
    fn next_candidate(&self) -> Option<Candidate> {
        let wanted = |name: &str| wanted_name(self.wanted.as_deref(), name);
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
                .find(|e| (self.fits(e.desc.ranks) || self.elastic()) && wanted(&e.desc.name))
                .map(|e| {
                    let (id, ckpt) = (e.desc.id, e.desc.ckpt.unwrap_or(e.desc.id));
                    let (name, bytes, files, ranks) = (e.desc.name.clone(), e.desc.size, e.desc.files, e.desc.ranks);
                    (id, Candidate::Prefix { id, ckpt, name, bytes, files, ranks })
                })
        } else {
            None
        };
        let publish = if self.elastic() { self.publish_candidate(wanted) } else { None };
        // the newest; on a tie the cached one of this size, then the prefix (nothing to copy)
        let newest = [
            cached.map(|id| (id, 2, Candidate::Cache(id))),
            prefix.map(|(id, p)| (id, 1, p)),
            publish.map(|id| (id, 0, Candidate::Publish(id))),
        ];
        let (id, _, next) = newest.into_iter().flatten().max_by_key(|(id, tie, _)| (*id, *tie))?;
        if let (false, Some(c)) = (matches!(next, Candidate::Cache(_)), cached) {
            scr_debug!(1, "dataset {id} is newer than cached dataset {c}: trying it first");
        }
        Some(next)
    }

    /// Offer cached dataset `id` once every rank's files check out against their CRC32s
    /// (`SCR_CRC_ON_COPY` unset or 1); a mismatch counts as a lost file: the dataset is
    /// rebuilt from its redundancy data if the scheme allows, else dropped from cache.
    fn load_cached(&mut self, id: u64) -> Result<bool> {
        let t0 = std::time::Instant::now();
        let problem = match self.filemap.datasets.get(&id) {
            Some(rec) if self.settings.crc_on_copy.verify() && !self.verified.contains(&id) => {
                crate::redundancy::check_local(rec, Some(self.verify_threads()), self.settings.file_buf_size)
                    .err()
                    .map(|e| e.to_string())
            }
            Some(_) => None,
            None => Some("holds no record of it".to_string()),
        };
        let intact = self.world.all_true(problem.is_none());
        if self.rank0() && self.settings.crc_on_copy.verify() && self.verified.contains(&id) {
            scr_debug!(1, "rank 0's part of cached dataset {id} was checked against its CRC32s while it was rebuilt");
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
        self.restart = Some(Loaded::new(id, &rec.desc.name, rec.reddesc.bypass, rec.desc.ranks));
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
            let victims = self.evictions(&rd.store.clone(), None, 1);
            self.drop_many(&victims);
        }
        rd.bypass = bypass;
        let dir = self.layout.cache_dataset_dir(&rd.store, id);
        let t0 = std::time::Instant::now();
        let result = crate::transfer::fetch::fetch(&self.ctx(), id, &dir, bypass);
        let ok = result.is_ok();
        let why = result.as_ref().err().map(|e| e.to_string());
        self.fetch_event(id, &name, (bytes, files), t0.elapsed().as_secs_f64(), ok, bypass);
        self.record_fetch(id, &name, why);
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
                self.restart = Some(Loaded::new(id, &name, bypass, self.world.size() as u32));
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

    /// The `FETCH` event of checkpoint `id`: (bytes, files), seconds, outcome, read in place.
    pub(super) fn fetch_event(
        &self,
        id: u64,
        name: &str,
        (bytes, files): (u64, u64),
        secs: f64,
        ok: bool,
        bypass: bool,
    ) {
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
    }

    /// Rank 0: record a fetch attempt of checkpoint `id` in the index (`why` it failed, if it
    /// did): a success makes it current, a failure marks it failed (never fetched again).
    pub(super) fn record_fetch(&self, id: u64, name: &str, why: Option<String>) {
        if !self.rank0() {
            return;
        }
        let ok = why.is_none();
        let r = Index::update(&self.layout.index(), |ix| {
            if let Some(e) = ix.datasets.get_mut(&id) {
                e.fetches.push(FetchRecord { time: identity::iso_time(identity::now_secs()), ok, why });
                if ok {
                    ix.current = Some(name.to_string());
                } else {
                    e.failed = true;
                    if ix.current.as_deref() == Some(name) {
                        ix.current = None;
                    }
                }
            }
        });
        if let Err(e) = r {
            scr_warn!("cannot record the fetch of dataset {id} in the index: {e}");
        }
    }

    /// Say once which checkpoints this run skips because another number of processes wrote
    /// them (collective). They stay where they are, unmarked, for a run of their own size.
    pub(super) fn report_other_sizes(&self) {
        if self.elastic() {
            return;
        }
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
        self.build_catalog()?;
        self.phase = Phase::Restart;
        self.policy.restart_started();
        Ok(name)
    }

    pub(super) fn complete_restart(&mut self, valid: bool) -> Result<bool> {
        if self.phase != Phase::Restart {
            return Err(self.phase_error("SCR_Complete_restart", "after SCR_Start_restart"));
        }
        self.phase = Phase::Idle;
        let all = self.world.all_true(valid);
        let mut loaded = self.restart.take().expect("a restart phase has a loaded checkpoint");
        let secs = self.world.max_f64(self.policy.restart_elapsed());
        let elastic_load = !self.fits(loaded.writers);
        if all {
            if self.rank0() {
                let bytes = match (self.filemap.datasets.get(&loaded.id), &loaded.catalog) {
                    (Some(r), _) if !elastic_load => r.desc.size,
                    (_, Some(cat)) => cat.entries.iter().map(|e| e.size).sum(),
                    _ => 0,
                };
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
        if self.copy_requested(&mut loaded, valid)? {
            // the same checkpoint again: what was missing is on every node that asked for it now
            self.restart = Some(loaded);
            return Ok(false);
        }
        let summary = self.ctx().summarize_failures(
            &format!("restart from checkpoint {}", loaded.name),
            (!valid).then(|| "the application reported valid=0".to_string()),
        );
        if self.rank0() && elastic_load {
            scr_error!(
                "{summary}; it was written by {} processes, so it is not marked failed (a run of that size may still \
                 restart from it); loading the next most recent checkpoint",
                loaded.writers
            );
        } else if self.rank0() {
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
        if !elastic_load {
            self.drop_cached(loaded.id);
        }
        self.load_checkpoint()?;
        self.policy.compute_started();
        Ok(false)
    }
}
