//! `scr_interval`: how often to checkpoint, from what the event log (`<prefix>/.scr/log`,
//! written with `SCR_LOG_ENABLE=1`) measured and a failure rate the user gives.
//!
//! From the log: the checkpoint cost `C` (mean `secs` of `CKPT_END` lines with `valid=1`: the
//! time the application spent from `SCR_Start_output` until `SCR_Complete_output` returned),
//! the current interval `T` (compute time between checkpoints: the `compute_secs` of each
//! `CKPT_START` plus those of the `OUTPUT_START` lines since the previous checkpoint of the same
//! run), and the restart cost `R` (mean `secs` of successful `FETCH` and `REBUILD` lines;
//! reported only). With the mean time between failures `M`:
//!
//! * Young's interval `sqrt(2CM)`;
//! * Daly's interval `sqrt(2CM)(1 + sqrt(C/(2M))/3 + C/(18M)) - C` for `C < 2M`, else `M`;
//! * the expected waste (first order) at interval `t`: the share of time spent checkpointing,
//!   `C/(t+C)`, plus the work lost per failure, half a period `(t+C)/2` every `M` seconds on
//!   average: `C/(t+C) + (t+C)/(2M)`, at most 1.
//!
//! The suggestion is `SCR_CHECKPOINT_SECONDS` = Daly's interval, rounded.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{OpError, OpResult};
use crate::events::{parse_line, Event};

/// What the log measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Measured {
    /// Costs of the completed checkpoints, in log order (seconds).
    pub(crate) costs: Vec<f64>,
    /// Compute intervals before each checkpoint (seconds).
    pub(crate) intervals: Vec<f64>,
    /// Restart costs: successful fetches and rebuilds (seconds).
    pub(crate) restarts: Vec<f64>,
    /// Malformed lines skipped: (line number, why).
    pub(crate) skipped: Vec<(usize, String)>,
}

/// `scr_interval`'s report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The event log read.
    pub(crate) log: PathBuf,
    /// The job whose events were measured (`None`: every job in the log).
    pub(crate) jobid: Option<String>,
    /// How many completed checkpoints were measured.
    pub(crate) checkpoints: usize,
    /// Mean cost C of a checkpoint, in seconds.
    pub(crate) cost_secs: f64,
    /// The cheapest checkpoint, in seconds.
    pub(crate) cost_min_secs: f64,
    /// The dearest checkpoint, in seconds.
    pub(crate) cost_max_secs: f64,
    /// Mean compute time between checkpoints, if any interval was measured.
    pub(crate) interval_secs: Option<f64>,
    /// How many compute intervals were measured.
    pub(crate) intervals: usize,
    /// Mean cost of a restart (fetch or rebuild), in seconds, if any was logged.
    pub(crate) restart_secs: Option<f64>,
    /// How many restarts were measured.
    pub(crate) restarts: usize,
    /// The mean time between failures M the advice assumes, in seconds.
    pub(crate) mtbf_secs: f64,
    /// Young's interval `sqrt(2*C*M)`, in seconds.
    pub(crate) young_secs: f64,
    /// Daly's interval (the advice), in seconds.
    pub(crate) daly_secs: f64,
    /// Expected share of time lost (0..1) at the measured interval, if one was measured.
    pub(crate) waste_current: Option<f64>,
    /// Expected share of time lost (0..1) at Daly's interval.
    pub(crate) waste_optimal: f64,
    /// The value to set `SCR_CHECKPOINT_SECONDS` to.
    pub(crate) checkpoint_seconds: u64,
    /// Line numbers of the malformed log lines skipped.
    pub(crate) skipped_lines: Vec<usize>,
}

/// Young's interval for cost `c` and MTBF `m` (seconds).
pub(crate) fn young(c: f64, m: f64) -> f64 {
    (2.0 * c * m).sqrt()
}

