//! What the runtime reports to the event log ([`crate::events`]) around the output phases and
//! the run: `SCR_Start_output` and `SCR_Complete_output` as the front ends call them (timed
//! from entry to return, so a checkpoint's cost includes a synchronous flush done inside it),
//! and the run's start and end. The other events (flush, fetch, rebuild, restart, halt) are
//! recorded where they happen.

use super::{Phase, Runtime};
use crate::error::Result;
use crate::events::{flag, Mibps, Secs};

impl Runtime {
    /// `SCR_Start_output`, timed: logs `CKPT_START` (a dataset flagged checkpoint, also when
    /// it is output too) or `OUTPUT_START` with the compute time since the previous output
    /// phase ended (or `SCR_Init`).
    pub(super) fn start_output_logged(&mut self, name: Option<&str>, flags: i32) -> Result<()> {
        let compute = self.policy.output_started();
        if self.phase == Phase::Idle && self.tally_from.is_none() {
            self.tally_from = Some(crate::comm::tally());
        }
        let r = self.start_output(name, flags);
        if r.is_err() {
            self.tally_from = None;
            self.policy.output_refused(compute);
            return r;
        }
        if let Phase::Output { id, .. } = self.phase {
            if let Some(rec) = self.filemap.datasets.get(&id) {
                let event = if rec.desc.checkpoint { "CKPT_START" } else { "OUTPUT_START" };
                let ckpt = rec.desc.ckpt.unwrap_or(0);
                self.events.record(
                    event,
                    &[("dset", &id), ("name", &rec.desc.name), ("ckpt", &ckpt), ("compute_secs", &Secs(compute))],
                );
            }
        }
        r
    }

    /// `SCR_Complete_output`, timed: logs `CKPT_END` or `OUTPUT_END` with the time the
    /// application spent from `SCR_Start_output` until now, and feeds a completed checkpoint's
    /// cost to the checkpoint policies.
    pub(super) fn complete_output_logged(&mut self, valid: bool) -> Result<bool> {
        let Phase::Output { id, .. } = self.phase else {
            return self.complete_output(valid); // the usage error
        };
        let (name, is_ckpt) =
            self.filemap.datasets.get(&id).map(|r| (r.desc.name.clone(), r.desc.checkpoint)).unwrap_or_default();
        let r = self.complete_output(valid);
        if let Some(from) = self.tally_from.take().filter(|_| self.rank0()) {
            let span = match self.mode {
                super::Mode::Api => "SCR_Start_output to SCR_Complete_output",
                super::Mode::Transparent => "its sync point",
            };
            crate::scr_debug!(1, "dataset {id} ({name}): {} in {span}", crate::comm::tally().since(&from));
        }
        // Valid: the application was told so, or (an output dataset whose flush failed) the
        // dataset is complete in cache.
        let ok = match &r {
            Ok(v) => *v,
            Err(_) => self.filemap.datasets.get(&id).is_some_and(|rec| rec.complete),
        };
        let secs = self.policy.output_ended(is_ckpt && ok);
        let stats = self.policy.last.clone();
        self.events.record(
            if is_ckpt { "CKPT_END" } else { "OUTPUT_END" },
            &[
                ("dset", &id),
                ("name", &name),
                ("valid", &flag(ok)),
                ("bytes", &stats.bytes),
                ("files", &stats.files),
                ("secs", &Secs(secs)),
                ("mibps", &Mibps::of(stats.bytes, secs)),
                ("scheme", &stats.scheme),
            ],
        );
        r
    }

    /// `RUN_START`, at the end of `SCR_Init`.
    pub(super) fn log_run_start(&self, nodes: i32) {
        self.events.record(
            "RUN_START",
            &[
                ("ranks", &self.world.size()),
                ("nodes", &nodes),
                ("prefix", &self.layout.prefix.path.display()),
                ("version", &crate::VERSION),
                ("secs", &Secs(self.policy.since_init())),
            ],
        );
    }

    /// `RUN_END`: the run stops (`SCR_Finalize`, or an exit for a halt condition).
    pub(super) fn log_run_end(&self, reason: &str) {
        self.events.record("RUN_END", &[("reason", &reason), ("secs", &Secs(self.policy.since_init()))]);
    }
}
