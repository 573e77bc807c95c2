//! Transparent mode: the calls an application makes on its checkpoint files behave as they
//! do without the preload. Each test runs an unmodified program (C, Python, C++) under real
//! `mpirun` with 4 ranks twice, on a plain prefix and under `LD_PRELOAD=libscr_preload.so`,
//! and compares what the program printed line by line; then it checks that the files really
//! were SCR's (a dataset in cache), so a preload that passed everything through would fail.

use crate::common;

use crate::common::{app, Job, Run};

/// Every file in the checkpoint directories, except the `.txt` notes, is a checkpoint file.
const PATTERNS: &str = "ckpt.*/**,!ckpt.*/**/*.txt";

fn sorted(out: &str) -> Vec<&str> {
    let mut v: Vec<&str> = out.lines().collect();
    v.sort();
    v
}

/// Run `exe FAMILY... DIR` without and with the preload (`settings` for the latter); the
/// sorted output must match. Returns the preloaded job and its run.
fn compare(exe: &[String], args: &[&str], settings: &[(&str, &str)]) -> (Job, Run) {
    let with_dir = |job: &Job| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.push(job.prefix.display().to_string());
        a
    };
    let plain = Job::new();
    let p = plain.run_exe(4, exe, &with_dir(&plain));
    assert_eq!(p.code, Some(0), "{args:?} without the preload: {}", p.dump());
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", PATTERNS).set("SCR_FLUSH", "0").set("SCR_DEBUG", "1");
    for (k, v) in settings {
        job.set(k, v);
    }
    let r = job.run_exe(4, exe, &with_dir(&job));
    assert_eq!(r.code, Some(0), "{args:?} under the preload: {}", r.dump());
    assert_eq!(sorted(&p.stdout), sorted(&r.stdout), "{args:?}: without (left) and with (right) the preload");
    assert_eq!(p.stdout.lines().count(), 4 * p.stdout.lines().filter(|l| l.starts_with("r0 ")).count());
    // the files were SCR's: they formed a dataset in cache
    assert!(r.stderr.contains("dataset 1 (ckpt.1, checkpoint) complete"), "{args:?}: {}", r.dump());
    assert!(!r.stderr.contains("SCR ERROR"), "{args:?}: {}", r.dump());
    (job, r)
}

fn calls() -> Vec<String> {
    vec![app("calls.c", &[]).display().to_string()]
}

/// The one cached file of rank 0 whose path ends with `leaf` (in the newest dataset).
fn cached(job: &Job, leaf: &str) -> std::path::PathBuf {
    let mut v = job.cached_files(&format!("ckpt.1/r0/{leaf}"));
    v.retain(|p| p.ends_with(&format!("/{leaf}")));
    v.sort();
    assert!(!v.is_empty(), "{leaf} not cached: {:?}", job.cached_files(""));
    v.pop().unwrap().into()
}

#[test]
fn truncate_chmod_and_times_of_checkpoint_files() {
    let (job, _) = compare(&calls(), &["truncate"], &[]);
    // the truncated file is the new version's, in cache, never in the prefix
    assert_eq!(std::fs::read(cached(&job, "f")).unwrap(), b"che");
    assert!(!job.prefix.join("ckpt.1/r0/f").exists());
    let (job, _) = compare(&calls(), &["chmod"], &[]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(cached(&job, "f")).unwrap().permissions().mode() & 0o777, 0o640);
    let (job, _) = compare(&calls(), &["utimes"], &[]);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(cached(&job, "i")).unwrap().mtime(), 8000);
}

#[test]
fn links_readlink_realpath_and_statfs_of_checkpoint_files() {
    let (job, _) = compare(&calls(), &["link"], &[]);
    use std::os::unix::fs::MetadataExt;
    let (f, g) = (cached(&job, "f"), cached(&job, "g"));
    assert_eq!(std::fs::metadata(&f).unwrap().ino(), std::fs::metadata(&g).unwrap().ino(), "g is a link of f");
    assert_eq!(std::fs::read(&f).unwrap(), b"via-g");
    for family in ["readlink", "realpath", "statfs"] {
        compare(&calls(), &[family], &[]);
    }
}

#[test]
fn relative_paths_follow_chdir_fchdir_and_a_renamed_working_directory() {
    // the preload keeps the working directory's path per thread: each change must be seen
    let (job, _) = compare(&calls(), &["chdir"], &[]);
    assert_eq!(std::fs::read(cached(&job, "rel")).unwrap(), b"via-chdir");
    assert_eq!(std::fs::read(cached(&job, "moved/deep")).unwrap(), b"deep");
    assert_eq!(std::fs::read(cached(&job, "moved/after-move")).unwrap(), b"moved");
    assert!(!job.prefix.join("ckpt.1/r0/rel").exists() && !job.prefix.join("ckpt.1/r0/moved/after-move").exists());
}

#[test]
fn descriptors_closed_by_close_range_complete_their_file() {
    // f2 is written through a low descriptor and a duplicate as high as the limit allows (up
    // to 70000), both closed by close_range only: it joins ckpt.1 at the sync point (compare
    // checks the dataset completed), its bytes are in cache and not in the prefix, and the
    // file a later open gets at the reused number is the application's own
    let (job, r) = compare(&calls(), &["close-range"], &[]);
    assert!(r.has("r0 close_range written=1") && r.has("r3 reused written=1"), "{}", r.dump());
    assert_eq!(std::fs::read(cached(&job, "f2")).unwrap(), b"through-close_range");
    assert!(!job.prefix.join("ckpt.1/r0/f2").exists());
    assert_eq!(std::fs::read(job.prefix.join("ckpt.1/r0/after.txt")).unwrap(), b"other");
    assert!(job.cached_files("after.txt").is_empty(), "{:?}", job.cached_files(""));
}

