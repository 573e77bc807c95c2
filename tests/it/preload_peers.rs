//! Transparent mode, other ranks' files: after a checkpoint's sync point every rank lists,
//! stats and reads every rank's files of it, as on a plain shared file system; rank 0 can
//! check them all before it writes `latest` and remove them all; a restart with 2, 4 or 6
//! processes reads every file of a 4-process checkpoint. `examples/preload/peers.c` runs
//! plain and under the preload, on one node and on 4 simulated nodes; its lines must match.

use crate::common::{app, Job, Run};

fn exe() -> Vec<String> {
    vec![app("peers.c", &[]).display().to_string()]
}

/// The program's report lines with these tags, sorted (ranks print in any order).
fn lines(r: &Run, tags: &[&str]) -> Vec<String> {
    let mut v: Vec<String> =
        r.stdout.lines().filter(|l| tags.iter().any(|t| l.starts_with(t))).map(String::from).collect();
    v.sort();
    v
}

const LOOK: &[&str] =
    &["LIST", "STAT", "READ", "CHECKED", "LATEST", "CLEAN", "APPEND", "SHELL", "REWRITE", "RENAMED", "OVER"];

/// A plain run of `peers` with `np` processes in a directory of its own.
struct Plain {
    job: Job,
    dir: String,
}

impl Plain {
    fn new() -> Plain {
        let job = Job::new();
        let dir = job.root.join("plain");
        std::fs::create_dir_all(&dir).unwrap();
        Plain { dir: dir.display().to_string(), job }
    }

    fn run(&self, np: usize, args: &[&str]) -> Vec<String> {
        let mut all = vec![args[0].to_string(), self.dir.clone()];
        all.extend(args[1..].iter().map(|s| s.to_string()));
        let r = self.job.run_exe(np, &exe(), &all);
        assert_eq!(r.code, Some(0), "{}", r.dump());
        lines(&r, LOOK)
    }
}

fn run(job: &Job, np: usize, args: &[&str]) -> Run {
    let mut all = vec![args[0].to_string(), job.prefix.display().to_string()];
    all.extend(args[1..].iter().map(|s| s.to_string()));
    let r = job.run_exe(np, &exe(), &all);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    r
}

fn transparent(job: &mut Job) -> &mut Job {
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0")
}

fn parts_in_prefix(job: &Job) -> usize {
    std::fs::read_dir(job.prefix.join("ckpt.1")).map_or(0, |d| d.flatten().count())
}

#[test]
fn on_one_node_every_rank_lists_stats_reads_and_removes_every_rank_s_files() {
    let plain = Plain::new();
    let want = plain.run(4, &["write", "1"]);
    assert_eq!(want.iter().filter(|l| l.ends_with(" ok")).count(), 16, "{want:#?}");
    assert!(want.contains(&"CHECKED all=1".to_string()), "{want:#?}");
    let mut job = Job::new();
    transparent(&mut job);
    let got = run(&job, 4, &["write", "1"]);
    assert_eq!(lines(&got, LOOK), want, "{}", got.dump());
    assert_eq!(parts_in_prefix(&job), 0, "the checkpoint stays in cache (SCR_FLUSH=0)");
    // a relaunch sees them too (each rank's files of the cached checkpoint, shared at start)
    let again = run(&job, 4, &["read"]);
    assert_eq!(lines(&again, LOOK), plain.run(4, &["read"]), "{}", again.dump());
    // rank 1 appends to rank 0's file: it becomes rank 1's, with rank 0's bytes first
    let append = run(&job, 4, &["append", "1"]);
    assert_eq!(lines(&append, LOOK), plain.run(4, &["append", "1"]), "{}", append.dump());
    assert_eq!(lines(&append, &["APPEND"]).iter().filter(|l| l.ends_with(" ok")).count(), 4, "{}", append.dump());
    let again = run(&job, 4, &["read"]);
    assert_eq!(lines(&again, LOOK), plain.run(4, &["read"]), "{}", again.dump());
    // rank 1 truncates rank 0's file without O_CREAT, rank 2 its own, rank 3 renames a file
    // over rank 1's: each replaces the file, on every rank, also after a relaunch
    let over = run(&job, 4, &["overwrite", "1"]);
    let want = plain.run(4, &["overwrite", "1"]);
    assert_eq!(want.iter().filter(|l| l.starts_with("OVER") && l.ends_with(" ok")).count(), 12, "{want:#?}");
    assert_eq!(lines(&over, LOOK), want, "{}", over.dump());
    let again = run(&job, 4, &["read"]);
    assert_eq!(lines(&again, LOOK), plain.run(4, &["read"]), "{}", again.dump());
    // rank 0's shell (a process without MPI) sees the node's files and removes rank 3's
    let shell = run(&job, 4, &["shell", "1"]);
    let want = plain.run(4, &["shell", "1"]);
    assert!(want.contains(&"SHELL status=0: part.0 part.1 part.2 part.3 27".to_string()), "{want:#?}");
    assert_eq!(lines(&shell, LOOK), want, "{}", shell.dump());
    // rank 0 removes every rank's file and the directory; the others' go at the next sync point
    let clean = run(&job, 4, &["clean", "1"]);
    assert_eq!(lines(&clean, LOOK), plain.run(4, &["clean", "1"]), "{}", clean.dump());
    assert!(job.cached_files("part.").is_empty(), "no rank keeps a removed file: {:?}", job.cached_files("part."));
}

