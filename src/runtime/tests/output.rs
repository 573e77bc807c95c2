//! `SCR_Start_output` / `SCR_Route_file` / `SCR_Complete_output`: agreement on validity,
//! what is kept, flushed and recorded.

use super::*;

#[test]
fn one_rank_checkpoints_and_restarts_from_it() {
    let c = Cluster::new(1, 1);
    assert_eq!(c.run(|rt| rt.checkpoint("ckpt.1", true)), vec![true]);
    let got = c.run(|rt| rt.read_restart());
    assert_eq!(got, vec![Some(("ckpt.1".to_string(), content("ckpt.1", 0)))]);
}

#[test]
fn four_ranks_on_two_nodes_restart_each_from_its_own_files() {
    let c = Cluster::new(4, 2);
    assert_eq!(c.run(|rt| rt.checkpoint("ckpt.1", true)), vec![true; 4]);
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
    }
    // each node holds the files of its own ranks only
    for r in 0..4 {
        let node = c.node_dir(c.node_of(r));
        let other = c.node_dir(1 - c.node_of(r));
        let name = format!("rank.{r}");
        assert!(find(&node, &name).is_some(), "rank {r}'s file on its node");
        assert!(find(&other, &name).is_none(), "rank {r}'s file not on the other node");
    }
}

/// The first file called `name` below `dir`.
pub(super) fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if p.is_dir() {
            if let Some(f) = find(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

#[test]
fn one_invalid_rank_makes_the_dataset_invalid_everywhere_and_keeps_the_previous() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=1");
    let out = c.run(|rt| {
        let first = rt.checkpoint("ckpt.1", true);
        let r = rt.rank();
        let second = rt.checkpoint("ckpt.2", r != 2);
        (first, second, rt.cached_names())
    });
    for (r, (first, second, names)) in out.into_iter().enumerate() {
        assert!(first, "rank {r}");
        assert!(!second, "rank {r}: ckpt.2 is invalid on every rank");
        assert_eq!(names, vec!["ckpt.1".to_string()], "rank {r}");
    }
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))));
    }
}

#[test]
fn a_routed_file_missing_on_one_rank_makes_the_dataset_invalid_everywhere() {
    let c = Cluster::new(4, 1);
    let out = c.run(|rt| {
        rt.start_output(Some("ckpt.1"), CKPT).unwrap();
        let r = rt.rank();
        let path = rt.route_file(&rt.app_path(&format!("ckpt.1/rank.{r}"))).unwrap();
        if r != 3 {
            std::fs::write(&path, b"data").unwrap();
        }
        (rt.complete_output(true).unwrap(), rt.cached().len())
    });
    assert_eq!(out, vec![(false, 0); 4]);
    assert_eq!(c.run(|rt| rt.have_restart().unwrap()), vec![None; 4]);
}

#[test]
fn an_output_dataset_goes_to_the_prefix_and_leaves_the_cache() {
    let c = Cluster::new(4, 2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let ok = rt.output("out.1", OUTPUT, &[(format!("out.1/part.{r}"), content("out", r))], true);
        (ok, rt.cached().len())
    });
    assert_eq!(out, vec![(true, 0); 4]);
    for r in 0..4 {
        assert_eq!(std::fs::read(c.prefix().join(format!("out.1/part.{r}"))).unwrap(), content("out", r));
    }
    let ix = index(&c);
    let e = ix.by_name("out.1").expect("out.1 is in the index");
    assert!(e.complete && !e.desc.checkpoint && e.desc.output);
    assert_eq!(e.desc.files, 4);
}

#[test]
fn a_checkpoint_that_is_also_output_is_flushed_and_kept_in_cache() {
    let c = Cluster::new(2, 1);
    let out = c.run(|rt| {
        let r = rt.rank();
        let ok = rt.output("both.1", CKPT | OUTPUT, &[(format!("both.1/rank.{r}"), content("both.1", r))], true);
        (ok, rt.cached_names())
    });
    assert_eq!(out, vec![(true, vec!["both.1".to_string()]); 2]);
    assert!(index(&c).by_name("both.1").is_some_and(|e| e.complete));
    assert_eq!(std::fs::read(c.prefix().join("both.1/rank.1")).unwrap(), content("both.1", 1));
}

#[test]
fn scr_flush_sends_every_nth_checkpoint_to_the_prefix() {
    let c = Cluster::new(2, 1).set("SCR_FLUSH=2").set("SCR_CACHE_SIZE=3");
    let out = c.run(|rt| {
        let mut seen = Vec::new();
        for i in 1..=3 {
            rt.checkpoint(&format!("ckpt.{i}"), true);
            rt.world.barrier();
            let ix = index_of(&rt.layout);
            seen.push(ix.datasets.values().map(|e| e.desc.name.clone()).collect::<Vec<_>>());
        }
        seen
    });
    let want = vec![vec![], vec!["ckpt.2".to_string()], vec!["ckpt.2".to_string()]];
    assert_eq!(out, vec![want; 2]);
    // SCR_Finalize flushes the newest checkpoint SCR owes
    let names: Vec<String> = index(&c).datasets.values().map(|e| e.desc.name.clone()).collect();
    assert_eq!(names, vec!["ckpt.2", "ckpt.3"]);
}

