//! The serial rebuild: one process with every surviving member's files and redundancy file
//! at hand (the scavenged copy of a dataset in the prefix) recreates the lost members' files
//! and redundancy payloads, with the same codec as the parallel rebuild. The caller appends
//! each rebuilt member's header ([`redfile::Header::new`], [`redfile::finish`]).

use std::fs::File;
use std::path::PathBuf;

use super::codec::{Code, Shard};
use super::redfile;
use super::stream::{Part, Stream};
use super::{gf, RedError, RedInfo};
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
/// scheme, failures and chunk are the same for all). Returns, for each member, the CRC32 of
/// each of its files as rebuilt (taken as the bytes were written; `None` for a survivor's).
pub fn rebuild(red: &RedInfo, members: &[Member], piece: usize) -> Result<Vec<Vec<Option<u32>>>> {
    let n = members.len();
    let lost: Vec<usize> = (0..n).filter(|&x| members[x].lost).collect();
    if !red.tolerates(&lost) {
        return Err(RedError::Unrebuildable { n, set: red.set_id, lost, scheme: red.scheme.name() }.into());
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
            copy(
                totals[l],
                piece,
                &mut buf,
                |off, b| redfile::read_payload(&files[r], &members[r].red_file, off, b),
                |off, b| streams[l].write_at(off, b),
            )?;
            copy(
                totals[left],
                piece,
                &mut buf,
                |off, b| streams[left].read_at(off, b),
                |off, b| redfile::write_payload(&files[l], &members[l].red_file, off, b),
            )?;
        }
    } else {
        let code = Code::new(n, red.failures)?;
        let recovery = code.recovery(&lost)?;
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
                        Shard::Parity(j) => redfile::write_payload(
                            &files[lr],
                            &members[lr].red_file,
                            j as u64 * chunk + off,
                            &acc[..len],
                        )?,
                    }
                }
            }
            off += len as u64;
        }
    }
    for &l in &lost {
        streams[l].sync()?;
    }
    Ok(streams.iter().zip(members).map(|(s, m)| if m.lost { s.crcs() } else { vec![None; m.parts.len()] }).collect())
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

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // matrix-style indexing reads best in these tests
mod tests {
    use super::*;
    use crate::redundancy::codec::Code;

    fn bytes(seed: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed * 101 + (i >> 9)) % 251) as u8).collect()
    }

    /// Members with uneven files (one has none, one has an empty file), redundancy files
    /// produced by the in-memory codec, then every tolerated loss rebuilt from files.
    fn run(scheme: Scheme, n: usize, m: usize) {
        let dir = tempfile::tempdir().unwrap();
        let sizes: Vec<Vec<u64>> = (0..n)
            .map(|r| match r % 3 {
                0 => vec![],
                1 => vec![1000 + r as u64 * 7],
                _ => vec![0, 777],
            })
            .collect();
        let members = |lost: &[usize]| -> Vec<Member> {
            (0..n)
                .map(|r| Member {
                    parts: sizes[r]
                        .iter()
                        .enumerate()
                        .map(|(k, &s)| Part { path: dir.path().join(format!("r{r}/f{k}")), size: s })
                        .collect(),
                    red_file: dir.path().join(format!("r{r}/red")),
                    lost: lost.contains(&r),
                })
                .collect()
        };
        let streams: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut all = Vec::new();
                std::fs::create_dir_all(dir.path().join(format!("r{r}"))).unwrap();
                for (k, &s) in sizes[r].iter().enumerate() {
                    let b = bytes(r * 10 + k, s as usize);
                    std::fs::write(dir.path().join(format!("r{r}/f{k}")), &b).unwrap();
                    all.extend(b);
                }
                all
            })
            .collect();
        let max = streams.iter().map(Vec::len).max().unwrap() as u64;
        let (payloads, chunk): (Vec<Vec<u8>>, u64) = if scheme == Scheme::Partner {
            ((0..n).map(|r| streams[(r + n - 1) % n].clone()).collect(), 0)
        } else {
            let code = Code::new(n, m).unwrap();
            let chunk = code.chunk_size(max);
            let padded: Vec<Vec<u8>> = streams
                .iter()
                .map(|s| {
                    let mut p = s.clone();
                    p.resize(chunk as usize * code.k(), 0);
                    p
                })
                .collect();
            (code.encode(&padded, chunk as usize), chunk)
        };
        for r in 0..n {
            std::fs::write(dir.path().join(format!("r{r}/red")), &payloads[r]).unwrap();
        }
        let red = RedInfo {
            scheme,
            set_id: 0,
            ranks: (0..n as i32).collect(),
            index: 0,
            failures: m,
            chunk,
            file: PathBuf::new(),
        };
        let patterns: Vec<Vec<usize>> = match scheme {
            Scheme::Partner => (0..n).map(|l| vec![l]).chain([vec![0, 2]]).collect(),
            _ => (1u32..(1 << n))
                .map(|b| (0..n).filter(|i| b & (1 << i) != 0).collect::<Vec<_>>())
                .filter(|v| v.len() <= m)
                .collect(),
        };
        for lost in patterns {
            for &l in &lost {
                std::fs::remove_dir_all(dir.path().join(format!("r{l}"))).unwrap();
            }
            let crcs = rebuild(&red, &members(&lost), 100).unwrap_or_else(|e| panic!("{scheme:?} lost {lost:?}: {e}"));
            for r in 0..n {
                for (k, &s) in sizes[r].iter().enumerate() {
                    let got = std::fs::read(dir.path().join(format!("r{r}/f{k}"))).unwrap();
                    assert_eq!(got, bytes(r * 10 + k, s as usize), "{scheme:?} lost {lost:?}: r{r}/f{k}");
                    // a rebuilt file's CRC32 comes back with it, taken as it was written
                    let want = lost.contains(&r).then(|| crc32fast::hash(&got));
                    assert_eq!(crcs[r][k], want, "{scheme:?} lost {lost:?}: CRC32 of r{r}/f{k}");
                }
                let red = std::fs::read(dir.path().join(format!("r{r}/red"))).unwrap();
                assert_eq!(red, payloads[r], "{scheme:?} lost {lost:?}: redundancy of r{r}");
            }
        }
        // One loss too many is refused before anything is written.
        let too_many: Vec<usize> = if scheme == Scheme::Partner { vec![0, 1] } else { (0..=m).collect() };
        assert!(rebuild(&red, &members(&too_many), 100).is_err());
    }

    #[test]
    fn serial_rebuild_restores_every_byte() {
        run(Scheme::Xor, 4, 1);
        run(Scheme::Rs, 5, 2);
        run(Scheme::Partner, 4, 1);
    }
}
