//! The database side of the event log (`SCR_LOG_DB_ENABLE=1`): every event also becomes a row
//! of a MariaDB/MySQL database laid out by `share/scr/scr_log.sql`, through the pure-Rust
//! `mysql` client (no C library, no TLS).
//!
//! Tables: `jobs` (one row per user, job id and prefix: a job's runs share it), `runs` (one per
//! `SCR_Init` .. `SCR_Finalize`: node of rank 0, ranks, nodes, version, start, end, seconds and
//! end reason) and `events` (one per event: time, type, dataset id and name, bytes, files,
//! seconds, MiB/s, status `ok`/`failed` where the event has an outcome, and the event's other
//! fields as `key=value` in `note`, as the text log writes them). Times are UTC, to the
//! microsecond.
//!
//! Off the critical path: [`Db::send`] only puts the event on a bounded queue
//! ([`QUEUE_LEN`]); one background thread connects (with [`TIMEOUT`] for the connection and
//! for each read and write), creates the job and run rows and writes the events in order. A
//! server that is down, refuses the login, lacks the tables or stops answering costs one
//! warning naming the server and the error, after which the thread ends and database logging
//! is off for the rest of the process; a full queue (a slow server) drops events with one
//! warning. [`Db::drain`] (at the end of a run) waits at most [`DRAIN_TIMEOUT`] for the queue
//! to empty. A forked child's copy sends nothing (the thread lives in the parent only).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, Params, Value};

use crate::config::{DbAddr, DbSettings};
use crate::scr_warn;

/// Events waiting for the database at most; more are dropped (one warning).
pub(crate) const QUEUE_LEN: usize = 4096;
/// Connection, read and write time-out of the database client.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// How long the end of a run waits for queued events to reach the database.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What the job and run rows say about this process.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub jobid: String,
    pub user: String,
    pub jobname: String,
    pub prefix: String,
    pub host: String,
    /// Whether this process is a run (`SCR_Init`): a `runs` row is made; a command's events
    /// have no run.
    pub run: bool,
}

/// One event for the database: time (µs since the epoch), type and fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub usecs: i64,
    pub event: String,
    pub fields: Vec<(String, String)>,
}

enum Msg {
    Event(Row),
    /// Answer when every earlier message has been handled.
    Drain(SyncSender<()>),
}

/// The sending half: cheap to call, never blocks.
pub(super) struct Db {
    tx: SyncSender<Msg>,
    pid: u32,
    server: String,
    full: AtomicBool,
    /// Whether a warning that database logging is off was given (by the writer giving up, or
    /// by the end of the run not waiting longer): one per process.
    warned: Arc<AtomicBool>,
}

impl Db {
    /// Start the background writer for `cfg`.
    pub(super) fn start(cfg: &DbSettings, origin: Origin) -> Option<Db> {
        let (tx, rx) = sync_channel(QUEUE_LEN);
        let server = describe(cfg);
        let (c, s) = (cfg.clone(), server.clone());
        let warned = Arc::new(AtomicBool::new(false));
        let w = Arc::clone(&warned);
        let spawned = std::thread::Builder::new().name("scr-log-db".into()).spawn(move || {
            // The library's own I/O: transparent-mode hooks pass it straight through.
            let _inside = crate::reentry::Inside::enter();
            writer(&c, &s, &origin, rx, &w)
        });
        if let Err(e) = spawned {
            scr_warn!("cannot start the database logging thread for {server}: {e}; database logging is off");
            return None;
        }
        Some(Db { tx, pid: std::process::id(), server, full: AtomicBool::new(false), warned })
    }

    /// Queue `row`; a full queue drops it (one warning), a writer that gave up ignores it.
    pub(super) fn send(&self, row: Row) {
        if std::process::id() != self.pid {
            return;
        }
        if let Err(TrySendError::Full(_)) = self.tx.try_send(Msg::Event(row)) {
            if !self.full.swap(true, Ordering::Relaxed) {
                scr_warn!(
                    "the database {} is not keeping up: {QUEUE_LEN} events are waiting; further events are not \
                     logged there until it catches up (the run goes on)",
                    self.server
                );
            }
        }
    }

