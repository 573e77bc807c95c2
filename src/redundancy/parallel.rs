//! The parallel schedules over a set's communicator: encoding a completed dataset and
//! rebuilding lost members in `SCR_Init`. Every rank of the set runs the same sequence of
//! messages whatever fails locally (a failed read sends zeros and is reported afterwards), so an
//! I/O error never leaves a partner waiting; the caller agrees on the outcome.
//!
//! Every schedule is pipelined: while one piece travels (non-blocking send and receive), the
//! rank reads the data of its next step or writes what arrived before ([`Comm::overlap`];
//! XOR/RS read a piece's first data so, and add the later data from the files' mappings).
//! Each file byte is read once, each redundancy byte written once, buffers are filled by the
//! read or the first contribution (never cleared first), and CRC32s are taken as the bytes
//! pass (the stream's), so a rebuilt file is checked without reading it back.
//!
//! * XOR/RS encode is SCR's pipelined reduce-scatter: for each piece of the chunk, `n - 1`
//!   steps of receive-from-left, add own contribution, send-right.
//! * XOR/RS rebuild is a chain through the survivors in set order: each adds its shards times
//!   the recovery coefficients into the running sums and passes them on (piece `p` travels
//!   while piece `p + 1` is read); the last survivor sends each lost rank its shards.
//! * PARTNER sends each rank's files to its right-hand neighbour; a rebuild gets the files back
//!   from the right neighbour and, at the same time, the partner copy again from the left one.
//!
//! An encoding writes its redundancy file under a temporary name (`<name>.part`) and renames it
//! into place only once every member of the set finished its own: a redundancy file under its
//! name means the whole set is encoded, so a run killed during an encoding never leaves a
//! member that looks protected by half an encoding.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::codec::{Code, Shard};
use super::redfile::{self, FileEntry, Header};
use super::stream::{Part, Stream};
use super::{gf, RedError, RedInfo};
use crate::comm::{Comm, Waiting};
use crate::desc::Scheme;
use crate::error::{Error, IoContext, Result};
use crate::state::filemap::DatasetRecord;

/// This rank's set for a redundancy descriptor (built at `SCR_Init`).
pub struct SetPlan {
    pub id: usize,
    /// World ranks of the members, in set order.
    pub ranks: Vec<i32>,
    pub index: usize,
    /// The scheme applied (SINGLE when the set has one member).
    pub scheme: Scheme,
    /// Losses tolerated per set.
    pub failures: usize,
    pub comm: Comm,
}

impl SetPlan {
    /// The same set over a duplicate of its communicator (collective over the set): traffic
    /// that can never match the original's.
    pub fn duplicate(&self) -> SetPlan {
        SetPlan {
            id: self.id,
            ranks: self.ranks.clone(),
            index: self.index,
            scheme: self.scheme,
            failures: self.failures,
            comm: self.comm.dup(),
        }
    }
}

/// Remembers the first local failure while the schedule goes on.
#[derive(Default)]
struct Failure(Option<Error>);

impl Failure {
    fn note<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.get_or_insert(e);
                None
            }
        }
    }
    fn into_result(self) -> Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The payload of a redundancy file being read or written (absent if it could not be opened:
/// the failure is noted already and the schedule goes on without it).
struct Payload<'a> {
    file: Option<&'a File>,
    path: &'a Path,
}

impl Payload<'_> {
    fn write(&self, fail: &mut Failure, off: u64, bytes: &[u8]) {
        if let Some(f) = self.file {
            fail.note(redfile::write_payload(f, self.path, off, bytes));
        }
    }

    fn read(&self, fail: &mut Failure, off: u64, buf: &mut [u8]) {
        let r = self.file.map_or(Ok(()), |f| redfile::read_payload(f, self.path, off, buf));
        if fail.note(r).is_none() {
            buf.fill(0);
        }
    }
}

/// Read `buf.len()` bytes of the stream at `off`; zeros if that fails (noted).
fn read_stream(stream: &mut Stream, fail: &mut Failure, off: u64, buf: &mut [u8]) {
    if fail.note(stream.read_at(off, buf)).is_none() {
        buf.fill(0);
    }
}

/// The pieces `(offset, length)` of `size` bytes.
fn pieces(size: u64, piece: usize) -> Vec<(u64, usize)> {
    (0..size.div_ceil(piece as u64))
        .map(|p| (p * piece as u64, piece.min((size - p * piece as u64) as usize)))
        .collect()
}

