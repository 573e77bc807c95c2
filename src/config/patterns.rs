//! Checkpoint patterns of transparent mode: which paths under the prefix the preload routes
//! to cache, what kind of dataset they form, how the dataset is named and which ranks a
//! pattern applies to.
//!
//! A pattern is a glob relative to the prefix, matched component by component: `*` (any
//! characters but `/`), `?` (one character), `[a-z0-9]` / `[!...]` (a class), and `**` as a
//! whole component (zero or more components). Each wildcard captures what it matched; a
//! `NAME` template refers to captures as `{1}`, `{2}`, ... The default name is the path up
//! to the first directory component that has a wildcard (`ckpt.*/**` names the dataset of
//! `ckpt.100/rank_3.dat` "ckpt.100"); a pattern without such a directory names its datasets
//! by its literal directory part or, failing that, by the pattern text.
//!
//! Exclusions (`TYPE=EXCLUDE`, or `!pattern` in `SCR_PRELOAD_PATTERNS`) win over inclusions;
//! among inclusions the first that matches wins (config entries in lexical order of their
//! patterns, then environment entries in the order written).

use serde::{Deserialize, Serialize};

use super::{ConfigError, Entry};
use crate::{FLAG_CHECKPOINT, FLAG_OUTPUT};

/// What a pattern's files form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Checkpoint,
    Output,
    Both,
    Exclude,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        match s.to_ascii_uppercase().as_str() {
            "CHECKPOINT" | "CKPT" => Some(Kind::Checkpoint),
            "OUTPUT" => Some(Kind::Output),
            "BOTH" | "CHECKPOINT+OUTPUT" => Some(Kind::Both),
            "EXCLUDE" | "NONE" => Some(Kind::Exclude),
            _ => None,
        }
    }

    /// `SCR_FLAG_*` bits of the datasets this kind forms.
    pub fn flags(self) -> i32 {
        match self {
            Kind::Checkpoint => FLAG_CHECKPOINT,
            Kind::Output => FLAG_OUTPUT,
            Kind::Both => FLAG_CHECKPOINT | FLAG_OUTPUT,
            Kind::Exclude => 0,
        }
    }
}

/// One configured pattern, as written (validated by [`PatternSet::compile`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatternSpec {
    pub pattern: String,
    pub kind: Kind,
    pub name: Option<String>,
    /// Inclusive rank ranges; empty means every rank.
    pub ranks: Vec<(u32, u32)>,
    /// Where it was configured, for messages.
    pub at: String,
}

/// The result of routing a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub flags: i32,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(char),
    Star,
    Quest,
    Class { neg: bool, ranges: Vec<(char, char)> },
}

#[derive(Debug, Clone, PartialEq)]
enum Comp {
    /// `**`
    Any,
    Seg(Vec<Tok>),
}

impl Comp {
    fn wild(&self) -> bool {
        match self {
            Comp::Any => true,
            Comp::Seg(t) => t.iter().any(|t| !matches!(t, Tok::Lit(_))),
        }
    }
}

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    comps: Vec<Comp>,
    wildcards: usize,
}

