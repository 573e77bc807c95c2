//! Background flushes as the runtime sees them: starting one in `SCR_Complete_output`,
//! checking progress at every collective SCR call, waiting for one before its dataset leaves
//! the cache, and finishing all of them in `SCR_Finalize`.
//!
//! The list of datasets in flight is the same on every rank (flushes start and are retired
//! collectively, in order). Progress is one allreduce over that list: a flush is retired once
//! every rank's share is finished; it succeeded if no share failed (the prefix side is already
//! durable then, see [`crate::transfer::background`]). Retiring records the outcome: the flush
//! file (`PFS`, or back to cache for a retry at `SCR_Finalize`), the CRC32s in the filemap,
//! the output-only dataset leaving the cache, the `SCR_PREFIX_SIZE` window.

use std::path::Path;
use std::time::Instant;

use super::Runtime;
use crate::events::EventLog;
use crate::scr_debug;
use crate::state::filemap::DatasetRecord;
use crate::state::flushfile::Location;
use crate::transfer::background::{Job, OnPublished};
use std::sync::Arc;

/// A flush started in this run and not yet retired.
#[derive(Debug, Clone)]
pub(super) struct Flight {
    pub id: u64,
    pub started: Instant,
    /// Names the attempt in the prefix (see [`crate::transfer::background`]).
    pub token: String,
}

impl Runtime {
    /// Whether dataset `id` goes to the prefix in the background: asynchronous flushes are
    /// on, its store does not ask for `FLUSH=SYNC`, and it is not a bypass dataset (whose
    /// files are in the prefix already).
    pub(super) fn flushes_async(&self, id: u64) -> bool {
        let Some(rec) = self.filemap.datasets.get(&id) else { return false };
        let store_sync = self.descs.store(&rec.reddesc.store).is_some_and(|s| s.flush == "SYNC");
        self.settings.flush_async && !rec.reddesc.bypass && !store_sync
    }

    /// Start flushing dataset `id` in the background (collective: every rank queues its share).
    pub(super) fn start_async_flush(&mut self, id: u64) {
        let token = self.bg.take_off(id, self.run_stamp);
        // before any rank copies: older entries this flush overwrites are never restarted from
        let superseded =
            crate::transfer::flush::supersede_overlapping(&self.world, &self.layout, self.filemap.datasets.get(&id));
        if let Err(e) = superseded {
            self.bg.flusher.fail(id, format!("dataset {id}: {e}"));
            return;
        }
        let Some(rec) = self.filemap.datasets.get(&id).cloned() else {
            self.bg.flusher.fail(id, format!("dataset {id} is not in this rank's cache"));
            return;
        };
        self.set_location(id, Some(Location::Flushing));
        // The next output phase may wait for this flush (eviction): the prefix limit applies.
        self.watchdog_wrote();
        let job = Job {
            rec,
            layout: self.layout.clone(),
            rank: self.world.rank() as u32,
            ranks: self.world.size() as u32,
            token,
            buf: self.settings.file_buf_size,
            crc_on_flush: self.settings.crc_on_flush,
            bytes_per_sec: self.settings.flush_async_bw,
            on_published: Some(self.published_hook()),
        };
        if self.rank0() {
            scr_debug!(1, "dataset {id}: background flush started ({} in flight)", self.bg.flights.len());
            self.events.flush_start(id, &job.rec.desc.name, job.rec.desc.size, "async");
        }
        self.bg.flusher.submit(job);
    }

    /// Check the flushes in flight and retire the finished ones (collective). With `wait`,
    /// first block until this rank's shares of those datasets are finished, so they retire now.
    pub(super) fn progress(&mut self, wait: &[u64]) {
        self.retire_encodes();
        self.evict_encoded();
        self.retire_checksums();
        if self.bg.flights.is_empty() {
            return;
        }
        for id in wait {
            self.bg.flusher.wait(*id);
        }
        // Per flight: [share not finished, share failed, share seconds in microseconds].
        let mine: Vec<u64> = self
            .bg
            .flights
            .iter()
            .flat_map(|f| match self.bg.flusher.peek(f.id) {
                Some((failed, secs)) => [0, failed as u64, (secs * 1e6) as u64],
                None => [1, 0, 0],
            })
            .collect();
        let all = self.world.max_u64s(&mine);
        let flights = std::mem::take(&mut self.bg.flights);
        for (i, flight) in flights.into_iter().enumerate() {
            if all[3 * i] != 0 {
                self.bg.flights.push(flight);
                continue;
            }
            let outcome = self.bg.flusher.take(flight.id);
            self.retire(flight, outcome, all[3 * i + 1] == 0, all[3 * i + 2] as f64 / 1e6);
        }
    }

