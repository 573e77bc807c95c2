//! Versions of a transparent checkpoint: files the application wrote before any dataset
//! existed, formed into a dataset at a sync point; the same name written again is a new
//! version of the cached one.

use super::super::transparent::{Adopt, Adopted};
use super::*;

/// The run's transparent-mode cluster (eviction keeps room for the version being formed).
fn cluster(n: usize) -> Cluster {
    let mut c = Cluster::new(n, 1).set("SCR_CACHE_SIZE=2");
    c.mode = Mode::Transparent;
    c
}

/// Write `files` (relative to the prefix) into a staging area of this rank and adopt them as
/// dataset `name`.
fn adopt(rt: &mut Runtime, name: &str, files: &[(&str, Vec<u8>)], removed: &[&str], valid: bool) -> Adopted {
    adopt_replacing(rt, name, files, removed, valid, 0)
}

/// [`adopt`], `replaced` of the files replacing another rank's file.
fn adopt_replacing(
    rt: &mut Runtime,
    name: &str,
    files: &[(&str, Vec<u8>)],
    removed: &[&str],
    valid: bool,
    replaced: u64,
) -> Adopted {
    let staging = rt.layout.cntl_dir.join(format!("staging.{}", rt.dataset_id + 1));
    let mut list = Vec::new();
    for (rel, bytes) in files {
        let at = staging.join(rel);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, bytes).unwrap();
        list.push((PathBuf::from(rel), at));
    }
    let removed: Vec<PathBuf> = removed.iter().map(PathBuf::from).collect();
    let a =
        Adopt { name, flags: CKPT, files: &list, shared: &[], removed: &removed, replaced, valid, version_only: false };
    rt.adopt_output(&a).expect("adopt")
}

fn read(rt: &Runtime, name: &str, rel: &str) -> Option<Vec<u8>> {
    let rec = rt.filemap.by_name(name)?;
    let f = rec.files.iter().find(|f| f.rel == Path::new(rel))?;
    std::fs::read(&f.path).ok()
}

#[test]
fn the_same_name_written_twice_is_a_new_version_with_a_new_checkpoint_number() {
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let rel = format!("restart.{r}");
        let a = adopt(rt, "restart", &[(&rel, b"one".to_vec())], &[], true);
        let first = rt.filemap.by_name("restart").map(|d| (d.desc.id, d.desc.ckpt));
        let b = adopt(rt, "restart", &[(&rel, b"two".to_vec())], &[], true);
        let second = rt.filemap.by_name("restart").map(|d| (d.desc.id, d.desc.ckpt));
        (a, b, first, second, rt.cached_names(), read(rt, "restart", &rel))
    });
    for (a, b, first, second, names, bytes) in out {
        assert_eq!(a, Adopted::Complete { checkpoint: true });
        assert_eq!(b, Adopted::Complete { checkpoint: true });
        assert_eq!(first, Some((1, Some(1))));
        assert_eq!(second, Some((2, Some(2))), "a rewrite is a checkpoint of its own");
        assert_eq!(names, vec!["restart".to_string()], "the earlier version left the cache");
        assert_eq!(bytes.as_deref(), Some(&b"two"[..]));
    }
}

#[test]
fn a_file_taken_over_from_another_rank_is_a_rewrite_with_a_new_checkpoint_number() {
    // rank 1 truncates rank 0's restart.0 (transparent mode: it becomes rank 1's, rank 0
    // drops it): no rank rewrites a file of its own, but the checkpoint changed
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        adopt(rt, "restart", &[(&format!("restart.{r}"), b"one".to_vec())], &[], true);
        let b = if r == 0 {
            adopt(rt, "restart", &[], &["restart.0"], true)
        } else {
            adopt_replacing(rt, "restart", &[("restart.0", b"new".to_vec())], &[], true, 1)
        };
        (b, rt.filemap.by_name("restart").map(|d| d.desc.ckpt))
    });
    for (b, ckpt) in out {
        assert_eq!(b, Adopted::Complete { checkpoint: true });
        assert_eq!(ckpt, Some(Some(2)), "a file replaced by another rank is a rewrite");
    }
}

