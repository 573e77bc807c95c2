//! Output phases: `SCR_Start_output` (new dataset id, redundancy descriptor, room in the
//! store), `SCR_Route_file` (where a file goes; registered before the application creates
//! it), `SCR_Complete_output` (agree on validity, apply redundancy, flush when due, halt
//! conditions), and the flushes SCR still owes at `SCR_Finalize`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::names::Validated;
use super::{Phase, Runtime, FLAG_CHECKPOINT, FLAG_OUTPUT};
use crate::error::{Error, Result};
use crate::identity;
use crate::state::dataset::DatasetDesc;
use crate::state::filemap::{DatasetRecord, FileMeta};
use crate::state::flushfile::Location;
use crate::state::halt::Halt;
use crate::{scr_debug, scr_error, scr_warn};

/// How many victims of a completion's eviction travel in its last reduction (more are
/// broadcast).
const CARRIED_VICTIMS: usize = 8;

/// What the stages of one `SCR_Complete_output` share.
struct Completion {
    id: u64,
    /// When its output phase started.
    start: Instant,
    name: String,
    /// Its redundancy descriptor's index, and whether it bypasses the cache.
    index: usize,
    bypass: bool,
    /// It has a redundancy encoder, and encodes in the background (`SCR_ENCODE_ASYNC`).
    encodes: bool,
    deferred: bool,
}

/// A stage of a completion found the dataset invalid on every rank (and said why): it is
/// discarded.
struct Discarded;

impl Runtime {
    /// `SCR_Start_output`, in stages: check the arguments here ([`check_start`]), agree on them
    /// and on the datasets the start evicts ([`Runtime::agree_start`]), number the dataset and
    /// choose its descriptor ([`Runtime::number_dataset`]), mark the victims, record it
    /// ([`Runtime::record_start`]) and open the phase ([`Runtime::open_output`]).
    pub(super) fn start_output(&mut self, name: Option<&str>, flags: i32) -> Result<()> {
        const CALL: &str = "SCR_Start_output";
        let call = self.call_name(CALL);
        if self.phase != Phase::Idle {
            return Err(self.phase_error(call, "between output and restart phases"));
        }
        let local = check_start(call, name, flags);
        let (is_ckpt, is_output) = (flags & FLAG_CHECKPOINT != 0, flags & FLAG_OUTPUT != 0);
        // (before the agreement: it may evict, and rank 0 chooses the victims of this start
        // with the agreement)
        self.progress(&[]);
        let carried = if !self.adoption.active() {
            self.agree_start(call, name, flags, local)?
        } else {
            local?;
            None
        };
        self.restart = None;
        let (id, ckpt, reddesc) = self.number_dataset(is_ckpt, is_output);
        self.watchdog_kick(id, reddesc.bypass);
        if !reddesc.bypass {
            // Marked now, saved with the new record below, moved away once every rank saved.
            // The new dataset is not counted: while it is written the store may hold one more
            // than its COUNT, so the newest complete checkpoint stays until the new one is
            // complete (see `evict_for_complete`).
            let store = reddesc.store.clone();
            let victims = match carried {
                Some(v) => self.evicting(&store, v),
                None => self.evictions(&store, None, 0),
            };
            for victim in victims {
                self.doom(victim);
            }
        }
        let local = self.record_start(id, ckpt, name, (is_ckpt, is_output), reddesc);
        self.open_output(call, id, local)
    }

    /// Every rank must pass the same name and flags (transparent mode passes the name and
    /// flags the ranks agreed on: the same local outcome everywhere, nothing to check). One
    /// reduction: the largest key, the largest complement (the smallest key), a failure, and
    /// rank 0's choice of the datasets this start evicts (count + 1, then them; 0: not chosen,
    /// they are broadcast later). Returns that choice if the reduction carried it.
    fn agree_start(
        &mut self,
        call: &'static str,
        name: Option<&str>,
        flags: i32,
        mut local: Result<()>,
    ) -> Result<Option<Vec<u64>>> {
        let (is_ckpt, is_output) = (flags & FLAG_CHECKPOINT != 0, flags & FLAG_OUTPUT != 0);
        let key = crate::identity::fnv1a(format!("{name:?}/{flags}").as_bytes()) & (u64::MAX >> 1);
        // the store this dataset goes to, as below (API mode: no earlier version)
        let planned = (self.rank0() && local.is_ok() && self.adoption.earlier().is_none()).then(|| {
            let d = self.descs.select((self.ckpt_id + u64::from(is_ckpt)).max(1), is_ckpt, is_output);
            if d.bypass {
                Vec::new()
            } else {
                let store = d.store.clone();
                self.victims_here(&store, None, 0)
            }
        });
        let mut mine =
            vec![key, u64::MAX - key, local.is_err() as u64, planned.as_ref().map_or(0, |v| v.len() as u64 + 1)];
        mine.extend(planned.iter().flatten().take(CARRIED_VICTIMS));
        mine.resize(4 + CARRIED_VICTIMS, 0);
        let all = self.world.max_u64s(&mine);
        if local.is_ok() && all[0] != u64::MAX - all[1] {
            local = Err(Error::usage(
                call,
                format!("ranks passed different names or flags (this rank: {name:?}, {flags})"),
            ));
        }
        self.agree_known(call, local, all[2] != 0 || all[0] != u64::MAX - all[1])?;
        let n = all[3] as usize;
        Ok((1..=CARRIED_VICTIMS + 1).contains(&n).then(|| all[4..4 + n - 1].to_vec()))
    }

