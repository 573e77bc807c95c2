//! The calls a front end forwards: each takes the application's arguments (a path as a C
//! string, a directory descriptor, flags), applies [`super::rules`] with the facts it
//! gathers, updates the table and the cache, and returns what the front end does with the
//! application's call ([`Call`]) or the call's result ([`Done`]) when it had to perform it
//! itself (renames and removals that touch both the cache and the prefix). Every function
//! returns [`Call::Pass`] at once, without allocating or locking, unless routing is on and the
//! path may be under the prefix. The library's own I/O here passes the hooks (the re-entry
//! guard is set first).

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::prefix::{reserved, PATH_MAX};
use super::rules::{self, Disk, Link, OnDisk, Open, Rename};
pub use super::session::concerns;
use super::session::{self, owner, routing, table, Session};
use super::table::{Change, Held, Table};
use super::{fds, sync};
use crate::reentry::Inside;
use crate::scr_error;

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

fn c_path(p: &Path) -> Call {
    match CString::new(p.as_os_str().as_bytes()) {
        Ok(c) => Call::Path(c),
        Err(_) => Call::Pass,
    }
}

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Run the application's call as it is and report it.
fn real_done(real: &mut dyn FnMut() -> i32) -> Done {
    let r = real();
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(r)
    }
}

/// The path argument relative to the prefix (`""` for the prefix itself), if it is below it
/// and this is the process that routes.
fn resolve(s: &Session, dirfd: i32, path: &CStr) -> Option<PathBuf> {
    let bytes = path.to_bytes();
    let mut buf = [0u8; PATH_MAX];
    let base = match bytes.first() {
        None => return None,
        Some(b'/') => None,
        Some(_) => (s.base)(dirfd, &mut buf).map(|n| &buf[..n]),
    };
    if !s.prefix.may_contain(bytes, base) || !s.is_owner() {
        return None;
    }
    s.prefix.relative(bytes, base).filter(|rel| !reserved(rel))
}

/// As [`resolve`], for a file below the prefix (not the prefix itself).
fn resolve_file(s: &Session, dirfd: i32, path: &CStr) -> Option<PathBuf> {
    resolve(s, dirfd, path).filter(|rel| !rel.as_os_str().is_empty())
}

/// The absolute, normalised form of any path argument.
fn absolute(s: &Session, dirfd: i32, path: &CStr) -> Option<PathBuf> {
    let p = Path::new(OsStr::from_bytes(path.to_bytes()));
    if p.is_absolute() {
        return Some(crate::paths::normalize(p, Path::new("/")));
    }
    let mut buf = [0u8; PATH_MAX];
    let n = (s.base)(dirfd, &mut buf)?;
    Some(crate::paths::normalize(p, Path::new(OsStr::from_bytes(&buf[..n]))))
}

fn on_disk(p: &Path) -> OnDisk {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => OnDisk::File,
        Ok(m) if m.is_dir() => OnDisk::Dir,
        Ok(_) => OnDisk::Other,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk::Missing,
        Err(_) => OnDisk::Other,
    }
}

/// The outcome of deciding an open.
#[derive(Debug)]
pub struct Opening {
    pub call: Call,
    /// The pending file a successful open writes (0: none); report the descriptor with
    /// [`opened`].
    pub track: u32,
    /// The pending file was added for this open (an open that fails abandons it).
    pub created: bool,
}

const PASS: Opening = Opening { call: Call::Pass, track: 0, created: false };

