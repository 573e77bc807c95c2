//! Checkpoint patterns of transparent mode: which paths under the prefix the preload routes
//! to cache, what kind of dataset they form, how the dataset is named and which ranks a
//! pattern applies to.
//!
//! A pattern is a glob relative to the prefix, matched component by component: `*` (any
//! characters but `/`), `?` (one character), `[a-z0-9]` / `[!...]` (a class), and `**` as a
//! whole component (zero or more components). Each run of adjacent wildcards in a component
//! captures what it matched (`[0-9]*` captures `1000` whole; `**` is a run of its own); a
//! `NAME` template refers to captures as `{1}`, `{2}`, ... The default name is the path up
//! to the last directory component with a wildcard before any `**` (`ckpt.*/**` names the
//! dataset of `ckpt.100/rank_3.dat` "ckpt.100", `processor*/[0-9]*/**` that of
//! `processor3/0.3/p` "processor3/0.3"), for flat files (no such directory, no `**`) the
//! whole path (`restart.*.*`: "restart.100.3"), else the literal directory part or the
//! pattern text. The captures of a default name stay [`Piece`]s: at the sync point the ranks
//! give the ones that differ between them their glob text ("processor*/0.3",
//! "restart.100.*"; `crate::transparent::naming`).
//!
//! Exclusions (`TYPE=EXCLUDE`, or `!pattern` in `SCR_PRELOAD_PATTERNS`) win over inclusions;
//! among inclusions the first that matches wins (config entries in lexical order of their
//! patterns, then environment entries in the order written).

use serde::{Deserialize, Serialize};

use super::{ConfigError, Entry, SyntaxError};
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
    /// The dataset's name as this path alone gives it (see [`Route::named`]).
    pub name: String,
    /// Which pattern took the path (an index for [`PatternSet::describe`]).
    pub pattern: usize,
    /// The default name in pieces (no `NAME=` template): the captures in it, which the ranks
    /// keep or generalise together at the sync point ([`Route::named`]).
    pub pieces: Option<Vec<Piece>>,
}

/// A piece of a default dataset name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Lit(String),
    /// What wildcard run `run` of the pattern matched; `glob`: the run's text.
    Var {
        run: usize,
        value: String,
        glob: String,
    },
}

impl Route {
    /// The dataset's name when the captures for which `varies(pattern, run)` holds (they
    /// differ between the ranks' files at this sync point: a rank's part) keep their glob text.
    pub fn named(&self, varies: impl Fn(usize, usize) -> bool) -> String {
        let Some(pieces) = &self.pieces else { return self.name.clone() };
        pieces
            .iter()
            .map(|p| match p {
                Piece::Lit(s) => s.as_str(),
                Piece::Var { run, glob, .. } if varies(self.pattern, *run) => glob.as_str(),
                Piece::Var { value, .. } => value.as_str(),
            })
            .collect()
    }

