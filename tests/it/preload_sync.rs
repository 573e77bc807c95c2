//! Transparent mode's sync points inside the application's own collectives: a small world
//! `MPI_Allreduce` with a predefined operation carries the agreement as extra elements, a
//! world `MPI_Barrier` is replaced by it (on one node, in quiet stretches, it defers it and is
//! followed by it when a rank posted news), and on one node any other world allreduce agrees on
//! the node board around it. The application's results must be exactly what
//! they are without the preload, and the checkpoints must complete at the same collectives
//! as with a separate agreement (under real `mpirun`, 4 ranks).

use crate::common::{app, Job};

/// Every combination of operation (SUM MAX MIN PROD LOR BOR LAND BAND), type (int, long,
/// long long, unsigned, float, double, int64_t), in place or not and count (1..130, across
/// the 512-byte limit) gives the same bytes as without the preload, while checkpoints are
/// written, held open across reductions (by rank 0 only), and removed in between;
/// each checkpoint is complete at the latest when the 8th reduction after its last close
/// returns (`DEFER_LIMIT`: reductions that cannot carry the agreement defer it, at most that
/// many in a row). Reductions on a duplicate of the world carry the agreement too; those on
/// halves of it do not.
/// On one node the reductions that cannot carry it agree on the node board instead, around
/// the application's own reduction (in quiet stretches they defer it, longer than elsewhere
/// but ended by a rank's news, see the test of news below): none has a separate one.
#[test]
fn allreduce_results_stay_exact_while_carrying_the_agreement() {
    exact(false, None);
}

/// The same on two nodes, where there is no node board: the reductions that cannot carry the
/// agreement defer it or have it separately.
#[test]
fn allreduce_results_stay_exact_on_two_nodes_deferring_the_agreement() {
    exact(false, Some(&["a", "a", "b", "b"]));
}

/// An application that asked for `MPI_THREAD_MULTIPLE` may run world collectives from several
/// threads at once: its collectives are left alone and followed by the separate agreement,
/// with the same results and the same checkpoints.
#[test]
fn thread_multiple_applications_keep_the_separate_agreement() {
    exact(true, None);
}

