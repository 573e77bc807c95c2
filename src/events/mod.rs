//! The event log (`SCR_LOG_ENABLE=1`): one record per SCR event (a run starts or ends, a
//! checkpoint or output phase starts or ends, a flush, fetch, rebuild, restart, halt), written
//! to the text log `<prefix>/.scr/log` (`SCR_LOG_TXT_ENABLE`), to syslog
//! (`SCR_LOG_SYSLOG_ENABLE`) and to a MariaDB/MySQL database (`SCR_LOG_DB_ENABLE`, rank 0 of a
//! run and the commands only; see `db.rs` for the tables and why a slow or absent server never
//! slows the application). `scr_interval` reads the text log back ([`parse_line`]).
//!
//! A text line:
//!
//! ```text
//! 2026-03-01T14:02:11.204518+01:00 CKPT_END jobid=4711 host=n0 dset=7 name=ckpt.7 valid=1 bytes=4194304 files=4 secs=0.812345 mibps=4.9 scheme=XOR
//! ```
//!
//! local time with offset and microseconds, the event name, `jobid` and `host`, then the
//! event's fields as `key=value`; a value with a space, a quote, a backslash, `=` or a control
//! character (or an empty one) is double-quoted with backslash escapes. Seconds carry 6
//! decimals ([`Secs`]), bandwidths in MiB/s 1 ([`Mibps`]).
//!
//! Syslog gets the same text without the time stamp, as an RFC 3164 datagram
//! `<PRI>Mmm dd hh:mm:ss host TAG[pid]: EVENT jobid=... host=... key=value ...` sent over an
//! unbound Unix datagram socket to `SCR_LOG_SYSLOG_SOCKET` (default `/dev/log`); PRI is
//! facility*8 + severity (`SCR_LOG_SYSLOG_FACILITY`, `SCR_LOG_SYSLOG_LEVEL`), TAG is
//! `SCR_LOG_SYSLOG_PREFIX`. Sending waits at most [`SYSLOG_TIMEOUT`]; a syslog daemon that does
//! not take a message in that time is given up for the rest of the process (one warning), so a
//! hung daemon never hangs the application.
//!
//! Crash and concurrency story: the text log is only ever appended to, never rewritten. Each
//! process opens it once (`O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC`, on its first record) and
//! writes each line with one `write(2)` while holding `flock(LOCK_EX)` on that descriptor:
//! ranks, concurrent runs on the same prefix and commands all append whole lines, on local file
//! systems (where an `O_APPEND` write is atomic) as on network ones (where the lock serialises
//! appenders). A forked child shares its parent's descriptor and lock (one open file
//! description), so the two are kept apart by the single `O_APPEND` write alone. A process
//! killed mid-write leaves at most one partial last line, which readers skip with a warning.
//! Failing to open or write the log, or to reach syslog, warns once and never fails the run.
//!
//! An [`EventLog`] is a cheap handle (`Arc` inside, `Send + Sync`, no global state), so a
//! background thread or a forked child may hold a clone; threads of one process share the
//! descriptor too and are kept apart by the single `O_APPEND` write. The runtime's log is
//! enabled on rank 0 only ([`EventLog::disabled`] elsewhere), so call sites need no rank test:
//! values recorded are rank 0's (collective results where it matters). Events another rank
//! may be alone to see (a background flush it published, its watchdog firing) go through an
//! [`EventLog::quiet`] log on that rank.

use std::fmt::{self, Display, Write as _};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::Settings;
use crate::scr_warn;

mod db;
mod syslog;
pub(crate) use db::DRAIN_TIMEOUT as DB_DRAIN_TIMEOUT;
use syslog::Syslog;

/// How long a syslog send may block before syslog is given up for this process.
pub(crate) const SYSLOG_TIMEOUT: Duration = Duration::from_secs(2);