    /// The new dataset's id, checkpoint number and redundancy descriptor (local, alike on
    /// every rank). A new version of a checkpoint that only adds files keeps its number (and
    /// so its descriptor); one that rewrites files is a checkpoint of its own (a new number,
    /// for the flush interval and the halt count) on the earlier version's store, where its
    /// carried files are hard-linked.
    fn number_dataset(&mut self, is_ckpt: bool, is_output: bool) -> (u64, u64, crate::desc::RedDesc) {
        self.dataset_id += 1;
        let earlier = self.adoption.earlier().and_then(|v| self.filemap.datasets.get(&v));
        let earlier_ckpt = earlier.and_then(|r| r.desc.ckpt);
        let earlier_store = earlier.map(|r| r.reddesc.store.clone());
        let ckpt = match earlier_ckpt {
            Some(c) if !self.adoption.counts() => c,
            _ => {
                if is_ckpt {
                    self.ckpt_id += 1;
                }
                self.ckpt_id
            }
        };
        let mut reddesc = self.descs.select(ckpt.max(1), is_ckpt, is_output).clone();
        if let (Some(c), Some(store)) = (earlier_ckpt, earlier_store) {
            if reddesc.store != store {
                reddesc = self.descs.select(c.max(1), is_ckpt, is_output).clone();
            }
        }
        (self.dataset_id, ckpt, reddesc)
    }

    /// Record dataset `id` incomplete in the filemap (with the marks of its victims) and make
    /// its cache directory (local). `kind`: (checkpoint, output). Transparent mode keeps the
    /// record in memory: it is saved with the dataset's files, in one write, and the directory
    /// made after it ([`Runtime::persist_start`]).
    fn record_start(
        &mut self,
        id: u64,
        ckpt: u64,
        name: Option<&str>,
        kind: (bool, bool),
        reddesc: crate::desc::RedDesc,
    ) -> Result<()> {
        let (is_ckpt, is_output) = kind;
        let rec = DatasetRecord {
            desc: DatasetDesc {
                id,
                ckpt: is_ckpt.then_some(ckpt),
                name: name.map(str::to_string).unwrap_or_else(|| format!("scr.dataset.{id}")),
                checkpoint: is_ckpt,
                output: is_output,
                created: identity::now_usecs(),
                user: self.layout.user.clone(),
                jobname: identity::job_name(),
                jobid: self.layout.jobid.clone(),
                ranks: self.world.size() as u32,
                size: 0,
                files: 0,
                complete: false,
                shared: Vec::new(),
            },
            dir: self.layout.cache_dataset_dir(&reddesc.store, id),
            reddesc,
            files: Vec::new(),
            complete: false,
            red: None,
        };
        self.filemap.datasets.insert(id, rec);
        self.routed.clear();
        if self.adoption.active() {
            return Ok(());
        }
        self.persist_start(id)
    }

    /// Save the filemap with dataset `id`'s record (and the marks of its victims), then make
    /// its cache directory (local): a directory in cache always has a record on disk.
    pub(super) fn persist_start(&mut self, id: u64) -> Result<()> {
        let saved = self.save_filemap();
        if !self.filemap.deleting.is_empty() {
            crate::log::crash_point("marked");
        }
        saved?;
        if let Some(dir) = self.filemap.datasets.get(&id).map(|r| r.dir.clone()) {
            crate::paths::create_dirs(&dir)?;
        }
        Ok(())
    }

    /// Open the output phase of dataset `id` once every rank recorded it (`local`: this
    /// rank's outcome); the victims marked leave after the agreement.
    fn open_output(&mut self, call: &'static str, id: u64, local: Result<()>) -> Result<()> {
        if self.adoption.active() {
            // transparent mode: the files are moved in next and the dataset completes at once;
            // a rank that failed here makes it invalid everywhere at its completion, whose
            // exchange also comes after every rank saved its marks: the victims are moved
            // away after it (`complete_output`)
            self.adoption.start_failed(local.err().map(|e| e.to_string()));
            self.phase = Phase::Output { id, start: Instant::now() };
            return Ok(());
        }
        let agreed = self.agree(call, local);
        self.bury();
        agreed?;
        self.phase = Phase::Output { id, start: Instant::now() };
        Ok(())
    }

    /// How many datasets `store` holds (its COUNT, `SCR_CACHE_SIZE` by default, at least 1).
    pub(super) fn store_count(&self, store: &Path) -> usize {
        self.descs.store(store).map(|s| s.count).unwrap_or(self.settings.cache_size).max(1)
    }

    /// The oldest cached datasets of `store` to delete so that its datasets other than `keep`,
    /// plus `room` more, fit within its COUNT (rank 0 decides, so every rank gets the same
    /// list); pinned datasets count but are never chosen, nor output datasets not yet in the
    /// prefix; the earlier version of the dataset being written does not count; a victim still being flushed in the background is waited for first. The caller
    /// deletes them.
    pub(super) fn evictions(&mut self, store: &Path, keep: Option<u64>, room: usize) -> Vec<u64> {
        let mine = if self.rank0() { self.victims_here(store, keep, room) } else { Vec::new() };
        // data that do not decode fail alike on every rank (the same bytes): nothing is
        // evicted, the store holds one more
        let victims: Vec<u64> = self.world.bcast(0, &mine).unwrap_or_default();
        self.evicting(store, victims)
    }

