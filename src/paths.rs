//! Path algebra: lexical normalisation, containment in the prefix directory, node-local
//! directories that are private to the user, and pruning of emptied directories.
//!
//! A path handed to the library (by `SCR_Route_file` or a hook) is made absolute against the
//! current directory and normalised lexically (`.`, `..`, repeated `/`), so `..` can never
//! climb out of the prefix. A prefix reached through a symbolic link matches both its
//! spelled and its canonical form.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Absolute, lexically normalised form of `p` (relative paths are taken against `cwd`).
pub(crate) fn normalize(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
        }
    }
    out
}

/// A path read from metadata, relative to the directory it belongs to (the prefix, a cache
/// directory, a dataset directory): the one check every such path passes before it is joined
/// to that directory. Metadata in the prefix may have been written by someone else, so a
/// path that is absolute, empty, holds a NUL or an empty, `.` or `..` component is refused
/// rather than normalised: it cannot name anything outside its directory, and it is not
/// silently read as another name either.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "PathBuf", into = "PathBuf")]
pub(crate) struct RelPath(PathBuf);

impl RelPath {
    /// `p` if it is a safe relative path, otherwise why not.
    pub(crate) fn new(p: PathBuf) -> std::result::Result<RelPath, UnsafePath> {
        match rel_problem(&p) {
            None => Ok(RelPath(p)),
            Some(why) => Err(UnsafePath { path: p, why }),
        }
    }
}

/// A path refused as a [`RelPath`]: the path, and why it is not a safe relative path (the
/// reason [`rel_problem`] gives).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsafe path {:?} ({why})", path.as_os_str())]
pub struct UnsafePath {
    /// The path refused.
    pub(crate) path: PathBuf,
    /// Why it is not a safe relative path.
    pub(crate) why: &'static str,
}

impl TryFrom<PathBuf> for RelPath {
    type Error = UnsafePath;
    fn try_from(p: PathBuf) -> std::result::Result<RelPath, UnsafePath> {
        RelPath::new(p)
    }
}

impl From<RelPath> for PathBuf {
    fn from(r: RelPath) -> PathBuf {
        r.0
    }
}

impl std::ops::Deref for RelPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for RelPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// Why `p` is not a safe relative path (see [`RelPath`]), checked on its bytes: `Path`'s
/// own parsing would quietly drop `.` and repeated `/`.
pub(crate) fn rel_problem(p: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    if b.is_empty() {
        return Some("empty");
    }
    if b.contains(&0) {
        return Some("holds a NUL byte");
    }
    if b[0] == b'/' {
        return Some("absolute");
    }
    for c in b.split(|&x| x == b'/') {
        match c {
            b"" => return Some("an empty component"),
            b"." => return Some("a `.` component"),
            b".." => return Some("a `..` component"),
            _ => {}
        }
    }
    None
}

/// Serde helpers for `PathBuf` fields of metadata that hold relative paths: reading goes
/// through [`RelPath`], so a record with an unsafe path does not load (the reader names the
/// file and the path); writing is unchanged.
pub(crate) mod rel_field {
    use std::path::{Path, PathBuf};

    pub(crate) fn serialize<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(p, s)
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        <super::RelPath as serde::Deserialize>::deserialize(d).map(PathBuf::from)
    }
}

/// SCR's own directory, in the prefix (index, summaries, logs) and in each cached dataset's
/// directory: no file of the application is routed there.
pub const SCR_DIR: &str = ".scr";

/// The end of a shared file's staging name, `.<name>.scrshared` beside its place.
pub(crate) const STAGING_SUFFIX: &str = ".scrshared";

/// Whether `rel` (relative to the prefix) is [`SCR_DIR`] or inside it: its first component,
/// by its bytes (transparent mode asks for every path argument under the prefix).
pub(crate) fn in_scr_dir(rel: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    rel.as_os_str().as_bytes().split(|&c| c == b'/').next() == Some(SCR_DIR.as_bytes())
}

/// The current directory, or `/` if it cannot be read.
pub(crate) fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// A prefix directory with both its spelled and its canonical (symlink-free) form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Prefix {
    /// The path as given, normalised (absolute, without `.` and `..`).
    pub path: PathBuf,
    /// The same with symbolic links resolved (equal to `path` if it does not exist yet).
    pub(crate) canonical: PathBuf,
}

