//! The MPI wrapper: the few collective and point-to-point operations the core needs, over a
//! communicator the library owns (a copy of the application's world, never `MPI_COMM_WORLD`
//! itself, so library traffic cannot match application messages; how it makes its
//! communicators: [`CREATE_TAG`]).
//!
//! Variable-size data travels as bytes; typed data as JSON through [`Comm::bcast`],
//! [`Comm::gather`], [`Comm::allgather`] and [`Comm::scatter`]. Data received from another
//! rank that does not decode (a bug) is a [`CommError`], and every rank returns it, so no
//! rank goes on alone into a collective the others never reach: a broadcast or an allgather
//! gives every rank the same bytes, which decode alike everywhere; after a gather or a
//! scatter the ranks agree on the outcome (one more allreduce).
//!
//! Small data costs one MPI collective: a broadcast sends a fixed block holding the length
//! and the first bytes ([`BCAST_INLINE`]), an allgather a fixed slot per rank holding its
//! length and first bytes ([`Comm::allgather_bytes`]); only what does not fit follows in a
//! second collective, which every rank knows to make (the lengths came with the first).
//!
//! An allgather brings every rank O(P) bytes. Where only one outcome matters, rank 0 decides
//! it instead ([`Comm::decide_at`]: a gather of the same slots, then a broadcast of the
//! outcome), and where each rank needs only its own part of a decision, rank 0 scatters the
//! parts ([`Comm::group_index`]): then only rank 0 receives bytes that grow with the number of
//! processes. The library never initialises or finalises MPI on the application's behalf
//! (except `SCR_HALT_EXIT`, which ends the process by design).
//!
//! A [`Comm`] is either an MPI communicator or an in-process one ([`local`]: ranks as
//! threads of one process, for unit tests of collective code without `mpirun`). Every
//! operation is one `match` on which it is; the MPI path allocates nothing more than before.
//!
//! Every collective a [`Comm`] makes is counted per kind, with the bytes this rank puts into
//! it ([`tally`]): `SCR_DEBUG=1` reports the count of each dataset and of the run, so a
//! change that adds collectives to a checkpoint shows (and the scale model of
//! `BENCHMARKS.md` has its collectives and payload per rank).

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod local;

/// Typed data from another rank that could not be used; every rank of the collective gets it.
#[derive(Debug, Clone, thiserror::Error, Serialize, serde::Deserialize)]
#[error("{op}: {why}")]
pub struct CommError {
    pub op: &'static str,
    pub why: String,
}

type CResult<T> = Result<T, CommError>;

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Only a value that cannot be JSON (a map with non-text keys) fails; the receivers then
    // fail to decode the empty bytes and the collective reports it.
    serde_json::to_vec(value).unwrap_or_default()
}

fn decode<T: DeserializeOwned>(op: &'static str, from: i32, bytes: &[u8]) -> CResult<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| CommError { op, why: format!("data from rank {from} does not decode: {e}") })
}

/// The kinds of collective operations counted by [`tally`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Allreduce,
    Bcast,
    Allgather,
    Allgatherv,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Barrier,
    /// Communicator creation (`MPI_Comm_dup`, `MPI_Comm_split`).
    Create,
}

const KINDS: [Kind; 10] = [
    Kind::Allreduce,
    Kind::Bcast,
    Kind::Allgather,
    Kind::Allgatherv,
    Kind::Gather,
    Kind::Gatherv,
    Kind::Scatter,
    Kind::Scatterv,
    Kind::Barrier,
    Kind::Create,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Allreduce => "allreduce",
            Kind::Bcast => "bcast",
            Kind::Allgather => "allgather",
            Kind::Allgatherv => "allgatherv",
            Kind::Gather => "gather",
            Kind::Gatherv => "gatherv",
            Kind::Scatter => "scatter",
            Kind::Scatterv => "scatterv",
            Kind::Barrier => "barrier",
            Kind::Create => "comm create",
        }
    }
}

/// Collectives made by this process through any [`Comm`], and bytes put into them, per kind.
static CALLS: [AtomicU64; KINDS.len()] = [const { AtomicU64::new(0) }; KINDS.len()];
static BYTES: [AtomicU64; KINDS.len()] = [const { AtomicU64::new(0) }; KINDS.len()];

/// Count one collective of `kind` into which this rank put `bytes` (a broadcast: the payload,
/// on every rank). Two relaxed atomic additions: nothing next to the collective itself. (An
/// in-process communicator counts one per operation.)
fn count(kind: Kind, bytes: usize) {
    CALLS[kind as usize].fetch_add(1, Ordering::Relaxed);
    BYTES[kind as usize].fetch_add(bytes as u64, Ordering::Relaxed);
}

/// A snapshot of this process's collective counts ([`tally`]); [`Tally::since`] gives the
/// collectives between two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    calls: [u64; KINDS.len()],
    bytes: [u64; KINDS.len()],
}

/// The collectives this process made so far through SCR's communicators.
pub fn tally() -> Tally {
    Tally {
        calls: std::array::from_fn(|i| CALLS[i].load(Ordering::Relaxed)),
        bytes: std::array::from_fn(|i| BYTES[i].load(Ordering::Relaxed)),
    }
}

impl Tally {
    /// The collectives made after `earlier` (a snapshot taken before this one).
    pub fn since(&self, earlier: &Tally) -> Tally {
        Tally {
            calls: std::array::from_fn(|i| self.calls[i].saturating_sub(earlier.calls[i])),
            bytes: std::array::from_fn(|i| self.bytes[i].saturating_sub(earlier.bytes[i])),
        }
    }

    /// How many collectives of `kind` (the tests count them; the reports use the totals).
    #[cfg(test)]
    pub fn calls(&self, kind: Kind) -> u64 {
        self.calls[kind as usize]
    }

    /// How many collectives in all.
    pub fn total(&self) -> u64 {
        self.calls.iter().sum()
    }

