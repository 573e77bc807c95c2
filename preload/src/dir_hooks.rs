//! Directory listings: a stream opened on a directory below the prefix in which SCR holds
//! files gets a [`Merge`] from the core, and `readdir` returns the directory's own entries,
//! then the ones SCR adds. The real `DIR*` stays the application's handle (so `dirfd`,
//! `telldir` of the real part and `closedir` keep working); the merge lives beside it, keyed
//! by the handle. `scandir` and `nftw` call glibc's internal directory functions, so they are
//! done here over the merged listing when SCR holds files below the directory, and by glibc
//! otherwise.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;

use libc::{dirent64, DIR};
use scr::transparent::listing::{self, ftw};

use crate::detour::{errno, fence, set_errno};
use crate::real::{next_or, Compar, Filter, NftwFn};

/// A stream just opened: the core's merge, if SCR holds files below its directory.
fn opened(hook: &str, d: *mut DIR, path: *const c_char, merge: impl FnOnce() -> Option<listing::Merge>) -> *mut DIR {
    if !d.is_null() && scr::transparent::routing().is_some() {
        let e = errno();
        if let Some(m) = fence(hook, path, merge, || None) {
            listing::stream_opened(d as usize, m);
        }
        set_errno(e);
    }
    d
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let f = next_or!(opendir: fn(*const c_char) -> *mut DIR, std::ptr::null_mut());
    let d = f(path);
    if path.is_null() || !scr::transparent::calls::concerns(CStr::from_ptr(path)) {
        return d;
    }
    opened("opendir", d, path, || listing::listing(libc::AT_FDCWD, CStr::from_ptr(path)))
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let f = next_or!(fdopendir: fn(c_int) -> *mut DIR, std::ptr::null_mut());
    opened("fdopendir", f(fd), std::ptr::null(), || listing::listing_fd(fd))
}

/// The next entry of `d`: the real stream's (`real()`), then the extra ones.
unsafe fn next(d: *mut DIR, real: impl FnOnce() -> *mut dirent64) -> *mut dirent64 {
    if let Some(e) = listing::stream_ended(d as usize) {
        return e;
    }
    let e = real();
    let name = if e.is_null() { None } else { Some(CStr::from_ptr((*e).d_name.as_ptr())) };
    listing::stream_next(d as usize, name).unwrap_or(e)
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    let f = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, std::ptr::null_mut());
    next(d, || f(d))
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    let f = next_or!(readdir: fn(*mut DIR) -> *mut libc::dirent, std::ptr::null_mut());
    next(d, || f(d) as *mut dirent64) as *mut libc::dirent
}

macro_rules! readdir_r_hook {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: *mut DIR, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
            let f = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, libc::ENOSYS);
            let saved = errno();
            set_errno(0);
            let e = next(d, || f(d));
            let err = errno();
            set_errno(saved);
            *result = if e.is_null() { e } else { std::ptr::copy_nonoverlapping(e, entry, 1); entry };
            if e.is_null() { err } else { 0 }
        }
    )*};
}
readdir_r_hook!(readdir_r, readdir64_r);

