//! What the commands ask Slurm, through its client commands (each under
//! [`crate::identity::rm_query`]'s time limit, so a controller that does not answer cannot hang
//! a relaunch decision or `scr_halt`):
//!
//! * which nodes of the allocation cannot take the next run: those `sinfo` reports down,
//!   drained or draining, failing, not responding (`*`), powered down or rebooting, and those
//!   no longer in the job (`squeue`), which is what a failed node becomes in a `--no-kill`
//!   allocation (user guide 2.8.3);
//! * the job step a run launched by `srun` became, found by the `srun` process that launched it
//!   (`scontrol show step`: `SrunHost:Pid`), so `scr_halt --immediate` can cancel exactly that
//!   step (`scancel JOBID.STEP`) from any host, never the allocation, and only once the step's
//!   owner (`UserId`) is proven to be the run's.

use super::hostlist::{expand, NodeError};
use crate::identity::{rm_query, QueryError, QueryFault};

/// The nodes of `nodes` (the allocation of job `job`) that cannot take a run, with why.
pub fn unusable(job: &str, nodes: &[String]) -> Result<Vec<(String, String)>, NodeError> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let states = rm_query("sinfo", &["-h", "-N", "-n", &nodes.join(","), "-o", "%N %T"], &[])?;
    let in_job = rm_query("squeue", &["-h", "-j", job, "-o", "%N"], &[])?;
    let in_job = expand(in_job.trim()).map_err(|e| e.within(format!("squeue's node list of job {job}")))?;
    Ok(unusable_from(&states, &in_job, nodes))
}

/// [`unusable`] from `sinfo -N -o "%N %T"` output and the job's current nodes (empty when
/// Slurm no longer lists the job: nothing is known then).
fn unusable_from(sinfo: &str, in_job: &[String], nodes: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in sinfo.lines() {
        let mut f = line.split_whitespace();
        let (Some(node), Some(state)) = (f.next(), f.next()) else { continue };
        if nodes.iter().any(|n| n == node) && !out.iter().any(|(n, _)| n == node) && !usable_state(state) {
            out.push((node.to_string(), format!("{state} in Slurm")));
        }
    }
    if !in_job.is_empty() {
        for n in nodes.iter().filter(|n| !in_job.contains(n)) {
            if !out.iter().any(|(o, _)| o == n) {
                out.push((n.clone(), "no longer in the Slurm job".to_string()));
            }
        }
    }
    out.sort_by_key(|(n, _)| nodes.iter().position(|x| x == n));
    out
}

/// Whether a node in this `sinfo %T` state (`mixed`, `down*`, `drained`, `idle~`, ...) can run
/// a job step. The suffixes are Slurm's flags: `*` not responding, `~` powered off, `#`
/// powering up, `%` powering down, `!` power down pending, `^` rebooting; `$` (maintenance
/// reservation), `@` (reboot pending) and `-` (planned) leave the node usable.
fn usable_state(state: &str) -> bool {
    let s = state.to_ascii_lowercase();
    let base = s.trim_end_matches(|c: char| "*~#%!$@^-".contains(c));
    let flags = &s[base.len()..];
    let bad_base = ["down", "drain", "fail", "power", "inval", "future", "unknown", "reboot"];
    !bad_base.iter().any(|b| base.contains(b)) && !flags.contains(['*', '~', '#', '%', '!', '^'])
}

/// A job step as `scontrol show step` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// `JOBID.STEP`
    pub id: String,
    /// The uid that owns it (`UserId=`, as `1000` or `name(1000)`), `None` if not shown.
    pub uid: Option<u32>,
}