    /// Bytes this rank put into them.
    pub fn bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

/// `7 collectives (5 allreduce, 2 allgatherv), 812 B from this rank`
impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = KINDS
            .iter()
            .filter(|k| self.calls[**k as usize] > 0)
            .map(|k| format!("{} {}", self.calls[*k as usize], k.name()))
            .collect();
        write!(f, "{} collectives", self.total())?;
        if !kinds.is_empty() {
            write!(f, " ({})", kinds.join(", "))?;
        }
        write!(f, ", {} from this rank", crate::log::bytes(self.bytes()))
    }
}

/// How a process waits for the messages of [`Comm::overlap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Block in MPI (the caller has nothing else to do, as inside `SCR_Complete_output`).
    Block,
    /// Test now and then, sleeping in between: a background thread that leaves the cores to
    /// the application (a blocked MPI call would spin on one).
    Poll,
}

/// A communicator owned by the library.
pub struct Comm {
    imp: Imp,
    rank: i32,
    size: i32,
    /// The slot of [`Comm::allgather_bytes`] (4 bytes of length, then data): the same on
    /// every rank, since it grows only from lengths every rank received.
    slot: std::cell::Cell<usize>,
}

/// Bytes a broadcast carries in its first (and usually only) collective, its length included.
pub const BCAST_INLINE: usize = 256;

/// The allgather slot: at first 256 bytes, growing to fit what overflowed it (so an
/// agreement that exceeds it once fits the next time), at most 1 KiB; with many ranks
/// smaller, so that the slots of all ranks stay within 256 KiB (data beyond its rank's
/// slot travels in a second collective, an allgatherv).
fn slot_bounds(size: i32) -> (usize, usize) {
    let max = (256 * 1024 / size.max(1) as usize).clamp(16, 1024);
    (256.min(max), max)
}

/// The error of a broadcast in which the root sent no decision ([`Comm::decide_at`]).
fn no_decision(root: i32) -> CommError {
    CommError { op: "broadcast", why: format!("rank {root} sent no decision") }
}

/// Which kind of communicator a [`Comm`] is.
enum Imp {
    Mpi(SimpleCommunicator),
    /// In-process: this rank's view of a hub shared by the world's threads.
    Local(std::sync::Arc<local::Hub>),
}

/// Whether the application has initialised MPI and not yet finalised it.
pub fn mpi_active() -> bool {
    let mut init = 0;
    let mut fin = 0;
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time, even before
    // MPI_Init and after MPI_Finalize; they only write the ints we pass.
    unsafe {
        mpi::ffi::MPI_Initialized(&mut init);
        mpi::ffi::MPI_Finalized(&mut fin);
    }
    init != 0 && fin == 0
}

/// Whether MPI was initialised with `MPI_THREAD_MULTIPLE` (any thread may call MPI at any
/// time), and the name of the level it has.
pub fn thread_level() -> (bool, &'static str) {
    let mut provided = 0;
    // SAFETY: MPI_Query_thread may be called by any thread once MPI is initialised (the
    // callers run inside SCR calls, which require that); it only writes the int we pass.
    unsafe {
        mpi::ffi::MPI_Query_thread(&mut provided);
    }
    let name = match provided {
        p if p == mpi::ffi::MPI_THREAD_MULTIPLE as i32 => "MPI_THREAD_MULTIPLE",
        p if p == mpi::ffi::MPI_THREAD_SERIALIZED as i32 => "MPI_THREAD_SERIALIZED",
        p if p == mpi::ffi::MPI_THREAD_FUNNELED as i32 => "MPI_THREAD_FUNNELED",
        _ => "MPI_THREAD_SINGLE",
    };
    (name == "MPI_THREAD_MULTIPLE", name)
}

/// `MPI_Abort` on the world communicator: for failures where ranks can no longer agree.
pub fn abort(code: i32) -> ! {
    SimpleCommunicator::world().abort(code)
}

/// `MPI_Finalize` (only `SCR_HALT_EXIT` uses it, right before exiting the process).
pub fn finalize_mpi() {
    // SAFETY: called once, after the library dropped all its communicators.
    unsafe {
        mpi::ffi::MPI_Finalize();
    }
}

// SAFETY: an MPI communicator handle is a plain value that any thread may use; the library
// keeps its communicators inside the runtime mutex, so at most one thread calls MPI through
// them at a time, which MPI_THREAD_SERIALIZED (and FUNNELED from the main thread) permits.
// The one exception, the background encoder's own duplicates ([`Comm::dup`]), is used by
// that thread alone and only when [`thread_level`] reports MPI_THREAD_MULTIPLE. An in-process
// communicator is an `Arc` of a hub whose state is behind mutexes: Send by itself.
unsafe impl Send for Comm {}

impl Comm {
    /// Duplicate `MPI_COMM_WORLD` (`MPI_Comm_dup`). MPI must be initialised.
    pub fn world_dup() -> Comm {
        count(Kind::Create, 0);
        Comm::wrap(SimpleCommunicator::world().duplicate())
    }

    /// A copy of `MPI_COMM_WORLD` made inside the application's `MPI_Init` (transparent
    /// mode), with `MPI_Comm_create_group` instead of `MPI_Comm_dup`: see [`CREATE_TAG`] for
    /// why, and why its messages on the world cannot meet the application's there.
    pub fn world_copy_in_init() -> Comm {
        count(Kind::Create, 0);
        let world = SimpleCommunicator::world();
        Comm::wrap(create_group(&world, &world.group()))
    }

    /// One communicator per rank of the in-process world `hub` (rank order); each goes to
    /// its own thread (see `local::run`, the unit tests' world).
    pub fn in_process(hub: &std::sync::Arc<local::Hub>) -> Vec<Comm> {
        let size = hub.size() as i32;
        (0..size).map(|rank| Comm::with(Imp::Local(hub.clone()), rank, size)).collect()
    }

    fn wrap(inner: SimpleCommunicator) -> Comm {
        let rank = inner.rank();
        let size = inner.size();
        Comm::with(Imp::Mpi(inner), rank, size)
    }

    fn with(imp: Imp, rank: i32, size: i32) -> Comm {
        Comm { imp, rank, size, slot: std::cell::Cell::new(slot_bounds(size).0) }
    }

    /// Whether any thread may use this communicator's processes at any time (MPI:
    /// `MPI_THREAD_MULTIPLE`, see [`thread_level`]; in-process: always), and the level's name.
    pub fn thread_level(&self) -> (bool, &'static str) {
        match &self.imp {
            Imp::Mpi(_) => thread_level(),
            Imp::Local(_) => (true, "in-process threads"),
        }
    }

