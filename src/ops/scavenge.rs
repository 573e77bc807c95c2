//! Scavenge (user guide 2.3.8, SCR internals "Scavenge"): after the last run of an allocation
//! ended (finished, killed or failed) and before the allocation does, copy the datasets that
//! are still only in node-local caches to the prefix, then build them there.
//!
//! * `scr_copy` runs on one node: [`copy_node`] (in the transfer layer, which `SCR_Init` uses
//!   too) copies that node's cached parts of the datasets still owed to the prefix, and
//!   `scr_copy` prints one protocol line per rank part ([`protocol_lines`]).
//! * [`scavenge`] (`scr_scavenge`, `scr_postrun`) runs `scr_copy` on every node at once through
//!   a per-node command (`srun -w {node}`, `ssh {node}`, or `scripts/sim-node.sh` on the
//!   simulated cluster), reads back which datasets arrived, and builds each
//!   ([`crate::transfer::build`]): what a lost node held is rebuilt from the redundancy data of the others.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{OpError, OpResult};
use crate::config::Settings;
use crate::paths::Prefix;
use crate::state::layout::Layout;
use crate::transfer::build::{self, Report};
use crate::transfer::scavenge::{copy_node, NodeCopy};

/// The prefix of the lines `scr_copy` prints for `scr_scavenge` to read.
pub(crate) const PROTOCOL: &str = "SCR_COPY";

/// The job's layout (with this node's control directory) and settings, as the library
/// derives them: configuration from the environment and files, job id and user name from the
/// environment. `prefix` overrides `SCR_PREFIX`.
pub(crate) fn job_context(prefix: Option<&str>) -> OpResult<(Layout, Settings)> {
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

/// The lines `scr_copy` prints on stdout for the driver: one per rank part copied or not.
pub(crate) fn protocol_lines(c: &NodeCopy) -> Vec<String> {
    let mut out: Vec<String> = c
        .copied
        .iter()
        .map(|(id, r, n, b)| format!("{PROTOCOL} copied id={id} rank={r} files={n} bytes={b}"))
        .collect();
    out.extend(
        c.failed
            .iter()
            .map(|(id, r, why)| format!("{PROTOCOL} failed id={id} rank={r} why={}", why.replace('\n', " "))),
    );
    out
}

/// How to scavenge.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The nodes whose caches to copy.
    pub(crate) nodes: Vec<String>,
    /// How to run a command on a node: a shell prefix with `{node}` (e.g. `ssh {node}`), or
    /// `None` to run it here (only for this host).
    pub(crate) node_cmd: Option<String>,
    /// The `scr_copy` program.
    pub(crate) copy_exe: PathBuf,
    /// Datasets to copy (empty: the ones owed).
    pub(crate) ids: Vec<u64>,
    /// Rebuild buffer size.
    pub(crate) piece: usize,
}

/// What `scr_copy` did on one node.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeResult {
    /// The node.
    pub(crate) node: String,
    /// Exit status of the node's command (`None`: killed, or it could not start).
    pub(crate) status: Option<i32>,
    /// (dataset id, rank) of each rank part copied to the prefix.
    pub(crate) copied: Vec<(u64, u32)>,
    /// (dataset id, rank, why) of each rank part that could not be copied.
    pub(crate) failed: Vec<(u64, u32, String)>,
    /// Why the command could not run, if it could not.
    pub(crate) error: Option<String>,
}

/// The outcome of a scavenge.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// What `scr_copy` did on each node.
    pub(crate) nodes: Vec<NodeResult>,
    /// The build of each dataset scavenged (its index entry from the copied files).
    pub(crate) builds: Vec<Report>,
    /// (dataset, why) builds that could not run at all.
    pub(crate) build_errors: Vec<(u64, String)>,
}

impl Outcome {
    /// Every dataset that arrived was built complete, and every node answered.
    pub(crate) fn ok(&self) -> bool {
        self.build_errors.is_empty()
            && self.builds.iter().all(|b| b.complete)
            && self.nodes.iter().all(|n| n.error.is_none() && n.status == Some(0))
    }
}

/// The command that runs `scr_copy` on `node`.
pub(crate) fn node_command(opts: &Options, node: &str, prefix: &Path) -> OpResult<Command> {
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
pub(crate) fn scavenge(layout: &Layout, opts: &Options) -> OpResult<Outcome> {
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
        match build::build(layout, id, opts.piece, build::Current::Promote) {
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
pub(crate) fn describe(o: &Outcome) -> String {
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
            valued("joblauncher", Some('j'), "LAUNCHER"),
            valued("id", None, "ID"),
            flag("no-build", None),
            flag("verbose", Some('v')),
        ],
        argv,
        false,
    )?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let ids = p.values("id").into_iter().map(|v| parse_count("id", v)).collect::<OpResult<Vec<u64>>>()?;
    // --node-cmd, else the launcher's way to reach a node (-j, as SCR's scr_postrun takes it),
    // else the resource manager's.
    let by_launcher = super::launch::node_cmd_for(p.value("joblauncher"))
        .map_err(|e| OpError::usage(format!("--joblauncher: {e}")))?;
    let (layout, settings) = job_context(p.value("prefix"))?;
    if let Some(rec) = super::halt::active_run(&layout)? {
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
            let alloc = super::nodes::allocation()?;
            let mut warnings = Vec::new();
            let left_out = super::nodes::left_out(&alloc, resolved.get("SCR_EXCLUDE_NODES"), &mut warnings)?;
            for w in warnings {
                eprintln!("scr_scavenge: warning: {w}");
            }
            if !left_out.is_empty() {
                eprintln!("scr_scavenge: leaving out nodes {}", super::nodes::describe(&left_out));
            }
            alloc.nodes.into_iter().filter(|n| !left_out.iter().any(|(o, _)| o == n)).collect()
        }
    };
    let node_cmd = p.value("node-cmd").map(str::to_string).or(by_launcher);
    if p.has("verbose") {
        eprintln!(
            "scr_scavenge: nodes {}; reached with {}",
            opts_nodes_text(&nodes),
            node_cmd.as_deref().unwrap_or("(this host only)")
        );
    }
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

/// `n1,n2,n3` or `none`.
fn opts_nodes_text(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "none".to_string()
    } else {
        nodes.join(",")
    }
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
    let out = copy_node(&layout, settings.file_buf_size.max(4096), (!ids.is_empty()).then_some(ids.as_slice()));
    let host = crate::identity::host_name();
    for n in &out.notes {
        eprintln!("scr_copy on {host}: {n}");
    }
    for (id, rank, why) in &out.failed {
        eprintln!("scr_copy on {host}: dataset {id} rank {rank}: {why}");
    }
    for line in protocol_lines(&out) {
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
        let lines = protocol_lines(&c);
        assert_eq!(parse_protocol(&lines[0]), Some(Ok((5, 2))));
        assert_eq!(parse_protocol(&lines[1]), Some(Err((5, 3, "gone really".into()))));
        assert_eq!(parse_protocol("hello"), None);
    }
}
