//! The job commands on real prefix directories, with real MPI runs of `examples/c/test_api.c`
//! (4 ranks): `scr_halt` against a running job (each option, combinations, concurrent
//! writers), `scr_index` on complete, incomplete, failed and damaged datasets, scavenge after a
//! killed run that lost a node, `scr_run` relaunching, stopping and excluding a node, and bad
//! input. A running job is held at a known point with test_api's `--pause-before` gate, so
//! every outcome is decided by the order of events, never by timing.

use crate::common;
use crate::common::{Job, Spawned};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZE: &str = "300007";

fn bin(name: &str) -> PathBuf {
    match name {
        "scr_halt" => env!("CARGO_BIN_EXE_scr_halt").into(),
        "scr_index" => env!("CARGO_BIN_EXE_scr_index").into(),
        "scr_run" => env!("CARGO_BIN_EXE_scr_run").into(),
        "scr_scavenge" => env!("CARGO_BIN_EXE_scr_scavenge").into(),
        "scr_copy" => env!("CARGO_BIN_EXE_scr_copy").into(),
        "scr_prerun" => env!("CARGO_BIN_EXE_scr_prerun").into(),
        "scr_should_exit" => env!("CARGO_BIN_EXE_scr_should_exit").into(),
        other => panic!("no binary {other}"),
    }
}

use crate::common::Run as Out;

/// Run one of the commands with the job's environment.
fn cmd(job: &Job, name: &str, args: &[&str]) -> Out {
    let out = job.command(bin(name)).args(args).stdin(Stdio::null()).output().unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `mpirun` command line of test_api for `scr_run` (through sim-node.sh on a cluster).
fn launch(job: &Job, sim: bool, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec!["mpirun".into(), "-np".into(), "4".into()];
    if sim {
        v.push(common::repo().join("scripts/sim-node.sh").display().to_string());
    }
    v.push(common::program("test_api").display().to_string());
    v.extend(args.iter().map(|s| s.to_string()));
    let _ = job;
    v
}

/// `scr_run` with `args`, in the background.
fn bg(job: &Job, args: &[String]) -> Spawned {
    let mut c = job.command(bin("scr_run"));
    c.args(args);
    Spawned::start(c)
}

/// A gate directory for test_api's `--pause-before`.
fn gate(job: &Job) -> PathBuf {
    let g = job.root.join("gate");
    std::fs::create_dir_all(&g).unwrap();
    g
}

fn resume(g: &Path, step: u32, how: &str) {
    common::resume_gate(g, step, how);
}

fn halt_json(job: &Job) -> serde_json::Value {
    job.meta(&job.prefix.join(".scr/halt.scr"))
}

fn runs_started(out: &Out) -> usize {
    out.stderr.lines().filter(|l| l.starts_with("scr_run: run ") && l.contains(" on nodes ")).count()
}

/// A job run by scr_run with up to 3 runs, paused before step `pause`; `f` acts while it waits
/// (it gets the gate directory), then the gate opens.
fn halted_run(job: &Job, steps: u32, pause: u32, f: impl FnOnce(&Path)) -> Out {
    let g = gate(job);
    let gs = g.display().to_string();
    let mut args: Vec<String> = vec!["--delay".into(), "0".into()];
    args.extend(launch(
        job,
        false,
        &["--size", "100000", "--steps", &steps.to_string(), "--pause-before", &pause.to_string(), &gs],
    ));
    let mut bg = bg(job, &args);
    bg.wait_for(&g.join(format!("paused.{pause}")));
    f(&g);
    resume(&g, pause, "go");
    bg.finish()
}

fn local_job() -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_RUNS", "3").set("SCR_CACHE_SIZE", "2");
    job
}

#[test]
fn halt_without_options_stops_after_the_next_checkpoint_and_the_job_is_not_relaunched() {
    let job = local_job();
    let out = halted_run(&job, 6, 3, |_| {
        let h = cmd(&job, "scr_halt", &[]);
        assert_eq!(h.code, Some(0), "{}", h.dump());
        assert!(h.stdout.contains("exit reason:      JOB_HALTED"), "{}", h.dump());
    });
    assert!(
        out.all().contains("CHECKPOINT ckpt.3 ok=1") && out.all().contains("SHOULD_EXIT at ckpt.3"),
        "{}",
        out.dump()
    );
    assert!(!out.all().contains("ckpt.4"), "{}", out.dump());
    assert_eq!(runs_started(&out), 1, "{}", out.dump());
    assert!(out.stderr.contains("not relaunching: halt condition: exit reason \"JOB_HALTED\""), "{}", out.dump());
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_eq!(halt_json(&job)["exit_reason"], "JOB_HALTED");
    // The checkpoint existed only in cache (SCR_FLUSH=0): scr_run scavenged it.
    let ix = job.index();
    assert_eq!(ix["datasets"]["3"]["complete"], true, "{ix}\n{}", out.dump());
    assert!(job.prefix.join("ckpt.3/rank_3.ckpt").exists());
    // A new scr_run refuses to start while the reason stands; --unset-reason lets it run.
    let again = job.command(bin("scr_run")).args(launch(&job, false, &["--steps", "1"])).output().unwrap();
    let text = String::from_utf8_lossy(&again.stderr);
    assert!(text.contains("not starting the job: halt condition") && !text.contains("run 1"), "{text}");
    assert_eq!(cmd(&job, "scr_halt", &["--unset-reason"]).code, Some(0));
    let again =
        job.command(bin("scr_run")).args(launch(&job, false, &["--size", "100000", "--steps", "1"])).output().unwrap();
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("RESTARTED ckpt.3 step=3"), "{text}");
}