    /// In-process: every rank's `data` on every rank and the collective's number.
    fn exchange(hub: &local::Hub, rank: i32, data: Vec<u8>) -> (u64, std::sync::Arc<Vec<Vec<u8>>>) {
        hub.exchange(rank as usize, data)
    }

    /// In-process reduction of one fixed-size value per rank.
    fn local_reduce<const N: usize, T>(
        &self,
        hub: &local::Hub,
        v: T,
        to: fn(T) -> [u8; N],
        from: fn([u8; N]) -> T,
        op: fn(T, T) -> T,
    ) -> T {
        let (_, all) = Comm::exchange(hub, self.rank, to(v).to_vec());
        all.iter().map(|b| from(b[..].try_into().expect("every rank sent one value"))).reduce(op).expect("ranks")
    }

    /// This process's rank in the communicator (0-based).
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks in the communicator.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// Wait until every rank has called it (collective).
    pub fn barrier(&self) {
        count(Kind::Barrier, 0);
        match &self.imp {
            Imp::Mpi(c) => c.barrier(),
            Imp::Local(h) => {
                Comm::exchange(h, self.rank, Vec::new());
            }
        }
    }

    /// A duplicate of this communicator (collective): the same processes, separate traffic
    /// (made as [`CREATE_TAG`] says).
    pub fn dup(&self) -> Comm {
        count(Kind::Create, 0);
        match &self.imp {
            Imp::Mpi(c) => Comm::wrap(create_group(c, &c.group())),
            Imp::Local(_) => self.split(0, self.rank),
        }
    }

