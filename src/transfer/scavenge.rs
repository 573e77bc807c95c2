//! The node side of a scavenge (user guide 2.3.8, SCR internals "Scavenge"): copy the cached
//! parts of datasets from one node's cache to the prefix, with what a build needs to finish
//! them there ([`super::build`]). No MPI, one node: `scr_copy` runs it on every node after the
//! last run of an allocation, and `SCR_Init` runs it on each node leader before an elastic
//! restart from cache (`SCR_RESTART_ELASTIC`).
//!
//! [`copy_node`] reads the flush file and the filemaps in this node's control directory (every
//! rank that ran here, in this run or an earlier one), picks the datasets to copy (given, or
//! the newest checkpoint and every output dataset not yet in the prefix: a dataset whose flush
//! was cut short, marked `FLUSHING`, counts as not there; one the index lists as complete is
//! skipped), and copies each rank's files to their place below the prefix and its redundancy
//! file to `.scr/scr.dataset.<id>/`, each verified (size, and CRC32 when the cache recorded
//! one) and published under a temporary name; then it writes the rank's `<rank>.scrfilemap`,
//! whose presence says the part arrived. A file that fails to copy leaves that rank's part
//! missing, for the build to rebuild.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::copy::copy_verified;
use super::TransferError;
use crate::checksum::file_crc;
use crate::redundancy::RedInfo;
use crate::state::filemap::{DatasetRecord, Filemap};
use crate::state::flushfile::{FlushFile, Location};
use crate::state::index::Index;
use crate::state::layout::Layout;
use crate::state::rankfile::{RankFile, RankFileEntry, RankRed};

/// What one node copied.
#[derive(Debug, Default)]
pub(crate) struct NodeCopy {
    /// (dataset, rank, files, bytes) copied completely.
    pub copied: Vec<(u64, u32, usize, u64)>,
    /// (dataset, rank, why) parts that could not be copied.
    pub failed: Vec<(u64, u32, String)>,
    /// Remarks (what was chosen and why, what was skipped).
    pub notes: Vec<String>,
}

/// Copy this node's cached parts of the datasets to scavenge (`ids`, or the ones the flush
/// file says are owed) to the prefix.
pub fn copy_node(layout: &Layout, buf: usize, ids: Option<&[u64]>) -> NodeCopy {
    let mut out = NodeCopy::default();
    let flush = FlushFile::load(&layout.flush_file()).unwrap_or_else(|e| {
        out.notes.push(format!("{e}; deciding from the filemaps alone"));
        FlushFile::default()
    });
    let index = Index::load(&layout.index()).unwrap_or_else(|e| {
        out.notes.push(format!("{e}; assuming no dataset is in the prefix yet"));
        Index::default()
    });
    let mut filemaps: Vec<(u32, Filemap)> = Vec::new();
    for (rank, path) in layout.filemaps() {
        let rank = rank as u32;
        match Filemap::load(&path) {
            Ok(fm) => filemaps.push((rank, fm)),
            Err(e) => out.notes.push(format!("{e}; rank {rank}'s cached data cannot be scavenged from this node")),
        }
    }
    if filemaps.is_empty() {
        out.notes.push(format!("no cached datasets on this node ({} holds no filemap)", layout.cntl_dir.display()));
        return out;
    }
    let chosen = match ids {
        Some(ids) => ids.to_vec(),
        None => choose(&flush, &index, &filemaps, &mut out.notes),
    };
    for id in chosen {
        for (rank, fm) in &filemaps {
            let Some(rec) = fm.datasets.get(&id) else { continue };
            if !rec.complete {
                out.failed.push((id, *rank, "its part was never completed in cache".into()));
                continue;
            }
            match copy_rank(layout, *rank, rec, buf) {
                Ok((n, bytes, red_note)) => {
                    out.copied.push((id, *rank, n, bytes));
                    out.notes.extend(red_note);
                }
                Err(e) => out.failed.push((id, *rank, e.to_string())),
            }
        }
    }
    out
}

