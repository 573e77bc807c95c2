//! `scr_halt`: set, change, list and remove the halt conditions of a job (user guide 2.9)
//! in `<prefix>/.scr/halt.scr`, through [`Halt::update`], the locked read-modify-write the
//! running library uses, so a change made while the job runs is seen at its next check and
//! neither side loses the other's update.
//!
//! What each condition does in a running job (see `src/runtime/policy.rs`): the library reads
//! the file in `SCR_Init`, after every completed checkpoint (counting `checkpoints_left` down),
//! in `SCR_Need_checkpoint` (a satisfied condition asks for a checkpoint now) and in
//! `SCR_Should_exit`; with `SCR_HALT_EXIT=1` it ends the run itself right after the checkpoint.
//! An exit reason stops the job at its next check and tells `scr_run` not to relaunch it.

use std::path::Path;

use super::{OpError, OpResult};
use crate::state::halt::{Halt, FINALIZE_REASON};
use crate::state::layout::Layout;
use crate::state::run::RunRecord;

/// The exit reason `scr_halt` records when asked to halt without a condition (and with
/// `--immediate`), as SCR's `scr_halt` does.
pub(crate) const HALTED_REASON: &str = "JOB_HALTED";

/// The changes one `scr_halt` command asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// `--checkpoints N`: halt after N more successful checkpoints.
    pub checkpoints: Option<u64>,
    /// `--before TIME`: halt once fewer than the halt seconds remain before it (seconds since
    /// the epoch).
    pub before: Option<i64>,
    /// `--after TIME`: halt at the first successful checkpoint after it (seconds since the epoch).
    pub after: Option<i64>,
    /// `--seconds N`: the job's halt seconds (replaces `SCR_HALT_SECONDS`).
    pub seconds: Option<u64>,
    /// `--immediate`: record the exit reason and stop the current run now.
    pub immediate: bool,
    /// `--list`: list the conditions after the change.
    pub list: bool,
    /// `--unset-checkpoints`: remove the checkpoint countdown.
    pub unset_checkpoints: bool,
    /// `--unset-before`: remove the `--before` time.
    pub unset_before: bool,
    /// `--unset-after`: remove the `--after` time.
    pub unset_after: bool,
    /// `--unset-seconds`: remove the halt seconds.
    pub unset_seconds: bool,
    /// `--unset-reason`: remove the exit reason (`JOB_HALTED`, `SCR_FINALIZE_CALLED`, ...).
    pub unset_reason: bool,
    /// `--remove`: delete the halt file (only with `--list`).
    pub remove: bool,
}

impl Request {
    /// Refuse contradictory requests before anything is changed.
    pub fn check(&self) -> OpResult<()> {
        let clash = |set: bool, unset: bool, name: &str| {
            if set && unset {
                Err(OpError::usage(format!("--{name} and --unset-{name} contradict each other")))
            } else {
                Ok(())
            }
        };
        clash(self.checkpoints.is_some(), self.unset_checkpoints, "checkpoints")?;
        clash(self.before.is_some(), self.unset_before, "before")?;
        clash(self.after.is_some(), self.unset_after, "after")?;
        clash(self.seconds.is_some(), self.unset_seconds, "seconds")?;
        if self.immediate && self.unset_reason {
            return Err(OpError::usage("--immediate and --unset-reason contradict each other"));
        }
        if self.remove && self.changes_something() {
            return Err(OpError::usage(
                "--remove deletes the halt file; it cannot be combined with options that set or unset conditions",
            ));
        }
        Ok(())
    }

    fn changes_something(&self) -> bool {
        self.checkpoints.is_some()
            || self.before.is_some()
            || self.after.is_some()
            || self.seconds.is_some()
            || self.immediate
            || self.unset_checkpoints
            || self.unset_before
            || self.unset_after
            || self.unset_seconds
            || self.unset_reason
    }

    /// Whether carrying out the request writes the halt file (creating it if need be).
    pub fn writes_file(&self) -> bool {
        !self.remove && (self.changes_something() || self.sets_reason())
    }

    /// With no condition at all (only a prefix, or nothing), `scr_halt` halts the job after its
    /// next checkpoint by recording an exit reason; so does `--immediate`.
    pub(crate) fn sets_reason(&self) -> bool {
        self.immediate || (!self.changes_something() && !self.list && !self.remove)
    }

