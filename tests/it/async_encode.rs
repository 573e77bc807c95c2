//! Asynchronous encoding (`SCR_ENCODE_ASYNC=1`) on a simulated cluster: `SCR_Complete_output`
//! returns with SINGLE protection and the redundancy is encoded in the background; a dataset
//! counts as protected only once every member of its set finished. A node lost while an
//! encoding runs costs that dataset (unless none of its data was lost), never the protected
//! one before it. Every restart checks every byte (test_api).

use crate::common;
use crate::common::Job;

const SIZE: &str = "300007";

/// A job on four simulated nodes with asynchronous encoding and MPI_THREAD_MULTIPLE (Open MPI
/// gives MPI_Init that level with OMPI_MPI_THREAD_LEVEL=3).
fn job(scheme: &str) -> Job {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2").set("SCR_SET_FAILURES", "2");
    job.set("SCR_ENCODE_ASYNC", "1").set("OMPI_MPI_THREAD_LEVEL", "3").set("SCR_DEBUG", "1");
    job
}

fn restarted(r: &common::Run, step: u32) -> bool {
    r.has(&format!("RESTARTED ckpt.{step} step={step}")) && !r.stdout.contains("RESTART_FAILED")
}

#[test]
fn each_scheme_encodes_in_the_background_and_survives_a_lost_node() {
    for (scheme, lost) in [("PARTNER", &["n2"][..]), ("XOR", &["n1"]), ("RS", &["n0", "n3"])] {
        let mut job = job(scheme);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
        assert!(r.has("DONE steps=1..2") && r.code == Some(0), "{scheme}\n{}", r.dump());
        let deferred = format!("SINGLE until its {scheme} encoding is done in the background");
        assert_eq!(r.stderr.matches(&deferred).count(), 2, "{scheme}\n{}", r.dump());
        assert!(r.stderr.contains(&format!("dataset 2: {scheme} encoded in the background")), "{scheme}\n{}", r.dump());
        for n in lost {
            job.lose_node(n);
        }
        job.map(&["n0", "n1", "n2", "n3"]);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
        assert!(restarted(&r, 2), "{scheme}\n{}", r.dump());
        let want = format!("rebuilt cached dataset 2 for {} rank(s)", lost.len());
        assert!(r.stderr.contains(&want), "{scheme}\n{}", r.dump());
    }
}

