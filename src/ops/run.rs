//! The run wrapper (`scr_run LAUNCHER [launcher options] PROG [args]`, user guide 2.8.4-2.8.5):
//! check the job before its first run, launch it, and after each run decide whether to launch
//! it again within the allocation, then scavenge what is left in cache.
//!
//! After a run the job stops when: the run exited 0; the halt file holds a satisfied condition
//! (an exit reason such as `SCR_Finalize`'s or `scr_halt`'s, no checkpoints left, the time
//! limits, `SCR_HALT_SECONDS` before the allocation's end); `SCR_RUNS` runs were made (`-1`:
//! no limit); or fewer healthy nodes remain than the next run needs (`SCR_MIN_NODES`, else as
//! many as the previous run used). Nodes named by `SCR_EXCLUDE_NODES` (read again before every
//! run, so a node can be added to `<prefix>/.scrconf` while the job runs) and, in a Slurm
//! allocation, nodes Slurm reports unusable ([`super::slurm`]) are left out, as
//! [`super::launch`] tells each launcher (on the simulated cluster, their ranks move to spare
//! nodes); the scavenge after the last run skips them too. With `--preload` the application
//! runs in transparent mode (`LD_PRELOAD=libscr_preload.so`).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use super::halt::active_run;
use super::launch::{default_preload, sibling, Launch, Prepared};
use super::scavenge;
use super::{nodes, OpError, OpResult};
use crate::config::Resolved;
use crate::state::halt::{Halt, FINALIZE_REASON};
use crate::state::index::Index;
use crate::state::layout::Layout;
use crate::state::run::RunRecord;

/// What `scr_run` was asked to do.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// The launcher's command line: launcher, its options, the program and its arguments.
    pub(crate) launch: Vec<String>,
    /// The prefix directory (default: `SCR_PREFIX`, else the current directory).
    pub(crate) prefix: Option<String>,
    /// Overrides `SCR_RUNS`.
    pub(crate) runs: Option<i64>,
    /// Overrides `SCR_MIN_NODES`.
    pub(crate) min_nodes: Option<usize>,
    /// Seconds to wait between a failed run and the next.
    pub(crate) delay: u64,
    /// Run the application under this preload library.
    pub(crate) preload: Option<PathBuf>,
    /// Scavenge after the last run.
    pub(crate) scavenge: bool,
    /// How to run `scr_copy` on a node (see [`scavenge::Options::node_cmd`]).
    pub(crate) node_cmd: Option<String>,
}

fn say(msg: impl AsRef<str>) {
    eprintln!("scr_run: {}", msg.as_ref());
}

/// `scr_prerun`: the checks before a first run. Returns the layout and a note for each thing
/// worth knowing. Fails (changing nothing but creating `.scr`) on a damaged halt file or
/// index, a bad configuration, or another `scr_run` active in this prefix.
pub(crate) fn prerun(prefix: Option<&str>) -> OpResult<(Layout, crate::config::Settings, Vec<String>)> {
    let dir = super::prefix::choose(Some(
        &prefix
            .map(str::to_string)
            .or_else(|| std::env::var("SCR_PREFIX").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| crate::paths::cwd().display().to_string()),
    ));
    super::prefix::open(&dir, true)?;
    let (layout, settings) = scavenge::job_context(Some(&dir.display().to_string()))?;
    let mut notes = vec![format!("prefix {}, job id {}", layout.prefix.path.display(), layout.jobid)];
    let halt = Halt::load(&layout.halt())?;
    Index::load(&layout.index())?;
    if let Some(rec) = active_run(&layout)? {
        return Err(OpError::failed(format!(
            "another scr_run (process {}) is running this job in {} (launcher process {}); wait for it or \
             stop it with scr_halt --immediate",
            rec.wrapper_pid,
            layout.prefix.path.display(),
            rec.launcher_pid
        )));
    }
    for w in &settings.warnings {
        notes.push(format!("configuration: {w}"));
    }
    if let Some(why) = halt_reason(&halt, &settings, true) {
        notes.push(format!("halt condition already satisfied: {why}"));
    }
    Ok((layout, settings, notes))
}

