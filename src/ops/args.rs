//! Command-line parsing for the commands, GNU style: long options `--name`, `--name=value` or
//! `--name value`; short options `-c 5` or `-c5`; `--` ends the options. Every mistake is
//! an [`OpError::Usage`] naming the option. A wrapper (`scr_run`) stops at its first
//! positional argument, which starts the launcher's command line.

use super::{OpError, OpResult};

/// One option a command accepts.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// The long name, without the dashes (`checkpoints` for `--checkpoints`).
    pub(crate) long: &'static str,
    /// The one-letter form (`-c`), if any.
    pub(crate) short: Option<char>,
    /// What the value is called in messages (`N`, `TIME`, ...), or `None` for a flag.
    pub(crate) value: Option<&'static str>,
}

/// A flag (`--list`).
pub const fn flag(long: &'static str, short: Option<char>) -> Opt {
    Opt { long, short, value: None }
}

/// An option with a value (`--checkpoints N`).
pub const fn valued(long: &'static str, short: Option<char>, value: &'static str) -> Opt {
    Opt { long, short, value: Some(value) }
}

/// The parsed command line: options in the order given, then the positional arguments.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Each option given, as (long name, value; `None` for a flag), in command-line order.
    pub(crate) opts: Vec<(&'static str, Option<String>)>,
    /// The arguments that are not options (for a wrapper: the launcher's command line).
    pub positional: Vec<String>,
}

impl Parsed {
    /// Whether the flag or option was given.
    pub fn has(&self, long: &str) -> bool {
        self.opts.iter().any(|(n, _)| *n == long)
    }

    /// The value of the last occurrence of an option.
    pub fn value(&self, long: &str) -> Option<&str> {
        self.opts.iter().rev().find(|(n, _)| *n == long).and_then(|(_, v)| v.as_deref())
    }

    /// Every value given for an option, in order.
    pub(crate) fn values(&self, long: &str) -> Vec<&str> {
        self.opts.iter().filter(|(n, _)| *n == long).filter_map(|(_, v)| v.as_deref()).collect()
    }

    /// The value of an option as a non-negative integer.
    pub fn count(&self, long: &str) -> OpResult<Option<u64>> {
        self.value(long).map(|v| parse_count(long, v)).transpose()
    }
}

/// A non-negative integer given to `--<long>`.
pub fn parse_count(long: &str, v: &str) -> OpResult<u64> {
    v.trim().parse::<u64>().map_err(|_| OpError::usage(format!("--{long} {v:?}: expected a non-negative integer")))
}

/// Whether one of `flags` (`--help`/`-h`, `--version`) is among the options (before `--`, and
/// for a wrapper before its first positional argument, which belongs to the launched command).
pub(crate) fn wants(argv: &[String], wrapper: bool, flags: &[&str]) -> bool {
    for a in argv {
        if a == "--" {
            return false;
        }
        if flags.contains(&a.as_str()) {
            return true;
        }
        if wrapper && !a.starts_with('-') {
            return false;
        }
    }
    false
}

/// Parse `argv` against `opts`. With `wrapper`, the first positional argument and everything
/// after it are positional.
pub fn parse(opts: &[Opt], argv: &[String], wrapper: bool) -> OpResult<Parsed> {
    let mut out = Parsed::default();
    let mut i = 0;
    while i < argv.len() {
        let a = &argv[i];
        i += 1;
        if a == "--" {
            out.positional.extend(argv[i..].iter().cloned());
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let Some(o) = opts.iter().find(|o| o.long == name) else {
                return Err(OpError::usage(format!("unknown option --{name}")));
            };
            let value = match (o.value, inline) {
                (None, Some(_)) => return Err(OpError::usage(format!("option --{name} takes no value"))),
                (None, None) => None,
                (Some(_), Some(v)) => Some(v),
                (Some(what), None) => {
                    let Some(v) = argv.get(i) else {
                        return Err(OpError::usage(format!("option --{name} needs a value ({what})")));
                    };
                    i += 1;
                    Some(v.clone())
                }
            };
            out.opts.push((o.long, value));
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let mut chars = a[1..].chars();
            let c = chars.next().expect("non-empty");
            let rest: String = chars.collect();
            let Some(o) = opts.iter().find(|o| o.short == Some(c)) else {
                return Err(OpError::usage(format!("unknown option {a}")));
            };
            let value = match o.value {
                None if rest.is_empty() => None,
                None => return Err(OpError::usage(format!("option -{c} takes no value (got {a})"))),
                Some(_) if !rest.is_empty() => Some(rest),
                Some(what) => {
                    let Some(v) = argv.get(i) else {
                        return Err(OpError::usage(format!("option -{c} needs a value ({what})")));
                    };
                    i += 1;
                    Some(v.clone())
                }
            };
            out.opts.push((o.long, value));
            continue;
        }
        out.positional.push(a.clone());
        if wrapper {
            out.positional.extend(argv[i..].iter().cloned());
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[flag("list", Some('l')), valued("checkpoints", Some('c'), "N"), flag("remove", None)];

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn long_short_and_positional() {
        let p = parse(OPTS, &v(&["--checkpoints", "3", "-l", "/p", "--checkpoints=4", "-c5"]), false).unwrap();
        assert!(p.has("list") && !p.has("remove"));
        assert_eq!(p.value("checkpoints"), Some("5"));
        assert_eq!(p.values("checkpoints"), vec!["3", "4", "5"]);
        assert_eq!(p.positional, vec!["/p"]);
        assert_eq!(p.count("checkpoints").unwrap(), Some(5));
    }

    #[test]
    fn mistakes_name_the_option() {
        let e = parse(OPTS, &v(&["--bogus"]), false).unwrap_err().to_string();
        assert!(e.contains("--bogus"), "{e}");
        let e = parse(OPTS, &v(&["--checkpoints"]), false).unwrap_err().to_string();
        assert!(e.contains("--checkpoints needs a value (N)"), "{e}");
        let e = parse(OPTS, &v(&["--list=yes"]), false).unwrap_err().to_string();
        assert!(e.contains("--list takes no value"), "{e}");
        let e = parse(OPTS, &v(&["-x"]), false).unwrap_err().to_string();
        assert!(e.contains("-x"), "{e}");
        let p = parse(OPTS, &v(&["-c", "ten"]), false).unwrap();
        assert!(p.count("checkpoints").unwrap_err().to_string().contains("--checkpoints \"ten\""));
    }

    #[test]
    fn wrapper_stops_at_the_launcher() {
        let p = parse(OPTS, &v(&["-l", "srun", "-n4", "--list", "./app"]), true).unwrap();
        assert!(p.has("list"));
        assert_eq!(p.positional, vec!["srun", "-n4", "--list", "./app"]);
        let help = ["--help", "-h"];
        assert!(wants(&v(&["-l", "--help"]), true, &help));
        assert!(!wants(&v(&["srun", "--help"]), true, &help));
        assert!(wants(&v(&["/p", "--help"]), false, &help));
        assert!(!wants(&v(&["--", "--help"]), false, &help));
        assert!(wants(&v(&["--version"]), true, &["--version"]));
        assert!(!wants(&v(&["srun", "--version"]), true, &["--version"]));
        let p = parse(OPTS, &v(&["--", "-l"]), false).unwrap();
        assert_eq!(p.positional, vec!["-l"]);
    }
}