impl Glob {
    pub fn parse(s: &str) -> Result<Glob, String> {
        if s.is_empty() {
            return Err("the pattern is empty".into());
        }
        if s.starts_with('/') {
            return Err(format!("{s}: patterns are relative to the prefix directory (remove the leading /)"));
        }
        let mut comps = Vec::new();
        let mut wildcards = 0;
        for part in s.split('/') {
            match part {
                "" => return Err(format!("{s}: empty path component (a doubled or trailing /)")),
                "." | ".." => return Err(format!("{s}: '{part}' is not allowed in a pattern")),
                "**" => {
                    wildcards += 1;
                    comps.push(Comp::Any);
                    continue;
                }
                _ => {}
            }
            if part.contains("**") {
                return Err(format!("{s}: ** must be a whole path component (as in ckpt/**)"));
            }
            let mut toks = Vec::new();
            let mut chars = part.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '*' => {
                        wildcards += 1;
                        toks.push(Tok::Star)
                    }
                    '?' => {
                        wildcards += 1;
                        toks.push(Tok::Quest)
                    }
                    '[' => {
                        let neg = matches!(chars.peek(), Some('!') | Some('^'));
                        if neg {
                            chars.next();
                        }
                        let mut ranges = Vec::new();
                        let mut closed = false;
                        let mut first = true;
                        while let Some(c) = chars.next() {
                            if c == ']' && !first {
                                closed = true;
                                break;
                            }
                            first = false;
                            if chars.peek() == Some(&'-') {
                                chars.next();
                                match chars.next() {
                                    Some(']') => {
                                        ranges.push((c, c));
                                        ranges.push(('-', '-'));
                                        closed = true;
                                        break;
                                    }
                                    Some(hi) if hi >= c => ranges.push((c, hi)),
                                    Some(hi) => return Err(format!("{s}: bad range {c}-{hi} in [...]")),
                                    None => break,
                                }
                            } else {
                                ranges.push((c, c));
                            }
                        }
                        if !closed {
                            return Err(format!("{s}: unclosed [ in '{part}'"));
                        }
                        wildcards += 1;
                        toks.push(Tok::Class { neg, ranges });
                    }
                    '\\' => match chars.next() {
                        Some(e) => toks.push(Tok::Lit(e)),
                        None => return Err(format!("{s}: trailing \\")),
                    },
                    c => toks.push(Tok::Lit(c)),
                }
            }
            comps.push(Comp::Seg(toks));
        }
        if let Some(Comp::Seg(t)) = comps.first() {
            if t == &crate::paths::SCR_DIR.chars().map(Tok::Lit).collect::<Vec<_>>() {
                return Err(format!("{s}: the prefix's {} directory is reserved for SCR", crate::paths::SCR_DIR));
            }
        }
        Ok(Glob { comps, wildcards })
    }

    /// Match a prefix-relative path; the captures of every wildcard, in order.
    pub fn matches(&self, rel: &str) -> Option<Vec<String>> {
        let parts: Vec<&str> = rel.split('/').collect();
        let mut caps = Vec::new();
        match_comps(&self.comps, &parts, &mut caps).then_some(caps)
    }

    fn literal_dirs(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.comps[..self.comps.len().saturating_sub(1)] {
            match c {
                Comp::Seg(t) if !c.wild() => {
                    out.push(t.iter().map(|t| if let Tok::Lit(c) = t { *c } else { '?' }).collect())
                }
                _ => break,
            }
        }
        out
    }
}

fn match_comps(pat: &[Comp], parts: &[&str], caps: &mut Vec<String>) -> bool {
    let Some((first, rest)) = pat.split_first() else {
        return parts.is_empty();
    };
    match first {
        Comp::Any => {
            for n in 0..=parts.len() {
                let mark = caps.len();
                caps.push(parts[..n].join("/"));
                if match_comps(rest, &parts[n..], caps) {
                    return true;
                }
                caps.truncate(mark);
            }
            false
        }
        Comp::Seg(toks) => {
            let Some((p, prest)) = parts.split_first() else {
                return false;
            };
            let mark = caps.len();
            let chars: Vec<char> = p.chars().collect();
            if match_seg(toks, &chars, caps) && match_comps(rest, prest, caps) {
                return true;
            }
            caps.truncate(mark);
            false
        }
    }
}

fn match_seg(toks: &[Tok], s: &[char], caps: &mut Vec<String>) -> bool {
    let Some((t, rest)) = toks.split_first() else {
        return s.is_empty();
    };
    match t {
        Tok::Lit(c) => s.first() == Some(c) && match_seg(rest, &s[1..], caps),
        Tok::Quest => {
            if s.is_empty() {
                return false;
            }
            caps.push(s[0].to_string());
            if match_seg(rest, &s[1..], caps) {
                return true;
            }
            caps.pop();
            false
        }
        Tok::Class { neg, ranges } => {
            let Some(&c) = s.first() else { return false };
            if ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) == *neg {
                return false;
            }
            caps.push(c.to_string());
            if match_seg(rest, &s[1..], caps) {
                return true;
            }
            caps.pop();
            false
        }
        Tok::Star => {
            for n in 0..=s.len() {
                caps.push(s[..n].iter().collect());
                if match_seg(rest, &s[n..], caps) {
                    return true;
                }
                caps.pop();
            }
            false
        }
    }
}

struct Compiled {
    spec: PatternSpec,
    glob: Glob,
}

/// The compiled patterns of a run.
pub struct PatternSet {
    specs: Vec<Compiled>,
}

