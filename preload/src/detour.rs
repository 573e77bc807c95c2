//! What every hook shares: errno, the panic fence, and the base directory of relative paths.
//!
//! A hook calls one function of `scr::transparent` inside [`fence`]: a panic there is
//! caught, logged in one line naming the hook and the path, and the hook falls back to the
//! real call (the path goes to the file system as the application named it). The default
//! panic message is suppressed for fenced panics, and nothing unwinds into C.

use std::cell::{Cell, RefCell};
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

/// Run `core` for hook `hook` on `path`; a panic in it logs one line and yields `fallback()`.
/// Its time is counted as a call of `hook` when `SCR_PRELOAD_TIMING=1`
/// (`scr::transparent::timing`).
pub fn fence<T>(hook: &'static str, path: *const c_char, core: impl FnOnce() -> T, fallback: impl FnOnce() -> T) -> T {
    fence_as(hook, path, core, fallback, true)
}

/// [`fence`]; `call`: its time counts as a call of `hook` (else as more time of the call that
/// an earlier fence of the same hook counted).
fn fence_as<T>(
    hook: &'static str,
    path: *const c_char,
    core: impl FnOnce() -> T,
    fallback: impl FnOnce() -> T,
    call: bool,
) -> T {
    let _ = FENCED.try_with(|f| f.set(f.get() + 1));
    let t0 = scr::transparent::timing::start();
    let r = catch_unwind(AssertUnwindSafe(core));
    if call {
        scr::transparent::timing::record(hook, t0);
    } else {
        scr::transparent::timing::record_more(hook, t0);
    }
    let _ = FENCED.try_with(|f| f.set(f.get().saturating_sub(1)));
    let payload = match r {
        Ok(v) => return v,
        Err(p) => p,
    };
    let msg =
        payload.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| payload.downcast_ref::<String>().cloned());
    // SAFETY: the hook's own path argument, NULL or NUL-terminated.
    let p = if path.is_null() { "".into() } else { unsafe { CStr::from_ptr(path) }.to_string_lossy() };
    let _inside = scr::reentry::Inside::enter();
    scr::transparent::internal_error(hook, &p, &msg.unwrap_or_default());
    fallback()
}

/// Bookkeeping after a real call (`f` tells the core what happened): fenced, errno kept.
pub fn quietly(hook: &'static str, f: impl FnOnce()) {
    quietly_as(hook, f, true)
}

/// [`quietly`], for the bookkeeping of a call whose decision [`fence`] already counted: its
/// time adds to that call's.
pub fn quietly_after(hook: &'static str, f: impl FnOnce()) {
    quietly_as(hook, f, false)
}

fn quietly_as(hook: &'static str, f: impl FnOnce(), call: bool) {
    let e = errno();
    fence_as(hook, std::ptr::null(), f, || (), call);
    set_errno(e);
}

/// Apply a [`Call`] decided by the core (`saved`: errno before the hook); `real(path,
/// dirfd)` performs the real call.
pub fn apply<R>(
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
    hook: &'static str,
    dirfd: c_int,
    path: *const c_char,
    fail: R,
    core: impl FnOnce(c_int, &CStr) -> Call,
    real: impl FnOnce(*const c_char, c_int) -> R,
) -> R {
    // SAFETY: non-null, NUL-terminated per the contract.
    if path.is_null() || !scr::transparent::calls::concerns(unsafe { CStr::from_ptr(path) }) {
        return real(path, dirfd);
    }
    let saved = errno();
    // SAFETY: as above.
    let call = fence(hook, path, || core(dirfd, unsafe { CStr::from_ptr(path) }), || Call::Pass);
    apply(call, saved, path, dirfd, fail, real)
}

/// A call the core performs itself (renames, links, removals): `real` is the application's
/// call as it is, which the core may make, and the fallback after a panic.
pub fn perform(
    hook: &'static str,
    path: *const c_char,
    core: impl FnOnce(&mut dyn FnMut() -> c_int) -> Done,
    mut real: impl FnMut() -> c_int,
) -> c_int {
    if scr::transparent::routing().is_none() {
        return real();
    }
    let saved = errno();
    let mut panicked = false;
    let r = fence(
        hook,
        path,
        || core(&mut real),
        || {
            panicked = true;
            Ok(0)
        },
    );
    set_errno(saved);
    match r {
        _ if panicked => real(),
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Longest working directory path a thread keeps ([`base`]); a longer one is read each time.
const CWD_KEPT: usize = 512;

thread_local! {
    /// This thread's copy of the working directory's path: (the generation it was read at,
    /// its length, its bytes). Const-initialised, no destructor: usable in any hook.
    static CWD: RefCell<(u64, usize, [u8; CWD_KEPT])> = const { RefCell::new((u64::MAX, 0, [0; CWD_KEPT])) };
}

/// The base directory of a relative path argument, into `buf`: the working directory for
/// `AT_FDCWD`, else the directory `dirfd` refers to (read from `/proc/self/fd`). The working
/// directory is read with `getcwd` once per thread and kept until
/// `scr::transparent::cwd_generation` moves on (the `chdir`/`fchdir` hooks, renames and
/// removals move it); a relative path under the prefix then costs no system call to resolve.
pub fn base(dirfd: c_int, buf: &mut [u8; PATH_MAX]) -> Option<usize> {
    if dirfd == libc::AT_FDCWD {
        // (read before getcwd: a change after it makes the copy stale, never the reverse)
        let generation = scr::transparent::cwd_generation();
        let kept = CWD.try_with(|c| {
            let c = c.try_borrow().ok()?;
            (c.0 == generation).then(|| {
                buf[..c.1].copy_from_slice(&c.2[..c.1]);
                c.1
            })
        });
        if let Ok(Some(n)) = kept {
            return Some(n);
        }
        // SAFETY: buf is writable for its length.
        let p = unsafe { libc::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
        let n = if p.is_null() { None } else { buf.iter().position(|&b| b == 0) }?;
        if n <= CWD_KEPT {
            let _ = CWD.try_with(|c| {
                if let Ok(mut c) = c.try_borrow_mut() {
                    c.0 = generation;
                    c.1 = n;
                    c.2[..n].copy_from_slice(&buf[..n]);
                }
            });
        }
        return Some(n);
    }
    if dirfd < 0 {
        return None;
    }
    let mut link = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let (mut digits, mut n, mut v) = ([0u8; 10], 0, dirfd as u32);
    while n == 0 || v > 0 {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
    }
    for (i, d) in digits[..n].iter().rev().enumerate() {
        link[14 + i] = *d;
    }
    // SAFETY: link is NUL-terminated (zero-filled), buf writable.
    let r = unsafe { libc::readlink(link.as_ptr() as *const c_char, buf.as_mut_ptr() as *mut c_char, buf.len()) };
    (r > 0 && (r as usize) < buf.len()).then_some(r as usize)
}
