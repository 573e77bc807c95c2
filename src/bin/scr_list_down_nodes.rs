//! `scr_list_down_nodes`: list the nodes of the allocation (or a node set) that cannot take the
//! next run (user guide 2.8.4; the `_loop` job-script templates call it between launches).
//! The work is done by [`scr::ops::down`].

use scr::ops::args::{self, flag, valued, Opt};
use scr::ops::down;

const HELP: &str = "\
NAME
    scr_list_down_nodes - list the nodes that cannot take the next run

SYNOPSIS
    scr_list_down_nodes [--reason | --free] [--down NODES] [--log [--secs N]] [NODESET]

DESCRIPTION
    Looks at the nodes of NODESET (host-list syntax, e.g. n[1-4],n9; default: the nodes of
    the allocation, from Slurm, LSF or PBS) and prints those that are down, as one host list
    on one line (ready for srun --exclude), or nothing. A node is down when SCR_EXCLUDE_NODES
    names it, when --down names it, or (in a Slurm allocation) when Slurm reports it down,
    drained, failing, not responding or no longer part of the job: the same decision scr_run
    makes before each relaunch.

OPTIONS
    -r, --reason
        Print one line per down node: NODE: why.
    -f, --free
        Print the nodes that are up instead (one host list on one line).
    -d, --down NODES
        Count these nodes as down without testing them.
    -l, --log
        Record a NODE_FAIL event for each down node (node, reason) in the event log of the
        prefix (SCR_PREFIX, else the current directory): PREFIX/.scr/log and syslog, as
        SCR_LOG_ENABLE, SCR_LOG_TXT_ENABLE and SCR_LOG_SYSLOG_ENABLE say. With the event log
        disabled nothing is recorded, and a warning says so.
    -s, --secs N
        With --log: the seconds the job ran, recorded with each event.
    -h, --help
        Print this text.

EXIT STATUS
    0: no node is down. 1: some node is down (they are printed). 2: bad usage; 1 with an error
    message when the nodes cannot be determined.

EXAMPLE
    down=$(scr_list_down_nodes)
    srun ${down:+--exclude=$down} -n512 -N64 ./my_job

SEE ALSO
    scr_run(1), scr_should_exit(1), SCR user guide section 2.8
";

const OPTS: &[Opt] = &[
    flag("reason", Some('r')),
    flag("free", Some('f')),
    valued("down", Some('d'), "NODES"),
    flag("log", Some('l')),
    valued("secs", Some('s'), "N"),
];

fn main() {
    let code = scr::ops::main("scr_list_down_nodes", HELP, false, |argv| {
        let p = args::parse(OPTS, &argv, false)?;
        if p.positional.len() > 1 {
            return Err(scr::ops::OpError::usage(format!("unexpected argument {:?}", p.positional[1])));
        }
        if p.has("reason") && p.has("free") {
            return Err(scr::ops::OpError::usage("--reason and --free exclude each other"));
        }
        let secs = p.count("secs")?;
        if secs.is_some() && !p.has("log") {
            return Err(scr::ops::OpError::usage("--secs goes with --log"));
        }
        let d = down::down(p.positional.first().map(String::as_str), p.value("down"))?;
        for w in &d.warnings {
            eprintln!("scr_list_down_nodes: warning: {w}");
        }
        if p.has("log") && !d.down.is_empty() && !down::log(&d, secs)? {
            eprintln!(
                "scr_list_down_nodes: warning: the event log is disabled (SCR_LOG_ENABLE=0): --log recorded nothing"
            );
        }
        if p.has("free") {
            let up = d.up();
            if !up.is_empty() {
                println!("{}", up.join(","));
            }
        } else if p.has("reason") {
            for (n, why) in &d.down {
                println!("{n}: {why}");
            }
        } else if !d.down.is_empty() {
            println!("{}", d.down.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(","));
        }
        Ok(if d.down.is_empty() { 0 } else { 1 })
    });
    std::process::exit(code);
}
