//! The ground floor of transparent mode: the answers the front end applies ([`Call`],
//! [`Done`], [`Opening`]) and the plain file operations several calls share (what the prefix
//! holds at a path, an errno from an I/O error, copying pending bytes to the application's
//! path). Nothing here knows the session, the file table or the process state.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::scr_error;

/// Test builds only: a path whose name contains this makes the core panic inside the hook
/// that handles it, so tests can show that a panic never reaches the application.
pub const TEST_PANIC: &str = "SCR_TEST_PANIC";

/// Panic when `path` asks for it ([`TEST_PANIC`]); compiled out of release builds.
#[inline]
pub fn test_panic(path: &std::ffi::CStr) {
    if cfg!(debug_assertions) && path.to_bytes().windows(TEST_PANIC.len()).any(|w| w == TEST_PANIC.as_bytes()) {
        panic!("test panic ({TEST_PANIC} in the path)");
    }
}

/// What the front end does with the application's call.
#[derive(Debug, PartialEq, Eq)]
pub enum Call {
    /// The real function with the application's arguments.
    Pass,
    /// The real function with this absolute path (and `AT_FDCWD`) instead.
    Path(CString),
    /// Fail with this errno.
    Fail(i32),
}

/// A call performed here: `Ok(value)` (errno as the application had it) or `Err(errno)`.
pub type Done = Result<i32, i32>;

/// The outcome of deciding an open.
#[derive(Debug)]
pub struct Opening {
    /// What the front end does with the open.
    pub call: Call,
    /// The pending file a successful open writes (0: none); report the descriptor with
    /// [`super::calls::opened`].
    pub track: u32,
    /// The pending file was added for this open (an open that fails abandons it).
    pub created: bool,
}

/// An open that passes unchanged.
pub(super) const PASS: Opening = Opening { call: Call::Pass, track: 0, created: false };

/// The real call on path `p` instead ([`Call::Pass`] if `p` holds a NUL byte).
pub(super) fn c_path(p: &Path) -> Call {
    match CString::new(p.as_os_str().as_bytes()) {
        Ok(c) => Call::Path(c),
        Err(_) => Call::Pass,
    }
}

/// The errno of an I/O error (`EIO` when it has none).
pub(super) fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Run the application's call as it is and report it.
pub(super) fn real_done(real: &mut dyn FnMut() -> i32) -> Done {
    let r = real();
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(r)
    }
}

/// What the prefix holds at a path (`lstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDisk {
    Missing,
    File,
    Dir,
    /// A symbolic link, a device, or an error other than `ENOENT`: the kernel decides.
    Other,
}

/// What is at `p` (`lstat`).
pub(super) fn on_disk(p: &Path) -> OnDisk {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => OnDisk::File,
        Ok(m) if m.is_dir() => OnDisk::Dir,
        Ok(_) => OnDisk::Other,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk::Missing,
        Err(_) => OnDisk::Other,
    }
}

/// Whether the application may open the existing file `p` with `flags`' access mode.
pub(super) fn may_open(p: &Path, flags: i32) -> Result<(), i32> {
    let acc = flags & libc::O_ACCMODE;
    std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .open(p)
        .map(drop)
        .map_err(|e| errno_of(&e))
}

/// Copy pending bytes to the application's path (after `MPI_Finalize`, a file cannot join a
/// dataset any more); `last`: drop the pending copy.
pub(super) fn materialize(cache: &Path, dest: &Path, last: bool) {
    if let Some(parent) = dest.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::copy(cache, dest) {
        Ok(_) => {
            if last {
                let _ = std::fs::remove_file(cache);
            }
        }
        Err(err) => scr_error!(
            "transparent mode: cannot copy {} to {}: {err}; the bytes stay in {}",
            cache.display(),
            dest.display(),
            cache.display()
        ),
    }
}

/// Open `path` for appending (created, with its directory, when missing): the journals of a
/// rank's pending area ([`super::writes`], the staging journal of [`super::shared`]).
pub(super) fn open_journal(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new().append(true).create(true).open(path)
}
