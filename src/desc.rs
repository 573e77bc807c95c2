//! Descriptors: groups (which processes fail together or share a device), stores (classes of
//! node-local storage) and redundancy descriptors (which scheme protects which checkpoints,
//! where), built from the configuration exactly as user guide 2.7.3 describes.
//!
//! A redundancy descriptor is recorded with each dataset, so a later run rebuilds and
//! restores a dataset with the scheme it was written with, whatever the configuration says
//! then.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, Settings, StoreEntry};

/// A redundancy scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scheme {
    Single,
    Partner,
    Xor,
    Rs,
}

impl Scheme {
    pub fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_uppercase().as_str() {
            "SINGLE" => Some(Scheme::Single),
            "PARTNER" => Some(Scheme::Partner),
            "XOR" => Some(Scheme::Xor),
            "RS" => Some(Scheme::Rs),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Single => "SINGLE",
            Scheme::Partner => "PARTNER",
            Scheme::Xor => "XOR",
            Scheme::Rs => "RS",
        }
    }
}

/// A redundancy descriptor (`CKPT=<index> ...` or the implied default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedDesc {
    pub index: usize,
    pub interval: u64,
    pub group: String,
    pub store: PathBuf,
    /// The scheme the configuration asks for. The protection a dataset actually got (which
    /// depends on how sets could be formed) is recorded with the dataset.
    pub scheme: Scheme,
    pub set_size: usize,
    pub set_failures: usize,
    pub bypass: bool,
    pub output: bool,
    /// The scheme, and the set size, were chosen by the user (`SCR_COPY_TYPE`, a `CKPT` entry's
    /// `TYPE`; `SCR_SET_SIZE`, `SET_SIZE`) rather than defaulted: only then is a protection
    /// that cannot be given as asked worth a warning (see `runtime::sets`).
    #[serde(default)]
    pub chosen_scheme: bool,
    #[serde(default)]
    pub chosen_set_size: bool,
}

/// All descriptors of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Descriptors {
    pub stores: Vec<StoreEntry>,
    pub reddescs: Vec<RedDesc>,
    /// `GROUPS=` entries: host -> group name -> value.
    pub groups: BTreeMap<String, BTreeMap<String, String>>,
}

fn cerr(at: String, msg: impl Into<String>) -> ConfigError {
    ConfigError { at, msg: msg.into() }
}