    /// Apply to the halt file's content.
    pub(crate) fn apply(&self, h: &mut Halt) {
        if let Some(n) = self.checkpoints {
            h.checkpoints_left = Some(n);
        }
        if let Some(t) = self.before {
            h.exit_before = Some(t);
        }
        if let Some(t) = self.after {
            h.exit_after = Some(t);
        }
        if let Some(s) = self.seconds {
            h.halt_seconds = Some(s);
        }
        if self.unset_checkpoints {
            h.checkpoints_left = None;
        }
        if self.unset_before {
            h.exit_before = None;
        }
        if self.unset_after {
            h.exit_after = None;
        }
        if self.unset_seconds {
            h.halt_seconds = None;
        }
        if self.unset_reason {
            h.exit_reason = None;
        }
        if self.sets_reason() {
            h.exit_reason = Some(HALTED_REASON.to_string());
        }
    }
}

/// What happened to one prefix.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The halt file's content before a change, read under the lock (`None`: there was none).
    pub before: Option<Halt>,
    /// The halt file's content afterwards (`None`: there is none).
    pub after: Option<Halt>,
    /// Messages for the user.
    pub notes: Vec<String>,
}

/// Carry out `req` on one prefix. The halt file is read (a damaged one is an error and stays
/// untouched), changed under its lock, and listed if asked.
pub fn apply(layout: &Layout, req: &Request) -> OpResult<Outcome> {
    let path = layout.halt();
    let mut out = Outcome::default();
    if req.remove {
        // Under the lock, so a job updating the file at this moment does not resurrect it with
        // stale content; the lock file stays (deleting it would let two writers in at once).
        let _lock = crate::persist::Lock::acquire(&path)?;
        match std::fs::remove_file(&path) {
            Ok(()) => out.notes.push(format!("removed {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.notes.push(format!("{} does not exist; nothing to remove", path.display()))
            }
            Err(e) => return Err(OpError::failed(format!("cannot remove {}: {e}", path.display()))),
        }
        return Ok(out);
    }
    if req.writes_file() {
        let existed = path.exists();
        let (before, h) = Halt::update(&path, |h| {
            let before = h.clone();
            req.apply(h);
            (before, h.clone())
        })?;
        out.before = existed.then_some(before);
        out.after = Some(h);
    } else {
        let exists = path.exists();
        let h = Halt::load(&path)?;
        out.after = exists.then_some(h);
    }
    if req.immediate {
        out.notes.extend(stop_current_run(layout)?);
    }
    Ok(out)
}

/// Lines describing the halt conditions (for `--list` and after a change). `halt_seconds`
/// stands for `SCR_HALT_SECONDS` when the file sets none; `end` is the allocation's end time.
pub fn describe(path: &Path, h: Option<&Halt>, now: i64, end: Option<i64>) -> Vec<String> {
    let Some(h) = h else {
        return vec![format!("no halt file ({}): no halt conditions are set", path.display())];
    };
    let mut out = vec![format!("halt conditions in {}:", path.display())];
    let mut any = false;
    if let Some(r) = &h.exit_reason {
        any = true;
        let what = if r == FINALIZE_REASON {
            "the application called SCR_Finalize; the next SCR_Init clears it"
        } else {
            "the job stops at its next check and is not relaunched"
        };
        out.push(format!("  exit reason:      {r} ({what})"));
    }
    if let Some(n) = h.checkpoints_left {
        any = true;
        out.push(format!("  checkpoints left: {n}"));
    }
    let secs = h.halt_seconds.unwrap_or(0);
    if let Some(t) = h.exit_before {
        any = true;
        let how = if secs > 0 {
            format!("halts once fewer than {secs} s remain before it")
        } else {
            "needs --seconds or SCR_HALT_SECONDS to take effect".to_string()
        };
        out.push(format!("  exit before:      {} ({how})", super::times::format_local(t)));
    }
    if let Some(t) = h.exit_after {
        any = true;
        out.push(format!(
            "  exit after:       {} (halts at the first checkpoint after it)",
            super::times::format_local(t)
        ));
    }
    if let Some(s) = h.halt_seconds {
        any = true;
        out.push(format!("  halt seconds:     {s}"));
    }
    if !any {
        out.push("  (none)".to_string());
    }
    match h.check(now, end) {
        Some(why) => out.push(format!("  satisfied now: {why}")),
        None => out.push("  satisfied now: no".to_string()),
    }
    out
}

/// `--immediate`: end the current run `scr_run` launched (the halt file already says not to
/// relaunch). A run launched by `srun` in a Slurm job is cancelled as a job step, from any host
/// that can reach Slurm; any other run only from the host `scr_run` runs on (elsewhere the
/// message says what to do).
fn stop_current_run(layout: &Layout) -> OpResult<Vec<String>> {
    let path = layout.run_file();
    let Some(rec) = RunRecord::load(&path)? else {
        return Ok(vec![format!(
            "no run record ({}): scr_run did not launch this job, so there is no run to stop here; \
             stop the job step with your resource manager (e.g. scancel JOBID.STEP) -- the halt file \
             already prevents a relaunch",
            path.display()
        )]);
    };
    let not_running = || Ok(vec![format!("run {} of this job is not running; nothing to stop", rec.attempt)]);
    if rec.ended.is_some() {
        return not_running();
    }
    if let Some(job) = &rec.slurm_job {
        return cancel_step(&rec, job, &path);
    }
    if !process_is(rec.launcher_pid, rec.launcher_start) {
        return not_running();
    }
    let here = crate::identity::host_name();
    if rec.host != here {
        return Err(OpError::failed(format!(
            "the current run was launched by scr_run on {} (process {}), not on this host ({here}); \
             run scr_halt --immediate there, or stop the job step with your resource manager \
             (e.g. scancel JOBID.STEP); the halt file already prevents a relaunch",
            rec.host, rec.launcher_pid
        )));
    }
    if let Err(why) = proven_launcher(&rec, &path) {
        return Err(OpError::failed(format!(
            "refusing to signal process {} named by {}: {why}; stop the run yourself (kill, or your resource \
             manager) if it is yours -- the halt file already prevents a relaunch",
            rec.launcher_pid,
            path.display()
        )));
    }
    let mut notes = vec![format!(
        "stopping run {} (launcher process {}: {})",
        rec.attempt,
        rec.launcher_pid,
        rec.command.join(" ")
    )];
    signal(rec.launcher_pid, libc::SIGTERM)?;
    // The launcher passes SIGTERM on to the ranks and exits; if it lingers, it is killed.
    for _ in 0..300 {
        if !process_is(rec.launcher_pid, rec.launcher_start) {
            notes.push("the run has stopped".to_string());
            return Ok(notes);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    signal(rec.launcher_pid, libc::SIGKILL)?;
    notes.push("the launcher did not stop within 30 s of SIGTERM and was killed".to_string());
    Ok(notes)
}

/// Cancel the job step of a run `srun` launched in Slurm job `job` (never the allocation: the
/// cache lives as long as it does) and wait until Slurm no longer lists the step. As for a
/// signal ([`proven_launcher`]), the record at `path` may have been written by someone else:
/// the step is cancelled only if Slurm says it belongs to the user who owns the record (and,
/// unless the caller is root, to the caller), not on Slurm's own permission checks alone.
fn cancel_step(rec: &RunRecord, job: &str, path: &Path) -> OpResult<Vec<String>> {
    use super::slurm;
    let launcher = format!("srun process {} on {}", rec.launcher_pid, rec.host);
    let Some(step) = slurm::step_of(job, &rec.host, rec.launcher_pid)? else {
        return Ok(vec![format!(
            "run {} ({launcher}) has no job step in Slurm job {job} (it has ended, or not started yet); \
             nothing to stop",
            rec.attempt
        )]);
    };
    if let Err(why) = step_owned(&step, path) {
        return Err(OpError::failed(format!(
            "refusing to cancel job step {} named by {}: {why}; stop the run yourself (scancel {}) if it is \
             yours -- the halt file already prevents a relaunch",
            step.id,
            path.display(),
            step.id
        )));
    }
    let step = step.id;
    let mut notes = vec![format!(
        "stopping run {} by cancelling its job step {step} ({launcher}: {}); the allocation stays",
        rec.attempt,
        rec.command.join(" ")
    )];
    slurm::cancel_step(&step)?;
    for _ in 0..600 {
        if !slurm::step_listed(&step)? {
            notes.push("the run has stopped".to_string());
            return Ok(notes);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    notes.push(format!("job step {step} was cancelled and is still ending (squeue -s -j {job} shows it)"));
    Ok(notes)
}

/// Why `step` is not proven to be the run's: Slurm must name its owner, and that owner must
/// own the run record at `path` and, unless the caller is root, be the caller.
fn step_owned(step: &super::slurm::Step, path: &Path) -> std::result::Result<(), Unproven> {
    use std::os::unix::fs::MetadataExt;
    let Some(uid) = step.uid else {
        return Err(Unproven::StepOwnerUnknown);
    };
    let owner = std::fs::symlink_metadata(path).map_err(Unproven::Record)?.uid();
    let me = crate::sys::euid();
    if uid != owner {
        return Err(Unproven::StepOwner { step: uid, record: owner });
    }
    if me != 0 && uid != me {
        return Err(Unproven::StepNotMine { step: uid, me });
    }
    Ok(())
}

/// Why a process or job step a run record names is not proven to be the run's, so it is
/// neither signalled nor cancelled: the uids, process and command lines that were compared.
#[derive(Debug, thiserror::Error)]
enum Unproven {
    #[error("scontrol show step does not say which user owns it (UserId)")]
    StepOwnerUnknown,
    #[error("cannot inspect the run record: {0}")]
    Record(std::io::Error),
    #[error("the step belongs to uid {step} and the run record to uid {record} (someone else wrote it)")]
    StepOwner { step: u32, record: u32 },
    #[error("the step belongs to uid {step}, not to this user (uid {me})")]
    StepNotMine { step: u32, me: u32 },
    #[error(
        "the run record does not say which command line the launcher runs (it was written by an older scr_run, \
         or crafted)"
    )]
    NoCmdline,
    #[error("the run record has no start time for the launcher")]
    NoStart,
    #[error("cannot inspect process {pid}: {source}")]
    Process { pid: u32, source: std::io::Error },
    #[error("the process belongs to uid {process} and the run record to uid {record} (someone else wrote it)")]
    ProcessOwner { process: u32, record: u32 },
    #[error("the process belongs to uid {process}, not to this user (uid {me})")]
    ProcessNotMine { process: u32, me: u32 },
    #[error("the process did not start when the recorded launcher did")]
    Started,
    #[error("the process runs {now:?}, the record says the launcher runs {recorded:?}")]
    Cmdline { now: Vec<String>, recorded: Vec<String> },
    #[error("cannot read the command line of process {pid}")]
    CmdlineUnreadable { pid: u32 },
}

fn signal(pid: u32, sig: i32) -> OpResult<()> {
    // the pid was checked to be the recorded launcher
    if let Err(e) = crate::sys::kill(pid as libc::pid_t, sig) {
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(OpError::failed(format!("cannot signal process {pid}: {e}")));
        }
    }
    Ok(())
}

/// Why process `rec.launcher_pid` is not proven to be the launcher the run record at `path`
/// describes. The record lives in the prefix, which others may be able to write, so a process
/// is signalled only if it belongs to the user who owns the record (and, unless the caller is
/// root, to the caller), started at the recorded time and runs the recorded command line.
fn proven_launcher(rec: &RunRecord, path: &Path) -> std::result::Result<(), Unproven> {
    use std::os::unix::fs::MetadataExt;
    let pid = rec.launcher_pid;
    let Some(cmdline) = &rec.launcher_cmdline else {
        return Err(Unproven::NoCmdline);
    };
    if rec.launcher_start == 0 {
        return Err(Unproven::NoStart);
    }
    let owner = std::fs::symlink_metadata(path).map_err(Unproven::Record)?.uid();
    let proc_uid = std::fs::metadata(format!("/proc/{pid}")).map_err(|source| Unproven::Process { pid, source })?.uid();
    let me = crate::sys::euid();
    if proc_uid != owner {
        return Err(Unproven::ProcessOwner { process: proc_uid, record: owner });
    }
    if me != 0 && proc_uid != me {
        return Err(Unproven::ProcessNotMine { process: proc_uid, me });
    }
    if !process_is(pid, rec.launcher_start) {
        return Err(Unproven::Started);
    }
    match process_cmdline(pid) {
        Some(now) if &now == cmdline => Ok(()),
        Some(now) => Err(Unproven::Cmdline { now, recorded: cmdline.clone() }),
        None => Err(Unproven::CmdlineUnreadable { pid }),
    }
}

/// The command line of a process (`/proc/<pid>/cmdline`), if it can be read and is not empty.
pub(crate) fn process_cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> =
        raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    (!args.is_empty()).then_some(args)
}

/// The start time of a process in clock ticks since boot (`/proc/<pid>/stat` field 22).
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its closing parenthesis are plain.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); field 22 is fields[19].
    if fields.first() == Some(&"Z") {
        return None; // exited, not yet reaped
    }
    fields.get(19)?.parse().ok()
}