    /// Rank 0's choice of [`Runtime::evictions`] (local).
    fn victims_here(&self, store: &Path, keep: Option<u64>, room: usize) -> Vec<u64> {
        let count = self.store_count(store);
        {
            let cached: Vec<&DatasetRecord> = self
                .filemap
                .datasets
                .values()
                .filter(|r| r.reddesc.store == store && !r.reddesc.bypass && Some(r.desc.id) != keep)
                // the earlier version of the dataset being written: the new one replaces it
                .filter(|r| Some(r.desc.id) != self.adoption.earlier())
                // another number of processes wrote it: never evicted, it is not this run's
                .filter(|r| self.fits(r.desc.ranks))
                .collect();
            let mut victims = Vec::new();
            // a pinned dataset counts, but stays
            let mut excess = (cached.len() + room).saturating_sub(count);
            for r in cached {
                if excess == 0 {
                    break;
                }
                if self.adoption.pins(r.desc.id) {
                    continue;
                }
                if r.desc.output && !self.flushed(r.desc.id) && !self.bg.in_flight(r.desc.id) {
                    scr_warn!(
                        "keeping output dataset {} ({}) in cache: it has not reached the prefix yet",
                        r.desc.id,
                        r.desc.name
                    );
                    continue;
                }
                victims.push(r.desc.id);
                excess -= 1;
            }
            victims
        }
    }

    /// The victims every rank agreed on leave `store` (collective): those still being
    /// flushed are waited for first. Returns them, for the caller to delete.
    fn evicting(&mut self, store: &Path, victims: Vec<u64>) -> Vec<u64> {
        let count = self.store_count(store);
        // A victim still being flushed leaves only once its flush is finished everywhere.
        let flying: Vec<u64> = victims.iter().copied().filter(|id| self.bg.in_flight(*id)).collect();
        let mut waited = 0.0;
        if !flying.is_empty() {
            let t0 = Instant::now();
            self.progress(&flying);
            waited = self.world.max_f64(t0.elapsed().as_secs_f64());
            if self.rank0() {
                scr_debug!(
                    1,
                    "waited {waited:.3} s for the background flush of dataset(s) {flying:?} before evicting them (COUNT={count})"
                );
            }
        }
        if self.rank0() {
            for &id in &victims {
                scr_debug!(1, "evicting dataset {id} from cache {} (COUNT={count})", store.display());
                let name = self.filemap.datasets.get(&id).map(|r| r.desc.name.clone()).unwrap_or_default();
                let waited = crate::events::Secs(if flying.contains(&id) { waited } else { 0.0 });
                self.events.record("EVICT", &[("dset", &id), ("name", &name), ("waited", &waited)]);
            }
        }
        victims
    }

    /// The name below the prefix of a file `call` routes for the open dataset, checked: inside
    /// the prefix, outside its `.scr` directory.
    pub(super) fn dataset_rel(&self, call: &'static str, name: &str) -> Result<PathBuf> {
        let Some(rel) = self.layout.prefix.relative(Path::new(name)) else {
            return Err(Error::usage(
                call,
                format!(
                    "{name} resolves to {}, which is not inside the prefix directory {} (set SCR_PREFIX)",
                    crate::paths::normalize(Path::new(name), &crate::paths::cwd()).display(),
                    self.layout.prefix.path.display()
                ),
            ));
        };
        not_reserved(call, &rel, Path::new(name))?;
        Ok(rel)
    }

    /// `SCR_Route_file`. In an output phase the file joins the open dataset's record, and its
    /// name is appended to the routes log beside the filemap before the application creates it
    /// ([`crate::state::filemap::RoutesLog`]): C SCR rewrites the whole filemap at every route,
    /// which makes a checkpoint of N files per rank write O(N^2) bytes of metadata (minutes at
    /// 16,000 files). The filemap is saved with the files when the dataset completes.
    pub(super) fn route_file(&mut self, name: &str) -> Result<PathBuf> {
        const CALL: &str = "SCR_Route_file";
        let call = self.call_name(CALL);
        let id = match &self.phase {
            Phase::Idle => return Ok(PathBuf::from(name)),
            Phase::Restart => return self.route_restart(name),
            Phase::Output { id, .. } => *id,
        };
        let rel = self.dataset_rel(call, name)?;
        self.route_in_dataset(call, id, rel, Path::new(name)).map(|(target, _)| target)
    }

    /// [`Runtime::route_file`] of a file named by its path below the prefix, as it
    /// is (transparent mode, in the output phase it forms a dataset in): no conversion
    /// through a string and back, and a name that is not UTF-8 is refused, naming the file,
    /// rather than recorded under another name.
    pub(super) fn route_rel(&mut self, rel: &Path) -> Result<(PathBuf, bool)> {
        let call = self.call_name("SCR_Route_file");
        let (id, shown) = self.output_rel(call, rel)?;
        self.route_in_dataset(call, id, rel.to_path_buf(), &shown)
    }

