//! The file table: what SCR holds for each path the application uses below the prefix.
//!
//! * **Pending** files: written since their dataset last completed, bytes in this rank's
//!   pending area of the cache. Each has an id (descriptors refer to the id, so a file renamed
//!   or unlinked while open stays the same entry), the number of descriptors writing it, the
//!   sync epoch of its last open for writing, and whether a write failed.
//! * **Committed** files: this rank's files of complete cached datasets, as the runtime lists
//!   them after each sync point. A pending file of the same path hides the committed one.
//! * **Removed** files: committed files the application deleted or renamed away. They are
//!   invisible at once; at the next sync point their dataset gets a new version without them.
//! * **Changes**: directory renames and removals this rank made under the prefix, which every
//!   rank applies to its own files at the next sync point (as a shared file system shows a
//!   rename or `rm -r` by one process to all).
//!
//! Keys are paths relative to the prefix. Everything here is plain data and pure: the file
//! system is touched by the callers. A file that several ranks write (a shared file, such as
//! one MPI-IO opens on every rank) would be one more kind of entry keyed the same way, whose
//! bytes are not in one rank's pending area; nothing in the lookups assumes a private copy.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::prefix::under;

use serde::{Deserialize, Serialize};

/// A file written since its dataset last completed.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub rel: PathBuf,
    /// Where the bytes are.
    pub cache: PathBuf,
    /// Descriptors open for writing.
    pub writers: u32,
    /// Sync epoch of the last open for writing.
    pub epoch: u64,
    /// A write or close failed: its dataset is invalid.
    pub failed: bool,
    /// Unlinked or replaced while open: dropped at its last close, in no dataset.
    pub deleted: bool,
    /// The bytes are a hard link of a committed file: they are copied before a write in place.
    pub shares_committed: bool,
    /// It replaces another rank's file ([`super::peers`]): once its open succeeded, that file
    /// is hidden and its rank drops it at the next sync point ([`Table::opened_over_peer`]);
    /// its dataset's new version rewrites a file (a checkpoint of its own).
    pub takes_over: bool,
    /// The dataset of the committed file this one replaced (it joins that dataset when no
    /// pattern routes its path).
    pub dataset: Option<String>,
    /// A copy of the file it replaced, made for an update in place: dropped at its last close
    /// if nothing changed ([`super::untouched`]).
    pub copied: Option<super::untouched::Copied>,
}

/// A file of a complete cached dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub cache: PathBuf,
    pub dataset: u64,
    /// The dataset's name.
    pub name: String,
}

/// What a path stands for now.
#[derive(Debug, PartialEq)]
pub enum Held<'a> {
    Pending(u32, &'a Pending),
    Committed(&'a Committed),
}

impl Held<'_> {
    pub fn cache(&self) -> &Path {
        match self {
            Held::Pending(_, p) => &p.cache,
            Held::Committed(c) => &c.cache,
        }
    }
}

/// What a path shows this rank: a file SCR holds for it, or another rank's file of a
/// complete cached dataset ([`super::peers`]).
#[derive(Debug, PartialEq)]
pub enum Seen<'a> {
    Held(Held<'a>),
    Peer(&'a super::peers::Peer),
}

/// A change of the namespace every rank applies to its own files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Change {
    RenamedDir {
        from: PathBuf,
        to: PathBuf,
    },
    /// Another rank's file of a cached dataset, removed by this rank: the rank holding it
    /// removes it (unless it has written a new one since).
    RemovedFile {
        rel: PathBuf,
    },
    /// Made in sync epoch `epoch`: pending files opened later are not affected.
    RemovedDir {
        dir: PathBuf,
        epoch: u64,
    },
}

/// Numbers a sync point agrees on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Pending and shared files open for writing.
    pub open: u64,
    /// Pending and shared files closed.
    pub closed: u64,
    /// Committed files removed.
    pub removed: u64,
    /// Namespace changes not yet shared.
    pub changes: u64,
}

