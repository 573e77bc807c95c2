//! The scalable restart of `SCR_Init` for cached datasets: move each rank's records and files
//! to the node it runs on now ([`Runtime::distribute`]), then, newest dataset first, keep what
//! is intact, rebuild what the redundancy scheme can, and drop the rest with the missing ranks
//! and files named ([`Runtime::rebuild_or_drop`]).
//!
//! Distribution: each node's leader reads the filemaps in its control directory that belong
//! to ranks running elsewhere now (the job was relaunched with another mapping, or on a spare
//! node); rank 0 collects who holds what and broadcasts the moves; each move sends the record,
//! then every file (data and redundancy) from holder to owner, who writes it at the same path
//! on its node and acknowledges; only then the holder deletes its copy.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use super::error::RuntimeError;
use super::Runtime;
use crate::redundancy::parallel::{self, Member};
use crate::redundancy::redfile::{self, FileEntry, Header};
use crate::redundancy::RedInfo;
use crate::state::filemap::{DatasetRecord, FileMeta, Filemap};
use crate::transfer::sendfile::{recv_file, send_file};
use crate::{scr_debug, scr_error, scr_warn};

/// One redistribution move: dataset, owner rank, holder rank.
type Move = (u64, i32, i32);

/// One rank's offer to [`plan_moves`]: the datasets it holds as its own, and the (dataset,
/// owner) parts it holds for ranks that run elsewhere now.
type Offer = (Vec<u64>, Vec<(u64, i32)>);

/// Per rank: (set id, index in the set, lost), and the report of what is missing.
type Plan = (Vec<(usize, usize, bool)>, String);

impl Runtime {
    /// Move records and files of ranks that now run on another node to them (collective):
    /// each node leader offers the cached parts of ranks that run elsewhere now, rank 0 plans
    /// the moves, and holders send while owners receive.
    pub(super) fn distribute(&mut self) -> crate::error::Result<()> {
        let t0 = Instant::now();
        let size = self.world.size();
        let on_node: Vec<i32> = self.node.allgather(&self.world.rank())?;
        let mut foreign = if self.node.rank() == 0 { self.foreign_filemaps(&on_node) } else { BTreeMap::new() };
        // Datasets written by another number of processes stay where they are: their rank
        // numbers mean other processes, and a run of their own size will find them there.
        let fits = |r: &DatasetRecord| r.desc.ranks == size as u32;
        let offers: Vec<(u64, i32)> = foreign
            .iter()
            .flat_map(|(r, fm)| fm.datasets.values().filter(|d| fits(d)).map(move |d| (d.desc.id, *r)))
            .collect();
        let mine: Vec<u64> = self.filemap.datasets.values().filter(|d| fits(d)).map(|d| d.desc.id).collect();
        let all = self.world.gather(0, &(mine, offers))?;
        let moves: Vec<Move> = self.world.bcast(0, &all.map(|all| plan_moves(&all)).unwrap_or_default())?;
        if self.rank0() && !moves.is_empty() {
            scr_debug!(1, "moving {} cached dataset part(s) to the nodes their ranks now run on", moves.len());
        }
        let nmoves = moves.len();
        self.carry_out(moves, &mut foreign);
        if nmoves > 0 {
            let secs = self.world.max_f64(t0.elapsed().as_secs_f64());
            if self.rank0() {
                scr_debug!(1, "distributed {nmoves} cached dataset part(s) in {secs:.3} s");
            }
        }
        Ok(())
    }

    /// Node leader: the filemaps on this node of ranks that do not run on it (`on_node`) in
    /// this run, by rank; those of ranks beyond this run's size are left alone (said when
    /// they hold a dataset of this run's size).
    fn foreign_filemaps(&self, on_node: &[i32]) -> BTreeMap<i32, Filemap> {
        let size = self.world.size();
        let mut foreign = BTreeMap::new();
        for (rank, path) in self.layout.filemaps() {
            if on_node.contains(&rank) {
                continue;
            }
            match Filemap::load(&path) {
                // written by a run of another size (reported with the checkpoints skipped,
                // or restarted elastically from the prefix)
                Ok(fm) if rank >= size && fm.datasets.values().all(|d| d.desc.ranks != size as u32) => {}
                Ok(_) if rank >= size => scr_warn!(
                    "{}: rank {rank} is not part of this run ({size} ranks); its cached data is ignored",
                    path.display()
                ),
                Ok(fm) => {
                    foreign.insert(rank, fm);
                }
                Err(e) => scr_error!("{e}; the data it describes cannot be moved to rank {rank}"),
            }
        }
        foreign
    }

