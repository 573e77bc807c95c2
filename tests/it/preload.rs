//! Transparent mode: unmodified MPI programs under `LD_PRELOAD=libscr_preload.so` and real
//! `mpirun` with 4 ranks. Checkpoint bytes must go to cache (not the prefix), datasets must
//! form at the documented boundaries, and a killed run must restart from the last complete
//! checkpoint, every byte verified by the program itself.

use crate::common;

use crate::common::{app, Job, Run};

fn posix() -> String {
    app("ckpt_posix.c", &[]).display().to_string()
}

fn run(job: &Job, args: &[&str]) -> Run {
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    job.run_exe(4, &[posix()], &all)
}

fn transparent() -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0");
    job
}

/// Files under `dir` (recursively), relative, sorted.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    common::walk(dir, &mut |p| out.push(p.strip_prefix(dir).unwrap().display().to_string()));
    out.sort();
    out
}

fn ckpt_files_in_prefix(job: &Job) -> Vec<String> {
    files_under(&job.prefix).into_iter().filter(|f| f.starts_with("ckpt")).collect()
}

#[test]
fn checkpoints_go_to_cache_and_a_killed_run_restarts_from_the_last_one() {
    let job = transparent();
    let r = run(&job, &["--steps", "8", "--crash-at", "7"]);
    assert_ne!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    // the bytes went to cache, never to the prefix
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new(), "{}", r.dump());
    let cached = job.cached_files("ckpt.6/rank_");
    assert_eq!(cached.len(), 4, "{cached:?}\n{}", r.dump());
    // nothing pending (each rank's view for its child processes, and the node board, stay
    // beside the pending area; so does each rank's write journal, emptied at the completion)
    let journal = |f: &String| f.ends_with("/.scr/writes");
    for j in job.cached_files("scr.pending/").iter().filter(|f| journal(f)) {
        assert_eq!(std::fs::metadata(j).map(|m| m.len()).ok(), Some(0), "{j}");
    }
    let pending: Vec<String> = job
        .cached_files("scr.pending/")
        .into_iter()
        .filter(|f| !f.contains("scr.pending/view.") && !f.ends_with("scr.pending/board") && !journal(f))
        .collect();
    assert!(pending.is_empty(), "{pending:?}");
    // the application finds checkpoint 6 through its pointer file and reads it from cache
    let r = run(&job, &["--steps", "10"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.has("DONE"), "{}", r.dump());
}

#[test]
fn temporary_directory_renamed_into_place_with_uneven_files_and_rank0_metadata() {
    let job = transparent();
    let r = run(&job, &["--steps", "8", "--crash-at", "7", "--layout", "tmpdir", "--uneven", "--meta"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new());
    // rank 0 renamed the directory: every rank's cached files follow, before and after restart
    let r = run(&job, &["--steps", "8", "--layout", "tmpdir", "--uneven", "--meta"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.has("DONE"), "{}", r.dump());
}

#[test]
fn temporary_files_renamed_into_place_through_stdio() {
    let job = transparent();
    let r = run(&job, &["--steps", "6", "--crash-at", "5", "--layout", "tmpfile", "--stdio"]);
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new());
    // no temporary name of the application's is left (SCR's own may be, from the kill)
    let tmp: Vec<String> = job.cached_files(".dat.tmp");
    assert!(tmp.is_empty(), "{tmp:?}");
    let r = run(&job, &["--steps", "6", "--layout", "tmpfile", "--stdio"]);
    assert!(r.has("RESTARTED 4 verified"), "{}", r.dump());
}

#[test]
fn flat_files_named_by_a_template_from_the_config_file() {
    let mut job = transparent();
    job.unset("SCR_PRELOAD_PATTERNS");
    std::fs::write(job.prefix.join(".scrconf"), "PRELOAD=ckpt_*_*_*.dat NAME=ckpt.{1}\n").unwrap();
    job.set("SCR_DEBUG", "1");
    let r = run(&job, &["--steps", "4", "--crash-at", "4", "--layout", "flat"]);
    assert!(r.stderr.contains("dataset 1 (ckpt.2, checkpoint) complete"), "{}", r.dump());
    let r = run(&job, &["--steps", "4", "--layout", "flat"]);
    assert!(r.has("RESTARTED 2 verified"), "{}", r.dump());
}

/// The README's setup: only the pattern, every other setting at its default.
fn readme_defaults() -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").unset("SCR_COPY_TYPE");
    job
}

