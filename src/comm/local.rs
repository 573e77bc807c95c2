//! The in-process communicator: `n` ranks as threads of one process, for unit tests of code
//! that runs collectively (`cargo test --lib` without `mpirun`).
//!
//! A [`Hub`] is one communicator shared by its ranks. Collectives are one primitive,
//! [`Hub::exchange`]: every rank deposits a byte string and, once all have, every rank gets
//! all of them (in rank order) and the round's number; broadcasts, reductions, gathers and
//! scatters are computed from that. Point-to-point messages go through one FIFO mailbox per
//! (source, destination) pair, so messages between two ranks arrive in the order they were
//! sent, as in MPI; a send never blocks (MPI may buffer any send, so code correct under MPI
//! is correct here). `split` and `dup` make new hubs, shared by the ranks that meet in them.
//!
//! A rank that panics poisons every hub of its world (`run`, in the unit tests): the others, waiting in a
//! collective the dead rank never reaches, panic too instead of hanging, and so does a wait
//! longer than [`PATIENCE`] (ranks that do not call the same collectives).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a rank waits for the others before the test fails as hung.
pub const PATIENCE: Duration = Duration::from_secs(120);
/// How often a waiting rank looks whether another rank died.
const LOOK: Duration = Duration::from_millis(20);

/// Messages not yet received, by (source, destination), oldest first.
type Mailboxes = HashMap<(usize, usize), VecDeque<Vec<u8>>>;
/// Hubs made by `split`, by (round of the split, color): the hub and how many of its ranks
/// have not collected it yet.
type Children = HashMap<(u64, i32), (Arc<Hub>, usize)>;

/// One communicator of the in-process world.
pub struct Hub {
    size: usize,
    /// Set when any rank of the world panicked (shared by every hub of the world).
    poison: Arc<AtomicBool>,
    round: Mutex<Round>,
    round_done: Condvar,
    mail: Mutex<Mailboxes>,
    mail_came: Condvar,
    children: Mutex<Children>,
}

#[derive(Default)]
struct Round {
    /// The number of the round being filled.
    number: u64,
    slots: Vec<Option<Vec<u8>>>,
    arrived: usize,
    /// The previous round's contributions (read by its ranks before the next round can end).
    last: Arc<Vec<Vec<u8>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    fn new(size: usize, poison: Arc<AtomicBool>) -> Arc<Hub> {
        Arc::new(Hub {
            size,
            poison,
            round: Mutex::new(Round { slots: vec![None; size], ..Default::default() }),
            round_done: Condvar::new(),
            mail: Mutex::new(HashMap::new()),
            mail_came: Condvar::new(),
            children: Mutex::new(HashMap::new()),
        })
    }

