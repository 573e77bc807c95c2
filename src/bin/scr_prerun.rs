//! `scr_prerun`: the checks `scr_run` makes before a job's first run, for job scripts that
//! launch the application themselves. The work is done by [`scr::ops::run::prerun_cli`].

const HELP: &str = "\
NAME
    scr_prerun - check an SCR job before its first run

SYNOPSIS
    scr_prerun [--prefix DIR]

DESCRIPTION
    Creates PREFIX/.scr if needed, reads the configuration (environment, PREFIX/.scrconf or
    SCR_CONF_FILE, the system file) and checks it, reads the halt file and the index (a
    damaged one is an error naming it), refuses to go on while another scr_run is running the
    job, and reports the allocation's nodes, the excluded ones, and any halt condition that
    would stop the job at once. scr_run makes the same checks; use scr_prerun when the job
    script launches the application itself (then call scr_postrun after it).

OPTIONS
    -p, --prefix DIR
        The prefix directory (default: SCR_PREFIX, else the current directory).
    -h, --help
        Print this text.

EXIT STATUS
    0 when the job may run, 1 when a check fails, 2 for bad usage.

SEE ALSO
    scr_run(1), scr_postrun(1), scr_halt(1)
";

fn main() {
    std::process::exit(scr::ops::main("scr_prerun", HELP, false, |argv| scr::ops::run::prerun_cli(&argv)));
}
