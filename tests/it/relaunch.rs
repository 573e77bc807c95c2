//! Relaunches that used to cost checkpoints: the wrong number of processes, a newer
//! checkpoint in the prefix than in cache, and kills during `SCR_Init`'s own work (the
//! rebuild of a lost node, the rebuild of a damaged index) and during the background CRC32 of
//! a SINGLE dataset. Every restart is checked byte for byte by test_api.

use crate::common;
use crate::common::Job;

const SIZE: &str = "100003";

fn restarted(r: &common::Run, step: u32) -> bool {
    r.has(&format!("RESTARTED ckpt.{step} step={step}")) && !r.stdout.contains("RESTART_FAILED")
}

/// Checkpoint with 4 processes, relaunch by mistake with `wrong`, then again with 4: the
/// checkpoints of the 4-process runs are skipped (one message), never marked failed or
/// deleted, and the right relaunch restarts from the newest one.
fn wrong_size_then_right(wrong: usize, flush: &str, lose_cache_before_last: bool) {
    let mut job = Job::new();
    job.set("SCR_FLUSH", flush).set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "3"]);
    assert!(r.has("DONE steps=1..3") && r.code == Some(0), "{}", r.dump());

    let r = job.run_np(wrong, "test_api", &["--size", SIZE, "--steps", "1"]);
    let what = format!("{wrong} processes after 4, SCR_FLUSH={flush}");
    assert!(r.has("NO_RESTART") && r.code == Some(0), "{what}\n{}", r.dump());
    let msg = r.stderr.lines().find(|l| l.contains("written by another number of processes")).unwrap_or_default();
    assert!(msg.contains(&format!("this run has {wrong} processes")), "{what}\n{}", r.dump());
    assert!(msg.contains("ckpt.3") && msg.contains("4 processes"), "{what}: {msg}");
    assert_eq!(r.stderr.matches("written by another number of processes").count(), 1, "one message\n{}", r.dump());
    assert!(!r.stderr.contains("is marked failed") && !r.stderr.contains("deleting dataset"), "{what}\n{}", r.dump());
    if flush != "0" {
        let ix = job.index();
        for (id, e) in ix["datasets"].as_object().unwrap() {
            // the wrong-size run's own ckpt.1 is flushed over rank_0.. of the 4-process ckpt.1:
            // that one (only) is superseded, as its prefix files are overwritten
            let superseded = id == "1" && e["superseded_by"].is_u64();
            assert!(e["failed"] == false || superseded, "{what}: dataset {id} marked failed\n{ix}");
        }
    }

    if lose_cache_before_last {
        job.wipe_cache();
    }
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(restarted(&r, 3), "{what}: the 4-process relaunch\n{}", r.dump());
    // and the wrong-size run's own checkpoint is skipped in turn, not harmed
    assert!(r.stderr.contains(&format!("{wrong} processes")), "{what}\n{}", r.dump());
    let r = job.run_np(wrong, "test_api", &["--size", SIZE, "--steps", "0"]);
    if flush != "0" || !lose_cache_before_last {
        assert!(restarted(&r, 1), "{what}: the {wrong}-process run restarts from its own ckpt.1\n{}", r.dump());
    }
}

#[test]
fn a_relaunch_with_more_processes_harms_no_checkpoint() {
    wrong_size_then_right(6, "0", false);
    wrong_size_then_right(6, "1", false);
    wrong_size_then_right(6, "1", true);
}

#[test]
fn a_relaunch_with_fewer_processes_harms_no_checkpoint() {
    wrong_size_then_right(2, "0", false);
    wrong_size_then_right(2, "1", false);
    wrong_size_then_right(2, "1", true);
}

#[test]
fn a_newer_checkpoint_in_the_prefix_beats_an_older_one_in_cache() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "3").set("SCR_CACHE_SIZE", "2");
    // ckpt.3 and ckpt.6 are flushed; the cache holds ckpt.5 and ckpt.6
    let r = job.run("test_api", &["--size", SIZE, "--steps", "6", "--crash-after", "6"]);
    assert!(r.has("CRASH after ckpt.6"), "{}", r.dump());
    let lost = job.find("ckpt.6/rank_1.ckpt").into_iter().find(|p| p.starts_with(&job.cache)).unwrap();
    std::fs::remove_file(lost).unwrap();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(restarted(&r, 6), "fetched from the prefix, not cached ckpt.5\n{}", r.dump());
    assert!(r.stderr.contains("deleting dataset 6 from cache"), "{}", r.dump());
}