fn parts(rec: &DatasetRecord) -> Vec<Part> {
    rec.files.iter().map(|f| Part { path: f.path.clone(), size: f.size }).collect()
}

/// Where a dataset's redundancy file goes.
pub fn red_path(dir: &Path, red: &RedInfo) -> PathBuf {
    dir.join(crate::paths::SCR_DIR).join(redfile::file_name(red))
}

/// The temporary name of a redundancy file while it is encoded.
fn part_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// Encode `rec` (complete, sizes known) over the set; records the CRC32 of every file and,
/// once every member's redundancy file is complete and in place, `rec.red`. Collective over
/// `plan.comm`; `waiting` says how this rank waits for its messages.
pub fn encode(plan: &SetPlan, rec: &mut DatasetRecord, piece: usize, waiting: Waiting) -> Result<()> {
    let n = plan.ranks.len();
    let comm = &plan.comm;
    let mut stream = Stream::reader(parts(rec));
    let totals: Vec<u64> = comm.allgather(&stream.total())?;
    let mut red = RedInfo {
        scheme: plan.scheme,
        set_id: plan.id,
        ranks: plan.ranks.clone(),
        index: plan.index,
        failures: plan.failures,
        chunk: 0,
        file: PathBuf::new(),
    };
    red.file = red_path(&rec.dir, &red);
    let part = part_path(&red.file);
    let mut fail = Failure::default();
    let file = fail.note(redfile::create(&part));
    let out = Payload { file: file.as_ref(), path: &part };
    let payload = if plan.scheme == Scheme::Partner {
        red.chunk = totals[(plan.index + n - 1) % n];
        encode_partner(comm, plan.index, &totals, &mut stream, &out, piece, waiting, &mut fail);
        red.chunk
    } else {
        let code = Code::new(n, plan.failures)?;
        red.chunk = code.chunk_size(totals.iter().copied().max().unwrap_or(0));
        encode_code(comm, plan.index, code, red.chunk, &mut stream, &out, piece, waiting, &mut fail);
        code.m as u64 * red.chunk
    };
    // Every byte of every file went through the stream once: its CRC32 is known.
    for (f, crc) in rec.files.iter_mut().zip(stream.crcs()) {
        match (f.crc, crc) {
            (Some(old), Some(new)) if old != new => fail.note::<()>(Err(Error::Integrity {
                path: f.path.clone(),
                why: "the file changed after SCR_Complete_output checked it".into(),
            })),
            (_, Some(new)) => {
                f.crc = Some(new);
                None
            }
            _ => None,
        };
    }
    let mine: Vec<FileEntry> = rec.files.iter().map(FileEntry::of).collect();
    let all: Vec<Vec<FileEntry>> = comm.allgather(&mine)?;
    if let Some(f) = &file {
        fail.note(redfile::finish(f, &part, payload, &Header::new(rec, &red, &all)));
    }
    if !comm.all_true(fail.0.is_none()) {
        let _ = crate::paths::remove_file_if_exists(&part);
        return Err(fail.0.unwrap_or_else(|| RedError::PeerFailed.into()));
    }
    std::fs::rename(&part, &red.file).ctx("rename", &part)?;
    rec.red = Some(red);
    Ok(())
}

