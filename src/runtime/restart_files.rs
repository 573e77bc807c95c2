//! The files a restart reads, whoever wrote them: the catalog of the loaded checkpoint built at
//! `SCR_Start_restart` ([`super::catalog`]), `SCR_Route_file` in a restart phase,
//! `SCR_Restart_info`/`SCR_Restart_file`, and the copies `SCR_Complete_restart` makes when a
//! rank asked for a file that only a cache on another node holds.
//!
//! Such a file cannot be handed out at once (`SCR_Route_file` is local: the holder is not
//! listening), so the route fails for that file alone and the request is remembered. When
//! `SCR_Complete_restart` then finds that every rank that reported its restart invalid did so
//! after such requests (and nothing else went wrong), the holders send exactly the files asked
//! for, over MPI, into the requesting ranks' caches (once per node; verified against the
//! recorded size and CRC32 and published by rename), and the same checkpoint is offered again:
//! the application's usual restart loop succeeds at its next attempt. The copies live in the
//! checkpoint's cache directory (`.scr/copies/<name>`) and go when it goes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::catalog::{crc_problem, plan_copies, Catalog, Entry, Miss, Move, Part};
use super::{Loaded, Phase, Runtime};
use crate::error::{Error, Result};
use crate::state::dataset::DatasetDesc;
use crate::transfer::sendfile::{recv_file, send_file};

const ROUTE: &str = "SCR_Route_file";

impl Runtime {
    /// The catalog of the loaded checkpoint, on every rank (collective; at `SCR_Start_restart`).
    pub(super) fn build_catalog(&mut self) -> Result<()> {
        let Some(loaded) = self.restart.as_ref() else { return Ok(()) };
        if loaded.catalog.is_some() {
            return Ok(());
        }
        let rec = self.filemap.datasets.get(&loaded.id);
        let me = self.world.rank() as u32;
        let files = rec.map_or(Vec::new(), |rec| {
            rec.files
                .iter()
                .map(|f| {
                    let e = Entry { rel: f.rel.clone(), writer: Some(me), size: f.size, crc: f.crc };
                    (e, (!loaded.in_prefix).then(|| f.path.clone()))
                })
                .collect()
        });
        let part = Part { node: self.node_id, files, received: loaded.received.clone() };
        // Complete in the prefix: read in place there, or flushed and still in the index (both
        // conditions are the same on every rank, so all or none take part in the broadcast).
        let in_prefix = loaded.in_prefix
            || (self.flushed(loaded.id)
                && self.world.bcast(
                    0,
                    &(self.rank0()
                        && self.load_index().datasets.get(&loaded.id).is_some_and(|e| e.complete && !e.failed)),
                )?);
        let shared = rec.map_or(Vec::new(), |rec| shared_entries(&rec.desc));
        let parts = self.world.allgather(&part)?;
        let mut cat = Catalog::from_parts(parts, shared, in_prefix);
        self.check_shared(&mut cat)?;
        if let Some(l) = self.restart.as_mut() {
            l.catalog = Some(cat);
        }
        Ok(())
    }

    /// Check the shared files of `cat` in the prefix once for every rank (collective, when the
    /// catalog is built): rank 0 compares their sizes with the record, all ranks read their
    /// CRC32s in slices ([`Runtime::crcs_in_slices`], as when they were written), and every
    /// rank takes rank 0's verdict ([`Catalog::checked`]). A file N ranks read is so read once,
    /// not N times. With `SCR_CRC_ON_COPY=0` each rank checks the size when it routes the file.
    pub(super) fn check_shared(&self, cat: &mut Catalog) -> Result<()> {
        if !self.settings.crc_on_copy.verify() {
            return Ok(());
        }
        // rank 0's list, sizes checked: every rank reads slices of the same files
        let listed = self.rank0().then(|| {
            let size_problem = |e: &Entry| {
                let p = self.layout.prefix.join(&e.rel);
                crate::paths::size_problem(&p, e.size).map(|why| format!("{}: {why}", p.display()))
            };
            cat.shared().map(|e| (e.clone(), size_problem(e))).collect::<Vec<(Entry, Option<String>)>>()
        });
        let listed = self.world.bcast(0, &listed.unwrap_or_default())?;
        if listed.is_empty() {
            return Ok(());
        }
        // the files whose size checked out and whose CRC32 is recorded: (index, CRC32)
        let read: Vec<(usize, u32)> = listed
            .iter()
            .enumerate()
            .filter_map(|(k, (e, problem))| problem.is_none().then_some((k, e.crc?)))
            .collect();
        let files: Vec<(PathBuf, u64)> =
            read.iter().map(|&(k, _)| (self.layout.prefix.join(&listed[k].0.rel), listed[k].0.size)).collect();
        let verdicts = self.crcs_in_slices(&files)?.map(|crcs| {
            let mut verdicts: Vec<Option<String>> = listed.iter().map(|(_, problem)| problem.clone()).collect();
            for ((&(k, want), (path, _)), crc) in read.iter().zip(&files).zip(crcs) {
                verdicts[k] = match crc {
                    Err(why) => Some(why.to_string()),
                    Ok(got) => crc_problem(path, got, want),
                };
            }
            verdicts
        });
        let verdicts = self.world.bcast(0, &verdicts.unwrap_or_default())?;
        for ((e, _), problem) in listed.iter().zip(verdicts) {
            cat.checked(&e.rel, problem);
        }
        Ok(())
    }

