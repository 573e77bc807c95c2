//! A hostile prefix harms nothing: someone who can write into the prefix (another user of a
//! shared directory, a stray tool) plants crafted metadata or symbolic links, and the owner's
//! next run, `scr_index` and `scr_halt` must neither read, write nor delete anything outside
//! the prefix and the cache, nor signal a process that is not the job's. Each test puts a
//! canary file outside the prefix and checks its bytes afterwards. Also: a file name of 250
//! bytes (whose temporary names would exceed NAME_MAX) is flushed and fetched.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::{Job, Run};

const SIZE: &str = "100003";
const CANARY: &[u8] = b"canary: must never be read, written or removed by SCR\n";

fn canary(job: &Job, name: &str) -> PathBuf {
    let p = job.root.join(name);
    std::fs::write(&p, CANARY).unwrap();
    p
}

fn intact(p: &Path) -> bool {
    std::fs::read(p).ok().as_deref() == Some(CANARY)
}

fn scr_index(job: &Job, args: &[&str]) -> Run {
    let out = job.command(env!("CARGO_BIN_EXE_scr_index")).args(args).stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Write `body` as an SCR metadata record of `kind` (valid header and checksum).
fn write_meta(path: &Path, kind: &str, body: &serde_json::Value) {
    let body = serde_json::to_vec_pretty(body).unwrap();
    let mut out = format!("SCRMETA 1 {kind} {} {:08x}\n", body.len(), crc32fast::hash(&body)).into_bytes();
    out.extend_from_slice(&body);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, out).unwrap();
}

#[test]
fn prefix_size_pruning_never_deletes_a_file_a_crafted_rank2file_names_outside_the_prefix() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_PREFIX_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let victim = canary(&job, "victim");
    let r2f = job.prefix.join(".scr/scr.dataset.1/rank2file.scr");
    common::escape_paths(&r2f, &common::climbing_to(&victim));
    // the next checkpoint pushes ckpt.1 out of the prefix window
    let r = job.run("test_api", &["--size", SIZE, "--steps", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(intact(&victim), "pruning deleted or changed a file outside the prefix\n{}", r.dump());
    let all = r.all();
    assert!(all.contains("unsafe path") && all.contains(&*r2f.display().to_string()), "{}", r.dump());
    // the good datasets are untouched
    let ls = std::process::Command::new("find").arg(&job.prefix).output().unwrap();
    assert!(
        job.prefix.join("ckpt.2/rank_0.ckpt").exists() && job.prefix.join("ckpt.3/rank_0.ckpt").exists(),
        "{}\n{}",
        String::from_utf8_lossy(&ls.stdout),
        r.dump()
    );
}

#[test]
fn scr_index_build_refuses_paths_that_leave_the_prefix() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let victim = canary(&job, "victim");
    let r2f = job.prefix.join(".scr/scr.dataset.1/rank2file.scr");
    common::escape_paths(&r2f, &common::climbing_to(&victim));
    let out = scr_index(&job, &["--build", "1"]);
    assert_ne!(out.code, Some(0), "{}", out.dump());
    assert!(out.all().contains("unsafe path") && out.all().contains("rank2file.scr"), "{}", out.dump());
    assert!(intact(&victim));
    // the restart goes on from the good checkpoint
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn fetch_refuses_a_rank2file_that_names_files_outside_the_prefix_and_restarts_older() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // the newest checkpoint's rank2file points rank files at a file outside the prefix whose
    // bytes are rank 1's checkpoint (so size and CRC32 match: the old code read it in and
    // wrote it through the same path from the cache)
    let outside = job.root.join("outside.ckpt");
    std::fs::copy(job.prefix.join("ckpt.2/rank_1.ckpt"), &outside).unwrap();
    let before = std::fs::read(&outside).unwrap();
    let r2f = job.prefix.join(".scr/scr.dataset.2/rank2file.scr");
    common::escape_paths(&r2f, &outside.display().to_string());
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
    assert!(r.all().contains("unsafe path") && r.all().contains(&*r2f.display().to_string()), "{}", r.dump());
    assert_eq!(std::fs::read(&outside).unwrap(), before);
}

