//! Checkpoint and restart under real MPI: from cache, from the prefix, after corruption,
//! after a crash mid-checkpoint, in bypass mode, and with the periodic flush counter.

use crate::common::Job;

#[test]
fn fresh_run_then_restart_from_cache_without_the_prefix() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "3", "--crash-after", "2"]);
    assert!(r.has("NO_RESTART") && r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.2").exists(), "nothing reaches the prefix with SCR_FLUSH=0");
    assert_eq!(job.cached_files("rank_").len(), 8, "two checkpoints of 4 ranks in cache");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(r.has("CHECKPOINT ckpt.3 ok=1"), "{}", r.dump());
    assert!(!job.prefix.join(".scr/index.scr").exists() || job.index()["datasets"].as_object().unwrap().is_empty());
}

/// SCR_PREFIX names the prefix through a symbolic link while the ranks route names under the
/// real directory (they run there): rank 0 alone resolves the link, and every rank routes,
/// flushes and restarts through what it sent.
#[test]
fn a_prefix_named_through_a_link_is_resolved_once_for_every_rank() {
    let mut job = Job::new();
    let link = job.root.join("prefix-link");
    std::os::unix::fs::symlink(&job.prefix, &link).unwrap();
    job.set("SCR_PREFIX", &link.display().to_string()).set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--steps", "2", "--size", "300000"]);
    assert!(r.has("DONE steps=1..2") && r.code == Some(0), "{}", r.dump());
    assert_eq!(job.index()["datasets"]["2"]["complete"], true, "{}", job.index());
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "1", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn restart_from_prefix_after_cache_is_lost() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--steps", "3", "--size", "300000"]);
    assert!(r.has("DONE steps=1..3") && r.code == Some(0), "{}", r.dump());
    let index = job.index();
    assert_eq!(index["datasets"]["3"]["complete"], true, "{index}");
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "1", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.3 step=3"), "{}", r.dump());
    let index = job.index();
    assert_eq!(index["datasets"]["3"]["fetches"][0]["ok"], true, "{index}");
    // the fetch made ckpt.3 current; the run's own flushed ckpt.4 then took over (as in SCR:
    // a marker left on the fetched one would hide every newer checkpoint from the next fetch)
    assert_eq!(index["current"], "ckpt.4", "{index}");
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "0", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.4 step=4"), "{}", r.dump());
}

#[test]
fn corrupted_byte_in_prefix_is_detected_and_previous_checkpoint_used() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--steps", "2", "--size", "100000"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    let victim = job.prefix.join("ckpt.2/rank_1.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[5000] ^= 0x40;
    std::fs::write(&victim, bytes).unwrap();
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "1", "--size", "100000"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
    assert!(r.stderr.contains("CRC32") && r.stderr.contains("rank_1.ckpt"), "{}", r.dump());
    let index = job.index();
    assert_eq!(index["datasets"]["2"]["failed"], true, "{index}");
    // the run went on from ckpt.1 and flushed its own ckpt.2 (dataset 3), now current
    assert_eq!(index["datasets"]["3"]["desc"]["name"], "ckpt.2", "{index}");
    assert_eq!(index["current"], "ckpt.2", "{index}");
}