/// An open of `path` (relative to `dirfd`) with `flags`.
pub fn open(dirfd: i32, path: &CStr, flags: i32) -> Opening {
    let Some(s) = routing() else { return PASS };
    let Some(rel) = resolve_file(s, dirfd, path) else { return PASS };
    if s.child && rules::writing(flags) {
        // a child changes no cached file: its writes reach the prefix
        return PASS;
    }
    super::test_panic(path);
    let _inside = Inside::enter();
    let mut t = table();
    let abs = s.prefix.join(&rel);
    let disk = || Disk { at: on_disk(&abs), parent: abs.parent().map_or(OnDisk::Dir, on_disk) };
    match rules::open(&t, &rel, flags, || s.routed(&rel), &abs, disk) {
        Open::Pass => PASS,
        Open::Fail(e) => Opening { call: Call::Fail(e), ..PASS },
        Open::Read(p) => Opening { call: c_path(&p), ..PASS },
        Open::Write { id, copy_first } => {
            if copy_first {
                if let Err(e) = unshare(&mut t, id) {
                    return Opening { call: Call::Fail(e), ..PASS };
                }
            }
            let cache = t.get(id).map(|p| p.cache.clone()).unwrap_or_default();
            Opening { call: c_path(&cache), track: id, created: false }
        }
        Open::Create { from, check_prefix } => {
            if check_prefix {
                if let Err(e) = may_open(&abs, flags) {
                    return Opening { call: Call::Fail(e), ..PASS };
                }
            }
            match create_pending(s, &mut t, &rel, from.as_deref(), flags) {
                Ok((id, cache)) => Opening { call: c_path(&cache), track: id, created: true },
                Err(e) => Opening { call: Call::Fail(e), ..PASS },
            }
        }
    }
}

/// Whether the application may open the existing file `p` with `flags`' access mode.
fn may_open(p: &Path, flags: i32) -> Result<(), i32> {
    let acc = flags & libc::O_ACCMODE;
    std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .open(p)
        .map(drop)
        .map_err(|e| errno_of(&e))
}

/// A new pending file for `rel`, its bytes copied from `from` first (an update in place).
fn create_pending(
    s: &Session,
    t: &mut Table,
    rel: &Path,
    from: Option<&Path>,
    flags: i32,
) -> Result<(u32, PathBuf), i32> {
    if let Some(src) = from {
        // the file's own permissions decide, as they would in the prefix
        may_open(src, flags)?;
    }
    let cache = s.pending_path(rel);
    if let Some(parent) = cache.parent() {
        std::fs::create_dir_all(parent).map_err(|e| errno_of(&e))?;
    }
    let _ = std::fs::remove_file(&cache);
    if let Some(src) = from {
        std::fs::copy(src, &cache).map_err(|e| errno_of(&e))?;
    }
    let id = t.add(rel, cache.clone(), false);
    Ok((id, cache))
}

/// Give pending file `id` bytes of its own (it shared a cached dataset's file).
fn unshare(t: &mut Table, id: u32) -> Result<(), i32> {
    let Some(p) = t.get_mut(id) else { return Ok(()) };
    let tmp = p.cache.with_extension("scr-copy");
    std::fs::copy(&p.cache, &tmp).and_then(|_| std::fs::rename(&tmp, &p.cache)).map_err(|e| errno_of(&e))?;
    p.shares_committed = false;
    Ok(())
}

/// After the real open of an [`Opening`] that tracks a pending file.
pub fn opened(fd: i32, track: u32, created: bool) {
    if track == 0 {
        return;
    }
    let _inside = Inside::enter();
    let mut t = table();
    if fd < 0 {
        if created {
            if let Some(bytes) = t.get(track).map(|p| p.cache.clone()) {
                t.abandon(track);
                let _ = std::fs::remove_file(bytes);
            }
        }
        return;
    }
    let epoch = t.epoch;
    if let Some(p) = t.get_mut(track) {
        p.writers += 1;
        p.epoch = epoch;
        fds::set(fd, track);
    }
}

/// Before `fd` closes: the pending file it writes, taken out of the descriptor table (0:
/// none). Report the close with [`closed`].
pub fn closing(fd: i32) -> u32 {
    let id = fds::get(fd);
    if id == 0 || owner().is_none() {
        return 0;
    }
    fds::set(fd, 0);
    id
}

/// After a descriptor of pending file `id` closed (`ok`: the close succeeded). After
/// `MPI_Finalize` no dataset can form: the file goes where the application put it.
pub fn closed(id: u32, ok: bool) {
    let Some(s) = (id != 0).then(owner).flatten() else { return };
    let _inside = Inside::enter();
    let mut t = table();
    if t.closed(id, ok) && session::finished() {
        if let Some(p) = t.get(id).cloned() {
            t.forget(id);
            drop(t);
            materialize(&p.cache, &s.prefix.join(&p.rel), true);
        }
    }
}

