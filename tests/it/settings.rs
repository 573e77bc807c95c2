//! Settings that steer restart and flush, each exercised under real MPI: SCR_FETCH,
//! SCR_FETCH_BYPASS, SCR_CURRENT, SCR_FLUSH_ON_RESTART, SCR_GLOBAL_RESTART,
//! SCR_CACHE_PURGE, SCR_PREFIX_PURGE, SCR_FLUSH_WIDTH/SCR_FETCH_WIDTH,
//! SCR_CHECKPOINT_INTERVAL; configuration files written the way SCR accepts them (blanks
//! around `=`), a mistyped SCR_CONF_FILE, and a huge value quoted in messages.

use crate::common::Job;

/// A job with checkpoints 1 and 2 flushed to the prefix and the cache lost.
fn flushed_two(extra: &[(&str, &str)]) -> Job {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    for (k, v) in extra {
        job.set(k, v);
    }
    let r = job.run("test_api", &["--steps", "2"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    job.wipe_cache();
    job
}

#[test]
fn fetch_disabled_and_fetch_bypass() {
    let mut job = flushed_two(&[]);
    job.set("SCR_FETCH", "0");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());

    job.set("SCR_FETCH", "1").set("SCR_FETCH_BYPASS", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.cached_files("rank_").is_empty(), "fetch bypass reads in place");
}

#[test]
fn scr_current_picks_the_checkpoint() {
    let mut job = flushed_two(&[]);
    job.set("SCR_CURRENT", "ckpt.1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
    assert_eq!(job.index()["current"], "ckpt.1");
}

#[test]
fn scr_current_naming_no_checkpoint_stops_scr_init_and_names_the_ones_there_are() {
    // a first run: nothing to restart from, a warning and a fresh start
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2").set("SCR_CURRENT", "ckpt.9");
    let r = job.run("test_api", &["--steps", "3"]);
    assert!(r.has("NO_RESTART") && r.has("DONE steps=1..3"), "{}", r.dump());
    assert!(r.stderr.contains("SCR_CURRENT=ckpt.9: there is no checkpoint yet"), "{}", r.dump());
    // ckpt.2 and ckpt.3 in cache: a name that is neither stops SCR_Init instead of starting
    // over next to them
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED") && !r.has("NO_RESTART"), "{}", r.dump());
    for needle in [
        "SCR_CURRENT=ckpt.9 names no checkpoint a restart can use",
        "the checkpoints are: ckpt.3 (dataset 3, cache), ckpt.2 (dataset 2, cache)",
        "unset it",
    ] {
        assert!(r.stderr.contains(needle), "{needle}: {}", r.dump());
    }
    assert_eq!(job.cached_files("ckpt.3/rank_").len(), 4, "nothing is deleted");
    // in the prefix only
    let mut job = flushed_two(&[]);
    job.set("SCR_CURRENT", "ckpt.9");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    let needle = "the checkpoints are: ckpt.2 (dataset 2, prefix), ckpt.1 (dataset 1, prefix)";
    assert!(r.stderr.contains(needle), "{}", r.dump());
    job.set("SCR_CURRENT", "ckpt.1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
}

#[test]
fn flush_widths_of_one_still_move_everything() {
    let mut job = flushed_two(&[("SCR_FLUSH_WIDTH", "1")]);
    job.set("SCR_FETCH_WIDTH", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn flush_on_restart_and_global_restart() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.2").exists());
    job.set("SCR_FLUSH_ON_RESTART", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.2/rank_3.ckpt").exists(), "flushed during SCR_Init");

    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1"), "{}", r.dump());
    job.set("SCR_GLOBAL_RESTART", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(job.prefix.join("ckpt.2/rank_3.ckpt").exists());
}

#[test]
fn cache_and_prefix_purge() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "1", "--crash-after", "1"]);
    assert!(r.has("CHECKPOINT ckpt.1 ok=1"), "{}", r.dump());
    job.set("SCR_CACHE_PURGE", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());

    let mut job = flushed_two(&[]);
    job.set("SCR_PREFIX_PURGE", "1");
    let r = job.run("test_api", &["--steps", "0"]);
    assert!(r.has("NO_RESTART"), "{}", r.dump());
    assert!(!job.prefix.join("ckpt.1").exists() && !job.prefix.join("ckpt.2").exists());
}

#[test]
fn checkpoint_interval_drives_need_checkpoint() {
    let mut job = Job::new();
    job.set("SCR_CHECKPOINT_INTERVAL", "2").set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "4"]);
    assert!(r.has("CHECKPOINT ckpt.2 ok=1") && r.has("CHECKPOINT ckpt.4 ok=1"), "{}", r.dump());
    assert!(!r.stdout.contains("CHECKPOINT ckpt.1") && !r.stdout.contains("CHECKPOINT ckpt.3"), "{}", r.dump());
}

#[test]
fn config_file_lines_with_blanks_around_equals_take_effect() {
    let mut job = Job::new();
    job.unset("SCR_COPY_TYPE").set("SCR_DEBUG", "1");
    let conf = job.prefix.join(".scrconf");
    std::fs::write(
        &conf,
        "SCR_FLUSH = 1\n\tCKPT = 0   TYPE = SINGLE   # spaced like SCR's examples\nSCR_CACHE_SIZE= 2\n",
    )
    .unwrap();
    let r = job.run("test_api", &["--steps", "2"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    for line in [format!("= 1  (user config {}:1)", conf.display()), format!("= 2  (user config {}:3)", conf.display())]
    {
        assert!(r.stderr.contains(&line), "missing {line:?}\n{}", r.dump());
    }
    assert!(r.stderr.contains("TYPE=SINGLE"), "{}", r.dump());
    // SCR_FLUSH = 1 took effect: both checkpoints are in the prefix.
    assert!(job.prefix.join("ckpt.1/rank_3.ckpt").exists() && job.prefix.join("ckpt.2/rank_3.ckpt").exists());
}

#[test]
fn a_mistyped_scr_conf_file_fails_scr_init_naming_the_path() {
    let mut job = Job::new();
    let typo = job.root.join("scr.conff");
    job.set("SCR_CONF_FILE", &typo.display().to_string());
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED") && !r.stdout.contains("CHECKPOINT"), "{}", r.dump());
    let want = format!(
        "SCR_CONF_FILE={} (environment): cannot read the configuration file {}",
        typo.display(),
        typo.display()
    );
    assert!(r.stderr.contains(&want), "missing {want:?}\n{}", r.dump());
    // The default user file may be absent: no complaint.
    job.unset("SCR_CONF_FILE");
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("DONE steps=1..1") && !r.stderr.contains(".scrconf"), "{}", r.dump());
}

#[test]
fn an_unset_variable_in_a_config_file_expands_to_nothing_with_a_warning() {
    // the user guide's SCR_CNTL_BASE=/dev/shm/$SLURM_JOBID outside Slurm
    let mut job = Job::new();
    let (cache, conf) = (job.cache.display().to_string(), job.prefix.join(".scrconf"));
    std::fs::write(
        &conf,
        format!(
            "# bases per job\nSCR_CACHE_BASE={cache}/$H1_UNSET_JOBID\nSCR_CNTL_BASE = {cache}/${{H1_UNSET_JOBID}}\n"
        ),
    )
    .unwrap();
    job.unset("SCR_CACHE_BASE").unset("SCR_CNTL_BASE").unset("H1_UNSET_JOBID").set("SCR_FLUSH", "0");
    let r = job.run("test_api", &["--steps", "2", "--size", "1000"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    for line in [2, 3] {
        let want = format!("{}:{line}: ", conf.display());
        let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains(&want)).collect();
        assert_eq!(warned.len(), 1, "{want}: {}", r.dump());
        assert!(warned[0].contains("environment variable $H1_UNSET_JOBID is not set"), "{}", r.dump());
    }
    assert!(r.stderr.contains(&format!("SCR_CACHE_BASE={cache}/")), "{}", r.dump());
    assert_eq!(job.cached_files("ckpt.2/rank_").len(), 4, "the cache is the expanded base");
    let r = job.run("test_api", &["--steps", "0", "--size", "1000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    // a value that is nothing but an unset variable is an error naming file, line and variable
    std::fs::write(&conf, "SCR_CACHE_BASE=$H1_UNSET_JOBID\n").unwrap();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    let want = format!("{}:1: SCR_CACHE_BASE=$H1_UNSET_JOBID is empty", conf.display());
    assert!(r.stderr.contains(&want), "{want}: {}", r.dump());
}

#[test]
fn ckpt_descriptors_in_a_config_file_take_effect_or_are_named_when_overridden() {
    let nodes = ["n0", "n1", "n2", "n3"];
    let mut job = Job::cluster(&nodes);
    let conf = job.prefix.join(".scrconf");
    std::fs::write(
        &conf,
        "SCR_CACHE_SIZE=2\nSCR_FLUSH=0\n# every checkpoint SINGLE, every 2nd XOR\nCKPT=0 INTERVAL=1 TYPE=SINGLE\n\
         CKPT=1 INTERVAL=2 TYPE=XOR SET_SIZE=4\n",
    )
    .unwrap();
    // SCR_COPY_TYPE set nowhere: the descriptors apply
    job.unset("SCR_COPY_TYPE");
    let r = job.run("test_api", &["--steps", "2", "--size", "100000"]);
    assert!(r.has("DONE steps=1..2") && !r.stderr.contains("CKPT=0"), "{}", r.dump());
    for n in nodes {
        let xor = job.node_files(n, ".xor");
        assert_eq!(xor.len(), 1, "{n}: only ckpt.2 is XOR: {xor:?}");
        assert!(xor[0].display().to_string().contains("/scr.dataset.2/"), "{xor:?}");
        assert_eq!(job.node_files(n, "ckpt.1/rank_").len(), 1, "{n}: ckpt.1 cached (SINGLE)");
    }
    // ckpt.2 survives a lost node through its XOR descriptor
    job.lose_node("n1");
    job.map(&["n0", "n4", "n2", "n3"]);
    let r = job.run("test_api", &["--steps", "0", "--size", "100000"]);
    assert!(r.has("RESTARTED ckpt.2 step=2") && r.stderr.contains("rebuilt"), "{}", r.dump());

    // SCR_COPY_TYPE set to a scheme: it stands, and one warning names the entries
    let mut job = Job::cluster(&nodes);
    let conf2 = job.prefix.join(".scrconf");
    std::fs::copy(&conf, &conf2).unwrap();
    job.set("SCR_COPY_TYPE", "SINGLE");
    let r = job.run("test_api", &["--steps", "2", "--size", "100000"]);
    assert!(r.has("DONE steps=1..2"), "{}", r.dump());
    let want = format!(
        "CKPT=0 (user config {c}:4), CKPT=1 (user config {c}:5) ignored: SCR_COPY_TYPE=SINGLE (environment) applies \
         to every checkpoint; set SCR_COPY_TYPE=FILE",
        c = conf2.display()
    );
    assert_eq!(r.stderr.matches(&want).count(), 1, "{want}\n{}", r.dump());
    assert!(nodes.iter().all(|n| job.node_files(n, ".xor").is_empty()));
}

#[test]
fn a_huge_value_is_quoted_short_with_its_length() {
    let job = Job::new();
    let value = "7".repeat(2 << 20);
    std::fs::write(job.prefix.join(".scrconf"), format!("SCR_FLUSH={value}\n")).unwrap();
    let r = job.run("test_api", &["--steps", "1"]);
    assert!(r.has("SCR_INIT_FAILED"), "{}", r.dump());
    assert!(
        r.stderr.len() < 16 << 10,
        "stderr is {} bytes:\n{}",
        r.stderr.len(),
        &r.stderr[..4096.min(r.stderr.len())]
    );
    let line =
        r.stderr.lines().find(|l| l.contains(".scrconf:1: SCR_FLUSH=777")).expect("the error names file and line");
    assert!(line.contains(&format!("...[{} bytes]...", value.len() + 11)), "{line}");
    assert!(line.ends_with("expected a non-negative integer"), "{line}");
}
