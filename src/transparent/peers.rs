//! Other ranks' files of complete cached checkpoints, as this rank sees them: a plain file
//! system shows every process every rank's files, so transparent mode lists, stats and opens
//! them too. The runtime says what they are ([`crate::runtime::peer_files`]: each rank's
//! names, sizes, mode bits and modification times, agreed when their dataset completed or
//! at start) and where their bytes are:
//!
//! * a rank on this node keeps them in this node's cache: they are read and stat-ed there;
//! * a rank on another node keeps them in its node's cache, which this node cannot read. Once
//!   the dataset is in the prefix (flushed) the prefix copy is what the application gets; while
//!   a background flush copies it, an open waits for the copy ([`WAIT`] at most); a dataset
//!   that is only in cache cannot be read here (`EREMOTE`, said once with the remedy), and its
//!   files are stat-ed through a *stand-in*: an empty (sparse) file of the same size, mode
//!   bits and modification time in this rank's pending area, made when first asked for.
//!
//! The rank's own files (pending or committed, or removed by it) hide another rank's file of
//! the same name. Removing another rank's file hides it at once, and its rank removes it from
//! its checkpoint at the next sync point (and from the prefix); opening it for writing, or
//! renaming a file over it, makes it this rank's (its bytes copied first unless truncated),
//! its rank dropping it likewise, and the new version is a checkpoint of its own. Renaming
//! another rank's file away is not followed (it acts on the prefix, as without SCR). Stand-ins
//! go when their file does ([`prune`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::session::Session;
use crate::runtime::{self, InPrefix, PeerFile};

/// The longest an open waits for a background flush to bring another node's file to the
/// prefix.
pub const WAIT: Duration = Duration::from_secs(60);

/// Another rank's file of a complete cached dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub rank: u32,
    pub dataset: u64,
    pub size: u64,
    /// `st_mode`.
    pub mode: u32,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Its bytes, when its rank runs on this node.
    pub local: Option<PathBuf>,
}

/// Other ranks' files by path below the prefix.
#[derive(Debug, Default)]
pub struct PeerFiles {
    files: BTreeMap<PathBuf, Peer>,
    /// Files this rank removed (by the dataset they were of): hidden until their rank's next
    /// version of the dataset drops them.
    hidden: BTreeMap<PathBuf, u64>,
}

impl PeerFiles {
    /// Replace the files with the runtime's list (oldest dataset first: a later entry for a
    /// path is the newer file). Whether anything changed.
    pub fn set(&mut self, list: Vec<PeerFile>) -> bool {
        let mut files = BTreeMap::new();
        for f in list {
            let p = Peer {
                rank: f.rank,
                dataset: f.dataset,
                size: f.listed.size,
                mode: f.listed.mode,
                mtime: f.listed.mtime,
                local: f.local,
            };
            files.insert(f.listed.rel, p);
        }
        // a removed file stays hidden while the runtime still lists that version of it
        self.hidden.retain(|rel, d| files.get(rel).is_some_and(|p: &Peer| p.dataset == *d));
        for rel in self.hidden.keys() {
            files.remove(rel);
        }
        let changed = files != self.files;
        self.files = files;
        changed
    }

    /// This rank removed `rel`.
    pub fn hide(&mut self, rel: &Path) {
        if let Some(p) = self.files.remove(rel) {
            self.hidden.insert(rel.to_path_buf(), p.dataset);
        }
    }

    pub fn get(&self, rel: &Path) -> Option<&Peer> {
        self.files.get(rel)
    }

    /// The files strictly below `dir` (`""`: all), in order.
    pub fn below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = (&'a Path, &'a Peer)> + 'a {
        let start = (std::ops::Bound::Excluded(dir), std::ops::Bound::Unbounded);
        self.files
            .range::<Path, _>(start)
            .skip_while(move |(p, _)| *p == dir)
            .take_while(move |(p, _)| super::prefix::under(p, dir))
            .map(|(p, f)| (p.as_path(), f))
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The inode number a listing shows for another node's file (its bytes are not here).
pub fn remote_ino(rel: &Path) -> u64 {
    crate::identity::fnv1a(rel.as_os_str().as_encoded_bytes()) | 1
}

/// The stand-ins this process made: path -> the dataset of the file it stands for.
static STANDING: std::sync::Mutex<BTreeMap<PathBuf, u64>> = std::sync::Mutex::new(BTreeMap::new());

/// Where another node's file `rel` is stat-ed while its dataset is only in cache: its
/// stand-in in `<pending area>/peers.<rank>/`, made (or refreshed) to match `p` (permission
/// bits as a flush's copy keeps them: setuid, setgid and sticky left out). A stand-in goes
/// when the file it stands for does ([`prune`]); the next run's start clears what a killed
/// run left.
pub fn stand_in(pending_root: &Path, rank: u32, rel: &Path, p: &Peer) -> std::io::Result<PathBuf> {
    let path = make_stand_in(pending_root, rank, rel, p)?;
    STANDING.lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone(), p.dataset);
    Ok(path)
}

