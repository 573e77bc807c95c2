//! Hang detection (`SCR_WATCHDOG_TIMEOUT`, `SCR_WATCHDOG_TIMEOUT_PFS`, user guide "Catch a
//! hanging job"): a process that goes longer than the limit between two `SCR_Start_output`
//! calls is taken for hung and killed, so the launcher ends the run and `scr_run` relaunches
//! it from the last checkpoint within the same allocation.
//!
//! What it owns: one thread per process (`scr-watchdog`), started at the end of `SCR_Init`
//! when either key is set and joined when the run stops (`SCR_Finalize` before its own work,
//! `SCR_HALT_EXIT`). The thread sleeps on a condition variable until the deadline (no
//! polling); every output phase start moves the deadline.
//!
//! Which limit: an interval runs from one `SCR_Start_output` to the next and contains that
//! output phase. It gets `SCR_WATCHDOG_TIMEOUT_PFS` when the most recent output phase wrote to
//! the prefix (bypass, or a flush in its `SCR_Complete_output`), else `SCR_WATCHDOG_TIMEOUT`;
//! the moment the current phase starts writing to the prefix the interval is extended to the
//! PFS limit, so a slow flush is never mistaken for a hang. The interval from `SCR_Init` to
//! the first output phase uses the PFS limit only when the restart reads its files from the
//! prefix. With only one key set, its value is both limits (and the messages name that key).
//!
//! Why it kills the way it does: a hung process cannot be trusted to run `atexit` handlers,
//! flush stdio or take part in MPI, and the lock the hang holds may be one any orderly exit
//! needs. So the watchdog prints one line (from a helper thread, given at most two seconds:
//! the hang may hold stderr), records a `WATCHDOG` event (every firing rank: the
//! launcher may kill the others before they fire), and sends itself `SIGKILL`.
//! The launcher sees a rank die and ends the job step; the checkpoints already complete are
//! in cache and in the index as before. Every rank runs its own watchdog, so when one rank
//! hangs and the others wait for it in a collective, they all fire.
//!
//! After `fork` only the calling thread exists in the child: a child's copy of the watchdog
//! has no thread, and its methods do nothing there (they neither lock a mutex the watchdog
//! thread may have held at the fork nor join a thread of the parent).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::events::EventLog;
use crate::scr_debug;

/// One limit and the key that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub secs: u64,
    pub key: &'static str,
}

/// The two limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Intervals whose output phase stayed in cache.
    pub cache: Limit,
    /// Intervals whose output phase wrote to the prefix.
    pub pfs: Limit,
}

const KEY: &str = "SCR_WATCHDOG_TIMEOUT";
const KEY_PFS: &str = "SCR_WATCHDOG_TIMEOUT_PFS";

impl Limits {
    /// The limits `settings` ask for; `None` when neither key is set (0 = not set).
    pub fn from_settings(settings: &Settings) -> Option<Limits> {
        Limits::new(settings.watchdog_timeout, settings.watchdog_timeout_pfs)
    }

    pub fn new(timeout: u64, timeout_pfs: u64) -> Option<Limits> {
        let cache = Limit { secs: timeout, key: KEY };
        let pfs = Limit { secs: timeout_pfs, key: KEY_PFS };
        match (timeout > 0, timeout_pfs > 0) {
            (false, false) => None,
            (true, false) => Some(Limits { cache, pfs: cache }),
            (false, true) => Some(Limits { cache: pfs, pfs }),
            (true, true) => Some(Limits { cache, pfs }),
        }
    }

    fn pick(&self, pfs: bool) -> Limit {
        if pfs {
            self.pfs
        } else {
            self.cache
        }
    }
}

/// What a firing watchdog knows (for its message and the event log).
#[derive(Debug, Clone)]
pub struct Firing {
    pub limit: Limit,
    /// Seconds since the interval started.
    pub elapsed_secs: u64,
    /// What started the interval ("SCR_Init", "the start of dataset 3").
    pub since: String,
    /// What did not happen in time ("SCR_Start_output"; in transparent mode, where the
    /// application makes no SCR call, a dataset completing at a sync point).
    pub waiting: &'static str,
}

/// How long the message and the event-log line may take before the kill goes ahead regardless.
const REPORT_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct State {
    limits: Limits,
    /// Start of the current interval.
    start: Instant,
    /// What started it.
    since: String,
    /// See [`Firing::waiting`].
    waiting: &'static str,
    /// The current interval's output phase wrote to the prefix.
    wrote: bool,
    /// The limit applied to the current interval.
    armed: Limit,
    stop: bool,
}

impl State {
    fn deadline(&self) -> Option<Instant> {
        self.start.checked_add(Duration::from_secs(self.armed.secs))
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// A firing is recorded here too (`WATCHDOG`; the log is disabled except on rank 0).
    events: EventLog,
}

/// A running watchdog (see the module documentation).
#[derive(Debug)]
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The process that started the thread (a forked child has no watchdog thread).
    pid: u32,
    /// Print the debug lines (rank 0).
    verbose: bool,
}

