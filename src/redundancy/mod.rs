//! Redundancy schemes applied to a cached dataset (SINGLE, PARTNER, XOR, RS), and the checks
//! a restart runs to decide whether a rank's part of a cached dataset is usable.
//!
//! Each scheme is a pure codec ([`codec`], over [`gf`]), a parallel schedule over the set's
//! communicator ([`parallel`]) and a serial rebuild from files ([`serial`], for the commands),
//! all sharing the layout of [`stream`] (a rank's files as one byte stream) and [`redfile`]
//! (the per-rank redundancy file). [`sets`] decides which processes protect each other.
//!
//! SINGLE keeps each file only in its writer's cache: the dataset survives the failure of a
//! process, not the loss of its node. PARTNER keeps a full copy of each rank's files on its
//! right-hand neighbour in the set. XOR (RS with `m = 1`) and RS keep `m / (n - m)` of each
//! rank's data as parity and survive the loss of any `m` members of a set of `n`.

pub mod codec;
pub mod gf;
pub mod parallel;
pub mod redfile;
pub mod serial;
pub mod sets;
pub mod stream;

use std::path::PathBuf;

use crate::checksum::files_crc;
use crate::error::Error;
use crate::state::filemap::DatasetRecord;
pub(crate) use crate::state::redinfo::RedInfo;

/// Why redundancy data cannot be made or used: the shape of the code (set size and
/// failures tolerated), the losses of a set, a member of the set that failed.
#[derive(Debug, thiserror::Error)]
pub enum RedError {
    /// `m` failures cannot be tolerated by a set of `n` ranks.
    #[error("a set of {n} ranks cannot tolerate {m} losses (need 1 <= failures < set size)")]
    Shape { n: usize, m: usize },
    /// A set larger than the Reed-Solomon code's field allows.
    #[error("sets of {n} ranks exceed the 255 the GF(2^8) code supports")]
    TooLarge { n: usize },
    /// More members of a set are lost than the code tolerates.
    #[error("{lost} ranks of the set are lost; the code tolerates {m}")]
    TooManyLost { lost: usize, m: usize },
    /// A lost rank that is not a member of the set.
    #[error("rank {rank} is not in a set of {n}")]
    NotInSet { rank: usize, n: usize },
    /// Set `set` of `n` members lost the members `lost`, more than `scheme` can rebuild.
    #[error("{} of the {n} members of set {set} are lost ({lost:?}); {scheme} cannot rebuild them", lost.len())]
    Unrebuildable { n: usize, set: usize, lost: Vec<usize>, scheme: &'static str },
    /// The decoding matrix of a set of losses is singular (a bug in the code construction).
    #[error("singular decoding matrix (a bug in the code construction)")]
    Singular,
    /// Another member of the set could not encode its part (it reported its own error).
    #[error("another member of the set could not encode its part")]
    PeerFailed,
}

impl From<RedError> for Error {
    fn from(e: RedError) -> Error {
        Error::Layer { layer: "redundancy", source: Box::new(e) }
    }
}

/// What is wrong with this rank's part of a dataset in cache ([`check_local`]): every problem
/// found, each naming its file.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Damage {
    pub problems: Vec<Problem>,
}

/// One problem [`check_local`] found.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("the dataset was never completed (the run stopped during the output phase)")]
    NeverCompleted,
    /// A file of the dataset cannot be inspected.
    #[error("{}: {source}", path.display())]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("{}: size is {size} bytes, {written} were written", path.display())]
    Size { path: PathBuf, size: u64, written: u64 },
    #[error("{}: CRC32 is {crc:#010x}, {recorded:#010x} was recorded", path.display())]
    Crc { path: PathBuf, crc: u32, recorded: u32 },
    /// A file's CRC32 could not be computed.
    #[error(transparent)]
    Verify(Error),
    /// The redundancy file's header cannot be read.
    #[error("redundancy file: {0}")]
    RedFile(Error),
    #[error("{}: does not match the dataset record", path.display())]
    RedMismatch { path: PathBuf },
}

/// Check that this rank holds its part of `rec` intact: every file with its recorded size,
/// and, with `verify` set to a number of threads, the CRC32 of every file that has one (read
/// by that many threads); and the redundancy file with a sound header of the right size.
/// `Err` lists what is wrong.
pub fn check_local(rec: &DatasetRecord, verify: Option<usize>, buf_size: usize) -> Result<(), Damage> {
    if !rec.complete {
        return Err(Damage { problems: vec![Problem::NeverCompleted] });
    }
    let mut problems = Vec::new();
    let mut to_verify = Vec::new();
    for f in &rec.files {
        match std::fs::metadata(&f.path) {
            Err(source) => problems.push(Problem::Unreadable { path: f.path.clone(), source }),
            Ok(md) if md.len() != f.size => {
                problems.push(Problem::Size { path: f.path.clone(), size: md.len(), written: f.size })
            }
            Ok(_) => {
                if let (Some(crc), Some(_)) = (f.crc, verify) {
                    to_verify.push((f.path.clone(), crc));
                }
            }
        }
    }
    if let Some(threads) = verify.filter(|_| !to_verify.is_empty()) {
        let paths: Vec<std::path::PathBuf> = to_verify.iter().map(|(p, _)| p.clone()).collect();
        for ((path, crc), got) in to_verify.iter().zip(files_crc(&paths, threads, buf_size)) {
            match got {
                Ok(c) if c.crc != *crc => {
                    problems.push(Problem::Crc { path: path.clone(), crc: c.crc, recorded: *crc })
                }
                Ok(_) => {}
                Err(e) => problems.push(Problem::Verify(e)),
            }
        }
    }
    if let Some(red) = &rec.red {
        match redfile::read_header(&red.file) {
            Err(e) => problems.push(Problem::RedFile(e)),
            Ok((h, payload)) if payload != red.payload() || h.red.index != red.index || h.desc.id != rec.desc.id => {
                problems.push(Problem::RedMismatch { path: red.file.clone() })
            }
            Ok(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Damage { problems })
    }
}