/// Why the job must not run (again) now, if it must not. `skip_finalize`: `SCR_Finalize`'s
/// reason does not count (before a first run it is left from an earlier job and the next
/// `SCR_Init` clears it, see README; after a run it only says the application finished).
pub(super) fn halt_reason(h: &Halt, settings: &crate::config::Settings, skip_finalize: bool) -> Option<String> {
    let mut h = h.clone();
    if skip_finalize && h.exit_reason.as_deref() == Some(FINALIZE_REASON) {
        h.exit_reason = None;
    }
    if h.halt_seconds.is_none() && settings.halt_seconds > 0 {
        h.halt_seconds = Some(settings.halt_seconds);
    }
    let now = crate::identity::now_secs();
    let end = crate::identity::end_time();
    if let Some(why) = h.check(now, end) {
        return Some(why);
    }
    end.filter(|e| now >= *e).map(|_| "the allocation's time is up".to_string())
}

/// The nodes to leave out of the next run ([`nodes::left_out`]); `cmd` prints the warnings.
fn left_out(alloc: &nodes::Allocation, r: &Resolved, cmd: &str) -> OpResult<Vec<(String, String)>> {
    let mut warnings = Vec::new();
    let out = nodes::left_out(alloc, r.get("SCR_EXCLUDE_NODES"), &mut warnings)?;
    for w in warnings {
        eprintln!("{cmd}: warning: {w}");
    }
    Ok(out)
}

fn runs_limit(r: &Resolved, over: Option<i64>) -> OpResult<i64> {
    if let Some(n) = over {
        return Ok(n);
    }
    let raw = r.get("SCR_RUNS").unwrap_or("1");
    let at = r.simple.get("SCR_RUNS").map(|v| v.origin.to_string()).unwrap_or_default();
    match raw.trim().parse::<i64>() {
        Ok(n) if n > 0 || n == -1 => Ok(n),
        _ => Err(OpError::failed(format!(
            "SCR_RUNS={raw} ({at}): expected a positive number of runs, or -1 for no limit"
        ))),
    }
}

pub(super) fn min_nodes(r: &Resolved, over: Option<usize>) -> OpResult<Option<usize>> {
    if over.is_some() {
        return Ok(over);
    }
    match r.get("SCR_MIN_NODES") {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|_| OpError::failed(format!("SCR_MIN_NODES={v}: expected a number of nodes"))),
    }
}

/// Why the job stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    /// The last run exited 0.
    Completed,
    /// A halt condition holds (the reason).
    Halted(String),
    /// `SCR_RUNS` runs were made and the last one failed.
    RunsDone(i64),
    /// Not enough healthy nodes for another run (the explanation).
    Nodes(String),
}

/// The outcome of `scr_run`.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Why no further run was launched.
    pub(crate) stop: Stop,
    /// The scavenge after the last run, if one was needed.
    pub(crate) scavenge: Option<scavenge::Outcome>,
}

impl Outcome {
    /// The exit status of `scr_run`: 0 when the job stopped cleanly (completed or halted) and
    /// whatever was scavenged is complete in the prefix; 1 otherwise.
    pub(crate) fn code(&self) -> i32 {
        let clean = matches!(self.stop, Stop::Completed | Stop::Halted(_));
        let scavenged = self.scavenge.as_ref().is_none_or(|s| s.ok());
        if clean && scavenged {
            0
        } else {
            1
        }
    }
}

