//! Database logging (`SCR_LOG_DB_ENABLE=1`) under real MPI with 4 ranks, into a private
//! MariaDB server this test starts on a socket in a temporary directory (Debian's
//! `mariadb-server`, installed by `scripts/setup.sh`; the test says so and passes without it):
//! the schema of `share/scr/scr_log.sql`, checkpoints, flushes, a restart and a halt, then the
//! rows queried and compared with the text log. A server that is down, silent or refuses the
//! login: the run succeeds with one warning and the text log is complete.

use crate::common;
use crate::common::Job;
use mysql::prelude::Queryable;
use scr::events::{parse_line, Event};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZE: u64 = 100_000;
const PASS: &str = "pw-Secret-4711";

/// A private MariaDB server: killed when dropped, also when the test fails.
struct MariaDb {
    dir: tempfile::TempDir,
    child: Child,
}

impl MariaDb {
    /// A server with database `scr` holding the shipped schema and a user `scr` with the
    /// privileges the schema's comment asks for; `None` (with a message) without
    /// `mariadb-server`.
    fn start() -> Option<MariaDb> {
        let (Some(install), Some(server), Some(client)) = (
            tool(&["mariadb-install-db", "mysql_install_db"]),
            tool(&["mariadbd", "mysqld"]),
            tool(&["mariadb", "mysql"]),
        ) else {
            eprintln!(
                "SKIPPED: MariaDB is not installed (mariadb-install-db, mariadbd and mariadb; `bash scripts/setup.sh` \
                 as root installs mariadb-server): the database rows are not checked"
            );
            return None;
        };
        let dir = tempfile::Builder::new().prefix("scr-mariadb-").tempdir().unwrap();
        let data = dir.path().join("data");
        let root = unsafe { libc::geteuid() } == 0;
        let mut cmd = Command::new(&install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db");
        if root {
            cmd.arg("--user=root");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{install:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let sock = dir.path().join("sock");
        let mut cmd = Command::new(&server);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--log-error={}", dir.path().join("err.log").display()))
            .args(["--skip-networking", "--innodb-buffer-pool-size=16M", "--skip-log-bin"]);
        if root {
            cmd.arg("--user=root");
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let db = MariaDb { dir, child };
        let t0 = Instant::now();
        while db.conn("root", "", None).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "mariadbd did not start: {}", db.error_log());
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut conn = db.conn("root", "", None).unwrap();
        conn.query_drop("CREATE DATABASE scr").unwrap();
        let schema = common::repo().join("share/scr/scr_log.sql");
        let out = Command::new(&client)
            .args(["--no-defaults", "-u", "root", "-S"])
            .arg(&sock)
            .arg("scr")
            .stdin(std::fs::File::open(&schema).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "loading {}: {}", schema.display(), String::from_utf8_lossy(&out.stderr));
        conn.query_drop(format!("CREATE USER 'scr'@'localhost' IDENTIFIED BY '{PASS}'")).unwrap();
        conn.query_drop("GRANT SELECT, INSERT, UPDATE ON scr.* TO 'scr'@'localhost'").unwrap();
        Some(db)
    }

    fn sock(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    fn conn(&self, user: &str, pass: &str, db: Option<&str>) -> mysql::Result<mysql::Conn> {
        mysql::Conn::new(
            mysql::OptsBuilder::new()
                .socket(Some(self.sock().display().to_string()))
                .user(Some(user))
                .pass(Some(pass))
                .db_name(db)
                .prefer_socket(false),
        )
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("err.log")).unwrap_or_default()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first of `names` on PATH or in the system directories.
fn tool(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> =
        path.split(':').map(PathBuf::from).chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from)).collect();
    names.iter().flat_map(|n| dirs.iter().map(move |d| d.join(n))).find(|p| p.is_file())
}

fn logging_job(host: &str) -> Job {
    let mut job = Job::new();
    job.set("SCR_LOG_ENABLE", "1")
        .set("SCR_LOG_SYSLOG_ENABLE", "0")
        .set("SCR_LOG_DB_ENABLE", "1")
        .set("SCR_LOG_DB_HOST", host)
        .set("SCR_LOG_DB_NAME", "scr")
        .set("SCR_LOG_DB_USER", "scr")
        .set("SCR_LOG_DB_PASS", PASS)
        .set("SCR_JOB_ID", "db-test-job");
    job
}

fn text_events(job: &Job) -> Vec<Event> {
    let text = std::fs::read_to_string(job.prefix.join(".scr/log")).expect("the job wrote .scr/log");
    text.lines().map(|l| parse_line(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

fn run_ok(job: &Job, args: &[&str]) -> common::Run {
    let r = job.run("test_api", args);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    r
}

/// A `runs` row: id, job, ranks, nodes, version, end reason, seconds, host.
type RunRow = (u64, u64, Option<u32>, Option<u32>, Option<String>, Option<String>, Option<f64>, String);

/// A `NODE_FAIL` row: job, run, seconds, note.
type FailRow = (u64, Option<u64>, Option<f64>, Option<String>);

/// An `events` row.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    run: Option<u64>,
    kind: String,
    dset: Option<u64>,
    name: Option<String>,
    bytes: Option<u64>,
    files: Option<u64>,
    secs: Option<f64>,
    status: Option<String>,
    note: Option<String>,
}

fn rows(conn: &mut mysql::Conn) -> Vec<Row> {
    conn.query_map(
        "SELECT run_id, type, dset_id, dset_name, bytes, files, secs, status, note FROM events ORDER BY id",
        |(run, kind, dset, name, bytes, files, secs, status, note)| Row {
            run,
            kind,
            dset,
            name,
            bytes,
            files,
            secs,
            status,
            note,
        },
    )
    .unwrap()
}

/// Every text-log event has its row, in order, with the same type, dataset, bytes and files.
fn same_as_text_log(rows: &[Row], text: &[Event]) {
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let names: Vec<&str> = text.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(kinds, names, "the database has the text log's events");
    for (r, e) in rows.iter().zip(text) {
        let num = |k: &str| e.get(k).map(|v| v.parse::<u64>().unwrap());
        assert_eq!(
            (r.dset, r.name.as_deref(), r.bytes, r.files),
            (num("dset"), e.get("name"), num("bytes"), num("files")),
            "{e:?}"
        );
    }
}

#[test]
fn checkpoints_flushes_restart_and_halt_are_rows() {
    let Some(db) = MariaDb::start() else { return };
    let mut job = logging_job(&db.sock().display().to_string());
    job.set("SCR_FLUSH", "2").set("SCR_DEBUG", "1");
    let size = SIZE.to_string();
    let r = run_ok(&job, &["--size", &size, "--steps", "4"]);
    assert!(!r.all().contains(PASS), "the password is never printed: {}", r.dump());
    assert!(r.stderr.contains("SCR_LOG_DB_PASS") && r.stderr.contains("********"), "{}", r.dump());
    assert!(!r.stderr.contains("WARN"), "{}", r.dump());
    let mut conn = db.conn("root", "", Some("scr")).unwrap();

    let evs = rows(&mut conn);
    same_as_text_log(&evs, &text_events(&job));
    let total = 4 * SIZE;
    let ckpt_ends: Vec<&Row> = evs.iter().filter(|r| r.kind == "CKPT_END").collect();
    assert_eq!(ckpt_ends.len(), 4);
    for (k, r) in ckpt_ends.iter().enumerate() {
        assert_eq!(r.name.as_deref(), Some(format!("ckpt.{}", k + 1).as_str()));
        assert_eq!((r.bytes, r.files, r.status.as_deref()), (Some(total), Some(4), Some("ok")), "{r:?}");
        assert!(r.secs.unwrap() > 0.0 && r.note.as_deref() == Some("scheme=SINGLE"), "{r:?}");
    }
    let flushes: Vec<&Row> = evs.iter().filter(|r| r.kind == "FLUSH_END").collect();
    assert_eq!(flushes.iter().map(|r| r.name.as_deref().unwrap()).collect::<Vec<_>>(), ["ckpt.2", "ckpt.4"]);
    for r in &flushes {
        assert_eq!(
            (r.bytes, r.files, r.status.as_deref(), r.note.as_deref()),
            (Some(total), Some(4), Some("ok"), Some("mode=sync"))
        );
        assert!(r.secs.unwrap() > 0.0, "{r:?}");
    }
    let run1 = evs[0].run.expect("a run's events name it");
    assert!(evs.iter().all(|r| r.run == Some(run1)));

    // A restart from cache, then a halt: each run its own row, under the same job.
    let r = run_ok(&job, &["--size", &size, "--steps", "1"]);
    assert!(r.has("RESTARTED ckpt.4 step=4"), "{}", r.dump());
    job.set("SCR_FLUSH", "0").set("SCR_HALT_SECONDS", "3600").set("SCR_END_TIME", &end_time_in(600));
    let r = run_ok(&job, &["--steps", "3"]);
    assert!(r.stdout.contains("SHOULD_EXIT at"), "{}", r.dump());

    let evs = rows(&mut conn);
    same_as_text_log(&evs, &text_events(&job));
    let restart: Vec<&Row> = evs.iter().filter(|r| r.kind == "RESTART").collect();
    assert!(!restart.is_empty());
    assert_eq!(
        (restart[0].dset, restart[0].name.as_deref(), restart[0].note.as_deref()),
        (Some(4), Some("ckpt.4"), Some("from=cache"))
    );
    let halt: Vec<&Row> = evs.iter().filter(|r| r.kind == "HALT").collect();
    assert_eq!(halt.len(), 1, "{evs:?}");
    let note = halt[0].note.as_deref().unwrap();
    assert!(note.contains("SCR_HALT_SECONDS") && note.ends_with("action=should_exit"), "{note}");

    let jobs: Vec<(u64, String, String, String)> = conn.query("SELECT id, jobid, username, prefix FROM jobs").unwrap();
    assert_eq!(jobs.len(), 1, "one job for the three runs: {jobs:?}");
    assert_eq!((jobs[0].1.as_str(), jobs[0].3.as_str()), ("db-test-job", job.prefix.display().to_string().as_str()));
    assert!(!jobs[0].2.is_empty());
    let runs: Vec<RunRow> =
        conn.query("SELECT id, job_id, ranks, nodes, version, end_reason, secs, host FROM runs ORDER BY id").unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let run_ids: Vec<Option<u64>> = runs.iter().map(|r| Some(r.0)).collect();
    let mut seen: Vec<Option<u64>> = evs.iter().map(|r| r.run).collect();
    seen.dedup();
    assert_eq!(seen, run_ids, "events come in runs, each run's own");
    for r in &runs {
        assert_eq!((r.1, r.2, r.3), (jobs[0].0, Some(4), Some(1)), "{r:?}");
        assert!(r.4.as_deref().unwrap().starts_with("scr-rs "), "{r:?}");
        assert_eq!(r.5.as_deref(), Some("SCR_FINALIZE_CALLED"));
        assert!(r.6.unwrap() > 0.0 && r.7 == scr::identity::host_name(), "{r:?}");
    }
    let (first, last): (Option<String>, Option<String>) =
        conn.query_first("SELECT MIN(time), MAX(time) FROM events").unwrap().unwrap();
    assert!(first.unwrap() <= last.unwrap());

    // A command's events (scr_list_down_nodes --log) belong to the job, not to a run.
    let out = job
        .command(env!("CARGO_BIN_EXE_scr_list_down_nodes"))
        .args(["--log", "--secs", "120", "--down", "n4", "n[1-4]"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let fail: Vec<FailRow> =
        conn.query("SELECT job_id, run_id, secs, note FROM events WHERE type = 'NODE_FAIL'").unwrap();
    assert_eq!(fail.len(), 1, "{fail:?}");
    assert_eq!((fail[0].0, fail[0].1, fail[0].2), (jobs[0].0, None, Some(120.0)));
    assert!(fail[0].3.as_deref().unwrap().starts_with("node=n4 reason="), "{fail:?}");

    // A refused login: one warning naming the server, the run and the text log as ever.
    let before = rows(&mut conn).len();
    job.set("SCR_LOG_DB_PASS", "wrong").unset("SCR_HALT_SECONDS").unset("SCR_END_TIME");
    let r = run_ok(&job, &["--steps", "2"]);
    let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warned.len(), 1, "{}", r.dump());
    assert!(
        warned[0].contains(&db.sock().display().to_string()) && warned[0].contains("Access denied"),
        "{}",
        warned[0]
    );
    assert_eq!(rows(&mut conn).len(), before, "nothing was written");
    assert_eq!(text_events(&job).last().unwrap().name, "RUN_END");
}

fn end_time_in(secs: u64) -> String {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + secs).to_string()
}

/// A server that is not there (a socket path nobody listens on, a TCP port that refuses) or
/// never answers (a listener that accepts and stays silent): the run succeeds, one warning
/// names the server, and the text log has every event.
#[test]
fn a_database_that_is_down_or_silent_costs_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let refusing = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refusing.local_addr().unwrap().port();
    drop(refusing);
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = format!("127.0.0.1:{}", silent.local_addr().unwrap().port());
    for host in [dir.path().join("nobody.sock").display().to_string(), format!("127.0.0.1:{port}"), silent_at] {
        let job = logging_job(&host);
        let r = run_ok(&job, &["--size", "1000", "--steps", "3"]);
        let warned: Vec<&str> = r.stderr.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warned.len(), 1, "{host}: {}", r.dump());
        assert!(warned[0].contains(&host) && warned[0].contains("SCR_LOG_DB_HOST"), "{}", warned[0]);
        assert!(warned[0].contains("database logging is off"), "{}", warned[0]);
        let names: Vec<String> = text_events(&job).iter().map(|e| e.name.clone()).collect();
        assert_eq!(names.first().map(String::as_str), Some("RUN_START"));
        assert_eq!(names.iter().filter(|n| *n == "CKPT_END").count(), 3, "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("RUN_END"));
    }
    drop(silent);
}
