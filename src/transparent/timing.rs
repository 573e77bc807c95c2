//! What transparent mode costs a run, when `SCR_PRELOAD_TIMING=1`: the time each of the
//! preload's hooks spent in SCR (deciding where a path goes, copying a checkpoint file before
//! the application rewrites it, the bookkeeping after a close; not the application's own calls
//! it passes through, except those SCR makes for it: renames, links and removals), with two
//! parts of the sync points counted on their own as well: the agreement (which takes the place
//! of the application's world barrier, or travels in its allreduce: a plain run pays most of
//! it too) and the completions of datasets, the last sync point's in `MPI_Finalize` included.
//! Rows overlap (a sync point's row holds its parts): they do not add up. The start inside
//! `MPI_Init` and `SCR_Finalize` inside `MPI_Finalize` have rows too.
//!
//! Each process counts in a fixed table of atomics, one slot per hook name: no lock, no
//! allocation, so any thread (a signal handler too) may count at any time. At the end of
//! transparent mode ([`report`], collective) rank 0 gathers every rank's table and prints, per
//! hook, the calls over all ranks, the time summed over them and the slowest rank's time. Off
//! (the default), a hook pays one relaxed load and a branch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::AcqRel, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

/// Hook names a process can count (the preload has about 100 hooks and sync-point parts); the
/// last slot counts whatever finds the others full.
const SLOTS: usize = 160;
const OTHER: usize = SLOTS - 1;
const OTHER_NAME: &str = "(names beyond the table's room)";

