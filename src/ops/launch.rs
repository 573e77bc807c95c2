//! How `scr_run` launches one run: the launcher's command line with the nodes to leave out and
//! the preload library added, for the launchers it knows (`srun`: `--exclude` and `--export`;
//! Open MPI's `mpirun`/`mpiexec`: `--host` with the healthy nodes and `-x`; LSF's `jsrun`:
//! `--exclude_hosts`, as SCR's scripts do; `flux run`/`flux submit`: `--requires=-host:NODES`;
//! any other launcher gets a warning that it cannot leave nodes out; `jsrun`, `flux` and the
//! others get `LD_PRELOAD` in their environment, which they pass on), and on
//! the simulated cluster (`scripts/sim-node.sh` in the command line) the rank-to-node map in
//! `SIM_NODE_MAP`, whose excluded nodes' ranks move to spare nodes.
//!
//! `srun` also gets `--kill-on-bad-exit=1` unless the command line or `SLURM_KILL_BAD_EXIT`
//! says otherwise: Slurm's default lets the other tasks of a step run on when one dies, and the
//! ranks of an MPI application then wait for the dead one until the allocation ends, leaving no
//! time for the relaunch.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{OpError, OpResult};

/// Which launcher, and how to tell it about nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Srun,
    OpenMpi,
    Jsrun,
    Flux,
    Other,
}

fn kind_of(argv: &[String]) -> Kind {
    let name = |a: Option<&String>| {
        a.and_then(|a| Path::new(a).file_name().and_then(|n| n.to_str()).map(str::to_string)).unwrap_or_default()
    };
    match name(argv.first()).as_str() {
        "srun" => Kind::Srun,
        "mpirun" | "mpiexec" | "orterun" | "prterun" => Kind::OpenMpi,
        "jsrun" => Kind::Jsrun,
        "flux" if matches!(argv.get(1).map(String::as_str), Some("run" | "submit")) => Kind::Flux,
        _ => Kind::Other,
    }
}

/// How to run a command on one node (`{node}` stands for its name) for the launcher `launcher`
/// (`scr_postrun -j`, SCR's names: `srun`, `flux`, `jsrun`, `lrun`, `mpirun`, `aprun`), else for
/// the resource manager this runs under: `srun -N1 -n1 -w` (Slurm), `flux run -N1 -n1
/// --requires=host:` (Flux), `blaunch` (LSF's way to start a task on a host of the job),
/// `pbsdsh -h` (PBS). `None`: only this host can be reached.
pub(crate) fn node_cmd_for(launcher: Option<&str>) -> Result<Option<String>, LaunchError> {
    use crate::identity::Rm;
    let by_rm = || match Rm::detect() {
        Some(Rm::Slurm(_)) => Some("srun"),
        Some(Rm::Flux(_)) => Some("flux"),
        Some(Rm::Lsf(_)) => Some("blaunch"),
        Some(Rm::Pbs(_)) => Some("pbsdsh"),
        None => None,
    };
    let Some(l) = launcher.or_else(by_rm) else { return Ok(None) };
    let name = Path::new(l).file_name().and_then(|n| n.to_str()).unwrap_or(l);
    Ok(Some(
        match name {
            "srun" => "srun -N1 -n1 -w {node}",
            "flux" => "flux run -N1 -n1 --requires=host:{node}",
            "jsrun" | "lrun" | "blaunch" => "blaunch {node}",
            "pbsdsh" => "pbsdsh -h {node}",
            "mpirun" | "mpiexec" => "mpirun -np 1 --host {node}",
            "aprun" => "aprun -n 1 -L {node}",
            other => return Err(LaunchError::UnknownLauncher { launcher: other.to_string() }),
        }
        .to_string(),
    ))
}

/// The simulated cluster: the path of `sim-node.sh` in the command line and the current
/// rank-to-node map.
#[derive(Debug, Clone)]
struct Sim {
    script: PathBuf,
    map: Vec<String>,
}

impl Sim {
    /// The nodes of the map, in order of first use.
    fn distinct(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in &self.map {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
        out
    }

    /// Move the ranks of excluded nodes to spare nodes (usable nodes the map does not use).
    fn remap(&mut self, usable: &[String]) -> Result<(), LaunchError> {
        let spares: Vec<String> = usable.iter().filter(|n| !self.map.contains(n)).cloned().collect();
        let mut spares = spares.into_iter();
        for old in self.distinct() {
            if usable.contains(&old) {
                continue;
            }
            let Some(new) = spares.next() else {
                return Err(LaunchError::NoSpare { node: old });
            };
            for n in self.map.iter_mut().filter(|n| **n == old) {
                *n = new.clone();
            }
        }
        Ok(())
    }
}

/// Why a run cannot be launched as asked: the launcher is not one this knows how to reach a
/// node with, or an excluded node has no spare to replace it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error(
        "unknown launcher {launcher:?} (known: srun, flux, jsrun, lrun, mpirun, mpiexec, aprun; or give \
         --node-cmd)"
    )]
    UnknownLauncher { launcher: String },
    #[error("node {node} is excluded and no spare node is left to replace it")]
    NoSpare { node: String },
}