/// `new` now refers to what `old` refers to (the `dup` family, `F_DUPFD`).
pub fn duplicated(old: i32, new: i32) {
    let id = fds::get(old);
    if id == 0 || new < 0 || old == new || owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    if let Some(p) = table().get_mut(id) {
        p.writers += 1;
        fds::set(new, id);
    }
}

/// A write on `fd` failed: the dataset of its pending file is invalid.
pub fn write_failed(fd: i32) {
    let id = fds::get(fd);
    if id == 0 || owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    if let Some(p) = table().get_mut(id) {
        p.failed = true;
    }
}

/// A call that reads or sets metadata of a path (the stat family, `access`, `chmod`,
/// `utimensat`, `readlink`, ...): on the cached bytes when SCR holds the path.
pub fn held(dirfd: i32, path: &CStr) -> Call {
    let Some(s) = routing() else { return Call::Pass };
    let Some(rel) = resolve_file(s, dirfd, path) else { return Call::Pass };
    let _inside = Inside::enter();
    match table().held(&rel) {
        Some(h) => c_path(h.cache()),
        None => Call::Pass,
    }
}

/// `fopen` mode string to `open` flags (as glibc's `_IO_file_fopen` reads it).
pub fn fopen_flags(mode: &CStr) -> i32 {
    let m = mode.to_bytes();
    let mut flags = match m.first() {
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        Some(b'a') => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return 0,
    };
    for &c in &m[1..] {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    flags
}

/// A call that changes a file's bytes through its path (`truncate`): on a pending file
/// (made from the cached or prefix bytes first, as an open for writing would).
pub fn update(path: &CStr) -> Call {
    open(libc::AT_FDCWD, path, libc::O_WRONLY).call
}

/// `statfs`/`statvfs` of a held file: the file system of the directory holding it in the
/// prefix.
pub fn statfs(path: &CStr) -> Call {
    let Some(s) = routing() else { return Call::Pass };
    let Some(rel) = resolve_file(s, libc::AT_FDCWD, path) else { return Call::Pass };
    let _inside = Inside::enter();
    if table().held(&rel).is_none() {
        return Call::Pass;
    }
    match s.prefix.join(&rel).parent() {
        Some(dir) => c_path(dir),
        None => Call::Pass,
    }
}

/// `realpath` of a held file: the canonical form of its directory in the prefix, and its
/// name. `None`: the real `realpath` answers.
pub fn realpath(path: &CStr) -> Option<Result<PathBuf, i32>> {
    let s = routing()?;
    let rel = resolve_file(s, libc::AT_FDCWD, path)?;
    let _inside = Inside::enter();
    table().held(&rel)?;
    let abs = s.prefix.join(&rel);
    let (dir, name) = (abs.parent()?, abs.file_name()?);
    Some(std::fs::canonicalize(dir).map(|d| d.join(name)).map_err(|e| errno_of(&e)))
}

/// A rename (`flags`: those of `renameat2`). `real` performs the application's call.
pub fn rename(od: i32, old: &CStr, nd: i32, new: &CStr, flags: u32, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing().filter(|_| flags & libc::RENAME_EXCHANGE == 0) else { return real_done(real) };
    let noreplace = flags & libc::RENAME_NOREPLACE != 0;
    let (from, to) = (resolve_file(s, od, old), resolve_file(s, nd, new));
    if from.is_none() && to.is_none() {
        return real_done(real);
    }
    let _inside = Inside::enter();
    let mut t = table();
    let to_routed = to.as_deref().is_some_and(|p| s.routed(p));
    let dest = match &to {
        Some(rel) => Some(s.prefix.join(rel)),
        None => absolute(s, nd, new),
    };
    let exists = || dest.as_deref().is_some_and(|d| on_disk(d) != OnDisk::Missing);
    let from_dir = || from.as_deref().is_some_and(|f| on_disk(&s.prefix.join(f)) == OnDisk::Dir);
    let rule = match rules::rename(&t, from.as_deref(), to.as_deref(), to_routed, noreplace, from_dir, exists) {
        // a child moves a cached file's bytes out and tells its rank; the rest is the kernel's
        Rename::InCache | Rename::Out if s.child => Rename::Out,
        Rename::Dir | Rename::Adopt if s.child => Rename::Pass,
        r => r,
    };
    let Some(dest) = dest.filter(|_| rule != Rename::Pass) else {
        drop(t);
        return real_done(real);
    };
    let from_abs = from.as_deref().map(|f| s.prefix.join(f));
    match rule {
        Rename::Pass => {
            drop(t);
            real_done(real)
        }
        Rename::Fail(e) => Err(e),
        Rename::Same => Ok(0),
        Rename::InCache | Rename::Out => {
            let (Some(from), Some(from_abs)) = (from, from_abs) else { return Err(libc::ENOENT) };
            let r = match to.filter(|_| rule == Rename::InCache) {
                Some(to) => into_cache(s, &mut t, &from, &to),
                None => out_of_cache(&mut t, &from, &dest),
            };
            if s.child && r.is_ok() {
                super::view::removed_file(s, &from);
            }
            // a copy of the source in the prefix (flushed) is not the application's any more
            if r.is_ok() {
                let _ = std::fs::remove_file(from_abs);
            }
            r
        }
        Rename::Dir => {
            let from = from.unwrap_or_default();
            crate::runtime::before_rename_dir(&from);
            let r = real();
            let e = std::io::Error::last_os_error();
            // a directory that exists only in cache (its files are SCR's) is renamed there
            if r != 0 && (e.kind() != std::io::ErrorKind::NotFound || !t.any_below(&from)) {
                return Err(errno_of(&e));
            }
            match &to {
                Some(to) => {
                    move_pending(s, &mut t, &from, to);
                    if let Err(e) = crate::runtime::rename_dir(&from, to, true) {
                        scr_error!("transparent mode: recording the rename of {}: {e}", from.display());
                    }
                    sync::refresh_committed(&mut t);
                    t.record(Change::RenamedDir { from, to: to.clone() });
                }
                None => {
                    // out of the prefix: the files go with the directory, and leave SCR
                    let files: Vec<(PathBuf, PathBuf)> =
                        t.visible_below(&from).map(|(r, c)| (r.to_path_buf(), c.to_path_buf())).collect();
                    for (rel, cache) in files {
                        let rest = rel.strip_prefix(&from).unwrap_or(&rel);
                        materialize(&cache, &dest.join(rest), false);
                        if let (Some(bytes), _) = t.remove(&rel) {
                            let _ = std::fs::remove_file(bytes);
                        }
                    }
                }
            }
            Ok(0)
        }
        Rename::Adopt => {
            let src = from_abs.or_else(|| absolute(s, od, old));
            match src.filter(|p| on_disk(p) == OnDisk::File) {
                Some(src) => adopt(s, &mut t, &src, to.as_deref().unwrap_or(Path::new(""))),
                None => {
                    drop(t);
                    real_done(real)
                }
            }
        }
    }
}

/// A held file renamed to a routed (or held) path: renamed in cache.
fn into_cache(s: &Session, t: &mut Table, from: &Path, to: &Path) -> Done {
    let cache = s.pending_path(to);
    if let Some(parent) = cache.parent() {
        std::fs::create_dir_all(parent).map_err(|e| errno_of(&e))?;
    }
    match t.held(from) {
        Some(Held::Pending(id, p)) => {
            let shares = p.shares_committed;
            std::fs::rename(&p.cache, &cache).map_err(|e| errno_of(&e))?;
            t.rename(id, to, cache);
            if let Some(p) = t.get_mut(id) {
                p.shares_committed = shares;
            }
        }
        Some(Held::Committed(c)) => {
            let src = c.cache.clone();
            let _ = std::fs::remove_file(&cache);
            let shares = match std::fs::hard_link(&src, &cache) {
                Ok(()) => true,
                Err(_) => std::fs::copy(&src, &cache).map(|_| false).map_err(|e| errno_of(&e))?,
            };
            t.add(to, cache, shares);
            t.remove(from);
        }
        None => return Err(libc::ENOENT),
    }
    Ok(0)
}

/// A held file renamed out of the patterns or the prefix: its bytes go to `dest`. A pending
/// file is moved; a cached dataset's file is copied (the dataset keeps it until its next
/// version) and published atomically.
fn out_of_cache(t: &mut Table, from: &Path, dest: &Path) -> Done {
    let Some(h) = t.held(from) else { return Err(libc::ENOENT) };
    let pending = matches!(h, Held::Pending(..));
    let cache = h.cache().to_path_buf();
    let moved = match pending.then(|| std::fs::rename(&cache, dest)) {
        Some(Ok(())) => true,
        Some(Err(e)) if e.raw_os_error() != Some(libc::EXDEV) => return Err(errno_of(&e)),
        _ => false,
    };
    if !moved {
        publish_copy(&cache, dest)?;
    }
    if let (Some(bytes), _) = t.remove(from) {
        let _ = std::fs::remove_file(bytes);
    }
    Ok(0)
}

/// Copy `src` to `dest` under a temporary name, then rename it into place.
fn publish_copy(src: &Path, dest: &Path) -> Result<(), i32> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dest.with_file_name(format!(".{name}.scr-{}", std::process::id()));
    std::fs::copy(src, &tmp).and_then(|_| std::fs::rename(&tmp, dest)).map(drop).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        errno_of(&e)
    })
}