    /// Wait at most `timeout` for every queued event to be written (or given up).
    pub(super) fn drain(&self, timeout: Duration) {
        if std::process::id() != self.pid {
            return;
        }
        let (ack, done) = sync_channel(1);
        let deadline = std::time::Instant::now() + timeout;
        let mut msg = Msg::Drain(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(m)) => {
                    if std::time::Instant::now() >= deadline {
                        return self.late();
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = done.recv_timeout(left) {
            self.late();
        }
    }

    fn late(&self) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            scr_warn!(
                "the database {} did not take this run's last events within {} s; they are not logged there, \
                 and database logging is off for the rest of this process (the text log and syslog go on as \
                 configured)",
                self.server,
                DRAIN_TIMEOUT.as_secs()
            );
        }
    }
}

/// `database NAME at ADDR as USER`, for messages (no password).
fn describe(cfg: &DbSettings) -> String {
    let key = if matches!(cfg.addr, DbAddr::Socket(_)) { "socket" } else { "server" };
    format!("{} on the {key} {} (SCR_LOG_DB_HOST) as user {}", cfg.name, cfg.addr, cfg.user)
}

/// The background thread: connect, make the job and run rows, write events until the
/// senders are gone. Any database error ends it with one warning.
fn writer(cfg: &DbSettings, server: &str, origin: &Origin, rx: Receiver<Msg>, warned: &AtomicBool) {
    let started = crate::identity::now_usecs();
    let mut session = match Session::open(cfg, origin, started) {
        Ok(s) => s,
        Err(e) => return give_up(server, &e, &rx, warned),
    };
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Drain(ack) => {
                let _ = ack.try_send(());
            }
            Msg::Event(row) => {
                if let Err(e) = session.event(&row) {
                    return give_up(server, &e, &rx, warned);
                }
            }
        }
    }
}

fn give_up(server: &str, e: &mysql::Error, rx: &Receiver<Msg>, warned: &AtomicBool) {
    // (the end of the run may have said so already, having waited long enough)
    if !warned.swap(true, Ordering::Relaxed) {
        scr_warn!(
            "cannot log SCR events to the database {server}: {e}; database logging is off for the rest of \
             this process (the text log and syslog go on as configured)"
        );
    }
    // Answer drains already queued; later sends find the queue closed.
    let pending: VecDeque<Msg> = rx.try_iter().collect();
    for m in pending {
        if let Msg::Drain(ack) = m {
            let _ = ack.try_send(());
        }
    }
}

/// An open connection with this process's job and run rows.
struct Session {
    conn: Conn,
    debug: bool,
    job_id: u64,
    run_id: Option<u64>,
}

impl Session {
    fn open(cfg: &DbSettings, origin: &Origin, started: i64) -> mysql::Result<Session> {
        let mut opts = OptsBuilder::new()
            .user(Some(&cfg.user))
            .pass(cfg.pass.as_deref())
            .db_name(Some(&cfg.name))
            .prefer_socket(false)
            .tcp_connect_timeout(Some(TIMEOUT))
            .read_timeout(Some(TIMEOUT))
            .write_timeout(Some(TIMEOUT))
            .stmt_cache_size(8);
        opts = match &cfg.addr {
            DbAddr::Socket(p) => opts.socket(Some(p.display().to_string())),
            DbAddr::Tcp { host, port } => opts.ip_or_hostname(Some(host)).tcp_port(*port),
        };
        let conn = Conn::new(opts)?;
        let mut s = Session { conn, debug: cfg.debug, job_id: 0, run_id: None };
        let time = utc(started);
        s.exec(
            "INSERT INTO jobs (jobid, username, jobname, prefix, start) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)",
            vec![
                origin.jobid.clone().into(),
                origin.user.clone().into(),
                origin.jobname.clone().into(),
                origin.prefix.clone().into(),
                time.clone(),
            ],
        )?;
        s.job_id = s.conn.last_insert_id();
        if origin.run {
            s.exec(
                "INSERT INTO runs (job_id, host, pid, start) VALUES (?, ?, ?, ?)",
                vec![s.job_id.into(), origin.host.clone().into(), std::process::id().into(), time],
            )?;
            s.run_id = Some(s.conn.last_insert_id());
        }
        Ok(s)
    }

