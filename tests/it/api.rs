//! The rest of the SCR 3 API under real MPI: call-order misuse, `SCR_Config`, dataset
//! management, output datasets and the prefix window, halting, configuration errors, and
//! node-local directories owned by someone else.

use crate::common;
use crate::common::Job;

#[test]
fn misuse_of_the_call_order_is_refused_with_the_expected_call_named() {
    let job = Job::new();
    let r = job.run("api_checks", &["misuse"]);
    let expect = [
        ("start_before_init", "0"),
        ("init", "1"),
        ("init_twice", "0"),
        ("complete_without_start", "0"),
        ("start_restart_without_checkpoint", "0"),
        ("complete_restart_without_start", "0"),
        ("bad_flags", "0"),
        ("route_outside_phase_verbatim", "1"),
        ("start", "1"),
        ("nested_start", "0"),
        ("need_inside_phase", "0"),
        ("route_escape", "0"),
        ("route_scr_dir", "0"),
        ("route_ok", "1"),
        ("have_restart_inside_output", "0"),
        ("complete", "0"),
        ("finalize", "1"),
        ("finalize_twice", "0"),
        ("call_after_finalize", "0"),
    ];
    for (what, v) in expect {
        assert_eq!(r.check(what), v, "{what}\n{}", r.dump());
    }
    for msg in [
        "SCR_Start_output: called before SCR_Init",
        "SCR_Init: called twice",
        "SCR_Complete_output: called outside any output or restart phase",
        "SCR_Start_output: called inside the output phase of dataset 1; call SCR_Complete_output first",
        "not inside the prefix directory",
        "called after SCR_Finalize",
    ] {
        assert!(r.stderr.contains(msg), "missing {msg:?}\n{}", r.dump());
    }
    assert_eq!(r.code, Some(0), "{}", r.dump());
}

#[test]
fn scr_config_sets_queries_and_unsets() {
    let mut job = Job::new();
    job.set("SCR_DEBUG", "1");
    let r = job.run("api_checks", &["config"]);
    assert_eq!(r.check("set_returns"), "(null)");
    assert_eq!(r.check("query_flush"), "7");
    assert_eq!(r.check("query_configf"), "3");
    assert_eq!(r.check("query_quoted"), "4");
    assert_eq!(r.check("query_after_unset"), "(null)");
    assert_eq!(r.check("query_subkey"), "SINGLE");
    assert_eq!(r.check("query_env"), "1", "environment wins and is visible");
    assert_eq!(r.check("bad_value"), "(null)");
    assert_eq!(r.check("query_spaced"), "5");
    assert_eq!(r.check("query_store_group"), "NODE");
    assert_eq!(r.check("query_store_after_unset"), "(null)", "STORE= unsets");
    assert_eq!(r.check("query_unknown"), "(null)", "an unknown key is not stored");
    assert!(r.stderr.contains("unknown parameter SCR_NOT_A_PARAMETER (ignored)"), "{}", r.dump());
    assert_eq!(r.check("big_value"), "(null)");
    // Every rank reports the 2 MB value, each in a line of a few hundred bytes.
    let big: Vec<&str> = r.stderr.lines().filter(|l| l.contains("SCR_CACHE_SIZE=7777")).collect();
    assert_eq!(big.len(), 4, "{}", r.dump());
    for l in big {
        assert!(
            l.len() < 400
                && l.contains(" bytes]...")
                && l.contains("7777x")
                && l.contains("expected a non-negative integer"),
            "{l}"
        );
    }
    assert!(r.stderr.len() < 64 << 10, "stderr is {} bytes", r.stderr.len());
    assert_eq!(r.check("init"), "1");
    assert_eq!(r.check("set_after_init"), "(null)");
    assert_eq!(r.check("query_after_init"), "3");
    assert!(r.stderr.contains("SCR_FLUSH=often: expected a non-negative integer"), "{}", r.dump());
    assert!(r.stderr.contains("cannot be set or unset after SCR_Init"), "{}", r.dump());
    // SCR_DEBUG=1: rank 0 lists the effective configuration with origins
    assert!(r.stderr.contains("SCR_CACHE_SIZE") && r.stderr.contains("= 3  (SCR_Config)"), "{}", r.dump());
    assert!(r.stderr.contains("(environment)") && r.stderr.contains("(default)"), "{}", r.dump());
}