/// The cached dataset directories that hold `needle`.
fn dataset_dirs_with(job: &Job, needle: &str) -> Vec<String> {
    let mut dirs: Vec<String> = job
        .cached_files(needle)
        .iter()
        .filter_map(|f| f.split('/').find(|c| c.starts_with("scr.dataset.")).map(str::to_string))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

#[test]
fn a_file_written_into_a_completed_checkpoint_joins_it() {
    // The shape of a common C program: rank files, a barrier (the checkpoint completes), then
    // rank 0 writes ckpt.N/meta through meta.tmp + rename and the pointer file. `meta` must
    // join ckpt.N (a new version holding the rank files too), not form a second "ckpt.N"
    // that evicts the first: the crash comes after the next sync point, and the relaunch
    // must find every file of ckpt.6, byte for byte.
    for stdio in [false, true] {
        let job = readme_defaults();
        let mut args = vec!["--steps", "10", "--crash-at", "8", "--meta-after"];
        if stdio {
            args.push("--stdio");
        }
        let r = run(&job, &args);
        assert!(r.has("CHECKPOINT 6") && !r.has("CHECKPOINT 8"), "stdio={stdio}: {}", r.dump());
        // one dataset of ckpt.6 in cache: its rank files and meta
        assert_eq!(job.cached_files("ckpt.6/rank_").len(), 4, "stdio={stdio}: {:?}", job.cached_files(""));
        assert_eq!(job.cached_files("ckpt.6/meta").len(), 1, "stdio={stdio}: {:?}", job.cached_files(""));
        assert_eq!(dataset_dirs_with(&job, "ckpt.6").len(), 1, "stdio={stdio}: {:?}", job.cached_files(""));
        // SCR_CACHE_SIZE=1 in transparent mode: the two newest checkpoints stay, older ones leave
        assert_eq!(dataset_dirs_with(&job, "ckpt").len(), 2, "stdio={stdio}: {:?}", job.cached_files(""));
        assert_eq!(job.cached_files("ckpt.4/meta").len(), 1, "stdio={stdio}: {:?}", job.cached_files(""));
        assert!(job.cached_files("ckpt.2").is_empty(), "stdio={stdio}: older checkpoints leave the cache");
        assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new(), "stdio={stdio}");
        let mut args = vec!["--steps", "10", "--meta-after"];
        if stdio {
            args.push("--stdio");
        }
        let r = run(&job, &args);
        assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "stdio={stdio}: {}", r.dump());
        // and the next relaunch too (ckpt.10 was flushed at SCR_FLUSH=10's default... not
        // reached: the newest is ckpt.10 in cache)
        let r = run(&job, &args);
        assert!(r.has("RESTARTED 10 verified"), "stdio={stdio}: {}", r.dump());
    }
}