    /// The open dataset's id and the prefix's path of `rel` (for messages), when `rel` may be
    /// routed in it: an output phase, a relative UTF-8 name (as the metadata records names)
    /// outside the prefix's `.scr` directory.
    pub(super) fn output_rel(&self, call: &'static str, rel: &Path) -> Result<(u64, PathBuf)> {
        let Phase::Output { id, .. } = self.phase else {
            return Err(self.phase_error(call, "in an output phase (after SCR_Start_output)"));
        };
        let shown = self.layout.prefix.join(rel);
        if let Some(why) = crate::paths::rel_problem(rel) {
            return Err(Error::usage(call, format!("{}: not a name below the prefix ({why})", rel.display())));
        }
        if rel.to_str().is_none() {
            return Err(Error::usage(
                call,
                format!("{}: the name is not valid UTF-8, which SCR's metadata cannot record", shown.display()),
            ));
        }
        not_reserved(call, rel, &shown)?;
        Ok((id, shown))
    }

    /// Make the directory of `target`, a file routed in the open dataset (`bypass`: in the
    /// prefix, with the application's permissions; else in cache, SCR's).
    pub(super) fn make_parent_of(&self, target: &Path) -> Result<()> {
        let Phase::Output { id, .. } = self.phase else { return Ok(()) };
        let bypass = self.filemap.datasets.get(&id).is_some_and(|r| r.reddesc.bypass);
        make_parent(target, bypass)
    }

    /// Route file `rel` (below the prefix) of open dataset `id` for this rank: its target,
    /// and whether it was newly recorded. `shown` names it in messages.
    fn route_in_dataset(&mut self, call: &'static str, id: u64, rel: PathBuf, shown: &Path) -> Result<(PathBuf, bool)> {
        let name = shown.display();
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        if rec.desc.shared.iter().any(|s| s.rel == rel) {
            // declared shared by this rank (SCR_Route_shared_file): the same place again
            return Ok((self.layout.shared_staging(&rel), false));
        }
        let target = if rec.reddesc.bypass { self.layout.prefix.join(&rel) } else { rec.dir.join(&rel) };
        if target.as_os_str().len() >= crate::MAX_FILENAME {
            return Err(Error::usage(
                call,
                format!("{} is longer than SCR_MAX_FILENAME ({})", target.display(), crate::MAX_FILENAME),
            ));
        }
        // (transparent mode makes it when it places the file, after saving the record)
        if !self.adoption.active() {
            make_parent(&target, rec.reddesc.bypass)?;
        }
        crate::scr_debug!(2, "route {name} -> {} (dataset {id})", target.display());
        // (the record's names, in a set: a linear search per route made N files O(N^2))
        let recorded = self.routed.insert(rel.clone());
        if recorded {
            // on disk before the application creates the file (transparent mode saves the
            // record with every file before it places them; bypass files are not SCR's to remove)
            if !self.adoption.active() && !rec.reddesc.bypass {
                let (layout, rank) = (&self.layout, self.world.rank());
                self.routes.append(id, &rel, || layout.filemap(rank))?;
            }
            rec.files.push(FileMeta { rel, path: target.clone(), size: 0, crc: None, complete: false });
        }
        Ok((target, recorded))
    }

    pub(super) fn complete_output(&mut self, valid: bool) -> Result<bool> {
        const CALL: &str = "SCR_Complete_output";
        let call = self.call_name(CALL);
        let Phase::Output { id, start } = self.phase.clone() else {
            return Err(self.phase_error(call, "after SCR_Start_output"));
        };
        self.phase = Phase::Idle;
        let c = self.completion(id, start);
        // validate -> agree -> encode -> record: a failure at any stage discards the dataset
        let r = match self.complete_stages(&c, valid) {
            Ok(victims) => self.dispose(&c, victims),
            Err(Discarded) => {
                self.drop_cached(id);
                Ok(false)
            }
        };
        // the filemap holds the routed names now (complete, or marked for deletion)
        self.routes.end();
        r
    }

    /// What the stages of completing dataset `id` share (read once, before they run).
    fn completion(&self, id: u64, start: Instant) -> Completion {
        let rec = &self.filemap.datasets[&id];
        let (index, bypass) = (rec.reddesc.index, rec.reddesc.bypass);
        Completion {
            id,
            start,
            name: rec.desc.name.clone(),
            index,
            bypass,
            encodes: self.encoder(index, bypass).is_some(),
            // SCR_ENCODE_ASYNC: complete with SINGLE protection now, encode after returning
            deferred: self.encodes_async(index, bypass),
        }
    }

    /// The stages of a completion up to its record: every rank checks its files
    /// ([`Runtime::validate_files`]), the ranks agree on the outcome and the totals
    /// ([`Runtime::agree_valid`]), redundancy is applied ([`Runtime::encode_complete`]) and
    /// the dataset is recorded complete ([`Runtime::record_complete`]). Returns the victims
    /// of its eviction every rank already agreed on, if any.
    fn complete_stages(&mut self, c: &Completion, valid: bool) -> std::result::Result<Option<Vec<u64>>, Discarded> {
        let local = self.validate_files(c, valid);
        let (total, files) = self.agree_valid(c, local)?;
        self.encode_complete(c, total)?;
        self.record_complete(c, total, files)
    }