#[test]
fn a_version_that_only_adds_a_file_keeps_the_number_and_carries_the_earlier_files() {
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let (data, meta) = (format!("data.{r}"), format!("meta.{r}"));
        adopt(rt, "ckpt", &[(&data, b"data".to_vec())], &[], true);
        adopt(rt, "ckpt", &[(&meta, b"meta".to_vec())], &[], true);
        let rec = rt.filemap.by_name("ckpt").unwrap();
        (rec.desc.id, rec.desc.ckpt, rec.files.len(), read(rt, "ckpt", &data), read(rt, "ckpt", &meta))
    });
    for o in out {
        assert_eq!(o, (2, Some(1), 2, Some(b"data".to_vec()), Some(b"meta".to_vec())));
    }
}

#[test]
fn a_version_removing_a_file_leaves_it_out() {
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let (a, b) = (format!("a.{r}"), format!("b.{r}"));
        adopt(rt, "ckpt", &[(&a, b"a".to_vec()), (&b, b"b".to_vec())], &[], true);
        adopt(rt, "ckpt", &[], &[&b], true);
        let rec = rt.filemap.by_name("ckpt").unwrap();
        rec.files.iter().map(|f| f.rel.display().to_string()).collect::<Vec<_>>()
    });
    assert_eq!(out, vec![vec!["a.0".to_string()], vec!["a.1".to_string()]]);
}

#[test]
fn removing_every_file_of_a_checkpoint_forgets_it() {
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let rel = format!("x.{r}");
        adopt(rt, "ckpt", &[(&rel, b"x".to_vec())], &[], true);
        let gone = adopt(rt, "ckpt", &[], &[&rel], true);
        (gone, rt.cached().len())
    });
    assert_eq!(out, vec![(Adopted::Removed, 0); 2]);
}

#[test]
fn an_invalid_version_keeps_the_earlier_one_unchanged() {
    let c = cluster(3);
    let out = c.run(|rt| {
        let r = rt.rank();
        let rel = format!("restart.{r}");
        adopt(rt, "restart", &[(&rel, b"good".to_vec())], &[], true);
        let bad = adopt(rt, "restart", &[(&rel, b"half".to_vec())], &[], r != 1);
        (bad, rt.cached(), read(rt, "restart", &rel))
    });
    assert_eq!(out, vec![(Adopted::Invalid, vec![1], Some(b"good".to_vec())); 3]);
    let got = c.run(|rt| rt.have_restart().unwrap());
    assert_eq!(got, vec![Some("restart".to_string()); 3]);
}

#[test]
fn a_version_only_adoption_without_an_earlier_version_forms_nothing() {
    let c = cluster(2);
    let out = c.run(|rt| {
        let staging = rt.layout.cntl_dir.join("left");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("f"), b"x").unwrap();
        let files = vec![(PathBuf::from("f"), staging.join("f"))];
        let a = Adopt {
            name: "ckpt",
            flags: CKPT,
            files: &files,
            shared: &[],
            removed: &[],
            replaced: 0,
            valid: true,
            version_only: true,
        };
        (rt.adopt_output(&a).unwrap(), rt.cached().len())
    });
    assert_eq!(out, vec![(Adopted::Invalid, 0); 2]);
}

#[test]
fn versions_of_a_flushed_checkpoint_that_add_files_are_flushed_too() {
    let c = cluster(2).set("SCR_FLUSH=1");
    c.run(|rt| {
        let r = rt.rank();
        adopt(rt, "ckpt", &[(&format!("data.{r}"), b"data".to_vec())], &[], true);
        adopt(rt, "ckpt", &[(&format!("meta.{r}"), b"meta".to_vec())], &[], true);
    });
    assert_eq!(std::fs::read(c.prefix().join("meta.1")).unwrap(), b"meta");
    assert_eq!(std::fs::read(c.prefix().join("data.0")).unwrap(), b"data");
    let ix = index(&c);
    assert_eq!(ix.by_name("ckpt").map(|e| (e.desc.id, e.desc.files)), Some((2, 4)));
}

