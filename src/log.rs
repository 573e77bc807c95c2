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
/// ranks do not interleave mid-line. Long input quoted in it is shortened by [`clip`].
pub fn emit(severity: &str, msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let msg = msg.to_string();
    let line = format!("{}{}\n", prefix(severity), clip(&msg));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Debug builds only: end this process at once at a named point of a protocol when
/// `SCRRS_TEST_CRASH=<point>` (or `<point>@<rank>`, the world rank) says so. For tests that
/// need a run killed between two steps no outside observer can time; release builds compile
/// it to nothing.
pub fn crash_point(point: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Ok(want) = std::env::var("SCRRS_TEST_CRASH") else { return };
    let (p, r) = want.split_once('@').map_or((want.as_str(), None), |(p, r)| (p, Some(r)));
    if p == point && r.is_none_or(|r| r.parse() == Ok(rank())) {
        emit("INFO", format_args!("test crash at {point}"));
        std::process::exit(9);
    }
}

/// A run of non-blank characters longer than this is shortened in messages.
const CLIP_RUN: usize = 512;
/// A message line longer than this keeps its start and end only.
const CLIP_LINE: usize = 4096;

/// Keep messages readable when they quote bad input (a 2 MB configuration value, a runaway
/// key): every run of more than 512 non-blank characters keeps its first 48 and last 8 bytes
/// around `...[N bytes]...`, and a line still longer than 4096 bytes keeps its first 2048 and
/// last 512 bytes around `...[N bytes left out]...`. Paths and ordinary values pass unchanged.
pub fn clip(text: &str) -> std::borrow::Cow<'_, str> {
    let long_run = text.split(char::is_whitespace).any(|w| w.len() > CLIP_RUN);
    let long_line = text.lines().any(|l| l.len() > CLIP_LINE);
    if !long_run && !long_line {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::new();
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut shortened = String::new();
        let mut rest = line;
        while !rest.is_empty() {
            let run_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let (run, after) = rest.split_at(run_end);
            if run.len() > CLIP_RUN {
                let tail = ceil_char(run, run.len() - 8);
                shortened.push_str(&format!(
                    "{}...[{} bytes]...{}",
                    &run[..floor_char(run, 48)],
                    run.len(),
                    &run[tail..]
                ));
            } else {
                shortened.push_str(run);
            }
            let blank_end = after.find(|c: char| !c.is_whitespace()).unwrap_or(after.len());
            shortened.push_str(&after[..blank_end]);
            rest = &after[blank_end..];
        }
        if shortened.len() > CLIP_LINE {
            let head = floor_char(&shortened, 2048);
            let tail = ceil_char(&shortened, shortened.len() - 512);
            let left_out = tail - head;
            shortened = format!("{}...[{left_out} bytes left out]...{}", &shortened[..head], &shortened[tail..]);
        }
        out.push_str(&shortened);
    }
    std::borrow::Cow::Owned(out)
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char(s: &str, i: usize) -> usize {
    (0..=i.min(s.len())).rev().find(|&j| s.is_char_boundary(j)).unwrap_or(0)
}

/// The smallest char boundary of `s` at or above `i`.
fn ceil_char(s: &str, i: usize) -> usize {
    (i..=s.len()).find(|&j| s.is_char_boundary(j)).unwrap_or(s.len())
}

/// An error the user must see (always printed).
macro_rules! scr_error {
    ($($arg:tt)*) => { $crate::log::emit("ERROR", format_args!($($arg)*)) };
}

/// A warning the user must see (always printed).
macro_rules! scr_warn {
    ($($arg:tt)*) => { $crate::log::emit("WARNING", format_args!($($arg)*)) };
}

/// Debug output printed when `SCR_DEBUG >= level`.
macro_rules! scr_debug {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::level() >= $level {
            $crate::log::emit("DEBUG", format_args!($($arg)*))
        }
    };
}

// The macros are the crate's own (nothing outside can reach `log`): used by path as
// `crate::scr_error!` or imported with `use crate::scr_warn;`, through lib.rs's re-export.
pub(crate) use {scr_debug, scr_error, scr_warn};

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
    fn clip_shortens_long_input_and_says_how_long_it_was() {
        let short = "SCR_PREFIX=/p/scratch/user/run1: expected a size";
        assert_eq!(super::clip(short), short);
        let value = "7".repeat(2 << 20);
        let msg = format!("/p/.scrconf:1: SCR_FLUSH={value}: expected a non-negative integer");
        let c = super::clip(&msg);
        assert!(c.len() < 200, "{c}");
        assert!(c.starts_with("/p/.scrconf:1: SCR_FLUSH=7777"), "{c}");
        assert!(
            c.contains(&format!("...[{} bytes]...7777777: expected a non-negative integer", value.len() + 11)),
            "{c}"
        );
        // A long value made of short words: the line keeps its start and end.
        let words = "ab ".repeat(1 << 20);
        let msg = format!("SCR_Config(\"SCR_PREFIX='{words}'\"): too long\nsecond line");
        let c = super::clip(&msg);
        assert!(c.len() < 3000 && c.contains("bytes left out]...") && c.ends_with("too long\nsecond line"), "{c}");
        // Multi-byte characters are never cut in half.
        let accents = "é".repeat(1000);
        let c = super::clip(&accents);
        assert!(c.starts_with(&"é".repeat(24)) && c.ends_with("...[2000 bytes]...éééé"), "{c}");
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
