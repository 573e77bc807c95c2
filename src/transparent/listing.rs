//! Directory listings that show the files SCR holds, each once, in its prefix directory.
//!
//! A directory stream below the prefix returns the prefix's own entries first, then the
//! held files (and the directories leading to deeper ones) the prefix does not have
//! ([`Merge`]). Extra entries carry the cached file's inode number and type, read in one pass
//! over each cache directory involved (no `stat` per file), so a listing of a directory with
//! many cached files costs about two plain listings. [`walk`] is the tree walk `nftw` makes,
//! over the same merged listings, with the callback's answers applied ([`Walk::answer`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::prefix::{reserved, PATH_MAX};
use super::session::Session;
use super::state::{routing, table, table_now};
use super::table::{Seen, Table};
use crate::reentry::Inside;

/// An entry a listing adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the directory (no `/`).
    pub name: Vec<u8>,
    /// The inode number a `readdir` reports (of the cached bytes, or of the cache directory
    /// standing for a directory that exists only in cache).
    pub ino: u64,
    /// `DT_REG` or `DT_DIR`.
    pub dtype: u8,
}

/// The extra entries of one directory stream and how far it got.
pub struct Merge {
    /// Sorted by name, each name once (shared by the streams of one directory).
    extra: Arc<[Entry]>,
    shown: Vec<bool>,
    next: usize,
    /// The real entries are exhausted (the real stream is not read again until a rewind).
    ended: bool,
    /// The entry an extra name is returned in (valid until the stream's next entry).
    ent: libc::dirent64,
}

/// Sort entries by name, each name once.
fn sorted(mut extra: Vec<Entry>) -> Arc<[Entry]> {
    extra.sort_by(|a, b| a.name.cmp(&b.name));
    extra.dedup_by(|a, b| a.name == b.name);
    extra.into()
}

impl Merge {
    fn new(extra: Arc<[Entry]>) -> Merge {
        let shown = vec![false; extra.len()];
        let ent = libc::dirent64 { d_ino: 0, d_off: 0, d_reclen: 0, d_type: 0, d_name: [0; 256] };
        Merge { extra, shown, next: 0, ended: false, ent }
    }

    /// The stream returned a real entry `name`: it is not repeated.
    pub fn real(&mut self, name: &[u8]) {
        if let Ok(i) = self.extra.binary_search_by(|e| e.name.as_slice().cmp(name)) {
            self.shown[i] = true;
        }
    }

    /// The next extra entry, once the real entries are exhausted.
    pub fn next_extra(&mut self) -> Option<&Entry> {
        self.next_index().map(|i| &self.extra[i])
    }

    fn next_index(&mut self) -> Option<usize> {
        while self.next < self.extra.len() {
            let i = self.next;
            self.next += 1;
            if !self.shown[i] {
                self.shown[i] = true;
                return Some(i);
            }
        }
        None
    }

    /// `rewinddir`.
    pub fn rewind(&mut self) {
        self.shown.fill(false);
        self.next = 0;
        self.ended = false;
    }
}

/// The merge for a directory stream opened on `path` (relative to `dirfd`), if SCR holds
/// files below that directory.
pub fn listing(dirfd: i32, path: &CStr) -> Option<Merge> {
    let s = routing()?;
    let rel = s.resolve(dirfd, path)?;
    extras_of(&rel)
}

/// As [`listing`], for `fdopendir(fd)`. The descriptor's path is read (a `readlink`) only
/// when SCR holds some file.
pub fn listing_fd(fd: i32) -> Option<Merge> {
    let s = routing()?;
    if table().holds_nothing() {
        return None;
    }
    let mut buf = [0u8; PATH_MAX];
    let n = (s.base)(fd, &mut buf)?;
    buf[n] = 0;
    let path = CStr::from_bytes_until_nul(&buf).ok()?;
    let rel = s.resolve(libc::AT_FDCWD, path)?;
    extras_of(&rel)
}