    /// The captures in the default name: (run, value).
    pub fn captures(&self) -> impl Iterator<Item = (usize, &str)> {
        self.pieces.iter().flatten().filter_map(|p| match p {
            Piece::Var { run, value, .. } => Some((*run, value.as_str())),
            Piece::Lit(_) => None,
        })
    }
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

/// A compiled glob. Adjacent wildcards within a component form one *run* and capture
/// together (`[0-9]*` captures `1000` whole); `**` is a run of its own.
#[derive(Debug, Clone)]
pub struct Glob {
    comps: Vec<Comp>,
    /// Number of runs (the captures `{1}`..`{N}`).
    wildcards: usize,
    /// For each wildcard token, in matching order: its run.
    token_run: Vec<usize>,
    /// Each run's text, as written.
    run_text: Vec<String>,
}

impl Glob {
    pub fn parse(s: &str) -> Result<Glob, SyntaxError> {
        if s.is_empty() {
            return Err(SyntaxError::EmptyPattern);
        }
        let bad = |why: String| SyntaxError::Pattern { pattern: s.to_string(), why };
        if s.starts_with('/') {
            return Err(bad("patterns are relative to the prefix directory (remove the leading /)".into()));
        }
        let mut comps = Vec::new();
        let mut token_run = Vec::new();
        let mut run_text: Vec<String> = Vec::new();
        for part in s.split('/') {
            match part {
                "" => return Err(bad("empty path component (a doubled or trailing /)".into())),
                "." | ".." => return Err(bad(format!("'{part}' is not allowed in a pattern"))),
                "**" => {
                    token_run.push(run_text.len());
                    run_text.push("**".into());
                    comps.push(Comp::Any);
                    continue;
                }
                _ => {}
            }
            if part.contains("**") {
                return Err(bad("** must be a whole path component (as in ckpt/**)".into()));
            }
            let mut toks = Vec::new();
            let mut chars = part.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '*' => toks.push(Tok::Star),
                    '?' => toks.push(Tok::Quest),
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
                                    Some(hi) => return Err(bad(format!("bad range {c}-{hi} in [...]"))),
                                    None => break,
                                }
                            } else {
                                ranges.push((c, c));
                            }
                        }
                        if !closed {
                            return Err(bad(format!("unclosed [ in '{part}'")));
                        }
                        toks.push(Tok::Class { neg, ranges });
                    }
                    '\\' => match chars.next() {
                        Some(e) => toks.push(Tok::Lit(e)),
                        None => return Err(bad("trailing \\".into())),
                    },
                    c => toks.push(Tok::Lit(c)),
                }
            }
            let mut prev_wild = false;
            for t in &toks {
                let wild = !matches!(t, Tok::Lit(_));
                if wild && !prev_wild {
                    run_text.push(String::new());
                }
                if wild {
                    token_run.push(run_text.len() - 1);
                    run_text.last_mut().expect("a run").push_str(&tok_text(t));
                }
                prev_wild = wild;
            }
            comps.push(Comp::Seg(toks));
        }
        if let Some(Comp::Seg(t)) = comps.first() {
            if t == &crate::paths::SCR_DIR.chars().map(Tok::Lit).collect::<Vec<_>>() {
                return Err(bad(format!("the prefix's {} directory is reserved for SCR", crate::paths::SCR_DIR)));
            }
        }
        Ok(Glob { comps, wildcards: run_text.len(), token_run, run_text })
    }

    /// Match a prefix-relative path; the captures of every wildcard run, in order.
    pub fn matches(&self, rel: &str) -> Option<Vec<String>> {
        let parts: Vec<&str> = rel.split('/').collect();
        let mut caps = Vec::new();
        if !match_comps(&self.comps, &parts, &mut caps) {
            return None;
        }
        let mut runs = vec![String::new(); self.wildcards];
        for (i, c) in caps.into_iter().enumerate() {
            runs[self.token_run[i]].push_str(&c);
        }
        Some(runs)
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

/// A wildcard token as written.
fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Lit(c) => c.to_string(),
        Tok::Star => "*".into(),
        Tok::Quest => "?".into(),
        Tok::Class { neg, ranges } => {
            let mut out = String::from(if *neg { "[!" } else { "[" });
            for &(lo, hi) in ranges {
                out.push(lo);
                if hi != lo {
                    out.push('-');
                    out.push(hi);
                }
            }
            out.push(']');
            out
        }
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
            let glob = Glob::parse(&s.pattern).map_err(|e| e.at(s.at.clone()))?;
            if let Some(t) = &s.name {
                check_template(t, glob.wildcards).map_err(|e| e.at(s.at.clone()))?;
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

    /// The pattern of a [`Route::pattern`], and where it was configured.
    pub fn describe(&self, pattern: usize) -> (&str, &str) {
        self.specs.get(pattern).map_or(("?", "?"), |c| (c.spec.pattern.as_str(), c.spec.at.as_str()))
    }

    /// Whether the pattern names its datasets by a `NAME=` template.
    pub fn has_template(&self, pattern: usize) -> bool {
        self.specs.get(pattern).is_some_and(|c| c.spec.name.is_some())
    }

    /// Route a prefix-relative path written by `rank`: `None` if no pattern takes it.
    pub fn route(&self, rel: &str, rank: u32) -> Option<Route> {
        for (i, c) in self.specs.iter().enumerate() {
            let s = &c.spec;
            if !s.ranks.is_empty() && !s.ranks.iter().any(|&(lo, hi)| lo <= rank && rank <= hi) {
                continue;
            }
            let Some(caps) = c.glob.matches(rel) else { continue };
            if s.kind == Kind::Exclude {
                return None;
            }
            let (name, pieces) = match &s.name {
                Some(t) => (expand(t, &caps), None),
                None => {
                    let pieces = default_name(&c.glob, &s.pattern, rel, &caps);
                    let name = pieces
                        .iter()
                        .map(|p| match p {
                            Piece::Lit(s) => s.as_str(),
                            Piece::Var { value, .. } => value.as_str(),
                        })
                        .collect();
                    (name, Some(pieces))
                }
            };
            return Some(Route { flags: s.kind.flags(), name, pattern: i, pieces });
        }
        None
    }
}

/// The default name of the dataset of `rel` (matched by `glob`, captures `caps`): the
/// directories up to the last one with a wildcard before any `**` (`ckpt.100` for
/// `ckpt.*/**`, `processor0/0.3` for `processor*/[0-9]*/**`); for flat files (no directory
/// with a wildcard, no `**`) the whole path (`restart.100.3` for `restart.*.*`); otherwise
/// the literal directories, or the pattern text. Wildcard runs stay pieces of their own.
fn default_name(glob: &Glob, pattern: &str, rel: &str, caps: &[String]) -> Vec<Piece> {
    let last = glob.comps.len() - 1;
    let dirs = glob.comps[..last].iter().take_while(|c| matches!(c, Comp::Seg(_))).count();
    let upto = if let Some(w) = glob.comps[..dirs].iter().rposition(Comp::wild) {
        Some(w + 1)
    } else if dirs == last && matches!(glob.comps[last], Comp::Seg(_)) && glob.comps[last].wild() {
        Some(last + 1)
    } else {
        None
    };
    let Some(upto) = upto else {
        let dirs = glob.literal_dirs();
        return vec![Piece::Lit(if dirs.is_empty() { pattern.to_string() } else { dirs.join("/") })];
    };
    // the runs before component `upto` are the only wildcards there (no ** before it)
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut run = 0;
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, c) in glob.comps[..upto].iter().enumerate() {
        if i > 0 {
            lit.push('/');
        }
        let Comp::Seg(toks) = c else { unreachable!("no ** before the name's end") };
        if !c.wild() {
            lit.push_str(parts[i]);
            continue;
        }
        let mut prev_wild = false;
        for t in toks {
            match t {
                Tok::Lit(ch) => {
                    lit.push(*ch);
                    prev_wild = false;
                }
                _ if prev_wild => {}
                _ => {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    let value = caps.get(run).cloned().unwrap_or_default();
                    pieces.push(Piece::Var { run, value, glob: glob.run_text[run].clone() });
                    run += 1;
                    prev_wild = true;
                }
            }
        }
    }
    pieces.push(Piece::Lit(lit));
    pieces.retain(|p| !matches!(p, Piece::Lit(s) if s.is_empty()));
    pieces
}

