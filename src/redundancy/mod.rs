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

use crate::checksum::files_crc;
use crate::state::filemap::DatasetRecord;
pub use crate::state::redinfo::RedInfo;

/// Check that this rank holds its part of `rec` intact: every file with its recorded size,
/// and, with `verify` set to a number of threads, the CRC32 of every file that has one (read
/// by that many threads); and the redundancy file with a sound header of the right size.
/// `Err` lists what is wrong.
pub fn check_local(rec: &DatasetRecord, verify: Option<usize>, buf_size: usize) -> Result<(), String> {
    if !rec.complete {
        return Err("the dataset was never completed (the run stopped during the output phase)".into());
    }
    let mut problems = Vec::new();
    let mut to_verify = Vec::new();
    for f in &rec.files {
        match std::fs::metadata(&f.path) {
            Err(e) => problems.push(format!("{}: {e}", f.path.display())),
            Ok(md) if md.len() != f.size => {
                problems.push(format!("{}: size is {} bytes, {} were written", f.path.display(), md.len(), f.size))
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
                    problems.push(format!("{}: CRC32 is {:#010x}, {crc:#010x} was recorded", path.display(), c.crc))
                }
                Ok(_) => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    if let Some(red) = &rec.red {
        match redfile::read_header(&red.file) {
            Err(e) => problems.push(format!("redundancy file: {e}")),
            Ok((h, payload)) if payload != red.payload() || h.red.index != red.index || h.desc.id != rec.desc.id => {
                problems.push(format!("{}: does not match the dataset record", red.file.display()))
            }
            Ok(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