/// Open directory streams with a merge, by handle (the front end's `DIR*`).
static STREAMS: Mutex<Option<HashMap<usize, Box<Merge>>>> = Mutex::new(None);
/// How many: until there is one, a stream costs one atomic load per entry.
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn streams() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Box<Merge>>>> {
    STREAMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stream `key` (just opened) lists with `merge`.
pub fn stream_opened(key: usize, merge: Merge) {
    streams().get_or_insert_with(HashMap::new).insert(key, Box::new(merge));
    OPEN.fetch_add(1, Ordering::SeqCst);
}

/// Before the real `readdir` of stream `key`: once its real entries are exhausted, the
/// answer (the next extra entry, or NULL at the end) without asking the real stream again.
pub fn stream_ended(key: usize) -> Option<*mut libc::dirent64> {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut g = streams();
    let m = g.as_mut()?.get_mut(&key)?;
    m.ended.then(|| m.fill_next())
}

/// Stream `key` returned the real entry `name` (`None`: the real entries are exhausted). The
/// entry to return instead of the end, if any: `readdir`'s answer then.
pub fn stream_next(key: usize, name: Option<&CStr>) -> Option<*mut libc::dirent64> {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut g = streams();
    let m = g.as_mut()?.get_mut(&key)?;
    match name {
        Some(n) => {
            m.real(n.to_bytes());
            None
        }
        None => {
            m.ended = true;
            Some(m.fill_next())
        }
    }
}

impl Merge {
    /// The next extra entry in `ent`, or NULL.
    fn fill_next(&mut self) -> *mut libc::dirent64 {
        let Some(i) = self.next_index() else { return std::ptr::null_mut() };
        let e = &self.extra[i];
        let n = e.name.len().min(255);
        self.ent.d_ino = e.ino;
        self.ent.d_type = e.dtype;
        self.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
        for (d, b) in self.ent.d_name.iter_mut().zip(e.name[..n].iter().chain([&0])) {
            *d = *b as std::ffi::c_char;
        }
        &mut self.ent as *mut libc::dirent64
    }
}

/// `rewinddir` (`close`: `closedir`) of stream `key`.
pub fn stream_rewound(key: usize, close: bool) {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut g = streams();
    let Some(map) = g.as_mut() else { return };
    if close {
        if map.remove(&key).is_some() {
            OPEN.fetch_sub(1, Ordering::SeqCst);
        }
    } else if let Some(m) = map.get_mut(&key) {
        m.rewind();
    }
}

/// Extra entries by directory, valid for one generation of the table: listing a directory
/// again while nothing changed costs no look at the cache.
type ExtrasCache = Option<(u64, HashMap<PathBuf, Arc<[Entry]>>)>;
static EXTRAS: Mutex<ExtrasCache> = Mutex::new(None);

fn extras_of(rel: &Path) -> Option<Merge> {
    let _inside = Inside::enter();
    let t = table_now();
    if !t.any_seen_below(rel) {
        return None;
    }
    let mut cache = EXTRAS.lock().unwrap_or_else(|e| e.into_inner());
    let (generation, map) = cache.get_or_insert_with(|| (t.generation(), HashMap::new()));
    if *generation != t.generation() {
        *generation = t.generation();
        map.clear();
    }
    let extra = map.entry(rel.to_path_buf()).or_insert_with(|| sorted(extras(&t, rel))).clone();
    Some(Merge::new(extra))
}

/// The entries of directory `dir` (relative to the prefix) that SCR's files make.
pub(super) fn extras(t: &Table, dir: &Path) -> Vec<Entry> {
    let skip = match dir.as_os_str().len() {
        0 => 0,
        n => n + 1,
    };
    // files directly in `dir`, by the cache directory that holds their bytes (byte slices:
    // paths in the table are normalised, and parsing components costs more than the I/O)
    type Names<'a> = Vec<(&'a [u8], &'a [u8])>; // (name in cache, name in `dir`)
    let mut by_cache_dir: BTreeMap<&[u8], Names> = BTreeMap::new();
    // directories leading to deeper files: name -> bytes of one file below (none: another
    // node's), levels below
    let mut dirs: BTreeMap<&[u8], (Option<&Path>, usize)> = BTreeMap::new();
    let mut out = Vec::new();
    // this rank's files, then other ranks' ([`super::peers`]) with their bytes here or not
    let own = t.visible_below(dir).map(|(rel, cache)| (rel, Some(cache)));
    let peers = t.peers_below(dir).map(|(rel, p)| (rel, p.local.as_deref()));
    for (rel, cache) in own.chain(peers) {
        let rest = &rel.as_os_str().as_bytes()[skip..];
        let mut parts = rest.split(|b| *b == b'/');
        let first = parts.next().unwrap_or_default();
        let depth = parts.count();
        match cache {
            Some(cache) if depth == 0 => {
                let c = cache.as_os_str().as_bytes();
                let cut = c.iter().rposition(|b| *b == b'/').unwrap_or(0);
                by_cache_dir.entry(&c[..cut]).or_default().push((&c[cut + 1..], first));
            }
            None if depth == 0 => {
                out.push(Entry { name: first.to_vec(), ino: super::peers::remote_ino(rel), dtype: libc::DT_REG });
            }
            _ => {
                let e = dirs.entry(first).or_insert((cache, depth));
                if e.0.is_none() && cache.is_some() {
                    *e = (cache, depth);
                }
            }
        }
    }
    for (cdir, mut wanted) in by_cache_dir {
        wanted.sort_unstable();
        let Ok(rd) = std::fs::read_dir(OsStr::from_bytes(cdir)) else { continue };
        for e in rd.flatten() {
            let n = e.file_name();
            if let Ok(i) = wanted.binary_search_by(|w| w.0.cmp(n.as_bytes())) {
                out.push(Entry { name: wanted[i].1.to_vec(), ino: e.ino(), dtype: libc::DT_REG });
            }
        }
    }
    for (name, (cache, depth)) in dirs {
        // the cache directory standing for it: `depth` levels above a file below it
        let ino = match cache {
            Some(c) => c.ancestors().nth(depth).and_then(|d| std::fs::metadata(d).ok()).map_or(1, |m| m.ino()),
            None => super::peers::remote_ino(&dir.join(OsStr::from_bytes(name))),
        };
        out.push(Entry { name: name.to_vec(), ino, dtype: libc::DT_DIR });
    }
    out
}

/// `nftw`'s flags and type flags (`<ftw.h>`).
pub mod ftw {
    /// `FTW_PHYS`: do not follow symbolic links.
    pub const PHYS: i32 = 1;
    /// `FTW_MOUNT`: stay on the file system of the root.
    pub const MOUNT: i32 = 2;
    /// `FTW_CHDIR`: change to each directory before its entries are reported.
    pub const CHDIR: i32 = 4;
    /// `FTW_DEPTH`: report a directory after its entries.
    pub const DEPTH: i32 = 8;
    /// `FTW_ACTIONRETVAL`: the callback's result steers the walk ([`STOP`], [`SKIP_SUBTREE`], [`SKIP_SIBLINGS`]).
    pub const ACTIONRETVAL: i32 = 16;
    /// `FTW_F`: a file.
    pub const F: i32 = 0;
    /// `FTW_D`: a directory, reported before its entries.
    pub const D: i32 = 1;
    /// `FTW_DNR`: a directory that cannot be read.
    pub const DNR: i32 = 2;
    /// `FTW_NS`: `stat` failed.
    pub const NS: i32 = 3;
    /// `FTW_SL`: a symbolic link.
    pub const SL: i32 = 4;
    /// `FTW_DP`: a directory, reported after its entries ([`DEPTH`]).
    pub const DP: i32 = 5;
    /// `FTW_SLN`: a symbolic link to nothing.
    pub const SLN: i32 = 6;
    /// `FTW_STOP`: end the walk.
    pub const STOP: i32 = 1;
    /// `FTW_SKIP_SUBTREE`: skip this directory's entries.
    pub const SKIP_SUBTREE: i32 = 2;
    /// `FTW_SKIP_SIBLINGS`: skip the rest of this directory level.
    pub const SKIP_SIBLINGS: i32 = 3;
}

/// One callback of a walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// As the application names it (the walk's root joined with the names below it).
    pub path: PathBuf,
    /// What to `stat` for it (the cached bytes of a held file).
    pub stat: PathBuf,
    /// `FTW_F`, `FTW_D`, ...
    pub flag: i32,
    /// Its depth below the walk's root (the root is 0).
    pub level: i32,
    /// Offset of the last component in `path`.
    pub base: usize,
    /// Where the walk continues when the callback skips this directory's entries.
    skip_subtree: usize,
    /// Where it continues when the callback skips the rest of this directory level.
    skip_siblings: usize,
}