/// Daly's interval (higher order) for cost `c` and MTBF `m` (seconds).
pub(crate) fn daly(c: f64, m: f64) -> f64 {
    if c < 2.0 * m {
        (2.0 * c * m).sqrt() * (1.0 + (c / (2.0 * m)).sqrt() / 3.0 + c / (18.0 * m)) - c
    } else {
        m
    }
}

/// Expected share of the run lost at compute interval `t` (first order, at most 1).
pub(crate) fn waste(t: f64, c: f64, m: f64) -> f64 {
    let period = t + c;
    if period <= 0.0 {
        return 1.0;
    }
    (c / period + period / (2.0 * m)).min(1.0)
}

/// A duration given to `--<opt>`: seconds, or a number with unit s, m, h or d. Must be positive.
pub fn parse_duration(opt: &str, text: &str) -> OpResult<f64> {
    let t = text.trim();
    let secs = t
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .or_else(|| super::times::duration(t).map(|v| v as f64))
        .ok_or_else(|| OpError::usage(format!("--{opt} {text:?}: expected a duration such as 24h, 3600 or 2d")))?;
    if secs <= 0.0 {
        return Err(OpError::usage(format!("--{opt} {text:?}: must be more than 0 seconds")));
    }
    Ok(secs)
}

/// A positive number given to `--<opt>`.
pub fn parse_positive(opt: &str, text: &str) -> OpResult<f64> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(OpError::usage(format!("--{opt} {text:?}: expected a number greater than 0"))),
    }
}

/// Read the measurements from the log text, keeping events of `jobid` (all if `None`).
pub(crate) fn measure(text: &str, jobid: Option<&str>) -> Measured {
    let mut m = Measured::default();
    // compute time since the previous checkpoint, per job, from OUTPUT_START lines
    let mut pending: std::collections::HashMap<String, f64> = Default::default();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ev = match parse_line(line) {
            Ok(e) => e,
            Err(why) => {
                m.skipped.push((n + 1, why.to_string()));
                continue;
            }
        };
        let job = ev.get("jobid").unwrap_or("").to_string();
        if jobid.is_some_and(|j| j != job) {
            continue;
        }
        if let Err(why) = take(&mut m, &mut pending, job, &ev) {
            m.skipped.push((n + 1, why.to_string()));
        }
    }
    m
}

/// An event the advice cannot use: it lacks the measurement `key` (or it is negative).
#[derive(Debug, thiserror::Error)]
#[error("{event} without a valid {key}")]
struct Unmeasured {
    event: String,
    key: &'static str,
}

