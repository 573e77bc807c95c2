//! Who and where we are: the job (allocation) id, the user name, the node name and the
//! allocation's end time, taken from the resource manager when there is one (its environment
//! variables, and for the end time Slurm's own answer through [`rm_query`]).
//!
//! The job id decides which cache a run finds, so it must be equal for every run of one job in
//! one allocation and different for unrelated jobs. Sources, first found wins:
//! `SCR_JOB_ID`, then SLURM (`SLURM_JOBID`/`SLURM_JOB_ID`), LSF (`LSB_JOBID`), Flux
//! (`FLUX_JOB_ID`), PBS (`PBS_JOBID`). Without a resource manager (a plain `mpirun` on a
//! workstation) the fallback is `prefix-<hash>`, a hash of the canonical prefix directory: runs
//! of the same job (same prefix) find each other's cache, and unrelated jobs (different
//! prefixes) never share one. SCR 3 falls back to the literal `defjobid` instead, which makes
//! every such job share a cache.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a job id came from (for `SCR_DEBUG` output).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct JobId {
    /// The job id.
    pub(crate) id: String,
    /// Where it came from: the variable (`SLURM_JOB_ID`, ...) or the fallback.
    pub(crate) source: String,
}

const RM_VARS: [&str; 6] = ["SCR_JOB_ID", "SLURM_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "FLUX_JOB_ID", "PBS_JOBID"];

/// The job id from the environment, or the documented fallback derived from `prefix`.
pub(crate) fn job_id(prefix: &Path) -> JobId {
    job_id_from(|k| std::env::var(k).ok(), prefix)
}

fn job_id_from(get: impl Fn(&str) -> Option<String>, prefix: &Path) -> JobId {
    for var in RM_VARS {
        if let Some(v) = get(var).filter(|v| !v.trim().is_empty()) {
            return JobId { id: sanitize(v.trim()), source: var.to_string() };
        }
    }
    let canon = std::fs::canonicalize(prefix).unwrap_or_else(|_| prefix.to_path_buf());
    JobId {
        id: format!("prefix-{:016x}", fnv1a(canon.as_os_str().as_encoded_bytes())),
        source: format!("fallback: hash of prefix {}", canon.display()),
    }
}

/// Make a job id safe as a single path component.
fn sanitize(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// 64-bit FNV-1a, stable across releases and platforms (unlike `DefaultHasher`).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The user name: `SCR_USER_NAME`, `USER`, then the account database (containers often run
/// as root with no `USER`), then `uid<N>`.
pub(crate) fn user_name() -> String {
    for var in ["SCR_USER_NAME", "USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() && !v.contains('/') {
                return v;
            }
        }
    }
    let uid = crate::sys::euid();
    crate::sys::account_name(uid).unwrap_or_else(|| format!("uid{uid}"))
}

/// The node name (`uname -n`); each node of a simulated cluster has its own.
pub fn host_name() -> String {
    crate::sys::node_name().unwrap_or_else(|| "localhost".to_string())
}

/// The job name for dataset records: `SCR_JOB_NAME`, SLURM's, else empty.
pub(crate) fn job_name() -> String {
    ["SCR_JOB_NAME", "SLURM_JOB_NAME", "LSB_JOBNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_default()
}

/// The resource manager a process runs under, from its environment: Slurm (`SLURM_JOB_ID` or
/// `SLURM_JOBID`), LSF (`LSB_JOBID`), Flux (`FLUX_JOB_ID`) or PBS (`PBS_JOBID`), first found in
/// that order, with the job's id. Slurm is tested against a real server (`tests/it/slurm.rs`);
/// LSF, Flux and PBS against their commands' documented output (`tests/it/resource_managers.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rm {
    Slurm(String),
    Lsf(String),
    Flux(String),
    Pbs(String),
}

impl Rm {
    /// The one this process runs under, if any.
    pub(crate) fn detect() -> Option<Rm> {
        Rm::detect_from(|k| std::env::var(k).ok())
    }