fn check_template(t: &str, wildcards: usize) -> Result<(), SyntaxError> {
    let bad = |why: String| SyntaxError::Template { template: t.to_string(), why };
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(bad("unclosed {".into()));
        };
        let inner = &rest[open + 1..open + close];
        match inner.parse::<usize>() {
            Ok(n) if n >= 1 && n <= wildcards => {}
            _ => {
                return Err(bad(format!(
                    "{{{inner}}} is not a capture: use {{1}} to {{{wildcards}}} (one per wildcard of the pattern)"
                )))
            }
        }
        rest = &rest[open + close + 1..];
    }
    if t.trim().is_empty() {
        return Err(bad("empty name".into()));
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

fn parse_ranks(s: &str) -> Result<Vec<(u32, u32)>, SyntaxError> {
    if s.eq_ignore_ascii_case("ALL") || s == "*" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let bad = || SyntaxError::Ranks { ranks: s.to_string() };
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
/// (comma-separated, `!` marks an exclusion, `NAME=`/`TYPE=` may follow a glob after a
/// blank). Errors name the entry.
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
            Some(r) => parse_ranks(r).map_err(|e| e.at(at.clone()))?,
        };
        specs.push(PatternSpec { pattern: e.value.clone(), kind, name: e.attr("NAME").map(str::to_string), ranks, at });
    }
    if let Some((origin, list)) = env {
        specs.extend(list_specs("SCR_PRELOAD_PATTERNS", origin, list, true)?);
    }
    PatternSet::compile(&specs)?;
    Ok(specs)
}

