//! One run at a time on a prefix (`<prefix>/.scr/job.lock`, held by rank 0 from `SCR_Init` to
//! `SCR_Finalize`): a second job started on the same prefix while a run holds it is refused
//! with a message naming the holder, and changes nothing; a killed run's lock is taken over
//! by the next run; runs one after the other (other job ids too) go on as before. All under
//! real `mpirun` with 4 ranks on the simulated cluster; test_api checks every byte it reads.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::common::{Job, Spawned};

const SIZE: &str = "100003";

fn job(id: &str) -> Job {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_COPY_TYPE", "PARTNER").set("SCR_FLUSH", "1").set("SCR_JOB_ID", id);
    job
}

fn lock_file(job: &Job) -> PathBuf {
    job.prefix.join(".scr/job.lock")
}

/// Whether some process holds a lock on `path` (asked without taking it).
fn locked(path: &Path) -> bool {
    let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(path) else { return false };
    // SAFETY: a zeroed flock asking about a whole-file write lock; F_OFD_GETLK fills it in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) }, 0);
    fl.l_type != libc::F_UNLCK as libc::c_short
}

/// Every file under `dirs` with its bytes.
fn contents(dirs: &[&Path]) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for d in dirs {
        common::walk(d, &mut |p| {
            out.insert(p.to_path_buf(), std::fs::read(p).unwrap());
        });
    }
    out
}

/// Job A (id `jobA`): checkpoint 1 written, flushed and protected, then paused before step 2.
fn paused_a(job: &mut Job, gate: &Path) -> Spawned {
    std::fs::create_dir_all(gate).unwrap();
    job.set("SCR_JOB_ID", "jobA");
    let gate_arg = gate.display().to_string();
    let mut a = job.spawn("test_api", &["--size", SIZE, "--steps", "2", "--pause-before", "2", &gate_arg]);
    a.wait_for(&gate.join("paused.2"));
    assert!(locked(&lock_file(job)), "job A holds the prefix's lock");
    a
}

fn refused(r: &common::Run, prefix: &Path, who: &str) {
    let want = format!("prefix {} is in use by {who} (job jobA on host n0, pid ", prefix.display());
    assert!(r.stderr.contains(&want), "expected {want:?} in:\n{}", r.dump());
    assert!(r.stderr.contains(" UTC), which holds ") && r.stderr.contains(".scr/job.lock"), "{}", r.dump());
    assert_ne!(r.code, Some(0), "{}", r.dump());
}

#[test]
fn a_second_job_on_the_prefix_is_refused_and_changes_nothing() {
    let mut job = job("jobA");
    let gate = job.root.join("gate");
    let a = paused_a(&mut job, &gate);
    let nodes = job.root.join("nodes");
    let before = contents(&[&job.prefix, &nodes]);
    assert!(before.keys().any(|p| p.ends_with(".scr/index.scr")), "ckpt.1 is in the index: {:?}", before.keys());
    // in each node's cache and in the prefix
    assert_eq!(before.keys().filter(|p| p.display().to_string().contains("ckpt.1/rank_")).count(), 8);

    // Another job id on the same prefix.
    job.set("SCR_JOB_ID", "jobB");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED") && !r.has("NO_RESTART"), "{}", r.dump());
    refused(&r, &job.prefix, "another job");
    // The same job id (two runs of one job at once).
    job.set("SCR_JOB_ID", "jobA");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    refused(&r, &job.prefix, "another run of this job");
    // An unmodified program in transparent mode: MPI_Init fails with the message.
    let mut t = Job::cluster(&["n0", "n1", "n2", "n3"]);
    t.preload()
        .set("SCR_PREFIX", &job.prefix.display().to_string())
        .set("SCR_JOB_ID", "jobC")
        .set("SCR_PRELOAD_PATTERNS", "ckpt.*/**");
    let app = common::app("ckpt_posix.c", &[]).display().to_string();
    let r = t.run_exe(4, &[app], &["--dir".into(), job.prefix.display().to_string(), "--steps".into(), "2".into()]);
    assert!(r.stderr.contains("transparent mode cannot start"), "{}", r.dump());
    refused(&r, &job.prefix, "another job");
    assert!(!r.has("NO_RESTART") && !r.has("DONE"), "{}", r.dump());

    // Nothing of job A changed: its checkpoint in cache and prefix, its index, its lock.
    let after = contents(&[&job.prefix, &nodes]);
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(changed.is_empty(), "the refused runs changed {changed:?}");

    // Job A goes on, and a later run of it restarts from its checkpoint.
    std::fs::write(gate.join("resume.2"), "go").unwrap();
    let r = a.finish();
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.code == Some(0), "{}", r.dump());
    assert!(!locked(&lock_file(&job)), "released at SCR_Finalize");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.code == Some(0), "{}", r.dump());
    // Another job after it (a new allocation) restarts from its last checkpoint, as before.
    job.set("SCR_JOB_ID", "jobB");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.3 step=3") && r.code == Some(0), "{}", r.dump());
}

#[test]
fn a_killed_run_leaves_no_lock_behind() {
    let mut job = job("jobA");
    let gate = job.root.join("gate");
    let a = paused_a(&mut job, &gate);
    let record = std::fs::read_to_string(lock_file(&job)).unwrap();
    let pid: u32 = record
        .split("\"pid\":")
        .nth(1)
        .and_then(|s| s.trim().split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the record names the holder's pid: {record}"));
    // kill -9 of the whole run; its rank 0 is gone a moment later
    a.kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(std::time::Instant::now() < deadline, "rank 0 (pid {pid}) never ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The record is still there, the lock is not: the next run (another job) takes it over.
    assert!(lock_file(&job).exists() && !locked(&lock_file(&job)));
    job.set("SCR_JOB_ID", "jobB");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.1 step=1") && r.code == Some(0), "{}", r.dump());
    assert!(!r.stderr.contains("in use"), "{}", r.dump());
    // and so does a relaunch of the killed job
    job.set("SCR_JOB_ID", "jobA");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.code == Some(0), "{}", r.dump());
}

#[test]
fn the_lock_is_released_at_scr_finalize() {
    // Held while the run works; released by SCR_Finalize although the process lives on
    // (the application's own clean-up): another job may use the prefix already.
    let job = job("jobA");
    let gate = job.root.join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let gate_arg = gate.display().to_string();
    let mut a = job.spawn(
        "test_api",
        &["--size", SIZE, "--steps", "2", "--pause-before", "2", &gate_arg, "--sleep-after-finalize", "600"],
    );
    a.wait_for(&gate.join("paused.2"));
    let lock = lock_file(&job);
    assert!(locked(&lock), "job A holds the prefix's lock");
    std::fs::write(gate.join("resume.2"), "go").unwrap();
    a.wait_until("SCR_Finalize releases the lock", || !locked(&lock));
    let mut b = job;
    b.set("SCR_JOB_ID", "jobB");
    let r = b.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.code == Some(0), "{}", r.dump());
    a.kill();
}