/// PARTNER: send this rank's stream to the right neighbour while the left one's arrives and
/// goes into the redundancy file; the next piece is read and the last one written meanwhile.
#[allow(clippy::too_many_arguments)] // one schedule's state, passed down once
fn encode_partner(
    comm: &Comm,
    i: usize,
    totals: &[u64],
    stream: &mut Stream,
    out: &Payload<'_>,
    piece: usize,
    waiting: Waiting,
    fail: &mut Failure,
) {
    let n = totals.len();
    let (left, right) = ((i + n - 1) % n, (i + 1) % n);
    let steps = totals.iter().map(|t| t.div_ceil(piece as u64)).max().unwrap_or(0);
    let len = |total: u64, step: u64| (total.saturating_sub(step * piece as u64) as usize).min(piece);
    let (mut send, mut send_next) = (vec![0u8; piece], vec![0u8; piece]);
    let (mut recv, mut recv_prev) = (vec![0u8; piece], vec![0u8; piece]);
    if steps > 0 {
        read_stream(stream, fail, 0, &mut send[..len(totals[i], 0)]);
    }
    for step in 0..steps {
        let (ls, lr, next) = (len(totals[i], step), len(totals[left], step), len(totals[i], step + 1));
        comm.overlap(&[(&send[..ls], right as i32)], &mut [(&mut recv[..lr], left as i32)], waiting, || {
            if next > 0 {
                read_stream(stream, fail, (step + 1) * piece as u64, &mut send_next[..next]);
            }
            if step > 0 {
                let prev = len(totals[left], step - 1);
                out.write(fail, (step - 1) * piece as u64, &recv_prev[..prev]);
            }
        });
        std::mem::swap(&mut send, &mut send_next);
        std::mem::swap(&mut recv, &mut recv_prev);
    }
    if steps > 0 {
        out.write(fail, (steps - 1) * piece as u64, &recv_prev[..len(totals[left], steps - 1)]);
    }
}

/// XOR/RS: the pipelined reduce-scatter (see the module doc); the first data of the next
/// piece is read while the sums of this step travel, the data of the later steps is added
/// into the sums straight from the files' mappings ([`Stream::visit`]).
#[allow(clippy::too_many_arguments)] // one schedule's state, passed down once
fn encode_code(
    comm: &Comm,
    i: usize,
    code: Code,
    chunk: u64,
    stream: &mut Stream,
    out: &Payload<'_>,
    piece: usize,
    waiting: Waiting,
    fail: &mut Failure,
) {
    let (n, m, k) = (code.n, code.m, code.k());
    let (left, right) = (((i + n - 1) % n) as i32, ((i + 1) % n) as i32);
    let piece = piece.min(chunk.max(1) as usize);
    // acc: the sums this step sends; inc: the sums arriving; next: the first data of a piece
    let mut acc = vec![0u8; m * piece];
    let mut inc = vec![0u8; m * piece];
    let mut next = vec![0u8; m * piece];
    let all = pieces(chunk, piece);
    if let Some(&(_, len)) = all.first() {
        read_stream(stream, fail, 0, &mut next[..len]);
    }
    for (p, &(off, len)) in all.iter().enumerate() {
        for t in 0..n - 1 {
            if t == 0 {
                // the first contribution: row 0's coefficients are all 1, the data itself
                std::mem::swap(&mut acc, &mut next);
                let (row0, rest) = acc[..m * len].split_at_mut(len);
                for j in 1..m {
                    gf::mul_into(code.coef(j, 0), row0, &mut rest[(j - 1) * len..j * len]);
                }
            } else if t < k {
                // added straight from the file's mapping (no copy; padding adds nothing)
                let acc = &mut acc[..m * len];
                let r = stream.visit(t as u64 * chunk + off, len, |at, bytes| {
                    for j in 0..m {
                        gf::mul_xor(code.coef(j, t), bytes, &mut acc[j * len + at..j * len + at + bytes.len()]);
                    }
                });
                fail.note(r);
            } else {
                // this rank holds parity row t - k of the stripe passing through
                let j = t - k;
                out.write(fail, j as u64 * chunk + off, &acc[j * len..(j + 1) * len]);
            }
            // what the next step reads, while this one's sums travel: a new piece's first data
            let (nt, noff, nlen) = match (t + 2 < n, all.get(p + 1)) {
                (true, _) => (t + 1, off, len),
                (false, Some(&(o, l))) => (0, o, l),
                (false, None) => (k, 0, 0),
            };
            comm.overlap(&[(&acc[..m * len], right)], &mut [(&mut inc[..m * len], left)], waiting, || {
                // the first contribution of a piece fills the sums; the later ones are added
                // from the stream when their step comes
                if nt == 0 && nlen > 0 {
                    read_stream(stream, fail, nt as u64 * chunk + noff, &mut next[..nlen]);
                }
            });
            std::mem::swap(&mut acc, &mut inc);
        }
        let j = m - 1;
        out.write(fail, j as u64 * chunk + off, &acc[j * len..(j + 1) * len]);
    }
}

