//! Shared files through the API (`SCR_Route_shared_file`, `examples/c/shared.c`): one file
//! 4 ranks write at disjoint offsets, with `pwrite` and with MPI-IO (`MPI_File_write_at_all`),
//! beside a file of each rank. The bytes are checked in the prefix by the test and at restart
//! by every rank; one writer failing makes the dataset invalid on every rank; a name several
//! ranks route without declaring it, or that some declare and others route as their own, is
//! refused; a shared file of a subset of the ranks (ranks 0 and 2) restarts byte-exactly.

use crate::common::{Job, Run, NP};

const SIZE: usize = 65537;

fn pattern(seed: usize, step: usize, i: usize) -> u8 {
    ((seed * 37 + step * 5 + i * 3 + (i >> 9)) & 0xff) as u8
}

/// Every rank printed `ok` for checkpoint `step`.
fn all_results(r: &Run, step: usize, ok: u8) -> bool {
    (0..NP).all(|rank| r.has(&format!("RESULT rank={rank} ckpt.{step} ok={ok}")))
}

/// The shared file of checkpoint `step` in the prefix holds every rank's block.
fn check_shared(job: &Job, step: usize) {
    let path = job.prefix.join(format!("ckpt.{step}/shared.dat"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes.len(), SIZE * NP, "{}", path.display());
    for (rank, block) in bytes.chunks(SIZE).enumerate() {
        assert!(block.iter().enumerate().all(|(i, b)| *b == pattern(rank, step, i)), "rank {rank}'s block");
    }
    assert!(job.find(".shared.dat.scrshared").is_empty(), "no staging file is left");
    assert!(job.cached_files("shared.dat").is_empty(), "never in cache: {:?}", job.cached_files("shared.dat"));
}

fn restarted(r: &Run, step: usize, read: usize) -> bool {
    let line = format!("RESTARTED ckpt.{step} step={step} writers=4 shared_bytes={} read={read}", SIZE * NP);
    r.has(&line) && r.code == Some(0)
}

#[test]
fn a_shared_file_written_with_pwrite() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("shared", &["--steps", "2"]);
    assert!(all_results(&r, 1, 1) && all_results(&r, 2, 1) && r.code == Some(0), "{}", r.dump());
    check_shared(&job, 2);
    // ckpt.1 left the cache (SCR_CACHE_SIZE=1) without reaching the prefix: its shared file went too
    assert!(!job.prefix.join("ckpt.1/shared.dat").exists());
    // every rank reads the shared file and its own
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 2, 8), "{}", r.dump());
    // restarting from cache, a shared file damaged in the prefix is refused: its CRC32 is
    // checked once for all ranks, and none of them reads it (ckpt.1 is gone: no restart)
    let path = job.prefix.join("ckpt.2/shared.dat");
    let mut b = std::fs::read(&path).unwrap();
    b[3 * SIZE + 5] ^= 0x40;
    std::fs::write(&path, &b).unwrap();
    let r = job.run("shared", &["--steps", "0"]);
    assert!(r.has("NO_RESTART") && r.code == Some(0), "{}", r.dump());
    assert!(r.stderr.contains("shared.dat: CRC32 is"), "{}", r.dump());

    // flushed: in the summary, fetched with the cache lost, and elastic with 2 processes
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("shared", &["--steps", "2"]);
    assert!(all_results(&r, 2, 1), "{}", r.dump());
    check_shared(&job, 1);
    check_shared(&job, 2);
    let summary = job.meta(&job.prefix.join(".scr/scr.dataset.2/summary.scr"));
    assert_eq!(summary["desc"]["shared"][0]["writers"], serde_json::json!([0, 1, 2, 3]), "{summary}");
    assert_eq!(summary["desc"]["files"], 5, "{summary}");
    job.wipe_cache();
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 2, 8), "{}", r.dump());
    job.set("SCR_RESTART_ELASTIC", "1");
    let r = job.run_np(2, "shared", &["--steps", "0"]);
    assert!(restarted(&r, 2, 2 + 4), "{}", r.dump());

    // a damaged shared file is refused at restart: the previous checkpoint is used
    let path = job.prefix.join("ckpt.2/shared.dat");
    let mut b = std::fs::read(&path).unwrap();
    b[SIZE + 3] ^= 1;
    std::fs::write(&path, b).unwrap();
    job.unset("SCR_RESTART_ELASTIC").wipe_cache();
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 1, 8), "{}", r.dump());
    assert!(r.stderr.contains("CRC32"), "{}", r.dump());
}

#[test]
fn one_writer_failing_makes_the_dataset_invalid_everywhere() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("shared", &["--steps", "2", "--fail-rank", "2", "--fail-step", "2"]);
    assert!(all_results(&r, 1, 1) && all_results(&r, 2, 0), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.2/shared.dat").exists(), "never published");
    check_shared(&job, 1);
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 1, 8), "{}", r.dump());
}