/// A job's launch line and what `scr_run` adds to it.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    argv: Vec<String>,
    kind: Kind,
    sim: Option<Sim>,
    preload: Option<PathBuf>,
}

/// One run, ready to start.
pub(crate) struct Prepared {
    pub command: Command,
    /// The command line as shown to the user (environment settings first).
    pub shown: Vec<String>,
    /// The nodes the run is given.
    pub nodes: Vec<String>,
    /// On the simulated cluster, the node of each rank.
    pub map: Option<Vec<String>>,
    /// The Slurm job the run is a step of (`srun` inside an allocation).
    pub slurm_job: Option<String>,
}

impl Launch {
    /// Check the launch line: the launcher exists, the simulated cluster is set up if the line
    /// uses it, the preload library exists.
    pub fn new(argv: &[String], preload: Option<PathBuf>) -> OpResult<Launch> {
        let Some(launcher) = argv.first() else {
            return Err(OpError::usage("no launcher given: scr_run LAUNCHER [launcher options] PROG [args]"));
        };
        if find_program(launcher).is_none() {
            return Err(OpError::failed(format!("launcher {launcher} not found (is it on PATH?)")));
        }
        let sim = match argv.iter().find(|a| Path::new(a).file_name().is_some_and(|n| n == "sim-node.sh")) {
            Some(script) => {
                let map = std::env::var("SIM_NODE_MAP").unwrap_or_default();
                let map: Vec<String> = map.split([',', ' ']).filter(|s| !s.is_empty()).map(str::to_string).collect();
                if std::env::var_os("SIM_NODE_ROOT").is_none() || map.is_empty() {
                    return Err(OpError::usage(
                        "the command line runs scripts/sim-node.sh but SIM_NODE_ROOT or SIM_NODE_MAP is not set",
                    ));
                }
                Some(Sim { script: crate::paths::normalize(Path::new(script), &crate::paths::cwd()), map })
            }
            None => None,
        };
        if let Some(p) = &preload {
            if !p.is_file() {
                return Err(OpError::failed(format!(
                    "preload library {} not found (build it with cargo build -p scr-preload, or pass --preload-lib PATH)",
                    p.display()
                )));
            }
        }
        Ok(Launch { argv: argv.to_vec(), kind: kind_of(argv), sim, preload })
    }

    /// Nodes the first run needs when `SCR_MIN_NODES` does not say: the simulated map's nodes,
    /// `srun -N`, the previous run's (from the run record), else the whole allocation.
    pub(crate) fn nodes_needed(&self, previous: Option<usize>, allocation: usize) -> usize {
        match (&self.sim, self.kind) {
            (Some(s), _) => s.distinct().len(),
            (None, Kind::Srun) => srun_nodes(&self.argv).or(previous).unwrap_or(allocation),
            _ => previous.unwrap_or(allocation),
        }
    }

