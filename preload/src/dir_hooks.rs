//! Directory listings: a stream opened on a directory below the prefix in which SCR holds
//! files gets a [`Merge`] from the core, and `readdir` returns the directory's own entries,
//! then the ones SCR adds. The real `DIR*` stays the application's handle (so `dirfd`,
//! `telldir` of the real part and `closedir` keep working); the merge lives beside it, keyed
//! by the handle. `scandir` and `nftw` call glibc's internal directory functions, so they are
//! done here over the merged listing when SCR holds files below the directory, and by glibc
//! otherwise.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{dirent64, DIR};
use scr::transparent::listing::{self, Kind, Merge, WalkFlags};

use crate::detour::{errno, fence, set_errno};
use crate::file_hooks::next_or;
use crate::real::{self as reals, Compar, Filter, NftwFn};

struct Stream {
    merge: Merge,
    /// The entry an extra name is returned in (valid until the next `readdir` on the stream).
    ent: dirent64,
}

static STREAMS: Mutex<Option<HashMap<usize, Box<Stream>>>> = Mutex::new(None);
/// Merged streams open: until there is one, `readdir` is one atomic load and the real call.
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn streams() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Box<Stream>>>> {
    STREAMS.lock().unwrap_or_else(|e| e.into_inner())
}

fn register(d: *mut DIR, merge: Option<Merge>) -> *mut DIR {
    if let (false, Some(merge)) = (d.is_null(), merge) {
        // SAFETY: dirent64 is plain data; all zeroes is a valid value.
        let ent = unsafe { std::mem::zeroed() };
        streams().get_or_insert_with(HashMap::new).insert(d as usize, Box::new(Stream { merge, ent }));
        OPEN.fetch_add(1, Ordering::SeqCst);
    }
    d
}

/// # Safety
/// C `opendir` contract.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let f = next_or!(opendir, std::ptr::null_mut());
    let d = f(path);
    if d.is_null() || path.is_null() || scr::transparent::routing().is_none() {
        return d;
    }
    let e = errno();
    let m = fence("opendir", path, || listing::listing(libc::AT_FDCWD, CStr::from_ptr(path)), || None);
    set_errno(e);
    register(d, m)
}

/// # Safety
/// C `fdopendir` contract.
#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let f = next_or!(fdopendir, std::ptr::null_mut());
    let d = f(fd);
    if d.is_null() || scr::transparent::routing().is_none() {
        return d;
    }
    let e = errno();
    let m = fence("fdopendir", std::ptr::null(), || listing::listing_fd(fd), || None);
    set_errno(e);
    register(d, m)
}

/// The next entry of `d`: the real stream's, then the extra ones.
fn next(d: *mut DIR, real: impl FnOnce() -> *mut dirent64) -> *mut dirent64 {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return real();
    }
    let mut g = streams();
    let Some(st) = g.as_mut().and_then(|m| m.get_mut(&(d as usize))) else {
        drop(g);
        return real();
    };
    let e = real();
    if !e.is_null() {
        // SAFETY: a valid entry the real readdir returned.
        st.merge.real(unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes());
        return e;
    }
    let Some(x) = st.merge.next_extra() else { return e };
    let n = x.name.len().min(255);
    st.ent.d_ino = x.ino;
    st.ent.d_off = 0;
    st.ent.d_type = x.dtype;
    st.ent.d_reclen = std::mem::size_of::<dirent64>() as u16;
    for (i, b) in x.name[..n].iter().enumerate() {
        st.ent.d_name[i] = *b as c_char;
    }
    st.ent.d_name[n] = 0;
    &mut st.ent as *mut dirent64
}

/// # Safety
/// C `readdir64` contract.
#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    let f = next_or!(readdir64, std::ptr::null_mut());
    next(d, || f(d))
}

/// # Safety
/// C `readdir` contract (`struct dirent` is `struct dirent64` on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    let f = next_or!(readdir, std::ptr::null_mut());
    next(d, || f(d) as *mut dirent64) as *mut libc::dirent
}

