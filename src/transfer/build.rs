//! Building a dataset in the prefix: make a dataset directory whose ranks' parts were copied
//! there from node caches ([`super::scavenge`]) into an indexed dataset, as the SCR internals'
//! "Scavenge" section describes. No MPI: `scr_index --build ID` and the last step of a
//! scavenge run it, and so does `SCR_Init` on rank 0 before an elastic restart from cache
//! (`SCR_RESTART_ELASTIC`).
//!
//! 1. **Scan**: read every `<rank>.scrfilemap` in `.scr/scr.dataset.<id>/` (written by
//!    `scr_copy`); a rank's part is present when each of its files is in the prefix with its
//!    recorded size (CRC32s are checked later, by fetch, as SCR does), and its redundancy file
//!    is usable when its self-checking header reads back and matches.
//! 2. **Inspect**: the ranks with missing files, and the redundancy set of each.
//! 3. **Rebuild**: for each set that lost no more members than its scheme tolerates (XOR, RS,
//!    PARTNER; a member counts as lost when its data or its redundancy file is missing), the
//!    serial rebuild ([`crate::redundancy::serial`]) recreates the lost members' files and
//!    redundancy files from the survivors; each rebuilt file's CRC32 is checked against the one
//!    recorded when the dataset was encoded. A lost rank's old filemap is deleted before its
//!    files are rewritten and a new one written only after they check out, so a build cut short
//!    is redone, never mistaken for complete.
//! 4. **Publish**: `rank2file.scr` and `summary.scr` (what fetch reads), then the index entry,
//!    complete with its flush time; a dataset that cannot be completed is indexed as incomplete
//!    (a restart never uses it) and the missing ranks and files are named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::TransferError;
use crate::desc::Scheme;
use crate::error::{Error, Result};
use crate::redundancy::redfile::{self, FileEntry, Header};
use crate::redundancy::serial::{self, Member};
use crate::redundancy::stream::Part;
use crate::redundancy::RedInfo;
use crate::state::filemap::DatasetRecord;
use crate::state::index::{complete_entry, Index, IndexEntry};
use crate::state::layout::Layout;
use crate::state::rankfile::{self, RankFile, RankFileEntry, RankRed};
use crate::state::summary::{PrefixFile, Rank2File, Summary};

/// What a build found and did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The dataset id.
    pub(crate) id: u64,
    /// The dataset's name.
    pub(crate) name: String,
    /// The number of ranks that wrote it.
    pub(crate) ranks: u32,
    /// Every rank's files are in the prefix; the dataset is indexed as complete.
    pub complete: bool,
    /// Ranks whose files were rebuilt from redundancy data.
    pub(crate) rebuilt: Vec<u32>,
    /// What is still missing (when not complete).
    pub(crate) missing: Vec<String>,
    /// Other observations (damaged filemaps, ignored files).
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// A one-paragraph account for the user.
    pub fn describe(&self) -> String {
        let mut s = if self.complete {
            format!("dataset {} ({}) is complete in the prefix ({} ranks)", self.id, self.name, self.ranks)
        } else {
            format!("dataset {} ({}) is INCOMPLETE in the prefix and indexed as such", self.id, self.name)
        };
        if !self.rebuilt.is_empty() {
            s += &format!("; rebuilt the files of rank(s) {:?} from redundancy data", self.rebuilt);
        }
        for m in &self.missing {
            s += &format!("\n  missing: {m}");
        }
        for n in &self.notes {
            s += &format!("\n  note: {n}");
        }
        s
    }
}

/// One rank's part as found in the dataset directory.
#[derive(Default)]
struct Found {
    fm: Option<RankFile>,
    /// Why its data is not all there.
    data: Option<String>,
    /// Its redundancy file's header, when the file is usable.
    header: Option<Header>,
    /// Its redundancy file's path, when it has one.
    red_path: Option<PathBuf>,
}

/// The dataset name the rank filemaps of dataset `id` record, if any.
pub(crate) fn scanned_name(layout: &Layout, id: u64) -> Option<String> {
    let (fms, _) = read_rank_files(&layout.prefix_dataset_dir(id)).ok()?;
    fms.values().next().map(|f| f.desc.name.clone())
}

