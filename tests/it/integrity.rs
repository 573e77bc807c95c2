//! The corruption and loss matrix: for every file the library writes (metadata in cache and in
//! the prefix, and the application's data in both), each of {flip a byte, truncate, delete},
//! under SINGLE, XOR and RS, the next run must restart from the checkpoint the scheme still
//! allows, and the application (test_api checks every byte it reads) must never be handed a
//! wrong byte.
//!
//! One setup per scheme, then every cell from a snapshot of it: 4 ranks (on 4 simulated nodes
//! for XOR and RS) write ckpt.1..ckpt.5 with `SCR_FLUSH=2` and `SCR_CACHE_SIZE=2`, and the run
//! dies 2 s after ckpt.5 (its background work done). So the cache holds ckpt.4 and ckpt.5, the
//! prefix ckpt.2 and ckpt.4 (current), and an untouched relaunch restarts from ckpt.5.
//!
//! Every file that records paths also gets two "path escape" cells: its paths rewritten to
//! climb out (`../..`) to a canary file beside the prefix, or to name it absolutely, header and
//! checksum valid. The relaunch must refuse
//! the file with a message naming it and the path, restart as if it were damaged, and leave
//! the canary's bytes alone.
//!
//! A new metadata file gets its rows by adding one `Target` line to `TARGETS` (and its `what`
//! to `PATH_TARGETS` if it records paths).

use crate::common;
use crate::common::Job;

/// Larger than a completion reads for its CRC32s itself (512 KiB a rank): SINGLE's come from
/// the background worker, whose file is a target.
const SIZE: &str = "600011";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Scheme {
    Single,
    Xor,
    Rs,
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip,
    Truncate,
    Delete,
    /// Rewrite every path the file records (`"rel"`) to climb out of its directory (`../..`)
    /// to a canary file outside the prefix and the cache, with a valid header and checksum:
    /// what someone who can write into the prefix (or a stray tool) can do.
    PathEscape,
    /// The same with the canary's absolute path.
    AbsolutePath,
}

/// Where a damaged file is, and what the relaunch must restart from.
struct Target {
    what: &'static str,
    /// A path tail unique below the job's root (rank 1's file where files are per rank);
    /// `{ext}` is the scheme's redundancy file extension.
    tail: &'static str,
    /// Also lose every node's cache before the relaunch (to exercise the prefix side).
    lose_cache: bool,
    /// The checkpoint step the relaunch restarts from, per scheme; `None`: no such file.
    single: Option<u32>,
    xor: Option<u32>,
    rs: Option<u32>,
}

#[rustfmt::skip]
const TARGETS: &[Target] = &[
    // prefix metadata (cache lost, so the prefix decides)
    Target { what: "index", tail: "prefix/.scr/index.scr", lose_cache: true, single: Some(4), xor: Some(4), rs: Some(4) },
    Target { what: "summary of ckpt.4", tail: "prefix/.scr/scr.dataset.4/summary.scr", lose_cache: true, single: Some(2), xor: Some(2), rs: Some(2) },
    Target { what: "rank2file of ckpt.4", tail: "prefix/.scr/scr.dataset.4/rank2file.scr", lose_cache: true, single: Some(2), xor: Some(2), rs: Some(2) },
    Target { what: "halt file", tail: "prefix/.scr/halt.scr", lose_cache: false, single: Some(5), xor: Some(5), rs: Some(5) },
    // prefix data
    Target { what: "prefix data of ckpt.4", tail: "prefix/ckpt.4/rank_1.ckpt", lose_cache: true, single: Some(2), xor: Some(2), rs: Some(2) },
    // cache metadata
    Target { what: "rank 1's filemap", tail: "filemap_1.scrinfo", lose_cache: false, single: Some(4), xor: Some(5), rs: Some(5) },
    Target { what: "flush file of rank 1's node", tail: "/flush.scr", lose_cache: false, single: Some(5), xor: Some(5), rs: Some(5) },
    Target { what: "rank 1's redundancy file of ckpt.5", tail: "scr.dataset.5/.scr/2_of_4_in_0.{ext}", lose_cache: false, single: None, xor: Some(5), rs: Some(5) },
    Target { what: "rank 1's background CRC32s of ckpt.5", tail: "scr.dataset.5/.scr/crc.1.scr", lose_cache: false, single: Some(5), xor: None, rs: None },
    // cache data
    Target { what: "cached data of ckpt.5", tail: "scr.dataset.5/ckpt.5/rank_1.ckpt", lose_cache: false, single: Some(4), xor: Some(5), rs: Some(5) },
];

/// The targets whose file records paths: they also get [`Damage::PathEscape`].
const PATH_TARGETS: &[&str] = &[
    "rank2file of ckpt.4",
    "rank 1's filemap",
    "rank 1's redundancy file of ckpt.5",
    "rank 1's background CRC32s of ckpt.5",
];