/// A comma-separated pattern list given as `key` (`!` marks an exclusion), as specs named
/// by key and entry. With `attributes`, an entry may carry `NAME=<template>` and
/// `TYPE=<kind>` after its glob, separated by blanks (`processor*/[0-9]*/** NAME=time.{2}`).
fn list_specs(key: &str, origin: &str, list: &str, attributes: bool) -> Result<Vec<PatternSpec>, ConfigError> {
    let mut specs = Vec::new();
    // ("environment (SCR_PRELOAD_PATTERNS)" names the key already)
    let origin = origin.strip_suffix(&format!(" ({key})")).unwrap_or(origin);
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let at = format!("{origin} ({key} entry {p})");
        let err = |msg: String| ConfigError { at: at.clone(), msg };
        let mut words = p.split_whitespace();
        let glob = words.next().unwrap_or_default();
        let (mut kind, pattern) = match glob.strip_prefix('!') {
            Some(x) => (Kind::Exclude, x),
            None => (Kind::Checkpoint, glob),
        };
        let mut name = None;
        for w in words {
            let (k, v) = w.split_once('=').unwrap_or((w, ""));
            match k.to_ascii_uppercase().as_str() {
                _ if !attributes => {
                    return Err(err(format!("'{w}': {key} takes globs only (a blank is not allowed in an entry)")))
                }
                "NAME" if !v.is_empty() => name = Some(v.to_string()),
                "TYPE" if kind != Kind::Exclude => {
                    kind = Kind::parse(v)
                        .ok_or_else(|| err(format!("TYPE={v}: expected CHECKPOINT, OUTPUT, BOTH or EXCLUDE")))?
                }
                _ => {
                    return Err(err(format!(
                        "'{w}': expected NAME=<template> or TYPE=<kind> after the glob (RANKS= only in a config file)"
                    )))
                }
            }
        }
        specs.push(PatternSpec { pattern: pattern.to_string(), kind, name, ranks: Vec::new(), at });
    }
    Ok(specs)
}