#[test]
fn flush_never_writes_through_links_planted_at_temporary_names_or_the_log() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_LOG_ENABLE", "1").set("SCR_LOG_TXT_ENABLE", "1");
    let victim = canary(&job, "victim");
    for step in 1..=2 {
        let dir = job.prefix.join(format!("ckpt.{step}"));
        std::fs::create_dir_all(&dir).unwrap();
        for r in 0..4 {
            std::os::unix::fs::symlink(&victim, dir.join(format!(".rank_{r}.ckpt.scrpart"))).unwrap();
        }
    }
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    let log_victim = canary(&job, "log_victim");
    std::os::unix::fs::symlink(&log_victim, job.prefix.join(".scr/log")).unwrap();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert!(intact(&victim), "a flush wrote through a planted link\n{}", r.dump());
    assert!(intact(&log_victim), "the event log was appended through a planted link\n{}", r.dump());
    assert!(r.all().contains("is a symbolic link; refusing to append through it"), "{}", r.dump());
    for step in 1..=2 {
        for rank in 0..4 {
            let p = job.prefix.join(format!("ckpt.{step}/rank_{rank}.ckpt"));
            assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file(), "{}", p.display());
        }
    }
    // what was flushed is whole: a restart from the prefix checks every byte
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
}

#[test]
fn a_250_byte_file_name_is_flushed_and_fetched() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--long-names"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let name = format!("rank_1_{}.ckpt", "x".repeat(250 - 7 - 5));
    assert_eq!(name.len(), 250);
    let flushed = job.prefix.join("ckpt.2").join(&name);
    assert_eq!(std::fs::metadata(&flushed).map(|m| m.len()).ok(), Some(100003), "{}", r.dump());
    let leftovers: Vec<_> = std::fs::read_dir(job.prefix.join("ckpt.2"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // the cache is lost: the restart fetches the long names from the prefix (test_api checks
    // every byte it reads)
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0", "--long-names"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert_eq!(r.code, Some(0), "{}", r.dump());
}

#[test]
fn halt_immediate_signals_no_process_a_crafted_run_record_names() {
    let job = Job::new();
    let mut sleep = std::process::Command::new("sleep").arg("300").spawn().unwrap();
    let pid = sleep.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().parse().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let run = job.prefix.join(".scr/run.scr");
    let mut rec = serde_json::json!({
        "host": host, "wrapper_pid": 1, "launcher_pid": pid, "launcher_start": start, "attempt": 1,
        "started": "2026-01-01T00:00:00", "nodes": [host], "command": ["sleep", "300"],
        "ended": null, "status": null,
    });
    let halt = |why: &str| {
        let out = job.command(env!("CARGO_BIN_EXE_scr_halt")).arg("--immediate").stdin(Stdio::null()).output().unwrap();
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            all.contains(&format!("refusing to signal process {pid} named by {}", run.display())) && all.contains(why),
            "{why}: {all}"
        );
        assert_ne!(out.status.code(), Some(0), "{all}");
    };
    let alive = |sleep: &mut std::process::Child| {
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(sleep.try_wait().unwrap().is_none(), "scr_halt --immediate signalled another process");
    };
    // a record as older scr_run wrote them, its start time right: no proof of the command line
    write_meta(&run, "run", &rec);
    halt("written by an older scr_run");
    alive(&mut sleep);
    // every field forged right, but the record is another user's (someone else wrote it)
    rec["launcher_cmdline"] = serde_json::json!(["sleep", "300"]);
    write_meta(&run, "run", &rec);
    std::os::unix::fs::chown(&run, Some(65534), Some(65534)).unwrap();
    halt("and the run record to uid 65534");
    alive(&mut sleep);
    // the user's own record, but the process runs another command line than the launcher's
    std::fs::remove_file(&run).unwrap();
    rec["launcher_cmdline"] = serde_json::json!(["mpirun", "-np", "4", "./app"]);
    write_meta(&run, "run", &rec);
    halt("the record says the launcher runs");
    alive(&mut sleep);
    sleep.kill().unwrap();
    sleep.wait().unwrap();
}