    /// The planned moves (collective in effect: every rank takes part in the pairs it is in).
    /// The holder sends from `foreign` and drops the part from the filemap it held it in;
    /// the owner receives.
    fn carry_out(&mut self, moves: Vec<Move>, foreign: &mut BTreeMap<i32, Filemap>) {
        let me = self.world.rank();
        for (id, owner, holder) in moves {
            if me == holder {
                // the holder offered it: it is in `foreign`
                let Some(fm) = foreign.get_mut(&owner) else { continue };
                let Some(rec) = fm.datasets.get(&id).cloned() else { continue };
                if self.send_record(owner, &rec) {
                    fm.datasets.remove(&id);
                    super::remove_part(&rec);
                    let path = self.layout.filemap(owner);
                    // (the names its routes log held went with the record; its spare is stale)
                    crate::state::filemap::remove_companions(&path);
                    let r = if fm.datasets.is_empty() {
                        crate::paths::remove_file_if_exists(&path).map_err(crate::error::Error::from)
                    } else {
                        fm.save(&path).map_err(Into::into)
                    };
                    if let Err(e) = r {
                        scr_warn!("{e}");
                    }
                }
            } else if me == owner {
                self.recv_record(holder);
            }
        }
    }

    /// Send a record and its files; true when the owner stored them. The number of files
    /// goes first, so the owner can take the whole message even if the record does not decode.
    fn send_record(&self, owner: i32, rec: &DatasetRecord) -> bool {
        self.world.send_value(owner, rec);
        let paths = rec.cached_paths();
        self.world.send(owner, &(paths.len() as u64).to_le_bytes());
        for path in paths {
            // a file that cannot be read arrives missing or zeroed: the check on restore rejects it
            send_file(&self.world, owner, path, self.settings.file_buf_size);
        }
        let mut ack = [0u8; 1];
        self.world.recv_into(owner, &mut ack);
        ack[0] == 1
    }

    /// Receive a record and its files from `holder` and add it to this rank's filemap. A
    /// record that does not decode is refused (its files are received and dropped, and the
    /// holder keeps its copy).
    fn recv_record(&mut self, holder: i32) {
        let rec: Result<DatasetRecord, _> = self.world.recv_value(holder);
        let mut count = [0u8; 8];
        self.world.recv_into(holder, &mut count);
        let count = u64::from_le_bytes(count) as usize;
        let paths: Vec<PathBuf> = match &rec {
            Ok(r) if r.cached_paths().len() == count => r.cached_paths().iter().map(|p| p.to_path_buf()).collect(),
            Ok(r) => {
                scr_error!(
                    "dataset {} from rank {holder}: {count} file(s) sent for a record of {}",
                    r.desc.id,
                    r.cached_paths().len()
                );
                Vec::new()
            }
            Err(e) => {
                scr_error!("a cached dataset from rank {holder}: {e}; rank {holder} keeps it");
                Vec::new()
            }
        };
        let mut ok = paths.len() == count;
        for i in 0..count {
            // a file the holder could not read stays missing: the check on restore names it
            let r = recv_file(
                &self.world,
                holder,
                paths.get(i).map(PathBuf::as_path),
                None,
                self.settings.file_buf_size,
                true,
            );
            if let Err(e) = r {
                scr_error!("{e}");
                ok = false;
            }
        }
        if let (true, Ok(rec)) = (ok, rec) {
            scr_debug!(2, "received dataset {} from rank {holder}", rec.desc.id);
            self.filemap.datasets.insert(rec.desc.id, rec);
            if let Err(e) = self.save_filemap() {
                scr_error!("{e}");
                ok = false;
            }
        } else {
            ok = false;
        }
        self.world.send(holder, &[u8::from(ok)]);
    }