/// A handle on the event log; clones share the open file and socket.
#[derive(Clone, Default)]
pub(crate) struct EventLog {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    jobid: String,
    host: String,
    text: Option<TextLog>,
    syslog: Option<Syslog>,
    db: Option<db::Db>,
}

struct TextLog {
    path: PathBuf,
    /// Opened on the first record; `None` after a failure (already warned about).
    file: OnceLock<Option<File>>,
    warned: AtomicBool,
}

/// Seconds, printed with 6 decimals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Secs(pub f64);

impl Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}", self.0)
    }
}

/// A bandwidth in MiB/s, printed with 1 decimal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mibps(pub f64);

impl Mibps {
    /// The bandwidth of `bytes` moved in `secs` seconds (0 for no time).
    pub(crate) fn of(bytes: u64, secs: f64) -> Mibps {
        Mibps(crate::log::mib_per_sec(bytes, secs))
    }
}

impl Display for Mibps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}", self.0)
    }
}

/// `0` or `1`, as the log spells booleans.
pub(crate) fn flag(b: bool) -> u8 {
    u8::from(b)
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").field("enabled", &self.enabled()).finish()
    }
}

impl EventLog {
    /// A log that records nothing.
    pub(crate) fn disabled() -> EventLog {
        EventLog { inner: None }
    }

    /// The log `settings` ask for: the text log in `prefix_scr_dir/log` and syslog, each if
    /// enabled, or a disabled log. A syslog socket that is missing is reported here, once.
    /// A command's log (`scr_list_down_nodes`): its database rows belong to the job, not to a
    /// run.
    pub(crate) fn new(settings: &Settings, prefix_scr_dir: &Path, jobid: &str, host: &str) -> EventLog {
        Self::build(settings, prefix_scr_dir, jobid, host, Some(false))
    }

    /// Rank 0's log of a run (`SCR_Init`): with database logging, a `runs` row is made for it,
    /// which `RUN_START` and `RUN_END` complete.
    pub(crate) fn for_run(settings: &Settings, prefix_scr_dir: &Path, jobid: &str, host: &str) -> EventLog {
        Self::build(settings, prefix_scr_dir, jobid, host, Some(true))
    }

    /// The same log for a rank other than 0, which records only what it alone can see (the
    /// completion of a background flush it published): no warning about a missing syslog
    /// socket, which rank 0 reports once.
    /// Only rank 0 logs to the database, so this log does not.
    pub(crate) fn quiet(settings: &Settings, prefix_scr_dir: &Path, jobid: &str, host: &str) -> EventLog {
        Self::build(settings, prefix_scr_dir, jobid, host, None)
    }

    /// `db_run`: `None` for a quiet log (no warnings, no database), else whether the
    /// database rows belong to a run.
    fn build(settings: &Settings, prefix_scr_dir: &Path, jobid: &str, host: &str, db_run: Option<bool>) -> EventLog {
        let warn = db_run.is_some();
        let want_db = settings.log_db.is_some() && db_run.is_some();
        if !settings.log_enable || !(settings.log_txt || settings.log_syslog || want_db) {
            return EventLog::disabled();
        }
        let text = settings.log_txt.then(|| TextLog {
            path: prefix_scr_dir.join("log"),
            file: OnceLock::new(),
            warned: AtomicBool::new(false),
        });
        let syslog = if settings.log_syslog { Syslog::open(settings, warn) } else { None };
        let db = match (&settings.log_db, db_run) {
            (Some(cfg), Some(run)) => db::Db::start(
                cfg,
                db::Origin {
                    jobid: jobid.to_string(),
                    user: crate::identity::user_name(),
                    jobname: crate::identity::job_name(),
                    prefix: settings.prefix.display().to_string(),
                    host: host.to_string(),
                    run,
                },
            ),
            _ => None,
        };
        if text.is_none() && syslog.is_none() && db.is_none() {
            return EventLog::disabled();
        }
        EventLog { inner: Some(Arc::new(Inner { jobid: jobid.to_string(), host: host.to_string(), text, syslog, db })) }
    }

