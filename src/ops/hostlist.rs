//! The host-list syntax of the resource managers (`n[1-3,7],gpu[01-02]`: SLURM's, which the
//! user guide uses for `SCR_EXCLUDE_NODES`) and [`NodeError`], why the nodes of a run could
//! not be known. The bottom of the node questions: [`super::nodes`] and [`super::slurm`] use it.

use std::collections::BTreeSet;

use crate::identity::QueryError;

/// Why the nodes of a run could not be known: a host list that does not parse, a variable or
/// file of the resource manager that cannot be read, a resource manager query that failed.
/// The fields name the list, the variable or file, the job step, or the query.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A host list (`n[1-3,7],m`) that does not parse; `why` says where.
    #[error("{list:?}: {why}")]
    HostList {
        /// The list as given.
        list: String,
        /// What is wrong, and where.
        why: String,
    },
    /// The host list `what` names (a variable, an option, a command's output) is malformed.
    #[error("{what}: {source}")]
    In {
        /// What held the list: a variable, an option, a command's output.
        what: String,
        /// What is wrong with it.
        source: Box<NodeError>,
    },
    /// The file a resource manager's variable `var` names cannot be read.
    #[error("{var} {file}: {source}")]
    File {
        /// The variable naming the file (`PBS_NODEFILE`, ...).
        var: &'static str,
        /// The file it names.
        file: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The value of the resource manager's variable `var` is malformed.
    #[error("{var} {value:?}: {why}")]
    Var {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A resource manager query failed.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// Flux could not say which nodes its job `job` has.
    #[error("the nodes of Flux job {job}: {source}")]
    FluxJob {
        /// The Flux job id.
        job: String,
        /// The query that failed.
        source: QueryError,
    },
    /// A step to cancel that is not a job step (`JOBID.STEP`).
    #[error("{step:?} is not a job step (JOBID.STEP); refusing to cancel a whole allocation")]
    NotAStep {
        /// The step as given.
        step: String,
    },
}

impl NodeError {
    /// This error, as the host list `what` names.
    pub(crate) fn within(self, what: impl Into<String>) -> NodeError {
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
}