impl Watchdog {
    /// Start the watchdog thread, armed from now with `limits.pfs` when `restart_in_prefix`
    /// (the application will read its restart from the prefix), else `limits.cache`. `None`
    /// (and a warning) if the thread cannot be started: the run goes on unwatched.
    pub fn start(limits: Limits, restart_in_prefix: bool, verbose: bool, events: EventLog) -> Option<Watchdog> {
        let armed = limits.pick(restart_in_prefix);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                limits,
                start: Instant::now(),
                since: "SCR_Init".into(),
                waiting: "SCR_Start_output",
                wrote: restart_in_prefix,
                armed,
                stop: false,
            }),
            wake: Condvar::new(),
            events,
        });
        let theirs = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("scr-watchdog".into())
            .stack_size(256 * 1024)
            .spawn(move || watch(&theirs));
        match spawned {
            Ok(thread) => {
                let dog = Watchdog { shared, thread: Some(thread), pid: std::process::id(), verbose };
                dog.announce(armed, "SCR_Init");
                Some(dog)
            }
            Err(e) => {
                crate::scr_warn!("cannot start the watchdog thread ({e}); hangs will not be detected in this run");
                None
            }
        }
    }

    /// A forked child holds a copy of the parent's watchdog but not its thread.
    fn here(&self) -> bool {
        std::process::id() == self.pid
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn announce(&self, armed: Limit, since: &str) {
        if self.verbose {
            scr_debug!(1, "watchdog armed: {} s ({}) from {since}", armed.secs, armed.key);
        }
    }

    /// An output phase starts (`SCR_Start_output`): a new interval, with the limit of the
    /// most recent output phase's destination.
    pub fn kick(&self, dataset: u64) {
        if !self.here() {
            return;
        }
        let since = format!("the start of dataset {dataset}");
        let (armed, changed) = {
            let mut s = self.lock();
            let armed = s.limits.pick(s.wrote);
            let changed = armed != s.armed;
            s.start = Instant::now();
            s.since.clone_from(&since);
            s.wrote = false;
            s.armed = armed;
            (armed, changed)
        };
        self.shared.wake.notify_one();
        if changed {
            self.announce(armed, &since);
        }
    }

    /// The current output phase writes to the prefix (bypass, a flush): the interval gets the
    /// PFS limit, counted from its start.
    pub fn wrote_to_prefix(&self) {
        if !self.here() {
            return;
        }
        let (armed, since, changed) = {
            let mut s = self.lock();
            s.wrote = true;
            let armed = s.limits.pfs;
            let changed = armed != s.armed;
            s.armed = armed;
            (armed, s.since.clone(), changed)
        };
        self.shared.wake.notify_one();
        if changed {
            self.announce(armed, &since);
        }
    }

    /// The limit applied to the current interval (the tests read it).
    #[cfg(test)]
    pub fn armed(&self) -> Limit {
        self.lock().armed
    }

    /// Disarm and join the thread (also done on drop).
    pub fn stop(self) {}
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        if !self.here() {
            // the parent's thread; it does not exist in this process
            std::mem::forget(thread);
            return;
        }
        self.lock().stop = true;
        self.shared.wake.notify_one();
        let _ = thread.join();
        if self.verbose {
            scr_debug!(2, "watchdog stopped");
        }
    }
}

impl super::Runtime {
    /// Start the watchdog at the end of `SCR_Init` if a limit is set.
    pub(super) fn arm_watchdog(&mut self) {
        let Some(limits) = Limits::from_settings(&self.settings) else { return };
        let in_prefix = self.restart.as_ref().is_some_and(|r| r.in_prefix);
        let log = self.any_rank_log();
        self.bg.watchdog = Watchdog::start(limits, in_prefix, self.rank0(), log);
        if let (Some(dog), super::Mode::Transparent) = (&self.bg.watchdog, self.mode) {
            // the preload made SCR_Init and makes SCR_Start_output: say what the user sees
            let mut s = dog.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            s.since = "MPI_Init".into();
            s.waiting = "dataset completed at a sync point";
        }
    }

    /// `SCR_Start_output` began dataset `id` (`bypass`: its files go to the prefix).
    pub(super) fn watchdog_kick(&self, id: u64, bypass: bool) {
        if let Some(w) = &self.bg.watchdog {
            w.kick(id);
            if bypass {
                w.wrote_to_prefix();
            }
        }
    }

    /// The current output phase writes to the prefix (a flush).
    pub(super) fn watchdog_wrote(&self) {
        if let Some(w) = &self.bg.watchdog {
            w.wrote_to_prefix();
        }
    }

    /// Disarm for good (the run is stopping).
    pub(super) fn stop_watchdog(&mut self) {
        if let Some(w) = self.bg.watchdog.take() {
            w.stop();
        }
    }
}