    /// The end of a run: wait (at most [`DB_DRAIN_TIMEOUT`]) until the events queued for the
    /// database are written. Nothing to do without database logging.
    pub(crate) fn drain(&self) {
        if let Some(db) = self.inner.as_ref().and_then(|i| i.db.as_ref()) {
            db.drain(DB_DRAIN_TIMEOUT);
        }
    }

    /// Whether records go anywhere.
    pub(crate) fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Record `event` with its fields (in order).
    pub(crate) fn record(&self, event: &str, fields: &[(&str, &dyn Display)]) {
        let Some(inner) = &self.inner else {
            return;
        };
        // The library's own I/O: a transparent-mode hook must pass it straight through.
        let _inside = crate::reentry::Inside::enter();
        let usecs = crate::identity::now_usecs();
        if inner.text.is_some() || inner.syslog.is_some() {
            let body = inner.body(event, fields);
            if let Some(t) = &inner.text {
                t.append(&format!("{} {body}\n", timestamp(usecs)));
            }
            if let Some(s) = &inner.syslog {
                s.send(&body, &inner.host);
            }
        }
        if let Some(db) = &inner.db {
            let fields = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            db.send(db::Row { usecs, event: event.to_string(), fields });
        }
    }

    /// `FLUSH_START`: a flush of dataset `dset` begins (`mode` is `sync` or `async`).
    pub(crate) fn flush_start(&self, dset: u64, name: &str, bytes: u64, mode: &str) {
        self.record("FLUSH_START", &[("mode", &mode), ("dset", &dset), ("name", &name), ("bytes", &bytes)]);
    }

    /// `FLUSH_END`: dataset `dset` is in the prefix after `secs` seconds.
    pub(crate) fn flush_end(&self, dset: u64, name: &str, bytes: u64, files: u64, secs: f64, mode: &str) {
        self.record(
            "FLUSH_END",
            &[
                ("dset", &dset),
                ("name", &name),
                ("bytes", &bytes),
                ("files", &files),
                ("secs", &Secs(secs)),
                ("mibps", &Mibps::of(bytes, secs)),
                ("mode", &mode),
            ],
        );
    }

    /// `FLUSH_FAIL`: the flush of dataset `dset` failed.
    pub(crate) fn flush_fail(&self, dset: u64, name: &str, why: &dyn Display, mode: &str) {
        self.record("FLUSH_FAIL", &[("dset", &dset), ("name", &name), ("why", why), ("mode", &mode)]);
    }
}

impl Inner {
    /// `EVENT jobid=.. host=.. key=value ...` (no time stamp, no newline).
    fn body(&self, event: &str, fields: &[(&str, &dyn Display)]) -> String {
        let mut out = String::with_capacity(128);
        out.push_str(event);
        let mut push = |k: &str, v: &dyn Display| {
            out.push(' ');
            out.push_str(k);
            out.push('=');
            push_value(&mut out, &v.to_string());
        };
        push("jobid", &self.jobid);
        push("host", &self.host);
        for (k, v) in fields {
            push(k, *v);
        }
        out
    }
}

impl TextLog {
    fn append(&self, line: &str) {
        let file = self.file.get_or_init(|| {
            let opened = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .mode(0o644)
                .open(&self.path);
            match opened {
                Ok(f) => Some(f),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    self.warn(&format!(
                        "the event log {} is a symbolic link; refusing to append through it (remove it)",
                        self.path.display()
                    ));
                    None
                }
                Err(e) => {
                    self.warn(&format!("cannot open the event log {}: {e}", self.path.display()));
                    None
                }
            }
        });
        if let Some(f) = file {
            if let Err(e) = append_locked(f, line.as_bytes()) {
                self.warn(&format!("cannot write to the event log {}: {e}", self.path.display()));
            }
        }
    }

    fn warn(&self, msg: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            scr_warn!("{msg}; events are not logged there (the run goes on)");
        }
    }
}