/// Whether a build moves the index's current marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Current {
    /// A scavenge's build: a complete checkpoint newer than the marked one becomes current
    /// (as SCR's scavenge does), so the next run restarts from what the job wrote last.
    Promote,
    /// `scr_index --build`: the marker stays where the user (or the library) left it.
    Keep,
}

/// Build dataset `id`; `piece` is the rebuild's buffer size; `current` says whether the
/// current marker may move to it. `Err` when nothing could be examined (no such directory, a
/// damaged index); an incomplete dataset is an `Ok` report with `complete: false`.
pub fn build(layout: &Layout, id: u64, piece: usize, current: Current) -> Result<Report> {
    let dir = layout.prefix_dataset_dir(id);
    layout.prefix.below(dir.strip_prefix(&layout.prefix.path).unwrap_or(&dir))?;
    if !dir.is_dir() {
        return Err(TransferError::NoDatasetDir { dir, scr_dir: layout.scr_dir() }.into());
    }
    // Nothing is changed unless the index can be updated afterwards (a damaged one is
    // rebuilt from the dataset directories here, a missing one created).
    Index::update(&layout.index(), |_| ())?;
    let (fms, damaged) = read_rank_files(&dir)?;
    let mut notes = damaged.clone();
    let Some(desc) = fms.values().find(|f| f.desc.id == id).map(|f| f.desc.clone()) else {
        if damaged.is_empty() && layout.summary(id).exists() {
            return build_flushed(layout, id, current);
        }
        return Err(TransferError::NothingToIndex { dir, damaged }.into());
    };
    let n = desc.ranks;
    let mut found: BTreeMap<u32, Found> = (0..n).map(|r| (r, Found::default())).collect();
    for (rank, fm) in fms {
        if fm.desc.id != id || rank >= n {
            notes.push(format!("{} does not belong to this dataset and is ignored", rankfile::file_name(rank)));
            continue;
        }
        let f = found.get_mut(&rank).expect("every rank has an entry");
        f.data = check_data(layout, &fm);
        if let Some(red) = fm.red.as_ref() {
            let path = dir.join(&red.info.file);
            f.header = check_red(&path, red, id);
            f.red_path = Some(path);
        }
        f.fm = Some(fm);
    }
    for (rank, f) in found.iter_mut() {
        if f.fm.is_none() {
            let why = damaged
                .iter()
                .find(|d| d.starts_with(&format!("{} ", rankfile::file_name(*rank))))
                .cloned()
                .unwrap_or_else(|| "no rank filemap: its files never arrived (a lost node, or a failed copy)".into());
            f.data = Some(why);
        }
    }

    let mut rebuilt = Vec::new();
    let mut unrecoverable: BTreeMap<u32, String> = BTreeMap::new();
    let lost: Vec<u32> = found.iter().filter(|(_, f)| f.data.is_some()).map(|(r, _)| *r).collect();
    if !lost.is_empty() {
        // Every set any rank reports, by set id.
        let mut sets: BTreeMap<usize, RedInfo> = BTreeMap::new();
        for f in found.values() {
            if let Some(red) = f.fm.as_ref().and_then(|fm| fm.red.as_ref()) {
                sets.entry(red.info.set_id).or_insert_with(|| red.info.clone());
            }
        }
        let mut todo: BTreeMap<usize, RedInfo> = BTreeMap::new();
        for &r in &lost {
            match sets.values().find(|s| s.ranks.contains(&(r as i32))) {
                Some(s) => {
                    todo.insert(s.set_id, s.clone());
                }
                None => {
                    unrecoverable.insert(
                        r,
                        "no redundancy data names this rank (SINGLE protection, or its whole set is lost)".into(),
                    );
                }
            }
        }
        for (sid, set) in todo {
            let members = set.ranks.len();
            let member_lost: Vec<usize> = (0..members)
                .filter(|&x| {
                    let f = &found[&(set.ranks[x] as u32)];
                    f.data.is_some() || f.header.is_none()
                })
                .collect();
            let lost_here: Vec<u32> =
                member_lost.iter().map(|&x| set.ranks[x] as u32).filter(|r| lost.contains(r)).collect();
            if !set.tolerates(&member_lost) {
                let ranks: Vec<i32> = member_lost.iter().map(|&x| set.ranks[x]).collect();
                let why = format!(
                    "set {sid} ({} of ranks {:?}) lost ranks {ranks:?} (data or redundancy file missing), more than it can \
                     rebuild",
                    set.scheme.name(),
                    set.ranks
                );
                for r in lost_here {
                    unrecoverable.insert(r, why.clone());
                }
                continue;
            }
            match rebuild_set(layout, id, &dir, &set, &found, &member_lost, piece) {
                Ok(fms) => {
                    for fm in fms {
                        let f = found.get_mut(&fm.rank).expect("a member");
                        rebuilt.push(fm.rank);
                        f.data = None;
                        f.fm = Some(fm);
                    }
                }
                Err(e) => {
                    for r in lost_here {
                        unrecoverable.insert(r, format!("rebuilding set {sid} failed: {e}"));
                    }
                }
            }
        }
    }
    rebuilt.sort_unstable();
    let mut missing: Vec<String> = found
        .iter()
        .filter_map(|(r, f)| f.data.as_ref().map(|d| (r, d)))
        .map(|(r, d)| match unrecoverable.get(r) {
            Some(u) => format!("rank {r}: {d}; {u}"),
            None => format!("rank {r}: {d}"),
        })
        .collect();
    missing.extend(desc.missing_shared(&layout.prefix.path));
    let complete = missing.is_empty();
    for f in found.values() {
        for e in f.fm.iter().flat_map(|fm| &fm.files) {
            if let Ok(p) = layout.prefix.below(&e.rel) {
                let _ = crate::paths::remove_file_if_exists(&crate::transfer::copy::part_name(&p));
            }
        }
    }
    if complete {
        let files: BTreeMap<u32, Vec<PrefixFile>> = found
            .iter()
            .map(|(r, f)| {
                let fm = f.fm.as_ref().expect("complete");
                (
                    *r,
                    fm.files
                        .iter()
                        .map(|e| PrefixFile { rel: e.rel.clone(), size: e.size, crc: e.crc, link: None })
                        .collect(),
                )
            })
            .collect();
        Rank2File { ranks: n, files }.save(&layout.rank2file(id))?;
        let scheme =
            found.values().find_map(|f| f.fm.as_ref()?.red.as_ref().map(|r| r.info.scheme)).unwrap_or(Scheme::Single);
        Summary { desc: desc.clone(), scheme: scheme.name().to_string() }.save(&layout.summary(id))?;
    }
    let now = crate::identity::iso_time(crate::identity::now_secs());
    Index::update(&layout.index(), |ix| {
        // A failed restart stays on record: the build checks sizes, not the data.
        let (fetches, failed, superseded_by) =
            ix.datasets.get(&id).map(|e| (e.fetches.clone(), e.failed, e.superseded_by)).unwrap_or_default();
        ix.datasets.insert(
            id,
            IndexEntry {
                desc: desc.clone(),
                complete,
                flushed: complete.then_some(now),
                flushing: false,
                failed,
                superseded_by,
                fetches,
            },
        );
        if current == Current::Promote {
            ix.promote_current(id);
        }
    })?;
    Ok(Report { id, name: desc.name, ranks: n, complete, rebuilt, missing, notes })
}

