//! The exported file functions, each with the C contract of the libc function of its name.
//! Each takes the fast path (the real function, untouched arguments, no lock) unless the
//! process routes files; otherwise it asks `scr::transparent::calls` once, applies the answer
//! and keeps errno. `open`-style functions are variadic in C: they are defined with a fixed
//! `mode` argument, read only when `O_CREAT` or `O_TMPFILE` asks for it (glibc's
//! `__OPEN_NEEDS_MODE`), which is sound on the x86_64 and aarch64 ABIs.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};

use libc::{mode_t, off64_t, off_t, size_t, ssize_t, FILE};
use scr::transparent::{calls, names};

use crate::detour::{apply, errno, fence, perform, quietly, quietly_after, redirect, set_errno};
use crate::real::next_or;

/// The open family: `call(path, dirfd)` performs the real open; a pending file the core
/// routed the open to is told its descriptor.
unsafe fn open_with(
    hook: &'static str,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    call: impl FnOnce(*const c_char, c_int) -> c_int,
) -> c_int {
    // SAFETY: `path` is non-null here and NUL-terminated (the caller's contract).
    if path.is_null() || !calls::concerns(unsafe { CStr::from_ptr(path) }) {
        return call(path, dirfd);
    }
    let saved = errno();
    let pass = || calls::Opening { call: calls::Call::Pass, track: 0, created: false };
    // SAFETY: as above.
    let o = fence(hook, path, || calls::open(dirfd, unsafe { CStr::from_ptr(path) }, flags), pass);
    let fd = apply(o.call, saved, path, dirfd, -1, call);
    if o.track != 0 {
        quietly_after(hook, || calls::opened(fd, o.track, o.created));
    }
    fd
}

macro_rules! open_hook {
    (@d $d:ident $x:ident) => { $d };
    (@int $x:ident) => { c_int };
    (@file $x:ident) => { *mut FILE };
    ($($name:ident($($dirfd:ident)?) $(mode $mode:ident $va:tt)?;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($dirfd: c_int,)? path: *const c_char, flags: c_int $(, $mode: mode_t)?) -> c_int {
            let f = next_or!($name: fn($(open_hook!(@int $dirfd),)? *const c_char, c_int $(; $va)?) -> c_int, -1);
            $(let $mode = if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE { $mode } else { 0 };)?
            let _d = libc::AT_FDCWD $(; let _d = $dirfd)?;
            // SAFETY: `path` is NULL or NUL-terminated (open's C contract); `f` is the real
            // function, called with the application's arguments or the core's path.
            unsafe { open_with(stringify!($name), _d, path, flags, |p, _d| f($(open_hook!(@d _d $dirfd),)? p, flags $(, $mode as c_uint)?)) }
        }
    )*};
}
open_hook! {
    open() mode mode ...;
    open64() mode mode ...;
    openat(dirfd) mode mode ...;
    openat64(dirfd) mode mode ...;
    __open_2();
    __open64_2();
    __openat_2(dirfd);
    __openat64_2(dirfd);
}

macro_rules! creat_hook {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let f = next_or!($name: fn(*const c_char, mode_t) -> c_int, -1);
            // SAFETY: `path` is NULL or NUL-terminated (creat's C contract); `f` is the real
            // function, called with the application's mode and its path or the core's.
            unsafe { open_with(stringify!($name), libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, |p, _| f(p, mode)) }
        }
    )*};
}
creat_hook!(creat, creat64);

/// The stdio opens: `call(path)` performs the real one; the stream's descriptor is tracked.
unsafe fn fopen_with(
    hook: &'static str,
    path: *const c_char,
    mode: *const c_char,
    call: impl Fn(*const c_char) -> *mut FILE,
) -> *mut FILE {
    let mut fp = std::ptr::null_mut();
    // SAFETY: `mode` is non-null here and NUL-terminated (the caller's contract).
    let flags = if mode.is_null() { 0 } else { calls::fopen_flags(unsafe { CStr::from_ptr(mode) }) };
    let opened = |p: *const c_char, _: c_int| {
        fp = call(p);
        if fp.is_null() {
            -1
        } else {
            // SAFETY: a stream the real fopen just returned.
            unsafe { libc::fileno(fp) }
        }
    };
    // SAFETY: `path` is NULL or NUL-terminated (the caller's contract).
    unsafe { open_with(hook, libc::AT_FDCWD, path, flags, opened) };
    fp
}