    /// Split into sub-communicators of equal `color`, ordered by `key` then rank, as
    /// `MPI_Comm_split` orders them (made as [`CREATE_TAG`] says: an allgather of every rank's
    /// color and key, then each color's group).
    pub fn split(&self, color: i32, key: i32) -> Comm {
        count(Kind::Create, 8);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut all = vec![0i32; 2 * self.size as usize];
                c.all_gather_into(&[color, key][..], &mut all[..]);
                let ranks = split_members(color, all.chunks(2).map(|ck| (ck[0], ck[1])));
                Comm::wrap(create_group(c, &c.group().include(&ranks)))
            }
            Imp::Local(h) => {
                let mine = [color.to_le_bytes(), key.to_le_bytes()].concat();
                let (round, all) = Comm::exchange(h, self.rank, mine);
                let int = |b: &[u8]| i32::from_le_bytes(b.try_into().expect("4 bytes"));
                let members = split_members(color, all.iter().map(|b| (int(&b[..4]), int(&b[4..]))));
                let rank = members.iter().position(|r| *r == self.rank).expect("this rank is a member") as i32;
                let hub = h.child(round, color, members.len());
                Comm::with(Imp::Local(hub), rank, members.len() as i32)
            }
        }
    }

    /// Number processes by equal strings (for example host names), at `root`: this process's
    /// group index and the number of groups, and on `root` every process's index. Groups are
    /// numbered in sorted string order, so the numbers are the same on every run;
    /// [`Comm::split`] by its index makes a group's communicator. Only `root` receives O(P)
    /// bytes (a gather of the strings); every other process receives its own numbers (a
    /// scatter).
    pub fn group_index(&self, root: i32, s: &str) -> CResult<(usize, usize, Option<Vec<usize>>)> {
        let ids = self.gather_bytes(root, s.as_bytes()).map(|all| {
            let mut uniq: Vec<&Vec<u8>> = all.iter().collect();
            uniq.sort();
            uniq.dedup();
            // every string of `all` is in `uniq`: its position is found
            let ids: Vec<usize> = all.iter().map(|v| uniq.binary_search(&v).unwrap_or(0)).collect();
            (ids, uniq.len())
        });
        let (id, n) = self.scatter(root, ids.as_ref().map(|(ids, n)| ids.iter().map(|&i| (i, *n)).collect()))?;
        Ok((id, n, ids.map(|(ids, _)| ids)))
    }

    /// Send bytes to `dest` (blocking; the receiver must know the length).
    pub fn send(&self, dest: i32, data: &[u8]) {
        match &self.imp {
            Imp::Mpi(c) => c.process_at_rank(dest).send(data),
            Imp::Local(h) => h.send(self.rank as usize, dest as usize, data),
        }
    }

    /// Receive exactly `buf.len()` bytes from `src`.
    pub fn recv_into(&self, src: i32, buf: &mut [u8]) {
        match &self.imp {
            Imp::Mpi(c) => {
                c.process_at_rank(src).receive_into(buf);
            }
            Imp::Local(h) => Comm::local_recv(h, src, self.rank, buf),
        }
    }

    /// In-process: the next message from `src` into `buf` (a longer one is a bug, as it is
    /// an error in MPI).
    fn local_recv(hub: &local::Hub, src: i32, me: i32, buf: &mut [u8]) {
        let m = hub.recv(src as usize, me as usize);
        assert!(m.len() <= buf.len(), "rank {me}: a message of {} bytes from rank {src} into {}", m.len(), buf.len());
        buf[..m.len()].copy_from_slice(&m);
    }

    /// Send a value of any length to `dest`.
    pub fn send_value<T: Serialize>(&self, dest: i32, value: &T) {
        let bytes = encode(value);
        self.send(dest, &(bytes.len() as u64).to_le_bytes());
        self.send(dest, &bytes);
    }

    /// Receive a value sent with [`Comm::send_value`] (the message is consumed whole even
    /// when it does not decode, so what follows stays in step).
    pub fn recv_value<T: DeserializeOwned>(&self, src: i32) -> CResult<T> {
        let mut len = [0u8; 8];
        self.recv_into(src, &mut len);
        let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
        self.recv_into(src, &mut bytes);
        decode("receive", src, &bytes)
    }

    /// Every rank gets `Ok(v)` only if every rank's `local` is `Ok`; otherwise every rank
    /// gets an error (its own, or one saying another rank failed).
    fn agreed<T>(&self, op: &'static str, local: CResult<T>) -> CResult<T> {
        if self.all_true(local.is_ok()) {
            return local;
        }
        Err(local.err().unwrap_or_else(|| CommError { op, why: "data another rank received does not decode".into() }))
    }

    /// Send `data` to `dest` and receive `buf.len()` bytes from `src` at once (no deadlock
    /// when every rank of a ring does it).
    pub fn sendrecv(&self, data: &[u8], dest: i32, buf: &mut [u8], src: i32) {
        match &self.imp {
            Imp::Mpi(c) => {
                mpi::point_to_point::send_receive_into(data, &c.process_at_rank(dest), buf, &c.process_at_rank(src));
            }
            Imp::Local(h) => {
                h.send(self.rank as usize, dest as usize, data);
                Comm::local_recv(h, src, self.rank, buf);
            }
        }
    }

    /// Start receiving into each of `recvs` and sending each of `sends` (buffer, peer rank),
    /// run `work` while the messages travel, then wait until all of them completed. Messages
    /// between two ranks arrive in the order they were started.
    pub fn overlap<R>(
        &self,
        sends: &[(&[u8], i32)],
        recvs: &mut [(&mut [u8], i32)],
        waiting: Waiting,
        work: impl FnOnce() -> R,
    ) -> R {
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(h) => {
                // sends never block here: post them, work, then take what arrived
                for (data, dest) in sends {
                    h.send(self.rank as usize, *dest as usize, data);
                }
                let out = work();
                for (buf, src) in recvs.iter_mut() {
                    Comm::local_recv(h, *src, self.rank, buf);
                }
                return out;
            }
        };
        mpi::request::scope(|scope| {
            let mut pending = Vec::with_capacity(sends.len() + recvs.len());
            for (buf, src) in recvs.iter_mut() {
                pending.push(inner.process_at_rank(*src).immediate_receive_into(scope, &mut **buf));
            }
            for (data, dest) in sends {
                pending.push(inner.process_at_rank(*dest).immediate_send(scope, *data));
            }
            let out = work();
            for req in pending {
                match waiting {
                    Waiting::Block => {
                        req.wait_without_status();
                    }
                    Waiting::Poll => {
                        let mut req = req;
                        // a transfer takes a few handshakes, each needs a test on both sides:
                        // short naps keep it moving, and cost a few microseconds of CPU each
                        let mut nap = std::time::Duration::from_micros(5);
                        while let Err(r) = req.test() {
                            req = r;
                            std::thread::sleep(nap);
                            nap = (nap * 2).min(std::time::Duration::from_micros(200));
                        }
                    }
                }
            }
            out
        })
    }

    /// Logical AND of `v` over all ranks.
    pub fn all_true(&self, v: bool) -> bool {
        self.min_i64(v as i64) == 1
    }

    /// Logical OR of `v` over all ranks.
    pub fn any_true(&self, v: bool) -> bool {
        self.max_i64(v as i64) == 1
    }

    /// The smallest `v` over all ranks (collective; every rank gets it).
    pub fn min_i64(&self, v: i64) -> i64 {
        count(Kind::Allreduce, 8);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = 0i64;
                c.all_reduce_into(&v, &mut out, SystemOperation::min());
                out
            }
            Imp::Local(h) => self.local_reduce(h, v, i64::to_le_bytes, i64::from_le_bytes, i64::min),
        }
    }

    /// The largest `v` over all ranks (collective; every rank gets it).
    pub fn max_i64(&self, v: i64) -> i64 {
        count(Kind::Allreduce, 8);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = 0i64;
                c.all_reduce_into(&v, &mut out, SystemOperation::max());
                out
            }
            Imp::Local(h) => self.local_reduce(h, v, i64::to_le_bytes, i64::from_le_bytes, i64::max),
        }
    }

    /// The sum of `v` over all ranks (collective; every rank gets it).
    pub fn sum_u64(&self, v: u64) -> u64 {
        count(Kind::Allreduce, 8);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = 0u64;
                c.all_reduce_into(&v, &mut out, SystemOperation::sum());
                out
            }
            Imp::Local(h) => self.local_reduce(h, v, u64::to_le_bytes, u64::from_le_bytes, u64::wrapping_add),
        }
    }

    /// Bitwise or of `v` over all ranks (no allocation: the sync points' agreement).
    pub fn or_bits(&self, v: u32) -> u32 {
        count(Kind::Allreduce, 4);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = 0u32;
                c.all_reduce_into(&v, &mut out, SystemOperation::bitwise_or());
                out
            }
            Imp::Local(h) => self.local_reduce(h, v, u32::to_le_bytes, u32::from_le_bytes, |a, b| a | b),
        }
    }

    /// Element-wise maximum of `v` over all ranks (one reduction for several values).
    pub fn max_u64s(&self, v: &[u64]) -> Vec<u64> {
        count(Kind::Allreduce, 8 * v.len());
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = vec![0u64; v.len()];
                c.all_reduce_into(v, &mut out[..], SystemOperation::max());
                out
            }
            Imp::Local(h) => {
                let mine: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let (_, all) = Comm::exchange(h, self.rank, mine);
                let mut out = vec![0u64; v.len()];
                for b in all.iter() {
                    assert_eq!(b.len(), v.len() * 8, "every rank reduces as many values");
                    for (o, x) in out.iter_mut().zip(b.chunks_exact(8)) {
                        *o = (*o).max(u64::from_le_bytes(x.try_into().expect("8 bytes")));
                    }
                }
                out
            }
        }
    }

    /// The largest `v` over all ranks (collective; every rank gets it).
    pub fn max_f64(&self, v: f64) -> f64 {
        count(Kind::Allreduce, 8);
        match &self.imp {
            Imp::Mpi(c) => {
                let mut out = 0f64;
                c.all_reduce_into(&v, &mut out, SystemOperation::max());
                out
            }
            Imp::Local(h) => self.local_reduce(h, v, f64::to_le_bytes, f64::from_le_bytes, f64::max),
        }
    }

    /// Broadcast bytes from `root` (its `data` is sent, the others' ignored).
    pub fn bcast_bytes(&self, root: i32, data: Vec<u8>) -> Vec<u8> {
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(h) => {
                count(Kind::Bcast, data.len());
                let mine = if self.rank == root { data } else { Vec::new() };
                return Comm::exchange(h, self.rank, mine).1[root as usize].clone();
            }
        };
        // one collective when the data fit in BCAST_INLINE with their length, two otherwise
        let proc = inner.process_at_rank(root);
        let mut head = [0u8; BCAST_INLINE];
        let room = BCAST_INLINE - 8;
        if self.rank == root {
            head[..8].copy_from_slice(&(data.len() as u64).to_le_bytes());
            let n = data.len().min(room);
            head[8..8 + n].copy_from_slice(&data[..n]);
        }
        count(Kind::Bcast, BCAST_INLINE);
        proc.broadcast_into(&mut head[..]);
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
        let n = len.min(room);
        let mut buf = if self.rank == root {
            data
        } else {
            let mut b = vec![0u8; len];
            b[..n].copy_from_slice(&head[8..8 + n]);
            b
        };
        if len > n {
            count(Kind::Bcast, len - n);
            proc.broadcast_into(&mut buf[n..]);
        }
        buf
    }

    /// Broadcast a value from `root` (every rank decodes the same bytes: one outcome).
    pub fn bcast<T: Serialize + DeserializeOwned>(&self, root: i32, value: &T) -> CResult<T> {
        let bytes = if self.rank == root { encode(value) } else { Vec::new() };
        let out = self.bcast_bytes(root, bytes);
        decode("broadcast", root, &out)
    }

    /// Gather byte strings to `root`: `Some(per-rank)` on the root, `None` elsewhere.
    pub fn gather_bytes(&self, root: i32, data: &[u8]) -> Option<Vec<Vec<u8>>> {
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(h) => {
                count(Kind::Gatherv, data.len());
                let (_, all) = Comm::exchange(h, self.rank, data.to_vec());
                return (self.rank == root).then(|| all.to_vec());
            }
        };
        let proc = inner.process_at_rank(root);
        let len = data.len() as i32;
        count(Kind::Gather, 4);
        count(Kind::Gatherv, data.len());
        if self.rank == root {
            let mut lens = vec![0i32; self.size as usize];
            proc.gather_into_root(&len, &mut lens[..]);
            let displs = displacements(&lens);
            let total: i32 = lens.iter().sum();
            let mut buf = vec![0u8; total as usize];
            {
                let mut part = PartitionMut::new(&mut buf[..], &lens[..], &displs[..]);
                proc.gather_varcount_into_root(data, &mut part);
            }
            Some(split_parts(&buf, &lens, &displs))
        } else {
            proc.gather_into(&len);
            proc.gather_varcount_into(data);
            None
        }
    }

    /// Gather values to `root`: `Some(per-rank)` on the root, `None` elsewhere (agreed: see
    /// [`CommError`]).
    pub fn gather<T: Serialize + DeserializeOwned>(&self, root: i32, value: &T) -> CResult<Option<Vec<T>>> {
        let local = match self.gather_bytes(root, &encode(value)) {
            Some(parts) => parts
                .iter()
                .enumerate()
                .map(|(r, p)| decode("gather", r as i32, p))
                .collect::<CResult<Vec<T>>>()
                .map(Some),
            None => Ok(None),
        };
        self.agreed("gather", local)
    }

    /// One outcome from every rank's value, decided by `root` and known to every rank: the
    /// values are gathered to `root`, which calls `decide` with them (`Err` if one does not
    /// decode), and its outcome is broadcast. It answers what an allgather followed by the same
    /// decision on every rank answers, but only `root` receives O(P) bytes: every other rank
    /// sends its value and receives the outcome. Two collectives, each O(log P) deep: a gather
    /// of a fixed slot per rank (as [`Comm::allgather_bytes`]'s, the same slot) and a
    /// broadcast; when some value did not fit its slot, the broadcast asks for the rest (a
    /// gatherv) and a second one brings the outcome, and the slot grows for the next call.
    /// `decide` runs on `root` only.
    pub fn decide_at<T, V>(&self, root: i32, value: &T, decide: impl FnOnce(CResult<Vec<T>>) -> V) -> CResult<V>
    where
        T: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        /// What the root broadcasts.
        #[derive(Serialize, serde::Deserialize)]
        enum Step<V> {
            Decided(V),
            /// Each rank's bytes beyond its slot, by rank: send them.
            More(Vec<i32>),
        }
        let decode_all = |parts: Vec<Vec<u8>>| -> CResult<Vec<T>> {
            parts.iter().enumerate().map(|(r, p)| decode("gather", r as i32, p)).collect()
        };
        let data = encode(value);
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(_) => {
                let outcome = self.gather_bytes(root, &data).map(|parts| decide(decode_all(parts)));
                return self.bcast(root, &outcome)?.ok_or_else(|| no_decision(root));
            }
        };
        let proc = inner.process_at_rank(root);
        let (slot, is_root) = (self.slot.get(), self.rank == root);
        let (mine, n) = to_slot(&data, slot);
        count(Kind::Gather, slot);
        let mut gathered = is_root.then(|| vec![0u8; slot * self.size as usize]);
        match gathered.as_mut() {
            Some(all) => proc.gather_into_root(&mine[..], &mut all[..]),
            None => proc.gather_into(&mine[..]),
        }
        // the root: every rank's bytes in its slot, and how many did not fit
        let (mut parts, over) = gathered.map(|all| from_slots(&all, slot)).unwrap_or_default();
        let mut decide = Some(decide);
        let mut step = if !is_root {
            None
        } else if over.iter().any(|o| *o > 0) {
            Some(Step::More(over))
        } else {
            let decide = decide.take().expect("decided once");
            Some(Step::Decided(decide(decode_all(std::mem::take(&mut parts)))))
        };
        loop {
            match self.bcast(root, &step)?.ok_or_else(|| no_decision(root))? {
                Step::Decided(v) => return Ok(v),
                Step::More(over) => {
                    self.grow_slot(&over);
                    count(Kind::Gatherv, data.len() - n);
                    step = None;
                    if !is_root {
                        proc.gather_varcount_into(&data[n..]);
                        continue;
                    }
                    let displs = displacements(&over);
                    let mut buf = vec![0u8; over.iter().sum::<i32>() as usize];
                    {
                        let mut part = PartitionMut::new(&mut buf[..], &over[..], &displs[..]);
                        proc.gather_varcount_into_root(&data[n..], &mut part);
                    }
                    for (p, rest) in parts.iter_mut().zip(split_parts(&buf, &over, &displs)) {
                        p.extend_from_slice(&rest);
                    }
                    let decide = decide.take().expect("decided once");
                    step = Some(Step::Decided(decide(decode_all(std::mem::take(&mut parts)))));
                }
            }
        }
    }

    /// Every rank's byte string, on every rank: one allgather of a fixed slot per rank (its
    /// length and first bytes), and an allgatherv of the rest only when some rank's data
    /// did not fit (every rank knows: the lengths came with the slots). The slot then grows
    /// for the next call (see [`slot_bounds`]).
    pub fn allgather_bytes(&self, data: &[u8]) -> Vec<Vec<u8>> {
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(h) => {
                count(Kind::Allgatherv, data.len());
                return Comm::exchange(h, self.rank, data.to_vec()).1.to_vec();
            }
        };
        let slot = self.slot.get();
        let (mine, n) = to_slot(data, slot);
        let mut all = vec![0u8; slot * self.size as usize];
        count(Kind::Allgather, slot);
        inner.all_gather_into(&mine[..], &mut all[..]);
        let (mut parts, over) = from_slots(&all, slot);
        if over.iter().any(|o| *o > 0) {
            let displs = displacements(&over);
            let total: i32 = over.iter().sum();
            let mut buf = vec![0u8; total as usize];
            count(Kind::Allgatherv, data.len() - n);
            {
                let mut part = PartitionMut::new(&mut buf[..], &over[..], &displs[..]);
                inner.all_gather_varcount_into(&data[n..], &mut part);
            }
            for (p, rest) in parts.iter_mut().zip(split_parts(&buf, &over, &displs)) {
                p.extend_from_slice(&rest);
            }
            self.grow_slot(&over);
        }
        parts
    }

    /// Grow the slot so that the longest value that overflowed it (`over`: each rank's bytes
    /// beyond its slot) fits next time, within [`slot_bounds`].
    fn grow_slot(&self, over: &[i32]) {
        let slot = self.slot.get();
        let need = over.iter().map(|o| *o as usize).max().unwrap_or(0) + slot;
        self.slot.set(need.next_power_of_two().clamp(slot, slot_bounds(self.size).1));
    }

    /// Every rank's value, on every rank (every rank decodes the same bytes: one outcome).
    pub fn allgather<T: Serialize + DeserializeOwned>(&self, value: &T) -> CResult<Vec<T>> {
        self.allgather_bytes(&encode(value))
            .iter()
            .enumerate()
            .map(|(r, p)| decode("allgather", r as i32, p))
            .collect::<CResult<Vec<T>>>()
    }

    /// Scatter one byte string per rank from `root` (`parts` is used on the root only).
    pub fn scatter_bytes(&self, root: i32, parts: Option<Vec<Vec<u8>>>) -> Vec<u8> {
        let inner = match &self.imp {
            Imp::Mpi(c) => c,
            Imp::Local(h) => {
                // the root sends every part (length-prefixed); each rank keeps its own
                let mine = if self.rank == root {
                    let parts = parts.expect("root provides the parts");
                    assert_eq!(parts.len(), self.size as usize);
                    parts
                        .iter()
                        .flat_map(|p| (p.len() as u64).to_le_bytes().into_iter().chain(p.iter().copied()))
                        .collect()
                } else {
                    Vec::new()
                };
                count(Kind::Scatterv, mine.len());
                let (_, all) = Comm::exchange(h, self.rank, mine);
                let mut rest = &all[root as usize][..];
                for r in 0..self.size {
                    let len = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")) as usize;
                    if r == self.rank {
                        return rest[8..8 + len].to_vec();
                    }
                    rest = &rest[8 + len..];
                }
                unreachable!("this rank's part is in the root's parts")
            }
        };
        let proc = inner.process_at_rank(root);
        let mut my_len = 0i32;
        count(Kind::Scatter, if self.rank == root { 4 * self.size as usize } else { 0 });
        if self.rank == root {
            let parts = parts.expect("root provides the parts");
            assert_eq!(parts.len(), self.size as usize);
            let lens: Vec<i32> = parts.iter().map(|p| p.len() as i32).collect();
            proc.scatter_into_root(&lens[..], &mut my_len);
            let displs = displacements(&lens);
            let flat: Vec<u8> = parts.concat();
            count(Kind::Scatterv, flat.len());
            let mut out = vec![0u8; my_len as usize];
            let part = Partition::new(&flat[..], &lens[..], &displs[..]);
            proc.scatter_varcount_into_root(&part, &mut out[..]);
            out
        } else {
            proc.scatter_into(&mut my_len);
            count(Kind::Scatterv, 0);
            let mut out = vec![0u8; my_len as usize];
            proc.scatter_varcount_into(&mut out[..]);
            out
        }
    }

    /// Scatter one value per rank from `root` (`values` is used on the root only; agreed:
    /// see [`CommError`]).
    pub fn scatter<T: Serialize + DeserializeOwned>(&self, root: i32, values: Option<Vec<T>>) -> CResult<T> {
        let parts = values.map(|v| v.iter().map(encode).collect());
        let bytes = self.scatter_bytes(root, parts);
        self.agreed("scatter", decode("scatter", root, &bytes))
    }
}

