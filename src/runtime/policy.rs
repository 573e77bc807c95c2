//! Policies rank 0 decides and broadcasts: `SCR_Need_checkpoint` (every N calls, every N
//! seconds, or when checkpointing would cost less than a percentage of run time; with none
//! of them set, always), and the halt conditions behind `SCR_Should_exit`.

use std::time::Instant;

use super::{Phase, Runtime};
use crate::error::Result;
use crate::identity;
use crate::scr_warn;
use crate::state::halt::Halt;

/// Timing state for checkpoint decisions.
pub(super) struct Policy {
    calls: u64,
    compute_since: Option<Instant>,
    compute_total: f64,
    output_total: f64,
    outputs: u64,
    last_output_end: Option<Instant>,
    started: Instant,
    restart_start: Option<Instant>,
}

impl Policy {
    pub(super) fn new() -> Policy {
        Policy {
            calls: 0,
            compute_since: None,
            compute_total: 0.0,
            output_total: 0.0,
            outputs: 0,
            last_output_end: None,
            started: Instant::now(),
            restart_start: None,
        }
    }

    pub(super) fn compute_started(&mut self) {
        self.compute_since = Some(Instant::now());
    }

    pub(super) fn compute_stopped(&mut self) {
        if let Some(t) = self.compute_since.take() {
            self.compute_total += t.elapsed().as_secs_f64();
        }
    }

    pub(super) fn output_done(&mut self, secs: f64) {
        self.output_total += secs;
        self.outputs += 1;
        self.last_output_end = Some(Instant::now());
    }

    pub(super) fn restart_started(&mut self) {
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
        let since_last = self.last_output_end.unwrap_or(self.started).elapsed().as_secs_f64();
        if seconds > 0 && since_last >= seconds as f64 {
            return true;
        }
        if overhead > 0.0 {
            if self.outputs == 0 {
                return true;
            }
            let avg = self.output_total / self.outputs as f64;
            let compute = self.compute_total + self.compute_since.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
            let pct = 100.0 * avg / (compute.max(f64::MIN_POSITIVE) + avg);
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
        Ok(self.world.bcast(0, &mine))
    }

    pub(super) fn should_exit(&mut self) -> Result<bool> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error("SCR_Should_exit", "between output and restart phases"));
        }
        self.progress(&[]);
        Ok(self.halt_reason().is_some())
    }

    /// Rank 0 reads the halt file and decides; everyone gets the answer.
    pub(super) fn halt_reason(&self) -> Option<String> {
        let mine = if self.rank0() { self.halt_reason_local() } else { None };
        self.world.bcast(0, &mine)
    }

    fn halt_reason_local(&self) -> Option<String> {
        let halt = match Halt::load(&self.layout.halt()) {
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

    #[test]
    fn interval_and_default() {
        let mut p = Policy::new();
        assert!(p.decide(0, 0, 0.0), "nothing configured: always");
        let mut p = Policy::new();
        let got: Vec<bool> = (0..6).map(|_| p.decide(3, 0, 0.0)).collect();
        assert_eq!(got, vec![false, false, true, false, false, true]);
    }

    #[test]
    fn overhead_budget() {
        let mut p = Policy::new();
        p.output_done(1.0);
        p.compute_total = 100.0;
        assert!(p.decide(0, 0, 2.0), "1 s per 100 s is under 2%");
        assert!(!p.decide(0, 0, 0.5), "but over 0.5%");
    }
}