/// A plain file renamed to a routed path: it becomes the pending file there.
fn adopt(s: &Session, t: &mut Table, src: &Path, to: &Path) -> Done {
    let cache = s.pending_path(to);
    if let Some(parent) = cache.parent() {
        std::fs::create_dir_all(parent).map_err(|e| errno_of(&e))?;
    }
    if let Err(e) = std::fs::rename(src, &cache) {
        if e.raw_os_error() != Some(libc::EXDEV) {
            return Err(errno_of(&e));
        }
        std::fs::copy(src, &cache).map_err(|e| errno_of(&e))?;
        std::fs::remove_file(src).map_err(|e| errno_of(&e))?;
    }
    t.add(to, cache, false);
    // a stale copy at the target in the prefix is replaced
    let _ = std::fs::remove_file(s.prefix.join(to));
    Ok(0)
}

/// Move this rank's pending files below directory `from` to below `to` (a directory rename).
pub(super) fn move_pending(s: &Session, t: &mut Table, from: &Path, to: &Path) {
    for (id, rel, cache, _) in t.pending_below(from) {
        let Ok(rest) = rel.strip_prefix(from) else { continue };
        let new_rel = to.join(rest);
        let new_cache = s.pending_path(&new_rel);
        if let Some(parent) = new_cache.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if std::fs::rename(&cache, &new_cache).is_ok() {
            t.rename(id, &new_rel, new_cache);
        }
    }
}