impl Prefix {
    /// Normalise `path` and resolve its canonical form (equal to it if it does not exist yet).
    pub(crate) fn new(path: &Path) -> Prefix {
        let path = normalize(path, &cwd());
        let canonical = fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Prefix { path, canonical }
    }

    /// The part of `name` below the prefix, or `None` if it resolves outside it (or to the
    /// prefix itself). `name` may be relative (to the current directory).
    pub(crate) fn relative(&self, name: &Path) -> Option<PathBuf> {
        let abs = normalize(name, &cwd());
        for base in [&self.path, &self.canonical] {
            if let Ok(rel) = abs.strip_prefix(base) {
                if rel.as_os_str().is_empty() {
                    return None;
                }
                return Some(rel.to_path_buf());
            }
        }
        // The name may itself go through a symlink to the prefix: canonicalise its parent.
        let parent = abs.parent()?;
        let canon_parent = fs::canonicalize(parent).ok()?;
        let rel = canon_parent.join(abs.file_name()?);
        rel.strip_prefix(&self.canonical).ok().map(Path::to_path_buf).filter(|r| !r.as_os_str().is_empty())
    }

    /// The absolute path of a name relative to the prefix, as spelled: for routing the
    /// application's own names. SCR's own reads, writes and deletes of checkpoint data and
    /// metadata in the prefix go through [`Prefix::below`].
    pub(crate) fn join(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// The absolute path of `rel` (relative to the prefix), checked by [`below`]: no
    /// component below the prefix is a symbolic link.
    pub(crate) fn below(&self, rel: &Path) -> Result<PathBuf, PathError> {
        below(&self.path, rel)
    }

    /// The absolute path of `rel`, to be written by a temporary name renamed into place, its
    /// directories ready: see [`dirs_for_write`].
    pub(crate) fn for_write(&self, rel: &Path, ready: &mut BTreeSet<PathBuf>) -> Result<PathBuf, PathError> {
        dirs_for_write(&self.path, rel, ready)
    }
}

/// The path `base/rel` for a write by a temporary name renamed into place, once no directory
/// above it below `base` is a symbolic link ([`below`]'s check) and the missing ones are made
/// (by the umask, as `create_dir_all`). The final name is not looked at: the temporary is
/// created with `O_NOFOLLOW` and the rename replaces a link there instead of following it.
/// `ready` holds the directories found or made before in the same transfer, not looked at
/// again: a flush of a rank's files in one directory costs one `lstat` of it, where checking
/// each file's path and then making its directory cost four metadata operations on the
/// prefix's file system. As with [`below`], a link swapped in after the check is not caught.
pub(crate) fn dirs_for_write(base: &Path, rel: &Path, ready: &mut BTreeSet<PathBuf>) -> Result<PathBuf, PathError> {
    let path = base.join(rel);
    let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else { return Ok(path) };
    let mut dir = base.to_path_buf();
    for c in parent.components() {
        dir.push(c);
        if ready.contains(&dir) {
            continue;
        }
        let io = |op, source| PathError::Io { op, path: dir.clone(), source };
        let found = match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&dir) {
                Ok(()) => None,
                // made meanwhile by another rank: looked at as if found
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    Some(fs::symlink_metadata(&dir).map_err(|e| io("stat", e))?)
                }
                Err(e) => return Err(io("create directory", e)),
            },
            Err(e) => return Err(io("stat", e)),
            Ok(m) => Some(m),
        };
        match found {
            Some(m) if m.file_type().is_symlink() => {
                return Err(PathError::Link {
                    why: format!(
                        "{} is a symbolic link below {}; SCR does not follow it",
                        dir.display(),
                        base.display()
                    ),
                    path,
                })
            }
            Some(m) if !m.is_dir() => {
                return Err(io("create directory", io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            _ => {
                ready.insert(dir.clone());
            }
        }
    }
    Ok(path)
}

/// The first of `base/<c1>`, `base/<c1>/<c2>`, ... (one per component of `rel`, the last
/// included) that is a symbolic link, found with `lstat`; `None` if none is (a component that
/// does not exist ends the walk: nothing below it can be a link yet).
pub(crate) fn link_below(base: &Path, rel: &Path) -> Option<PathBuf> {
    let mut p = base.to_path_buf();
    for c in rel.components() {
        p.push(c);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => return Some(p),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The one checked way SCR reaches a path below the prefix (or another directory it owns)
/// for its own writes, reads as checkpoint data, renames and deletes: `base/rel` if no
/// component below `base` is a symbolic link, else a [`PathError::Link`] naming the path
/// and the link. Someone who can write into the prefix could otherwise replace a dataset's
/// directory (`ckpt.5`, `.scr`) by a link to another directory and make a flush write there,
/// a fetch read from there or a prune delete there. `base` itself may be a link (users point
/// the prefix at a file system that way). The walk uses `lstat`, so a link swapped in between
/// the check and the use is not caught; the O_NOFOLLOW temporaries still catch a link at
/// the final name.
pub(crate) fn below(base: &Path, rel: &Path) -> Result<PathBuf, PathError> {
    let path = base.join(rel);
    match link_below(base, rel) {
        None => Ok(path),
        Some(link) => Err(PathError::Link {
            why: if link == path {
                format!("is a symbolic link below {}; SCR does not follow it", base.display())
            } else {
                format!("{} is a symbolic link below {}; SCR does not follow it", link.display(), base.display())
            },
            path,
        }),
    }
}

/// A failure of one of the path operations below, with the path it concerns. The runtime's
/// [`crate::error::Error`] converts it (`Io` to `Io`, `Link` to `Integrity`, `Refused` to
/// `Refused`), so callers keep using `?`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// A file-system call on `path` failed while doing `op`.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`"create directory"`, `"remove"`, ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A component of `path` below the directory SCR owns is a symbolic link ([`below`]).
    #[error("{}: {why}", path.display())]
    Link {
        /// The path SCR would have used.
        path: PathBuf,
        /// Which component is the link.
        why: String,
    },
    /// A directory SCR will not use ([`ensure_private_dir`]): not a directory, or another
    /// user's.
    #[error("{}: {why}", path.display())]
    Refused {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl PathError {
    fn io(op: &'static str, path: &Path, source: io::Error) -> PathError {
        PathError::Io { op, path: path.to_path_buf(), source }
    }
}

/// The longest file name (in bytes) Linux file systems accept.
pub(crate) const NAME_MAX: usize = 255;

/// The temporary name SCR gives `path` beside it while writing it: `.<name><suffix>`, or,
/// when that would be longer than [`NAME_MAX`], `.<start of name>~<crc32 of name><suffix>`
/// cut to fit, so every legal name has one (the same for every process: the name alone
/// decides). Every temporary-name site uses this.
pub(crate) fn temp_name(path: &Path, suffix: &str) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let name = path.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
    let mut out = Vec::with_capacity(NAME_MAX);
    out.push(b'.');
    if 1 + name.len() + suffix.len() <= NAME_MAX {
        out.extend_from_slice(name);
    } else {
        let tag = format!("~{:08x}", crc32fast::hash(name));
        let mut keep = NAME_MAX.saturating_sub(1 + tag.len() + suffix.len()).min(name.len());
        // cut on a character boundary where the name is UTF-8
        while keep > 0 && keep < name.len() && (name[keep] & 0xc0) == 0x80 {
            keep -= 1;
        }
        out.extend_from_slice(&name[..keep]);
        out.extend_from_slice(tag.as_bytes());
    }
    out.extend_from_slice(suffix.as_bytes());
    path.with_file_name(std::ffi::OsString::from_vec(out))
}

/// Create the temporary file `tmp` for writing, exclusively and without following a symbolic
/// link (`O_CREAT|O_EXCL|O_NOFOLLOW`): whatever is found at the name (a stale temporary a
/// killed run left, or a link someone planted to make SCR write elsewhere) is unlinked (a link
/// itself, never its target) and the file created afresh; if something appears again in
/// between, the create fails rather than writing through it.
pub(crate) fn create_temp(tmp: &Path, mode: u32) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            open()
        }
        r => r,
    }
}

