//! `scr_mpirun ARGS`: `scr_run mpirun ARGS` (no `scr_run` options; configure it with SCR_* variables).

#[path = "scr_run.rs"]
#[allow(dead_code)]
mod run;

fn main() {
    std::process::exit(scr::ops::main("scr_mpirun", run::HELP, true, |argv| scr::ops::run::cli(&argv, Some("mpirun"))));
}