/// `unlink`/`remove`/`unlinkat` of a file. `real` performs the application's call.
pub fn unlink(dirfd: i32, path: &CStr, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing() else { return real_done(real) };
    let Some(rel) = resolve_file(s, dirfd, path) else { return real_done(real) };
    let _inside = Inside::enter();
    let mut t = table();
    let (bytes, held) = t.remove(&rel);
    drop(t);
    if s.child && held {
        super::view::removed_file(s, &rel);
    }
    if let Some(b) = bytes {
        let _ = std::fs::remove_file(b);
    }
    match real_done(real) {
        Err(libc::ENOENT) if held => Ok(0),
        r => r,
    }
}

/// `unlinkat`: [`rmdir`] with `AT_REMOVEDIR`, else [`unlink`].
pub fn unlinkat(dirfd: i32, path: &CStr, flags: i32, real: &mut dyn FnMut() -> i32) -> Done {
    if flags & libc::AT_REMOVEDIR != 0 {
        rmdir(dirfd, path, real)
    } else {
        unlink(dirfd, path, real)
    }
}

/// `remove`: [`unlink`] for a file, [`rmdir`] for a directory.
pub fn remove(path: &CStr, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing() else { return real_done(real) };
    let Some(rel) = resolve_file(s, libc::AT_FDCWD, path) else { return real_done(real) };
    let dir = {
        let _inside = Inside::enter();
        table().held(&rel).is_none() && on_disk(&s.prefix.join(&rel)) == OnDisk::Dir
    };
    if dir {
        rmdir(libc::AT_FDCWD, path, real)
    } else {
        unlink(libc::AT_FDCWD, path, real)
    }
}

