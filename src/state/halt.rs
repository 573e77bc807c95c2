//! The halt file (`<prefix>/.scr/halt.scr`, user guide 2.9): conditions under which the job
//! should stop, shared by the running library and `scr_halt` through a locked
//! read-modify-write, and the reason recorded when a run stops (which tells the job script
//! not to relaunch).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::persist::{self, MetaError};

const KIND: &str = "halt";

/// Reason `SCR_Finalize` records.
pub(crate) const FINALIZE_REASON: &str = "SCR_FINALIZE_CALLED";

/// The halt file (`<prefix>/.scr/halt.scr`): the conditions under which the job stops, set by
/// `scr_halt` and by the library (the countdown, the exit reason).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Halt {
    /// Set: the job must stop (and not be relaunched).
    pub exit_reason: Option<String>,
    /// Halt after this many more successful checkpoints (0: now).
    pub checkpoints_left: Option<u64>,
    /// Halt when fewer than `halt_seconds` remain before this time (seconds since epoch).
    pub exit_before: Option<i64>,
    /// Halt at the first checkpoint after this time (seconds since epoch).
    pub exit_after: Option<i64>,
    /// Seconds before the end time (or `exit_before`) at which to halt.
    pub halt_seconds: Option<u64>,
}

impl Halt {
    /// Read the halt file at `path` (missing: no condition; damaged: an error naming it).
    pub fn load(path: &Path) -> Result<Halt, MetaError> {
        Ok(persist::read(path, KIND)?.unwrap_or_default())
    }

    /// [`Halt::load`] for the running job's rank 0, which reads the file after every
    /// checkpoint, in the prefix: while it is the file read last time, settled
    /// ([`persist::read_memo`]), an open and an `fstat` stand for the read.
    pub(crate) fn load_remembered(path: &Path) -> Result<Halt, MetaError> {
        static MEMO: std::sync::Mutex<persist::Memo<Halt>> = std::sync::Mutex::new(None);
        let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        Ok(persist::read_memo(&mut memo, path, KIND)?.unwrap_or_default())
    }

    /// Locked read-modify-write.
    pub fn update<R>(path: &Path, f: impl FnOnce(&mut Halt) -> R) -> Result<R, MetaError> {
        persist::update(path, KIND, f)
    }

    /// A checkpoint was taken: decrement `scr_halt --checkpoints`' count, if one is set. The
    /// file (in the prefix, written with fsync) is rewritten only then, not at every checkpoint.
    pub(crate) fn count_checkpoint(path: &Path) -> Result<(), MetaError> {
        // no count set (the usual case): not even the lock is taken; a count `scr_halt` sets
        // meanwhile counts from the next checkpoint
        if Halt::load_remembered(path)?.checkpoints_left.is_none() {
            return Ok(());
        }
        // the closure's Err(()): no count is set, and the file is left as it is
        let _rewritten = persist::try_update(path, KIND, |h: &mut Halt| match h.checkpoints_left.as_mut() {
            Some(n) => {
                *n = n.saturating_sub(1);
                Ok(())
            }
            None => Err(()),
        })?;
        Ok(())
    }

    /// Why the job should halt now, if it should. `end_time` is the allocation's end.
    pub(crate) fn check(&self, now: i64, end_time: Option<i64>) -> Option<String> {
        if let Some(r) = &self.exit_reason {
            return Some(format!("exit reason {r:?} in the halt file"));
        }
        if self.checkpoints_left == Some(0) {
            return Some("no checkpoints left (scr_halt --checkpoints)".into());
        }
        if let Some(after) = self.exit_after {
            if now >= after {
                return Some(format!("halt requested after {}", crate::identity::iso_time(after)));
            }
        }
        let secs = self.halt_seconds.unwrap_or(0) as i64;
        if let Some(before) = self.exit_before {
            if now + secs >= before {
                return Some(format!("halt requested {secs} s before {}", crate::identity::iso_time(before)));
            }
        }
        if secs > 0 {
            if let Some(end) = end_time {
                if now + secs >= end {
                    return Some(format!("{} s remain in the allocation, SCR_HALT_SECONDS is {secs}", end - now));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions() {
        let h = Halt::default();
        assert_eq!(h.check(100, Some(1000)), None);
        let h = Halt { checkpoints_left: Some(0), ..Default::default() };
        assert!(h.check(0, None).is_some());
        let h = Halt { exit_after: Some(50), ..Default::default() };
        assert!(h.check(49, None).is_none() && h.check(50, None).is_some());
        let h = Halt { halt_seconds: Some(60), ..Default::default() };
        assert!(h.check(900, Some(1000)).is_none());
        assert!(h.check(940, Some(1000)).is_some());
        let h = Halt { exit_before: Some(1000), halt_seconds: Some(10), ..Default::default() };
        assert!(h.check(980, None).is_none() && h.check(990, None).is_some());
    }
}
