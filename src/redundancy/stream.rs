//! A rank's files seen as one logical byte stream (their concatenation in filemap order,
//! zero padded at the end), as the XOR, RS and PARTNER schemes encode it. Reads and writes
//! record a CRC32 per contiguous segment, so that the encoder (which reads each byte exactly
//! once, but not in order) and a rebuild (which writes each byte once) yield every file's
//! CRC32 without another pass over the data.
//!
//! A stream holds at most [`MAX_OPEN`] files open at a time, whatever the number of files: a
//! file is opened when an access reaches it and closed as soon as an access reaches its last
//! byte (the schedules move through each region of the stream in order), and the least
//! recently used one is closed when a new one needs the room (several regions are read at
//! once by XOR/RS). A written file is flushed to stable storage when it is closed, and is
//! created and sized only the first time it is opened.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{IoContext, Result};

/// Files a stream keeps open at most (room for the regions an XOR/RS schedule of a usual set
/// size reads at once; a larger set reopens files, which costs little per piece).
pub const MAX_OPEN: usize = 16;

/// One file of the stream.
#[derive(Debug, Clone)]
pub struct Part {
    pub path: PathBuf,
    pub size: u64,
}

pub struct Stream {
    parts: Vec<Part>,
    /// Start offset of each part.
    starts: Vec<u64>,
    total: u64,
    /// The open files (part, file), least recently used first; at most [`MAX_OPEN`].
    open: Vec<(usize, File)>,
    /// Per part of a writer: created (truncated and sized) already, reopened as it is.
    created: Vec<bool>,
    writable: bool,
    /// Per part: segment start -> (hasher, length) of what was read.
    crcs: Vec<BTreeMap<u64, (crc32fast::Hasher, u64)>>,
}

impl Stream {
    /// A stream to read.
    pub fn reader(parts: Vec<Part>) -> Stream {
        Stream::new(parts, false)
    }

    /// A stream to (re)create: files are created and truncated to their sizes on first use.
    pub fn writer(parts: Vec<Part>) -> Stream {
        Stream::new(parts, true)
    }

