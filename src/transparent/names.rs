//! Renames, links and removals the front end forwards: they may change the cache and the
//! prefix both, so each is performed here (the front end passes the application's call as
//! `real`, made when the prefix must see it) and its result returned ([`Done`]). Removals and
//! renames of a cached dataset's files take effect in the table at once and reach the
//! dataset at the next sync point; a child process of a rank reports them to it
//! ([`super::view`]).

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use super::plain::{errno_of, materialize, on_disk, real_done, Done, OnDisk};
use super::rules::{self, Link, Rename};
use super::session::Session;
use super::state::{refresh_committed, routing, table_now};
use super::table::{Change, Held, Seen, Table};
use crate::reentry::Inside;
use crate::scr_error;

/// A rename (`flags`: those of `renameat2`). `real` performs the application's call.
pub fn rename(od: i32, old: &CStr, nd: i32, new: &CStr, flags: u32, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing().filter(|_| flags & libc::RENAME_EXCHANGE == 0) else { return real_done(real) };
    let noreplace = flags & libc::RENAME_NOREPLACE != 0;
    let (from, to) = (s.resolve_file(od, old), s.resolve_file(nd, new));
    if from.is_none() && to.is_none() {
        return real_done(real);
    }
    let _inside = Inside::enter();
    let t = table_now();
    // a rename onto another rank's file replaces it: its rank drops it at the next sync point
    let over_peer = to
        .as_deref()
        .filter(|p| !s.child && t.held(p).is_none() && matches!(t.seen(p), Some(Seen::Peer(_))))
        .map(Path::to_path_buf);
    let r = rename_in(s, t, (od, old), (nd, new), noreplace, from, to, real);
    if let (Ok(_), Some(to)) = (r, over_peer) {
        let mut t = table_now();
        t.taken_from_peer(&to);
        if let Some(Held::Pending(id, _)) = t.held(&to) {
            if let Some(p) = t.get_mut(id) {
                p.takes_over = true;
            }
        }
    }
    r
}

/// [`rename`] once its paths are resolved, with the table.
#[allow(clippy::too_many_arguments)]
fn rename_in(
    s: &Session,
    mut t: MutexGuard<'static, Table>,
    (od, old): (i32, &CStr),
    (nd, new): (i32, &CStr),
    noreplace: bool,
    from: Option<PathBuf>,
    to: Option<PathBuf>,
    real: &mut dyn FnMut() -> i32,
) -> Done {
    let to_routed = to.as_deref().is_some_and(|p| s.routed(p));
    let dest = match &to {
        Some(rel) => Some(s.prefix.join(rel)),
        None => s.absolute(nd, new),
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
            let to = to.filter(|_| rule == Rename::InCache);
            rename_file(s, &mut t, &from, &from_abs, to.as_deref(), &dest)
        }
        Rename::Dir => rename_dir(s, &mut t, &from.unwrap_or_default(), to.as_deref(), &dest, real),
        Rename::Adopt => {
            let src = from_abs.or_else(|| s.absolute(od, old));
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

/// A held file renamed: within the cache when `to` (routed) is given, else out of it to
/// `dest`; a flushed copy of the source in the prefix (`from_abs`) goes, as the name does.
fn rename_file(s: &Session, t: &mut Table, from: &Path, from_abs: &Path, to: Option<&Path>, dest: &Path) -> Done {
    let r = match to {
        Some(to) => into_cache(s, t, from, to),
        None => out_of_cache(t, from, dest),
    };
    if s.child && r.is_ok() {
        super::view::removed_file(s, from);
    }
    // a copy of the source in the prefix (flushed) is not the application's any more
    if r.is_ok() {
        let _ = std::fs::remove_file(from_abs);
    }
    r
}

/// A directory holding cached files renamed: the kernel renames what the prefix holds (`real`),
/// the cached files follow, within the prefix (`to`) or out of it to `dest`.
fn rename_dir(
    s: &Session,
    t: &mut Table,
    from: &Path,
    to: Option<&Path>,
    dest: &Path,
    real: &mut dyn FnMut() -> i32,
) -> Done {
    crate::runtime::before_rename_dir(from);
    let r = real();
    let e = std::io::Error::last_os_error();
    // a directory that exists only in cache (its files are SCR's) is renamed there
    if r != 0 && (e.kind() != std::io::ErrorKind::NotFound || !t.any_below(from)) {
        return Err(errno_of(&e));
    }
    match to {
        Some(to) => {
            move_pending(s, t, from, to);
            super::shells::renamed(from, to);
            if let Err(e) = crate::runtime::rename_dir(from, to, true) {
                scr_error!("transparent mode: recording the rename of {}: {e}", from.display());
            }
            refresh_committed(t);
            t.record(Change::RenamedDir { from: from.to_path_buf(), to: to.to_path_buf() });
        }
        None => {
            // out of the prefix: the files go with the directory, and leave SCR
            let files: Vec<(PathBuf, PathBuf)> =
                t.visible_below(from).map(|(r, c)| (r.to_path_buf(), c.to_path_buf())).collect();
            for (rel, cache) in files {
                let rest = rel.strip_prefix(from).unwrap_or(&rel);
                materialize(&cache, &dest.join(rest), false);
                if let (Some(bytes), _) = t.remove(&rel) {
                    let _ = std::fs::remove_file(bytes);
                }
            }
        }
    }
    Ok(0)
}

/// A held file renamed to a routed (or held) path: renamed in cache.
fn into_cache(s: &Session, t: &mut Table, from: &Path, to: &Path) -> Done {
    let cache = s.make_pending(to).map_err(|e| errno_of(&e))?;
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
            let shares = link_or_copy(&src, &cache)?;
            t.add(to, cache, shares);
            t.remove(from);
        }
        None => return Err(libc::ENOENT),
    }
    Ok(0)
}