/// The relaunch after a lost node is killed while `SCR_Init` rebuilds the node's part on the
/// spare: the rebuilt rank dies once it has written the first piece of its files (a debug
/// build's `SCRRS_TEST_CRASH=rebuilding`), leaving partial files and no record on the spare.
/// The next relaunch rebuilds again and restarts from every byte.
#[test]
fn killed_while_init_rebuilds_a_lost_node() {
    for scheme in ["XOR", "PARTNER"] {
        let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
        job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0");
        // pieces of SCR_MPI_BUF_SIZE (1 MiB): several per rank
        let size = "6000017";
        let r = job.run("test_api", &["--size", size, "--steps", "2"]);
        assert!(r.has("DONE steps=1..2"), "{scheme}\n{}", r.dump());
        job.lose_node("n2");
        job.map(&["n0", "n1", "n4", "n3"]);
        job.set("SCRRS_TEST_CRASH", "rebuilding@2");
        let r = job.run("test_api", &["--size", size, "--steps", "0"]);
        assert!(r.stderr.contains("test crash at rebuilding"), "{scheme}\n{}", r.dump());
        assert!(!r.stdout.contains("RESTARTED") && r.code != Some(0), "{scheme}\n{}", r.dump());
        // the spare holds the start of the rebuilt file, unrecorded
        let part = job_files_below(&job.node_dir("n4"), "ckpt.2/rank_2.ckpt");
        assert_eq!(part.len(), 1, "{scheme}: {part:?}");
        assert!(std::fs::metadata(&part[0]).unwrap().len() > 0, "{scheme}");
        job.unset("SCRRS_TEST_CRASH");
        let r = job.run("test_api", &["--size", size, "--steps", "0"]);
        assert!(restarted(&r, 2), "{scheme}\n{}", r.dump());
        assert!(r.stderr.contains("rebuilt cached dataset 2 for 1 rank(s)"), "{scheme}\n{}", r.dump());
    }
}

fn job_files_below(dir: &std::path::Path, tail: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    common::walk(dir, &mut |p| {
        if p.display().to_string().ends_with(tail) {
            out.push(p.to_path_buf());
        }
    });
    out
}

#[test]
fn killed_during_the_background_crc_of_a_single_checkpoint() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    // the run dies right after ckpt.2 returns: its background CRC32 is cut short
    let r = job.run("test_api", &["--size", "64000031", "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
    let r = job.run("test_api", &["--size", "64000031", "--steps", "0"]);
    assert!(restarted(&r, 2), "checked by size, restarted\n{}", r.dump());
    // a finished background CRC32 is used: ckpt.4's is known after the 2 s before the crash,
    // so a flipped byte in it is refused and ckpt.3 restarts
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", "1000003", "--steps", "4", "--crash-after", "4", "--crash-delay", "2"]);
    assert!(r.has("CRASH after ckpt.4"), "{}", r.dump());
    flip_a_cached_byte(&job, "ckpt.4/rank_3.ckpt");
    let r = job.run("test_api", &["--size", "1000003", "--steps", "0"]);
    assert!(restarted(&r, 3), "{}", r.dump());
    assert!(r.stderr.contains("CRC32 is"), "{}", r.dump());
}

/// Flip one byte of the cached file whose path ends with `tail`.
fn flip_a_cached_byte(job: &Job, tail: &str) {
    let file = job.find(tail).into_iter().find(|p| p.starts_with(&job.cache)).unwrap();
    let mut b = std::fs::read(&file).unwrap();
    b[777] ^= 1;
    std::fs::write(&file, b).unwrap();
}

/// A small checkpoint (this rank's new files under 512 KiB) gets its CRC32s inside its
/// completion, not from the background worker: a run killed the moment it returns leaves them
/// known, so a flipped byte in its cached data is refused at restart, and the one before
/// restarts.
#[test]
fn a_small_checkpoint_killed_at_once_is_verified_by_its_crc() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", "100003", "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
    let mut crcs = Vec::new();
    common::walk(&job.cache, &mut |p| {
        if p.display().to_string().contains("/.scr/crc.") {
            crcs.push(p.to_path_buf());
        }
    });
    assert!(crcs.is_empty(), "no background CRC32 file for small checkpoints: {crcs:?}");
    flip_a_cached_byte(&job, "ckpt.2/rank_3.ckpt");
    let r = job.run("test_api", &["--size", "100003", "--steps", "0"]);
    assert!(restarted(&r, 1), "{}", r.dump());
    assert!(r.stderr.contains("CRC32 is"), "{}", r.dump());
}