fn index_of(layout: &crate::state::layout::Layout) -> crate::state::index::Index {
    crate::state::index::Index::load(&layout.index()).unwrap()
}

#[test]
fn ranks_that_pass_different_names_get_the_same_error() {
    let c = Cluster::new(3, 1);
    let out = c.run(|rt| {
        let name = if rt.rank() == 1 { "other" } else { "ckpt.1" };
        let e = rt.start_output(Some(name), CKPT).unwrap_err().to_string();
        (e.contains("different names or flags"), rt.phase == super::super::Phase::Idle)
    });
    assert_eq!(out, vec![(true, true); 3]);
}

#[test]
fn bad_flags_and_names_are_usage_errors_naming_the_call() {
    let c = Cluster::new(1, 1);
    let out = c.run(|rt| {
        let flags = rt.start_output(Some("x"), 0).unwrap_err().to_string();
        let empty = rt.start_output(Some(""), CKPT).unwrap_err().to_string();
        let long = rt.start_output(Some(&"n".repeat(crate::MAX_FILENAME)), CKPT).unwrap_err().to_string();
        (flags, empty, long)
    });
    let (flags, empty, long) = &out[0];
    assert!(flags.contains("SCR_Start_output") && flags.contains("flags=0"), "{flags}");
    assert!(empty.contains("dataset name must have 1 to"), "{empty}");
    assert!(long.contains("dataset name must have 1 to"), "{long}");
}

#[test]
fn a_file_outside_the_prefix_is_refused_and_idle_routing_is_the_identity() {
    let c = Cluster::new(1, 1);
    let out = c.run(|rt| {
        let idle = rt.route_file("/somewhere/file").unwrap();
        rt.start_output(Some("ckpt.1"), CKPT).unwrap();
        let outside = rt.route_file("/somewhere/file").unwrap_err().to_string();
        let reserved = rt.route_file(&rt.app_path(".scr/index.scr")).unwrap_err().to_string();
        rt.complete_output(true).unwrap();
        (idle, outside, reserved)
    });
    let (idle, outside, reserved) = &out[0];
    assert_eq!(idle, Path::new("/somewhere/file"));
    assert!(outside.contains("not inside the prefix directory"), "{outside}");
    assert!(reserved.contains("SCR reserves"), "{reserved}");
}

#[test]
fn calls_out_of_phase_are_usage_errors() {
    let c = Cluster::new(2, 1);
    let out = c.run(|rt| {
        let complete = rt.complete_output(true).unwrap_err().to_string();
        let restart = rt.complete_restart(true).unwrap_err().to_string();
        rt.start_output(Some("ckpt.1"), CKPT).unwrap();
        let twice = rt.start_output(Some("ckpt.2"), CKPT).unwrap_err().to_string();
        let have = rt.have_restart().unwrap_err().to_string();
        rt.complete_output(false).unwrap();
        [complete, restart, twice, have]
    });
    let [complete, restart, twice, have] = &out[1];
    assert!(complete.contains("after SCR_Start_output"), "{complete}");
    assert!(restart.contains("after SCR_Start_restart"), "{restart}");
    assert!(twice.contains("inside the output phase of dataset 1"), "{twice}");
    assert!(have.contains("SCR_Have_restart"), "{have}");
}

#[test]
fn finalize_inside_an_output_phase_discards_the_dataset() {
    let c = Cluster::new(2, 1);
    let out = local::run(2, |comm| {
        let mut rt = c.start(comm).unwrap();
        rt.checkpoint("ckpt.1", true);
        rt.start_output(Some("ckpt.2"), CKPT).unwrap();
        let e = rt.finalize_checked().unwrap_err().to_string();
        let names = rt.cached_names();
        rt.shutdown(crate::state::halt::FINALIZE_REASON);
        (e.contains("before SCR_Complete_output for dataset 2"), names)
    });
    assert_eq!(out, vec![(true, vec!["ckpt.1".to_string()]); 2]);
    assert_eq!(c.run(|rt| rt.have_restart().unwrap()), vec![Some("ckpt.1".to_string()); 2]);
}

#[test]
fn a_dataset_records_its_size_and_file_count_over_all_ranks() {
    let c = Cluster::new(4, 2);
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        let rec = rt.filemap.by_name("ckpt.1").unwrap();
        (rec.desc.files, rec.desc.size, rec.desc.ranks, rec.complete)
    });
    let size: u64 = (0..4).map(|r| content("ckpt.1", r).len() as u64).sum();
    assert_eq!(out, vec![(4, size, 4, true); 4]);
}

