//! `SCR_ENABLE=0` under real `mpirun` with 4 ranks: `SCR_Init` fails, every later call is a
//! no-op that answers as SCR 3 does, and nothing lands in the cache or the prefix's `.scr`;
//! under the preload an unmodified program runs as without it.

use crate::common;

use crate::common::{app, Job};

/// Files below `dir`, relative, sorted.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    common::walk(dir, &mut |p| out.push(p.strip_prefix(dir).unwrap().display().to_string()));
    out.sort();
    out
}

/// The program's own files, each rank's bytes; no SCR directory anywhere.
fn check_untouched(job: &Job, r: &common::Run) {
    let want: Vec<String> = (1..=2).flat_map(|s| (0..4).map(move |k| format!("ckpt.{s}/rank_{k}.ckpt"))).collect();
    let mut got: Vec<String> = files_under(&job.prefix).into_iter().filter(|f| f.starts_with("ckpt")).collect();
    got.sort();
    let mut want = want;
    want.sort();
    assert_eq!(got, want, "{}", r.dump());
    for s in 1..=2 {
        for k in 0..4 {
            let bytes = std::fs::read_to_string(job.prefix.join(format!("ckpt.{s}/rank_{k}.ckpt"))).unwrap();
            assert_eq!(bytes, format!("rank {k} step {s} of 4\n"));
        }
    }
    assert!(!job.prefix.join(".scr").exists(), "{:?}\n{}", files_under(&job.prefix), r.dump());
    assert!(!job.cache.exists(), "{:?}\n{}", files_under(&job.cache), r.dump());
}

#[test]
fn scr_enable_0_makes_init_fail_and_every_call_a_no_op() {
    for via_file in [false, true] {
        let mut job = Job::new();
        if via_file {
            // the user configuration file (<prefix>/.scrconf) disables SCR
            std::fs::write(job.prefix.join(".scrconf"), "SCR_ENABLE=0\n").unwrap();
        } else {
            job.set("SCR_ENABLE", "0");
        }
        let r = job.run("disabled", &[]);
        assert_eq!(r.code, Some(0), "{}", r.dump());
        assert!(r.has("INIT rc=1"), "{}", r.dump());
        // as SCR 3 disabled: no checkpoint needed, no restart, no exit, the name routed to
        // itself, every other call SCR_FAILURE, SCR_Config NULL; and the same on every rank
        assert!(
            r.has("CALLS need=1/0 have=1/0 start=1 route=0 same=1 complete=1 exit=1/0 config=null finalize=1 agree=1"),
            "{}",
            r.dump()
        );
        assert!(r.has("DONE verified=1"), "{}", r.dump());
        assert!(!r.stderr.contains("not an SCR parameter"), "{}", r.dump());
        check_untouched(&job, &r);
    }
}

#[test]
fn scr_enable_0_under_the_preload_leaves_an_unmodified_program_alone() {
    let posix = app("ckpt_posix.c", &[]).display().to_string();
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_ENABLE", "0");
    let args: Vec<String> = ["--dir", &job.prefix.display().to_string(), "--steps", "4", "--every", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = job.run_exe(4, std::slice::from_ref(&posix), &args);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("NO_RESTART") && r.has("DONE"), "{}", r.dump());
    // the checkpoints are where the program wrote them, as without the preload
    let ckpts: Vec<String> = files_under(&job.prefix).into_iter().filter(|f| f.starts_with("ckpt.")).collect();
    for s in [2, 4] {
        for k in 0..4 {
            let f = format!("ckpt.{s}/rank_{k}.dat");
            assert!(ckpts.contains(&f), "{f} missing: {ckpts:?}\n{}", r.dump());
        }
    }
    assert!(!job.prefix.join(".scr").exists(), "{:?}\n{}", files_under(&job.prefix), r.dump());
    assert!(!job.cache.exists(), "{:?}\n{}", files_under(&job.cache), r.dump());
    // and the next run restarts from the program's own pointer file, reading the prefix
    let r = job.run_exe(4, &[posix], &args);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED 4 verified"), "{}", r.dump());
    assert!(!job.prefix.join(".scr").exists(), "{}", r.dump());
}