#[derive(Debug, Default)]
pub struct Table {
    pending: HashMap<u32, Pending>,
    by_path: BTreeMap<PathBuf, u32>,
    next_id: u32,
    committed: BTreeMap<PathBuf, Committed>,
    removed: BTreeMap<PathBuf, Committed>,
    changes: Vec<Change>,
    /// Sync points passed (the same count on every rank).
    pub epoch: u64,
    /// Changes with every mutation (listings cache what they derive from the table).
    generation: u64,
    /// Events that may let a waiting dataset complete (a pending file's last close, a
    /// removal, a rename): a sync point attempts completion only after one.
    settled: u64,
    /// Files several ranks write, opened since the last dataset completed.
    pub shared: super::shared_files::SharedFiles,
    /// Other ranks' files of complete cached datasets ([`super::peers`]).
    peers: super::peers::PeerFiles,
    /// A completion runs without the table lock (see [`super::state::without_table`]).
    pub(super) completing: Option<Completing>,
    /// The first components of every path [`Table::seen`] can find, and perhaps more
    /// ([`Table::may_show`]): added to as files are added or renamed, gathered anew when the
    /// committed files or the other ranks' files are replaced (operations that walk every file
    /// anyway), never trimmed by a removal.
    tops: HashSet<Vec<u8>>,
}

/// The first component of normalised relative path `p`, as bytes.
fn first(p: &Path) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    &b[..b.iter().position(|&c| c == b'/').unwrap_or(b.len())]
}

/// Add `p`'s first component to `tops` (allocating only when it is new).
fn add_top(tops: &mut HashSet<Vec<u8>>, p: &Path) {
    let top = first(p);
    if !tops.contains(top) {
        tops.insert(top.to_vec());
    }
}

/// A completion the runtime works on without the table lock ([`super::state::without_table`]): the files
/// it takes (pending and shared ids, and the paths of those and of the removed files it
/// records). Committed files may change under it too (a new version replaces them, the cache
/// evicts them).
#[derive(Debug, Default)]
pub(super) struct Completing {
    pub ids: BTreeSet<u32>,
    pub rels: BTreeSet<PathBuf>,
}

fn strictly_below(p: &Path, dir: &Path) -> bool {
    p != dir && p.starts_with(dir)
}

impl Table {
    /// Whether `rel` is a file of a complete cached dataset (hidden or not).
    pub fn is_committed(&self, rel: &Path) -> bool {
        self.committed.contains_key(rel)
    }

