//! The one table of configuration parameters: name, type, default, status and what it does.
//! Everything else (parsing, `SCR_DEBUG` listing, unknown-key warnings, the README's
//! parameter list) reads this table.

/// The type of a parameter's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `0`/`1` (also `yes`/`no`, `true`/`false`, `on`/`off`).
    Bool,
    /// A non-negative integer.
    Count,
    /// A byte size with an optional unit (`64MB`, `1GiB`, `4096`).
    Size,
    /// A non-negative floating-point number.
    Float,
    /// Free text (paths, names).
    Text,
    /// One of a fixed set of words (case-insensitive).
    Choice(&'static [&'static str]),
}

/// How far this implementation honours a parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Behaves as the SCR user guide documents.
    Implemented,
    /// Not implemented yet: setting it prints a warning saying what happens instead.
    Later(&'static str),
    /// Read by the job scripts (`scr_run`), not by the library.
    Wrapper,
    /// Will not be implemented (vendor services absent here): setting it prints a warning.
    Unsupported(&'static str),
}

#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Option<&'static str>,
    pub status: Status,
    #[expect(dead_code, reason = "the parameter's documentation, for readers of this table; nothing prints it")]
    pub doc: &'static str,
}

const fn p(name: &'static str, kind: Kind, default: Option<&'static str>, status: Status, doc: &'static str) -> Param {
    Param { name, kind, default, status, doc }
}

use Kind::*;
use Status::*;