    /// The command for the next run on the `usable` nodes, leaving out `excluded`.
    pub(crate) fn prepare(&mut self, usable: &[String], excluded: &[String]) -> Result<Prepared, LaunchError> {
        let mut argv = self.argv.clone();
        let mut env: Vec<(String, String)> = Vec::new();
        let mut insert: Vec<String> = Vec::new();
        let mut warnings = Vec::new();
        let (nodes, map) = match self.sim.as_mut() {
            Some(s) => {
                s.remap(usable)?;
                env.push(("SIM_NODE_MAP".into(), s.map.join(",")));
                (s.distinct(), Some(s.map.clone()))
            }
            None => (usable.to_vec(), None),
        };
        let kill_option =
            |a: &String| a == "-K" || (a.starts_with("-K") && a.len() == 3) || a.starts_with("--kill-on-bad-exit");
        if self.kind == Kind::Srun && !argv.iter().any(kill_option) && std::env::var_os("SLURM_KILL_BAD_EXIT").is_none()
        {
            insert.push("--kill-on-bad-exit=1".into());
        }
        if !excluded.is_empty() && self.sim.is_none() {
            match self.kind {
                Kind::Srun => insert.push(format!("--exclude={}", excluded.join(","))),
                Kind::OpenMpi => {
                    let names_hosts = argv.iter().any(|a| {
                        ["--host", "-H", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile"]
                            .iter()
                            .any(|o| a == o || a.starts_with(&format!("{o}=")))
                    });
                    if names_hosts {
                        warnings.push("the command line names its hosts; the excluded nodes cannot be left out for it");
                    } else {
                        insert.push("--host".into());
                        insert.push(usable.join(","));
                    }
                }
                Kind::Jsrun => insert.push(format!("--exclude_hosts={}", excluded.join(","))),
                Kind::Flux => insert.push(format!("--requires=-host:{}", excluded.join(","))),
                Kind::Other => warnings.push("this launcher cannot be told to leave nodes out"),
            }
        }
        for w in warnings {
            eprintln!("scr_run: warning: {w} (excluded: {})", excluded.join(","));
        }
        if let Some(p) = &self.preload {
            let v = format!("LD_PRELOAD={}", p.display());
            match self.kind {
                Kind::OpenMpi => insert.extend(["-x".to_string(), v]),
                Kind::Srun => insert.push(format!("--export=ALL,{v}")),
                Kind::Jsrun | Kind::Flux | Kind::Other => env.push(("LD_PRELOAD".into(), p.display().to_string())),
            }
        }
        // After `flux run`'s subcommand; after the launcher for the others.
        let at = if self.kind == Kind::Flux { 2 } else { 1 };
        argv.splice(at..at, insert);
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        for (k, v) in &env {
            command.env(k, v);
        }
        let mut shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        shown.extend(argv);
        let slurm_job = if self.kind == Kind::Srun { crate::identity::slurm_job() } else { None };
        Ok(Prepared { command, shown, nodes, map, slurm_job })
    }

    /// How to reach a node for the scavenge when not told: `sim-node.sh` on the simulated
    /// cluster, else as the resource manager allows ([`node_cmd_for`]), else this host only.
    pub fn node_cmd(&self) -> Option<String> {
        if let Some(s) = &self.sim {
            return Some(format!(
                "env PMI_RANK=0 SIM_NODE_MAP={{node}} {}",
                shell_quote(&s.script.display().to_string())
            ));
        }
        node_cmd_for(None).ok().flatten()
    }
}

/// A program of this package installed beside the running one.
pub(crate) fn sibling(name: &str) -> PathBuf {
    std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(name))).unwrap_or_else(|| PathBuf::from(name))
}

/// The default preload library: beside the command (a cargo build) or in `../lib` (an install).
pub(crate) fn default_preload() -> PathBuf {
    let here = sibling("libscr_preload.so");
    if here.exists() {
        return here;
    }
    here.parent().unwrap_or(Path::new(".")).join("../lib/libscr_preload.so")
}

/// The `-N`/`--nodes` count of an `srun` command line.
fn srun_nodes(args: &[String]) -> Option<usize> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = if a == "-N" || a == "--nodes" {
            it.next().map(String::as_str)
        } else if let Some(v) = a.strip_prefix("--nodes=") {
            Some(v)
        } else {
            a.strip_prefix("-N")
        };
        if let Some(n) = v.and_then(|v| v.split('-').next()?.parse().ok()) {
            return Some(n);
        }
    }
    None
}

