//! SCR jobs inside a real Slurm cluster (tests/it/common/slurm.rs: 4 simulated nodes, each with
//! its own host name and node-local storage), run the way the user guide writes them: a batch
//! script submitted with `sbatch --no-kill` whose launch line is `scr_srun` (`srun --mpi=pmix`
//! under the hood, Open MPI and Slurm speaking PMIx). Each test checks which checkpoint the
//! application restarted from and, through `examples/c/test_api.c`, every byte of it:
//!
//! * a task killed: `scr_srun` relaunches in the allocation, the restart comes from cache;
//! * a node lost (slurmd gone, storage gone, node DOWN): the relaunch leaves it out, runs on
//!   the spare node and rebuilds the lost ranks from XOR;
//! * `SCR_HALT_SECONDS` against the allocation's end time as Slurm reports it (`--time`): the
//!   job stops before Slurm would kill it, with its last checkpoint flushed;
//! * `scr_halt --immediate` from outside the allocation cancels the job step, not the job, and
//!   the next `scr_srun` of the script does not start;
//! * the scavenge after the last run copies the newest checkpoint, which exists only in the
//!   nodes' caches, to the prefix;
//! * the job-script templates of user guide 2.8.4, as `scripts/install.sh` installs them:
//!   `scr_srun_loop.sh` relaunches after a failed run and the run restarts from its
//!   checkpoint; `scr_srun.sh` scavenges the newest checkpoint after a failed run.
//!
//! A job is held at a known point with test_api's `--pause-before` gate, so outcomes depend on
//! the order of events, not on timing.

use crate::common;
use crate::common::slurm::{Cluster, Finished};
use crate::common::Job;

use std::path::{Path, PathBuf};

const SIZE: &str = "200003";

fn app() -> String {
    common::program("test_api").display().to_string()
}

/// A gate directory for test_api's `--pause-before`.
fn gate(job: &Job) -> PathBuf {
    let g = job.root.join("gate");
    std::fs::create_dir_all(&g).unwrap();
    g
}

/// A batch script line running test_api with `scr_srun`, then reporting its exit status.
fn scr_srun(srun: &str, args: &str) -> String {
    format!("scr_srun --mpi=pmix {srun} {} --size {SIZE} {args}\necho \"scr_srun exit $?\"", app())
}

fn runs_started(f: &Finished) -> usize {
    f.output.lines().filter(|l| l.starts_with("scr_run: run ") && l.contains(" on nodes ")).count()
}

/// The event log's lines of one event.
fn events(job: &Job, event: &str) -> Vec<String> {
    let log = std::fs::read_to_string(job.prefix.join(".scr/log")).unwrap_or_default();
    log.lines().filter(|l| l.split_whitespace().nth(1) == Some(event)).map(str::to_string).collect()
}

/// Files below `dir` whose path contains `needle`.
fn files(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    common::walk(dir, &mut |p| {
        let s = p.display().to_string();
        if s.contains(needle) {
            out.push(s);
        }
    });
    out
}

/// Restart test_api in a new allocation (a new job: nothing in cache) and check it loads
/// checkpoint `step` from the prefix, every byte verified by the program.
fn restarts_from_prefix(cl: &Cluster, job: &Job, step: u32) {
    let r = cl.srun(job, &["--mpi=pmix", "-N", "4", "-n", "4", &app(), "--size", SIZE, "--steps", "1"]);
    assert!(r.has(&format!("RESTARTED ckpt.{step} step={step}")), "{}", r.dump());
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let last = events(job, "RESTART").pop().unwrap_or_default();
    assert!(last.contains(&format!("name=ckpt.{step}")) && last.contains("from=prefix"), "{last}");
}

fn xor_job(cl: &Cluster, flush: &str, runs: &str) -> Job {
    let mut job = cl.job();
    job.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", flush).set("SCR_RUNS", runs).set("SCR_LOG_ENABLE", "1");
    job.set("SCR_LOG_SYSLOG_ENABLE", "0");
    job
}