/// The directory of rank `rank`'s stand-ins in the pending area `pending_root`.
fn stand_ins(pending_root: &Path, rank: u32) -> PathBuf {
    pending_root.join(format!("peers.{rank}"))
}

/// Remove rank `rank`'s stand-ins of files `files` no longer holds in the same dataset (after
/// the table's other-rank files changed).
pub fn prune(files: &PeerFiles, pending_root: &Path, rank: u32) {
    let dir = stand_ins(pending_root, rank);
    let mut standing = STANDING.lock().unwrap_or_else(|e| e.into_inner());
    standing.retain(|path, dataset| {
        let rel = path.strip_prefix(&dir).ok();
        let kept = rel.and_then(|rel| files.get(rel).map(|p| p.dataset)) == Some(*dataset);
        if !kept {
            let _ = std::fs::remove_file(path);
        }
        kept
    });
}

fn make_stand_in(pending_root: &Path, rank: u32, rel: &Path, p: &Peer) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = stand_ins(pending_root, rank).join(rel);
    let mode = p.mode & 0o777;
    if let Ok(m) = std::fs::symlink_metadata(&path) {
        if m.len() == p.size && m.mode() & 0o7777 == mode && (m.mtime(), m.mtime_nsec() as u32) == p.mtime {
            return Ok(path);
        }
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    // made aside and renamed into place: another thread never sees it half made
    let tmp = path.with_extension(format!("scr-tmp.{}", std::process::id()));
    let f = std::fs::File::create(&tmp)?;
    f.set_len(p.size)?;
    let when = std::time::UNIX_EPOCH + Duration::new(p.mtime.0.max(0) as u64, p.mtime.1);
    f.set_times(std::fs::FileTimes::new().set_modified(when).set_accessed(when))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Whether the prefix holds `rel`'s copy as described by `p`: its size and modification time
/// (to the second where the prefix's file system keeps no nanoseconds).
pub fn prefix_copy(abs: &Path, p: &Peer) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(abs).is_ok_and(|m| {
        let ns = m.mtime_nsec() as u32;
        m.is_file() && m.len() == p.size && m.mtime() == p.mtime.0 && (ns == p.mtime.1 || ns == 0)
    })
}

/// What a stat of another rank's file `rel` looks at: its bytes on this node, its stand-in
/// while its dataset is only in another node's cache, or (`None`) the prefix, which holds its
/// copy once flushed.
pub fn stat_path(s: &Session, rel: &Path, p: &Peer) -> Option<PathBuf> {
    if let Some(local) = &p.local {
        return Some(local.clone());
    }
    if runtime::in_prefix(p.dataset) == InPrefix::Yes || prefix_copy(&s.prefix.join(rel), p) {
        return None;
    }
    let root = s.pending.parent()?;
    stand_in(root, s.rank, rel, p).ok()
}

