//! The parallel schedules over a set's communicator: encoding after `SCR_Complete_output` and
//! rebuilding lost members in `SCR_Init`. Every rank of the set runs the same sequence of
//! messages whatever fails locally (a failed read sends zeros and is reported afterwards), so an
//! I/O error never leaves a partner waiting; the caller agrees on the outcome.
//!
//! * XOR/RS encode is SCR's pipelined reduce-scatter: for each piece of the chunk, `n - 1`
//!   steps of receive-from-left, add own contribution, send-right; each file byte is read once
//!   and each parity byte written once, and only a few pieces are in memory.
//! * XOR/RS rebuild is a chain through the survivors in set order: each adds its shards times
//!   the recovery coefficients into the running sums and passes them on; the last survivor
//!   sends each lost rank its shards.
//! * PARTNER sends each rank's files to its right-hand neighbour; a rebuild gets the files back
//!   from the right neighbour and the partner copy again from the left one.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::codec::{Code, Shard};
use super::redfile::{self, FileEntry, Header};
use super::stream::{Part, Stream};
use super::{gf, RedInfo};
use crate::comm::Comm;
use crate::desc::Scheme;
use crate::error::{Error, Result};
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

fn parts(rec: &DatasetRecord) -> Vec<Part> {
    rec.files.iter().map(|f| Part { path: f.path.clone(), size: f.size }).collect()
}

/// Where a dataset's redundancy file goes.
pub fn red_path(dir: &Path, red: &RedInfo) -> PathBuf {
    dir.join(".scr").join(redfile::file_name(red))
}