/// The watchdog thread: sleep until the deadline; fire if it passes unmoved.
fn watch(shared: &Shared) {
    // Its I/O (the message) must pass the preload's hooks untouched.
    let _inside = crate::reentry::Inside::enter();
    let mut s = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if s.stop {
            return;
        }
        let now = Instant::now();
        match s.deadline() {
            None => s = shared.wake.wait(s).unwrap_or_else(|e| e.into_inner()),
            Some(d) if d > now => {
                s = shared.wake.wait_timeout(s, d - now).unwrap_or_else(|e| e.into_inner()).0;
            }
            Some(_) => {
                let firing = Firing {
                    limit: s.armed,
                    elapsed_secs: s.start.elapsed().as_secs(),
                    since: s.since.clone(),
                    waiting: s.waiting,
                };
                drop(s);
                fire(firing, shared.events.clone());
            }
        }
    }
}

/// The message line of a firing watchdog (after the usual `SCR ERROR: rank R on HOST: `).
pub fn message(f: &Firing) -> String {
    format!(
        "watchdog: no {} for {} s since {} (limit {} s, {}): the process looks hung and is \
         killed (SIGKILL) so the run can be relaunched from its last checkpoint",
        f.waiting, f.elapsed_secs, f.since, f.limit.secs, f.limit.key
    )
}

/// Report (bounded by [`REPORT_GRACE`]) and kill this process.
fn fire(f: Firing, events: EventLog) -> ! {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let reporter = std::thread::Builder::new().name("scr-watchdog-msg".into()).spawn(move || {
        let _inside = crate::reentry::Inside::enter();
        crate::scr_error!("{}", message(&f));
        events.record(
            "WATCHDOG",
            &[
                ("rank", &crate::log::rank()),
                ("limit", &f.limit.secs),
                ("key", &f.limit.key),
                ("elapsed", &f.elapsed_secs),
                ("since", &f.since),
            ],
        );
        let _ = tx.send(());
    });
    if reporter.is_ok() {
        let _ = rx.recv_timeout(REPORT_GRACE);
    }
    // SIGKILL cannot be caught, so nothing of the (hung) process runs afterwards
    crate::sys::kill_self()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_serves_for_both() {
        assert_eq!(Limits::new(0, 0), None);
        let l = Limits::new(3, 0).unwrap();
        assert_eq!((l.cache, l.pfs), (Limit { secs: 3, key: KEY }, Limit { secs: 3, key: KEY }));
        let l = Limits::new(0, 9).unwrap();
        assert_eq!((l.cache, l.pfs), (Limit { secs: 9, key: KEY_PFS }, Limit { secs: 9, key: KEY_PFS }));
        let l = Limits::new(2, 9).unwrap();
        assert_eq!((l.cache.key, l.pfs.key), (KEY, KEY_PFS));
    }

    #[test]
    fn the_limit_follows_the_most_recent_output_phase() {
        let dog = Watchdog::start(Limits::new(1000, 5000).unwrap(), false, false, EventLog::disabled()).unwrap();
        assert_eq!(dog.armed().secs, 1000, "from SCR_Init, restart in cache");
        dog.kick(1);
        assert_eq!(dog.armed().secs, 1000);
        dog.wrote_to_prefix();
        assert_eq!(dog.armed().secs, 5000, "extended while the phase writes to the prefix");
        dog.kick(2);
        assert_eq!(dog.armed().secs, 5000, "the previous phase wrote to the prefix");
        dog.kick(3);
        assert_eq!(dog.armed().secs, 1000, "the previous phase stayed in cache");
        dog.stop();
        let dog = Watchdog::start(Limits::new(1000, 5000).unwrap(), true, false, EventLog::disabled()).unwrap();
        assert_eq!(dog.armed().secs, 5000, "the restart reads from the prefix");
    }

    #[test]
    fn huge_limits_never_fire_and_stop_joins() {
        let dog = Watchdog::start(Limits::new(u64::MAX, 0).unwrap(), false, false, EventLog::disabled()).unwrap();
        dog.kick(1);
        std::thread::sleep(Duration::from_millis(20));
        dog.stop();
    }

    #[test]
    #[allow(unsafe_code)] // fork, _exit and waitpid of a test child: see the SAFETY comments
    fn a_forked_child_can_use_and_drop_its_copy() {
        let dog = Watchdog::start(Limits::new(1000, 0).unwrap(), false, false, EventLog::disabled()).unwrap();
        // SAFETY: the child only calls getpid (through the watchdog's methods) and _exit, both
        // async-signal-safe, so forking this multi-threaded test process is sound.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            dog.kick(1);
            dog.wrote_to_prefix();
            drop(dog);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(7) };
        }
        let t0 = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                // SAFETY: kills the child this test forked.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child hung using the watchdog it inherited");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7, "child status {status:#x}");
        dog.kick(2);
        dog.stop();
    }

    #[test]
    fn the_message_names_the_key_the_limit_and_the_time() {
        let mut f = Firing {
            limit: Limit { secs: 3, key: KEY },
            elapsed_secs: 4,
            since: "the start of dataset 2".into(),
            waiting: "SCR_Start_output",
        };
        let m = message(&f);
        assert!(
            m.contains("no SCR_Start_output for 4 s since the start of dataset 2 (limit 3 s, SCR_WATCHDOG_TIMEOUT)"),
            "{m}"
        );
        f.waiting = "dataset completed at a sync point";
        assert!(message(&f).starts_with("watchdog: no dataset completed at a sync point for 4 s"), "{}", message(&f));
    }
}