impl PatternSet {
    /// Compile and check every pattern; the error names the entry.
    pub fn compile(specs: &[PatternSpec]) -> Result<PatternSet, ConfigError> {
        let mut out = Vec::new();
        for s in specs {
            let err = |msg: String| ConfigError { at: s.at.clone(), msg };
            let glob = Glob::parse(&s.pattern).map_err(err)?;
            if let Some(t) = &s.name {
                check_template(t, glob.wildcards).map_err(|m| err(format!("NAME={t}: {m}")))?;
            }
            out.push(Compiled { spec: s.clone(), glob });
        }
        // exclusions first; inclusions keep their order
        out.sort_by_key(|c| c.spec.kind != Kind::Exclude);
        Ok(PatternSet { specs: out })
    }

    pub fn is_empty(&self) -> bool {
        self.specs.iter().all(|c| c.spec.kind == Kind::Exclude)
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether a pattern takes a prefix-relative path written by `rank` (as [`Self::route`]
    /// without naming the dataset).
    pub fn takes(&self, rel: &str, rank: u32) -> bool {
        for c in &self.specs {
            let s = &c.spec;
            if !s.ranks.is_empty() && !s.ranks.iter().any(|&(lo, hi)| lo <= rank && rank <= hi) {
                continue;
            }
            if c.glob.matches(rel).is_some() {
                return s.kind != Kind::Exclude;
            }
        }
        false
    }

    /// Route a prefix-relative path written by `rank`: `None` if no pattern takes it.
    pub fn route(&self, rel: &str, rank: u32) -> Option<Route> {
        for c in &self.specs {
            let s = &c.spec;
            if !s.ranks.is_empty() && !s.ranks.iter().any(|&(lo, hi)| lo <= rank && rank <= hi) {
                continue;
            }
            let Some(caps) = c.glob.matches(rel) else { continue };
            if s.kind == Kind::Exclude {
                return None;
            }
            let name = match &s.name {
                Some(t) => expand(t, &caps),
                None => default_name(&c.glob, &s.pattern, rel),
            };
            return Some(Route { flags: s.kind.flags(), name });
        }
        None
    }
}

fn default_name(glob: &Glob, pattern: &str, rel: &str) -> String {
    let last = glob.comps.len() - 1;
    if let Some(i) = glob.comps.iter().position(Comp::wild) {
        if i < last && matches!(glob.comps[i], Comp::Seg(_)) {
            return rel.split('/').take(i + 1).collect::<Vec<_>>().join("/");
        }
    }
    let dirs = glob.literal_dirs();
    if dirs.is_empty() {
        pattern.to_string()
    } else {
        dirs.join("/")
    }
}

fn check_template(t: &str, wildcards: usize) -> Result<(), String> {
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err("unclosed {".into());
        };
        let inner = &rest[open + 1..open + close];
        match inner.parse::<usize>() {
            Ok(n) if n >= 1 && n <= wildcards => {}
            _ => {
                return Err(format!(
                    "{{{inner}}} is not a capture: use {{1}} to {{{wildcards}}} (one per wildcard of the pattern)"
                ))
            }
        }
        rest = &rest[open + close + 1..];
    }
    if t.trim().is_empty() {
        return Err("empty name".into());
    }
    Ok(())
}

fn expand(t: &str, caps: &[String]) -> String {
    let mut out = String::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map(|c| open + c).unwrap_or(rest.len() - 1);
        let n: usize = rest[open + 1..close].parse().unwrap_or(0);
        out.push_str(caps.get(n.wrapping_sub(1)).map(String::as_str).unwrap_or(""));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

fn parse_ranks(s: &str) -> Result<Vec<(u32, u32)>, String> {
    if s.eq_ignore_ascii_case("ALL") || s == "*" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let bad = || format!("RANKS={s}: expected ALL or a list such as 0,2-5");
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?),
            None => {
                let v = part.parse().map_err(|_| bad())?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(bad());
        }
        out.push((lo, hi));
    }
    Ok(out)
}

