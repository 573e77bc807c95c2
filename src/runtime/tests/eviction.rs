//! Which cached datasets leave a store, and when: never the newest complete checkpoint while
//! a new one is written.

use super::output::find;
use super::*;

/// How many copies of rank `r`'s files of any checkpoint are on its node.
fn files_on_node(c: &Cluster, r: usize) -> usize {
    let mut n = 0;
    let mut stack = vec![c.node_dir(c.node_of(r))];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|f| f == format!("rank.{r}").as_str()) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn cache_size_1_keeps_the_newest_only() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=1");
    let out = c.run(|rt| (1..=3).map(|i| (rt.checkpoint(&format!("ckpt.{i}"), true), rt.cached())).collect::<Vec<_>>());
    assert_eq!(out[0], vec![(true, vec![1]), (true, vec![2]), (true, vec![3])]);
    for r in 0..4 {
        assert_eq!(files_on_node(&c, r), 1, "rank {r}: the evicted files are deleted");
    }
}

#[test]
fn cache_size_1_keeps_the_last_good_checkpoint_while_the_next_is_written() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=1");
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        let old = rt.file_of("ckpt.1");
        rt.start_output(Some("ckpt.2"), CKPT).unwrap();
        let r = rt.rank();
        let p = rt.route_file(&rt.app_path(&format!("ckpt.2/rank.{r}"))).unwrap();
        std::fs::write(p, content("ckpt.2", r)).unwrap();
        let during = (rt.cached(), old.exists());
        rt.complete_output(true).unwrap();
        (during, rt.cached(), old.exists())
    });
    assert_eq!(out, vec![((vec![1, 2], true), vec![2], false); 4]);
}

#[test]
fn cache_size_2_evicts_the_oldest_first() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=2");
    let out = c.run(|rt| (1..=4).map(|i| (rt.checkpoint(&format!("ckpt.{i}"), true), rt.cached())).collect::<Vec<_>>());
    assert_eq!(out[1], vec![(true, vec![1]), (true, vec![1, 2]), (true, vec![2, 3]), (true, vec![3, 4])]);
    for r in 0..2 {
        assert_eq!(files_on_node(&c, r), 2);
    }
}

#[test]
fn cache_size_2_keeps_both_while_a_third_is_written() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=2");
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        rt.start_output(Some("ckpt.3"), CKPT).unwrap();
        let during = rt.cached();
        // the application gives up on this one
        rt.complete_output(false).unwrap();
        (during, rt.cached())
    });
    assert_eq!(out, vec![(vec![1, 2, 3], vec![1, 2]); 2]);
}

#[test]
fn an_invalid_checkpoint_never_costs_the_previous_one() {
    let c = Cluster::new(4, 1).set("SCR_CACHE_SIZE=1");
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        let r = rt.rank();
        let ok = rt.checkpoint("ckpt.2", r != 0);
        (ok, rt.cached_names())
    });
    assert_eq!(out, vec![(false, vec!["ckpt.1".to_string()]); 4]);
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))));
    }
}

#[test]
fn scr_delete_removes_a_named_checkpoint_from_cache() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=2");
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        let path = rt.file_of("ckpt.2");
        rt.delete("ckpt.2").unwrap();
        (rt.cached_names(), path.exists())
    });
    assert_eq!(out, vec![(vec!["ckpt.1".to_string()], false); 2]);
    assert_eq!(c.run(|rt| rt.have_restart().unwrap()), vec![Some("ckpt.1".to_string()); 2]);
    assert!(find(&c.node_dir(0), "rank.0").is_some());
}

#[test]
fn a_store_count_from_a_descriptor_overrides_the_cache_size() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=1").set("STORE=/cache COUNT=3");
    let out = c.run(|rt| {
        for i in 1..=4 {
            rt.checkpoint(&format!("ckpt.{i}"), true);
        }
        rt.cached()
    });
    assert_eq!(out, vec![vec![2, 3, 4]; 2]);
}