#[test]
fn a_killed_task_is_relaunched_in_the_allocation_and_restarts_from_cache() {
    let Some(cl) = Cluster::start(4) else { return };
    let job = xor_job(&cl, "0", "2");
    let g = gate(&job);
    let b = cl.sbatch(
        &job,
        &["-N", "4", "--no-kill", "--time=5"],
        &scr_srun("-N 4 -n 4", &format!("--steps 4 --pause-before 3 {}", g.display())),
    );
    b.wait_for(&g.join("paused.3"));
    // Rank 2's process on n3 dies; the others wait at the gate.
    let victim = cl.pids("n3", "test_api");
    assert_eq!(victim.len(), 1, "one task on n3: {victim:?}\n{}", cl.logs());
    // SAFETY: killing the test_api process this test's job started on n3.
    unsafe { libc::kill(victim[0] as i32, libc::SIGKILL) };
    let f = b.finish();
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "{}", f.dump());
    assert!(f.output.contains("scr_srun exit 0"), "{}", f.dump());
    assert!(f.output.contains(&format!("job id {}", f.id)), "the cache belongs to the Slurm job\n{}", f.dump());
    // srun ended the step when the task died, instead of leaving the others waiting for it.
    assert!(f.output.contains("srun --kill-on-bad-exit=1 --mpi=pmix -N 4 -n 4"), "{}", f.dump());
    assert!(f.output.contains("run 1 exited with status"), "{}", f.dump());
    assert!(f.output.contains("run 2 of 2 on nodes n1,n2,n3,n4"), "{}", f.dump());
    assert_eq!(runs_started(&f), 2, "{}", f.dump());
    assert!(f.output.contains("RESTARTED ckpt.2 step=2") && f.output.contains("DONE steps=3..6"), "{}", f.dump());
    // From cache: nothing was ever flushed (SCR_FLUSH=0).
    let restart = events(&job, "RESTART");
    assert!(restart.len() == 1 && restart[0].contains("name=ckpt.2 from=cache"), "{restart:?}");
    assert!(events(&job, "FETCH").is_empty());
    // Each rank ran on its own node: rank 2's newest checkpoint is in n3's cache.
    assert_eq!(files(&cl.node_dir("n3"), "ckpt.6/rank_2.ckpt").len(), 1, "{}", f.dump());
    assert_eq!(job.index()["datasets"]["6"]["complete"], true, "scavenged at the end\n{}", f.dump());
}

#[test]
fn a_lost_node_is_left_out_and_its_ranks_are_rebuilt_on_the_spare() {
    // (the default ring fence: the relaunch without n2 hangs with the tree, see Cluster::start)
    let Some(mut cl) = Cluster::start_ring(4) else { return };
    let job = xor_job(&cl, "0", "2");
    let g = gate(&job);
    // 3 nodes x 2 tasks, and a spare node in the allocation.
    let b = cl.sbatch(
        &job,
        &["-N", "4", "--ntasks-per-node=2", "--no-kill", "--time=5"],
        &scr_srun("-N 3 -n 6", &format!("--steps 4 --pause-before 3 {}", g.display())),
    );
    b.wait_for(&g.join("paused.3"));
    assert_eq!(files(&cl.node_dir("n2"), "ckpt.2/rank_").len(), 2, "ranks 2 and 3 cached ckpt.2 on n2");
    assert!(files(&cl.node_dir("n4"), "ckpt.").is_empty(), "n4 is the spare");
    cl.lose_node("n2");
    let f = b.finish();
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "{}", f.dump());
    assert!(f.output.contains("scr_srun exit 0"), "{}", f.dump());
    assert_eq!(runs_started(&f), 2, "{}", f.dump());
    assert!(f.output.contains("excluded nodes: n2 (down"), "Slurm reported the node down\n{}", f.dump());
    assert!(f.output.contains("run 2 of 2 on nodes n1,n3,n4: srun --kill-on-bad-exit=1 --exclude=n2"), "{}", f.dump());
    assert!(f.output.contains("rebuilt cached dataset 2 for 2 rank(s)"), "{}", f.dump());
    assert!(f.output.contains("RESTARTED ckpt.2 step=2") && f.output.contains("DONE steps=3..6"), "{}", f.dump());
    let restart = events(&job, "RESTART");
    assert!(restart.len() == 1 && restart[0].contains("name=ckpt.2 from=cache"), "{restart:?}");
    // Nothing ran on the lost node again; the spare took two ranks.
    assert!(!cl.node_dir("n2").exists(), "{}", f.dump());
    assert_eq!(files(&cl.node_dir("n4"), "ckpt.6/rank_").len(), 2, "{}", f.dump());
    assert!(f.output.contains("scavenging the cache of node(s) n1,n3,n4"), "{}", f.dump());
    assert_eq!(job.index()["datasets"]["6"]["complete"], true, "{}", f.dump());
}