/// Datasets whose background flush an open waited for in vain ([`WAIT`]).
static GAVE_UP: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// How an open for reading of another node's file `rel` (`abs` in the prefix) goes: `Ok`:
/// the prefix copy is there (perhaps after waiting for a background flush), open it; `Err`:
/// the errno (`EREMOTE`: its bytes are only in the other node's cache; said once).
pub fn open_remote(rel: &Path, abs: &Path, p: &Peer) -> Result<(), i32> {
    match runtime::in_prefix(p.dataset) {
        InPrefix::Yes => return Ok(()),
        InPrefix::Coming if !GAVE_UP.lock().unwrap_or_else(|e| e.into_inner()).contains(&p.dataset) => {
            let until = std::time::Instant::now() + WAIT;
            let mut pause = Duration::from_millis(2);
            while std::time::Instant::now() < until {
                if prefix_copy(abs, p) {
                    return Ok(());
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            // (later opens of its files do not wait again)
            GAVE_UP.lock().unwrap_or_else(|e| e.into_inner()).push(p.dataset);
        }
        InPrefix::Coming => {}
        InPrefix::No if prefix_copy(abs, p) => return Ok(()),
        InPrefix::No => {}
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::scr_warn!(
            "transparent mode: {} is rank {}'s file of a checkpoint held in another node's cache: it cannot be read from this node until the checkpoint is flushed to the prefix (SCR_FLUSH; a restart reads it with any number of processes). The open fails with EREMOTE (said once)",
            rel.display(),
            p.rank
        );
    }
    Err(libc::EREMOTE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::peers_test_file as file;

    #[test]
    fn a_removed_file_stays_hidden_until_its_rank_writes_it_again() {
        let mut f = PeerFiles::default();
        assert!(f.set(vec![file("c/a", 1, 7), file("c/b", 1, 7)]));
        assert!(!f.set(vec![file("c/a", 1, 7), file("c/b", 1, 7)]), "nothing changed");
        f.hide(Path::new("c/a"));
        assert!(f.get(Path::new("c/a")).is_none());
        // the runtime still lists that version until the rank's next sync point
        f.set(vec![file("c/a", 1, 7), file("c/b", 1, 7)]);
        assert!(f.get(Path::new("c/a")).is_none());
        let below: Vec<_> = f.below(Path::new("c")).map(|(p, _)| p.to_path_buf()).collect();
        assert_eq!(below, vec![PathBuf::from("c/b")]);
        // a new version of it (dataset 8) is seen again
        f.set(vec![file("c/a", 1, 8)]);
        assert_eq!(f.get(Path::new("c/a")).map(|p| p.dataset), Some(8));
        assert!(f.get(Path::new("c/b")).is_none());
    }

    #[test]
    fn a_stand_in_goes_when_its_file_does() {
        let d = tempfile::tempdir().unwrap();
        let mut f = PeerFiles::default();
        f.set(vec![file("c/a", 1, 7), file("c/b", 1, 7)]);
        let (a, b) = (f.get(Path::new("c/a")).unwrap().clone(), f.get(Path::new("c/b")).unwrap().clone());
        let sa = stand_in(d.path(), 0, Path::new("c/a"), &a).unwrap();
        let sb = stand_in(d.path(), 0, Path::new("c/b"), &b).unwrap();
        // c/a left (its dataset evicted), c/b is in a new version (dataset 8)
        f.set(vec![file("c/b", 1, 8)]);
        prune(&f, d.path(), 0);
        assert!(!sa.exists() && !sb.exists(), "both stood for files that are gone");
        let b = f.get(Path::new("c/b")).unwrap().clone();
        let sb = stand_in(d.path(), 0, Path::new("c/b"), &b).unwrap();
        prune(&f, d.path(), 0);
        assert!(sb.exists(), "its file is still there");
    }

    #[test]
    fn a_stand_in_has_the_size_mode_and_time_of_the_file_it_stands_for() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = Peer { rank: 3, dataset: 1, size: 1 << 30, mode: 0o100640, mtime: (1_100_000_000, 987), local: None };
        let at = stand_in(d.path(), 0, Path::new("ckpt.1/part.3"), &p).unwrap();
        let m = std::fs::metadata(&at).unwrap();
        assert_eq!((m.len(), m.mode(), m.mtime(), m.mtime_nsec()), (1 << 30, 0o100640, 1_100_000_000, 987));
        let suid = Peer { mode: 0o104750, ..p.clone() };
        let at = stand_in(d.path(), 0, Path::new("ckpt.1/part.3"), &suid).unwrap();
        assert_eq!(std::fs::metadata(&at).unwrap().mode(), 0o100750, "no setuid bit, as a flush's copy");
        assert!(m.blocks() < 8, "sparse: {} blocks", m.blocks());
        assert!(!prefix_copy(&at, &Peer { mtime: (1, 0), ..p.clone() }), "another time is another file");
        assert!(prefix_copy(&at, &Peer { mode: 0o100640, ..p.clone() }));
    }
}
