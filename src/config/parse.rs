//! The configuration file syntax, shared by config files and `SCR_Config` strings:
//!
//! ```text
//! # comment (to the end of the line, outside quotes)
//! SCR_FLUSH=10                        simple parameter
//! SCR_CACHE_BYPASS=0 SCR_FLUSH=1      several simple parameters on one line
//! SCR_CACHE_BASE=/dev/shm/$SLURM_JOBID   $VAR and ${VAR} interpolate the environment
//! STORE=/ssd GROUP=NODE COUNT=2       multi-item entry: STORE, CKPT or GROUPS first
//! SCR_PREFIX="/dir/with spaces/="     quotes keep spaces, # and = in a value
//! STORE = /ssd   GROUP = NODE         blanks around = and between items, as SCR accepts
//! ```
//!
//! A key this implementation does not know is reported (the caller prints the warning) and
//! dropped: it is never stored, so nothing can read it back later.

use std::collections::BTreeMap;

use super::{params, SyntaxError};

/// One `KEY=VALUE` token (value `None` for a bare `KEY`, as in a query).
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub key: String,
    pub value: Option<String>,
}

/// A parsed line: simple settings or one multi-item entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Simple(Vec<(String, String)>),
    Multi { key: String, value: String, attrs: BTreeMap<String, String> },
}

/// Split a line into tokens: `KEY=VALUE` (any whitespace around `=`, as SCR accepts), or a
/// bare `KEY` (a query). Quotes keep spaces, `#` and `=` in a value; `#` outside quotes
/// starts a comment.
pub fn tokenize(line: &str) -> Result<Vec<Token>, SyntaxError> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    let skip_blanks = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_blanks(&mut chars);
        match chars.peek() {
            None | Some('#') => break,
            _ => {}
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=' && *c != '#') {
            key.push(c);
        }
        // `KEY = VALUE`: the `=` may follow after blanks; otherwise the key stands alone.
        let mut rest = chars.clone();
        skip_blanks(&mut rest);
        if rest.peek() != Some(&'=') {
            tokens.push(Token { key, value: None });
            continue;
        }
        rest.next();
        chars = rest;
        skip_blanks(&mut chars);
        let mut value = String::new();
        let mut quote: Option<char> = None;
        while let Some(&c) = chars.peek() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => value.push(c),
                None if c.is_whitespace() || c == '#' => break,
                None if c == '"' || c == '\'' => quote = Some(c),
                None => value.push(c),
            }
            chars.next();
        }
        if let Some(q) = quote {
            return Err(SyntaxError::UnterminatedQuote { quote: q });
        }
        tokens.push(Token { key, value: Some(value) });
    }
    for t in &tokens {
        let valid = !t.key.is_empty()
            && t.key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !t.key.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(SyntaxError::BadName { key: t.key.clone() });
        }
    }
    Ok(tokens)
}

