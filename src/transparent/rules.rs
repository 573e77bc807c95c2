//! The rules of transparent mode, as plain functions: given the file table, the path (relative
//! to the prefix), the call's flags and what the prefix holds, what happens. The callers in
//! [`super::calls`] gather the facts, apply the decision and update the table.
//!
//! * Opening a file several ranks write in this phase (a shared file, [`super::shared`])
//!   reaches its staging name; a path `SCR_PRELOAD_SHARED` declares shared becomes one when
//!   opened for writing; a staging name itself passes (tracked when written). SCR's other own
//!   names pass.
//! * Opening a path SCR holds (a pending file, or a file of a complete cached dataset) for
//!   reading, or stat-ing it, uses the cached bytes; anything else reaches the prefix.
//! * Opening a path that a checkpoint pattern routes (or that SCR holds) for writing writes a
//!   pending file in cache; without `O_TRUNC` its current bytes are copied in first (from the
//!   cached dataset or the prefix), so updates in place work and a completed dataset is never
//!   changed under SCR. `O_EXCL` sees files in cache and in the prefix; a missing parent
//!   directory fails as it would in the prefix. Directories and `O_TMPFILE` pass.
//! * Renaming a held file to a routed path renames it in cache; to any other path, its bytes
//!   go there. A directory holding files SCR has is renamed in the prefix and the files follow.
//!   A plain file renamed to a routed path becomes a pending file.
//! * Removing a held file removes the pending copy or hides the dataset's file; removing a
//!   directory in which SCR holds files fails with `ENOTEMPTY`, as it would in the prefix.
//! * A hard link to a held file is made in cache when the new name is routed, else in (or,
//!   across file systems, copied to) the prefix.

use std::path::{Path, PathBuf};

use super::plain::OnDisk;
use super::prefix::reserved;
use super::table::{Held, Seen, Table};

/// What the prefix holds at a path and at its parent directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disk {
    pub at: OnDisk,
    pub parent: OnDisk,
}

pub fn writing(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
}

fn tmpfile(flags: i32) -> bool {
    flags & libc::O_TMPFILE == libc::O_TMPFILE
}

#[derive(Debug, PartialEq, Eq)]
pub enum Open {
    /// The real call with the application's arguments.
    Pass,
    /// The real call as it is, on the staging name of shared file `track` (an open for
    /// writing of a file this rank shares), whose descriptor is tracked.
    Staged {
        track: u32,
    },
    /// Shared file `id` (shared in this phase): open its staging name instead (tracked when
    /// writing).
    Shared {
        id: u32,
    },
    /// An open for writing of a path `SCR_PRELOAD_SHARED` declares: it becomes a shared file
    /// of this phase, opened at its staging name.
    Declare,
    Fail(i32),
    /// Open these bytes instead (reading or metadata).
    Read(PathBuf),
    /// Another rank's file whose bytes are in another node's cache ([`super::peers`]):
    /// read its prefix copy if there is one.
    Elsewhere(super::peers::Peer),
    /// Open pending file `id`; `unshare`: its bytes are a cached dataset's (a hard link), so
    /// it and every name linked to it get bytes of their own first.
    Write {
        id: u32,
        unshare: bool,
    },
    /// An open for writing of another rank's file ([`super::peers`]): this rank takes it
    /// over (a pending file of its own, its bytes copied first with `keep`), and the other
    /// rank drops it at the next sync point.
    TakeOver {
        peer: super::peers::Peer,
        keep: bool,
    },
    /// A new pending file, its bytes copied from `from` first; `check_prefix`: the file exists
    /// in the prefix and the application's right to open it decides.
    Create {
        from: Option<PathBuf>,
        check_prefix: bool,
    },
}

