//! Asynchronous encoding (`SCR_ENCODE_ASYNC=1`): `SCR_Complete_output` returns once the
//! dataset is complete in cache, recorded with SINGLE protection, and one worker thread per
//! process encodes its PARTNER/XOR/RS redundancy while the application computes.
//!
//! **Design.** The encoding exchanges data between the members of a set, so it needs MPI.
//! Two ways were weighed: progressing the encoding in pieces at later SCR calls, or a thread of
//! its own. An application calls SCR around its checkpoints and often not at all between
//! them, so pieces done at SCR calls would run inside the next `SCR_Need_checkpoint` or
//! `SCR_Start_output`: the application would still wait for them, only later. A thread encodes
//! while the application computes, but it calls MPI while the application's own threads may,
//! which MPI allows only at `MPI_THREAD_MULTIPLE`. So the thread is used when MPI provides that
//! level (an application asks for it with `MPI_Init_thread`; Open MPI also honours
//! `OMPI_MPI_THREAD_LEVEL=3`; the preload asks for it when `SCR_ENCODE_ASYNC=1` is in the
//! environment), and otherwise the encoding runs inside `SCR_Complete_output` as before, which
//! `SCR_Init` says once. The thread has its own duplicates of the set communicators, runs at
//! nice +10 under `SCHED_BATCH` and waits for its messages by testing and sleeping, not in a
//! spinning blocking call, so the application's compute keeps the cores (see `BENCHMARKS.md`
//! for what it costs).
//!
//! **Protection.** A dataset counts as protected by its scheme only when the encoding finished
//! on every member of its set: the members publish their redundancy files under their names
//! only after agreeing on that ([`crate::redundancy::parallel::encode`]); the runtime records
//! the protection in the filemap at its next SCR call ([`Runtime::retire_encodes`]), or after a
//! crash the next `SCR_Init` finds the published files ([`Runtime::adopt_encodings`]). A
//! failure before that leaves the dataset with SINGLE protection: a restart uses it if none of
//! its data was lost, and otherwise falls back to the newest dataset that is protected.
//!
//! **Cooperation.** Every member queues the same encodings in the same order (the decision is
//! collective), so the threads of a set meet without the application's help. Deleting a
//! dataset (eviction, `SCR_Delete`) waits for its encoding; flushes read the data files
//! alongside it; the next checkpoint's encoding queues behind it; `SCR_Finalize` and a halt wait
//! for all of them.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::error::RuntimeError;
use super::worker::Worker;
use super::Runtime;
use crate::comm::Waiting;
use crate::desc::Scheme;
use crate::error::Result;
use crate::redundancy::parallel::{self, SetPlan};
use crate::redundancy::redfile;
use crate::state::filemap::DatasetRecord;
use crate::{scr_debug, scr_error, scr_warn};

/// Whether redundancy is encoded in the background when `SCR_ENCODE_ASYNC` is not set.
pub(super) const DEFAULT: bool = false;

/// One dataset's encoding, as queued.
struct Job {
    id: u64,
    /// The redundancy descriptor (which set plan encodes it).
    index: usize,
    rec: DatasetRecord,
    piece: usize,
}

/// The encoded record (with `red` and CRC32s) or why it failed, and the seconds it took.
type Outcome = (Result<DatasetRecord, RuntimeError>, f64);

#[derive(Default)]
struct Shared {
    /// Queued or running (`None`) and finished encodings.
    jobs: Mutex<BTreeMap<u64, Option<Outcome>>>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Option<Outcome>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn done(&self, id: u64, out: Outcome) {
        self.lock().insert(id, Some(out));
        self.changed.notify_all();
    }
}

/// This process's encoding worker.
pub(super) struct Encoder {
    worker: Worker<Job>,
    shared: Arc<Shared>,
    /// Asynchronous encoding is on for this run (agreed at `SCR_Init`).
    active: bool,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder { worker: Worker::new("scr-encode"), shared: Arc::default(), active: false }
    }
}

impl Encoder {
    /// Start the thread with its own set plans (by descriptor index).
    fn start(&mut self, plans: Vec<Option<SetPlan>>) -> std::io::Result<()> {
        let (shared, failed) = (self.shared.clone(), self.shared.clone());
        self.worker.start(
            move |job: Job| {
                let t0 = Instant::now();
                let mut rec = job.rec;
                let r = match plans.get(job.index).and_then(Option::as_ref) {
                    Some(plan) => {
                        parallel::encode(plan, &mut rec, job.piece, Waiting::Poll).map_err(RuntimeError::from)
                    }
                    None => Err(RuntimeError::NoSet(job.index)),
                };
                shared.done(job.id, (r.map(|_| rec), t0.elapsed().as_secs_f64()));
            },
            move |id| failed.done(id, (Err(RuntimeError::Panicked("encoding".into())), 0.0)),
            |job: &Job| job.id,
        )
    }