    /// What `rel` stands for, if SCR holds its bytes.
    pub fn held(&self, rel: &Path) -> Option<Held<'_>> {
        if let Some((&id, p)) = self.by_path.get(rel).and_then(|id| Some((id, self.pending.get(id)?))) {
            return Some(Held::Pending(id, p));
        }
        self.committed.get(rel).map(Held::Committed)
    }

    /// What `rel` shows: this rank's file, else (unless this rank removed its own file of
    /// that name) another rank's.
    pub fn seen(&self, rel: &Path) -> Option<Seen<'_>> {
        if !self.may_show(rel) {
            return None;
        }
        if let Some(h) = self.held(rel) {
            return Some(Seen::Held(h));
        }
        if self.peers.is_empty() || self.removed.contains_key(rel) {
            return None;
        }
        self.peers.get(rel).map(Seen::Peer)
    }

    /// Whether [`Table::seen`] may find `rel`: some file this rank holds or sees may have the
    /// same first component. Most paths an application looks up below the prefix are not
    /// SCR's (OpenFOAM stats its four dictionaries at every time step), and one hash lookup
    /// answers those instead of a search of each map by path (component by component).
    fn may_show(&self, rel: &Path) -> bool {
        self.tops.contains(first(rel))
    }

    /// Gather [`Table::tops`] anew from every file [`Table::seen`] can find.
    fn gather_tops(&mut self) {
        let mut tops = HashSet::new();
        let peers = self.peers.below(Path::new("")).map(|(p, _)| p);
        for p in self.by_path.keys().chain(self.committed.keys()).map(PathBuf::as_path).chain(peers) {
            add_top(&mut tops, p);
        }
        self.tops = tops;
    }

    /// A file at `rel` may now be found.
    fn may_find(&mut self, rel: &Path) {
        add_top(&mut self.tops, rel);
    }

    /// Other ranks' files strictly below `dir` that this rank's own do not hide.
    pub fn peers_below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = (&'a Path, &'a super::peers::Peer)> + 'a {
        self.peers.below(dir).filter(|(rel, _)| self.held(rel).is_none() && !self.removed.contains_key(*rel))
    }

    /// Whether a file this rank holds, or another rank's it sees, is strictly below `dir`.
    pub fn any_seen_below(&self, dir: &Path) -> bool {
        self.any_below(dir) || self.peers_below(dir).next().is_some()
    }

    /// Remove another rank's file `rel` from this rank's view, and have its rank remove it at
    /// the next sync point. Whether `rel` was another rank's file this rank saw.
    pub fn remove_peer(&mut self, rel: &Path) -> bool {
        if !matches!(self.seen(rel), Some(Seen::Peer(_))) {
            return false;
        }
        self.taken_from_peer(rel);
        true
    }

    /// Pending file `id` was opened: if it replaces another rank's file, that one goes now
    /// ([`Table::taken_from_peer`]).
    pub fn opened_over_peer(&mut self, id: u32) {
        let Some(p) = self.pending.get(&id).filter(|p| p.takes_over) else { return };
        let rel = p.rel.clone();
        if self.peers.get(&rel).is_some() {
            self.taken_from_peer(&rel);
        }
    }

    /// This rank removed or took over another rank's file `rel`: hidden now, and its rank
    /// removes it at the next sync point.
    pub fn taken_from_peer(&mut self, rel: &Path) {
        self.peers.hide(rel);
        self.changes.push(Change::RemovedFile { rel: rel.to_path_buf() });
        self.changed();
    }

    /// Other ranks' files now, from the runtime. Whether they changed.
    pub fn set_peers(&mut self, list: Vec<crate::runtime::PeerFile>) -> bool {
        let changed = self.peers.set(list);
        if changed {
            self.changed();
            self.gather_tops();
        }
        changed
    }

    /// Other ranks' files (for pruning their stand-ins, [`super::peers::prune`]).
    pub fn peers(&self) -> &super::peers::PeerFiles {
        &self.peers
    }

    /// A change of the table: listings derived from it are stale, and this rank has news.
    fn changed(&mut self) {
        self.generation += 1;
        super::news::stir();
    }

    /// Changes whenever the table does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many events so far may have let a waiting dataset complete (pending or shared
    /// files' last closes, removals, renames).
    pub fn settled(&self) -> u64 {
        self.settled + self.shared.settled()
    }

    pub fn get(&self, id: u32) -> Option<&Pending> {
        self.pending.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Pending> {
        self.changed();
        self.pending.get_mut(&id)
    }

    /// A new pending file at `rel` (it replaces what `rel` stood for). Its id.
    pub fn add(&mut self, rel: &Path, cache: PathBuf, shares_committed: bool) -> u32 {
        self.changed();
        let dataset = match self.held(rel) {
            Some(Held::Committed(c)) => Some(c.name.clone()),
            Some(Held::Pending(_, p)) => p.dataset.clone(),
            None => None,
        };
        self.remove(rel);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        while self.pending.contains_key(&self.next_id) {
            self.next_id = self.next_id.wrapping_add(1).max(1);
        }
        let id = self.next_id;
        let p = Pending {
            rel: rel.to_path_buf(),
            cache,
            writers: 0,
            epoch: self.epoch,
            failed: false,
            deleted: false,
            shares_committed,
            takes_over: false,
            dataset,
            copied: None,
        };
        self.pending.insert(id, p);
        self.by_path.insert(rel.to_path_buf(), id);
        self.may_find(rel);
        id
    }

    /// The application removed `rel` (unlinked it, or renamed it away): a pending file is
    /// dropped (at its last close if still open), a committed one is hidden. Returns the
    /// pending file's bytes to delete, and whether SCR held anything at `rel`.
    pub fn remove(&mut self, rel: &Path) -> (Option<PathBuf>, bool) {
        self.changed();
        self.settled += 1;
        let mut bytes = None;
        let mut held = false;
        if let Some(id) = self.by_path.remove(rel) {
            held = true;
            if let Some(p) = self.pending.get_mut(&id) {
                bytes = Some(p.cache.clone());
                if p.writers == 0 {
                    self.pending.remove(&id);
                } else {
                    p.deleted = true;
                }
            }
        }
        if let Some(c) = self.committed.remove(rel) {
            held = true;
            self.removed.insert(rel.to_path_buf(), c);
        }
        (bytes, held)
    }

    /// Pending file `id` is now called `to`, its bytes at `cache` (what `to` stood for is
    /// replaced; `id`'s old name is free).
    pub fn rename(&mut self, id: u32, to: &Path, cache: PathBuf) {
        self.changed();
        self.settled += 1;
        let Some(from) = self.pending.get(&id).map(|p| p.rel.clone()) else { return };
        if self.by_path.get(&from) == Some(&id) {
            self.by_path.remove(&from);
        }
        self.remove(to);
        if let Some(p) = self.pending.get_mut(&id) {
            p.rel = to.to_path_buf();
            p.cache = cache;
            self.by_path.insert(to.to_path_buf(), id);
            self.may_find(to);
        }
    }

    /// A descriptor of `id` closed: drop a deleted file at its last close. Whether the file
    /// is now closed and still named.
    pub fn closed(&mut self, id: u32, ok: bool) -> bool {
        self.changed();
        let Some(p) = self.pending.get_mut(&id) else { return false };
        p.writers = p.writers.saturating_sub(1);
        p.failed |= !ok;
        if p.writers > 0 {
            return false;
        }
        self.settled += 1;
        if p.deleted {
            self.pending.remove(&id);
            return false;
        }
        true
    }

    /// Pending file `id` was just added but its open failed: forget it, and make the cached
    /// dataset's file at its path visible again.
    pub fn abandon(&mut self, id: u32) {
        let Some(rel) = self.pending.get(&id).map(|p| p.rel.clone()) else { return };
        self.forget(id);
        if let Some(c) = self.removed.remove(&rel) {
            self.may_find(&rel);
            self.committed.insert(rel, c);
        }
    }

    /// Pending file `id`, a copy made for an update in place, closed without a change: as
    /// [`Table::abandon`], and its last close is no event (no completion is attempted for it).
    pub fn drop_unchanged_copy(&mut self, id: u32) {
        self.abandon(id);
        self.settled = self.settled.saturating_sub(1);
    }

    /// Forget pending file `id` (it joined a dataset, or went to the prefix).
    pub fn forget(&mut self, id: u32) {
        self.changed();
        if let Some(p) = self.pending.remove(&id) {
            if self.by_path.get(&p.rel) == Some(&id) {
                self.by_path.remove(&p.rel);
            }
        }
    }

    /// Whether SCR holds no file at all: no listing has entries to add.
    pub fn holds_nothing(&self) -> bool {
        self.by_path.is_empty() && self.committed.is_empty() && self.peers.is_empty()
    }

    /// Whether SCR holds a file strictly below directory `dir`.
    pub fn any_below(&self, dir: &Path) -> bool {
        self.visible_below(dir).next().is_some()
    }

    /// The files SCR holds below `dir` (any depth): (path, bytes), each path once, in order.
    pub fn visible_below<'a>(&'a self, dir: &'a Path) -> impl Iterator<Item = (&'a Path, &'a Path)> + 'a {
        // paths are normalised: comparing bytes is exact, and much cheaper than components
        let below = move |p: &Path| under(p, dir);
        let start = (std::ops::Bound::Excluded(dir), std::ops::Bound::Unbounded);
        let pending = self
            .by_path
            .range::<Path, _>(start)
            .skip_while(move |(p, _)| *p == dir)
            .take_while(move |(p, _)| below(p))
            .filter_map(|(p, id)| Some((p.as_path(), self.pending.get(id)?.cache.as_path())));
        let committed = self
            .committed
            .range::<Path, _>(start)
            .take_while(move |(p, _)| below(p))
            .filter(|(p, _)| self.by_path.is_empty() || !self.by_path.contains_key(*p))
            .map(|(p, c)| (p.as_path(), c.cache.as_path()));
        pending.chain(committed)
    }

    /// Pending files below `dir` (for a directory rename or removal): (id, path, bytes, epoch).
    pub fn pending_below(&self, dir: &Path) -> Vec<(u32, PathBuf, PathBuf, u64)> {
        let mut v: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.deleted && strictly_below(&p.rel, dir))
            .map(|(id, p)| (*id, p.rel.clone(), p.cache.clone(), p.epoch))
            .collect();
        v.sort();
        v
    }

    /// The committed files now, from the runtime (oldest dataset first: a later entry for a
    /// path is the newer file). Removed files whose dataset left the cache are forgotten.
    pub fn set_committed(&mut self, files: impl IntoIterator<Item = (PathBuf, Committed)>) {
        self.changed();
        self.committed.clear();
        for (rel, c) in files {
            self.committed.insert(rel, c);
        }
        let datasets: std::collections::HashSet<u64> = self.committed.values().map(|c| c.dataset).collect();
        let committed = &mut self.committed;
        self.removed.retain(|rel, r| {
            if !datasets.contains(&r.dataset) {
                return false;
            }
            // still removed; a file of a newer dataset at this path stays visible
            if committed.get(rel).is_some_and(|c| c.dataset == r.dataset) {
                committed.remove(rel);
            }
            true
        });
        self.gather_tops();
    }

    /// Committed files the application removed, by the name of their dataset.
    pub fn removed_by_name(&self) -> BTreeMap<String, Vec<PathBuf>> {
        let mut m: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for (rel, c) in &self.removed {
            m.entry(c.name.clone()).or_default().push(rel.clone());
        }
        m
    }

    /// Another rank removed directory `dir` in sync epoch `epoch`: what this rank holds
    /// below it goes too, except pending files opened since. The pending bytes to delete.
    pub fn remove_below(&mut self, dir: &Path, epoch: u64) -> Vec<PathBuf> {
        let gone: Vec<PathBuf> = self
            .visible_below(dir)
            .map(|(rel, _)| rel.to_path_buf())
            .filter(|rel| !matches!(self.held(rel), Some(Held::Pending(_, p)) if p.epoch >= epoch))
            .collect();
        gone.iter().filter_map(|rel| self.remove(rel).0).collect()
    }

    /// Whether no pending file is left (open, closed or deleted while open).
    pub fn no_pending(&self) -> bool {
        self.pending.is_empty()
    }

    /// Pending files that are closed and named, by id.
    pub fn closed_pending(&self) -> Vec<(u32, &Pending)> {
        let mut v: Vec<(u32, &Pending)> =
            self.pending.iter().filter(|(_, p)| p.writers == 0 && !p.deleted).map(|(id, p)| (*id, p)).collect();
        v.sort_by_key(|(id, _)| *id);
        v
    }

    /// Pending files open for writing and named.
    pub fn open_pending(&self) -> Vec<Pending> {
        self.pending.values().filter(|p| p.writers > 0 && !p.deleted).cloned().collect()
    }

    pub fn counts(&self) -> Counts {
        let live = self.pending.values().filter(|p| !p.deleted);
        let open = live.clone().filter(|p| p.writers > 0).count() as u64;
        let closed = live.filter(|p| p.writers == 0).count() as u64;
        let (shared_open, shared_closed) = self.shared.counts();
        Counts {
            open: open + shared_open,
            closed: closed + shared_closed,
            removed: self.removed.len() as u64,
            changes: self.changes.len() as u64,
        }
    }

    pub fn record(&mut self, c: Change) {
        super::news::stir();
        self.changes.push(c);
    }

    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// Every pending file that is still named (process exit).
    pub fn all_pending(&self) -> Vec<Pending> {
        let mut v: Vec<Pending> = self.pending.values().filter(|p| !p.deleted).cloned().collect();
        v.sort_by(|a, b| a.rel.cmp(&b.rel));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn committed(t: &mut Table, files: &[(&str, u64)]) {
        t.set_committed(
            files.iter().map(|(r, d)| {
                (p(r), Committed { cache: p(&format!("/c/{d}/{r}")), dataset: *d, name: format!("ds{d}") })
            }),
        );
    }

    #[test]
    fn a_pending_file_hides_the_committed_one_and_removal_hides_both() {
        let mut t = Table::default();
        committed(&mut t, &[("ckpt.2/a", 1)]);
        assert_eq!(t.held(&p("ckpt.2/a")).unwrap().cache(), Path::new("/c/1/ckpt.2/a"));
        let id = t.add(&p("ckpt.2/a"), p("/pend/ckpt.2/a"), false);
        assert_eq!(t.held(&p("ckpt.2/a")).unwrap().cache(), Path::new("/pend/ckpt.2/a"));
        // the committed file is replaced: the new file joins its dataset in its place
        assert_eq!(t.removed_by_name().get("ds1"), Some(&vec![p("ckpt.2/a")]));
        assert_eq!(t.get(id).unwrap().dataset.as_deref(), Some("ds1"));
        let (bytes, held) = t.remove(&p("ckpt.2/a"));
        assert_eq!((bytes, held), (Some(p("/pend/ckpt.2/a")), true));
        assert!(t.held(&p("ckpt.2/a")).is_none());
        assert!(t.get(id).is_none(), "closed: dropped at once");
        assert_eq!(t.remove(&p("ckpt.2/a")), (None, false));
    }

    #[test]
    fn what_a_lookup_may_find_follows_every_change_of_the_table() {
        let mut t = Table::default();
        assert!(t.seen(&p("processor0/0.1/U")).is_none());
        committed(&mut t, &[("processor0/0.1/U", 1)]);
        assert!(t.seen(&p("system/controlDict")).is_none(), "another first component: not SCR's");
        assert!(t.seen(&p("processor0/0.1/U")).is_some(), "a committed file after set_committed");
        let id = t.add(&p("post/a"), p("/pend/post/a"), false);
        assert!(matches!(t.seen(&p("post/a")), Some(Seen::Held(Held::Pending(..)))), "a pending file at once");
        t.rename(id, &p("moved/a"), p("/pend/moved/a"));
        assert!(t.seen(&p("post/a")).is_none());
        assert!(t.seen(&p("moved/a")).is_some(), "renamed: found under its new first component");
        assert!(t.set_peers(vec![crate::runtime::peers_test_file("processor1/0.1/U", 1, 1)]));
        assert!(matches!(t.seen(&p("processor1/0.1/U")), Some(Seen::Peer(_))), "another rank's file");
        assert!(t.seen(&p("processor1/0.1/p")).is_none());
        committed(&mut t, &[]);
        assert!(t.seen(&p("processor0/0.1/U")).is_none(), "gone from the cache");
        committed(&mut t, &[("late/a", 2)]);
        let id = t.add(&p("late/a"), p("/pend/late/a"), false);
        t.abandon(id);
        assert!(matches!(t.seen(&p("late/a")), Some(Seen::Held(Held::Committed(_)))), "an abandoned open");
    }

    #[test]
    fn an_abandoned_open_restores_the_cached_file() {
        let mut t = Table::default();
        committed(&mut t, &[("c/a", 1)]);
        let id = t.add(&p("c/a"), p("/pend/c/a"), false);
        t.abandon(id);
        assert_eq!(t.held(&p("c/a")).unwrap().cache(), Path::new("/c/1/c/a"));
        assert_eq!(t.counts(), Counts::default());
    }

    #[test]
    fn a_file_removed_while_open_stays_until_its_last_close_and_joins_no_dataset() {
        let mut t = Table::default();
        let id = t.add(&p("c/a"), p("/pend/c/a"), false);
        t.get_mut(id).unwrap().writers = 2;
        t.remove(&p("c/a"));
        assert!(t.held(&p("c/a")).is_none());
        assert_eq!(t.counts(), Counts::default());
        assert!(!t.closed(id, true));
        assert!(t.get(id).is_some());
        assert!(!t.closed(id, true));
        assert!(t.get(id).is_none());
    }

    #[test]
    fn closing_records_failures_and_reports_the_last_close() {
        let mut t = Table::default();
        let id = t.add(&p("c/a"), p("/pend/c/a"), false);
        t.get_mut(id).unwrap().writers = 2;
        assert_eq!(t.counts(), Counts { open: 1, ..Default::default() });
        assert!(!t.closed(id, false));
        assert!(t.closed(id, true));
        assert!(t.get(id).unwrap().failed);
        assert_eq!(t.counts(), Counts { closed: 1, ..Default::default() });
        assert_eq!(t.closed_pending().len(), 1);
        assert!(!t.closed(999, true), "unknown ids are ignored");
    }

    #[test]
    fn rename_moves_an_entry_and_replaces_the_target() {
        let mut t = Table::default();
        committed(&mut t, &[("c/b", 1)]);
        let a = t.add(&p("c/a.tmp"), p("/pend/c/a.tmp"), false);
        let b = t.add(&p("c/x"), p("/pend/c/x"), false);
        t.rename(a, &p("c/b"), p("/pend/c/b"));
        assert!(t.held(&p("c/a.tmp")).is_none());
        assert_eq!(t.held(&p("c/b")), Some(Held::Pending(a, t.get(a).unwrap())));
        assert_eq!(t.removed_by_name().get("ds1"), Some(&vec![p("c/b")]));
        t.rename(b, &p("c/b"), p("/pend/c/b"));
        assert!(t.get(a).is_none(), "the replaced pending file is gone");
        assert_eq!(t.get(b).unwrap().rel, p("c/b"));
    }

    #[test]
    fn listing_below_a_directory_sees_each_path_once() {
        let mut t = Table::default();
        assert!(t.holds_nothing());
        t.add(&p("c/n"), p("/pend/c/n"), false);
        assert!(!t.holds_nothing());
        t.remove(&p("c/n"));
        assert!(t.holds_nothing());
        committed(&mut t, &[("c/a", 1), ("c/b", 1), ("c/sub/x", 1), ("c.other/z", 2), ("c", 3)]);
        t.add(&p("c/b"), p("/pend/c/b"), false);
        t.add(&p("c/n"), p("/pend/c/n"), false);
        let mut seen: Vec<(String, String)> =
            t.visible_below(Path::new("c")).map(|(r, c)| (r.display().to_string(), c.display().to_string())).collect();
        seen.sort();
        assert_eq!(
            seen,
            [("c/a", "/c/1/c/a"), ("c/b", "/pend/c/b"), ("c/n", "/pend/c/n"), ("c/sub/x", "/c/1/c/sub/x")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert!(t.any_below(Path::new("c/sub")));
        assert!(!t.any_below(Path::new("c/sub/x")));
        assert!(!t.any_below(Path::new("d")));
    }

    #[test]
    fn refreshing_committed_files_forgets_removals_of_datasets_that_left_the_cache() {
        let mut t = Table::default();
        committed(&mut t, &[("c/a", 1), ("c/b", 1)]);
        t.remove(&p("c/a"));
        committed(&mut t, &[("c/a", 1), ("c/b", 1)]);
        assert!(t.held(&p("c/a")).is_none(), "still removed while dataset 1 is cached");
        assert_eq!(t.counts().removed, 1);
        // a new version (dataset 2) replaced dataset 1 without the file
        committed(&mut t, &[("c/b", 2)]);
        assert_eq!(t.counts().removed, 0);
        assert!(t.held(&p("c/b")).is_some());
    }

    #[test]
    fn a_directory_removed_elsewhere_takes_what_was_written_before() {
        let mut t = Table::default();
        committed(&mut t, &[("c/a", 1)]);
        t.epoch = 4;
        let old = t.add(&p("c/old"), p("/pend/c/old"), false);
        t.get_mut(old).unwrap().epoch = 3;
        t.add(&p("c/new"), p("/pend/c/new"), false);
        t.add(&p("d/x"), p("/pend/d/x"), false);
        let bytes = t.remove_below(Path::new("c"), 4);
        assert_eq!(bytes, vec![p("/pend/c/old")]);
        assert!(t.held(&p("c/a")).is_none() && t.held(&p("c/old")).is_none());
        assert!(t.held(&p("c/new")).is_some() && t.held(&p("d/x")).is_some());
        assert_eq!(t.removed_by_name().get("ds1"), Some(&vec![p("c/a")]));
    }

    #[test]
    fn changes_are_taken_once() {
        let mut t = Table::default();
        t.record(Change::RemovedDir { dir: p("c"), epoch: 3 });
        assert_eq!(t.counts().changes, 1);
        assert_eq!(t.take_changes().len(), 1);
        assert!(t.take_changes().is_empty());
    }
}
