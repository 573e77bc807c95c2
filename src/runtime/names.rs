//! The check of the names the ranks routed in an output phase, at its completion
//! (`SCR_Complete_output`, collective): every rank's outcome, bytes and files, the hashes of
//! the names it routed for itself and the names it declared shared go to rank 0, which decides
//! whether the dataset is valid everywhere and which files are shared, and broadcasts its
//! verdict (a gather and a broadcast: only rank 0 receives bytes that grow with the number of
//! processes; transparent mode, where every rank keeps every rank's listing, allgathers them
//! and every rank decides alike). A name several ranks routed for themselves is a misuse named
//! once with its remedy (a bypass dataset makes it a shared file, as SCR 3 does), so is one
//! declared shared by some ranks and routed privately by others; equal hashes take a second
//! round with the names behind them. [`super::shared`] then completes the shared files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RuntimeError;
use super::{Mode, Runtime};
use crate::error::Result;
use crate::state::dataset::SharedFile;

/// What one rank says at the completion of an output phase: the hashes of the names it
/// routed for itself, the names it declared shared, why the dataset is invalid on it, and
/// its bytes and files.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Routed {
    private: Vec<u64>,
    /// Transparent mode: its files described for the other ranks ([`super::peers`]; `None`:
    /// too many, or API mode).
    listed: super::peers::Part,
    shared: Vec<PathBuf>,
    failed: Option<String>,
    bytes: u64,
    files: u64,
}

/// What the ranks' [`Routed`] say, alike on every rank.
pub(super) enum Agreed {
    /// Some rank failed: the summary.
    Failed(String),
    /// The names, checked, the dataset's (bytes, files) on all ranks, and every rank's
    /// description of its files (transparent mode).
    Names(std::result::Result<Vec<SharedFile>, RuntimeError>, (u64, u64), Vec<super::peers::Part>),
}

/// What the deciding rank holds after the first round of [`Runtime::agree_names`]: every
/// rank's [`Routed`] (listings taken out), the totals, the listings.
type Decided = (Vec<Routed>, (u64, u64), Vec<super::peers::Part>);

/// Rank 0's verdict on every rank's [`Routed`], broadcast ([`Runtime::agree_names`]).
#[derive(Serialize, Deserialize)]
enum Verdict {
    /// Some rank failed: the summary.
    Failed(String),
    /// Several ranks routed names with these hashes for themselves: their names are needed.
    Hashes(Vec<u64>),
    /// As [`Agreed::Names`].
    Names(std::result::Result<Vec<SharedFile>, NameError>, (u64, u64), Vec<super::peers::Part>),
}

impl Verdict {
    /// The final verdict of [`plan_shared`]'s answer, with the dataset's totals and listings
    /// (equal hashes still left: names that could not be compared).
    fn of(plan: Result<Vec<SharedFile>, Clash>, totals: (u64, u64), listed: Vec<super::peers::Part>) -> Verdict {
        match plan {
            Err(Clash::Hashes(_)) => Verdict::Names(Err(NameError::Uncompared), totals, listed),
            Err(Clash::Named(msg)) => Verdict::Names(Err(NameError::Misused(msg)), totals, listed),
            Ok(list) => Verdict::Names(Ok(list), totals, listed),
        }
    }
}

/// Why the names of an output phase cannot stand, as rank 0 broadcasts it.
#[derive(Serialize, Deserialize)]
enum NameError {
    /// A misused file, described.
    Misused(String),
    /// Names with equal hashes that could not be compared.
    Uncompared,
}

impl From<NameError> for RuntimeError {
    fn from(e: NameError) -> RuntimeError {
        match e {
            NameError::Misused(msg) => RuntimeError::Names(msg),
            NameError::Uncompared => RuntimeError::Uncompared,
        }
    }
}

/// What a completion's stage validate found on this rank, for the exchange here
/// ([`Runtime::agree_names`]).
pub(super) struct Validated {
    /// What is wrong here, if anything.
    pub(super) err: Option<String>,
    /// Transparent mode: this rank's files as the other ranks list them (`None`: too many,
    /// one that cannot be described, or API mode).
    pub(super) listed: super::peers::Part,
}

fn hash(rel: &Path) -> u64 {
    crate::identity::fnv1a(rel.as_os_str().as_encoded_bytes())
}

