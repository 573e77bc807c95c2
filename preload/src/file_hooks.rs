//! The exported file functions. Each takes the fast path (the real function, untouched
//! arguments, no lock) unless the process routes files; otherwise it converts its arguments,
//! asks `scr::transparent::calls` once, applies the answer and keeps errno. `open`-style
//! functions are variadic in C: they are defined with a fixed `mode` argument, read only when
//! `O_CREAT` or `O_TMPFILE` asks for it (glibc's `__OPEN_NEEDS_MODE`), which is sound on the
//! x86_64 and aarch64 ABIs.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};

use libc::{mode_t, off64_t, off_t, size_t, ssize_t, FILE};
use scr::transparent::calls;

use crate::detour::{errno, fence, perform, redirect, set_errno};

/// The real function, or fail the call with `ENOSYS` when it does not exist.
macro_rules! next_or {
    ($name:ident, $fail:expr) => {
        match $crate::real::$name() {
            Some(f) => f,
            None => {
                set_errno(libc::ENOSYS);
                return $fail;
            }
        }
    };
}
pub(crate) use next_or;

fn needs_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// The open family: `call(path, dirfd)` performs the real open.
unsafe fn open_with(
    hook: &str,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    call: impl FnOnce(*const c_char, c_int) -> c_int,
) -> c_int {
    if path.is_null() || scr::transparent::routing().is_none() {
        return call(path, dirfd);
    }
    let saved = errno();
    // SAFETY: the application's NUL-terminated path.
    let p = unsafe { CStr::from_ptr(path) };
    let o = fence(
        hook,
        path,
        || calls::open(dirfd, p, flags),
        || calls::Opening { call: calls::Call::Pass, track: 0, created: false },
    );
    let (track, created) = (o.track, o.created);
    // SAFETY: the application's argument and the real function.
    let fd = unsafe { crate::detour::apply(o.call, saved, path, dirfd, -1, call) };
    if track != 0 {
        let e = errno();
        fence(hook, path, || calls::opened(fd, track, created), || ());
        set_errno(e);
    }
    fd
}

macro_rules! open_hooks {
    (@d $d:ident $x:ident) => { $d };
    ($($name:ident: ($($dirfd:ident)?) $(mode $mode:ident)?;)*) => {$(
        /// # Safety
        /// The C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($dirfd: c_int,)? path: *const c_char, flags: c_int $(, $mode: mode_t)?) -> c_int {
            let f = next_or!($name, -1);
            $(let $mode = if needs_mode(flags) { $mode } else { 0 };)?
            let _dirfd = libc::AT_FDCWD $(; let _dirfd = $dirfd)?;
            open_with(stringify!($name), _dirfd, path, flags, |p, _d| f($(open_hooks!(@d _d $dirfd),)? p, flags $(, $mode as c_uint)?))
        }
    )*};
}
open_hooks! {
    open: () mode mode;
    open64: () mode mode;
    openat: (dirfd) mode mode;
    openat64: (dirfd) mode mode;
    __open_2: ();
    __open64_2: ();
    __openat_2: (dirfd);
    __openat64_2: (dirfd);
}

macro_rules! creat_hook {
    ($($name:ident),*) => {$(
        /// # Safety
        /// C `creat` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let f = next_or!($name, -1);
            open_with(stringify!($name), libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, |p, _| f(p, mode))
        }
    )*};
}
creat_hook!(creat, creat64);

/// `fopen` mode string to `open` flags (what glibc's `_IO_file_fopen` does).
fn mode_flags(mode: *const c_char) -> c_int {
    if mode.is_null() {
        return 0;
    }
    // SAFETY: the application's NUL-terminated mode string.
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let mut flags = match m.first() {
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        Some(b'a') => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return 0,
    };
    for &c in &m[1..] {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    flags
}

/// The stdio opens: `call(path)` performs the real one; the stream's descriptor is tracked.
unsafe fn fopen_with(
    hook: &str,
    path: *const c_char,
    mode: *const c_char,
    call: impl Fn(*const c_char) -> *mut FILE,
) -> *mut FILE {
    let mut fp = std::ptr::null_mut();
    open_with(hook, libc::AT_FDCWD, path, mode_flags(mode), |p, _| {
        fp = call(p);
        // SAFETY: a stream the real function just returned.
        if fp.is_null() {
            -1
        } else {
            unsafe { libc::fileno(fp) }
        }
    });
    fp
}

/// # Safety
/// C `fopen` contract.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let f = next_or!(fopen, std::ptr::null_mut());
    fopen_with("fopen", path, mode, |p| f(p, mode))
}

