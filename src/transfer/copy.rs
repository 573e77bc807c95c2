//! Verified file copies. A file is written to `.<name>.scrpart` beside its destination
//! ([`crate::paths::temp_name`]: shortened with a hash when the name is too long; created
//! with `O_EXCL|O_NOFOLLOW`, so a link planted there is never written through),
//! fsynced, checked against the expected size and CRC32, and only then renamed into place,
//! so a reader never sees a partial or corrupt file under the real name, and an existing
//! good file is replaced only by a verified one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::checksum::{stream, Copied};
use crate::error::{Error, IoContext, Result};

/// The temporary name a file is published under.
pub(crate) fn part_name(dst: &Path) -> PathBuf {
    crate::paths::temp_name(dst, ".scrpart")
}

/// A bandwidth limit for background copies (`SCR_FLUSH_ASYNC_BW`): after each chunk the
/// copy sleeps until it is no further ahead than `bytes_per_sec` allows since it started.
#[derive(Debug)]
pub(crate) struct Pace {
    bytes_per_sec: u64,
    start: Instant,
    sent: u64,
}

impl Pace {
    /// `0` means no limit.
    pub fn new(bytes_per_sec: u64) -> Pace {
        Pace { bytes_per_sec, start: Instant::now(), sent: 0 }
    }

    fn unlimited() -> Pace {
        Pace::new(0)
    }

    /// Account for `n` more bytes, sleeping if they came too fast.
    fn after(&mut self, n: usize) {
        if self.bytes_per_sec == 0 {
            return;
        }
        self.sent += n as u64;
        let due = Duration::from_secs_f64(self.sent as f64 / self.bytes_per_sec as f64);
        if let Some(ahead) = due.checked_sub(self.start.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// Copy `src` to `dst` through a temporary name, checking `expect_size` and `expect_crc`
/// when given. `private`: create missing parent directories with mode 0700 (cache) rather
/// than by the umask (prefix).
pub(crate) fn copy_verified(
    src: &Path,
    dst: &Path,
    expect_size: Option<u64>,
    expect_crc: Option<u32>,
    buf_size: usize,
    private: bool,
) -> Result<Copied> {
    copy_verified_paced(src, dst, expect_size, expect_crc, buf_size, private, &mut Pace::unlimited())
}

/// [`copy_verified`] at most as fast as `pace` allows.
pub(crate) fn copy_verified_paced(
    src: &Path,
    dst: &Path,
    expect_size: Option<u64>,
    expect_crc: Option<u32>,
    buf_size: usize,
    private: bool,
    pace: &mut Pace,
) -> Result<Copied> {
    if let Some(parent) = dst.parent() {
        if private {
            crate::paths::create_dirs(parent)?;
        } else {
            fs::create_dir_all(parent).ctx("create directory", parent)?;
        }
    }
    let tmp = part_name(dst);
    let result = copy_to(src, &tmp, buf_size, pace).and_then(|c| {
        if let Some(s) = expect_size {
            if c.size != s {
                return Err(Error::Integrity {
                    path: src.to_path_buf(),
                    why: format!("size is {} bytes, {s} were recorded", c.size),
                });
            }
        }
        if let Some(e) = expect_crc {
            if c.crc != e {
                return Err(Error::Integrity {
                    path: src.to_path_buf(),
                    why: format!("CRC32 is {:#010x}, {e:#010x} was recorded (the data is corrupt)", c.crc),
                });
            }
        }
        fs::rename(&tmp, dst).ctx("rename into place", dst)?;
        Ok(c)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn copy_to(src: &Path, dst: &Path, buf_size: usize, pace: &mut Pace) -> Result<Copied> {
    let mut out = crate::paths::create_temp(dst, 0o666).ctx("create", dst)?;
    let c = stream(src, buf_size, |chunk| {
        out.write_all(chunk).ctx("write", dst)?;
        pace.after(chunk.len());
        Ok(())
    })?;
    out.sync_all().ctx("fsync", dst)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::file_crc;

    #[test]
    fn copies_and_verifies() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s");
        fs::write(&src, vec![7u8; 100_000]).unwrap();
        let c = file_crc(&src, 4096).unwrap();
        let dst = d.path().join("a/b/d");
        assert_eq!(copy_verified(&src, &dst, Some(100_000), Some(c.crc), 4096, false).unwrap(), c);
        assert_eq!(fs::read(&dst).unwrap().len(), 100_000);
    }

    #[test]
    fn pace_limits_bandwidth() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s");
        fs::write(&src, vec![1u8; 64 * 1024]).unwrap();
        let t = Instant::now();
        let mut pace = Pace::new(256 * 1024);
        copy_verified_paced(&src, &d.path().join("d"), Some(64 * 1024), None, 4096, false, &mut pace).unwrap();
        // 64 KiB at 256 KiB/s cannot finish in less than a quarter second (a lower bound
        // only: the copy may always be slower).
        assert!(t.elapsed() >= Duration::from_millis(240), "{:?}", t.elapsed());
    }

    #[test]
    fn corrupt_source_never_replaces_destination() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s");
        fs::write(&src, b"hello world").unwrap();
        let good = file_crc(&src, 64).unwrap();
        let dst = d.path().join("d");
        fs::write(&dst, b"previous").unwrap();
        fs::write(&src, b"hellO world").unwrap();
        let e = copy_verified(&src, &dst, Some(11), Some(good.crc), 64, false).unwrap_err();
        assert!(e.to_string().contains("CRC32"), "{e}");
        assert_eq!(fs::read(&dst).unwrap(), b"previous");
        assert!(!part_name(&dst).exists());
        let e = copy_verified(&src, &dst, Some(12), None, 64, false).unwrap_err();
        assert!(e.to_string().contains("size"), "{e}");
    }
}
