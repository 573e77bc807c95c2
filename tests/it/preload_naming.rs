//! Transparent mode with the file layouts of real applications (issue 22): per-rank
//! directories `processor<rank>/<time>/` (OpenFOAM) and flat per-step files
//! `restart.<step>.<rank>` (LAMMPS), restarted by listing directories, under real `mpirun`
//! with 4 ranks. Dataset names, the name syntax of `SCR_PRELOAD_PATTERNS`, the warnings about
//! patterns that cannot work.

use crate::common::{app, Job, Run};

fn layouts() -> String {
    app("ckpt_layouts.c", &[]).display().to_string()
}

fn run(job: &Job, args: &[&str]) -> Run {
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    job.run_exe(4, &[layouts()], &all)
}

fn setup(patterns: &str) -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", patterns).set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
    job
}

/// The names of the datasets that completed, in the order they did.
fn completed(r: &Run) -> Vec<String> {
    r.stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("dataset ")? + 8..];
            let (_, rest) = rest.split_once(" (")?;
            let (name, tail) = rest.split_once(", ")?;
            tail.contains(") complete").then(|| name.to_string())
        })
        .collect()
}

#[test]
fn per_rank_directories_form_one_dataset_per_time_step() {
    let job = setup("processor*/[0-9]*/**");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let names = completed(&r);
    assert_eq!(names, ["processor*/0.2", "processor*/0.4", "processor*/0.6"], "{}", r.dump());
    // every rank's files of time 0.6 are in cache, in one dataset
    assert_eq!(job.cached_files("/0.6/p").len(), 4, "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("/0.6/U").len(), 4, "{:?}", job.cached_files(""));
    assert!(!r.stderr.contains("one dataset per rank") && !r.stderr.contains(" grows: "), "{}", r.dump());
    let r = run(&job, &["--shape", "foam", "--steps", "10"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn a_file_one_rank_writes_after_the_barrier_joins_the_per_rank_directories_checkpoint() {
    // rank 0 writes processor0/<time>/time after the barrier that completed processor*/<time>:
    // it joins that checkpoint (a new version), not a dataset "processor0/<time>" of its own
    // that would evict every other rank's files
    let job = setup("processor*/[0-9]*/**");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "8", "--late"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let names = completed(&r);
    assert!(names.iter().all(|n| n.starts_with("processor*/")), "{names:?}: {}", r.dump());
    assert_eq!(job.cached_files("/0.6/p").len(), 4, "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("processor0/0.6/time").len(), 1, "{:?}", job.cached_files(""));
    let r = run(&job, &["--shape", "foam", "--steps", "10", "--late"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn flat_per_step_files_form_one_dataset_per_step() {
    let job = setup("restart.*.*");
    let r = run(&job, &["--shape", "flat", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(completed(&r), ["restart.2.*", "restart.4.*", "restart.6.*"], "{}", r.dump());
    // one checkpoint in cache (SCR_CACHE_SIZE's default), not one dataset growing each time
    assert_eq!(job.cached_files("restart.6.").len(), 4, "{:?}", job.cached_files(""));
    assert!(job.cached_files("restart.2.").is_empty(), "{:?}", job.cached_files(""));
    assert!(!r.stderr.contains("one dataset per rank") && !r.stderr.contains(" grows: "), "{}", r.dump());
    let r = run(&job, &["--shape", "flat", "--steps", "10"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn the_dataset_name_in_scr_preload_patterns() {
    // `[0-9]*` captures the whole time name (0.6, not 0), and the name template rides in the
    // environment variable
    let job = setup("processor*/[0-9]*/** NAME=time.{2}, !processor*/*/notes.txt");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7", "--note"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(completed(&r), ["time.0.2", "time.0.4", "time.0.6"], "{}", r.dump());
    let r = run(&job, &["--shape", "foam", "--steps", "10"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    let job = setup("restart.[0-9]*.* NAME=step{1}");
    let r = run(&job, &["--shape", "flat", "--steps", "12", "--every", "10"]);
    assert_eq!(completed(&r), ["step10"], "{}", r.dump());
    // a bad entry is refused with the key and the entry named
    let job = setup("restart.*.* NAEM=x");
    let r = run(&job, &["--shape", "flat", "--steps", "2"]);
    assert_ne!(r.code, Some(0), "{}", r.dump());
    assert!(
        r.stderr.contains("SCR_PRELOAD_PATTERNS entry restart.*.* NAEM=x") && r.stderr.contains("NAEM"),
        "{}",
        r.dump()
    );
}

#[test]
fn patterns_that_cannot_work_are_named_once() {
    // a name with the rank's part: one dataset per rank at the same sync point
    let job = setup("processor*/*/** NAME=proc{1}.{2}");
    let r = run(&job, &["--shape", "foam", "--steps", "6"]);
    assert!(r.has("DONE"), "{}", r.dump());
    let warn: Vec<&str> = r.stderr.lines().filter(|l| l.contains("one dataset per rank")).collect();
    assert_eq!(warn.len(), 1, "{}", r.dump());
    assert!(warn[0].contains("processor*/*/**") && warn[0].contains("processor0/0.2/"), "{}", warn[0]);
    assert!(warn[0].contains("NAME="), "the remedy: {}", warn[0]);
    // a name that stays the same while every checkpoint adds files: one dataset growing
    let job = setup("restart.*.* NAME=restart");
    let r = run(&job, &["--shape", "flat", "--steps", "10", "--every", "1"]);
    assert!(r.has("DONE"), "{}", r.dump());
    let warn: Vec<&str> = r.stderr.lines().filter(|l| l.contains("grows")).collect();
    assert_eq!(warn.len(), 1, "{}", r.dump());
    assert!(warn[0].contains("restart.*.*") && warn[0].contains("NAME="), "{}", warn[0]);
}

/// `scr_index --restart` in the job's environment: (exit status, stdout).
fn next_restart(job: &Job, json: bool) -> (i32, String) {
    let mut cmd = job.command(env!("CARGO_BIN_EXE_scr_index"));
    cmd.args(["--restart", "--prefix"]).arg(&job.prefix);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_job_script_sees_what_the_next_run_restarts_from() {
    // nothing yet: no .scr, then a run that never reached a checkpoint
    let mut job = setup("processor*/[0-9]*/**");
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 3, "{out}");
    assert!(out.starts_with("checkpoint: none"), "{out}");
    let r = run(&job, &["--shape", "foam", "--steps", "3", "--crash-at", "1"]);
    assert_ne!(r.code, Some(0), "{}", r.dump());
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 3, "{out}");
    // after a crash: the checkpoint is in cache only, the prefix shows no file of it
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 0, "{out}");
    for line in [
        "checkpoint: processor*/0.6\n",
        "from: cache\n",
        " (ranks 0-3 of 4)\n",
        "files: 8 (32768 bytes)\n",
        "paths: processor0/0.6 processor1/0.6 processor2/0.6 processor3/0.6 ",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    assert!(!out.contains("fallback:"), "{out}");
    let (code, out) = next_restart(&job, true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["checkpoint"]["name"], "processor*/0.6", "{out}");
    assert_eq!(v["checkpoint"]["from"], "cache", "{out}");
    // flushed, then the cache is lost: the prefix copy
    job.set("SCR_FLUSH", "1");
    let r = run(&job, &["--shape", "foam", "--steps", "12", "--crash-at", "11"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("CHECKPOINT 10"), "{}", r.dump());
    job.wipe_cache();
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checkpoint: processor*/1.0\n") && out.contains("from: prefix\n"), "{out}");
    let r = run(&job, &["--shape", "foam", "--steps", "12"]);
    assert!(r.has("RESTARTED 10 verified") && r.has("DONE"), "{}", r.dump());
    // files directly in the prefix (LAMMPS' restart.<step>.<rank>) are named, not "."
    let job = setup("restart.*.*");
    let r = run(&job, &["--shape", "flat", "--steps", "4", "--crash-at", "3"]);
    assert!(r.has("CHECKPOINT 2"), "{}", r.dump());
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("paths: restart.2.0 restart.2.1 restart.2.2 restart.2.3 "), "{out}");
}

#[test]
fn a_job_script_sees_the_checkpoint_scr_current_names() {
    // three checkpoints, all flushed; SCR_CURRENT names the oldest: scr_index --restart names
    // it (not the newest), and the next run's SCR_Init does load it
    let mut job = setup("processor*/[0-9]*/**");
    job.set("SCR_FLUSH", "1");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    job.set("SCR_CURRENT", "processor*/0.2");
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checkpoint: processor*/0.2\n"), "{out}");
    // from the prefix too, once the cache is lost
    job.wipe_cache();
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("checkpoint: processor*/0.2\n") && out.contains("from: prefix\n"), "{out}");
    let r = run(&job, &["--shape", "foam", "--steps", "4"]);
    // (the application itself lists the prefix, where the flushed 0.6 is in place)
    assert!(r.stderr.contains("transparent mode: restarting from processor*/0.2\n") && r.has("DONE"), "{}", r.dump());
    // a name no checkpoint carries: none, saying why
    job.set("SCR_CURRENT", "processor*/9.9");
    let (code, out) = next_restart(&job, false);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("SCR_CURRENT=processor*/9.9"), "{out}");
}

/// The entries of a prefix directory, as a process without the preload sees them, sorted.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn a_directory_another_rank_writes_in_outlives_its_evicted_checkpoint() {
    // processor<r>/restart.1 is the shell of step 1, evicted when step 3 completes at the
    // allreduce inside step 4's write, while every rank has step 4's state open in it: rank
    // 0's own file keeps processor0/restart.1, and each other rank's open file must keep its
    // own, or the plain file written next to step 4's state after the last barrier cannot be
    // created (as on a plain file system it can)
    let job = setup("processor*/restart.*/state");
    let r = run(&job, &["--shape", "rotate", "--every", "1", "--steps", "4"]);
    assert!(r.has("CHECKPOINT 4") && r.has("DONE") && r.code == Some(0), "{}", r.dump());
    for rank in 0..4 {
        let d = job.prefix.join(format!("processor{rank}/restart.1"));
        assert_eq!(entries(&d), ["done"], "{}", r.dump());
    }
    assert_eq!(job.cached_files("/restart.1/state").len(), 4, "{:?}", job.cached_files(""));
    let r = run(&job, &["--shape", "rotate", "--every", "1", "--steps", "6"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn directories_made_for_a_checkpoint_leave_with_it() {
    // evicted checkpoints (SCR_CACHE_SIZE=1, no flush): no empty time directory stays, but one
    // holding a file no pattern takes (rank 0's notes.txt) does, with that file
    let job = setup("processor*/[0-9]*/**, !processor*/*/notes.txt");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7", "--note"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    for rank in 1..4 {
        // what is left is a checkpoint still in cache (0.6, and 0.4 while its eviction waits)
        let left = entries(&job.prefix.join(format!("processor{rank}")));
        assert!(left.contains(&"0.6".to_string()) && !left.contains(&"0.2".to_string()), "{left:?}: {}", r.dump());
        for time in &left {
            let cached = job.cached_files(&format!("processor{rank}/{time}/p"));
            assert_eq!(cached.len(), 1, "{time} is an empty shell: {:?}", job.cached_files(""));
        }
    }
    assert_eq!(entries(&job.prefix.join("processor0")), ["0.2", "0.4", "0.6"]);
    assert_eq!(entries(&job.prefix.join("processor0/0.2")), ["notes.txt"]);
    // the cache is lost and nothing was flushed: the run starts over instead of picking the
    // empty 0.6 and failing, and keeps the directories the application made at its start
    let job = setup("processor*/[0-9]*/**");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    job.wipe_cache();
    let r = run(&job, &["--shape", "foam", "--steps", "1"]);
    assert!(r.has("NO_RESTART") && r.has("DONE"), "{}", r.dump());
    assert_eq!(entries(&job.prefix), [".scr", "processor0", "processor1", "processor2", "processor3"]);
    for rank in 0..4 {
        assert!(entries(&job.prefix.join(format!("processor{rank}"))).is_empty(), "{}", r.dump());
    }
    // a flushed checkpoint keeps its directories (the prefix copy is in them)
    let mut job = setup("processor*/[0-9]*/**");
    job.set("SCR_FLUSH", "3");
    let r = run(&job, &["--shape", "foam", "--steps", "8", "--crash-at", "7"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    job.wipe_cache();
    let r = run(&job, &["--shape", "foam", "--steps", "8"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn time_directories_the_application_purges_go_quietly() {
    // OpenFOAM's purgeWrite 2: each write of a time directory removes the one two writes
    // older, whose dataset the new one's completion evicts at the same sync point
    let job = setup("processor*/[0-9]*/**");
    let r = run(&job, &["--shape", "foam", "--steps", "12", "--purge", "2"]);
    assert!(r.has("DONE"), "{}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR") && !r.stderr.contains("SCR_FLAG"), "{}", r.dump());
    // the newest time directory restarts; the purged ones are gone as on a plain file system
    let r = run(&job, &["--shape", "foam", "--steps", "14", "--purge", "2"]);
    assert!(r.has("RESTARTED 12 verified") && r.has("DONE"), "{}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    for gone in ["0.2", "0.4", "0.6", "0.8"] {
        assert!(!job.prefix.join("processor0").join(gone).exists(), "processor0/{gone}\n{}", r.dump());
    }
}

#[test]
fn a_relaunch_with_scr_cache_purge_starts_over() {
    // a job script starting from the beginning: SCR's copies go too (README, "Starting over")
    let mut job = setup("processor*/[0-9]*/**");
    let r = run(&job, &["--shape", "foam", "--steps", "4"]);
    assert!(r.has("DONE"), "{}", r.dump());
    job.set("SCR_CACHE_PURGE", "1");
    let r = run(&job, &["--shape", "foam", "--steps", "2"]);
    assert!(r.has("NO_RESTART") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn a_dataset_rewritten_in_place_that_adds_files_at_its_end_is_not_reported_as_growing() {
    // Quantum ESPRESSO's out/: each checkpoint rewrites the same file, the last save adds a
    // wave function file per k-point, one per barrier
    let job = setup("out/**");
    let r = run(&job, &["--shape", "qe", "--steps", "6"]);
    assert!(r.has("CHECKPOINT 6") && r.has("DONE"), "{}", r.dump());
    assert!(!r.stderr.contains(" grows: "), "{}", r.dump());
    // restarted: its first writes (the step's file, then the wave functions again) are of
    // the files in cache, rewritten, not added
    let r = run(&job, &["--shape", "qe", "--steps", "8"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
    assert!(!r.stderr.contains(" grows: "), "{}", r.dump());
}
