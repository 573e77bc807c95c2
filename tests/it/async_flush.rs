//! Asynchronous flush (`SCR_FLUSH_ASYNC=1`) under real `mpirun` with 4 ranks: the checkpoint
//! call returns while the flush runs, several flushes outstanding, completion durable the
//! moment it happens (a run killed right after keeps it in the index), a run killed mid-flush
//! (the index never claims it; scavenge sees the FLUSHING mark), eviction waiting for a flush,
//! output datasets leaving the cache once flushed.
//!
//! Outcomes are decided by the order of events, never by timing: `SCR_FLUSH_ASYNC_BW` makes a
//! flush take at least `SIZE / BW` seconds (the pacing sleeps, so this is a lower bound), and
//! test_api's `--pause-before` gate holds the application at a known point while the test
//! looks at the prefix.

use crate::common;
use crate::common::Job;

use std::path::{Path, PathBuf};

/// Bytes per rank and checkpoint.
const SIZE: &str = "262144";
/// 64 KiB/s per process: each rank's share of a flush takes at least 4 s.
const SLOW: &str = "65536";

fn async_job() -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH_ASYNC", "1").set("SCR_FLUSH", "1").set("SCR_COPY_TYPE", "SINGLE").set("SCR_DEBUG", "1");
    job.set("SCR_LOG_ENABLE", "1").set("SCR_LOG_SYSLOG_ENABLE", "0");
    job
}

