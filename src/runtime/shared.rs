//! Shared files: one file several ranks write in one output phase (N-to-1: `pwrite` at their
//! own offsets, MPI-IO, parallel HDF5). Per-rank caching cannot hold such a file (each node
//! would get a part), so a shared file is declared and written where every writer reaches it:
//! directly in the prefix, bypassing the cache for that file alone.
//!
//! * Declaration: each writer calls `SCR_Route_shared_file(name, file)` instead of
//!   `SCR_Route_file` ([`route_shared_file`]). It is local, as `SCR_Route_file` is, so any
//!   subset of ranks may share a file (a sub-communicator's MPI-IO file, or rank 0 alone
//!   writing a header straight to the prefix), and every writer gets the same path: the
//!   staging name `.<name>.scrshared` beside the file's place in the prefix
//!   ([`crate::state::layout::Layout::shared_staging`]), so a file of an older checkpoint with
//!   the same name stays intact until this dataset completes.
//! * `SCR_Complete_output` (collective) first checks the names every rank routed
//!   ([`plan_shared`]): a name routed by several ranks without being declared, or declared by
//!   some and routed privately by others, makes the dataset invalid on every rank, with one
//!   message naming the file, the ranks and the remedy. In a bypass dataset
//!   (`SCR_CACHE_BYPASS=1`) every route leads to the prefix, and ranks that route one name write
//!   one file there, as SCR 3 has it: such a name becomes a shared file of the dataset, written
//!   in place (no staging name). The dataset is then valid only if every
//!   rank, so every writer, reported it valid; then the file's CRC32 is computed once, after all
//!   writers finished: in slices read by all ranks at once and combined (one read of the data,
//!   spread over the job), and rank 0 renames it into place. Every rank records the list
//!   (writers, size, CRC32) in the dataset's descriptor, so a flush publishes it in the
//!   summary, and a restart offers it to every rank (checked before it is handed out).
//! * A dataset that is discarded takes its staging files with it; a complete one that leaves
//!   the cache without ever reaching the prefix takes its shared files too, unless a newer
//!   cached dataset wrote the same name.
//!
//! For transparent mode (the preload sees a shared write only when the application opens the
//! file, before any dataset exists): it opens the file at its staging name in the prefix
//! ([`crate::state::layout::shared_staging_name`]) instead, and `route_shared_file` inside
//! the output phase that adopts the files declares it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RuntimeError;
use super::{with_rt, Mode, Phase, Runtime};
use crate::error::{Error, Result};
use crate::state::dataset::SharedFile;
use crate::state::filemap::DatasetRecord;

const ROUTE_SHARED: &str = "SCR_Route_shared_file";

/// Below this many bytes per slice, a shared file's CRC32 is not split further.
const SLICE: u64 = 16 << 20;

/// `SCR_Route_shared_file`: declare `name` a file several ranks write in this output phase and
/// return the path to write it at (the same on every rank).
pub fn route_shared_file(name: &str) -> Result<PathBuf> {
    with_rt(ROUTE_SHARED, |rt| rt.route_shared(name))
}

/// What one rank says at the completion of an output phase: the hashes of the names it
/// routed for itself, the names it declared shared, why the dataset is invalid on it, and
/// its bytes and files.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Routed {
    private: Vec<u64>,
    /// Transparent mode: its files described for the other ranks ([`super::peers`]; `None`:
    /// too many, or API mode).
    listed: super::peers::Part,
    shared: Vec<PathBuf>,
    failed: Option<String>,
    bytes: u64,
    files: u64,
}

/// What the ranks' [`Routed`] say, alike on every rank.
enum Agreed {
    /// Some rank failed: the summary.
    Failed(String),
    /// The names, checked, the dataset's (bytes, files) on all ranks, and every rank's
    /// description of its files (transparent mode).
    Names(std::result::Result<Vec<SharedFile>, RuntimeError>, (u64, u64), Vec<super::peers::Part>),
}

/// What the deciding rank holds after the first round of [`Runtime::agree_names`]: every
/// rank's [`Routed`] (listings taken out), the totals, the listings.
type Decided = (Vec<Routed>, (u64, u64), Vec<super::peers::Part>);