/// The run `scr_run` launched in this prefix from this host, if it is still going.
pub(crate) fn active_run(layout: &Layout) -> OpResult<Option<RunRecord>> {
    Ok(RunRecord::load(&layout.run_file())?.filter(|rec| {
        rec.ended.is_none()
            && rec.host == crate::identity::host_name()
            && process_is(rec.launcher_pid, rec.launcher_start)
    }))
}

/// Whether process `pid` is alive and is the one that started at `start`.
pub(crate) fn process_is(pid: u32, start: u64) -> bool {
    process_start(pid) == Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_condition_halts_after_the_next_checkpoint() {
        let r = Request::default();
        assert!(r.sets_reason());
        let mut h = Halt::default();
        r.apply(&mut h);
        assert_eq!(h.exit_reason.as_deref(), Some(HALTED_REASON));
        assert!(h.check(0, None).is_some());
        // Listing only, or setting a condition, records no reason.
        for r in [Request { list: true, ..Default::default() }, Request { checkpoints: Some(3), ..Default::default() }]
        {
            let mut h = Halt::default();
            r.apply(&mut h);
            assert_eq!(h.exit_reason, None, "{r:?}");
        }
    }

    #[test]
    fn set_change_and_unset_keep_other_fields() {
        let mut h = Halt { exit_reason: Some("X".into()), halt_seconds: Some(60), ..Default::default() };
        Request { checkpoints: Some(10), before: Some(5000), ..Default::default() }.apply(&mut h);
        assert_eq!((h.checkpoints_left, h.exit_before, h.halt_seconds), (Some(10), Some(5000), Some(60)));
        assert_eq!(h.exit_reason.as_deref(), Some("X"));
        Request { unset_before: true, unset_reason: true, seconds: Some(30), ..Default::default() }.apply(&mut h);
        assert_eq!((h.exit_before, h.exit_reason.as_deref(), h.halt_seconds), (None, None, Some(30)));
        assert_eq!(h.checkpoints_left, Some(10));
    }

    #[test]
    fn contradictions_are_refused() {
        let r = Request { checkpoints: Some(1), unset_checkpoints: true, ..Default::default() };
        assert!(r.check().unwrap_err().to_string().contains("--checkpoints and --unset-checkpoints"));
        let r = Request { remove: true, seconds: Some(3), ..Default::default() };
        assert!(r.check().is_err());
        assert!(Request { remove: true, list: true, ..Default::default() }.check().is_ok());
    }

    #[test]
    fn listing_says_what_holds() {
        let p = Path::new("/p/.scr/halt.scr");
        let lines = describe(p, None, 0, None);
        assert!(lines[0].contains("no halt conditions"));
        let h = Halt { checkpoints_left: Some(0), exit_before: Some(1000), ..Default::default() };
        let text = describe(p, Some(&h), 10, None).join("\n");
        assert!(text.contains("checkpoints left: 0") && text.contains("needs --seconds"), "{text}");
        assert!(text.contains("satisfied now: no checkpoints left"), "{text}");
    }

    #[test]
    fn own_process_is_recognised() {
        let me = std::process::id();
        let start = process_start(me).expect("this process has a start time");
        assert!(process_is(me, start));
        assert!(!process_is(me, start + 1));
        let args = process_cmdline(me).expect("this process has a command line");
        assert_eq!(args.len(), std::env::args().count());
    }
}
