//! Node lists for the wrappers: the nodes of the allocation (from the resource manager, or the
//! simulated cluster of `scripts/sim-node.sh`, or this host alone), the nodes to leave out of a
//! run (those `SCR_EXCLUDE_NODES` names, user guide table 2: SLURM host-list syntax, nodes
//! outside the allocation silently ignored; and those the resource manager reports unusable,
//! see [`super::slurm`]). The host-list syntax itself is [`super::hostlist`]'s.

use std::collections::BTreeSet;

pub use super::hostlist::{expand, NodeError};

/// Where the allocation's nodes come from and what they are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Allocation {
    /// The node names, in the resource manager's order, each once.
    pub(crate) nodes: Vec<String>,
    /// Where they came from (the variable, file or command), for messages.
    pub(crate) source: String,
}

/// The nodes of this allocation: the simulated cluster (`SIM_NODE_ROOT` with `SIM_NODES`, or
/// the nodes of `SIM_NODE_MAP`), SLURM (`SLURM_JOB_NODELIST`), LSF (`LSB_DJOB_HOSTFILE`,
/// `LSB_MCPU_HOSTS` or `LSB_HOSTS`, see [`lsf_hosts`]), PBS (`PBS_NODEFILE`), Flux (`flux
/// resource list`, the resources of the job's own instance), else this host alone.
pub(crate) fn allocation() -> Result<Allocation, NodeError> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if get("SIM_NODE_ROOT").is_none() {
        if let Some(crate::identity::Rm::Flux(job)) = crate::identity::Rm::detect() {
            let out = crate::identity::rm_query("flux", &["resource", "list", "-s", "all", "-no", "{nodelist}"], &[])
                .map_err(|source| NodeError::FluxJob { job, source })?;
            let nodes = expand(&out.split_whitespace().collect::<Vec<_>>().join(","))
                .map_err(|e| e.within("flux resource list's node list"))?;
            return Ok(Allocation { nodes, source: "Flux (flux resource list)".into() });
        }
    }
    allocation_from(&get)
}

/// The hosts of an LSF job, from one host name per slot (`LSB_DJOB_HOSTFILE`, `LSB_HOSTS`) or
/// `host slots` pairs (`LSB_MCPU_HOSTS`). As SCR's scripts do, the first slot is left out: it
/// is the launch node where the batch script runs (`batch1 1 n1 40 n2 40` on a machine with
/// launch nodes gives `n1 n2`), and a first host with more slots stays.
fn lsf_hosts(slots: &[(String, usize)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, (h, n)) in slots.iter().enumerate() {
        let n = if i == 0 { n.saturating_sub(1) } else { *n };
        if n > 0 && !out.contains(h) {
            out.push(h.clone());
        }
    }
    out
}