macro_rules! readdir_r_hook {
    ($($name:ident),*) => {$(
        /// # Safety
        /// C `readdir_r` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: *mut DIR, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
            let f = next_or!(readdir64, libc::ENOSYS);
            let saved = errno();
            set_errno(0);
            let e = next(d, || f(d));
            let err = errno();
            set_errno(saved);
            if e.is_null() {
                *result = std::ptr::null_mut();
                return err;
            }
            std::ptr::copy_nonoverlapping(e, entry, 1);
            *result = entry;
            0
        }
    )*};
}
readdir_r_hook!(readdir_r, readdir64_r);

/// # Safety
/// C `rewinddir` contract.
#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    let Some(f) = reals::rewinddir() else { return };
    f(d);
    if OPEN.load(Ordering::Relaxed) > 0 {
        if let Some(st) = streams().as_mut().and_then(|m| m.get_mut(&(d as usize))) {
            st.merge.rewind();
        }
    }
}

/// # Safety
/// C `closedir` contract.
#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    let f = next_or!(closedir, -1);
    if OPEN.load(Ordering::Relaxed) > 0 && streams().as_mut().and_then(|m| m.remove(&(d as usize))).is_some() {
        OPEN.fetch_sub(1, Ordering::SeqCst);
    }
    f(d)
}

/// `scandir` over a merged stream (`open` opens the directory); `real` when SCR holds
/// nothing below it.
unsafe fn scandir_with(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
    real: impl FnOnce() -> c_int,
) -> c_int {
    if path.is_null() || list.is_null() || scr::transparent::routing().is_none() {
        return real();
    }
    let saved = errno();
    let Some(m) = fence("scandir", path, || listing::listing(dirfd, CStr::from_ptr(path)), || None) else {
        set_errno(saved);
        return real();
    };
    let (Some(open), Some(fdopen), Some(read)) = (reals::openat(), reals::fdopendir(), reals::readdir64()) else {
        return real();
    };
    let fd = open(dirfd, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
    let d = if fd < 0 { std::ptr::null_mut() } else { fdopen(fd) };
    if d.is_null() {
        return -1;
    }
    register(d, Some(m));
    let mut out: Vec<*mut dirent64> = Vec::new();
    loop {
        let e = next(d, || read(d));
        if e.is_null() {
            break;
        }
        if filter.is_some_and(|f| f(e) == 0) {
            continue;
        }
        let copy = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
        if copy.is_null() {
            out.iter().for_each(|p| libc::free(*p as *mut c_void));
            closedir(d);
            set_errno(libc::ENOMEM);
            return -1;
        }
        std::ptr::copy_nonoverlapping(e, copy, 1);
        out.push(copy);
    }
    closedir(d);
    let array = libc::malloc(out.len().max(1) * std::mem::size_of::<*mut dirent64>()) as *mut *mut dirent64;
    if array.is_null() {
        out.iter().for_each(|p| libc::free(*p as *mut c_void));
        set_errno(libc::ENOMEM);
        return -1;
    }
    std::ptr::copy_nonoverlapping(out.as_ptr(), array, out.len());
    if let Some(c) = compar {
        // SAFETY: qsort hands the comparison pointers to two array elements, as scandir does.
        let c: extern "C" fn(*const c_void, *const c_void) -> c_int = std::mem::transmute(c);
        libc::qsort(array as *mut c_void, out.len(), std::mem::size_of::<*mut dirent64>(), Some(c));
    }
    *list = array;
    set_errno(saved);
    out.len() as c_int
}

macro_rules! scandir_hook {
    ($($name:ident ($($dirfd:ident)?) at $d:expr;)*) => {$(
        /// # Safety
        /// The C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($dirfd: c_int,)? path: *const c_char, list: *mut *mut *mut dirent64, filter: Filter, compar: Compar) -> c_int {
            let f = next_or!($name, -1);
            scandir_with($d, path, list, filter, compar, || f($($dirfd,)? path, list, filter, compar))
        }
    )*};
}
scandir_hook! {
    scandir() at libc::AT_FDCWD;
    scandir64() at libc::AT_FDCWD;
    scandirat(dirfd) at dirfd;
    scandirat64(dirfd) at dirfd;
}