/// Append `buf` as one `write(2)` under `flock(LOCK_EX)` (a short write is completed while
/// the lock is still held). On a file system without `flock` (some parallel file systems
/// mounted without lock support) the single `O_APPEND` write goes ahead unlocked.
fn append_locked(f: &File, buf: &[u8]) -> io::Result<()> {
    let locked = loop {
        match crate::sys::flock(f.as_fd(), libc::LOCK_EX) {
            Ok(()) => break true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break false,
        }
    };
    let r = (&*f).write_all(buf);
    if locked {
        let _ = crate::sys::flock(f.as_fd(), libc::LOCK_UN);
    }
    r
}

/// Local ISO 8601 time with microseconds and offset: `2026-03-01T14:02:11.204518+01:00`.
pub(crate) fn timestamp(usecs: i64) -> String {
    crate::identity::iso_local(usecs, true)
}

/// Append `v`, double-quoted with backslash escapes if it needs quoting.
fn push_value(out: &mut String, v: &str) {
    let plain = !v.is_empty() && !v.chars().any(|c| c == ' ' || c == '"' || c == '=' || c == '\\' || c.is_control());
    if plain {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One parsed line of the text log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The time stamp as written.
    pub(crate) time: String,
    /// The event name (`CKPT_START`, `FLUSH_END`, ...).
    pub name: String,
    /// `key=value` fields in order (including `jobid` and `host`), values unescaped.
    pub(crate) fields: Vec<(String, String)>,
}

impl Event {
    /// The value of field `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Field `key` as a number.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite())
    }
}

/// What is wrong with one line of the text log ([`parse_line`]): the part of the line at
/// fault (the time stamp, the event name, the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line ends after the time stamp.
    #[error("no event name after the time stamp")]
    NoName,
    /// The line does not start with a time stamp.
    #[error("{time:?} is not a time stamp")]
    Time {
        /// What stands where the time stamp should.
        time: String,
    },
    /// The word after the time stamp is not an event name (upper-case letters and `_`).
    #[error("{name:?} is not an event name")]
    Name {
        /// The word.
        name: String,
    },
    /// A field without `=`.
    #[error("{rest:?}: expected key=value")]
    NoField {
        /// The rest of the line from that field on.
        rest: String,
    },
    /// An empty field name, or one with a space or a quote.
    #[error("{key:?} is not a field name")]
    FieldName {
        /// The name.
        key: String,
    },
    /// Field `key`'s value is malformed; `why` says how.
    #[error("field {key}: {why}")]
    Value {
        /// The field.
        key: String,
        /// What is wrong with its value.
        why: &'static str,
    },
}

/// Parse one line of the text log, or say what is wrong with it.
pub fn parse_line(line: &str) -> Result<Event, LineError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let (time, rest) = line.split_once(' ').ok_or(LineError::NoName)?;
    if time.len() < 19 || !time.as_bytes()[..4].iter().all(u8::is_ascii_digit) || time.as_bytes()[10] != b'T' {
        return Err(LineError::Time { time: time.to_string() });
    }
    let (name, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return Err(LineError::Name { name: name.to_string() });
    }
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').ok_or_else(|| LineError::NoField { rest: rest.to_string() })?;
        if key.is_empty() || key.contains([' ', '"']) {
            return Err(LineError::FieldName { key: key.to_string() });
        }
        let bad = |why: &'static str| LineError::Value { key: key.to_string(), why };
        let (value, after) = if let Some(q) = after.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let end = loop {
                let Some((i, c)) = chars.next() else {
                    return Err(bad("unterminated quoted value"));
                };
                match c {
                    '"' => break i + 1,
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => v.push('\n'),
                        Some('r') => v.push('\r'),
                        Some('t') => v.push('\t'),
                        Some('u') => {
                            let tail = &q[chars.offset()..];
                            let close = tail.find('}').filter(|_| tail.starts_with('{'));
                            let code =
                                close.and_then(|c| u32::from_str_radix(&tail[1..c], 16).ok()).and_then(char::from_u32);
                            let (Some(code), Some(close)) = (code, close) else {
                                return Err(bad("bad \\u escape"));
                            };
                            v.push(code);
                            for _ in 0..=close {
                                chars.next();
                            }
                        }
                        Some(c) => v.push(c),
                        None => return Err(bad("unterminated quoted value")),
                    },
                    c => v.push(c),
                }
            };
            (v, &q[end..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        let after = match after.strip_prefix(' ') {
            Some(a) => a,
            None if after.is_empty() => after,
            None => return Err(bad("a space must follow the value")),
        };
        fields.push((key.to_string(), value));
        rest = after;
    }
    Ok(Event { time: time.to_string(), name: name.to_string(), fields })
}