/// A dataset flushed by the library (summary and rank-to-file map, no rank filemaps): check
/// that its files are all there and index it.
fn build_flushed(layout: &Layout, id: u64, current: Current) -> Result<Report> {
    let summary = Summary::load(&layout.summary(id))?.expect("checked by the caller");
    let r2f = Rank2File::load(&layout.rank2file(id))?
        .ok_or_else(|| TransferError::FlushUnfinished { path: layout.rank2file(id), id })?;
    let mut missing = missing_files(layout, &r2f);
    missing.extend(summary.desc.missing_shared(&layout.prefix.path));
    let complete = missing.is_empty();
    let now = crate::identity::iso_time(crate::identity::now_secs());
    Index::update(&layout.index(), |ix| {
        let mut e = complete_entry(summary.desc.clone(), complete.then_some(now));
        e.complete = complete;
        if let Some(old) = ix.datasets.get(&id) {
            e.fetches = old.fetches.clone();
            e.failed = old.failed;
        }
        ix.datasets.insert(id, e);
        if current == Current::Promote {
            ix.promote_current(id);
        }
    })?;
    Ok(Report {
        id,
        name: summary.desc.name,
        ranks: r2f.ranks,
        complete,
        rebuilt: Vec::new(),
        missing,
        notes: vec!["flushed by the library (no scavenged files); checked its files".into()],
    })
}