/// How many sync points attempted completion (`SCR_DEBUG=1`'s line at the end of the run).
fn attempts(r: &crate::common::Run) -> u64 {
    r.stderr
        .lines()
        .find_map(|l| l.strip_suffix(" sync points attempted completion"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", r.dump()))
}

/// The counts of `SCR_DEBUG=1`'s sync-point line: total, barriers that were the agreement,
/// allreduces that carried it, agreements on the node board, separate ones, deferred ones.
fn via_counts(line: &str) -> [u64; 6] {
    let counts: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    counts[counts.len() - 6..].try_into().unwrap_or_else(|_| panic!("{line}"))
}

/// Each of the 4 ranks wrote `lines` results (one per reduction) to `out.<rank>` in the job's
/// root, the same without (`plain`) and with (`job`) the preload.
fn same_results(plain: &Job, job: &Job, lines: usize) {
    for rank in 0..4 {
        let name = format!("out.{rank}");
        let (a, b) = (
            std::fs::read_to_string(plain.root.join(&name)).unwrap(),
            std::fs::read_to_string(job.root.join(&name)).unwrap(),
        );
        assert_eq!(a.lines().count(), lines, "rank {rank}: one line per reduction");
        for (x, y) in a.lines().zip(b.lines()) {
            assert_eq!(x, y, "rank {rank}: without (left) and with (right) the preload");
        }
        assert_eq!(a, b, "rank {rank}");
    }
}

fn exact(threads: bool, nodes: Option<&[&str]>) {
    let exe = vec![app("allreduce_exact.c", &[]).display().to_string()];
    let args = |job: &Job, out: &str| vec![job.prefix.display().to_string(), job.root.join(out).display().to_string()];
    let plain = Job::new();
    let p = plain.run_exe(4, &exe, &args(&plain, "out"));
    assert_eq!(p.code, Some(0), "without the preload: {}", p.dump());
    let mut job = nodes.map_or_else(Job::new, Job::cluster);
    job.preload()
        .set("SCR_PRELOAD_PATTERNS", "ckpt.*/**")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1")
        .set("SCR_CACHE_SIZE", "64");
    if threads {
        job.set("EXACT_THREAD_MULTIPLE", "1");
    }
    let r = job.run_exe(4, &exe, &args(&job, "out"));
    assert_eq!(r.code, Some(0), "under the preload: {}", r.dump());
    same_results(&plain, &job, 1248 + 30);
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    let n: usize = r.stderr.lines().find_map(|l| l.strip_prefix("CHECKPOINTS ")).and_then(|v| v.parse().ok()).unwrap();
    assert_eq!(n, 31, "{}", r.dump());
    for k in 1..=n {
        let done = format!("(ckpt.{k}, checkpoint) complete");
        let synced = format!("SYNCED ckpt.{k}\n");
        let (Some(at_done), Some(at_synced)) = (r.stderr.find(&done), r.stderr.find(&synced)) else {
            panic!("ckpt.{k} not complete or not synced: {}", r.dump());
        };
        // complete by the 8th reduction after its last close (rank 0 held one of its files
        // open across the reductions in between: not before the close)
        assert!(at_done < at_synced, "ckpt.{k} complete within 8 reductions: {}", r.dump());
        let versions = if k < n { 2 } else { 1 };
        assert_eq!(
            r.stderr.matches(&done).count(),
            versions,
            "ckpt.{k}: its own and the removals' version: {}",
            r.dump()
        );
    }
    // the agreement travelled in the application's collectives: every reduction of at most
    // 512 bytes (812 of the 1248, and the 30 on duplicates of the world) carried it, except
    // float and double SUM and PROD (76), the final barrier was it (or, deferred with news,
    // was followed by it at once); the larger reductions and
    // those 76 (436) had a separate one or deferred it (and MPI_Finalize's sync point, when
    // it runs one, had one); the 30 on halves of the world were no sync points. Under
    // MPI_THREAD_MULTIPLE nothing carries it: the 1248 + 30 reductions have it separately or
    // defer it.
    let line = r.stderr.lines().find(|l| l.contains(" sync points: ")).unwrap_or_else(|| panic!("{}", r.dump()));
    let [total, barriers, carried, board, separate, deferred] = via_counts(line);
    let deferrable = if threads {
        assert_eq!((barriers, carried, board), (0, 0, 0), "{line}");
        1248 + 30
    } else {
        assert_eq!((barriers, carried), (1, 812 + 30), "{line}");
        436
    };
    assert_eq!(total, barriers + carried + board + separate + deferred, "{line}");
    // the agreements not deferred: on one node on the board (MPI_Finalize's point, when it
    // runs one, separately), elsewhere separately
    let agreed = if nodes.is_none() && !threads {
        assert!(separate <= 1, "{line}");
        board + separate
    } else {
        assert_eq!(board, 0, "{line}");
        separate
    };
    // (the final barrier comes after rank 0 closed its held file: with news, the agreement
    // follows it at once; MPI_Finalize's point, when it runs one, never defers); deferral only
    // between checkpoints (after 8 agreements that found nothing closed, removed or renamed),
    // so about half of them (the checkpoint every 40 reductions makes 3 events)
    let at_end = agreed + deferred - deferrable;
    assert!(at_end <= if threads { 2 } else { 1 }, "{line}");
    assert!(deferred * 3 >= deferrable && deferred < deferrable, "{line}");
    // rank 0's held file kept the checkpoint's closed files waiting across ~35 reductions per
    // checkpoint: completion was attempted only after something closed or was removed (about
    // 3 per checkpoint) and, for the held-file report, every 25th sync point with a file open,
    // not at every one of them (1151 attempts)
    let tried = attempts(&r);
    assert!(tried <= 6 * n as u64, "{tried} attempts for {n} checkpoints: {}", r.dump());
    // the bytes are SCR's: the last checkpoint in cache, rank 0's held file in it
    // (on two nodes: rank 0's on node a, rank 3's on node b)
    let cached = |needle: &str, node: &str| -> Vec<String> {
        match nodes {
            None => job.cached_files(needle),
            Some(_) => job.node_files(node, needle).iter().map(|p| p.display().to_string()).collect(),
        }
    };
    let held: Vec<String> = cached(&format!("ckpt.{n}/held.dat"), "a");
    assert_eq!(held.len(), 1, "{:?}", cached("", "a"));
    assert_eq!(std::fs::read(&held[0]).unwrap(), b"held");
    let rank3 = cached(&format!("ckpt.{n}/rank_3.dat"), "b");
    assert_eq!(rank3.len(), 1);
    let bytes = std::fs::read(&rank3[0]).unwrap();
    assert_eq!(bytes.len(), 4096);
    assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i * 7 + n * 3 + 3) as u8));
    assert!(!job.prefix.join(format!("ckpt.{n}/rank_3.dat")).exists(), "the file went to cache");
}

