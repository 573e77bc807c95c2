//! Dataset names at a sync point, and the warnings about patterns whose names cannot work.
//!
//! A pattern without `NAME=` names a dataset by the path of its files ([`Route::pieces`]:
//! `processor3/0.3` for `processor*/[0-9]*/**`, `restart.100.3` for `restart.*.*`). The
//! ranks agree at the sync point which captures differ between their files (a rank's part:
//! `processor3`, the `3` of `restart.100.3`); those keep their glob text, so all ranks' files
//! of one checkpoint form one dataset (`processor*/0.3`, `restart.100.*`), and each step its
//! own. A file one rank writes alone later (`processor0/0.3/time` after the barrier that
//! completed `processor*/0.3`) joins the cached dataset whose name covers its own.
//!
//! Two mistakes are reported once each, by rank 0, naming a file and the remedy: a `NAME=`
//! template that makes one dataset per rank at the same sync point (they evict each other;
//! a restart finds one rank's files), and a name that stays the same while its checkpoints
//! keep adding files (one dataset growing without bound, protected again whole each time).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::comm::Comm;
use crate::config::patterns::{PatternSet, Route};

/// The captures that differ between ranks: (pattern, run).
pub(super) type Varies = HashSet<(usize, usize)>;

/// One rank's capture values: ((pattern, run), its values), as the ranks exchange them.
type Offered = Vec<((usize, usize), Vec<String>)>;

/// Which captures of default names are a rank's part at this sync point (collective: every
/// rank calls it at the same point): those that at least two ranks have and whose values no
/// two ranks share. Rank 0's `lj.200.base` beside `lj.200.0`, and ranks 1-3's `lj.200.<r>`,
/// make the second capture a rank's part (`lj.200.*`); a value several ranks have tells
/// checkpoints apart (ckpt.K's late `meta` on rank 0 beside every rank's ckpt.K+2 files keep
/// the names ckpt.K and ckpt.K+2).
pub(super) fn agree<'a>(comm: &Comm, routes: impl Iterator<Item = &'a Route>) -> Varies {
    let mut mine: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
    for r in routes {
        for (run, value) in r.captures() {
            mine.entry((r.pattern, run)).or_default().insert(value.to_string());
        }
    }
    let mine: Offered = mine.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect();
    let all = match comm.allgather(&mine) {
        Ok(all) => all,
        Err(e) => {
            // every rank fails alike: names stay as each rank's files give them
            crate::scr_error!("transparent mode: agreeing on dataset names: {e}");
            return Varies::new();
        }
    };
    rank_parts(&all)
}

/// The captures ([`agree`]) that at least two ranks have, with no value on two ranks.
fn rank_parts(all: &[Offered]) -> Varies {
    // per capture: how many ranks have it, and each value's first rank
    let mut ranks: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut owner: BTreeMap<(usize, usize), BTreeMap<&str, usize>> = BTreeMap::new();
    let mut shared = Varies::new();
    for (rank, list) in all.iter().enumerate() {
        for (k, values) in list {
            *ranks.entry(*k).or_default() += 1;
            let owners = owner.entry(*k).or_default();
            for v in values {
                if *owners.entry(v.as_str()).or_insert(rank) != rank {
                    shared.insert(*k);
                }
            }
        }
    }
    ranks.into_iter().filter(|(k, n)| *n > 1 && !shared.contains(k)).map(|(k, _)| k).collect()
}

/// The names of this rank's cached datasets that generalise a rank's part (`processor*/0.6`),
/// compiled as globs.
pub(super) fn cached_globs() -> Vec<(String, crate::config::patterns::Glob)> {
    let mut names: Vec<String> =
        crate::runtime::cached_files().unwrap_or_default().into_iter().map(|f| f.name).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| n.contains(['*', '?', '[']))
        .filter_map(|n| crate::config::patterns::Glob::parse(&n).ok().map(|g| (n, g)))
        .collect()
}

/// A default name of files one rank wrote alone (`processor0/0.6/time`, written after the
/// barrier that completed `processor*/0.6`) joins the cached dataset whose generalised name
/// covers it, as the files of that checkpoint.
pub(super) fn join_cached(name: String, default: bool, cached: &[(String, crate::config::patterns::Glob)]) -> String {
    if !default || cached.iter().any(|(n, _)| *n == name) {
        return name;
    }
    match cached.iter().find(|(_, g)| g.matches(&name).is_some()) {
        Some((n, _)) => n.clone(),
        None => name,
    }
}

/// One rank's part of one dataset at a sync point, as the ranks exchange it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Part {
    pub name: String,
    pub flags: i32,
    pub epoch: u64,
    /// The pattern that named it (none: files held from an earlier dataset of the name).
    pub pattern: Option<usize>,
    /// Files at paths this rank had not written under this name before, in this run.
    pub fresh: u64,
    /// This rank's files of it at this sync point (those not fresh were written again).
    pub files: u64,
    /// One of its files, for messages.
    pub sample: String,
    /// The directories of this rank's files.
    pub dirs: Vec<String>,
}

