//! The syslog side of the event log: a small RFC 3164 client over an unbound Unix datagram
//! socket (`SCR_LOG_SYSLOG_SOCKET`, default `/dev/log`), so no daemon-specific library is
//! needed and a container's socket elsewhere works. A send that fails or blocks for
//! [`super::SYSLOG_TIMEOUT`] switches syslog off for the process, with one warning: a hung
//! syslog daemon must never hang the application.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::SYSLOG_TIMEOUT;
use crate::config::Settings;
use crate::scr_warn;

pub(super) struct Syslog {
    socket: PathBuf,
    sock: UnixDatagram,
    pri: u8,
    tag: String,
    /// Set after a failed send: syslog is off for the rest of the process.
    off: AtomicBool,
}

impl Syslog {
    pub(super) fn open(settings: &Settings, warn: bool) -> Option<Syslog> {
        let socket = settings.syslog_socket.clone();
        let missing = |why: String| {
            if !warn {
                return None;
            }
            scr_warn!(
                "syslog socket {}: {why}; SCR events go to the text log only (set SCR_LOG_SYSLOG_SOCKET to the \
                 syslog socket, or SCR_LOG_SYSLOG_ENABLE=0)",
                socket.display()
            );
            None
        };
        match std::fs::metadata(&socket) {
            Ok(md) if md.file_type().is_socket() => {}
            Ok(_) => return missing("not a socket".into()),
            Err(e) => return missing(e.to_string()),
        }
        let sock = match UnixDatagram::unbound().and_then(|s| s.set_write_timeout(Some(SYSLOG_TIMEOUT)).map(|_| s)) {
            Ok(s) => s,
            Err(e) => return missing(format!("cannot create a datagram socket: {e}")),
        };
        // Validated when the settings were built; the defaults stand in for robustness.
        let facility = crate::log::syslog_facility(&settings.syslog_facility).unwrap_or(23);
        let severity = crate::log::syslog_severity(&settings.syslog_level).unwrap_or(6);
        Some(Syslog {
            socket,
            sock,
            pri: facility * 8 + severity,
            tag: settings.syslog_prefix.clone(),
            off: AtomicBool::new(false),
        })
    }

    pub(super) fn send(&self, body: &str, host: &str) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let msg = syslog_message(self.pri, crate::identity::now_secs(), host, &self.tag, std::process::id(), body);
        if let Err(e) = self.sock.send_to(msg.as_bytes(), &self.socket) {
            if !self.off.swap(true, Ordering::Relaxed) {
                scr_warn!(
                    "cannot send an event to syslog at {} (SCR_LOG_SYSLOG_SOCKET): {e}; syslog logging is off \
                     for the rest of this process",
                    self.socket.display()
                );
            }
        }
    }
}

/// An RFC 3164 message: `<PRI>Mmm dd hh:mm:ss host TAG[pid]: body` (local time).
pub(crate) fn syslog_message(pri: u8, secs: i64, host: &str, tag: &str, pid: u32, body: &str) -> String {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (tm, _) = crate::identity::local_tm(secs);
    format!(
        "<{pri}>{} {:>2} {:02}:{:02}:{:02} {host} {tag}[{pid}]: {body}",
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}
