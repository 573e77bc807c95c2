//! `scr_interval`: suggest a checkpoint interval from the event log a job recorded
//! (`SCR_LOG_ENABLE=1`) and a failure rate. The work is done by [`scr::ops::interval`].

use scr::ops::args::{self, flag, valued, Opt};
use scr::ops::{interval, prefix, OpError, OpResult};

const HELP: &str = "\
NAME
    scr_interval - suggest how often to checkpoint, from what a job measured

SYNOPSIS
    scr_interval (--mtbf DURATION | --failures-per-day X) [--prefix DIR | --log FILE]
                 [--jobid ID] [--json]

DESCRIPTION
    A job run with SCR_LOG_ENABLE=1 records its events in PREFIX/.scr/log, among them the
    cost of each checkpoint as the application saw it (CKPT_END secs: from SCR_Start_output
    until SCR_Complete_output returned, a synchronous flush included) and the compute time
    before it (CKPT_START compute_secs). scr_interval reads them and, with the mean time
    between failures M you give, prints:

        checkpoints measured:     12
        checkpoint cost C:        10.0 s (mean; min 9.613 s, max 10.9 s)
        current interval:         600.0 s (10.0 min) of compute between checkpoints (mean of 12)
        restart cost R:           35.2 s (mean of 2 fetch/rebuild; not part of the interval)
        MTBF M:                   86400.0 s (24.0 h)
        Young's interval:         1314.5 s (21.9 min)  sqrt(2*C*M)
        Daly's interval:          1307.9 s (21.8 min)
        expected waste now:       1.99%  C/(t+C) + (t+C)/(2M)
        expected waste at Daly:   1.52%
        set:                      SCR_CHECKPOINT_SECONDS=1308

    Young's interval is sqrt(2CM); Daly's, the more accurate one, is
    sqrt(2CM)(1 + sqrt(C/(2M))/3 + C/(18M)) - C when C < 2M, else M. The expected waste is a
    first-order estimate of the share of the run lost to checkpoints and to work redone after
    failures. The restart cost R (successful FETCH and REBUILD events) is reported only.
    Set the suggested SCR_CHECKPOINT_SECONDS and have the application ask
    SCR_Need_checkpoint before each checkpoint.

OPTIONS
    --mtbf DURATION
        Mean time between failures of the job's allocation: seconds, or a number with a unit
        s, m, h or d (24h, 3600, 2d).
    --failures-per-day X
        The failure rate instead: M = 1 day / X.
    -p, --prefix DIR
        Read DIR/.scr/log (default: SCR_PREFIX, else the current directory).
    --log FILE
        Read this log file instead.
    --jobid ID
        Only events of job ID (the log of a prefix may hold several jobs).
    --json
        Print the report as JSON: {\"log\", \"jobid\", \"checkpoints\", \"cost_secs\",
        \"cost_min_secs\", \"cost_max_secs\", \"interval_secs\", \"intervals\", \"restart_secs\",
        \"restarts\", \"mtbf_secs\", \"young_secs\", \"daly_secs\", \"waste_current\",
        \"waste_optimal\", \"checkpoint_seconds\", \"skipped_lines\"} (null where not measured).
    -h, --help
        Print this text.

EXIT STATUS
    0 on success; 1 when the log is missing (run the job with SCR_LOG_ENABLE=1) or holds no
    completed checkpoint; 2 for bad usage (a malformed duration or number, neither or both
    of --mtbf and --failures-per-day). Malformed log lines are skipped with a warning naming
    the line.

EXAMPLES
    scr_interval --mtbf 24h
    scr_interval --prefix /p/lscratch/user1/sim123 --failures-per-day 0.5 --json
    scr_interval --log saved.log --jobid 4711 --mtbf 3d

FILES
    PREFIX/.scr/log

SEE ALSO
    scr_index(1), SCR user guide: SCR_CHECKPOINT_SECONDS, SCR_CHECKPOINT_OVERHEAD, SCR_LOG_ENABLE
";

const OPTS: &[Opt] = &[
    valued("mtbf", None, "DURATION"),
    valued("failures-per-day", None, "X"),
    valued("prefix", Some('p'), "DIR"),
    valued("log", None, "FILE"),
    valued("jobid", None, "ID"),
    flag("json", None),
];

fn body(argv: Vec<String>) -> OpResult<i32> {
    let p = args::parse(OPTS, &argv, false)?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let mtbf = match (p.value("mtbf"), p.value("failures-per-day")) {
        (Some(m), None) => interval::parse_duration("mtbf", m)?,
        (None, Some(f)) => 86400.0 / interval::parse_positive("failures-per-day", f)?,
        (None, None) => return Err(OpError::usage("give the failure rate: --mtbf DURATION or --failures-per-day X")),
        (Some(_), Some(_)) => return Err(OpError::usage("give one of --mtbf and --failures-per-day, not both")),
    };
    if p.has("prefix") && p.has("log") {
        return Err(OpError::usage("give one of --prefix and --log, not both"));
    }
    let log = match p.value("log") {
        Some(f) => prefix::choose(Some(f)),
        None => {
            let env = std::env::var("SCR_PREFIX").ok().filter(|s| !s.is_empty());
            prefix::choose(p.value("prefix").or(env.as_deref())).join(scr::paths::SCR_DIR).join("log")
        }
    };
    let advice = interval::run("scr_interval", &log, p.value("jobid"), mtbf)?;
    if p.has("json") {
        println!("{}", serde_json::to_string_pretty(&advice).expect("serialises"));
    } else {
        print!("{}", advice.describe());
    }
    Ok(0)
}

fn main() {
    std::process::exit(scr::ops::main("scr_interval", HELP, false, body));
}