    /// Cached dataset `id` is not intact on every rank: rebuild it if its redundancy allows,
    /// else explain and drop it. `problem` is this rank's reason. Returns whether it was kept.
    pub(super) fn rebuild_or_drop(&mut self, id: u64, problem: Option<String>) -> crate::error::Result<bool> {
        let t0 = Instant::now();
        let status = self.status_of(id, problem);
        // rank 0 plans; the lost ranks and the scheme go to the event log
        let (plan, log) = match self.world.gather(0, &status)? {
            Some(all) => {
                let lost: Vec<String> =
                    all.iter().enumerate().filter(|(_, s)| !s.intact).map(|(r, _)| r.to_string()).collect();
                let scheme = all.iter().find_map(|s| s.red.as_ref().map(|r| r.scheme.name())).unwrap_or("SINGLE");
                (
                    plan_rebuild(id, &all, self.world.size() as usize),
                    RebuildLog { id, scheme, lost: lost.join(","), t0 },
                )
            }
            None => (Ok((Vec::new(), String::new())), RebuildLog { id, scheme: "", lost: String::new(), t0 }),
        };
        let plan: Result<Plan, RuntimeError> = self.world.bcast(0, &plan)?;
        let (plan, what) = match plan {
            Ok(p) => p,
            Err(why) => {
                if self.rank0() {
                    scr_warn!("{why}; deleting dataset {id} from cache");
                }
                log.record(self, false, &why.to_string());
                self.drop_cached(id);
                return Ok(false);
            }
        };
        let failed = self.rebuild_my_set(id, &plan)?;
        let secs = self.world.max_f64(t0.elapsed().as_secs_f64());
        log.record(self, failed.is_none(), failed.as_deref().unwrap_or(""));
        if failed.is_none() {
            if self.rank0() {
                let n = plan.iter().filter(|p| p.2).count();
                crate::log::emit(
                    "INFO",
                    format_args!(
                        "{what}; rebuilt cached dataset {id} for {n} rank(s) from its redundancy data in {secs:.3} s"
                    ),
                );
            }
            Ok(true)
        } else {
            if self.rank0() {
                scr_warn!("{}; deleting dataset {id} from cache", failed.unwrap_or_default());
            }
            self.drop_cached(id);
            Ok(false)
        }
    }

    /// What this rank holds of cached dataset `id`, for rank 0's plan.
    fn status_of(&self, id: u64, problem: Option<String>) -> Status {
        let rec = self.filemap.datasets.get(&id);
        Status {
            intact: problem.is_none(),
            red: rec.and_then(|r| r.red.clone()),
            name: rec.map(|r| r.desc.name.clone()),
            files: rec.map(|r| r.files.iter().map(|f| f.rel.display().to_string()).collect()).unwrap_or_default(),
            problem,
        }
    }

    /// This rank's part of rebuilding dataset `id` by `plan` (collective): its set rebuilds
    /// the members it lost, and the ranks agree. `Ok(Some(summary))`: it failed somewhere, as
    /// `summary` says.
    fn rebuild_my_set(&mut self, id: u64, plan: &[(usize, usize, bool)]) -> crate::error::Result<Option<String>> {
        // rank 0 planned every rank (checked on every rank: the plan came from rank 0)
        let Some(&(set_id, index, lost)) = plan.get(self.world.rank() as usize) else {
            return Err(crate::error::Error::Collective(format!(
                "rebuilding dataset {id}: the plan has no entry for every rank"
            )));
        };
        let comm = self.world.split(set_id as i32, index as i32);
        let mut lost_in_set: Vec<usize> = plan.iter().filter(|p| p.0 == set_id && p.2).map(|p| p.1).collect();
        lost_in_set.sort_unstable();
        let mut result: Result<bool, RuntimeError> = Ok(false);
        if !lost_in_set.is_empty() {
            result = self.rebuild_member(id, &comm, index, lost, &lost_in_set);
        }
        let checked = result.as_ref().is_ok_and(|v| *v);
        let err = result.err().map(|e| e.to_string());
        let ok = self.world.all_true(err.is_none());
        // this rank's files went through the rebuild and matched: no second read at restart
        // (the check at restart is per rank; its outcome is agreed there)
        if checked && ok {
            self.verified.push(id);
        }
        Ok((!ok).then(|| self.ctx().summarize_failures(&format!("rebuilding dataset {id}"), err)))
    }