fn allocation_from(get: &dyn Fn(&str) -> Option<String>) -> Result<Allocation, NodeError> {
    if get("SIM_NODE_ROOT").is_some() {
        if let Some(v) = get("SIM_NODES") {
            return Ok(Allocation { nodes: expand(&v)?, source: "simulated cluster (SIM_NODES)".into() });
        }
        if let Some(v) = get("SIM_NODE_MAP") {
            return Ok(Allocation { nodes: expand(&v)?, source: "simulated cluster (SIM_NODE_MAP)".into() });
        }
    }
    for var in ["SLURM_JOB_NODELIST", "SLURM_NODELIST"] {
        if let Some(v) = get(var) {
            return Ok(Allocation { nodes: expand(&v)?, source: var.into() });
        }
    }
    if let Some(f) = get("LSB_DJOB_HOSTFILE") {
        let text = std::fs::read_to_string(&f).map_err(|source| NodeError::File {
            var: "LSB_DJOB_HOSTFILE",
            file: f.clone(),
            source,
        })?;
        let slots: Vec<(String, usize)> =
            text.lines().map(str::trim).filter(|h| !h.is_empty()).map(|h| (h.to_string(), 1)).collect();
        return Ok(Allocation { nodes: lsf_hosts(&slots), source: "LSB_DJOB_HOSTFILE".into() });
    }
    if let Some(v) = get("LSB_MCPU_HOSTS") {
        let words: Vec<&str> = v.split_whitespace().collect();
        let mcpu = |why: String| NodeError::Var { var: "LSB_MCPU_HOSTS", value: v.clone(), why };
        let slots = words
            .chunks(2)
            .map(|c| match c {
                [h, n] => n.parse().map(|n| (h.to_string(), n)).map_err(|_| mcpu(format!("{n:?} is no slot count"))),
                _ => Err(mcpu("expected host and slot count pairs".into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Allocation { nodes: lsf_hosts(&slots), source: "LSB_MCPU_HOSTS".into() });
    }
    if let Some(v) = get("LSB_HOSTS") {
        let slots: Vec<(String, usize)> = v.split_whitespace().map(|h| (h.to_string(), 1)).collect();
        return Ok(Allocation { nodes: lsf_hosts(&slots), source: "LSB_HOSTS".into() });
    }
    if let Some(f) = get("PBS_NODEFILE") {
        let text = std::fs::read_to_string(&f).map_err(|source| NodeError::File {
            var: "PBS_NODEFILE",
            file: f.clone(),
            source,
        })?;
        let mut seen = BTreeSet::new();
        let nodes = text
            .lines()
            .map(str::trim)
            .filter(|h| !h.is_empty() && seen.insert(h.to_string()))
            .map(str::to_string)
            .collect();
        return Ok(Allocation { nodes, source: "PBS_NODEFILE".into() });
    }
    Ok(Allocation { nodes: vec![crate::identity::host_name()], source: "this host (no resource manager)".into() })
}

/// The nodes of `alloc` that `exclude` (a host list, e.g. `SCR_EXCLUDE_NODES`) names.
pub(crate) fn excluded(alloc: &[String], exclude: Option<&str>) -> Result<Vec<String>, NodeError> {
    let Some(list) = exclude.filter(|s| !s.trim().is_empty()) else { return Ok(Vec::new()) };
    let named = expand(list).map_err(|e| e.within("SCR_EXCLUDE_NODES"))?;
    Ok(alloc.iter().filter(|n| named.contains(n)).cloned().collect())
}

/// The nodes of `alloc` to leave out of the next run, each with why: those `exclude` (a host
/// list, e.g. `SCR_EXCLUDE_NODES`) names, then those the resource manager reports unusable
/// (Slurm allocations only). A resource manager that cannot be asked is reported in
/// `warnings` and leaves only the named nodes out.
pub(crate) fn left_out(
    alloc: &Allocation,
    exclude: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, String)>, NodeError> {
    let mut out: Vec<(String, String)> =
        excluded(&alloc.nodes, exclude)?.into_iter().map(|n| (n, "SCR_EXCLUDE_NODES".to_string())).collect();
    let asked = match crate::identity::Rm::detect() {
        Some(crate::identity::Rm::Slurm(job)) if alloc.source.starts_with("SLURM") => {
            Some(("Slurm", super::slurm::unusable(&job, &alloc.nodes)))
        }
        Some(crate::identity::Rm::Flux(_)) if alloc.source.starts_with("Flux") => {
            Some(("Flux", flux_down(&alloc.nodes)))
        }
        _ => None,
    };
    match asked {
        Some((_, Ok(down))) => {
            for (n, why) in down {
                if !out.iter().any(|(o, _)| *o == n) {
                    out.push((n, why));
                }
            }
        }
        Some((rm, Err(e))) => {
            warnings.push(format!("cannot ask {rm} which nodes are down ({e}); leaving out only SCR_EXCLUDE_NODES"))
        }
        None => {}
    }
    Ok(out)
}

/// The nodes of `nodes` Flux reports down: `flux resource list -s down -no {nodelist}`
/// (flux-resource(1): "unavailable resources are shown in the down state regardless of the
/// reason (drained, offline, torpid, etc)"), one host list per line, empty when none is.
fn flux_down(nodes: &[String]) -> Result<Vec<(String, String)>, NodeError> {
    let out = crate::identity::rm_query("flux", &["resource", "list", "-s", "down", "-no", "{nodelist}"], &[])?;
    let down = expand(&out.split_whitespace().collect::<Vec<_>>().join(","))
        .map_err(|e| e.within("flux resource list's node list"))?;
    Ok(nodes.iter().filter(|n| down.contains(n)).map(|n| (n.clone(), "down in Flux".to_string())).collect())
}

/// `n2 (down* in Slurm), n5 (SCR_EXCLUDE_NODES)`, or `none`.
pub(crate) fn describe(left_out: &[(String, String)]) -> String {
    if left_out.is_empty() {
        return "none".to_string();
    }
    left_out.iter().map(|(n, why)| format!("{n} ({why})")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn allocation_sources() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let a = allocation_from(&env(&[("SLURM_JOB_NODELIST", "c[1-2]")])).unwrap();
        assert_eq!(a.nodes, s(&["c1", "c2"]));
        let a =
            allocation_from(&env(&[("SIM_NODE_ROOT", "/x"), ("SIM_NODE_MAP", "n0,n0,n1"), ("SLURM_NODELIST", "z")]))
                .unwrap();
        assert_eq!(a.nodes, s(&["n0", "n1"]));
        let a = allocation_from(&env(&[("SIM_NODE_ROOT", "/x"), ("SIM_NODES", "n[0-4]")])).unwrap();
        assert_eq!(a.nodes.len(), 5);
        // LSF: the first slot is the launch node's.
        let a = allocation_from(&env(&[("LSB_HOSTS", "h1 h1 h2")])).unwrap();
        assert_eq!(a.nodes, s(&["h1", "h2"]));
        let a = allocation_from(&env(&[("LSB_HOSTS", "batch3 h1 h1 h2")])).unwrap();
        assert_eq!(a.nodes, s(&["h1", "h2"]));
        let a = allocation_from(&env(&[("LSB_MCPU_HOSTS", "batch3 1 h1 40 h2 40"), ("LSB_HOSTS", "x")])).unwrap();
        assert_eq!((a.nodes, a.source.as_str()), (s(&["h1", "h2"]), "LSB_MCPU_HOSTS"));
        let a = allocation_from(&env(&[("LSB_MCPU_HOSTS", "h1 4 h2 4")])).unwrap();
        assert_eq!(a.nodes, s(&["h1", "h2"]));
        assert!(allocation_from(&env(&[("LSB_MCPU_HOSTS", "h1 four")]))
            .unwrap_err()
            .to_string()
            .contains("LSB_MCPU_HOSTS"));
        assert_eq!(allocation_from(&env(&[])).unwrap().nodes.len(), 1);
    }

    #[test]
    fn left_out_nodes_say_why() {
        // Outside a Slurm allocation only SCR_EXCLUDE_NODES counts, and nothing is asked.
        let alloc = Allocation { nodes: s(&["n0", "n1", "n2"]), source: "LSB_HOSTS".into() };
        let mut warnings = Vec::new();
        let out = left_out(&alloc, Some("n[1-2]"), &mut warnings).unwrap();
        assert_eq!(describe(&out), "n1 (SCR_EXCLUDE_NODES), n2 (SCR_EXCLUDE_NODES)");
        assert!(warnings.is_empty());
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn exclusion_ignores_nodes_outside_the_allocation() {
        let alloc = s(&["n0", "n1", "n2"]);
        assert_eq!(excluded(&alloc, Some("n[1-9],x")).unwrap(), s(&["n1", "n2"]));
        assert!(excluded(&alloc, None).unwrap().is_empty());
        assert!(excluded(&alloc, Some("n[1")).unwrap_err().to_string().contains("SCR_EXCLUDE_NODES"));
    }
}
