//! Shared files in transparent mode: one checkpoint file that several ranks write (N-to-1),
//! which per-rank caching cannot hold (each node would keep a part). Such a file is written
//! once, in the prefix, under its staging name `.<name>.scrshared` beside its place
//! ([`crate::state::layout::shared_staging_name`]), and becomes part of its checkpoint at the
//! sync point that completes it, as `SCR_Route_shared_file` has it in the API.
//!
//! * `MPI_File_open` on a communicator of several processes, of a path a checkpoint pattern
//!   routes ([`mpi_open`]): the front end gives the real `PMPI_File_open` the staging name
//!   (any ROMIO prefix such as `ufs:` kept), on every rank of the communicator, and each rank
//!   records the name as shared in this phase. The MPI library's own `open` calls then see the
//!   staging name, which is never routed ([`super::prefix::reserved`]); the descriptors it
//!   opens for writing are tracked like pending files', so no dataset completes while one is
//!   open. A communicator of one process keeps per-rank routing. A file one rank wrote alone
//!   before such an open for writing (a header) is agreed on by the communicator's processes
//!   and moved to the staging name first ([`adopt_private`]). Every process of the
//!   communicator takes part in that agreement whatever it knows alone (a name already shared
//!   on one rank, routed on one rank), so all branch the same way. A new staging name is
//!   prepared by one rank before any opens it: whatever is there removed (a planted link is
//!   never followed), the file created `O_CREAT|O_EXCL|O_NOFOLLOW`, the header written into it.
//! * `SCR_PRELOAD_SHARED` declares files that ranks write with plain `open`/`pwrite`: an
//!   open for writing of such a routed path goes to the staging name too ([`open_staging`]); a
//!   symbolic link found at the staging name then is removed first, never written through.
//! * While a name is shared in this phase, opening or stat-ing it reaches the staging name; a
//!   shared file of a completed checkpoint is in the prefix under its real name, which is not
//!   SCR's to route: reads (`MPI_File_open` read-only included) find it there.
//! * At the sync point that completes the dataset ([`super::sync`]), each rank declares the
//!   shared files it opened; the runtime checks them with every rank's names, records each
//!   once (writers, size, CRC32), renames it into place and makes the dataset complete only
//!   if every writer succeeded: a failed write on a tracked descriptor makes the dataset
//!   invalid on every rank. A name several ranks write without declaring it makes the
//!   dataset invalid with a message that names the file and `SCR_PRELOAD_SHARED`.
//!
//! * Each staging name a rank declares is appended to a journal in its pending area
//!   ([`staged_journal`]). A run killed before the sync point leaves the journal, and the next
//!   start removes the staging files it lists that still exist ([`remove_staged`]): a shared
//!   file is renamed into place before its dataset completes, so a staging name that still
//!   exists never held a complete checkpoint. (The journal is node-local: a node lost with it
//!   leaves its staging files behind.)

use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::plain::{c_path, Opening};
use super::session::Session;
use super::state::{routing, table, table_now};
use super::table::Table;
use crate::reentry::Inside;
use crate::state::layout::{shared_of_staging, shared_staging_name};

/// An open of shared file `rel` at its staging name, as [`super::rules::open`] decided: `id` is the
/// shared file (`None`: declare it now, an open for writing of a path `SCR_PRELOAD_SHARED`
/// declares). An open for writing removes a link planted at the staging name first and tracks
/// the descriptor.
pub(super) fn open_staging(s: &Session, t: &mut Table, rel: &Path, id: Option<u32>, writing: bool) -> Opening {
    let (id, created) = match id {
        Some(id) => (id, false),
        None => (declare(s, t, rel).0, true),
    };
    let staging = t.shared.get(id).map(|e| e.staging.clone()).unwrap_or_default();
    if writing {
        unlink_planted(&staging);
        Opening { call: c_path(&staging), track: id, created }
    } else {
        Opening { call: c_path(&staging), track: 0, created: false }
    }
}

/// Record `rel` as shared in the table (its id, and whether it was already): a new one is
/// written at its staging name, which the journal records first.
fn declare(s: &Session, t: &mut Table, rel: &Path) -> (u32, bool) {
    if let Some((id, _)) = t.shared.find(rel) {
        return (id, true);
    }
    let staging = shared_staging_name(&s.prefix.join(rel));
    journal_staging(s, &staging);
    let epoch = t.epoch;
    (t.shared.add(rel, staging, epoch), false)
}