    /// `n` ranks of a new world.
    pub fn world(n: usize) -> Arc<Hub> {
        assert!(n > 0, "an in-process world needs at least one rank");
        Hub::new(n, Arc::new(AtomicBool::new(false)))
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Mark the world dead: every rank waiting anywhere in it panics.
    pub fn poison(&self) {
        self.poison.store(true, Ordering::SeqCst);
        self.round_done.notify_all();
        self.mail_came.notify_all();
    }

    /// Wait on `cv` once (bounded), panicking when the world died or the wait is too long.
    fn wait<'a, T>(&self, cv: &Condvar, g: MutexGuard<'a, T>, since: Instant, what: &str) -> MutexGuard<'a, T> {
        if self.poison.load(Ordering::SeqCst) {
            panic!("in-process communicator: another rank died while this one waited in {what}");
        }
        if since.elapsed() > PATIENCE {
            self.poison();
            panic!("in-process communicator: waited {PATIENCE:?} in {what}: the ranks do not meet");
        }
        cv.wait_timeout(g, LOOK).unwrap_or_else(|e| e.into_inner()).0
    }

    /// The collective primitive: every rank's `data`, in rank order, on every rank, and the
    /// number of this round (the same on every rank).
    pub fn exchange(&self, rank: usize, data: Vec<u8>) -> (u64, Arc<Vec<Vec<u8>>>) {
        let mut g = lock(&self.round);
        let number = g.number;
        assert!(g.slots[rank].is_none(), "rank {rank} entered one collective twice");
        g.slots[rank] = Some(data);
        g.arrived += 1;
        if g.arrived == self.size {
            let all: Vec<Vec<u8>> = g.slots.iter_mut().map(|s| s.take().unwrap_or_default()).collect();
            g.last = Arc::new(all);
            g.arrived = 0;
            g.number += 1;
            self.round_done.notify_all();
            return (number, g.last.clone());
        }
        let since = Instant::now();
        // the round cannot end again before this rank contributes to the next one, so `last`
        // is this round's when the number moved on
        while g.number == number {
            g = self.wait(&self.round_done, g, since, "a collective");
        }
        (number, g.last.clone())
    }

    pub fn send(&self, from: usize, to: usize, data: &[u8]) {
        assert!(to < self.size, "send to rank {to} of a communicator of {}", self.size);
        lock(&self.mail).entry((from, to)).or_default().push_back(data.to_vec());
        self.mail_came.notify_all();
    }

    /// The next message from `from` to `to` (its length is the receiver's to check).
    pub fn recv(&self, from: usize, to: usize) -> Vec<u8> {
        assert!(from < self.size, "receive from rank {from} of a communicator of {}", self.size);
        let mut g = lock(&self.mail);
        let since = Instant::now();
        loop {
            if let Some(m) = g.get_mut(&(from, to)).and_then(VecDeque::pop_front) {
                return m;
            }
            g = self.wait(&self.mail_came, g, since, "a receive");
        }
    }

    /// The hub of the ranks that gave `color` in split round `round`, made by the first of its
    /// `members` to ask and forgotten once all of them have it.
    pub fn child(&self, round: u64, color: i32, members: usize) -> Arc<Hub> {
        let mut g = lock(&self.children);
        let entry = g.entry((round, color)).or_insert_with(|| (Hub::new(members, self.poison.clone()), members));
        let hub = entry.0.clone();
        entry.1 -= 1;
        if entry.1 == 0 {
            g.remove(&(round, color));
        }
        hub
    }
}

/// Run `f` on each rank of a new `n`-rank world, one thread per rank, and return the results
/// in rank order. A rank that panics poisons the world (the others fail instead of waiting
/// forever) and its panic is raised again here, naming the rank. The unit tests' world.
#[cfg(test)]
pub fn run<T: Send>(n: usize, f: impl Fn(crate::comm::Comm) -> T + Sync) -> Vec<T> {
    let hub = Hub::world(n);
    let comms = crate::comm::Comm::in_process(&hub);
    let f = &f;
    let outcomes: Vec<std::thread::Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, comm)| {
                let hub = hub.clone();
                std::thread::Builder::new()
                    .name(format!("rank {r}"))
                    .spawn_scoped(s, move || {
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(comm)));
                        if out.is_err() {
                            hub.poison();
                        }
                        out
                    })
                    .expect("spawn a rank thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(Err)).collect()
    });
    // the first panic is the cause; the others are the ranks that noticed it
    let mut out = Vec::with_capacity(n);
    let mut first: Option<(usize, Box<dyn std::any::Any + Send>)> = None;
    for (r, o) in outcomes.into_iter().enumerate() {
        match o {
            Ok(v) => out.push(v),
            Err(e) => {
                let noticed = panic_text(&e).contains("another rank died");
                if first.as_ref().is_none_or(|(_, f)| panic_text(f).contains("another rank died") && !noticed) {
                    first = Some((r, e));
                }
            }
        }
    }
    if let Some((r, e)) = first {
        panic!("rank {r} of {n} panicked: {}", panic_text(&e));
    }
    out
}

#[cfg(test)]
fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}
