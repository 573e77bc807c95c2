//! `scr_halt`: set, list, change or remove the halt conditions of an SCR job (user guide 2.9).
//! The work is done by [`scr::ops::halt`].

use scr::ops::args::{self, flag, valued, Opt};
use scr::ops::{halt, prefix, times, OpError, OpResult};

const HELP: &str = "\
NAME
    scr_halt - tell a running SCR job to stop, or change when it will

SYNOPSIS
    scr_halt [OPTIONS] [PREFIX ...]

DESCRIPTION
    Writes halt conditions to PREFIX/.scr/halt.scr (PREFIX defaults to the current directory),
    the file the SCR library reads in SCR_Init, after every checkpoint and in
    SCR_Should_exit. The file is changed under the same lock the running job takes, so the job
    sees the change at its next check and an update made by the job at the same moment (the
    checkpoint countdown, its exit reason) is not lost.

    Without options, the job halts after its next successful checkpoint: an exit reason
    (JOB_HALTED) is recorded, which also keeps scr_run from launching the job again. With
    conditions, the job halts when the first of them holds. A condition set again replaces the
    old value; --unset-* options remove one. A job stopped by a condition is not relaunched;
    remove or unset the condition (or --remove the file) to run it again.

    When the job runs with SCR_HALT_EXIT=1 the library ends the run itself right after the
    checkpoint at which a condition holds (or in SCR_Init); otherwise the application stops when
    SCR_Should_exit says so.

OPTIONS
    -c, --checkpoints N
        Halt after N more successful checkpoints. If the last of them fails, the job goes on
        until one succeeds.
    -b, --before TIME
        Halt before TIME: once fewer than the halt seconds (--seconds, else SCR_HALT_SECONDS)
        remain before it. Without halt seconds this condition has no effect.
    -a, --after TIME
        Halt at the first successful checkpoint after TIME.
    -s, --seconds N
        Set the halt seconds of the running job (replaces SCR_HALT_SECONDS; also used with the
        allocation's end time: SCR_END_TIME, else SLURM_JOB_END_TIME, else what Slurm, LSF,
        Flux or PBS reports for the job).
    -i, --immediate
        Record the exit reason, then stop the current run now. scr_run records the run it
        launched in PREFIX/.scr/run.scr. A run launched with srun in a Slurm job is stopped by
        cancelling its job step (scancel JOBID.STEP, found by the srun process; never the
        allocation, whose nodes hold the cache), from any host where Slurm's commands work.
        Another launcher is sent SIGTERM (SIGKILL after 30 s) when scr_halt runs on the same
        host as scr_run; elsewhere, stop the run with the resource manager. The halt file
        already prevents a relaunch.
    -l, --list
        List the halt conditions (after applying the other options).
    --unset-checkpoints, --unset-before, --unset-after, --unset-seconds, --unset-reason
        Remove that condition (--unset-reason removes the exit reason, e.g. JOB_HALTED or
        SCR_FINALIZE_CALLED).
    -r, --remove
        Delete the halt file: no condition remains. Combine only with --list.
    -v, --verbose
        Also list the conditions as they were before the change (read under the lock).
    --create
        Accepted for compatibility: a command that sets a condition creates PREFIX/.scr and
        the halt file anyway (see PREFIX below).
    -h, --help
        Print this text.

PREFIX
    Each PREFIX must be an existing directory. Before a job's first run it has no .scr
    directory yet; a command that sets a condition (including a plain scr_halt) then creates
    PREFIX/.scr/halt.scr and says so, and the first run honours it (user guide 2.9.3, NOTE).
    --list and --remove change nothing there. A path that does not exist is refused, so a
    mistyped prefix never receives a halt file no job reads.

TIME
    The forms of GNU date -d (read by the parse_datetime crate), in the local time zone (TZ)
    unless the text names one: the user guide's '2023-07-04T21:00:00' (also with a space for
    the T, without seconds, with Z or +HH:MM), 2023-07-04 (midnight), 21:00 (today), '3pm
    today', 'tomorrow 8am', 'next monday 9:00', 'December 11 03:00', '+2 hours', '+30
    minutes', @SECONDS (since the epoch), now; and the short forms +N or now+N with a unit s,
    m, h or d (+30m, now+2h), now-N. A time already past is accepted with a note: --after
    then holds at the next checkpoint, --before at the next check.

