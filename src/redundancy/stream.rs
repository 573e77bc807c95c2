//! A rank's files seen as one logical byte stream (their concatenation in filemap order,
//! zero padded at the end), as the XOR, RS and PARTNER schemes encode it. Reads and writes
//! record a CRC32 per contiguous segment, so that the encoder (which reads each byte exactly
//! once, but not in order) and a rebuild (which writes each byte once) yield every file's
//! CRC32 without another pass over the data.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{IoContext, Result};

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
    files: Vec<Option<File>>,
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
        Stream { parts, starts, total, files: (0..n).map(|_| None).collect(), writable, crcs: vec![BTreeMap::new(); n] }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    fn file(&mut self, i: usize) -> Result<&File> {
        if self.files[i].is_none() {
            let path = &self.parts[i].path;
            let f = if self.writable {
                if let Some(parent) = path.parent() {
                    crate::paths::create_dirs(parent)?;
                }
                let f = OpenOptions::new().write(true).create(true).truncate(true).open(path).ctx("create", path)?;
                f.set_len(self.parts[i].size).ctx("size", path)?;
                f
            } else {
                File::open(path).ctx("open", path)?
            };
            self.files[i] = Some(f);
        }
        Ok(self.files[i].as_ref().expect("just opened"))
    }

    /// Create every file of a writer now (so empty files exist even if no byte is written).
    pub fn create_all(&mut self) -> Result<()> {
        for i in 0..self.parts.len() {
            self.file(i)?;
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
            self.file(i)?;
            let (file, path) = (self.files[i].as_ref().expect("opened"), &self.parts[i].path);
            file.read_exact_at(&mut buf[b..b + n], at).ctx("read", path)?;
            self.record(i, at, &buf[b..b + n]);
        }
        Ok(())
    }

    /// Write `buf` at logical offset `off` (bytes past the end, the padding, are dropped).
    pub fn write_at(&mut self, off: u64, buf: &[u8]) -> Result<()> {
        for (i, at, b, n) in self.spans(off, buf.len()) {
            self.file(i)?;
            let (file, path) = (self.files[i].as_ref().expect("opened"), &self.parts[i].path);
            file.write_all_at(&buf[b..b + n], at).ctx("write", path)?;
            self.record(i, at, &buf[b..b + n]);
        }
        Ok(())
    }

    /// Note the CRC32 of the bytes of part `i` at `at` (just read or written).
    fn record(&mut self, i: usize, at: u64, bytes: &[u8]) {
        let mut h = crc32fast::Hasher::new();
        h.update(bytes);
        self.crcs[i].insert(at, (h, bytes.len() as u64));
    }

    /// Flush written files to stable storage.
    pub fn sync(&mut self) -> Result<()> {
        for (i, f) in self.files.iter().enumerate() {
            if let Some(f) = f {
                f.sync_all().ctx("fsync", &self.parts[i].path)?;
            }
        }
        Ok(())
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
}