#[test]
fn halt_checkpoints_with_halt_exit_ends_the_run_inside_the_library() {
    let mut job = local_job();
    job.set("SCR_HALT_EXIT", "1");
    let out = halted_run(&job, 6, 2, |_| {
        let h = cmd(&job, "scr_halt", &["--checkpoints", "2"]);
        assert_eq!(h.code, Some(0), "{}", h.dump());
        assert!(h.stdout.contains("checkpoints left: 2"), "{}", h.dump());
    });
    // ckpt.2 leaves one to go, ckpt.3 the last: the library exits inside its Complete_output.
    assert!(out.all().contains("CHECKPOINT ckpt.2 ok=1"), "{}", out.dump());
    assert!(!out.all().contains("CHECKPOINT ckpt.3") && !out.all().contains("DONE"), "{}", out.dump());
    assert_eq!(runs_started(&out), 1, "{}", out.dump());
    let h = halt_json(&job);
    assert_eq!(h["checkpoints_left"], 0, "{h}");
    assert_eq!(h["exit_reason"], "no checkpoints left (scr_halt --checkpoints)", "{h}");
    assert!(out.stderr.contains("not relaunching: halt condition"), "{}", out.dump());
    assert_eq!(job.index()["datasets"]["3"]["complete"], true, "ckpt.3 scavenged\n{}", out.dump());
}

#[test]
fn halt_times_and_seconds_stop_the_job_only_when_they_hold() {
    // Each case pauses before step 2 (after ckpt.1), sets conditions, and expects the job to
    // stop after ckpt.2 (satisfied) or to run all 4 steps (not satisfied).
    type Case<'a> = (&'a [&'a str], bool, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (&["--after", "2000-01-01T00:00:00"], true, &[]),
        (&["--after", "+1d"], false, &[]),
        (&["--before", "now+1h", "--seconds", "7200"], true, &[]),
        (&["--before", "+1d", "--seconds", "60"], false, &[]),
        (&["--before", "now+1h"], false, &[]), // no halt seconds: no effect
        (&["--seconds", "3600"], true, &[("SCR_END_TIME", "END")]),
        (&["--checkpoints", "5", "--after", "@946684800"], true, &[]), // the earlier one wins
        // The words SCR users type (GNU date's forms).
        (&["--after", "yesterday 3pm"], true, &[]),
        (&["--after", "tomorrow 8am"], false, &[]),
        (&["--before", "+2 hours", "--seconds", "10800"], true, &[]),
    ];
    for (opts, stops, env) in cases {
        let mut job = local_job();
        for (k, v) in *env {
            let v = if *v == "END" { (scr::identity::now_secs() + 600).to_string() } else { v.to_string() };
            job.set(k, &v);
        }
        let out = halted_run(&job, 4, 2, |_| {
            let h = cmd(&job, "scr_halt", opts);
            assert_eq!(h.code, Some(0), "{opts:?}\n{}", h.dump());
        });
        assert_eq!(runs_started(&out), 1, "{opts:?}\n{}", out.dump());
        if *stops {
            assert!(out.all().contains("SHOULD_EXIT at ckpt.2"), "{opts:?}\n{}", out.dump());
            assert!(!out.all().contains("ckpt.3"), "{opts:?}\n{}", out.dump());
            let why = out.stderr.lines().find(|l| l.contains("not relaunching: halt condition:")).unwrap_or_default();
            assert!(
                why.contains("halt requested") || why.contains("s remain in the allocation"),
                "{opts:?}\n{}",
                out.dump()
            );
        } else {
            assert!(out.all().contains("DONE steps=1..4"), "{opts:?}\n{}", out.dump());
            assert!(out.stderr.contains("the job completed after 1 run(s)"), "{opts:?}\n{}", out.dump());
        }
    }
}

#[test]
fn halt_times_in_words_are_stored_as_the_moment_they_name() {
    // TZ=UTC makes "today" and "3pm" the same for the command and the check; a test that
    // runs across midnight may see either day.
    let mut job = local_job();
    job.set("TZ", "UTC");
    let day = 86400;
    let t0 = scr::identity::now_secs();
    let out = cmd(&job, "scr_halt", &["--before", "3pm today", "--after", "tomorrow 8am"]);
    let t1 = scr::identity::now_secs();
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let h = halt_json(&job);
    let midnight = |t: i64| t - t.rem_euclid(day);
    let before = h["exit_before"].as_i64().unwrap();
    assert!([midnight(t0), midnight(t1)].iter().any(|m| before == m + 15 * 3600), "{h}");
    let after = h["exit_after"].as_i64().unwrap();
    assert!([midnight(t0), midnight(t1)].iter().any(|m| after == m + day + 8 * 3600), "{h}");
    assert!(out.stdout.contains("T08:00:00+00:00") && out.stdout.contains("T15:00:00+00:00"), "{}", out.dump());
    // A time already past is taken, with a note.
    assert_eq!(out.stderr.contains("note: --before \"3pm today\""), t0 > midnight(t0) + 15 * 3600, "{}", out.dump());
    // Relative forms count from now, the short ones of scripts too.
    for (form, secs) in [("+2 hours", 7200), ("now+90m", 5400), ("+1 day", day), ("@1234567890", 0)] {
        let t0 = scr::identity::now_secs();
        let out = cmd(&job, "scr_halt", &["--after", form]);
        let t1 = scr::identity::now_secs();
        assert_eq!(out.code, Some(0), "{form}\n{}", out.dump());
        let after = halt_json(&job)["exit_after"].as_i64().unwrap();
        if secs == 0 {
            assert_eq!(after, 1_234_567_890, "{form}");
            assert!(
                out.stderr.contains("note: --after \"@1234567890\" is 2009-02-13T23:31:30+00:00"),
                "{}",
                out.dump()
            );
        } else {
            assert!((t0 + secs..=t1 + secs).contains(&after), "{form}: {after} not in {t0}+{secs}..{t1}+{secs}");
        }
    }
}