#[test]
fn a_crafted_rename_log_moves_no_cached_file_outside_the_prefix() {
    // transparent mode: a directory rename in the prefix is logged in .scr/renames.scr for
    // ranks that learn of it at restart; a crafted entry must not rename cached files to a
    // name outside the prefix (where the next flush would write them)
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "ckpt.*/**").set("SCR_FLUSH", "0");
    let app = common::app("ckpt_posix.c", &[]).display().to_string();
    let args = |extra: &[&str]| {
        let mut v = vec!["--dir".to_string(), job.prefix.display().to_string()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let r = job.run_exe(4, std::slice::from_ref(&app), &args(&["--steps", "8", "--crash-at", "7"]));
    assert!(r.has("CHECKPOINT 6"), "{}", r.dump());
    let escaped = job.root.join("escaped");
    let log = job.prefix.join(".scr/renames.scr");
    write_meta(&log, "RENAMES", &serde_json::json!({ "renames": [[1000, "ckpt.6", common::climbing_to(&escaped)]] }));
    let r = job.run_exe(4, &[app], &args(&["--steps", "10"]));
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
    assert!(r.all().contains("unsafe path") && r.all().contains(&*log.display().to_string()), "{}", r.dump());
    assert!(!escaped.exists(), "files were renamed to a name outside the prefix");
}

#[test]
fn a_crafted_shared_file_path_in_a_summary_is_refused_and_the_older_checkpoint_restarts() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("shared", &["--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let victim = canary(&job, "victim");
    let summary = job.prefix.join(".scr/scr.dataset.2/summary.scr");
    common::escape_paths(&summary, &common::climbing_to(&victim));
    job.wipe_cache();
    let r = job.run("shared", &["--steps", "0"]);
    assert!(r.stdout.contains("RESTARTED ckpt.1 step=1 ") && r.code == Some(0), "{}", r.dump());
    assert!(r.all().contains("unsafe path") && r.all().contains(&*summary.display().to_string()), "{}", r.dump());
    assert!(intact(&victim));
}

#[test]
fn scr_index_build_refuses_a_crafted_rank_filemap_of_a_scavenged_dataset() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_COPY_TYPE", "XOR").set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
    let sim = format!("env PMI_RANK=0 SIM_NODE_MAP={{node}} {}", common::repo().join("scripts/sim-node.sh").display());
    let out = job
        .command(env!("CARGO_BIN_EXE_scr_scavenge"))
        .args(["--nodes", "n0,n1,n2,n3", "--node-cmd", &sim])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let victim = canary(&job, "victim");
    let fm = job.prefix.join(".scr/scr.dataset.2/1.scrfilemap");
    common::escape_paths(&fm, &victim.display().to_string());
    let out = scr_index(&job, &["--build", "2"]);
    assert!(out.all().contains("unsafe path") && out.all().contains("1.scrfilemap"), "{}", out.dump());
    // the crafted rank's part counts as lost: rebuilt from the others' redundancy data
    assert!(out.code == Some(0) && out.stdout.contains("rebuilt the files of rank(s) [1]"), "{}", out.dump());
    assert!(intact(&victim));
    // a new allocation restarts from what the prefix holds, every byte checked
    std::fs::remove_dir_all(job.root.join("nodes")).unwrap();
    job.map(&["m0", "m1", "m2", "m3"]);
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert!(intact(&victim));
}

/// Move the prefix's `name` directory to `<root>/<outside>` (creating an empty one if there
/// is none), put a canary there and leave a symbolic link to it in its place, as someone who
/// can write into the prefix could; returns the outside directory and a listing of its bytes.
fn link_out(job: &Job, name: &str, outside: &str) -> (PathBuf, Vec<(PathBuf, Vec<u8>)>) {
    let dir = job.prefix.join(name);
    let out = job.root.join(outside);
    if dir.exists() {
        std::fs::rename(&dir, &out).unwrap();
    } else {
        std::fs::create_dir_all(&out).unwrap();
    }
    std::fs::write(out.join("canary"), CANARY).unwrap();
    std::os::unix::fs::symlink(&out, &dir).unwrap();
    let bytes = snapshot(&out);
    (out, bytes)
}

/// Every file below `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                all.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    all.sort();
    all
}

