//! Configuration: where each parameter's value comes from and what it is.
//!
//! Precedence, first found wins (user guide 2.7.1): environment variables, the user config
//! file (`SCR_CONF_FILE`, else `<prefix>/.scrconf`), values set with `SCR_Config`, the system
//! config file (`/etc/scr/scr.conf`, or the path given in `SCR_CONFIG_FILE` when the library
//! was built), then the defaults of the [`params`] table. Multi-item entries (`STORE`, `CKPT`,
//! `GROUPS`) merge key by key across sources with the same precedence.
//!
//! In `SCR_Init`, rank 0 resolves the configuration and broadcasts the typed [`Settings`], so
//! every rank runs with the same values (and a bad value fails `SCR_Init` on every rank).

pub mod params;
pub mod parse;
pub mod patterns;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use parse::Line;

/// The system configuration file.
pub const SYSTEM_CONFIG_FILE: &str = match option_env!("SCR_CONFIG_FILE") {
    Some(p) => p,
    None => "/etc/scr/scr.conf",
};

/// An invalid configuration; `at` names the file and line, the environment variable or the
/// `SCR_Config` call.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
#[error("configuration error at {}: {}", crate::log::clip(at), crate::log::clip(msg))]
pub struct ConfigError {
    pub at: String,
    pub msg: String,
}

/// What is wrong with one piece of configuration text (a line, a value, a pattern, a
/// database address) before it is placed: the caller turns it into a [`ConfigError`] with
/// [`SyntaxError::at`], naming the file and line, the environment variable or the
/// `SCR_Config` call. The fields say which key, value or pattern is at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SyntaxError {
    /// A quote opened in a value is never closed.
    #[error("unterminated {quote} quote")]
    UnterminatedQuote { quote: char },
    /// A token's key is not a parameter name (letters, digits, `_`, not starting with a digit).
    #[error("{key:?} is not a valid parameter name")]
    BadName { key: String },
    /// A `${NAME` without its `}`.
    #[error("unterminated ${{{name}")]
    UnterminatedVar { name: String },
    /// The value of `key` could not be interpolated.
    #[error("{key}: {source}")]
    InValue { key: String, source: Box<SyntaxError> },
    /// A bare `KEY` where `KEY=VALUE` is needed.
    #[error("{key} has no value (expected {key}=VALUE)")]
    NoValue { key: String },
    /// `value` expanded to nothing because the variables `unset` names are not set.
    #[error("{key}={value} is empty: {unset}")]
    ExpandsEmpty { key: String, value: String, unset: String },
    /// A multi-item entry (`STORE=`, `CKPT=`, ...) without its value.
    #[error("{key}= needs a value")]
    EntryWithoutValue { key: String },
    /// A multi-item key that is not the first item of its line.
    #[error("{key}= must begin its line (it starts a multi-item entry)")]
    EntryNotFirst { key: String },
    /// A simple parameter set to the empty string.
    #[error("{key} has an empty value")]
    EmptyValue { key: String },
    /// `value` is not of the kind parameter `key` takes.
    #[error("{key}={value}: {expected}")]
    BadValue { key: String, value: String, expected: params::Expected },
    /// An empty checkpoint pattern.
    #[error("the pattern is empty")]
    EmptyPattern,
    /// A checkpoint pattern that cannot be used; `why` says which part and why.
    #[error("{pattern}: {why}")]
    Pattern { pattern: String, why: String },
    /// A pattern's `NAME=` template that cannot be expanded.
    #[error("NAME={template}: {why}")]
    Template { template: String, why: String },
    /// A pattern's `RANKS=` list that cannot be read.
    #[error("RANKS={ranks}: expected ALL or a list such as 0,2-5")]
    Ranks { ranks: String },
    /// A database address (`SCR_LOG_DB_HOST`) that cannot be used.
    #[error("{0}")]
    DbHost(&'static str),
    /// The host part of a database address is not a host name.
    #[error("{host:?} is not a host name")]
    DbHostName { host: String },
    /// The port of a database address is not a port.
    #[error("port {port:?} is not a number from 1 to 65535")]
    DbPort { port: String },
}