fn take(
    m: &mut Measured,
    pending: &mut std::collections::HashMap<String, f64>,
    job: String,
    ev: &Event,
) -> Result<(), Unmeasured> {
    let need =
        |key: &'static str| ev.num(key).filter(|v| *v >= 0.0).ok_or_else(|| Unmeasured { event: ev.name.clone(), key });
    match ev.name.as_str() {
        "RUN_START" => {
            pending.remove(&job);
        }
        "OUTPUT_START" => {
            *pending.entry(job).or_default() += need("compute_secs")?;
        }
        "CKPT_START" => {
            let c = need("compute_secs")?;
            m.intervals.push(c + pending.remove(&job).unwrap_or(0.0));
        }
        "CKPT_END" if ev.get("valid") == Some("1") => m.costs.push(need("secs")?),
        "FETCH" | "REBUILD" if ev.get("ok") == Some("1") => m.restarts.push(need("secs")?),
        _ => {}
    }
    Ok(())
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The advice for the measurements and MTBF `mtbf` (seconds).
pub(crate) fn advise(log: &Path, jobid: Option<&str>, m: &Measured, mtbf: f64) -> OpResult<Advice> {
    let Some(cost) = mean(&m.costs) else {
        return Err(OpError::failed(format!(
            "{}: no completed checkpoint (CKPT_END with valid=1){} in the log: nothing to measure",
            log.display(),
            jobid.map(|j| format!(" of job {j}")).unwrap_or_default()
        )));
    };
    let interval = mean(&m.intervals);
    let daly_secs = daly(cost, mtbf);
    Ok(Advice {
        log: log.to_path_buf(),
        jobid: jobid.map(str::to_string),
        checkpoints: m.costs.len(),
        cost_secs: cost,
        cost_min_secs: m.costs.iter().copied().fold(f64::INFINITY, f64::min),
        cost_max_secs: m.costs.iter().copied().fold(0.0, f64::max),
        interval_secs: interval,
        intervals: m.intervals.len(),
        restart_secs: mean(&m.restarts),
        restarts: m.restarts.len(),
        mtbf_secs: mtbf,
        young_secs: young(cost, mtbf),
        daly_secs,
        waste_current: interval.map(|t| waste(t, cost, mtbf)),
        waste_optimal: waste(daly_secs, cost, mtbf),
        checkpoint_seconds: daly_secs.round().max(1.0) as u64,
        skipped_lines: m.skipped.iter().map(|(n, _)| *n).collect(),
    })
}

/// Seconds with the precision that matters: `0.013`, `9.870`, `1314.5`.
fn num(secs: f64) -> String {
    if secs < 10.0 {
        format!("{secs:.3}")
    } else {
        format!("{secs:.1}")
    }
}

/// `secs` for people: `1314.5 s (21.9 min)`.
fn human(secs: f64) -> String {
    let unit = if secs >= 2.0 * 86400.0 {
        format!(" ({:.1} d)", secs / 86400.0)
    } else if secs >= 2.0 * 3600.0 {
        format!(" ({:.1} h)", secs / 3600.0)
    } else if secs >= 120.0 {
        format!(" ({:.1} min)", secs / 60.0)
    } else {
        String::new()
    };
    format!("{} s{unit}", num(secs))
}

impl Advice {
    /// The report for people.
    pub fn describe(&self) -> String {
        let pct = |w: f64| format!("{:.2}%", 100.0 * w);
        let mut out = format!(
            "log:                      {}{}\n",
            self.log.display(),
            self.jobid.as_ref().map(|j| format!(" (job {j})")).unwrap_or_default()
        );
        let mut line = |k: &str, v: String| out.push_str(&format!("{k:<26}{v}\n"));
        line("checkpoints measured:", self.checkpoints.to_string());
        line(
            "checkpoint cost C:",
            format!(
                "{} (mean; min {} s, max {} s)",
                human(self.cost_secs),
                num(self.cost_min_secs),
                num(self.cost_max_secs)
            ),
        );
        line(
            "current interval:",
            match self.interval_secs {
                Some(t) => format!("{} of compute between checkpoints (mean of {})", human(t), self.intervals),
                None => "not measured (no CKPT_START lines)".into(),
            },
        );
        line(
            "restart cost R:",
            match self.restart_secs {
                Some(r) => format!("{} (mean of {} fetch/rebuild; not part of the interval)", human(r), self.restarts),
                None => "not measured (no successful FETCH or REBUILD)".into(),
            },
        );
        line("MTBF M:", human(self.mtbf_secs));
        line("Young's interval:", format!("{}  sqrt(2*C*M)", human(self.young_secs)));
        line("Daly's interval:", human(self.daly_secs));
        line(
            "expected waste now:",
            match self.waste_current {
                Some(w) => format!("{}  C/(t+C) + (t+C)/(2M)", pct(w)),
                None => "unknown (interval not measured)".into(),
            },
        );
        line("expected waste at Daly:", pct(self.waste_optimal));
        line("set:", format!("SCR_CHECKPOINT_SECONDS={}", self.checkpoint_seconds));
        out
    }
}

/// Read the log at `log` and advise for MTBF `mtbf`. Malformed lines are reported on stderr
/// (`cmd: warning: FILE:LINE: why; skipped`, at most 10, then a count).
pub fn run(cmd: &str, log: &Path, jobid: Option<&str>, mtbf: f64) -> OpResult<Advice> {
    let text = match std::fs::read(log) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpError::failed(format!(
                "{}: no event log there; run the job with SCR_LOG_ENABLE=1 (and SCR_LOG_TXT_ENABLE=1, the default) \
                 to record one",
                log.display()
            )))
        }
        Err(e) => return Err(OpError::failed(format!("{}: {e}", log.display()))),
    };
    let m = measure(&text, jobid);
    for (n, why) in m.skipped.iter().take(10) {
        eprintln!("{cmd}: warning: {}:{n}: {why}; line skipped", log.display());
    }
    if m.skipped.len() > 10 {
        eprintln!("{cmd}: warning: {} more malformed line(s) skipped", m.skipped.len() - 10);
    }
    advise(log, jobid, &m, mtbf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2026-01-01T00:00:00.000000+00:00";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 0.05
    }

    #[test]
    fn young_and_daly() {
        assert!(close(young(10.0, 86400.0), 1314.5), "{}", young(10.0, 86400.0));
        let d = daly(10.0, 86400.0);
        assert!(close(d, 1307.9), "{d}");
        assert_eq!(daly(300.0, 100.0), 100.0, "C >= 2M: M");
        // Young's interval minimises the first-order waste C/t + t/(2M) (C << M)
        let w = |t: f64| 10.0 / t + t / (2.0 * 86400.0);
        assert!(w(1314.5) < w(1200.0) && w(1314.5) < w(1400.0));
        assert!(waste(1307.9, 10.0, 86400.0) < waste(600.0, 10.0, 86400.0));
        assert_eq!(waste(1e9, 10.0, 1.0), 1.0);
    }

    /// A synthetic log: two runs of job 1 (with an output dataset between checkpoints and a
    /// fetch), a second job, a failed checkpoint, and damage.
    fn log() -> String {
        [
            format!("{T} RUN_START jobid=1 host=n0 ranks=4 nodes=1 prefix=/p version=x secs=0.1"),
            format!("{T} CKPT_START jobid=1 host=n0 dset=1 name=ckpt.1 ckpt=1 compute_secs=600.0"),
            format!("{T} CKPT_END jobid=1 host=n0 dset=1 name=ckpt.1 valid=1 bytes=4 files=4 secs=8.0 mibps=0.0 scheme=XOR"),
            format!("{T} OUTPUT_START jobid=1 host=n0 dset=2 name=out ckpt=0 compute_secs=250.0"),
            format!("{T} OUTPUT_END jobid=1 host=n0 dset=2 name=out valid=1 bytes=4 files=4 secs=99.0 mibps=0.0 scheme=XOR"),
            format!("{T} CKPT_START jobid=1 host=n0 dset=3 name=ckpt.3 ckpt=2 compute_secs=350.0"),
            format!("{T} CKPT_END jobid=1 host=n0 dset=3 name=ckpt.3 valid=1 bytes=4 files=4 secs=12.0 mibps=0.0 scheme=XOR"),
            "this line is damaged".to_string(),
            format!("{T} CKPT_END jobid=1 host=n0 dset=4 valid=1"),
            format!("{T} CKPT_START jobid=2 host=n9 dset=1 name=c ckpt=1 compute_secs=5.0"),
            format!("{T} CKPT_END jobid=2 host=n9 dset=1 name=c valid=1 bytes=4 files=4 secs=1000.0 mibps=0.0 scheme=XOR"),
            format!("{T} RUN_START jobid=1 host=n0 ranks=4 nodes=1 prefix=/p version=x secs=0.1"),
            format!("{T} FETCH jobid=1 host=n0 dset=3 name=ckpt.3 bytes=4 files=4 secs=30.0 mibps=0.0 ok=1 bypass=0"),
            format!("{T} FETCH jobid=1 host=n0 dset=3 name=ckpt.3 bytes=4 files=4 secs=1.0 mibps=0.0 ok=0 bypass=0"),
            format!("{T} OUTPUT_START jobid=1 host=n0 dset=5 name=out ckpt=0 compute_secs=77.0"),
            format!("{T} RUN_START jobid=1 host=n0 ranks=4 nodes=1 prefix=/p version=x secs=0.1"),
            format!("{T} CKPT_START jobid=1 host=n0 dset=6 name=ckpt.6 ckpt=3 compute_secs=400.0"),
            format!("{T} CKPT_END jobid=1 host=n0 dset=6 name=ckpt.6 valid=0 bytes=0 files=0 secs=3.0 mibps=0.0 scheme=NONE"),
            format!("{T} CKPT_END jobid=1 host=n0 dset=6 name=\"ckpt.6"),
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn measures_cost_interval_and_restart_per_job() {
        let m = measure(&log(), Some("1"));
        assert_eq!(m.costs, vec![8.0, 12.0], "valid checkpoints of job 1 only");
        assert_eq!(
            m.intervals,
            vec![600.0, 600.0, 400.0],
            "output compute joins the next checkpoint's interval; a new run starts afresh"
        );
        assert_eq!(m.restarts, vec![30.0]);
        assert_eq!(m.skipped.iter().map(|s| s.0).collect::<Vec<_>>(), vec![8, 9, 19]);
        assert!(m.skipped[1].1.contains("CKPT_END without a valid secs"), "{:?}", m.skipped);

        let all = measure(&log(), None);
        assert_eq!(all.costs, vec![8.0, 12.0, 1000.0]);
    }

    #[test]
    fn advice_for_a_10_second_checkpoint_and_a_day_between_failures() {
        let mut m = measure(&log(), Some("1"));
        m.costs = vec![10.0, 10.0];
        let a = advise(Path::new("/p/.scr/log"), Some("1"), &m, 86400.0).unwrap();
        assert!(close(a.young_secs, 1314.5), "{a:?}");
        assert!(close(a.daly_secs, 1307.9), "{a:?}");
        assert_eq!(a.checkpoint_seconds, 1308);
        let t = a.interval_secs.unwrap();
        assert!(close(t, 1600.0 / 3.0));
        assert!(close(a.waste_current.unwrap(), waste(t, 10.0, 86400.0)));
        assert!(a.waste_optimal < a.waste_current.unwrap());
        let text = a.describe();
        assert!(text.contains("SCR_CHECKPOINT_SECONDS=1308"), "{text}");
        assert!(text.contains("Young's interval:         1314.5 s (21.9 min)"), "{text}");
        assert!(text.contains("checkpoints measured:     2"), "{text}");
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["checkpoint_seconds"], 1308);
        assert_eq!(json["skipped_lines"], serde_json::json!([8, 9, 19]));
    }

    #[test]
    fn no_checkpoints_and_bad_options_are_errors() {
        let m = measure(&log(), Some("nope"));
        let e = advise(Path::new("/p/.scr/log"), Some("nope"), &m, 86400.0).unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.to_string().contains("no completed checkpoint") && e.to_string().contains("job nope"), "{e}");

        assert_eq!(parse_duration("mtbf", "24h").unwrap(), 86400.0);
        assert_eq!(parse_duration("mtbf", "2d").unwrap(), 172800.0);
        assert_eq!(parse_duration("mtbf", "3600").unwrap(), 3600.0);
        assert_eq!(parse_duration("mtbf", "1.5").unwrap(), 1.5);
        for bad in ["", "soon", "0", "-5", "3 weeks"] {
            let e = parse_duration("mtbf", bad).unwrap_err();
            assert!(e.code() == 2 && e.to_string().contains("--mtbf"), "{bad}: {e}");
        }
        assert!(parse_positive("failures-per-day", "0").is_err());
        assert_eq!(parse_positive("failures-per-day", "2").unwrap(), 2.0);
    }

    #[test]
    fn a_missing_log_says_how_to_record_one() {
        let d = tempfile::tempdir().unwrap();
        let e = run("scr_interval", &d.path().join(".scr/log"), None, 86400.0).unwrap_err();
        assert_eq!(e.code(), 1);
        let msg = e.to_string();
        assert!(msg.contains(".scr/log") && msg.contains("SCR_LOG_ENABLE=1"), "{msg}");
    }
}