#[test]
fn prefix_size_pruning_and_flush_never_work_through_a_dataset_directory_link() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1").set("SCR_PREFIX_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // ckpt.1's directory now lives outside (its files and a canary), a link in its place; the
    // next flush's directory ckpt.3 is planted the same way
    let (out1, before1) = link_out(&job, "ckpt.1", "outside1");
    let (out3, before3) = link_out(&job, "ckpt.3", "outside3");
    // ckpt.3 and ckpt.4: the flush of ckpt.3 refuses, SCR_PREFIX_SIZE=2 would then prune ckpt.1
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert_eq!(snapshot(&out1), before1, "pruning deleted through the link\n{}", r.dump());
    assert_eq!(snapshot(&out3), before3, "a flush wrote through the link\n{}", r.dump());
    let all = r.all();
    let link3 = job.prefix.join("ckpt.3");
    assert!(all.contains(&format!("{} is a symbolic link below", link3.display())), "{}", r.dump());
    let link1 = job.prefix.join("ckpt.1");
    assert!(all.contains(&format!("{} is a symbolic link below", link1.display())), "{}", r.dump());
    assert!(std::fs::symlink_metadata(&link1).unwrap().file_type().is_symlink());
    // the run goes on from the checkpoint flushed whole
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.4 step=4"), "{}", r.dump());
    assert_eq!(snapshot(&out1), before1);
}

#[test]
fn a_restart_never_fetches_through_a_dataset_directory_link_and_restarts_older() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // the files are ckpt.2's own (size and CRC32 match: the old code read them in)
    let (out, before) = link_out(&job, "ckpt.2", "outside");
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
    let link = job.prefix.join("ckpt.2");
    assert!(r.all().contains(&format!("{} is a symbolic link below", link.display())), "{}", r.dump());
    assert_eq!(snapshot(&out), before);
}

#[test]
fn scr_index_build_never_indexes_a_dataset_through_a_directory_link() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let (out, before) = link_out(&job, "ckpt.2", "outside");
    let built = scr_index(&job, &["--build", "2"]);
    let link = job.prefix.join("ckpt.2");
    assert!(built.all().contains(&format!("{} is a symbolic link below", link.display())), "{}", built.dump());
    assert_eq!(job.index()["datasets"]["2"]["complete"], false, "{}", built.dump());
    // the dataset's metadata directory replaced by a link: nothing is built from it
    let (meta_out, meta_before) = link_out(&job, ".scr/scr.dataset.1", "outside_meta");
    let built = scr_index(&job, &["--build", "1"]);
    assert_ne!(built.code, Some(0), "{}", built.dump());
    let link = job.prefix.join(".scr/scr.dataset.1");
    assert!(built.all().contains(&format!("{}: is a symbolic link below", link.display())), "{}", built.dump());
    assert_eq!(snapshot(&out), before);
    assert_eq!(snapshot(&meta_out), meta_before);
}

