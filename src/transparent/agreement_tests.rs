//! The sync-point agreements of transparent mode on the in-process communicator
//! (`crate::comm::local`): the flags every rank gets and the dataset names the ranks'
//! files agree on, without `mpirun` or the preload.

use super::naming;
use super::sync::{agree, Flags};
use crate::comm::local;
use crate::config::patterns::{self, PatternSet, Route};

#[test]
fn a_flag_any_rank_raises_reaches_every_rank() {
    for n in [1usize, 4] {
        let out = local::run(n, |c| {
            let r = c.rank() as usize;
            // rank r raises flag r, except the last of four ranks, which raises none
            let mine: Flags = std::array::from_fn(|i| i == r && !(n == 4 && r == 3));
            (agree(&c, mine), agree(&c, [false; 4]))
        });
        let want = if n == 1 { [true, false, false, false] } else { [true, true, true, false] };
        assert_eq!(out, vec![(want, [false; 4]); n], "{n} rank(s)");
    }
}

/// Each rank's dataset names for `files` (its own) under `pattern`, after the agreement.
fn names(n: usize, pattern: &str, files: impl Fn(usize) -> Vec<String> + Sync) -> Vec<Vec<String>> {
    let specs = patterns::from_config(&[], Some(("test", pattern))).unwrap();
    let set = PatternSet::compile(&specs).unwrap();
    local::run(n, |c| {
        let r = c.rank() as usize;
        let routes: Vec<Route> =
            files(r).iter().map(|f| set.route(f, r as u32).expect("the pattern takes it")).collect();
        let varies = naming::agree(&c, routes.iter());
        routes.iter().map(|rt| rt.named(|p, run| varies.contains(&(p, run)))).collect()
    })
}

#[test]
fn the_ranks_part_of_a_default_name_is_agreed_so_one_step_is_one_dataset() {
    // LAMMPS-like: rank r writes lj.200.<r>, rank 0 also lj.200.base
    let out = names(3, "lj.*.*", |r| {
        let mut f = vec![format!("lj.200.{r}")];
        if r == 0 {
            f.push("lj.200.base".into());
        }
        f
    });
    assert_eq!(out[0], vec!["lj.200.*", "lj.200.*"]);
    assert_eq!(out[1], vec!["lj.200.*"]);
    assert_eq!(out[2], vec!["lj.200.*"]);
}

#[test]
fn a_value_several_ranks_share_keeps_steps_apart() {
    // rank 0's late file of step 4 beside every rank's files of step 6
    let out = names(3, "ckpt.*/*", |r| {
        let mut f = vec![format!("ckpt.6/{r}")];
        if r == 0 {
            f.push("ckpt.4/meta".into());
        }
        f
    });
    // (the name of a directory's files is the directory)
    assert_eq!(out[0], vec!["ckpt.6", "ckpt.4"]);
    assert_eq!(out[2], vec!["ckpt.6"]);
}

#[test]
fn one_rank_alone_keeps_its_names() {
    let out = names(1, "lj.*.*", |_| vec!["lj.200.0".to_string()]);
    assert_eq!(out, vec![vec!["lj.200.0".to_string()]]);
}
