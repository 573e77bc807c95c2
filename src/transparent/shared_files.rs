//! The shared files of the file table (plain data, part of [`super::table::Table`]): files
//! several ranks write, as this rank opened them since their dataset last completed
//! ([`super::shared`] decides which files these are and where they are written).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::fds::SHARED_BIT;

/// A file shared in this phase, as this rank opened it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Relative to the prefix.
    pub rel: PathBuf,
    /// Where its writers write it (absolute).
    pub staging: PathBuf,
    /// Descriptors of this rank open for writing.
    pub writers: u32,
    /// A write or close failed on this rank.
    pub failed: bool,
    /// The sync epoch of its last open (datasets form oldest first).
    pub epoch: u64,
}

/// The shared files this rank opened since the last dataset completed (part of the file table).
#[derive(Debug, Default)]
pub struct SharedFiles {
    files: BTreeMap<u32, Entry>,
    next: u32,
    /// Last closes on this rank so far ([`super::table::Table::settled`]).
    settled: u64,
}

impl SharedFiles {
    /// Shared file `rel` (its id and entry).
    pub(super) fn find(&self, rel: &Path) -> Option<(u32, &Entry)> {
        self.files.iter().find(|(_, e)| e.rel == rel).map(|(id, e)| (*id, e))
    }

    /// Record `rel` as shared, written at `staging` (its new id).
    pub(super) fn add(&mut self, rel: &Path, staging: PathBuf, epoch: u64) -> u32 {
        super::news::stir();
        self.next += 1;
        let id = SHARED_BIT | self.next;
        self.files.insert(id, Entry { rel: rel.to_path_buf(), staging, writers: 0, failed: false, epoch });
        id
    }

    /// Shared file `id`.
    pub(super) fn get(&self, id: u32) -> Option<&Entry> {
        self.files.get(&id)
    }

    /// Where `rel` is written while it is shared in this phase.
    pub fn staging(&self, rel: &Path) -> Option<&Path> {
        self.find(rel).map(|(_, e)| e.staging.as_path())
    }

    /// A descriptor of shared file `id` was opened (`fd < 0`: the open failed, and a file
    /// declared by it, `created`, is forgotten).
    pub(super) fn opened(&mut self, id: u32, fd: i32, created: bool, epoch: u64) {
        if fd < 0 {
            if created && self.files.get(&id).is_some_and(|e| e.writers == 0) {
                self.files.remove(&id);
            }
            return;
        }
        if let Some(e) = self.files.get_mut(&id) {
            e.writers += 1;
            e.epoch = epoch;
            super::news::stir();
        }
    }

    /// A descriptor of `id` was duplicated.
    pub(super) fn duplicated(&mut self, id: u32) {
        if let Some(e) = self.files.get_mut(&id) {
            e.writers += 1;
        }
    }

    /// A descriptor of `id` closed (`ok`: successfully).
    pub(super) fn closed(&mut self, id: u32, ok: bool) {
        if let Some(e) = self.files.get_mut(&id) {
            e.writers = e.writers.saturating_sub(1);
            e.failed |= !ok;
            if e.writers == 0 {
                self.settled += 1;
                super::news::stir();
            }
        }
    }

    /// How many shared files had their last close on this rank so far.
    pub(super) fn settled(&self) -> u64 {
        self.settled
    }

    /// A write on a descriptor of `id` failed.
    pub(super) fn failed(&mut self, id: u32) {
        if let Some(e) = self.files.get_mut(&id) {
            e.failed = true;
        }
    }

    /// (shared files open for writing on this rank, closed ones)
    pub(super) fn counts(&self) -> (u64, u64) {
        let open = self.files.values().filter(|e| e.writers > 0).count() as u64;
        (open, self.files.len() as u64 - open)
    }

    /// The shared files no descriptor of this rank writes any more, by id.
    pub(super) fn closed_files(&self) -> Vec<(u32, Entry)> {
        self.files.iter().filter(|(_, e)| e.writers == 0).map(|(id, e)| (*id, e.clone())).collect()
    }

    /// The shared files a descriptor of this rank still writes.
    pub(super) fn open_files(&self) -> impl Iterator<Item = &Entry> {
        self.files.values().filter(|e| e.writers > 0)
    }

    pub(super) fn forget(&mut self, id: u32) {
        self.files.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_count_until_closed_and_failures_stick() {
        let mut sh = SharedFiles::default();
        let id = super::super::fds::SHARED_BIT | 1;
        sh.files.insert(
            id,
            Entry { rel: "c/s".into(), staging: "/p/c/.s.scrshared".into(), writers: 0, failed: false, epoch: 0 },
        );
        use super::super::fds::Tracked;
        assert_eq!(
            (Tracked::of(id), Tracked::of(1), Tracked::of(0)),
            (Some(Tracked::Shared(id)), Some(Tracked::Pending(1)), None)
        );
        sh.opened(id, 5, true, 3);
        sh.duplicated(id);
        assert_eq!(sh.counts(), (1, 0));
        sh.closed(id, true);
        sh.failed(id);
        sh.closed(id, true);
        assert_eq!(sh.counts(), (0, 1));
        let closed = sh.closed_files();
        assert_eq!((closed[0].1.epoch, closed[0].1.failed), (3, true));
        assert_eq!(sh.staging(Path::new("c/s")), Some(Path::new("/p/c/.s.scrshared")));
        // a failed open forgets only a file it declared and nobody writes
        sh.opened(id, -1, true, 4);
        assert!(sh.closed_files().is_empty());
    }
}