/// Find a program on `PATH` (or check a path).
fn find_program(p: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok =
        |p: &Path| std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if p.contains('/') {
        let p = PathBuf::from(p);
        return ok(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| std::env::split_paths(&path).map(|d| d.join(p)).find(|c| ok(c)))
}

fn shell_quote(s: &str) -> String {
    if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn launch(argv: &[&str], kind: Kind, sim: Option<Sim>) -> Launch {
        Launch { argv: s(argv), kind, sim, preload: Some(PathBuf::from("/l/libscr_preload.so")) }
    }

    #[test]
    fn excluded_nodes_move_to_spares() {
        let mut sim = Sim { script: PathBuf::from("/x/sim-node.sh"), map: s(&["n0", "n0", "n1", "n2"]) };
        sim.remap(&s(&["n1", "n2", "n3", "n4"])).unwrap();
        assert_eq!(sim.map, s(&["n3", "n3", "n1", "n2"]));
        let e = sim.remap(&s(&["n3", "n1"])).unwrap_err().to_string();
        assert!(e.contains("node n2 is excluded"), "{e}");
    }

    #[test]
    fn launcher_arguments() {
        let mut l = launch(&["srun", "-n4", "./app"], Kind::Srun, None);
        let p = l.prepare(&s(&["a", "c"]), &s(&["b"])).unwrap();
        assert_eq!(
            p.shown,
            s(&[
                "srun",
                "--kill-on-bad-exit=1",
                "--exclude=b",
                "--export=ALL,LD_PRELOAD=/l/libscr_preload.so",
                "-n4",
                "./app"
            ])
        );
        assert_eq!(p.nodes, s(&["a", "c"]));
        // The user's own choice stands.
        for own in ["-K0", "--kill-on-bad-exit=0", "-K"] {
            let mut l = launch(&["srun", own, "-n4", "./app"], Kind::Srun, None);
            let p = l.prepare(&s(&["a"]), &[]).unwrap();
            assert!(!p.shown.iter().any(|a| a == "--kill-on-bad-exit=1"), "{own}: {:?}", p.shown);
        }
        let mut l = launch(&["mpirun", "-np", "4", "./app"], Kind::OpenMpi, None);
        let p = l.prepare(&s(&["a", "c"]), &s(&["b"])).unwrap();
        assert_eq!(
            p.shown,
            s(&["mpirun", "--host", "a,c", "-x", "LD_PRELOAD=/l/libscr_preload.so", "-np", "4", "./app"])
        );
        let p = l.prepare(&s(&["a", "b", "c"]), &[]).unwrap();
        assert_eq!(p.shown[1], "-x", "nothing excluded: the hosts are left to the launcher");
        let sim = Sim { script: PathBuf::from("/x/sim-node.sh"), map: s(&["n0", "n1"]) };
        let mut l = launch(&["mpirun", "-np", "2", "/x/sim-node.sh", "./app"], Kind::OpenMpi, Some(sim));
        let p = l.prepare(&s(&["n0", "n2"]), &s(&["n1"])).unwrap();
        assert_eq!(p.shown[0], "SIM_NODE_MAP=n0,n2");
        assert_eq!(p.nodes, s(&["n0", "n2"]));
        assert_eq!(l.nodes_needed(Some(7), 9), 2);
        assert!(l.node_cmd().unwrap().contains("SIM_NODE_MAP={node} /x/sim-node.sh"));
    }

    #[test]
    fn jsrun_and_flux_leave_nodes_out() {
        let mut l = launch(&["jsrun", "-n4", "./app"], Kind::Jsrun, None);
        let p = l.prepare(&s(&["a", "d"]), &s(&["b", "c"])).unwrap();
        assert_eq!(p.shown, s(&["LD_PRELOAD=/l/libscr_preload.so", "jsrun", "--exclude_hosts=b,c", "-n4", "./app"]));
        let mut l = launch(&["flux", "run", "-N2", "./app"], Kind::Flux, None);
        let p = l.prepare(&s(&["a"]), &s(&["b"])).unwrap();
        assert_eq!(
            p.shown,
            s(&["LD_PRELOAD=/l/libscr_preload.so", "flux", "run", "--requires=-host:b", "-N2", "./app"])
        );
        assert_eq!(kind_of(&s(&["/usr/bin/flux", "submit", "x"])), Kind::Flux);
        assert_eq!(kind_of(&s(&["flux", "alloc", "x"])), Kind::Other);
        assert_eq!(kind_of(&s(&["jsrun"])), Kind::Jsrun);
    }

    #[test]
    fn node_commands_per_launcher() {
        assert_eq!(node_cmd_for(Some("srun")).unwrap().unwrap(), "srun -N1 -n1 -w {node}");
        assert_eq!(node_cmd_for(Some("flux")).unwrap().unwrap(), "flux run -N1 -n1 --requires=host:{node}");
        assert_eq!(node_cmd_for(Some("/opt/bin/jsrun")).unwrap().unwrap(), "blaunch {node}");
        assert!(node_cmd_for(Some("qsub")).unwrap_err().to_string().contains("unknown launcher \"qsub\""));
    }

    #[test]
    fn node_counts() {
        assert_eq!(srun_nodes(&s(&["srun", "-N", "64", "x"])), Some(64));
        assert_eq!(srun_nodes(&s(&["srun", "--nodes=3-5", "x"])), Some(3));
        assert_eq!(srun_nodes(&s(&["srun", "-N8", "x"])), Some(8));
        assert_eq!(srun_nodes(&s(&["srun", "-n8", "x"])), None);
        let l = launch(&["srun", "-n8", "x"], Kind::Srun, None);
        assert_eq!(l.nodes_needed(Some(3), 9), 3);
        assert_eq!(l.nodes_needed(None, 9), 9);
    }
}
