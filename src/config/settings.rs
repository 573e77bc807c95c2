//! Typed settings: the resolved configuration turned into the values the runtime uses, with
//! every error naming where the bad value came from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::dblog::{parse_db_host, DbSettings, MASK};
use super::{params, ConfigError, Entry, Origin, Resolved};

/// A `STORE=` entry or the implied cache store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreEntry {
    pub path: PathBuf,
    pub group: String,
    pub count: usize,
    pub enabled: bool,
    pub mkdir: bool,
    pub flush: String,
}

/// Every setting the runtime reads, typed. Built on rank 0 and broadcast.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub debug: u8,
    pub checkpoint_interval: u64,
    pub checkpoint_seconds: u64,
    pub checkpoint_overhead: f64,
    pub cntl_base: PathBuf,
    pub halt_exit: bool,
    pub halt_seconds: u64,
    pub group: String,
    pub copy_type: String,
    /// `SCR_COPY_TYPE` was set (not the default): a protection that cannot be given as asked
    /// is then worth a warning.
    #[serde(default)]
    pub copy_type_chosen: bool,
    pub cache_base: PathBuf,
    pub cache_size: usize,
    pub cache_bypass: bool,
    pub cache_purge: bool,
    pub set_size: usize,
    /// `SCR_SET_SIZE` was set (not the default).
    #[serde(default)]
    pub set_size_chosen: bool,
    pub set_failures: usize,
    pub prefix: PathBuf,
    pub prefix_size: usize,
    pub prefix_purge: bool,
    pub current: Option<String>,
    pub distribute: bool,
    pub fetch: bool,
    pub fetch_bypass: bool,
    pub fetch_width: usize,
    pub flush: u64,
    /// `SYNC` or `PTHREAD` (vendor types fall back to `PTHREAD`; `SCR_FLUSH_ASYNC=1` alone
    /// means `PTHREAD`). A store's `FLUSH=SYNC` keeps its datasets' flushes synchronous.
    pub flush_type: String,
    /// Flushes run in a background thread (`SCR_FLUSH_ASYNC=1`).
    pub flush_async: bool,
    /// Bytes per second each process may write in a background flush (0: unlimited).
    pub flush_async_bw: u64,
    /// `SCR_ENCODE_ASYNC` as set (`None`: not set).
    pub encode_async: Option<bool>,
    pub flush_width: usize,
    pub flush_on_restart: bool,
    pub global_restart: bool,
    /// `SCR_RESTART_ELASTIC`: checkpoints of another number of processes are offered too.
    pub restart_elastic: bool,
    pub file_buf_size: usize,
    /// Piece size of the redundancy schedules (`SCR_MPI_BUF_SIZE`).
    pub mpi_buf_size: usize,
    /// `SCR_CRC_ON_COPY`: how cached files are checksummed and verified.
    pub crc_on_copy: CrcOnCopy,
    pub crc_on_flush: bool,
    /// `SCR_LOG_ENABLE` and its text and syslog switches.
    pub log_enable: bool,
    pub log_txt: bool,
    pub log_syslog: bool,
    pub syslog_facility: String,
    pub syslog_level: String,
    pub syslog_prefix: String,
    pub syslog_socket: PathBuf,
    /// `SCR_LOG_DB_*`: database logging, when `SCR_LOG_ENABLE=1`, `SCR_LOG_DB_ENABLE=1` and
    /// the settings are usable.
    pub log_db: Option<DbSettings>,
    /// Seconds allowed between output phases (0: no watchdog).
    pub watchdog_timeout: u64,
    pub watchdog_timeout_pfs: u64,
    pub stores: Vec<StoreEntry>,
    pub ckpts: Vec<Entry>,
    pub groups: Vec<Entry>,
    /// Transparent mode's checkpoint patterns (`PRELOAD=` entries, `SCR_PRELOAD_PATTERNS`).
    pub preload: Vec<crate::config::patterns::PatternSpec>,
    /// Transparent mode's files several ranks write (`SCR_PRELOAD_SHARED`).
    pub preload_shared: Vec<crate::config::patterns::PatternSpec>,
    /// `SCR_PRELOAD_TIMING`: report what the hooks and sync points cost.
    #[serde(default)]
    pub preload_timing: bool,
    /// The effective configuration with origins, for the `SCR_DEBUG` listing.
    pub listing: Vec<(String, String, String)>,
    /// Warnings found while reading the configuration (printed by rank 0).
    pub warnings: Vec<String>,
}

