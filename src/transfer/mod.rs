//! Moving datasets between the cache and the prefix: [`flush`] (cache to prefix, publishing
//! the dataset in the index only when every rank's files are verified there) and [`fetch`]
//! (prefix to cache, verifying sizes and CRC32). Both copy through [`copy`], which publishes
//! each file under a temporary name and renames it only after size and CRC check out.
//! Both are collective over the world communicator and return the same result on every rank.
//! The number of ranks touching the prefix at once is bounded by `SCR_FLUSH_WIDTH` /
//! `SCR_FETCH_WIDTH`.
//!
//! Over MPI between two ranks: [`sendfile`] (a file from a rank that holds it to one that
//! needs it). Without MPI: [`background`] (a flush in a thread), [`scavenge`] (a node's cached parts to
//! the prefix) and [`build`] (those parts into an indexed dataset, rebuilding lost ones from
//! redundancy data), which the commands and `SCR_Init` (elastic restart) share.

pub mod background;
pub mod build;
pub mod copy;
pub mod fetch;
pub mod flush;
pub mod scavenge;
pub mod sendfile;

use crate::comm::Comm;
use crate::config::Settings;
use crate::state::layout::Layout;

/// What a transfer needs to know about the job.
pub struct Ctx<'a> {
    pub world: &'a Comm,
    pub layout: &'a Layout,
    pub settings: &'a Settings,
}

impl Ctx<'_> {
    /// Run `f` on each rank in waves of at most `width` ranks at a time.
    pub fn in_waves<T>(&self, width: usize, f: impl FnOnce() -> T) -> T {
        let width = width.max(1) as i32;
        let waves = (self.world.size() + width - 1) / width;
        let mine = self.world.rank() / width;
        let mut f = Some(f);
        let mut out = None;
        for wave in 0..waves {
            if wave == mine {
                out = Some((f.take().expect("runs once"))());
            }
            if waves > 1 {
                self.world.barrier();
            }
        }
        out.expect("every rank has a wave")
    }

    /// Gather per-rank error messages to rank 0 and return a summary (same on every rank):
    /// how many ranks failed and the first few reasons.
    pub fn summarize_failures(&self, what: &str, local: Option<String>) -> String {
        let all = match self.world.gather(0, &local) {
            Ok(all) => all,
            Err(e) => return format!("{what} failed: {e}"),
        };
        let summary = all.map(|all| failure_summary(what, all)).unwrap_or_default();
        self.world.bcast(0, &summary).unwrap_or_else(|e| format!("{what} failed: {e}"))
    }
}

/// The summary of [`Ctx::summarize_failures`] from every rank's error (by rank): how many
/// ranks failed and the first few reasons.
pub fn failure_summary(what: &str, all: Vec<Option<String>>) -> String {
    let size = all.len();
    let failed: Vec<(usize, String)> = all.into_iter().enumerate().filter_map(|(r, m)| m.map(|m| (r, m))).collect();
    let shown: Vec<String> = failed.iter().take(4).map(|(r, m)| format!("rank {r}: {m}")).collect();
    let more = if failed.len() > 4 { format!("; and {} more", failed.len() - 4) } else { String::new() };
    format!("{what} failed on {} of {size} ranks: {}{more}", failed.len(), shown.join("; "))
}