impl SyntaxError {
    /// Place this error: `at` names the file and line, the environment variable or the call.
    pub fn at(self, at: impl Into<String>) -> ConfigError {
        ConfigError { at: at.into(), msg: self.to_string() }
    }
}

impl From<ConfigError> for crate::error::Error {
    fn from(e: ConfigError) -> Self {
        crate::error::Error::Config { at: e.at, msg: e.msg }
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Origin {
    Env,
    UserFile { file: PathBuf, line: usize },
    App,
    SystemFile { file: PathBuf, line: usize },
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env => write!(f, "environment"),
            Origin::UserFile { file, line } => write!(f, "user config {}:{line}", file.display()),
            Origin::App => write!(f, "SCR_Config"),
            Origin::SystemFile { file, line } => write!(f, "system config {}:{line}", file.display()),
            Origin::Default => write!(f, "default"),
        }
    }
}

/// A value and its origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Value {
    pub value: String,
    pub origin: Origin,
}

/// A multi-item entry such as `CKPT=1 INTERVAL=4 TYPE=RS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub value: String,
    pub attrs: BTreeMap<String, Value>,
    pub origin: Origin,
}

impl Entry {
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs.get(k).map(|v| v.value.as_str())
    }
}

/// The settings from one source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub simple: BTreeMap<String, Value>,
    pub multi: BTreeMap<(String, String), Entry>,
}

impl Layer {
    fn add_line(&mut self, line: Line, origin: &Origin) {
        match line {
            Line::Simple(pairs) => {
                for (k, v) in pairs {
                    self.simple.insert(k, Value { value: v, origin: origin.clone() });
                }
            }
            Line::Multi { key, value, attrs } => {
                let e = self.multi.entry((key.clone(), value.clone())).or_insert_with(|| Entry {
                    key,
                    value,
                    attrs: BTreeMap::new(),
                    origin: origin.clone(),
                });
                for (k, v) in attrs {
                    e.attrs.insert(k, Value { value: v, origin: origin.clone() });
                }
            }
        }
    }
}

/// Parse config-file text. `user` selects the origin kind. Errors name `file:line`.
pub fn parse_file_text(text: &str, file: &Path, user: bool, warnings: &mut Vec<String>) -> Result<Layer, ConfigError> {
    let env = |k: &str| std::env::var(k).ok();
    let mut layer = Layer::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let mut w = Vec::new();
        let parsed = parse::parse_line(raw, &env, &mut w).map_err(|e| e.at(format!("{}:{line}", file.display())))?;
        warnings.extend(w.into_iter().map(|m| format!("{}:{line}: {m}", file.display())));
        if let Some(l) = parsed {
            let origin = if user {
                Origin::UserFile { file: file.to_path_buf(), line }
            } else {
                Origin::SystemFile { file: file.to_path_buf(), line }
            };
            layer.add_line(l, &origin);
        }
    }
    Ok(layer)
}

/// Read and parse a config file. A missing file is an empty layer unless `named_by` says which
/// setting named it (`SCR_CONF_FILE`): then, as an unreadable file always is, it is an error, so
/// a mistyped path cannot silently drop the settings the file holds.
pub fn read_file(
    file: &Path,
    user: bool,
    named_by: Option<&Value>,
    warnings: &mut Vec<String>,
) -> Result<Layer, ConfigError> {
    match std::fs::read_to_string(file) {
        Ok(text) => parse_file_text(&text, file, user, warnings),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && named_by.is_none() => Ok(Layer::default()),
        Err(e) => Err(match named_by {
            Some(v) => ConfigError {
                at: format!("SCR_CONF_FILE={} ({})", v.value, v.origin),
                msg: format!("cannot read the configuration file {}: {e}", file.display()),
            },
            None => ConfigError { at: file.display().to_string(), msg: format!("cannot read: {e}") },
        }),
    }
}

/// The environment's `SCR_*` settings (unknown names warn; bad values are errors).
pub fn env_layer(warnings: &mut Vec<String>) -> Result<Layer, ConfigError> {
    let mut layer = Layer::default();
    for (k, v) in std::env::vars() {
        if !k.starts_with("SCR_") {
            continue;
        }
        if params::find(&k).is_none() {
            warnings.push(format!("environment variable {k} is not an SCR parameter (ignored)"));
            continue;
        }
        if v.is_empty() {
            continue;
        }
        parse::check_simple(&k, &v, &mut Vec::new()).map_err(|e| e.at(format!("environment variable {k}")))?;
        layer.simple.insert(k, Value { value: v, origin: Origin::Env });
    }
    Ok(layer)
}

