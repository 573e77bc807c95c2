//! Elastic restart (`SCR_RESTART_ELASTIC=1`): a checkpoint of 4 processes (one data file each
//! plus rank 0's header, `examples/c/elastic.c`) restarted with 2, 4 and 6 processes, each rank
//! reading the files it needs by name and checking every byte: from cache (published to the
//! prefix in `SCR_Init`), from the prefix after the cache is lost, and after a lost node with
//! XOR on the simulated cluster. Without the setting nothing changes (`tests/it/relaunch.rs`).

use crate::common::{Job, Run};

const ELASTIC: &str = "SCR_RESTART_ELASTIC";

/// `elastic` restarted checkpoint `step` of 4 writers with `np` processes: every data file read
/// once, the header by every rank, in `attempts` attempts.
fn restarted(r: &Run, step: u32, np: usize, attempts: usize) -> bool {
    let line = format!("RESTARTED ckpt.{step} step={step} writers=4 files=5 data_read=4 header_read={np}");
    r.has(&line) && r.stdout.matches("ATTEMPT ").count() == attempts && r.code == Some(0)
}

fn checkpoint_with_4(job: &Job) {
    let r = job.run("elastic", &["--steps", "3"]);
    assert!(r.has("NO_RESTART") && r.has("CHECKPOINT ckpt.3 ok=1") && r.code == Some(0), "{}", r.dump());
}

#[test]
fn from_cache_with_2_4_and_6_processes() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    checkpoint_with_4(&job);
    let snap = job.snapshot();

    // without the setting: skipped with one message, as before
    let r = job.run_np(2, "elastic", &["--steps", "0"]);
    assert!(r.has("NO_RESTART") && r.stderr.contains("written by another number of processes"), "{}", r.dump());

    job.set(ELASTIC, "1");
    for np in [2, 6] {
        job.restore(&snap);
        let r = job.run_np(np, "elastic", &["--steps", "0"]);
        assert!(restarted(&r, 3, np, 1), "{np} processes\n{}", r.dump());
        assert!(r.stderr.contains("copied cached checkpoint ckpt.3 (4 processes) to the prefix"), "{}", r.dump());
        assert!(!r.stderr.contains("not part of this run"), "{}", r.dump());
        let ix = job.index();
        assert_eq!(ix["current"], "ckpt.3", "{ix}");
        // the cached parts are untouched: a run of 4 restarts from cache
        assert_eq!(job.cached_files("ckpt.3/rank_").len(), 4, "{:?}", job.cached_files(""));
        let r = job.run("elastic", &["--steps", "0"]);
        assert!(restarted(&r, 3, 4, 1), "{}", r.dump());
    }
    job.restore(&snap);
    let r = job.run("elastic", &["--steps", "0"]);
    assert!(restarted(&r, 3, 4, 1) && !r.stderr.contains("copied cached"), "{}", r.dump());

    // an elastic run goes on with checkpoints of its own size, which its next run takes
    let r = job.run_np(2, "elastic", &["--steps", "2"]);
    assert!(restarted(&r, 3, 2, 1) && r.has("CHECKPOINT ckpt.5 ok=1"), "{}", r.dump());
    let r = job.run_np(2, "elastic", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.5 step=5 writers=2 files=3 data_read=2 header_read=2"), "{}", r.dump());
}

#[test]
fn from_the_prefix_with_2_4_and_6_processes() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set(ELASTIC, "1");
    checkpoint_with_4(&job);
    job.wipe_cache();
    for np in [2, 4, 6] {
        let r = job.run_np(np, "elastic", &["--steps", "0"]);
        assert!(restarted(&r, 3, np, 1), "{np} processes\n{}", r.dump());
    }

    // a corrupt byte in a prefix file: refused by the rank that reads it; the checkpoint is
    // not marked failed (a run of 4 may still have it in cache); the next one is restarted
    let file = job.prefix.join("ckpt.3/rank_1.dat");
    let mut b = std::fs::read(&file).unwrap();
    b[5000] ^= 4;
    std::fs::write(&file, b).unwrap();
    let r = job.run_np(2, "elastic", &["--steps", "0"]);
    assert!(restarted(&r, 2, 2, 2), "{}", r.dump());
    assert!(r.stderr.contains("CRC32") && r.stderr.contains("it is not marked failed"), "{}", r.dump());
    let ix = job.index();
    for (id, e) in ix["datasets"].as_object().unwrap() {
        assert_eq!(e["failed"], false, "dataset {id} marked failed\n{ix}");
    }
}

#[test]
fn after_a_lost_node_with_xor() {
    // 2 ranks per node: XOR sets span both nodes, and losing one leaves one member per set
    let mut job = Job::cluster(&["a", "a", "b", "b"]);
    job.set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR").set(ELASTIC, "1");
    checkpoint_with_4(&job);
    let snap = job.snapshot();
    let maps: [&[&str]; 3] = [&["a", "c"], &["a", "a", "c", "c"], &["a", "c", "d", "e", "f", "g"]];
    for map in maps {
        job.restore(&snap);
        job.lose_node("b");
        job.map(map);
        let np = map.len();
        let r = job.run_np(np, "elastic", &["--steps", "0"]);
        if np == 4 {
            // this run's size: rebuilt in cache; ranks 2 and 3 on node c ask for rank 0's header
            assert!(restarted(&r, 3, 4, 2), "{}", r.dump());
            assert!(r.stderr.contains("rebuilt cached dataset"), "{}", r.dump());
        } else {
            assert!(restarted(&r, 3, np, 1), "{np} processes\n{}", r.dump());
            assert!(r.stderr.contains("rebuilt the files of rank(s) [2, 3]"), "{}", r.dump());
        }
        job.map(&["a", "a", "b", "b"]);
    }
}

#[test]
fn a_checkpoint_this_run_cannot_rebuild_is_left_for_its_own_size() {
    // XOR over 4 nodes tolerates one lost member; a run of 2 on [a, e] reaches only a's part
    let mut job = Job::cluster(&["a", "b", "c", "d"]);
    job.set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "XOR").set(ELASTIC, "1");
    checkpoint_with_4(&job);
    job.map(&["a", "e"]);
    let r = job.run_np(2, "elastic", &["--steps", "0"]);
    assert!(r.has("NO_RESTART") && r.code == Some(0), "{}", r.dump());
    assert!(
        r.stderr.contains("cannot be restarted with 2 processes") && r.stderr.contains("stays in cache"),
        "{}",
        r.dump()
    );
    // nothing was harmed: the run of 4 restarts from its caches (rank 0's header copied over MPI)
    job.map(&["a", "b", "c", "d"]);
    let r = job.run("elastic", &["--steps", "0"]);
    assert!(restarted(&r, 3, 4, 2), "{}", r.dump());
}