/// Floating-point SUM and PROD results are bitwise those of a run without the preload even
/// when the MPI library changes algorithm at 512 bytes (an Open MPI rules file: recursive
/// doubling up to 512 bytes, ring above, which sums each element in another order): the
/// agreement never rides in them (4 more elements would cross the threshold), it follows
/// them. 2, 3, 4 and 5 ranks; counts 63-65 doubles and 127-129 floats straddle the limit.
#[test]
fn float_sums_stay_bitwise_when_the_algorithm_changes_by_size() {
    let exe = vec![app("allreduce_exact.c", &[]).display().to_string()];
    let mut preloaded = Vec::new();
    for np in 2..=5 {
        let mut outs = Vec::new();
        for preload in [false, true] {
            let mut job = Job::new();
            let rules = job.root.join("allreduce.rules");
            let mut text = String::from("1\n2\n4\n");
            for size in 2..=5 {
                text += &format!("{size}\n2\n0 3 0 0\n513 4 0 0\n");
            }
            std::fs::write(&rules, text).unwrap();
            job.set("OMPI_MCA_coll_tuned_use_dynamic_rules", "1")
                .set("OMPI_MCA_coll_tuned_dynamic_rules_filename", &rules.display().to_string())
                .set("EXACT_FLOAT_SUM", "1");
            if preload {
                job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
            }
            let args = vec![job.prefix.display().to_string(), job.root.join("out").display().to_string()];
            let r = job.run_exe(np, &exe, &args);
            assert_eq!(r.code, Some(0), "{np} ranks, preload {preload}: {}", r.dump());
            let texts: Vec<String> =
                (0..np).map(|k| std::fs::read_to_string(job.root.join(format!("out.{k}"))).unwrap()).collect();
            outs.push((r, texts));
        }
        for rank in 0..np {
            let (a, b) = (&outs[0].1[rank], &outs[1].1[rank]);
            assert_eq!(a.lines().count(), 104 + 30, "{np} ranks, rank {rank}");
            for (x, y) in a.lines().zip(b.lines()) {
                assert_eq!(x, y, "{np} ranks, rank {rank}: without (left) and with (right) the preload");
            }
        }
        preloaded.push(outs.pop().unwrap().0);
    }
    // no float reduction carried the agreement: on this one node they agreed on the board or,
    // between checkpoints, deferred it
    for r in &preloaded {
        assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
        let line = r.stderr.lines().find(|l| l.contains(" sync points: ")).unwrap_or_else(|| panic!("{}", r.dump()));
        let [_, _, carried, board, separate, deferred] = via_counts(line);
        assert_eq!(carried, 30, "only the long SUMs on duplicates of the world: {line}");
        assert!(separate <= 1, "{line}");
        assert!(board + separate + deferred == 104 || board + separate + deferred == 105, "{line}");
        assert!(deferred * 3 >= 104 && deferred < 104, "{line}");
    }
}