#[cfg(test)]
mod tests {
    use super::syslog::syslog_message;
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn settings(dir: &Path, txt: bool, syslog: bool) -> Settings {
        let mut w = Vec::new();
        let text = format!(
            "SCR_LOG_ENABLE=1\nSCR_LOG_TXT_ENABLE={}\nSCR_LOG_SYSLOG_ENABLE={}\nSCR_LOG_SYSLOG_SOCKET={}\n",
            u8::from(txt),
            u8::from(syslog),
            dir.join("syslog.sock").display()
        );
        let layer = crate::config::parse_file_text(&text, Path::new("/t"), true, &mut w).unwrap();
        Settings::from_resolved(&crate::config::resolve_layers(vec![layer], w), dir.to_path_buf()).unwrap()
    }

    #[test]
    fn values_are_quoted_only_when_needed_and_parse_back() {
        let tricky = "a b=\"c\"\\d\n\u{1}";
        let log = EventLog {
            inner: Some(Arc::new(Inner { jobid: "j 1".into(), host: "h".into(), text: None, syslog: None, db: None })),
        };
        let body = log.inner.as_ref().unwrap().body(
            "CKPT_END",
            &[("name", &tricky), ("secs", &Secs(1.5)), ("mibps", &Mibps(2.25)), ("empty", &""), ("n", &7)],
        );
        assert_eq!(
            body,
            "CKPT_END jobid=\"j 1\" host=h name=\"a b=\\\"c\\\"\\\\d\\n\\u{1}\" secs=1.500000 mibps=2.2 empty=\"\" n=7"
        );
        let e = parse_line(&format!("{} {body}", timestamp(1_700_000_000_123_456))).unwrap();
        assert_eq!(e.name, "CKPT_END");
        assert_eq!(e.get("jobid"), Some("j 1"));
        assert_eq!(e.get("name"), Some(tricky));
        assert_eq!(e.get("empty"), Some(""));
        assert_eq!(e.num("secs"), Some(1.5));
        assert_eq!(e.num("n"), Some(7.0));
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            "",
            "garbage",
            "2026-01-01T00:00:00.000000+00:00",
            "2026-01-01T00:00:00.000000+00:00 lower x=1",
            "2026-01-01T00:00:00.000000+00:00 EV x",
            "2026-01-01T00:00:00.000000+00:00 EV x=\"open",
            "2026-01-01T00:00:00.000000+00:00 EV x=\"a\"b",
            "not-a-time EV x=1",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
        assert!(parse_line("2026-01-01T00:00:00.000000+00:00 RUN_END").is_ok());
    }

    #[test]
    fn time_stamps_are_local_iso_with_micros_and_offset() {
        let t = timestamp(1_700_000_000_000_042);
        assert_eq!(t.len(), "2023-11-14T22:13:20.000042+00:00".len(), "{t}");
        assert!(t.contains(".000042") && t.as_bytes()[10] == b'T', "{t}");
        let m = syslog_message(190, 1_700_000_000, "n0", "SCR", 42, "RUN_START x=1");
        assert!(m.starts_with("<190>Nov 1") && m.ends_with(" n0 SCR[42]: RUN_START x=1"), "{m}");
        let m = syslog_message(13, 1_699_000_000, "n0", "SCR", 1, "E");
        assert_eq!(&m[..9], "<13>Nov  ", "a one-digit day is padded to two columns: {m}");
    }