    /// Stage validate (local): each file of this rank's exists; its size (and its CRC32, when
    /// computed at completion: `SCR_CRC_ON_COPY=1`, or the few small files of a dataset the
    /// background would checksum, [`super::checksums::small_enough`]) is recorded. Returns
    /// what is wrong here, if anything, and in transparent mode this rank's listing of the
    /// files for the other ranks, from the same `lstat` (one per file).
    fn validate_files(&mut self, c: &Completion, valid: bool) -> Validated {
        use crate::config::CrcOnCopy;
        // A redundancy encoder reads every byte anyway and records the CRC32 then.
        let crc = self.settings.crc_on_copy == CrcOnCopy::AtCompletion && !c.encodes;
        let background = self.settings.crc_on_copy == CrcOnCopy::Background && !c.encodes && !c.bypass;
        let buf = self.settings.file_buf_size;
        let mut problems = Vec::new();
        if !valid {
            problems.push(if self.mode == super::Mode::Transparent {
                "a write or close of one of its files failed".to_string()
            } else {
                "the application reported valid=0".to_string()
            });
        }
        let ranks = self.world.size() as usize;
        let rec = self.filemap.datasets.get_mut(&c.id).expect("the open dataset is recorded");
        let mut found = Vec::with_capacity(rec.files.len());
        let listing = self.mode == super::Mode::Transparent && super::peers::listable(rec.files.len(), ranks);
        let mut listed = listing.then(|| Vec::with_capacity(rec.files.len()));
        for f in rec.files.iter_mut() {
            // (a symbolic link, which SCR never places itself, is sized through: its target's
            // bytes are what a restart reads)
            let md = std::fs::symlink_metadata(&f.path).and_then(|l| {
                let size = if l.file_type().is_symlink() { std::fs::metadata(&f.path)?.len() } else { l.len() };
                Ok((l, size))
            });
            match md {
                Ok((lstat, size)) => {
                    f.size = size;
                    f.complete = true;
                    found.push(true);
                    if let Some(l) = listed.as_mut() {
                        l.push(super::peers::Listed::from_lstat(&f.rel, &lstat));
                    }
                }
                Err(e) => {
                    problems.push(format!("{} (routed as {}): {e}", f.path.display(), f.rel.display()));
                    found.push(false);
                    // (a part with a file that cannot be described is not listed)
                    listed = None;
                }
            }
        }
        // the CRC32s the background would compute, here when this rank's are few and small
        // (a file not found has no CRC32 to compute)
        let small = background && super::checksums::small_enough(rec);
        if crc || small {
            for (f, exists) in rec.files.iter_mut().zip(found) {
                if exists && (crc || f.crc.is_none()) {
                    match crate::checksum::file_crc(&f.path, buf) {
                        Ok(c) => f.crc = Some(c.crc),
                        Err(e) => problems.push(e.to_string()),
                    }
                }
            }
        }
        Validated { err: (!problems.is_empty()).then(|| problems.join("; ")), listed }
    }

    /// Stage agree (collective): one exchange of every rank's outcome, bytes and files, and
    /// the names it routed; the dataset's shared files and totals are recorded. Returns the
    /// totals (bytes, files) over every rank.
    fn agree_valid(&mut self, c: &Completion, local: Validated) -> std::result::Result<(u64, u64), Discarded> {
        let id = c.id;
        let rec = &self.filemap.datasets[&id];
        let (bytes, nfiles) = (rec.bytes(), rec.files.len() as u64);
        let checked = self.complete_shared(id, local, bytes, nfiles);
        // transparent mode: what its start marked for deletion (every rank saved its marks
        // before the exchange) leaves now
        self.bury();
        let (mut shared, total, files) = match checked {
            super::shared::Checked::Done { shared, bytes, files, listed } => {
                if self.mode == super::Mode::Transparent {
                    let (me, rank0) = (self.world.rank() as u32, self.rank0());
                    self.peers.record(id, me, listed, rank0);
                }
                (shared, bytes, files)
            }
            super::shared::Checked::Misused => return Err(Discarded),
            super::shared::Checked::Failed(summary) => {
                self.report_invalid(id, &summary);
                return Err(Discarded);
            }
        };
        // a new version of a cached checkpoint (transparent mode) keeps its shared files
        if let Some(old) = self.adoption.earlier().and_then(|v| self.filemap.datasets.get(&v)) {
            let kept: Vec<_> =
                old.desc.shared.iter().filter(|o| !shared.iter().any(|s| s.rel == o.rel)).cloned().collect();
            shared.extend(kept);
        }
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        let (total, files) = if shared.is_empty() {
            (total, files)
        } else {
            // a name several ranks routed in a bypass dataset is the dataset's, not each
            // rank's: counted again without them (`shared` is agreed: every rank sums)
            rec.files.retain(|f| !shared.iter().any(|s| s.rel == f.rel));
            let (bytes, nfiles) = (rec.bytes(), rec.files.len() as u64);
            (self.world.sum_u64(bytes), self.world.sum_u64(nfiles))
        };
        let total = total + shared.iter().map(|s| s.size).sum::<u64>();
        let files = files + shared.len() as u64;
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        rec.desc.size = total;
        rec.desc.files = files;
        rec.desc.shared = shared;
        rec.desc.complete = true;
        Ok((total, files))
    }

