//! The serial rebuild: one process with every surviving member's files and redundancy file
//! at hand (the scavenged copy of a dataset in the prefix) recreates the lost members' files
//! and redundancy files, with the same codec as the parallel rebuild.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use super::codec::{Code, Shard};
use super::redfile::{self, FileEntry, Header};
use super::stream::{Part, Stream};
use super::{gf, RedInfo};
use crate::desc::Scheme;
use crate::error::{Error, Result};

/// One member of a set, as files.
pub struct Member {
    /// The member's files (for a lost member, where to recreate them, with their sizes).
    pub parts: Vec<Part>,
    pub red_file: PathBuf,
    pub lost: bool,
}

/// Rebuild the lost members of a set in place. `red` is any member's record of the set (the
/// scheme, failures and chunk are the same for all).
pub fn rebuild(red: &RedInfo, members: &[Member], piece: usize) -> Result<()> {
    let n = members.len();
    let lost: Vec<usize> = (0..n).filter(|&x| members[x].lost).collect();
    if !red.tolerates(&lost) {
        return Err(Error::Other(format!(
            "{} of the {n} members of set {} are lost ({lost:?}); {} cannot rebuild them",
            lost.len(),
            red.set_id,
            red.scheme.name()
        )));
    }
    let totals: Vec<u64> = members.iter().map(|m| m.parts.iter().map(|p| p.size).sum()).collect();
    let mut streams: Vec<Stream> = members
        .iter()
        .map(|m| if m.lost { Stream::writer(m.parts.clone()) } else { Stream::reader(m.parts.clone()) })
        .collect();
    let mut files: Vec<File> = Vec::with_capacity(n);
    for (x, m) in members.iter().enumerate() {
        if m.lost {
            streams[x].create_all()?;
            files.push(redfile::create(&m.red_file)?);
        } else {
            files.push(File::open(&m.red_file).map_err(|e| Error::io("open", &m.red_file, e))?);
        }
    }
    let mut buf = vec![0u8; piece];
    if red.scheme == Scheme::Partner {
        for &l in &lost {
            let (r, left) = ((l + 1) % n, (l + n - 1) % n);
            copy(totals[l], piece, &mut buf, |off, b| redfile::read_payload(&files[r], &members[r].red_file, off, b), |off, b| {
                streams[l].write_at(off, b)
            })?;
            copy(totals[left], piece, &mut buf, |off, b| streams[left].read_at(off, b), |off, b| {
                redfile::write_payload(&files[l], &members[l].red_file, off, b)
            })?;
        }
    } else {
        let code = Code::new(n, red.failures).map_err(Error::Other)?;
        let recovery = code.recovery(&lost).map_err(Error::Other)?;
        let chunk = red.chunk;
        let mut acc = vec![0u8; piece];
        let mut off = 0u64;
        while off < chunk {
            let len = piece.min((chunk - off) as usize);
            for s in 0..n {
                for (l, &lr) in recovery.lost.iter().enumerate() {
                    acc[..len].fill(0);
                    for &(r, c) in &recovery.terms[s][l] {
                        match code.shard_of(r, s) {
                            Shard::Data(p) => streams[r].read_at(p as u64 * chunk + off, &mut buf[..len])?,
                            Shard::Parity(j) => redfile::read_payload(
                                &files[r],
                                &members[r].red_file,
                                j as u64 * chunk + off,
                                &mut buf[..len],
                            )?,
                        }
                        gf::mul_xor(c, &buf[..len], &mut acc[..len]);
                    }
                    match code.shard_of(lr, s) {
                        Shard::Data(p) => streams[lr].write_at(p as u64 * chunk + off, &acc[..len])?,
                        Shard::Parity(j) => {
                            redfile::write_payload(&files[lr], &members[lr].red_file, j as u64 * chunk + off, &acc[..len])?
                        }
                    }
                }
            }
            off += len as u64;
        }
    }
    for &l in &lost {
        streams[l].sync()?;
    }
    Ok(())
}

fn copy(
    size: u64,
    piece: usize,
    buf: &mut [u8],
    mut read: impl FnMut(u64, &mut [u8]) -> Result<()>,
    mut write: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut off = 0u64;
    while off < size {
        let len = piece.min((size - off) as usize);
        read(off, &mut buf[..len])?;
        write(off, &buf[..len])?;
        off += len as u64;
    }
    Ok(())
}

/// The header a member's redundancy file carries: its own files and those of the members to
/// its left whose data its payload protects. `all[x]` is member x's file list.
pub fn header_for(template: &Header, red: &RedInfo, all: &[Vec<FileEntry>]) -> Header {
    let n = red.ranks.len();
    Header {
        desc: template.desc.clone(),
        reddesc: template.reddesc.clone(),
        red: red.clone(),
        files: (0..=red.failures).map(|d| ((red.index + n - d) % n, all[(red.index + n - d) % n].clone())).collect(),
    }
}

/// Append `header` to a rebuilt redundancy file.
pub fn finish(red: &RedInfo, header: &Header) -> Result<()> {
    let f = OpenOptions::new().write(true).open(&red.file).map_err(|e| Error::io("open", &red.file, e))?;
    redfile::finish(&f, &red.file, red.payload(), header)
}
