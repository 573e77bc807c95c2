//! `scr_list_down_nodes`: which nodes of a node set cannot take the next run, for job scripts
//! that relaunch themselves (user guide 2.8.4: the `_loop` templates call it between
//! launches). The decision is the one `scr_run` makes ([`super::nodes::left_out`]): nodes
//! `SCR_EXCLUDE_NODES` names, those the resource manager reports unusable (Slurm), and those
//! the caller says are down.

use super::{nodes, OpError, OpResult};

/// The answer for one node set.
#[derive(Debug)]
pub struct Down {
    /// Every node looked at, in order.
    pub(crate) nodes: Vec<String>,
    /// The down nodes among them, with why.
    pub down: Vec<(String, String)>,
    /// What could not be asked (the resource manager), for the command to print.
    pub warnings: Vec<String>,
}

impl Down {
    /// The nodes that are up, in order.
    pub fn up(&self) -> Vec<String> {
        self.nodes.iter().filter(|n| !self.down.iter().any(|(d, _)| d == *n)).cloned().collect()
    }
}

/// The down nodes of `nodeset` (a host list; default: the allocation's nodes). `forced` (a host
/// list, `--down`) names nodes to count as down without testing them.
pub fn down(nodeset: Option<&str>, forced: Option<&str>) -> OpResult<Down> {
    let mut alloc = nodes::allocation()?;
    if let Some(set) = nodeset {
        alloc.nodes = nodes::expand(set).map_err(|e| OpError::usage(format!("node set: {e}")))?;
    }
    let forced = match forced {
        Some(list) => nodes::expand(list).map_err(|e| OpError::usage(format!("--down: {e}")))?,
        None => Vec::new(),
    };
    let resolved = crate::config::resolve().map_err(|e| OpError::failed(e.to_string()))?;
    let mut warnings = Vec::new();
    let mut down: Vec<(String, String)> = alloc
        .nodes
        .iter()
        .filter(|n| forced.contains(n))
        .map(|n| (n.clone(), "given as down (--down)".into()))
        .collect();
    for (n, why) in nodes::left_out(&alloc, resolved.get("SCR_EXCLUDE_NODES"), &mut warnings)? {
        if !down.iter().any(|(d, _)| *d == n) {
            down.push((n, why));
        }
    }
    down.sort_by_key(|(n, _)| alloc.nodes.iter().position(|x| x == n));
    Ok(Down { nodes: alloc.nodes, down, warnings })
}

/// `--log`: record a `NODE_FAIL` event per down node in the event log (`SCR_LOG_ENABLE`: the
/// prefix's `.scr/log`, syslog and the database, as configured), with why and, when given, the seconds the
/// job ran (`--secs`). `Ok(false)`: the event log is disabled, nothing was recorded.
pub fn log(d: &Down, secs: Option<u64>) -> OpResult<bool> {
    let resolved = crate::config::resolve().map_err(|e| OpError::failed(e.to_string()))?;
    let settings = crate::config::Settings::from_resolved(&resolved, crate::paths::cwd())
        .map_err(|e| OpError::failed(e.to_string()))?;
    let layout = super::prefix::open(&settings.prefix, false)?;
    let job = crate::identity::job_id(&layout.prefix.path);
    let events = crate::events::EventLog::new(&settings, &layout.scr_dir(), &job.id, &crate::identity::host_name());
    if !events.enabled() {
        return Ok(false);
    }
    for (node, why) in &d.down {
        match secs {
            Some(s) => events.record("NODE_FAIL", &[("node", node), ("reason", why), ("secs", &s)]),
            None => events.record("NODE_FAIL", &[("node", node), ("reason", why)]),
        }
    }
    // the database rows are written by a thread of this process, which is about to exit
    events.drain();
    Ok(true)
}