/// Values set with `SCR_Config` (process-wide; set before `SCR_Init`).
static APP: Mutex<Layer> = Mutex::new(Layer { simple: BTreeMap::new(), multi: BTreeMap::new() });

/// A snapshot of the `SCR_Config` layer.
pub fn app_layer() -> Layer {
    APP.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// All sources, resolved.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Resolved {
    pub simple: BTreeMap<String, Value>,
    pub multi: Vec<Entry>,
    pub warnings: Vec<String>,
}

impl Resolved {
    /// The effective value of a simple parameter (including its default).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.simple.get(key).map(|v| v.value.as_str())
    }

    /// Multi-item entries with this key (e.g. all `CKPT` entries), in value order.
    pub fn entries(&self, key: &str) -> Vec<&Entry> {
        self.multi.iter().filter(|e| e.key == key).collect()
    }
}

/// Resolve layers given highest precedence first (environment, user file, `SCR_Config`,
/// system file); defaults fill the rest.
pub fn resolve_layers(layers: Vec<Layer>, warnings: Vec<String>) -> Resolved {
    let mut simple: BTreeMap<String, Value> = BTreeMap::new();
    let mut multi: BTreeMap<(String, String), Entry> = BTreeMap::new();
    for p in params::PARAMS {
        if let Some(d) = p.default {
            simple.insert(p.name.to_string(), Value { value: d.to_string(), origin: Origin::Default });
        }
    }
    for layer in layers.into_iter().rev() {
        for (k, v) in layer.simple {
            simple.insert(k, v);
        }
        for (id, e) in layer.multi {
            match multi.get_mut(&id) {
                None => {
                    multi.insert(id, e);
                }
                Some(existing) => {
                    existing.origin = e.origin;
                    existing.attrs.extend(e.attrs);
                }
            }
        }
    }
    Resolved { simple, multi: multi.into_values().collect(), warnings }
}

/// Read every source and resolve. `SCR_PREFIX` for locating `.scrconf` comes from the
/// environment, `SCR_Config` or the system file, else the current directory.
pub fn resolve() -> Result<Resolved, ConfigError> {
    let mut warnings = Vec::new();
    let r = resolve_into(&mut warnings);
    if r.is_err() {
        // The error stops SCR_Init; the warnings found before it still help fix the file.
        for w in &warnings {
            crate::scr_warn!("{w}");
        }
    }
    r
}

/// `SCR_ENABLE` from every source (rank 0 reads it before `SCR_Init` starts SCR). A
/// configuration that does not resolve counts as enabled: starting SCR reports its error (and
/// its warnings, which this quiet read leaves alone).
pub fn enabled() -> bool {
    let r = resolve_into(&mut Vec::new());
    !r.is_ok_and(|r| r.get("SCR_ENABLE").and_then(params::parse_bool) == Some(false))
}

fn resolve_into(warnings: &mut Vec<String>) -> Result<Resolved, ConfigError> {
    let env = env_layer(warnings)?;
    let app = app_layer();
    let system = read_file(Path::new(SYSTEM_CONFIG_FILE), false, None, warnings)?;
    let named = env.simple.get("SCR_CONF_FILE").or_else(|| app.simple.get("SCR_CONF_FILE"));
    let user_file = user_config_file(named, &env, &app, &system);
    let user = read_file(&user_file, true, named, warnings)?;
    if let Some(v) = user.simple.get("SCR_PREFIX") {
        warnings.push(format!(
            "{}: SCR_PREFIX in the user config file is ignored (the file is found through the prefix)",
            v.origin
        ));
    }
    let mut user = user;
    user.simple.remove("SCR_PREFIX");
    Ok(resolve_layers(vec![env, user, app, system], std::mem::take(warnings)))
}