    fn exec(&mut self, sql: &str, params: Vec<Value>) -> mysql::Result<()> {
        if self.debug {
            let shown: Vec<String> = params.iter().map(|v| v.as_sql(false)).collect();
            crate::log::emit("INFO", format_args!("SCR_LOG_DB_DEBUG: {sql} [{}]", shown.join(", ")));
        }
        self.conn.exec_drop(sql, Params::Positional(params))
    }

    fn event(&mut self, row: &Row) -> mysql::Result<()> {
        let cols = columns(row);
        let time = utc(row.usecs);
        let run: Value = self.run_id.into();
        match (row.event.as_str(), self.run_id) {
            ("RUN_START", Some(id)) => self.exec(
                "UPDATE runs SET ranks = ?, nodes = ?, version = ? WHERE id = ?",
                vec![field_u64(row, "ranks"), field_u64(row, "nodes"), field_text(row, "version"), id.into()],
            )?,
            ("RUN_END", Some(id)) => self.exec(
                "UPDATE runs SET end = ?, secs = ?, end_reason = ? WHERE id = ?",
                vec![time.clone(), cols.secs.clone(), field_text(row, "reason"), id.into()],
            )?,
            _ => {}
        }
        self.exec(
            "INSERT INTO events (job_id, run_id, time, type, dset_id, dset_name, bytes, files, secs, mibps, status, \
             note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            vec![
                self.job_id.into(),
                run,
                time,
                row.event.clone().into(),
                cols.dset_id,
                cols.dset_name,
                cols.bytes,
                cols.files,
                cols.secs,
                cols.mibps,
                cols.status,
                cols.note,
            ],
        )
    }
}

/// The `events` columns of a row (NULL where the event has no such field).
#[derive(Debug, PartialEq)]
struct Columns {
    dset_id: Value,
    dset_name: Value,
    bytes: Value,
    files: Value,
    secs: Value,
    mibps: Value,
    status: Value,
    note: Value,
}

/// Fields with a column of their own; the others go to `note`.
const COLUMN_FIELDS: &[&str] = &["jobid", "host", "dset", "name", "bytes", "files", "secs", "mibps", "valid", "ok"];

fn columns(row: &Row) -> Columns {
    let flag = |k: &str| row.fields.iter().find(|(f, _)| f == k).map(|(_, v)| v == "1");
    let status = match row.event.as_str() {
        "FLUSH_END" => Some(true),
        "FLUSH_FAIL" => Some(false),
        _ => flag("valid").or_else(|| flag("ok")),
    };
    let mut note = String::new();
    for (k, v) in row.fields.iter().filter(|(k, _)| !COLUMN_FIELDS.contains(&k.as_str())) {
        if !note.is_empty() {
            note.push(' ');
        }
        let _ = write!(note, "{k}=");
        super::push_value(&mut note, v);
    }
    Columns {
        dset_id: field_u64(row, "dset"),
        dset_name: field_text(row, "name"),
        bytes: field_u64(row, "bytes"),
        files: field_u64(row, "files"),
        secs: field_f64(row, "secs"),
        mibps: field_f64(row, "mibps"),
        status: status.map(|ok| if ok { "ok" } else { "failed" }).into(),
        note: if note.is_empty() { Value::NULL } else { note.into() },
    }
}