#[test]
fn a_completed_checkpoint_file_renamed_out_of_the_patterns_leaves_the_dataset() {
    // Default SCR_FLUSH: the checkpoint would be flushed at MPI_Finalize. Every rank renamed
    // its file of ckpt.1 away: the dataset is gone (no false "remains only in cache", no
    // incomplete index entry), and the bytes are where the application put them.
    let (job, r) = compare(&calls(), &["rename-out"], &[("SCR_FLUSH", "10")]);
    assert!(!r.stderr.contains("remains only in cache"), "{}", r.dump());
    assert!(r.stderr.contains("removed all of its files"), "{}", r.dump());
    for rank in 0..4 {
        assert_eq!(std::fs::read(job.prefix.join(format!("keep.{rank}"))).unwrap(), b"checkpoint");
    }
    assert!(job.cached_files("ckpt.1/").is_empty(), "{:?}", job.cached_files(""));
    let ix = job.prefix.join(".scr/index.scr");
    if ix.exists() {
        let ix = job.index();
        assert!(ix["datasets"].as_object().unwrap().values().all(|d| d["complete"] == true), "{ix}");
    }
}

#[test]
fn merged_listings_show_each_cached_file_once() {
    // the checkpoint only in cache, then also in the prefix (flushed): the same listings
    for flush in ["0", "1"] {
        let (job, _) = compare(&calls(), &["listing"], &[("SCR_FLUSH", flush)]);
        assert!(!job.cached_files("ckpt.1/r0/sub/c").is_empty(), "{:?}", job.cached_files(""));
        assert_eq!(job.prefix.join("ckpt.1/r0/f").exists(), flush == "1", "flush={flush}");
        assert!(job.prefix.join("ckpt.1/r0/notes.txt").exists(), "the excluded file is in the prefix");
    }
}

#[test]
fn removing_a_checkpoint_tree_removes_the_cached_files() {
    let (job, r) = compare(&calls(), &["tree"], &[]);
    assert!(job.cached_files("ckpt.1/").is_empty(), "{:?}", job.cached_files(""));
    assert!(r.stderr.contains("removed all of its files"), "{}", r.dump());
}

#[test]
fn child_processes_see_and_remove_the_cached_files() {
    // popen("ls; cat; wc; find") and system("rm -r") from every rank: the shells and the
    // commands never initialise MPI, and see the rank's cached files through its view
    let (job, r) = compare(&calls(), &["child"], &[]);
    assert!(r.has("r0 child f") && r.has("r0 child checkpoint"), "{}", r.dump());
    assert!(job.cached_files("ckpt.1/").is_empty(), "{:?}", job.cached_files(""));
    assert!(r.stderr.contains("removed all of its files"), "{}", r.dump());
}

#[test]
fn python_listings_and_rmtree() {
    let script = common::repo().join("examples/preload/listing.py").display().to_string();
    for flush in ["0", "1"] {
        let (job, r) = compare(&[common::python(), script.clone()], &[], &[("SCR_FLUSH", flush)]);
        assert!(job.cached_files("ckpt.1/").is_empty(), "{:?}", job.cached_files(""));
        assert!(r.stderr.contains("removed all of its files"), "{}", r.dump());
    }
}

#[test]
fn cpp_directory_iterators_canonical_and_remove_all() {
    let exe = vec![app("listing.cpp", &["-std=c++17"]).display().to_string()];
    let (job, r) = compare(&exe, &[], &[]);
    assert!(job.cached_files("ckpt.1/").is_empty(), "{:?}", job.cached_files(""));
    assert!(r.stderr.contains("removed all of its files"), "{}", r.dump());
}

#[test]
fn a_panic_inside_a_hook_never_reaches_the_application() {
    // Test builds of the preload panic in the open hook for a path naming SCR_TEST_PANIC
    // (compiled out of release builds). The hook logs one line naming itself and the path,
    // the open goes to the file system as the application asked, and the run goes on.
    if !cfg!(debug_assertions) {
        return;
    }
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", PATTERNS).set("SCR_FLUSH", "0");
    let r = job.run_exe(4, &calls(), &["panic".to_string(), job.prefix.display().to_string()]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    for rank in 0..4 {
        assert!(r.has(&format!("r{rank} panic size=13 mode=644 nlink=1 content=still written")), "{}", r.dump());
    }
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("internal error")).collect();
    assert!(lines.len() >= 4, "{}", r.dump());
    for l in &lines {
        assert!(l.contains("in open(") && l.contains("SCR_TEST_PANIC") && l.contains("test panic"), "{l}");
    }
    assert!(!r.stderr.contains("panicked at"), "one line per panic, no default panic message: {}", r.dump());
    // the fallback was the real call: the file is in the prefix, as written
    assert_eq!(std::fs::read(job.prefix.join("ckpt.1/r2/SCR_TEST_PANIC")).unwrap(), b"still written");
}
