//! Files over MPI, from the rank that holds one to a rank that needs it on another node: the
//! distribution of cached data at `SCR_Init` (a rank moved to another node) and the files of
//! other ranks a restart asks for (`SCR_Complete_restart`).
//!
//! Protocol on the communicator, between one sender and one receiver: the file's length as 8
//! bytes (`u64::MAX` when the sender cannot open it), then its bytes in pieces of at most the
//! buffer size. The receiver writes them under the temporary name of [`super::copy::part_name`]
//! beside the destination, computes size and CRC32 on the way, checks them when the caller
//! expects values, fsyncs, and only then renames the file into place: a reader never sees a
//! partial or corrupt file under the real name. Every piece is received even when writing fails,
//! so both sides stay in step for the next file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::checksum::Copied;
use crate::comm::Comm;
use crate::error::{Error, IoContext, Result};

/// The length a sender announces for a file it cannot open.
const MISSING: u64 = u64::MAX;

/// Send the file at `path` to rank `dest` (blocking until `dest` took it). Returns whether the
/// whole file was read; a file that cannot be opened is announced as missing, a read error
/// half-way sends zeros for the rest of that piece (the receiver's size or CRC32 check, or the
/// one at restart, rejects it).
pub(crate) fn send_file(comm: &Comm, dest: i32, path: &Path, buf_size: usize) -> bool {
    let file = File::open(path).and_then(|f| f.metadata().map(|m| (f, m.len())));
    let Ok((file, len)) = file else {
        comm.send(dest, &MISSING.to_le_bytes());
        return false;
    };
    comm.send(dest, &len.to_le_bytes());
    let mut buf = vec![0u8; buf_size.max(1)];
    let mut whole = true;
    let mut off = 0u64;
    while off < len {
        let n = buf.len().min((len - off) as usize);
        if file.read_exact_at(&mut buf[..n], off).is_err() {
            buf[..n].fill(0);
            whole = false;
        }
        comm.send(dest, &buf[..n]);
        off += n as u64;
    }
    whole
}

/// Receive a file [`send_file`] sends from rank `src` into `dst` (`None`: take the bytes and
/// drop them). `expect`: the size and CRC32 it must have. `private`: missing parent directories
/// are created with mode 0700 (cache) rather than by the umask. `Ok(None)`: the sender had no
/// such file (nothing is written).
pub(crate) fn recv_file(
    comm: &Comm,
    src: i32,
    dst: Option<&Path>,
    expect: Option<(u64, Option<u32>)>,
    buf_size: usize,
    private: bool,
) -> Result<Option<Copied>> {
    let mut len = [0u8; 8];
    comm.recv_into(src, &mut len);
    let len = u64::from_le_bytes(len);
    if len == MISSING {
        return Ok(None);
    }
    let tmp = dst.map(super::copy::part_name);
    let mut out: Result<Option<File>> = match (dst, &tmp) {
        (Some(dst), Some(tmp)) => create(dst, tmp, private).map(Some),
        _ => Ok(None),
    };
    let mut buf = vec![0u8; buf_size.max(1)];
    let mut hasher = crc32fast::Hasher::new();
    let mut off = 0u64;
    while off < len {
        let n = buf.len().min((len - off) as usize);
        comm.recv_into(src, &mut buf[..n]);
        hasher.update(&buf[..n]);
        if let (Ok(Some(f)), Some(tmp)) = (&out, &tmp) {
            if let Err(e) = f.write_all_at(&buf[..n], off) {
                out = Err(Error::io("write", tmp.as_path(), e));
            }
        }
        off += n as u64;
    }
    let got = Copied { size: len, crc: hasher.finalize() };
    let file = match out {
        Ok(f) => f,
        Err(e) => {
            if let Some(tmp) = &tmp {
                let _ = std::fs::remove_file(tmp);
            }
            return Err(e);
        }
    };
    let (Some(file), Some(dst), Some(tmp)) = (file, dst, tmp) else { return Ok(Some(got)) };
    let finished = (|| {
        if let Some((size, crc)) = expect {
            let wrong = if got.size != size {
                Some(format!("{} bytes arrived from rank {src}, {size} were recorded", got.size))
            } else {
                crc.filter(|c| *c != got.crc)
                    .map(|c| format!("the bytes from rank {src} have CRC32 {:#010x}, {c:#010x} was recorded", got.crc))
            };
            if let Some(why) = wrong {
                return Err(Error::Integrity { path: dst.to_path_buf(), why });
            }
        }
        file.sync_all().ctx("fsync", tmp.as_path())?;
        std::fs::rename(&tmp, dst).ctx("rename into place", dst)
    })();
    if finished.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    finished.map(|_| Some(got))
}

fn create(dst: &Path, tmp: &Path, private: bool) -> Result<File> {
    if let Some(parent) = dst.parent() {
        if private {
            crate::paths::create_dirs(parent)?;
        } else {
            std::fs::create_dir_all(parent).ctx("create directory", parent)?;
        }
    }
    crate::paths::create_temp(tmp, 0o666).ctx("create", tmp)
}
