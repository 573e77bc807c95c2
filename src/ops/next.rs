//! What the next run would restart from, for job scripts (`scr_index --restart`): after a
//! crash the batch script runs outside MPI and, in transparent mode, sees no checkpoint files
//! in the prefix (they are in node-local cache). This reads what the next `SCR_Init` reads and
//! decides as it does (`crate::runtime` restart): the newest checkpoint complete in cache (this
//! node's control directory: its ranks' filemaps, each file present with its size) or in the
//! prefix's index (the current one first, never a failed or incomplete one, only with
//! `SCR_FETCH=1`); on a tie the cached copy; with `SCR_CURRENT` only a checkpoint of that
//! name (the runtime's name rule, `runtime::wanted_name`). A cached checkpoint whose ranks are not all on
//! this node is reported with the ranks seen here (other nodes' caches are not visible), and
//! the prefix checkpoint a restart falls back to when those caches are gone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::OpResult;
use crate::state::filemap::{DatasetRecord, Filemap};
use crate::state::index::Index;

/// The answer.
#[derive(Debug, Serialize)]
pub struct Next {
    /// The prefix directory examined.
    pub(crate) prefix: PathBuf,
    /// What the next run would load; none: it starts from the beginning.
    pub checkpoint: Option<Choice>,
    /// The checkpoint in the prefix a restart uses if the cached one cannot be.
    pub(crate) fallback: Option<Choice>,
    /// What was not readable, or why nothing is offered.
    pub(crate) notes: Vec<String>,
}

/// One checkpoint a restart would load.
#[derive(Debug, Serialize)]
pub struct Choice {
    /// The dataset id.
    pub(crate) id: u64,
    /// The checkpoint's name.
    pub(crate) name: String,
    /// `cache` or `prefix`.
    pub(crate) from: &'static str,
    /// Processes that wrote it.
    pub(crate) ranks: u32,
    /// From cache: this host.
    pub(crate) host: Option<String>,
    /// From cache: the ranks whose part is intact on this host (empty from the prefix).
    pub(crate) ranks_here: Vec<u32>,
    /// Its files (from cache: those of the ranks here).
    pub(crate) files: u64,
    /// Its size in bytes (from cache: that of the ranks here).
    pub(crate) bytes: u64,
    /// Where the bytes are: cache dataset directories, or the prefix.
    pub(crate) dirs: Vec<PathBuf>,
    /// The application's directories of its files, relative to the prefix (from cache: those
    /// of the ranks here; a file directly in the prefix by its name), at most 8.
    pub(crate) paths: Vec<String>,
}

impl Choice {
    /// Whether every rank's part was seen (always, from the prefix).
    pub(crate) fn whole(&self) -> bool {
        self.from == "prefix" || self.ranks_here.len() as u32 == self.ranks
    }
}

/// What the next run in `prefix` would restart from (`prefix` holds `.scr`, else nothing).
pub fn next(prefix: &Path) -> OpResult<Next> {
    let mut out = Next { prefix: prefix.to_path_buf(), checkpoint: None, fallback: None, notes: Vec::new() };
    if !prefix.join(crate::paths::SCR_DIR).is_dir() {
        out.notes.push(format!("{} has no .scr directory: no job has checkpointed there", prefix.display()));
        return Ok(out);
    }
    let (layout, settings) = super::scavenge::job_context(Some(&prefix.to_string_lossy()))?;
    // SCR_CURRENT: the runtime offers only a checkpoint of that name, from cache or prefix
    let wanted = settings.current.as_deref();
    let is_wanted = |name: &str| crate::runtime::wanted_name(wanted, name);
    let cached = cached(&layout.filemaps(), &is_wanted, settings.file_buf_size, &mut out.notes);
    let in_prefix = if settings.fetch {
        match Index::load(&layout.index()) {
            Ok(ix) => {
                ix.restart_candidates(&[]).into_iter().find(|id| is_wanted(&ix.datasets[id].desc.name)).map(|id| {
                    let e = &ix.datasets[&id];
                    Choice {
                        id,
                        name: e.desc.name.clone(),
                        from: "prefix",
                        ranks: e.desc.ranks,
                        host: None,
                        ranks_here: Vec::new(),
                        files: e.desc.files,
                        bytes: e.desc.size,
                        dirs: vec![prefix.to_path_buf()],
                        paths: Vec::new(),
                    }
                })
            }
            Err(e) => {
                out.notes.push(format!("{e}; the prefix's checkpoints are not considered"));
                None
            }
        }
    } else {
        out.notes.push("SCR_FETCH=0: a restart does not read checkpoints from the prefix".into());
        None
    };
    match (cached, in_prefix) {
        (Some(c), p) if p.as_ref().is_none_or(|p| p.id <= c.id) => {
            out.fallback = p.filter(|_| !c.whole());
            out.checkpoint = Some(c);
        }
        (_, p) => out.checkpoint = p,
    }
    if out.checkpoint.is_none() {
        out.notes.push(match wanted {
            Some(w) => format!(
                "SCR_CURRENT={w}: no complete checkpoint of that name in this node's cache or in the prefix's index"
            ),
            None => "no complete checkpoint in this node's cache or in the prefix's index".into(),
        });
    }
    Ok(out)
}

