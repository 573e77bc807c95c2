//! Verified file copies. A file is written to `.<name>.scrpart` beside its destination
//! ([`crate::paths::temp_name`]: shortened with a hash when the name is too long; created
//! with `O_EXCL|O_NOFOLLOW`, so a link planted there is never written through),
//! fsynced, checked against the expected size and CRC32, and only then renamed into place,
//! so a reader never sees a partial or corrupt file under the real name, and an existing
//! good file is replaced only by a verified one. The copy keeps the source's permission bits
//! and its access and modification times, as `cp -p` does (setuid, setgid and sticky bits
//! are dropped): a flushed checkpoint file looks in the prefix as it looked in cache, and a
//! fetched one in cache as in the prefix. Best effort: on a file system that refuses them the
//! copy still succeeds, with one warning per process.

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
    make_parent(dst, private)?;
    copy_verified_paced(src, dst, expect_size, expect_crc, buf_size, &mut Pace::unlimited())
}

/// [`copy_verified`] at most as fast as `pace` allows, into a directory the caller made
/// (the flush: [`crate::paths::Prefix::for_write`]).
pub(crate) fn copy_verified_paced(
    src: &Path,
    dst: &Path,
    expect_size: Option<u64>,
    expect_crc: Option<u32>,
    buf_size: usize,
    pace: &mut Pace,
) -> Result<Copied> {
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

/// Make `dst` a hard link of `existing` (a file this transfer has just placed), through a
/// temporary name renamed into place like a copy, so a reader never finds `dst` missing when
/// it was there before. `private`: as in [`copy_verified`].
fn link_verified(existing: &Path, dst: &Path, private: bool) -> Result<()> {
    make_parent(dst, private)?;
    let tmp = part_name(dst);
    crate::paths::remove_file_if_exists(&tmp)?;
    fs::hard_link(existing, &tmp).ctx("link", &tmp)?;
    fs::rename(&tmp, dst).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io("rename into place", dst, e)
    })
}

/// Create the missing directories above `dst`: with mode 0700 when `private` (cache), else
/// by the umask (prefix).
fn make_parent(dst: &Path, private: bool) -> Result<()> {
    match dst.parent() {
        Some(parent) if private => Ok(crate::paths::create_dirs(parent)?),
        Some(parent) => fs::create_dir_all(parent).ctx("create directory", parent),
        None => Ok(()),
    }
}

/// [`link_verified`], or `false` when the file system refuses (said at `SCR_DEBUG=1`): the
/// caller then copies the bytes instead.
pub fn try_link(existing: &Path, dst: &Path, private: bool) -> bool {
    match link_verified(existing, dst, private) {
        Ok(()) => {
            crate::scr_debug!(2, "placed {} as a hard link of {}", dst.display(), existing.display());
            true
        }
        Err(e) => {
            crate::scr_debug!(1, "{e}; copying instead");
            false
        }
    }
}

/// A file's identity: its device and inode numbers.
pub type FileId = (u64, u64);

/// The identity of the regular file `path`, following no link at the last component: two
/// names of one rank's dataset with the same identity are hard links of one file.
pub fn identity(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path).ok().filter(|m| m.file_type().is_file()).map(|m| (m.dev(), m.ino()))
}

fn copy_to(src: &Path, dst: &Path, buf_size: usize, pace: &mut Pace) -> Result<Copied> {
    let attrs = fs::metadata(src).ctx("stat", src)?;
    let mut out = crate::paths::create_temp(dst, 0o666).ctx("create", dst)?;
    let c = stream(src, buf_size, |chunk| {
        out.write_all(chunk).ctx("write", dst)?;
        pace.after(chunk.len());
        Ok(())
    })?;
    if let Err(e) = keep_attrs(&out, &attrs) {
        // a file system that refuses them (some FUSE, CIFS, NFS mappings) still gets the bytes
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::scr_warn!("cannot give {} the mode and times of {}: {e} (said once)", dst.display(), src.display());
        }
    }
    out.sync_all().ctx("fsync", dst)?;
    Ok(c)
}

/// Give `out` the permission bits (setuid, setgid and sticky left out) and the access and
/// modification times of the file `md` describes; after the last write, which would move the
/// modification time again.
pub(crate) fn keep_attrs(out: &fs::File, md: &fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let times = fs::FileTimes::new().set_accessed(md.accessed()?).set_modified(md.modified()?);
    out.set_times(times)?;
    out.set_permissions(fs::Permissions::from_mode(md.permissions().mode() & 0o777))
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
    fn the_copy_keeps_mode_and_times() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s");
        fs::write(&src, vec![3u8; 3 << 20]).unwrap();
        let t = std::time::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
        let f = fs::File::options().write(true).open(&src).unwrap();
        f.set_times(fs::FileTimes::new().set_accessed(t).set_modified(t)).unwrap();
        drop(f);
        fs::set_permissions(&src, fs::Permissions::from_mode(0o4751)).unwrap();
        let dst = d.path().join("d");
        copy_verified(&src, &dst, Some(3 << 20), None, 1 << 16, false).unwrap();
        let md = fs::metadata(&dst).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o751, "setuid dropped, the rest kept");
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_000_000_000, 123_456_789));
        assert_eq!(md.modified().unwrap(), t);
    }

    #[test]
    fn pace_limits_bandwidth() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("s");
        fs::write(&src, vec![1u8; 64 * 1024]).unwrap();
        let t = Instant::now();
        let mut pace = Pace::new(256 * 1024);
        copy_verified_paced(&src, &d.path().join("d"), Some(64 * 1024), None, 4096, &mut pace).unwrap();
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
