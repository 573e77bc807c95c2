//! Shared files under the preload (transparent mode): an unmodified program whose 4 ranks
//! write one checkpoint file together (through MPI-IO, or plain `pwrite` with
//! `SCR_PRELOAD_SHARED`) next to a file of their own each. The shared file must be written
//! once, in the prefix under its real name, the dataset complete only when every writer
//! succeeded, and the program must restart from it, every byte verified by the program and
//! checked here.

use crate::common::{app, Job, Run, NP};

fn shared_app() -> String {
    app("ckpt_shared.c", &[]).display().to_string()
}

fn run(job: &Job, args: &[&str]) -> Run {
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    job.run_exe(NP, &[shared_app()], &all)
}

fn transparent() -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0");
    job
}

/// What `ckpt_shared.c` writes into `shared.dat` at `step`: each rank's pattern at its offset.
fn shared_bytes(step: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for r in 0..NP as i64 {
        let n = 10000 + 777 * r;
        out.extend((0..n).map(|i| ((i * 7 + step * 11 + r * 37 + (i >> 8)) & 0xff) as u8));
    }
    out
}

/// Files SCR leaves in the prefix under staging names (none once a dataset formed).
fn staging_files(job: &Job) -> Vec<std::path::PathBuf> {
    job.find(".scrshared")
}

#[test]
fn an_mpi_io_shared_file_is_written_once_in_the_prefix_and_restarts() {
    let job = transparent();
    // before the fix, the first checkpoint hung in MPI_File_open (each rank routed the file
    // to its own cache); the harness's timeout turns a hang into a failure
    let args = ["--io", "mpiio", "--meta-after", "--self-file"];
    let r = run(&job, &[&["--steps", "8", "--crash-at", "6"][..], &args].concat());
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    let shared = std::fs::read(job.prefix.join("ckpt.4/shared.dat")).unwrap_or_default();
    assert!(shared == shared_bytes(4), "ckpt.4/shared.dat: {} bytes\n{}", shared.len(), r.dump());
    assert!(staging_files(&job).is_empty(), "{:?}", staging_files(&job));
    // the ranks' own files (also those MPI-IO wrote on MPI_COMM_SELF) went to cache, never to
    // the prefix; meta.txt joined the checkpoint
    assert_eq!(job.cached_files("ckpt.4/rank_").len(), NP, "{:?}", job.cached_files(""));
    assert_eq!(job.cached_files("ckpt.4/self_").len(), NP, "{:?}", job.cached_files(""));
    assert!(!job.prefix.join("ckpt.4/self_0.dat").exists());
    assert_eq!(job.cached_files("ckpt.4/meta.txt").len(), 1, "{:?}", job.cached_files(""));
    assert!(!job.prefix.join("ckpt.4/rank_0.dat").exists() && !job.prefix.join("ckpt.4/meta.txt").exists());
    // no rank kept a piece of the shared file of its own
    assert!(job.cached_files("shared.dat").is_empty(), "{:?}", job.cached_files("shared.dat"));
    let r = run(&job, &[&["--steps", "6"][..], &args].concat());
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(std::fs::read(job.prefix.join("ckpt.6/shared.dat")).unwrap_or_default() == shared_bytes(6));
}