#[test]
fn killed_while_the_index_is_rebuilt() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "3"]);
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    job.wipe_cache();
    let index = job.prefix.join(".scr/index.scr");
    std::fs::write(&index, b"SCRMETA 1 index 9 00000000\nnot json").unwrap();
    // kill as soon as the damaged copy is moved aside (the rebuilt index may or may not be
    // written yet): the next relaunch must find ckpt.3 either way
    let scr = job.prefix.join(".scr");
    let mut bg = job.spawn("test_api", &["--size", SIZE, "--steps", "0"]);
    bg.wait_until("the index rebuild", || {
        std::fs::read_dir(&scr)
            .map(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().starts_with("index.scr.damaged.")))
            .unwrap_or(false)
    });
    bg.kill();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(restarted(&r, 3), "{}", r.dump());
    // the state a kill between moving the damaged copy aside and writing the rebuilt index
    // leaves: no index at all, datasets in the prefix
    std::fs::remove_file(&index).unwrap();
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(restarted(&r, 3), "{}", r.dump());
    assert!(r.stderr.contains("index.scr is missing") && r.stderr.contains("rebuilt"), "{}", r.dump());
}

/// A run killed while it deletes a cached checkpoint (evicted when the next one starts):
/// right after some rank saved its mark, or right after a rank moved its node's files to the
/// trash. The checkpoint is never offered again, even when it becomes the newest one left in
/// cache and its files are still there (or could be rebuilt), and the next run deletes it
/// everywhere, trash included.
#[test]
fn killed_while_a_checkpoint_is_deleted() {
    for (scheme, point) in [("SINGLE", "marked@1"), ("XOR", "marked@2"), ("XOR", "buried@0")] {
        let what = format!("{scheme}, crash at {point}");
        let nodes = ["n0", "n1", "n2", "n3"];
        let mut job = Job::cluster(&nodes);
        job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
        job.set("SCRRS_TEST_CRASH", point);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "3"]);
        assert!(r.has("CHECKPOINT ckpt.2 ok=1") && !r.has("CHECKPOINT ckpt.3 ok=1"), "{what}\n{}", r.dump());
        assert!(r.stderr.contains("test crash at"), "{what}\n{}", r.dump());
        job.unset("SCRRS_TEST_CRASH");
        // ckpt.1 is evicted only once ckpt.3 is complete, so the crash leaves ckpt.3 complete:
        // ckpt.3 and ckpt.2 lose the files of two nodes, beyond repair, so ckpt.1 would be next
        for n in ["n1", "n3"] {
            for ckpt in ["ckpt.3/", "ckpt.2/"] {
                let files = job.node_files(n, ckpt);
                assert!(!files.is_empty(), "{what}: {ckpt}");
                files.iter().for_each(|f| std::fs::remove_file(f).unwrap());
            }
        }
        let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
        assert!(r.has("NO_RESTART") && r.code == Some(0), "{what}: never the deleted ckpt.1\n{}", r.dump());
        assert!(r.stderr.contains("finishing the deletion of cached dataset(s) 1 begun"), "{what}\n{}", r.dump());
        for n in nodes {
            assert_eq!(job.node_files(n, "scr.dataset.1"), Vec::<std::path::PathBuf>::new(), "{what}: {n}");
        }
    }
}