#[test]
fn without_thread_multiple_the_encoding_stays_inside_complete_output() {
    let mut job = job("XOR");
    job.unset("OMPI_MPI_THREAD_LEVEL");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert!(r.has("DONE steps=1..2") && r.code == Some(0), "{}", r.dump());
    let msg = "SCR_ENCODE_ASYNC=1 needs MPI initialised with MPI_THREAD_MULTIPLE, and this run has MPI_THREAD_SINGLE";
    assert_eq!(r.stderr.matches(msg).count(), 1, "one message\n{}", r.dump());
    assert!(!r.stderr.contains("in the background"), "{}", r.dump());
    // protected when SCR_Complete_output returned
    job.lose_node("n1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(restarted(&r, 2) && r.stderr.contains("rebuilt cached dataset 2 for 1 rank(s)"), "{}", r.dump());
}

#[test]
fn eviction_flushes_and_finalize_cooperate_with_encodings_in_flight() {
    // COUNT=1: each SCR_Start_output evicts the dataset whose encoding may still run; every
    // 2nd checkpoint is flushed in the background while it is encoded; SCR_Finalize waits
    let mut job = job("XOR");
    job.set("SCR_CACHE_SIZE", "1").set("SCR_FLUSH", "2").set("SCR_FLUSH_ASYNC", "1");
    let r = job.run("test_api", &["--size", "3000017", "--steps", "4"]);
    assert!(r.has("DONE steps=1..4") && r.code == Some(0), "{}", r.dump());
    assert!(r.stderr.contains("dataset 4: XOR encoded in the background"), "{}", r.dump());
    let snap = job.snapshot();
    job.lose_node("n3");
    let r = job.run("test_api", &["--size", "3000017", "--steps", "0"]);
    assert!(restarted(&r, 4) && r.stderr.contains("rebuilt cached dataset 4 for 1 rank(s)"), "{}", r.dump());
    job.restore(&snap);
    job.wipe_cache();
    for n in ["n0", "n1", "n2", "n3"] {
        job.lose_node(n);
    }
    let r = job.run("test_api", &["--size", "3000017", "--steps", "0"]);
    assert!(restarted(&r, 4), "fetched from the prefix\n{}", r.dump());
}

/// Files of dataset `id` named `*.xor` (published) or `*.xor.part` on a node.
fn red_files(job: &Job, node: &str, id: u64, ext: &str) -> usize {
    let dir = format!("scr.dataset.{id}/.scr/");
    job.node_files(node, &dir).iter().filter(|p| p.to_string_lossy().ends_with(ext)).count()
}

#[test]
fn a_node_lost_while_the_encoding_runs_falls_back_to_the_protected_checkpoint() {
    let big = "40000003";
    let nodes = ["n0", "n1", "n2", "n3"];
    let mut job = job("XOR");
    // ckpt.1, then ckpt.2, whose encoding is running when the whole job is killed
    let mut bg = job.spawn("test_api", &["--size", big, "--steps", "3", "--compute-secs", "3"]);
    bg.wait_until("the encoding of ckpt.2", || nodes.iter().any(|n| red_files(&job, n, 2, ".xor.part") > 0));
    let out = bg.kill();
    let published = |id| nodes.iter().filter(|n| red_files(&job, n, id, ".xor") > 0).count();
    // ckpt.1's encoding finished everywhere before ckpt.2's began; a member may have been
    // killed between the agreement and its rename (its file still named .part), which the
    // next SCR_Init publishes because the others did
    let staged1 = nodes.iter().filter(|n| red_files(&job, n, 1, ".xor.part") > 0).count();
    assert_eq!(published(1) + staged1, 4, "ckpt.1's encoding finished before ckpt.2's began\n{out}");
    assert!(published(2) < 4, "the kill came after ckpt.2's encoding had finished; make the data larger\n{out}");
    let snap = job.snapshot();

    // nothing lost: every byte of ckpt.2 is still there, so it is the restart
    let r = job.run("test_api", &["--size", big, "--steps", "0"]);
    assert!(restarted(&r, 2), "{}", r.dump());

    // a node lost: ckpt.2 cannot be rebuilt (never fully encoded); ckpt.1 is
    job.restore(&snap);
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = job.run("test_api", &["--size", big, "--steps", "0"]);
    assert!(restarted(&r, 1), "{}", r.dump());
    assert!(r.stderr.contains("deleting dataset 2 from cache"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
    if staged1 > 0 {
        assert!(r.stderr.contains("dataset 1: its XOR encoding finished before the run ended"), "{}", r.dump());
    }
}

/// A run killed after the members of a set agreed that ckpt.1's encoding finished but before
/// every one renamed its redundancy file: the next run publishes the file left under its
/// temporary name (the others published theirs) and rebuilds ckpt.1 after a lost node.
#[test]
fn a_redundancy_file_left_under_its_temporary_name_is_published_when_its_set_published() {
    let mut job = job("XOR");
    let r = job.run("test_api", &["--size", "3000017", "--steps", "1"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{}", r.dump());
    // rank 1's file back under its temporary name, as the kill left it (its record: SINGLE)
    let file = job.node_files("n1", "scr.dataset.1/.scr/").into_iter().find(|p| p.to_string_lossy().ends_with(".xor"));
    let file = file.expect("rank 1's redundancy file");
    let mut part = file.clone().into_os_string();
    part.push(".part");
    std::fs::rename(&file, &part).unwrap();
    unrecord_redundancy(&job, 1);
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = job.run("test_api", &["--size", "3000017", "--steps", "0"]);
    assert!(restarted(&r, 1), "{}", r.dump());
    assert!(r.stderr.contains("dataset 1: its XOR encoding finished before the run ended"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
    assert!(file.exists() && !std::path::Path::new(&part).exists());
}

/// Forget, in rank 1's filemap, that dataset `id` has redundancy (as a run killed before
/// recording it leaves it).
fn unrecord_redundancy(job: &Job, id: u64) {
    let path = job.node_files_named("n1", "filemap_1.scrinfo").pop().expect("rank 1's filemap");
    let mut fm = scr::state::filemap::Filemap::load(&path).unwrap();
    fm.datasets.get_mut(&id).expect("dataset recorded").red = None;
    fm.save(&path).unwrap();
}

#[test]
fn with_cache_size_one_the_previous_checkpoint_stays_until_the_new_one_is_encoded() {
    // SCR_CACHE_SIZE=1: ckpt.1 is encoded, ckpt.2 completes with SINGLE protection and is
    // being encoded when the job is killed; ckpt.1 must still be in cache then
    let big = "40000003";
    let nodes = ["n0", "n1", "n2", "n3"];
    let mut job = job("XOR");
    job.set("SCR_CACHE_SIZE", "1");
    let mut bg = job.spawn("test_api", &["--size", big, "--steps", "3", "--compute-secs", "3"]);
    bg.wait_until("the encoding of ckpt.2", || nodes.iter().any(|n| red_files(&job, n, 2, ".xor.part") > 0));
    let out = bg.kill();
    let published = |id| nodes.iter().filter(|n| red_files(&job, n, id, ".xor") > 0).count();
    assert!(published(2) < 4, "the kill came after ckpt.2's encoding had finished; make the data larger\n{out}");
    let staged1 = nodes.iter().filter(|n| red_files(&job, n, 1, ".xor.part") > 0).count();
    assert_eq!(published(1) + staged1, 4, "ckpt.1 is still in cache, encoded\n{out}");

    // a node lost: ckpt.2 cannot be rebuilt (never fully encoded); ckpt.1 is
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = job.run("test_api", &["--size", big, "--steps", "0"]);
    // ckpt.1 stayed, so it is rebuilt either way; ckpt.2 is the restart only when the kill
    // came after every rank had finished its encoding (its files were still being renamed)
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
    let encoded2 = r.stderr.contains("dataset 2: its XOR encoding finished before the run ended");
    assert!(restarted(&r, if encoded2 { 2 } else { 1 }), "{}", r.dump());
}

#[test]
fn with_cache_size_one_a_finished_encoding_evicts_the_previous_checkpoint() {
    // once ckpt.N's encoding finished everywhere, the next SCR call evicts ckpt.N-1: the
    // cache holds one checkpoint at the end, and a lost node restarts from the newest
    let mut job = job("XOR");
    job.set("SCR_CACHE_SIZE", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "3", "--compute-secs", "1"]);
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    for id in [1, 2] {
        assert_eq!(
            ["n0", "n1", "n2", "n3"].iter().map(|n| red_files(&job, n, id, ".xor")).sum::<usize>(),
            0,
            "ckpt.{id} evicted\n{}",
            r.dump()
        );
    }
    job.lose_node("n1");
    job.map(&["n0", "n4", "n2", "n3"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(restarted(&r, 3), "{}", r.dump());
}