/// `SCR_CONF_FILE` (`named`), else `<prefix>/.scrconf`.
fn user_config_file(named: Option<&Value>, env: &Layer, app: &Layer, system: &Layer) -> PathBuf {
    if let Some(v) = named {
        return crate::paths::normalize(Path::new(&v.value), &crate::paths::cwd());
    }
    let prefix = [env, app, system]
        .iter()
        .find_map(|l| l.simple.get("SCR_PREFIX"))
        .map(|v| PathBuf::from(&v.value))
        .unwrap_or_else(crate::paths::cwd);
    crate::paths::normalize(&prefix, &crate::paths::cwd()).join(".scrconf")
}

/// `SCR_Config`: set (`KEY=VALUE`, `CKPT=0 TYPE=XOR ...`), unset (`KEY=`, which for `STORE`,
/// `CKPT`, `GROUPS` and `PRELOAD` removes every entry `SCR_Config` made), query (`KEY`,
/// `CKPT=0 TYPE`). Blanks may surround `=`. Setting and unsetting are refused after
/// `SCR_Init`. A query returns the effective value from every source but the defaults (`None`
/// if not set). An unknown key warns and is not stored.
pub fn scr_config(text: &str, initialized: bool) -> Result<Option<String>, ConfigError> {
    scr_config_reply(text, initialized).map(Reply::value)
}

/// [`scr_config`], saying whether the string was a query.
pub fn scr_config_reply(text: &str, initialized: bool) -> Result<Reply, ConfigError> {
    let at = || format!("SCR_Config(\"{text}\")");
    let err = |msg: String| ConfigError { at: at(), msg };
    let tokens = parse::tokenize(text).map_err(|e| e.at(at()))?;
    let Some(first) = tokens.first() else {
        return Err(err("empty configuration string".into()));
    };
    let query = tokens.last().map(|t| t.value.is_none()).unwrap_or(false);
    if query {
        if tokens.len() == 1 {
            let r = resolve().map_err(|e| err(e.to_string()))?;
            return Ok(Reply::Query(
                r.simple.get(&first.key).filter(|v| v.origin != Origin::Default).map(|v| v.value.clone()),
            ));
        }
        if tokens.len() == 2 && first.value.is_some() {
            let r = resolve().map_err(|e| err(e.to_string()))?;
            let val = first.value.as_deref().unwrap_or_default();
            let sub = &tokens[1].key;
            return Ok(Reply::Query(
                r.multi
                    .iter()
                    .find(|e| e.key == first.key && e.value == val)
                    .and_then(|e| e.attr(sub).map(str::to_string)),
            ));
        }
        return Err(err("a query names one parameter (KEY) or one sub-key (KEY=VALUE SUBKEY)".into()));
    }
    if initialized {
        return Err(err("parameters cannot be set or unset after SCR_Init".into()));
    }
    let mut app = APP.lock().unwrap_or_else(|e| e.into_inner());
    // unset: a single KEY= token
    if tokens.len() == 1 && first.value.as_deref() == Some("") {
        if params::multi(&first.key).is_some() {
            app.multi.retain(|(k, _), _| *k != first.key);
        } else if params::find(&first.key).is_some() {
            app.simple.remove(&first.key);
        } else {
            crate::scr_warn!("{}: unknown parameter {} (ignored)", at(), first.key);
        }
        return Ok(Reply::Done);
    }
    let env = |k: &str| std::env::var(k).ok();
    let mut warnings = Vec::new();
    let line = parse::parse_tokens(tokens, &env, &mut warnings).map_err(|e| e.at(at()))?;
    for w in warnings {
        crate::scr_warn!("{}: {w}", at());
    }
    app.add_line(line, &Origin::App);
    Ok(Reply::Done)
}

/// What `SCR_Config` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A parameter was set or unset.
    Done,
    /// A query, and the value if the parameter is set.
    Query(Option<String>),
}

impl Reply {
    /// The value a query found (what the C API returns).
    pub fn value(self) -> Option<String> {
        match self {
            Reply::Done => None,
            Reply::Query(v) => v,
        }
    }
}

/// Forget every `SCR_Config` value (between the tests of this module).
#[cfg(test)]
fn reset_app_layer() {
    *APP.lock().unwrap_or_else(|e| e.into_inner()) = Layer::default();
}

