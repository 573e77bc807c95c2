//! Policies rank 0 decides and broadcasts: `SCR_Need_checkpoint` (every N calls, every N
//! seconds, or when checkpointing would cost less than a percentage of run time; with none
//! of them set, always), and the halt conditions behind `SCR_Should_exit`.
//!
//! The checkpoint policies use what was measured in this run, as the application saw it:
//! *cost* = from `SCR_Start_output` entry until `SCR_Complete_output` returns (including a
//! synchronous flush done inside it; of a background flush only the part in the foreground),
//! *compute* = time outside output and restart phases. `SCR_CHECKPOINT_SECONDS` is the wall
//! time since the last checkpoint's `SCR_Complete_output` returned (or `SCR_Init`);
//! `SCR_CHECKPOINT_OVERHEAD` compares the mean checkpoint cost `C` with the compute time `T`
//! since the last checkpoint: checkpoint when `100 * C / (T + C)` is within the budget. Output
//! datasets that are not checkpoints count as neither.

use std::time::Instant;

use super::{Phase, Runtime};
use crate::error::Result;
use crate::identity;
use crate::scr_warn;
use crate::state::halt::Halt;

/// What the last `SCR_Complete_output` measured, for its event.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OutputStats {
    pub bytes: u64,
    pub files: u64,
    pub scheme: &'static str,
}

impl Default for OutputStats {
    fn default() -> OutputStats {
        OutputStats { bytes: 0, files: 0, scheme: "NONE" }
    }
}

/// Timing state for checkpoint decisions and the event log.
pub(super) struct Policy {
    calls: u64,
    started: Instant,
    /// The running compute segment, if the application is computing now.
    compute_since: Option<Instant>,
    /// Compute time of closed segments since the last output phase ended (or `SCR_Init`).
    compute_since_output: f64,
    /// Compute time of closed segments since the last checkpoint ended (or `SCR_Init`).
    compute_since_ckpt: f64,
    /// Sum and count of the measured checkpoint costs.
    ckpt_cost_total: f64,
    ckpts: u64,
    last_ckpt_end: Option<Instant>,
    output_start: Option<Instant>,
    restart_start: Option<Instant>,
    /// Filled in by `SCR_Complete_output` once it knows the totals.
    pub(super) last: OutputStats,
    /// `HALT` was logged for `SCR_Should_exit` already.
    pub(super) halt_logged: bool,
}

impl Policy {
    pub(super) fn new() -> Policy {
        Policy {
            calls: 0,
            started: Instant::now(),
            compute_since: None,
            compute_since_output: 0.0,
            compute_since_ckpt: 0.0,
            ckpt_cost_total: 0.0,
            ckpts: 0,
            last_ckpt_end: None,
            output_start: None,
            restart_start: None,
            last: OutputStats::default(),
            halt_logged: false,
        }
    }

    /// Timing from `t0`, when `SCR_Init` began.
    pub(super) fn started_at(t0: Instant) -> Policy {
        Policy { started: t0, ..Policy::new() }
    }

    /// Seconds since `SCR_Init` began.
    pub(super) fn since_init(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The application computes from now on.
    pub(super) fn compute_started(&mut self) {
        self.compute_since = Some(Instant::now());
    }

    /// The application stopped computing (an output or restart phase begins).
    pub(super) fn compute_stopped(&mut self) {
        if let Some(t) = self.compute_since.take() {
            let secs = t.elapsed().as_secs_f64();
            self.compute_since_output += secs;
            self.compute_since_ckpt += secs;
        }
    }

    /// Compute time since the last checkpoint, including the running segment.
    fn compute_since_ckpt(&self) -> f64 {
        self.compute_since_ckpt + self.compute_since.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0)
    }

    /// `SCR_Start_output` was entered: returns the compute time since the previous output
    /// phase (or `SCR_Init`) and starts timing the phase.
    pub(super) fn output_started(&mut self) -> f64 {
        self.compute_stopped();
        self.output_start = Some(Instant::now());
        self.last = OutputStats::default();
        std::mem::take(&mut self.compute_since_output)
    }