    /// Stage encode (collective when the dataset has a redundancy plan): the plan applied
    /// now, unless encoded in the background after the completion.
    fn encode_complete(&mut self, c: &Completion, total: u64) -> std::result::Result<(), Discarded> {
        let id = c.id;
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        let plan = self.sets.get(c.index).and_then(Option::as_ref).filter(|_| c.encodes && !c.deferred);
        let t_encode = Instant::now();
        let applied = match plan {
            Some(p) => {
                crate::redundancy::parallel::encode(p, rec, self.settings.mpi_buf_size, crate::comm::Waiting::Block)
            }
            None => Ok(()),
        };
        // (whether there is a plan is the same on every rank: without one nothing to agree on)
        let planned = plan.is_some();
        let applied = match planned {
            true => self.agree(&format!("applying redundancy to dataset {id}"), applied),
            false => applied,
        };
        if let Err(e) = applied {
            if self.rank0() {
                scr_error!("{e}; the dataset is discarded");
            }
            return Err(Discarded);
        }
        if planned && self.rank0() {
            let secs = t_encode.elapsed().as_secs_f64();
            let mibps = crate::log::mib_per_sec(total, secs);
            scr_debug!(1, "redundancy for dataset {id} ({}): {secs:.3} s, {mibps:.1} MiB/s of data encoded", c.name);
        }
        Ok(())
    }

    /// Stage record (collective): every rank saves the dataset as complete, and in the same
    /// reduction rank 0's choice of the datasets its completion evicts travels (see
    /// `evict_for_complete`; decided now, nothing after changes the candidates: they exclude
    /// this one). Returns them, if the reduction carried them all.
    fn record_complete(
        &mut self,
        c: &Completion,
        total: u64,
        files: u64,
    ) -> std::result::Result<Option<Vec<u64>>, Discarded> {
        let id = c.id;
        let rec = self.filemap.datasets.get_mut(&id).expect("the open dataset is recorded");
        rec.complete = true;
        let scheme = rec.red.as_ref().map_or(crate::desc::Scheme::Single, |r| r.scheme);
        let evicts = (!c.deferred && !c.bypass).then(|| rec.reddesc.store.clone());
        let planned = match &evicts {
            Some(store) if self.rank0() => self.victims_here(store, Some(id), self.room_after(store)),
            _ => Vec::new(),
        };
        let saved = self.save_filemap();
        let mut mine = vec![saved.is_err() as u64, planned.len() as u64];
        mine.extend(planned.iter().take(CARRIED_VICTIMS));
        mine.resize(2 + CARRIED_VICTIMS, 0);
        let all = self.world.max_u64s(&mine);
        let what = format!("recording dataset {id} as complete");
        if let Err(e) = self.agree_known(&what, saved, all[0] != 0) {
            if self.rank0() {
                scr_error!("{e}; the dataset is discarded");
            }
            return Err(Discarded);
        }
        // more victims than the reduction carries: `evict_for_complete` broadcasts them
        let victims = (all[1] as usize <= CARRIED_VICTIMS).then(|| all[2..2 + all[1] as usize].to_vec());
        // a new version of a transparent dataset replaces the earlier one, which leaves the
        // cache next: the flush file forgets it in the same write, if only the cache has it
        // (where a flush stands decides whether the new version goes to the prefix too)
        if let Some(earlier) = self
            .adoption
            .earlier()
            .filter(|&v| self.flushes.location(v) == Some(Location::Cache) && !self.bg.in_flight(v))
        {
            self.flushes.datasets.remove(&earlier);
        }
        self.set_location(id, Some(Location::Cache));
        self.policy.last = super::policy::OutputStats { bytes: total, files, scheme: scheme.name() };
        self.report_complete(c, total, files, scheme);
        Ok(victims)
    }

    /// Rank 0 says that dataset `c.id` is complete, with its size, time and protection.
    fn report_complete(&self, c: &Completion, total: u64, files: u64, scheme: crate::desc::Scheme) {
        // (this rank's time once every rank recorded it: the slowest rank's, nearly)
        let secs = c.start.elapsed().as_secs_f64();
        if !self.rank0() {
            return;
        }
        let (id, name) = (c.id, &c.name);
        let rec = &self.filemap.datasets[&id];
        let (is_ckpt, is_output) = (rec.desc.checkpoint, rec.desc.output);
        scr_debug!(
            1,
            "dataset {id} ({name}, {}) complete: {} in {files} file(s), {secs:.3} s, {:.1} MiB/s, {}{}{}",
            if is_ckpt && is_output {
                "checkpoint+output"
            } else if is_ckpt {
                "checkpoint"
            } else {
                "output"
            },
            crate::log::bytes(total),
            crate::log::mib_per_sec(total, secs),
            scheme.name(),
            if c.bypass { ", bypass" } else { "" },
            match self.sets.get(c.index).and_then(Option::as_ref).filter(|_| c.deferred) {
                Some(p) => format!(" until its {} encoding is done in the background", p.scheme.name()),
                None => String::new(),
            }
        );
    }