/// Rank 0's verdict on every rank's [`Routed`], broadcast ([`Runtime::agree_names`]).
#[derive(Serialize, Deserialize)]
enum Verdict {
    /// Some rank failed: the summary.
    Failed(String),
    /// Several ranks routed names with these hashes for themselves: their names are needed.
    Hashes(Vec<u64>),
    /// As [`Agreed::Names`].
    Names(std::result::Result<Vec<SharedFile>, NameError>, (u64, u64), Vec<super::peers::Part>),
}

impl Verdict {
    /// The verdict of [`plan_shared`]'s answer, with the dataset's totals and listings.
    fn of(plan: Result<Vec<SharedFile>, Clash>, totals: (u64, u64), listed: &[super::peers::Part]) -> Verdict {
        match plan {
            Err(Clash::Hashes(h)) => Verdict::Hashes(h),
            Err(Clash::Named(msg)) => Verdict::Names(Err(NameError::Misused(msg)), totals, listed.to_vec()),
            Ok(list) => Verdict::Names(Ok(list), totals, listed.to_vec()),
        }
    }
}

/// Why the names of an output phase cannot stand, as rank 0 broadcasts it.
#[derive(Serialize, Deserialize)]
enum NameError {
    /// A misused file, described.
    Misused(String),
    /// Names with equal hashes that could not be compared.
    Uncompared,
}

impl From<NameError> for RuntimeError {
    fn from(e: NameError) -> RuntimeError {
        match e {
            NameError::Misused(msg) => RuntimeError::Names(msg),
            NameError::Uncompared => RuntimeError::Uncompared,
        }
    }
}

/// How the completion exchange of a dataset ended ([`Runtime::complete_shared`]).
pub(super) enum Checked {
    /// Some rank failed (or the exchange did): the summary, not yet said.
    Failed(String),
    /// A file was misused (said by rank 0).
    Misused,
    /// The shared files, and the dataset's bytes and files on all ranks (shared files not
    /// counted), and every rank's description of its files (transparent mode).
    Done { shared: Vec<SharedFile>, bytes: u64, files: u64, listed: Vec<super::peers::Part> },
}

fn hash(rel: &Path) -> u64 {
    crate::identity::fnv1a(rel.as_os_str().as_encoded_bytes())
}

impl Runtime {
    pub(super) fn route_shared(&mut self, name: &str) -> Result<PathBuf> {
        let call = self.call_name(ROUTE_SHARED);
        let Phase::Output { id, .. } = self.phase else {
            return Err(self.phase_error(call, "in an output phase (after SCR_Start_output)"));
        };
        let rel = self.dataset_rel(call, name)?;
        self.declare_shared(call, id, rel, Path::new(name))
    }

    /// [`Runtime::route_shared`] of a file named by its path below the prefix, as it is
    /// (transparent mode): no conversion through a string.
    pub(super) fn route_shared_rel(&mut self, rel: &Path) -> Result<PathBuf> {
        let call = self.call_name(ROUTE_SHARED);
        let (id, shown) = self.output_rel(call, rel)?;
        self.declare_shared(call, id, rel.to_path_buf(), &shown)
    }