#[test]
fn current_delete_and_drop() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("api_checks", &["manage"]);
    for (what, v) in [
        ("ckpt1", "1"),
        ("ckpt2", "1"),
        ("ckpt3", "1"),
        ("delete_ckpt3", "1"),
        ("delete_missing", "0"),
        ("drop_ckpt2", "1"),
        ("drop_again", "0"),
        ("current_ckpt1", "1"),
        ("current_missing", "0"),
        ("have_after_current", "ckpt.1"),
    ] {
        assert_eq!(r.check(what), v, "{what}\n{}", r.dump());
    }
    assert!(!job.prefix.join("ckpt.3").exists(), "SCR_Delete removes prefix files and empty directories");
    assert!(job.prefix.join("ckpt.2/rank_0").exists(), "SCR_Drop keeps files");
    let index = job.index();
    let ids: Vec<&String> = index["datasets"].as_object().unwrap().keys().collect();
    assert_eq!(ids, vec!["1"], "{index}");
    assert_eq!(index["current"], "ckpt.1");
    let r = job.run("api_checks", &["manage"]);
    assert_eq!(r.check("restart_name"), "ckpt.1", "{}", r.dump());
}

#[test]
fn output_is_always_flushed_and_never_pruned_by_the_prefix_window() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_PREFIX_SIZE", "1").set("SCR_CACHE_SIZE", "2");
    let r = job.run("api_checks", &["output"]);
    for what in ["out1", "both2", "ckpt3", "ckpt4"] {
        assert_eq!(r.check(what), "1", "{what}\n{}", r.dump());
    }
    assert!(job.prefix.join("out.1/rank_3").exists());
    assert!(job.prefix.join("both.2/rank_3").exists());
    assert!(!job.prefix.join("ckpt.3").exists(), "pruned by SCR_PREFIX_SIZE=1");
    assert!(job.prefix.join("ckpt.4/rank_3").exists());
    assert!(job.cached_files("out.1").is_empty(), "output-only datasets leave the cache once flushed");
    let index = job.index();
    let ids: Vec<&String> = index["datasets"].as_object().unwrap().keys().collect();
    assert_eq!(ids, vec!["1", "2", "4"], "{index}");
}

#[test]
fn output_is_flushed_even_with_periodic_flush_off() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("api_checks", &["output"]);
    assert_eq!(r.check("out1"), "1", "{}", r.dump());
    assert!(job.prefix.join("out.1/rank_0").exists());
    assert!(job.prefix.join("both.2/rank_0").exists());
    assert!(!job.prefix.join("ckpt.4").exists(), "SCR_FLUSH=0 flushes no checkpoint, not even at SCR_Finalize");
}

#[test]
fn legacy_checkpoint_calls_and_version() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("api_checks", &["legacy"]);
    assert_eq!(r.check("complete_checkpoint"), "1", "{}", r.dump());
    assert!(r.check("version").starts_with("scr-rs "));
    assert!(job.prefix.join("legacy_2.ckpt").exists());
    assert_eq!(job.index()["datasets"]["1"]["desc"]["name"], "scr.dataset.1");
}