    /// `SCR_Start_output` failed: the phase never began; `compute` (what
    /// [`Policy::output_started`] returned) still counts.
    pub(super) fn output_refused(&mut self, compute: f64) {
        self.output_start = None;
        self.compute_since_output += compute;
        self.compute_started();
    }

    /// `SCR_Complete_output` is returning: the phase's cost in seconds. A checkpoint that
    /// completed (`checkpoint_taken`) enters the checkpoint policies.
    pub(super) fn output_ended(&mut self, checkpoint_taken: bool) -> f64 {
        let secs = self.output_start.take().map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        if checkpoint_taken {
            self.record_checkpoint(secs);
        }
        self.compute_started();
        secs
    }

    fn record_checkpoint(&mut self, cost: f64) {
        self.ckpt_cost_total += cost;
        self.ckpts += 1;
        self.last_ckpt_end = Some(Instant::now());
        self.compute_since_ckpt = 0.0;
    }

    /// Mean cost of this run's checkpoints so far.
    pub(super) fn mean_checkpoint_cost(&self) -> Option<f64> {
        (self.ckpts > 0).then(|| self.ckpt_cost_total / self.ckpts as f64)
    }

    pub(super) fn restart_started(&mut self) {
        self.compute_stopped();
        self.restart_start = Some(Instant::now());
    }

    pub(super) fn restart_elapsed(&self) -> f64 {
        self.restart_start.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0)
    }

    /// Rank 0's decision for the `calls`-th call.
    fn decide(&mut self, interval: u64, seconds: u64, overhead: f64) -> bool {
        self.calls += 1;
        if interval == 0 && seconds == 0 && overhead <= 0.0 {
            return true;
        }
        if interval > 0 && self.calls.is_multiple_of(interval) {
            return true;
        }
        let since_last = self.last_ckpt_end.unwrap_or(self.started).elapsed().as_secs_f64();
        if seconds > 0 && since_last >= seconds as f64 {
            return true;
        }
        if overhead > 0.0 {
            let Some(cost) = self.mean_checkpoint_cost() else {
                return true; // nothing measured yet: the first checkpoint measures it
            };
            let compute = self.compute_since_ckpt();
            let pct = 100.0 * cost / (compute + cost).max(f64::MIN_POSITIVE);
            return pct <= overhead;
        }
        false
    }
}

impl Runtime {
    pub(super) fn need_checkpoint(&mut self) -> Result<bool> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error("SCR_Need_checkpoint", "between output and restart phases"));
        }
        self.progress(&[]);
        let s = &self.settings;
        let (interval, seconds, overhead) = (s.checkpoint_interval, s.checkpoint_seconds, s.checkpoint_overhead);
        let mine =
            self.rank0() && (self.policy.decide(interval, seconds, overhead) || self.halt_reason_local().is_some());
        Ok(self.world.bcast(0, &mine)?)
    }

    pub(super) fn should_exit(&mut self) -> Result<bool> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error("SCR_Should_exit", "between output and restart phases"));
        }
        self.progress(&[]);
        let reason = self.halt_reason();
        if let Some(r) = &reason {
            if !self.policy.halt_logged {
                self.policy.halt_logged = true;
                self.events.record("HALT", &[("reason", r), ("action", &"should_exit")]);
            }
        }
        Ok(reason.is_some())
    }

    /// Rank 0 reads the halt file and decides; everyone gets the answer.
    pub(super) fn halt_reason(&self) -> Option<String> {
        let mine = if self.rank0() { self.halt_reason_local() } else { None };
        self.world.bcast(0, &mine).unwrap_or_else(|e| {
            if self.rank0() {
                crate::scr_error!("{e}; the halt conditions are not checked this time");
            }
            None
        })
    }

    fn halt_reason_local(&self) -> Option<String> {
        let halt = match Halt::load_remembered(&self.layout.halt()) {
            Ok(h) => h,
            Err(e) => {
                scr_warn!("{e}; halt conditions cannot be checked");
                return None;
            }
        };
        let mut h = halt;
        if h.halt_seconds.is_none() && self.settings.halt_seconds > 0 {
            h.halt_seconds = Some(self.settings.halt_seconds);
        }
        h.check(identity::now_secs(), identity::end_time())
    }
}

