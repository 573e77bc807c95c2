//! Redundancy on a simulated cluster (`scripts/sim-node.sh`): 4 ranks on 2 or 4 fake nodes,
//! each with its own host name and node-local cache; nodes are lost by deleting their storage,
//! and relaunches may map ranks to other nodes or to a spare. Every restart reads back and
//! checks every byte the application wrote (test_api verifies its pattern).

use crate::common;
use crate::common::Job;

const SIZE: &str = "300007"; // not a multiple of any chunk size

fn job(scheme: &str, nodes: &[&str]) -> Job {
    let mut job = Job::cluster(nodes);
    job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0").set("SCR_CRC_ON_COPY", "1").set("SCR_CACHE_SIZE", "2");
    job
}

fn restarted(job: &Job, step: u32, extra: &[&str]) -> common::Run {
    let mut args = vec!["--size", SIZE, "--steps", "1"];
    args.extend_from_slice(extra);
    let r = job.run("test_api", &args);
    assert!(r.has(&format!("RESTARTED ckpt.{step} step={step}")), "expected a restart from ckpt.{step}:\n{}", r.dump());
    r
}

fn checkpoint(job: &Job, steps: &str, extra: &[&str]) {
    let mut args = vec!["--size", SIZE, "--steps", steps];
    args.extend_from_slice(extra);
    let r = job.run("test_api", &args);
    assert!(r.has("NO_RESTART") && r.code == Some(0), "{}", r.dump());
}

/// Flip bits `mask` of byte `at` of the one file of `node` whose path contains `name`.
fn flip_byte(job: &Job, node: &str, name: &str, at: usize, mask: u8) {
    let files = job.node_files(node, name);
    assert_eq!(files.len(), 1, "{files:?}");
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[at] ^= mask;
    std::fs::write(&files[0], &bytes).unwrap();
}

#[test]
fn each_scheme_survives_a_lost_node() {
    for scheme in ["PARTNER", "XOR", "RS"] {
        let job = job(scheme, &["n0", "n1", "n2", "n3"]);
        checkpoint(&job, "2", &[]);
        // Both checkpoints stay in cache, each with its redundancy file.
        let ext = match scheme {
            "PARTNER" => ".partner",
            "XOR" => ".xor",
            _ => ".rs",
        };
        assert_eq!(job.node_files("n1", ext).len(), 2, "{scheme}");
        // No loss: restart straight from cache.
        let r = restarted(&job, 2, &[]);
        assert!(!r.stderr.contains("rebuilt"), "{scheme}: nothing to rebuild\n{}", r.dump());
        // Lose node n2 and relaunch on a spare node n4.
        job.lose_node("n2");
        let mut job = job;
        job.map(&["n0", "n1", "n4", "n3"]);
        let r = restarted(&job, 3, &[]);
        assert!(r.stderr.contains("rebuilt cached dataset 3 for 1 rank(s)"), "{scheme}\n{}", r.dump());
        assert!(!job.prefix.join(".scr/index.scr").exists() || !job.index().to_string().contains("ckpt.3"));
    }
}

