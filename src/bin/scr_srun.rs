//! `scr_srun ARGS`: `scr_run srun ARGS` (no `scr_run` options; configure it with SCR_* variables).

#[path = "scr_run.rs"]
#[allow(dead_code)]
mod run;

fn main() {
    std::process::exit(scr::ops::main("scr_srun", run::HELP, true, |argv| scr::ops::run::cli(&argv, Some("srun"))));
}
