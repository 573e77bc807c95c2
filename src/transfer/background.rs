//! Background flush (`SCR_FLUSH_ASYNC=1`, `SCR_FLUSH_TYPE=PTHREAD`): one worker thread per
//! process copies its rank's files of each queued dataset to the prefix while the
//! application computes, in the order the flushes were started (several may be queued).
//!
//! The worker uses no MPI, so it works whatever thread level the application asked for.
//! Completion is made durable by the ranks themselves, through the prefix:
//!
//! 1. rank 0's worker first records the dataset in the index as *flushing*;
//! 2. each worker copies its files (each verified and renamed into place by
//!    [`super::copy`]), at most `SCR_FLUSH_ASYNC_BW` bytes per second, then writes its
//!    *part* `<prefix>/.scr/scr.dataset.<id>/flush/part.<rank>` (its files with size and
//!    CRC32, or its error);
//! 3. it then *arrives*: under the lock of `flush/arrivals` it increments the count of ranks
//!    done for this attempt (a token names the attempt, so parts and counts of an earlier,
//!    killed attempt never mix in);
//! 4. the rank whose arrival completes the count, if nobody failed, writes `rank2file.scr` and
//!    `summary.scr` from the parts and marks the index entry complete, exactly as a
//!    synchronous flush does, then removes `flush/`.
//!
//! So the dataset is in the index the moment the last byte is verified, whether or not the
//! application ever calls SCR again; a run killed before that leaves an incomplete entry
//! that fetch never uses, and the FLUSHING mark in the node's flush file, which scavenge and
//! the next run see. The runtime learns the outcome at its next collective call
//! ([`crate::runtime`]'s progress), where the ranks agree and record it (flush file, CRCs,
//! retry at `SCR_Finalize` on failure).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::copy::Pace;
use super::flush::{copy_files, mark_flushing, publish};
use super::{Reported, TransferError};
use crate::persist;
use crate::state::filemap::DatasetRecord;
use crate::state::layout::Layout;
use crate::state::summary::PrefixFile;

/// Called with the dataset and the publishing rank's seconds once it is complete in the prefix.
pub(crate) type OnPublished = Arc<dyn Fn(&DatasetRecord, f64) + Send + Sync>;

/// One rank's share of one background flush.
#[derive(Clone)]
pub struct Job {
    pub rec: DatasetRecord,
    pub layout: Layout,
    pub rank: u32,
    pub ranks: u32,
    /// Names this attempt (the same on every rank): parts of other attempts are ignored.
    pub token: String,
    pub buf: usize,
    pub crc_on_flush: bool,
    /// `SCR_FLUSH_ASYNC_BW` (0: no limit).
    pub bytes_per_sec: u64,
    /// Called once the dataset is complete in the prefix, by the rank that published it.
    pub on_published: Option<OnPublished>,
}

/// How this rank's share ended.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// This rank's files in the prefix, or why its share failed (including a failure to
    /// publish, on the rank that published).
    pub files: Result<Vec<PrefixFile>, Reported>,
    /// Seconds from the moment the worker took the job to its arrival.
    pub secs: f64,
    /// This rank published the dataset.
    pub published: bool,
}

#[derive(Debug, Clone)]
enum Status {
    Queued,
    Running,
    Done(Outcome),
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<BTreeMap<u64, Status>>,
    changed: Condvar,
}

