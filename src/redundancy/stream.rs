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
//!
//! A reader takes its bytes out of read-only memory mappings of the files ([`WINDOW`] bytes
//! each, at most [`WINDOWS`] held) where the file can be mapped: no page-cache lookup per
//! page and no system call per piece, and [`Stream::visit`] hands the mapped bytes to the
//! caller with no copy at all (XOR/RS add them straight into their sums; `BENCHMARKS.md`,
//! 2026-11-24, issue 27 item 1). A file that shrinks under a mapping is an error naming it (the SIGBUS guard of [`crate::sys::mapped`]), never a crash
//! and never zeros taken for data. What cannot be mapped is read with `pread` as before.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{Error, IoContext, Result};
use crate::sys::mapped::{self, Window};

/// Files a stream keeps open at most (room for the regions an XOR/RS schedule of a usual set
/// size reads at once; a larger set reopens files, which costs little per piece).
pub const MAX_OPEN: usize = 16;

/// Bytes of a file a reader maps at a time (aligned to multiples of it in the file).
const WINDOW: u64 = 64 << 20;
/// Mapped windows a reader holds at most (least recently used first out): the regions an
/// XOR/RS schedule reads at once, and one more.
const WINDOWS: usize = 4;

/// A mapped window of a reader: part, offset in the part, the mapping.
struct Mapped {
    part: usize,
    start: u64,
    window: Window,
}

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
    /// A reader's mapped windows, least recently used first; at most [`WINDOWS`].
    windows: Vec<Mapped>,
    /// A reader's parts that could not be mapped (read with `pread`).
    unmapped: Vec<bool>,
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
            windows: Vec::new(),
            unmapped: vec![false; n],
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
        self.windows.retain(|m| m.part != i);
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
            let out = &mut buf[b..b + n];
            let done = self.visit_mapped(i, at, n, |o, bytes| out[o..o + bytes.len()].copy_from_slice(bytes))?;
            if done < n {
                let file = self.file(i)?;
                file.read_exact_at(&mut out[done..], at + done as u64).ctx("read", &self.parts[i].path)?;
            }
            self.record(i, at, out);
            if at + n as u64 == self.parts[i].size {
                self.release(i)?;
            }
        }
        Ok(())
    }

    /// Hand the bytes of `[off, off + len)` to `f` in order, as (offset in the range, bytes):
    /// straight out of the mapped windows where the files can be mapped (no copy), through a
    /// buffer otherwise. Bytes past the end of the stream (its zero padding) are not handed
    /// out. Their CRC32s are recorded as [`Stream::read_at`]'s; on an error `f` may have seen
    /// part of the range (and zeros for a page the file lost): the caller gives the range up.
    pub fn visit(&mut self, off: u64, len: usize, mut f: impl FnMut(usize, &[u8])) -> Result<()> {
        for (i, at, b, n) in self.spans(off, len) {
            let mut h = crc32fast::Hasher::new();
            let done = self.visit_mapped(i, at, n, |o, bytes| {
                f(b + o, bytes);
                h.update(bytes);
            })?;
            if done < n {
                let mut buf = vec![0u8; n - done];
                let file = self.file(i)?;
                file.read_exact_at(&mut buf, at + done as u64).ctx("read", &self.parts[i].path)?;
                f(b + done, &buf);
                h.update(&buf);
            }
            self.crcs[i].insert(at, (h, n as u64));
            if at + n as u64 == self.parts[i].size {
                self.release(i)?;
            }
        }
        Ok(())
    }

    /// A reader: hand `n` bytes of part `i` from `at` to `f` (offset in them, bytes) out of its
    /// mapped windows, mapping them as needed; returns how many were handed out, fewer than `n`
    /// when a window cannot be mapped (the caller reads the rest). An error when a page of the
    /// file was past its end (it shrank): `f` then saw zeros for that page.
    fn visit_mapped(&mut self, i: usize, at: u64, n: usize, mut f: impl FnMut(usize, &[u8])) -> Result<usize> {
        if self.writable || self.unmapped[i] {
            return Ok(0);
        }
        let mut done = 0;
        while done < n {
            let pos = at + done as u64;
            let start = pos - pos % WINDOW;
            let k = match self.windows.iter().position(|m| m.part == i && m.start == start) {
                Some(k) => {
                    let m = self.windows.remove(k);
                    self.windows.push(m);
                    self.windows.len() - 1
                }
                None => {
                    let len = WINDOW.min(self.parts[i].size - start);
                    let Some(window) = mapped::window(self.file(i)?, start, len) else {
                        self.unmapped[i] = true;
                        return Ok(done);
                    };
                    if self.windows.len() >= WINDOWS {
                        self.windows.remove(0);
                    }
                    self.windows.push(Mapped { part: i, start, window });
                    self.windows.len() - 1
                }
            };
            let w = &self.windows[k].window;
            let from = (pos - start) as usize;
            let len = (n - done).min(w.bytes().len() - from);
            f(done, &w.bytes()[from..from + len]);
            if w.lost_pages() {
                return Err(Error::Integrity {
                    path: self.parts[i].path.clone(),
                    why: "part of the file vanished while it was read (truncated, or an I/O error)".into(),
                });
            }
            done += len;
        }
        Ok(done)
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
        assert_eq!(crcs, Stream::reader(parts.clone()).visited_crcs(), "visit() sees the same bytes");
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

    impl Stream {
        /// Visit the stream in pieces of 5 (the last past the end) and check what is handed
        /// out: the concatenation, in order, padding left out; then the CRC32s recorded.
        fn visited_crcs(mut self) -> Vec<Option<u32>> {
            let mut all = Vec::new();
            let mut off = 0;
            while off < self.total {
                let mut seen = [0xaau8; 5];
                let mut covered = 0;
                self.visit(off, 5, |at, b| {
                    assert_eq!(at, covered, "in order, no gap");
                    seen[at..at + b.len()].copy_from_slice(b);
                    covered += b.len();
                })
                .unwrap();
                assert_eq!(covered as u64, 5.min(self.total - off), "padding is not handed out");
                all.extend_from_slice(&seen[..covered]);
                off += 5;
            }
            assert_eq!(all, b"helloworld!!");
            self.crcs()
        }
    }

    #[test]
    fn a_part_truncated_while_it_is_read_is_an_error_not_zeros() {
        // Read from a mapping: a file cut short after the first piece was read makes the next
        // read fail with the file's name (the SIGBUS guard), never a crash or zeros as data.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|x| (x * 7 + 1) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mut s = Stream::reader(vec![Part { path: path.clone(), size: data.len() as u64 }]);
        let mut b = vec![0u8; 64 << 10];
        s.read_at(0, &mut b).unwrap();
        assert_eq!(b, data[..64 << 10]);
        assert!(!s.windows.is_empty(), "the file was read from a mapping");
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
        let e = s.read_at(512 << 10, &mut b).unwrap_err();
        assert!(e.to_string().contains("vanished while it was read (truncated"), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert_eq!(s.crcs()[0], None, "no CRC32 for a file not read whole");
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