    fn detect_from(get: impl Fn(&str) -> Option<String>) -> Option<Rm> {
        let var =
            |names: &[&str]| names.iter().find_map(|v| get(v).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()));
        if let Some(j) = var(&["SLURM_JOB_ID", "SLURM_JOBID"]) {
            return Some(Rm::Slurm(j));
        }
        if let Some(j) = var(&["LSB_JOBID"]) {
            return Some(Rm::Lsf(j));
        }
        if let Some(j) = var(&["FLUX_JOB_ID"]) {
            return Some(Rm::Flux(j));
        }
        var(&["PBS_JOBID"]).map(Rm::Pbs)
    }

    /// `Slurm`, `LSF`, `Flux`, `PBS`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Rm::Slurm(_) => "Slurm",
            Rm::Lsf(_) => "LSF",
            Rm::Flux(_) => "Flux",
            Rm::Pbs(_) => "PBS",
        }
    }

    /// The job's id.
    pub(crate) fn job(&self) -> &str {
        match self {
            Rm::Slurm(j) | Rm::Lsf(j) | Rm::Flux(j) | Rm::Pbs(j) => j,
        }
    }

    /// The allocation's end time as the resource manager reports it now (see [`end_time`]).
    fn ask_end_time(&self) -> Result<Option<i64>, QueryError> {
        let now = now_secs();
        match self {
            // SLURM_TIME_FORMAT=%s makes squeue print seconds since the epoch, whatever the zone.
            Rm::Slurm(job) => rm_query("squeue", &["-h", "-j", job, "-o", "%e"], &[("SLURM_TIME_FORMAT", "%s")])
                .map(|o| parse_epoch(&o)),
            Rm::Lsf(job) => {
                rm_query("bjobs", &["-noheader", "-o", "time_left", job], &[]).map(|o| lsf_time_left(&o, now))
            }
            // Inside a Flux job the command answers for the enclosing job.
            Rm::Flux(_) => rm_query("flux", &["job", "timeleft"], &[]).map(|o| flux_timeleft(&o, now)),
            Rm::Pbs(job) => rm_query("qstat", &["-f", job], &[]).map(|o| pbs_end(&o, now)),
        }
    }
}

