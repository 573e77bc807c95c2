//! Background CRC32 of SINGLE datasets: after `SCR_Complete_output` returns, one worker
//! thread per process reads this rank's files of the dataset (at a lower CPU priority, no MPI)
//! and records their CRC32s, so a later restart from cache can verify every byte without
//! SINGLE paying a read of its data inside `SCR_Complete_output`.
//!
//! A rank whose files of the dataset that still lack one hold at most [`INLINE_BYTES`] in at
//! most [`INLINE_FILES`] files reads them inside the completion instead
//! ([`small_enough`]): handing a job over costs a wake-up of the worker (on a small VM about
//! 0.1 ms, plus the worker's own file of results), more than reading a few hundred KiB the
//! application has just written (in the page cache). Transparent mode's versions of small
//! restart files (QE's `out/`, OpenFOAM's time directories) are all of that size.
//!
//! Durability: the worker writes [`Crcs`] next to the dataset once all its files are done;
//! the runtime copies the values into the filemap at its next collective call
//! ([`Runtime::retire_checksums`], called from progress; they reach the filemap's file with
//! its next save, no write of their own) and, after a crash, at `SCR_Init`
//! ([`Runtime::adopt_checksum_files`]). A file whose CRC32 is not known by then is checked by
//! size only. Deleting a dataset (eviction, `SCR_Delete`, a failed completion) cancels its
//! checksum first: the worker stops between two reads and never writes for a deleted dataset.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::error::RuntimeError;
use super::worker::Worker;
use super::Runtime;
use crate::state::crcs::{Crcs, FileCrc};
use crate::state::filemap::DatasetRecord;
use crate::{scr_debug, scr_error};

/// At most this many bytes of a rank's files of a dataset without a CRC32 are read inside
/// the completion rather than in the background ([`small_enough`]).
pub(super) const INLINE_BYTES: u64 = 512 << 10;
/// ... in at most this many files (each costs an open and a close).
pub(super) const INLINE_FILES: usize = 16;

/// Whether this rank's files of `rec` that lack a CRC32 are few and small enough to read inside
/// the completion (sizes as the completion just found them).
pub(super) fn small_enough(rec: &DatasetRecord) -> bool {
    let todo = || rec.files.iter().filter(|f| f.crc.is_none());
    todo().count() <= INLINE_FILES && todo().map(|f| f.size).sum::<u64>() <= INLINE_BYTES
}

/// One dataset's checksum, as queued.
struct Job {
    id: u64,
    /// (application name, cached path, recorded size)
    files: Vec<(PathBuf, PathBuf, u64)>,
    out: PathBuf,
    buf: usize,
    cancel: Arc<AtomicBool>,
}

enum State {
    Queued(Arc<AtomicBool>),
    Running(Arc<AtomicBool>),
    Done(Result<Crcs, RuntimeError>),
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<BTreeMap<u64, State>>,
    changed: Condvar,
}

/// This process's checksum worker.
pub(super) struct Checksummer {
    worker: Worker<Job>,
    shared: Arc<Shared>,
}

impl Default for Checksummer {
    fn default() -> Checksummer {
        Checksummer { worker: Worker::new("scr-crc"), shared: Arc::default() }
    }
}

impl Checksummer {
    fn submit(&mut self, job: Job) {
        self.shared.lock().insert(job.id, State::Queued(job.cancel.clone()));
        if !self.worker.running() {
            let (shared, failed) = (self.shared.clone(), self.shared.clone());
            let started = self.worker.start(
                move |job: Job| {
                    let go = match shared.lock().get_mut(&job.id) {
                        Some(s @ State::Queued(_)) if !job.cancel.load(Ordering::Relaxed) => {
                            *s = State::Running(job.cancel.clone());
                            true
                        }
                        _ => false,
                    };
                    if go {
                        let r = checksum(&job);
                        let mut jobs = shared.lock();
                        if job.cancel.load(Ordering::Relaxed) {
                            jobs.remove(&job.id);
                        } else {
                            jobs.insert(job.id, State::Done(r));
                        }
                    }
                    shared.changed.notify_all();
                },
                // a panic must not leave the job Running: cancel() would wait forever
                move |id| {
                    failed.lock().insert(id, State::Done(Err(RuntimeError::Panicked("checksum".into()))));
                    failed.changed.notify_all();
                },
                |job: &Job| job.id,
            );
            if let Err(e) = started {
                scr_error!("cannot start the checksum thread: {e}; cached SINGLE datasets are checked by size only");
                self.shared.lock().clear();
                return;
            }
        }
        if let Err(job) = self.worker.send(job) {
            self.shared.lock().remove(&job.id);
        }
    }

    /// Stop the checksum of dataset `id`, if any, and wait until the worker left its files.
    fn cancel(&self, id: u64) {
        let mut jobs = self.shared.lock();
        match jobs.get(&id) {
            Some(State::Queued(c)) => {
                c.store(true, Ordering::Relaxed);
                jobs.remove(&id);
            }
            Some(State::Running(c)) => {
                c.store(true, Ordering::Relaxed);
                while matches!(jobs.get(&id), Some(State::Running(_))) {
                    jobs = self.shared.changed.wait(jobs).unwrap_or_else(|e| e.into_inner());
                }
                jobs.remove(&id);
            }
            Some(State::Done(_)) => {
                jobs.remove(&id);
            }
            None => {}
        }
    }

