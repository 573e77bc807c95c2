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
fn opened(
    hook: &'static str,
    d: *mut DIR,
    path: *const c_char,
    merge: impl FnOnce() -> Option<listing::Merge>,
) -> *mut DIR {
    if !d.is_null() && scr::transparent::routing().is_some() {
        let e = errno();
        if let Some(m) = fence(hook, path, merge, || None) {
            listing::stream_opened(d as usize, m);
        }
        set_errno(e);
    }
    d
}

/// `chdir`/`fchdir`: the real call, then the kept working directory is stale
/// ([`crate::detour::base`]).
#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let f = next_or!(chdir: fn(*const c_char) -> c_int, -1);
    // SAFETY: the real chdir with the application's argument.
    let r = unsafe { f(path) };
    scr::transparent::cwd_may_have_moved();
    r
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    let f = next_or!(fchdir: fn(c_int) -> c_int, -1);
    // SAFETY: the real fchdir with the application's argument.
    let r = unsafe { f(fd) };
    scr::transparent::cwd_may_have_moved();
    r
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let f = next_or!(opendir: fn(*const c_char) -> *mut DIR, std::ptr::null_mut());
    // SAFETY: the real opendir with the application's argument.
    let d = unsafe { f(path) };
    // SAFETY: `path` is non-null here and NUL-terminated (opendir's C contract).
    if path.is_null() || !scr::transparent::calls::concerns(unsafe { CStr::from_ptr(path) }) {
        return d;
    }
    // SAFETY: as above.
    opened("opendir", d, path, || listing::listing(libc::AT_FDCWD, unsafe { CStr::from_ptr(path) }))
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let f = next_or!(fdopendir: fn(c_int) -> *mut DIR, std::ptr::null_mut());
    // SAFETY: the real fdopendir with the application's argument.
    let d = unsafe { f(fd) };
    opened("fdopendir", d, std::ptr::null(), || listing::listing_fd(fd))
}

/// The next entry of `d`: the real stream's (`real()`), then the extra ones.
unsafe fn next(d: *mut DIR, real: impl FnOnce() -> *mut dirent64) -> *mut dirent64 {
    if let Some(e) = listing::stream_ended(d as usize) {
        return e;
    }
    let e = real();
    // SAFETY: a non-null entry the real readdir just returned: valid until the stream's next
    // call, its name NUL-terminated.
    let name = if e.is_null() { None } else { Some(unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }) };
    listing::stream_next(d as usize, name).unwrap_or(e)
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    let f = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, std::ptr::null_mut());
    // SAFETY: the real readdir64 on the application's stream.
    unsafe { next(d, || f(d)) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    let f = next_or!(readdir: fn(*mut DIR) -> *mut libc::dirent, std::ptr::null_mut());
    // SAFETY: the real readdir on the application's stream (`dirent` and `dirent64` have one
    // layout on the supported ABIs).
    unsafe { next(d, || f(d) as *mut dirent64) as *mut libc::dirent }
}

macro_rules! readdir_r_hook {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: *mut DIR, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
            let f = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, libc::ENOSYS);
            let saved = errno();
            set_errno(0);
            // SAFETY: the real readdir64 on the application's stream.
            let e = unsafe { next(d, || f(d)) };
            let err = errno();
            set_errno(saved);
            // SAFETY: `entry` and `result` are the caller's, writable for one entry and one
            // pointer (readdir_r's C contract); `e` is a valid entry distinct from `entry`.
            unsafe { *result = if e.is_null() { e } else { std::ptr::copy_nonoverlapping(e, entry, 1); entry } };
            if e.is_null() { err } else { 0 }
        }
    )*};
}
readdir_r_hook!(readdir_r, readdir64_r);