fn at(r: &Resolved, key: &str) -> String {
    r.simple.get(key).map(|v| format!("{} ({key})", v.origin)).unwrap_or_else(|| key.to_string())
}

/// A simple setting's value with where it was set (for messages), if it is set.
fn with_origin(r: &Resolved, key: &str) -> Option<(String, String)> {
    r.simple.get(key).map(|v| (at(r, key), v.value.clone()))
}

fn num<T: std::str::FromStr>(r: &Resolved, key: &str) -> Result<T, ConfigError> {
    let raw = r.get(key).unwrap_or("0");
    raw.trim()
        .parse::<T>()
        .map_err(|_| ConfigError { at: at(r, key), msg: format!("{key}={raw}: expected a non-negative number") })
}

fn boolean(r: &Resolved, key: &str) -> Result<bool, ConfigError> {
    let raw = r.get(key).unwrap_or("0");
    params::parse_bool(raw).ok_or_else(|| ConfigError { at: at(r, key), msg: format!("{key}={raw}: expected 0 or 1") })
}

/// Whether `key` was set somewhere (environment, a file, `SCR_Config`), not defaulted.
fn chosen(r: &Resolved, key: &str) -> bool {
    r.simple.get(key).is_some_and(|v| v.origin != Origin::Default)
}

fn text(r: &Resolved, key: &str) -> Option<String> {
    r.get(key).map(str::to_string)
}

/// `SCR_LOG_DB_*`, when both `SCR_LOG_ENABLE` and `SCR_LOG_DB_ENABLE` are 1 (the guide: the
/// former switches every log). A host or database name that is missing or malformed turns
/// database logging off with a warning naming the key: logging never stops a run.
fn db_settings(r: &Resolved, warnings: &mut Vec<String>) -> Result<Option<DbSettings>, ConfigError> {
    let debug = boolean(r, "SCR_LOG_DB_DEBUG")?;
    if !boolean(r, "SCR_LOG_DB_ENABLE")? || !boolean(r, "SCR_LOG_ENABLE")? {
        return Ok(None);
    }
    let off = "database logging is off for this run (the text log and syslog go on as configured)";
    let addr = match text(r, "SCR_LOG_DB_HOST").as_deref().map(str::trim) {
        None | Some("") => {
            warnings.push(format!(
                "{}: SCR_LOG_DB_ENABLE=1 needs SCR_LOG_DB_HOST (host[:port] or a socket path); {off}",
                at(r, "SCR_LOG_DB_ENABLE")
            ));
            return Ok(None);
        }
        Some(h) => match parse_db_host(h) {
            Ok(a) => a,
            Err(e) => {
                warnings.push(format!("{}: SCR_LOG_DB_HOST={h}: {e}; {off}", at(r, "SCR_LOG_DB_HOST")));
                return Ok(None);
            }
        },
    };
    let Some(name) = text(r, "SCR_LOG_DB_NAME").filter(|n| !n.trim().is_empty()) else {
        warnings.push(format!("{}: SCR_LOG_DB_ENABLE=1 needs SCR_LOG_DB_NAME; {off}", at(r, "SCR_LOG_DB_ENABLE")));
        return Ok(None);
    };
    let user = text(r, "SCR_LOG_DB_USER").filter(|u| !u.is_empty()).unwrap_or_else(crate::identity::user_name);
    Ok(Some(DbSettings { addr, name: name.trim().to_string(), user, pass: text(r, "SCR_LOG_DB_PASS"), debug }))
}