#[test]
fn unset_and_remove_let_the_job_run_on() {
    let job = local_job();
    let out = halted_run(&job, 3, 2, |_| {
        for args in [&["--checkpoints", "1"][..], &["--unset-checkpoints"], &[], &["--unset-reason", "--list"]] {
            let h = cmd(&job, "scr_halt", args);
            assert_eq!(h.code, Some(0), "{args:?}\n{}", h.dump());
        }
        let h = halt_json(&job);
        assert!(h["checkpoints_left"].is_null() && h["exit_reason"].is_null(), "{h}");
    });
    assert!(out.all().contains("DONE steps=1..3"), "{}", out.dump());

    let job = local_job();
    let out = halted_run(&job, 3, 2, |_| {
        assert_eq!(cmd(&job, "scr_halt", &["--after", "2000-01-01"]).code, Some(0));
        let h = cmd(&job, "scr_halt", &["--remove"]);
        assert_eq!(h.code, Some(0), "{}", h.dump());
        assert!(!job.prefix.join(".scr/halt.scr").exists());
        let l = cmd(&job, "scr_halt", &["--list"]);
        assert!(l.stdout.contains("no halt conditions are set"), "{}", l.dump());
    });
    assert!(out.all().contains("DONE steps=1..3"), "{}", out.dump());
    assert_eq!(halt_json(&job)["exit_reason"], "SCR_FINALIZE_CALLED");
}

#[test]
fn halt_immediate_stops_the_current_run() {
    let job = local_job();
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut args: Vec<String> = vec!["--delay".into(), "0".into()];
    args.extend(launch(&job, false, &["--size", "100000", "--steps", "5", "--pause-before", "3", &gs]));
    let mut bg = bg(&job, &args);
    bg.wait_for(&g.join("paused.3"));
    let h = cmd(&job, "scr_halt", &["--immediate"]);
    assert_eq!(h.code, Some(0), "{}", h.dump());
    assert!(h.stdout.contains("stopping run 1") && h.stdout.contains("the run has stopped"), "{}", h.dump());
    let out = bg.finish();
    assert!(!out.all().contains("ckpt.3") && !out.all().contains("DONE"), "{}", out.dump());
    assert_eq!(runs_started(&out), 1, "{}", out.dump());
    assert!(out.stderr.contains("not relaunching: halt condition: exit reason \"JOB_HALTED\""), "{}", out.dump());
    // The newest checkpoint was scavenged from cache.
    assert_eq!(job.index()["datasets"]["2"]["complete"], true, "{}", out.dump());
    // Nothing left to stop now.
    let h = cmd(&job, "scr_halt", &["--immediate"]);
    assert!(h.stdout.contains("is not running; nothing to stop"), "{}", h.dump());
}

