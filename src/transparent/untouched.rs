//! Updates in place that changed nothing. An open for reading and writing without
//! `O_TRUNC` of a file SCR holds in a complete dataset (or of a plain file under a pattern)
//! copies its bytes to a new pending file first, since the application may write. Many
//! programs open a file that way only to read it: Fortran's `OPEN` without `ACTION=` (gfortran
//! tries `O_RDWR` first), `fopen(..., "r+")`. Such a copy, closed unchanged, would make a new
//! version of its dataset, a checkpoint of its own (Quantum ESPRESSO reads `out/<prefix>.update`
//! so at every MD step), and copy bytes for nothing.
//!
//! So the copy's state right after copying is kept ([`Copied`]); at its last close,
//! [`unchanged`] says whether it still has the source's bytes, and the caller drops it: the
//! file it replaced stands again, as a plain file system would show it, and no version forms.
//!
//! Writes are not all seen by the hooks (`pwritev`, `ftruncate`, `mmap`, ...), so the test is
//! the bytes, not the calls: the same inode, size, mode, modification and change times as after
//! the copy (a quick rejection of most written files), then a comparison of every byte with
//! the source, which must still be there with the same size. A copy mapped shared through
//! one of its descriptors (it may still be written through the mapping after its last close:
//! the preload watches `mmap`, [`super::calls::mapped_shared`]) is kept, and so is one renamed
//! while open (its old name is gone, as the application made it). Not covered: a forked child
//! that writes through an inherited descriptor after the parent's last close writes to a file
//! that is gone (before, its bytes would have joined the dataset), and neither does a mapping
//! made with the raw system call or through a path outside the prefix (`/proc/self/fd/N`).
//! (Reading `/proc/self/maps` at each such close instead cost an MPI program about 0.3 ms,
//! its hundreds of mappings formatted by the kernel: 1.2% of pw.x's run time.)

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A pending copy as made: the path it was made for, where its bytes came from, and its
/// metadata right after copying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    rel: PathBuf,
    source: PathBuf,
    stamp: Stamp,
}

/// What changes when a file is written, truncated or has its mode or times changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(path).ok()?;
        m.is_file().then(|| Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mode: m.mode(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl Copied {
    /// `copy` was just made from `source` for the application's path `rel` (`None` if it
    /// cannot be looked at: never dropped).
    pub fn now(rel: &Path, source: &Path, copy: &Path) -> Option<Copied> {
        Some(Copied { rel: rel.to_path_buf(), source: source.to_path_buf(), stamp: Stamp::of(copy)? })
    }
}

/// Whether the pending copy at `cache`, now called `rel`, still holds exactly the bytes of
/// its source (and was neither renamed, written, truncated, re-timed nor re-moded since the
/// copy). The caller forgets `c` when the copy is mapped shared.
pub fn unchanged(c: &Copied, rel: &Path, cache: &Path) -> bool {
    if c.rel != rel || Stamp::of(cache) != Some(c.stamp) {
        return false;
    }
    let source_len = std::fs::metadata(&c.source).map(|m| m.len()).ok();
    source_len == Some(c.stamp.len) && same_bytes(&c.source, cache, c.stamp.len).unwrap_or(false)
}

/// Whether `a` and `b`, both `len` bytes long as last seen, hold the same bytes (a file cut
/// since fails the read: not the same).
fn same_bytes(a: &Path, b: &Path, len: u64) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    let mut left = len;
    while left > 0 {
        let n = left.min(ba.len() as u64) as usize;
        fa.read_exact(&mut ba[..n])?;
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
        left -= n as u64;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn setup(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, PathBuf, Copied) {
        let d = tempfile::tempdir().unwrap();
        let (src, copy) = (d.path().join("src"), d.path().join("copy"));
        std::fs::write(&src, bytes).unwrap();
        std::fs::copy(&src, &copy).unwrap();
        let c = Copied::now(Path::new("f"), &src, &copy).unwrap();
        (d, src, copy, c)
    }

    #[test]
    fn a_copy_only_read_is_unchanged() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for bytes in [&b""[..], b"abc", &big] {
            let (_d, _src, copy, c) = setup(bytes);
            let mut s = Vec::new();
            File::open(&copy).unwrap().read_to_end(&mut s).unwrap();
            assert!(unchanged(&c, Path::new("f"), &copy), "{} bytes", bytes.len());
        }
    }

    #[test]
    fn any_write_truncation_or_mode_change_is_seen() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        // a byte changed in place (times may not move within the clock's granularity: the
        // bytes decide), the file cut, grown, re-moded
        let (_d, _src, copy, c) = setup(&big);
        let mut f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
        std::os::unix::fs::FileExt::write_at(&f, b"X", 150_000).unwrap();
        f.flush().unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
        let (_d, _src, copy, c) = setup(&big);
        std::fs::OpenOptions::new().write(true).open(&copy).unwrap().set_len(10).unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
        let (_d, _src, copy, c) = setup(b"abc");
        std::fs::OpenOptions::new().append(true).open(&copy).unwrap().write_all(b"d").unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
        let (_d, _src, copy, c) = setup(b"abc");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
    }

    #[test]
    fn a_renamed_copy_is_kept() {
        let (_d, _src, copy, c) = setup(b"abc");
        assert!(!unchanged(&c, Path::new("g"), &copy));
    }

    #[test]
    fn a_source_gone_or_changed_keeps_the_copy() {
        let (_d, src, copy, c) = setup(b"abc");
        std::fs::remove_file(&src).unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
        let (_d, src, copy, c) = setup(b"abc");
        std::fs::write(&src, b"abd").unwrap();
        assert!(!unchanged(&c, Path::new("f"), &copy));
    }
}
