//! One run at a time on a prefix: `SCR_Init` takes the prefix's job lock on rank 0 before it
//! touches anything (see [`crate::state::joblock`]) and refuses to start, on every rank, when
//! another run holds it; `SCR_Finalize` releases it, and so does the death of rank 0's process.
//! Without it, two jobs on one prefix read, fail and replace each other's checkpoints and
//! index entries (both number their datasets from 1).
//!
//! A holder gets [`GRACE`] to go away before the run is refused: a relaunch right after a
//! killed run may find the old rank 0 still being reaped (the launcher ended first), and the
//! kernel releases its lock only once it is gone.

use std::time::{Duration, Instant};

use super::error::RuntimeError;
use super::Runtime;
use crate::error::Result;
use crate::{scr_debug, scr_warn};

/// How long `SCR_Init` waits for a run holding the lock to end before refusing to start.
const GRACE: Duration = Duration::from_secs(10);
use crate::state::joblock::{self, Acquired, Holder};

impl Runtime {
    /// Take the job lock (waiting up to [`GRACE`] for a holder to end), or fail `SCR_Init` on
    /// every rank with a message naming the holder (collective). A file system that cannot
    /// lock gets a warning and no lock.
    pub(super) fn lock_prefix(&mut self) -> Result<()> {
        let mine: std::result::Result<(), RuntimeError> = if self.rank0() {
            let scr_dir = self.layout.scr_dir();
            let me = Holder::me(&self.layout.jobid);
            let start = Instant::now();
            let mut acquired = joblock::try_acquire(&scr_dir, &me);
            while matches!(acquired, Ok(Acquired::InUse(_))) && start.elapsed() < GRACE {
                if start.elapsed() < Duration::from_millis(100) {
                    scr_debug!(
                        1,
                        "the prefix's job lock is held; waiting up to {} s for its holder to end",
                        GRACE.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
                acquired = joblock::try_acquire(&scr_dir, &me);
            }
            match acquired {
                Ok(Acquired::Held(lock)) => {
                    self.job_lock = Some(lock);
                    Ok(())
                }
                Ok(Acquired::Unsupported(e)) => {
                    scr_warn!(
                        "cannot lock {} ({e}): nothing stops another job from using prefix {} at the same time as \
                         this one",
                        joblock::path(&scr_dir).display(),
                        self.layout.prefix.path.display()
                    );
                    Ok(())
                }
                Ok(Acquired::InUse(holder)) => {
                    let who = match &holder {
                        Some(h) if h.job == me.job => format!("another run of this job ({})", h.describe()),
                        Some(h) => format!("another job ({})", h.describe()),
                        None => "another run (its record is not readable yet)".to_string(),
                    };
                    Err(RuntimeError::PrefixInUse {
                        prefix: self.layout.prefix.path.clone(),
                        who,
                        lock: joblock::path(&scr_dir),
                    })
                }
                Err(e) => Err(RuntimeError::Lock(e.to_string())),
            }
        } else {
            Ok(())
        };
        Ok(self.world.bcast(0, &mine)??)
    }
}