/// `SCR_COPY_TYPE`. SCR 3 uses `CKPT=` descriptors only with `SCR_COPY_TYPE=FILE` and ignores
/// them without a word otherwise. Here, when `SCR_COPY_TYPE` is set nowhere, `CKPT=` entries
/// take effect (as `FILE`: the user wrote them to be used); when it is set to a scheme, that
/// choice stands and one warning names the entries (file:line) and what to set.
fn copy_type(r: &Resolved, warnings: &mut Vec<String>) -> String {
    let value = text(r, "SCR_COPY_TYPE").unwrap_or_else(|| "XOR".into()).to_ascii_uppercase();
    let ckpts = r.entries("CKPT");
    if value == "FILE" || ckpts.is_empty() {
        return value;
    }
    let explicit = r.simple.get("SCR_COPY_TYPE").filter(|v| v.origin != Origin::Default);
    match explicit {
        None => "FILE".into(),
        Some(v) => {
            let entries: Vec<String> = ckpts.iter().map(|e| format!("CKPT={} ({})", e.value, e.origin)).collect();
            warnings.push(format!(
                "{} ignored: SCR_COPY_TYPE={} ({}) applies to every checkpoint; set SCR_COPY_TYPE=FILE to use the CKPT \
                 descriptors",
                entries.join(", "),
                v.value,
                v.origin
            ));
            value
        }
    }
}

/// `SCR_CRC_ON_COPY`: when the CRC32 of a cached file is computed, and whether a restart from
/// cache checks it. Whatever the setting, PARTNER/XOR/RS record each file's CRC32 while they
/// encode (no extra pass) and a flush records it while it copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrcOnCopy {
    /// Unset (the default): SINGLE datasets get their CRC32 in the background after
    /// `SCR_Complete_output` (or from their flush; a rank's few small files inside it); every
    /// file a restart from cache hands to the application is checked against its CRC32 (by
    /// size alone while it is unknown).
    Background,
    /// `SCR_CRC_ON_COPY=1`: also computed inside `SCR_Complete_output` (SINGLE pays a read of
    /// its data there), and checked at restart.
    AtCompletion,
    /// `SCR_CRC_ON_COPY=0`: no CRC32 for SINGLE unless a flush records one; a restart from
    /// cache checks sizes only.
    Off,
}

impl CrcOnCopy {
    /// Whether a restart from cache checks the CRC32s it knows.
    pub fn verify(self) -> bool {
        self != CrcOnCopy::Off
    }
}

