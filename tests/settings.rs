//! Settings that steer restart and flush, each exercised under real MPI: SCR_FETCH,
//! SCR_FETCH_BYPASS, SCR_CURRENT, SCR_FLUSH_ON_RESTART, SCR_GLOBAL_RESTART,
//! SCR_CACHE_PURGE, SCR_PREFIX_PURGE, SCR_FLUSH_WIDTH/SCR_FETCH_WIDTH,
//! SCR_CHECKPOINT_INTERVAL.

mod common;
use common::Job;

/// A job with checkpoints 1 and 2 flushed to the prefix and the cache lost.
fn flushed_two(extra: &[(&str, &str)]) -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    for (k, v) in extra {
        job.set(k, v);
    }
    let r = job.run("test_api", &["--steps", "2"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    job.wipe_cache();
    job
}

#[test]
fn fetch_disabled_and_fetch_bypass() {
    let mut job = flushed_two(&[]);
    job.set("SCR_FETCH", "0");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());

    job.set("SCR_FETCH", "1").set("SCR_FETCH_BYPASS", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.cached_files("rank_").is_empty(), "fetch bypass reads in place");
}

#[test]
fn scr_current_picks_the_checkpoint() {
    let mut job = flushed_two(&[]);
    job.set("SCR_CURRENT", "ckpt.1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
    assert_eq!(job.index()["current"], "ckpt.1");
}

#[test]
fn flush_widths_of_one_still_move_everything() {
    let mut job = flushed_two(&[("SCR_FLUSH_WIDTH", "1")]);
    job.set("SCR_FETCH_WIDTH", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn flush_on_restart_and_global_restart() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.2").exists());
    job.set("SCR_FLUSH_ON_RESTART", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.2/rank_3.ckpt").exists(), "flushed during SCR_Init");

    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    job.set("SCR_GLOBAL_RESTART", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.2/rank_3.ckpt").exists());
}

#[test]
fn cache_and_prefix_purge() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "1", "--crash-after", "1"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{}", r.dump());
    job.set("SCR_CACHE_PURGE", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());

    let mut job = flushed_two(&[]);
    job.set("SCR_PREFIX_PURGE", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.1").exists() && !job.prefix.join("ckpt.2").exists());
}

#[test]
fn checkpoint_interval_drives_need_checkpoint() {
    let mut job = Job::new();
    job.set("SCR_CHECKPOINT_INTERVAL", "2").set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "4"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.has("CHECKPOINT ckpt.4 ok=1"), "{}", r.dump());
    assert!(!r.stdout.contains("CHECKPOINT ckpt.1") && !r.stdout.contains("CHECKPOINT ckpt.3"), "{}", r.dump());
}