/// Remove a symbolic link (or anything but a regular file) at staging name `staging` before
/// a rank writes there: nothing SCR or the application makes there is one, so someone planted
/// it, and writing through it would reach a file outside the prefix. Regular files stay
/// (other ranks may be writing them); a name the ranks open together is prepared by one rank
/// ([`prepare_staging`]).
fn unlink_planted(staging: &Path) {
    let planted = std::fs::symlink_metadata(staging).is_ok_and(|m| !m.file_type().is_file());
    if planted {
        crate::scr_warn!(
            "{} is not a regular file (a link someone planted?): removed before writing there",
            staging.display()
        );
        if let Err(e) = std::fs::remove_file(staging) {
            crate::scr_warn!("removing {}: {e}", staging.display());
        }
    }
}

/// The journal of the staging names this rank declared: NUL-terminated paths in its
/// pending area, below [`crate::paths::SCR_DIR`] (never adopted as a checkpoint file).
fn staged_journal(pending: &Path) -> PathBuf {
    pending.join(crate::paths::SCR_DIR).join("staged")
}

/// Record `staging` in the journal (a child process, which has no pending area, declares
/// nothing). A failure costs only the clean-up after a crash: it is reported and ignored.
fn journal_staging(s: &Session, staging: &Path) {
    if s.pending.as_os_str().is_empty() {
        return;
    }
    let _inside = Inside::enter();
    let journal = staged_journal(&s.pending);
    let append = || -> std::io::Result<()> {
        let mut line = staging.as_os_str().as_bytes().to_vec();
        line.push(0);
        super::plain::open_journal(&journal)?.write_all(&line)
    };
    if let Err(e) = append() {
        crate::scr_warn!(
            "{}: {e}; if this run is killed before its next sync point, {} stays in the prefix",
            journal.display(),
            staging.display()
        );
    }
}