/// # Safety
/// C `fopen64` contract.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let f = next_or!(fopen64, std::ptr::null_mut());
    fopen_with("fopen64", path, mode, |p| f(p, mode))
}

macro_rules! freopen_hook {
    ($($name:ident),*) => {$(
        /// # Safety
        /// C `freopen` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE {
            let f = next_or!($name, std::ptr::null_mut());
            // the stream's old descriptor is closed inside (no close hook sees it)
            let old = if stream.is_null() || path.is_null() { -1 } else { libc::fileno(stream) };
            let id = calls::closing(old);
            let fp = fopen_with(stringify!($name), path, mode, |p| f(p, mode, stream));
            close_done(id, true);
            fp
        }
    )*};
}
freopen_hook!(freopen, freopen64);

/// After a descriptor of pending file `id` closed (errno kept).
fn close_done(id: u32, ok: bool) {
    if id != 0 {
        let e = errno();
        fence("close", std::ptr::null(), || calls::closed(id, ok), || ());
        set_errno(e);
    }
}

/// # Safety
/// C `fclose` contract.
#[no_mangle]
pub unsafe extern "C" fn fclose(fp: *mut FILE) -> c_int {
    let f = next_or!(fclose, libc::EOF);
    let id = if fp.is_null() { 0 } else { calls::closing(libc::fileno(fp)) };
    let r = f(fp);
    close_done(id, r == 0);
    r
}

/// # Safety
/// C `close` contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let f = next_or!(close, -1);
    let id = calls::closing(fd);
    let r = f(fd);
    close_done(id, r == 0 || errno() == libc::EINTR);
    r
}

/// # Safety
/// C `close_range` contract.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let f = next_or!(close_range, -1);
    let mut ids = Vec::new();
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && scr::transparent::session::owner().is_some() {
        for fd in first..=last.min(1 << 16).max(first) {
            let id = calls::closing(fd as c_int);
            if id != 0 {
                ids.push(id);
            }
        }
    }
    let r = f(first, last, flags);
    for id in ids {
        close_done(id, true);
    }
    r
}

fn duplicated(old: c_int, new: c_int) {
    if new >= 0 {
        let e = errno();
        fence("dup", std::ptr::null(), || calls::duplicated(old, new), || ());
        set_errno(e);
    }
}

/// # Safety
/// C `dup` contract.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let f = next_or!(dup, -1);
    let new = f(old);
    duplicated(old, new);
    new
}

/// `dup2`/`dup3` onto a tracked descriptor close it implicitly.
fn dup_onto(old: c_int, new: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if old == new {
        return call();
    }
    let id = calls::closing(new);
    let r = call();
    if r >= 0 {
        close_done(id, true);
        duplicated(old, r);
    } else if id != 0 {
        scr::transparent::fds::set(new, id);
    }
    r
}

/// # Safety
/// C `dup2` contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let f = next_or!(dup2, -1);
    dup_onto(old, new, || f(old, new))
}

/// # Safety
/// C `dup3` contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let f = next_or!(dup3, -1);
    dup_onto(old, new, || f(old, new, flags))
}

macro_rules! fcntl_hook {
    ($($name:ident),*) => {$(
        /// # Safety
        /// C `fcntl` contract; the third argument is passed through as a machine word.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
            let f = next_or!($name, -1);
            let r = f(fd, cmd, arg);
            if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
                duplicated(fd, r);
            }
            r
        }
    )*};
}
fcntl_hook!(fcntl, fcntl64);

macro_rules! write_hook {
    ($name:ident ($($a:ident: $t:ty),*)) => {
        /// # Safety
        /// C contract of the function of this name; only a failure is looked at.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> ssize_t {
            let f = next_or!($name, -1);
            let r = f(fd, $($a),*);
            if r < 0 && errno() != libc::EAGAIN && errno() != libc::EINTR {
                let e = errno();
                fence(stringify!($name), std::ptr::null(), || calls::write_failed(fd), || ());
                set_errno(e);
            }
            r
        }
    };
}
write_hook!(write(buf: *const c_void, n: size_t));
write_hook!(pwrite(buf: *const c_void, n: size_t, off: off_t));
write_hook!(pwrite64(buf: *const c_void, n: size_t, off: off64_t));
write_hook!(writev(iov: *const libc::iovec, n: c_int));

/// The application's path argument as a C string (checked non-NULL by the callers).
unsafe fn cstr<'a>(p: *const c_char) -> &'a CStr {
    // SAFETY: the callers pass a non-null NUL-terminated argument.
    unsafe { CStr::from_ptr(p) }
}