macro_rules! fopen_hook {
    ($($name:ident($($stream:ident)?);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char $(, $stream: *mut FILE)?) -> *mut FILE {
            let f = next_or!($name: fn(*const c_char, *const c_char $(, open_hook!(@file $stream))?) -> *mut FILE, std::ptr::null_mut());
            // freopen closes the stream's old descriptor inside (no close hook sees it)
            // SAFETY: a non-null stream of the application's (freopen's C contract).
            let _id = 0 $(; let _id = if $stream.is_null() || path.is_null() { 0 } else { calls::closing(unsafe { libc::fileno($stream) }) })?;
            // SAFETY: `path` and `mode` are NULL or NUL-terminated (fopen's C contract); `f` is
            // the real function, called with the application's arguments or the core's path.
            let fp = unsafe { fopen_with(stringify!($name), path, mode, |p| f(p, mode $(, $stream)?)) };
            close_done(_id, true);
            fp
        }
    )*};
}
fopen_hook! {
    fopen();
    fopen64();
    freopen(stream);
    freopen64(stream);
}

/// After a descriptor of pending file `id` closed.
fn close_done(id: u32, ok: bool) {
    if id != 0 {
        quietly("close", || calls::closed(id, ok));
    }
}

#[no_mangle]
pub unsafe extern "C" fn fclose(fp: *mut FILE) -> c_int {
    let f = next_or!(fclose: fn(*mut FILE) -> c_int, libc::EOF);
    // SAFETY: a non-null stream of the application's (fclose's C contract).
    let id = if fp.is_null() { 0 } else { calls::closing(unsafe { libc::fileno(fp) }) };
    // SAFETY: the real fclose with the application's argument.
    let r = unsafe { f(fp) };
    close_done(id, r == 0);
    r
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let f = next_or!(close: fn(c_int) -> c_int, -1);
    let id = calls::closing(fd);
    // SAFETY: the real close with the application's argument.
    let r = unsafe { f(fd) };
    close_done(id, r == 0 || errno() == libc::EINTR);
    r
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let f = next_or!(close_range: fn(c_uint, c_uint, c_int) -> c_int, -1);
    let taken =
        if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 { calls::closing_range(first, last) } else { Vec::new() };
    // SAFETY: the real close_range with the application's arguments.
    let r = unsafe { f(first, last, flags) };
    for (fd, id) in taken {
        // a failed call closed nothing: the descriptors stay tracked
        if r == 0 {
            close_done(id, true);
        } else {
            scr::transparent::fds::set(fd, id);
        }
    }
    r
}

/// `mmap` and `mmap64`: a shared mapping of a descriptor that writes a pending file is told
/// to the core before it is made (a copy of a cached file opened for an update in place is then
/// kept at its last close while a mapping of it is left: it may still write to the file; told
/// before, so another thread's close cannot come between); every other call is the real one
/// after one atomic load (a mutex for descriptors above 65,535).
macro_rules! mmap_hook {
    ($($name:ident $which:literal;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: off64_t,
        ) -> *mut c_void {
            let file = flags & libc::MAP_ANONYMOUS == 0 && flags & libc::MAP_SHARED != 0;
            if file && scr::transparent::fds::get(fd) != 0 {
                quietly(stringify!($name), || calls::mapped_shared(fd));
            }
            // SAFETY: the application's arguments, to the next mmap.
            unsafe { crate::real::mmap($which, (addr, len, prot, flags, fd, off)) }
        }
    )*};
}
mmap_hook! {
    mmap 0;
    mmap64 1;
}