#[test]
fn halt_seconds_stop_the_job_before_the_allocation_ends_with_its_checkpoint_flushed() {
    let Some(cl) = Cluster::start(4) else { return };
    // Flushes only at the end; the job would run 1000 s, Slurm gives it 2 minutes.
    let mut job = xor_job(&cl, "1000", "3");
    job.set("SCR_HALT_SECONDS", "100");
    let f = cl
        .sbatch(&job, &["-N", "4", "--no-kill", "--time=2"], &scr_srun("-N 4 -n 4", "--steps 1000 --compute-secs 1"))
        .finish();
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "stopped before Slurm's time limit\n{}", f.dump());
    assert!(f.output.contains("scr_srun exit 0"), "{}", f.dump());
    let last: u32 = f
        .output
        .lines()
        .find_map(|l| l.strip_prefix("SHOULD_EXIT at ckpt."))
        .unwrap_or_else(|| panic!("the application was not told to stop\n{}", f.dump()))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(runs_started(&f), 1, "{}", f.dump());
    assert!(
        f.output.contains("not relaunching: halt condition:") && f.output.contains("SCR_HALT_SECONDS is 100"),
        "{}",
        f.dump()
    );
    // The library flushed the last checkpoint before the run ended.
    let flushed = events(&job, "FLUSH_END");
    assert!(flushed.iter().any(|l| l.contains(&format!("name=ckpt.{last} "))), "{flushed:?}\n{}", f.dump());
    let ix = job.index();
    assert_eq!(ix["datasets"][last.to_string()]["complete"], true, "{ix}");
    restarts_from_prefix(&cl, &job, last);
}

#[test]
fn halt_immediate_cancels_the_job_step_not_the_allocation() {
    let Some(cl) = Cluster::start(4) else { return };
    let job = xor_job(&cl, "0", "3");
    let g = gate(&job);
    let first = scr_srun("-N 4 -n 4", &format!("--steps 5 --pause-before 3 {}", g.display()));
    let second = scr_srun("-N 4 -n 4", "--steps 5");
    let b = cl.sbatch(&job, &["-N", "4", "--no-kill", "--time=5"], &format!("{first}\n{second}\necho script done"));
    b.wait_for(&g.join("paused.3"));
    // From the submitting host, not the batch script's node n1.
    let h = job.command(env!("CARGO_BIN_EXE_scr_halt")).arg("--immediate").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&h.stdout), String::from_utf8_lossy(&h.stderr));
    assert_eq!(h.status.code(), Some(0), "{text}");
    assert!(text.contains("by cancelling its job step ") && text.contains("the allocation stays"), "{text}");
    assert!(text.contains("the run has stopped"), "{text}");
    let f = b.finish();
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "the allocation lived on\n{}", f.dump());
    assert!(f.output.contains("script done"), "{}", f.dump());
    assert_eq!(f.output.matches("scr_srun exit 0").count(), 2, "{}", f.dump());
    assert!(f.output.contains("not relaunching: halt condition: exit reason \"JOB_HALTED\""), "{}", f.dump());
    assert!(f.output.contains("not starting the job: halt condition"), "the second scr_srun\n{}", f.dump());
    assert_eq!(runs_started(&f), 1, "{}", f.dump());
    assert!(!f.output.contains("CHECKPOINT ckpt.3"), "{}", f.dump());
    // The newest checkpoint was scavenged from the caches; the next job restarts from it.
    assert_eq!(job.index()["datasets"]["2"]["complete"], true, "{}", f.dump());
    let u = job.command(env!("CARGO_BIN_EXE_scr_halt")).arg("--unset-reason").output().unwrap();
    assert!(u.status.success());
    restarts_from_prefix(&cl, &job, 2);
}

/// test_api's byte at offset `i` of rank `r`'s file of checkpoint `step`.
fn pattern(r: usize, step: usize, i: usize) -> u8 {
    ((r * 31 + step * 17 + i * 7 + (i >> 12)) & 0xff) as u8
}

#[test]
fn the_scavenge_after_the_last_run_copies_the_newest_cached_checkpoint() {
    let Some(cl) = Cluster::start(4) else { return };
    // Every 2nd checkpoint goes to the prefix; the run fails after ckpt.3, which only the
    // caches hold, and SCR_RUNS=1 allows no relaunch.
    let job = xor_job(&cl, "2", "1");
    let f = cl
        .sbatch(
            &job,
            &["-N", "4", "--no-kill", "--time=5"],
            &scr_srun("-N 4 -n 4", "--steps 3 --crash-after 3 --crash-rank 1"),
        )
        .finish();
    assert_eq!(f.state, "COMPLETED", "{}", f.dump());
    assert!(
        f.output.contains("CRASH after ckpt.3") && f.output.contains("not relaunching: SCR_RUNS=1"),
        "{}",
        f.dump()
    );
    assert!(f.output.contains("scavenging the cache of node(s) n1,n2,n3,n4"), "{}", f.dump());
    assert!(f.output.contains("dataset 3 (ckpt.3) is complete in the prefix"), "{}", f.dump());
    assert!(f.output.contains("scr_srun exit 1"), "a failed run is reported\n{}", f.dump());
    let flushed = events(&job, "FLUSH_END");
    assert!(flushed.iter().all(|l| !l.contains("name=ckpt.3 ")), "the library never flushed ckpt.3: {flushed:?}");
    let ix = job.index();
    assert_eq!(ix["datasets"]["3"]["complete"], true, "{ix}");
    let size: usize = SIZE.parse().unwrap();
    for r in 0..4 {
        let data = std::fs::read(job.prefix.join(format!("ckpt.3/rank_{r}.ckpt"))).unwrap();
        assert_eq!(data.len(), size);
        assert!(data.iter().enumerate().all(|(i, b)| *b == pattern(r, 3, i)), "rank {r}'s bytes differ");
    }
    restarts_from_prefix(&cl, &job, 3);
}