/// A sync point decides what completes with the file table locked, then the runtime forms
/// and flushes the checkpoint without it: another thread's calls on a file the checkpoint does
/// not take (stat, open, read, close of input.dat) return while the synchronous flush waits.
/// The order of events decides, not time: rank 0's side thread holds the index lock the flush
/// needs, and releases it only after its calls returned and /proc/locks still showed the
/// flush waiting (a library holding the table through the flush deadlocks there and the
/// program's alarm ends the run).
#[test]
fn a_second_thread_is_not_blocked_by_a_synchronous_flush() {
    let exe = vec![app("thread_during_flush.c", &["-pthread"]).display().to_string()];
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "1").set("SCR_FLUSH_ASYNC", "0");
    let r = job.run_exe(4, &exe, &[job.prefix.display().to_string()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let events = [
        "SIDE holds the index lock\n",
        "SIDE the flush waits for the index lock\n",
        "SIDE input.dat ok while the flush waited: still waiting\n",
        "SIDE released the index lock\n",
        "MAIN ckpt.1 complete\n",
    ];
    let at: Vec<usize> =
        events.iter().map(|e| r.stderr.find(e).unwrap_or_else(|| panic!("no {e:?}: {}", r.dump()))).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "events out of order: {}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    // the checkpoint was flushed: its bytes are in the prefix, and the index has it complete
    for rank in 0..4usize {
        let bytes = std::fs::read(job.prefix.join(format!("ckpt.1/rank_{rank}.dat"))).unwrap();
        assert_eq!(bytes.len(), 1 << 20, "rank {rank}");
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i * 7 + rank) as u8), "rank {rank}");
    }
    assert_eq!(
        std::fs::read(job.prefix.join("input.dat")).unwrap(),
        b"input bytes the side thread reads during the flush\n"
    );
    let index = job.index().to_string();
    assert!(index.contains("ckpt.1"), "{index}");
}