const CANARY: &[u8] = b"canary: must never be read, written or removed by SCR\n";

fn setup(scheme: Scheme) -> Job {
    let mut job = match scheme {
        Scheme::Single => Job::new(),
        Scheme::Xor | Scheme::Rs => Job::cluster(&["n0", "n1", "n2", "n3"]),
    };
    job.set("SCR_FLUSH", "2").set("SCR_CACHE_SIZE", "2");
    match scheme {
        Scheme::Single => job.set("SCR_COPY_TYPE", "SINGLE"),
        Scheme::Xor => job.set("SCR_COPY_TYPE", "XOR"),
        Scheme::Rs => job.set("SCR_COPY_TYPE", "RS").set("SCR_SET_FAILURES", "2"),
    };
    let r = job.run("test_api", &["--size", SIZE, "--steps", "5", "--crash-after", "5", "--crash-delay", "2"]);
    assert!(r.has("CRASH after ckpt.5"), "{scheme:?} setup\n{}", r.dump());
    job
}

fn damage(path: &std::path::Path, d: Damage, canary: &std::path::Path) {
    match d {
        Damage::PathEscape => common::escape_paths(path, &common::climbing_to(canary)),
        Damage::AbsolutePath => common::escape_paths(path, &canary.display().to_string()),
        Damage::Flip => {
            let mut b = std::fs::read(path).unwrap();
            let i = b.len() / 2;
            b[i] ^= 0x10;
            std::fs::write(path, b).unwrap();
        }
        Damage::Truncate => {
            let b = std::fs::read(path).unwrap();
            std::fs::write(path, &b[..b.len() / 2]).unwrap();
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
    }
}

fn lose_every_cache(job: &Job) {
    let _ = std::fs::remove_dir_all(job.root.join("nodes"));
    job.wipe_cache();
}

fn matrix(scheme: Scheme) {
    let job = setup(scheme);
    let snap = job.snapshot();
    // untouched, the relaunch restarts from the newest checkpoint, in cache
    let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
    assert!(r.has("RESTARTED ckpt.5 step=5"), "{scheme:?} untouched\n{}", r.dump());
    let mut failures = Vec::new();
    for t in TARGETS {
        let Some(expect) = (match scheme {
            Scheme::Single => t.single,
            Scheme::Xor => t.xor,
            Scheme::Rs => t.rs,
        }) else {
            continue;
        };
        let escapes: &[Damage] =
            if PATH_TARGETS.contains(&t.what) { &[Damage::PathEscape, Damage::AbsolutePath] } else { &[] };
        for &d in [Damage::Flip, Damage::Truncate, Damage::Delete].iter().chain(escapes) {
            job.restore(&snap);
            let canary = job.root.join("canary");
            std::fs::write(&canary, CANARY).unwrap();
            let tail = t.tail.replace("{ext}", if scheme == Scheme::Rs { "rs" } else { "xor" });
            let mut found: Vec<_> =
                job.find(&tail).into_iter().filter(|p| !p.starts_with(job.root.join("node/"))).collect();
            if found.len() > 1 {
                // one per node on the simulated cluster: rank 1's node is n1
                found.retain(|p| p.starts_with(job.node_dir("n1")));
            }
            assert_eq!(found.len(), 1, "{scheme:?} {}: one file ending in {} expected: {found:?}", t.what, t.tail);
            damage(&found[0], d, &canary);
            if t.lose_cache {
                lose_every_cache(&job);
            }
            let r = job.run("test_api", &["--size", SIZE, "--steps", "0"]);
            let want = format!("RESTARTED ckpt.{expect} step={expect}");
            if !r.has(&want) || r.stdout.contains("RESTART_FAILED") || r.code != Some(0) {
                failures.push(format!("{scheme:?} / {} / {d:?}: wanted {want}\n{}", t.what, r.dump()));
            }
            if matches!(d, Damage::PathEscape | Damage::AbsolutePath) {
                // refused by name, and the file outside was neither read in nor touched
                if !r.all().contains("unsafe path")
                    || !r.all().contains(&*found[0].file_name().unwrap().to_string_lossy())
                {
                    failures.push(format!(
                        "{scheme:?} / {} / {d:?}: no message naming the unsafe path\n{}",
                        t.what,
                        r.dump()
                    ));
                }
                if std::fs::read(&canary).ok().as_deref() != Some(CANARY) {
                    failures.push(format!("{scheme:?} / {} / {d:?}: the canary outside the prefix changed", t.what));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} cell(s) failed:\n{}", failures.len(), failures.join("\n=====\n"));
}

#[test]
fn single_survives_every_damaged_file_it_can() {
    matrix(Scheme::Single);
}

#[test]
fn xor_survives_every_damaged_file_it_can() {
    matrix(Scheme::Xor);
}

#[test]
fn rs_survives_every_damaged_file_it_can() {
    matrix(Scheme::Rs);
}
