//! The exported file functions. Each one takes the fast path (the real function, untouched
//! arguments) unless the process routes files and the path may be under the prefix; the
//! decisions live in [`crate::fileops`]. `open`-style functions are variadic in C: they are
//! defined here with a fixed `mode` argument, read only when `O_CREAT` or `O_TMPFILE` asks
//! for it (glibc's `__OPEN_NEEDS_MODE`), which is sound on the x86_64 and aarch64 ABIs.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};

use libc::{mode_t, off64_t, off_t, size_t, ssize_t, FILE};

use crate::fileops::{self, Plan};
use crate::real;
use crate::state::{set_errno, Errno};

fn needs_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

macro_rules! or_enosys {
    ($f:expr, $fail:expr) => {
        match $f {
            Some(f) => f,
            None => {
                set_errno(libc::ENOSYS);
                return $fail;
            }
        }
    };
}

/// Shared body of the open family: `call(path)` performs the real open on a path.
unsafe fn open_common(dirfd: c_int, path: *const c_char, flags: c_int, call: impl Fn(*const c_char) -> c_int) -> c_int {
    match fileops::plan_open(dirfd, path, flags) {
        Plan::Pass => call(path),
        Plan::Fail(e) => {
            set_errno(e);
            -1
        }
        Plan::To(p, id) => {
            let fd = call(p.as_ptr());
            let errno = Errno::save();
            fileops::opened(fd, id);
            drop(errno);
            fd
        }
    }
}

macro_rules! open_hook {
    ($name:ident) => {
        /// # Safety
        /// C `open` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            let mode = if needs_mode(flags) { mode } else { 0 };
            open_common(libc::AT_FDCWD, path, flags, |p| f(p, flags, mode as c_uint))
        }
    };
}
open_hook!(open);
open_hook!(open64);

macro_rules! openat_hook {
    ($name:ident) => {
        /// # Safety
        /// C `openat` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            let mode = if needs_mode(flags) { mode } else { 0 };
            open_common(dirfd, path, flags, |p| {
                let d = if p == path { dirfd } else { libc::AT_FDCWD };
                f(d, p, flags, mode as c_uint)
            })
        }
    };
}
openat_hook!(openat);
openat_hook!(openat64);

macro_rules! creat_hook {
    ($name:ident) => {
        /// # Safety
        /// C `creat` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            open_common(libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, |p| f(p, mode))
        }
    };
}
creat_hook!(creat);
creat_hook!(creat64);

macro_rules! open2_hook {
    ($name:ident) => {
        /// # Safety
        /// glibc `_FORTIFY_SOURCE` open contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            open_common(libc::AT_FDCWD, path, flags, |p| f(p, flags))
        }
    };
}
open2_hook!(__open_2);
open2_hook!(__open64_2);

macro_rules! openat2_hook {
    ($name:ident) => {
        /// # Safety
        /// glibc `_FORTIFY_SOURCE` openat contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            open_common(dirfd, path, flags, |p| {
                let d = if p == path { dirfd } else { libc::AT_FDCWD };
                f(d, p, flags)
            })
        }
    };
}
openat2_hook!(__openat_2);
openat2_hook!(__openat64_2);

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

unsafe fn fopen_common(
    path: *const c_char,
    mode: *const c_char,
    call: impl Fn(*const c_char) -> *mut FILE,
) -> *mut FILE {
    match fileops::plan_open(libc::AT_FDCWD, path, mode_flags(mode)) {
        Plan::Pass => call(path),
        Plan::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Plan::To(p, id) => {
            let fp = call(p.as_ptr());
            let errno = Errno::save();
            let fd = if fp.is_null() { -1 } else { libc::fileno(fp) };
            fileops::opened(fd, id);
            drop(errno);
            fp
        }
    }
}

macro_rules! fopen_hook {
    ($name:ident) => {
        /// # Safety
        /// C `fopen` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let f = or_enosys!(real::$name(), std::ptr::null_mut());
            fopen_common(path, mode, |p| f(p, mode))
        }
    };
}
fopen_hook!(fopen);
fopen_hook!(fopen64);