/// The event log's lines as (event, fields).
fn events(job: &Job) -> Vec<scr::events::Event> {
    let text = std::fs::read_to_string(job.prefix.join(".scr/log")).unwrap_or_default();
    text.lines().map(|l| scr::events::parse_line(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

/// Index of the first event `name` whose `dset` is `id`.
fn event_at(evs: &[scr::events::Event], name: &str, id: u64) -> Option<usize> {
    evs.iter().position(|e| e.name == name && e.get("dset") == Some(id.to_string().as_str()))
}

fn gate(job: &Job) -> PathBuf {
    let g = job.root.join("gate");
    std::fs::create_dir_all(&g).unwrap();
    g
}

fn resume(g: &Path, step: u32, how: &str) {
    common::resume_gate(g, step, how);
}

/// The index entry of dataset `id` (null if absent or the index does not exist yet).
fn entry(job: &Job, id: u64) -> serde_json::Value {
    if !job.prefix.join(".scr/index.scr").exists() {
        return serde_json::Value::Null;
    }
    job.index()["datasets"][id.to_string()].clone()
}

fn complete(job: &Job, id: u64) -> bool {
    entry(job, id)["complete"] == true
}

/// Where the node's flush file says dataset `id` is.
fn location(job: &Job, id: u64) -> String {
    let mut found = None;
    common::walk(&job.cache, &mut |p| {
        if p.file_name().is_some_and(|n| n == "flush.scr") {
            found = Some(p.to_path_buf());
        }
    });
    let path = found.expect("a flush file in the control directory");
    job.meta(&path)["datasets"][id.to_string()]["location"].as_str().unwrap_or("").to_string()
}

#[test]
fn checkpoint_returns_while_the_flushes_run_and_the_prefix_ends_complete() {
    let mut job = async_job();
    job.set("SCR_FLUSH_ASYNC_BW", SLOW).set("SCR_CACHE_SIZE", "4");
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut bg = job.spawn("test_api", &["--size", SIZE, "--steps", "3", "--pause-before", "3", &gs]);
    bg.wait_for(&g.join("paused.3"));
    // Checkpoints 1 and 2 returned from SCR_Complete_output. Dataset 2's flush needs at least
    // 4 s of paced copying and is queued behind dataset 1's: it cannot be in the prefix yet.
    assert!(!complete(&job, 2), "dataset 2 already complete: the checkpoint waited for its flush");
    assert_eq!(location(&job, 2), "Flushing", "the FLUSHING mark is set while the flush runs");
    resume(&g, 3, "go");
    let out = bg.finish();
    assert_eq!(out.code, Some(0), "{}", out.dump());
    for k in 1..=3 {
        assert!(out.has(&format!("CHECKPOINT ckpt.{k} ok=1")), "{}", out.dump());
        let e = entry(&job, k);
        assert!(e["complete"] == true && e["flushing"] == false && e["flushed"].is_string(), "dataset {k}: {e}");
        assert!(out.stderr.contains(&format!("dataset {k} (ckpt.{k}): background flush complete")), "{}", out.dump());
        assert_eq!(location(&job, k), "Pfs");
    }
    // No trace of the flush protocol is left in the prefix.
    let mut leftovers = Vec::new();
    common::walk(&job.prefix, &mut |p| {
        let s = p.display().to_string();
        if s.contains("/flush/") || s.ends_with(".scrpart") {
            leftovers.push(s);
        }
    });
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Every byte in the prefix checks out: restart from it with the cache gone.
    job.wipe_cache();
    let out = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(out.has("RESTARTED ckpt.3 step=3"), "{}", out.dump());
}

#[test]
fn a_run_killed_mid_flush_leaves_it_incomplete_and_scavenge_finishes_it() {
    let mut job = async_job();
    job.set("SCR_FLUSH_ASYNC_BW", SLOW);
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut bg = job.spawn("test_api", &["--size", SIZE, "--steps", "2", "--pause-before", "2", &gs]);
    bg.wait_for(&g.join("paused.2"));
    // Rank 0's worker records the flush in the index first; wait for that event.
    bg.wait_until("the index listing dataset 1 as flushing", || entry(&job, 1)["flushing"] == true);
    assert!(!complete(&job, 1));
    resume(&g, 2, "crash");
    let out = bg.finish();
    assert_ne!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("CRASH at the pause before step 2"), "{}", out.dump());
    // Killed mid-flush: the index never claims the dataset, the node's flush file says FLUSHING.
    let e = entry(&job, 1);
    assert!(e["complete"] == false, "{e}");
    assert_eq!(location(&job, 1), "Flushing");
    // Scavenge sees the mark and copies the dataset itself.
    let sc = job.command(env!("CARGO_BIN_EXE_scr_copy")).output().unwrap();
    let err = String::from_utf8_lossy(&sc.stderr);
    assert!(sc.status.success(), "{err}");
    assert!(err.contains("dataset 1 was being flushed when the run ended; scavenging it instead"), "{err}");
    let b = job.command(env!("CARGO_BIN_EXE_scr_index")).args(["--build", "1"]).output().unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert!(complete(&job, 1));
    job.wipe_cache();
    let out = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(out.has("RESTARTED ckpt.1 step=1"), "{}", out.dump());
}

#[test]
fn a_flush_that_finished_before_the_kill_stays_in_the_index() {
    let job = async_job();
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut bg = job.spawn("test_api", &["--size", SIZE, "--steps", "2", "--pause-before", "2", &gs]);
    bg.wait_for(&g.join("paused.2"));
    // The application is held at the gate and calls no SCR function: the flush completes in
    // the background and is published by the ranks' workers alone; the publishing rank logs
    // FLUSH_END right after it updated the index, not at a later SCR call.
    bg.wait_until("dataset 1 complete in the index and its FLUSH_END logged", || {
        complete(&job, 1) && event_at(&events(&job), "FLUSH_END", 1).is_some()
    });
    resume(&g, 2, "crash");
    let out = bg.finish();
    assert_ne!(out.code, Some(0), "{}", out.dump());
    assert!(complete(&job, 1), "the finished flush was lost: {}", entry(&job, 1));
    assert_eq!(location(&job, 1), "Flushing", "the run died before it could record the flush itself");
    // The next run learns from the index that the flush landed, and does not flush it again.
    let out = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(out.has("RESTARTED ckpt.1 step=1"), "{}", out.dump());
    assert!(out.stderr.contains("dataset 1 reached the prefix after its run ended"), "{}", out.dump());
    assert!(!out.stderr.contains("background flush started"), "{}", out.dump());
    assert_eq!(location(&job, 1), "Pfs");
    // And the prefix copy alone restarts, every byte checked.
    job.wipe_cache();
    let out = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(out.has("RESTARTED ckpt.1 step=1"), "{}", out.dump());
}

#[test]
fn a_finished_flush_is_retired_at_the_next_scr_call_not_at_finalize() {
    let mut job = async_job();
    // Room for every checkpoint: no eviction waits for (and so retires) a flush.
    job.set("SCR_CACHE_SIZE", "4");
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut bg = job.spawn("test_api", &["--size", SIZE, "--steps", "3", "--pause-before", "2", &gs]);
    bg.wait_for(&g.join("paused.2"));
    bg.wait_until("dataset 1 complete in the index", || complete(&job, 1));
    resume(&g, 2, "go");
    let out = bg.finish();
    assert_eq!(out.code, Some(0), "{}", out.dump());
    // Step 2's SCR_Need_checkpoint retires flush 1 (recorded as PFS, reported) before step 2's
    // own flush starts: progress happens at ordinary calls, not only in SCR_Finalize.
    let retired = out.stderr.find("dataset 1 (ckpt.1): background flush complete").expect("flush 1 retired");
    let next = out.stderr.find("dataset 2: background flush started").expect("flush 2 started");
    assert!(retired < next, "{}", out.dump());
    for k in 1..=3 {
        assert!(complete(&job, k) && location(&job, k) == "Pfs", "dataset {k}: {}", entry(&job, k));
    }
}

#[test]
fn eviction_waits_for_the_flush_of_the_dataset_it_evicts() {
    let mut job = async_job();
    // One checkpoint fits in cache: starting checkpoint 2 evicts checkpoint 1, whose flush
    // takes at least 4 s.
    job.set("SCR_FLUSH_ASYNC_BW", SLOW).set("SCR_CACHE_SIZE", "1");
    let out = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stderr.contains("for the background flush of dataset(s) [1] before evicting them"), "{}", out.dump());
    let wait = out.stderr.find("before evicting them").unwrap();
    let done = out.stderr.find("dataset 1 (ckpt.1): background flush complete").expect("flush 1 retired");
    assert!(done < wait, "the eviction went ahead before the flush was retired:\n{}", out.dump());
    assert!(complete(&job, 1) && complete(&job, 2));
    // The log tells the same story: the flush of 1 ended before 1 was evicted, after a wait.
    let evs = events(&job);
    let start = event_at(&evs, "FLUSH_START", 1).expect("FLUSH_START dset=1");
    assert_eq!(evs[start].get("mode"), Some("async"));
    let end = event_at(&evs, "FLUSH_END", 1).expect("FLUSH_END dset=1");
    let evict = event_at(&evs, "EVICT", 1).expect("EVICT dset=1");
    assert!(start < end && end < evict, "{evs:?}");
    assert!(evs[evict].num("waited").unwrap() > 0.0, "{:?}", evs[evict]);
    assert_eq!(evs[end].num("bytes"), Some(4.0 * 262_144.0));
    // Checkpoint 1 reached the prefix whole although it was evicted from cache.
    job.wipe_cache();
    job.set("SCR_CURRENT", "ckpt.1");
    let out = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(out.has("RESTARTED ckpt.1 step=1"), "{}", out.dump());
}

#[test]
fn output_datasets_flush_in_the_background_and_then_leave_the_cache() {
    let mut job = async_job();
    // The guide's spelling: SCR_FLUSH_ASYNC=1 with SCR_FLUSH_TYPE=PTHREAD.
    job.set("SCR_CACHE_SIZE", "2").set("SCR_FLUSH_TYPE", "PTHREAD");
    let out = job.run("test_api", &["--size", SIZE, "--steps", "3", "--flags", "output"]);
    assert!(out.stderr.contains("background flush started"), "{}", out.dump());
    assert_eq!(out.code, Some(0), "{}", out.dump());
    for k in 1..=3 {
        assert!(complete(&job, k), "output {k}: {}", entry(&job, k));
        for r in 0..4 {
            let f = job.prefix.join(format!("ckpt.{k}/rank_{r}.ckpt"));
            assert_eq!(std::fs::metadata(&f).map(|m| m.len()).ok(), Some(262_144), "{}", f.display());
        }
    }
    assert!(job.cached_files("rank_").is_empty(), "{:?}", job.cached_files("rank_"));
}
