//! Node lists for the wrappers: the nodes of the allocation (from the resource manager, or the
//! simulated cluster of `scripts/sim-node.sh`, or this host alone), the nodes to leave out of a
//! run (those `SCR_EXCLUDE_NODES` names, user guide table 2: SLURM host-list syntax, nodes
//! outside the allocation silently ignored; and those the resource manager reports unusable,
//! see [`super::slurm`]), and that syntax itself (`n[1-3,7],gpu[01-02]`).

use std::collections::BTreeSet;

use crate::identity::QueryError;

/// Why the nodes of a run could not be known: a host list that does not parse, a variable or
/// file of the resource manager that cannot be read, a resource manager query that failed.
/// The fields name the list, the variable or file, the job step, or the query.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A host list (`n[1-3,7],m`) that does not parse; `why` says where.
    #[error("{list:?}: {why}")]
    HostList { list: String, why: String },
    /// The host list `what` names (a variable, an option, a command's output) is malformed.
    #[error("{what}: {source}")]
    In { what: String, source: Box<NodeError> },
    /// The file a resource manager's variable `var` names cannot be read.
    #[error("{var} {file}: {source}")]
    File { var: &'static str, file: String, source: std::io::Error },
    /// The value of the resource manager's variable `var` is malformed.
    #[error("{var} {value:?}: {why}")]
    Var { var: &'static str, value: String, why: String },
    /// A resource manager query failed.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// Flux could not say which nodes its job `job` has.
    #[error("the nodes of Flux job {job}: {source}")]
    FluxJob { job: String, source: QueryError },
    /// A step to cancel that is not a job step (`JOBID.STEP`).
    #[error("{step:?} is not a job step (JOBID.STEP); refusing to cancel a whole allocation")]
    NotAStep { step: String },
}

impl NodeError {
    /// This error, as the host list `what` names.
    pub fn within(self, what: impl Into<String>) -> NodeError {
        NodeError::In { what: what.into(), source: Box::new(self) }
    }
}

/// Expand a host list: comma-separated items, each a name with bracketed ranges
/// (`node[1-3,5]`, zero padding kept as in `n[01-10]`); spaces also separate items.
pub fn expand(list: &str) -> Result<Vec<String>, NodeError> {
    let bad = |why: &str| NodeError::HostList { list: list.to_string(), why: why.to_string() };
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in list.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Err(bad("']' without '['")),
            ']' => depth -= 1,
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            items.push(std::mem::take(&mut item));
        } else {
            item.push(c);
        }
    }
    if depth != 0 {
        return Err(bad("'[' without ']'"));
    }
    items.push(item);
    for it in items.into_iter().filter(|s| !s.is_empty()) {
        expand_item(&it, list, &mut out)?;
    }
    let mut seen = BTreeSet::new();
    out.retain(|n| seen.insert(n.clone()));
    Ok(out)
}

fn expand_item(item: &str, list: &str, out: &mut Vec<String>) -> Result<(), NodeError> {
    let fault = |why: String| NodeError::HostList { list: list.to_string(), why };
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Ok(());
    };
    let close = open + item[open..].find(']').ok_or_else(|| fault("'[' without ']'".into()))?;
    let (head, ranges, tail) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let bad = || fault(format!("bad range [{ranges}] (expected numbers like [1-4,7] or [01-12])"));
    for r in ranges.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() || !a.bytes().all(|c| c.is_ascii_digit()) || !b.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let (lo, hi): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if hi < lo || hi - lo > 100_000 {
            return Err(bad());
        }
        let width = a.len();
        for n in lo..=hi {
            expand_item(&format!("{head}{n:0width$}{tail}"), list, out)?;
        }
    }
    Ok(())
}

/// Where the allocation's nodes come from and what they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub nodes: Vec<String>,
    pub source: String,
}

/// The nodes of this allocation: the simulated cluster (`SIM_NODE_ROOT` with `SIM_NODES`, or
/// the nodes of `SIM_NODE_MAP`), SLURM (`SLURM_JOB_NODELIST`), LSF (`LSB_DJOB_HOSTFILE`,
/// `LSB_MCPU_HOSTS` or `LSB_HOSTS`, see [`lsf_hosts`]), PBS (`PBS_NODEFILE`), Flux (`flux
/// resource list`, the resources of the job's own instance), else this host alone.
pub fn allocation() -> Result<Allocation, NodeError> {
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
pub fn excluded(alloc: &[String], exclude: Option<&str>) -> Result<Vec<String>, NodeError> {
    let Some(list) = exclude.filter(|s| !s.trim().is_empty()) else { return Ok(Vec::new()) };
    let named = expand(list).map_err(|e| e.within("SCR_EXCLUDE_NODES"))?;
    Ok(alloc.iter().filter(|n| named.contains(n)).cloned().collect())
}

/// The nodes of `alloc` to leave out of the next run, each with why: those `exclude` (a host
/// list, e.g. `SCR_EXCLUDE_NODES`) names, then those the resource manager reports unusable
/// (Slurm allocations only). A resource manager that cannot be asked is reported in
/// `warnings` and leaves only the named nodes out.
pub fn left_out(
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
pub fn describe(left_out: &[(String, String)]) -> String {
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
    fn host_lists() {
        assert_eq!(expand("n[1-3,7],m").unwrap(), s(&["n1", "n2", "n3", "n7", "m"]));
        assert_eq!(expand("gpu[08-10]x").unwrap(), s(&["gpu08x", "gpu09x", "gpu10x"]));
        assert_eq!(expand("r[1-2]n[1-2]").unwrap(), s(&["r1n1", "r1n2", "r2n1", "r2n2"]));
        assert_eq!(expand(" a b,a ").unwrap(), s(&["a", "b"]));
        for bad in ["n[1-", "n]", "n[a-b]", "n[3-1]", "n[]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
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