fn duplicated(old: c_int, new: c_int) -> c_int {
    if new >= 0 {
        quietly("dup", || calls::duplicated(old, new));
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let f = next_or!(dup: fn(c_int) -> c_int, -1);
    // SAFETY: the real dup with the application's argument.
    duplicated(old, unsafe { f(old) })
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

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let f = next_or!(dup2: fn(c_int, c_int) -> c_int, -1);
    // SAFETY: the real dup2 with the application's arguments.
    dup_onto(old, new, || unsafe { f(old, new) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let f = next_or!(dup3: fn(c_int, c_int, c_int) -> c_int, -1);
    // SAFETY: the real dup3 with the application's arguments.
    dup_onto(old, new, || unsafe { f(old, new, flags) })
}

/// `fcntl`'s third argument is passed through as a machine word; only `F_DUPFD` is looked at.
macro_rules! fcntl_hook {
    ($($name:ident),*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
            let f = next_or!($name: fn(c_int, c_int; ...) -> c_int, -1);
            // SAFETY: the real fcntl with the application's arguments (the third as the same
            // machine word it passed).
            let r = unsafe { f(fd, cmd, arg) };
            if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC { duplicated(fd, r) } else { r }
        }
    )*};
}
fcntl_hook!(fcntl, fcntl64);

/// Writes: only a failure is looked at (it makes the dataset of a pending file invalid).
macro_rules! write_hook {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> ssize_t {
            let f = next_or!($name: fn(c_int, $($t),*) -> ssize_t, -1);
            // SAFETY: the real function with the application's arguments.
            let r = unsafe { f(fd, $($a),*) };
            if r < 0 && errno() != libc::EAGAIN && errno() != libc::EINTR {
                quietly(stringify!($name), || calls::write_failed(fd));
            }
            r
        }
    )*};
}
write_hook! {
    write(buf: *const c_void, n: size_t);
    pwrite(buf: *const c_void, n: size_t, off: off_t);
    pwrite64(buf: *const c_void, n: size_t, off: off64_t);
    writev(iov: *const libc::iovec, n: c_int);
}

/// Calls the core performs itself (both the cache and the prefix may change): renames,
/// links, removals. `paths` must be non-NULL for the core to look at the call.
macro_rules! perform_hook {
    ($($name:ident($($a:ident: $t:ty),*) paths($p:ident $(, $q:ident)?) => $core:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let f = next_or!($name: fn($($t),*) -> c_int, -1);
            // SAFETY: the real function with the application's arguments.
            let real = || unsafe { f($($a),*) };
            if $p.is_null() $(|| $q.is_null())? {
                return real();
            }
            // SAFETY: non-null here, NUL-terminated per the function's C contract.
            let old = unsafe { CStr::from_ptr($p) };
            // SAFETY: as above.
            let _new = old $(; let _new = unsafe { CStr::from_ptr($q) })?;
            let r = if !calls::concerns(old) && !calls::concerns(_new) {
                real()
            } else {
                perform(stringify!($name), $p, |r| ($core)(libc::AT_FDCWD, old, _new, r), real)
            };
            // (a renamed or removed directory may be, or hold, the working directory)
            scr::transparent::cwd_may_have_moved();
            r
        }
    )*};
}
type P = *const c_char;
perform_hook! {
    rename(o: P, n: P) paths(o, n) => |at, o, n, r| names::rename(at, o, at, n, 0, r);
    renameat(od: c_int, o: P, nd: c_int, n: P) paths(o, n) => |_, o, n, r| names::rename(od, o, nd, n, 0, r);
    renameat2(od: c_int, o: P, nd: c_int, n: P, fl: c_uint) paths(o, n) => |_, o, n, r| names::rename(od, o, nd, n, fl, r);
    link(o: P, n: P) paths(o, n) => |at, o, n, r| names::link(at, o, at, n, 0, r);
    linkat(od: c_int, o: P, nd: c_int, n: P, fl: c_int) paths(o, n) => |_, o, n, r| names::link(od, o, nd, n, fl, r);
    unlink(p: P) paths(p) => |at, p, _, r| names::unlink(at, p, r);
    unlinkat(d: c_int, p: P, fl: c_int) paths(p) => |_, p, _, r| names::unlinkat(d, p, fl, r);
    remove(p: P) paths(p) => |_, p, _, r| names::remove(p, r);
    rmdir(p: P) paths(p) => |at, p, _, r| names::rmdir(at, p, r);
    mkdir(p: P, m: mode_t) paths(p) => |at, p, _, r| names::mkdir(at, p, r);
    mkdirat(d: c_int, p: P, m: mode_t) paths(p) => |_, p, _, r| names::mkdir(d, p, r);
}