/// `test_api ARGS` with the open-file limit of each MPI process lowered to `limit`.
fn run_limited(job: &Job, limit: u32, args: &[&str]) -> common::Run {
    let mut exe: Vec<String> =
        ["sh", "-c", &format!("ulimit -n {limit} && exec \"$@\""), "limited"].iter().map(|s| s.to_string()).collect();
    exe.push(common::program("test_api").display().to_string());
    job.run_exe(4, &exe, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn more_files_per_rank_than_open_files_allowed() {
    // 1100 files per rank under `ulimit -n 1024`: encoding, the rebuild of a lost node and
    // the restart keep only a few files open at a time (test_api reads back every byte).
    for scheme in ["PARTNER", "XOR", "RS"] {
        let job = job(scheme, &["n0", "n1", "n2", "n3"]);
        let args = ["--size", "301", "--files", "1100", "--steps", "1"];
        let r = run_limited(&job, 1024, &args);
        assert!(r.has("NO_RESTART") && r.has("CHECKPOINT ckpt.1 ok=1") && r.code == Some(0), "{scheme}\n{}", r.dump());
        let ext = match scheme {
            "PARTNER" => ".partner",
            "XOR" => ".xor",
            _ => ".rs",
        };
        assert_eq!(job.node_files("n2", ext).len(), 1, "{scheme}: n2 holds its redundancy file");
        assert_eq!(job.node_files("n2", "rank_2_").len(), 1100, "{scheme}");
        job.lose_node("n2");
        let mut job = job;
        job.map(&["n0", "n1", "n4", "n3"]);
        let r = run_limited(&job, 1024, &args);
        assert!(r.has("RESTARTED ckpt.1 step=1"), "{scheme}: restart from the rebuilt ckpt.1\n{}", r.dump());
        assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{scheme}\n{}", r.dump());
        assert_eq!(job.node_files("n4", "ckpt.1/rank_2_").len(), 1100, "{scheme}: rank 2's files rebuilt on n4");
    }
}

#[test]
fn xor_losing_two_nodes_of_one_set_falls_back_to_the_prefix() {
    let mut job = job("XOR", &["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "2");
    // ckpt.2 and ckpt.4 are flushed periodically; ckpt.5 is written by a run that crashes
    // right after it, so it exists only in cache.
    checkpoint(&job, "4", &[]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1", "--crash-after", "5"]);
    assert!(r.has("CRASH after ckpt.5"), "{}", r.dump());
    job.lose_node("n1");
    job.lose_node("n3");
    job.map(&["n0", "n4", "n2", "n5"]);
    // Cache cannot rebuild ckpt.5 (or ckpt.4): ckpt.4 comes from the prefix.
    let r = restarted(&job, 4, &[]);
    assert!(r.stderr.contains("deleting dataset 5 from cache"), "{}", r.dump());
    assert!(r.stderr.contains("more than XOR can rebuild (tolerates 1)"), "{}", r.dump());
}

#[test]
fn rs_tolerates_its_failures_and_reports_one_more() {
    let mut job = job("RS", &["n0", "n1", "n2", "n3"]);
    job.set("SCR_SET_FAILURES", "2");
    checkpoint(&job, "1", &[]);
    job.lose_node("n0");
    job.lose_node("n2");
    job.map(&["n4", "n1", "n5", "n3"]);
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 2 rank(s)"), "{}", r.dump());
    // Three of four lost: nothing in cache can be trusted and nothing was flushed.
    for n in ["n1", "n3", "n4"] {
        job.lose_node(n);
    }
    job.map(&["n6", "n7", "n8", "n5"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    assert!(r.stderr.contains("more than RS can rebuild (tolerates 2)"), "{}", r.dump());
    assert!(r.stderr.contains("lost or damaged data of 3 rank(s)"), "{}", r.dump());
}

#[test]
fn partner_cannot_rebuild_two_neighbours() {
    let mut job = job("PARTNER", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "1", &[]);
    job.lose_node("n1");
    job.lose_node("n2");
    job.map(&["n0", "n4", "n5", "n3"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    assert!(r.stderr.contains("more than PARTNER can rebuild (tolerates no two neighbours)"), "{}", r.dump());
}

#[test]
fn ranks_moved_to_other_nodes_find_their_data() {
    for scheme in ["SINGLE", "XOR"] {
        let mut job = job(scheme, &["a", "a", "b", "b"]);
        checkpoint(&job, "1", &[]);
        // Swap the nodes: every rank's files are on the other node now.
        job.map(&["b", "b", "a", "a"]);
        let r = restarted(&job, 1, &[]);
        assert!(!r.stderr.contains("deleting"), "{scheme}\n{}", r.dump());
        // Interleave, and lose a node at the same time (XOR only can survive that).
        if scheme == "XOR" {
            job.lose_node("b");
            job.map(&["a", "c", "a", "c"]);
            restarted(&job, 2, &[]);
        }
    }
}

#[test]
fn uneven_data_is_rebuilt_byte_for_byte() {
    for (scheme, lost) in [("XOR", "n1"), ("RS", "n2"), ("PARTNER", "n2")] {
        let job = job(scheme, &["n0", "n1", "n2", "n3"]);
        checkpoint(&job, "1", &["--uneven"]);
        job.lose_node(lost);
        let mut job = job;
        job.map(&["n0", "n1", "n2", "n3"]);
        let r = restarted(&job, 1, &["--uneven"]);
        assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{scheme}\n{}", r.dump());
    }
}

#[test]
fn a_corrupted_cached_byte_is_repaired_by_redundancy() {
    let job = job("XOR", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "1", &[]);
    flip_byte(&job, "n2", "rank_2.ckpt", 12345, 0x40);
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("CRC32 is"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
}

#[test]
fn custom_failure_groups_decide_the_sets() {
    // Racks of two nodes: with GROUP=RACK each XOR set spans both racks, so losing a whole
    // rack (two nodes, two ranks) costs each set one member and is rebuilt. (With the
    // default GROUP=NODE all four ranks form one set, which cannot lose two.)
    let mut job = job("XOR", &["n0", "n1", "n2", "n3"]);
    let conf = job.root.join("racks.conf");
    std::fs::write(
        &conf,
        "SCR_GROUP=RACK\nSCR_SET_SIZE=2\nGROUPS=n0 RACK=a\nGROUPS=n1 RACK=a\nGROUPS=n2 RACK=b\nGROUPS=n3 RACK=b\n\
         GROUPS=n4 RACK=c\nGROUPS=n5 RACK=c\n",
    )
    .unwrap();
    job.set("SCR_CONF_FILE", &conf.display().to_string());
    checkpoint(&job, "1", &[]);
    job.lose_node("n0");
    job.lose_node("n1");
    job.map(&["n4", "n5", "n2", "n3"]);
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 2 rank(s)"), "{}", r.dump());
}

#[test]
fn distribute_off_ignores_the_cache() {
    let mut job = job("XOR", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "1", &[]);
    assert_eq!(job.node_files("n1", "rank_1.ckpt").len(), 1);
    job.set("SCR_DISTRIBUTE", "0");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    // The old checkpoint was deleted from cache; only the new run's ckpt.1 is there.
    assert_eq!(job.node_files("n1", "scr.dataset.1").len(), 0, "{}", r.dump());
}

#[test]
fn a_damaged_redundancy_file_counts_as_a_lost_member() {
    // n0's XOR file is cut short and n2 is lost: two members of the one set are gone, so the
    // dataset is dropped cleanly (no crash, no wrong data) and the run starts over.
    let mut job = job("XOR", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "1", &[]);
    let xor = job.node_files("n0", ".xor");
    assert_eq!(xor.len(), 1, "{xor:?}");
    let len = std::fs::metadata(&xor[0]).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&xor[0]).unwrap().set_len(len - 100).unwrap();
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("NO_RESTART") && r.code == Some(0), "{}", r.dump());
    assert!(r.stderr.contains("rank 0 (redundancy file:"), "{}", r.dump());
    assert!(r.stderr.contains("deleting dataset 1 from cache"), "{}", r.dump());
}

#[test]
fn many_small_pieces_are_encoded_and_rebuilt_byte_for_byte() {
    // SCR_MPI_BUF_SIZE=4096: every schedule runs through dozens of pipelined pieces, and the
    // ranks' streams (of different sizes) end at different pieces
    for (scheme, lost) in [("XOR", &["n1"][..]), ("RS", &["n0", "n2"]), ("PARTNER", &["n3"])] {
        let mut job = job(scheme, &["n0", "n1", "n2", "n3"]);
        job.set("SCR_MPI_BUF_SIZE", "4096").set("SCR_SET_FAILURES", "2");
        checkpoint(&job, "1", &["--uneven"]);
        for n in lost {
            job.lose_node(n);
        }
        let r = restarted(&job, 1, &["--uneven"]);
        let want = format!("rebuilt cached dataset 1 for {} rank(s)", lost.len());
        assert!(r.stderr.contains(&want), "{scheme}\n{}", r.dump());
    }
}

#[test]
fn partner_rebuilds_both_streams_of_a_lost_member_and_its_copy_protects_again() {
    // A lost PARTNER member gets its own files and its partner copy back at once; then its
    // neighbours are lost and their files come back from the rebuilt copies (restarts with
    // --steps 0 write nothing new, so the second rebuild reads the first one's output).
    // Sets of 4 with two members lost (one rank sends to both), uneven data; and sets of 2
    // with even data (both streams between the same two ranks, neither empty: a mismatched
    // order would swap their contents, and the CRC32 check would refuse them).
    for (set, first, second, data) in
        [("4", &["n0", "n2"][..], &["n1", "n3"][..], &["--uneven"][..]), ("2", &["n1", "n2"], &["n0", "n3"], &[])]
    {
        let mut job = job("PARTNER", &["n0", "n1", "n2", "n3"]);
        job.set("SCR_MPI_BUF_SIZE", "4096").set("SCR_SET_SIZE", set);
        checkpoint(&job, "1", data);
        for lost in [first, second] {
            for n in lost {
                job.lose_node(n);
            }
            let r = restarted(&job, 1, &[data, &["--steps", "0"]].concat());
            let want = format!("rebuilt cached dataset 1 for {} rank(s)", lost.len());
            assert!(r.stderr.contains(&want), "sets of {set}, lost {lost:?}\n{}", r.dump());
        }
    }
}

#[test]
fn a_rank_whose_files_the_rebuild_read_is_not_checked_again() {
    // n1 is lost: rank 0, its left neighbour, sends its own files for rank 1's partner copy
    // and checks them on the way, so the restart check does not read them a second time
    let mut job = job("PARTNER", &["n0", "n1", "n2", "n3"]);
    job.set("SCR_DEBUG", "1");
    checkpoint(&job, "1", &[]);
    job.lose_node("n1");
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
    let skipped = "rank 0's part of cached dataset 1 was checked against its CRC32s while it was rebuilt";
    assert!(r.stderr.contains(skipped), "{}", r.dump());
}

#[test]
fn a_partner_survivor_the_rebuild_did_not_read_is_still_checked() {
    // n2 is lost: n3 sends its copy of rank 2's files and n1 its own files; n3's own file
    // (damaged here) and n0's are not read by the rebuild, so the restart check reads them,
    // finds the flipped byte and rebuilds rank 3 from n0's copy
    let job = job("PARTNER", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "1", &[]);
    flip_byte(&job, "n3", "ckpt.1/rank_3.ckpt", 777, 0x10);
    job.lose_node("n2");
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("CRC32 is"), "{}", r.dump());
    assert_eq!(r.stderr.matches("rebuilt cached dataset 1 for 1 rank(s)").count(), 2, "{}", r.dump());
}

#[test]
fn a_damaged_survivor_and_a_lost_node_never_hand_over_a_wrong_byte() {
    // ckpt.2 has a flipped byte on n0 and n2 is lost: two damaged members of one XOR set, so
    // ckpt.2 is dropped; ckpt.1 is rebuilt (every byte checked on the way) and restarted
    let mut job = job("XOR", &["n0", "n1", "n2", "n3"]);
    checkpoint(&job, "2", &[]);
    flip_byte(&job, "n0", "ckpt.2/rank_0.ckpt", 4321, 0x08);
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = restarted(&job, 1, &[]);
    assert!(r.stderr.contains("CRC32 is") && r.stderr.contains("deleting dataset 2 from cache"), "{}", r.dump());
    assert!(r.stderr.contains("rebuilt cached dataset 1 for 1 rank(s)"), "{}", r.dump());
}