/// Files of `r2f` missing from the prefix or of the wrong size, described.
pub(crate) fn missing_files(layout: &Layout, r2f: &Rank2File) -> Vec<String> {
    let mut out = Vec::new();
    for (rank, files) in &r2f.files {
        for f in files {
            match layout.prefix.below(&f.rel) {
                Err(e) => out.push(format!("rank {rank}: {e}")),
                Ok(p) => {
                    if let Some(why) = crate::paths::size_problem(&p, f.size) {
                        out.push(format!("rank {rank}: {}: {why}", p.display()));
                    }
                }
            }
        }
    }
    for r in 0..r2f.ranks {
        if !r2f.files.contains_key(&r) {
            out.push(format!("rank {r}: no files recorded"));
        }
    }
    out
}

/// The rank filemaps in `dir`, and a note for each damaged one (starting with its name).
fn read_rank_files(dir: &Path) -> Result<(BTreeMap<u32, RankFile>, Vec<String>)> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    let mut fms = BTreeMap::new();
    let mut damaged = Vec::new();
    let mut names: Vec<(u32, PathBuf)> =
        rd.flatten().filter_map(|e| Some((rankfile::rank_of(e.file_name().to_str()?)?, e.path()))).collect();
    names.sort();
    for (rank, path) in names {
        match RankFile::load(&path) {
            Ok(Some(fm)) if fm.rank == rank => {
                fms.insert(rank, fm);
            }
            Ok(Some(fm)) => {
                damaged.push(format!("{} names rank {} and is ignored", rankfile::file_name(rank), fm.rank))
            }
            Ok(None) => {}
            Err(e) => damaged.push(format!("{} is unusable: {e}", rankfile::file_name(rank))),
        }
    }
    Ok((fms, damaged))
}