    /// Whether dataset `id` has an encoding queued or running.
    pub(super) fn pending(&self, id: u64) -> bool {
        matches!(self.shared.lock().get(&id), Some(None))
    }

    /// Block until the encoding of dataset `id` (if any) is finished on this rank.
    pub(super) fn wait(&self, id: u64) {
        let mut jobs = self.shared.lock();
        while matches!(jobs.get(&id), Some(None)) {
            jobs = self.shared.changed.wait(jobs).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The finished encodings, forgotten here.
    fn take_done(&self) -> Vec<(u64, Outcome)> {
        let mut jobs = self.shared.lock();
        let done: Vec<u64> = jobs.iter().filter(|(_, o)| o.is_some()).map(|(id, _)| *id).collect();
        done.into_iter().filter_map(|id| jobs.remove(&id).flatten().map(|o| (id, o))).collect()
    }
}

impl Runtime {
    /// `SCR_Init`, after the sets are formed: turn asynchronous encoding on if it is asked for
    /// and possible (collective; the same answer on every rank).
    pub(super) fn setup_encoder(&mut self) -> Result<()> {
        let asked = self.settings.encode_async;
        let encodes = (0..self.sets.len()).any(|i| self.encoder(i, false).is_some());
        if !asked.unwrap_or(DEFAULT) || !self.world.any_true(encodes) {
            return Ok(());
        }
        let (multiple, level) = self.world.thread_level();
        if !self.world.all_true(multiple) {
            if self.rank0() {
                let msg = format!(
                    "SCR_ENCODE_ASYNC=1 needs MPI initialised with MPI_THREAD_MULTIPLE, and this run has {level}: \
                     redundancy is encoded inside {}. Initialise MPI with MPI_Init_thread(..., \
                     MPI_THREAD_MULTIPLE, ...) (with Open MPI, OMPI_MPI_THREAD_LEVEL=3 does it for MPI_Init)",
                    self.encoding_step()
                );
                if asked == Some(true) {
                    scr_warn!("{msg}");
                } else {
                    scr_debug!(1, "{msg}");
                }
            }
            return Ok(());
        }
        // duplicates of every set communicator (collective over each set) for the thread
        let plans: Vec<Option<SetPlan>> = self.sets.iter().map(|p| p.as_ref().map(SetPlan::duplicate)).collect();
        let started = self.bg.encoders.start(plans);
        if !self.world.all_true(started.is_ok()) {
            if let Err(e) = started {
                scr_error!("cannot start the encoding thread: {e}");
            }
            if self.rank0() {
                scr_warn!(
                    "redundancy is encoded inside {}: a process could not start its encoding thread",
                    self.encoding_step()
                );
            }
            self.bg.encoders.worker.finish();
            return Ok(());
        }
        self.bg.encoders.active = true;
        if self.rank0() {
            scr_debug!(1, "redundancy is encoded in the background ({level})");
        }
        Ok(())
    }

    /// Whether datasets of descriptor `index` are encoded in the background.
    pub(super) fn encodes_async(&self, index: usize, bypass: bool) -> bool {
        self.bg.encoders.active && self.encoder(index, bypass).is_some()
    }

    /// Queue the encoding of dataset `id` (collective in effect: every rank queues it).
    pub(super) fn start_encode(&mut self, id: u64) {
        let Some(rec) = self.filemap.datasets.get(&id).cloned() else { return };
        let job = Job { id, index: rec.reddesc.index, rec, piece: self.settings.mpi_buf_size };
        self.bg.encoders.shared.lock().insert(id, None);
        if let Err(job) = self.bg.encoders.worker.send(job) {
            self.bg.encoders.shared.done(job.id, (Err(RuntimeError::Stopped("encoding".into())), 0.0));
        }
    }

    /// Record finished encodings in the filemap (local, no MPI): the scheme now protects the
    /// dataset; a failed one keeps SINGLE protection and gets its CRC32s in the background.
    pub(super) fn retire_encodes(&mut self) {
        let mut changed = false;
        for (id, (result, secs)) in self.bg.encoders.take_done() {
            let Some(rec) = self.filemap.datasets.get_mut(&id) else { continue };
            let plan = self.sets.get(rec.reddesc.index).and_then(Option::as_ref);
            let (scheme, first) = plan.map_or((Scheme::Single, true), |p| (p.scheme, p.index == 0));
            match result {
                Ok(done) => {
                    rec.red = done.red;
                    for (f, d) in rec.files.iter_mut().zip(&done.files) {
                        if f.rel == d.rel {
                            f.crc = f.crc.or(d.crc);
                        }
                    }
                    changed = true;
                    if self.world.rank() == 0 {
                        let mibps = crate::log::mib_per_sec(rec.bytes(), secs);
                        scr_debug!(1, "dataset {id}: {} encoded in the background in {secs:.3} s ({mibps:.1} MiB/s of this rank's data)", scheme.name());
                    }
                }
                Err(e) => {
                    if first {
                        scr_error!(
                            "dataset {id}: background {} encoding failed: {e}; it keeps SINGLE protection",
                            scheme.name()
                        );
                    }
                    self.start_checksum(id);
                }
            }
        }
        if changed {
            if let Err(e) = self.save_filemap() {
                scr_error!("{e}");
            }
        }
    }

    /// Wait for every encoding this rank queued and record them (`SCR_Finalize`, halt).
    pub(super) fn finish_encodes(&mut self) {
        self.bg.encoders.worker.finish();
        self.retire_encodes();
    }

    /// `SCR_Init` (collective): a complete dataset recorded with SINGLE protection whose
    /// redundancy file was published after all (its run ended before recording it) is
    /// protected by its scheme. So is one whose file is still under its temporary name on this
    /// rank while another member of its set published its own: the members publish only after
    /// agreeing that every one finished, so the run ended between that agreement and this
    /// rank's rename, and the file is complete (its checked header is written last).
    pub(super) fn adopt_encodings(&mut self) {
        let (mut changed, unpublished) =
            self.adopt_redundancy_files(|ext| ext == "xor" || ext == "rs" || ext == "partner", &[]);
        // Only a run that ended between an encoding's agreement and its renames leaves a
        // redundancy file under its temporary name (the pass above saw them): the ranks learn
        // what the others published (an allgather) only when some rank holds one (one small
        // allreduce otherwise).
        if self.world.any_true(unpublished) {
            // the sets (dataset, set) that some member published
            let mine: Vec<(u64, usize)> = self
                .filemap
                .datasets
                .values()
                .filter_map(|r| r.red.as_ref().filter(|_| r.complete).map(|red| (r.desc.id, red.set_id)))
                .collect();
            match self.world.allgather(&mine) {
                Ok(all) => {
                    let published: Vec<(u64, usize)> = all.into_iter().flatten().collect();
                    changed |= self.adopt_redundancy_files(|ext| ext == "part", &published).0;
                }
                Err(e) => scr_error!("{e}; redundancy files left under their temporary names are not adopted"),
            }
        }
        if changed {
            if let Err(e) = self.save_filemap() {
                scr_error!("{e}");
            }
        }
    }

    /// Adopt this rank's redundancy files whose extension `ext` accepts for complete datasets
    /// without recorded redundancy; a `.part` file only if its (dataset, set) is in
    /// `published`, and it is renamed to its final name first. Returns whether any was
    /// adopted, and whether a dataset left without redundancy holds a `.part` file.
    fn adopt_redundancy_files(&mut self, ext: impl Fn(&str) -> bool, published: &[(u64, usize)]) -> (bool, bool) {
        let rank = self.world.rank();
        let (mut changed, mut unpublished) = (false, false);
        for rec in self.filemap.datasets.values_mut().filter(|r| r.complete && r.red.is_none() && !r.reddesc.bypass) {
            let Ok(entries) = std::fs::read_dir(rec.dir.join(crate::paths::SCR_DIR)) else { continue };
            let mut part_here = false;
            for path in entries.flatten().map(|e| e.path()) {
                part_here |= path.extension().is_some_and(|x| x == "part");
                let wanted = path.extension().and_then(|x| x.to_str()).is_some_and(&ext);
                let Some((h, _)) = wanted.then(|| redfile::read_header(&path).ok()).flatten() else { continue };
                if h.desc.id != rec.desc.id || h.red.ranks.get(h.red.index) != Some(&rank) {
                    continue;
                }
                let mine = h.files.iter().find(|(x, _)| *x == h.red.index).map(|(_, f)| f.clone()).unwrap_or_default();
                let same = mine.len() == rec.files.len()
                    && mine.iter().zip(&rec.files).all(|(e, f)| e.rel == f.rel && e.size == f.size);
                if !same {
                    continue;
                }
                let mut file = path.clone();
                if path.extension().is_some_and(|x| x == "part") {
                    if !published.contains(&(rec.desc.id, h.red.set_id)) {
                        continue;
                    }
                    file = path.with_extension("");
                    if let Err(e) = std::fs::rename(&path, &file) {
                        scr_error!("dataset {}: publishing {}: {e}", rec.desc.id, path.display());
                        continue;
                    }
                }
                for (f, e) in rec.files.iter_mut().zip(&mine) {
                    f.crc = f.crc.or(e.crc);
                }
                scr_debug!(
                    1,
                    "dataset {}: its {} encoding finished before the run ended",
                    rec.desc.id,
                    h.red.scheme.name()
                );
                rec.red = Some(crate::redundancy::RedInfo { file, ..h.red });
                changed = true;
                break;
            }
            unpublished |= part_here && rec.red.is_none();
        }
        (changed, unpublished)
    }
}
