//! The file hooks' decisions, independent of which C symbol was called: where an open goes,
//! the bookkeeping of descriptors that write pending files (close, dup, failed writes),
//! renames and deletes of files SCR holds, and the path metadata calls answer from.
//!
//! Rules (documented in `config/README.md`):
//! * Opening a path that matches a pattern for writing creates (or reuses) a pending file
//!   `<pending>/<rank>/<path below the prefix>`; without `O_TRUNC` the current bytes are
//!   copied in first (from cache or the prefix), so updates in place work. `O_EXCL` sees
//!   files in cache and in the prefix. Directories and `O_TMPFILE` are never redirected.
//! * Opening for reading, `stat` and `access` of a path SCR holds (pending, or a file of a
//!   cached dataset) use the cached file; everything else reaches the prefix.
//! * Renaming a held file to a path that matches renames it in cache; renaming it to any
//!   other path moves the bytes there. Renaming a directory renames it in the prefix and
//!   moves the pending files below it; every rank applies the rename to its own files when
//!   the dataset completes, as a shared file system would show it to all.
//! * Deleting a held file deletes the pending copy, or hides a cached dataset's file from
//!   the application (SCR keeps its copy until the dataset leaves cache).
//! * A failed `write`/`close` marks the file failed: its dataset is invalid on every rank.