#[test]
fn a_rank_that_writes_no_file_sees_the_others() {
    // with 5 processes rank 4 writes no part: it lists (opendir and fdopendir), stats and
    // reads the 4 others', as on a plain file system
    let plain = Plain::new();
    let want = plain.run(5, &["write", "1"]);
    assert!(want.iter().any(|l| l.starts_with("LIST ckpt rank=4 n=4:")), "{want:#?}");
    let mut job = Job::new();
    transparent(&mut job);
    let got = run(&job, 5, &["write", "1"]);
    assert_eq!(lines(&got, LOOK), want, "{}", got.dump());
}

#[test]
fn on_several_nodes_other_nodes_files_are_listed_and_read_from_the_prefix_once_flushed() {
    let plain = Plain::new();
    let want = plain.run(4, &["write", "1"]);
    for (flush, asynchronous) in [("1", "0"), ("1", "1")] {
        let mut job = Job::cluster(&["a", "b", "c", "d"]);
        transparent(&mut job).set("SCR_FLUSH", flush).set("SCR_FLUSH_ASYNC", asynchronous);
        let got = run(&job, 4, &["write", "1"]);
        assert_eq!(lines(&got, LOOK), want, "SCR_FLUSH_ASYNC={asynchronous}\n{}", got.dump());
    }
    // only in the caches: every file is listed and stat-ed everywhere; another node's bytes
    // cannot be read (EREMOTE, said once), this node's can
    let mut job = Job::cluster(&["a", "a", "b", "b"]);
    transparent(&mut job);
    let got = run(&job, 4, &["write", "1"]);
    let look = |v: &[String], tag: &str| v.iter().filter(|l| l.starts_with(tag)).cloned().collect::<Vec<_>>();
    let got_lines = lines(&got, LOOK);
    for tag in ["LIST", "STAT", "CHECKED"] {
        assert_eq!(look(&got_lines, tag), look(&want, tag), "{tag}\n{}", got.dump());
    }
    for r in 0..4 {
        for w in 0..4 {
            let same_node = r / 2 == w / 2;
            let line = got_lines.iter().find(|l| l.starts_with(&format!("READ rank={r} part={w} "))).unwrap();
            assert_eq!(line.ends_with(" ok"), same_node, "{line}\n{}", got.dump());
            if !same_node {
                assert!(line.ends_with(&format!("errno={}", libc::EREMOTE)), "{line}");
            }
        }
    }
    assert!(got.stderr.contains("cannot be read from this node until the checkpoint is flushed"), "{}", got.dump());
    assert_eq!(parts_in_prefix(&job), 0);
    // the remedy for a restart: the checkpoint is copied to the prefix first
    job.set("SCR_FLUSH_ON_RESTART", "1");
    let again = run(&job, 4, &["read"]);
    assert_eq!(lines(&again, LOOK), plain.run(4, &["read"]), "{}", again.dump());
    assert_eq!(parts_in_prefix(&job), 4);
}

#[test]
fn a_four_process_checkpoint_is_read_whole_by_two_four_and_six_processes() {
    let plain = Plain::new();
    plain.run(4, &["write", "1"]);
    let want = |np: usize| {
        let want = plain.run(np, &["read"]);
        assert_eq!(want.iter().filter(|l| l.starts_with("READ") && l.ends_with(" ok")).count(), 4 * np);
        want
    };
    // one node: from its cache (and the prefix, where an elastic restart copies the rest)
    let mut job = Job::new();
    transparent(&mut job).set("SCR_RESTART_ELASTIC", "1");
    run(&job, 4, &["write", "1"]);
    let snap = job.snapshot();
    for np in [2, 4, 6] {
        job.restore(&snap);
        let got = run(&job, np, &["read"]);
        assert_eq!(lines(&got, LOOK), want(np), "{np} processes\n{}", got.dump());
    }
    // two nodes, the checkpoint only in their caches; each run reaches both (SINGLE keeps no
    // copy of a node's part elsewhere)
    let mut job = Job::cluster(&["a", "a", "b", "b"]);
    transparent(&mut job).set("SCR_RESTART_ELASTIC", "1");
    run(&job, 4, &["write", "1"]);
    let snap = job.snapshot();
    let maps: [&[&str]; 2] = [&["a", "b"], &["a", "b", "c", "d", "e", "f"]];
    for map in maps {
        job.restore(&snap);
        job.map(map);
        let np = map.len();
        let got = run(&job, np, &["read"]);
        assert_eq!(lines(&got, LOOK), want(np), "{np} processes on {map:?}\n{}", got.dump());
    }
}
