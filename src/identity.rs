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

use std::ffi::CStr;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a job id came from (for `SCR_DEBUG` output).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobId {
    pub id: String,
    pub source: String,
}

const RM_VARS: [&str; 6] = ["SCR_JOB_ID", "SLURM_JOBID", "SLURM_JOB_ID", "LSB_JOBID", "FLUX_JOB_ID", "PBS_JOBID"];

/// The job id from the environment, or the documented fallback derived from `prefix`.
pub fn job_id(prefix: &Path) -> JobId {
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
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The user name: `SCR_USER_NAME`, `USER`, then the account database (containers often run
/// as root with no `USER`), then `uid<N>`.
pub fn user_name() -> String {
    for var in ["SCR_USER_NAME", "USER", "LOGNAME"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() && !v.contains('/') {
                return v;
            }
        }
    }
    // SAFETY: geteuid has no preconditions. getpwuid_r writes only into the buffers we pass and
    // their lengths are given; the returned pw_name points into `buf`, read before it drops.
    unsafe {
        let uid = libc::geteuid();
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut out);
        if rc == 0 && !out.is_null() && !pwd.pw_name.is_null() {
            if let Ok(s) = CStr::from_ptr(pwd.pw_name).to_str() {
                if !s.is_empty() {
                    return s.to_string();
                }
            }
        }
        format!("uid{uid}")
    }
}

/// The node name (`uname -n`); each node of a simulated cluster has its own.
pub fn host_name() -> String {
    // SAFETY: uname fills the struct we own; the nodename field is NUL-terminated by the kernel.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) == 0 {
            if let Ok(s) = CStr::from_ptr(u.nodename.as_ptr()).to_str() {
                return s.to_string();
            }
        }
    }
    "localhost".to_string()
}

/// The job name for dataset records: `SCR_JOB_NAME`, SLURM's, else empty.
pub fn job_name() -> String {
    ["SCR_JOB_NAME", "SLURM_JOB_NAME", "LSB_JOBNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_default()
}

/// The allocation's end time in seconds since the epoch: `SCR_END_TIME`, else
/// `SLURM_JOB_END_TIME` (set by Slurm 23.02 and later), else, inside a Slurm job
/// ([`slurm_job`]), the end time Slurm reports for it now (`squeue`). Slurm 22.05 sets no
/// variable, and an administrator may change the limit while the job runs (`scontrol update
/// TimeLimit`), so the answer is asked for again when it is older than a minute; a job without a
/// limit, or a Slurm that does not answer within [`QUERY_SECS`], gives `None`. Used with
/// `SCR_HALT_SECONDS`.
pub fn end_time() -> Option<i64> {
    if let Some(t) = ["SCR_END_TIME", "SLURM_JOB_END_TIME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse::<i64>().ok()))
        .filter(|t| *t > 0)
    {
        return Some(t);
    }
    let job = slurm_job()?;
    static ASKED: Mutex<Option<(String, Instant, Option<i64>)>> = Mutex::new(None);
    let mut asked = ASKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((j, at, end)) = asked.as_ref() {
        if *j == job && at.elapsed() < Duration::from_secs(60) {
            return *end;
        }
    }
    // SLURM_TIME_FORMAT=%s makes squeue print seconds since the epoch, whatever the time zone.
    let end = match rm_query("squeue", &["-h", "-j", &job, "-o", "%e"], &[("SLURM_TIME_FORMAT", "%s")]) {
        Ok(out) => parse_epoch(&out),
        Err(e) => {
            crate::scr_debug!(1, "allocation end time of Slurm job {job}: {e}");
            None
        }
    };
    *asked = Some((job, Instant::now(), end));
    end
}

/// The Slurm job (allocation) this process runs in: `SLURM_JOB_ID`, else `SLURM_JOBID`.
pub fn slurm_job() -> Option<String> {
    ["SLURM_JOB_ID", "SLURM_JOBID"]
        .iter()
        .find_map(|v| std::env::var(v).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
}

/// A time `squeue -o %e` printed under `SLURM_TIME_FORMAT=%s`: seconds since the epoch, or
/// `None` for a job without an end (`Unknown`, `N/A`, `NONE`, empty).
fn parse_epoch(out: &str) -> Option<i64> {
    out.lines().next()?.trim().parse::<i64>().ok().filter(|t| *t > 0)
}

/// How long a resource manager query ([`rm_query`]) may take before it is given up.
pub const QUERY_SECS: u64 = 20;

/// Run a resource manager's client command (`squeue`, `sinfo`, `scontrol`, `scancel`) with
/// extra environment `env` and return its standard output. Fails, saying why, when it cannot
/// be started, exits non-zero (with its first line of standard error), or does not finish
/// within [`QUERY_SECS`] (it is killed then: a controller that does not answer must not hang a
/// job's rank 0 or a relaunch decision).
pub fn rm_query(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
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
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
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
                return Err(format!("{shown} did not answer within {QUERY_SECS} s"));
            }
            Err(e) => return Err(format!("waiting for {shown}: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    if !status.success() {
        let msg = err.join().unwrap_or_default();
        let first = msg.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        return Err(format!(
            "{shown} failed ({status}){}",
            if first.is_empty() { String::new() } else { format!(": {first}") }
        ));
    }
    Ok(stdout)
}

/// Seconds since the epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Microseconds since the epoch (dataset creation stamps, as SCR records them).
pub fn now_usecs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// `usecs` (microseconds since the epoch) as local ISO 8601 with its offset, with or
/// without the microseconds: `2026-03-01T14:02:11[.204518]+01:00`.
pub fn iso_local(usecs: i64, micros: bool) -> String {
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
pub fn local_tm(secs: i64) -> (libc::tm, i64) {
    // SAFETY: localtime_r and gmtime_r write only into the tm we own; the time_t is passed by
    // reference. Both are thread-safe (unlike localtime).
    unsafe {
        let t = secs as libc::time_t;
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            let mut utc: libc::tm = std::mem::zeroed();
            libc::gmtime_r(&t, &mut utc);
            return (utc, 0);
        }
        let off = tm.tm_gmtoff;
        (tm, off)
    }
}

/// An ISO-8601 UTC timestamp (`2026-11-21T06:00:00`) for a time in seconds since the epoch.
pub fn iso_time(secs: i64) -> String {
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
    fn resource_manager_queries_report_failures() {
        assert_eq!(rm_query("sh", &["-c", "echo $X"], &[("X", "42")]).unwrap(), "42\n");
        let e = rm_query("sh", &["-c", "echo no such job >&2; exit 1"], &[]).unwrap_err();
        assert!(e.contains("failed") && e.contains("no such job"), "{e}");
        assert!(rm_query("/nonexistent/squeue", &[], &[]).unwrap_err().contains("cannot run"));
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00");
        assert_eq!(iso_time(1_700_000_000), "2023-11-14T22:13:20");
    }
}
