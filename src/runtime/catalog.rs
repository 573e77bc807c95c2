//! The restart catalog: every file of the checkpoint loaded for restart, known to every rank
//! (built at `SCR_Start_restart`, see `restart_files.rs`), so `SCR_Route_file` can answer for
//! any of them locally, and `SCR_Restart_info`/`SCR_Restart_file` can list them.
//!
//! For each file: its name below the prefix, the rank that wrote it (in the run that wrote the
//! checkpoint), its size and CRC32, and its copies in node caches (the writer's, and copies
//! made for other ranks at an earlier attempt). Where [`Catalog::route`] sends a rank:
//!
//! 1. its own file: its cache (or the prefix, when the restart reads in place);
//! 2. a copy in a cache on its own node;
//! 3. the prefix, when the checkpoint is complete there: read in place, after its size and
//!    CRC32 were checked once by this rank (a shared file: once for all ranks, when the catalog
//!    was built, see [`Catalog::checked`]);
//! 4. otherwise the file is only in a cache on another node: the request is remembered, and
//!    [`plan_copies`] decides at `SCR_Complete_restart` which holder sends it to whom.
//!
//! Plain data and decisions, no MPI and no I/O except the check of a prefix copy.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RuntimeError;
use crate::paths::Prefix;

/// One file of the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Entry {
    /// Its name below the prefix.
    pub rel: PathBuf,
    /// The rank that wrote it, numbered as in the run that wrote the checkpoint (`None`: a
    /// shared file several ranks wrote, which is always in the prefix).
    pub writer: Option<u32>,
    pub size: u64,
    pub crc: Option<u32>,
}

/// A copy of a file in a node's cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Copy {
    /// The rank of this run that holds it.
    pub rank: i32,
    pub path: PathBuf,
}

/// What one rank of this run contributes to the catalog: its node, the files it wrote (with
/// where they are in its cache; `None` when the restart reads them from the prefix), and the
/// files of other ranks it received at an earlier attempt.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Part {
    pub node: u32,
    pub files: Vec<(Entry, Option<PathBuf>)>,
    pub received: Vec<(PathBuf, PathBuf)>,
}

/// Why a file cannot be handed out.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Miss {
    /// No file of the checkpoint has this name.
    Unknown,
    /// Only a cache on another node holds it (the rank of this run holding it): the checkpoint
    /// is not in the prefix, or its prefix copy failed its check (`prefix` says why).
    Elsewhere { holder: i32, writer: Option<u32>, prefix: Option<String> },
    /// The prefix copy does not match what was recorded.
    Damaged(String),
}

/// A file to send at `SCR_Complete_restart`: entry, holder, receiver.
pub(super) type Move = (usize, i32, i32);

/// Every file of a checkpoint and where its copies are.
#[derive(Debug, Clone)]
pub(super) struct Catalog {
    /// Processes that wrote the checkpoint.
    pub writers: u32,
    /// Sorted by writer, then name; shared files last.
    pub entries: Vec<Entry>,
    copies: Vec<Vec<Copy>>,
    by_rel: HashMap<PathBuf, usize>,
    /// The node of each rank of this run (empty when the catalog came from the prefix).
    nodes: Vec<u32>,
    /// The checkpoint is complete in the prefix.
    in_prefix: bool,
    /// Prefix copies this rank checked, or all ranks did together.
    verified: HashSet<usize>,
    /// Prefix copies all ranks found damaged together: why.
    damaged: HashMap<usize, String>,
    /// Files this rank asked for that only a cache on another node holds.
    pub requests: BTreeSet<usize>,
    /// Other failed routes of this rank (unknown names, damaged prefix copies).
    pub failures: usize,
}