/// At start, before any rank may open a staging name again: remove the staging files a killed
/// run of this rank declared (see the module doc). Only staging names below the prefix are
/// removed, whatever the journal holds.
pub(super) fn remove_staged(s: &Session) {
    let Ok(bytes) = std::fs::read(staged_journal(&s.pending)) else { return };
    for raw in bytes.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let path = Path::new(std::ffi::OsStr::from_bytes(raw));
        let staging = shared_of_staging(path).is_some() && s.prefix.relative(raw, None).is_some();
        if !staging || !path.exists() {
            continue;
        }
        match std::fs::remove_file(path) {
            Ok(()) => {
                crate::log::emit(
                    "INFO",
                    format_args!(
                        "rank {}: removed {}, a shared file a killed run began and never completed",
                        s.rank,
                        path.display()
                    ),
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => crate::scr_warn!("removing {}, a shared file a killed run began: {e}", path.display()),
        }
    }
}

/// What [`mpi_open`] decided.
#[derive(Debug)]
pub enum MpiCall {
    /// The real `PMPI_File_open` with the application's name.
    Pass,
    /// The real `PMPI_File_open` with this name (a shared file's staging name).
    Open(MpiOpen),
    /// Fail the open on every rank of the communicator (they agreed; the reason is printed).
    Fail,
}

/// The file name to give the real `PMPI_File_open`.
#[derive(Debug)]
pub struct MpiOpen {
    /// The name (a ROMIO file system prefix such as `ufs:` kept).
    pub name: CString,
    /// The shared file this open declared (0: none), forgotten if the open fails.
    id: u32,
}

/// The element-wise maximum of the values over the processes of the communicator of an
/// `MPI_File_open` (collective; `None`: the reduction failed).
pub type Agree<'a> = &'a mut dyn FnMut(&[i64]) -> Option<Vec<i64>>;

/// The access mode of an `MPI_File_open`, as far as shared files care.
#[derive(Debug, Clone, Copy, Default)]
pub struct Amode {
    /// `MPI_MODE_RDONLY`.
    pub read_only: bool,
    /// `MPI_MODE_CREATE`.
    pub create: bool,
    /// `MPI_MODE_EXCL`.
    pub excl: bool,
}

/// `MPI_File_open(comm, name, amode)` on a communicator of `processes` processes: whether
/// `name` is (or becomes) a shared file of this phase, and where the real call opens it.
/// Report the outcome of an [`MpiCall::Open`] with [`mpi_opened`].
///
/// Every process of the communicator reaches the same decision, whatever its own state: the
/// open of a path in the prefix is agreed on with `agree` (one reduction, on every process,
/// before anything depends on what this rank alone knows), and each branches on the agreed
/// values: whether a rank already shares the file in this phase (`SCR_PRELOAD_SHARED`, an
/// earlier `MPI_File_open`), whether a rank routes it, which ranks hold a private copy. A file
/// one rank shares is opened at its staging name by every rank, read-only opens included.
///
/// A file one rank wrote alone before (LAMMPS' MPI-IO restart file: rank 0 writes a header
/// with stdio, then every rank opens the file with `MPI_File_open`) becomes the shared file:
/// that rank puts its bytes at the staging name before any rank opens it and keeps no
/// private copy, so an open without `MPI_MODE_CREATE` finds the file and the dataset gets
/// one shared file holding the header and the MPI-IO data ([`adopt_private`]).
pub fn mpi_open(name: &CStr, amode: Amode, processes: i32, agree: Agree) -> MpiCall {
    let Some(s) = routing() else { return MpiCall::Pass };
    if processes < 2 || !s.is_owner() {
        return MpiCall::Pass;
    }
    let (fs, path) = split_fs_prefix(name.to_bytes());
    let Ok(path) = CString::new(path) else { return MpiCall::Pass };
    let Some(rel) = s.resolve_file(libc::AT_FDCWD, &path) else { return MpiCall::Pass };
    let _inside = Inside::enter();
    let rank = i64::from(s.rank);
    let shared_here = table_now().shared.find(&rel).is_some();
    let mine = if amode.read_only { None } else { private_copy(&table_now(), &rel) };
    let (held, open) = (mine.as_ref().is_some_and(|m| !m.1), mine.as_ref().is_some_and(|m| m.1));
    // every process reduces the same vector, whatever it knows: [shared by a rank, routed by
    // a rank, highest holder of a closed private copy, -lowest holder, highest rank still
    // writing its private copy, -lowest rank]
    let v = [
        i64::from(shared_here),
        i64::from(s.routed(&rel)),
        if held { rank } else { -1 },
        if held { -rank } else { i64::MIN + 1 },
        if open { rank } else { -1 },
        -rank,
    ];
    let Some(got) = agree(&v) else {
        crate::scr_error!("rank {}: MPI_File_open of {}: the ranks could not agree on it", s.rank, rel.display());
        return MpiCall::Fail;
    };
    let agreed =
        Agreed { shared: got[0] > 0, routed: got[1] > 0, high: got[2], low: -got[3], writing: got[4], lowest: -got[5] };
    let (id, staging) = if amode.read_only {
        if !agreed.shared {
            return MpiCall::Pass;
        }
        (0, shared_staging_name(&s.prefix.join(&rel)))
    } else if !agreed.shared && !agreed.routed {
        return MpiCall::Pass;
    } else {
        match adopt_private(s, &rel, amode, &agreed, mine.map(|m| m.0), agree) {
            Some(declared) => declared,
            None => return MpiCall::Fail,
        }
    };
    let mut bytes = fs.to_vec();
    bytes.extend_from_slice(staging.as_os_str().as_bytes());
    crate::scr_debug!(2, "transparent mode: MPI_File_open of shared file {} at {}", rel.display(), staging.display());
    match CString::new(bytes) {
        Ok(name) => MpiCall::Open(MpiOpen { name, id }),
        // the same on every rank: the staging name is the prefix's and the application's
        Err(_) => MpiCall::Pass,
    }
}

/// What the processes of an `MPI_File_open` agreed on (see [`mpi_open`]).
#[derive(Debug)]
struct Agreed {
    /// A rank shares the file in this phase already.
    shared: bool,
    /// A rank routes the path.
    routed: bool,
    /// The highest and lowest rank holding a closed private copy (-1: none).
    high: i64,
    low: i64,
    /// The highest rank still writing its private copy (-1: none).
    writing: i64,
    /// The lowest rank of the communicator.
    lowest: i64,
}

/// A rank's copy of `rel` made before the collective open (pending or in a cached dataset):
/// where its bytes are, and whether a descriptor still writes them.
fn private_copy(t: &Table, rel: &Path) -> Option<(PathBuf, bool)> {
    match t.held(rel)? {
        super::table::Held::Pending(_, p) if p.deleted => None,
        super::table::Held::Pending(_, p) => Some((p.cache.clone(), p.writers > 0)),
        super::table::Held::Committed(c) => Some((c.cache.clone(), false)),
    }
}

/// Declare `rel` shared for a collective open for writing, after the ranks `agreed` on their
/// state (every rank of the communicator calls this with the same `agreed`).
///
/// * A rank shares it already: the staging file is in use (a rank wrote it with
///   `SCR_PRELOAD_SHARED`); every rank declares it and opens it, unless a rank also holds a
///   private copy (one file cannot be both).
/// * Otherwise the file is new at its staging name: one rank (the holder of the private copy,
///   or the lowest rank) removes whatever is there (a stale file, a link someone planted) and
///   creates it anew with `O_CREAT|O_EXCL|O_NOFOLLOW`, writing the private copy's bytes into
///   it and dropping its own copy; the open goes ahead once every rank knows that succeeded.
///   Without a private copy and without `MPI_MODE_CREATE` nothing is created (the open fails
///   as it would have); with `MPI_MODE_EXCL` the real open creates it (`O_EXCL` follows no
///   link).
///
/// Two or more private copies, one still open for writing, or a failed copy: the open fails on
/// every rank with a message naming the file (`None`). Returns the declared id (0: this open
/// declared nothing new here) and the staging name.
fn adopt_private(
    s: &Session,
    rel: &Path,
    amode: Amode,
    agreed: &Agreed,
    mine: Option<PathBuf>,
    agree: Agree,
) -> Option<(u32, PathBuf)> {
    let rank = i64::from(s.rank);
    let &Agreed { shared, high, lowest, .. } = agreed;
    let abs = s.prefix.join(rel);
    if refused(s, rel, &abs, agreed) {
        // every rank refuses alike: one more reduction, so that no rank fails its open (and
        // lets the application abort the job) before the rank at fault said why
        let _ = agree(&[0]);
        return None;
    }
    let (known, id, staging) = {
        let mut t = table_now();
        let (id, known) = declare(s, &mut t, rel);
        (known, id, t.shared.get(id).map(|e| e.staging.clone()).unwrap_or_default())
    };
    let id = if known { 0 } else { id };
    if shared {
        return Some((id, staging));
    }
    let preparer = if high >= 0 { high } else { lowest };
    let failed = rank == preparer && !stage(s, rel, &abs, &staging, mine.filter(|_| high == rank).as_deref(), amode);
    if agree(&[failed as i64]).is_none_or(|g| g[0] != 0) {
        if id != 0 {
            table_now().shared.forget(id);
        }
        return None;
    }
    Some((id, staging))
}

/// Whether the collective open of `rel` (`abs`) must fail on every rank for what the ranks
/// agreed of their copies (`agreed`): a copy still open for writing, a private copy beside a
/// shared one, or two private copies; the rank at fault says why.
fn refused(s: &Session, rel: &Path, abs: &Path, agreed: &Agreed) -> bool {
    let rank = i64::from(s.rank);
    let &Agreed { shared, high, low, writing, .. } = agreed;
    if writing >= 0 {
        if writing == rank {
            crate::scr_error!(
                "rank {}: {} is still open for writing on this rank while the ranks open it together with MPI_File_open; close it first (its bytes become the shared file the ranks write); MPI_File_open fails on every rank",
                s.rank,
                abs.display()
            );
        }
        return true;
    }
    if high >= 0 && shared {
        if rank == low {
            crate::scr_error!(
                "rank {low} wrote {} on its own while another rank writes it as a shared file (SCR_PRELOAD_SHARED) before the ranks opened it together with MPI_File_open: one file cannot be both; declare it shared on every rank; MPI_File_open fails on every rank",
                abs.display()
            );
        }
        return true;
    }
    if high >= 0 && high != low {
        if rank == low {
            crate::scr_error!(
                "ranks {low} and {high} (at least) each wrote {} on their own before opening it together with MPI_File_open: one file cannot hold both; declare it shared so every rank writes the same file (for example SCR_PRELOAD_SHARED='{}'); MPI_File_open fails on every rank",
                abs.display(),
                rel.display()
            );
        }
        return true;
    }
    false
}

/// The preparing rank's part: the staging name made anew, holding `header` (this rank's
/// private copy, which it then drops) when there is one; whether that succeeded (a failure
/// is said, naming the files).
fn stage(s: &Session, rel: &Path, abs: &Path, staging: &Path, header: Option<&Path>, amode: Amode) -> bool {
    match prepare_staging(staging, header, amode) {
        Ok(n) => {
            if header.is_some() {
                let mut t = table_now();
                if let (Some(bytes), _) = t.remove(rel) {
                    let _ = std::fs::remove_file(bytes);
                }
                crate::scr_debug!(
                    1,
                    "transparent mode: rank {} wrote {} alone, then the ranks opened it with MPI_File_open: it is a shared file, its {n} bytes at {}",
                    s.rank,
                    rel.display(),
                    staging.display()
                );
            }
            true
        }
        Err(e) => {
            let what = match header {
                Some(cache) => format!(
                    "copying {} (what this rank wrote of {} before the ranks opened it together with MPI_File_open) to {}",
                    cache.display(),
                    abs.display(),
                    staging.display()
                ),
                None => format!(
                    "preparing {}, where the ranks write {} they open together with MPI_File_open",
                    staging.display(),
                    abs.display()
                ),
            };
            crate::scr_error!("rank {}: {what}: {e}; MPI_File_open fails on every rank", s.rank);
            let _ = std::fs::remove_file(staging);
            false
        }
    }
}

/// Make `staging` a new file of this process for a collective open: remove whatever is at the
/// name (a file a killed run left, a symbolic link someone planted: never followed), then,
/// if there is a `header` to put there or the open creates the file (not exclusively),
/// create it with `O_CREAT|O_EXCL|O_NOFOLLOW` and write the header's bytes into that
/// descriptor. Returns the bytes written.
fn prepare_staging(staging: &Path, header: Option<&Path>, amode: Amode) -> std::io::Result<u64> {
    if let Some(dir) = staging.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    if header.is_none() && (!amode.create || amode.excl) {
        return Ok(0);
    }
    let mut out = crate::paths::create_temp(staging, 0o644)?;
    let n = match header {
        Some(h) => std::io::copy(&mut std::fs::File::open(h)?, &mut out)?,
        None => 0,
    };
    Ok(n)
}

/// After the real `PMPI_File_open` of an [`MpiOpen`] (`ok`: it succeeded).
pub fn mpi_opened(o: &MpiOpen, ok: bool) {
    if o.id == 0 || ok {
        return;
    }
    let _inside = Inside::enter();
    let mut t = table();
    if t.shared.get(o.id).is_some_and(|e| e.writers == 0) {
        t.shared.forget(o.id);
    }
}

/// ROMIO's file system prefix (`ufs:`, `nfs:`, `lustre:`, ...: two or more letters or digits
/// before the first `:`, with no `/` before it) and the path after it.
fn split_fs_prefix(name: &[u8]) -> (&[u8], &[u8]) {
    match name.iter().position(|&b| b == b':') {
        Some(n) if n >= 2 && name[..n].iter().all(u8::is_ascii_alphanumeric) => name.split_at(n + 1),
        _ => (&[], name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn romio_prefixes_are_split_off() {
        assert_eq!(split_fs_prefix(b"ufs:ckpt.1/a"), (&b"ufs:"[..], &b"ckpt.1/a"[..]));
        assert_eq!(split_fs_prefix(b"lustre:/p/ckpt.1/a"), (&b"lustre:"[..], &b"/p/ckpt.1/a"[..]));
        assert_eq!(split_fs_prefix(b"/p/a:b"), (&b""[..], &b"/p/a:b"[..]));
        assert_eq!(split_fs_prefix(b"c:x"), (&b""[..], &b"c:x"[..]), "one letter is no file system");
        assert_eq!(split_fs_prefix(b"dir/x:y"), (&b""[..], &b"dir/x:y"[..]));
    }
}