    /// The record a lost member `index` of dataset `id` gets back: its files (as the
    /// survivors' redundancy headers list them, `all`) in its cache directory, and its
    /// redundancy file, shaped by a survivor's header (`template`).
    fn lost_record(&self, id: u64, template: &Header, all: &[Vec<FileEntry>], index: usize) -> DatasetRecord {
        let dir = self.layout.cache_dataset_dir(&template.reddesc.store, id);
        let mut red = redfile::lost_member(&template.red, index, all);
        red.file = parallel::red_path(&dir, &red);
        let files: Vec<FileMeta> = all[index]
            .iter()
            .map(|e| FileMeta { rel: e.rel.clone(), path: dir.join(&e.rel), size: e.size, crc: e.crc, complete: true })
            .collect();
        DatasetRecord {
            desc: template.desc.clone(),
            reddesc: template.reddesc.clone(),
            dir,
            files,
            complete: true,
            red: Some(red),
        }
    }

    /// This rank's part in rebuilding its set.
    fn rebuild_member(
        &mut self,
        id: u64,
        comm: &crate::comm::Comm,
        index: usize,
        lost: bool,
        lost_in_set: &[usize],
    ) -> Result<bool, RuntimeError> {
        // No early return before the collectives below: every member must take part.
        let mut local_err = None;
        let header: Option<Header> = if lost {
            None
        } else {
            let rec = self.filemap.datasets.get(&id).expect("a survivor holds a record");
            let red = rec.red.as_ref().expect("a survivor has redundancy");
            redfile::read_header(&red.file).map_err(|e| local_err = Some(RuntimeError::from(e))).ok().map(|h| h.0)
        };
        let headers: Vec<Option<Header>> = comm.allgather(&header)?;
        let n = comm.size() as usize;
        let Some(template) = headers.iter().flatten().next().cloned() else {
            return Err(local_err.unwrap_or_else(|| {
                RuntimeError::Unrecoverable("no surviving member could read its redundancy file".into())
            }));
        };
        let all = redfile::members_files(headers.iter().flatten(), n).map_err(|_| {
            RuntimeError::Unrecoverable("the surviving redundancy files do not list every member's files".into())
        })?;
        let piece = self.settings.mpi_buf_size;
        if !lost {
            let rec = self.filemap.datasets.get(&id).expect("survivor").clone();
            let red = rec.red.clone().expect("survivor");
            let r = parallel::rebuild(comm, Member::Survivor(&rec), &red, lost_in_set, &all, piece);
            return match local_err {
                Some(e) => Err(e),
                None => r.map_err(RuntimeError::from),
            };
        }
        let rec = self.lost_record(id, &template, &all, index);
        let red = rec.red.clone().expect("a lost member's record names its redundancy file");
        // Drop what is left of a damaged part first (its files are recreated).
        if let Some(old) = self.filemap.datasets.remove(&id) {
            super::remove_part(&old);
        }
        // the rebuilt files are checked against their CRC32s as they are written
        let checked = parallel::rebuild(comm, Member::Lost(&rec), &red, lost_in_set, &all, piece)?;
        self.filemap.datasets.insert(id, rec);
        self.save_filemap()?;
        Ok(checked)
    }
}

/// A rank's view of its part of a cached dataset, gathered by rank 0.
#[derive(serde::Serialize, serde::Deserialize)]
struct Status {
    intact: bool,
    red: Option<RedInfo>,
    name: Option<String>,
    /// The files it holds (names below the prefix), for the report.
    files: Vec<String>,
    /// What is wrong with its part.
    problem: Option<String>,
}

/// A rebuild's line in the event log (`REBUILD`): the dataset, the scheme and the lost ranks
/// (known on rank 0, which writes the log), and when it began.
struct RebuildLog {
    id: u64,
    scheme: &'static str,
    lost: String,
    t0: Instant,
}

impl RebuildLog {
    /// Record the rebuild's outcome; `why` names a failure (empty when it went well).
    fn record(&self, rt: &Runtime, ok: bool, why: &str) {
        let secs = crate::events::Secs(self.t0.elapsed().as_secs_f64());
        let fields: [(&str, &dyn std::fmt::Display); 5] = [
            ("dset", &self.id),
            ("scheme", &self.scheme),
            ("lost", &self.lost),
            ("secs", &secs),
            ("ok", &u8::from(ok)),
        ];
        if why.is_empty() {
            rt.events.record("REBUILD", &fields);
        } else {
            let mut all = fields.to_vec();
            all.push(("why", &why));
            rt.events.record("REBUILD", &all);
        }
    }
}