/// The allocation's end time in seconds since the epoch: `SCR_END_TIME`, else
/// `SLURM_JOB_END_TIME` (set by Slurm 23.02 and later), else what the resource manager
/// ([`Rm`]) reports for the job now: Slurm's `squeue -o %e`, LSF's `bjobs -o time_left`, Flux's
/// `flux job timeleft`, PBS's `qstat -f` (`Walltime.Remaining`, else the start time `stime`
/// plus `Resource_List.walltime`, else that limit less `resources_used.walltime`). Slurm 22.05
/// sets no variable, and an administrator may change the limit while the job runs, so the
/// answer is asked for again when it is older than a minute; a job without a limit, or a
/// resource manager that does not answer within [`QUERY_SECS`], gives `None`. Used with
/// `SCR_HALT_SECONDS`.
pub fn end_time() -> Option<i64> {
    if let Some(t) = ["SCR_END_TIME", "SLURM_JOB_END_TIME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse::<i64>().ok()))
        .filter(|t| *t > 0)
    {
        return Some(t);
    }
    let rm = Rm::detect()?;
    static ASKED: Mutex<Option<(Rm, Instant, Option<i64>)>> = Mutex::new(None);
    let mut asked = ASKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((r, at, end)) = asked.as_ref() {
        if *r == rm && at.elapsed() < Duration::from_secs(60) {
            return *end;
        }
    }
    let end = match rm.ask_end_time() {
        Ok(end) => end,
        Err(e) => {
            crate::scr_debug!(1, "allocation end time of {} job {}: {e}", rm.name(), rm.job());
            None
        }
    };
    *asked = Some((rm, Instant::now(), end));
    end
}

/// The Slurm job (allocation) this process runs in: `SLURM_JOB_ID`, else `SLURM_JOBID`.
pub(crate) fn slurm_job() -> Option<String> {
    match Rm::detect() {
        Some(Rm::Slurm(j)) => Some(j),
        _ => None,
    }
}

/// A time `squeue -o %e` printed under `SLURM_TIME_FORMAT=%s`: seconds since the epoch, or
/// `None` for a job without an end (`Unknown`, `N/A`, `NONE`, empty).
fn parse_epoch(out: &str) -> Option<i64> {
    out.lines().next()?.trim().parse::<i64>().ok().filter(|t| *t > 0)
}

/// `bjobs -noheader -o time_left JOBID`. IBM's documentation of the field: "hours:minutes
/// followed by E (an estimated run time exists), L (a run limit exists but no estimated run
/// time) or X (the estimated run time was exceeded)", `-` when the job has no limit:
///
/// ```text
/// 0:59 L
/// ```
fn lsf_time_left(out: &str, now: i64) -> Option<i64> {
    let first = out.lines().map(str::trim).find(|l| !l.is_empty())?;
    let hm = first.split_whitespace().next()?;
    let (h, m) = hm.split_once(':')?;
    let (h, m) = (h.parse::<i64>().ok()?, m.parse::<i64>().ok()?);
    if first.ends_with('X') {
        return Some(now);
    }
    Some(now + h * 3600 + m * 60)
}

/// `flux job timeleft` (flux-job(1), TIMELEFT): "the number of whole seconds left in the
/// current or specified job time limit. If the job has expired or is complete, then this
/// command reports 0. If the job does not have a time limit, then a large number (UINT_MAX) is
/// reported."
///
/// ```text
/// 3187
/// ```
fn flux_timeleft(out: &str, now: i64) -> Option<i64> {
    let secs = out.trim().parse::<u64>().ok()?;
    (secs < u32::MAX as u64).then_some(now + secs as i64)
}

/// `qstat -f JOBID` (PBS Pro and Torque), attributes as `name = value` lines:
///
/// ```text
/// Job Id: 1234.pbs01
///     Job_Name = job.sh
///     resources_used.walltime = 00:10:05
///     job_state = R
///     stime = Tue Nov 24 14:00:00 2026
///     Resource_List.walltime = 01:00:00
///     Walltime.Remaining = 2995
/// ```
///
/// `Walltime.Remaining` (Torque, seconds) wins; else `stime` (PBS Pro: when the job started,
/// local time) plus the limit; else the limit less the time used.
fn pbs_end(out: &str, now: i64) -> Option<i64> {
    let attr = |name: &str| {
        out.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let hms = |v: String| -> Option<i64> {
        let parts: Vec<i64> = v.split(':').map(|p| p.trim().parse::<i64>().ok()).collect::<Option<_>>()?;
        Some(parts.iter().fold(0, |acc, p| acc * 60 + p))
    };
    if let Some(left) = attr("Walltime.Remaining").and_then(|v| v.parse::<i64>().ok()) {
        return Some(now + left);
    }
    let limit = attr("Resource_List.walltime").and_then(hms)?;
    if let Some(start) = attr("stime").and_then(|v| local_ctime(&v)) {
        return Some(start + limit);
    }
    let used = attr("resources_used.walltime").and_then(hms).unwrap_or(0);
    Some(now + limit - used)
}

/// A local time as `ctime` prints it (`Tue Nov 24 14:00:00 2026`), through `strptime` and
/// `mktime`.
fn local_ctime(text: &str) -> Option<i64> {
    crate::sys::parse_local_time(text.trim(), c"%a %b %d %H:%M:%S %Y")
}

/// How long a resource manager query ([`rm_query`]) may take before it is given up.
pub(crate) const QUERY_SECS: u64 = 20;

/// Run a resource manager's client command (`squeue`, `sinfo`, `scontrol`, `scancel`, `bjobs`,
/// `flux`, `qstat`) with
/// extra environment `env` and return its standard output. Fails, saying why, when it cannot
/// be started, exits non-zero (with its first line of standard error), or does not finish
/// within [`QUERY_SECS`] (it is killed then: a controller that does not answer must not hang a
/// job's rank 0 or a relaunch decision).
pub(crate) fn rm_query(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, QueryError> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let shown = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| QueryError { command: shown.clone(), fault: QueryFault::Start(e) })?;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + Duration::from_secs(QUERY_SECS);
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(QueryError { command: shown, fault: QueryFault::Timeout });
            }
            Err(e) => return Err(QueryError { command: shown, fault: QueryFault::Wait(e) }),
        }
    };
    let stdout = out.join().unwrap_or_default();
    if !status.success() {
        let msg = err.join().unwrap_or_default();
        let first = msg.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        return Err(QueryError { command: shown, fault: QueryFault::Failed { status, stderr: first } });
    }
    Ok(stdout)
}