/// Every parameter of the SCR 3 user guide (section 2.7.4) plus the ones SCR 3 reads from its
/// environment (`SCR_CONF_FILE`, `SCR_JOB_ID`, CRC switches) and this implementation's
/// `SCR_END_TIME` and `SCR_ENCODE_ASYNC`.
pub const PARAMS: &[Param] = &[
    p(
        "SCR_ENABLE",
        Bool,
        Some("1"),
        Implemented,
        "0: SCR_Init fails and every later SCR call does nothing (files stay where the application names them)",
    ),
    p("SCR_DEBUG", Count, Some("0"), Implemented, "1: readable summary (decisions, timings, bandwidth); 2: detail"),
    p("SCR_CHECKPOINT_INTERVAL", Count, Some("0"), Implemented, "SCR_Need_checkpoint returns 1 every N calls"),
    p(
        "SCR_CHECKPOINT_SECONDS",
        Count,
        Some("0"),
        Implemented,
        "minimum seconds between checkpoints for SCR_Need_checkpoint",
    ),
    p(
        "SCR_CHECKPOINT_OVERHEAD",
        Float,
        Some("0.0"),
        Implemented,
        "maximum percent of run time spent checkpointing, for SCR_Need_checkpoint",
    ),
    p("SCR_CNTL_BASE", Text, Some("/dev/shm"), Implemented, "base of the node-local control directory"),
    p(
        "SCR_HALT_EXIT",
        Bool,
        Some("0"),
        Implemented,
        "exit the run in SCR_Init / after a checkpoint when a halt condition holds",
    ),
    p(
        "SCR_HALT_SECONDS",
        Count,
        Some("0"),
        Implemented,
        "halt when fewer seconds than this remain before the allocation ends",
    ),
    p("SCR_GROUP", Text, Some("NODE"), Implemented, "default failure group"),
    p(
        "SCR_COPY_TYPE",
        Choice(&["SINGLE", "PARTNER", "XOR", "RS", "FILE"]),
        Some("XOR"),
        Implemented,
        "redundancy scheme, or FILE to use CKPT descriptors",
    ),
    p("SCR_CACHE_BASE", Text, Some("/dev/shm"), Implemented, "base of the node-local cache directory"),
    p("SCR_CACHE_SIZE", Count, Some("1"), Implemented, "datasets kept in each cache store"),
    p(
        "SCR_CACHE_BYPASS",
        Bool,
        Some("0"),
        Implemented,
        "1: write and read datasets directly in the prefix directory (default 0: use the cache)",
    ),
    p("SCR_CACHE_PURGE", Bool, Some("0"), Implemented, "delete all cached datasets in SCR_Init"),
    p("SCR_SET_SIZE", Count, Some("8"), Implemented, "minimum redundancy set size"),
    p("SCR_SET_FAILURES", Count, Some("2"), Implemented, "failures tolerated per RS set"),
    p(
        "SCR_PREFIX",
        Text,
        None,
        Implemented,
        "prefix directory on the parallel file system (default: current directory)",
    ),
    p(
        "SCR_PREFIX_SIZE",
        Count,
        Some("0"),
        Implemented,
        "checkpoints kept in the prefix (sliding window; 0 keeps all; output is never deleted)",
    ),
    p("SCR_PREFIX_PURGE", Bool, Some("0"), Implemented, "delete all datasets from the prefix in SCR_Init"),
    p("SCR_CURRENT", Text, None, Implemented, "name of the checkpoint to restart from"),
    p("SCR_DISTRIBUTE", Bool, Some("1"), Implemented, "0: do not restart from cache (cached datasets are discarded)"),
    p("SCR_FETCH", Bool, Some("1"), Implemented, "0: never fetch a checkpoint from the prefix in SCR_Init"),
    p(
        "SCR_FETCH_BYPASS",
        Bool,
        Some("0"),
        Implemented,
        "1: restart reads files in place in the prefix instead of copying them to cache",
    ),
    p("SCR_FETCH_WIDTH", Count, Some("256"), Implemented, "processes reading from the prefix at once"),
    p(
        "SCR_FLUSH",
        Count,
        Some("10"),
        Implemented,
        "flush every Nth checkpoint to the prefix (0: never, except output)",
    ),
    p(
        "SCR_FLUSH_ASYNC",
        Bool,
        Some("0"),
        Implemented,
        "1: flushes run in a background thread while the application computes (SCR_FLUSH_TYPE=PTHREAD)",
    ),
    p(
        "SCR_ENCODE_ASYNC",
        Bool,
        None,
        Implemented,
        "1: PARTNER/XOR/RS redundancy is encoded in a background thread after SCR_Complete_output returns (needs MPI_THREAD_MULTIPLE; until it is done the dataset has SINGLE protection); 0 or unset: inside SCR_Complete_output",
    ),
    p(
        "SCR_FLUSH_ASYNC_BW",
        Size,
        Some("0"),
        Implemented,
        "bytes per second each process may write to the prefix in a background flush (0: no limit)",
    ),
    p(
        "SCR_FLUSH_POSTSTAGE",
        Bool,
        Some("0"),
        Unsupported("the IBM Burst Buffer post-stage is not available"),
        "finish flushes after the job (BBAPI)",
    ),
    p(
        "SCR_FLUSH_TYPE",
        Choice(&["SYNC", "PTHREAD", "BBAPI", "DATAWARP"]),
        Some("SYNC"),
        Implemented,
        "flush transfer method: SYNC, or PTHREAD (implied by SCR_FLUSH_ASYNC=1); BBAPI and DATAWARP fall back to PTHREAD",
    ),
    p("SCR_FLUSH_WIDTH", Count, Some("256"), Implemented, "processes writing to the prefix at once"),
    p("SCR_FLUSH_ON_RESTART", Bool, Some("0"), Implemented, "flush the restarted checkpoint to the prefix in SCR_Init"),
    p(
        "SCR_GLOBAL_RESTART",
        Bool,
        Some("0"),
        Implemented,
        "flush cached checkpoints in SCR_Init and restart from the prefix",
    ),
    p(
        "SCR_RESTART_ELASTIC",
        Bool,
        Some("0"),
        Implemented,
        "1: offer checkpoints written by another number of processes (read from the prefix; a cached one is copied there in SCR_Init); 0: skip them",
    ),
    // Text, not Count: the guide documents -1 (unlimited), which a Count would refuse and fail
    // SCR_Init in every job that sets it; scr_run checks the value itself.
    p("SCR_RUNS", Text, Some("1"), Wrapper, "runs the wrapper script attempts (-1: unlimited)"),
    p("SCR_MIN_NODES", Count, None, Wrapper, "minimum nodes needed to run"),
    p("SCR_EXCLUDE_NODES", Text, None, Wrapper, "nodes to exclude from runs"),
    p("SCR_LOG_ENABLE", Bool, Some("0"), Implemented, "log SCR events (text file and syslog)"),
    p("SCR_LOG_TXT_ENABLE", Bool, Some("1"), Implemented, "log events to $SCR_PREFIX/.scr/log"),
    p("SCR_LOG_SYSLOG_ENABLE", Bool, Some("1"), Implemented, "log events to syslog"),
    p("SCR_LOG_SYSLOG_FACILITY", Text, Some("LOG_LOCAL7"), Implemented, "syslog facility (see man openlog)"),
    p("SCR_LOG_SYSLOG_LEVEL", Text, Some("LOG_INFO"), Implemented, "syslog level of event messages"),
    p("SCR_LOG_SYSLOG_PREFIX", Text, Some("SCR"), Implemented, "tag prepended to syslog messages"),
    p(
        "SCR_LOG_SYSLOG_SOCKET",
        Text,
        Some("/dev/log"),
        Implemented,
        "datagram socket of the local syslog daemon (containers may place it elsewhere)",
    ),
    p(
        "SCR_LOG_DB_ENABLE",
        Bool,
        Some("0"),
        Implemented,
        "log events to a MariaDB/MySQL database (tables of share/scr/scr_log.sql; needs SCR_LOG_ENABLE=1)",
    ),
    p("SCR_LOG_DB_DEBUG", Bool, Some("0"), Implemented, "print each database statement as it is executed"),
    p(
        "SCR_LOG_DB_HOST",
        Text,
        None,
        Implemented,
        "database server: host[:port] (port 3306 by default), [v6addr][:port], or a socket path starting with /",
    ),
    p("SCR_LOG_DB_NAME", Text, None, Implemented, "database holding the SCR log tables"),
    p("SCR_LOG_DB_USER", Text, None, Implemented, "database user (default: the user running the job)"),
    p("SCR_LOG_DB_PASS", Text, None, Implemented, "database password (never printed)"),
    p(
        "SCR_MPI_BUF_SIZE",
        Size,
        Some("262144"),
        Implemented,
        "piece size of redundancy encoding and rebuild (SCR 3: 128 KiB; 256 KiB measured best here, see BENCHMARKS.md)",
    ),
    p("SCR_FILE_BUF_SIZE", Size, Some("1048576"), Implemented, "buffer size for copies between cache and prefix"),
    p(
        "SCR_WATCHDOG_TIMEOUT",
        Count,
        None,
        Implemented,
        "seconds allowed between output phases writing to cache before the run is killed as hung",
    ),
    p(
        "SCR_WATCHDOG_TIMEOUT_PFS",
        Count,
        None,
        Implemented,
        "seconds allowed between output phases when the last one wrote to the prefix",
    ),
    p(
        "SCR_CRC_ON_COPY",
        Bool,
        None,
        Implemented,
        "unset: CRC32 of every cached file (SINGLE: in the background), checked when a restart hands it to the application; 1: also computed in SCR_Complete_output; 0: no check",
    ),
    p(
        "SCR_CRC_ON_FLUSH",
        Bool,
        Some("1"),
        Implemented,
        "compute CRC32 during flush (recorded in the prefix, checked on fetch)",
    ),
    p(
        "SCR_CRC_ON_DELETE",
        Bool,
        Some("0"),
        Later("not implemented: cached files are deleted without a CRC32 check"),
        "check CRC32 before deleting files",
    ),
    p("SCR_CONF_FILE", Text, None, Implemented, "user configuration file (default $SCR_PREFIX/.scrconf)"),
    p("SCR_JOB_ID", Text, None, Implemented, "job id when no resource manager provides one"),
    p("SCR_JOB_NAME", Text, None, Implemented, "job name recorded with datasets"),
    p("SCR_USER_NAME", Text, None, Implemented, "user name (default: $USER, then the account database)"),
    p(
        "SCR_PRELOAD_PATTERNS",
        Text,
        None,
        Implemented,
        "transparent mode: comma-separated checkpoint patterns relative to the prefix (!pattern excludes)",
    ),
    p(
        "SCR_PRELOAD_SHARED",
        Text,
        None,
        Implemented,
        "transparent mode: comma-separated patterns of checkpoint files several ranks write (N-to-1 with pwrite), written once in the prefix",
    ),
    p(
        "SCR_PRELOAD_TIMING",
        Bool,
        Some("0"),
        Implemented,
        "transparent mode: at MPI_Finalize rank 0 reports the calls and the time the preload's hooks, sync points, start and SCR_Finalize spent in SCR, per hook over every rank",
    ),
    p("SCR_END_TIME", Count, None, Implemented, "allocation end time, seconds since the epoch (for SCR_HALT_SECONDS)"),
];