impl Runtime {
    /// Every rank's outcome, sizes and routed names, checked by rank 0 (one gather and one
    /// broadcast of its verdict, [`Comm::decide_at`]): a failure summary, or the shared files as
    /// every rank declared them (`Err` names a misused file) with the dataset's bytes and
    /// files. Only rank 0 receives every rank's names (in transparent mode every rank receives
    /// everything, one allgather, since every rank keeps every rank's listing, and decides
    /// alike). A second round asks for the names behind hashes several ranks routed, when
    /// there are any.
    ///
    /// [`Comm::decide_at`]: crate::comm::Comm::decide_at
    pub(super) fn agree_names(&self, id: u64, local: Validated, bytes: u64, files: u64) -> Result<Agreed> {
        let rec = &self.filemap.datasets[&id];
        let (bypass, mode) = (rec.reddesc.bypass, self.mode);
        let transparent = mode == Mode::Transparent;
        let routed = Routed {
            private: rec.files.iter().map(|f| hash(&f.rel)).collect(),
            listed: local.listed,
            shared: rec.desc.shared.iter().map(|s| s.rel.clone()).collect(),
            failed: local.err,
            bytes,
            files,
        };
        // what the deciding rank gathered, kept when a second round follows
        let mut kept: Option<Decided> = None;
        let mut first = |all: std::result::Result<Vec<Routed>, crate::comm::CommError>| {
            let mut all = match all {
                Ok(all) => all,
                Err(e) => return Verdict::Failed(format!("dataset {id}: {e}")),
            };
            if all.iter().any(|r| r.failed.is_some()) {
                let what = format!("dataset {id} ({})", rec.desc.name);
                return Verdict::Failed(crate::transfer::failure_summary(
                    &what,
                    all.into_iter().map(|r| r.failed).collect(),
                ));
            }
            let totals = (all.iter().map(|r| r.bytes).sum(), all.iter().map(|r| r.files).sum());
            // (moved out: the names' check below does not read them)
            let listed: Vec<_> =
                if transparent { all.iter_mut().map(|r| r.listed.take()).collect() } else { Vec::new() };
            match plan_shared(&all, &BTreeMap::new(), bypass, mode) {
                Err(Clash::Hashes(h)) => {
                    kept = Some((all, totals, listed));
                    Verdict::Hashes(h)
                }
                plan => Verdict::of(plan, totals, listed),
            }
        };
        // transparent mode: every rank needs every rank's listing anyway, so every rank gets
        // everything and decides alike; otherwise rank 0 decides
        let verdict =
            if transparent { first(self.world.allgather(&routed)) } else { self.world.decide_at(0, &routed, first)? };
        let colliding = match verdict {
            Verdict::Failed(summary) => return Ok(Agreed::Failed(summary)),
            Verdict::Names(r, totals, listed) => return Ok(Agreed::Names(r.map_err(NameError::into), totals, listed)),
            Verdict::Hashes(h) => h,
        };
        // some name hash was routed by several ranks: rank 0 learns the names
        let mine: Vec<(u64, PathBuf)> =
            rec.files.iter().map(|f| (hash(&f.rel), f.rel.clone())).filter(|(h, _)| colliding.contains(h)).collect();
        let mut second = |names: std::result::Result<Vec<Vec<(u64, PathBuf)>>, crate::comm::CommError>| {
            let (all, totals, listed) = kept.take().expect("the deciding rank kept the first round");
            let names = match names {
                Ok(names) => names,
                Err(e) => return Verdict::Failed(format!("dataset {id}: {e}")),
            };
            let mut by_rank: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
            for (r, list) in names.into_iter().enumerate() {
                for (h, rel) in list {
                    by_rank.insert((r as u32, h), rel);
                }
            }
            Verdict::of(plan_shared(&all, &by_rank, bypass, mode), totals, listed)
        };
        let verdict =
            if transparent { second(self.world.allgather(&mine)) } else { self.world.decide_at(0, &mine, second)? };
        match verdict {
            Verdict::Failed(summary) => Ok(Agreed::Failed(summary)),
            Verdict::Names(r, totals, listed) => Ok(Agreed::Names(r.map_err(NameError::into), totals, listed)),
            Verdict::Hashes(_) => unreachable!("the second round decides"),
        }
    }
}

/// Why the names of an output phase cannot stand.
#[derive(Debug, PartialEq)]
enum Clash {
    /// Several ranks routed names with these hashes for themselves; their names are needed.
    Hashes(Vec<u64>),
    /// A misused file, described.
    Named(String),
}

