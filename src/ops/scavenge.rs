//! Scavenge (user guide 2.3.8, SCR internals "Scavenge"): after the last run of an allocation
//! ended (finished, killed or failed) and before the allocation does, copy the datasets that
//! are still only in node-local caches to the prefix, then build them there.
//!
//! * [`copy_node`] (`scr_copy`) runs on one node: from the control directory it reads the
//!   flush file and the filemaps of the ranks that ran there, picks the newest checkpoint and
//!   every output dataset not yet in the prefix (a dataset whose flush was cut short, marked
//!   `FLUSHING`, counts as not there; one the index lists as complete is skipped), and copies
//!   each rank's files to their place below the prefix and its redundancy file to
//!   `.scr/scr.dataset.<id>/`, each verified (size, and CRC32 when the cache recorded one) and
//!   published under a temporary name; then it writes the rank's `<rank>.scrfilemap`. A file
//!   that fails to copy leaves that rank's part missing, for the build to rebuild.
//! * [`scavenge`] (`scr_scavenge`, `scr_postrun`) runs `scr_copy` on every node at once through
//!   a per-node command (`srun -w {node}`, `ssh {node}`, or `scripts/sim-node.sh` on the
//!   simulated cluster), reads back which datasets arrived, and builds each
//!   ([`super::build`]): what a lost node held is rebuilt from the redundancy data of the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::build::{self, Report};
use super::{OpError, OpResult};
use crate::checksum::file_crc;
use crate::config::Settings;
use crate::paths::Prefix;
use crate::redundancy::RedInfo;
use crate::state::filemap::{DatasetRecord, Filemap};
use crate::state::flushfile::{FlushFile, Location};
use crate::state::index::Index;
use crate::state::layout::Layout;
use crate::state::rankfile::{RankFile, RankFileEntry, RankRed};
use crate::transfer::copy::copy_verified;

/// The prefix of the lines `scr_copy` prints for `scr_scavenge` to read.
pub const PROTOCOL: &str = "SCR_COPY";

/// The job's layout (with this node's control directory) and settings, as the library
/// derives them: configuration from the environment and files, job id and user name from the
/// environment. `prefix` overrides `SCR_PREFIX`.
pub fn job_context(prefix: Option<&str>) -> OpResult<(Layout, Settings)> {
    if let Some(p) = prefix {
        // The user config file is found through SCR_PREFIX; this runs before any thread starts.
        std::env::set_var("SCR_PREFIX", super::prefix::choose(Some(p)));
    }
    let resolved = crate::config::resolve()?;
    let settings = Settings::from_resolved(&resolved, crate::paths::cwd())?;
    let prefix = Prefix::new(&settings.prefix);
    super::prefix::open(&prefix.path, false)?;
    let user = crate::identity::user_name();
    let job = crate::identity::job_id(&prefix.path);
    Ok((Layout::new(prefix, &settings.cntl_base, &user, &job.id), settings))
}

/// What one node copied.
#[derive(Debug, Default)]
pub struct NodeCopy {
    /// (dataset, rank, files, bytes) copied completely.
    pub copied: Vec<(u64, u32, usize, u64)>,
    /// (dataset, rank, why) parts that could not be copied.
    pub failed: Vec<(u64, u32, String)>,
    /// Remarks (what was chosen and why, what was skipped).
    pub notes: Vec<String>,
}

impl NodeCopy {
    /// The lines `scr_copy` prints on stdout for the driver.
    pub fn protocol_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .copied
            .iter()
            .map(|(id, r, n, b)| format!("{PROTOCOL} copied id={id} rank={r} files={n} bytes={b}"))
            .collect();
        out.extend(
            self.failed
                .iter()
                .map(|(id, r, why)| format!("{PROTOCOL} failed id={id} rank={r} why={}", why.replace('\n', " "))),
        );
        out
    }
}