impl Settings {
    /// Type-check the resolved configuration. `cwd` is the default prefix.
    pub fn from_resolved(r: &Resolved, cwd: PathBuf) -> Result<Settings, ConfigError> {
        let mut warnings = r.warnings.clone();
        for (k, v) in &r.simple {
            if v.origin == Origin::Default {
                continue;
            }
            if let Some(p) = params::find(k) {
                match p.status {
                    params::Status::Later(why) | params::Status::Unsupported(why) => {
                        warnings.push(format!("{k}={} ({}) is not implemented: {why}", v.value, v.origin))
                    }
                    _ => {}
                }
            }
        }
        let size = |key: &str| -> Result<usize, ConfigError> {
            let raw = r.get(key).unwrap_or("0");
            params::parse_size(raw)
                .map(|v| v as usize)
                .ok_or_else(|| ConfigError { at: at(r, key), msg: format!("{key}={raw}: expected a size") })
        };
        let cache_base = PathBuf::from(text(r, "SCR_CACHE_BASE").unwrap_or_default());
        let cache_size: usize = num(r, "SCR_CACHE_SIZE")?;
        let cache_bypass = boolean(r, "SCR_CACHE_BYPASS")?;
        if cache_size == 0 && !cache_bypass {
            return Err(ConfigError {
                at: at(r, "SCR_CACHE_SIZE"),
                msg: "SCR_CACHE_SIZE=0 leaves no room in cache; set SCR_CACHE_BYPASS=1 to write to the prefix directly"
                    .into(),
            });
        }
        let flush_async = boolean(r, "SCR_FLUSH_ASYNC")?;
        let flush_type = match text(r, "SCR_FLUSH_TYPE").unwrap_or_else(|| "SYNC".into()).to_ascii_uppercase().as_str()
        {
            "SYNC" if flush_async => "PTHREAD".to_string(),
            "SYNC" => "SYNC".to_string(),
            other => {
                if other != "PTHREAD" {
                    warnings.push(format!(
                        "{}: SCR_FLUSH_TYPE={other} needs a vendor burst-buffer service absent here; PTHREAD is used \
                         (a background thread with SCR_FLUSH_ASYNC=1, else the flush runs synchronously)",
                        at(r, "SCR_FLUSH_TYPE")
                    ));
                }
                "PTHREAD".to_string()
            }
        };
        let mut stores = Vec::new();
        for e in r.entries("STORE") {
            let here = |k: &str| format!("{} (STORE={} {k})", e.origin, e.value);
            let count = match e.attr("COUNT") {
                Some(c) => c
                    .parse()
                    .map_err(|_| ConfigError { at: here("COUNT"), msg: format!("COUNT={c}: expected a count") })?,
                None => cache_size,
            };
            let flag = |k: &str, d: bool| -> Result<bool, ConfigError> {
                match e.attr(k) {
                    Some(v) => params::parse_bool(v)
                        .ok_or_else(|| ConfigError { at: here(k), msg: format!("{k}={v}: expected 0 or 1") }),
                    None => Ok(d),
                }
            };
            stores.push(StoreEntry {
                path: crate::paths::normalize(std::path::Path::new(&e.value), std::path::Path::new("/")),
                group: e.attr("GROUP").unwrap_or("NODE").to_string(),
                count,
                enabled: flag("ENABLED", true)?,
                mkdir: flag("MKDIR", true)?,
                flush: e.attr("FLUSH").unwrap_or(&flush_type).to_ascii_uppercase(),
            });
        }
        let syslog_facility = text(r, "SCR_LOG_SYSLOG_FACILITY").unwrap_or_else(|| "LOG_LOCAL7".into());
        let syslog_level = text(r, "SCR_LOG_SYSLOG_LEVEL").unwrap_or_else(|| "LOG_INFO".into());
        for (key, value, facility) in
            [("SCR_LOG_SYSLOG_FACILITY", &syslog_facility, true), ("SCR_LOG_SYSLOG_LEVEL", &syslog_level, false)]
        {
            let known = if facility { crate::log::syslog_facility(value) } else { crate::log::syslog_severity(value) };
            if known.is_none() {
                return Err(ConfigError {
                    at: at(r, key),
                    msg: format!("{key}={value}: expected one of {}", crate::log::syslog_names(facility)),
                });
            }
        }
        let log_db = db_settings(r, &mut warnings)?;
        let prefix = match text(r, "SCR_PREFIX") {
            Some(p) => crate::paths::normalize(std::path::Path::new(&p), &cwd),
            None => cwd,
        };
        let listing = r
            .simple
            .iter()
            .filter(|(k, _)| params::find(k).is_some())
            .map(|(k, v)| {
                let value = if k == "SCR_LOG_DB_PASS" { MASK.to_string() } else { v.value.clone() };
                (k.clone(), value, v.origin.to_string())
            })
            .chain(r.multi.iter().map(|e| {
                let attrs: Vec<String> = e.attrs.iter().map(|(k, v)| format!("{k}={}", v.value)).collect();
                (format!("{}={}", e.key, e.value), attrs.join(" "), e.origin.to_string())
            }))
            .collect();
        Ok(Settings {
            debug: num::<u64>(r, "SCR_DEBUG")?.min(255) as u8,
            checkpoint_interval: num(r, "SCR_CHECKPOINT_INTERVAL")?,
            checkpoint_seconds: num(r, "SCR_CHECKPOINT_SECONDS")?,
            checkpoint_overhead: num(r, "SCR_CHECKPOINT_OVERHEAD")?,
            cntl_base: PathBuf::from(text(r, "SCR_CNTL_BASE").unwrap_or_default()),
            halt_exit: boolean(r, "SCR_HALT_EXIT")?,
            halt_seconds: num(r, "SCR_HALT_SECONDS")?,
            group: text(r, "SCR_GROUP").unwrap_or_else(|| "NODE".into()),
            copy_type: copy_type(r, &mut warnings),
            copy_type_chosen: chosen(r, "SCR_COPY_TYPE"),
            cache_base,
            cache_size,
            cache_bypass,
            cache_purge: boolean(r, "SCR_CACHE_PURGE")?,
            set_size: num(r, "SCR_SET_SIZE")?,
            set_size_chosen: chosen(r, "SCR_SET_SIZE"),
            set_failures: num(r, "SCR_SET_FAILURES")?,
            prefix,
            prefix_size: num(r, "SCR_PREFIX_SIZE")?,
            prefix_purge: boolean(r, "SCR_PREFIX_PURGE")?,
            current: text(r, "SCR_CURRENT"),
            distribute: boolean(r, "SCR_DISTRIBUTE")?,
            fetch: boolean(r, "SCR_FETCH")?,
            fetch_bypass: boolean(r, "SCR_FETCH_BYPASS")?,
            fetch_width: num::<usize>(r, "SCR_FETCH_WIDTH")?.max(1),
            flush: num(r, "SCR_FLUSH")?,
            flush_type,
            flush_async,
            flush_async_bw: size("SCR_FLUSH_ASYNC_BW")? as u64,
            encode_async: match r.get("SCR_ENCODE_ASYNC") {
                None => None,
                Some(_) => Some(boolean(r, "SCR_ENCODE_ASYNC")?),
            },
            flush_width: num::<usize>(r, "SCR_FLUSH_WIDTH")?.max(1),
            flush_on_restart: boolean(r, "SCR_FLUSH_ON_RESTART")?,
            global_restart: boolean(r, "SCR_GLOBAL_RESTART")?,
            restart_elastic: boolean(r, "SCR_RESTART_ELASTIC")?,
            file_buf_size: size("SCR_FILE_BUF_SIZE")?.max(4096),
            mpi_buf_size: size("SCR_MPI_BUF_SIZE")?.max(4096),
            crc_on_copy: match r.get("SCR_CRC_ON_COPY") {
                None => CrcOnCopy::Background,
                Some(_) if boolean(r, "SCR_CRC_ON_COPY")? => CrcOnCopy::AtCompletion,
                Some(_) => CrcOnCopy::Off,
            },
            crc_on_flush: boolean(r, "SCR_CRC_ON_FLUSH")?,
            log_enable: boolean(r, "SCR_LOG_ENABLE")?,
            log_txt: boolean(r, "SCR_LOG_TXT_ENABLE")?,
            log_syslog: boolean(r, "SCR_LOG_SYSLOG_ENABLE")?,
            syslog_facility,
            syslog_level,
            syslog_prefix: text(r, "SCR_LOG_SYSLOG_PREFIX").unwrap_or_else(|| "SCR".into()),
            syslog_socket: PathBuf::from(text(r, "SCR_LOG_SYSLOG_SOCKET").unwrap_or_else(|| "/dev/log".into())),
            log_db,
            watchdog_timeout: num(r, "SCR_WATCHDOG_TIMEOUT")?,
            watchdog_timeout_pfs: num(r, "SCR_WATCHDOG_TIMEOUT_PFS")?,
            stores,
            ckpts: r.entries("CKPT").into_iter().cloned().collect(),
            groups: r.entries("GROUPS").into_iter().cloned().collect(),
            preload: crate::config::patterns::from_config(
                &r.entries("PRELOAD"),
                with_origin(r, "SCR_PRELOAD_PATTERNS").as_ref().map(|(a, v)| (a.as_str(), v.as_str())),
            )?,
            preload_shared: crate::config::patterns::shared_from_config(
                with_origin(r, "SCR_PRELOAD_SHARED").as_ref().map(|(a, v)| (a.as_str(), v.as_str())),
            )?,
            preload_timing: boolean(r, "SCR_PRELOAD_TIMING")?,
            listing,
            warnings,
        })
    }