macro_rules! freopen_hook {
    ($name:ident) => {
        /// # Safety
        /// C `freopen` contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char, stream: *mut FILE) -> *mut FILE {
            let f = or_enosys!(real::$name(), std::ptr::null_mut());
            // the stream's old descriptor is closed inside (no close hook sees it)
            let old = if stream.is_null() { -1 } else { libc::fileno(stream) };
            let tag = if path.is_null() { 0 } else { fileops::take_fd(old) };
            let fp = fopen_common(path, mode, |p| f(p, mode, stream));
            let errno = Errno::save();
            fileops::closed(tag, true);
            drop(errno);
            fp
        }
    };
}
freopen_hook!(freopen);
freopen_hook!(freopen64);

/// # Safety
/// C `fclose` contract.
#[no_mangle]
pub unsafe extern "C" fn fclose(fp: *mut FILE) -> c_int {
    let f = or_enosys!(real::fclose(), libc::EOF);
    let tag = if fp.is_null() { 0 } else { fileops::take_fd(libc::fileno(fp)) };
    let r = f(fp);
    let errno = Errno::save();
    fileops::closed(tag, r == 0);
    drop(errno);
    r
}

/// # Safety
/// C `close` contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let f = or_enosys!(real::close(), -1);
    let tag = fileops::take_fd(fd);
    let r = f(fd);
    if tag != 0 {
        let errno = Errno::save();
        fileops::closed(tag, r == 0 || errno_is(libc::EINTR));
        drop(errno);
    }
    r
}

fn errno_is(e: c_int) -> bool {
    crate::state::get_errno() == e
}

/// # Safety
/// C `close_range` contract.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let f = or_enosys!(real::close_range(), -1);
    let hi = last.min(1 << 16);
    let mut tags = Vec::new();
    if crate::state::owner().is_some() && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        for fd in first..=hi.max(first) {
            let t = fileops::take_fd(fd as c_int);
            if t != 0 {
                tags.push(t);
            }
        }
    }
    let r = f(first, last, flags);
    let errno = Errno::save();
    for t in tags {
        fileops::closed(t, true);
    }
    drop(errno);
    r
}

/// # Safety
/// C `dup` contract.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let f = or_enosys!(real::dup(), -1);
    let new = f(old);
    let errno = Errno::save();
    fileops::duplicated(old, new);
    drop(errno);
    new
}

unsafe fn dup_onto(old: c_int, new: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if old == new {
        return call();
    }
    let tag = fileops::take_fd(new);
    let r = call();
    let errno = Errno::save();
    if r >= 0 {
        fileops::closed(tag, true);
        fileops::duplicated(old, r);
    } else if tag != 0 {
        crate::state::fd_set(new, tag);
    }
    drop(errno);
    r
}

/// # Safety
/// C `dup2` contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let f = or_enosys!(real::dup2(), -1);
    dup_onto(old, new, || f(old, new))
}

/// # Safety
/// C `dup3` contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let f = or_enosys!(real::dup3(), -1);
    dup_onto(old, new, || f(old, new, flags))
}

macro_rules! fcntl_hook {
    ($name:ident) => {
        /// # Safety
        /// C `fcntl` contract; the third argument is passed through as a machine word.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            let r = f(fd, cmd, arg);
            if (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) && r >= 0 {
                let errno = Errno::save();
                fileops::duplicated(fd, r);
                drop(errno);
            }
            r
        }
    };
}
fcntl_hook!(fcntl);
fcntl_hook!(fcntl64);

macro_rules! write_hook {
    ($name:ident ($($a:ident: $t:ty),*)) => {
        /// # Safety
        /// C contract of the function of this name; only a failure is looked at.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> ssize_t {
            let f = or_enosys!(real::$name(), -1);
            let r = f(fd, $($a),*);
            if r < 0 && !errno_is(libc::EAGAIN) && !errno_is(libc::EINTR) {
                let errno = Errno::save();
                fileops::write_failed(fd);
                drop(errno);
            }
            r
        }
    };
}
write_hook!(write(buf: *const c_void, n: size_t));
write_hook!(pwrite(buf: *const c_void, n: size_t, off: off_t));
write_hook!(pwrite64(buf: *const c_void, n: size_t, off: off64_t));
write_hook!(writev(iov: *const libc::iovec, n: c_int));

