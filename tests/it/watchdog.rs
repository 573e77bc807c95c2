//! Hang detection (`SCR_WATCHDOG_TIMEOUT`, `SCR_WATCHDOG_TIMEOUT_PFS`) under real `mpirun`
//! with 4 ranks running `examples/c/test_api.c`: a deliberately hung rank is killed and the
//! checkpoint before the hang restarts the job (by hand and under `scr_run`), a run that
//! finishes (and computes after `SCR_Finalize`) is never killed, the PFS limit applies after
//! an output phase wrote to the prefix, a bad value fails `SCR_Init`, and transparent mode
//! (an unmodified `examples/preload/ckpt_posix.c` under the preload) is watched the same way.
//!
//! No test asserts a duration: a firing watchdog is only required to happen before the
//! harness's `timeout 180` (exit 124), and the limits that must not fire are several times
//! what the work they cover takes.

use crate::common;
use crate::common::{Job, Run};

use std::process::Stdio;

const SIZE: &str = "4096";
/// The start of every watchdog message.
const FIRED: &str = "watchdog: no ";

fn new_job() -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    job
}

/// The run was ended by the watchdog, not by the harness's timeout or a clean exit.
fn assert_killed_by_watchdog(r: &Run, key: &str) {
    assert_ne!(r.code, Some(0), "{}", r.dump());
    assert_ne!(r.code, Some(124), "the harness's timeout ended the run, not the watchdog\n{}", r.dump());
    let line = r.stderr.lines().find(|l| l.contains(FIRED)).unwrap_or_else(|| panic!("no watchdog line\n{}", r.dump()));
    assert!(line.starts_with("SCR ERROR: rank ") && line.contains(" on "), "names rank and host: {line}");
    assert!(line.contains(&format!(" s, {key}):")) && line.contains("SIGKILL"), "{line}");
    assert!(!r.stdout.contains("DONE"), "{}", r.dump());
}

#[test]
fn a_hung_rank_is_killed_and_the_last_checkpoint_restarts_the_job() {
    let mut job = new_job();
    job.set("SCR_WATCHDOG_TIMEOUT", "3").set("SCR_LOG_ENABLE", "1").set("SCR_LOG_SYSLOG_ENABLE", "0");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "6", "--hang-rank", "1", "--hang-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.has("HANG rank 1 after ckpt.2"), "{}", r.dump());
    assert!(!r.stdout.contains("CHECKPOINT ckpt.3"), "{}", r.dump());
    assert_killed_by_watchdog(&r, "SCR_WATCHDOG_TIMEOUT");
    assert!(r.stderr.contains("since the start of dataset 2 (limit 3 s, SCR_WATCHDOG_TIMEOUT)"), "{}", r.dump());
    // The first rank to fire logged it (the launcher may end the others before theirs fire).
    let log = std::fs::read_to_string(job.prefix.join(".scr/log")).unwrap();
    let line = log.lines().find(|l| l.contains(" WATCHDOG ")).unwrap_or_else(|| panic!("no WATCHDOG event:\n{log}"));
    assert!(line.contains(" limit=3 key=SCR_WATCHDOG_TIMEOUT "), "{line}");

    // The checkpoint taken before the hang is intact in cache: the next run continues from it.
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("DONE steps=3..4"), "{}", r.dump());
    assert!(!r.stderr.contains(FIRED), "{}", r.dump());
}