// The same kill points with an unmodified application under the preload (transparent mode):
// SCR_Init runs inside MPI_Init, and the program finds its checkpoint through its own pointer
// file and checks every byte it reads back.

fn posix(job: &Job, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    all
}

fn run_posix(job: &Job, args: &[&str]) -> common::Run {
    job.run_exe(4, &[common::app("ckpt_posix.c", &[]).display().to_string()], &posix(job, args))
}

fn transparent(job: &mut Job, scheme: &str, flush: &str) {
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", flush);
}

#[test]
fn under_the_preload_killed_while_mpi_init_rebuilds_a_lost_node() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    transparent(&mut job, "XOR", "0");
    let size = "6000017";
    let r = run_posix(&job, &["--steps", "8", "--crash-at", "7", "--size", size]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    // the rebuilt rank dies inside MPI_Init once the first piece of its files is written
    job.set("SCRRS_TEST_CRASH", "rebuilding@2");
    let r = run_posix(&job, &["--steps", "8", "--size", size]);
    assert!(r.stderr.contains("test crash at rebuilding"), "{}", r.dump());
    assert!(!r.stdout.contains("RESTARTED") && r.code != Some(0), "{}", r.dump());
    assert_eq!(job_files_below(&job.node_dir("n4"), "ckpt.6/rank_2.dat").len(), 1);
    job.unset("SCRRS_TEST_CRASH");
    let r = run_posix(&job, &["--steps", "8", "--size", size]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt cached dataset"), "{}", r.dump());
}

#[test]
fn under_the_preload_killed_during_the_background_crc_and_after_an_index_rebuild() {
    // SINGLE: the run dies at step 7, right after checkpoint 6 formed at its sync point (its
    // background CRC32 still running): checked by size, restarted
    let mut job = Job::new();
    transparent(&mut job, "SINGLE", "0");
    let r = run_posix(&job, &["--steps", "8", "--crash-at", "7", "--size", "48000011"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let r = run_posix(&job, &["--steps", "8", "--size", "48000011"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());

    // every checkpoint flushed; the index damaged and the cache lost: rebuilt, fetched
    let mut job = Job::new();
    transparent(&mut job, "SINGLE", "1");
    let r = run_posix(&job, &["--steps", "8", "--crash-at", "7", "--size", "100003"]);
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let index = job.prefix.join(".scr/index.scr");
    let mut b = std::fs::read(&index).unwrap();
    let n = b.len() / 2;
    b[n] ^= 0x04;
    std::fs::write(&index, b).unwrap();
    job.wipe_cache();
    let r = run_posix(&job, &["--steps", "8", "--size", "100003"]);
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    assert!(r.stderr.contains("index.scr is damaged") && r.stderr.contains("rebuilt"), "{}", r.dump());
}

/// A run killed while its ranks write a checkpoint (its first node lost with it), relaunched
/// with every rank moved to the next node and a spare: the node that held a rank's unfinished
/// part carries it to the rank's new node and removes it there, file by file, from the names
/// its routes log kept (`SCR_Route_file` no longer rewrites the filemap per file). n1 gets
/// rank 0, whose record was lost with n0, so nothing else would remove rank 1's part there.
/// No file of the cut-short checkpoint is left on any node.
#[test]
fn a_checkpoint_cut_short_leaves_no_file_when_its_ranks_move_to_other_nodes() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "3", "--crash-during", "3"]);
    assert!(r.stdout.contains("CRASH rank 0 during step 3"), "{}", r.dump());
    assert!(!job.node_files("n1", "ckpt.3/rank_").is_empty(), "rank 1 wrote its part of ckpt.3\n{}", r.dump());
    job.lose_node("n0");
    job.map(&["n1", "n2", "n3", "n4"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.code == Some(0), "{}", r.dump());
    for n in ["n1", "n2", "n3", "n4"] {
        let left = job.node_files(n, "ckpt.3/");
        assert!(left.is_empty(), "{n} keeps files of the cut-short checkpoint: {left:?}\n{}", r.dump());
    }
}