/// Encode `rec` (complete, sizes known) over the set; records the CRC32 of every file and
/// `rec.red`. Collective over `plan.comm`.
pub fn encode(plan: &SetPlan, rec: &mut DatasetRecord, piece: usize) -> Result<()> {
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
    let mut fail = Failure::default();
    let file = fail.note(redfile::create(&red.file));
    let (i, left, right) = (plan.index, (plan.index + n - 1) % n, (plan.index + 1) % n);
    let (lrank, rrank) = (left as i32, right as i32);
    let payload = if plan.scheme == Scheme::Partner {
        red.chunk = totals[left];
        let steps = totals.iter().map(|t| t.div_ceil(piece as u64)).max().unwrap_or(0);
        let mut send = vec![0u8; piece];
        let mut recv = vec![0u8; piece];
        for step in 0..steps {
            let off = step * piece as u64;
            let ls = (totals[i].saturating_sub(off) as usize).min(piece);
            let lr = (totals[left].saturating_sub(off) as usize).min(piece);
            if fail.note(stream.read_at(off, &mut send[..ls])).is_none() {
                send[..ls].fill(0);
            }
            comm.sendrecv(&send[..ls], rrank, &mut recv[..lr], lrank);
            if let Some(f) = &file {
                fail.note(redfile::write_payload(f, &red.file, off, &recv[..lr]));
            }
        }
        totals[left]
    } else {
        let code = Code::new(n, plan.failures).map_err(Error::Other)?;
        let (m, k) = (code.m, code.k());
        let chunk = code.chunk_size(totals.iter().copied().max().unwrap_or(0));
        red.chunk = chunk;
        let piece = piece.min(chunk.max(1) as usize);
        let mut acc = vec![0u8; m * piece];
        let mut inc = vec![0u8; m * piece];
        let mut data = vec![0u8; piece];
        let mut off = 0u64;
        while off < chunk {
            let len = piece.min((chunk - off) as usize);
            acc[..m * len].fill(0);
            for t in 0..n - 1 {
                if t < k {
                    if fail.note(stream.read_at(t as u64 * chunk + off, &mut data[..len])).is_none() {
                        data[..len].fill(0);
                    }
                    for j in 0..m {
                        gf::mul_xor(code.coef(j, t), &data[..len], &mut acc[j * len..(j + 1) * len]);
                    }
                } else if let Some(f) = &file {
                    let j = t - k;
                    fail.note(redfile::write_payload(
                        f,
                        &red.file,
                        j as u64 * chunk + off,
                        &acc[j * len..(j + 1) * len],
                    ));
                }
                comm.sendrecv(&acc[..m * len], rrank, &mut inc[..m * len], lrank);
                std::mem::swap(&mut acc, &mut inc);
            }
            if let Some(f) = &file {
                let j = m - 1;
                fail.note(redfile::write_payload(f, &red.file, j as u64 * chunk + off, &acc[j * len..(j + 1) * len]));
            }
            off += len as u64;
        }
        m as u64 * chunk
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
        fail.note(redfile::finish(f, &red.file, payload, &Header::new(rec, &red, &all)));
    }
    rec.red = Some(red);
    fail.into_result()
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
/// headers). A lost member ends with its files and a complete redundancy file.
pub fn rebuild(
    comm: &Comm,
    me: Member<'_>,
    red: &RedInfo,
    lost: &[usize],
    all: &[Vec<FileEntry>],
    piece: usize,
) -> Result<()> {
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
    let n = red.ranks.len();
    let i = red.index;
    if red.scheme == Scheme::Partner {
        let mut buf = vec![0u8; piece];
        // Phase 1: each lost member's files come back from its right neighbour's copy.
        // Phase 2: its partner copy comes again from its left neighbour.
        for phase in 0..2 {
            for &l in lost {
                let src = if phase == 0 { (l + 1) % n } else { (l + n - 1) % n };
                let size = if phase == 0 { totals[l] } else { totals[(l + n - 1) % n] };
                let mut off = 0u64;
                while off < size {
                    let len = piece.min((size - off) as usize);
                    if i == src {
                        let r = if phase == 0 {
                            file.as_ref().map_or(Ok(()), |f| redfile::read_payload(f, &red.file, off, &mut buf[..len]))
                        } else {
                            stream.read_at(off, &mut buf[..len])
                        };
                        fail.note(r);
                        comm.send(l as i32, &buf[..len]);
                    } else if i == l {
                        comm.recv_into(src as i32, &mut buf[..len]);
                        let r = if phase == 0 {
                            stream.write_at(off, &buf[..len])
                        } else {
                            file.as_ref().map_or(Ok(()), |f| redfile::write_payload(f, &red.file, off, &buf[..len]))
                        };
                        fail.note(r);
                    }
                    off += len as u64;
                }
            }
        }
    } else {
        let code = Code::new(n, red.failures).map_err(Error::Other)?;
        let recovery = code.recovery(lost).map_err(Error::Other)?;
        let survivors: Vec<usize> = (0..n).filter(|x| !recovery.lost.contains(x)).collect();
        let d = recovery.lost.len();
        let chunk = red.chunk;
        let piece = piece.min(chunk.max(1) as usize);
        let mut acc = vec![0u8; d * n * piece];
        let mut shard = vec![0u8; piece];
        let mut off = 0u64;
        while off < chunk {
            let len = piece.min((chunk - off) as usize);
            let acc = &mut acc[..d * n * len];
            if let Some(pos) = survivors.iter().position(|&x| x == i) {
                if pos > 0 {
                    comm.recv_into(survivors[pos - 1] as i32, acc);
                } else {
                    acc.fill(0);
                }
                for s in 0..n {
                    if (0..d).all(|l| recovery.coef(s, l, i) == 0) {
                        continue;
                    }
                    let r = match code.shard_of(i, s) {
                        Shard::Data(p) => stream.read_at(p as u64 * chunk + off, &mut shard[..len]),
                        Shard::Parity(j) => file.as_ref().map_or(Ok(()), |f| {
                            redfile::read_payload(f, &red.file, j as u64 * chunk + off, &mut shard[..len])
                        }),
                    };
                    if fail.note(r).is_none() {
                        shard[..len].fill(0);
                    }
                    for l in 0..d {
                        let at = (l * n + s) * len;
                        gf::mul_xor(recovery.coef(s, l, i), &shard[..len], &mut acc[at..at + len]);
                    }
                }
                if pos + 1 < survivors.len() {
                    comm.send(survivors[pos + 1] as i32, acc);
                } else {
                    for (l, &lr) in recovery.lost.iter().enumerate() {
                        comm.send(lr as i32, &acc[l * n * len..(l + 1) * n * len]);
                    }
                }
            } else {
                let l = recovery.lost.iter().position(|&x| x == i).expect("a lost member");
                let mine = &mut acc[l * n * len..(l + 1) * n * len];
                comm.recv_into(*survivors.last().expect("a survivor") as i32, mine);
                for s in 0..n {
                    let part = &mine[s * len..(s + 1) * len];
                    let r = match code.shard_of(i, s) {
                        Shard::Data(p) => stream.write_at(p as u64 * chunk + off, part),
                        Shard::Parity(j) => file
                            .as_ref()
                            .map_or(Ok(()), |f| redfile::write_payload(f, &red.file, j as u64 * chunk + off, part)),
                    };
                    fail.note(r);
                }
            }
            off += len as u64;
        }
    }
    if is_lost {
        fail.note(stream.sync());
        if let Some(f) = &file {
            fail.note(redfile::finish(f, &red.file, red.payload(), &Header::new(rec, red, all)));
        }
    }
    fail.into_result()
}