/// The ranks of color `color` given every rank's (color, key) in rank order, ordered by key
/// then rank, as `MPI_Comm_split` orders them ([`Comm::split`], both kinds of communicator).
fn split_members(color: i32, all: impl Iterator<Item = (i32, i32)>) -> Vec<i32> {
    let mut members: Vec<(i32, i32)> =
        all.zip(0..).filter(|((c, _), _)| *c == color).map(|((_, key), rank)| (key, rank)).collect();
    members.sort();
    members.into_iter().map(|(_, rank)| rank).collect()
}

/// The tag of the library's `MPI_Comm_create_group` calls, the way it makes every
/// communicator of its own but the API's copy of the world ([`Comm::world_dup`]).
///
/// Why not `MPI_Comm_dup` and `MPI_Comm_split`: Open MPI agrees on a new communicator's
/// context id with a non-blocking allreduce on the parent, and the first non-blocking
/// collective on a communicator adds a progress callback (`libnbc`'s) that every progress loop
/// of the process then calls until that communicator is freed; for a copy of the world,
/// never. An application that makes no communicator of its own would pay it in each of its
/// world collectives (about 3% of a 2-rank allreduce of one double here, by `perf`).
/// `MPI_Comm_create_group` agrees with point-to-point messages between the group's members
/// on the parent instead.
///
/// Those messages carry this tag on the parent. On the library's own communicators nothing
/// else uses it (its point-to-point messages use tag 0). On `MPI_COMM_WORLD`
/// ([`Comm::world_copy_in_init`]) the copy is made inside the application's `MPI_Init`, before
/// this process has any message of the application in flight; another rank that already
/// left `MPI_Init` may send the application's messages, but a member leaves the agreement only
/// after each member it exchanges with there has its last message from it, and messages
/// between two processes on one communicator with one tag arrive in order. `SCR_Init` (the
/// API) cannot say the same of the world, so its copy is `MPI_Comm_dup`'s.
const CREATE_TAG: i32 = 0x5c52;