/// # Safety
/// C `rename` contract.
#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    let f = next_or!(rename, -1);
    renamed("rename", libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0, || f(old, new))
}

/// # Safety
/// C `renameat` contract.
#[no_mangle]
pub unsafe extern "C" fn renameat(od: c_int, old: *const c_char, nd: c_int, new: *const c_char) -> c_int {
    let f = next_or!(renameat, -1);
    renamed("renameat", od, old, nd, new, 0, || f(od, old, nd, new))
}

/// # Safety
/// C `renameat2` contract.
#[no_mangle]
pub unsafe extern "C" fn renameat2(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    let f = next_or!(renameat2, -1);
    renamed("renameat2", od, old, nd, new, flags, || f(od, old, nd, new, flags))
}

unsafe fn renamed(
    hook: &str,
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_uint,
    real: impl FnMut() -> c_int,
) -> c_int {
    if new.is_null() || flags & libc::RENAME_EXCHANGE != 0 {
        let mut real = real;
        return real();
    }
    let noreplace = flags & libc::RENAME_NOREPLACE != 0;
    perform(hook, old, |r| calls::rename(od, cstr(old), nd, cstr(new), noreplace, r), real)
}

/// # Safety
/// C `link` contract.
#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    let f = next_or!(link, -1);
    linked("link", libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0, || f(old, new))
}

/// # Safety
/// C `linkat` contract.
#[no_mangle]
pub unsafe extern "C" fn linkat(od: c_int, old: *const c_char, nd: c_int, new: *const c_char, flags: c_int) -> c_int {
    let f = next_or!(linkat, -1);
    linked("linkat", od, old, nd, new, flags, || f(od, old, nd, new, flags))
}

unsafe fn linked(
    hook: &str,
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_int,
    real: impl FnMut() -> c_int,
) -> c_int {
    // AT_EMPTY_PATH links a descriptor, not a path
    if new.is_null() || flags & libc::AT_EMPTY_PATH != 0 {
        let mut real = real;
        return real();
    }
    perform(hook, old, |r| calls::link(od, cstr(old), nd, cstr(new), r), real)
}

/// # Safety
/// C `unlink` contract.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    let f = next_or!(unlink, -1);
    perform("unlink", path, |r| calls::unlink(libc::AT_FDCWD, cstr(path), r), || f(path))
}

/// # Safety
/// C `remove` contract (a directory is removed as `rmdir` would).
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    let f = next_or!(remove, -1);
    perform("remove", path, |r| calls::remove(cstr(path), r), || f(path))
}

/// # Safety
/// C `unlinkat` contract.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let f = next_or!(unlinkat, -1);
    if flags & libc::AT_REMOVEDIR != 0 {
        return perform("unlinkat", path, |r| calls::rmdir(dirfd, cstr(path), r), || f(dirfd, path, flags));
    }
    perform("unlinkat", path, |r| calls::unlink(dirfd, cstr(path), r), || f(dirfd, path, flags))
}

/// # Safety
/// C `rmdir` contract.
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    let f = next_or!(rmdir, -1);
    perform("rmdir", path, |r| calls::rmdir(libc::AT_FDCWD, cstr(path), r), || f(path))
}