/// Quantum ESPRESSO's shape: a rank removes a file of a checkpoint while another rank still
/// writes one of its files, across 200 barriers. The removal waits for that file, and so
/// does the completion it asks for: it is attempted once, not at every barrier (plus the
/// look for a file held open too long every 25 sync points). The new version then holds
/// what a plain file system would: the removed file gone, the late file there, after a
/// relaunch too.
#[test]
fn a_removal_waiting_for_an_open_file_is_attempted_once() {
    let exe = vec![app("remove_while_open.c", &[]).display().to_string()];
    let plain = Job::new();
    let d = plain.root.join("plain");
    std::fs::create_dir_all(&d).unwrap();
    let d = d.display().to_string();
    for mode in ["write", "list"] {
        let r = plain.run_exe(4, &exe, &[mode.into(), d.clone()]);
        assert_eq!(r.code, Some(0), "{}", r.dump());
    }
    let want = plain.run_exe(4, &exe, &["list".into(), d]);
    assert!(want.has("KEPT held.dat rank_0.dat rank_2.dat rank_3.dat"), "{}", want.dump());
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
    let p = job.prefix.display().to_string();
    let r = job.run_exe(4, &exe, &["write".into(), p.clone()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let tried = attempts(&r);
    // the first version, the removal, the close, MPI_Finalize's point and 8 looks for a file
    // held open (every 25 of the 200 barriers): not one per barrier
    assert!(tried <= 16, "{tried} completion attempts over 200 barriers: {}", r.dump());
    assert!(job.cached_files("ckpt.1/rank_1.dat").is_empty(), "{:?}", job.cached_files("ckpt.1/"));
    assert_eq!(job.cached_files("ckpt.1/held.dat").len(), 1, "{:?}", job.cached_files("ckpt.1/"));
    let got = job.run_exe(4, &exe, &["list".into(), p]);
    assert!(got.has("KEPT held.dat rank_0.dat rank_2.dat rank_3.dat"), "{}", got.dump());
}

/// `quiet_sums.c` (with `mode`, its optional last argument) on one node, 4 ranks, without and
/// with the preload: each rank's `lines` results are the same, and each of its 4 changes is
/// complete before rank 0 says `SYNCED` for its round (and after the round before's); the
/// removal made a version of ckpt.3 without rank 2's file. The job, and the counts of
/// `SCR_DEBUG=1`'s sync-point line ([`via_counts`]).
fn quiet_run(mode: &[&str], lines: usize) -> (Job, [u64; 6]) {
    let exe = vec![app("quiet_sums.c", &[]).display().to_string()];
    let args = |job: &Job| {
        let mut a = vec![job.prefix.display().to_string(), job.root.join("out").display().to_string()];
        a.extend(mode.iter().map(|m| m.to_string()));
        a
    };
    let plain = Job::new();
    let p = plain.run_exe(4, &exe, &args(&plain));
    assert_eq!(p.code, Some(0), "without the preload: {}", p.dump());
    let mut job = Job::new();
    job.preload()
        .set("SCR_PRELOAD_PATTERNS", "ckpt.*/**")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1")
        .set("SCR_CACHE_SIZE", "8");
    let r = job.run_exe(4, &exe, &args(&job));
    assert_eq!(r.code, Some(0), "under the preload: {}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{}", r.dump());
    same_results(&plain, &job, lines);
    let at = |needle: &str, nth: usize| {
        r.stderr
            .match_indices(needle)
            .nth(nth)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no {needle:?} #{nth}: {}", r.dump()))
    };
    for (round, name, nth) in [(1, "ckpt.1", 0), (2, "ckpt.2", 0), (3, "ckpt.3", 0), (4, "ckpt.3", 1)] {
        let done = at(&format!("({name}, checkpoint) complete"), nth);
        assert!(done < at(&format!("SYNCED {round}\n"), 0), "round {round}: {name} late: {}", r.dump());
        if round > 1 {
            assert!(done > at(&format!("SYNCED {}\n", round - 1), 0), "round {round}: {}", r.dump());
        }
    }
    assert!(job.cached_files("ckpt.3/rank_2.dat").is_empty(), "{:?}", job.cached_files("ckpt.3/"));
    assert_eq!(job.cached_files("ckpt.3/rank_").len(), 3, "{:?}", job.cached_files("ckpt.3/"));
    let line = r.stderr.lines().find(|l| l.contains(" sync points: ")).unwrap_or_else(|| panic!("{}", r.dump()));
    let counts = via_counts(line);
    (job, counts)
}

/// OpenFOAM's shape on one node: long quiet stretches of floating-point sums (300 each) with
/// checkpoint files closed or removed by a single rank in between. The sums that cannot carry
/// the agreement defer it for up to `BOARD_WINDOW` (64) in a row, yet each change is complete
/// by the second sum after it: the rank that changed its files says so on the node board at
/// the next sum, and every rank agrees at the one after (whichever rank it is, a close or a
/// removal). The sums' results are those of a run without the preload.
#[test]
fn news_on_the_node_board_ends_a_long_deferral_at_the_next_sum() {
    // each change complete before rank 0 left the second sum after it
    let (job, [total, _, _, board, separate, deferred]) = quiet_run(&[], 4 * 302);
    assert_eq!(job.cached_files("ckpt.1/rank_3.dat").len(), 1, "{:?}", job.cached_files("ckpt.1/"));
    // 1208 sums: after each change 8 agreements make a quiet stretch again, then one agreement
    // per 64 sums (about 5 per stretch of 300) where a window of 8 would have needed 37
    let line = format!("total {total}, board {board}, separate {separate}, deferred {deferred}");
    assert_eq!(total, 4 * 302 + 1, "{line}");
    assert!(separate <= 1, "{line}");
    assert!(board <= 80, "{line}");
    assert_eq!(board + separate + deferred, total, "{line}");
}

/// On one node, a world barrier in a quiet stretch is the application's own and defers the
/// agreement (posting news on the node board, as a sum does); one after which some rank's files
/// changed runs the agreement right after it, so a checkpoint every rank closed before it is
/// complete when it returns, whichever rank changed it, a close or a removal (the last one by
/// a child process of the rank, `system("rm ...")`).
#[test]
fn a_quiet_barrier_on_the_node_board_defers_and_one_after_a_change_completes_it() {
    // each change complete before rank 0 left the first barrier after it
    let (_, [total, barriers, _, board, separate, deferred]) = quiet_run(&["barrier"], 4 * 301);
    // 1204 barriers: after each change 8 agreements make a quiet stretch again, then one per
    // 64 barriers; the other barriers deferred theirs (where every one was the agreement), except
    // the 4 with news, each followed by the agreement (one sync point, a barrier's)
    let line = format!("total {total}, barriers {barriers}, board {board}, separate {separate}, deferred {deferred}");
    assert_eq!(total, 4 * 301 + 1, "{line}");
    assert_eq!(board, 0, "{line}");
    assert!(separate <= 1, "{line}");
    assert!(barriers <= 80 && deferred >= 4 * 301 - 80, "{line}");
    assert_eq!(barriers + separate + deferred, total, "{line}");
}