/// A resource manager query ([`rm_query`]) that gave no answer: the command line, and what
/// went wrong.
#[derive(Debug, thiserror::Error)]
pub struct QueryError {
    /// The command line, as `program arg...`.
    pub(crate) command: String,
    /// What went wrong.
    pub(crate) fault: QueryFault,
}

/// What went wrong with a [`QueryError`]'s command.
#[derive(Debug)]
pub(crate) enum QueryFault {
    /// It could not be started.
    Start(std::io::Error),
    /// It did not finish within [`QUERY_SECS`] (it was killed).
    Timeout,
    /// Waiting for it failed.
    Wait(std::io::Error),
    /// It exited unsuccessfully; `stderr` is the first non-blank line of its standard error.
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The first non-blank line of its standard error.
        stderr: String,
    },
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = &self.command;
        match &self.fault {
            QueryFault::Start(e) => write!(f, "cannot run {shown}: {e}"),
            QueryFault::Timeout => write!(f, "{shown} did not answer within {QUERY_SECS} s"),
            QueryFault::Wait(e) => write!(f, "waiting for {shown}: {e}"),
            QueryFault::Failed { status, stderr } if stderr.is_empty() => write!(f, "{shown} failed ({status})"),
            QueryFault::Failed { status, stderr } => write!(f, "{shown} failed ({status}): {stderr}"),
        }
    }
}

/// Seconds since the epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Microseconds since the epoch (dataset creation stamps, as SCR records them).
pub(crate) fn now_usecs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// `usecs` (microseconds since the epoch) as local ISO 8601 with its offset, with or
/// without the microseconds: `2026-03-01T14:02:11[.204518]+01:00`.
pub(crate) fn iso_local(usecs: i64, micros: bool) -> String {
    let (tm, off) = local_tm(usecs.div_euclid(1_000_000));
    let sign = if off < 0 { '-' } else { '+' };
    let off = off.abs();
    let frac = if micros { format!(".{:06}", usecs.rem_euclid(1_000_000)) } else { String::new() };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{frac}{sign}{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        off / 3600,
        off % 3600 / 60
    )
}

/// The local broken-down time of `secs` (seconds since the epoch) and its offset from UTC in
/// seconds (UTC with offset 0 if the local zone cannot be applied).
pub(crate) fn local_tm(secs: i64) -> (libc::tm, i64) {
    crate::sys::local_tm(secs)
}