    /// Declare `rel` a shared file of open dataset `id` written by this rank; returns where
    /// it is written. `shown` names it in messages.
    fn declare_shared(&mut self, call: &'static str, id: u64, rel: PathBuf, shown: &Path) -> Result<PathBuf> {
        let name = shown.display();
        let me = self.world.rank() as u32;
        let transparent = self.mode == super::Mode::Transparent;
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        let staging = shared_target(&self.layout, rec, &rel);
        if rec.file(&rel).is_some() {
            let msg = if transparent {
                format!(
                    "{name} was written by this rank both as a file of its own and as a shared file (MPI_File_open on \
                     several processes, or SCR_PRELOAD_SHARED): write it one way only"
                )
            } else {
                format!(
                    "{name} was routed with SCR_Route_file by this rank in this output phase: route a shared file \
                     with SCR_Route_shared_file only"
                )
            };
            return Err(Error::usage(call, msg));
        }
        if let Some(parent) = staging.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create directory", parent, e))?;
        }
        if !rec.reddesc.bypass {
            unlink_planted(&staging)?;
        }
        if !rec.desc.shared.iter().any(|s| s.rel == rel) {
            rec.desc.shared.push(SharedFile { rel, writers: vec![me], size: 0, crc: None });
            // recorded before the application creates it: a crash leaves it to clean up
            self.save_filemap()?;
        }
        crate::scr_debug!(2, "route shared {name} -> {} (dataset {id})", staging.display());
        Ok(staging)
    }

    /// `SCR_Complete_output` of dataset `id` (collective): in one exchange, every rank's outcome
    /// (`local_err`), its bytes and files, and the names it routed; then check the names and
    /// complete the shared files (in a bypass dataset, the names several ranks routed become
    /// shared files: the caller drops them from the ranks' own files). The same answer on
    /// every rank; a misuse is said once, by rank 0.
    pub(super) fn complete_shared(&self, id: u64, local_err: Option<String>, bytes: u64, files: u64) -> Checked {
        let agreed = match self.agree_names(id, local_err, bytes, files) {
            Ok(a) => a,
            Err(e) => return Checked::Failed(format!("dataset {id}: {e}")),
        };
        let (done, totals, listed) = match agreed {
            Agreed::Failed(summary) => return Checked::Failed(summary),
            Agreed::Names(r, totals, listed) => (r, totals, listed),
        };
        let done = match done {
            Ok(list) if list.is_empty() => Ok(list),
            Ok(list) => self.finish_shared(id, list).unwrap_or_else(|e| Err(e.into())),
            Err(e) => Err(e),
        };
        match done {
            Ok(list) => Checked::Done { shared: list, bytes: totals.0, files: totals.1, listed },
            Err(e) => {
                if self.rank0() {
                    let name = &self.filemap.datasets[&id].desc.name;
                    crate::scr_error!(
                        "dataset {id} ({name}): {e}; the dataset is invalid on every rank and is discarded"
                    );
                }
                Checked::Misused
            }
        }
    }

    /// Every rank's outcome, sizes and routed names, checked by rank 0 (one gather and one
    /// broadcast of its verdict, [`Comm::decide_at`]): a failure summary, or the shared files as
    /// every rank declared them (`Err` names a misused file) with the dataset's bytes and
    /// files. Only rank 0 receives every rank's names (in transparent mode every rank receives
    /// everything, one allgather, since every rank keeps every rank's listing, and decides
    /// alike). A second round asks for the names behind hashes several ranks routed, when
    /// there are any.
    ///
    /// [`Comm::decide_at`]: crate::comm::Comm::decide_at
    fn agree_names(&self, id: u64, failed: Option<String>, bytes: u64, files: u64) -> Result<Agreed> {
        let rec = &self.filemap.datasets[&id];
        let (bypass, mode) = (rec.reddesc.bypass, self.mode);
        let transparent = mode == Mode::Transparent;
        let routed = Routed {
            private: rec.files.iter().map(|f| hash(&f.rel)).collect(),
            listed: if transparent { super::peers::list_of(rec, self.world.size() as usize) } else { None },
            shared: rec.desc.shared.iter().map(|s| s.rel.clone()).collect(),
            failed,
            bytes,
            files,
        };
        // what the deciding rank gathered, kept for the second round
        let mut kept: Option<Decided> = None;
        let mut first = |all: std::result::Result<Vec<Routed>, crate::comm::CommError>| {
            let mut all = match all {
                Ok(all) => all,
                Err(e) => return Verdict::Failed(format!("dataset {id}: {e}")),
            };
            if all.iter().any(|r| r.failed.is_some()) {
                let what = format!("dataset {id} ({})", rec.desc.name);
                return Verdict::Failed(crate::transfer::failure_summary(
                    &what,
                    all.into_iter().map(|r| r.failed).collect(),
                ));
            }
            let totals = (all.iter().map(|r| r.bytes).sum(), all.iter().map(|r| r.files).sum());
            // (moved out: the names' check below does not read them)
            let listed: Vec<_> =
                if transparent { all.iter_mut().map(|r| r.listed.take()).collect() } else { Vec::new() };
            let v = Verdict::of(plan_shared(&all, &BTreeMap::new(), bypass, mode), totals, &listed);
            kept = Some((all, totals, listed));
            v
        };
        // transparent mode: every rank needs every rank's listing anyway, so every rank gets
        // everything and decides alike; otherwise rank 0 decides
        let verdict =
            if transparent { first(self.world.allgather(&routed)) } else { self.world.decide_at(0, &routed, first)? };
        let colliding = match verdict {
            Verdict::Failed(summary) => return Ok(Agreed::Failed(summary)),
            Verdict::Names(r, totals, listed) => return Ok(Agreed::Names(r.map_err(NameError::into), totals, listed)),
            Verdict::Hashes(h) => h,
        };
        // some name hash was routed by several ranks: rank 0 learns the names
        let mine: Vec<(u64, PathBuf)> =
            rec.files.iter().map(|f| (hash(&f.rel), f.rel.clone())).filter(|(h, _)| colliding.contains(h)).collect();
        let mut second = |names: std::result::Result<Vec<Vec<(u64, PathBuf)>>, crate::comm::CommError>| {
            let (all, totals, listed) = kept.take().expect("the deciding rank kept the first round");
            let names = match names {
                Ok(names) => names,
                Err(e) => return Verdict::Failed(format!("dataset {id}: {e}")),
            };
            let mut by_rank: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
            for (r, list) in names.into_iter().enumerate() {
                for (h, rel) in list {
                    by_rank.insert((r as u32, h), rel);
                }
            }
            match Verdict::of(plan_shared(&all, &by_rank, bypass, mode), totals, &listed) {
                // equal hashes left after the names were compared: not comparable here
                Verdict::Hashes(_) => Verdict::Names(Err(NameError::Uncompared), totals, listed),
                v => v,
            }
        };
        let verdict =
            if transparent { second(self.world.allgather(&mine)) } else { self.world.decide_at(0, &mine, second)? };
        match verdict {
            Verdict::Failed(summary) => Ok(Agreed::Failed(summary)),
            Verdict::Names(r, totals, listed) => Ok(Agreed::Names(r.map_err(NameError::into), totals, listed)),
            Verdict::Hashes(_) => unreachable!("the second round decides"),
        }
    }

    /// Complete the shared files of valid dataset `id` (collective): rank 0 checks each one
    /// where its writers wrote it, all ranks compute slices of its CRC32 (unless
    /// `SCR_CRC_ON_COPY=0`), rank 0 combines them and renames the file into place. Returns the
    /// files with size and CRC32.
    fn finish_shared(
        &self,
        id: u64,
        mut list: Vec<SharedFile>,
    ) -> Result<std::result::Result<Vec<SharedFile>, RuntimeError>> {
        let rec = &self.filemap.datasets[&id];
        let staged: Vec<PathBuf> = list.iter().map(|s| shared_target(&self.layout, rec, &s.rel)).collect();
        let sizes = self.rank0().then(|| {
            staged
                .iter()
                .zip(&list)
                .map(|(p, s)| {
                    std::fs::metadata(p).map(|m| m.len()).map_err(|e| RuntimeError::SharedMissing {
                        rel: s.rel.clone(),
                        path: p.clone(),
                        why: e.to_string(),
                        writers: s.writers.clone(),
                    })
                })
                .collect::<std::result::Result<Vec<u64>, RuntimeError>>()
        });
        let sizes = match self.world.bcast(0, &sizes.unwrap_or(Ok(Vec::new())))? {
            Ok(sizes) => sizes,
            Err(e) => return Ok(Err(e)),
        };
        let verify = self.settings.crc_on_copy.verify();
        let files: Vec<(PathBuf, u64)> =
            if verify { staged.iter().cloned().zip(sizes.iter().copied()).collect() } else { Vec::new() };
        let done = self.crcs_in_slices(&files)?.map(|crcs| {
            let crcs = crcs.into_iter().collect::<std::result::Result<Vec<u32>, RuntimeError>>()?;
            for (k, s) in list.iter_mut().enumerate() {
                s.size = sizes[k];
                s.crc = crcs.get(k).copied();
                let to = self.layout.prefix.join(&s.rel);
                if staged[k] != to {
                    std::fs::rename(&staged[k], &to)
                        .map_err(|e| RuntimeError::Rename { to: to.clone(), why: e.to_string() })?;
                }
            }
            Ok(list)
        });
        Ok(self.world.bcast(0, &done.unwrap_or(Ok(Vec::new())))?)
    }

    /// The CRC32 of each file `(path, size)` (collective, the same list on every rank), read in
    /// slices dealt out to all ranks in turn, so each byte is read once, spread over the job;
    /// combined on rank 0: `Some` there (per file, or why a slice of it could not be read),
    /// `None` on the other ranks.
    pub(super) fn crcs_in_slices(
        &self,
        files: &[(PathBuf, u64)],
    ) -> Result<Option<Vec<std::result::Result<u32, RuntimeError>>>> {
        let mut slices = Vec::new();
        for (k, &(_, size)) in files.iter().enumerate() {
            let n = size.div_ceil(SLICE).clamp(1, self.world.size() as u64);
            let step = size.div_ceil(n).max(1);
            for j in 0..n {
                let off = (j * step).min(size);
                slices.push((k, off, step.min(size - off)));
            }
        }
        let (me, ranks) = (self.world.rank() as usize, self.world.size() as usize);
        type Slice = (usize, u64, std::result::Result<u32, RuntimeError>, u64);
        let mine: Vec<Slice> = slices
            .iter()
            .skip(me)
            .step_by(ranks)
            .map(|&(k, off, len)| {
                let crc = crate::checksum::crc_of_range(&files[k].0, off, len, self.settings.file_buf_size);
                (k, off, crc.map_err(RuntimeError::from), len)
            })
            .collect();
        Ok(self.world.gather(0, &mine)?.map(|all| {
            let mut parts: Vec<Slice> = all.into_iter().flatten().collect();
            parts.sort_unstable_by_key(|p| (p.0, p.1));
            (0..files.len())
                .map(|k| {
                    let of_k = parts.iter().filter(|p| p.0 == k).map(|p| p.2.clone().map(|crc| (crc, p.3)));
                    of_k.collect::<std::result::Result<Vec<(u32, u64)>, RuntimeError>>()
                        .map(|s| crate::checksum::combine(&s))
                })
                .collect()
        }))
    }

    /// A dataset leaves the cache: remove the staging files this rank declared (a dataset that
    /// never completed), and, on rank 0, the shared files of a complete dataset that never
    /// reached the prefix, unless another cached dataset wrote the same name.
    pub(super) fn forget_shared(&self, rec: &DatasetRecord) {
        for s in &rec.desc.shared {
            if !rec.reddesc.bypass {
                let _ = crate::paths::remove_file_if_exists(&self.layout.shared_staging(&s.rel));
            }
            let others = self.filemap.datasets.values().filter(|r| r.desc.id != rec.desc.id);
            let kept = others.flat_map(|r| &r.desc.shared).any(|o| o.rel == s.rel);
            if rec.complete && self.rank0() && !self.flushed(rec.desc.id) && !kept {
                let p = self.layout.prefix.join(&s.rel);
                crate::scr_debug!(
                    1,
                    "removing shared file {} of dataset {}: it never reached the prefix",
                    p.display(),
                    rec.desc.id
                );
                let _ = crate::paths::remove_file_if_exists(&p);
            }
        }
    }
}