EXIT STATUS
    0 on success; 1 if a prefix does not exist (or, for --list and --remove, has no .scr), the
    halt file is damaged (it is left as it is) or a run cannot be stopped; 2 for bad usage
    (unknown option, malformed time, contradicting options). Nothing is changed unless the
    whole command line is valid.

EXAMPLES
    scr_halt                                    halt after the next checkpoint
    scr_halt /p/lscratch/user1/sim123           the same, for another prefix
    scr_halt --checkpoints 10 --before '2023-07-04T21:00:00' --seconds 1800
    scr_halt --after '3pm today'
    scr_halt --before 'tomorrow 8am' --seconds 1800
    scr_halt --unset-before
    scr_halt --list
    scr_halt --remove                           run again in this allocation

FILES
    PREFIX/.scr/halt.scr, PREFIX/.scr/halt.scr.lock, PREFIX/.scr/run.scr

SEE ALSO
    scr_run(1), scr_index(1), SCR user guide section 2.9
";

const OPTS: &[Opt] = &[
    valued("checkpoints", Some('c'), "N"),
    valued("before", Some('b'), "TIME"),
    valued("after", Some('a'), "TIME"),
    valued("seconds", Some('s'), "N"),
    flag("immediate", Some('i')),
    flag("list", Some('l')),
    flag("unset-checkpoints", None),
    flag("unset-before", None),
    flag("unset-after", None),
    flag("unset-seconds", None),
    flag("unset-reason", None),
    flag("remove", Some('r')),
    flag("verbose", Some('v')),
    flag("create", None),
];

fn time(p: &args::Parsed, name: &str, now: i64) -> OpResult<Option<i64>> {
    let Some(v) = p.value(name) else { return Ok(None) };
    let t = times::parse(v, now).map_err(|e| OpError::usage(format!("--{name}: {e}")))?;
    if t < now {
        eprintln!("scr_halt: note: --{name} {v:?} is {}, {} s ago", times::format_local(t), now - t);
    }
    Ok(Some(t))
}

fn body(argv: Vec<String>) -> OpResult<i32> {
    let p = args::parse(OPTS, &argv, false)?;
    let now = scr::identity::now_secs();
    let req = halt::Request {
        checkpoints: p.count("checkpoints")?,
        before: time(&p, "before", now)?,
        after: time(&p, "after", now)?,
        seconds: p.count("seconds")?,
        immediate: p.has("immediate"),
        list: p.has("list"),
        unset_checkpoints: p.has("unset-checkpoints"),
        unset_before: p.has("unset-before"),
        unset_after: p.has("unset-after"),
        unset_seconds: p.has("unset-seconds"),
        unset_reason: p.has("unset-reason"),
        remove: p.has("remove"),
    };
    req.check()?;
    let dirs: Vec<Option<&str>> =
        if p.positional.is_empty() { vec![None] } else { p.positional.iter().map(|s| Some(s.as_str())).collect() };
    // Every prefix is checked before any is changed. A command that writes the halt file
    // creates `.scr` in an existing directory where no job has run yet (user guide 2.9.3).
    let create = req.writes_file();
    let verbose = p.has("verbose");
    let mut layouts = Vec::new();
    for d in dirs {
        let dir = prefix::choose(d);
        let fresh = dir.is_dir() && !dir.join(scr::paths::SCR_DIR).exists();
        layouts.push((prefix::open(&dir, create)?, fresh && create));
    }
    let mut code = 0;
    for (layout, created) in layouts {
        println!("Updating halt file for {}", layout.prefix.path.display());
        if created {
            println!(
                "  created {}: no job has run in this prefix yet; its first run reads these conditions",
                layout.halt().display()
            );
        }
        match halt::apply(&layout, &req) {
            Ok(out) => {
                for n in &out.notes {
                    println!("  {n}");
                }
                if verbose && req.writes_file() {
                    println!("before the change:");
                    for line in halt::describe(&layout.halt(), out.before.as_ref(), now, scr::identity::end_time()) {
                        println!("  {line}");
                    }
                    println!("after the change:");
                }
                if !req.remove || req.list {
                    let h = if req.remove { None } else { out.after.as_ref() };
                    for line in halt::describe(&layout.halt(), h, now, scr::identity::end_time()) {
                        println!("{line}");
                    }
                }
            }
            Err(e) => {
                eprintln!("scr_halt: error: {}: {e}", layout.prefix.path.display());
                code = e.code().max(code);
            }
        }
    }
    Ok(code)
}

fn main() {
    std::process::exit(scr::ops::main("scr_halt", HELP, false, body));
}