    #[test]
    fn disabled_unless_enabled() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!EventLog::disabled().enabled());
        let mut s = settings(dir.path(), true, false);
        s.log_enable = false;
        assert!(!EventLog::new(&s, dir.path(), "j", "h").enabled());
        s.log_enable = true;
        let log = EventLog::new(&s, dir.path(), "j", "h");
        assert!(log.enabled());
        log.record("RUN_START", &[("ranks", &4)]);
        let text = std::fs::read_to_string(dir.path().join("log")).unwrap();
        let e = parse_line(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            (e.name.as_str(), e.get("jobid"), e.get("host"), e.get("ranks")),
            ("RUN_START", Some("j"), Some("h"), Some("4"))
        );
    }

    #[test]
    fn unwritable_log_and_missing_socket_never_fail() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), true, true);
        // no syslog socket there, and the log directory does not exist
        let log = EventLog::new(&s, &dir.path().join("missing"), "j", "h");
        assert!(log.enabled());
        for _ in 0..3 {
            log.record("RUN_START", &[]);
        }
        assert!(!dir.path().join("missing").exists());
    }

    #[test]
    fn syslog_datagrams() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), false, true);
        let server = UnixDatagram::bind(dir.path().join("syslog.sock")).unwrap();
        let log = EventLog::new(&s, dir.path(), "j", "n7");
        log.flush_start(3, "ckpt 3", 1024, "sync");
        let mut buf = [0u8; 2048];
        let n = server.recv(&mut buf).unwrap();
        let msg = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(msg.starts_with("<190>"), "LOG_LOCAL7*8 + LOG_INFO: {msg}");
        let tail = format!(
            " n7 SCR[{}]: FLUSH_START jobid=j host=n7 mode=sync dset=3 name=\"ckpt 3\" bytes=1024",
            std::process::id()
        );
        assert!(msg.ends_with(&tail), "{msg}");
    }

    const CHILD_ENV: &str = "SCR_EVENTS_TEST_APPEND_DIR";
    const THREADS: usize = 4;
    const LINES: usize = 1000;

    fn pad() -> String {
        "x".repeat(300)
    }

    /// The writer half of the test below; a no-op unless started by it.
    #[test]
    fn concurrent_append_child() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let dir = PathBuf::from(dir);
        let log = EventLog::new(&settings(&dir, true, false), &dir, "j", "h");
        let pad = pad();
        let p = std::process::id();
        std::thread::scope(|sc| {
            for t in 0..THREADS {
                let (log, pad) = (log.clone(), &pad);
                sc.spawn(move || {
                    for i in 0..LINES {
                        log.record("TEST", &[("p", &p), ("t", &t), ("i", &i), ("pad", pad)]);
                    }
                });
            }
        });
    }

    /// Processes (this test binary again) and threads appending at once: every line whole,
    /// none lost.
    #[test]
    fn concurrent_appends_keep_every_line_whole() {
        const PROCS: usize = 3;
        let dir = tempfile::tempdir().unwrap();
        let children: Vec<std::process::Child> = (0..PROCS)
            .map(|_| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "events::tests::concurrent_append_child", "--test-threads=1", "--quiet"])
                    .env(CHILD_ENV, dir.path())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let text = std::fs::read_to_string(dir.path().join("log")).unwrap();
        let pad = pad();
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let e = parse_line(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(e.get("pad"), Some(pad.as_str()), "{line}");
            let key = [e.get("p"), e.get("t"), e.get("i")].map(|v| v.unwrap().to_string());
            assert!(seen.insert(key), "duplicate {line}");
        }
        assert_eq!(seen.len(), PROCS * THREADS * LINES);
    }
}
