//! The configuration file syntax, shared by config files and `SCR_Config` strings:
//!
//! ```text
//! # comment (to the end of the line, outside quotes)
//! SCR_FLUSH=10                        simple parameter
//! SCR_CACHE_BYPASS=0 SCR_FLUSH=1      several simple parameters on one line
//! SCR_CACHE_BASE=/dev/shm/$SLURM_JOBID   $VAR and ${VAR} interpolate the environment
//! STORE=/ssd GROUP=NODE COUNT=2       multi-item entry: STORE, CKPT or GROUPS first
//! SCR_PREFIX="/dir/with spaces/="     quotes keep spaces, # and = in a value
//! ```

use std::collections::BTreeMap;

use super::params;

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

/// Split a line into tokens, honouring quotes and dropping a trailing comment.
pub fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut has_eq = false;
    let mut key = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    let finish = |cur: &mut String, key: &mut String, has_eq: &mut bool, any: &mut bool, tokens: &mut Vec<Token>| {
        if *any {
            if *has_eq {
                tokens.push(Token { key: std::mem::take(key), value: Some(std::mem::take(cur)) });
            } else {
                tokens.push(Token { key: std::mem::take(cur), value: None });
            }
        }
        *has_eq = false;
        *any = false;
    };
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None => match c {
                '#' => break,
                '"' | '\'' if has_eq => {
                    quote = Some(c);
                    any = true;
                }
                c if c.is_whitespace() => finish(&mut cur, &mut key, &mut has_eq, &mut any, &mut tokens),
                '=' if !has_eq => {
                    key = std::mem::take(&mut cur);
                    has_eq = true;
                    any = true;
                }
                c => {
                    cur.push(c);
                    any = true;
                }
            },
        }
    }
    if let Some(q) = quote {
        return Err(format!("unterminated {q} quote"));
    }
    finish(&mut cur, &mut key, &mut has_eq, &mut any, &mut tokens);
    for t in &tokens {
        let valid = !t.key.is_empty()
            && t.key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !t.key.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!("{:?} is not a valid parameter name", t.key));
        }
    }
    Ok(tokens)
}

/// Replace `$VAR` and `${VAR}` with the environment's value (`\$` is a literal `$`).
pub fn interpolate(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
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
                    return Err(format!("unterminated ${{{name}"));
                }
                if name.is_empty() {
                    out.push('$');
                    continue;
                }
                match env(&name) {
                    Some(v) => out.push_str(&v),
                    None => return Err(format!("environment variable ${name} is not set")),
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Parse one line of a config file. `Ok(None)` for blank and comment lines; warnings (unknown
/// keys and sub-keys) are appended to `warnings`.
pub fn parse_line(
    line: &str,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<Option<Line>, String> {
    let tokens = tokenize(line)?;
    if tokens.is_empty() {
        return Ok(None);
    }
    let mut pairs = Vec::with_capacity(tokens.len());
    for t in tokens {
        let Some(v) = t.value else {
            return Err(format!("{} has no value (expected {}=VALUE)", t.key, t.key));
        };
        let v = interpolate(&v, env).map_err(|e| format!("{}: {e}", t.key))?;
        pairs.push((t.key, v));
    }
    let (first, first_val) = pairs[0].clone();
    if let Some(subkeys) = params::multi(&first) {
        if first_val.is_empty() {
            return Err(format!("{first}= needs a value"));
        }
        let mut attrs = BTreeMap::new();
        for (k, v) in pairs.into_iter().skip(1) {
            if let Some(allowed) = subkeys {
                if !allowed.contains(&k.as_str()) {
                    warnings.push(format!("unknown key {k} in {first} entry (known: {})", allowed.join(", ")));
                }
            }
            attrs.insert(k, v);
        }
        return Ok(Some(Line::Multi { key: first, value: first_val, attrs }));
    }
    for (k, v) in &pairs {
        if params::multi(k).is_some() {
            return Err(format!("{k}= must begin its line (it starts a multi-item entry)"));
        }
        if v.is_empty() {
            return Err(format!("{k} has an empty value"));
        }
        check_simple(k, v, warnings)?;
    }
    Ok(Some(Line::Simple(pairs)))
}

/// Check a simple parameter's name and value: unknown names warn, bad values are errors.
pub fn check_simple(key: &str, value: &str, warnings: &mut Vec<String>) -> Result<(), String> {
    match params::find(key) {
        Some(p) => params::check(p.kind, value).map_err(|e| format!("{key}={value}: {e}")),
        None => {
            warnings.push(format!("unknown parameter {key} (ignored)"));
            Ok(())
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

    fn parse(line: &str) -> Result<Option<Line>, String> {
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
        let e = parse("SCR_CACHE_BASE=/dev/shm/$NOPE").unwrap_err();
        assert!(e.contains("$NOPE"), "{e}");
    }

    #[test]
    fn malformed_lines() {
        assert!(parse("SCR_FLUSH").unwrap_err().contains("no value"));
        assert!(parse("SCR_FLUSH=ten").unwrap_err().contains("non-negative integer"));
        assert!(parse("=5").is_err());
        assert!(parse("SCR_FLUSH=1 STORE=/x").is_err());
        assert!(parse("SCR-FLUSH=1").is_err());
    }

    #[test]
    fn unknown_keys_warn() {
        let mut w = Vec::new();
        parse_line("SCR_FLUSHH=1", &env, &mut w).unwrap();
        parse_line("STORE=/ssd COUNTT=2", &env, &mut w).unwrap();
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("SCR_FLUSHH") && w[1].contains("COUNTT"));
    }
}
