//! Size and CRC32 of files: the one chunked reader every verification uses (restart checks,
//! copies, rebuilds, scavenge), so a file's checksum is computed the same way everywhere, and
//! [`files_crc`], which checks many files with several threads (ranges of a file are summed
//! apart and combined), for `SCR_Init` on nodes with more cores than processes. The bytes are
//! summed straight from memory mappings where the file allows it ([`crate::sys::mapped`],
//! guarded against a file truncated under the mapping), read into a buffer otherwise.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, IoContext, Result};
use crate::sys::mapped;

/// Bytes mapped at a time: a pass maps a file window by window.
const WINDOW: u64 = 64 << 20;

/// Files (ranges) smaller than this are read, not mapped: for a few pages, mapping and
/// unmapping (page-table set-up, the TLB shootdown on every core at munmap) cost more than the
/// copy they save.
const MAP_MIN: u64 = 1 << 20;

/// `Err` naming `path` when a page of `w` was past the end of the file when it was read.
fn check(w: &mapped::Window, path: &Path) -> Result<()> {
    if w.lost_pages() {
        return Err(Error::Integrity {
            path: path.to_path_buf(),
            why: "part of the file vanished while it was read (truncated, or an I/O error)".into(),
        });
    }
    Ok(())
}

/// Size and CRC32 of what was copied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Copied {
    pub size: u64,
    pub crc: u32,
}

/// Size and CRC32 of a file.
pub fn file_crc(path: &Path, buf_size: usize) -> Result<Copied> {
    stream(path, buf_size, |_| Ok(()))
}

/// Read `path` in chunks of `buf_size`, computing size and CRC32 and handing each chunk to `f`.
/// The chunks come from memory mappings of the file where it can be mapped (`f` never sees a
/// byte of a page the file lost while it was mapped: that is an error), then from `read`
/// until the end of the file.
pub(crate) fn stream(path: &Path, buf_size: usize, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<Copied> {
    let mut input = File::open(path).ctx("open", path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut size = 0u64;
    let len = input.metadata().ctx("stat", path)?.len();
    while size < len && len >= MAP_MIN {
        let n = WINDOW.min(len - size);
        let Some(w) = mapped::window(&input, size, n) else { break };
        for chunk in w.bytes().chunks(buf_size.max(1)) {
            hasher.update(chunk);
            check(&w, path)?;
            f(chunk)?;
        }
        // `f` read the last chunk again (a copy): a page lost meanwhile must not pass either
        check(&w, path)?;
        size += n;
    }
    if size > 0 {
        input.seek(SeekFrom::Start(size)).ctx("seek", path)?;
    }
    // what the mappings did not cover (usually nothing): a buffer sized for it, not a zeroed
    // SCR_FILE_BUF_SIZE for every small file
    let mut buf = vec![0u8; buf_size.max(1).min((len - size.min(len)) as usize + 4096)];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("read", path, e)),
        };
        hasher.update(&buf[..n]);
        f(&buf[..n])?;
        size += n as u64;
    }
    Ok(Copied { size, crc: hasher.finalize() })
}

/// Bytes one thread sums at a time in [`files_crc`].
const RANGE: u64 = 32 << 20;

/// Size and CRC32 of each of `paths`, computed by up to `threads` threads, each reading
/// ranges of at most 32 MiB with a `buf_size` buffer; the CRC32s of a file's ranges are
/// combined in order, so the result equals [`file_crc`]'s.
pub fn files_crc(paths: &[PathBuf], threads: usize, buf_size: usize) -> Vec<Result<Copied>> {
    // (file, offset, len) of every range; the file's length as stat saw it
    let sizes: Vec<Result<u64>> =
        paths.iter().map(|p| std::fs::metadata(p).map(|m| m.len()).ctx("stat", p.as_path())).collect();
    let mut ranges = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        if let Ok(size) = size {
            let mut off = 0;
            loop {
                let len = RANGE.min(size - off);
                ranges.push((i, off, len));
                off += len;
                if off >= *size {
                    break;
                }
            }
        }
    }
    let next = AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<crc32fast::Hasher>>>> =
        ranges.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let work = || {
        // allocated when a range cannot be mapped (see range_crc)
        let mut buf = Vec::new();
        let mut open: Option<(usize, File)> = None;
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(i, off, len)) = ranges.get(k) else { break };
            if open.as_ref().is_none_or(|(j, _)| *j != i) {
                open = File::open(&paths[i]).ok().map(|f| (i, f));
            }
            let r = match &open {
                Some((_, f)) => range_crc(f, &paths[i], off, len, buf_size, &mut buf),
                None => File::open(&paths[i]).ctx("open", paths[i].as_path()).map(|_| crc32fast::Hasher::new()),
            };
            *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        }
    };
    let threads = threads.clamp(1, ranges.len().max(1));
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let mut out: Vec<Result<Copied>> = sizes.into_iter().map(|s| s.map(|size| Copied { size, crc: 0 })).collect();
    let mut hashers: Vec<Option<crc32fast::Hasher>> = paths.iter().map(|_| Some(crc32fast::Hasher::new())).collect();
    for (k, &(i, _, _)) in ranges.iter().enumerate() {
        let r = results[k].lock().unwrap_or_else(|e| e.into_inner()).take();
        match (r, hashers[i].as_mut()) {
            (Some(Ok(h)), Some(acc)) => acc.combine(&h),
            (Some(Err(e)), Some(_)) => {
                hashers[i] = None;
                out[i] = Err(e);
            }
            _ => {}
        }
    }
    for (o, h) in out.iter_mut().zip(hashers) {
        if let (Ok(c), Some(h)) = (o.as_mut(), h) {
            c.crc = h.finalize();
        }
    }
    out
}