fn field<'a>(row: &'a Row, key: &str) -> Option<&'a str> {
    row.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn field_text(row: &Row, key: &str) -> Value {
    field(row, key).map(str::to_string).into()
}

fn field_u64(row: &Row, key: &str) -> Value {
    field(row, key).and_then(|v| v.parse::<u64>().ok()).into()
}

fn field_f64(row: &Row, key: &str) -> Value {
    field(row, key).and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite()).into()
}

/// `usecs` since the epoch as a UTC `DATETIME(6)` value.
fn utc(usecs: i64) -> Value {
    let secs = usecs.div_euclid(1_000_000);
    let micros = usecs.rem_euclid(1_000_000) as u32;
    let Some(tm) = crate::sys::utc_tm(secs) else {
        return Value::NULL;
    };
    Value::Date(
        (tm.tm_year + 1900) as u16,
        (tm.tm_mon + 1) as u8,
        tm.tm_mday as u8,
        tm.tm_hour as u8,
        tm.tm_min as u8,
        tm.tm_sec as u8,
        micros,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(event: &str, fields: &[(&str, &str)]) -> Row {
        Row {
            usecs: 0,
            event: event.into(),
            fields: fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn fields_map_to_columns_and_the_rest_to_note() {
        let c = columns(&row(
            "CKPT_END",
            &[
                ("jobid", "7"),
                ("host", "n0"),
                ("dset", "3"),
                ("name", "ckpt 3"),
                ("valid", "0"),
                ("bytes", "400000"),
                ("files", "4"),
                ("secs", "0.250000"),
                ("mibps", "1.5"),
                ("scheme", "XOR"),
                ("why", "a b"),
            ],
        ));
        assert_eq!(c.dset_id, Value::UInt(3));
        assert_eq!(c.dset_name, Value::Bytes(b"ckpt 3".to_vec()));
        assert_eq!((c.bytes, c.files), (Value::UInt(400000), Value::UInt(4)));
        assert_eq!((c.secs, c.mibps), (Value::Double(0.25), Value::Double(1.5)));
        assert_eq!(c.status, Value::Bytes(b"failed".to_vec()));
        assert_eq!(c.note, Value::Bytes(b"scheme=XOR why=\"a b\"".to_vec()));
        let c = columns(&row("FLUSH_END", &[("dset", "x"), ("secs", "nan")]));
        assert_eq!((c.dset_id, c.secs, c.note), (Value::NULL, Value::NULL, Value::NULL));
        assert_eq!(c.status, Value::Bytes(b"ok".to_vec()));
        assert_eq!(columns(&row("FETCH", &[("ok", "1")])).status, Value::Bytes(b"ok".to_vec()));
        assert_eq!(columns(&row("RESTART", &[("from", "cache")])).status, Value::NULL);
    }

    #[test]
    fn times_are_utc_with_microseconds() {
        assert_eq!(utc(1_700_000_000_000_042), Value::Date(2023, 11, 14, 22, 13, 20, 42));
        assert_eq!(utc(-1), Value::Date(1969, 12, 31, 23, 59, 59, 999_999));
    }

    #[test]
    fn a_server_that_is_not_there_costs_nothing_and_drains_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DbSettings {
            addr: DbAddr::Socket(dir.path().join("nobody.sock")),
            name: "scr".into(),
            user: "u".into(),
            pass: None,
            debug: false,
        };
        let origin = Origin {
            jobid: "j".into(),
            user: "u".into(),
            jobname: String::new(),
            prefix: "/p".into(),
            host: "h".into(),
            run: true,
        };
        let db = Db::start(&cfg, origin).unwrap();
        let t0 = std::time::Instant::now();
        for _ in 0..(2 * QUEUE_LEN) {
            db.send(row("CKPT_END", &[("dset", "1")]));
        }
        db.drain(DRAIN_TIMEOUT);
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    }
}