/// Move a file within the node: rename it, or, across file systems, copy it and remove the
/// source (a source that cannot be removed then is left behind: the copy is what counts).
pub(crate) fn move_file(from: &Path, to: &Path) -> io::Result<()> {
    if from == to {
        return Ok(());
    }
    match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            fs::copy(from, to)?;
            let _ = fs::remove_file(from);
            Ok(())
        }
        r => r,
    }
}

/// Why the file at `path` is not the `size` bytes recorded for it (its actual size, or why it
/// cannot be inspected), or `None` when it is.
pub(crate) fn size_problem(path: &Path, size: u64) -> Option<String> {
    match fs::metadata(path) {
        Ok(m) if m.len() == size => None,
        Ok(m) => Some(format!("size is {} bytes, {size} were recorded", m.len())),
        Err(e) => Some(e.to_string()),
    }
}

/// Create `dir` and its missing parents with mode 0700 and check that `dir` is a real
/// directory owned by this user. A directory owned by someone else is refused: the library
/// must never write checkpoints where another user can read or replace them.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), PathError> {
    match fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| PathError::io("create directory", dir, e))?;
        }
        Err(e) => return Err(PathError::io("inspect directory", dir, e)),
    }
    let md = fs::symlink_metadata(dir).map_err(|e| PathError::io("inspect directory", dir, e))?;
    if !md.file_type().is_dir() {
        return Err(PathError::Refused {
            path: dir.to_path_buf(),
            why: "exists but is not a directory (a symbolic link or file is refused for node-local storage)".into(),
        });
    }
    let me = crate::sys::euid();
    if md.uid() != me {
        return Err(PathError::Refused {
            path: dir.to_path_buf(),
            why: format!(
                "owned by uid {} but this process runs as uid {me}; refusing to use another user's directory \
                 (choose another SCR_CNTL_BASE/SCR_CACHE_BASE or remove it)",
                md.uid()
            ),
        });
    }
    if md.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| PathError::io("restrict permissions of", dir, e))?;
    }
    Ok(())
}