mod dblog;
mod settings;
pub use dblog::{DbAddr, DbSettings};
pub use settings::{CrcOnCopy, Settings, StoreEntry};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_env_user_app_system_default() {
        let mk = |k: &str, v: &str, o: Origin| {
            let mut l = Layer::default();
            l.simple.insert(k.into(), Value { value: v.into(), origin: o });
            l
        };
        let f = PathBuf::from("/f");
        let layers = vec![
            mk("SCR_FLUSH", "2", Origin::UserFile { file: f.clone(), line: 1 }),
            mk("SCR_FLUSH", "3", Origin::App),
            mk("SCR_FLUSH", "4", Origin::SystemFile { file: f.clone(), line: 1 }),
        ];
        let r = resolve_layers(layers.clone(), vec![]);
        assert_eq!(r.get("SCR_FLUSH"), Some("2"));
        let mut with_env = layers;
        with_env.insert(0, mk("SCR_FLUSH", "1", Origin::Env));
        assert_eq!(resolve_layers(with_env, vec![]).get("SCR_FLUSH"), Some("1"));
        assert_eq!(resolve_layers(vec![], vec![]).get("SCR_FLUSH"), Some("10"));
    }

    #[test]
    fn multi_entries_merge_by_key() {
        let mut w = Vec::new();
        let sys = parse_file_text("CKPT=0 TYPE=XOR SET_SIZE=8\n", Path::new("/sys"), false, &mut w).unwrap();
        let user = parse_file_text("CKPT=0 TYPE=SINGLE\n", Path::new("/user"), true, &mut w).unwrap();
        let r = resolve_layers(vec![user, sys], vec![]);
        let e = r.entries("CKPT");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].attr("TYPE"), Some("SINGLE"));
        assert_eq!(e[0].attr("SET_SIZE"), Some("8"));
    }

    #[test]
    fn scr_config_unsets_entries_and_never_stores_unknown_keys() {
        // The only test of the process-wide SCR_Config layer.
        reset_app_layer();
        assert_eq!(scr_config_reply("STORE= /dev/shm/foo GROUP = NODE COUNT  =1", false).unwrap(), Reply::Done);
        let key = ("STORE".to_string(), "/dev/shm/foo".to_string());
        assert_eq!(app_layer().multi[&key].attr("COUNT"), Some("1"));
        scr_config("STORE=", false).unwrap();
        assert!(app_layer().multi.is_empty());
        scr_config("SCR_NOT_A_PARAM = 1", false).unwrap();
        scr_config("STORE=/ssd COUNTT=2", false).unwrap();
        let app = app_layer();
        assert!(app.simple.is_empty(), "{app:?}");
        assert!(app.multi.values().all(|e| e.attrs.is_empty()), "{app:?}");
        assert_eq!(scr_config_reply("SCR_NOT_A_PARAM", false).unwrap(), Reply::Query(None));
        scr_config("SCR_COPY_TYPE = PARTNER", false).unwrap();
        assert_eq!(app_layer().simple["SCR_COPY_TYPE"].value, "PARTNER");
        scr_config("SCR_COPY_TYPE =", false).unwrap();
        assert!(!app_layer().simple.contains_key("SCR_COPY_TYPE"));
        reset_app_layer();
    }

    #[test]
    fn a_named_config_file_must_exist() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("scr.conff");
        let mut w = Vec::new();
        assert!(read_file(&missing, true, None, &mut w).unwrap().simple.is_empty());
        let named = Value { value: missing.display().to_string(), origin: Origin::Env };
        let e = read_file(&missing, true, Some(&named), &mut w).unwrap_err().to_string();
        assert!(e.contains("SCR_CONF_FILE=") && e.contains("(environment)") && e.contains("scr.conff"), "{e}");
    }

    #[test]
    fn file_errors_name_file_and_line() {
        let mut w = Vec::new();
        let e = parse_file_text("# ok\nSCR_FLUSH=10\nSCR_CACHE_SIZE=lots\n", Path::new("/p/.scrconf"), true, &mut w)
            .unwrap_err();
        assert_eq!(e.at, "/p/.scrconf:3");
        assert!(e.msg.contains("SCR_CACHE_SIZE"), "{}", e.msg);
    }
}