/// The datasets a node owes the prefix: the newest checkpoint and every output dataset, unless
/// the prefix already holds them.
fn choose(flush: &FlushFile, index: &Index, filemaps: &[(u32, Filemap)], notes: &mut Vec<String>) -> Vec<u64> {
    let in_prefix =
        |id: u64| flush.location(id) == Some(Location::Pfs) || index.datasets.get(&id).is_some_and(|e| e.complete);
    // (checkpoint, output) of every dataset known complete: the flush file (the same on every
    // node), else this node's records.
    let mut known: BTreeMap<u64, (bool, bool)> =
        flush.datasets.iter().map(|(id, e)| (*id, (e.checkpoint, e.output))).collect();
    if known.is_empty() {
        for (_, fm) in filemaps {
            for (id, r) in fm.datasets.iter().filter(|(_, r)| r.complete) {
                known.insert(*id, (r.desc.checkpoint, r.desc.output));
            }
        }
    }
    let mut out = BTreeSet::new();
    if let Some((&id, _)) = known.iter().rev().find(|(_, (ckpt, _))| *ckpt) {
        if in_prefix(id) {
            notes.push(format!("the newest checkpoint, dataset {id}, is already in the prefix"));
        } else {
            out.insert(id);
        }
    }
    for (&id, &(_, output)) in &known {
        if output && !in_prefix(id) {
            out.insert(id);
        }
    }
    for &id in &out {
        if flush.location(id) == Some(Location::Flushing) {
            notes.push(format!("dataset {id} was being flushed when the run ended; scavenging it instead"));
        }
    }
    out.into_iter().collect()
}

/// Copy one rank's part; returns (files, bytes, a note about its redundancy file).
fn copy_rank(
    layout: &Layout,
    rank: u32,
    rec: &DatasetRecord,
    buf: usize,
) -> Result<(usize, u64, Option<String>), TransferError> {
    let id = rec.desc.id;
    let dsdir = layout.prefix_dataset_dir(id);
    layout.prefix.below(dsdir.strip_prefix(&layout.prefix.path).unwrap_or(&dsdir))?;
    std::fs::create_dir_all(&dsdir).map_err(|source| TransferError::Create { path: dsdir.clone(), source })?;
    let mut files = Vec::with_capacity(rec.files.len());
    let mut bytes = 0;
    for f in &rec.files {
        let dst = layout.prefix.below(&f.rel)?;
        let c = if f.path == dst {
            // A bypass file is in the prefix already.
            let c = file_crc(&dst, buf)?;
            if c.size != f.size || f.crc.is_some_and(|crc| crc != c.crc) {
                return Err(TransferError::Mismatch { path: dst });
            }
            c
        } else {
            copy_verified(&f.path, &dst, Some(f.size), f.crc, buf, false)?
        };
        bytes += c.size;
        files.push(RankFileEntry { rel: f.rel.clone(), size: c.size, crc: Some(c.crc), complete: true });
    }
    let mut note = None;
    let red = rec.red.as_ref().map(|r| {
        let name = PathBuf::from(r.file.file_name().unwrap_or_default());
        let dst = dsdir.join(&name);
        let info = RedInfo { file: name, ..r.clone() };
        match copy_verified(&r.file, &dst, None, None, buf, false) {
            Ok(c) => RankRed { info, size: c.size, complete: true },
            Err(e) => {
                note = Some(format!("dataset {id} rank {rank}: its redundancy file was not copied: {e}"));
                RankRed { info, size: 0, complete: false }
            }
        }
    });
    let fm = RankFile { rank, desc: rec.desc.clone(), files, red };
    fm.save(&layout.rank_filemap(id, rank))?;
    Ok((rec.files.len(), bytes, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_checkpoint_and_unflushed_output_are_owed() {
        use crate::state::flushfile::FlushEntry;
        let mut flush = FlushFile::default();
        let e = |loc, checkpoint, output| FlushEntry { name: String::new(), location: loc, checkpoint, output };
        flush.datasets.insert(1, e(Location::Cache, false, true));
        flush.datasets.insert(2, e(Location::Pfs, false, true));
        flush.datasets.insert(3, e(Location::Cache, true, false));
        flush.datasets.insert(4, e(Location::Flushing, true, false));
        let mut notes = Vec::new();
        assert_eq!(choose(&flush, &Index::default(), &[], &mut notes), vec![1, 4]);
        assert!(notes.iter().any(|n| n.contains("dataset 4 was being flushed")), "{notes:?}");
        flush.datasets.get_mut(&4).unwrap().location = Location::Pfs;
        assert_eq!(choose(&flush, &Index::default(), &[], &mut notes), vec![1]);
    }
}
