//! Redundancy schedules on the in-process communicator: PARTNER, XOR and RS encode at
//! `SCR_Complete_output`, and a relaunch rebuilds a lost node's files from the others.

use super::*;

/// Write `ckpt.1` on `c`, lose `lost` nodes, relaunch: what every rank restarts from.
fn write_lose_restart(c: &Cluster, lost: &[usize]) -> Vec<Option<(String, Vec<u8>)>> {
    assert_eq!(c.run(|rt| rt.checkpoint("ckpt.1", true)), vec![true; c.n]);
    for &node in lost {
        c.lose_node(node);
    }
    c.run(|rt| rt.read_restart())
}

fn assert_rebuilt(c: &Cluster, got: Vec<Option<(String, Vec<u8>)>>) {
    assert_eq!(got.len(), c.n);
    for (r, got) in got.into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.1".to_string(), content("ckpt.1", r))), "rank {r}");
    }
}

#[test]
fn partner_rebuilds_a_lost_node() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=PARTNER");
    let got = write_lose_restart(&c, &[2]);
    assert_rebuilt(&c, got);
}

#[test]
fn partner_rebuilds_a_node_of_two_ranks() {
    let c = Cluster::new(4, 2).set("SCR_COPY_TYPE=PARTNER");
    let got = write_lose_restart(&c, &[0]);
    assert_rebuilt(&c, got);
}

#[test]
fn xor_rebuilds_a_lost_node() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=XOR").set("SCR_SET_SIZE=4");
    let got = write_lose_restart(&c, &[1]);
    assert_rebuilt(&c, got);
}

#[test]
fn xor_with_a_single_rank_still_restarts() {
    let c = Cluster::new(1, 1).set("SCR_COPY_TYPE=XOR");
    let got = write_lose_restart(&c, &[]);
    assert_rebuilt(&c, got);
}

#[test]
fn rs_rebuilds_two_lost_nodes() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=RS").set("SCR_SET_SIZE=4").set("SCR_SET_FAILURES=2");
    let got = write_lose_restart(&c, &[0, 3]);
    assert_rebuilt(&c, got);
}

#[test]
fn rs_rebuilds_a_file_that_fails_its_crc() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=RS").set("SCR_SET_SIZE=4").set("SCR_SET_FAILURES=1");
    let files = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        rt.file_of("ckpt.1")
    });
    let mut bytes = std::fs::read(&files[2]).unwrap();
    bytes[7] ^= 1;
    std::fs::write(&files[2], &bytes).unwrap();
    let got = c.run(|rt| rt.read_restart());
    assert_rebuilt(&c, got);
}

#[test]
fn xor_cannot_rebuild_two_lost_nodes_of_a_set_and_falls_back_to_the_prefix() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=XOR").set("SCR_SET_SIZE=4").set("SCR_FLUSH=2");
    c.run(|rt| {
        for i in 1..=3 {
            rt.checkpoint(&format!("ckpt.{i}"), true);
        }
    });
    // ckpt.3 was flushed at SCR_Finalize; take it out of the prefix's index to see the fallback
    let layout = crate::state::layout::Layout::prefix_only(crate::paths::Prefix::new(&c.prefix()));
    crate::state::index::Index::update(&layout.index(), |ix| {
        let id = ix.by_name("ckpt.3").expect("ckpt.3 was flushed").desc.id;
        ix.datasets.remove(&id);
    })
    .unwrap();
    c.lose_node(1);
    c.lose_node(2);
    let out = c.run(|rt| (rt.read_restart(), rt.cached_names()));
    for (r, (got, names)) in out.into_iter().enumerate() {
        assert_eq!(got, Some(("ckpt.2".to_string(), content("ckpt.2", r))), "rank {r}");
        assert_eq!(names, vec!["ckpt.2".to_string()], "rank {r}: ckpt.3 left every cache, ckpt.2 was fetched");
    }
}

#[test]
fn single_loses_the_checkpoint_with_its_node_on_every_rank() {
    let c = Cluster::new(4, 2);
    let out = {
        c.run(|rt| {
            rt.checkpoint("ckpt.1", true);
        });
        c.lose_node(1);
        c.run(|rt| (rt.have_restart().unwrap(), rt.cached().len()))
    };
    assert_eq!(out, vec![(None, 0); 4]);
}

#[test]
fn redundancy_is_applied_to_every_checkpoint_and_old_encodings_leave_with_their_dataset() {
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=XOR").set("SCR_SET_SIZE=4").set("SCR_CACHE_SIZE=1");
    let out = c.run(|rt| {
        let mut schemes = Vec::new();
        for i in 1..=3 {
            rt.checkpoint(&format!("ckpt.{i}"), true);
            let rec = rt.filemap.by_name(&format!("ckpt.{i}")).unwrap();
            schemes.push(rec.red.as_ref().map(|r| r.scheme.name()));
        }
        (schemes, rt.cached())
    });
    assert_eq!(out, vec![(vec![Some("XOR"); 3], vec![3]); 4]);
    c.lose_node(3);
    let got = c.run(|rt| rt.read_restart().map(|x| x.1));
    for (r, g) in got.into_iter().enumerate() {
        assert_eq!(g, Some(content("ckpt.3", r)));
    }
}

#[test]
fn encoding_in_the_background_protects_the_checkpoint_once_finished() {
    // in-process ranks may all use MPI at any time: the background encoder runs
    let c = Cluster::new(4, 1).set("SCR_COPY_TYPE=XOR").set("SCR_SET_SIZE=4").set("SCR_ENCODE_ASYNC=1");
    let out = c.run(|rt| {
        rt.checkpoint("ckpt.1", true);
        let rd = rt.filemap.by_name("ckpt.1").unwrap().reddesc.clone();
        let active = rt.encodes_async(rd.index, rd.bypass);
        rt.finish_encodes();
        let scheme = rt.filemap.by_name("ckpt.1").and_then(|r| r.red.as_ref().map(|r| r.scheme.name()));
        (active, scheme)
    });
    assert_eq!(out, vec![(true, Some("XOR")); 4]);
    c.lose_node(2);
    let got = c.run(|rt| rt.read_restart());
    assert_rebuilt(&c, got);
}