#[derive(Default)]
struct Watch {
    /// Per name: this rank's paths written under it (dropped once the name is reported).
    paths: HashMap<String, HashSet<String>>,
    /// Per name: sync points at which it completed, at which it gained files, and whether
    /// one wrote again a file it held.
    completions: HashMap<String, (u32, u32, bool)>,
    reported_names: HashSet<String>,
    reported_patterns: HashSet<usize>,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// How many of `paths` (this rank's files of dataset `name`) were not written under `name`
/// at an earlier completion in this run. Only counted: a dataset that waits at this sync
/// point (a file still open on some rank) is not complete, so its files are recorded as seen
/// by [`seen`] when it completes, and counted fresh then.
pub(super) fn fresh<'a>(name: &str, paths: impl Iterator<Item = &'a str>) -> u64 {
    let mut g = WATCH.lock().unwrap_or_else(|e| e.into_inner());
    let w = g.get_or_insert_with(Watch::default);
    if w.reported_names.contains(name) {
        return 0;
    }
    let Some(seen) = w.paths.get(name) else { return paths.count() as u64 };
    paths.filter(|p| !seen.contains(*p)).count() as u64
}

/// Dataset `name` completed with this rank's `paths` (or held them in cache when the run
/// started): they count as written under it.
pub(super) fn seen<'a>(name: &str, paths: impl Iterator<Item = &'a str>) {
    let mut g = WATCH.lock().unwrap_or_else(|e| e.into_inner());
    let w = g.get_or_insert_with(Watch::default);
    if w.reported_names.contains(name) {
        return;
    }
    let seen = w.paths.entry(name.to_string()).or_default();
    seen.extend(paths.map(str::to_string));
}

/// A name grows without bound once this many sync points after its first added files and
/// none wrote again a file the name held: each step's files kept beside the last's (LAMMPS'
/// `restart.*` under one name). An application that rewrites its restart files in place
/// (Quantum ESPRESSO's `out/`) may add files for a while (a wave function file per k-point at
/// the end of the run) and is not reported.
const GROWTH: u32 = 3;

