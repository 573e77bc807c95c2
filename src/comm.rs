//! The MPI wrapper: the few collective and point-to-point operations the core needs, over a
//! communicator the library owns (a duplicate of the application's world, never
//! `MPI_COMM_WORLD` itself, so library traffic cannot match application messages).
//!
//! Variable-size data travels as bytes; typed data as JSON through [`Comm::bcast`],
//! [`Comm::gather`], [`Comm::allgather`] and [`Comm::scatter`]. Data received from another
//! rank that does not decode (a bug, or memory corrupted on the way) is a [`CommError`], and
//! the typed collectives agree on it: when any rank fails to decode, every rank returns the
//! error, so no rank goes on alone into a collective the others never reach. The library never initialises
//! or finalises MPI on the application's behalf (except `SCR_HALT_EXIT`, which ends the
//! process by design).

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

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
    inner: SimpleCommunicator,
    rank: i32,
    size: i32,
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
// that thread alone and only when [`thread_level`] reports MPI_THREAD_MULTIPLE.
unsafe impl Send for Comm {}

impl Comm {
    /// Duplicate `MPI_COMM_WORLD`. MPI must be initialised.
    pub fn world_dup() -> Comm {
        Comm::wrap(SimpleCommunicator::world().duplicate())
    }

    fn wrap(inner: SimpleCommunicator) -> Comm {
        let rank = inner.rank();
        let size = inner.size();
        Comm { inner, rank, size }
    }

    pub fn rank(&self) -> i32 {
        self.rank
    }

    pub fn size(&self) -> i32 {
        self.size
    }

    pub fn barrier(&self) {
        self.inner.barrier();
    }

    /// A duplicate of this communicator (collective): the same processes, separate traffic.
    pub fn dup(&self) -> Comm {
        Comm::wrap(self.inner.duplicate())
    }

    /// Split into sub-communicators of equal `color`, ordered by `key`.
    pub fn split(&self, color: i32, key: i32) -> Comm {
        let c = self.inner.split_by_color_with_key(Color::with_value(color), key).expect("color is defined");
        Comm::wrap(c)
    }

    /// Split into groups of processes that gave equal strings (for example host names);
    /// returns the group communicator, the number of groups and this process's group index
    /// (groups numbered in sorted string order, so the result is the same on every run).
    pub fn split_by_string(&self, s: &str) -> CResult<(Comm, usize, usize)> {
        let (ids, groups) = self.group_ids(s)?;
        let id = ids[self.rank as usize];
        Ok((self.split(id as i32, self.rank), groups, id))
    }

    /// Number processes by equal strings: every process's group index (in sorted string
    /// order) and the number of groups, on every process.
    pub fn group_ids(&self, s: &str) -> CResult<(Vec<usize>, usize)> {
        let all: Vec<String> = self.allgather(&s.to_string())?;
        let mut uniq: Vec<&String> = all.iter().collect();
        uniq.sort();
        uniq.dedup();
        // every string of `all` is in `uniq`: its position is found
        let ids = all.iter().map(|v| uniq.binary_search(&v).unwrap_or(0)).collect();
        Ok((ids, uniq.len()))
    }

    /// Send bytes to `dest` (blocking; the receiver must know the length).
    pub fn send(&self, dest: i32, data: &[u8]) {
        self.inner.process_at_rank(dest).send(data);
    }

