//! The collectives SCR makes per checkpoint (`SCR_DEBUG=1` reports them per dataset): on an
//! oversubscribed node each one costs a round of context switches, so a checkpoint makes a
//! few, not dozens. Counts, not timings, under real `mpirun` with 4 ranks; the programs
//! verify every byte they read back at restart.

use crate::common::{app, Job, Run};

/// At most this many collectives per transparent checkpoint (SINGLE, nothing else pending):
/// the sync point's agreement, the dataset names, the offers, the earlier version, the
/// start's eviction, the completion's exchange and its record (34 before they were merged).
const TRANSPARENT_BOUND: u64 = 8;

/// At most this many from `SCR_Start_output` to the end of `SCR_Complete_output` (SINGLE, no
/// flush): the start's check of name and flags (with its eviction) and its record, the
/// completion's exchange (every rank's outcome and names gathered to rank 0, its verdict
/// broadcast: two collectives, and no O(P) bytes on any other rank) and its record (23
/// before; 5 while the exchange was one allgather, which brought every rank every rank's
/// names).
const API_BOUND: u64 = 6;

/// Per dataset: (name, collectives, the whole report line), from rank 0's debug output.
fn reported(r: &Run) -> Vec<(String, u64, String)> {
    r.stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("DEBUG: rank 0 on ")?..];
            let rest = &rest[rest.find(": dataset ")? + 10..];
            let (head, tail) = rest.split_once("): ")?;
            let n = tail.split(" collectives").next()?.parse().ok()?;
            let name = head.split_once(" (")?.1.to_string();
            Some((name, n, l.to_string()))
        })
        .collect()
}

fn check(r: &Run, bound: u64, at_least: usize) -> Vec<(String, u64, String)> {
    let got = reported(r);
    for (_, _, line) in &got {
        eprintln!("{line}");
    }
    assert!(got.len() >= at_least, "{at_least} datasets reported with their collectives: {got:?}\n{}", r.dump());
    for (name, n, line) in &got {
        assert!(*n <= bound, "dataset {name}: {n} collectives, more than {bound}: {line}\n{}", r.dump());
    }
    got
}

#[test]
fn a_transparent_checkpoint_makes_at_most_eight_collectives() {
    let exe = vec![app("ckpt_posix.c", &[]).display().to_string()];
    let mut job = Job::new();
    job.preload()
        .set("SCR_PRELOAD_PATTERNS", "ckpt.*/**")
        .set("SCR_COPY_TYPE", "SINGLE")
        .set("SCR_FLUSH", "0")
        .set("SCR_DEBUG", "1");
    let args = |steps: &str| -> Vec<String> {
        ["--dir", &job.prefix.display().to_string(), "--steps", steps, "--every", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let r = job.run_exe(4, &exe, &args("6"));
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let got = check(&r, TRANSPARENT_BOUND, 6);
    assert!(got.iter().any(|(n, _, _)| n == "ckpt.6"), "{got:?}");
    // the run's total is reported too
    assert!(r.stderr.contains("this run: "), "{}", r.dump());
    // and the checkpoints are right: the next run restarts from the last one, every byte read
    // back verified
    let r = job.run_exe(4, &exe, &args("8"));
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED 6 verified"), "{}", r.dump());
    check(&r, TRANSPARENT_BOUND, 2);
}

#[test]
fn an_api_checkpoint_makes_at_most_six_collectives() {
    let mut job = Job::new();
    job.set("SCR_COPY_TYPE", "SINGLE").set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
    let r = job.run("test_api", &["--steps", "5", "--files", "3"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let got = check(&r, API_BOUND, 5);
    assert!(got.iter().all(|(_, _, l)| l.contains("SCR_Start_output to SCR_Complete_output")), "{got:?}");
    let r = job.run("test_api", &["--steps", "7", "--files", "3"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // (test_api read back and verified every byte of it: a wrong byte fails the run)
    assert!(r.has("RESTARTED ckpt.5 step=5"), "{}", r.dump());
    check(&r, API_BOUND, 2);
}

/// Rank 0 decides a completion from every rank's names: 100 files per rank do not fit the
/// slot each rank sends it, so the verdict's broadcast first asks for the rest (a gatherv) and
/// a second one brings it. The checkpoints complete, and the restart reads every byte back.
#[test]
fn names_that_overflow_the_gather_slot_still_complete_the_checkpoint() {
    let mut job = Job::new();
    job.set("SCR_COPY_TYPE", "SINGLE").set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
    let r = job.run("test_api", &["--steps", "3", "--files", "100"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let got = check(&r, API_BOUND + 3, 3);
    // the first completion asked for the rest of the names
    assert!(got.iter().any(|(_, n, _)| *n > API_BOUND), "{got:?}");
    let r = job.run("test_api", &["--steps", "4", "--files", "100"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED ckpt.3 step=3"), "{}", r.dump());
}
