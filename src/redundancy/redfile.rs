//! The redundancy file each rank of a set keeps beside its cached files, in
//! `<dataset dir>/.scr/`: `<index+1>_of_<size>_in_<set>.xor` (or `.rs`, `.partner`).
//!
//! Layout: the payload (XOR/RS: `failures` parity rows of `chunk` bytes; PARTNER: the left
//! neighbour's files concatenated), then a self-checking header record (see [`crate::persist`])
//! naming the dataset, the set, and the file lists (names, sizes, CRC32) of this rank and of the
//! neighbours whose data the payload protects (the `failures` ranks to its left), then the
//! header's length as 8 little-endian bytes. The header goes last because the CRC32s it holds
//! are computed while the payload is produced. A file cut short or damaged fails the header
//! check and counts as lost, like a missing one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RedInfo;
use crate::desc::RedDesc;
use crate::error::{Error, IoContext, Result};
use crate::state::dataset::DatasetDesc;
use crate::state::filemap::{DatasetRecord, FileMeta};

const KIND: &str = "redundancy";

/// A file as the redundancy header records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    #[serde(with = "crate::paths::rel_field")]
    pub rel: PathBuf,
    pub size: u64,
    pub crc: Option<u32>,
}

impl FileEntry {
    pub fn of(f: &FileMeta) -> FileEntry {
        FileEntry { rel: f.rel.clone(), size: f.size, crc: f.crc }
    }
}

/// The header of a redundancy file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub desc: DatasetDesc,
    pub reddesc: RedDesc,
    pub red: RedInfo,
    /// (set index, files) of this rank and the neighbours the payload protects.
    pub files: Vec<(usize, Vec<FileEntry>)>,
}

impl Header {
    /// The header of set member `red.index` of `rec`'s dataset: its own files and those of
    /// the `red.failures` members to its left. `all[x]` is member x's file list.
    pub fn new(rec: &DatasetRecord, red: &RedInfo, all: &[Vec<FileEntry>]) -> Header {
        let n = red.ranks.len();
        let members = (0..=red.failures).map(|d| (red.index + n - d) % n);
        Header {
            desc: rec.desc.clone(),
            reddesc: rec.reddesc.clone(),
            red: red.clone(),
            files: members.map(|x| (x, all[x].clone())).collect(),
        }
    }
}

/// Every member's files (`n` members) from the survivors' headers, each of which lists its own
/// and its neighbours' ([`Header::files`]; a header of another set shape may list members this
/// set does not have: ignored). `Err(x)`: no header lists member `x`.
pub fn members_files<'a>(
    headers: impl IntoIterator<Item = &'a Header>,
    n: usize,
) -> Result<Vec<Vec<FileEntry>>, usize> {
    let mut all: Vec<Option<Vec<FileEntry>>> = vec![None; n];
    for h in headers {
        for (x, f) in &h.files {
            if let Some(slot) = all.get_mut(*x) {
                slot.get_or_insert_with(|| f.clone());
            }
        }
    }
    all.into_iter().enumerate().map(|(x, f)| f.ok_or(x)).collect()
}

/// The redundancy information of lost member `index`, shaped by a survivor's (`template`):
/// its index, and for PARTNER the size of the copy it holds (its left neighbour's files,
/// `all[x]` = member x's). The caller names its file.
pub fn lost_member(template: &RedInfo, index: usize, all: &[Vec<FileEntry>]) -> RedInfo {
    let n = all.len();
    let mut red = RedInfo { index, ..template.clone() };
    if red.scheme == crate::desc::Scheme::Partner {
        red.chunk = all[(index + n - 1) % n].iter().map(|e| e.size).sum();
    }
    red
}

/// The file name of set member `index` of `set` (of `size` members).
pub fn file_name(red: &RedInfo) -> String {
    let ext = match red.scheme {
        crate::desc::Scheme::Partner => "partner",
        crate::desc::Scheme::Rs => "rs",
        _ => "xor",
    };
    format!("{}_of_{}_in_{}.{ext}", red.index + 1, red.ranks.len(), red.set_id)
}

/// Append the header to a file whose payload is written, and make it durable.
pub fn finish(file: &File, path: &Path, payload: u64, header: &Header) -> Result<()> {
    let bytes = crate::persist::encode(KIND, header);
    let mut tail = bytes;
    tail.extend_from_slice(&(tail.len() as u64).to_le_bytes());
    file.set_len(payload).ctx("size", path)?;
    file.write_all_at(&tail, payload).ctx("write", path)?;
    file.sync_all().ctx("fsync", path)
}

/// Create (truncate) a redundancy file for writing its payload.
pub fn create(path: &Path) -> Result<File> {
    if let Some(parent) = path.parent() {
        crate::paths::create_dirs(parent)?;
    }
    let f = File::create(path).ctx("create", path)?;
    Ok(f)
}

/// Read and check the header; returns it with the payload length.
pub fn read_header(path: &Path) -> Result<(Header, u64)> {
    let f = File::open(path).ctx("open", path)?;
    let size = f.metadata().ctx("stat", path)?.len();
    let damaged = |why: &str| Error::Integrity { path: path.to_path_buf(), why: why.to_string() };
    if size < 8 {
        return Err(damaged("too short to be a redundancy file"));
    }
    let mut len = [0u8; 8];
    f.read_exact_at(&mut len, size - 8).ctx("read", path)?;
    let len = u64::from_le_bytes(len);
    if len > size - 8 || len > 64 << 20 {
        return Err(damaged("the header length is out of range (the file is cut short or damaged)"));
    }
    let mut bytes = vec![0u8; len as usize];
    f.read_exact_at(&mut bytes, size - 8 - len).ctx("read", path)?;
    let header: Header = crate::persist::decode(KIND, &bytes, path).map_err(|e| damaged(&e.to_string()))?;
    Ok((header, size - 8 - len))
}

/// Write `bytes` of payload at `off` (used by the schedules, which fill it piece by piece).
pub fn write_payload(file: &File, path: &Path, off: u64, bytes: &[u8]) -> Result<()> {
    file.write_all_at(bytes, off).ctx("write", path)
}

/// Read payload bytes at `off`.
pub fn read_payload(file: &File, path: &Path, off: u64, buf: &mut [u8]) -> Result<()> {
    file.read_exact_at(buf, off).ctx("read", path)
}