/// The step of job `job` that the `srun` process `pid` on `host` launched, if Slurm still
/// lists it.
pub fn step_of(job: &str, host: &str, pid: u32) -> Result<Option<Step>, NodeError> {
    match rm_query("scontrol", &["-o", "show", "step", job], &[]) {
        Ok(out) => Ok(step_from(&out, host, pid)),
        // A job that ended has no steps left to show.
        Err(e) if invalid_job(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// [`step_of`] from `scontrol -o show step` output: the line whose `SrunHost:Pid` is
/// `host:pid`.
fn step_from(out: &str, host: &str, pid: u32) -> Option<Step> {
    let want = format!("SrunHost:Pid={host}:{pid}");
    let line = out.lines().find(|l| l.split_whitespace().any(|f| f == want))?;
    let field = |k: &str| line.split_whitespace().find_map(|f| f.strip_prefix(k));
    let id = field("StepId=")?.to_string();
    let uid = field("UserId=").and_then(|u| {
        let n = match (u.find('('), u.strip_suffix(')')) {
            (Some(open), Some(inner)) => &inner[open + 1..],
            _ => u,
        };
        n.parse().ok()
    });
    Some(Step { id, uid })
}

/// Cancel one job step (`JOBID.STEP`), leaving the allocation.
pub(crate) fn cancel_step(step: &str) -> Result<(), NodeError> {
    if !step.contains('.') {
        return Err(NodeError::NotAStep { step: step.to_string() });
    }
    Ok(rm_query("scancel", &[step], &[]).map(|_| ())?)
}

/// Whether Slurm answered that the job does not exist (any more).
fn invalid_job(e: &QueryError) -> bool {
    matches!(&e.fault, QueryFault::Failed { stderr, .. } if stderr.contains("Invalid job id"))
}

/// Whether Slurm still lists the step `JOBID.STEP`.
pub(crate) fn step_listed(step: &str) -> Result<bool, NodeError> {
    let job = step.split('.').next().unwrap_or(step);
    match rm_query("squeue", &["-h", "-s", "-j", job, "-o", "%i"], &[]) {
        Ok(out) => Ok(out.lines().any(|l| l.trim() == step)),
        Err(e) if invalid_job(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn an_ended_job_is_known_by_slurms_answer_not_by_the_command_line() {
        let failed = |stderr: &str, command: &str| QueryError {
            command: command.into(),
            fault: QueryFault::Failed { status: std::process::ExitStatus::default(), stderr: stderr.into() },
        };
        assert!(invalid_job(&failed("slurm_load_jobs error: Invalid job id specified", "squeue -j 7")));
        assert!(!invalid_job(&failed("Socket timed out on send/recv operation", "squeue -j 7")));
        // a job named "Invalid job id" in the command line is not Slurm's answer
        assert!(!invalid_job(&failed("", "squeue -n Invalid job id")));
        let start =
            QueryError { command: "scontrol".into(), fault: QueryFault::Start(std::io::ErrorKind::NotFound.into()) };
        assert!(!invalid_job(&start));
    }

    #[test]
    fn node_states() {
        for ok in ["idle", "mixed", "allocated", "completing", "mixed$", "idle@", "IDLE", "planned-"] {
            assert!(usable_state(ok), "{ok}");
        }
        for bad in ["down", "down*", "drained", "draining", "fail", "failing", "idle*", "idle~", "mixed#", "reboot^"] {
            assert!(!usable_state(bad), "{bad}");
        }
    }

    #[test]
    fn unusable_nodes_from_sinfo_and_the_job() {
        let nodes = s(&["n1", "n2", "n3", "n4"]);
        // n2 is down (listed once per partition), n4 left the job after a node failure, n9 is
        // not ours.
        let sinfo = "n1 mixed\nn2 down*\nn2 down*\nn3 mixed\nn4 idle\nn9 down\n";
        let got = unusable_from(sinfo, &s(&["n1", "n3"]), &nodes);
        assert_eq!(
            got,
            vec![("n2".to_string(), "down* in Slurm".to_string()), ("n4".into(), "no longer in the Slurm job".into())]
        );
        assert!(unusable_from("n1 mixed\n", &[], &nodes).is_empty(), "job no longer listed: nothing known");
    }

    #[test]
    fn the_step_of_a_launcher() {
        let out = "StepId=10.batch UserId=0 State=RUNNING NodeList=n1 Name=batch SrunHost:Pid=(null):0\n\
                   StepId=10.0 UserId=0 State=RUNNING NodeList=n[1-2] Name=app SrunHost:Pid=n1:29047\n\
                   StepId=10.1 UserId=0 State=RUNNING NodeList=n3 Name=app SrunHost:Pid=n1:290470\n";
        assert_eq!(step_from(out, "n1", 29047), Some(Step { id: "10.0".into(), uid: Some(0) }));
        assert_eq!(step_from(out, "n1", 290470).map(|s| s.id).as_deref(), Some("10.1"));
        assert_eq!(step_from(out, "n2", 29047), None);
        let named = "StepId=11.0 UserId=alice(1001) GroupId=alice(1001) SrunHost:Pid=n1:7\n\
                     StepId=11.1 UserId=? SrunHost:Pid=n1:8\n";
        assert_eq!(step_from(named, "n1", 7), Some(Step { id: "11.0".into(), uid: Some(1001) }));
        assert_eq!(step_from(named, "n1", 8), Some(Step { id: "11.1".into(), uid: None }));
        assert!(cancel_step("10").unwrap_err().to_string().contains("refusing"));
    }
}
