//! The database-logging settings (`SCR_LOG_DB_ENABLE`, `_DEBUG`, `_HOST`, `_NAME`, `_USER`,
//! `_PASS`), typed: where the MariaDB/MySQL server is (`host[:port]`, `[v6addr][:port]`, or a
//! socket path starting with `/`) and whom to log in as. A setting that cannot be used turns
//! database logging off with one warning naming the key and where it was set: logging never
//! stops a run. The password is never printed (`Debug` and the `SCR_DEBUG` listing mask it).

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::SyntaxError;

/// The MySQL protocol's default TCP port.
pub const DEFAULT_PORT: u16 = 3306;

/// Where the database server listens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DbAddr {
    Tcp { host: String, port: u16 },
    Socket(PathBuf),
}

impl fmt::Display for DbAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            DbAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            DbAddr::Socket(p) => write!(f, "{}", p.display()),
        }
    }
}

/// `SCR_LOG_DB_HOST`: `host`, `host:port`, `[v6addr]`, `[v6addr]:port`, or `/path/to/socket`.
pub fn parse_db_host(v: &str) -> Result<DbAddr, SyntaxError> {
    let v = v.trim();
    if v.is_empty() {
        return Err(SyntaxError::DbHost("expected host[:port] or a socket path starting with '/'"));
    }
    if v.starts_with('/') {
        return Ok(DbAddr::Socket(PathBuf::from(v)));
    }
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or(SyntaxError::DbHost("a '[' without its ']'"))?;
        match after {
            "" => (h, None),
            a => (h, Some(a.strip_prefix(':').ok_or(SyntaxError::DbHost("expected ':port' after ']'"))?)),
        }
    } else if v.matches(':').count() > 1 {
        return Err(SyntaxError::DbHost("an IPv6 address needs brackets: [addr]:port"));
    } else {
        match v.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (v, None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(SyntaxError::DbHostName { host: host.to_string() });
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(SyntaxError::DbPort { port: p.to_string() }),
        },
    };
    Ok(DbAddr::Tcp { host: host.to_string(), port })
}

/// Everything database logging needs; present in the settings only when it is on.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct DbSettings {
    pub addr: DbAddr,
    /// `SCR_LOG_DB_NAME`: the database holding the tables of `share/scr/scr_log.sql`.
    pub name: String,
    /// `SCR_LOG_DB_USER` (default: the user running the job).
    pub user: String,
    /// `SCR_LOG_DB_PASS` (none: log in without a password).
    pub pass: Option<String>,
    /// `SCR_LOG_DB_DEBUG`: print each statement as it is executed.
    pub debug: bool,
}

impl fmt::Debug for DbSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbSettings")
            .field("addr", &self.addr)
            .field("name", &self.name)
            .field("user", &self.user)
            .field("pass", &self.pass.as_ref().map(|_| "********"))
            .field("debug", &self.debug)
            .finish()
    }
}

/// How the password shows in listings.
pub const MASK: &str = "********";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_forms() {
        let tcp = |h: &str, p| Ok(DbAddr::Tcp { host: h.into(), port: p });
        assert_eq!(parse_db_host("db.example"), tcp("db.example", 3306));
        assert_eq!(parse_db_host(" db:3307 "), tcp("db", 3307));
        assert_eq!(parse_db_host("127.0.0.1:13306"), tcp("127.0.0.1", 13306));
        assert_eq!(parse_db_host("[::1]:4000"), tcp("::1", 4000));
        assert_eq!(parse_db_host("[::1]"), tcp("::1", 3306));
        assert_eq!(parse_db_host("/run/mysqld/mysqld.sock"), Ok(DbAddr::Socket("/run/mysqld/mysqld.sock".into())));
        for bad in ["", "db:", "db:0", "db:70000", "db:x", "::1", "[::1", "[::1]x", ":3306", "a b"] {
            assert!(parse_db_host(bad).is_err(), "{bad:?}");
        }
        assert_eq!(tcp("::1", 4000).unwrap().to_string(), "[::1]:4000");
        assert_eq!(tcp("db", 1).unwrap().to_string(), "db:1");
    }

    #[test]
    fn debug_masks_the_password() {
        let s = DbSettings {
            addr: DbAddr::Socket("/s".into()),
            name: "scr".into(),
            user: "u".into(),
            pass: Some("hunter2".into()),
            debug: false,
        };
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2") && d.contains(MASK), "{d}");
    }
}
