//! Transparent mode with the output shapes of real applications (issue 22), each an
//! unmodified C program (`examples/preload/shapes.c`) under the preload with 4 ranks:
//! files closed after the last collective (OpenFOAM's last time directory), restart files
//! rewritten in place under the same name (LAMMPS' toggle files, Quantum ESPRESSO's `out/`),
//! and a file kept open for writing all run (Quantum ESPRESSO `disk_io='high'`).

use crate::common;

use crate::common::{app, Job, Run};

fn run(job: &Job, args: &[&str]) -> Run {
    let mut all = vec!["--dir".to_string(), job.prefix.display().to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    job.run_exe(4, &[app("shapes.c", &[]).display().to_string()], &all)
}

fn transparent(patterns: &str, flush: &str) -> Job {
    let mut job = Job::new();
    job.preload().set("SCR_PRELOAD_PATTERNS", patterns).set("SCR_FLUSH", flush);
    job
}

/// Files under the prefix whose relative path starts with `start`, sorted.
fn in_prefix(job: &Job, start: &str) -> Vec<String> {
    let mut out = Vec::new();
    common::walk(&job.prefix, &mut |p| {
        let rel = p.strip_prefix(&job.prefix).unwrap().display().to_string();
        if rel.starts_with(start) {
            out.push(rel);
        }
    });
    out.sort();
    out
}

/// The index's complete datasets named `name`: their checkpoint numbers, oldest first.
fn indexed(job: &Job, name: &str) -> Vec<u64> {
    let ix = job.index();
    ix["datasets"]
        .as_object()
        .unwrap()
        .values()
        .filter(|d| d["desc"]["name"] == name && d["complete"] == true)
        .map(|d| d["desc"]["ckpt"].as_u64().unwrap())
        .collect()
}

/// The messages of a transparent run name no SCR call: the application made none.
fn assert_no_api_names(r: &Run) {
    for call in ["SCR_Init", "SCR_Start_output", "SCR_Route_file", "SCR_Complete_output", "SCR_Finalize"] {
        assert!(!r.stderr.contains(call), "{call}: {}", r.dump());
    }
}

/// The 4-byte step a data file starts with.
fn step_of(path: &std::path::Path) -> i32 {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    i32::from_ne_bytes(b[..4].try_into().unwrap())
}

#[test]
fn files_closed_after_the_last_collective_become_a_dataset_in_mpi_finalize() {
    // SCR_FLUSH=0: a dataset in cache, nothing in the prefix; the next run reads it there
    let job = transparent("final/**", "0");
    let r = run(&job, &["--shape", "final", "--steps", "3"]);
    assert!(r.has("NO_RESTART") && r.has("DONE"), "{}", r.dump());
    assert_eq!(job.cached_files("final/rank_").len(), 4, "{:?}\n{}", job.cached_files(""), r.dump());
    assert!(job.cached_files("scr.pending/0/final").is_empty(), "{:?}", job.cached_files(""));
    assert_eq!(in_prefix(&job, "final/"), Vec::<String>::new(), "{}", r.dump());
    let r = run(&job, &["--shape", "final", "--steps", "5"]);
    assert!(r.has("RESTARTED final 3 verified") && r.has("DONE"), "{}", r.dump());
    // the files written again in that run's MPI_Finalize are the next version
    let r = run(&job, &["--shape", "final", "--steps", "2"]);
    assert!(r.has("RESTARTED final 5 verified"), "{}", r.dump());

    // SCR_FLUSH=1: flushed and indexed; a lost cache restarts from the prefix
    let job = transparent("final/**", "1");
    let r = run(&job, &["--shape", "final", "--steps", "3"]);
    assert!(r.has("DONE"), "{}", r.dump());
    assert_eq!(indexed(&job, "final").len(), 1, "{}\n{}", job.index(), r.dump());
    let files = in_prefix(&job, "final/");
    assert_eq!(files.len(), 4, "{files:?}");
    for f in &files {
        assert_eq!(step_of(&job.prefix.join(f)), 3, "{f}");
    }
    job.wipe_cache();
    let r = run(&job, &["--shape", "final", "--steps", "4"]);
    assert!(r.has("RESTARTED final 3 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn restart_files_rewritten_under_one_name_are_flushed_every_scr_flush_versions() {
    // rank files toggle/rank_<r>.a (odd steps) and .b (even steps) rewritten in place, one
    // dataset "toggle". Step 2 only adds the .b files (the same checkpoint); from step 3 on
    // each version rewrites files and is a checkpoint of its own: checkpoints 2 (step 3) and
    // 4 (step 5) are flushed with SCR_FLUSH=2, checkpoint 3 (step 4) is not.
    let job = transparent("toggle/**", "2");
    let r = run(&job, &["--shape", "toggle", "--steps", "8", "--crash-at", "6"]);
    assert!(r.has("CHECKPOINT 5") && !r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(indexed(&job, "toggle"), vec![2, 4], "{}\n{}", job.index(), r.dump());
    let files = in_prefix(&job, "toggle/");
    assert_eq!(files.len(), 8, "{files:?}");
    for f in &files {
        let want = if f.ends_with(".a") { 5 } else { 4 };
        assert_eq!(step_of(&job.prefix.join(f)), want, "{f}: the newest flushed version's bytes");
    }
    // the cache holds the newest version (step 5) only
    let cached = job.cached_files("toggle/rank_");
    assert_eq!(cached.len(), 8, "{cached:?}");
    // the cache is lost: the run restarts from the prefix, at step 5
    job.wipe_cache();
    let r = run(&job, &["--shape", "toggle", "--steps", "7"]);
    assert!(r.has("RESTARTED 5 verified") && r.has("DONE"), "{}", r.dump());
}

#[test]
fn restart_files_opened_for_reading_and_writing_but_only_read_make_no_checkpoint() {
    // Fortran's OPEN without ACTION= opens O_RDWR (gfortran): a restart that only reads its
    // files that way forms no version of them (SCR_FLUSH=1 would flush it as a checkpoint);
    // files updated in place through such a descriptor do
    let job = transparent("toggle/**", "1");
    let r = run(&job, &["--shape", "toggle", "--steps", "4", "--update"]);
    assert!(r.has("NO_RESTART") && r.has("CHECKPOINT 4") && r.has("DONE"), "{}", r.dump());
    let newest = |job: &Job| indexed(job, "toggle").into_iter().max();
    let flushed = newest(&job);
    assert!(flushed.is_some(), "{}\n{}", job.index(), r.dump());
    for _ in 0..2 {
        let r = run(&job, &["--shape", "toggle", "--steps", "4", "--read-rw"]);
        assert!(r.has("RESTARTED 4 verified") && r.has("DONE"), "{}", r.dump());
        assert_eq!(newest(&job), flushed, "{}\n{}", job.index(), r.dump());
        assert!(job.cached_files("scr.pending/").iter().all(|f| !f.contains("toggle")), "{:?}", job.cached_files(""));
    }
    let r = run(&job, &["--shape", "toggle", "--steps", "5", "--read-rw", "--update"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("CHECKPOINT 5"), "{}", r.dump());
    assert_eq!(newest(&job), flushed.map(|c| c + 1), "{}\n{}", job.index(), r.dump());
    // the updated bytes are what the prefix holds: a lost cache restarts at step 5
    job.wipe_cache();
    let r = run(&job, &["--shape", "toggle", "--steps", "5", "--read-rw"]);
    assert!(r.has("RESTARTED 5 verified") && r.has("DONE"), "{}", r.dump());
    assert_no_api_names(&r);
}

#[test]
fn a_restart_file_updated_through_a_shared_mapping_after_its_close_is_a_checkpoint() {
    // each step maps its file shared right after opening it for an update in place, closes
    // the descriptor before writing a byte, then writes through the mapping: the copy must
    // not be dropped as unchanged at that close, or the steps' bytes go to a file that is gone
    let job = transparent("toggle/**", "1");
    let r = run(&job, &["--shape", "toggle", "--steps", "4", "--update", "--mmap"]);
    assert!(r.has("NO_RESTART") && r.has("CHECKPOINT 4") && r.has("DONE"), "{}", r.dump());
    let r = run(&job, &["--shape", "toggle", "--steps", "6", "--update", "--mmap"]);
    assert!(r.has("RESTARTED 4 verified") && r.has("CHECKPOINT 6"), "{}", r.dump());
    // from cache (read through a shared mapping, unmapped before the close: no version
    // forms), and from the prefix once the cache is lost
    let newest = |job: &Job| indexed(job, "toggle").into_iter().max();
    let flushed = newest(&job);
    let r = run(&job, &["--shape", "toggle", "--steps", "6", "--read-rw", "--mmap"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
    assert_eq!(newest(&job), flushed, "{}\n{}", job.index(), r.dump());
    job.wipe_cache();
    let r = run(&job, &["--shape", "toggle", "--steps", "6", "--read-rw"]);
    assert!(r.has("RESTARTED 6 verified") && r.has("DONE"), "{}", r.dump());
    assert_no_api_names(&r);
}

/// A library of this machine's multiarch directories (`/usr/lib/<triplet>/`, `/usr/lib64`).
fn system_lib(name: &str) -> Option<std::path::PathBuf> {
    let dirs = std::fs::read_dir("/usr/lib")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu")));
    dirs.chain([std::path::PathBuf::from("/usr/lib64")]).map(|d| d.join(name)).find(|p| p.exists())
}

#[test]
fn allocators_preloaded_beside_the_library_map_through_its_mmap_hook() {
    // jemalloc and tcmalloc map their memory with mmap, some of it while holding their own
    // lock, and the preload hooks mmap: preloaded before it and after it, a run checkpoints
    // through shared mappings and restarts
    for (lib, before) in [("libjemalloc.so.2", true), ("libtcmalloc_minimal.so.4", false)] {
        let Some(path) = system_lib(lib) else {
            // (scripts/setup.sh installs both as root)
            eprintln!("SKIPPED: {lib} missing (apt-get install libjemalloc2 libtcmalloc-minimal4)");
            continue;
        };
        let mut job = transparent("toggle/**", "0");
        job.preload_also(&path, before);
        let r = run(&job, &["--shape", "toggle", "--steps", "3", "--update", "--mmap"]);
        assert!(r.has("NO_RESTART") && r.has("CHECKPOINT 3") && r.has("DONE"), "{lib}\n{}", r.dump());
        let r = run(&job, &["--shape", "toggle", "--steps", "4", "--update", "--mmap"]);
        assert!(r.has("RESTARTED 3 verified") && r.has("CHECKPOINT 4"), "{lib}\n{}", r.dump());
    }
}

#[test]
fn restart_files_rewritten_under_one_name_flush_in_the_background_when_due() {
    // SCR_FLUSH_ASYNC=1: a due version goes to the prefix in the background, one not due
    // is not flushed at all (no synchronous flush because an earlier version was flushed)
    let mut job = transparent("toggle/**", "2");
    job.set("SCR_FLUSH_ASYNC", "1").set("SCR_DEBUG", "1");
    let r = run(&job, &["--shape", "toggle", "--steps", "5"]);
    assert!(r.has("DONE"), "{}", r.dump());
    assert_no_api_names(&r);
    // datasets 3 and 5 (steps 3 and 5) in the background; dataset 4 (step 4) not at all
    let all = r.all();
    assert_eq!(all.matches("background flush started").count(), 2, "{}", r.dump());
    for id in [3, 5] {
        assert!(all.contains(&format!("dataset {id}: background flush started")), "{id}: {}", r.dump());
    }
    assert!(!all.contains("flushed dataset 4 "), "step 4 is not due: {}", r.dump());
    assert_eq!(indexed(&job, "toggle"), vec![2, 4], "{}", job.index());
    let r = run(&job, &["--shape", "toggle", "--steps", "6"]);
    assert!(r.has("RESTARTED 5 verified"), "{}", r.dump());
}

#[test]
fn a_file_open_for_writing_all_run_blocks_only_its_own_dataset_and_is_reported_once() {
    // every rank keeps hold/wfc_<r>.dat open and writes ckpt.<step>/rank_<r>.dat each step,
    // 32 sync points per step: the checkpoints complete anyway, and once the file has been
    // open across more than 100 sync points rank 0 says so, once
    let job = transparent("ckpt.*/**,hold/**", "0");
    let r = run(&job, &["--shape", "hold", "--steps", "7", "--syncs", "30", "--crash-at", "6"]);
    assert!(r.has("CHECKPOINT 5"), "{}", r.dump());
    assert_eq!(job.cached_files("ckpt.5/rank_").len(), 4, "{:?}\n{}", job.cached_files(""), r.dump());
    assert!(job.cached_files("scr.pending/0/ckpt").is_empty(), "{:?}", job.cached_files(""));
    let warned = r.stderr.matches("has been open for writing across").count();
    assert_eq!(warned, 1, "{}", r.dump());
    let line = r.stderr.lines().find(|l| l.contains("has been open for writing across")).unwrap();
    for part in ["hold/wfc_", "!hold/wfc_*.dat", "hold/**", "SCR_PRELOAD_PATTERNS", "3 more rank(s)"] {
        assert!(line.contains(part), "{part}: {line}");
    }
    let r = run(&job, &["--shape", "hold", "--steps", "7", "--syncs", "30"]);
    assert!(r.has("RESTARTED 5 verified") && r.has("DONE"), "{}", r.dump());
    // that run closed the held files before MPI_Finalize: they became a dataset there, and
    // the checkpoint the pointer names is still served
    let r = run(&job, &["--shape", "hold", "--steps", "8", "--syncs", "30"]);
    assert!(r.has("RESTARTED 7 verified") && r.has("DONE"), "{}\n{:?}", r.dump(), job.cached_files(""));
}

#[test]
fn a_file_held_open_that_is_the_only_pending_file_is_reported() {
    // only hold/** is taken: the file every rank keeps open is the only pending file, no
    // other closes to make a sync point look at it; it is still reported once
    let job = transparent("hold/**", "0");
    let r = run(&job, &["--shape", "hold", "--steps", "7", "--syncs", "30"]);
    assert!(r.has("DONE"), "{}", r.dump());
    let warned = r.stderr.matches("has been open for writing across").count();
    assert_eq!(warned, 1, "{}", r.dump());
    let line = r.stderr.lines().find(|l| l.contains("has been open for writing across")).unwrap();
    for part in ["hold/wfc_", "!hold/wfc_*.dat", "3 more rank(s)"] {
        assert!(line.contains(part), "{part}: {line}");
    }
}

#[test]
fn a_halt_condition_at_start_names_mpi_init_not_scr_init() {
    // the preload runs SCR_Init inside MPI_Init: the message says so in the user's terms
    let job = transparent("final/**", "0");
    std::fs::create_dir_all(job.prefix.join(".scr")).unwrap();
    scr::state::halt::Halt::update(&job.prefix.join(".scr/halt.scr"), |h| h.checkpoints_left = Some(0)).unwrap();
    let r = run(&job, &["--shape", "final", "--steps", "2"]);
    assert!(r.stderr.contains("halt condition at MPI_Init"), "{}", r.dump());
    assert_no_api_names(&r);
}

/// The index's entries named `name`, by checkpoint number: (dataset id, entry).
fn entries(job: &Job, name: &str) -> Vec<(u64, serde_json::Value)> {
    let ix = job.index();
    ix["datasets"]
        .as_object()
        .unwrap()
        .values()
        .filter(|d| d["desc"]["name"] == name)
        .map(|d| (d["desc"]["ckpt"].as_u64().unwrap(), d.clone()))
        .collect()
}

#[test]
fn pruning_an_older_version_keeps_the_files_the_newer_version_of_its_name_lists() {
    // toggle checkpoints 2 and 4 (datasets 3 and 5) are flushed to the same prefix paths;
    // with SCR_PREFIX_SIZE=2 a checkpoint of another name pushes checkpoint 2 out of the
    // window: deleting it must leave the files checkpoint 4 lists (and owns)
    let mut job = transparent("toggle/**, final/**", "2");
    job.set("SCR_PREFIX_SIZE", "2");
    let r = run(&job, &["--shape", "toggle", "--steps", "8", "--crash-at", "6"]);
    assert!(r.has("CHECKPOINT 5") && !r.has("CHECKPOINT 6"), "{}", r.dump());
    assert_eq!(indexed(&job, "toggle"), vec![2, 4], "{}\n{}", job.index(), r.dump());
    job.set("SCR_FLUSH", "1");
    let r = run(&job, &["--shape", "final", "--steps", "1"]);
    assert!(r.has("DONE"), "{}", r.dump());
    assert_eq!(indexed(&job, "final").len(), 1, "{}\n{}", job.index(), r.dump());
    let toggle = entries(&job, "toggle");
    assert_eq!(toggle.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![4], "{}\n{}", job.index(), r.dump());
    let files = in_prefix(&job, "toggle/");
    assert_eq!(files.len(), 8, "{files:?}\n{}", r.dump());
    for f in &files {
        let want = if f.ends_with(".a") { 5 } else { 4 };
        assert_eq!(step_of(&job.prefix.join(f)), want, "{f}");
    }
    // the cache is lost: the toggle files are in the prefix, checkpoint 4 is fetchable
    job.wipe_cache();
    let out = job.command(env!("CARGO_BIN_EXE_scr_index")).args(["--current", "toggle"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    job.set("SCR_FLUSH", "0");
    let r = run(&job, &["--shape", "toggle", "--steps", "7"]);
    assert!(r.has("RESTARTED 5 verified") && r.has("DONE"), "{}", r.dump());
    let (_, e) = &entries(&job, "toggle")[0];
    assert_eq!(e["fetches"][0]["ok"], true, "{}", job.index());
}

#[test]
fn an_older_version_is_superseded_before_a_newer_one_is_flushed_over_its_files() {
    // checkpoint 4 (dataset 5) is flushed to the paths checkpoint 2 (dataset 3) lists: from
    // the start of that flush, checkpoint 2 is failed, superseded by dataset 5, and scr_index
    // says so
    let mut job = transparent("toggle/**", "2");
    job.set("SCR_CRC_ON_COPY", "0");
    let r = run(&job, &["--shape", "toggle", "--steps", "8", "--crash-at", "6"]);
    assert!(r.has("CHECKPOINT 5"), "{}", r.dump());
    let toggle = entries(&job, "toggle");
    assert_eq!(toggle.len(), 2, "{}", job.index());
    let (old, new) = (&toggle[0].1, &toggle[1].1);
    assert_eq!((old["failed"].clone(), old["superseded_by"].clone()), (true.into(), 5.into()), "{}", job.index());
    assert_eq!((new["complete"].clone(), new["failed"].clone()), (true.into(), false.into()), "{}", job.index());
    let out = job.command(env!("CARGO_BIN_EXE_scr_index")).arg("--list").output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("(superseded: dataset 5 was flushed over its files)"), "{list}");
    // a run killed while copying checkpoint 4 leaves its entry incomplete and the prefix files
    // a mix of steps 3..5: after a lost cache no restart loads checkpoint 2 from them
    scr::state::index::Index::update(&job.prefix.join(".scr/index.scr"), |ix| {
        let e = ix.datasets.get_mut(&5).unwrap();
        e.complete = false;
        e.flushing = true;
    })
    .unwrap();
    job.wipe_cache();
    let r = run(&job, &["--shape", "toggle", "--steps", "7"]);
    assert!(r.has("DONE"), "{}", r.dump());
    let toggle = entries(&job, "toggle");
    assert!(
        toggle.iter().all(|(_, e)| e["fetches"].as_array().is_none_or(|f| f.is_empty())),
        "nothing fetched from a superseded or incomplete entry: {}\n{}",
        job.index(),
        r.dump()
    );
}