/// Give `cache` the bytes of `src`: a hard link, or a copy where linking fails. Whether it
/// linked.
fn link_or_copy(src: &Path, cache: &Path) -> Result<bool, i32> {
    match std::fs::hard_link(src, cache) {
        Ok(()) => Ok(true),
        Err(_) => std::fs::copy(src, cache).map(|_| false).map_err(|e| errno_of(&e)),
    }
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
    let tmp = crate::paths::temp_name(dest, &format!(".scr-{}", std::process::id()));
    let copy = || -> std::io::Result<()> {
        let mut from = std::fs::File::open(src)?;
        let mode = from.metadata().map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))?;
        let mut to = crate::paths::create_temp(&tmp, mode & 0o7777)?;
        std::io::copy(&mut from, &mut to)?;
        std::fs::rename(&tmp, dest)
    };
    copy().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        errno_of(&e)
    })
}

/// A plain file renamed to a routed path: it becomes the pending file there.
fn adopt(s: &Session, t: &mut Table, src: &Path, to: &Path) -> Done {
    let cache = s.make_pending(to).map_err(|e| errno_of(&e))?;
    crate::paths::move_file(src, &cache).map_err(|e| errno_of(&e))?;
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
        let Ok(new_cache) = s.make_pending(&new_rel) else { continue };
        if std::fs::rename(&cache, &new_cache).is_ok() {
            t.rename(id, &new_rel, new_cache);
        }
    }
}

/// `unlink`/`remove`/`unlinkat` of a file. `real` performs the application's call.
pub fn unlink(dirfd: i32, path: &CStr, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing() else { return real_done(real) };
    let Some(rel) = s.resolve_file(dirfd, path) else { return real_done(real) };
    let _inside = Inside::enter();
    let mut t = table_now();
    let (bytes, mut held) = t.remove(&rel);
    if !held && !s.child {
        // another rank's file: it goes at the next sync point (and from the prefix now)
        held = t.remove_peer(&rel);
    }
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
    let Some(rel) = s.resolve_file(libc::AT_FDCWD, path) else { return real_done(real) };
    let dir = {
        let _inside = Inside::enter();
        table_now().held(&rel).is_none() && on_disk(&s.prefix.join(&rel)) == OnDisk::Dir
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
    let Some(rel) = s.resolve_file(dirfd, path) else { return real_done(real) };
    let _inside = Inside::enter();
    let mut t = table_now();
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

/// `mkdir`/`mkdirat`: made in the prefix; a directory this process made there is
/// remembered, so that one made for checkpoint files leaves with them ([`super::shells`]).
pub fn mkdir(dirfd: i32, path: &CStr, real: &mut dyn FnMut() -> i32) -> Done {
    let Some(s) = routing() else { return real_done(real) };
    let rel = s.resolve_file(dirfd, path);
    let r = real_done(real)?;
    if let (false, Some(rel)) = (s.child, rel) {
        let _inside = Inside::enter();
        let epoch = table_now().epoch;
        super::shells::made(rel, epoch);
    }
    Ok(r)
}

/// `link`/`linkat` (`flags`: those of `linkat`; `real` performs the application's call).
pub fn link(od: i32, old: &CStr, nd: i32, new: &CStr, flags: i32, real: &mut dyn FnMut() -> i32) -> Done {
    // AT_EMPTY_PATH links a descriptor, not a path
    let Some(s) = routing().filter(|_| flags & libc::AT_EMPTY_PATH == 0) else { return real_done(real) };
    let (from, to) = (s.resolve_file(od, old), s.resolve_file(nd, new));
    if from.is_none() {
        return real_done(real);
    }
    let _inside = Inside::enter();
    let mut t = table_now();
    let dest = match &to {
        Some(rel) => Some(s.prefix.join(rel)),
        None => s.absolute(nd, new),
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
            let cache = s.make_pending(&to).map_err(|e| errno_of(&e))?;
            let committed = matches!(from.as_deref().and_then(|f| t.held(f)), Some(Held::Committed(_)));
            let linked = link_or_copy(&src, &cache)?;
            t.add(&to, cache, committed && linked);
            Ok(0)
        }
        // a link out of SCR's files would let the application change a dataset's bytes: copy
        Link::Out(src) => std::fs::copy(src, &dest).map(|_| 0).map_err(|e| errno_of(&e)),
    }
}