    /// `SCR_Route_file` inside a restart phase: where to read `name` from (see the module doc).
    pub(super) fn route_restart(&mut self, name: &str) -> Result<PathBuf> {
        let verify = self.settings.crc_on_copy.verify().then_some(self.settings.file_buf_size);
        let (me, node) = (self.world.rank(), self.node_id);
        let prefix = self.layout.prefix.clone();
        let loaded = self.restart.as_mut().expect("a restart phase has a loaded checkpoint");
        let rel = prefix.relative(Path::new(name));
        // rank numbers mean the same processes only in a run of the checkpoint's own size
        let mine =
            (loaded.writers == self.world.size() as u32).then(|| self.filemap.datasets.get(&loaded.id)).flatten();
        let own = mine.and_then(|rec| match &rel {
            Some(rel) => {
                let own = loaded.own.get_or_insert_with(|| {
                    // (the first file of a name, as the search finds it)
                    let mut own = std::collections::HashMap::new();
                    for (i, f) in rec.files.iter().enumerate() {
                        own.entry(f.rel.clone()).or_insert(i);
                    }
                    own
                });
                // (checked: an index gone stale falls back to the search)
                match own.get(rel.as_path()).and_then(|&i| rec.files.get(i)) {
                    Some(f) if f.rel == *rel => Some(f),
                    _ => rec.file(rel),
                }
            }
            // deprecated: a bare file name looked up among this rank's own files
            None if !name.contains('/') => {
                rec.files.iter().find(|f| f.rel.file_name().map(|n| n == name).unwrap_or(false))
            }
            None => None,
        });
        let routed = match (own, rel) {
            // a restart read in place reads this rank's own files there, as it fetched them
            (Some(f), _) if loaded.in_prefix => Ok(prefix.join(&f.rel)),
            (Some(f), _) => Ok(f.path.clone()),
            (None, None) => {
                return Err(Error::usage(
                    ROUTE,
                    format!(
                        "{name} is not inside the prefix directory {}, so it is no file of checkpoint {}",
                        prefix.path.display(),
                        loaded.name
                    ),
                ))
            }
            (None, Some(rel)) => {
                let cat = loaded.catalog.as_mut().expect("SCR_Start_restart built the catalog");
                cat.route(&rel, me, node, &prefix, verify)
            }
        };
        let ckpt = &loaded.name;
        let path = routed.map_err(|miss| match miss {
            Miss::Unknown => {
                let cat = loaded.catalog.as_ref().expect("SCR_Start_restart built the catalog");
                Error::usage(
                    ROUTE,
                    format!(
                        "{name} is not a file of checkpoint {ckpt} (it has {} file(s), written by {} process(es); \
                         SCR_Restart_info and SCR_Restart_file list them)",
                        cat.entries.len(),
                        cat.writers
                    ),
                )
            }
            Miss::Elsewhere { holder, writer, prefix } => Error::Pending(format!(
                "{ROUTE}: {name} ({}) is held only in the cache of rank {holder} on another node{}: when the \
                 application calls SCR_Complete_restart with valid=0, as the usual restart loop does, SCR copies it to \
                 this node and SCR_Have_restart offers {ckpt} again (SCR_GLOBAL_RESTART=1 restarts from the prefix \
                 instead)",
                match writer {
                    Some(w) => format!("written by rank {w}"),
                    None => "a shared file".to_string(),
                },
                match prefix {
                    Some(why) => format!(", and its prefix copy is unusable ({why})"),
                    None => format!(", and checkpoint {ckpt} is not in the prefix"),
                }
            )),
            Miss::Damaged(why) => Error::Other(format!("{ROUTE}: {name} of checkpoint {ckpt}: {why}")),
        })?;
        std::fs::File::open(&path).map_err(|e| Error::io("SCR_Route_file: cannot read", &path, e))?;
        Ok(path)
    }