/// This process's background flush worker and the status of its queued shares.
#[derive(Default)]
pub(crate) struct Flusher {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Flusher {
    /// Queue a share; the worker thread starts with the first one.
    pub fn submit(&mut self, job: Job) {
        let id = job.rec.desc.id;
        self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Status::Queued);
        if self.tx.is_none() {
            let (tx, rx) = channel::<Job>();
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name("scr-flush".into()).spawn(move || {
                // The worker's file I/O is the library's own: the preload's hooks let it pass.
                let _inside = crate::reentry::Inside::enter();
                lower_priority();
                for job in rx {
                    let id = job.rec.desc.id;
                    shared.set(id, Status::Running);
                    let out = run(&job);
                    shared.set(id, Status::Done(out));
                }
            });
            match spawned {
                Ok(handle) => {
                    self.tx = Some(tx);
                    self.thread = Some(handle);
                }
                Err(e) => {
                    // No thread: this share fails (and is retried synchronously at finalize).
                    let out = Outcome {
                        files: Err(Reported::of(format_args!("cannot start the background flush thread: {e}"))),
                        secs: 0.0,
                        published: false,
                    };
                    self.shared.set(id, Status::Done(out));
                    return;
                }
            }
        }
        if let Some(tx) = &self.tx {
            if let Err(e) = tx.send(job) {
                let out = Outcome {
                    files: Err(Reported::of("the background flush thread has stopped")),
                    secs: 0.0,
                    published: false,
                };
                self.shared.set(e.0.rec.desc.id, Status::Done(out));
            }
        }
    }

    /// Record a share that cannot even start (this rank has no record of the dataset).
    pub fn fail(&self, id: u64, why: String) {
        self.shared.set(id, Status::Done(Outcome { files: Err(Reported { msg: why }), secs: 0.0, published: false }));
    }

    /// `(failed, seconds)` of a finished share, `None` while it is queued or running. A share
    /// never queued here counts as finished and failed.
    pub(crate) fn peek(&self, id: u64) -> Option<(bool, f64)> {
        let jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        match jobs.get(&id) {
            Some(Status::Done(o)) => Some((o.files.is_err(), o.secs)),
            Some(_) => None,
            None => Some((true, 0.0)),
        }
    }

    /// Block until this rank's share of dataset `id` is finished (no-op if not queued).
    pub fn wait(&self, id: u64) {
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        while matches!(jobs.get(&id), Some(Status::Queued | Status::Running)) {
            jobs = self.shared.changed.wait(jobs).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The outcome of a finished share, forgetting it.
    pub fn take(&self, id: u64) -> Option<Outcome> {
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        match jobs.get(&id) {
            Some(Status::Done(_)) => match jobs.remove(&id) {
                Some(Status::Done(o)) => Some(o),
                _ => None,
            },
            _ => None,
        }
    }

    /// Stop the worker after the queued shares (the caller waited for them).
    pub fn stop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn set(&self, id: u64, s: Status) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).insert(id, s);
        self.changed.notify_all();
    }
}

/// Background work yields to the application's threads: the calling thread runs at nice +10
/// under `SCHED_BATCH` (queuing work for it never preempts the application, whose rank may be
/// in the middle of a checkpoint the other ranks wait for).
pub(crate) fn lower_priority() {
    crate::sys::lower_thread_priority(10);
}

/// `flush/part.<rank>`: one rank's result for one attempt.
#[derive(Debug, Serialize, Deserialize)]
struct Part {
    token: String,
    rank: u32,
    files: Result<Vec<PrefixFile>, Reported>,
}

/// `flush/arrivals`: how many ranks finished the attempt named by `token`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Arrivals {
    token: String,
    count: u32,
    failed: u32,
}

fn flush_dir(job: &Job) -> PathBuf {
    job.layout.prefix_dataset_dir(job.rec.desc.id).join("flush")
}