#[test]
fn a_file_name_that_is_not_utf8_makes_the_version_invalid_and_names_no_other_file() {
    use std::os::unix::ffi::OsStrExt;
    let c = cluster(2);
    let out = c.run(|rt| {
        // the byte 0xff is no UTF-8: a conversion through a string would name another file
        let mut bytes = format!("ckpt/r.{}.", rt.rank()).into_bytes();
        bytes.push(0xff);
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
        let staging = rt.layout.cntl_dir.join("staging.raw");
        std::fs::create_dir_all(&staging).unwrap();
        let at = staging.join(rel.file_name().unwrap());
        std::fs::write(&at, b"raw").unwrap();
        let list = vec![(rel.clone(), at.clone())];
        let a = Adopt {
            name: "ckpt",
            flags: CKPT,
            files: &list,
            shared: &[],
            removed: &[],
            replaced: 0,
            valid: true,
            version_only: false,
        };
        let adopted = rt.adopt_output(&a).expect("adopt");
        let routed = rt.route_rel(&rel).map(|(p, _)| p).map_err(|e| e.to_string());
        (adopted, rt.cached_names(), std::fs::read(&at).ok(), routed)
    });
    for (adopted, names, bytes, routed) in out {
        assert_eq!(adopted, Adopted::Invalid, "no dataset records the file under another name");
        assert!(names.is_empty(), "{names:?}");
        assert_eq!(bytes.as_deref(), Some(&b"raw"[..]), "the file stays where the application wrote it");
        let e = routed.expect_err("outside an output phase");
        assert!(e.contains("in an output phase"), "{e}");
    }
}

#[test]
fn route_rel_refuses_a_name_not_utf8_naming_the_file() {
    use std::os::unix::ffi::OsStrExt;
    let c = cluster(1);
    let out = c.run(|rt| {
        rt.start_output(Some("ckpt"), CKPT).unwrap();
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(b"ckpt/bad.\xff"));
        let e = rt.route_rel(&rel).map(|_| ()).unwrap_err().to_string();
        let ok = rt.route_rel(Path::new("ckpt/good")).map(|(p, new)| (p.ends_with("ckpt/good"), new));
        let scr = rt.route_rel(Path::new(".scr/x")).map(|_| ()).unwrap_err().to_string();
        rt.complete_output(false).unwrap();
        (e, ok.unwrap(), scr)
    });
    for (e, ok, scr) in out {
        assert!(e.contains("ckpt/bad.") && e.contains("is not valid UTF-8"), "{e}");
        assert!(e.starts_with("placing a file in cache: ") && e.contains("/prefix/ckpt/bad."), "{e}");
        assert_eq!(ok, (true, true));
        assert!(scr.contains("which SCR reserves"), "{scr}");
    }
}

#[test]
fn a_carried_file_keeps_the_crc32_of_its_bytes_as_written() {
    // version 1 holds a and b; once b's CRC32 is taken, b's bytes in cache are damaged (same
    // size); version 2 rewrites a only and carries b: b keeps the CRC32 taken of its bytes as
    // written (a restart finds the damage), not one of the damaged bytes
    let c = cluster(2);
    let out = c.run(|rt| {
        let r = rt.rank();
        let (a, b) = (format!("a.{r}"), format!("b.{r}"));
        adopt(rt, "ckpt", &[(&a, vec![1; 4096]), (&b, vec![2; 4096])], &[], true);
        rt.finish_checksums();
        let crc_of = |rt: &Runtime| {
            let rec = rt.filemap.by_name("ckpt").unwrap();
            let f = rec.files.iter().find(|f| f.rel == Path::new(&b)).unwrap();
            (f.crc, f.path.clone())
        };
        let (taken, path) = crc_of(rt);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        adopt(rt, "ckpt", &[(&a, vec![3; 4096])], &[], true);
        rt.finish_checksums();
        let (carried, _) = crc_of(rt);
        (taken, carried, crc32fast::hash(&bytes))
    });
    for (taken, carried, damaged) in out {
        assert_eq!(taken, Some(crc32fast::hash(&[2; 4096])));
        assert_eq!(carried, taken, "the damaged bytes' CRC32 is {damaged:#x}");
    }
}