/// The members of `group` (a subgroup of `parent`'s, in that order) as a communicator, with
/// `MPI_Comm_create_group`: collective over the members only, so the colors of a split are made
/// side by side (their members are disjoint).
fn create_group(parent: &SimpleCommunicator, group: &mpi::topology::UserGroup) -> SimpleCommunicator {
    parent.split_by_subgroup_with_tag(group, CREATE_TAG).expect("this process is a member of its own group")
}

/// `data` in a slot of `slot` bytes ([`Comm::allgather_bytes`], [`Comm::decide_at`]): its
/// length (4 bytes), then as much of it as fits. The slot, and how many bytes fitted.
fn to_slot(data: &[u8], slot: usize) -> (Vec<u8>, usize) {
    let n = data.len().min(slot - 4);
    let mut mine = vec![0u8; slot];
    mine[..4].copy_from_slice(&(data.len() as u32).to_le_bytes());
    mine[4..4 + n].copy_from_slice(&data[..n]);
    (mine, n)
}

/// Every rank's slot as [`to_slot`] filled it: the bytes that fitted, and how many more each
/// rank has (0: all of it fitted), by rank.
fn from_slots(all: &[u8], slot: usize) -> (Vec<Vec<u8>>, Vec<i32>) {
    let room = slot - 4;
    all.chunks(slot)
        .map(|c| {
            let len = u32::from_le_bytes(c[..4].try_into().expect("4 bytes")) as usize;
            (c[4..4 + len.min(room)].to_vec(), len.saturating_sub(room) as i32)
        })
        .unzip()
}