/// Run the job: pre-run checks, runs, relaunches, scavenge.
pub(crate) fn run(opts: &Options) -> OpResult<Outcome> {
    let mut launch = Launch::new(&opts.launch, opts.preload.clone())?;
    let (layout, settings, notes) = prerun(opts.prefix.as_deref())?;
    for n in &notes {
        say(n);
    }
    let alloc = nodes::allocation()?;
    say(format!("allocation: {} node(s) from {}: {}", alloc.nodes.len(), alloc.source, alloc.nodes.join(",")));
    let previous = RunRecord::load(&layout.run_file()).ok().flatten().map(|r| r.nodes.len());
    let mut needed_default = launch.nodes_needed(previous, alloc.nodes.len());

    let mut attempt: u32 = 0;
    let mut last_nodes: Vec<String> = Vec::new();
    let stop = loop {
        let resolved = crate::config::resolve()?;
        let settings = crate::config::Settings::from_resolved(&resolved, crate::paths::cwd())?;
        let runs = runs_limit(&resolved, opts.runs)?;
        if runs > 0 && attempt as i64 >= runs {
            break Stop::RunsDone(runs);
        }
        let halt = Halt::load(&layout.halt())?;
        if let Some(why) = halt_reason(&halt, &settings, true) {
            break Stop::Halted(why);
        }
        let left_out = left_out(&alloc, &resolved, "scr_run")?;
        let excluded: Vec<String> = left_out.iter().map(|(n, _)| n.clone()).collect();
        let usable: Vec<String> = alloc.nodes.iter().filter(|n| !excluded.contains(n)).cloned().collect();
        let needed = min_nodes(&resolved, opts.min_nodes)?.unwrap_or(needed_default);
        if usable.len() < needed {
            break Stop::Nodes(format!(
                "{} usable node(s) ({}; excluded: {}), the run needs {needed} ({})",
                usable.len(),
                usable.join(","),
                nodes::describe(&left_out),
                if resolved.get("SCR_MIN_NODES").is_some() || opts.min_nodes.is_some() {
                    "SCR_MIN_NODES"
                } else {
                    "as many as the previous run"
                }
            ));
        }
        let prepared = match launch.prepare(&usable, &excluded) {
            Ok(p) => p,
            Err(why) => break Stop::Nodes(why.to_string()),
        };
        let Prepared { command: mut cmd, shown: argv, nodes: run_nodes, map, slurm_job } = prepared;
        attempt += 1;
        say(format!(
            "run {attempt}{} on nodes {}{}: {}",
            if runs > 0 { format!(" of {runs}") } else { String::new() },
            run_nodes.join(","),
            map.map(|m| format!(" (rank to node: {})", m.join(","))).unwrap_or_default(),
            argv.join(" ")
        ));
        if !excluded.is_empty() {
            say(format!("excluded nodes: {}", nodes::describe(&left_out)));
        }
        let mut child = cmd.spawn().map_err(|e| OpError::failed(format!("cannot start {}: {e}", opts.launch[0])))?;
        let pid = child.id();
        let mut rec = RunRecord {
            host: crate::identity::host_name(),
            wrapper_pid: std::process::id(),
            launcher_pid: pid,
            launcher_start: super::halt::process_start(pid).unwrap_or(0),
            attempt,
            started: crate::identity::iso_time(crate::identity::now_secs()),
            nodes: run_nodes.clone(),
            command: argv.clone(),
            ended: None,
            status: None,
            slurm_job,
            launcher_cmdline: exec_cmdline(pid),
        };
        if let Err(e) = rec.save(&layout.run_file()) {
            say(format!("warning: {e} (scr_halt --immediate cannot find this run)"));
        }
        let status = child.wait().map_err(|e| OpError::failed(format!("waiting for {}: {e}", opts.launch[0])))?;
        rec.ended = Some(crate::identity::iso_time(crate::identity::now_secs()));
        rec.status = status.code();
        if let Err(e) = rec.save(&layout.run_file()) {
            say(format!("warning: {e}"));
        }
        last_nodes = run_nodes.clone();
        // What the run asked for (srun -N, the simulated map), else the nodes it was given.
        needed_default = launch.nodes_needed(Some(run_nodes.len()), alloc.nodes.len());
        match (status.code(), status.signal()) {
            (Some(c), _) => say(format!("run {attempt} exited with status {c}")),
            (None, Some(s)) => say(format!("run {attempt} was killed by signal {s}")),
            _ => say(format!("run {attempt} ended")),
        }
        // A condition set by scr_halt or the time limits says why the job stops; SCR_Finalize's
        // own reason only says the application finished.
        let halt = Halt::load(&layout.halt())?;
        if let Some(why) = halt_reason(&halt, &settings, true) {
            break Stop::Halted(why);
        }
        if status.success() {
            break Stop::Completed;
        }
        if halt.exit_reason.as_deref() == Some(FINALIZE_REASON) {
            break Stop::Halted("the application called SCR_Finalize".into());
        }
        if runs > 0 && attempt as i64 >= runs {
            break Stop::RunsDone(runs);
        }
        if opts.delay > 0 {
            say(format!("waiting {} s before the next run", opts.delay));
            std::thread::sleep(std::time::Duration::from_secs(opts.delay));
        }
    };
    say(match &stop {
        Stop::Completed => format!("the job completed after {attempt} run(s)"),
        Stop::Halted(why) if attempt == 0 => format!("not starting the job: halt condition: {why}"),
        Stop::Halted(why) => format!("not relaunching: halt condition: {why}"),
        Stop::RunsDone(n) => format!("not relaunching: SCR_RUNS={n} run(s) made"),
        Stop::Nodes(why) if attempt == 0 => format!("not starting the job: {why}"),
        Stop::Nodes(why) => format!("not relaunching: {why}"),
    });

    let scavenged = if opts.scavenge && attempt > 0 {
        // A node that failed during the last run has nothing to copy and cannot be reached.
        let left_out = left_out(&alloc, &crate::config::resolve()?, "scr_run")?;
        let nodes: Vec<String> = last_nodes.into_iter().filter(|n| !left_out.iter().any(|(o, _)| o == n)).collect();
        let node_cmd = opts.node_cmd.clone().or_else(|| launch.node_cmd());
        let so = scavenge::Options {
            nodes,
            node_cmd,
            copy_exe: sibling("scr_copy"),
            ids: Vec::new(),
            piece: settings.mpi_buf_size.max(4096),
        };
        say(format!("scavenging the cache of node(s) {}", so.nodes.join(",")));
        match scavenge::scavenge(&layout, &so) {
            Ok(o) => {
                for line in scavenge::describe(&o).lines() {
                    say(line);
                }
                Some(o)
            }
            Err(e) => {
                say(format!("scavenge failed: {e}"));
                Some(scavenge::Outcome { build_errors: vec![(0, e.to_string())], ..Default::default() })
            }
        }
    } else {
        None
    };
    Ok(Outcome { stop, scavenge: scavenged })
}