// nftw flags and type flags (<ftw.h>)
const FTW_PHYS: c_int = 1;
const FTW_MOUNT: c_int = 2;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_STOP: c_int = 1;
const FTW_SKIP_SUBTREE: c_int = 2;
const FTW_SKIP_SIBLINGS: c_int = 3;

fn type_flag(k: Kind) -> c_int {
    match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::DirUnreadable => 2,
        Kind::NoStat => 3,
        Kind::Symlink => 4,
        Kind::DirPost => 5,
        Kind::SymlinkDangling => 6,
    }
}

/// `nftw` over the merged listings when SCR holds files below `path`.
unsafe fn nftw_with(path: *const c_char, func: NftwFn, flags: c_int, real: impl FnOnce() -> c_int) -> c_int {
    let Some(func) = func.filter(|_| !path.is_null() && scr::transparent::routing().is_some()) else { return real() };
    let saved = errno();
    let wf =
        WalkFlags { phys: flags & FTW_PHYS != 0, depth_first: flags & FTW_DEPTH != 0, mount: flags & FTW_MOUNT != 0 };
    let steps = match fence("nftw", path, || listing::walk(CStr::from_ptr(path), wf), || None) {
        None => {
            set_errno(saved);
            return real();
        }
        Some(Err(e)) => {
            set_errno(e);
            return -1;
        }
        Some(Ok(s)) => s,
    };
    let cwd = if flags & FTW_CHDIR != 0 { libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) } else { -1 };
    let mut i = 0;
    let mut rc = 0;
    while i < steps.len() {
        let st = &steps[i];
        let (Ok(p), Ok(s)) = (
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(st.path.as_os_str())),
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(st.stat.as_os_str())),
        ) else {
            i += 1;
            continue;
        };
        let mut buf: libc::stat = std::mem::zeroed();
        if st.kind != Kind::NoStat {
            let follow = !(wf.phys || matches!(st.kind, Kind::Symlink | Kind::SymlinkDangling));
            let _ = if follow { libc::stat(s.as_ptr(), &mut buf) } else { libc::lstat(s.as_ptr(), &mut buf) };
        }
        if cwd >= 0 {
            libc::fchdir(cwd);
            if let Some(parent) = st.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(parent.as_os_str())) {
                    libc::chdir(c.as_ptr());
                }
            }
        }
        let mut ftw = [st.base as c_int, st.level];
        set_errno(saved);
        let r = func(p.as_ptr(), &buf, type_flag(st.kind), &mut ftw);
        i += 1;
        if flags & FTW_ACTIONRETVAL != 0 {
            match r {
                FTW_STOP => {
                    rc = r;
                    break;
                }
                FTW_SKIP_SUBTREE if st.kind == Kind::Dir => i = st.skip_subtree,
                FTW_SKIP_SIBLINGS => i = if st.skip_siblings == 0 { steps.len() } else { st.skip_siblings },
                _ => {}
            }
        } else if r != 0 {
            rc = r;
            break;
        }
    }
    if cwd >= 0 {
        libc::fchdir(cwd);
        libc::close(cwd);
    }
    rc
}

/// # Safety
/// C `nftw` contract.
#[no_mangle]
pub unsafe extern "C" fn nftw(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw, -1);
    nftw_with(path, func, flags, || f(path, func, fds, flags))
}

/// # Safety
/// C `nftw64` contract.
#[no_mangle]
pub unsafe extern "C" fn nftw64(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw64, -1);
    nftw_with(path, func, flags, || f(path, func, fds, flags))
}