#[cfg(test)]
mod tests {
    use super::Policy;
    use std::time::{Duration, Instant};

    fn ago(secs: u64) -> Instant {
        Instant::now().checked_sub(Duration::from_secs(secs)).expect("the clock has run that long")
    }

    #[test]
    fn interval_and_default() {
        let mut p = Policy::new();
        assert!(p.decide(0, 0, 0.0), "nothing configured: always");
        let mut p = Policy::new();
        let got: Vec<bool> = (0..6).map(|_| p.decide(3, 0, 0.0)).collect();
        assert_eq!(got, vec![false, false, true, false, false, true]);
    }

    #[test]
    fn overhead_budget_uses_mean_cost_and_compute_since_the_last_checkpoint() {
        let mut p = Policy::new();
        assert!(p.decide(0, 0, 2.0), "no cost measured yet: checkpoint to measure it");
        p.record_checkpoint(1.0);
        p.record_checkpoint(3.0); // mean 2 s
        p.compute_since_ckpt = 98.0;
        assert!(p.decide(0, 0, 2.0), "2 s per 100 s is within 2%");
        assert!(!p.decide(0, 0, 1.5), "but over 1.5%");
        // The running segment counts; time before the last checkpoint does not.
        p.compute_since_ckpt = 0.0;
        p.compute_since = Some(ago(1));
        assert!(!p.decide(0, 0, 2.0));
        p.compute_since = Some(ago(198));
        assert!(p.decide(0, 0, 1.0), "2 s per 200 s is within 1%");
    }

    #[test]
    fn seconds_count_from_the_last_checkpoint_not_from_output() {
        let mut p = Policy::new();
        p.started = ago(50);
        assert!(!p.decide(0, 60, 0.0));
        p.started = ago(61);
        assert!(p.decide(0, 60, 0.0), "a minute since SCR_Init");
        p.record_checkpoint(1.0);
        assert!(!p.decide(0, 60, 0.0), "a checkpoint just ended");
        p.last_ckpt_end = Some(ago(61));
        // An output phase that is not a checkpoint does not reset the clock.
        let compute = p.output_started();
        assert!(compute >= 0.0);
        assert_eq!(p.output_ended(false).min(0.0), 0.0);
        assert!(p.decide(0, 60, 0.0));
    }

    #[test]
    fn cost_spans_start_to_complete_and_compute_excludes_phases() {
        let mut p = Policy::new();
        p.compute_since = Some(ago(10));
        let c = p.output_started();
        assert!((10.0..11.0).contains(&c), "compute since SCR_Init: {c}");
        assert!(p.compute_since.is_none(), "the output phase is not compute");
        p.output_start = Some(ago(4)); // the application spent 4 s in the phase, flush included
        let cost = p.output_ended(true);
        assert!((4.0..5.0).contains(&cost), "{cost}");
        assert_eq!(p.ckpts, 1);
        assert!(p.compute_since.is_some(), "computing again");
        assert_eq!(p.compute_since_ckpt, 0.0);
        // A restart phase is not compute either; compute before it is kept.
        p.compute_since = Some(ago(5));
        p.restart_started();
        assert!((5.0..6.0).contains(&p.compute_since_output));
        p.compute_started();
        let c = p.output_started();
        assert!((5.0..6.0).contains(&c), "{c}");
        // A refused Start_output gives the compute time back.
        p.output_refused(c);
        assert!((5.0..6.0).contains(&p.compute_since_output));
        // An invalid checkpoint does not enter the mean.
        p.output_started();
        p.output_ended(false);
        assert_eq!(p.ckpts, 1);
    }
}