/// From every rank's [`Routed`] (and, in a second round, the names `names` behind the
/// hashes of [`Clash::Hashes`], by (rank, hash)), the shared files with their writers, or the
/// first misuse found, its remedy said for the `mode` SCR runs in. In a `bypass` dataset a
/// name several ranks routed is a shared file.
fn plan_shared(
    all: &[Routed],
    names: &BTreeMap<(u32, u64), PathBuf>,
    bypass: bool,
    mode: Mode,
) -> Result<Vec<SharedFile>, Clash> {
    let transparent = mode == Mode::Transparent;
    let mut shared: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut private: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (r, routed) in all.iter().enumerate() {
        for rel in &routed.shared {
            shared.entry(rel.clone()).or_default().push(r as u32);
        }
        for &h in &routed.private {
            private.entry(h).or_default().push(r as u32);
        }
    }
    let mut misuse: Vec<String> = Vec::new();
    for (rel, writers) in shared.iter_mut() {
        let Some(others) = private.remove(&hash(rel)) else { continue };
        if bypass {
            writers.extend(others);
            writers.sort_unstable();
            continue;
        }
        misuse.push(shared_and_private(rel, writers, &others, transparent));
    }
    let several: Vec<(u64, &Vec<u32>)> = private.iter().filter(|(_, r)| r.len() > 1).map(|(h, r)| (*h, r)).collect();
    if misuse.is_empty() && !several.is_empty() && names.is_empty() {
        return Err(Clash::Hashes(several.iter().map(|(h, _)| *h).collect()));
    }
    for (h, rs) in several {
        // by name: equal hashes of different names are no clash
        let mut by_name: BTreeMap<&Path, Vec<u32>> = BTreeMap::new();
        for r in rs {
            if let Some(n) = names.get(&(*r, h)) {
                by_name.entry(n.as_path()).or_default().push(*r);
            }
        }
        for (rel, rs) in by_name.into_iter().filter(|(_, rs)| rs.len() > 1) {
            if bypass {
                shared.insert(rel.to_path_buf(), rs);
                continue;
            }
            misuse.push(undeclared(rel, &rs, transparent));
        }
    }
    if let Some(first) = misuse.first() {
        let more =
            if misuse.len() > 1 { format!(" (and {} more such file(s))", misuse.len() - 1) } else { String::new() };
        return Err(Clash::Named(format!("{first}{more}")));
    }
    Ok(shared.into_iter().map(|(rel, writers)| SharedFile { rel, writers, size: 0, crc: None }).collect())
}

/// The message for `rel`, declared shared by `writers` but written as a file of its own by
/// `others`, in the words of the mode the application runs in.
fn shared_and_private(rel: &Path, writers: &[u32], others: &[u32], transparent: bool) -> String {
    if transparent {
        format!(
            "{} was opened as a shared file (MPI_File_open on several processes, or SCR_PRELOAD_SHARED) by \
             rank(s) {} but written as a file of its own by rank(s) {}: every rank that writes a shared file \
             must open it through MPI-IO on a communicator of its writers, or add it to SCR_PRELOAD_SHARED",
            rel.display(),
            ranks(writers),
            ranks(others)
        )
    } else {
        format!(
            "{} was declared shared (SCR_Route_shared_file) by rank(s) {} but routed with SCR_Route_file by \
             rank(s) {}: every rank that writes a shared file must route it with SCR_Route_shared_file",
            rel.display(),
            ranks(writers),
            ranks(others)
        )
    }
}

/// The message for `rel`, written by several ranks (`rs`) without being declared shared, with
/// the remedy of the mode the application runs in.
fn undeclared(rel: &Path, rs: &[u32], transparent: bool) -> String {
    let remedy = if transparent {
        format!(
            "Add it to SCR_PRELOAD_SHARED (for example SCR_PRELOAD_SHARED='{}'; it is then written once, in \
             the prefix), or write it through MPI-IO (MPI_File_open on a communicator of its writers), or give \
             each rank its own file name",
            example_pattern(rel)
        )
    } else {
        "Declare it with SCR_Route_shared_file on every rank that writes it (it is then written once, in the \
         prefix), or give each rank its own file name"
            .to_string()
    };
    format!(
        "{} was {} by rank(s) {} without being declared shared: each rank would keep its own copy in its \
         node's cache, and a restart would read one of them. {remedy}",
        rel.display(),
        if transparent { "written" } else { "routed" },
        ranks(rs)
    )
}

