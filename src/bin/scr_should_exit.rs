//! `scr_should_exit`: tell a batch script's run loop whether to stop (user guide 2.8.4, SCR's
//! `_loop` job scripts). The work is done by [`scr::ops::should_exit`].

use scr::ops::args::{self, flag, valued, Opt};
use scr::ops::{nodes, should_exit, OpError, OpResult};

const HELP: &str = "\
NAME
    scr_should_exit - whether a job script should stop instead of running the job again

SYNOPSIS
    scr_should_exit [--prefix DIR] [--down NODES] [--verbose]

DESCRIPTION
    For batch scripts that relaunch the job themselves (scr_run does this on its own). Exits 0
    when the job should stop: a halt condition holds in PREFIX/.scr/halt.scr (an exit reason
    set by scr_halt, or by SCR_Finalize when the application finished; no checkpoints left;
    the --before/--after times; fewer than SCR_HALT_SECONDS left before the allocation ends),
    or fewer usable nodes remain than a run needs. Exits 1 when the job may run again. The
    reason to stop is printed.

    A run needs SCR_MIN_NODES nodes, else as many as the last run scr_run recorded, else the
    whole allocation. Nodes named by SCR_EXCLUDE_NODES or --down are not usable.

OPTIONS
    -p, --prefix DIR
        The prefix directory (default: SCR_PREFIX, else the current directory).
    --down NODES
        Nodes known to be down (host-list syntax, e.g. n[3-4],n9).
    -v, --verbose
        Also print what the decision rests on.
    -h, --help
        Print this text.

EXIT STATUS
    0: stop. Also 0, with an error message, when the answer cannot be found (a damaged halt
    file, a bad setting, bad usage): relaunching then would fail the same way, so the safe
    answer is to stop. 1: the job may run again.

EXAMPLE
    while true; do
        srun -n512 -N64 ./my_job
        scr_should_exit --prefix $SCR_PREFIX && break
        sleep 60
    done
    scr_postrun --prefix $SCR_PREFIX

SEE ALSO
    scr_run(1), scr_halt(1), SCR user guide section 2.8
";

/// `body`'s status for "may run again", told apart from the failures `ops::main` reports as 1.
const RUN_AGAIN: i32 = 10;

const OPTS: &[Opt] = &[valued("prefix", Some('p'), "DIR"), valued("down", None, "NODES"), flag("verbose", Some('v'))];

fn body(argv: Vec<String>) -> OpResult<i32> {
    let p = args::parse(OPTS, &argv, false)?;
    if let Some(extra) = p.positional.first() {
        return Err(OpError::usage(format!("unexpected argument {extra:?}")));
    }
    let down = match p.value("down") {
        Some(list) => nodes::expand(list).map_err(|e| OpError::usage(format!("--down: {e}")))?,
        None => Vec::new(),
    };
    let v = should_exit::decide(p.value("prefix"), &down)?;
    if p.has("verbose") {
        for n in &v.notes {
            println!("scr_should_exit: {n}");
        }
    }
    Ok(match v.stop {
        Some(why) => {
            println!("scr_should_exit: stop: {why}");
            0
        }
        None => {
            println!("scr_should_exit: the job may run again");
            RUN_AGAIN
        }
    })
}

fn main() {
    // Any error means "stop": see EXIT STATUS.
    let code = scr::ops::main("scr_should_exit", HELP, false, body);
    std::process::exit(if code == RUN_AGAIN { 1 } else { 0 });
}