/// The newest checkpoint complete in this node's cache for every rank whose filemap is here.
fn cached(
    filemaps: &[(i32, PathBuf)],
    wanted: &dyn Fn(&str) -> bool,
    buf_size: usize,
    notes: &mut Vec<String>,
) -> Option<Choice> {
    let mut maps = Vec::new();
    for (rank, path) in filemaps {
        match Filemap::load(path) {
            Ok(fm) => maps.push((*rank as u32, fm)),
            Err(e) => notes.push(format!("{e}; rank {rank}'s cached data is not considered")),
        }
    }
    let ids: BTreeSet<u64> = maps.iter().flat_map(|(_, fm)| fm.datasets.keys().copied()).collect();
    for id in ids.into_iter().rev() {
        let parts: Vec<(u32, &DatasetRecord)> =
            maps.iter().filter_map(|(r, fm)| fm.datasets.get(&id).map(|rec| (*r, rec))).collect();
        let Some((_, first)) = parts.first() else { continue };
        if !first.desc.checkpoint || !wanted(&first.desc.name) {
            continue;
        }
        // each file present with its size (the runtime then checks CRC32s at restart)
        let intact = |rec: &DatasetRecord| crate::redundancy::check_local(rec, None, buf_size);
        if let Some((r, why)) = parts.iter().find_map(|(r, rec)| intact(rec).err().map(|w| (r, w))) {
            notes.push(format!("cached checkpoint {} (dataset {id}): rank {r}: {why}", first.desc.name));
            continue;
        }
        let files = parts.iter().flat_map(|(_, rec)| rec.files.iter());
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for f in files.clone() {
            if dirs.len() < 8 {
                let dir = f.rel.parent().filter(|p| !p.as_os_str().is_empty());
                dirs.insert(dir.unwrap_or(&f.rel).to_string_lossy().into_owned());
            }
        }
        return Some(Choice {
            id,
            name: first.desc.name.clone(),
            from: "cache",
            ranks: first.desc.ranks,
            host: Some(crate::identity::host_name()),
            ranks_here: parts.iter().map(|(r, _)| *r).collect(),
            files: files.clone().count() as u64,
            bytes: files.map(|f| f.size).sum(),
            dirs: parts.iter().map(|(_, rec)| rec.dir.clone()).collect::<BTreeSet<_>>().into_iter().collect(),
            paths: dirs.into_iter().collect(),
        });
    }
    None
}

/// Ranks as ranges: `0-3,6`.
fn ranges(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if i == j { ranks[i].to_string() } else { format!("{}-{}", ranks[i], ranks[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The answer as `key: value` lines.
pub fn describe(n: &Next) -> String {
    let mut out = String::new();
    let Some(c) = &n.checkpoint else {
        out.push_str("checkpoint: none (the next run starts from the beginning)\n");
        for note in &n.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        return out;
    };
    out.push_str(&format!("checkpoint: {}\ndataset: {}\nfrom: {}\n", c.name, c.id, c.from));
    if let Some(host) = &c.host {
        let others = if c.whole() {
            String::new()
        } else {
            "; the other ranks' parts are in other nodes' caches, not visible here".into()
        };
        out.push_str(&format!("nodes: {host} (ranks {} of {}){others}\n", ranges(&c.ranks_here), c.ranks));
    }
    out.push_str(&format!("files: {} ({} bytes)\n", c.files, c.bytes));
    for d in &c.dirs {
        out.push_str(&format!("location: {}\n", d.display()));
    }
    if !c.paths.is_empty() {
        out.push_str(&format!(
            "paths: {} (below {}, where the application finds them)\n",
            c.paths.join(" "),
            n.prefix.display()
        ));
    }
    if let Some(f) = &n.fallback {
        out.push_str(&format!("fallback: {} (dataset {}) in the prefix, if those caches are gone\n", f.name, f.id));
    }
    for note in &n.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn rank_ranges() {
        assert_eq!(super::ranges(&[0, 1, 2, 3]), "0-3");
        assert_eq!(super::ranges(&[0, 2, 3, 5]), "0,2-3,5");
        assert_eq!(super::ranges(&[]), "");
    }
}