use std::ffi::{c_char, c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use scr::reentry::Inside;

use crate::path::{resolve, Resolved};
use crate::state::{self, files, Active, Entry, Errno, WRITER};

pub enum Plan {
    /// Call the real function with the application's arguments.
    Pass,
    /// Call it with this path instead (`Some(id)`: a descriptor writing this pending file).
    To(CString, Option<u32>),
    /// Fail with this errno.
    Fail(c_int),
}

fn cstring(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

fn writing(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
}

/// The pending file of `rel` for this rank.
pub fn pending_path(a: &Active, rel: &str) -> PathBuf {
    a.pending.join(a.rank.to_string()).join(rel)
}

/// Decide an open of `path` (relative to `dirfd`) with `flags`.
pub fn plan_open(dirfd: c_int, path: *const c_char, flags: c_int) -> Plan {
    let Some(a) = state::routing() else { return Plan::Pass };
    if flags & libc::O_DIRECTORY != 0 || flags & libc::O_PATH != 0 {
        return Plan::Pass;
    }
    let Some(r) = resolve(a, dirfd, path) else { return Plan::Pass };
    let _inside = Inside::enter();
    let _errno = Errno::save();
    plan_resolved(a, &r, flags)
}

fn plan_resolved(a: &Active, r: &Resolved, flags: c_int) -> Plan {
    let mut f = files();
    if !writing(flags) {
        return match f.lookup(&r.abs).and_then(|c| cstring(&c)) {
            Some(c) => Plan::To(c, None),
            None => Plan::Pass,
        };
    }
    if a.patterns.route(&r.rel, a.rank).is_none() {
        return Plan::Pass;
    }
    let creat_excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
    if let Some(id) = f.pending(&r.abs) {
        if creat_excl {
            return Plan::Fail(libc::EEXIST);
        }
        return match cstring(&f.entries[&id].cache) {
            Some(c) => Plan::To(c, Some(id)),
            None => Plan::Pass,
        };
    }
    let held = f.lookup(&r.abs);
    let in_prefix = std::fs::symlink_metadata(&r.abs).is_ok();
    if creat_excl && (held.is_some() || in_prefix) {
        return Plan::Fail(libc::EEXIST);
    }
    if flags & libc::O_CREAT == 0 && held.is_none() && !in_prefix {
        return Plan::Fail(libc::ENOENT);
    }
    if held.is_none() && in_prefix {
        // the permissions of the file the application means decide, not the cache copy's
        let Some(c) = cstring(&r.abs) else { return Plan::Pass };
        let mode = if flags & libc::O_ACCMODE == libc::O_RDONLY { libc::R_OK } else { libc::W_OK };
        // SAFETY: valid C string.
        if unsafe { libc::access(c.as_ptr(), mode) } != 0 {
            return Plan::Fail(state::get_errno());
        }
    }
    let cache = pending_path(a, &r.rel);
    if let Some(parent) = cache.parent() {
        if let Err(e) = std::fs::create_dir_all(parent) {
            return Plan::Fail(e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    let _ = std::fs::remove_file(&cache);
    if flags & libc::O_TRUNC == 0 {
        let src = held.clone().or_else(|| in_prefix.then(|| r.abs.clone()));
        if let Some(src) = src {
            if let Err(e) = std::fs::copy(&src, &cache) {
                return Plan::Fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }
    let Some(c) = cstring(&cache) else { return Plan::Pass };
    let epoch = f.epoch;
    let id = f.add(Entry { prefix: r.abs.clone(), cache, writers: 0, epoch, failed: false, deleted: false });
    Plan::To(c, Some(id))
}

/// After the real open: track a descriptor that writes a pending file, or forget an entry
/// whose open failed.
pub fn opened(fd: c_int, id: Option<u32>) {
    let Some(id) = id else { return };
    let _inside = Inside::enter();
    let mut f = files();
    let epoch = f.epoch;
    if fd < 0 {
        if let Some(e) = f.entries.get(&id) {
            if e.writers == 0 && !e.cache.exists() {
                f.unlink(id);
            }
        }
        return;
    }
    if let Some(e) = f.entries.get_mut(&id) {
        e.writers += 1;
        e.epoch = epoch;
        state::fd_set(fd, id | WRITER);
    }
}

/// Before a descriptor closes: its tag, taken out of the table (0 if untracked).
pub fn take_fd(fd: c_int) -> u32 {
    let v = state::fd_get(fd);
    if v == 0 || state::owner().is_none() {
        return 0;
    }
    state::fd_set(fd, 0);
    v
}

/// After a tracked descriptor closed (`ok`: the close succeeded).
pub fn closed(tag: u32, ok: bool) {
    if tag == 0 {
        return;
    }
    let _inside = Inside::enter();
    let _errno = Errno::save();
    let id = tag & !WRITER;
    let mut f = files();
    let Some(e) = f.entries.get_mut(&id) else { return };
    e.writers = e.writers.saturating_sub(1);
    if !ok {
        e.failed = true;
    }
    if e.writers > 0 {
        return;
    }
    if e.deleted {
        f.entries.remove(&id);
    } else if state::finalized() {
        // after MPI_Finalize no dataset can form: the file goes where the application put it
        let e = e.clone();
        f.unlink(id);
        drop(f);
        materialize(&e, true);
    }
}

/// Copy a pending file to its prefix path (and drop the pending copy when `last`).
pub fn materialize(e: &Entry, last: bool) {
    if let Some(parent) = e.prefix.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::copy(&e.cache, &e.prefix) {
        Ok(_) => {
            if last {
                let _ = std::fs::remove_file(&e.cache);
            }
        }
        Err(err) => scr::scr_error!(
            "transparent mode: cannot copy {} to {} after MPI_Finalize: {err}; the bytes stay in {}",
            e.cache.display(),
            e.prefix.display(),
            e.cache.display()
        ),
    }
}

/// `dup` family: `new` now also refers to what `old` refers to.
pub fn duplicated(old: c_int, new: c_int) {
    if new < 0 || old == new {
        return;
    }
    let v = state::fd_get(old);
    if v == 0 || state::owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    let mut f = files();
    if let Some(e) = f.entries.get_mut(&(v & !WRITER)) {
        e.writers += 1;
        state::fd_set(new, v);
    }
}

/// A write on `fd` failed.
pub fn write_failed(fd: c_int) {
    let v = state::fd_get(fd);
    if v == 0 || state::owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    let _errno = Errno::save();
    if let Some(e) = files().entries.get_mut(&(v & !WRITER)) {
        e.failed = true;
    }
}

/// Path of the bytes SCR holds for `path`, for metadata and existence calls.
pub fn held_path(dirfd: c_int, path: *const c_char) -> Option<CString> {
    let a = state::routing()?;
    let r = resolve(a, dirfd, path)?;
    let _inside = Inside::enter();
    let _errno = Errno::save();
    let held = files().lookup(&r.abs)?;
    cstring(&held)
}

fn exists_real(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Rename (`flags`: `renameat2` flags). `real` performs the application's call unchanged.
pub fn rename(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: u32,
    real: impl FnOnce() -> c_int,
) -> c_int {
    let Some(a) = state::routing() else { return real() };
    let src = resolve(a, olddirfd, old);
    let dst = resolve(a, newdirfd, new);
    let Some(s) = src else { return real() };
    let _inside = Inside::enter();
    let mut errno = Errno::save();
    let mut f = files();
    let pend = f.pending(&s.abs);
    let held = match pend {
        Some(id) => Some(f.entries[&id].cache.clone()),
        None => f.lookup(&s.abs),
    };
    let Some(cache_src) = held else {
        let below = |p: &PathBuf| p.starts_with(&s.abs) && p != &s.abs;
        let dir_with_files = f.by_path.keys().any(below) || f.committed.keys().any(below);
        drop(f);
        if !dir_with_files {
            let r = real();
            errno.set(state::get_errno());
            return r;
        }
        // a directory holding files SCR has: rename it in the prefix and move ours along,
        // once no background flush still writes below it
        if let Ok(o) = s.abs.strip_prefix(&a.prefix) {
            scr::runtime::before_rename_dir(o);
        }
        let r = real();
        let e = state::get_errno();
        if r != 0 && e != libc::ENOENT {
            errno.set(e);
            return r;
        }
        if let Some(d) = dst {
            move_dir(a, &s.abs, &d.abs);
            if let (Ok(o), Ok(n)) = (s.abs.strip_prefix(&a.prefix), d.abs.strip_prefix(&a.prefix)) {
                if let Err(e) = scr::runtime::rename_dir(o, n, true) {
                    scr::scr_error!("transparent mode: recording the rename of {}: {e}", s.abs.display());
                }
            }
            crate::sync::refresh_committed();
            files().dir_renames.push((s.abs, d.abs));
        }
        return 0;
    };
    if flags & libc::RENAME_NOREPLACE != 0 {
        let taken = match &dst {
            Some(d) => f.lookup(&d.abs).is_some() || exists_real(&d.abs),
            None => false,
        };
        if taken {
            errno.set(libc::EEXIST);
            return -1;
        }
    }
    let routed = dst.filter(|d| a.patterns.route(&d.rel, a.rank).is_some());
    match routed {
        Some(d) => {
            let cache_dst = pending_path(a, &d.rel);
            if let Some(parent) = cache_dst.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let moved = match pend {
                Some(_) => std::fs::rename(&cache_src, &cache_dst),
                None => std::fs::copy(&cache_src, &cache_dst).map(drop),
            };
            if let Err(e) = moved {
                errno.set(e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
            if let Some(old) = f.pending(&d.abs) {
                if Some(old) != pend {
                    f.unlink(old);
                }
            }
            match pend {
                Some(id) => {
                    f.by_path.remove(&s.abs);
                    if let Some(e) = f.entries.get_mut(&id) {
                        e.prefix = d.abs.clone();
                        e.cache = cache_dst;
                    }
                    f.by_path.insert(d.abs.clone(), id);
                    f.hidden.remove(&d.abs);
                }
                None => {
                    let epoch = f.epoch;
                    f.add(Entry {
                        prefix: d.abs.clone(),
                        cache: cache_dst,
                        writers: 0,
                        epoch,
                        failed: false,
                        deleted: false,
                    });
                    f.hidden.insert(s.abs.clone());
                }
            }
            0
        }
        None => {
            // the file leaves SCR: its bytes go to the destination the application named
            drop(f);
            let Some(c) = cstring(&cache_src) else { return real() };
            let r = match crate::real::renameat() {
                // SAFETY: valid C strings; `new` is the application's argument.
                Some(ren) => unsafe { ren(libc::AT_FDCWD, c.as_ptr(), newdirfd, new) },
                None => -1,
            };
            if r != 0 {
                // another file system: copy (the destination is the application's path)
                let dest = match crate::path::absolute(newdirfd, new) {
                    Some(p) => p,
                    None => {
                        errno.set(libc::EXDEV);
                        return -1;
                    }
                };
                if let Err(e) = std::fs::copy(&cache_src, &dest) {
                    errno.set(e.raw_os_error().unwrap_or(libc::EIO));
                    return -1;
                }
                if pend.is_some() {
                    let _ = std::fs::remove_file(&cache_src);
                }
            }
            let mut f = files();
            match pend {
                Some(id) => f.unlink(id),
                None => {
                    f.hidden.insert(s.abs.clone());
                }
            }
            0
        }
    }
}

/// Move this rank's pending files below directory `old` to below `new`, and re-key cached
/// files there.
pub fn move_dir(a: &Active, old: &Path, new: &Path) {
    let mut f = files();
    let ids: Vec<u32> =
        f.entries.iter().filter(|(_, e)| !e.deleted && e.prefix.starts_with(old)).map(|(id, _)| *id).collect();
    for id in ids {
        let e = f.entries[&id].clone();
        let Ok(rest) = e.prefix.strip_prefix(old) else { continue };
        let to = new.join(rest);
        let Some(rel) = to.strip_prefix(&a.prefix).ok().and_then(|r| r.to_str()).map(str::to_string) else { continue };
        let cache = pending_path(a, &rel);
        if let Some(parent) = cache.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if std::fs::rename(&e.cache, &cache).is_err() {
            continue;
        }
        f.by_path.remove(&e.prefix);
        f.by_path.insert(to.clone(), id);
        if let Some(x) = f.entries.get_mut(&id) {
            x.prefix = to;
            x.cache = cache;
        }
    }
    let keys: Vec<PathBuf> = f.committed.keys().filter(|p| p.starts_with(old)).cloned().collect();
    for k in keys {
        if let (Some(v), Ok(rest)) = (f.committed.remove(&k), k.strip_prefix(old)) {
            f.committed.insert(new.join(rest), v);
        }
    }
}

/// `unlink`/`remove` of `path`; `real` performs the application's call unchanged.
pub fn unlink(dirfd: c_int, path: *const c_char, real: impl FnOnce() -> c_int) -> c_int {
    let Some(a) = state::routing() else { return real() };
    let Some(r) = resolve(a, dirfd, path) else { return real() };
    let _inside = Inside::enter();
    let mut errno = Errno::save();
    let mut f = files();
    let held = if let Some(id) = f.pending(&r.abs) {
        let _ = std::fs::remove_file(&f.entries[&id].cache);
        f.unlink(id);
        true
    } else if f.lookup(&r.abs).is_some() {
        f.hidden.insert(r.abs.clone());
        true
    } else {
        false
    };
    drop(f);
    let rc = real();
    let e = state::get_errno();
    if held && rc != 0 && e == libc::ENOENT {
        return 0;
    }
    if rc != 0 {
        errno.set(e);
    }
    rc
}