    fn new(parts: Vec<Part>, writable: bool) -> Stream {
        let mut starts = Vec::with_capacity(parts.len());
        let mut total = 0;
        for p in &parts {
            starts.push(total);
            total += p.size;
        }
        let n = parts.len();
        Stream {
            parts,
            starts,
            total,
            open: Vec::with_capacity(MAX_OPEN),
            created: vec![false; n],
            writable,
            crcs: vec![BTreeMap::new(); n],
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Open part `i` (a writer's is created and sized the first time).
    fn open_part(&mut self, i: usize) -> Result<File> {
        let (path, size) = (&self.parts[i].path, self.parts[i].size);
        if !self.writable {
            return File::open(path).ctx("open", path);
        }
        if self.created[i] {
            return OpenOptions::new().write(true).open(path).ctx("open", path);
        }
        if let Some(parent) = path.parent() {
            crate::paths::create_dirs(parent)?;
        }
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(path).ctx("create", path)?;
        f.set_len(size).ctx("size", path)?;
        self.created[i] = true;
        Ok(f)
    }

    /// Close a file of part `i` (a writer's is flushed to stable storage first).
    fn close_part(&self, i: usize, f: File) -> Result<()> {
        if self.writable {
            f.sync_all().ctx("fsync", &self.parts[i].path)?;
        }
        Ok(())
    }

    /// Part `i`'s file, opened if needed (closing the least recently used one if
    /// [`MAX_OPEN`] are open).
    fn file(&mut self, i: usize) -> Result<&File> {
        if let Some(pos) = self.open.iter().position(|(p, _)| *p == i) {
            let entry = self.open.remove(pos);
            self.open.push(entry);
        } else {
            if self.open.len() >= MAX_OPEN {
                let (p, f) = self.open.remove(0);
                self.close_part(p, f)?;
            }
            let f = self.open_part(i)?;
            self.open.push((i, f));
        }
        Ok(&self.open.last().expect("just opened").1)
    }

    /// Done with part `i` for now (an access reached its last byte): close it.
    fn release(&mut self, i: usize) -> Result<()> {
        match self.open.iter().position(|(p, _)| *p == i) {
            Some(pos) => {
                let (p, f) = self.open.remove(pos);
                self.close_part(p, f)
            }
            None => Ok(()),
        }
    }

    /// Create every file of a writer now (so empty files exist even if no byte is written);
    /// none stays open. An empty file is flushed now, the others when their bytes are written.
    pub fn create_all(&mut self) -> Result<()> {
        for i in 0..self.parts.len() {
            if self.created[i] || self.open.iter().any(|(p, _)| *p == i) {
                continue;
            }
            let f = self.open_part(i)?;
            if self.parts[i].size == 0 {
                self.close_part(i, f)?;
            }
        }
        Ok(())
    }

    /// The parts overlapping `[off, off + len)`: (part, offset in part, offset in buf, length).
    fn spans(&self, off: u64, len: usize) -> Vec<(usize, u64, usize, usize)> {
        let end = (off + len as u64).min(self.total);
        let mut out = Vec::new();
        if off >= end {
            return out;
        }
        let first = self.starts.partition_point(|&s| s <= off).saturating_sub(1);
        for i in first..self.parts.len() {
            let (s, size) = (self.starts[i], self.parts[i].size);
            if s >= end {
                break;
            }
            let a = off.max(s);
            let b = end.min(s + size);
            if a < b {
                out.push((i, a - s, (a - off) as usize, (b - a) as usize));
            }
        }
        out
    }

    /// Read `buf.len()` bytes at logical offset `off` (zeros past the end; the buffer is
    /// written once, never cleared first).
    pub fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let data = (self.total.saturating_sub(off) as usize).min(buf.len());
        buf[data..].fill(0);
        for (i, at, b, n) in self.spans(off, buf.len()) {
            let file = self.file(i)?;
            file.read_exact_at(&mut buf[b..b + n], at).ctx("read", &self.parts[i].path)?;
            self.record(i, at, &buf[b..b + n]);
            if at + n as u64 == self.parts[i].size {
                self.release(i)?;
            }
        }
        Ok(())
    }

    /// Write `buf` at logical offset `off` (bytes past the end, the padding, are dropped).
    pub fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        for (i, at, b, n) in self.spans(off, buf.len()) {
            let file = self.file(i)?;
            file.write_all_at(&buf[b..b + n], at).ctx("write", &self.parts[i].path)?;
            self.record(i, at, &buf[b..b + n]);
            if at + n as u64 == self.parts[i].size {
                self.release(i)?;
            }
        }
        Ok(())
    }

    /// Note the CRC32 of the bytes of part `i` at `at` (just read or written).
    fn record(&mut self, i: usize, at: u64, bytes: &[u8]) {
        let mut h = crc32fast::Hasher::new();
        h.update(bytes);
        self.crcs[i].insert(at, (h, bytes.len() as u64));
    }

    /// Close every file still open; a writer's are flushed to stable storage (the files
    /// closed before were flushed as they closed).
    pub fn sync(&mut self) -> Result<()> {
        let mut first = Ok(());
        for (i, f) in std::mem::take(&mut self.open) {
            let r = self.close_part(i, f);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// The CRC32 of each part, if every byte of it was read (or written) exactly once.
    pub fn crcs(&self) -> Vec<Option<u32>> {
        self.parts
            .iter()
            .zip(&self.crcs)
            .map(|(p, segs)| {
                let mut h = crc32fast::Hasher::new();
                let mut next = 0u64;
                for (&at, (seg, len)) in segs {
                    if at != next {
                        return None;
                    }
                    h.combine(seg);
                    next += len;
                }
                (next == p.size).then(|| h.finalize())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenation_padding_and_crcs() {
        let dir = tempfile::tempdir().unwrap();
        let contents: [&[u8]; 3] = [b"hello", b"", b"world!!"];
        let parts: Vec<Part> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let path = dir.path().join(format!("f{i}"));
                std::fs::write(&path, c).unwrap();
                Part { path, size: c.len() as u64 }
            })
            .collect();
        let mut s = Stream::reader(parts.clone());
        assert_eq!(s.total(), 12);
        // Read out of order, across file boundaries, past the end.
        let mut b = vec![0u8; 4];
        s.read_at(4, &mut b).unwrap();
        assert_eq!(&b, b"owor");
        let mut b = vec![0u8; 8];
        s.read_at(8, &mut b).unwrap();
        assert_eq!(&b, b"ld!!\0\0\0\0");
        let mut b = vec![0u8; 4];
        s.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"hell");
        let crcs = s.crcs();
        assert_eq!(crcs[0], Some(crc32fast::hash(b"hello")));
        assert_eq!(crcs[1], Some(crc32fast::hash(b"")));
        assert_eq!(crcs[2], Some(crc32fast::hash(b"world!!")));

        let out: Vec<Part> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| Part { path: dir.path().join(format!("sub/o{i}")), size: p.size })
            .collect();
        let mut w = Stream::writer(out.clone());
        w.create_all().unwrap();
        w.write_at(6, b"orld!!\0\0").unwrap();
        w.write_at(0, b"hellow").unwrap();
        w.sync().unwrap();
        for (o, c) in out.iter().zip(contents) {
            assert_eq!(std::fs::read(&o.path).unwrap(), c);
        }
    }

    #[test]
    fn open_files_stay_bounded() {
        // More files than MAX_OPEN, read and written by several interleaved cursors (as XOR/RS
        // do): never more than MAX_OPEN open, and a writer's file reopened keeps its bytes.
        let dir = tempfile::tempdir().unwrap();
        let n = MAX_OPEN * 4 + 3;
        let data: Vec<Vec<u8>> = (0..n).map(|i| (0..(i % 7) * 5).map(|j| (i * 13 + j) as u8).collect()).collect();
        let parts: Vec<Part> = data
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let path = dir.path().join(format!("f{i}"));
                std::fs::write(&path, d).unwrap();
                Part { path, size: d.len() as u64 }
            })
            .collect();
        let all: Vec<u8> = data.concat();
        let cursors = MAX_OPEN + 3;
        let region = (all.len() as u64).div_ceil(cursors as u64);
        let out: Vec<Part> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| Part { path: dir.path().join(format!("o{i}")), size: p.size })
            .collect();
        let (mut r, mut w) = (Stream::reader(parts), Stream::writer(out.clone()));
        w.create_all().unwrap();
        assert!(w.open.len() <= MAX_OPEN);
        let mut buf = [0u8; 3];
        for step in (0..region).step_by(3) {
            for c in 0..cursors as u64 {
                let off = c * region + step;
                let len = 3.min(region - step) as usize;
                r.read_at(off, &mut buf[..len]).unwrap();
                w.write_at(off, &buf[..len]).unwrap();
                assert!(r.open.len() <= MAX_OPEN && w.open.len() <= MAX_OPEN);
            }
        }
        w.sync().unwrap();
        assert!(w.open.is_empty());
        for (o, d) in out.iter().zip(&data) {
            assert_eq!(&std::fs::read(&o.path).unwrap(), d);
        }
        let want: Vec<Option<u32>> = data.iter().map(|d| Some(crc32fast::hash(d))).collect();
        assert_eq!(r.crcs(), want);
        assert_eq!(w.crcs(), want);
    }
}