    /// Stage dispose (collective): the complete dataset is flushed when due, older datasets
    /// leave, the halt conditions are checked, and its background work starts. An output
    /// dataset whose flush failed fails the call.
    fn dispose(&mut self, c: &Completion, victims: Option<Vec<u64>>) -> Result<bool> {
        let id = c.id;
        let (is_ckpt, background, result) = self.flush_complete(c);

        // Only now that it is complete do older datasets leave: a failed or killed checkpoint
        // never costs the newest complete one. One encoded in the background has SINGLE
        // protection until every rank's encoding finished: the older ones leave then.
        if !c.deferred {
            self.evict_for_complete(id, victims);
        }

        if is_ckpt && (self.adoption.earlier().is_none() || self.adoption.counts()) {
            self.checkpoint_taken();
        }
        self.progress(&[]);
        // Last, so the background work does not compete with the rest of this call. A
        // dataset nothing else checksums (SINGLE, not flushed) gets its CRC32s in the background.
        if c.deferred && self.filemap.datasets.contains_key(&id) {
            self.start_encode(id);
        }
        if c.deferred {
            self.bg.evict_after_encode.push(id);
        }
        if background {
            self.start_async_flush(id);
        } else if self.filemap.datasets.contains_key(&id) {
            self.start_checksum(id);
        }
        result
    }

    /// The flush a completion owes now (output, a periodic checkpoint, a bypass dataset),
    /// unless it goes in the background. Returns whether the dataset is a checkpoint, whether
    /// its flush goes in the background, and the call's outcome.
    fn flush_complete(&mut self, c: &Completion) -> (bool, bool, Result<bool>) {
        let id = c.id;
        let rec = &self.filemap.datasets[&id];
        let (is_ckpt, is_output, ckpt) = (rec.desc.checkpoint, rec.desc.output, rec.desc.ckpt);
        let periodic = self.settings.flush > 0 && ckpt.is_some_and(|c| c.is_multiple_of(self.settings.flush));
        // a version that only adds files to a checkpoint in the prefix goes there too (its
        // prefix copy would lack them); one that rewrites files is flushed when it is due
        let periodic = periodic
            || (!self.adoption.counts()
                && self.adoption.earlier().is_some_and(|v| self.flushed(v) || self.bg.in_flight(v)));
        let mut result = Ok(true);
        let background = (is_output || periodic) && self.flushes_async(id);
        if !background && (is_output || periodic || c.bypass) {
            match self.flush_dataset(id) {
                Ok(()) => {
                    if !is_ckpt {
                        self.drop_cached(id);
                    }
                }
                Err(e) => {
                    if self.rank0() {
                        scr_error!("{e}; the dataset stays in cache and SCR will retry at {}", self.finalize_name());
                    }
                    if is_output {
                        result = Err(e);
                    }
                }
            }
        }
        (is_ckpt, background, result)
    }

    /// Rank 0 says why dataset `id` is invalid on every rank (`summary`, agreed).
    fn report_invalid(&self, id: u64, summary: &str) {
        if self.rank0() {
            let kept = self.kept_note(id);
            let space = if summary.contains("No space left") {
                "; the store ran out of space: while a checkpoint is written it holds one dataset more than \
                 its COUNT (SCR_CACHE_SIZE), so the previous one is never deleted first"
            } else {
                ""
            };
            scr_error!("{summary}; the dataset is invalid on every rank and is discarded{kept}{space}");
        }
    }

    /// What a failed dataset `id` leaves: "; `<name>` (dataset `<n>`) stays the newest checkpoint
    /// in cache", or nothing when no complete checkpoint is cached.
    fn kept_note(&self, id: u64) -> String {
        let kept = self.filemap.datasets.values().rev().find(|r| r.desc.id != id && r.complete && r.desc.checkpoint);
        kept.map_or(String::new(), |r| {
            format!("; {} (dataset {}) stays the newest checkpoint in cache", r.desc.name, r.desc.id)
        })
    }

    /// Dataset `id` is complete and still cached (collective): the oldest other datasets of
    /// its store leave so that it holds no more than its COUNT, `id` included. In transparent
    /// mode at least the two newest checkpoints stay: the application may still name the
    /// previous one (its pointer file, outside the patterns, moves after the sync point that
    /// completed this one); the previous one leaves at the next dataset's sync point.
    /// `victims`: the ones every rank already agreed on, if any.
    fn evict_for_complete(&mut self, id: u64, victims: Option<Vec<u64>>) {
        let Some(store) = self.filemap.datasets.get(&id).filter(|r| !r.reddesc.bypass).map(|r| r.reddesc.store.clone())
        else {
            return;
        };
        let victims = match victims {
            Some(v) => self.evicting(&store, v),
            None => {
                let room = self.room_after(&store);
                self.evictions(&store, Some(id), room)
            }
        };
        // the victims are agreed: no rank saves its filemap or joins the agreement for none
        if victims.is_empty() {
            return;
        }
        self.drop_many(&victims);
    }

    /// The room `evict_for_complete` keeps in `store`.
    fn room_after(&self, store: &Path) -> usize {
        match self.mode {
            super::Mode::Api => 1,
            super::Mode::Transparent => usize::from(self.store_count(store) > 1),
        }
    }