#[test]
fn a_file_written_after_the_barrier_survives_a_crash_before_the_next_sync_point() {
    // The crash comes at step 7, before any collective after ckpt.6/meta and the pointer were
    // written: meta is still pending. The relaunch adds it to the cached ckpt.6 (a plain file
    // system would have kept it too) instead of leaving a checkpoint the pointer names
    // without it, on every later relaunch.
    let job = readme_defaults();
    let r = run(&job, &["--steps", "10", "--crash-at", "7", "--meta-after"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    assert!(!job.cached_files("scr.pending/0/ckpt.6/meta").is_empty(), "{:?}", job.cached_files(""));
    let r = run(&job, &["--steps", "10", "--meta-after"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
    // files of a checkpoint that never completed (a rank died inside it) are not kept
    let r = run(&job, &["--steps", "14", "--die-in-ckpt", "12"]);
    assert!(r.has("RESTARTED 10 verified") && !r.has("CHECKPOINT 12"), "{}", r.dump());
    assert!(!job.cached_files("scr.pending/0/ckpt.12/").is_empty(), "{:?}", job.cached_files(""));
    let mut job = job;
    job.set("SCR_DEBUG", "1");
    let r = run(&job, &["--steps", "12"]);
    assert!(r.has("RESTARTED 10 verified") && r.has("DONE"), "{}", r.dump());
    assert_eq!(r.stderr.matches("(ckpt.12, checkpoint) complete").count(), 1, "only this run's: {}", r.dump());
    assert!(job.cached_files("scr.pending/0/ckpt.12/").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn a_file_a_killed_run_was_still_writing_never_joins_its_checkpoint() {
    // Rank 0 dies halfway through ckpt.6/meta, written after the barrier that completed
    // ckpt.6. The relaunch keeps ckpt.6 as it was, without the cut-off file (a file closed
    // whole before the kill does join it: the test above).
    let job = readme_defaults();
    let r = run(&job, &["--steps", "10", "--die-in-meta", "6"]);
    assert!(r.stderr.contains("DIE inside the meta of checkpoint 6"), "{}", r.dump());
    assert_eq!(job.cached_files("scr.pending/0/ckpt.6/meta").len(), 1, "{:?}", job.cached_files(""));
    // (5 steps: the relaunch writes no checkpoint of its own)
    let r = run(&job, &["--steps", "5"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(
        r.stderr.contains("ckpt.6/meta is left out of its checkpoint: the killed run was still writing it"),
        "{}",
        r.dump()
    );
    assert!(job.cached_files("ckpt.6/meta").is_empty(), "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("ckpt.6/rank_").len(), 4, "{:?}", job.cached_files(""));
    assert!(job.cached_files("scr.pending/0/").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn a_directory_renamed_into_place_then_given_one_more_file_keeps_all_of_them() {
    let job = readme_defaults();
    let args = ["--layout", "tmpdir", "--uneven", "--meta-after"];
    let r = run(&job, &[&["--steps", "10", "--crash-at", "8"][..], &args].concat());
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(job.cached_files("ckpt.6/meta").len(), 1, "{:?}", job.cached_files(""));
    // --uneven: ranks 1 and 2 wrote 1 and 2 files, ranks 0 and 3 none
    assert_eq!(job.cached_files("ckpt.6/rank_").len(), 3, "{:?}", job.cached_files(""));
    assert!(job.cached_files("ckpt.6.tmp").is_empty(), "{:?}", job.cached_files(".tmp"));
    assert_eq!(dataset_dirs_with(&job, "ckpt.6").len(), 1, "{:?}", job.cached_files(""));
    let r = run(&job, &[&["--steps", "10"][..], &args].concat());
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn files_of_two_checkpoints_pending_on_one_rank_form_two_datasets() {
    // no sync point between ckpt.K's late meta (rank 0) and ckpt.K+2's files: at that barrier
    // rank 0 has pending files of both, the others of ckpt.K+2 only; the capture tells the
    // checkpoints apart (it is no rank's part): ckpt.K (new version) and ckpt.K+2, never ckpt.*
    let mut job = transparent();
    job.set("SCR_DEBUG", "1");
    let r = run(&job, &["--steps", "10", "--crash-at", "9", "--meta-after", "--quiet-steps"]);
    assert!(r.has("CHECKPOINT 8"), "{}", r.dump());
    assert!(!r.stderr.contains("(ckpt.*,"), "{}", r.dump());
    for k in [4, 6, 8] {
        assert!(r.stderr.contains(&format!("(ckpt.{k}, checkpoint) complete")), "ckpt.{k}: {}", r.dump());
    }
    assert_eq!(job.cached_files("ckpt.8/rank_").len(), 4, "{:?}", job.cached_files(""));
    let r = run(&job, &["--steps", "10", "--meta-after", "--quiet-steps"]);
    assert!(r.has("RESTARTED 8 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn xor_rebuilds_a_checkpoint_that_was_given_one_more_file_after_a_lost_node() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_COPY_TYPE", "XOR");
    let r = run(&job, &["--steps", "10", "--crash-at", "8", "--size", "100000", "--meta-after"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    // rank 0's node holds meta; the new version's redundancy covers it (one XOR file per
    // cached checkpoint: ckpt.4 and ckpt.6, the two newest; the earlier version of ckpt.6 left)
    assert_eq!(job.node_files("n0", "ckpt.6/meta").len(), 1, "{:?}", job.node_files("n0", ""));
    assert_eq!(job.node_files("n0", ".xor").len(), 2, "{:?}", job.node_files("n0", ""));
    job.lose_node("n0");
    job.map(&["n4", "n1", "n2", "n3"]);
    let r = run(&job, &["--steps", "10", "--size", "100000", "--meta-after"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt"), "{}", r.dump());
}

#[test]
fn a_failed_checkpoint_never_costs_the_newest_complete_one() {
    // SCR_CACHE_SIZE=1: the newest checkpoint stays in cache until the next one is complete
    let job = readme_defaults();
    let r = run(&job, &["--steps", "4", "--fail-write", "4"]);
    assert!(r.stderr.contains("invalid on every rank"), "{}", r.dump());
    assert!(job.cached_files("ckpt.4").is_empty(), "{:?}", job.cached_files("ckpt.4"));
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), 4, "{:?}", job.cached_files(""));
}

#[test]
fn the_checkpoint_the_pointer_names_survives_a_kill_before_the_pointer_moves() {
    // Default SCR_CACHE_SIZE, SCR_FLUSH=0: checkpoint 6 completes at its barrier, then rank 0
    // dies before it moves `latest` from 4 to 6. A plain file system would still hold ckpt.4,
    // so the restart must serve it through its prefix paths.
    let job = transparent();
    let r = run(&job, &["--steps", "8", "--die-before-pointer", "6"]);
    assert!(r.has("CHECKPOINT 4") && !r.has("CHECKPOINT 6"), "{}", r.dump());
    assert!(r.stderr.contains("DIE before the pointer of checkpoint 6"), "{}", r.dump());
    assert_eq!(std::fs::read_to_string(job.prefix.join("latest")).unwrap().trim(), "4");
    assert_eq!(job.cached_files("ckpt.6/rank_").len(), 4, "{:?}", job.cached_files(""));
    // the same again in the relaunch, where checkpoint 6 is a new version of the cached one
    let r = run(&job, &["--steps", "8", "--die-before-pointer", "6"]);
    assert!(r.has("RESTARTED 4 verified") && !r.has("CHECKPOINT 6"), "{}", r.dump());
    let r = run(&job, &["--steps", "8"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    // the older one leaves at the sync point of the next dataset: the two newest stay
    assert!(job.cached_files("ckpt.4/rank_").is_empty(), "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("ckpt.6/rank_").len(), 4, "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("ckpt.8/rank_").len(), 4, "{:?}", job.cached_files(""));
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new());
}

#[test]
fn a_malformed_pattern_stops_mpi_init_naming_the_entry() {
    let mut job = transparent();
    job.unset("SCR_PRELOAD_PATTERNS");
    std::fs::write(job.prefix.join(".scrconf"), "SCR_FLUSH=0\nPRELOAD=ckpt.[0-9/* TYPE=CHECKPOINT\n").unwrap();
    let r = run(&job, &["--steps", "2"]);
    assert_ne!(r.code, Some(0), "{}", r.dump());
    assert!(r.stderr.contains(".scrconf:2") && r.stderr.contains("unclosed ["), "{}", r.dump());
    assert!(!r.has("DONE"));
}

#[test]
fn a_failed_write_makes_the_dataset_invalid_on_every_rank() {
    let mut job = transparent();
    job.set("SCR_CACHE_SIZE", "2");
    let r = run(&job, &["--steps", "4", "--fail-write", "4"]);
    assert!(r.stderr.contains("invalid on every rank"), "{}", r.dump());
    assert!(job.cached_files("ckpt.4").is_empty(), "{:?}", job.cached_files("ckpt.4"));
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), 4);
}

#[test]
fn flushed_checkpoints_are_indexed_and_restart_after_the_cache_is_lost() {
    let mut job = transparent();
    job.set("SCR_FLUSH", "2");
    let r = run(&job, &["--steps", "8", "--crash-at", "5"]);
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    let ix = job.index();
    let names: Vec<String> =
        ix["datasets"].as_object().unwrap().values().map(|d| d["desc"]["name"].as_str().unwrap().to_string()).collect();
    assert!(names.contains(&"ckpt.4".to_string()), "{ix}");
    assert_eq!(ckpt_files_in_prefix(&job).iter().filter(|f| f.starts_with("ckpt.4/")).count(), 4);
    job.wipe_cache();
    let r = run(&job, &["--steps", "6"]);
    assert!(r.has("RESTARTED 4 verified"), "{}", r.dump());
}

#[test]
fn background_flushes_under_the_preload_reach_the_prefix() {
    // The flush threads' own writes into the prefix must pass the hooks untouched (they are
    // the library's I/O), or the files would be routed back into cache as a new dataset.
    let mut job = transparent();
    job.set("SCR_FLUSH", "2").set("SCR_FLUSH_ASYNC", "1").set("SCR_DEBUG", "1");
    let r = run(&job, &["--steps", "6"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.stderr.contains("background flush started"), "{}", r.dump());
    // SCR's second checkpoint (ckpt.4) is flushed in the background; the newest (ckpt.6) is
    // owed at MPI_Finalize.
    let ix = job.index();
    for k in [4, 6] {
        let e = ix["datasets"].as_object().unwrap().values().find(|d| d["desc"]["name"] == format!("ckpt.{k}"));
        assert!(e.is_some_and(|e| e["complete"] == true), "ckpt.{k}: {ix}");
        assert_eq!(ckpt_files_in_prefix(&job).iter().filter(|f| f.starts_with(&format!("ckpt.{k}/"))).count(), 4);
    }
    job.wipe_cache();
    let r = run(&job, &["--steps", "8"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
}

#[test]
fn a_flushed_directory_renamed_into_place_restarts_from_the_prefix() {
    // tmpdir layout: the files are written in ckpt.<s>.tmp, become a dataset at the next sync
    // point (and are flushed, synchronously or in the background), then rank 0 renames the
    // directory. The prefix's metadata follows the rename, so fetch finds the files.
    for async_flush in ["0", "1"] {
        let mut job = transparent();
        job.set("SCR_FLUSH", "1").set("SCR_FLUSH_ASYNC", async_flush);
        let r = run(&job, &["--steps", "6", "--layout", "tmpdir"]);
        assert_eq!(r.code, Some(0), "async={async_flush}: {}", r.dump());
        let files = ckpt_files_in_prefix(&job);
        assert!(files.iter().all(|f| !f.contains(".tmp")), "async={async_flush}: {files:?}");
        let ix = job.index();
        let names: Vec<&str> =
            ix["datasets"].as_object().unwrap().values().map(|d| d["desc"]["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"ckpt.6"), "async={async_flush}: {ix}");
        job.wipe_cache();
        let r = run(&job, &["--steps", "8", "--layout", "tmpdir"]);
        assert!(r.has("RESTARTED 6 verified"), "async={async_flush}: {}", r.dump());
    }
}

#[test]
fn exit_without_finalize_does_not_hang_and_keeps_complete_datasets() {
    // Open MPI calls a process leaving without MPI_Finalize an abnormal termination and may
    // kill the others: the run must end (not hang) and the completed checkpoint must survive.
    let job = transparent();
    let r = run(&job, &["--steps", "4", "--no-finalize"]);
    assert!(r.has("CHECKPOINT 4") || r.stderr.contains("exiting improperly"), "{}", r.dump());
    assert_ne!(r.code, Some(124), "the run hung: {}", r.dump());
    let r = run(&job, &["--steps", "6"]);
    assert!(r.has("RESTARTED 4 verified"), "{}", r.dump());
}

#[test]
fn xor_restart_after_a_lost_node_rebuilds_the_files() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR");
    let r = run(&job, &["--steps", "8", "--crash-at", "7", "--size", "100000"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    // the two newest checkpoints stay in transparent mode (ckpt.4 and ckpt.6)
    assert_eq!(job.node_files("n2", ".xor").len(), 2, "{:?}", job.node_files("n2", ""));
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new());
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = run(&job, &["--steps", "8", "--size", "100000"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt"), "{}", r.dump());
    assert_eq!(job.node_files("n4", "ckpt.8/rank_2.dat").len(), 1, "the next checkpoint is cached on the spare node");
}

/// Run an application of another language (`exe` + its leading arguments) through a crash
/// after checkpoint 4 and a restart, checking where the bytes were and what it read back.
fn crash_and_restart(exe: Vec<String>, marker: &str) {
    let job = transparent();
    let with = |steps: &str, crash: Option<&str>| {
        let mut args = vec![job.prefix.display().to_string(), steps.to_string()];
        args.extend(crash.map(str::to_string));
        job.run_exe(4, &exe, &args)
    };
    let r = with("6", Some("6"));
    assert!(r.has("CHECKPOINT 4"), "{marker}: {}", r.dump());
    assert!(!r.has("DONE"), "{marker}: {}", r.dump());
    assert_eq!(ckpt_files_in_prefix(&job), Vec::<String>::new(), "{marker}: bytes reached the prefix");
    assert_eq!(job.cached_files("ckpt.4/rank_").len(), 4, "{marker}: {:?}", job.cached_files(""));
    let r = with("8", None);
    assert!(r.has("RESTARTED 4 verified"), "{marker}: {}", r.dump());
    assert!(r.has("DONE"), "{marker}: {}", r.dump());
    // checkpoints 2 and 4 were datasets 1 and 2, 6 and 8 are 3 and 4: reading checkpoint 4
    // back (Fortran: through O_RDWR, as an OPEN without ACTION= does) made no version of it
    let ckpt8 = job.cached_files("/ckpt.8/rank_");
    assert!(ckpt8.len() == 4 && ckpt8.iter().all(|f| f.contains("/scr.dataset.4/")), "{marker}: {ckpt8:?}");
}

#[test]
fn python_mpi4py_application() {
    // mpi4py (Debian's python3-mpi4py, or pip's in scripts/setup.sh's virtual environment when
    // the python3 on PATH is not Debian's; scripts/python.sh picks): libmpi is loaded
    // RTLD_LOCAL by the extension module, and mpi4py calls MPI_Init_thread(MULTIPLE) at import
    // and MPI_Finalize at exit.
    let script = common::repo().join("examples/preload/ckpt_mpi4py.py").display().to_string();
    crash_and_restart(vec![common::python(), script], "mpi4py");
}

#[test]
fn fortran_application() {
    // gfortran + Open MPI's `use mpi`: MPI_INIT reaches PMPI_Init, units close through close(),
    // the directory comes from EXECUTE_COMMAND_LINE (a child process that stays inert).
    crash_and_restart(vec![app("ckpt_fortran.f90", &[]).display().to_string()], "fortran");
}

#[test]
fn cpp_fstream_and_filesystem_application() {
    crash_and_restart(vec![app("ckpt_fstream.cpp", &["-std=c++17"]).display().to_string()], "c++");
}

#[test]
fn hdf5_application_through_the_posix_driver() {
    let h5 = app("ckpt_hdf5.c", &["-I/usr/include/hdf5/serial", "-L/usr/lib/x86_64-linux-gnu/hdf5/serial", "-lhdf5"]);
    crash_and_restart(vec![h5.display().to_string()], "hdf5");
}

#[test]
fn rust_std_application() {
    // std::fs uses open64, statx (found with dlsym), rename; rsmpi initialises MPI itself.
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "preload_rust"])
        .args(if common::target_dir().ends_with("release") { &["--release"][..] } else { &[][..] })
        .current_dir(common::repo())
        .status()
        .unwrap();
    assert!(status.success(), "building examples/preload_rust.rs failed");
    let exe = common::target_dir().join("examples/preload_rust");
    crash_and_restart(vec![exe.display().to_string()], "rust");
}

fn posix_semantics(flags: &[&str]) {
    let job = transparent();
    let exe = app("semantics.c", flags);
    let r = job.run_exe(4, &[exe.display().to_string()], &[job.prefix.display().to_string()]);
    assert!(r.has("SEMANTICS 0"), "{}", r.dump());
    assert_eq!(r.stdout.lines().filter(|l| l.starts_with("OK ")).count(), 24, "{}", r.dump());
    // the forked and spawned children wrote to the prefix directly; nothing else of ckpt.1
    // reached it
    let prefix: Vec<String> = ckpt_files_in_prefix(&job);
    let mut want: Vec<String> =
        (0..4).flat_map(|r| [format!("ckpt.1/child.{r}"), format!("ckpt.1/spawned.{r}")]).collect();
    want.sort();
    assert_eq!(prefix, want, "{}", r.dump());
    // at MPI_Finalize the files formed one dataset
    assert!(!job.cached_files("ckpt.1/a.0").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn posix_semantics_errno_excl_dup_rename_unlink_fork_threads() {
    posix_semantics(&["-pthread"]);
}

#[test]
fn posix_semantics_through_the_large_file_and_fortified_entry_points() {
    let flags = ["-pthread", "-D_FILE_OFFSET_BITS=64", "-D_FORTIFY_SOURCE=2"];
    // the binary really calls the *64 and fortified symbols the preload must catch
    let nm = std::process::Command::new("nm").arg("-uD").arg(app("semantics.c", &flags)).output().unwrap();
    let undefined = String::from_utf8_lossy(&nm.stdout).into_owned();
    for sym in [" open64", " __open64_2", " fopen64", " stat64", " fstat64"] {
        assert!(
            undefined.lines().any(|l| l.trim_end().ends_with(sym) || l.contains(&format!("{sym}@"))),
            "{sym} not used:\n{undefined}"
        );
    }
    posix_semantics(&flags);
}

#[test]
fn processes_that_never_initialise_mpi_are_unchanged() {
    // bash, python3 and mpirun itself under a global LD_PRELOAD, with patterns configured
    let job = transparent();
    let lib = common::preload_lib();
    let p = job.prefix.display().to_string();
    let script = format!(
        "mkdir -p {p}/ckpt.9 && echo x > {p}/ckpt.9/f && cat {p}/ckpt.9/f && mv {p}/ckpt.9/f {p}/ckpt.9/g && ls {p}/ckpt.9 && cat {p}/nothing 2>/dev/null; echo rc=$?"
    );
    let run = |cmd: &mut std::process::Command| {
        cmd.env("SCR_PREFIX", &job.prefix).env("SCR_PRELOAD_PATTERNS", "ckpt.*/**").env("SCR_CACHE_BASE", &job.cache);
        let plain = cmd.output().unwrap();
        let pre = cmd.env("LD_PRELOAD", &lib).output().unwrap();
        (plain, pre)
    };
    let (plain, pre) = run(std::process::Command::new("bash").arg("-c").arg(&script));
    assert_eq!(String::from_utf8_lossy(&pre.stdout), "x\ng\nrc=1\n");
    assert_eq!((plain.stdout, plain.stderr, plain.status.code()), (pre.stdout, pre.stderr, pre.status.code()));
    assert!(job.prefix.join("ckpt.9/g").exists(), "the preloaded bash wrote to the prefix itself");
    std::fs::remove_dir_all(job.prefix.join("ckpt.9")).unwrap();
    let py = format!("import os; os.makedirs('{p}/ckpt.9', exist_ok=True); open('{p}/ckpt.9/h','w').write('y'); print(os.path.getsize('{p}/ckpt.9/h'))");
    let (plain, pre) = run(std::process::Command::new(common::python()).arg("-c").arg(&py));
    assert_eq!((plain.stdout, plain.stderr, plain.status.code()), (pre.stdout.clone(), pre.stderr, pre.status.code()));
    assert_eq!(String::from_utf8_lossy(&pre.stdout), "1\n");
    let (plain, pre) = run(std::process::Command::new("mpirun")
        .args(["-np", "2", "hostname"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1"));
    assert_eq!((plain.stdout, plain.status.code()), (pre.stdout, pre.status.code()));
    assert!(!job.cache.exists() || job.cached_files("ckpt").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn halt_conditions_end_an_unmodified_run_after_its_checkpoint() {
    // The application cannot call SCR_Should_exit: the preload defaults SCR_HALT_EXIT to 1.
    // `scr_halt --checkpoints 1` was given: the run ends cleanly at the sync point after the
    // first checkpoint (the application has written its pointer file by then), keeping it.
    let job = transparent();
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    scr::state::halt::Halt::update(&job.prefix.join(".scr/halt.scr"), |h| h.checkpoints_left = Some(1)).unwrap();
    let r = run(&job, &["--steps", "8"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("CHECKPOINT 2") && !r.has("CHECKPOINT 4") && !r.has("DONE"), "{}", r.dump());
    assert!(r.stderr.contains("halting the run"), "{}", r.dump());
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), 4);
    scr::state::halt::Halt::update(&job.prefix.join(".scr/halt.scr"), |h| *h = Default::default()).unwrap();
    let r = run(&job, &["--steps", "4"]);
    assert!(r.has("RESTARTED 2 verified") && r.has("DONE"), "{}", r.dump());
}

/// `file_attrs` (mode bits, times and a hard link of checkpoint files) under the preload
/// against the same program on a plain directory: the prefix after the flush and the files
/// the relaunch reads after its fetch (the cache wiped) look as they do without SCR.
#[test]
fn mode_times_and_hard_links_survive_the_flush_and_the_fetch() {
    use std::os::unix::fs::MetadataExt;
    let exe = vec![app("file_attrs.c", &[]).display().to_string()];
    let attrs = |r: &Run| {
        let mut v: Vec<String> =
            r.stdout.lines().filter(|l| l.starts_with("ATTRS ") || l.starts_with("BYTES ")).map(String::from).collect();
        v.sort();
        v
    };
    // The same program without SCR.
    let plain = Job::new();
    let dir = plain.root.join("plain");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let w = plain.run_exe(4, &exe, &["write".into(), d.clone()]);
    assert!(w.has("WROTE") && w.code == Some(0), "{}", w.dump());
    let want = plain.run_exe(4, &exe, &["read".into(), d]);
    assert_eq!(want.code, Some(0), "{}", want.dump());
    let want = attrs(&want);
    assert_eq!(want.len(), 8, "{want:?}");
    assert!(want.iter().any(|l| l.starts_with("ATTRS rank=0 a=640 nlink=2 b=1100000000.987654321 c=1")), "{want:?}");

    let mut job = transparent();
    job.set("SCR_FLUSH", "1");
    let p = job.prefix.display().to_string();
    let w = job.run_exe(4, &exe, &["write".into(), p.clone()]);
    assert!(w.has("WROTE") && w.code == Some(0), "{}", w.dump());
    // In the prefix, as in the plain directory.
    for r in 0..4 {
        let md = |leaf: &str| std::fs::metadata(job.prefix.join(format!("ckpt.1/{leaf}.{r}"))).unwrap();
        let pm = |leaf: &str| std::fs::metadata(dir.join(format!("ckpt.1/{leaf}.{r}"))).unwrap();
        let (a, b, c) = (md("a"), md("b"), md("c"));
        assert_eq!(a.mode() & 0o7777, pm("a").mode() & 0o7777, "rank {r}: mode of a");
        assert_eq!(b.mode() & 0o7777, pm("b").mode() & 0o7777, "rank {r}: mode of b");
        assert_eq!((b.mtime(), b.mtime_nsec()), (pm("b").mtime(), pm("b").mtime_nsec()), "rank {r}: times of b");
        assert_eq!((a.ino(), a.nlink()), (c.ino(), 2), "rank {r}: c is a hard link of a in the prefix");
    }
    let r2f = job.meta(&job.prefix.join(".scr/scr.dataset.1/rank2file.scr"));
    assert_eq!(r2f["files"]["0"][2]["link"], "ckpt.1/a.0", "{r2f}");
    // The relaunch fetches ckpt.1 into an empty cache and reads it through the prefix paths.
    job.wipe_cache();
    job.set("SCR_DEBUG", "2");
    let got = job.run_exe(4, &exe, &["read".into(), p]);
    assert_eq!(got.code, Some(0), "{}", got.dump());
    assert!(got.stderr.contains("as a hard link of"), "the fetch linked c: {}", got.dump());
    assert_eq!(attrs(&got), want, "{}", got.dump());
}

/// `SCR_PRELOAD_TIMING=1`: at `MPI_Finalize` rank 0 prints, per hook, the calls over every
/// rank and the time spent in SCR (summed, and the slowest rank's), with rows for the sync
/// points' agreements and completions, the start and `SCR_Finalize`; the run and its restart
/// are the same as without it, and without the setting nothing is printed.
#[test]
fn timing_reports_each_hook_over_every_rank_at_finalize() {
    let mut job = transparent();
    job.set("SCR_PRELOAD_TIMING", "1");
    let r = run(&job, &["--steps", "4", "--every", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let header = "transparent mode timing (SCR_PRELOAD_TIMING=1), 4 rank(s): time in SCR per hook";
    assert_eq!(r.stderr.matches(header).count(), 1, "rank 0 reports once: {}", r.dump());
    // one row per hook: name, calls over every rank, ms summed, ms of the slowest rank (rank n)
    let rows: Vec<(String, u64, f64, f64)> = r
        .stderr
        .lines()
        .skip_while(|l| !l.contains(header))
        .skip(2)
        .take_while(|l| l.starts_with("  ") && l.ends_with(')'))
        .map(|l| {
            let (name_and_numbers, _rank) = l.rsplit_once(" (rank ").unwrap();
            let f: Vec<&str> = name_and_numbers.split_whitespace().collect();
            let n = f.len();
            (f[..n - 3].join(" "), f[n - 3].parse().unwrap(), f[n - 2].parse().unwrap(), f[n - 1].parse().unwrap())
        })
        .collect();
    let row = |name: &str| rows.iter().find(|r| r.0 == name).unwrap_or_else(|| panic!("no row {name}: {}", r.dump()));
    // each rank writes one file per checkpoint: 4 x 4 opens and closes of checkpoint files,
    // each open counted once (its bookkeeping after the real open adds time, not a call), and
    // rank 0's few opens of its pointer file, which is not one
    let opens: u64 = rows.iter().filter(|r| r.0.starts_with("open")).map(|r| r.1).sum();
    assert_eq!(row("close").1, 16, "{rows:?}");
    assert!((16..24).contains(&opens), "{rows:?}");
    // every rank completes each of the 4 checkpoints at a sync point
    let (_, completions, all_ms, slowest_ms) = row("MPI sync point: completion");
    assert!(*completions >= 16, "{rows:?}");
    assert!(*all_ms > 0.0 && slowest_ms <= all_ms, "{rows:?}");
    // each completion follows an agreement (the one in MPI_Finalize's sync point too)
    assert!(row("MPI sync point: agreement").1 >= *completions, "{rows:?}");
    assert!(row("MPI sync point").1 > 0, "{rows:?}");
    assert_eq!(row("MPI_Init: start of transparent mode").1, 4, "{rows:?}");
    assert_eq!(row("MPI_Finalize: SCR_Finalize").1, 4, "{rows:?}");
    // the run is the same: the next one restarts from its last checkpoint, and says nothing
    job.unset("SCR_PRELOAD_TIMING");
    let r = run(&job, &["--steps", "6", "--every", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED 4 verified"), "{}", r.dump());
    assert!(!r.stderr.contains("transparent mode timing"), "{}", r.dump());
}