/// Calls on a path's metadata: the same call on the cached bytes when SCR holds the path.
macro_rules! held_hook {
    ($($name:ident ($($pre:ident: $pt:ty),*; path; $($a:ident: $t:ty),*) -> $ret:ty;)*) => {$(
        /// # Safety
        /// The C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* path: *const c_char $(, $a: $t)*) -> $ret {
            let f = next_or!($name, -1);
            redirect(stringify!($name), libc::AT_FDCWD, path, -1, calls::held, |p, _| f($($pre,)* p $(, $a)*))
        }
    )*};
}
held_hook! {
    stat(; path; buf: *mut libc::stat) -> c_int;
    stat64(; path; buf: *mut libc::stat64) -> c_int;
    lstat(; path; buf: *mut libc::stat) -> c_int;
    lstat64(; path; buf: *mut libc::stat64) -> c_int;
    __xstat(ver: c_int; path; buf: *mut libc::stat) -> c_int;
    __xstat64(ver: c_int; path; buf: *mut libc::stat64) -> c_int;
    __lxstat(ver: c_int; path; buf: *mut libc::stat) -> c_int;
    __lxstat64(ver: c_int; path; buf: *mut libc::stat64) -> c_int;
    access(; path; mode: c_int) -> c_int;
    chmod(; path; mode: mode_t) -> c_int;
    chown(; path; uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    lchown(; path; uid: libc::uid_t, gid: libc::gid_t) -> c_int;
    utime(; path; times: *const libc::utimbuf) -> c_int;
    utimes(; path; times: *const libc::timeval) -> c_int;
    lutimes(; path; times: *const libc::timeval) -> c_int;
    readlink(; path; buf: *mut c_char, n: size_t) -> ssize_t;
}

/// `*at` forms: the cached file's absolute path replaces `dirfd` + `path`.
macro_rules! held_at_hook {
    ($($name:ident ($($pre:ident: $pt:ty),*; dirfd, path; $($a:ident: $t:ty),*) -> $ret:ty;)*) => {$(
        /// # Safety
        /// The C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* dirfd: c_int, path: *const c_char $(, $a: $t)*) -> $ret {
            let f = next_or!($name, -1);
            redirect(stringify!($name), dirfd, path, -1, calls::held, |p, d| f($($pre,)* d, p $(, $a)*))
        }
    )*};
}
held_at_hook! {
    fstatat(; dirfd, path; buf: *mut libc::stat, flags: c_int) -> c_int;
    fstatat64(; dirfd, path; buf: *mut libc::stat64, flags: c_int) -> c_int;
    __fxstatat(ver: c_int; dirfd, path; buf: *mut libc::stat, flags: c_int) -> c_int;
    __fxstatat64(ver: c_int; dirfd, path; buf: *mut libc::stat64, flags: c_int) -> c_int;
    faccessat(; dirfd, path; mode: c_int, flags: c_int) -> c_int;
    statx(; dirfd, path; flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int;
    fchmodat(; dirfd, path; mode: mode_t, flags: c_int) -> c_int;
    fchownat(; dirfd, path; uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int;
    futimesat(; dirfd, path; times: *const libc::timeval) -> c_int;
    utimensat(; dirfd, path; times: *const libc::timespec, flags: c_int) -> c_int;
    readlinkat(; dirfd, path; buf: *mut c_char, n: size_t) -> ssize_t;
}

macro_rules! path_hook {
    ($($name:ident ($($a:ident: $t:ty),*) via $core:path;)*) => {$(
        /// # Safety
        /// The C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> c_int {
            let f = next_or!($name, -1);
            redirect(stringify!($name), libc::AT_FDCWD, path, -1, |_, p| $core(p), |p, _| f(p $(, $a)*))
        }
    )*};
}
path_hook! {
    truncate(len: off_t) via calls::update;
    truncate64(len: off64_t) via calls::update;
    statfs(buf: *mut libc::statfs) via calls::statfs;
    statfs64(buf: *mut libc::statfs64) via calls::statfs;
    statvfs(buf: *mut libc::statvfs) via calls::statfs;
    statvfs64(buf: *mut libc::statvfs64) via calls::statfs;
}

/// `realpath` of a held file from the core (`resolved`: the caller's buffer of `PATH_MAX`
/// bytes, or NULL for a `malloc`ed result); `real` answers for every other path.
unsafe fn realpath_with(path: *const c_char, resolved: *mut c_char, real: impl FnOnce() -> *mut c_char) -> *mut c_char {
    if path.is_null() || scr::transparent::routing().is_none() {
        return real();
    }
    let saved = errno();
    let r = fence("realpath", path, || calls::realpath(cstr(path)), || None);
    let p = match r {
        None => {
            set_errno(saved);
            return real();
        }
        Some(Err(e)) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
        Some(Ok(p)) => p,
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str());
    if bytes.len() >= libc::PATH_MAX as usize {
        set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    // SAFETY: malloc'ed memory (the caller frees it) or the caller's PATH_MAX buffer.
    unsafe {
        let out = if resolved.is_null() { libc::malloc(bytes.len() + 1) as *mut c_char } else { resolved };
        if out.is_null() {
            set_errno(libc::ENOMEM);
            return out;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
        *out.add(bytes.len()) = 0;
        set_errno(saved);
        out
    }
}

/// # Safety
/// C `realpath` contract.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let f = next_or!(realpath, std::ptr::null_mut());
    realpath_with(path, resolved, || f(path, resolved))
}

/// # Safety
/// glibc's fortified `realpath` contract.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, len: size_t) -> *mut c_char {
    let f = next_or!(__realpath_chk, std::ptr::null_mut());
    realpath_with(path, resolved, || f(path, resolved, len))
}

/// # Safety
/// glibc `canonicalize_file_name` contract.
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    let f = next_or!(canonicalize_file_name, std::ptr::null_mut());
    realpath_with(path, std::ptr::null_mut(), || f(path))
}