/// What a set member brings to a rebuild.
pub enum Member<'a> {
    /// An intact member: its record (with `red`).
    Survivor(&'a DatasetRecord),
    /// A lost member: the record it is rebuilding (files as the survivors' headers list them,
    /// `red` filled in); its files and redundancy file are (re)created.
    Lost(&'a DatasetRecord),
}

/// Rebuild the `lost` members (set indices) of a set. Collective over `comm`, whose ranks are
/// the set members in set order. `all[x]` is member x's file list (from the survivors'
/// headers). A lost member ends with its files (each checked against its recorded CRC32 as
/// it is written) and a complete redundancy file. Returns whether every file of this rank
/// went through the rebuild whole and matched its recorded CRC32 (a survivor that read all
/// of its data checked it on the way; a mismatch there is an error, the rebuild used it).
/// In a debug build, `SCRRS_TEST_CRASH=rebuilding` ends a lost member once it has written the
/// first piece of its data (tests of a run killed mid-rebuild).
pub fn rebuild(
    comm: &Comm,
    me: Member<'_>,
    red: &RedInfo,
    lost: &[usize],
    all: &[Vec<FileEntry>],
    piece: usize,
) -> Result<bool> {
    let totals: Vec<u64> = all.iter().map(|f| f.iter().map(|e| e.size).sum()).collect();
    let mut fail = Failure::default();
    let (rec, is_lost) = match me {
        Member::Survivor(r) => (r, false),
        Member::Lost(r) => (r, true),
    };
    let mut stream = if is_lost { Stream::writer(parts(rec)) } else { Stream::reader(parts(rec)) };
    let file: Option<File> = if is_lost {
        fail.note(stream.create_all());
        fail.note(redfile::create(&red.file))
    } else {
        fail.note(File::open(&red.file).map_err(|e| Error::io("open", &red.file, e)))
    };
    let io = Payload { file: file.as_ref(), path: &red.file };
    if red.scheme == Scheme::Partner {
        rebuild_partner(comm, red.index, lost, &totals, &mut stream, &io, piece, &mut fail);
    } else {
        let code = Code::new(red.ranks.len(), red.failures)?;
        rebuild_code(comm, red, code, lost, &mut stream, &io, is_lost, piece, &mut fail)?;
    }
    if is_lost {
        fail.note(stream.sync());
    }
    let mut verified = true;
    for (f, got) in rec.files.iter().zip(stream.crcs()) {
        let why = match (f.crc, got) {
            (Some(want), Some(got)) if want == got => continue,
            (Some(want), Some(got)) if is_lost => {
                format!("rebuilt data has CRC32 {got:#010x}, {want:#010x} was recorded")
            }
            (Some(want), Some(got)) => format!("CRC32 is {got:#010x}, {want:#010x} was recorded"),
            (Some(_), None) if is_lost => "not every byte of it was rebuilt".into(),
            _ => {
                verified = false;
                continue;
            }
        };
        fail.note::<()>(Err(Error::Integrity { path: f.path.clone(), why }));
    }
    if is_lost {
        if let Some(f) = &file {
            fail.note(redfile::finish(f, &red.file, red.payload(), &Header::new(rec, red, all)));
        }
    }
    fail.into_result().map(|_| verified)
}

/// One stream of a PARTNER rebuild, seen from this rank: a lost member's own files coming back
/// from its right neighbour's copy, or its partner copy (the left neighbour's files) again.
struct Flow {
    peer: i32,
    size: u64,
    /// Whether this rank sends (else it receives).
    send: bool,
    /// Whether this rank's end is the redundancy file (the partner copy), else its own files.
    copy: bool,
}

/// The flows of rank `i` when the members `lost` are rebuilt. Between two ranks they are
/// listed in the same order on both sides (a lost member's own files first), so the messages
/// of one step match even when both flows join the same pair of ranks (a set of two).
fn partner_flows(i: usize, lost: &[usize], totals: &[u64]) -> Vec<Flow> {
    let n = totals.len();
    let mut flows = Vec::new();
    for &l in lost {
        let (left, right) = ((l + n - 1) % n, (l + 1) % n);
        if i == right {
            flows.push(Flow { peer: l as i32, size: totals[l], send: true, copy: true });
        }
        if i == left {
            flows.push(Flow { peer: l as i32, size: totals[left], send: true, copy: false });
        }
        if i == l {
            flows.push(Flow { peer: right as i32, size: totals[l], send: false, copy: false });
            flows.push(Flow { peer: left as i32, size: totals[left], send: false, copy: true });
        }
    }
    flows
}

/// PARTNER: each lost member gets its files back from its right neighbour's copy and, at the
/// same time, its partner copy again from its left neighbour. Piece by piece: a sender reads
/// piece `p + 1` while `p` travels, a receiver writes piece `p - 1` meanwhile.
#[allow(clippy::too_many_arguments)] // one schedule's state, passed down once
fn rebuild_partner(
    comm: &Comm,
    i: usize,
    lost: &[usize],
    totals: &[u64],
    stream: &mut Stream,
    io: &Payload<'_>,
    piece: usize,
    fail: &mut Failure,
) {
    let flows = partner_flows(i, lost, totals);
    let steps = flows.iter().map(|f| f.size.div_ceil(piece as u64)).max().unwrap_or(0);
    // the length of a flow's piece `step` (0 past its end)
    let len = |f: &Flow, step: u64| (f.size.saturating_sub(step * piece as u64) as usize).min(piece);
    let mut cur: Vec<Vec<u8>> = flows.iter().map(|_| vec![0u8; piece]).collect();
    let mut other: Vec<Vec<u8>> = flows.iter().map(|_| vec![0u8; piece]).collect();
    // what a flow's end does with piece `step` held in `buf`
    let mut move_piece = |f: &Flow, step: u64, buf: &mut [u8]| {
        let (off, buf) = (step * piece as u64, &mut buf[..len(f, step)]);
        match (f.send, f.copy) {
            _ if buf.is_empty() => {}
            (true, true) => io.read(fail, off, buf),
            (true, false) => read_stream(stream, fail, off, buf),
            (false, true) => io.write(fail, off, buf),
            (false, false) => {
                fail.note(stream.write_at(off, buf));
            }
        }
    };
    for (f, buf) in flows.iter().zip(cur.iter_mut()).filter(|(f, _)| f.send) {
        move_piece(f, 0, buf);
    }
    for step in 0..steps {
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for (f, buf) in flows.iter().zip(cur.iter_mut()).filter(|(f, _)| len(f, step) > 0) {
            if f.send {
                sends.push((freeze(&mut buf[..len(f, step)]), f.peer));
            } else {
                recvs.push((&mut buf[..len(f, step)], f.peer));
            }
        }
        comm.overlap(&sends, &mut recvs, Waiting::Block, || {
            for (f, buf) in flows.iter().zip(other.iter_mut()) {
                // the next piece to send, or the last one received
                let at = if f.send { Some(step + 1) } else { step.checked_sub(1) };
                if let Some(at) = at {
                    move_piece(f, at, buf);
                }
            }
        });
        if step == 1 && flows.iter().any(|f| !f.send) {
            crate::log::crash_point("rebuilding");
        }
        std::mem::swap(&mut cur, &mut other);
    }
    for (f, buf) in flows.iter().zip(other.iter_mut()).filter(|(f, _)| !f.send) {
        if let Some(last) = steps.checked_sub(1) {
            move_piece(f, last, buf);
        }
    }
}

/// A shared view of a buffer lent out for the whole lifetime of its exclusive borrow.
fn freeze<T: ?Sized>(x: &mut T) -> &T {
    x
}

/// XOR/RS: the chain through the survivors (see the module doc).
#[allow(clippy::too_many_arguments)] // one schedule's state, passed down once
fn rebuild_code(
    comm: &Comm,
    red: &RedInfo,
    code: Code,
    lost: &[usize],
    stream: &mut Stream,
    io: &Payload<'_>,
    is_lost: bool,
    piece: usize,
    fail: &mut Failure,
) -> Result<()> {
    let (n, i, chunk) = (code.n, red.index, red.chunk);
    let recovery = code.recovery(lost)?;
    let survivors: Vec<usize> = (0..n).filter(|x| !recovery.lost.contains(x)).collect();
    let d = recovery.lost.len();
    // the sums of one piece cover n stripes for each lost member: smaller pieces for big sets
    let piece = (piece * 4 / n).max(piece.min(64 << 10)).min(piece).min(chunk.max(1) as usize);
    let all = pieces(chunk, piece);
    let shard = |s: usize, off: u64| match code.shard_of(i, s) {
        Shard::Data(p) => (true, p as u64 * chunk + off),
        Shard::Parity(j) => (false, j as u64 * chunk + off),
    };
    if is_lost {
        let from = *survivors.last().expect("a code tolerates fewer losses than members") as i32;
        let (mut cur, mut prev) = (vec![0u8; n * piece], vec![0u8; n * piece]);
        let mut write = |off: u64, len: usize, buf: &[u8]| {
            for s in 0..n {
                let part = &buf[s * len..(s + 1) * len];
                match shard(s, off) {
                    (true, at) => {
                        fail.note(stream.write_at(at, part));
                    }
                    (false, at) => io.write(fail, at, part),
                }
            }
        };
        for (p, &(_, len)) in all.iter().enumerate() {
            comm.overlap(&[], &mut [(&mut cur[..n * len], from)], Waiting::Block, || {
                if let Some(&(poff, plen)) = p.checked_sub(1).map(|q| &all[q]) {
                    write(poff, plen, &prev[..n * plen]);
                }
            });
            if p == 1 {
                crate::log::crash_point("rebuilding");
            }
            std::mem::swap(&mut cur, &mut prev);
        }
        if let Some(&(off, len)) = all.last() {
            write(off, len, &prev[..n * len]);
        }
        return Ok(());
    }
    let pos = survivors.iter().position(|&x| x == i).expect("a member is lost or survives");
    let pred = pos.checked_sub(1).map(|q| survivors[q] as i32);
    // a stripe this rank adds nothing to (all its coefficients are zero) is not read
    let used: Vec<bool> = (0..n).map(|s| (0..d).any(|l| recovery.coef(s, l, i) != 0)).collect();
    // the chain's first link of an XOR-like recovery (one lost member, every coefficient 1)
    // sends its shards as read: the buffers have the same layout, so they trade places
    let sends_as_read = pred.is_none() && d == 1 && (0..n).all(|s| recovery.coef(s, 0, i) == 1);
    let (mut cur, mut prev) = (vec![0u8; d * n * piece], vec![0u8; d * n * piece]);
    let mut shards = vec![0u8; n * piece];
    let mut prev_len = 0;
    for (p, &(off, len)) in all.iter().enumerate() {
        let sends = targets(&survivors, pos, &recovery.lost, n, &prev[..d * n * prev_len], p > 0);
        let mut recvs: Vec<(&mut [u8], i32)> = pred.map(|r| (&mut cur[..d * n * len], r)).into_iter().collect();
        comm.overlap(&sends, &mut recvs, Waiting::Block, || {
            for s in (0..n).filter(|&s| used[s]) {
                let buf = &mut shards[s * len..(s + 1) * len];
                match shard(s, off) {
                    (true, at) => read_stream(stream, fail, at, buf),
                    (false, at) => io.read(fail, at, buf),
                }
            }
        });
        if sends_as_read {
            std::mem::swap(&mut cur, &mut shards);
        }
        for s in (0..n).filter(|_| !sends_as_read) {
            let input = &shards[s * len..(s + 1) * len];
            for l in 0..d {
                let (c, at) = (recovery.coef(s, l, i), (l * n + s) * len);
                if pred.is_none() {
                    gf::mul_into(c, input, &mut cur[at..at + len]);
                } else {
                    gf::mul_xor(c, input, &mut cur[at..at + len]);
                }
            }
        }
        std::mem::swap(&mut cur, &mut prev);
        prev_len = len;
    }
    let sends = targets(&survivors, pos, &recovery.lost, n, &prev[..d * n * prev_len], !all.is_empty());
    comm.overlap(&sends, &mut [], Waiting::Block, || ());
    Ok(())
}

/// Where survivor `pos` of the chain sends the sums of one piece: to the next survivor, or
/// (the last one) each lost member its share.
fn targets<'b>(
    survivors: &[usize],
    pos: usize,
    lost: &[usize],
    n: usize,
    sums: &'b [u8],
    any: bool,
) -> Vec<(&'b [u8], i32)> {
    if !any {
        return Vec::new();
    }
    match survivors.get(pos + 1) {
        Some(&next) => vec![(sums, next as i32)],
        None => {
            let share = sums.len() / lost.len().max(1);
            debug_assert_eq!(share % n, 0);
            lost.iter().enumerate().map(|(l, &r)| (&sums[l * share..(l + 1) * share], r as i32)).collect()
        }
    }
}
