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
//! appended right after the real `open` returns, before the application's first write through
//! the descriptor. Records name inodes, not paths: renames keep them.
//!
//! Not covered: a kill between the real `open` and its `O` record leaves an empty file (new,
//! or truncated by `O_TRUNC`) recovered as it is; writes of a forked child after the parent's
//! last close, and writes through a mapping after the close, record nothing; an inode that a
//! removed pending file left open (no `C`) and the file system gives to a later file without
//! records makes that file count as cut short.
//!
//! The journal is emptied when the table holds no pending file (after a completion), so it
//! stays as small as the pending area: truncated and kept open for the next record (one
//! `ftruncate` per completion, where a removal cost an `unlink`, and the next record a
//! directory check, an open and an `fstat`). While a file stays pending longer (held open
//! across sync points), it is rewritten with only the records that matter once it passes
//! [`COMPACT_AT`] bytes. A failure to append (a full cache) is reported once; the journal may
//! then lack records, and a file whose record is missing is recovered as it is.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The open journal: its path, file, length, and the length at which it is compacted next.
static JOURNAL: Mutex<Option<(PathBuf, File, u64, u64)>> = Mutex::new(None);

/// The length of a record: a tag and an inode number.
const RECORD: u64 = 9;

/// A journal this long (7,281 records) is rewritten with only the records of files still
/// open or failed ([`compact`]); then again at twice what that left, if more.
pub(super) const COMPACT_AT: u64 = 64 << 10;

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
            let f = super::plain::open_journal(&path)?;
            // whole records only: an append cut short earlier would shift every later one
            let len = f.metadata()?.len();
            f.set_len(len - len % RECORD)?;
            *g = Some((path, f, len - len % RECORD, COMPACT_AT));
        }
        let (path, f, len, limit) = g.as_mut().expect("opened above");
        if *len >= *limit {
            *f = compact(path)?;
            *len = f.metadata()?.len();
            *limit = COMPACT_AT.max(2 * *len);
        }
        f.write_all(&rec)?;
        *len += RECORD;
        Ok(())
    })();
    if let Err(e) = appended {
        *g = None;
        if !BROKEN.swap(true, Ordering::Relaxed) {
            crate::scr_warn!(
                "{}: {e}; the write journal lacks records from here on: if this run is killed, a pending \
                 file may be recovered although it was cut off, or left out although it was whole",
                path_of(pending).display()
            );
        }
    }
}

/// Rewrite the journal at `path` with the records of the inodes whose last record is not `C`
/// (a whole file's records decide nothing: without them it is adopted as it is), through a
/// temporary name; the new journal, open for appending.
fn compact(path: &Path) -> std::io::Result<File> {
    let bytes = std::fs::read(path)?;
    let keep = cut_short_in(&bytes);
    let mut out = Vec::new();
    for rec in bytes.chunks_exact(RECORD as usize) {
        if keep.contains(&u64::from_le_bytes(rec[1..].try_into().expect("8 bytes"))) {
            out.extend_from_slice(rec);
        }
    }
    let tmp = crate::paths::temp_name(path, ".new");
    std::fs::write(&tmp, &out)?;
    std::fs::rename(&tmp, path)?;
    super::plain::open_journal(path)
}

/// The table holds no pending file: no record is needed any more (the journal is emptied and
/// stays open for the next one; one that cannot be emptied is removed).
pub(super) fn clear() {
    let mut g = JOURNAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, f, len, limit)) = g.as_mut() {
        if *len == 0 || f.set_len(0).is_ok() {
            (*len, *limit) = (0, COMPACT_AT);
            return;
        }
    }
    if let Some((path, ..)) = g.take() {
        let _ = std::fs::remove_file(path);
    }
}

/// At start, before adopting a killed run's pending files: the inodes the journal of pending
/// area `pending` names as cut short (their last record is `O`: the run was writing them when
/// it died, or `F`: a write or close failed).
pub(super) fn cut_short(pending: &Path) -> HashSet<u64> {
    std::fs::read(path_of(pending)).map(|b| cut_short_in(&b)).unwrap_or_default()
}

/// [`cut_short`] of the journal's bytes. A record cut short by the kill is the last one:
/// ignored, as its write never returned.
fn cut_short_in(bytes: &[u8]) -> HashSet<u64> {
    let mut last: HashMap<u64, Mark> = HashMap::new();
    for rec in bytes.chunks_exact(RECORD as usize) {
        let Some(mark) = Mark::of(rec[0]) else { continue };
        last.insert(u64::from_le_bytes(rec[1..].try_into().expect("8 bytes")), mark);
    }
    last.into_iter().filter(|(_, m)| *m != Mark::Closed).map(|(ino, _)| ino).collect()
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
        assert!(!cut.contains(&1));
        assert!(cut.contains(&2));
        assert!(cut.contains(&3));
        assert!(cut.contains(&4));
        assert!(!cut.contains(&5));
    }

    #[test]
    fn a_long_journal_keeps_what_decides_and_a_torn_one_is_realigned() {
        let dir = tempfile::tempdir().unwrap();
        let (pending, cache) = (dir.path(), dir.path().join("f"));
        std::fs::write(&cache, b"x").unwrap();
        // a torn record left by an append cut short earlier: the next one starts whole
        let j = path_of(pending);
        std::fs::create_dir_all(j.parent().unwrap()).unwrap();
        std::fs::write(&j, b"C\x01\x02").unwrap();
        forget();
        opened(pending, &cache);
        assert_eq!(std::fs::metadata(&j).unwrap().len(), RECORD);
        assert!(cut_short(pending).len() == 1);
        // a file written and closed over and over while it stays pending: the journal
        // stays bounded and still says the file is open at the end
        for _ in 0..(COMPACT_AT / RECORD) {
            closed(pending, &cache, true);
            opened(pending, &cache);
        }
        assert!(std::fs::metadata(&j).unwrap().len() < COMPACT_AT + 2 * RECORD);
        let ino = std::fs::metadata(&cache).unwrap().ino();
        assert_eq!(cut_short(pending), [ino].into_iter().collect());
        closed(pending, &cache, true);
        assert!(cut_short(pending).is_empty());
        // emptied after a completion, and kept open: the next record starts it again
        opened(pending, &cache);
        clear();
        assert_eq!(std::fs::metadata(&j).unwrap().len(), 0);
        assert!(cut_short(pending).is_empty());
        opened(pending, &cache);
        assert_eq!(std::fs::metadata(&j).unwrap().len(), RECORD);
        assert_eq!(cut_short(pending), [ino].into_iter().collect());
        forget();
    }
}
