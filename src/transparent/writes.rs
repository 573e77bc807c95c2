//! The write journal of this rank's pending area: which pending files were open for writing
//! when the process died. [`super::sync::recover`] adopts a killed run's pending files into
//! the checkpoint of their name at the next start; a file the run was still writing (cut off
//! mid-write) must not join a checkpoint that is then called complete, verified by CRC32 and
//! flushed as if whole.
//!
//! Each rank appends 9-byte records (a tag, the inode of the cached bytes) to
//! `<pending>/.scr/writes`: `O` when a pending file gets its first descriptor open for writing,
//! `C` at its last close, `F` at a last close after a failed write or close. A file whose last
//! record is `O` or `F` is left out at recovery; one without records (renamed or linked into
//! the patterns, never written through a descriptor) is adopted as before. The `O` record is
//! appended before the application's first write through the descriptor, so no byte of a file
//! reaches cache unrecorded. Records name inodes, not paths: renames keep them.
//!
//! The journal is removed when the table holds no pending file (after a completion), so it
//! stays as small as the pending area. A failure to append (a full cache) is reported once;
//! a file whose record is missing is recovered as it is, as before this journal.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The open journal and its path.
static JOURNAL: Mutex<Option<(PathBuf, File)>> = Mutex::new(None);

/// A write to the journal failed this run (reported once).
static BROKEN: AtomicBool = AtomicBool::new(false);

/// What a record says of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// A descriptor opened it for writing.
    Open,
    /// Its last descriptor closed, every write and the close succeeded.
    Closed,
    /// Its last descriptor closed after a failed write or close.
    Failed,
}

impl Mark {
    fn tag(self) -> u8 {
        match self {
            Mark::Open => b'O',
            Mark::Closed => b'C',
            Mark::Failed => b'F',
        }
    }

    fn of(tag: u8) -> Option<Mark> {
        match tag {
            b'O' => Some(Mark::Open),
            b'C' => Some(Mark::Closed),
            b'F' => Some(Mark::Failed),
            _ => None,
        }
    }
}

/// The journal of the pending area `pending`.
fn path_of(pending: &Path) -> PathBuf {
    pending.join(crate::paths::SCR_DIR).join("writes")
}

/// Pending file `cache` of the pending area `pending` got its first descriptor open for
/// writing.
pub(super) fn opened(pending: &Path, cache: &Path) {
    record(pending, cache, Mark::Open);
}

/// The last descriptor of pending file `cache` of the pending area `pending` closed (`ok`: no
/// write or close failed).
pub(super) fn closed(pending: &Path, cache: &Path, ok: bool) {
    record(pending, cache, if ok { Mark::Closed } else { Mark::Failed });
}

fn record(pending: &Path, cache: &Path, mark: Mark) {
    if pending.as_os_str().is_empty() {
        return; // a child process: no pending area, nothing recovers its files
    }
    let ino = match std::fs::metadata(cache) {
        Ok(m) => m.ino(),
        Err(_) => return, // gone already (removed): nothing to recover
    };
    let mut rec = [0u8; 9];
    rec[0] = mark.tag();
    rec[1..].copy_from_slice(&ino.to_le_bytes());
    let mut g = JOURNAL.lock().unwrap_or_else(|e| e.into_inner());
    let appended = (|| -> std::io::Result<()> {
        if g.is_none() {
            let path = path_of(pending);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let f = std::fs::OpenOptions::new().append(true).create(true).open(&path)?;
            *g = Some((path, f));
        }
        let (_, f) = g.as_mut().expect("opened above");
        f.write_all(&rec)
    })();
    if let Err(e) = appended {
        *g = None;
        if !BROKEN.swap(true, Ordering::Relaxed) {
            crate::scr_warn!(
                "{}: {e}; if this run is killed, the files it wrote since its last sync point are left out \
                 of their checkpoints at the next start",
                path_of(pending).display()
            );
        }
    }
}

/// The table holds no pending file: no record is needed any more (the journal is removed;
/// the next record starts a new one).
pub(super) fn clear() {
    let mut g = JOURNAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((path, _)) = g.take() {
        let _ = std::fs::remove_file(path);
    }
}

/// At start, before adopting a killed run's pending files: for each inode the journal of
/// pending area `pending` names, whether it was cut short (its last record is `O`: the run
/// was writing it when it died, or `F`: a write or close failed).
pub(super) fn cut_short(pending: &Path) -> HashMap<u64, bool> {
    let mut last: HashMap<u64, Mark> = HashMap::new();
    if let Ok(bytes) = std::fs::read(path_of(pending)) {
        // a record cut short by the kill is the last one: ignored, as its write never returned
        for rec in bytes.chunks_exact(9) {
            let Some(mark) = Mark::of(rec[0]) else { continue };
            let ino = u64::from_le_bytes(rec[1..].try_into().expect("8 bytes"));
            last.insert(ino, mark);
        }
    }
    last.into_iter().map(|(ino, m)| (ino, m != Mark::Closed)).collect()
}

/// Drop the open journal (its pending area is being removed).
pub(super) fn forget() {
    *JOURNAL.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_record_of_an_inode_decides() {
        let dir = tempfile::tempdir().unwrap();
        let j = path_of(dir.path());
        std::fs::create_dir_all(j.parent().unwrap()).unwrap();
        let mut b = Vec::new();
        for (tag, ino) in [(b'O', 1u64), (b'C', 1), (b'O', 2), (b'O', 3), (b'F', 3), (b'O', 4), (b'C', 4), (b'O', 4)] {
            b.push(tag);
            b.extend_from_slice(&ino.to_le_bytes());
        }
        b.extend_from_slice(b"C\x05\x00"); // a record the kill cut short
        std::fs::write(&j, b).unwrap();
        let cut = cut_short(dir.path());
        assert_eq!(cut.get(&1), Some(&false));
        assert_eq!(cut.get(&2), Some(&true));
        assert_eq!(cut.get(&3), Some(&true));
        assert_eq!(cut.get(&4), Some(&true));
        assert_eq!(cut.get(&5), None);
    }
}