    /// Record how a flush ended, on every rank.
    fn retire(&mut self, flight: Flight, outcome: Option<crate::transfer::background::Outcome>, ok: bool, secs: f64) {
        let id = flight.id;
        let local_err = match &outcome {
            Some(o) => o.files.as_ref().err().map(ToString::to_string),
            None => Some("this rank's share was lost".to_string()),
        };
        if !ok {
            let what = format!("background flush of dataset {id}");
            let summary = self.ctx().summarize_failures(&what, local_err);
            if self.rank0() {
                crate::scr_error!("{summary}; the dataset stays in cache and SCR retries at {}", self.finalize_name());
                crate::transfer::flush::unmark_flushing(&self.layout, id);
                let name = self.filemap.datasets.get(&id).map(|r| r.desc.name.clone()).unwrap_or_default();
                self.events.flush_fail(id, &name, &summary, "async");
            }
            self.set_location(id, Some(Location::Cache));
            return;
        }
        let files = outcome.and_then(|o| o.files.ok()).unwrap_or_default();
        let Some(rec) = self.filemap.datasets.get_mut(&id) else {
            // Deleted meanwhile (SCR_Delete waited for the flush, then removed it).
            return;
        };
        if self.settings.crc_on_flush {
            for (meta, pf) in rec.files.iter_mut().zip(&files) {
                meta.crc = meta.crc.or(pf.crc);
            }
        }
        let (size, name, is_ckpt, is_output) =
            (rec.desc.size, rec.desc.name.clone(), rec.desc.checkpoint, rec.desc.output);
        if let Err(e) = self.save_filemap() {
            crate::scr_error!("{e}");
        }
        self.set_location(id, Some(Location::Pfs));
        if self.rank0() {
            scr_debug!(
                1,
                "dataset {id} ({name}): background flush complete: {} in {secs:.3} s, {:.1} MiB/s ({:.3} s after it started)",
                crate::log::bytes(size),
                crate::log::mib_per_sec(size, secs),
                flight.started.elapsed().as_secs_f64()
            );
            if is_ckpt && self.settings.prefix_size > 0 {
                crate::transfer::flush::prune_window(&self.layout, self.settings.prefix_size);
            }
        }
        if !is_ckpt && is_output {
            self.drop_cached(id);
        }
    }

    /// What the rank that publishes a background flush does at once: the `FLUSH_END` event
    /// (so the log has it even if the run dies before it would learn of it).
    fn published_hook(&mut self) -> OnPublished {
        let log = self.any_rank_log();
        Arc::new(move |rec: &DatasetRecord, secs: f64| {
            log.flush_end(rec.desc.id, &rec.desc.name, rec.desc.size, rec.desc.files, secs, "async")
        })
    }

    /// The event log for what any rank may be the one to see (the completion of a background
    /// flush it published, its watchdog firing): rank 0's log, or a quiet one elsewhere.
    pub(super) fn any_rank_log(&mut self) -> EventLog {
        if let Some(l) = &self.any_rank_log {
            return l.clone();
        }
        let l = if self.rank0() {
            self.events.clone()
        } else {
            EventLog::quiet(&self.settings, &self.layout.scr_dir(), &self.layout.jobid, &self.host)
        };
        self.any_rank_log = Some(l.clone());
        l
    }

    /// Before the application renames prefix directory `dir` (transparent mode): let every
    /// flush in flight that writes below it finish on all ranks, so no copy lands in the old
    /// directory after the rename. Not collective: the ranks' arrivals are read in the prefix.
    pub(super) fn settle_flushes_under(&self, dir: &Path) {
        for f in &self.bg.flights {
            // named by the directory, or with files below it (this rank may have none)
            let below = self.filemap.datasets.get(&f.id).is_some_and(|r| {
                Path::new(&r.desc.name).starts_with(dir) || r.files.iter().any(|m| m.rel.starts_with(dir))
            });
            if below {
                self.bg.flusher.wait(f.id);
                crate::transfer::background::wait_all_arrived(&self.layout, f.id, &f.token, self.world.size() as u32);
            }
        }
    }

    /// Block until every flush in flight is retired (`SCR_Finalize`, halt).
    pub(super) fn finish_flights(&mut self) {
        let ids: Vec<u64> = self.bg.flights.iter().map(|f| f.id).collect();
        if ids.is_empty() {
            return;
        }
        if self.rank0() {
            scr_debug!(1, "waiting for {} background flush(es) to finish", ids.len());
        }
        self.progress(&ids);
        self.bg.flusher.stop();
    }
}