/// Calls on a path's metadata: the same call on the cached bytes when SCR holds the path
/// (`*at` forms: the cached file's absolute path replaces `dirfd` + `path`).
macro_rules! held_hook {
    ($($name:ident($($pre:ident: $pt:ty),*; $(at $dirfd:ident,)? path; $($a:ident: $t:ty),*) -> $ret:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* $($dirfd: c_int,)? path: *const c_char $(, $a: $t)*) -> $ret {
            let f = next_or!($name: fn($($pt,)* $(open_hook!(@int $dirfd),)? *const c_char $(, $t)*) -> $ret, -1);
            let _d = libc::AT_FDCWD $(; let _d = $dirfd)?;
            // SAFETY: `path` is NULL or NUL-terminated (the C contract); `f` is the real
            // function, called with the application's arguments or the core's path.
            unsafe { redirect(stringify!($name), _d, path, -1, calls::held, |p, _d| f($($pre,)* $(open_hook!(@d _d $dirfd),)? p $(, $a)*)) }
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
    fstatat(; at dirfd, path; buf: *mut libc::stat, flags: c_int) -> c_int;
    fstatat64(; at dirfd, path; buf: *mut libc::stat64, flags: c_int) -> c_int;
    __fxstatat(ver: c_int; at dirfd, path; buf: *mut libc::stat, flags: c_int) -> c_int;
    __fxstatat64(ver: c_int; at dirfd, path; buf: *mut libc::stat64, flags: c_int) -> c_int;
    faccessat(; at dirfd, path; mode: c_int, flags: c_int) -> c_int;
    statx(; at dirfd, path; flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int;
    fchmodat(; at dirfd, path; mode: mode_t, flags: c_int) -> c_int;
    fchownat(; at dirfd, path; uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int;
    futimesat(; at dirfd, path; times: *const libc::timeval) -> c_int;
    utimensat(; at dirfd, path; times: *const libc::timespec, flags: c_int) -> c_int;
    readlinkat(; at dirfd, path; buf: *mut c_char, n: size_t) -> ssize_t;
}

/// `truncate` writes a pending file; `statfs`/`statvfs` of a held file describe the prefix
/// directory holding it.
macro_rules! path_hook {
    ($($name:ident($($a:ident: $t:ty),*) via $core:path;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> c_int {
            let f = next_or!($name: fn(*const c_char $(, $t)*) -> c_int, -1);
            // SAFETY: `path` is NULL or NUL-terminated (the C contract); `f` is the real
            // function, called with the application's arguments or the core's path.
            unsafe { redirect(stringify!($name), libc::AT_FDCWD, path, -1, |_, p| $core(p), |p, _| f(p $(, $a)*)) }
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
    // SAFETY: `path` is non-null here and NUL-terminated (the caller's contract).
    if path.is_null() || !calls::concerns(unsafe { CStr::from_ptr(path) }) {
        return real();
    }
    let saved = errno();
    // SAFETY: as above.
    let p = match fence("realpath", path, || calls::realpath(unsafe { CStr::from_ptr(path) }), || None) {
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
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())) else { return real() };
    if c.as_bytes().len() >= libc::PATH_MAX as usize {
        set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    set_errno(saved);
    if resolved.is_null() {
        // SAFETY: a NUL-terminated string; the caller frees the copy (realpath's contract).
        return unsafe { libc::strdup(c.as_ptr()) };
    }
    // SAFETY: `resolved` holds PATH_MAX bytes (the caller's contract) and `c` with its NUL
    // is shorter (checked above); the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), resolved, c.as_bytes_with_nul().len()) };
    resolved
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let f = next_or!(realpath: fn(*const c_char, *mut c_char) -> *mut c_char, std::ptr::null_mut());
    // SAFETY: the application's arguments (realpath's C contract) to us and the real one.
    unsafe { realpath_with(path, resolved, || f(path, resolved)) }
}

/// glibc's fortified `realpath`.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, len: size_t) -> *mut c_char {
    let f = next_or!(__realpath_chk: fn(*const c_char, *mut c_char, size_t) -> *mut c_char, std::ptr::null_mut());
    // SAFETY: the application's arguments (realpath's C contract) to us and the real one.
    unsafe { realpath_with(path, resolved, || f(path, resolved, len)) }
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    let f = next_or!(canonicalize_file_name: fn(*const c_char) -> *mut c_char, std::ptr::null_mut());
    // SAFETY: the application's argument to us and the real one; NULL asks for a malloc'ed
    // result, as canonicalize_file_name returns.
    unsafe { realpath_with(path, std::ptr::null_mut(), || f(path)) }
}