/// A pattern for `SCR_PRELOAD_SHARED` that takes `rel` and its counterparts in other
/// checkpoints: each run of digits becomes `*` (`ckpt.40/shared.dat` -> `ckpt.*/shared.dat`).
fn example_pattern(rel: &Path) -> String {
    let mut out = String::new();
    for c in rel.to_string_lossy().chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('*') {
            out.push('*');
        }
    }
    out
}

/// Ranks for a message: the first 8, then how many more.
fn ranks(rs: &[u32]) -> String {
    let shown: Vec<String> = rs.iter().take(8).map(u32::to_string).collect();
    let more = if rs.len() > 8 { format!(", ... ({} ranks)", rs.len()) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(private: &[&str], shared: &[&str]) -> Routed {
        Routed {
            private: private.iter().map(|p| hash(Path::new(p))).collect(),
            shared: shared.iter().map(PathBuf::from).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn declared_files_are_gathered_with_their_writers() {
        let all = [routed(&["c/r0"], &["c/shared", "c/h"]), routed(&["c/r1"], &["c/shared"]), routed(&["c/r2"], &[])];
        let list = plan_shared(&all, &BTreeMap::new(), false, Mode::Api).unwrap();
        let got: Vec<(String, Vec<u32>)> =
            list.iter().map(|s| (s.rel.display().to_string(), s.writers.clone())).collect();
        assert_eq!(got, [("c/h".to_string(), vec![0]), ("c/shared".to_string(), vec![0, 1])]);
    }

    #[test]
    fn undeclared_and_half_declared_files_are_named_with_their_ranks() {
        let all = [routed(&["c/x"], &[]), routed(&["c/x"], &[]), routed(&["c/y"], &[])];
        let Err(Clash::Hashes(h)) = plan_shared(&all, &BTreeMap::new(), false, Mode::Api) else {
            panic!("names are needed")
        };
        assert_eq!(h, vec![hash(Path::new("c/x"))]);
        let names: BTreeMap<(u32, u64), PathBuf> = [((0, h[0]), "c/x".into()), ((1, h[0]), "c/x".into())].into();
        let Err(Clash::Named(msg)) = plan_shared(&all, &names, false, Mode::Api) else { panic!() };
        assert!(msg.starts_with("c/x was routed by rank(s) 0, 1 without being declared shared"), "{msg}");
        assert!(msg.contains("SCR_Route_shared_file"), "{msg}");
        let Err(Clash::Named(msg)) = plan_shared(&all, &names, false, Mode::Transparent) else { panic!() };
        assert!(msg.starts_with("c/x was written by rank(s) 0, 1 without being declared shared"), "{msg}");
        assert!(msg.contains("Add it to SCR_PRELOAD_SHARED") && !msg.contains("SCR_Route_shared_file"), "{msg}");
        assert_eq!(example_pattern(Path::new("ckpt.40/part2.dat")), "ckpt.*/part*.dat");
        // equal hashes, different names (as if FNV collided): no clash
        // in a bypass dataset the name is one file in the prefix: a shared file
        let list = plan_shared(&all, &names, true, Mode::Api).unwrap();
        assert_eq!((list[0].rel.as_path(), list[0].writers.as_slice()), (Path::new("c/x"), &[0, 1][..]));
        let names: BTreeMap<(u32, u64), PathBuf> = [((0, h[0]), "c/x".into()), ((1, h[0]), "c/z".into())].into();
        assert!(plan_shared(&all, &names, false, Mode::Api).unwrap().is_empty());

        let all = [routed(&[], &["c/s"]), routed(&["c/s"], &[]), routed(&["c/s"], &[])];
        let list = plan_shared(&all, &BTreeMap::new(), true, Mode::Api).unwrap();
        assert_eq!(list[0].writers, [0, 1, 2]);
        let Err(Clash::Named(msg)) = plan_shared(&all, &BTreeMap::new(), false, Mode::Api) else { panic!() };
        assert!(msg.contains("c/s was declared shared (SCR_Route_shared_file) by rank(s) 0"), "{msg}");
        assert!(msg.contains("routed with SCR_Route_file by rank(s) 1, 2"), "{msg}");
        assert_eq!(ranks(&(0..20).collect::<Vec<_>>()), "0, 1, 2, 3, 4, 5, 6, 7, ... (20 ranks)");
    }
}