/// Rank 0: the moves that bring each dataset part an owner lacks from the rank that offered
/// it (`all[rank]`: the rank's [`Offer`]), newest datasets first; one holder per part.
fn plan_moves(all: &[Offer]) -> Vec<Move> {
    let mut moves: Vec<Move> = Vec::new();
    for (holder, (_, offers)) in all.iter().enumerate() {
        for &(id, owner) in offers {
            let owned = all.get(owner as usize).is_none_or(|a| a.0.contains(&id));
            if !owned && !moves.iter().any(|m| m.0 == id && m.1 == owner) {
                moves.push((id, owner, holder as i32));
            }
        }
    }
    moves.sort_by_key(|m| (std::cmp::Reverse(m.0), m.1));
    moves
}

/// Rank 0's plan: for every rank (set id, index in set, lost), or why the dataset cannot be
/// rebuilt.
fn plan_rebuild(id: u64, all: &[Status], size: usize) -> Result<Plan, RuntimeError> {
    let name = all.iter().find_map(|s| s.name.clone()).unwrap_or_default();
    let lost: Vec<usize> = (0..size).filter(|&r| !all[r].intact).collect();
    let lost_files: Vec<String> = lost
        .iter()
        .take(4)
        .map(|&r| match (&all[r].problem, all[r].files.is_empty()) {
            (_, true) if all[r].name.is_none() => format!("rank {r} (its record is lost)"),
            (Some(p), _) => format!("rank {r} ({p})"),
            (None, _) => format!("rank {r} ({})", all[r].files.join(", ")),
        })
        .collect();
    let what = format!(
        "cached dataset {id} ({name}) lost or damaged data of {} rank(s): {}{}",
        lost.len(),
        lost_files.join("; "),
        if lost.len() > 4 { "; ..." } else { "" }
    );
    let unrebuildable = |why: String| RuntimeError::Unrebuildable { id, lost: what.clone(), why };
    let mut plan: Vec<Option<(usize, usize)>> = vec![None; size];
    let mut sets: BTreeMap<usize, RedInfo> = BTreeMap::new();
    for s in all {
        if let Some(red) = &s.red {
            if red.ranks.iter().any(|&r| r < 0 || r as usize >= size) {
                return Err(unrebuildable(", and it was written by a run with other ranks".into()));
            }
            for (x, &r) in red.ranks.iter().enumerate() {
                plan[r as usize] = Some((red.set_id, x));
            }
            sets.entry(red.set_id).or_insert_with(|| red.clone());
        }
    }
    if plan.iter().any(Option::is_none) {
        return Err(unrebuildable("; it has no redundancy data for every rank (SINGLE protection)".into()));
    }
    // an intact member without redundancy: its set's encoding never finished everywhere
    if let Some(r) = (0..size).find(|&r| all[r].intact && all[r].red.is_none()) {
        return Err(unrebuildable(format!(
            "; its redundancy encoding did not finish on every member (rank {r} has none), so it has SINGLE \
             protection only"
        )));
    }
    for (sid, red) in &sets {
        let lost_here: Vec<usize> = (0..red.ranks.len()).filter(|&x| !all[red.ranks[x] as usize].intact).collect();
        if !red.tolerates(&lost_here) {
            let ranks: Vec<i32> = lost_here.iter().map(|&x| red.ranks[x]).collect();
            return Err(unrebuildable(format!(
                "; set {sid} lost ranks {ranks:?} of {:?}, more than {} can rebuild (tolerates {})",
                red.ranks,
                red.scheme.name(),
                if red.scheme == crate::desc::Scheme::Partner {
                    "no two neighbours".to_string()
                } else {
                    red.failures.to_string()
                }
            )));
        }
    }
    let plan = plan
        .into_iter()
        .enumerate()
        .map(|(r, p)| {
            let (s, x) = p.expect("checked");
            (s, x, !all[r].intact)
        })
        .collect();
    Ok((plan, what))
}