/// Keys that start a multi-item entry, with the sub-keys each accepts (`None`: any).
pub const MULTI: &[(&str, Option<&[&str]>)] = &[
    ("STORE", Some(&["GROUP", "COUNT", "ENABLED", "MKDIR", "FLUSH"])),
    ("CKPT", Some(&["INTERVAL", "GROUP", "STORE", "TYPE", "SET_SIZE", "SET_FAILURES", "BYPASS", "OUTPUT"])),
    ("GROUPS", None),
    ("PRELOAD", Some(&["TYPE", "NAME", "RANKS"])),
];

/// Look a parameter up by name.
pub fn find(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name == name)
}

/// The sub-keys a multi-item key accepts, if `name` is one.
pub fn multi(name: &str) -> Option<Option<&'static [&'static str]>> {
    MULTI.iter().find(|(k, _)| *k == name).map(|(_, s)| *s)
}

/// Parse a size: digits with an optional unit (B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB;
/// units are powers of 1024, as SCR's parser).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return None,
    };
    if num.contains('.') {
        let v: f64 = num.parse().ok()?;
        (v >= 0.0).then_some((v * mult as f64) as u64)
    } else {
        num.parse::<u64>().ok()?.checked_mul(mult)
    }
}

/// Parse a boolean.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Check `value` against `kind`; the error says what was expected.
pub fn check(kind: Kind, value: &str) -> Result<(), Expected> {
    let ok = match kind {
        Bool => parse_bool(value).is_some(),
        Count => value.trim().parse::<u64>().is_ok(),
        Size => parse_size(value).is_some(),
        Float => value.trim().parse::<f64>().map(|f| f >= 0.0 && f.is_finite()).unwrap_or(false),
        Text => true,
        Choice(words) => words.iter().any(|w| w.eq_ignore_ascii_case(value.trim())),
    };
    if ok {
        Ok(())
    } else {
        Err(Expected(kind))
    }
}