/// `SCR_PRELOAD_SHARED`: the files several ranks write (N-to-1 with `pwrite`), in the syntax
/// of `SCR_PRELOAD_PATTERNS` (globs only). Errors name the key and the entry.
pub fn shared_from_config(setting: Option<(&str, &str)>) -> Result<Vec<PatternSpec>, ConfigError> {
    let specs = match setting {
        Some((origin, list)) => list_specs("SCR_PRELOAD_SHARED", origin, list, false)?,
        None => Vec::new(),
    };
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
        // adjacent wildcards capture together: [0-9]* is one capture of the whole number
        assert_eq!(g.matches("ckpt.100/rank_3.dat"), Some(vec!["100".into(), "3".into()]));
        let g = Glob::parse("restart.[0-9]*.*").unwrap();
        assert_eq!(g.matches("restart.1000.3"), Some(vec!["1000".into(), "3".into()]));
        assert_eq!(g.run_text, ["[0-9]*", "*"]);
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
            assert!(e.to_string().contains(why), "{p}: {e}");
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
        // flat files: the whole name, its captures generalised when they differ between ranks
        let r = set.route("restart_2.dat", 2).unwrap();
        assert_eq!((r.name.as_str(), r.flags), ("restart_2.dat", FLAG_CHECKPOINT | FLAG_OUTPUT));
        assert_eq!(r.named(|_, _| true), "restart_*.dat");
        assert_eq!(set.route("run/state/a.bin", 0).unwrap().name, "run/state/a.bin");
        assert_eq!(set.route("run/state/a.bin", 0).unwrap().named(|p, run| (p, run) == (4, 0)), "run/state/*.bin");
        assert_eq!(set.route("latest", 0), None);
        for (rel, rank) in [("ckpt.100/rank_3.dat", 3), ("ckpt.100/shared.h5", 0), ("viz_7_0.vtk", 1), ("latest", 0)] {
            assert_eq!(set.takes(rel, rank), set.route(rel, rank).is_some(), "{rel}");
        }
    }

    #[test]
    fn default_names_keep_the_step_and_generalise_the_rank() {
        let set = PatternSet::compile(&[
            spec("processor*/[0-9]*/**", Kind::Checkpoint, None, &[]),
            spec("restart.*.*", Kind::Checkpoint, None, &[]),
            spec("out/ckpt.*/rank_*.dat", Kind::Checkpoint, None, &[]),
            spec("state/latest", Kind::Checkpoint, None, &[]),
        ])
        .unwrap();
        let r = set.route("processor3/0.3/p", 3).unwrap();
        assert_eq!(r.name, "processor3/0.3", "a rank alone");
        assert_eq!(r.captures().collect::<Vec<_>>(), [(0, "3"), (1, "0.3")]);
        assert_eq!(r.named(|p, run| (p, run) == (0, 0)), "processor*/0.3");
        let r = set.route("restart.1000.2", 2).unwrap();
        assert_eq!((r.pattern, r.named(|_, run| run == 1)), (1, "restart.1000.*".to_string()));
        let r = set.route("out/ckpt.7/rank_2.dat", 2).unwrap();
        assert_eq!(r.named(|_, _| true), "out/ckpt.*", "file-name wildcards never name a directory's dataset");
        assert_eq!(r.name, "out/ckpt.7");
        let r = set.route("state/latest", 0).unwrap();
        assert_eq!((r.name.as_str(), r.captures().count()), ("state", 0));
        let (glob, at) = set.describe(1);
        assert_eq!((glob, at), ("restart.*.*", "test"));
        // a trailing ** is no flat file name: its literal directories name the dataset
        // (Quantum ESPRESSO's outdir, `out/**`, panicked here)
        let set = PatternSet::compile(&[spec("out/**", Kind::Checkpoint, None, &[])]).unwrap();
        assert_eq!(set.route("out/si.save/wfc1.dat", 0).unwrap().name, "out");
        assert_eq!(set.route("out/si.wfc3", 3).unwrap().name, "out");
    }

    #[test]
    fn a_literal_directory_then_a_tree_names_the_directory() {
        // `out/**` (Quantum ESPRESSO's outdir), `final/**`: one dataset named by the directory
        let set = PatternSet::compile(&[spec("out/**", Kind::Checkpoint, None, &[])]).unwrap();
        for rel in ["out/si.save/charge-density.dat", "out/si.wfc1"] {
            let r = set.route(rel, 1).unwrap();
            assert_eq!((r.name.as_str(), r.named(|_, _| true)), ("out", "out".to_string()), "{rel}");
        }
    }

    #[test]
    fn the_environment_carries_names_and_types() {
        let specs =
            from_config(&[], Some(("environment", "processor*/[0-9]*/** NAME=time.{2}, restart.*.* TYPE=BOTH, !x/*")))
                .unwrap();
        assert_eq!(specs[0].name.as_deref(), Some("time.{2}"));
        assert_eq!((specs[1].kind, specs[1].name.as_deref()), (Kind::Both, None));
        assert_eq!(specs[2].kind, Kind::Exclude);
        let set = PatternSet::compile(&specs).unwrap();
        assert_eq!(set.route("processor1/0.3/p", 1).unwrap().name, "time.0.3");
        for (list, why) in [
            ("a.* NAEM=x", "expected NAME=<template> or TYPE=<kind>"),
            ("a.* TYPE=SOMETIMES", "TYPE=SOMETIMES"),
            ("a.* NAME=x.{2}", "{2} is not a capture"),
        ] {
            let e = from_config(&[], Some(("environment", list))).unwrap_err();
            assert!(e.at.contains(&format!("SCR_PRELOAD_PATTERNS entry {list}")) && e.to_string().contains(why), "{e}");
        }
        // an origin naming the key already (as the settings give it) names it once
        let e = from_config(&[], Some(("environment (SCR_PRELOAD_PATTERNS)", "a.* NAEM=x"))).unwrap_err();
        assert_eq!(e.at, "environment (SCR_PRELOAD_PATTERNS entry a.* NAEM=x)");
        let e = shared_from_config(Some(("env", "a.* NAME=x"))).unwrap_err();
        assert!(e.msg.contains("globs only"), "{e}");
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
