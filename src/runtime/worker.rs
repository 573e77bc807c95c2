//! A background thread of the runtime: runs queued jobs one at a time, in the order they were
//! queued, at a lower CPU priority than the application (nice +10, `SCHED_BATCH`: queuing a
//! job never preempts the application), with the preload's hooks passing its file I/O (and
//! MPI) straight through. The checksum, deletion and encoding workers are built on it; each
//! keeps the status of its own jobs.
//!
//! A job that panics is caught and reported through `on_panic`, so the thread keeps serving
//! the queue and a waiter is never left waiting for a job that died.

use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;

/// One worker thread and its queue.
pub(super) struct Worker<J: Send + 'static> {
    name: &'static str,
    tx: Option<Sender<J>>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static> Worker<J> {
    pub(super) fn new(name: &'static str) -> Worker<J> {
        Worker { name, tx: None, thread: None }
    }

    /// Whether the thread runs (it starts with the first job, or with [`Worker::start`]).
    pub(super) fn running(&self) -> bool {
        self.tx.is_some()
    }

    /// Start the thread now: `run` handles each job, `on_panic` a job whose `run` panicked.
    pub(super) fn start(
        &mut self,
        run: impl Fn(J) + Send + 'static,
        on_panic: impl Fn(u64) + Send + 'static,
        key: impl Fn(&J) -> u64 + Send + 'static,
    ) -> std::io::Result<()> {
        if self.tx.is_some() {
            return Ok(());
        }
        let (tx, rx) = channel::<J>();
        let handle = std::thread::Builder::new().name(self.name.into()).spawn(move || {
            let _inside = crate::reentry::Inside::enter();
            crate::transfer::background::lower_priority();
            for job in rx {
                let k = key(&job);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(job))).is_err() {
                    on_panic(k);
                }
            }
        })?;
        self.tx = Some(tx);
        self.thread = Some(handle);
        Ok(())
    }

    /// Queue a job for the running thread; gives it back if there is none.
    pub(super) fn send(&self, job: J) -> Result<(), J> {
        match &self.tx {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Let the queued jobs finish and stop the thread.
    pub(super) fn finish(&mut self) {
        self.tx = None;
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl<J: Send + 'static> Drop for Worker<J> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn jobs_run_in_order_and_a_panic_is_reported() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let panicked = Arc::new(Mutex::new(Vec::new()));
        let mut w: Worker<u64> = Worker::new("scr-test");
        let (s, p) = (seen.clone(), panicked.clone());
        w.start(
            move |j| {
                assert!(j != 2, "job 2 fails");
                s.lock().unwrap().push(j)
            },
            move |k| p.lock().unwrap().push(k),
            |j| *j,
        )
        .unwrap();
        for j in 0..5 {
            w.send(j).unwrap();
        }
        w.finish();
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 3, 4]);
        assert_eq!(*panicked.lock().unwrap(), vec![2]);
        assert!(w.send(9).is_err(), "no thread after finish");
    }
}