    /// The finished checksums, forgotten here.
    fn take_done(&self) -> Vec<(u64, Result<Crcs, RuntimeError>)> {
        let mut jobs = self.shared.lock();
        let done: Vec<u64> = jobs.iter().filter(|(_, s)| matches!(s, State::Done(_))).map(|(id, _)| *id).collect();
        done.into_iter()
            .filter_map(|id| match jobs.remove(&id) {
                Some(State::Done(r)) => Some((id, r)),
                _ => None,
            })
            .collect()
    }

    /// Let the queued checksums finish and stop the worker.
    fn finish(&mut self) {
        self.worker.finish();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, State>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Read every file of `job` (stopping early when cancelled) and write the CRC32s next to it.
fn checksum(job: &Job) -> Result<Crcs, RuntimeError> {
    let mut files = Vec::with_capacity(job.files.len());
    for (rel, path, size) in &job.files {
        let c = crate::checksum::stream(path, job.buf, |_| {
            if job.cancel.load(Ordering::Relaxed) {
                Err(crate::error::Error::Other("cancelled".into()))
            } else {
                Ok(())
            }
        })?;
        if c.size != *size {
            let why = format!("size is {} bytes, {size} were written", c.size);
            return Err(RuntimeError::File { path: path.clone(), why });
        }
        files.push(FileCrc { rel: rel.clone(), size: c.size, crc: c.crc });
    }
    let crcs = Crcs { dataset: job.id, files };
    if job.cancel.load(Ordering::Relaxed) {
        return Err(RuntimeError::Cancelled);
    }
    crcs.save(&job.out)?;
    Ok(crcs)
}

impl Runtime {
    /// After `SCR_Complete_output` of dataset `id`: queue the CRC32 of this rank's files if
    /// nothing else records it (SINGLE, not flushed now, `SCR_CRC_ON_COPY` unset).
    pub(super) fn start_checksum(&mut self, id: u64) {
        if self.settings.crc_on_copy != crate::config::CrcOnCopy::Background {
            return;
        }
        let Some(rec) = self.filemap.datasets.get(&id) else { return };
        let encoding = self.bg.encoding(id);
        if encoding || rec.red.is_some() || rec.reddesc.bypass || rec.files.iter().all(|f| f.crc.is_some()) {
            return;
        }
        let files = rec
            .files
            .iter()
            .filter(|f| f.crc.is_none() && f.path.starts_with(&rec.dir))
            .map(|f| (f.rel.clone(), f.path.clone(), f.size))
            .collect();
        let out = Crcs::path(&rec.dir, self.world.rank());
        let job = Job { id, files, out, buf: self.settings.file_buf_size, cancel: Arc::new(AtomicBool::new(false)) };
        self.bg.checksums.submit(job);
    }

    /// Copy finished background checksums into the filemap in memory (local, no MPI). They
    /// reach its file with the next save (the next dataset's start, `SCR_Finalize`): until
    /// then the worker's [`Crcs`] file holds them, which `SCR_Init` adopts after a crash.
    pub(super) fn retire_checksums(&mut self) {
        for (id, r) in self.bg.checksums.take_done() {
            match (r, self.filemap.datasets.get_mut(&id)) {
                (Ok(crcs), Some(rec)) => {
                    let n = crcs.apply(rec);
                    scr_debug!(2, "dataset {id}: CRC32 of {n} file(s) recorded in the background");
                }
                (Err(e), Some(_)) => {
                    scr_error!("dataset {id}: background CRC32: {e}; its files are checked by size only")
                }
                (_, None) => {}
            }
        }
    }

    /// Forget (and stop) the checksum of a dataset that leaves the cache.
    pub(super) fn cancel_checksum(&self, id: u64) {
        self.bg.checksums.cancel(id);
    }

    /// Wait for the checksums still running and record them (`SCR_Finalize`, halt).
    pub(super) fn finish_checksums(&mut self) {
        self.bg.checksums.finish();
        self.retire_checksums();
    }

    /// `SCR_Init`: take CRC32s a background checksum wrote before its run ended into the
    /// records that lack them.
    pub(super) fn adopt_checksum_files(&mut self) {
        let rank = self.world.rank();
        let mut changed = false;
        for rec in self.filemap.datasets.values_mut().filter(|r| missing_crcs(r)) {
            match Crcs::load(&Crcs::path(&rec.dir, rank)) {
                Ok(Some(c)) => changed |= c.apply(rec) > 0,
                Ok(None) => {}
                Err(e) => scr_error!("{e}; dataset {} is checked by size only", rec.desc.id),
            }
        }
        if changed {
            if let Err(e) = self.save_filemap() {
                scr_error!("{e}");
            }
        }
    }
}

fn missing_crcs(rec: &DatasetRecord) -> bool {
    rec.complete && rec.red.is_none() && rec.files.iter().any(|f| f.crc.is_none())
}