impl Descriptors {
    /// Build the descriptors from the settings.
    pub fn build(s: &Settings) -> Result<Descriptors, ConfigError> {
        let mut stores = s.stores.clone();
        let mut reddescs = Vec::new();
        if s.copy_type == "FILE" {
            if s.ckpts.is_empty() {
                return Err(cerr("SCR_COPY_TYPE=FILE".into(), "no CKPT entries are defined"));
            }
            let mut entries: Vec<_> = s.ckpts.iter().collect();
            entries.sort_by_key(|e| e.value.parse::<usize>().unwrap_or(usize::MAX));
            for (i, e) in entries.iter().enumerate() {
                let here = |k: &str| format!("{} (CKPT={} {k})", e.origin, e.value);
                if e.value.parse::<usize>().ok() != Some(i) {
                    return Err(cerr(
                        here(""),
                        format!(
                            "CKPT entries must be numbered 0, 1, 2, ... (found CKPT={} where CKPT={i} was expected)",
                            e.value
                        ),
                    ));
                }
                let count = |k: &str, d: usize| -> Result<usize, ConfigError> {
                    e.attr(k)
                        .map_or(Ok(d), |v| v.parse().map_err(|_| cerr(here(k), format!("{k}={v}: expected a count"))))
                };
                let flag = |k: &str, d: bool| -> Result<bool, ConfigError> {
                    e.attr(k).map_or(Ok(d), |v| {
                        crate::config::params::parse_bool(v)
                            .ok_or_else(|| cerr(here(k), format!("{k}={v}: expected 0 or 1")))
                    })
                };
                // SCR_COPY_TYPE is FILE here, so a missing TYPE takes the built-in default, XOR.
                let ty = e.attr("TYPE").unwrap_or("XOR");
                let scheme = Scheme::parse(ty)
                    .ok_or_else(|| cerr(here("TYPE"), format!("TYPE={ty}: expected SINGLE, PARTNER, XOR or RS")))?;
                let interval = count("INTERVAL", 1)? as u64;
                if interval == 0 {
                    return Err(cerr(here("INTERVAL"), "INTERVAL must be at least 1"));
                }
                reddescs.push(RedDesc {
                    index: i,
                    interval,
                    group: e.attr("GROUP").unwrap_or(&s.group).to_string(),
                    store: e.attr("STORE").map(PathBuf::from).unwrap_or_else(|| s.cache_base.clone()),
                    scheme,
                    set_size: count("SET_SIZE", s.set_size)?,
                    set_failures: count("SET_FAILURES", s.set_failures)?,
                    bypass: flag("BYPASS", s.cache_bypass)?,
                    output: flag("OUTPUT", false)?,
                    chosen_scheme: e.attr("TYPE").is_some(),
                    chosen_set_size: e.attr("SET_SIZE").is_some() || s.set_size_chosen,
                });
            }
            if !reddescs.iter().any(|d| d.interval == 1) {
                return Err(cerr("CKPT entries".into(), "one CKPT descriptor must have INTERVAL=1"));
            }
            if reddescs.iter().filter(|d| d.output).count() > 1 {
                return Err(cerr("CKPT entries".into(), "at most one CKPT descriptor may set OUTPUT=1"));
            }
        } else {
            let scheme = Scheme::parse(&s.copy_type).ok_or_else(|| {
                cerr("SCR_COPY_TYPE".into(), format!("{}: expected SINGLE, PARTNER, XOR, RS or FILE", s.copy_type))
            })?;
            reddescs.push(RedDesc {
                index: 0,
                interval: 1,
                group: s.group.clone(),
                store: s.cache_base.clone(),
                scheme,
                set_size: s.set_size,
                set_failures: s.set_failures,
                bypass: s.cache_bypass,
                output: false,
                chosen_scheme: s.copy_type_chosen,
                chosen_set_size: s.set_size_chosen,
            });
        }
        for d in &reddescs {
            match stores.iter().find(|st| st.path == d.store) {
                Some(st) if !st.enabled && !d.bypass => {
                    return Err(cerr(
                        format!("CKPT={}", d.index),
                        format!(
                            "store {} is disabled (ENABLED=0) but the descriptor caches datasets there",
                            d.store.display()
                        ),
                    ))
                }
                Some(_) => {}
                None => stores.push(StoreEntry {
                    path: d.store.clone(),
                    group: "NODE".into(),
                    count: s.cache_size,
                    enabled: true,
                    mkdir: true,
                    flush: s.flush_type.clone(),
                }),
            }
        }
        let mut groups: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for e in &s.groups {
            let g = groups.entry(e.value.clone()).or_default();
            for (k, v) in &e.attrs {
                if k == "NODE" || k == "WORLD" {
                    return Err(cerr(
                        format!("{} (GROUPS={})", e.origin, e.value),
                        format!("{k} is a built-in group and cannot be redefined"),
                    ));
                }
                g.insert(k.clone(), v.value.clone());
            }
        }
        Ok(Descriptors { stores, reddescs, groups })
    }

    /// The descriptor for a new dataset: for output, the `OUTPUT=1` one if any; otherwise the
    /// one with the largest interval dividing the checkpoint number; for output that is not a
    /// checkpoint and without an `OUTPUT=1` descriptor, the interval-1 one.
    pub fn select(&self, ckpt_id: u64, is_ckpt: bool, is_output: bool) -> &RedDesc {
        if is_output {
            if let Some(d) = self.reddescs.iter().find(|d| d.output) {
                return d;
            }
            if !is_ckpt {
                return self.reddescs.iter().find(|d| d.interval == 1).expect("an interval-1 descriptor exists");
            }
        }
        self.reddescs
            .iter()
            .filter(|d| ckpt_id.is_multiple_of(d.interval))
            .max_by_key(|d| (d.interval, std::cmp::Reverse(d.index)))
            .expect("an interval-1 descriptor exists")
    }

    /// The store descriptor at `path`.
    pub fn store(&self, path: &std::path::Path) -> Option<&StoreEntry> {
        self.stores.iter().find(|s| s.path == path)
    }