/// Decide an open of `rel` (relative to the prefix, SCR's own names included) with `flags`;
/// `routed`: whether a checkpoint pattern takes `rel` for this rank (asked only for writes to
/// paths SCR does not hold); `shared`: whether `SCR_PRELOAD_SHARED` declares it shared (asked
/// only for writes of paths not shared yet); `disk` says what the prefix holds at `rel`
/// (asked only when needed); `in_prefix` is the application's path.
pub fn open(
    t: &Table,
    rel: &Path,
    flags: i32,
    routed: impl FnOnce() -> bool,
    shared: impl FnOnce() -> bool,
    in_prefix: &Path,
    disk: impl FnOnce() -> Disk,
) -> Open {
    if let Some(real) = crate::state::layout::shared_of_staging(rel) {
        return match t.shared.find(&real) {
            Some((track, _)) if writing(flags) => Open::Staged { track },
            _ => Open::Pass,
        };
    }
    if reserved(rel) || rel.as_os_str().is_empty() {
        return Open::Pass;
    }
    match t.shared.find(rel) {
        Some((id, _)) => return Open::Shared { id },
        None if writing(flags) && shared() => return Open::Declare,
        None => {}
    }
    if tmpfile(flags) {
        return Open::Pass;
    }
    let held = t.held(rel);
    if !writing(flags) {
        if let Some(h) = held {
            return Open::Read(h.cache().to_path_buf());
        }
        return match t.seen(rel) {
            Some(Seen::Peer(p)) if flags & libc::O_DIRECTORY == 0 => match &p.local {
                Some(bytes) => Open::Read(bytes.clone()),
                None => Open::Elsewhere(p.clone()),
            },
            _ => Open::Pass,
        };
    }
    if flags & libc::O_DIRECTORY != 0 || (held.is_none() && !routed()) {
        return Open::Pass;
    }
    let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
    let trunc = flags & libc::O_TRUNC != 0;
    match held {
        Some(_) if excl => Open::Fail(libc::EEXIST),
        Some(Held::Pending(id, p)) => Open::Write { id, unshare: p.shares_committed },
        Some(Held::Committed(c)) => Open::Create { from: (!trunc).then(|| c.cache.clone()), check_prefix: false },
        None => {
            if let Some(Seen::Peer(p)) = t.seen(rel) {
                return if excl { Open::Fail(libc::EEXIST) } else { Open::TakeOver { peer: p.clone(), keep: !trunc } };
            }
            let d = disk();
            match d.at {
                OnDisk::File if excl => Open::Fail(libc::EEXIST),
                OnDisk::File => Open::Create { from: (!trunc).then(|| in_prefix.to_path_buf()), check_prefix: true },
                OnDisk::Dir if excl => Open::Fail(libc::EEXIST),
                OnDisk::Dir => Open::Fail(libc::EISDIR),
                OnDisk::Other => Open::Pass,
                OnDisk::Missing if flags & libc::O_CREAT == 0 => Open::Fail(libc::ENOENT),
                OnDisk::Missing => match d.parent {
                    OnDisk::Dir => Open::Create { from: None, check_prefix: false },
                    OnDisk::Missing => Open::Fail(libc::ENOENT),
                    OnDisk::File => Open::Fail(libc::ENOTDIR),
                    OnDisk::Other => Open::Pass,
                },
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Rename {
    Pass,
    Fail(i32),
    /// Source and target are the same held file: nothing to do.
    Same,
    /// The held source becomes the pending file at the target.
    InCache,
    /// The held source's bytes go to the target path the application named.
    Out,
    /// The source is a directory (other ranks may hold files below it), or SCR holds files
    /// below it.
    Dir,
    /// The source is not SCR's and the target is routed or held: if the source is a plain
    /// file, it becomes the pending file at the target.
    Adopt,
}

/// Decide a rename. `from`/`to`: the paths relative to the prefix (`None`: outside it);
/// `to_routed`: a pattern takes the target; `from_dir`: the source is a directory in the
/// prefix; `to_exists`: something is at the target in the prefix (asked only for
/// `RENAME_NOREPLACE`).
pub fn rename(
    t: &Table,
    from: Option<&Path>,
    to: Option<&Path>,
    to_routed: bool,
    noreplace: bool,
    from_dir: impl FnOnce() -> bool,
    to_exists: impl FnOnce() -> bool,
) -> Rename {
    let held = from.and_then(|f| t.held(f)).is_some();
    let to_held = to.is_some_and(|p| t.held(p).is_some());
    let decision = if held {
        if from == to {
            return Rename::Same;
        }
        if to_routed || to_held {
            Rename::InCache
        } else {
            Rename::Out
        }
    } else if from.is_some_and(|f| t.any_below(f)) || (from.is_some() && from_dir()) {
        return Rename::Dir;
    } else if to_routed || to_held {
        Rename::Adopt
    } else {
        return Rename::Pass;
    };
    if noreplace && (to_held || to_exists()) {
        return Rename::Fail(libc::EEXIST);
    }
    decision
}

#[derive(Debug, PartialEq, Eq)]
pub enum Link {
    Pass,
    Fail(i32),
    /// A pending file at the new name sharing the held bytes.
    InCache(PathBuf),
    /// Link (or copy, across file systems) the held bytes to the new name.
    Out(PathBuf),
}

/// Decide `link(from, to)`; `to_exists`: something is at the new name in the prefix.
pub fn link(
    t: &Table,
    from: Option<&Path>,
    to: Option<&Path>,
    to_routed: bool,
    to_exists: impl FnOnce() -> bool,
) -> Link {
    let Some(h) = from.and_then(|f| t.held(f)) else { return Link::Pass };
    if to.is_some_and(|p| t.held(p).is_some()) || to_exists() {
        return Link::Fail(libc::EEXIST);
    }
    if to_routed {
        Link::InCache(h.cache().to_path_buf())
    } else {
        Link::Out(h.cache().to_path_buf())
    }
}

/// Decide `rmdir(dir)`: `Some(errno)` when SCR holds files below it.
pub fn rmdir(t: &Table, dir: &Path) -> Option<i32> {
    t.any_seen_below(dir).then_some(libc::ENOTEMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transparent::table::Committed;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn table() -> Table {
        let mut t = Table::default();
        t.set_committed([(
            p("ckpt.2/rank_0"),
            Committed { cache: p("/ds/ckpt.2/rank_0"), dataset: 1, name: "ckpt.2".into() },
        )]);
        t.add(&p("ckpt.4/rank_0"), p("/pend/ckpt.4/rank_0"), false);
        t
    }

    const NEW: Disk = Disk { at: OnDisk::Missing, parent: OnDisk::Dir };
    const W: i32 = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;

    fn o(t: &Table, rel: &str, flags: i32, routed: bool, disk: Disk) -> Open {
        open(t, &p(rel), flags, || routed, || false, &p(&format!("/pfx/{rel}")), || disk)
    }

    #[test]
    fn shared_files_open_at_their_staging_names_and_scrs_own_names_pass() {
        let mut t = table();
        let id = t.shared.add(&p("ckpt.4/shared"), p("/pfx/ckpt.4/.shared.scrshared"), 0);
        let o = |t: &Table, rel: &str, flags: i32, declared: bool| {
            open(t, &p(rel), flags, || true, || declared, &p(&format!("/pfx/{rel}")), || NEW)
        };
        // a name shared in this phase, read or written, reaches its staging name
        assert_eq!(o(&t, "ckpt.4/shared", W, false), Open::Shared { id });
        assert_eq!(o(&t, "ckpt.4/shared", libc::O_RDONLY, false), Open::Shared { id });
        // the staging name itself (the MPI library's own open) passes, tracked when written
        assert_eq!(o(&t, "ckpt.4/.shared.scrshared", W, false), Open::Staged { track: id });
        assert_eq!(o(&t, "ckpt.4/.shared.scrshared", libc::O_RDONLY, false), Open::Pass);
        assert_eq!(o(&t, "ckpt.4/.other.scrshared", W, true), Open::Pass, "not shared here");
        // SCR_PRELOAD_SHARED declares a file when it is opened for writing, not for reading
        assert_eq!(o(&t, "ckpt.4/declared", W, true), Open::Declare);
        assert_eq!(o(&t, "ckpt.4/declared", libc::O_RDONLY, true), Open::Pass);
        assert_eq!(o(&t, "ckpt.4/declared", W, false), Open::Create { from: None, check_prefix: false });
        // SCR's own names and the prefix itself pass
        assert_eq!(o(&t, ".scr/index.scr", W, true), Open::Pass);
        assert_eq!(o(&t, "", libc::O_RDONLY, true), Open::Pass);
    }

    #[test]
    fn reads_use_held_bytes_and_pass_otherwise() {
        let t = table();
        assert_eq!(o(&t, "ckpt.2/rank_0", libc::O_RDONLY, true, NEW), Open::Read(p("/ds/ckpt.2/rank_0")));
        assert_eq!(o(&t, "ckpt.4/rank_0", libc::O_RDONLY, true, NEW), Open::Read(p("/pend/ckpt.4/rank_0")));
        // O_DIRECTORY on a held file: the kernel says ENOTDIR about the cached file
        let dir = libc::O_RDONLY | libc::O_DIRECTORY;
        assert_eq!(o(&t, "ckpt.2/rank_0", dir, true, NEW), Open::Read(p("/ds/ckpt.2/rank_0")));
        assert_eq!(o(&t, "ckpt.2/other", libc::O_RDONLY, true, NEW), Open::Pass);
        assert_eq!(o(&t, "latest", W, false, NEW), Open::Pass, "not routed");
        assert_eq!(o(&t, "ckpt.2", libc::O_TMPFILE | libc::O_RDWR, true, NEW), Open::Pass);
    }

    #[test]
    fn writes_create_pending_files_with_prefix_semantics() {
        let t = table();
        assert_eq!(o(&t, "ckpt.6/rank_0", W, true, NEW), Open::Create { from: None, check_prefix: false });
        let no_parent = Disk { at: OnDisk::Missing, parent: OnDisk::Missing };
        assert_eq!(o(&t, "ckpt.6/rank_0", W, true, no_parent), Open::Fail(libc::ENOENT));
        let file_parent = Disk { at: OnDisk::Missing, parent: OnDisk::File };
        assert_eq!(o(&t, "ckpt.6/rank_0", W, true, file_parent), Open::Fail(libc::ENOTDIR));
        assert_eq!(o(&t, "ckpt.6/rank_0", libc::O_WRONLY, true, NEW), Open::Fail(libc::ENOENT));
        let dir = Disk { at: OnDisk::Dir, parent: OnDisk::Dir };
        assert_eq!(o(&t, "ckpt.6/d", W, true, dir), Open::Fail(libc::EISDIR));
        // a file in the prefix: updated in place through a copy, with its permissions
        let file = Disk { at: OnDisk::File, parent: OnDisk::Dir };
        assert_eq!(
            o(&t, "ckpt.6/x", libc::O_WRONLY, true, file),
            Open::Create { from: Some(p("/pfx/ckpt.6/x")), check_prefix: true }
        );
        assert_eq!(o(&t, "ckpt.6/x", W, true, file), Open::Create { from: None, check_prefix: true });
        let excl = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        assert_eq!(o(&t, "ckpt.6/x", excl, true, file), Open::Fail(libc::EEXIST));
        assert_eq!(o(&t, "ckpt.6/l", W, true, Disk { at: OnDisk::Other, parent: OnDisk::Dir }), Open::Pass);
    }

    #[test]
    fn writes_to_held_files_never_change_a_completed_dataset() {
        let t = table();
        // a committed file: updating it makes a pending copy (the dataset keeps its bytes)
        assert_eq!(
            o(&t, "ckpt.2/rank_0", libc::O_RDWR, true, NEW),
            Open::Create { from: Some(p("/ds/ckpt.2/rank_0")), check_prefix: false }
        );
        assert_eq!(o(&t, "ckpt.2/rank_0", W, true, NEW), Open::Create { from: None, check_prefix: false });
        // held files stay SCR's even when no pattern routes them now
        assert_eq!(o(&t, "ckpt.2/rank_0", W, false, NEW), Open::Create { from: None, check_prefix: false });
        let excl = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        assert_eq!(o(&t, "ckpt.2/rank_0", excl, true, NEW), Open::Fail(libc::EEXIST));
        assert_eq!(o(&t, "ckpt.4/rank_0", excl, true, NEW), Open::Fail(libc::EEXIST));
        let Open::Write { unshare: false, .. } = o(&t, "ckpt.4/rank_0", libc::O_WRONLY, true, NEW) else {
            panic!("an existing pending file is written in place")
        };
        // a pending file that shares a committed file's bytes gets its own before any write
        let mut t = table();
        let id = t.add(&p("ckpt.2/b"), p("/pend/ckpt.2/b"), true);
        assert_eq!(o(&t, "ckpt.2/b", libc::O_WRONLY, true, NEW), Open::Write { id, unshare: true });
        assert_eq!(o(&t, "ckpt.2/b", W, true, NEW), Open::Write { id, unshare: true });
    }

    fn rn(t: &Table, from: Option<&str>, to: Option<&str>, routed: bool, noreplace: bool, exists: bool) -> Rename {
        rename(t, from.map(Path::new), to.map(Path::new), routed, noreplace, || from == Some("dir"), || exists)
    }

    #[test]
    fn renames() {
        let t = table();
        assert_eq!(rn(&t, Some("ckpt.4/rank_0"), Some("ckpt.4/r0"), true, false, false), Rename::InCache);
        assert_eq!(rn(&t, Some("ckpt.2/rank_0"), Some("ckpt.2/r0"), true, false, false), Rename::InCache);
        // out of the patterns, or out of the prefix: the bytes go where the application says
        assert_eq!(rn(&t, Some("ckpt.2/rank_0"), Some("keep/rank_0"), false, false, false), Rename::Out);
        assert_eq!(rn(&t, Some("ckpt.2/rank_0"), None, false, false, false), Rename::Out);
        assert_eq!(rn(&t, Some("ckpt.2/rank_0"), Some("ckpt.2/rank_0"), true, false, false), Rename::Same);
        assert_eq!(rn(&t, Some("ckpt.4/rank_0"), Some("ckpt.2/rank_0"), true, true, false), Rename::Fail(libc::EEXIST));
        assert_eq!(rn(&t, Some("ckpt.4/rank_0"), Some("ckpt.4/x"), true, true, true), Rename::Fail(libc::EEXIST));
        // directories holding SCR's files, and files entering the patterns
        assert_eq!(rn(&t, Some("ckpt.4"), Some("ckpt.5"), true, false, false), Rename::Dir);
        assert_eq!(rn(&t, Some("dir"), Some("ckpt.5"), true, false, false), Rename::Dir, "files of other ranks");
        assert_eq!(rn(&t, Some("tmp/x"), Some("ckpt.6/x"), true, false, false), Rename::Adopt);
        assert_eq!(rn(&t, None, Some("ckpt.6/x"), true, false, false), Rename::Adopt);
        assert_eq!(rn(&t, Some("a"), Some("b"), false, false, false), Rename::Pass);
        assert_eq!(rn(&t, None, Some("ckpt.2/rank_0"), false, false, false), Rename::Adopt, "replacing a held file");
    }

    #[test]
    fn links_and_directory_removal() {
        let t = table();
        let l = |from: &str, to: &str, routed: bool, exists: bool| {
            link(&t, Some(Path::new(from)), Some(Path::new(to)), routed, || exists)
        };
        assert_eq!(l("ckpt.2/rank_0", "ckpt.2/copy", true, false), Link::InCache(p("/ds/ckpt.2/rank_0")));
        assert_eq!(l("ckpt.2/rank_0", "keep/copy", false, false), Link::Out(p("/ds/ckpt.2/rank_0")));
        assert_eq!(l("ckpt.2/rank_0", "ckpt.4/rank_0", true, false), Link::Fail(libc::EEXIST));
        assert_eq!(l("ckpt.2/rank_0", "keep/x", false, true), Link::Fail(libc::EEXIST));
        assert_eq!(l("other", "ckpt.2/x", true, false), Link::Pass);
        assert_eq!(rmdir(&t, Path::new("ckpt.2")), Some(libc::ENOTEMPTY));
        assert_eq!(rmdir(&t, Path::new("ckpt.3")), None);
    }
}