#[test]
fn finalize_records_its_reason_and_halt_seconds_stop_the_job() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1"), "{}", r.dump());
    let halt = job.meta(&job.prefix.join(".scr/halt.scr"));
    assert_eq!(halt["exit_reason"], "SCR_FINALIZE_CALLED", "{halt}");

    // Less time left than SCR_HALT_SECONDS: SCR_Should_exit says stop after the checkpoint.
    let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    job.set("SCR_HALT_SECONDS", "3600").set("SCR_END_TIME", &end.to_string());
    let r = job.run("test_api", &["--steps", "5"]);
    assert!(r.has("SHOULD_EXIT at ckpt.2"), "{}", r.dump());

    // With SCR_HALT_EXIT=1 the run ends in SCR_Init, cleanly, before any checkpoint.
    job.set("SCR_HALT_EXIT", "1");
    let r = job.run("test_api", &["--steps", "5"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(!r.stdout.contains("CHECKPOINT") && !r.stdout.contains("DONE"), "{}", r.dump());
    assert!(r.stderr.contains("SCR_HALT_SECONDS is 3600"), "{}", r.dump());
}

#[test]
fn malformed_config_lines_and_values_name_file_and_line() {
    let job = Job::new();
    std::fs::write(job.prefix.join(".scrconf"), "# user config\nSCR_FLUSH=10\n\nSCR_CACHE_SIZE=lots\n").unwrap();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    let conf = job.prefix.join(".scrconf");
    let want = format!("{}:4: SCR_CACHE_SIZE=lots: expected a non-negative integer", conf.display());
    assert!(r.stderr.contains(&want), "missing {want:?}\n{}", r.dump());

    std::fs::write(&conf, "SCR_FLUSH=1\nSCR_FLUSHH=2\nSTORE=/tmp COUNTT=1\nSCR_CACHE_BASE=$NOT_SET_ANYWHERE\n")
        .unwrap();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    assert!(r.stderr.contains(&format!("{}:2: unknown parameter SCR_FLUSHH", conf.display())), "{}", r.dump());
    assert!(r.stderr.contains(&format!("{}:3: unknown key COUNTT", conf.display())), "{}", r.dump());
    assert!(
        r.stderr.contains(&format!(
            "{}:4: SCR_CACHE_BASE=$NOT_SET_ANYWHERE is empty: environment variable $NOT_SET_ANYWHERE is not set",
            conf.display()
        )),
        "{}",
        r.dump()
    );

    std::fs::remove_file(&conf).unwrap();
    let mut job2 = Job::new();
    job2.set("SCR_FLUSH", "often");
    let r = job2.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    assert!(r.stderr.contains("environment variable SCR_FLUSH: SCR_FLUSH=often"), "{}", r.dump());
}

#[test]
fn weaker_protection_and_unimplemented_settings_are_announced() {
    let mut job = Job::new();
    job.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH_POSTSTAGE", "1").set("SCR_FLUSH_TYPE", "DATAWARP");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1"), "{}", r.dump());
    // Every rank on one node: XOR cannot span failure groups, and the run says what it gets.
    assert!(r.stderr.contains("CKPT=0 TYPE=XOR GROUP=NODE: all 4 processes are in one failure group"), "{}", r.dump());
    assert!(r.stderr.contains("datasets get SINGLE protection only"), "{}", r.dump());
    assert!(r.stderr.contains("SCR_FLUSH_POSTSTAGE=1 (environment) is not implemented"), "{}", r.dump());
    assert!(
        r.stderr.contains("SCR_FLUSH_TYPE=DATAWARP needs a vendor burst-buffer service absent here"),
        "{}",
        r.dump()
    );
}

#[test]
fn protection_warnings_come_once_per_job_and_only_for_what_the_user_chose() {
    let xor = "all 4 processes are in one failure group";
    let set = "SET_SIZE=8 asks for sets of 8 processes";
    // SCR_COPY_TYPE=XOR chosen on one node: warned at the first run, not at the job's second.
    let mut job = Job::new();
    job.set("SCR_COPY_TYPE", "XOR");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1") && r.stderr.matches(xor).count() == 1, "{}", r.dump());
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.1 step=1") && !r.stderr.contains(xor), "{}", r.dump());
    // Another job (another prefix) is told again.
    let mut other = Job::new();
    other.set("SCR_COPY_TYPE", "XOR");
    assert!(other.run("test_api", &["--steps", "1"]).stderr.contains(xor));
    // The default (XOR, nothing set) on one node: nothing the user asked for, nothing said,
    // except under SCR_DEBUG.
    let mut quiet = Job::new();
    quiet.unset("SCR_COPY_TYPE");
    let r = quiet.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1") && !r.stderr.contains("failure group"), "{}", r.dump());
    quiet.set("SCR_DEBUG", "1");
    assert!(quiet.run("test_api", &["--steps", "1"]).stderr.contains(xor));
    // Four nodes and the default SET_SIZE=8: quiet; SET_SIZE=8 chosen: warned once a job.
    let mut cluster = Job::cluster(&["n0", "n1", "n2", "n3"]);
    cluster.unset("SCR_COPY_TYPE");
    let r = cluster.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1") && !r.stderr.contains("SET_SIZE"), "{}", r.dump());
    let mut cluster = Job::cluster(&["n0", "n1", "n2", "n3"]);
    cluster.set("SCR_COPY_TYPE", "XOR").set("SCR_SET_SIZE", "8");
    let r = cluster.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1") && r.stderr.matches(set).count() == 1, "{}", r.dump());
    let r = cluster.run("test_api", &["--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.1 step=1") && !r.stderr.contains(set), "{}", r.dump());
}