#[test]
fn concurrent_halt_writers_lose_nothing() {
    let job = local_job();
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    let path = job.prefix.join(".scr/halt.scr");
    scr::state::halt::Halt::update(&path, |h| h.checkpoints_left = Some(5)).unwrap();
    // Hold the lock as the running library does mid-update; scr_halt must wait for it.
    let lock = scr::persist::Lock::acquire(&path).unwrap();
    let mut child =
        job.command(bin("scr_halt")).args(["--after", "@4000000000"]).stdout(Stdio::piped()).spawn().unwrap();
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(scr::persist::lock_path(&path)).unwrap().ino()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // A blocked lock request shows in /proc/locks as a "->" line naming the lock file's
        // inode (open-file-description locks show no process id).
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        let on_file = |l: &str| l.split_whitespace().any(|w| w.ends_with(&format!(":{ino}")));
        if locks.lines().any(|l| l.contains("->") && on_file(l)) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("scr_halt finished ({st}) while the halt file's lock was held: it did not wait for the lock");
        }
        assert!(Instant::now() < deadline, "scr_halt never waited for the lock:\n{locks}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The library's own update while scr_halt waits: the checkpoint countdown.
    let mut h = scr::state::halt::Halt::load(&path).unwrap();
    h.checkpoints_left = Some(4);
    scr::persist::write_atomic(&path, "halt", &h).unwrap();
    drop(lock);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let h = halt_json(&job);
    assert_eq!(h["checkpoints_left"], 4, "the library's update survived: {h}");
    assert_eq!(h["exit_after"], 4_000_000_000i64, "{h}");

    // Many writers at once, each setting its own field: every field ends up set.
    let kids: Vec<Child> = (0..6)
        .flat_map(|i| {
            let job = &job;
            [
                vec!["--checkpoints".to_string(), (10 + i).to_string()],
                vec!["--before".into(), format!("@{}", 5_000_000_000i64 + i)],
                vec!["--seconds".into(), (100 + i).to_string()],
                vec!["--unset-after".into()],
            ]
            .into_iter()
            .map(move |a| job.command(bin("scr_halt")).args(a).stdout(Stdio::null()).spawn().unwrap())
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let h = halt_json(&job);
    assert!(h["checkpoints_left"].is_u64() && h["exit_before"].is_i64() && h["halt_seconds"].is_u64(), "{h}");
    assert!(h["exit_after"].is_null(), "{h}");
}

#[test]
fn halt_before_the_first_run_creates_the_halt_file_and_the_run_honours_it() {
    let job = local_job();
    assert!(!job.prefix.join(".scr").exists());
    // A batch script sets conditions before the job's first run (user guide 2.9.3, NOTE).
    let out = cmd(&job, "scr_halt", &["--checkpoints", "2"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let halt = job.prefix.join(".scr/halt.scr");
    assert!(out.stdout.contains(&format!("created {}", halt.display())), "{}", out.dump());
    assert!(out.stdout.contains("checkpoints left: 2"), "{}", out.dump());
    assert_eq!(halt_json(&job)["checkpoints_left"], 2);
    // -v shows what was there before the change (read under the lock) and after it.
    let out = cmd(&job, "scr_halt", &["-v", "--seconds", "30"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(!out.stdout.contains("created"), "{}", out.dump());
    let (before, after) = out.stdout.split_once("after the change:").expect("verbose output");
    assert!(before.contains("before the change:") && before.contains("checkpoints left: 2"), "{}", out.dump());
    assert!(!before.contains("halt seconds:"), "{}", out.dump());
    assert!(after.contains("halt seconds:     30") && after.contains("checkpoints left: 2"), "{}", out.dump());
    // The first run reads the file: it stops after two checkpoints.
    let r = job.run("test_api", &["--size", "100000", "--steps", "5"]);
    assert!(r.has("SHOULD_EXIT at ckpt.2") && !r.stdout.contains("ckpt.3"), "{}", r.dump());
}

#[test]
fn should_exit_tells_a_looping_job_script_when_to_stop() {
    let job = local_job();
    // No job has run here: the answer cannot be found, and the safe answer is to stop.
    let out = cmd(&job, "scr_should_exit", &[]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stderr.contains("is not an SCR prefix directory"), "{}", out.dump());
    // A run that crashed: the job may run again.
    let r = job.run("test_api", &["--size", "100000", "--steps", "2", "--crash-after", "1"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{}", r.dump());
    let out = cmd(&job, "scr_should_exit", &["--verbose"]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stdout.contains("may run again") && out.stdout.contains("a run needs 1"), "{}", out.dump());
    // This host is down: no node left for a run.
    let host = scr::identity::host_name();
    let out = cmd(&job, "scr_should_exit", &["--down", &host]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("stop: 0 usable node(s) left, a run needs 1"), "{}", out.dump());
    assert_eq!(cmd(&job, "scr_should_exit", &["--down", "n["]).code, Some(0), "bad usage: stop");
    // scr_halt asks the job to stop.
    assert_eq!(cmd(&job, "scr_halt", &[]).code, Some(0));
    let out = cmd(&job, "scr_should_exit", &[]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("JOB_HALTED"), "{}", out.dump());
    // The application finished (SCR_Finalize records it): stop.
    assert_eq!(cmd(&job, "scr_halt", &["--unset-reason"]).code, Some(0));
    assert_eq!(cmd(&job, "scr_should_exit", &[]).code, Some(1));
    let r = job.run("test_api", &["--size", "100000", "--steps", "2"]);
    assert!(r.has("RESTARTED ckpt.1 step=1") && r.has("DONE steps=2..3"), "{}", r.dump());
    let out = cmd(&job, "scr_should_exit", &[]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("SCR_FINALIZE_CALLED"), "{}", out.dump());
}

#[test]
fn halt_bad_input_changes_nothing() {
    let job = local_job();
    // A path that does not exist is refused; --list and --remove create nothing where no job ran.
    let missing = job.root.join("no-such-prefix").display().to_string();
    let out = cmd(&job, "scr_halt", &[&missing]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stderr.contains(&format!("prefix directory {missing}")), "{}", out.dump());
    assert!(!job.root.join("no-such-prefix").exists());
    for args in [&["--list"][..], &["--remove"]] {
        let out = cmd(&job, "scr_halt", args);
        assert_eq!(out.code, Some(1), "{args:?}\n{}", out.dump());
        assert!(out.stderr.contains("is not an SCR prefix directory"), "{}", out.dump());
        assert!(!job.prefix.join(".scr").exists());
    }
    // --create is still accepted.
    let out = cmd(&job, "scr_halt", &["--create", "--seconds", "600"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let path = job.prefix.join(".scr/halt.scr");
    let before = std::fs::read(&path).unwrap();
    for (args, needle) in [
        (&["--bogus"][..], "unknown option --bogus"),
        (&["--before", "tomorow"], "--before: \"tomorow\" is not a time; accepted forms:"),
        (&["--after", "3pm todya"], "--after: \"3pm todya\" is not a time"),
        (&["--after", "2023-02-30T10:00:00"], "--after"),
        (&["--checkpoints", "ten"], "--checkpoints \"ten\""),
        (&["--checkpoints"], "--checkpoints needs a value"),
        (&["--seconds", "5", "--unset-seconds"], "contradict"),
        (&["--remove", "--checkpoints", "3"], "--remove"),
    ] {
        let out = cmd(&job, "scr_halt", args);
        assert_eq!(out.code, Some(2), "{args:?}\n{}", out.dump());
        assert!(out.stderr.contains(needle), "{args:?}: wanted {needle}\n{}", out.dump());
        assert_eq!(std::fs::read(&path).unwrap(), before, "{args:?} changed the halt file");
    }
    // A damaged halt file is named and left as it is.
    let mut damaged = before.clone();
    let n = damaged.len();
    damaged[n - 4] ^= 0x01;
    std::fs::write(&path, &damaged).unwrap();
    for args in [&["--checkpoints", "3"][..], &["--list"], &[]] {
        let out = cmd(&job, "scr_halt", args);
        assert_eq!(out.code, Some(1), "{args:?}\n{}", out.dump());
        assert!(out.stderr.contains("halt.scr") && out.stderr.contains("damaged"), "{}", out.dump());
        assert_eq!(std::fs::read(&path).unwrap(), damaged);
    }
    // scr_run refuses to start the job on a damaged halt file.
    let out = job.command(bin("scr_run")).args(launch(&job, false, &["--steps", "1"])).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("halt.scr") && text.contains("damaged") && !text.contains("run 1"), "{text}");
    assert!(!job.prefix.join(".scr/run.scr").exists());
    // --help documents every option.
    let out = cmd(&job, "scr_halt", &["--help"]);
    for o in [
        "--checkpoints",
        "--before",
        "--after",
        "--seconds",
        "--immediate",
        "--list",
        "--unset-reason",
        "--remove",
        "--verbose",
    ] {
        assert!(out.stdout.contains(o), "{o}");
    }
}

#[test]
fn scr_index_lists_and_manages_complete_incomplete_failed_and_damaged_datasets() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "1");
    let r = job.run("test_api", &["--steps", "3", "--size", "100000"]);
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    // ckpt.3 fails its restart (a corrupted byte in the prefix): the restart uses ckpt.2.
    let victim = job.prefix.join("ckpt.3/rank_1.ckpt");
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[500] ^= 0x40;
    std::fs::write(&victim, &bytes).unwrap();
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "0", "--size", "100000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    // ckpt.1 loses a file: its rebuild finds it incomplete.
    std::fs::remove_file(job.prefix.join("ckpt.1/rank_0.ckpt")).unwrap();
    let out = cmd(&job, "scr_index", &["--build", "1"]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stdout.contains("INCOMPLETE") && out.stdout.contains("ckpt.1/rank_0.ckpt"), "{}", out.dump());

    let out = cmd(&job, "scr_index", &[]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let row = |name: &str| {
        out.stdout.lines().find(|l| l.ends_with(name) || l.contains(&format!("{name} "))).unwrap().to_string()
    };
    assert!(out.stdout.starts_with("  DSET VALID FLUSHED             CUR NAME"), "{}", out.stdout);
    assert!(row("ckpt.3").contains("NO") && row("ckpt.3").contains("failed"), "{}", out.stdout);
    assert!(row("ckpt.2").contains("YES") && row("ckpt.2").contains('*'), "{}", out.stdout);
    assert!(row("ckpt.1").contains("NO") && row("ckpt.1").contains("incomplete"), "{}", out.stdout);
    let json: serde_json::Value = serde_json::from_str(&cmd(&job, "scr_index", &["--json"]).stdout).unwrap();
    assert_eq!(json["current"], "ckpt.2");
    let ids: Vec<u64> = json["datasets"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![3, 2, 1]);
    assert_eq!(json["datasets"][0]["failed"], true);
    assert_eq!(json["datasets"][2]["complete"], false);

    // --current refuses unusable checkpoints.
    for (name, why) in [("ckpt.3", "failed"), ("ckpt.1", "incomplete"), ("ckpt.9", "no dataset named ckpt.9")] {
        let out = cmd(&job, "scr_index", &["--current", name]);
        assert_eq!(out.code, Some(1), "{}", out.dump());
        assert!(out.stderr.contains(why), "{}", out.dump());
    }
    // --drop forgets, --add brings back (after checking the files).
    let out = cmd(&job, "scr_index", &["--drop", "ckpt.2"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(!cmd(&job, "scr_index", &[]).stdout.contains("ckpt.2"));
    assert!(job.prefix.join("ckpt.2/rank_0.ckpt").exists(), "--drop keeps the files");
    let out = cmd(&job, "scr_index", &["--add", "ckpt.2"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_eq!(cmd(&job, "scr_index", &["--current", "ckpt.2"]).code, Some(0));
    let out = cmd(&job, "scr_index", &["--add", "ckpt.1"]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stderr.contains("not complete") && out.stderr.contains("--build 1"), "{}", out.dump());
    assert_eq!(cmd(&job, "scr_index", &["--drop", "nope"]).code, Some(1));
    // The restart uses the current checkpoint.
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "0", "--size", "100000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    // --drop-after forgets every newer entry (ckpt.3) and keeps its files.
    let out = cmd(&job, "scr_index", &["--drop-after", "ckpt.2"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("dropped ckpt.3 (dataset 3)"), "{}", out.dump());
    let json: serde_json::Value = serde_json::from_str(&cmd(&job, "scr_index", &["--json"]).stdout).unwrap();
    let ids: Vec<u64> = json["datasets"].as_array().unwrap().iter().map(|d| d["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![2, 1]);
    assert_eq!(json["current"], "ckpt.2");
    assert!(job.prefix.join("ckpt.3/rank_0.ckpt").exists(), "--drop-after keeps the files");
    assert_eq!(cmd(&job, "scr_index", &["--drop-after", "nope"]).code, Some(1));

    // Bad input and a damaged index: named, non-zero, nothing changed.
    let index = job.prefix.join(".scr/index.scr");
    for (args, code, needle) in [
        (&["--bogus"][..], 2, "unknown option --bogus"),
        (&["--build", "x"], 2, "--build \"x\""),
        (&["--drop", "a", "--current", "b"], 2, "one of"),
        (&["extra"], 2, "unexpected argument"),
        (&["--build", "42"], 1, "scr.dataset.42: no such dataset directory"),
    ] {
        let before = std::fs::read(&index).unwrap();
        let out = cmd(&job, "scr_index", args);
        assert_eq!(out.code, Some(code), "{args:?}\n{}", out.dump());
        assert!(out.stderr.contains(needle), "{args:?}: {needle}\n{}", out.dump());
        assert_eq!(std::fs::read(&index).unwrap(), before);
    }
    let elsewhere = job.root.join("not-a-prefix");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = cmd(&job, "scr_index", &["--prefix", &elsewhere.display().to_string()]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stderr.contains("not-a-prefix is not an SCR prefix directory"), "{}", out.dump());
    assert!(!elsewhere.join(".scr").exists());
    let summary = job.prefix.join(".scr/scr.dataset.2/summary.scr");
    let mut s = std::fs::read(&summary).unwrap();
    let n = s.len();
    s[n - 2] ^= 0x08;
    std::fs::write(&summary, &s).unwrap();
    let out = cmd(&job, "scr_index", &["--build", "2"]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(out.stderr.contains("summary.scr") && out.stderr.contains("damaged"), "{}", out.dump());
    // A damaged index is rebuilt from the dataset directories and kept aside: the listing goes
    // on from the rebuilt one and names what could not be indexed (ckpt.2's damaged summary).
    let mut bytes = std::fs::read(&index).unwrap();
    bytes[20] ^= 0x01;
    std::fs::write(&index, &bytes).unwrap();
    let out = cmd(&job, "scr_index", &[]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    for needle in ["index.scr is damaged", "index.scr.damaged.", "rebuilt", "dataset 2: ", "summary.scr"] {
        assert!(out.stderr.contains(needle), "{needle}\n{}", out.dump());
    }
    // ckpt.3 was dropped with --drop-after above: its directory says so and it stays dropped
    assert!(out.stdout.contains("ckpt.1") && !out.stdout.contains("ckpt.2"), "{}", out.dump());
    assert!(!out.stdout.contains("ckpt.3") && out.stderr.contains("dataset 3: dropped earlier"), "{}", out.dump());
    let kept = std::fs::read_dir(job.prefix.join(".scr")).unwrap().flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("index.scr.damaged.") && std::fs::read(e.path()).unwrap() == bytes
    });
    assert!(kept, "the damaged index is kept aside as it was");
    let again = cmd(&job, "scr_index", &[]);
    assert!(again.code == Some(0) && !again.stderr.contains("rebuilt"), "rebuilt once:\n{}", again.dump());
}

#[test]
fn scr_index_build_leaves_the_current_mark_and_one_entry_is_current() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_CACHE_SIZE", "1");
    let r = job.run("test_api", &["--steps", "3", "--size", "100000"]);
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    assert_eq!(cmd(&job, "scr_index", &["--current", "ckpt.2"]).code, Some(0));
    // rebuilding the newer ckpt.3 leaves the user's mark on ckpt.2, and says so
    let out = cmd(&job, "scr_index", &["--build", "3"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("the current mark stays on ckpt.2"), "{}", out.dump());
    let json: serde_json::Value = serde_json::from_str(&cmd(&job, "scr_index", &["--json"]).stdout).unwrap();
    assert_eq!(json["current"], "ckpt.2", "{json}");
    job.wipe_cache();
    let r = job.run("test_api", &["--steps", "1", "--size", "100000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.has("CHECKPOINT ckpt.3 ok=1"), "{}", r.dump());
    // two entries are called ckpt.3 (datasets 3 and 4): only the one a restart uses is current
    let json: serde_json::Value = serde_json::from_str(&cmd(&job, "scr_index", &["--json"]).stdout).unwrap();
    let current: Vec<(u64, &str)> = json["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["current"] == true)
        .map(|d| (d["id"].as_u64().unwrap(), d["name"].as_str().unwrap()))
        .collect();
    assert_eq!(current, vec![(4, "ckpt.3")], "{json}");
    let table = cmd(&job, "scr_index", &[]).stdout;
    assert_eq!(table.lines().filter(|l| l.contains(" * ")).count(), 1, "{table}");
    // the build of the older ckpt.3 leaves the mark alone too
    let out = cmd(&job, "scr_index", &["--build", "3"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    let json: serde_json::Value = serde_json::from_str(&cmd(&job, "scr_index", &["--json"]).stdout).unwrap();
    assert_eq!(json["datasets"][0]["current"], true, "{json}");
    assert_eq!(json["datasets"][1]["current"], false, "{json}");
}

fn cluster(scheme: &str) -> Job {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_COPY_TYPE", scheme).set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    job
}

fn sim_cmd() -> String {
    format!("env PMI_RANK=0 SIM_NODE_MAP={{node}} {}", common::repo().join("scripts/sim-node.sh").display())
}

/// Forget every node's storage (a new allocation) and run ranks on fresh nodes.
fn new_allocation(job: &mut Job) {
    std::fs::remove_dir_all(job.root.join("nodes")).unwrap();
    job.map(&["m0", "m1", "m2", "m3"]);
}

#[test]
fn scavenge_after_a_killed_run_rebuilds_a_lost_node_in_the_prefix() {
    for scheme in ["XOR", "RS", "PARTNER"] {
        let mut job = cluster(scheme);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--crash-after", "2"]);
        assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
        assert!(!job.prefix.join("ckpt.2").exists(), "SCR_FLUSH=0: only in cache");
        job.lose_node("n2");
        let out = cmd(&job, "scr_scavenge", &["--nodes", "n0,n1,n3", "--node-cmd", &sim_cmd()]);
        assert_eq!(out.code, Some(0), "{scheme}\n{}", out.dump());
        assert!(out.stdout.contains("rebuilt the files of rank(s) [2]"), "{scheme}\n{}", out.dump());
        assert!(job.prefix.join("ckpt.2/rank_2.ckpt").exists());
        assert_eq!(job.index()["datasets"]["2"]["complete"], true);
        // A new allocation has nothing in cache: the restart fetches the rebuilt files and
        // test_api checks every byte.
        new_allocation(&mut job);
        let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
        assert!(r.has("RESTARTED ckpt.2 step=2"), "{scheme}\n{}", r.dump());
        assert_eq!(job.index()["datasets"]["2"]["fetches"][0]["ok"], true);
    }
}

#[test]
fn scavenge_reports_what_redundancy_cannot_rebuild() {
    let job = cluster("XOR");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1", "--crash-after", "1"]);
    assert!(r.has("CRASH after ckpt.1"), "{}", r.dump());
    job.lose_node("n1");
    job.lose_node("n2");
    let out = cmd(&job, "scr_scavenge", &["--nodes", "n0,n3", "--node-cmd", &sim_cmd()]);
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert!(
        out.stdout.contains("INCOMPLETE") && out.stdout.contains("rank 1:") && out.stdout.contains("rank 2:"),
        "{}",
        out.dump()
    );
    assert!(out.stdout.contains("more than it can rebuild"), "{}", out.dump());
    let ix = job.index();
    assert_eq!(ix["datasets"]["1"]["complete"], false, "{ix}");
    let l = cmd(&job, "scr_index", &[]);
    assert!(l.stdout.lines().any(|r| r.contains("ckpt.1") && r.contains("NO")), "{}", l.dump());
    // Running the build again changes nothing and still says why.
    let b = cmd(&job, "scr_index", &["--build", "1", "--json"]);
    assert_eq!(b.code, Some(1), "{}", b.dump());
    let rep: serde_json::Value = serde_json::from_str(&b.stdout).unwrap();
    assert_eq!(rep["complete"], false);
    assert_eq!(rep["missing"].as_array().unwrap().len(), 2, "{rep}");
}

#[test]
fn scavenge_finishes_a_flush_that_was_cut_short() {
    use scr::state::flushfile::{FlushFile, Location};
    let mut job = cluster("XOR");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
    // The state a run killed during the flush of dataset 2 leaves: FLUSHING on every node, an
    // incomplete index entry, rank 0's file published, rank 1's half-written under its
    // temporary name.
    for n in ["n0", "n1", "n2", "n3"] {
        let files = job.node_files_named(n, "flush.scr");
        assert_eq!(files.len(), 1, "{n}: {files:?}");
        let mut f = FlushFile::load(&files[0]).unwrap();
        f.datasets.get_mut(&2).unwrap().location = Location::Flushing;
        f.save(&files[0]).unwrap();
    }
    let fm = scr::state::filemap::Filemap::load(&job.node_files_named("n0", "filemap_0.scrinfo")[0]).unwrap();
    let desc = fm.datasets[&2].desc.clone();
    scr::state::index::Index::update(&job.prefix.join(".scr/index.scr"), |ix| {
        let mut e = scr::ops::index::complete_entry(desc, None);
        e.complete = false;
        e.flushing = true;
        ix.datasets.insert(2, e);
    })
    .unwrap();
    std::fs::create_dir_all(job.prefix.join("ckpt.2")).unwrap();
    let cached0 = &job.node_files("n0", "ckpt.2/rank_0.ckpt")[0];
    std::fs::copy(cached0, job.prefix.join("ckpt.2/rank_0.ckpt")).unwrap();
    let part = job.prefix.join("ckpt.2/.rank_1.ckpt.scrpart");
    std::fs::write(&part, vec![7u8; 1000]).unwrap();
    assert_eq!(cmd(&job, "scr_index", &[]).stdout.lines().filter(|l| l.contains("did not finish")).count(), 1);

    let out = cmd(&job, "scr_scavenge", &["--node-cmd", &sim_cmd()]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert!(out.stderr.contains("dataset 2 was being flushed when the run ended"), "{}", out.dump());
    let ix = job.index();
    assert_eq!(ix["datasets"]["2"]["complete"], true, "{ix}");
    assert_eq!(ix["datasets"]["2"]["flushing"], false, "{ix}");
    assert!(!part.exists(), "the cut-short temporary file is gone");
    new_allocation(&mut job);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn scr_run_relaunches_after_a_rank_crash_and_stops_after_scr_runs() {
    // Rank 1 dies after ckpt.2; the relaunch restarts from cache and completes.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_RUNS", "5");
    let mut args = vec!["--delay".to_string(), "0".to_string()];
    args.extend(launch(&job, false, &["--steps", "4", "--crash-after", "2", "--crash-rank", "1"]));
    let out = bg(&job, &args).finish();
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_eq!(runs_started(&out), 2, "{}", out.dump());
    assert!(out.stdout.contains("RESTARTED ckpt.2 step=2") && out.stdout.contains("DONE steps=3..6"), "{}", out.dump());
    assert!(out.stderr.contains("run 1 exited with status") && out.stderr.contains("the job completed after 2 run(s)"));
    assert_eq!(job.index()["datasets"]["6"]["complete"], true, "the last checkpoint is scavenged");

    // Every run fails: SCR_RUNS=3 runs, each restarting from the previous one's checkpoint.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_RUNS", "3");
    let mut args = vec!["--delay".to_string(), "0".to_string()];
    args.extend(launch(&job, false, &["--steps", "5", "--crash-after-count", "1"]));
    let out = bg(&job, &args).finish();
    assert_eq!(out.code, Some(1), "{}", out.dump());
    assert_eq!(runs_started(&out), 3, "{}", out.dump());
    assert!(out.stderr.contains("run 3 of 3") && out.stderr.contains("not relaunching: SCR_RUNS=3 run(s) made"));
    assert!(out.stdout.contains("RESTARTED ckpt.1 step=1") && out.stdout.contains("RESTARTED ckpt.2 step=2"));
    assert_eq!(job.index()["datasets"]["3"]["complete"], true, "{}", out.dump());
}

#[test]
fn scr_run_excludes_a_lost_node_and_continues_on_a_spare() {
    let mut job = cluster("XOR");
    job.set("SIM_NODES", "n[0-4]").set("SCR_RUNS", "2");
    let g = gate(&job);
    let gs = g.display().to_string();
    let mut args = vec!["--delay".to_string(), "0".to_string()];
    args.extend(launch(&job, true, &["--size", SIZE, "--steps", "4", "--pause-before", "3", &gs]));
    let mut bg = bg(&job, &args);
    bg.wait_for(&g.join("paused.3"));
    // Node n2 fails while the job waits: its storage is gone, the run dies, and the operator
    // excludes it in the job's configuration file.
    job.lose_node("n2");
    std::fs::write(job.prefix.join(".scrconf"), "SCR_EXCLUDE_NODES=n2\n").unwrap();
    resume(&g, 3, "crash");
    let out = bg.finish();
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_eq!(runs_started(&out), 2, "{}", out.dump());
    assert!(out.stderr.contains("run 2 of 2 on nodes n0,n1,n4,n3 (rank to node: n0,n1,n4,n3)"), "{}", out.dump());
    assert!(out.stderr.contains("excluded nodes: n2"), "{}", out.dump());
    assert!(out.stderr.contains("rebuilt cached dataset 2 for 1 rank(s)"), "{}", out.dump());
    assert!(out.stdout.contains("RESTARTED ckpt.2 step=2") && out.stdout.contains("DONE steps=3..6"), "{}", out.dump());
    assert!(!job.node_dir("n2").exists(), "nothing ran on the excluded node");
    assert_eq!(job.node_files("n4", "ckpt.6/rank_2.ckpt").len(), 1, "rank 2 ran on the spare");
    // The scavenge copied the last checkpoint from the nodes of the last run.
    assert!(out.stderr.contains("scavenging the cache of node(s) n0,n1,n4,n3"), "{}", out.dump());
    assert_eq!(job.index()["datasets"]["6"]["complete"], true, "{}", out.dump());
}

#[test]
fn scr_run_bad_input_and_preload() {
    let job = local_job();
    let run = |args: &[&str]| {
        let o = job.command(bin("scr_run")).args(args).output().unwrap();
        Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    };
    for (args, code, needle) in [
        (&[][..], 2, "LAUNCHER"),
        (&["--bogus", "mpirun", "x"], 2, "unknown option --bogus"),
        (&["--runs", "0", "mpirun", "x"], 2, "--runs \"0\""),
        (&["no-such-launcher", "x"], 1, "launcher no-such-launcher not found"),
        (&["/nonexistent/launcher"], 1, "launcher /nonexistent/launcher not found"),
        (&["mpirun"], 2, "LAUNCHER [launcher options] PROG"),
        (&["--preload-lib", "/nonexistent/libscr_preload.so", "mpirun", "x"], 1, "preload library"),
    ] {
        let out = run(args);
        assert_eq!(out.code, Some(code), "{args:?}\n{}", out.dump());
        assert!(out.stderr.contains(needle), "{args:?}: {needle}\n{}", out.dump());
    }
    let mut bad = local_job();
    bad.set("SCR_RUNS", "often");
    let o = bad.command(bin("scr_run")).args(["--no-scavenge", "mpirun", "-np", "1", "true"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("SCR_RUNS=often (environment)"), "{text}");
    // A damaged index is rebuilt from the prefix (here: nothing to index) and kept aside;
    // the job's checks pass.
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    std::fs::write(job.prefix.join(".scr/index.scr"), "SCRMETA 1 index 2 00000000\n{}").unwrap();
    let p = cmd(&job, "scr_prerun", &[]);
    assert_eq!(p.code, Some(0), "{}", p.dump());
    assert!(p.stderr.contains("index.scr is damaged") && p.stderr.contains("rebuilt"), "{}", p.dump());
    std::fs::remove_file(job.prefix.join(".scr/index.scr")).unwrap();
    // scr_prerun reports and passes.
    let p = cmd(&job, "scr_prerun", &[]);
    assert_eq!(p.code, Some(0), "{}", p.dump());
    assert!(p.stdout.contains("ready"), "{}", p.dump());

    // Transparent mode: the application's environment names the preload library.
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "scr-preload"])
        .args(if common::target_dir().ends_with("release") { &["--release"][..] } else { &[] })
        .current_dir(common::repo())
        .status()
        .unwrap();
    assert!(status.success());
    let lib = common::target_dir().join("libscr_preload.so");
    let out = run(&["--preload", "--no-scavenge", "mpirun", "-np", "2", "printenv", "LD_PRELOAD"]);
    assert_eq!(out.code, Some(0), "{}", out.dump());
    assert_eq!(out.stdout.lines().filter(|l| *l == lib.display().to_string()).count(), 2, "{}", out.dump());
    assert!(out.stderr.contains(&format!("-x LD_PRELOAD={}", lib.display())), "{}", out.dump());
}
