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
//! the source, which must still be there with the same size. A copy mapped shared through one
//! of its descriptors (the preload watches `mmap`, [`super::calls::mapped_shared`]) is kept
//! while this process still maps it (a mapping may write after the last close), as
//! `/proc/self/maps` shows by device and inode; that list is read only for such a copy, since
//! for an MPI program the kernel formats hundreds of mappings, ~0.3 ms a read (1.2% of pw.x's
//! run time when every unchanged copy was checked). A copy renamed while open is kept too (its
//! old name is gone, as the application made it). Not covered: a forked child that writes
//! through an inherited descriptor after the parent's last close writes to a file that is
//! gone (before, its bytes would have joined the dataset); nor a shared mapping the preload
//! does not see: made with the raw system call, or through a descriptor no hooked open under
//! the prefix gave (`/proc/self/fd/N`, the cache path itself, one received over a socket).

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
    /// Mapped shared through one of its descriptors at some time ([`Copied::mapped_shared`]).
    mapped: bool,
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
        Some(Copied { rel: rel.to_path_buf(), source: source.to_path_buf(), stamp: Stamp::of(copy)?, mapped: false })
    }

    /// The application maps the copy shared (or is about to): at its last close, the list of
    /// this process's mappings is read to see whether one is still there.
    pub fn mapped_shared(&mut self) {
        self.mapped = true;
    }
}

/// Whether the pending copy at `cache`, now called `rel`, still holds exactly the bytes of
/// its source (and was neither renamed, written, truncated, re-timed nor re-moded since the
/// copy), and, if it was mapped shared, is not mapped any more.
pub fn unchanged(c: &Copied, rel: &Path, cache: &Path) -> bool {
    if c.rel != rel || Stamp::of(cache) != Some(c.stamp) {
        return false;
    }
    let source_len = std::fs::metadata(&c.source).map(|m| m.len()).ok();
    source_len == Some(c.stamp.len)
        && same_bytes(&c.source, cache, c.stamp.len).unwrap_or(false)
        && !(c.mapped && mapped(&c.stamp))
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

/// Whether this process maps the file `s` describes (a mapping may still write to it), by
/// device and inode, whatever path mapped it. Unknown: yes.
fn mapped(s: &Stamp) -> bool {
    // (room for a large program's list at once: read from empty, the list, which `stat` says
    // is empty, comes in probes of 32 bytes and up, some 20 reads for an MPI program)
    let mut maps = String::with_capacity(256 << 10);
    let read =
        std::fs::File::open("/proc/self/maps").and_then(|mut f| std::io::Read::read_to_string(&mut f, &mut maps));
    if read.is_err() {
        return true;
    }
    // glibc's dev_t: major in bits 8-19 and 32-43, minor in bits 0-7 and 12-31
    let major = ((s.dev >> 32) & 0xffff_f000) | ((s.dev >> 8) & 0xfff);
    let minor = ((s.dev >> 12) & 0xffff_ff00) | (s.dev & 0xff);
    // address perms offset major:minor inode [path], the device numbers in hex
    maps.lines().any(|l| {
        let mut f = l.split_whitespace().skip(3);
        let dev = f.next().and_then(|d| d.split_once(':'));
        let at = dev.and_then(|(a, b)| Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?)));
        at == Some((major, minor)) && f.next().and_then(|i| i.parse::<u64>().ok()) == Some(s.ino)
    })
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

    #[test]
    fn a_copy_mapped_shared_is_kept_while_the_mapping_lasts() {
        let (d, _src, copy, mut c) = setup(b"eight by");
        c.mapped_shared();
        assert!(unchanged(&c, Path::new("f"), &copy), "marked, but no mapping left: its bytes decide");
        // mapped through another path (a symlinked directory): found by device and inode
        std::os::unix::fs::symlink(d.path(), d.path().with_extension("link")).unwrap();
        let other = d.path().with_extension("link").join("copy");
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&other).unwrap();
        let m = crate::sys::SharedWords::map(std::os::fd::AsFd::as_fd(&f), 1).unwrap();
        drop(f);
        assert!(!unchanged(&c, Path::new("f"), &copy), "mapped after the close");
        drop(m);
        assert!(unchanged(&c, Path::new("f"), &copy));
        std::fs::remove_file(d.path().with_extension("link")).unwrap();
    }
}