#[test]
fn a_shared_file_a_killed_run_left_under_its_staging_name_is_removed_at_the_next_start() {
    // the last rank dies in the checkpoint of step 6, after shared.dat was written under its
    // staging name and before the barrier that would have completed ckpt.6
    let job = transparent();
    let r = run(&job, &["--steps", "8", "--crash-in", "6", "--io", "mpiio"]);
    assert!(r.has("CHECKPOINT 4") && !r.has("CHECKPOINT 6"), "{}", r.dump());
    let staged = job.prefix.join("ckpt.6/.shared.dat.scrshared");
    assert!(staged.exists(), "{:?}\n{}", staging_files(&job), r.dump());
    // the next run restarts from ckpt.4 and writes nothing (it never reaches step 6): the
    // staging file is gone all the same, and ckpt.4's shared file is untouched
    let r = run(&job, &["--steps", "4", "--io", "mpiio"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(staging_files(&job).is_empty(), "{:?}\n{}", staging_files(&job), r.dump());
    assert!(r.stderr.contains("a shared file a killed run began and never completed"), "{}", r.dump());
    assert!(std::fs::read(job.prefix.join("ckpt.4/shared.dat")).unwrap_or_default() == shared_bytes(4));
}

#[test]
fn a_shared_file_survives_a_lost_node_with_xor_and_is_in_the_summary() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "2");
    let r = run(&job, &["--steps", "6", "--crash-at", "5", "--io", "mpiio"]);
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    assert!(std::fs::read(job.prefix.join("ckpt.4/shared.dat")).unwrap_or_default() == shared_bytes(4));
    // flushed: the summary lists it once, with its writers and size
    let summaries: Vec<serde_json::Value> =
        job.find("summary.scr").iter().map(|p| job.meta(p)).filter(|s| s["desc"]["name"] == "ckpt.4").collect();
    assert_eq!(summaries.len(), 1, "{:?}", job.find("summary.scr"));
    let desc = &summaries[0]["desc"];
    assert_eq!(desc["shared"][0]["rel"], "ckpt.4/shared.dat", "{desc}");
    assert_eq!(desc["shared"][0]["writers"], serde_json::json!([0, 1, 2, 3]), "{desc}");
    assert_eq!(desc["shared"][0]["size"], shared_bytes(4).len(), "{desc}");
    assert_eq!(desc["files"], NP + 1, "{desc}");
    // rank 0's node is lost: XOR rebuilds its own file, the shared file is in the prefix
    assert_eq!(job.node_files("n0", "ckpt.4/rank_0.dat").len(), 1, "{:?}", job.node_files("n0", ""));
    job.lose_node("n0");
    job.map(&["n4", "n1", "n2", "n3"]);
    let r = run(&job, &["--steps", "6", "--io", "mpiio"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt"), "{}", r.dump());
}

#[test]
fn a_pwrite_shared_file_declared_in_scr_preload_shared_restarts() {
    let mut job = transparent();
    job.set("SCR_PRELOAD_SHARED", "ckpt.*/shared.dat");
    let r = run(&job, &["--steps", "6", "--crash-at", "5", "--io", "pwrite"]);
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    assert!(std::fs::read(job.prefix.join("ckpt.4/shared.dat")).unwrap_or_default() == shared_bytes(4));
    assert!(staging_files(&job).is_empty(), "{:?}", staging_files(&job));
    assert!(job.cached_files("shared.dat").is_empty(), "{:?}", job.cached_files("shared.dat"));
    assert_eq!(job.cached_files("ckpt.4/rank_").len(), NP, "{:?}", job.cached_files(""));
    let r = run(&job, &["--steps", "6", "--io", "pwrite"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn an_undeclared_pwrite_shared_file_is_refused_and_the_previous_checkpoint_restarts() {
    let mut job = transparent();
    job.set("SCR_PRELOAD_SHARED", "ckpt.*/shared.dat").set("SCR_CACHE_SIZE", "2");
    let r = run(&job, &["--steps", "2", "--io", "pwrite"]);
    assert!(r.has("CHECKPOINT 2") && r.has("DONE"), "{}", r.dump());
    // the declaration forgotten: checkpoint 4's shared.dat would be 4 pieces, one per cache
    job.unset("SCR_PRELOAD_SHARED");
    let r = run(&job, &["--steps", "4", "--io", "pwrite"]);
    assert!(r.has("RESTARTED 2 verified"), "{}", r.dump());
    let msg = "ckpt.4/shared.dat was written by rank(s) 0, 1, 2, 3 without being declared shared";
    assert!(r.stderr.contains(msg), "{}", r.dump());
    assert!(r.stderr.contains("SCR_PRELOAD_SHARED='ckpt.*/shared.dat'"), "{}", r.dump());
    assert!(r.stderr.contains("invalid on every rank"), "{}", r.dump());
    assert!(job.cached_files("ckpt.4").is_empty(), "{:?}", job.cached_files("ckpt.4"));
    assert!(!job.prefix.join("ckpt.4/shared.dat").exists());
    // checkpoint 2 is intact; once the pointer names it again (the program wrote "4"), it
    // restarts, every byte verified
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), NP, "{:?}", job.cached_files(""));
    assert!(std::fs::read(job.prefix.join("ckpt.2/shared.dat")).unwrap_or_default() == shared_bytes(2));
    std::fs::write(job.prefix.join("latest"), "2\n").unwrap();
    job.set("SCR_PRELOAD_SHARED", "ckpt.*/shared.dat");
    let r = run(&job, &["--steps", "4", "--io", "pwrite"]);
    assert!(r.has("RESTARTED 2 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn one_failing_writer_makes_the_dataset_invalid_on_every_rank() {
    let mut job = transparent();
    job.set("SCR_PRELOAD_SHARED", "ckpt.*/shared.dat").set("SCR_CACHE_SIZE", "2");
    // rank 1's pwrite of its part of checkpoint 4's shared.dat fails (a file size limit)
    let r = run(&job, &["--steps", "4", "--io", "pwrite", "--fail-write", "4"]);
    assert!(r.stderr.contains("rank 1: pwrite"), "{}", r.dump());
    assert!(r.stderr.contains("rank 1: a write or close of one of its files failed"), "{}", r.dump());
    assert!(r.stderr.contains("invalid on every rank"), "{}", r.dump());
    assert!(job.cached_files("ckpt.4").is_empty(), "{:?}", job.cached_files("ckpt.4"));
    assert!(!job.prefix.join("ckpt.4/shared.dat").exists());
    assert!(staging_files(&job).is_empty(), "{:?}", staging_files(&job));
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), NP, "{:?}", job.cached_files(""));
    assert!(std::fs::read(job.prefix.join("ckpt.2/shared.dat")).unwrap_or_default() == shared_bytes(2));
}

#[test]
fn a_malformed_shared_pattern_stops_mpi_init_naming_the_key() {
    let mut job = transparent();
    job.set("SCR_PRELOAD_SHARED", "ckpt.*/shared.dat,ckpt.[0-9/x");
    let r = run(&job, &["--steps", "2", "--io", "pwrite"]);
    assert_ne!(r.code, Some(0), "{}", r.dump());
    assert!(r.stderr.contains("SCR_PRELOAD_SHARED entry ckpt.[0-9/x"), "{}", r.dump());
    assert!(!r.has("DONE"), "{}", r.dump());
}

#[test]
fn a_parallel_hdf5_file_through_the_mpi_io_driver_is_a_shared_file() {
    let dir = "/usr/lib/x86_64-linux-gnu/hdf5/openmpi";
    let rpath = format!("-Wl,-rpath,{dir}");
    let h5 = app("ckpt_phdf5.c", &["-I/usr/include/hdf5/openmpi", "-L", dir, "-lhdf5", &rpath]);
    let mut job = transparent();
    job.set("SCR_FLUSH", "2");
    let prefix = job.prefix.display().to_string();
    let r = job.run_exe(NP, &[h5.display().to_string()], &[prefix.clone(), "6".into(), "5".into()]);
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.4/state.h5").is_file(), "{}", r.dump());
    assert!(staging_files(&job).is_empty(), "{:?}", staging_files(&job));
    assert!(job.cached_files("state.h5").is_empty(), "{:?}", job.cached_files("state.h5"));
    let summary = job.find("summary.scr").iter().map(|p| job.meta(p)).find(|s| s["desc"]["name"] == "ckpt.4");
    let desc = &summary.unwrap_or_else(|| panic!("no summary of ckpt.4: {:?}", job.find("summary.scr")))["desc"];
    assert_eq!(desc["shared"][0]["rel"], "ckpt.4/state.h5", "{desc}");
    assert_eq!(desc["shared"][0]["writers"], serde_json::json!([0, 1, 2, 3]), "{desc}");
    let r = job.run_exe(NP, &[h5.display().to_string()], &[prefix, "6".into()]);
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
}

/// LAMMPS' MPI-IO restart shape (`examples/preload/header_mpiio.c`): rank 0 writes a header
/// with stdio and closes it, then every rank opens the file with `MPI_File_open` and writes
/// its part after the header.
fn header_run(job: &Job, args: &[&str]) -> Run {
    let exe = app("header_mpiio.c", &[]).display().to_string();
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    job.run_exe(NP, &[exe], &all)
}

/// What `header_mpiio.c` writes into `restart.<step>.mpiio`: rank 0's header, then the parts.
fn header_file(step: i64) -> Vec<u8> {
    let mut out: Vec<u8> = (0..1000 + 3 * step)
        .map(|i| if i < 4 { (step >> (8 * i)) as u8 } else { ((i * 13 + step * 5 + (i >> 7)) & 0xff) as u8 })
        .collect();
    out.extend(shared_bytes(step));
    out
}

fn header_then_mpi_io(create: bool) {
    header_then_mpi_io_with(create, None)
}

/// `header_mpiio.c`'s two runs (the first crashes after step 4, the second restarts from it
/// and checkpoints steps 6 and 8), with `SCR_PRELOAD_SHARED` set to `shared` if given.
fn header_then_mpi_io_with(create: bool, shared: Option<&str>) {
    let mut job = Job::new();
    // each step is a dataset of its own (restart.6.mpiio, restart.8.mpiio): two stay cached, so
    // both steps' files are there to check after the second run
    job.preload().set("SCR_PRELOAD_PATTERNS", "restart.*.mpiio").set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    if let Some(pattern) = shared {
        job.set("SCR_PRELOAD_SHARED", pattern);
    }
    let create = if create { &["--create"][..] } else { &[] };
    let r = header_run(&job, &[&["--steps", "6", "--crash-at", "5"][..], create].concat());
    assert!(r.has("CHECKPOINT 4"), "{}", r.dump());
    assert!(!r.stderr.contains("SCR_Route_shared_file"), "{}", r.dump());
    // one file, in the prefix: rank 0's header and every rank's part, byte for byte
    let file = std::fs::read(job.prefix.join("restart.4.mpiio")).unwrap_or_default();
    assert!(
        file == header_file(4),
        "restart.4.mpiio: {} bytes, not {}\n{}",
        file.len(),
        header_file(4).len(),
        r.dump()
    );
    assert!(staging_files(&job).is_empty(), "{:?}", staging_files(&job));
    // rank 0 kept no private copy of the header
    assert!(job.cached_files("restart.4.mpiio").is_empty(), "{:?}", job.cached_files(""));
    let r = header_run(&job, &[&["--steps", "8"][..], create].concat());
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    for step in [6, 8] {
        let file = std::fs::read(job.prefix.join(format!("restart.{step}.mpiio"))).unwrap_or_default();
        assert!(file == header_file(step), "restart.{step}.mpiio: {} bytes\n{}", file.len(), r.dump());
    }
    assert!(job.cached_files("mpiio").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn a_header_rank_0_wrote_then_mpi_io_opened_without_create_is_one_shared_file() {
    // before the fix: MPI_ERR_NO_SUCH_FILE (the header was rank 0's pending file in cache,
    // the staging name in the prefix did not exist) and an abort
    header_then_mpi_io(false);
}

#[test]
fn a_header_declared_shared_rank_0_wrote_then_mpi_io_opened_by_all_does_not_hang() {
    // what our own message advises (SCR_PRELOAD_SHARED): rank 0's fopen of the header declares
    // the file shared on rank 0 only. Before the fix, rank 0 went straight to PMPI_File_open
    // while ranks 1-3 waited in the agreement's allreduce: the job hung (the harness's timeout
    // turns a hang into a failure)
    header_then_mpi_io_with(false, Some("restart.*.mpiio"));
}

#[test]
fn a_header_rank_0_wrote_then_mpi_io_opened_with_create_is_one_shared_file() {
    // before the fix: every dataset discarded with an SCR_Route_shared_file message, the file lost
    header_then_mpi_io(true);
}

#[test]
fn two_ranks_writing_the_same_file_alone_before_mpi_io_fail_the_open_naming_scr_preload_shared() {
    let job = transparent_for("restart.*.mpiio");
    // ranks 0 and 1 each write the header alone: one shared file cannot hold both copies
    let r = header_run(&job, &["--steps", "2", "--header-ranks", "2"]);
    assert!(r.code != Some(0) && !r.has("CHECKPOINT 2"), "{}", r.dump());
    let msg = "ranks 0 and 1 (at least) each wrote";
    assert!(r.stderr.contains(msg) && r.stderr.contains("restart.2.mpiio"), "{}", r.dump());
    assert!(
        r.stderr.contains("SCR_PRELOAD_SHARED=") && r.stderr.contains("MPI_File_open fails on every rank"),
        "{}",
        r.dump()
    );
    assert!(r.stderr.contains("MPI_File_open"), "the program saw the open fail\n{}", r.dump());
    // as the message says: declared shared, both ranks write the one file, which restarts
    let mut job2 = transparent_for("restart.*.mpiio");
    job2.set("SCR_PRELOAD_SHARED", "restart.*.mpiio");
    let r = header_run(&job2, &["--steps", "4", "--crash-at", "3", "--header-ranks", "2"]);
    assert!(r.has("CHECKPOINT 2"), "{}", r.dump());
    let file = std::fs::read(job2.prefix.join("restart.2.mpiio")).unwrap_or_default();
    assert!(file == header_file(2), "restart.2.mpiio: {} bytes\n{}", file.len(), r.dump());
    let r = header_run(&job2, &["--steps", "4", "--header-ranks", "2"]);
    assert!(r.has("RESTARTED 2 verified") && r.has("DONE"), "{}", r.dump());
}

fn transparent_for(pattern: &str) -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", pattern).set("SCR_FLUSH", "0");
    job
}