#[test]
fn scr_run_relaunches_a_run_the_watchdog_killed() {
    let mut job = new_job();
    job.set("SCR_WATCHDOG_TIMEOUT", "3").set("SCR_RUNS", "2");
    let prog = common::program("test_api");
    let out = job
        .command("timeout")
        .arg("300")
        .arg(env!("CARGO_BIN_EXE_scr_run"))
        .args(["--delay", "0", "mpirun", "-np", "4"])
        .arg(&prog)
        .args(["--size", SIZE, "--steps", "4", "--hang-rank", "1", "--hang-after", "2"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let dump = format!("exit {:?}\n--- stdout\n{stdout}--- stderr\n{stderr}", out.status.code());
    assert_eq!(out.status.code(), Some(0), "{dump}");
    assert!(stdout.contains("HANG rank 1 after ckpt.2") && stderr.contains(FIRED), "{dump}");
    assert!(stderr.contains("run 1 of 2") && stderr.contains("run 2 of 2"), "{dump}");
    assert!(stdout.contains("RESTARTED ckpt.2 step=2") && stdout.contains("DONE steps=3..6"), "{dump}");
    assert!(stderr.contains("the job completed after 2 run(s)"), "{dump}");
}

#[test]
fn a_run_that_finishes_is_never_killed_even_when_it_computes_after_finalize() {
    let mut job = new_job();
    job.set("SCR_WATCHDOG_TIMEOUT", "5");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "3", "--sleep-after-finalize", "8"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    assert!(r.has("WATCHDOG_THREADS before=4 after=0"), "one thread per rank, joined by SCR_Finalize\n{}", r.dump());
    assert!(!r.stderr.contains(FIRED), "{}", r.dump());

    // Without a limit there is no thread at all.
    let r = new_job().run("test_api", &["--size", SIZE, "--steps", "1", "--sleep-after-finalize", "0"]);
    assert!(r.has("WATCHDOG_THREADS before=0 after=0"), "{}", r.dump());
}

#[test]
fn the_pfs_limit_applies_after_an_output_phase_wrote_to_the_prefix() {
    // Computing 5 s between checkpoints exceeds SCR_WATCHDOG_TIMEOUT=3 but not the PFS limit,
    // which applies because each checkpoint went to the prefix (bypass, or flushed each time).
    for (key, value) in [("SCR_CACHE_BYPASS", "1"), ("SCR_FLUSH", "1")] {
        let mut job = new_job();
        job.set("SCR_WATCHDOG_TIMEOUT", "3").set("SCR_WATCHDOG_TIMEOUT_PFS", "600").set("SCR_DEBUG", "1");
        job.set(key, value);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--compute-secs", "5"]);
        assert_eq!(r.code, Some(0), "{key}={value}\n{}", r.dump());
        assert!(r.has("DONE steps=1..2"), "{}", r.dump());
        assert!(r.stderr.contains("watchdog armed: 3 s (SCR_WATCHDOG_TIMEOUT) from SCR_Init"), "{}", r.dump());
        assert!(r.stderr.contains("watchdog armed: 600 s (SCR_WATCHDOG_TIMEOUT_PFS)"), "{key}={value}\n{}", r.dump());
        assert!(!r.stderr.contains(FIRED), "{}", r.dump());
    }

    // The same computation after checkpoints that stayed in cache is taken for a hang.
    let mut job = new_job();
    job.set("SCR_WATCHDOG_TIMEOUT", "3").set("SCR_WATCHDOG_TIMEOUT_PFS", "600");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--compute-secs", "30"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{}", r.dump());
    assert_killed_by_watchdog(&r, "SCR_WATCHDOG_TIMEOUT");
}

#[test]
fn a_bad_watchdog_value_fails_scr_init_naming_the_key() {
    for key in ["SCR_WATCHDOG_TIMEOUT", "SCR_WATCHDOG_TIMEOUT_PFS"] {
        let mut job = new_job();
        job.set(key, "abc");
        let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
        assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
        assert_ne!(r.code, Some(0), "{}", r.dump());
        assert!(r.stderr.contains(&format!("{key}=abc")), "{}", r.dump());
    }
}

#[test]
fn transparent_mode_kills_a_hung_unmodified_application() {
    // ckpt_posix checkpoints every 2 steps; its files become a dataset at the next allreduce
    // (an SCR_Start_output inside the preload). The last rank hangs at step 6, after the
    // dataset of step 4 formed at step 5.
    let mut job = new_job();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_WATCHDOG_TIMEOUT", "3");
    let exe = [common::app("ckpt_posix.c", &[]).display().to_string()];
    let dir = job.prefix.display().to_string();
    let args = |extra: &[&str]| -> Vec<String> {
        ["--dir", dir.as_str(), "--steps", "8", "--size", SIZE].iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let r = job.run_exe(4, &exe, &args(&["--hang-at", "6"]));
    assert!(r.has("CHECKPOINT 4") && r.stderr.contains("rank 3: HANG at step 6"), "{}", r.dump());
    assert_killed_by_watchdog(&r, "SCR_WATCHDOG_TIMEOUT");
    assert!(r.stderr.contains("since the start of dataset 2 (limit 3 s"), "kicked by the preload\n{}", r.dump());
    // the message names what the user sees, not the call the preload made
    assert!(
        r.stderr.contains("watchdog: no dataset completed at a sync point for")
            && !r.stderr.contains("SCR_Start_output"),
        "{}",
        r.dump()
    );
    let r = job.run_exe(4, &exe, &args(&[]));
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(!r.stderr.contains(FIRED), "{}", r.dump());
}
