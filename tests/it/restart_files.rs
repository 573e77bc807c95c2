//! Files of other ranks at restart: a header rank 0 wrote, read by all 4 ranks by name
//! (`examples/c/elastic.c`, which lists the checkpoint with `SCR_Restart_info` and
//! `SCR_Restart_file` and checks every byte it reads): from the cache on one node, from another
//! node's cache (the copy over MPI and the second attempt at the same checkpoint), from the
//! prefix, and a damaged prefix copy.

use crate::common::{Job, Run};

const ARGS: &[&str] = &["--steps", "0"];

fn restarted(r: &Run, step: u32, attempts: usize) -> bool {
    let line = format!("RESTARTED ckpt.{step} step={step} writers=4 files=5 data_read=4 header_read=4");
    r.has(&line) && r.stdout.matches("ATTEMPT ").count() == attempts && r.code == Some(0)
}

/// Three checkpoints of 4 ranks; ckpt.3 is the one in cache.
fn checkpointed(job: &Job) {
    let r = job.run("elastic", &["--steps", "3", "--info-outside"]);
    assert!(r.has("NO_RESTART") && r.has("DONE steps=1..3") && r.code == Some(0), "{}", r.dump());
    assert!(r.has("INFO_OUTSIDE rc=1") && r.stderr.contains("SCR_Restart_info: called outside"), "{}", r.dump());
}

#[test]
fn a_header_in_a_cache_on_the_same_node() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    checkpointed(&job);
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 1), "{}", r.dump());
}

#[test]
fn a_header_in_a_cache_on_another_node_is_copied_and_the_same_checkpoint_offered_again() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "SINGLE");
    checkpointed(&job);
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 2), "{}", r.dump());
    assert!(r.has("ATTEMPT ckpt.3 rc=1"), "the first attempt fails\n{}", r.dump());
    // one warning per rank that asked, then one line saying what was copied
    let asked = "SCR WARNING: rank 1 on n1: SCR_Route_file: ";
    assert!(r.stderr.contains(asked), "{}", r.dump());
    assert_eq!(r.stderr.matches("is held only in the cache of rank 0 on another node").count(), 3, "{}", r.dump());
    assert!(r.stderr.contains("copied them") && r.stderr.contains("offers ckpt.3 again"), "{}", r.dump());
    assert!(!r.stderr.contains("marking it failed"), "{}", r.dump());
    for node in ["n1", "n2", "n3"] {
        assert_eq!(job.node_files(node, ".scr/copies/ckpt.3/header.dat").len(), 1, "{node}");
    }
    // a relaunch does it again (the copies of a run are not recorded)
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 2), "{}", r.dump());

    // SCR_GLOBAL_RESTART=1: flushed in SCR_Init, read from the prefix, one attempt
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "0").set("SCR_COPY_TYPE", "SINGLE");
    checkpointed(&job);
    job.set("SCR_GLOBAL_RESTART", "1");
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 1), "{}", r.dump());
}

#[test]
fn a_header_read_from_the_prefix() {
    // flushed, the cache intact on 4 nodes: the others read rank 0's header in the prefix
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "1").set("SCR_COPY_TYPE", "SINGLE");
    checkpointed(&job);
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 1), "{}", r.dump());

    // the caches lost: fetched, then the same
    for node in ["n0", "n1", "n2", "n3"] {
        job.lose_node(node);
    }
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 1), "{}", r.dump());

    // one node, cache lost: fetched into rank 0's cache, which the others share
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    checkpointed(&job);
    job.wipe_cache();
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 1), "{}", r.dump());
}

#[test]
fn a_damaged_header_in_the_prefix_is_never_read() {
    // the prefix copy fails its CRC32: the cached copy on another node is asked for instead
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "1").set("SCR_COPY_TYPE", "SINGLE");
    checkpointed(&job);
    let header = job.prefix.join("ckpt.3/header.dat");
    let mut b = std::fs::read(&header).unwrap();
    b[70] ^= 1;
    std::fs::write(&header, b).unwrap();
    let r = job.run("elastic", ARGS);
    assert!(restarted(&r, 3, 2), "{}", r.dump());
    assert!(r.stderr.contains("its prefix copy is unusable") && r.stderr.contains("CRC32"), "{}", r.dump());

    // with the cache lost too, ckpt.3 fails and ckpt.2 is restarted
    for node in ["n0", "n1", "n2", "n3"] {
        job.lose_node(node);
    }
    let r = job.run("elastic", ARGS);
    assert!(r.has("RESTARTED ckpt.2 step=2 writers=4 files=5 data_read=4 header_read=4"), "{}", r.dump());
}
