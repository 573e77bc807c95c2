//! `scr_should_exit`: whether a batch script's run loop should stop rather than launch the job
//! again (SCR's job scripts call it between runs; `scr_run` makes the same decision itself,
//! see [`super::run`]). The job should stop when a halt condition holds: an exit reason in the
//! halt file (`scr_halt`'s, or the one `SCR_Finalize` records when the application finished),
//! no checkpoints left, the `--before`/`--after` times, fewer than `SCR_HALT_SECONDS` left
//! before the allocation ends; or when fewer usable nodes remain than a run needs
//! (`SCR_MIN_NODES`, else as many as `scr_run`'s last run used, else the whole allocation),
//! nodes named by `SCR_EXCLUDE_NODES` or given as down not counting.

use super::{nodes, run, scavenge, OpResult};
use crate::state::halt::Halt;
use crate::state::run::RunRecord;

/// The answer, with the facts it rests on (for `--verbose`).
#[derive(Debug, Default)]
pub struct Verdict {
    /// Why the job should stop; `None`: it may run again.
    pub stop: Option<String>,
    /// The facts checked (prefix, halt conditions, nodes), for `--verbose`.
    pub notes: Vec<String>,
}

/// Decide for the job in `prefix` (default: `SCR_PREFIX`, else the current directory), with
/// `down` nodes known to be down besides those `SCR_EXCLUDE_NODES` names.
pub fn decide(prefix: Option<&str>, down: &[String]) -> OpResult<Verdict> {
    let (layout, settings) = scavenge::job_context(prefix)?;
    let resolved = crate::config::resolve()?;
    let mut v = Verdict { notes: vec![format!("prefix {}", layout.prefix.path.display())], ..Default::default() };
    let halt = Halt::load(&layout.halt())?;
    if let Some(why) = run::halt_reason(&halt, &settings, false) {
        v.stop = Some(format!("halt condition: {why}"));
        return Ok(v);
    }
    v.notes.push("no halt condition holds".into());
    let alloc = nodes::allocation()?;
    let excluded = nodes::excluded(&alloc.nodes, resolved.get("SCR_EXCLUDE_NODES"))?;
    let unusable: Vec<String> =
        alloc.nodes.iter().filter(|n| excluded.contains(n) || down.contains(n)).cloned().collect();
    let usable = alloc.nodes.len() - unusable.len();
    let (needed, why) = match run::min_nodes(&resolved, None)? {
        Some(n) => (n, "SCR_MIN_NODES"),
        None => match RunRecord::load(&layout.run_file())? {
            Some(rec) if !rec.nodes.is_empty() => (rec.nodes.len(), "as many as the last run"),
            _ => (alloc.nodes.len(), "the whole allocation"),
        },
    };
    v.notes.push(format!(
        "allocation: {} node(s) from {}; down or excluded: {}; a run needs {needed} ({why})",
        alloc.nodes.len(),
        alloc.source,
        if unusable.is_empty() { "none".to_string() } else { unusable.join(",") }
    ));
    if usable < needed {
        v.stop = Some(format!("{usable} usable node(s) left, a run needs {needed} ({why})"));
    }
    Ok(v)
}
