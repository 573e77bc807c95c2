//! Size and CRC32 of files: the one chunked reader every verification uses (restart checks,
//! copies, rebuilds, scavenge), so a file's checksum is computed the same way everywhere.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, IoContext, Result};

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
pub(crate) fn stream(path: &Path, buf_size: usize, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<Copied> {
    let mut input = File::open(path).ctx("open", path)?;
    let mut buf = vec![0u8; buf_size];
    let mut hasher = crc32fast::Hasher::new();
    let mut size = 0u64;
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
