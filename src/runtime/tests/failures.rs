//! Failure paths that under `mpirun` need a kill: a run that ends between two phases, its
//! runtime dropped without `SCR_Finalize` (nothing finalised, flushed or recorded).

use super::output::find;
use super::*;

#[test]
fn a_run_killed_inside_an_output_phase_restarts_from_the_previous_checkpoint() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=1");
    c.run_dying(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.start_output(Some("ckpt.2"), CKPT).unwrap();
        let r = rt.rank();
        let p = rt.route_file(&rt.app_path(&format!("ckpt.2/rank.{r}"))).unwrap();
        std::fs::write(p, b"half written").unwrap();
        ((), false)
    });
    let out = c.run(|rt| (rt.read_restart(), rt.cached_names()));
    for (r, (got, names)) in out.into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
        assert_eq!(names, vec!["ckpt.1".to_string()], "rank {r}: the incomplete ckpt.2 is gone");
    }
}

#[test]
fn a_run_killed_after_completing_a_checkpoint_restarts_from_it() {
    let c = Cluster::new(4, 1);
    c.run_dying(|rt| (rt.checkpoint("ckpt.1", true), false));
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))));
    }
}

#[test]
fn a_run_killed_with_one_rank_between_start_and_complete_keeps_the_previous_checkpoint() {
    // ranks 0-2 completed their part of the phase locally (their files are written); rank 3
    // never wrote: the job dies before SCR_Complete_output agrees
    let c = Cluster::new(4, 1);
    c.run_dying(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.start_output(Some("ckpt.2"), CKPT).unwrap();
        let r = rt.rank();
        if r != 3 {
            let p = rt.route_file(&rt.app_path(&format!("ckpt.2/rank.{r}"))).unwrap();
            std::fs::write(p, content("ckpt.2", r)).unwrap();
        }
        ((), false)
    });
    let out = c.run(|rt| rt.read_restart().map(|x| x.0));
    assert_eq!(out, vec![Some("ckpt.1".to_string()); 4]);
}

#[test]
fn a_node_lost_after_a_killed_run_with_partner_still_restarts() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=PARTNER");
    c.run_dying(|rt| (rt.checkpoint("ckpt.1", true), false));
    c.lose_node(3);
    for (r, got) in c.run(|rt| rt.read_restart()).into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
    }
}

#[test]
fn the_relaunch_after_a_killed_run_continues_dataset_numbers() {
    let c = Cluster::new(2, 1).set("SCR_CACHE_SIZE=2");
    c.run_dying(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        ((), false)
    });
    let out = c.run(|rt| {
        rt.read_restart();
        rt.checkpoint("ckpt.3", true);
        rt.cached()
    });
    assert_eq!(out, vec![vec![2, 3]; 2]);
}

#[test]
fn a_cache_directory_removed_between_complete_and_restart_is_noticed_by_every_rank() {
    let c = Cluster::new(4, 2).set("SCR_CACHE_SIZE=2");
    let files = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.checkpoint("ckpt.2", true);
        rt.file_of("ckpt.2")
    });
    // rank 3's dataset directory vanishes (a purge, a full disk cleaned by hand)
    std::fs::remove_dir_all(files[3].parent().unwrap()).unwrap();
    let out = c.run(|rt| (rt.read_restart().map(|x| x.0), rt.cached_names()));
    assert_eq!(out, vec![(Some("ckpt.1".to_string()), vec!["ckpt.1".to_string()]); 4]);
    assert!(find(&c.node_dir(0), "rank.0").is_some());
}
