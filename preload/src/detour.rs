//! What every hook shares: errno, the panic fence, and the base directory of relative paths.
//!
//! A hook calls one function of `scr::transparent` inside [`fence`]: a panic there is
//! caught, logged in one line naming the hook and the path, and the hook falls back to the
//! real call (the path goes to the file system as the application named it). The default
//! panic message is suppressed for fenced panics (the one line says it all), and nothing
//! unwinds into C.

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use scr::transparent::{Call, Done, PATH_MAX};

pub fn errno() -> c_int {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(v: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v }
}

thread_local! {
    /// Fences this thread is inside (const-initialised, no destructor: usable at any time).
    static FENCED: Cell<u32> = const { Cell::new(0) };
}

/// Install the panic hook that keeps fenced panics quiet (once, at load time).
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if FENCED.try_with(|f| f.get() == 0).unwrap_or(true) {
            default(info);
        }
    }));
}

/// The application's path argument, for messages.
///
/// # Safety
/// `path` is NULL or the application's NUL-terminated argument.
pub unsafe fn shown(path: *const c_char) -> String {
    if path.is_null() {
        return "NULL".into();
    }
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(path) }.to_string_lossy().into_owned()
}

/// `core()` with the fence counted; `Err` carries a panic's payload.
fn fenced<T>(core: impl FnOnce() -> T) -> std::thread::Result<T> {
    let _ = FENCED.try_with(|f| f.set(f.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(core));
    let _ = FENCED.try_with(|f| f.set(f.get().saturating_sub(1)));
    r
}

/// The one line a caught panic leaves.
fn report(hook: &str, path: *const c_char, payload: &(dyn std::any::Any + Send)) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let _inside = scr::reentry::Inside::enter();
    // SAFETY: the hook's own path argument.
    let p = unsafe { shown(path) };
    scr::scr_error!(
        "transparent mode: internal error in {hook}({p}): {msg}; the call goes to the file system unchanged"
    );
}

/// Run `core` for hook `hook` on `path`; a panic in it logs one line and yields `fallback()`.
pub fn fence<T>(hook: &str, path: *const c_char, core: impl FnOnce() -> T, fallback: impl FnOnce() -> T) -> T {
    match fenced(core) {
        Ok(v) => v,
        Err(payload) => {
            report(hook, path, payload.as_ref());
            fallback()
        }
    }
}

/// Apply a [`Call`] decided by the core: `real(path, dirfd)` performs the real call.
///
/// # Safety
/// `path` is the application's argument; `real` calls the real function.
pub unsafe fn apply<R>(
    call: Call,
    saved: c_int,
    path: *const c_char,
    dirfd: c_int,
    fail: R,
    real: impl FnOnce(*const c_char, c_int) -> R,
) -> R {
    match call {
        Call::Pass => {
            set_errno(saved);
            real(path, dirfd)
        }
        Call::Path(p) => {
            set_errno(saved);
            real(p.as_ptr(), libc::AT_FDCWD)
        }
        Call::Fail(e) => {
            set_errno(e);
            fail
        }
    }
}

/// A path call the core may redirect (`core` decides from the path; `real(path, dirfd)`
/// performs it).
///
/// # Safety
/// `path` is NULL or the application's NUL-terminated argument.
pub unsafe fn redirect<R>(
    hook: &str,
    dirfd: c_int,
    path: *const c_char,
    fail: R,
    core: impl FnOnce(c_int, &CStr) -> Call,
    real: impl FnOnce(*const c_char, c_int) -> R,
) -> R {
    if path.is_null() || scr::transparent::routing().is_none() {
        return real(path, dirfd);
    }
    let saved = errno();
    // SAFETY: non-null, NUL-terminated per the contract.
    let p = unsafe { CStr::from_ptr(path) };
    let call = fence(hook, path, || core(dirfd, p), || Call::Pass);
    // SAFETY: per the contract.
    unsafe { apply(call, saved, path, dirfd, fail, real) }
}

/// A call the core performs itself (renames, removals, links): `real` is the application's
/// call as it is, which the core may make, and the fallback after a panic.
pub fn perform(
    hook: &str,
    path: *const c_char,
    core: impl FnOnce(&mut dyn FnMut() -> c_int) -> Done,
    mut real: impl FnMut() -> c_int,
) -> c_int {
    if path.is_null() || scr::transparent::routing().is_none() {
        return real();
    }
    let saved = errno();
    match fenced(|| core(&mut real)) {
        Ok(Ok(v)) => {
            set_errno(saved);
            v
        }
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(payload) => {
            report(hook, path, payload.as_ref());
            set_errno(saved);
            real()
        }
    }
}

/// The base directory of a relative path argument, into `buf`: the working directory for
/// `AT_FDCWD`, else the directory `dirfd` refers to (read from `/proc/self/fd`).
pub fn base(dirfd: c_int, buf: &mut [u8; PATH_MAX]) -> Option<usize> {
    if dirfd == libc::AT_FDCWD {
        // SAFETY: buf is writable for its length.
        let p = unsafe { libc::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        if p.is_null() {
            return None;
        }
        return buf.iter().position(|&b| b == 0);
    }
    if dirfd < 0 {
        return None;
    }
    let mut link = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let (mut digits, mut n, mut v) = ([0u8; 10], 0, dirfd as u32);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for (i, d) in digits[..n].iter().rev().enumerate() {
        link[14 + i] = *d;
    }
    // SAFETY: link is NUL-terminated (zero-filled), buf writable.
    let r = unsafe { libc::readlink(link.as_ptr() as *const c_char, buf.as_mut_ptr() as *mut c_char, buf.len()) };
    (r > 0 && (r as usize) < buf.len()).then_some(r as usize)
}