    /// Collective (every SCR progress point): the datasets encoded in the background whose
    /// encoding finished on every rank evict the older datasets their completion made excess.
    /// One whose encoding failed on some rank keeps them (it has SINGLE protection only); so
    /// does one a newer dataset followed, whose own eviction decides.
    pub(super) fn evict_encoded(&mut self) {
        if self.bg.evict_after_encode.is_empty() {
            return;
        }
        // per dataset: [encoding still running here, not encoded here, not the newest here]
        let newest = self.filemap.datasets.keys().max().copied();
        let mine: Vec<u64> = self
            .bg
            .evict_after_encode
            .iter()
            .flat_map(|id| {
                let rec = self.filemap.datasets.get(id);
                let unencoded = rec.is_some_and(|r| r.red.is_none());
                [self.bg.encoding(*id) as u64, unencoded as u64, (newest != Some(*id)) as u64]
            })
            .collect();
        let all = self.world.max_u64s(&mine);
        let waiting = std::mem::take(&mut self.bg.evict_after_encode);
        for (i, id) in waiting.into_iter().enumerate() {
            if all[3 * i] != 0 {
                self.bg.evict_after_encode.push(id);
            } else if all[3 * i + 1] == 0 && all[3 * i + 2] == 0 {
                self.evict_for_complete(id, None);
            } else if self.rank0() {
                scr_debug!(1, "dataset {id}: not encoded on every rank or not the newest: older datasets stay");
            }
        }
    }

    /// After a successful checkpoint: count down `scr_halt --checkpoints`, check the halt
    /// conditions, and arrange the exit if `SCR_HALT_EXIT=1`.
    fn checkpoint_taken(&mut self) {
        if self.rank0() {
            let r = Halt::count_checkpoint(&self.layout.halt());
            if let Err(e) = r {
                scr_warn!("cannot update the halt file: {e}");
            }
        }
        if self.settings.halt_exit && self.mode == super::Mode::Api {
            if let Some(reason) = self.halt_reason() {
                self.exit_requested = Some(reason);
            }
        }
    }

    /// Flushes SCR owes the prefix: output datasets not yet there, and (with `SCR_FLUSH` > 0)
    /// the newest checkpoint if it is only in cache.
    pub(super) fn flush_owed(&mut self) {
        let mut owed: Vec<u64> = self
            .filemap
            .datasets
            .values()
            .filter(|r| r.complete && r.desc.output && !self.flushed(r.desc.id) && self.fits(r.desc.ranks))
            .map(|r| r.desc.id)
            .collect();
        if self.settings.flush > 0 {
            let newest = self
                .filemap
                .datasets
                .values()
                .rev()
                .find(|r| r.complete && r.desc.checkpoint && self.fits(r.desc.ranks));
            if let Some(r) = newest {
                if !self.flushed(r.desc.id) && !owed.contains(&r.desc.id) {
                    owed.push(r.desc.id);
                }
            }
        }
        let owed: Vec<u64> = self.world.bcast(0, &owed).unwrap_or_else(|e| {
            if self.rank0() {
                scr_error!("{e}; the flushes SCR owes are not done (scavenge the cache)");
            }
            Vec::new()
        });
        for id in owed {
            if let Err(e) = self.flush_dataset(id) {
                if self.rank0() {
                    scr_error!("{e}; the dataset remains only in cache (scavenge it before the allocation ends)");
                }
            }
        }
    }

    /// `SCR_Finalize`'s checks before shutting down.
    pub(super) fn finalize_checked(&mut self) -> Result<()> {
        match self.phase.clone() {
            Phase::Idle => Ok(()),
            Phase::Output { id, .. } => {
                if self.rank0() {
                    scr_error!("SCR_Finalize called inside the output phase of dataset {id}: the dataset is discarded");
                }
                self.phase = Phase::Idle;
                self.drop_cached(id);
                Err(Error::usage("SCR_Finalize", format!("called before SCR_Complete_output for dataset {id}")))
            }
            Phase::Restart => {
                self.phase = Phase::Idle;
                Err(Error::usage("SCR_Finalize", "called before SCR_Complete_restart"))
            }
        }
    }
}

/// `SCR_Start_output`'s arguments checked on this rank: known flags, a name of 1 to
/// `SCR_MAX_FILENAME - 1` bytes.
fn check_start(call: &'static str, name: Option<&str>, flags: i32) -> Result<()> {
    let mut local: Result<()> = Ok(());
    if flags & !(FLAG_CHECKPOINT | FLAG_OUTPUT) != 0 || flags == 0 {
        local = Err(Error::usage(
            call,
            format!("flags={flags}: pass SCR_FLAG_CHECKPOINT, SCR_FLAG_OUTPUT or both (SCR_FLAG_CHECKPOINT|SCR_FLAG_OUTPUT)"),
        ));
    }
    if let Some(n) = name {
        if n.is_empty() || n.len() >= crate::MAX_FILENAME {
            local =
                Err(Error::usage(call, format!("the dataset name must have 1 to {} bytes", crate::MAX_FILENAME - 1)));
        }
    }
    local
}

/// `Err` for `call` when `rel` (below the prefix; `shown` in the message) is inside the
/// prefix's `.scr` directory, which SCR reserves.
fn not_reserved(call: &'static str, rel: &Path, shown: &Path) -> Result<()> {
    if crate::paths::in_scr_dir(rel) {
        return Err(Error::usage(
            call,
            format!(
                "{} is inside the prefix's {} directory, which SCR reserves",
                shown.display(),
                crate::paths::SCR_DIR
            ),
        ));
    }
    Ok(())
}

/// Make the directory of `target` (`bypass`: a file in the prefix, made with the application's
/// permissions; else one in cache).
fn make_parent(target: &Path, bypass: bool) -> Result<()> {
    let Some(parent) = target.parent() else { return Ok(()) };
    if bypass {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("create directory", parent, e))
    } else {
        Ok(crate::paths::create_dirs(parent)?)
    }
}