/// One rank's share: mark (rank 0), copy, record the part, arrive, and publish if last.
fn run(job: &Job) -> Outcome {
    let t0 = Instant::now();
    let mut files = Err(Reported::of(""));
    if job.rank == 0 {
        if let Err(e) = mark_flushing(&job.layout, &job.rec) {
            files = Err(Reported::of(format_args!("cannot record the flush in the index: {e}")));
        }
    }
    if job.rank != 0 || files.as_ref().is_err_and(|e| e.msg.is_empty()) {
        let mut pace = Pace::new(job.bytes_per_sec);
        files = copy_files(&job.layout, &job.rec, job.buf, job.crc_on_flush, Default::default(), &mut pace)
            .map_err(Reported::of);
    }
    let dir = flush_dir(job);
    let part = Part { token: job.token.clone(), rank: job.rank, files: files.clone() };
    let recorded = std::fs::create_dir_all(&dir)
        .map_err(|source| Reported::of(TransferError::Create { path: dir.clone(), source }))
        .and_then(|_| {
            persist::write_atomic(&dir.join(format!("part.{}", job.rank)), "flushpart", &part).map_err(Reported::of)
        });
    if let Err(e) = recorded {
        files = Err(files.err().unwrap_or(e));
    }
    let failed = files.is_err();
    let arrived = persist::update(&dir.join("arrivals"), "arrivals", |a: &mut Arrivals| {
        if a.token != job.token {
            *a = Arrivals { token: job.token.clone(), count: 0, failed: 0 };
        }
        a.count += 1;
        a.failed += failed as u32;
        (a.count, a.failed)
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut out = Outcome { files, secs, published: false };
    match arrived {
        Err(e) => {
            if out.files.is_ok() {
                out.files = Err(Reported::of(format_args!("cannot count this rank as done: {e}")));
            }
        }
        Ok((count, 0)) if count == job.ranks => match publish_parts(job) {
            Ok(()) => {
                out.published = true;
                if let Some(f) = &job.on_published {
                    f(&job.rec, secs);
                }
            }
            Err(e) => {
                // the attempt is over: whoever waits for it stops waiting
                let _ = persist::update(&dir.join("arrivals"), "arrivals", |a: &mut Arrivals| a.failed += 1);
                out.files = Err(Reported::of(format_args!("publishing the dataset: {e}")));
            }
        },
        Ok(_) => {}
    }
    out
}

/// Block until the flush attempt `token` of dataset `id` is over: published (the index
/// entry and `rank2file.scr` written), or failed on some rank. Polls the prefix: no MPI, so
/// it may run inside a file hook.
pub(crate) fn wait_all_arrived(layout: &Layout, id: u64, token: &str, ranks: u32) {
    let path = layout.prefix_dataset_dir(id).join("flush").join("arrivals");
    loop {
        match persist::read::<Arrivals>(&path, "arrivals") {
            // Published: the publisher removed the flush directory.
            Ok(None) if !path.parent().is_some_and(|d| d.exists()) => return,
            Ok(Some(a)) if a.token == token && a.count >= ranks && a.failed > 0 => return,
            Err(_) => return,
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// The last rank to arrive: collect every part and publish the dataset.
fn publish_parts(job: &Job) -> Result<(), TransferError> {
    let dir = flush_dir(job);
    let mut all = Vec::with_capacity(job.ranks as usize);
    for r in 0..job.ranks {
        let path = dir.join(format!("part.{r}"));
        let Some(part): Option<Part> = persist::read(&path, "flushpart")? else {
            return Err(TransferError::Missing { path });
        };
        if part.token != job.token || part.rank != r {
            return Err(TransferError::OtherAttempt { path });
        }
        all.push(part.files.map_err(|why| TransferError::RankFailed { rank: r, why })?);
    }
    publish(&job.layout, &job.rec, all)?;
    let _ = crate::paths::remove_tree_if_exists(&dir);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::Prefix;
    use crate::state::dataset::DatasetDesc;
    use crate::state::filemap::FileMeta;
    use crate::state::index::Index;

    fn single() -> crate::desc::RedDesc {
        crate::desc::RedDesc {
            index: 0,
            interval: 1,
            group: "NODE".into(),
            store: PathBuf::from("/dev/shm"),
            scheme: crate::desc::Scheme::Single,
            set_size: 1,
            set_failures: 0,
            bypass: false,
            output: false,
            chosen_scheme: false,
            chosen_set_size: false,
        }
    }

    /// A prefix and a layout in a temporary directory.
    fn prefix() -> (tempfile::TempDir, Layout) {
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("prefix");
        std::fs::create_dir_all(prefix.join(".scr")).unwrap();
        let layout = Layout::new(Prefix::new(&prefix), &d.path().join("cntl"), "u", "1");
        (d, layout)
    }

    /// Rank `r`'s share of dataset `id` (`ckpt.<id>`): one file `src` of `size` bytes.
    fn share(layout: &Layout, id: u64, r: u32, ranks: u32, src: PathBuf, size: u64) -> Job {
        let rec = DatasetRecord {
            desc: DatasetDesc::sample(id, &format!("ckpt.{id}"), ranks),
            reddesc: single(),
            dir: src.parent().unwrap().to_path_buf(),
            files: vec![FileMeta {
                rel: PathBuf::from(format!("ckpt.{id}/rank_{r}")),
                path: src,
                size,
                crc: None,
                complete: true,
            }],
            complete: true,
            red: None,
        };
        Job {
            rec,
            layout: layout.clone(),
            rank: r,
            ranks,
            token: "t1".into(),
            buf: 4096,
            crc_on_flush: true,
            bytes_per_sec: 0,
            on_published: None,
        }
    }

    /// Four "ranks" in one process, each with its own worker, flush one dataset: only the
    /// last one to arrive publishes, and the index says complete with every file listed.
    #[test]
    fn a_failed_share_is_written_to_its_part_file_as_before() {
        // the part files of an attempt keep the format of Result<_, String>
        let typed: Result<Vec<PrefixFile>, Reported> = Err(Reported::of("rank 2: disk full"));
        let plain: Result<Vec<PrefixFile>, String> = Err("rank 2: disk full".into());
        let typed_json = serde_json::to_string(&typed).unwrap();
        assert_eq!(typed_json, serde_json::to_string(&plain).unwrap());
        let back: Result<Vec<PrefixFile>, Reported> = serde_json::from_str(&typed_json).unwrap();
        assert_eq!(back.unwrap_err().to_string(), "rank 2: disk full");
    }

    #[test]
    fn last_arrival_publishes() {
        let (d, layout) = prefix();
        let mut workers: Vec<Flusher> = (0..4).map(|_| Flusher::default()).collect();
        for (r, w) in workers.iter_mut().enumerate() {
            let src = d.path().join(format!("src{r}"));
            std::fs::write(&src, vec![r as u8; 1000 + r]).unwrap();
            w.submit(share(&layout, 3, r as u32, 4, src, 1000 + r as u64));
        }
        let mut published = 0;
        for (r, w) in workers.iter_mut().enumerate() {
            w.wait(3);
            let out = w.take(3).unwrap();
            assert_eq!(out.files.unwrap()[0].size, 1000 + r as u64);
            published += out.published as u32;
            w.stop();
        }
        assert_eq!(published, 1);
        let ix = Index::load(&layout.index()).unwrap();
        let e = &ix.datasets[&3];
        assert!(e.complete && !e.flushing && e.flushed.is_some(), "{e:?}");
        assert!(!layout.prefix_dataset_dir(3).join("flush").exists());
        assert_eq!(std::fs::read(layout.prefix.path.join("ckpt.3/rank_2")).unwrap(), vec![2u8; 1002]);
    }

    /// A rank whose file is gone fails its share; nobody publishes and the index entry stays
    /// incomplete.
    #[test]
    fn a_failed_share_blocks_publication() {
        let (d, layout) = prefix();
        let mut workers: Vec<Flusher> = (0..2).map(|_| Flusher::default()).collect();
        for (r, w) in workers.iter_mut().enumerate() {
            let src = d.path().join(format!("src{r}"));
            if r == 0 {
                std::fs::write(&src, b"data").unwrap();
            }
            w.submit(share(&layout, 5, r as u32, 2, src, 4));
        }
        let outs: Vec<Outcome> = workers
            .iter_mut()
            .map(|w| {
                w.wait(5);
                w.stop();
                w.take(5).unwrap()
            })
            .collect();
        assert!(outs[0].files.is_ok() && outs[1].files.is_err());
        assert!(outs.iter().all(|o| !o.published));
        let ix = Index::load(&layout.index()).unwrap();
        assert!(!ix.datasets[&5].complete);
    }
}