#[test]
fn killed_during_a_checkpoint_keeps_the_previous_one() {
    // Two checkpoints fit in cache: the previous one is still there.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "3", "--crash-during", "3", "--size", "2000000"]);
    assert!(r.stdout.contains("CRASH rank 0 during step 3"), "{}", r.dump());
    let r = job.run("test_api", &["--steps", "0", "--size", "2000000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(r.stderr.contains("ckpt.3") && r.stderr.contains("never completed"), "{}", r.dump());
    assert!(job.cached_files("ckpt.3/rank_").is_empty(), "the partial checkpoint is deleted");

    // One fits: the cache copy was evicted for the new one, the prefix copy remains.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "1");
    let r = job.run("test_api", &["--steps", "3", "--crash-during", "3", "--size", "2000000"]);
    assert!(r.stdout.contains("CRASH rank 0 during step 3"), "{}", r.dump());
    let r = job.run("test_api", &["--steps", "1", "--size", "2000000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

/// With the default SCR_CACHE_SIZE=1, a checkpoint that fails (a rank reports valid=0, or
/// a rank is killed while writing it) never costs the previous one, whatever the scheme: the
/// previous checkpoint leaves the cache only once the new one is complete.
fn failed_checkpoint_keeps_the_previous_one_in_cache(scheme: &str) {
    let mk = || {
        let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
        job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0").unset("SCR_CACHE_SIZE");
        job
    };
    // valid=0 on one rank for checkpoint 3, then a clean finalize
    let job = mk();
    let r = job.run("test_api", &["--steps", "3", "--invalid-rank", "1", "--invalid-step", "3", "--size", "300000"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.has("CHECKPOINT ckpt.3 ok=0"), "{scheme}: {}", r.dump());
    assert!(r.has("DONE steps=1..3"), "{scheme}: {}", r.dump());
    assert!(r.stderr.contains("ckpt.2 (dataset 2) stays the newest checkpoint in cache"), "{scheme}: {}", r.dump());
    let r = job.run("test_api", &["--steps", "0", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{scheme}: {}", r.dump());
    assert!(!job.prefix.join("ckpt.2").exists(), "{scheme}: loaded from cache");

    // rank 0 killed half-way through writing checkpoint 3
    let job = mk();
    let r = job.run("test_api", &["--steps", "3", "--crash-during", "3", "--size", "300000"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{scheme}: {}", r.dump());
    assert!(r.stdout.contains("CRASH rank 0 during step 3"), "{scheme}: {}", r.dump());
    let r = job.run("test_api", &["--steps", "0", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{scheme}: {}", r.dump());
    // once the next one is complete, the store holds one checkpoint again
    let r = job.run("test_api", &["--steps", "1", "--size", "300000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("CHECKPOINT ckpt.3 ok=1"), "{scheme}: {}", r.dump());
    let on_nodes = |needle: &str| -> Vec<std::path::PathBuf> {
        ["n0", "n1", "n2", "n3"]
            .iter()
            .flat_map(|n| job.node_files(n, needle))
            .filter(|p| !p.display().to_string().contains("/.deleting/"))
            .collect()
    };
    assert!(on_nodes("ckpt.2/rank_").is_empty(), "{scheme}: {:?}", on_nodes(""));
    assert_eq!(on_nodes("ckpt.3/rank_").len(), 4, "{scheme}: {:?}", on_nodes(""));
}

#[test]
fn cache_size_1_failed_checkpoint_keeps_the_previous_single() {
    failed_checkpoint_keeps_the_previous_one_in_cache("SINGLE");
}

#[test]
fn cache_size_1_failed_checkpoint_keeps_the_previous_partner() {
    failed_checkpoint_keeps_the_previous_one_in_cache("PARTNER");
}

#[test]
fn cache_size_1_failed_checkpoint_keeps_the_previous_xor() {
    failed_checkpoint_keeps_the_previous_one_in_cache("XOR");
}

#[test]
fn cache_size_1_failed_checkpoint_keeps_the_previous_rs() {
    failed_checkpoint_keeps_the_previous_one_in_cache("RS");
}

#[test]
fn bypass_mode_writes_and_restarts_in_the_prefix() {
    let mut job = Job::new();
    job.set("SCR_CACHE_BYPASS", "1").set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    for rank in 0..4 {
        assert!(job.prefix.join(format!("ckpt.2/rank_{rank}.ckpt")).exists());
    }
    assert!(job.cached_files("rank_").is_empty(), "bypass keeps data out of the cache");
    assert_eq!(job.index()["datasets"]["2"]["complete"], true);
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn flush_counter_continues_across_runs() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "3").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.1").exists() && !job.prefix.join("ckpt.2").exists());
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "4"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("CHECKPOINT ckpt.4 ok=1"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.3/rank_0.ckpt").exists(), "the 3rd checkpoint of the job is flushed");
    assert!(!job.prefix.join("ckpt.4").exists(), "the 4th is not");
    let index = job.index();
    let ids: Vec<&String> = index["datasets"].as_object().unwrap().keys().collect();
    assert_eq!(ids, vec!["3"], "{index}");
}

#[test]
fn a_rank_reporting_invalid_makes_the_dataset_invalid_everywhere() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "2", "--invalid-rank", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=0") && r.has("CHECKPOINT ckpt.2 ok=0"), "{}", r.dump());
    assert!(r.stderr.contains("rank 2: the application reported valid=0"), "{}", r.dump());
    // the crash may have come before the background removal: what is left is in the trash
    assert_eq!(job.cached_files("rank_"), Vec::<String>::new(), "trash: {:?}", job.trashed_files(""));
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    assert_eq!(job.trashed_files(""), Vec::<String>::new(), "the next run empties the trash");
}

#[test]
fn restart_failure_falls_back_to_the_next_checkpoint() {
    // The application's own check fails for the newest checkpoint (wrong size requested):
    // SCR marks it failed and offers the next one, which also fails, then none.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--size", "1000"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    let r = job.run("test_api", &["--steps", "1", "--size", "2000"]);
    assert!(r.has("RESTART_FAILED ckpt.2") && r.has("RESTART_FAILED ckpt.1") && r.has("NO_RESTART"), "{}", r.dump());
    let index = job.index();
    assert_eq!(index["datasets"]["2"]["failed"], true, "{index}");
    assert_eq!(index["datasets"]["1"]["failed"], true, "{index}");
}

/// A checkpoint of thousands of small files per rank (`examples/c/bench_files.c`): every name
/// is recorded once, and the restart routes each file back to its bytes. (SCR_Route_file no
/// longer rewrites the filemap per call, which made such a checkpoint take minutes.)
#[test]
fn a_checkpoint_of_thousands_of_files_per_rank_restarts_every_file() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("bench_files", &["3000", "2"]);
    assert!(r.code == Some(0) && r.stdout.matches("TIME complete").count() == 2, "{}", r.dump());
    assert_eq!(job.cached_files("ckpt.1/").len(), 4 * 3000, "every rank's files of ckpt.1 in cache");
    let r = job.run("bench_files", &["3000", "1"]);
    assert!(r.code == Some(0) && r.stdout.contains("TIME restart ") && r.has("BAD 0"), "{}", r.dump());
}