impl Catalog {
    /// A catalog from every rank's [`Part`] (rank order), for a checkpoint written by this
    /// run's number of processes (writer `r` is rank `r`), with its `shared` files.
    pub fn from_parts(parts: Vec<Part>, shared: Vec<Entry>, in_prefix: bool) -> Catalog {
        let writers = parts.len() as u32;
        let nodes = parts.iter().map(|p| p.node).collect();
        let mut listed: Vec<(Entry, Option<Copy>)> = Vec::new();
        let mut received = Vec::new();
        for (rank, part) in parts.into_iter().enumerate() {
            for (e, path) in part.files {
                listed.push((e, path.map(|path| Copy { rank: rank as i32, path })));
            }
            received.extend(part.received.into_iter().map(|(rel, path)| (rel, Copy { rank: rank as i32, path })));
        }
        listed.extend(shared.into_iter().map(|e| (e, None)));
        let mut cat = Catalog::new(writers, Vec::new(), in_prefix);
        cat.nodes = nodes;
        listed.sort_by(|a, b| order(&a.0).cmp(&order(&b.0)));
        for (e, copy) in listed {
            cat.by_rel.insert(e.rel.clone(), cat.entries.len());
            cat.entries.push(e);
            cat.copies.push(copy.into_iter().collect());
        }
        for (rel, copy) in received {
            if let Some(&i) = cat.by_rel.get(&rel) {
                cat.copies[i].push(copy);
            }
        }
        cat
    }

    /// A catalog of a checkpoint read in place from the prefix (no cached copies).
    pub fn new(writers: u32, mut entries: Vec<Entry>, in_prefix: bool) -> Catalog {
        entries.sort_by(|a, b| order(a).cmp(&order(b)));
        let by_rel = entries.iter().enumerate().map(|(i, e)| (e.rel.clone(), i)).collect();
        Catalog {
            writers,
            copies: vec![Vec::new(); entries.len()],
            entries,
            by_rel,
            nodes: Vec::new(),
            in_prefix,
            verified: HashSet::new(),
            damaged: HashMap::new(),
            requests: BTreeSet::new(),
            failures: 0,
        }
    }

    /// The entry named `rel`.
    pub fn find(&self, rel: &Path) -> Option<usize> {
        self.by_rel.get(rel).copied()
    }

    /// The shared files (always read in the prefix).
    pub fn shared(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.writer.is_none())
    }

    /// The prefix copy of `rel` was checked for every rank at once: `problem` says why it is
    /// refused, if it is. [`Catalog::route`] then takes this verdict instead of reading it.
    pub fn checked(&mut self, rel: &Path, problem: Option<String>) {
        let Some(i) = self.find(rel) else { return };
        match problem {
            None => {
                self.verified.insert(i);
            }
            Some(why) => {
                self.damaged.insert(i, why);
            }
        }
    }

    /// Where rank `me` (on `node`) reads file `rel`: its own copy, a copy on its node, or the
    /// prefix copy once it checked out (`verify`: its CRC32 too, read with a buffer of this
    /// many bytes; `None`: its size). A miss is remembered ([`Catalog::requests`],
    /// [`Catalog::failures`]).
    pub fn route(
        &mut self,
        rel: &Path,
        me: i32,
        node: u32,
        prefix: &Prefix,
        verify: Option<usize>,
    ) -> Result<PathBuf, Miss> {
        let Some(i) = self.find(rel) else {
            self.failures += 1;
            return Err(Miss::Unknown);
        };
        let copies = &self.copies[i];
        if let Some(c) = copies.iter().find(|c| c.rank == me) {
            return Ok(c.path.clone());
        }
        if let Some(c) = copies.iter().find(|c| self.nodes.get(c.rank as usize) == Some(&node)) {
            return Ok(c.path.clone());
        }
        let in_prefix = prefix.join(rel);
        let mut problem = None;
        if self.in_prefix || self.entries[i].writer.is_none() {
            if self.verified.contains(&i) {
                return Ok(in_prefix);
            }
            let checked = match self.damaged.get(&i) {
                Some(why) => Err(why.clone()),
                None => check(&in_prefix, &self.entries[i], verify).map_err(|e| e.to_string()),
            };
            match checked {
                Ok(()) => {
                    self.verified.insert(i);
                    return Ok(in_prefix);
                }
                Err(why) => problem = Some(why),
            }
        }
        match (self.holder(i), problem) {
            (Some(holder), prefix) => {
                self.requests.insert(i);
                Err(Miss::Elsewhere { holder, writer: self.entries[i].writer, prefix })
            }
            (None, Some(why)) => {
                self.failures += 1;
                Err(Miss::Damaged(why))
            }
            (None, None) => {
                self.failures += 1;
                Err(Miss::Damaged("no cache holds a copy of it, and the checkpoint is not in the prefix".into()))
            }
        }
    }

    /// Where rank `rank` holds a copy of entry `i`.
    pub fn copy_of(&self, i: usize, rank: i32) -> Option<&Path> {
        self.copies.get(i)?.iter().find(|c| c.rank == rank).map(|c| c.path.as_path())
    }

    /// The copy a holder sends for entry `i`: the writer's own, else the first.
    fn holder(&self, i: usize) -> Option<i32> {
        let copies = &self.copies[i];
        copies.iter().find(|c| Some(c.rank as u32) == self.entries[i].writer).or(copies.first()).map(|c| c.rank)
    }
}