impl Step {
    /// Whether the callback gets `lstat`'s answer (`FTW_PHYS`, or a link it reports).
    pub fn lstat(&self, flags: i32) -> bool {
        flags & ftw::PHYS != 0 || self.flag == ftw::SL || self.flag == ftw::SLN
    }
}

/// The walk `nftw` makes, as a cursor over its steps.
#[derive(Debug)]
pub struct Walk {
    steps: Vec<Step>,
    next: usize,
    flags: i32,
}

impl Walk {
    /// The next step.
    pub fn step(&mut self) -> Option<&Step> {
        let i = self.next;
        self.next += 1;
        self.steps.get(i)
    }

    /// The callback answered `r` for the last step: `Some(r)` ends the walk with `r`.
    pub fn answer(&mut self, r: i32) -> Option<i32> {
        let Some(st) = self.next.checked_sub(1).and_then(|i| self.steps.get(i)) else { return Some(0) };
        if self.flags & ftw::ACTIONRETVAL == 0 {
            return (r != 0).then_some(r);
        }
        match r {
            ftw::STOP => return Some(r),
            ftw::SKIP_SUBTREE if st.flag == ftw::D => self.next = st.skip_subtree,
            ftw::SKIP_SIBLINGS => self.next = if st.skip_siblings == 0 { self.steps.len() } else { st.skip_siblings },
            _ => {}
        }
        None
    }
}