static ON: AtomicBool = AtomicBool::new(false);
/// A slot is taken by the thread that sets its flag, which alone then sets its name (so no
/// thread ever waits for another, not even a signal handler for the code it interrupted).
static TAKEN: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
static NAMES: [OnceLock<&'static str>; SLOTS] = [const { OnceLock::new() }; SLOTS];
static CALLS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static NANOS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// The name under which transparent mode's start is counted (`SCR_Init`, the restart, the
/// recovery of what a killed run left pending: inside `MPI_Init`, after the real one).
pub(super) const START: &str = "MPI_Init: start of transparent mode";
/// The name under which the sync points' agreements are counted.
pub(super) const AGREEMENT: &str = "MPI sync point: agreement";
/// The name under which the sync points' completions of datasets are counted.
pub(super) const COMPLETION: &str = "MPI sync point: completion";
/// The name under which `SCR_Finalize` inside `MPI_Finalize` is counted (the flushes SCR owes,
/// the background work it waits for).
pub(super) const FINALIZE: &str = "MPI_Finalize: SCR_Finalize";

/// Count from now on (`SCR_PRELOAD_TIMING=1`, at start).
pub(super) fn enable(on: bool) {
    ON.store(on, Relaxed);
}

/// Whether hooks are timed.
#[inline]
pub fn enabled() -> bool {
    ON.load(Relaxed)
}

/// The start of a timed span, if timing is on.
#[inline]
pub fn start() -> Option<Instant> {
    enabled().then(Instant::now)
}

/// One call of `what` that began at `from` ([`start`]) ends now.
#[inline]
pub fn record(what: &'static str, from: Option<Instant>) {
    if let Some(t0) = from {
        count(what, t0, 1);
    }
}

/// More time of a call of `what` already counted (the bookkeeping after the real call of a
/// hook that decided before it), from `from` ([`start`]) to now.
#[inline]
pub fn record_more(what: &'static str, from: Option<Instant>) {
    if let Some(t0) = from {
        count(what, t0, 0);
    }
}

#[cold]
#[inline(never)]
fn count(what: &'static str, t0: Instant, calls: u64) {
    let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    // the slot holding the name, or the first free one (a name counted for the first time by
    // two threads at once may take two slots: the report adds them up)
    let mine = |i: usize| match NAMES[i].get() {
        Some(name) => std::ptr::eq(*name, what) || *name == what,
        None => !TAKEN[i].swap(true, AcqRel) && NAMES[i].set(what).is_ok(),
    };
    let i = (0..OTHER).find(|&i| mine(i)).unwrap_or(OTHER);
    CALLS[i].fetch_add(calls, Relaxed);
    NANOS[i].fetch_add(ns, Relaxed);
}

/// `f` timed as one call of `what`.
pub(super) fn timed<T>(what: &'static str, f: impl FnOnce() -> T) -> T {
    let t0 = start();
    let r = f();
    record(what, t0);
    r
}

/// This process's table: (name, calls, nanoseconds), names merged.
fn table() -> Vec<(String, u64, u64)> {
    let mut out: Vec<(String, u64, u64)> = Vec::new();
    for i in 0..SLOTS {
        // (a slot taken but not yet named is skipped: its thread is about to count)
        let name = match NAMES[i].get() {
            Some(name) => *name,
            None if i == OTHER && CALLS[i].load(Relaxed) > 0 => OTHER_NAME,
            None => continue,
        };
        let (calls, ns) = (CALLS[i].load(Relaxed), NANOS[i].load(Relaxed));
        match out.iter_mut().find(|(n, _, _)| n == name) {
            Some(e) => {
                e.1 += calls;
                e.2 += ns;
            }
            None => out.push((name.to_string(), calls, ns)),
        }
    }
    out
}

/// Per hook over every rank: (name, calls, nanoseconds summed, the slowest rank's
/// nanoseconds, that rank), the most costly first.
fn combine(ranks: &[Vec<(String, u64, u64)>]) -> Vec<(String, u64, u64, u64, usize)> {
    let mut rows: Vec<(String, u64, u64, u64, usize)> = Vec::new();
    for (rank, t) in ranks.iter().enumerate() {
        for (name, calls, ns) in t {
            match rows.iter_mut().find(|r| &r.0 == name) {
                Some(r) => {
                    r.1 += calls;
                    r.2 += ns;
                    if *ns > r.3 {
                        (r.3, r.4) = (*ns, rank);
                    }
                }
                None => rows.push((name.clone(), *calls, *ns, *ns, rank)),
            }
        }
    }
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// The report's lines (rank 0's).
fn lines(ranks: &[Vec<(String, u64, u64)>]) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let rows = combine(ranks);
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(4);
    let mut s = format!(
        "transparent mode timing (SCR_PRELOAD_TIMING=1), {} rank(s): time in SCR per hook\n  {:<w$} {:>10} {:>14} {:>14}\n",
        ranks.len(),
        "hook",
        "calls",
        "ms all ranks",
        "ms slowest"
    );
    for (name, calls, ns, max, rank) in rows {
        s += &format!("  {name:<w$} {calls:>10} {:>14.3} {:>14.3} (rank {rank})\n", ms(ns), ms(max));
    }
    s
}

/// Rank 0 prints every rank's table (collective on `comm`, when timing is on everywhere: the
/// setting is the same on every rank).
pub(super) fn report(comm: &crate::comm::Comm) {
    // (a forked child that calls MPI_Finalize holds a copy of the communicator, not a rank)
    if !enabled() || super::state::forked() {
        return;
    }
    match comm.gather(0, &table()) {
        Ok(Some(all)) => crate::log::emit("INFO", format_args!("{}", lines(&all).trim_end())),
        Ok(None) => {}
        Err(e) => crate::scr_warn!("transparent mode timing: gathering every rank's times: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_tables_add_up_per_hook_and_name_the_slowest_rank() {
        let t = |v: &[(&str, u64, u64)]| v.iter().map(|(n, c, t)| (n.to_string(), *c, *t)).collect::<Vec<_>>();
        let ranks = vec![
            t(&[("open", 3, 3_000_000), (COMPLETION, 2, 1_000_000)]),
            t(&[("open", 1, 500_000), (COMPLETION, 2, 4_000_000), ("stat", 7, 70_000)]),
        ];
        let rows = combine(&ranks);
        assert_eq!(rows[0], (COMPLETION.to_string(), 4, 5_000_000, 4_000_000, 1));
        assert_eq!(rows[1], ("open".to_string(), 4, 3_500_000, 3_000_000, 0));
        assert_eq!(rows[2], ("stat".to_string(), 7, 70_000, 70_000, 1));
        let text = lines(&ranks);
        assert!(text.contains("2 rank(s)"), "{text}");
        assert!(text.lines().any(|l| l.contains("open") && l.contains("3.500") && l.contains("(rank 0)")), "{text}");
    }

    #[test]
    fn a_process_counts_each_name_in_one_place() {
        // (the table is the process's: names unique to this test)
        for _ in 0..3 {
            ON.store(true, Relaxed);
            record("timing test a", start());
            record("timing test b", start());
        }
        record("timing test a", None);
        // (the bookkeeping after the real call: time, not another call)
        record_more("timing test a", start());
        let t = table();
        let a = t.iter().find(|r| r.0 == "timing test a").expect("counted");
        assert_eq!(a.1, 3);
        assert_eq!(t.iter().filter(|r| r.0 == "timing test b").count(), 1);
    }
}