/// Why a rank's data is not all in the prefix (`None`: it is).
fn check_data(layout: &Layout, fm: &RankFile) -> Option<String> {
    let mut problems = Vec::new();
    for e in &fm.files {
        if !e.complete {
            problems.push(format!("{} was not copied", e.rel.display()));
            continue;
        }
        let p = match layout.prefix.below(&e.rel) {
            Ok(p) => p,
            Err(err) => {
                problems.push(err.to_string());
                continue;
            }
        };
        match std::fs::metadata(&p) {
            Err(err) => problems.push(format!("{}: {err}", p.display())),
            Ok(m) if m.len() != e.size => {
                problems.push(format!("{}: {} bytes, {} were written", p.display(), m.len(), e.size))
            }
            Ok(_) => {}
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The header of a rank's redundancy file if the file is usable for a rebuild.
fn check_red(path: &Path, red: &RankRed, id: u64) -> Option<Header> {
    if !red.complete {
        return None;
    }
    let (h, payload) = redfile::read_header(path).ok()?;
    (h.desc.id == id && h.red.index == red.info.index && h.red.set_id == red.info.set_id && payload == h.red.payload())
        .then_some(h)
}

/// Rebuild the lost members of one set; returns the new rank filemaps of the rebuilt ranks.
fn rebuild_set(
    layout: &Layout,
    id: u64,
    dir: &Path,
    set: &RedInfo,
    found: &BTreeMap<u32, Found>,
    lost: &[usize],
    piece: usize,
) -> Result<Vec<RankFile>, TransferError> {
    let n = set.ranks.len();
    let member = |x: usize| &found[&(set.ranks[x] as u32)];
    let survivors: Vec<usize> = (0..n).filter(|x| !lost.contains(x)).collect();
    let template = survivors.iter().find_map(|&x| member(x).header.clone()).ok_or(TransferError::NoTemplate)?;
    let headers = survivors.iter().map(|&x| member(x).header.as_ref().expect("a survivor has a header"));
    let all: Vec<Vec<FileEntry>> =
        redfile::members_files(headers, n).map_err(|member| TransferError::NoFileList { member })?;
    let lost_red = |x: usize| -> RedInfo {
        let mut red = redfile::lost_member(&template.red, x, &all);
        red.file = dir.join(redfile::file_name(&red));
        red
    };
    // no part is read or rebuilt through a symbolic link below the prefix
    let parts = |x: usize| -> Result<Vec<Part>, TransferError> {
        all[x].iter().map(|e| Ok(Part { path: layout.prefix.below(&e.rel)?, size: e.size })).collect()
    };
    let parts = (0..n).map(parts).collect::<Result<Vec<_>, TransferError>>()?;
    // A lost rank is unmistakably lost from here on, even if this build stops half-way.
    for &x in lost {
        crate::paths::remove_file_if_exists(&layout.rank_filemap(id, set.ranks[x] as u32))?;
    }
    let members: Vec<Member> = (0..n)
        .zip(parts)
        .map(|(x, parts)| Member {
            parts,
            red_file: if lost.contains(&x) {
                lost_red(x).file
            } else {
                member(x).red_path.clone().expect("a survivor has a redundancy file")
            },
            lost: lost.contains(&x),
        })
        .collect();
    let crcs = serial::rebuild(&template.red, &members, piece)?;
    let mut out = Vec::new();
    for &x in lost {
        let red = lost_red(x);
        let rec = DatasetRecord {
            desc: template.desc.clone(),
            reddesc: template.reddesc.clone(),
            dir: dir.to_path_buf(),
            files: Vec::new(),
            complete: true,
            red: None,
        };
        let header = Header::new(&rec, &red, &all);
        let file =
            std::fs::OpenOptions::new().write(true).open(&red.file).map_err(|e| Error::io("open", &red.file, e))?;
        redfile::finish(&file, &red.file, red.payload(), &header)?;
        let mut files = Vec::new();
        // the CRC32s were taken as the rebuild wrote the bytes: no second read
        for (e, got) in all[x].iter().zip(&crcs[x]) {
            let p = layout.prefix.join(&e.rel);
            let Some(got) = *got else {
                return Err(Error::Integrity { path: p, why: "not every byte of it was rebuilt".into() }.into());
            };
            if let Some(crc) = e.crc.filter(|crc| *crc != got) {
                let why = format!("rebuilt data has CRC32 {got:#010x}, {crc:#010x} was recorded");
                return Err(Error::Integrity { path: p, why }.into());
            }
            files.push(RankFileEntry { rel: e.rel.clone(), size: e.size, crc: Some(got), complete: true });
        }
        let size = std::fs::metadata(&red.file).map(|m| m.len()).map_err(|e| Error::io("stat", &red.file, e))?;
        let name = PathBuf::from(red.file.file_name().expect("a file name"));
        let rank = set.ranks[x] as u32;
        let fm = RankFile {
            rank,
            desc: template.desc.clone(),
            files,
            red: Some(RankRed { info: RedInfo { file: name, ..red }, size, complete: true }),
        };
        fm.save(&layout.rank_filemap(id, rank))?;
        out.push(fm);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::Prefix;
    use crate::state::dataset::DatasetDesc;

    fn setup() -> (tempfile::TempDir, Layout) {
        let d = tempfile::tempdir().unwrap();
        let l = Layout::prefix_only(Prefix::new(d.path()));
        std::fs::create_dir_all(l.prefix_dataset_dir(1)).unwrap();
        (d, l)
    }

    fn desc(ranks: u32) -> DatasetDesc {
        DatasetDesc { files: ranks as u64, ..DatasetDesc::sample(1, "ckpt.1", ranks) }
    }

    /// What scr_copy leaves for one rank without redundancy: its file and its filemap.
    fn scavenged(l: &Layout, ranks: u32, rank: u32, data: &[u8]) {
        let rel = PathBuf::from(format!("ckpt.1/rank_{rank}"));
        let p = l.prefix.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
        let crc = Some(crc32fast::hash(data));
        let files = vec![RankFileEntry { rel, size: data.len() as u64, crc, complete: true }];
        RankFile { rank, desc: desc(ranks), files, red: None }.save(&l.rank_filemap(1, rank)).unwrap();
    }

    #[test]
    fn a_complete_dataset_is_published_and_indexed() {
        let (_d, l) = setup();
        scavenged(&l, 2, 0, b"zero");
        scavenged(&l, 2, 1, b"one!");
        let part = l.prefix.path.join("ckpt.1/.rank_1.scrpart");
        std::fs::write(&part, b"half").unwrap();
        let r = build(&l, 1, 4096, Current::Promote).unwrap();
        assert!(r.complete && r.rebuilt.is_empty() && r.missing.is_empty(), "{r:?}");
        let r2f = Rank2File::load(&l.rank2file(1)).unwrap().unwrap();
        assert_eq!(r2f.files[&1][0].crc, Some(crc32fast::hash(b"one!")));
        assert_eq!(Summary::load(&l.summary(1)).unwrap().unwrap().scheme, "SINGLE");
        let ix = Index::load(&l.index()).unwrap();
        assert!(ix.datasets[&1].complete && ix.datasets[&1].flushed.is_some());
        assert!(!part.exists(), "a temporary file of a cut-short flush is removed");
    }

    #[test]
    fn missing_and_damaged_parts_are_named_and_the_dataset_indexed_incomplete() {
        let (_d, l) = setup();
        scavenged(&l, 3, 0, b"zero");
        scavenged(&l, 3, 1, b"one!");
        std::fs::write(l.prefix.path.join("ckpt.1/rank_1"), b"on").unwrap();
        scavenged(&l, 3, 2, b"two!");
        let fm2 = l.rank_filemap(1, 2);
        let mut bytes = std::fs::read(&fm2).unwrap();
        let n = bytes.len();
        bytes[n - 5] ^= 0x02;
        std::fs::write(&fm2, &bytes).unwrap();
        let r = build(&l, 1, 4096, Current::Promote).unwrap();
        assert!(!r.complete, "{r:?}");
        assert_eq!(r.missing.len(), 2, "{r:?}");
        assert!(r.missing[0].starts_with("rank 1:") && r.missing[0].contains("2 bytes, 4 were written"), "{r:?}");
        assert!(r.missing[1].starts_with("rank 2:") && r.missing[1].contains("unusable"), "{r:?}");
        assert!(r.missing.iter().all(|m| m.contains("no redundancy data names this rank")), "{r:?}");
        assert!(!l.summary(1).exists(), "no summary for an incomplete dataset");
        let ix = Index::load(&l.index()).unwrap();
        assert!(!ix.datasets[&1].complete && ix.datasets[&1].flushed.is_none());
    }

    #[test]
    fn a_damaged_index_is_rebuilt_and_the_build_goes_on() {
        let (_d, l) = setup();
        scavenged(&l, 1, 0, b"zero");
        std::fs::write(l.index(), b"not an index").unwrap();
        build(&l, 1, 4096, Current::Promote).unwrap();
        assert!(l.summary(1).exists() && l.rank2file(1).exists());
        assert!(Index::load(&l.index()).unwrap().datasets.contains_key(&1));
        let kept = std::fs::read_dir(l.scr_dir()).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("index.scr.damaged.")
                && std::fs::read(e.path()).unwrap() == b"not an index"
        });
        assert!(kept, "the damaged index is kept aside");
        let e = build(&l, 7, 4096, Current::Promote).unwrap_err().to_string();
        assert!(e.contains("scr.dataset.7: no such dataset directory"), "{e}");
    }
}