/// The command line of `scr_run [OPTIONS] LAUNCHER ...`; `launcher` is given by the aliases
/// (`scr_srun ARGS` is `scr_run srun ARGS`, with no `scr_run` options).
pub fn cli(argv: &[String], launcher: Option<&str>) -> OpResult<i32> {
    use super::args::{flag, parse, valued};
    let opts_spec = [
        valued("prefix", Some('p'), "DIR"),
        valued("runs", Some('r'), "N"),
        valued("min-nodes", None, "N"),
        valued("delay", None, "SECONDS"),
        flag("preload", None),
        valued("preload-lib", None, "PATH"),
        flag("no-scavenge", None),
        valued("node-cmd", None, "CMD"),
    ];
    let (p, launch) = match launcher {
        Some(l) => {
            let mut launch = vec![l.to_string()];
            launch.extend(argv.iter().cloned());
            (super::args::Parsed::default(), launch)
        }
        None => {
            let p = parse(&opts_spec, argv, true)?;
            let launch = p.positional.clone();
            (p, launch)
        }
    };
    if launch.len() < 2 {
        if !launch.is_empty() {
            // A launcher that does not exist is the mistake to report, not the short line.
            Launch::new(&launch, None)?;
        }
        return Err(OpError::usage("usage: scr_run [OPTIONS] LAUNCHER [launcher options] PROG [args]"));
    }
    let runs = match p.value("runs") {
        None => None,
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if n > 0 || n == -1 => Some(n),
            _ => return Err(OpError::usage(format!("--runs {v:?}: expected a positive number, or -1 for no limit"))),
        },
    };
    let preload = match (p.value("preload-lib"), p.has("preload")) {
        (Some(path), _) => Some(crate::paths::normalize(Path::new(path), &crate::paths::cwd())),
        (None, true) => Some(default_preload()),
        (None, false) => None,
    };
    let opts = Options {
        launch,
        prefix: p.value("prefix").map(str::to_string),
        runs,
        min_nodes: p.count("min-nodes")?.map(|n| n as usize),
        delay: p.count("delay")?.unwrap_or(10),
        preload,
        scavenge: !p.has("no-scavenge"),
        node_cmd: p.value("node-cmd").map(str::to_string),
    };
    let out = run(&opts)?;
    Ok(out.code())
}