/// Where the writers of shared file `rel` of dataset `rec` write it: its staging name, or in a
/// bypass dataset its place in the prefix.
/// Remove a symbolic link (or anything but a regular file) at staging name `staging` before
/// the application writes there: neither SCR nor a writer makes one, so someone planted it,
/// and the writers' opens would follow it out of the prefix. A regular file stays: another
/// rank may already be writing it (each rank routes the name on its own).
fn unlink_planted(staging: &Path) -> Result<()> {
    match std::fs::symlink_metadata(staging) {
        Ok(m) if !m.file_type().is_file() => {
            crate::scr_warn!(
                "{} is not a regular file (a link someone planted?): removed before the ranks write there",
                staging.display()
            );
            match std::fs::remove_file(staging) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", staging, e)),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

pub(super) fn shared_target(layout: &crate::state::layout::Layout, rec: &DatasetRecord, rel: &Path) -> PathBuf {
    if rec.reddesc.bypass {
        layout.prefix.join(rel)
    } else {
        layout.shared_staging(rel)
    }
}

/// Why the names of an output phase cannot stand.
#[derive(Debug, PartialEq)]
pub(super) enum Clash {
    /// Several ranks routed names with these hashes for themselves; their names are needed.
    Hashes(Vec<u64>),
    /// A misused file, described.
    Named(String),
}

/// From every rank's [`Routed`] (and, in a second round, the names `names` behind the
/// hashes of [`Clash::Hashes`], by (rank, hash)), the shared files with their writers, or the
/// first misuse found, its remedy said for the `mode` SCR runs in. In a `bypass` dataset a
/// name several ranks routed is a shared file.
pub(super) fn plan_shared(
    all: &[Routed],
    names: &BTreeMap<(u32, u64), PathBuf>,
    bypass: bool,
    mode: Mode,
) -> Result<Vec<SharedFile>, Clash> {
    let transparent = mode == Mode::Transparent;
    let mut shared: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut private: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (r, routed) in all.iter().enumerate() {
        for rel in &routed.shared {
            shared.entry(rel.clone()).or_default().push(r as u32);
        }
        for &h in &routed.private {
            private.entry(h).or_default().push(r as u32);
        }
    }
    let mut misuse: Vec<String> = Vec::new();
    for (rel, writers) in shared.iter_mut() {
        let Some(others) = private.remove(&hash(rel)) else { continue };
        if bypass {
            writers.extend(others);
            writers.sort_unstable();
            continue;
        }
        misuse.push(shared_and_private(rel, writers, &others, transparent));
    }
    let several: Vec<(u64, &Vec<u32>)> = private.iter().filter(|(_, r)| r.len() > 1).map(|(h, r)| (*h, r)).collect();
    if misuse.is_empty() && !several.is_empty() && names.is_empty() {
        return Err(Clash::Hashes(several.iter().map(|(h, _)| *h).collect()));
    }
    for (h, rs) in several {
        // by name: equal hashes of different names are no clash
        let mut by_name: BTreeMap<&Path, Vec<u32>> = BTreeMap::new();
        for r in rs {
            if let Some(n) = names.get(&(*r, h)) {
                by_name.entry(n.as_path()).or_default().push(*r);
            }
        }
        for (rel, rs) in by_name.into_iter().filter(|(_, rs)| rs.len() > 1) {
            if bypass {
                shared.insert(rel.to_path_buf(), rs);
                continue;
            }
            misuse.push(undeclared(rel, &rs, transparent));
        }
    }
    if let Some(first) = misuse.first() {
        let more =
            if misuse.len() > 1 { format!(" (and {} more such file(s))", misuse.len() - 1) } else { String::new() };
        return Err(Clash::Named(format!("{first}{more}")));
    }
    Ok(shared.into_iter().map(|(rel, writers)| SharedFile { rel, writers, size: 0, crc: None }).collect())
}

/// The message for `rel`, declared shared by `writers` but written as a file of its own by
/// `others`, in the words of the mode the application runs in.
fn shared_and_private(rel: &Path, writers: &[u32], others: &[u32], transparent: bool) -> String {
    if transparent {
        format!(
            "{} was opened as a shared file (MPI_File_open on several processes, or SCR_PRELOAD_SHARED) by \
             rank(s) {} but written as a file of its own by rank(s) {}: every rank that writes a shared file \
             must open it through MPI-IO on a communicator of its writers, or add it to SCR_PRELOAD_SHARED",
            rel.display(),
            ranks(writers),
            ranks(others)
        )
    } else {
        format!(
            "{} was declared shared (SCR_Route_shared_file) by rank(s) {} but routed with SCR_Route_file by \
             rank(s) {}: every rank that writes a shared file must route it with SCR_Route_shared_file",
            rel.display(),
            ranks(writers),
            ranks(others)
        )
    }
}

/// The message for `rel`, written by several ranks (`rs`) without being declared shared, with
/// the remedy of the mode the application runs in.
fn undeclared(rel: &Path, rs: &[u32], transparent: bool) -> String {
    let remedy = if transparent {
        format!(
            "Add it to SCR_PRELOAD_SHARED (for example SCR_PRELOAD_SHARED='{}'; it is then written once, in \
             the prefix), or write it through MPI-IO (MPI_File_open on a communicator of its writers), or give \
             each rank its own file name",
            example_pattern(rel)
        )
    } else {
        "Declare it with SCR_Route_shared_file on every rank that writes it (it is then written once, in the \
         prefix), or give each rank its own file name"
            .to_string()
    };
    format!(
        "{} was {} by rank(s) {} without being declared shared: each rank would keep its own copy in its \
         node's cache, and a restart would read one of them. {remedy}",
        rel.display(),
        if transparent { "written" } else { "routed" },
        ranks(rs)
    )
}

/// A pattern for `SCR_PRELOAD_SHARED` that takes `rel` and its counterparts in other
/// checkpoints: each run of digits becomes `*` (`ckpt.40/shared.dat` -> `ckpt.*/shared.dat`).
fn example_pattern(rel: &Path) -> String {
    let mut out = String::new();
    for c in rel.to_string_lossy().chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('*') {
            out.push('*');
        }
    }
    out
}

/// Ranks for a message: the first 8, then how many more.
fn ranks(rs: &[u32]) -> String {
    let shown: Vec<String> = rs.iter().take(8).map(u32::to_string).collect();
    let more = if rs.len() > 8 { format!(", ... ({} ranks)", rs.len()) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(private: &[&str], shared: &[&str]) -> Routed {
        Routed {
            private: private.iter().map(|p| hash(Path::new(p))).collect(),
            shared: shared.iter().map(PathBuf::from).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn declared_files_are_gathered_with_their_writers() {
        let all = [routed(&["c/r0"], &["c/shared", "c/h"]), routed(&["c/r1"], &["c/shared"]), routed(&["c/r2"], &[])];
        let list = plan_shared(&all, &BTreeMap::new(), false, Mode::Api).unwrap();
        let got: Vec<(String, Vec<u32>)> =
            list.iter().map(|s| (s.rel.display().to_string(), s.writers.clone())).collect();
        assert_eq!(got, [("c/h".to_string(), vec![0]), ("c/shared".to_string(), vec![0, 1])]);
    }

    #[test]
    fn undeclared_and_half_declared_files_are_named_with_their_ranks() {
        let all = [routed(&["c/x"], &[]), routed(&["c/x"], &[]), routed(&["c/y"], &[])];
        let Err(Clash::Hashes(h)) = plan_shared(&all, &BTreeMap::new(), false, Mode::Api) else {
            panic!("names are needed")
        };
        assert_eq!(h, vec![hash(Path::new("c/x"))]);
        let names: BTreeMap<(u32, u64), PathBuf> = [((0, h[0]), "c/x".into()), ((1, h[0]), "c/x".into())].into();
        let Err(Clash::Named(msg)) = plan_shared(&all, &names, false, Mode::Api) else { panic!() };
        assert!(msg.starts_with("c/x was routed by rank(s) 0, 1 without being declared shared"), "{msg}");
        assert!(msg.contains("SCR_Route_shared_file"), "{msg}");
        let Err(Clash::Named(msg)) = plan_shared(&all, &names, false, Mode::Transparent) else { panic!() };
        assert!(msg.starts_with("c/x was written by rank(s) 0, 1 without being declared shared"), "{msg}");
        assert!(msg.contains("Add it to SCR_PRELOAD_SHARED") && !msg.contains("SCR_Route_shared_file"), "{msg}");
        assert_eq!(example_pattern(Path::new("ckpt.40/part2.dat")), "ckpt.*/part*.dat");
        // equal hashes, different names (as if FNV collided): no clash
        // in a bypass dataset the name is one file in the prefix: a shared file
        let list = plan_shared(&all, &names, true, Mode::Api).unwrap();
        assert_eq!((list[0].rel.as_path(), list[0].writers.as_slice()), (Path::new("c/x"), &[0, 1][..]));
        let names: BTreeMap<(u32, u64), PathBuf> = [((0, h[0]), "c/x".into()), ((1, h[0]), "c/z".into())].into();
        assert!(plan_shared(&all, &names, false, Mode::Api).unwrap().is_empty());

        let all = [routed(&[], &["c/s"]), routed(&["c/s"], &[]), routed(&["c/s"], &[])];
        let list = plan_shared(&all, &BTreeMap::new(), true, Mode::Api).unwrap();
        assert_eq!(list[0].writers, [0, 1, 2]);
        let Err(Clash::Named(msg)) = plan_shared(&all, &BTreeMap::new(), false, Mode::Api) else { panic!() };
        assert!(msg.contains("c/s was declared shared (SCR_Route_shared_file) by rank(s) 0"), "{msg}");
        assert!(msg.contains("routed with SCR_Route_file by rank(s) 1, 2"), "{msg}");
        assert_eq!(ranks(&(0..20).collect::<Vec<_>>()), "0, 1, 2, 3, 4, 5, 6, 7, ... (20 ranks)");
    }
}