/// An ISO-8601 UTC timestamp (`2026-11-21T06:00:00`) for a time in seconds since the epoch.
pub(crate) fn iso_time(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_manager_wins_over_fallback() {
        let env = |k: &str| (k == "SLURM_JOBID").then(|| "1234".to_string());
        let j = job_id_from(env, Path::new("/tmp"));
        assert_eq!(j.id, "1234");
        assert_eq!(j.source, "SLURM_JOBID");
        let env = |k: &str| match k {
            "SCR_JOB_ID" => Some("mine".to_string()),
            "SLURM_JOBID" => Some("1234".to_string()),
            _ => None,
        };
        assert_eq!(job_id_from(env, Path::new("/tmp")).id, "mine");
    }

    #[test]
    fn fallback_differs_by_prefix_and_is_stable() {
        let a = job_id_from(|_| None, Path::new("/nonexistent/a"));
        let b = job_id_from(|_| None, Path::new("/nonexistent/b"));
        assert_ne!(a.id, b.id);
        assert_eq!(a, job_id_from(|_| None, Path::new("/nonexistent/a")));
        assert!(a.id.starts_with("prefix-"));
    }

    #[test]
    fn job_ids_become_one_path_component() {
        let j = job_id_from(|k| (k == "FLUX_JOB_ID").then(|| "ƒa/b".to_string()), Path::new("/"));
        assert_eq!(j.id, "_a_b");
    }

    #[test]
    fn slurm_end_times() {
        assert_eq!(parse_epoch("1795426226\n"), Some(1_795_426_226));
        for none in ["Unknown\n", "N/A", "NONE", "", "0", "-1"] {
            assert_eq!(parse_epoch(none), None, "{none:?}");
        }
    }

    #[test]
    fn resource_managers_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(Rm::detect_from(env(&[("LSB_JOBID", "77"), ("PBS_JOBID", "9")])), Some(Rm::Lsf("77".into())));
        assert_eq!(Rm::detect_from(env(&[("SLURM_JOBID", "5"), ("FLUX_JOB_ID", "f1")])), Some(Rm::Slurm("5".into())));
        assert_eq!(Rm::detect_from(env(&[("FLUX_JOB_ID", "ƒ2")])), Some(Rm::Flux("ƒ2".into())));
        assert_eq!(Rm::detect_from(env(&[("PBS_JOBID", " 12.pbs01 ")])), Some(Rm::Pbs("12.pbs01".into())));
        assert_eq!(Rm::detect_from(env(&[("LSB_JOBID", " ")])), None);
    }

    #[test]
    fn end_times_from_the_documented_outputs() {
        let now = 1_000_000;
        assert_eq!(lsf_time_left("0:59 L\n", now), Some(now + 59 * 60));
        assert_eq!(lsf_time_left("12:05 E", now), Some(now + 12 * 3600 + 300));
        assert_eq!(lsf_time_left("0:00 X", now), Some(now));
        assert_eq!(lsf_time_left("-\n", now), None);
        assert_eq!(lsf_time_left("", now), None);
        assert_eq!(flux_timeleft("3187\n", now), Some(now + 3187));
        assert_eq!(flux_timeleft("0", now), Some(now));
        assert_eq!(flux_timeleft("4294967295\n", now), None);
        let torque = "Job Id: 1.t\n    Resource_List.walltime = 01:00:00\n    Walltime.Remaining = 2995\n";
        assert_eq!(pbs_end(torque, now), Some(now + 2995));
        let used = "Job Id: 1.p\n    resources_used.walltime = 00:10:05\n    Resource_List.walltime = 01:00:00\n";
        assert_eq!(pbs_end(used, now), Some(now + 3600 - 605));
        let start = local_ctime("Tue Nov 24 14:00:00 2026").unwrap();
        assert!(iso_local(start * 1_000_000, false).starts_with("2026-11-24T14:00:00"));
        let pro = format!("{used}    stime = Tue Nov 24 14:00:00 2026\n");
        assert_eq!(pbs_end(&pro, now), Some(start + 3600));
        assert_eq!(pbs_end("Job Id: 1.p\n    job_state = R\n", now), None);
    }

    #[test]
    fn resource_manager_queries_report_failures() {
        assert_eq!(rm_query("sh", &["-c", "echo $X"], &[("X", "42")]).unwrap(), "42\n");
        let e = rm_query("sh", &["-c", "echo no such job >&2; exit 1"], &[]).unwrap_err().to_string();
        assert!(e.contains("failed") && e.contains("no such job"), "{e}");
        assert!(rm_query("/nonexistent/squeue", &[], &[]).unwrap_err().to_string().contains("cannot run"));
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00");
        assert_eq!(iso_time(1_700_000_000), "2023-11-14T22:13:20");
    }
}