fn displacements(lens: &[i32]) -> Vec<i32> {
    lens.iter()
        .scan(0i32, |acc, l| {
            let d = *acc;
            *acc += l;
            Some(d)
        })
        .collect()
}

fn split_parts(buf: &[u8], lens: &[i32], displs: &[i32]) -> Vec<Vec<u8>> {
    lens.iter().zip(displs).map(|(l, d)| buf[*d as usize..(*d + *l) as usize].to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_that_does_not_decode_names_the_operation_and_the_sender() {
        let e = decode::<Vec<u64>>("gather", 3, b"{not json").unwrap_err();
        assert!(e.to_string().starts_with("gather: data from rank 3 does not decode"), "{e}");
        // a NaN travels as null and comes back as an error, not a panic
        let bytes = encode(&f64::NAN);
        assert!(decode::<f64>("broadcast", 0, &bytes).is_err());
        assert_eq!(decode::<(u32, String)>("x", 0, &encode(&(7u32, "a".to_string()))).unwrap(), (7, "a".to_string()));
    }

    #[test]
    fn a_tally_counts_collectives_per_kind_between_two_snapshots() {
        let before = tally();
        count(Kind::Allreduce, 8);
        count(Kind::Allreduce, 16);
        count(Kind::Allgatherv, 1000);
        let d = tally().since(&before);
        // (other tests may count too, in parallel: at least ours are there)
        assert!(d.calls(Kind::Allreduce) >= 2 && d.calls(Kind::Allgatherv) >= 1, "{d}");
        assert!(d.bytes() >= 1024, "{d}");
        let mut t = Tally::default();
        t.calls[Kind::Allreduce as usize] = 5;
        t.calls[Kind::Allgatherv as usize] = 2;
        t.bytes[Kind::Allgatherv as usize] = 812;
        assert_eq!(t.to_string(), "7 collectives (5 allreduce, 2 allgatherv), 812 B from this rank");
        assert_eq!(Tally::default().to_string(), "0 collectives, 0 B from this rank");
    }

    #[test]
    fn in_process_collectives_give_every_rank_the_same_answer() {
        for n in [1usize, 4] {
            let out = local::run(n, |c| {
                let r = c.rank();
                let v = r as i64 + 1;
                let text = format!("rank {r}");
                (
                    (c.size(), c.min_i64(v), c.max_i64(v), c.sum_u64(v as u64), c.or_bits(1 << r)),
                    (
                        c.all_true(r != 2),
                        c.any_true(r == 2),
                        c.max_u64s(&[v as u64, 10 - v as u64]),
                        c.max_f64(v as f64),
                    ),
                    (c.bcast(n as i32 - 1, &text).unwrap(), c.allgather(&r).unwrap(), c.gather(0, &text).unwrap()),
                    c.scatter(0, (r == 0).then(|| (0..n as i32).map(|i| i * 10).collect())).unwrap(),
                    c.bcast_bytes(0, if r == 0 { vec![] } else { vec![9] }),
                )
            });
            let n32 = n as i32;
            for (r, o) in out.into_iter().enumerate() {
                assert_eq!(o.0, (n32, 1, n as i64, (n * (n + 1) / 2) as u64, (1u32 << n) - 1));
                assert_eq!(o.1 .0, n < 3);
                assert_eq!(o.1 .1, n >= 3);
                assert_eq!(o.1 .2, vec![n as u64, 9]);
                assert_eq!(o.1 .3, n as f64);
                assert_eq!(o.2 .0, format!("rank {}", n - 1));
                assert_eq!(o.2 .1, (0..n32).collect::<Vec<_>>());
                let gathered = (r == 0).then(|| (0..n).map(|i| format!("rank {i}")).collect::<Vec<_>>());
                assert_eq!(o.2 .2, gathered);
                assert_eq!(o.3, r as i32 * 10);
                assert!(o.4.is_empty(), "the root's empty bytes reach every rank");
            }
        }
    }

    #[test]
    fn a_decision_at_the_root_reaches_every_rank_and_the_root_alone_sees_the_values() {
        for n in [1usize, 4] {
            let out = local::run(n, |c| {
                let r = c.rank();
                let mut seen = None;
                let sum = c.decide_at(n as i32 - 1, &(r as u64 * 10), |all| {
                    let all = all.expect("every value decodes");
                    seen = Some(all.clone());
                    all.iter().sum::<u64>()
                });
                // a value the root cannot decode is its decision's input too, on every rank alike
                let broken = if r == 0 {
                    let parts = c.gather_bytes(0, b"{broken");
                    let outcome = parts.map(|p| {
                        let all: CResult<Vec<u64>> =
                            p.iter().enumerate().map(|(r, b)| decode("gather", r as i32, b)).collect();
                        all.map_err(|e| e.to_string())
                    });
                    c.bcast(0, &outcome).unwrap().unwrap()
                } else {
                    c.decide_at(0, &7u64, |all| all.map_err(|e| e.to_string())).unwrap()
                };
                (sum.unwrap(), seen, broken)
            });
            for (r, (sum, seen, broken)) in out.into_iter().enumerate() {
                assert_eq!(sum, (0..n as u64).map(|i| i * 10).sum::<u64>());
                assert_eq!(seen.is_some(), r == n - 1, "only the root decides");
                let e = broken.unwrap_err();
                assert!(e.contains("data from rank 0 does not decode"), "{e}");
            }
        }
    }

    #[test]
    fn in_process_split_orders_by_key_and_separates_traffic() {
        let out = local::run(4, |c| {
            // colors: even and odd ranks; keys reverse the order
            let sub = c.split(c.rank() % 2, -c.rank());
            let members: Vec<i32> = sub.allgather(&c.rank()).unwrap();
            let (id, groups, all) = c.group_index(0, if c.rank() < 3 { "b" } else { "a" }).unwrap();
            assert_eq!(all, (c.rank() == 0).then(|| vec![1, 1, 1, 0]), "the root alone sees every index");
            let node = c.split(id as i32, c.rank());
            let dup = c.dup();
            // a message on the duplicate is not seen on the original
            if c.rank() == 0 {
                dup.send_value(1, &"on dup");
                c.send_value(1, &"on world");
            }
            let got =
                (c.rank() == 1).then(|| (c.recv_value::<String>(0).unwrap(), dup.recv_value::<String>(0).unwrap()));
            (sub.rank(), sub.size(), members, node.size(), groups, id, got)
        });
        assert_eq!(out[0].2, vec![2, 0]);
        assert_eq!(out[1].2, vec![3, 1]);
        assert_eq!((out[2].0, out[2].1), (0, 2));
        assert_eq!((out[0].0, out[0].1), (1, 2));
        assert_eq!((out[0].3, out[0].4, out[0].5), (3, 2, 1));
        assert_eq!((out[3].3, out[3].4, out[3].5), (1, 2, 0));
        assert_eq!(out[1].6, Some(("on world".to_string(), "on dup".to_string())));
    }

    #[test]
    fn in_process_point_to_point_keeps_order_and_rings_do_not_deadlock() {
        let n = 4;
        let out = local::run(n, |c| {
            let (r, n) = (c.rank(), c.size());
            let (right, left) = ((r + 1) % n, (r + n - 1) % n);
            let mut a = [0u8; 1];
            c.sendrecv(&[r as u8], right, &mut a, left);
            let mut b = [0u8; 2];
            let worked = c.overlap(&[(&[r as u8, 1][..], left)], &mut [(&mut b[..], right)], Waiting::Block, || 7);
            for i in 0..3u8 {
                c.send(right, &[i]);
            }
            let order: Vec<u8> = (0..3)
                .map(|_| {
                    let mut m = [0u8];
                    c.recv_into(left, &mut m);
                    m[0]
                })
                .collect();
            (a[0], b, worked, order)
        });
        for (r, o) in out.iter().enumerate() {
            assert_eq!(o.0 as usize, (r + n - 1) % n);
            assert_eq!(o.1, [((r + 1) % n) as u8, 1]);
            assert_eq!((o.2, &o.3[..]), (7, &[0, 1, 2][..]));
        }
    }

    #[test]
    fn in_process_undecodable_data_is_an_error_on_every_rank() {
        let out = local::run(3, |c| {
            // rank 1 sends bytes that do not decode: every rank receives them, and fails alike
            // (no agreement needed: the same bytes decode the same everywhere)
            let value: CResult<Vec<u32>> = if c.rank() == 1 {
                let all = c.allgather_bytes(b"{broken");
                all.iter().enumerate().map(|(r, p)| decode("allgather", r as i32, p)).collect()
            } else {
                c.allgather::<u32>(&5)
            };
            value.map_err(|e| e.to_string())
        });
        assert!(out.iter().all(|o| o.is_err()), "{out:?}");
        assert!(out[0].as_ref().unwrap_err().contains("data from rank 1 does not decode"), "{out:?}");
    }

    #[test]
    fn in_process_a_rank_that_dies_fails_the_others_instead_of_hanging() {
        let r = std::panic::catch_unwind(|| {
            local::run(3, |c| {
                if c.rank() == 2 {
                    panic!("rank 2 dies before the barrier");
                }
                c.barrier();
            })
        });
        let msg = r.unwrap_err();
        let text = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("rank 2 of 3 panicked: rank 2 dies before the barrier"), "{text}");
    }
}