/// CRC32 of `len` bytes of the file at `path` from `off` (a file shorter than that is an
/// error), to be joined with the CRC32s of the other ranges by [`combine`].
pub fn crc_of_range(path: &Path, off: u64, len: u64, buf_size: usize) -> Result<u32> {
    let f = File::open(path).ctx("open", path)?;
    Ok(range_crc(&f, path, off, len, buf_size, &mut Vec::new())?.finalize())
}

/// The CRC32 of consecutive ranges, given each range's CRC32 and length in order.
pub fn combine(parts: &[(u32, u64)]) -> u32 {
    let mut acc = crc32fast::Hasher::new();
    for &(crc, len) in parts {
        acc.combine(&crc32fast::Hasher::new_with_initial_len(crc, len));
    }
    acc.finalize()
}

/// CRC32 of `len` bytes of `f` from `off` (a file shorter than that is an error), summed from
/// memory mappings where the file can be mapped, else read into `buf` (grown on first use to
/// at most `buf_size`).
fn range_crc(
    f: &File,
    path: &Path,
    off: u64,
    len: u64,
    buf_size: usize,
    buf: &mut Vec<u8>,
) -> Result<crc32fast::Hasher> {
    let mut h = crc32fast::Hasher::new();
    let mut done = 0u64;
    let size = f.metadata().ctx("stat", path)?.len();
    if off.saturating_add(len) > size {
        let why = format!("{} bytes from offset {off} were wanted, the file has {size}", len);
        return Err(Error::io("read", path, std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why)));
    }
    while done < len && len >= MAP_MIN {
        let n = WINDOW.min(len - done);
        let Some(w) = mapped::window(f, off + done, n) else { break };
        h.update(w.bytes());
        check(&w, path)?;
        done += n;
    }
    if done < len && buf.is_empty() {
        buf.resize(buf_size.max(4096).min((len - done) as usize), 0);
    }
    while done < len {
        let n = buf.len().min((len - done) as usize);
        f.read_exact_at(&mut buf[..n], off + done).ctx("read", path)?;
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_combine_to_the_plain_crc() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let data: Vec<u8> = (0..100_003u32).map(|x| (x * 7) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let cuts = [(0u64, 1u64), (1, 50_000), (50_001, 50_002)];
        let parts: Vec<(u32, u64)> = cuts.iter().map(|&(o, l)| (crc_of_range(&p, o, l, 4096).unwrap(), l)).collect();
        assert_eq!(combine(&parts), crc32fast::hash(&data));
        assert_eq!(combine(&[]), crc32fast::hash(b""));
        assert!(crc_of_range(&p, 100_000, 10, 4096).is_err(), "past the end");
    }

    #[test]
    fn a_file_truncated_under_the_mapping_is_an_error_not_a_crash() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|x| (x * 13) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        // untouched: the mapped pass gives the plain CRC32 and hands out every byte
        let mut seen = Vec::new();
        let c = stream(&p, 4096, |b| {
            seen.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!((c.size, c.crc), (data.len() as u64, crc32fast::hash(&data)));
        assert_eq!(seen, data);
        // cut to one page after the first chunk: the next page is past the end of the file
        let mut chunks = 0;
        let err = stream(&p, 4096, |b| {
            assert!(b.iter().any(|&x| x != 0) || chunks == 0, "a zero page was handed out");
            chunks += 1;
            if chunks == 1 {
                std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4096).unwrap();
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(chunks, 1);
        assert!(err.to_string().contains("vanished while it was read (truncated"), "{err}");
        // a range past the end is an error before anything is mapped
        let e = crc_of_range(&p, 0, 8192, 4096).unwrap_err();
        assert!(e.to_string().contains("8192 bytes from offset 0 were wanted, the file has 4096"), "{e}");
    }

    #[test]
    fn threads_and_ranges_give_the_plain_crc() {
        let d = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for (i, len) in [0usize, 1, 4095, (RANGE as usize) * 2 + 12345].into_iter().enumerate() {
            let p = d.path().join(format!("f{i}"));
            let data: Vec<u8> = (0..len).map(|x| (x * 31 + i) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            paths.push(p);
        }
        paths.push(d.path().join("missing"));
        for threads in [1, 3] {
            let got = files_crc(&paths, threads, 64 << 10);
            for (p, g) in paths.iter().zip(&got) {
                match (file_crc(p, 1 << 20), g) {
                    (Ok(want), Ok(got)) => assert_eq!(*got, want, "{}", p.display()),
                    (Err(_), Err(e)) => assert!(e.to_string().contains("missing"), "{e}"),
                    (w, g) => panic!("{}: {w:?} vs {g:?}", p.display()),
                }
            }
        }
    }
}
