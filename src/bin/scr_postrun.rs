//! `scr_postrun`: SCR's name for the scavenge a job script runs after its last run; the same
//! command as `scr_scavenge`.

#[path = "scr_scavenge.rs"]
#[allow(dead_code)]
mod scavenge;

fn main() {
    std::process::exit(scr::ops::main("scr_postrun", scavenge::HELP, false, |argv| scr::ops::scavenge::cli(&argv)));
}