    /// The catalog of the restart phase, or the usage error of `call` outside one.
    fn catalog(&self, call: &'static str) -> Result<&Catalog> {
        match (&self.phase, self.restart.as_ref().and_then(|l| l.catalog.as_ref())) {
            (Phase::Restart, Some(cat)) => Ok(cat),
            _ => Err(self.phase_error(call, "between SCR_Start_restart and SCR_Complete_restart")),
        }
    }

    /// `SCR_Restart_info`: how many processes wrote the checkpoint, and how many files it has.
    pub(super) fn restart_info(&self) -> Result<(u32, usize)> {
        let cat = self.catalog("SCR_Restart_info")?;
        Ok((cat.writers, cat.entries.len()))
    }

    /// `SCR_Restart_file`: file `i` of the checkpoint: its path in the prefix (the name to give
    /// `SCR_Route_file`) and its writer (-1: a shared file).
    pub(super) fn restart_file(&self, i: i64) -> Result<(PathBuf, i32)> {
        const CALL: &str = "SCR_Restart_file";
        let cat = self.catalog(CALL)?;
        let e = usize::try_from(i).ok().and_then(|i| cat.entries.get(i)).ok_or_else(|| {
            Error::usage(CALL, format!("i={i}: the checkpoint has {} file(s), numbered from 0", cat.entries.len()))
        })?;
        Ok((self.layout.prefix.join(&e.rel), e.writer.map_or(-1, |w| w as i32)))
    }

    /// `SCR_Complete_restart` when some rank reported its restart invalid (collective): if every
    /// such rank failed after asking for files only caches on other nodes hold, copy them there
    /// and return true (offer `loaded` again); false when the failure has another cause or a
    /// copy failed.
    pub(super) fn copy_requested(&mut self, loaded: &mut Loaded, valid: bool) -> Result<bool> {
        let Some(cat) = loaded.catalog.take() else { return Ok(false) };
        let mine = (valid, cat.requests.iter().copied().collect::<Vec<usize>>(), cat.failures);
        let plan = self.world.gather(0, &mine)?.and_then(|asked| plan_copies(&cat, &asked));
        let Some(moves): Option<Vec<Move>> = self.world.bcast(0, &plan)? else { return Ok(false) };
        let t0 = Instant::now();
        let me = self.world.rank();
        let dir = self.filemap.datasets.get(&loaded.id).map(|r| r.dir.join(crate::paths::SCR_DIR).join("copies"));
        let buf = self.settings.file_buf_size;
        let (mut received, mut problem, mut bytes) = (Vec::new(), None, 0u64);
        for &(i, from, to) in &moves {
            let e = &cat.entries[i];
            if me == from {
                // a file that cannot be read arrives missing: the receiver reports it
                send_file(&self.world, to, cat.copy_of(i, me).unwrap_or(Path::new("")), buf);
            } else if me == to {
                let dst = dir.as_ref().map(|d| d.join(&e.rel));
                match recv_file(&self.world, from, dst.as_deref(), Some((e.size, e.crc)), buf, true) {
                    Ok(Some(c)) if dst.is_some() => {
                        bytes += c.size;
                        received.push((e.rel.clone(), dst.expect("checked")));
                    }
                    Ok(Some(_)) => {
                        problem = Some(format!("{}: this rank has no cache directory for it", e.rel.display()))
                    }
                    Ok(None) => problem = Some(format!("{}: rank {from} could not read its copy", e.rel.display())),
                    Err(err) => problem = Some(err.to_string()),
                }
            }
        }
        if !self.world.all_true(problem.is_none()) {
            let summary =
                self.ctx().summarize_failures(&format!("copying files of {} between nodes", loaded.name), problem);
            if self.rank0() {
                crate::scr_error!("{summary}");
            }
            return Ok(false);
        }
        let bytes = self.world.sum_u64(bytes);
        let secs = self.world.max_f64(t0.elapsed().as_secs_f64());
        if self.rank0() {
            crate::log::emit(
                "INFO",
                format_args!(
                    "restart from {}: {} file(s) asked for were only in caches on other nodes; copied them ({}) in \
                     {secs:.3} s; SCR_Have_restart offers {} again",
                    loaded.name,
                    moves.len(),
                    crate::log::bytes(bytes),
                    loaded.name
                ),
            );
        }
        loaded.received.extend(received);
        Ok(true)
    }
}

/// The catalog entries of a dataset's shared files (always read in the prefix).
pub(super) fn shared_entries(desc: &DatasetDesc) -> Vec<Entry> {
    desc.shared.iter().map(|s| Entry { rel: s.rel.clone(), writer: None, size: s.size, crc: s.crc }).collect()
}
