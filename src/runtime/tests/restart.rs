//! Restart selection at `SCR_Init` and the restart phase: the newest complete checkpoint,
//! skipping what is invalid, damaged, failed or of another size; fetching from the prefix.

use super::output::find;
use super::*;

#[test]
fn a_fresh_prefix_has_nothing_to_restart_from() {
    for n in [1, 4] {
        let c = Cluster::new(n, 2);
        assert_eq!(c.run(|rt| rt.have_restart().unwrap()), vec![None; n]);
        let e = c.run(|rt| rt.start_restart().unwrap_err().to_string());
        assert!(e[0].contains("no checkpoint is available"), "{}", e[0]);
    }
}

#[test]
fn the_newest_complete_checkpoint_is_offered() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=3");
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        let r = rt.rank();
        // an output-only dataset is never a restart
        rt.output("out.3", OUTPUT, &[(format!("out/{r}"), vec![1])], true);
    });
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.2".to_string(), content("ckpt.2", r))));
    }
}

#[test]
fn a_cached_file_that_fails_its_crc_skips_to_the_previous_checkpoint() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=2");
    let files = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        rt.file_of("ckpt.2")
    });
    // same size, one byte changed: only the CRC32 tells
    let mut bytes = std::fs::read(&files[1]).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&files[1], &bytes).unwrap();
    let out = c.run(|rt| (rt.read_restart(), rt.cached_names()));
    for (r, (got, names)) in out.into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
        assert_eq!(names, vec!["ckpt.1".to_string()], "rank {r}: the damaged ckpt.2 left every cache");
    }
}

#[test]
fn a_truncated_cached_file_skips_to_the_previous_checkpoint() {
    let c = Cluster::new(3, 1).set("SCR_CACHE_SIZE=2");
    let files = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        rt.file_of("ckpt.2")
    });
    std::fs::OpenOptions::new().write(true).open(&files[2]).unwrap().set_len(10).unwrap();
    let out = c.run(|rt| rt.read_restart().map(|x| x.0));
    assert_eq!(out, vec![Some("ckpt.1".to_string()); 3]);
}

#[test]
fn a_rank_that_reports_its_restart_invalid_loads_the_previous_checkpoint_everywhere() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=2");
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
    });
    let out = c.run(|rt| {
        assert_eq!(rt.start_restart().unwrap(), "ckpt.2");
        let ok = rt.complete_restart(rt.rank() != 1).unwrap();
        let next = rt.have_restart().unwrap();
        let again = rt.read_restart();
        (ok, next, again, rt.cached_names())
    });
    for (r, (ok, next, again, names)) in out.into_iter().enumerate() {
        assert!(!ok);
        assert_eq!(next.as_deref(), Some("ckpt.1"));
        assert_eq!(again, Some(("ckpt.1".to_string(), content("ckpt.1", r))));
        assert_eq!(names, vec!["ckpt.1".to_string()], "the failed ckpt.2 left the cache");
    }
}

#[test]
fn with_every_cache_lost_the_checkpoint_is_fetched_from_the_prefix() {
    let c = Cluster::new(4, 2).set("SCR_FLUSH=1");
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    c.lose_node(0);
    c.lose_node(1);
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
    }
    assert!(index(&c).by_name("ckpt.1").is_some_and(|e| !e.fetches.is_empty() && e.fetches[0].ok));
}

#[test]
fn a_prefix_checkpoint_whose_restart_failed_is_marked_failed_and_skipped_next_time() {
    let c = Cluster::new(2, 1).set("SCR_FLUSH=1").set("SCR_CACHE_SIZE=1");
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
    });
    c.lose_node(0);
    c.lose_node(1);
    let out = c.run(|rt| {
        rt.start_restart().unwrap();
        rt.complete_restart(false).unwrap()
    });
    assert_eq!(out, vec![false; 2]);
    assert!(index(&c).by_name("ckpt.2").unwrap().failed);
    c.lose_node(0);
    c.lose_node(1);
    let out = c.run(|rt| rt.read_restart().map(|x| x.0));
    assert_eq!(out, vec![Some("ckpt.1".to_string()); 2]);
}

#[test]
fn scr_current_picks_an_older_checkpoint_and_drops_the_newer_ones() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=3");
    c.run(|rt| {
        for i in 1..=3 {
            rt.checkpoint(&format!("ckpt.{i}"), true);
        }
    });
    let c = c.set("SCR_CURRENT=ckpt.2");
    let out = c.run(|rt| (rt.read_restart().map(|x| x.0), rt.cached_names()));
    assert_eq!(out, vec![(Some("ckpt.2".to_string()), vec!["ckpt.1".to_string(), "ckpt.2".to_string()]); 2]);
}

#[test]
fn scr_current_naming_no_checkpoint_fails_init_naming_the_ones_there_are() {
    let c = Cluster::new(2, 1);
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    let c = c.set("SCR_CURRENT=nope");
    let out = local::run(2, |comm| c.start(comm).err().map(|e| e.to_string()));
    for e in out {
        let e = e.expect("SCR_Init fails");
        assert!(e.contains("nope") && e.contains("ckpt.1"), "{e}");
    }
}

#[test]
fn a_checkpoint_of_another_number_of_processes_is_not_offered() {
    let mut c = Cluster::new(4, 2);
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    c.n = 2;
    let out = c.run(|rt| (rt.have_restart().unwrap(), rt.cached().len()));
    // left in cache for a run of its size
    assert_eq!(out, vec![(None, 1); 2]);
    c.n = 4;
    assert_eq!(c.run(|rt| rt.have_restart().unwrap()), vec![Some("ckpt.1".to_string()); 4]);
}

#[test]
fn a_rank_whose_control_directory_was_lost_costs_the_cached_single_checkpoint() {
    let c = Cluster::new(4, 2);
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    std::fs::remove_dir_all(c.node_dir(1).join("cntl")).unwrap();
    let out = c.run(|rt| (rt.have_restart().unwrap(), rt.cached().len()));
    assert_eq!(out, vec![(None, 0); 4]);
    assert!(find(&c.node_dir(0), "rank.0").is_none(), "node 0's copy was deleted too");
}

#[test]
fn restart_info_and_files_list_what_was_written() {
    let c = Cluster::new(2, 1);
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    let out = c.run(|rt| {
        rt.start_restart().unwrap();
        let (writers, n) = rt.restart_info().unwrap();
        let files: Vec<(PathBuf, i32)> = (0..n as i64).map(|i| rt.restart_file(i).unwrap()).collect();
        rt.complete_restart(true).unwrap();
        (writers, files)
    });
    let prefix = c.prefix();
    for (r, (writers, files)) in out.into_iter().enumerate() {
        assert_eq!(writers, 2);
        assert!(files.contains(&(prefix.join(format!("ckpt.1/rank.{r}")), r as i32)), "{files:?}");
    }
}

#[test]
fn a_background_flush_reaches_the_prefix_by_finalize_and_restarts_a_lost_cluster() {
    let c = Cluster::new(4, 2).set("SCR_FLUSH=1").set("SCR_FLUSH_ASYNC=1");
    c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
    });
    assert!(index(&c).by_name("ckpt.1").is_some_and(|e| e.complete && e.desc.files == 4));
    c.lose_node(0);
    c.lose_node(1);
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
    }
}