/// The patterns of a configuration: `PRELOAD=` entries, then `SCR_PRELOAD_PATTERNS`
/// (comma-separated, `!` marks an exclusion). Errors name the entry.
pub fn from_config(entries: &[&Entry], env: Option<(&str, &str)>) -> Result<Vec<PatternSpec>, ConfigError> {
    let mut specs = Vec::new();
    for e in entries {
        let at = format!("{} (PRELOAD={})", e.origin, e.value);
        let err = |msg: String| ConfigError { at: at.clone(), msg };
        let kind = match e.attr("TYPE") {
            None => Kind::Checkpoint,
            Some(t) => {
                Kind::parse(t).ok_or_else(|| err(format!("TYPE={t}: expected CHECKPOINT, OUTPUT, BOTH or EXCLUDE")))?
            }
        };
        let ranks = match e.attr("RANKS") {
            None => Vec::new(),
            Some(r) => parse_ranks(r).map_err(err)?,
        };
        specs.push(PatternSpec { pattern: e.value.clone(), kind, name: e.attr("NAME").map(str::to_string), ranks, at });
    }
    if let Some((origin, list)) = env {
        specs.extend(list_specs("SCR_PRELOAD_PATTERNS", origin, list));
    }
    PatternSet::compile(&specs)?;
    Ok(specs)
}

/// A comma-separated pattern list given as `key` (`!` marks an exclusion), as specs named
/// by key and entry.
fn list_specs(key: &str, origin: &str, list: &str) -> Vec<PatternSpec> {
    let mut specs = Vec::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (kind, pattern) = match p.strip_prefix('!') {
            Some(x) => (Kind::Exclude, x),
            None => (Kind::Checkpoint, p),
        };
        specs.push(PatternSpec {
            pattern: pattern.to_string(),
            kind,
            name: None,
            ranks: Vec::new(),
            at: format!("{origin} ({key} entry {p})"),
        });
    }
    specs
}