/// Copy this node's cached parts of the datasets to scavenge (`ids`, or the ones the flush
/// file says are owed) to the prefix.
pub fn copy_node(layout: &Layout, buf: usize, ids: Option<&[u64]>) -> OpResult<NodeCopy> {
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
        return Ok(out);
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
                Err(e) => out.failed.push((id, *rank, e)),
            }
        }
    }
    Ok(out)
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
) -> Result<(usize, u64, Option<String>), String> {
    let id = rec.desc.id;
    let dsdir = layout.prefix_dataset_dir(id);
    std::fs::create_dir_all(&dsdir).map_err(|e| format!("create {}: {e}", dsdir.display()))?;
    let mut files = Vec::with_capacity(rec.files.len());
    let mut bytes = 0;
    for f in &rec.files {
        let dst = layout.prefix.join(&f.rel);
        let c = if f.path == dst {
            // A bypass file is in the prefix already.
            let c = file_crc(&dst, buf).map_err(|e| e.to_string())?;
            if c.size != f.size || f.crc.is_some_and(|crc| crc != c.crc) {
                return Err(format!("{}: does not match what was written", dst.display()));
            }
            c
        } else {
            copy_verified(&f.path, &dst, Some(f.size), f.crc, buf, false).map_err(|e| e.to_string())?
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
    fm.save(&layout.rank_filemap(id, rank)).map_err(|e| e.to_string())?;
    Ok((rec.files.len(), bytes, note))
}

/// How to scavenge.
#[derive(Debug, Clone)]
pub struct Options {
    /// The nodes whose caches to copy.
    pub nodes: Vec<String>,
    /// How to run a command on a node: a shell prefix with `{node}` (e.g. `ssh {node}`), or
    /// `None` to run it here (only for this host).
    pub node_cmd: Option<String>,
    /// The `scr_copy` program.
    pub copy_exe: PathBuf,
    /// Datasets to copy (empty: the ones owed).
    pub ids: Vec<u64>,
    /// Rebuild buffer size.
    pub piece: usize,
}

/// What `scr_copy` did on one node.
#[derive(Debug, Clone, Default)]
pub struct NodeResult {
    pub node: String,
    /// Exit status of the node's command (`None`: killed, or it could not start).
    pub status: Option<i32>,
    pub copied: Vec<(u64, u32)>,
    pub failed: Vec<(u64, u32, String)>,
    /// Why the command could not run, if it could not.
    pub error: Option<String>,
}

/// The outcome of a scavenge.
#[derive(Debug, Default)]
pub struct Outcome {
    pub nodes: Vec<NodeResult>,
    pub builds: Vec<Report>,
    /// (dataset, why) builds that could not run at all.
    pub build_errors: Vec<(u64, String)>,
}

impl Outcome {
    /// Every dataset that arrived was built complete, and every node answered.
    pub fn ok(&self) -> bool {
        self.build_errors.is_empty()
            && self.builds.iter().all(|b| b.complete)
            && self.nodes.iter().all(|n| n.error.is_none() && n.status == Some(0))
    }
}

/// The command that runs `scr_copy` on `node`.
pub fn node_command(opts: &Options, node: &str, prefix: &Path) -> OpResult<Command> {
    let mut copy_args: Vec<String> = vec!["--prefix".into(), prefix.display().to_string()];
    for id in &opts.ids {
        copy_args.push("--id".into());
        copy_args.push(id.to_string());
    }
    match &opts.node_cmd {
        Some(t) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(format!("{} \"$@\"", t.replace("{node}", node))).arg("scr_scavenge");
            c.arg(&opts.copy_exe).args(&copy_args);
            Ok(c)
        }
        None if node == crate::identity::host_name() => {
            let mut c = Command::new(&opts.copy_exe);
            c.args(&copy_args);
            Ok(c)
        }
        None => Err(OpError::usage(format!(
            "node {node} is not this host ({}): give --node-cmd to say how to run a command there \
             (e.g. 'ssh {{node}}' or 'srun -N1 -n1 -w {{node}}')",
            crate::identity::host_name()
        ))),
    }
}

/// Copy every node's owed datasets (all nodes at once), then build each dataset that arrived.
pub fn scavenge(layout: &Layout, opts: &Options) -> OpResult<Outcome> {
    let mut cmds = Vec::new();
    for node in &opts.nodes {
        cmds.push((node.clone(), node_command(opts, node, &layout.prefix.path)?));
    }
    let children: Vec<(String, std::io::Result<std::process::Child>)> = cmds
        .into_iter()
        .map(|(node, mut c)| {
            let child = c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn();
            (node, child)
        })
        .collect();
    let mut out = Outcome::default();
    let mut ids: BTreeSet<u64> = opts.ids.iter().copied().collect();
    for (node, child) in children {
        let mut r = NodeResult { node: node.clone(), ..Default::default() };
        match child.and_then(|c| c.wait_with_output()) {
            Err(e) => r.error = Some(format!("cannot run scr_copy on {node}: {e}")),
            Ok(o) => {
                r.status = o.status.code();
                for line in String::from_utf8_lossy(&o.stdout).lines() {
                    match parse_protocol(line) {
                        Some(Ok((id, rank))) => {
                            ids.insert(id);
                            r.copied.push((id, rank));
                        }
                        Some(Err((id, rank, why))) => {
                            ids.insert(id);
                            r.failed.push((id, rank, why));
                        }
                        None => println!("{node}: {line}"),
                    }
                }
                if r.status != Some(0) && r.copied.is_empty() && r.failed.is_empty() {
                    r.error = Some(format!("scr_copy on {node} exited with status {:?}", r.status));
                }
            }
        }
        out.nodes.push(r);
    }
    for id in ids {
        match build::build(layout, id, opts.piece) {
            Ok(rep) => out.builds.push(rep),
            Err(e) => out.build_errors.push((id, e.to_string())),
        }
    }
    Ok(out)
}

/// A protocol line: a rank part that arrived (dataset, rank), or one that did not (and why).
type CopyLine = Result<(u64, u32), (u64, u32, String)>;

/// `SCR_COPY copied id=.. rank=..` → `Ok((id, rank))`; `... failed id=.. rank=.. why=..` →
/// `Err((id, rank, why))`; other lines → `None`.
fn parse_protocol(line: &str) -> Option<CopyLine> {
    let rest = line.strip_prefix(PROTOCOL)?.trim_start();
    let (kind, rest) = rest.split_once(' ')?;
    let field = |k: &str| rest.split_whitespace().find_map(|w| w.strip_prefix(k)?.strip_prefix('='));
    let id: u64 = field("id")?.parse().ok()?;
    let rank: u32 = field("rank")?.parse().ok()?;
    match kind {
        "copied" => Some(Ok((id, rank))),
        "failed" => Some(Err((id, rank, rest.split_once("why=").map(|(_, w)| w.to_string()).unwrap_or_default()))),
        _ => None,
    }
}

/// A readable account of a scavenge.
pub fn describe(o: &Outcome) -> String {
    let mut s = String::new();
    for n in &o.nodes {
        let copied: BTreeSet<u64> = n.copied.iter().map(|c| c.0).collect();
        s += &format!("node {}: copied {} rank part(s)", n.node, n.copied.len());
        if !copied.is_empty() {
            s += &format!(" of dataset(s) {copied:?}");
        }
        for (id, r, why) in &n.failed {
            s += &format!("; dataset {id} rank {r} failed: {why}");
        }
        if let Some(e) = &n.error {
            s += &format!("; {e}");
        }
        s += "\n";
    }
    for b in &o.builds {
        s += &b.describe();
        s += "\n";
    }
    for (id, e) in &o.build_errors {
        s += &format!("dataset {id}: cannot build: {e}\n");
    }
    if o.nodes.iter().all(|n| n.copied.is_empty() && n.failed.is_empty()) && o.builds.is_empty() {
        s += "nothing to scavenge: every node's cache is empty or already in the prefix\n";
    }
    s
}

/// The command line of `scr_scavenge` and `scr_postrun`.
pub fn cli(argv: &[String]) -> OpResult<i32> {
    use super::args::{flag, parse, parse_count, valued};
    let p = parse(
        &[
            valued("prefix", Some('p'), "DIR"),
            valued("nodes", Some('n'), "LIST"),
            valued("node-cmd", None, "CMD"),
            valued("id", None, "ID"),
            flag("no-build", None),
        ],
        argv,
        false,
    )?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let ids = p.values("id").into_iter().map(|v| parse_count("id", v)).collect::<OpResult<Vec<u64>>>()?;
    let (layout, settings) = job_context(p.value("prefix"))?;
    if let Some(rec) = super::run::active_run(&layout)? {
        return Err(OpError::failed(format!(
            "the job is still running (scr_run's launcher, process {}): scavenge after its last run ends",
            rec.launcher_pid
        )));
    }
    let resolved = crate::config::resolve()?;
    let nodes = match p.value("nodes") {
        Some(list) => super::nodes::expand(list).map_err(|e| OpError::usage(format!("--nodes: {e}")))?,
        None => {
            // Nodes excluded or down have nothing to give and may not answer.
            let alloc = super::nodes::allocation().map_err(OpError::failed)?;
            let mut warnings = Vec::new();
            let left_out = super::nodes::left_out(&alloc, resolved.get("SCR_EXCLUDE_NODES"), &mut warnings)
                .map_err(OpError::failed)?;
            for w in warnings {
                eprintln!("scr_scavenge: warning: {w}");
            }
            if !left_out.is_empty() {
                eprintln!("scr_scavenge: leaving out nodes {}", super::nodes::describe(&left_out));
            }
            alloc.nodes.into_iter().filter(|n| !left_out.iter().any(|(o, _)| o == n)).collect()
        }
    };
    let node_cmd = p
        .value("node-cmd")
        .map(str::to_string)
        .or_else(|| std::env::var_os("SLURM_JOB_ID").map(|_| "srun -N1 -n1 -w {node}".to_string()));
    let opts = Options {
        nodes,
        node_cmd,
        copy_exe: super::launch::sibling("scr_copy"),
        ids,
        piece: settings.mpi_buf_size.max(4096),
    };
    if p.has("no-build") {
        // Copy only; the datasets are built later with scr_index --build.
        let mut code = 0;
        for node in &opts.nodes {
            let st = node_command(&opts, node, &layout.prefix.path)?
                .status()
                .map_err(|e| OpError::failed(format!("cannot run scr_copy on {node}: {e}")))?;
            if !st.success() {
                eprintln!("scr_scavenge: scr_copy on {node} failed ({st})");
                code = 1;
            }
        }
        return Ok(code);
    }
    let out = scavenge(&layout, &opts)?;
    print!("{}", describe(&out));
    Ok(if out.ok() { 0 } else { 1 })
}

/// The command line of `scr_copy` (one node).
pub fn copy_cli(argv: &[String]) -> OpResult<i32> {
    use super::args::{parse, parse_count, valued};
    let p = parse(&[valued("prefix", Some('p'), "DIR"), valued("id", None, "ID")], argv, false)?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let ids = p.values("id").into_iter().map(|v| parse_count("id", v)).collect::<OpResult<Vec<u64>>>()?;
    let (layout, settings) = job_context(p.value("prefix"))?;
    let out = copy_node(&layout, settings.file_buf_size.max(4096), (!ids.is_empty()).then_some(ids.as_slice()))?;
    let host = crate::identity::host_name();
    for n in &out.notes {
        eprintln!("scr_copy on {host}: {n}");
    }
    for (id, rank, why) in &out.failed {
        eprintln!("scr_copy on {host}: dataset {id} rank {rank}: {why}");
    }
    for line in out.protocol_lines() {
        println!("{line}");
    }
    Ok(if out.failed.is_empty() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_round_trip() {
        let c = NodeCopy { copied: vec![(5, 2, 1, 100)], failed: vec![(5, 3, "gone\nreally".into())], notes: vec![] };
        let lines = c.protocol_lines();
        assert_eq!(parse_protocol(&lines[0]), Some(Ok((5, 2))));
        assert_eq!(parse_protocol(&lines[1]), Some(Err((5, 3, "gone really".into()))));
        assert_eq!(parse_protocol("hello"), None);
    }

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
