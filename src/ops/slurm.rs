//! What the commands ask Slurm, through its client commands (each under
//! [`crate::identity::rm_query`]'s time limit, so a controller that does not answer cannot hang
//! a relaunch decision): which nodes of the allocation cannot take the next run: those `sinfo`
//! reports down, drained or draining, failing, not responding (`*`), powered down or rebooting,
//! and those no longer in the job (`squeue`), which is what a failed node becomes in a
//! `--no-kill` allocation (user guide 2.8.3).

use super::nodes::expand;
use crate::identity::rm_query;

/// The nodes of `nodes` (the allocation of job `job`) that cannot take a run, with why.
pub fn unusable(job: &str, nodes: &[String]) -> Result<Vec<(String, String)>, String> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let states = rm_query("sinfo", &["-h", "-N", "-n", &nodes.join(","), "-o", "%N %T"], &[])?;
    let in_job = rm_query("squeue", &["-h", "-j", job, "-o", "%N"], &[])?;
    let in_job = expand(in_job.trim()).map_err(|e| format!("squeue's node list of job {job}: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
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
}