    /// The value of group `name` for host `host` (NODE: the host, WORLD: one value for all).
    pub fn group_value(&self, name: &str, host: &str) -> Result<String, ConfigError> {
        match name {
            "NODE" => Ok(host.to_string()),
            "WORLD" => Ok(String::new()),
            _ => self.groups.get(host).and_then(|g| g.get(name)).cloned().ok_or_else(|| {
                cerr(format!("GROUPS (group {name})"), format!("no GROUPS={host} entry defines {name} for this node"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_file_text, resolve_layers};
    use std::path::Path;

    fn settings(text: &str) -> Settings {
        let mut w = Vec::new();
        let l = parse_file_text(text, Path::new("/c"), true, &mut w).unwrap();
        Settings::from_resolved(&resolve_layers(vec![l], w), PathBuf::from("/p")).unwrap()
    }

    #[test]
    fn implied_default_descriptor() {
        let d = Descriptors::build(&settings("SCR_COPY_TYPE=SINGLE\nSCR_CACHE_BASE=/ssd\n")).unwrap();
        assert_eq!(d.reddescs.len(), 1);
        assert_eq!(d.reddescs[0].store, PathBuf::from("/ssd"));
        assert_eq!(d.stores[0].path, PathBuf::from("/ssd"));
        assert!(!d.reddescs[0].bypass);
    }

    #[test]
    fn selection_by_interval_and_output() {
        let d = Descriptors::build(&settings(
            "SCR_COPY_TYPE=FILE\nCKPT=0 INTERVAL=1 TYPE=SINGLE\nCKPT=1 INTERVAL=4 TYPE=SINGLE OUTPUT=1\nCKPT=2 INTERVAL=8 TYPE=SINGLE\n",
        ))
        .unwrap();
        assert_eq!(d.select(3, true, false).index, 0);
        assert_eq!(d.select(4, true, false).index, 1);
        assert_eq!(d.select(16, true, false).index, 2);
        assert_eq!(d.select(3, true, true).index, 1);
        assert_eq!(d.select(3, false, true).index, 1);
    }

    #[test]
    fn descriptor_errors() {
        let s = settings("SCR_COPY_TYPE=FILE\nCKPT=1 INTERVAL=1\n");
        assert!(Descriptors::build(&s).unwrap_err().msg.contains("numbered"));
        let s = settings("SCR_COPY_TYPE=FILE\nCKPT=0 INTERVAL=2\n");
        assert!(Descriptors::build(&s).unwrap_err().msg.contains("INTERVAL=1"));
        let s = settings("SCR_COPY_TYPE=FILE\nCKPT=0 TYPE=MIRROR\n");
        assert!(Descriptors::build(&s).unwrap_err().at.contains("/c:2"));
    }

    #[test]
    fn shipped_descriptor_example_is_valid() {
        let d = Descriptors::build(&settings(include_str!("../config/descriptors.conf.example"))).unwrap();
        assert_eq!(d.reddescs.len(), 2);
        assert_eq!((d.reddescs[1].scheme, d.reddescs[1].set_failures), (Scheme::Rs, 2));
        assert_eq!(d.select(10, true, false).index, 1);
    }

    #[test]
    fn schemes_and_set_parameters() {
        let d = Descriptors::build(&settings("SCR_COPY_TYPE=RS\nSCR_SET_SIZE=6\nSCR_SET_FAILURES=3\n")).unwrap();
        assert_eq!(d.reddescs[0].scheme, Scheme::Rs);
        assert_eq!((d.reddescs[0].set_size, d.reddescs[0].set_failures), (6, 3));
        let d = Descriptors::build(&settings(
            "SCR_COPY_TYPE=FILE\nCKPT=0 TYPE=PARTNER GROUP=RACK STORE=/ssd\nGROUPS=n1 RACK=a\n",
        ))
        .unwrap();
        assert_eq!(d.reddescs[0].scheme, Scheme::Partner);
        assert_eq!(d.reddescs[0].group, "RACK");
        assert_eq!(d.group_value("RACK", "n1").unwrap(), "a");
        assert!(d.group_value("RACK", "n2").unwrap_err().msg.contains("no GROUPS=n2"));
    }
}