/// # Safety
/// C `rename` contract.
#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    let f = or_enosys!(real::rename(), -1);
    fileops::rename(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0, || f(old, new))
}

/// # Safety
/// C `renameat` contract.
#[no_mangle]
pub unsafe extern "C" fn renameat(od: c_int, old: *const c_char, nd: c_int, new: *const c_char) -> c_int {
    let f = or_enosys!(real::renameat(), -1);
    fileops::rename(od, old, nd, new, 0, || f(od, old, nd, new))
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
    let f = or_enosys!(real::renameat2(), -1);
    if flags & libc::RENAME_EXCHANGE != 0 {
        return f(od, old, nd, new, flags);
    }
    fileops::rename(od, old, nd, new, flags, || f(od, old, nd, new, flags))
}

/// # Safety
/// C `unlink` contract.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    let f = or_enosys!(real::unlink(), -1);
    fileops::unlink(libc::AT_FDCWD, path, || f(path))
}

/// # Safety
/// C `unlinkat` contract.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let f = or_enosys!(real::unlinkat(), -1);
    if flags & libc::AT_REMOVEDIR != 0 {
        return f(dirfd, path, flags);
    }
    fileops::unlink(dirfd, path, || f(dirfd, path, flags))
}

/// # Safety
/// C `remove` contract.
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    let f = or_enosys!(real::remove(), -1);
    fileops::unlink(libc::AT_FDCWD, path, || f(path))
}

/// Metadata calls: the same call on the cached file when SCR holds the path.
macro_rules! meta_hook {
    ($name:ident ($($pre:ident: $pt:ty),*; path; $($a:ident: $t:ty),*)) => {
        /// # Safety
        /// C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* path: *const c_char $(, $a: $t)*) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            match fileops::held_path(libc::AT_FDCWD, path) {
                Some(p) => f($($pre,)* p.as_ptr() $(, $a)*),
                None => f($($pre,)* path $(, $a)*),
            }
        }
    };
}
meta_hook!(stat(; path; buf: *mut libc::stat));
meta_hook!(stat64(; path; buf: *mut libc::stat64));
meta_hook!(lstat(; path; buf: *mut libc::stat));
meta_hook!(lstat64(; path; buf: *mut libc::stat64));
meta_hook!(__xstat(ver: c_int; path; buf: *mut libc::stat));
meta_hook!(__xstat64(ver: c_int; path; buf: *mut libc::stat64));
meta_hook!(__lxstat(ver: c_int; path; buf: *mut libc::stat));
meta_hook!(__lxstat64(ver: c_int; path; buf: *mut libc::stat64));
meta_hook!(access(; path; mode: c_int));

/// `*at` metadata calls: the cached file's absolute path replaces `dirfd` + `path`.
macro_rules! meta_at_hook {
    ($name:ident ($($pre:ident: $pt:ty),*; dirfd, path; $($a:ident: $t:ty),*)) => {
        /// # Safety
        /// C contract of the function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($pre: $pt,)* dirfd: c_int, path: *const c_char $(, $a: $t)*) -> c_int {
            let f = or_enosys!(real::$name(), -1);
            match fileops::held_path(dirfd, path) {
                Some(p) => f($($pre,)* libc::AT_FDCWD, p.as_ptr() $(, $a)*),
                None => f($($pre,)* dirfd, path $(, $a)*),
            }
        }
    };
}
meta_at_hook!(fstatat(; dirfd, path; buf: *mut libc::stat, flags: c_int));
meta_at_hook!(fstatat64(; dirfd, path; buf: *mut libc::stat64, flags: c_int));
meta_at_hook!(__fxstatat(ver: c_int; dirfd, path; buf: *mut libc::stat, flags: c_int));
meta_at_hook!(__fxstatat64(ver: c_int; dirfd, path; buf: *mut libc::stat64, flags: c_int));
meta_at_hook!(faccessat(; dirfd, path; mode: c_int, flags: c_int));
meta_at_hook!(statx(; dirfd, path; flags: c_int, mask: c_uint, buf: *mut libc::statx));
