//! The event log (`SCR_LOG_ENABLE=1`) under real MPI with 4 ranks: the text log after
//! checkpoints and flushes, restart runs appending to it (from cache and from the prefix), a
//! rebuild after a lost node on the simulated cluster, halts, syslog datagrams on a socket the
//! test binds, and `scr_interval` reading a log a job wrote. No timing is asserted beyond
//! "positive".

use crate::common;
use crate::common::Job;
use scr::events::{parse_line, Event};
use std::path::{Path, PathBuf};

const SIZE: u64 = 100_000;

fn logging_job() -> Job {
    let mut job = Job::new();
    job.set("SCR_LOG_ENABLE", "1").set("SCR_LOG_SYSLOG_ENABLE", "0");
    job
}

fn log_path(job: &Job) -> PathBuf {
    job.prefix.join(".scr/log")
}

/// Every line of the job's log, parsed (a line that does not parse fails the test).
fn events(job: &Job) -> Vec<Event> {
    let text = std::fs::read_to_string(log_path(job)).expect("the job wrote .scr/log");
    text.lines().map(|l| parse_line(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn names(evs: &[Event]) -> Vec<String> {
    evs.iter().map(|e| e.name.clone()).collect()
}

fn find<'a>(evs: &'a [Event], name: &str) -> Vec<&'a Event> {
    evs.iter().filter(|e| e.name == name).collect()
}

fn run_ok(job: &Job, args: &[&str]) -> common::Run {
    let r = job.run("test_api", args);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    r
}

#[test]
fn checkpoints_flushes_and_restarts_are_logged_in_order() {
    let mut job = logging_job();
    let missing_socket = job.root.join("no-syslog-here");
    job.set("SCR_FLUSH", "2")
        .set("SCR_LOG_SYSLOG_ENABLE", "1")
        .set("SCR_LOG_SYSLOG_SOCKET", &missing_socket.display().to_string());
    let size = SIZE.to_string();
    let r = run_ok(&job, &["--size", &size, "--steps", "4"]);
    // A missing syslog socket: one warning naming it and the key; the text log still works.
    let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains("syslog socket")).collect();
    assert_eq!(warned.len(), 1, "{}", r.dump());
    assert!(warned[0].contains(&missing_socket.display().to_string()) && warned[0].contains("SCR_LOG_SYSLOG_SOCKET"));

    let evs = events(&job);
    let mut expected = vec!["RUN_START"];
    for k in 1..=4 {
        expected.push("CKPT_START");
        if k % 2 == 0 {
            expected.extend(["FLUSH_START", "FLUSH_END"]);
        }
        if k > 1 {
            // One checkpoint fits in cache (SCR_CACHE_SIZE=1): the previous one leaves once
            // the next is complete, never before.
            expected.push("EVICT");
        }
        expected.push("CKPT_END");
    }
    expected.push("RUN_END");
    assert_eq!(names(&evs), expected);

    let host = scr::identity::host_name();
    let jobid = evs[0].get("jobid").expect("jobid").to_string();
    assert!(!jobid.is_empty());
    for e in &evs {
        assert_eq!(e.get("jobid"), Some(jobid.as_str()), "{e:?}");
        assert_eq!(e.get("host"), Some(host.as_str()), "{e:?}");
    }
    let start = &evs[0];
    assert_eq!((start.get("ranks"), start.get("nodes")), (Some("4"), Some("1")));
    assert_eq!(start.get("prefix"), Some(job.prefix.display().to_string().as_str()));
    assert!(start.get("version").unwrap().starts_with("scr-rs "));

    let total = (4 * SIZE).to_string();
    for (k, e) in find(&evs, "CKPT_START").iter().enumerate() {
        assert_eq!(e.get("name"), Some(format!("ckpt.{}", k + 1).as_str()));
        assert_eq!(e.get("ckpt"), Some((k + 1).to_string().as_str()));
        assert!(e.num("compute_secs").unwrap() >= 0.0, "{e:?}");
    }
    for (k, e) in find(&evs, "CKPT_END").iter().enumerate() {
        assert_eq!(e.get("name"), Some(format!("ckpt.{}", k + 1).as_str()));
        assert_eq!(e.get("valid"), Some("1"));
        assert_eq!(e.get("bytes"), Some(total.as_str()), "{e:?}");
        assert_eq!(e.get("files"), Some("4"));
        assert_eq!(e.get("scheme"), Some("SINGLE"));
        assert!(e.num("secs").unwrap() > 0.0 && e.num("mibps").is_some(), "{e:?}");
    }
    for e in find(&evs, "FLUSH_START") {
        assert_eq!((e.get("mode"), e.get("bytes")), (Some("sync"), Some(total.as_str())), "{e:?}");
    }
    for e in find(&evs, "FLUSH_END") {
        assert_eq!((e.get("bytes"), e.get("files"), e.get("mode")), (Some(total.as_str()), Some("4"), Some("sync")));
        assert!(e.num("secs").unwrap() > 0.0, "{e:?}");
    }
    // A checkpoint's cost includes the synchronous flush inside SCR_Complete_output.
    let ckpt2 = find(&evs, "CKPT_END")[1];
    assert!(ckpt2.num("secs").unwrap() >= find(&evs, "FLUSH_END")[0].num("secs").unwrap());
    let end = evs.last().unwrap();
    assert_eq!(end.get("reason"), Some("SCR_FINALIZE_CALLED"));
    assert!(end.num("secs").unwrap() > 0.0);

    // A restart from cache appends; the first run's lines stay as they were.
    let first = std::fs::read_to_string(log_path(&job)).unwrap();
    let r = run_ok(&job, &["--size", &size, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.4 step=4"), "{}", r.dump());
    let text = std::fs::read_to_string(log_path(&job)).unwrap();
    assert!(text.starts_with(&first));
    let evs = events(&job);
    let second: Vec<Event> = evs[expected.len()..].to_vec();
    let restart = find(&second, "RESTART");
    assert_eq!(restart.len(), 1, "{:?}", names(&second));
    assert_eq!((restart[0].get("name"), restart[0].get("from")), (Some("ckpt.4"), Some("cache")));
    assert_eq!(names(&second)[..2], ["RESTART", "RUN_START"], "restored during SCR_Init, which then ends");

    // Cache lost: the restart fetches from the prefix (ckpt.5 was flushed at SCR_Finalize).
    job.wipe_cache();
    let r = run_ok(&job, &["--size", &size, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.5 step=5"), "{}", r.dump());
    let evs = events(&job);
    let fetch = find(&evs, "FETCH");
    assert_eq!(fetch.len(), 1);
    assert_eq!((fetch[0].get("name"), fetch[0].get("ok")), (Some("ckpt.5"), Some("1")));
    assert_eq!((fetch[0].get("bytes"), fetch[0].get("files")), (Some(total.as_str()), Some("4")));
    assert!(fetch[0].num("secs").unwrap() > 0.0);
    let last_restart = find(&evs, "RESTART").pop().unwrap().clone();
    assert_eq!(last_restart.get("from"), Some("prefix"));
    assert_eq!(find(&evs, "RUN_START").len(), 3);
    assert_eq!(find(&evs, "RUN_END").len(), 3);

    interval_on_the_real_log(&job);
}

fn scr_interval(job: &Job, args: &[&str]) -> common::Run {
    let out = job.command(env!("CARGO_BIN_EXE_scr_interval")).args(args).output().unwrap();
    common::Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `scr_interval` on the log the runs above wrote, and on bad input.
fn interval_on_the_real_log(job: &Job) {
    let evs = events(job);
    let measured = find(&evs, "CKPT_END").iter().filter(|e| e.get("valid") == Some("1")).count();
    let r = scr_interval(job, &["--mtbf", "24h"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.stdout.contains(&format!("checkpoints measured:     {measured}\n")), "{}", r.dump());
    assert!(r.stdout.contains("SCR_CHECKPOINT_SECONDS="), "{}", r.dump());

    let r = scr_interval(job, &["--failures-per-day", "2", "--json", "--prefix", &job.prefix.display().to_string()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["checkpoints"], measured);
    assert_eq!(j["mtbf_secs"], 43200.0);
    assert_eq!(j["intervals"], measured);
    assert!(j["cost_secs"].as_f64().unwrap() > 0.0);
    assert!(j["checkpoint_seconds"].as_u64().unwrap() >= 1);
    assert_eq!(j["restarts"], 1, "the fetch");

    // Malformed lines are skipped with a warning naming the line.
    let damaged = job.root.join("damaged.log");
    let mut text = std::fs::read_to_string(log_path(job)).unwrap();
    let n = text.lines().count();
    text.push_str("2026-01-01T00:00:00.000000+00:00 CKPT_END jobid=x valid=1 secs=\"cut off\n");
    std::fs::write(&damaged, text).unwrap();
    let r = scr_interval(job, &["--mtbf", "3600", "--log", &damaged.display().to_string()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.stderr.contains(&format!("damaged.log:{}:", n + 1)) && r.stderr.contains("skipped"), "{}", r.dump());

    // Bad durations: usage errors naming the option.
    for (args, opt) in [
        (&["--mtbf", "soon"][..], "--mtbf"),
        (&["--mtbf", "0"][..], "--mtbf"),
        (&["--failures-per-day=-1"][..], "--failures-per-day"),
    ] {
        let r = scr_interval(job, args);
        assert_eq!(r.code, Some(2), "{args:?}\n{}", r.dump());
        assert!(r.stderr.contains(opt), "{}", r.dump());
    }
    let r = scr_interval(job, &[]);
    assert_eq!(r.code, Some(2), "no failure rate\n{}", r.dump());

    // No log: exit 1, naming the path and how to get one.
    let empty = job.root.join("empty-prefix");
    std::fs::create_dir_all(&empty).unwrap();
    let r = scr_interval(job, &["--mtbf", "1d", "--prefix", &empty.display().to_string()]);
    assert_eq!(r.code, Some(1), "{}", r.dump());
    assert!(r.stderr.contains(&empty.join(".scr/log").display().to_string()), "{}", r.dump());
    assert!(r.stderr.contains("SCR_LOG_ENABLE=1"), "{}", r.dump());

    // A log without a completed checkpoint: exit 1.
    let r = scr_interval(job, &["--mtbf", "1d", "--jobid", "no-such-job"]);
    assert_eq!(r.code, Some(1), "{}", r.dump());
    assert!(r.stderr.contains("no completed checkpoint"), "{}", r.dump());
    assert!(scr_interval(job, &["--help"]).stdout.contains("SYNOPSIS"));
}

#[test]
fn a_rebuild_after_a_lost_node_is_logged() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_LOG_ENABLE", "1").set("SCR_LOG_SYSLOG_ENABLE", "0");
    job.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = run_ok(&job, &["--size", "30000", "--steps", "1"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    job.lose_node("n2");
    job.map(&["n0", "n1", "n4", "n3"]);
    let r = run_ok(&job, &["--size", "30000", "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());

    let evs = events(&job);
    let rebuild = find(&evs, "REBUILD");
    assert_eq!(rebuild.len(), 1, "{:?}", names(&evs));
    let e = rebuild[0];
    assert_eq!(
        (e.get("dset"), e.get("scheme"), e.get("lost"), e.get("ok")),
        (Some("1"), Some("XOR"), Some("2"), Some("1"))
    );
    assert!(e.num("secs").unwrap() > 0.0);
    let at = evs.iter().position(|e| e.name == "REBUILD").unwrap();
    assert_eq!(evs[at + 1].name, "RESTART", "{:?}", names(&evs));
    assert_eq!(evs[at + 1].get("from"), Some("cache"));
    // the CKPT_END of the first run names its scheme; each node logged as itself
    assert_eq!(find(&evs, "CKPT_END")[0].get("scheme"), Some("XOR"));
    assert!(evs.iter().all(|e| e.get("host") == Some("n0")), "rank 0 logs, on node n0");
}

fn end_time_in(secs: u64) -> String {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + secs).to_string()
}

#[test]
fn halts_are_logged() {
    let mut job = logging_job();
    job.set("SCR_FLUSH", "0").set("SCR_HALT_SECONDS", "3600").set("SCR_END_TIME", &end_time_in(600));
    // SCR_Should_exit tells the application to stop: HALT once, then a normal finalize.
    let r = run_ok(&job, &["--steps", "3"]);
    assert!(r.stdout.contains("SHOULD_EXIT at"), "{}", r.dump());
    let evs = events(&job);
    let halt = find(&evs, "HALT");
    assert_eq!(halt.len(), 1, "{:?}", names(&evs));
    assert_eq!(halt[0].get("action"), Some("should_exit"));
    assert!(halt[0].get("reason").unwrap().contains("SCR_HALT_SECONDS"), "{:?}", halt[0]);
    assert_eq!(evs.last().unwrap().get("reason"), Some("SCR_FINALIZE_CALLED"));

    // SCR_HALT_EXIT=1: SCR ends the run in SCR_Init; RUN_END gives the halt reason.
    job.set("SCR_HALT_EXIT", "1");
    let before = evs.len();
    run_ok(&job, &["--steps", "3"]);
    let evs = events(&job);
    let new: Vec<String> = names(&evs[before..]);
    assert_eq!(new, ["RUN_START", "HALT", "RUN_END"], "the halt is checked before a checkpoint is loaded");
    let halt = &evs[evs.len() - 2];
    assert_eq!(halt.get("action"), Some("exit"));
    assert_eq!(evs.last().unwrap().get("reason"), halt.get("reason"));
}

/// Receive datagrams on a socket bound at `path` until `stop` is set.
fn syslog_server(path: &Path) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<Vec<String>>) {
    let sock = std::os::unix::net::UnixDatagram::bind(path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_millis(100))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let h = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => got.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(_) if flag.load(std::sync::atomic::Ordering::SeqCst) => return got,
                Err(_) => {}
            }
        }
    });
    (stop, h)
}

#[test]
fn syslog_gets_the_same_events_as_rfc3164_datagrams() {
    let mut job = logging_job();
    let socket = job.root.join("syslog.sock");
    let (stop, server) = syslog_server(&socket);
    job.set("SCR_LOG_SYSLOG_ENABLE", "1").set("SCR_LOG_SYSLOG_SOCKET", &socket.display().to_string());
    job.set("SCR_FLUSH", "1");
    let r = run_ok(&job, &["--steps", "2"]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let grams = server.join().unwrap();
    assert!(!r.stderr.contains("syslog"), "{}", r.dump());

    let evs = events(&job);
    let host = scr::identity::host_name();
    let mut syslog_names = Vec::new();
    for g in &grams {
        // <190>Mmm dd hh:mm:ss host SCR[pid]: EVENT jobid=... host=...
        assert!(g.starts_with("<190>"), "LOG_LOCAL7 (23) * 8 + LOG_INFO (6): {g}");
        let (head, body) = g.split_once(": ").unwrap_or_else(|| panic!("no tag: {g}"));
        let head = &head[5..];
        let b = head.as_bytes();
        assert!(b[3] == b' ' && b[6] == b' ' && b[9] == b':' && b[15] == b' ', "Mmm dd hh:mm:ss: {g}");
        let rest = &head[16..];
        let (h, tag) = rest.split_once(' ').unwrap();
        assert_eq!(h, host);
        let pid = tag.strip_prefix("SCR[").and_then(|t| t.strip_suffix(']')).unwrap_or_else(|| panic!("tag: {g}"));
        assert!(pid.parse::<u32>().is_ok(), "{g}");
        let e = parse_line(&format!("2026-01-01T00:00:00.000000+00:00 {body}")).unwrap();
        assert_eq!(e.get("jobid"), evs[0].get("jobid"));
        syslog_names.push(e.name);
    }
    assert_eq!(syslog_names, names(&evs), "the same events, in the same order");

    // Another facility and level.
    let socket2 = job.root.join("syslog2.sock");
    let (stop, server) = syslog_server(&socket2);
    job.set("SCR_LOG_SYSLOG_SOCKET", &socket2.display().to_string())
        .set("SCR_LOG_SYSLOG_FACILITY", "LOG_USER")
        .set("SCR_LOG_SYSLOG_LEVEL", "LOG_NOTICE")
        .set("SCR_LOG_SYSLOG_PREFIX", "myapp")
        .set("SCR_LOG_TXT_ENABLE", "0");
    let before = std::fs::read_to_string(log_path(&job)).unwrap();
    run_ok(&job, &["--steps", "1"]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let grams = server.join().unwrap();
    assert!(!grams.is_empty());
    assert!(grams.iter().all(|g| g.starts_with("<13>") && g.contains(" myapp[")), "{grams:?}");
    assert_eq!(std::fs::read_to_string(log_path(&job)).unwrap(), before, "text log off");

    // A bad level name fails SCR_Init naming the key.
    job.set("SCR_LOG_SYSLOG_LEVEL", "LOUD");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.stdout.contains("SCR_INIT_FAILED"), "{}", r.dump());
    assert!(r.stderr.contains("SCR_LOG_SYSLOG_LEVEL=LOUD"), "{}", r.dump());
}

#[test]
fn output_datasets_are_logged_and_checkpoint_output_counts_as_checkpoint() {
    let mut job = logging_job();
    job.set("SCR_FLUSH", "0");
    let size = SIZE.to_string();
    run_ok(&job, &["--size", &size, "--steps", "1", "--flags", "output"]);
    run_ok(&job, &["--size", &size, "--steps", "1", "--flags", "both"]);
    let evs = events(&job);
    let total = (4 * SIZE).to_string();
    let n = names(&evs);
    let first_end = n.iter().position(|e| e == "RUN_END").unwrap();
    assert_eq!(n[..first_end], ["RUN_START", "OUTPUT_START", "FLUSH_START", "FLUSH_END", "OUTPUT_END"], "{n:?}");
    let out = find(&evs, "OUTPUT_END")[0];
    assert_eq!((out.get("valid"), out.get("bytes"), out.get("files")), (Some("1"), Some(total.as_str()), Some("4")));
    assert_eq!(find(&evs, "OUTPUT_START")[0].get("ckpt"), Some("0"));
    // checkpoint + output: a checkpoint, flushed inside SCR_Complete_output
    let second = &n[first_end + 1..];
    assert!(second.contains(&"CKPT_START".to_string()) && second.contains(&"CKPT_END".to_string()), "{n:?}");
    assert!(!second.contains(&"OUTPUT_START".to_string()), "{n:?}");
    let ckpt = find(&evs, "CKPT_END")[0];
    assert_eq!((ckpt.get("valid"), ckpt.get("bytes")), (Some("1"), Some(total.as_str())));
}

#[test]
fn transparent_mode_logs_its_datasets() {
    let mut job = logging_job();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0");
    let exe = common::app("ckpt_posix.c", &[]).display().to_string();
    let args = ["--dir".to_string(), job.prefix.display().to_string(), "--steps".into(), "3".into()];
    let r = job.run_exe(4, &[exe], &args);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let evs = events(&job);
    let n = names(&evs);
    assert_eq!(n.first().map(String::as_str), Some("RUN_START"), "{n:?}");
    assert_eq!(n.last().map(String::as_str), Some("RUN_END"), "{n:?}");
    let ends = find(&evs, "CKPT_END");
    assert!(!ends.is_empty() && ends.iter().all(|e| e.get("valid") == Some("1")), "{n:?}");
    assert_eq!(find(&evs, "CKPT_START").len(), ends.len());
}