    /// Receive exactly `buf.len()` bytes from `src`.
    pub fn recv_into(&self, src: i32, buf: &mut [u8]) {
        self.inner.process_at_rank(src).receive_into(buf);
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
        mpi::point_to_point::send_receive_into(
            data,
            &self.inner.process_at_rank(dest),
            buf,
            &self.inner.process_at_rank(src),
        );
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
        mpi::request::scope(|scope| {
            let mut pending = Vec::with_capacity(sends.len() + recvs.len());
            for (buf, src) in recvs.iter_mut() {
                pending.push(self.inner.process_at_rank(*src).immediate_receive_into(scope, &mut **buf));
            }
            for (data, dest) in sends {
                pending.push(self.inner.process_at_rank(*dest).immediate_send(scope, *data));
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

    pub fn min_i64(&self, v: i64) -> i64 {
        let mut out = 0i64;
        self.inner.all_reduce_into(&v, &mut out, SystemOperation::min());
        out
    }

    pub fn max_i64(&self, v: i64) -> i64 {
        let mut out = 0i64;
        self.inner.all_reduce_into(&v, &mut out, SystemOperation::max());
        out
    }

    pub fn sum_u64(&self, v: u64) -> u64 {
        let mut out = 0u64;
        self.inner.all_reduce_into(&v, &mut out, SystemOperation::sum());
        out
    }

    /// Bitwise or of `v` over all ranks (no allocation: the sync points' agreement).
    pub fn or_bits(&self, v: u32) -> u32 {
        let mut out = 0u32;
        self.inner.all_reduce_into(&v, &mut out, SystemOperation::bitwise_or());
        out
    }

    /// Element-wise maximum of `v` over all ranks (one reduction for several values).
    pub fn max_u64s(&self, v: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; v.len()];
        self.inner.all_reduce_into(v, &mut out[..], SystemOperation::max());
        out
    }

    pub fn max_f64(&self, v: f64) -> f64 {
        let mut out = 0f64;
        self.inner.all_reduce_into(&v, &mut out, SystemOperation::max());
        out
    }

    /// Broadcast bytes from `root` (its `data` is sent, the others' ignored).
    pub fn bcast_bytes(&self, root: i32, data: Vec<u8>) -> Vec<u8> {
        let proc = self.inner.process_at_rank(root);
        let mut len = data.len() as u64;
        proc.broadcast_into(&mut len);
        let mut buf = if self.rank == root { data } else { vec![0u8; len as usize] };
        if len > 0 {
            proc.broadcast_into(&mut buf[..]);
        }
        buf
    }

    /// Broadcast a value from `root` (agreed: see [`CommError`]).
    pub fn bcast<T: Serialize + DeserializeOwned>(&self, root: i32, value: &T) -> CResult<T> {
        let bytes = if self.rank == root { encode(value) } else { Vec::new() };
        let out = self.bcast_bytes(root, bytes);
        self.agreed("broadcast", decode("broadcast", root, &out))
    }

    /// Gather byte strings to `root`: `Some(per-rank)` on the root, `None` elsewhere.
    pub fn gather_bytes(&self, root: i32, data: &[u8]) -> Option<Vec<Vec<u8>>> {
        let proc = self.inner.process_at_rank(root);
        let len = data.len() as i32;
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

    /// Every rank's byte string, on every rank.
    pub fn allgather_bytes(&self, data: &[u8]) -> Vec<Vec<u8>> {
        let len = data.len() as i32;
        let mut lens = vec![0i32; self.size as usize];
        self.inner.all_gather_into(&len, &mut lens[..]);
        let displs = displacements(&lens);
        let total: i32 = lens.iter().sum();
        let mut buf = vec![0u8; total as usize];
        {
            let mut part = PartitionMut::new(&mut buf[..], &lens[..], &displs[..]);
            self.inner.all_gather_varcount_into(data, &mut part);
        }
        split_parts(&buf, &lens, &displs)
    }

    /// Every rank's value, on every rank (agreed: see [`CommError`]).
    pub fn allgather<T: Serialize + DeserializeOwned>(&self, value: &T) -> CResult<Vec<T>> {
        let local = self
            .allgather_bytes(&encode(value))
            .iter()
            .enumerate()
            .map(|(r, p)| decode("allgather", r as i32, p))
            .collect::<CResult<Vec<T>>>();
        self.agreed("allgather", local)
    }

    /// Scatter one byte string per rank from `root` (`parts` is used on the root only).
    pub fn scatter_bytes(&self, root: i32, parts: Option<Vec<Vec<u8>>>) -> Vec<u8> {
        let proc = self.inner.process_at_rank(root);
        let mut my_len = 0i32;
        if self.rank == root {
            let parts = parts.expect("root provides the parts");
            assert_eq!(parts.len(), self.size as usize);
            let lens: Vec<i32> = parts.iter().map(|p| p.len() as i32).collect();
            proc.scatter_into_root(&lens[..], &mut my_len);
            let displs = displacements(&lens);
            let flat: Vec<u8> = parts.concat();
            let mut out = vec![0u8; my_len as usize];
            let part = Partition::new(&flat[..], &lens[..], &displs[..]);
            proc.scatter_varcount_into_root(&part, &mut out[..]);
            out
        } else {
            proc.scatter_into(&mut my_len);
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
}
