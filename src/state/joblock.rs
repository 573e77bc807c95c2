//! The job lock: one run at a time on a prefix. Rank 0 of a run holds an exclusive POSIX
//! record lock (open-file-description flavour, classic process-owned where the kernel has no
//! OFD locks) on `<prefix>/.scr/job.lock` from `SCR_Init` to `SCR_Finalize`; the file holds a
//! record of the holder (job id, host, pid, since when), so a run refused names the one
//! running. The kernel releases the lock when its holder dies however it dies: a killed run
//! never blocks the next one, and nothing has to be cleaned up. A record left by a run that
//! ended means nothing; only the lock counts.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::persist::{self, MetaError};
use crate::sys;

const KIND: &str = "job-lock";

/// The lock file in a prefix's `.scr` directory.
pub fn path(scr_dir: &Path) -> PathBuf {
    scr_dir.join("job.lock")
}

/// Who holds the lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Holder {
    pub job: String,
    pub host: String,
    pub pid: u32,
    /// Seconds since the epoch when it took the lock.
    pub since: i64,
}

impl Holder {
    /// The calling process, now, for `job`.
    pub fn me(job: &str) -> Holder {
        Holder {
            job: job.to_string(),
            host: crate::identity::host_name(),
            pid: std::process::id(),
            since: crate::identity::now_secs(),
        }
    }

    /// "job X on host H, pid P, since T UTC".
    pub fn describe(&self) -> String {
        format!(
            "job {} on host {}, pid {}, since {} UTC",
            self.job,
            self.host,
            self.pid,
            crate::identity::iso_time(self.since)
        )
    }
}

/// The lock, held until dropped (or until the process ends).
pub(crate) struct JobLock {
    file: File,
    cmd: libc::c_int,
}

impl Drop for JobLock {
    fn drop(&mut self) {
        // closing the file would release it too
        let _ = sys::lock_whole_file(self.file.as_fd(), self.cmd, libc::F_UNLCK);
    }
}

/// What [`try_acquire`] found.
pub(crate) enum Acquired {
    /// The lock is ours; the record names us.
    Held(JobLock),
    /// Another process holds it: its record (`None` if it cannot be read yet, or is damaged).
    InUse(Option<Holder>),
    /// The file system does not lock (ENOLCK and the like) or is read-only: no protection.
    Unsupported(io::Error),
}

/// Try once, without waiting, to take the lock in `scr_dir` (created if missing) for `me`.
pub(crate) fn try_acquire(scr_dir: &Path, me: &Holder) -> Result<Acquired, MetaError> {
    let lock_path = path(scr_dir);
    let io_err = |op: &'static str| {
        let p = lock_path.clone();
        move |source| MetaError::Io { op, path: p, source }
    };
    std::fs::create_dir_all(scr_dir).map_err(|source| MetaError::Io {
        op: "create directory",
        path: scr_dir.to_path_buf(),
        source,
    })?;
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // never through a link planted at SCR's name; not inherited by exec'd children
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock_path);
    let mut file = match opened {
        Ok(f) => f,
        // a read-only prefix: nothing to lock with (and nothing this run writes there)
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => return Ok(Acquired::Unsupported(e)),
        Err(e) => return Err(io_err("open lock file")(e)),
    };
    let mut cmd = libc::F_OFD_SETLK;
    while let Err(e) = sys::lock_whole_file(file.as_fd(), cmd, libc::F_WRLCK) {
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EINVAL) if cmd == libc::F_OFD_SETLK => cmd = libc::F_SETLK,
            Some(libc::EAGAIN) | Some(libc::EACCES) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).map_err(io_err("read"))?;
                return Ok(Acquired::InUse(persist::decode(KIND, &bytes, &lock_path).ok()));
            }
            Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(Acquired::Unsupported(e)),
            _ => return Err(MetaError::Io { op: "lock", path: lock_path, source: e }),
        }
    }
    let lock = JobLock { file, cmd };
    // The record: written whole, then the file cut to its length (a reader sees a complete
    // record, or one whose check fails).
    let bytes = persist::encode(KIND, me);
    lock.file.write_all_at(&bytes, 0).map_err(io_err("write"))?;
    lock.file.set_len(bytes.len() as u64).map_err(io_err("size"))?;
    Ok(Acquired::Held(lock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_told_who_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let scr = dir.path().join(".scr");
        let a = Holder { job: "A".into(), host: "h".into(), pid: 1, since: 1_700_000_000 };
        let lock = match try_acquire(&scr, &a).unwrap() {
            Acquired::Held(l) => l,
            _ => panic!("the first one gets it"),
        };
        // OFD locks conflict between two opens in one process, as between two processes.
        match try_acquire(&scr, &Holder::me("B")).unwrap() {
            Acquired::InUse(Some(h)) => {
                assert_eq!(h, a);
                assert_eq!(h.describe(), "job A on host h, pid 1, since 2023-11-14T22:13:20 UTC");
            }
            _ => panic!("the second one is refused with the record"),
        }
        drop(lock);
        assert!(matches!(try_acquire(&scr, &Holder::me("B")).unwrap(), Acquired::Held(_)));
    }
}