#[test]
fn a_cache_directory_owned_by_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create a directory owned by another user");
        return;
    }
    let job = Job::new();
    let user = std::process::Command::new("id").arg("-un").output().unwrap();
    let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
    let theirs = job.cache.join(&user);
    std::fs::create_dir_all(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    assert!(r.stderr.contains("owned by uid 65534") && r.stderr.contains("refusing"), "{}", r.dump());
}

#[test]
fn halt_file_conditions_set_by_another_process_are_honoured() {
    // Write the halt file the way scr_halt will: locked read-modify-write of the shared file.
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let halt = job.prefix.join(".scr/halt.scr");
    std::fs::create_dir_all(halt.parent().unwrap()).unwrap();
    scr::state::halt::Halt::update(&halt, |h| h.checkpoints_left = Some(2)).unwrap();
    let r = job.run("test_api", &["--steps", "5"]);
    assert!(r.has("SHOULD_EXIT at ckpt.2") && !r.stdout.contains("ckpt.3"), "{}", r.dump());
    assert_eq!(job.meta(&halt)["checkpoints_left"], 0, "counted down by the job");

    // SCR_HALT_EXIT=1: the run ends right after the checkpoint that satisfies the condition.
    scr::state::halt::Halt::update(&halt, |h| {
        *h = scr::state::halt::Halt { checkpoints_left: Some(1), ..Default::default() }
    })
    .unwrap();
    job.set("SCR_HALT_EXIT", "1");
    let r = job.run("test_api", &["--steps", "5"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // The exit happens inside SCR_Complete_output, after checkpoint 3 is complete in cache.
    assert!(
        r.has("RESTARTED ckpt.2 step=2") && !r.stdout.contains("CHECKPOINT") && !r.stdout.contains("DONE"),
        "{}",
        r.dump()
    );
    assert_eq!(job.cached_files("ckpt.3/rank_").len(), 4, "{}", r.dump());
    assert!(job.cached_files("ckpt.4").is_empty());
    assert!(r.stderr.contains("no checkpoints left"), "{}", r.dump());
}

/// `SCR_Need_checkpoint` under `SCR_CHECKPOINT_SECONDS` and `SCR_CHECKPOINT_OVERHEAD`, with
/// the application "computing" (sleeping) between steps. Every outcome follows from lower
/// bounds alone: a sleep lasts at least as long as asked, and a run of a few seconds is
/// shorter than an hour.
#[test]
fn checkpoint_seconds_and_overhead_decide_need_checkpoint() {
    let checkpoints = |r: &common::Run| -> Vec<String> {
        r.stdout.lines().filter_map(|l| l.strip_prefix("CHECKPOINT ")).map(|l| l.to_string()).collect()
    };
    // An hour between checkpoints: none in a short run.
    let mut job = Job::new();
    job.set("SCR_CHECKPOINT_SECONDS", "3600");
    let r = job.run("test_api", &["--size", "4096", "--steps", "3"]);
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
    assert!(checkpoints(&r).is_empty(), "{}", r.dump());

    // One second between checkpoints, two seconds of compute before steps 2 and 3: both
    // checkpoint (step 1 may or may not, depending on how long SCR_Init took).
    let mut job = Job::new();
    job.set("SCR_CHECKPOINT_SECONDS", "1");
    let r = job.run("test_api", &["--size", "4096", "--steps", "3", "--compute-secs", "2"]);
    let taken = checkpoints(&r);
    assert!(taken.contains(&"ckpt.2 ok=1".to_string()) && taken.contains(&"ckpt.3 ok=1".to_string()), "{}", r.dump());

    // An overhead budget of 0.0001%: the first checkpoint is taken to measure the cost; after
    // it, one second of compute per step is far too little to pay for another.
    let mut job = Job::new();
    job.set("SCR_CHECKPOINT_OVERHEAD", "0.0001");
    let r = job.run("test_api", &["--size", "4096", "--steps", "3", "--compute-secs", "1"]);
    assert_eq!(checkpoints(&r), vec!["ckpt.1 ok=1".to_string()], "{}", r.dump());
    assert!(r.has("DONE steps=1..3"), "{}", r.dump());
}
