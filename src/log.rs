//! Messages to the user: errors and warnings always (stderr), debug output at `SCR_DEBUG`
//! levels 1 (a readable summary: decisions, timings, bandwidth) and 2 (the detail).
//! Every line names the library, the rank and the node so a message in a 10,000-rank job
//! log can be traced.

use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;

static LEVEL: AtomicU8 = AtomicU8::new(0);
static RANK: AtomicI32 = AtomicI32::new(-1);
static HOST: OnceLock<String> = OnceLock::new();

/// Set the debug level (`SCR_DEBUG`).
pub fn set_level(level: u8) {
    LEVEL.store(level, Ordering::Relaxed);
}

/// The debug level in force.
pub fn level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// Record this process's world rank and node name for message prefixes.
pub fn set_identity(rank: i32, host: &str) {
    RANK.store(rank, Ordering::Relaxed);
    let _ = HOST.set(host.to_string());
}

/// This process's world rank (-1 before `SCR_Init`).
pub fn rank() -> i32 {
    RANK.load(Ordering::Relaxed)
}

/// The prefix of every message: `SCR <severity>: rank R on HOST: `.
pub fn prefix(severity: &str) -> String {
    let rank = RANK.load(Ordering::Relaxed);
    match (rank, HOST.get()) {
        (r, Some(h)) if r >= 0 => format!("SCR {severity}: rank {r} on {h}: "),
        _ => format!("SCR {severity}: "),
    }
}

/// Print one message line to stderr, unbuffered as a single write so lines from several
/// ranks do not interleave mid-line.
pub fn emit(severity: &str, msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let line = format!("{}{}\n", prefix(severity), msg);
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// An error the user must see (always printed).
#[macro_export]
macro_rules! scr_error {
    ($($arg:tt)*) => { $crate::log::emit("ERROR", format_args!($($arg)*)) };
}

/// A warning the user must see (always printed).
#[macro_export]
macro_rules! scr_warn {
    ($($arg:tt)*) => { $crate::log::emit("WARNING", format_args!($($arg)*)) };
}

/// Debug output printed when `SCR_DEBUG >= level`.
#[macro_export]
macro_rules! scr_debug {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::level() >= $level {
            $crate::log::emit("DEBUG", format_args!($($arg)*))
        }
    };
}

/// Human-readable byte count with binary units.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Bandwidth in MiB/s for `n` bytes in `secs` seconds.
pub fn mib_per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / (1024.0 * 1024.0) / secs
    } else {
        0.0
    }
}

/// Syslog facilities by name (`man openlog`), with or without the `LOG_` prefix, any case.
const FACILITIES: &[(&str, u8)] = &[
    ("KERN", 0),
    ("USER", 1),
    ("MAIL", 2),
    ("DAEMON", 3),
    ("AUTH", 4),
    ("SYSLOG", 5),
    ("LPR", 6),
    ("NEWS", 7),
    ("UUCP", 8),
    ("CRON", 9),
    ("AUTHPRIV", 10),
    ("FTP", 11),
    ("LOCAL0", 16),
    ("LOCAL1", 17),
    ("LOCAL2", 18),
    ("LOCAL3", 19),
    ("LOCAL4", 20),
    ("LOCAL5", 21),
    ("LOCAL6", 22),
    ("LOCAL7", 23),
];

/// Syslog severities (levels) by name.
const SEVERITIES: &[(&str, u8)] =
    &[("EMERG", 0), ("ALERT", 1), ("CRIT", 2), ("ERR", 3), ("WARNING", 4), ("NOTICE", 5), ("INFO", 6), ("DEBUG", 7)];

fn syslog_code(table: &[(&str, u8)], name: &str) -> Option<u8> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("LOG_").unwrap_or(&n);
    table.iter().find(|(k, _)| *k == n).map(|(_, v)| *v)
}

/// The code of a syslog facility name (`LOG_LOCAL7` -> 23).
pub fn syslog_facility(name: &str) -> Option<u8> {
    syslog_code(FACILITIES, name)
}

/// The code of a syslog severity name (`LOG_INFO` -> 6).
pub fn syslog_severity(name: &str) -> Option<u8> {
    syslog_code(SEVERITIES, name)
}

/// The accepted names of a syslog table, for error messages.
pub fn syslog_names(facility: bool) -> String {
    let t = if facility { FACILITIES } else { SEVERITIES };
    t.iter().map(|(k, _)| format!("LOG_{k}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_units() {
        assert_eq!(super::bytes(10), "10 B");
        assert_eq!(super::bytes(64 * 1024 * 1024), "64.00 MiB");
    }

    #[test]
    fn syslog_names() {
        assert_eq!(super::syslog_facility("LOG_LOCAL7"), Some(23));
        assert_eq!(super::syslog_facility("local0"), Some(16));
        assert_eq!(super::syslog_facility("LOG_USER"), Some(1));
        assert_eq!(super::syslog_facility("LOG_LOCAL8"), None);
        assert_eq!(super::syslog_severity("LOG_INFO"), Some(6));
        assert_eq!(super::syslog_severity("err"), Some(3));
        assert_eq!(super::syslog_severity("LOG_VERBOSE"), None);
        assert!(super::syslog_names(true).contains("LOG_DAEMON"));
    }
}