/// `SCR_PRELOAD_SHARED`: the files several ranks write (N-to-1 with `pwrite`), in the syntax
/// of `SCR_PRELOAD_PATTERNS`. Errors name the key and the entry.
pub fn shared_from_config(setting: Option<(&str, &str)>) -> Result<Vec<PatternSpec>, ConfigError> {
    let specs = setting.map_or(Vec::new(), |(origin, list)| list_specs("SCR_PRELOAD_SHARED", origin, list));
    PatternSet::compile(&specs)?;
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: &str, kind: Kind, name: Option<&str>, ranks: &[(u32, u32)]) -> PatternSpec {
        PatternSpec { pattern: p.into(), kind, name: name.map(Into::into), ranks: ranks.to_vec(), at: "test".into() }
    }

    #[test]
    fn globs_match_component_by_component() {
        let g = Glob::parse("ckpt.*/rank_[0-9]*.dat").unwrap();
        assert_eq!(g.matches("ckpt.100/rank_3.dat"), Some(vec!["100".into(), "3".into(), "".into()]));
        assert!(g.matches("ckpt.100/sub/rank_3.dat").is_none());
        assert!(g.matches("ckpt.100/rank_x.dat").is_none());
        let g = Glob::parse("out/**/*.h5").unwrap();
        assert!(g.matches("out/a.h5").is_some());
        assert!(g.matches("out/x/y/a.h5").is_some());
        assert!(g.matches("other/a.h5").is_none());
        let g = Glob::parse("ckpt.*/**").unwrap();
        assert!(g.matches("ckpt.1/a/b").is_some());
        assert!(g.matches("ckptX/a").is_none());
        let g = Glob::parse("f[!a-c]?").unwrap();
        assert!(g.matches("fdx").is_some());
        assert!(g.matches("fbx").is_none());
    }

    #[test]
    fn malformed_patterns_are_refused_with_a_reason() {
        for (p, why) in [
            ("", "empty"),
            ("/abs/*", "relative"),
            ("a//b", "empty path component"),
            ("a/../b", "not allowed"),
            ("a**", "whole path component"),
            ("ckpt[0-9", "unclosed"),
            (".scr/x", "reserved"),
        ] {
            let e = Glob::parse(p).unwrap_err();
            assert!(e.contains(why), "{p}: {e}");
        }
        let e = PatternSet::compile(&[spec("c.*/*", Kind::Checkpoint, Some("c{3}"), &[])]).err().unwrap();
        assert!(e.to_string().contains("{3}") && e.at == "test", "{e}");
    }

    #[test]
    fn routes_name_datasets_and_honour_ranks_and_exclusions() {
        let set = PatternSet::compile(&[
            spec("ckpt.*/**", Kind::Checkpoint, None, &[]),
            spec("ckpt.*/shared.h5", Kind::Exclude, None, &[]),
            spec("viz_*_*.vtk", Kind::Output, Some("viz.{1}"), &[(0, 0)]),
            spec("restart_*.dat", Kind::Both, None, &[]),
            spec("run/state/*.bin", Kind::Checkpoint, None, &[]),
        ])
        .unwrap();
        let r = set.route("ckpt.100/rank_3.dat", 3).unwrap();
        assert_eq!((r.name.as_str(), r.flags), ("ckpt.100", FLAG_CHECKPOINT));
        assert_eq!(set.route("ckpt.100/shared.h5", 0), None);
        assert_eq!(set.route("viz_7_0.vtk", 0).unwrap().name, "viz.7");
        assert_eq!(set.route("viz_7_0.vtk", 1), None);
        let r = set.route("restart_2.dat", 2).unwrap();
        assert_eq!((r.name.as_str(), r.flags), ("restart_*.dat", FLAG_CHECKPOINT | FLAG_OUTPUT));
        assert_eq!(set.route("run/state/a.bin", 0).unwrap().name, "run/state");
        assert_eq!(set.route("latest", 0), None);
        for (rel, rank) in [("ckpt.100/rank_3.dat", 3), ("ckpt.100/shared.h5", 0), ("viz_7_0.vtk", 1), ("latest", 0)] {
            assert_eq!(set.takes(rel, rank), set.route(rel, rank).is_some(), "{rel}");
        }
    }

    #[test]
    fn config_entries_and_environment_form() {
        let mut w = Vec::new();
        let layer = crate::config::parse_file_text(
            "PRELOAD=ckpt.*/* TYPE=BOTH RANKS=0-1,3\nPRELOAD=bad/* TYPE=SOMETIMES\n",
            std::path::Path::new("/p/.scrconf"),
            true,
            &mut w,
        )
        .unwrap();
        let r = crate::config::resolve_layers(vec![layer], vec![]);
        let entries = r.entries("PRELOAD");
        let e = from_config(&entries, None).unwrap_err();
        assert!(e.at.contains("/p/.scrconf:2") && e.msg.contains("SOMETIMES"), "{e}");
        let good: Vec<_> = entries.iter().copied().filter(|e| e.value.starts_with("ckpt")).collect();
        let ok = from_config(&good, Some(("environment", "ckpt_*.dat, !ckpt_tmp.dat"))).unwrap();
        assert_eq!(ok.len(), 3);
        assert_eq!(ok[0].ranks, vec![(0, 1), (3, 3)]);
        assert_eq!(ok[2].kind, Kind::Exclude);
        let e = from_config(&[], Some(("environment", "a/**b"))).unwrap_err();
        assert!(e.at.contains("SCR_PRELOAD_PATTERNS"), "{e}");
        let e = shared_from_config(Some(("env", "ckpt.*/shared.dat, ckpt.[/x"))).unwrap_err();
        assert!(e.at.contains("SCR_PRELOAD_SHARED entry ckpt.[/x"), "{e}");
        let shared =
            PatternSet::compile(&shared_from_config(Some(("env", "ckpt.*/*.h5,!ckpt.*/x.h5"))).unwrap()).unwrap();
        assert!(shared.takes("ckpt.3/all.h5", 2) && !shared.takes("ckpt.3/x.h5", 2) && !shared.takes("a.h5", 0));
        assert!(shared_from_config(None).unwrap().is_empty());
    }

    #[test]
    fn the_documented_example_parses_and_routes() {
        let mut w = Vec::new();
        let text = include_str!("../../config/preload.conf.example");
        let layer = crate::config::parse_file_text(text, std::path::Path::new("preload.conf"), true, &mut w).unwrap();
        assert!(w.is_empty(), "{w:?}");
        let r = crate::config::resolve_layers(vec![layer], vec![]);
        let set = PatternSet::compile(&from_config(&r.entries("PRELOAD"), None).unwrap()).unwrap();
        assert_eq!(set.route("ckpt.100/rank_3.dat", 3).unwrap().name, "ckpt.100");
        assert_eq!(set.route("ckpt.100.tmp/rank_3.dat", 3).unwrap().name, "ckpt.100.tmp");
        assert_eq!(set.route("ckpt.100/notes.txt", 0), None);
        assert_eq!(set.route("restart_7_2.bin", 2).unwrap().name, "restart.7");
        let viz = set.route("viz/frame_9.vtk", 0).unwrap();
        assert_eq!((viz.name.as_str(), viz.flags), ("frame.9", FLAG_OUTPUT));
        assert_eq!(set.route("viz/frame_9.vtk", 1), None);
    }
}