/// Rank 0 at `SCR_Complete_restart` when some rank reported its restart invalid: the files to
/// send so the next attempt at the same checkpoint can succeed, or `None` when the failure has
/// another cause (a rank that failed without asking for an unreachable file, or after an
/// unknown name or a damaged prefix copy). `asked` holds each rank's (valid, requests,
/// failures). A file goes once to each node that asked for it, to the lowest rank there.
pub(super) fn plan_copies(cat: &Catalog, asked: &[(bool, Vec<usize>, usize)]) -> Option<Vec<Move>> {
    let explained = asked.iter().all(|(valid, requests, failures)| *valid || (!requests.is_empty() && *failures == 0));
    if !explained {
        return None;
    }
    let mut seen: BTreeSet<(u32, usize)> = BTreeSet::new();
    let mut moves = Vec::new();
    for (rank, (_, requests, _)) in asked.iter().enumerate() {
        let node = cat.nodes.get(rank).copied()?;
        for &i in requests {
            if i >= cat.entries.len() {
                return None;
            }
            let holder = cat.holder(i)?;
            if seen.insert((node, i)) {
                moves.push((i, holder, rank as i32));
            }
        }
    }
    (!moves.is_empty()).then_some(moves)
}

/// The catalog's order: files of writer 0, 1, ... by name, then shared files by name.
fn order(e: &Entry) -> (bool, Option<u32>, &Path) {
    (e.writer.is_none(), e.writer, &e.rel)
}

/// Check a prefix copy against its entry (`verify`: its CRC32 too, with this buffer size).
fn check(path: &Path, e: &Entry, verify: Option<usize>) -> Result<(), RuntimeError> {
    let file = |why: String| RuntimeError::File { path: path.to_path_buf(), why };
    let (Some(buf), Some(want)) = (verify, e.crc) else {
        return crate::paths::size_problem(path, e.size).map_or(Ok(()), |why| Err(file(why)));
    };
    let got = crate::checksum::file_crc(path, buf)?;
    if got.size != e.size {
        return Err(file(format!("size is {} bytes, {} were recorded", got.size, e.size)));
    }
    crc_mismatch(got.crc, want).map_or(Ok(()), |why| Err(file(why)))
}

/// Why a file whose CRC32 is `got` is refused, if `want` was recorded for it.
pub(super) fn crc_problem(path: &Path, got: u32, want: u32) -> Option<String> {
    crc_mismatch(got, want).map(|why| format!("{}: {why}", path.display()))
}

