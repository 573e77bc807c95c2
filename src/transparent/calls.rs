//! The calls a front end forwards (opens, descriptors, metadata; renames, links and removals
//! are in [`super::names`]): each takes the application's arguments (a path as a C string, a
//! directory descriptor, flags), applies [`super::rules`] with the facts it gathers, updates
//! the table and the cache, and returns what the front end does with the application's call
//! ([`Call`]) or the call's result ([`Done`]) when it had to perform it itself. Every function
//! returns [`Call::Pass`] at once, without allocating or locking, unless routing is on and the
//! path may be under the prefix. The library's own I/O here passes the hooks (the re-entry
//! guard is set first).

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use super::fds::{self, Tracked};
use super::plain::{c_path, errno_of, materialize, may_open, on_disk, OnDisk, PASS};
pub use super::plain::{Call, Done, Opening};
use super::prefix::reserved;
use super::rules::{self, Disk, Open};
use super::session::Session;
pub use super::state::concerns;
use super::state::{self, owner, routing, table_for_file, table_for_id, table_now};
use super::table::{Held, Seen, Table};
use crate::reentry::Inside;

/// An open of `path` (relative to `dirfd`) with `flags`.
pub fn open(dirfd: i32, path: &CStr, flags: i32) -> Opening {
    let Some(s) = routing() else { return PASS };
    let Some(rel) = s.resolve_any(dirfd, path) else { return PASS };
    if s.child && (rules::writing(flags) || reserved(&rel)) {
        // a child changes no cached file: its writes reach the prefix
        return PASS;
    }
    super::plain::test_panic(path);
    let _inside = Inside::enter();
    // (an open for reading only looks at what SCR holds for `rel`)
    let mut t = if rules::writing(flags) || reserved(&rel) { table_now() } else { table_for_file(s, &rel) };
    let abs = s.prefix.join(&rel);
    let disk = || Disk { at: on_disk(&abs), parent: abs.parent().map_or(OnDisk::Dir, on_disk) };
    match rules::open(&t, &rel, flags, || s.routed(&rel), || s.declared_shared(&rel), &abs, disk) {
        Open::Pass => PASS,
        Open::Staged { track } => Opening { track, ..PASS },
        Open::Shared { id } => super::shared::open_staging(s, &mut t, &rel, Some(id), rules::writing(flags)),
        Open::Declare => super::shared::open_staging(s, &mut t, &rel, None, true),
        Open::Fail(e) => Opening { call: Call::Fail(e), ..PASS },
        Open::Read(p) => Opening { call: c_path(&p), ..PASS },
        Open::Elsewhere(p) => {
            drop(t);
            match super::peers::open_remote(&rel, &abs, &p) {
                Ok(()) => PASS,
                Err(e) => Opening { call: Call::Fail(e), ..PASS },
            }
        }
        Open::Write { id, unshare: copy } => {
            if copy {
                if let Err(e) = unshare(s, &mut t, id, flags & libc::O_TRUNC == 0) {
                    return Opening { call: Call::Fail(e), ..PASS };
                }
            }
            let cache = t.get(id).map(|p| p.cache.clone()).unwrap_or_default();
            Opening { call: c_path(&cache), track: id, created: false }
        }
        Open::TakeOver { peer, keep } => {
            let from = match (keep, &peer.local) {
                (false, _) => None,
                (true, Some(bytes)) => Some(bytes.clone()),
                (true, None) => {
                    // another node's bytes: its prefix copy, as a read would get it
                    drop(t);
                    if let Err(e) = super::peers::open_remote(&rel, &abs, &peer) {
                        return Opening { call: Call::Fail(e), ..PASS };
                    }
                    t = table_now();
                    Some(abs.clone())
                }
            };
            match create_pending(s, &mut t, &rel, from.as_deref(), flags) {
                Ok((id, cache)) => {
                    // (the other rank's file goes once the open succeeded: `opened`)
                    if let Some(p) = t.get_mut(id) {
                        p.takes_over = true;
                    }
                    Opening { call: c_path(&cache), track: id, created: true }
                }
                Err(e) => Opening { call: Call::Fail(e), ..PASS },
            }
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
    let cache = s.make_pending(rel).map_err(|e| errno_of(&e))?;
    let _ = std::fs::remove_file(&cache);
    let mut copied = None;
    match from {
        Some(src) => {
            std::fs::copy(src, &cache).map_err(|e| errno_of(&e))?;
            copied = super::untouched::Copied::now(rel, src, &cache);
        }
        // an existing file truncated (`O_TRUNC` without `O_CREAT`): the open needs a file
        None if flags & libc::O_CREAT == 0 => {
            std::fs::File::create(&cache).map_err(|e| errno_of(&e))?;
        }
        None => {}
    }
    let id = t.add(rel, cache.clone(), false);
    if let Some(p) = t.get_mut(id) {
        p.copied = copied;
    }
    Ok((id, cache))
}

/// Give pending file `id` bytes of its own (a copy of them with `keep`, else empty): they
/// were a cached dataset's file, which must not change. Every other name SCR holds for the
/// same bytes (hard links) moves to the new bytes with it, so the names stay linked, as in
/// the prefix.
fn unshare(s: &Session, t: &mut Table, id: u32, keep: bool) -> Result<(), i32> {
    use std::os::unix::fs::MetadataExt;
    let Some(p) = t.get(id).cloned() else { return Ok(()) };
    let old = std::fs::metadata(&p.cache).map_err(|e| errno_of(&e))?;
    let tmp = p.cache.with_extension("scr-copy");
    let fresh = if keep { std::fs::copy(&p.cache, &tmp).map(drop) } else { std::fs::File::create(&tmp).map(drop) };
    fresh.and_then(|_| std::fs::rename(&tmp, &p.cache)).map_err(|e| errno_of(&e))?;
    let same = |c: &Path| std::fs::metadata(c).is_ok_and(|m| m.ino() == old.ino() && m.dev() == old.dev());
    let others: Vec<PathBuf> = t
        .visible_below(Path::new(""))
        .filter(|(rel, c)| *rel != p.rel && same(c))
        .map(|(r, _)| r.to_path_buf())
        .collect();
    for rel in others {
        let linked = match t.held(&rel) {
            Some(Held::Pending(other, _)) => Some(other),
            _ => None,
        };
        let cache = s.make_pending(&rel).map_err(|e| errno_of(&e))?;
        let _ = std::fs::remove_file(&cache);
        std::fs::hard_link(&p.cache, &cache).map_err(|e| errno_of(&e))?;
        match linked {
            Some(other) => {
                if let Some(o) = t.get_mut(other) {
                    o.cache = cache;
                    o.shares_committed = false;
                }
            }
            None => {
                t.add(&rel, cache, false);
            }
        }
    }
    if let Some(p) = t.get_mut(id) {
        p.shares_committed = false;
    }
    Ok(())
}

/// After the real open of an [`Opening`] that tracks a pending file.
pub fn opened(fd: i32, track: u32, created: bool) {
    let Some(file) = Tracked::of(track) else { return };
    let session = owner();
    let _inside = Inside::enter();
    let mut t = table_for_id(track);
    let epoch = t.epoch;
    match file {
        Tracked::Shared(id) => {
            t.shared.opened(id, fd, created, epoch);
            fds::set(fd, id);
        }
        Tracked::Pending(id) if fd < 0 => {
            if created {
                if let Some(bytes) = t.get(id).map(|p| p.cache.clone()) {
                    t.abandon(id);
                    let _ = std::fs::remove_file(bytes);
                }
            }
        }
        Tracked::Pending(id) => {
            if let Some(p) = t.get_mut(id) {
                p.writers += 1;
                p.epoch = epoch;
                fds::set(fd, id);
                if let (1, Some(s)) = (p.writers, session) {
                    super::writes::opened(&s.pending, &p.cache);
                }
            }
            t.opened_over_peer(id);
        }
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

/// Before `close_range(first, last)` (without `CLOSE_RANGE_CLOEXEC`): as [`closing`] for every
/// descriptor in the range, of any size: the (descriptor, id) pairs of the pending files they
/// wrote, put back with [`fds::set`] if the call fails. Nothing but one load while no
/// descriptor is tracked.
pub fn closing_range(first: u32, last: u32) -> Vec<(i32, u32)> {
    if !fds::any() || owner().is_none() {
        return Vec::new();
    }
    fds::take_range(first, last)
}

/// After a descriptor of pending file `id` closed (`ok`: the close succeeded). After
/// `MPI_Finalize` no dataset can form: the file goes where the application put it.
pub fn closed(id: u32, ok: bool) {
    let Some(file) = Tracked::of(id) else { return };
    let Some(s) = owner() else { return };
    let _inside = Inside::enter();
    let mut t = table_for_id(id);
    let id = match file {
        Tracked::Shared(id) => return t.shared.closed(id, ok),
        Tracked::Pending(id) => id,
    };
    if !t.closed(id, ok) {
        return;
    }
    if state::finished() {
        if let Some(p) = t.get(id).cloned() {
            t.forget(id);
            drop(t);
            materialize(&p.cache, &s.prefix.join(&p.rel), true);
        }
    } else if let Some(p) = t.get(id) {
        super::writes::closed(&s.pending, &p.cache, !p.failed);
        // a copy for an update in place that changed nothing: the file it replaced stands
        let unchanged = !p.failed
            && !p.takes_over
            && p.copied.as_ref().is_some_and(|c| super::untouched::unchanged(c, &p.rel, &p.cache));
        if unchanged {
            let cache = p.cache.clone();
            t.drop_unchanged_copy(id);
            let _ = std::fs::remove_file(cache);
        }
    }
}

/// `fd` is about to be mapped shared (`mmap` with `MAP_SHARED`): the pending file it writes
/// may change through the mapping after its last close, so a copy made for an update in place
/// is dropped at that close only if no mapping of it is left ([`super::untouched`]).
pub fn mapped_shared(fd: i32) {
    let id = fds::get(fd);
    let Some(Tracked::Pending(id)) = Tracked::of(id) else { return };
    if owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    let mut t = table_for_id(id);
    if let Some(c) = t.get_mut(id).and_then(|p| p.copied.as_mut()) {
        c.mapped_shared();
    }
}

/// `new` now refers to what `old` refers to (the `dup` family, `F_DUPFD`).
pub fn duplicated(old: i32, new: i32) {
    let id = fds::get(old);
    let Some(file) = Tracked::of(id) else { return };
    if new < 0 || old == new || owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    let mut t = table_for_id(id);
    match file {
        Tracked::Shared(id) => {
            t.shared.duplicated(id);
            fds::set(new, id);
        }
        Tracked::Pending(id) => {
            if let Some(p) = t.get_mut(id) {
                p.writers += 1;
                fds::set(new, id);
            }
        }
    }
}

/// A write on `fd` failed: the dataset of its pending file is invalid.
pub fn write_failed(fd: i32) {
    let id = fds::get(fd);
    let Some(file) = Tracked::of(id) else { return };
    if owner().is_none() {
        return;
    }
    let _inside = Inside::enter();
    let mut t = table_for_id(id);
    match file {
        Tracked::Shared(id) => t.shared.failed(id),
        Tracked::Pending(id) => {
            if let Some(p) = t.get_mut(id) {
                p.failed = true;
            }
        }
    }
}

/// A call that reads or sets metadata of a path (the stat family, `access`, `chmod`,
/// `utimensat`, `readlink`, ...): on the cached bytes when SCR holds the path.
pub fn held(dirfd: i32, path: &CStr) -> Call {
    let Some(s) = routing() else { return Call::Pass };
    let Some(rel) = s.resolve_file(dirfd, path) else { return Call::Pass };
    let _inside = Inside::enter();
    let t = table_for_file(s, &rel);
    match t.seen(&rel) {
        Some(Seen::Held(h)) => c_path(h.cache()),
        Some(Seen::Peer(p)) => {
            let p = p.clone();
            drop(t);
            super::peers::stat_path(s, &rel, &p).map_or(Call::Pass, |path| c_path(&path))
        }
        None => t.shared.staging(&rel).map_or(Call::Pass, c_path),
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
    let Some(rel) = s.resolve_file(libc::AT_FDCWD, path) else { return Call::Pass };
    let _inside = Inside::enter();
    if table_for_file(s, &rel).seen(&rel).is_none() {
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
    let rel = s.resolve_file(libc::AT_FDCWD, path)?;
    let _inside = Inside::enter();
    table_for_file(s, &rel).seen(&rel)?;
    let abs = s.prefix.join(&rel);
    let (dir, name) = (abs.parent()?, abs.file_name()?);
    Some(std::fs::canonicalize(dir).map(|d| d.join(name)).map_err(|e| errno_of(&e)))
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