/// A dataset of many files per rank: each name is recorded once however often it is routed;
/// before completion the filemap file lists none of them but its routes log does, and loading
/// the filemap puts them back into the incomplete record (a line cut short, an unsafe name, a
/// name twice and another dataset's log are ignored); a dataset cut short in its output phase
/// leaves with its directory at the next `SCR_Init`, and the complete one restarts with every
/// file.
#[test]
fn many_files_are_recorded_once_each_and_a_dataset_cut_short_leaves_with_its_directory() {
    const N: usize = 300;
    let c = Cluster::new(2, 1);
    let files = |name: &str, r: usize| -> Vec<(String, Vec<u8>)> {
        (0..N).map(|i| (format!("{name}/r{r}/f{i}"), format!("{name} {r} {i}").into_bytes())).collect()
    };
    let out = c.run_dying(|rt| {
        let r = rt.rank();
        assert!(rt.output("ckpt.1", CKPT, &files("ckpt.1", r), true));
        let recorded = rt.filemap.by_name("ckpt.1").map(|rec| rec.files.len());
        // the second dataset: every file routed twice and written, then the rank dies
        rt.start_output(Some("ckpt.2"), CKPT).expect("SCR_Start_output");
        let mut dir = None;
        for (rel, bytes) in files("ckpt.2", r) {
            let first = rt.route_file(&rt.app_path(&rel)).expect("SCR_Route_file");
            assert_eq!(rt.route_file(&rt.app_path(&rel)).expect("SCR_Route_file again"), first);
            std::fs::write(&first, bytes).unwrap();
            dir.get_or_insert_with(|| rt.filemap.by_name("ckpt.2").map(|rec| rec.dir.clone()).unwrap());
        }
        let in_memory = rt.filemap.by_name("ckpt.2").map(|rec| rec.files.clone());
        let path = rt.layout.filemap(rt.world.rank());
        let file: crate::state::filemap::Filemap = crate::persist::read(&path, "filemap").unwrap().unwrap();
        let in_file = file.by_name("ckpt.2").map(|rec| (rec.complete, rec.files.len()));
        let load = || {
            let fm = crate::state::filemap::Filemap::load(&path).unwrap();
            fm.by_name("ckpt.2").map(|rec| (rec.complete, rec.files.clone()))
        };
        let loaded = load();
        // damage the log: an unsafe name, a name twice, a line cut short
        let log = crate::state::filemap::routes_path(&path);
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str(&format!("\"../../outside\"\n\"ckpt.2/r{r}/f1\"\n\"ckpt.2/r{r}/f9"));
        std::fs::write(&log, &text).unwrap();
        let damaged = load();
        // another dataset's log adds nothing
        std::fs::write(&log, text.replacen(&format!(" {}\n", rt.dataset_id), " 999\n", 1)).unwrap();
        let other = load().map(|(_, files)| files.len());
        std::fs::write(&log, text).unwrap();
        ((recorded, in_memory, in_file, loaded, damaged, other, dir.unwrap()), false)
    });
    for (r, (recorded, in_memory, in_file, loaded, damaged, other, dir)) in out.iter().enumerate() {
        assert_eq!(*recorded, Some(N), "rank {r}: ckpt.1's files, each once");
        let in_memory = in_memory.as_ref().expect("ckpt.2 recorded");
        assert_eq!(in_memory.len(), N, "rank {r}: ckpt.2's files routed twice, each once");
        assert_eq!(*in_file, Some((false, 0)), "rank {r}: the filemap file: ckpt.2 incomplete, no file yet");
        // (compared, not printed: 300 records)
        assert!(loaded.as_ref() == Some(&(false, in_memory.clone())), "rank {r}: loaded with its routes log");
        assert!(damaged.as_ref() == Some(&(false, in_memory.clone())), "rank {r}: a damaged log adds nothing more");
        assert_eq!(*other, Some(0), "rank {r}: another dataset's log adds nothing");
        assert!(dir.is_dir(), "rank {r}: ckpt.2's directory holds its files");
    }
    // the next run deletes ckpt.2 with its directory and restarts from every file of ckpt.1
    let got = c.run(|rt| {
        let r = rt.rank();
        let name = rt.have_restart().expect("SCR_Have_restart");
        assert_eq!(rt.start_restart().expect("SCR_Start_restart"), "ckpt.1");
        let mut same = 0;
        for (rel, bytes) in files("ckpt.1", r) {
            let path = rt.route_file(&rt.app_path(&rel)).expect("SCR_Route_file");
            same += usize::from(std::fs::read(&path).unwrap_or_default() == bytes);
        }
        assert!(rt.complete_restart(true).expect("SCR_Complete_restart"));
        (name, same, rt.cached_names())
    });
    for (r, (name, same, cached)) in got.into_iter().enumerate() {
        assert_eq!(name.as_deref(), Some("ckpt.1"), "rank {r}");
        assert_eq!(same, N, "rank {r}: every file of ckpt.1 read back with its bytes");
        assert_eq!(cached, vec!["ckpt.1".to_string()], "rank {r}: ckpt.2 is gone");
    }
    // (moved to the trash in SCR_Init; the trash is emptied in the background)
    for (r, (.., dir)) in out.iter().enumerate() {
        assert!(!dir.exists(), "rank {r}: ckpt.2's directory left the cache");
    }
}