#[test]
fn the_srun_loop_template_relaunches_a_failed_run_which_restarts_from_its_checkpoint() {
    let Some(cl) = Cluster::start(4) else { return };
    // Nothing is flushed during the runs (SCR_FLUSH=0): the restart can only come from cache.
    let mut job = xor_job(&cl, "0", "3");
    job.set("SCR_LOOP_SLEEP", "1");
    let tools = job.root.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let script = common::template(&tools, "scr_srun_loop.sh");
    // The first run: rank 1 dies after checkpoint 3, the others wait for it in step 4.
    let f = cl
        .sbatch(
            &job,
            &["-N", "4", "--no-kill", "--time=5"],
            &format!(
                "{} --mpi=pmix -N 4 -n 4 {} --size {SIZE} --steps 4 --crash-after 3 --crash-rank 1\n\
                 echo \"loop exit $?\"",
                script.display(),
                app()
            ),
        )
        .finish();
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "{}", f.dump());
    assert!(f.output.contains("CRASH after ckpt.3"), "{}", f.dump());
    // srun ended the failed step (--kill-on-bad-exit=1) instead of leaving the ranks waiting
    // until the allocation's end, and the script launched again
    assert!(f.output.contains("scr_srun_loop.sh: launch 2"), "{}", f.dump());
    assert!(!f.output.contains("scr_srun_loop.sh: launch 3"), "{}", f.dump());
    assert!(f.output.contains("RESTARTED ckpt.3 step=3") && f.output.contains("DONE steps=4..7"), "{}", f.dump());
    // scr_should_exit stopped the loop because the application finished
    assert!(f.output.contains("SCR_FINALIZE_CALLED"), "{}", f.dump());
    assert!(f.output.contains("loop exit 0"), "{}", f.dump());
    let restart = events(&job, "RESTART");
    assert!(restart.len() == 1 && restart[0].contains("name=ckpt.3 from=cache"), "{restart:?}");
    // scr_postrun copied the newest checkpoint, only in the caches, to the prefix: every byte
    assert!(f.output.contains("dataset 7 (ckpt.7) is complete in the prefix"), "{}", f.dump());
    let size: usize = SIZE.parse().unwrap();
    for r in 0..4 {
        let data = std::fs::read(job.prefix.join(format!("ckpt.7/rank_{r}.ckpt"))).unwrap();
        assert_eq!(data.len(), size);
        assert!(data.iter().enumerate().all(|(i, b)| *b == pattern(r, 7, i)), "rank {r}'s bytes differ");
    }
    restarts_from_prefix(&cl, &job, 7);
}

#[test]
fn the_srun_template_scavenges_the_newest_checkpoint_after_a_failed_run() {
    let Some(cl) = Cluster::start(4) else { return };
    let job = xor_job(&cl, "0", "1");
    let tools = job.root.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let script = common::template(&tools, "scr_srun.sh");
    // rank 1 dies after checkpoint 3, which only the caches hold; the others wait for it
    let f = cl
        .sbatch(
            &job,
            &["-N", "4", "--no-kill", "--time=5"],
            &format!(
                "{} --mpi=pmix -N 4 -n 4 {} --size {SIZE} --steps 4 --crash-after 3 --crash-rank 1\n\
                 echo \"srun.sh exit $?\"",
                script.display(),
                app()
            ),
        )
        .finish();
    // srun ended the step (--kill-on-bad-exit=1), so scr_postrun ran before the time limit
    assert_eq!((f.state.as_str(), f.code), ("COMPLETED", Some(0)), "{}", f.dump());
    assert!(
        f.output.contains("CRASH after ckpt.3")
            && f.output.contains("srun.sh exit ")
            && !f.output.contains("srun.sh exit 0"),
        "{}",
        f.dump()
    );
    assert!(f.output.contains("dataset 3 (ckpt.3) is complete in the prefix"), "{}", f.dump());
    assert!(events(&job, "FLUSH_END").is_empty(), "SCR_FLUSH=0: only the scavenge wrote to the prefix");
    let size: usize = SIZE.parse().unwrap();
    for r in 0..4 {
        let data = std::fs::read(job.prefix.join(format!("ckpt.3/rank_{r}.ckpt"))).unwrap();
        assert_eq!(data.len(), size);
        assert!(data.iter().enumerate().all(|(i, b)| *b == pattern(r, 3, i)), "rank {r}'s bytes differ");
    }
    restarts_from_prefix(&cl, &job, 3);
}