/// The walk `nftw(root, flags)` makes, with SCR's files in their directories; `None` when
/// SCR holds nothing below `root` (the real `nftw` walks then). `Err(errno)`: `root` itself
/// cannot be examined.
pub fn walk(root: &CStr, flags: i32) -> Option<Result<Walk, i32>> {
    let s = routing()?;
    let bytes = root.to_bytes();
    let abs = s.absolute(libc::AT_FDCWD, root)?;
    let _inside = Inside::enter();
    let t = table_now();
    // held files below the root (the root below the prefix, or the prefix below the root)
    let concerned = match s.prefix.relative(abs.as_os_str().as_bytes(), None) {
        Some(rel) => t.any_seen_below(&rel),
        None => s.prefix.path().starts_with(&abs) && t.any_seen_below(Path::new("")),
    };
    if !concerned || !s.is_owner() {
        return None;
    }
    let mut w = Walker { s, t: &t, flags, steps: Vec::new(), seen: BTreeSet::new(), dev: None };
    let app_root = PathBuf::from(OsStr::from_bytes(bytes));
    Some(w.visit(&app_root, &abs, 0, true).map(|_| Walk { steps: w.steps, next: 0, flags }))
}

struct Walker<'a> {
    s: &'a Session,
    t: &'a Table,
    flags: i32,
    steps: Vec<Step>,
    /// Directories entered (device, inode), against symbolic link cycles.
    seen: BTreeSet<(u64, u64)>,
    dev: Option<u64>,
}