/// Replace `$VAR` and `${VAR}` with the environment's value (`\$` is a literal `$`). An unset
/// variable expands to nothing, as in a shell, with a warning naming it (the user guide's own
/// `SCR_CNTL_BASE=/dev/shm/$SLURM_JOBID` must not break every run outside Slurm).
pub fn interpolate(
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<String, SyntaxError> {
    let mut out = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'$') => {
                out.push('$');
                chars.next();
            }
            '$' => {
                let braced = chars.peek() == Some(&'{');
                if braced {
                    chars.next();
                }
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                if braced && chars.next() != Some('}') {
                    return Err(SyntaxError::UnterminatedVar { name });
                }
                if name.is_empty() {
                    out.push('$');
                    continue;
                }
                match env(&name) {
                    Some(v) => out.push_str(&v),
                    None => warnings.push(format!("environment variable ${name} is not set: it expands to nothing")),
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Parse one line of a config file. `Ok(None)` for blank and comment lines; warnings (unknown
/// keys and sub-keys, which are dropped) are appended to `warnings`.
pub fn parse_line(
    line: &str,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<Option<Line>, SyntaxError> {
    let tokens = tokenize(line)?;
    if tokens.is_empty() {
        return Ok(None);
    }
    parse_tokens(tokens, env, warnings).map(Some)
}

/// Interpret the tokens of one line (a config-file line or an `SCR_Config` string that sets
/// something): simple settings, or one multi-item entry led by `STORE`, `CKPT`, `GROUPS` or
/// `PRELOAD`. Unknown keys warn and are left out of the result.
pub fn parse_tokens(
    tokens: Vec<Token>,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<Line, SyntaxError> {
    let mut pairs = Vec::with_capacity(tokens.len());
    for t in tokens {
        let Some(v) = t.value else {
            return Err(SyntaxError::NoValue { key: t.key });
        };
        let mut unset = Vec::new();
        let expanded = interpolate(&v, env, &mut unset)
            .map_err(|e| SyntaxError::InValue { key: t.key.clone(), source: Box::new(e) })?;
        if expanded.is_empty() && !unset.is_empty() {
            return Err(SyntaxError::ExpandsEmpty { key: t.key, value: v, unset: unset.join("; ") });
        }
        warnings.extend(unset.into_iter().map(|w| format!("{}={v}: {w}, so {}={expanded}", t.key, t.key)));
        pairs.push((t.key, expanded));
    }
    let (first, first_val) = pairs[0].clone();
    if let Some(subkeys) = params::multi(&first) {
        if first_val.is_empty() {
            return Err(SyntaxError::EntryWithoutValue { key: first });
        }
        let mut attrs = BTreeMap::new();
        for (k, v) in pairs.into_iter().skip(1) {
            if let Some(allowed) = subkeys {
                if !allowed.contains(&k.as_str()) {
                    warnings.push(format!("unknown key {k} in {first} entry (ignored; known: {})", allowed.join(", ")));
                    continue;
                }
            }
            attrs.insert(k, v);
        }
        return Ok(Line::Multi { key: first, value: first_val, attrs });
    }
    let mut known = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if params::multi(&k).is_some() {
            return Err(SyntaxError::EntryNotFirst { key: k });
        }
        if v.is_empty() {
            return Err(SyntaxError::EmptyValue { key: k });
        }
        if check_simple(&k, &v, warnings)? {
            known.push((k, v));
        }
    }
    Ok(Line::Simple(known))
}

/// Check a simple parameter's name and value: `Ok(true)` for a known name with a good value,
/// `Ok(false)` for an unknown name (with a warning: the caller drops it), an error for a bad
/// value.
pub fn check_simple(key: &str, value: &str, warnings: &mut Vec<String>) -> Result<bool, SyntaxError> {
    match params::find(key) {
        Some(p) => params::check(p.kind, value).map(|()| true).map_err(|expected| SyntaxError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        }),
        None => {
            warnings.push(format!("unknown parameter {key} (ignored)"));
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "JOB" => Some("42".into()),
            _ => None,
        }
    }

    fn parse(line: &str) -> Result<Option<Line>, SyntaxError> {
        parse_line(line, &env, &mut Vec::new())
    }

    #[test]
    fn simple_comment_and_blank() {
        assert_eq!(parse("  # only a comment").unwrap(), None);
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse("SCR_FLUSH=20 # every 20").unwrap(),
            Some(Line::Simple(vec![("SCR_FLUSH".into(), "20".into())]))
        );
    }

    #[test]
    fn multi_item_entries() {
        let l = parse("CKPT=0 INTERVAL=1 TYPE=XOR SET_SIZE=16").unwrap().unwrap();
        match l {
            Line::Multi { key, value, attrs } => {
                assert_eq!((key.as_str(), value.as_str()), ("CKPT", "0"));
                assert_eq!(attrs["TYPE"], "XOR");
                assert_eq!(attrs.len(), 3);
            }
            _ => panic!(),
        }
    }

    #[test]
    fn quotes_and_equals_in_values() {
        let l = parse(r#"SCR_PREFIX="/my/dir/with/=/sign # not a comment""#).unwrap().unwrap();
        assert_eq!(l, Line::Simple(vec![("SCR_PREFIX".into(), "/my/dir/with/=/sign # not a comment".into())]));
        assert!(parse(r#"SCR_PREFIX="/open"#).is_err());
    }

    #[test]
    fn interpolation() {
        let l = parse("SCR_CACHE_BASE=/dev/shm/$JOB/${JOB}x\\$HOME").unwrap().unwrap();
        assert_eq!(l, Line::Simple(vec![("SCR_CACHE_BASE".into(), "/dev/shm/42/42x$HOME".into())]));
        let mut w = Vec::new();
        let l = parse_line("SCR_CACHE_BASE=/dev/shm/$NOPE", &env, &mut w).unwrap().unwrap();
        assert_eq!(l, Line::Simple(vec![("SCR_CACHE_BASE".into(), "/dev/shm/".into())]));
        assert_eq!(
            w,
            vec![
                "SCR_CACHE_BASE=/dev/shm/$NOPE: environment variable $NOPE is not set: it expands to nothing, so \
                  SCR_CACHE_BASE=/dev/shm/"
            ]
        );
        let e = parse("SCR_CACHE_BASE=$NOPE").unwrap_err().to_string();
        assert!(e.contains("SCR_CACHE_BASE=$NOPE is empty") && e.contains("$NOPE is not set"), "{e}");
    }

    #[test]
    fn a_bad_value_names_its_key_value_and_kind_and_is_placed_by_the_caller() {
        let e = parse("SCR_FLUSH=ten").unwrap_err();
        assert_eq!(
            e,
            SyntaxError::BadValue {
                key: "SCR_FLUSH".into(),
                value: "ten".into(),
                expected: params::Expected(params::Kind::Count)
            }
        );
        let placed = e.at("/etc/scr.conf:3");
        assert_eq!(placed.at, "/etc/scr.conf:3");
        assert_eq!(
            placed.to_string(),
            "configuration error at /etc/scr.conf:3: SCR_FLUSH=ten: expected a non-negative integer"
        );
        assert_eq!(parse("SCR_FLUSH").unwrap_err(), SyntaxError::NoValue { key: "SCR_FLUSH".into() });
    }

    #[test]
    fn malformed_lines() {
        assert!(parse("SCR_FLUSH").unwrap_err().to_string().contains("no value"));
        assert!(parse("SCR_FLUSH=ten").unwrap_err().to_string().contains("non-negative integer"));
        assert!(parse("=5").is_err());
        assert!(parse("SCR_FLUSH=1 STORE=/x").is_err());
        assert!(parse("SCR-FLUSH=1").is_err());
    }

    #[test]
    fn unknown_keys_warn_and_are_dropped() {
        let mut w = Vec::new();
        let l = parse_line("SCR_FLUSHH=1 SCR_FLUSH=2", &env, &mut w).unwrap().unwrap();
        assert_eq!(l, Line::Simple(vec![("SCR_FLUSH".into(), "2".into())]));
        let l = parse_line("STORE=/ssd COUNTT=2 COUNT=1", &env, &mut w).unwrap().unwrap();
        let Line::Multi { attrs, .. } = l else { panic!("{l:?}") };
        assert_eq!(attrs.keys().collect::<Vec<_>>(), vec!["COUNT"]);
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("SCR_FLUSHH") && w[1].contains("COUNTT") && w[1].contains("ignored"), "{w:?}");
    }

    #[test]
    fn blanks_around_equals_and_between_items() {
        let simple = |k: &str, v: &str| Some(Line::Simple(vec![(k.into(), v.into())]));
        for line in ["SCR_DEBUG=1", "SCR_DEBUG =1", "SCR_DEBUG= 1", "SCR_DEBUG  =  1", "\tSCR_DEBUG\t=\t1\t# c"] {
            assert_eq!(parse(line).unwrap(), simple("SCR_DEBUG", "1"), "{line:?}");
        }
        assert_eq!(parse("SCR_COPY_TYPE = PARTNER").unwrap(), simple("SCR_COPY_TYPE", "PARTNER"));
        assert_eq!(parse(r#"SCR_PREFIX = "/a b/=c""#).unwrap(), simple("SCR_PREFIX", "/a b/=c"));
        let l = parse("STORE= /dev/shm/foo   GROUP = NODE COUNT  =1").unwrap().unwrap();
        let Line::Multi { key, value, attrs } = l else { panic!() };
        assert_eq!((key.as_str(), value.as_str()), ("STORE", "/dev/shm/foo"));
        assert_eq!((attrs["GROUP"].as_str(), attrs["COUNT"].as_str()), ("NODE", "1"));
        let t = tokenize("CKPT = 0  TYPE").unwrap();
        assert_eq!(t[0], Token { key: "CKPT".into(), value: Some("0".into()) });
        assert_eq!(t[1], Token { key: "TYPE".into(), value: None });
        assert_eq!(tokenize("STORE =").unwrap(), vec![Token { key: "STORE".into(), value: Some(String::new()) }]);
        assert!(parse("SCR_DEBUG = 1 = 2").unwrap_err().to_string().contains("not a valid parameter name"));
    }
}