#[no_mangle]
#[allow(clippy::unused_unit)] // next_or! returns its fail value, here ()
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    let f = next_or!(rewinddir: fn(*mut DIR) -> (), ());
    f(d);
    listing::stream_rewound(d as usize, false);
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    let f = next_or!(closedir: fn(*mut DIR) -> c_int, -1);
    listing::stream_rewound(d as usize, true);
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
    if path.is_null() || list.is_null() || !scr::transparent::calls::concerns(CStr::from_ptr(path)) {
        return real();
    }
    let saved = errno();
    let Some(m) = fence("scandir", path, || listing::listing(dirfd, CStr::from_ptr(path)), || None) else {
        set_errno(saved);
        return real();
    };
    let open = next_or!(openat: fn(c_int, *const c_char, c_int; ...) -> c_int, -1);
    let fdopen = next_or!(fdopendir: fn(c_int) -> *mut DIR, -1);
    let read = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, -1);
    let fd = open(dirfd, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
    let d = if fd < 0 { std::ptr::null_mut() } else { fdopen(fd) };
    if d.is_null() {
        return -1;
    }
    listing::stream_opened(d as usize, m);
    let mut out: Vec<dirent64> = Vec::new();
    loop {
        let e = next(d, || read(d));
        if e.is_null() {
            break;
        }
        if filter.is_none_or(|f| f(e) != 0) {
            out.push(std::ptr::read(e));
        }
    }
    closedir(d);
    // the caller frees the array and each entry with free()
    let size = std::mem::size_of::<*mut dirent64>();
    let array = libc::malloc(out.len().max(1) * size) as *mut *mut dirent64;
    let mut n = 0;
    while !array.is_null() && n < out.len() {
        let copy = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
        if copy.is_null() {
            (0..n).for_each(|i| libc::free(*array.add(i) as *mut c_void));
            libc::free(array as *mut c_void);
            break;
        }
        std::ptr::write(copy, std::ptr::read(&out[n]));
        *array.add(n) = copy;
        n += 1;
    }
    if n < out.len() || array.is_null() {
        set_errno(libc::ENOMEM);
        return -1;
    }
    if let Some(c) = compar {
        // SAFETY: qsort hands the comparison pointers to two array elements, as scandir does.
        let c: extern "C" fn(*const c_void, *const c_void) -> c_int = std::mem::transmute(c);
        libc::qsort(array as *mut c_void, n, size, Some(c));
    }
    *list = array;
    set_errno(saved);
    n as c_int
}

macro_rules! open_hook_int {
    ($x:ident) => {
        c_int
    };
}

macro_rules! scandir_hook {
    ($($name:ident ($($dirfd:ident)?) at $d:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($dirfd: c_int,)? path: *const c_char, list: *mut *mut *mut dirent64, filter: Filter, compar: Compar) -> c_int {
            let f = next_or!($name: fn($(open_hook_int!($dirfd),)? *const c_char, *mut *mut *mut dirent64, Filter, Compar) -> c_int, -1);
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

/// `nftw` over the merged listings when SCR holds files below `path`.
unsafe fn nftw_with(path: *const c_char, func: NftwFn, flags: c_int, real: impl FnOnce() -> c_int) -> c_int {
    let Some(func) = func.filter(|_| !path.is_null() && scr::transparent::routing().is_some()) else { return real() };
    let saved = errno();
    let mut walk = match fence("nftw", path, || listing::walk(CStr::from_ptr(path), flags), || None) {
        None => {
            set_errno(saved);
            return real();
        }
        Some(Err(e)) => {
            set_errno(e);
            return -1;
        }
        Some(Ok(w)) => w,
    };
    let cwd = if flags & ftw::CHDIR != 0 { libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) } else { -1 };
    let mut rc = 0;
    while let Some(st) = walk.step() {
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).unwrap_or_default();
        let (p, s) = (c(&st.path), c(&st.stat));
        let mut buf: libc::stat = std::mem::zeroed();
        if st.flag != ftw::NS {
            let _ = if st.lstat(flags) { libc::lstat(s.as_ptr(), &mut buf) } else { libc::stat(s.as_ptr(), &mut buf) };
        }
        if cwd >= 0 {
            libc::fchdir(cwd);
            if let Some(parent) = st.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                libc::chdir(c(parent).as_ptr());
            }
        }
        let mut info = [st.base as c_int, st.level];
        set_errno(saved);
        let r = func(p.as_ptr(), &buf, st.flag, &mut info);
        if let Some(r) = walk.answer(r) {
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

#[no_mangle]
pub unsafe extern "C" fn nftw(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw: fn(*const c_char, NftwFn, c_int, c_int) -> c_int, -1);
    nftw_with(path, func, flags, || f(path, func, fds, flags))
}

#[no_mangle]
pub unsafe extern "C" fn nftw64(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw64: fn(*const c_char, NftwFn, c_int, c_int) -> c_int, -1);
    nftw_with(path, func, flags, || f(path, func, fds, flags))
}
