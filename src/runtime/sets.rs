//! Forming the redundancy sets of every descriptor at `SCR_Init`, and saying so when they
//! cannot be formed as configured (SCR 3 silently degrades PARTNER/XOR/RS to SINGLE when every
//! process shares one node; here the protection actually applied is named).
//!
//! Where the user can act on it, that is a warning, given once per job: when the scheme or the
//! set size was chosen (`SCR_COPY_TYPE`, a `CKPT` entry's `TYPE`, `SCR_SET_SIZE`, `SET_SIZE`), not
//! when it is the default (XOR with sets of 8 on a workstation or a small cluster, which the
//! user did not ask for and cannot get). Rank 0 records each warning it gave in the job's
//! control directory (`warned`), so the later runs of a job (`scr_run`'s relaunches, a job
//! script's loop) stay quiet. Defaulted cases, and repeats, go to `SCR_DEBUG=1`.

use super::Runtime;
use crate::desc::Scheme;
use crate::error::{Error, Result};
use crate::redundancy::parallel::SetPlan;
use crate::redundancy::sets::form_sets;
use crate::{scr_debug, scr_warn};

impl Runtime {
    /// One set plan per redundancy descriptor (`None` for SINGLE and bypass descriptors).
    /// Collective over the world communicator. Rank 0 forms the sets from every rank's failure
    /// group and sends each rank its own set (a scatter: no rank but rank 0 receives O(P)
    /// bytes). `nodes` (every rank's node number on rank 0, and the number of nodes) are the
    /// failure groups of group `NODE`, known already; another group's values are numbered at
    /// rank 0 ([`crate::comm::Comm::group_index`]).
    pub(super) fn form_sets(&mut self, nodes: (Option<&[usize]>, usize)) -> Result<()> {
        let mut plans = Vec::new();
        for d in self.descs.reddescs.clone() {
            if d.scheme == Scheme::Single || d.bypass {
                plans.push(None);
                continue;
            }
            let (groups, ngroups) = if d.group == "NODE" {
                (nodes.0.map(<[usize]>::to_vec), nodes.1)
            } else {
                let value = self.descs.group_value(&d.group, &self.host).map_err(|e| Error::Other(e.to_string()));
                let value = self.agree(
                    &format!("{}: failure group {} of CKPT={}", self.call_name("SCR_Init"), d.group, d.index),
                    value,
                )?;
                let (_, ngroups, all) = self.world.group_index(0, &value)?;
                (all, ngroups)
            };
            let sets = groups.map(|g| form_sets(&g, d.set_size));
            // each rank's (set number, members in set order)
            let each = sets.as_ref().map(|sets| {
                let mut each = vec![(0usize, Vec::new()); self.world.size() as usize];
                for (id, set) in sets.iter().enumerate() {
                    for &r in set {
                        each[r] = (id, set.clone());
                    }
                }
                each
            });
            let (id, set): (usize, Vec<usize>) = self.world.scatter(0, each)?;
            let me = self.world.rank() as usize;
            let index = set.iter().position(|&r| r == me).expect("member");
            let (scheme, failures) = match (set.len(), d.scheme) {
                (1, _) => (Scheme::Single, 0),
                (_, Scheme::Rs) => (Scheme::Rs, d.set_failures.clamp(1, set.len() - 1)),
                (_, s) => (s, 1),
            };
            let comm = self.world.split(id as i32, index as i32);
            if let Some(sets) = &sets {
                self.report_sets(&d, sets, ngroups);
            }
            plans.push(Some(SetPlan {
                id,
                ranks: set.iter().map(|&r| r as i32).collect(),
                index,
                scheme,
                failures,
                comm,
            }));
        }
        self.sets = plans;
        Ok(())
    }

    /// The set that encodes datasets of descriptor `index`, if its scheme adds redundancy
    /// (not SINGLE, not a one-member set, not bypass).
    pub(super) fn encoder(&self, index: usize, bypass: bool) -> Option<&SetPlan> {
        self.sets.get(index).and_then(Option::as_ref).filter(|p| p.scheme != Scheme::Single && !bypass)
    }

    fn report_sets(&self, d: &crate::desc::RedDesc, sets: &[Vec<usize>], ngroups: usize) {
        for (chosen, msg) in self.set_notes(d, sets, ngroups) {
            if chosen && self.first_time(&msg) {
                scr_warn!("{msg}");
            } else {
                scr_debug!(1, "{msg}");
            }
        }
    }

    /// Whether this job has not given warning `msg` yet; records it (rank 0's control
    /// directory, one FNV-1a hash a line). A directory that cannot be written lets it through.
    fn first_time(&self, msg: &str) -> bool {
        use std::io::Write;
        let path = self.layout.cntl_dir.join("warned");
        let key = format!("{:016x}", crate::identity::fnv1a(msg.as_bytes()));
        if std::fs::read_to_string(&path).is_ok_and(|t| t.lines().any(|l| l == key)) {
            return false;
        }
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
            let _ = writeln!(f, "{key}");
        }
        true
    }

    /// What to say about the sets of `d`: each note with whether the user chose what it is
    /// about (the scheme, the set size), so that a warning helps.
    fn set_notes(&self, d: &crate::desc::RedDesc, sets: &[Vec<usize>], ngroups: usize) -> Vec<(bool, String)> {
        let mut notes = Vec::new();
        let sizes: Vec<usize> = sets.iter().map(Vec::len).collect();
        let (min, max) = (sizes.iter().min().copied().unwrap_or(0), sizes.iter().max().copied().unwrap_or(0));
        let what = format!("CKPT={} TYPE={} GROUP={}", d.index, d.scheme.name(), d.group);
        let alone: usize = sets.iter().filter(|s| s.len() == 1).map(Vec::len).sum();
        if alone == self.world.size() as usize {
            notes.push((
                d.chosen_scheme,
                format!(
                    "{what}: all {} processes are in one failure group ({ngroups} group), so no set can span two \
                     groups; datasets get SINGLE protection only (they survive a process failure, not the loss of a \
                     node)",
                    self.world.size()
                ),
            ));
            return notes;
        }
        if alone > 0 {
            notes.push((
                d.chosen_scheme,
                format!(
                    "{what}: {alone} process(es) have no partner in another failure group (uneven processes per \
                     group); their files get SINGLE protection only"
                ),
            ));
        }
        if d.scheme == Scheme::Rs && min <= d.set_failures {
            notes.push((
                d.chosen_scheme,
                format!(
                    "{what}: SET_FAILURES={} needs sets of at least {} processes, but only {min} could be formed \
                     ({ngroups} failure groups); sets of n processes tolerate n - 1 losses",
                    d.set_failures,
                    d.set_failures + 1
                ),
            ));
        }
        if min < d.set_size && d.set_size > 1 {
            notes.push((
                d.chosen_set_size,
                format!(
                    "{what}: SET_SIZE={} asks for sets of {} processes from distinct failure groups, but there are \
                     only {ngroups} groups; using {} set(s) of {min} to {max} processes",
                    d.set_size,
                    d.set_size,
                    sets.len()
                ),
            ));
        }
        scr_debug!(1, "{what}: {} set(s) of {min} to {max} processes over {ngroups} failure groups", sets.len());
        notes
    }
}