/// Create `dir` and its parents (mode 0700 for new ones); an existing directory is accepted.
pub(crate) fn create_dirs(dir: &Path) -> Result<(), PathError> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| PathError::io("create directory", dir, e))
}

/// Remove `dir` and then each parent that became empty, stopping at (and keeping) `stop`.
pub(crate) fn prune_empty_dirs(mut dir: &Path, stop: &Path) {
    while dir.starts_with(stop) && dir != stop {
        if fs::remove_dir(dir).is_err() {
            break;
        }
        match dir.parent() {
            Some(p) => dir = p,
            None => break,
        }
    }
}

/// Remove a file, treating "already gone" as success.
pub(crate) fn remove_file_if_exists(path: &Path) -> Result<(), PathError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PathError::io("remove", path, e)),
    }
}

/// Call `f` on every file below `dir` (not following symbolic links); a missing or
/// unreadable directory has none.
pub(crate) fn walk_files(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => walk_files(&e.path(), f),
            Ok(_) => f(&e.path()),
            Err(_) => {}
        }
    }
}

/// Remove a directory tree, treating "already gone" as success.
pub(crate) fn remove_tree_if_exists(path: &Path) -> Result<(), PathError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PathError::io("remove directory", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn normalisation_cannot_escape() {
        let cwd = Path::new("/p/run");
        assert_eq!(normalize(Path::new("a/./b/../c"), cwd), PathBuf::from("/p/run/a/c"));
        assert_eq!(normalize(Path::new("../../../../etc"), cwd), PathBuf::from("/etc"));
        assert_eq!(normalize(Path::new("//x//y/"), cwd), PathBuf::from("/x/y"));
    }

    #[test]
    fn metadata_paths_are_checked() {
        for ok in ["a", "ckpt.1/rank_0", ".scr/x", "a..b/..c"] {
            assert_eq!(rel_problem(Path::new(ok)), None, "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../x", "a `..` component"),
            ("a/../../x", "a `..` component"),
            ("a//b", "an empty component"),
            ("a/", "an empty component"),
            ("./a", "a `.` component"),
        ] {
            assert_eq!(rel_problem(Path::new(bad)), Some(why), "{bad}");
        }
        let nul = PathBuf::from(std::ffi::OsString::from_vec(b"a\0b".to_vec()));
        assert_eq!(rel_problem(&nul), Some("holds a NUL byte"));
        let r: std::result::Result<RelPath, _> = serde_json::from_str("\"../../x\"");
        assert!(r.unwrap_err().to_string().contains("unsafe path \"../../x\" (a `..` component)"));
        let r: RelPath = serde_json::from_str("\"c/r\"").unwrap();
        assert_eq!(&*r, Path::new("c/r"));
    }

    #[test]
    fn temporary_names_fit_name_max() {
        assert_eq!(temp_name(Path::new("/p/d/rank_0"), ".scrpart"), PathBuf::from("/p/d/.rank_0.scrpart"));
        for len in [200usize, 246, 247, 250, 255] {
            let long = "x".repeat(len);
            let t = temp_name(&Path::new("/p").join(&long), ".scrshared");
            let n = t.file_name().unwrap().len();
            assert!(n <= NAME_MAX, "{len}: {n}");
            assert!(t.to_str().unwrap().ends_with(".scrshared") && t.to_str().unwrap().starts_with("/p/."));
            let other = temp_name(&Path::new("/p").join(format!("{}y", &long[1..])), ".scrshared");
            assert_ne!(t, other, "{len}: names differing at the end get different temporaries");
        }
        // multi-byte characters are not cut in half
        let t = temp_name(Path::new(&"é".repeat(125)), ".scrpart");
        assert!(t.to_str().is_some() && t.as_os_str().len() <= NAME_MAX);
    }

    #[test]
    fn temporaries_never_write_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, b"keep").unwrap();
        let tmp = dir.path().join(".f.scrpart");
        std::os::unix::fs::symlink(&target, &tmp).unwrap();
        use std::io::Write;
        create_temp(&tmp, 0o600).unwrap().write_all(b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_file());
        // a stale temporary is replaced
        create_temp(&tmp, 0o600).unwrap().write_all(b"n").unwrap();
        assert_eq!(fs::read(&tmp).unwrap(), b"n");
    }

    #[test]
    fn the_scr_directory_is_the_first_component() {
        assert!(in_scr_dir(Path::new(".scr")) && in_scr_dir(Path::new(".scr/index.scr")));
        assert!(!in_scr_dir(Path::new("ckpt.1/.scr")) && !in_scr_dir(Path::new(".scrx/a")));
        assert!(!in_scr_dir(Path::new("")));
        // by its bytes, what its first component gives, for every path of up to 5 of these
        use std::os::unix::ffi::OsStrExt;
        let tokens: [&[u8]; 5] = [b"/", b".", b".scr", b"a", b".scrx"];
        let (mut paths, mut last): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (vec![Vec::new()], vec![Vec::new()]);
        for _ in 0..5 {
            last = last.iter().flat_map(|p| tokens.iter().map(move |t| [&p[..], t].concat())).collect();
            paths.extend(last.iter().cloned());
        }
        for p in &paths {
            let rel = Path::new(std::ffi::OsStr::from_bytes(p));
            let by_components = rel.components().next().is_some_and(|c| c.as_os_str() == SCR_DIR);
            assert_eq!(in_scr_dir(rel), by_components, "{}", rel.display());
        }
        assert_eq!(paths.len(), (0..=5).map(|n| 5usize.pow(n)).sum::<usize>());
    }

    #[test]
    fn prefix_containment() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = Prefix::new(dir.path());
        assert_eq!(prefix.relative(&dir.path().join("ckpt.1/r0")), Some(PathBuf::from("ckpt.1/r0")));
        assert_eq!(prefix.relative(&dir.path().join("ckpt.1/../../x")), None);
        assert_eq!(prefix.relative(dir.path()), None);
        assert_eq!(prefix.relative(Path::new("/etc/passwd")), None);
    }

    #[test]
    fn symlinked_prefix_matches_both_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let prefix = Prefix::new(&link);
        assert_eq!(prefix.relative(&real.join("f")), Some(PathBuf::from("f")));
        assert_eq!(prefix.relative(&link.join("f")), Some(PathBuf::from("f")));
        let prefix = Prefix::new(&real);
        assert_eq!(prefix.relative(&link.join("f")), Some(PathBuf::from("f")));
    }

    #[test]
    fn a_write_makes_its_directories_once_and_refuses_a_link_among_them() {
        let dir = tempfile::tempdir().unwrap();
        let (prefix, outside) = (dir.path().join("prefix"), dir.path().join("outside"));
        fs::create_dir_all(&prefix).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let mut ready = BTreeSet::new();
        // missing directories are made, and remembered with the ones found
        let p = dirs_for_write(&prefix, Path::new("ckpt.1/sub/r0"), &mut ready).unwrap();
        assert_eq!(p, prefix.join("ckpt.1/sub/r0"));
        assert!(prefix.join("ckpt.1/sub").is_dir());
        assert_eq!(ready, BTreeSet::from([prefix.join("ckpt.1"), prefix.join("ckpt.1/sub")]));
        // a file directly in the prefix needs no directory
        assert_eq!(dirs_for_write(&prefix, Path::new("r0"), &mut ready).unwrap(), prefix.join("r0"));
        // a directory replaced by a link to another place is refused, named as `below` names it
        std::os::unix::fs::symlink(&outside, prefix.join("ckpt.2")).unwrap();
        let e = dirs_for_write(&prefix, Path::new("ckpt.2/r0"), &mut BTreeSet::new()).unwrap_err().to_string();
        let want = format!("{} is a symbolic link below {}", prefix.join("ckpt.2").display(), prefix.display());
        assert!(e.contains(&want), "{e}");
        assert!(fs::read_dir(&outside).unwrap().next().is_none(), "nothing made through the link");
        // a file where a directory belongs
        fs::write(prefix.join("ckpt.3"), b"x").unwrap();
        let e = dirs_for_write(&prefix, Path::new("ckpt.3/r0"), &mut BTreeSet::new()).unwrap_err().to_string();
        assert!(e.contains("create directory") && e.contains("ckpt.3"), "{e}");
        // the final name is not looked at: a link there is replaced by the rename
        std::os::unix::fs::symlink(outside.join("f"), prefix.join("ckpt.1/r9")).unwrap();
        assert_eq!(dirs_for_write(&prefix, Path::new("ckpt.1/r9"), &mut ready).unwrap(), prefix.join("ckpt.1/r9"));
    }

    #[test]
    fn links_below_the_prefix_are_refused_the_prefix_itself_may_be_one() {
        let dir = tempfile::tempdir().unwrap();
        let (real, outside) = (dir.path().join("real"), dir.path().join("outside"));
        fs::create_dir_all(real.join("ckpt.1")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let prefix = dir.path().join("prefix");
        std::os::unix::fs::symlink(&real, &prefix).unwrap();
        assert_eq!(below(&prefix, Path::new("ckpt.1/r0")).unwrap(), prefix.join("ckpt.1/r0"));
        assert_eq!(below(&prefix, Path::new("new/dir/r0")).unwrap(), prefix.join("new/dir/r0"));
        std::os::unix::fs::symlink(&outside, real.join("ckpt.2")).unwrap();
        let e = below(&prefix, Path::new("ckpt.2/r0")).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "{}: {} is a symbolic link",
                prefix.join("ckpt.2/r0").display(),
                prefix.join("ckpt.2").display()
            )),
            "{e}"
        );
        std::os::unix::fs::symlink(outside.join("f"), real.join("ckpt.1/r1")).unwrap();
        let e = below(&prefix, Path::new("ckpt.1/r1")).unwrap_err().to_string();
        let want = format!("ckpt.1/r1: is a symbolic link below {}; SCR does not follow it", prefix.display());
        assert!(e.ends_with(&want), "{e}");
        assert_eq!(link_below(&prefix, Path::new("ckpt.2/a/b")), Some(prefix.join("ckpt.2")));
    }

    #[test]
    fn private_dirs_are_0700_and_symlinks_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a/b");
        ensure_private_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(ensure_private_dir(&link).is_err());
    }

    #[test]
    fn sizes_are_checked_against_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        fs::write(&f, b"12345").unwrap();
        assert_eq!(size_problem(&f, 5), None);
        assert_eq!(size_problem(&f, 6).as_deref(), Some("size is 5 bytes, 6 were recorded"));
        assert!(size_problem(&dir.path().join("missing"), 0).unwrap().contains("No such file"));
    }

    #[test]
    fn files_move_within_and_across_file_systems() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"bytes").unwrap();
        move_file(&a, &a).unwrap();
        move_file(&a, &b).unwrap();
        assert!(!a.exists());
        assert_eq!(fs::read(&b).unwrap(), b"bytes");
        assert_eq!(move_file(&a, &b).unwrap_err().kind(), io::ErrorKind::NotFound);
        // /dev/shm is another file system where it exists: a copy, and the source goes
        let other = tempfile::tempdir_in("/dev/shm")
            .ok()
            .filter(|o| fs::metadata(o.path()).map(|m| m.dev()).ok() != fs::metadata(dir.path()).map(|m| m.dev()).ok());
        if let Some(other) = other {
            let c = other.path().join("c");
            move_file(&b, &c).unwrap();
            assert!(!b.exists());
            assert_eq!(fs::read(&c).unwrap(), b"bytes");
        }
    }

    #[test]
    fn prune_stops_at_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("x/y/z");
        fs::create_dir_all(&deep).unwrap();
        prune_empty_dirs(&deep, dir.path());
        assert!(!dir.path().join("x").exists());
        assert!(dir.path().exists());
    }
}