/// A value that is not of its parameter's [`Kind`]: displays what was expected.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expected(pub Kind);

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Bool => f.write_str("expected 0 or 1"),
            Count => f.write_str("expected a non-negative integer"),
            Size => f.write_str("expected a size such as 1048576, 64KB or 2GiB"),
            Float => f.write_str("expected a non-negative number"),
            Text => f.write_str("expected text"),
            Choice(words) => write!(f, "expected one of {}", words.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64KB"), Some(65536));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        assert_eq!(parse_size("1.5M"), Some(1572864));
        assert_eq!(parse_size("12XB"), None);
        assert_eq!(parse_size("-1"), None);
    }

    #[test]
    fn table_is_consistent() {
        for (i, p) in PARAMS.iter().enumerate() {
            assert!(PARAMS[i + 1..].iter().all(|q| q.name != p.name), "duplicate {}", p.name);
            if let Some(d) = p.default {
                check(p.kind, d).unwrap_or_else(|e| panic!("{} default {d}: {e}", p.name));
            }
        }
    }

    #[test]
    fn kinds_reject_bad_values() {
        assert!(check(Kind::Count, "ten").is_err());
        assert!(check(Kind::Bool, "2").is_err());
        assert!(check(Kind::Choice(&["SINGLE"]), "single").is_ok());
        assert!(check(Kind::Float, "-1").is_err());
    }
}