#[test]
fn scavenge_never_writes_through_a_dataset_directory_link() {
    let mut job = Job::cluster(&["n0", "n1", "n2", "n3"]);
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2", "--crash-after", "2"]);
    assert!(r.has("CRASH after ckpt.2"), "{}", r.dump());
    let (out, before) = link_out(&job, "ckpt.2", "outside");
    let node_cmd =
        format!("env PMI_RANK=0 SIM_NODE_MAP={{node}} {}", common::repo().join("scripts/sim-node.sh").display());
    let sc = job
        .command(env!("CARGO_BIN_EXE_scr_scavenge"))
        .args(["--nodes", "n0,n1,n2,n3", "--node-cmd", &node_cmd])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&sc.stdout), String::from_utf8_lossy(&sc.stderr));
    assert_eq!(snapshot(&out), before, "scavenge wrote through the link\n{all}");
    let link = job.prefix.join("ckpt.2");
    assert!(all.contains(&format!("{} is a symbolic link below", link.display())), "{all}");
    assert_ne!(job.index()["datasets"]["2"]["complete"], true, "{all}");
    // the run goes on from the cache
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.2 step=2"), "{}", r.dump());
    assert_eq!(snapshot(&out), before);
}

#[test]
fn halt_immediate_cancels_no_slurm_step_of_another_user_a_run_record_names() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let job = Job::new();
    // Slurm client commands on PATH: scontrol lists step 77.0 of the recorded srun with the
    // owner in $STEP_UID, scancel records what it was asked to cancel, squeue lists nothing
    let bin = job.root.join("slurm-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cancelled = job.root.join("cancelled");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    for (name, body) in [
        (
            "scontrol",
            format!(
                "echo \"StepId=77.0 UserId=$STEP_NAME($STEP_UID) State=RUNNING NodeList=n1 Name=app SrunHost:Pid={host}:4242\""
            ),
        ),
        ("scancel", format!("echo \"$@\" >> {}", cancelled.display())),
        ("squeue", String::new()),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let run = job.prefix.join(".scr/run.scr");
    write_meta(
        &run,
        "run",
        &serde_json::json!({
            "host": host, "wrapper_pid": 1, "launcher_pid": 4242, "launcher_start": 1, "attempt": 1,
            "started": "2026-01-01T00:00:00", "nodes": [host], "command": ["srun", "./app"],
            "launcher_cmdline": ["srun", "./app"], "slurm_job": "77", "ended": null, "status": null,
        }),
    );
    let me = std::fs::metadata(&run).unwrap().uid();
    let halt = |uid: u32| {
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let out = job
            .command(env!("CARGO_BIN_EXE_scr_halt"))
            .arg("--immediate")
            .env("PATH", path)
            .env("STEP_UID", uid.to_string())
            .env("STEP_NAME", "someone")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    // the step is another user's: refused, whoever runs scr_halt (root included)
    let (code, all) = halt(me + 4711);
    assert!(
        all.contains(&format!("refusing to cancel job step 77.0 named by {}", run.display()))
            && all.contains(&format!("the step belongs to uid {} and the run record to uid {me}", me + 4711)),
        "{all}"
    );
    assert_ne!(code, Some(0), "{all}");
    assert!(!cancelled.exists(), "scancel was called\n{all}");
    // the step is the record owner's own: cancelled, that step only
    let (code, all) = halt(me);
    assert_eq!(code, Some(0), "{all}");
    assert_eq!(std::fs::read_to_string(&cancelled).unwrap(), "77.0\n", "{all}");
}

#[test]
fn a_crafted_shells_record_removes_no_directory_outside_the_prefix_or_through_a_link() {
    // transparent mode: rank 0 removes the empty directories recorded in
    // <prefix>/.scr/shells.scr for checkpoints that are gone (here "gone.1", neither in cache
    // nor in the prefix), at start and after each completion
    let app = common::app("ckpt_layouts.c", &[]).display().to_string();
    let run = |job: &Job| {
        let args: Vec<String> = ["--dir", &job.prefix.display().to_string(), "--shape", "foam", "--steps", "3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        job.run_exe(4, std::slice::from_ref(&app), &args)
    };
    let setup = || {
        let mut job = Job::new();
        job.preload().set("SCR_PRELOAD_PATTERNS", "processor*/[0-9]*/**").set("SCR_FLUSH", "0");
        job
    };
    let record = |job: &Job, shells: Vec<String>| {
        let body = serde_json::json!({ "names": { "gone.1": { "shells": shells, "dirs": [] } } });
        write_meta(&job.prefix.join(".scr/shells.scr"), "SHELLS", &body);
    };
    // `..` and absolute entries naming empty directories outside the prefix: the record is
    // refused as damaged, naming the file, and both directories stay
    let job = setup();
    let climbed = job.root.join("canary_climbed");
    let absolute = job.root.join("canary_absolute");
    std::fs::create_dir_all(&climbed).unwrap();
    std::fs::create_dir_all(&absolute).unwrap();
    std::fs::create_dir_all(&job.prefix).unwrap();
    record(&job, vec!["../canary_climbed".into(), absolute.display().to_string()]);
    let r = run(&job);
    assert!(r.has("DONE"), "{}", r.dump());
    assert!(climbed.is_dir() && absolute.is_dir(), "a directory outside the prefix was removed: {}", r.dump());
    assert!(r.stderr.contains("shells.scr") && r.stderr.contains("unsafe path"), "{}", r.dump());
    // an entry below a directory of the prefix that is a symbolic link to another directory:
    // the link is not followed, the empty directory it leads to stays
    let job = setup();
    let outside = job.root.join("outside");
    std::fs::create_dir_all(outside.join("inner")).unwrap();
    std::fs::create_dir_all(&job.prefix).unwrap();
    std::os::unix::fs::symlink(&outside, job.prefix.join("linked")).unwrap();
    record(&job, vec!["linked/inner".into()]);
    let r = run(&job);
    assert!(r.has("DONE"), "{}", r.dump());
    assert!(outside.join("inner").is_dir(), "removed through a link: {}", r.dump());
    assert!(r.stderr.contains("symbolic link"), "{}", r.dump());
}

/// What `examples/preload/header_mpiio.c` writes into `restart.<step>.mpiio`: rank 0's header,
/// then each rank's part.
fn header_mpiio_file(step: i64) -> Vec<u8> {
    let mut out: Vec<u8> = (0..1000 + 3 * step)
        .map(|i| if i < 4 { (step >> (8 * i)) as u8 } else { ((i * 13 + step * 5 + (i >> 7)) & 0xff) as u8 })
        .collect();
    for r in 0..common::NP as i64 {
        out.extend((0..10000 + 777 * r).map(|i| ((i * 7 + step * 11 + r * 37 + (i >> 8)) & 0xff) as u8));
    }
    out
}

/// Symbolic links planted at the staging names of a transparent-mode shared file
/// (`.restart.<step>.mpiio.scrshared`, beside its place in the prefix), each to a canary outside
/// the prefix, with `SCR_PRELOAD_SHARED` set to `shared` if given: the canaries stay intact,
/// the checkpoints hold the right bytes and the program restarts from them.
fn shared_staging_links_are_never_followed(shared: Option<&str>) {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", "restart.*.mpiio").set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    if let Some(pattern) = shared {
        job.set("SCR_PRELOAD_SHARED", pattern);
    }
    std::fs::create_dir_all(&job.prefix).unwrap();
    let victims: Vec<PathBuf> = [2, 4]
        .iter()
        .map(|step| {
            let victim = canary(&job, &format!("victim{step}"));
            let link = job.prefix.join(format!(".restart.{step}.mpiio.scrshared"));
            std::os::unix::fs::symlink(&victim, link).unwrap();
            victim
        })
        .collect();
    let exe = common::app("header_mpiio.c", &[]).display().to_string();
    let run = |steps: &str| {
        let args = ["--dir", &job.prefix.display().to_string(), "--steps", steps].map(String::from);
        job.run_exe(common::NP, std::slice::from_ref(&exe), &args)
    };
    let r = run("4");
    assert!(r.has("CHECKPOINT 4") && r.has("DONE"), "{}", r.dump());
    for victim in &victims {
        assert!(intact(victim), "{} was written through a planted link\n{}", victim.display(), r.dump());
    }
    for step in [2, 4] {
        let file = std::fs::read(job.prefix.join(format!("restart.{step}.mpiio"))).unwrap_or_default();
        assert!(file == header_mpiio_file(step), "restart.{step}.mpiio: {} bytes\n{}", file.len(), r.dump());
    }
    assert!(job.find(".scrshared").is_empty(), "{:?}", job.find(".scrshared"));
    let r = run("6");
    assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
    assert!(victims.iter().all(|v| intact(v)));
}

#[test]
fn a_link_planted_at_the_staging_name_of_a_header_then_mpi_io_file_is_never_followed() {
    // before the fix: rank 0 copied its header through the link (std::fs::copy) and every
    // rank's MPI-IO writes followed it: the canary held the checkpoint
    shared_staging_links_are_never_followed(None);
}

#[test]
fn a_link_planted_at_the_staging_name_of_a_declared_shared_file_is_never_followed() {
    // before the fix: rank 0's fopen of the header (SCR_PRELOAD_SHARED) opened the staging
    // name through the link and truncated the canary
    shared_staging_links_are_never_followed(Some("restart.*.mpiio"));
}

#[test]
fn a_link_planted_at_an_scr_route_shared_file_staging_name_is_never_followed() {
    // SCR_Route_shared_file (examples/c/shared.c: every rank opens the staging name it returns
    // with O_CREAT and pwrites its block). Before the fix only the parent was created and the
    // writers wrote through the link into the canary
    let mut job = Job::new();
    job.set("SCR_FLUSH", "0").set("SCR_CACHE_SIZE", "2");
    let victims: Vec<PathBuf> = [1, 2]
        .iter()
        .map(|step| {
            let victim = canary(&job, &format!("victim{step}"));
            let dir = job.prefix.join(format!("ckpt.{step}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(&victim, dir.join(".shared.dat.scrshared")).unwrap();
            victim
        })
        .collect();
    let r = job.run("shared", &["--steps", "2", "--size", "4099"]);
    for victim in &victims {
        assert!(intact(victim), "{} was written through a planted link\n{}", victim.display(), r.dump());
    }
    for step in [1, 2] {
        assert!((0..common::NP).all(|k| r.has(&format!("RESULT rank={k} ckpt.{step} ok=1"))), "{}", r.dump());
        let bytes = std::fs::read(job.prefix.join(format!("ckpt.{step}/shared.dat"))).unwrap_or_default();
        let want: Vec<u8> = (0..common::NP)
            .flat_map(|k| (0..4099).map(move |i| ((k * 37 + step * 5 + i * 3 + (i >> 9)) & 0xff) as u8))
            .collect();
        assert!(bytes == want, "ckpt.{step}/shared.dat: {} bytes\n{}", bytes.len(), r.dump());
    }
    assert!(job.find(".shared.dat.scrshared").is_empty(), "{:?}", job.find(".scrshared"));
    let r = job.run("shared", &["--steps", "0", "--size", "4099"]);
    assert!(
        r.has(&format!("RESTARTED ckpt.2 step=2 writers=4 shared_bytes={} read=8", 4099 * common::NP))
            && r.code == Some(0),
        "{}",
        r.dump()
    );
    assert!(victims.iter().all(|v| intact(v)));
}

#[test]
fn a_flush_never_publishes_metadata_through_a_linked_dataset_metadata_directory() {
    let mut job = Job::new();
    job.set("SCR_FLUSH", "1");
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    let (out, before) = link_out(&job, ".scr/scr.dataset.2", "outside_meta");
    let r = job.run("test_api", &["--size", SIZE, "--steps", "2"]);
    assert_eq!(snapshot(&out), before, "the flush wrote metadata through the link\n{}", r.dump());
    let link = job.prefix.join(".scr/scr.dataset.2");
    assert!(r.all().contains(&format!("{}: is a symbolic link below", link.display())), "{}", r.dump());
    job.wipe_cache();
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.1 step=1"), "{}", r.dump());
}