#[test]
fn an_undeclared_shared_file_is_refused() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("shared", &["--steps", "1", "--mode", "undeclared"]);
    assert!(all_results(&r, 1, 0), "{}", r.dump());
    let msg = "ckpt.1/shared.dat was routed by rank(s) 0, 1, 2, 3 without being declared shared";
    assert_eq!(r.stderr.matches(msg).count(), 1, "one message\n{}", r.dump());
    assert!(r.stderr.contains("Declare it with SCR_Route_shared_file"), "{}", r.dump());
    let r = job.run("shared", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());

    // SCR 3's way: with SCR_CACHE_BYPASS=1 every route leads to the prefix, one name is one
    // file, the dataset's shared file
    let mut job = Job::new();
    job.set("SCR_CACHE_BYPASS", "1");
    let r = job.run("shared", &["--steps", "1", "--mode", "undeclared"]);
    assert!(all_results(&r, 1, 1) && !r.stderr.contains("declared shared"), "{}", r.dump());
    check_shared(&job, 1);
    // a shared file of the dataset (sized after every writer finished), not a file of each rank
    let summary = job.meta(&job.prefix.join(".scr/scr.dataset.1/summary.scr"));
    assert_eq!(summary["desc"]["shared"][0]["writers"], serde_json::json!([0, 1, 2, 3]), "{summary}");
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 1, 8), "{}", r.dump());
}

#[test]
fn a_shared_file_written_with_mpi_io() {
    // flushed in the background: the rank that publishes the dataset checks the shared file
    let mut job = Job::new();
    job.set("SCR_FLUSH", "2").set("SCR_FLUSH_ASYNC", "1");
    let r = job.run("shared", &["--steps", "3", "--mode", "mpiio"]);
    assert!((1..=3).all(|s| all_results(&r, s, 1)) && r.code == Some(0), "{}", r.dump());
    check_shared(&job, 2);
    check_shared(&job, 3);
    let summary = job.meta(&job.prefix.join(".scr/scr.dataset.2/summary.scr"));
    assert_eq!(summary["desc"]["shared"][0]["size"], SIZE * NP, "{summary}");
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 3, 8), "from cache\n{}", r.dump());
    // ckpt.3 was flushed by SCR_Finalize (SCR_FLUSH owes the newest checkpoint)
    job.wipe_cache();
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 3, 8), "from the prefix\n{}", r.dump());
}

#[test]
fn a_file_declared_shared_by_some_ranks_and_routed_privately_by_others_is_refused() {
    // ckpt.1 written properly; ckpt.2: ranks 0 and 2 declare ckpt.2/shared.dat, ranks 1 and 3
    // route it as their own file, and all write their blocks
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("shared", &["--steps", "1"]);
    assert!(all_results(&r, 1, 1), "{}", r.dump());
    let r = job.run("shared", &["--steps", "1", "--mode", "mixed"]);
    assert!(restarted(&r, 1, 8) && all_results(&r, 2, 0), "{}", r.dump());
    let msg = "ckpt.2/shared.dat was declared shared (SCR_Route_shared_file) by rank(s) 0, 2 but routed with \
               SCR_Route_file by rank(s) 1, 3";
    assert_eq!(r.stderr.matches(msg).count(), 1, "one message naming the file and the ranks\n{}", r.dump());
    // nothing of ckpt.2 is left: no shared file, no staging file, no private copies
    assert!(!job.prefix.join("ckpt.2/shared.dat").exists());
    assert!(job.find(".shared.dat.scrshared").is_empty(), "{:?}", job.find(".shared.dat.scrshared"));
    assert!(job.cached_files("ckpt.2/").is_empty(), "{:?}", job.cached_files("ckpt.2/"));
    // ckpt.1 is intact and restarts byte-exactly
    check_shared(&job, 1);
    let r = job.run("shared", &["--steps", "0"]);
    assert!(restarted(&r, 1, 8), "{}", r.dump());
}

#[test]
fn a_shared_file_of_ranks_0_and_2_restarts_byte_exactly() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("shared", &["--steps", "2", "--even"]);
    assert!(all_results(&r, 1, 1) && all_results(&r, 2, 1) && r.code == Some(0), "{}", r.dump());
    for step in [1, 2] {
        // blocks of ranks 0 and 2, in that order, and nothing else
        let path = job.prefix.join(format!("ckpt.{step}/shared.dat"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(bytes.len(), 2 * SIZE, "{}", path.display());
        for (k, block) in bytes.chunks(SIZE).enumerate() {
            assert!(block.iter().enumerate().all(|(i, b)| *b == pattern(2 * k, step, i)), "rank {}'s block", 2 * k);
        }
        let summary = job.meta(&job.prefix.join(format!(".scr/scr.dataset.{step}/summary.scr")));
        assert_eq!(summary["desc"]["shared"][0]["writers"], serde_json::json!([0, 2]), "{summary}");
        assert_eq!(summary["desc"]["shared"][0]["size"], 2 * SIZE, "{summary}");
    }
    assert!(job.find(".shared.dat.scrshared").is_empty(), "no staging file is left");
    // every rank reads the whole shared file and its own file: from cache, then from the prefix
    let line = format!("RESTARTED ckpt.2 step=2 writers=4 shared_bytes={} read=8", 2 * SIZE);
    let r = job.run("shared", &["--steps", "0", "--even"]);
    assert!(r.has(&line) && r.code == Some(0), "from cache\n{}", r.dump());
    job.wipe_cache();
    let r = job.run("shared", &["--steps", "0", "--even"]);
    assert!(r.has(&line) && r.code == Some(0), "from the prefix\n{}", r.dump());
}