#[no_mangle]
#[allow(clippy::unused_unit)] // next_or! returns its fail value, here ()
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    let f = next_or!(rewinddir: fn(*mut DIR) -> (), ());
    // SAFETY: the real rewinddir on the application's stream.
    unsafe { f(d) };
    listing::stream_rewound(d as usize, false);
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    let f = next_or!(closedir: fn(*mut DIR) -> c_int, -1);
    listing::stream_rewound(d as usize, true);
    // SAFETY: the real closedir on the application's stream.
    unsafe { f(d) }
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
    // SAFETY: `path` is non-null here and NUL-terminated (the caller's contract).
    if path.is_null() || list.is_null() || !scr::transparent::calls::concerns(unsafe { CStr::from_ptr(path) }) {
        return real();
    }
    let saved = errno();
    // SAFETY: as above.
    let Some(m) = fence("scandir", path, || listing::listing(dirfd, unsafe { CStr::from_ptr(path) }), || None) else {
        set_errno(saved);
        return real();
    };
    let open = next_or!(openat: fn(c_int, *const c_char, c_int; ...) -> c_int, -1);
    let fdopen = next_or!(fdopendir: fn(c_int) -> *mut DIR, -1);
    let read = next_or!(readdir64: fn(*mut DIR) -> *mut dirent64, -1);
    // SAFETY: the real openat with the caller's directory and path (non-null, NUL-terminated).
    let fd = unsafe { open(dirfd, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    // SAFETY: the real fdopendir on the descriptor just opened.
    let d = if fd < 0 { std::ptr::null_mut() } else { unsafe { fdopen(fd) } };
    if d.is_null() {
        return -1;
    }
    listing::stream_opened(d as usize, m);
    let mut out: Vec<dirent64> = Vec::new();
    loop {
        // SAFETY: the real readdir64 on the stream opened above.
        let e = unsafe { next(d, || read(d)) };
        if e.is_null() {
            break;
        }
        // SAFETY: the caller's filter takes a valid entry (scandir's C contract).
        if filter.is_none_or(|f| unsafe { f(e) } != 0) {
            // SAFETY: a valid entry, copied out before the stream's next call.
            out.push(unsafe { std::ptr::read(e) });
        }
    }
    // SAFETY: the stream opened above, closed once.
    unsafe { closedir(d) };
    // the caller frees the array and each entry with free()
    let size = std::mem::size_of::<*mut dirent64>();
    // SAFETY: malloc of a non-zero size; checked for NULL before use.
    let array = unsafe { libc::malloc(out.len().max(1) * size) } as *mut *mut dirent64;
    let mut n = 0;
    while !array.is_null() && n < out.len() {
        // SAFETY: as above.
        let copy = unsafe { libc::malloc(std::mem::size_of::<dirent64>()) } as *mut dirent64;
        if copy.is_null() {
            // SAFETY: the first n elements of `array` are entries malloc'ed above, and
            // `array` itself was malloc'ed; each is freed once.
            unsafe {
                (0..n).for_each(|i| libc::free(*array.add(i) as *mut c_void));
                libc::free(array as *mut c_void);
            }
            break;
        }
        // SAFETY: `copy` is a fresh allocation of one entry, `array` has room for
        // out.len() > n pointers; `out[n]` is a plain-data entry.
        unsafe {
            std::ptr::write(copy, std::ptr::read(&out[n]));
            *array.add(n) = copy;
        }
        n += 1;
    }
    if n < out.len() || array.is_null() {
        set_errno(libc::ENOMEM);
        return -1;
    }
    if let Some(c) = compar {
        // SAFETY: qsort hands the comparison pointers to two array elements, as scandir does.
        // The two pointer types have one ABI.
        let c: extern "C" fn(*const c_void, *const c_void) -> c_int = unsafe { std::mem::transmute(c) };
        // SAFETY: `array` holds n elements of `size` bytes.
        unsafe { libc::qsort(array as *mut c_void, n, size, Some(c)) };
    }
    // SAFETY: `list` is non-null (checked above) and the caller's (scandir's C contract).
    unsafe { *list = array };
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
            // SAFETY: the application's arguments (scandir's C contract) to us and the real one.
            unsafe { scandir_with($d, path, list, filter, compar, || f($($dirfd,)? path, list, filter, compar)) }
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
    // SAFETY: `path` is non-null here and NUL-terminated (the caller's contract).
    let mut walk = match fence("nftw", path, || listing::walk(unsafe { CStr::from_ptr(path) }, flags), || None) {
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
    // SAFETY: a NUL-terminated literal path.
    let cwd = if flags & ftw::CHDIR != 0 {
        unsafe { libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) }
    } else {
        -1
    };
    let mut rc = 0;
    while let Some(st) = walk.step() {
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).unwrap_or_default();
        let (p, s) = (c(&st.path), c(&st.stat));
        // SAFETY: `stat` is plain data; all-zero is a valid value.
        let mut buf: libc::stat = unsafe { std::mem::zeroed() };
        if st.flag != ftw::NS {
            // SAFETY: a NUL-terminated path and a writable stat buffer.
            let _ = unsafe {
                if st.lstat(flags) {
                    libc::lstat(s.as_ptr(), &mut buf)
                } else {
                    libc::stat(s.as_ptr(), &mut buf)
                }
            };
        }
        if cwd >= 0 {
            // SAFETY: `cwd` is the descriptor opened above.
            unsafe { libc::fchdir(cwd) };
            if let Some(parent) = st.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                // SAFETY: a NUL-terminated path that lives through the call.
                unsafe { libc::chdir(c(parent).as_ptr()) };
            }
        }
        let mut info = [st.base as c_int, st.level];
        set_errno(saved);
        // SAFETY: the caller's callback (nftw's C contract) with a NUL-terminated path, a stat
        // buffer and `struct FTW` that live through the call.
        let r = unsafe { func(p.as_ptr(), &buf, st.flag, &mut info) };
        if let Some(r) = walk.answer(r) {
            rc = r;
            break;
        }
    }
    if cwd >= 0 {
        // SAFETY: `cwd` is the descriptor opened above, closed once.
        unsafe {
            libc::fchdir(cwd);
            libc::close(cwd);
        }
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nftw(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw: fn(*const c_char, NftwFn, c_int, c_int) -> c_int, -1);
    // SAFETY: the application's arguments (nftw's C contract) to us and the real one.
    unsafe { nftw_with(path, func, flags, || f(path, func, fds, flags)) }
}

#[no_mangle]
pub unsafe extern "C" fn nftw64(path: *const c_char, func: NftwFn, fds: c_int, flags: c_int) -> c_int {
    let f = next_or!(nftw64: fn(*const c_char, NftwFn, c_int, c_int) -> c_int, -1);
    // SAFETY: the application's arguments (nftw's C contract) to us and the real one.
    unsafe { nftw_with(path, func, flags, || f(path, func, fds, flags)) }
}