    /// The effective configuration, one `KEY = VALUE  (origin)` line each.
    pub fn describe(&self) -> String {
        let w = self.listing.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
        self.listing.iter().map(|(k, v, o)| format!("  {k:<w$} = {v}  ({o})\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse_file_text, resolve_layers};
    use super::Settings;
    use std::path::{Path, PathBuf};

    fn settings(conf: &str) -> Result<Settings, super::ConfigError> {
        let mut w = Vec::new();
        let layer = parse_file_text(conf, Path::new("/p/.scrconf"), true, &mut w).unwrap();
        Settings::from_resolved(&resolve_layers(vec![layer], w), PathBuf::from("/p"))
    }

    #[test]
    fn database_logging_settings_or_one_warning_naming_the_key() {
        let on = "SCR_LOG_ENABLE=1\nSCR_LOG_DB_ENABLE=1\n";
        let s = settings(&format!(
            "{on}SCR_LOG_DB_HOST=db:3307\nSCR_LOG_DB_NAME=scr\nSCR_LOG_DB_USER=u\nSCR_LOG_DB_PASS=pw7\n"
        ))
        .unwrap();
        let db = s.log_db.as_ref().unwrap();
        assert_eq!(db.addr, crate::config::DbAddr::Tcp { host: "db".into(), port: 3307 });
        assert_eq!((db.name.as_str(), db.user.as_str(), db.pass.as_deref()), ("scr", "u", Some("pw7")));
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert!(!s.describe().contains("pw7") && s.describe().contains(super::MASK), "{}", s.describe());
        // off unless both switches are on
        assert!(settings("SCR_LOG_DB_ENABLE=1\nSCR_LOG_DB_HOST=/s\nSCR_LOG_DB_NAME=scr\n").unwrap().log_db.is_none());
        for (conf, key) in [
            ("SCR_LOG_DB_NAME=scr\n", "SCR_LOG_DB_HOST"),
            ("SCR_LOG_DB_HOST=/run/db.sock\n", "SCR_LOG_DB_NAME"),
            ("SCR_LOG_DB_HOST=db:99999\nSCR_LOG_DB_NAME=scr\n", "port"),
        ] {
            let s = settings(&format!("{on}{conf}")).unwrap();
            assert!(s.log_db.is_none(), "{conf}");
            assert_eq!(s.warnings.len(), 1, "{conf}: {:?}", s.warnings);
            assert!(s.warnings[0].contains(key) && s.warnings[0].contains("/p/.scrconf:"), "{}", s.warnings[0]);
            assert!(s.warnings[0].contains("database logging is off"), "{}", s.warnings[0]);
        }
    }

    #[test]
    fn syslog_names_are_checked_naming_key_and_origin() {
        let s = settings("SCR_LOG_SYSLOG_FACILITY=log_daemon\nSCR_LOG_SYSLOG_LEVEL=LOG_NOTICE\n").unwrap();
        assert_eq!((s.syslog_facility.as_str(), s.syslog_level.as_str()), ("log_daemon", "LOG_NOTICE"));
        let d = settings("").unwrap();
        assert_eq!((d.syslog_facility.as_str(), d.syslog_level.as_str()), ("LOG_LOCAL7", "LOG_INFO"));

        let e = settings("SCR_FLUSH=1\nSCR_LOG_SYSLOG_FACILITY=LOG_LOCAL9\n").unwrap_err();
        assert!(e.at.contains("/p/.scrconf:2") && e.at.contains("SCR_LOG_SYSLOG_FACILITY"), "{}", e.at);
        assert!(e.msg.contains("LOG_LOCAL9") && e.msg.contains("LOG_LOCAL7"), "{}", e.msg);
        let e = settings("SCR_LOG_SYSLOG_LEVEL=LOUD\n").unwrap_err();
        assert!(e.at.contains("SCR_LOG_SYSLOG_LEVEL") && e.msg.contains("LOG_INFO"), "{e}");
    }
}