impl Walker<'_> {
    /// The held bytes standing for absolute path `abs`, if any.
    fn held(&self, abs: &Path) -> Option<PathBuf> {
        let rel = self.s.prefix.relative(abs.as_os_str().as_bytes(), None)?;
        match self.t.seen(&rel)? {
            Seen::Held(h) => Some(h.cache().to_path_buf()),
            Seen::Peer(p) => super::peers::stat_path(self.s, &rel, p),
        }
    }

    fn push(&mut self, path: &Path, stat: &Path, flag: i32, level: i32) -> usize {
        let base = path.as_os_str().len() - path.file_name().map_or(0, |n| n.len());
        self.steps.push(Step {
            path: path.to_path_buf(),
            stat: stat.to_path_buf(),
            flag,
            level,
            base,
            skip_subtree: 0,
            skip_siblings: 0,
        });
        self.steps.len() - 1
    }

    /// Visit `path` (the application's spelling; `abs` normalised). `Err` only for the root.
    fn visit(&mut self, path: &Path, abs: &Path, level: i32, root: bool) -> Result<(), i32> {
        let stat = self.held(abs).unwrap_or_else(|| abs.to_path_buf());
        let md = if self.flags & ftw::PHYS != 0 { std::fs::symlink_metadata(&stat) } else { std::fs::metadata(&stat) };
        let md = match md {
            Ok(m) => m,
            Err(e) => {
                if root {
                    return Err(e.raw_os_error().unwrap_or(libc::ENOENT));
                }
                let flag = match std::fs::symlink_metadata(&stat) {
                    Ok(l) if l.file_type().is_symlink() => ftw::SLN,
                    _ => ftw::NS,
                };
                self.push(path, &stat, flag, level);
                return Ok(());
            }
        };
        if root {
            self.dev = Some(md.dev());
        } else if self.flags & ftw::MOUNT != 0 && Some(md.dev()) != self.dev {
            return Ok(());
        }
        if md.file_type().is_symlink() {
            self.push(path, &stat, ftw::SL, level);
            return Ok(());
        }
        if !md.is_dir() {
            self.push(path, &stat, ftw::F, level);
            return Ok(());
        }
        if !self.seen.insert((md.dev(), md.ino())) {
            return Ok(());
        }
        let names = match self.entries(abs) {
            Some(n) => n,
            None => {
                self.push(path, &stat, ftw::DNR, level);
                return Ok(());
            }
        };
        let depth_first = self.flags & ftw::DEPTH != 0;
        let pre = (!depth_first).then(|| self.push(path, &stat, ftw::D, level));
        let first_child = self.steps.len();
        for name in names {
            self.visit(&path.join(&name), &abs.join(&name), level + 1, false)?;
        }
        let post = depth_first.then(|| self.push(path, &stat, ftw::DP, level));
        let end = self.steps.len();
        if let Some(i) = pre {
            self.steps[i].skip_subtree = end;
        }
        // skipping the rest of this level continues at this directory's own post-order step
        let siblings_end = post.unwrap_or(end);
        for st in &mut self.steps[first_child..siblings_end] {
            if st.skip_siblings == 0 {
                st.skip_siblings = siblings_end;
            }
        }
        Ok(())
    }

    /// The names in directory `abs`: the real ones, then SCR's. `None`: unreadable.
    fn entries(&self, abs: &Path) -> Option<Vec<OsString>> {
        let mut names: Vec<OsString> = Vec::new();
        match std::fs::read_dir(abs) {
            Ok(rd) => names.extend(rd.flatten().map(|e| e.file_name())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        if let Some(rel) = self.s.prefix.relative(abs.as_os_str().as_bytes(), None).filter(|r| !reserved(r)) {
            let mut m = Merge::new(sorted(extras(self.t, &rel)));
            for n in &names {
                m.real(n.as_bytes());
            }
            while let Some(e) = m.next_extra() {
                names.push(OsString::from(OsStr::from_bytes(&e.name)));
            }
        }
        Some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transparent::table::Committed;

    #[test]
    fn a_merged_stream_shows_each_name_once_after_the_real_ones() {
        let e = |n: &str, t| Entry { name: n.as_bytes().to_vec(), ino: 5, dtype: t };
        let mut m =
            Merge::new(sorted(vec![e("b", libc::DT_REG), e("a", libc::DT_REG), e("sub", libc::DT_DIR), e("a", 8)]));
        m.real(b".");
        m.real(b"b");
        let names: Vec<String> =
            std::iter::from_fn(|| m.next_extra().map(|e| String::from_utf8_lossy(&e.name).into_owned())).collect();
        assert_eq!(names, ["a", "sub"]);
        assert!(m.next_extra().is_none());
        m.rewind();
        assert_eq!(std::iter::from_fn(|| m.next_extra().map(|_| ())).count(), 3);
    }

    fn step(path: &str, flag: i32, skip_subtree: usize, skip_siblings: usize) -> Step {
        Step { path: path.into(), stat: path.into(), flag, level: 0, base: 0, skip_subtree, skip_siblings }
    }

    fn answers(flags: i32, reply: impl Fn(&str) -> i32) -> (Vec<String>, i32) {
        // a/ { a/x, a/sub/ { a/sub/y }, a/z }, b
        let steps = vec![
            step("a", ftw::D, 5, 6),
            step("a/x", ftw::F, 0, 5),
            step("a/sub", ftw::D, 4, 5),
            step("a/sub/y", ftw::F, 0, 4),
            step("a/z", ftw::F, 0, 5),
            step("b", ftw::F, 0, 6),
        ];
        let mut w = Walk { steps, next: 0, flags };
        let mut seen = Vec::new();
        while let Some(st) = w.step() {
            let p = st.path.display().to_string();
            let r = reply(&p);
            seen.push(p);
            if let Some(rc) = w.answer(r) {
                return (seen, rc);
            }
        }
        (seen, 0)
    }

    #[test]
    fn a_walk_follows_the_callbacks_answers() {
        let (seen, rc) = answers(0, |_| 0);
        assert_eq!((seen.len(), rc), (6, 0));
        let (seen, rc) = answers(0, |p| if p == "a/sub" { 7 } else { 0 });
        assert_eq!((seen, rc), (vec!["a".into(), "a/x".into(), "a/sub".into()], 7));
        let (seen, _) = answers(ftw::ACTIONRETVAL, |p| if p == "a/sub" { ftw::SKIP_SUBTREE } else { 0 });
        assert_eq!(seen, ["a", "a/x", "a/sub", "a/z", "b"]);
        let (seen, _) = answers(ftw::ACTIONRETVAL, |p| if p == "a/x" { ftw::SKIP_SIBLINGS } else { 0 });
        assert_eq!(seen, ["a", "a/x", "b"]);
        let (seen, rc) = answers(ftw::ACTIONRETVAL, |p| if p == "a/sub/y" { ftw::STOP } else { 0 });
        assert_eq!((seen.len(), rc), (4, ftw::STOP));
    }

    #[test]
    fn extras_carry_the_cached_inode_and_stand_in_for_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path();
        std::fs::create_dir_all(c.join("ds/ckpt.2/sub")).unwrap();
        for f in ["ds/ckpt.2/rank_0", "ds/ckpt.2/rank_1", "ds/ckpt.2/sub/x", "ds/ckpt.2/other"] {
            std::fs::write(c.join(f), b"x").unwrap();
        }
        let mut t = Table::default();
        let files = ["ckpt.2/rank_0", "ckpt.2/rank_1", "ckpt.2/sub/x"]
            .map(|r| (PathBuf::from(r), Committed { cache: c.join("ds").join(r), dataset: 1, name: "ckpt.2".into() }));
        t.set_committed(files);
        t.remove(Path::new("ckpt.2/rank_1"));
        let mut got = extras(&t, Path::new("ckpt.2"));
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<(&[u8], u8)> = got.iter().map(|e| (e.name.as_slice(), e.dtype)).collect();
        assert_eq!(names, [(&b"rank_0"[..], libc::DT_REG), (&b"sub"[..], libc::DT_DIR)]);
        assert_eq!(got[0].ino, std::fs::metadata(c.join("ds/ckpt.2/rank_0")).unwrap().ino());
        assert_eq!(got[1].ino, std::fs::metadata(c.join("ds/ckpt.2/sub")).unwrap().ino());
        assert!(extras(&t, Path::new("ckpt.3")).is_empty());
    }
}