/// `rmdir`/`unlinkat(AT_REMOVEDIR)`: refused while SCR holds files below the directory (as
/// the prefix would); a removal is shared with every rank at the next sync point.
pub fn rmdir(dirfd: i32, path: &CStr, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing() else { return real_done(real) };
    let Some(rel) = resolve_file(s, dirfd, path) else { return real_done(real) };
    let _inside = Inside::enter();
    let mut t = table();
    if let Some(e) = rules::rmdir(&t, &rel) {
        return Err(e);
    }
    let r = real_done(real)?;
    if s.child {
        super::view::removed_dir(s, &rel);
    } else {
        let epoch = t.epoch;
        t.record(Change::RemovedDir { dir: rel, epoch });
    }
    Ok(r)
}

/// `link`/`linkat` (`flags`: those of `linkat`; `real` performs the application's call).
pub fn link(od: i32, old: &CStr, nd: i32, new: &CStr, flags: i32, real: &mut dyn FnMut() -> i32) -> Done {
    // AT_EMPTY_PATH links a descriptor, not a path
    let Some(s) = routing().filter(|_| flags & libc::AT_EMPTY_PATH == 0) else { return real_done(real) };
    let (from, to) = (resolve_file(s, od, old), resolve_file(s, nd, new));
    if from.is_none() {
        return real_done(real);
    }
    let _inside = Inside::enter();
    let mut t = table();
    let dest = match &to {
        Some(rel) => Some(s.prefix.join(rel)),
        None => absolute(s, nd, new),
    };
    let Some(dest) = dest else { return Err(libc::ENOENT) };
    let to_routed = to.as_deref().is_some_and(|p| s.routed(p));
    let rule = match rules::link(&t, from.as_deref(), to.as_deref(), to_routed, || on_disk(&dest) != OnDisk::Missing) {
        Link::InCache(src) if s.child => Link::Out(src),
        r => r,
    };
    match rule {
        Link::Pass => {
            drop(t);
            real_done(real)
        }
        Link::Fail(e) => Err(e),
        Link::InCache(src) => {
            let to = to.unwrap_or_default();
            let cache = s.pending_path(&to);
            if let Some(parent) = cache.parent() {
                std::fs::create_dir_all(parent).map_err(|e| errno_of(&e))?;
            }
            let shares = matches!(from.as_deref().and_then(|f| t.held(f)), Some(Held::Committed(_)));
            match std::fs::hard_link(&src, &cache) {
                Ok(()) => t.add(&to, cache, shares),
                Err(_) => {
                    std::fs::copy(&src, &cache).map_err(|e| errno_of(&e))?;
                    t.add(&to, cache, false)
                }
            };
            Ok(0)
        }
        // a link out of SCR's files would let the application change a dataset's bytes: copy
        Link::Out(src) => std::fs::copy(src, &dest).map(|_| 0).map_err(|e| errno_of(&e)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fopen_modes_map_to_open_flags() {
        let f = |m: &CStr| fopen_flags(m);
        assert_eq!(f(c"r"), libc::O_RDONLY);
        assert_eq!(f(c"rb+"), libc::O_RDWR);
        assert_eq!(f(c"w"), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
        assert_eq!(f(c"wxe"), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL | libc::O_CLOEXEC);
        assert_eq!(f(c"a+"), libc::O_RDWR | libc::O_CREAT | libc::O_APPEND);
        assert_eq!(f(c"r,ccs=UTF-8x"), libc::O_RDONLY);
        assert_eq!(f(c"q"), 0);
    }
}