/// The command line of `scr_prerun [--prefix DIR]`.
pub fn prerun_cli(argv: &[String]) -> OpResult<i32> {
    let p = super::args::parse(&[super::args::valued("prefix", Some('p'), "DIR")], argv, false)?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let (_, settings, notes) = prerun(p.value("prefix"))?;
    for n in &notes {
        println!("scr_prerun: {n}");
    }
    let resolved = crate::config::resolve()?;
    runs_limit(&resolved, None)?;
    min_nodes(&resolved, None)?;
    let alloc = nodes::allocation()?;
    let left_out = left_out(&alloc, &resolved, "scr_prerun")?;
    println!(
        "scr_prerun: allocation: {} ({}); excluded: {}; SCR_HALT_SECONDS={}",
        alloc.nodes.join(","),
        alloc.source,
        nodes::describe(&left_out),
        settings.halt_seconds
    );
    println!("scr_prerun: ready");
    Ok(0)
}

/// The command line of the launcher `spawn` just started. `spawn` returns once the child is
/// inside `execve`, but the kernel installs the new address space before it sets the argument
/// area, so `/proc/<pid>/cmdline` can read empty for a moment (long enough to be seen on a
/// loaded machine); it is read again until it is there. `None` only if the launcher exited or
/// its command line never appeared within 10 s.
fn exec_cmdline(pid: u32) -> Option<Vec<String>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut pause = std::time::Duration::from_micros(200);
    loop {
        if let Some(c) = super::halt::process_cmdline(pid) {
            return Some(c);
        }
        if std::time::Instant::now() >= deadline || super::halt::process_start(pid).is_none() {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_command_line_is_read_after_exec() {
        // Right after spawn, /proc/<pid>/cmdline most often still reads empty (see
        // exec_cmdline); what scr_run records must be the command line itself, every time.
        for _ in 0..50 {
            let mut c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
            let seen = exec_cmdline(c.id());
            let _ = c.kill();
            let _ = c.wait();
            assert_eq!(seen, Some(vec!["sleep".to_string(), "30".to_string()]));
        }
    }

    #[test]
    fn runs_limit_accepts_minus_one_and_names_bad_values() {
        let mut r = Resolved::default();
        assert_eq!(runs_limit(&r, None).unwrap(), 1);
        r.simple
            .insert("SCR_RUNS".into(), crate::config::Value { value: "-1".into(), origin: crate::config::Origin::Env });
        assert_eq!(runs_limit(&r, None).unwrap(), -1);
        r.simple.get_mut("SCR_RUNS").unwrap().value = "0".into();
        let e = runs_limit(&r, None).unwrap_err().to_string();
        assert!(e.contains("SCR_RUNS=0") && e.contains("environment"), "{e}");
        assert_eq!(runs_limit(&r, Some(3)).unwrap(), 3);
    }
}