/// Check the agreed parts of a sync point (the same on every rank); rank 0 reports.
pub(super) fn check(patterns: &PatternSet, parts: &[Vec<Part>], rank0: bool) {
    let mut g = WATCH.lock().unwrap_or_else(|e| e.into_inner());
    let w = g.get_or_insert_with(Watch::default);
    // per pattern: name -> ranks with files, and a sample
    let mut by_pattern: BTreeMap<usize, BTreeMap<&str, (BTreeSet<usize>, &str)>> = BTreeMap::new();
    // per name: fresh files, all files, a sample, the pattern
    let mut by_name: BTreeMap<&str, (u64, u64, &str, Option<usize>)> = BTreeMap::new();
    for (rank, list) in parts.iter().enumerate() {
        for p in list {
            if let Some(pat) = p.pattern {
                let e = by_pattern.entry(pat).or_default().entry(&p.name).or_insert((BTreeSet::new(), &p.sample));
                e.0.insert(rank);
            }
            let e = by_name.entry(&p.name).or_insert((0, 0, &p.sample, p.pattern));
            e.0 += p.fresh;
            e.1 += p.files;
            e.3 = e.3.or(p.pattern);
        }
    }
    for (pat, names) in by_pattern {
        let ranks: BTreeSet<usize> = names.values().flat_map(|(r, _)| r.iter().copied()).collect();
        let per_rank = names.len() > 1 && ranks.len() > 1 && names.values().all(|(r, _)| r.len() == 1);
        if !per_rank || !w.reported_patterns.insert(pat) || !rank0 {
            continue;
        }
        let (glob, at) = patterns.describe(pat);
        let list: Vec<&str> = names.keys().take(3).copied().collect();
        let sample = names.values().next().map_or("", |(_, s)| s);
        let remedy = if patterns.has_template(pat) {
            "remove the rank's capture from its NAME= template, or drop NAME= (the default name keeps a rank's part as its glob: processor*/0.3)"
        } else {
            "give it a NAME= template without the rank's part"
        };
        crate::scr_warn!(
            "transparent mode: pattern {glob} ({at}) makes one dataset per rank at the same sync point ({}{}, from files such as {sample}): they evict each other and a restart finds one rank's files only; {remedy}",
            list.join(", "),
            if names.len() > 3 { ", ..." } else { "" }
        );
    }
    for (name, (fresh, files, sample, pat)) in by_name {
        let c = w.completions.entry(name.to_string()).or_insert((0, 0, false));
        c.0 += 1;
        if c.0 > 1 && fresh > 0 {
            c.1 += 1;
        }
        c.2 |= c.0 > 1 && files > fresh;
        if c.1 < GROWTH || c.2 || !w.reported_names.insert(name.to_string()) {
            continue;
        }
        w.paths.remove(name);
        if !rank0 {
            continue;
        }
        let (glob, at) = pat.map_or(("?", "?"), |p| patterns.describe(p));
        crate::scr_warn!(
            "transparent mode: dataset {name} (pattern {glob}, {at}) grows: {} of its {} checkpoints added files under the same name (such as {sample}), so it holds every step's files and is protected again whole each time; name each step apart: a NAME= template with the step's capture (NAME=restart.{{1}} for restart.*.*) or no NAME= (the default names a dataset per step)",
            c.1,
            c.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rank's part of `name` with `files` files, `fresh` of them new.
    fn part(name: &str, files: u64, fresh: u64) -> Part {
        Part {
            name: name.into(),
            flags: 0,
            epoch: 0,
            pattern: None,
            fresh,
            files,
            sample: String::new(),
            dirs: Vec::new(),
        }
    }

    fn reported(name: &str) -> bool {
        WATCH.lock().unwrap().as_ref().is_some_and(|w| w.reported_names.contains(name))
    }

    #[test]
    fn files_cached_at_the_start_are_not_fresh() {
        seen("seed.test", ["out/a"].into_iter());
        assert_eq!(fresh("seed.test", ["out/a", "out/b"].into_iter()), 1);
        assert_eq!(fresh("other.test", ["out/a"].into_iter()), 1);
    }

    #[test]
    fn a_name_growing_without_bound_is_reported_and_one_rewriting_in_place_is_not() {
        let patterns = PatternSet::compile(&[]).unwrap();
        // each step's files beside the last's, nothing written again
        for _ in 0..4 {
            assert!(!reported("grow.test"), "reported before its third growth");
            check(&patterns, &[vec![part("grow.test", 2, 2)], vec![part("grow.test", 1, 1)]], true);
        }
        assert!(reported("grow.test"));
        // Quantum ESPRESSO's out/: a few files rewritten every step, then a file per k-point
        // added at every sync point of its last save
        check(&patterns, &[vec![part("qe.test", 1, 1)], vec![]], true);
        for _ in 0..5 {
            check(&patterns, &[vec![part("qe.test", 5, 0)], vec![]], true);
        }
        for _ in 0..20 {
            check(&patterns, &[vec![part("qe.test", 1, 1)], vec![]], true);
        }
        assert!(!reported("qe.test"));
    }

    #[test]
    fn a_rank_part_is_a_capture_whose_values_no_two_ranks_share() {
        let of = |l: &[(usize, &[&str])]| -> Offered {
            l.iter().map(|(run, v)| ((0, *run), v.iter().map(|s| s.to_string()).collect())).collect()
        };
        // LAMMPS restart lj.*.%: rank 0 writes lj.200.base and lj.200.0, rank r lj.200.<r>
        let lammps = [
            of(&[(1, &["200"]), (2, &["0", "base"])]),
            of(&[(1, &["200"]), (2, &["1"])]),
            of(&[(1, &["200"]), (2, &["2"])]),
        ];
        assert_eq!(rank_parts(&lammps), [(0, 2)].into_iter().collect());
        // ckpt.4's late meta on rank 0 beside every rank's ckpt.6 files
        let late = [of(&[(1, &["4", "6"])]), of(&[(1, &["6"])]), of(&[(1, &["6"])])];
        assert!(rank_parts(&late).is_empty());
        // one rank alone has nothing to tell apart from
        assert!(rank_parts(&[of(&[(1, &["0"])]), vec![], vec![]]).is_empty());
        // OpenFOAM processor*/<time>: one directory per rank, the time the same
        let foam = [of(&[(1, &["processor0"]), (2, &["0.3"])]), of(&[(1, &["processor1"]), (2, &["0.3"])])];
        assert_eq!(rank_parts(&foam), [(0, 1)].into_iter().collect());
    }

    #[test]
    fn files_of_a_dataset_that_waits_count_fresh_when_it_completes() {
        let name = "tests/fresh.waits";
        let paths = ["restart.10.0", "restart.10.1"];
        // offered at a sync point where the dataset waits (a file still open): counted only
        assert_eq!(fresh(name, paths.iter().copied()), 2);
        // the next sync point completes it: still fresh, then seen
        assert_eq!(fresh(name, paths.iter().copied()), 2);
        seen(name, paths.iter().copied());
        assert_eq!(fresh(name, paths.iter().copied()), 0);
        assert_eq!(fresh(name, ["restart.20.0"].into_iter()), 1);
    }
}