/// What [`crc_problem`] says after the file's path.
fn crc_mismatch(got: u32, want: u32) -> Option<String> {
    (got != want).then(|| format!("CRC32 is {got:#010x}, {want:#010x} was recorded (the data is corrupt)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(writer: u32, rel: &str, data: &[u8]) -> Entry {
        Entry { rel: rel.into(), writer: Some(writer), size: data.len() as u64, crc: Some(crc32fast::hash(data)) }
    }

    /// Ranks 0..4 on nodes [0, 0, 1, 1]; each wrote `ckpt/rank_<r>`, rank 0 also `ckpt/header`.
    fn four(in_prefix: bool) -> Catalog {
        let parts = (0..4u32)
            .map(|r| {
                let mut files =
                    vec![(entry(r, &format!("ckpt/rank_{r}"), b"data"), Some(PathBuf::from(format!("/c{r}"))))];
                if r == 0 {
                    files.push((entry(0, "ckpt/header", b"head"), Some(PathBuf::from("/c0h"))));
                }
                Part { node: r / 2, files, received: Vec::new() }
            })
            .collect();
        Catalog::from_parts(parts, Vec::new(), in_prefix)
    }

    #[test]
    fn own_then_same_node_then_prefix_then_a_request() {
        let d = tempfile::tempdir().unwrap();
        let prefix = Prefix::new(d.path());
        std::fs::create_dir_all(d.path().join("ckpt")).unwrap();
        let mut cat = four(false);
        assert_eq!(cat.writers, 4);
        let names: Vec<_> = cat.entries.iter().map(|e| (e.writer, e.rel.display().to_string())).collect();
        assert_eq!(names[..2], [(Some(0), "ckpt/header".to_string()), (Some(0), "ckpt/rank_0".to_string())]);
        assert_eq!(cat.route(Path::new("ckpt/rank_1"), 1, 0, &prefix, Some(4096)), Ok("/c1".into()));
        assert_eq!(cat.route(Path::new("ckpt/header"), 1, 0, &prefix, Some(4096)), Ok("/c0h".into()));
        // not in the prefix: rank 2 on node 1 must ask
        assert_eq!(
            cat.route(Path::new("ckpt/header"), 2, 1, &prefix, Some(4096)),
            Err(Miss::Elsewhere { holder: 0, writer: Some(0), prefix: None })
        );
        assert_eq!(cat.route(Path::new("ckpt/nope"), 2, 1, &prefix, Some(4096)), Err(Miss::Unknown));
        assert_eq!((cat.requests.len(), cat.failures), (1, 1));

        // in the prefix: checked once, a damaged copy refused
        let mut cat = four(true);
        std::fs::write(d.path().join("ckpt/header"), b"head").unwrap();
        assert_eq!(cat.route(Path::new("ckpt/header"), 2, 1, &prefix, Some(4096)), Ok(d.path().join("ckpt/header")));
        std::fs::write(d.path().join("ckpt/rank_0"), b"dat!").unwrap();
        // size only when verification is off
        assert_eq!(cat.route(Path::new("ckpt/rank_0"), 3, 1, &prefix, None), Ok(d.path().join("ckpt/rank_0")));
        assert!(cat.requests.is_empty());
        // a damaged prefix copy: the cached one is asked for instead
        let mut cat = four(true);
        let e = cat.route(Path::new("ckpt/rank_0"), 3, 1, &prefix, Some(4096)).unwrap_err();
        assert!(matches!(&e, Miss::Elsewhere { holder: 0, prefix: Some(w), .. } if w.contains("CRC32")), "{e:?}");
        assert_eq!((cat.requests.len(), cat.failures), (1, 0));
        // and with no cached copy left, it is a failure
        let mut cat = Catalog::new(4, vec![entry(0, "ckpt/rank_0", b"data")], true);
        let e = cat.route(Path::new("ckpt/rank_0"), 3, 1, &prefix, Some(4096)).unwrap_err();
        assert!(matches!(&e, Miss::Damaged(w) if w.contains("CRC32")), "{e:?}");
        assert_eq!((cat.requests.len(), cat.failures), (0, 1));
    }

    #[test]
    fn copies_go_once_per_node_and_only_when_that_explains_every_failure() {
        let cat = four(false);
        let h = cat.find(Path::new("ckpt/header")).unwrap();
        let r0 = cat.find(Path::new("ckpt/rank_0")).unwrap();
        let asked = vec![(true, vec![], 0), (true, vec![], 0), (false, vec![h], 0), (false, vec![h, r0], 0)];
        assert_eq!(plan_copies(&cat, &asked), Some(vec![(h, 0, 2), (r0, 0, 3)]));
        // a rank that failed for another reason: the checkpoint failed
        let mut other = asked.clone();
        other[1] = (false, vec![], 0);
        assert_eq!(plan_copies(&cat, &other), None);
        other[1] = (true, vec![], 0);
        other[3].2 = 1;
        assert_eq!(plan_copies(&cat, &other), None);
        // a received copy counts for its node
        let mut parts: Vec<Part> = (0..4).map(|r| Part { node: r / 2, ..Default::default() }).collect();
        parts[0].files.push((entry(0, "ckpt/header", b"head"), Some("/c0h".into())));
        parts[2].received.push(("ckpt/header".into(), "/copy".into()));
        let mut cat = Catalog::from_parts(parts, Vec::new(), false);
        let prefix = Prefix::new(Path::new("/nonexistent"));
        assert_eq!(cat.route(Path::new("ckpt/header"), 3, 1, &prefix, Some(4096)), Ok("/copy".into()));
    }

    #[test]
    fn a_shared_file_is_listed_last_and_read_in_the_prefix() {
        let d = tempfile::tempdir().unwrap();
        let prefix = Prefix::new(d.path());
        std::fs::create_dir_all(d.path().join("ckpt")).unwrap();
        std::fs::write(d.path().join("ckpt/all"), b"everyone").unwrap();
        let shared = Entry { writer: None, ..entry(0, "ckpt/all", b"everyone") };
        let parts = vec![Part { files: vec![(entry(0, "ckpt/z", b"z"), Some("/z".into()))], ..Default::default() }];
        let mut cat = Catalog::from_parts(parts, vec![shared], false);
        assert_eq!(cat.entries.last().unwrap().writer, None);
        // the checkpoint is not in the prefix, its shared file is
        assert_eq!(cat.route(Path::new("ckpt/all"), 0, 0, &prefix, Some(4096)), Ok(d.path().join("ckpt/all")));
        std::fs::write(d.path().join("ckpt/all"), b"everyon!").unwrap();
        let mut cat = Catalog::new(1, vec![Entry { writer: None, ..entry(0, "ckpt/all", b"everyone") }], false);
        assert!(matches!(cat.route(Path::new("ckpt/all"), 0, 0, &prefix, Some(4096)), Err(Miss::Damaged(_))));
        // checked for every rank at once: the verdict is taken as it is, the file not read
        assert_eq!(cat.shared().map(|e| e.rel.as_path()).collect::<Vec<_>>(), [Path::new("ckpt/all")]);
        let mut cat = Catalog::new(1, vec![Entry { writer: None, ..entry(0, "ckpt/all", b"everyone") }], false);
        cat.checked(Path::new("ckpt/all"), None);
        assert_eq!(cat.route(Path::new("ckpt/all"), 0, 0, &prefix, Some(4096)), Ok(d.path().join("ckpt/all")));
        std::fs::write(d.path().join("ckpt/all"), b"everyone").unwrap();
        let mut cat = Catalog::new(1, vec![Entry { writer: None, ..entry(0, "ckpt/all", b"everyone") }], false);
        cat.checked(Path::new("ckpt/all"), Some("damaged for all".into()));
        assert_eq!(
            cat.route(Path::new("ckpt/all"), 0, 0, &prefix, Some(4096)),
            Err(Miss::Damaged("damaged for all".into()))
        );
    }
}
